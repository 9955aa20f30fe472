"""Upstream Tunix's side of the speed comparison: the same work as our benchmarks, through upstream's API.

Runs in the virtual environment that `benchmarks/compare_upstream.py` builds (google-tunix and its
pinned stack, never this repository's package). One JSON line per run, with the figure our
benchmark prints under the same key:

    python benchmarks/upstream_bench.py sampler [--batch 8 --prompt-len 32 --gen-len 64 --repeats 5 --min-time-s 2]
    python benchmarks/upstream_bench.py sft     [--batch 8 --seq-len 128 --steps 12 --lora-rank 0 --pipelined-steps 0]
    python benchmarks/upstream_bench.py grpo    [--batch 8 --num-generations 4 --prompt-len 32 --gen-len 64 --steps 8]

The model is a randomly initialised Qwen 3-family decoder built from upstream's own config class
(4 layers x 256 by default, vocab 8192, float32, one CPU device), and the "text" is
space-separated token ids, so prompts are exact and no tokenizer is involved. Figures:
`tokens_per_s` (sampler: new tokens per second of a warm call; sft: trained tokens per second of
a warm step) and `median_step_s` (grpo: one global step, generation to optimizer update).
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import CompileLog, add_max_isa_arg, apply_max_isa, device_memory, machine_info  # noqa: E402  (no tunix_lit: runs in upstream's venv)

PAD, BOS, EOS = 0, 1, 2
LORA_TARGETS = ".*q_proj|.*k_proj|.*v_proj|.*o_proj|.*gate_proj|.*up_proj|.*down_proj"


class IdText:
    """A tokenizer for upstream's adapter: text is space-separated ids."""

    def encode(self, text, **_):
        return [int(t) for t in text.split()]

    def decode(self, ids, **_):
        return " ".join(str(int(i)) for i in ids)

    def bos_id(self):
        return BOS

    def eos_id(self):
        return EOS

    def pad_id(self):
        return PAD


def model_flags(p):
    """The model flags our benchmarks share (a tiny Qwen 3-family decoder)."""
    p.add_argument("--num-layers", type=int, default=4)
    p.add_argument("--embed-dim", type=int, default=256)
    p.add_argument("--hidden-dim", type=int, default=1024)
    p.add_argument("--num-heads", type=int, default=4)
    p.add_argument("--num-kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--vocab-size", type=int, default=8192)
    p.add_argument("--tied-embedding", type=int, default=1)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--arch", default="qwen3", choices=["qwen3"], help="only the Qwen 3 family is compared")


def build(args):
    """Upstream's Qwen 3 with random weights from nnx.Rngs(seed)."""
    import jax.numpy as jnp
    from flax import nnx
    from tunix.models.qwen3 import model as qwen3

    dtype = jnp.float32 if args.dtype == "float32" else jnp.bfloat16
    cfg = qwen3.ModelConfig(num_layers=args.num_layers, vocab_size=args.vocab_size, embed_dim=args.embed_dim,
                            hidden_dim=args.hidden_dim, num_heads=args.num_heads, head_dim=args.head_dim,
                            num_kv_heads=args.num_kv_heads, rope_theta=1_000_000, norm_eps=1e-6,
                            use_tied_embedding=bool(args.tied_embedding), dtype=dtype, param_dtype=dtype)
    return qwen3.Qwen3(cfg, rngs=nnx.Rngs(args.seed))


def with_lora(model, rank, seed):
    """The model with qwix LoRA on every projection (alpha = 2 * rank), as our benchmarks use."""
    import qwix
    from flax import nnx

    provider = qwix.LoraProvider(module_path=LORA_TARGETS, rank=rank, alpha=float(2 * rank))
    return qwix.apply_lora_to_model(model, provider, rngs=nnx.Rngs(seed + 100), **model.get_model_input())


def prompt_ids(rows, length, vocab, seed):
    """[rows, length] ids: BOS, then uniform ids above the special ones."""
    import numpy as np

    body = np.random.default_rng(seed).integers(3, vocab, size=(rows, length - 1))
    return np.concatenate([np.full((rows, 1), BOS), body], axis=1).astype(np.int32)


def as_text(row):
    return " ".join(str(int(i)) for i in row)


def versions():
    """The versions measured, so a figure names its stack."""
    import importlib.metadata as md

    import jax

    def v(name):
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return None

    return dict(tunix=v("google-tunix"), jax=jax.__version__, flax=v("flax"), qwix=v("qwix"),
                backend=jax.default_backend(), cpus=os.cpu_count())


