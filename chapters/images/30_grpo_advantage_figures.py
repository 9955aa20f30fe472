"""Figures for chapters/30_grpo_advantage.md; run from the repo root: python chapters/images/30_grpo_advantage_figures.py"""
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from tunix_lit.rl import algo_core, common

plt.rcParams.update({"font.size": 10, "svg.fonttype": "none", "axes.spines.top": False, "axes.spines.right": False})
out = "chapters/images/"

# 1. One group of eight completions: rewards, the group's mean and std, and three advantages.
rewards = np.array([1.0, 0.1, 0.0, 1.0, 0.1, 0.0, 0.1, 1.0], np.float32)  # exact = 1, well-formed wrong = 0.1, garbage = 0
G = len(rewards)
adv = {name: np.asarray(algo_core.get_advantage_estimator(name)(rewards, G)[0]) for name in ("grpo", "drgrpo", "rloo")}
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 3.4), gridspec_kw={"width_ratios": [1, 1.4]})
x = np.arange(G)
mu, sd = rewards.mean(), rewards.std(ddof=1)
ax0.axhspan(mu - sd, mu + sd, color="#dde8f5", label="mean ± std (ddof=1)")
ax0.axhline(mu, color="#3a6ea5", lw=1)
ax0.scatter(x, rewards, color=["#2b8a3e" if r == 1 else "#e8590c" if r > 0 else "#868e96" for r in rewards], zorder=3)
ax0.set_xticks(x, [f"y{i}" for i in x]); ax0.set_ylabel("reward"); ax0.set_title("one prompt, G = 8 completions")
ax0.legend(loc="center right", frameon=False, fontsize=8)
w = 0.27
for k, (name, a) in enumerate(adv.items()):
    ax1.bar(x + (k - 1) * w, a, w, label={"grpo": "GRPO  (r − mean) / std", "drgrpo": "Dr.GRPO  r − mean",
                                          "rloo": "RLOO  r − mean of the others"}[name])
ax1.axhline(0, color="black", lw=0.8)
ax1.set_xticks(x, [f"y{i}" for i in x]); ax1.set_ylabel("advantage"); ax1.set_title("the advantage each completion gets")
ax1.set_ylim(-1.2, 2.1); ax1.legend(frameon=False, fontsize=8, loc="upper left", ncol=2)
fig.tight_layout(); fig.savefig(out + "30_group_zscore.svg", metadata={"Date": None}); plt.close(fig)

# 2. How much one token weighs in the loss, for a short and a long completion, under three aggregation modes.
T = 12
mask = np.zeros((2, T), np.float32); mask[0, :3] = 1; mask[1, :12] = 1
modes = ["sequence-mean-token-mean", "token-mean", "sequence-mean-token-scale"]
fig, ax = plt.subplots(figsize=(7, 2.8))
for k, mode in enumerate(modes):
    # the weight of token t is d loss / d per_token[t]: take it from the real aggregation by autodiff
    import jax
    g = np.asarray(jax.grad(lambda v: common.aggregate_loss(v, mask, mode))(np.zeros((2, T), np.float32)))
    ax.bar(np.array([0, 1]) + (k - 1) * 0.27, [g[0, 0], g[1, 0]], 0.27, label=mode)
    print(mode, g[0, 0], g[1, 0])
ax.set_xticks([0, 1], ["a token of a 3-token answer", "a token of a 12-token answer"])
ax.set_ylabel("weight in the loss"); ax.legend(frameon=False, fontsize=8)
ax.set_title("aggregation decides who speaks louder")
fig.tight_layout(); fig.savefig(out + "30_aggregation_weights.svg", metadata={"Date": None}); plt.close(fig)
print({k: np.round(v, 3).tolist() for k, v in adv.items()})
