"""The machine a benchmark figure was measured on, as one JSON-ready dict; and `--max-isa` for XLA:CPU.

Every script in `benchmarks/` puts `machine_info()` under the key `machine` of its JSON line, so a figure
always names the CPU it came from: model, the instruction-set extensions XLA:CPU can use (AVX2 and FMA,
AVX-512 and its bf16 / VNNI / fp16 parts, AMX), cores, cache sizes, memory, whether it is a virtual
machine, the jax / jaxlib versions, the backend and device kind (the GPU or TPU name when there is one),
the load average, and any `XLA_FLAGS`.

`--max-isa AVX2` (flag of every script, via `add_max_isa_arg` + `apply_max_isa`) sets XLA's
`--xla_cpu_max_isa`, so XLA:CPU generates no instruction newer than that set: on an AVX-512 machine it
stands in for an AVX2-only one. It limits XLA's own code generation; libraries linked into jaxlib that
pick their kernels at run time (Eigen, YNNPACK/XNNPACK matmuls) may still use what the CPU has.

This file imports nothing from `tunix_lit` (upstream's side, `upstream_bench.py`, runs it in a virtual
environment without our package) and JAX only inside `machine_info`, after the script has started it.

    python benchmarks/machine.py          # this machine, one JSON line
"""

import json
import os
import platform
import re
import subprocess
import sys

# Values XLA:CPU accepts for --xla_cpu_max_isa (from the flag's help text in jaxlib 0.10.2).
MAX_ISA_CHOICES = ("SSE4_2", "AVX", "AVX2", "AVX512", "AVX512_VNNI", "AVX512_BF16", "AMX", "AMX_FP16")
# /proc/cpuinfo flags that change what XLA:CPU (LLVM) or its matmul libraries can emit.
X86_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512dq", "avx512cd", "avx512bw",
             "avx512vl", "avx512ifma", "avx512vbmi", "avx512_vbmi2", "avx512_vnni", "avx512_bf16", "avx512_fp16",
             "avx512_bitalg", "avx512_vpopcntdq", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16")
ARM_FLAGS = ("asimd", "asimdhp", "asimddp", "sve", "sve2", "bf16", "i8mm", "sme")


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _cpuinfo() -> dict:
    """The first processor block of /proc/cpuinfo as {key: value} (empty off Linux)."""
    block = _read("/proc/cpuinfo").split("\n\n")[0]
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in block.splitlines()) if k.strip()}


def _size_kib(text: str):
    """'32K' / '1024K' / '32 MiB' -> KiB as an int (None when unreadable)."""
    m = re.match(r"\s*([\d.]+)\s*([KMG]?)", text or "")
    if not m:
        return None
    return int(float(m.group(1)) * {"": 1 / 1024, "K": 1, "M": 1024, "G": 1024**2}[m.group(2)])


def cache_sizes() -> dict:
    """Per-core L1d / L1i / L2 and shared L3 in KiB, from /sys (lscpu's totals as a fallback)."""
    out = {}
    base = "/sys/devices/system/cpu/cpu0/cache"
    for index in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        d = os.path.join(base, index)
        level, kind = _read(f"{d}/level").strip(), _read(f"{d}/type").strip()
        if not level:
            continue
        name = f"L{level}" + {"Data": "d", "Instruction": "i"}.get(kind, "")
        out[f"{name}_kib"] = _size_kib(_read(f"{d}/size").strip())
    if out:
        return out
    try:  # no /sys cache entries (some containers): lscpu reports totals over all cores
        text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    for line in text.splitlines():
        m = re.match(r"(L1d|L1i|L2|L3) cache:\s*(.+)", line)
        if m:
            out[f"{m.group(1)}_kib_total"] = _size_kib(m.group(2))
    return out


def cpu_info() -> dict:
    """CPU model, the ISA extensions that matter to XLA:CPU (name -> present), cores, caches, memory."""
    info = _cpuinfo()
    flags = set((info.get("flags") or info.get("Features") or "").split())
    arm = platform.machine() in ("aarch64", "arm64")
    model = info.get("model name") or info.get("Model name") or platform.processor() or platform.machine()
    if sys.platform == "darwin":
        try:
            model = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True,
                                   timeout=10).stdout.strip() or model
        except (OSError, subprocess.SubprocessError):
            pass
    mem = re.search(r"MemTotal:\s*(\d+) kB", _read("/proc/meminfo"))
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return dict(
        model=model, arch=platform.machine(),
        vendor=info.get("vendor_id"), family=info.get("cpu family"), model_id=info.get("model"),
        isa={f: f in flags for f in (ARM_FLAGS if arm else X86_FLAGS)} if flags else None,
        virtualised="hypervisor" in flags, cores=os.cpu_count(), cores_usable=usable,
        caches=cache_sizes(), memory_gib=round(int(mem.group(1)) / 2**20, 1) if mem else None)


def jax_info() -> dict:
    """jax / jaxlib versions, backend, device count and kind; None for each when JAX is not installed."""
    try:
        import jax
        import jaxlib
    except ImportError:
        return dict(jax=None, jaxlib=None, backend=None, devices=None, device_kind=None)
    devices = jax.devices()
    return dict(jax=jax.__version__, jaxlib=jaxlib.__version__, backend=jax.default_backend(),
                devices=len(devices), device_kind=devices[0].device_kind if devices else None,
                platform_version=getattr(devices[0].client, "platform_version", None) if devices else None)


