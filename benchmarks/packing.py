"""Benchmark: SFT train-step throughput on a mixed-length dataset, sequences padded one a row against packed rows.

The dataset is `--sequences` random token sequences whose lengths are log-normal around `--median` tokens, clipped to
[8, `--length`], each with a 4-token prompt carrying no loss. The padded layout puts one sequence in a row of
`--length` slots (`pad_sequences`); the packed layout lays them end to end, first fit, in rows of the same length
(`pack_sequences`, with segment ids). Both train a fresh model of the `--model` preset with chapter 17's trainer core
and `next_token_loss`, `--rows` rows an update: one update compiles, then `--steps` updates are timed (the clock stops
after their metrics come back). Prints one JSON line: for each layout, the share of slots holding a sequence, target
tokens (the loss's weight) per second and updates per second; and the packed layout's gain in target tokens per second.

    python benchmarks/packing.py [--model tiny-qwen3 --length 256 --rows 8 --steps 20] [--record FILE]

With `--rl`, the RL training pass instead: GRPO micro-batches of `--prompts` prompts × `--generations` completions,
prompts of 8 to `--prompt-length` tokens left-padded to that width, completions of log-normal length around `--median`
tokens (clipped to [1, `--completion-length`]) right-padded to that width, random advantages. Each layout trains a
fresh model with the RL trainer (`RLTrainer`) on GRPO's policy loss over `policy_logps`: "padded" runs every row at full
width, "packed" runs the rows' real tokens packed (`attach_packing`, its host plan inside the clock), "prompt_once"
runs each group's prompt once (GRPO's default on a CPU). Every packed row count is compiled before the clock starts;
the layouts take turns, `--steps` timed updates each in all. Prints one JSON line: for each layout, trained completion
tokens per second, updates per second and the slots the model's body runs an update; and each gain over "padded".

With `--beta B` (> 0) each timed update is a GRPO step's work after sampling: the reference model's log-probs
through an `RLCluster` (`reference_logps`: full width, packed with `pack_buckets`, or prompt-once, as the layout),
copied to the host as the learner does, then the update with a KL term of weight B against them. A fourth layout,
"packed_loss_only", packs the update but runs the reference pass at full width: what packing that pass adds.

    python benchmarks/packing.py --rl [--prompts 8 --generations 4 --prompt-length 32 --completion-length 256
                                       --median 40 --steps 12] [--beta 0.04] [--record FILE]

Nothing here names a device: on a TPU machine JAX picks the chip, on a CPU the CPU.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(ROOT))  # tunix_lit from this checkout
from machine import add_max_isa_arg, apply_max_isa, machine_info  # noqa: E402


def dataset(n: int, length: int, median: float, vocab: int, seed: int):
    """Token sequences of log-normal lengths (clipped to [8, length]) and their loss masks (prompt of 4: no loss)."""
    r = np.random.default_rng(seed)
    lengths = np.clip(np.round(np.exp(r.normal(np.log(median), 0.8, n))), 8, length).astype(int)
    seqs = [r.integers(3, vocab, k).astype(np.int32) for k in lengths]
    masks = [np.r_[np.zeros(4, np.int32), np.ones(k - 4, np.int32)] for k in lengths]
    return seqs, masks


def throughput(batch_rows: dict, rows: int, steps: int, cfg, lr: float = 1e-3) -> dict:
    """Train `steps` timed updates (after one that compiles) over consecutive `rows`-row slices of `batch_rows`."""
    import optax

    from tunix_lit.models.transformer import create_model
    from tunix_lit.sft.core import TrainerCore, next_token_loss

    total = batch_rows["tokens"].shape[0]
    if total < rows * (steps + 1):
        raise ValueError(f"{total} rows make fewer than {steps + 1} batches of {rows}; raise --sequences")
    trainer = TrainerCore(create_model(cfg, seed=0), optax.adam(lr), loss_fn=next_token_loss)
    batch = lambda i: {k: v[i * rows:(i + 1) * rows] for k, v in batch_rows.items()}
    trainer.apply_update(trainer.prepare([batch(0)]))
    trainer.pop_metrics()  # compiled, and its metrics back: the clock starts from an idle device
    t0 = time.perf_counter()
    for i in range(1, steps + 1):
        trainer.apply_update(trainer.prepare([batch(i)]))
    metrics = trainer.pop_metrics()
    seconds = time.perf_counter() - t0
    targets = sum(m["tokens"] for m in metrics)
    return {"seconds": round(seconds, 3), "updates_per_second": round(steps / seconds, 3),
            "target_tokens": int(targets), "target_tokens_per_second": round(targets / seconds, 1),
            "last_loss": round(metrics[-1]["loss"], 4)}


def rl_batches(n: int, prompts: int, G: int, P: int, T: int, median: float, vocab: int, seed: int) -> list[dict]:
    """`n` GRPO micro-batches of prompts × G rows: prompts of 8..P tokens (each G times, adjacent), log-normal completions."""
    from tunix_lit.rl.common import pad_rows

    r = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ps = [r.integers(3, vocab, k) for k in r.integers(min(8, P), P + 1, prompts) for _ in range(G)]
        lengths = np.clip(np.round(np.exp(r.normal(np.log(median), 0.8, prompts * G))), 1, T).astype(int)
        pi, pm = pad_rows(ps, P, left=True)
        ci, cm = pad_rows([r.integers(3, vocab, k) for k in lengths], T)
        out.append(dict(prompt_ids=pi, prompt_mask=pm, completion_ids=ci, completion_mask=cm,
                        advantages=r.normal(size=prompts * G).astype(np.float32)))
    return out


def rl_throughput(batches: list, cfg, G: int, steps: int, rounds: int = 3, lr: float = 1e-5, beta: float = 0.0) -> dict:
    """Tokens per second of the RL training pass in three layouts, taking turns; compiles before the clock starts."""
    import jax.numpy as jnp
    import optax

    from tunix_lit.models.transformer import create_model
    from tunix_lit.rl import algo_core
    from tunix_lit.rl.learner import PACK_BUCKETS, RLTrainer, attach_packing, policy_logps
    from tunix_lit.sft.core import LossOutput

    def make(group_size):
        def loss_fn(model, batch, rng):
            logps, _ = policy_logps(model, batch, temperature=1.0, entropy=False, group_size=group_size)
            loss, m = algo_core.grpo_loss(logps, None, batch["advantages"], batch["completion_mask"],
                                          ref_logps=batch.get("ref_logps"), beta=beta)
            return LossOutput(loss * m["loss_denominator"], m["loss_denominator"], {})
        return RLTrainer(create_model(cfg, seed=0), optax.adam(lr), loss_fn=loss_fn, accumulation=1, donate=True)

    ref = reference_pass(cfg, batches[0]) if beta > 0 else None  # (batch, layout's pass) -> ref_logps on the host
    with_ref = lambda b, **how: {**b, "ref_logps": ref(b, **how)} if ref else b
    layouts = {"padded": (make(1), lambda b: with_ref(b, pack_buckets=0)),
               "packed": (make(1), lambda b: attach_packing([with_ref(b, pack_buckets=PACK_BUCKETS)])[0]),
               "prompt_once": (make(G), lambda b: with_ref(b, group_size=G))}
    if ref:  # the loss's pass packed, the reference's at full width: what packing the reference pass adds
        layouts["packed_loss_only"] = (make(1), lambda b: attach_packing([with_ref(b, pack_buckets=0)])[0])
    B, P = batches[0]["prompt_ids"].shape
    T = batches[0]["completion_ids"].shape[1]
    body = {"padded": lambda b: B * (P + T), "prompt_once": lambda b: B // G * P + B * T,
            "packed": lambda b: int(np.prod(np.shape(attach_packing([b])[0]["pack_src"])))}
    body["packed_loss_only"] = body["packed"]
    warm, timed = batches[:1], batches[1:steps + 1]
    shapes = {}
    for b in warm + timed:  # one compile per packed row count, before the clock
        shapes.setdefault(len(attach_packing([b])[0]["pack_src"]), b)
    out = {k: {"seconds": 0.0, "updates": 0, "trained_tokens": 0,
               "body_slots_per_update": float(np.mean([body[k](b) for b in timed]))} for k in layouts}
    for name, (trainer, prep) in layouts.items():
        for b in (list(shapes.values()) if name.startswith("packed") else warm):
            trainer.update([prep(b)])
        trainer.pop_metrics()
    out["packed"]["row_counts"] = sorted(shapes)
    for part in np.array_split(np.arange(len(timed)), rounds):  # layouts take turns: drift hits all alike
        for name, (trainer, prep) in layouts.items():
            t0 = time.perf_counter()
            for i in part:
                trainer.update([prep(timed[i])])
            trainer.pop_metrics()  # the clock stops when the updates' metrics are back
            out[name]["seconds"] += time.perf_counter() - t0
            out[name]["updates"] += len(part)
            out[name]["trained_tokens"] += int(sum(timed[i]["completion_mask"].sum() for i in part))
    for v in out.values():
        v["updates_per_second"] = round(v["updates"] / v["seconds"], 3)
        v["trained_tokens_per_second"] = round(v["trained_tokens"] / v["seconds"], 1)
        v["seconds"] = round(v["seconds"], 3)
    return out


def reference_pass(cfg, batch: dict):
    """fn(batch, **how) -> the batch's reference log-probs on the host from `RLCluster.reference_logps(rollout, **how)`."""
    from tunix_lit.models import tiny
    from tunix_lit.models.transformer import create_model, to_host
    from tunix_lit.rl.cluster import RLCluster, Rollout, RolloutConfig

    P, T = batch["prompt_ids"].shape[1], batch["completion_ids"].shape[1]
    _, tok = tiny.load()  # no text is generated here: the engine only needs a tokenizer to exist
    cluster = RLCluster(create_model(cfg, seed=1), tok, reference="actor",
                        rollout_config=RolloutConfig(max_new_tokens=T, max_prompt_length=P, temperature=1.0,
                                                     measure_logp_gap=False))

    def fn(b, **how):
        ro = Rollout(b["prompt_ids"], b["prompt_mask"], b["completion_ids"], b["completion_mask"], None, [], None)
        return to_host(cluster.reference_logps(ro, **how))

    return fn


