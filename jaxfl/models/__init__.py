"""Small models with per-example losses."""
from jaxfl.models.linear import (binary_accuracy, init_linear, linear, logistic_loss, multiclass_accuracy,
                                 softmax_loss, squared_loss)


def per_example_loss(module, loss):
    """Turns a flax module and ``loss(output, y)`` into a per-example ``(params, x, y) -> scalar``."""

    def fn(params, x, y):
        return loss(module.apply(params, x[None])[0], y)

    return fn


__all__ = ["binary_accuracy", "init_linear", "linear", "logistic_loss", "multiclass_accuracy", "softmax_loss",
           "squared_loss", "per_example_loss"]
