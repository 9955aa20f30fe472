"""Where our training step's time goes: a `jax.profiler` trace of a few steps and a host-side breakdown, as JSON.

    python benchmarks/train_trace.py sft|grpo|both [model flags] [--batch 2 --num-generations 4 --prompt-len 64
        --gen-len 128] [--sft-batch 4 --seq-len 512] [--lora-rank 8] [--steps 3 --trace-steps 2 --trace-dir DIR]

Runs on any backend (a CPU with tiny shapes checks it; the model flags are `sft_step.py`'s). For each step:

- `sft`: the PEFT trainer driven one synchronous `train([batch])` call at a time (as `sft_step.py` times it),
  after two warm-up calls; then the same batches in one `train` call (dispatched back to back).
- `grpo`: the GRPO learner (LoRA actor, reference = the shared base, as `grpo_step.py`), after one warm-up step.

Printed per step (medians): wall time; host time inside each part of the step (SFT: batch checks and placement,
dispatch of the jitted update, the metrics read that waits for it, writing the state back, the final block;
GRPO: rollout, reference log-probs, the LoRA update's dispatch, the wait for its metrics, the weight sync);
compiles and traces (`jax.monitoring` events, by function name; persistent-cache hits counted apart); host reads
of device arrays (every `jax.Array` turned into NumPy: `device_get`, `float`, `np.asarray`); host-to-device
transfers (the transfer guard's log, which a CPU backend only writes for that direction). From the trace:
device busy time per step (a TPU's "XLA Modules" line; on a CPU the XLA worker threads) and its split by
compiled program, so `fixed_host_s_per_call` = synchronous call time - device time.
"""

import argparse
import collections
import contextlib
import dataclasses
import glob
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tunix_lit from this checkout
from sft_step import add_lora, add_model_args, build_model, env_info  # noqa: E402  (same model flags and builder)
from machine import machine_info  # noqa: E402

MED = lambda xs: round(statistics.median(xs), 5) if xs else None


class Probe:
    """Counts compiles and traces (jax.monitoring), persistent-cache hits, and host reads of device arrays."""

    def __init__(self):
        import jax
        from jax._src import array, monitoring

        self.compiles, self.traces, self.hits, self.reads, self.read_bytes = collections.Counter(), collections.Counter(), 0, 0, 0

        def on_duration(event, duration, **kw):
            if event == "/jax/core/compile/backend_compile_duration":
                self.compiles[kw.get("fun_name", "?")] += 1
            elif event == "/jax/core/compile/jaxpr_trace_duration":
                self.traces[kw.get("fun_name", "?")] += 1

        def on_event(event, **kw):
            if event == "/jax/compilation_cache/cache_hits":
                self.hits += 1

        monitoring.register_event_duration_secs_listener(on_duration)
        monitoring.register_event_listener(on_event)
        original = array.ArrayImpl._value  # a property: the one path from a device array to NumPy

        def counted(arr):
            if arr._npy_value is None:
                self.reads += 1
                self.read_bytes += arr.size * arr.dtype.itemsize
            return original.fget(arr)

        array.ArrayImpl._value = property(counted)
        self.jax = jax

    def snapshot(self):
        return (dict(self.compiles), dict(self.traces), self.hits, self.reads, self.read_bytes)

    def since(self, snap):
        c0, t0, h0, r0, b0 = snap
        diff = lambda now, then: {k: v - then.get(k, 0) for k, v in now.items() if v - then.get(k, 0)}
        return dict(compiles=diff(dict(self.compiles), c0), traces=diff(dict(self.traces), t0),
                    cache_hits=self.hits - h0, host_reads=self.reads - r0, host_read_bytes=self.read_bytes - b0)


@contextlib.contextmanager
def transfer_log(path):
    """Log every transfer (transfer guard 'log_explicit'); fd 2 goes to `path` meanwhile (the guard logs from C++)."""
    import jax

    sys.stderr.flush()
    saved, fd = os.dup(2), os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    jax.config.update("jax_transfer_guard", "log_explicit")
    try:
        yield lambda text: os.write(2, f"\n@@ {text}\n".encode())
    finally:
        jax.config.update("jax_transfer_guard", "allow")
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(fd)
        os.close(saved)


