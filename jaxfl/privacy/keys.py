"""Keyed, addressable randomness (ARCHITECTURE §2, principle 3).

Every random draw in jaxfl comes from a key derived by ``fold_in`` from
``(root key, round, silo id, local step, purpose)``, in that order::

    key = fold_in(fold_in(fold_in(fold_in(root, round), silo), step), purpose)

so a draw is a function of *what* it is for, never of the device a silo runs on or of the silo's
position in a sampled subset. Server-side draws (silo sampling, central noise) use the silo id
:data:`SERVER`. Consequences checked by the tests: results are bitwise identical on 1 or many
devices, and a resumed run equals an unbroken one.
"""
from __future__ import annotations

import enum

import jax
import numpy as np

SERVER = 2**31 - 1
"""Silo id used for draws made by the server rather than by a silo."""


class Purpose(enum.IntEnum):
    """What a random draw is for; the last ``fold_in`` of every key."""

    PARTICIPATION = 0  # which silos take part in a round
    MINIBATCH = 1  # which records a silo samples in a local step
    NOISE = 2  # Gaussian (or other) privacy noise
    INIT = 3  # model initialisation
    SHUFFLE = 4  # shuffler permutations
    CODEC = 5  # compression / relative-entropy coding
    AUX = 6  # anything else an algorithm needs (document it where used)


def round_key(root: jax.Array, round_index) -> jax.Array:
    """Key of one round: ``fold_in(root, round)``. ``round_index`` may be traced."""
    return jax.random.fold_in(root, round_index)


def silo_key(round_key_: jax.Array, silo) -> jax.Array:
    """Key of one silo within a round: ``fold_in(round_key, silo)``. Vmappable over ``silo``."""
    return jax.random.fold_in(round_key_, silo)


def step_key(silo_key_: jax.Array, step, purpose: Purpose) -> jax.Array:
    """Key of one draw: ``fold_in(fold_in(silo_key, step), purpose)``."""
    return jax.random.fold_in(jax.random.fold_in(silo_key_, step), purpose)


def derive(root: jax.Array, *, round, silo, step, purpose: Purpose) -> jax.Array:
    """The key of the draw addressed by ``(round, silo, step, purpose)``, from the root key."""
    return derive_from_round(round_key(root, round), silo=silo, step=step, purpose=purpose)


def as_key(seed_or_key) -> jax.Array:
    """A typed PRNG key from an int seed, a raw ``uint32[2]`` key or a typed key."""
    if isinstance(seed_or_key, (int, np.integer)):
        return jax.random.key(int(seed_or_key))
    if jax.dtypes.issubdtype(seed_or_key.dtype, jax.dtypes.prng_key):
        return seed_or_key
    return jax.random.wrap_key_data(seed_or_key)


def derive_from_round(round_key_: jax.Array, *, silo, step, purpose: Purpose) -> jax.Array:
    """The key addressed by ``(silo, step, purpose)`` within a round whose key is given."""
    return step_key(silo_key(round_key_, silo), step, purpose)
