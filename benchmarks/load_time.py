"""load_hf of one checkpoint directory, each load in a fresh process: seconds, and the jaxpr traces it makes.

    python benchmarks/load_time.py CHECKPOINT_DIR [--before REV] [--repeats N] [--what TEXT]

Runs `tunix_lit.models.loader.load_hf` of this working tree and, with `--before REV`, the loader file as it is
at git revision REV (imported from a temporary copy), alternating the two, `--repeats` times each, once without
a mesh and once on a mesh over every device. Every run is a new process, as a training run is: jit's caches do
not outlive a process, so each pays every trace again. A run counts the traces with jax.monitoring's
"/jax/core/compile/jaxpr_trace_duration" events (one per Python trace), by function name, and times the whole
load_hf call until every array is ready (wall and process CPU seconds). A last process times the step that
changed alone: the abstract model and the shape every tensor must have in the file, the per-tensor way and the
one-trace way, alternating. Prints one JSON object.
"""
import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = "/jax/core/compile/jaxpr_trace_duration"


def one_load(checkpoint: str, loader_file: str, mesh: bool) -> dict:
    """Load `checkpoint` with the loader module at `loader_file` ('' for the installed one) in this process."""
    import jax

    traces = []  # (function name, seconds), one per Python trace

    def on_duration(event, seconds, **kwargs):
        if event == TRACE:
            traces.append((kwargs.get("fun_name", "?"), seconds))

    if loader_file:  # the old file imported as a module of the package, so its relative imports resolve
        spec = importlib.util.spec_from_file_location("tunix_lit.models._loader_before", loader_file)
        loader = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = loader
        spec.loader.exec_module(loader)
    else:
        from tunix_lit.models import loader
    from flax import nnx

    from tunix_lit.models.transformer import make_mesh

    where = make_mesh(1, jax.device_count()) if mesh else None
    jax.monitoring.register_event_duration_secs_listener(on_duration)
    t0, c0 = time.perf_counter(), time.process_time()
    model = loader.load_hf(checkpoint, mesh=where)
    jax.block_until_ready(nnx.state(model))
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    jax.monitoring.unregister_event_duration_listener(on_duration)
    params = jax.tree.leaves(nnx.state(model, nnx.Param))
    names = {}
    for name, _ in traces:
        names[name] = names.get(name, 0) + 1
    longest = max((s for _, s in traces), default=0.0)  # the whole model's trace; the rest are per tensor (before)
    return {"seconds": round(seconds, 3), "cpu_seconds": round(cpu_seconds, 3), "traces": len(traces),
            "trace_seconds": round(sum(s for _, s in traces), 3), "longest_trace_seconds": round(longest, 3),
            "other_traces_seconds": round(sum(s for _, s in traces) - longest, 4), "traces_by_function": names,
            "tensors": len(params), "parameters": sum(int(x.size) for x in params),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def shapes_step(checkpoint: str, repeats: int) -> dict:
    """In one process, alternating: the abstract model plus every stored shape as the loader before this change
    found them (nnx.eval_shape of the model, then one jax.eval_shape per tensor) and as `_abstract_model` does."""
    import jax
    from flax import nnx

    from tunix_lit.models import loader
    from tunix_lit.models.transformer import Transformer

    cfg = loader.config_from_hf(json.loads((Path(checkpoint) / "config.json").read_text()))

    def per_tensor():
        graphdef, abstract = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))
        names = loader.key_map(cfg.family)
        expected = {}
        for p, var in nnx.to_flat_state(abstract):
            hf_key, transform = names.to_hf(loader._path_str(p))
            expected[hf_key] = jax.eval_shape(lambda w: transform.to_hf(w, cfg), var.get_value()).shape
        return expected

    def one_trace():
        return loader._abstract_model(cfg)[2]

    assert per_tensor() == one_trace()  # the same shapes (also warms imports and caches alike)
    times = {"per_tensor": [], "one_trace": []}
    for _ in range(repeats):
        for name, fn in (("per_tensor", per_tensor), ("one_trace", one_trace)):
            t0 = time.perf_counter()
            fn()
            times[name].append(round(time.perf_counter() - t0, 4))
    return {k: {"median": round(statistics.median(v), 4), "min": min(v), "runs": v} for k, v in times.items()}


def _summary(runs: list) -> dict:
    out = {"traces": sorted({r["traces"] for r in runs})}
    for key in ("seconds", "cpu_seconds", "trace_seconds", "longest_trace_seconds", "other_traces_seconds"):
        values = [r[key] for r in runs]
        out[key] = {"median": round(statistics.median(values), 4), "min": min(values)}
    return {**out, "runs": runs}


def _short(rev: str) -> str:
    return subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("checkpoint")
    p.add_argument("--before", default=None, help="a git revision whose tunix_lit/models/loader.py is 'before'")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--what", default="load_hf of a checkpoint directory in a fresh process, before and after")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: one load in this process
    p.add_argument("--mesh", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--shapes-step", type=int, default=None, help=argparse.SUPPRESS)  # internal
    a = p.parse_args(argv)
    if a.shapes_step is not None:
        print(json.dumps(shapes_step(a.checkpoint, a.shapes_step)), flush=True)
        return 0
    if a.one is not None:
        print(json.dumps(one_load(a.checkpoint, a.one, a.mesh)), flush=True)
        return 0

    sides = {"after": ""}
    tmp = None
    if a.before:
        tmp = tempfile.NamedTemporaryFile("w", suffix="_loader_before.py", delete=False)
        tmp.write(subprocess.run(["git", "show", f"{a.before}:tunix_lit/models/loader.py"], cwd=ROOT, check=True,
                                 capture_output=True, text=True).stdout)
        tmp.close()
        sides = {"before": tmp.name, "after": ""}
    runs = {(side, mesh): [] for side in sides for mesh in (False, True)}
    try:
        for _ in range(a.repeats):
            for mesh in (False, True):
                for side, file in sides.items():  # alternate, so drift in the machine's load hits both alike
                    cmd = [sys.executable, __file__, a.checkpoint, "--one", file] + ["--mesh"] * mesh
                    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT).stdout
                    runs[side, mesh].append(json.loads(out.strip().splitlines()[-1]))
    finally:
        if tmp is not None:
            os.unlink(tmp.name)
    import jax

    revision = _short("HEAD")
    shapes = subprocess.run([sys.executable, __file__, a.checkpoint, "--shapes-step", str(a.repeats)], check=True,
                            capture_output=True, text=True, cwd=ROOT).stdout
    record = {
        "what": a.what,
        "machine": {"cpu": _cpu_name(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "jax": jax.__version__, "executed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "note": "cores shared with other work (each run's load average is recorded): seconds are noisy; "
                            "the trace counts are not"},
        "command": "python benchmarks/load_time.py CHECKPOINT_DIR" + (" --before REV" if a.before else "")
                   + f" --repeats {a.repeats}",
        "revisions": {"before": _short(a.before), "after": f"working tree on {revision}"} if a.before else
                     {"after": f"working tree on {revision}"},
    }
    for side in sides:
        record[side] = {("mesh" if mesh else "one_device"): _summary(runs[side, mesh]) for mesh in (False, True)}
    record["shapes_step_in_one_process"] = {
        "what": "seconds for the abstract model and every stored shape alone, the per-tensor way (as before) and "
                "the one-trace way (after), alternating in one process",
        **json.loads(shapes.strip().splitlines()[-1])}
    print(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
