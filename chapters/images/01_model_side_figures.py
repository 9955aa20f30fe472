"""Draws the figures of chapters/01_model_side.md.

    python chapters/images/01_model_side_figures.py      # from the repository root

writes, next to this file:
  01_decoder_layers.svg    one decoder layer of Llama 3, Qwen 3 and Gemma 3 side by side
  01_checkpoint_to_nnx.svg HF safetensors keys of one Qwen3-0.6B layer -> NNX paths -> mesh placement
  01_window_padding.svg    a sliding-window mask with left padding: measured in slots vs. against positions

The second figure reads shapes and partition specs from tunix_lit itself (nnx.eval_shape, no
weights are allocated), so it stays true to the code when the code changes.
"""

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import FancyBboxPatch, Rectangle

HERE = Path(__file__).resolve().parent
plt.rcParams.update({
    "svg.fonttype": "none",  # keep text as text: small files, selectable labels
    "svg.hashsalt": "tunix-lit",  # stable element ids, so regenerating gives a clean diff
    "font.family": "DejaVu Sans",
    "font.size": 10,
})
SAME = dict(face="#e8eef7", edge="#5b7db1")  # as in Llama 3
DIFF = dict(face="#fde3c8", edge="#d9822b")  # differs from Llama 3
MONO = "DejaVu Sans Mono"


def _box(ax, x, y, w, h, text, style, size=9.5, sub=None):
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.12",
                                fc=style["face"], ec=style["edge"], lw=1.3, zorder=3))
    dy = 0.13 if sub else 0
    ax.text(x, y + dy, text, ha="center", va="center", fontsize=size, zorder=4)
    if sub:
        ax.text(x, y - 0.2, sub, ha="center", va="center", fontsize=7.2, family=MONO, color="#444", zorder=4)


def _arrow(ax, x0, y0, x1, y1, color="#333"):
    ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                arrowprops=dict(arrowstyle="-|>", color=color, lw=1.1, shrinkA=0, shrinkB=0), zorder=2)


def _add(ax, x, y):
    ax.add_patch(plt.Circle((x, y), 0.17, fc="white", ec="#333", lw=1.1, zorder=3))
    ax.text(x, y - 0.01, "+", ha="center", va="center", fontsize=12, zorder=4)


