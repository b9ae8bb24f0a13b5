"""Seed 002's experiments (Lowy, Ghafelebashi & Razaviyayn, §4 / App. H):
``jaxfl reproduce lowy-nonconvex/{mnist,cifar10,wbcd}``.

Figures 4-10 of the paper: test error against epsilon for ISRL-DP SPIDER (per epsilon the better, by
final training loss, of FedProx-SPIDER (Alg. 3) over its phase-length grid and the alternate Fed-SPIDER
(Alg. 11)), ISRL-DP MB-SGD, ISRL-DP Local SGD, and non-private MB-SGD / Local SGD reference lines.

* Noise: the paper's experimental calibrations (:mod:`jaxfl.accounting.lowy_nonconvex`, digest §4.6,
  §4.8, §4.9): MB-SGD ``sigma^2 = 8 L^2 R ln(2/delta)/(n^2 eps^2)`` on a silo's minibatch mean; Local SGD
  ``K`` times that per one-sample step; FedProx-SPIDER ``sigma_1^2 = 16 L^2 ln(1/delta) max(R/q, 1) /
  (eps^2 n^2)`` at checkpoints and the cap ``sigma_hat_2^2 = 64 L^2 R ln(1/delta)/(eps^2 n^2)`` on every
  difference (``sigma_2 = inf``: beta unknown); Alt Fed-SPIDER ``8`` (fresh) and ``32`` (difference)
  ``L^2 R ln(2/delta)/(n^2 eps^2)``. ``L`` is the per-example clip threshold ``C`` (global L2 norm), a
  grid parameter. The engine adds ``N(0, (z C)^2)`` to a clipped *sum* of ``K`` terms (``N(0, (z 2C)^2)``
  to a sum of clipped differences), so ``z = sigma K / C`` (fresh) and ``z = sigma K / (2C)``
  (difference); every ``z`` is independent of ``C`` and proportional to ``1/eps``, so the grid programs
  take ``z(eps = 1)`` as data and divide by the traced epsilon. ``K = int(n sqrt(24) / (2 sqrt(R)))``
  (the authors' code, :func:`~jaxfl.accounting.lowy_nonconvex.batch_experiment_code`) for every
  algorithm; ``n = min_i n_i`` and ``delta = 1/n^2`` for the calibration when silos differ in size (every
  silo then gets at least its own calibrated noise).
* Honesty: every DP run records the paper's nominal epsilon and what jaxfl's ``"lowy"`` accountant
  certifies for the noise actually added (Alt Fed-SPIDER: all ``2R`` messages; inf where its calculus
  proves nothing).
* Protocol: per trial and (M, R) panel, each algorithm's whole grid (epsilons [plus the non-private
  run], step sizes, clip thresholds) x repetitions is one vmapped program per algorithm (per phase length
  ``q`` for FedProx-SPIDER) with the trial's data as a jit argument, so one compiled program serves every
  trial (:func:`jaxfl.experiments.lowy_convex`'s harness). The step size, clip (and ``q``) are selected
  per epsilon by the mean final *training* loss over the repetitions (the paper tunes non-privately, as
  it says), and the mean test error of the final iterates ``w_R`` is reported (the authors' CIFAR/WBCD
  code reports the iterate of smallest training loss instead; see ``docs/reproductions.md``).
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxfl.accounting import lowy_nonconvex as A
from jaxfl.algorithms import local_sgd, minibatch_sgd
from jaxfl.algorithms.lowy_nonconvex import alt_fed_spider, fedprox_spider
from jaxfl.engine import SweepResult, grid_points, make_ledger, run_rounds
from jaxfl.engine.sweep import run_batched
from jaxfl.experiments import lowy_nonconvex_data as D
from jaxfl.experiments.lowy_convex import _exp_grid, _reproduce as convex_reproduce
from jaxfl.experiments.registry import register
from jaxfl.models import nets

MB, LOCAL, SPIDER, ALT = "mbsgd", "local", "spider", "alt"
FAMILIES = (MB, LOCAL, SPIDER, ALT)
NAMES = {(MB, True): "ISRL-DP MB-SGD", (LOCAL, True): "ISRL-DP Local SGD",
         (MB, False): "MB-SGD (non-private)", (LOCAL, False): "Local SGD (non-private)",
         (SPIDER, True): "ISRL-DP FedProx-SPIDER (Alg. 3)", (ALT, True): "ISRL-DP Alt Fed-SPIDER (Alg. 11)"}
BEST_SPIDER = "ISRL-DP SPIDER"
MODEL_SEED = 1                       # the authors' seedModel = 1: one fixed initialisation for every run


@dataclasses.dataclass(frozen=True)
class Setup:
    """One experiment's settings (the paper's, or a quick form's)."""

    dataset: str                      # "mnist" | "cifar10" | "wbcd"
    quick: bool
    epsilons: tuple
    panels: tuple                     # ((M, R), ...): one figure panel each
    steps: tuple                      # ((family, R, (step sizes...)), ...); SPIDER's grid also serves ALT
    clips: tuple                      # the clip thresholds C (the paper's L)
    phase_lengths: tuple              # ((R, (q, ...)), ...): FedProx-SPIDER's q grid per R
    reps: int
    trials: int
    trial_data: Callable = dataclasses.field(repr=False, default=None)
    init: Callable = dataclasses.field(repr=False, default=None)
    loss: Callable = dataclasses.field(repr=False, default=None)
    error: Callable = dataclasses.field(repr=False, default=None)   # (params, x, y) -> misclassification rate
    configs_per_batch: int | None = None
    seed_base: int = 0
    notes: tuple = ()

    def step_sizes(self, family: str, rounds: int) -> tuple:
        family = SPIDER if family == ALT else family
        return next(s for f, r, s in self.steps if f == family and r == rounds)

    def phases(self, rounds: int) -> tuple:
        return next(q for r, q in self.phase_lengths if r == rounds)