def count_transfers(path, avals=None):
    """{marker: {h2d, d2h, d2d}} from a transfer log whose steps are separated by `@@ marker` lines; `avals`
    (a Counter), if given, counts the host-to-device transfers by shape and dtype."""
    out, cur = collections.OrderedDict(), "before"
    for line in open(path, errors="replace"):
        if line.startswith("@@ "):
            cur = line[3:].strip()
            out.setdefault(cur, dict(h2d=0, d2h=0, d2d=0))
        elif "host-to-device transfer" in line:
            out.setdefault(cur, dict(h2d=0, d2h=0, d2d=0))["h2d"] += 1
            if avals is not None:
                what = line.split("aval=", 1)[1] if "aval=" in line else line.split("transfer:", 1)[-1]
                avals[what.split(", dst_sharding")[0].strip()[:100] or "(no shape logged: a jit argument)"] += 1
        elif "device-to-host transfer" in line:
            out.setdefault(cur, dict(h2d=0, d2h=0, d2d=0))["d2h"] += 1
        elif "device-to-device transfer" in line:
            out.setdefault(cur, dict(h2d=0, d2h=0, d2d=0))["d2d"] += 1
    return out


def device_time(trace_dir, steps):
    """(busy seconds per step, {program: ms per step}) from the profile: device planes if any, else XLA's CPU threads."""
    from jax._src.lib import _profile_data

    paths = sorted(glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True))
    if not paths:
        return None, {}, "no trace"
    spans, by_module, source = [], collections.Counter(), None
    planes = list(_profile_data.ProfileData.from_file(paths[-1]).planes)
    device = [p for p in planes if p.name.startswith("/device:") and "CPU" not in p.name]
    for plane in device:
        lines = {l.name: l for l in plane.lines}
        line = lines.get("XLA Modules") or lines.get("XLA Ops")
        if line is None:
            continue
        source = f"{plane.name} / {line.name}"
        for ev in line.events:
            spans.append((ev.start_ns, ev.start_ns + ev.duration_ns))
            by_module[ev.name.split("(")[0]] += ev.duration_ns
    if not device:
        source = "/host:CPU XLA threads"
        for plane in planes:
            if plane.name != "/host:CPU":
                continue
            for line in plane.lines:
                if not line.name.startswith("tf_XLA"):
                    continue
                for ev in line.events:
                    if ev.name.startswith(("ThreadpoolListener", "end:")) or "wait for completion" in ev.name:
                        continue
                    spans.append((ev.start_ns, ev.start_ns + ev.duration_ns))
                    by_module[dict(ev.stats).get("hlo_module", "(no program named)")] += ev.duration_ns
    if not spans:
        return None, {}, f"no XLA events found ({source or 'no device plane'})"
    busy, end = 0, None
    for a, b in sorted(spans):  # the union of the spans: time the device (or XLA's threads) did something
        if end is None or a > end:
            busy += b - a
            end = b
        elif b > end:
            busy += b - end
            end = b
    return busy / 1e9 / steps, {k: round(v / 1e6 / steps, 3) for k, v in by_module.most_common(12)}, source


def timed(obj, name, bucket):
    """Wrap obj.name (on the instance) so the seconds it takes add to bucket[name]."""
    fn = getattr(obj, name)

    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            bucket[name] += time.perf_counter() - t

    setattr(obj, name, wrapper)


KEEP_LIMIT = 16 * 2**20  # a device call returns files of at most 16 MiB, at most two folders below $OUT


