"""Benchmark: SFT train-step throughput on a mixed-length dataset, sequences padded one a row against packed rows.

The dataset is `--sequences` random token sequences whose lengths are log-normal around `--median` tokens, clipped to
[8, `--length`], each with a 4-token prompt carrying no loss. The padded layout puts one sequence in a row of
`--length` slots (`pad_sequences`); the packed layout lays them end to end, first fit, in rows of the same length
(`pack_sequences`, with segment ids). Both train a fresh model of the `--model` preset with chapter 17's trainer core
and `next_token_loss`, `--rows` rows an update: one update compiles, then `--steps` updates are timed (the clock stops
after their metrics come back). Prints one JSON line: for each layout, the share of slots holding a sequence, target
tokens (the loss's weight) per second and updates per second; and the packed layout's gain in target tokens per second.

    python benchmarks/packing.py [--model tiny-qwen3 --length 256 --rows 8 --steps 20] [--record FILE]

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
    add_max_isa_arg(p)
    args = p.parse_args(argv)
    apply_max_isa(args.max_isa)
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
