"""Secure noise (jaxfl.privacy.secure): the discrete Gaussian's law, the lattice release, its accounting, an audit,
and Mironov's floating-point attack -- which succeeds on the default float32 noise and finds nothing on the lattice."""
import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfl.accounting import RdpAccountant
from jaxfl.audit import lower_bound
from jaxfl.privacy import transforms
from jaxfl.privacy.noise import noisy_clipped_mean
from jaxfl.privacy.normal import normal_from_bits
from jaxfl.privacy.secure import LatticeGaussian, discrete_gaussian, discrete_gaussian_table, os_random_key


def _exact_pmf(values, s):
    support = np.arange(-int(40 * s) - 1, int(40 * s) + 2)
    weights = np.exp(-support.astype(float) ** 2 / (2 * s * s))
    return np.exp(-values.astype(float) ** 2 / (2 * s * s)) / weights.sum()


@pytest.mark.parametrize("s", [2.0, 3.5])
def test_discrete_gaussian_law(s):
    """Frequencies of 400,000 draws against the exact pmf exp(-k^2/2s^2)/Z (a closed form), within 5 standard
    errors at every k, and nothing outside the table."""
    draws = np.asarray(discrete_gaussian(jax.random.key(1), s, (400_000,)))
    values, counts = np.unique(draws, return_counts=True)
    p = _exact_pmf(values, s)
    se = np.sqrt(p * (1 - p) / draws.size)
    assert np.all(np.abs(counts / draws.size - p) <= 5 * se + 1e-6)
    _, offset, _ = discrete_gaussian_table(s)
    assert np.abs(draws).max() <= offset


def test_large_scale_moments_and_table():
    s = 12_800.0   # a 16,384-parameter model at z = 1, resolution 100
    draws = np.asarray(discrete_gaussian(jax.random.key(0), s, (200_000,)))
    assert abs(draws.mean()) < 5 * s / math.sqrt(draws.size)
    assert draws.std() == pytest.approx(s, rel=0.01)
    words, offset, tv = discrete_gaussian_table(s)
    cdf = [sum(int(w) << (32 * (2 - j)) for j, w in enumerate(row)) for row in words[::997]]
    assert all(a < b for a, b in zip(cdf, cdf[1:])) and cdf[-1] < 2 ** 96
    assert tv < 1e-17
    with pytest.raises(ValueError, match="scale"):
        discrete_gaussian_table(1.0)


def test_lattice_release_and_accounting():
    lattice = LatticeGaussian(clip_norm=2.0, noise_multiplier=1.5, dim=12)
    assert lattice.step == pytest.approx(2.0 / (100 * math.sqrt(12)))
    # rho = Delta^2 / (2 s^2) with Delta = f C (1 + 1e-5) / gamma + 2 sqrt(d) (closed form, in lattice steps)
    for relation, f in (("add_or_remove_one", 1), ("replace_one", 2)):
        delta_steps = f * 2.0 * (1 + 1e-5) / lattice.step + 2 * math.sqrt(12)
        assert lattice.event(relation).rho == pytest.approx(delta_steps ** 2 / (2 * (1.5 * 2.0 / lattice.step) ** 2))
        assert lattice.equivalent_noise_multiplier(relation) == pytest.approx(1.5 * f / (f * 1.00001 + 0.02), rel=1e-9)
    # the RDP accountant composes the zCDP event: rho-zCDP is the Gaussian's curve at multiplier 1/sqrt(2 rho)
    rho = lattice.event().rho
    ours = RdpAccountant().compose(lattice.event(), 50).epsilon(1e-5)
    plain = RdpAccountant().compose(dp_accounting.GaussianDpEvent(1 / math.sqrt(2 * rho)), 50).epsilon(1e-5)
    assert ours == pytest.approx(plain, rel=1e-3)
    tree = {"w": jnp.arange(10.0) / 10, "b": jnp.ones(2)}
    out = jax.jit(lattice.release)(jax.random.key(0), tree)
    steps = np.asarray(out["w"]) / lattice.step
    assert np.allclose(steps, np.round(steps), atol=1e-2)   # on the lattice
    with pytest.raises(ValueError, match="dim=12"):
        lattice.release(jax.random.key(0), {"w": jnp.zeros(5)})
    with pytest.raises(ValueError, match="clip_norm"):
        LatticeGaussian(clip_norm=math.inf, noise_multiplier=1.0, dim=3)
    assert lattice.delta_overhead(1000, 1.0) < 1e-12


