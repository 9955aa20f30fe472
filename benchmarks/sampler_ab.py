"""In-process A/B of the sampler's CPU decode options: variants compiled in one process, calls alternating.

A speed-up smaller than this kind of machine's drift (up to 2x between runs) cannot be seen by running two
processes one after the other; here every variant runs in every round, so drift hits them alike, and each
variant's gain is the median of its per-round time ratios against the first variant:

  python benchmarks/sampler_ab.py --batch 32 --calls 20 --variants copies,no-copies
  python benchmarks/sampler_ab.py --batch 32 --calls 12 --lora-rank 8 --variants merge,no-merge
  python benchmarks/sampler_ab.py --batch 8 --calls 16 --variants ynnpack,eigen

Variants: `copies` (the default `Sampler`: chapter 15's per-call copies), `no-copies` (`decode_copies=False`),
and with `--lora-rank` > 0 (rank-r adapters on all seven projections, B drawn at random so they matter)
`merge` (`decode_merge` = chapter 41's `merged_decoder`, what the vanilla engine passes for a LoRA actor) and
`no-merge` (the adapters' products inside the loop); `ynnpack` and `eigen` (the default `Sampler` compiled with
`TUNIX_LIT_DECODE_DOTS` set that way, chapter 14's override of its per-CPU kernel rule). The merge is made on a
CPU off a mesh only, as the sampler does, unless `--any-backend` lifts that condition to measure it on an
accelerator. The model flags are `sampler.py`'s. Prints one JSON line:
per variant tokens/s (median call), the paired median gain with its middle half, whether every sampled row
equals the first variant's, and the largest log-prob difference; then the machine.
"""

import argparse
import json
import os
import statistics
import sys
import time
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tunix_lit from this checkout
import sampler as bench  # noqa: E402  (the model flags, the random decoder and the prompts of sampler.py)
from machine import machine_info  # noqa: E402
from sft_step import LORA_TARGETS  # noqa: E402  (all seven projections, as the SFT and GRPO benchmarks use)

VARIANTS = ("copies", "no-copies", "merge", "no-merge", "ynnpack", "eigen")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=12, help="timed calls per variant (alternating rounds)")
    p.add_argument("--variants", default="copies,no-copies", help=f"comma-separated, first is the base: {VARIANTS}")
    p.add_argument("--temperature", type=float, default=0.9, help="0 = greedy")
    p.add_argument("--lora-rank", type=int, default=0, help=">0: adapters on all seven projections")
    p.add_argument("--any-backend", action="store_true",
                   help="`merge` on any backend, not only a CPU off a mesh (to measure what an accelerator would gain)")
    args, rest = p.parse_known_args(argv)
    args.variants = args.variants.split(",")
    bad = [v for v in args.variants if v not in VARIANTS]
    if bad or len(args.variants) < 2:
        p.error(f"--variants takes two or more of {VARIANTS}, got {args.variants}")
    if any(v in ("merge", "no-merge") for v in args.variants) and args.lora_rank <= 0:
        p.error("merge / no-merge compare LoRA decode loops: give --lora-rank > 0")
    return args, bench.parse_args(rest)


def main(argv=None):
    args, model_args = parse_args(argv)
    from tunix_lit import runtime

    runtime.tune_host_allocator()  # as the benchmarks and the CLI do (chapter 14)
    import jax
    import numpy as np
    from flax import nnx

    from tunix_lit.generate import sampler as sampler_module
    from tunix_lit.models.transformer import create_model
    from tunix_lit.rollout.sync import merged_decoder

    Sampler = sampler_module.Sampler
    if args.any_backend:  # lift chapter 15's CPU-only condition on the merge (and only on it) for this process
        sampler_module.decode_model = lambda model, merge: model if merge is None else merge(model)

    model = create_model(bench.model_config(model_args), seed=model_args.seed)
    # as grpo_step.py does: with the default init almost all mass sits on one token, so every variant would
    # sample the same rows with log-prob 0 whatever it computed; a table of std 0.02 makes the policy diverse
    emb = model.embedder.embedding
    emb.set_value(emb.get_value() * (0.02 / float(emb.get_value().std())))
    if args.lora_rank > 0:
        from tunix_lit.sft import lora

        model = lora.apply_lora(model, rank=args.lora_rank, alpha=2.0 * args.lora_rank, targets=LORA_TARGETS)
        for i, (_, var) in enumerate(nnx.to_flat_state(nnx.state(model, nnx.LoRAParam))):
            if var.get_value().ndim and not np.any(var.get_value()):  # B starts at zero: give the adapters an effect
                var.set_value(0.05 * jax.random.normal(jax.random.key(i), var.get_value().shape, var.get_value().dtype))
    B, P, G = model_args.batch, model_args.prompt_len, model_args.gen_len
    prompts = [" ".join(str(int(t)) for t in row) for row in bench.prompt_ids(B, P, model_args.vocab_size, 1)]
    options = {"copies": {}, "no-copies": dict(decode_copies=False),
               "merge": dict(decode_merge=merged_decoder), "no-merge": {}}

    def build(v):
        if v not in ("ynnpack", "eigen"):
            return Sampler(model, bench.IntTokenizer(), max_len=P + G, **options[v])
        with mock.patch.dict(os.environ, TUNIX_LIT_DECODE_DOTS=v):  # read when the Sampler picks its options
            return Sampler(model, bench.IntTokenizer(), max_len=P + G)

    samplers = {v: build(v) for v in args.variants}
    kw = dict(max_new_tokens=G, max_prompt_length=P, stop_tokens=[-1], temperature=args.temperature, seed=3)
    outs = {v: s(prompts, **kw) for v, s in samplers.items()}  # compiles
    times = {v: [] for v in samplers}
    for _ in range(args.calls):
        for v, s in samplers.items():
            t0 = time.perf_counter()
            outs[v] = s(prompts, **kw)
            times[v].append(time.perf_counter() - t0)
    base = args.variants[0]
    n = sum(len(t) for t in outs[base].tokens)
    rows = {}
    for v in args.variants:
        ratios = [a / b for a, b in zip(times[base], times[v])]
        quart = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
        rows[v] = dict(tokens_per_s=round(n / statistics.median(times[v]), 1),
                       median_call_s=round(statistics.median(times[v]), 4),
                       compiler_options=samplers[v].compiler_options,
                       gain_vs_base=round(statistics.median(ratios) - 1, 4),
                       gain_middle_half=[round(quart[0] - 1, 4), round(quart[2] - 1, 4)],
                       rows_same_as_base=all(np.array_equal(a, b) for a, b in zip(outs[v].tokens, outs[base].tokens)),
                       max_logprob_diff=float(max(np.abs(np.asarray(a) - np.asarray(b)).max()
                                                  for a, b in zip(outs[v].logprobs, outs[base].logprobs))))
    print(json.dumps(dict(bench="sampler_ab", base=base, batch=B, prompt_len=P, gen_len=G, calls=args.calls,
                          temperature=args.temperature, lora_rank=args.lora_rank, arch=model_args.arch,
                          dtype=model_args.dtype, any_backend=args.any_backend,
                          variants=rows, machine=machine_info())))


if __name__ == "__main__":
    main()
