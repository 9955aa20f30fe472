"""Benchmark: seconds per GRPO global step on tiny Qwen 3 (4 layers x 256, vocab 8192), full or LoRA.

Takes the same flags as upstream's side (`benchmarks/upstream_bench.py grpo`) (upstream Tunix's GRPOLearner + RLCluster) and
prints one JSON line with the same figure key, `median_step_s`, so `benchmarks/compare_upstream.py grpo` can set them side by side:

  python benchmarks/grpo_step.py [--batch 8 --num-generations 4 --prompt-len 32 --gen-len 64 --steps 12
                                  --beta 0.04 --lora-rank 0|8]

Same work as upstream's side: one CPU device, colocated actor / rollout / reference (a frozen snapshot of the
actor; for LoRA the shared base), integer-id text, completions of exactly --gen-len tokens (no stop token,
as upstream's side asks with eos_tokens=[-1]), reward = fraction of even ids, temperature 0.9, AdamW. A global step is
generate + reference log-probs + rewards/advantages + one optimizer update + the weight sync; its time is
measured between the ends of consecutive steps (the first step, which compiles, is left out of the median).
"""

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tunix_lit from this checkout
from sft_step import add_model_args, build_model, env_info, LORA_TARGETS  # noqa: E402  (same model flags and builder)
from machine import CompileLog, add_max_isa_arg, apply_max_isa, device_memory, machine_info  # noqa: E402

PAD_ID, BOS_ID, EOS_ID, FIRST_FREE_ID = 0, 1, 2, 3


class IntTokenizer:
    """Text is space-separated decimal ids (as upstream_bench.py's tokenizer)."""

    def __init__(self, vocab_size: int):
        self.vocab_size, self.pad_id, self.eos_id, self.bos_id = vocab_size, PAD_ID, EOS_ID, BOS_ID

    def encode(self, text: str):
        return [int(t) for t in text.split()]

    def decode(self, ids) -> str:
        return " ".join(str(int(i)) for i in ids)


PROMPT_ONCE = {"auto": None, "0": False, "1": True}  # --prompt-once -> GRPOConfig.prompt_once


