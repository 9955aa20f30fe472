"""Weight sync: LoRA merge against NumPy, the name map against transformers' own module, refusals, the gap."""
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))
from hf_fixtures import make_hf_model  # noqa: E402

from tunix_lit.models import loader, tiny  # noqa: E402
from tunix_lit.rollout import sync  # noqa: E402
from tunix_lit.sft import lora  # noqa: E402


@pytest.fixture(scope="module")
def tiny_model():
    return tiny.load()


def test_actor_params_of_a_plain_model_are_its_params(tiny_model):
    model, _ = tiny_model
    got = sync.actor_params(model)
    want = {".".join(map(str, p)): v.get_value() for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}
    assert got.keys() == want.keys() and all(got[k] is want[k] for k in got)


def test_actor_params_merge_lora_as_numpy_does(tiny_model):
    """W + (alpha / r)·A·B for an attention Einsum and an MLP Linear; no adapter leaves in the result."""
    model, _ = tiny_model
    actor = lora.apply_lora(model, rank=4, alpha=12.0)
    q, up = actor.layers[1].attn.q_proj, actor.layers[0].mlp.up_proj
    for i, m in enumerate((q, up)):
        m.kernel_lora_b[...] = jax.random.normal(jax.random.key(i), m.kernel_lora_b[...].shape) * 0.1
    merged = sync.actor_params(actor)
    f64 = lambda x: np.asarray(x[...], np.float64)
    want_q = f64(q.kernel) + 3.0 * np.einsum("dr,rnh->dnh", f64(q.kernel_lora_a), f64(q.kernel_lora_b))
    want_up = f64(up.kernel) + 3.0 * f64(up.kernel_lora_a) @ f64(up.kernel_lora_b)
    np.testing.assert_allclose(np.asarray(merged["layers.1.attn.q_proj.kernel"]), want_q, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(merged["layers.0.mlp.up_proj.kernel"]), want_up, rtol=1e-5, atol=1e-6)
    assert not any("lora" in k for k in merged) and merged.keys() == sync.actor_params(model).keys()


def test_qlora_bases_are_dequantised_to_float(tiny_model):
    model, _ = tiny_model
    merged = sync.actor_params(lora.apply_lora(model, rank=4, alpha=8.0, quantize="int8"))
    plain = sync.actor_params(model)
    for k, w in merged.items():
        assert w.dtype == plain[k].dtype and w.shape == plain[k].shape, k
    # int8 per-channel quantisation keeps the weights within a few percent of their range
    k = "layers.0.attn.q_proj.kernel"
    assert np.abs(np.asarray(merged[k]) - np.asarray(plain[k])).max() < 0.02 * np.abs(np.asarray(plain[k])).max()


@pytest.mark.parametrize("family", ["llama3", "qwen3", "gemma3"])
def test_name_map_fills_a_transformers_module_that_then_agrees_with_ours(tmp_path, family):
    """Our tensors under hf_name_map load into transformers' own module with strict names and shapes; logits agree."""
    hf = make_hf_model(family, seed=1)
    hf.save_pretrained(tmp_path)
    ours = loader.load_hf(tmp_path)
    expected = {k: tuple(v.shape) for k, v in hf.named_parameters()}
    tensors, unmapped = sync.engine_tensors(ours, sync.hf_name_map(ours.config), jnp.float32, expected)
    assert unmapped == () and set(tensors) == set(expected)
    fresh = make_hf_model(family, seed=2)  # different random weights, overwritten by the sync
    with torch.no_grad():
        for name, p in fresh.named_parameters():
            p.copy_(torch.from_dlpack(tensors[name]))
    tokens = np.array([[5, 17, 3, 99, 42, 7, 8, 200]], np.int64)
    with torch.no_grad():
        want = fresh(torch.as_tensor(tokens)).logits.numpy()
    got = np.asarray(ours(jnp.asarray(tokens, jnp.int32))[0])
    np.testing.assert_allclose(got, want, atol=2e-4)


def test_an_unmapped_parameter_is_named(tiny_model):
    model, _ = tiny_model
    names = dict(sync.hf_name_map(model.config))
    names.pop("layers.1.mlp.gate_proj.kernel")
    with pytest.raises(ValueError, match="parameter 'layers.1.mlp.gate_proj.kernel' has no engine name"):
        sync.engine_tensors(model, names, jnp.float32)
    _, unmapped = sync.engine_tensors(model, names, jnp.float32, strict=False)
    assert unmapped == ("layers.1.mlp.gate_proj.kernel",)


def test_a_shape_mismatch_names_both_shapes(tiny_model):
    model, _ = tiny_model
    names = sync.hf_name_map(model.config)
    expected = {n: tuple(t.shape) for n, t in sync.engine_tensors(model, names, jnp.float32)[0].items()}
    expected["model.layers.0.mlp.up_proj.weight"] = (321, 128)
    with pytest.raises(ValueError, match=r"'layers.0.mlp.up_proj.kernel' maps to 'model.layers.0.mlp.up_proj.weight' "
                                         r"with shape \(320, 128\), but the engine's .* has shape \(321, 128\)"):
        sync.engine_tensors(model, names, jnp.float32, expected)


def test_an_engine_tensor_nobody_writes_is_named(tiny_model):
    model, _ = tiny_model
    names = sync.hf_name_map(model.config)
    expected = {n: tuple(t.shape) for n, t in sync.engine_tensors(model, names, jnp.float32)[0].items()}
    expected["lm_head.weight"] = (20, 128)
    with pytest.raises(ValueError, match="engine tensor 'lm_head.weight' receives no parameter"):
        sync.engine_tensors(model, names, jnp.float32, expected)


def test_two_parameters_onto_one_tensor_is_an_error(tiny_model):
    model, _ = tiny_model
    names = dict(sync.hf_name_map(model.config))
    names["layers.0.attn.v_proj.kernel"] = names["layers.0.attn.k_proj.kernel"]
    with pytest.raises(ValueError, match="both map to engine tensor 'model.layers.0.self_attn.k_proj.weight'"):
        sync.engine_tensors(model, names, jnp.float32)


def test_engine_tensors_cast_to_the_engine_dtype(tiny_model):
    model, _ = tiny_model
    tensors, _ = sync.engine_tensors(model, sync.hf_name_map(model.config), jnp.bfloat16)
    w = np.asarray(model.layers[0].mlp.down_proj.kernel[...])
    got = tensors["model.layers.0.mlp.down_proj.weight"]
    assert got.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(jnp.asarray(w.T).astype(jnp.bfloat16), np.float32))


def test_max_logp_gap_is_the_masked_max_abs_difference():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(3, 5)), rng.normal(size=(3, 5))
    mask = rng.random((3, 5)) > 0.4
    b_far = np.where(mask, b, b + 100.0)  # differences on pads never count
    assert float(sync.max_logp_gap(a, b_far, mask)) == pytest.approx(np.abs(a - b)[mask].max(), rel=1e-6)
    assert float(sync.max_logp_gap(a, b, np.zeros_like(mask))) == 0.0
