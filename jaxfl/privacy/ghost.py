"""Per-example gradient norms without per-example gradients ("ghost" norms) for flax models.

A dense or convolution layer's per-example kernel gradient is ``A_i^T G_i`` where ``A_i: [P, K]`` holds
the layer's input rows for example ``i`` (one row for a dense layer applied to a vector, ``T`` rows for a
sequence, one unfolded patch per output position for a convolution) and ``G_i: [P, O]`` the loss's
gradient with respect to the layer's output at those rows. Its squared norm is either

* direct: ``||A_i^T G_i||_F^2`` (``P K O`` multiply-adds), or
* Gram: ``sum((A_i A_i^T) * (G_i G_i^T))`` (``P^2 (K + O)``), which for ``P = 1`` is
  ``||a_i||^2 ||g_i||^2`` (Goodfellow 2015; Li et al. 2022 for sequences; Bu et al. 2023 for
  convolutions),

whichever is cheaper, and the bias's is ``||sum_p G_i[p]||^2``. A 2-D, stride-1 convolution with few output
channels runs the direct form on the rows of :func:`jaxfl.models.conv.conv2d_valid`'s width-tiled product
(``s`` output columns per row, the per-example ``[K', s O]`` gradients summed back to ``[K, O]``), as its
forward pass does. ``G`` comes from one backward pass with
respect to zero "probes" added to every covered layer's output, so no ``[batch, *params]`` gradient is
ever formed (a convolution's ``[batch, K, O]`` per-example kernel gradients are, when the direct form is
cheaper); the clipped sum of a layer is then one contraction ``sum_i w_i A_i^T G_i`` with ``w_i`` each
example's clipping factor times its mask (:func:`ghost_clipped_grad_sum`).

Which layers are covered is decided per layer, at trace time, by intercepting flax module calls
(:func:`flax.linen.intercept_methods`: the user's model code is unchanged):

* ``flax.linen.Dense`` and ``flax.linen.Conv`` (``SAME``/``VALID``/explicit padding, no feature groups,
  no kernel mask, the default ``dot_general`` / ``promote_dtype``, lax's convolution or
  :func:`jaxfl.models.conv.conv_general_dilated`), exactly those classes (a subclass may change the math);
* called exactly once per example, with parameters that are leaves of ``params`` themselves and that
  nothing outside the call reads (checked on the traced program: with the layer's parameters
  substituted, the original leaves must be unused).

Every other parameter (other layer types, shared or transformed weights, hand-written models) takes the
explicit path: its per-example gradients by ``vmap(grad)``, their norms added to the ghost norms, its
clipped sum from a weighted backward pass of the same forward. With no covered layer at all
:func:`ghost_clipped_grad_sum` is :func:`jaxfl.privacy.clipping.explicit_clipped_grad_sum`.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.linen.linear import canonicalize_padding, promote_dtype

from jaxfl.models import conv as jaxfl_conv
from jaxfl.models.rewrite import for_backend
from jaxfl.privacy.clipping import (ClippedSum, PerExampleLoss, _clip_factor, _global_norms, _split_leaves,
                                    explicit_clipped_grad_sum, per_example_grads, unclipped_flags)


class Layer(NamedTuple):
    """A covered layer: its kind, the indices of its parameter leaves in ``tree_leaves(params)`` and,
    for convolutions, the patch geometry.

    Example: :func:`covered_layers`.
    """

    kind: str                  # "dense" or "conv"
    kernel: int                # leaf index of the kernel
    bias: int | None           # leaf index of the bias, or None
    out_shape: tuple           # per-example output shape (the probe's shape)
    conv: tuple | None = None  # (kernel_size, strides, padding, input_dilation, kernel_dilation)


def _tuple(value, rank):
    if value is None:
        return (1,) * rank
    if isinstance(value, int):
        return (value,) * rank
    return tuple(value)


def _conv_geometry(module: nn.Conv):
    """``(kernel_size, strides, padding, input_dilation, kernel_dilation)`` as lax takes them, or None
    when this convolution is not covered."""
    kernel_size = _tuple(module.kernel_size, 1)
    rank = len(kernel_size)
    padding = canonicalize_padding(module.padding, rank)
    if isinstance(padding, str) and padding not in ("SAME", "VALID"):
        return None  # CIRCULAR / REFLECT / CAUSAL pad the input inside the call
    if (module.feature_group_count != 1 or module.mask is not None or rank > 3
            or module.conv_general_dilated_cls is not None
            or module.conv_general_dilated not in (None, jaxfl_conv.conv_general_dilated)):
        return None
    return (kernel_size, _tuple(module.strides, rank), padding, _tuple(module.input_dilation, rank),
            _tuple(module.kernel_dilation, rank))


def _layer_kind(module) -> str | None:
    if type(module) is nn.Dense:
        plain = (module.dot_general is None and module.dot_general_cls is None
                 and module.promote_dtype is promote_dtype)
        return "dense" if plain else None
    if type(module) is nn.Conv and module.promote_dtype is promote_dtype:
        return "conv" if _conv_geometry(module) is not None else None
    return None


def _param_leaves(module):
    params = module.variables.get("params", {})
    return params.get("kernel"), params.get("bias")


def _inputs(args, kwargs):
    return args[0] if args else kwargs["inputs"]


def _discover(loss_fn, params, x, y) -> list[Layer]:
    """Traces one example and returns the candidate layers (called once, kernel found in ``params``)."""
    found, calls = {}, {}

    def traced(p, xi, yi):
        index = {id(leaf): i for i, leaf in enumerate(jax.tree_util.tree_leaves(p))}

        def interceptor(next_fun, args, kwargs, context):
            out = next_fun(*args, **kwargs)
            if context.method_name != "__call__":
                return out
            kind = _layer_kind(context.module)
            if kind is None:
                return out
            kernel, bias = _param_leaves(context.module)
            k, b = index.get(id(kernel)), index.get(id(bias)) if bias is not None else None
            if k is None or (bias is not None and b is None):
                return out  # weights computed from params (or not in them): the explicit path
            calls[k] = calls.get(k, 0) + 1
            geometry = _conv_geometry(context.module) if kind == "conv" else None
            found[k] = Layer(kind, k, b, tuple(out.shape), geometry)
            return out

        with nn.intercept_methods(interceptor):
            return loss_fn(p, xi, yi)

    jax.eval_shape(traced, params, x, y)
    return [layer for k, layer in found.items() if calls[k] == 1]


def _exclusive(loss_fn, params, x, y, layers: list[Layer]) -> list[Layer]:
    """Keeps the layers whose parameter leaves are read by nothing but their own call.

    Traces the loss with each candidate's call re-applied to substitute parameters; any use of an
    original leaf left in the program is a read from elsewhere (a tied weight, a regulariser, ...)."""
    by_kernel = {layer.kernel: layer for layer in layers}
    leaves, treedef = jax.tree_util.tree_flatten(params)

    def substituted(flat, subs, xi, yi):
        p = jax.tree_util.tree_unflatten(treedef, flat)
        index = {id(leaf): i for i, leaf in enumerate(flat)}
        inside = []

        def interceptor(next_fun, args, kwargs, context):
            if inside or context.method_name != "__call__":
                return next_fun(*args, **kwargs)
            kernel, _ = _param_leaves(context.module)
            k = index.get(id(kernel)) if kernel is not None else None
            if k not in by_kernel:
                return next_fun(*args, **kwargs)
            inside.append(True)
            try:
                return context.module.clone(parent=None).apply({"params": subs[str(k)]}, *args, **kwargs)
            finally:
                inside.pop()

        with nn.intercept_methods(interceptor):
            return loss_fn(p, xi, yi)

    subs = {str(layer.kernel): {"kernel": leaves[layer.kernel],
                                **({"bias": leaves[layer.bias]} if layer.bias is not None else {})}
            for layer in layers}
    jaxpr = jax.make_jaxpr(substituted)(leaves, subs, x, y).jaxpr
    used = {id(v) for eqn in jaxpr.eqns for v in eqn.invars} | {id(v) for v in jaxpr.outvars}
    invars = jaxpr.invars[:len(leaves)]
    return [layer for layer in layers
            if id(invars[layer.kernel]) not in used and (layer.bias is None or id(invars[layer.bias]) not in used)]


def covered_layers(loss_fn: PerExampleLoss, params, x, y) -> list[Layer]:
    """The layers whose per-example norms :func:`ghost_clipped_grad_sum` computes without per-example
    gradients, for the per-example loss at one example ``x``, ``y`` (no batch axis).

    Example (a dense layer is covered: its per-example norms come without per-example gradients):
      >>> import flax.linen as nn, jax, jax.numpy as jnp
      >>> from jaxfl.models import per_example_loss, softmax_cross_entropy
      >>> model = nn.Sequential([nn.Dense(8), nn.relu, nn.Dense(3)])
      >>> params = model.init(jax.random.key(0), jnp.zeros((1, 5)))
      >>> [layer.kind for layer in covered_layers(per_example_loss(model, softmax_cross_entropy), params,
      ...                                         jnp.zeros(5), 0)]
      ['dense', 'dense']
    """
    params, x, y = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)),
                                          (params, x, y))
    candidates = _discover(loss_fn, params, x, y)
    return _exclusive(loss_fn, params, x, y, candidates) if candidates else []


# ------------------------------------------------------------------------------------------------
# Per-layer norms and weighted sums from inputs and output gradients


def _patches(a, geometry):
    """One example's unfolded convolution input ``[positions, prod(kernel_size) * C]``, the feature axis
    ordered like the flattened ``[*kernel_size, C]`` of the kernel (:func:`jaxfl.models.conv.unfold` of the
    padded input; ``lax.conv_general_dilated_patches`` computes the same as a convolution with a
    one-hot kernel, ``K`` times the work, used only for input dilation)."""
    kernel_size, strides, padding, input_dilation, kernel_dilation = geometry
    rank = len(kernel_size)
    if a.ndim == rank + 1:
        a = a[None]
    a = a.reshape((-1,) + a.shape[-rank - 1:])
    if any(d != 1 for d in input_dilation):
        spatial = "DHW"[-rank:]
        numbers = ("N" + spatial + "C", "OI" + spatial, "N" + spatial + "C")
        patches = jax.lax.conv_general_dilated_patches(a, kernel_size, strides, padding, lhs_dilation=input_dilation,
                                                       rhs_dilation=kernel_dilation, dimension_numbers=numbers)
        # conv_general_dilated_patches orders features as (C, *kernel_size).
        patches = patches.reshape(patches.shape[:-1] + (a.shape[-1], -1))
        patches = jnp.swapaxes(patches, -1, -2)
        return patches.reshape(-1, patches.shape[-2] * patches.shape[-1])
    patches = jaxfl_conv.unfold(_padded(a, geometry), kernel_size, strides, kernel_dilation)
    return patches.reshape(-1, patches.shape[-1])


def _padded(a, geometry):
    """``a: [n, *spatial, C]`` padded as the convolution pads it."""
    kernel_size, strides, padding, _, kernel_dilation = geometry
    dilated = [(k - 1) * d + 1 for k, d in zip(kernel_size, kernel_dilation)]
    pads = jax.lax.padtype_to_pads(a.shape[1:-1], dilated, strides, padding) if isinstance(padding, str) else padding
    return jnp.pad(a, [(0, 0)] + [tuple(p) for p in pads] + [(0, 0)])


class _Rows(NamedTuple):
    """A layer's rows over a batch, float32: ``a: [B, P, K]`` inputs and ``g: [B, P, O]`` output gradients.
    For a convolution whose direct form runs width-tiled (``tile > 1``, :func:`jaxfl.models.conv.conv2d_valid`'s
    product), ``a`` holds the tiled patches ``[B, P', K']`` and ``g`` the output gradients with the tiled
    product's extra columns as zeros, ``[B, P' * tile, O]``."""

    a: jnp.ndarray
    g: jnp.ndarray
    tile: int = 1
    kernel_shape: tuple | None = None


def _rows(layer: Layer, a, g) -> _Rows:
    batch, out_channels = g.shape[0], g.shape[-1]
    g = g.astype(jnp.float32)
    if layer.kind == "conv":
        tile = _width_tile(layer, a, g)
        if tile > 1:
            kernel_size = layer.conv[0]
            kernel_shape = tuple(kernel_size) + (a.shape[-1], out_channels)
            patches = jax.vmap(lambda ai: jaxfl_conv.tiled_unfold(
                _padded(ai.reshape((-1,) + ai.shape[-3:]), layer.conv), kernel_size, tile))(a)
            extra = patches.shape[-2] * tile - g.shape[-2]
            g = jnp.pad(g, [(0, 0)] * (g.ndim - 2) + [(0, extra), (0, 0)])
            return _Rows(patches.reshape(batch, -1, patches.shape[-1]).astype(jnp.float32),
                         g.reshape(batch, -1, out_channels), tile, kernel_shape)
        a = jax.vmap(lambda ai: _patches(ai, layer.conv))(a)
    return _Rows(a.reshape(batch, -1, a.shape[-1]).astype(jnp.float32), g.reshape(batch, -1, out_channels))


def _width_tile(layer: Layer, a, g) -> int:
    """The width tile of a 2-D, stride-1, undilated convolution's direct form (1: untiled rows)."""
    kernel_size, strides, _, input_dilation, kernel_dilation = layer.conv
    if len(kernel_size) != 2 or any(v != 1 for v in strides + input_dilation + kernel_dilation):
        return 1
    positions, k, o = g[0, ..., 0].size, math.prod(kernel_size) * a.shape[-1], g.shape[-1]
    if _gram_is_cheaper(positions, k, o):
        return 1
    return jaxfl_conv.width_tile(o, g.shape[-2])


