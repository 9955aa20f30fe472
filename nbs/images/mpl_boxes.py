"""Box-and-arrow drawing for the chapter figures made with matplotlib (14, 20, 21, 30): one style, written once.

A figure script in this folder does `from mpl_boxes import plt, box, arrow, THIS, OTHER, HERE` (the script's
folder is first on `sys.path` when it runs as `python nbs/images/NN_name_figure.py`).
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
    """A rounded box centred at (x, y) with a title and an optional monospace subtitle."""
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.1",
                                fc=style["face"], ec=style["edge"], lw=1.3, zorder=3))
    ax.text(x, y + (0.14 if sub else 0), text, ha="center", va="center", fontsize=9.5, zorder=4)
    if sub:
        ax.text(x, y - 0.17, sub, ha="center", va="center", fontsize=7.5, family=MONO, color="#444", zorder=4)


def arrow(ax, x0, y0, x1, y1, label=None, dy=0.12):
    """An arrow from (x0, y0) to (x1, y1), its label `dy` above the middle."""
    ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                arrowprops=dict(arrowstyle="-|>", color="#333", lw=1.1, shrinkA=0, shrinkB=0), zorder=2)
    if label:
        ax.text((x0 + x1) / 2, (y0 + y1) / 2 + dy, label, ha="center", fontsize=7.5, color="#555")
