"""Round time of jaxfl's compiled rounds against the number of silos, the model size and the devices.

ISRL-DP minibatch SGD (per-example clipping, per-silo Gaussian noise; logistic loss, 64 records per silo,
minibatch 16 drawn with replacement), one compiled program of ``--rounds`` rounds, steady state (best of
``--repeats`` after a compiling call):

* **silos**: 8 ... 4,096 silos at d = 50 features;
* **model size**: d = 10 ... 10,000 at 64 silos;
* **devices**: 64 silos at d = 50 on 1, 2, 4 and 8 forced host devices (each in a subprocess with
  ``XLA_FLAGS=--xla_force_host_platform_device_count=N``, the data sharded over a ``"silos"`` mesh as
  ``jaxfl.train(mesh=)`` shards it, the same compiled rounds); the final parameters must be bitwise equal
  to the 1-device run's. Forced
  host devices share this machine's cores: the rows show the sharding's overhead, not a speed-up.

Headline ``ratio``: time per silo and round at 8 silos / at 4,096 silos (how much one compiled round
amortises per silo). Plots: ``docs/figures/scaling.png``.

Usage: python bench/scaling.py [--rounds 10] [--repeats 5] [--out bench/results/scaling.json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxfl.algorithms import minibatch_sgd
from jaxfl.data.federated import FederatedData
from jaxfl.engine import run_rounds
from jaxfl.models import logistic_loss
from jaxfl.studies.provenance import machine as processor, source_revision, write_benchmark

RECORDS, BATCH = 64, 16
SILOS = (8, 32, 128, 512, 2048, 4096)
DIMS = (10, 100, 1000, 10000)
DEVICES = (1, 2, 4, 8)
ROOT = Path(__file__).resolve().parents[1]


def synthetic(silos: int, dim: int, seed: int = 0) -> FederatedData:
    rng = np.random.default_rng(seed)  # host-rng-ok: synthetic benchmark data
    x = rng.standard_normal((silos, RECORDS, dim)).astype(np.float32) / np.sqrt(dim)
    y = (rng.random((silos, RECORDS)) < 0.5).astype(np.int32)
    return FederatedData(jnp.asarray(x), jnp.asarray(y), jnp.full((silos,), RECORDS, jnp.int32))


def algorithm():
    return minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.5), batch_size=BATCH, clip_norm=1.0,
                         noise_multiplier=1.0)


def round_seconds(silos: int, dim: int, rounds: int, repeats: int) -> float:
    """Steady-state seconds per round (best of ``repeats`` calls of one compiled ``rounds``-round program)."""
    data, alg = synthetic(silos, dim), algorithm()
    state = alg.init({"w": jnp.zeros(dim), "b": jnp.zeros(())})
    run = jax.jit(lambda s: run_rounds(alg, s, data, jax.random.key(0), 0, rounds)[0].params)
    jax.block_until_ready(run(state))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(run(state))
        times.append(time.perf_counter() - t0)
    return min(times) / rounds


DEVICE_SCRIPT = """
import hashlib, json, sys, time
import jax, jax.numpy as jnp, numpy as np
sys.path.insert(0, {bench!r})
import scaling
from jaxfl.engine import run_rounds, sharding
silos, dim, rounds, repeats = {silos}, {dim}, {rounds}, {repeats}
alg = scaling.algorithm()
state = alg.init({{"w": jnp.zeros(dim), "b": jnp.zeros(())}})
mesh = sharding.silo_mesh(jax.devices())
data = sharding.shard_data(scaling.synthetic(silos, dim), mesh)
with sharding.mesh_context(mesh):
    run = jax.jit(lambda s, d: run_rounds(alg, s, d, jax.random.key(0), 0, rounds)[0].params)
    params = jax.block_until_ready(run(state, data))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        params = jax.block_until_ready(run(state, data))
        times.append(time.perf_counter() - t0)
flat = np.concatenate([np.ravel(np.asarray(l)) for l in jax.tree_util.tree_leaves(params)])
print(json.dumps({{"devices": jax.device_count(), "seconds_per_round": min(times) / rounds,
                  "params_sha256": hashlib.sha256(flat.tobytes()).hexdigest()}}))
