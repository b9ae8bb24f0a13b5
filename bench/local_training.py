"""Local training of conv models on CPU: the loop-friendly convolution and one client at a time.

Side by side in this process, each program jitted and timed after a warm-up (best of ``--repeats``):

- ``step``: one LeNet-5 SGD step (batch 20) inside a ``lax.scan`` of 43 steps (one epoch of the largest
  MNIST client), with flax's default ``lax`` convolution (``MnistLeNet5(lax_conv=True)``) and with
  :mod:`jaxfl.models.conv` (the default). XLA:CPU runs ``lax``'s kernel-gradient convolution slowly in
  loop bodies (jax-ml/jax#12868).
- ``round``: one round of ``dprec/mnist`` (100 clients, Dirichlet(1) split, 10 per round, LeNet-5, one
  local epoch of batch 20) for DP-FedAvg and DP-REC, three ways: ``lax conv, vmap`` (the clients under one
  ``vmap`` with flax's default convolution, what the rounds ran before), ``vmap`` (jaxfl's convolution)
  and ``one at a time`` (jaxfl's convolution, ``clients_per_pass=1``: each client's loop stops at its own
  step count and convolutions are not grouped).

- ``vs_pytorch``: the baseline outside jaxfl, PyTorch on the same CPU. Plain SGD steps (forward, backward,
  update; mean cross-entropy, learning rate 0.01) of the same LeNet-5 and of Lowy et al.'s CIFAR CNN
  (``nets.CifarCNN``), mirrored layer by layer in torch (VALID convolutions, ReLU, 2x2 max pooling, NCHW
  input converted once outside the timing, JAX's initial weights copied in), at batch 20 and 64: JAX runs
  the 43 steps in one jitted ``lax.scan`` (jaxfl's convolution; each step's gradient by
  :func:`jaxfl.engine.local.mean_loss_and_grad`, what ``local_epochs`` runs, in its default slices of the
  batch, ``jaxfl.privacy.microbatch``; the row ``unsliced`` takes the whole batch at once), torch a Python loop of 43
  steps over the same pre-made batches with ``torch.set_num_threads(os.cpu_count())`` (JAX uses all cores
  too). Warm-up excluded, the two interleaved in every repeat, best of ``--step-repeats``. ``ratio`` =
  jaxfl samples/s / torch samples/s (> 1: jaxfl faster); the headline ``ratio`` is LeNet-5 at batch 20.
  For a model with a convolution of fewer than ``jaxfl.models.conv.PRODUCT_COLUMNS`` output channels (the
  CIFAR CNN's first layer) the row ``untiled`` runs the same steps with that layer as one narrow im2col
  product, as jaxfl ran it before the width tiling (``conv.width_tile``); ``tiling_speedup`` = jaxfl
  samples/s / untiled samples/s.
  Needs the ``bench`` extra (torch); without it the benchmark prints one line and exits.

``speedup`` = old seconds / new seconds. Usage:
python bench/local_training.py [--repeats 2] [--step-repeats 5] [--skip-rounds]
    [--out bench/results/local_training.json]
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import optax

from jaxfl.algorithms.dp_fedavg import dp_fedavg
from jaxfl.algorithms.dprec import dp_rec
from jaxfl.compression import rec
from jaxfl.data.federated import FederatedData
from jaxfl.engine import local
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: its paper homes (papers/)
from papers.dprec import data as dprec_data
from jaxfl.studies.provenance import (best_seconds, interleaved_best_seconds, machine as processor, source_revision,
                                      write_benchmark)
from jaxfl.models import nets
from jaxfl.privacy.microbatch import microbatch_size
from jaxfl.engine.participation import poisson, with_replacement

STEPS, BATCH, CLIENTS = 43, 20, 10
MISSING_EXTRA = "needs torch: pip install -e '.[bench]'"
# vs_pytorch rows: (name in bench/clipping_vs_opacus.py's MODELS, title, batch)
TORCH_ROWS = [("lenet5", "LeNet-5", 20), ("lenet5", "LeNet-5", 64),
              ("cifar", "CifarCNN", 20), ("cifar", "CifarCNN", 64)]


def step_seconds(module, repeats: int) -> float:
    params = nets.init_params(module, jax.random.PRNGKey(0), dprec_data.IMAGE_SHAPE)
    x = jax.random.normal(jax.random.PRNGKey(1), (STEPS * BATCH,) + dprec_data.IMAGE_SHAPE)
    y = jnp.arange(STEPS * BATCH) % 10
    loss = lambda p, xb, yb: jnp.mean(nets.softmax_cross_entropy(module.apply(p, xb), yb))

    def epoch(p):
        def step(p, i):
            xb, yb = (jax.lax.dynamic_slice_in_dim(a, i * BATCH, BATCH) for a in (x, y))
            return jax.tree_util.tree_map(lambda w, g: w - 0.01 * g, p, jax.grad(loss)(p, xb, yb)), None
        return jax.lax.scan(step, p, jnp.arange(STEPS))[0]

    return best_seconds(jax.jit(epoch), params, repeats=repeats) / STEPS


def torch_mirrors():
    """bench/clipping_vs_opacus.py as a module: its torch mirrors of the flax models and their weight copy."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import clipping_vs_opacus
    return clipping_vs_opacus


