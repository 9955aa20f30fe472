"""Packed RL log-prob passes against independent references: each row run alone without padding (log-softmax in
NumPy), the full-width pass's values and gradients, and a plan checked slot by slot in plain Python."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tunix_lit.models import transformer as tfm
from tunix_lit.rl import common

V = 40


@pytest.fixture(scope="module")
def model():
    return tfm.Transformer(tfm.ModelConfig.from_name("tiny-qwen3", vocab_size=V), rngs=nnx.Rngs(3))


def mixed_batch(seed=0, B=8, P=5, T=10):
    """Ragged prompts (1..P tokens) and completions as GRPO's come (one full, one empty, the rest short), padded as the
    learner pads them."""
    r = np.random.default_rng(seed)
    prompts = [list(r.integers(1, V, r.integers(1, P + 1))) for _ in range(B)]
    lengths = [T, 0] + list(r.integers(1, T // 2 + 1, B - 2))
    completions = [list(r.integers(1, V, n)) for n in lengths]
    pi, pm = common.pad_rows(prompts, P, left=True)
    ci, cm = common.pad_rows(completions, T)
    return prompts, completions, (pi, pm, ci, cm)


forward = nnx.jit(lambda m, ids: m(ids)[0])  # plain positions 0.., causal attention only: no mask, no segments


def alone_numpy(model, prompts, completions):
    """Each row's completion log-probs from a pass over that row alone, starting at slot 0, log-softmax in float64.

    Rows are right-padded to one width so one program serves them all: under causal attention a token never sees the
    slots after it, so those pads change nothing it reads."""
    width = max(len(p) + len(c) for p, c in zip(prompts, completions))
    ids = np.zeros((len(prompts), width), np.int32)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, :len(p) + len(c)] = p + c
    logits = np.asarray(forward(model, jnp.asarray(ids)), np.float64)
    z = logits - logits.max(-1, keepdims=True)
    lsm = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return [[lsm[i, len(p) - 1 + t, tok] for t, tok in enumerate(c)]
            for i, (p, c) in enumerate(zip(prompts, completions))]


def test_packed_logps_match_each_row_run_alone(model):
    prompts, completions, arrays = mixed_batch()
    plan = common.plan_packing(arrays[1], arrays[3])
    assert plan["pack_src"].shape[0] < len(prompts)  # it really packed
    got = np.asarray(nnx.jit(lambda m, a, plan: common.compute_completion_logps(m, *a, packing=plan))(
        model, tuple(map(jnp.asarray, arrays)), plan))
    for b, want in enumerate(alone_numpy(model, prompts, completions)):
        np.testing.assert_allclose(got[b, :len(want)], want, rtol=1e-4, atol=1e-4)
        assert np.all(got[b, len(want):] == 0)  # untrained slots are exactly 0


@pytest.mark.parametrize("chunk_size", [None, pytest.param(4, marks=pytest.mark.slow)])  # 4: the chunked head
def test_packed_logps_entropy_and_gradients_equal_the_full_width_pass(model, chunk_size):
    _, _, arrays = mixed_batch(seed=1)
    args = tuple(map(jnp.asarray, arrays))
    plan = common.plan_packing(arrays[1], arrays[3])
    w = jax.random.normal(jax.random.key(0), arrays[2].shape)

    def loss(m, packing):
        lp, ent = common.compute_completion_logps(m, *args, temperature=0.7, return_entropy=True,
                                                  chunk_size=chunk_size, packing=packing)
        return (lp * w).sum() + 0.1 * ent.sum(), (lp, ent)

    step = nnx.jit(nnx.value_and_grad(loss, has_aux=True))
    (l_full, (lp_full, ent_full)), g_full = step(model, None)
    (l_pack, (lp_pack, ent_pack)), g_pack = step(model, plan)
    np.testing.assert_allclose(np.asarray(lp_pack), np.asarray(lp_full), rtol=1e-5, atol=2e-5)
    np.testing.assert_allclose(np.asarray(ent_pack), np.asarray(ent_full), rtol=1e-5, atol=2e-5)
    np.testing.assert_allclose(float(l_pack), float(l_full), rtol=1e-5)
    for a, b in zip(jax.tree.leaves(g_pack), jax.tree.leaves(g_full)):
        scale = float(jnp.abs(b).max()) + 1e-6
        np.testing.assert_allclose(np.asarray(a) / scale, np.asarray(b) / scale, atol=1e-4)


def test_attention_never_crosses_a_segment(model):
    _, _, arrays = mixed_batch(seed=2)
    plan = common.plan_packing(arrays[1], arrays[3])
    seg = plan["pack_segment_ids"]
    r = int(np.argmax((seg.max(1))))  # the packed row holding the most segments
    assert seg[r].max() >= 2
    victim = int(plan["pack_src"][r][seg[r] == 1][0]) // (arrays[0].shape[1] + arrays[2].shape[1])
    pi, ci = arrays[0].copy(), arrays[2].copy()
    pi[victim] = np.where(arrays[1][victim] > 0, (pi[victim] + 7) % (V - 1) + 1, 0)
    ci[victim] = np.where(arrays[3][victim] > 0, (ci[victim] + 7) % (V - 1) + 1, 0)
    logps = nnx.jit(lambda m, a, plan: common.compute_completion_logps(m, *a, packing=plan))
    before = np.asarray(logps(model, tuple(map(jnp.asarray, arrays)), plan))
    after = np.asarray(logps(model, tuple(map(jnp.asarray, (pi, arrays[1], ci, arrays[3]))), plan))
    others = np.arange(len(pi)) != victim
    np.testing.assert_array_equal(after[others], before[others])
    if arrays[3][victim].any():
        assert np.abs(after[victim] - before[victim]).max() > 1e-3


def test_plan_holds_each_real_token_once_in_order():
    """Checked slot by slot: a packed segment is its row's real tokens (less the last) with positions 0, 1, ...; the
    completion slot t of row i reads the packed slot holding the token just before it."""
    _, _, (pi, pm, ci, cm) = mixed_batch(seed=3, B=9)
    plan = common.plan_packing(pm, cm, multiple=2)
    R, L = plan["pack_src"].shape
    assert R % 2 == 0 and L == pi.shape[1] + ci.shape[1]
    width = pi.shape[1] + ci.shape[1]
    full_mask = np.concatenate([pm, cm], 1)
    seen = {}
    for r in range(R):
        for s in range(L):
            if plan["pack_segment_ids"][r, s]:
                row, slot = divmod(int(plan["pack_src"][r, s]), width)
                seen.setdefault(row, []).append((slot, int(plan["pack_positions"][r, s]), r * L + s,
                                                 int(plan["pack_segment_ids"][r, s])))
    for i in range(len(pi)):
        real = [j for j in range(width) if full_mask[i, j]]
        if not cm[i].any():
            assert i not in seen
            continue
        got = seen[i]
        assert [g[0] for g in got] == real[:-1]
        assert [g[1] for g in got] == list(range(len(real) - 1))
        assert len({g[3] for g in got}) == 1
        where = {g[0]: g[2] for g in got}
        for t in range(ci.shape[1]):
            if cm[i, t]:
                assert plan["pack_dst"][i, t] == where[pi.shape[1] + t - 1]


def test_bad_inputs_are_refused_by_name(model):
    _, _, (pi, pm, ci, cm) = mixed_batch(seed=4)
    with pytest.raises(ValueError, match="more than length=6"):
        common.plan_packing(pm, cm, length=6)
    with pytest.raises(ValueError, match="rows=1 is too few"):
        common.plan_packing(pm, cm, rows=1)
    holed = cm.copy()
    holed[0, 3] = 0
    with pytest.raises(ValueError, match="row 0: completion slot 4 follows a padding slot"):
        common.plan_packing(pm, holed)
    with pytest.raises(ValueError, match=r"must be \[B, P\] and \[B, T\]"):
        common.plan_packing(pm[:3], cm)
    with pytest.raises(ValueError, match="multiple must be a positive int"):
        common.plan_packing(pm, cm, multiple=0)
    plan = common.plan_packing(pm, cm)
    args = tuple(map(jnp.asarray, (pi, pm, ci, cm)))
    with pytest.raises(ValueError, match="pass one of them"):
        common.compute_completion_logps(model, *args, packing=plan, group_size=2)
    with pytest.raises(ValueError, match="a plan belongs to one batch"):
        common.compute_completion_logps(model, *(a[:3] for a in args), packing=plan)


# ---------------------------------------------------------------- the learner's switch

def grpo_step(pack: bool, micro: list, mu: int = 1):
    """One global step of GRPO on hand-made micro-batches through the learner's consumer; (params, actor metrics)."""
    import optax
    import queue

    from tunix_lit.data import arith
    from tunix_lit.models import tiny
    from tunix_lit.rl import learner as rl
    from tunix_lit.rl.cluster import RLCluster, RolloutConfig
    from tunix_lit.rl.grpo import GRPOConfig, GRPOLearner

    model, tok = tiny.load()
    cluster = RLCluster(model, tok, rollout_config=RolloutConfig(max_new_tokens=4, max_prompt_length=6,
                                                                 measure_logp_gap=False))
    cfg = rl.RLTrainingConfig(batch_size=2 * len(micro), mini_batch_size=2 * len(micro), train_micro_batch_size=2,
                              max_steps=1, progress_bar=False, pack_sequences=pack)
    learner = GRPOLearner(cluster, optax.sgd(1e-1), cfg, GRPOConfig(num_generations=4, beta=0.0, num_iterations=mu),
                          reward_fns=[arith.reward])
    q = queue.Queue()
    for mb in micro:
        q.put(("micro", mb))
    q.put(("end", {"data_position": 0, "metrics": {}}))
    out = learner._consume_step(q)
    params = [np.asarray(x) for x in jax.tree.leaves(nnx.state(learner.trainer.model, nnx.Param))]
    return params, {k: v for k, v in out["metrics"].items() if k.startswith("actor/")}, learner


