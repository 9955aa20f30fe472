"""PPO: the critic against a NumPy forward, experience against a loop GAE, the critic learning, checkpoints, errors.

The PPO policy and value losses' gradients against finite differences live in test_algo_core.py."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from tunix_lit.data import arith
from tunix_lit.models import tiny
from tunix_lit.models import transformer as tfm
from tunix_lit.rl.cluster import RLCluster, RolloutConfig
from tunix_lit.rl.learner import RLTrainingConfig
from tunix_lit.rl.ppo import PPOConfig, PPOLearner, ValueModel, critic_from, ppo_advantages

ROLL = RolloutConfig(max_new_tokens=6, max_prompt_length=8, temperature=1.0)
DATA = arith.sample(arith.ArithConfig(), 96, "train", seed=4)


def make(cfg=None, algo=PPOConfig(beta=0.0), reference=None, head_init_std=0.02, reward_fns=(arith.reward,), **kw):
    model, tok = tiny.load()
    cluster = RLCluster(model, tok, reference=reference, critic=critic_from(model, head_init_std=head_init_std),
                        rollout_config=ROLL)
    cfg = cfg or RLTrainingConfig(batch_size=8, max_steps=2, progress_bar=False)
    return PPOLearner(cluster, optax.adam(1e-3), cfg, algo, reward_fns=list(reward_fns), **kw)


# ------------------------------------------------------------------------------------------ the critic
def _batch():
    prompt_ids = np.array([[0, 0, 5, 6, 7], [3, 4, 5, 6, 7], [0, 0, 0, 9, 2]], np.int32)
    prompt_mask = (np.arange(5) >= np.array([[2], [0], [3]])).astype(np.int32)
    completion_ids = np.array([[7, 8, 9, 1], [7, 8, 0, 0], [4, 4, 4, 4]], np.int32)
    completion_mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], np.int32)
    return prompt_ids, prompt_mask, completion_ids, completion_mask


def test_value_head_shapes_and_masking():
    policy, _ = tiny.load()
    p, pm, c, cm = _batch()
    zero = critic_from(policy)
    assert zero.value_head.kernel.shape == (policy.config.embed_dim, 1)
    v0 = zero.values(p, pm, c, cm)
    assert v0.shape == (3, 4) and v0.dtype == jnp.float32 and float(jnp.abs(v0).max()) == 0.0
    v = np.asarray(critic_from(policy, head_init_std=0.05, seed=1).values(p, pm, c, cm))
    assert (v[cm == 0] == 0).all() and (v[cm == 1] != 0).all()
    # the critic owns its arrays: changing it leaves the policy alone
    critic = critic_from(policy)
    critic.backbone.embedder.embedding[...] = critic.backbone.embedder.embedding[...] + 1.0
    assert not np.allclose(critic.backbone.embedder.embedding[...], policy.embedder.embedding[...])


def _np_rmsnorm(x, w, eps):
    return w * x / np.sqrt(np.mean(x * x, -1, keepdims=True) + eps)


def _np_rope(x, pos, theta):
    H = x.shape[-1]
    freqs = theta ** (-np.arange(0, H, 2) / H)
    ang = pos[:, None, None] * freqs  # [L, 1, H/2]
    x1, x2 = x[..., :H // 2], x[..., H // 2:]
    return np.concatenate([x1 * np.cos(ang) - x2 * np.sin(ang), x2 * np.cos(ang) + x1 * np.sin(ang)], -1)


def _np_values(critic: ValueModel, tokens: np.ndarray) -> np.ndarray:
    """The tiny (Qwen3-style) backbone and the value head on one unpadded sequence, in float64 NumPy: [L]."""
    bb, cfg = critic.backbone, critic.backbone.config
    assert cfg.family == "qwen3" and cfg.qk_norm and not cfg.sandwich_norm and cfg.activation == "silu"
    g = lambda a: np.asarray(a[...], np.float64)
    L, G, eps = len(tokens), cfg.num_heads // cfg.num_kv_heads, cfg.norm_eps
    pos = np.arange(L, dtype=np.float64)
    x = g(bb.embedder.embedding)[tokens]
    causal = np.tril(np.ones((L, L), bool))
    for layer in bb.layers:
        at = layer.attn
        h = _np_rmsnorm(x, g(layer.pre_attn_norm.scale), eps)
        q = np.einsum("ld,dnh->lnh", h, g(at.q_proj.kernel))
        k = np.einsum("ld,dkh->lkh", h, g(at.k_proj.kernel))
        v = np.einsum("ld,dkh->lkh", h, g(at.v_proj.kernel))
        q, k = _np_rmsnorm(q, g(at.q_norm.scale), eps), _np_rmsnorm(k, g(at.k_norm.scale), eps)
        q, k = _np_rope(q, pos, cfg.rope_theta), _np_rope(k, pos, cfg.rope_theta)
        k, v = np.repeat(k, G, axis=1), np.repeat(v, G, axis=1)  # head n reads kv head n // G
        s = np.einsum("qnh,knh->nqk", q, k) / math.sqrt(cfg.head_dim)
        s = np.where(causal, s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        x = x + np.einsum("nhd,lnh->ld", g(at.o_proj.kernel), np.einsum("nqk,knh->qnh", p, v))
        h = _np_rmsnorm(x, g(layer.pre_mlp_norm.scale), eps)
        gate = h @ g(layer.mlp.gate_proj.kernel)
        x = x + (gate / (1 + np.exp(-gate)) * (h @ g(layer.mlp.up_proj.kernel))) @ g(layer.mlp.down_proj.kernel)
    x = _np_rmsnorm(x, g(bb.final_norm.scale), eps)
    return (x @ g(critic.value_head.kernel) + g(critic.value_head.bias))[:, 0]


def test_values_match_an_independent_numpy_forward():
    """Each completion slot's value is V(prompt + the completion tokens before it), from an unpadded forward."""
    policy, _ = tiny.load()
    critic = critic_from(policy, head_init_std=0.05, seed=3)
    p, pm, c, cm = _batch()
    got = np.asarray(critic.values(p, pm, c, cm))
    for b in range(len(p)):
        seq = np.concatenate([p[b][pm[b] == 1], c[b][cm[b] == 1]])
        want = _np_values(critic, seq)
        n_prompt = int(pm[b].sum())
        for t in range(int(cm[b].sum())):
            np.testing.assert_allclose(got[b, t], want[n_prompt - 1 + t], rtol=1e-4, atol=1e-5)


