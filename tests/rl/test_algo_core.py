"""Advantage estimators and policy losses against NumPy loops, hand-worked values and finite differences."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tunix_lit.rl import algo_core as ac
from tunix_lit.rl import common


# ---------------------------------------------------------------- group advantages: independent references

def _groups_of(rewards, G):
    """[(indices of finite rewards, number of invalid)] per group."""
    out = []
    for g0 in range(0, len(rewards), G):
        idx = [i for i in range(g0, g0 + G) if math.isfinite(rewards[i])]
        out.append((idx, G - len(idx)))
    return out


def np_grpo(rewards, G, eps=1e-6):
    r = [float(v) for v in rewards]
    adv, bad = np.zeros(len(r)), 0
    for idx, nbad in _groups_of(r, G):
        bad += nbad
        if len(idx) < 2 or len({r[i] for i in idx}) == 1:
            continue
        mean = math.fsum(r[i] for i in idx) / len(idx)
        std = math.sqrt(math.fsum((r[i] - mean) ** 2 for i in idx) / (len(idx) - 1))
        for i in idx:
            adv[i] = (r[i] - mean) / (std + eps)
    return adv, bad


def np_drgrpo(rewards, G):
    r = [float(v) for v in rewards]
    adv, bad = np.zeros(len(r)), 0
    for idx, nbad in _groups_of(r, G):
        bad += nbad
        for i in idx:
            adv[i] = r[i] - math.fsum(r[j] for j in idx) / len(idx)
    return adv, bad


def np_rloo(rewards, G):
    r = [float(v) for v in rewards]
    adv, bad = np.zeros(len(r)), 0
    for idx, nbad in _groups_of(r, G):
        bad += nbad
        if len(idx) < 2:
            continue
        for i in idx:
            adv[i] = r[i] - math.fsum(r[j] for j in idx if j != i) / (len(idx) - 1)
    return adv, bad


ESTIMATORS = [("grpo", np_grpo), ("drgrpo", np_drgrpo), ("rloo", np_rloo)]


@pytest.mark.parametrize("name,ref", ESTIMATORS)
@pytest.mark.parametrize("G", [2, 4, 8])
def test_group_estimators_match_numpy_loops(name, ref, G):
    rewards = np.random.default_rng(G).uniform(-2, 5, 24).astype(np.float32)
    adv, bad = ac.get_advantage_estimator(name)(jnp.asarray(rewards), G)
    want, want_bad = ref(rewards.astype(np.float64), G)
    np.testing.assert_allclose(adv, want, rtol=1e-4, atol=1e-5)
    assert adv.shape == (24,) and adv.dtype == jnp.float32 and int(bad) == want_bad == 0


def test_grpo_hand_worked_group():
    """Group (1, 2, 3, 6): mean 3, sample variance (4+1+0+9)/3 = 14/3, so A = (r - 3) / sqrt(14/3)."""
    adv, _ = ac.grpo_advantages(jnp.array([1.0, 2.0, 3.0, 6.0]), 4)
    s = math.sqrt(14 / 3)
    np.testing.assert_allclose(adv, [-2 / s, -1 / s, 0.0, 3 / s], rtol=1e-5)


def test_rloo_and_drgrpo_hand_worked_values():
    """[1..6] in groups of 3: RLOO subtracts the mean of the other two; Dr.GRPO the group mean."""
    np.testing.assert_allclose(ac.rloo_advantages(jnp.arange(1.0, 7.0), 3)[0], [-1.5, 0, 1.5, -1.5, 0, 1.5])
    np.testing.assert_allclose(ac.drgrpo_advantages(jnp.arange(1.0, 7.0), 3)[0], [-1, 0, 1, -1, 0, 1])


@pytest.mark.parametrize("name", ["grpo", "drgrpo", "rloo"])
@pytest.mark.parametrize("value", [0.0, 1.0, 0.1, -3.7, 1e6 + 0.1])
def test_equal_reward_groups_give_exactly_zero(name, value):
    rewards = jnp.concatenate([jnp.full((10,), value, jnp.float32), jnp.array([0.0, 1.0] * 5)])
    adv, bad = ac.get_advantage_estimator(name)(rewards, 10)
    assert (np.asarray(adv[:10]) == 0).all() and np.isfinite(np.asarray(adv)).all() and int(bad) == 0
    assert (np.asarray(adv[10:]) != 0).all()  # the other group still has a signal


@pytest.mark.parametrize("name,ref", ESTIMATORS)
def test_nan_and_inf_rewards_are_excluded_zeroed_and_counted(name, ref):
    rewards = np.array([1.0, np.nan, 3.0, 7.0,  np.nan, np.nan, np.nan, np.nan,  2.0, np.inf, -np.inf, 5.0,
                        4.0, 1.0, 0.0, 2.0], np.float32)
    adv, bad = ac.get_advantage_estimator(name)(jnp.asarray(rewards), 4)
    want, want_bad = ref(rewards.astype(np.float64), 4)
    assert np.isfinite(np.asarray(adv)).all()
    assert int(bad) == want_bad == 7
    np.testing.assert_allclose(adv, want, rtol=1e-5, atol=1e-6)
    assert (np.asarray(adv)[~np.isfinite(rewards)] == 0).all()
    # excluded, not imputed: group 0's valid rewards get the advantages of the group (1, 3, 7) alone
    alone, _ = ac.get_advantage_estimator(name)(jnp.array([1.0, 3.0, 7.0]), 3)
    np.testing.assert_allclose(np.asarray(adv)[[0, 2, 3]], alone, rtol=1e-5)


def test_estimators_jit():
    rewards = jnp.asarray(np.random.default_rng(0).normal(size=12), jnp.float32)
    for name in ("grpo", "drgrpo", "rloo"):
        fn = ac.get_advantage_estimator(name)
        eager, _ = fn(rewards, 3)
        jitted, _ = jax.jit(fn, static_argnums=1)(rewards, 3)
        np.testing.assert_allclose(jitted, eager, atol=1e-6)


def test_bad_group_size_and_shape_are_errors():
    with pytest.raises(ValueError, match="dividing the 6 rewards, got 4"):
        ac.grpo_advantages(jnp.zeros(6), 4)
    with pytest.raises(ValueError, match=r"rewards must be \[N\]"):
        ac.grpo_advantages(jnp.zeros((2, 3)), 3)


def test_registry_misses_name_the_choices():
    with pytest.raises(ValueError) as err:
        ac.get_advantage_estimator("gea")
    assert str(err.value) == "unknown advantage estimator 'gea' (did you mean 'gae'?); choose one of: drgrpo, gae, grpo, reinforce_pp, rloo (aliases: reinforce_plus_plus_baseline)"
    with pytest.raises(ValueError, match=r"unknown policy loss 'reinforce'; choose one of: cispo, grpo, gspo-token, ppo"):
        ac.get_policy_loss("reinforce")


# ---------------------------------------------------------------- DAPO pieces

def test_informative_groups_are_those_with_spread():
    rewards = jnp.array([1.0, 1.0, 1.0,  0.0, 1.0, 0.0,  np.nan, 2.0, 2.0,  np.nan, 2.0, 3.0])
    np.testing.assert_array_equal(ac.informative_groups(rewards, 3), [False, True, False, True])


def test_overlong_penalty_counts_tokens_and_is_capped():
    """max 100, buffer 20 (penalty starts after 80 tokens), penalty 10: 90 tokens -> -5, 100 -> -10, 110 -> -10."""
    got = ac.overlong_penalty(jnp.array([70, 80, 90, 100, 110]), max_length=100, buffer_length=20, penalty=10.0)
    np.testing.assert_allclose(got, [0, 0, -5, -10, -10])
    np.testing.assert_allclose(ac.overlong_penalty(jnp.array([95]), max_length=100, buffer_length=20, penalty=0.0), [0])
    with pytest.raises(ValueError, match="buffer_length"):
        ac.overlong_penalty(jnp.array([1]), max_length=10, buffer_length=20)
    with pytest.raises(ValueError, match="penalty must be >= 0"):
        ac.overlong_penalty(jnp.array([1]), max_length=10, buffer_length=5, penalty=-1.0)


# ---------------------------------------------------------------- GAE

def np_gae(rewards, values, mask, gamma, lam, whiten):
    B, T = rewards.shape
    adv, ret = np.zeros((B, T)), np.zeros((B, T))
    for b in range(B):
        running, next_v = 0.0, 0.0
        for t in range(T - 1, -1, -1):
            if mask[b, t]:
                delta = rewards[b, t] + gamma * next_v - values[b, t]
                running = delta + gamma * lam * running
                next_v = values[b, t]
                adv[b, t], ret[b, t] = running, running + values[b, t]
    if whiten:
        vals = [adv[b, t] for b in range(B) for t in range(T) if mask[b, t]]
        mu = math.fsum(vals) / len(vals)
        var = math.fsum((v - mu) ** 2 for v in vals) / (len(vals) - 1)
        adv = np.array([[(adv[b, t] - mu) / math.sqrt(var + 1e-8) if mask[b, t] else 0.0 for t in range(T)]
                        for b in range(B)])
    return adv, ret


@pytest.mark.parametrize("gamma,lam", [(1.0, 0.95), (0.9, 0.5), (0.99, 1.0)])
@pytest.mark.parametrize("whiten", [True, False])
def test_gae_matches_numpy_loop(gamma, lam, whiten):
    rng = np.random.default_rng(6)
    mask = np.array([[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1], [1, 1, 0, 1, 0, 0, 0], [0] * 7])
    rewards, values = rng.normal(size=(4, 7)), rng.normal(size=(4, 7))
    adv, ret = ac.gae_advantages(jnp.asarray(rewards, jnp.float32), jnp.asarray(values, jnp.float32), jnp.asarray(mask),
                                 gamma=gamma, lam=lam, whiten=whiten)
    want_adv, want_ret = np_gae(rewards, values, mask, gamma, lam, whiten)
    np.testing.assert_allclose(adv, want_adv, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ret, want_ret, rtol=1e-4, atol=1e-5)


def test_gae_with_lambda_one_and_zero_values_is_the_discounted_return():
    """V = 0, λ = 1: A_t = Σ_k γ^k R_{t+k}; one reward of 1 on the last of 4 tokens gives γ^3, γ^2, γ, 1."""
    adv, ret = ac.gae_advantages(jnp.array([[0.0, 0, 0, 1]]), jnp.zeros((1, 4)), jnp.ones((1, 4)), gamma=0.5, lam=1.0,
                                 whiten=False)
    np.testing.assert_allclose(adv, [[0.125, 0.25, 0.5, 1.0]])
    np.testing.assert_allclose(ret, [[0.125, 0.25, 0.5, 1.0]])


def test_masked_whiten_matches_numpy():
    rng = np.random.default_rng(7)
    x, m = rng.normal(3, 2, (3, 5)), (rng.uniform(size=(3, 5)) < 0.7)
    picked = x[m]
    want = np.where(m, (x - picked.mean()) / np.sqrt(picked.var(ddof=1) + 1e-8), 0.0)
    np.testing.assert_allclose(ac.masked_whiten(jnp.asarray(x, jnp.float32), jnp.asarray(m)), want, rtol=1e-4, atol=1e-5)


def test_sequence_rewards_go_on_the_last_trained_token():
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    kl = np.full((3, 4), 0.5)
    got = ac.sequence_rewards_to_tokens(jnp.array([2.0, -1.0, 7.0]), jnp.asarray(mask), jnp.asarray(kl), beta=0.1)
    want = np.zeros((3, 4))
    for b, score in enumerate([2.0, -1.0, 7.0]):
        n = mask[b].sum()
        for t in range(n):
            want[b, t] -= 0.1 * 0.5
        if n:
            want[b, n - 1] += score
    np.testing.assert_allclose(got, want, atol=1e-6)


# ---------------------------------------------------------------- policy losses: a NumPy loop reference

def np_policy_loss(logps, old, adv, mask, *, eps=0.2, eps_high=None, eps_c=None, sequence_ratio=False, ref=None,
                   beta=0.0, kl="k3", entropy=None, ent_coef=0.0, mode="sequence-mean-token-mean", norm=None,
                   weights=None):
    B, T = logps.shape
    hi = eps if eps_high is None else eps_high
    x = np.zeros((B, T))
    for b in range(B):
        n = sum(mask[b])
        seq_lr = sum(logps[b, t] - old[b, t] for t in range(T) if mask[b, t]) / max(n, 1)
        for t in range(T):
            if not mask[b, t]:
                continue
            a = adv[b] if np.ndim(adv) == 1 else adv[b, t]
            lr = seq_lr if sequence_ratio else logps[b, t] - old[b, t]
            rho = math.exp(max(-20.0, min(20.0, lr)))
            term = max(-a * rho, -a * min(max(rho, 1 - eps), 1 + hi))
            if eps_c is not None and a < 0:
                term = min(term, -eps_c * a)
            if weights is not None:
                term *= weights[b, t]
            if beta:
                r = math.exp(ref[b, t] - logps[b, t])  # pi_ref / pi_theta
                term += beta * {"k1": -math.log(r), "k2": 0.5 * math.log(r) ** 2, "k3": r - 1 - math.log(r)}[kl]
            if ent_coef:
                term -= ent_coef * entropy[b, t]
            x[b, t] = term
    # aggregation written out again (independent of the library's)
    sums = [sum(x[b, t] for t in range(T) if mask[b, t]) for b in range(B)]
    counts = [sum(mask[b]) for b in range(B)]
    rows = max(sum(1 for c in counts if c), 1)
    return {"token-mean": lambda: sum(sums) / max(sum(counts), 1),
            "sequence-mean-token-mean": lambda: sum(s / c for s, c in zip(sums, counts) if c) / rows,
            "sequence-mean-token-scale": lambda: sum(s / (norm or T) for s in sums) / rows,
            "sequence-mean-token-sum": lambda: sum(sums) / rows,
            "sequence-mean-token-sum-norm": lambda: sum(sums) / (norm or B)}[mode]()


def _loss_inputs(seed=0, B=4, T=6):
    rng = np.random.default_rng(seed)
    mask = np.ones((B, T), np.int32)
    for b, n in enumerate([3, 6, 1, 5][:B]):
        mask[b, n:] = 0
    logps = -rng.uniform(0.1, 3.0, (B, T))
    old = logps + rng.normal(0, 0.3, (B, T))  # ratios spread over [0.5, 2]: some clip, some do not
    ref = logps + rng.normal(0, 0.3, (B, T))
    return dict(mask=mask, logps=logps, old=old, ref=ref, seq_adv=rng.normal(size=B), tok_adv=rng.normal(size=(B, T)),
                entropy=rng.uniform(0.2, 2.0, (B, T)), weights=rng.uniform(0.5, 1.5, (B, T)))


def _f32(x):
    return jnp.asarray(np.asarray(x, np.float32))


CASES = {
    "grpo default": ("grpo", "seq_adv", {}, {}),
    "grpo k1 beta": ("grpo", "seq_adv", dict(beta=0.04, kl_estimator="k1"), dict(beta=0.04, kl="k1")),
    "grpo k2 beta": ("grpo", "seq_adv", dict(beta=0.1, kl_estimator="k2"), dict(beta=0.1, kl="k2")),
    "grpo k3 beta": ("grpo", "seq_adv", dict(beta=0.1), dict(beta=0.1)),
    "grpo clip-higher token-mean (DAPO)": ("grpo", "seq_adv", dict(epsilon_high=0.28, loss_agg_mode="token-mean"),
                                           dict(eps_high=0.28, mode="token-mean")),
    "grpo token-scale (Dr.GRPO)": ("grpo", "seq_adv", dict(loss_agg_mode="sequence-mean-token-scale"),
                                   dict(mode="sequence-mean-token-scale")),
    "grpo token-scale norm": ("grpo", "seq_adv", dict(loss_agg_mode="sequence-mean-token-scale", norm=10.0),
                              dict(mode="sequence-mean-token-scale", norm=10.0)),
    "grpo token-sum": ("grpo", "seq_adv", dict(loss_agg_mode="sequence-mean-token-sum"), dict(mode="sequence-mean-token-sum")),
    "grpo token-sum-norm": ("grpo", "seq_adv", dict(loss_agg_mode="sequence-mean-token-sum-norm"),
                            dict(mode="sequence-mean-token-sum-norm")),
    "grpo per-token advantages": ("grpo", "tok_adv", {}, {}),
    "grpo token weights": ("grpo", "seq_adv", dict(token_weights="weights"), dict(weights="weights")),
    "gspo-token": ("gspo-token", "seq_adv", {}, dict(sequence_ratio=True)),
    "gspo-token beta clip-higher": ("gspo-token", "seq_adv", dict(beta=0.05, epsilon_high=0.3),
                                    dict(sequence_ratio=True, beta=0.05, eps_high=0.3)),
    "ppo": ("ppo", "tok_adv", {}, dict(mode="token-mean")),
    "ppo dual clip entropy": ("ppo", "tok_adv", dict(epsilon_c=1.5, entropy="entropy", entropy_coef=0.05),
                              dict(eps_c=1.5, entropy="entropy", ent_coef=0.05, mode="token-mean")),
    "ppo asymmetric": ("ppo", "tok_adv", dict(epsilon=0.1, epsilon_high=0.3), dict(eps=0.1, eps_high=0.3, mode="token-mean")),
}


def _call(name, adv_key, kw, d, dtype=np.float32):
    fn = ac.get_policy_loss(name)
    cast = lambda a: jnp.asarray(np.asarray(a, dtype))
    kw = {k: (cast(d[v]) if isinstance(v, str) and v in d else v) for k, v in kw.items()}
    if kw.get("beta"):
        kw["ref_logps"] = cast(d["ref"])
    return fn(cast(d["logps"]), cast(d["old"]), cast(d[adv_key]), jnp.asarray(d["mask"]), **kw)


@pytest.mark.parametrize("case", list(CASES))
def test_policy_losses_match_numpy_loop(case):
    name, adv_key, kw, ref_kw = CASES[case]
    d = _loss_inputs()
    loss, metrics = _call(name, adv_key, kw, d)
    ref_kw = {k: (d[v] if isinstance(v, str) and v in d else v) for k, v in ref_kw.items()}
    want = np_policy_loss(d["logps"].astype(np.float32).astype(np.float64), d["old"].astype(np.float32).astype(np.float64),
                          d[adv_key].astype(np.float32).astype(np.float64), d["mask"],
                          ref=d["ref"].astype(np.float32).astype(np.float64), **ref_kw)
    assert float(loss) == pytest.approx(want, rel=1e-4, abs=1e-6)
    assert all(np.isfinite(float(v)) for v in metrics.values())


def test_some_tokens_are_clipped_in_the_reference_inputs():
    """Guards the loss tests: the inputs exercise both branches of the clip."""
    d = _loss_inputs()
    _, metrics = _call("grpo", "seq_adv", {}, d)
    assert 0.05 < float(metrics["pg_clipfrac"]) < 0.95


def test_grpo_and_gspo_on_policy_hand_worked_value():
    """Two rows: 3 tokens with A = 1.5 and 1 token with A = 3; on-policy ρ = 1, so the loss is mean(−1.5, −3) = −2.25."""
    logps = jnp.array([[-1.0, -2.0, -0.5], [-0.3, 0.0, 0.0]])
    mask = jnp.array([[1, 1, 1], [1, 0, 0]])
    for name in ("grpo", "gspo-token"):
        loss, _ = ac.get_policy_loss(name)(logps, None, jnp.array([1.5, 3.0]), mask)
        assert float(loss) == pytest.approx(-2.25)


def test_kl_metric_is_reported_without_being_added_when_beta_is_zero():
    d = _loss_inputs()
    loss0, m0 = ac.grpo_loss(_f32(d["logps"]), _f32(d["old"]), _f32(d["seq_adv"]), jnp.asarray(d["mask"]))
    loss1, m1 = ac.grpo_loss(_f32(d["logps"]), _f32(d["old"]), _f32(d["seq_adv"]), jnp.asarray(d["mask"]),
                             ref_logps=_f32(d["ref"]))
    assert float(loss0) == float(loss1) and "kl" in m1 and "kl" not in m0 and float(m1["kl"]) > 0


def test_policy_loss_argument_errors():
    d = _loss_inputs()
    lp, adv, mask = _f32(d["logps"]), _f32(d["seq_adv"]), jnp.asarray(d["mask"])
    with pytest.raises(ValueError, match="ref_logps is None"):
        ac.grpo_loss(lp, None, adv, mask, beta=0.04)
    with pytest.raises(ValueError, match=r"advantages has shape \(3,\)"):
        ac.grpo_loss(lp, None, adv[:3], mask)
    with pytest.raises(ValueError, match=r"old_logps has shape \(4, 5\)"):
        ac.grpo_loss(lp, lp[:, :5], adv, mask)
    with pytest.raises(ValueError, match="epsilon_c .* must be > 1"):
        ac.ppo_policy_loss(lp, None, adv, mask, epsilon_c=0.9)
    with pytest.raises(ValueError, match="epsilon must be in"):
        ac.grpo_loss(lp, None, adv, mask, epsilon=1.5)
    with pytest.raises(ValueError, match="unknown KL estimator"):
        ac.grpo_loss(lp, None, adv, mask, ref_logps=lp, beta=0.1, kl_estimator="k9")


# ---------------------------------------------------------------- gradients

def _central_differences(f, x, h=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += h
        down[i] -= h
        g[i] = (f(up) - f(down)) / (2 * h)
    return g


@pytest.mark.parametrize("case", ["grpo k3 beta", "grpo clip-higher token-mean (DAPO)", "ppo dual clip entropy",
                                  "grpo token-scale (Dr.GRPO)"])
def test_policy_loss_gradient_matches_finite_differences(case):
    """float64 throughout; inputs avoid the clip kinks (|ρ − clip edge| > 1e-3), so central differences are exact to O(h²)."""
    name, adv_key, kw, _ = CASES[case]
    d = _loss_inputs(seed=1)
    with jax.enable_x64(True):
        fn = ac.get_policy_loss(name)
        mask = jnp.asarray(d["mask"])
        kw = {k: (jnp.asarray(d[v]) if isinstance(v, str) and v in d else v) for k, v in kw.items()}
        if kw.get("beta"):
            kw["ref_logps"] = jnp.asarray(d["ref"])
        old, adv = jnp.asarray(d["old"]), jnp.asarray(d[adv_key])
        loss = jax.jit(lambda lp: fn(lp, old, adv, mask, **kw)[0])
        assert loss(jnp.asarray(d["logps"])).dtype == jnp.float64
        grad = np.asarray(jax.grad(loss)(jnp.asarray(d["logps"])))
        numeric = _central_differences(lambda x: float(loss(jnp.asarray(x))), d["logps"])
    ratio = np.exp(d["logps"] - d["old"])
    assert np.min(np.abs(ratio[d["mask"] == 1][:, None] - np.array([0.8, 0.9, 1.2, 1.28, 1.3]))) > 1e-3
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-8)
    assert np.abs(grad).max() > 0 and (grad[d["mask"] == 0] == 0).all()


def test_on_policy_grpo_gradient_is_reinforce_with_baseline():
    """old = sg(logps): ρ = 1, nothing clips, so ∂L/∂ℓ_bt = −A_b / (B_nonempty · n_b) under sequence-mean-token-mean."""
    d = _loss_inputs()
    mask, adv = d["mask"], d["seq_adv"]
    grad = jax.grad(lambda lp: ac.grpo_loss(lp, None, _f32(adv), jnp.asarray(mask))[0])(_f32(d["logps"]))
    want = np.zeros(mask.shape)
    for b in range(mask.shape[0]):
        for t in range(mask.shape[1]):
            if mask[b, t]:
                want[b, t] = -adv[b] / (mask.shape[0] * mask[b].sum())
    np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-7)


def test_value_loss_matches_loop_and_finite_differences():
    rng = np.random.default_rng(8)
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    old_v = rng.normal(size=(3, 4))
    values = old_v + rng.choice([-1, 1], (3, 4)) * rng.uniform(0.05, 0.5, (3, 4))  # some beyond ±0.2, none at the edge
    returns = rng.normal(size=(3, 4))
    want, count = 0.0, 0
    for b in range(3):
        for t in range(4):
            if mask[b, t]:
                v_clip = min(max(values[b, t], old_v[b, t] - 0.2), old_v[b, t] + 0.2)
                want += 0.5 * max((values[b, t] - returns[b, t]) ** 2, (v_clip - returns[b, t]) ** 2)
                count += 1
    loss, metrics = ac.ppo_value_loss(_f32(values), _f32(old_v), _f32(returns), jnp.asarray(mask), clip_range=0.2)
    assert float(loss) == pytest.approx(want / count, rel=1e-5)
    assert 0 < float(metrics["vf_clipfrac"]) < 1
    with jax.enable_x64(True):
        f = jax.jit(lambda v: ac.ppo_value_loss(v, jnp.asarray(old_v), jnp.asarray(returns), jnp.asarray(mask))[0])
        grad = np.asarray(jax.grad(f)(jnp.asarray(values)))
        numeric = _central_differences(lambda v: float(f(jnp.asarray(v))), values)
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-8)


def test_losses_jit_with_options_closed_over():
    d = _loss_inputs()
    args = (_f32(d["logps"]), _f32(d["old"]), _f32(d["seq_adv"]), jnp.asarray(d["mask"]), _f32(d["ref"]))
    f = lambda lp, old, a, m, ref: ac.gspo_token_loss(lp, old, a, m, ref_logps=ref, beta=0.04, epsilon_high=0.28)
    (eager, _), (jitted, _) = f(*args), jax.jit(f)(*args)
    assert float(jitted) == pytest.approx(float(eager), rel=1e-6)


def test_dual_clip_bounds_negative_advantage_tokens_hand_worked():
    """A = −1: ρ = 3 gives max(3, 1.2) = 3, dual-clipped to 1.5·1 = 1.5; ρ = 1.3 gives 1.3 (below the bound);
    A = +1, ρ = 3 is untouched by the dual clip: max(−3, −1.2) = −1.2."""
    log_ratio = jnp.log(jnp.array([[3.0, 1.3, 3.0]]))
    adv = jnp.array([[-1.0, -1.0, 1.0]])
    loss, clipped = ac.clipped_surrogate(log_ratio, adv, epsilon=0.2, epsilon_c=1.5)
    rtol = 2e-4 if jax.default_backend() == "tpu" else 1e-6  # the ratio is an exp: a TPU's float32 exp is ~1e-4 off
    np.testing.assert_allclose(loss, [[1.5, 1.3, -1.2]], rtol=rtol)
    np.testing.assert_array_equal(clipped, [[True, False, True]])
    total, _ = ac.ppo_policy_loss(jnp.log(jnp.array([[3.0, 1.3, 3.0]])), jnp.zeros((1, 3)), adv, jnp.ones((1, 3)),
                                  epsilon_c=1.5)
    assert float(total) == pytest.approx((1.5 + 1.3 - 1.2) / 3, rel=rtol)


def test_gspo_token_gradient_is_per_token_with_the_sequence_ratio():
    """GSPO-token: the value uses s_b = mean_t(ℓ − ℓ_old), the gradient flows per token. With per-token advantages,
    ∂L/∂ℓ_bt = −A_bt·exp(s_b)/(B·n_b) where exp(s_b) is inside the clip range for A_bt's sign, else 0. (A plain
    sequence-level ratio would mix the row's advantages: −exp(s_b)·mean_t'(A_bt')/(B·n_b) on every token.)"""
    d = _loss_inputs(seed=2)
    mask, adv, eps = d["mask"], d["tok_adv"], 0.1
    lp, old = d["logps"].astype(np.float32), d["old"].astype(np.float32)
    grad = jax.grad(lambda x: ac.gspo_token_loss(x, jnp.asarray(old), _f32(adv), jnp.asarray(mask), epsilon=eps)[0])(
        jnp.asarray(lp))
    want, clipped = np.zeros(mask.shape), 0
    for b in range(mask.shape[0]):
        n = mask[b].sum()
        rho = math.exp(sum(float(lp[b, t]) - float(old[b, t]) for t in range(mask.shape[1]) if mask[b, t]) / n)
        for t in range(mask.shape[1]):
            if not mask[b, t]:
                continue
            if (adv[b, t] > 0 and rho > 1 + eps) or (adv[b, t] < 0 and rho < 1 - eps):
                clipped += 1
            else:
                want[b, t] = -adv[b, t] * rho / (mask.shape[0] * n)
    assert 0 < clipped < mask.sum()  # both branches are exercised
    np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-7)


def test_sequence_rewards_land_on_the_last_trained_token_of_a_holed_mask():
    # holes inside a row (a skipped slot), and a row whose only trained token is not at mask.sum() - 1
    mask = np.array([[1, 1, 0, 1, 0, 0], [0, 1, 0, 0, 1, 0], [0, 0, 0, 1, 0, 0], [0, 0, 0, 0, 0, 0]])
    scores = [2.0, -1.0, 7.0, 5.0]
    got = np.asarray(ac.sequence_rewards_to_tokens(jnp.array(scores), jnp.asarray(mask)))
    want = np.zeros(mask.shape)
    for b, score in enumerate(scores):
        trained = [t for t in range(mask.shape[1]) if mask[b, t]]
        if trained:  # an empty row gets nothing
            want[b, trained[-1]] = score
    np.testing.assert_allclose(got, want)
    assert (got[mask == 0] == 0).all()  # nothing lands on an untrained slot
