"""Figures for chapters/63_preference.md; run from the repo root: python chapters/images/63_preference_figures.py

The per-pair loss of each preference rule, and how hard it pulls (the size of its gradient), against the margin
it reads, computed by the functions in tunix_lit.sft.dpo and tunix_lit.sft.reward (and jax.grad of them).
"""
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from tunix_lit.sft import dpo, reward

out = Path(__file__).resolve().parent
plt.rcParams.update({"font.size": 10, "svg.fonttype": "none", "axes.spines.top": False, "axes.spines.right": False})

margin = jnp.linspace(-4.0, 6.0, 401)  # nats: Δ for the reference-based rules, r_w − r_l for Bradley–Terry
zero = jnp.zeros_like(margin)
beta = 0.5
rules = {  # name -> per-pair loss as a function of the margin (the chosen side carries it, the rejected side is 0)
    "DPO, β = 0.5": lambda m: dpo.dpo_sigmoid_loss(m, 0.0 * m, 0.0 * m, 0.0 * m, beta),
    "DPO, β = 0.5, label smoothing 0.1": lambda m: dpo.dpo_sigmoid_loss(m, 0.0 * m, 0.0 * m, 0.0 * m, beta, 0.1),
    "IPO, β = 0.5 (target 1/(2β) = 1)": lambda m: dpo.ipo_loss(m, 0.0 * m, 0.0 * m, 0.0 * m, beta),
    "SimPO, β = 2, γ = 0.5 (margin per token)": lambda m: dpo.simpo_loss(m, 0.0 * m, 2.0, 0.5),
    "Bradley–Terry reward model": lambda m: reward.bradley_terry_loss(m, 0.0 * m),
}
styles = ["-", "--", "-.", ":", (0, (5, 1, 1, 1))]
fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 3.6))
for (name, fn), style in zip(rules.items(), styles):
    loss = np.asarray(fn(margin))
    pull = -np.asarray(jax.vmap(jax.grad(lambda m: fn(m[None])[0]))(margin))  # −d loss / d margin
    left.plot(margin, loss, linestyle=style, label=name, lw=1.6)
    right.plot(margin, pull, linestyle=style, label=name, lw=1.6)
left.set(xlabel="margin (nats)", ylabel="per-pair loss", ylim=(0, 4), title="the loss each rule puts on a pair")
right.set(xlabel="margin (nats)", ylabel="pull = −d loss / d margin", ylim=(-1.5, 1.2),
          title="how hard it pushes the margin up")
right.axhline(0, color="#adb5bd", lw=0.8)
for ax in (left, right):
    ax.axvline(0, color="#adb5bd", lw=0.8)
    ax.grid(alpha=0.3)
left.legend(fontsize=7.5, loc="upper right")
fig.tight_layout()
fig.savefig(out / "63_preference_losses.svg", metadata={"Date": None})
plt.close(fig)
print("wrote 63_preference_losses.svg")
