"""van Dijk et al.'s asynchronous protocol with thousands of simulated clients: jaxfl's compiled slices against NumPy.

One run of :func:`jaxfl.algorithms.async_sgd` (logistic regression, d = 123 as a9a, 64 synthetic records per
client, 10 rounds of 8 single-record steps per client, clipping 1 and noise 1 per round; client speeds
lognormal(0, 0.3), delays of mean 5 steps, lookahead 1, a time grid of 4 steps; step size 0.5 / clients, as
the server sums) for each number of clients.
Both sides execute the *same* timeline (:func:`jaxfl.algorithms.async_timeline.simulate`, timed separately:
it is shared): jaxfl as one compiled program over the slices (clients vmapped; the ``lax.scan`` of
:func:`jaxfl.engine.driver.run_rounds` that ``train`` runs between evaluations), NumPy as the strongest loop
a user would write on it: per slice, the local steps vectorised over the clients (one [clients, d] gradient
per step), the noise for the senders in one call, the server's messages applied in arrival order, the
accepted broadcasts gathered at once.

Headline ``ratio``: at the largest client count, NumPy seconds / jaxfl seconds (compiled program, compile
excluded; the compile time is its own column). Rows give single-record steps per second of each side.

Usage: python bench/async_clients.py [--clients 16 128 1024 4096] [--repeats 3] [--out ...]
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxfl.algorithms import async_dp, async_schedules, async_timeline
from jaxfl.data.federated import FederatedData
from jaxfl.engine.driver import run_rounds
from jaxfl.engine.protocol import initial_state
from jaxfl.studies.provenance import best_seconds, machine as processor, source_revision, write_benchmark

D, RECORDS, ROUNDS, SIZE, CLIP, SIGMA, STEP = 123, 64, 10, 8, 1.0, 1.0, 0.5
"""Per-step size ``STEP / clients``: the server sums every client's update, so the run stays bounded."""


def logistic(p, x, y):
    z = x @ p["w"] + p["b"]
    return jnp.logaddexp(0.0, z) - y * z


def problem(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)  # host-rng-ok: synthetic benchmark data
    x = (rng.random((n, RECORDS, D)) < 0.1).astype(np.float32)
    y = (rng.random((n, RECORDS)) < 0.3).astype(np.float32)
    return x, y


