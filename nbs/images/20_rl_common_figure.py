"""Draws nbs/images/20_rl_common.svg: where the RL common pieces sit between a rollout and a loss.

    python nbs/images/20_rl_common_figure.py      # from the repository root
"""
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch

HERE = Path(__file__).resolve().parent
plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "tunix-lit", "font.family": "DejaVu Sans",
                     "font.size": 10})
THIS = dict(face="#e8eef7", edge="#5b7db1")  # built in this chapter
OTHER = dict(face="#f2f2f2", edge="#999999")  # other chapters
MONO = "DejaVu Sans Mono"


def box(ax, x, y, w, h, text, style, sub=None):
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.1",
                                fc=style["face"], ec=style["edge"], lw=1.3, zorder=3))
    ax.text(x, y + (0.14 if sub else 0), text, ha="center", va="center", fontsize=9.5, zorder=4)
    if sub:
        ax.text(x, y - 0.17, sub, ha="center", va="center", fontsize=7.5, family=MONO, color="#444", zorder=4)


def arrow(ax, x0, y0, x1, y1, label=None):
    ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                arrowprops=dict(arrowstyle="-|>", color="#333", lw=1.1, shrinkA=0, shrinkB=0), zorder=2)
    if label:
        ax.text((x0 + x1) / 2, (y0 + y1) / 2 + 0.12, label, ha="center", fontsize=7.5, color="#555")


def main():
    fig, ax = plt.subplots(figsize=(10.5, 3.6))
    ax.set_xlim(0, 10.5)
    ax.set_ylim(0, 3.6)
    ax.axis("off")
    box(ax, 0.9, 2.7, 1.6, 0.7, "sampler", OTHER, "ragged ids, EOS last")
    box(ax, 3.15, 2.7, 2.3, 0.7, "pad_rows", THIS, "prompts left, completions right")
    box(ax, 5.85, 2.7, 2.3, 0.7, "make_completion_mask", THIS, "… up to and incl. EOS")
    box(ax, 8.95, 2.7, 2.5, 0.7, "TrainExample", THIS, "[B,P] [B,T] masks, advantages")
    arrow(ax, 1.7, 2.7, 2.0, 2.7)
    arrow(ax, 4.3, 2.7, 4.7, 2.7)
    arrow(ax, 7.0, 2.7, 7.7, 2.7)
    box(ax, 1.4, 1.0, 2.4, 0.8, "actor · reference · old", OTHER, "Transformer(ids, positions)")
    box(ax, 4.3, 1.0, 2.6, 0.8, "compute_completion_logps", THIS, "logit[y] − lse  →  [B,T]")
    box(ax, 6.9, 1.45, 1.8, 0.6, "compute_kl", THIS, "k1 · k2 · k3")
    box(ax, 6.9, 0.45, 1.8, 0.6, "policy loss", OTHER, "chapter 30  [B,T]")
    box(ax, 9.3, 1.0, 1.9, 0.8, "aggregate_loss", THIS, "5 modes → scalar")
    arrow(ax, 2.6, 1.0, 3.0, 1.0)
    arrow(ax, 5.6, 1.15, 6.0, 1.4)
    arrow(ax, 5.6, 0.85, 6.0, 0.5)
    arrow(ax, 7.8, 1.4, 8.35, 1.15)
    arrow(ax, 7.8, 0.5, 8.35, 0.85)
    arrow(ax, 7.9, 2.35, 4.6, 1.4, "ids, masks")
    ax.text(0.1, 0.05, "blue: tunix_lit.rl.common (this chapter);  grey: other chapters", fontsize=7.5, color="#555")
    fig.savefig(HERE / "20_rl_common.svg", bbox_inches="tight")


if __name__ == "__main__":
    main()
