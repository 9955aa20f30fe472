"""Run the real-model recipes with several seeds through `tunix-lit train`, and keep what the held-out answers were.

    python tools/record_real_seeds.py smollm2_135m_qlora gemma3_270m_grpo --seeds 0 1 2
    python tools/record_real_seeds.py --summarise      # only re-derive the summary from the stored runs

A seed changes what a run is free to change and nothing else. The held-out file stays the recipe's own (the
same 100 sums for every seed). Seed 0 is the shipped recipe exactly; seed s > 0 trains on the same training rows
in an order shuffled by s, and for GRPO also samples its rollouts from `rollout.seed = s`. (The SFT trainer
walks its batches in file order and the LoRA adapters start from a fixed key, so the order is what varies there.)

Each run's held-out greedy completions, before and after training, are caught by `accuracy` below, which the
run is told to use in place of the recipe's own (it scores exactly as `recipes/real_sums.py:accuracy` does and
also appends every completion to a log). From them the record splits accuracy into two parts a reader can
interpret: the share of answers in the expected format (the completion is one integer and nothing else but
whitespace or a closing full stop), and
the share correct among those. Everything lands in `recipes/results/real_seeds_cpu.json` (`--out` to change):
per seed, before / after accuracy, format share, correct-among-formatted, train and wall seconds, a few
held-out samples; per recipe, mean and range over seeds.
"""
import argparse
import datetime
import json
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "recipes"))
from record_runs import recipe_hashes  # noqa: E402

LOG_ENV = "TUNIX_LIT_EVAL_LOG"
BARE_INTEGER = re.compile(r"\s*-?\d+\.?\s*")  # the expected format: one integer (a closing full stop allowed)
SAMPLE_ROWS = 6  # held-out samples kept per seed


def accuracy(prompts, completions, answer, **_):
    """real_sums.accuracy (leading integer equals the sum), also appending each completion to $TUNIX_LIT_EVAL_LOG."""
    import real_sums

    scores = real_sums.accuracy(prompts, completions, answer)
    path = os.environ.get(LOG_ENV)
    if path:  # one line per call: RL also calls it on each step's training rollouts, which evaluations() skips
        with open(path, "a") as f:
            f.write(json.dumps([{"prompt": p, "completion": c, "answer": str(a)}
                                for p, c, a in zip(prompts, completions, answer)]) + "\n")
    return scores


def split_scores(rows: list) -> dict:
    """{'accuracy', 'in_format', 'correct_in_format', 'correct_outside_format'} of one held-out evaluation's rows."""
    import real_sums

    fmt = [bool(BARE_INTEGER.fullmatch(r["completion"])) for r in rows]
    right = [real_sums.answer_of(r["completion"]) == int(r["answer"]) for r in rows]
    n_fmt = sum(fmt)
    # a wrong bare number off by exactly ten: the units digit right, the tens digit not
    misses = [abs(real_sums.answer_of(r["completion"]) - int(r["answer"])) for r, f, g in zip(rows, fmt, right)
              if f and not g]
    return {"accuracy": sum(right) / len(rows), "in_format": n_fmt / len(rows),
            "correct_in_format": (sum(f and g for f, g in zip(fmt, right)) / n_fmt) if n_fmt else None,
            "correct_outside_format": sum(g and not f for f, g in zip(fmt, right)) / len(rows),
            "wrong_in_format_off_by_ten": (sum(m == 10 for m in misses) / len(misses)) if misses else None}


def evaluations(log: Path, held_prompts: list) -> list:
    """The logged calls that scored the whole held-out set (its prompts, in its order), in the order they ran."""
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    return [rows for rows in calls if [r["prompt"] for r in rows] == held_prompts]


