"""The scripts of benchmarks/ imported as modules, for the tests of their bookkeeping."""
import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def load_benchmark(name: str):
    """benchmarks/<name>.py as a fresh module, its folder on sys.path while it loads (the scripts import `machine`)."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCH / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(BENCH))
