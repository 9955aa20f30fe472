"""Figures for chapters/21_rl_cluster.md; run from the repo root: python chapters/images/21_rl_cluster_figures.py

Builds the two clusters of nbs/21_rl_cluster.ipynb (a LoRA actor on the tiny model, reference='actor') on 8 fake
CPU devices and counts, per device, the bytes each role holds that no earlier role already holds (the same rule as
RLCluster.explain(), but per device from each array's shards).
"""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")  # before jax is imported
import jax
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from flax import nnx

from tunix_lit.models import tiny
from tunix_lit.rl.cluster import Role, RLCluster, RolloutConfig
from tunix_lit.sft import lora

plt.rcParams.update({"font.size": 10, "svg.fonttype": "none", "axes.spines.top": False, "axes.spines.right": False})
out = "chapters/images/"

rc = RolloutConfig(max_new_tokens=8, max_prompt_length=8, temperature=1.0)
devs = jax.devices()
mesh_a = jax.sharding.Mesh(np.asarray(devs[:4]).reshape(2, 2), ("fsdp", "tp"))
mesh_b = jax.sharding.Mesh(np.asarray(devs[4:]).reshape(2, 2), ("fsdp", "tp"))


def lora_actor():
    return lora.apply_lora(tiny.load(mesh_a)[0], rank=4, alpha=8.0)


tok = tiny.load()[1]
clusters = {
    "dial 1: every role on devices 0-3": RLCluster(lora_actor(), tok, reference="actor", meshes=mesh_a,
                                                   rollout_config=rc),
    "dial 2: rollout apart, on devices 4-7": RLCluster(lora_actor(), tok, reference="actor",
                                                       meshes={"actor": mesh_a, "rollout": mesh_b}, rollout_config=rc),
}


def per_device_bytes(cluster):
    """role -> np.array[8] of bytes on each device not already counted for an earlier role (explain()'s order)."""
    seen, table = set(), {}
    for role, model in cluster.role_models().items():
        leaves = jax.tree.leaves(nnx.state(model) if isinstance(model, nnx.Module) else model)
        row = np.zeros(len(devs))
        for x in leaves:
            if id(x) in seen:
                continue
            seen.add(id(x))
            for shard in x.addressable_shards:
                row[shard.device.id] += shard.data.nbytes
        table[role] = row
    return table


colors = {Role.ACTOR: "#3a6ea5", Role.ROLLOUT: "#e8590c", Role.REFERENCE: "#2b8a3e"}
fig, axes = plt.subplots(1, 2, figsize=(10, 3.4), sharey=True)
for ax, (title, c) in zip(axes, clusters.items()):
    table = per_device_bytes(c)
    bottom = np.zeros(len(devs))
    for role, row in table.items():
        ax.bar(np.arange(len(devs)), row / 1024, bottom=bottom / 1024, color=colors[role], label=role.value)
        bottom += row
    total = sum(r.sum() for r in table.values())
    ax.set_title(f"{title}\n{total / 1024:,.0f} KiB summed over devices; a sync moves {c.sync_bytes() / 1024:,.0f} KiB",
                 fontsize=9)
    ax.set_xticks(np.arange(len(devs)), [str(d.id) for d in devs])
    ax.set_xlabel("device")
    print(title)
    for role, row in table.items():
        print(f"  {role.value:<10}", [int(v) for v in row], int(row.sum()))
    print("  sync bytes", c.sync_bytes(), "donate_actor", c.donate_actor)
axes[0].set_ylabel("KiB held (each array counted once)")
axes[0].legend(frameon=False, fontsize=8, loc="upper right")
fig.suptitle("a LoRA actor on the tiny model, reference = 'actor': who holds which bytes where", fontsize=10)
fig.tight_layout()
fig.savefig(out + "21_bytes_per_device.svg", metadata={"Date": None})
plt.close(fig)
