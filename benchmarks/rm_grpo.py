"""GRPO against a learned reward model (chapter 65), beside GRPO against the rule it imitates; several seeds each;
one JSON record.

    python benchmarks/rm_grpo.py --seeds 0 1 2 --jobs 2 --out benchmarks/results/rm_grpo.json

Arms, each from the shipped tiny policy with the same GRPO job (16 prompts x 8 completions a step, a KL penalty
beta to the starting policy, Adam) and the same number of GRPO steps:

- `rule`: the reward is the rule (`arith.reward`: 1 right, 0.1 another integer, 0 no integer);
- `learned_once`: the reward is a Bradley-Terry reward model (`--head`, the likelihood head by default) trained
  once, on the rule's ranking of the starting policy's samples (and the right answer) on `--first-prompts`
  training prompts, then frozen: the classic single round;
- `learned_iterated`: the same first reward model, refreshed before each of `--rounds` rounds of GRPO after the
  first on the rule's ranking of the *current* policy's samples on fresh prompts, with as many older pairs
  replayed (iterated RLHF, as InstructGPT and Llama 2 retrain their reward model between rounds). GRPO itself only
  ever sees the reward model's scores; the rule acts as the annotator.

Each run records held-out greedy accuracy (the rule's, 256 held-out sums) before and after, the rule's accuracy of
the training rollouts over the last ten steps, the reward model's held-out pairwise accuracy per round (on ranked
samples of that round's policy, before and after its refresh) and seconds; the record keeps every run and each
arm's mean and range over seeds, with the machine it ran on. `--runs-from` merges the runs of earlier invocations
made with the same settings (other seeds or arms) into one record.
"""

import argparse
import concurrent.futures
import dataclasses
import datetime
import itertools
import json
import multiprocessing
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_info  # noqa: E402

import numpy as np  # noqa: E402
import optax  # noqa: E402

from tunix_lit.data import arith, datasets  # noqa: E402
from tunix_lit.generate.sampler import Sampler  # noqa: E402
from tunix_lit.models import tiny  # noqa: E402
from tunix_lit.models.load import load_model  # noqa: E402
from tunix_lit.rl.cluster import RLCluster, RolloutConfig  # noqa: E402
from tunix_lit.rl.grpo import GRPOConfig, GRPOLearner  # noqa: E402
from tunix_lit.rl.learner import RLTrainingConfig  # noqa: E402
from tunix_lit.sft import reward  # noqa: E402
from tunix_lit.sft import trainer as peft  # noqa: E402

G = 8  # completions per prompt, in GRPO and in the annotator's groups


def sample_groups(model, tok, problems, seed):
    """G completions per problem from `model` at temperature 1 (GRPO's budget of 8 new tokens)."""
    prompts = [e["prompt"] for e in problems for _ in range(G)]
    s = Sampler(model, tok)
    return prompts, [c for i in range(0, len(prompts), 1024) for c in
                     s(prompts[i:i + 1024], max_new_tokens=8, temperature=1.0, seed=seed + i).text]


def annotated_pairs(model, tok, problems, seed, per_group):
    """Pairs from the policy's own samples and the reference answer, ranked by the rule (the annotator)."""
    prompts, comps = sample_groups(model, tok, problems, seed)
    P, C, A = [], [], []  # each group: the G samples, then the reference answer
    for k, e in enumerate(problems):
        P += prompts[k * G:(k + 1) * G] + [e["prompt"]]
        C += comps[k * G:(k + 1) * G] + [e["answer"]]
        A += [e["answer"]] * (G + 1)
    return reward.ranked_pairs(P, C, arith.reward(P, C, A), G + 1, per_group=per_group, seed=seed)


def batches(tok, rows, size):
    return reward.encode_pair_batches(tok, rows, size, max_prompt_length=8, max_response_length=9)


