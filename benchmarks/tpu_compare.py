"""One command on a lent TPU: our training steps and sampler beside upstream Tunix's, alternating, inside a budget.

    python3 benchmarks/tpu_compare.py --budget 540                      # on the TPU machine, from the repo root
    python3 benchmarks/tpu_compare.py --parts grpo,sft,trace --budget 540   # a first call
    python3 benchmarks/tpu_compare.py --parts trace,sampler --budget 540    # a second call
    python3 benchmarks/tpu_compare.py --parts decode --budget 200           # the rollout decode: plain vs LoRA r8 (ours)
    python3 benchmarks/tpu_compare.py --parts grpo,grpo_whole --rounds 1   # GRPO with prompt_once off (ours) beside both
    python3 benchmarks/tpu_compare.py --parts grpo_whole_l28 --rounds 1    # the same on 28 layers (ours, cold)
    python3 benchmarks/tpu_compare.py --parts grpo_l28,sft_l28,grpo_full_l28 --rounds 1   # 28 layers (call twice:
                                                                           # the first fills the compile cache)
    python3 benchmarks/tpu_compare.py --platform cpu --tiny --budget 900   # the same driver on a CPU, tiny shapes
    python3 benchmarks/tpu_compare.py --summarize a.json b.json            # merge the rows of two calls

1. Installs both sides from the wheels `tpu_prepare_wheels.py` downloaded (carried in `.whl-tpu/compare`) into
   folders under `/tmp/tpu_compare/site` (`pip install --no-deps --no-index --target`; pandas and pillow, which
   `import tunix` needs, from the image's own index), skipped when a stamp says they are already there.
2. Runs the work in this order, each side in a fresh process, round 1 upstream first, round 2 ours first, until
   the budget is spent (a job that cannot fit is skipped; one that overruns is stopped at the budget):
   GRPO LoRA r8 step (8-layer Qwen3-0.6B shape, 2 prompts x 4, 64 + 128 tokens) and the SFT LoRA r8 step
   (4 x 512, synchronous and dispatched back to back) for both rounds, then `train_trace.py` on our two
   steps (a `jax.profiler` trace and a host-side breakdown), then the sampler at batch 1 and 32
   (28 layers, 128 + 128 tokens, bfloat16) for both rounds. The 28-layer parts (`grpo_l28`, `sft_l28`: the same
   steps on all 28 layers; `grpo_full_l28`: the GRPO step as a full fine-tune, the largest that fits one chip)
   run only when named, after the rest; so do `grpo_whole`, `grpo_whole_l28` and `grpo_once` (ours only:
   `prompt_once` off, or on; the `grpo` part runs the library's default, which picks per machine).
   GRPO and SFT rows carry the chip's memory high-water mark (`device_memory`).
3. Prints and writes (`$OUT/tpu_compare.json`) one JSON: each side's figures per round and their medians, the
   ratios ours / upstream, the trace analysis, the machine, both sides' versions, and every job's wall time.

Rows are also appended to `/tmp/tpu_compare/rows.jsonl`: a second call while the machine is still warm skips the
jobs already done and its JSON holds both calls' rows. Each side sees `PYTHONPATH=<side>:<common>[:repo]:$PYTHONPATH`
(the image's jax stays; the carried folders come first), `XLA_FLAGS` unset, `JAX_COMPILATION_CACHE_DIR=/tmp/jaxcache`.
"""

import argparse
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from tpu_prepare_wheels import FROM_IMAGE_INDEX  # noqa: E402  (what comes from the image's own index, not carried)
import limits  # noqa: E402  (each row's fraction of the chip's limit, counted by formula)
SIDES = ("upstream", "ours")

QWEN06 = ["--embed-dim", "1024", "--hidden-dim", "3072", "--num-heads", "16", "--num-kv-heads", "8",
          "--head-dim", "128", "--vocab-size", "151936", "--tied-embedding", "1", "--dtype", "bfloat16"]
