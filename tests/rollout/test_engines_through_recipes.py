"""Every engine built the way users build it: through RLCluster (chapter 21) and through a recipe's
`rollout.engine=...` (chapter 72), against the strict fakes for vLLM and SGLang-JAX; and per engine, what a
multi-process job gets (the vanilla engine runs; the others are refused before any model loads)."""
import json
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from tunix_lit import recipe_build, recipes
from tunix_lit.models import tiny
from tunix_lit.rl.cluster import RLCluster, RolloutConfig
from tunix_lit.rollout import engines

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
EXTERNAL = ["vllm", "sglang_jax"]


@pytest.fixture
def fakes(monkeypatch):
    """The strict fakes importable as `vllm` and `sgl_jax` for this test only."""
    monkeypatch.syspath_prepend(str(HERE / "fakes"))
    yield


def roll(engine, **kw):
    return RolloutConfig(max_new_tokens=6, max_prompt_length=8, temperature=0.9, engine=engine, **kw)


@pytest.mark.parametrize("engine", ["hf", *EXTERNAL])
def test_rlcluster_builds_each_engine_and_rolls_out_with_the_actors_log_probs(fakes, engine):
    """The cluster builds the engine by name (its seed reaching the engine under the engine's own keyword), and
    the rollout's log-probs are the actor's to float32 rounding (the gap the cluster measures every step)."""
    pytest.importorskip("torch", reason="the hf engine needs torch") if engine == "hf" else None
    model, tok = tiny.load()
    cluster = RLCluster(actor=model, tokenizer=tok, rollout_config=roll(engine, seed=7))
    assert cluster.rollout.name == engine
    if engine == "vllm":
        assert cluster.rollout.handle.seed == 7
    if engine == "sglang_jax":
        assert cluster.rollout.handle.random_seed == 7
    out = cluster.generate(["12+7=", "40+41=", "3+5=", "99+9="])
    gap = cluster.pop_logp_gap()
    assert out.completion_ids.shape[0] == 4 and gap is not None and gap <= 1e-4, gap


# the hf engine through a recipe with -m slow: tests/rollout/test_hf_engine.py trains and syncs it by default
@pytest.mark.parametrize("engine", [pytest.param("hf", marks=pytest.mark.slow), *EXTERNAL])
def test_a_recipe_trains_with_each_engine(fakes, engine, tmp_path):
    """`rollout.engine=<name>` in the main GRPO recipe: two steps run, every step's log-prob gap stays at
    float32 rounding (the engine received every update), and the summary is written."""
    pytest.importorskip("torch", reason="the hf engine needs torch") if engine == "hf" else None
    recipe = recipes.resolve_recipe(ROOT / "recipes" / "grpo_tiny.yaml", [
        f"rollout.engine={engine}", "training.max_steps=2", "training.batch_size=4", "grpo.num_generations=2",
        "training.eval_every_n_steps=100", "training.save_every_n_steps=100", "task.heldout_size=8",
        f"run_dir={tmp_path / 'run'}"])
    summary = recipes.run_recipe(recipe, progress_bar=False, out=open(tmp_path / "log.txt", "w"))
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    gaps = [r["rollout_logp_gap"] for r in rows if r.get("mode") == "train" and "rollout_logp_gap" in r]
    assert summary["steps"] == 2 and len(gaps) == 2 and max(gaps) <= 1e-4, (summary, gaps)


@pytest.mark.parametrize("engine", ["hf", *EXTERNAL])
def test_a_multi_process_job_is_refused_before_any_model_loads(fakes, engine, monkeypatch):
    """jax.process_count() > 1: the rollout config refuses hf / vllm / sglang_jax by name; no model is loaded."""
    pytest.importorskip("torch", reason="the hf engine needs torch") if engine == "hf" else None
    loaded = []
    monkeypatch.setattr(recipe_build, "load_model", lambda *a, **k: loaded.append(1))
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    recipe = recipes.resolve_recipe(ROOT / "recipes" / "grpo_tiny.yaml", [f"rollout.engine={engine}"])
    with pytest.raises(ValueError, match=f"rollout engine '{engine}' runs in one process.*process_count\\(\\)=2"):
        recipes.build(recipe, progress_bar=False)
    assert not loaded


def test_the_vanilla_engine_passes_the_process_check():
    """The vanilla engine is the multi-process one (chapter 22): check_engine lets it through at any count."""
    assert not getattr(engines.VanillaEngine, "single_process", False)
    assert engines.check_engine("vanilla") is engines.VanillaEngine
