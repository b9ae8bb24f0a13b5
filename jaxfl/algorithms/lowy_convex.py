"""Lowy & Razaviyayn (2023): ISRL-DP federated learning for convex losses.

Factories, all on the shared engine (:func:`jaxfl.engine.rounds.make_round`):

* :func:`noisy_minibatch_sgd` -- Alg. 2 / Alg. 7 (per-silo budgets), with the theorem's, the
  experiments' or an accountant's calibration; projection onto ``W``; output averaging
  (``gamma_r = 1/R``, Stich's weights, or the last iterate); Moreau smoothing via
  :func:`moreau_envelope`; ``M_r < N`` available silos.
* :func:`noisy_local_sgd` -- the experiments' ISRL-DP Local SGD baseline (per-step noise).
* :func:`authors_scripts_minibatch_sgd` -- MB-SGD as the authors' scripts run it (summed silos, batch-mean
  clipping, summed gradients, one central draw, window-averaged output; :func:`window_average`): a named
  variant for reproduction studies, with no privacy guarantee.
* :func:`accelerated_minibatch_sgd` -- Alg. 1 (AC-SA): one-pass (disjoint batches, parallel
  composition, Thm 3.1) or with replacement (federated ERM, Thm 4.1); the multi-stage restart schedule
  (§3.4) for strongly convex losses and the regularized convex variant.

Calibrations return the *engine's* noise multiplier ``z`` (noise std ``z C`` on a silo's clipped sum of
``K`` gradients) beside the paper's ``sigma`` (std on the minibatch mean): ``sigma = z C / K``.
Every factory states its privacy per round (``FederatedAlgorithm.privacy``) so a ledger reports what
the run actually spent; with-replacement sampling is accounted by the ``"lowy"`` accountant.

References:
  A. Lowy and M. Razaviyayn. "Private Federated Learning Without a Trusted Server: Optimal Algorithms
  for Convex Losses." ICLR 2023 (arXiv 2106.09779).
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from jaxfl import checks
from jaxfl.accounting.calibrate import calibrate as calibrate_events
from jaxfl.accounting import lowy_convex
from jaxfl.accounting.events import clipped_sum_gaussian
from jaxfl.algorithms.common import (apply_server_update, check_params, check_private_args, init_server,
                                     is_concrete_zero, model_template, per_silo_noise, safe_mean,
                                     sampled_silo_privacy, silo_noise_multipliers)
from jaxfl.algorithms.sgd import local_sgd
from jaxfl.engine import local
from jaxfl.engine.participation import resolve
from jaxfl.engine.protocol import FederatedAlgorithm, RoundPrivacy, ServerState
from jaxfl.accounting.events import PvecDpEvent, ShuffledGaussianDpEvent
from jaxfl.engine.rounds import make_round, participant_count_sum, weighted_sum
from jaxfl.privacy import keys as keys_lib
from jaxfl.privacy import shuffle, uniform
from jaxfl.privacy.clipping import clip_update, clipped_grad_sum, per_example_grads
from jaxfl.privacy.microbatch import check_microbatch
from jaxfl.privacy.noise import add_gaussian_noise

CALIBRATIONS = ("theorem", "experiment", "accountant")


# ------------------------------------------------------------------------------------------------
# Calibration


class NoiseCalibration(NamedTuple):
    """A calibrated noise level.

    Attributes:
      noise_multiplier: the engine's ``z`` (float, or float64[num_silos] for per-silo budgets).
      sigma: the paper's std on a silo's minibatch-mean gradient, ``z C / K`` (same shape).
      batch_size: ``K`` (with-replacement draws, or the one-pass batch).
      calibration: which rule produced it (``"theorem"``, ``"experiment"``, ``"accountant"``, ``"one_pass"``).
      certified: whether jaxfl's accounting certifies the target (False for the experiments' rule,
        whose moments-accountant argument has unspecified constants: see ``lowy_convex``).
    """

    noise_multiplier: Any
    sigma: Any
    batch_size: int
    calibration: str
    certified: bool


def _squeeze(arr):
    arr = np.asarray(arr, dtype=np.float64)
    return float(arr[0]) if np.all(arr == arr[0]) else arr


def calibrate_minibatch_sgd(*, clip_norm: float, counts, rounds: int, epsilon, delta, calibration: str = "theorem",
                            batch_size: int | None = None, epsilon_max: float | None = None,
                            accountant: str = "lowy") -> NoiseCalibration:
    """Noise for ISRL-DP MB-SGD (Alg. 2; Alg. 7 when ``epsilon``/``delta`` are per silo).

    Args:
      clip_norm: ``L``: the per-example gradient bound (Lipschitz constant, enforced by clipping).
      counts: records per silo ``n_i`` (int[num_silos]).
      rounds: ``R``.
      epsilon, delta: the ISRL-DP target, scalars or one per silo (Alg. 7, e.g. ``delta_i = 1/n_i^2``).
      calibration:
        ``"theorem"`` -- Thm 2.1 / H.1: ``sigma_i^2 = 256 L^2 R ln(2.5R/delta_i) ln(2/delta_i) /
        (n_i^2 eps_i^2)`` with ``K >= eps_i n_i / (4 sqrt(2 R ln(2/delta_i)))`` (the smallest such K
        over silos unless ``batch_size`` is given, which is then checked). Certified by the
        ``"lowy"`` accountant (the same proof chain).
        ``"experiment"`` -- §6: ``sigma_i^2 = 8 L^2 R ln(1/delta_i) / (n_i^2 eps_i^2)`` with
        ``K = int(n sqrt(eps_max / (4R)))`` (n = the smallest silo; ``eps_max`` defaults to the target).
        Reproduces the paper's plots; NOT certified (see :func:`lowy_convex.sigma_experiment_mbsgd`).
        ``"accountant"`` -- the smallest ``z`` for which ``accountant`` (default ``"lowy"``, the only
        one that accounts sampling with replacement) certifies ``(eps_i, delta_i)`` after ``R`` rounds.
      batch_size: ``K``; default from the rule.
      epsilon_max: the experiments' grid maximum used for ``K``.
    """
    checks.one_of("calibration", calibration, CALIBRATIONS)
    counts = checks.silo_counts("counts", counts)
    rounds = checks.positive_int("rounds", rounds)
    eps = checks.per_silo("epsilon", epsilon, len(counts))
    dlt = checks.per_silo("delta", delta, len(counts))
    if calibration == "theorem":
        sigma = np.atleast_1d(lowy_convex.sigma_theorem(clip_norm, counts, rounds, eps, dlt))
        needed = int(np.max(lowy_convex.min_batch_theorem(counts, rounds, eps, dlt)))
        k = needed if batch_size is None else int(batch_size)
        if k < needed:
            raise ValueError(f"batch_size={batch_size} is below Theorem 2.1's minimum K={needed} for these budgets")
    elif calibration == "experiment":
        k = int(batch_size) if batch_size is not None else lowy_convex.batch_experiment(
            int(counts.min()), rounds, float(np.max(eps)) if epsilon_max is None else epsilon_max)
        sigma = np.atleast_1d(lowy_convex.sigma_experiment_mbsgd(clip_norm, counts, rounds, eps, dlt))
    else:
        k = int(batch_size) if batch_size is not None else int(np.max(lowy_convex.min_batch_theorem(
            counts, rounds, eps, dlt)))
        z = []
        for n, e, d in zip(counts, eps, dlt):
            def run_event(noise, n=int(n)):
                gauss = clipped_sum_gaussian(noise, dp_accounting.NeighboringRelation.REPLACE_ONE)
                step = dp_accounting.SampledWithReplacementDpEvent(n, k, gauss)
                return dp_accounting.SelfComposedDpEvent(step, rounds)
            z.append(calibrate_events(run_event, float(e), float(d), accountant=accountant))
        sigma = np.asarray(z) * clip_norm / k
    if k < 1 or k > counts.min():
        raise ValueError(f"batch_size={k} must be in [1, smallest silo size {counts.min()}]")
    z = lowy_convex.noise_multiplier_from_sigma(sigma, clip_norm, k)
    return NoiseCalibration(_squeeze(z), _squeeze(sigma), k, calibration, calibration != "experiment")


def calibrate_one_pass(*, clip_norm: float, counts, batch_size: int, epsilon, delta) -> NoiseCalibration:
    """Noise for one-pass accelerated MB-SGD (Thm 3.1 / E.1): ``sigma^2 = 32 L^2 ln(1.25/delta) /
    (eps^2 K^2)``; every record is used once (``R <= floor(n_i / K)``), so by parallel composition the
    run is as private as one round."""
    counts = checks.silo_counts("counts", counts)
    eps = checks.per_silo("epsilon", epsilon, len(counts))
    dlt = checks.per_silo("delta", delta, len(counts))
    sigma = np.atleast_1d(lowy_convex.sigma_one_pass(clip_norm, batch_size, eps, dlt))
    z = lowy_convex.noise_multiplier_from_sigma(sigma, clip_norm, batch_size)
    return NoiseCalibration(_squeeze(z), _squeeze(sigma), int(batch_size), "one_pass", True)


def calibrate_local_sgd(*, clip_norm: float, counts, rounds: int, local_steps: int, epsilon, delta) -> NoiseCalibration:
    """Per-step noise of the experiments' ISRL-DP Local SGD (App. I): ``sigma^2 = 8 L^2 R K ln(1/delta) /
    (n^2 eps^2)`` on each one-sample step (so ``z = sigma / L``). Like the experiments' MB-SGD rule it
    is not certified by jaxfl's accounting."""
    counts = checks.silo_counts("counts", counts)
    eps = checks.per_silo("epsilon", epsilon, len(counts))
    dlt = checks.per_silo("delta", delta, len(counts))
    sigma = np.atleast_1d(lowy_convex.sigma_experiment_local_sgd(clip_norm, counts, rounds, local_steps, eps, dlt))
    z = lowy_convex.noise_multiplier_from_sigma(sigma, clip_norm, 1)
    return NoiseCalibration(_squeeze(z), _squeeze(sigma), 1, "experiment", False)