def numpy_run(timeline, x, y, seed: int = 0) -> np.ndarray:
    """The same timeline in NumPy, vectorised over clients; returns the server's final weights [d + 1]."""
    rng = np.random.default_rng(seed)  # host-rng-ok: the NumPy baseline's own generator
    n = x.shape[0]
    eta = STEP / n
    sched = timeline.schedule()
    w = np.zeros((n, D + 1), np.float32)           # local models (bias last)
    partial = np.zeros_like(w)
    outbox = np.zeros((n, timeline.outbox, D + 1), np.float32)
    rnd = np.zeros(n, np.int64)
    v = np.zeros(D + 1, np.float32)
    ring = np.zeros((timeline.ring, D + 1), np.float32)
    rows = np.arange(n)
    xb = np.concatenate([x, np.ones(x.shape[:2] + (1,), np.float32)], axis=2)
    for j in range(timeline.num_slices):
        steps = sched["steps"][j]
        for h in range(int(steps.max())):
            active = steps > h
            idx = rng.integers(0, RECORDS, n)
            xi, yi = xb[rows, idx], y[rows, idx]
            z = np.einsum("nd,nd->n", xi, w)
            g = (1.0 / (1.0 + np.exp(-z)) - yi)[:, None] * xi
            g *= np.minimum(1.0, CLIP / np.maximum(np.linalg.norm(g, axis=1), 1e-30))[:, None]
            g *= (eta * active)[:, None]
            w -= g
            partial += g
        sends = sched["sends"][j]
        if sends.any():
            noise = eta * SIGMA * CLIP * rng.standard_normal((int(sends.sum()), D + 1), dtype=np.float32)
            who = np.flatnonzero(sends)
            w[who] -= noise
            partial[who] += noise
            outbox[who, rnd[who] % timeline.outbox] = partial[who]
            partial[who] = 0.0
            rnd[who] += 1
        for c, i, after in zip(sched["apply_client"][j], sched["apply_round"][j], sched["broadcast_after"][j]):
            if c >= 0:
                v -= outbox[c, i % timeline.outbox]
            if after >= 0:
                ring[after % timeline.ring] = v
        accept = sched["accept"][j]
        who = np.flatnonzero(accept >= 0)
        w[who] = ring[accept[who] % timeline.ring] - partial[who]
    return v


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[16, 128, 1024, 4096])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "async_clients.json"))
    args = parser.parse_args()
    params = {"w": jnp.zeros(D), "b": jnp.zeros(())}
    rows = []
    for n in args.clients:
        eta = async_schedules.step_size("constant", STEP / n)
        x, y = problem(n)
        data = FederatedData(jnp.asarray(x), jnp.asarray(y), jnp.full(n, RECORDS, jnp.int32))
        sizes = np.full((ROUNDS, n), SIZE)
        timing = async_timeline.draw_timing(n, ROUNDS, seed=0, speed_spread=0.3, mean_delay=5.0)
        t0 = time.perf_counter()
        timeline = async_timeline.simulate(sizes, timing, lookahead=1, quantum=4.0)
        simulate_s = time.perf_counter() - t0
        algorithm = async_dp.async_sgd(logistic, timeline, step_size=eta, clip_norm=CLIP, noise_multiplier=SIGMA)

        program = jax.jit(lambda st, d, k: run_rounds(algorithm, st, d, k, 0, timeline.num_slices))
        state = initial_state(algorithm, params, n)

        def run():   # the program jaxfl.train compiles for an uninterrupted run (train jits one per call)
            jax.block_until_ready(program(state, data, jax.random.key(0)))

        t0 = time.perf_counter()
        run()
        first = time.perf_counter() - t0
        jaxfl_s = best_seconds(run, repeats=args.repeats, warmup=False)
        numpy_s = best_seconds(lambda: numpy_run(timeline, x, y), repeats=args.repeats, warmup=False)
        steps = int(sizes.sum())
        rows.append({"clients": n, "slices": timeline.num_slices, "steps": steps, "simulate_seconds": simulate_s,
                     "jaxfl_seconds": jaxfl_s, "jaxfl_compile_seconds": max(first - jaxfl_s, 0.0),
                     "numpy_seconds": numpy_s, "jaxfl_steps_per_second": steps / jaxfl_s,
                     "numpy_steps_per_second": steps / numpy_s, "ratio": numpy_s / jaxfl_s})
        print(f"{n:6d} clients, {timeline.num_slices:4d} slices, {steps:8,d} steps: simulate {simulate_s:6.2f} s, "
              f"jaxfl {jaxfl_s:6.2f} s (+{rows[-1]['jaxfl_compile_seconds']:.1f} s compile), numpy {numpy_s:6.2f} s, "
              f"ratio {rows[-1]['ratio']:.2f}x", flush=True)
    record = {
        "benchmark": "async_clients",
        "machine": {**processor(), "cores": os.cpu_count(),
                    "device": jax.default_backend(), "jax": jax.__version__, "numpy": np.__version__,
                    "load_average_1min": os.getloadavg()[0]},
        "ratio": rows[-1]["ratio"],
        "baseline": f"NumPy executing the same timeline, vectorised over the clients per local step, at "
                    f"{rows[-1]['clients']} clients; ratio = NumPy seconds / jaxfl seconds (compiled program, best of "
                    "repeats; compile and the shared host simulation excluded, in their own columns)",
        "problem": {"d": D, "records_per_client": RECORDS, "rounds": ROUNDS, "steps_per_round": SIZE, "clip": CLIP,
                    "step_size": "0.5 / clients",
                    "noise_multiplier": SIGMA, "lookahead": 1, "quantum": 4.0},
        "rows": rows,
    }
    out = write_benchmark(record, args.out)
    print(f"headline ratio (NumPy / jaxfl at {rows[-1]['clients']} clients): {record['ratio']:.2f}x   -> {out}")


if __name__ == "__main__":
    source_revision()   # the checkout as it is now: write_benchmark records it at the end
    main()
