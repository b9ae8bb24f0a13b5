"""Linear models with per-example losses ``(params, x, y) -> scalar`` (one record at a time).

Params are dicts ``{"w": [d] or [d, k], "b": [] or [k]}``.
"""
from __future__ import annotations

import jax.numpy as jnp
import optax


def init_linear(num_features: int, num_outputs: int = 1, dtype=jnp.float32) -> dict:
    """Zero weights: ``w: [d]`` and ``b: []`` for one output, ``[d, k]`` and ``[k]`` for ``k``.

    Example:
      >>> {k: v.shape for k, v in init_linear(5).items()}, {k: v.shape for k, v in init_linear(5, 3).items()}
      ({'w': (5,), 'b': ()}, {'w': (5, 3), 'b': (3,)})
    """
    if num_outputs == 1:
        return {"w": jnp.zeros((num_features,), dtype), "b": jnp.zeros((), dtype)}
    return {"w": jnp.zeros((num_features, num_outputs), dtype), "b": jnp.zeros((num_outputs,), dtype)}


def linear(params, x):
    """``x @ w + b`` for one record ``x: [d]`` (or a batch ``[n, d]``).

    Example:
      >>> import jax.numpy as jnp
      >>> float(linear({"w": jnp.array([1.0, 2.0]), "b": jnp.array(0.5)}, jnp.array([3.0, -1.0])))
      1.5
    """
    return x @ params["w"] + params["b"]


def logistic_loss(params, x, y):
    """Binary cross-entropy of ``sigmoid(<w, x> + b)`` against ``y`` in {0, 1}.

    Example:
      >>> import jax.numpy as jnp
      >>> round(float(logistic_loss(init_linear(2), jnp.array([1.0, 2.0]), jnp.array(1))), 4)   # log 2 at w = 0
      0.6931
    """
    return optax.sigmoid_binary_cross_entropy(linear(params, x), y.astype(jnp.float32))


def softmax_loss(params, x, y):
    """Multiclass cross-entropy; ``y`` is an integer class.

    Example:
      >>> import jax.numpy as jnp
      >>> round(float(softmax_loss(init_linear(2, 4), jnp.array([1.0, 2.0]), jnp.array(3))), 4)  # log 4 at w = 0
      1.3863
    """
    return optax.softmax_cross_entropy_with_integer_labels(linear(params, x), y)


def squared_loss(params, x, y):
    """``(<w, x> + b - y)^2 / 2``.

    Example:
      >>> import jax.numpy as jnp
      >>> float(squared_loss({"w": jnp.array([1.0, 2.0]), "b": jnp.array(0.0)}, jnp.array([1.0, 1.0]), jnp.array(1.0)))
      2.0
    """
    return 0.5 * (linear(params, x) - y) ** 2


def binary_accuracy(params, x, y) -> jnp.ndarray:
    """Fraction of ``x: [n, d]`` whose thresholded logit matches ``y``.

    Example:
      >>> import jax.numpy as jnp
      >>> params = {"w": jnp.array([1.0, 0.0]), "b": jnp.array(0.0)}
      >>> float(binary_accuracy(params, jnp.array([[1.0, 5.0], [-2.0, 1.0], [3.0, 0.0]]), jnp.array([1, 0, 0])))
      0.6666666865348816
    """
    return jnp.mean((linear(params, x) > 0) == (y > 0.5))


def multiclass_accuracy(params, x, y) -> jnp.ndarray:
    """Fraction of ``x: [n, d]`` whose arg-max class matches ``y``.

    Example:
      >>> import jax.numpy as jnp
      >>> params = {"w": jnp.eye(2), "b": jnp.zeros(2)}
      >>> float(multiclass_accuracy(params, jnp.array([[1.0, 0.0], [0.0, 1.0]]), jnp.array([0, 0])))
      0.5
    """
    return jnp.mean(jnp.argmax(linear(params, x), axis=-1) == y)
