"""jaxfl's fused-hash uniform draws are bitwise ``jax.random``'s (the oracle), jitted, vmapped, typed or raw keys."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxfl.privacy import uniform

SHAPES = [(), (1,), (7,), (3, 5), (443,), (2, 3, 4)]


def _keys():
    return [jax.random.key(0), jax.random.key(2**31 - 1), jax.random.fold_in(jax.random.key(7), 3),
            jax.random.PRNGKey(11)]  # the last a raw uint32[2] key


def _equal(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("shape", SHAPES)
def test_uniform_and_bernoulli_are_jax_randoms(shape):
    draw = jax.jit(lambda k: (uniform.uniform(k, shape), uniform.bernoulli(k, 0.3, shape)))
    for key in _keys():
        u, b = draw(key)
        _equal(u, jax.random.uniform(key, shape))
        _equal(b, jax.random.bernoulli(key, 0.3, shape))
    p = jnp.linspace(0.0, 1.0, 5, dtype=jnp.float32)
    _equal(uniform.bernoulli(jax.random.key(4), p), jax.random.bernoulli(jax.random.key(4), p))


@pytest.mark.parametrize("shape", SHAPES)
def test_randint_is_jax_randoms(shape):
    draw = jax.jit(lambda k, low, high: uniform.randint(k, shape, low, high))  # traced int32 bounds
    for low, high in [(0, 1238), (0, 1), (3, 3), (9, 2), (-5, 7), (0, 2**31 - 1), (-2**31, 2**31 - 1), (0, 65537),
                      (0, 3 * 2**20 + 1)]:
        for key in _keys():
            _equal(draw(key, jnp.int32(low), jnp.int32(high)), jax.random.randint(key, shape, low, high))
        key = _keys()[0]  # Python int bounds, eagerly
        _equal(uniform.randint(key, shape, low, high), jax.random.randint(key, shape, low, high))


def test_traced_bounds_and_vmap_over_keys_and_counts():
    keys = jax.random.split(jax.random.key(1), 6)
    counts = jnp.asarray([0, 1, 2, 443, 1238, 100_003], jnp.int32)
    draw = lambda k, c: uniform.randint(k, (443,), 0, jnp.maximum(c, 1))
    oracle = lambda k, c: jax.random.randint(k, (443,), 0, jnp.maximum(c, 1))
    _equal(jax.jit(jax.vmap(draw))(keys, counts), jax.vmap(oracle)(keys, counts))
    masks = jax.jit(jax.vmap(lambda k: uniform.bernoulli(k, 0.25, (1000,))))(keys)
    _equal(masks, jax.vmap(lambda k: jax.random.bernoulli(k, 0.25, (1000,)))(keys))


@settings(max_examples=40, deadline=None)
@given(st.integers(-2**31, 2**31 - 1), st.integers(-2**31, 2**31 - 1), st.integers(0, 2**32 - 1))
def test_randint_any_int32_bounds(low, high, seed):
    key = jax.random.key(seed)
    _equal(uniform.randint(key, (16,), low, high), jax.random.randint(key, (16,), low, high))


def test_other_keys_and_dtypes_go_to_jax_random():
    philox = jax.random.key(3, impl="philox4x32")
    _equal(uniform.uniform(philox, (9,)), jax.random.uniform(philox, (9,)))
    _equal(uniform.randint(philox, (9,), 0, 50), jax.random.randint(philox, (9,), 0, 50))
    key = jax.random.key(3)
    p16 = jnp.asarray(0.5, jnp.bfloat16)
    _equal(uniform.bernoulli(key, p16, (9,)), jax.random.bernoulli(key, p16, (9,)))


def test_the_original_threefry_layout_goes_to_jax_random():
    """With ``jax_threefry_partitionable`` off JAX lays out its words differently; the draws follow it."""
    key = jax.random.key(3)
    with jax.threefry_partitionable(False):
        _equal(uniform.randint(key, (9,), 0, 50), jax.random.randint(key, (9,), 0, 50))
        _equal(uniform.bernoulli(key, 0.5, (9,)), jax.random.bernoulli(key, 0.5, (9,)))
        original = uniform.uniform(key, (9,))
        _equal(original, jax.random.uniform(key, (9,)))
    assert not np.array_equal(np.asarray(original), np.asarray(uniform.uniform(key, (9,))))
