"""Seed 000's experiments (Lowy & Razaviyayn, App. I): ``jaxfl reproduce lowy-convex/{mnist,insurance,obesity}``.

Figures 4-6 of the paper: test error against epsilon for ISRL-DP MB-SGD (noisy minibatch SGD, the
paper's Alg. 2), ISRL-DP Local SGD (noisy FedAvg) and their non-private versions.

* Noise: the paper's experimental calibration (§6, "moments accountant"),
  ``sigma^2 = 8 L^2 R ln(1/delta) / (n^2 eps^2)`` on a silo's minibatch mean for MB-SGD with
  ``K = batch_experiment(n, R, max eps)``, and ``sigma^2 = 8 L^2 R K ln(1/delta) / (n^2 eps^2)`` on
  every one-sample step of Local SGD (:mod:`jaxfl.accounting.lowy_convex`). The engine adds
  ``N(0, (z C)^2)`` to a silo's clipped *sum* and divides by ``K``, so ``z = sigma K / C``; the
  per-example clip ``C`` is ``L = 2 max ||x||`` (MNIST, obesity; then clipping never binds) or the
  tuned clip threshold (insurance, where ``L := C``). ``z`` does not depend on ``L`` and falls as
  ``1 / eps``, so the sweep computes it inside ``build`` from the traced epsilon.
* Honesty: that calibration rests on Abadi et al.'s Theorem 1 (unspecified constants, Poisson
  sampling) while the minibatches are drawn with replacement. Every DP run records the paper's
  nominal epsilon *and* the epsilon jaxfl's ``"lowy"`` accountant certifies for the noise actually
  added (R rounds of the algorithm's per-silo events; inf where the calculus proves nothing), and,
  for comparison only, what the RDP accountant would give under Poisson sampling at rate ``K/n``.
* Protocol: per trial (a fresh split), each algorithm's whole grid (epsilons plus the non-private
  run, step sizes, [clip thresholds]) x 3 repetitions is one vmapped program (:func:`grid_sweep`:
  :func:`jaxfl.engine.sweep.sweep` with the trial's data as a jit argument, so that one compiled
  program serves every trial); the step size (and clip) is selected per epsilon by the
  average final training loss over the repetitions (the paper tunes non-privately, as it says),
  and the test error of the final iterates ``w_R`` is reported. Aggregation is the mean over the
  ``M`` participating silos (paper), not the authors' code's sum.

``docs/reproductions.md`` lists every deviation from the authors' scripts and what jaxfl does.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import time
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxfl.accounting import epsilon_for
from jaxfl.accounting.lowy_convex import (batch_experiment, noise_multiplier_from_sigma, sigma_experiment_local_sgd,
                                          sigma_experiment_mbsgd)
from jaxfl.algorithms import local_sgd, minibatch_sgd
from jaxfl.engine import SweepResult, grid_points, make_ledger, run_rounds
from jaxfl.engine.sweep import run_batched
from jaxfl.experiments import lowy_convex_data as D
from jaxfl.experiments import lowy_convex_report as report
from jaxfl.experiments.registry import register

MB, LOCAL = "mbsgd", "local"
NAMES = {(MB, True): "ISRL-DP MB-SGD", (LOCAL, True): "ISRL-DP Local SGD",
         (MB, False): "MB-SGD (non-private)", (LOCAL, False): "Local SGD (non-private)"}


@dataclasses.dataclass(frozen=True)
class Setup:
    """One experiment's settings (the paper's, or a quick form's)."""

    dataset: str                      # "mnist" | "insurance" | "obesity"
    quick: bool
    epsilons: tuple
    rounds: int                       # R
    batch_size: int                   # K: MB-SGD minibatch and Local SGD local steps
    silos_per_round: tuple            # the M values run (one panel each)
    mb_steps: tuple                   # step-size grids
    local_steps: tuple
    clips: tuple | None               # insurance's clip grid; None: clip at L
    reps: int
    trials: int
    metric: str                       # "misclassification" | "relative RMSE"
    average_params: bool              # test error of the rep-averaged w_R (MNIST, obesity) or mean test error
    trial_data: Callable = dataclasses.field(repr=False, default=None)
    init: Callable = dataclasses.field(repr=False, default=None)
    loss: Callable = dataclasses.field(repr=False, default=None)
    error: Callable = dataclasses.field(repr=False, default=None)   # (params, x, y, info) -> scalar
    configs_per_batch: int | None = None
    seed_base: int = 0
    notes: tuple = ()


