"""On-policy distillation (chapter 64): the generalized JSD against NumPy (TRL's convention: beta 0 = KL(teacher ||
student), 1 = KL(student || teacher)), and the trainer's on-policy rewrite of a batch."""
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tunix_lit.sft import distill
from tunix_lit.sft import trainer as peft


def softmax(z):
    z = z - z.max(-1, keepdims=True)
    return np.exp(z) / np.exp(z).sum(-1, keepdims=True)


def jsd_reference(s, t, beta, temperature):
    ps, pt = softmax(np.asarray(s, np.float64) / temperature), softmax(np.asarray(t, np.float64) / temperature)
    kl = lambda p, q: np.sum(p * (np.log(p) - np.log(q)), -1)
    if beta == 0:
        return kl(pt, ps)
    if beta == 1:
        return kl(ps, pt)
    mix = beta * pt + (1 - beta) * ps
    return beta * kl(pt, mix) + (1 - beta) * kl(ps, mix)


@pytest.mark.parametrize("beta", [0.0, 0.25, 0.5, 0.9, 1.0])
@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_generalized_jsd_matches_numpy(beta, temperature):
    rng = np.random.default_rng(2)
    s, t = rng.normal(size=(2, 4, 13)) * 3, rng.normal(size=(2, 4, 13)) * 3
    got = distill.generalized_jsd(jnp.asarray(s), jnp.asarray(t), beta, temperature)
    assert got.dtype == jnp.float32 and got.shape == (2, 4)
    np.testing.assert_allclose(np.asarray(got), jsd_reference(s, t, beta, temperature), rtol=1e-4, atol=1e-6)


def test_generalized_jsd_is_zero_on_equal_logits_and_rejects_a_bad_beta():
    z = jnp.asarray(np.random.default_rng(3).normal(size=(3, 7)))
    np.testing.assert_allclose(np.asarray(distill.generalized_jsd(z, z, 0.5)), 0.0, atol=1e-6)
    with pytest.raises(ValueError, match="beta must be in"):
        distill.generalized_jsd(z, z, 1.5)


@pytest.mark.slow  # compiles the tiny model (and a train step): 15-30 s on 2 CPU cores
def test_on_policy_batch_keeps_prompts_and_shape_and_the_step_trains():
    from tunix_lit.models import tiny
    from tunix_lit.recipe_build import encode_sft

    teacher, tok = tiny.load()
    student, _ = tiny.load()
    b = encode_sft(tok, ["12+34=", "5+60=", "1+1=", "70+8="], ["46", "65", "2", "78"], 12)
    g = distill.GKDTrainer(student, teacher, optax.adam(1e-4), peft.TrainingConfig(max_steps=2, progress_bar=False),
                           tokenizer=tok, beta=0.5, lmbda=1.0)
    new = g._on_policy(b)
    assert new["tokens"].shape == b["tokens"].shape and new["loss_mask"].shape == b["loss_mask"].shape
    for row in range(4):
        start = int(np.argmax(b["loss_mask"][row]))
        np.testing.assert_array_equal(new["tokens"][row, :start], b["tokens"][row, :start])
        assert new["loss_mask"][row, :start].sum() == 0 and new["loss_mask"][row, start] == 1
    g.train(iter([b, b]))
    assert g.on_policy_batches == 3 and g.step == 2  # the probe above, then both training batches (λ = 1)
    with pytest.raises(ValueError, match="tokens and loss_mask only"):
        g._validate(dict(b, positions=b["tokens"]), "batch 0")