def _gram_is_cheaper(p: int, k: int, o: int) -> bool:
    """The Gram form costs ``P^2 (K + O)`` per example, the direct form ``P K O``."""
    return p * p * (k + o) < p * k * o


def _norms_sq(layer: Layer, rows: _Rows):
    """Per-example squared gradient norms ``[B]`` of ``layer``'s parameters, and what the weighted sum
    needs (the per-example kernel gradients when the direct form is used)."""
    a, g = rows.a, rows.g
    if rows.tile == 1 and _gram_is_cheaper(a.shape[1], a.shape[2], g.shape[2]):
        kernel = jnp.einsum("bpq,bpq->b", a @ jnp.swapaxes(a, 1, 2), g @ jnp.swapaxes(g, 1, 2))
        per_example = None
    else:
        # tiled rows: each row's tile * O output gradients side by side, the [K', tile * O] gradients narrowed
        per_example = jnp.einsum("bpk,bpo->bko", a, g.reshape(g.shape[0], a.shape[1], -1))
        if rows.tile > 1:
            per_example = jaxfl_conv.narrow_kernel_gradient(per_example, rows.kernel_shape, rows.tile)
        kernel = jnp.sum(jnp.square(per_example), axis=(1, 2))
    if layer.bias is not None:
        kernel = kernel + jnp.sum(jnp.square(jnp.sum(g, axis=1)), axis=1)
    return kernel, per_example