def _exp_grid(lo, hi, num):
    return tuple(float(v) for v in np.exp(np.linspace(lo, hi, num)))


def mnist_setup(quick: bool, silos_per_round=(25, 12)) -> Setup:
    """Fig. 4: N = 25 digit-pair silos, n = 1238, R = 35, K = 443, M in {25, 12}."""
    eps = (0.75, 3.0, 18.0) if quick else (0.75, 1.5, 3.0, 6.0, 12.0, 18.0)
    per_label, pca_fit, rounds = (100, 3000, 12) if quick else (D.MNIST_PER_LABEL, None, 35)
    n = 2 * per_label - math.ceil(D.TEST_FRACTION * 2 * per_label)
    return Setup(
        "mnist", quick, eps, rounds, batch_experiment(n, rounds, max(eps)),
        (25,) if quick else tuple(silos_per_round),
        _exp_grid(-6, 0, 4 if quick else 10), _exp_grid(-8, -1, 4 if quick else 10), None,
        2 if quick else 3, 3 if quick else 20, "misclassification", True,
        trial_data=lambda t: D.mnist_trial(t, per_label=per_label, pca_fit_records=pca_fit),
        init=lambda: {"w": jnp.zeros(D.MNIST_PCA_DIM)}, loss=D.mnist_loss,
        error=lambda p, x, y, info: D.mnist_error(p, x, y),
        configs_per_batch=None if quick else 35, seed_base=1_000_000,
        notes=("PCA fitted on the first 3000 training images (quick form)",) if quick else ())


def insurance_setup(quick: bool) -> Setup:
    """Fig. 5: N = 10 target-sorted silos, M = 5 (the authors' final scripts), R = 35, K = 19."""
    num_silos = 10
    eps = (0.25, 3.0) if quick else (0.125, 0.25, 0.5, 1.0, 2.0, 3.0)
    rounds = 12 if quick else 35
    return Setup(
        "insurance", quick, eps, rounds,
        batch_experiment(math.ceil(D.INSURANCE_RECORDS / num_silos), rounds, max(eps)), (5,),
        _exp_grid(-8, 1, 4 if quick else 10), _exp_grid(-10, 0, 4 if quick else 10),
        (1e4, 1e32) if quick else (100.0, 1e4, 1e6, 1e8, 1e32),
        2 if quick else 3, 3 if quick else 20, "relative RMSE", False,
        trial_data=lambda t: D.insurance_trial(t, num_silos),
        init=lambda: {"w": jnp.zeros(7)}, loss=D.squared_loss,
        error=lambda p, x, y, info: D.relative_rmse(p, x, y, info["naive"]), seed_base=2_000_000)


def obesity_setup(quick: bool) -> Setup:
    """Fig. 6: N = 7 one-class silos, M = 3, R = 100, K = 30, 3 trials (means only)."""
    eps = (0.5, 9.0) if quick else (0.5, 1.0, 3.0, 6.0, 9.0)
    local = _exp_grid(-9, -2, 4) if quick else tuple(sorted(set(_exp_grid(-9, -2, 8) + _exp_grid(-12, -2, 8)[:5])))
    return Setup(
        "obesity", quick, eps, 20 if quick else 100, 30, (3,),
        _exp_grid(-7, -1, 4 if quick else 8), local, None,
        2 if quick else 3, 3, "misclassification", True,
        trial_data=D.obesity_trial,
        init=lambda: {"w": jnp.zeros((17, D.OBESITY_CLASSES))}, loss=D.softmax_loss,
        error=lambda p, x, y, info: D.softmax_error(p, x, y), seed_base=3_000_000,
        notes=("K = 30 is the paper's value (from n = 202 in the authors' split); the balanced silos here have "
               "n_min records (per_trial), for which batch_experiment would give int(0.15 n_min)",))


