"""Adaptive clipping to a private quantile (Andrew, Thakkar, McMahan, Ramaswamy 2021), for client-level DP.

The clip norm ``C_t`` of round ``t`` follows a target quantile ``gamma`` of the clients' update norms instead of
being tuned. Each participating client sends, beside its update clipped to ``C_t``, the bit
``b_i = 1{||delta_i|| <= C_t} - 1/2`` (centred, so one client moves the bits' sum by at most ``1/2``). The server
adds ``N(0, sigma_b^2)`` to the bits' sum and estimates the fraction of clients at or below the clip,
``b = clip((sum_i b_i + N(0, sigma_b^2)) / m + 1/2, 0, 1)`` with ``m`` the public expected number of clients, then
takes a geometric step ``C_{t+1} = C_t exp(-eta (b - gamma))``: the clip grows while fewer than a ``gamma``
fraction of the updates fit, and shrinks otherwise.

Privacy. Per round the release is the pair (noisy sum of clipped updates, noisy sum of bits). One client moves
the first by at most ``C_t`` (noise std ``z_delta C_t``) and the second by at most ``1/2`` (noise std
``sigma_b``), so the pair is one Gaussian mechanism of noise multiplier
``z = (z_delta^-2 + (2 sigma_b)^-2)^(-1/2)`` on the concatenated, rescaled vector (Andrew et al., Sec. 3; the
clip is a function of earlier releases, so rescaling by it is post-processing). Given the ``z`` a run should have
(what its accountant composes, e.g. ``PoissonSampledDpEvent(q, GaussianDpEvent(z))`` per round), the updates
get :func:`update_noise_multiplier` ``(z, sigma_b) = (z^-2 - (2 sigma_b)^-2)^(-1/2)``, slightly above ``z``.
Andrew et al. recommend ``sigma_b = m / 20`` (the default).

References:
  Galen Andrew, Om Thakkar, H. Brendan McMahan, Swaroop Ramaswamy. "Differentially Private Learning with Adaptive
  Clipping". NeurIPS 2021 (arXiv 1905.03871).
"""
from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from jaxfl import checks


class AdaptiveClip(NamedTuple):
    """Adaptive clipping's settings (:func:`adaptive_clip` checks them; pass one as ``clip_norm=`` of
    :func:`jaxfl.algorithms.dp_fedavg`).

    Attributes:
      initial: ``C_0``, the first round's clip norm.
      target_quantile: ``gamma`` in (0, 1): the fraction of updates the clip should hold unclipped.
      learning_rate: ``eta > 0`` of the geometric step (the clip changes by at most a factor ``e^eta`` a round).
      count_stddev: ``sigma_b``, the noise std on the sum of the centred bits; None: ``expected_clients / 20``.

    Example: :func:`adaptive_clip`.
    """

    initial: float
    target_quantile: float = 0.5
    learning_rate: float = 0.2
    count_stddev: float | None = None


def adaptive_clip(initial: float, *, target_quantile: float = 0.5, learning_rate: float = 0.2,
                  count_stddev: float | None = None) -> AdaptiveClip:
    """A checked :class:`AdaptiveClip`: ``ValueError`` naming a bad value.

    Example (follow the median of the clients' update norms from a clip of 0.1):
      >>> adaptive_clip(0.1)
      AdaptiveClip(initial=0.1, target_quantile=0.5, learning_rate=0.2, count_stddev=None)
      >>> adaptive_clip(0.1, target_quantile=1.0)
      Traceback (most recent call last):
      ...
      ValueError: target_quantile must be in (0, 1), got 1.0
    """
    initial = checks.positive_float("initial", initial)
    quantile = checks.real("target_quantile", target_quantile)
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"target_quantile must be in (0, 1), got {target_quantile!r}")
    learning_rate = checks.positive_float("learning_rate", learning_rate)
    if count_stddev is not None:
        count_stddev = checks.positive_float("count_stddev", count_stddev)
    return AdaptiveClip(initial, quantile, learning_rate, count_stddev)