class TheoremParameters(NamedTuple):
    """Thm D.1 / D.2's prescriptions for Alg. 2 (M = silos per round).

    ``rounds`` R, constant ``step_size`` eta, ``averaging`` (``"uniform"``: gamma_r = 1/R, convex;
    ``"stich"``: Lemma D.5, strongly convex) and, for non-smooth losses, the Moreau smoothing
    ``smoothing`` beta to pass to :func:`moreau_envelope` (``None`` for smooth losses)."""

    rounds: int
    step_size: float
    averaging: str
    smoothing: float | None


def theorem_parameters(*, lipschitz: float, radius: float, n: int, dim: int, epsilon: float, delta: float,
                       silos_per_round: int, smoothness: float | None = None, mu: float = 0.0) -> TheoremParameters:
    """R, eta and averaging of Theorem D.1 (beta-smooth) or D.2 (non-smooth, via Moreau smoothing).

    Convex (``mu = 0``): ``R = ceil((beta D sqrt(M)/L) min(sqrt(n), eps n/sqrt(d)) + min(n M, eps^2 n^2 M/d))``,
    ``eta = min(1/beta, (D/(L sqrt(R))) min(1, eps n sqrt(M)/sqrt(R d), sqrt(n M / R)))``, gamma_r = 1/R.
    Strongly convex: ``R = ceil(max((2 beta/mu) ln(beta D^2 mu M eps^2 n^2 / (d L^2)), min(M n, M eps^2 n^2/d)))``
    (the digest flags ``beta D`` vs ``beta D^2`` in that log: Thm D.1's ``beta D^2`` is used), and Lemma D.5's
    ``eta = min(1/(2 beta), ln(max(2, mu^2 D^2 R^2 / c)) / (mu R))`` with ``c = d sigma^2/M + L^2`` and
    sigma from :func:`jaxfl.accounting.lowy_convex.sigma_theorem`; Stich weights.
    Non-smooth (``smoothness=None``): Thm D.2 smooths with ``beta`` such that ``L^2/beta`` equals the target
    rate, ``(L D/sqrt(M))(1/sqrt(n) + sqrt(d ln(1/delta))/(eps n))`` (convex) or
    ``(L^2/(mu M))(1/n + d ln(1/delta)/(eps^2 n^2))`` (strongly convex), then uses the formulas above with it.
    """
    L, D, M = float(lipschitz), float(radius), float(silos_per_round)
    n, d, eps = float(n), float(dim), float(epsilon)
    for name, value in (("lipschitz", L), ("radius", D), ("n", n), ("dim", d), ("epsilon", eps),
                        ("silos_per_round", M)):
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value}")
    if not 0 < delta < 1 or mu < 0:
        raise ValueError(f"need 0 < delta < 1 and mu >= 0, got delta={delta}, mu={mu}")
    smoothing = None
    if smoothness is None:
        if mu > 0:
            rate = L**2 / (mu * M) * (1 / n + d * math.log(1 / delta) / (eps**2 * n**2))
        else:
            rate = L * D / math.sqrt(M) * (1 / math.sqrt(n) + math.sqrt(d * math.log(1 / delta)) / (eps * n))
        smoothing = L**2 / rate
        smoothness = smoothing
    beta = float(smoothness)
    if mu == 0:
        rounds = math.ceil(beta * D * math.sqrt(M) / L * min(math.sqrt(n), eps * n / math.sqrt(d))
                           + min(n * M, eps**2 * n**2 * M / d))
        step = min(1 / beta, D / (L * math.sqrt(rounds)) * min(1.0, eps * n * math.sqrt(M) / math.sqrt(rounds * d),
                                                                math.sqrt(n * M / rounds)))
        return TheoremParameters(int(rounds), float(step), "uniform", smoothing)
    log_arg = beta * D**2 * mu * M * eps**2 * n**2 / (d * L**2)
    rounds = math.ceil(max(2 * beta / mu * math.log(max(log_arg, 1.0)), min(M * n, M * eps**2 * n**2 / d)))
    sigma = lowy_convex.sigma_theorem(L, n, rounds, eps, delta)
    c = d * sigma**2 / M + L**2
    step = min(1 / (2 * beta), math.log(max(2.0, mu**2 * D**2 * rounds**2 / c)) / (mu * rounds))
    return TheoremParameters(int(rounds), float(step), "stich", smoothing)


