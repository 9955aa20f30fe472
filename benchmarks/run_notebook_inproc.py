"""Run a chapter notebook inside this process and keep its outputs, each cell's time and the machine.

    python benchmarks/run_notebook_inproc.py nbs/00_run_it_first.ipynb --model gemma3-270m --out DIR

For a machine where a Jupyter kernel cannot start (the lent TPU opens no TCP socket, not even on the loopback):
the cells run in order in one IPython shell (execnb's CaptureShell) whose working directory is the notebook's
folder, as in the test run; `eval: false` cells are skipped; `--skip-slow` skips cells flagged `slow` as well.
`--model` replaces the value of the settings cell's `MODEL`, as `tests/test_notebooks_real.py` does. DIR receives
the executed notebook and `<name>.run.json`: each cell's id, seconds and whether it raised, the JAX backend and
device kind, and the settings replaced. A cell that raises stops the run (what ran so far is still written).
"""

import argparse
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

SETTING = re.compile(r"^MODEL\s*=\s*[^#\n]*?(?=\s*(#|$))", re.MULTILINE)  # the value, up to its comment
FLAG = re.compile(r"^\s*#\s*\|\s*(eval\s*:\s*false|slow)\s*$", re.MULTILINE)


def flags(source: str) -> set:
    """The cell's skip flags among {'eval: false', 'slow'}, normalised."""
    return {re.sub(r"\s+", "", m.group(1)).replace(":", ": ") for m in FLAG.finditer(source)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebook", type=Path)
    p.add_argument("--model", help="value for the settings cell's MODEL (a name such as gemma3-270m, or a path)")
    p.add_argument("--skip-slow", action="store_true", help="skip cells flagged `#| slow`")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)

    from execnb.nbio import read_nb, write_nb
    from execnb.shell import CaptureShell

    nb = read_nb(a.notebook)
    replaced = None
    if a.model is not None:
        cell = next((c for c in nb.cells if c.cell_type == "code" and SETTING.search(c.source)), None)
        if cell is None:
            raise SystemExit(f"{a.notebook} has no `MODEL = ...` settings cell")
        cell.source = SETTING.sub(f"MODEL = {a.model!r}", cell.source, count=1)
        replaced = {"MODEL": a.model}
    a.out.mkdir(parents=True, exist_ok=True)
    os.chdir(a.notebook.resolve().parent)
    shell = CaptureShell()
    cells, failed, start = [], None, time.perf_counter()
    for c in nb.cells:
        if c.cell_type != "code":
            continue
        f = flags(c.source)
        if "eval: false" in f or ("slow" in f and a.skip_slow):
            cells.append({"id": c.get("id"), "skipped": sorted(f)})
            continue
        print(f"cell {c.get('id')} ...", file=sys.stderr, flush=True)
        t = time.perf_counter()
        shell.cell(c)
        secs = time.perf_counter() - t
        error = any(o.get("output_type") == "error" for o in c.get("outputs", []))
        cells.append({"id": c.get("id"), "seconds": round(secs, 2), "error": error})
        write_nb(nb, a.out / a.notebook.name)  # after every cell: a run cut off by a time limit keeps what it did
        (a.out / f"{a.notebook.stem}.cells.json").write_text(json.dumps(cells, indent=1))
        print(f"cell {c.get('id')}: {secs:.1f} s{' ERROR' if error else ''}", file=sys.stderr, flush=True)
        if error:
            failed = c.get("id")
            for o in c.outputs:
                if o.get("output_type") == "error":
                    print("\n".join(o.get("traceback", [])), file=sys.stderr)
            break
    import jax

    record = {"notebook": a.notebook.name, "replaced": replaced, "skip_slow": a.skip_slow, "failed_cell": failed,
              "seconds_total": round(time.perf_counter() - start, 1), "cells": cells,
              "backend": jax.default_backend(), "device_kind": jax.devices()[0].device_kind,
              "device_count": jax.device_count(), "jax": jax.__version__, "python": platform.python_version()}
    write_nb(nb, a.out / a.notebook.name)
    (a.out / f"{a.notebook.stem}.run.json").write_text(json.dumps(record, indent=1))
    print(json.dumps({k: v for k, v in record.items() if k != "cells"}))
    return 0 if failed is None else 1


if __name__ == "__main__":
    sys.exit(main())
