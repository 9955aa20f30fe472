"""Side check: build sglang-jax's real model classes for a tiny config on CPU and write their weight-state paths and shapes.

Run from a checkout of sglang-jax's python/ folder (jax 0.10.2, flax 0.12.x as in this project):
    STUB_ALLOW=fastapi,partial_json_parser JAX_PLATFORMS=cpu PYTHONPATH=<repo>/tools:. \
        python <repo>/tools/sglang_jax_side_state.py <repo>/tests/rollout/sglang_jax_tiny_state.json
"""
import json, sys
import _stub_missing  # noqa: F401  (stubs fastapi, partial_json_parser: server-side imports the model classes do not use)
import jax, jax.numpy as jnp
from flax import nnx
import transformers
from sgl_jax.srt.utils.mesh_utils import create_device_mesh
mesh = create_device_mesh(ici_parallelism=[1, -1], dcn_parallelism=[1, 1], devices=jax.devices()[:1])
out = {}
for fam, mod, cls, cfgcls in [("qwen3", "qwen3", "Qwen3ForCausalLM", transformers.Qwen3Config),
                             ("llama3", "llama", "LlamaForCausalLM", transformers.LlamaConfig)]:
    import importlib
    C = getattr(importlib.import_module(f"sgl_jax.srt.models.{mod}"), cls)
    for tied in (True, False):
        cfg = cfgcls(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=8, tie_word_embeddings=tied)
        with jax.set_mesh(mesh):
            m = nnx.eval_shape(lambda: C(cfg, mesh=mesh, dtype=jnp.float32))
        st = nnx.state(m, nnx.Param)
        out[f"{fam}/tied={tied}"] = {".".join(map(str, p)): list(v.get_value().shape) for p, v in nnx.to_flat_state(st)}
        print(mesh.axis_names, fam, tied, len(out[f"{fam}/tied={tied}"]))
json.dump(out, open(sys.argv[1], "w"), indent=1)
