"""Seconds `apply_lora` takes on a Gemma-3-270M-shaped model (random float32 weights), two routes, cold and warm.

The routes: `nnx_jit`, qwix's rewriting call under a plain `nnx.jit` (the whole model in, the whole model out:
every frozen weight copied into a fresh output buffer, every A drawn inside the program), as `apply_lora` once
did; and `apply_lora`, the library's function (a program that returns only new state: B and QLoRA codes and
scales; each A drawn afterwards from its key's count by one small program per shape; the caller's arrays passed
through).

Each (route, cache) pair runs in a fresh process (`--child`): `cold` with an empty JAX persistent compile cache
(every program stored: min compile time 0, min entry size -1), `warm` with the directory its cold run filled.
A child times the call (to the last array ready), sums JAX's own trace / compile / cache-retrieval durations
(jax.monitoring) during it, then lowers its route's program once more and counts the program's outputs, their
bytes and its `dot_general` ops (the forward pass qwix traces, if any of it survived), and the `while` loops
(one per random draw: threefry) and lines of the compiled program.

    nice -n 19 python benchmarks/lora_apply_time.py --config GEMMA_CONFIG_JSON > benchmarks/results/cpu_lora_apply_DATE.json
"""

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time

ROUTES = ("nnx_jit", "apply_lora")
RANK, ALPHA = 8, 16.0


def lowered_counts(lowered) -> dict:
    """Array outputs (random keys left out), their bytes and dot_general ops of a lowered program; while loops (one
    per random draw) and lines of its compiled HLO."""
    import jax

    outs = [o for o in jax.tree.leaves(lowered.out_info) if not jax.dtypes.issubdtype(o.dtype, jax.dtypes.prng_key)]
    compiled = lowered.compile().as_text()  # from the persistent cache: the timed call stored it
    return {"outputs": len(outs), "output_bytes": int(sum(o.size * o.dtype.itemsize for o in outs)),
            "dot_general": lowered.as_text().count("dot_general"),
            "compiled_while_loops": compiled.count(" while("), "compiled_hlo_lines": compiled.count("\n")}


def child(route: str, config_path: str, cache_dir: str) -> dict:
    """One timed apply in this process: seconds, JAX's event durations during it, and the program's counts."""
    import jax

    jax.config.update("jax_compilation_cache_dir", cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    import jax.numpy as jnp
    import qwix
    from flax import nnx

    from tunix_lit.models.loader import config_from_hf
    from tunix_lit.models.transformer import Transformer
    from tunix_lit.sft import lora

    with open(config_path) as f:
        cfg = config_from_hf(json.load(f))
    t0 = time.perf_counter()
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    jax.block_until_ready(jax.tree.leaves(nnx.state(model)))
    build_s = time.perf_counter() - t0

    tokens = jnp.zeros((1, 1), jnp.int32)
    provider = qwix.LoraProvider(module_path=lora.DEFAULT_TARGETS, rank=RANK, alpha=ALPHA)
    plain = nnx.jit(lambda m, rngs: qwix.apply_lora_to_model(m, provider, tokens, rngs=rngs))

    events = collections.defaultdict(float)
    jax.monitoring.register_event_duration_secs_listener(lambda name, secs, **kw: events.__setitem__(name, events[name] + secs))
    t0 = time.perf_counter()
    adapted = plain(model, nnx.Rngs(0)) if route == "nnx_jit" else lora.apply_lora(model, rank=RANK, alpha=ALPHA)
    jax.block_until_ready(jax.tree.leaves(nnx.state(adapted)))
    apply_s = time.perf_counter() - t0
    during = {k.rsplit("/", 1)[-1]: round(v, 3) for k, v in events.items()
              if k.endswith(("jaxpr_trace_duration", "backend_compile_duration", "cache_retrieval_time_sec"))}

    if route == "nnx_jit":
        counts = lowered_counts(plain.lower(nnx.clone(model), nnx.Rngs(0)).lowered)  # flax wraps jax's Lowered
    else:
        rule = qwix.LoraRule(module_path=lora.DEFAULT_TARGETS, rank=RANK, alpha=ALPHA)
        program, args, plan = lora._lora_program(model, rule, 0)
        counts = lowered_counts(program.lower(*args))
        counts["a_draw_programs"] = len({tuple(rest[1:]) for kind, *rest in plan["source"] if kind == "drawn"})
        counts["a_drawn_outside"] = sum(kind == "drawn" for kind, *_ in plan["source"])
    lora_values = sum(x.size for x in jax.tree.leaves(nnx.state(adapted, nnx.LoRAParam)))
    return {"route": route, "apply_s": round(apply_s, 3), "jax_events_s": during, "build_model_s": round(build_s, 3),
            "lora_values": int(lora_values), "load_average": os.getloadavg(), **counts}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="a Gemma 3 270M config.json (only shapes are used)")
    ap.add_argument("--repeats", type=int, default=1, help="cold+warm pairs per route")
    ap.add_argument("--child", nargs=2, metavar=("ROUTE", "CACHE_DIR"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.config, args.child[1])))
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    runs = []
    for repeat in range(args.repeats):
        for route in ROUTES:
            with tempfile.TemporaryDirectory(prefix="lora_apply_cache_") as cache:
                for cache_state in ("cold", "warm"):
                    out = subprocess.run([sys.executable, __file__, "--config", args.config, "--child", route, cache],
                                         check=True, stdout=subprocess.PIPE, text=True).stdout
                    runs.append({"repeat": repeat, "cache": cache_state, **json.loads(out.strip().splitlines()[-1])})
                    print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    import jax  # noqa: F401  (machine_info reads the backend)
    from machine import machine_info

    summary = {f"{route}_{cache}_apply_s": [r["apply_s"] for r in runs if r["route"] == route and r["cache"] == cache]
               for route in ROUTES for cache in ("cold", "warm")}
    record = {
        "what": ("Seconds for attaching LoRA (rank 8, alpha 16, every projection) to a Gemma-3-270M-shaped model "
                 "with random float32 weights on a CPU, each in a fresh process: qwix's call under a plain nnx.jit "
                 "(the whole model returned) against tunix_lit.sft.lora.apply_lora (only new state returned), with "
                 "an empty and then a warm JAX persistent compile cache, with JAX's trace / compile / cache-retrieval "
                 "seconds during the call; plus each route's program: array outputs, their bytes, dot_general ops "
                 "(lowered), while loops (one per random draw) and lines of the compiled HLO "
                 "(benchmarks/lora_apply_time.py)."),
        "machine": {**machine_info(), "note": "2 cores shared with other work (load averages per run): seconds are "
                                              "noisy; the counts are not"},
        "command": "nice -n 19 python benchmarks/lora_apply_time.py --config GEMMA_3_270M_CONFIG_JSON "
                   f"--repeats {args.repeats}",
        "summary": summary,
        "runs": runs,
    }
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
