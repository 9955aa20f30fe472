"""Draws nbs/images/21_rl_cluster.svg: the five roles of the RL cluster, what flows between them, the weight sync.

    python nbs/images/21_rl_cluster_figure.py      # from the repository root
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


def arrow(ax, x0, y0, x1, y1, label=None, dy=0.12):
    ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                arrowprops=dict(arrowstyle="-|>", color="#333", lw=1.1, shrinkA=0, shrinkB=0), zorder=2)
    if label:
        ax.text((x0 + x1) / 2, (y0 + y1) / 2 + dy, label, ha="center", fontsize=7.5, color="#555")


def main():
    fig, ax = plt.subplots(figsize=(10.0, 3.6))
    ax.set_xlim(0, 10.0)
    ax.set_ylim(0, 3.6)
    ax.axis("off")
    ax.text(5.0, 3.4, "RLCluster: one role → mesh dictionary places every blue role", ha="center", fontsize=9.5,
            color="#33507f")
    box(ax, 1.0, 2.55, 1.7, 0.75, "rollout", THIS, "any engine")
    box(ax, 3.6, 2.55, 1.7, 0.75, "reward", OTHER, "fns or a model")
    box(ax, 6.2, 2.55, 1.7, 0.75, "learner", OTHER, "chapter 31")
    box(ax, 8.9, 2.55, 1.7, 0.75, "actor", THIS, "what trains")
    box(ax, 3.6, 1.25, 1.7, 0.7, "reference", THIS, "frozen")
    box(ax, 6.2, 1.25, 1.7, 0.7, "critic", THIS, "PPO only")
    arrow(ax, 1.85, 2.55, 2.75, 2.55, "completions")
    arrow(ax, 4.45, 2.55, 5.35, 2.55, "rewards")
    arrow(ax, 7.05, 2.55, 8.05, 2.55, "loss, step")
    arrow(ax, 4.45, 1.35, 5.5, 2.17)
    ax.text(4.75, 1.9, "log-probs", ha="right", fontsize=7.5, color="#555")
    arrow(ax, 6.2, 1.6, 6.2, 2.17)
    ax.text(6.3, 1.85, "values", ha="left", fontsize=7.5, color="#555")
    ax.plot([8.9, 8.9, 1.0], [2.17, 0.45, 0.45], color="#b1623a", lw=1.3, zorder=2)
    arrow(ax, 1.0, 0.45, 1.0, 2.17)
    ax.text(5.0, 0.2, "weight sync once per global step: in place when rollout and actor share a mesh, "
            "resharded when apart", ha="center", fontsize=7.5, color="#b1623a")
    ax.text(0.1, 3.05, "blue: roles the cluster holds (this chapter);  grey: other chapters", fontsize=7.5,
            color="#555")
    fig.savefig(HERE / "21_rl_cluster.svg", bbox_inches="tight")


if __name__ == "__main__":
    main()
