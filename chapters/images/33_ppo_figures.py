"""Figures for chapters/33_ppo.md; run from the repo root: python chapters/images/33_ppo_figures.py

1. How GAE spreads one final score over a completion's tokens, for λ = 0, 0.95 and 1, computed by
   tunix_lit.rl.algo_core.gae_advantages (no whitening) on a made-up critic.
2. The clipped value loss against the new value, from tunix_lit.rl.algo_core.ppo_value_loss.
3. What the critic costs in memory: parameter counts of real presets (shapes only, nothing allocated), and
   the bytes each role holds while training in float32 with Adam. Written to 33_ppo_costs.json (the prose
   quotes it) and drawn as stacked bars.
"""
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from flax import nnx

from tunix_lit.models import transformer as tfm
from tunix_lit.rl import algo_core
from tunix_lit.rl.ppo import ValueModel

out = Path(__file__).resolve().parent
plt.rcParams.update({"font.size": 10, "svg.fonttype": "none", "axes.spines.top": False, "axes.spines.right": False})

# 1. One completion of 8 tokens, score 1 on the last; the critic's guesses climb as the answer takes shape.
T = 8
rewards = np.zeros((1, T), np.float32)
rewards[0, -1] = 1.0
values = np.array([[0.30, 0.30, 0.35, 0.50, 0.55, 0.70, 0.80, 0.90]], np.float32)
mask = np.ones((1, T), np.int32)
fig, ax = plt.subplots(figsize=(8, 3.2))
width = 0.26
for k, (lam, color) in enumerate(((0.0, "#3a6ea5"), (0.95, "#e8590c"), (1.0, "#2b8a3e"))):
    adv, _ = algo_core.gae_advantages(jnp.asarray(rewards), jnp.asarray(values), jnp.asarray(mask), gamma=1.0,
                                      lam=lam, whiten=False)
    ax.bar(np.arange(T) + (k - 1) * width, np.asarray(adv)[0], width, color=color, label=f"λ = {lam}")
ax.plot(np.arange(T), values[0], "k.:", label="critic V(s_t)")
ax.axhline(0, color="#adb5bd", lw=0.8)
ax.set(xlabel="completion token t (score 1 arrives after the last)", ylabel="advantage A_t",
       title="GAE: λ = 0 credits each token with V's change, λ = 1 with the score minus V(s_t)")
ax.legend(fontsize=8, ncol=4, loc="upper left")
fig.tight_layout()
fig.savefig(out / "33_gae_credit.svg", metadata={"Date": None})
plt.close(fig)

# 2. Value clipping: V_old = 0.2, return R = 1.0, clip range 0.2.
v_new = np.linspace(-0.4, 1.4, 361)
old, ret = 0.2, 1.0
one = lambda v, c: algo_core.ppo_value_loss(jnp.full((1, 1), v), jnp.full((1, 1), old), jnp.full((1, 1), ret),
                                            jnp.ones((1, 1)), clip_range=c)[0]
fig, ax = plt.subplots(figsize=(6.4, 3.0))
for clip, style, name in ((None, "-", "plain squared error"), (0.2, "--", "clipped (clip_range_value = 0.2)")):
    ax.plot(v_new, [float(one(v, clip)) for v in v_new], style, label=name)
ax.axvspan(old - 0.2, old + 0.2, color="#dee2e6", alpha=0.6, label="V_old ± 0.2")
ax.axvline(ret, color="#2b8a3e", lw=0.8)
ax.text(ret + 0.02, 0.05, "return R", color="#2b8a3e", fontsize=8)
ax.set(xlabel="new value V(s_t)", ylabel="value loss", title="V_old = 0.2, R = 1.0: the clip keeps the loss from "
       "rewarding a big jump", ylim=(0, None))
ax.title.set_fontsize(9)
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(out / "33_value_clip.svg", metadata={"Date": None})
plt.close(fig)


# 3. Memory: parameters of each preset as shapes only (nnx.eval_shape allocates nothing).
def count(cfg) -> tuple:
    """(policy parameters, critic parameters) of a preset: the critic is the backbone plus a D -> 1 head."""
    policy = nnx.eval_shape(lambda: tfm.Transformer(cfg, rngs=nnx.Rngs(0)))
    n_policy = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(policy, nnx.Param)))
    critic = nnx.eval_shape(lambda: ValueModel(tfm.Transformer(cfg, rngs=nnx.Rngs(0)), rngs=nnx.Rngs(1)))
    n_critic = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(critic, nnx.Param)))
    return n_policy, n_critic


GIB, F32 = 2 ** 30, 4
TRAINED = 4  # float32 weights, gradients, Adam's two moments: four copies of a trained model
record = {"assumption": "float32 weights; a trained model holds weights, gradients and two Adam moments; the "
                        "reference holds weights only; the colocated rollout reads the actor's weights; "
                        "activations and KV cache not counted"}
for name in ("gemma3-270m", "qwen3-0.6b", "gemma3-1b"):
    n_policy, n_critic = count(tfm.ModelConfig.from_name(name))
    grpo0 = TRAINED * n_policy * F32 / GIB
    grpo = grpo0 + n_policy * F32 / GIB
    ppo = grpo + TRAINED * n_critic * F32 / GIB
    record[name] = {"policy_params": n_policy, "critic_params": n_critic, "grpo_beta0_gib": round(grpo0, 2),
                    "grpo_gib": round(grpo, 2), "ppo_gib": round(ppo, 2), "ppo_over_grpo": round(ppo / grpo, 2)}
(out / "33_ppo_costs.json").write_text(json.dumps(record, indent=1) + "\n")

fig, ax = plt.subplots(figsize=(8, 3.2))
names = ["gemma3-270m", "qwen3-0.6b", "gemma3-1b"]
for i, name in enumerate(names):
    r = record[name]
    actor = TRAINED * r["policy_params"] * F32 / GIB
    ref = r["policy_params"] * F32 / GIB
    critic = TRAINED * r["critic_params"] * F32 / GIB
    for j, (label, parts) in enumerate((("GRPO, β = 0", [actor]), ("GRPO, β > 0", [actor, ref]),
                                        ("PPO, β > 0", [actor, ref, critic]))):
        x, bottom = i * 4 + j, 0.0
        for part, color in zip(parts, ("#3a6ea5", "#adb5bd", "#e8590c")):
            ax.bar(x, part, 0.8, bottom=bottom, color=color)
            bottom += part
        ax.text(x, bottom + 0.2, label, rotation=90, ha="center", va="bottom", fontsize=7)
ax.set_xticks([i * 4 + 1 for i in range(len(names))], names)
ax.set_ylabel("GiB (float32, Adam)")
ax.set_ylim(0, max(record[n]["ppo_gib"] for n in names) * 1.6)
ax.bar(0, 0, color="#3a6ea5", label="actor: weights, gradients, 2 moments")
ax.bar(0, 0, color="#adb5bd", label="reference: weights")
ax.bar(0, 0, color="#e8590c", label="critic: weights, gradients, 2 moments")
ax.legend(fontsize=8, loc="upper left")
ax.set_title("the state each role keeps while training (activations and KV cache not counted)", fontsize=10)
fig.tight_layout()
fig.savefig(out / "33_memory_by_role.svg", metadata={"Date": None})
plt.close(fig)
print("wrote 33_gae_credit.svg, 33_value_clip.svg, 33_memory_by_role.svg and 33_ppo_costs.json")