def test_critic_on_a_mesh_is_placed_by_its_names_and_gives_the_same_values():
    policy, tok = tiny.load()
    critic = critic_from(policy, head_init_std=0.05)
    p, pm, c, cm = _batch()
    want = np.asarray(critic.values(p, pm, c, cm))
    mesh = tfm.make_mesh(fsdp=4, tp=2)
    cluster = RLCluster(policy, tok, critic=critic, meshes={"actor": mesh, "critic": mesh}, rollout_config=ROLL)
    kernel = cluster.critic.value_head.kernel[...]
    assert kernel.sharding.spec == jax.sharding.PartitionSpec("fsdp", None)
    with jax.set_mesh(mesh):
        got = np.asarray(jax.jit(lambda m, *a: m.values(*a))(cluster.critic, p, pm, c, cm))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------ experience
def _loop_gae(rewards, values, mask, gamma, lam):
    adv = np.zeros(rewards.shape)
    for b in range(rewards.shape[0]):
        future_adv, future_v = 0.0, 0.0
        for t in range(rewards.shape[1] - 1, -1, -1):
            if not mask[b, t]:
                continue
            delta = rewards[b, t] + gamma * future_v - values[b, t]
            future_adv = delta + gamma * lam * future_adv
            future_v = values[b, t]
            adv[b, t] = future_adv
    return adv


