"""Counter-based standard normals that use both words of every threefry2x32 call.

``jax.random.normal`` hashes one counter per float32 sample and folds the hash's two output words into
one; on a CPU the hash is most of the cost, so jaxfl's privacy noise (and DP-REC's codebook) draws two
samples per hash instead. Sample ``j`` of a draw under raw key ``k = key_data(key)`` is a pure function of
``(k, row, j)``::

    (w0, w1) = threefry2x32(k, (row, j // 2));  bits = w0 if j is even else w1
    u = float32 in [0, 1) from the top 23 bits;  z = sqrt(2) * erfinv(max(2u - 1, -1 + ulp))

(``row = 0`` for noise, the codebook row for DP-REC), so any tiling of ``j`` into even-aligned tiles gives
bit-identical hash words, each sample can be regenerated alone, and nothing depends on the device layout or
on JAX's ``jax_threefry_partitionable`` flag (``threefry2x32`` is called directly on explicit counters). The
``u -> z`` map is the one ``jax.random.normal`` uses for float32; it is XLA's ``erf_inv``, which XLA:CPU in
JAX 0.10 evaluates alike in every program, and in JAX 0.12 may round a few ulps apart between programs
(e.g. fused under ``vmap`` against op by op).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.random import threefry_2x32

_LOWEST = np.nextafter(np.float32(-1.0), np.float32(0.0))
_SQRT2 = np.float32(np.sqrt(2.0))
_MAX_SAMPLES = 2**33  # pair counters are uint32


def normal_from_bits(bits: jnp.ndarray) -> jnp.ndarray:
    """float32 N(0, 1) samples from uint32 ``bits`` (one sample per word)."""
    unit = lax.bitcast_convert_type((bits >> 9) | jnp.uint32(0x3F800000), jnp.float32) - 1.0
    return _SQRT2 * lax.erf_inv(jnp.maximum(2.0 * unit - 1.0, _LOWEST))


def normal_pairs(key_data: jnp.ndarray, rows, pairs) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Samples ``(z[row, 2p], z[row, 2p + 1])`` for broadcastable integer arrays ``rows`` and ``pairs``.

    Args:
      key_data: ``uint32[2]`` raw threefry key.
      rows, pairs: integer arrays (broadcast together), each entry < 2**32.
    Returns:
      two float32 arrays of the broadcast shape, i.i.d. N(0, 1) entries.
    """
    rows, pairs = jnp.broadcast_arrays(jnp.asarray(rows).astype(jnp.uint32), jnp.asarray(pairs).astype(jnp.uint32))
    w0, w1 = threefry_2x32(key_data, jnp.stack([rows.ravel(), pairs.ravel()]))
    return normal_from_bits(w0).reshape(rows.shape), normal_from_bits(w1).reshape(rows.shape)


def normal_row(key_data: jnp.ndarray, row, size: int) -> jnp.ndarray:
    """``float32[size]``: samples ``z[row, 0 .. size - 1]`` (``row`` may be traced); O(size) work."""
    even, odd = normal_pairs(key_data, row, jnp.arange(-(-size // 2), dtype=jnp.uint32))
    return jnp.stack([even, odd], axis=-1).reshape(-1)[:size]


def _is_threefry(key) -> bool:
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return str(jax.random.key_impl(key)) == "threefry2x32"
    return key.shape[-1:] == (2,) and jnp.dtype(key.dtype) == jnp.uint32  # a raw (legacy) threefry key


def standard_normal(key: jax.Array, shape, dtype=jnp.float32) -> jnp.ndarray:
    """i.i.d. N(0, 1) of ``shape`` from ``key`` (typed or raw ``uint32[2]``): the samples ``z[0, :]`` of the
    module's layout, reshaped row-major, for a threefry key and float32. Other key implementations and
    dtypes (e.g. float64 under ``jax_enable_x64``) use ``jax.random.normal``."""
    shape = tuple(int(s) for s in shape)
    size = math.prod(shape)
    if not _is_threefry(key) or jnp.dtype(dtype) != jnp.float32 or size >= _MAX_SAMPLES:
        return jax.random.normal(key, shape, dtype)
    data = jax.random.key_data(key) if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    return normal_row(data, 0, size).reshape(shape)
