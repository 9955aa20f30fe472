"""A NumPy decoder shared by the fake engines: reads an HF config, runs Llama 3 / Qwen 3 from canonical arrays.

It knows nothing of tunix_lit: it is written from the HF architectures (RMSNorm, half-split RoPE with
Llama 3 frequency scaling, grouped-query attention, SwiGLU) so that it doubles as an independent reference.
Each fake engine turns its own weight dictionary (its own names and layouts) into the canonical arrays below.
"""
import json
import math
from pathlib import Path

import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16
FORWARD_FAMILIES = ("llama", "qwen3")  # model_type values the NumPy forward runs (gemma3: layouts only)


def read_hf_config(model_dir) -> dict:
    """The config.json the engine was pointed at (text config of multimodal wrappers included)."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    return {**cfg, **cfg.get("text_config", {})}


def engine_dtype(name) -> np.dtype:
    """'bfloat16' / 'float32' / 'auto' (the config's torch_dtype) -> a NumPy dtype."""
    table = {"bfloat16": BF16, "float32": np.float32, "float": np.float32}
    if name not in table:
        raise ValueError(f"fake engine supports dtype bfloat16 or float32, got {name!r}")
    return np.dtype(table[name])


def dims(cfg: dict) -> dict:
    """The sizes an engine allocates from an HF config."""
    n = cfg["num_attention_heads"]
    return dict(V=cfg["vocab_size"], D=cfg["hidden_size"], F=cfg["intermediate_size"], L=cfg["num_hidden_layers"],
                N=n, K=cfg.get("num_key_value_heads", n), H=cfg.get("head_dim") or cfg["hidden_size"] // n)


def rope_inv_freq(cfg: dict, head_dim: int) -> np.ndarray:
    """Inverse frequencies [H/2] as HF computes them, with Llama 3 long-context scaling when configured."""
    base = cfg.get("rope_theta", 10_000.0)
    inv = 1.0 / base ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type", rs.get("type")) == "llama3":
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        wl = 2 * math.pi / inv
        smooth = (old / wl - lo) / (hi - lo)
        scaled = np.where(wl > old / lo, inv / factor, inv)
        mid = (wl <= old / lo) & (wl >= old / hi)
        inv = np.where(mid, (1 - smooth) * inv / factor + smooth * inv, scaled)
    elif rs.get("rope_type", rs.get("type")) == "linear":
        inv = inv / rs["factor"]
    return inv


def rms(x, w, eps):
    """RMSNorm over the last axis, weight multiplied after normalising (Llama / Qwen convention)."""
    x = x.astype(np.float32)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w.astype(np.float32)


def rope(x, pos, inv):
    """Rotate x [T, heads, H] at positions pos [T] (rotate_half convention)."""
    ang = pos[:, None].astype(np.float64) * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :].astype(np.float32), np.sin(ang)[:, None, :].astype(np.float32)
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


class Decoder:
    """Forward pass over canonical f32 arrays (bf16 weights are widened: the fake computes in f32 throughout).

    A real bf16 engine also rounds activations; on the tiny model that alone moves log-probs by 0.02-0.06
    (measured with `round_activations=True`), which says nothing about whether a sync is right, so the
    tests keep it off and check the weights' bf16 cast exactly instead.
    """

    def __init__(self, cfg: dict, head_dim: int, compute_dtype, round_activations: bool = False):
        if cfg["model_type"] not in FORWARD_FAMILIES:
            raise NotImplementedError(f"the fake engine's forward runs {FORWARD_FAMILIES}, not {cfg['model_type']!r}")
        self.cfg, self.H = cfg, head_dim
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.qk_norm = cfg["model_type"] == "qwen3"
        self.inv = rope_inv_freq(cfg, head_dim)
        self.bf16 = round_activations and np.dtype(compute_dtype) == np.dtype(BF16)

    def _r(self, x):
        return x.astype(BF16).astype(np.float32) if self.bf16 else x

    def step(self, w: dict, tokens, pos, kv: list):
        """Run tokens [T] at positions pos [T], appending to kv (per layer [k, v] lists of [K, Hx]); logits f32 [T, V]."""
        x = self._r(w["embed"][tokens].astype(np.float32))
        H, T = self.H, len(tokens)
        for i, lw in enumerate(w["layers"]):
            h = self._r(rms(x, lw["in_norm"], self.eps))
            q = self._r(np.einsum("td,dnh->tnh", h, lw["wq"]))
            k = self._r(np.einsum("td,dkh->tkh", h, lw["wk"]))
            v = self._r(np.einsum("td,dkh->tkh", h, lw["wv"]))
            if self.qk_norm:  # the norm covers the model's own head_dim; padded lanes stay zero
                q[..., :H] = rms(q[..., :H], lw["q_norm"], self.eps)
                k[..., :H] = rms(k[..., :H], lw["k_norm"], self.eps)
            q[..., :H], k[..., :H] = rope(q[..., :H], pos, self.inv), rope(k[..., :H], pos, self.inv)
            kv[i][0].extend(k)
            kv[i][1].extend(v)
            K_all, V_all = np.stack(kv[i][0]), np.stack(kv[i][1])  # [S, Kx, Hx]
            S, Kx, N = len(K_all), K_all.shape[1], q.shape[1]
            g = N // Kx
            qg = q.reshape(T, Kx, g, -1)
            scores = np.einsum("tkgh,skh->tkgs", qg, K_all) * H ** -0.5
            qpos = S - T + np.arange(T)
            scores = np.where(np.arange(S)[None, None, None, :] <= qpos[:, None, None, None], scores, -np.inf)
            scores = scores - scores.max(-1, keepdims=True)
            p = np.exp(scores)
            p /= p.sum(-1, keepdims=True)
            att = np.einsum("tkgs,skh->tkgh", p, V_all).reshape(T, N, -1)
            x = x + self._r(np.einsum("tnh,nhd->td", att, lw["wo"]))
            h = self._r(rms(x, lw["post_norm"], self.eps))
            gate, up = h @ lw["gate"], h @ lw["up"]
            act = gate / (1 + np.exp(-gate))
            x = x + self._r(self._r(act * up) @ lw["down"])
        x = self._r(rms(x, w["final_norm"], self.eps))
        return (x @ w["lm_head"]).astype(np.float32)


def sample_next(logits, *, temperature, top_k, top_p, rng):
    """One id from logits f32 [V] and the processed log-probs it was drawn from (greedy when temperature < 1e-5)."""
    raw = logits - logits.max()
    raw = raw - np.log(np.exp(raw).sum())
    if temperature < 1e-5:
        return int(np.argmax(logits)), raw, raw
    z = logits / temperature
    if top_k and 0 < top_k < len(z):
        kth = np.sort(z)[-top_k]
        z = np.where(z >= kth, z, -np.inf)
    if top_p is not None and top_p < 1.0:
        order = np.argsort(-z)
        p = np.exp(z[order] - z[order[0]])
        p /= p.sum()
        keep = np.cumsum(p) - p < top_p  # keep ids until the mass before them reaches top_p
        mask = np.full(len(z), False)
        mask[order[keep]] = True
        z = np.where(mask, z, -np.inf)
    z = z - z.max()
    proc = z - np.log(np.exp(z).sum())
    probs = np.exp(proc)
    idx = int(rng.choice(len(probs), p=probs / probs.sum()))
    return idx, raw, proc


def dummy_weights(shapes: dict, dtype, seed: int = 0) -> dict:
    """Random small weights, as an engine started with load_format='dummy' holds before the first sync."""
    rng = np.random.default_rng(seed)
    return {name: rng.uniform(-1e-3, 1e-3, shape).astype(dtype) for name, shape in shapes.items()}
