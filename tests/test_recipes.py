"""tunix_lit.recipes: the merge order and its sources, key checks at every depth, --dry-run on every shipped recipe
(the Gemma 3 ones on a tiny random checkpoint of the family, mesh from the 8 fake devices), dataset files and
reward functions in a recipe, and (slow) every tiny recipe raising held-out accuracy."""
import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from tunix_lit import recipes
from tunix_lit.recipes import resolve_recipe

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"
TINY = ["sft", "lora", "qlora", "dpo", "distill", "grpo", "dapo", "ppo"]


def test_every_tiny_recipe_is_shipped():
    shipped = {p.name for p in RECIPES.glob("*_tiny.yaml")}
    assert {f"{n}_tiny.yaml" for n in TINY} <= shipped


def test_cli_beats_env_beats_file_beats_default():
    path = RECIPES / "grpo_tiny.yaml"
    r = resolve_recipe(path, ["training.max_steps=7"], environ={"TUNIX_LIT_TRAINING__MAX_STEPS": "9"})
    assert r["training"]["max_steps"] == 7 and r.source("training.max_steps") == "cli"
    r = resolve_recipe(path, [], environ={"TUNIX_LIT_TRAINING__MAX_STEPS": "9"})
    assert r["training"]["max_steps"] == 9 and r.source("training.max_steps") == "env"
    r = resolve_recipe(path, [], environ={})
    assert r["training"]["max_steps"] == 400 and r.source("training.max_steps") == "grpo_tiny.yaml"
    assert r["training"]["queue_size"] == 4 and r.source("training.queue_size") == "default"
    lines = {l.split(":")[0].strip(): l for l in r.to_yaml().splitlines()}
    assert lines["max_steps"].split() == ["max_steps:", "400", "#", "grpo_tiny.yaml"]


def test_env_ignores_the_packages_other_switches_and_reads_top_level_keys():
    env = {"TUNIX_LIT_HOST_ALLOCATOR": "0", "TUNIX_LIT_SLOW": "1", "TUNIX_LIT_MODEL": "/some/ckpt"}
    r = resolve_recipe(RECIPES / "grpo_tiny.yaml", environ=env)
    assert r["model"] == "/some/ckpt" and r.source("model") == "env"


def test_base_chain_sources_name_the_file_that_set_each_value():
    r = resolve_recipe(RECIPES / "qlora_tiny.yaml", environ={})
    assert r["lora"] == {"rank": 8, "alpha": 16.0, "targets": None, "quantize": "int8", "tile_size": None}
    assert [r.source(k) for k in ("lora.quantize", "lora.rank", "optimizer.learning_rate", "optimizer.name")] == \
        ["qlora_tiny.yaml", "lora_tiny.yaml", "lora_tiny.yaml", "sft_tiny.yaml"]
    assert r["optimizer"]["learning_rate"] == 3e-3 and r["run_dir"] == str(Path("runs") / "qlora_tiny")


def test_a_later_null_clears_a_section_and_its_sources():
    r = resolve_recipe(RECIPES / "lora_tiny.yaml", ["lora=null"], environ={})
    assert r["lora"] is None and r.source("lora") == "cli"
    assert "lora: null" in r.to_yaml()