def run(arm: str, seed: int, args) -> dict:
    """One GRPO job of `arm` with `seed`; its figures."""
    t_start = time.perf_counter()
    task = arith.ArithConfig(**tiny.TASK)
    heldout = arith.sample(task, 256, "heldout", seed=1)
    grpo_rows = arith.sample(task, 8000, "train", seed=seed)
    pool = arith.all_problems(task, "train")  # the prompts whose samples the annotator ranks, in a seeded order
    pool = [pool[i] for i in np.random.default_rng(100 + seed).permutation(len(pool))]
    held_pool = arith.all_problems(task, "heldout")
    policy, tok = load_model("tiny")
    rm = trainer = None
    rounds = [] if arm == "rule" else None
    if arm != "rule":
        rm = reward.reward_model_from(policy, head=args.head, seed=seed)
        cfg = peft.TrainingConfig(max_steps=1, log_every_n_steps=50, progress_bar=False)
        trainer = reward.RewardTrainer(rm, optax.adamw(args.rm_learning_rate), cfg)
        rounds, replay = [], []
    cluster = RLCluster(policy, tok, reference="actor", reward_model=trainer.model if trainer else None,
                        rollout_config=RolloutConfig(max_new_tokens=8, max_prompt_length=8, temperature=1.0, seed=seed))
    fns = [reward.learned_reward(cluster)] if trainer else [arith.reward]
    learner = GRPOLearner(cluster, optax.adam(args.learning_rate),
                          RLTrainingConfig(batch_size=args.batch_size, max_steps=1, progress_bar=False, seed=seed),
                          GRPOConfig(num_generations=G, beta=args.beta if arm == "rule" else args.learned_beta,
                                     advantage_estimator="grpo" if arm == "rule" else args.learned_advantage),
                          reward_fns=fns,
                          metric_fns=[datasets.arith_accuracy])
    before = learner.evaluate(heldout)["arith_accuracy"]
    data = itertools.cycle(grpo_rows)
    n_rounds = args.rounds if arm == "learned_iterated" else 1
    per_round = args.steps // n_rounds
    rm_seconds = 0.0
    for r in range(n_rounds):
        if trainer is not None and (r == 0 or arm == "learned_iterated"):
            t0 = time.perf_counter()
            # the annotator ranks the current policy's samples on fresh training prompts; older pairs are replayed
            lo = 0 if r == 0 else args.first_prompts + (r - 1) * args.prompts_per_round
            hi = args.first_prompts if r == 0 else lo + args.prompts_per_round
            fresh = annotated_pairs(cluster.actor, tok, [pool[i % len(pool)] for i in range(lo, hi)],
                                    seed=1000 * seed + r, per_group=args.pairs_per_group)
            rng = np.random.default_rng(seed * 100 + r)
            old = [replay[i] for i in rng.permutation(len(replay))[:len(fresh)]] if replay else []
            rows = [x for x in (fresh + old)]
            rows = [rows[i] for i in rng.permutation(len(rows))]
            replay += fresh
            held = annotated_pairs(cluster.actor, tok, held_pool[:args.held_prompts], seed=7 + 1000 * seed + r, per_group=2)
            held_b = batches(tok, held, 64)
            acc_before = trainer.evaluate(held_b)["accuracy"]
            steps = args.rm_steps if r == 0 else args.rm_refresh_steps
            trainer.config = dataclasses.replace(trainer.config, max_steps=trainer.step + steps)
            trainer.train(itertools.cycle(batches(tok, rows, 64)))
            acc_after = trainer.evaluate(held_b)["accuracy"]
            rm_seconds += time.perf_counter() - t0
            rounds.append({"round": r, "pairs": len(rows), "rm_updates": steps,
                           "rm_heldout_pair_accuracy_before": round(acc_before, 4),
                           "rm_heldout_pair_accuracy_after": round(acc_after, 4)})
        learner.config = dataclasses.replace(learner.config, max_steps=(r + 1) * per_round)
        learner.train(data)
        if rounds is not None and arm == "learned_iterated":
            rounds[-1]["heldout_after_round"] = round(learner.evaluate(heldout)["arith_accuracy"], 4)
    after = learner.evaluate(heldout)["arith_accuracy"]
    _, rule_acc = learner.metrics.history("arith_accuracy")
    sample = Sampler(cluster.actor, tok)([e["prompt"] for e in heldout[:6]], max_new_tokens=8).text
    out = {"arm": arm, "seed": seed, "heldout_before": round(before, 4), "heldout_after": round(after, 4),
           "train_rule_accuracy_last10": round(float(np.mean(rule_acc[-10:])), 4),
           "rm_rounds": rounds, "rm_seconds": round(rm_seconds, 1),
           "seconds": round(time.perf_counter() - t_start, 1),
           "greedy_examples": [[e["prompt"], c, e["answer"]] for e, c in zip(heldout[:6], sample)]}
    print(json.dumps(out), flush=True)
    return out


