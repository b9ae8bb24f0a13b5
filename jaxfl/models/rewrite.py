"""Any model's convolutions and window pooling as matrix products and slices, for fast gradients on XLA:CPU.

XLA:CPU differentiates ``lax.conv_general_dilated`` and ``lax.reduce_window`` slowly where DP training needs
them: inside loop bodies (local steps under ``lax.scan``, gathered Poisson chunks) the kernel-gradient
convolution takes a slow path (jax-ml/jax#12868; :mod:`jaxfl.models.conv`), and a max pool's gradient is a
select-and-scatter. :func:`rewrite_layers` wraps a function (a loss, a model's ``apply``) so that, when it runs,
it is traced once into a jaxpr and evaluated with

* every ``conv_general_dilated`` without feature or batch groups, input dilation, negative padding, a
  precision or a preferred element type as an im2col product (:func:`jaxfl.models.conv.conv2d_valid`
  for stride-1 undilated 2-D convolutions, width-tiled when narrow; one ``unfold`` and one product otherwise),
  its padding applied to the input first;
* every ``reduce_window_max`` / ``reduce_window_sum`` without base dilation (``flax.linen.max_pool``,
  ``avg_pool``, ``sum_pool``) as the maximum / sum of the window's strided slices, whose gradient is elementwise;

and every other operation bound as it was traced (``jit`` calls whose bodies hold one of those are inlined so
that the rewrite reaches them; other calls, loops and custom derivatives are kept whole, unrewritten inside).
The values are the same up to float rounding (the sums run in another order); where a max-pool window holds
several equal maxima its gradient is split among them rather than given to the first (after a ReLU that happens
at 0, where the ReLU passes no gradient anyway). A function without such operations is evaluated unchanged.

The model's code is untouched: flax modules are called while tracing, once, so :mod:`flax.linen`
interceptors (jaxfl's ghost norms) see every call as they would without the rewrite. jaxfl applies it to the
per-example loss of every clipped or plain gradient sum on the CPU backend
(:func:`jaxfl.privacy.clipping.clipped_grad_sum`); other backends have fast convolutions and are left alone.
"""
from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend import core

from jaxfl.models import conv as jaxfl_conv

_CONV = "conv_general_dilated"
_WINDOWS = {"reduce_window_max": (jnp.maximum, -jnp.inf), "reduce_window_sum": (jnp.add, 0)}
_CALLS = ("jit", "pjit", "closed_call", "core_call")


def rewrite_layers(fn):
    """``fn`` with its convolutions and window pooling evaluated as products and slices (module docstring).

    Args:
      fn: any function of arrays (pytrees), e.g. a per-example loss ``(params, x, y) -> scalar``.
    Returns:
      a function with ``fn``'s signature and values (to float rounding).

    Example:
      >>> import flax.linen as nn, jax, jax.numpy as jnp
      >>> layer = nn.Conv(4, (3, 3), strides=2, padding="SAME")
      >>> x = jnp.ones((1, 8, 8, 2))
      >>> params = layer.init(jax.random.key(0), x)
      >>> fast = rewrite_layers(layer.apply)
      >>> bool(jnp.allclose(fast(params, x), layer.apply(params, x), atol=1e-5))
      True
    """

    @functools.wraps(fn)
    def rewritten(*args, **kwargs):
        # Traced with the arguments closed over, so that what the function sees are the caller's own objects
        # (flax interceptors match parameters by identity); they come back as the jaxpr's constants.
        closed, shape = jax.make_jaxpr(lambda: fn(*args, **kwargs), return_shape=True)()
        if not _rewritable(closed.jaxpr):
            return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shape),
                                                core.jaxpr_as_fun(closed)())
        outs = _evaluate(closed.jaxpr, closed.consts)
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shape), outs)

    return rewritten


def for_backend(fn):
    """:func:`rewrite_layers` of ``fn`` on the CPU backend (where it pays), ``fn`` itself on other backends.

    Example (the same function, with flax's convolutions evaluated as products on CPU):
      >>> import flax.linen as nn, jax, jax.numpy as jnp
      >>> model = nn.Conv(4, (3, 3), padding="VALID")
      >>> params = model.init(jax.random.key(0), jnp.zeros((1, 6, 6, 2)))
      >>> fast = for_backend(model.apply)
      >>> x = jax.random.normal(jax.random.key(1), (2, 6, 6, 2))
      >>> bool(jnp.allclose(fast(params, x), model.apply(params, x), atol=1e-5))
      True
    """
    return rewrite_layers(fn) if jax.default_backend() == "cpu" else fn