def test_base_cycle_is_an_error(tmp_path):
    (tmp_path / "a.yaml").write_text("base: b.yaml\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(ValueError, match="extends itself"):
        resolve_recipe(tmp_path / "a.yaml", environ={})


@pytest.mark.parametrize("overrides,message", [
    (["training.max_step=7"], "unknown key 'training.max_step' (from cli); did you mean 'max_steps'?"),
    (["optimiser.learning_rate=1e-3"], "did you mean 'optimizer'?"),
    (["lora.rnk=4"], "did you mean 'rank'?"),
    (["ppo.beta=0.1"], "section 'ppo' (from cli) does not apply to algorithm 'grpo'"),
    (["algorithm=grpp"], "did you mean 'grpo'?"),
    (["training=5"], "'training' (from cli) is a section"),
    (["training.max_steps"], "must look like section.key=value"),
])
def test_bad_keys_fail_before_anything_is_built(overrides, message):
    with pytest.raises(ValueError) as err:
        resolve_recipe(RECIPES / "grpo_tiny.yaml", overrides, environ={})
    assert message in str(err.value)


def test_a_nested_typo_in_an_env_variable_names_the_env(tmp_path):
    with pytest.raises(ValueError, match=r"'rollout.temprature' \(from env\); did you mean 'temperature'"):
        resolve_recipe(RECIPES / "grpo_tiny.yaml", environ={"TUNIX_LIT_ROLLOUT__TEMPRATURE": "0.5"})


def test_max_grad_norm_clips_the_update():
    """sgd(lr=1) after clipping: the update is -g scaled to norm 0.5 (NumPy), unlike upstream's unused setting."""
    import jax.numpy as jnp

    spec = dict(recipes.default_recipe("sft")["optimizer"], name="sgd", learning_rate=1.0, max_grad_norm=0.5)
    opt, text = recipes.make_optimizer(spec)
    g = {"w": jnp.asarray([3.0, 4.0])}
    update, _ = opt.update(g, opt.init(g))
    np.testing.assert_allclose(np.asarray(update["w"]), -np.array([3.0, 4.0]) / 5.0 * 0.5, rtol=1e-6)
    assert "clipped to global norm 0.5" in text


@pytest.mark.parametrize("name", TINY)
def test_dry_run_builds_every_object_and_takes_no_step(name, tmp_path):
    out = io.StringIO()
    # smaller data than the recipe's (row counts do not change what is built); every object is still made.
    # DPO generates its pairs with the model: as many train problems as held-out ones is one batch shape, one compile
    overrides = [f"run_dir={tmp_path / name}", "task.train_size=512", "task.heldout_size=64"] + \
        (["dpo.train_problems=64"] if name == "dpo" else [])
    launch = recipes.dry_run(resolve_recipe(RECIPES / f"{name}_tiny.yaml", overrides, environ={}), out=out)
    built = [what for what, _ in launch.built]
    assert built[0] == "mesh" and built[-1] == "checkpoints"
    assert {"model", "tokenizer", "datasets", "optimizer"} <= set(built)
    assert ("cluster" in built) == (name in ("grpo", "dapo", "ppo"))
    assert launch.trainer.step == 0 and not (tmp_path / name / "summary.json").exists()
    assert out.getvalue().rstrip().endswith("no step taken")


def test_one_sampler_per_launch_sees_new_weights_without_compiling_again(tmp_path):
    """Greedy accuracy reuses the launch's sampler: after a weight change it holds the model's new arrays
    (the arrays themselves, not copies of the old ones) and has still compiled prefill and decode once each."""
    import jax
    from flax import nnx

    recipe = resolve_recipe(RECIPES / "sft_tiny.yaml", [f"run_dir={tmp_path / 'r'}", "task.train_size=64",
                                                        "task.heldout_size=16"], environ={})
    launch = recipes.build(recipe, progress_bar=False)
    launch.trainer.close()
    model = launch.model
    recipes.greedy_accuracy(launch, model)
    sampler = launch.extras["sampler"]
    rng = np.random.default_rng(0)  # new weights made in NumPy: no small compiles for the perturbation
    nnx.update(model, jax.tree.map(lambda x: jax.numpy.asarray(np.asarray(x) + 0.3 * rng.standard_normal(x.shape),
                                                               x.dtype), nnx.state(model, nnx.Param)))
    recipes.greedy_accuracy(launch, model)
    held, now = jax.tree.leaves(sampler.state), jax.tree.leaves(nnx.state(model))
    assert launch.extras["sampler"] is sampler and len(held) == len(now) and all(a is b for a, b in zip(held, now))
    assert dict(sampler.traces) == {"prefill": 1, "decode": 1}


def _gsm8k_like(path: Path, n: int) -> Path:
    rows = [{"question": f"Tom has {i} apples and buys {i + 2} more. How many apples?",
             "answer": f"{i} + {i + 2} = {2 * i + 2}\n#### {2 * i + 2}"} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def tiny_gemma(tmp_path_factory):
    """A tiny random Gemma 3 checkpoint (transformers) with a word-level tokenizer.json of the same vocabulary size."""
    sys.path.insert(0, str(ROOT / "tests" / "models"))
    from hf_fixtures import save_hf_checkpoint, save_word_tokenizer

    path = tmp_path_factory.mktemp("gemma3")
    save_hf_checkpoint("gemma3", path, max_position_embeddings=2048)
    words = sorted({w for i in range(40) for w in f"Tom has {i} apples and buys more. How many apples? Solve "
                                                   "the problem. Think step by step between <reasoning> and "
                                                   "</reasoning>, then give only final number <answer> </answer>."
                    .split()})
    save_word_tokenizer(path, words[:250])
    return path


# the GRPO recipe by default; the QLoRA one (17 s, the same loader and family) with -m slow
@pytest.mark.parametrize("name", ["gemma3_1b_grpo_gsm8k", pytest.param("gemma3_1b_qlora", marks=pytest.mark.slow)])
def test_real_model_recipes_dry_run_on_a_tiny_checkpoint_of_the_family(name, tiny_gemma, tmp_path):
    import jax

    data = _gsm8k_like(tmp_path / "gsm8k.jsonl", 24)
    overrides = [f"model={tiny_gemma}", f"data.train={data}", f"data.heldout={data}", f"run_dir={tmp_path / 'run'}",
                 "dtype=float32"]
    recipe = resolve_recipe(RECIPES / f"{name}.yaml", overrides, environ={})
    out = io.StringIO()
    launch = recipes.dry_run(recipe, out=out)
    assert jax.device_count() == 8 and dict(launch.mesh.shape) == {"fsdp": 8, "tp": 1}
    text = out.getvalue()
    assert "gemma3" in text and "24 train rows" in text and "LoRA" not in text.split("[ 1]")[0]
    assert any(what == "lora" for what, _ in launch.built)
    if name == "gemma3_1b_grpo_gsm8k":
        assert "gsm8k_format_reward" in text and "RLCluster" in text


def test_missing_column_names_the_columns_the_file_has(tmp_path):
    (tmp_path / "d.jsonl").write_text(json.dumps({"question": "1+1=", "solution": "2"}) + "\n")
    recipe = resolve_recipe(RECIPES / "sft_tiny.yaml", [f"data.train={tmp_path / 'd.jsonl'}",
                                                        f"run_dir={tmp_path / 'r'}"], environ={})
    with pytest.raises(ValueError, match="no column 'prompt', 'answer'; its columns are 'question', 'solution'"):
        recipes.build(recipe)


def test_reward_spec_that_does_not_resolve_names_what_was_tried(tmp_path):
    recipe = resolve_recipe(RECIPES / "grpo_tiny.yaml", ["reward.functions=[my_rewards.py:score]",
                                                         f"run_dir={tmp_path / 'r'}"], environ={})
    with pytest.raises(ValueError, match=r"tried file my_rewards.py, file .*recipes/my_rewards.py, none found"):
        recipes.build(recipe)


def test_sft_on_a_jsonl_file_with_renamed_columns_and_a_reward_file_writes_a_summary(tmp_path):
    """A data file whose columns are renamed by the recipe, and an accuracy function from a .py file next to it."""
    from tunix_lit.data import arith

    rows = arith.sample(arith.ArithConfig(), 96, "train", seed=3)
    (tmp_path / "sums.jsonl").write_text("".join(json.dumps({"q": r["prompt"], "a": r["answer"]}) + "\n"
                                                 for r in rows))
    (tmp_path / "acc.py").write_text("def exact(prompts, completions, answer, **_):\n"
                                     "    return [float(c.strip().split()[0] == a) if c.strip() else 0.0 "
                                     "for c, a in zip(completions, answer)]\n")
    (tmp_path / "r.yaml").write_text(f"base: {RECIPES / 'sft_tiny.yaml'}\n"
                                     "data: {train: sums.jsonl, heldout_limit: 32, columns: {q: prompt, a: answer}}\n"
                                     "reward: {accuracy: acc.py:exact}\neval: {max_new_tokens: 4}\n"
                                     "training: {max_steps: 3, batch_size: 16, log_every_n_steps: 1}\n")
    out = io.StringIO()
    summary = recipes.run_recipe(resolve_recipe(tmp_path / "r.yaml", [f"run_dir={tmp_path / 'run'}"], environ={}),
                                 progress_bar=False, out=out)
    assert summary["steps"] == 3 and summary["heldout_size"] == 32
    assert 0 <= summary["heldout_accuracy_before"] <= 1 and summary["figure"]["name"].startswith("held-out loss")
    for name in ("config.yaml", "metrics.jsonl", "curve.png", "summary.json", "before.json"):
        assert (tmp_path / "run" / name).exists(), name
    assert "columns:" in (tmp_path / "run" / "config.yaml").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("name", TINY)
def test_every_tiny_recipe_raises_heldout_accuracy(name, tmp_path):
    """The recipe as shipped: held-out greedy accuracy after training beats before."""
    summary = recipes.run_recipe(resolve_recipe(RECIPES / f"{name}_tiny.yaml", [f"run_dir={tmp_path / name}"],
                                                environ={}), progress_bar=False, out=io.StringIO())
    assert summary["heldout_accuracy_after"] > summary["heldout_accuracy_before"] + 0.02, summary
    assert summary["figure"]["before"] is not None and summary["figure"]["after"] is not None


def test_agentic_recipe_resolves_with_its_own_sections_and_checks_them():
    r = resolve_recipe(RECIPES / "agentic_calc_tiny.yaml", ["episode.max_turns=2"], environ={})
    assert r.family == "agentic" and r["episode"]["max_turns"] == 2 and r.source("episode.max_turns") == "cli"
    # an episode counts model turns; the old name (the trainer's word for global steps) says where it went
    with pytest.raises(ValueError, match="did you mean 'max_turns'"):
        resolve_recipe(RECIPES / "agentic_calc_tiny.yaml", ["episode.max_steps=2"], environ={})
    assert r.source("episode.timeout_s") == "default"
    with pytest.raises(ValueError, match="did you mean 'max_turns'"):
        resolve_recipe(RECIPES / "agentic_calc_tiny.yaml", ["episode.max_trns=2"], environ={})


def test_agentic_dry_run_lists_every_object_with_tools_and_episode_settings_and_takes_no_step(tmp_path):
    """Counts are checked against the shipped safetensors file and the recipe's own numbers, not the code's output."""
    from safetensors.numpy import load_file

    from tunix_lit.agentic.learner import calculator_asset_dir

    overrides = [f"run_dir={tmp_path / 'a'}", "episode.max_turns=2", "agentic.max_concurrency=4",
                 "task.heldout_size=12"]
    out = io.StringIO()
    launch = recipes.dry_run(resolve_recipe(RECIPES / "agentic_calc_tiny.yaml", overrides, environ={}), out=out)
    built = dict(launch.built)
    assert [what for what, _ in launch.built] == ["mesh", "rollout", "algorithm", "model", "tokenizer", "episode",
                                                 "agentic", "tools", "datasets", "rewards", "optimizer", "cluster",
                                                 "learner", "checkpoints"]
    weights = load_file(str(calculator_asset_dir() / "model.safetensors"))
    n, nbytes = sum(w.size for w in weights.values()), sum(w.nbytes for w in weights.values())
    assert f"{n:,} parameters, {nbytes / 2**20:.2f} MiB" in built["model"]
    assert "calculator(a, op, b)" in built["tools"] and "exact_match" in built["tools"]
    assert "at most 2 model turns" in built["episode"] and "max_response_tokens=32" in built["episode"]
    assert "max_concurrency=4" in built["agentic"]
    assert "4-digit 12 tasks" in built["datasets"] and "2-digit 12 tasks" in built["datasets"]
    assert built["cluster"].splitlines()[0] == launch.extras["cluster"].explain().splitlines()[0]
    import yaml

    steps = yaml.safe_load((RECIPES / "agentic_calc_tiny.yaml").read_text())["training"]["max_steps"]
    assert f"8 tasks a step × 8 episodes, {steps} steps" in built["learner"]
    assert "none yet: starts at step 0" in built["checkpoints"]
    assert launch.trainer.step == 0 and not (tmp_path / "a" / "summary.json").exists()
    assert out.getvalue().rstrip().endswith("dry run: 14 objects built, no step taken")


# --- SimPO, KTO, the reward model and GKD (chapters 63-65), and the GRPO presets rloo / reinforce_pp / cispo

NEW_TINY = {"simpo": "dpo.train_problems=64", "kto": "kto.train_problems=64",
            "reward": "reward_model.train_problems=64", "gkd": None}


@pytest.mark.parametrize("name", list(NEW_TINY))
def test_new_family_recipes_dry_run(name, tmp_path):
    out = io.StringIO()
    overrides = [f"run_dir={tmp_path / name}", "task.train_size=512", "task.heldout_size=64"] + \
        ([NEW_TINY[name]] if NEW_TINY[name] else [])
    launch = recipes.dry_run(resolve_recipe(RECIPES / f"{name}_tiny.yaml", overrides, environ={}), out=out)
    built = [what for what, _ in launch.built]
    assert built[0] == "mesh" and built[-1] == "checkpoints" and "cluster" not in built
    expected = {"simpo": "DPOTrainer", "kto": "KTOTrainer", "reward": "RewardTrainer", "gkd": "GKDTrainer"}[name]
    assert type(launch.trainer).__name__ == expected and launch.trainer.step == 0
    assert ("reference" in built) == (name == "kto")


@pytest.mark.parametrize("name,factory", [("rloo", "rloo_config"), ("reinforce_pp", "reinforce_pp_config"),
                                          ("cispo", "cispo_config")])
def test_grpo_presets_resolve_to_their_factories(name, factory):
    import dataclasses

    from tunix_lit import recipe_build
    from tunix_lit.rl import grpo

    r = resolve_recipe(None, [f"algorithm={name}"], environ={})
    assert r.family == "rl"
    want = getattr(grpo, factory)()
    assert recipe_build._algo_config(r) == want
    assert r["grpo"] == {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(want).items()}


def test_new_sections_belong_to_their_algorithms():
    with pytest.raises(ValueError, match="read by kto"):
        resolve_recipe(None, ["algorithm=simpo", "kto.beta=0.2"], environ={})
    with pytest.raises(ValueError, match="unknown key 'distill.alpha'"):
        resolve_recipe(None, ["algorithm=gkd", "distill.alpha=0.5"], environ={})
    assert resolve_recipe(None, ["algorithm=simpo"], environ={})["reference"] is None


@pytest.mark.slow
@pytest.mark.parametrize("name", list(NEW_TINY))
def test_new_family_recipes_gain_five_points(name, tmp_path):
    """As shipped: held-out accuracy (the reward model's: pairwise accuracy) gains at least 5 points."""
    summary = recipes.run_recipe(resolve_recipe(RECIPES / f"{name}_tiny.yaml", [f"run_dir={tmp_path / name}"],
                                                environ={}), progress_bar=False, out=io.StringIO())
    assert summary["heldout_accuracy_after"] >= summary["heldout_accuracy_before"] + 0.05, summary
