"""Draws nbs/images/21_rl_cluster.svg: the five roles of the RL cluster, what flows between them, the weight sync.

    python nbs/images/21_rl_cluster_figure.py      # from the repository root
"""
from mpl_boxes import HERE, MONO, OTHER, THIS, box, plt, arrow


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
