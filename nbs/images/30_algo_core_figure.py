"""Draws nbs/images/30_algo_core.svg: from rewards to a scalar loss, where advantages and policy losses sit.

    python nbs/images/30_algo_core_figure.py      # from the repository root
"""
from mpl_boxes import HERE, MONO, OTHER, THIS, box, plt
from mpl_boxes import arrow as _arrow


def arrow(ax, x0, y0, x1, y1, label=None):
    """This figure's arrows carry their labels a little lower."""
    _arrow(ax, x0, y0, x1, y1, label, dy=0.1)


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
    fig.savefig(HERE / "30_algo_core.svg", bbox_inches="tight")


if __name__ == "__main__":
    main()
