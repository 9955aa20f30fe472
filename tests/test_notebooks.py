"""Every chapter runs top to bottom on CPU (cells flagged `slow` are skipped unless TUNIX_LIT_SLOW=1)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "nbs").glob("[0-9]*.ipynb"))
RUNNER = """
import sys
from nbdev.test import test_nb
from pathlib import Path
ok, secs = test_nb(Path(sys.argv[1]), skip_flags=sys.argv[2].split(','), force_flags=sys.argv[3].split(','), do_print=True)
sys.exit(0 if ok else 1)
"""


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(nb):
    slow = os.environ.get("TUNIX_LIT_SLOW") == "1"
    env = dict(os.environ, MPLBACKEND="Agg")  # XLA_FLAGS as conftest set them: 8 devices, its code-generation level
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(nb), "" if slow else "slow", "slow" if slow else ""],
                          cwd=nb.parent, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"{nb.name} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
