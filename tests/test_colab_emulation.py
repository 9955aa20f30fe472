"""Colab, emulated: a fresh virtual environment holding only Jupyter's kernel machinery (nbclient, ipykernel), an
importable `google.colab`, and a notebook run top to bottom, every cell, `#| slow` ones included, with nothing
installed but what the notebook's own first cell installs.

As on Colab, the kernel starts in an empty working folder with `google.colab` imported, so the first cell clones
the repository and `pip install`s it. The clone comes from a snapshot of this working tree (a local git repository
made here: the first cell honours TUNIX_LIT_GIT_URL and TUNIX_LIT_COLAB_REPO, which Colab never sets), and pip uses
this machine's configuration and cache, so what it installs is what a reader's pip would resolve. Real models come
by name, fetched into the run's model cache (TUNIX_LIT_CACHE, conftest).

Cost: in a fresh venv the first cell installs the package's whole stack (JAX, Flax, ...): about four minutes for 13c
on 2 cores with pip's cache warm, so the strict runs are slow (`pytest -m slow tests/test_colab_emulation.py`), 12b
(which also installs torch and transformers: the CPU build of torch is pinned by a constraint, as the dev extra pins
it) the longest. The default run keeps a quick variant: the same clone, install and every cell of 13c, in a venv
laid over this interpreter's packages, so the install finds its requirements already there.
"""
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

RUNNER = textwrap.dedent('''
    import sys, nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(sys.argv[1], as_version=4)
    NotebookClient(nb, kernel_name="python3", timeout=1800, resources={"metadata": {"path": sys.argv[2]}}).execute()
    print("ran", sum(c.cell_type == "code" for c in nb.cells), "code cells")
''')


def _snapshot(dest: Path) -> Path:
    """This working tree (tracked and untracked, ignored files left out) as a one-commit git repository."""
    files = subprocess.run(["git", "ls-files", "-z", "-c", "-o", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    git = ["git", "-c", "user.name=emulation", "-c", "user.email=emulation@localhost", "-c", "commit.gpgsign=false"]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "snapshot"]):
        subprocess.run(git + cmd, cwd=dest, check=True, capture_output=True)
    return dest


def _colab(base: Path, system_site: bool) -> dict:
    """A venv (fresh, or over this interpreter's packages), a fake google.colab, and a snapshot to clone."""
    if shutil.which("git") is None:
        pytest.skip("git is needed to clone the repository, as on Colab")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)] + ["--system-site-packages"] * system_site, check=True)
    py = venv / "bin" / "python"
    if not system_site:  # Jupyter's kernel machinery, nothing else
        done = subprocess.run([str(py), "-m", "pip", "install", "-q", "nbclient", "ipykernel", "nbformat"],
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-2000:]
    fake = base / "fake" / "google" / "colab"  # a namespace-package portion, so google.protobuf still imports
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('"""Stand-in for Colab\'s module."""\n')
    (fake / "output.py").write_text('"""Stand-in for google.colab.output (jax\'s debugger imports it on Colab)."""\n')
    startup = base / "ipython" / "profile_default" / "startup"  # Colab's kernel has google.colab imported
    startup.mkdir(parents=True)
    (startup / "00-colab.py").write_text(f"import sys\nsys.path.append({str(base / 'fake')!r})\nimport google.colab\n")
    constraints = base / "constraints.txt"
    try:  # the CPU build of torch that this machine has, as the dev extra pins it (never a fresh CUDA build)
        import torch
        constraints.write_text(f"torch=={torch.__version__}\n")
    except ImportError:
        constraints.write_text("")
    return dict(base=base, py=py, repo=_snapshot(base / "snapshot"), ipython=base / "ipython",
                constraints=constraints)


@pytest.fixture(scope="module")
def colab(tmp_path_factory):
    """The strict emulation: a fresh venv holding only nbclient and ipykernel (slow: the first cell installs all)."""
    return _colab(tmp_path_factory.mktemp("colab"), system_site=False)


@pytest.fixture(scope="module")
def colab_quick(tmp_path_factory):
    """The default run's emulation: a venv over this interpreter's packages, so the first cell's install is quick."""
    return _colab(tmp_path_factory.mktemp("colab_quick"), system_site=True)


def run_as_colab(colab, notebook: str, timeout: int):
    work = colab["base"] / ("content-" + Path(notebook).stem)
    work.mkdir()
    shutil.copy(ROOT / notebook, work / "notebook.ipynb")  # as Colab opens it from GitHub: no repository around it
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(TUNIX_LIT_GIT_URL=str(colab["repo"]), TUNIX_LIT_COLAB_REPO=str(work / "tunix-from-the-inside"),
               IPYTHONDIR=str(colab["ipython"]), JUPYTER_DATA_DIR=str(colab["base"] / "jupyter"), PATH=f"{colab['py'].parent}:{env.get('PATH', '')}",
               PIP_CONSTRAINT=" ".join(filter(None, [env.get("PIP_CONSTRAINT", ""), str(colab["constraints"])])))
    out = subprocess.run([str(colab["py"]), "-c", RUNNER, str(work / "notebook.ipynb"), str(work)], cwd=work,
                         env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{notebook} failed as on Colab:\n{out.stderr[-6000:]}"
    assert out.stdout.strip().startswith("ran "), out.stdout


def test_13c_runs_as_on_colab_quick(colab_quick):
    """Every cell of 13c after its first cell has cloned and installed the repository (over this machine's packages)."""
    run_as_colab(colab_quick, "nbs/13c_load_model.ipynb", timeout=600)


@pytest.mark.slow  # about 4 minutes: the first cell installs the package's whole stack into a fresh venv
def test_13c_runs_as_on_colab(colab):
    """The short chapter in a fresh venv: the package's own install is enough, every cell runs."""
    run_as_colab(colab, "nbs/13c_load_model.ipynb", timeout=900)


@pytest.mark.slow  # more: torch and transformers installed, SmolLM2 and Gemma 3 270M fetched by name and compared
def test_12b_runs_as_on_colab(colab):
    run_as_colab(colab, "nbs/12b_gguf.ipynb", timeout=1800)
