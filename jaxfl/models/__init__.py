"""Small models with per-example losses."""
from jaxfl.models.linear import (binary_accuracy, init_linear, linear, logistic_loss, multiclass_accuracy,
                                 softmax_loss, squared_loss)


def per_example_loss(module, loss):
    """Turns a flax module and ``loss(output, y)`` into a per-example ``(params, x, y) -> scalar``.

    Example:
      >>> import flax.linen as nn, jax, jax.numpy as jnp
      >>> module = nn.Dense(3)
      >>> loss = per_example_loss(module, softmax_cross_entropy)   # (params, x: [d], y: int) -> scalar
      >>> params = module.init(jax.random.key(0), jnp.zeros(4))
      >>> loss(params, jnp.zeros(4), 2).shape                       # zero input: logits 0, loss log 3
      ()
      >>> round(float(loss(params, jnp.zeros(4), 2)), 4)
      1.0986
    """

    def fn(params, x, y):
        return loss(module.apply(params, x[None])[0], y)

    return fn


# Imported after ``per_example_loss``, which nets uses.
from jaxfl.models.nets import (CIFAR_INPUT_SHAPE, MNIST_INPUT_SHAPE, WBCD_INPUT_SHAPE, CifarCNN,  # noqa: E402
                               MnistMLP, WbcdMLP, binary_error, binary_logistic_loss, cifar_error, cifar_loss,
                               init_params, mnist_error, mnist_loss, multiclass_error, num_params,
                               softmax_cross_entropy, wbcd_error, wbcd_loss)
from jaxfl.models.nets import (FEMNIST_CLASSES, FEMNIST_INPUT_SHAPE, FEMNIST_KAIROUZ_PARAMS,  # noqa: E402
                               FEMNIST_PAPER_PARAMS, FEMNIST_VARIANTS, IMAGE28_INPUT_SHAPE, LENET5_INPUT_SHAPE,
                               LENET5_PARAMS, MNIST_CLASSES, FemnistCNN, MnistLeNet5, ParamBlock, femnist_error,
                               femnist_loss, lenet5_error, lenet5_loss, param_blocks)
from jaxfl.models.nets import (TWO_HEAD_PARAMS, TwoHeadCNN, two_head_error, two_head_loss)  # noqa: E402

__all__ = ["binary_accuracy", "init_linear", "linear", "logistic_loss", "multiclass_accuracy", "softmax_loss",
           "squared_loss", "per_example_loss",
           "MnistMLP", "CifarCNN", "WbcdMLP", "init_params", "num_params", "binary_logistic_loss",
           "softmax_cross_entropy", "binary_error", "multiclass_error", "mnist_loss", "cifar_loss", "wbcd_loss",
           "mnist_error", "cifar_error", "wbcd_error", "MNIST_INPUT_SHAPE", "CIFAR_INPUT_SHAPE",
           "WBCD_INPUT_SHAPE",
           "MnistLeNet5", "FemnistCNN", "ParamBlock", "param_blocks", "lenet5_loss", "lenet5_error", "femnist_loss",
           "femnist_error", "IMAGE28_INPUT_SHAPE", "LENET5_INPUT_SHAPE", "FEMNIST_INPUT_SHAPE", "MNIST_CLASSES",
           "FEMNIST_CLASSES", "FEMNIST_VARIANTS", "LENET5_PARAMS", "FEMNIST_PAPER_PARAMS", "FEMNIST_KAIROUZ_PARAMS",
           "TwoHeadCNN", "TWO_HEAD_PARAMS", "two_head_loss", "two_head_error"]
