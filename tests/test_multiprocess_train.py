"""`tunix-lit train` as 2 JAX processes x 4 fake CPU devices, against the same command in this one 8-device process.

The two-process job is started by `tunix_lit.distributed.launch_local` (the launcher the book shows); the
one-process run is `tunix_lit.cli.main` here, where conftest gives 8 devices. Both runs write metrics.jsonl;
the tests compare them step by step, check that only one process wrote, and resume each run directory in the
other process count. One short GRPO run in both process counts is in the default run; the rest is `slow`
(a whole recipe as a job, 2-3 minutes of CPU together): the default run also covers the launcher, the data
split, a gathered metric, an orbax round trip, one writer and a killed process in tests/test_distributed.py;
`python -m pytest -m slow tests/test_multiprocess_train.py` runs the rest.
"""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from tunix_lit import cli, distributed

ROOT = Path(__file__).resolve().parents[1]
TRAIN = [sys.executable, "-c", "import sys; from tunix_lit.cli import main; sys.exit(main())", "train"]
MESH = ["mesh.fsdp=4", "mesh.tp=2"]
# a short GRPO job: 8 prompts x 4 completions a step, 32 held-out rows
GRPO = [str(ROOT / "recipes" / "grpo_tiny.yaml"), *MESH, "training.batch_size=8", "grpo.num_generations=4",
        "task.heldout_size=32", "eval.batch_size=32", "training.eval_every_n_steps=2",
        "training.save_every_n_steps=2"]
LORA = [str(ROOT / "recipes" / "lora_tiny.yaml"), *MESH, "training.batch_size=16", "task.heldout_size=32",
        "eval.batch_size=32", "training.log_every_n_steps=1", "training.save_every_n_steps=2"]

pytestmark = pytest.mark.skipif(jax.device_count() != 8, reason="the one-process side needs 8 devices (conftest)")


def _two_processes(args, run_dir, timeout_s=300):
    """Run `tunix-lit train ARGS --run-dir RUN_DIR` as 2 processes x 4 devices; their ProcessResults."""
    return distributed.launch_local(TRAIN + list(args) + ["--run-dir", str(run_dir), "--no-progress"], 2,
                                    devices_per_process=4, timeout_s=timeout_s, cwd=str(ROOT))


def _one_process(args, run_dir):
    """The same command in this process (8 devices, no cluster)."""
    assert cli.main(["train", *args, "--run-dir", str(run_dir), "--no-progress"]) == 0


def _rows(run_dir) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def _comparable(row: dict) -> dict:
    """A metrics row without its timings and the engine-vs-actor log-prob gap (itself float rounding, ~1e-6)."""
    return {k: v for k, v in row.items() if not (k.startswith("time/") or k in ("sync/seconds", "rollout_logp_gap"))}


def assert_same_metrics(a_dir, b_dir, rtol=1e-4):
    """Every logged row of the two runs: same step, mode, names and values (relative difference <= rtol)."""
    a, b = [_comparable(r) for r in _rows(a_dir)], [_comparable(r) for r in _rows(b_dir)]
    assert [(r["step"], r["mode"]) for r in a] == [(r["step"], r["mode"]) for r in b]
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        names = [k for k in x if x[k] is not None and k not in ("step", "mode")]
        np.testing.assert_allclose([x[k] for k in names], [y[k] for k in names], rtol=rtol, atol=1e-6,
                                   err_msg=f"step {x['step']} ({x['mode']})")


@pytest.mark.slow  # 54 s of two training processes; chapter 22's default cells launch and check two processes
def test_two_processes_equal_one_on_a_short_grpo_run(tmp_path):
    """In the default run: one GRPO step as 2 processes x 4 devices logs and summarises what 1 x 8 does."""
    args = GRPO + ["training.max_steps=1", "task.heldout_size=16", "eval.batch_size=16"]
    results = _two_processes(args, tmp_path / "two")
    _one_process(args, tmp_path / "one")
    assert [r["step"] for r in _rows(tmp_path / "two") if r["mode"] == "train"] == [1]  # one writer: once
    assert "held-out accuracy after 1 steps" in results[0].output and "held-out accuracy" not in results[1].output
    assert_same_metrics(tmp_path / "two", tmp_path / "one")
    a, b = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("two", "one"))
    assert a["steps"] == b["steps"] == 1
    for key in ("heldout_accuracy_before", "heldout_accuracy_after"):
        assert abs(a[key] - b[key]) <= 0.01, key  # the same greedy answers
    np.testing.assert_allclose([a["figure"]["before"], a["figure"]["after"]],
                               [b["figure"]["before"], b["figure"]["after"]], rtol=1e-4, atol=1e-6)


@pytest.fixture(scope="module")
def grpo_runs(tmp_path_factory):
    """Two steps of GRPO as 2 processes (dir `two`) and as 1 process (dir `one`)."""
    tmp = tmp_path_factory.mktemp("grpo")
    results = _two_processes(GRPO + ["training.max_steps=2"], tmp / "two")
    _one_process(GRPO + ["training.max_steps=2"], tmp / "one")
    return tmp, results


