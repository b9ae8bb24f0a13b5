"""Lowy & Razaviyayn's whole MNIST grid as jaxfl's vmapped programs, beside the same grid in NumPy (three baselines).

The grid (Fig. 4, the M = 25 panel; App. I): N = 25 digit-pair silos of n = 1238 records, d = 50
(PCA), R = 35 rounds, K = 443 (MB-SGD minibatch / Local SGD local steps), all 25 silos per round;
epsilon in {0.75, 1.5, 3, 6, 12, 18} plus the non-private run, 10 step sizes per family
(MB-SGD exp(linspace(-6, 0, 10)), Local SGD exp(linspace(-8, -1, 10))), 3 repetitions, 20 trials
(fresh splits): 20 x 2 x 7 x 10 x 3 = 8,400 training runs.

* **jaxfl**: the reproduction's own grid programs, run as :func:`jaxfl.studies.runner.run` runs
  them: per trial and family (``lowy_convex.MNIST``'s families on its M = 25 panel), the family's
  :class:`~jaxfl.studies.spec.Program` through :func:`jaxfl.engine.sweep` with the cached build
  ``study._builder(family, program.static)`` -- the 70 (epsilon, step size) configs x 3 seeds as
  vmapped programs (two batches of 35 configs), compiled once (timed separately) and reused for every
  trial; each configuration's "lowy" accounting (milliseconds) included, as in the study.
* **NumPy baselines**, the same algorithm as jaxfl's (ISRL-DP noisy MB-SGD: per silo a with-replacement
  minibatch of K records, per-example clipping at L = 2 max ||x|| (never binding), the clipped mean
  plus N(0, sigma^2 I); noisy Local SGD: K sequential one-record steps ``v <- v - eta (clip(g) + u)``,
  ``u ~ N(0, sigma^2 I)``; logistic loss with the logit clipped to [-15, 15]; mean aggregation over the
  25 silos), one run (config x seed) at a time:

  - **NumPy silo-vectorised** (the headline baseline, the strongest a competent user would write
    without vectorising across configurations): float32; per round ONE ``[silos, K, d]`` gather (all
    silos' minibatches, or all silos' local-step records), whole-array clipping and averaging, the
    Gaussian noise of every silo from one ``Generator.standard_normal(dtype=float32)`` call (PCG64);
    Python loops over runs and rounds only (and, for Local SGD, its K sequential steps, each one
    whole-array update of the 25 silos' models).
  - **NumPy looped**: float32; Python loops over runs, rounds and silos; MB-SGD vectorised within each
    minibatch, Local SGD's one-record steps in scalar Python/NumPy with each silo-round's K record
    indices and K noise vectors drawn by one call each; noise from ``standard_normal(dtype=float32)``.
  - **vs the authors' script structure** (the previous headline, a weaker baseline): per run, Python
    loops over rounds, silos and Local SGD's 443 steps; float64; privacy noise drawn as
    ``np.random.multivariate_normal(0, sigma^2 I)`` (a fresh factorization of the 50 x 50 covariance
    per draw) on every silo gradient (MB-SGD) or every local step (Local SGD), as the authors do;
    single-threaded BLAS (its faster setting on 2 cores).

  A run's cost does not depend on epsilon or the step size, so timed complete runs per (family,
  private) extrapolate to the grid: median seconds per run x the number of such runs in the grid (the
  JSON's ``numpy_subset`` says which runs). The two new baselines are timed in interleaved repetitions.
* **Check** (untimed): at one configuration per family and privacy (trial 0, epsilon 3, the step size
  jaxfl's grid selects there), every baseline's final training loss and test error are compared with
  the spread of 24 jaxfl runs (two-sample z-scores; different random streams, so levels, not bits); for
  the authors' DP Local SGD, whose timed runs take ~45 s each, also 16 untimed runs drawing the same
  noise distribution as ``sigma * standard_normal``.

Usage: python bench/lowy_convex_grid.py [--quick] [--trials 20] [--reps 5] [--out bench/results/lowy_convex_grid.json]
(``--quick``: a tiny grid on small silos, about half a minute, mostly compilation; written to
``runs/bench/lowy_convex_grid.quick.json``, never over the full record.)
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import sys
import platform
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # the baseline then runs with NumPy's default BLAS threads
    threadpool_limits = None

from jaxfl.accounting.sgd_noise import sigma_experiment_local_sgd, sigma_experiment_mbsgd
from jaxfl.engine import grid_points, local, sweep
from jaxfl.engine.sweep import _program as sweep_program
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: its paper homes (papers/)
from papers.lowy_convex import programs as LCG, studies as LC
from jaxfl.studies import runner, spec
from jaxfl.studies.provenance import machine as processor, source_revision, write_benchmark

M = 25                 # silos per round (the M = 25 panel; N = 25)
PANEL = spec.Panel(f"M = {M}", (("silos_per_round", M),))
FAMILIES = {f.name: f for f in LCG.FAMILIES}        # "mbsgd", "local"
LOGIT_CLIP = 15.0
CHECK_SEEDS = 24       # jaxfl runs of the checked configuration


# ------------------------------------------------------------------------------------------------
# Baseline "vs the authors' script structure" (their loop structure and noise draws, jaxfl's algorithm)


def _per_example_grads(w, xb, yb):
    """Gradients of ``-[y log(1e-12 + s) + (1 - y) log(1e-12 + 1 - s)]``, ``s = sigmoid(clip(<w, x>))``,
    for a minibatch ``xb: [b, d]``; zero where the clip is active (as its derivative is)."""
    z = xb @ w
    s = 1.0 / (1.0 + np.exp(-np.clip(z, -LOGIT_CLIP, LOGIT_CLIP)))
    dloss_ds = -(yb / (1e-12 + s) - (1.0 - yb) / (1e-12 + 1.0 - s))
    a = dloss_ds * s * (1.0 - s) * (np.abs(z) < LOGIT_CLIP)
    return a[:, None] * xb


def _clip_rows(g, clip):
    norms = np.sqrt(np.einsum("ij,ij->i", g, g))
    return g * np.minimum(1.0, clip / np.maximum(norms, 1e-300))[:, None]


def numpy_mbsgd(x, y, *, rounds, batch, lr, sigma, clip, rs):
    """Noisy (``sigma > 0``) or plain MB-SGD: loops over rounds and silos, vectorized per minibatch."""
    silos, n, d = x.shape
    w, zero, cov = np.zeros(d), np.zeros(d), sigma**2 * np.eye(d)
    for _ in range(rounds):
        total = np.zeros(d)
        for i in rs.choice(silos, M, replace=False):  # host-rng-ok: NumPy baseline (available silos)
            idx = rs.randint(0, n, batch)  # host-rng-ok: NumPy baseline (minibatch with replacement)
            g = _clip_rows(_per_example_grads(w, x[i, idx], y[i, idx]), clip).mean(axis=0)
            if sigma > 0:
                g = g + rs.multivariate_normal(zero, cov)  # host-rng-ok: NumPy baseline, as the authors draw it
            total += g
        w = w - lr * total / M
    return w


def numpy_local_sgd(x, y, *, rounds, steps, lr, sigma, clip, rs, noise="mvn"):
    """Noisy (``sigma > 0``) or plain Local SGD: loops over rounds, silos and the sequential
    one-sample local steps (scalar arithmetic for the one record's gradient); the server averages
    the local models. ``noise="normal"`` draws ``sigma * standard_normal(d)`` instead of the authors'
    ``multivariate_normal(0, sigma^2 I)``: the same distribution, ~30x cheaper (for the check only)."""
    silos, n, d = x.shape
    w, zero, cov = np.zeros(d), np.zeros(d), sigma**2 * np.eye(d)
    for _ in range(rounds):
        total = np.zeros(d)
        for i in rs.choice(silos, M, replace=False):  # host-rng-ok: NumPy baseline (available silos)
            v, xi, yi = w.copy(), x[i], y[i]
            for _ in range(steps):
                j = rs.randint(0, n)  # host-rng-ok: NumPy baseline (one record, with replacement)
                xj, yj = xi[j], yi[j]
                z = float(xj @ v)
                if -LOGIT_CLIP < z < LOGIT_CLIP:   # else the clipped logit has zero derivative
                    s = 1.0 / (1.0 + math.exp(-z))
                    g = (-(yj / (1e-12 + s) - (1.0 - yj) / (1e-12 + 1.0 - s)) * s * (1.0 - s)) * xj
                    norm = math.sqrt(float(g @ g))
                    if norm > clip:
                        g = g * (clip / norm)
                else:
                    g = zero
                if sigma > 0 and noise == "mvn":
                    g = g + rs.multivariate_normal(zero, cov)  # host-rng-ok: NumPy baseline, per step
                elif sigma > 0:
                    g = g + sigma * rs.standard_normal(d)  # host-rng-ok: NumPy baseline, same distribution
                v = v - lr * g
            total += v
        w = total / M
    return w


# ------------------------------------------------------------------------------------------------
# The competent-user NumPy baselines: float32, Generator (PCG64) standard_normal noise.
# Logistic regression's per-example gradient is a_j x_j with a_j = s_j - y_j (the derivative of the loss
# without its 1e-12 guards, as bench/engine_vs_loop.py; zero where the logit clip is active), so its norm
# is |a_j| ||x_j||: both baselines clip every example's gradient through the record norms ||x_j||,
# computed once per run (inside the timed region).

TINY = np.float32(1e-30)


def _record_norms(x):
    return np.sqrt(np.einsum("snd,snd->sn", x, x))


def _logistic_coefficients(z, yb):
    """``a = sigmoid(clip(z)) - y``, zero where the logit clip is active (as its derivative is)."""
    return (1.0 / (1.0 + np.exp(-np.clip(z, -LOGIT_CLIP, LOGIT_CLIP))) - yb) * (np.abs(z) < LOGIT_CLIP)


def silo_vectorised_mbsgd(x, y, n, *, rounds, batch, lr, sigma, clip, rng):
    """The headline baseline's noisy MB-SGD: loops over rounds only. Per round one ``[silos, K, d]``
    gather of every silo's with-replacement minibatch (``take`` on flat row indices, faster than fancy
    indexing), whole-array per-example clipping and averaging, one ``standard_normal((silos, d))`` draw
    (``sigma = 0``: none), the mean over silos."""
    silos, rows_per_silo, d = x.shape
    flat_x, flat_y, flat_norms = x.reshape(-1, d), y.reshape(-1), _record_norms(x).reshape(-1)
    offsets = (np.arange(silos) * rows_per_silo)[:, None]
    w = np.zeros(d, np.float32)
    for _ in range(rounds):
        rows = (rng.integers(0, n, (silos, batch)) + offsets).ravel()
        xb = flat_x.take(rows, axis=0).reshape(silos, batch, d)                   # [S, K, d]
        a = _logistic_coefficients(xb @ w, flat_y.take(rows).reshape(silos, batch))
        a *= np.minimum(1.0, clip / np.maximum(np.abs(a) * flat_norms.take(rows).reshape(silos, batch), TINY))
        g = np.matmul(a[:, None, :], xb)[:, 0] * (1.0 / batch)                       # [S, d] clipped means
        if sigma > 0:
            g += sigma * rng.standard_normal((silos, d), dtype=np.float32)
        w -= (lr / silos) * g.sum(axis=0)
    return w


def silo_vectorised_local_sgd(x, y, n, *, rounds, steps, lr, sigma, clip, rng):
    """The headline baseline's noisy Local SGD: loops over rounds and the K sequential local steps. Per
    round one ``[K, silos, d]`` gather of every silo's K records and one ``standard_normal((K, silos, d))``
    draw; each step updates the 25 silos' models ``[silos, d]`` in whole-array operations."""
    silos, rows_per_silo, d = x.shape
    flat_x, flat_y, flat_norms = x.reshape(-1, d), y.reshape(-1), _record_norms(x).reshape(-1)
    offsets = np.arange(silos) * rows_per_silo
    w = np.zeros(d, np.float32)
    for _ in range(rounds):
        rows = (rng.integers(0, n, (steps, silos)) + offsets).ravel()
        xs = flat_x.take(rows, axis=0).reshape(steps, silos, d)                    # [K, S, d]
        ys, ns = flat_y.take(rows).reshape(steps, silos), flat_norms.take(rows).reshape(steps, silos)
        noise = None
        if sigma > 0:
            noise = rng.standard_normal((steps, silos, d), dtype=np.float32)
            noise *= lr * sigma
        v = np.repeat(w[None], silos, axis=0)                                       # [S, d]
        for t in range(steps):
            xt = xs[t]
            a = _logistic_coefficients(np.einsum("sd,sd->s", v, xt), ys[t])
            a *= np.minimum(lr, (lr * clip) / np.maximum(np.abs(a) * ns[t], TINY))  # lr x clip factor
            v -= a[:, None] * xt
            if noise is not None:
                v -= noise[t]
        w = v.mean(axis=0)
    return w