# ------------------------------------------------------------------------------------------------
# Noise multipliers and accounting


def unit_noise_multipliers(setup: Setup, counts, deltas) -> dict:
    """Per-silo noise multipliers at ``eps = 1`` (``z(eps) = z(1) / eps`` exactly): ``{MB: z, LOCAL: z}``.

    MB-SGD: ``z = sigma K / C`` with ``sigma = sigma_experiment_mbsgd(C, n_i, R, eps, delta_i)``;
    Local SGD: ``z = sigma / C`` per one-sample step with ``sigma_experiment_local_sgd``. Both are
    independent of ``C`` (the paper's ``L``).
    """
    counts = np.asarray(counts, np.float64)
    k, r = setup.batch_size, setup.rounds
    mb = noise_multiplier_from_sigma(sigma_experiment_mbsgd(1.0, counts, r, 1.0, deltas), 1.0, k)
    loc = noise_multiplier_from_sigma(sigma_experiment_local_sgd(1.0, counts, r, k, 1.0, deltas), 1.0, 1)
    return {MB: np.asarray(mb, np.float64), LOCAL: np.asarray(loc, np.float64)}


def _silo_z(z: np.ndarray):
    """A scalar when every silo has the same multiplier, else the per-silo array."""
    return float(z[0]) if np.all(z == z[0]) else z


def build_algorithm(setup: Setup, family: str, m: int, *, lr, z, clip):
    """The algorithm of ``family`` with step size ``lr``, noise multiplier(s) ``z`` and clip ``clip``."""
    if family == MB:
        return minibatch_sgd(setup.loss, server_opt=optax.sgd(lr), batch_size=setup.batch_size, clip_norm=clip,
                             noise_multiplier=z, silos_per_round=m)
    return local_sgd(setup.loss, client_opt=optax.sgd(lr), local_steps=setup.batch_size, batch_size=1,
                     clip_norm=clip, noise_multiplier=z, silos_per_round=m)


def certified_epsilon(setup: Setup, family: str, m: int, z, counts, deltas) -> float:
    """The epsilon jaxfl's ``"lowy"`` accountant certifies for R rounds of ``family`` with multiplier(s)
    ``z`` (max over silos at ``delta_i``), or inf where its calculus proves nothing."""
    ledger = make_ledger(build_algorithm(setup, family, m, lr=1.0, z=z, clip=1.0), counts, accountant="lowy")
    ledger.record(setup.rounds)
    return float(ledger.epsilon(deltas))


def reference_rdp_poisson(setup: Setup, family: str, z, counts, deltas) -> float:
    """For comparison only (not a guarantee for the with-replacement sampling run): the RDP epsilon of
    the same noise if each step were Poisson-sampled at rate ``K/n`` (MB-SGD, R steps) or ``1/n``
    (Local SGD, R K steps), add/remove-one neighbours, max over silos."""
    z = np.broadcast_to(np.asarray(z, np.float64), np.shape(counts))
    if family == MB:
        rates, steps = setup.batch_size / np.asarray(counts, np.float64), setup.rounds
    else:
        rates, steps = 1.0 / np.asarray(counts, np.float64), setup.rounds * setup.batch_size
    unique = {(float(zi), float(q), float(d)) for zi, q, d in zip(z, rates, deltas)}
    return max(_rdp_epsilon(zi, q, steps, d) for zi, q, d in unique)