def device_memory() -> dict:
    """The first device's memory high-water mark and limit in MiB (None where the backend keeps no count, e.g. CPU)."""
    try:
        import jax
        stats = jax.devices()[0].memory_stats() or {}
    except Exception:  # noqa: BLE001  (no JAX, or a backend without the call)
        stats = {}
    mib = lambda k: round(stats[k] / 2**20, 1) if k in stats else None
    return dict(peak_mib=mib("peak_bytes_in_use"), in_use_mib=mib("bytes_in_use"), limit_mib=mib("bytes_limit"))


def machine_info() -> dict:
    """Everything above in one dict, plus the load average and XLA_FLAGS (call after JAX has started)."""
    flags = os.environ.get("XLA_FLAGS", "")
    isa = re.search(r"--xla_cpu_max_isa=(\S+)", flags)
    load = _read("/proc/loadavg").split()[:3]
    return dict(cpu=cpu_info(), **jax_info(), python=platform.python_version(), os=platform.platform(),
                xla_flags=flags, xla_cpu_max_isa=isa.group(1) if isa else None,
                loadavg=[float(x) for x in load] if load else None)


def add_max_isa_arg(parser) -> None:
    """Add `--max-isa` (XLA:CPU generates nothing newer than this instruction set) to an argparse parser."""
    parser.add_argument("--max-isa", type=str.upper, choices=MAX_ISA_CHOICES, default=None,
                        help="XLA:CPU codegen limit (--xla_cpu_max_isa), e.g. AVX2 on an AVX-512 machine to stand "
                             "in for an AVX2-only one; default: all the CPU has")


def apply_max_isa(value) -> None:
    """Put --xla_cpu_max_isa=`value` in XLA_FLAGS (replacing one already there); call before JAX makes its backend."""
    if value is None:
        return
    value = str(value).upper()
    if value not in MAX_ISA_CHOICES:
        raise ValueError(f"unknown max ISA {value!r}; choose one of: {', '.join(MAX_ISA_CHOICES)}")
    if "jax" in sys.modules:
        from jax._src import xla_bridge  # private, read-only check: a backend made already ignores the flag

        if getattr(xla_bridge, "_backends", None):
            raise RuntimeError("--max-isa must be applied before JAX creates its backend (it read XLA_FLAGS already)")
    flags = re.sub(r"--xla_cpu_max_isa=\S+", "", os.environ.get("XLA_FLAGS", "")).split()
    os.environ["XLA_FLAGS"] = " ".join(flags + [f"--xla_cpu_max_isa={value}"])


class CompileLog:
    """Every compile JAX reports (tracing, lowering, backend compile or cache fetch), its seconds and the call
    site in `roots` that asked for it: where a first step's time goes."""

    KINDS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
             "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
             "/jax/core/compile/backend_compile_duration": "compile",
             "/jax/compilation_cache/cache_retrieval_time_sec": "cache_fetch"}

    def __init__(self, roots=("tunix_lit", "benchmarks")):
        self.roots, self.events, self.t0 = tuple(roots), [], None

    def start(self) -> "CompileLog":
        """Listen from now on (JAX's listeners cannot be removed: stop() only stops the recording)."""
        import time

        import jax

        self.t0 = time.perf_counter()
        jax.monitoring.register_event_duration_secs_listener(self._on)
        return self

    def stop(self) -> None:
        """Record nothing more."""
        self.t0 = None

    def _on(self, event, duration, **_):
        import time
        import traceback

        kind = self.KINDS.get(event)
        if kind is None or self.t0 is None:
            return
        site = "?"
        for frame in reversed(traceback.extract_stack()[:-1]):  # the innermost frame of ours
            root = next((r for r in self.roots if f"/{r}/" in frame.filename), None)
            if root is not None:
                site = f"{root}/{frame.filename.rsplit(f'/{root}/', 1)[1]}:{frame.lineno}"
                break
        self.events.append((time.perf_counter() - self.t0, kind, float(duration), site))

    def summary(self, until=None, small_s=0.5, top=8) -> dict:
        """Count and seconds per kind up to `until` (seconds after start), the compiles under `small_s`, and the
        `top` call sites by compile seconds."""
        ev = [e for e in self.events if until is None or e[0] <= until]
        out = {}
        for kind in ("trace", "lower", "compile", "cache_fetch"):
            xs = [d for _, k, d, _ in ev if k == kind]
            out[kind] = dict(n=len(xs), s=round(sum(xs), 3))
        small = [d for _, k, d, _ in ev if k == "compile" and d < small_s]
        out["small_compiles"] = dict(n=len(small), s=round(sum(small), 3), under_s=small_s)
        sites = {}
        for _, k, d, site in ev:
            if k == "compile":
                n, s = sites.get(site, (0, 0.0))
                sites[site] = (n + 1, s + d)
        ranked = sorted(sites.items(), key=lambda kv: -kv[1][1])[:top]
        out["top_sites"] = [dict(site=site, n=n, s=round(s, 3)) for site, (n, s) in ranked]
        return out


if __name__ == "__main__":
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_max_isa_arg(p)
    apply_max_isa(p.parse_args().max_isa)
    print(json.dumps(machine_info()))
