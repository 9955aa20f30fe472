"""Draws nbs/images/73_cli.svg: the `tunix-lit` command and what its subcommands call.

    python nbs/images/73_cli_figure.py      # from the repository root
"""
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch

HERE = Path(__file__).resolve().parent
plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "tunix-lit", "font.family": "DejaVu Sans",
                     "font.size": 10})
THIS = dict(face="#e8eef7", edge="#5b7db1", ls="-")  # built in this chapter
OTHER = dict(face="#f2f2f2", edge="#999999", ls="-")  # other chapters
LATER = dict(face="#ffffff", edge="#999999", ls="--")  # planned
MONO = "DejaVu Sans Mono"


def box(ax, x, y, w, h, text, style, sub=None):
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.1",
                                fc=style["face"], ec=style["edge"], ls=style["ls"], lw=1.3, zorder=3))
    ax.text(x, y + (0.14 if sub else 0), text, ha="center", va="center", fontsize=9.5, zorder=4)
    if sub:
        ax.text(x, y - 0.17, sub, ha="center", va="center", fontsize=7.5, family=MONO, color="#444", zorder=4)


def arrow(ax, x0, y0, x1, y1):
    ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                arrowprops=dict(arrowstyle="-|>", color="#333", lw=1.1, shrinkA=0, shrinkB=0), zorder=2)


def main():
    fig, ax = plt.subplots(figsize=(9.5, 2.9))
    ax.set_xlim(0, 9.5)
    ax.set_ylim(-0.05, 2.8)
    ax.axis("off")
    box(ax, 1.0, 1.4, 1.7, 0.7, "shell", OTHER, "tunix-lit …")
    box(ax, 3.1, 1.4, 1.8, 0.7, "cli.main", THIS, "argparse")
    box(ax, 5.3, 2.3, 1.9, 0.6, "generate", THIS, "PROMPT … flags")
    box(ax, 5.3, 1.4, 1.9, 0.6, "config", THIS, "RECIPE key=value …")
    box(ax, 5.3, 0.5, 1.9, 0.6, "train", THIS, "RECIPE … [--dry-run]")
    box(ax, 7.9, 2.3, 2.2, 0.6, "Sampler", OTHER, "chapter 15")
    box(ax, 7.9, 0.95, 2.2, 0.9, "tunix_lit.recipes", OTHER, "resolve / build / run (ch. 70-72)")
    arrow(ax, 1.85, 1.4, 2.2, 1.4)
    arrow(ax, 4.0, 1.55, 4.35, 2.2)
    arrow(ax, 4.0, 1.4, 4.35, 1.4)
    arrow(ax, 4.0, 1.25, 4.35, 0.6)
    arrow(ax, 6.25, 2.3, 6.8, 2.3)
    arrow(ax, 6.25, 1.4, 6.8, 1.1)
    arrow(ax, 6.25, 0.5, 6.8, 0.8)
    ax.text(0.1, 0.05, "blue: tunix_lit.cli (this chapter);  grey: other chapters",
            fontsize=7.5, color="#555")
    fig.savefig(HERE / "73_cli.svg", bbox_inches="tight")


if __name__ == "__main__":
    main()