def _weighted_sums(layer: Layer, a, g, per_example, weights, leaves):
    """``{leaf index: sum_b weights_b * grad_b}`` for the layer's kernel (and bias), leaf-shaped."""
    if per_example is None:
        kernel = jnp.einsum("bpk,bpo->ko", a, g * weights[:, None, None])
    else:
        kernel = jnp.einsum("b,bko->ko", weights, per_example)
    sums = {layer.kernel: kernel}
    if layer.bias is not None:
        sums[layer.bias] = jnp.einsum("b,bpo->o", weights, g)
    return {i: s.reshape(leaves[i].shape).astype(leaves[i].dtype) for i, s in sums.items()}


# ------------------------------------------------------------------------------------------------
# The clipped sum


def _probed_losses(loss_fn, layers: list[Layer]):
    """``(params, probes, x, y) -> (losses [B], inputs)``: the per-example losses with each covered
    layer's output shifted by its probe ``[B, *out_shape]`` and that layer's inputs ``[B, ...]``."""
    slot = {layer.kernel: j for j, layer in enumerate(layers)}

    def one(params, probes, xi, yi):
        index = {id(leaf): i for i, leaf in enumerate(jax.tree_util.tree_leaves(params))}
        inputs = [None] * len(layers)

        def interceptor(next_fun, args, kwargs, context):
            out = next_fun(*args, **kwargs)
            if context.method_name != "__call__":
                return out
            kernel, _ = _param_leaves(context.module)
            j = slot.get(index.get(id(kernel))) if kernel is not None else None
            if j is None:
                return out
            inputs[j] = _inputs(args, kwargs)
            return out + probes[j].astype(out.dtype)

        with nn.intercept_methods(interceptor):
            loss = loss_fn(params, xi, yi)
        return loss, inputs

    return jax.vmap(for_backend(one), in_axes=(None, 0, 0, 0))  # the layers' inputs are outputs of the rewrite