# ------------------------------------------------------------------------------------------------
# Moreau envelope (Nesterov smoothing) for non-smooth losses


def moreau_envelope(loss_fn: Callable, beta: float, *, inner_steps: int = 100, projection: Callable | None = None):
    """The Moreau envelope ``f_beta(w, x) = min_{v in W} f(v, x) + (beta/2) ||w - v||^2`` of a per-example
    loss (Thm D.2 runs Alg. 2 on it; Lemma D.7: convex, beta-smooth, ``f_beta <= f <= f_beta + L^2/(2 beta)``).

    The inner problem is ``beta``-strongly convex; it is solved by ``inner_steps`` projected subgradient
    steps ``v <- Pi_W(v - (grad f(v) + beta (v - w)) / (beta (t + 1)))`` from ``v = w``. The returned loss
    is ``f(v*) + (beta/2)||w - v*||^2`` with ``v*`` held constant, so its gradient is the Moreau identity
    ``beta (w - prox(w))`` (envelope theorem). Lowy & Razaviyayn flags that ``f_beta`` is ``2L``-Lipschitz when
    ``W`` is bounded (Lemma D.7): clip at ``2L`` to keep every per-example gradient (jaxfl clips anyway,
    so the privacy guarantee never depends on this).
    """
    beta = float(beta)
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    project = projection if projection is not None else (lambda v: v)

    def smoothed(params, x, y):
        def step(v, t):
            g = jax.grad(loss_fn)(v, x, y)
            lr = 1.0 / (beta * (t + 1.0))
            v = jax.tree_util.tree_map(lambda vi, gi, wi: vi - lr * (gi + beta * (vi - wi)), v, g, params)
            return project(v), None

        v, _ = jax.lax.scan(step, params, jnp.arange(inner_steps, dtype=jnp.float32))
        v = jax.lax.stop_gradient(v)
        gap = sum(jnp.sum((w - vi) ** 2) for w, vi in zip(jax.tree_util.tree_leaves(params),
                                                             jax.tree_util.tree_leaves(v)))
        return loss_fn(v, x, y) + 0.5 * beta * gap

    return smoothed


# ------------------------------------------------------------------------------------------------
# Noisy MB-SGD (Alg. 2 / 7) with output averaging


class AveragedState(NamedTuple):
    """Server state with an averaged output: ``params`` is ``w^_R = sum_r gamma_r w_r / Gamma_R`` over
    the iterates ``w_0 .. w_{R-1}`` seen so far; ``iterate`` is the inner server state (``w_r``)."""

    params: Any
    iterate: ServerState
    round: jnp.ndarray


def averaging_weights(kind: str, *, mu: float = 0.0, step_size: float | None = None):
    """``r -> gamma_r / Gamma_r`` (the running-average update weight of iterate ``w_r``).

    ``"uniform"``: ``gamma_r = 1/R`` (convex, Thm D.1) -> ``1/(r+1)``. ``"stich"``: Lemma D.5's
    ``gamma_r = (1 - mu eta)^{-(r+1)}`` (strongly convex) -> ``(q - 1)/(q - q^{-r})`` with
    ``q = 1/(1 - mu eta)``, computed without overflow.
    """
    if kind == "uniform":
        return lambda r: 1.0 / (r + 1.0)
    if kind == "stich":
        if step_size is None or not 0 < mu * step_size < 1:
            raise ValueError(f"'stich' averaging needs 0 < mu * step_size < 1, got mu={mu}, step_size={step_size}")
        q = 1.0 / (1.0 - mu * step_size)
        return lambda r: (q - 1.0) / (q - q ** (-r.astype(jnp.float32)))
    raise ValueError(f"averaging must be 'last', 'uniform', 'stich' or 'window', got {kind!r}")


def _averaged(init, server_fn, weight_of_round):
    """Wraps a server so that the output is the running weighted average of the iterates before each step."""

    def averaged_init(params):
        return AveragedState(params, init(params), jnp.zeros([], jnp.int32))

    def averaged_server(state, aggregate, ctx):
        w = weight_of_round(state.round)
        average = jax.tree_util.tree_map(lambda a, x: a + w * (x - a), state.params, state.iterate.params)
        inner, info = server_fn(state.iterate, aggregate, ctx)
        return AveragedState(average, inner, state.round + 1), info

    return averaged_init, averaged_server


class WindowState(NamedTuple):
    """State of a :func:`window_average`-d algorithm: ``params`` is the mean of the last
    ``min(round, window)`` iterates ``w_1 .. w_round`` (``w_0`` before the first round); ``iterate`` is
    the inner algorithm's state (the current iterate, which is what the inner round broadcasts);
    ``recent`` holds leaves ``[window, ...]``, a ring buffer where iterate ``w_r`` sits in slot
    ``(r - 1) % window``; ``round`` counts the rounds done."""

    params: Any
    iterate: Any
    recent: Any
    round: jnp.ndarray


