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
import sys  # noqa: E402
import tempfile  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_timing import step_figures  # noqa: E402  (both sides time their steps alike)

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


def _time_steps(marks: dict) -> None:
    """Record when the RL learner's train call starts and each of its global steps ends (wrappers, no change)."""
    from tunix_lit.rl import learner

    consume, train = learner.RLLearner._consume_step, learner.RLLearner.train

    def timed_consume(self, q):
        got = consume(self, q)
        if got is not None:  # the step's update is done (its metrics fetched) and the rollout has the weights
            marks["ends"].append(time.perf_counter())
            if marks.get("probe") is not None and len(marks["ends"]) == 1:
                marks["first_step_probe"] = marks["probe"].snapshot()
        return got

    def timed_train(self, *args, **kwargs):
        marks["start"] = time.perf_counter()
        if marks.get("probe") is not None:
            marks["before_train_probe"] = marks["probe"].snapshot()
        return train(self, *args, **kwargs)

    learner.RLLearner._consume_step, learner.RLLearner.train = timed_consume, timed_train


class CompileProbe:
    """Per jit site (module name): traces, lowerings, compiles, persistent-cache hits and misses and their seconds."""

    def __init__(self):
        import collections

        from jax._src import compiler, monitoring

        self.sites = collections.defaultdict(lambda: collections.Counter())
        self.events, self.durations = collections.Counter(), collections.Counter()
        names = {"/jax/core/compile/jaxpr_trace_duration": "trace", "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
                 "/jax/core/compile/backend_compile_duration": "compile"}

        def on_duration(event, duration, **kw):
            if event in names:
                site = self.sites[kw.get("fun_name", "?")]
                site[names[event] + "_n"] += 1
                site[names[event] + "_s"] += duration
            else:
                self.durations[event.rsplit("/", 1)[-1]] += duration

        def on_event(event, **kw):
            self.events[event.rsplit("/", 1)[-1]] += 1

        monitoring.register_event_duration_secs_listener(on_duration)
        monitoring.register_event_listener(on_event)
        inner = compiler.compile_or_get_cached

        def timed(backend, computation, *args, **kwargs):  # the module's name, and hit or miss, per call
            name = str(computation.operation.attributes["sym_name"]).strip('"')
            where = [f"{f.filename.rsplit('tunix_lit/', 1)[-1]}:{f.lineno}" for f in traceback.extract_stack()
                     if "tunix_lit/" in f.filename]
            if where:  # the innermost line of ours that asked for the program
                name = f"{name} @ {where[-1]}"
            hits, t0 = self.events["cache_hits"], time.perf_counter()
            out = inner(backend, computation, *args, **kwargs)
            site = self.sites[name]
            site["get_executable_s"] += time.perf_counter() - t0
            site["cache_hit" if self.events["cache_hits"] > hits else "built"] += 1
            return out

        compiler.compile_or_get_cached = timed

    def snapshot(self) -> dict:
        """Totals and the sites, biggest (trace + lower + executable) first."""
        rows = {k: {n: round(v, 3) if isinstance(v, float) else v for n, v in c.items()} for k, c in self.sites.items()}
        cost = lambda c: c.get("trace_s", 0) + c.get("lower_s", 0) + c.get("get_executable_s", 0)
        tot = lambda key: round(sum(c.get(key, 0) for c in self.sites.values()), 3)
        return {"events": dict(self.events), "durations": {k: round(v, 3) for k, v in self.durations.items()}, "trace_s": tot("trace_s"), "lower_s": tot("lower_s"),
                "compile_s": tot("compile_s"), "get_executable_s": tot("get_executable_s"),
                "built": tot("built"), "cache_hit": tot("cache_hit"),
                "sites": dict(sorted(rows.items(), key=lambda kv: -cost(kv[1])))}


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
    p.add_argument("--cache-dir", default=None, help="a JAX persistent compile cache that keeps every program")
    p.add_argument("--probe", action="store_true", help="count traces, lowerings, compiles and cache hits per jit site")
    a = p.parse_args(argv)
    import jax

    if a.cache_dir:  # this process only: every program goes to (and comes from) the cache, as on a TPU
        jax.config.update("jax_compilation_cache_dir", a.cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    probe = CompileProbe() if a.probe else None
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
    marks = {"start": None, "ends": [], "probe": probe}
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
              **(step_figures(marks["start"], marks["ends"], T_SCRIPT) if marks["start"] is not None else {})}
    if probe is not None:
        record["probe"] = {k: marks.get(k) for k in ("before_train_probe", "first_step_probe")}
        record["probe"]["end"] = probe.snapshot()
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
