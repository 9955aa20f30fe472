"""How close a measured figure is to what the chip can do: model FLOPs utilisation and the HBM roofline.

    from limits import shape_of, train_flops, decode_bytes, mfu, roofline_fraction

Both are counted by formula from the benchmark's own flags (the model's shape and the work's sizes), never
from a profiler, so either side of a comparison can be scored the same way:

- **FLOPs of one forward pass** over `n` rows of `t` tokens: every matrix product counts 2 FLOPs a
  multiply-add, `2 · P_matmul` a token, where `P_matmul` is the parameters that enter a product (the layers'
  q, k, v, o, gate, up, down kernels and the LM head; the embedding lookup is a gather and counts nothing),
  plus attention's two products, `4 · L · heads · head_dim · t` a token at full length (PaLM's convention,
  which does not halve for the causal mask).
- **A training step** is the forward pass plus its backward pass: the backward pass takes the gradient with
  respect to the activations (as many FLOPs as the forward pass) and, for the weights that train, with respect
  to those weights (as many again). A full fine-tune is 3 forward passes; a LoRA step is 2 plus the adapters'
  own products (counted: `rank · (d_in + d_out)` a kernel).
- **A decode step's bytes** are the weights once (every parameter, embedding included, in the benchmark's
  dtype; a tied head is read once) plus, for each row, the K and V cache slots in use at that step.

Peaks are the chip's published figures: TPU v5e 197 TFLOP/s in bfloat16 and 819 GB/s of HBM bandwidth.
"""

from __future__ import annotations

V5E_BF16_FLOPS = 197e12
V5E_HBM_BYTES_S = 819e9
DTYPE_BYTES = {"bfloat16": 2, "float32": 4, "float16": 2}


def _flag(argv: list, name: str, default=None):
    """The value after `--name` in a benchmark's argv (the last one wins, as argparse does)."""
    value = default
    for i, a in enumerate(argv[:-1]):
        if a == f"--{name}":
            value = argv[i + 1]
    return value


def shape_of(argv: list) -> dict:
    """The model's shape and the work's sizes from a benchmark's flags (grpo_step / sft_step / sampler / upstream)."""
    get = lambda name, default=None, cast=int: cast(_flag(argv, name, default))
    return dict(layers=get("num-layers"), d=get("embed-dim"), ff=get("hidden-dim"), heads=get("num-heads"),
                kv_heads=get("num-kv-heads"), head_dim=get("head-dim"), vocab=get("vocab-size"),
                tied=bool(get("tied-embedding", 1)), dtype=_flag(argv, "dtype", "float32"),
                lora_rank=get("lora-rank", 0), batch=get("batch", 1),
                generations=get("num-generations", 1), prompt_len=get("prompt-len", 0), gen_len=get("gen-len", 0),
                seq_len=get("seq-len", 0))


def matmul_params(s: dict) -> int:
    """Parameters that enter a matrix product a token: the layers' kernels and the LM head."""
    attn = s["d"] * s["head_dim"] * (2 * s["heads"] + 2 * s["kv_heads"])  # q and o; k and v
    mlp = 3 * s["d"] * s["ff"]
    return s["layers"] * (attn + mlp) + s["vocab"] * s["d"]


def all_params(s: dict) -> int:
    """Every parameter a decode step reads (norms included; a tied head shares the embedding)."""
    norms = s["layers"] * (2 * s["d"] + 2 * s["head_dim"]) + s["d"]  # two RMSNorms a layer, qk-norms, final norm
    embed = s["vocab"] * s["d"] * (1 if s["tied"] else 2)
    return matmul_params(s) - s["vocab"] * s["d"] + embed + norms


def lora_params(s: dict) -> int:
    """LoRA adapter parameters on q, k, v, o, gate, up and down (zero without LoRA)."""
    r = s["lora_rank"]
    if not r:
        return 0
    q = s["heads"] * s["head_dim"]
    kv = s["kv_heads"] * s["head_dim"]
    per_layer = r * ((s["d"] + q) * 2 + (s["d"] + kv) * 2 + 3 * (s["d"] + s["ff"]))
    return s["layers"] * per_layer


