"""The cluster's packed log-prob passes (reference, rollout, actor) against the full-width pass and against each row run
alone with a float64 log-softmax in NumPy; the compiled programs stay within the row-count buckets; a learner that packs
packs them, and a GRPO step with a KL term gives the same update packed or not."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tunix_lit.models import tiny
from tunix_lit.rl import common
from tunix_lit.rl.cluster import RLCluster, Role, Rollout, RolloutConfig

V, P, T, TEMP = 19, 6, 10, 0.7  # the tiny model's vocabulary; prompt and completion widths; a temperature ≠ 1


@pytest.fixture(scope="module")
def cluster():
    model, tok = tiny.load()
    return RLCluster(model, tok, reference="actor",
                     rollout_config=RolloutConfig(max_new_tokens=T, max_prompt_length=P, temperature=TEMP,
                                                  measure_logp_gap=False))


def mixed_rollout(seed, B=8):
    """B rows with ragged prompts and completions (one full, one empty), padded as `generate` pads them."""
    r = np.random.default_rng(seed)
    prompts = [list(r.integers(3, V, r.integers(1, P + 1))) for _ in range(B)]
    completions = [list(r.integers(3, V, n)) for n in [T, 0] + list(r.integers(1, T + 1, B - 2))]
    pi, pm = common.pad_rows(prompts, P, left=True)
    ci, cm = common.pad_rows(completions, T)
    return prompts, completions, Rollout(pi, pm, ci, cm, None, [], None)


def alone_float64(model, prompt, completion):
    """One row's completion log-probs from the model run on that row's tokens alone (no padding), in float64 NumPy."""
    ids = jnp.asarray([prompt + completion], jnp.int32)
    logits = np.asarray(nnx.jit(lambda m, x: m(x)[0])(model, ids), np.float64)[0] / TEMP
    z = logits - logits.max(-1, keepdims=True)
    lsm = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return np.array([lsm[len(prompt) - 1 + t, tok] for t, tok in enumerate(completion)])


def test_packed_reference_and_old_logps_equal_the_full_width_pass(cluster):
    prompts, completions, ro = mixed_rollout(0)
    full = np.asarray(cluster.reference_logps(ro, micro_batch_size=4, pack_buckets=0))
    # before any update the reference, the rollout's weights and the actor are the same weights
    for score in (cluster.reference_logps, cluster.rollout_logps):
        packed = np.asarray(score(ro, micro_batch_size=4, pack_buckets=4))
        np.testing.assert_allclose(packed, full, rtol=1e-5, atol=2e-6)
        assert np.all(packed[ro.completion_mask == 0] == 0)
    assert (Role.REFERENCE, 1, True) in cluster._logps_fns and (Role.ROLLOUT, 1, True) in cluster._logps_fns
    plan = cluster._pack_plan(Role.REFERENCE, ro.prompt_mask[:4], ro.completion_mask[:4], 4)
    assert plan["pack_src"].shape[0] < 4  # the pass really ran fewer rows
    row = 2  # a ragged row: left pads before its prompt, right pads after its completion
    want = alone_float64(cluster.reference, prompts[row], completions[row])
    np.testing.assert_allclose(packed[row, :len(want)], want, rtol=1e-4, atol=1e-4)


def test_the_cluster_setting_packs_calls_that_do_not_say(cluster, monkeypatch):
    _, _, ro = mixed_rollout(1)
    full = np.asarray(cluster.reference_logps(ro, micro_batch_size=4))
    planned = []
    plan = RLCluster._pack_plan
    monkeypatch.setattr(RLCluster, "_pack_plan", lambda self, *a: planned.append(a[3]) or plan(self, *a))
    cluster.pack_buckets = 3
    try:
        packed = np.asarray(cluster.reference_logps(ro, micro_batch_size=4))
        assert planned == [3, 3]  # each micro-batch planned, with the cluster's buckets
        np.testing.assert_allclose(packed, full, rtol=1e-5, atol=2e-6)
        once = np.asarray(cluster.reference_logps(ro, micro_batch_size=4, group_size=2))  # a prompt-once request ...
        assert planned == [3] * 4  # ... packs instead, as the loss's pass does
        np.testing.assert_allclose(once, full, rtol=1e-5, atol=2e-6)
        with pytest.raises(ValueError, match="pass one of them"):
            cluster.reference_logps(ro, group_size=2, pack_buckets=4)
        with pytest.raises(ValueError, match="pack_buckets must be a positive integer"):
            plan(cluster, Role.REFERENCE, ro.prompt_mask, ro.completion_mask, -1)
    finally:
        cluster.pack_buckets = 0


def test_packed_passes_compile_at_most_one_program_a_bucket(cluster):
    r = np.random.default_rng(2)
    counts = set()
    for seed in range(16):  # lengths from nearly empty to full: both row counts a plan can need
        _, _, ro = mixed_rollout(seed, B=4)
        keep = np.arange(T) < r.integers(0, T + 1, (4, 1))
        ro.completion_mask = (ro.completion_mask * keep).astype(np.int32)
        ro.completion_ids = ro.completion_ids * ro.completion_mask
        counts.add(cluster._pack_plan(Role.ACTOR, ro.prompt_mask, ro.completion_mask, 2)["pack_src"].shape[0])
        cluster.actor_logps(ro, pack_buckets=2)
    programs = cluster._logps_fns[(Role.ACTOR, 1, True)][2]._cache_size()
    assert counts == {2, 4}  # multiples of ⌈4 / 2⌉: both met
    assert programs == 2  # one program a row count, however many batches


def test_a_learner_that_packs_sets_the_cluster():
    import optax

    from tunix_lit.rl import learner as rl
    from tunix_lit.rl.grpo import GRPOConfig, GRPOLearner

    model, tok = tiny.load()
    cl = RLCluster(model, tok, rollout_config=RolloutConfig(max_new_tokens=4, max_prompt_length=6))
    for pack, want in ((True, rl.PACK_BUCKETS), (False, 0)):
        cfg = rl.RLTrainingConfig(batch_size=2, max_steps=1, progress_bar=False, pack_sequences=pack)
        GRPOLearner(cl, optax.sgd(1e-2), cfg, GRPOConfig(num_generations=2, beta=0.0),
                    reward_fns=[lambda **_: 0.0])
        assert cl.pack_buckets == want


def grpo_run(pack: bool):
    """One global step of GRPO with a KL term (β > 0) and μ = 2 on arithmetic prompts: (params, micro-batches, cluster)."""
    import optax

    from tunix_lit.data import arith
    from tunix_lit.rl import learner as rl
    from tunix_lit.rl.grpo import GRPOConfig, GRPOLearner

    model, tok = tiny.load()
    cl = RLCluster(model, tok, reference="actor",
                   rollout_config=RolloutConfig(max_new_tokens=6, max_prompt_length=8, temperature=1.0))
    cfg = rl.RLTrainingConfig(batch_size=4, max_steps=1, progress_bar=False, pack_sequences=pack)
    algo = GRPOConfig(num_generations=4, beta=0.1, num_iterations=2)  # prompt-once on a CPU: packing replaces it
    learner = GRPOLearner(cl, optax.sgd(1e-1), cfg, algo, reward_fns=[arith.reward])
    rows = arith.sample(arith.ArithConfig(), 4, "train", seed=5)
    micro, _ = learner.make_experience(rows, step=0, chunk=0)
    learner.train(rows)
    return [np.asarray(x) for x in jax.tree.leaves(nnx.state(learner.trainer.model, nnx.Param))], micro, cl


@pytest.mark.slow  # two learners, their log-prob passes and train steps compiled: over 5 s
def test_a_grpo_step_with_kl_packed_equals_unpacked():
    p_off, m_off, _ = grpo_run(False)
    p_on, m_on, cl = grpo_run(True)
    assert (Role.REFERENCE, 1, True) in cl._logps_fns and (Role.ROLLOUT, 1, True) in cl._logps_fns  # packed
    for a, b in zip(m_on, m_off):
        np.testing.assert_array_equal(a["completion_ids"], b["completion_ids"])  # the same samples
        for k in ("ref_logps", "old_logps"):
            np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=2e-6)
    start = [np.asarray(x) for x in jax.tree.leaves(nnx.state(tiny.load()[0], nnx.Param))]
    assert max(float(np.abs(a - b).max()) for a, b in zip(p_off, start)) > 1e-4  # the step really moved them
    for a, b in zip(p_on, p_off):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.slow  # two PPO learners' experience: several compiled passes
def test_ppo_experience_packed_equals_unpacked():
    import optax

    from tunix_lit.data import arith
    from tunix_lit.rl.learner import RLTrainingConfig
    from tunix_lit.rl.ppo import PPOConfig, PPOLearner, critic_from

    rows = arith.sample(arith.ArithConfig(), 8, "train", seed=6)
    out = {}
    for pack in (False, True):
        model, tok = tiny.load()
        cl = RLCluster(model, tok, reference="actor", critic=critic_from(model, head_init_std=0.02),
                       rollout_config=RolloutConfig(max_new_tokens=6, max_prompt_length=8, temperature=1.0))
        cfg = RLTrainingConfig(batch_size=8, max_steps=1, progress_bar=False, pack_sequences=pack)
        learner = PPOLearner(cl, optax.adam(1e-3), cfg, PPOConfig(beta=0.05), reward_fns=[arith.reward])
        out[pack] = learner.make_experience(rows, step=0, chunk=0)[0]
        assert ((Role.REFERENCE, 1, True) in cl._logps_fns) == pack
    for a, b in zip(out[True], out[False]):
        np.testing.assert_array_equal(a["completion_ids"], b["completion_ids"])
        for k in ("old_logps", "advantages", "returns"):
            np.testing.assert_allclose(a[k], b[k], rtol=1e-4, atol=1e-5)
