"""RL common numerics against independent references: NumPy loops, unpadded forward passes, hand-derived values."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tunix_lit.models import transformer as tfm
from tunix_lit.rl import common

PAD, EOS = 0, 2
# A TPU's float32 exp / log agree with float64 to about 1e-4 relative (a CPU's to about 1e-7): the formula tests
# below keep their CPU tolerance and widen to that on a TPU (seen there: up to 9.7e-5).
TRANSCENDENTAL = dict(rtol=2e-4, atol=1e-5) if jax.default_backend() == "tpu" else {}


# ---------------------------------------------------------------- per-token log-probs

def _np_logp_entropy(logits, tokens, temperature):
    """Per position: stable log-softmax by hand, in float64."""
    logits = np.asarray(logits, np.float64)
    B, T, V = logits.shape
    logp, ent = np.zeros((B, T)), np.zeros((B, T))
    for b in range(B):
        for t in range(T):
            z = logits[b, t] / temperature
            zmax = max(z)
            lse = zmax + math.log(sum(math.exp(v - zmax) for v in z))
            logp[b, t] = z[tokens[b, t]] - lse
            ent[b, t] = -sum(math.exp(v - lse) * (v - lse) for v in z)
    return logp, ent


@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.7])
def test_per_token_logps_and_entropy_match_numpy(temperature):
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 3, (2, 4, 13)).astype(np.float32)
    tokens = rng.integers(0, 13, (2, 4))
    lp, ent = common.per_token_logps(jnp.asarray(logits), jnp.asarray(tokens), temperature=temperature,
                                     return_entropy=True)
    want_lp, want_ent = _np_logp_entropy(logits, tokens, temperature)
    assert lp.dtype == jnp.float32
    np.testing.assert_allclose(lp, want_lp, **({"atol": 1e-5} | TRANSCENDENTAL))
    np.testing.assert_allclose(ent, want_ent, **({"atol": 1e-5} | TRANSCENDENTAL))


def test_per_token_logps_of_bfloat16_logits_are_float32():
    logits = jnp.asarray(np.random.default_rng(1).normal(size=(1, 2, 7)), jnp.bfloat16)
    lp = common.per_token_logps(logits, jnp.array([[1, 3]]))
    assert lp.dtype == jnp.float32
    want, _ = _np_logp_entropy(np.asarray(logits.astype(jnp.float32)), np.array([[1, 3]]), 1.0)
    np.testing.assert_allclose(lp, want, **({"atol": 1e-5} | TRANSCENDENTAL))


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_temperature_is_rejected(bad):
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        common.per_token_logps(jnp.zeros((1, 1, 3)), jnp.zeros((1, 1), jnp.int32), temperature=bad)


def test_positions_count_real_tokens_before_each_slot():
    mask = np.array([[0, 0, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0], [0, 1, 0, 1, 1, 1]])
    want = np.zeros_like(mask)
    for b in range(mask.shape[0]):
        seen = 0
        for t in range(mask.shape[1]):
            want[b, t] = max(seen + mask[b, t] - 1, 0)
            seen += mask[b, t]
    np.testing.assert_array_equal(common.positions_from_mask(jnp.asarray(mask)), want)


# ---------------------------------------------------------------- log-probs under a model

@pytest.fixture(scope="module")
def tiny():
    return tfm.Transformer(tfm.ModelConfig.from_name("tiny-qwen3", vocab_size=32), rngs=nnx.Rngs(0))


_forward = nnx.jit(lambda model, ids: model(ids)[0])

# row 1's completion holds a real token equal to the pad id (upstream quirk 6); row 2 has no EOS
PROMPTS = [[1, 7, 8, 9], [1, 5], [1, 6, 6]]
COMPLETIONS = [[11, 12, EOS], [13, PAD, 14, EOS], [15, 16, 17, 18, 19]]


def _batch():
    p, pm = common.pad_rows(PROMPTS, 5, PAD, left=True)
    c, cm = common.pad_rows(COMPLETIONS, 6, PAD)
    return tuple(jnp.asarray(a) for a in (p, pm, c, cm))


def _unpadded_reference(model, temperature):
    """Each row alone, no padding at all: log_softmax (NumPy, float64) of the full forward pass's logits."""
    out = []
    for p, c in zip(PROMPTS, COMPLETIONS):
        logits = np.asarray(_forward(model, jnp.asarray([p + c])), np.float64)[0] / temperature
        row = []
        for t, tok in enumerate(c):
            z = logits[len(p) - 1 + t]
            lse = z.max() + np.log(np.exp(z - z.max()).sum())
            row.append(z[tok] - lse)
        out.append(row)
    return out


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_completion_logps_equal_log_softmax_of_unpadded_forward(tiny, temperature):
    lp = nnx.jit(lambda m, *b: common.compute_completion_logps(m, *b, temperature=temperature))(tiny, *_batch())
    assert lp.shape == (3, 6) and lp.dtype == jnp.float32
    for b, want in enumerate(_unpadded_reference(tiny, temperature)):
        np.testing.assert_allclose(lp[b, :len(want)], want, rtol=1e-5, atol=1e-4)
        assert (np.asarray(lp[b, len(want):]) == 0).all(), "masked slots must be exactly 0"


