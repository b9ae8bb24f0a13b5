"""Ghost-norm clipping equals the explicit ``vmap(grad)`` path: norms, clipped sums, masks, fallbacks.

The oracle is :func:`jaxfl.privacy.clipping.explicit_clipped_grad_sum` (per-example gradients by
``vmap(grad)``, clipped and summed) and :func:`per_example_grads`' norms, never the ghost path itself.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxfl.models import nets, per_example_loss
from jaxfl.models.linear import init_linear, logistic_loss, softmax_loss
from jaxfl.privacy import ghost
from jaxfl.privacy.clipping import _global_norms, clipped_grad_sum, explicit_clipped_grad_sum, per_example_grads
from _helpers import assert_clipped_sums_equal


def _assert_same(loss_fn, params, x, y, mask, clip_norms, rtol=2e-5):
    """Both paths at every clip norm in ``clip_norms`` (one compilation each), and the norms."""
    explicit = jax.jit(lambda p, c: explicit_clipped_grad_sum(loss_fn, p, x, y, mask, c))
    ghostly = jax.jit(lambda p, c: ghost.ghost_clipped_grad_sum(loss_fn, p, x, y, mask, c))
    for clip_norm in np.atleast_1d(clip_norms):
        assert_clipped_sums_equal(explicit(params, clip_norm), ghostly(params, clip_norm), rtol)
    norms = jax.jit(lambda p: ghost.per_example_norms(loss_fn, p, x, y))(params)
    np.testing.assert_allclose(norms, _global_norms(per_example_grads(loss_fn, params, x, y)), rtol=rtol)


def _batch(shape, classes, n=6, seed=0):
    x = jax.random.normal(jax.random.PRNGKey(seed), (n,) + tuple(shape))
    return x, jnp.arange(n) % classes


MASK = jnp.array([1.0, 1.0, 0.0, 1.0, 2.0, 0.0])  # padding (0) and a record counted twice (2)


@pytest.mark.slow
@pytest.mark.parametrize("module, shape, loss, classes", [
    (nets.MnistMLP(), nets.MNIST_INPUT_SHAPE, nets.binary_logistic_loss, 2),
    pytest.param(nets.CifarCNN(), nets.CIFAR_INPUT_SHAPE, nets.softmax_cross_entropy, 10, marks=pytest.mark.slow),
    pytest.param(nets.MnistLeNet5(), nets.LENET5_INPUT_SHAPE, nets.softmax_cross_entropy, 10, marks=pytest.mark.slow),
    pytest.param(nets.FemnistCNN(lax_conv=True), nets.FEMNIST_INPUT_SHAPE, nets.softmax_cross_entropy, 62,
                 marks=pytest.mark.slow),
], ids=["mnist-mlp", "cifar-cnn", "lenet5", "femnist-cnn-lax-conv"])
def test_library_models_every_layer_covered_and_equal(module, shape, loss, classes):
    params = nets.init_params(module, jax.random.PRNGKey(0), shape)
    loss_fn = per_example_loss(module, loss)
    x, y = _batch(shape, classes)
    layers = ghost.covered_layers(loss_fn, params, x[0], y[0])
    assert 2 * len(layers) == len(jax.tree_util.tree_leaves(params))  # kernel + bias of every layer
    _assert_same(loss_fn, params, x, y, MASK, [0.05, np.inf])


class _Probe(nn.Module):
    """One covered layer (``layer``) between a fixed input map and a softmax head."""

    layer: nn.Module
    classes: int = 3

    @nn.compact
    def __call__(self, x):
        h = jnp.tanh(self.layer(x))
        return nn.Dense(self.classes, name="head")(h.reshape(h.shape[:1] + (-1,)))


def _probe_case(layer, shape, seed=0):
    module = _Probe(layer)
    params = module.init(jax.random.PRNGKey(seed), jnp.zeros((1,) + tuple(shape)))
    loss_fn = per_example_loss(module, nets.softmax_cross_entropy)
    x, y = _batch(shape, 3, seed=seed + 1)
    return loss_fn, params, x, y


CONVS = {
    "same-stride2": (nn.Conv(4, (3, 3), strides=2, padding="SAME"), (9, 9, 2)),
    "explicit-padding": (nn.Conv(4, (3, 2), padding=((1, 2), (0, 1))), (7, 6, 3)),
    "int-padding-no-bias": (nn.Conv(5, (2, 2), padding=1, use_bias=False), (5, 5, 2)),
    "kernel-dilation": (nn.Conv(3, (3, 3), kernel_dilation=2, padding="VALID"), (9, 9, 2)),
    "input-dilation": (nn.Conv(3, (2, 2), input_dilation=2, padding=((1, 0), (0, 1))), (5, 5, 2)),
    "conv1d": (nn.Conv(4, (3,), padding="SAME"), (10, 3)),
    "conv3d": (nn.Conv(2, (2, 2, 2), padding="VALID"), (4, 4, 3, 2)),
    "gram-form": (nn.Conv(64, (3, 3), padding="VALID"), (4, 4, 16)),  # P = 4 positions: Gram is cheaper
    # 6 output channels: the direct form on width-tiled rows (4 columns per row over an output 11 wide, cut)
    "width-tiled-same": (nn.Conv(6, (5, 5), padding="SAME"), (9, 11, 2)),
    "dense-sequence-gram": (nn.Dense(48), (3, 40)),  # 3 rows: Gram form
    "dense-sequence-direct": (nn.Dense(2), (12, 3)),  # 12 rows, K O = 6: direct form
}


FAST_GEOMETRIES = ("gram-form", "width-tiled-same")  # the rest in the slow tier (library nets: the direct form)


@pytest.mark.parametrize("name", [name if name in FAST_GEOMETRIES else pytest.param(name, marks=pytest.mark.slow)
                                  for name in sorted(CONVS)])
def test_layer_geometries_equal_explicit(name):
    layer, shape = CONVS[name]
    loss_fn, params, x, y = _probe_case(layer, shape)
    assert len(ghost.covered_layers(loss_fn, params, x[0], y[0])) == 2
    _assert_same(loss_fn, params, x, y, MASK, 0.3)


def test_width_tiled_rows():
    """The tiled-width direct form is taken where conv2d_valid's product would be tiled (and not otherwise)."""
    tiles = {}
    for name in ("width-tiled-same", "gram-form", "kernel-dilation"):
        layer, shape = CONVS[name]
        loss_fn, params, x, y = _probe_case(layer, shape)
        conv_layer = ghost.covered_layers(loss_fn, params, x[0], y[0])[0]
        out = jnp.zeros((2,) + conv_layer.out_shape)
        tiles[name] = ghost._rows(conv_layer, x[:2], out).tile
    assert tiles == {"width-tiled-same": 4, "gram-form": 1, "kernel-dilation": 1}


