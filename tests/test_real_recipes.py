"""The real-model recipes (Gemma 3 270M GRPO, SmolLM2-135M QLoRA): their task file (sums as text, the graded reward,
exact accuracy), their data files, and a --dry-run of each on a tiny random Gemma 3 checkpoint (no real weights)."""
import importlib.util
import io
import json
from pathlib import Path

import pytest

from tunix_lit import recipes
from tunix_lit.recipes import resolve_recipe

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"


def _real_sums():
    spec = importlib.util.spec_from_file_location("real_sums", RECIPES / "real_sums.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(name):
    return [json.loads(l) for l in (RECIPES / "data" / name).read_text().splitlines()]


def test_the_split_is_disjoint_complete_and_right():
    train, held = _real_sums().problems()
    prompts = [r["prompt"] for r in train + held]
    assert len(held) == 100 and len(train) == 300 and len(set(prompts)) == 400  # every pair of 0..19 once
    for r in train + held:
        a, b = r["a"], r["b"]
        assert r["prompt"] == f"Question: What is {a} + {b}?\nAnswer: {a} + {b} =" and int(r["answer"]) == a + b


def test_the_shipped_files_are_the_ones_the_script_writes():
    train, held = _real_sums().problems()
    assert _rows("sums20_train.jsonl") == train and _rows("sums20_heldout.jsonl") == held
    for name, rows in (("train", train), ("heldout", held)):
        chat = _rows(f"sums20_chat_{name}.jsonl")
        assert [(c["a"], c["b"], c["answer"]) for c in chat] == [(r["a"], r["b"], r["answer"]) for r in rows]
        for c in chat:  # SmolLM2's template: a user turn holding the question, the assistant's turn opened
            assert f"<|im_start|>user\nWhat is {c['a']} + {c['b']}? Answer with the number only.<|im_end|>" in c["prompt"]
            assert c["prompt"].endswith("<|im_start|>assistant\n")


def test_reward_and_accuracy_by_hand():
    m = _real_sums()
    completions = [" 17", " 15\n", "20", " 30", " x", "", " 17 + 1"]
    answers = ["17"] * len(completions)
    # right: 1; 2 away: 0.5 * (1 - 2/5) = 0.3; 3 away: 0.5 * (1 - 3/5) = 0.2; 13 away: 0; no number: 0
    assert m.reward(None, completions, answers) == pytest.approx([1.0, 0.3, 0.2, 0.0, 0.0, 0.0, 1.0])
    assert m.accuracy(None, completions, answers) == [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]


@pytest.fixture(scope="module")
def tiny_gemma(tmp_path_factory):
    """A tiny random Gemma 3 checkpoint with a word-level tokenizer (the dry run needs no real weights)."""
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "models"))
    from hf_fixtures import save_hf_checkpoint, save_word_tokenizer

    path = tmp_path_factory.mktemp("gemma3")
    save_hf_checkpoint("gemma3", path, max_position_embeddings=2048)
    save_word_tokenizer(path, [str(i) for i in range(40)] + ["+", "="])
    return path


@pytest.mark.parametrize("name", ["gemma3_270m_grpo", "smollm2_135m_qlora"])
def test_real_recipes_dry_run_on_a_tiny_checkpoint(name, tiny_gemma, tmp_path):
    recipe = resolve_recipe(RECIPES / f"{name}.yaml", [f"model={tiny_gemma}", f"run_dir={tmp_path / 'run'}"],
                            environ={})
    assert resolve_recipe(RECIPES / f"{name}.yaml", environ={})["model"] in ("gemma3-270m", "smollm2-135m")
    out = io.StringIO()
    launch = recipes.dry_run(recipe, out=out)
    text = out.getvalue()
    assert "300 train rows, 100 held-out rows" in text and "real_sums.py:accuracy" in text
    lora = dict(launch.built)["lora"]
    assert lora.startswith("rank 8")
    if name == "gemma3_270m_grpo":
        assert "real_sums.py:reward" in text and "GRPOLearner" in text
    else:
        assert "nf4" in lora and "PeftTrainer" in text