def main_rl(args) -> dict:
    """The --rl benchmark's JSON record."""
    import jax

    from tunix_lit.models.transformer import ModelConfig

    cfg = ModelConfig.from_name(args.model)
    G, P, T = args.generations, args.prompt_length, args.completion_length
    batches = rl_batches(args.steps + 1, args.prompts, G, P, T, args.median, cfg.vocab_size, args.seed)
    lengths = np.concatenate([b["completion_mask"].sum(-1) for b in batches])
    out = {"benchmark": "packing_rl", "model": args.model, "prompts": args.prompts, "generations": G,
           "rows": args.prompts * G, "prompt_length": P, "completion_length": T, "median_completion": args.median,
           "mean_completion": round(float(lengths.mean()), 1),
           "slots_real": round(float(np.mean([(b["prompt_mask"].sum() + b["completion_mask"].sum())
                                              / (len(b["prompt_mask"]) * (P + T)) for b in batches])), 3),
           "steps": args.steps, "beta": args.beta, "platform": jax.default_backend()}
    out.update(rl_throughput(batches, cfg, G, args.steps, beta=args.beta))
    for name in ("packed", "prompt_once", "packed_loss_only")[:3 if args.beta > 0 else 2]:
        out[f"{name}_gain"] = round(out[name]["trained_tokens_per_second"]
                                    / out["padded"]["trained_tokens_per_second"], 2)
    if args.beta > 0:  # the reference pass packed as well, against the loss's pass packed alone
        out["reference_packing_gain"] = round(out["packed"]["trained_tokens_per_second"]
                                              / out["packed_loss_only"]["trained_tokens_per_second"], 2)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny-qwen3", help="a ModelConfig preset name (random initialisation)")
    p.add_argument("--length", type=int, default=256, help="slots a row (the padded rows' length too)")
    p.add_argument("--rows", type=int, default=8, help="rows an update")
    p.add_argument("--steps", type=int, default=20, help="timed updates a layout")
    p.add_argument("--sequences", type=int, default=2000)
    p.add_argument("--median", type=float, default=40.0, help="median sequence length, tokens")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--record", help="also write the JSON line, indented, to this file")
    rl = p.add_argument_group("--rl: the RL training pass")
    rl.add_argument("--rl", action="store_true", help="measure the RL training pass instead of SFT")
    rl.add_argument("--prompts", type=int, default=8, help="prompts a micro-batch")
    rl.add_argument("--generations", type=int, default=4, help="completions a prompt (G)")
    rl.add_argument("--prompt-length", type=int, default=32, help="prompt slots (P)")
    rl.add_argument("--completion-length", type=int, default=256, help="completion slots (T)")
    rl.add_argument("--beta", type=float, default=0.0,
                    help="> 0: a KL term of this weight, its reference pass (through RLCluster) inside the clock")
    add_max_isa_arg(p)
    args = p.parse_args(argv)
    apply_max_isa(args.max_isa)
    if args.rl:
        if args.steps == p.get_default("steps"):
            args.steps = 12
        out = {**main_rl(args), "machine": machine_info()}
        print(json.dumps(out))
        if args.record:
            Path(args.record).write_text(json.dumps(out, indent=2) + "\n")
        return
    import jax

    from tunix_lit.data.datasets import pack_sequences, pad_sequences
    from tunix_lit.models.transformer import ModelConfig

    cfg = ModelConfig.from_name(args.model)
    seqs, masks = dataset(args.sequences, args.length, args.median, cfg.vocab_size, args.seed)
    layouts = {"padded": pad_sequences(seqs, masks, args.length), "packed": pack_sequences(seqs, masks, args.length)}
    out = {"benchmark": "packing", "model": args.model, "length": args.length, "rows": args.rows, "steps": args.steps,
           "sequences": args.sequences, "median_length": args.median,
           "mean_length": round(float(np.mean([len(s) for s in seqs])), 1), "platform": jax.default_backend()}
    for name, rows in layouts.items():
        n = rows["tokens"].shape[0]
        fill = float(sum(len(s) for s in seqs)) / (n * args.length)
        out[name] = {"rows": n, "slots_used": round(fill, 3), **throughput(rows, args.rows, args.steps, cfg)}
    out["packed_gain"] = round(out["packed"]["target_tokens_per_second"] / out["padded"]["target_tokens_per_second"], 2)
    out["machine"] = machine_info()
    print(json.dumps(out))
    if args.record:
        Path(args.record).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