def decoder_layers():
    """Three columns, one decoder layer each; orange marks what differs from Llama 3."""
    fams = {
        "Llama 3": dict(
            note="3.2-1B: N 32, K 8, H 64",
            embed=("embed tokens", SAME), pre="RMSNorm  w·x̂", pre_style=SAME,
            qk=None, rope=("RoPE θ 500 000", "+ llama3 scaling ×32", SAME),
            attn=("causal softmax over all slots", SAME),
            post_attn=None, act=("silu", SAME), post_mlp=None,
            keys=("input_layernorm", "post_attention_layernorm"),
            head=("LM head: x·Eᵀ (tied in 3.2)", SAME)),
        "Qwen 3": dict(
            note="0.6B: N 16, K 8, H 128",
            embed=("embed tokens", SAME), pre="RMSNorm  w·x̂", pre_style=SAME,
            qk=("q/k RMSNorm on each head", DIFF), rope=("RoPE θ 1 000 000", None, DIFF),
            attn=("causal softmax over all slots", SAME),
            post_attn=None, act=("silu", SAME), post_mlp=None,
            keys=("input_layernorm", "post_attention_layernorm"),
            head=("LM head: x·Eᵀ (tied ≤ 4B)", SAME)),
        "Gemma 3": dict(
            note="1B: N 4, K 1, H 256",
            embed=("embed tokens × √D", DIFF), pre="RMSNorm  (1+w)·x̂", pre_style=DIFF,
            qk=("q/k RMSNorm on each head", DIFF),
            rope=("RoPE θ 10 000 local", "θ 1 000 000 global", DIFF),
            attn=("local: window 512 slots", DIFF),
            post_attn=("RMSNorm  (1+w)·x̂", "post_attention_layernorm"),
            act=("gelu_tanh", DIFF),
            post_mlp=("RMSNorm  (1+w)·x̂", "post_feedforward_layernorm"),
            keys=("input_layernorm", "pre_feedforward_layernorm"),
            head=("LM head: x·Eᵀ (always tied)", SAME)),
    }
    fig, ax = plt.subplots(figsize=(11.4, 11.0))
    ax.set_xlim(0, 12.4)
    ax.set_ylim(-18.0, 1.0)
    ax.axis("off")
    W = 3.2
    y = dict(embed=-0.9, pre=-2.2, post_attn=-6.95, add1=-7.85, pre_mlp=-8.75,
             mlp=-10.15, post_mlp=-11.55, add2=-12.45, final=-13.7, head=-14.9)
    for col, (name, f) in enumerate(fams.items()):
        x = 2.2 + 4.1 * col
        ax.text(x, 0.55, name, ha="center", fontsize=13, weight="bold")
        ax.text(x, 0.12, f["note"], ha="center", fontsize=8.5, color="#555")
        _box(ax, x, y["embed"], W, 0.6, f["embed"][0], f["embed"][1], sub="model.embed_tokens")
        # the repeated layer
        ax.add_patch(Rectangle((x - W / 2 - 0.5, -12.85), W + 0.85, 11.35, fill=False, ls=(0, (4, 3)),
                               ec="#999", lw=1, zorder=1))
        ax.text(x + W / 2 + 0.3, -12.7, "× L layers", ha="right", va="bottom", fontsize=8.5, color="#777")
        _box(ax, x, y["pre"], W, 0.62, f["pre"], f["pre_style"], sub=f["keys"][0])
        # attention, drawn as a tall box with its steps inside
        top, bot = -2.75, -6.4
        ax.add_patch(FancyBboxPatch((x - W / 2, bot), W, top - bot, boxstyle="round,pad=0.02,rounding_size=0.12",
                                    fc="#f6f8fb", ec=SAME["edge"], lw=1.3, zorder=2))
        ax.text(x, top - 0.25, "attention (GQA)", ha="center", fontsize=9.5, weight="bold", zorder=4)
        ax.text(x, top - 0.52, "self_attn.{q,k,v}_proj", ha="center", fontsize=7.2, family=MONO, color="#444",
                zorder=4)
        rows = [("q, k, v projections", None, SAME)]
        rows.append((f["qk"][0], None, f["qk"][1]) if f["qk"] else None)
        rows.append(f["rope"])
        rows.append((f["attn"][0], None, f["attn"][1]))
        rows.append(("o projection", None, SAME))
        ys = np.linspace(top - 0.9, bot + 0.32, len(rows))
        for yy, r in zip(ys, rows):
            if r is None:
                ax.text(x, yy, "(no q/k norm)", ha="center", va="center", fontsize=8, color="#999", zorder=4)
                continue
            text, sub, st = r
            hb = 0.24 if sub is None else 0.29
            ax.add_patch(FancyBboxPatch((x - W / 2 + 0.18, yy - hb), W - 0.36, 2 * hb,
                                        boxstyle="round,pad=0.01,rounding_size=0.08",
                                        fc=st["face"], ec=st["edge"], lw=0.9, zorder=3))
            label = text if sub is None else f"{text}\n{sub}"
            ax.text(x, yy, label, ha="center", va="center", fontsize=8.2 if sub is None else 7.8, zorder=4,
                    linespacing=1.1)
        if f["post_attn"]:
            _box(ax, x, y["post_attn"], W, 0.62, f["post_attn"][0], DIFF, sub=f["post_attn"][1])
        _add(ax, x, y["add1"])
        _box(ax, x, y["pre_mlp"], W, 0.62, f["pre"], f["pre_style"], sub=f["keys"][1])
        act, act_style = f["act"]
        _box(ax, x, y["mlp"], W, 0.8, f"MLP: down({act}(gate)·up)", act_style, sub="mlp.{gate,up,down}_proj")
        if f["post_mlp"]:
            _box(ax, x, y["post_mlp"], W, 0.62, f["post_mlp"][0], DIFF, sub=f["post_mlp"][1])
        _add(ax, x, y["add2"])
        _box(ax, x, y["final"], W, 0.62, "final " + f["pre"], f["pre_style"], sub="model.norm")
        _box(ax, x, y["head"], W, 0.62, f["head"][0], f["head"][1], sub="lm_head (absent when tied)")
        # main path
        chain = [y["embed"] - 0.3, y["pre"] + 0.31, None, y["pre"] - 0.31, top, None, bot,
                 (y["post_attn"] + 0.31) if f["post_attn"] else y["add1"] + 0.17]
        _arrow(ax, x, chain[0], x, chain[1])
        _arrow(ax, x, chain[3], x, chain[4])
        _arrow(ax, x, chain[6], x, chain[7])
        if f["post_attn"]:
            _arrow(ax, x, y["post_attn"] - 0.31, x, y["add1"] + 0.17)
        _arrow(ax, x, y["add1"] - 0.17, x, y["pre_mlp"] + 0.31)
        _arrow(ax, x, y["pre_mlp"] - 0.31, x, y["mlp"] + 0.4)
        if f["post_mlp"]:
            _arrow(ax, x, y["mlp"] - 0.4, x, y["post_mlp"] + 0.31)
            _arrow(ax, x, y["post_mlp"] - 0.31, x, y["add2"] + 0.17)
        else:
            _arrow(ax, x, y["mlp"] - 0.4, x, y["add2"] + 0.17)
        _arrow(ax, x, y["add2"] - 0.17, x, y["final"] + 0.31)
        _arrow(ax, x, y["final"] - 0.31, x, y["head"] + 0.31)
        # residual paths on the left
        xr = x - W / 2 - 0.3
        for y0, y1 in ((y["pre"] + 0.55, y["add1"]), (y["add1"] - 0.3, y["add2"])):
            ax.plot([x, xr, xr], [y0, y0, y1], color="#888", lw=1.1, zorder=1)
            _arrow(ax, xr, y1, x - 0.17, y1, color="#888")
    # legend and the Gemma 3 layer pattern
    _box(ax, 1.2, -15.95, 1.7, 0.45, "as in Llama 3", SAME, size=8.5)
    _box(ax, 3.2, -15.95, 1.9, 0.45, "differs from Llama 3", DIFF, size=8.5)
    ax.text(4.4, -15.95, "grey mono text: the HF checkpoint key of that module (per layer: model.layers.{i}.…)",
            va="center", fontsize=8, color="#444")
    ax.text(0.35, -16.75, "Gemma 3 layer kinds (1B, 26 layers):", fontsize=8.5, va="center")
    kinds = ["G" if (i + 1) % 6 == 0 else "L" for i in range(26)]
    for i, k in enumerate(kinds):
        st = DIFF if k == "G" else SAME
        ax.add_patch(Rectangle((3.75 + i * 0.3, -16.95), 0.27, 0.4, fc=st["face"], ec=st["edge"], lw=0.8))
        ax.text(3.75 + i * 0.3 + 0.135, -16.75, k, ha="center", va="center", fontsize=7)
    ax.text(0.35, -17.45, "L = local (sliding window 512, θ 10 000), G = global (all slots, θ 1 000 000): "
            "5 local : 1 global, repeated.", fontsize=8.5, va="center")
    fig.savefig(HERE / "01_decoder_layers.svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)


def checkpoint_to_nnx():
    """One Qwen3-0.6B layer: HF key [shape] -> transform -> NNX path [shape], logical names, spec on a (2, 4) mesh."""
    sys.path.insert(0, str(HERE.parents[1]))
    import jax
    from flax import nnx

    from tunix_lit.models.transformer import ModelConfig, Transformer, logical_to_mesh

    cfg = ModelConfig.from_name("qwen3-0.6b")
    abstract = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))
    state = nnx.state(abstract, nnx.Param)
    specs = nnx.get_partition_spec(state)
    flat = {}
    for (path, leaf), (_, spec) in zip(jax.tree_util.tree_flatten_with_path(state)[0],
                                       jax.tree_util.tree_flatten_with_path(specs)[0]):
        parts = [str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in path]
        parts = [p for p in parts if p != "value"]  # the Variable's own .value attribute
        names = tuple(spec) if spec is not None else ()
        flat[".".join(parts)] = (tuple(leaf.shape), names)
    D, N, K, H, F, V = (cfg.embed_dim, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.hidden_dim,
                        cfg.vocab_size)
    T, R = "transpose", "reshape + transpose"  # split heads first: the result stays a view of the file
    rows = [  # (HF key, HF shape [out, in] as torch stores it, transform, NNX path)
        ("model.embed_tokens.weight", (V, D), "as is", "embedder.embedding"),
        ("…layers.0.input_layernorm.weight", (D,), "as is", "layers.0.pre_attn_norm.scale"),
        ("…layers.0.self_attn.q_proj.weight", (N * H, D), R, "layers.0.attn.q_proj.kernel"),
        ("…layers.0.self_attn.k_proj.weight", (K * H, D), R, "layers.0.attn.k_proj.kernel"),
        ("…layers.0.self_attn.v_proj.weight", (K * H, D), R, "layers.0.attn.v_proj.kernel"),
        ("…layers.0.self_attn.q_norm.weight", (H,), "as is", "layers.0.attn.q_norm.scale"),
        ("…layers.0.self_attn.k_norm.weight", (H,), "as is", "layers.0.attn.k_norm.scale"),
        ("…layers.0.self_attn.o_proj.weight", (D, N * H), R, "layers.0.attn.o_proj.kernel"),
        ("…layers.0.post_attention_layernorm.weight", (D,), "as is", "layers.0.pre_mlp_norm.scale"),
        ("…layers.0.mlp.gate_proj.weight", (F, D), T, "layers.0.mlp.gate_proj.kernel"),
        ("…layers.0.mlp.up_proj.weight", (F, D), T, "layers.0.mlp.up_proj.kernel"),
        ("…layers.0.mlp.down_proj.weight", (D, F), T, "layers.0.mlp.down_proj.kernel"),
        ("model.norm.weight", (D,), "as is", "final_norm.scale"),
        ("(no lm_head.weight: tied)", None, "", "(LM head = embedder.attend)"),
    ]
    mesh_axes = {"fsdp": 2, "tp": 4}
    fig, ax = plt.subplots(figsize=(15.6, 7.0))
    ax.set_xlim(0, 15.6)
    ax.set_ylim(-len(rows) - 1.0, 1.3)
    ax.axis("off")
    heads = [(0.1, "safetensors key  [shape as stored]"), (5.45, "transform"),
             (7.05, "NNX path  [shape]"), (11.45, "logical axis names"), (13.85, "spec on (fsdp=2, tp=4)")]
    for xh, t in heads:
        ax.text(xh, 0.75, t, fontsize=10, weight="bold", va="center")
    ax.text(0.1, 0.25, f"Qwen3-0.6B, layer 0 of {cfg.num_layers}  (D {D}, N {N}, K {K}, H {H}, F {F}, V {V})",
            fontsize=8.5, color="#555", va="center")
    for i, (key, hf_shape, how, path) in enumerate(rows):
        yy = -i - 0.45
        trap = "post_attention_layernorm" in key
        st = DIFF if trap else SAME
        shape_txt = "" if hf_shape is None else f"  {list(hf_shape)}"
        ax.add_patch(FancyBboxPatch((0.05, yy - 0.3), 5.1, 0.6, boxstyle="round,pad=0.01,rounding_size=0.08",
                                    fc=st["face"], ec=st["edge"], lw=0.9))
        ax.text(0.15, yy, key + shape_txt, fontsize=7.9, family=MONO, va="center")
        if path.startswith("("):
            ax.text(7.05, yy, path, fontsize=7.9, family=MONO, va="center", color="#555")
            continue
        shape, names = flat[path]
        spec = logical_to_mesh(names, shape, mesh_axes)
        _arrow(ax, 5.2, yy, 6.95, yy, color="#777")
        if how:
            ax.text(6.07, yy + 0.13, how, fontsize=7.2, ha="center", va="bottom", color="#444")
        ax.add_patch(FancyBboxPatch((7.0, yy - 0.3), 4.3, 0.6, boxstyle="round,pad=0.01,rounding_size=0.08",
                                    fc=st["face"], ec=st["edge"], lw=0.9))
        ax.text(7.08, yy, f"{path}  {list(shape)}", fontsize=7.9, family=MONO, va="center")
        ax.text(11.45, yy, "(" + ", ".join(names) + ")", fontsize=7.6, family=MONO, va="center", color="#333")
        spec_txt = "P(" + ", ".join("None" if s is None else repr(s) for s in spec) + ")"
        spec_txt = "replicated" if all(s is None for s in spec) else spec_txt
        ax.text(13.85, yy, spec_txt, fontsize=7.6, family=MONO, va="center", color="#333")
    ax.text(0.1, -len(rows) - 0.55,
            "Orange: same HF name, different job. In Llama/Qwen checkpoints post_attention_layernorm is the norm "
            "before the MLP; in Gemma 3 it is the norm after attention (the MLP's is pre_feedforward_layernorm).",
            fontsize=8, color="#8a4b0f", va="center")
    fig.savefig(HERE / "01_checkpoint_to_nnx.svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)


def window_padding():
    """Sliding-window masks for one left-padded row: band in slots vs band against positions."""
    S, pad, w = 12, 4, 3  # slots, left pads, window
    slots = np.arange(S)
    pos = np.maximum(slots - pad, 0)  # positions count real tokens only
    real = slots >= pad
    causal = slots[None, :] <= slots[:, None]
    key_ok = real[None, :] & real[:, None] & causal
    by_slot = key_ok & (slots[:, None] - slots[None, :] < w)
    by_pos = key_ok & (np.abs(slots[None, :] - pos[:, None]) < w)  # key slot vs query position
    fig, axes = plt.subplots(1, 2, figsize=(9.6, 4.6))
    titles = [f"band measured in slots (this book, HF)\nq_slot − k_slot < {w}",
              f"band against positions (upstream Gemma 1/2)\n|k_slot − q_position| < {w}"]
    for ax, m, title in zip(axes, (by_slot, by_pos), titles):
        img = np.ones((S, S, 3))
        img[~real] = img[:, ~real] = (0.93, 0.93, 0.93)  # pad rows and columns
        img[m] = matplotlib.colors.to_rgb(SAME["edge"])
        ax.imshow(img, interpolation="nearest")
        ax.set_xticks(range(S), [f"{s}" for s in slots], fontsize=7.5)
        ax.set_yticks(range(S), [f"{s}" if not r else f"{s} (p{p})" for s, p, r in zip(slots, pos, real)],
                      fontsize=7.5)
        ax.set_xlabel("key slot", fontsize=9)
        ax.set_ylabel("query slot (position)", fontsize=9)
        ax.set_title(title, fontsize=9.5)
        ax.set_xticks(np.arange(-0.5, S), minor=True)
        ax.set_yticks(np.arange(-0.5, S), minor=True)
        ax.grid(which="minor", color="white", lw=1)
        ax.tick_params(which="minor", length=0)
        for q in range(S):
            if real[q] and not m[q].any():
                ax.text(S - 0.6, q, "nothing visible", fontsize=7, va="center", ha="right", color="#b23b3b")
    fig.suptitle(f"One row with {pad} left pads (grey), window {w}: every query should see itself and the "
                 f"{w - 1} real tokens before it", fontsize=10)
    fig.tight_layout()
    fig.savefig(HERE / "01_window_padding.svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)


if __name__ == "__main__":
    decoder_layers()
    checkpoint_to_nnx()
    window_padding()
