"""Rollout correction where it matters: GRPO on the tiny world with an engine k steps stale, with and without
chapter 30's importance weights; several seeds each; one JSON record.

    python benchmarks/rollout_correction.py --stale 4 --steps 300 --batch-size 32 --learning-rate 2e-4 --seeds 0 1 2 \
        --arms fresh stale stale_corrected stale_corrected_sequence_truncate_2 stale_corrected_token_truncate_5 \
        --jobs 2 --out benchmarks/results/rollout_correction.json

At the main job's learning rate (5e-4: `benchmarks/results/rollout_correction_lr5e-4.json`, and one seed of other
caps and modes in `rollout_correction_sweep.json`) the policy moves so far in k syncs that no correction won back half
of what the staleness costs: the engine's samples hardly cover what the trainer would now draw. At 2e-4 the two
policies still overlap, and the weights can correct.

The engine samples with the weights of k syncs ago (a learner whose `sync_rollout` hands the engine an old
snapshot of the actor), so its log-probs are a different policy's. Arms, each on a fresh copy of the embedded
default with the same data and settings:

- `fresh`: the engine gets every sync (k = 0), the reference line;
- `stale`: k syncs behind, and the loss treats the samples as its own (no correction);
- `stale_corrected`: k syncs behind, `GRPOConfig(rollout_is_level=..., rollout_is_mode=..., rollout_is_cap=...)`
  from `--level/--mode/--cap`: each token's policy term weighted by exp(trainer log-prob − engine log-prob),
  truncated or masked;
- `stale_corrected_<level>_<mode>_<cap>` (e.g. `stale_corrected_sequence_truncate_2`): the same with its own
  correction, so that several corrections run beside one another on the same seeds.

Every arm shares every other setting. Each run records held-out accuracy (greedy, 256 two-digit sums) before and
after training (after: the trainer's current weights, synced to the engine for the evaluation), the training reward
over the first and last ten steps, the mean log-prob gap and the rollout weights' statistics; the record keeps every
run and each arm's mean and range over seeds, with the machine it ran on. With `--out` the record is rewritten as
each run ends, so a run cut short keeps what finished.
"""

import argparse
import collections
import concurrent.futures
import multiprocessing
import datetime
import itertools
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_info  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402

from tunix_lit.data import arith  # noqa: E402
from tunix_lit.models.load import load_model  # noqa: E402
from tunix_lit.rl.cluster import RLCluster, RolloutConfig  # noqa: E402
from tunix_lit.rl.grpo import GRPOConfig, GRPOLearner  # noqa: E402
from tunix_lit.rl.learner import RLTrainingConfig  # noqa: E402