# ---- the seed record (tools/record_real_seeds.py): accuracy split into format and arithmetic --------------------

def _seed_tool():
    spec = importlib.util.spec_from_file_location("record_real_seeds", ROOT / "tools" / "record_real_seeds.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_split_scores_by_hand():
    completions = [" 17", "17\n", "Seventeen", "17 + 1", " 15", "x", "27.", " 17."]
    got = _seed_tool().split_scores([{"completion": c, "answer": "17"} for c in completions])
    # in format (one integer, whitespace or a closing full stop aside): " 17", "17\n", " 15", "27.", " 17."; the
    # grader's right: " 17", "17\n", "17 + 1", " 17."; the wrong ones in format miss by 2 and by 10 (a tens digit)
    assert got == pytest.approx({"accuracy": 4 / 8, "in_format": 5 / 8, "correct_in_format": 3 / 5,
                                 "correct_outside_format": 1 / 8, "wrong_in_format_off_by_ten": 1 / 2})
    assert _seed_tool().split_scores([{"completion": "no", "answer": "1"}])["correct_in_format"] is None


SEEDS = RECIPES / "results" / "real_seeds_cpu.json"


@pytest.mark.skipif(not SEEDS.exists(), reason="no seed record yet (python tools/record_real_seeds.py)")
def test_the_seed_record_agrees_with_its_runs_and_recipes():
    import sys

    import yaml

    sys.path.insert(0, str(ROOT / "tools"))
    from record_runs import recipe_hashes

    tool, record = _seed_tool(), json.loads(SEEDS.read_text())
    assert record["recipes"]
    for name, entry in record["recipes"].items():
        assert entry["recipe_sha256"] == recipe_hashes(name), f"{name}: the recipe changed since its seeds ran"
        held_file = yaml.safe_load((RECIPES / f"{name}.yaml").read_text())["data"]["heldout"]
        held = _rows(Path(held_file).name)  # the recipe's own held-out file, in recipes/data/
        seeds = [r["seed"] for r in entry["runs"]]
        assert len(set(seeds)) == len(seeds)
        for run in entry["runs"]:
            for when in ("before", "after"):
                texts = run["completions"][when]
                assert len(texts) == len(held)
                again = tool.split_scores([{"completion": c, "answer": r["answer"]} for c, r in zip(texts, held)])
                assert again == pytest.approx(run[when])
            # the completions the record kept are the ones the run's own grader scored
            assert run["after"]["accuracy"] == pytest.approx(run["heldout_accuracy_after"])
            assert run["before"]["accuracy"] == pytest.approx(run["heldout_accuracy_before"])
        s = entry["summary"]
        after = [r["after"]["accuracy"] for r in entry["runs"]]
        assert s["after_accuracy"]["n"] == len(after)
        assert s["after_accuracy"]["mean"] == pytest.approx(sum(after) / len(after))
        assert (s["after_accuracy"]["min"], s["after_accuracy"]["max"]) == (min(after), max(after))


def test_only_whole_held_out_evaluations_are_kept(tmp_path, monkeypatch):
    tool = _seed_tool()
    monkeypatch.setenv(tool.LOG_ENV, str(tmp_path / "eval.jsonl"))
    tool.accuracy(["a", "b"], [" 1", " 2"], ["1", "3"])  # the held-out set, before training
    tool.accuracy(["x", "a"], [" 5", " 1"], ["5", "1"])  # an RL step's training rollouts: not an evaluation
    tool.accuracy(["a", "b"], [" 1", " 3"], ["1", "3"])  # the held-out set, after training
    evals = tool.evaluations(tmp_path / "eval.jsonl", ["a", "b"])
    assert [tool.split_scores(e)["accuracy"] for e in evals] == [0.5, 1.0]
