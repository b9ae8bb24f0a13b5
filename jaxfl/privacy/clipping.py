"""Per-example gradients, global-norm clipping and padding masks.

``loss_fn(params, x, y) -> scalar`` is always a *per-example* loss: ``x`` and ``y`` are one record.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxfl.models.rewrite import for_backend
from jaxfl.privacy.microbatch import microbatch_size, microbatch_sum

PerExampleLoss = Callable[..., jnp.ndarray]


class ClippedSum(NamedTuple):
    """Sum of clipped per-example gradients over the real records of a batch.

    Attributes:
      value: pytree shaped like ``params``; ``sum_j mask_j * clip(g_j, C)`` (the leaves a sum's ``unclipped``
        marks: ``sum_j mask_j g_j``, and ``g_j``, its norm and the clipping concern the other leaves only).
      sensitivity: L2 sensitivity of ``value`` to adding or removing one record (``C``); replacing
        one record moves it by at most ``2 C``. Only the clipped leaves have it: unclipped ones have none.
      count: number of real (unmasked) records summed, a float scalar.
      num_clipped: how many real records had ``||g_j|| > C``.

    Example:
      >>> import jax.numpy as jnp
      >>> s = clipped_grad_sum(lambda p, x, y: jnp.sum(p * x), jnp.zeros(2), jnp.array([[3.0, 4.0]]),
      ...                      jnp.zeros(1), jnp.ones(1), 2.0)
      >>> s.value, float(s.sensitivity), int(s.num_clipped)
      (Array([1.2, 1.6], dtype=float32), 2.0, 1)
    """

    value: object
    sensitivity: jnp.ndarray
    count: jnp.ndarray
    num_clipped: jnp.ndarray


def per_example_grads(loss_fn: PerExampleLoss, params, x, y):
    """Gradients of ``loss_fn`` at each record: leaves shaped ``[batch, *param_shape]`` (on the CPU backend
    with :func:`jaxfl.models.rewrite.for_backend`'s convolutions and pooling, as every sum of this module).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> x, y = jnp.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]]), jnp.array([1.0, 0.0, 1.0])
      >>> jax.tree_util.tree_map(jnp.shape, per_example_grads(logistic_loss, init_linear(2), x, y))
      {'b': (3,), 'w': (3, 2)}
    """
    return jax.vmap(jax.grad(for_backend(loss_fn)), in_axes=(None, 0, 0))(params, x, y)


def _global_norms(grads):
    leaves = jax.tree_util.tree_leaves(grads)
    return jnp.sqrt(sum(jnp.sum(jnp.reshape(g, (g.shape[0], -1)) ** 2, axis=1) for g in leaves))


def _clip_factor(norms, clip_norm):
    """``min(1, C / ||g||)`` without dividing by zero; ``C = inf`` gives 1."""
    return jnp.where(norms > clip_norm, clip_norm / jnp.where(norms > 0, norms, 1.0), 1.0)


def _expand(weights, g):
    return weights.reshape((-1,) + (1,) * (g.ndim - 1))


def clip_by_global_norm(grads, clip_norm):
    """Scales each example's gradient (leading axis) to global L2 norm at most ``clip_norm``.

    Args:
      grads: pytree with leaves ``[batch, ...]``.
      clip_norm: scalar ``C > 0``; ``inf`` means no clipping. May be traced.
    Returns:
      ``(clipped, norms)`` with ``norms: [batch]`` the pre-clipping global norms.

    Example:
      >>> import jax.numpy as jnp
      >>> clipped, norms = clip_by_global_norm({"w": jnp.array([[3.0, 4.0], [0.3, 0.4]])}, 1.0)
      >>> clipped["w"].tolist(), norms.tolist()          # the first row (norm 5) scaled to norm 1, the second kept
      ([[0.6000000238418579, 0.800000011920929], [0.30000001192092896, 0.4000000059604645]], [5.0, 0.5])
    """
    norms = _global_norms(grads)
    scale = _clip_factor(norms, clip_norm)
    return jax.tree_util.tree_map(lambda g: g * _expand(scale, g), grads), norms


def unclipped_flags(unclipped, params) -> tuple[bool, ...] | None:
    """Per leaf of ``params`` (``tree_leaves`` order), whether ``unclipped`` marks it; None when it marks none.

    ``unclipped``: None, or a pytree prefix of ``params`` with Python ``bool`` leaves (e.g. ``(False, True)`` for
    ``params = (clipped_part, plain_part)``); a ``bool`` leaf stands for every leaf of its subtree.

    Example:
      >>> import jax.numpy as jnp
      >>> unclipped_flags((False, True), (jnp.ones(2), jnp.ones(3))), unclipped_flags(None, (jnp.ones(2),))
      ((False, True), None)
    """
    if unclipped is None:
        return None
    marks = jax.tree_util.tree_leaves(unclipped)
    if not all(isinstance(mark, bool) for mark in marks):
        raise ValueError(f"unclipped must be a pytree prefix of params with bool leaves, got {unclipped!r}")
    try:
        subtrees = jax.tree_util.tree_structure(unclipped).flatten_up_to(params)
    except ValueError as error:
        raise ValueError(f"unclipped must be a pytree prefix of params, got {unclipped!r}: {error}") from None
    flags = tuple(mark for mark, sub in zip(marks, subtrees) for _ in jax.tree_util.tree_leaves(sub))
    return flags if any(flags) else None


def clipped_grad_sum(loss_fn: PerExampleLoss, params, x, y, mask, clip_norm, *, method: str = "auto",
                     microbatch="auto", unclipped=None) -> ClippedSum:
    """Sum of per-example clipped gradients (global L2 norm at most ``clip_norm``) over a masked batch.

    Args:
      loss_fn: per-example loss ``(params, x, y) -> scalar``.
      x, y: a batch, ``[batch, ...]``.
      mask: ``[batch]`` weights, 1 on real records and 0 on padding (or a record's multiplicity).
      clip_norm: ``C``; ``inf`` for non-private training (a Python ``inf`` skips the per-example norms: one
        batched backward pass of the masked loss sum).
      method: ``"auto"`` (default): ghost norms for the flax ``Dense`` / ``Conv`` layers that allow them
        and ``vmap(grad)`` for every other parameter (:mod:`jaxfl.privacy.ghost`); ``"explicit"``:
        ``vmap(grad)`` for all parameters (:func:`explicit_clipped_grad_sum`). Both give the same sum to
        float rounding.
      microbatch: ``"auto"`` (default), ``None`` or an int: the batch taken in slices of that many records
        and their sums added (:mod:`jaxfl.privacy.microbatch`; ``"auto"`` slices on the CPU backend when
        the batch's intermediates overflow the cache: the library's conv models from batches of 21-61 on).
        The same sum to float rounding; the per-example clipping does not depend on the slicing.
      unclipped: None (default), or a pytree prefix of ``params`` with ``bool`` leaves: the parameters it
        marks ``True`` get the plain masked sum ``sum_j mask_j g_j`` (their leaves of ``value``) and are left
        out of every per-example norm, so the clipping, ``sensitivity`` and ``num_clipped`` concern the other
        parameters only. For parameters that are never released (Huang et al.'s owner-private layers, see
        :func:`jaxfl.algorithms.personalized`): both sums from one forward pass instead of two.

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> x, y = jnp.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]]), jnp.array([1.0, 0.0, 1.0])
      >>> out = clipped_grad_sum(logistic_loss, init_linear(2), x, y, jnp.array([1.0, 1.0, 0.0]), clip_norm=0.5)
      >>> float(out.count), float(out.sensitivity), float(out.num_clipped)   # the third record is masked out
      (2.0, 0.5, 2.0)
      >>> round(float(jnp.linalg.norm(out.value["w"])), 4)   # at most count * clip_norm
      0.6116
    """
    if method not in ("auto", "explicit"):
        raise ValueError(f"clipping method must be 'auto' or 'explicit', got {method!r}")
    unclipped_flags(unclipped, params)  # a bad prefix fails here, before any tracing
    size = microbatch_size(loss_fn, params, x, y, microbatch)
    if size >= x.shape[0]:
        return _clipped_grad_sum(loss_fn, params, x, y, mask, clip_norm, method, unclipped)
    total = microbatch_sum(lambda valid, xs, ys, ms: _clipped_grad_sum(loss_fn, params, xs, ys, ms * valid,
                                                                       clip_norm, method, unclipped), size, x, y, mask)
    return total._replace(sensitivity=jnp.asarray(clip_norm, total.sensitivity.dtype))


def selected_clipped_grad_sum(loss_fn: PerExampleLoss, params, x, y, selected, clip_norm, *, chunk: int,
                              offset=0, microbatch="auto", unclipped=None) -> ClippedSum:
    """:func:`clipped_grad_sum` over the records a data-dependent mask selects, ``chunk`` at a time.

    A Poisson draw selects a random number of records; rather than clipping a padded batch of the
    largest possible size, the selected rows are gathered ``chunk`` at a time in a ``fori_loop`` that runs
    ``ceil(selected / chunk)`` times (at least once), the last chunk padded at weight 0.

    Args:
      x, y: the records, ``[N, ...]``.
      selected: ``bool[S]``; entry ``i`` selects row ``offset + i`` (rows past ``N - 1`` are clamped; select
        only real rows).
      chunk: records per chunk (static int >= 1).
      offset: first row ``selected`` refers to (int, may be traced).
      microbatch: each chunk's sum taken in slices (:func:`clipped_grad_sum`).
      unclipped: parameters summed without clipping (:func:`clipped_grad_sum`).
    Returns:
      the :class:`ClippedSum` of the selected records (``count``: how many were selected).

    Example:
      >>> import jax.numpy as jnp
      >>> loss = lambda p, x, y: jnp.sum(p * x)
      >>> x = jnp.array([[3.0, 4.0], [0.3, 0.4], [9.0, 9.0]])
      >>> s = selected_clipped_grad_sum(loss, jnp.zeros(2), x, jnp.zeros(3), jnp.array([True, True, False]), 1.0,
      ...                               chunk=2)
      >>> s.value, float(s.count)
      (Array([0.90000004, 1.2       ], dtype=float32), 2.0)
    """
    total = jnp.sum(selected)
    slots = -(-selected.shape[0] // chunk) * chunk
    order = jnp.nonzero(selected, size=slots, fill_value=0)[0]  # the selected entries first, in order

    def one(i, carry):
        start = i * chunk
        rows = jnp.minimum(offset + jax.lax.dynamic_slice(order, (start,), (chunk,)), x.shape[0] - 1)
        weights = (start + jnp.arange(chunk) < total).astype(jnp.float32)
        part = clipped_grad_sum(loss_fn, params, x[rows], y[rows], weights, clip_norm, microbatch=microbatch,
                                unclipped=unclipped)
        value, n, clipped = carry
        return jax.tree_util.tree_map(jnp.add, value, part.value), n + part.count, clipped + part.num_clipped

    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    value, n, clipped = jax.lax.fori_loop(0, jnp.maximum((total + chunk - 1) // chunk, 1), one,
                                          (zeros, jnp.float32(0.0), jnp.float32(0.0)))
    return ClippedSum(value, jnp.asarray(clip_norm, jnp.float32), n, clipped)


def _clipped_grad_sum(loss_fn: PerExampleLoss, params, x, y, mask, clip_norm, method: str, unclipped) -> ClippedSum:
    """:func:`clipped_grad_sum` of one slice, by ``method``."""
    if isinstance(clip_norm, (int, float)) and math.isinf(clip_norm):
        return _unclipped_sum(loss_fn, params, x, y, mask)
    if method == "explicit":
        return explicit_clipped_grad_sum(loss_fn, params, x, y, mask, clip_norm, unclipped=unclipped)
    from jaxfl.privacy.ghost import ghost_clipped_grad_sum  # ghost builds on this module's helpers

    return ghost_clipped_grad_sum(loss_fn, params, x, y, mask, clip_norm, unclipped=unclipped)


def _unclipped_sum(loss_fn: PerExampleLoss, params, x, y, mask) -> ClippedSum:
    """``clip_norm = inf`` (a Python number): the masked gradient sum as one batched backward pass, without
    the per-example norms nothing needs."""
    mask = jnp.asarray(mask, jnp.float32)
    loss_fn = for_backend(loss_fn)
    total = jax.grad(lambda p: jnp.sum(mask * jax.vmap(loss_fn, in_axes=(None, 0, 0))(p, x, y)))(params)
    return ClippedSum(value=total, sensitivity=jnp.asarray(jnp.inf, jnp.float32), count=jnp.sum(mask),
                      num_clipped=jnp.zeros((), jnp.float32))


def explicit_clipped_grad_sum(loss_fn: PerExampleLoss, params, x, y, mask, clip_norm, *, unclipped=None) -> ClippedSum:
    """``vmap`` of ``grad`` + per-example global-norm clipping + padding mask, summed
    (:func:`clipped_grad_sum` with ``method="explicit"``).

    Args:
      loss_fn: per-example loss ``(params, x, y) -> scalar``.
      x, y: a batch, ``[batch, ...]``.
      mask: ``[batch]`` weights, 1 on real records and 0 on padding (or a record's multiplicity).
      clip_norm: ``C``; ``inf`` for non-private training.
      unclipped: parameters summed without clipping and left out of the norms (:func:`clipped_grad_sum`).

    Example:
      >>> import jax.numpy as jnp
      >>> loss = lambda p, x, y: jnp.sum(p * x)                  # per-example gradient: x
      >>> x = jnp.array([[3.0, 4.0], [0.3, 0.4], [9.0, 9.0]])
      >>> s = explicit_clipped_grad_sum(loss, jnp.zeros(2), x, jnp.zeros(3), jnp.array([1.0, 1.0, 0.0]), 1.0)
      >>> s.value                                                # [0.6, 0.8] + [0.3, 0.4]; row 3 is padding
      Array([0.90000004, 1.2       ], dtype=float32)
      >>> float(s.count), int(s.num_clipped), float(s.sensitivity)
      (2.0, 1, 1.0)
    """
    flags = unclipped_flags(unclipped, params)
    loss_fn = for_backend(loss_fn)
    if flags is not None:
        return _partly_clipped_sum(loss_fn, params, x, y, mask, clip_norm, flags)
    grads = per_example_grads(loss_fn, params, x, y)
    norms = _global_norms(grads)
    mask = mask.astype(norms.dtype)
    # Mask and clipping factor folded into one weight per example, w_j = mask_j min(1, C / ||g_j||).
    weights = jax.lax.stop_gradient(mask * _clip_factor(norms, clip_norm))
    # sum_j w_j g_j is the gradient of sum_j w_j f(params, x_j, y_j) with the w_j held fixed: one batched
    # backward pass. The per-example gradients then feed only their norms, so XLA fuses them into the
    # norm reduction instead of materializing [batch, *params] (twice, in two layouts, under vmap):
    # 4x faster for Lowy & Razaviyayn's logistic MB-SGD grid, 17x for a 784-256-10 MLP, even for a small CNN.
    total = jax.grad(lambda p: jnp.sum(weights * jax.vmap(loss_fn, in_axes=(None, 0, 0))(p, x, y)))(params)
    return ClippedSum(
        value=total,
        sensitivity=jnp.asarray(clip_norm, norms.dtype),
        count=jnp.sum(mask),
        num_clipped=jnp.sum(mask * (norms > clip_norm)),
    )


def _split_leaves(params, flags):
    """``(values of the leaves flagged False, of those flagged True, rebuild)``: ``rebuild(first, second)`` puts
    two such lists back into ``params``' tree."""
    leaves, treedef = jax.tree_util.tree_flatten(params)
    first = [i for i, flag in enumerate(flags) if not flag]
    second = [i for i, flag in enumerate(flags) if flag]

    def rebuild(first_values, second_values):
        merged = list(leaves)
        for i, value in zip(first + second, list(first_values) + list(second_values)):
            merged[i] = value
        return jax.tree_util.tree_unflatten(treedef, merged)

    return [leaves[i] for i in first], [leaves[i] for i in second], rebuild


def _partly_clipped_sum(loss_fn: PerExampleLoss, params, x, y, mask, clip_norm, flags) -> ClippedSum:
    """:func:`explicit_clipped_grad_sum` with the leaves ``flags`` marks summed unclipped: per-example norms of
    the other leaves, and one forward pass whose backward is taken twice (clipping weights / the mask)."""
    clipped, plain, rebuild = _split_leaves(params, flags)
    losses_at = lambda c, p: jax.vmap(lambda xi, yi: loss_fn(rebuild(c, p), xi, yi))(x, y)  # noqa: E731
    mask = jnp.asarray(mask, jnp.float32)
    if clipped:
        grads = jax.vmap(jax.grad(lambda c, xi, yi: loss_fn(rebuild(c, plain), xi, yi)), in_axes=(None, 0, 0))(
            clipped, x, y)
        norms = _global_norms(grads)
    else:
        norms = jnp.zeros(mask.shape, jnp.float32)
    weights = jax.lax.stop_gradient(mask * _clip_factor(norms, clip_norm))
    losses, backward = jax.vjp(losses_at, clipped, plain)
    return ClippedSum(
        value=rebuild(backward(weights.astype(losses.dtype))[0], backward(mask.astype(losses.dtype))[1]),
        sensitivity=jnp.asarray(clip_norm, norms.dtype),
        count=jnp.sum(mask),
        num_clipped=jnp.sum(mask * (norms > clip_norm)),
    )


def clip_update(update, clip_norm):
    """Clips a whole pytree (e.g. a client's model delta) to global L2 norm ``clip_norm``.

    Returns ``(clipped, norm)``; used for client-level (user-level) DP.

    Example:
      >>> import jax.numpy as jnp
      >>> clipped, norm = clip_update({"w": jnp.array([3.0, 4.0])}, 1.0)
      >>> clipped["w"].tolist(), float(norm)
      ([0.6000000238418579, 0.800000011920929], 5.0)
    """
    norm = optax.tree.norm(update)
    scale = _clip_factor(norm, clip_norm)
    return jax.tree_util.tree_map(lambda u: u * scale, update), norm
