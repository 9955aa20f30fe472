"""The real GRPO recipe (Gemma 3 270M, LoRA, sums to 38 as text) timed end to end, on whatever JAX finds.

    python benchmarks/real_grpo.py --model DIR_OR_NAME [--out DIR] [--set key=value ...] [--tpu]

Runs `recipes/gemma3_270m_grpo.yaml` (with `--tpu`, its larger TPU sizes below) and prints one JSON line: the
machine, the held-out greedy accuracy before and after, the run's wall and train seconds, the curve's
evaluations. `--out` also receives summary.json, metrics.jsonl and curve.png, named by `--name`.
"""
import argparse
import io
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# one TPU v5e chip: 4x the prompts per step of the CPU recipe, the same learning rate, 30 steps
TPU_SIZES = ["training.batch_size=32", "training.max_steps=30", "training.eval_every_n_steps=10",
             "training.save_every_n_steps=30"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--name", default="gemma3_270m_grpo")
    p.add_argument("--tpu", action="store_true", help="the TPU sizes (TPU_SIZES) before any --set")
    p.add_argument("--set", nargs="*", default=[], help="recipe overrides, section.key=value")
    a = p.parse_args(argv)
    import jax

    from tunix_lit.recipes import resolve_recipe, run_recipe

    run_dir = Path("/tmp") / f"run_{a.name}_{os.getpid()}"
    overrides = [f"model={a.model}", f"run_dir={run_dir}"] + (TPU_SIZES if a.tpu else []) + a.set
    recipe = resolve_recipe(ROOT / "recipes" / "gemma3_270m_grpo.yaml", overrides)
    start = time.perf_counter()
    log = io.StringIO()
    summary = run_recipe(recipe, progress_bar=False, out=log)
    wall = time.perf_counter() - start
    evals = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    curve = [(m["step"], m.get("accuracy")) for m in evals if m.get("mode") == "eval"]
    record = {"name": a.name, "backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()],
              "host": platform.node(), "cpus": os.cpu_count(), "load_average": os.getloadavg(),
              "overrides": overrides[2:], "steps": summary["steps"],
              "heldout_accuracy_before": summary["heldout_accuracy_before"],
              "heldout_accuracy_after": summary["heldout_accuracy_after"],
              "train_seconds": summary["train_seconds_this_run"], "wall_seconds_in_process": round(wall, 1),
              "reward_first_last": [summary["figure"]["before"], summary["figure"]["after"]], "eval_curve": curve}
    print(log.getvalue())
    print("RESULT " + json.dumps(record, default=float), flush=True)
    if a.out is not None:
        a.out.mkdir(parents=True, exist_ok=True)
        for f in ("summary.json", "metrics.jsonl", "curve.png"):
            if (run_dir / f).exists():
                shutil.copy(run_dir / f, a.out / f"{a.name}.{f}")
        (a.out / f"{a.name}.result.json").write_text(json.dumps(record, indent=2, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
