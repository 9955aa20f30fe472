"""The GRPO learner with what RL practice added after 0.1.7: per-token REINFORCE++ advantages reach the batch, the
rollout-correction weights scale the loss, and an engine without log-probs is refused by name."""
import numpy as np
import optax
import pytest

import jax.numpy as jnp

from tunix_lit.data import arith
from tunix_lit.models import tiny
from tunix_lit.rl import algo_core as ac
from tunix_lit.rl import learner as rl
from tunix_lit.rl.cluster import RLCluster, RolloutConfig
from tunix_lit.rl.grpo import GRPOConfig, GRPOLearner, reinforce_pp_config

ROLL = RolloutConfig(max_new_tokens=6, max_prompt_length=8, temperature=1.0)
ROWS = arith.sample(arith.ArithConfig(), 4, "train", seed=4)


def make(algo):
    model, tok = tiny.load()
    cluster = RLCluster(model, tok, rollout_config=ROLL)
    return GRPOLearner(cluster, optax.adam(1e-3), rl.RLTrainingConfig(batch_size=4, max_steps=1, progress_bar=False),
                       algo, reward_fns=[arith.reward])


@pytest.mark.slow
def test_reinforce_pp_advantages_are_per_token_and_whitened_over_the_batch():
    learner = make(reinforce_pp_config(num_generations=2))
    micro, metrics = learner.make_experience(ROWS, step=0, chunk=0)
    adv = np.concatenate([mb["advantages"] for mb in micro])
    mask = np.concatenate([mb["completion_mask"] for mb in micro])
    assert adv.shape == mask.shape and np.all(adv[mask == 0] == 0)
    picked = adv[mask == 1]
    if picked.std() > 0:  # some group's rewards differed: whitened to mean 0, variance 1 over trained tokens
        assert abs(picked.mean()) < 1e-5 and abs(picked.var(ddof=1) - 1) < 1e-3


@pytest.mark.slow
def test_rollout_correction_weights_scale_the_policy_term():
    learner = make(GRPOConfig(num_generations=2, beta=0.0, rollout_is_level="token", rollout_is_cap=2.0,
                              compute_entropy=False))
    micro, _ = learner.make_experience(ROWS, step=0, chunk=0)
    batch = {k: jnp.asarray(v) for k, v in micro[0].items()}
    assert "rollout_logps" in batch
    base = learner.loss_fn(learner.cluster.actor, batch, None)
    # an engine that gave every trained token half the trainer's probability: ρ = 2 = the cap, weights all 2
    half = {**batch, "rollout_logps": batch["rollout_logps"] - np.log(2.0) * batch["completion_mask"]}
    doubled = learner.loss_fn(learner.cluster.actor, half, None)
    np.testing.assert_allclose(float(doubled.metrics["rollout_is/weight_mean"]), 2.0, rtol=1e-4)
    np.testing.assert_allclose(float(doubled.total), 2 * float(base.total), rtol=1e-3, atol=1e-6)


def test_rollout_correction_needs_an_engine_with_log_probs():
    class Quiet:  # stands in for the cluster: an engine that reports no log-probs
        reference = None
        rollout = type("E", (), {"returns_logprobs": False, "name": "quiet"})()

    with pytest.raises(ValueError, match="needs the engine's log-probs"):
        GRPOLearner(Quiet(), optax.adam(1e-3), rl.RLTrainingConfig(batch_size=4, max_steps=1, progress_bar=False),
                    GRPOConfig(num_generations=2, beta=0.0, rollout_is_level="token"), reward_fns=[arith.reward])