TINY = ["--embed-dim", "64", "--hidden-dim", "128", "--num-heads", "2", "--num-kv-heads", "1", "--head-dim", "32",
        "--vocab-size", "512", "--tied-embedding", "1", "--dtype", "float32"]
# first guesses of a job's seconds on the TPU before one has run (cold compiles; TPU.md's loans); later: measured
COLD_S = {"grpo": 150, "sft": 90, "trace": 150, "decode_plain": 60, "decode_lora8": 60, "sampler_b1": 80,
          "sampler_b8": 80, "sampler_b32": 80, "sampler_b128": 110, "grpo_whole": 130, "grpo_once": 150,
          "grpo_whole_l28": 250, "grpo_l28": 300, "sft_l28": 150, "grpo_full_l28": 300}
LAYERS28 = ("grpo_l28", "sft_l28", "grpo_full_l28")  # run only when named
OURS_ONLY = ("trace", "decode_plain", "decode_lora8", "grpo_whole", "grpo_once", "grpo_whole_l28")  # no upstream row
WARM_FACTOR = 0.8  # a repeat of a job finds its programs in the persistent compilation cache


def work(tiny: bool) -> dict:
    """part -> (our argv, upstream's argv or None, figure keys); the model and bench flags both sides get."""
    if tiny:
        train, sample = ["--num-layers", "2", *TINY], ["--num-layers", "2", *TINY]
        grpo = ["--batch", "2", "--num-generations", "4", "--prompt-len", "16", "--gen-len", "16", "--steps", "4"]
        sft = ["--batch", "2", "--seq-len", "32", "--steps", "4", "--pipelined-steps", "3"]
        smp = ["--prompt-len", "16", "--gen-len", "16", "--repeats", "2", "--min-time-s", "0", "--bw-mb", "16"]
        batches = (1, 4)
    else:
        train, sample = ["--num-layers", "8", *QWEN06], ["--num-layers", "28", *QWEN06]
        grpo = ["--batch", "2", "--num-generations", "4", "--prompt-len", "64", "--gen-len", "128", "--steps", "6"]
        sft = ["--batch", "4", "--seq-len", "512", "--steps", "6", "--pipelined-steps", "6"]
        smp = ["--prompt-len", "128", "--gen-len", "128", "--repeats", "3", "--min-time-s", "1", "--bw-mb", "1024"]
        batches = (1, 8, 32, 128)  # the four batches; --parts sampler runs them all
    lora = ["--lora-rank", "8"]
    out = {
        "grpo": (["benchmarks/grpo_step.py", *train, *grpo, *lora],
                 ["benchmarks/upstream_bench.py", "grpo", *train, *grpo, *lora]),
        "sft": (["benchmarks/sft_step.py", *train, *sft, *lora],
                ["benchmarks/upstream_bench.py", "sft", *train, *sft, *lora]),
        "trace": (["benchmarks/train_trace.py", "both", *train, *grpo[:8], "--sft-batch", sft[1], "--seq-len", sft[3],
                   *lora, "--steps", "3", "--trace-steps", "2"], None),
    }
    # the GRPO rollout's decode alone, ours only: plain weights against LoRA r8 adapters in the loop (an A/B)
    decode = ["--batch", str(int(grpo[1]) * int(grpo[3])), "--prompt-len", grpo[5], "--gen-len", grpo[7],
              *smp[6:8], "--repeats", "3", "--roofline", "off"]
    out["decode_plain"] = (["benchmarks/sampler.py", *train, *decode], None)
    out["decode_lora8"] = (["benchmarks/sampler.py", *train, *decode, "--lora-rank", "8"], None)
    # our GRPO step with every row run whole (prompt_once off): a smaller program to compile, more tokens a step
    out["grpo_whole"] = (["benchmarks/grpo_step.py", *train, *grpo, *lora, "--prompt-once", "0"], None)
    # and with each group's prompt run once (the `grpo` part runs the library's default, which picks per machine)
    out["grpo_once"] = (["benchmarks/grpo_step.py", *train, *grpo, *lora, "--prompt-once", "1"], None)
    # the same steps on every layer of the model (28 for Qwen3-0.6B; --tiny: 3); and a full fine-tune GRPO step
    deep = ["--num-layers", "3" if tiny else "28", *train[2:]]
    up = "benchmarks/upstream_bench.py"
    out["grpo_l28"] = (["benchmarks/grpo_step.py", *deep, *grpo, *lora], [up, "grpo", *deep, *grpo, *lora])
    out["sft_l28"] = (["benchmarks/sft_step.py", *deep, *sft, *lora], [up, "sft", *deep, *sft, *lora])
    out["grpo_full_l28"] = (["benchmarks/grpo_step.py", *deep, *grpo], [up, "grpo", *deep, *grpo])
    out["grpo_whole_l28"] = (["benchmarks/grpo_step.py", *deep, *grpo, *lora, "--prompt-once", "0"], None)
    for b in batches:
        out[f"sampler_b{b}"] = (["benchmarks/sampler.py", *sample, "--batch", str(b), *smp],
                                ["benchmarks/upstream_bench.py", "sampler", *sample, "--batch", str(b), *smp])
    return out


