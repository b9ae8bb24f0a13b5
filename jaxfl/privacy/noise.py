"""Keyed Gaussian noise on pytrees."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def gaussian_like(key: jax.Array, tree, std):
    """A pytree shaped like ``tree`` of i.i.d. ``N(0, std^2)`` draws.

    Leaf ``i`` uses ``fold_in(key, i)``, so adding a parameter never changes the noise of another.
    ``std`` may be traced; ``std = 0`` gives exact zeros.
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    noisy = [
        std * jax.random.normal(jax.random.fold_in(key, i), jnp.shape(leaf), jnp.result_type(leaf))
        for i, leaf in enumerate(leaves)
    ]
    return jax.tree_util.tree_unflatten(treedef, noisy)


def add_gaussian_noise(key: jax.Array, tree, std):
    """``tree + N(0, std^2 I)`` with the noise of :func:`gaussian_like`."""
    return jax.tree_util.tree_map(jnp.add, tree, gaussian_like(key, tree, std))