class StaleEngineLearner(GRPOLearner):
    """GRPO whose engine always holds the actor's weights of `stale` syncs ago (0: the usual, current weights)."""

    def __init__(self, *args, stale: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.stale = stale
        self._snapshots = collections.deque(maxlen=stale + 1)
        self._shadow = None

    def sync_rollout(self) -> int:
        if self.stale == 0:
            return super().sync_rollout()
        actor = self.cluster.actor
        self._snapshots.append(jax.tree.map(lambda x: x.copy(), nnx.state(actor)))  # a copy: the trainer may donate
        if self._shadow is None:
            self._shadow = nnx.merge(nnx.graphdef(actor), self._snapshots[0])
        nnx.update(self._shadow, self._snapshots[0])  # the oldest kept: k syncs ago once the queue is full
        cluster = self.cluster
        cluster.mark_policy()  # the gap is measured against the actor: it shows the staleness
        report = cluster.rollout.sync_weights(self._shadow)
        cluster.sync_count, cluster.synced_bytes, cluster.last_sync = (cluster.sync_count + 1,
                                                                       cluster.synced_bytes + report.bytes_moved, report)
        return report.bytes_moved

    def sync_current(self) -> int:
        """Give the engine the actor's current weights (for an evaluation of what the trainer holds)."""
        return super().sync_rollout()


def arm_correction(arm: str, args) -> tuple:
    """(level, mode, cap) of `arm`'s rollout correction; level None for an uncorrected arm."""
    if arm in ("fresh", "stale"):
        return None, args.mode, args.cap
    if arm == "stale_corrected":
        return args.level, args.mode, args.cap
    parts = arm.split("_")
    if len(parts) == 5 and parts[:2] == ["stale", "corrected"] and parts[2] in ("token", "sequence") \
            and parts[3] in ("truncate", "mask"):
        try:
            return parts[2], parts[3], float(parts[4])
        except ValueError:
            pass
    raise ValueError(f"unknown arm {arm!r}: fresh, stale, stale_corrected or stale_corrected_<token|sequence>_"
                     f"<truncate|mask>_<cap>")


def accuracy(prompts, completions, answer, **_):
    """1 when the completion's leading integer is the answer."""
    return [float(arith.is_correct(c, a)) for c, a in zip(completions, answer)]


def run(arm: str, seed: int, args) -> dict:
    """One training run of `arm` with `seed`; its figures."""
    task = arith.ArithConfig()
    heldout = arith.sample(task, 256, "heldout", seed=1)
    train_rows = arith.sample(task, 8000, "train", seed=0)
    model, tok = load_model("tiny")
    cluster = RLCluster(model, tok, rollout_config=RolloutConfig(max_new_tokens=8, max_prompt_length=8,
                                                                 temperature=1.0, seed=seed))
    cfg = RLTrainingConfig(batch_size=args.batch_size, max_steps=args.steps, progress_bar=False, seed=seed)
    level, mode, cap = arm_correction(arm, args)
    algo = GRPOConfig(num_generations=args.num_generations, beta=0.0,
                      rollout_is_level=level, rollout_is_mode=mode, rollout_is_cap=cap)
    learner = StaleEngineLearner(cluster, optax.adam(args.learning_rate), cfg, algo, reward_fns=[arith.reward],
                                 metric_fns=[accuracy], stale=0 if arm == "fresh" else args.stale)
    before = learner.evaluate(heldout)["accuracy"]
    t0 = time.perf_counter()
    learner.train(itertools.cycle(train_rows))
    seconds = time.perf_counter() - t0
    learner.sync_current()  # a stale engine still holds old weights: evaluate what the trainer learned
    after = learner.evaluate(heldout)["accuracy"]
    hist = lambda name: learner.metrics.history(name)[1]
    reward, gap = hist("rewards/mean"), [g for g in hist("rollout_logp_gap") if g is not None]
    out = {"arm": arm, "seed": seed, "correction": None if level is None else {"level": level, "mode": mode, "cap": cap},
           "heldout_before": before, "heldout_after": after,
           "reward_first10": float(np.mean(reward[:10])), "reward_last10": float(np.mean(reward[-10:])),
           "logp_gap_max_mean": float(np.mean(gap)) if gap else None, "train_seconds": round(seconds, 1)}
    for name in ("actor/rollout_is/weight_mean", "actor/rollout_is/capped_frac"):
        vals = hist(name)
        if vals:
            out[name.split("/", 1)[1]] = float(np.mean(vals))
    print(json.dumps(out), flush=True)
    return out


def summarise(runs: list) -> dict:
    """Each arm's mean and range over seeds of the figures the prose quotes."""
    out = {}
    runs = [{**r, "heldout_gain": r["heldout_after"] - r["heldout_before"]} for r in runs]
    for arm in dict.fromkeys(r["arm"] for r in runs):
        rs = [r for r in runs if r["arm"] == arm]
        row = {"seeds": len(rs)}
        for key in ("heldout_after", "reward_last10", "heldout_gain"):
            vals = [r[key] for r in rs]
            row[key] = {"mean": float(np.mean(vals)), "min": float(np.min(vals)), "max": float(np.max(vals))}
        row["heldout_gain_mean"] = float(np.mean([r["heldout_after"] - r["heldout_before"] for r in rs]))
        for key in ("logp_gap_max_mean", "rollout_is/weight_mean", "rollout_is/capped_frac"):
            vals = [r[key] for r in rs if r.get(key) is not None]
            if vals:
                row[key.replace("rollout_is/", "is_")] = float(np.mean(vals))
        out[arm] = row
    if "fresh" in out and "stale" in out:  # the share of the staleness's cost that each correction won back
        lost = out["fresh"]["heldout_after"]["mean"] - out["stale"]["heldout_after"]["mean"]
        for arm, row in out.items():
            if arm.startswith("stale_corrected") and lost > 0:
                row["gap_recovered"] = (row["heldout_after"]["mean"] - out["stale"]["heldout_after"]["mean"]) / lost
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--stale", type=int, default=4, help="syncs the engine lags behind the actor")
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch-size", type=int, default=32, help="prompts per step (G = 8 completions each)")
    p.add_argument("--learning-rate", type=float, default=2e-4,
                   help="Adam's rate; at 5e-4 a policy k syncs old barely overlaps the current one")
    p.add_argument("--num-generations", type=int, default=8, help="completions per prompt (G)")
    p.add_argument("--level", default="token", choices=("token", "sequence"))
    p.add_argument("--mode", default="truncate", choices=("truncate", "mask"))
    p.add_argument("--cap", type=float, default=2.0)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--arms", nargs="+", default=["fresh", "stale", "stale_corrected"])
    p.add_argument("--jobs", type=int, default=1, help="runs at once, each in its own process")
    p.add_argument("--out", default=None, help="write the JSON record here (else print it)")
    p.add_argument("--where", default=None, help="the machine in words, kept in the record")
    args = p.parse_args(argv)
    for arm in args.arms:
        arm_correction(arm, args)  # a misspelt arm fails here, before any run
    jobs = [(arm, seed) for seed in args.seeds for arm in args.arms]
    command = "python benchmarks/rollout_correction.py " + " ".join(argv if argv is not None else sys.argv[1:])
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    machine = machine_info()

    def record_of(runs):
        order = {job: i for i, job in enumerate(jobs)}  # the record lists runs in job order, whatever finished first
        runs = sorted(runs, key=lambda r: order[(r["arm"], r["seed"])])
        rec = {"benchmark": "rollout_correction", "command": command, "executed": started,
               "settings": {k: v for k, v in vars(args).items() if k not in ("out", "where")},
               "machine": machine, "complete": len(runs) == len(jobs), "summary": summarise(runs), "runs": runs}
        if args.where:
            rec["where"] = args.where
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(json.dumps(rec, indent=1) + "\n")
        return rec

    runs = []
    if args.jobs > 1:
        with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(run, arm, seed, args) for arm, seed in jobs]
            for f in concurrent.futures.as_completed(futures):
                runs.append(f.result())
                record_of(runs)
    else:
        for arm, seed in jobs:
            runs.append(run(arm, seed, args))
            record_of(runs)
    print(json.dumps(record_of(runs)["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
