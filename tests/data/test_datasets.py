"""tunix_lit.data.datasets: JSONL / Parquet rows, column checks, reward functions by name, the GSM8K rewards."""
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tunix_lit.data import arith, datasets


def test_jsonl_and_parquet_give_the_rows_written(tmp_path):
    rows = [{"prompt": f"{i}+1=", "answer": str(i + 1), "w": i * 0.5} for i in range(7)]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "a.parquet")
    assert datasets.load_rows(tmp_path / "a.jsonl") == rows
    assert datasets.load_rows(tmp_path / "a.parquet", limit=4) == rows[:4]


@pytest.mark.parametrize("name,text,message", [
    ("bad.jsonl", '{"a": 1}\nnot json\n', "line 2 is not JSON"),
    ("list.jsonl", "[1, 2]\n", "line 1 must be a JSON object"),
    ("empty.jsonl", "\n", "has no rows"),
    ("x.csv", "a,b\n", "unknown dataset format '.csv'"),
])
def test_bad_files_say_what_and_where(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError, match=message):
        datasets.load_rows(tmp_path / name)


def test_missing_file_and_missing_datasets_package(tmp_path):
    with pytest.raises(FileNotFoundError, match="no dataset file"):
        datasets.load_rows(tmp_path / "none.jsonl")
    try:
        import datasets as hf_datasets  # noqa: F401
        pytest.skip("the `datasets` package is installed here; the missing-package error cannot be shown")
    except ImportError:
        with pytest.raises(ImportError, match=r"needs the `datasets` package"):
            datasets.load_rows("hf:openai/gsm8k:main")


def test_missing_column_names_present_columns_and_rename_fixes_it():
    rows = [{"question": "1+1=", "answer": "2"}]
    with pytest.raises(ValueError, match="no column 'prompt'; its columns are 'question', 'answer'"):
        datasets.require_columns(rows, ["prompt", "answer"], where="f.jsonl")
    assert datasets.require_columns(rows, ["prompt"], rename={"question": "prompt"}) == [{"prompt": "1+1=", "answer": "2"}]


def test_resolve_function_by_module_and_by_file(tmp_path):
    assert datasets.resolve_function("tunix_lit.data.arith:reward") is arith.reward
    (tmp_path / "r.py").write_text("def neg_len(prompts, completions, **_):\n    return [-len(c) for c in completions]\n")
    fn = datasets.resolve_function("r.py:neg_len", base_dir=tmp_path)
    assert fn(["p"], ["abc"]) == [-3]


@pytest.mark.parametrize("spec,message", [
    ("no_such_module_xyz:f", "tried module no_such_module_xyz, none found"),
    ("tunix_lit.data.arith:nope", "has no function 'nope'; it has"),
    ("missing.py:f", "tried file missing.py"),
    ("no-colon", "'package.module:function'"),
])
def test_unresolvable_specs_name_what_was_tried(spec, message):
    with pytest.raises(ValueError, match=message):
        datasets.resolve_function(spec)


def test_arith_accuracy_is_is_correct():
    rows = arith.sample(arith.ArithConfig(), 20, "train", seed=0)
    completions = [r["answer"] if i % 3 else "0" for i, r in enumerate(rows)]
    want = [float(arith.is_correct(c, r["answer"])) for c, r in zip(completions, rows)]
    assert datasets.arith_accuracy([r["prompt"] for r in rows], completions, [r["answer"] for r in rows]) == want


def test_gsm8k_rows_and_rewards():
    raw = [{"question": "Q1", "answer": "2 + 2 = 4\n#### 4"}, {"question": "Q2", "answer": "so\n#### 1,250"}]
    rows = datasets.gsm8k_rows(raw)
    assert [r["answer"] for r in rows] == ["4", "1250"] and rows[0]["prompt"].endswith("Q1\n")
    good = "<reasoning>2 + 2 = 4</reasoning>\n<answer>4</answer>"
    completions = [good, "<answer>4</answer>", "<reasoning>x</reasoning><answer> 1,250 </answer>", "4"]
    assert datasets.gsm8k_format_reward([""] * 4, completions) == [1.0, 0.0, 1.0, 0.0]
    assert datasets.gsm8k_answer_reward([""] * 4, completions, ["4", "4", "1250", "4"]) == [1.0, 0.0, 1.0, 0.0]
    sft = datasets.gsm8k_sft_rows(raw)
    assert sft[0]["answer"] == "<reasoning>2 + 2 = 4</reasoning>\n<answer>4</answer>"
    assert datasets.gsm8k_answer_reward([""], [good], [sft[0]["answer"]]) == [1.0]
    with pytest.raises(ValueError, match="does not end in '#### <number>'"):
        datasets.gsm8k_rows([{"question": "q", "answer": "no marker"}])
