"""DP-SGD step throughput: jaxfl's per-example clipping against Opacus (PyTorch) on the same CPU.

One DP-SGD step = per-example gradients clipped to global L2 norm ``C = 1``, summed, Gaussian noise of
standard deviation ``noise_multiplier * C = 1`` added, divided by the batch size and applied as a plain
SGD update. Samples per second of that step, for three models (Lowy et al.'s ``MnistMLP`` on 50 features,
``CifarCNN`` on 32x32x3, DP-REC's ``MnistLeNet5`` on 28x28x1) at batch 64, 256 and 1024:

- ``opacus hooks``: ``PrivacyEngine().make_private(..., grad_sample_mode="hooks")`` (Opacus' standard
  mode: per-sample gradients materialized by module hooks, then clipped by the ``DPOptimizer``);
- ``opacus ghost``: ``make_private(..., criterion=..., grad_sample_mode="ghost")`` (Opacus' fast gradient
  clipping: it also returns a criterion wrapper whose ``loss.backward()`` runs two backward passes, the
  first for per-sample norms, ghost norms for ``nn.Linear``, the second for the clipped sum);
- ``jaxfl vmap``: :func:`jaxfl.privacy.clipping.explicit_clipped_grad_sum` (per-example gradients by
  ``vmap(grad)``) + ``jax.random.normal`` noise + SGD,
  jitted, ``steps`` steps in one ``lax.scan``;
- ``jaxfl ghost``: the same with :func:`jaxfl.privacy.clipping.clipped_grad_sum` (the default,
  ``method="auto"``: ghost norms for every Dense/Conv layer of these models, :mod:`jaxfl.privacy.ghost`;
  ``microbatch="auto"``: the batch in cache-sized slices, :mod:`jaxfl.privacy.microbatch`);
- ``jaxfl unsliced``: ``jaxfl ghost`` with ``microbatch=None`` (the whole batch at once);
- ``jaxfl untiled`` (the CIFAR CNN only: its first convolution has fewer than
  ``jaxfl.models.conv.PRODUCT_COLUMNS`` output channels): ``jaxfl ghost`` with that layer's forward product and
  ghost rows untiled, one narrow im2col product, as jaxfl ran it before the width tiling (``conv.width_tile``).

Opacus runs with ``noise_multiplier=1.0, max_grad_norm=1.0``, ``torch.optim.SGD``, ``loss_reduction="mean"``,
``poisson_sampling=False``, over the same pre-made batches (no DataLoader in the timed loop) and
``torch.set_num_threads(os.cpu_count())``; JAX uses all cores. Every timed call runs ``steps`` steps
(``max(4, 4096 // batch)``, ~4096 samples) over ``steps`` distinct random batches; one warm-up call per
method (compilation) is excluded; the methods are interleaved in every repeat and the best of
``--repeats`` is kept. The headline ratio is jaxfl / Opacus-ghost samples/s (> 1: jaxfl faster); the
ratio to Opacus-hooks is given as the weaker-baseline row, and to the faster Opacus mode per row.

Correctness (untimed): for the MLP at batch 64 with the JAX initial weights copied into the torch model,
the clipped gradient sums (noise off) of Opacus-hooks and jaxfl's vmap path (and Opacus-ghost, jaxfl
ghost) are compared; the torch mirrors of the conv models are checked to give JAX's logits, and their clipped sums
at batch 8 (both Opacus modes) to equal jaxfl's vmap path (this check found Opacus's LeNet-5 sums wrong on
channels-last-strided input: :func:`to_torch`).

Without torch/opacus (the ``bench`` extra) the benchmark prints one line and exits.

Usage: python bench/clipping_vs_opacus.py [--repeats 3] [--batches 64 256 1024] [--models mlp cifar lenet5]
       [--samples 4096] [--out bench/results/clipping_vs_opacus.json]
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import os
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxfl.models import conv, nets
from jaxfl.studies.provenance import machine as processor, interleaved_best_seconds, source_revision, write_benchmark
from jaxfl.privacy.clipping import clipped_grad_sum, explicit_clipped_grad_sum
from jaxfl.privacy.microbatch import microbatch_size

MISSING_EXTRA = "needs torch and opacus: pip install -e '.[bench]'"
CLIP, SIGMA, LR = 1.0, 1.0, 0.01

# name -> (flax module, input shape without batch axis (NHWC), number of classes; 1 = one logit, binary)
MODELS = {
    "mlp": (nets.MnistMLP(), nets.MNIST_INPUT_SHAPE, 1),
    "cifar": (nets.CifarCNN(), nets.CIFAR_INPUT_SHAPE, nets.CIFAR_CLASSES),
    "lenet5": (nets.MnistLeNet5(), nets.LENET5_INPUT_SHAPE, nets.MNIST_CLASSES),
}
TITLES = {"mlp": "MnistMLP (50-64-1)", "cifar": "CifarCNN (32x32x3)", "lenet5": "MnistLeNet5 (28x28x1)"}



# ------------------------------------------------------------------------------------------------
# PyTorch mirrors of the flax models (also used by bench/local_training.py)


def torch_model(name: str):
    """The PyTorch module computing the same function as ``MODELS[name]``'s flax module, on NCHW input.

    Same layers, VALID (no) padding, ReLU, 2x2 max pooling of stride 2; the flatten is PyTorch's CHW order
    (flax flattens HWC; :func:`copy_flax_params` permutes the first dense layer's rows accordingly).
    """
    from torch import nn

    if name == "mlp":
        return nn.Sequential(nn.Linear(50, 64), nn.ReLU(), nn.Linear(64, 1), nn.Flatten(0))
    if name == "cifar":
        return nn.Sequential(nn.Conv2d(3, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84),
                             nn.ReLU(), nn.Linear(84, 10))
    if name == "lenet5":
        return nn.Sequential(nn.Conv2d(1, 32, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 5), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 10))
    raise ValueError(f"unknown model {name!r}")


def copy_flax_params(model, params, input_shape) -> None:
    """Copies flax ``params`` (layers in definition order) into the torch mirror ``model`` in place."""
    import torch

    layers = [m for m in model if any(True for _ in m.parameters(recurse=False))]
    flax_layers = list(params["params"].values())            # definition order: conv1, conv2, fc1, ... / hidden, out
    assert len(layers) == len(flax_layers), (len(layers), len(flax_layers))
    spatial = flatten_shape(layers, input_shape)
    with torch.no_grad():
        for layer, p in zip(layers, flax_layers):
            weight = kernel_to_torch(np.asarray(p["kernel"]), spatial)
            spatial = spatial if weight.ndim == 4 else None  # only the first dense layer takes the flatten
            layer.weight.copy_(torch.from_numpy(np.ascontiguousarray(weight)))
            layer.bias.copy_(torch.from_numpy(np.array(p["bias"])))


def kernel_to_torch(kernel: np.ndarray, spatial=None) -> np.ndarray:
    """A flax kernel as the torch weight: HWIO -> OIHW for a convolution; for a dense layer its transpose, with
    the rows first permuted from flax's (h, w, c) flatten to torch's (c, h, w) when ``spatial = (H, W, C)`` (the
    shape the model flattens before this layer)."""
    if kernel.ndim == 4:
        return kernel.transpose(3, 2, 0, 1)
    if spatial is not None:
        kernel = kernel.reshape(*spatial, -1).transpose(2, 0, 1, 3).reshape(kernel.shape)
    return kernel.T


def kernel_from_torch(weight: np.ndarray, spatial=None) -> np.ndarray:
    """The inverse of :func:`kernel_to_torch`: a torch weight (or its gradient) in the flax kernel's layout."""
    if weight.ndim == 4:
        return weight.transpose(2, 3, 1, 0)
    kernel = weight.T
    if spatial is not None:
        h, w, c = spatial
        kernel = kernel.reshape(c, h, w, -1).transpose(1, 2, 0, 3).reshape(kernel.shape)
    return kernel


def flatten_shape(layers, input_shape):
    """``(H, W, C)`` of the activation the mirror flattens (its convolutions VALID, each followed by a 2x2
    pool), or None for a model without convolutions."""
    import torch

    if len(input_shape) != 3:
        return None
    h, w, c = input_shape
    for layer in layers:
        if isinstance(layer, torch.nn.Conv2d):
            k = layer.kernel_size[0]
            h, w, c = (h - k + 1) // 2, (w - k + 1) // 2, layer.out_channels
    return h, w, c


def to_torch(x):
    """A JAX/NumPy batch (NHWC for images) as a torch tensor (NCHW for images) with the default strides.

    Not ``torch.from_numpy(np.ascontiguousarray(a.transpose(0, 3, 1, 2)))``: for one channel NumPy gives the
    size-1 channel axis stride 1, which torch also reads as channels-last; the convolutions keep that layout, and
    Opacus 1.6's per-sample gradients of the second convolution were wrong on it (their sum was not ``.grad``).
    Results measured before this function gave the default strides (LeNet-5's rows here and in
    bench/local_training.py, JSON sources up to 303494f) ran on that layout."""
    import torch

    a = torch.from_numpy(np.array(x))                        # a writable copy
    if a.ndim == 4:
        a = a.permute(0, 3, 1, 2)
    return torch.empty(a.shape, dtype=a.dtype).copy_(a)


def torch_criterion(classes: int):
    from torch import nn

    return nn.BCEWithLogitsLoss() if classes == 1 else nn.CrossEntropyLoss()


# ------------------------------------------------------------------------------------------------
# Data and the four steps


def make_batches(name: str, batch: int, steps: int, seed: int = 0):
    """``steps`` random batches: ``x: [steps, batch, *shape]``, ``y: [steps, batch]`` (float {0, 1} for
    the one-logit MLP, int classes otherwise)."""
    _, shape, classes = MODELS[name]
    kx, ky = jax.random.split(jax.random.PRNGKey(seed))
    x = jax.random.normal(kx, (steps, batch) + tuple(shape), jnp.float32)
    if classes == 1:
        y = jax.random.bernoulli(ky, 0.5, (steps, batch)).astype(jnp.float32)
    else:
        y = jax.random.randint(ky, (steps, batch), 0, classes)
    return x, y


def jax_loss(name: str):
    module, _, classes = MODELS[name]
    return nets.per_example_loss(module, nets.binary_logistic_loss if classes == 1 else nets.softmax_cross_entropy)


@contextlib.contextmanager
def untiled_convolutions():
    """jaxfl's convolutions as before the width tiling: one im2col product per layer, however few its output
    channels (programs traced inside the block keep it)."""
    saved = conv.PRODUCT_COLUMNS
    conv.PRODUCT_COLUMNS = 1
    try:
        yield
    finally:
        conv.PRODUCT_COLUMNS = saved


def has_tiled_convolution(params) -> bool:
    return any(leaf.ndim == 4 and leaf.shape[-1] < conv.PRODUCT_COLUMNS for leaf in jax.tree_util.tree_leaves(params))


def jax_runner(name: str, method, batch: int, steps: int):
    """A zero-argument callable running ``steps`` jitted DP-SGD steps (one ``lax.scan``) over fresh batches."""
    module, shape, _ = MODELS[name]
    loss = jax_loss(name)
    params = nets.init_params(module, jax.random.PRNGKey(0), shape)
    x, y = make_batches(name, batch, steps)
    mask = jnp.ones((batch,), jnp.float32)

    def epoch(params, key, x, y):
        def step(p, inputs):
            xb, yb, i = inputs
            s = method(loss, p, xb, yb, mask, CLIP)
            leaves, treedef = jax.tree_util.tree_flatten(s.value)
            keys = jax.random.split(jax.random.fold_in(key, i), len(leaves))
            noisy = [g + SIGMA * s.sensitivity * jax.random.normal(k, g.shape, g.dtype) for g, k in zip(leaves, keys)]
            grad = jax.tree_util.tree_unflatten(treedef, noisy)
            return jax.tree_util.tree_map(lambda w, g: w - LR * g / s.count, p, grad), None
        return jax.lax.scan(step, params, (x, y, jnp.arange(steps)))[0]

    fn = jax.jit(epoch)
    key = jax.random.PRNGKey(1)
    return lambda: jax.block_until_ready(fn(params, key, x, y))


def opacus_runner(name: str, mode: str, batch: int, steps: int):
    """A zero-argument callable running ``steps`` Opacus DP-SGD steps (``mode``: "hooks" or "ghost")."""
    import torch
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    module, shape, classes = MODELS[name]
    model = torch_model(name)
    copy_flax_params(model, nets.init_params(module, jax.random.PRNGKey(0), shape), shape)
    model.train()
    x, y = make_batches(name, batch, steps)
    xs = [to_torch(x[i]) for i in range(steps)]
    ys = [to_torch(y[i]) if classes == 1 else to_torch(y[i]).long() for i in range(steps)]
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    criterion = torch_criterion(classes)
    loader = DataLoader(TensorDataset(xs[0], ys[0]), batch_size=batch)   # only for make_private's batch size
    engine = PrivacyEngine()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode == "ghost":
            model, optimizer, criterion, _ = engine.make_private(
                module=model, optimizer=optimizer, criterion=criterion, data_loader=loader, noise_multiplier=SIGMA,
                max_grad_norm=CLIP, poisson_sampling=False, grad_sample_mode="ghost")
        else:
            model, optimizer, _ = engine.make_private(
                module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=SIGMA, max_grad_norm=CLIP,
                poisson_sampling=False, grad_sample_mode="hooks")

    def run():
        for xb, yb in zip(xs, ys):
            optimizer.zero_grad(set_to_none=True)
            criterion(model(xb), yb).backward()
            optimizer.step()

    return run


def opacus_clipped_sum(name: str, mode: str, params, x, y):
    """Opacus' clipped per-example gradient sum (noise off, ``loss_reduction="sum"``) at flax ``params``,
    as a list of NumPy arrays in the flax layout (kernel then bias per layer, flax definition order)."""
    import torch
    from opacus import PrivacyEngine
    from torch.utils.data import DataLoader, TensorDataset

    _, shape, classes = MODELS[name]
    model = torch_model(name)
    copy_flax_params(model, params, shape)
    model.train()
    xb, yb = to_torch(x), to_torch(y)
    if classes != 1:
        yb = yb.long()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    criterion = torch.nn.BCEWithLogitsLoss(reduction="sum") if classes == 1 else torch.nn.CrossEntropyLoss(
        reduction="sum")
    loader = DataLoader(TensorDataset(xb, yb), batch_size=len(xb))
    kwargs = dict(data_loader=loader, noise_multiplier=0.0, max_grad_norm=CLIP, poisson_sampling=False,
                  loss_reduction="sum")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode == "ghost":
            gsm, optimizer, criterion, _ = PrivacyEngine().make_private(
                module=model, optimizer=optimizer, criterion=criterion, grad_sample_mode="ghost", **kwargs)
        else:
            gsm, optimizer, _ = PrivacyEngine().make_private(module=model, optimizer=optimizer,
                                                             grad_sample_mode="hooks", **kwargs)
    optimizer.zero_grad(set_to_none=True)
    criterion(gsm(xb), yb).backward()
    optimizer.pre_step()                       # clip, sum, add (zero) noise; no scaling for "sum"
    layers = [m for m in model if any(True for _ in m.parameters(recurse=False))]
    spatial = flatten_shape(layers, shape)
    out = []
    for layer in layers:
        w = layer.weight.grad.detach().numpy()
        out += [kernel_from_torch(w, spatial), layer.bias.grad.detach().numpy()]
        spatial = spatial if w.ndim == 4 else None
    return out


def relative_error(a: list, b: list) -> float:
    """``||a - b|| / ||b||`` over all leaves together."""
    num = sum(float(np.sum((np.asarray(u, np.float64) - np.asarray(v, np.float64)) ** 2)) for u, v in zip(a, b))
    den = sum(float(np.sum(np.asarray(v, np.float64) ** 2)) for v in b)
    return float(np.sqrt(num / den))


def flax_layout(tree) -> list:
    """A flax gradient pytree as [kernel, bias, kernel, bias, ...] in definition order."""
    return [np.asarray(leaf) for layer in tree["params"].values() for leaf in (layer["kernel"], layer["bias"])]


def correctness() -> dict:
    """Clipped sums (noise off) of the MLP at batch 64, identical weights: Opacus vs jaxfl; conv mirrors' logits."""
    import torch

    name, batch = "mlp", 64
    module, shape, _ = MODELS[name]
    params = nets.init_params(module, jax.random.PRNGKey(0), shape)
    x, y = make_batches(name, batch, 1, seed=2)
    # inputs scaled from 0.2x to 1.5x: per-example norms on both sides of C (a mix of clipped and unclipped)
    x, y = x[0] * jnp.linspace(0.2, 1.5, batch)[:, None], y[0]
    mask = jnp.ones((batch,), jnp.float32)
    vmap_sum = explicit_clipped_grad_sum(jax_loss(name), params, x, y, mask, CLIP)
    reference = flax_layout(vmap_sum.value)
    result = {"model": name, "batch": batch, "clip_norm": CLIP,
              "num_clipped": int(vmap_sum.num_clipped),
              "relative_error_opacus_hooks_vs_jaxfl_vmap": relative_error(
                  opacus_clipped_sum(name, "hooks", params, x, y), reference),
              "relative_error_opacus_ghost_vs_jaxfl_vmap": relative_error(
                  opacus_clipped_sum(name, "ghost", params, x, y), reference)}
    ghost = clipped_grad_sum(jax_loss(name), params, x, y, mask, CLIP)
    result["relative_error_jaxfl_ghost_vs_jaxfl_vmap"] = relative_error(flax_layout(ghost.value), reference)
    mirrors, conv_sums = {}, {}
    for conv_name in ("cifar", "lenet5"):
        conv_module, conv_shape, _ = MODELS[conv_name]
        conv_params = nets.init_params(conv_module, jax.random.PRNGKey(0), conv_shape)
        xc, yc = (a[0] for a in make_batches(conv_name, 8, 1))
        model = torch_model(conv_name)
        copy_flax_params(model, conv_params, conv_shape)
        with torch.no_grad():
            logits = model(to_torch(xc)).numpy()
        mirrors[conv_name] = relative_error([logits], [np.asarray(conv_module.apply(conv_params, xc))])
        conv_reference = flax_layout(explicit_clipped_grad_sum(jax_loss(conv_name), conv_params, xc, yc,
                                                               jnp.ones((8,), jnp.float32), CLIP).value)
        conv_sums[conv_name] = {mode: relative_error(opacus_clipped_sum(conv_name, mode, conv_params, xc, yc),
                                                     conv_reference) for mode in ("hooks", "ghost")}
    result["torch_mirror_logits_relative_error"] = mirrors
    result["conv_clipped_sum_relative_error_opacus_vs_jaxfl_vmap"] = conv_sums
    result["note"] = ("relative error = ||a - b|| / ||b|| over all parameters; Opacus clips by min(1, C / (norm + "
                      "1e-6)), jaxfl by min(1, C / norm)")
    return result


# ------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--samples", type=int, default=4096,
                        help="samples per timed call: steps = max(4, samples // batch)")
    parser.add_argument("--min-steps", type=int, default=4)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "clipping_vs_opacus.json"))
    args = parser.parse_args(argv)

    try:
        import opacus
        import torch
    except ImportError as exc:
        print(f"clipping_vs_opacus skipped: {exc.name} is not installed ({MISSING_EXTRA})")
        return 0
    torch.set_num_threads(os.cpu_count())
    # Opacus' per-call notices (its secure RNG is off; module hooks with inputs that need no gradient).
    warnings.filterwarnings("ignore", message="Secure RNG turned off")
    warnings.filterwarnings("ignore", message="Full backward hook is firing")
    load_before = os.getloadavg()[0]

    check = correctness()
    print(f"correctness (MLP, batch 64, {check['num_clipped']}/64 clipped, noise off): clipped-sum relative error "
          f"Opacus-hooks vs jaxfl-vmap {check['relative_error_opacus_hooks_vs_jaxfl_vmap']:.2e}, Opacus-ghost vs "
          f"jaxfl-vmap {check['relative_error_opacus_ghost_vs_jaxfl_vmap']:.2e}"
          + f", jaxfl-ghost vs jaxfl-vmap {check['relative_error_jaxfl_ghost_vs_jaxfl_vmap']:.2e}"
          + "; torch mirrors' logits " + ", ".join(f"{k} {v:.1e}" for k, v in
                                                   check["torch_mirror_logits_relative_error"].items())
          + "; conv models' clipped sums (batch 8), Opacus vs jaxfl-vmap " + ", ".join(
              f"{k} {mode} {v:.1e}" for k, modes in check["conv_clipped_sum_relative_error_opacus_vs_jaxfl_vmap"]
              .items() for mode, v in modes.items()), flush=True)

    jax_methods = {"jaxfl vmap": explicit_clipped_grad_sum, "jaxfl unsliced": functools.partial(
        clipped_grad_sum, microbatch=None), "jaxfl ghost": clipped_grad_sum}
    methods = ["opacus hooks", "opacus ghost"] + list(jax_methods)
    every_method = methods + ["jaxfl untiled"]
    rows, ratios = [], {}
    header = f"{'model':24s} {'batch':>5s} {'steps':>5s} " + " ".join(f"{m:>14s}" for m in every_method)
    print("samples/s (best of %d), DP-SGD step: clip C=1, sum, noise sigma=1, SGD" % args.repeats)
    print(header, flush=True)
    for name in args.models:
        for batch in args.batches:
            steps = max(args.min_steps, args.samples // batch)
            runners = {m: opacus_runner(name, m.split()[1], batch, steps) if m.startswith("opacus")
                       else jax_runner(name, jax_methods[m], batch, steps) for m in methods}
            module, shape, _ = MODELS[name]
            params = nets.init_params(module, jax.random.PRNGKey(0), shape)
            if has_tiled_convolution(params):
                with untiled_convolutions():
                    runners["jaxfl untiled"] = jax_runner(name, clipped_grad_sum, batch, steps)
                    runners["jaxfl untiled"]()   # traced (and compiled) here, untiled
            best = interleaved_best_seconds(runners, args.repeats)   # a warm-up call each, then interleaved
            del runners
            sps = {m: batch * steps / best[m] for m in best}
            xb, yb = (a[0] for a in make_batches(name, batch, 1))
            slices = microbatch_size(jax_loss(name), params, xb, yb)
            for m in sps:
                rows.append({"model": name, "batch": batch, "method": m, "steps_per_call": steps,
                             "seconds_per_step": best[m] / steps, "samples_per_second": sps[m]}
                            | ({"microbatch": slices} if m == "jaxfl ghost" else {}))
            best_opacus = max(sps["opacus hooks"], sps["opacus ghost"])
            ratios.setdefault(name, {})[str(batch)] = {
                m: {"vs_opacus_ghost": sps[m] / sps["opacus ghost"],
                    "vs_opacus_hooks_weaker_baseline": sps[m] / sps["opacus hooks"],
                    "vs_faster_opacus_mode": sps[m] / best_opacus}
                for m in sps if m.startswith("jaxfl")}
            print(f"{TITLES[name]:24s} {batch:5d} {steps:5d} " + " ".join(
                f"{sps[m]:14,.0f}" if m in sps else f"{'-':>14s}" for m in every_method), flush=True)

    print("\nratio jaxfl / Opacus-ghost samples/s (headline; > 1: jaxfl faster) [and / Opacus-hooks, weaker]")
    for name, per_batch in ratios.items():
        for batch, per_method in per_batch.items():
            print(f"{TITLES[name]:24s} {int(batch):5d}       " + "  ".join(
                f"{m}: {r['vs_opacus_ghost']:6.2f}x [{r['vs_opacus_hooks_weaker_baseline']:6.2f}x]"
                for m, r in per_method.items()))

    record = {
        "benchmark": "clipping_vs_opacus",
        "machine": {**processor(), "cores": os.cpu_count(), "device": jax.default_backend(),
                    "jax": jax.__version__, "torch": torch.__version__, "opacus": opacus.__version__,
                    "torch_threads": torch.get_num_threads(), "torch_interop_threads": torch.get_num_interop_threads(),
                    "jax_threads": "XLA:CPU default (all cores)",
                    "load_average_1min": {"start": load_before, "end": os.getloadavg()[0]}},
        "step": {"clip_norm": CLIP, "noise_multiplier": SIGMA, "lr": LR,
                 "optimizer": "plain SGD on (sum + noise) / batch",
                 "opacus": "make_private(noise_multiplier=1.0, max_grad_norm=1.0, poisson_sampling=False, "
                           "loss_reduction='mean'), torch.optim.SGD, pre-made batches in a Python loop",
                 "jaxfl": "explicit_clipped_grad_sum (vmap) / clipped_grad_sum (ghost: its defaults, ghost norms and "
                          "microbatch='auto'; unsliced: microbatch=None; untiled: narrow convolutions as one "
                          "im2col product, as before the width tiling) + jax.random.normal noise + SGD, "
                          "jitted, "
                          "steps in one lax.scan"},
        "repeats": args.repeats, "samples_per_call": args.samples,
        "methods": every_method,
        "ratio": min(r["jaxfl ghost"]["vs_opacus_ghost"] for per_batch in ratios.values() for r in per_batch.values()),
        "baseline": "Opacus ghost clipping (grad_sample_mode='ghost'), same models, batches, clip, noise and threads; "
                    "ratio = the smallest over models and batches of jaxfl's default clipping (ghost norms, batches in "
                    "cache-sized microbatch slices on CPU) samples/s "
                    "/ Opacus-ghost samples/s (> 1: jaxfl faster at every row)",
        "headline": "ratios[model][batch][jaxfl method]['vs_opacus_ghost'] (jaxfl / Opacus-ghost samples/s; > 1: "
                    "jaxfl faster); 'vs_opacus_hooks_weaker_baseline' is the same against Opacus' standard hooks mode",
        "ratios": ratios,
        "rows": rows,
        "correctness": check,
    }
    out = write_benchmark(record, args.out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    source_revision()   # the checkout as it is now: write_benchmark records it at the end
    raise SystemExit(main())
