"""Execute a chapter notebook in place and stamp it with a hash of its code, so stale outputs are caught.

    python tools/run_notebook.py nbs/14_host_runtime.ipynb [more notebooks ...]

Every code cell runs in order in a fresh kernel started in `nbs/`, with 8 fake CPU devices unless
`XLA_FLAGS` says otherwise, as in the test run (cells marked `#| eval: false`,
such as the closing `nbdev_export()`, are skipped and keep no outputs), the outputs are stored, and
the notebook's metadata records `tunix_lit.code_sha256`: a SHA-256 of the code cells' sources.
`tests/test_notebook_outputs.py` recomputes that hash from the file and fails when it differs, so a
code cell edited without re-running the notebook fails the tests. Prose edits do not change it.
A failing cell stops the run and leaves the file as it was.
"""

import argparse
import datetime
import hashlib
import os
import re
import sys
import time
from pathlib import Path

import nbformat

STAMP_KEY = "tunix_lit"  # notebook-level metadata key (settings.ini allowed_metadata_keys keeps it through nbdev_clean)
_EVAL_FALSE = re.compile(r"^\s*#\s*\|\s*eval\s*:\s*false\s*$", re.MULTILINE)


def code_sources(nb) -> list:
    """The sources of the code cells that run, in order, with trailing whitespace removed from each line.

    A `#| eval: false` cell (the closing export, say) never runs here and stores no output, so the outputs do
    not come from it: editing it leaves the stored outputs current."""
    out = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code" or is_skipped(cell):
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        out.append("\n".join(line.rstrip() for line in source.strip().splitlines()))
    return out


def code_hash(nb) -> str:
    """SHA-256 (hex) of the notebook's code, the quantity its stored outputs were produced from."""
    h = hashlib.sha256()
    for source in code_sources(nb):
        h.update(source.encode())
        h.update(b"\n\x00cell\x00\n")  # a boundary, so moving a line between cells changes the hash
    return h.hexdigest()


def is_skipped(cell) -> bool:
    """Whether the cell is marked `#| eval: false` (never executed, by nbdev's test runner or here)."""
    source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    return bool(_EVAL_FALSE.search(source))


def run_notebook(path: Path, timeout: int = 3600) -> float:
    """Execute `path` in place, store its outputs and stamp its code hash; the run's seconds."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent.resolve())}})
    env = dict(os.environ)
    env.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")  # as the test run gives every notebook
    start = time.perf_counter()
    with client.setup_kernel(env=env):
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            if is_skipped(cell):
                cell.outputs, cell.execution_count = [], None
                continue
            client.execute_cell(cell, index)  # raises CellExecutionError on the first failing cell
    seconds = time.perf_counter() - start
    nb.metadata[STAMP_KEY] = {
        "code_sha256": code_hash(nb),
        "executed": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "seconds": round(seconds, 1),
    }
    nbformat.write(nb, path)
    return seconds


def main(argv=None) -> int:
    """Command line: run and stamp each notebook named, one after the other."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--timeout", type=int, default=3600, help="seconds allowed per cell")
    args = parser.parse_args(argv)
    for path in args.notebooks:
        if path.suffix != ".ipynb" or not path.is_file():
            parser.error(f"not a notebook file: {path}")
    for path in args.notebooks:
        seconds = run_notebook(path, args.timeout)
        print(f"{path}: executed in {seconds:.1f} s, code_sha256 stamped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
