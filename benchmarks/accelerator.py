"""One prepared device check: the sampler, a GRPO step and a LoRA SFT step at ~1B parameters, and the numerics tests.

Made for a short loan of an accelerator machine (the `device` tool's `run`): every part is bounded in time,
each benchmark prints its usual JSON line (with the `machine` it ran on), and everything lands in one file.

    python benchmarks/accelerator.py --out $OUT/accelerator.jsonl [--budget-s 480] [--quick]

Parts, in order (each skipped with a note once the budget is spent):

1. `sampler.py` on a random Gemma 3 1B configuration (26 layers × 1152, 4 query heads and 1 KV head of
   256, MLP 6912, vocabulary 262,144, tied embedding) in bfloat16 at batch 1, 8, 32 and 128, with the
   roofline measured (weights + KV cache bytes per step ÷ the measured device bandwidth);
2. `grpo_step.py` (full fine-tune, and with `--parts` also LoRA rank 8) and `sft_step.py --lora-rank 8` at that
   size, with their phase times (`--rl-micro-batch` splits the GRPO forward/backward to fit a small chip);
3. the model and RL numerics tests (the sampler is exercised by part 1) on the accelerator (`JAX_PLATFORMS` set to the device's
   platform; tests that need the 8 fake CPU devices of a mesh are deselected by name and counted).

On a CPU it runs too (`--quick` shrinks the model), which is how it is checked before device time is spent.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

GEMMA3_1B = ["--arch", "gemma3", "--num-layers", "26", "--embed-dim", "1152", "--hidden-dim", "6912",
             "--num-heads", "4", "--num-kv-heads", "1", "--head-dim", "256", "--vocab-size", "262144",
             "--tied-embedding", "1", "--dtype", "bfloat16"]
QUICK = ["--arch", "gemma3", "--num-layers", "2", "--embed-dim", "128", "--hidden-dim", "256", "--num-heads", "2",
         "--num-kv-heads", "1", "--head-dim", "64", "--vocab-size", "1024", "--tied-embedding", "1",
         "--dtype", "bfloat16"]
NUMERICS = ["tests/models/test_transformer.py", "tests/models/test_placement.py",
            "tests/rl/test_algo_core.py", "tests/rl/test_common.py"]
NEEDS_MESH = "not mesh and not shard and not fsdp and not sharded and not devices"  # 8 fake CPU devices


def run_part(name, argv, out, deadline, env=None):
    """Run one part as a subprocess bounded by the deadline; append its JSON lines (or its failure) to `out`."""
    left = deadline - time.time()
    if left < 20:
        rec = {"part": name, "skipped": "budget spent"}
    else:
        t0 = time.time()
        try:
            p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=left,
                               env={**os.environ, **(env or {})})
            lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
            rec = {"part": name, "rc": p.returncode, "wall_s": round(time.time() - t0, 1),
                   "results": [json.loads(l) for l in lines],
                   "tail": (p.stdout + p.stderr)[-3000:] if p.returncode or not lines else ""}
        except subprocess.TimeoutExpired as e:
            rec = {"part": name, "timed_out_s": round(left, 1), "tail": str(e.stdout or "")[-2000:]}
    with open(out, "a") as f:
        f.write(json.dumps(rec) + "\n")
    print(json.dumps({k: v for k, v in rec.items() if k != "results"} | {
        "figures": [{k: r.get(k) for k in ("batch", "tokens_per_s", "median_step_s", "roofline") if k in r}
                    for r in rec.get("results", [])]}), flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="accelerator.jsonl")
    p.add_argument("--budget-s", type=float, default=480.0, help="stop starting parts after this many seconds")
    p.add_argument("--quick", action="store_true", help="a small model: checks the script itself, e.g. on a CPU")
    p.add_argument("--batches", default="1,8,32,128")
    p.add_argument("--rl-batch", type=int, default=8, help="GRPO prompts per step (x 4 generations)")
    p.add_argument("--sft-batch", type=int, default=8, help="LoRA SFT sequences of 512 per step")
    p.add_argument("--peak-gbs", type=float, default=0.0,
                   help="the device's published HBM bandwidth in GB/s (H200 4800, TPU v5e 819): a second ceiling")
    p.add_argument("--rl-micro-batch", type=int, default=0,
                   help="GRPO prompts per forward/backward (0 = the whole batch); a 16 GB chip needs 1 at 1B, full fine-tune")
    p.add_argument("--parts", default="sampler,grpo,sft_lora8,tests",
                   help="comma-separated subset of sampler, grpo, grpo_lora8, sft_lora8, tests, run in that order")
    p.add_argument("--tests-s", type=float, default=170.0,
                   help="seconds kept for the numerics tests at the end (the H200 run needed ~140 s)")
    args = p.parse_args(argv)
    end = time.time() + args.budget_s
    model = QUICK if args.quick else GEMMA3_1B
    py = sys.executable
    parts = {x.strip() for x in args.parts.split(",") if x.strip()}
    unknown = parts - {"sampler", "grpo", "grpo_lora8", "sft_lora8", "tests"}
    if unknown:
        p.error(f"unknown parts {sorted(unknown)}")
    deadline = end - (args.tests_s if "tests" in parts else 0)  # the benchmarks leave the tests their share
    for b in [int(x) for x in args.batches.split(",") if x.strip()] if "sampler" in parts else []:
        run_part(f"sampler_b{b}", [py, "benchmarks/sampler.py", *model, "--batch", str(b), "--prompt-len", "128",
                                   "--gen-len", "128", "--repeats", "3", "--roofline", "on",
                                   "--bw-mb", "64" if args.quick else "2048", "--peak-gbs", str(args.peak_gbs)],
                 args.out, deadline)
    grpo = [py, "benchmarks/grpo_step.py", *model, "--batch", str(args.rl_batch), "--num-generations", "4",
            "--prompt-len", "64", "--gen-len", "128", "--steps", "4", "--train-micro-batch", str(args.rl_micro_batch)]
    if "grpo" in parts:
        run_part("grpo_step", grpo, args.out, deadline)
    if "grpo_lora8" in parts:
        run_part("grpo_step_lora8", grpo + ["--lora-rank", "8"], args.out, deadline)
    if "sft_lora8" in parts:
        run_part("sft_lora8", [py, "benchmarks/sft_step.py", *model, "--batch", str(args.sft_batch), "--seq-len", "512",
                               "--steps", "6", "--pipelined-steps", "4", "--lora-rank", "8"], args.out, deadline)
    if "tests" in parts:
        # learn the platform in a process that exits: a TPU is held by one process at a time
        platform = subprocess.run([py, "-c", "import jax; print(jax.default_backend())"], capture_output=True,
                                  text=True).stdout.strip().splitlines()[-1]
        env = {"JAX_PLATFORMS": platform}
        if platform == "tpu":  # float32 products on a TPU default to bf16 passes; the tests compare formulas
            env["JAX_DEFAULT_MATMUL_PRECISION"] = "highest"
        # one pytest process (-n 0): two workers would each take most of the GPU's memory
        run_part("numerics_tests", [py, "-m", "pytest", "-q", "-n", "0", *NUMERICS, "-k", NEEDS_MESH],
                 args.out, end, env=env)


if __name__ == "__main__":
    main()