def plan(parts: list, rounds: int, tiny: bool) -> list:
    """(part, round, side) in priority order: the training rows' rounds, the trace, then the sampler's rounds."""
    names = list(work(tiny))
    train = [p for p in ("grpo", "sft") if p in parts]
    samplers = [p for p in names if p.startswith("sampler") and ("sampler" in parts or p in parts)]
    order = lambda r: SIDES if r % 2 == 1 else SIDES[::-1]  # round 1 upstream first, round 2 ours first
    jobs = [(p, r, s) for r in range(1, rounds + 1) for p in train for s in order(r)]
    if "trace" in parts:
        jobs.append(("trace", 1, "ours"))
    jobs += [(p, 1, "ours") for p in ("decode_plain", "decode_lora8") if p in parts or "decode" in parts]
    jobs += [(p, r, "ours") for r in range(1, rounds + 1) for p in ("grpo_whole", "grpo_once", "grpo_whole_l28")
             if p in parts]
    jobs += [(p, r, s) for r in range(1, rounds + 1) for p in LAYERS28 if p in parts for s in order(r)]
    jobs += [(p, r, s) for r in range(1, rounds + 1) for p in samplers for s in order(r)]
    return jobs


def install(wheels: Path, site: Path, index_url: str) -> dict:
    """Each side's carried wheels into site/<side> (and the image-index packages into site/<side>-index)."""
    report = {}
    for side in ("common", "ours", "upstream"):
        whl = sorted((wheels / side).glob("*.whl"))
        if not whl:
            raise SystemExit(f"no wheels in {wheels / side}: run benchmarks/tpu_prepare_wheels.py first and carry "
                             f"{wheels.relative_to(ROOT) if wheels.is_relative_to(ROOT) else wheels}")
        targets = [(site / side, [str(w) for w in whl], [["--no-index"]])]
        if FROM_IMAGE_INDEX.get(side):  # the image's index, else its wheel folder
            targets.append((site / f"{side}-index", FROM_IMAGE_INDEX[side],
                            [["--index-url", index_url], ["--no-index", "--find-links", "/opt/wheels"]]))
        for target, what, sources in targets:
            stamp = target / ".stamp"
            key = hashlib.sha256("\n".join([Path(w).name for w in what] + sources[0]).encode()).hexdigest()
            if stamp.exists() and stamp.read_text() == key:
                report[target.name] = "kept"
                continue
            t0, errors = time.time(), []
            for source in sources:
                if pip_install(what, source, target):
                    stamp.write_text(key)
                    report[target.name] = f"installed {len(what)} in {time.time() - t0:.1f} s ({source[-1]})"
                    break
                # one wheel this machine refuses (say a glibc too old for its tag) must not stop the others
                refused = [w for w in what if not pip_install([w], source, target)]
                # a refused wheel's package from the image's own index instead (its version, whatever it is)
                bad = [w for w in refused if not (w.endswith(".whl") and pip_install(
                    [Path(w).name.split("-")[0]], ["--index-url", index_url], target))]
                if not bad:
                    stamp.write_text(key)
                    report[target.name] = (f"installed {len(what)}, {[Path(w).name for w in refused]} from the "
                                           f"image's index instead, in {time.time() - t0:.1f} s")
                    break
                if len(what) > 1 and len(bad) < len(what):
                    report[target.name] = f"installed {len(what) - len(bad)}, FAILED: {[Path(b).name for b in bad]}"
                    break
                errors.append(f"{source[-1]}: failed")
            else:
                report[target.name] = "FAILED: " + " | ".join(errors)
    return report


