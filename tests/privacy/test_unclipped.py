"""Clipped sums with some parameters left unclipped (``unclipped=``): those get the plain masked sum and stay out of
every per-example norm, so the clipping of the others is exactly what it would be without them.

The oracle is per-example gradients of the whole model by ``vmap(grad)`` (:func:`per_example_grads`), split,
clipped and summed here in NumPy; never the paths under test.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxfl.algorithms.personalized import merge, partition, shared_labels
from jaxfl.engine import local
from jaxfl.models import nets, per_example_loss
from jaxfl.privacy.clipping import ClippedSum, clipped_grad_sum, per_example_grads, selected_clipped_grad_sum
from _helpers import assert_clipped_sums_equal

MASK = np.array([1.0, 1.0, 0.0, 1.0, 2.0, 0.0])  # padding (0) and a record counted twice (2)
CNN = nets.TwoHeadCNN()
CNN_LOSS = per_example_loss(CNN, nets.softmax_cross_entropy)
FC1_PLAIN = {"params": {"conv1": False, "conv2": False, "fc1": True, "fc2": False}}
MLP = nets.WbcdMLP(hidden=4)
MLP_LOSS = per_example_loss(MLP, nets.binary_logistic_loss)
BIASES_PLAIN = {"params": {"hidden": {"bias": True, "kernel": False}, "out": {"bias": True, "kernel": False}}}


def _expected(loss_fn, params, x, y, mask, clip_norm, unclipped) -> ClippedSum:
    """The oracle: per-example gradients of every parameter, norms over the clipped leaves only."""
    grads = per_example_grads(loss_fn, params, x, y)
    marks = jax.tree_util.tree_leaves(jax.tree_util.tree_map(
        lambda mark, sub: jax.tree_util.tree_map(lambda _: mark, sub), unclipped, params))
    leaves, treedef = jax.tree_util.tree_flatten(grads)
    leaves = [np.asarray(g, np.float64) for g in leaves]
    norms = np.sqrt(sum(np.sum(g.reshape(len(g), -1) ** 2, axis=1) for g, plain in zip(leaves, marks) if not plain))
    factor = np.minimum(1.0, clip_norm / np.maximum(norms, 1e-30))
    sums = [np.tensordot(mask * (1.0 if plain else factor), g, axes=1) for g, plain in zip(leaves, marks)]
    return ClippedSum(jax.tree_util.tree_unflatten(treedef, sums), np.float32(clip_norm), np.sum(mask),
                      np.sum(mask * (norms > clip_norm)))


def _cnn_batch(n=6, seed=0):
    x = jax.random.normal(jax.random.PRNGKey(seed), (n,) + nets.IMAGE28_INPUT_SHAPE)
    return x, jnp.arange(n) % 10


@pytest.mark.parametrize("method", ["auto", "explicit"])
@pytest.mark.parametrize("microbatch", [None, 4], ids=["whole", "slices-of-4"])
def test_unclipped_layer_gets_the_plain_sum_and_stays_out_of_the_norms(method, microbatch):
    """Huang et al.'s split: fc1 (a whole dense head) plain, both convolutions and fc2 clipped; at a clip norm that
    clips every example, so a norm that counted fc1 would shrink the clipped part."""
    params = nets.init_params(CNN, jax.random.PRNGKey(1), nets.IMAGE28_INPUT_SHAPE)
    x, y = _cnn_batch()
    clip_norm = 0.05
    got = jax.jit(lambda p: clipped_grad_sum(CNN_LOSS, p, x, y, jnp.asarray(MASK), clip_norm, method=method,
                                             microbatch=microbatch, unclipped=FC1_PLAIN))(params)
    expected = _expected(CNN_LOSS, params, x, y, MASK, clip_norm, FC1_PLAIN)
    assert float(expected.num_clipped) == float(np.sum(MASK))  # every real example clipped
    assert_clipped_sums_equal(expected, got, rtol=2e-5)


@pytest.mark.parametrize("method", ["auto", "explicit"])
@pytest.mark.parametrize("clip_norm", [0.01, 0.3, 100.0])
def test_a_layer_half_unclipped_keeps_its_other_half_clipped(method, clip_norm):
    """Biases plain, kernels clipped: a covered layer with one plain leaf leaves the ghost path for its
    other leaf, whose clipping must not change."""
    params = nets.init_params(MLP, jax.random.PRNGKey(2), (6,))
    x = jax.random.normal(jax.random.PRNGKey(3), (6, 6))
    y = jnp.arange(6) % 2
    got = clipped_grad_sum(MLP_LOSS, params, x, y, jnp.asarray(MASK), clip_norm, method=method, unclipped=BIASES_PLAIN)
    assert_clipped_sums_equal(_expected(MLP_LOSS, params, x, y, MASK, clip_norm, BIASES_PLAIN), got, rtol=2e-5)


def test_selected_chunks_pass_unclipped_through():
    """The Poisson chunk loop: the selected rows, 4 at a time, fc1 plain."""
    params = nets.init_params(CNN, jax.random.PRNGKey(4), nets.IMAGE28_INPUT_SHAPE)
    x, y = _cnn_batch(n=9, seed=5)
    selected = jnp.asarray([True, False, True, True, True, False, True, True, False])
    got = selected_clipped_grad_sum(CNN_LOSS, params, x, y, selected, 0.1, chunk=4, unclipped=FC1_PLAIN)
    rows = np.flatnonzero(np.asarray(selected))
    expected = _expected(CNN_LOSS, params, x[rows], y[rows], np.ones(len(rows)), 0.1, FC1_PLAIN)
    assert_clipped_sums_equal(expected, got, rtol=2e-5)


def test_nothing_unclipped_is_the_plain_call():
    params = nets.init_params(MLP, jax.random.PRNGKey(2), (6,))
    x = jax.random.normal(jax.random.PRNGKey(3), (6, 6))
    y = jnp.arange(6) % 2
    for method in ("auto", "explicit"):
        plain = clipped_grad_sum(MLP_LOSS, params, x, y, MASK, 0.3, method=method)
        marked = clipped_grad_sum(MLP_LOSS, params, x, y, MASK, 0.3, method=method, unclipped={"params": False})
        jax.tree_util.tree_map(np.testing.assert_array_equal, plain, marked)


@pytest.mark.parametrize("bad", [{"params": {"hidden": True}}, {"params": "yes"}, (True, False)])
def test_a_bad_unclipped_tree_is_one_clear_error(bad):
    params = nets.init_params(MLP, jax.random.PRNGKey(2), (6,))
    with pytest.raises(ValueError, match="unclipped must be a pytree prefix of params"):
        clipped_grad_sum(MLP_LOSS, params, jnp.ones((2, 6)), jnp.zeros(2, jnp.int32), jnp.ones(2), 1.0,
                         unclipped=bad)


@pytest.mark.parametrize("sampler", [local.make_sampler(None, 0.6, 4), local.make_sampler(5, None, None)],
                         ids=["poisson-chunks", "fixed-batch"])
def test_noisy_and_plain_gradients_equal_the_two_separate_calls(sampler):
    """What :func:`jaxfl.algorithms.personalized` computes per joint-DP step, from one forward pass: the noisy
    gradient of the shared part at the current private part, and the private part's plain gradient."""
    params = nets.init_params(CNN, jax.random.PRNGKey(6), nets.IMAGE28_INPUT_SHAPE)
    labels = shared_labels(lambda path, leaf: str(getattr(path[1], "key", path[1])) != "fc1", params)
    shared, own = partition(params, labels, True), partition(params, labels, False)
    x, y = _cnn_batch(n=12, seed=7)
    count, key, step, z, clip_norm = jnp.int32(10), jax.random.key(8), 3, 1.3, 0.5
    drawn = local.step_draws(sampler, key, count, x.shape[0], shared, z)(step)
    kw = dict(sampler=sampler, drawn=drawn)
    (g_s, g_p), info = local.noisy_and_plain_gradients(lambda s, p, xj, yj: CNN_LOSS(merge(s, p), xj, yj), shared,
                                                       own, x, y, count, key, step, clip_norm=clip_norm,
                                                       noise_multiplier=z, **kw)
    want_s, want_info = local.noisy_gradient(lambda s, xj, yj: CNN_LOSS(merge(s, own), xj, yj), shared, x, y, count,
                                             key, step, clip_norm=clip_norm, noise_multiplier=z, **kw)
    want_p, _ = local.noisy_gradient(lambda p, xj, yj: CNN_LOSS(merge(shared, p), xj, yj), own, x, y, count, key,
                                     step, sampler=sampler, clip_norm=math.inf, noise_multiplier=0,
                                     drawn=(drawn[0], None))
    for got, want in ((g_s, want_s), (g_p, want_p)):
        scale = max(float(optax.tree.norm(want)), 1e-6)
        jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6 * scale),
                               got, want)
    assert float(info["clipped_fraction"]) == float(want_info["clipped_fraction"]) > 0
