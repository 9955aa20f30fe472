"""Our benchmark beside upstream Tunix's on the same work, alternating, in one run on one machine.

    python benchmarks/compare_upstream.py sampler|sft|grpo [--rounds 3] [bench flags ...]

The first run builds a virtual environment for upstream (default `~/.cache/tunix-lit-upstream`,
or `--venv`/`$TUNIX_LIT_UPSTREAM_VENV`; about 1.6 GB, a minute or two) from
`benchmarks/upstream_requirements.txt`: google-tunix and the jax/flax/qwix versions this
repository uses, with torch pinned to the CPU wheel so nothing pulls a CUDA build. Upstream never
shares an interpreter with `tunix_lit`.

Each round runs upstream's side (`benchmarks/upstream_bench.py` in that venv), then ours
(`benchmarks/sampler.py`, `sft_step.py` or `grpo_step.py` with this interpreter), each in a fresh
process with the same flags. Alternating matters: this kind of machine drifts by up to 2x between
runs, so only figures from one run compare. Every JSON line is printed as it comes, then one last
JSON line with both medians, the ratio ours/upstream and the machine (`benchmarks/machine.py`).
`XLA_FLAGS` is not passed on; `--max-isa AVX2` is, to both sides, and each sets XLA's
`--xla_cpu_max_isa` itself.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORK = {  # what -> (our script, the figure both print, which direction is better)
    "sampler": ("sampler.py", "tokens_per_s", "higher"),
    "sft": ("sft_step.py", "tokens_per_s", "higher"),
    "grpo": ("grpo_step.py", "median_step_s", "lower"),
}


def default_venv() -> Path:
    """Where upstream's venv lives: $TUNIX_LIT_UPSTREAM_VENV or ~/.cache/tunix-lit-upstream."""
    return Path(os.environ.get("TUNIX_LIT_UPSTREAM_VENV", Path.home() / ".cache" / "tunix-lit-upstream"))


def upstream_python(venv_dir: Path) -> Path:
    """The venv's interpreter, built and filled on first use."""
    py = venv_dir / "bin" / "python"
    check = [str(py), "-c", "import tunix"]
    if py.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return py
    print(f"building upstream's venv in {venv_dir} (once)", file=sys.stderr)
    venv.EnvBuilder(with_pip=True, clear=True).create(venv_dir)
    constraints = venv_dir / "constraints.txt"
    constraints.write_text("torch==2.13.0\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "-r", str(HERE / "upstream_requirements.txt"),
                    "-c", str(constraints)], check=True)
    subprocess.run(check, check=True)
    return py


def last_json(cmd: list, env: dict) -> dict:
    """Run a benchmark; its last stdout line as a dict (an error names the command and its stderr)."""
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [l for l in out.stdout.strip().splitlines() if l.startswith("{")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=sorted(WORK))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--venv", type=Path, default=default_venv())
    args, flags = p.parse_known_args(argv)
    script, key, better = WORK[args.what]
    py = upstream_python(args.venv)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XLA_FLAGS")}  # one CPU device, each side
    theirs, ours = [], []
    for _ in range(args.rounds):
        up = last_json([str(py), str(HERE / "upstream_bench.py"), args.what, *flags], env)
        print(json.dumps(up), flush=True)
        me = last_json([sys.executable, str(HERE / script), *flags], env)
        print(json.dumps(me), flush=True)
        theirs.append(float(up[key]))
        ours.append(float(me[key]))
    t, o = statistics.median(theirs), statistics.median(ours)
    print(json.dumps(dict(compare=args.what, figure=key, better=better, rounds=args.rounds, flags=flags,
                          ours=round(o, 4), upstream=round(t, 4), ratio_ours_over_upstream=round(o / t, 3),
                          machine=me.get("machine"))))  # both sides ran here; ours names the machine
    return 0


if __name__ == "__main__":
    sys.exit(main())
