"""Download, on a machine with network, every wheel the TPU comparison needs that the TPU image lacks.

    python benchmarks/tpu_prepare_wheels.py [--dest .whl-tpu/compare]

The lent TPU machine has jax / jaxlib 0.10.2, libtpu, numpy, ml_dtypes, scipy and opt_einsum preinstalled and
no network, so everything else both sides import travels with the working tree (`carry`, 64 MiB with the tree).
Three folders, each installed with `pip --no-deps --no-index` into its own target by `tpu_compare.py`:

- `common/`: what both sides import (flax, optax, qwix, orbax-checkpoint, tensorstore, ... at the versions
  this repository is measured with);
- `ours/`: this project's extra requirements (fastcore, omegaconf + antlr4, tokenizers, safetensors 0.8);
- `upstream/`: google-tunix 0.1.7 and what its training, RL and sampler paths import (metrax, clu,
  jaxtyping, perfetto, ..., safetensors 0.7, which tunix pins below 0.8). Its other requirements (grain,
  tensorflow-datasets, datasets, transformers, ...) are not imported on these paths; pandas and pillow are
  (two large wheels), and come from the TPU image's own index (`FROM_IMAGE_INDEX`).

Binary wheels are for CPython 3.11 on manylinux x86-64 (the TPU host). antlr4-python3-runtime 4.9.3 exists only
as an sdist, so it is built into a pure wheel here. Prints the folder sizes and the tracked tree's size, and
fails if the two exceed the carry limit.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CARRY_LIMIT = 64 * 2**20

COMMON = ["flax==0.12.8", "optax==0.2.8", "qwix==0.1.8", "orbax-checkpoint==0.12.8", "tensorstore==0.1.86",
          "tensorboardX==2.6.5", "protobuf==7.36.2", "treescope==0.1.10", "etils==1.15.0", "absl-py==2.5.1",
          "msgpack==1.2.4", "PyYAML==6.0.3", "tqdm==4.70.1", "typing_extensions==4.16.0", "rich==15.0.0",
          "markdown-it-py==4.3.0", "mdurl==0.1.2", "Pygments==2.21.0", "humanize==4.17.0", "aiofiles==25.1.0",
          "simplejson==4.3.0", "psutil==7.2.2", "nest_asyncio", "zipp==4.1.2", "importlib_resources",
          "fsspec==2026.9.0", "packaging==26.2", "sentencepiece==0.2.3", "Jinja2==3.1.6", "MarkupSafe==3.0.3",
          "omegaconf==2.4.0"]
OURS = ["fastcore==1.14.5", "safetensors==0.8.0", "tokenizers==0.23.3"]
UPSTREAM = ["google-tunix==0.1.7", "google-metrax==0.2.4", "clu==0.0.12", "jaxtyping", "wadler_lindig", "perfetto",
            "immutabledict", "ml-collections", "safetensors==0.7.0", "wrapt==2.1.2", "huggingface_hub==2.4.0",
            "python-dateutil", "six", "tzdata"]
# `import tunix` reaches pandas and pillow (its agentic trajectory logger): large wheels, which the TPU image's own
# index has, so tpu_compare.py installs these two from that index instead of carrying them
FROM_IMAGE_INDEX = {"upstream": ["pandas", "pillow"]}
SDIST_ONLY = {"common": ["antlr4-python3-runtime==4.9.3"]}
PLATFORM = ["--only-binary=:all:", "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
            "--abi", "abi3", "--abi", "none", "--platform", "manylinux_2_28_x86_64", "--platform",
            "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_27_x86_64",
            "--platform", "manylinux_2_12_x86_64", "--platform", "manylinux2010_x86_64", "--platform",
            "manylinux_2_5_x86_64", "--platform", "manylinux1_x86_64", "--platform", "any"]


def pip(*args):
    """pip with no config file (this machine's own constraints and indexes must not steer the download)."""
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
    subprocess.run([sys.executable, "-m", "pip", *args], check=True, env=env)


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def tree_bytes() -> int:
    """Bytes of the files a device call copies: tracked files plus untracked ones git does not ignore."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, check=True).stdout.split(b"\0")
    return sum((ROOT / os.fsdecode(p)).stat().st_size for p in out if p and (ROOT / os.fsdecode(p)).is_file())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dest", type=Path, default=ROOT / ".whl-tpu" / "compare")
    args = p.parse_args(argv)
    for side, names in (("common", COMMON), ("ours", OURS), ("upstream", UPSTREAM)):
        d = args.dest / side
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
        pip("download", "-q", "--no-deps", *PLATFORM, "-d", str(d), *names)
        for sdist in SDIST_ONLY.get(side, []):
            with tempfile.TemporaryDirectory() as t:
                pip("wheel", "-q", "--no-deps", "-w", t, sdist)
                for w in Path(t).glob("*.whl"):
                    shutil.copy(w, d)
    sizes = {side: folder_bytes(args.dest / side) for side in ("common", "ours", "upstream")}
    tree = tree_bytes()
    total = tree + sum(sizes.values())
    for side, n in sizes.items():
        print(f"{side:9s} {len(list((args.dest / side).glob('*.whl'))):3d} wheels  {n / 2**20:6.1f} MiB")
    print(f"tree      {tree / 2**20:6.1f} MiB (tracked + untracked, not ignored)")
    print(f"carry     {total / 2**20:6.1f} MiB of {CARRY_LIMIT / 2**20:.0f} MiB")
    if total > CARRY_LIMIT:
        raise SystemExit(f"too large to carry: {total} bytes > {CARRY_LIMIT}")


if __name__ == "__main__":
    main()
