"""Benchmark: one PeftTrainer update on tiny Qwen 3 (4 layers x 256, vocab 8192), full / LoRA / QLoRA.

Takes the same flags as upstream's side (`benchmarks/upstream_bench.py sft`) (upstream Tunix's PeftTrainer) and prints one
JSON line per mode with the same figure key, `tokens_per_s`, so `benchmarks/compare_upstream.py sft` can set them side by side.
The mode follows `--lora-rank` (0 = full, >0 = LoRA) unless `--mode` names one or `all`:

  python benchmarks/sft_step.py [--batch 8 --seq-len 128 --steps 12 --lora-rank 0|8] [--mode full|lora|qlora|all]

Timing as upstream's side does it: `--steps` synchronous updates (each a `trainer.train([batch])` call,
then block on the parameters; the first compiles, steps 3..N give the median), then one `train` call over
`--pipelined-steps` batches (our own loop, asynchronous dispatch) for wall time per step.
`peak_rss_mb` is the process's high-water mark, so with `--mode all` later lines include earlier modes;
run one mode per process (as compare_upstream.py does) for a clean figure.
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
from machine import add_max_isa_arg, apply_max_isa, device_memory, machine_info  # noqa: E402  (the machine each figure names)


def add_model_args(p: argparse.ArgumentParser) -> None:
    """The model flags: the same names and defaults as upstream_bench.py's model_flags."""
    p.add_argument("--arch", default="qwen3", choices=["qwen3", "llama3", "gemma3"])
    p.add_argument("--num-layers", type=int, default=4)
    p.add_argument("--embed-dim", type=int, default=256)
    p.add_argument("--hidden-dim", type=int, default=1024)
    p.add_argument("--num-heads", type=int, default=4)
    p.add_argument("--num-kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--vocab-size", type=int, default=8192)
    p.add_argument("--tied-embedding", type=int, default=1, help="1/0")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--seed", type=int, default=0)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(p)
    # bench flags (upstream's side's) and ours
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=12, help="synchronous steps (the first one compiles)")
    p.add_argument("--pipelined-steps", type=int, default=10)
    p.add_argument("--lora-rank", type=int, default=0, help="0 = full fine-tune")
    p.add_argument("--lora-alpha", type=float, default=0.0, help="0 = 2*rank")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--mode", default=None, choices=["full", "lora", "qlora", "all"],
                   help="default: full if --lora-rank is 0, else lora")
    add_max_isa_arg(p)
    args, unknown = p.parse_known_args(argv)
    if unknown:
        print(f"warning: ignoring flags upstream's side takes but we do not: {unknown}", file=sys.stderr)
    return args


LORA_TARGETS = ".*q_proj|.*k_proj|.*v_proj|.*o_proj|.*gate_proj|.*up_proj|.*down_proj"


def build_model(args):
    """Tiny random decoder with upstream_bench.py's shapes, via our presets."""
    from tunix_lit.models.transformer import ModelConfig, create_model

    name = {"qwen3": "tiny-qwen3", "llama3": "tiny-llama3", "gemma3": "tiny-gemma3"}[args.arch]
    over = dict(vocab_size=args.vocab_size, embed_dim=args.embed_dim, hidden_dim=args.hidden_dim,
                num_layers=args.num_layers, num_heads=args.num_heads, num_kv_heads=args.num_kv_heads,
                head_dim=args.head_dim, tie_embeddings=bool(args.tied_embedding), dtype=args.dtype,
                param_dtype=args.dtype)
    if args.arch == "qwen3":
        over["rope_theta"] = 1_000_000.0
    if args.arch == "gemma3":
        over.update(layer_types=None, sliding_window=None)
    return create_model(ModelConfig.from_name(name, **over), seed=args.seed)


def add_lora(model, args, mode):
    """LoRA (or QLoRA, NF4 base) on every projection, through tunix_lit.sft.lora (or qwix directly if absent)."""
    rank = args.lora_rank or 8
    alpha = args.lora_alpha or float(2 * rank)
    quantize = "nf4" if mode == "qlora" else None
    try:
        from tunix_lit.sft import lora
    except ImportError:
        lora = None
    if lora is not None and hasattr(lora, "apply_lora"):
        return lora.apply_lora(model, rank=rank, alpha=alpha, targets=LORA_TARGETS, quantize=quantize), "tunix_lit.sft.lora"
    import jax.numpy as jnp
    import qwix
    from flax import nnx

    kw = dict(weight_qtype="nf4", tile_size=64) if quantize else {}
    provider = qwix.LoraProvider(module_path=LORA_TARGETS, rank=rank, alpha=alpha, **kw)
    tokens = jnp.zeros((1, 8), jnp.int32)
    return qwix.apply_lora_to_model(model, provider, tokens, rngs=nnx.Rngs(args.seed + 100)), "qwix"


