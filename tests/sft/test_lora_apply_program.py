"""apply_lora's program returns only new state: the same model as qwix's call under a plain nnx.jit, bit for bit,
with the caller's frozen arrays passed through (not copied), a program whose outputs are the new state only, and
the same gradients in a training step."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import qwix
from flax import nnx

from tunix_lit.models import transformer as tfm
from tunix_lit.sft import lora

RANK, ALPHA, SEED = 4, 8.0, 3


@pytest.fixture(scope="module")
def base():
    return tfm.create_model(tfm.ModelConfig.from_name("tiny-qwen3"), seed=0)


def plain_jit_program(quantize=None, tile_size=None):
    """The reference route: qwix's rewriting call under nnx.jit, the whole model in and out."""
    provider = qwix.LoraProvider(module_path=lora.DEFAULT_TARGETS, rank=RANK, alpha=ALPHA, weight_qtype=quantize,
                                 tile_size=tile_size)
    tokens = jnp.zeros((1, 1), jnp.int32)
    return nnx.jit(lambda m, rngs: qwix.apply_lora_to_model(m, provider, tokens, rngs=rngs))


def plain_jit_lora(model, quantize=None, tile_size=None):
    """The model the reference route builds (on a clone: nnx.jit writes its output copies back into its argument)."""
    return plain_jit_program(quantize, tile_size)(nnx.clone(model), nnx.Rngs(SEED))


def assert_same_model(ours, reference):
    """Same paths, variable types, dtypes and values, bit for bit."""
    ours, reference = nnx.to_flat_state(nnx.state(ours)), nnx.to_flat_state(nnx.state(reference))
    assert [p for p, _ in ours] == [p for p, _ in reference]
    for (path, a), (_, b) in zip(ours, reference):
        assert type(a) is type(b), path
        x, y = np.asarray(a.get_value()), np.asarray(b.get_value())
        assert x.dtype == y.dtype and x.shape == y.shape, path
        np.testing.assert_array_equal(x, y, err_msg=str(path))


def test_lora_values_are_bit_identical_to_the_plain_jit_route(base):
    ours = lora.apply_lora(base, rank=RANK, alpha=ALPHA, seed=SEED)
    assert_same_model(ours, plain_jit_lora(base))
    a = np.asarray(ours.layers[0].attn.q_proj.kernel_lora_a[...])
    assert a.std() > 0.01  # A really drawn (B = 0 is compared above too)
    assert not np.array_equal(a, np.asarray(lora.apply_lora(base, rank=RANK, alpha=ALPHA, seed=SEED + 1)
                                            .layers[0].attn.q_proj.kernel_lora_a[...]))  # and the seed reaches it


def test_qlora_nf4_codes_scales_and_adapters_are_bit_identical_to_the_plain_jit_route(base):
    ours = lora.apply_lora(base, rank=RANK, alpha=ALPHA, quantize="nf4", tile_size=16, seed=SEED)
    assert_same_model(ours, plain_jit_lora(base, "nf4", 16))
    assert ours.layers[0].attn.q_proj.kernel.array.qvalue.dtype == jnp.uint4  # the base really quantised


def test_frozen_weights_are_the_callers_arrays_not_copies(base):
    """Ours: every frozen weight is the base's own array (same object, same buffer); the plain route copies each."""
    before = [v.get_value() for _, v in nnx.to_flat_state(nnx.state(base, nnx.Param))]
    ours = lora.apply_lora(base, rank=RANK, alpha=ALPHA, seed=SEED)
    theirs = plain_jit_lora(base)
    for kept, mine, copy in zip(before, jax.tree.leaves(nnx.state(ours, lora.BASE_WEIGHTS)),
                                jax.tree.leaves(nnx.state(theirs, lora.BASE_WEIGHTS))):
        assert mine is kept and mine.unsafe_buffer_pointer() == kept.unsafe_buffer_pointer()
        assert copy.unsafe_buffer_pointer() != kept.unsafe_buffer_pointer()
    assert all(v.get_value() is k for k, (_, v) in zip(before, nnx.to_flat_state(nnx.state(base, nnx.Param))))


