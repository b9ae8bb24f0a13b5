"""The papers' closed-form privacy calculus, as pure functions of plain floats.

These reproduce the calibrations the seed papers state (Lowy & Razaviyayn digest §2.3): the classic and Bun–Steinke
Gaussian mechanisms, advanced composition, amplification by subsampling, parallel composition. They are
*looser* than the accountants in :mod:`jaxfl.accounting.accountants`; use them to follow a paper's theorem
exactly, and the accountants for the library's own tighter calibration.

Units: epsilon in nats, delta a probability, sensitivity an L2 norm, sigma a standard deviation in the same
units as the sensitivity. Each function raises ``ValueError`` outside the range its theorem covers.
"""
from __future__ import annotations

import math
from typing import Sequence

import dp_accounting
import numpy as np

from jaxfl import checks


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Classic Gaussian mechanism (Dwork & Roth 2014, Thm A.1 / 3.22): noise std
    ``sigma = sqrt(2 ln(1.25/delta)) * sensitivity / epsilon`` gives (epsilon, delta)-DP.

    The theorem is stated for epsilon in (0, 1). ``epsilon == 1`` is accepted: the Gaussian privacy profile
    is continuous in (sigma, epsilon), so the guarantee extends to the closed end (Lowy & Razaviyayn use it at
    epsilon' <= 1). ``epsilon > 1`` raises ``ValueError``: there the formula is not a theorem (use
    :func:`gaussian_sigma_bun_steinke` or :func:`analytic_gaussian_sigma`).

    Example:
      >>> round(gaussian_sigma(1.0, 1e-5), 4)              # sqrt(2 ln(1.25e5)) / 1
      4.8448
      >>> round(gaussian_sigma(0.5, 1e-5, sensitivity=2.0), 4)
      19.3792
    """
    epsilon = checks.epsilon("epsilon", epsilon)
    delta = checks.delta("delta", delta, scalar=True)
    sensitivity = checks.positive_float("sensitivity", sensitivity)
    if epsilon > 1.0:
        raise ValueError(f"the classic Gaussian mechanism (Dwork-Roth Thm A.1) needs epsilon <= 1, got "
                         f"{epsilon!r}; use gaussian_sigma_bun_steinke or analytic_gaussian_sigma")
    return math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / epsilon


def gaussian_sigma_bun_steinke(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Gaussian mechanism via zCDP (Bun & Steinke 2016, Props 1.3 and 1.6), the form of Lowy & Razaviyayn
    Thm E.1: ``sigma^2 = 8 sensitivity^2 ln(1.25/delta) / epsilon^2`` gives (epsilon, delta)-DP.

    Valid for ``epsilon <= 8 ln(1/delta)`` (the range the paper states; larger epsilon raises ``ValueError``).

    Example:
      >>> round(gaussian_sigma_bun_steinke(1.0, 1e-5), 4)  # twice the classic form's sigma
      9.6896
    """
    epsilon = checks.epsilon("epsilon", epsilon)
    delta = checks.delta("delta", delta, scalar=True)
    sensitivity = checks.positive_float("sensitivity", sensitivity)
    limit = 8.0 * math.log(1.0 / delta)
    if epsilon > limit:
        raise ValueError(f"the Bun-Steinke Gaussian form needs epsilon <= 8 ln(1/delta) = {limit:g}, "
                         f"got {epsilon!r}")
    return math.sqrt(8.0 * math.log(1.25 / delta)) * sensitivity / epsilon


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest noise std for (epsilon, delta)-DP of one Gaussian release (analytic Gaussian mechanism,
    Balle & Wang 2018, Thm 8), by ``dp_accounting.get_sigma_gaussian``. Valid for every epsilon > 0.

    Example:
      >>> sigma = analytic_gaussian_sigma(1.0, 1e-5)
      >>> round(sigma, 4), round(analytic_gaussian_epsilon(sigma, 1e-5), 6)   # tighter than gaussian_sigma's 4.8448
      (3.7306, 1.0)
    """
    epsilon = checks.epsilon("epsilon", epsilon)
    delta = checks.delta("delta", delta, scalar=True)
    sensitivity = checks.positive_float("sensitivity", sensitivity)
    return float(dp_accounting.get_sigma_gaussian(epsilon, delta)) * sensitivity


def analytic_gaussian_epsilon(sigma: float, delta: float, sensitivity: float = 1.0) -> float:
    """Exact epsilon of one Gaussian release with noise std ``sigma`` at ``delta`` (Balle & Wang 2018), by
    ``dp_accounting.get_epsilon_gaussian``.

    Example:
      >>> round(analytic_gaussian_epsilon(3.7306, 1e-5), 4)
      1.0
    """
    sigma = checks.positive_float("sigma", sigma)
    delta = checks.delta("delta", delta, scalar=True)
    sensitivity = checks.positive_float("sensitivity", sensitivity)
    return float(dp_accounting.get_epsilon_gaussian(sigma / sensitivity, delta))


def _per_step(values: float | Sequence[float], steps: int | None, name: str) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(values, dtype=np.float64))
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a scalar or a 1-D sequence, got shape {arr.shape}")
    if steps is None:
        return arr
    if arr.size == 1:
        return np.full(steps, arr[0])
    if arr.size != steps:
        raise ValueError(f"{name} has {arr.size} entries but steps={steps}")
    return arr


def advanced_composition(eps_per_step: float | Sequence[float], delta_per_step: float | Sequence[float],
                         steps: int | None, delta_prime: float) -> tuple[float, float]:
    """Advanced composition (Dwork & Roth 2014, Thm 3.20; heterogeneous form as Lowy & Razaviyayn write it).

    ``steps`` adaptive (eps_r, delta_r)-DP mechanisms are (eps, delta)-DP with
    ``eps = sqrt(2 ln(1/delta') sum_r eps_r^2) + sum_r eps_r (e^{eps_r} - 1)`` and
    ``delta = sum_r delta_r + delta'``; for equal steps
    ``eps = sqrt(2 k ln(1/delta')) eps_0 + k eps_0 (e^{eps_0} - 1)``.

    Args:
      eps_per_step: scalar (broadcast to ``steps``) or one epsilon per step (> 0, nats).
      delta_per_step: scalar or one delta per step, in [0, 1).
      steps: number of steps k >= 0 (``None``: the length of the per-step sequences).
      delta_prime: the slack delta' in (0, 1).
    Returns:
      ``(epsilon, delta)`` of the composition.

    Example:
      >>> eps, delta = advanced_composition(0.1, 1e-6, steps=100, delta_prime=1e-5)
      >>> round(eps, 4), delta           # sqrt(2 ln(1e5) 100 * 0.01) + 100 * 0.1 (e^0.1 - 1); 100 * 1e-6 + 1e-5
      (5.8502, 0.00011)
    """
    if steps is not None:
        steps = checks.non_negative_int("steps", steps)
    delta_prime = checks.delta("delta_prime", delta_prime, scalar=True)
    eps = _per_step(eps_per_step, steps, "eps_per_step")
    dlt = _per_step(delta_per_step, steps if steps is not None else eps.size, "delta_per_step")
    if steps is None and dlt.size != eps.size:
        raise ValueError(f"eps_per_step has {eps.size} entries but delta_per_step has {dlt.size}")
    for e in eps:
        checks.epsilon("eps_per_step", float(e))
    for d in dlt:
        checks.delta("delta_per_step", float(d), allow_zero=True, scalar=True)
    total_eps = math.sqrt(2.0 * math.log(1.0 / delta_prime) * float(np.sum(eps ** 2))) + float(
        np.sum(eps * np.expm1(eps)))
    return total_eps, float(np.sum(dlt)) + delta_prime


def advanced_composition_per_step(target_eps: float, target_delta: float, steps: int) -> tuple[float, float]:
    """The per-round budget Lowy & Razaviyayn (Thm 2.1 / D.1 proof) give advanced composition:
    ``eps~ = eps0 / (2 sqrt(2 R ln(2/delta0)))`` and ``delta~ = delta0 / (2R)``.

    With ``delta' = delta0/2``, R rounds of (eps~, delta~)-DP compose to (<= eps0, delta0)-DP by
    :func:`advanced_composition`. Needs ``eps0 <= 2 ln(2/delta0)`` (the paper's assumption) and
    ``eps~ <= 1``, else ``ValueError``. The paper states only the first; its proof also bounds
    ``R eps~ (e^{eps~} - 1) <= 2 R eps~^2``, which needs ``eps~ <= 1`` (it fails e.g. for R = 1,
    eps0 = 2 ln(2/delta0)). In the paper's regime eps~ <= eps' <= 1 holds anyway.

    Example:
      >>> eps_step, delta_step = advanced_composition_per_step(1.0, 1e-5, steps=100)
      >>> round(eps_step, 6), round(delta_step, 12)
      (0.01012, 5e-08)
      >>> round(advanced_composition(eps_step, delta_step, steps=100, delta_prime=0.5e-5)[0], 4)   # <= 1.0
      0.5103
    """
    target_eps = checks.epsilon("target_eps", target_eps)
    target_delta = checks.delta("target_delta", target_delta, scalar=True)
    steps = checks.positive_int("steps", steps)
    limit = 2.0 * math.log(2.0 / target_delta)
    if target_eps > limit:
        raise ValueError(f"the per-step split needs target_eps <= 2 ln(2/target_delta) = {limit:g}, "
                         f"got {target_eps!r}")
    eps_step = target_eps / (2.0 * math.sqrt(2.0 * steps * math.log(2.0 / target_delta)))
    if eps_step > 1.0:
        raise ValueError(f"the per-step split gives eps~ = {eps_step:g} > 1, where advanced composition no "
                         f"longer yields target_eps={target_eps!r}; use more steps or a smaller target")
    return eps_step, target_delta / (2.0 * steps)


def amplify_with_replacement_ullman(epsilon: float, sample_size: int, dataset_size: int) -> float:
    """Amplification by subsampling with replacement (Ullman 2017, CS7880 HW1; as used by Lowy & Razaviyayn,
    Thm D.1): an (eps, delta)-DP mechanism run on ``sample_size`` = K records drawn uniformly *with
    replacement* from ``dataset_size`` = n is ``(2 eps K / n, delta)``-DP. Returns ``2 eps K / n`` (delta is
    unchanged).

    Valid for ``eps <= 1`` (the input epsilon, the paper's ``eps' <= 1`` condition), else ``ValueError``.

    Example:
      >>> amplify_with_replacement_ullman(1.0, sample_size=10, dataset_size=1000)   # 2 * 1.0 * 10 / 1000
      0.02
    """
    epsilon = checks.epsilon("epsilon", epsilon)
    k = checks.positive_int("sample_size", sample_size)
    n = checks.positive_int("dataset_size", dataset_size)
    if epsilon > 1.0:
        raise ValueError(f"Ullman's amplification by sampling with replacement needs epsilon <= 1, "
                         f"got {epsilon!r}")
    return 2.0 * epsilon * k / n


def amplify_poisson(epsilon: float, delta: float, sampling_rate: float) -> tuple[float, float]:
    """Amplification by Poisson subsampling (Li, Qardaji & Su 2012; Balle, Barthe & Gaboardi 2018, Thm 8;
    add/remove-one neighbours): ``(log(1 + q (e^eps - 1)), q delta)``.

    Example:
      >>> eps, delta = amplify_poisson(1.0, 1e-5, sampling_rate=0.01)
      >>> round(eps, 6), round(delta, 12)   # log(1 + 0.01 (e - 1)), 0.01 delta
      (0.017037, 1e-07)
    """
    epsilon = checks.epsilon("epsilon", epsilon)
    delta = checks.delta("delta", delta, allow_zero=True, scalar=True)
    q = checks.sampling_rate("sampling_rate", sampling_rate)
    return math.log1p(q * math.expm1(epsilon)), q * delta


def amplify_without_replacement(epsilon: float, delta: float, sample_size: int,
                                dataset_size: int) -> tuple[float, float]:
    """Amplification by sampling ``m`` of ``n`` records uniformly without replacement (Balle, Barthe &
    Gaboardi 2018, Thm 9; replace-one neighbours): ``(log(1 + (m/n)(e^eps - 1)), (m/n) delta)``.

    Example:
      >>> eps, delta = amplify_without_replacement(1.0, 1e-5, sample_size=10, dataset_size=1000)
      >>> round(eps, 6), round(delta, 12)   # the Poisson form at m / n = 0.01, under replace-one
      (0.017037, 1e-07)
    """
    epsilon = checks.epsilon("epsilon", epsilon)
    delta = checks.delta("delta", delta, allow_zero=True, scalar=True)
    m = checks.positive_int("sample_size", sample_size)
    n = checks.positive_int("dataset_size", dataset_size)
    if m > n:
        raise ValueError(f"sample_size must be <= dataset_size, got {m} > {n}")
    q = m / n
    return math.log1p(q * math.expm1(epsilon)), q * delta


def parallel_composition(epsilons: float | Sequence[float],
                         deltas: float | Sequence[float] = 0.0) -> tuple[float, float]:
    """Parallel composition (McSherry 2009): mechanisms applied to *disjoint* parts of the data are jointly
    ``(max eps_i, max delta_i)``-DP (e.g. one pass over disjoint minibatches is as private as one round).

    Example:
      >>> parallel_composition([0.5, 1.0, 0.8], [1e-6, 1e-5, 0.0])   # disjoint batches: the worst one
      (1.0, 1e-05)
    """
    eps = np.atleast_1d(np.asarray(epsilons, dtype=np.float64))
    dlt = np.atleast_1d(np.asarray(deltas, dtype=np.float64))
    if eps.size == 0:
        raise ValueError("epsilons must not be empty")
    for e in eps:
        checks.epsilon("epsilons", float(e), allow_zero=True)
    for d in dlt:
        checks.delta("deltas", float(d), allow_zero=True, scalar=True)
    return float(eps.max()), float(dlt.max())