class _Pass(NamedTuple):
    layers: list            # covered layers
    rows: list              # per layer: _Rows
    per_example: list       # per layer: per-example kernel gradients [B, K, O] (direct form) or None
    norms: jnp.ndarray      # [B] per-example global gradient norms
    backward: object        # the forward pass's vjp: per-example loss weights [B] -> (params, probes) cotangents
    rest: list              # indices of the leaves outside covered layers


def _ghost_pass(loss_fn, params, x, y, layers, flags=None) -> _Pass:
    """The forward pass, the output-gradient backward pass, and the per-example norms (of the leaves that
    ``flags``, :func:`jaxfl.privacy.clipping.unclipped_flags`, does not mark)."""
    leaves = jax.tree_util.tree_leaves(params)
    batch = x.shape[0]
    probes = [jnp.zeros((batch,) + layer.out_shape, jnp.float32) for layer in layers]
    losses, backward, inputs = jax.vjp(lambda p, z: _probed_losses(loss_fn, layers)(p, z, x, y), params, probes,
                                       has_aux=True)
    _, out_grads = backward(jnp.ones_like(losses))
    rows = [_rows(layer, a, g) for layer, a, g in zip(layers, inputs, out_grads)]
    per_layer = [_norms_sq(layer, r) for layer, r in zip(layers, rows)]
    norms_sq = sum(n for n, _ in per_layer)

    covered = {i for layer in layers for i in (layer.kernel, layer.bias) if i is not None}
    rest = [i for i in range(len(leaves)) if i not in covered]
    rest_clipped = [i for i in rest if not (flags and flags[i])]
    if rest_clipped:
        others, values, rebuild = _split_leaves(params, [i in rest_clipped for i in range(len(leaves))])
        grads = jax.vmap(jax.grad(lambda v, xi, yi: for_backend(loss_fn)(rebuild(others, v), xi, yi)),
                         in_axes=(None, 0, 0))(
            values, x, y)
        norms_sq = norms_sq + sum(jnp.sum(jnp.reshape(g, (batch, -1)).astype(jnp.float32) ** 2, axis=1)
                                  for g in grads)
    weighted_backward = lambda w: backward(w.astype(losses.dtype))[0]
    return _Pass(layers, rows, [p for _, p in per_layer], jnp.sqrt(norms_sq), weighted_backward, rest)