def bench_sampler(args):
    """Greedy generation of a batch: the median of at least `repeats` warm calls lasting `min_time_s` in all."""
    from tunix.generate import sampler as sampler_lib

    model = build(args)
    cache = args.prompt_len + args.gen_len
    sampler = sampler_lib.Sampler(transformer=model, tokenizer=IdText(),
                                  cache_config=sampler_lib.CacheConfig(cache_size=cache, num_layers=args.num_layers,
                                                                       num_kv_heads=args.num_kv_heads,
                                                                       head_dim=args.head_dim))
    prompts = [as_text(r) for r in prompt_ids(args.batch, args.prompt_len, args.vocab_size, args.seed + 1)]
    call = dict(max_generation_steps=args.gen_len, max_prompt_length=args.prompt_len, echo=False,
                temperature=0.0, eos_tokens=[-1])  # -1 never occurs: every row generates gen_len tokens

    def timed():
        t = time.perf_counter()
        out = sampler(prompts, **call)
        return time.perf_counter() - t, out

    first_s, out = timed()
    new_tokens = sum(len(t) for t in out.tokens)
    times = []
    while len(times) < args.repeats or (sum(times) < args.min_time_s and len(times) < 1000):  # as sampler.py
        times.append(timed()[0])
    med = statistics.median(times)
    return dict(first_call_s=round(first_s, 4), repeat_s=[round(t, 4) for t in times], median_call_s=round(med, 4),
                tokens_per_s=round(new_tokens / med, 1))


def bench_sft(args):
    """PeftTrainer driven a step at a time (as the RL learners drive it); steady steps from the third on."""
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx
    from tunix.generate import utils as gen_utils
    from tunix.sft import peft_trainer

    mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    T = args.seq_len
    with jax.set_mesh(mesh):
        model = build(args)
        if args.lora_rank:
            model = with_lora(model, args.lora_rank, args.seed)

        def model_input(x):
            return dict(input_tokens=x.input_tokens, input_mask=x.input_mask,
                        positions=gen_utils.build_positions_from_mask(x.input_mask),
                        attention_mask=gen_utils.make_causal_attn_mask(x.input_mask, T))

        cfg = peft_trainer.TrainingConfig(eval_every_n_steps=10**6, max_steps=None, checkpoint_root_directory=None)
        trainer = peft_trainer.PeftTrainer(model, optax.adamw(args.lr), cfg).with_gen_model_input_fn(model_input)
        trainer.is_managed_externally = True  # one train() call per step, no close() in between
        n_batches = args.steps + args.pipelined_steps
        ids = prompt_ids(args.batch * n_batches, T, args.vocab_size, args.seed + 1).reshape(n_batches, args.batch, T)
        batches = [peft_trainer.TrainingInput(input_tokens=jnp.asarray(ids[i]),
                                              input_mask=jnp.ones((args.batch, T), jnp.bool_)) for i in range(n_batches)]
        times = []
        for i in range(args.steps):
            t = time.perf_counter()
            trainer.train([batches[i]])
            jax.block_until_ready(nnx.state(trainer.model))
            times.append(time.perf_counter() - t)
        t_pipe = None
        if args.pipelined_steps:  # one train() call over several batches: the trainer's own loop, as ours
            t = time.perf_counter()
            trainer.train(batches[args.steps:])
            jax.block_until_ready(nnx.state(trainer.model))
            t_pipe = time.perf_counter() - t
        trainer.is_managed_externally = False
        trainer.close()
    steady = times[2:] if len(times) > 2 else times[1:]  # upstream compiles the step twice under a mesh
    med = statistics.median(steady)
    pipe = {} if t_pipe is None else dict(
        pipelined_steps=args.pipelined_steps, pipelined_s_per_step=round(t_pipe / args.pipelined_steps, 4),
        pipelined_tokens_per_s=round(args.batch * T * args.pipelined_steps / t_pipe, 1))
    return dict(mode="lora" if args.lora_rank else "full", first_step_s=round(times[0], 4),
                step_s=[round(t, 4) for t in times], median_step_s=round(med, 4),
                tokens_per_s=round(args.batch * T / med, 1), **pipe)


def even_share(prompts, completions, **_):
    """A reward needing no model: the share of even ids in the completion."""
    out = []
    for c in completions:
        ids = [int(t) for t in c.split()]
        out.append(sum(i % 2 == 0 for i in ids) / len(ids) if ids else 0.0)
    return out