"""


def device_row(devices: int, rounds: int, repeats: int) -> dict:
    script = DEVICE_SCRIPT.format(bench=str(ROOT / "bench"), silos=64, dim=50, rounds=rounds, repeats=repeats)
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def plot(record: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    s = record["silos"]
    axes[0].loglog([r["silos"] for r in s], [1e3 * r["seconds_per_round"] for r in s], "o-", label="per round")
    axes[0].loglog([r["silos"] for r in s], [1e6 * r["seconds_per_silo_round"] for r in s], "s--",
                   label="per silo and round (us)")
    axes[0].set_xlabel("silos (d = 50)")
    axes[0].set_ylabel("ms per round / us per silo-round")
    axes[0].legend(fontsize=8)
    m = record["model_size"]
    axes[1].loglog([r["dim"] for r in m], [1e3 * r["seconds_per_round"] for r in m], "o-")
    axes[1].set_xlabel("model size d (64 silos)")
    axes[1].set_ylabel("ms per round")
    d = record["devices"]
    axes[2].plot([r["devices"] for r in d], [1e3 * r["seconds_per_round"] for r in d], "o-")
    axes[2].set_xlabel("forced host devices (64 silos, d = 50; same 2 cores)")
    axes[2].set_ylabel("ms per round")
    axes[2].set_xticks([r["devices"] for r in d])
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle("jaxfl ISRL-DP minibatch SGD round time (2-core CPU; bench/results/scaling.json)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "scaling.json"))
    parser.add_argument("--figure", default=str(ROOT / "docs" / "figures" / "scaling.png"))
    args = parser.parse_args()
    silos = []
    for s in SILOS:
        sec = round_seconds(s, 50, args.rounds, args.repeats)
        silos.append({"silos": s, "dim": 50, "seconds_per_round": sec, "seconds_per_silo_round": sec / s})
        print(f"silos {s:5d}: {sec * 1e3:8.2f} ms/round, {sec / s * 1e6:7.2f} us per silo-round", flush=True)
    model = []
    for d in DIMS:
        sec = round_seconds(64, d, args.rounds, args.repeats)
        model.append({"silos": 64, "dim": d, "seconds_per_round": sec})
        print(f"d {d:6d}: {sec * 1e3:8.2f} ms/round", flush=True)
    devices = []
    for n in DEVICES:
        row = device_row(n, args.rounds, args.repeats)
        devices.append(row)
        print(f"devices {n}: {row['seconds_per_round'] * 1e3:8.2f} ms/round, params {row['params_sha256'][:12]}",
              flush=True)
    equal = len({r["params_sha256"] for r in devices}) == 1
    record = {
        "benchmark": "scaling",
        "machine": {**processor(), "cores": os.cpu_count(),
                    "device": jax.default_backend(), "jax": jax.__version__, "load_average_1min": os.getloadavg()[0]},
        "ratio": silos[0]["seconds_per_silo_round"] / silos[-1]["seconds_per_silo_round"],
        "baseline": "jaxfl itself at 8 silos: ratio = time per silo and round at 8 silos / at 4,096 silos",
        "setting": {"algorithm": "minibatch_sgd, ISRL-DP (clip 1, noise multiplier 1), logistic loss",
                    "records_per_silo": RECORDS, "batch": BATCH, "rounds_per_program": args.rounds,
                    "repeats": args.repeats},
        "silos": silos, "model_size": model, "devices": devices,
        "devices_bitwise_equal": equal,
    }
    out = write_benchmark(record, args.out)
    plot(record, Path(args.figure))
    print(f"per-silo amortisation 8 -> 4096 silos: {record['ratio']:.1f}x; devices bitwise equal: {equal}  -> {out}")
    if not equal:
        raise SystemExit("results differ across device counts")


if __name__ == "__main__":
    source_revision()   # the checkout as it is now: write_benchmark records it at the end
    main()
