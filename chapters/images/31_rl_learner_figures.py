"""Figures for chapters/31_rl_learner.md; run from the repo root: python chapters/images/31_rl_learner_figures.py

1. The batch-size cascade of one configuration, drawn from resolve_batch_sizes.
2. A measured timeline of the producer thread and the main thread: GRPO (chapter 32) on the tiny model, 8 prompts per
   global step in 2 mini-batches, μ = 2. The methods of the real learner are wrapped only to record when they run;
   each optimizer update is followed by block_until_ready so that its bar shows device time rather than dispatch.
"""
import threading
import time

import jax
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import optax
from matplotlib.patches import Patch

from tunix_lit.data import arith
from tunix_lit.models import tiny
from tunix_lit.rl import grpo, learner as learner_mod
from tunix_lit.rl.cluster import RLCluster, RolloutConfig
from tunix_lit.rl.learner import RLTrainingConfig, resolve_batch_sizes

plt.rcParams.update({"font.size": 10, "svg.fonttype": "none", "axes.spines.top": False, "axes.spines.right": False})
out = "chapters/images/"

# 1. The cascade: one global step of Bf = 8 prompts, G = 4, mini 4, train micro 2, rollout micro 2, log-prob micro 4.
G = 4
cfg = RLTrainingConfig(batch_size=8, mini_batch_size=4, train_micro_batch_size=2, rollout_micro_batch_size=2,
                       logps_micro_batch_size=4, progress_bar=False)
s = resolve_batch_sizes(cfg)
fig, ax = plt.subplots(figsize=(10, 3.3))
levels = [("global step (batch_size)", s.full, "#868e96", "one weight sync"),
          ("mini-batch", s.mini, "#3a6ea5", "μ optimizer updates each"),
          ("train micro-batch", s.train_micro, "#74a0d0", f"accumulated {s.accumulation} per update"),
          ("rollout micro-batch", s.rollout_micro, "#e8590c", "one generate call each"),
          ("log-prob micro-batch", s.logps_micro, "#2b8a3e", "one reference / old log-prob forward each"),
          (f"service chunk = lcm(rollout, log-prob)", s.service, "#ae3ec9", "one make_experience call each")]
