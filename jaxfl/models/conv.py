"""2-D convolution whose kernel gradient stays fast inside compiled loops on XLA:CPU.

Local training runs its steps in a ``lax.scan``. Inside a loop body XLA:CPU lowers the kernel-gradient
convolution of ``lax.conv_general_dilated``'s autodiff (the "feature as batch" convolution with a window
the size of the output) to a slow path: on a 2-core CPU one LeNet-5 step of batch 20 took 82 ms in a
scan and 18 ms unrolled, of which the conv2 kernel gradient alone was 73 ms vs 3.9 ms (jax 0.10.2;
the known XLA issue jax-ml/jax#12868). :func:`conv2d_valid` keeps the forward and input-gradient
convolutions and computes the kernel gradient as ``kh * kw`` shifted contractions
``dW[i, j] = sum_{n,h,w} x[n, h+i, w+j, :] (x) dy[n, h, w, :]``, which stay on the fast dot path in any
context (4.8 ms in a scan); with few input channels (``<= IM2COL_MAX_CHANNELS``), as one contraction of the
unfolded input (im2col) instead: LeNet-5's conv1 (1 channel) 3.9 -> 1.1 ms at batch 64.

:func:`max_pool_2x2` is ``nn.max_pool(x, (2, 2), strides=(2, 2))`` as a reshape and a max, whose gradient
is an elementwise select rather than XLA's select-and-scatter (2-2.5x faster forward + backward here).

:func:`conv_general_dilated` has ``lax.conv_general_dilated``'s signature (pass it to ``flax.linen.Conv``)
and routes stride-1, undilated, ungrouped, ``VALID`` NHWC/HWIO convolutions to :func:`conv2d_valid`,
anything else to ``lax``. Forward values are ``lax``'s; gradients equal ``lax``'s to float rounding.
Only reverse mode is defined (``jax.custom_vjp``): ``jax.jvp`` through it raises.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

_NHWC = ("NHWC", "HWIO", "NHWC")


def _lax_valid(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=_NHWC)


@jax.custom_vjp
def conv2d_valid(x, w):
    """Stride-1 ``VALID`` convolution: ``x: [n, h, w, c_in]``, ``w: [kh, kw, c_in, c_out]`` ->
    ``[n, h - kh + 1, w - kw + 1, c_out]``."""
    return _lax_valid(x, w)


def _forward(x, w):
    return _lax_valid(x, w), (x, w)


IM2COL_MAX_CHANNELS = 8
"""Input channels up to which the kernel gradient is one im2col contraction rather than ``kh * kw``
shifted ones (few channels make each shifted contraction a thin, slow matrix product)."""


def _backward(residuals, dy):
    x, w = residuals
    kh, kw, c, o = w.shape
    oh, ow = dy.shape[1:3]
    (dx,) = jax.vjp(lambda x: _lax_valid(x, w), x)[1](dy)
    if c <= IM2COL_MAX_CHANNELS:
        # [n, oh, ow, kh * kw * c] patches, features ordered (i, j, c) like the kernel's leading axes.
        cols = jnp.concatenate([x[:, i:i + oh, j:j + ow, :] for i in range(kh) for j in range(kw)], axis=-1)
        dw = (cols.reshape(-1, kh * kw * c).T @ dy.reshape(-1, o)).reshape(kh, kw, c, o)
    else:
        dw = jnp.stack([jnp.stack([jnp.einsum("nhwc,nhwo->co", x[:, i:i + oh, j:j + ow, :], dy)
                                   for j in range(kw)]) for i in range(kh)])
    return dx, dw.astype(w.dtype)


conv2d_valid.defvjp(_forward, _backward)


def _is_plain(values) -> bool:
    return values is None or all(v == 1 for v in values)


def conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
                         dimension_numbers=None, feature_group_count=1, batch_group_count=1, precision=None,
                         preferred_element_type=None):
    """``lax.conv_general_dilated`` with :func:`conv2d_valid` for the case it covers (see module doc)."""
    covered = (lhs.ndim == 4 and padding == "VALID" and _is_plain(window_strides) and _is_plain(lhs_dilation)
               and _is_plain(rhs_dilation) and feature_group_count == 1 and batch_group_count == 1
               and precision is None and preferred_element_type is None
               and lax.conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
               == lax.conv_dimension_numbers(lhs.shape, rhs.shape, _NHWC))
    if covered:
        return conv2d_valid(lhs, rhs)
    return lax.conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation, rhs_dilation,
                                    dimension_numbers, feature_group_count, batch_group_count, precision,
                                    preferred_element_type)


def max_pool_2x2(x):
    """``flax.linen.max_pool(x, (2, 2), strides=(2, 2))`` (VALID: odd rows/columns dropped) for
    ``x: [..., h, w, c]``: the same values. Its gradient goes to the window's maximum; where a window
    holds several equal maxima it is split among them (select-and-scatter gives it all to the first),
    which after a ReLU only happens at 0, where the ReLU passes no gradient anyway."""
    h, w, c = x.shape[-3:]
    x = x[..., :h - h % 2, :w - w % 2, :]
    x = x.reshape(x.shape[:-3] + (h // 2, 2, w // 2, 2, c))
    return jnp.max(x, axis=(-4, -2))
