"""2-D convolution as one matrix product of the unfolded input (im2col), fast on XLA:CPU in and out of loops.

Local training runs its steps in a ``lax.scan``. Inside a loop body XLA:CPU lowers the kernel-gradient
convolution of ``lax.conv_general_dilated``'s autodiff (the "feature as batch" convolution with a window
the size of the output) to a slow path: on a 2-core CPU one LeNet-5 step of batch 20 took 82 ms in a
scan and 18 ms unrolled, of which the conv2 kernel gradient alone was 73 ms vs 3.9 ms (jax 0.10.2;
the known XLA issue jax-ml/jax#12868). :func:`conv2d_valid` avoids XLA's convolutions altogether: the
input's ``kh * kw`` shifted windows are concatenated into ``[n, oh, ow, kh * kw * c]`` patches (im2col)
and multiplied by the kernel reshaped to ``[kh * kw * c, c_out]``. Plain autodiff then gives the kernel
gradient as one product ``patches^T @ dy`` and the input gradient as ``dy @ W^T`` folded back by the
slices' transposes (pads and adds), all on XLA:CPU's dot path. A LeNet-5 SGD step of batch 20 in a
scan went from 7.6 ms (lax's forward and input-gradient convolutions plus a custom kernel gradient) to
5.8 ms (Intel Xeon VM, ``git show 3412eb1:bench/results/local_training.json``). The patches take
``kh * kw`` times the input's memory. A kernel with fewer than :data:`PRODUCT_COLUMNS` output channels
computes several neighbouring output columns per patch (:func:`width_tile`), so its product is wide
enough for XLA:CPU's matrix products. ``bench/conv_layers.py`` times each layer against PyTorch.

:func:`max_pool_2x2` is ``nn.max_pool(x, (2, 2), strides=(2, 2))`` as a reshape and a max, whose gradient
is an elementwise select rather than XLA's select-and-scatter (2-2.5x faster forward + backward here).

:func:`conv_general_dilated` has ``lax.conv_general_dilated``'s signature (pass it to ``flax.linen.Conv``)
and routes stride-1, undilated, ungrouped, ``VALID`` NHWC/HWIO convolutions to :func:`conv2d_valid`,
anything else to ``lax``. Values and gradients equal ``lax``'s to float rounding (the sums run in
another order).
"""
from __future__ import annotations

import itertools

import jax.numpy as jnp
from jax import lax

_NHWC = ("NHWC", "HWIO", "NHWC")


