"""The winsorised private mean (Levy et al. 2021, Huang et al.'s ALG): the rotation is orthonormal, concentrated
inputs are never winsorised and come back as the mean plus noise of the stated std, one replaced user moves
the pre-noise sum by at most the stated sensitivity, padding rows are ignored, and the calibration meets its
budget."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfl.accounting import make_accountant
from jaxfl.privacy.mean_estimation import (calibrate_winsorized_mean, hadamard, inverse_hadamard, rotated_radius,
                                           winsorized_mean, winsorized_mean_event)


def test_hadamard_is_orthonormal_and_inverted():
    signs = jnp.where(jax.random.bernoulli(jax.random.key(0), 0.5, (16,)), 1.0, -1.0)
    v = jax.random.normal(jax.random.key(1), (3, 16))
    y = hadamard(v, signs)
    np.testing.assert_allclose(jnp.linalg.norm(y, axis=1), jnp.linalg.norm(v, axis=1), rtol=1e-5)
    np.testing.assert_allclose(inverse_hadamard(y, signs), v, rtol=1e-5, atol=1e-6)
    h = np.array([[1.0]])
    for _ in range(4):
        h = np.block([[h, h], [h, -h]])
    np.testing.assert_allclose(y, (v * signs) @ h.T / 4.0, rtol=1e-5, atol=1e-6)


def _concentrated(r=400, d=10, tau=0.05, seed=0):
    rng = np.random.default_rng(seed)
    centre = rng.normal(size=d)
    centre *= 0.7 / np.linalg.norm(centre)
    noise = rng.normal(size=(r, d))
    noise *= (tau * rng.uniform(size=(r, 1))) / np.linalg.norm(noise, axis=1, keepdims=True)
    return jnp.asarray(centre + noise, jnp.float32)


@pytest.mark.slow  # 20 draws: second tier
def test_concentrated_vectors_are_not_winsorised_and_the_error_is_the_stated_noise():
    """With tau holding, no value is clipped and estimate - mean is the inverse rotation of N(0, sigma_m^2) / r:
    its norm is about sigma_m sqrt(d) / r (the noise's share in the first d of p rotated coordinates)."""
    r, d, tau, z = 400, 10, 0.05, 2.0
    x = _concentrated(r, d, tau)
    errors = []
    for seed in range(20):
        out = winsorized_mean(jax.random.key(seed), x, tau=tau, bound=1.0, noise_multiplier=z,
                              rotation_key=jax.random.key(99))
        assert int(out.clipped) == 0
        errors.append(np.asarray(out.mean) - np.asarray(jnp.mean(x, axis=0)))
    p = 16
    sigma_m = z * 3 * rotated_radius(tau, d, r, 1e-3) * math.sqrt(p)
    per_coordinate = np.std(np.concatenate(errors))
    assert per_coordinate == pytest.approx(sigma_m / r, rel=0.25)


@pytest.mark.slow
def test_one_replaced_user_moves_the_winsorised_sum_by_at_most_the_sensitivity():
    """Noise off (z tiny), the same located centres: replacing a user by a far outlier moves r * mean by at
    most 6 tau' sqrt(p), the sensitivity the mean's noise is calibrated to."""
    r, d, tau = 200, 10, 0.05
    x = _concentrated(r, d, tau)
    y = x.at[0].set(jnp.full(d, -0.3))
    kw = dict(tau=tau, bound=1.0, noise_multiplier=1e-9, rotation_key=jax.random.key(5))
    a, b = winsorized_mean(jax.random.key(1), x, **kw), winsorized_mean(jax.random.key(1), y, **kw)
    np.testing.assert_array_equal(a.centre, b.centre)
    assert int(b.clipped) > 0
    moved = r * float(jnp.linalg.norm(a.mean - b.mean))
    assert moved <= 6 * rotated_radius(tau, d, r, 1e-3) * math.sqrt(16) * (1 + 1e-4)


@pytest.mark.slow
def test_padding_rows_are_ignored():
    """Masked rows change nothing, whatever they hold (tau' is set for the number of rows, so a padded and an
    unpadded call differ only through that union bound)."""
    x = _concentrated(50, 6, 0.05)
    kw = dict(tau=0.05, bound=1.0, noise_multiplier=1e-6, rotation_key=jax.random.key(2), mask=jnp.arange(57) < 50)
    a = winsorized_mean(jax.random.key(3), jnp.concatenate([x, 100 * jnp.ones((7, 6))]), **kw)
    b = winsorized_mean(jax.random.key(3), jnp.concatenate([x, -jnp.ones((7, 6))]), **kw)
    np.testing.assert_array_equal(a.mean, b.mean)
    assert int(a.clipped) == 0
    np.testing.assert_allclose(a.mean, jnp.mean(x, axis=0), atol=1e-4)


def test_calibration_meets_the_budget():
    z = calibrate_winsorized_mean(1.0, 1e-5)
    acc = lambda zz: make_accountant("rdp", neighboring_relation="replace_one").compose(  # noqa: E731
        winsorized_mean_event(zz, zz)).epsilon(1e-5)
    assert acc(z) <= 1.0 + 1e-6 < acc(0.97 * z)
