"""Off-policy steps in the RL learner: max_staleness 0 is the synchronous loop, versions are recorded, the bound holds,
stale experience is dropped and counted, and a lagging batch's old log-probs are those of the weights that sampled it."""
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from tunix_lit.data import arith
from tunix_lit.models import tiny
from tunix_lit.rl import common
from tunix_lit.rl import learner as rl
from tunix_lit.rl.cluster import RLCluster, RolloutConfig
from tunix_lit.rl.grpo import GRPOConfig, GRPOLearner

ROLL = RolloutConfig(max_new_tokens=6, max_prompt_length=8, temperature=1.0)
DATA = arith.sample(arith.ArithConfig(), 64, "train", seed=4)
ALGO = GRPOConfig(num_generations=2, beta=0.0)


def config(k, steps=3, **kw):
    return rl.RLTrainingConfig(batch_size=4, mini_batch_size=2, max_steps=steps, progress_bar=False, max_staleness=k,
                               **kw)


def make(cfg, cls=GRPOLearner):
    model, tok = tiny.load()
    return cls(RLCluster(model, tok, rollout_config=ROLL), optax.adam(3e-3), cfg, ALGO, reward_fns=[arith.reward])


def params(learner):
    return [np.asarray(x) for x in jax.tree.leaves(nnx.state(learner.trainer.model, nnx.Param))]