def _steps(rounds_list, mb, local, spider) -> tuple:
    return tuple((f, r, s) for r in rounds_list for f, s in ((MB, mb(r)), (LOCAL, local(r)), (SPIDER, spider(r))))


def _init(module, shape):
    return lambda: nets.init_params(module, jax.random.key(MODEL_SEED), shape)


def _env_trials(default: int) -> int:
    """``JAXFL_TRIALS`` overrides the number of trials of a full run (the docs say which was used)."""
    return int(os.environ.get("JAXFL_TRIALS", default))


MNIST_FIGURES = {(25, 25): 4, (12, 50): 5, (12, 25): 9, (25, 50): 10}     # (M, R) -> the paper's figure
MNIST_PHASES = {25: (1, 2), 50: (1, 2, 3, 4)}   # R -> FedProx-SPIDER's q grid (large q needs a large K)


def mnist_setup(quick: bool, reduced: bool = False, *, panel: tuple = (25, 25), trials: int = 1, reps: int = 1
                ) -> Setup:
    """Figs. 4, 5, 9, 10: N = 25 digit-pair silos (n = 1238), (M, R) in {12, 25} x {25, 50}.

    ``reduced=True``: the paper's data, model, epsilons, K and q grid on one ``panel`` (M, R) (default
    Fig. 4's, M = R = 25), but ``trials`` trials, ``reps`` repetitions and a pruned grid (step sizes the 3
    largest of the paper's 5, clips {1, 10}) -- 8-11 minutes per trial and repetition of an R = 25 panel
    on 2 CPU cores, against ~34 minutes for the paper's grid of that panel.
    """
    eps = (0.75, 12.0) if quick else (0.75, 1.0, 1.5, 3.0, 6.0, 12.0, 18.0)   # quick n = 64: eps <= 16.6
    per_label, pca_fit = (40, 3000) if quick else (D.MNIST_PER_LABEL, None)
    if quick:
        steps = _steps((4,), lambda r: _exp_grid(-2.25, 0, 2), lambda r: _exp_grid(-4.5, -2.25, 2),
                       lambda r: _exp_grid(-2.25, 0, 2))
    elif reduced:
        grid = _exp_grid(-9, 0, 5)[2:]
        m, rounds = panel = tuple(panel)
        if panel not in MNIST_FIGURES:
            raise ValueError(f"panel must be one of the paper's (M, R) {sorted(MNIST_FIGURES)}, got {panel}")
        phases = MNIST_PHASES[rounds]
        return Setup(
            "mnist", False, eps, (panel,), _steps((rounds,), lambda r: grid, lambda r: grid, lambda r: grid),
            (1.0, 10.0), ((rounds, phases),), reps, trials,
            trial_data=lambda t: D.mnist_trial(t), init=_init(nets.MnistMLP(), nets.MNIST_INPUT_SHAPE),
            loss=nets.mnist_loss, error=nets.mnist_error, configs_per_batch=8, seed_base=11_000_000,
            notes=(f"REDUCED FORM: Fig. {MNIST_FIGURES[panel]}'s panel (M = {m}, R = {rounds}) only, {trials} trial(s), "
                   f"{reps} repetition(s), step sizes exp({{-4.5, -2.25, 0}}) (the paper's 3 largest of 5), clips "
                   f"{{1, 10}} (of 1, 5, 10, 100, 10000); the paper's data, model, epsilons, K and q in {set(phases)}",
                   "MLP 50-64-1 without dropout (one logit; the authors: 50-64-2 with Dropout(0.5))"))
    else:
        grid = _exp_grid(-9, 0, 5)
        steps = _steps((25, 50), lambda r: grid, lambda r: grid, lambda r: grid)
    return Setup(
        "mnist", quick, eps, ((25, 4),) if quick else tuple(MNIST_FIGURES), steps,
        (1.0, 10.0) if quick else (1.0, 5.0, 10.0, 100.0, 10000.0),
        ((4, (2,)),) if quick else tuple(MNIST_PHASES.items()),
        1 if quick else 2, 1 if quick else _env_trials(3),
        trial_data=lambda t: D.mnist_trial(t, per_label=per_label, pca_fit_records=pca_fit),
        init=_init(nets.MnistMLP(), nets.MNIST_INPUT_SHAPE), loss=nets.mnist_loss, error=nets.mnist_error,
        configs_per_batch=None if quick else 10, seed_base=11_000_000,
        notes=(("quick form: 40 images per digit (64 training records per silo), PCA fitted on the first 3000 "
                "training images, R = 4, 2 epsilons, 2 step sizes and 2 clips, q = 2 only, 1 trial",) if quick else ())
        + ("MLP 50-64-1 without dropout (one logit; the authors: 50-64-2 with Dropout(0.5))",))