def grpo_micro(seed, V=19):  # the tiny model's vocabulary
    """A GRPO micro-batch of 8 rows (2 prompts × G = 4) with completions of mixed lengths and signed advantages."""
    r = np.random.default_rng(seed)
    prompts = [list(r.integers(3, V, r.integers(2, 7)))] * 4 + [list(r.integers(3, V, r.integers(2, 7)))] * 4
    completions = [list(r.integers(3, V, n)) for n in r.integers(1, 13, 8)]
    pi, pm = common.pad_rows(prompts, 6, left=True)
    ci, cm = common.pad_rows(completions, 12)
    adv = r.normal(size=8).astype(np.float32)
    return dict(prompt_ids=pi, prompt_mask=pm, completion_ids=ci, completion_mask=cm, advantages=adv)


@pytest.mark.slow  # two learners, two compiled train steps: about 15 s
def test_a_grpo_step_with_packing_equals_the_step_without():
    from tunix_lit.models import tiny

    micro = [grpo_micro(0), grpo_micro(1)]  # one update accumulating two micro-batches
    p_off, m_off, _ = grpo_step(False, micro)
    start = [np.asarray(x) for x in jax.tree.leaves(nnx.state(tiny.load()[0], nnx.Param))]
    assert max(float(np.abs(a - b).max()) for a, b in zip(p_off, start)) > 1e-4  # the update really moved them
    p_on, m_on, learner = grpo_step(True, micro)
    assert learner.trainer._shapes and None not in learner.trainer._shapes  # the packed path really ran
    np.testing.assert_allclose(m_on["actor/loss"], m_off["actor/loss"], rtol=1e-5)
    np.testing.assert_allclose(m_on["actor/grad_norm"], m_off["actor/grad_norm"], rtol=1e-4)
    for a, b in zip(p_on, p_off):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_packed_row_counts_come_in_a_few_buckets():
    from tunix_lit.rl import learner as rl

    micro = [grpo_micro(s) for s in range(2)]
    packed = rl.attach_packing(micro, buckets=4)  # 8 rows: counts are multiples of 2
    R = {len(mb["pack_src"]) for mb in packed}
    assert len(R) == 1 and R.pop() % 2 == 0  # one shape for the update's stacked micro-batches
    sizes = {len(rl.attach_packing([grpo_micro(s)], buckets=4, data_parallel=4)[0]["pack_src"]) for s in range(12)}
    assert sizes <= {4, 8}  # multiples of max(⌈8 / 4⌉, 4 devices)
    with pytest.raises(TypeError, match="pack_sequences must be True or False"):
        rl.RLTrainingConfig(pack_sequences="yes")
