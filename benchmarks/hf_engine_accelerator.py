"""The hf rollout engine fed by an actor that lives on an accelerator (a TPU chip, say): one JSON line.

    python benchmarks/hf_engine_accelerator.py [--out FILE]

The actor (the embedded tiny model) is placed on `jax.devices()[0]`, whatever backend that is; the hf
engine (transformers on PyTorch, on the host CPU) is built from it, samples, is made stale by an in-place
"update" of the actor, synced, and samples again. Each time the largest gap between the engine's
per-token log-probs and the actor's own recompute is measured: small before and after the sync, large
while stale. Chapter 41 explains the engine; tests/rollout/test_hf_placement.py checks the same on the
8 fake CPU devices.
"""

import argparse
import json
import platform
import sys
import time

import jax
import numpy as np
from flax import nnx

from tunix_lit.models import tiny
from tunix_lit.rl import common
from tunix_lit.rollout import engines, sync

PROMPTS = ["12+7=", "40+41=", "3+5=", "99+9="]


def gap(engine, actor, tok, seed: int = 5) -> float:
    """Largest |engine log-prob - the actor's recompute| over one sampled batch of the prompts."""
    rows = [np.asarray(tok.encode(p), np.int32) for p in PROMPTS]
    out = engine.generate(rows, 6, temperature=0.9, seed=seed)
    p, pm = common.pad_rows(rows, 8, tok.pad_id, left=True)
    c, cm = common.pad_rows(out.tokens, 6, tok.pad_id)
    lp, _ = common.pad_rows(out.logprobs, 6, 0.0, dtype=np.float32)
    ref = common.compute_completion_logps(actor, p, pm, c, cm, temperature=0.9)
    return float(sync.max_logp_gap(lp, ref, cm))


def main(argv=None) -> int:
    """Build, sample, stale, sync, sample; print (and optionally write) one JSON line of the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also append the JSON line to this file")
    args = parser.parse_args(argv)
    import torch

    model, tok = tiny.load()
    device = jax.devices()[0]
    graphdef, state = nnx.split(model)
    actor = nnx.merge(graphdef, jax.device_put(state, device))
    t0 = time.perf_counter()
    engine = engines.make_engine("hf", actor, tok, max_prompt_length=8, max_new_tokens=6)
    build_s = time.perf_counter() - t0
    before = gap(engine, actor, tok)
    nnx.update(actor, jax.tree.map(lambda x: x * 1.05, nnx.state(actor, nnx.Param)))  # an "update", in place
    stale = gap(engine, actor, tok)
    t0 = time.perf_counter()
    report = engine.sync_weights(actor)
    sync_s = time.perf_counter() - t0
    after = gap(engine, actor, tok)
    row = {"bench": "hf_engine_accelerator", "actor_device": str(device), "backend": jax.default_backend(),
           "device_kind": device.device_kind, "jax": jax.__version__, "torch": torch.__version__,
           "python": platform.python_version(), "build_s": round(build_s, 3), "sync_s": round(sync_s, 4),
           "bytes_moved": int(report.bytes_moved), "gap_before": before, "gap_stale": stale, "gap_after": after,
           "ok": bool(before < 1e-3 and after < 1e-3 and stale > 1e-3)}
    line = json.dumps(row)
    print(line)
    if args.out:
        with open(args.out, "a") as f:
            f.write(line + "\n")
    return 0 if row["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
