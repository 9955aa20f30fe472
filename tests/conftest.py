"""Test set-up: 8 fake CPU devices, set before anything imports jax (the first import wins)."""
import atexit
import os
import shutil
import tempfile

# Compiling is most of a test's time on the tiny model, and most of a compile is LLVM optimising machine code
# that then runs for microseconds: the default run asks XLA:CPU for unoptimised code generation (the HLO, which
# the tests' numerics and program checks are about, is optimised as always); TUNIX_LIT_TEST_XLA_OPT=1 keeps the
# optimised code a user gets (tests/rl on 2 cores: 186 s against 119 s).
_FLAGS = " --xla_force_host_platform_device_count=8"
if os.environ.get("TUNIX_LIT_TEST_XLA_OPT") != "1":
    _FLAGS += " --xla_backend_optimization_level=0"
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + _FLAGS).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Compiling, not running, is most of a test's time on the tiny model, and the notebooks and tests compile many
# identical programs: one JAX compilation cache for the whole run (both workers and every notebook and
# launched process inherit the variable), fresh each run and removed after it.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache = tempfile.mkdtemp(prefix="tunix_lit_tests_jax_cache_")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    atexit.register(shutil.rmtree, _cache, True)

# Real models (chapter 12b) are dequantised once into a cache: one for the whole run (tests, notebooks and launched
# processes inherit the variable), fresh each run and removed after it, so the user's ~/.cache is left alone.
if "TUNIX_LIT_CACHE" not in os.environ:
    os.environ["TUNIX_LIT_CACHE"] = _models = tempfile.mkdtemp(prefix="tunix_lit_tests_models_")
    atexit.register(shutil.rmtree, _models, True)

from tunix_lit import runtime  # noqa: E402

# The CLI, benchmarks and training notebooks tune the host allocator explicitly (importing the library never
# does); the tests do the same, before JAX starts its threads.
runtime.tune_host_allocator()

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long tests; run with `pytest -m slow` (the default run skips them)")


def _shares_a_fixture(item):
    """Does the test use a fixture built once for several tests (module, class or package scope, ours)?"""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info else ()
    return any(d.scope in ("class", "module", "package", "session") and d.baseid for ds in defs for d in ds)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Two workers (`-n 2 --dist loadgroup`, pytest.ini) and no fixture built twice: tests that share a fixture
    stay together on one worker, one group per file; every other test (each notebook too) goes wherever a
    worker is free. Groups and notebooks, the long units, are handed out first so both workers finish together."""
    for item in items:
        if _shares_a_fixture(item):
            item.add_marker(pytest.mark.xdist_group(str(item.path.relative_to(config.rootpath))))
    items.sort(key=lambda it: 0 if any(it.iter_markers("xdist_group")) else 1 if it.path.name == "test_notebooks.py" else 2)