def window_average(algorithm: FederatedAlgorithm, window: int = 8) -> FederatedAlgorithm:
    """``algorithm`` reporting the sliding-window average of its iterates (Lowy & Razaviyayn §6.4, the authors'
    scripts: "the last 7 iterates plus the new one" for ``window = 8``).

    After round ``r`` the reported ``state.params`` is ``mean(w_{max(1, r-window+1)} .. w_r)``, the mean
    of the last ``min(r, window)`` iterates *after* each step (unlike ``averaging="uniform"``, which
    averages the iterates ``w_0 .. w_{R-1}`` before each step). The inner algorithm runs unchanged on
    ``state.iterate`` (same keys, same broadcast: the current iterate); only the output differs, so the
    privacy statement is the inner one's (post-processing). Works for any algorithm without silo state
    (its round may take scheduled inputs).
    """
    window = int(window)
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if algorithm.init_silos is not None:
        raise ValueError(f"window_average needs an algorithm without silo state; {algorithm.name} keeps silo state")
    inner_init, inner_round = algorithm.init, algorithm.round

    def init(params):
        inner = inner_init(params)
        recent = jax.tree_util.tree_map(lambda p: jnp.zeros((window,) + jnp.shape(p), jnp.result_type(p)),
                                        inner.params)
        return WindowState(inner.params, inner, recent, jnp.zeros([], jnp.int32))

    def round_fn(state, data, round_key, *inputs):
        inner, info = inner_round(state.iterate, data, round_key, *inputs)
        slot = state.round % window
        recent = jax.tree_util.tree_map(lambda buf, p: buf.at[slot].set(p.astype(buf.dtype)), state.recent,
                                        inner.params)
        filled = jnp.minimum(state.round + 1, window)
        mask = jnp.arange(window) < filled

        def mean(buf):
            kept = jnp.where(mask.reshape((window,) + (1,) * (buf.ndim - 1)), buf, jnp.zeros((), buf.dtype))
            return jnp.sum(kept, axis=0) * (jnp.ones((), buf.dtype) / filled.astype(buf.dtype))

        params = jax.tree_util.tree_map(mean, recent)
        return WindowState(params, inner, recent, state.round + 1), info

    return algorithm._replace(init=init, round=round_fn)


def _with_replacement_privacy(batch_size, noise_multiplier, steps_per_round=1):
    """Lowy & Razaviyayn's statement: K draws with replacement, Gaussian, replace-one neighbours ("lowy")."""
    return sampled_silo_privacy(local.make_sampler(batch_size=batch_size), noise_multiplier, steps_per_round,
                                relation=dp_accounting.NeighboringRelation.REPLACE_ONE)


def noisy_minibatch_sgd(loss_fn, *, step_size, batch_size: int, clip_norm: float, noise_multiplier=0.0,
                        silos_per_round=None, projection: Callable | None = None, averaging: str = "last",
                        mu: float = 0.0, aggregator=weighted_sum, name: str | None = None,
                        window: int = 8, microbatch="auto") -> FederatedAlgorithm:
    """Noisy ISRL-DP MB-SGD (Alg. 2; Alg. 7 with one ``z_i`` per silo).

    Each available silo draws ``batch_size`` records uniformly with replacement and sends
    ``(1/K) sum_j clip(grad f(w_r, x_j), L) + N(0, sigma_i^2 I)`` with ``sigma_i = z_i L / K``; the server
    averages over the ``M_r`` available silos, steps ``w_{r+1} = Pi_W(w_r - eta g)`` and outputs
    ``w^_R`` (``averaging``: ``"last"`` iterate as in the experiments, ``"uniform"`` (Thm D.1) or
    ``"stich"`` weights with ``mu`` (Lemma D.5), or ``"window"``: the mean of the last ``window``
    iterates after each step, the authors' scripts' output, see :func:`window_average`). Calibrate
    ``noise_multiplier`` with :func:`calibrate_minibatch_sgd`. For non-smooth losses pass
    ``moreau_envelope(loss, beta)``.

    Privacy per round and silo: ``SampledWithReplacementDpEvent(n_i, K, Gaussian(z_i))``, replace-one
    neighbours (account with ``accountant="lowy"``). ``microbatch``: the clipped sum taken in slices of this
    many records (``"auto"``, ``None`` or an int, as in :func:`jaxfl.algorithms.sgd.minibatch_sgd`; memory
    and speed only).
    """
    private = check_private_args(clip_norm, noise_multiplier)
    server_opt = optax.sgd(step_size)
    sampler = local.make_sampler(batch_size=batch_size, microbatch=microbatch)
    shared_z, silo_z = per_silo_noise(noise_multiplier)

    def client(params, x, y, count, silo_key, z=shared_z):
        return local.noisy_gradient(loss_fn, params, x, y, count, silo_key, 0, sampler=sampler,
                                    clip_norm=clip_norm, noise_multiplier=z)

    def server(state, summed, ctx):
        mean = safe_mean(summed, ctx.total_weight)
        return apply_server_update(server_opt, state, mean, projection), {"update_norm": optax.tree.norm(mean)}

    init = init_server(server_opt)
    broadcast = lambda state: state.params
    if averaging not in ("last", "window"):
        init, server = _averaged(init, server, averaging_weights(averaging, mu=mu, step_size=step_size))
        broadcast = lambda state: state.iterate.params
    alg = FederatedAlgorithm(
        init=init,
        round=make_round(client, server, resolve(silos_per_round), broadcast=broadcast, per_silo=silo_z,
                         aggregator=aggregator),
        privacy=_with_replacement_privacy(batch_size, noise_multiplier) if private else None,
        name=name or ("isrl_noisy_mbsgd" if private else "mbsgd"),
    )
    return window_average(alg, window) if averaging == "window" else alg


def noisy_local_sgd(loss_fn, *, step_size, local_steps: int, clip_norm: float, noise_multiplier=0.0,
                    silos_per_round=None, projection: Callable | None = None, name: str | None = None,
                    averaging: str = "last", window: int = 8):
    """The experiments' ISRL-DP Local SGD (App. I): ``K = local_steps`` one-sample noisy steps
    ``w <- w - eta (clip(grad f(w, x_t), L) + u_t)`` per round, ``u_t ~ N(0, (z L)^2 I)`` (calibrate with
    :func:`calibrate_local_sgd`); the server averages the silos' models. Privacy per round and silo:
    ``K`` composed with-replacement Gaussian steps. ``averaging``: ``"last"`` iterate (the paper) or
    ``"window"`` (the mean of the last ``window`` server iterates, the authors' scripts:
    :func:`window_average`)."""
    if averaging not in ("last", "window"):
        raise ValueError(f"averaging must be 'last' or 'window' for Local SGD, got {averaging!r}")
    alg = local_sgd(loss_fn, client_opt=optax.sgd(step_size), local_steps=local_steps, batch_size=1,
                    clip_norm=clip_norm, noise_multiplier=noise_multiplier, silos_per_round=silos_per_round,
                    projection=projection, name=name)
    private = check_private_args(clip_norm, noise_multiplier)
    privacy = _with_replacement_privacy(1, noise_multiplier, int(local_steps)) if private else None
    alg = alg._replace(privacy=privacy, name=name or ("isrl_noisy_local_sgd" if private else "local_sgd"))
    return window_average(alg, window) if averaging == "window" else alg


# ------------------------------------------------------------------------------------------------
# The authors' scripts' MB-SGD (a named variant for reproduction studies; no privacy guarantee)

AUTHORS_SCRIPTS_CHOICES = {"aggregate": ("sum", "mean"), "clip": ("batch_mean", "per_example"),
                           "gradient": ("mean", "sum"), "noise": ("per_silo", "central")}
