"""The DP-SGD MNIST tutorial through jaxfl's documented call against Opacus on the same CPU.

The run TF-Privacy's and Opacus's tutorials teach: the 26,010-parameter CNN (conv 16 8x8 stride 2 pad 3,
max pool 2 stride 1, conv 32 4x4 stride 2, max pool 2 stride 1, dense 32, dense 10), written here in plain
flax layers (``nn.Conv``, ``nn.max_pool``, ``nn.Dense``) and in plain PyTorch, on the 60,000 MNIST training
images, Poisson sampling of expected batch 256, clip 1.5, noise multiplier 1.3, SGD at learning rate 0.25.

- ``jaxfl``: ``jaxfl.dp_sgd(...)`` trained by ``jaxfl.train(..., rounds=S)`` on ``from_silos([(x, y)])``, the
  calls the README and the DP-SGD guide show (nothing tuned: default chunk, microbatch slices, ghost norms,
  the CPU rewrite of convolutions and pooling). A ``train`` call compiles its program; steady-state seconds per
  step are ``(t(S2) - t(S1)) / (S2 - S1)`` from two calls, compile is ``t(S1) - S1 * step`` (its own column).
- ``opacus ghost`` / ``opacus hooks``: ``PrivacyEngine().make_private(..., poisson_sampling=True,
  grad_sample_mode=...)`` over a ``DataLoader`` of the same tensors, timed over ``S2 - S1`` steps after
  ``S1`` warm-up steps (the data loader's Poisson sampling and collation included, as a user runs it);
  ``torch.set_num_threads(os.cpu_count())``.

Samples per second count the expected batch (256) per step on every side. The sides are interleaved in every
repeat and the best of ``--repeats`` is kept. ``ratio`` = jaxfl samples/s / Opacus-ghost samples/s (> 1: jaxfl
faster); Opacus-hooks is a row. Needs the ``bench`` extra (torch, opacus); without it one line, exit 0.

Usage: python bench/dp_sgd_mnist.py [--repeats 2] [--steps 40 200] [--out bench/results/dp_sgd_mnist.json]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import flax.linen as nn
import jax
import numpy as np
import optax

import jaxfl
from jaxfl.data import load_mnist
from jaxfl.studies.provenance import interleaved_best_records, machine as processor, write_benchmark

BATCH, RECORDS, CLIP, SIGMA, LR, DELTA = 256, 60000, 1.5, 1.3, 0.25, 1e-5
OUT = Path(__file__).resolve().parent / "results" / "dp_sgd_mnist.json"


class TutorialCNN(nn.Module):
    """The tutorials' MNIST CNN in plain flax layers (NHWC)."""

    @nn.compact
    def __call__(self, x):
        x = nn.max_pool(nn.relu(nn.Conv(16, (8, 8), strides=2, padding=3)(x)), (2, 2), strides=(1, 1))
        x = nn.max_pool(nn.relu(nn.Conv(32, (4, 4), strides=2, padding="VALID")(x)), (2, 2), strides=(1, 1))
        x = nn.relu(nn.Dense(32)(x.reshape(x.shape[:-3] + (-1,))))
        return nn.Dense(10)(x)


def mnist():
    x, y = load_mnist("train")
    return ((x.astype(np.float32) / 255.0 - 0.1307) / 0.3081)[..., None], y


def jaxfl_side(x, y, steps):
    model = TutorialCNN()
    params = model.init(jax.random.key(0), x[:1])["params"]

    def loss(p, xi, yi):
        return optax.softmax_cross_entropy_with_integer_labels(model.apply({"params": p}, xi), yi)

    algorithm = jaxfl.dp_sgd(loss, optimizer=optax.sgd(LR), expected_batch_size=BATCH, num_records=RECORDS,
                             clip_norm=CLIP, noise_multiplier=SIGMA)
    data = jaxfl.from_silos([(x, y)])

    def run():
        seconds = []
        for s in steps:
            start = time.perf_counter()
            result = jaxfl.train(algorithm, data, params, rounds=s, delta=DELTA, progress=False)
            jax.block_until_ready(result.params)
            seconds.append(time.perf_counter() - start)
        step = (seconds[1] - seconds[0]) / (steps[1] - steps[0])
        return {"seconds_per_step": step, "compile_seconds": seconds[0] - steps[0] * step,
                "epsilon_after_steps": [float(result.epsilon), steps[1]]}

    return run