def pip_install(what: list, source: list, target: Path) -> bool:
    """pip install --no-deps into target (no config file, no cache, no byte-compiling); True if it worked."""
    cmd = [sys.executable, "-m", "pip", "install", "--isolated", "-q", "--no-deps", "--no-compile", "--no-cache-dir",
           "--disable-pip-version-check", "--only-binary=:all:", *source, "--target", str(target), "--upgrade", *what]
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    if p.returncode:
        print(p.stderr[-800:], file=sys.stderr)
    return p.returncode == 0


def side_env(side: str, site: Path, platform: str) -> dict:
    """The environment one side's process runs in."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    paths = [site / side, site / f"{side}-index", site / "common"] + ([ROOT] if side == "ours" else [])
    env["PYTHONPATH"] = os.pathsep.join([str(p) for p in paths if p.exists() or p == ROOT]
                                        + [x for x in [os.environ.get("PYTHONPATH", "")] if x])
    env.setdefault("JAX_COMPILATION_CACHE_DIR", "/tmp/jaxcache")
    env["PYTHONUNBUFFERED"] = "1"
    if platform != "auto":
        env["JAX_PLATFORMS"] = platform
    return env


def run_job(argv: list, env: dict, timeout: float) -> dict:
    """Run one benchmark process (its own process group, killed whole at the timeout); its last JSON line."""
    t0 = time.time()
    p = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=max(timeout, 1))
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        timed_out = True
    lines = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    rec = dict(rc=p.returncode, timed_out=timed_out, wall_s=round(time.time() - t0, 1))
    if lines:
        rec["result"] = lines[-1]
    if p.returncode or timed_out or not lines:
        rec["tail"] = (out + err)[-2500:]
    return rec


def load_rows(paths) -> list:
    """Rows from jsonl state files and/or earlier summary JSONs (their `rows`)."""
    rows = []
    for path in paths:
        path = Path(path)
        if not path.exists():
            continue
        text = path.read_text().strip()
        if not text:
            continue
        try:
            whole = json.loads(text)
            rows += whole.get("rows", []) if isinstance(whole, dict) else []
        except json.JSONDecodeError:
            rows += [json.loads(l) for l in text.splitlines() if l.strip()]
    return rows


def kind_of(part: str) -> str:
    """grpo_l28 -> grpo, sampler_b32 -> sampler, decode_plain -> decode: which figures a part's rows hold."""
    return part.split("_")[0]


def ok(row) -> bool:
    return row.get("rc") == 0 and not row.get("timed_out") and "result" in row


