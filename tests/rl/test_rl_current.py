"""What RL practice added after Tunix 0.1.7: rollout correction weights, CISPO, REINFORCE++-baseline advantages,
and the RLOO / REINFORCE++ / CISPO presets, each against an independent NumPy computation."""
import numpy as np
import pytest

import jax
import jax.numpy as jnp

from tunix_lit.rl import algo_core as ac
from tunix_lit.rl import grpo


# ---------------------------------------------------------------- rollout correction

def np_is_weights(old, rollout, mask, level, mode, cap):
    """Vectorised NumPy in float64: ρ per token or per row (masked sum), then truncate or mask."""
    m = mask.astype(bool)
    d = np.where(m, old.astype(np.float64) - rollout.astype(np.float64), 0.0)
    if level == "sequence":
        d = np.repeat(d.sum(-1, keepdims=True), d.shape[1], axis=1)
    with np.errstate(over="ignore"):
        rho = np.exp(d)
    w = np.minimum(rho, cap) if mode == "truncate" else np.where(rho <= cap, rho, 0.0)
    return np.where(m, w, 0.0)


@pytest.fixture
def lp_batch():
    rng = np.random.default_rng(7)
    B, T = 5, 7
    mask = (np.arange(T)[None] < rng.integers(0, T + 1, B)[:, None]).astype(np.int32)
    mask[0, :] = 1
    old = -rng.uniform(0.05, 3.0, (B, T)).astype(np.float32)
    rollout = (old + rng.normal(0, 0.6, (B, T))).astype(np.float32)
    return old, rollout, mask


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("mode", ["truncate", "mask"])
@pytest.mark.parametrize("cap", [1.5, 2.0, 10.0])
def test_rollout_is_weights_match_numpy(lp_batch, level, mode, cap):
    old, rollout, mask = lp_batch
    got = ac.rollout_is_weights(old, rollout, mask, level=level, mode=mode, cap=cap)
    assert got.dtype == jnp.float32 and got.shape == old.shape
    np.testing.assert_allclose(np.asarray(got), np_is_weights(old, rollout, mask, level, mode, cap), rtol=2e-5,
                               atol=1e-7)
    assert np.all(np.asarray(got)[mask == 0] == 0)


def test_rollout_is_weights_extremes_and_nan_off_mask():
    old = np.array([[0.0, 0.0, -1.0], [-50.0, -1.0, 0.0]], np.float32)
    rollout = np.array([[-60.0, 0.0, np.nan], [0.0, -1.0, 0.0]], np.float32)  # ρ = e^60 overflows float32
    mask = np.array([[1, 1, 0], [1, 1, 0]])
    t = np.asarray(ac.rollout_is_weights(old, rollout, mask, level="token", mode="truncate", cap=2.0))
    np.testing.assert_allclose(t, [[2.0, 1.0, 0.0], [np.exp(-50.0), 1.0, 0.0]], rtol=1e-5)
    s = np.asarray(ac.rollout_is_weights(old, rollout, mask, level="sequence", mode="mask", cap=2.0))
    assert np.all(np.isfinite(s)) and np.all(s[0] == 0)  # row 0's product is e^60 > cap: the whole row dropped


def test_rollout_is_weights_are_constants_and_check_arguments(lp_batch):
    old, rollout, mask = lp_batch
    g = jax.grad(lambda o: ac.rollout_is_weights(o, rollout, mask).sum())(jnp.asarray(old))
    assert np.all(np.asarray(g) == 0)
    with pytest.raises(ValueError, match="level"):
        ac.rollout_is_weights(old, rollout, mask, level="row")
    with pytest.raises(ValueError, match="mode"):
        ac.rollout_is_weights(old, rollout, mask, mode="clip")
    with pytest.raises(ValueError, match="cap"):
        ac.rollout_is_weights(old, rollout, mask, cap=0.0)
    with pytest.raises(ValueError, match="share"):
        ac.rollout_is_weights(old[:, :3], rollout, mask)


# ---------------------------------------------------------------- CISPO

def np_cispo(logps, old, adv, mask, eps_high, mode):
    lp, o = logps.astype(np.float64), old.astype(np.float64)
    w = np.minimum(np.exp(np.clip(lp - o, -20, 20)), 1 + eps_high)
    per = -w * adv.astype(np.float64)[:, None] * lp * mask
    if mode == "token-mean":
        return per.sum() / mask.sum()
    n = mask.sum(-1)
    return np.mean((per.sum(-1) / np.maximum(n, 1))[n > 0])