def test_experience_advantages_equal_a_loop_gae_on_the_batch():
    learner = make(algo=PPOConfig(beta=0.1, gamma=0.97, gae_lambda=0.9), reference="actor")
    rows = DATA[:8]
    micro, metrics = learner.make_experience(rows, step=3, chunk=0)
    assert len(micro) == 1 and math.isfinite(metrics["kl/rollout_ref"])
    b = micro[0]
    m = b["completion_mask"]
    assert b["advantages"].shape == b["returns"].shape == b["old_values"].shape == m.shape == (8, ROLL.max_new_tokens)
    ro = learner.cluster.generate([r["prompt"] for r in rows], seed=3 * 10_000)  # the same sample again
    np.testing.assert_array_equal(ro.completion_ids, b["completion_ids"])
    score = np.array([arith.score_completion(t, r["answer"]) for t, r in zip(ro.text, rows)])
    ref = np.asarray(learner.cluster.reference_logps(ro), np.float64)
    old = np.asarray(learner.cluster.rollout_logps(ro), np.float64)
    np.testing.assert_allclose(b["old_logps"], old * m, atol=1e-6)
    values = np.asarray(learner._critic_values(ro, 8), np.float64) * m
    np.testing.assert_allclose(b["old_values"], values, atol=1e-6)
    rewards = np.zeros(m.shape)
    for i in range(m.shape[0]):
        for t in range(m.shape[1]):
            if m[i, t]:
                r = ref[i, t] - old[i, t]
                rewards[i, t] = -0.1 * (math.exp(r) - 1 - r)  # k3
        rewards[i, int(m[i].sum()) - 1] += score[i]
    raw = _loop_gae(rewards, values, m, 0.97, 0.9)
    flat = raw[m == 1]
    whitened = np.where(m == 1, (raw - flat.mean()) / np.sqrt(flat.var(ddof=1) + 1e-8), 0.0)
    np.testing.assert_allclose(b["advantages"], whitened, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(b["returns"], (raw + values) * m, rtol=1e-5, atol=1e-5)


def test_rows_with_a_non_finite_reward_are_not_trained():
    def half_nan(prompts, completions, answer, **_):
        return [float("nan") if i % 2 else 1.0 for i in range(len(prompts))]

    learner = make(reward_fns=(half_nan,))
    micro, metrics = learner.make_experience(DATA[:8], step=0, chunk=0)
    b = micro[0]
    assert (b["completion_mask"][1::2] == 0).all() and (b["completion_mask"][::2].sum(-1) > 0).all()
    assert (b["advantages"][1::2] == 0).all() and metrics["rewards/nonfinite"] == 4.0


def test_ppo_advantages_without_the_kl_is_the_plain_gae():
    rng = np.random.default_rng(1)
    mask = (np.arange(5) < np.array([[5], [2], [4]])).astype(np.int32)
    values = (rng.normal(size=(3, 5)) * mask).astype(np.float32)
    scores = np.array([1.0, -0.5, 0.25], np.float32)
    adv, ret, rew = ppo_advantages(scores, values, mask, gamma=1.0, lam=1.0, whiten=False)
    # λ = γ = 1: every trained token's advantage is the score minus its own value
    np.testing.assert_allclose(np.asarray(adv), (scores[:, None] - values) * mask, atol=1e-6)
    np.testing.assert_allclose(np.asarray(ret), scores[:, None] * mask, atol=1e-6)


# ------------------------------------------------------------------------------------------ training
def test_the_critic_trainer_fits_the_returns_of_a_batch():
    """The critic's own trainer, on one batch of experience: its value loss falls, the actor is untouched.

    No value clipping here: with V_old = 0 the clipped term keeps the loss of a return of 1 above ½(1 − 0.2)²."""
    learner = make(algo=PPOConfig(beta=0.0, clip_range_value=None), head_init_std=0.0,
                   critic_optimizer=optax.adam(1e-3))
    micro, _ = learner.make_experience(DATA[:8], step=0, chunk=0)
    actor0 = jax.tree.map(np.asarray, nnx.state(learner.cluster.actor, nnx.Param))
    for _ in range(25):
        learner.critic_trainer.update(micro)
    rows = learner.critic_trainer.pop_metrics()
    losses = [r["loss"] for r in rows]
    assert len(losses) == 25 and losses[-1] < 0.5 * losses[0], losses
    assert "vf_clipfrac" in rows[0] and "vf_loss" not in rows[0]
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, nnx.state(learner.cluster.actor, nnx.Param)),
                 actor0)


@pytest.mark.slow
def test_a_short_run_lowers_the_value_loss_and_checkpoints_the_critic(tmp_path):
    cfg = RLTrainingConfig(batch_size=8, mini_batch_size=4, max_steps=12, progress_bar=False,
                           checkpoint_dir=str(tmp_path), save_every_n_steps=6)
    learner = make(cfg, head_init_std=0.0, critic_optimizer=optax.adam(3e-3))
    result = learner.train(DATA)
    learner.close()
    assert result.step == 12 and result.stop_reason == "max_steps"
    assert learner.critic_trainer.step == 24 and learner.trainer.step == 24  # two mini-batches a step, μ = 1
    _, vf = learner.metrics.history("critic/loss")
    assert len(vf) == 12 and all(math.isfinite(x) for x in vf)
    assert np.mean(vf[-4:]) < 0.7 * np.mean(vf[:4]), vf
    for key in ("actor/loss", "actor/pg_clipfrac", "critic/vf_clipfrac", "critic/values_mean", "rewards/mean"):
        assert key in result.metrics, key
    # the critic is saved beside the actor and restored with it
    assert (tmp_path / "critic").is_dir() and learner._critic_checkpointer.steps() == [6, 12]
    saved = jax.tree.map(np.asarray, nnx.state(learner.cluster.critic, nnx.Param))
    again = make(cfg)
    assert again.restore_checkpoint() == 12 and again.critic_trainer.step == 24
    again.critic_trainer._sync()
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, nnx.state(again.cluster.critic, nnx.Param)),
                 saved)
    again.close()