def jax_epoch(module, input_shape, classes: int, batch: int, microbatch="auto"):
    """A zero-argument callable: ``STEPS`` jitted SGD steps of batch ``batch`` in one ``lax.scan``, and the
    initial parameters and data it uses. Each step's gradient is jaxfl's local-training gradient
    (:func:`jaxfl.engine.local.mean_loss_and_grad`; ``microbatch``: its slicing, ``None`` for one slice)."""
    params = nets.init_params(module, jax.random.PRNGKey(0), input_shape)
    x = jax.random.normal(jax.random.PRNGKey(1), (STEPS * batch,) + tuple(input_shape))
    y = jnp.arange(STEPS * batch) % classes
    loss = nets.per_example_loss(module, nets.softmax_cross_entropy)
    mask = jnp.ones((batch,), jnp.float32)

    def epoch(p, x, y):
        def step(p, i):
            xb, yb = (jax.lax.dynamic_slice_in_dim(a, i * batch, batch) for a in (x, y))
            _, g = local.mean_loss_and_grad(loss, p, xb, yb, mask, microbatch=microbatch)
            return jax.tree_util.tree_map(lambda w, g: w - 0.01 * g, p, g), None
        return jax.lax.scan(step, p, jnp.arange(STEPS))[0]

    fn = jax.jit(epoch)
    return (lambda: jax.block_until_ready(fn(params, x, y))), params, x, y


def torch_epoch(mirrors, name: str, params, input_shape, batch: int, x, y):
    """A zero-argument callable: ``STEPS`` PyTorch SGD steps over the same batches, from the same weights."""
    import torch
    import torch.nn.functional as F

    model = mirrors.torch_model(name)
    mirrors.copy_flax_params(model, params, input_shape)
    model.train()
    xs = mirrors.to_torch(x).split(batch)                     # NHWC -> NCHW once, outside the timing
    ys = mirrors.to_torch(y).long().split(batch)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def run():
        for xb, yb in zip(xs, ys):
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(xb), yb).backward()
            optimizer.step()

    return run


def vs_pytorch(repeats: int) -> dict:
    import torch

    mirrors = torch_mirrors()
    torch.set_num_threads(os.cpu_count())
    rows = []
    for name, title, batch in TORCH_ROWS:
        module, input_shape, classes = mirrors.MODELS[name]
        run_jax, params, x, y = jax_epoch(module, input_shape, classes, batch)
        runs = {"jaxfl": run_jax, "jaxfl unsliced": jax_epoch(module, input_shape, classes, batch, None)[0],
                "torch": torch_epoch(mirrors, name, params, input_shape, batch, x, y)}
        if mirrors.has_tiled_convolution(params):
            with mirrors.untiled_convolutions():
                runs["jaxfl untiled"] = jax_epoch(module, input_shape, classes, batch)[0]
                runs["jaxfl untiled"]()   # traced (and compiled) here, untiled
        sps = {way: STEPS * batch / seconds for way, seconds in interleaved_best_seconds(runs, repeats).items()}
        slices = microbatch_size(nets.per_example_loss(module, nets.softmax_cross_entropy), params, x[:batch],
                                 y[:batch])
        rows.append({"model": title, "batch": batch, "steps": STEPS, "jaxfl_microbatch": slices,
                     "jaxfl_samples_per_second": sps["jaxfl"], "torch_samples_per_second": sps["torch"],
                     "ratio": sps["jaxfl"] / sps["torch"],
                     "jaxfl_unsliced_samples_per_second": sps["jaxfl unsliced"],
                     "ratio_unsliced": sps["jaxfl unsliced"] / sps["torch"]})
        if "jaxfl untiled" in sps:
            rows[-1].update(jaxfl_untiled_samples_per_second=sps["jaxfl untiled"],
                            tiling_speedup=sps["jaxfl"] / sps["jaxfl untiled"])
        untiled = f", untiled {sps['jaxfl untiled']:8,.0f}" if "jaxfl untiled" in sps else ""
        print(f"{title:9s} batch {batch:3d}: jaxfl {sps['jaxfl']:8,.0f} samples/s (slices of {slices}), unsliced "
              f"{sps['jaxfl unsliced']:8,.0f}{untiled}, torch {sps['torch']:8,.0f} samples/s, ratio jaxfl/torch "
              f"{rows[-1]['ratio']:.2f} (unsliced {rows[-1]['ratio_unsliced']:.2f})", flush=True)
    return {"torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "torch_interop_threads": torch.get_num_interop_threads(), "jax_threads": "XLA:CPU default (all cores)",
            "repeats": repeats, "rows": rows}


