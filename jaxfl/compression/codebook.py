"""The shared REC codebook: a counter-based standard-normal generator.

Entry ``(k, j)`` of block ``m``'s codebook under the client's seed ``R`` is a pure function of
``(R, m, k, j)``::

    block_key(R, m) = key_data(fold_in(key(R), m))                      uint32[2]
    (w0, w1) = threefry2x32(block_key(R, m), (k, j // 2));  bits = w0 if j is even else w1
    u = float32 in [0, 1) from the top 23 bits;  z = sqrt(2) * erfinv(max(2u - 1, -1 + ulp))

(:mod:`jaxfl.privacy.normal`'s generator, row ``k``; one threefry call gives the two entries ``2p`` and
``2p + 1`` of a row; streamed scoring calls :func:`jaxfl.privacy.normal.normal_pairs` on tiles), so any
tiling of ``(k, j)`` into even-aligned tiles produces bit-identical values, the decoder regenerates row ``k*`` alone in
O(block size) (the paper's Alg. 2/4 "draw the first k* samples" gives the same sample for a
counter-based generator), and the values do not depend on JAX's ``jax_threefry_partitionable`` flag
(``fold_in`` and ``threefry2x32`` are called directly; ``jax.random.normal`` on a shape is not used,
because its bit layout changes with that flag). Values are float32.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxfl.privacy import keys as keys_lib
from jaxfl.privacy import normal


def seed_key(seed) -> jax.Array:
    """The threefry key of a client seed ``R`` (uint32 scalar, may be traced).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> jax.random.key_data(seed_key(jnp.uint32(7))).tolist()
      [0, 7]
    """
    data = jnp.stack([jnp.zeros([], jnp.uint32), jnp.asarray(seed, jnp.uint32)])
    return jax.random.wrap_key_data(data, impl="threefry2x32")


def block_key(seed, block) -> jnp.ndarray:
    """``uint32[2]`` raw key of block ``block`` (int, may be traced) of seed ``seed``'s codebook.

    Example: :func:`codebook_row`.
    """
    return jax.random.key_data(keys_lib.fold_in(seed_key(seed), block))


def codebook_row(key: jnp.ndarray, row, size: int) -> jnp.ndarray:
    """Row ``row`` (int, may be traced) of a block's codebook: float32[size], O(size) work and memory.

    Example (a row drawn alone equals that row of the materialized codebook):
      >>> import jax.numpy as jnp
      >>> key = block_key(jnp.uint32(7), 0)
      >>> bool(jnp.array_equal(codebook_row(key, 2, 3), codebook(key, 4, 3)[2]))
      True
    """
    return normal.normal_row(key, row, size)


def codebook(key: jnp.ndarray, num_rows: int, size: int) -> jnp.ndarray:
    """The whole ``float32[num_rows, size]`` codebook of a block, materialized (reference and tests only).

    Example: :func:`codebook_row`.
    """
    return jax.vmap(lambda row: normal.normal_row(key, row, size))(jnp.arange(num_rows, dtype=jnp.uint32))
