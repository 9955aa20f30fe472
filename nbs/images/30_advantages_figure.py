"""Draws nbs/images/30_advantages.svg: from rewards to a scalar loss, where advantages and policy losses sit.

    python nbs/images/30_advantages_figure.py      # from the repository root
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
        ax.text((x0 + x1) / 2, (y0 + y1) / 2 + 0.1, label, ha="center", fontsize=7.5, color="#555")


def main():
    fig, ax = plt.subplots(figsize=(10.5, 3.4))
    ax.set_xlim(0, 10.5)
    ax.set_ylim(0, 3.4)
    ax.axis("off")
    # top row: the GRPO family, one advantage per completion
    box(ax, 1.0, 2.6, 1.8, 0.7, "reward fns", OTHER, "r [B·G]")
    box(ax, 3.6, 2.6, 2.6, 0.7, "grpo · drgrpo · rloo", THIS, "group of G siblings → A [B·G]")
    arrow(ax, 1.9, 2.6, 2.3, 2.6)
    # bottom row: PPO, one advantage per token
    box(ax, 1.0, 0.8, 1.8, 0.7, "critic + score", OTHER, "V, R [B,T]")
    box(ax, 3.6, 0.8, 2.6, 0.7, "gae + whitening", THIS, "lax.scan backwards → A [B,T]")
    arrow(ax, 1.9, 0.8, 2.3, 0.8)
    # the loss
    box(ax, 6.6, 1.7, 2.4, 0.8, "clipped policy loss", THIS, "clip(ρ, 1−ε, 1+ε_hi) + β·KL")
    box(ax, 6.6, 0.35, 2.4, 0.5, "log-probs ℓ, ℓ_old, ℓ_ref", OTHER, None)
    arrow(ax, 4.9, 2.5, 5.4, 1.95)
    arrow(ax, 4.9, 0.9, 5.4, 1.45)
    arrow(ax, 6.6, 0.6, 6.6, 1.2)
    box(ax, 9.4, 1.7, 1.8, 0.8, "aggregate_loss", OTHER, "chapter 20 → scalar")
    arrow(ax, 7.8, 1.7, 8.5, 1.7, "[B,T]")
    ax.text(0.1, 0.02, "blue: tunix_lit.rl.algo_core (this chapter);  grey: other chapters", fontsize=7.5, color="#555")
    fig.savefig(HERE / "30_advantages.svg", bbox_inches="tight")


if __name__ == "__main__":
    main()
