#!/usr/bin/env bash
# Set up the project's dependencies on the lent TPU machine (no network; its own index at /opt/pypi/simple).
#   source benchmarks/tpu_setup.sh     # then PYTHONPATH holds the machine's JAX first, then /tmp/site, /tmp/idx, the repo
# Carried wheels (.whl-tpu/*.whl: what the index lacks) go to /tmp/site without their dependencies; the rest comes
# from the index with its dependencies, one package at a time so that one missing name does not stop the others.
# Both folders stay while the machine is warm, so a second call skips what is there.
set -u
if [ ! -e /tmp/site/.done ]; then
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site .whl-tpu/*.whl && touch /tmp/site/.done
fi
if [ ! -e /tmp/idx/.done ]; then
  for name in ipython matplotlib msgpack rich treescope tensorstore etils absl-py prometheus-client aiofiles protobuf \
      humanize simplejson psutil uvloop opt_einsum requests tqdm pyyaml jinja2 tokenizers safetensors sentencepiece \
      ml_dtypes typing_extensions importlib_resources nest_asyncio packaging; do
    PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: --no-compile \
      --index-url file:///opt/pypi/simple --find-links /opt/wheels --target /tmp/idx "$name" >/dev/null 2>&1 \
      || echo "tpu_setup: $name did not install from the machine's index"
  done
  touch /tmp/idx/.done
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/site:/tmp/idx:$PWD
export PYTHONUNBUFFERED=1 JAX_COMPILATION_CACHE_DIR=/tmp/jaxcache