@functools.lru_cache(maxsize=4096)
def _rdp_epsilon(z: float, rate: float, steps: int, delta: float) -> float:
    return epsilon_for(z, rate, steps, delta)


# ------------------------------------------------------------------------------------------------
# One trial: two sweeps (one per algorithm family), selection by training loss


_PROGRAMS: dict = {}


def _evaluate(setup: Setup, params, data, aux) -> dict:
    """Final training loss (mean over every silo's real records) and test error of one run."""
    per = jax.vmap(jax.vmap(setup.loss, in_axes=(None, 0, 0)), in_axes=(None, 0, 0))(params, data.x, data.y)
    mask = data.mask().astype(per.dtype)
    return {"train_loss": jnp.sum(per * mask) / jnp.sum(mask),
            "test_error": setup.error(params, aux["test_x"], aux["test_y"], aux)}


def grid_program(setup: Setup, family: str, m: int):
    """The compiled grid program of ``(setup, family, M)``: ``(table, seeds, data, aux) -> (params, infos,
    metrics)`` with leaves ``[configs, seeds, ...]``, the vmap of ``vmap`` of one run exactly as
    :func:`jaxfl.engine.sweep.sweep` builds it, except that the trial's data (``data``; ``aux``: test set,
    ``L``, unit noise multipliers, naive predictor) are *arguments* rather than closed-over constants, so
    that one compiled program serves every trial (``sweep`` traces and compiles anew for every call).
    Cached per ``(setup, family, M)``; jit recompiles only for new shapes.
    """
    key = (setup, family, m)
    if key not in _PROGRAMS:
        def one(hp, seed, data, aux):
            z = jnp.where(hp["eps"] > 0, aux["unit_z"] / jnp.maximum(hp["eps"], 1e-6), 0.0)
            clip = hp["clip"] if "clip" in hp else aux["lipschitz"]
            algorithm = build_algorithm(setup, family, m, lr=hp["lr"], z=z, clip=clip)
            state = algorithm.init(setup.init())
            state, infos = run_rounds(algorithm, state, data, jax.random.key(seed), 0, setup.rounds)
            return state.params, infos, _evaluate(setup, state.params, data, aux)

        over_seeds = jax.vmap(one, in_axes=(None, 0, None, None))
        _PROGRAMS[key] = jax.jit(jax.vmap(over_seeds, in_axes=(0, None, None, None)))
    return _PROGRAMS[key]


def grid_sweep(setup: Setup, family: str, m: int, grid: dict, data: D.TrialData, aux: dict, seeds) -> SweepResult:
    """:func:`jaxfl.engine.sweep.sweep` of ``grid`` (keys ``eps``, ``lr`` [, ``clip``]) with
    :func:`grid_program`: the same runs, keys and results (``tests/experiments`` checks it), batched by
    ``setup.configs_per_batch`` with the last batch padded to the common shape."""
    configs = grid_points(grid)
    table = {n: jnp.asarray([c[n] for c in configs], jnp.float32) for n in grid}
    seeds = np.asarray(list(seeds))
    out = run_batched(grid_program(setup, family, m), table, seeds, setup.configs_per_batch, data.train, aux)
    return SweepResult(configs, seeds, *out)


def trial_aux(setup: Setup, data: D.TrialData, family: str) -> dict:
    """The per-trial traced inputs of :func:`grid_program` besides the training data."""
    units = unit_noise_multipliers(setup, data.train.counts, data.deltas)
    aux = {"test_x": jnp.asarray(data.test_x), "test_y": jnp.asarray(data.test_y),
           "unit_z": jnp.asarray(_silo_z(units[family]), jnp.float32),
           "lipschitz": jnp.asarray(data.lipschitz if data.lipschitz is not None else 1.0, jnp.float32)}
    if "naive" in data.info:
        aux["naive"] = jnp.asarray(data.info["naive"], jnp.float32)
    return aux