def count_stddev_for(settings: AdaptiveClip, expected_clients) -> float:
    """``sigma_b``: the settings' own, else Andrew et al.'s ``expected_clients / 20``.

    Example:
      >>> count_stddev_for(adaptive_clip(0.1), 100), count_stddev_for(adaptive_clip(0.1, count_stddev=2.0), 100)
      (5.0, 2.0)
    """
    return settings.count_stddev if settings.count_stddev is not None else float(expected_clients) / 20.0


def update_noise_multiplier(noise_multiplier, count_stddev):
    """``z_delta = (z^-2 - (2 sigma_b)^-2)^(-1/2)``: the updates' noise multiplier that, with the bits' noise
    ``sigma_b``, makes the round's pair of releases one Gaussian mechanism of multiplier ``z``. ``ValueError`` when
    the bits alone would spend it (``2 sigma_b <= z``); traced values are not checked.

    Example (z = 1 with sigma_b = 1: the updates get 1 / sqrt(3/4)):
      >>> round(float(update_noise_multiplier(1.0, 1.0)), 4)
      1.1547
      >>> round(float(combined_noise_multiplier(update_noise_multiplier(1.0, 1.0), 1.0)), 6)
      1.0
      >>> update_noise_multiplier(2.0, 1.0)
      Traceback (most recent call last):
      ...
      ValueError: noise_multiplier=2.0 leaves nothing for the updates: the bits' count_stddev=1.0 alone spends it ...
    """
    if isinstance(noise_multiplier, (int, float)) and isinstance(count_stddev, (int, float)):
        if not noise_multiplier > 0:
            raise ValueError(f"adaptive clipping needs noise_multiplier > 0 (the bits are released with noise), "
                             f"got {noise_multiplier!r}")
        if 2.0 * count_stddev <= noise_multiplier:
            raise ValueError(f"noise_multiplier={noise_multiplier!r} leaves nothing for the updates: the bits' "
                             f"count_stddev={count_stddev!r} alone spends it (need 2 * count_stddev > "
                             "noise_multiplier; raise count_stddev or expected_clients)")
        return (noise_multiplier ** -2 - (2.0 * count_stddev) ** -2) ** -0.5
    z = jnp.asarray(noise_multiplier, jnp.float32)
    return (z ** -2 - (2.0 * jnp.asarray(count_stddev, jnp.float32)) ** -2) ** -0.5


def combined_noise_multiplier(update_multiplier, count_stddev):
    """``(z_delta^-2 + (2 sigma_b)^-2)^(-1/2)``: the one Gaussian mechanism a round's two releases make (the
    inverse of :func:`update_noise_multiplier`). Example: :func:`update_noise_multiplier`."""
    return (update_multiplier ** -2 + (2.0 * count_stddev) ** -2) ** -0.5


def below_fraction(noisy_bit_sum, expected_clients):
    """``clip(noisy_bit_sum / m + 1/2, 0, 1)``: the estimated fraction of clients whose update fit the clip, from
    the noisy sum of centred bits and the public ``m``.

    Example (8 of 10 expected clients fit: bits sum to 8 * 0.5 - 2 * 0.5 = 3):
      >>> round(float(below_fraction(3.0, 10.0)), 6), float(below_fraction(30.0, 10.0))
      (0.8, 1.0)
    """
    return jnp.clip(noisy_bit_sum / expected_clients + 0.5, 0.0, 1.0)


def next_clip(clip, fraction, target_quantile, learning_rate):
    """``C exp(-eta (b - gamma))``: the geometric step toward the clip that holds a ``gamma`` fraction.

    Example (too few updates fit, so the clip grows; too many, so it shrinks):
      >>> [round(float(next_clip(1.0, b, 0.5, 0.2)), 4) for b in (0.0, 0.5, 1.0)]
      [1.1052, 1.0, 0.9048]
    """
    return clip * jnp.exp(-learning_rate * (fraction - target_quantile))


__all__ = ["AdaptiveClip", "adaptive_clip", "below_fraction", "combined_noise_multiplier", "count_stddev_for",
           "next_clip", "update_noise_multiplier"]