@pytest.mark.slow  # 19 s; the default run checks the actor's donation in tests/rl/test_learner.py
def test_the_critic_donates_only_when_every_value_is_read_before_the_update():
    """One mini-batch a step: the critic's first update consumes its starting buffers (donated), and the run goes
    on (the producer reads the critic's new arrays next step). Two mini-batches: no promise, no donation."""
    two = make(RLTrainingConfig(batch_size=8, mini_batch_size=4, max_steps=1, progress_bar=False))
    assert not two.reads_come_first and not two.cluster.donate_actor
    two.close()
    one = make(RLTrainingConfig(batch_size=8, max_steps=2, progress_bar=False))
    assert one.reads_come_first and one.cluster.donate_actor
    first = jax.tree.leaves(nnx.state(one.cluster.critic, nnx.Param))
    result = one.train(DATA)
    one.close()
    assert result.step == 2 and all(x.is_deleted() for x in first)
    assert all(math.isfinite(v) for v in one.metrics.history("critic/loss")[1])


# ------------------------------------------------------------------------------------------ errors
def test_bad_inputs_name_the_problem():
    model, tok = tiny.load()
    cfg = RLTrainingConfig(batch_size=8, max_steps=1, progress_bar=False)
    bare = RLCluster(model, tok, rollout_config=ROLL)
    with pytest.raises(ValueError, match="critic=critic_from"):
        PPOLearner(bare, optax.adam(1e-3), cfg, PPOConfig(beta=0.0), reward_fns=[arith.reward])
    model2, _ = tiny.load()
    wrong = RLCluster(model2, tok, critic=tiny.load()[0], rollout_config=ROLL)
    with pytest.raises(TypeError, match="ValueModel"):
        PPOLearner(wrong, optax.adam(1e-3), cfg, PPOConfig(beta=0.0), reward_fns=[arith.reward])
    model3, _ = tiny.load()
    no_ref = RLCluster(model3, tok, critic=critic_from(model3), rollout_config=ROLL)
    with pytest.raises(ValueError, match="reference"):
        PPOLearner(no_ref, optax.adam(1e-3), cfg, PPOConfig(beta=0.04), reward_fns=[arith.reward])
    with pytest.raises(ValueError, match="reward function"):
        PPOLearner(no_ref, optax.adam(1e-3), cfg, PPOConfig(beta=0.0), reward_fns=[])
    with pytest.raises(TypeError, match="PPOConfig"):
        PPOLearner(no_ref, optax.adam(1e-3), cfg, dict(beta=0.0), reward_fns=[arith.reward])
    with pytest.raises(TypeError, match="Transformer"):
        critic_from(critic_from(model3))
    with pytest.raises(ValueError, match="head_init_std"):
        critic_from(model3, head_init_std=-1.0)
    with pytest.raises(ValueError, match="old_logps and ref_logps"):
        ppo_advantages(np.zeros(2), np.zeros((2, 3)), np.ones((2, 3)), beta=0.1)


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_iterations=0), "num_iterations"), (dict(gamma=1.2), "gamma"), (dict(gae_lambda=-0.1), "gae_lambda"),
    (dict(beta=-1.0), "beta"), (dict(kl_estimator="k4"), "k4"), (dict(epsilon=1.0), "epsilon"),
    (dict(epsilon=0.2, epsilon_high=0.1), "clip-higher"), (dict(epsilon_c=0.5), "epsilon_c"),
    (dict(clip_range_value=0.0), "clip_range_value"), (dict(entropy_coef=-0.1), "entropy_coef"),
    (dict(entropy_coef=0.1, compute_entropy=False), "compute_entropy"), (dict(loss_agg_mode="mean"), "mean"),
])
def test_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PPOConfig(**kwargs)


def test_fractional_scores_stay_fractional_in_the_token_rewards():
    """A partial-credit score of 0.1 sits on the last trained token as 0.1 (upstream's integer buffer would make it 0)."""
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], np.int32)
    scores = np.array([0.1, 0.75], np.float32)
    _, _, rewards = ppo_advantages(scores, np.zeros((2, 4), np.float32), mask, whiten=False)
    expected = np.zeros((2, 4), np.float32)
    expected[0, 2], expected[1, 3] = 0.1, 0.75
    np.testing.assert_allclose(np.asarray(rewards), expected, atol=1e-7)