"""The options of :func:`authors_scripts_minibatch_sgd` (the first of each is the insurance script's)."""


def authors_scripts_minibatch_sgd(loss_fn, *, step_size, batch_size: int, clip_norm, noise_multiplier,
                                  silos_per_round=None, aggregate: str = "sum", clip: str = "batch_mean",
                                  gradient: str = "mean", noise: str = "per_silo", window: int = 8,
                                  name: str | None = None) -> FederatedAlgorithm:
    """MB-SGD as the authors' experiment scripts run it (Lowy & Razaviyayn §6.2--6.4), not as the paper states it.

    Each participating silo draws ``K = batch_size`` records uniformly with replacement (the sampler and
    keys of :func:`noisy_minibatch_sgd`) and forms its minibatch gradient ``g``:

    * ``gradient="mean"``: the mean of the ``K`` per-example gradients; ``"sum"``: their sum (obesity script);
    * ``clip="batch_mean"``: ``g`` (mean or sum) clipped as a whole to norm ``C = clip_norm`` (insurance
      script); ``"per_example"``: every per-example gradient clipped to ``C`` before the mean / sum;
    * ``noise="per_silo"``: the silo sends ``g + N(0, sigma^2 I)``, ``sigma = z C / K`` (``z =
      noise_multiplier``, one per silo allowed): the std the paper calibrates on a silo's minibatch *mean*,
      whatever ``g`` is; ``"central"``: the silo sends ``g``, and the server adds ONE draw
      ``N(0, sigma^2 I)`` (``z`` a scalar) to the aggregate (obesity script);
    * ``aggregate="sum"``: the server sums the ``M_r`` silos' messages (insurance / MNIST scripts);
      ``"mean"``: averages them;

    then steps ``w <- w - step_size * aggregate`` (``optax.sgd``, no projection), and reports the mean
    of the last ``min(r, window)`` iterates (:func:`window_average`; ``window=1``: the last iterate).
    ``aggregate="mean", clip="per_example", gradient="mean", noise="per_silo", window=1`` is
    :func:`noisy_minibatch_sgd` (same draws, same numbers). ``step_size`` and ``noise_multiplier`` may be
    traced (sweeps vmap over them).

    Keys: minibatch and per-silo noise from ``step_key(silo_key, 0, MINIBATCH / NOISE)`` as in
    :func:`jaxfl.engine.local.noisy_gradient`; the central draw from
    ``derive_from_round(round_key, silo=SERVER, step=0, purpose=NOISE)``, the server's noise key (as
    DP-FedAvg's central noise).

    Privacy: ``privacy=None``, always; jaxfl states no guarantee for this variant. Clipping the batch mean
    does not bound one record's influence on the message (one record's gradient can move it by up to
    ``2C``, not ``2C/K``); a summed gradient carries ``K`` times the signal the noise was calibrated for;
    a single central draw gives each silo's transcript no noise at all (not ISRL-DP), and a sum over
    silos is not what the calibration assumed. The variant exists to test whether the paper's numbers
    come back under the scripts' choices, not to train privately: train it with ``delta=None``.
    """
    for option, value in (("aggregate", aggregate), ("clip", clip), ("gradient", gradient), ("noise", noise)):
        checks.one_of(option, value, AUTHORS_SCRIPTS_CHOICES[option])
    check_private_args(clip_norm, noise_multiplier)  # argument checks only: no guarantee is stated
    k = int(batch_size)
    sampler = local.make_sampler(batch_size=k)
    shared_z, silo_z = per_silo_noise(noise_multiplier)
    if noise == "central" and silo_z is not None:
        raise ValueError("noise='central' adds one draw for all silos: noise_multiplier must be a scalar, got "
                         f"one per silo (shape {jnp.shape(noise_multiplier)})")
    server_opt = optax.sgd(step_size)
    paper_path = clip == "per_example" and gradient == "mean"

    def sigma(z):
        """``z C / K``, never ``0 * inf``."""
        return jnp.where(z > 0, z * clip_norm, 0.0) * (1.0 / k)

    def client(params, x, y, count, silo_key, z=shared_z):
        silo_noise = z if noise == "per_silo" else 0  # a Python 0 draws no silo noise
        drawn = local.step_draws(sampler, silo_key, count, x.shape[0], params, silo_noise)(0)
        if paper_path:  # exactly noisy_minibatch_sgd's message
            return local.noisy_gradient(loss_fn, params, x, y, count, silo_key, 0, sampler=sampler,
                                        clip_norm=clip_norm, noise_multiplier=silo_noise, drawn=drawn)
        minibatch, unit_noise = drawn
        batch = sampler.take(minibatch, x, y, count)
        summed = clipped_grad_sum(loss_fn, params, batch.x, batch.y, batch.weights,
                                  clip_norm if clip == "per_example" else math.inf)
        g = summed.value
        if gradient == "mean":
            inverse = 1.0 / batch.denominator
            g = jax.tree_util.tree_map(lambda a: a * inverse, g)
        if clip == "batch_mean":
            g, norm = clip_update(g, clip_norm)
            clipped = (norm > clip_norm).astype(jnp.float32)
        else:
            clipped = summed.num_clipped / jnp.maximum(summed.count, 1.0)
        if unit_noise is not None:
            std = sigma(silo_noise)
            g = jax.tree_util.tree_map(lambda a, u: a + std * u, g, unit_noise)
        return g, {"clipped_fraction": clipped}

    def server(state, summed, ctx):
        update = summed if aggregate == "sum" else safe_mean(summed, ctx.total_weight)
        if noise == "central" and not is_concrete_zero(shared_z):
            key = keys_lib.derive_from_round(ctx.round_key, silo=keys_lib.SERVER, step=0,
                                             purpose=keys_lib.Purpose.NOISE)
            update = add_gaussian_noise(key, update, sigma(shared_z))
        return apply_server_update(server_opt, state, update), {"update_norm": optax.tree.norm(update)}

    alg = FederatedAlgorithm(
        init=init_server(server_opt),
        round=make_round(client, server, resolve(silos_per_round), per_silo=silo_z),
        privacy=None,
        name=name or "authors_scripts_mbsgd",
    )
    return window_average(alg, window)


# ------------------------------------------------------------------------------------------------
# Accelerated noisy MB-SGD (Alg. 1, AC-SA)


class AcsaSchedule(NamedTuple):
    """Per-round AC-SA parameters (host arrays of length ``R``, indexed by the global round).

    ``alpha[r]``, ``eta[r]`` (a *proximal weight*, an inverse step size) and ``restart[r]``: at a
    restart the stage starts from the previous stage's output ``q_{k-1} = w^ag`` (§3.4)."""

    alpha: np.ndarray
    eta: np.ndarray
    restart: np.ndarray

    @property
    def rounds(self) -> int:
        return len(self.alpha)


