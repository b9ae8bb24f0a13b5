"""The counter-based normal generator against an independent NumPy threefry2x32-20 and erfinv."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special
import scipy.stats

from jaxfl.privacy import normal

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry2x32(key, x0, x1):
    """Threefry-2x32 with 20 rounds (Salmon et al., SC'11), in NumPy uint32 arithmetic."""
    k0, k1 = np.uint32(key[0]), np.uint32(key[1])
    ks = (k0, k1, np.uint32(0x1BD11BDA) ^ k0 ^ k1)
    x0, x1 = np.asarray(x0, np.uint32) + ks[0], np.asarray(x1, np.uint32) + ks[1]
    rot = lambda v, r: (v << np.uint32(r)) | (v >> np.uint32(32 - r))
    for block in range(5):
        for r in _ROTATIONS[block % 2]:
            x0 = x0 + x1
            x1 = rot(x1, r) ^ x0
        x0 = x0 + ks[(block + 1) % 3]
        x1 = x1 + ks[(block + 2) % 3] + np.uint32(block + 1)
    return x0, x1


@pytest.mark.parametrize("key, counter, expected", [  # Random123's known-answer vectors (kat_vectors)
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
])
def test_numpy_reference_threefry_matches_known_answers(key, counter, expected):
    with np.errstate(over="ignore"):
        out = _threefry2x32(key, np.uint32(counter[0]), np.uint32(counter[1]))
    assert (int(out[0]), int(out[1])) == expected


@pytest.mark.parametrize("key, counter, expected", [  # the same known answers
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
])
def test_jnp_threefry_matches_known_answers(key, counter, expected):
    out = jax.jit(normal.threefry2x32)(jnp.asarray(key, jnp.uint32), jnp.uint32(counter[0]), jnp.uint32(counter[1]))
    assert (int(out[0]), int(out[1])) == expected


def test_jnp_threefry_equals_jax_threefry_bitwise():
    """jaxfl's hash (fusible jnp ops) gives JAX's own threefry2x32 words on random keys and counters, jitted
    and vmapped over keys."""
    from jax.extend.random import threefry_2x32

    rng = np.random.default_rng(0)
    keys = jnp.asarray(rng.integers(0, 2**32, (3, 2), dtype=np.uint64).astype(np.uint32))
    x0, x1 = (jnp.asarray(rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32)) for _ in range(2))
    ours = jax.jit(jax.vmap(normal.threefry2x32, in_axes=(0, None, None)))(keys, x0, x1)
    for i in range(3):
        theirs = threefry_2x32(keys[i], jnp.stack([x0, x1]))
        np.testing.assert_array_equal(ours[0][i], theirs[0])
        np.testing.assert_array_equal(ours[1][i], theirs[1])


def _reference_row(key_data, row, size):
    pairs = np.arange((size + 1) // 2, dtype=np.uint32)
    with np.errstate(over="ignore"):
        w0, w1 = _threefry2x32(key_data, np.full_like(pairs, row), pairs)
    bits = np.stack([w0, w1], axis=-1).reshape(-1)[:size]
    unit = ((bits >> np.uint32(9)) | np.uint32(0x3F800000)).view(np.float32) - np.float32(1.0)
    lowest = np.nextafter(np.float32(-1.0), np.float32(0.0))
    return np.sqrt(2.0) * scipy.special.erfinv(np.maximum(2.0 * unit.astype(np.float64) - 1.0, lowest))


@pytest.mark.parametrize("row, size", [(0, 1), (0, 7), (3, 1000)])
def test_row_equals_the_documented_layout(row, size):
    key = jax.random.key(42)
    data = np.asarray(jax.random.key_data(key))
    got = np.asarray(normal.normal_row(jnp.asarray(data), row, size), np.float64)
    np.testing.assert_allclose(got, _reference_row(data, row, size), rtol=2e-6, atol=2e-6)
    if row == 0:
        np.testing.assert_array_equal(normal.standard_normal(key, (size,)), normal.normal_row(data, 0, size))
        np.testing.assert_array_equal(normal.standard_normal(jnp.asarray(data), (size,)), got.astype(np.float32))


def test_shape_is_the_row_reshaped_and_tiles_agree():
    key = jax.random.key(5)
    block = normal.standard_normal(key, (6, 5))
    np.testing.assert_array_equal(block.reshape(-1), normal.normal_row(jax.random.key_data(key), 0, 30))
    # any even-aligned tile of a row regenerates the same samples
    even, odd = normal.normal_pairs(jax.random.key_data(key), 0, jnp.arange(4, 9))
    np.testing.assert_array_equal(jnp.stack([even, odd], -1).reshape(-1), block.reshape(-1)[8:18])


def test_samples_are_standard_normal_and_the_two_words_independent():
    z = np.asarray(normal.standard_normal(jax.random.key(9), (200_000,)), np.float64)
    assert scipy.stats.kstest(z, "norm").pvalue > 1e-3
    assert abs(np.corrcoef(z[0::2], z[1::2])[0, 1]) < 0.01  # the two words of one hash
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1.0) < 0.01


def test_other_keys_and_dtypes_fall_back_to_jax_random_normal():
    philox = jax.random.key(1, impl="philox4x32")
    np.testing.assert_array_equal(normal.standard_normal(philox, (5,)), jax.random.normal(philox, (5,)))
    key = jax.random.key(1)
    np.testing.assert_array_equal(normal.standard_normal(key, (5,), jnp.bfloat16),
                                  jax.random.normal(key, (5,), jnp.bfloat16))


def test_vmapped_keys_draw_what_each_key_draws_alone():
    """Under vmap each key draws the documented samples of its own row 0 (the NumPy reference) and what it
    draws alone: bitwise under JAX 0.10's XLA:CPU, within 2 ulp under JAX 0.12's, which rounds erf_inv fused
    under vmap and op by op apart."""
    keys = jax.random.split(jax.random.key(3), 4)
    batched = jax.vmap(lambda k: normal.standard_normal(k, (3, 3)))(keys)
    for i in range(4):
        reference = _reference_row(np.asarray(jax.random.key_data(keys[i])), 0, 9).reshape(3, 3)
        np.testing.assert_allclose(np.asarray(batched[i], np.float64), reference, rtol=2e-6, atol=2e-6)
        np.testing.assert_allclose(batched[i], normal.standard_normal(keys[i], (3, 3)), rtol=1e-6, atol=0)
