"""The shared REC codebook: a counter-based standard-normal generator.

Entry ``(k, j)`` of block ``m``'s codebook under the client's seed ``R`` is a pure function of
``(R, m, k, j)``::

    block_key(R, m) = key_data(fold_in(key(R), m))                      uint32[2]
    (w0, w1) = threefry2x32(block_key(R, m), (k, j // 2));  bits = w0 if j is even else w1
    u = float32 in [0, 1) from the top 23 bits;  z = sqrt(2) * erfinv(max(2u - 1, -1 + ulp))

(one threefry call gives the two entries ``2p`` and ``2p + 1`` of a row), so any tiling of ``(k, j)``
into even-aligned tiles produces bit-identical values, the decoder regenerates row ``k*`` alone in
O(block size) (the paper's Alg. 2/4 "draw the first k* samples" gives the same sample for a
counter-based generator), and the values do not depend on JAX's ``jax_threefry_partitionable`` flag
(``fold_in`` and ``threefry2x32`` are called directly; ``jax.random.normal`` on a shape is not used,
because its bit layout changes with that flag). Values are float32.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.random import threefry_2x32

_LOWEST = np.nextafter(np.float32(-1.0), np.float32(0.0))
_SQRT2 = np.float32(np.sqrt(2.0))


def seed_key(seed) -> jax.Array:
    """The threefry key of a client seed ``R`` (uint32 scalar, may be traced)."""
    data = jnp.stack([jnp.zeros([], jnp.uint32), jnp.asarray(seed, jnp.uint32)])
    return jax.random.wrap_key_data(data, impl="threefry2x32")


def block_key(seed, block) -> jnp.ndarray:
    """``uint32[2]`` raw key of block ``block`` (int, may be traced) of seed ``seed``'s codebook."""
    return jax.random.key_data(jax.random.fold_in(seed_key(seed), block))


def _normal_from_bits(bits: jnp.ndarray) -> jnp.ndarray:
    unit = lax.bitcast_convert_type((bits >> 9) | jnp.uint32(0x3F800000), jnp.float32) - 1.0
    return _SQRT2 * lax.erf_inv(jnp.maximum(2.0 * unit - 1.0, _LOWEST))


def normal_pairs(key: jnp.ndarray, rows, pairs) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Codebook entries ``(z[k, 2p], z[k, 2p + 1])`` for broadcastable ``rows`` (k) and ``pairs`` (p).

    Args:
      key: ``uint32[2]`` from :func:`block_key`.
      rows, pairs: integer arrays (broadcast together), each entry < 2**32.
    Returns:
      two float32 arrays of the broadcast shape, i.i.d. N(0, 1) entries.
    """
    rows, pairs = jnp.broadcast_arrays(jnp.asarray(rows).astype(jnp.uint32), jnp.asarray(pairs).astype(jnp.uint32))
    w0, w1 = threefry_2x32(key, jnp.stack([rows.ravel(), pairs.ravel()]))
    return _normal_from_bits(w0).reshape(rows.shape), _normal_from_bits(w1).reshape(rows.shape)


def codebook_row(key: jnp.ndarray, row, size: int) -> jnp.ndarray:
    """Row ``row`` (int, may be traced) of a block's codebook: float32[size], O(size) work and memory."""
    even, odd = normal_pairs(key, row, jnp.arange(-(-size // 2), dtype=jnp.uint32))
    return jnp.stack([even, odd], axis=-1).reshape(-1)[:size]


def codebook(key: jnp.ndarray, num_rows: int, size: int) -> jnp.ndarray:
    """The whole ``float32[num_rows, size]`` codebook of a block, materialized (reference and tests only)."""
    even, odd = normal_pairs(key, jnp.arange(num_rows, dtype=jnp.uint32)[:, None],
                             jnp.arange(-(-size // 2), dtype=jnp.uint32)[None, :])
    return jnp.stack([even, odd], axis=-1).reshape(num_rows, -1)[:, :size]