def test_chunked_head_gives_the_same_logps_entropy_and_gradients(tiny):
    batch = _batch()

    def total(model, chunk):
        lp, ent = common.compute_completion_logps(model, *batch, return_entropy=True, chunk_size=chunk)
        return lp.sum() + 0.1 * ent.sum(), (lp, ent)

    step = nnx.jit(nnx.value_and_grad(total, has_aux=True), static_argnums=1)
    (v_full, (lp_full, ent_full)), g_full = step(tiny, None)
    (v_chunk, (lp_chunk, ent_chunk)), g_chunk = step(tiny, 4)  # 6 slots = one chunk of 4 + one padded chunk
    np.testing.assert_allclose(lp_chunk, lp_full, atol=1e-5)
    np.testing.assert_allclose(ent_chunk, ent_full, atol=1e-5)
    for a, b in zip(jax.tree.leaves(g_chunk), jax.tree.leaves(g_full)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # by default test_chunked_head_gives_the_same_logps_entropy_and_gradients checks the chunked gradients
def test_a_frozen_heads_chunked_gradient_equals_one_pass_and_skips_the_recompute(tiny):
    """Gradients for every weight but the (tied) head, as in a LoRA step: through a chunked head they equal one pass's,
    with or without the entropy's gradient, and the gradient program passes over the vocabulary twice, not three times."""
    batch = _batch()
    body = nnx.All(nnx.Param, nnx.Not(nnx.PathContains("embedder")))  # the head's table stays a constant

    def total(m, chunk, ent_weight):
        lp, ent = common.compute_completion_logps(m, *batch, return_entropy=True, chunk_size=chunk, temperature=0.7)
        return (lp * jnp.arange(1.0, 7.0)).sum() + ent_weight * ent.sum(), (lp, ent)

    step = nnx.jit(nnx.value_and_grad(total, argnums=nnx.DiffState(0, body), has_aux=True), static_argnums=(1, 2))
    for ent_weight in (0.0, 0.3):  # 0.3: the entropy's gradient is wanted, so each chunk's logits are recomputed
        (v1, (lp1, ent1)), g1 = step(tiny, None, ent_weight)
        (v4, (lp4, ent4)), g4 = step(tiny, 4, ent_weight)  # 6 slots: chunks of 4 and 2 (padded to 4)
        np.testing.assert_allclose(lp4, lp1, atol=1e-5)
        np.testing.assert_allclose(ent4, ent1, atol=1e-5)
        leaves = jax.tree.leaves(g1)
        assert leaves and "embedder" not in str(jax.tree_util.tree_structure(g1))
        for a, b in zip(jax.tree.leaves(g4), leaves):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)

    hidden = jax.random.normal(jax.random.key(0), (3, 7, tiny.config.embed_dim))
    y = jax.random.randint(jax.random.key(1), (3, 7), 0, tiny.config.vocab_size)
    loss = lambda m, h: (common._head_logps(m, h, y, 0.7, False, 3) ** 2).sum()  # not linear: the values are kept
    frozen = jax.jit(jax.value_and_grad(lambda h: loss(tiny, h))).lower(hidden).as_text()
    gdef, state = nnx.split(tiny)
    trained = jax.jit(jax.value_and_grad(lambda s, h: loss(nnx.merge(gdef, s), h), argnums=(0, 1)))
    trained = trained.lower(state, hidden).as_text()
    assert frozen.count("dot_general") == 2  # the logits and the row gradient, both in the forward pass
    assert trained.count("dot_general") == 4  # logits, their recompute, and the products for h and the table