def keep_flat(trace_dir, dest, label):
    """Gzip the profile's xplane (and copy its perfetto trace) to dest/<label>.* (flat: the profiler nests 4 deep)."""
    import gzip
    import shutil

    kept = []
    os.makedirs(dest, exist_ok=True)
    for path in glob.glob(os.path.join(trace_dir, "**", "*"), recursive=True):
        if path.endswith(".xplane.pb"):
            out = os.path.join(dest, f"{label}.xplane.pb.gz")
            with open(path, "rb") as src, gzip.open(out, "wb", compresslevel=6) as dst:
                shutil.copyfileobj(src, dst)
        elif path.endswith(".trace.json.gz"):
            out = os.path.join(dest, f"{label}.perfetto.trace.json.gz")
            shutil.copy(path, out)
        else:
            continue
        if os.path.getsize(out) > KEEP_LIMIT:  # would not come back from a device call: say so instead
            kept.append(f"{os.path.basename(out)} dropped ({os.path.getsize(out)} bytes)")
            os.remove(out)
        else:
            kept.append(out)
    return kept


def traced(args, label, run, steps):
    """Run `run()` under jax.profiler; (busy s per step, by program, source, files kept in --trace-dir)."""
    import jax

    with tempfile.TemporaryDirectory(prefix=f"trace_{label}_") as d:
        jax.profiler.start_trace(d, create_perfetto_trace=bool(args.perfetto))
        run()
        jax.profiler.stop_trace()
        busy, modules, source = device_time(d, steps)
        kept = keep_flat(d, args.trace_dir, label) if args.trace_dir else []
    return busy, modules, source, kept


def trace_sft(args, probe, tmp):
    import jax
    import numpy as np
    import optax
    from flax import nnx

    from tunix_lit.sft.trainer import PeftTrainer, TrainingConfig

    model = build_model(args)
    if args.lora_rank:
        model, _ = add_lora(model, args, "lora")
    B, T = args.sft_batch, args.seq_len
    n = 2 + 2 * args.steps + args.trace_steps
    rng = np.random.default_rng(args.seed + 1)
    ids = np.concatenate([np.ones((n * B, 1)), rng.integers(3, args.vocab_size, (n * B, T - 1))], 1)
    ids = ids.astype(np.int32).reshape(n, B, T)
    batches = iter([dict(tokens=ids[i], loss_mask=np.ones((B, T), np.int32)) for i in range(n)])
    trainer = PeftTrainer(model, optax.adamw(1e-4), TrainingConfig(max_steps=10**9, log_every_n_steps=10**6,
                                                                   progress_bar=False, resume=False))
    trainable = lambda: nnx.state(trainer.model, trainer.wrt)
    parts = collections.Counter()
    for name in ("_prepare", "apply_update", "_flush", "sync_model"):
        timed(trainer, name, parts)

    def sync_step():
        t = time.perf_counter()
        trainer.train([next(batches)])
        t1 = time.perf_counter()
        jax.block_until_ready(trainable())
        parts["block"] += time.perf_counter() - t1
        return time.perf_counter() - t

    warm = [sync_step() for _ in range(2)]
    rows, log = [], os.path.join(tmp, "sft_transfers.log")
    with transfer_log(log) as mark:
        for i in range(args.steps):
            mark(f"step {i}")
            parts.clear()
            snap = probe.snapshot()
            wall = sync_step()
            rows.append(dict(wall_s=wall, host_s=dict(parts), **probe.since(snap)))
        mark("end")
    avals = collections.Counter()
    transfers = count_transfers(log, avals)
    for i, r in enumerate(rows):
        r.update(transfers.get(f"step {i}", {}))
    snap = probe.snapshot()
    t = time.perf_counter()
    trainer.train([next(batches) for _ in range(args.steps)])
    jax.block_until_ready(trainable())
    pipelined = (time.perf_counter() - t) / args.steps
    pipe_counts = probe.since(snap)
    busy, modules, source, d = traced(args, "sft", lambda: [sync_step() for _ in range(args.trace_steps)],
                                      args.trace_steps)
    sync = MED([r["wall_s"] for r in rows])
    return dict(mode="sft", batch=B, seq_len=T, lora_rank=args.lora_rank, warmup_s=[round(x, 4) for x in warm],
                sync_step_s=sync, pipelined_s_per_step=round(pipelined, 5),
                device_busy_s_per_step=None if busy is None else round(busy, 5), device_source=source,
                fixed_host_s_per_call=None if busy is None else round(sync - busy, 5),
                sync_minus_pipelined_s=round(sync - pipelined, 5),
                host_s_median={k: MED([r["host_s"].get(k, 0.0) for r in rows]) for k in
                               ("_prepare", "apply_update", "_flush", "sync_model", "block")},
                per_step=_per_step(rows), h2d_by_aval_total=dict(avals.most_common(10)), pipelined_counts_total=pipe_counts, device_ms_per_step_by_program=modules,
                trace_files=d, train_step_jit_cache_size=trainer._train_step._cache_size())


