"""Every chapter notebook is stored executed, and its outputs are not stale against its code.

Staleness is detected cheaply: `tools/run_notebook.py` executes a notebook and records in its
metadata a SHA-256 of its code cells' sources; here we recompute the hash from the file and
compare. Editing a code cell without re-running the notebook changes the hash and fails this test.
No kernel is started (the whole file runs in well under a second).
"""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "nbs").glob("[0-9]*.ipynb"))
_spec = importlib.util.spec_from_file_location("run_notebook", ROOT / "tools" / "run_notebook.py")
run_notebook = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_notebook)


def _fix(nb: Path) -> str:
    return f"run `python tools/run_notebook.py nbs/{nb.name}` and commit the result"


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_executed_and_fresh(nb):
    data = json.loads(nb.read_text())
    code = [c for c in data["cells"] if c["cell_type"] == "code"]
    if not code:
        pytest.skip(f"{nb.name} has no code cells, so nothing to execute")
    run = {i: c for i, c in enumerate(data["cells"]) if c["cell_type"] == "code" and not run_notebook.is_skipped(c)}
    unexecuted = [i for i, c in run.items() if c.get("execution_count") is None]
    assert not unexecuted, f"{nb.name}: code cells {unexecuted} were never executed; {_fix(nb)}"
    assert any(c.get("outputs") for c in run.values()), f"{nb.name}: no stored outputs at all; {_fix(nb)}"
    errors = [i for i, c in enumerate(data["cells"]) if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    assert not errors, f"{nb.name}: cells {errors} store an error traceback; {_fix(nb)}"
    stamp = data["metadata"].get(run_notebook.STAMP_KEY, {}).get("code_sha256")
    assert stamp, f"{nb.name}: no record of the code its outputs came from; {_fix(nb)}"
    assert stamp == run_notebook.code_hash(data), f"{nb.name}: code changed since its outputs were stored; {_fix(nb)}"


def test_hash_sees_code_edits_and_ignores_prose(tmp_path):
    nb = {"cells": [{"cell_type": "markdown", "source": "# Title"}, {"cell_type": "code", "source": ["x = 1\n", "x"]}],
          "metadata": {}}
    before = run_notebook.code_hash(nb)
    nb["cells"][0]["source"] = "# Another title"
    assert run_notebook.code_hash(nb) == before  # prose is not what outputs come from
    nb["cells"][1]["source"] = "x = 2\nx"
    assert run_notebook.code_hash(nb) != before
    # moving a line into a new cell changes the hash too (cell boundaries matter to outputs)
    split = {"cells": [{"cell_type": "code", "source": "x = 1"}, {"cell_type": "code", "source": "x"}], "metadata": {}}
    assert run_notebook.code_hash(split) != before
    # a cell that never runs (`#| eval: false`) stores no output: editing it leaves the outputs current
    nb["cells"].append({"cell_type": "code", "source": "#| eval: false\nnbdev_export()"})
    after = run_notebook.code_hash(nb)
    nb["cells"][-1]["source"] = "#| eval: false\nif 'google.colab' not in sys.modules:\n    nbdev_export()"
    assert run_notebook.code_hash(nb) == after
    nb["cells"][-1]["source"] = "nbdev_export()"  # the same cell made to run is code the outputs come from
    assert run_notebook.code_hash(nb) != after


def test_a_stamped_notebook_goes_stale_when_a_cell_is_edited(tmp_path):
    import nbformat

    path = tmp_path / "01_demo.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("21 * 2"),
                nbformat.v4.new_code_cell("#| eval: false\nraise SystemExit('never run')")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    run_notebook.run_notebook(path, timeout=120)
    stored = json.loads(path.read_text())
    assert "".join(stored["cells"][0]["outputs"][0]["data"]["text/plain"]) == "42"
    assert stored["cells"][1]["execution_count"] is None and stored["cells"][1]["outputs"] == []
    assert stored["metadata"]["tunix_lit"]["code_sha256"] == run_notebook.code_hash(stored)
    stored["cells"][0]["source"] = "21 * 3"  # edited, not re-run
    assert stored["metadata"]["tunix_lit"]["code_sha256"] != run_notebook.code_hash(stored)
