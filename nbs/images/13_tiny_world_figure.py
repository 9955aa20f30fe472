"""Draws nbs/images/13_tiny_world.svg: the arithmetic task, its tokenizer and the tiny model that ships in the package.

    python nbs/images/13_tiny_world_figure.py      # from the repository root
"""
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch

HERE = Path(__file__).resolve().parent
plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "tunix-lit-13", "font.family": "DejaVu Sans",
                     "font.size": 10})
TASK = dict(face="#eaf3e6", edge="#5f9a4f")  # tunix_lit.data.arith (13_arith_task)
MODEL = dict(face="#e8eef7", edge="#5b7db1")  # tunix_lit.models.tiny (13b_tiny_world)
OTHER = dict(face="#f2f2f2", edge="#999999")  # other chapters
MONO = "DejaVu Sans Mono"


def box(ax, x, y, w, h, title, style, lines=()):
    """A rounded box centred at (x, y) with a title and monospace sub-lines."""
    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                fc=style["face"], ec=style["edge"], lw=1.3, zorder=3))
    top = y + 0.13 * len(lines)
    ax.text(x, top, title, ha="center", va="center", fontsize=9.5, zorder=4)
    for i, line in enumerate(lines):
        ax.text(x, top - 0.26 * (i + 1), line, ha="center", va="center", fontsize=7.5, family=MONO, color="#444",
                zorder=4)


def arrow(ax, x0, y0, x1, y1, label=None, dy=0.13, dx=0.0, dashed=False):
    ax.annotate("", xy=(x1, y1), xytext=(x0, y0), zorder=2,
                arrowprops=dict(arrowstyle="-|>", color="#333", lw=1.1, shrinkA=0, shrinkB=0,
                                linestyle="--" if dashed else "-"))
    if label:
        ax.text((x0 + x1) / 2 + dx, (y0 + y1) / 2 + dy, label, ha="left" if dx else "center", fontsize=7.5,
                color="#555")


def main():
    fig, ax = plt.subplots(figsize=(11, 4.2))
    ax.set_xlim(0, 11)
    ax.set_ylim(0, 4.2)
    ax.axis("off")
    # top row: the task and how it becomes training data
    box(ax, 1.35, 3.3, 2.4, 1.0, "ArithConfig", TASK, ["ops='+', digits=2", "split by hash(prompt)"])
    box(ax, 4.2, 3.3, 2.5, 1.0, "sample / all_problems", TASK, ["'12+7='  →  '19'", "train · held-out"])
    box(ax, 7.1, 3.3, 2.5, 1.0, "CharTokenizer", MODEL, ["<bos> 1 2 + 7 = 1 9 <eos>", "19 ids"])
    box(ax, 9.85, 3.3, 1.9, 1.0, "pretrain", MODEL, ["loss on answer+EOS", "stop at 40 %"])
    arrow(ax, 2.55, 3.3, 2.95, 3.3)
    arrow(ax, 5.45, 3.3, 5.85, 3.3)
    arrow(ax, 8.35, 3.3, 8.9, 3.3)
    # bottom row: what ships and who uses it
    box(ax, 9.85, 1.55, 1.9, 1.0, "assets/tiny/", MODEL, ["model.safetensors", "char_tokenizer.json"])
    box(ax, 7.1, 1.55, 2.5, 1.0, "tiny.load()", MODEL, ["(model, tokenizer)", "qwen3 · 0.35 M params"])
    box(ax, 4.2, 1.55, 2.5, 1.0, "sampler · GRPO", OTHER, ["chapters 15, 30+", "greedy ≈ 40 % → higher"])
    box(ax, 1.15, 1.55, 2.0, 1.0, "reward", TASK, ["1 right", "0.1 wrong integer", "0 no integer"])
    arrow(ax, 9.85, 2.8, 9.85, 2.05, "save", dy=-0.05, dx=0.08)
    arrow(ax, 8.9, 1.55, 8.35, 1.55)
    arrow(ax, 5.85, 1.55, 5.45, 1.55)
    arrow(ax, 2.95, 1.7, 2.15, 1.7, "completions", dy=0.08)
    arrow(ax, 2.15, 1.35, 2.95, 1.35, "rewards", dy=-0.2)
    arrow(ax, 4.2, 2.8, 4.2, 2.05, "held-out prompts", dy=-0.05, dx=0.08, dashed=True)
    ax.text(0.15, 0.45, "green: tunix_lit.data.arith (13_arith_task);  blue: tunix_lit.models.tiny (13b_tiny_world);  "
            "grey: later chapters", fontsize=7.5, color="#555")
    fig.savefig(HERE / "13_tiny_world.svg", bbox_inches="tight")


if __name__ == "__main__":
    main()