def bench_grpo(args):
    """GRPOLearner over RLCluster (actor, reference, rollout colocated): the median global step after the first."""
    import jax
    import numpy as np
    import optax
    from flax import nnx
    from tunix.rl import rl_cluster as rlc
    from tunix.rl.grpo import grpo_learner
    from tunix.rl.rollout import base_rollout

    mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    with jax.set_mesh(mesh):
        actor = build(args)
        reference = None if args.beta == 0 else (actor if args.lora_rank else nnx.clone(actor))
        if args.lora_rank:
            actor = with_lora(actor, args.lora_rank, args.seed)
    compiles = CompileLog(("tunix", "benchmarks")).start()  # what the set-up and the first step compile
    t_init = time.perf_counter()
    rollout = base_rollout.RolloutConfig(max_tokens_to_generate=args.gen_len, max_prompt_length=args.prompt_len,
                                         kv_cache_size=args.prompt_len + args.gen_len, temperature=args.temperature,
                                         top_p=1.0, top_k=None, eos_tokens=[-1])
    training = rlc.RLTrainingConfig(actor_optimizer=optax.adamw(args.lr), eval_every_n_steps=10**6,
                                    max_steps=args.steps, checkpoint_root_directory=None)
    roles = {rlc.Role.ACTOR: mesh, rlc.Role.REFERENCE: mesh, rlc.Role.ROLLOUT: mesh}
    cluster = rlc.RLCluster(actor=actor, reference=reference, tokenizer=IdText(),
                            cluster_config=rlc.ClusterConfig(role_to_mesh=roles, rollout_engine="vanilla",
                                                             offload_to_cpu=False, training_config=training,
                                                             rollout_config=rollout))
    learner = grpo_learner.GRPOLearner(
        rl_cluster=cluster, reward_fns=[even_share],
        algo_config=grpo_learner.GRPOConfig(num_generations=args.num_generations, num_iterations=1,
                                            beta=args.beta, epsilon=0.2))
    ends, update = [], cluster.update_actor

    def update_then_mark(*a, **k):  # a global step ends when the actor's update has landed
        out = update(*a, **k)
        jax.block_until_ready(nnx.state(cluster.actor_trainer.model))
        ends.append(time.perf_counter())
        return out

    cluster.update_actor = update_then_mark
    ids = prompt_ids(args.batch * (args.steps + 2), args.prompt_len, args.vocab_size, args.seed + 1)
    texts = [as_text(r) for r in ids]
    data = [{"prompts": np.array(texts[i * args.batch:(i + 1) * args.batch])} for i in range(args.steps + 2)]
    start = time.perf_counter()
    init_s = start - t_init
    learner.train(data)
    steps = [b - a for a, b in zip([start] + ends[:-1], ends)]
    return dict(first_step_s=round(steps[0], 4) if steps else None, step_s=[round(s, 4) for s in steps],
                cluster_and_learner_init_s=round(init_s, 3),
                init_and_first_step_s=round(init_s + steps[0], 4) if steps else None,
                first_step_compiles=compiles.summary(until=ends[0] - compiles.t0) if ends else None,
                median_step_s=round(statistics.median(steps[1:] or steps), 4))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    s = sub.add_parser("sampler")
    s.add_argument("--batch", type=int, default=8)
    s.add_argument("--prompt-len", type=int, default=32)
    s.add_argument("--gen-len", type=int, default=64)
    s.add_argument("--repeats", type=int, default=5)
    s.add_argument("--min-time-s", type=float, default=2.0, help="and keep calling until the timed calls add up to this")
    f = sub.add_parser("sft")
    f.add_argument("--batch", type=int, default=8)
    f.add_argument("--seq-len", type=int, default=128)
    f.add_argument("--steps", type=int, default=12)
    f.add_argument("--lora-rank", type=int, default=0)
    f.add_argument("--pipelined-steps", type=int, default=0,
                   help="then one train() call over this many batches (wall time per step, as sft_step.py's)")
    f.add_argument("--lr", type=float, default=1e-4)
    g = sub.add_parser("grpo")
    g.add_argument("--batch", type=int, default=8)
    g.add_argument("--num-generations", type=int, default=4)
    g.add_argument("--prompt-len", type=int, default=32)
    g.add_argument("--gen-len", type=int, default=64)
    g.add_argument("--steps", type=int, default=8)
    g.add_argument("--beta", type=float, default=0.04)
    g.add_argument("--lr", type=float, default=1e-5)
    g.add_argument("--temperature", type=float, default=0.9)
    g.add_argument("--lora-rank", type=int, default=0)
    for q in (s, f, g):
        model_flags(q)
        add_max_isa_arg(q)
    args, unknown = p.parse_known_args(argv)
    if unknown:
        print(f"upstream_bench: ignoring flags upstream has no counterpart for: {unknown}", file=sys.stderr)
    apply_max_isa(args.max_isa)  # before JAX reads XLA_FLAGS
    t = time.perf_counter()
    import tunix  # noqa: F401  (timed: upstream's import cost is part of its start-up)
    import_s = time.perf_counter() - t
    result = {"sampler": bench_sampler, "sft": bench_sft, "grpo": bench_grpo}[args.what](args)
    print(json.dumps(dict(bench=f"upstream_{args.what}", import_s=round(import_s, 3), **result, env=versions(),
                          device_memory=device_memory(),
                          machine=machine_info())),
          flush=True)


if __name__ == "__main__":
    main()
