"""Where local training's time goes: each convolution layer of LeNet-5 and the CIFAR CNN against PyTorch.

``local_training`` compares whole SGD steps with PyTorch; this benchmark takes the steps apart, one
convolution layer at a time, so the gap can be located. A row is one layer (its input shape, kernel and
batch as in the model's training step) and times what a training step does with that layer: the forward
convolution and the backward pass training needs, the kernel gradient always and the input gradient for
the second layers (the first layer's input is the data, which needs none). Per row, side by side in this
process, seconds per pass of that layer for:

- ``jaxfl``: :func:`jaxfl.models.conv.conv_general_dilated`, what the models use (im2col: the input's
  ``kh * kw`` shifted windows as strided slices, concatenated, times the kernel; with fewer than 24 output
  channels, as the CIFAR CNN's first layer, several output columns per patch: ``conv.width_tile``), called
  per example under ``jax.vmap`` as local training and clipping call the models (``nets.per_example_loss``);
- ``jaxfl batched``: the same convolution called once on the whole batch;
- ``lax``: ``lax.conv_general_dilated``, flax's default convolution (XLA:CPU's own kernels), whole batch;
- two candidates, not used by jaxfl, whole batch: ``gather unfold``, the im2col product with the patches
  taken by one gather from a precomputed index (its transpose, for the input gradient, is a scatter-add);
  ``channels-first``, the im2col value with a ``custom_jvp`` whose kernel derivative uses channels-first
  patches ``[kh * kw * c, positions]``, so the kernel gradient is a product of two operands laid out as
  it reads them (``patches_cf @ dy``) instead of ``patches^T @ dy``; and ``channels-first per example``,
  that candidate under the per-example ``vmap`` (where the vmapped axis lands between the patches' two
  axes);
- ``torch``: ``torch.nn.functional.conv2d`` forward and ``backward`` on NCHW tensors (oneDNN),
  ``torch.set_num_threads(os.cpu_count())``.

The JAX sides run ``STEPS`` passes in one jitted ``lax.scan`` over distinct inputs and output gradients
(the kernel updated by its gradient each pass, the input gradient summed into the carry, so nothing is
hoisted out of the loop); PyTorch a Python loop over the same pre-made tensors. One warm-up call each,
the four interleaved in every repeat, best of ``--repeats``. ``ratio`` per row = torch seconds / jaxfl
seconds (> 1: jaxfl faster), ``jaxfl`` being the per-example form; the headline ``ratio`` is the smallest
over the rows. ``gflops`` is each
side's rate on the layer's multiply-adds (2 flops each) of the passes it runs: forward, kernel gradient
and, where taken, input gradient, each ``batch * out_h * out_w * kh * kw * c_in * c_out`` multiply-adds.

Needs the ``bench`` extra (torch); without it the benchmark prints one line and exits. Usage:
python bench/conv_layers.py [--repeats 7] [--batches 20 64] [--out bench/results/conv_layers.json]
"""
from __future__ import annotations

import argparse
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxfl.studies.provenance import machine as processor, interleaved_best_seconds, source_revision, write_benchmark
from jaxfl.models import conv

STEPS = 20
MISSING_EXTRA = "needs torch: pip install -e '.[bench]'"
NHWC = ("NHWC", "HWIO", "NHWC")
# (model, layer, input [h, w, c_in], kernel [kh, kw], c_out, input gradient taken)
LAYERS = [("LeNet-5", "conv1", (28, 28, 1), (5, 5), 32, False),
          ("LeNet-5", "conv2", (12, 12, 32), (5, 5), 64, True),
          ("CifarCNN", "conv1", (32, 32, 3), (5, 5), 6, False),
          ("CifarCNN", "conv2", (14, 14, 6), (5, 5), 16, True)]


def lax_conv(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=NHWC)


def jaxfl_conv(x, w):
    return conv.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=NHWC)


