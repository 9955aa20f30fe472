"""Where a benchmark's compiled time goes: run a benchmark under jax.profiler and rank XLA:CPU thunks.

  python benchmarks/profile_thunks.py sampler --batch 32      # any flags of the benchmark follow its name
  python benchmarks/profile_thunks.py sft --steps 6
  python benchmarks/profile_thunks.py grpo --steps 4
  python benchmarks/profile_thunks.py sampler --batch 8 --upstream   # upstream Tunix's side, in its venv
  python benchmarks/profile_thunks.py grpo --steps 6 --by-module     # per compiled program: decode, reference, update

`sampler`, `sft` and `grpo` profile benchmarks/sampler.py, sft_step.py and grpo_step.py; with `--upstream`
the same work through benchmarks/upstream_bench.py, in the venv compare_upstream.py builds (re-run there).

Prints one JSON line: total thunk time per category (YNNPACK matmul fusions, Eigen dots, everything else) and
the `--top` most expensive thunks, each with its total milliseconds and how many times it ran. Times are summed
over the whole run (compile excluded: only events inside a ThunkExecutor span count), so divide by the number of calls or steps.
Profiling adds per-thunk overhead; use it to rank, and the benchmark itself to time.
"""

import argparse
import collections
import contextlib
import glob
import io
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tunix_lit from this checkout
from machine import add_max_isa_arg, apply_max_isa, machine_info  # noqa: E402


def thunk_times(trace_dir: str, by_module: bool = False):
    """(per-name total ns, per-name count) of the XLA thunks in the profile under trace_dir; names are
    "program/thunk" with by_module (thunk names repeat across compiled programs, e.g. decode and update)."""
    import bisect

    from jax._src.lib import _profile_data  # jaxlib's reader for the xplane protobuf the profiler writes

    path = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)[0]
    total, count = collections.Counter(), collections.Counter()
    for plane in _profile_data.ProfileData.from_file(path).planes:
        for line in plane.lines:
            events = list(line.events)
            # a thunk runs inside a ThunkExecutor::Execute span of its thread; compiler passes do not
            spans = sorted((e.start_ns, e.end_ns) for e in events if e.name == "ThunkExecutor::Execute")
            starts = [a for a, _ in spans]
            for ev in events:
                name = ev.name
                if name.startswith(("ThunkExecutor", "end:", "Threadpool")) or "Await" in name:
                    continue
                if re.match(r"(while|conditional|call)(\.\d+)?$", name):  # containers: their time is their body's
                    continue
                i = bisect.bisect_right(starts, ev.start_ns) - 1
                if i < 0 or ev.start_ns > spans[i][1]:
                    continue
                if by_module:
                    name = f"{dict(ev.stats).get('hlo_module', '?')}/{name}"
                total[name] += ev.duration_ns
                count[name] += 1
    return total, count


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bench", choices=["sampler", "sft", "grpo"])
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--upstream", action="store_true", help="profile upstream's side (upstream_bench.py) in its venv")
    p.add_argument("--by-module", action="store_true",
                   help="name thunks program/thunk and add each compiled program's total (ms_by_module)")
    add_max_isa_arg(p)
    args, rest = p.parse_known_args(argv)
    if args.upstream and os.environ.get("TUNIX_LIT_PROFILE_SIDE") != "upstream":
        from compare_upstream import default_venv, upstream_python

        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["TUNIX_LIT_PROFILE_SIDE"] = "upstream"
        cmd = [str(upstream_python(default_venv())), os.path.abspath(__file__), *(argv if argv is not None else sys.argv[1:])]
        raise SystemExit(subprocess.run(cmd, env=env).returncode)
    apply_max_isa(args.max_isa)  # here, not in the benchmark: the profiler starts JAX first
    if args.upstream:
        bench, bench_argv = __import__("upstream_bench"), [args.bench, *rest]
    else:
        from tunix_lit import runtime

        runtime.tune_host_allocator()  # before the profiler starts JAX's threads (chapter 14)
        bench = __import__({"sampler": "sampler", "sft": "sft_step", "grpo": "grpo_step"}[args.bench])
        bench_argv = rest
    import jax

    with tempfile.TemporaryDirectory() as d:
        out = io.StringIO()
        jax.profiler.start_trace(d)
        with contextlib.redirect_stdout(out):
            bench.main(bench_argv)
        jax.profiler.stop_trace()
        total, count = thunk_times(d, args.by_module)
    thunk = lambda n: n.rsplit("/", 1)[-1]
    kind = lambda n: "ynn_matmul" if n.startswith("ynn") else ("eigen_dot" if re.match(r"dot(_general)?(\.\d+)?$", n) else "other")
    by_kind, by_module = collections.Counter(), collections.Counter()
    for name, ns in total.items():
        by_kind[kind(thunk(name))] += ns
        if args.by_module:
            by_module[name.rsplit("/", 1)[0]] += ns
    rec = dict(bench=f"profile_{args.bench}", side="upstream" if args.upstream else "ours", flags=rest,
               ms_by_kind={k: round(v / 1e6, 1) for k, v in by_kind.items()},
               **({"ms_by_module": {k: round(v / 1e6, 1) for k, v in by_module.most_common()}} if args.by_module else {}),
               top=[dict(name=n, ms=round(ns / 1e6, 2), runs=count[n]) for n, ns in total.most_common(args.top)],
               bench_line=json.loads(out.getvalue().strip().splitlines()[-1]), machine=machine_info())
    print(json.dumps(rec))


if __name__ == "__main__":
    main()