def per_example_norms(loss_fn: PerExampleLoss, params, x, y) -> jnp.ndarray:
    """``[B]`` global L2 norms of each example's gradient of ``loss_fn`` over all of ``params``, ghost
    norms for the covered layers (``vmap(grad)`` throughout when none is covered).

    Example (against ``vmap(grad)``):
      >>> import flax.linen as nn, jax, jax.numpy as jnp
      >>> from jaxfl.models import per_example_loss, softmax_cross_entropy
      >>> model = nn.Sequential([nn.Dense(8), nn.relu, nn.Dense(3)])
      >>> loss = per_example_loss(model, softmax_cross_entropy)
      >>> params = model.init(jax.random.key(0), jnp.zeros((1, 5)))
      >>> x, y = jax.random.normal(jax.random.key(1), (4, 5)), jnp.array([0, 1, 2, 0])
      >>> grads = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(params, x, y)
      >>> direct = jnp.sqrt(sum(jnp.sum(g.reshape(4, -1) ** 2, axis=1) for g in jax.tree_util.tree_leaves(grads)))
      >>> bool(jnp.allclose(per_example_norms(loss, params, x, y), direct, rtol=1e-5))
      True
    """
    layers = covered_layers(loss_fn, params, x[0], y[0])
    if not layers:
        return _global_norms(per_example_grads(loss_fn, params, x, y))
    return _ghost_pass(loss_fn, params, x, y, layers).norms


