"""Independent runs on a multi-core CPU: one after the other on all cores, or one per core at once.

A study's runs (seeds, epsilons, methods) are independent programs. XLA:CPU spreads one program over all
cores, but a program of small convolutions and a scan of local steps keeps them only partly busy. This
benchmark times one ``dprec/mnist`` round (100 clients, 10 per round, LeNet-5, one local epoch of batch 20,
clients one at a time: what ``jaxfl reproduce dprec/mnist`` runs) for DP-FedAvg and DP-REC two ways, each
way in fresh subprocesses that compile, warm up and keep the best of ``--repeats`` rounds, the two ways
alternating ``--trials`` times (each keeps its best):

- ``one run, all cores``: one subprocess, unpinned (what ``jaxfl reproduce`` does by default).
- ``one per core, pinned``: as many subprocesses as cores at once, each pinned to its own core with
  ``os.sched_setaffinity`` before JAX starts (the shell's ``taskset -c N``).

``ratio`` = rounds/s of the pinned set (the sum over its runs of ``1 / seconds``) / rounds/s of one run on
all cores: > 1 means running a study's runs one per core finishes it sooner. The headline is DP-REC's.
Results differ at float rounding between the two ways (XLA:CPU splits reductions by the cores it may use;
README "Sharp edges"): a run is bitwise reproducible only the way it ran. Linux only (``sched_setaffinity``).

Usage: python bench/pinned_runs.py [--repeats 3] [--trials 3] [--out bench/results/pinned_runs.json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

METHODS = ("dp_fedavg", "dp_rec")


def worker(method: str, core: int | None, repeats: int) -> None:
    """Times ``repeats`` rounds of ``method`` (best) in this process; prints ``{"seconds": s}``."""
    if core is not None:
        os.sched_setaffinity(0, {core})   # before JAX creates its thread pools
    import jax.numpy as jnp

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import local_training

    from jaxfl.data.federated import FederatedData
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: its paper homes
    from papers.dprec import data as dprec_data
    from jaxfl.models import nets

    data = dprec_data.mnist_clients().train
    train = FederatedData(jnp.asarray(data.x), jnp.asarray(data.y), jnp.asarray(data.counts))
    print(json.dumps({"seconds": local_training.round_seconds(method, nets.MnistLeNet5(), 1, train, repeats)}))


def run_workers(method: str, cores: list[int | None], repeats: int) -> list[float]:
    """Starts one worker per entry of ``cores`` at once; their best round seconds."""
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", method, "--repeats", str(repeats)]
                              + ([] if core is None else ["--core", str(core)]),
                              stdout=subprocess.PIPE, text=True) for core in cores]
    out = []
    for proc in procs:
        stdout, _ = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"worker for {method} exited with {proc.returncode}")
        out.append(json.loads(stdout.strip().splitlines()[-1])["seconds"])
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per subprocess")
    parser.add_argument("--trials", type=int, default=3, help="alternations of the two ways")
    parser.add_argument("--out", default="bench/results/pinned_runs.json")
    parser.add_argument("--worker", choices=METHODS, help=argparse.SUPPRESS)
    parser.add_argument("--core", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.core, args.repeats)
        return 0
    if not hasattr(os, "sched_setaffinity"):
        print("pinned_runs skipped: needs os.sched_setaffinity (Linux)")
        return 0
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        print(f"pinned_runs skipped: this process may use {len(cores)} core")
        return 0

    import jax

    from jaxfl.studies.provenance import machine as processor, source_revision, write_benchmark

    source_revision()   # the checkout as it is now: write_benchmark records it at the end

    rows = []
    for method in METHODS:
        trials = []
        for _ in range(args.trials):   # the two ways alternate; each keeps its best
            trials.append({"one_run_all_cores": run_workers(method, [None], args.repeats)[0],
                           "one_per_core_pinned": run_workers(method, cores, args.repeats)})
        alone = min(t["one_run_all_cores"] for t in trials)
        pinned = [min(t["one_per_core_pinned"][i] for t in trials) for i in range(len(cores))]
        ratio = sum(1.0 / s for s in pinned) / (1.0 / alone)
        per_trial = [sum(1.0 / s for s in t["one_per_core_pinned"]) * t["one_run_all_cores"] for t in trials]
        rows.append({"method": method, "one_run_all_cores_seconds": alone, "one_per_core_pinned_seconds": pinned,
                     "ratio": ratio, "ratio_per_trial": per_trial, "trials": trials})
        print(f"{method} round: one run on {len(cores)} cores {alone:.2f} s; {len(cores)} runs pinned one per core "
              + ", ".join(f"{s:.2f}" for s in pinned) + f" s each; throughput ratio {ratio:.2f} (per trial "
              + ", ".join(f"{r:.2f}" for r in per_trial) + ")", flush=True)

    record = {
        "benchmark": "pinned_runs",
        "machine": {**processor(), "cores": len(cores), "device": "cpu", "jax": jax.__version__},
        "ratio": rows[-1]["ratio"],
        "baseline": f"the same runs one after the other, each on all {len(cores)} cores (jaxfl reproduce's default); "
                    "ratio = rounds/s of one run pinned per core / rounds/s of one run on all cores, DP-REC's "
                    "dprec/mnist round",
        "rows": rows,
        "repeats": args.repeats, "trials": args.trials,
        "notes": "each way in fresh subprocesses: compile, one warm-up round, best of repeats rounds; the ways "
                 "alternate trials times, each keeping its best (ratio); ratio_per_trial: each alternation's own "
                 "ratio, the spread. Results differ "
                 "at float rounding between the ways (XLA:CPU splits reductions by the cores it may use).",
    }
    print(f"wrote {write_benchmark(record, args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
