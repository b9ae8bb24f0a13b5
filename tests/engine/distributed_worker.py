"""One process of a multi-process ``jaxfl.train`` run (launched by ``test_distributed.py``; not a test module).

Usage::

    python distributed_worker.py OUT.npz --processes N --process-id I --port PORT [--data full|local]

``--processes 1`` runs the reference: one plain process, no ``jax.distributed``, no mesh. Otherwise the process
joins ``jax.distributed`` (coordinator ``127.0.0.1:PORT``, CPU collectives over gloo), builds the ``"silos"``
mesh over every process's devices (set ``XLA_FLAGS=--xla_force_host_platform_device_count=K`` for K local CPU
devices) and trains on 7 silos (padded to a multiple of the mesh size), either from the same full host copy in
every process (``--data full``) or from the silos its own devices hold (``--data local``,
:func:`jaxfl.engine.sharding.shard_local_data`). Two runs: ISRL-DP minibatch SGD with silo sampling (and its
epsilon), and personalised ISRL-DP training (per-silo state sharded over processes, per-silo metrics). Process 0
writes the final parameters, the gathered silo state, the per-silo metrics and epsilon to ``OUT.npz``.
"""
from __future__ import annotations

import argparse
import os
import sys

import jax


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--data", choices=("full", "local"), default="full")
    args = parser.parse_args()

    if args.processes > 1:
        # CPU cross-process collectives: gloo over TCP (jax 0.10's default; "mpi" needs an MPI library).
        # Must be set before the CPU backend is created, i.e. before any computation or jax.devices().
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=f"127.0.0.1:{args.port}", num_processes=args.processes,
                                   process_id=args.process_id, initialization_timeout=60,
                                   heartbeat_timeout_seconds=30, shutdown_timeout_seconds=30)
    import numpy as np
    import optax

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from _helpers import make_silos
    from jaxfl.algorithms import minibatch_sgd, personalized
    from jaxfl.data.federated import FederatedData, from_silos
    from jaxfl.engine import sharding, train
    from jaxfl.models import init_linear, logistic_loss

    full = from_silos(make_silos([30, 12, 25, 40, 33, 17, 28], seed=4))  # 7 silos: padded on 2 or 4 devices
    mesh = None
    data = full
    if args.processes > 1:
        assert jax.process_count() == args.processes, (jax.process_count(), args.processes)
        mesh = sharding.silo_mesh(jax.devices())  # every process's devices
        if args.data == "local":
            mine = sharding.process_silos(mesh, full.num_silos)
            local = FederatedData(*(np.asarray(a)[mine] for a in full))  # as if this process loaded only these
            data = sharding.shard_local_data(local, mesh, full.num_silos)
    algs = [minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.5), sampling_rate=0.3, expected_batch_size=6.0,
                          clip_norm=1.0, noise_multiplier=1.1, participation=5),
            personalized(logistic_loss, shared={"w": "shared", "b": "private"}, client_opt=optax.sgd(0.2),
                         local_steps=3, sampling_rate=0.4, clip_norm=1.0, noise_multiplier=1.0, participation=5)]
    out = {}
    for name, alg in zip(("mbsgd", "personalized"), algs):
        extra = {"delta": 1e-5} if name == "mbsgd" else {"silo_eval_fn": lambda p, i: {"w0": p["w"][0] + i}}
        metrics = f"{args.out}.{name}.jsonl" if jax.process_index() == 0 else None  # written by process 0 only
        res = train(alg, data, init_linear(5), rounds=6, key=7, eval_every=3, mesh=mesh, progress=False,
                    metrics_path=metrics, **extra)
        for path, leaf in jax.tree_util.tree_leaves_with_path(res.state.params):
            out[f"{name}/params{jax.tree_util.keystr(path)}"] = sharding.to_host(leaf)
        if name == "mbsgd":
            out[f"{name}/epsilon"] = np.asarray(res.epsilon)
        else:  # per-silo state, sharded over the processes: gathered (a collective: every process calls it)
            for path, leaf in jax.tree_util.tree_leaves_with_path(res.state.silos):
                out[f"{name}/silos{jax.tree_util.keystr(path)}"] = sharding.to_host(leaf)[:full.num_silos]
            # per-silo metrics: global data from shard_local_data carries its padding silos too
            out[f"{name}/silo_w0"] = np.asarray([r["silos"]["w0"][:full.num_silos] for r in res.history])
    if jax.process_index() == 0:
        np.savez(args.out, **out)
    print(f"process {jax.process_index()}/{jax.process_count()}: {jax.local_device_count()} of "
          f"{jax.device_count()} devices, done", flush=True)


if __name__ == "__main__":
    main()
