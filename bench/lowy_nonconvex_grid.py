"""Lowy et al.'s whole MNIST (or CIFAR-10) grid as jaxfl's vmapped programs, against the same runs one at a time.

The grid (§6.1; ``jaxfl reproduce lowy-nonconvex/mnist``): N = 25 digit-pair silos of n = 1238 records,
PCA-50 features, MLP 50-64-1; (M, R) in {12, 25} x {25, 50}; K = 606 (R = 25) / 428 (R = 50); per
panel and trial: MB-SGD and Local SGD over (7 epsilons + non-private) x 5 step sizes x 5 clips,
FedProx-SPIDER per q in {1, 2} (R = 25) / {1..4} (R = 50) and Alt Fed-SPIDER over 7 epsilons x 5 x 5;
``--reps`` repetitions, ``--trials`` trials.

* **jaxfl**: the study's grid programs (``lowy_nonconvex.MNIST``'s families through the program
  :func:`jaxfl.engine.sweep` caches, as :func:`jaxfl.studies.runner.run` runs them): one
  compiled program per (algorithm, M, R, q) serves every trial (M is static: one compilation per
  panel); each call runs ``configs_per_batch`` configs x reps. Timed: AOT compilation of each program,
  and ``--timed-calls`` (default 3) steady-state calls, interleaved with the single runs below; the
  median is extrapolated to the grid's number of calls, the spread (min, max) reported.
* **one run at a time**: the same algorithm, one ``jax.jit``-compiled run (hyperparameters as
  arguments, so it compiles once per (algorithm, M, R, q) -- the kind a user's Python loop over the grid
  would call), called once per run, every participant under one ``vmap`` (where the study's Local SGD
  program runs them one at a time, ``clients_per_pass``, which is slower for one run alone). Timed: its
  compilation and ``--timed-calls`` runs; extrapolated.
* **Check**: the single-run program and the vmapped program give the same final parameters for the same
  (config, seed).

A run's cost depends on the algorithm, M, R and q only (not on epsilon, step size or clip; the engine runs
the clients of the M participants only), which is what makes the extrapolation valid: every (M, R) panel
is timed.

``--study cifar10`` times ``jaxfl reproduce lowy-nonconvex/cifar10``'s grid the same way (the CIFAR CNN,
10 one-class silos of the offline subset, (M, R) in {(10, 50), (10, 100)}, q up to 8; written to
``bench/results/lowy_nonconvex_grid_cifar10.json``): what its full form would take on this machine.

Usage: python bench/lowy_nonconvex_grid.py [--study mnist|cifar10] [--quick] [--trials 3] [--reps 2]
[--timed-calls 3] [--out ...]
(``--quick``: the study's quick form (MNIST: 40 images per digit and R = 4), a few seconds per program;
written under ``runs/bench/``, never over the full record.)
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxfl.engine import grid_points, initial_state, run_rounds
from jaxfl.engine.sweep import _program as sweep_program
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: its paper homes (papers/)
from papers.lowy_nonconvex import programs as NG, studies as N
from jaxfl.studies import runner, spec
from jaxfl.studies.provenance import machine as processor, source_revision, write_benchmark


STUDIES = {"mnist": N.MNIST, "cifar10": N.CIFAR10}
FORMS = {"mnist": "full (the paper's MNIST grid, §6.1)",
         "cifar10": "full (the paper's CIFAR-10 grid, §6.2, on the offline subset of ~400 images per silo)"}


def table_of(program: spec.Program):
    configs = grid_points(program.grid)
    return configs, {k: jnp.asarray([c[k] for c in configs], jnp.float32) for k in program.grid}


def single_run_program(build, rounds):
    """One run, hyperparameters and seed as arguments: ``(hp, seed, data, params, constants) -> params``."""
    def one(hp, seed, data, params, constants):
        algorithm = build(**hp, **constants)
        state, _ = run_rounds(algorithm, initial_state(algorithm, params, data.num_silos), data,
                              jax.random.key(seed), 0, rounds)
        return state.params
    return jax.jit(one)


def block(tree):
    return jax.tree_util.tree_map(lambda a: a.block_until_ready(), tree)


def bench_program(study, family, program, trial, args) -> dict:
    """Times one family program (one q) as study.run runs it (jaxfl.engine.sweep's cached program) and
    as one jitted run at a time."""
    configs, table = table_of(program)
    per_call = min(study.batch_for(family.name) or len(configs), len(configs))
    take = np.minimum(np.arange(per_call), len(configs) - 1)
    part = {k: v[take] for k, v in table.items()}
    part["__config__"] = jnp.arange(per_call)
    seeds = jnp.asarray([study.seed(0, 0, r) for r in range(study.reps)])
    build = runner._builder(family, program.static)
    params = study.init(study.init_seed)
    constants = jax.tree_util.tree_map(jnp.asarray, dict(program.constants))
    grid = sweep_program(build, tuple(program.grid), int(program.rounds), study.evaluate, True)
    args_ = (part, seeds, trial.train, params, trial.eval_data, constants)
    t0 = time.perf_counter()
    compiled = grid.lower(*args_).compile()
    compile_s = time.perf_counter() - t0
    # One run alone keeps its silos under one vmap: running its participants one at a time, as the grid's Local
    # SGD program does for its vmapped configs (`clients_per_pass`), made single runs slower (one-off timings)
    single = single_run_program(runner._builder(family,
                                                tuple(kv for kv in program.static if kv[0] != "clients_per_pass")),
                                int(program.rounds))
    hp0 = {k: v[0] for k, v in part.items() if k != "__config__"}
    t0 = time.perf_counter()
    single_c = single.lower(hp0, seeds[0], trial.train, params, constants).compile()
    single_compile_s = time.perf_counter() - t0
    # Interleaved: each repetition times one vmapped call and then one single run, so a change in the
    # machine's load during the row affects both sides alike.
    calls, runs = [], []
    for i in range(args.timed_calls):
        t0 = time.perf_counter()
        out = block(compiled(*args_))
        calls.append(time.perf_counter() - t0)
        hp = {k: v[i % per_call] for k, v in part.items() if k != "__config__"}
        t0 = time.perf_counter()
        p = block(single_c(hp, seeds[0], trial.train, params, constants))
        runs.append(time.perf_counter() - t0)
        if i == 0:
            diff = max(float(jnp.max(jnp.abs(a - b[0, 0]))) for a, b in
                       zip(jax.tree_util.tree_leaves(p), jax.tree_util.tree_leaves(out[0])))
    static = dict(program.static)
    return {"family": family.name, "q": static["phase_length"], "rounds": static["rounds"],
            "batch_size_K": static["batch_size"], "configs": len(configs), "configs_per_call": per_call,
            "reps": study.reps, "compile_seconds": compile_s, "seconds_per_call": float(np.median(calls)),
            "seconds_per_call_min_max": [min(calls), max(calls)], "calls_timed": len(calls),
            "single_compile_seconds": single_compile_s, "single_seconds_per_run": float(np.median(runs)),
            "single_seconds_per_run_min_max": [min(runs), max(runs)], "single_runs_timed": len(runs),
            "check_max_abs_param_diff": diff}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", choices=sorted(STUDIES), default="mnist")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--timed-calls", type=int, default=3,
                        help="interleaved (vmapped call, single run) pairs timed per row (median and spread reported)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    root = Path(__file__).resolve().parent
    name = "lowy_nonconvex_grid" + ("" if args.study == "mnist" else f"_{args.study}")
    out_path = Path(args.out) if args.out else (
        root.parent / "runs" / "bench" / f"{name}.quick.json" if args.quick else root / "results" / f"{name}.json")
    load_start = os.getloadavg()[0]
    study = dataclasses.replace(STUDIES[args.study].form_of(args.quick), reps=args.reps, trials=args.trials)
    t0 = time.perf_counter()
    trial = study.data(study, 0)
    data_s = time.perf_counter() - t0
    print(f"load average {load_start:.2f}; data {data_s:.1f} s", flush=True)
    programs = [(panel, family, program) for panel in study.panels for family in NG.FAMILIES
                for program in family.programs(study, panel, trial)]
    rows = []

    def record_of(timed) -> dict:
        """The JSON record over the programs ``timed`` so far (``complete`` once all are; until then the
        totals and the ratio cover the timed programs only)."""
        jaxfl_s = sum(r["jaxfl_seconds"] for r in timed)
        loop_s = sum(r["loop_seconds"] for r in timed)
        load_end = os.getloadavg()[0]
        return {
            "benchmark": name,
            "machine": {**processor(), "cores": os.cpu_count(),
                        "device": jax.default_backend(), "jax": jax.__version__, "numpy": np.__version__,
                        "load_average_1min_start": load_start, "load_average_1min_end": load_end},
            "ratio": loop_s / jaxfl_s,
            "complete": len(timed) == len(programs), "programs_timed": len(timed), "programs": len(programs),
            "baseline": "the same jaxfl algorithms one run at a time (one jit-compiled run per (algorithm, R, q, M) "
                        "with hyperparameters and seed as arguments, called once per run); ratio = extrapolated "
                        "one-at-a-time seconds / extrapolated vmapped-program seconds, compilation included on both "
                        "sides",
            "quick": bool(args.quick),
            "jaxfl_seconds_extrapolated": jaxfl_s,
            "baseline_seconds_extrapolated": loop_s,
            "baseline_hours_extrapolated": loop_s / 3600,
            "data_preparation_seconds": data_s,
            "grid": {"trials": study.trials, "reps": study.reps,
                     "panels": [[p["silos_per_round"], p["rounds"]] for p in study.panels],
                     "epsilons": list(study["epsilons"]), "clips": list(study["clips"]),
                     "phase_lengths": {str(r): list(q) for r, q in study["phase_lengths"]},
                     "runs": sum(r["runs"] for r in timed),
                     "configs_per_batch": {f.name: study.batch_for(f.name) for f in NG.FAMILIES},
                     "form": "QUICK (tiny settings)" if args.quick else FORMS[args.study]},
            "rows": timed,
            "notes": [
                f"1-minute load average {load_start:.2f} at the start and {load_end:.2f} at the end (2 shared "
                "cores; other processes' load slows both sides; a ratio taken under load is indicative only)",
                "both sides extrapolated from timed samples: a run's cost depends on (algorithm, M, R, q) only; "
                + ("every program timed" if len(timed) == len(programs) else
                   f"{len(timed)} of the grid's {len(programs)} programs timed (the run stopped): totals over those"),
                f"each row: {args.timed_calls} interleaved (vmapped call, single run) pairs; medians used, "
                "[min, max] given as *_min_max",
                "check_max_abs_param_diff: the single-run program vs the vmapped program, same config and seed",
            ],
        }

    for panel, family, program in programs:
        m, r = panel["silos_per_round"], panel["rounds"]
        row = bench_program(study, family, program, trial, args)
        q = row["q"]
        calls = math.ceil(row["configs"] / row["configs_per_call"]) * study.trials
        runs = row["configs"] * study.reps * study.trials
        # one compiled program per (family, M, R, q), serving every trial
        row.update(silos_per_round=m, runs=runs,
                   jaxfl_seconds=row["compile_seconds"] + row["seconds_per_call"] * calls,
                   loop_seconds=row["single_compile_seconds"] + row["single_seconds_per_run"] * runs)
        row["ratio"] = row["loop_seconds"] / row["jaxfl_seconds"]
        rows.append(row)
        print(f"  M={m} R={r} {family.name}{'' if q is None else f' q={q}'}: {runs} runs; vmapped "
              f"{row['seconds_per_call']:.2f} s/call [{row['seconds_per_call_min_max'][0]:.2f}, "
              f"{row['seconds_per_call_min_max'][1]:.2f}] of {row['configs_per_call']}x{study.reps} (compile "
              f"{row['compile_seconds']:.1f} s) -> {row['jaxfl_seconds']:.0f} s; one at a time "
              f"{row['single_seconds_per_run']:.3f} s/run [{row['single_seconds_per_run_min_max'][0]:.3f}, "
              f"{row['single_seconds_per_run_min_max'][1]:.3f}] "
              f"(compile {row['single_compile_seconds']:.1f} s) -> "
              f"{row['loop_seconds']:.0f} s; ratio {row['ratio']:.2f}; check "
              f"{row['check_max_abs_param_diff']:.1e}", flush=True)
        # written after every program, so a run stopped mid-way (CIFAR-10's takes hours) keeps its rows
        write_benchmark(record_of(rows), out_path)
    record = record_of(rows)
    print(f"whole grid ({record['grid']['runs']} runs): vmapped {record['jaxfl_seconds_extrapolated'] / 3600:.2f} "
          f"h, one at a time {record['baseline_hours_extrapolated']:.2f} h, ratio {record['ratio']:.2f}x -> {out_path}")


if __name__ == "__main__":
    source_revision()   # the checkout as it is now: write_benchmark records it with every write
    main()