class Watched(GRPOLearner):
    """Records the policy version each step's rollouts saw, slows each update, keeps each sync's weights."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.seen, self.synced, self.batches = {}, {0: params(self)}, []
        update = self.trainer.update

        def slow_update(micro):  # a slow trainer: the producer surely reaches its gate first
            self.batches.append((self.step, [dict(mb) for mb in micro]))
            time.sleep(0.2)
            update(micro)

        self.trainer.update = slow_update

    def make_experience(self, rows, step, chunk):
        self.seen.setdefault(step, self.policy_version)
        return super().make_experience(rows, step, chunk)

    def sync_rollout(self):
        moved = super().sync_rollout()
        self.synced[self.step + 1] = params(self)
        return moved


def test_max_staleness_must_be_a_non_negative_int():
    for bad in (-1, True, 1.5):
        with pytest.raises(ValueError, match="max_staleness must be an integer ≥ 0"):
            rl.RLTrainingConfig(max_staleness=bad)
    assert rl.RLTrainingConfig(max_staleness=2).max_staleness == 2


@pytest.mark.slow
def test_staleness_zero_is_the_synchronous_loop():
    """The threaded learner at k = 0 against the loop written out by hand: generate, update, sync, in turn."""
    learner = make(config(0))
    assert learner.reads_come_first is False and learner.needs_old_logps  # two mini-batches a step
    learner.train(DATA)
    hand = make(config(0))
    A, n = hand.sizes.accumulation, hand.sizes.service  # prompts per chunk of experience
    for step in range(3):
        hand.cluster.mark_policy()
        hand.start_step(step)
        micro = []
        for chunk in range(4 // n):
            rows = DATA[4 * step + n * chunk:4 * step + n * (chunk + 1)]
            micro += hand.attach_old_logps(hand.make_experience(rows, step, chunk)[0])
        for i in range(0, len(micro), A):
            hand.trainer.update(micro[i:i + A])
        hand.trainer.pop_metrics()
        hand.trainer.sync_model()
        hand.sync_rollout()
    for a, b in zip(params(learner), params(hand)):
        np.testing.assert_array_equal(a, b)
    assert learner.metrics.history("staleness/max")[1] == [0.0, 0.0, 0.0]
    assert learner.policy_version == 3


@pytest.mark.slow
def test_running_ahead_records_versions_respects_the_bound_and_uses_the_sampling_weights():
    learner = make(config(1, steps=4), Watched)
    assert learner.needs_old_logps and not learner.reads_come_first and not learner.cluster.donate_actor
    learner.train(DATA)
    lags = {s: s - v for s, v in learner.seen.items()}
    assert all(0 <= lag <= 1 for lag in lags.values()), lags
    assert lags[0] == 0 and max(lags.values()) == 1, lags  # the slow trainer let the producer run one step ahead
    steps, logged = learner.metrics.history("staleness/max")
    assert logged == [float(lags[s - 1]) for s in steps]
    assert learner.metrics.history("staleness/dropped")[1] == [0.0] * 4
    # a lagging batch's old log-probs: a full recompute under the weights of the version that sampled it
    step = next(s for s, lag in lags.items() if lag == 1)
    mb = next(m for s, ms in learner.batches if s == step for m in ms)
    model = nnx.clone(learner.trainer.model)
    nnx.update(model, jax.tree.unflatten(jax.tree.structure(nnx.state(model, nnx.Param)),
                                         [jnp.asarray(x) for x in learner.synced[learner.seen[step]]]))
    want = np.asarray(common.compute_completion_logps(model, mb["prompt_ids"], mb["prompt_mask"], mb["completion_ids"],
                                                      mb["completion_mask"], temperature=ROLL.temperature))
    np.testing.assert_allclose(mb["old_logps"], want * mb["completion_mask"], atol=1e-5)
    now = learner.synced[step]  # the weights that trained it are a sync later: really off-policy
    assert any(np.abs(a - b).max() > 0 for a, b in zip(now, learner.synced[learner.seen[step]]))


class Replaying(GRPOLearner):
    """Stamps the first micro-batch of the third step as sampled three syncs earlier (a replayed batch)."""

    def make_experience(self, rows, step, chunk):
        micro, m = super().make_experience(rows, step, chunk)
        if step == 2 and chunk == 0:
            micro[0] = {**micro[0], "policy_version": np.full(len(micro[0]["advantages"]), step - 3, np.int32)}
        return micro, m


@pytest.mark.slow
def test_experience_past_the_bound_is_dropped_and_counted():
    learner = make(config(1), Replaying)
    updates = []
    update = learner.trainer.update
    learner.trainer.update = lambda micro: (updates.append(learner.step), update(micro))
    learner.train(DATA)
    assert learner.metrics.history("staleness/dropped")[1] == [0.0, 0.0, 1.0]
    assert updates.count(2) == 1  # step 3 (index 2) trained one mini-batch of its two


def test_the_consumer_drops_micro_batches_past_the_bound_and_counts_them():
    """The trainer's side alone, on made-up experience: lag 2 > k = 1 is dropped, lag 1 trains, and both are counted."""
    import queue

    learner = make(rl.RLTrainingConfig(batch_size=2, max_steps=1, progress_bar=False, max_staleness=1))
    rows = 2 * ALGO.num_generations
    mb = dict(prompt_ids=np.ones((rows, 8), np.int32), prompt_mask=np.ones((rows, 8), np.int32),
              completion_ids=np.full((rows, 6), 5, np.int32), completion_mask=np.ones((rows, 6), np.int32),
              advantages=np.array([1.0, -1.0] * (rows // 2), np.float32),
              old_logps=np.full((rows, 6), -3.0, np.float32))
    learner.step = 3  # the weights have had three syncs
    q = queue.Queue()
    for version in (1, 2):  # lags 2 and 1
        q.put(("micro", {**mb, "policy_version": np.full(rows, version, np.int32)}))
    q.put(("end", {"data_position": 2, "metrics": {"rollout_logp_gap": 0.0}}))
    got = learner._consume_step(q)
    assert learner.trainer.step == 1 and learner.policy_version == 4
    assert (got["metrics"]["staleness/dropped"], got["metrics"]["staleness/max"]) == (1.0, 1.0)


@pytest.mark.slow
@pytest.mark.skipif("rollout_is_level" not in GRPOConfig.__dataclass_fields__, reason="needs GRPOConfig.rollout_is_level")
def test_running_ahead_with_rollout_correction_weighs_every_update():
    """Stale rows carry the trainer's old log-probs (version v) and the engine's; the correction's weights reach the loss."""
    import dataclasses

    model, tok = tiny.load()
    algo = dataclasses.replace(ALGO, rollout_is_level="token")
    learner = GRPOLearner(RLCluster(model, tok, rollout_config=ROLL), optax.adam(3e-3), config(1), algo,
                          reward_fns=[arith.reward])
    result = learner.train(DATA)
    weight = [v for k, v in result.metrics.items() if k.endswith("rollout_is/weight_mean")]
    assert result.step == 3 and weight and 0 < weight[0] <= algo.rollout_is_cap
    assert max(learner.metrics.history("staleness/max")[1]) <= 1
