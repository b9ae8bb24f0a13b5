"""Private mean estimation for concentrated vectors: the winsorised mean of Levy et al. (2021), "Learning
with User-Level Privacy" (NeurIPS), which Huang et al.'s A_NSSGD (Appendix B, Thm B.3) uses without stating.

Input: ``r`` vectors ``X_1 .. X_r`` in ``R^d`` (one per user, e.g. per-user mean gradients), each of norm at
most ``bound``, and a concentration radius ``tau``: the vectors are ``(tau, gamma)``-concentrated when some
point lies within ``tau`` of all of them with probability ``1 - gamma`` (Def. B.2). The estimator
(:func:`winsorized_mean`, Levy et al.'s high-dimensional winsorised mean, in this form):

1. **Rotate** by a random Hadamard transform ``y_k = H S X_k`` (``S`` random signs from a public key,
   ``d`` padded to a power of two ``p``), so that every coordinate of concentrated vectors is concentrated
   with radius ``tau' = tau sqrt(2 log(2 p r / gamma) / p)`` (a coordinate of ``H S v`` is sub-Gaussian with
   variance proxy ``|v|^2 / p``).
2. **Locate** each coordinate privately: a histogram of the ``r`` values over bins of width ``2 tau'``
   covering ``[-bound, bound]``, plus ``N(0, sigma_h^2)`` per bin; the centre ``c_i`` is the midpoint of the
   fullest noisy bin. Replacing one user moves one count down and one up per coordinate: L2 sensitivity
   ``sqrt(2 p)`` over the whole histogram.
3. **Winsorise and average**: clip every coordinate into ``[c_i - 3 tau', c_i + 3 tau']`` (the located bin
   and a bin on either side hold the concentrated values), take the mean and add ``N(0, sigma_m^2 I)``.
   Replacing one user moves the sum by at most ``6 tau' sqrt(p)`` (each coordinate within a window of
   width ``6 tau'``).
4. **Rotate back** (post-processing).

Privacy: two Gaussian mechanisms on replace-one neighbouring user sets (:func:`winsorized_mean_event`);
:func:`calibrate_winsorized_mean` finds the one noise multiplier both use for a budget. Utility (Levy et al.
Thm 3 / Huang et al. Thm B.3): with probability ``1 - gamma - beta`` no concentrated value is clipped, the
estimate is then the mean plus Gaussian noise of variance ``sigma_m^2 / r^2`` per coordinate, i.e. ``O(d
tau^2 log(d r / gamma) log(1/delta) / (r^2 eps^2))`` in total, where ``beta`` is the chance that noise moves
a centre to a bin without the mass (small when ``r >> sigma_h``).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import dp_accounting
import jax
import jax.numpy as jnp

from jaxfl import checks
from jaxfl.accounting.calibrate import calibrate

REPLACE_ONE = dp_accounting.NeighboringRelation.REPLACE_ONE


class MeanEstimate(NamedTuple):
    """``mean: [d]`` the private estimate; ``centre: [d]`` the located centres (rotated coordinates);
    ``clipped``: how many (user, coordinate) values winsorisation moved (0 when ``tau`` holds).

    Example: :func:`winsorized_mean`.
    """

    mean: jnp.ndarray
    centre: jnp.ndarray
    clipped: jnp.ndarray


def _padded(d: int) -> int:
    return 1 << max(0, math.ceil(math.log2(d)))


def hadamard(v, signs):
    """``H S v`` for ``v: [..., p]`` (``p`` a power of two), ``signs: [p]`` of +-1, ``H`` the orthonormal
    Walsh-Hadamard matrix (fast transform, ``O(p log p)``).

    Example:
      >>> import jax.numpy as jnp
      >>> signs = jnp.array([1.0, -1.0, 1.0, 1.0])
      >>> hadamard(jnp.array([1.0, 2.0, 3.0, 4.0]), signs).tolist()
      [3.0, 1.0, -4.0, 2.0]
    """
    p = v.shape[-1]
    x = v * signs
    h = 1
    while h < p:
        x = x.reshape(x.shape[:-1] + (p // (2 * h), 2, h))
        a, b = x[..., 0, :], x[..., 1, :]
        x = jnp.stack([a + b, a - b], axis=-2).reshape(x.shape[:-3] + (p,))
        h *= 2
    return x / math.sqrt(p)


def inverse_hadamard(y, signs):
    """The inverse of :func:`hadamard`: ``S H y`` (``H`` is symmetric and orthonormal).

    Example:
      >>> import jax.numpy as jnp
      >>> signs, v = jnp.array([1.0, -1.0, 1.0, 1.0]), jnp.array([1.0, 2.0, 3.0, 4.0])
      >>> inverse_hadamard(hadamard(v, signs), signs).tolist()
      [1.0, 2.0, 3.0, 4.0]
    """
    return hadamard(y, jnp.ones_like(signs)) * signs


def rotated_radius(tau: float, dim: int, users: int, gamma: float) -> float:
    """``tau' = tau sqrt(2 log(2 p r / gamma) / p)``: a radius every rotated coordinate of ``(tau, gamma)``-
    concentrated vectors stays within, except with probability ``gamma`` (a union bound over the ``p r``
    sub-Gaussian coordinates).

    Example:
      >>> round(rotated_radius(1.0, 8, 100, 1e-3), 4)
      1.8898
    """
    p = _padded(checks.positive_int("dim", dim))
    return checks.positive_float("tau", tau) * math.sqrt(
        2 * math.log(2 * p * checks.positive_int("users", users) / checks.probability("gamma", gamma)) / p)


def winsorized_mean_event(histogram_multiplier: float, mean_multiplier: float) -> dp_accounting.DpEvent:
    """The estimator's two Gaussian mechanisms for replace-one neighbouring user sets. Each multiplier is the
    noise std over *half* its L2 sensitivity under replacement (jaxfl's convention for replace-one: the
    accountant applies the factor 2; :func:`jaxfl.accounting.events.clipped_sum_gaussian`): ``sigma_h =
    z_h sqrt(2 p) / 2`` and ``sigma_m = z_m 6 tau' sqrt(p) / 2``.

    Example:
      >>> winsorized_mean_event(2.0, 3.0)
      ComposedDpEvent(events=[GaussianDpEvent(noise_multiplier=2.0), GaussianDpEvent(noise_multiplier=3.0)])
    """
    return dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(float(histogram_multiplier)),
                                          dp_accounting.GaussianDpEvent(float(mean_multiplier))])


def calibrate_winsorized_mean(epsilon: float, delta: float, accountant: str = "rdp") -> float:
    """The noise multiplier ``z`` (used for both mechanisms) at which :func:`winsorized_mean_event` ``(z, z)``
    is (eps, delta)-DP for replace-one neighbours.

    Example:
      >>> round(calibrate_winsorized_mean(1.0, 1e-5), 3)
      11.442
    """
    return calibrate(lambda z: winsorized_mean_event(z, z), epsilon, delta, accountant=accountant,
                     neighboring_relation=REPLACE_ONE)


def winsorized_mean(key: jax.Array, vectors, *, tau: float, bound: float, noise_multiplier, gamma: float = 1e-3,
                    rotation_key: jax.Array | None = None, mask=None) -> MeanEstimate:
    """The private mean of ``vectors: [r, d]`` (see the module docstring).

    Args:
      key: the mechanism's noise (histogram and mean draws are split from it).
      tau, gamma: the concentration radius and its failure probability (Def. B.2).
      bound: every vector's L2 norm is at most ``bound`` (its rotated coordinates then lie in
        ``[-bound, bound]``: the histogram's range). Vectors are clipped to it first.
      noise_multiplier: ``z`` of both mechanisms (:func:`calibrate_winsorized_mean`), a scalar or
        ``(z_histogram, z_mean)``.
      rotation_key: the public random rotation (default: derived from ``key``; it needs no privacy).
      mask: ``[r]`` 1 for real vectors, 0 for padding rows (default: all real); the mean is over the real ones,
        whose number is public. ``tau'`` takes its union bound over all ``r`` rows (conservative).

    Example (1,000 users' vectors concentrated within 0.5 of (1, 1, 1, 1), at (1, 1e-5)):
      >>> import jax
      >>> x = 1.0 + 0.1 * jax.random.normal(jax.random.key(0), (1000, 4))
      >>> estimate = winsorized_mean(jax.random.key(1), x, tau=0.5, bound=5.0,
      ...                            noise_multiplier=calibrate_winsorized_mean(1.0, 1e-5))
      >>> bool(abs(estimate.mean - 1.0).max() < 0.2), int(estimate.clipped)
      (True, 0)
    """
    r, d = vectors.shape
    mask = jnp.ones(r, jnp.float32) if mask is None else jnp.asarray(mask, jnp.float32)
    real = jnp.sum(mask)
    p = _padded(d)
    z_h, z_m = noise_multiplier if isinstance(noise_multiplier, tuple) else (noise_multiplier, noise_multiplier)
    k_rot, k_hist, k_mean = jax.random.split(key, 3)
    signs = jnp.where(jax.random.bernoulli(k_rot if rotation_key is None else rotation_key, 0.5, (p,)), 1.0, -1.0)
    norms = jnp.linalg.norm(vectors, axis=1, keepdims=True)
    x = vectors * jnp.minimum(1.0, bound / jnp.maximum(norms, 1e-30))
    y = hadamard(jnp.pad(x, ((0, 0), (0, p - d))), signs)           # [r, p]
    width = 2 * rotated_radius(tau, d, r, gamma)
    bins = max(1, math.ceil(2 * bound / width))
    index = jnp.clip(jnp.floor((y + bound) / width).astype(jnp.int32), 0, bins - 1)
    counts = jnp.einsum("r,rpb->pb", mask, jax.nn.one_hot(index, bins, dtype=jnp.float32))  # [p, bins]
    sigma_h = z_h * math.sqrt(2 * p) / 2
    noisy = counts + sigma_h * jax.random.normal(k_hist, counts.shape)
    centre = -bound + (jnp.argmax(noisy, axis=1) + 0.5) * width          # [p]
    half = 1.5 * width                                                   # 3 tau'
    clipped_y = jnp.clip(y, centre - half, centre + half)
    moved = jnp.sum((clipped_y != y) * mask[:, None])
    sigma_m = z_m * 2 * half * math.sqrt(p) / 2
    total = mask @ clipped_y + sigma_m * jax.random.normal(k_mean, (p,))
    mean = inverse_hadamard(total / jnp.maximum(real, 1.0), signs)[:d]
    return MeanEstimate(mean, centre, moved)
