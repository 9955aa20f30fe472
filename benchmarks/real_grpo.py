"""The real GRPO recipe (Gemma 3 270M, LoRA, sums to 38 as text) timed end to end, on whatever JAX finds.

    python benchmarks/real_grpo.py --model DIR_OR_NAME [--out DIR] [--set key=value ...] [--tpu]
    python benchmarks/real_grpo.py --model DIR --seed 1 [--max-steps N] [--heldout-n N]   # as real_grpo_compare.py

Runs `recipes/gemma3_270m_grpo.yaml` (with `--tpu`, its larger TPU sizes below) and prints one JSON line: the
machine, the held-out greedy accuracy before and after, the run's wall and train seconds, the curve's
evaluations, and every global step's seconds (a step ends when the learner has its update and the rollout engine
the new weights), the first from the start of the training call and from the start of this script, and the
median of steps 2..N. `--seed S` means what `tools/record_real_seeds.py` means by it: the training rows in the
order seed S gives them (0: the file's), `rollout.seed = S` and `training.seed = S`. `--out` also receives
summary.json, metrics.jsonl and curve.png, named by `--name`.
"""
import time

T_SCRIPT = time.perf_counter()  # before every import that costs: "from process start" is measured from here

import argparse  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# one TPU v5e chip: 4x the prompts per step of the CPU recipe, the same learning rate, 30 steps
TPU_SIZES = ["training.batch_size=32", "training.max_steps=30", "training.eval_every_n_steps=10",
             "training.save_every_n_steps=30"]
RECIPE = ROOT / "recipes" / "gemma3_270m_grpo.yaml"


def seed_lines(lines: list, seed: int) -> list:
    """The training file's lines in seed `seed`'s order (record_real_seeds' meaning: 0 keeps the file's order)."""
    lines = list(lines)
    if seed:
        random.Random(seed).shuffle(lines)
    return lines


def seed_overrides(seed: int, train_file: Path) -> list:
    """The recipe overrides a seed makes for an RL recipe, as record_real_seeds makes them."""
    return [f"data.train={train_file}", f"rollout.seed={seed}", f"training.seed={seed}"]


def step_figures(train_start: float, ends: list, script_start: float = T_SCRIPT) -> dict:
    """Per-step seconds from the step end times; first step from the train call and from the script's start."""
    steps = [b - a for a, b in zip([train_start] + ends[:-1], ends)]
    return {"step_seconds": [round(x, 4) for x in steps],
            "first_step_s": round(steps[0], 3) if steps else None,
            "first_step_s_from_process_start": round(ends[0] - script_start, 3) if ends else None,
            "median_step_s": round(statistics.median(steps[1:]), 4) if len(steps) > 1 else None,
            "train_seconds_to_last_step": round(ends[-1] - train_start, 2) if ends else None}


def _time_steps(marks: dict) -> None:
    """Record when the RL learner's train call starts and each of its global steps ends (wrappers, no change)."""
    from tunix_lit.rl import learner

    consume, train = learner.RLLearner._consume_step, learner.RLLearner.train

    def timed_consume(self, q):
        got = consume(self, q)
        if got is not None:  # the step's update is done (its metrics fetched) and the rollout has the weights
            marks["ends"].append(time.perf_counter())
        return got

    def timed_train(self, *args, **kwargs):
        marks["start"] = time.perf_counter()
        return train(self, *args, **kwargs)

    learner.RLLearner._consume_step, learner.RLLearner.train = timed_consume, timed_train


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--name", default="gemma3_270m_grpo")
    p.add_argument("--tpu", action="store_true", help="the TPU sizes (TPU_SIZES) before any --set")
    p.add_argument("--set", nargs="*", default=[], help="recipe overrides, section.key=value")
    p.add_argument("--seed", type=int, default=None, help="record_real_seeds' seed: row order, rollout and training seed")
    p.add_argument("--max-steps", type=int, default=None, help="training.max_steps")
    p.add_argument("--heldout-n", type=int, default=None, help="the first N held-out sums only (data.heldout_limit)")
    a = p.parse_args(argv)
    import jax
    import yaml

    from tunix_lit.recipes import resolve_recipe, run_recipe

    run_dir = Path("/tmp") / f"run_{a.name}_{os.getpid()}"
    sets = list(TPU_SIZES if a.tpu else [])
    if a.seed is not None:
        train = RECIPE.parent / yaml.safe_load(RECIPE.read_text())["data"]["train"]
        order = Path(tempfile.mkdtemp()) / "train.jsonl"
        order.write_text("\n".join(seed_lines(train.read_text().splitlines(), a.seed)) + "\n")
        sets += seed_overrides(a.seed, order)
    sets += [f"training.max_steps={a.max_steps}"] * (a.max_steps is not None)
    sets += [f"data.heldout_limit={a.heldout_n}"] * (a.heldout_n is not None)
    overrides = [f"model={a.model}", f"run_dir={run_dir}"] + sets + a.set
    recipe = resolve_recipe(RECIPE, overrides)
    marks = {"start": None, "ends": []}
    _time_steps(marks)
    start = time.perf_counter()
    log = io.StringIO()
    summary = run_recipe(recipe, progress_bar=False, out=log)
    wall = time.perf_counter() - start
    evals = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    curve = [(m["step"], m.get("accuracy")) for m in evals if m.get("mode") == "eval"]
    rewards = [m["rewards/mean"] for m in evals if m.get("mode") != "eval" and "rewards/mean" in m]
    record = {"name": a.name, "side": "ours", "seed": a.seed, "backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()],
              "host": platform.node(), "cpus": os.cpu_count(), "load_average": os.getloadavg(),
              "overrides": overrides[2:], "steps": summary["steps"],
              "heldout_accuracy_before": summary["heldout_accuracy_before"],
              "heldout_accuracy_after": summary["heldout_accuracy_after"],
              "train_seconds": summary["train_seconds_this_run"], "wall_seconds_in_process": round(wall, 1),
              "reward_first_last": [summary["figure"]["before"], summary["figure"]["after"]], "eval_curve": curve,
              "rewards_per_step": [round(x, 4) for x in rewards],
              **(step_figures(marks["start"], marks["ends"]) if marks["start"] is not None else {})}
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