def forward_flops(s: dict, rows: int, length: int) -> float:
    """FLOPs of one forward pass over `rows` sequences of `length` tokens (adapters included)."""
    per_token = 2 * (matmul_params(s) + lora_params(s)) + 4 * s["layers"] * s["heads"] * s["head_dim"] * length
    return float(per_token) * rows * length


def train_flops(s: dict, rows: int, length: int) -> float:
    """FLOPs of one training step: forward + gradient w.r.t. activations + w.r.t. the weights that train."""
    fwd = forward_flops(s, rows, length)
    if s["lora_rank"]:
        return 2 * fwd + 2.0 * lora_params(s) * rows * length  # frozen base: no weight gradient but the adapters'
    return 3 * fwd


def decode_bytes(s: dict, rows: int, prompt_len: int, gen_len: int) -> float:
    """Bytes a whole decode of `gen_len` tokens reads: weights each step plus each row's K/V slots in use."""
    b = DTYPE_BYTES.get(s["dtype"], 4)
    weights = (all_params(s) + lora_params(s)) * b
    per_slot = 2 * s["layers"] * s["kv_heads"] * s["head_dim"] * b  # K and V, every layer
    # step i (0-based) reads prompt_len + i filled slots per row
    slots = rows * (gen_len * prompt_len + gen_len * (gen_len - 1) / 2)
    return float(gen_len * weights + per_slot * slots)


def mfu(flops: float, seconds: float, peak: float = V5E_BF16_FLOPS) -> float | None:
    """Model FLOPs utilisation: FLOPs done per second over the chip's peak."""
    return round(flops / seconds / peak, 4) if seconds and seconds > 0 else None


def roofline_fraction(nbytes: float, seconds: float, bandwidth: float = V5E_HBM_BYTES_S) -> float | None:
    """The memory-bound floor (bytes / bandwidth) over the measured time: 1.0 is the roofline itself."""
    return round(nbytes / bandwidth / seconds, 4) if seconds and seconds > 0 else None


def sft_limits(argv: list, median_step_s: float | None, pipelined_s_per_step: float | None) -> dict:
    """An SFT row's MFU, synchronous and back to back, with the FLOPs it was scored on."""
    s = shape_of(argv)
    flops = train_flops(s, s["batch"], s["seq_len"])
    return dict(step_tflop=round(flops / 1e12, 3), mfu_sync=mfu(flops, median_step_s),
                mfu_back_to_back=mfu(flops, pipelined_s_per_step), peak_tflop_s=V5E_BF16_FLOPS / 1e12)


def grpo_limits(argv: list, phases: dict | None, median_step_s: float | None) -> dict:
    """A GRPO row: the decode's roofline fraction and the update's and reference pass's MFU (ours: phases timed)."""
    s = shape_of(argv)
    rows, length = s["batch"] * s["generations"], s["prompt_len"] + s["gen_len"]
    nbytes = decode_bytes(s, rows, s["prompt_len"], s["gen_len"])
    fwd = forward_flops({**s, "lora_rank": s["lora_rank"]}, rows, length)
    upd = train_flops(s, rows, length)
    out = dict(decode_gb=round(nbytes / 1e9, 3), decode_floor_s=round(nbytes / V5E_HBM_BYTES_S, 4),
               update_tflop=round(upd / 1e12, 3), ref_tflop=round(fwd / 1e12, 3))
    phases = phases or {}
    out["decode_roofline_fraction"] = roofline_fraction(nbytes, phases.get("generate"))  # prefill included: a floor
    out["update_mfu"] = mfu(upd, phases.get("update_and_sync"))  # the weight sync included
    out["ref_mfu"] = mfu(fwd, phases.get("ref_logps"))
    out["step_floor_s"] = round(nbytes / V5E_HBM_BYTES_S + (upd + fwd) / V5E_BF16_FLOPS, 4)
    out["step_fraction_of_floor"] = round(out["step_floor_s"] / median_step_s, 4) if median_step_s else None
    return out