@pytest.mark.parametrize("batch,length,vocab,budget,want", [
    (3, 6, 19, 1000, 3),  # 228 bytes a slot: 4 fit in 1000, so two chunks, of 3 each (not 4 + 2 padded to 4)
    (3, 6, 19, 10_000, None),  # all 6 slots fit: one pass
    (128, 4, 262_144, 256 * 2 ** 20, 2),  # 128 MiB a slot under a 256 MiB budget
    (1024, 4, 262_144, 256 * 2 ** 20, 1),  # one slot alone is over the budget: still one at a time
    (8, 128, 151_936, 256 * 2 ** 20, 43),  # the TPU benchmark's rollout: 55 slots fit; 3 chunks of 43, not 3 of 55
])
def test_auto_chunk_size_is_the_fewest_equal_slices_within_the_budget(batch, length, vocab, budget, want):
    assert common.auto_chunk_size(batch, length, vocab, budget) == want
    if want is not None:
        per_slot = batch * vocab * 4
        widest = max(1, budget // per_slot)  # the most slots one chunk may hold
        assert want <= widest and -(-length // want) == -(-length // widest)  # as few chunks as the widest would take
        assert -(-length // want) * want - length < -(-length // want)  # fewer padded slots than chunks


def test_auto_chunking_follows_the_budget_and_changes_no_value(tiny, monkeypatch):
    """The default chunk_size="auto" chunks once the logits pass LOGITS_CHUNK_BYTES, with the one-pass values."""
    batch = _batch()
    seen = []
    sized = common.auto_chunk_size
    monkeypatch.setattr(common, "auto_chunk_size", lambda *a, **k: seen.append((a, sized(*a, **k))) or seen[-1][1])
    full = common.compute_completion_logps(tiny, *batch, return_entropy=True, chunk_size=None)
    assert seen == []  # None: one pass, no sizing
    monkeypatch.setattr(common, "LOGITS_CHUNK_BYTES", 2 * 3 * tiny.config.vocab_size * 4)  # two slots of 3 rows
    auto = common.compute_completion_logps(tiny, *batch, return_entropy=True)
    assert seen == [((3, 6, tiny.config.vocab_size), 2)]  # six slots in chunks of two
    for a, b in zip(auto, full):
        np.testing.assert_allclose(a, b, atol=1e-5)
    with pytest.raises(ValueError, match="chunk_size must be"):
        common.compute_completion_logps(tiny, *batch, chunk_size="big")


# two passes' values are also checked by default by the sliding-window test below and chapter 20 (one = two)
@pytest.mark.parametrize("route", ["one pass", pytest.param("two passes", marks=pytest.mark.slow)])
def test_a_group_sharing_its_prompt_gives_the_unpadded_logps_and_the_full_pass_gradients(tiny, route, monkeypatch):
    """group_size=G (each prompt run once: one row [prompt | G completions], or a repeated cache) = per-row unpadded
    NumPy log-probs, and the full pass's entropy and gradients, with siblings whose completions differ."""
    G = 2
    if route == "two passes":  # no group row is short enough for one pass
        monkeypatch.setattr(common, "SHARED_PREFIX_MAX_SLOTS", 0)
    taken = []
    for name in ("_shared_prefix_hidden", "_cached_prompt_hidden"):
        fn = getattr(common, name)
        monkeypatch.setattr(common, name, lambda *a, fn=fn, name=name: taken.append(name) or fn(*a))
    prompts = [p for p in PROMPTS for _ in range(G)]
    completions = [c if i % G == 0 else c[1:] for i, c in enumerate(c for c in COMPLETIONS for _ in range(G))]
    p, pm = common.pad_rows(prompts, 5, PAD, left=True)
    c, cm = common.pad_rows(completions, 6, PAD)
    batch = tuple(jnp.asarray(a) for a in (p, pm, c, cm))

    def total(model, group):
        lp, ent = common.compute_completion_logps(model, *batch, temperature=0.7, return_entropy=True, group_size=group)
        return lp.sum() + 0.1 * ent.sum(), (lp, ent)

    step = nnx.jit(nnx.value_and_grad(total, has_aux=True), static_argnums=1)
    (_, (lp_full, ent_full)), g_full = step(tiny, 1)
    (_, (lp, ent)), g = step(tiny, G)
    for b, (pr, co) in enumerate(zip(prompts, completions)):
        logits = np.asarray(_forward(tiny, jnp.asarray([pr + co])), np.float64)[0] / 0.7
        for t, tok in enumerate(co):
            z = logits[len(pr) - 1 + t]
            assert float(lp[b, t]) == pytest.approx(z[tok] - z.max() - np.log(np.exp(z - z.max()).sum()), abs=1e-4)
        assert (np.asarray(lp[b, len(co):]) == 0).all()
    np.testing.assert_allclose(ent, ent_full, atol=1e-5)
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_full)):  # the G copies are summed in another order
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * float(np.abs(b).max()))
    assert set(taken) == {"_shared_prefix_hidden" if route == "one pass" else "_cached_prompt_hidden"}
    with pytest.raises(ValueError, match="group_size=2 does not divide the 3 rows"):
        common.compute_completion_logps(tiny, *(a[:3] for a in batch), group_size=G)


