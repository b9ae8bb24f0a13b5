"""DP clipping and noise as optax transformations (``optax.GradientTransformation``).

Both keep a step counter in their state and draw the noise of step ``t`` from
``keys.step_key(key, t, Purpose.NOISE)``: pass the silo's (or the server's) key for the run, and the
draws stay addressable and reproducible across restarts.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxfl.privacy import keys as keys_lib
from jaxfl.privacy.clipping import clip_by_global_norm
from jaxfl.privacy.noise import add_gaussian_noise, noisy_clipped_mean, unit_noise_like
from jaxfl.privacy.secure import LatticeGaussian


class NoiseState(NamedTuple):
    """The state of this module's transformations: ``count``, the updates so far (update ``t`` draws its noise
    from ``step_key(key, t, NOISE)``). Example: :func:`gaussian_noise`."""

    count: jnp.ndarray  # int32 scalar, number of updates so far


def _init(params):
    del params
    return NoiseState(count=jnp.zeros([], jnp.int32))


def differentially_private_aggregate(clip_norm, noise_multiplier, key: jax.Array,
                                     normalize: bool = True, secure: bool = False) -> optax.GradientTransformation:
    """Per-example clipping + Gaussian noise (DP-SGD's aggregation) as an optax transformation.

    ``update`` receives *per-example* gradients (leaves ``[batch, ...]``; padding rows must be
    zero, which clipping keeps at zero) and returns ``(sum_j clip(g_j, C) + N(0, (z C)^2 I)) / batch``
    (``/ batch`` only when ``normalize``; a Python ``0`` for ``z`` draws no noise), computed by
    :func:`jaxfl.privacy.noise.noisy_clipped_mean` as the engine's noisy gradients are. The sum's
    add/remove-one sensitivity is ``C``, so the noise multiplier ``z`` is what an accountant takes.

    ``secure=True``: the noisy sum is released on a lattice with discrete Gaussian noise
    (:class:`jaxfl.privacy.secure.LatticeGaussian`), safe against floating-point attacks; ``C`` and ``z`` must then
    be Python numbers, the key should come from :func:`jaxfl.privacy.secure.os_random_key`, and the accountant
    takes ``LatticeGaussian(C, z, d).event()`` (``d`` the number of parameters), not ``z``.

    Example:
      >>> import jax, jax.numpy as jnp, optax
      >>> tx = optax.chain(differentially_private_aggregate(clip_norm=1.0, noise_multiplier=1.1, key=jax.random.key(0)),
      ...                  optax.sgd(0.1))
      >>> params = {"w": jnp.zeros(3)}
      >>> per_example = {"w": jnp.ones((8, 3))}          # 8 records' gradients, each of norm sqrt(3)
      >>> updates, state = tx.update(per_example, tx.init(params), params)
      >>> updates["w"].shape
      (3,)
    """
    if secure and not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                          for v in (clip_norm, noise_multiplier)):
        raise ValueError(f"secure=True needs Python numbers for clip_norm and noise_multiplier, got "
                         f"{clip_norm!r} and {noise_multiplier!r}")

    def update(updates, state, params=None):
        del params
        clipped, _ = clip_by_global_norm(updates, clip_norm)
        summed = jax.tree_util.tree_map(lambda g: jnp.sum(g, axis=0), clipped)
        noise_key = keys_lib.step_key(key, state.count, keys_lib.Purpose.NOISE)
        batch = jax.tree_util.tree_leaves(updates)[0].shape[0] if normalize else 1
        if secure:
            dim = sum(int(np.prod(leaf.shape)) for leaf in jax.tree_util.tree_leaves(summed))
            released = LatticeGaussian(clip_norm, noise_multiplier, dim).release(noise_key, summed)
            noisy = jax.tree_util.tree_map(lambda g: g * (1.0 / batch), released)
        else:
            noisy = noisy_clipped_mean(summed, unit_noise_like(noise_key, summed, noise_multiplier),
                                       clip_norm=clip_norm, noise_multiplier=noise_multiplier, denominator=batch)
        return noisy, NoiseState(count=state.count + 1)

    return optax.GradientTransformation(_init, update)


def gaussian_noise(noise_std, key: jax.Array) -> optax.GradientTransformation:
    """Adds ``N(0, noise_std^2 I)`` to (already aggregated) updates, e.g. a server's noisy mean.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> tx = gaussian_noise(0.1, jax.random.key(0))
      >>> updates, _ = tx.update({"w": jnp.zeros(3)}, tx.init({"w": jnp.zeros(3)}))
      >>> updates["w"].shape
      (3,)
    """

    def update(updates, state, params=None):
        del params
        noise_key = keys_lib.step_key(key, state.count, keys_lib.Purpose.NOISE)
        return add_gaussian_noise(noise_key, updates, noise_std), NoiseState(count=state.count + 1)

    return optax.GradientTransformation(_init, update)
