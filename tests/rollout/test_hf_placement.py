"""The hf engine takes weights from an actor wherever it lives: another device, a mesh (devices 4-7, sharded by
chapter 10's rules), a LoRA actor on a mesh; arrays of other processes and multi-process jobs are refused."""
import importlib.util
import types
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx

from tunix_lit.models import tiny
from tunix_lit.models import transformer as tfm
from tunix_lit.rl import common
from tunix_lit.rollout import engines, sync
from tunix_lit.sft import lora

pytest.importorskip("torch", reason="the hf engine needs torch")


def placed(model, where):
    """The model with its state on one device or sharded on a mesh (a new module; the tiny model is f32)."""
    graphdef, state = nnx.split(model)
    target = tfm.state_shardings(state, where) if isinstance(where, jax.sharding.Mesh) else where
    return nnx.merge(graphdef, jax.device_put(state, target))


def layouts():
    devs = jax.devices()
    out = {"device 1": devs[1]}
    if len(devs) >= 8:
        out["mesh of devices 4-7 (2x2)"] = tfm.make_mesh(2, 2, devices=devs[4:8])
        out["mesh of devices 4-7 (1x4)"] = tfm.make_mesh(1, 4, devices=devs[4:8])
    return out


def _benchmark_gap():
    """The gap measurement of benchmarks/hf_engine_accelerator.py (the same check, run there on a TPU chip)."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "hf_engine_accelerator.py"
    spec = importlib.util.spec_from_file_location("hf_engine_accelerator", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # this copy of the script recomputes under nnx.jit: one compile per placement instead of an eager forward per
    # check (on a mesh each eager op is its own SPMD program); the formula is the script's, unchanged
    recompute = nnx.jit(lambda actor, p, pm, c, cm, t: common.compute_completion_logps(actor, p, pm, c, cm, temperature=t))
    module.common = types.SimpleNamespace(pad_rows=common.pad_rows, compute_completion_logps=lambda actor, *a,
                                          temperature: recompute(actor, *a, temperature))
    return module.gap


gap = _benchmark_gap()  # largest |engine log-prob - the actor's own recompute| over a sampled batch


@pytest.fixture(scope="module")
def tiny_model():
    return tiny.load()


@pytest.mark.parametrize("layout", list(layouts()))
def test_the_hf_engine_syncs_from_an_actor_placed_anywhere(tiny_model, layout):
    model, tok = tiny_model
    actor = placed(nnx.merge(*nnx.split(model)), layouts()[layout])
    assert jax.tree.leaves(nnx.state(actor))[0].sharding.device_set != {jax.devices()[0]}
    engine = engines.make_engine("hf", actor, tok, max_prompt_length=8, max_new_tokens=6)
    before = gap(engine, actor, tok)
    nnx.update(actor, jax.tree.map(lambda x: x * 1.05, nnx.state(actor, nnx.Param)))  # an "update", in place
    stale = gap(engine, actor, tok)
    report = engine.sync_weights(actor)
    after = gap(engine, actor, tok)
    assert report.bytes_moved == engine.sync_bytes(actor) > 0
    assert before < 1e-4 and after < 1e-4, (before, after)
    assert stale > 1e-3  # the check would see a sync that moved nothing


def test_a_lora_actor_on_a_mesh_syncs_merged(tiny_model):
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices (the conftest's fake CPU devices)")
    model, tok = tiny_model
    actor = lora.apply_lora(placed(nnx.merge(*nnx.split(model)), tfm.make_mesh(2, 2, devices=jax.devices()[4:8])),
                            rank=4, alpha=8.0)
    b = nnx.state(actor, nnx.LoRAParam)
    nnx.update(actor, jax.tree.map(lambda x: x + 0.05, b))  # nonzero adapters: the merge matters
    engine = engines.make_engine("hf", actor, tok, max_prompt_length=8, max_new_tokens=6)
    assert gap(engine, actor, tok) < 1e-4


def test_params_over_several_device_sets_are_gathered_to_the_host(tiny_model):
    model, _ = tiny_model
    params = sync.actor_params(model)
    devs = jax.devices()
    mixed = {k: jax.device_put(v, devs[i % 2 + 1]) for i, (k, v) in enumerate(params.items())}
    out = sync._one_placement(mixed)
    assert {d.platform for x in out.values() for d in x.sharding.device_set} == {"cpu"}
    assert all(len(x.sharding.device_set) == 1 for x in out.values())
    assert all(np.array_equal(out[k], params[k]) for k in params)


def test_arrays_of_other_processes_and_multi_process_jobs_are_refused(tiny_model, monkeypatch):
    model, tok = tiny_model

    class Remote:  # what a jax.Array sharded over processes reports
        is_fully_addressable = False

    with pytest.raises(ValueError, match="spread over .* processes"):
        sync._one_placement({"layers.0.attn.q_proj.kernel": Remote()})
    built = []
    monkeypatch.setattr(sync, "_build_hf_module", lambda *a, **k: built.append(1))
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    with pytest.raises(ValueError, match="process_count\\(\\)=2"):
        sync.HfEngine.build(model, tok, max_prompt_length=8, max_new_tokens=6)
    assert not built  # refused before any module was built