def _stage(rounds: int, upsilon: float):
    r = np.arange(1, rounds + 1, dtype=np.float64)
    return 2.0 / (r + 1.0), 4.0 * upsilon / (r * (r + 1.0))


def acsa_schedule(rounds: int, *, smoothness: float, noise_std: float, radius: float) -> AcsaSchedule:
    """The single-stage AC-SA schedule ``alpha_r = 2/(r+1)``, ``eta_r = 4 upsilon/(r(r+1))`` with
    ``upsilon = max(2 beta, V sqrt(R(R+1)(R+2)/6) / D)``.

    Lowy & Razaviyayn does not give the convex schedule (digest §7.3 flag 7; it defers to Ghadimi & Lan 2012):
    this is the stage rule of §3.4 with the noise term balanced against ``||w_0 - w*|| <= D`` instead
    of the stage's loss gap -- an inference, documented as such. ``V``: std bound of the aggregated
    noisy gradient (:func:`gradient_noise_std`)."""
    rounds = int(rounds)
    if rounds < 1 or not smoothness > 0 or not radius > 0 or noise_std < 0:
        raise ValueError(f"need rounds >= 1, smoothness > 0, radius > 0, noise_std >= 0; got {rounds}, "
                         f"{smoothness}, {radius}, {noise_std}")
    upsilon = max(2.0 * smoothness, noise_std * math.sqrt(rounds * (rounds + 1) * (rounds + 2) / 6.0) / radius)
    alpha, eta = _stage(rounds, upsilon)
    return AcsaSchedule(alpha, eta, np.zeros(rounds, bool))


def multistage_schedule(rounds: int, *, smoothness: float, mu: float, noise_std: float, gap: float) -> AcsaSchedule:
    """The multi-stage AC-SA restarts of §3.4 (Ghadimi & Lan 2013, Prop. 7), truncated to ``rounds``.

    Stage ``k = 1, 2, ...``: ``R_k = ceil(max(4 sqrt(2 beta/mu), 128 V^2 / (3 mu Delta 2^{-(k+1)})))``,
    ``upsilon_k = max(2 beta, sqrt(mu V^2 / (3 Delta 2^{-(k-1)} R_k (R_k+1)(R_k+2))))``, ``alpha_r =
    2/(r+1)``, ``eta_r = 4 upsilon_k / (r(r+1))`` with ``r`` restarting at 1; stage ``k`` starts from
    ``q_{k-1}`` (the digest flags the paper's ``q_0 = 0`` as a typo for ``q_0 = w_0``, followed here).
    ``gap``: ``Delta >= F(w_0) - F*``; ``noise_std``: ``V``.
    """
    rounds = int(rounds)
    if rounds < 1 or not smoothness > 0 or not mu > 0 or not gap > 0 or noise_std < 0:
        raise ValueError(f"need rounds >= 1, smoothness > 0, mu > 0, gap > 0, noise_std >= 0; got {rounds}, "
                         f"{smoothness}, {mu}, {gap}, {noise_std}")
    alphas, etas, restarts = [], [], []
    k = 1
    while len(alphas) < rounds:
        r_k = math.ceil(max(4 * math.sqrt(2 * smoothness / mu),
                            128 * noise_std**2 / (3 * mu * gap * 2.0 ** (-(k + 1)))))
        upsilon = max(2 * smoothness,
                      math.sqrt(mu * noise_std**2 / (3 * gap * 2.0 ** (-(k - 1)) * r_k * (r_k + 1) * (r_k + 2))))
        a, e = _stage(r_k, upsilon)
        alphas.extend(a)
        etas.extend(e)
        restarts.extend([True] + [False] * (r_k - 1))
        k += 1
    return AcsaSchedule(np.asarray(alphas[:rounds]), np.asarray(etas[:rounds]), np.asarray(restarts[:rounds]))


def gradient_noise_std(*, dim: int, sigma: float, silos_per_round: float, batch_size: int, phi2: float = 0.0,
                       upsilon2: float = 0.0, num_silos: int | None = None) -> float:
    """``V`` with ``V^2 = phi^2/(MK) + (upsilon^2/M) 1{N>1} (N-M)/(N-1) + d sigma^2/M`` (Lemma E.3): the
    aggregated noisy gradient's deviation (local sampling, silo sampling, Gaussian noise)."""
    m = float(silos_per_round)
    n_silos = m if num_silos is None else float(num_silos)
    het = upsilon2 / m * (n_silos - m) / (n_silos - 1) if n_silos > 1 else 0.0
    return math.sqrt(phi2 / (m * batch_size) + het + dim * sigma**2 / m)


class AcceleratedState(NamedTuple):
    """AC-SA server state: ``params`` is ``w^ag_r`` (the output), ``prox`` is ``w_r``, ``anchor`` is
    ``w_0`` (for the regularizer), ``pass_seed`` the key data fixing one-pass batch orders."""

    params: Any
    prox: Any
    anchor: Any
    round: jnp.ndarray
    pass_seed: jnp.ndarray


def _mix(a, x, b, y):
    return jax.tree_util.tree_map(lambda u, v: a * u + b * v, x, y)


def one_pass_batch(x, y, count, k, silo_index, round_index, pass_seed, silo_key):
    """Batch ``round_index`` of a per-silo random order fixed for the run (disjoint across rounds).

    Round 0's silo key fixes the order: at round 0 it is the client's own key; later rounds re-derive it
    from the round-0 key the server stored (``pass_seed``), so every round sees the same order.
    Beyond ``floor(count / K)`` rounds a silo has no unused records and its batch weights are 0."""
    stored = keys_lib.silo_key(jax.random.wrap_key_data(pass_seed), silo_index)
    order_key = jax.random.wrap_key_data(jnp.where(round_index == 0, jax.random.key_data(silo_key),
                                                   jax.random.key_data(stored)))
    order_key = keys_lib.step_key(order_key, 0, keys_lib.Purpose.SHUFFLE)
    score = jnp.where(jnp.arange(x.shape[0]) < count, uniform.uniform(order_key, (x.shape[0],)), 2.0)
    idx = jnp.argsort(score)[jnp.clip(round_index * k + jnp.arange(k), 0, x.shape[0] - 1)]
    fresh = (round_index + 1) * k <= count
    return local.Batch(x[idx], y[idx], jnp.full((k,), fresh, jnp.float32), jnp.asarray(k, jnp.float32))