FIGURES = {  # part -> figure keys of each side's JSON line
    "grpo": ("median_step_s", "first_step_s", "init_and_first_step_s"),
    "sft": ("median_step_s", "tokens_per_s", "pipelined_s_per_step", "pipelined_tokens_per_s", "first_step_s"),
    "sampler": ("tokens_per_s", "median_call_s", "first_call_s"),
}
RATIOS = {  # part -> (figure, name of the ratio); a time ratio < 1 and a rate ratio > 1 both mean ours is faster
    "grpo": [("median_step_s", "step_time_ours_over_upstream")],
    "sft": [("median_step_s", "sync_step_time_ours_over_upstream"),
            ("pipelined_s_per_step", "pipelined_step_time_ours_over_upstream"),
            ("tokens_per_s", "sync_tokens_per_s_ours_over_upstream")],
    "sampler": [("tokens_per_s", "tokens_per_s_ours_over_upstream")],
}


def row_limits(kind: str, argv: list, side_entry: dict) -> dict | None:
    """A side's fraction of the chip's limit for one part (benchmarks/limits.py), from its flags and medians."""
    med = side_entry.get("median", {})
    try:
        if kind == "sft":
            return limits.sft_limits(argv, med.get("median_step_s"), med.get("pipelined_s_per_step"))
        if kind == "grpo":
            return limits.grpo_limits(argv, side_entry.get("phases_last_round"), med.get("median_step_s"))
        if kind == "sampler" and med.get("tokens_per_s"):
            s = limits.shape_of(argv)
            nbytes = limits.decode_bytes(s, s["batch"], s["prompt_len"], s["gen_len"])
            seconds = s["gen_len"] * s["batch"] / med["tokens_per_s"]  # the figure's own time for gen_len tokens a row
            return dict(decode_gb=round(nbytes / 1e9, 3), roofline_fraction=limits.roofline_fraction(nbytes, seconds))
    except (TypeError, ValueError):  # a record whose argv lacks a model flag (an older row): no figure
        return None
    return None