def test_os_random_keys_differ():
    a, b = os_random_key(), os_random_key()
    assert str(jax.random.key_impl(a)) == "threefry2x32"
    assert not np.array_equal(jax.random.key_data(a), jax.random.key_data(b))


def _every_float_noise():
    """Every value jaxfl's float32 N(0, 1) sampler can return: one per 23-bit mantissa word."""
    return normal_from_bits(jnp.arange(2 ** 23, dtype=jnp.uint32) << 9)


def test_floating_point_attack():
    """Mironov's attack on one coordinate: the canary's sum is 1, the neighbour's 0 (C = 1, z = 1.5). Default noise:
    most outputs from the canary's sum are values no noise draw can produce from the neighbour's -- proof of
    membership. Lattice noise: every output is a lattice point within the neighbour's support."""
    runs = 4000
    every = _every_float_noise()
    units = every[jax.random.randint(jax.random.key(6), (runs,), 0, every.shape[0])]
    release = jax.jit(lambda s, u: noisy_clipped_mean(s, u, clip_norm=1.0, noise_multiplier=1.5, denominator=1.0))
    with_canary = np.asarray(release(jnp.ones(runs), units))
    reachable_without = np.asarray(release(jnp.zeros(every.shape[0]), every))
    impossible = ~np.isin(with_canary, reachable_without)
    assert impossible.mean() > 0.5            # measured 0.86: the default float noise leaks membership

    lattice = LatticeGaussian(clip_norm=1.0, noise_multiplier=1.5, dim=1)
    outs = jax.jit(jax.vmap(lambda k: lattice.release(k, jnp.ones(1))))(jax.random.split(jax.random.key(7), runs))
    steps = np.round(np.asarray(outs)[:, 0] / lattice.step).astype(np.int64)
    _, offset, _ = discrete_gaussian_table(lattice.scale)
    assert np.all(np.abs(steps - 0) <= offset)   # each reachable from the neighbour's sum (0 steps) too


@pytest.mark.parametrize("noise, caught", [(1.5, False), (0.05, True)])
def test_audit_of_the_lattice_release(noise, caught):
    """Canary game on the release itself (d = 64, C = 1, sums of 4 background records +- the canary): the lower
    bound stays below the zCDP claim; released with 30x less noise than claimed, it exceeds it."""
    d, runs = 64, 20_000
    rng = np.random.default_rng(0)
    background = rng.standard_normal((4, d))
    background /= np.linalg.norm(background, axis=1, keepdims=True)
    canary = np.zeros(d)
    canary[0] = 1.0
    claimed = LatticeGaussian(1.0, 1.5, d)
    used = LatticeGaussian(1.0, noise, d)
    release = jax.jit(jax.vmap(used.release, in_axes=(0, None)))
    keys = jax.random.split(jax.random.key(3), 2 * runs)
    inside = np.asarray(release(keys[:runs], jnp.asarray(background.sum(0) + canary, jnp.float32)))
    outside = np.asarray(release(keys[runs:], jnp.asarray(background.sum(0), jnp.float32)))
    bound = max(lower_bound({"canary": inside[:, 0]}, {"canary": outside[:, 0]}, delta=1e-5).values())
    claim = RdpAccountant().compose(claimed.event()).epsilon(1e-5)
    assert (bound > claim) is caught, (bound, claim)


def test_optax_transform_secure():
    """``differentially_private_aggregate(secure=True)``: the per-example gradients' clipped sum released on the
    lattice, divided by the batch; a traced clip bound is refused."""
    grads = {"w": jnp.ones((8, 5)) * 0.1, "b": jnp.zeros((8, 1))}
    tx = transforms.differentially_private_aggregate(1.0, 2.0, os_random_key(), secure=True)
    out, state = tx.update(grads, tx.init(None))
    lattice = LatticeGaussian(1.0, 2.0, 6)
    steps = np.asarray(out["w"]) * 8 / lattice.step
    assert np.allclose(steps, np.round(steps), atol=1e-2) and int(state.count) == 1
    with pytest.raises(ValueError, match="Python numbers"):
        transforms.differentially_private_aggregate(jnp.asarray(1.0), 2.0, os_random_key(), secure=True)
