"""Importing tunix_lit changes nothing process-wide: no malloc setting, no JAX config value, no environment variable.

Every module of the package is imported in a fresh interpreter. Two ways of seeing a malloc
setting change, because glibc has no call that reads its settings back:

- any lookup of `mallopt` through ctypes is recorded (a pure-Python package can only reach the
  C allocator that way; an `LD_PRELOAD` shim would not see it, since ctypes looks the symbol up in
  libc's own handle);
- the settings' effects are measured: a 64 MiB `malloc` is served by its own `mmap` unless
  `M_MMAP_MAX` is 0, and a new thread gets its own arena unless `M_ARENA_MAX` is 1.

The same probe run after an explicit `tune_host_allocator()` sees both changes, so it can fail.
"""

import json
import os
import platform
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent(r"""
    import ctypes, ctypes.util, importlib, json, os, pkgutil, sys, tempfile, threading

    seen = []
    _getattr = ctypes.CDLL.__getattr__
    def spy(self, name):
        if "mallopt" in name:
            seen.append(name)
        return _getattr(self, name)
    ctypes.CDLL.__getattr__ = spy
    _getitem = ctypes.CDLL.__getitem__
    ctypes.CDLL.__getitem__ = lambda self, name: (seen.append(name) if "mallopt" in str(name) else None) or _getitem(self, name)

    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
    mallinfo2 = _getattr(libc, "mallinfo2"); mallinfo2.restype = MallInfo2
    malloc = _getattr(libc, "malloc"); malloc.restype = ctypes.c_void_p; malloc.argtypes = [ctypes.c_size_t]
    free = _getattr(libc, "free"); free.argtypes = [ctypes.c_void_p]
    fopen = _getattr(libc, "fopen"); fopen.restype = ctypes.c_void_p
    fclose = _getattr(libc, "fclose"); fclose.argtypes = [ctypes.c_void_p]
    malloc_info = _getattr(libc, "malloc_info"); malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]

    def big_block_is_mmapped():
        before = mallinfo2().hblkhd
        p = malloc(64 << 20)
        grew = mallinfo2().hblkhd - before
        free(p)
        return grew >= (64 << 20)

    def arenas():
        path = tempfile.mktemp()
        f = fopen(path.encode(), b"w"); malloc_info(0, f); fclose(f)
        text = open(path).read(); os.remove(path)
        return text.count("<heap nr=")

    def new_thread_gets_an_arena():
        before = arenas()
        def work():
            p = malloc(4096); free(p)
        t = threading.Thread(target=work); t.start(); t.join()
        return arenas() > before

    import jax
    config_before = dict(jax.config.values)
    env_before = dict(os.environ)
    if sys.argv[1] == "tune":
        import tunix_lit.runtime
        tunix_lit.runtime.tune_host_allocator()
    failed = []
    import tunix_lit
    for mod in pkgutil.walk_packages(tunix_lit.__path__, "tunix_lit."):
        try:
            importlib.import_module(mod.name)
        except ImportError as e:  # an optional extra (vLLM, SGLang) that is not installed
            failed.append(f"{mod.name}: {e}")
    from jax._src import xla_bridge
    config_after = dict(jax.config.values)
    print(json.dumps(dict(
        modules=sorted(m for m in sys.modules if m.startswith("tunix_lit")),
        import_errors=failed,
        mallopt_lookups=seen,
        big_block_is_mmapped=big_block_is_mmapped(),
        new_thread_gets_an_arena=new_thread_gets_an_arena(),
        config_changed={k: [repr(config_before[k]), repr(v)] for k, v in config_after.items()
                        if k in config_before and config_before[k] != v},
        env_changed=sorted(k for k in set(env_before) | set(os.environ) if env_before.get(k) != os.environ.get(k)),
        backends_started=sorted(getattr(xla_bridge, "_backends", {}) or {}),
    )))
""")


def _probe(mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("TUNIX_LIT_HOST_ALLOCATOR", "JAX_PLATFORMS")}
    out = subprocess.run([sys.executable, "-c", PROBE, mode], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(platform.system() != "Linux", reason="the allocator probes read glibc's malloc statistics")
def test_importing_every_module_changes_nothing_process_wide():
    plain, tuned = _probe("import"), _probe("tune")
    # the probe sees a change when there is one: the explicit call flips both effects and is recorded
    assert tuned["mallopt_lookups"] and not tuned["big_block_is_mmapped"] and not tuned["new_thread_gets_an_arena"], tuned
    # importing alone: every module imported, and nothing about the process changed
    assert len(plain["modules"]) > 20 and "tunix_lit.runtime" in plain["modules"], plain["modules"]
    assert plain["mallopt_lookups"] == [], plain["mallopt_lookups"]
    assert plain["big_block_is_mmapped"] and plain["new_thread_gets_an_arena"], plain
    assert plain["config_changed"] == {}, plain["config_changed"]
    assert plain["env_changed"] == [], plain["env_changed"]
    assert plain["backends_started"] == [], f"importing tunix_lit started a JAX backend: {plain['backends_started']}"
    print(f"{len(plain['modules'])} modules imported; skipped for a missing optional extra: {plain['import_errors']}")