def _covered_conv(params) -> bool:
    return (params["feature_group_count"] == 1 and params["batch_group_count"] == 1
            and all(d == 1 for d in params["lhs_dilation"]) and all(lo >= 0 and hi >= 0 for lo, hi in params["padding"])
            and params["precision"] is None and params["preferred_element_type"] is None)


def _covered_window(params) -> bool:
    return all(d == 1 for d in params["base_dilation"])


def _sub_jaxpr(eqn):
    sub = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
    return sub if eqn.primitive.name in _CALLS and sub is not None else None


def _rewritable(jaxpr) -> bool:
    """Whether ``jaxpr`` (or a call inside it that :func:`_evaluate` inlines) holds an operation to rewrite."""
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if (name == _CONV and _covered_conv(eqn.params)) or (name in _WINDOWS and _covered_window(eqn.params)):
            return True
        sub = _sub_jaxpr(eqn)
        if sub is not None and _rewritable(getattr(sub, "jaxpr", sub)):
            return True
    return False


def _evaluate(jaxpr, consts, *args):
    env = {}

    def read(v):
        return v.val if isinstance(v, core.Literal) else env[v]

    for v, value in zip(jaxpr.constvars, consts):
        env[v] = value
    for v, value in zip(jaxpr.invars, args):
        env[v] = value
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        name = eqn.primitive.name
        sub = _sub_jaxpr(eqn)
        if name == _CONV and _covered_conv(eqn.params):
            outs = [_conv(*invals, **eqn.params)]
        elif name in _WINDOWS and _covered_window(eqn.params):
            outs = [_window(name, invals[0], **eqn.params)]
        elif sub is not None and _rewritable(getattr(sub, "jaxpr", sub)):
            inner = getattr(sub, "jaxpr", sub)
            outs = _evaluate(inner, getattr(sub, "consts", ()), *invals)
        else:
            bound = eqn.primitive.get_bind_params(eqn.params)  # JAX >= 0.7: the params; before: (subfuns, params)
            subfuns, bind_params = bound if isinstance(bound, tuple) else ((), bound)
            with eqn.ctx.manager:
                outs = eqn.primitive.bind(*subfuns, *invals, **bind_params)
            outs = outs if eqn.primitive.multiple_results else [outs]
        for v, value in zip(eqn.outvars, outs):
            if not isinstance(v, core.DropVar):
                env[v] = value
    return [read(v) for v in jaxpr.outvars]


def _conv(lhs, rhs, *, window_strides, padding, rhs_dilation, dimension_numbers, **_):
    """``conv_general_dilated`` (covered case) as an im2col product, in and out of its dimension layout."""
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    x = jnp.transpose(lhs, (lhs_spec[0], *lhs_spec[2:], lhs_spec[1]))  # [N, *spatial, C]
    w = jnp.transpose(rhs, (*rhs_spec[2:], rhs_spec[1], rhs_spec[0]))  # [*kernel, C, O]
    if any(lo or hi for lo, hi in padding):
        x = jnp.pad(x, [(0, 0), *padding, (0, 0)])
    kernel = w.shape[:-2]
    plain = all(s == 1 for s in window_strides) and all(d == 1 for d in rhs_dilation)
    if plain and len(kernel) == 2:
        y = jaxfl_conv.conv2d_valid(x, w)
    else:
        patches = jaxfl_conv.unfold(x, kernel, window_strides, rhs_dilation)
        y = patches @ w.reshape(math.prod(kernel) * w.shape[-2], w.shape[-1])
    rank = y.ndim
    order = [0] * rank  # out_spec names where the batch, feature and spatial axes go
    order[out_spec[0]], order[out_spec[1]] = 0, rank - 1
    for i, axis in enumerate(out_spec[2:]):
        order[axis] = 1 + i
    return jnp.transpose(y, order).astype(lhs.dtype)


def _window(name, x, *, window_dimensions, window_strides, padding, window_dilation, **_):
    """``reduce_window_max`` / ``_sum`` (covered case) as the max / sum of the window's strided slices."""
    combine, fill = _WINDOWS[name]
    if any(lo or hi for lo, hi in padding):
        x = lax.pad(x, jnp.asarray(fill, x.dtype), [(lo, hi, 0) for lo, hi in padding])
    out = [(n - ((k - 1) * d + 1)) // s + 1 for n, k, d, s in zip(x.shape, window_dimensions, window_dilation,
                                                                    window_strides)]
    slices = []
    for offset in itertools.product(*(range(k) for k in window_dimensions)):
        start = [o * d for o, d in zip(offset, window_dilation)]
        limit = [s0 + (n - 1) * s + 1 for s0, n, s in zip(start, out, window_strides)]
        slices.append(lax.slice(x, start, limit, window_strides))
    return functools.reduce(combine, slices)
