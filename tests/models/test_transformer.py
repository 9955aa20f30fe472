"""The decoder: numerics against NumPy, KV cache against full recompute, sharding against one device."""
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from tunix_lit.models import transformer as tf

FAMILIES = ["tiny-qwen3", "tiny-gemma3", "tiny-llama3"]


def _tokens(batch=3, length=12, vocab=512, seed=0):
    return jnp.asarray(np.random.default_rng(seed).integers(3, vocab, size=(batch, length)), jnp.int32)


def _left_pad(tokens, pads):
    """Left-pad row i by pads[i] zeros (total length unchanged: the row's tail is dropped). Returns tokens, mask."""
    B, T = tokens.shape
    mask = np.ones((B, T), bool)
    out = np.zeros((B, T), np.int32)
    for i, p in enumerate(pads):
        out[i, p:] = np.asarray(tokens[i, : T - p])
        mask[i, :p] = False
    return jnp.asarray(out), jnp.asarray(mask)


def _positions(mask):
    return jnp.maximum(jnp.cumsum(mask, axis=1) - 1, 0)


@pytest.mark.parametrize("name,count", [
    ("gemma3-270m", 268_098_176), ("gemma3-1b", 999_885_952), ("qwen3-0.6b", 596_049_920),
    ("qwen3-1.7b", 1_720_574_976), ("llama3.2-1b", 1_235_814_400), ("llama3.2-3b", 3_212_749_824)])
def test_real_presets_have_the_published_parameter_counts(name, count):
    """Counts as reported by the released checkpoints (HF num_parameters, tied heads counted once)."""
    model = nnx.eval_shape(lambda: tf.Transformer(tf.ModelConfig.from_name(name), rngs=nnx.Rngs(0)))
    assert sum(math.prod(x.shape) for x in jax.tree.leaves(nnx.state(model))) == count


def test_rmsnorm_matches_numpy_both_conventions():
    x = np.random.default_rng(0).normal(size=(4, 16)).astype(np.float32)
    w = np.random.default_rng(1).normal(size=16).astype(np.float32)
    for zero_centered, factor in [(False, w), (True, 1.0 + w)]:
        norm = tf.RMSNorm(16, eps=1e-5, zero_centered=zero_centered, param_dtype=jnp.float32, rngs=nnx.Rngs(0))
        norm.scale[...] = jnp.asarray(w)
        expected = x / np.sqrt(np.mean(x ** 2, axis=-1, keepdims=True) + 1e-5) * factor
        np.testing.assert_allclose(np.asarray(norm(jnp.asarray(x))), expected, rtol=1e-5, atol=1e-5)


