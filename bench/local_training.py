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

``speedup`` = old seconds / new seconds. Usage:
python bench/local_training.py [--repeats 2] [--out bench/results/local_training.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import optax

from jaxfl.algorithms.dp_fedavg import dp_fedavg
from jaxfl.algorithms.dprec import dp_rec
from jaxfl.compression import rec
from jaxfl.data.federated import FederatedData
from jaxfl.experiments import dprec_data
from jaxfl.models import nets

STEPS, BATCH, CLIENTS = 43, 20, 10


def best_seconds(fn, args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - start)
    return best


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

    return best_seconds(jax.jit(epoch), (params,), repeats) / STEPS


def round_seconds(method: str, module, per_pass, train, repeats: int) -> float:
    loss = nets.per_example_loss(module, nets.softmax_cross_entropy)
    params = nets.init_params(module, jax.random.PRNGKey(0), dprec_data.IMAGE_SHAPE)
    n = train.num_silos
    if method == "dp_fedavg":
        algo = dp_fedavg(loss, client_opt=optax.sgd(0.01), local_epochs=1, batch_size=BATCH, client_rate=CLIENTS / n,
                         clip_norm=0.01, noise_multiplier=3.8, server_opt=optax.adam(2e-3),
                         clients_per_pass=per_pass or CLIENTS)
    else:
        algo = dp_rec(loss, params=params, client_opt=optax.sgd(0.01), clients_per_round=CLIENTS, batch_size=BATCH,
                      prior_std=0.005, clip_multiplier=0.545, layout=rec.per_tensor(params, 7),
                      server_opt=optax.adam(2e-3), clients_per_pass=per_pass)
    state = algo.init(params)
    round_fn = jax.jit(algo.round)
    return best_seconds(lambda: round_fn(state, train, jax.random.PRNGKey(1))[0], (), repeats)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default="bench/results/local_training.json")
    args = parser.parse_args(argv)

    steps = {"lax_conv": step_seconds(nets.MnistLeNet5(lax_conv=True), args.repeats),
             "jaxfl_conv": step_seconds(nets.MnistLeNet5(), args.repeats)}
    print(f"LeNet-5 step (batch {BATCH}) in a scan: lax conv {1e3 * steps['lax_conv']:.1f} ms, jaxfl conv "
          f"{1e3 * steps['jaxfl_conv']:.1f} ms, speedup {steps['lax_conv'] / steps['jaxfl_conv']:.2f}", flush=True)

    data = dprec_data.mnist_clients().train
    train = FederatedData(jnp.asarray(data.x), jnp.asarray(data.y), jnp.asarray(data.counts))
    ways = {"lax conv, vmap": (nets.MnistLeNet5(lax_conv=True), None), "vmap": (nets.MnistLeNet5(), None),
            "one at a time": (nets.MnistLeNet5(), 1)}
    rounds = {}
    for method in ("dp_fedavg", "dp_rec"):
        secs = {way: round_seconds(method, module, per_pass, train, args.repeats)
                for way, (module, per_pass) in ways.items()}
        rounds[method] = {"seconds": secs, "speedup": secs["lax conv, vmap"] / secs["one at a time"]}
        print(f"{method} round ({CLIENTS} clients): " + ", ".join(f"{w} {s:.1f} s" for w, s in secs.items())
              + f"; speedup {rounds[method]['speedup']:.2f}", flush=True)

    record = {
        "benchmark": "local_training",
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "device": jax.devices()[0].platform, "jax": jax.__version__},
        "step_seconds": steps, "step_speedup": steps["lax_conv"] / steps["jaxfl_conv"], "round": rounds,
        "notes": "step: one LeNet-5 SGD step of batch 20 inside lax.scan. round: one dprec/mnist round of 10 clients; "
                 "speedup = 'lax conv, vmap' seconds / 'one at a time' seconds (jaxfl conv, clients_per_pass=1).",
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
