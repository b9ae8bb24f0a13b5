"""DP-FedAvg with a sampled cohort: the documented default call against the same run on the cohort alone.

100 clients of 50 CIFAR-10 images each (the 5,000 images of the bundled subset, train then test, in order),
a CIFAR LeNet-5 in plain flax layers (conv 6 5x5, max pool 2, conv 16 5x5, max pool 2, dense 120, 84, 10:
62,006 parameters), one local epoch of SGD in minibatches of 10, clip 1.0, noise multiplier 1.0.

- ``sampled``: ``jaxfl.dp_fedavg(..., participation=poisson(0.1), expected_clients=10)`` on all 100 clients, defaults
  otherwise (``clients_per_pass="auto"``: only the sampled clients run);
- ``cohort alone``: the same call with ``poisson(1.0)`` on the first 10 clients' data only: the work a
  cohort of 10 needs, with nothing to sample around it;
- ``every client masked``: the sampled run with ``clients_per_pass=None`` (every client trains, the
  unsampled weighted 0: jaxfl's default before 0.2.0), a row.

Each side is one ``jaxfl.train`` (``progress=False``) of ``R2`` rounds, one round per compiled call
(``rounds_per_call=1``: one program, compiled in the first call), stamped as each round's record arrives
(``on_record``); steady-state seconds per round are ``(t(R2) - t(R1)) / (R2 - R1)``, the first call's time less a
round in its own column (compile). (Timing two runs of ``R1`` and ``R2`` rounds instead compiled two programs and
left the difference of their compile times in the steady state.) The sides are interleaved in
every repeat, best of ``--repeats``. ``ratio`` = cohort-alone seconds per round / sampled seconds per round
(> 1: the sampled run is faster; the sampled cohort's size is random with mean 10, so about 1 is the target).
``ratio_per_sampled_client`` divides each side's seconds by the clients that took part in its timed rounds
(``participants`` in the run's metrics), taking the luck of the draw out.

Usage: python bench/dp_fedavg_cohort.py [--repeats 2] [--rounds 5 25] [--out bench/results/dp_fedavg_cohort.json]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import flax.linen as nn
import jax
import numpy as np
import optax

import jaxfl
from jaxfl.data import load_cifar10_subset
from jaxfl.studies.provenance import interleaved_best_records, machine as processor, write_benchmark
from jaxfl.engine.participation import poisson

CLIENTS, PER_CLIENT, COHORT, BATCH, CLIP, SIGMA = 100, 50, 10, 10, 1.0, 1.0
OUT = Path(__file__).resolve().parent / "results" / "dp_fedavg_cohort.json"


class CifarLeNet5(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.max_pool(nn.relu(nn.Conv(6, (5, 5), padding="VALID")(x)), (2, 2), strides=(2, 2))
        x = nn.max_pool(nn.relu(nn.Conv(16, (5, 5), padding="VALID")(x)), (2, 2), strides=(2, 2))
        x = nn.relu(nn.Dense(120)(x.reshape(x.shape[:-3] + (-1,))))
        return nn.Dense(10)(nn.relu(nn.Dense(84)(x)))


def clients():
    parts = [load_cifar10_subset(split) for split in ("train", "test")]
    x = np.concatenate([p[0] for p in parts]).astype(np.float32) / 255.0
    y = np.concatenate([p[1] for p in parts])
    return [(x[i * PER_CLIENT:(i + 1) * PER_CLIENT], y[i * PER_CLIENT:(i + 1) * PER_CLIENT]) for i in range(CLIENTS)]


def side(silos, rate, rounds, **overrides):
    model = CifarLeNet5()
    params = model.init(jax.random.key(0), silos[0][0][:1])["params"]

    def loss(p, xi, yi):
        return optax.softmax_cross_entropy_with_integer_labels(model.apply({"params": p}, xi), yi)

    algorithm = jaxfl.dp_fedavg(loss, client_opt=optax.sgd(0.05), local_epochs=1, batch_size=BATCH,
                                participation=poisson(rate), expected_clients=COHORT, clip_norm=CLIP,
                                noise_multiplier=SIGMA, **overrides)
    data = jaxfl.from_silos(silos)

    def run():
        stamps, clients = [], []

        def stamp(record):
            stamps.append(time.perf_counter())
            clients.append(record["participants"])

        start = time.perf_counter()
        result = jaxfl.train(algorithm, data, params, rounds=rounds[1], rounds_per_call=1, on_record=stamp,
                             progress=False)
        jax.block_until_ready(result.params)
        timed = rounds[1] - rounds[0]
        per_round = (stamps[-1] - stamps[rounds[0] - 1]) / timed
        return {"seconds_per_round": per_round, "compile_seconds": stamps[0] - start - per_round,
                "clients_per_timed_round": float(np.mean(clients[rounds[0]:]))}

    return run


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--rounds", type=int, nargs=2, default=[5, 25])
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    everyone = clients()
    sides = {"sampled": side(everyone, COHORT / CLIENTS, args.rounds),
             "cohort alone": side(everyone[:COHORT], 1.0, args.rounds),
             "every client masked": side(everyone, COHORT / CLIENTS, args.rounds, clients_per_pass=None)}
    best = interleaved_best_records(sides, args.repeats, "seconds_per_round")
    rows = [{"side": name, **got} for name, got in best.items()]
    ratio = best["cohort alone"]["seconds_per_round"] / best["sampled"]["seconds_per_round"]
    per_client = {name: got["seconds_per_round"] / got["clients_per_timed_round"] for name, got in best.items()}
    record = {
        "benchmark": "dp_fedavg_cohort",
        "machine": {**processor(), "cores": os.cpu_count(), "device": jax.default_backend(), "jax": jax.__version__},
        "setting": {"clients": CLIENTS, "records_per_client": PER_CLIENT, "expected_clients": COHORT,
                    "model": "CIFAR LeNet-5, 62,006 parameters, plain flax layers", "local_epochs": 1,
                    "batch_size": BATCH, "clip_norm": CLIP, "noise_multiplier": SIGMA, "rounds": args.rounds,
                    "repeats": args.repeats},
        "rows": rows,
        "ratio": ratio,
        "speedup_vs_every_client_masked": best["every client masked"]["seconds_per_round"]
        / best["sampled"]["seconds_per_round"],
        "ratio_per_sampled_client": per_client["cohort alone"] / per_client["sampled"],
        "baseline": ("the same jaxfl.dp_fedavg round on the 10 clients of a cohort alone (Poisson rate 1.0); ratio = "
                     "its seconds per round / the default call's on 100 clients at rate 0.1 (steady state; "
                     "compile in its own column)"),
    }
    path = write_benchmark(record, args.out)
    for row in rows:
        print(f"{row['side']:20s} {row['seconds_per_round'] * 1e3:8.1f} ms/round  "
              f"{row['clients_per_timed_round']:5.2f} clients/round  compile {row['compile_seconds']:.1f} s")
    print(f"ratio cohort alone / sampled = {ratio:.2f} (per sampled client {record['ratio_per_sampled_client']:.2f})  "
          f"-> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
