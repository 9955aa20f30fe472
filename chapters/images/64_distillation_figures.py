"""Figures for chapters/64_distillation.md; run from the repo root: python chapters/images/64_distillation_figures.py

1. Forward KL, reverse KL and the generalized JSD between them, each minimised by a student that can only draw
   one bump (a discretised Gaussian over 64 tokens) against a teacher with two: tunix_lit.sft.distill.generalized_jsd
   is the loss, optax.adam the optimiser.
2. Why T²: the size of the soft loss's gradient against the temperature, with and without the factor, from
   tunix_lit.sft.distill.soft_kl on random logits.
3. What storing a teacher's logits costs per token: the full vocabulary of real presets against top-k values and
   indices. Written to 64_distillation_costs.json (the prose quotes it).
"""
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import optax

from tunix_lit.models import transformer as tfm
from tunix_lit.sft import distill

out = Path(__file__).resolve().parent
plt.rcParams.update({"font.size": 10, "svg.fonttype": "none", "axes.spines.top": False, "axes.spines.right": False})
record = {}

# 1. Two bumps, one-bump student.
V = 64
x = jnp.arange(V, dtype=jnp.float32)
teacher_p = 0.6 * jnp.exp(-0.5 * ((x - 18) / 3.0) ** 2) + 0.4 * jnp.exp(-0.5 * ((x - 46) / 3.0) ** 2)
teacher_logits = jnp.log(teacher_p / teacher_p.sum() + 1e-12)


def student_logits(params):
    mu, log_sigma = params
    return -0.5 * ((x - mu) / jnp.exp(log_sigma)) ** 2


def fit(beta: float, steps: int = 3000):
    params = jnp.array([22.0, jnp.log(3.0)])  # start on the bigger bump: each divergence moves it where it wants
    opt = optax.adam(0.05)
    state = opt.init(params)
    loss = lambda p: distill.generalized_jsd(student_logits(p), teacher_logits, beta)

    @jax.jit
    def step(params, state):
        g = jax.grad(loss)(params)
        updates, state = opt.update(g, state)
        return optax.apply_updates(params, updates), state

    for _ in range(steps):
        params, state = step(params, state)
    return params, float(loss(params))


fig, axes = plt.subplots(1, 3, figsize=(12, 3.3))
ax = axes[0]
ax.fill_between(np.asarray(x), np.asarray(jax.nn.softmax(teacher_logits)), color="#dee2e6", label="teacher")
fits = {}
for beta, key, name, color, style in ((0.0, "forward", "β = 0: forward KL(t‖s)", "#3a6ea5", "-"),
                                      (0.5, "jsd", "β = 0.5: JSD", "#2b8a3e", "-."),
                                      (1.0, "reverse", "β = 1: reverse KL(s‖t)", "#e8590c", "--")):
    params, value = fit(beta)
    fits[key] = {"mean": round(float(params[0]), 1), "std": round(float(jnp.exp(params[1])), 1)}
    ax.plot(np.asarray(x), np.asarray(jax.nn.softmax(student_logits(params))), style, color=color, label=name, lw=1.6)
ax.set(xlabel="token", ylabel="probability", title="one bump fitted to two")
ax.legend(fontsize=7)
record["bimodal_fit"] = fits

# 2. Gradient size against temperature.
keys = jax.random.split(jax.random.key(0), 2)
s, t = (jax.random.normal(k, (256, 512)) * 3.0 for k in keys)  # 256 positions over a 512-token vocabulary
temps = np.array([1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0])
norms = {}
for scaled in (False, True):
    vals = []
    for T in temps:
        g = jax.grad(lambda z: jnp.mean(distill.soft_kl(z, t, float(T))) * (T ** 2 if scaled else 1.0))(s)
        vals.append(float(jnp.linalg.norm(g)))
    norms[scaled] = np.array(vals)
ax = axes[1]
ax.plot(temps, norms[False] / norms[False][0], "o-", color="#e8590c", label="KL alone")
ax.plot(temps, norms[True] / norms[True][0], "s-", color="#3a6ea5", label="T² · KL")
ax.set(xlabel="temperature T", ylabel="gradient norm / its value at T = 1", yscale="log",
       title="T² keeps the soft gradient's scale")
ax.legend(fontsize=8)
record["grad_norm_ratio_T4"] = {"kl": round(float(norms[False][4] / norms[False][0]), 3),
                                "t2_kl": round(float(norms[True][4] / norms[True][0]), 3)}

# 3. Bytes per token of stored teacher logits.
presets = {"gemma3-270m": "Gemma 3", "qwen3-0.6b": "Qwen 3", "llama3.2-1b": "Llama 3.2"}
k = 64
rows = {}
for name, label in presets.items():
    V_real = tfm.ModelConfig.from_name(name).vocab_size
    full = V_real * 2  # bfloat16 logits
    topk = k * (2 + 4)  # bfloat16 values + int32 indices
    rows[name] = {"vocab": V_real, "full_bytes": full, "topk_bytes": topk, "ratio": round(full / topk)}
record["stored_logits"] = {"k": k, "dtype": "bfloat16 values, int32 indices", "presets": rows}
ax = axes[2]
names = list(presets)
ax.bar(np.arange(3) - 0.2, [rows[n]["full_bytes"] / 1024 for n in names], 0.4, color="#868e96", label="full vocabulary")
ax.bar(np.arange(3) + 0.2, [rows[n]["topk_bytes"] / 1024 for n in names], 0.4, color="#3a6ea5", label=f"top-{k}")
ax.set_xticks(np.arange(3), [presets[n] for n in names])
ax.set(ylabel="KiB per token (bfloat16)", yscale="log", ylim=(0.1, 1e4), title="stored teacher logits, per token")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(out / "64_distillation.svg", metadata={"Date": None})
plt.close(fig)
(out / "64_distillation_costs.json").write_text(json.dumps(record, indent=1) + "\n")
print("wrote 64_distillation.svg and 64_distillation_costs.json")