def _acsa(*, schedule, batch_size, mu, regularization, sampling, silos_per_round, projection, message_fn,
          aggregator, decode, privacy, name, noise_multiplier):
    """The AC-SA round shared by Alg. 1 and Alg. 6: ``message_fn(w_md, batch, silo_key, z)`` is a silo's
    message on its batch, ``aggregator`` combines messages, ``decode(aggregate, ctx) -> mean gradient``."""
    if sampling not in ("one_pass", "with_replacement"):
        raise ValueError(f"sampling must be 'one_pass' or 'with_replacement', got {sampling!r}")
    if mu < 0 or regularization < 0:
        raise ValueError(f"mu and regularization must be >= 0, got {mu}, {regularization}")
    k = int(batch_size)
    alpha = jnp.asarray(schedule.alpha, jnp.float32)
    eta = jnp.asarray(schedule.eta, jnp.float32)
    restart = jnp.asarray(schedule.restart)
    mu_eff = float(mu) + float(regularization)
    shared_z, silo_z = per_silo_noise(noise_multiplier)
    sampler = local.make_sampler(batch_size=k)
    project = projection if projection is not None else (lambda p: p)

    def init(params):
        seed = jax.random.key_data(jax.random.key(0))
        return AcceleratedState(params, params, params, jnp.zeros([], jnp.int32), seed)

    def coefficients(state):
        r = jnp.minimum(state.round, schedule.rounds - 1)  # past the schedule: its last round's values
        prox = jax.tree_util.tree_map(lambda w, q: jnp.where(restart[r], q, w), state.prox, state.params)
        return alpha[r], eta[r], prox

    def broadcast(state):
        a, e, prox = coefficients(state)
        inv = 1.0 / (e + (1.0 - a * a) * mu_eff)
        w_md = _mix((1 - a) * (mu_eff + e) * inv, state.params, a * ((1 - a) * mu_eff + e) * inv, prox)
        return w_md, state.round, state.pass_seed

    def client(sent, x, y, count, silo_key, silo_values):
        w_md, round_index, pass_seed = sent
        z, silo_index = silo_values
        if sampling == "one_pass":
            batch = one_pass_batch(x, y, count, k, silo_index, round_index, pass_seed, silo_key)
        else:
            batch = sampler(keys_lib.step_key(silo_key, 0, keys_lib.Purpose.MINIBATCH), x, y, count)
        return message_fn(w_md, batch, keys_lib.step_key(silo_key, 0, keys_lib.Purpose.NOISE), z)

    def per_silo(num_silos):
        z = jnp.full((num_silos,), shared_z, jnp.float32) if silo_z is None else silo_z
        return z, jnp.arange(num_silos)

    def server(state, aggregate, ctx):
        a, e, prox = coefficients(state)
        w_md, _, _ = broadcast(state)
        g = decode(aggregate, ctx)
        if regularization:
            g = _mix(1.0, g, float(regularization), jax.tree_util.tree_map(jnp.subtract, w_md, state.anchor))
        inv = 1.0 / (mu_eff + e)
        z_r = jax.tree_util.tree_map(lambda m, w, gi: (a * mu_eff * m + ((1 - a) * mu_eff + e) * w - a * gi) * inv,
                                     w_md, prox, g)
        w_new = project(z_r)
        seed = jnp.where(state.round == 0, jax.random.key_data(ctx.round_key), state.pass_seed)
        info = {"update_norm": optax.tree.norm(g)}
        return AcceleratedState(_mix(a, w_new, 1 - a, state.params), w_new, state.anchor, state.round + 1, seed), info

    return FederatedAlgorithm(
        init=init,
        round=make_round(client, server, resolve(silos_per_round), broadcast=broadcast, per_silo=per_silo,
                         aggregator=aggregator),
        privacy=privacy, name=name)


