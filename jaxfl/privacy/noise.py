"""Keyed Gaussian noise on pytrees."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxfl.privacy.keys import fold_in
from jaxfl.privacy.normal import standard_normal


def gaussian_like(key: jax.Array, tree, std):
    """A pytree shaped like ``tree`` of i.i.d. ``N(0, std^2)`` draws.

    Leaf ``i`` uses ``fold_in(key, i)``, so adding a parameter never changes the noise of another; its
    samples come from :func:`jaxfl.privacy.normal.standard_normal` (two samples per threefry call).
    ``std`` may be traced; ``std = 0`` gives exact zeros.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> noise = gaussian_like(jax.random.key(0), {"b": jnp.zeros(3), "w": jnp.zeros((2, 3))}, std=2.0)
      >>> jax.tree_util.tree_map(jnp.shape, noise)
      {'b': (3,), 'w': (2, 3)}
      >>> again = gaussian_like(jax.random.key(0), {"b": jnp.zeros(3), "w": jnp.zeros((2, 3))}, std=2.0)
      >>> bool(jnp.all(noise["w"] == again["w"]))          # the key addresses the draw
      True
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    noisy = [
        std * standard_normal(fold_in(key, i), jnp.shape(leaf), jnp.result_type(leaf))
        for i, leaf in enumerate(leaves)
    ]
    return jax.tree_util.tree_unflatten(treedef, noisy)


def add_gaussian_noise(key: jax.Array, tree, std):
    """``tree + N(0, std^2 I)`` with the noise of :func:`gaussian_like`.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> tree = {"w": jnp.ones(4)}
      >>> noisy = add_gaussian_noise(jax.random.key(1), tree, std=0.5)
      >>> bool(jnp.allclose(noisy["w"], 1.0 + gaussian_like(jax.random.key(1), tree, 0.5)["w"]))
      True
    """
    return jax.tree_util.tree_map(jnp.add, tree, gaussian_like(key, tree, std))


def _is_python_zero(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0


def unit_noise_like(key: jax.Array, tree, noise_multiplier):
    """The unit noise of a Gaussian mechanism: :func:`gaussian_like` ``(key, tree, 1.0)``, or ``None``
    when ``noise_multiplier`` is a Python ``0`` (no noise is drawn at all; a traced or array zero still
    draws, and :func:`noisy_clipped_mean` scales it to exact zeros).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> unit_noise_like(jax.random.key(0), {"w": jnp.zeros(3)}, 0) is None   # a Python 0 draws nothing
      True
      >>> unit_noise_like(jax.random.key(0), {"w": jnp.zeros(3)}, 1.0)["w"].shape
      (3,)
    """
    return None if _is_python_zero(noise_multiplier) else gaussian_like(key, tree, 1.0)


def noisy_clipped_mean(clipped_sum, unit_noise, *, clip_norm, noise_multiplier, denominator):
    """``(clipped_sum + z C unit_noise) * (1 / denominator)``: the Gaussian mechanism on a sum of
    clipped gradients (sensitivity ``C``), normalized. The one implementation behind the engine's noisy
    gradients and :func:`jaxfl.privacy.transforms.differentially_private_aggregate`.

    Args:
      clipped_sum: pytree, e.g. ``ClippedSum.value``.
      unit_noise: i.i.d. ``N(0, 1)`` shaped like ``clipped_sum`` (:func:`unit_noise_like`), or ``None``
        for a Python ``0`` noise multiplier.
      clip_norm, noise_multiplier: ``C`` and ``z`` (may be traced); ``z = 0`` adds exact zeros, also
        with ``C = inf``.
      denominator: scalar the noisy sum is divided by (e.g. the public batch size); may be traced.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> total = {"w": jnp.array([3.0, -1.0])}                  # a sum of 4 clipped gradients, C = 1
      >>> noise = unit_noise_like(jax.random.key(0), total, 1.1)
      >>> mean = noisy_clipped_mean(total, noise, clip_norm=1.0, noise_multiplier=1.1, denominator=4)
      >>> mean["w"].shape
      (2,)
      >>> noisy_clipped_mean(total, None, clip_norm=1.0, noise_multiplier=0, denominator=4)["w"]  # z = 0: exact
      Array([ 0.75, -0.25], dtype=float32)
    """
    if unit_noise is None and not _is_python_zero(noise_multiplier):
        raise ValueError("unit_noise is None but noise_multiplier is not a Python 0: the noise would be lost")
    noisy = clipped_sum
    if unit_noise is not None:
        std = jnp.where(noise_multiplier > 0, noise_multiplier * clip_norm, 0.0)  # never 0 * inf
        noisy = jax.tree_util.tree_map(lambda s, u: s + std * u, noisy, unit_noise)
    # Multiplying by the reciprocal (never dividing by a traced scalar) keeps XLA from rewriting the
    # division differently in differently-sharded programs: results stay bitwise device-independent.
    inverse = 1.0 / denominator
    return jax.tree_util.tree_map(lambda g: g * inverse, noisy)
