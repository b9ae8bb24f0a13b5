"""Keyed, addressable randomness (ARCHITECTURE §2, principle 3).

Every random draw in jaxfl comes from a key derived by ``fold_in`` from
``(root key, round, silo id, local step, purpose)``, in that order::

    key = fold_in(fold_in(fold_in(fold_in(root, round), silo), step), purpose)

so a draw is a function of *what* it is for, never of the device a silo runs on or of the silo's
position in a sampled subset. Server-side draws (silo sampling, central noise) use the silo id
:data:`SERVER`. Consequences checked by the tests: results are bitwise identical on 1 or many
devices, and a resumed run equals an unbroken one.

:func:`fold_in` is ``jax.random.fold_in`` bitwise. For threefry keys it hashes with the fused
:func:`jaxfl.privacy.normal.threefry2x32` rather than JAX's ``threefry2x32`` primitive, whose CPU lowering
runs the 20 rounds as a rolled loop of small kernels: a round derives a handful of keys, and on a 2-core
CPU those loops cost as much as the rest of a small model's round (``bench/engine_vs_loop.py``).
"""
from __future__ import annotations

import enum

import jax
import jax.numpy as jnp
import numpy as np

from jaxfl.privacy.normal import is_threefry, raw_key_data, threefry2x32

SERVER = 2**31 - 1
"""Silo id used for draws made by the server rather than by a silo."""


class Purpose(enum.IntEnum):
    """What a random draw is for; the last ``fold_in`` of every key.

    Example:
      >>> import jax
      >>> silo = silo_key(round_key(jax.random.key(0), 0), 2)
      >>> noise, batch = step_key(silo, 0, Purpose.NOISE), step_key(silo, 0, Purpose.MINIBATCH)
      >>> bool((jax.random.key_data(noise) != jax.random.key_data(batch)).any())   # one address, two purposes
      True
    """

    PARTICIPATION = 0  # which silos take part in a round
    MINIBATCH = 1  # which records a silo samples in a local step
    NOISE = 2  # Gaussian (or other) privacy noise
    INIT = 3  # model initialisation
    SHUFFLE = 4  # shuffler permutations
    CODEC = 5  # compression / relative-entropy coding
    AUX = 6  # anything else an algorithm needs (document it where used)


def fold_in(key: jax.Array, data) -> jax.Array:
    """``jax.random.fold_in(key, data)``, bitwise: a new key of ``key``'s kind (typed, or raw ``uint32[2]``).

    For a threefry key the new key's words are ``threefry2x32(key_data, (0, uint32(data)))``, what JAX's
    ``threefry_fold_in`` computes, with the rounds as fused ``jax.numpy`` integer ops (see the module doc);
    other key implementations and batched keys go to ``jax.random.fold_in``. ``data``: an integer scalar
    (Python, NumPy or traced), converted as JAX converts it (``jnp.asarray(data, uint32)``: int32 arrays wrap
    modulo 2**32).

    Example:
      >>> import jax
      >>> key = jax.random.key(0)
      >>> bool((jax.random.key_data(fold_in(key, 7)) == jax.random.key_data(jax.random.fold_in(key, 7))).all())
      True
    """
    if not is_threefry(key) or np.ndim(data) != 0:
        return jax.random.fold_in(key, data)
    words = jnp.asarray(data, dtype=jnp.uint32)
    w0, w1 = threefry2x32(raw_key_data(key), jnp.zeros_like(words), words)  # is_threefry: uint32 words
    new = jnp.stack([w0, w1])
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.wrap_key_data(new, impl=jax.random.key_impl(key))
    return new


def round_key(root: jax.Array, round_index) -> jax.Array:
    """Key of one round: ``fold_in(root, round)``. ``round_index`` may be traced.

    Example:
      >>> import jax
      >>> root = jax.random.key(0)
      >>> bool((jax.random.key_data(round_key(root, 3)) == jax.random.key_data(jax.random.fold_in(root, 3))).all())
      True
    """
    return fold_in(root, round_index)


def silo_key(round_key_: jax.Array, silo) -> jax.Array:
    """Key of one silo within a round: ``fold_in(round_key, silo)``. Vmappable over ``silo``.

    Example (one key per silo, as a round's ``vmap`` over silos derives them):
      >>> import jax, jax.numpy as jnp
      >>> keys = jax.vmap(lambda silo: silo_key(round_key(jax.random.key(0), 0), silo))(jnp.arange(4))
      >>> keys.shape
      (4,)
    """
    return fold_in(round_key_, silo)


def step_key(silo_key_: jax.Array, step, purpose: Purpose) -> jax.Array:
    """Key of one draw: ``fold_in(fold_in(silo_key, step), purpose)``.

    Example: :class:`Purpose`.
    """
    return fold_in(fold_in(silo_key_, step), purpose)


def derive(root: jax.Array, *, round, silo, step, purpose: Purpose) -> jax.Array:
    """The key of the draw addressed by ``(round, silo, step, purpose)``, from the root key.

    Example:
      >>> import jax
      >>> root = jax.random.key(0)
      >>> a = derive(root, round=3, silo=1, step=0, purpose=Purpose.NOISE)
      >>> b = step_key(silo_key(round_key(root, 3), 1), 0, Purpose.NOISE)      # the same address, built in steps
      >>> bool((jax.random.key_data(a) == jax.random.key_data(b)).all())
      True
      >>> c = derive(root, round=3, silo=1, step=0, purpose=Purpose.MINIBATCH)  # another purpose: another key
      >>> bool((jax.random.key_data(a) == jax.random.key_data(c)).all())
      False
    """
    return derive_from_round(round_key(root, round), silo=silo, step=step, purpose=purpose)


def as_key(seed_or_key) -> jax.Array:
    """A typed PRNG key from an int seed, a raw ``uint32[2]`` key or a typed key.

    Example (what ``train(key=...)`` accepts: the three forms name the same key):
      >>> import jax
      >>> typed = as_key(0)
      >>> same = [as_key(jax.random.PRNGKey(0)), as_key(jax.random.key(0))]
      >>> all(bool((jax.random.key_data(k) == jax.random.key_data(typed)).all()) for k in same)
      True
    """
    if isinstance(seed_or_key, (int, np.integer)):
        return jax.random.key(int(seed_or_key))
    if jax.dtypes.issubdtype(seed_or_key.dtype, jax.dtypes.prng_key):
        return seed_or_key
    return jax.random.wrap_key_data(seed_or_key)


def derive_from_round(round_key_: jax.Array, *, silo, step, purpose: Purpose) -> jax.Array:
    """The key addressed by ``(silo, step, purpose)`` within a round whose key is given.

    Example:
      >>> import jax
      >>> root = jax.random.key(0)
      >>> a = derive_from_round(round_key(root, 3), silo=SERVER, step=0, purpose=Purpose.PARTICIPATION)
      >>> b = derive(root, round=3, silo=SERVER, step=0, purpose=Purpose.PARTICIPATION)
      >>> bool((jax.random.key_data(a) == jax.random.key_data(b)).all())
      True
    """
    return step_key(silo_key(round_key_, silo), step, purpose)
