"""SimPO and KTO (chapter 63) against NumPy references written from the papers' formulas, and KTO's batch path."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tunix_lit.sft import dpo


def _log_sigmoid(x):
    return -np.logaddexp(0.0, -x)


def simpo_reference(w, l, beta, gamma, eps=0.0):
    z = beta * (np.asarray(w, np.float64) - np.asarray(l, np.float64)) - gamma
    return -(1 - eps) * _log_sigmoid(z) - eps * _log_sigmoid(-z)


def kto_reference(pol, ref, desirable, kl, beta, ld, lu):
    z, out = max(float(kl), 0.0), []
    for p, q, d in zip(pol, ref, desirable):
        r = p - q
        sig = lambda x: 1.0 / (1.0 + np.exp(-x))
        out.append(ld * (1 - sig(beta * (r - z))) if d else lu * (1 - sig(beta * (z - r))))
    return np.array(out)


@pytest.mark.parametrize("beta,gamma,eps", [(2.0, 0.5, 0.0), (0.7, 0.0, 0.0), (2.5, 1.4, 0.1)])
def test_simpo_loss_matches_numpy(beta, gamma, eps):
    rng = np.random.default_rng(0)
    w, l = -rng.random(16) * 3, -rng.random(16) * 3
    got = dpo.simpo_loss(jnp.asarray(w), jnp.asarray(l), beta, gamma, label_smoothing=eps)
    assert got.dtype == jnp.float32 and got.shape == (16,)
    np.testing.assert_allclose(np.asarray(got), simpo_reference(w, l, beta, gamma, eps), rtol=1e-5, atol=1e-6)


def test_simpo_rule_uses_mean_logps_and_no_reference():
    cfg = dpo.DPOConfig(loss_type="simpo", beta=2.0, gamma=0.3)
    assert not cfg.uses_reference
    lp = {"chosen": jnp.asarray([-2.0, -6.0]), "rejected": jnp.asarray([-3.0, -2.0]),
          "chosen_len": jnp.asarray([2.0, 3.0]), "rejected_len": jnp.asarray([3.0, 1.0])}
    loss, *_ = dpo.get_preference_loss("simpo")(lp, cfg)
    np.testing.assert_allclose(np.asarray(loss), simpo_reference([-1.0, -2.0], [-1.0, -2.0], 2.0, 0.3), rtol=1e-6)


@pytest.mark.parametrize("kl", [0.4, -0.3, 0.0])
def test_kto_loss_matches_numpy(kl):
    rng = np.random.default_rng(1)
    pol, ref = -rng.random(12) * 5, -rng.random(12) * 5
    lab = rng.integers(0, 2, 12)
    got = dpo.kto_loss(jnp.asarray(pol), jnp.asarray(ref), jnp.asarray(lab), kl, 0.3, 1.0, 1.5)
    assert got.dtype == jnp.float32 and got.shape == (12,)
    np.testing.assert_allclose(np.asarray(got), kto_reference(pol, ref, lab, kl, 0.3, 1.0, 1.5), rtol=1e-5, atol=1e-6)


def test_kto_reference_point_carries_no_gradient_and_policy_does():
    pol, ref, lab = jnp.asarray([-1.0, -2.0]), jnp.asarray([-1.5, -1.0]), jnp.asarray([1, 0])
    g_kl = jax.grad(lambda kl: dpo.kto_loss(pol, ref, lab, kl, 0.5).sum())(0.2)
    g_pol = jax.grad(lambda p: dpo.kto_loss(p, ref, lab, 0.2, 0.5).sum())(pol)
    assert float(g_kl) == 0.0
    assert float(g_pol[0]) < 0 < float(g_pol[1])  # push the desirable row up, the undesirable one down


class _Tok:
    pad_id, eos_id = 0, 1

    def encode(self, text, add_special_tokens=True):
        return ([2] if add_special_tokens else []) + [3 + ord(c) % 10 for c in text]


def test_unpaired_rows_encode_and_the_kl_rows_are_the_next_rows_completion():
    b = dpo.encode_unpaired(_Tok(), ["1+2=", "30+4="], ["3", "35"], [True, 0])
    assert b["prompt_tokens"].shape == (2, 6) and b["completion_tokens"].shape == (2, 3)
    assert b["desirable"].tolist() == [1, 0] and b["prompt_mask"][0].tolist() == [0, 1, 1, 1, 1, 1]
    tokens, key_mask, loss_mask = dpo.kto_sequences(b)
    assert tokens.shape == (4, 9)
    np.testing.assert_array_equal(np.asarray(tokens[2, 6:]), b["completion_tokens"][1])  # row 0's prompt, row 1's answer
    np.testing.assert_array_equal(np.asarray(tokens[2, :6]), b["prompt_tokens"][0])
    np.testing.assert_array_equal(np.asarray(loss_mask[3, 6:]), b["completion_mask"][0])


def test_kto_batch_errors_name_the_problem():
    b = dpo.encode_unpaired(_Tok(), ["1+2=", "3+4="], ["3", "7"], [1, 0])
    with pytest.raises(ValueError, match="at least 2 rows"):
        dpo.validate_kto_batch({k: v[:1] for k, v in b.items()})
    with pytest.raises(ValueError, match="0 \\(undesirable\\) or 1"):
        dpo.validate_kto_batch(dict(b, desirable=np.array([1, 2])))
    with pytest.raises(ValueError, match="ref_logps"):
        dpo.validate_kto_batch(dict(b, ref_logps=np.zeros(2, np.float32)))
