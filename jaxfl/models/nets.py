"""Lowy et al.'s three non-convex models (flax.linen) and their per-example losses.

* :class:`MnistMLP` — ``Dense(64) -> ReLU -> Dense(1)`` on PCA-50 MNIST features, one logit for
  the even (1) / odd (0) task. The authors' ``Nets.py`` had ``Linear(50, 64) -> Dropout(0.5) ->
  ReLU -> Linear(64, 2)`` with a 2-class cross-entropy; we drop the dropout (per-example losses
  must be deterministic functions of the parameters for clipping and the privacy analysis) and
  use the equivalent single-logit parametrisation (the 2-logit softmax depends only on the logit
  difference), so the model has ``50*64 + 64 + 64 + 1 = 3329`` parameters.
* :class:`CifarCNN` — the PyTorch CIFAR-10 tutorial's LeNet (62,006 parameters).
* :class:`WbcdMLP` — ``Dense(5) -> ReLU -> Dense(1)`` on the 30 standardised WBCD features
  (``30*5 + 5 + 5 + 1 = 161`` parameters), one logit for malignant (1) / benign (0).

Per-example losses have the library's signature ``(params, x, y) -> scalar`` for ONE record
(``x`` without a batch axis) and work under ``jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))``.
Error functions take a batch: ``(params, x: [n, ...], y: [n]) -> misclassification rate``.

Initialisation: by default the layers use PyTorch's default initialisation (weights and biases
``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``), since the authors' models are PyTorch modules;
``torch_init=False`` gives flax's defaults (LeCun-normal weights, zero biases).

The model-bound losses and error rates (``mnist_loss`` / ``mnist_error``, ``cifar_*``, ``wbcd_*``, ``lenet5_*``,
``femnist_*``, ``two_head_*``) pair each default model with its loss; its ``*_INPUT_SHAPE`` is one record's shape.

Example:
  >>> import jax, jax.numpy as jnp
  >>> params = init_params(MnistLeNet5(), jax.random.key(0), LENET5_INPUT_SHAPE)
  >>> num_params(params) == LENET5_PARAMS
  True
  >>> x, y = jnp.zeros((3,) + LENET5_INPUT_SHAPE), jnp.array([0, 1, 2])     # 3 records of [28, 28, 1]
  >>> grads = jax.vmap(jax.grad(lenet5_loss), in_axes=(None, 0, 0))(params, x, y)   # per-example gradients
  >>> grads["params"]["fc2"]["kernel"].shape                                        # [records, 512, 10]
  (3, 512, 10)
  >>> 0.0 <= float(lenet5_error(params, x, y)) <= 1.0
  True
  >>> p = init_params(MnistMLP(), jax.random.key(1), MNIST_INPUT_SHAPE)              # PCA-50 features, even/odd
  >>> float(mnist_loss(p, jnp.zeros(MNIST_INPUT_SHAPE), 1)) > 0
  True
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import flax.linen as nn
import optax

from jaxfl.models import conv, per_example_loss

MNIST_INPUT_SHAPE = (50,)
CIFAR_INPUT_SHAPE = (32, 32, 3)
WBCD_INPUT_SHAPE = (30,)
CIFAR_CLASSES = 10


# ------------------------------------------------------------------------------------------------
# Initialisers and layers


def _torch_uniform(fan_in: int):
    """``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``: PyTorch's default for Linear/Conv weights and biases
    (``kaiming_uniform_(a=sqrt(5))`` reduces to this bound for the weights)."""
    bound = 1.0 / math.sqrt(fan_in)

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


def _dense(features: int, fan_in: int, torch_init: bool, name: str | None = None) -> nn.Dense:
    if not torch_init:
        return nn.Dense(features, name=name)
    init = _torch_uniform(fan_in)
    return nn.Dense(features, kernel_init=init, bias_init=init, name=name)


def _conv(features: int, kernel: tuple[int, int], fan_in: int, torch_init: bool,
          name: str | None = None, lax_conv: bool = False) -> nn.Conv:
    # conv.conv_general_dilated: lax's values, a kernel gradient that stays fast inside lax.scan on CPU.
    impl = None if lax_conv else conv.conv_general_dilated
    if not torch_init:
        return nn.Conv(features, kernel, padding="VALID", name=name, conv_general_dilated=impl)
    init = _torch_uniform(fan_in)
    return nn.Conv(features, kernel, padding="VALID", kernel_init=init, bias_init=init, name=name,
                   conv_general_dilated=impl)


# ------------------------------------------------------------------------------------------------
# Models


class MnistMLP(nn.Module):
    """``Dense(hidden) -> ReLU -> Dense(1)``: ``x: [..., 50]`` -> one logit ``[...]`` (even = 1).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> model = MnistMLP()
      >>> variables = init_params(model, jax.random.key(0), (50,))
      >>> model.apply(variables, jnp.zeros((8, 50))).shape   # one logit per record
      (8,)
    """

    hidden: int = 64
    torch_init: bool = True

    @nn.compact
    def __call__(self, x):
        h = nn.relu(_dense(self.hidden, x.shape[-1], self.torch_init, "hidden")(x))
        return _dense(1, self.hidden, self.torch_init, "out")(h)[..., 0]


class WbcdMLP(MnistMLP):
    """``MnistMLP`` with 5 hidden units: ``x: [..., 30]`` -> one logit ``[...]`` (malignant = 1).

    Example:
      >>> import jax.numpy as jnp
      >>> params = init_params(WbcdMLP(), jax.random.key(0), (30,))
      >>> num_params(params), WbcdMLP().apply(params, jnp.zeros((4, 30))).shape
      (161, (4,))
    """

    hidden: int = 5


class CifarCNN(nn.Module):
    """The PyTorch CIFAR-10 tutorial's LeNet: ``x: [n, 32, 32, 3]`` (NHWC) -> logits ``[n, 10]``.

    ``Conv(6, 5x5, VALID) -> ReLU -> MaxPool 2x2 -> Conv(16, 5x5, VALID) -> ReLU -> MaxPool 2x2 ->
    flatten (5*5*16 = 400) -> Dense 120 -> ReLU -> Dense 84 -> ReLU -> Dense 10``; 62,006 parameters
    (456 + 2416 + 48120 + 10164 + 850). The flatten is in HWC order (PyTorch flattens CHW), which
    permutes the first dense layer's rows and changes nothing else. A single image ``[32, 32, 3]``
    gives ``[10]``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> model = CifarCNN()
      >>> variables = init_params(model, jax.random.key(0), (32, 32, 3))
      >>> model.apply(variables, jnp.zeros((2, 32, 32, 3))).shape
      (2, 10)
    """

    num_classes: int = CIFAR_CLASSES
    torch_init: bool = True
    lax_conv: bool = False  # True: flax's default lax convolution (benchmarks, tests)

    @nn.compact
    def __call__(self, x):
        t = self.torch_init
        x = nn.relu(_conv(6, (5, 5), 5 * 5 * x.shape[-1], t, "conv1", self.lax_conv)(x))
        x = conv.max_pool_2x2(x)
        x = nn.relu(_conv(16, (5, 5), 5 * 5 * 6, t, "conv2", self.lax_conv)(x))
        x = conv.max_pool_2x2(x)
        x = x.reshape(x.shape[:-3] + (-1,))
        x = nn.relu(_dense(120, x.shape[-1], t, "fc1")(x))
        x = nn.relu(_dense(84, 120, t, "fc2")(x))
        return _dense(self.num_classes, 84, t, "fc3")(x)


# ------------------------------------------------------------------------------------------------
# Parameters


def init_params(module: nn.Module, key: jax.Array, input_shape: Sequence[int]):
    """``module.init`` on a zero batch of one record of shape ``input_shape`` (no batch axis), e.g.
    ``init_params(CifarCNN(), key, (32, 32, 3))``. Returns the flax variables ``{"params": ...}``.

    Example:
      >>> import jax
      >>> variables = init_params(CifarCNN(), jax.random.key(0), (32, 32, 3))
      >>> num_params(variables["params"])
      62006
    """
    return module.init(key, jnp.zeros((1,) + tuple(input_shape), jnp.float32))


def num_params(params) -> int:
    """Total number of scalars in a parameter pytree.

    Example:
      >>> from jaxfl.models import init_linear
      >>> num_params(init_linear(5, 3))
      18
    """
    return int(sum(math.prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(params)))


# ------------------------------------------------------------------------------------------------
# Losses on model outputs and error rates


def binary_logistic_loss(logit, y):
    """Numerically stable binary cross-entropy of ``sigmoid(logit)`` against ``y`` in {0, 1}:
    ``softplus(logit) - y * logit``. ``logit``, ``y``: scalars (or equal shapes).

    Example:
      >>> import jax.numpy as jnp
      >>> round(float(binary_logistic_loss(jnp.array(0.0), 1)), 4)      # log 2
      0.6931
    """
    return optax.sigmoid_binary_cross_entropy(logit, jnp.asarray(y).astype(jnp.result_type(logit)))


def softmax_cross_entropy(logits, y):
    """``logsumexp(logits) - logits[y]`` for ``logits: [k]`` and an integer class ``y``.

    Example:
      >>> import jax.numpy as jnp
      >>> round(float(softmax_cross_entropy(jnp.zeros(10), 3)), 4)   # log 10
      2.3026
    """
    return optax.softmax_cross_entropy_with_integer_labels(logits, y)


def binary_error(module: nn.Module) -> Callable:
    """``(params, x: [n, ...], y: [n]) -> mean((logit > 0) != (y > 0.5))`` for a one-logit model.

    Example:
      >>> import jax.numpy as jnp
      >>> error = binary_error(mnist_mlp)
      >>> params = init_params(mnist_mlp, jax.random.key(0), (784,))
      >>> float(error(params, jnp.zeros((4, 784)), jnp.array([0.0, 1.0, 1.0, 0.0])))  # one logit for all: half wrong
      0.5
    """

    def fn(params, x, y):
        return jnp.mean((module.apply(params, x) > 0) != (y > 0.5))

    return fn


def multiclass_error(module: nn.Module) -> Callable:
    """``(params, x: [n, ...], y: [n]) -> mean(argmax(logits) != y)`` for a k-logit model.

    Example:
      >>> import jax.numpy as jnp
      >>> error = multiclass_error(cifar_cnn)
      >>> params = init_params(cifar_cnn, jax.random.key(0), (32, 32, 3))
      >>> 0.0 <= float(error(params, jnp.zeros((2, 32, 32, 3)), jnp.array([0, 1]))) <= 1.0
      True
    """

    def fn(params, x, y):
        return jnp.mean(jnp.argmax(module.apply(params, x), axis=-1) != y)

    return fn


# The experiments' models (PyTorch initialisation) with their per-example losses and error rates.
mnist_mlp = MnistMLP()
cifar_cnn = CifarCNN()
wbcd_mlp = WbcdMLP()

mnist_loss = per_example_loss(mnist_mlp, binary_logistic_loss)
"""``(params, x: [50], y: {0, 1}) -> scalar`` logistic loss of :class:`MnistMLP`."""
cifar_loss = per_example_loss(cifar_cnn, softmax_cross_entropy)
"""``(params, x: [32, 32, 3], y: int) -> scalar`` cross-entropy of :class:`CifarCNN`."""
wbcd_loss = per_example_loss(wbcd_mlp, binary_logistic_loss)
"""``(params, x: [30], y: {0, 1}) -> scalar`` logistic loss of :class:`WbcdMLP`."""

mnist_error = binary_error(mnist_mlp)
cifar_error = multiclass_error(cifar_cnn)
wbcd_error = binary_error(wbcd_mlp)


# ------------------------------------------------------------------------------------------------
# Triastcyn et al. (DP-REC): the MNIST and FEMNIST CNNs and the per-tensor block list
#
# DP-REC encodes one block per parameter tensor (7 bits each), and its privacy accounting uses
# ``b_total = 7 * number of tensors``; :func:`param_blocks` lists the tensors in a fixed order.
# The parameter counts are derived in the paper digest (§5.3) from the paper's communication numbers.

IMAGE28_INPUT_SHAPE = (28, 28, 1)
"""NHWC shape of one 28x28 grey image (MNIST, FEMNIST, Fashion-MNIST) without the batch axis."""
LENET5_INPUT_SHAPE = FEMNIST_INPUT_SHAPE = IMAGE28_INPUT_SHAPE
MNIST_CLASSES = 10
FEMNIST_CLASSES = 62
LENET5_PARAMS = 582_026
class ClassicLeNet5(nn.Module):
    """The classic LeNet-5 for van Dijk et al.'s non-convex runs (the paper names "LeNet-5" and gives no
    architecture; digest §9.2): ``x: [n, 28, 28, 1]`` -> ``[n, 10]``. ``Conv(6, 5x5, pad 2) -> act -> pool 2x2
    -> Conv(16, 5x5) -> act -> pool 2x2 -> flatten (5*5*16 = 400) -> Dense 120 -> act -> Dense 84 -> act ->
    Dense 10``, 61,706 parameters. ``activation``: ``"relu"`` or ``"tanh"``; ``pool``: ``"max"`` or
    ``"avg"``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> params = init_params(ClassicLeNet5(), jax.random.key(0), (28, 28, 1))
      >>> num_params(params), ClassicLeNet5().apply(params, jnp.zeros((2, 28, 28, 1))).shape
      (61706, (2, 10))
    """

    num_classes: int = MNIST_CLASSES
    activation: str = "relu"
    pool: str = "max"
    torch_init: bool = True

    @nn.compact
    def __call__(self, x):
        t = self.torch_init
        act = {"relu": nn.relu, "tanh": jnp.tanh}[self.activation]
        pool = conv.max_pool_2x2 if self.pool == "max" else conv.avg_pool_2x2
        pad = ((0, 0),) * (x.ndim - 3) + ((2, 2), (2, 2), (0, 0))
        x = pool(act(_conv(6, (5, 5), 5 * 5 * x.shape[-1], t, "conv1")(jnp.pad(x, pad))))
        x = pool(act(_conv(16, (5, 5), 5 * 5 * 6, t, "conv2")(x)))
        x = x.reshape(x.shape[:-3] + (-1,))
        x = act(_dense(120, x.shape[-1], t, "fc1")(x))
        x = act(_dense(84, 120, t, "fc2")(x))
        return _dense(self.num_classes, 84, t, "fc3")(x)


CLASSIC_LENET5_PARAMS = 61_706
classic_lenet5 = ClassicLeNet5()
classic_lenet5_loss = per_example_loss(classic_lenet5, softmax_cross_entropy)
"""``(params, x: [28, 28, 1], y: int) -> scalar`` cross-entropy of the default :class:`ClassicLeNet5`."""


FEMNIST_PAPER_PARAMS = 231_742
FEMNIST_KAIROUZ_PARAMS = 1_018_174
FEMNIST_VARIANTS = ("paper", "kairouz")


class MnistLeNet5(nn.Module):
    """DP-REC's MNIST "LeNet-5" (582,026 parameters, 8 tensors): ``x: [n, 28, 28, 1]`` -> ``[n, 10]``.

    ``Conv(32, 5x5, VALID) -> ReLU -> MaxPool 2x2 -> Conv(64, 5x5, VALID) -> ReLU -> MaxPool 2x2 ->
    flatten (4*4*64 = 1024) -> Dense 512 -> ReLU -> Dense 10``; per layer 832 + 51,264 + 524,800 +
    5,130. The paper gives no parameter count; this network is the one its DP-FedAvg communication
    (43 GB) implies (digest §5.3). A classic LeNet-5 (~44-62k parameters) would not fit it. The
    flatten is in HWC order (PyTorch flattens CHW), which only permutes ``fc1``'s rows. A single
    image ``[28, 28, 1]`` gives ``[10]``.

    Example:
      >>> import jax.numpy as jnp
      >>> params = init_params(MnistLeNet5(), jax.random.key(0), (28, 28, 1))
      >>> num_params(params), MnistLeNet5().apply(params, jnp.zeros((2, 28, 28, 1))).shape
      (582026, (2, 10))
    """

    num_classes: int = MNIST_CLASSES
    torch_init: bool = True
    lax_conv: bool = False  # True: flax's default lax convolution (benchmarks, tests)

    @nn.compact
    def __call__(self, x):
        t = self.torch_init
        x = nn.relu(_conv(32, (5, 5), 5 * 5 * x.shape[-1], t, "conv1", self.lax_conv)(x))
        x = conv.max_pool_2x2(x)
        x = nn.relu(_conv(64, (5, 5), 5 * 5 * 32, t, "conv2", self.lax_conv)(x))
        x = conv.max_pool_2x2(x)
        x = x.reshape(x.shape[:-3] + (-1,))
        x = nn.relu(_dense(512, x.shape[-1], t, "fc1")(x))
        return _dense(self.num_classes, 512, t, "fc2")(x)


class FemnistCNN(nn.Module):
    """DP-REC's FEMNIST CNN, the Kairouz et al. (2021) network without dropout: ``x: [n, 28, 28, 1]``
    -> logits ``[n, num_classes]``. 8 tensors in both variants.

    * ``variant="paper"`` (default): ``Conv(32, 3x3, VALID) -> ReLU -> MaxPool 2x2 -> Conv(64, 3x3,
      VALID) -> ReLU -> MaxPool 2x2 -> flatten (5*5*64 = 1600) -> Dense 128 -> ReLU -> Dense 62``:
      231,742 parameters (320 + 18,496 + 204,928 + 7,998), the count the paper's communication
      numbers imply (digest §5.3).
    * ``variant="kairouz"``: the same without the second MaxPool (flatten 11*11*64 = 7744), the
      google-research ``create_1m_cnn_model`` the paper's text names: 1,018,174 parameters.

    ``num_classes`` (default 62) changes only the last layer, e.g. 10 for the Fashion-MNIST stand-in.
    Flatten in HWC order, as :class:`MnistLeNet5`.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> params = init_params(FemnistCNN(), jax.random.key(0), (28, 28, 1))
      >>> num_params(params), len(param_blocks(params)), FemnistCNN().apply(params, jnp.zeros((2, 28, 28, 1))).shape
      (231742, 8, (2, 62))
    """

    variant: str = "paper"
    num_classes: int = FEMNIST_CLASSES
    torch_init: bool = True
    lax_conv: bool = False  # True: flax's default lax convolution (benchmarks, tests)

    @nn.compact
    def __call__(self, x):
        if self.variant not in FEMNIST_VARIANTS:
            raise ValueError(f"unknown FemnistCNN variant {self.variant!r} (use 'paper' or 'kairouz')")
        t = self.torch_init
        x = nn.relu(_conv(32, (3, 3), 3 * 3 * x.shape[-1], t, "conv1", self.lax_conv)(x))
        x = conv.max_pool_2x2(x)
        x = nn.relu(_conv(64, (3, 3), 3 * 3 * 32, t, "conv2", self.lax_conv)(x))
        if self.variant == "paper":
            x = conv.max_pool_2x2(x)
        x = x.reshape(x.shape[:-3] + (-1,))
        x = nn.relu(_dense(128, x.shape[-1], t, "fc1")(x))
        return _dense(self.num_classes, 128, t, "fc2")(x)


class ParamBlock(NamedTuple):
    """One parameter tensor: its ``/``-joined path in the pytree (``"params/conv1/kernel"``), its
    shape and its number of scalars.

    Example:
      >>> import jax.numpy as jnp
      >>> param_blocks({"w": jnp.zeros((3, 2))})
      [ParamBlock(path='w', shape=(3, 2), size=6)]
    """

    path: str
    shape: tuple[int, ...]
    size: int


def _key_name(k) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def param_blocks(params) -> list[ParamBlock]:
    """The tensors of a parameter pytree in ``jax.tree_util`` flatten order (the order of
    ``tree_leaves(params)``, so block ``m`` is leaf ``m``), with their paths, shapes and sizes.

    For the flax models here: ``conv1/bias, conv1/kernel, conv2/bias, ..., fc2/kernel``.
    ``len(param_blocks(params))`` is DP-REC's number of per-tensor blocks (8 for :class:`MnistLeNet5`
    and :class:`FemnistCNN`), so ``b_total = 7 * len(...)``.

    Example:
      >>> params = init_params(lenet5, jax.random.key(0), (28, 28, 1))
      >>> [(b.path, b.size) for b in param_blocks(params)][:2]
      [('params/conv1/bias', 32), ('params/conv1/kernel', 800)]
      >>> len(param_blocks(params)), sum(b.size for b in param_blocks(params))
      (8, 582026)
    """
    leaves, _ = jax.tree_util.tree_flatten_with_path(params)
    return [ParamBlock("/".join(_key_name(k) for k in path), tuple(int(d) for d in leaf.shape),
                       int(math.prod(leaf.shape))) for path, leaf in leaves]


lenet5 = MnistLeNet5()
femnist_cnn = FemnistCNN()

lenet5_loss = per_example_loss(lenet5, softmax_cross_entropy)
"""``(params, x: [28, 28, 1], y: int) -> scalar`` cross-entropy of :class:`MnistLeNet5`."""
femnist_loss = per_example_loss(femnist_cnn, softmax_cross_entropy)
"""``(params, x: [28, 28, 1], y: int) -> scalar`` cross-entropy of ``FemnistCNN("paper", 62)``; for
another variant or class count use ``per_example_loss(FemnistCNN(...), softmax_cross_entropy)``."""
lenet5_error = multiclass_error(lenet5)
femnist_error = multiclass_error(femnist_cnn)


# ------------------------------------------------------------------------------------------------
# Huang et al. (joint DP): a two-conv CNN with two parallel heads whose logits are averaged


class _Head(nn.Module):
    """``Dense(hidden[0]) -> ReLU -> ... -> Dense(num_classes)`` (just the last layer for ``hidden=()``)."""

    hidden: tuple = ()
    num_classes: int = MNIST_CLASSES
    torch_init: bool = True

    @nn.compact
    def __call__(self, x):
        for i, width in enumerate(self.hidden):
            x = nn.relu(_dense(width, x.shape[-1], self.torch_init, f"dense{i}")(x))
        return _dense(self.num_classes, x.shape[-1], self.torch_init, f"dense{len(self.hidden)}")(x)


class TwoHeadCNN(nn.Module):
    """Huang et al.'s MNIST / Fashion-MNIST network: ``x: [n, 28, 28, 1]`` -> logits ``[n, 10]``.

    ``Conv(16, 5x5, pad 2) -> ReLU -> MaxPool 2x2 -> Conv(32, 5x5, pad 2) -> ReLU -> MaxPool 2x2 ->
    flatten (7*7*32 = 1568)``, then two parallel heads ``fc1`` and ``fc2`` whose logits are averaged
    ("two parallel FC layers; the final output is obtained by averaging", §4.1). ``conv1`` has 416 and
    ``conv2`` 12,832 parameters, Table 2's counts. The paper gives FC1 17,248 parameters, which no
    ``Linear(d -> 10)`` has (``(d + 1) * 10 = 17,248`` has no integer solution; digest §5.2): the default
    head is ``Linear(1568 -> 10)``, 15,690 parameters, and ``head_hidden`` adds hidden layers to both
    heads for anyone matching another count. Activations, pooling and padding are not stated in the paper
    (ReLU, 2x2 max-pool and padding 2 are the choice that makes 1568 = 17,248 / 11 the flatten size).
    Parameter paths: ``conv1``, ``conv2``, ``fc1/dense0``, ``fc2/dense0`` (a partition names ``fc1`` to make
    the first head private). Flatten in HWC order.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> params = init_params(TwoHeadCNN(), jax.random.key(0), (28, 28, 1))
      >>> sorted(params["params"]), TwoHeadCNN().apply(params, jnp.zeros((2, 28, 28, 1))).shape
      (['conv1', 'conv2', 'fc1', 'fc2'], (2, 10))
    """

    num_classes: int = MNIST_CLASSES
    head_hidden: tuple = ()
    padding: int = 2
    torch_init: bool = True
    lax_conv: bool = False  # True: flax's default lax convolution (benchmarks, tests)

    @nn.compact
    def __call__(self, x):
        t, p = self.torch_init, self.padding
        pad = ((0, 0),) * (x.ndim - 3) + ((p, p), (p, p), (0, 0))
        x = nn.relu(_conv(16, (5, 5), 5 * 5 * x.shape[-1], t, "conv1", self.lax_conv)(jnp.pad(x, pad)))
        x = conv.max_pool_2x2(x)
        x = nn.relu(_conv(32, (5, 5), 5 * 5 * 16, t, "conv2", self.lax_conv)(jnp.pad(x, pad)))
        x = conv.max_pool_2x2(x)
        x = x.reshape(x.shape[:-3] + (-1,))
        heads = [_Head(tuple(self.head_hidden), self.num_classes, t, name=name)(x) for name in ("fc1", "fc2")]
        return 0.5 * (heads[0] + heads[1])


TWO_HEAD_PARAMS = {"conv1": 416, "conv2": 12_832, "fc1": 15_690, "fc2": 15_690}
"""Per-layer parameter counts of the default :class:`TwoHeadCNN` (the paper's Table 2 has 416, 12,832 and
17,248 for FC1; see the class docstring)."""
two_head_cnn = TwoHeadCNN()
two_head_loss = per_example_loss(two_head_cnn, softmax_cross_entropy)
"""``(params, x: [28, 28, 1], y: int) -> scalar`` cross-entropy of the default :class:`TwoHeadCNN`."""
two_head_error = multiclass_error(two_head_cnn)