def looped_mbsgd(x, y, n, *, rounds, batch, lr, sigma, clip, rng):
    """The looped baseline's noisy MB-SGD: loops over rounds and silos, vectorised within each minibatch."""
    silos, _, d = x.shape
    norms = _record_norms(x)
    w = np.zeros(d, np.float32)
    for _ in range(rounds):
        total = np.zeros(d, np.float32)
        for i in range(silos):
            idx = rng.integers(0, n, batch)
            xb = x[i, idx]
            a = _logistic_coefficients(xb @ w, y[i, idx])
            a *= np.minimum(1.0, clip / np.maximum(np.abs(a) * norms[i, idx], TINY))
            g = (a @ xb) * (1.0 / batch)
            if sigma > 0:
                g += sigma * rng.standard_normal(d, dtype=np.float32)
            total += g
        w -= (lr / silos) * total
    return w


def looped_local_sgd(x, y, n, *, rounds, steps, lr, sigma, clip, rng):
    """The looped baseline's noisy Local SGD: loops over rounds, silos and the K sequential one-record
    steps (scalar Python for the record's logit and clip factor); each silo-round's K indices and K x d
    noise are drawn by one call each."""
    silos, _, d = x.shape
    norms = _record_norms(x)
    w = np.zeros(d, np.float32)
    for _ in range(rounds):
        total = np.zeros(d, np.float32)
        for i in range(silos):
            idx = rng.integers(0, n, steps)
            xs, ys, ns = x[i, idx], y[i, idx].tolist(), norms[i, idx].tolist()
            noise = None
            if sigma > 0:
                noise = rng.standard_normal((steps, d), dtype=np.float32)
                noise *= lr * sigma
            v = w.copy()
            for t in range(steps):
                xt = xs[t]
                z = float(xt @ v)
                if -LOGIT_CLIP < z < LOGIT_CLIP:     # else the clipped logit has zero derivative
                    a = 1.0 / (1.0 + math.exp(-z)) - ys[t]
                    norm = abs(a) * ns[t]
                    if norm > clip:
                        a *= clip / norm
                    v -= (lr * a) * xt
                if noise is not None:
                    v -= noise[t]
            total += v
        w = total * (1.0 / silos)
    return w