for y, (name, size, color, note) in enumerate(levels):
    y = len(levels) - 1 - y
    for k in range(s.full // size):
        ax.add_patch(plt.Rectangle((k * size * G + 0.08, y + 0.12), size * G - 0.16, 0.76, color=color, alpha=0.9))
        ax.text(k * size * G + size * G / 2, y + 0.5, f"{size} prompts\n{size * G} rows", ha="center", va="center",
                fontsize=7, color="white")
    ax.text(-0.6, y + 0.5, name, ha="right", va="center", fontsize=9)
    ax.text(s.full * G + 0.6, y + 0.5, note, ha="left", va="center", fontsize=8)
ax.set_xlim(-14, s.full * G + 16)
ax.set_ylim(0, len(levels))
ax.set_xticks(np.arange(s.full) * G + G / 2, [f"p{i} ×{G}" for i in range(s.full)], fontsize=7)
ax.set_yticks([])
ax.spines[["left"]].set_visible(False)
ax.set_xlabel(f"the {s.full * G} rows of one global step: each prompt repeated G = {G} times, adjacent")
ax.set_title("the batch cascade: every size counts prompts and divides the one it splits", fontsize=10)
fig.tight_layout()
fig.savefig(out + "31_batch_cascade.svg", metadata={"Date": None})
plt.close(fig)

# 2. A measured timeline.
events = []  # (lane, kind, label, t0, t1)
T0 = time.perf_counter()
now = lambda: time.perf_counter() - T0

model, tok = tiny.load()
cluster = RLCluster(model, tok, reference="actor",
                    rollout_config=RolloutConfig(max_new_tokens=8, max_prompt_length=8, temperature=1.0))
cfg = RLTrainingConfig(batch_size=8, mini_batch_size=4, train_micro_batch_size=2, max_steps=3, queue_size=2,
                       progress_bar=False)
learner = grpo.GRPOLearner(cluster, optax.adam(1e-4), cfg, grpo.GRPOConfig(num_generations=G, num_iterations=2),
                           reward_fns=[arith.reward])

make_experience, update, sync, pop = (learner.make_experience, learner.trainer.update, cluster.sync_weights,
                                      learner.trainer.pop_metrics)
state = {"step": 0, "updates": 0, "step_end": None}


def rec_make_experience(rows, step, chunk):
    t0 = now()
    got = make_experience(rows, step, chunk)
    events.append(("producer", "experience", f"s{step + 1} c{chunk}", t0, now(), step))
    return got


def rec_start_step(step):
    if state["step_end"] is not None:
        events.append(("producer", "wait_sync", "", state["step_end"], now(), step - 1))
    state["step"] = step


def rec_update(micro):
    t0 = now()
    update(micro)
    jax.block_until_ready(learner.trainer._carry)
    k = state["updates"] % 4  # 4 updates per step: mini-batch k // 2, pass k % 2
    events.append(("consumer", "update", f"mb{k // 2} μ{k % 2 + 1}", t0, now(), None))
    state["updates"] += 1


def rec_pop():
    t0 = now()
    rows = pop()
    events.append(("consumer", "pop", "", t0, now(), None))
    return rows


def rec_sync():
    t0 = now()
    moved = sync()
    events.append(("consumer", "sync", "sync", t0, now(), None))
    return moved


put = learner_mod._put


def rec_put(q, item, stop):
    t0 = now()
    put(q, item, stop)
    if threading.current_thread().name == "rl-producer":
        if now() - t0 > 0.002:
            events.append(("producer", "queue_full", "", t0, now(), None))
        if isinstance(item, tuple) and item[0] == "end":
            state["step_end"] = now()


learner.make_experience, learner.start_step = rec_make_experience, rec_start_step
learner.trainer.update, learner.trainer.pop_metrics, cluster.sync_weights = rec_update, rec_pop, rec_sync
learner_mod._put = rec_put
data = arith.sample(arith.ArithConfig(), 64, "train", seed=3)
result = learner.train(data)
learner_mod._put = put
print(result.stop_reason, result.step, "updates", learner.trainer.step, "syncs", cluster.sync_count)

# draw global steps 2 and 3 (step 1 includes the compilations)
syncs = [e for e in events if e[1] == "sync"]
start, end = syncs[0][4], syncs[2][4]
shown = [e for e in events if e[4] > start - 1e-9 and e[3] < end + 1e-9]
colors = {"experience": "#e8590c", "queue_full": "#ffd8a8", "wait_sync": "#dee2e6", "update": "#3a6ea5",
          "pop": "#a5d8ff", "sync": "#2b8a3e"}
fig, ax = plt.subplots(figsize=(10, 2.8))
for lane, kind, label, t0, t1, _ in shown:
    t0, t1 = max(t0, start), min(t1, end)
    y = 1 if lane == "producer" else 0
    ax.broken_barh([(t0 - start, t1 - t0)], (y + 0.15, 0.7), color=colors[kind], edgecolor="white", lw=0.5)
    if label and t1 - t0 > 0.015 * (end - start):
        ax.text((t0 + t1) / 2 - start, y + 0.5, label, ha="center", va="center", fontsize=6,
                color="white" if kind in ("experience", "update", "sync") else "black")
for e in syncs[:3]:
    ax.axvline(e[4] - start, color="#2b8a3e", lw=0.8, ls=":")
ax.set_yticks([0.5, 1.5], ["main thread\n(consumer)", "producer\nthread"])
ax.set_ylim(0, 2)
ax.set_xlabel("seconds (global steps 2 and 3; dotted: the end of each step's weight sync)")
ax.legend(handles=[Patch(color=colors[k], label=l) for k, l in (
    ("experience", "make_experience: generate, rewards, log-probs"), ("queue_full", "blocked: queue full"),
    ("wait_sync", "waiting for the sync"), ("update", "optimizer update"), ("pop", "read metrics"),
    ("sync", "weight sync"))], frameon=False, fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.35))
ax.set_title("GRPO on the tiny model: Bf = 8, 2 mini-batches, μ = 2, queue_size = 2 (measured, 2 CPU cores)",
             fontsize=10)
fig.tight_layout()
fig.savefig(out + "31_producer_consumer.svg", metadata={"Date": None})
plt.close(fig)
for e in shown:
    print(f"{e[0]:<9} {e[1]:<11} {e[2]:<7} {e[3] - start:7.3f} {e[4] - start:7.3f}")
