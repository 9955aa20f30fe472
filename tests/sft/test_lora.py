"""LoRA / QLoRA through qwix: fresh adapters change nothing, only adapters train, merges match NumPy and HF."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from tunix_lit.models import transformer as tfm
from tunix_lit.sft import lora

RANK, ALPHA = 4, 8.0


@pytest.fixture(scope="module")
def base():
    return tfm.create_model(tfm.ModelConfig.from_name("tiny-qwen3"), seed=0)


@pytest.fixture(scope="module")
def tokens():
    return jax.random.randint(jax.random.key(1), (2, 12), 0, 512)


def randomize_lora(model, seed=0, scale=0.1):
    """Give every A and B random values, as training would (a fresh B is zero, which merges to nothing)."""
    leaves, treedef = jax.tree.flatten(nnx.state(model, nnx.LoRAParam))
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    values = [jax.device_put(scale * jax.random.normal(k, x.shape), x.sharding) for k, x in zip(keys, leaves)]
    nnx.update(model, jax.tree.unflatten(treedef, values))
    return model


@pytest.fixture(scope="module")
def trained(base):
    """A LoRA model on every projection with random (non-zero) adapters; tests must not modify it."""
    return randomize_lora(lora.apply_lora(base, rank=RANK, alpha=ALPHA))


def next_token_loss(model, batch):
    logits, _ = model(batch[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()


@nnx.jit
def train_step(model, optimizer, batch):
    loss, grads = nnx.value_and_grad(next_token_loss, argnums=nnx.DiffState(0, nnx.LoRAParam))(model, batch)
    optimizer.update(model, grads)
    return loss


def flat_values(model):
    return {p: np.asarray(v.get_value()) for p, v in nnx.to_flat_state(nnx.state(model))}


def test_fresh_lora_leaves_logits_unchanged(base, tokens):
    """B starts at zero, so x·A·B adds exactly zero to every projection."""
    model = lora.apply_lora(base, rank=RANK, alpha=ALPHA)
    assert lora.lora_param_count(model) > 0
    np.testing.assert_array_equal(np.asarray(model(tokens)[0]), np.asarray(base(tokens)[0]))


def test_only_lora_variables_change_after_a_step(base, tokens):
    """After one jitted step every non-LoRA variable is bit-identical; every B moved; A waits a step (dL/dA ∝ B = 0)."""
    model = lora.apply_lora(base, rank=RANK, alpha=ALPHA, seed=1)
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.LoRAParam)
    lora_paths = {p for p, _ in nnx.to_flat_state(nnx.state(model, nnx.LoRAParam))}
    before = flat_values(model)
    train_step(model, optimizer, tokens)
    after = flat_values(model)
    changed = {p for p in before if not np.array_equal(before[p], after[p])}
    assert changed <= lora_paths
    assert {p for p in lora_paths if p[-1].endswith("_lora_b")} == changed
    train_step(model, optimizer, tokens)
    again = flat_values(model)
    changed_twice = {p for p in before if not np.array_equal(before[p], again[p])}
    assert changed_twice == lora_paths  # now A moves too, and still nothing else


# int8 with -m slow: chapter 61 trains every quantised base by default
@pytest.mark.parametrize("qtype", ["nf4", pytest.param("int8", marks=pytest.mark.slow)])
def test_qlora_trains_and_its_loss_falls(base, tokens, qtype):
    model = lora.apply_lora(base, rank=RANK, alpha=ALPHA, quantize=qtype, tile_size=16, seed=2)
    kernel = model.layers[0].mlp.up_proj.kernel
    assert not isinstance(kernel, nnx.Variable)  # the frozen base is a quantised array now
    assert str(kernel.array.qvalue.dtype) == {"nf4": "uint4", "int8": "int8"}[qtype]
    optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.LoRAParam)
    frozen_before = jax.tree.map(np.asarray, jax.tree.leaves(nnx.state(model, lora.BASE_WEIGHTS)))
    losses = np.asarray(jax.device_get([train_step(model, optimizer, tokens) for _ in range(12)]))
    assert np.isfinite(losses).all() and losses[-1] < 0.5 * losses[0], losses
    frozen_after = jax.tree.leaves(nnx.state(model, lora.BASE_WEIGHTS))
    assert all(np.array_equal(a, np.asarray(b)) for a, b in zip(frozen_before, frozen_after))


def test_merge_equals_numpy_w_plus_ab_for_einsum_and_linear_projections(trained):
    """W + A·B·alpha/rank, written out in NumPy (float64) from the kernel's own axis letters."""
    merged = lora.merge_lora(trained)
    assert type(merged) is tfm.Transformer
    q_src, q_dst = trained.layers[1].attn.q_proj, merged.layers[1].attn.q_proj  # kernel [D, N, H]
    a, b = np.asarray(q_src.kernel_lora_a[...], np.float64), np.asarray(q_src.kernel_lora_b[...], np.float64)
    assert a.shape == (64, RANK) and b.shape == (RANK, 8, 16)
    expected = np.asarray(q_src.kernel[...], np.float64) + np.einsum("dr,rnh->dnh", a, b) * ALPHA / RANK
    np.testing.assert_allclose(np.asarray(q_dst.kernel[...]), expected, atol=1e-6)

    o_src, o_dst = trained.layers[0].attn.o_proj, merged.layers[0].attn.o_proj  # kernel [N, H, D]
    a, b = np.asarray(o_src.kernel_lora_a[...], np.float64), np.asarray(o_src.kernel_lora_b[...], np.float64)
    expected = np.asarray(o_src.kernel[...], np.float64) + np.einsum("nhr,rd->nhd", a, b) * ALPHA / RANK
    np.testing.assert_allclose(np.asarray(o_dst.kernel[...]), expected, atol=1e-6)

    g_src, g_dst = trained.layers[0].mlp.gate_proj, merged.layers[0].mlp.gate_proj  # kernel [D, F]
    a, b = np.asarray(g_src.kernel_lora_a[...], np.float64), np.asarray(g_src.kernel_lora_b[...], np.float64)
    expected = np.asarray(g_src.kernel[...], np.float64) + a @ b * ALPHA / RANK
    np.testing.assert_allclose(np.asarray(g_dst.kernel[...]), expected, atol=1e-6)

    np.testing.assert_array_equal(np.asarray(merged.embedder.embedding[...]),
                                  np.asarray(trained.embedder.embedding[...]))  # untargeted weights are copied


