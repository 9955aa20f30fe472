"""Gemma 3 270M's GGUF file -> an HF-style checkpoint directory (float32 safetensors + config + tokenizer), NumPy only.

A transport step for the accelerator machine, which has no torch or transformers: the 240 MB GGUF travels in
pieces, and this rebuilds the checkpoint there with llama.cpp's `gguf` reader alone. The config and tokenizer
files come from a directory written once by `transformers` here (`--like`); the weights must then equal that
directory's weights exactly (`--check` compares every tensor).

    python benchmarks/gemma_gguf_to_hf.py FILE.gguf OUT_DIR --like HF_DIR [--check]
"""
import argparse
import shutil
import sys
from pathlib import Path

import numpy as np

_NAMES = {  # GGUF name (after blk.N.) -> HF name (after model.layers.N.)
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
    "attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}


def hf_name(name: str) -> str:
    """The HF tensor name of a Gemma 3 GGUF tensor name."""
    stem = name.removesuffix(".weight")
    if stem == "token_embd":
        return "model.embed_tokens.weight"
    if stem == "output_norm":
        return "model.norm.weight"
    _, n, part = stem.split(".", 2)
    if part not in _NAMES:
        raise ValueError(f"unknown Gemma 3 GGUF tensor {name!r}")
    return f"model.layers.{n}.{_NAMES[part]}.weight"


def convert(path: Path) -> dict:
    """{HF name: float32 array} from the GGUF file (llama.cpp stores Gemma's RMSNorm weights as 1 + w)."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    out = {}
    for t in reader.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        w = w.reshape(tuple(int(d) for d in reversed(t.shape)))
        if t.name.endswith("norm.weight"):
            w = w - 1.0  # HF's Gemma norm multiplies by (1 + w)
        out[hf_name(t.name)] = np.ascontiguousarray(w)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("gguf_file", type=Path)
    p.add_argument("out_dir", type=Path)
    p.add_argument("--like", type=Path, required=True, help="directory with config.json and tokenizer files")
    p.add_argument("--check", action="store_true", help="compare every tensor with --like's model.safetensors")
    a = p.parse_args(argv)
    from safetensors.numpy import save_file

    tensors = convert(a.gguf_file)
    if a.check:
        from safetensors import safe_open

        with safe_open(str(a.like / "model.safetensors"), "np") as f:
            assert sorted(f.keys()) == sorted(tensors), "tensor names differ"
            worst = max(float(np.max(np.abs(f.get_tensor(k) - v))) for k, v in tensors.items())
        print(f"{len(tensors)} tensors; largest difference from transformers' load: {worst:g}")
        if worst > 1e-6:
            return 1
    a.out_dir.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        if (a.like / name).exists():
            shutil.copy(a.like / name, a.out_dir / name)
    save_file(tensors, str(a.out_dir / "model.safetensors"))
    print(f"wrote {a.out_dir}: {sum(v.size for v in tensors.values()):,} parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