@pytest.mark.parametrize("mode", ["token-mean", "sequence-mean-token-mean"])
@pytest.mark.parametrize("eps_high", [0.2, 0.28, 3.0])
def test_cispo_loss_value_and_gradient(lp_batch, mode, eps_high):
    old, _, mask = lp_batch
    rng = np.random.default_rng(11)
    logps = (old + rng.normal(0, 0.4, old.shape)).astype(np.float32)
    adv = rng.normal(size=old.shape[0]).astype(np.float32)
    loss, metrics = ac.cispo_loss(logps, old, adv, mask, epsilon_high=eps_high, loss_agg_mode=mode)
    np.testing.assert_allclose(float(loss), np_cispo(logps, old, adv, mask, eps_high, mode), rtol=1e-5, atol=1e-6)
    # the weight is detached: d loss / d logps = −w·A (scaled by the aggregation), never zero where A ≠ 0
    grad = np.asarray(jax.grad(lambda lp: ac.cispo_loss(lp, old, adv, mask, epsilon_high=eps_high,
                                                        loss_agg_mode=mode)[0])(jnp.asarray(logps)))
    w = np.minimum(np.exp(logps.astype(np.float64) - old), 1 + eps_high)
    scale = 1 / mask.sum() if mode == "token-mean" else 1 / (np.maximum(mask.sum(-1), 1)[:, None] * (mask.sum(-1) > 0).sum())
    np.testing.assert_allclose(grad, -w * adv[:, None] * mask * scale, rtol=1e-4, atol=1e-7)
    frac = ((np.exp(logps.astype(np.float64) - old) > 1 + eps_high) * mask).sum() / mask.sum()
    np.testing.assert_allclose(float(metrics["pg_clipfrac"]), frac, atol=1e-6)


def test_cispo_is_registered_and_on_policy_equals_reinforce(lp_batch):
    old, _, mask = lp_batch
    assert ac.get_policy_loss("cispo") is ac.cispo_loss
    adv = np.linspace(-1, 1, old.shape[0]).astype(np.float32)
    g_cispo = jax.grad(lambda lp: ac.cispo_loss(lp, None, adv, mask, loss_agg_mode="token-mean")[0])(jnp.asarray(old))
    g_grpo = jax.grad(lambda lp: ac.grpo_loss(lp, None, adv, mask, loss_agg_mode="token-mean")[0])(jnp.asarray(old))
    np.testing.assert_allclose(np.asarray(g_cispo), np.asarray(g_grpo), atol=1e-7)


# ---------------------------------------------------------------- REINFORCE++ with baseline

def np_reinforce_pp(rewards, G, mask):
    r = rewards.astype(np.float64).reshape(-1, G)
    centred = (r - r.mean(-1, keepdims=True)).reshape(-1)
    x = np.repeat(centred[:, None], mask.shape[1], axis=1)
    picked = x[mask.astype(bool)]
    mu, var = picked.mean(), picked.var(ddof=1)
    return np.where(mask.astype(bool), (x - mu) / np.sqrt(var + 1e-8), 0.0)


@pytest.mark.parametrize("G", [2, 4])
def test_reinforce_pp_baseline_matches_numpy(G):
    rng = np.random.default_rng(G)
    N, T = 12, 6
    rewards = rng.choice([0.0, 0.1, 1.0], N).astype(np.float32)
    mask = (np.arange(T)[None] < rng.integers(1, T + 1, N)[:, None]).astype(np.int32)
    got = ac.reinforce_pp_baseline_advantages(rewards, G, mask)
    assert got.dtype == jnp.float32 and got.shape == (N, T)
    np.testing.assert_allclose(np.asarray(got), np_reinforce_pp(rewards, G, mask), rtol=1e-5, atol=1e-6)
    assert ac.get_advantage_estimator("reinforce_pp") is ac.reinforce_pp_baseline_advantages


def test_reinforce_pp_baseline_bad_mask():
    with pytest.raises(ValueError, match=r"mask must be \[N, T\]"):
        ac.reinforce_pp_baseline_advantages(np.zeros(4, np.float32), 2, np.ones((3, 5)))


# ---------------------------------------------------------------- presets and config

def test_presets_set_their_knobs_and_take_overrides():
    r = grpo.rloo_config()
    assert (r.advantage_estimator, r.loss_agg_mode, r.num_iterations, r.beta) == ("rloo", "sequence-mean-token-sum", 1, 0.0)
    p = grpo.reinforce_pp_config(num_generations=8)
    assert (p.advantage_estimator, p.loss_agg_mode, p.num_generations) == ("reinforce_pp", "token-mean", 8)
    c = grpo.cispo_config(epsilon_high=4.0)
    assert (c.loss_algo, c.epsilon_high, c.loss_agg_mode) == ("cispo", 4.0, "token-mean")


def test_grpo_config_rollout_correction_fields():
    cfg = grpo.GRPOConfig(rollout_is_level="sequence", rollout_is_mode="mask", rollout_is_cap=3.0)
    assert (cfg.rollout_is_level, cfg.rollout_is_mode, cfg.rollout_is_cap) == ("sequence", "mask", 3.0)
    assert grpo.GRPOConfig().rollout_is_level is None  # off unless asked for
    for bad, match in [(dict(rollout_is_level="row"), "rollout_is_level"), (dict(rollout_is_mode="clip"), "rollout_is_mode"),
                       (dict(rollout_is_cap=-1.0), "rollout_is_cap"), (dict(loss_algo="ppo"), "loss_algo")]:
        with pytest.raises(ValueError, match=match):
            grpo.GRPOConfig(**bad)