def round_seconds(method: str, module, per_pass, train, repeats: int) -> float:
    loss = nets.per_example_loss(module, nets.softmax_cross_entropy)
    params = nets.init_params(module, jax.random.PRNGKey(0), dprec_data.IMAGE_SHAPE)
    n = train.num_silos
    if method == "dp_fedavg":
        algo = dp_fedavg(loss, client_opt=optax.sgd(0.01), local_epochs=1, batch_size=BATCH,
                         participation=poisson(CLIENTS / n),
                         expected_clients=CLIENTS,
                         clip_norm=0.01, noise_multiplier=3.8, server_opt=optax.adam(2e-3),
                         clients_per_pass=per_pass or CLIENTS)
    else:
        algo = dp_rec(loss, params=params, client_opt=optax.sgd(0.01), participation=with_replacement(CLIENTS),
                      batch_size=BATCH,
                      prior_std=0.005, clip_multiplier=0.545, layout=rec.per_tensor(params, 7),
                      server_opt=optax.adam(2e-3), clients_per_pass=per_pass)
    state = algo.init(params)
    round_fn = jax.jit(algo.round)
    return best_seconds(lambda: round_fn(state, train, jax.random.PRNGKey(1))[0], repeats=repeats)


def measure_rounds(repeats: int) -> dict:
    data = dprec_data.mnist_clients().train
    train = FederatedData(jnp.asarray(data.x), jnp.asarray(data.y), jnp.asarray(data.counts))
    ways = {"lax conv, vmap": (nets.MnistLeNet5(lax_conv=True), None), "vmap": (nets.MnistLeNet5(), None),
            "one at a time": (nets.MnistLeNet5(), 1)}
    rounds = {}
    for method in ("dp_fedavg", "dp_rec"):
        secs = {way: round_seconds(method, module, per_pass, train, repeats)
                for way, (module, per_pass) in ways.items()}
        rounds[method] = {"seconds": secs, "speedup": secs["lax conv, vmap"] / secs["one at a time"]}
        print(f"{method} round ({CLIENTS} clients): " + ", ".join(f"{w} {s:.1f} s" for w, s in secs.items())
              + f"; speedup {rounds[method]['speedup']:.2f}", flush=True)
    return rounds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--step-repeats", type=int, default=5, help="repeats of the vs_pytorch rows")
    parser.add_argument("--skip-rounds", action="store_true", help="leave out the (slow) round measurements")
    parser.add_argument("--out", default="bench/results/local_training.json")
    args = parser.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print(f"local_training skipped: torch is not installed ({MISSING_EXTRA})")
        return 0

    baseline = vs_pytorch(args.step_repeats)
    headline = baseline["rows"][0]

    steps = {"lax_conv": step_seconds(nets.MnistLeNet5(lax_conv=True), args.repeats),
             "jaxfl_conv": step_seconds(nets.MnistLeNet5(), args.repeats)}
    print(f"LeNet-5 step (batch {BATCH}) in a scan: lax conv {1e3 * steps['lax_conv']:.1f} ms, jaxfl conv "
          f"{1e3 * steps['jaxfl_conv']:.1f} ms, speedup {steps['lax_conv'] / steps['jaxfl_conv']:.2f}", flush=True)

    rounds = None if args.skip_rounds else measure_rounds(args.repeats)

    record = {
        "benchmark": "local_training",
        "machine": {**processor(), "cores": os.cpu_count(),
                    "device": jax.devices()[0].platform, "jax": jax.__version__, "torch": baseline["torch"]},
        "ratio": headline["ratio"],
        "baseline": f"PyTorch (CPU, {baseline['torch_threads']} threads): samples/s of plain SGD steps of the same "
                    f"{headline['model']} at batch {headline['batch']}, {STEPS} steps; ratio = jaxfl samples/s / "
                    "torch samples/s (> 1: jaxfl faster); more rows in vs_pytorch",
        "vs_pytorch": baseline,
        "step_seconds": steps, "step_speedup": steps["lax_conv"] / steps["jaxfl_conv"],
        "round": rounds,
        "notes": "step: one LeNet-5 SGD step of batch 20 inside lax.scan. round: one dprec/mnist round of 10 clients; "
                 "speedup = 'lax conv, vmap' seconds / 'one at a time' seconds (jaxfl conv, clients_per_pass=1). "
                 "vs_pytorch: jaxfl (jitted lax.scan of 43 SGD steps, gradients by local.mean_loss_and_grad in its "
                 "default microbatch slices; 'unsliced': the whole batch at once; 'untiled': narrow convolutions as "
                 "one im2col product, as before the width tiling) against PyTorch eager (a loop of "
                 "43 steps), "
                 "same model, batch and initial weights, interleaved, best of repeats.",
    }
    out = write_benchmark(record, args.out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    source_revision()   # the checkout as it is now: write_benchmark records it at the end
    raise SystemExit(main())