def ghost_clipped_grad_sum(loss_fn: PerExampleLoss, params, x, y, mask, clip_norm, *, unclipped=None) -> ClippedSum:
    """:func:`jaxfl.privacy.clipping.clipped_grad_sum` with ghost norms for the covered layers.

    Same arguments and result: ``sum_j mask_j min(1, C / ||g_j||) g_j`` over the batch, with ``||g_j||``
    the global norm of example ``j``'s gradient of ``loss_fn`` over all of ``params``. One forward pass
    and one backward pass for the covered layers' output gradients (no parameter gradients); each
    covered layer's weighted sum is then one contraction of its inputs with its output gradients. Any
    parameter outside the covered layers adds a ``vmap(grad)`` for its norms and a weighted backward
    pass of the same forward for its sum. With no covered layer this is the explicit path.

    ``unclipped`` (:func:`jaxfl.privacy.clipping.clipped_grad_sum`): the leaves it marks are left out of the
    norms and summed from a backward pass of the same forward weighted by the mask alone (their layers are
    not covered).

    Example (the same clipped sum as :func:`jaxfl.privacy.clipping.clipped_grad_sum`):
      >>> import flax.linen as nn, jax, jax.numpy as jnp
      >>> from jaxfl.models import per_example_loss, softmax_cross_entropy
      >>> from jaxfl.privacy.clipping import clipped_grad_sum
      >>> model = nn.Sequential([nn.Dense(8), nn.relu, nn.Dense(3)])
      >>> loss = per_example_loss(model, softmax_cross_entropy)
      >>> params = model.init(jax.random.key(0), jnp.zeros((1, 5)))
      >>> x, y = 3 * jax.random.normal(jax.random.key(1), (4, 5)), jnp.array([0, 1, 2, 0])
      >>> ghost = ghost_clipped_grad_sum(loss, params, x, y, jnp.ones(4), 0.5)
      >>> plain = clipped_grad_sum(loss, params, x, y, jnp.ones(4), 0.5)
      >>> close = jax.tree.map(lambda a, b: bool(jnp.allclose(a, b, atol=1e-5)), ghost.value, plain.value)
      >>> jax.tree_util.tree_all(close)
      True
    """
    leaves, treedef = jax.tree_util.tree_flatten(params)
    flags = unclipped_flags(unclipped, params) or (False,) * len(leaves)
    layers = [layer for layer in covered_layers(loss_fn, params, x[0], y[0])
              if not any(flags[i] for i in (layer.kernel, layer.bias) if i is not None)]
    if not layers:
        return explicit_clipped_grad_sum(loss_fn, params, x, y, mask, clip_norm, unclipped=unclipped)
    ghost = _ghost_pass(loss_fn, params, x, y, layers, flags)
    mask = mask.astype(ghost.norms.dtype)
    weights = jax.lax.stop_gradient(mask * _clip_factor(ghost.norms, clip_norm))
    summed = [None] * len(leaves)
    for weighted_by, plain in ((weights, False), (mask, True)):
        indices = [i for i in ghost.rest if flags[i] == plain]
        if indices:
            cotangents = jax.tree_util.tree_leaves(ghost.backward(weighted_by))
            for i in indices:
                summed[i] = cotangents[i]
    for layer, rows, per_example in zip(layers, ghost.rows, ghost.per_example):
        for i, s in _weighted_sums(layer, rows.a, rows.g, per_example, weights, leaves).items():
            summed[i] = s
    return ClippedSum(
        value=jax.tree_util.tree_unflatten(treedef, summed),
        sensitivity=jnp.asarray(clip_norm, ghost.norms.dtype),
        count=jnp.sum(mask),
        num_clipped=jnp.sum(mask * (ghost.norms > clip_norm)),
    )
