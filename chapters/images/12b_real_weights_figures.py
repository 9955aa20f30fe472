"""Figures for chapters/12b_real_weights.md; run from the repo root: python chapters/images/12b_real_weights_figures.py

Reads the two real GGUF files (Gemma 3 270M's Q4_K_M file and SmolLM2-135M's Q4_1 file, fetched by name as the
package does) and writes what the chapter quotes into 12b_real_weights.json: the header read by hand, the tensor
types counted, which tensors fell back from a k-quant and why (their row width), the memory arithmetic, and one
real block of each format decoded by hand with the formula the chapter gives, checked against `gguf`'s decoder.
It also draws 12b_block_layouts.svg (the bytes of one block of each format) and 12b_gemma_types.svg (Gemma's
tensors by role and type, with their row widths).
"""
import collections
import json
import struct

import matplotlib
import matplotlib.patches

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

import gguf
from tunix_lit.models.gguf import dequantize_q4_k, resolve_gguf

plt.rcParams.update({"font.size": 10, "svg.fonttype": "none", "axes.spines.top": False, "axes.spines.right": False})
OUT = "chapters/images/"
QK_K = 256  # a k-quant super-block: a row must be a whole number of them


def header(path) -> dict:
    """The fixed start of a GGUF file, read with struct: magic, version, tensor count, metadata count."""
    with open(path, "rb") as f:
        magic, version, n_tensors, n_kv = struct.unpack("<4sIQQ", f.read(24))
    return {"magic": magic.decode(), "version": version, "tensor_count": n_tensors, "kv_count": n_kv}


def f16(b: np.ndarray) -> np.ndarray:
    """float16 stored in two little-endian bytes (last axis) -> float32."""
    return np.ascontiguousarray(b).view(np.float16).astype(np.float32)[..., 0]


def q8_0(block: np.ndarray) -> np.ndarray:
    """One Q8_0 block (34 bytes): d, then 32 signed bytes; x = d·q."""
    return f16(block[0:2]) * block[2:34].view(np.int8).astype(np.float32)


def q5_0(block: np.ndarray) -> np.ndarray:
    """One Q5_0 block (22 bytes): d, 4 bytes of fifth bits, 16 bytes of nibbles; x = d·(q − 16)."""
    d, high = f16(block[0:2]), int.from_bytes(block[2:6].tobytes(), "little")
    nib = block[6:22]
    low = np.concatenate([nib & 0x0F, nib >> 4]).astype(np.int32)  # code i in byte i's low nibble, i+16 in its high
    fifth = np.array([(high >> i) & 1 for i in range(32)], np.int32)
    return d * ((low | (fifth << 4)) - 16).astype(np.float32)


def q6_k(block: np.ndarray) -> np.ndarray:
    """One Q6_K super-block (210 bytes): 128 B low nibbles, 64 B high 2-bit pairs, 16 int8 scales, d; x = d·s_j·(q − 32)."""
    ql, qh, sc, d = block[0:128], block[128:192], block[192:208].view(np.int8).astype(np.float32), f16(block[208:210])
    q = np.zeros(256, np.int32)
    for half in range(2):  # two halves of 128 weights, each from 64 bytes of ql and 32 of qh
        l, h = ql[64 * half:64 * half + 64].astype(np.int32), qh[32 * half:32 * half + 32].astype(np.int32)
        base = 128 * half
        for j in range(32):
            q[base + j] = (l[j] & 0x0F) | (((h[j] >> 0) & 3) << 4)
            q[base + j + 32] = (l[j + 32] & 0x0F) | (((h[j] >> 2) & 3) << 4)
            q[base + j + 64] = (l[j] >> 4) | (((h[j] >> 4) & 3) << 4)
            q[base + j + 96] = (l[j + 32] >> 4) | (((h[j] >> 6) & 3) << 4)
    return d * np.repeat(sc, 16) * (q - 32).astype(np.float32)


def check_block(tensor, decode, nbytes) -> dict:
    """Decode the first block of a real tensor by hand and compare it with gguf's decoder (must be equal)."""
    raw = np.asarray(tensor.data).reshape(-1)[:nbytes]
    ours = decode(raw)
    theirs = np.asarray(gguf.quants.dequantize(raw, tensor.tensor_type)).reshape(-1)
    np.testing.assert_array_equal(ours, theirs)
    return {"tensor": tensor.name, "weights": int(ours.size), "first": [round(float(v), 5) for v in ours[:3]],
            "equal_to_gguf": True}