def _per_step(rows):
    """Medians of the per-step counters, plus the compile names seen in any measured step."""
    keys = ("host_reads", "host_read_bytes", "h2d", "d2h", "d2d", "cache_hits")
    out = {k: MED([r.get(k, 0) for r in rows]) for k in keys}
    out["compiles_per_step"] = [sum(r["compiles"].values()) for r in rows]
    out["traces_per_step"] = [sum(r["traces"].values()) for r in rows]
    out["compiled"] = sorted({k for r in rows for k in r["compiles"]})
    out["traced"] = sorted({k for r in rows for k in r["traces"]})
    out["wall_s"] = [round(r["wall_s"], 5) for r in rows]
    return out


def trace_grpo(args, probe, tmp):
    import jax
    import numpy as np
    import optax

    from grpo_step import BOS_ID, FIRST_FREE_ID, IntTokenizer, even_fraction_reward
    from tunix_lit.rl.cluster import RLCluster, RolloutConfig
    from tunix_lit.rl.grpo import GRPOConfig, GRPOLearner
    from tunix_lit.rl.learner import RLTrainingConfig
    from tunix_lit.sft import lora
    from sft_step import LORA_TARGETS

    actor = build_model(args)
    emb = actor.embedder.embedding  # as grpo_step.py: a diverse random policy, same work per step
    emb.set_value(emb.get_value() * (0.02 / float(emb.get_value().std())))
    if args.lora_rank:
        actor = lora.apply_lora(actor, rank=args.lora_rank, alpha=float(2 * args.lora_rank), targets=LORA_TARGETS)
    cluster = RLCluster(actor, IntTokenizer(args.vocab_size), reference="actor" if args.beta else None,
                        rollout_config=RolloutConfig(max_new_tokens=args.gen_len, max_prompt_length=args.prompt_len,
                                                     temperature=0.9, stop_tokens=(-1,), seed=args.seed))
    cfg = RLTrainingConfig(batch_size=args.batch, max_steps=1, progress_bar=False, seed=args.seed)
    learner = GRPOLearner(cluster, optax.adamw(1e-5), cfg,
                          GRPOConfig(num_generations=args.num_generations, beta=args.beta, epsilon=0.2),
                          reward_fns=[even_fraction_reward])
    total = 1 + args.steps + args.trace_steps
    rng = np.random.default_rng(args.seed + 1)
    ids = rng.integers(FIRST_FREE_ID, args.vocab_size, size=(args.batch * (total + 1), args.prompt_len - 1))
    data = [{"prompt": [BOS_ID] + row.tolist()} for row in ids]
    parts = collections.Counter()
    for obj, name in ((cluster, "generate"), (cluster, "reference_logps"), (learner.trainer, "update"),
                      (learner.trainer, "pop_metrics"), (learner.trainer, "sync_model"), (learner, "sync_rollout")):
        timed(obj, name, parts)
    ends, write = [], learner.metrics.write

    def timed_write(step, metrics, mode="train"):
        if mode == "train":
            ends.append(time.perf_counter())
        write(step, metrics, mode)

    learner.metrics.write = timed_write

    def run(n):
        learner.config = dataclasses.replace(learner.config, max_steps=learner.step + n)
        t0 = time.perf_counter()
        learner.train(data)
        return [b - a for a, b in zip([t0] + ends[-n:-1], ends[-n:])]

    t = time.perf_counter()
    run(1)
    warm = time.perf_counter() - t
    parts.clear()
    snap = probe.snapshot()
    log = os.path.join(tmp, "grpo_transfers.log")
    with transfer_log(log) as mark:
        mark("steps")
        steps = run(args.steps)
        mark("end")
    counts = probe.since(snap)
    avals = collections.Counter()
    transfers = count_transfers(log, avals).get("steps", {})
    host = {k: round(v / args.steps, 5) for k, v in parts.items()}
    busy, modules, source, d = traced(args, "grpo", lambda: run(args.trace_steps), args.trace_steps)
    hist = lambda key: learner.metrics.history(key)[1][1:1 + args.steps]
    step_s = MED(steps)
    return dict(mode="grpo", batch_prompts=args.batch, num_generations=args.num_generations, prompt_len=args.prompt_len,
                gen_len=args.gen_len, lora_rank=args.lora_rank, beta=args.beta, warmup_step_s=round(warm, 3),
                step_s=[round(s, 5) for s in steps], median_step_s=step_s,
                phases_median_s=dict(generate=MED(hist("time/generate_s")), ref_logps=MED(hist("time/logps_s")),
                                     update_and_sync=MED(hist("time/update_s"))),
                host_s_per_step=host, device_busy_s_per_step=None if busy is None else round(busy, 5),
                device_source=source, host_not_overlapped_s=None if busy is None else round(step_s - busy, 5),
                per_step=dict(host_reads=counts["host_reads"] / args.steps,
                              host_read_bytes=counts["host_read_bytes"] / args.steps,
                              h2d=transfers.get("h2d", 0) / args.steps, d2h=transfers.get("d2h", 0) / args.steps,
                              compiles_total=counts["compiles"], traces_total=counts["traces"],
                              cache_hits_total=counts["cache_hits"]),
                h2d_by_aval_total=dict(avals.most_common(12)), measured_steps=args.steps,
                device_ms_per_step_by_program=modules, trace_files=d,
                train_step_jit_cache_size=learner.trainer._train_step._cache_size())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["sft", "grpo", "both"])
    add_model_args(p)
    p.add_argument("--batch", type=int, default=2, help="GRPO prompts per step")
    p.add_argument("--num-generations", type=int, default=4)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--gen-len", type=int, default=32)
    p.add_argument("--beta", type=float, default=0.04)
    p.add_argument("--sft-batch", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--lora-rank", type=int, default=8)
    p.add_argument("--lora-alpha", type=float, default=0.0)
    p.add_argument("--steps", type=int, default=3, help="measured steps (after the warm-up)")
    p.add_argument("--trace-steps", type=int, default=2, help="steps under the profiler")
    p.add_argument("--trace-dir", default="", help="keep the traces here (default: a temporary folder)")
    p.add_argument("--perfetto", type=int, default=1, help="also write a perfetto trace (json.gz) beside the xplane")
    p.add_argument("--keep-logs", default="", help="keep the transfer-guard logs in this folder")
    args, unknown = p.parse_known_args(argv)
    if unknown:
        print(f"warning: ignoring {unknown}", file=sys.stderr)
    from tunix_lit import runtime

    runtime.tune_host_allocator()
    probe = Probe()
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.keep_logs:
            os.makedirs(args.keep_logs, exist_ok=True)
        for mode in (["grpo", "sft"] if args.mode == "both" else [args.mode]):
            out.append((trace_grpo if mode == "grpo" else trace_sft)(args, probe, args.keep_logs or tmp))
    model = dict(arch=args.arch, num_layers=args.num_layers, embed_dim=args.embed_dim, vocab_size=args.vocab_size,
                 dtype=args.dtype)
    print(json.dumps(dict(bench="tunix_lit_train_trace", model=model, results=out, env=env_info(),
                          machine=machine_info())), flush=True)


if __name__ == "__main__":
    main()