def cifar10_setup(quick: bool) -> Setup:
    """Figs. 6, 7: N = M = 10 one-class silos, R in {50, 100}, offline CIFAR-10 subset."""
    eps = (0.75, 6.0) if quick else (0.75, 1.0, 1.5, 3.0, 6.0, 12.0, 18.0)   # quick n = 8: eps <= 8.3
    if quick:
        steps = _steps((2,), lambda r: (math.exp(-2),), lambda r: (math.exp(-4),), lambda r: (math.exp(-2),))
    else:
        spider = lambda r: _exp_grid(-5, 0, 12) if r == 50 else _exp_grid(-5, 1, 8)
        steps = _steps((50, 100), spider, lambda r: _exp_grid(-5, 1, 20), spider)
    per_silo = 8 if quick else None

    def trial_data(t):
        data = D.cifar10_trial(t, source="subset", per_silo=per_silo)
        return data._replace(test_x=data.test_x[:200], test_y=data.test_y[:200]) if quick else data

    return Setup(
        "cifar10", quick, eps, ((10, 2),) if quick else ((10, 50), (10, 100)), steps,
        (1.0,) if quick else (0.001, 0.01, 0.1, 1.0, 5.0, 10.0),
        ((2, (2,)),) if quick else ((50, (1, 2, 3, 4)), (100, tuple(range(1, 9)))),
        1 if quick else 2, 1 if quick else _env_trials(3),
        trial_data=trial_data,
        init=_init(nets.CifarCNN(), nets.CIFAR_INPUT_SHAPE), loss=nets.cifar_loss, error=nets.cifar_error,
        configs_per_batch=None if quick else 4, seed_base=12_000_000,
        notes=(D.CIFAR_SUBSET_NOTE,)
        + (("quick form: 8 images per silo, the first 200 test images, R = 2, 2 epsilons, 1 step size, 1 clip, q = 2 only, 1 trial",) if quick else ()))