def gather_conv(x, w):
    """im2col with the patches by one gather: ``x: [n, h, w, c]``, ``w: [kh, kw, c, o]`` -> ``[n, oh, ow, o]``."""
    n, h, width, c = x.shape
    kh, kw, _, o = w.shape
    oh, ow = h - kh + 1, width - kw + 1
    rows = np.arange(oh)[:, None, None, None] + np.arange(kh)[None, None, :, None]
    cols = np.arange(ow)[None, :, None, None] + np.arange(kw)[None, None, None, :]
    index = (rows * width + cols).reshape(-1)                 # [oh * ow * kh * kw], patch-major
    patches = jnp.take(x.reshape(n, h * width, c), index, axis=1).reshape(n, oh, ow, kh * kw * c)
    return patches @ w.reshape(kh * kw * c, o)


@jax.custom_jvp
def channels_first_conv(x, w):
    """The ``channels-first`` candidate: ``jaxfl_conv``'s value; derivative in ``w`` through channels-first
    patches (reverse mode: ``patches_cf @ dy``), in ``x`` the im2col one."""
    return conv.conv2d_valid(x, w)


def _channels_first_patches(x, kernel_size):
    """``x: [..., h, w, c]`` -> ``[kh * kw * c, prod(...) * oh * ow]`` (rows as a flattened ``[kh, kw, c]``)."""
    kh, kw = kernel_size
    lead = x.ndim - 3
    oh, ow = x.shape[-3] - kh + 1, x.shape[-2] - kw + 1
    xt = jnp.moveaxis(x, -1, 0)                                   # [c, ..., h, w]
    limit = list(xt.shape[:-2])
    slices = [lax.slice(xt, [0] * (lead + 1) + [di, dj], limit + [di + oh, dj + ow])
              for di in range(kh) for dj in range(kw)]
    return jnp.stack(slices).reshape(kh * kw * x.shape[-1], -1)


channels_first_conv.defjvps(
    lambda x_dot, out, x, w: conv.conv2d_valid(x_dot, w),
    lambda w_dot, out, x, w: (_channels_first_patches(x, w.shape[:2]).T
                              @ w_dot.reshape(-1, w.shape[-1])).reshape(out.shape))


def per_example(conv_fn):
    """``conv_fn`` applied to each example of the batch under ``jax.vmap`` (a batch of one inside)."""
    return lambda x, w: jax.vmap(lambda xi: conv_fn(xi[None], w)[0])(x)


def jax_passes(conv_fn, input_grad: bool):
    """Jitted ``(w, xs, dys) -> (w, carry)``: one training pass of the layer per ``xs[i]``, ``dys[i]``."""
    def passes(w, xs, dys):
        def one(carry, inputs):
            w, total = carry
            x, dy = inputs
            if input_grad:
                _, vjp = jax.vjp(conv_fn, x, w)
                dx, dw = vjp(dy)
                total = total + jnp.sum(dx)
            else:
                _, vjp = jax.vjp(lambda w: conv_fn(x, w), w)
                (dw,) = vjp(dy)
            return (w - 1e-6 * dw, total), None
        return lax.scan(one, (w, jnp.zeros((), w.dtype)), (xs, dys))[0]
    fn = jax.jit(passes)
    return lambda w, xs, dys: jax.block_until_ready(fn(w, xs, dys))


def torch_passes(w, xs, dys, input_grad: bool):
    """A zero-argument callable: the same passes in PyTorch (NCHW / OIHW copies made here, untimed)."""
    import torch
    import torch.nn.functional as F

    def to_torch(a, axes):
        return torch.from_numpy(np.array(np.transpose(np.asarray(a), axes), copy=True, order="C"))

    weight = to_torch(w, (3, 2, 0, 1)).requires_grad_()
    inputs = [to_torch(x, (0, 3, 1, 2)).requires_grad_(input_grad) for x in xs]
    grads = [to_torch(dy, (0, 3, 1, 2)) for dy in dys]

    def run():
        for x, dy in zip(inputs, grads):
            F.conv2d(x, weight).backward(dy)
            with torch.no_grad():
                weight.sub_(1e-6 * weight.grad)
            weight.grad = None
            x.grad = None

    return run


