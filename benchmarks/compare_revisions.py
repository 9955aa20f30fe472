"""Our benchmark at an older git revision beside the working tree, alternating, in one run on one machine.

    python benchmarks/compare_revisions.py sampler|sft|grpo --base REV [--rounds 4] [bench flags ...]

`compare_upstream.py` tells how we stand against upstream; this tells what one change did to us. The
machines these benchmarks run on drift by more than most changes are worth between runs, so a figure
from before a change and one from after it, taken an hour apart, do not compare. Here `REV` (a commit,
a branch, `HEAD`) is checked out into a temporary `git worktree`, and each round runs that checkout's
benchmark script, then the working tree's, each in a fresh process with the same flags. Each script
imports `tunix_lit` from its own checkout. Every JSON line is printed as it comes, then one last line
with both medians, the ratio now / base, and the ratio of each round. The worktree is removed at the end.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from compare_upstream import WORK, last_json

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def git(*args: str) -> str:
    """Run git in this repository; its stdout (an error names the command and git's message)."""
    out = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout.strip()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=sorted(WORK))
    p.add_argument("--base", required=True, help="the git revision to measure the working tree against")
    p.add_argument("--rounds", type=int, default=4)
    args, flags = p.parse_known_args(argv)
    if args.rounds < 1:
        raise SystemExit(f"--rounds must be at least 1, got {args.rounds}")
    script, key, better = WORK[args.what]
    commit = git("rev-parse", "--verify", f"{args.base}^{{commit}}")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XLA_FLAGS")}  # one CPU device, each side
    base, now = [], []
    with tempfile.TemporaryDirectory(prefix="tunix-lit-base-") as tmp:
        tree = Path(tmp) / "base"
        git("worktree", "add", "--detach", "--quiet", str(tree), commit)
        try:
            for _ in range(args.rounds):
                for side, scripts, figures in (("base", tree / "benchmarks", base), ("now", HERE, now)):
                    row = last_json([sys.executable, str(scripts / script), *flags], env)
                    print(json.dumps(dict(row, side=side)), flush=True)
                    figures.append(float(row[key]))
        finally:
            git("worktree", "remove", "--force", str(tree))
    b, n = statistics.median(base), statistics.median(now)
    print(json.dumps(dict(compare_revisions=args.what, figure=key, better=better, base=args.base, base_commit=commit,
                          now_commit=git("rev-parse", "HEAD"), now_dirty=bool(git("status", "--porcelain")),
                          rounds=args.rounds, flags=flags, base_median=round(b, 4), now_median=round(n, 4),
                          ratio_now_over_base=round(n / b, 3),
                          per_round_ratio=[round(x / y, 3) for x, y in zip(now, base)])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