def wbcd_setup(quick: bool) -> Setup:
    """Fig. 8: N = M = 2 one-class silos (malignant / benign), R = 25."""
    eps = (0.75, 18.0) if quick else (0.75, 1.0, 1.5, 3.0, 6.0, 12.0, 18.0)
    rounds = 6 if quick else 25
    grid = _exp_grid(-4.5, 0, 3) if quick else _exp_grid(-9, 0, 15)
    return Setup(
        "wbcd", quick, eps, ((2, rounds),), _steps((rounds,), lambda r: grid, lambda r: grid, lambda r: grid),
        (1.0, 5.0) if quick else (0.1, 1.0, 5.0, 10.0),
        ((rounds, (3,)),) if quick else ((rounds, tuple(range(1, 11))),),
        1 if quick else 3, 1 if quick else _env_trials(10),
        trial_data=D.wbcd_trial, init=_init(nets.WbcdMLP(), nets.WBCD_INPUT_SHAPE), loss=nets.wbcd_loss,
        error=nets.wbcd_error, configs_per_batch=None if quick else 120, seed_base=13_000_000,
        notes=("every training record kept (169 malignant, 285 benign); the authors resample each silo with "
               "replacement to int(q * min class count)",)
        + (("quick form: R = 6, 2 epsilons, 3 step sizes, 2 clips, q = 3 only, 1 trial",) if quick else ()))


# ------------------------------------------------------------------------------------------------
# Noise multipliers, algorithms and accounting


def calibration(counts) -> tuple[int, float]:
    """``(n, delta)`` the noise is calibrated with: the smallest silo, ``delta = 1/n^2``."""
    n = int(np.min(np.asarray(counts)[np.asarray(counts) > 0]))
    return n, 1.0 / n**2


def batch_size(counts, rounds: int) -> int:
    """``K = int(n sqrt(24) / (2 sqrt(R)))`` (the authors' code) for every algorithm."""
    return A.batch_experiment_code(calibration(counts)[0], rounds)


def noise_multipliers(family: str, n: int, delta: float, epsilon: float, rounds: int, batch: int, q: int | None = None):
    """The engine's noise multiplier(s) for the paper's sigma of ``family`` at ``epsilon`` (``L = C``, so
    they do not depend on ``C``): a float for MB-SGD (``sigma K / C``) and Local SGD (``sigma / C`` per
    one-sample step); ``(z_fresh, z_difference)`` for FedProx-SPIDER (``sigma_1 K / C``,
    ``sigma_hat_2 K / (2C)``) and Alt Fed-SPIDER (``sigma_fresh K / C``, ``sigma_diff K / (2C)``)."""
    if family == MB:
        return A.noise_multiplier(A.sigma_mbsgd_experiment(1.0, n, epsilon, delta, rounds), 1.0, batch)
    if family == LOCAL:
        return A.noise_multiplier(A.sigma_local_sgd_experiment(1.0, n, epsilon, delta, rounds, batch), 1.0, 1)
    if family == SPIDER:
        s1, _, s_hat2 = A.sigma_spider(1.0, n, epsilon, delta, rounds=rounds, phase_length=q)
        return A.noise_multiplier(s1, 1.0, batch), A.noise_multiplier(s_hat2, 1.0, batch, sensitivity=2.0)
    if family == ALT:
        s_diff, s_fresh = A.sigma_alt_spider(1.0, n, epsilon, delta, rounds)
        return A.noise_multiplier(s_fresh, 1.0, batch), A.noise_multiplier(s_diff, 1.0, batch, sensitivity=2.0)
    raise ValueError(f"unknown family {family!r}")


def engine_rounds(family: str, rounds: int) -> int:
    """Engine rounds of ``R`` paper rounds: one Alg.-11 round is two engine rounds."""
    return 2 * rounds if family == ALT else rounds


def build_algorithm(setup: Setup, family: str, m: int, *, batch: int, lr, z, clip, q: int | None = None):
    """The algorithm of ``family`` with step size ``lr``, noise multiplier(s) ``z`` and clip ``clip``."""
    if family == MB:
        return minibatch_sgd(setup.loss, server_opt=optax.sgd(lr), batch_size=batch, clip_norm=clip,
                             noise_multiplier=z, silos_per_round=m)
    if family == LOCAL:
        return local_sgd(setup.loss, client_opt=optax.sgd(lr), local_steps=batch, batch_size=1, clip_norm=clip,
                         noise_multiplier=z, silos_per_round=m)
    if family == SPIDER:
        return fedprox_spider(setup.loss, step_size=lr, phase_length=q, clip_norm=clip, batch_size=batch,
                              noise_multiplier=z[0], difference_noise_multiplier=z[1], silos_per_round=m)
    return alt_fed_spider(setup.loss, step_size=lr, batch_size=batch, clip_norm=clip, noise_multiplier=z[0],
                          difference_noise_multiplier=z[1], silos_per_round=m)


