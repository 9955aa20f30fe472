"""Benchmark: tunix_lit's Sampler, greedy decoding of a batch of fixed-length prompts on a tiny random decoder.

Takes the same flags as upstream's side (`benchmarks/upstream_bench.py sampler`) (upstream Tunix's Sampler) and prints one JSON
line with the same figure key, `tokens_per_s` (new tokens / median call time, tokenisation and detokenisation
included, as upstream's is), so `benchmarks/compare_upstream.py sampler` can set the two side by side:

  python benchmarks/sampler.py [--batch 8 --prompt-len 32 --gen-len 64 --repeats 5 --min-time-s 2 --arch qwen3 ...]

At batch 1 it also measures this machine's memory bandwidth (a
jitted float32 sum over a 512 MB array) and reports the fraction of the bandwidth-bound decode ceiling
reached: (bytes of weights + KV cache read per step) / bandwidth = seconds per token. A second probe sums
an array of one step's bytes (`resident_*`): on a CPU whose cache holds the weights that is the bandwidth
the decode has, so its fraction is the stricter one.
"""

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2  # as upstream_bench.py's IdText
FIRST_FREE_ID = 3

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tunix_lit from this checkout
from machine import add_max_isa_arg, apply_max_isa, machine_info  # noqa: E402  (the machine each figure names)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # model flags: the same names and defaults as upstream_bench.py's model_flags
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
    # the sampler bench's own flags
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--gen-len", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--min-time-s", type=float, default=2.0,
                   help="and keep calling until the timed calls add up to this (a 70 ms call gets ~30 samples)")
    p.add_argument("--cache-size", type=int, default=0, help="buffer length; 0 = prompt_len + gen_len")
    p.add_argument("--lora-rank", type=int, default=0,
                   help=">0: LoRA adapters (alpha = 2 x rank) on every projection, decoded in the loop as an RL rollout does")
    p.add_argument("--eos", default="ignore", choices=["ignore", "forbid"],
                   help="both mean: no stop token (forbidden tokens are not implemented here)")
    p.add_argument("--roofline", default="auto", choices=["auto", "on", "off"],
                   help="measure bandwidth and the ceiling fraction (auto: at batch 1)")
    p.add_argument("--bw-mb", type=int, default=512)
    p.add_argument("--peak-gbs", type=float, default=0.0,
                   help="the device's published memory bandwidth in GB/s (e.g. 819 for a TPU v5e): adds a ceiling "
                        "from it beside the measured one, since a one-array probe can fall short of the peak")
    add_max_isa_arg(p)
    args, unknown = p.parse_known_args(argv)
    if unknown:
        print(f"warning: ignoring unknown flags {unknown}", file=sys.stderr)
    return args


class IntTokenizer:
    """Text is space-separated decimal ids, as in upstream_bench.py (the prompts already start with BOS)."""

    pad_id, bos_id, eos_id = PAD_ID, BOS_ID, EOS_ID
    eos_ids = (EOS_ID,)

    def encode(self, text):
        return [int(t) for t in text.split()]

    def decode(self, ids):
        return " ".join(str(int(i)) for i in ids)


def model_config(args):
    from tunix_lit.models.transformer import ModelConfig, gemma3_layer_types

    shape = dict(vocab_size=args.vocab_size, embed_dim=args.embed_dim, hidden_dim=args.hidden_dim,
                 num_layers=args.num_layers, num_heads=args.num_heads, num_kv_heads=args.num_kv_heads,
                 head_dim=args.head_dim, tie_embeddings=bool(args.tied_embedding), dtype=args.dtype,
                 param_dtype=args.dtype)
    if args.arch == "qwen3":
        return ModelConfig(family="qwen3", rope_theta=1_000_000.0, norm_eps=1e-6, qk_norm=True, **shape)
    if args.arch == "llama3":
        return ModelConfig(family="llama3", rope_theta=500_000.0, norm_eps=1e-5, **shape)
    return ModelConfig(family="gemma3", rope_theta=1_000_000.0, local_rope_theta=10_000.0, sliding_window=512,
                       layer_types=gemma3_layer_types(args.num_layers), norm_eps=1e-6, zero_centered_norm=True,
                       qk_norm=True, sandwich_norm=True, scale_embeddings=True, activation="gelu_tanh",
                       query_scale=args.head_dim ** -0.5, **shape)


def prompt_ids(batch, prompt_len, vocab, seed):
    """[batch, prompt_len] ids: BOS then uniform ids in [3, vocab), drawn exactly as upstream_bench.py draws them."""
    import numpy as np

    rng = np.random.default_rng(seed)
    body = rng.integers(FIRST_FREE_ID, vocab, size=(batch, prompt_len - 1))
    return np.concatenate([np.full((batch, 1), BOS_ID), body], axis=1).astype(np.int32)


def measure_bandwidth(mb, repeats=7):
    """Median GB/s of a jitted float32 sum over an `mb`-megabyte array (a bandwidth-bound pass)."""
    import jax
    import jax.numpy as jnp

    n = mb * 1024 * 1024 // 4
    big = (jnp.ones((n,), jnp.float32) * 1.0001).block_until_ready()
    total = jax.jit(jnp.sum)
    total(big).block_until_ready()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        total(big).block_until_ready()
        times.append(time.perf_counter() - t0)
    return n * 4 / statistics.median(times) / 1e9