def summarise(runs: list) -> dict:
    """Each arm's mean and range over seeds of the figures the prose quotes."""
    out = {}
    for arm in dict.fromkeys(r["arm"] for r in runs):
        rs = [r for r in runs if r["arm"] == arm]
        row = {"seeds": len(rs)}
        for key in ("heldout_before", "heldout_after", "train_rule_accuracy_last10", "seconds"):
            vals = [r[key] for r in rs]
            row[key] = {"mean": float(np.mean(vals)), "min": float(np.min(vals)), "max": float(np.max(vals))}
        gains = [r["heldout_after"] - r["heldout_before"] for r in rs]
        row["heldout_gain"] = {"mean": float(np.mean(gains)), "min": float(np.min(gains)), "max": float(np.max(gains))}
        if rs[0]["rm_rounds"]:
            first = [r["rm_rounds"][0]["rm_heldout_pair_accuracy_after"] for r in rs]
            last = [r["rm_rounds"][-1]["rm_heldout_pair_accuracy_after"] for r in rs]
            row["rm_pair_accuracy_first_round"] = float(np.mean(first))
            row["rm_pair_accuracy_last_round"] = float(np.mean(last))
            later = [x for r in rs for x in r["rm_rounds"][1:]]
            if later:  # the current policy's pairs before and after each refresh: how far GRPO had drifted into errors
                row["rm_pair_accuracy_before_refresh"] = float(np.mean([x["rm_heldout_pair_accuracy_before"] for x in later]))
                row["rm_pair_accuracy_after_refresh"] = float(np.mean([x["rm_heldout_pair_accuracy_after"] for x in later]))
        out[arm] = row
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=150, help="GRPO steps in every arm")
    p.add_argument("--rounds", type=int, default=10, help="learned_iterated: GRPO rounds, the RM refreshed before each")
    p.add_argument("--batch-size", type=int, default=16, help="prompts per step (G = 8 completions each)")
    p.add_argument("--learning-rate", type=float, default=2e-4)
    p.add_argument("--beta", type=float, default=0.1)
    p.add_argument("--learned-beta", type=float, default=0.1, help="KL weight in the learned-reward arms")
    p.add_argument("--learned-advantage", default="grpo", choices=("grpo", "drgrpo", "rloo"),
                   help="advantage estimator in the learned-reward arms (drgrpo: no division by the group's std)")
    p.add_argument("--head", default="likelihood", choices=reward.HEADS, help="where the reward model reads its score")
    p.add_argument("--rm-learning-rate", type=float, default=1e-4)
    p.add_argument("--rm-steps", type=int, default=250, help="reward-model updates (64 pairs) before the first round")
    p.add_argument("--rm-refresh-steps", type=int, default=40, help="reward-model updates at each refresh")
    p.add_argument("--first-prompts", type=int, default=2048, help="prompts whose G samples train the first reward model")
    p.add_argument("--prompts-per-round", type=int, default=256, help="prompts whose G samples the annotator ranks at a refresh")
    p.add_argument("--pairs-per-group", type=int, default=4)
    p.add_argument("--held-prompts", type=int, default=128, help="held-out prompts whose ranked samples test the RM")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--arms", nargs="+", default=["rule", "learned_once", "learned_iterated"])
    p.add_argument("--jobs", type=int, default=1, help="runs at once, each in its own process")
    p.add_argument("--where", default=None, help="the machine, in words, for the record")
    p.add_argument("--runs-from", nargs="*", default=[], help="records of earlier invocations with the same settings: "
                   "their runs are kept, and those arm/seed pairs are not run again")
    p.add_argument("--merge-only", action="store_true", help="run nothing: one record of the --runs-from runs")
    p.add_argument("--out", default=None, help="write the JSON record here (else print it)")
    args = p.parse_args(argv)
    jobs = [(arm, seed) for seed in args.seeds for arm in args.arms]
    earlier, settings = [], {k: v for k, v in vars(args).items() if k not in ("out", "where", "jobs", "runs_from", "merge_only")}
    for path in args.runs_from:  # runs another invocation made with the same settings; only its seeds and arms differ
        prev = json.loads(Path(path).read_text())
        diff = {k for k in settings if k not in ("seeds", "arms") and prev["settings"].get(k) != settings[k]}
        if diff:
            raise SystemExit(f"{path} was made with other settings: {sorted(diff)}")
        earlier += [r for r in prev["runs"] if (r["arm"], r["seed"]) not in {(x["arm"], x["seed"]) for x in earlier}]
    done = {(r["arm"], r["seed"]) for r in earlier}
    jobs = [] if args.merge_only else [j for j in jobs if j not in done]
    if args.merge_only:  # the record says which seeds and arms it holds
        settings["seeds"] = sorted({r["seed"] for r in earlier})
        settings["arms"] = [a for a in args.arms if any(r["arm"] == a for r in earlier)]
    if args.jobs > 1:
        with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            runs = list(pool.map(run, *zip(*jobs), [args] * len(jobs))) if jobs else []
    else:
        runs = [run(arm, seed, args) for arm, seed in jobs]
    runs = sorted(earlier + runs, key=lambda r: (r["seed"], args.arms.index(r["arm"]) if r["arm"] in args.arms else 9))
    record = {"benchmark": "rm_grpo", "command": "python benchmarks/rm_grpo.py " +
              " ".join(argv if argv is not None else sys.argv[1:]), "where": args.where,
              "executed": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "settings": settings,
              "machine": machine_info(), "summary": summarise(runs), "runs": runs}
    text = json.dumps(record, indent=1)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    print(json.dumps(record["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
