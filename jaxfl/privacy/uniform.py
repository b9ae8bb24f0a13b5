"""``jax.random``'s uniform draws (bits, ``uniform``, ``randint``, ``bernoulli``), bitwise, with a hash XLA fuses.

Minibatch indices, Poisson masks and shuffling orders are drawn with ``jax.random.randint`` /
``bernoulli`` / ``uniform``, whose threefry hash is JAX's ``threefry2x32`` primitive; on a CPU its lowering
runs the 20 rounds as a rolled loop over whole arrays (:mod:`jaxfl.privacy.normal`). The functions here
compute the same words with :func:`jaxfl.privacy.normal.threefry2x32` (the rounds as ``jax.numpy``
integer ops, fused with what consumes them) and then apply ``jax.random``'s own maps, so every result is
bitwise ``jax.random``'s (tested): swapping one for the other changes no draw of any run.

The words are those of JAX's default ``jax_threefry_partitionable`` layout (JAX >= 0.5): entry ``i`` (row-major)
of a draw of ``shape`` under key ``k`` is ``w0 ^ w1`` for ``(w0, w1) = threefry2x32(k, (i >> 32, i mod 2**32))``,
and ``randint`` splits ``k`` into the keys hashed at counters 0 and 1. Where that does not hold (another
key implementation, the flag off, a dtype other than float32 / int32) the call goes to ``jax.random``.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxfl.privacy.normal import is_threefry, raw_key_data, threefry2x32

_INT32 = np.iinfo(np.int32)


def _fast(key) -> bool:
    return is_threefry(key) and bool(jax.config.jax_threefry_partitionable)


def _bits(key_data, shape: tuple[int, ...]) -> jnp.ndarray:
    """uint32 words of ``jax.random.bits(key, shape)`` (the partitionable layout; fewer than 2**32 entries)."""
    count = jnp.arange(math.prod(shape), dtype=jnp.uint32)
    w0, w1 = threefry2x32(key_data, jnp.zeros_like(count), count)
    return (w0 ^ w1).reshape(shape)


def _split2(key_data) -> tuple[jnp.ndarray, jnp.ndarray]:
    """``jax.random.split(key)``'s two raw keys."""
    w0, w1 = threefry2x32(key_data, jnp.zeros(2, jnp.uint32), jnp.arange(2, dtype=jnp.uint32))
    return jnp.stack([w0[0], w1[0]]), jnp.stack([w0[1], w1[1]])


def _shape(shape) -> tuple[int, ...]:
    return (int(shape),) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)


def _is_int32(value) -> bool:
    """A Python / NumPy int within int32, or an int32 array."""
    if isinstance(value, (int, np.integer)):
        return _INT32.min <= value <= _INT32.max
    return jnp.asarray(value).dtype == jnp.int32


def _unit_floats(bits: jnp.ndarray) -> jnp.ndarray:
    """float32 in [0, 1) from the top 23 bits, as ``jax.random.uniform``."""
    return lax.bitcast_convert_type((bits >> np.uint32(9)) | np.uint32(0x3F800000), jnp.float32) - np.float32(1.0)


def uniform(key, shape=()) -> jnp.ndarray:
    """``jax.random.uniform(key, shape)`` (float32 in [0, 1)), bitwise. (Other bounds are left to
    ``jax.random``: its ``u (b - a) + a`` rounds differently where XLA contracts it to a fused multiply-add.)

    Example:
      >>> import jax, jax.numpy as jnp
      >>> bool(jnp.array_equal(uniform(jax.random.key(0), (2,)), jax.random.uniform(jax.random.key(0), (2,))))
      True
    """
    shape = _shape(shape)
    if not _fast(key) or math.prod(shape) >= 2**32:
        return jax.random.uniform(key, shape)
    return _unit_floats(_bits(raw_key_data(key), shape))


def bernoulli(key, p, shape=None) -> jnp.ndarray:
    """``jax.random.bernoulli(key, p, shape)`` for a float32 (or Python float) ``p``, bitwise.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> key = jax.random.key(0)
      >>> bool(jnp.array_equal(bernoulli(key, 0.5, (4,)), jax.random.bernoulli(key, 0.5, (4,))))
      True
    """
    p = jnp.asarray(p)
    if p.dtype != jnp.float32:
        return jax.random.bernoulli(key, p, shape)
    shape = p.shape if shape is None else _shape(shape)
    return uniform(key, shape) < p


def randint(key, shape, minval, maxval) -> jnp.ndarray:
    """``jax.random.randint(key, shape, minval, maxval)`` for int32 results (JAX's default without x64) and
    int32 (or Python int within int32) bounds, bitwise: ``minval + ((hi mod s) m + lo mod s) mod s`` in uint32
    arithmetic, ``s = maxval - minval`` (1 where ``maxval <= minval``), ``m = (2**16 mod s)**2 mod s``, ``hi`` /
    ``lo`` the words of the key's two halves.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> key = jax.random.key(0)
      >>> bool(jnp.array_equal(randint(key, (3,), 0, 10), jax.random.randint(key, (3,), 0, 10)))
      True
    """
    shape = _shape(shape)
    int32_bounds = _is_int32(minval) and _is_int32(maxval)
    if not _fast(key) or not int32_bounds or jax.config.jax_enable_x64 or math.prod(shape) >= 2**32:
        return jax.random.randint(key, shape, minval, maxval)
    low, high = (jnp.broadcast_to(jnp.asarray(b).astype(jnp.int32), shape) for b in (minval, maxval))
    k1, k2 = _split2(raw_key_data(key))
    higher, lower = _bits(k1, shape), _bits(k2, shape)
    span = jnp.where(high <= low, jnp.uint32(1), (high - low).astype(jnp.uint32))
    multiplier = lax.rem(jnp.full(shape, 2**16, jnp.uint32), span)
    multiplier = lax.rem(multiplier * multiplier, span)
    offset = lax.rem(lax.rem(higher, span) * multiplier + lax.rem(lower, span), span)
    return low + offset.astype(jnp.int32)
