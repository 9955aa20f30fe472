"""Figures for chapters/32_grpo_learner.md; run from the repo root: python chapters/images/32_grpo_learner_figures.py

1. The chapter-31 loop with the slots the GRPO learner fills, and the two registries it reads by name.
2. The per-token loss and its gradient against the ratio, computed by tunix_lit.rl.algo_core.clipped_surrogate
   (and jax.grad of it) for GRPO's symmetric clip, DAPO's clip-higher and the dual clip.
"""
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "nbs" / "images"))
import boxes_svg  # noqa: E402

from tunix_lit.rl import algo_core  # noqa: E402

out = Path(__file__).resolve().parent

# 1. The slots. Amber: what grpo.py writes; blue: what chapter 31's loop (and chapter 30's registries) provide.
BOXES = [  # (x, y, w, h, text, highlighted)
    (10, 20, 190, 40, "dataset rows (prompts)", False),
    (230, 20, 200, 40, "RLLearner.train (ch. 31)", False),
    (460, 20, 250, 40, "producer thread: per service chunk", False),
    (460, 90, 250, 40, "make_experience(rows, step, chunk)", True),
    (460, 160, 250, 40, "_split: micro-batches (dynamic sampling)", True),
    (230, 160, 200, 40, "bounded queue", False),
    (10, 160, 190, 40, "train step (ch. 17)", False),
    (10, 230, 190, 40, "loss_fn(model, batch, rng)", True),
    (230, 230, 200, 40, "sync weights: once a step", False),
    (740, 90, 220, 40, "ADVANTAGE_ESTIMATORS[name]", False),
    (10, 300, 190, 40, "POLICY_LOSSES[name]", False),
    (740, 20, 220, 40, "start_step / extra_chunks", True),
]
ARROWS = [((200, 40), (230, 40)), ((430, 40), (460, 40)), ((585, 60), (585, 90)), ((585, 130), (585, 160)),
          ((460, 180), (430, 180)), ((230, 180), (200, 180)), ((105, 200), (105, 230)), ((200, 195), (240, 230)),
          ((740, 110), (710, 110)), ((105, 300), (105, 270)), ((740, 40), (710, 40))]
(out / "32_grpo_slots.svg").write_text(boxes_svg.svg(BOXES, ARROWS, 970, 350))

# 2. Clip regions, from the code the loss runs.
plt.rcParams.update({"font.size": 10, "svg.fonttype": "none", "axes.spines.top": False, "axes.spines.right": False})
ratio = np.linspace(0.5013, 1.6013, 440)  # off the clip edges, where the gradient is one-sided
variants = [("GRPO: ε = 0.2", dict(epsilon=0.2), "#3a6ea5", "-"),
            ("DAPO: ε = 0.2, ε_high = 0.28", dict(epsilon=0.2, epsilon_high=0.28), "#e8590c", "--"),
            ("dual clip: ε_c = 1.3", dict(epsilon=0.2, epsilon_c=1.3), "#2b8a3e", ":")]
fig, axes = plt.subplots(2, 2, figsize=(10, 5.6), sharex=True)
for col, adv in enumerate((1.0, -1.0)):
    for name, kw, color, style in variants:
        if adv > 0 and "epsilon_c" in kw:
            continue  # the dual clip acts on negative advantages only
        def loss(lr):
            return algo_core.clipped_surrogate(lr, jnp.asarray(adv), **kw)[0]
        lr = jnp.log(jnp.asarray(ratio, jnp.float32))
        values = np.asarray(jax.vmap(loss)(lr))
        grads = np.asarray(jax.vmap(jax.grad(loss))(lr))  # d loss / d log-ratio: zero where the token is clipped
        axes[0, col].plot(ratio, values, style, color=color, label=name, lw=1.6)
        axes[1, col].plot(ratio, grads, style, color=color, label=name, lw=1.6)
    axes[0, col].set_title(f"advantage A = {adv:+.0f}", fontsize=10)
    axes[1, col].set_xlabel("ratio ρ = π / π_old of one token")
    for ax in axes[:, col]:
        ax.axvline(1.0, color="#adb5bd", lw=0.8)
        ax.grid(alpha=0.3)
axes[0, 0].set_ylabel("per-token loss")
axes[1, 0].set_ylabel("gradient w.r.t. log ρ")
axes[0, 1].legend(fontsize=8, loc="upper left")
axes[0, 0].legend(fontsize=8, loc="upper right")
fig.suptitle("where the clipped surrogate stops pushing: a flat loss is a zero gradient", fontsize=10)
fig.tight_layout()
fig.savefig(out / "32_clip_regions.svg", metadata={"Date": None})
plt.close(fig)
print("wrote 32_grpo_slots.svg and 32_clip_regions.svg")
