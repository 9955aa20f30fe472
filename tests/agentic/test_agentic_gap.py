"""Agentic GRPO (chapter 53) measures the sampler-trainer gap on episodes in its loss, on the model's tokens only."""
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tunix_lit.agentic import tools as T
from tunix_lit.agentic.learner import AgenticConfig, AgenticGRPOLearner, load_calculator
from tunix_lit.agentic.trajectory import EpisodeConfig, ScriptedEngine, TrajectoryCollector
from tunix_lit.rl.cluster import RLCluster, RolloutConfig
from tunix_lit.rl.grpo import GRPOConfig
from tunix_lit.rl.learner import GAP_METRIC, RLTrainingConfig

G = 4


def learner(measure: bool) -> AgenticGRPOLearner:
    model, tok = load_calculator()
    stops = (tok.eos_id, tok.encode("\n", add_special_tokens=False)[0])
    cluster = RLCluster(model, tok, rollout_config=RolloutConfig(max_new_tokens=16, max_prompt_length=48,
                                                                 temperature=1.0, stop_tokens=stops,
                                                                 measure_logp_gap=measure))
    agentic = AgenticConfig(episode=EpisodeConfig(max_new_tokens=16, max_response_tokens=32, max_context=64,
                                                  stop_tokens=stops))
    return AgenticGRPOLearner(cluster, optax.adam(1e-3), RLTrainingConfig(batch_size=1, max_steps=1, progress_bar=False),
                              GRPOConfig(num_generations=G, beta=0.0), agentic)


TASK = {"prompt": "1234+5678=", "answer": "6912"}


def scripted_group(lrn):
    """G episodes from a script (call, then copy the result): no model decode, so this stays fast."""
    def script(context):
        return context.split("=")[0] + "\n" if "\n" not in context else context.split("\n")[-2]
    collector = TrajectoryCollector(ScriptedEngine(lrn.cluster.tokenizer, script), lrn.cluster.tokenizer,
                                    lrn.collector.config)
    return [[collector.collect(T.calculator_env(TASK), seed=i) for i in range(G)]]


def test_on_policy_episodes_carry_their_sampling_logps_only_on_model_tokens():
    """The sampler's log-probs ride along as sampler_logps: negative on the model's tokens, 0 on observations."""
    lrn = learner(measure=True)
    micro, _ = lrn.make_experience(scripted_group(lrn), step=0, chunk=0)
    batch = micro[0]
    assert "sampler_logps" in batch and "old_logps" not in batch
    mask, attention, lp = (np.asarray(batch[k]) for k in ("completion_mask", "completion_attention", "sampler_logps"))
    assert (lp[mask == 1] < 0).all()  # a sampled token's log-prob at temperature 1
    assert (lp[(attention == 1) & (mask == 0)] == 0).all()  # observations: the calculator wrote them
    assert ((attention == 1) & (mask == 0)).any()  # and there are some


@pytest.mark.slow  # real episodes and an eager loss: about 40 s on 2 cores
def test_the_loss_reports_a_small_gap_against_its_own_forward():
    """The loss's forward is the actor that sampled: |sampler - actor| on model tokens is float32 noise."""
    lrn = learner(measure=True)
    groups = [[lrn.collector.collect(T.calculator_env(TASK), seed=i) for i in range(G)]]
    batch = lrn.make_experience(groups, step=0, chunk=0)[0][0]
    out = lrn.loss_fn(lrn.cluster.actor, {k: jnp.asarray(v) for k, v in batch.items()}, None)
    gap = float(out.metrics[GAP_METRIC])
    assert np.isfinite(gap) and 0.0 <= gap < 1e-3, gap


def test_a_job_that_asks_not_to_measure_carries_no_sampler_logps():
    lrn = learner(measure=False)
    micro, _ = lrn.make_experience(scripted_group(lrn), step=0, chunk=0)
    assert "sampler_logps" not in micro[0] and "old_logps" not in micro[0]
