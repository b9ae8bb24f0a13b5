"""The fold_in key discipline: addressable draws, no key reused across (round, silo, step, purpose)."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings, strategies as st

from jaxfl.algorithms import minibatch_sgd
from jaxfl.data.federated import from_silos
from jaxfl.engine import run_rounds
from jaxfl.privacy import keys
from jaxfl.privacy.noise import gaussian_like
from jaxfl.engine.participation import poisson
from _helpers import make_silos


def test_no_key_reused_across_round_silo_step_purpose():
    root = jax.random.key(0)
    grid = list(itertools.product(range(6), list(range(8)) + [keys.SERVER], range(5), list(keys.Purpose)))
    r, s, t, p = (jnp.asarray([g[i] for g in grid], jnp.uint32) for i in range(4))
    derived = jax.vmap(lambda r, s, t, p: keys.step_key(keys.silo_key(keys.round_key(root, r), s), t, p))(r, s, t, p)
    data = np.asarray(jax.random.key_data(derived)).reshape(len(grid), -1)
    assert len({row.tobytes() for row in data}) == len(grid)


def test_derive_matches_chain_and_differs_by_each_coordinate():
    root = jax.random.key(5)
    k = keys.derive(root, round=3, silo=2, step=1, purpose=keys.Purpose.NOISE)
    chain = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(root, 3), 2), 1),
                               int(keys.Purpose.NOISE))
    np.testing.assert_array_equal(jax.random.key_data(k), jax.random.key_data(chain))
    for change in [dict(round=4), dict(silo=3), dict(step=2), dict(purpose=keys.Purpose.MINIBATCH)]:
        args = {**dict(round=3, silo=2, step=1, purpose=keys.Purpose.NOISE), **change}
        assert not np.array_equal(jax.random.key_data(keys.derive(root, **args)), jax.random.key_data(k))


def test_round_noise_is_the_addressed_draw():
    """The noise silo i adds in round r is exactly N(0,(zC)^2) from derive(root, r, i, 0, NOISE)."""
    silos = make_silos([20, 30, 25])
    data = from_silos(silos)
    loss = lambda p, x, y: 0.0 * jnp.sum(p["w"]) * jnp.sum(x)  # zero gradient: the message is pure noise
    z, c = 1.7, 0.5
    alg = minibatch_sgd(loss, server_opt=optax.sgd(1.0), batch_size=4, clip_norm=c, noise_multiplier=z)
    params = {"w": jnp.zeros(3)}
    root = jax.random.key(9)
    state, _ = run_rounds(alg, alg.init(params), data, root, 2, 1)  # round index 2
    expected = np.zeros(3)
    for i in range(3):
        k = keys.derive(root, round=2, silo=i, step=0, purpose=keys.Purpose.NOISE)
        expected += np.asarray(gaussian_like(k, params, z * c)["w"]) / 4
    np.testing.assert_allclose(np.asarray(state.params["w"]), -expected / 3, rtol=1e-5, atol=1e-7)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
def test_fold_in_is_jax_random_fold_in(word0, word1, data):
    """The fused hash gives jax.random.fold_in's words for typed and raw keys, eagerly and traced."""
    raw = jnp.asarray([word0, word1], jnp.uint32)
    typed = jax.random.wrap_key_data(raw)
    expected = np.asarray(jax.random.key_data(jax.random.fold_in(typed, np.uint32(data))))
    np.testing.assert_array_equal(jax.random.key_data(keys.fold_in(typed, np.uint32(data))), expected)
    np.testing.assert_array_equal(keys.fold_in(raw, np.uint32(data)), expected)
    traced = jax.jit(lambda k, d: jax.random.key_data(keys.fold_in(k, d)))(typed, jnp.uint32(data))
    np.testing.assert_array_equal(traced, expected)


def test_fold_in_vmapped_and_for_every_data_kind():
    root = jax.random.key(11)
    data = jnp.arange(-40, 3000, dtype=jnp.int32)  # negative int32 wrap modulo 2**32, as in JAX
    ours = jax.jit(jax.vmap(lambda d: jax.random.key_data(keys.fold_in(keys.fold_in(root, d), 3 * d))))(data)
    jaxs = jax.vmap(lambda d: jax.random.key_data(jax.random.fold_in(jax.random.fold_in(root, d), 3 * d)))(data)
    np.testing.assert_array_equal(ours, jaxs)
    batch = jax.random.split(root, 50)
    np.testing.assert_array_equal(jax.vmap(lambda k: jax.random.key_data(keys.fold_in(k, 7)))(batch),
                                  jax.vmap(lambda k: jax.random.key_data(jax.random.fold_in(k, 7)))(batch))
    for d in [0, 2**31 - 1, keys.SERVER, keys.Purpose.CODEC, np.int64(5), jnp.int32(-1), jnp.uint32(2**32 - 1)]:
        np.testing.assert_array_equal(jax.random.key_data(keys.fold_in(root, d)),
                                      jax.random.key_data(jax.random.fold_in(root, d)))
    assert keys.fold_in(root, 1).dtype == root.dtype
    assert keys.fold_in(jax.random.key_data(root), 1).dtype == jnp.uint32


def test_fold_in_other_keys_go_to_jax_random():
    philox = jax.random.key(3, impl="philox4x32")
    np.testing.assert_array_equal(jax.random.key_data(keys.fold_in(philox, 9)),
                                  jax.random.key_data(jax.random.fold_in(philox, 9)))
    with pytest.raises(TypeError):
        keys.fold_in(jax.random.key(0), jnp.arange(2))  # an array of data: JAX's own error


def test_as_key_accepts_seed_raw_and_typed():
    a = keys.as_key(3)
    b = keys.as_key(jax.random.key_data(a))
    np.testing.assert_array_equal(jax.random.key_data(a), jax.random.key_data(keys.as_key(b)))


def test_dp_fedavg_server_noise_is_the_addressed_draw():
    """DP-FedAvg's update is N(0, (zC)^2) from derive(root, r, SERVER, 0, NOISE), divided by q N."""
    from jaxfl.algorithms import dp_fedavg

    data = from_silos(make_silos([20, 30, 25, 10]))
    loss = lambda p, x, y: 0.0 * jnp.sum(p["w"]) * jnp.sum(x)  # zero deltas: the update is pure noise
    z, c, q = 1.3, 0.7, 0.5
    alg = dp_fedavg(loss, client_opt=optax.sgd(0.1), local_steps=2, batch_size=4, participation=poisson(q),
                    expected_clients=q * 4,
                    clip_norm=c,
                    noise_multiplier=z)
    params = {"w": jnp.zeros(3)}
    root = jax.random.key(4)
    state, _ = run_rounds(alg, alg.init(params), data, root, 5, 1)  # round index 5
    k = keys.derive(root, round=5, silo=keys.SERVER, step=0, purpose=keys.Purpose.NOISE)
    expected = np.asarray(gaussian_like(k, params, z * c)["w"]) / (q * 4)
    np.testing.assert_allclose(np.asarray(state.params["w"]), -expected, rtol=1e-5, atol=1e-7)
