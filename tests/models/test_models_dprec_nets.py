"""Triastcyn et al.'s (DP-REC) CNNs in ``jaxfl.models.nets``: exact parameter and tensor counts, the block
list, output shapes, finite per-example losses and gradients, deterministic initialisation."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfl.models import (FEMNIST_INPUT_SHAPE, FEMNIST_KAIROUZ_PARAMS, FEMNIST_PAPER_PARAMS, LENET5_INPUT_SHAPE,
                          LENET5_PARAMS, FemnistCNN, MnistLeNet5, femnist_error, femnist_loss, init_params,
                          lenet5_error, lenet5_loss, num_params, param_blocks, per_example_loss,
                          softmax_cross_entropy)

CASES = {  # module, parameter count, classes
    "lenet5": (MnistLeNet5(), LENET5_PARAMS, 10),
    "femnist": (FemnistCNN(), FEMNIST_PAPER_PARAMS, 62),
    "kairouz": (FemnistCNN("kairouz"), FEMNIST_KAIROUZ_PARAMS, 62),
    "femnist10": (FemnistCNN(num_classes=10), FEMNIST_PAPER_PARAMS - 52 * 129, 10),
}
SHAPE = LENET5_INPUT_SHAPE
ORDER = ["params/conv1/bias", "params/conv1/kernel", "params/conv2/bias", "params/conv2/kernel",
         "params/fc1/bias", "params/fc1/kernel", "params/fc2/bias", "params/fc2/kernel"]
# Shapes only (no compilation): enough for every count. A CNN's jitted init compiles for seconds on a CPU,
# so the numeric tests use parameters drawn with numpy in the same tree, and one real init (FemnistCNN).
SHAPES = {name: jax.eval_shape(lambda k, m=c[0]: init_params(m, k, SHAPE), jax.random.PRNGKey(0))
          for name, c in CASES.items()}


def _numpy_params(name, seed=0):
    rng = np.random.default_rng(seed)
    return jax.tree_util.tree_map(lambda s: jnp.asarray(rng.uniform(-0.05, 0.05, s.shape), jnp.float32),
                                  SHAPES[name])


@pytest.fixture(scope="module")
def params():
    return {name: _numpy_params(name) for name in ("lenet5", "femnist")}


def test_constants():
    assert LENET5_PARAMS == 582_026 and FEMNIST_PAPER_PARAMS == 231_742 and FEMNIST_KAIROUZ_PARAMS == 1_018_174
    assert FEMNIST_INPUT_SHAPE == SHAPE == (28, 28, 1)


@pytest.mark.parametrize("name", CASES)
def test_parameter_and_tensor_counts(name):
    p = SHAPES[name]
    blocks = param_blocks(p)
    assert num_params(p) == CASES[name][1]
    assert len(blocks) == 8                                  # b_total = 7 * 8 = 56 in DP-REC
    assert [b.path for b in blocks] == ORDER
    assert sum(b.size for b in blocks) == num_params(p)
    leaves = jax.tree_util.tree_leaves(p)                    # block m is leaf m
    assert [b.shape for b in blocks] == [leaf.shape for leaf in leaves]
    assert [b.size for b in blocks] == [leaf.size for leaf in leaves]


def test_layer_breakdowns():
    sizes = lambda name: [b.size for b in param_blocks(SHAPES[name])]
    assert sizes("lenet5") == [32, 800, 64, 51_200, 512, 524_288, 10, 5_120]
    # the digest's breakdown: conv1 w 288 + b 32, conv2 w 18,432 + b 64, fc1 1600x128 + b 128, fc2 7,936 + b 62
    assert sizes("femnist") == [32, 288, 64, 18_432, 128, 204_800, 62, 7_936]
    assert sizes("kairouz") == [32, 288, 64, 18_432, 128, 7744 * 128, 62, 7_936]
    path, size = param_blocks(SHAPES["femnist"])[5][::2]      # NamedTuple (path, shape, size)
    assert (path, size) == ("params/fc1/kernel", 204_800)


def test_lenet5_outputs_losses_errors(params):
    module, p = CASES["lenet5"][0], params["lenet5"]
    x = jax.random.uniform(jax.random.PRNGKey(1), (3,) + SHAPE)
    y = jnp.array([0, 5, 9])
    fn = jax.jit(lambda p, x, y: (module.apply(p, x), jax.vmap(lenet5_loss, in_axes=(None, 0, 0))(p, x, y),
                                  lenet5_error(p, x, y)))
    out, losses, err = fn(p, x, y)
    assert out.shape == (3, 10) and out.dtype == jnp.float32
    expected = jax.nn.logsumexp(out, axis=-1) - out[jnp.arange(3), y]
    np.testing.assert_allclose(losses, expected, rtol=1e-5, atol=1e-5)
    assert np.all(np.isfinite(losses))
    np.testing.assert_allclose(err, np.mean(np.argmax(out, axis=-1) != y))


def test_femnist_per_example_gradients(params):
    p = params["femnist"]
    x = jax.random.uniform(jax.random.PRNGKey(2), (2,) + SHAPE)
    y = jnp.array([1, 61])
    losses, grads = jax.jit(jax.vmap(jax.value_and_grad(femnist_loss), in_axes=(None, 0, 0)))(p, x, y)
    assert losses.shape == (2,) and np.all(np.isfinite(losses))
    for leaf, b in zip(jax.tree_util.tree_leaves(grads), param_blocks(p)):
        assert leaf.shape == (2,) + b.shape and np.all(np.isfinite(leaf))
    assert 0.0 <= float(femnist_error(p, x, y)) <= 1.0


@pytest.mark.parametrize("name", CASES)
def test_output_shapes(name):
    module, _, k = CASES[name]
    out = jax.eval_shape(module.apply, SHAPES[name], jax.ShapeDtypeStruct((3,) + SHAPE, jnp.float32))
    assert out.shape == (3, k) and out.dtype == jnp.float32
    single = jax.eval_shape(module.apply, SHAPES[name], jax.ShapeDtypeStruct(SHAPE, jnp.float32))
    assert single.shape == (k,)
    loss = per_example_loss(module, softmax_cross_entropy)
    val = jax.eval_shape(loss, SHAPES[name], jax.ShapeDtypeStruct(SHAPE, jnp.float32), 0)
    assert val.shape == ()


def test_init_deterministic_per_seed():
    init = jax.jit(lambda k: FemnistCNN().lazy_init(k, jax.ShapeDtypeStruct((1,) + SHAPE, jnp.float32)))
    a, again, other = init(jax.random.PRNGKey(0)), init(jax.random.PRNGKey(0)), init(jax.random.PRNGKey(1))
    eq = lambda u, v: jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda s, t: bool(jnp.array_equal(s, t)), u, v))
    assert all(eq(a, again)) and not any(eq(a, other))
    assert num_params(a) == FEMNIST_PAPER_PARAMS
    # PyTorch default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)); fan_in of fc1 is 1600
    w = np.asarray(a["params"]["fc1"]["kernel"])
    assert 0.9 / 40 < np.abs(w).max() <= 1 / 40 and abs(w.mean()) < 1e-3


def test_unknown_variant_raises():
    with pytest.raises(ValueError, match="variant"):
        jax.eval_shape(lambda k: init_params(FemnistCNN("dropout"), k, SHAPE), jax.random.PRNGKey(0))