def certified_epsilon(setup: Setup, family: str, m: int, rounds: int, batch: int, z, counts, deltas,
                      q: int | None = None) -> float:
    """The epsilon jaxfl's ``"lowy"`` accountant certifies for the run's messages (``2R`` for Alt
    Fed-SPIDER), max over silos at ``delta_i``, or inf where its calculus proves nothing."""
    algorithm = build_algorithm(setup, family, m, batch=batch, lr=1.0, z=z, clip=1.0, q=q)
    ledger = make_ledger(algorithm, counts, accountant="lowy")
    ledger.record(engine_rounds(family, rounds))
    return float(ledger.epsilon(deltas))


# ------------------------------------------------------------------------------------------------
# Grid programs


_PROGRAMS: dict = {}


def _evaluate(setup: Setup, params, data, aux) -> dict:
    """Final training loss (mean over every silo's real records) and test error of one run."""
    per = jax.vmap(jax.vmap(setup.loss, in_axes=(None, 0, 0)), in_axes=(None, 0, 0))(params, data.x, data.y)
    mask = data.mask().astype(per.dtype)
    return {"train_loss": jnp.sum(per * mask) / jnp.sum(mask),
            "test_error": setup.error(params, aux["test_x"], aux["test_y"])}


def grid_program(setup: Setup, family: str, m: int, rounds: int, batch: int, q: int | None = None):
    """The compiled grid program ``(table, seeds, data, aux) -> (params, infos, metrics)`` (leaves
    ``[configs, seeds, ...]``) of one algorithm: the vmap over configs of the vmap over seeds of one run,
    with the trial's data and ``aux`` (test set, ``z(eps = 1)``) as arguments, so one compilation serves
    every trial (as :func:`jaxfl.experiments.lowy_convex.grid_program`). ``q`` is static."""
    key = (setup, family, m, rounds, batch, q)
    if key not in _PROGRAMS:
        def one(hp, seed, data, aux):
            scale = jnp.where(hp["eps"] > 0, 1.0 / jnp.maximum(hp["eps"], 1e-6), 0.0)
            z = jax.tree_util.tree_map(lambda u: u * scale, aux["unit_z"])
            algorithm = build_algorithm(setup, family, m, batch=batch, lr=hp["lr"], z=z, clip=hp["clip"], q=q)
            state = algorithm.init(setup.init())
            state, infos = run_rounds(algorithm, state, data, jax.random.key(seed), 0, engine_rounds(family, rounds))
            return state.params, infos, _evaluate(setup, state.params, data, aux)

        over_seeds = jax.vmap(one, in_axes=(None, 0, None, None))
        _PROGRAMS[key] = jax.jit(jax.vmap(over_seeds, in_axes=(0, None, None, None)))
    return _PROGRAMS[key]


def family_grid(setup: Setup, family: str, rounds: int) -> dict:
    """``{"eps", "lr", "clip"}``: the private epsilons (plus 0.0, the non-private run, for the baselines)."""
    eps = [*setup.epsilons, 0.0] if family in (MB, LOCAL) else list(setup.epsilons)
    return {"eps": eps, "lr": list(setup.step_sizes(family, rounds)), "clip": list(setup.clips)}


def trial_aux(setup: Setup, data: D.TrialData, family: str, rounds: int, batch: int, q: int | None = None) -> dict:
    n, delta = calibration(data.train.counts)
    unit = noise_multipliers(family, n, delta, 1.0, rounds, batch, q)
    return {"test_x": jnp.asarray(data.test_x), "test_y": jnp.asarray(data.test_y),
            "unit_z": jax.tree_util.tree_map(lambda u: jnp.asarray(u, jnp.float32), unit)}


def grid_sweep(setup: Setup, family: str, m: int, rounds: int, data: D.TrialData, seeds, q: int | None = None
               ) -> SweepResult:
    """One algorithm's whole grid on one trial (:func:`jaxfl.engine.sweep.run_batched` of
    :func:`grid_program`, ``setup.configs_per_batch`` configs per call)."""
    batch = batch_size(data.train.counts, rounds)
    grid = family_grid(setup, family, rounds)
    configs = grid_points(grid)
    table = {k: jnp.asarray([c[k] for c in configs], jnp.float32) for k in grid}
    aux = trial_aux(setup, data, family, rounds, batch, q)
    out = run_batched(grid_program(setup, family, m, rounds, batch, q), table, np.asarray(list(seeds)),
                      setup.configs_per_batch, data.train, aux)
    return SweepResult(configs, np.asarray(list(seeds)), *out)