def run_mode(args, mode):
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from flax import nnx
    from tunix_lit.sft.trainer import PeftTrainer, TrainingConfig

    t0 = time.perf_counter()
    model = build_model(args)
    lora_via = None
    if mode != "full":
        model, lora_via = add_lora(model, args, mode)
    build_s = time.perf_counter() - t0
    n_params = int(sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param))))
    n_lora = int(sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.LoRAParam))))

    T, B = args.seq_len, args.batch
    n_batches = args.steps + args.pipelined_steps
    rng = np.random.default_rng(args.seed + 1)  # BOS then uniform ids, as upstream_bench.py's prompt_ids
    ids = np.concatenate([np.ones((n_batches * B, 1)), rng.integers(3, args.vocab_size, (n_batches * B, T - 1))], 1)
    ids = ids.astype(np.int32).reshape(n_batches, B, T)
    batches = [dict(tokens=ids[i], loss_mask=np.ones((B, T), np.int32)) for i in range(n_batches)]

    cfg = TrainingConfig(max_steps=10**9, log_every_n_steps=10**6, progress_bar=False, resume=False)
    trainer = PeftTrainer(model, optax.adamw(args.lr), cfg)
    trainable = lambda: nnx.state(trainer.model, trainer.wrt)
    before = jax.tree.map(lambda x: np.asarray(x).copy(), nnx.state(model, nnx.Not(nnx.LoRAParam)))
    times = []
    load0 = open("/proc/loadavg").read().split()[:3]
    for i in range(args.steps):
        t0 = time.perf_counter()
        trainer.train([batches[i]])
        jax.block_until_ready(trainable())
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    result = trainer.train(batches[args.steps:])  # an empty list (--pipelined-steps 0) trains nothing more
    jax.block_until_ready(trainable())
    t_pipe = time.perf_counter() - t0
    n_pipe = max(args.pipelined_steps, 1)
    after = nnx.state(trainer.model, nnx.Not(nnx.LoRAParam))
    base_changed = any(not np.array_equal(a, np.asarray(b)) for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after)))
    _, losses = trainer.metrics.history("loss")
    rest = times[2:] if len(times) > 2 else times[1:]
    med = statistics.median(rest)
    return dict(
        bench="tunix_lit_sft_step", mode=mode, lora_via=lora_via,
        model=dict(arch=args.arch, num_layers=args.num_layers, embed_dim=args.embed_dim, hidden_dim=args.hidden_dim,
                   num_heads=args.num_heads, num_kv_heads=args.num_kv_heads, head_dim=args.head_dim,
                   vocab_size=args.vocab_size, tied_embedding=bool(args.tied_embedding), dtype=args.dtype,
                   seed=args.seed),
        n_params=n_params, lora_rank=0 if mode == "full" else (args.lora_rank or 8), lora_params=n_lora,
        batch=B, seq_len=T, optimizer=f"adamw({args.lr})",
        build_s=round(build_s, 3), first_step_s=round(times[0], 4),
        second_step_s=round(times[1], 4) if len(times) > 1 else None, steady_steps="3..N",
        step_s=[round(x, 4) for x in times], median_step_s=round(med, 4), min_step_s=round(min(rest), 4),
        max_step_s=round(max(rest), 4), tokens_per_s=round(B * T / med, 1),
        pipelined_steps=args.pipelined_steps, pipelined_s_per_step=round(t_pipe / n_pipe, 4) if args.pipelined_steps else None,
        pipelined_tokens_per_s=round(B * T * args.pipelined_steps / t_pipe, 1) if args.pipelined_steps else None,
        base_params_changed=bool(base_changed), train_steps=result.step,
        train_step_jit_cache_size=trainer._train_step._cache_size(),  # 1 = compiled once
        loadavg_start=load0, loadavg_end=open("/proc/loadavg").read().split()[:3],
        loss_history=[round(x, 5) for x in losses],
        peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
               device_memory=device_memory(),
    )


def env_info():
    import importlib.metadata as md

    import jax

    v = lambda name: md.version(name) if name in {d.metadata["Name"] for d in md.distributions()} else None
    return dict(python=platform.python_version(), jax=jax.__version__, flax=v("flax"), optax=v("optax"),
                qwix=v("qwix"), backend=jax.default_backend(), devices=len(jax.devices()), cpus=os.cpu_count())


def main(argv=None):
    args = parse_args(argv)
    apply_max_isa(args.max_isa)  # before JAX reads XLA_FLAGS
    from tunix_lit import runtime

    runtime.tune_host_allocator()  # CPU runs: before JAX starts its threads (chapter 14); a no-op elsewhere
    t0 = time.perf_counter()
    import jax  # noqa: F401

    import tunix_lit.sft.trainer  # noqa: F401
    import_s = time.perf_counter() - t0
    mode = args.mode or ("lora" if args.lora_rank > 0 else "full")
    modes = ["full", "lora", "qlora"] if mode == "all" else [mode]
    env = env_info()
    for m in modes:
        out = run_mode(args, m)
        out.update(import_s=round(import_s, 3), env=env, machine=machine_info())
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