def run_trial(setup: Setup, m: int, trial: int, data: D.TrialData, log=print) -> list[dict]:
    """Runs both families' grids on one trial; returns one row per (family, epsilon or non-private)."""
    counts = np.asarray(data.train.counts)
    units = unit_noise_multipliers(setup, counts, data.deltas)
    eps_axis = [*setup.epsilons, 0.0]          # 0.0: the non-private run (z = 0)
    seeds = [setup.seed_base + 1000 * trial + r for r in range(setup.reps)]
    rows = []
    for family in (MB, LOCAL):
        steps = setup.mb_steps if family == MB else setup.local_steps
        grid = {"eps": eps_axis, "lr": list(steps)}
        if setup.clips is not None:
            grid["clip"] = list(setup.clips)
        aux = trial_aux(setup, data, family)
        t0 = time.perf_counter()
        out = grid_sweep(setup, family, m, grid, data, aux, seeds)
        seconds = time.perf_counter() - t0
        log(f"    {NAMES[family, True].replace('ISRL-DP ', ''):10s} grid {len(out.configs)} configs x "
            f"{len(seeds)} reps: {seconds:6.1f} s")
        train_loss = np.asarray(out.metrics["train_loss"], np.float64)       # [configs, reps]
        test_error = np.asarray(out.metrics["test_error"], np.float64)
        score = np.where(np.isfinite(train_loss), train_loss, np.inf).mean(axis=1)
        cfg_eps = np.array([c["eps"] for c in out.configs])
        for eps in eps_axis:
            idx = np.flatnonzero(cfg_eps == eps)
            best = int(idx[np.argmin(score[idx])])
            params = jax.tree_util.tree_map(lambda a: np.asarray(a)[best], out.params)   # [reps, ...]
            if setup.average_params:
                mean_params = jax.tree_util.tree_map(lambda a: jnp.asarray(a.mean(axis=0)), params)
                error = float(setup.error(mean_params, aux["test_x"], aux["test_y"], aux))
            else:
                error = float(test_error[best].mean())
            private = eps > 0
            z = _silo_z(units[family] / eps) if private else 0.0
            rows.append({
                "family": family, "private": private, "algorithm": NAMES[family, private],
                "epsilon": float(eps) if private else None, "trial": trial, "silos_per_round": m,
                "delta": float(data.deltas[0]) if np.all(data.deltas == data.deltas[0]) else data.deltas.tolist(),
                "step_size": float(out.configs[best]["lr"]),
                "clip_norm": float(out.configs[best]["clip"]) if setup.clips is not None else data.lipschitz,
                "train_loss": float(score[best]), "test_error": error,
                "test_error_rep_mean": float(test_error[best].mean()),
                "diverged_configs": int(np.sum(~np.isfinite(score[idx]))),
                "noise_multiplier": z,
                "epsilon_certified": certified_epsilon(setup, family, m, z, counts, data.deltas) if private
                else math.inf,
                "epsilon_rdp_poisson_reference": reference_rdp_poisson(setup, family, z, counts, data.deltas)
                if private else math.inf,
                "wall_seconds": seconds / len(eps_axis),
                "infos": {k: np.asarray(v)[best] for k, v in out.infos.items()},   # [reps, rounds]
            })
    return rows


