"""jaxfl.models.rewrite: convolutions and window pooling as products and slices give lax's values and gradients
(oracle: lax itself, unrewritten), reach flax modules without changing the model, keep ghost norms covering
plain ``nn.Conv`` layers, and leave a function without such operations as it was."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxfl.models.rewrite import rewrite_layers
from jaxfl.privacy import ghost
from jaxfl.privacy.clipping import clipped_grad_sum

RNG = np.random.default_rng(0)


def _values_and_grads(f, *args):
    value = f(*args)
    grads = jax.grad(lambda *a: jnp.sum(jnp.sin(f(*a))), argnums=tuple(range(len(args))))(*args)
    return value, grads


def _max_error(f, *args):
    a, ga = _values_and_grads(f, *args)
    b, gb = _values_and_grads(rewrite_layers(f), *args)
    return max([float(jnp.max(jnp.abs(a - b)))] + [float(jnp.max(jnp.abs(u - v))) for u, v in zip(ga, gb)])


@pytest.mark.parametrize("strides, padding, dilation, layout", [
    ((1, 1), "VALID", (1, 1), "NHWC"), ((1, 1), "SAME", (1, 1), "NCHW"), ((2, 2), ((3, 1), (0, 2)), (1, 1), "NHWC"),
    ((2, 1), "SAME", (2, 1), "NHWC"), ((2, 2), "VALID", (2, 1), "NCHW"), ((1, 1), ((3, 1), (0, 2)), (2, 1), "NHWC")])
def test_convolution_equals_lax(strides, padding, dilation, layout):
    x = jnp.asarray(RNG.normal(size=(2, 11, 10, 3)), jnp.float32)
    w = jnp.asarray(RNG.normal(size=(3, 4, 3, 5)), jnp.float32)
    numbers = ("NHWC", "HWIO", "NHWC")
    if layout == "NCHW":
        x, w, numbers = x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), ("NCHW", "OIHW", "NCHW")
    conv = lambda x, w: jax.lax.conv_general_dilated(x, w, strides, padding, rhs_dilation=dilation,  # noqa: E731
                                                      dimension_numbers=numbers)
    assert _max_error(conv, x, w) < 1e-4


def test_one_and_three_dimensional_convolutions_equal_lax():
    for shape, kernel in (((2, 12, 3), (3, 3, 4)), ((1, 6, 5, 7, 2), (2, 3, 2, 2, 3))):
        x = jnp.asarray(RNG.normal(size=shape), jnp.float32)
        w = jnp.asarray(RNG.normal(size=kernel), jnp.float32)
        rank = len(kernel) - 2
        numbers = jax.lax.conv_dimension_numbers(x.shape, w.shape, ("N" + "DHW"[3 - rank:] + "C",
                                                                    "DHW"[3 - rank:] + "IO",
                                                                    "N" + "DHW"[3 - rank:] + "C"))
        conv = lambda x, w: jax.lax.conv_general_dilated(x, w, (2,) * rank, "SAME",  # noqa: E731
                                                          dimension_numbers=numbers)
        assert _max_error(conv, x, w) < 1e-4


@pytest.mark.parametrize("pool", [nn.max_pool, nn.avg_pool])
@pytest.mark.parametrize("window, strides, padding", [((2, 2), (2, 2), "VALID"), ((2, 2), (1, 1), "VALID"),
                                                      ((3, 3), (2, 2), "SAME")])
def test_pooling_equals_flax(pool, window, strides, padding):
    x = jnp.asarray(RNG.normal(size=(2, 9, 9, 3)), jnp.float32)
    assert _max_error(lambda x, s: pool(x * s, window, strides, padding), x, jnp.float32(1.3)) < 1e-5


class TutorialCNN(nn.Module):
    """The DP-SGD tutorials' MNIST CNN (TF-Privacy, Opacus) in plain flax layers."""

    @nn.compact
    def __call__(self, x):
        x = nn.max_pool(nn.relu(nn.Conv(16, (8, 8), strides=2, padding=3)(x)), (2, 2), strides=(1, 1))
        x = nn.max_pool(nn.relu(nn.Conv(32, (4, 4), strides=2, padding="VALID")(x)), (2, 2), strides=(1, 1))
        return nn.Dense(10)(nn.relu(nn.Dense(32)(x.reshape(x.shape[:-3] + (-1,)))))


def _tutorial():
    model = TutorialCNN()
    x = jnp.asarray(RNG.normal(size=(6, 28, 28, 1)), jnp.float32)
    y = jnp.asarray(RNG.integers(0, 10, 6))
    params = model.init(jax.random.key(0), x[:1])["params"]
    loss = lambda p, xi, yi: optax.softmax_cross_entropy_with_integer_labels(  # noqa: E731
        model.apply({"params": p}, xi), yi)
    return loss, params, x, y


@pytest.mark.slow
def test_a_flax_model_keeps_its_ghost_norm_layers_and_its_clipped_sum():
    loss, params, x, y = _tutorial()
    assert len(ghost.covered_layers(loss, params, x[0], y[0])) == 4  # both nn.Conv and both nn.Dense
    mask = jnp.asarray([1, 1, 0, 1, 1, 1], jnp.float32)
    # the oracle: per-example gradients of the unrewritten loss, clipped and summed by hand
    grads = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(params, x, y)
    norms = jnp.sqrt(sum(jnp.sum(g.reshape(6, -1) ** 2, axis=1) for g in jax.tree_util.tree_leaves(grads)))
    factor = mask * jnp.minimum(1.0, 0.5 / norms)
    expected = jax.tree_util.tree_map(lambda g: jnp.tensordot(factor, g, axes=1), grads)
    for method in ("auto", "explicit"):
        got = clipped_grad_sum(loss, params, x, y, mask, 0.5, method=method, microbatch=None).value
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(expected)):
            np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6)


def test_the_rewrite_reaches_convolutions_inside_jitted_functions():
    x = jnp.asarray(RNG.normal(size=(1, 8, 8, 2)), jnp.float32)
    w = jnp.asarray(RNG.normal(size=(3, 3, 2, 4)), jnp.float32)
    inner = jax.jit(lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), "VALID",
                                                              dimension_numbers=("NHWC", "HWIO", "NHWC")))
    primitives = {e.primitive.name for e in jax.make_jaxpr(rewrite_layers(inner))(x, w).jaxpr.eqns}
    assert "conv_general_dilated" not in primitives
    assert _max_error(inner, x, w) < 1e-4


def test_a_function_without_convolutions_is_unchanged_bitwise():
    x = jnp.asarray(RNG.normal(size=(7, 5)), jnp.float32)
    f = lambda w, x: jnp.tanh(x @ w).sum() + jax.nn.relu(w).sum()  # noqa: E731
    w = jnp.asarray(RNG.normal(size=(5, 3)), jnp.float32)
    a = jax.jit(jax.grad(f))(w, x)
    b = jax.jit(jax.grad(rewrite_layers(f)))(w, x)
    np.testing.assert_array_equal(a, b)