BASELINES = {   # key -> the name in the table (the first is the headline)
    "numpy_silo_vectorised": "NumPy silo-vectorised (headline baseline)",
    "numpy_looped": "NumPy looped",
    "authors_script_structure": "vs the authors' script structure",
}
COMPETENT = {"numpy_silo_vectorised": (silo_vectorised_mbsgd, silo_vectorised_local_sgd),
             "numpy_looped": (looped_mbsgd, looped_local_sgd)}


def one_blas_thread():
    """Single-threaded BLAS for the baseline: on 2 cores the 50 x 50 factorization of every noise draw
    runs ~15% faster than with NumPy's default 2 threads (a conservative baseline)."""
    return threadpool_limits(1, "blas") if threadpool_limits is not None else contextlib.nullcontext()


def numpy_metrics(w, trial: spec.Trial) -> dict:
    x, y = np.asarray(trial.train.x, np.float64), np.asarray(trial.train.y, np.float64)
    mask = np.asarray(trial.train.mask())
    s = 1.0 / (1.0 + np.exp(-np.clip(x @ w, -LOGIT_CLIP, LOGIT_CLIP)))
    loss = -(y * np.log(1e-12 + s) + (1.0 - y) * np.log(1e-12 + 1.0 - s))
    test_x, test_y = (np.asarray(trial.eval_data[k]) for k in ("test_x", "test_y"))
    error = np.mean((test_x.astype(np.float64) @ w > 0).astype(np.int32) != test_y)
    return {"train_loss": float(np.sum(loss * mask) / np.sum(mask)), "test_error": float(error)}


