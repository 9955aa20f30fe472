"""load_hf's cost before a first step: one Python trace for the whole model (not one per tensor), and the same model.

Every process pays each trace again (jit's caches do not outlive it), so the count of traces a load makes is
counted here with jax.monitoring's trace events; the loaded model is checked value by value, dtype and sharding
against the model that was saved, on the 8 fake CPU devices of tests/conftest.py.
"""
import jax
import ml_dtypes
import numpy as np
import pytest
from flax import nnx

from tunix_lit.models import loader
from tunix_lit.models.transformer import ModelConfig, create_model, make_mesh

TRACE = "/jax/core/compile/jaxpr_trace_duration"  # recorded once per Python trace, with the function's name


def _saved(tmp_path, preset: str, seed: int = 3):
    """(model, its checkpoint directory) for a random model of a tiny preset, saved by save_hf."""
    model = create_model(ModelConfig.from_name(preset), seed=seed)
    return model, loader.save_hf(model, tmp_path / preset)


def _traces_of(fn):
    """fn's result and the names of the functions JAX traced while it ran."""
    names = []

    def on_duration(event, seconds, **kwargs):
        if event == TRACE:
            names.append(kwargs.get("fun_name"))

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    try:
        out = fn()
    finally:
        jax.monitoring.unregister_event_duration_listener(on_duration)
    return out, names


def _flat(model) -> dict:
    return {".".join(map(str, p)): v.get_value() for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def test_listener_sees_a_trace():
    """The counting is real: a fresh jax.eval_shape shows up as one trace event."""
    _, names = _traces_of(lambda: jax.eval_shape(lambda x: x * 2, jax.ShapeDtypeStruct((3,), np.float32)))
    assert names == ["<lambda>"]


@pytest.mark.parametrize("preset", ["tiny-gemma3", "tiny-qwen3"])
def test_load_hf_traces_the_model_once_not_each_tensor(tmp_path, preset):
    model, path = _saved(tmp_path, preset)
    n_tensors = len(_flat(model))
    assert n_tensors > 10  # one trace per tensor would be far above the bound below
    for mesh in (None, make_mesh(2, 4)):
        loaded, names = _traces_of(lambda: loader.load_hf(path, mesh=mesh))
        assert 1 <= len(names) <= 2, names
        assert len(_flat(loaded)) == n_tensors


@pytest.mark.parametrize("preset", ["tiny-gemma3", "tiny-llama3"])
def test_loaded_on_mesh_equals_saved_model_values_dtypes_and_shardings(tmp_path, preset):
    """Values equal the saved model's; dtypes and shardings equal those of the same model built on the mesh."""
    model, path = _saved(tmp_path, preset)
    mesh = make_mesh(2, 4)
    want = {k: np.asarray(v) for k, v in _flat(model).items()}
    built = _flat(create_model(model.config, seed=3, mesh=mesh))  # create_model places by state_shardings too
    got = _flat(loader.load_hf(path, mesh=mesh))
    assert sorted(got) == sorted(want)
    assert any(len(set(v.sharding.spec) - {None}) for v in got.values())  # something really is split
    for k, v in got.items():
        assert v.dtype == want[k].dtype == built[k].dtype, k
        assert v.sharding == built[k].sharding, (k, v.sharding, built[k].sharding)
        np.testing.assert_array_equal(np.asarray(v), want[k], err_msg=k)

    half = _flat(loader.load_hf(path, mesh=mesh, dtype="bfloat16"))
    for k, v in half.items():
        assert v.dtype == ml_dtypes.bfloat16 and v.sharding == built[k].sharding, k
        np.testing.assert_array_equal(np.asarray(v), want[k].astype(ml_dtypes.bfloat16), err_msg=k)