def test_form_choice_follows_cost():
    a_few_rows, many_rows = (4, 144, 64), (576, 25, 32)   # (P, K, O)
    assert ghost._gram_is_cheaper(*a_few_rows) and not ghost._gram_is_cheaper(*many_rows)


class _Mixed(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm(name="norm")(nn.Dense(8, name="in")(x))   # LayerNorm: explicit path
        h = nn.DenseGeneral((2, 3), name="general")(jnp.tanh(h))  # DenseGeneral: explicit path
        return nn.Dense(3, name="out")(h.reshape(h.shape[:-2] + (-1,)))


class _Tied(nn.Module):
    @nn.compact
    def __call__(self, x):
        shared = nn.Dense(5, name="shared")
        return nn.Dense(3, name="out")(jnp.tanh(shared(jnp.tanh(shared(x)[..., :5] + x))))


@pytest.mark.slow  # ~8 s; the tied and penalised models cover the mixed path in the fast tier
def test_uncovered_layers_take_the_explicit_path():
    module = _Mixed()
    params = module.init(jax.random.PRNGKey(0), jnp.zeros((1, 5)))
    loss_fn = per_example_loss(module, nets.softmax_cross_entropy)
    x, y = _batch((5,), 3)
    covered = ghost.covered_layers(loss_fn, params, x[0], y[0])
    assert len(covered) == 2  # "in" and "out"
    _assert_same(loss_fn, params, x, y, MASK, 0.2)


@pytest.mark.slow
def test_a_layer_called_twice_is_not_covered():
    module = _Tied()
    params = module.init(jax.random.PRNGKey(0), jnp.zeros((1, 5)))
    loss_fn = per_example_loss(module, nets.softmax_cross_entropy)
    x, y = _batch((5,), 3)
    assert len(ghost.covered_layers(loss_fn, params, x[0], y[0])) == 1  # only "out"
    _assert_same(loss_fn, params, x, y, MASK, 0.2)


@pytest.mark.slow
def test_weights_read_outside_their_layer_are_not_covered():
    module = nets.MnistMLP(hidden=6)
    params = nets.init_params(module, jax.random.PRNGKey(0), (4,))
    base = per_example_loss(module, nets.binary_logistic_loss)

    def loss_fn(p, x, y):  # an L2 penalty reads the hidden kernel a second time
        return base(p, x, y) + 0.5 * jnp.sum(p["params"]["hidden"]["kernel"] ** 2)

    x, y = _batch((4,), 2)
    assert len(ghost.covered_layers(loss_fn, params, x[0], y[0])) == 1  # only "out"
    _assert_same(loss_fn, params, x, y, MASK, 0.2)


def test_hand_written_models_are_the_explicit_path_bitwise():
    params = init_linear(7, 3)
    x, y = _batch((7,), 3)
    assert ghost.covered_layers(softmax_loss, params, x[0], y[0]) == []
    got = jax.jit(lambda p: clipped_grad_sum(softmax_loss, p, x, y, MASK, 0.1))(params)
    expected = jax.jit(lambda p: explicit_clipped_grad_sum(softmax_loss, p, x, y, MASK, 0.1))(params)
    jax.tree_util.tree_map(np.testing.assert_array_equal, got.value, expected.value)


def test_unknown_method_is_rejected():
    params = init_linear(3, 1)
    x, y = _batch((3,), 2)
    with pytest.raises(ValueError, match="'ghostly'"):
        clipped_grad_sum(logistic_loss, params, x, y, MASK, 1.0, method="ghostly")


@pytest.mark.slow
def test_gradient_through_the_clipped_sum_matches():
    """Differentiating through the clipped sum (with respect to the data) agrees too."""
    module = nets.WbcdMLP(hidden=4)
    params = nets.init_params(module, jax.random.PRNGKey(0), (6,))
    loss_fn = per_example_loss(module, nets.binary_logistic_loss)
    x, y = _batch((6,), 2)

    def objective(method, xs):
        out = clipped_grad_sum(loss_fn, params, xs, y, MASK, 0.3, method=method)
        return sum(jnp.sum(leaf ** 2) for leaf in jax.tree_util.tree_leaves(out.value))

    np.testing.assert_allclose(jax.grad(lambda xs: objective("auto", xs))(x),
                               jax.grad(lambda xs: objective("explicit", xs))(x), rtol=1e-4, atol=1e-6)


_MLP = nets.MnistMLP(hidden=4)
_MLP_LOSS = per_example_loss(_MLP, nets.binary_logistic_loss)
_MLP_PATHS = [jax.jit(lambda p, x, y, m, c, f=f: f(_MLP_LOSS, p, x, y, m, c))
              for f in (explicit_clipped_grad_sum, ghost.ghost_clipped_grad_sum)]


@settings(max_examples=25, deadline=None)
@given(clip=st.floats(1e-3, 10.0), seed=st.integers(0, 2 ** 16),
       weights=st.lists(st.sampled_from([0.0, 1.0, 3.0]), min_size=5, max_size=5))
def test_mlp_any_mask_clip_and_data(clip, seed, weights):
    params = nets.init_params(_MLP, jax.random.PRNGKey(seed), (3,))
    x, y = _batch((3,), 2, n=5, seed=seed)
    expected, got = (path(params, x, y, jnp.asarray(weights), clip) for path in _MLP_PATHS)
    assert_clipped_sums_equal(expected, got, rtol=1e-4)