# ------------------------------------------------------------------------------------------------
# jaxfl: the study's grid programs, run as jaxfl.studies.runner.run runs them


def program_of(study, family, trial) -> spec.Program:
    """The family's one grid program on the M = 25 panel (``{"epsilon", "step_size"}``, rounds, the
    trial's ``z(eps = 1)`` and ``L`` as constants)."""
    (program,) = FAMILIES[family].programs(study, PANEL, trial)
    return program


def seeds_of(study, trial):
    return [study.seed(trial, 0, r) for r in range(study.reps)]   # as study.run (panel 0)


def grid_sweep(study, family, program, trial, seeds, fam=None):
    """One family's whole grid on one trial: :func:`jaxfl.studies.runner._sweep`, i.e. exactly what
    :func:`jaxfl.studies.runner.run` calls (``jaxfl.engine.sweep`` of ``study._builder(family,
    program.static)``, ``study.configs_per_batch`` configs per call, every configuration accounted)."""
    return runner._sweep(study, fam or FAMILIES[family], program, trial, seeds)


def compile_programs(study, trial) -> dict:
    """AOT-compiles each family's grid program (``jaxfl.engine.sweep``'s cached program of the study's
    build) for the batch shape the sweep uses (jit's cache then serves every trial); seconds per family."""
    seconds = {}
    for family in FAMILIES:
        program = program_of(study, family, trial)
        configs = grid_points(program.grid)
        names = tuple(program.grid)
        batch = len(configs) if study.configs_per_batch is None else int(study.configs_per_batch)
        take = np.minimum(np.arange(batch), len(configs) - 1)
        table = {n: jnp.asarray([c[n] for c in configs], jnp.float32)[take] for n in names}
        table["__config__"] = jnp.arange(len(configs))[take]
        fn = sweep_program(runner._builder(FAMILIES[family], program.static), names, int(program.rounds),
                           study.evaluate, True)
        constants = jax.tree_util.tree_map(jnp.asarray, dict(program.constants))
        t0 = time.perf_counter()
        fn.lower(table, jnp.asarray(np.asarray(seeds_of(study, 0))), trial.train, study.init(study.init_seed),
                 trial.eval_data, constants).compile()
        seconds[family] = time.perf_counter() - t0
    return seconds


def selected(out, eps) -> tuple[int, float]:
    """The study's selection at ``eps``: the config with the smallest mean final training loss."""
    score = np.where(np.isfinite(out.metrics["train_loss"]), out.metrics["train_loss"], np.inf).mean(axis=1)
    idx = [i for i, c in enumerate(out.configs) if c["epsilon"] == eps]
    best = idx[int(np.argmin(score[idx]))]
    return best, float(out.configs[best]["step_size"])


def jaxfl_check_runs(study, family, trial, configs) -> list[dict]:
    """``CHECK_SEEDS`` jaxfl runs (``jaxfl.engine.sweep`` of the study's build, one program) of each
    ``(step size, epsilon)`` in ``configs`` (epsilon 0: non-private); final metrics per configuration."""
    program = program_of(study, family, trial)
    grid = [{"epsilon": eps, "step_size": lr} for lr, eps in configs]
    out = sweep(runner._builder(FAMILIES[family], program.static), grid, trial.train, study.init(study.init_seed),
                rounds=program.rounds, seeds=range(7_000_000, 7_000_000 + CHECK_SEEDS), evaluate=study.evaluate,
                eval_data=trial.eval_data, constants=program.constants)
    return [{k: np.asarray(v[c], np.float64) for k, v in out.metrics.items()} for c in range(len(configs))]


def agreement(np_values, jax_values) -> dict:
    """Two-sample z-score of the NumPy mean against jaxfl's (jaxfl's spread for both samples)."""
    np_values, jax_values = np.asarray(np_values, float), np.asarray(jax_values, float)
    sd = float(np.std(jax_values, ddof=1))
    se = sd * math.sqrt(1.0 / len(np_values) + 1.0 / len(jax_values))
    z = (float(np.mean(np_values)) - float(np.mean(jax_values))) / se if se > 0 else 0.0
    return {"numpy_mean": float(np.mean(np_values)), "numpy_values": np_values.tolist(),
            "jaxfl_mean": float(np.mean(jax_values)), "jaxfl_sd": sd, "jaxfl_runs": len(jax_values), "z": z}


# ------------------------------------------------------------------------------------------------


def full_study():
    """``lowy-convex/mnist``'s full form on its M = 25 panel."""
    return dataclasses.replace(LC.MNIST, panels=(PANEL,))