@pytest.mark.parametrize("window,one_pass", [(4, False), (64, True)])
def test_a_group_row_crossing_a_sliding_window_takes_two_passes(window, one_pass):
    """With sliding-window layers, one pass only while the group's row fits the window (a window counts slots);
    either way the log-probs are the full pass's (itself checked against NumPy above)."""
    model = tfm.Transformer(tfm.ModelConfig.from_name("tiny-gemma3", vocab_size=32, sliding_window=window),
                            rngs=nnx.Rngs(1))
    G = 2
    prompts = [p for p in PROMPTS[:2] for _ in range(G)]
    completions = [[11, 12, EOS], [13, 14], [15, 16, 17, 18], [19, EOS]]
    p, pm = common.pad_rows(prompts, 4, PAD, left=True)
    c, cm = common.pad_rows(completions, 4, PAD)
    assert common._one_pass_fits(model, 4, 4, G) == one_pass  # the row holds 4 + 2 * 4 = 12 slots
    logps = nnx.jit(lambda m, group, *b: common.compute_completion_logps(m, *b, group_size=group), static_argnums=1)
    batch = tuple(map(jnp.asarray, (p, pm, c, cm)))
    np.testing.assert_allclose(logps(model, G, *batch), logps(model, 1, *batch), atol=1e-5)


def test_one_pass_holds_one_copy_of_the_model(tiny, monkeypatch):
    """The grouped log-prob program's matrix products: one pass has the full pass's count, two passes twice it."""
    G = 2
    prompts = [p for p in PROMPTS for _ in range(G)]
    completions = [c for c in COMPLETIONS for _ in range(G)]
    p, pm = common.pad_rows(prompts, 4, PAD, left=True)
    c, cm = common.pad_rows(completions, 5, PAD)
    batch = tuple(jnp.asarray(a) for a in (p, pm, c, cm))

    def products(group):
        fn = nnx.jit(lambda m: common.compute_completion_logps(m, *batch, group_size=group).sum())
        return fn.lower(tiny).as_text().count("stablehlo.dot_general")

    # one pass only while attention over the row is at most twice the two passes' (P + G·T)(P + T)
    assert common._one_pass_fits(tiny, 24, 4, 8) and not common._one_pass_fits(tiny, 32, 64, 4)
    full, one = products(1), products(G)
    monkeypatch.setattr(common, "SHARED_PREFIX_MAX_SLOTS", 0)
    two = products(G)
    assert one == full and two > full


# ---------------------------------------------------------------- completion masks

@pytest.mark.parametrize("ids,want", [
    ([11, EOS, 12, 13], [1, 1, 0, 0]),       # EOS in the middle: included, nothing after
    ([11, 12, 13, EOS], [1, 1, 1, 1]),       # EOS at the end
    ([11, 12, 13, 14], [1, 1, 1, 1]),        # no EOS: every generated token
    ([PAD, 11, EOS, PAD], [1, 1, 1, 0]),     # a real token equal to the pad id stays trained
    ([EOS, EOS, 11, 12], [1, 0, 0, 0]),      # only the first EOS counts
])
def test_completion_mask_trains_up_to_and_including_first_eos(ids, want):
    np.testing.assert_array_equal(common.make_completion_mask(jnp.asarray([ids]), EOS), [want])