def test_the_program_returns_only_new_state(base):
    """Outputs: one B per adapted projection, nothing of the base, no random draws (A is drawn outside); the
    plain route returns the whole model and draws every A inside."""
    rule = qwix.LoraRule(module_path=lora.DEFAULT_TARGETS, rank=RANK, alpha=ALPHA)
    program, args, plan = lora._lora_program(base, rule, SEED)
    lowered = program.lower(*args)
    outs = jax.tree.leaves(lowered.out_info)
    adapted = len([p for p in lora.module_paths(base) if p.rsplit("/", 1)[-1] in lora.PROJECTIONS])
    assert len(outs) == adapted and [k for k, *_ in plan["source"]].count("drawn") == adapted  # B out, A drawn outside
    base_shapes = {x.shape for x in jax.tree.leaves(nnx.state(base))}
    assert not any(o.shape in base_shapes for o in outs)
    text = lowered.as_text()
    assert "dot_general" not in text  # qwix's forward pass is traced but nothing returned needs it
    assert "threefry2x32" not in text
    reference = plain_jit_program().lower(nnx.clone(base), nnx.Rngs(SEED)).lowered  # flax wraps jax's Lowered
    ref_outs = [o for o in jax.tree.leaves(reference.out_info) if not jax.dtypes.issubdtype(o.dtype, jax.dtypes.prng_key)]
    assert len(ref_outs) >= len(jax.tree.leaves(nnx.state(base))) + 2 * adapted  # the model twice (in and out)
    assert "threefry2x32" in reference.as_text()
    assert lora.nbytes(ref_outs) > lora.nbytes(nnx.state(base)) > 10 * lora.nbytes(outs)


@pytest.mark.slow  # by default the values are checked bit for bit above, and chapter 61 trains the new model
def test_a_training_step_gives_the_same_gradients(base):
    """d loss / d LoRA on a batch: ours and the plain route's model agree exactly (B = 0 so A's are zero; B's not)."""
    tokens = jax.random.randint(jax.random.key(1), (2, 12), 0, base.config.vocab_size)

    @nnx.jit
    def grads(model):
        def loss(m):
            logits, _ = m(tokens[:, :-1])
            return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

        return nnx.value_and_grad(loss, argnums=nnx.DiffState(0, nnx.LoRAParam))(model)

    (loss_ours, g_ours) = grads(lora.apply_lora(base, rank=RANK, alpha=ALPHA, seed=SEED))
    (loss_ref, g_ref) = grads(plain_jit_lora(base))
    assert float(loss_ours) == float(loss_ref)
    flat_ours, flat_ref = nnx.to_flat_state(g_ours), nnx.to_flat_state(g_ref)
    assert [p for p, _ in flat_ours] == [p for p, _ in flat_ref] and flat_ours
    for (path, a), (_, b) in zip(flat_ours, flat_ref):
        np.testing.assert_array_equal(np.asarray(a.get_value()), np.asarray(b.get_value()), err_msg=str(path))
    assert any(np.abs(np.asarray(v.get_value())).max() > 0 for p, v in flat_ours if p[-1].endswith("_lora_b"))


def test_on_a_mesh_values_match_and_frozen_weights_stay_the_callers(base):
    mesh = tfm.make_mesh(2, 4)
    sharded = tfm.create_model(base.config, seed=0, mesh=mesh)
    kernel = sharded.layers[0].attn.q_proj.kernel.get_value()
    ours = lora.apply_lora(sharded, rank=RANK, alpha=ALPHA, seed=SEED)
    assert_same_model(ours, plain_jit_lora(base))  # the single-device reference: same values
    q = ours.layers[0].attn.q_proj
    assert q.kernel.get_value() is kernel
    P = jax.sharding.PartitionSpec
    assert q.kernel_lora_a[...].sharding.spec == P("fsdp", None) and q.kernel_lora_b[...].sharding.spec == P(None, "tp", None)


def test_the_error_messages_are_unchanged(base):
    with pytest.raises(ValueError, match="matches no module path; it must fully match"):
        lora.apply_lora(base, rank=RANK, alpha=ALPHA, targets=r"layers\.0\.attn\.q_proj")
    with pytest.raises(ValueError, match="but none of them multiplies its input by a weight of its own"):
        lora.apply_lora(base, rank=RANK, alpha=ALPHA, targets=r".*/attn")


def test_base_param_count_is_the_plain_models_weight_count(quantize="int8"):
    """Counted where float weights are (no trace), from the shapes where they are codes: both the base model's count
    (test_lora.py checks a plain LoRA model)."""
    base = tfm.Transformer(tfm.ModelConfig.from_name("tiny-gemma3"), rngs=nnx.Rngs(0))
    want = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(base, nnx.Param)))
    assert lora.base_param_count(base) == want
    assert lora.base_param_count(lora.apply_lora(base, rank=4, alpha=8.0, quantize=quantize)) == want
