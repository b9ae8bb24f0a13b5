"""Linear models with per-example losses ``(params, x, y) -> scalar`` (one record at a time).

Params are dicts ``{"w": [d] or [d, k], "b": [] or [k]}``.
"""
from __future__ import annotations

import jax.numpy as jnp
import optax


def init_linear(num_features: int, num_outputs: int = 1, dtype=jnp.float32) -> dict:
    """Zero weights: ``w: [d]`` and ``b: []`` for one output, ``[d, k]`` and ``[k]`` for ``k``."""
    if num_outputs == 1:
        return {"w": jnp.zeros((num_features,), dtype), "b": jnp.zeros((), dtype)}
    return {"w": jnp.zeros((num_features, num_outputs), dtype), "b": jnp.zeros((num_outputs,), dtype)}


def linear(params, x):
    """``x @ w + b`` for one record ``x: [d]`` (or a batch ``[n, d]``)."""
    return x @ params["w"] + params["b"]


def logistic_loss(params, x, y):
    """Binary cross-entropy of ``sigmoid(<w, x> + b)`` against ``y`` in {0, 1}."""
    return optax.sigmoid_binary_cross_entropy(linear(params, x), y.astype(jnp.float32))


def softmax_loss(params, x, y):
    """Multiclass cross-entropy; ``y`` is an integer class."""
    return optax.softmax_cross_entropy_with_integer_labels(linear(params, x), y)


def squared_loss(params, x, y):
    """``(<w, x> + b - y)^2 / 2``."""
    return 0.5 * (linear(params, x) - y) ** 2


def binary_accuracy(params, x, y) -> jnp.ndarray:
    """Fraction of ``x: [n, d]`` whose thresholded logit matches ``y``."""
    return jnp.mean((linear(params, x) > 0) == (y > 0.5))


def multiclass_accuracy(params, x, y) -> jnp.ndarray:
    """Fraction of ``x: [n, d]`` whose arg-max class matches ``y``."""
    return jnp.mean(jnp.argmax(linear(params, x), axis=-1) == y)