def quick_study():
    """A tiny grid on the quick MNIST silos (100 images per digit, 200 per silo; PCA fitted on 3000 images)."""
    s = LC.MNIST.form_of(quick=True)
    settings = {**s.settings, "epsilons": (0.75, 18.0), "rounds": 3, "mbsgd_steps": s["mbsgd_steps"][1:3],
                "local_steps": s["local_steps"][1:3]}
    return dataclasses.replace(s, settings=settings, reps=2, trials=2, configs_per_batch=None, panels=(PANEL,))



def machine(load_start, load_end, load_numpy) -> dict:
    return {**processor(), "cores": os.cpu_count(), "device": jax.default_backend(),
            "python": platform.python_version(), "jax": jax.__version__, "numpy": np.__version__,
            "load_average_1min_start": load_start, "load_average_1min_numpy_phase_start": load_numpy,
            "load_average_1min_end": load_end}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny grid and subset (seconds)")
    parser.add_argument("--trials", type=int, default=None, help="trials to run (default: the paper's 20)")
    parser.add_argument("--reps", type=int, default=5,
                        help="interleaved timed runs per (family, private) of each of the two new NumPy baselines")
    parser.add_argument("--local-runs", type=int, default=3,
                        help="timed DP Local SGD runs of the authors'-script-structure baseline (~45 s each)")
    parser.add_argument("--check-runs", type=int, default=None,
                        help="extra untimed NumPy DP Local SGD runs for the check (default 16; quick: 4)")
    parser.add_argument("--no-ablation", action="store_true", help="skip the draw-ahead-off trial")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.check_runs is None:
        args.check_runs = 4 if args.quick else 16
    root = Path(__file__).resolve().parent
    default = root.parent / "runs" / "bench" / "lowy_convex_grid.quick.json" if args.quick else \
        root / "results" / "lowy_convex_grid.json"
    out_path = Path(args.out) if args.out else default
    load_start = os.getloadavg()[0]
    study = quick_study() if args.quick else full_study()
    if args.trials is not None:
        study = dataclasses.replace(study, trials=args.trials)
    rounds, batch_size, epsilons = study["rounds"], study["batch_size"], tuple(study["epsilons"])
    fams = {"mbsgd": "MB-SGD", "local": "Local SGD"}
    runs = {(f, p): study.trials * (len(epsilons) if p else 1) * len(study[f"{f}_steps"]) * study.reps
            for f in fams for p in (True, False)}
    total_runs = sum(runs.values())
    print(f"grid: {study.trials} trials x 2 families x ({len(epsilons)} eps + non-private) x "
          f"{len(study['mbsgd_steps'])} step sizes x {study.reps} reps = {total_runs} runs; R={rounds}, "
          f"K={batch_size}, M={M}; load average {load_start:.2f}", flush=True)

    # ---- jaxfl: the whole grid -----------------------------------------------------------------
    t0 = time.perf_counter()
    first = study.data(study, 0)
    data_seconds = [time.perf_counter() - t0]
    compile_seconds = compile_programs(study, first)
    print(f"compiled: MB-SGD {compile_seconds['mbsgd']:.1f} s, Local SGD {compile_seconds['local']:.1f} s",
          flush=True)
    grid_seconds = {f: [] for f in fams}
    outputs0, summary = {}, {(f, e): [] for f in fams for e in [*epsilons, 0.0]}
    for trial in range(study.trials):
        if trial:
            t0 = time.perf_counter()
            data = study.data(study, trial)
            data_seconds.append(time.perf_counter() - t0)
        else:
            data = first
        for family in fams:
            program = program_of(study, family, data)     # the trial's constants: z(eps = 1), L
            t0 = time.perf_counter()
            out = grid_sweep(study, family, program, data, seeds_of(study, trial))
            grid_seconds[family].append(time.perf_counter() - t0)
            for eps in [*epsilons, 0.0]:
                best, lr = selected(out, eps)
                summary[family, eps].append((lr, float(np.mean(out.metrics["test_error"][best]))))
            if trial == 0:
                outputs0[family] = out
        print(f"  trial {trial + 1}/{study.trials}: MB-SGD {grid_seconds['mbsgd'][-1]:6.1f} s, "
              f"Local SGD {grid_seconds['local'][-1]:6.1f} s", flush=True)
    run_seconds = {f: float(sum(v)) for f, v in grid_seconds.items()}
    jaxfl_seconds = sum(compile_seconds.values()) + sum(run_seconds.values())
    print(f"jaxfl whole grid: {jaxfl_seconds:.1f} s (compile {sum(compile_seconds.values()):.1f} s, "
          f"runs {sum(run_seconds.values()):.1f} s; data preparation {sum(data_seconds):.1f} s not counted)",
          flush=True)

    ablation = None
    if not args.quick and not args.no_ablation:
        # One trial's Local SGD grid with the local steps' randomness drawn inside the loop (the engine
        # before draw-ahead): a fresh program (new cache key) traced with draw-ahead disabled.
        old, local.DRAW_AHEAD_ELEMENTS = local.DRAW_AHEAD_ELEMENTS, 0
        try:
            off = dataclasses.replace(FAMILIES["local"], name="local-draw-ahead-off")   # new _builder key
            program = program_of(study, "local", first)
            grid_sweep(study, "local", program, first, seeds_of(study, 0), fam=off)   # compile
            t0 = time.perf_counter()
            grid_sweep(study, "local", program, first, seeds_of(study, 0), fam=off)
            ablation = {"setting": "Local SGD grid of trial 1 with draw-ahead off (randomness drawn in the loop)",
                        "jaxfl_seconds": time.perf_counter() - t0,
                        "jaxfl_seconds_draw_ahead": grid_seconds["local"][0]}
        finally:
            local.DRAW_AHEAD_ELEMENTS = old
        print(f"draw-ahead off, one trial's Local SGD grid: {ablation['jaxfl_seconds']:.1f} s "
              f"(on: {ablation['jaxfl_seconds_draw_ahead']:.1f} s)", flush=True)

    # ---- NumPy: timed subsets, check, extrapolation ---------------------------------------------
    load_numpy = os.getloadavg()[0]
    x, y = np.asarray(first.train.x, np.float64), np.asarray(first.train.y, np.float64)
    x32, y32 = np.asarray(first.train.x, np.float32), np.asarray(first.train.y, np.float32)
    n = int(first.train.counts[0])
    assert np.all(np.asarray(first.train.counts) == n), "the baselines assume equal silos"
    assert int(first.train.num_silos) == M, "the baselines assume all silos take part in every round"
    lip, delta = float(first.info["lipschitz"]), float(np.asarray(first.deltas)[0])
    check_eps = 3.0 if 3.0 in epsilons else epsilons[-1]
    reps = max(3, args.reps)
    timed = {"authors_script_structure": {("mbsgd", True): 10, ("mbsgd", False): 5, ("local", True): args.local_runs,
                                          ("local", False): 3},
             **{b: {k: reps for k in runs} for b in COMPETENT}}
    if args.quick:
        timed["authors_script_structure"] = {k: 2 for k in runs}
    seconds = {b: {} for b in BASELINES}
    checks, labels = {}, {}
    for family, name in fams.items():
        picks = {p: (selected(outputs0[family], check_eps if p else 0.0)[1], check_eps if p else 0.0)
                 for p in (True, False)}
        refs = dict(zip(picks, jaxfl_check_runs(study, family, first, list(picks.values()))))
        for private, (lr, eps) in picks.items():
            kind = family, private
            label = f"{'DP ' if private else ''}{name}" + (f" (eps={eps:g})" if private else " (non-private)")
            labels[kind] = label
            if family == "mbsgd":
                sigma = sigma_experiment_mbsgd(lip, n, rounds, eps, delta) if private else 0.0
                hyper = dict(rounds=rounds, batch=batch_size, lr=lr, sigma=sigma, clip=lip)
            else:
                sigma = sigma_experiment_local_sgd(lip, n, rounds, batch_size, eps, delta) if private else 0.0
                hyper = dict(rounds=rounds, steps=batch_size, lr=lr, sigma=sigma, clip=lip)
            entry = checks[label] = {"trial": 0, "step_size": lr, "epsilon": eps if private else None,
                                     "sigma": float(sigma)}

            # The two competent-user baselines, interleaved: repetition r runs each once, back to back.
            metrics = {b: [] for b in COMPETENT}
            for b in COMPETENT:
                seconds[b][kind] = []
            for r in range(reps):
                for j, (b, fns) in enumerate(COMPETENT.items()):
                    fn = fns[0] if family == "mbsgd" else fns[1]
                    rng = np.random.default_rng([r, j, 17])  # host-rng-ok: the NumPy baselines' own generator (PCG64)
                    t0 = time.perf_counter()
                    w = fn(x32, y32, n, rng=rng, **hyper)
                    seconds[b][kind].append(time.perf_counter() - t0)
                    metrics[b].append(numpy_metrics(np.asarray(w, np.float64), first))
            for b in COMPETENT:
                entry[b] = {"numpy_runs": reps, "numpy_seconds": seconds[b][kind],
                            **{k: agreement([m[k] for m in metrics[b]], refs[private][k])
                               for k in ("train_loss", "test_error")}}

            # vs the authors' script structure (float64, RandomState, multivariate_normal noise).
            if family == "mbsgd":
                fn = lambda rs: numpy_mbsgd(x, y, rounds=rounds, batch=batch_size, lr=lr, sigma=sigma,
                                            clip=lip, rs=rs)
            else:
                fn = lambda rs: numpy_local_sgd(x, y, rounds=rounds, steps=batch_size, lr=lr, sigma=sigma,
                                                clip=lip, rs=rs)
            seconds["authors_script_structure"][kind], authors_metrics = [], []
            for r in range(timed["authors_script_structure"][kind]):
                rs = np.random.RandomState(1000 + r)  # host-rng-ok: the baseline's generator (legacy, as the authors')
                with one_blas_thread():
                    t0 = time.perf_counter()
                    w = fn(rs)
                    seconds["authors_script_structure"][kind].append(time.perf_counter() - t0)
                authors_metrics.append(numpy_metrics(w, first))
            entry["authors_script_structure"] = {
                "numpy_runs": len(authors_metrics), "numpy_seconds": seconds["authors_script_structure"][kind],
                **{k: agreement([m[k] for m in authors_metrics], refs[private][k])
                   for k in ("train_loss", "test_error")}}
            if family == "local" and private:
                # The timed runs are few (a minute each): more runs of the same algorithm with the noise drawn
                # as sigma * standard_normal (the same N(0, sigma^2 I), ~30x cheaper) for a sharper check.
                extra = [numpy_metrics(numpy_local_sgd(x, y, rounds=rounds, steps=batch_size, lr=lr,
                                                       sigma=sigma, clip=lip, noise="normal",
                                                       rs=np.random.RandomState(3000 + r)), first)  # host-rng-ok
                         for r in range(args.check_runs)]
                entry["authors_script_structure"]["same_noise_distribution_cheaper_draws"] = {
                    "numpy_runs": len(extra), "noise": "sigma * standard_normal(50)",
                    **{k: agreement([m[k] for m in extra], refs[private][k]) for k in ("train_loss", "test_error")}}

            ref = entry["numpy_silo_vectorised"]["train_loss"]
            print(f"  check {label}, step size {lr:.3g}: final training loss jaxfl {ref['jaxfl_mean']:.4f} "
                  f"+- {ref['jaxfl_sd']:.4f} ({ref['jaxfl_runs']} runs)", flush=True)
            for b in BASELINES:
                c = entry[b]
                print(f"    {BASELINES[b]:42s} {statistics.median(c['numpy_seconds']):8.3f} s/run "
                      f"({c['numpy_runs']} runs)  train loss {c['train_loss']['numpy_mean']:.4f} "
                      f"(z={c['train_loss']['z']:+.2f})  test error {c['test_error']['numpy_mean']:.4f} vs "
                      f"{c['test_error']['jaxfl_mean']:.4f} (z={c['test_error']['z']:+.2f})", flush=True)
                more = c.get("same_noise_distribution_cheaper_draws")
                if more:
                    print(f"    {'  same, sigma * standard_normal noise':42s} {'':8s}        "
                          f"({more['numpy_runs']} runs)"
                          f"  train loss {more['train_loss']['numpy_mean']:.4f} (z={more['train_loss']['z']:+.2f})"
                          f"  test error {more['test_error']['numpy_mean']:.4f} (z={more['test_error']['z']:+.2f})",
                          flush=True)

    # ---- extrapolation: median seconds per run x runs of that kind in the grid -----------------------
    kind_name = lambda f, p: f"{fams[f]} {'DP' if p else 'non-private'}"
    per_run = {b: {k: statistics.median(v) for k, v in seconds[b].items()} for b in BASELINES}
    extrapolated = {b: {k: per_run[b][k] * runs[k] for k in runs} for b in BASELINES}
    totals = {b: float(sum(extrapolated[b].values())) for b in BASELINES}
    jax_family = {f: compile_seconds[f] + run_seconds[f] for f in fams}
    headline = "numpy_silo_vectorised"
    baseline_seconds = totals[headline]
    ratio = baseline_seconds / jaxfl_seconds
    rows = [{"setting": f"jaxfl: whole grid ({total_runs} runs), vmapped programs, compilation included",
             "implementation": "jaxfl", "seconds": jaxfl_seconds, "compile_seconds": sum(compile_seconds.values()),
             "run_seconds": sum(run_seconds.values()),
             "family_seconds": {fams[f]: jax_family[f] for f in fams},
             "seconds_per_trial": {fams[f]: grid_seconds[f] for f in fams}}]
    for b, setting in BASELINES.items():
        fam_seconds = {f: extrapolated[b][f, True] + extrapolated[b][f, False] for f in fams}
        rows.append({"setting": setting, "implementation": b, "seconds": totals[b], "hours": totals[b] / 3600,
                     "ratio": totals[b] / jaxfl_seconds,
                     "ratio_vs_jaxfl_without_compilation": totals[b] / sum(run_seconds.values()),
                     "family_seconds": {fams[f]: fam_seconds[f] for f in fams},
                     "family_ratio": {fams[f]: fam_seconds[f] / jax_family[f] for f in fams},
                     "seconds_per_run": {kind_name(*k): v for k, v in per_run[b].items()},
                     "runs_timed": {kind_name(*k): len(v) for k, v in seconds[b].items()}})
    if ablation is not None:
        rows.append(ablation)
    load_end = os.getloadavg()[0]
    record = {
        "benchmark": "lowy_convex_grid",
        "machine": machine(load_start, load_end, load_numpy),
        "ratio": ratio,
        "baseline": "NumPy silo-vectorised: the same runs (same algorithm, data, grid, R, K) one at a time in float32, "
                    "per round one [silos, K, d] gather, whole-array per-example clipping and averaging, noise for "
                    "all silos from one np.random.Generator.standard_normal(dtype=float32) call (PCG64); Python loops "
                    "over runs and rounds only (and Local SGD's K sequential steps); timed on complete runs and "
                    "extrapolated (see numpy_subset); ratio = extrapolated NumPy silo-vectorised seconds / jaxfl's "
                    "whole-grid seconds (compilation included). Weaker baselines in rows: 'NumPy looped' and "
                    "'vs the authors' script structure' (the previous headline)",
        "quick": bool(args.quick),
        "jaxfl_seconds": jaxfl_seconds,
        "jaxfl_compile_seconds": sum(compile_seconds.values()),
        "jaxfl_run_seconds": sum(run_seconds.values()),
        "data_preparation_seconds": sum(data_seconds),
        "baseline_seconds_extrapolated": baseline_seconds,
        "baseline_hours_extrapolated": baseline_seconds / 3600,
        "numpy_subset": {
            "how": "per baseline and (family, private): complete NumPy runs (all R rounds, M silos, K steps) on "
                   f"trial 1's data at the configuration of the check (epsilon {check_eps:g} for the DP runs, the "
                   "step size jaxfl's grid selects there); the median seconds per run times the number of such "
                   "runs in the grid, summed over the four kinds. A run's work does not depend on epsilon or the "
                   "step size (up to the looped Local SGD skipping a step's gradient where the logit clip is "
                   "active). The silo-vectorised and looped baselines were timed in interleaved repetitions "
                   "(repetition r runs each once, back to back); the authors'-script-structure runs after them.",
            "runs_in_grid": {kind_name(*k): v for k, v in runs.items()},
            **{b: {"runs_timed": {kind_name(*k): len(v) for k, v in seconds[b].items()},
                   "seconds_timed": {kind_name(*k): v for k, v in seconds[b].items()},
                   "seconds_per_run_median": {kind_name(*k): v for k, v in per_run[b].items()},
                   "seconds_per_run_best": {kind_name(*k): min(v) for k, v in seconds[b].items()},
                   "seconds_extrapolated": {kind_name(*k): v for k, v in extrapolated[b].items()},
                   "seconds_extrapolated_total": totals[b]}
               for b in BASELINES},
        },
        "grid": {"trials": study.trials, "epsilons": list(epsilons), "rounds": rounds,
                 "batch_size_K": batch_size, "silos": int(first.train.num_silos), "records_per_silo": n,
                 "features": int(first.train.x.shape[-1]), "silos_per_round": M, "reps": study.reps,
                 "step_sizes_mbsgd": list(study["mbsgd_steps"]), "step_sizes_local_sgd": list(study["local_steps"]),
                 "runs": total_runs, "configs_per_batch": study.configs_per_batch,
                 "form": "QUICK (tiny settings)" if args.quick else "full (the paper's M = 25 panel)"},
        "rows": rows,
        "check": {"how": "untimed comparison of final metrics: each baseline's timed runs (trial 0, the configuration "
                         "in numpy_subset) against 24 jaxfl runs of the same configuration (different random "
                         "streams: compare levels, not bits); z = (NumPy mean - jaxfl mean) / (jaxfl sd x "
                         "sqrt(1/n_numpy + 1/n_jaxfl))",
                  **checks},
        "selected_mean_over_trials": {
            f"{fams[f]} {'eps=%g' % e if e else 'non-private'}": {
                "step_sizes": [v[0] for v in vals], "test_error_rep_mean": float(np.mean([v[1] for v in vals]))}
            for (f, e), vals in summary.items()},
        "notes": [
            f"1-minute load average {load_start:.2f} at the start, {load_numpy:.2f} when the NumPy phase began and "
            f"{load_end:.2f} at the end (2 shared cores; other processes' load slows both sides)",
            "jaxfl_seconds = AOT compilation of the two grid programs + every trial's sweeps, run as "
            "jaxfl.studies.runner.run runs them (jaxfl.engine.sweep of the study's cached builds, each "
            "configuration's 'lowy' accounting included: milliseconds); the data preparation (MNIST PCA, splits; "
            "the same for all implementations) is reported separately",
            "NumPy silo-vectorised and looped: float32 (as jaxfl), np.random.default_rng (PCG64) integers for the "
            "with-replacement indices and standard_normal(dtype=float32) for the noise, NumPy's default BLAS threads "
            "(a development A/B against one BLAS thread showed no difference beyond 2%); per-example clipping "
            "through |s - y| ||x_j|| (logistic regression's per-example gradient "
            "is (s - y) x_j; the loss's 1e-12 guards dropped from the derivative, as bench/engine_vs_loop.py), the "
            "record norms computed once per run inside the timed region",
            "Not measured: NumPy vectorised across configurations as well (jaxfl's own vmap over the 35 configs x 3 "
            "seeds of a batch); the silo-vectorised baseline runs one configuration and seed at a time",
            "vs the authors' script structure: NumPy BLAS threads limited to 1 (threadpoolctl: %s) while timing: the "
            "per-draw 50 x 50 factorization of np.random.multivariate_normal is ~15%% faster than with the default 2 "
            "threads on this machine; deviations from the authors' scripts, none affecting the hot loops: mean (not "
            "sum) aggregation as jaxfl; no training-loss evaluation every 5 rounds and no averaging of the last 8 "
            "iterates (the harness reports w_R); per-example clipping at L (never binds) computed as jaxfl does"
            % ("used" if threadpool_limits is not None else "not installed, default threads"),
        ],
    }
    write_benchmark(record, out_path)
    print(f"\n{'':44s} {'whole grid':>13s} {'ratio':>8s} {'MB-SGD':>10s} {'ratio':>7s} "
          f"{'Local SGD':>11s} {'ratio':>7s}")
    print(f"{'jaxfl (vmapped programs, compilation incl.)':44s} {jaxfl_seconds:11.1f} s {'':8s} "
          f"{jax_family['mbsgd']:8.1f} s {'':7s} {jax_family['local']:9.1f} s")
    for row in rows[1:1 + len(BASELINES)]:
        fs, fr = row["family_seconds"], row["family_ratio"]
        print(f"{row['setting']:44s} {row['seconds']:11.1f} s {row['ratio']:7.1f}x {fs['MB-SGD']:8.1f} s "
              f"{fr['MB-SGD']:6.1f}x {fs['Local SGD']:9.1f} s {fr['Local SGD']:6.1f}x")
    print(f"headline ratio {ratio:.1f}x: NumPy silo-vectorised {baseline_seconds / 60:.1f} min extrapolated vs jaxfl "
          f"{jaxfl_seconds / 60:.1f} min for the whole grid   -> {out_path}")


if __name__ == "__main__":
    source_revision()   # the checkout as it is now: write_benchmark records it at the end
    main()