def _scores(out: SweepResult) -> np.ndarray:
    loss = np.asarray(out.metrics["train_loss"], np.float64)          # [configs, reps]
    return np.where(np.isfinite(loss), loss, np.inf).mean(axis=1)


def run_trial(setup: Setup, panel: tuple, trial: int, data: D.TrialData, log=print) -> list[dict]:
    """Runs every algorithm's grid on one trial and (M, R) panel; one row per (algorithm, epsilon or
    non-private), plus the selected ``ISRL-DP SPIDER`` row per epsilon."""
    m, rounds = panel
    counts = np.asarray(data.train.counts)
    n, delta = calibration(counts)
    batch = batch_size(counts, rounds)
    seeds = [setup.seed_base + 1000 * trial + 100_000 * setup.panels.index(panel) + r for r in range(setup.reps)]
    variants = [(MB, None), (LOCAL, None), *((SPIDER, q) for q in setup.phases(rounds)), (ALT, None)]
    candidates = {}                    # (family, eps) -> best row so far (SPIDER: over q)
    for family, q in variants:
        t0 = time.perf_counter()
        out = grid_sweep(setup, family, m, rounds, data, seeds, q)
        seconds = time.perf_counter() - t0
        log(f"    {family}{'' if q is None else f' q={q}'}: {len(out.configs)} configs x {len(seeds)} reps "
            f"{seconds:6.1f} s")
        score = _scores(out)
        test_error = np.asarray(out.metrics["test_error"], np.float64)
        cfg_eps = np.array([c["eps"] for c in out.configs])
        for eps in family_grid(setup, family, rounds)["eps"]:
            idx = np.flatnonzero(cfg_eps == eps)
            best = int(idx[np.argmin(score[idx])])
            if (family, eps) in candidates and candidates[family, eps]["train_loss"] <= score[best]:
                continue
            private = eps > 0
            z = noise_multipliers(family, n, delta, eps, rounds, batch, q) if private else 0.0
            candidates[family, eps] = {
                "family": family, "private": private, "algorithm": NAMES[family, private],
                "epsilon": float(eps) if private else None, "trial": trial, "silos_per_round": m, "rounds": rounds,
                "panel": panel_label(panel), "batch_size": batch, "phase_length": q,
                "delta": float(data.deltas[0]) if np.all(data.deltas == data.deltas[0]) else data.deltas.tolist(),
                "step_size": float(out.configs[best]["lr"]), "clip_norm": float(out.configs[best]["clip"]),
                "train_loss": float(score[best]), "test_error": float(test_error[best].mean()),
                "test_error_reps": test_error[best].tolist(),
                "diverged_configs": int(np.sum(~np.isfinite(score[idx]))),
                "noise_multiplier": list(z) if isinstance(z, tuple) else z,
                "epsilon_certified": certified_epsilon(setup, family, m, rounds, batch, z, counts, data.deltas, q)
                if private else math.inf,
                "wall_seconds": seconds,
                "infos": {k: np.asarray(v)[best] for k, v in out.infos.items()},   # [reps, rounds]
            }
    rows = list(candidates.values())
    for eps in setup.epsilons:        # the paper's "ISRL-DP SPIDER": the better variant by training loss
        pick = min((candidates[SPIDER, eps], candidates[ALT, eps]), key=lambda r: r["train_loss"])
        rows.append({**pick, "algorithm": BEST_SPIDER, "variant": pick["algorithm"]})
    return rows


def panel_label(panel) -> str:
    return f"M = {panel[0]}, R = {panel[1]}"