def describe(path) -> tuple:
    """(record, reader) for one GGUF file."""
    reader = gguf.GGUFReader(str(path), "r")
    types = collections.Counter(t.tensor_type.name for t in reader.tensors)
    params = sum(int(np.prod(t.shape)) for t in reader.tensors)
    by_type_bytes = collections.Counter()
    by_type_params = collections.Counter()
    for t in reader.tensors:
        by_type_bytes[t.tensor_type.name] += int(t.n_bytes)
        by_type_params[t.tensor_type.name] += int(np.prod(t.shape))
    size = path.stat().st_size
    data_bytes = sum(by_type_bytes.values())
    return {
        "file": path.name, "file_bytes": size, "header": header(path),
        "alignment": int(reader.alignment), "data_offset": int(reader.data_offset),
        "metadata_keys": len([k for k in reader.fields if not k.startswith("GGUF.")]),
        "tensors": len(reader.tensors), "types": dict(types.most_common()),
        "params": params, "params_by_type": dict(by_type_params), "bytes_by_type": dict(by_type_bytes),
        "tensor_data_bytes": data_bytes, "bits_per_weight": 8 * data_bytes / params,
        "float32_bytes": 4 * params, "bfloat16_bytes": 2 * params,
    }, reader


def gemma_roles(reader) -> dict:
    """role (e.g. 'attn_q') -> {'row': row width, 'types': {type: count}} over Gemma's blocks and top tensors."""
    roles = {}
    for t in reader.tensors:
        role = t.name.split(".")[2] if t.name.startswith("blk.") else t.name.rsplit(".", 1)[0]
        entry = roles.setdefault(role, {"row": int(t.shape[0]), "shape": [int(s) for s in t.shape], "types": {}})
        entry["types"][t.tensor_type.name] = entry["types"].get(t.tensor_type.name, 0) + 1
    return roles


gemma_path, smol_path = resolve_gguf("gemma3-270m"), resolve_gguf("smollm2-135m")
gemma, g_reader = describe(gemma_path)
smol, s_reader = describe(smol_path)
roles = gemma_roles(g_reader)
matrices = [t for t in g_reader.tensors if len(t.shape) == 2]
not_k = [t for t in matrices if int(t.shape[0]) % QK_K]  # rows a k-quant super-block cannot tile
gemma.update(
    roles=roles,
    matrices=len(matrices),
    matrices_row_not_256=len(not_k),
    fallback_types=dict(collections.Counter(t.tensor_type.name for t in not_k)),
    k_quant_tensors=sum(1 for t in matrices if t.tensor_type.name.endswith("_K")),
    k_quant_rows=sorted({int(t.shape[0]) for t in matrices if t.tensor_type.name.endswith("_K")}),
    q5_0_share_of_matrices=sum(1 for t in matrices if t.tensor_type.name == "Q5_0") / len(matrices),
    q5_0_share_of_params=gemma["params_by_type"].get("Q5_0", 0) / gemma["params"],
    embedding_share_of_params=int(np.prod(g_reader.tensors[[t.name for t in g_reader.tensors].index("token_embd.weight")].shape)) / gemma["params"],
)
first = lambda name: next(t for t in g_reader.tensors if t.tensor_type.name == name)


def worked_q5_0(tensor) -> dict:
    """The first Q5_0 block of `tensor` taken apart: its scale, its first codes, and the weights they make."""
    block = np.asarray(tensor.data).reshape(-1)[:22]
    d, high = float(f16(block[0:2])), int.from_bytes(block[2:6].tobytes(), "little")
    low = np.concatenate([block[6:22] & 0x0F, block[6:22] >> 4]).astype(int)
    q = [int(low[i] | (((high >> i) & 1) << 4)) for i in range(4)]
    return {"tensor": tensor.name, "d": d, "q": q, "x": [d * (c - 16) for c in q],
            "bytes": " ".join(f"{b:02x}" for b in block[:8])}


gemma["worked_q5_0"] = worked_q5_0(first("Q5_0"))
gemma["checks"] = {"Q8_0": check_block(first("Q8_0"), q8_0, 34), "Q5_0": check_block(first("Q5_0"), q5_0, 22),
                   "Q6_K": check_block(first("Q6_K"), q6_k, 210),
                   "Q4_K": check_block(first("Q4_K"), dequantize_q4_k, 144)}