def opacus_side(x, y, steps, mode):
    import torch
    from opacus import PrivacyEngine
    from torch import nn as tnn
    from torch.nn import functional as F
    from torch.utils.data import DataLoader, TensorDataset

    class SampleConvNet(tnn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.conv2 = tnn.Conv2d(1, 16, 8, 2, padding=3), tnn.Conv2d(16, 32, 4, 2)
            self.fc1, self.fc2 = tnn.Linear(32 * 4 * 4, 32), tnn.Linear(32, 10)

        def forward(self, v):
            v = F.max_pool2d(F.relu(self.conv1(v)), 2, 1)
            v = F.max_pool2d(F.relu(self.conv2(v)), 2, 1)
            return self.fc2(F.relu(self.fc1(v.reshape(-1, 32 * 4 * 4))))

    torch.set_num_threads(os.cpu_count())
    dataset = TensorDataset(torch.tensor(x.transpose(0, 3, 1, 2).copy()), torch.tensor(y).long())

    def run():
        torch.manual_seed(0)
        model = SampleConvNet()
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        criterion = tnn.CrossEntropyLoss()
        loader = DataLoader(dataset, batch_size=BATCH)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if mode == "ghost":
                model, optimizer, criterion, loader = PrivacyEngine().make_private(
                    module=model, optimizer=optimizer, criterion=criterion, data_loader=loader,
                    noise_multiplier=SIGMA, max_grad_norm=CLIP, poisson_sampling=True, grad_sample_mode="ghost")
            else:
                model, optimizer, loader = PrivacyEngine().make_private(
                    module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=SIGMA,
                    max_grad_norm=CLIP, poisson_sampling=True, grad_sample_mode="hooks")
            start = None
            for i, (xb, yb) in enumerate(loader):
                if i == steps[0]:
                    start = time.perf_counter()
                if i == steps[1]:
                    break
                optimizer.zero_grad(set_to_none=True)
                criterion(model(xb), yb).backward()
                optimizer.step()
        return {"seconds_per_step": (time.perf_counter() - start) / (steps[1] - steps[0])}

    return run


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, nargs=2, default=[40, 200])
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    try:
        import opacus  # noqa: F401
        import torch  # noqa: F401
    except ImportError:
        print("dp_sgd_mnist: needs the bench extra (pip install -e '.[bench]'); skipped")
        return 0
    x, y = mnist()
    sides = {"jaxfl": jaxfl_side(x, y, args.steps), "opacus ghost": opacus_side(x, y, args.steps, "ghost"),
             "opacus hooks": opacus_side(x, y, args.steps, "hooks")}
    best = interleaved_best_records(sides, args.repeats, "seconds_per_step")
    rows = [{"side": name, **got, "samples_per_second": BATCH / got["seconds_per_step"]} for name, got in best.items()]
    per_second = {row["side"]: row["samples_per_second"] for row in rows}
    ratio = per_second["jaxfl"] / per_second["opacus ghost"]
    record = {
        "benchmark": "dp_sgd_mnist",
        "machine": {**processor(), "cores": os.cpu_count(), "device": jax.default_backend(),
                    "jax": jax.__version__, "torch": __import__("torch").__version__,
                    "opacus": __import__("opacus").__version__},
        "setting": {"model": "tutorial CNN, 26,010 parameters, plain flax / torch layers", "records": RECORDS,
                    "expected_batch_size": BATCH, "clip_norm": CLIP, "noise_multiplier": SIGMA,
                    "learning_rate": LR, "steps": args.steps, "repeats": args.repeats},
        "rows": rows,
        "ratio": ratio,
        "ratio_vs_opacus_hooks": per_second["jaxfl"] / per_second["opacus hooks"],
        "baseline": ("Opacus ghost clipping (make_private(..., poisson_sampling=True, grad_sample_mode='ghost')), the "
                     "tutorial CNN, MNIST, expected batch 256, same clip, noise and threads; ratio = jaxfl.dp_sgd + "
                     "jaxfl.train samples/s (plain flax layers, defaults, steady state; compile in its own column) / "
                     "Opacus-ghost samples/s"),
    }
    path = write_benchmark(record, args.out)
    for row in rows:
        print(f"{row['side']:14s} {row['samples_per_second']:8.0f} samples/s")
    print(f"ratio jaxfl / opacus ghost = {ratio:.2f}  -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