def even_fraction_reward(prompts, completions, **kwargs):
    """Fraction of even token ids in each completion."""
    out = []
    for c in completions:
        ids = [int(t) for t in c.split()]
        out.append(sum(1 for t in ids if t % 2 == 0) / len(ids) if ids else 0.0)
    return out


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(p)
    p.add_argument("--batch", type=int, default=8, help="prompts per global step")
    p.add_argument("--num-generations", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--gen-len", type=int, default=64)
    p.add_argument("--steps", type=int, default=12, help="global steps")
    p.add_argument("--beta", type=float, default=0.04, help="KL weight; != 0 needs the reference")
    p.add_argument("--prompt-once", choices=("auto", "0", "1"), default="auto",
                   help="1: log-prob passes run each group's prompt once (GRPOConfig.prompt_once); 0: every row whole; "
                        "auto: the library's default (on a CPU once; elsewhere once where that halves the tokens)")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--temperature", type=float, default=0.9)
    p.add_argument("--lora-rank", type=int, default=0, help=">0: LoRA on q/k/v/o/gate/up/down")
    p.add_argument("--train-micro-batch", type=int, default=0,
                   help=">0: prompts per forward/backward (and per rollout / log-prob call); memory, not work, changes")
    add_max_isa_arg(p)
    args, unknown = p.parse_known_args(argv)
    if unknown:
        print(f"warning: ignoring flags upstream's side takes but we do not: {unknown}", file=sys.stderr)
    return args


def main(argv=None):
    args = parse_args(argv)
    apply_max_isa(args.max_isa)  # before JAX reads XLA_FLAGS
    from tunix_lit import runtime

    runtime.tune_host_allocator()  # CPU runs: before JAX starts its threads (chapter 14); a no-op elsewhere
    t0 = time.perf_counter()
    import jax
    import numpy as np
    import optax
    from flax import nnx

    from tunix_lit.rl.cluster import RLCluster, RolloutConfig
    from tunix_lit.rl.grpo import GRPOConfig, GRPOLearner
    from tunix_lit.rl.learner import RLTrainingConfig
    import_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    actor = build_model(args)
    # A random model with our default init puts almost all mass on one token, so every completion of a
    # group is the same and every advantage is 0 (a step that computes but changes nothing). Shrinking
    # the (tied) embedding to std 0.02 makes the random policy diverse; the work per step is unchanged.
    emb = actor.embedder.embedding
    emb.set_value(emb.get_value() * (0.02 / float(emb.get_value().std())))
    if args.lora_rank > 0:
        from tunix_lit.sft import lora

        actor = lora.apply_lora(actor, rank=args.lora_rank, alpha=float(2 * args.lora_rank), targets=LORA_TARGETS)
    build_s = time.perf_counter() - t0
    n_params = sum(x.size for x in jax.tree.leaves(nnx.state(actor, nnx.Param)))
    tok = IntTokenizer(args.vocab_size)
    compiles = CompileLog(("tunix_lit", "benchmarks")).start()  # what the set-up and the first step compile
    t0 = time.perf_counter()
    cluster = RLCluster(actor, tok, reference="actor" if args.beta else None,
                        rollout_config=RolloutConfig(max_new_tokens=args.gen_len, max_prompt_length=args.prompt_len,
                                                     temperature=args.temperature, stop_tokens=(-1,),
                                                     seed=args.seed))
    cfg = RLTrainingConfig(batch_size=args.batch, max_steps=args.steps, progress_bar=False, seed=args.seed,
                           train_micro_batch_size=args.train_micro_batch or None)
    learner = GRPOLearner(cluster, optax.adamw(args.lr), cfg,
                          GRPOConfig(num_generations=args.num_generations, beta=args.beta, epsilon=0.2,
                                     prompt_once=PROMPT_ONCE[args.prompt_once]),
                          reward_fns=[even_fraction_reward])
    init_s = time.perf_counter() - t0

    rng = np.random.default_rng(args.seed + 1)
    ids = rng.integers(FIRST_FREE_ID, args.vocab_size, size=(args.batch * (args.steps + 2), args.prompt_len - 1))
    data = [{"prompt": [BOS_ID] + row.tolist()} for row in ids]

    ends, write = [], learner.metrics.write

    def timed_write(step, metrics, mode="train"):
        if mode == "train":
            ends.append(time.perf_counter())
        write(step, metrics, mode)

    learner.metrics.write = timed_write
    trainable = nnx.LoRAParam if args.lora_rank else nnx.Param
    before = jax.tree.map(lambda x: np.asarray(x).copy(), nnx.state(actor, trainable))
    t_start = time.perf_counter()
    learner.train(data)
    total_s = time.perf_counter() - t_start
    changed = any(not np.array_equal(a, np.asarray(b)) for a, b in
                  zip(jax.tree.leaves(before), jax.tree.leaves(nnx.state(learner.trainer.model, trainable))))
    steps = [b - a for a, b in zip([t_start] + ends[:-1], ends)]
    rest = steps[1:]
    _, gen = learner.metrics.history("time/generate_s")
    _, logps = learner.metrics.history("time/logps_s")
    _, upd = learner.metrics.history("time/update_s")
    med = lambda xs: round(statistics.median(xs[1:]), 4) if len(xs) > 1 else None
    # what the passes did: with --prompt-once auto the padded shapes decide (GRPOConfig.prompt_once=None)
    padded = dict(prompt_ids=np.zeros((1, args.prompt_len)), completion_ids=np.zeros((1, args.gen_len)))
    ran_once = learner._prompt_group(padded) > 1
    out = dict(bench="tunix_lit_grpo", model=dict(arch=args.arch, num_layers=args.num_layers, embed_dim=args.embed_dim,
                                                  vocab_size=args.vocab_size, dtype=args.dtype),
               n_params=int(n_params), lora_rank=args.lora_rank, batch_prompts=args.batch,
               num_generations=args.num_generations, prompt_once=args.prompt_once,
               prompt_once_ran=ran_once, trainer_donates=bool(cluster.donate_actor),
               seqs_per_step=args.batch * args.num_generations,
               prompt_len=args.prompt_len, gen_len=args.gen_len, beta=args.beta,
               train_micro_batch=args.train_micro_batch or args.batch, global_steps_run=len(steps),
               optimizer_updates=learner.trainer.step, trainable_params_changed=bool(changed),
               train_step_compiles=learner.trainer._train_step._cache_size(),
               sampler_traces=dict(cluster.rollout.traces),
               decode_compiler_options=runtime.decode_compiler_options(jax.default_backend()),
               import_s=round(import_s, 3), build_s=round(build_s, 3), cluster_and_learner_init_s=round(init_s, 3),
               first_step_s=round(steps[0], 4) if steps else None, step_s=[round(x, 4) for x in steps],
               init_and_first_step_s=round(init_s + steps[0], 4) if steps else None,
               first_step_compiles=compiles.summary(until=ends[0] - compiles.t0) if ends else None,
               median_step_s=round(statistics.median(rest), 4) if rest else None,
               min_step_s=round(min(rest), 4) if rest else None,
               phase_median_later_steps_s=dict(generate=med(gen), ref_logps=med(logps), update_and_sync=med(upd)),
               generated_tokens_per_s_median=(round(args.batch * args.num_generations * args.gen_len
                                                    / statistics.median(rest), 1) if rest else None),
               total_train_s=round(total_s, 3),
               peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
               device_memory=device_memory(),
               loadavg=open("/proc/loadavg").read().split()[:3], env=env_info(), machine=machine_info())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
