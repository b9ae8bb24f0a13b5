"""Noisy minibatch SGD and noisy Local SGD under inter-silo record-level DP (ISRL-DP), with their calibrations.

* :func:`noisy_minibatch_sgd` -- every available silo sends a noisy mean of ``K`` clipped per-example
  gradients drawn with replacement (one noise multiplier per silo allowed: per-silo budgets); projection
  onto a constraint set; output averaging (last iterate, ``gamma_r = 1/R``, Stich's weights or a window:
  :mod:`jaxfl.algorithms.averaging`); ``M_r < N`` available silos. Non-smooth losses through
  :func:`jaxfl.algorithms.prox.moreau_envelope`.
* :func:`noisy_local_sgd` -- ``K`` one-sample noisy local steps a round (per-step noise).
* :func:`calibrate_minibatch_sgd`, :func:`calibrate_one_pass`, :func:`calibrate_local_sgd` -- the noise for a
  target: the theorem's closed form, the experiments' rule (not certified) or an accountant's smallest
  multiplier; :func:`theorem_parameters` the theorem's full parameter set.
* :func:`authors_scripts_minibatch_sgd` -- MB-SGD as Lowy & Razaviyayn's experiment scripts run it (summed
  silos, batch-mean clipping, one central draw, window-averaged output): a named variant for reproduction
  studies, with no privacy guarantee.

Calibrations return the *engine's* noise multiplier ``z`` (noise std ``z C`` on a silo's clipped sum of
``K`` gradients) beside the paper's ``sigma`` (std on the minibatch mean): ``sigma = z C / K``.
Every factory states its privacy per round (``FederatedAlgorithm.privacy``) so a ledger reports what
the run actually spent; with-replacement sampling is accounted by the ``"lowy"`` accountant
(:class:`jaxfl.accounting.sgd_noise.LowyAccountant`) or numerically by ``"pld"``.

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

from jaxfl import checks
from jaxfl.accounting.calibrate import calibrate as calibrate_events
from jaxfl.accounting import sgd_noise
from jaxfl.accounting.events import clipped_sum_gaussian
from jaxfl.algorithms.common import (apply_server_update, check_private_args, init_server, is_concrete_zero,
                                     per_silo_noise, safe_mean, sampled_silo_privacy)
from jaxfl.algorithms.sgd import local_sgd
from jaxfl.engine import local
from jaxfl.engine.participation import argument as participation_argument, resolve
from jaxfl.engine.protocol import FederatedAlgorithm
from jaxfl.engine.rounds import make_round, weighted_sum
from jaxfl.privacy import keys as keys_lib
from jaxfl.privacy.clipping import clip_update, clipped_grad_sum
from jaxfl.privacy.noise import add_gaussian_noise
from jaxfl.algorithms.averaging import averaged, averaging_weights, window_average


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
        whose moments-accountant argument has unspecified constants: see :mod:`jaxfl.accounting.sgd_noise`).

    Example: :func:`calibrate_minibatch_sgd`.
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
        Reproduces the paper's plots; NOT certified (see :func:`sgd_noise.sigma_experiment_mbsgd`).
        ``"accountant"`` -- the smallest ``z`` for which ``accountant`` (default ``"lowy"``, the only
        one that accounts sampling with replacement) certifies ``(eps_i, delta_i)`` after ``R`` rounds.
      batch_size: ``K``; default from the rule.
      epsilon_max: the experiments' grid maximum used for ``K``.

    Example (Theorem 2.1's noise for (8, 1e-5) per silo over 20 rounds, silos of 200 records):
      >>> calibration = calibrate_minibatch_sgd(clip_norm=1.0, counts=[200] * 4, rounds=20, epsilon=8.0, delta=1e-5)
      >>> calibration.batch_size, round(calibration.sigma, 4), calibration.certified
      (19, 0.6136, True)
    """
    checks.one_of("calibration", calibration, CALIBRATIONS)
    counts = checks.silo_counts("counts", counts)
    rounds = checks.positive_int("rounds", rounds)
    eps = checks.per_silo("epsilon", epsilon, len(counts))
    dlt = checks.per_silo("delta", delta, len(counts))
    if calibration == "theorem":
        sigma = np.atleast_1d(sgd_noise.sigma_theorem(clip_norm, counts, rounds, eps, dlt))
        needed = int(np.max(sgd_noise.min_batch_theorem(counts, rounds, eps, dlt)))
        k = needed if batch_size is None else int(batch_size)
        if k < needed:
            raise ValueError(f"batch_size={batch_size} is below Theorem 2.1's minimum K={needed} for these budgets")
    elif calibration == "experiment":
        k = int(batch_size) if batch_size is not None else sgd_noise.batch_experiment(
            int(counts.min()), rounds, float(np.max(eps)) if epsilon_max is None else epsilon_max)
        sigma = np.atleast_1d(sgd_noise.sigma_experiment_mbsgd(clip_norm, counts, rounds, eps, dlt))
    else:
        k = int(batch_size) if batch_size is not None else int(np.max(sgd_noise.min_batch_theorem(
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
    z = sgd_noise.noise_multiplier_from_sigma(sigma, clip_norm, k)
    return NoiseCalibration(_squeeze(z), _squeeze(sigma), k, calibration, calibration != "experiment")


def calibrate_one_pass(*, clip_norm: float, counts, batch_size: int, epsilon, delta) -> NoiseCalibration:
    """Noise for one-pass accelerated MB-SGD (Thm 3.1 / E.1): ``sigma^2 = 32 L^2 ln(1.25/delta) /
    (eps^2 K^2)``; every record is used once (``R <= floor(n_i / K)``), so by parallel composition the
    run is as private as one round.

    Example:
      >>> calibration = calibrate_one_pass(clip_norm=1.0, counts=[200] * 4, batch_size=10, epsilon=1.0, delta=1e-5)
      >>> round(calibration.sigma, 4), calibration.calibration
      (1.9379, 'one_pass')
    """
    counts = checks.silo_counts("counts", counts)
    eps = checks.per_silo("epsilon", epsilon, len(counts))
    dlt = checks.per_silo("delta", delta, len(counts))
    sigma = np.atleast_1d(sgd_noise.sigma_one_pass(clip_norm, batch_size, eps, dlt))
    z = sgd_noise.noise_multiplier_from_sigma(sigma, clip_norm, batch_size)
    return NoiseCalibration(_squeeze(z), _squeeze(sigma), int(batch_size), "one_pass", True)


def calibrate_local_sgd(*, clip_norm: float, counts, rounds: int, local_steps: int, epsilon, delta) -> NoiseCalibration:
    """Per-step noise of the experiments' ISRL-DP Local SGD (App. I): ``sigma^2 = 8 L^2 R K ln(1/delta) /
    (n^2 eps^2)`` on each one-sample step (so ``z = sigma / L``). Like the experiments' MB-SGD rule it
    is not certified by jaxfl's accounting.

    Example:
      >>> calibration = calibrate_local_sgd(clip_norm=1.0, counts=[200] * 4, rounds=20, local_steps=5, epsilon=1.0,
      ...                                   delta=1e-5)
      >>> round(calibration.noise_multiplier, 4), calibration.certified                # the experiments' rule
      (0.4799, False)
    """
    counts = checks.silo_counts("counts", counts)
    eps = checks.per_silo("epsilon", epsilon, len(counts))
    dlt = checks.per_silo("delta", delta, len(counts))
    sigma = np.atleast_1d(sgd_noise.sigma_experiment_local_sgd(clip_norm, counts, rounds, local_steps, eps, dlt))
    z = sgd_noise.noise_multiplier_from_sigma(sigma, clip_norm, 1)
    return NoiseCalibration(_squeeze(z), _squeeze(sigma), 1, "experiment", False)


class TheoremParameters(NamedTuple):
    """Thm D.1 / D.2's prescriptions for Alg. 2 (M = silos per round).

    ``rounds`` R, constant ``step_size`` eta, ``averaging`` (``"uniform"``: gamma_r = 1/R, convex;
    ``"stich"``: Lemma D.5, strongly convex) and, for non-smooth losses, the Moreau smoothing
    ``smoothing`` beta to pass to :func:`moreau_envelope` (``None`` for smooth losses).

    Example: :func:`theorem_parameters`.
    """

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
    sigma from :func:`jaxfl.accounting.sgd_noise.sigma_theorem`; Stich weights.
    Non-smooth (``smoothness=None``): Thm D.2 smooths with ``beta`` such that ``L^2/beta`` equals the target
    rate, ``(L D/sqrt(M))(1/sqrt(n) + sqrt(d ln(1/delta))/(eps n))`` (convex) or
    ``(L^2/(mu M))(1/n + d ln(1/delta)/(eps^2 n^2))`` (strongly convex), then uses the formulas above with it.

    Example (a 0.25-smooth convex loss, radius 10, silos of 200 records, all 4 a round):
      >>> theorem_parameters(lipschitz=1.0, radius=10.0, n=200, dim=3, epsilon=1.0, delta=1e-5, silos_per_round=4,
      ...                    smoothness=0.25).rounds
      871
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
    sigma = sgd_noise.sigma_theorem(L, n, rounds, eps, delta)
    c = d * sigma**2 / M + L**2
    step = min(1 / (2 * beta), math.log(max(2.0, mu**2 * D**2 * rounds**2 / c)) / (mu * rounds))
    return TheoremParameters(int(rounds), float(step), "stich", smoothing)


def _with_replacement_privacy(batch_size, noise_multiplier, steps_per_round=1):
    """Lowy & Razaviyayn's statement: K draws with replacement, Gaussian, replace-one neighbours ("lowy")."""
    return sampled_silo_privacy(local.make_sampler(batch_size=batch_size), noise_multiplier, steps_per_round,
                                relation=dp_accounting.NeighboringRelation.REPLACE_ONE)


def noisy_minibatch_sgd(loss_fn, *, step_size, batch_size: int, clip_norm: float, noise_multiplier=0.0,
                        participation=None, silos_per_round=None,
                        projection: Callable | None = None, averaging: str = "last",
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

    Example (calibrated by :func:`calibrate_minibatch_sgd` to (8, 1e-5) per silo; the closed-form accountant of
    Lowy & Razaviyayn's proof certifies less):

      >>> import jax, numpy as np, jaxfl
      >>> from jaxfl.models import binary_accuracy, init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (4, 200, 3)))            # 4 silos of 200 records
      >>> y = (x[..., 0] > 0).astype(np.float32)
      >>> data = jaxfl.from_silos([(x[i], y[i]) for i in range(4)])
      >>> cal = calibrate_minibatch_sgd(clip_norm=1.0, counts=data.counts, rounds=20, epsilon=8.0, delta=1e-5)
      >>> algorithm = noisy_minibatch_sgd(logistic_loss, step_size=0.5, batch_size=cal.batch_size, clip_norm=1.0,
      ...                                 noise_multiplier=cal.noise_multiplier)
      >>> result = jaxfl.train(algorithm, data, init_linear(3), rounds=20, delta=1e-5, accountant="lowy",
      ...                      progress=False)
      >>> result.epsilon < 8.0, float(binary_accuracy(result.params, x.reshape(-1, 3), y.reshape(-1))) > 0.8
      (True, True)
    """
    participation = participation_argument(participation, silos_per_round, "noisy_minibatch_sgd")
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
        init, server = averaged(init, server, averaging_weights(averaging, mu=mu, step_size=step_size))
        broadcast = lambda state: state.iterate.params
    alg = FederatedAlgorithm(
        init=init,
        round=make_round(client, server, resolve(participation), broadcast=broadcast, per_silo=silo_z,
                         aggregator=aggregator),
        privacy=_with_replacement_privacy(batch_size, noise_multiplier) if private else None,
        name=name or ("isrl_noisy_mbsgd" if private else "mbsgd"),
    )
    return window_average(alg, window) if averaging == "window" else alg


def noisy_local_sgd(loss_fn, *, step_size, local_steps: int, clip_norm: float, noise_multiplier=0.0,
                    participation=None, silos_per_round=None,
                    projection: Callable | None = None, name: str | None = None,
                    averaging: str = "last", window: int = 8):
    """The experiments' ISRL-DP Local SGD (App. I): ``K = local_steps`` one-sample noisy steps
    ``w <- w - eta (clip(grad f(w, x_t), L) + u_t)`` per round, ``u_t ~ N(0, (z L)^2 I)`` (calibrate with
    :func:`calibrate_local_sgd`); the server averages the silos' models. Privacy per round and silo:
    ``K`` composed with-replacement Gaussian steps. ``averaging``: ``"last"`` iterate (the paper) or
    ``"window"`` (the mean of the last ``window`` server iterates, the authors' scripts:
    :func:`window_average`).

    Example (the experiments' calibration, which jaxfl's accounting does not certify: its ledger reports inf):
      >>> import jax, numpy as np, jaxfl
      >>> from jaxfl.models import binary_accuracy, init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (4, 200, 3)))            # 4 silos of 200 records
      >>> y = (x[..., 0] > 0).astype(np.float32)
      >>> data = jaxfl.from_silos([(x[i], y[i]) for i in range(4)])
      >>> cal = calibrate_local_sgd(clip_norm=1.0, counts=data.counts, rounds=20, local_steps=5, epsilon=1.0,
      ...                           delta=1e-5)
      >>> algorithm = noisy_local_sgd(logistic_loss, step_size=0.5, local_steps=5, clip_norm=1.0,
      ...                             noise_multiplier=cal.noise_multiplier)
      >>> result = jaxfl.train(algorithm, data, init_linear(3), rounds=20, delta=1e-5, accountant="lowy",
      ...                      progress=False)
      >>> result.epsilon, float(binary_accuracy(result.params, x.reshape(-1, 3), y.reshape(-1))) > 0.8
      (inf, True)
    """
    participation = participation_argument(participation, silos_per_round, "noisy_local_sgd")
    if averaging not in ("last", "window"):
        raise ValueError(f"averaging must be 'last' or 'window' for Local SGD, got {averaging!r}")
    alg = local_sgd(loss_fn, client_opt=optax.sgd(step_size), local_steps=local_steps, batch_size=1,
                    clip_norm=clip_norm, noise_multiplier=noise_multiplier, participation=participation,
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
                                  participation=None, silos_per_round=None,
                                  aggregate: str = "sum", clip: str = "batch_mean",
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

    Example (no privacy statement: the scripts' choices are not the paper's mechanism):
      >>> import jax, numpy as np, jaxfl
      >>> from jaxfl.models import binary_accuracy, init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (4, 200, 3)))            # 4 silos of 200 records
      >>> y = (x[..., 0] > 0).astype(np.float32)
      >>> data = jaxfl.from_silos([(x[i], y[i]) for i in range(4)])
      >>> algorithm = authors_scripts_minibatch_sgd(logistic_loss, step_size=0.5, batch_size=20, clip_norm=1.0,
      ...                                           noise_multiplier=1.0)
      >>> result = jaxfl.train(algorithm, data, init_linear(3), rounds=20, delta=1e-5, progress=False)
      >>> result.epsilon is None, float(binary_accuracy(result.params, x.reshape(-1, 3), y.reshape(-1))) > 0.8
      (True, True)
    """
    participation = participation_argument(participation, silos_per_round, "authors_scripts_minibatch_sgd")
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
        round=make_round(client, server, resolve(participation), per_silo=silo_z),
        privacy=None,
        name=name or "authors_scripts_mbsgd",
    )
    return window_average(alg, window)