def run(setup: Setup, log=print) -> tuple[list[dict], dict]:
    """All trials and panels of ``setup``; returns ``(rows, config)``."""
    t_start = time.perf_counter()
    rows, per_trial = [], []
    for trial in range(setup.trials):
        t0 = time.perf_counter()
        data = setup.trial_data(trial)
        counts = np.asarray(data.train.counts)
        log(f"  trial {trial + 1}/{setup.trials}: n_i={sorted(set(counts.tolist()))}")
        for panel in setup.panels:
            log(f"   {panel_label(panel)}, K = {batch_size(counts, panel[1])}")
            rows += run_trial(setup, panel, trial, data, log)
        per_trial.append({"trial": trial, "silo_sizes": counts.tolist(), **data.info,
                          "seconds": time.perf_counter() - t0})
    first = per_trial[0]
    config = {
        "paper": "Lowy, Ghafelebashi & Razaviyayn, Private Non-Convex Federated Learning Without a Trusted Server "
                 "(seed 002), §4 / App. H",
        "dataset": setup.dataset, "quick": setup.quick,
        "form": _form(setup),
        "epsilons": list(setup.epsilons), "panels": [list(p) for p in setup.panels],
        "batch_size_K": {str(r): batch_size(first["silo_sizes"], r) for _, r in setup.panels},
        "num_silos": len(first["silo_sizes"]),
        "step_sizes": {f"{f} R={r}": list(s) for f, r, s in setup.steps},
        "clip_grid": list(setup.clips), "phase_lengths": {str(r): list(q) for r, q in setup.phase_lengths},
        "repetitions": setup.reps, "trials": setup.trials, "metric": "misclassification",
        "test_error_of": "mean over repetitions of the test error of the final iterate w_R (the authors' CIFAR/WBCD "
                         "code returns the iterate of smallest training loss instead)",
        "selection": "per epsilon: the step size, clip (and q) with the smallest mean final training loss over the "
                     "repetitions (non-private tuning, as the paper); ISRL-DP SPIDER = the better of FedProx-SPIDER "
                     "(Alg. 3, over q) and Alt Fed-SPIDER (Alg. 11) by that training loss",
        "delta": "1/n_i^2 per silo (calibration at n = min n_i)",
        "noise": "digest §4.6/§4.8/§4.9 (paper App. H / authors' code): MB-SGD 8 L^2 R ln(2/delta)/(n^2 eps^2); "
                 "Local SGD K x that per step; FedProx-SPIDER 16 L^2 ln(1/delta) max(R/q,1)/(eps^2 n^2) and "
                 "64 L^2 R ln(1/delta)/(eps^2 n^2) (sigma_2 = inf); Alt Fed-SPIDER 8 / 32 L^2 R ln(2/delta)/"
                 "(n^2 eps^2); L = the clip threshold C (per example, global L2 norm)",
        "accountant": "lowy (with-replacement sampling, each silo's own transcript; Alt Fed-SPIDER: 2R messages; "
                      "inf = nothing certified)",
        "aggregation": "mean over the M participating silos; reported iterate: final w_R",
        "per_trial": per_trial, "notes": list(setup.notes),
        "wall_seconds_total": time.perf_counter() - t_start,
    }
    if setup.dataset == "cifar10":
        config["data"] = D.CIFAR_SUBSET_NOTE
    return rows, config


def _form(setup: Setup) -> str:
    if setup.quick:
        return "QUICK FORM (tiny settings, not the paper's)"
    return "REDUCED FORM (see notes)" if any("REDUCED" in n for n in setup.notes) else "full form (the paper's grids)"


def _reproduce(setup: Setup, out_dir: Path) -> Path:
    from jaxfl.experiments import lowy_nonconvex_report as report

    return convex_reproduce(setup, out_dir, prefix="lowy-nonconvex", runner=run, reporter=report, form=_form(setup))


@register("lowy-nonconvex/mnist", "seed 002 Figs. 4, 5, 9, 10: ISRL-DP SPIDER vs MB-SGD / Local SGD, MNIST MLP, "
                                  "25 digit-pair silos")
def reproduce_mnist(quick: bool, out_dir: Path) -> Path:
    return _reproduce(mnist_setup(quick), Path(out_dir))


@register("lowy-nonconvex/cifar10", "seed 002 Figs. 6, 7: ISRL-DP SPIDER vs baselines, CIFAR-10 LeNet, 10 one-class "
                                    "silos (offline subset)")
def reproduce_cifar10(quick: bool, out_dir: Path) -> Path:
    return _reproduce(cifar10_setup(quick), Path(out_dir))


@register("lowy-nonconvex/wbcd", "seed 002 Fig. 8: ISRL-DP SPIDER vs baselines, breast cancer MLP, 2 one-class silos")
def reproduce_wbcd(quick: bool, out_dir: Path) -> Path:
    return _reproduce(wbcd_setup(quick), Path(out_dir))
