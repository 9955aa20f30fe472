"""Test set-up: 8 fake CPU devices, set before anything imports jax (the first import wins)."""
import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tunix_lit import runtime  # noqa: E402

# The CLI, benchmarks and training notebooks tune the host allocator explicitly (importing the library never
# does); the tests do the same, before JAX starts its threads.
runtime.tune_host_allocator()

import jax  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long tests; run with `pytest -m slow` (the default run skips them)")