def test_rope_matches_complex_rotation():
    """Half-split RoPE is multiplication of (x_i + i x_{i+H/2}) by exp(i * pos * theta^(-2i/H))."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 3, 8)).astype(np.float32)
    pos = rng.integers(0, 50, size=(2, 5))
    z = x[..., :4] + 1j * x[..., 4:]
    freq = np.array([10_000.0 ** (-2 * i / 8) for i in range(4)])
    rotated = z * np.exp(1j * pos[:, :, None, None] * freq)
    expected = np.concatenate([rotated.real, rotated.imag], axis=-1)
    got = tf.apply_rope(jnp.asarray(x), jnp.asarray(pos), tf.rope_frequencies(8, 10_000.0))
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-4, atol=1e-4)


def _fusions_evaluating(op: str, hlo: str) -> list:
    """Element count of each fusion's output whose fused computation contains `op` (e.g. 'sine'), from compiled HLO text."""
    bodies = {m.group(1): m.group(2) for m in re.finditer(r"^%([\w.\-]+) \(.*?\) -> .*? \{\n(.*?)\n\}", hlo, re.S | re.M)}
    sizes = []
    for m in re.finditer(r"= (\(.*?\)|\w+\[[\d,]*\]\S*) fusion\(.*?calls=%([\w.\-]+)", hlo):
        if f" {op}(" in bodies.get(m.group(2), ""):
            dims = re.findall(r"\[([\d,]*)\]", m.group(1))
            sizes.append(max(math.prod(int(d) for d in ds.split(",") if d) for ds in dims))
    return sizes


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the sin/cos table is kept apart on the CPU backend only")
def test_rope_evaluates_sin_and_cos_once_per_slot_and_frequency_on_a_cpu():
    """Compiled for a CPU, sin and cos run in a loop of [2, B, T, H/2] elements, not inside the per-head rotation."""
    B, T, N, H = 2, 8, 4, 16
    rope = jax.jit(lambda x, p: tf.apply_rope(x, p, tf.rope_frequencies(H, 10_000.0)))
    hlo = rope.lower(jax.ShapeDtypeStruct((B, T, N, H), jnp.float32),
                     jax.ShapeDtypeStruct((B, T), jnp.int32)).compile().as_text()
    for op in ("sine", "cosine"):
        sizes = _fusions_evaluating(op, hlo)
        assert sizes and max(sizes) <= 2 * B * T * (H // 2), (op, sizes)


def test_llama3_rope_scaling_matches_a_loop_over_frequencies():
    scaling = tf.RopeScaling("llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position=8192)
    got = tf.rope_frequencies(128, 500_000.0, scaling)
    for i, f in enumerate(500_000.0 ** (-np.arange(0, 128, 2) / 128)):
        wavelength = 2 * math.pi / f
        if wavelength < 8192 / 4:
            want = f
        elif wavelength > 8192 / 1:
            want = f / 8
        else:
            s = (8192 / wavelength - 1) / (4 - 1)
            want = (1 - s) * f / 8 + s * f
        assert got[i] == pytest.approx(want, rel=1e-12)


# every family with the modules' own projections, and Qwen 3 with the fused layout that also transposes down (it
# runs both concatenated kernels), by default; the plain fused layout and the other families' with -m slow (the
# fusion is the same code for each family)
@pytest.mark.parametrize("name,fused", [(n, False) for n in FAMILIES] + [(FAMILIES[0], "down_t")]
                         + [pytest.param(FAMILIES[0], True, marks=pytest.mark.slow)]
                         + [pytest.param(n, f, marks=pytest.mark.slow) for n in FAMILIES[1:] for f in (True, "down_t")])
def test_incremental_decoding_equals_full_forward(name, fused):
    """Prefill 5 left-padded tokens, then decode one at a time (with concatenated projections, also with the down
    kernel as [D, F], or the modules' own): every position matches a full pass."""
    cfg = tf.ModelConfig.from_name(name)
    model = tf.Transformer(cfg, rngs=nnx.Rngs(1))
    tokens, mask = _left_pad(_tokens(3, 12), [0, 2, 4])
    positions = _positions(mask)
    full, none_cache = model(tokens, positions, None, mask)
    assert none_cache is None
    C = 16
    cache = model.init_cache(3, C)
    key_mask = jnp.zeros((3, C), bool).at[:, :12].set(mask)
    graphdef, state = nnx.split(model)
    step = jax.jit(lambda state, *a, **kw: nnx.merge(graphdef, state)(*a, **kw))  # one compile per shape, not op by op
    out, cache = step(state, tokens[:, :5], positions[:, :5], cache, key_mask)
    steps = [out]
    kw = {"fused": tf.concat_projections(model, down_t=fused == "down_t")} if fused else {}
    if fused == "down_t":
        assert [f[2].shape for f in kw["fused"]] == [(cfg.embed_dim, cfg.hidden_dim)] * cfg.num_layers
    for t in range(5, 12):
        out, cache = step(state, tokens[:, t:t + 1], positions[:, t:t + 1], cache, key_mask, **kw)
        steps.append(out)
    assert int(cache.index) == 12
    inc = jnp.concatenate(steps, axis=1)
    real = np.asarray(mask)
    np.testing.assert_allclose(np.asarray(inc)[real], np.asarray(full)[real], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name,softcap", [(n, None) for n in FAMILIES] + [("tiny-gemma3", 5.0)])
@pytest.mark.parametrize("rows,pads", [(1, [3]), (3, [0, 2, 4])])
def test_attend_then_append_equals_full_forward_and_writes_the_same_cache(name, softcap, rows, pads):
    """Decode steps with append_last (attend over the old slots, then write) match a full pass, left pads,
    sliding window, GQA and a logit soft-cap included, and leave the cache the plain write-then-attend path leaves."""
    cfg = tf.ModelConfig.from_name(name, attn_logit_softcap=softcap)
    model = tf.Transformer(cfg, rngs=nnx.Rngs(1))
    tokens, mask = _left_pad(_tokens(rows, 12), pads)
    positions = _positions(mask)
    full, _ = model(tokens, positions, None, mask)
    C = 16
    key_mask = jnp.zeros((rows, C), bool).at[:, :12].set(mask)
    graphdef, state = nnx.split(model)
    step = jax.jit(lambda state, *a: nnx.merge(graphdef, state)(*a))  # one compile per path, not op by op
    out, plain = step(state, tokens[:, :5], positions[:, :5], model.init_cache(rows, C), key_mask)
    appended, steps = plain.replace(append_last=True), [out]
    for t in range(5, 12):
        out, appended = step(state, tokens[:, t:t + 1], positions[:, t:t + 1], appended, key_mask)
        _, plain = step(state, tokens[:, t:t + 1], positions[:, t:t + 1], plain, key_mask)
        steps.append(out)
    assert appended.append_last and int(appended.index) == 12
    real = np.asarray(mask)
    np.testing.assert_allclose(np.asarray(jnp.concatenate(steps, axis=1))[real], np.asarray(full)[real],
                               atol=1e-4, rtol=1e-4)
    for a, b in zip(appended.k + appended.v, plain.k + plain.v):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-5)  # two programs, two roundings


# the tied head (its gradient reaches the embedding too) by default; the untied one with -m slow
@pytest.mark.parametrize("tied", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_lm_head_gradient_equals_numpy_and_the_modules_own_autodiff(tied, monkeypatch):
    """head_product's hand-written backward: dx, dw against the NumPy formulas; a whole model's gradients
    (every parameter) against autodiff through the plain nnx.Embed.attend / nnx.Linear call."""
    rng = np.random.default_rng(0)
    x, R = rng.normal(size=(7, 16)).astype(np.float32), rng.normal(size=(7, 11)).astype(np.float32)
    w = rng.normal(size=(11, 16) if tied else (16, 11)).astype(np.float32)
    dx, dw = jax.grad(lambda x, w: (tf.head_product(x, w, tied) * R).sum(), argnums=(0, 1))(x, w)
    np.testing.assert_allclose(np.asarray(dx), R @ (w if tied else w.T), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(dw), R.T @ x if tied else x.T @ R, rtol=1e-5, atol=1e-5)

    cfg = tf.ModelConfig.from_name("tiny-llama3", tie_embeddings=tied)
    model = tf.Transformer(cfg, rngs=nnx.Rngs(3))
    graphdef, state = nnx.split(model)
    tokens = _tokens(2, 9)

    def loss(state):
        logits, _ = nnx.merge(graphdef, state)(tokens)
        return -jnp.take_along_axis(jax.nn.log_softmax(logits[:, :-1]), tokens[:, 1:, None], -1).mean()

    fast = jax.jit(jax.grad(loss))(state)  # compiled: an eager backward pass runs op by op
    monkeypatch.setattr(tf, "lm_head", lambda head, x, weight=None: head.attend(x) if isinstance(head, nnx.Embed) else head(x))
    plain = jax.jit(jax.grad(loss))(state)  # a new jit, so the patched head is traced
    for a, b in zip(jax.tree.leaves(fast), jax.tree.leaves(plain)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


def test_lm_head_keeps_the_modules_call_for_a_head_with_more_than_one_weight():
    """A head carrying more than its one weight (here a bias; in practice LoRA or a quantised copy) is called as is."""
    head = nnx.Linear(16, 11, use_bias=True, rngs=nnx.Rngs(0))
    head.bias[...] = jnp.full((11,), 3.0)
    x = jnp.ones((2, 16))
    np.testing.assert_allclose(np.asarray(tf.lm_head(head, x)), np.asarray(head(x)), rtol=1e-6)
    assert tf.plain_head_weight(head) is None  # and chapter 20's chunked head takes its checkpointed path
    plain = nnx.Linear(16, 11, use_bias=False, rngs=nnx.Rngs(0))
    assert tf.plain_head_weight(plain) is plain.kernel[...]


def test_append_last_is_static_and_survives_the_model_call():
    """The switch rides in the pytree's structure (a jit static), not as a leaf, and the call hands it back."""
    cfg = tf.ModelConfig.from_name("tiny-qwen3")
    cache = tf.KVCache.create(cfg, batch=1, cache_size=8).replace(append_last=True)
    assert len(jax.tree.leaves(cache)) == 2 * cfg.num_layers + 1
    assert jax.tree.structure(cache) != jax.tree.structure(cache.replace(append_last=False))
    model = tf.Transformer(cfg, rngs=nnx.Rngs(0))
    _, out = model(_tokens(1, 1), None, cache, jnp.ones((1, 8), bool))
    assert out.append_last and out.repeat_rows(2).append_last


@pytest.mark.parametrize("name", FAMILIES)
def test_left_padding_does_not_change_real_token_logits(name):
    cfg = tf.ModelConfig.from_name(name)
    model = tf.Transformer(cfg, rngs=nnx.Rngs(2))
    tokens = _tokens(1, 9)
    ref, _ = model(tokens)
    padded, mask = _left_pad(jnp.concatenate([jnp.zeros((1, 3), jnp.int32), tokens], axis=1), [3])
    padded = padded.at[:, 3:].set(tokens)
    got, _ = model(padded, _positions(mask), None, mask)
    np.testing.assert_allclose(np.asarray(got[:, 3:]), np.asarray(ref), atol=1e-4, rtol=1e-4)


def test_sliding_window_hides_tokens_beyond_the_window():
    """One all-local layer with window 4: changing token 0 changes logits at slots 1..3 but not at 4 onwards."""
    cfg = tf.ModelConfig.from_name("tiny-gemma3", num_layers=1, layer_types=("local",), sliding_window=4)
    model = tf.Transformer(cfg, rngs=nnx.Rngs(3))
    a = _tokens(1, 10)
    b = a.at[0, 0].set((a[0, 0] + 1) % cfg.vocab_size)
    la, lb = model(a)[0], model(b)[0]
    diff = np.abs(np.asarray(la - lb)).max(axis=-1)[0]
    assert (diff[1:4] > 1e-6).all() and (diff[4:] == 0).all(), diff


def test_attention_mask_forms_agree():
    """A [B, S] key mask and the equivalent explicit [B, T, S] mask give the same logits."""
    cfg = tf.ModelConfig.from_name("tiny-qwen3")
    model = tf.Transformer(cfg, rngs=nnx.Rngs(0))
    tokens, mask = _left_pad(_tokens(2, 8), [0, 3])
    full_mask = np.tril(np.ones((8, 8), bool))[None] & np.asarray(mask)[:, None, :]
    a = model(tokens, _positions(mask), None, mask)[0]
    b = model(tokens, _positions(mask), None, jnp.asarray(full_mask))[0]
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# one family by default (the sharding rules are the same code for each); the others with -m slow
@pytest.mark.parametrize("name", FAMILIES[:1] + [pytest.param(n, marks=pytest.mark.slow) for n in FAMILIES[1:]])
def test_sharded_model_matches_single_device(name):
    cfg = tf.ModelConfig.from_name(name)
    mesh = tf.make_mesh(2, 4)
    single = tf.create_model(cfg, seed=4)
    sharded = tf.create_model(cfg, seed=4, mesh=mesh)
    kernel = sharded.layers[0].mlp.gate_proj.kernel[...]
    assert kernel.sharding.spec == P("fsdp", "tp") and len(kernel.sharding.device_set) == 8
    tokens, mask = _left_pad(_tokens(4, 10), [0, 1, 2, 5])
    ref = single(tokens, _positions(mask), None, mask)[0]
    place = lambda x: jax.device_put(x, NamedSharding(mesh, P("fsdp")))

    @nnx.jit
    def forward(model, tokens, positions, mask):
        return model(tokens, positions, None, mask)[0]

    with jax.set_mesh(mesh):
        got = forward(sharded, place(tokens), place(_positions(mask)), place(mask))
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref), atol=1e-4, rtol=1e-4)


def test_logical_to_mesh_drops_axes_that_do_not_divide_or_do_not_exist():
    axes = {"fsdp": 2, "tp": 4}
    assert tf.logical_to_mesh(("embed", "kv_heads", "head_dim"), (64, 1, 256), axes) == P("fsdp", None, None)
    assert tf.logical_to_mesh(("batch", "vocab"), (8, 12), axes) == P("fsdp", "tp")
    assert tf.logical_to_mesh(("batch",), (8,), {"data": 2, "fsdp": 2}) == P(("data", "fsdp"))
    assert tf.logical_to_mesh(("embed", "mlp"), (64, 128), {"tp": 2}) == P(None, "tp")
    # a batch of 2 cannot split over data×fsdp = 4 but can over the prefix ("data",)
    assert tf.logical_to_mesh(("batch",), (2,), {"data": 2, "fsdp": 2}) == P("data")


def test_bad_configs_name_the_problem():
    with pytest.raises(ValueError, match="did you mean 'llama3.2-1b'"):
        tf.ModelConfig.from_name("llama3.2-1")
    with pytest.raises(ValueError, match="unknown family 'gpt2'.*gemma3, qwen3, llama3"):
        tf.ModelConfig.from_name("tiny-qwen3", family="gpt2")
    with pytest.raises(ValueError, match="local layers need a positive sliding_window"):
        tf.ModelConfig.from_name("tiny-gemma3", sliding_window=None)
    with pytest.raises(ValueError, match="layer_types has 2 entries for 3 layers"):
        tf.ModelConfig.from_name("tiny-gemma3", layer_types=("local", "global"))
    with pytest.raises(ValueError, match="rope scaling factor must be >= 1"):
        tf.RopeScaling("linear", 0.5)
    n = jax.device_count()
    with pytest.raises(ValueError, match=f"needs {2 * n} devices, have {n}"):
        tf.make_mesh(2 * n, 1)


def test_kv_cache_shapes_and_dtype():
    cfg = tf.ModelConfig.from_name("tiny-gemma3")
    cache = tf.KVCache.create(cfg, batch=2, cache_size=32, dtype="bfloat16")
    assert len(cache.k) == cfg.num_layers and cache.size == 32
    assert cache.k[0].shape == (2, cfg.num_kv_heads, 32, cfg.head_dim) and cache.k[0].dtype == jnp.bfloat16


def test_kv_cache_on_a_mesh_is_sharded_by_batch_and_kv_heads():
    cfg = tf.ModelConfig.from_name("tiny-qwen3")  # K = 4 heads: divisible by tp = 4
    cache = tf.KVCache.create(cfg, batch=4, cache_size=16, mesh=tf.make_mesh(2, 4))
    assert cache.k[0].sharding.spec == P("fsdp", "tp", None, None)
    assert cache.k[0].addressable_shards[0].data.shape == (2, 1, 16, cfg.head_dim)


def test_kv_cache_repeat_rows_copies_each_row_in_place_and_keeps_the_index():
    cfg = tf.ModelConfig.from_name("tiny-qwen3")
    cache = tf.KVCache.create(cfg, batch=2, cache_size=4)
    filled = np.arange(2 * cfg.num_kv_heads * 4 * cfg.head_dim, dtype=np.float32).reshape(2, cfg.num_kv_heads, 4, cfg.head_dim)
    cache = cache.replace(k=tuple(jnp.asarray(filled + i) for i in range(cfg.num_layers)),
                          v=tuple(jnp.asarray(-filled - i) for i in range(cfg.num_layers)), index=jnp.int32(3))
    out = cache.repeat_rows(3)
    assert len(out.k) == cfg.num_layers and int(out.index) == 3
    for i in range(cfg.num_layers):
        np.testing.assert_array_equal(np.asarray(out.k[i]), np.repeat(filled + i, 3, axis=0))  # rows 0,0,0,1,1,1
        np.testing.assert_array_equal(np.asarray(out.v[i]), np.repeat(-filled - i, 3, axis=0))