def run_seed(name: str, seed: int, overrides: list) -> dict:
    """One `tunix-lit train recipes/NAME.yaml` run with `seed`; its figures and held-out completions."""
    import yaml

    recipe_path = ROOT / "recipes" / f"{name}.yaml"
    recipe = yaml.safe_load(recipe_path.read_text())
    train_file = recipe_path.parent / recipe["data"]["train"]
    held_file = recipe_path.parent / recipe["data"]["heldout"]
    held_prompts = [json.loads(line)["prompt"] for line in held_file.read_text().splitlines()]
    size = len(held_prompts)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        rows = train_file.read_text().splitlines()
        if seed:
            random.Random(seed).shuffle(rows)
        (tmp / "train.jsonl").write_text("\n".join(rows) + "\n")
        sets = [f"data.train={tmp / 'train.jsonl'}", f"reward.accuracy={Path(__file__).resolve()}:accuracy"]
        if recipe["algorithm"] != "sft":
            sets += [f"rollout.seed={seed}", f"training.seed={seed}"]
        cmd = [sys.executable, "-c", "import sys; from tunix_lit.cli import main; sys.exit(main())", "train",
               str(recipe_path), *sets, *overrides, "--run-dir", str(tmp / "run"), "--no-progress"]
        env = dict(os.environ, **{LOG_ENV: str(tmp / "eval.jsonl")})
        start = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=ROOT, env=env)
        wall = time.perf_counter() - start
        summary = json.loads((tmp / "run" / "summary.json").read_text())
        evals = evaluations(tmp / "eval.jsonl", held_prompts)
    before, after = evals[0], evals[-1]
    picks = random.Random(1234).sample(range(size), SAMPLE_ROWS)  # the same rows for every seed
    return {"seed": seed, "overrides": [s for s in sets if not s.startswith(("data.train", "reward.accuracy"))]
            + overrides, "steps": summary["steps"],
            "heldout_accuracy_before": summary["heldout_accuracy_before"],
            "heldout_accuracy_after": summary["heldout_accuracy_after"],
            "before": split_scores(before), "after": split_scores(after),
            "evaluations": len(evals), "train_seconds": summary["train_seconds_this_run"],
            "wall_seconds": round(wall, 1), "figure": summary["figure"],
            "samples": [{"prompt": before[i]["prompt"], "answer": before[i]["answer"],
                         "before": before[i]["completion"], "after": after[i]["completion"]} for i in picks],
            "completions": {"before": [r["completion"] for r in before], "after": [r["completion"] for r in after]}}


def spread(values: list) -> dict:
    """{'mean', 'min', 'max', 'n'} of the non-missing values."""
    v = [x for x in values if x is not None]
    return {"mean": sum(v) / len(v), "min": min(v), "max": max(v), "n": len(v)} if v else None


def summarise(runs: list) -> dict:
    """Mean and range over the seeds of every figure a reader is shown."""
    out = {}
    for when in ("before", "after"):
        for key in ("accuracy", "in_format", "correct_in_format", "correct_outside_format", "wrong_in_format_off_by_ten"):
            out[f"{when}_{key}"] = spread([r[when][key] for r in runs])
    out["train_seconds"] = spread([r["train_seconds"] for r in runs])
    out["gain"] = spread([r["after"]["accuracy"] - r["before"]["accuracy"] for r in runs])
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="recipe names, e.g. gemma3_270m_grpo smollm2_135m_qlora")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--set", nargs="*", default=[], help="further recipe overrides, section.key=value")
    p.add_argument("--out", type=Path, default=ROOT / "recipes" / "results" / "real_seeds_cpu.json")
    p.add_argument("--summarise", action="store_true", help="re-derive the summaries from the stored runs only")
    a = p.parse_args(argv)
    load = lambda: json.loads(a.out.read_text()) if a.out.exists() else {"recipes": {}}
    record = load()
    for name in a.names:
        for seed in a.seeds:
            run = run_seed(name, seed, a.set)
            record = load()  # read again: another recording may have written the file during this run
            entry = record["recipes"].setdefault(name, {"runs": []})
            entry["runs"] = [r for r in entry["runs"] if r["seed"] != seed] + [run]
            entry["runs"].sort(key=lambda r: r["seed"])
            entry.update(recipe=f"recipes/{name}.yaml", recipe_sha256=recipe_hashes(name))
            entry["summary"] = summarise(entry["runs"])
            record.update(machine=f"{platform.machine()}, {os.cpu_count()} CPU cores, {platform.system()}",
                          executed=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
            a.out.write_text(json.dumps(record, indent=1, default=float) + "\n")  # after every seed: none is lost
            print(f"{name} seed {seed}: {run['before']['accuracy']:.0%} -> {run['after']['accuracy']:.0%}, in format "
                  f"{run['before']['in_format']:.0%} -> {run['after']['in_format']:.0%}, "
                  f"{run['train_seconds']} s of training", flush=True)
    if a.summarise:
        for entry in record["recipes"].values():
            for run in entry["runs"]:
                for when in ("before", "after"):
                    run[when] = split_scores([{"completion": c, "answer": s["answer"]} for c, s in
                                              zip(run["completions"][when], _answers(entry, run))])
            entry["summary"] = summarise(entry["runs"])
        a.out.write_text(json.dumps(record, indent=1, default=float) + "\n")
    return 0


def _answers(entry: dict, run: dict) -> list:
    """The held-out answers in file order, as the evaluations saw them."""
    import yaml

    path = ROOT / entry["recipe"]
    held = path.parent / yaml.safe_load(path.read_text())["data"]["heldout"]
    return [{"answer": json.loads(line)["answer"]} for line in held.read_text().splitlines()]


if __name__ == "__main__":
    sys.exit(main())