def test_merged_model_gives_the_lora_logits(trained, tokens):
    lora_logits, _ = trained(tokens)
    merged_logits, _ = lora.merge_lora(trained)(tokens)
    np.testing.assert_allclose(np.asarray(merged_logits), np.asarray(lora_logits), atol=1e-4)


def test_qlora_merge_dequantises_the_base_first(base, trained, tokens):
    """Merged QLoRA = dequantised W + ΔW, so it reproduces the QLoRA model (not the float base)."""
    model = lora.apply_lora(base, rank=RANK, alpha=ALPHA, quantize="nf4", tile_size=16)
    nnx.update(model, nnx.state(trained, nnx.LoRAParam))
    qlora_logits, _ = model(tokens)
    merged_logits, _ = lora.merge_lora(model)(tokens)
    np.testing.assert_allclose(np.asarray(merged_logits), np.asarray(qlora_logits), atol=1e-4)
    assert np.abs(np.asarray(qlora_logits) - np.asarray(trained(tokens)[0])).max() > 1e-2  # nf4 did round


@pytest.mark.parametrize("name", ["tiny-qwen3", "tiny-llama3", "tiny-gemma3"])
def test_merged_export_loaded_by_transformers_matches_lora_logits(name, tokens, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = randomize_lora(lora.apply_lora(tfm.create_model(tfm.ModelConfig.from_name(name), seed=3),
                                           rank=RANK, alpha=ALPHA), seed=4)
    path = lora.save_merged_hf(model, tmp_path / "merged")
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        hf_logits = hf(torch.tensor(np.asarray(tokens))).logits.numpy()
    np.testing.assert_allclose(hf_logits, np.asarray(model(tokens)[0]), atol=1e-4)


def test_target_pattern_that_matches_no_module_is_a_clear_error(base):
    with pytest.raises(ValueError) as err:
        lora.apply_lora(base, rank=RANK, alpha=ALPHA, targets=r"layers\.0\.attn\.q_proj")
    message = str(err.value)
    assert r"layers\.0\.attn\.q_proj" in message and "matches no module" in message
    assert "layers/0/attn/q_proj" in message  # shows what real paths look like
    with pytest.raises(ValueError, match="multiplies its input"):  # matches modules, none with a weight op
        lora.apply_lora(base, rank=RANK, alpha=ALPHA, targets=r".*/attn")
    with pytest.raises(ValueError, match="not a regular expression"):
        lora.apply_lora(base, rank=RANK, alpha=ALPHA, targets="(q_proj")


@pytest.mark.parametrize("rank", [0, -2])
def test_bad_rank_is_a_clear_error(base, rank):
    with pytest.raises(ValueError, match=f"rank must be a positive int, got {rank}"):
        lora.apply_lora(base, rank=rank, alpha=ALPHA)


def test_other_bad_settings_name_the_value(base):
    with pytest.raises(TypeError, match="rank must be an int"):
        lora.apply_lora(base, rank=2.5, alpha=ALPHA)
    with pytest.raises(ValueError, match="alpha must be > 0"):
        lora.apply_lora(base, rank=RANK, alpha=0.0)
    with pytest.raises(ValueError, match="unknown quantize 'fp4'; choose None or one of: nf4, int8"):
        lora.apply_lora(base, rank=RANK, alpha=ALPHA, quantize="fp4")
    with pytest.raises(ValueError, match="tile_size=32 does not divide the contracting axis of layers/0/attn/o_proj"):
        lora.apply_lora(base, rank=RANK, alpha=ALPHA, quantize="nf4", tile_size=32)  # head dim is 16


def test_merge_and_reapply_refuse_the_wrong_kind_of_model(base, trained):
    with pytest.raises(TypeError, match="merge_lora needs a model returned by apply_lora"):
        lora.merge_lora(base)
    with pytest.raises(ValueError, match="already carries LoRA"):
        lora.apply_lora(trained, rank=RANK, alpha=ALPHA)


def test_counts_follow_the_formula_and_nf4_halves_int8(trained):
    """r·(in + out) per projection: q,o,gate,up,down see 64+128 wide sides, k,v see 64+64 (K·H = 64)."""
    per_layer = RANK * (3 * (64 + 128) + 2 * (64 + 64) + 2 * (128 + 64))
    assert lora.lora_param_count(trained) == 2 * per_layer
    cfg = trained.config
    assert lora.base_param_count(trained) == sum(x.size for x in jax.tree.leaves(
        nnx.state(tfm.Transformer(cfg, rngs=nnx.Rngs(0)), nnx.Param)))
    assert lora.nbytes(jnp.zeros((10, 6), jnp.uint4)) == 30
    assert lora.nbytes(jax.ShapeDtypeStruct((4, 4), jnp.float32)) == 64


def test_nbytes_counts_sub_byte_codes_at_their_bit_width():
    """Hand count: 15 int4 codes are 60 bits -> 8 bytes; 3 bfloat16 scales 6; a 2x2 float32 shape 16."""
    tree = {"codes": jnp.zeros((3, 5), jnp.int4), "scales": jnp.ones((3,), jnp.bfloat16),
            "abstract": jax.ShapeDtypeStruct((2, 2), jnp.float32)}
    assert lora.nbytes(tree) == 8 + 6 + 16


def test_lora_on_a_mesh_is_sharded_like_its_kernel_and_matches_single_device(base, trained, tokens):
    mesh = tfm.make_mesh(2, 4)
    sharded = lora.apply_lora(tfm.create_model(base.config, seed=0, mesh=mesh), rank=RANK, alpha=ALPHA)
    randomize_lora(sharded)  # the values of `trained` (same seeds), placed by the existing shardings
    q, up = sharded.layers[0].attn.q_proj, sharded.layers[0].mlp.up_proj
    P = jax.sharding.PartitionSpec
    assert q.kernel_lora_a[...].sharding.spec == P("fsdp", None)  # A [D, r]: D as the kernel's D
    assert q.kernel_lora_b[...].sharding.spec == P(None, "tp", None)  # B [r, N, H]: heads over tp
    assert up.kernel_lora_b[...].sharding.spec == P(None, "tp")  # B [r, F]
    with jax.set_mesh(mesh):
        logits = nnx.jit(lambda m, t: m(t)[0])(sharded, tokens)
    np.testing.assert_allclose(np.asarray(logits), np.asarray(trained(tokens)[0]), atol=1e-4)
    merged = lora.merge_lora(sharded)
    assert merged.layers[0].attn.q_proj.kernel[...].sharding.spec == P("fsdp", "tp", None)
    assert tfm.mesh_of(merged) == mesh == tfm.mesh_of(sharded)  # merge_lora finds the mesh through chapter 10's helper


def test_a_lora_or_quantised_model_gets_no_concatenated_projections():
    """The sampler's fused decode kernels are for plain float kernels only: qwix-rewritten projections return None."""
    base = tfm.create_model(tfm.ModelConfig.from_name("tiny-qwen3"), seed=0)
    assert tfm.concat_projections(base) is not None
    assert tfm.concat_projections(lora.apply_lora(base, rank=RANK, alpha=ALPHA)) is None
    assert tfm.concat_projections(lora.apply_lora(base, rank=RANK, alpha=ALPHA, quantize="nf4", tile_size=16)) is None
