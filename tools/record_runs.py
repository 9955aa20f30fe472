"""Run shipped recipes whole and keep each run's summary in the repository, for the prose to quote.

    python tools/record_runs.py sft_tiny grpo_tiny ...   # each recipes/NAME.yaml, one after the other

Each recipe runs as `tunix-lit train recipes/NAME.yaml` in a fresh process and a scratch run directory;
its `summary.json` is stored as `recipes/results/NAME.json` with a SHA-256 of the recipe file's content and
of every `base:` file it extends (comments aside), the date and the machine. Its `curve.png` becomes
`chapters/images/NAME_curve.png` (where the book's pages and the site find figures). Figures in README.md, chapters/*.md and notebook prose that quote a
recipe's result name these files in `figures.yaml`; `tests/test_prose_figures.py` checks that each
stored record still matches its recipe files, so an edited recipe asks for a new run.
"""

import argparse
import datetime
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "recipes" / "results"


def recipe_files(name: str) -> list:
    """The recipe file of `name` and each `base:` file it extends, as paths relative to the repository."""
    out, path = [], ROOT / "recipes" / f"{name}.yaml"
    while path is not None:
        out.append(path.relative_to(ROOT).as_posix())
        base = (yaml.safe_load(path.read_text()) or {}).get("base")
        path = (path.parent / base).resolve() if base else None
    return out


def recipe_hashes(name: str) -> dict:
    """{file: SHA-256 of its parsed content} for the recipe and its `base:` chain (comments do not count)."""
    canonical = lambda f: json.dumps(yaml.safe_load((ROOT / f).read_text()), sort_keys=True).encode()
    return {f: hashlib.sha256(canonical(f)).hexdigest() for f in recipe_files(name)}


def record(name: str) -> dict:
    """Run recipes/NAME.yaml whole in a fresh process and store its summary; the stored record."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-c", "import sys; from tunix_lit.cli import main; sys.exit(main())", "train",
               str(ROOT / "recipes" / f"{name}.yaml"), "--run-dir", tmp, "--no-progress"]
        subprocess.run(cmd, check=True, cwd=ROOT, env=dict(os.environ))
        summary = json.loads((Path(tmp) / "summary.json").read_text())
        RUNS.mkdir(parents=True, exist_ok=True)
        if (Path(tmp) / "curve.png").exists():
            shutil.copy(Path(tmp) / "curve.png", ROOT / "chapters" / "images" / f"{name}_curve.png")
    rec = {"recipe": f"recipes/{name}.yaml", "recipe_sha256": recipe_hashes(name),
           "executed": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, {platform.system()}",
           "summary": summary}
    (RUNS / f"{name}.json").write_text(json.dumps(rec, indent=2, default=float) + "\n")
    return rec


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+", help="recipe names, e.g. sft_tiny grpo_tiny")
    for n in parser.parse_args().names:
        r = record(n)["summary"]
        print(f"{n}: {r.get('heldout_accuracy_before')} -> {r.get('heldout_accuracy_after')} in "
              f"{r.get('train_seconds_this_run')} s", flush=True)
