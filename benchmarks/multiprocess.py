"""A recipe as 2 JAX processes x 4 fake CPU devices beside the same recipe in 1 process x 8 devices; one JSON line.

    python benchmarks/multiprocess.py recipes/grpo_tiny.yaml mesh.fsdp=4 mesh.tp=2
    python benchmarks/multiprocess.py recipes/lora_tiny.yaml mesh.fsdp=4 mesh.tp=2 --out runs/mp_lora

Both runs are `tunix-lit train` in fresh processes (the 2-process job through `tunix_lit.distributed.launch_local`,
the 1-process run with XLA_FLAGS asking for 8 devices), one after the other on this machine. The line reports both
wall times, the held-out accuracy of each, how many logged rows they share, and the largest relative difference of
any logged value (timings excluded) and of the loss.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_info  # noqa: E402

from tunix_lit import distributed  # noqa: E402

TRAIN = [sys.executable, "-c", "import sys; from tunix_lit.cli import main; sys.exit(main())", "train"]


def rows(run_dir: Path) -> list:
    """metrics.jsonl of a run directory, one dict per logged row."""
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


NOT_COMPARED = ("rollout_logp_gap",)  # itself a float-rounding measure (~1e-6): no relative figure means anything


def relative_differences(a: list, b: list, tol: float = 1e-4) -> dict:
    """Largest relative difference of every shared value and of the losses, and the first row where one exceeds tol."""
    worst, worst_loss, first = 0.0, 0.0, None
    for x, y in zip(a, b):
        for k, v in x.items():
            if k in ("step", "mode") or k.startswith("time/") or k == "sync/seconds" or k in NOT_COMPARED \
                    or v is None or y.get(k) is None:
                continue
            d = abs(v - y[k]) / max(abs(v), abs(y[k]), 1e-12)
            if abs(v) < 1e-6 and abs(y[k]) < 1e-6:  # both zero to float rounding (a GRPO loss): no relative figure
                d = 0.0
            worst = max(worst, d)
            if k.endswith("loss"):
                worst_loss = max(worst_loss, d)
            if d > tol and first is None:
                first = {"step": x["step"], "mode": x["mode"], "name": k, "two": v, "one": y[k]}
    return {"max_rel_diff_all": worst, "max_rel_diff_loss": worst_loss, "first_row_over_1e-4": first}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--out", default=None, help="where the two run directories go (default: a fresh temp dir)")
    parser.add_argument("--timeout-s", type=float, default=3600)
    args = parser.parse_args()
    out = Path(args.out or __import__("tempfile").mkdtemp(prefix="tunix_lit_mp_"))
    command = TRAIN + [args.recipe, *args.overrides, "--no-progress"]
    t0 = time.perf_counter()
    distributed.launch_local(command + ["--run-dir", str(out / "two")], 2, devices_per_process=4,
                             timeout_s=args.timeout_s)
    two_s = time.perf_counter() - t0
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
    t0 = time.perf_counter()
    subprocess.run(command + ["--run-dir", str(out / "one")], env=env, check=True, stdout=subprocess.DEVNULL,
                   timeout=args.timeout_s)
    one_s = time.perf_counter() - t0
    a, b = rows(out / "two"), rows(out / "one")
    same_rows = [(r["step"], r["mode"]) for r in a] == [(r["step"], r["mode"]) for r in b]
    summaries = {n: json.loads((out / n / "summary.json").read_text()) for n in ("two", "one")}
    print(json.dumps({
        "benchmark": "multiprocess", "recipe": args.recipe, "overrides": args.overrides,
        "two_processes_x4_wall_s": round(two_s, 1), "one_process_x8_wall_s": round(one_s, 1),
        "steps": summaries["two"]["steps"], "logged_rows": len(a), "same_logged_rows": same_rows,
        **relative_differences(a, b),
        "heldout_accuracy": {n: {"before": s["heldout_accuracy_before"], "after": s["heldout_accuracy_after"]}
                             for n, s in summaries.items()},
        "run_dirs": str(out), "machine": machine_info(),
    }))


if __name__ == "__main__":
    main()
