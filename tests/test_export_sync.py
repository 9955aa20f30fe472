"""The package is generated: `tunix_lit/` must equal a fresh `nbdev_export` of `nbs/`."""
import filecmp
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _diff(a: Path, b: Path) -> list[str]:
    """Relative paths of .py files that differ or exist on one side only."""
    left = {p.relative_to(a) for p in a.rglob("*.py") if "__pycache__" not in p.parts}
    right = {p.relative_to(b) for p in b.rglob("*.py") if "__pycache__" not in p.parts}
    out = sorted(str(p) + " (only committed)" for p in left - right)
    out += sorted(str(p) + " (only exported)" for p in right - left)
    out += sorted(str(p) for p in left & right if not filecmp.cmp(a / p, b / p, shallow=False))
    return out


def test_package_equals_fresh_export(tmp_path):
    for name in ("nbs", "settings.ini", "setup.py", "README.md"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    # the package inits (tunix_lit's, and rollout's that loads the engines so they register) and non-exported
    # files (assets) are not produced by export; start from them
    shutil.copytree(ROOT / "tunix_lit", tmp_path / "tunix_lit", ignore=shutil.ignore_patterns("*.py"))
    for init in (ROOT / "tunix_lit").rglob("__init__.py"):
        shutil.copy(init, tmp_path / init.relative_to(ROOT))
    subprocess.run([sys.executable, "-c", "from nbdev.doclinks import nbdev_export; nbdev_export()"],
                   cwd=tmp_path, check=True, capture_output=True)
    differing = _diff(ROOT / "tunix_lit", tmp_path / "tunix_lit")
    assert not differing, f"tunix_lit/ is stale; run nbdev_export and commit. Differs: {differing}"