def unfold(x, kernel_size, strides=None, kernel_dilation=None):
    """The ``VALID`` patches of ``x: [..., *spatial, c]`` (any leading axes; pad beforehand for other
    paddings) for a kernel of ``kernel_size``: ``[..., *out, prod(kernel_size) * c]``, the features ordered
    like the flattened ``[*kernel_size, c]`` of a kernel. One strided slice per kernel offset,
    concatenated; shared by :func:`conv2d_valid` and the ghost norms of :mod:`jaxfl.privacy.ghost`.

    Example (im2col: the convolution is the patches times the flattened kernel):
      >>> import jax, jax.numpy as jnp
      >>> x = jax.random.normal(jax.random.key(0), (2, 8, 8, 3))               # [batch, h, w, c_in]
      >>> w = jax.random.normal(jax.random.key(1), (5, 5, 3, 6))               # [kh, kw, c_in, c_out]
      >>> ref = jax.lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
      >>> patches = unfold(x, (5, 5))
      >>> patches.shape, bool(jnp.allclose(patches @ w.reshape(75, 6), ref, atol=1e-4))
      ((2, 4, 4, 75), True)
    """
    rank = len(kernel_size)
    strides = tuple(strides or (1,) * rank)
    kernel_dilation = tuple(kernel_dilation or (1,) * rank)
    lead = x.ndim - rank - 1
    dilated = [(k - 1) * d + 1 for k, d in zip(kernel_size, kernel_dilation)]
    out = [(n - k) // s + 1 for n, k, s in zip(x.shape[lead:-1], dilated, strides)]
    slices = []
    for offset in itertools.product(*(range(k) for k in kernel_size)):
        start = [0] * lead + [o * d for o, d in zip(offset, kernel_dilation)] + [0]
        limit = list(x.shape[:lead]) + [s0 + (n - 1) * s + 1 for s0, n, s in zip(start[lead:], out, strides)] \
            + [x.shape[-1]]
        slices.append(lax.slice(x, start, limit, (1,) * lead + strides + (1,)))
    return jnp.concatenate(slices, axis=-1)


# A product with fewer output columns than this runs far below XLA:CPU's matrix-product rate: a kernel with
# fewer output channels computes ``s`` neighbouring output columns per patch (see conv2d_valid).
PRODUCT_COLUMNS = 24


def width_tile(out_channels: int, out_width: int) -> int:
    """How many neighbouring output columns :func:`conv2d_valid` computes from one patch: ``1`` from
    :data:`PRODUCT_COLUMNS` output channels up, else ``PRODUCT_COLUMNS // out_channels`` (at most the output's
    width).

    Example:
      >>> width_tile(6, 4), width_tile(64, 24)          # few output channels: 4 columns per patch; many: 1
      (4, 1)
    """
    return max(1, min(PRODUCT_COLUMNS // out_channels, out_width))


def conv2d_valid(x, w):
    """Stride-1 ``VALID`` convolution: ``x: [..., h, w, c_in]``, ``w: [kh, kw, c_in, c_out]`` ->
    ``[..., h - kh + 1, w - kw + 1, c_out]`` (any leading axes).

    With few output channels the im2col product ``[positions, kh * kw * c_in] @ [kh * kw * c_in, c_out]``
    is too narrow for XLA:CPU's matrix products (the CIFAR CNN's first layer: 6 columns). Then each patch
    spans ``s = width_tile(c_out, ow)`` neighbouring output columns (``kh x (kw + s - 1)`` windows at
    stride ``s`` along the width) and the kernel is laid out ``s`` times, shifted by one column each, into a
    ``[kh * (kw + s - 1) * c_in, s * c_out]`` matrix that is zero elsewhere: ``(kw + s - 1) / kw`` times the
    multiply-adds, in a product ``s`` times wider. With the CIFAR CNN's first layer at ``s = 4`` its SGD steps
    run faster than untiled on 2-core CPUs (``tiling_speedup`` in ``bench/results/local_training.json``).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> x = jax.random.normal(jax.random.key(0), (2, 8, 8, 3))               # [batch, h, w, c_in]
      >>> w = jax.random.normal(jax.random.key(1), (5, 5, 3, 6))               # [kh, kw, c_in, c_out]
      >>> ref = jax.lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
      >>> bool(jnp.allclose(conv2d_valid(x, w), ref, atol=1e-4))
      True
    """
    kh, kw, c, o = w.shape
    s = width_tile(o, x.shape[-2] - kw + 1)
    if s == 1:
        return unfold(x, (kh, kw)) @ w.reshape(kh * kw * c, o)
    return untile_output(tiled_unfold(x, (kh, kw), s) @ widen_kernel(w, s), x.shape[-2] - kw + 1, s)


def tiled_unfold(x, kernel_size, s: int):
    """The patches of :func:`conv2d_valid`'s width-tiled product: ``x: [..., h, w, c]`` ->
    ``[..., oh, ceil(ow / s), kh * (kw + s - 1) * c]``, windows ``kh x (kw + s - 1)`` at stride ``s`` along the
    width (the input padded with zero columns on the right to cover the last group).

    Example (two output columns per patch: the widened kernel's product, untiled, is the convolution):
      >>> import jax, jax.numpy as jnp
      >>> x = jax.random.normal(jax.random.key(0), (2, 8, 8, 3))               # [batch, h, w, c_in]
      >>> w = jax.random.normal(jax.random.key(1), (5, 5, 3, 6))               # [kh, kw, c_in, c_out]
      >>> ref = jax.lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
      >>> patches, wide = tiled_unfold(x, (5, 5), 2), widen_kernel(w, 2)
      >>> patches.shape, wide.shape, bool(jnp.allclose(untile_output(patches @ wide, 4, 2), ref, atol=1e-4))
      ((2, 4, 2, 90), (90, 12), True)
    """
    kh, kw = kernel_size
    out_width = x.shape[-2] - kw + 1
    extra = -(-out_width // s) * s - out_width
    if extra:
        x = jnp.pad(x, [(0, 0)] * (x.ndim - 2) + [(0, extra), (0, 0)])
    return unfold(x, (kh, kw + s - 1), strides=(1, s))


def widen_kernel(w, s: int):
    """``w: [kh, kw, c, o]`` laid out ``s`` times, shifted by one column each: ``[kh * (kw + s - 1) * c, s * o]``,
    zero where a shifted copy does not reach.

    Example: :func:`tiled_unfold`.
    """
    kh, kw, c, o = w.shape
    shifted = [jnp.pad(w, ((0, 0), (t, s - 1 - t), (0, 0), (0, 0))) for t in range(s)]
    return jnp.stack(shifted, axis=-2).reshape(kh * (kw + s - 1) * c, s * o)


def narrow_kernel_gradient(wide, kernel_shape, s: int):
    """The transpose of :func:`widen_kernel`: a gradient ``[..., kh * (kw + s - 1) * c, s * o]`` with respect
    to the widened kernel -> ``[..., kh * kw * c, o]`` with respect to the kernel (the ``s`` shifted copies
    summed).

    Example:
      >>> import jax.numpy as jnp
      >>> narrow_kernel_gradient(widen_kernel(jnp.ones((5, 5, 3, 6)), 2), (5, 5, 3, 6), 2).shape
      (75, 6)
    """
    kh, kw, c, o = kernel_shape
    wide = wide.reshape(wide.shape[:-2] + (kh, kw + s - 1, c, s, o))
    narrow = sum(wide[..., t:t + kw, :, t, :] for t in range(s))
    return narrow.reshape(narrow.shape[:-4] + (kh * kw * c, o))


def untile_output(y, out_width: int, s: int):
    """``[..., oh, groups, s * o]`` (the width-tiled product) -> ``[..., oh, out_width, o]`` (the columns past
    the output cut).

    Example: :func:`tiled_unfold`.
    """
    y = y.reshape(y.shape[:-2] + (y.shape[-2] * s, y.shape[-1] // s))
    return y[..., :out_width, :]


def _is_plain(values) -> bool:
    return values is None or all(v == 1 for v in values)


def conv_general_dilated(lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
                         dimension_numbers=None, feature_group_count=1, batch_group_count=1, precision=None,
                         preferred_element_type=None):
    """``lax.conv_general_dilated`` with :func:`conv2d_valid` for the case it covers (see module doc).

    Example (what :mod:`jaxfl.models.rewrite` puts in place of flax's convolution on CPU):
      >>> import jax, jax.numpy as jnp
      >>> x = jax.random.normal(jax.random.key(0), (2, 8, 8, 3))               # [batch, h, w, c_in]
      >>> w = jax.random.normal(jax.random.key(1), (5, 5, 3, 6))               # [kh, kw, c_in, c_out]
      >>> ref = jax.lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
      >>> out = conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))
      >>> bool(jnp.allclose(out, ref, atol=1e-4))
      True
    """
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
    which after a ReLU only happens at 0, where the ReLU passes no gradient anyway.

    Example:
      >>> import flax.linen as nn, jax, jax.numpy as jnp
      >>> x = jax.random.normal(jax.random.key(0), (2, 8, 8, 3))
      >>> bool(jnp.array_equal(max_pool_2x2(x), nn.max_pool(x, (2, 2), strides=(2, 2))))
      True
    """
    h, w, c = x.shape[-3:]
    x = x[..., :h - h % 2, :w - w % 2, :]
    x = x.reshape(x.shape[:-3] + (h // 2, 2, w // 2, 2, c))
    return jnp.max(x, axis=(-4, -2))


def avg_pool_2x2(x):
    """``flax.linen.avg_pool(x, (2, 2), strides=(2, 2))`` (VALID) for ``x: [..., h, w, c]``.

    Example:
      >>> import flax.linen as nn, jax, jax.numpy as jnp
      >>> x = jax.random.normal(jax.random.key(0), (2, 8, 8, 3))
      >>> bool(jnp.allclose(avg_pool_2x2(x), nn.avg_pool(x, (2, 2), strides=(2, 2)), atol=1e-6))
      True
    """
    h, w, c = x.shape[-3:]
    x = x[..., :h - h % 2, :w - w % 2, :]
    return jnp.mean(x.reshape(x.shape[:-3] + (h // 2, 2, w // 2, 2, c)), axis=(-4, -2))
