"""jaxfl.models.conv: the loop-friendly convolution has lax's values and lax's gradients."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxfl.models import conv, nets

NHWC = ("NHWC", "HWIO", "NHWC")


def _lax(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=NHWC)


@pytest.mark.parametrize("x_shape, w_shape", [((3, 9, 7, 1), (5, 5, 1, 4)),
                                              pytest.param((2, 6, 6, 3), (3, 3, 3, 5), marks=pytest.mark.slow),
                                              ((1, 5, 8, 2), (2, 4, 2, 3)),
                                              pytest.param((2, 7, 7, 9), (3, 3, 9, 4), marks=pytest.mark.slow),
                                              ((2, 3, 3, 4), (1, 1, 4, 2)),
                                              ((2, 6, 7, 3), (3, 3, 3, 24)),
                                              ((2, 5, 12, 2), (3, 3, 2, 5))],
                         ids=["c1", "c3", "c2-rect", "c9", "1x1", "wide", "tiled-cut"])
def test_values_and_gradients_equal_lax(x_shape, w_shape):
    """Narrow kernels take the width-tiled product (every case but "wide"); "tiled-cut" tiles 4 columns over
    an output 10 wide, so the product runs past the output and is cut."""
    kx, kw, kc = jax.random.split(jax.random.PRNGKey(0), 3)
    x, w = jax.random.normal(kx, x_shape), jax.random.normal(kw, w_shape)
    cot = jax.random.normal(kc, _lax(x, w).shape)  # a generic cotangent, not a symmetric one like sum(y)
    np.testing.assert_allclose(conv.conv2d_valid(x, w), _lax(x, w), rtol=1e-5, atol=1e-5)
    ours = jax.grad(lambda x, w: jnp.sum(conv.conv2d_valid(x, w) * cot), argnums=(0, 1))(x, w)
    ref = jax.grad(lambda x, w: jnp.sum(_lax(x, w) * cot), argnums=(0, 1))(x, w)
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    tangents = (jnp.ones_like(x), jnp.ones_like(w))  # forward mode works too (no custom_vjp)
    np.testing.assert_allclose(jax.jvp(conv.conv2d_valid, (x, w), tangents)[1], jax.jvp(_lax, (x, w), tangents)[1],
                               rtol=1e-5, atol=1e-4)


def test_width_tile():
    assert [conv.width_tile(o, 28) for o in (6, 5, 12, 13, 24, 64)] == [4, 4, 2, 1, 1, 1]
    assert conv.width_tile(6, 3) == 3 and conv.width_tile(2, 100) == 12


def test_gradients_inside_scan_and_vmap_equal_lax():
    """The contexts local training uses: a scan over steps, vmapped over silos with their own kernels."""
    x = jax.random.normal(jax.random.PRNGKey(1), (4, 2, 8, 8, 2))
    w0 = jax.random.normal(jax.random.PRNGKey(2), (4, 3, 3, 2, 3)) * 0.1

    def train(f):
        def one(x, w):
            step = lambda w, _: (w - 0.01 * jax.grad(lambda w: jnp.sum(jnp.tanh(f(x, w))))(w), None)
            return jax.lax.scan(step, w, None, length=3)[0]
        return jax.jit(jax.vmap(one))(x, w0)

    np.testing.assert_allclose(train(conv.conv2d_valid), train(_lax), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs", [dict(window_strides=(2, 2), padding="VALID"),
                                    dict(window_strides=(1, 1), padding="SAME"),
                                    dict(window_strides=(1, 1), padding="VALID", rhs_dilation=(2, 1))])
def test_uncovered_convolutions_fall_back_to_lax(kwargs):
    x = jax.random.normal(jax.random.PRNGKey(3), (2, 9, 9, 2))
    w = jax.random.normal(jax.random.PRNGKey(4), (3, 3, 2, 4))
    ours = conv.conv_general_dilated(x, w, dimension_numbers=NHWC, **kwargs)
    np.testing.assert_array_equal(ours, lax.conv_general_dilated(x, w, dimension_numbers=NHWC, **kwargs))


@pytest.mark.slow
@pytest.mark.parametrize("make, shape", [(nets.MnistLeNet5, (28, 28, 1)),
                                         pytest.param(nets.FemnistCNN, (28, 28, 1), marks=pytest.mark.slow),
                                         pytest.param(nets.CifarCNN, (32, 32, 3), marks=pytest.mark.slow)])
def test_model_gradients_equal_flax_default_convolution(make, shape):
    """The conv models route their convolutions through conv2d_valid; gradients are flax nn.Conv's (lax)."""
    model, reference = make(), make(lax_conv=True)
    params = nets.init_params(model, jax.random.PRNGKey(0), shape)
    x = jax.random.normal(jax.random.PRNGKey(5), (6,) + shape)
    y = jnp.arange(6) % 10
    loss = lambda m: lambda p: jnp.mean(nets.softmax_cross_entropy(m.apply(p, x), y))
    ours, ref = jax.grad(loss(model))(params), jax.grad(loss(reference))(params)
    for a, b in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("shape", [(1, 13, 11, 4), pytest.param((2, 8, 6, 3), marks=pytest.mark.slow),
                                   pytest.param((5, 5, 2), marks=pytest.mark.slow)])
def test_max_pool_2x2_equals_flax_max_pool(shape):
    import flax.linen as nn

    x = jax.random.normal(jax.random.PRNGKey(3), shape)  # continuous values: no ties
    flax_pool = lambda x: nn.max_pool(x, (2, 2), strides=(2, 2))
    np.testing.assert_array_equal(conv.max_pool_2x2(x), flax_pool(x))
    cot = jax.random.normal(jax.random.PRNGKey(4), flax_pool(x).shape)
    np.testing.assert_array_equal(jax.grad(lambda x: jnp.sum(conv.max_pool_2x2(x) * cot))(x),
                                  jax.grad(lambda x: jnp.sum(flax_pool(x) * cot))(x))