@pytest.mark.slow
def test_two_processes_log_the_same_grpo_metrics_as_one(grpo_runs):
    tmp, _ = grpo_runs
    rows = _rows(tmp / "two")
    assert [r["step"] for r in rows if r["mode"] == "train"] == [1, 2]  # one writer: each step once
    assert_same_metrics(tmp / "two", tmp / "one")
    a, b = (json.loads((tmp / d / "summary.json").read_text()) for d in ("two", "one"))
    assert a["steps"] == b["steps"] == 2
    assert abs(a["heldout_accuracy_after"] - b["heldout_accuracy_after"]) <= 0.01


@pytest.mark.slow
def test_only_process_zero_reports_and_writes(grpo_runs):
    tmp, results = grpo_runs
    assert "held-out accuracy after 2 steps" in results[0].output
    assert "held-out accuracy" not in results[1].output and "[ 1] mesh" not in results[1].output
    written = sorted(p.name for p in (tmp / "two").iterdir() if p.name.startswith("events.out.tfevents"))
    assert len(written) == 1  # one TensorBoard file: process 1 opened none
    assert {"summary.json", "curve.png", "before.json", "config.yaml"} <= {p.name for p in (tmp / "two").iterdir()}


@pytest.mark.slow
def test_a_two_process_checkpoint_resumes_in_one_process(grpo_runs):
    tmp, _ = grpo_runs
    meta = json.loads((tmp / "two" / "checkpoints" / "2" / "meta" / "metadata").read_text())
    assert meta["process_count"] == 2 and len(meta["rng_key_data"]) == 2
    # step 3 in one process from the 2-process checkpoint, and from the 1-process one: the same numbers
    _one_process(GRPO + ["training.max_steps=3"], tmp / "two")
    _one_process(GRPO + ["training.max_steps=3"], tmp / "one")
    assert [r["step"] for r in _rows(tmp / "two") if r["mode"] == "train"] == [1, 2, 3]
    assert_same_metrics(tmp / "two", tmp / "one")


@pytest.mark.slow
def test_a_one_process_checkpoint_resumes_in_two_processes(tmp_path):
    for max_steps in (2, 3):  # the reference stops and resumes at the same step, so it logs the same rows
        _one_process(GRPO + [f"training.max_steps={max_steps}"], tmp_path / "ref")
    _one_process(GRPO + ["training.max_steps=2"], tmp_path / "one")
    _two_processes(GRPO + ["training.max_steps=3"], tmp_path / "one")  # resumes the 1-process run at step 2
    assert [r["step"] for r in _rows(tmp_path / "one") if r["mode"] == "train"] == [1, 2, 3]
    assert_same_metrics(tmp_path / "one", tmp_path / "ref")


@pytest.mark.slow
def test_two_processes_match_one_on_a_lora_sft_run(tmp_path):
    args = LORA + ["training.max_steps=6"]
    _two_processes(args, tmp_path / "two")
    _one_process(args, tmp_path / "one")
    assert [r["step"] for r in _rows(tmp_path / "two") if r["mode"] == "train"] == [1, 2, 3, 4, 5, 6]
    assert_same_metrics(tmp_path / "two", tmp_path / "one")


@pytest.mark.slow
def test_killing_one_process_stops_the_other_and_a_rerun_resumes(tmp_path):
    """Process 1 is killed once a checkpoint exists; process 0 must exit by itself; the same two commands resume."""
    args = TRAIN + GRPO + ["training.max_steps=40", "training.save_every_n_steps=1", "--run-dir",
                           str(tmp_path / "run"), "--no-progress"]
    coordinator = f"127.0.0.1:{distributed.free_port()}"
    env = {**os.environ, distributed.ENV_HEARTBEAT: "10"}
    logs = [open(tmp_path / f"process_{i}.log", "wb") for i in range(2)]  # a file never blocks a chatty process
    procs = [subprocess.Popen(args, cwd=str(ROOT), stdout=logs[i], stderr=subprocess.STDOUT,
                              env=distributed.process_env(i, 2, coordinator, 4, env), start_new_session=True)
             for i in range(2)]
    try:
        deadline = time.monotonic() + 240
        while not (tmp_path / "run" / "checkpoints" / "2").is_dir():
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "no checkpoint was written"
            time.sleep(0.2)
        os.killpg(procs[1].pid, signal.SIGKILL)
        killed_at = time.monotonic()
        code = procs[0].wait(timeout=120)  # bounded: JAX's heartbeat (10 s here) or a broken collective
        assert code != 0, "process 0 carried on after its partner died"
        assert time.monotonic() - killed_at < 120
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        for log in logs:
            log.close()
    saved = max(int(p.name) for p in (tmp_path / "run" / "checkpoints").iterdir() if p.name.isdigit())
    results = _two_processes(GRPO + ["training.max_steps=" + str(saved + 2), "training.save_every_n_steps=1"],
                             tmp_path / "run")
    assert f"resuming at step {saved}" in results[0].output
    steps = [r["step"] for r in _rows(tmp_path / "run") if r["mode"] == "train"]
    assert steps[-2:] == [saved + 1, saved + 2]