def measure(batch: int, layer, repeats: int) -> dict:
    model, name, (h, width, c), (kh, kw), out_channels, input_grad = layer
    oh, ow = h - kh + 1, width - kw + 1
    kx, kw_key, kdy = jax.random.split(jax.random.PRNGKey(batch), 3)
    xs = jax.random.normal(kx, (STEPS, batch, h, width, c), jnp.float32)
    w = jax.random.normal(kw_key, (kh, kw, c, out_channels), jnp.float32) / np.sqrt(kh * kw * c)
    dys = jax.random.normal(kdy, (STEPS, batch, oh, ow, out_channels), jnp.float32)
    jax_ways = {"jaxfl": per_example(jaxfl_conv), "jaxfl batched": jaxfl_conv, "lax": lax_conv,
                "gather unfold": gather_conv, "channels-first": channels_first_conv,
                "channels-first per example": per_example(channels_first_conv)}
    runs = {way: (lambda fn=jax_passes(f, input_grad): fn(w, xs, dys)) for way, f in jax_ways.items()}
    runs["torch"] = torch_passes(w, xs, dys, input_grad)
    reference = jax.vjp(lax_conv, xs[0], w)[1](dys[0])
    for way, f in jax_ways.items():                       # every JAX form computes the same gradients
        ours = jax.vjp(f, xs[0], w)[1](dys[0])
        for a, b in zip(ours, reference):
            scale = float(jnp.max(jnp.abs(b)))
            if float(jnp.max(jnp.abs(a - b))) > 1e-4 * scale:
                raise AssertionError(f"{way} gradients differ from lax's for {model} {name}")
    seconds = {way: t / STEPS for way, t in interleaved_best_seconds(runs, repeats).items()}
    macs = batch * oh * ow * kh * kw * c * out_channels * (3 if input_grad else 2)
    row = {"model": model, "layer": name, "batch": batch, "input": [h, width, c], "kernel": [kh, kw],
           "out_channels": out_channels, "input_gradient": input_grad, "steps": STEPS,
           "seconds_per_pass": seconds, "gflops": {way: 2 * macs / s / 1e9 for way, s in seconds.items()},
           "ratio": seconds["torch"] / seconds["jaxfl"],
           "ratio_vs_torch": {way: seconds["torch"] / s for way, s in seconds.items() if way != "torch"}}
    print(f"{model:8s} {name} batch {batch:3d}: " + ", ".join(f"{way} {1e3 * s:.3f} ms" for way, s in seconds.items())
          + f"; torch / jaxfl {row['ratio']:.2f}", flush=True)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batches", type=int, nargs="+", default=[20, 64])
    parser.add_argument("--out", default="bench/results/conv_layers.json")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print(f"conv_layers skipped: torch is not installed ({MISSING_EXTRA})")
        return 0
    torch.set_num_threads(os.cpu_count())

    rows = [measure(batch, layer, args.repeats) for layer in LAYERS for batch in args.batches]
    worst = min(rows, key=lambda row: row["ratio"])
    record = {
        "benchmark": "conv_layers",
        "machine": {**processor(), "cores": os.cpu_count(), "device": jax.devices()[0].platform,
                    "jax": jax.__version__, "torch": torch.__version__, "torch_threads": torch.get_num_threads()},
        "ratio": worst["ratio"],
        "baseline": f"PyTorch (CPU, {torch.get_num_threads()} threads): F.conv2d forward + backward of each conv layer "
                    "of LeNet-5 and the CIFAR CNN at the training batches; ratio = the smallest over the layers and "
                    f"batches of torch seconds / jaxfl seconds (jaxfl's convolution per example under vmap, as the "
                    f"models run in local training) (> 1: jaxfl faster; here {worst['model']} "
                    f"{worst['layer']} at batch {worst['batch']}); the whole-batch call, lax and two candidate "
                    "forms in rows",
        "rows": rows,
        "notes": "A pass = the forward convolution + the kernel gradient (+ the input gradient for conv2). JAX: "
                 f"{STEPS} passes in one jitted lax.scan; torch: a loop over the same tensors (NCHW). Interleaved, "
                 "best of repeats, seconds per pass. gflops: 2 x the multiply-adds of the passes run.",
    }
    print(f"wrote {write_benchmark(record, args.out)}")
    return 0


if __name__ == "__main__":
    source_revision()   # the checkout as it is now: write_benchmark records it at the end
    raise SystemExit(main())