def test_completion_mask_respects_lengths_and_several_stop_ids():
    ids = jnp.asarray([[11, 12, 13, 14, 15], [11, 3, 12, 2, 0], [11, 12, 0, 0, 0]])
    mask = common.make_completion_mask(ids, [EOS, 3], lengths=jnp.asarray([5, 5, 3]))
    np.testing.assert_array_equal(mask, [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]])
    assert mask.dtype == jnp.int32


def test_completion_mask_matches_length_mask_from_pad_rows():
    ids, by_length = common.pad_rows(COMPLETIONS, 7, PAD)
    np.testing.assert_array_equal(common.make_completion_mask(ids, EOS, lengths=by_length.sum(-1)), by_length)
    assert by_length[1].tolist() == [1, 1, 1, 1, 0, 0, 0]  # ids != pad would have dropped slot 1


# ---------------------------------------------------------------- padding

def test_pad_rows_left_and_right():
    ids, mask = common.pad_rows([[5, 6], [7], []], 3, -1, left=True)
    np.testing.assert_array_equal(ids, [[-1, 5, 6], [-1, -1, 7], [-1, -1, -1]])
    np.testing.assert_array_equal(mask, [[0, 1, 1], [0, 0, 1], [0, 0, 0]])
    ids, mask = common.pad_rows([[5, 6], [7]], 3, 0)
    np.testing.assert_array_equal(ids, [[5, 6, 0], [7, 0, 0]])
    np.testing.assert_array_equal(mask, [[1, 1, 0], [1, 0, 0]])
    vals, _ = common.pad_rows([[-0.5, -1.5]], 3, 0.0, dtype=np.float32)
    assert vals.dtype == np.float32 and vals.tolist() == [[-0.5, -1.5, 0.0]]


def test_pad_rows_too_long_is_an_error_unless_truncating():
    with pytest.raises(ValueError, match="row 1 has 4 entries, more than length=3"):
        common.pad_rows([[1], [1, 2, 3, 4]], 3, 0)
    np.testing.assert_array_equal(common.pad_rows([[1, 2, 3, 4]], 3, 0, truncate=True)[0], [[1, 2, 3]])
    np.testing.assert_array_equal(common.pad_rows([[1, 2, 3, 4]], 3, 0, left=True, truncate=True)[0], [[2, 3, 4]])


