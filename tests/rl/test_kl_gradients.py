"""The KL estimators of chapter 20 used as losses: their expected gradients on samples from π, against NumPy's
closed forms (k1 → 0, k2 → ∇KL(π‖ref), k3 → ∇KL(ref‖π)) for a categorical distribution over logits z."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tunix_lit.rl.common import compute_kl


def np_softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def np_expected_grad(z, z_ref, name):
    """∇_z Σ_y sg(π_y) k(ℓ_y): Σ_y π_y k'(ℓ_y) (e_y − π), with k' = dk/dℓ."""
    p, q = np_softmax(z), np_softmax(z_ref)
    lp, lq = np.log(p), np.log(q)
    c = {"k1": np.ones_like(lp), "k2": lp - lq, "k3": 1.0 - np.exp(lq - lp)}[name]
    return p * c - p * np.dot(p, c)


def expected_grad(z, z_ref, name):
    lp_ref = jax.nn.log_softmax(z_ref)

    def loss(z):
        lp = jax.nn.log_softmax(z)
        return jnp.sum(jax.lax.stop_gradient(jnp.exp(lp)) * compute_kl(lp, lp_ref, name))

    return np.asarray(jax.grad(loss)(jnp.asarray(z)), np.float64)


@pytest.mark.parametrize("seed", [0, 1])
def test_estimator_gradients_as_losses(seed):
    rng = np.random.default_rng(seed)
    z = rng.normal(size=20)
    z_ref = z + 1.5 * rng.normal(size=20)
    p, q = np_softmax(z), np_softmax(z_ref)
    d = np.log(p) - np.log(q)
    grad_forward = p * (d - np.dot(p, d))  # ∇_z KL(π_z ‖ π_ref)
    grad_reverse = p - q  # ∇_z KL(π_ref ‖ π_z)
    assert np.linalg.norm(grad_forward - grad_reverse) > 0.1  # the two targets are distinguishable
    for name, want in [("k1", np.zeros_like(z)), ("k2", grad_forward), ("k3", grad_reverse)]:
        got = expected_grad(z.astype(np.float32), z_ref.astype(np.float32), name)
        np.testing.assert_allclose(got, np_expected_grad(z, z_ref, name), atol=2e-6)
        np.testing.assert_allclose(got, want, atol=2e-6)
