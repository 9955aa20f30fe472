"""Benchmark: GRPO with rollouts allowed to run 0, 1 or 2 policy versions ahead of training (RLTrainingConfig.max_staleness).

For each staleness the tiny GRPO recipe (`recipes/grpo_tiny.yaml`: two-digit sums on the embedded default model) runs
`--steps` global steps from the same start, through the same code path as `tunix-lit train`. It prints one JSON line:
for each staleness, global steps per second of training (evaluation and checkpoints left out of the clock, but the
first step's compilation in), held-out accuracy before and after, and from the run's metrics log the mean lag of the
trained micro-batches (syncs behind the weights they trained) and how many were dropped past the bound.

    python benchmarks/staleness.py [--steps 100] [--staleness 0 1 2] [--record benchmarks/results/NAME.json]

Nothing here names a device: on a TPU machine JAX picks the chip, on a CPU the CPU.
"""

import argparse
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(ROOT))  # tunix_lit from this checkout
from machine import add_max_isa_arg, apply_max_isa, machine_info  # noqa: E402


def one_run(recipe_path: str, steps: int, staleness: int, extra=()) -> dict:
    """Train the recipe `steps` global steps at `staleness`; its figures."""
    from tunix_lit.recipes import resolve_recipe, run_recipe

    with tempfile.TemporaryDirectory() as run_dir:
        recipe = resolve_recipe(recipe_path, [f"training.max_steps={steps}", f"training.max_staleness={staleness}",
                                              "training.eval_every_n_steps=null", f"training.save_every_n_steps={steps}",
                                              f"run_dir={run_dir}", *extra])
        summary = run_recipe(recipe, progress_bar=False, out=io.StringIO())
        rows = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r.get("mode") == "train"]
    lags = [r["staleness/mean"] for r in train if r.get("staleness/mean") is not None]
    return {"max_staleness": staleness, "steps": summary["steps"],
            "train_seconds": summary["train_seconds_this_run"],
            "steps_per_second": round(summary["steps"] / summary["train_seconds_this_run"], 4),
            "heldout_accuracy_before": summary["heldout_accuracy_before"],
            "heldout_accuracy_after": summary["heldout_accuracy_after"],
            "heldout_size": summary["heldout_size"],
            "mean_lag": round(sum(lags) / len(lags), 4) if lags else None,
            "max_lag": max((r.get("staleness/max") or 0.0) for r in train) if train else None,
            "dropped_micro_batches": sum((r.get("staleness/dropped") or 0.0) for r in train),
            "last_reward_mean": summary["last_train_metrics"].get("rewards/mean")}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100, help="global steps per run")
    p.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--recipe", default=str(ROOT / "recipes" / "grpo_tiny.yaml"))
    p.add_argument("--set", nargs="*", default=[], help="more recipe overrides, key=value")
    p.add_argument("--record", help="also write the JSON line, indented, to this file")
    add_max_isa_arg(p)
    args = p.parse_args(argv)
    apply_max_isa(args.max_isa)
    t0 = time.perf_counter()
    runs = [one_run(args.recipe, args.steps, k, args.set) for k in args.staleness]
    import jax

    out = {"benchmark": "staleness", "recipe": os.path.relpath(args.recipe, ROOT), "overrides": args.set,
           "steps": args.steps, "platform": jax.default_backend(), "runs": runs,
           "wall_seconds": round(time.perf_counter() - t0, 1), "machine": machine_info()}
    print(json.dumps(out))
    if args.record:
        Path(args.record).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