@pytest.mark.parametrize("xp", [np, jnp])
def test_pad_to_length_pads_and_truncates_on_either_side(xp):
    x = xp.asarray([[1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(common.pad_to_length(x, 5, 9), [[1, 2, 3, 9, 9], [4, 5, 6, 9, 9]])
    np.testing.assert_array_equal(common.pad_to_length(x, 5, 9, left=True), [[9, 9, 1, 2, 3], [9, 9, 4, 5, 6]])
    np.testing.assert_array_equal(common.pad_to_length(x, 2), [[1, 2], [4, 5]])
    np.testing.assert_array_equal(common.pad_to_length(x, 2, left=True), [[2, 3], [5, 6]])
    np.testing.assert_array_equal(common.pad_to_length(x, 3, axis=0), [[1, 2, 3], [4, 5, 6], [0, 0, 0]])
    assert isinstance(common.pad_to_length(x, 4), np.ndarray) == (xp is np)


# ---------------------------------------------------------------- KL estimators

def _np_kl(logp, ref, name):
    """From probabilities and r = p_ref / p_theta, element by element."""
    out = np.zeros(np.shape(logp))
    for i, (a, b) in enumerate(zip(np.ravel(logp), np.ravel(ref))):
        r = math.exp(b) / math.exp(a)
        out.flat[i] = {"k1": -math.log(r), "k2": 0.5 * math.log(r) ** 2, "k3": r - 1 - math.log(r)}[name]
    return out


@pytest.mark.parametrize("name,alias", [("k1", "kl"), ("k2", "mse_kl"), ("k3", "low_var_kl")])
def test_kl_estimators_match_their_definitions(name, alias):
    rng = np.random.default_rng(2)
    logp = np.log(rng.uniform(0.05, 1.0, (3, 5))).astype(np.float32)
    ref = np.log(rng.uniform(0.05, 1.0, (3, 5))).astype(np.float32)
    want = _np_kl(logp.astype(np.float64), ref.astype(np.float64), name)
    tol = {"rtol": 1e-5, "atol": 1e-6} | TRANSCENDENTAL
    np.testing.assert_allclose(common.compute_kl(jnp.asarray(logp), jnp.asarray(ref), name), want, **tol)
    np.testing.assert_allclose(common.compute_kl(jnp.asarray(logp), jnp.asarray(ref), alias), want, **tol)


def test_k1_and_k3_are_unbiased_and_k3_has_lower_variance():
    """Sampling from p_theta (NumPy), the sample means approach the exact KL(p_theta || p_ref); with the two
    distributions close (as a KL penalty keeps them), k3's spread is a fraction of k1's."""
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(20))
    q = p * np.exp(rng.normal(0, 0.3, 20))
    q /= q.sum()
    exact = sum(p[i] * math.log(p[i] / q[i]) for i in range(20))
    draws = rng.choice(20, size=200_000, p=p)
    lp, lq = jnp.asarray(np.log(p)[draws]), jnp.asarray(np.log(q)[draws])
    k1, k3 = common.compute_kl(lp, lq, "k1"), common.compute_kl(lp, lq, "k3")
    assert abs(float(k1.mean()) - exact) < 0.01 and abs(float(k3.mean()) - exact) < 0.01
    assert float(k3.std()) < 0.5 * float(k1.std()) and float(k3.min()) >= 0


def test_kl_clamp_and_k3_overflow_guard():
    lp, ref = jnp.array([[-60.0, -1.0]]), jnp.array([[-1.0, -60.0]])
    assert np.isfinite(np.asarray(common.compute_kl(lp, ref, "k3"))).all()
    np.testing.assert_allclose(common.compute_kl(lp, ref, "k1", clamp=5.0), [[-5.0, 5.0]])


def test_unknown_kl_estimator_lists_the_choices():
    with pytest.raises(ValueError, match=r"unknown KL estimator 'k4'.*choose one of: k1, k2, k3"):
        common.compute_kl(jnp.zeros(2), jnp.zeros(2), "k4")


# ---------------------------------------------------------------- loss aggregation

def _np_aggregate(x, m, mode, norm=None):
    B, T = len(x), len(x[0])
    sums = [sum(x[b][t] * m[b][t] for t in range(T)) for b in range(B)]
    counts = [sum(m[b]) for b in range(B)]
    rows = sum(1 for c in counts if c)
    if mode == "token-mean":
        return sum(sums) / max(sum(counts), 1)
    if mode == "sequence-mean-token-mean":
        return sum(s / c for s, c in zip(sums, counts) if c) / max(rows, 1)
    if mode == "sequence-mean-token-scale":
        return sum(s / (norm or T) for s in sums) / max(rows, 1)
    if mode == "sequence-mean-token-sum":
        return sum(sums) / max(rows, 1)
    if mode == "sequence-mean-token-sum-norm":
        return sum(sums) / (norm or B)
    raise AssertionError(mode)


MODES = ["token-mean", "sequence-mean-token-mean", "sequence-mean-token-scale", "sequence-mean-token-sum",
         "sequence-mean-token-sum-norm"]


def test_the_five_modes_are_registered():
    assert common.LOSS_AGG_MODES.names() == tuple(sorted(MODES))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("norm", [None, 3.5])
def test_aggregation_matches_numpy_loops_with_an_empty_row(mode, norm):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(4, 6))
    m = (rng.uniform(size=(4, 6)) < 0.6).astype(np.int32)
    m[2] = 0
    got = common.aggregate_loss(jnp.asarray(x, jnp.float32), jnp.asarray(m), mode, norm=norm)
    np.testing.assert_allclose(float(got), _np_aggregate(x, m, mode, norm), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode,norm,want", [
    ("token-mean", None, 1.8 / 5),
    ("sequence-mean-token-mean", None, (0.3 / 2 + 1.5 / 3) / 2),
    ("sequence-mean-token-scale", None, (0.3 / 3 + 1.5 / 3) / 2),
    ("sequence-mean-token-scale", 3.14, (0.3 / 3.14 + 1.5 / 3.14) / 2),
    ("sequence-mean-token-sum", None, 1.8 / 2),
    ("sequence-mean-token-sum-norm", None, 1.8 / 2),
    ("sequence-mean-token-sum-norm", 4.0, 1.8 / 4),
])
def test_aggregation_hand_worked_values(mode, norm, want):
    """x = [[.1,.2,.3],[.4,.5,.6]], m = [[1,1,0],[1,1,1]]: row sums .3 and 1.5 over 2 and 3 tokens."""
    x = jnp.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]])
    m = jnp.array([[1, 1, 0], [1, 1, 1]])
    assert float(common.aggregate_loss(x, m, mode, norm=norm)) == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_all_zero_mask_gives_zero_not_nan(mode):
    assert float(common.aggregate_loss(jnp.ones((2, 3)), jnp.zeros((2, 3)), mode)) == 0.0


