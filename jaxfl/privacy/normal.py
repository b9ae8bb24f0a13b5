"""Counter-based standard normals that use both words of every threefry2x32 call.

``jax.random.normal`` hashes one counter per float32 sample and folds the hash's two output words into
one; on a CPU the hash is most of the cost, so jaxfl's privacy noise (and DP-REC's codebook) draws two
samples per hash instead. Sample ``j`` of a draw under raw key ``k = key_data(key)`` is a pure function of
``(k, row, j)``::

    (w0, w1) = threefry2x32(k, (row, j // 2));  bits = w0 if j is even else w1
    u = float32 in [0, 1) from the top 23 bits;  z = sqrt(2) * erfinv(max(2u - 1, -1 + ulp))

(``row = 0`` for noise, the codebook row for DP-REC), so any tiling of ``j`` into even-aligned tiles gives
bit-identical hash words, each sample can be regenerated alone, and nothing depends on the device layout or
on JAX's ``jax_threefry_partitionable`` flag (the hash is applied directly to explicit counters). Rows
(:func:`normal_row`, hence all noise and the REC decoder) hash with :func:`threefry2x32`, Threefry-2x32-20
written out in ``jax.numpy`` integer ops, which XLA fuses with the ``u -> z`` map into one vectorised loop
(1.8x the rate of JAX's ``threefry2x32`` primitive on a 2-core CPU, whose CPU lowering runs the 20 rounds as a rolled
loop over whole arrays; ``bench/noise_rate.py``); tiles that a reduction consumes (:func:`normal_pairs`,
DP-REC's encoder) keep the primitive, which stays out of the reduction's loop. Both give the same words
(tested, with Random123's known answers). The ``u -> z`` map is the one ``jax.random.normal`` uses for
float32; it is XLA's ``erf_inv``, which XLA:CPU in JAX 0.10 evaluates alike in every program, and in JAX 0.12
may round a few ulps apart between programs (e.g. fused under ``vmap`` against op by op).
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


_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def _rotate_left(x: jnp.ndarray, bits: int) -> jnp.ndarray:
    return (x << np.uint32(bits)) | (x >> np.uint32(32 - bits))


def threefry2x32(key_data: jnp.ndarray, x0: jnp.ndarray, x1: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Threefry-2x32, 20 rounds (Salmon et al. 2011, as JAX's ``threefry2x32``): the two uint32 output words
    for the counter words ``(x0, x1)`` (uint32 arrays of one shape) under ``key_data`` (``uint32[2]``).
    Elementwise ``jax.numpy`` ops only, so XLA fuses it with its consumers."""
    k0, k1 = key_data[0], key_data[1]
    schedule = (k0, k1, k0 ^ k1 ^ _PARITY)
    x0, x1 = x0 + k0, x1 + k1
    for block in range(5):   # 5 x 4 rounds, a key injection after each 4
        for bits in _ROTATIONS[block % 2]:
            x0 = x0 + x1
            x1 = _rotate_left(x1, bits) ^ x0
        x0 = x0 + schedule[(block + 1) % 3]
        x1 = x1 + schedule[(block + 2) % 3] + np.uint32(block + 1)
    return x0, x1


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
    pairs = jnp.arange(-(-size // 2), dtype=jnp.uint32)
    rows = jnp.broadcast_to(jnp.asarray(row).astype(jnp.uint32), pairs.shape)
    w0, w1 = threefry2x32(jnp.asarray(key_data, jnp.uint32), rows, pairs)
    return jnp.stack([normal_from_bits(w0), normal_from_bits(w1)], axis=-1).reshape(-1)[:size]


def is_threefry(key) -> bool:
    """Whether ``key`` is a threefry key: typed, or a raw (legacy) ``uint32[2]``."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key.shape == () and str(jax.random.key_impl(key)) == "threefry2x32"
    return key.shape == (2,) and jnp.dtype(key.dtype) == jnp.uint32


def raw_key_data(key) -> jnp.ndarray:
    """``uint32[2]`` words of a threefry key (typed or raw)."""
    return jax.random.key_data(key) if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) else key


def standard_normal(key: jax.Array, shape, dtype=jnp.float32) -> jnp.ndarray:
    """i.i.d. N(0, 1) of ``shape`` from ``key`` (typed or raw ``uint32[2]``): the samples ``z[0, :]`` of the
    module's layout, reshaped row-major, for a threefry key and float32. Other key implementations and
    dtypes (e.g. float64 under ``jax_enable_x64``) use ``jax.random.normal``."""
    shape = tuple(int(s) for s in shape)
    size = math.prod(shape)
    if not is_threefry(key) or jnp.dtype(dtype) != jnp.float32 or size >= _MAX_SAMPLES:
        return jax.random.normal(key, shape, dtype)
    return normal_row(raw_key_data(key), 0, size).reshape(shape)