def bytes_per_step(model, cfg, batch, prompt_len, gen_len):
    """Bytes a decode step must read: every parameter once (shared by the batch), plus each row's KV slots in use.

    Only the slots that hold tokens count (the prompt plus the tokens decoded so far, on average
    prompt_len + (gen_len + 1) / 2 over the decode): that is what any engine has to read. Our sampler reads its
    whole fixed buffer (masked), so counting the buffer would credit it for bytes no other engine moves and
    flatter large batches, where the KV cache outweighs the weights."""
    import jax
    from flax import nnx

    params = nnx.state(model, nnx.Param)
    weight_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(params))
    itemsize = 2 if cfg.dtype == "bfloat16" else 4
    per_slot = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * itemsize  # k and v of one token
    kv_bytes = round(per_slot * (prompt_len + (gen_len + 1) / 2))
    return weight_bytes, kv_bytes, weight_bytes + batch * kv_bytes


def main(argv=None):
    args = parse_args(argv)
    apply_max_isa(args.max_isa)  # before JAX reads XLA_FLAGS
    from tunix_lit import runtime

    runtime.tune_host_allocator()  # CPU runs: before JAX starts its threads (chapter 14); a no-op elsewhere
    t0 = time.perf_counter()
    import jax
    import numpy as np

    from tunix_lit.generate.sampler import Sampler
    from tunix_lit.models.transformer import create_model
    import_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    cfg = model_config(args)
    model = create_model(cfg, seed=args.seed)
    if args.lora_rank > 0:  # the GRPO rollout's model: the adapters stay in the decode loop off a CPU
        from sft_step import LORA_TARGETS
        from tunix_lit.sft.lora import apply_lora

        model = apply_lora(model, rank=args.lora_rank, alpha=float(2 * args.lora_rank), targets=LORA_TARGETS)
    jax.block_until_ready(jax.tree.leaves(model))
    build_s = time.perf_counter() - t0
    buffer_len = args.cache_size or (args.prompt_len + args.gen_len)
    sampler = Sampler(model, IntTokenizer(), max_len=buffer_len)
    ids = prompt_ids(args.batch, args.prompt_len, args.vocab_size, args.seed + 1)
    prompts = [" ".join(str(int(i)) for i in row) for row in ids]
    kw = dict(max_new_tokens=args.gen_len, max_prompt_length=args.prompt_len, stop_tokens=[-1])

    def run():
        t = time.perf_counter()
        out = sampler(prompts, **kw)
        return time.perf_counter() - t, out

    first_s, out0 = run()
    times, same = [], True
    while len(times) < args.repeats or (sum(times) < args.min_time_s and len(times) < 1000):
        s, out = run()
        times.append(s)
        same &= all((a == b).all() for a, b in zip(out.tokens, out0.tokens))
    gen_lens = [len(t) for t in out0.tokens]
    med = statistics.median(times)
    tokens_per_s = sum(gen_lens) / med
    rec = dict(
        bench="tunix_lit_sampler",
        model=dict(arch=args.arch, num_layers=args.num_layers, embed_dim=args.embed_dim, hidden_dim=args.hidden_dim,
                   num_heads=args.num_heads, num_kv_heads=args.num_kv_heads, head_dim=args.head_dim,
                   vocab_size=args.vocab_size, tied_embedding=bool(args.tied_embedding), dtype=args.dtype,
                   seed=args.seed),
        n_params=int(sum(x.size for x in jax.tree.leaves(sampler.state))),
        batch=args.batch, prompt_len=args.prompt_len, gen_len=args.gen_len, cache_size=buffer_len,
        lora_rank=args.lora_rank,
        eos_mode=args.eos,
        generated_tokens_per_seq=gen_lens,
        deterministic_across_repeats=bool(same),
        import_s=round(import_s, 3), build_s=round(build_s, 3),
        first_call_s=round(first_s, 4), compile_s_est=round(first_s - med, 4),
        compiles=dict(sampler.traces),
        decode_compiler_options=sampler.compiler_options,  # the per-CPU rule's pick (chapter 14)
        repeat_s=[round(x, 4) for x in times], median_call_s=round(med, 4),
        tokens_per_s=round(tokens_per_s, 1),
        peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        first_tokens=[int(x) for x in out0.tokens[0][:8]],
    )
    if args.roofline == "on" or (args.roofline == "auto" and args.batch == 1):
        weight_b, kv_b, step_b = bytes_per_step(model, cfg, args.batch, args.prompt_len, args.gen_len)
        bw = measure_bandwidth(args.bw_mb)
        ceiling = args.batch * bw * 1e9 / step_b
        rec["roofline"] = dict(weight_bytes=weight_b, kv_bytes_per_seq=kv_b, kv_counted="slots in use",
                               bytes_per_step=step_b,
                               measured_bw_gbs=round(bw, 2), ceiling_tok_s=round(ceiling, 1),
                               fraction_of_ceiling=round(tokens_per_s / ceiling, 3))
        # the same probe over one step's bytes: where the weights fit in a CPU's cache (the benchmark model's
        # 25 MB in a large L3), that is the bandwidth the decode really has, and the 512 MB probe understates it
        resident = measure_bandwidth(max(1, -(-step_b // 2**20)), repeats=21)
        resident_ceiling = args.batch * resident * 1e9 / step_b
        rec["roofline"].update(resident_bw_gbs=round(resident, 2), resident_ceiling_tok_s=round(resident_ceiling, 1),
                               fraction_of_resident_ceiling=round(tokens_per_s / resident_ceiling, 3))
        if args.peak_gbs > 0:
            spec = args.batch * args.peak_gbs * 1e9 / step_b
            rec["roofline"].update(peak_gbs=args.peak_gbs, peak_ceiling_tok_s=round(spec, 1),
                                   fraction_of_peak_ceiling=round(tokens_per_s / spec, 3))
    rec["env"] = dict(python=platform.python_version(), jax=jax.__version__, backend=jax.default_backend(),
                      devices=len(jax.devices()), cpus=os.cpu_count(), xla_flags=os.environ.get("XLA_FLAGS", ""))
    rec["machine"] = machine_info()
    print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