def one_pass_privacy(batch_size, events_for, central_for=None):
    """Parallel composition over disjoint batches: the run costs one round, for ``floor(n_min / K)`` rounds."""

    def privacy(counts):
        counts = np.asarray(counts)
        real = counts[counts > 0]
        central = None if central_for is None else central_for(real)
        return RoundPrivacy(events=tuple(events_for(counts)), level="record",
                            relation=dp_accounting.NeighboringRelation.REPLACE_ONE, composition="parallel",
                            round_limit=int(real.min()) // batch_size, central=central)

    return privacy


def accelerated_minibatch_sgd(loss_fn, *, schedule: AcsaSchedule, batch_size: int, clip_norm: float,
                              noise_multiplier=0.0, mu: float = 0.0, regularization: float = 0.0,
                              sampling: str = "one_pass", silos_per_round=None, projection: Callable | None = None,
                              microbatch="auto", name: str | None = None) -> FederatedAlgorithm:
    """Accelerated noisy MB-SGD (Alg. 1, AC-SA made ISRL-DP).

    Round ``r`` (``alpha, eta`` from ``schedule``; ``mu_eff = mu + regularization``):
    ``w_md = [(1-a)(mu_eff+eta) w_ag + a((1-a)mu_eff + eta) w] / (eta + (1-a^2) mu_eff)`` is broadcast;
    silos send noisy minibatch-mean gradients at ``w_md``; with ``g`` their mean (plus the regularizer's
    gradient ``lambda (w_md - w_0)``, added by the server so the sensitivity stays ``2L/K``: digest flag),
    the server's prox step has the closed form
    ``w = Pi_W((a mu_eff w_md + ((1-a) mu_eff + eta) w - a g) / (mu_eff + eta))`` and
    ``w_ag = a w + (1-a) w_ag``; the output is ``w_ag``.

    Args:
      schedule: :func:`acsa_schedule` (convex; use ``regularization = V / (2 D sqrt(R))``, Thm 3.1) or
        :func:`multistage_schedule` (strongly convex, §3.4).
      sampling: ``"one_pass"`` -- disjoint batches without replacement (a per-silo random order fixed
        for the run), ``R <= floor(n_i / K)``; privacy by parallel composition (calibrate with
        :func:`calibrate_one_pass`). ``"with_replacement"`` -- federated ERM (Thm 4.1), any number of
        passes; noise as Alg. 2 (:func:`calibrate_minibatch_sgd`), accounted by ``"lowy"``.
      microbatch: the clipped sum taken in slices of this many records (``"auto"``, ``None`` or an int, as in
        :func:`jaxfl.algorithms.sgd.minibatch_sgd`; memory and speed only).
    """
    private = check_private_args(clip_norm, noise_multiplier)
    microbatch = check_microbatch(microbatch)

    def message(w_md, batch, noise_key, z):
        return local.noisy_batch_gradient(loss_fn, w_md, batch, noise_key, clip_norm=clip_norm, noise_multiplier=z,
                                          microbatch=microbatch)

    # A Gaussian of std zC on the silo's clipped sum, for replace-one neighbours (sensitivity 2C).
    gaussians = lambda counts: [clipped_sum_gaussian(z, dp_accounting.NeighboringRelation.REPLACE_ONE)
                                for _, z in silo_noise_multipliers(noise_multiplier, counts)]
    if not private:
        privacy = None
    elif sampling == "one_pass":
        privacy = one_pass_privacy(int(batch_size), gaussians)
    else:
        privacy = _with_replacement_privacy(int(batch_size), noise_multiplier)
    return _acsa(schedule=schedule, batch_size=batch_size, mu=mu, regularization=regularization, sampling=sampling,
                 silos_per_round=silos_per_round, projection=projection, message_fn=message,
                 aggregator=weighted_sum, decode=lambda summed, ctx: safe_mean(summed, ctx.total_weight),
                 privacy=privacy, name=name or f"accelerated_mbsgd_{sampling}", noise_multiplier=noise_multiplier)


# ------------------------------------------------------------------------------------------------
# Shuffle model (§3.5, §3.6)


def _shuffled_sum(messages, weights, round_key):
    """The shuffler: a uniform permutation of the silos' reports (keyed by the round), then the sum."""
    key = keys_lib.derive_from_round(round_key, silo=keys_lib.SERVER, step=0, purpose=keys_lib.Purpose.SHUFFLE)
    perm = jax.random.permutation(key, weights.shape[0])
    return weighted_sum(jax.tree_util.tree_map(lambda m: m[perm], messages), weights[perm], round_key)


def shuffled_minibatch_sgd(loss_fn, *, step_size, clip_norm: float, noise_multiplier: float, silos_per_round: int,
                           projection: Callable | None = None, averaging: str = "last", mu: float = 0.0,
                           name: str | None = None) -> FederatedAlgorithm:
    """Shuffled Noisy MB-SGD (Thm 5.1 / G.1): Alg. 2 with ``K = 1``, ``M`` uniformly available silos and a
    secure shuffler permuting their reports before the server averages them.

    Privacy, both stated per round: each silo's own transcript (ISRL-DP: one with-replacement-sampled
    Gaussian; accountant ``"lowy"``), and the shuffled transcript's central guarantee
    (:class:`jaxfl.accounting.shuffle_model.ShuffledGaussianDpEvent`, accountant ``"shuffle"``; Lowy & Razaviyayn
    leaves the constant ``C`` of its sigma unspecified, so jaxfl accounts the chain numerically instead).
    Get both from :func:`jaxfl.engine.driver.make_ledger` (``central=True`` for the second).
    """
    m = int(silos_per_round)
    alg = noisy_minibatch_sgd(loss_fn, step_size=step_size, batch_size=1, clip_norm=clip_norm,
                              noise_multiplier=noise_multiplier, silos_per_round=m, projection=projection,
                              averaging=averaging, mu=mu, aggregator=_shuffled_sum,
                              name=name or "shuffled_noisy_mbsgd")
    if alg.privacy is None:
        return alg
    silo_privacy = alg.privacy

    def privacy(counts):
        counts = np.asarray(counts)
        real = counts[counts > 0]
        if m > len(real):
            raise ValueError(f"silos_per_round={m} exceeds the {len(real)} silos with records")
        central = ShuffledGaussianDpEvent(float(noise_multiplier), m, len(real), int(real.min()))
        return silo_privacy(counts)._replace(central=central)

    return alg._replace(privacy=privacy)


def sdp_accelerated_minibatch_sgd(loss_fn, *, params, schedule: AcsaSchedule, batch_size: int, clip_norm: float,
                                  shuffle_params: shuffle.ShuffleParams, mu: float = 0.0, regularization: float = 0.0,
                                  silos_per_round=None, projection: Callable | None = None,
                                  name: str | None = None) -> FederatedAlgorithm:
    """SDP one-pass accelerated noisy MB-SGD (Alg. 6): AC-SA whose gradients are summed by P_vec.

    Each available silo draws ``K`` fresh records (disjoint across rounds), clips every per-record gradient
    to ``L = clip_norm`` (global L2 norm of the flattened pytree) and runs P_vec's local randomizer on each;
    the shuffled bits are counted per coordinate; the analyzer's unbiased sum over the ``M_r K`` reports,
    divided by ``M_r K``, is the gradient of the AC-SA step (:func:`accelerated_minibatch_sgd`).

    Privacy: the shuffled transcript of a round is P_vec over ``M K`` users
    (:class:`jaxfl.accounting.shuffle_model.PvecDpEvent`, accountant ``"shuffle"``; ``M`` must then be a
    fixed number of silos per round); disjoint batches make the whole run as private as one round
    (parallel composition, ``R <= floor(n_min / K)``). Each silo's own transcript (its per-coordinate
    counts) gets :func:`jaxfl.privacy.shuffle.local_epsilon`'s guarantee (usually weak: P_vec calibrates
    its noise for the pooled sum). Choose parameters with :func:`jaxfl.privacy.shuffle.pvec_parameters`.

    ``params``: the initial model parameters, or a template with the same structure and shapes
    (:func:`jaxfl.algorithms.common.model_template`): P_vec's events need the model dimension, and the
    server unflattens the decoded sum, before any ``init``.
    """
    k = int(batch_size)
    if not clip_norm > 0 or math.isinf(clip_norm):
        raise ValueError(f"clip_norm must be finite and > 0 (it is P_vec's L), got {clip_norm}")
    template = model_template(params)
    pvec = shuffle.ShuffleParams(*shuffle_params)

    def message(w_md, batch, noise_key, z):
        del z
        grads = per_example_grads(loss_fn, w_md, batch.x, batch.y)
        flat = jax.vmap(lambda g: ravel_pytree(g)[0])(grads)
        return shuffle.randomize(noise_key, flat, batch.weights, clip_norm, pvec, clip=True), {}

    def decode(total, ctx):
        users = (ctx.total_weight * k).astype(jnp.int32)
        estimate = shuffle.analyze(total, users, clip_norm, pvec)
        inverse = jnp.where(users > 0, 1.0 / jnp.maximum(users, 1).astype(jnp.float32), 0.0)
        return template.unravel(estimate * inverse)

    def events_for(counts):
        return [PvecDpEvent(*pvec, num_users=k, dim=template.size) for n in counts if n > 0]

    def central_for(real):
        if not isinstance(silos_per_round, int):
            raise ValueError("the central P_vec guarantee needs a fixed number of silos per round "
                             f"(silos_per_round=int), got {silos_per_round!r}")
        return PvecDpEvent(*pvec, num_users=int(silos_per_round) * k, dim=template.size)

    alg = _acsa(schedule=schedule, batch_size=k, mu=mu, regularization=regularization, sampling="one_pass",
                silos_per_round=silos_per_round, projection=projection, message_fn=message,
                aggregator=participant_count_sum, decode=decode, privacy=one_pass_privacy(k, events_for, central_for),
                name=name or "sdp_accelerated_mbsgd", noise_multiplier=0.0)
    acsa_init = alg.init

    def init(p):
        check_params(template, p, alg.name)
        return acsa_init(p)

    return alg._replace(init=init)