def run(setup: Setup, log=print) -> tuple[list[dict], dict]:
    """All trials and M values of ``setup``; returns ``(rows, config)``."""
    t_start = time.perf_counter()
    rows, per_trial = [], []
    for m in setup.silos_per_round:
        for trial in range(setup.trials):
            t0 = time.perf_counter()
            data = setup.trial_data(trial)
            log(f"  M={m} trial {trial + 1}/{setup.trials}: n_i={sorted(set(np.asarray(data.train.counts).tolist()))}"
                f", L={data.lipschitz if data.lipschitz is not None else 'clip grid'}")
            rows += run_trial(setup, m, trial, data, log)
            per_trial.append({"silos_per_round": m, "trial": trial, "lipschitz": data.lipschitz,
                              "silo_sizes": np.asarray(data.train.counts).tolist(), **data.info,
                              "seconds": time.perf_counter() - t0})
    config = {
        "paper": "Lowy & Razaviyayn, Private Federated Learning Without a Trusted Server (seed 000), App. I",
        "dataset": setup.dataset, "quick": setup.quick,
        "form": "QUICK FORM (tiny settings for CI; not the paper's)" if setup.quick else "full (the paper's settings)",
        "epsilons": list(setup.epsilons), "rounds": setup.rounds, "batch_size_K": setup.batch_size,
        "silos_per_round": list(setup.silos_per_round), "num_silos": int(rows and len(per_trial[0]["silo_sizes"])),
        "step_sizes_mbsgd": list(setup.mb_steps), "step_sizes_local_sgd": list(setup.local_steps),
        "clip_grid": list(setup.clips) if setup.clips is not None else "L = 2 max ||x|| (never binds)",
        "repetitions": setup.reps, "trials": setup.trials, "metric": setup.metric,
        "test_error_of": "rep-averaged w_R" if setup.average_params else "mean over reps of the test error of w_R",
        "selection": "per epsilon: the step size (and clip) with the smallest average final training loss over "
                     "the repetitions (non-private tuning, as the paper)",
        "delta": "1/n_i^2 per silo",
        "noise": "paper §6: sigma^2 = 8 L^2 R ln(1/delta)/(n^2 eps^2) (MB-SGD, on the minibatch mean); "
                 "8 L^2 R K ln(1/delta)/(n^2 eps^2) per Local SGD step",
        "accountant": "lowy (with-replacement sampling; Ullman amplification + advanced composition over R rounds, "
                      "each silo's own transcript; inf = nothing certified)",
        "aggregation": "mean over the M participating silos; reported iterate: final w_R",
        "per_trial": per_trial, "notes": list(setup.notes),
        "wall_seconds_total": time.perf_counter() - t_start,
    }
    return rows, config


def _reproduce(setup: Setup, out_dir: Path, *, prefix: str = "lowy-convex", runner=None, reporter=None,
               form: str | None = None) -> Path:
    """Runs ``setup`` (``runner(setup) -> (rows, config)``, default :func:`run`), writes its files with
    ``reporter`` (default :mod:`lowy_convex_report`) and prints its summary. Seed 002 reuses it."""
    runner, reporter = runner or run, reporter or report
    if form is None:
        form = "QUICK FORM (tiny settings, not the paper's)" if setup.quick else "full form (the paper's settings)"
    print(f"{prefix}/{setup.dataset}: {form}")
    rows, config = runner(setup)
    path = reporter.write(setup, rows, config, out_dir)
    print(reporter.summary_markdown(setup, rows))
    print(f"wall time {config['wall_seconds_total']:.1f} s ({form})")
    return path


@register("lowy-convex/mnist", "seed 000 Fig. 4: ISRL-DP vs non-private MB-SGD / Local SGD, MNIST odd-even, 25 silos")
def reproduce_mnist(quick: bool, out_dir: Path) -> Path:
    return _reproduce(mnist_setup(quick), Path(out_dir))


@register("lowy-convex/insurance", "seed 000 Fig. 5: ISRL-DP linear regression, insurance charges, 10 sorted silos")
def reproduce_insurance(quick: bool, out_dir: Path) -> Path:
    return _reproduce(insurance_setup(quick), Path(out_dir))


@register("lowy-convex/obesity", "seed 000 Fig. 6: ISRL-DP softmax regression, obesity levels, 7 one-class silos")
def reproduce_obesity(quick: bool, out_dir: Path) -> Path:
    return _reproduce(obesity_setup(quick), Path(out_dir))
