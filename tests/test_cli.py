"""The `tunix-lit` console command: `generate` with the embedded model, an HF checkpoint directory, bad flags."""
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


def test_generate_completes_with_the_embedded_model_like_the_sampler():
    from tunix_lit.generate.sampler import Sampler
    from tunix_lit.models import tiny

    status, lines = run(["generate", "12+7=", "3+4=", "--max-new-tokens", "6"])
    model, tok = tiny.load()
    want = Sampler(model, tok)(["12+7=", "3+4="], max_new_tokens=6).text
    assert status == 0 and lines == want


def test_generate_json_has_tokens_and_logprobs_of_equal_length():
    status, lines = run(["generate", "12+7=", "--json", "--top-k", "3", "--seed", "0", "--max-new-tokens", "5"])
    row = json.loads(lines[0])
    assert status == 0 and row["prompt"] == "12+7="
    assert len(row["tokens"]) == len(row["logprobs"]) >= 1 and all(lp <= 0 for lp in row["logprobs"])


def test_generate_model_flag_loads_a_checkpoint_directory(tmp_path):
    """A copy of the embedded model's directory (HF safetensors + tokenizer) through --model gives the same text."""
    from tunix_lit.models import tiny

    shutil.copytree(tiny.asset_dir(), tmp_path / "ckpt")
    default = run(["generate", "45+45=", "8+1="])
    loaded = run(["generate", "45+45=", "8+1=", "--model", str(tmp_path / "ckpt")])
    assert default == loaded


@pytest.mark.parametrize("argv,message", [
    (["generate", "1+1=", "--top-p", "2"], "top_p must be in (0, 1], got 2.0"),
    (["generate", "1+1=", "--temperature", "-1"], "temperature must be a finite number >= 0"),
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


def test_console_script_runs_as_a_module_entry_point():
    """The installed entry point is `tunix_lit.cli:main`; run it in a fresh interpreter as the script would."""
    proc = subprocess.run([sys.executable, "-c", "import sys; from tunix_lit.cli import main; sys.exit(main())",
                           "generate", "12+7=", "--max-new-tokens", "4"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(proc.stdout.splitlines()) == 1
    assert "generate" in build_parser().format_help()