sizes = {n: gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[n]] for n in ("Q8_0", "Q5_0", "Q4_1", "Q4_K", "Q6_K")}
formats = {n: {"weights": w, "bytes": b, "bits_per_weight": 8 * b / w} for n, (w, b) in sizes.items()}
record = {"gemma3-270m": gemma, "smollm2-135m": smol, "formats": formats}
with open(OUT + "12b_real_weights.json", "w") as f:
    json.dump(record, f, indent=1)

# --- the bytes of one block of each format (colour = what the bytes are; a bar is one whole block)
ROLE = {"scale": ("#e8590c", "float16 scale d (and min / dmin)"), "sub": ("#2b8a3e", "sub-block scales (and mins)"),
        "high": ("#9c36b5", "high bits of the codes"), "low": ("#3a6ea5", "codes (their low bits)")}
layouts = {
    "Q8_0: 32 weights in 34 B": [("d", 2, "scale"), ("32 signed 8-bit codes", 32, "low")],
    "Q5_0: 32 weights in 22 B": [("d", 2, "scale"), ("fifth bits", 4, "high"), ("32 low nibbles", 16, "low")],
    "Q4_1: 32 weights in 20 B": [("d", 2, "scale"), ("m", 2, "scale"), ("32 nibbles", 16, "low")],
    "Q4_K: 256 weights in 144 B": [("d", 2, "scale"), ("dmin", 2, "scale"), ("8+8 six-bit", 12, "sub"),
                                   ("256 nibbles", 128, "low")],
    "Q6_K: 256 weights in 210 B": [("256 low nibbles", 128, "low"), ("256 high bit pairs", 64, "high"),
                                   ("16 int8", 16, "sub"), ("d", 2, "scale")],
}
fig, ax = plt.subplots(figsize=(10, 3.4))
for row, (name, parts) in enumerate(layouts.items()):
    total, x = sum(p[1] for p in parts), 0.0
    for label, nbytes, role in parts:
        w = nbytes / total
        ax.barh(row, w, left=x, color=ROLE[role][0], edgecolor="white", height=0.6)
        if w > 0.09:
            ax.text(x + w / 2, row, f"{label}, {nbytes} B", ha="center", va="center", color="white", fontsize=8)
        x += w
ax.set_yticks(range(len(layouts)), list(layouts))
ax.invert_yaxis()
ax.set_xticks([0, 0.25, 0.5, 0.75, 1], ["0", "¼", "½", "¾", "the whole block"])
ax.legend(handles=[matplotlib.patches.Patch(color=c, label=l) for c, l in ROLE.values()], ncol=4, fontsize=8,
          loc="upper center", bbox_to_anchor=(0.45, -0.12), frameon=False)
ax.set_title("one block of each format: its bytes in file order, as a share of the block")
fig.tight_layout()
fig.savefig(OUT + "12b_block_layouts.svg")
plt.close(fig)

# --- Gemma's tensors by role and type
colors = {"F32": "#adb5bd", "Q8_0": "#e8590c", "Q5_0": "#3a6ea5", "Q4_K": "#2b8a3e", "Q6_K": "#9c36b5"}
order = [r for r in ("token_embd", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")]
fig, ax = plt.subplots(figsize=(10, 3.4))
for i, role in enumerate(order):
    left = 0
    for name, n in sorted(roles[role]["types"].items()):
        ax.barh(i, n, left=left, color=colors[name], edgecolor="white", height=0.6)
        inside = n >= 4
        ax.text(left + n / 2 if inside else left + n + 0.2, i, f"{name} × {n}", ha="center" if inside else "left",
                va="center", color="white" if inside else colors[name], fontsize=8)
        left += n if inside else n + 2.6
    row = roles[role]["row"]
    ax.text(left + 0.3, i, f"rows of {row}" + ("" if row % QK_K else f" = {row // QK_K} × 256"), va="center",
            fontsize=8, color="#c92a2a" if row % QK_K else "#2b8a3e")
ax.set_yticks(range(len(order)), order)
ax.invert_yaxis()
ax.set_xlim(0, 26)
ax.set_xlabel("tensors in the file (18 blocks; token_embd once)")
ax.set_title("Gemma 3 270M 'Q4_K_M': a k-quant only where a row is a whole number of 256-weight super-blocks")
fig.tight_layout()
fig.savefig(OUT + "12b_gemma_types.svg")
plt.close(fig)
print(json.dumps({k: gemma[k] for k in ("types", "matrices", "matrices_row_not_256", "fallback_types",
                                        "k_quant_tensors", "bits_per_weight")}))
