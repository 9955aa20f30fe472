"""A run killed part-way and resumed writes the same summary.json as the run left alone (timings aside).

The killed run is `tunix-lit train` in a subprocess, SIGKILLed once it has logged a step past its last
checkpoint, so its metrics.jsonl holds steps the resumed run logs again; the uninterrupted run and the resume
run here. The train-reward figure (mean of the first / last 5 logged steps) must cover the whole run."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import numpy as np

from tunix_lit import cli, recipes

ROOT = Path(__file__).resolve().parents[1]
TRAIN = [sys.executable, "-c", "import sys; from tunix_lit.cli import main; sys.exit(main())", "train"]
# 8 GRPO steps of 8 prompts x 4 completions, a checkpoint every 3, 16 held-out rows evaluated at the last step
ARGS = [str(ROOT / "recipes" / "grpo_tiny.yaml"), "training.batch_size=8", "grpo.num_generations=4",
        "task.heldout_size=16", "eval.batch_size=16", "training.eval_every_n_steps=8", "training.max_steps=8",
        "training.save_every_n_steps=3"]


def _train_steps(run_dir: Path) -> list:
    path = run_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")] if path.exists() else []
    return [r["step"] for r in rows if r["mode"] == "train"]


def _checkpoints(run_dir: Path) -> list:
    ckpt = run_dir / "checkpoints"
    return sorted(int(p.name) for p in ckpt.iterdir() if p.name.isdigit()) if ckpt.is_dir() else []


def _kill_past_a_checkpoint(run_dir: Path) -> tuple:
    """Start the run, SIGKILL it once it logged a step after its latest checkpoint; (checkpoint, steps logged)."""
    proc = subprocess.Popen(TRAIN + ARGS + ["--run-dir", str(run_dir), "--no-progress"], cwd=str(ROOT),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "no checkpoint was written"
            saved, steps = _checkpoints(run_dir), _train_steps(run_dir)
            if saved and steps and max(steps) > saved[-1] and max(steps) < 8:
                os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return saved[-1], _train_steps(run_dir)


def _numbers(tree, prefix=""):
    """Every leaf of a summary by its dotted name, without the timings (which no two runs share)."""
    if isinstance(tree, dict):
        out = {}
        for k, v in tree.items():
            if "seconds" not in k and not k.startswith("time/") and k not in ("sync/seconds", "rollout_logp_gap"):
                out.update(_numbers(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: tree}


@pytest.mark.slow  # 31 s: a run killed past a checkpoint, resumed, compared
def test_a_killed_and_resumed_run_summarises_like_the_uninterrupted_one(tmp_path):
    assert cli.main(["train", *ARGS, "--run-dir", str(tmp_path / "whole"), "--no-progress"]) == 0
    saved, logged = _kill_past_a_checkpoint(tmp_path / "cut")
    assert cli.main(["train", *ARGS, "--run-dir", str(tmp_path / "cut"), "--no-progress"]) == 0
    steps = _train_steps(tmp_path / "cut")
    assert len(steps) > len(set(steps)) == 8  # steps after the checkpoint were logged twice
    whole, cut = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("whole", "cut"))
    a, b = _numbers(whole), _numbers(cut)
    assert a.keys() == b.keys() and "figure.before" in a
    for name in a:
        if isinstance(a[name], float):
            np.testing.assert_allclose(b[name], a[name], rtol=1e-4, atol=1e-6, err_msg=name)
        else:
            assert b[name] == a[name], name
    # the figure is the mean of the first and last 5 logged rewards of the whole run (an independent reading)
    rows = {}
    for line in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["mode"] == "train":
            rows[row["step"]] = row["rewards/mean"]
    rewards = [rows[s] for s in sorted(rows)]
    np.testing.assert_allclose([cut["figure"]["before"], cut["figure"]["after"]],
                               [np.mean(rewards[:5]), np.mean(rewards[-5:])], rtol=1e-6)
    # the final evaluation is the loop's own at step 8, logged once and quoted by the summary (not run again)
    for run in ("whole", "cut"):
        evals = [json.loads(line) for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()
                 if '"eval"' in line]
        assert [e["step"] for e in evals if e["mode"] == "eval"] == [0, 8], run  # before, after
    summary_after = whole["heldout_accuracy_after"]
    assert summary_after == [e for e in evals if e["mode"] == "eval"][-1]["arith_accuracy"]
