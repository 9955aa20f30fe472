"""benchmarks/compare_revisions.py: the older revision runs from a temporary worktree, both sides alternate, the worktree goes."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
import compare_revisions  # noqa: E402


def _worktrees() -> set:
    out = subprocess.run(["git", "-C", str(BENCH.parent), "worktree", "list", "--porcelain"], capture_output=True,
                         text=True, check=True).stdout
    return {line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("worktree ")}


def test_a_revision_that_does_not_exist_is_named_in_the_error():
    with pytest.raises(SystemExit, match="no-such-revision"):
        compare_revisions.main(["grpo", "--base", "no-such-revision-anywhere"])


def test_rounds_below_one_are_refused():
    with pytest.raises(SystemExit, match="--rounds must be at least 1"):
        compare_revisions.main(["grpo", "--base", "HEAD", "--rounds", "0"])


def test_a_round_runs_the_base_checkout_then_the_working_tree_and_the_worktree_goes(monkeypatch, capsys):
    # machine.py stands in for a benchmark (it exists at HEAD and prints one JSON line); the reader adds a figure
    monkeypatch.setitem(compare_revisions.WORK, "machine", ("machine.py", "cores", "higher"))
    monkeypatch.setattr(compare_revisions, "last_json",
                        lambda cmd, env: {**json.loads(subprocess.run(cmd, capture_output=True, text=True, env=env,
                                                                        check=True).stdout.splitlines()[-1]),
                                          "cores": 2.0, "script": cmd[1]})
    before = _worktrees()
    assert compare_revisions.main(["machine", "--base", "HEAD", "--rounds", "1"]) == 0
    lines = [json.loads(l) for l in capsys.readouterr().out.splitlines()]
    rows, summary = lines[:-1], lines[-1]
    assert [r["side"] for r in rows] == ["base", "now"]
    assert all("tunix-lit-base-" in r["script"] for r in rows if r["side"] == "base")
    assert all(r["script"].startswith(str(BENCH)) for r in rows if r["side"] == "now")
    assert summary["ratio_now_over_base"] == 1.0 and summary["per_round_ratio"] == [1.0]
    assert summary["base_commit"] == subprocess.run(["git", "-C", str(BENCH), "rev-parse", "HEAD"], capture_output=True,
                                                    text=True, check=True).stdout.strip()
    assert _worktrees() == before
