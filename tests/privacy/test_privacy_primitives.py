"""Per-example gradients, clipping, padding masks, keyed Gaussian noise, optax transforms."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.stats
from _helpers import assert_clipped_sums_equal
from hypothesis import given, settings, strategies as st

from jaxfl.models import init_linear, logistic_loss, softmax_loss
from jaxfl.privacy import (clip_by_global_norm, clip_update, clipped_grad_sum, differentially_private_aggregate,
                           gaussian_like, gaussian_noise, noisy_clipped_mean, per_example_grads,
                           selected_clipped_grad_sum, unit_noise_like)


def _problem(n=12, d=4, k=3, seed=0):
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.standard_normal((n, d)), jnp.float32) * 3
    y = jnp.asarray(rng.integers(0, k, n))
    params = {"w": jnp.asarray(rng.standard_normal((d, k)), jnp.float32),
              "b": jnp.asarray(rng.standard_normal(k), jnp.float32)}
    return params, x, y


def test_per_example_grads_equal_batch_size_one_loop():
    params, x, y = _problem()
    batched = per_example_grads(softmax_loss, params, x, y)
    for j in range(x.shape[0]):
        single = jax.grad(
            lambda p: jnp.mean(jax.vmap(softmax_loss, in_axes=(None, 0, 0))(p, x[j:j + 1], y[j:j + 1])))(params)
        for name in params:
            np.testing.assert_allclose(batched[name][j], single[name], rtol=1e-5, atol=1e-6)


@settings(max_examples=25, deadline=None)
@given(clip=st.floats(0.01, 10.0), seed=st.integers(0, 10_000))
def test_clipped_norms_never_exceed_c(clip, seed):
    params, x, y = _problem(seed=seed)
    clipped, norms = clip_by_global_norm(per_example_grads(softmax_loss, params, x, y), clip)
    sq = sum(jnp.sum(jnp.reshape(g, (g.shape[0], -1)) ** 2, axis=1) for g in jax.tree_util.tree_leaves(clipped))
    assert np.all(np.sqrt(np.asarray(sq)) <= clip * (1 + 1e-5))
    # Gradients already inside the ball are untouched.
    raw = per_example_grads(softmax_loss, params, x, y)
    inside = np.asarray(norms) <= clip
    np.testing.assert_allclose(np.asarray(clipped["w"])[inside], np.asarray(raw["w"])[inside], rtol=1e-6)


def test_clipped_sum_masks_padding_and_counts():
    params, x, y = _problem(n=10)
    mask = jnp.asarray([1, 1, 1, 0, 1, 0, 0, 1, 1, 0], jnp.float32)
    out = clipped_grad_sum(softmax_loss, params, x, y, mask, 0.5)
    clipped, norms = clip_by_global_norm(per_example_grads(softmax_loss, params, x, y), 0.5)
    keep = np.asarray(mask) > 0
    np.testing.assert_allclose(out.value["w"], np.asarray(clipped["w"])[keep].sum(0), rtol=1e-5, atol=1e-6)
    assert float(out.count) == keep.sum()
    assert float(out.num_clipped) == np.sum(np.asarray(norms)[keep] > 0.5)
    assert float(out.sensitivity) == 0.5
    # Garbage in padded rows changes nothing.
    x_bad = x.at[3].set(1e6)
    out_bad = clipped_grad_sum(softmax_loss, params, x_bad, y, mask, 0.5)
    np.testing.assert_array_equal(out.value["w"], out_bad.value["w"])


@pytest.mark.parametrize("chunk", [1, 3, 16])
@pytest.mark.parametrize("offset", [0, 4])
def test_selected_clipped_sum_is_the_masked_sum_of_the_selected_rows(chunk, offset):
    """Entry i of ``selected`` picks row ``offset + i``; chunks of 1 and 3 take several passes (the last
    padded), 16 one; the sum, count and number clipped are the masked batch's, and rows not selected may hold
    anything."""
    params, x, y = _problem(n=14)
    selected = jnp.asarray([1, 0, 1, 1, 0, 0, 1, 1, 0, 1], bool)
    rows = offset + np.flatnonzero(np.asarray(selected))
    summed = jax.jit(functools.partial(selected_clipped_grad_sum, softmax_loss, chunk=chunk))
    start = jnp.int32(offset)
    got = summed(params, x, y, selected, 0.5, offset=start)
    expected = clipped_grad_sum(softmax_loss, params, x, y, jnp.zeros(14).at[rows].set(1.0), 0.5)
    assert_clipped_sums_equal(expected, got)
    assert float(got.count) == 6
    others = np.setdiff1d(np.arange(14), rows)
    garbage = summed(params, x.at[others].set(1e6), y, selected, 0.5, offset=start)
    np.testing.assert_array_equal(garbage.value["w"], got.value["w"])
    nothing = summed(params, x, y, jnp.zeros(10, bool), 0.5, offset=start)
    assert float(nothing.count) == 0 and not np.any(np.asarray(nothing.value["w"]))


def test_infinite_clip_is_plain_gradient_sum():
    params = init_linear(4)
    _, x, _ = _problem(d=4)
    y = jnp.asarray(np.arange(x.shape[0]) % 2)
    out = clipped_grad_sum(logistic_loss, params, x, y, jnp.ones(x.shape[0]), jnp.inf)
    full = jax.grad(lambda p: jnp.sum(jax.vmap(logistic_loss, in_axes=(None, 0, 0))(p, x, y)))(params)
    np.testing.assert_allclose(out.value["w"], full["w"], rtol=1e-5)


def test_clip_update_whole_tree():
    tree = {"a": jnp.full((3,), 2.0), "b": jnp.full((4,), 2.0)}  # norm sqrt(7*4)
    clipped, norm = clip_update(tree, 1.0)
    assert np.isclose(float(norm), np.sqrt(28.0))
    assert np.isclose(float(optax.tree.norm(clipped)), 1.0, rtol=1e-6)


def test_gaussian_noise_passes_ks_test():
    std = 2.5
    draws = gaussian_like(jax.random.key(7), {"a": jnp.zeros((20000,)), "b": jnp.zeros((100, 50))}, std)
    for leaf in jax.tree_util.tree_leaves(draws):
        stat = scipy.stats.kstest(np.asarray(leaf).ravel(), scipy.stats.norm(0.0, std).cdf)  # not args=: scipy 1.18
        assert stat.pvalue > 1e-3, stat
    # Leaves get independent streams.
    a, b = np.asarray(draws["a"])[:5000], np.asarray(draws["b"]).ravel()
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.05


def test_noise_is_keyed_and_zero_std_is_exact_zero():
    tree = {"w": jnp.zeros(10)}
    k = jax.random.key(3)
    np.testing.assert_array_equal(gaussian_like(k, tree, 1.0)["w"], gaussian_like(k, tree, 1.0)["w"])
    assert not np.array_equal(gaussian_like(k, tree, 1.0)["w"], gaussian_like(jax.random.key(4), tree, 1.0)["w"])
    np.testing.assert_array_equal(gaussian_like(k, tree, 0.0)["w"], np.zeros(10))


def test_optax_dp_aggregate_matches_manual():
    params, x, y = _problem(n=8)
    grads = per_example_grads(softmax_loss, params, x, y)
    key = jax.random.key(11)
    tx = differentially_private_aggregate(clip_norm=0.7, noise_multiplier=1.3, key=key)
    state = tx.init(params)
    out1, state = tx.update(grads, state)
    out2, state = tx.update(grads, state)
    clipped, _ = clip_by_global_norm(grads, 0.7)
    summed = jax.tree_util.tree_map(lambda g: g.sum(0), clipped)
    # Noise differs between steps (step counter in the key), and equals sum + noise / batch.
    assert not np.allclose(out1["w"], out2["w"])
    from jaxfl.privacy import keys
    noise = gaussian_like(keys.step_key(key, 0, keys.Purpose.NOISE), summed, 0.7 * 1.3)
    np.testing.assert_allclose(out1["w"], (summed["w"] + noise["w"]) / 8, rtol=1e-5, atol=1e-6)
    assert int(state.count) == 2


@pytest.mark.slow
def test_optax_dp_aggregate_and_engine_noisy_gradient_agree():
    """The optax transform and the engine's noisy gradient (one noisy_clipped_mean) give the same result
    on the same records and keys: the transform's step t noise key is the engine's step t noise key."""
    from jaxfl.engine import local
    from jaxfl.privacy import keys
    params, x, y = _problem(n=12)
    key, clip, z = jax.random.key(11), 0.7, 1.3
    batch = local.Batch(x, y, jnp.ones(x.shape[0]), jnp.asarray(x.shape[0], jnp.float32))
    for loss, exact in ((softmax_loss, False), (lambda p, x, y: 0.0 * softmax_loss(p, x, y), True)):
        tx = differentially_private_aggregate(clip_norm=clip, noise_multiplier=z, key=key)
        state = tx.init(params)
        for step in range(2):
            out, state = tx.update(per_example_grads(loss, params, x, y), state)
            engine, _ = local.noisy_batch_gradient(loss, params, batch, keys.step_key(key, step, keys.Purpose.NOISE),
                                                   clip_norm=clip, noise_multiplier=z)
            for name in params:
                if exact:  # zero gradients: only the noise and its scaling, bit for bit
                    np.testing.assert_array_equal(out[name], engine[name])
                else:  # the clipped sums are summed in different orders
                    np.testing.assert_allclose(out[name], engine[name], rtol=1e-5, atol=1e-6)


def test_noisy_clipped_mean_python_zero_draws_nothing():
    tree = {"w": jnp.arange(3.0)}
    assert unit_noise_like(jax.random.key(0), tree, 0) is None
    out = noisy_clipped_mean(tree, None, clip_norm=jnp.inf, noise_multiplier=0, denominator=4)
    np.testing.assert_array_equal(out["w"], np.arange(3.0) * 0.25)
    zero = noisy_clipped_mean(tree, unit_noise_like(jax.random.key(0), tree, 0.0 * jnp.ones([])), clip_norm=jnp.inf,
                              noise_multiplier=jnp.zeros([]), denominator=4)  # traced 0: drawn, scaled to 0
    np.testing.assert_array_equal(zero["w"], np.arange(3.0) * 0.25)


def test_optax_gaussian_noise_chains_with_sgd():
    tx = optax.chain(gaussian_noise(0.0, jax.random.key(0)), optax.sgd(0.1))
    params = {"w": jnp.ones(3)}
    state = tx.init(params)
    updates, _ = tx.update({"w": jnp.ones(3)}, state, params)
    np.testing.assert_allclose(updates["w"], -0.1 * np.ones(3))