def test_token_mean_parts_accumulate_over_micro_batches_like_one_batch():
    rng = np.random.default_rng(5)
    x, m = rng.normal(size=(6, 5)).astype(np.float32), (rng.uniform(size=(6, 5)) < 0.7).astype(np.int32)
    parts = [common.aggregate_loss_parts(jnp.asarray(x[i:i + 2]), jnp.asarray(m[i:i + 2]), "token-mean") for i in (0, 2, 4)]
    accumulated = sum(float(n) for n, _ in parts) / sum(float(d) for _, d in parts)
    assert accumulated == pytest.approx(_np_aggregate(x, m, "token-mean"), rel=1e-5)


def test_aggregation_errors_name_the_problem():
    x, m = jnp.ones((2, 3)), jnp.ones((2, 3))
    with pytest.raises(ValueError, match=r"unknown loss aggregation mode 'token_mean' \(did you mean 'token-mean'\?\)"):
        common.aggregate_loss(x, m, "token_mean")
    with pytest.raises(ValueError, match="norm must be a positive number"):
        common.aggregate_loss(x, m, "sequence-mean-token-sum-norm", norm=-1)
    with pytest.raises(ValueError, match=r"must both be \[B, T\]"):
        common.aggregate_loss(x, m[:, :2], "token-mean")
    assert float(common.aggregate_loss(x, m, "seq-mean-token-sum")) == 3.0  # upstream spelling is an alias


def test_aggregation_keeps_float64_for_gradient_checks():
    with jax.enable_x64(True):
        out = common.aggregate_loss(jnp.ones((2, 3), jnp.float64), jnp.ones((2, 3)), "token-mean")
        assert out.dtype == jnp.float64


# ---------------------------------------------------------------- the batch type and the registry

def _example(B=2, P=3, T=4, **kw):
    base = dict(prompt_ids=jnp.zeros((B, P), jnp.int32), prompt_mask=jnp.ones((B, P), jnp.int32),
                completion_ids=jnp.zeros((B, T), jnp.int32), completion_mask=jnp.ones((B, T), jnp.int32),
                advantages=jnp.arange(B, dtype=jnp.float32))
    return common.TrainExample(**{**base, **kw})


def test_train_example_is_a_pytree_that_jits_and_slices():
    ex = _example(B=4, old_logps=jnp.ones((4, 4)))
    out = jax.jit(lambda e: e.replace(advantages=e.advantages * 2))(ex)
    np.testing.assert_array_equal(out.advantages, [0, 2, 4, 6])
    half = jax.tree.map(lambda a: a[2:], ex)
    assert half.batch_size == 2 and half.ref_logps is None and half.old_logps.shape == (2, 4)
    assert len(jax.tree.leaves(ex)) == 6  # None fields have no leaves
    with pytest.raises(Exception):
        ex.advantages = None  # frozen


def test_train_example_validate_names_the_field_and_axes():
    _example(advantages=jnp.zeros((2, 4))).validate()
    with pytest.raises(ValueError, match=r"ref_logps has shape \(2, 5\), expected \(2, 4\)"):
        _example(ref_logps=jnp.zeros((2, 5))).validate()
    with pytest.raises(ValueError, match="advantages has shape"):
        _example(advantages=jnp.zeros((3,))).validate()


def test_registry_rejects_silent_replacement_but_allows_overwrite():
    reg = common.Registry("thing")

    @reg.register("a", aliases=("alpha",))
    def first():
        return 1

    with pytest.raises(ValueError, match="thing 'a' is already registered"):
        reg.register("a")(lambda: 2)
    with pytest.raises(ValueError, match="thing 'alpha' is already registered"):
        reg.register("b", aliases=("alpha",))(lambda: 2)
    reg.register("a", overwrite=True)(lambda: 3)
    assert reg.get("a")() == 3 and reg.get("alpha")() == 3 and "alpha" in reg and "b" not in reg
    with pytest.raises(ValueError, match=r"unknown thing 'c'; choose one of: a \(aliases: alpha\)"):
        reg.get("c")