def summarize(rows: list, extra: dict) -> dict:
    """Medians per part and side over the rounds that finished, and the ratios ours / upstream."""
    latest = {}
    for r in rows:  # a later good row of the same job replaces an earlier one
        key = (r["part"], r["round"], r["side"])
        if key not in latest or ok(r) or not ok(latest[key]):
            latest[key] = r
    rows = list(latest.values())
    parts, versions, machine = {}, {}, None
    for part in dict.fromkeys(r["part"] for r in rows):
        kind = kind_of(part)
        if part in OURS_ONLY:  # ours only: its last good record
            got = [r for r in rows if r["part"] == part and ok(r)]
            parts[part] = got[-1]["result"] if got else {"missing": "did not run or failed"}
            continue
        entry = {}
        for side in SIDES:
            good = sorted((r for r in rows if r["part"] == part and r["side"] == side and ok(r)), key=lambda r: r["round"])
            fig = {k: [r["result"].get(k) for r in good] for k in FIGURES[kind]}
            med = {k: round(statistics.median(v), 4) for k, v in fig.items() if v and None not in v}
            entry[side] = dict(rounds=[r["round"] for r in good], per_round=fig, median=med)
            if good:
                res = good[-1]["result"]
                versions.setdefault(side, res.get("env"))  # the training rows' come first and name flax, optax, qwix
                machine = machine or (res.get("machine") if side == "ours" else None)
                if kind == "grpo" and side == "ours":
                    entry[side]["phases_last_round"] = res.get("phase_median_later_steps_s")
                    # did its log-prob passes run each prompt once? (records before --prompt-once auto: the flag)
                    entry[side]["prompt_once_ran"] = res.get("prompt_once_ran", res.get("prompt_once"))
                    entry[side]["trainer_donates"] = res.get("trainer_donates")  # None: a record from before it
                if kind == "grpo":  # where the set-up and first step spent their compile time (last good round)
                    entry[side]["first_step_compiles"] = res.get("first_step_compiles")
                if kind in ("grpo", "sft"):  # the chip's memory high-water mark (None on a CPU)
                    entry[side]["device_memory"] = res.get("device_memory")
                if part.startswith("sampler") and side == "ours" and res.get("roofline"):
                    entry[side]["roofline"] = res["roofline"]
                entry[side]["limits"] = row_limits(kind, good[-1].get("argv", []), entry[side])
        for fig_key, name in RATIOS[kind]:
            a, b = entry["ours"]["median"].get(fig_key), entry["upstream"]["median"].get(fig_key)
            entry[name] = round(a / b, 3) if a and b else None
        parts[part] = entry
    for whole, once in (("grpo_whole", "grpo"), ("grpo_whole_l28", "grpo_l28")):  # prompt_once off against on
        a, b = parts.get(whole, {}), parts.get(once, {}).get("ours", {})
        if whole == "grpo_whole" and parts.get("grpo_once", {}).get("median_step_s"):  # the forced-on run, if any
            on = parts["grpo_once"]
            b = dict(median={"median_step_s": on["median_step_s"]}, first_step_compiles=on.get("first_step_compiles"),
                     prompt_once_ran=on.get("prompt_once_ran", True))
        if a.get("median_step_s") and b.get("median", {}).get("median_step_s"):
            site = lambda fc: (fc or {}).get("top_sites", [{}])[0]  # the slowest compile: the train step
            a["vs_prompt_once"] = dict(
                step_time_ratio=round(a["median_step_s"] / b["median"]["median_step_s"], 4),
                train_step_compile_s=[site(b.get("first_step_compiles")).get("s"),
                                      site(a.get("first_step_compiles")).get("s")],
                programs_fetched_from_cache=(a.get("first_step_compiles") or {}).get("cache_fetch", {}).get("n"),
                once_ran_prompt_once=b.get("prompt_once_ran"))  # False: both ran whole (nothing to compare)
    failed = [{k: r.get(k) for k in ("part", "round", "side", "rc", "timed_out", "wall_s", "tail")}
              for r in rows if not ok(r)]
    return dict(bench="tpu_compare", parts=parts, failed=failed, versions=versions, machine=machine,
                jobs=[{k: r.get(k) for k in ("part", "round", "side", "rc", "timed_out", "wall_s")} for r in rows],
                **extra, rows=rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=float, default=540.0, help="seconds from start (install included) to stop by")
    p.add_argument("--parts", default="grpo,sft,trace,sampler",
                   help="comma-separated: grpo, sft, trace, decode, sampler (or decode_plain / decode_lora8, "
                        "sampler_b1 / _b8 / _b32 / _b128), grpo_whole / grpo_once (ours, prompt_once off / on), grpo_l28, "
                        "sft_l28, grpo_full_l28, grpo_whole_l28")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--sides", default="upstream,ours",
                   help="which sides run: upstream,ours (default), ours or upstream")
    p.add_argument("--platform", default="tpu", choices=["tpu", "cpu", "auto"], help="JAX_PLATFORMS for each side")
    p.add_argument("--tiny", action="store_true", help="tiny shapes: checks the driver itself (e.g. on a CPU)")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ROOT / "tpu_compare_out")))
    p.add_argument("--wheels", type=Path, default=ROOT / ".whl-tpu" / "compare")
    p.add_argument("--site", type=Path, default=Path("/tmp/tpu_compare/site"))
    p.add_argument("--state", type=Path, default=Path("/tmp/tpu_compare/rows.jsonl"),
                   help="rows of earlier calls (skipped when done); '' for none")
    p.add_argument("--prior", nargs="*", type=Path, default=[],
                   help="earlier calls' tpu_compare.json (or rows): their finished jobs are skipped and summarised too")
    p.add_argument("--index-url", default="file:///opt/pypi/simple", help="the image's own package index")
    p.add_argument("--dry-run", action="store_true", help="print the plan (each job's command and PYTHONPATH) only")
    p.add_argument("--summarize", nargs="+", type=Path, help="merge these rows / summary files and print the summary")
    args = p.parse_args(argv)
    if args.summarize:
        print(json.dumps(summarize(load_rows(args.summarize), {"merged_from": [str(x) for x in args.summarize]})))
        return 0
    start = time.time()
    deadline = start + args.budget
    parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    known = set(work(args.tiny)) | {"sampler", "decode"}
    if set(parts) - known:
        p.error(f"--parts: unknown {sorted(set(parts) - known)}; allowed: {sorted(known)}")
    sides = [x for x in args.sides.split(",") if x]
    if not sides or set(sides) - set(SIDES):
        raise SystemExit(f"--sides takes upstream and/or ours, got {args.sides!r}")
    jobs = [j for j in plan(parts, args.rounds, args.tiny) if j[2] in sides]
    specs = work(args.tiny)
    if args.dry_run:
        for part, rnd, side in jobs:
            ours, theirs = specs[part]
            argv = ours if side == "ours" else theirs
            print(json.dumps(dict(part=part, round=rnd, side=side, argv=argv,
                                  PYTHONPATH=side_env(side, args.site, args.platform)["PYTHONPATH"])))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    state = args.state if str(args.state) not in ("", ".") else None
    if state:
        state.parent.mkdir(parents=True, exist_ok=True)
    earlier = load_rows(([state] if state else []) + list(args.prior))
    installed = install(args.wheels, args.site, args.index_url)
    print(json.dumps({"install": installed, "install_s": round(time.time() - start, 1)}), flush=True)
    rows, skipped = [], []
    done = {(r["part"], r["round"], r["side"]) for r in earlier if ok(r) or (r.get("rc") and not r.get("timed_out"))}
    for part, rnd, side in jobs:
        if (part, rnd, side) in done:
            continue
        past = [r["wall_s"] for r in earlier + rows if r["part"] == part and r["side"] == side and ok(r)]
        cold = COLD_S[part] if not args.tiny else 30
        guess = min(past) * WARM_FACTOR if past else cold
        left = deadline - time.time()
        if guess > left:
            skipped.append(dict(part=part, round=rnd, side=side, needs_s=round(guess), left_s=round(left)))
            continue
        ours, theirs = specs[part]
        argv = list(ours if side == "ours" else theirs)
        if part == "trace":
            argv += ["--trace-dir", str(args.out / "trace")]
        if part.startswith("sampler") and args.platform == "tpu":
            argv += ["--peak-gbs", "819"]  # TPU v5e's published HBM bandwidth: a second roofline (ours; upstream ignores it)
        rec = dict(part=part, round=rnd, side=side, argv=argv[1:] if argv[0].endswith(".py") else argv,
                   **run_job(argv, side_env(side, args.site, args.platform), deadline - time.time()))
        rows.append(rec)
        if state:
            with open(state, "a") as f:
                f.write(json.dumps(rec) + "\n")
        brief = {k: rec["result"].get(k) for k in ("median_step_s", "tokens_per_s", "pipelined_s_per_step",
                                                   "first_step_s", "first_call_s") if k in rec.get("result", {})}
        print(json.dumps(dict(part=part, round=rnd, side=side, rc=rec["rc"], timed_out=rec["timed_out"],
                              wall_s=rec["wall_s"], **brief, **({"tail": rec["tail"][-600:]} if "tail" in rec else {}))),
              flush=True)
    extra = dict(budget_s=args.budget, used_s=round(time.time() - start, 1), skipped=skipped, install=installed,
                 tiny=args.tiny, platform=args.platform, this_call=[(r["part"], r["round"], r["side"]) for r in rows])
    summary = summarize(earlier + rows, extra)
    (args.out / "tpu_compare.json").write_text(json.dumps(summary, indent=1))
    brief = {k: v for k, v in summary.items() if k != "rows"}
    print(json.dumps(brief))
    return 0


if __name__ == "__main__":
    sys.exit(main())
