"""Draws nbs/images/20_rl_common.svg: where the RL common pieces sit between a rollout and a loss.

    python nbs/images/20_rl_common_figure.py      # from the repository root
"""
from mpl_boxes import HERE, MONO, OTHER, THIS, box, plt, arrow


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
