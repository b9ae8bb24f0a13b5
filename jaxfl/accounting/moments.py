"""Abadi et al.'s moments accountant for Gaussian rounds on samples drawn with replacement, with van Dijk et al.'s
bound on a round's log moment (their Lemma D.1).

The mechanism: in round ``i`` a client draws ``s_i`` of its ``N`` records (uniformly, with replacement), sums
their gradients clipped to ``C`` and adds ``N(0, C^2 sigma_i^2 I)`` to the sum once; the analysis takes sampling
ratio ``q_i = s_i / N``.

* :func:`log_moment_bound`: Lemma D.1's bound on the round's log moment ``alpha_i(lambda)`` and its validity
  conditions; :class:`MomentsAccountant` (registered as ``"vandijk-moments"``) and the functions
  :func:`moments_delta` / :func:`moments_epsilon` compose it over rounds and take the tail bound
  ``delta = min_lambda exp(sum_i alpha_i(lambda) - lambda eps)`` over integer ``lambda`` directly (the theorems'
  chains of inequalities lose integrality; this is the exact checker);
* :func:`tight_epsilon`: the *tight* epsilon of the same sampled Gaussian rounds (dp_accounting's RDP or PLD
  accountant over one ``PoissonSampledDpEvent(q_i, GaussianDpEvent(sigma_i))`` per round: Poisson sampling, a
  different analysis from the paper's, labelled so wherever it is reported).

The bound assumes (as the paper argues) that one record moves the round's sum by at most ``C`` per draw,
although the paper's client takes its ``s_i`` gradients at points its own earlier draws of the round moved;
:mod:`jaxfl.algorithms.async_dp` states what jaxfl certifies. The closed-form theorems built on this bound, for
increasing sample sizes, are in :mod:`jaxfl.accounting.increasing_samples`.

Units: epsilon in nats, delta a probability, sigma the noise multiplier (noise std / C), sample sizes in
records per client and round.

References:
  M. van Dijk, N. V. Nguyen, T. N. Nguyen, L. M. Nguyen, Q. Tran-Dinh and P. H. Nguyen. "Asynchronous
  Federated Learning with Reduced Number of Rounds and with Differential Privacy from Less Aggregated Gaussian
  Noise." arXiv preprint, 2020.
"""
from __future__ import annotations

import collections
import math

import numpy as np
from dp_accounting import GaussianDpEvent, SampledWithReplacementDpEvent

from jaxfl import checks
from jaxfl.accounting.accountants import NeighboringRelation, _DpAccountingAccountant
from jaxfl.accounting.sgd_noise import _with_replacement_steps


def _round_sizes(sample_sizes, records) -> tuple[np.ndarray, int]:
    n = checks.positive_int("records", records)
    s = np.asarray(sample_sizes, dtype=np.float64).reshape(-1)
    if s.size == 0 or not np.all(np.isfinite(s)) or np.any(s <= 0) or np.any(s >= n):
        raise ValueError(f"sample_sizes must be a non-empty sequence of sizes in (0, records={n}), "
                         f"got {sample_sizes!r}")
    return s, n


# ------------------------------------------------------------------------------------------------
# Lemma D.1 and the moments accountant


def r_factor(r0: float, sigma: float, u0: float | None = None, u1: float | None = None) -> tuple[float, float, float]:
    """``(r, u_0, u_1)`` of eq. (14): ``r = r_0 2^3 (1/(1-u_0) + e^3 / (sigma^3 (1-u_1))) exp(3 / sigma^2)`` with
    ``u_0 = 2 sqrt(r_0 sigma) / (sigma - r_0)`` and ``u_1 = u_0 e / sigma`` (their values at ``lambda =
    sigma^2``) unless given. ValueError when ``u_0`` or ``u_1`` is not below 1 (the bound does not apply).

    Example:
      >>> import math
      >>> [round(v, 4) for v in r_factor(1 / math.e, 8.0)]
      [5.746, 0.4496, 0.1528]
    """
    r0 = checks.positive_float("r0", r0)
    sigma = checks.positive_float("sigma", sigma)
    if r0 >= sigma:
        raise ValueError(f"r0 must be below sigma={sigma!r}, got {r0!r}")
    u0 = 2.0 * math.sqrt(r0 * sigma) / (sigma - r0) if u0 is None else u0
    u1 = 2.0 * math.e * math.sqrt(r0 * sigma) / ((sigma - r0) * sigma) if u1 is None else u1
    if not (u0 < 1.0 and u1 < 1.0):
        raise ValueError(f"u_0 = {u0:.4g} and u_1 = {u1:.4g} must be below 1 for r0={r0!r}, sigma={sigma!r} "
                         "(Lemma D.1 does not apply: lower r0 or raise sigma)")
    r = r0 * 8.0 * (1.0 / (1.0 - u0) + math.e ** 3 / (sigma ** 3 * (1.0 - u1))) * math.exp(3.0 / sigma ** 2)
    return r, u0, u1


def log_moment_bound(lam: int, sample_size: float, records: int, sigma: float, r0: float | None = None) -> float:
    """Lemma D.1: the bound on round ``i``'s log moment ``alpha_i(lambda)`` for ``s = sample_size`` draws of
    ``N = records`` at noise multiplier ``sigma``,
    ``s^2 l (l+1) / (N (N-s) sigma^2) + (r / r_0) s^3 l^2 (l+1) / (N (N-s)^2 sigma^3)`` with ``u_0 = U_0(l)``,
    ``u_1 = U_1(l)``; ``inf`` where the lemma does not apply (``lambda > sigma^2 ln(N / (s sigma))``,
    ``U_0`` or ``U_1 >= 1``). ``r0``: the lemma's constant with ``s / N <= r_0 / sigma < 1 / sigma``;
    default ``sigma s / N``, the smallest (the bound increases with ``r_0``).

    Example (one round of 16 draws from 10,000 records at sigma 8, lambda 8):
      >>> f"{log_moment_bound(8, 16, 10_000, 8.0):.3g}"
      '2.93e-06'
    """
    lam = checks.positive_int("lam", lam)
    sigma = checks.positive_float("sigma", sigma)
    (s,), n = _round_sizes([sample_size], records)
    r0 = sigma * s / n if r0 is None else checks.positive_float("r0", r0)
    if s / n > r0 / sigma * (1 + 1e-12) or r0 >= 1.0:
        raise ValueError(f"r0 must satisfy s/N = {s / n:.6g} <= r0/sigma and r0 < 1, got r0={r0!r}")
    if lam > sigma ** 2 * math.log(n / (s * sigma)):
        return math.inf
    root = math.sqrt(lam * r0 / sigma)
    u0, u1 = 2.0 * root / (sigma - r0), 2.0 * math.e * root / ((sigma - r0) * sigma)
    if u0 >= 1.0 or u1 >= 1.0:
        return math.inf
    r, _, _ = r_factor(r0, sigma, u0, u1)
    return (s ** 2 * lam * (lam + 1) / (n * (n - s) * sigma ** 2)
            + (r / r0) * s ** 3 * lam ** 2 * (lam + 1) / (n * (n - s) ** 2 * sigma ** 3))


class MomentsAccountant(_DpAccountingAccountant):
    """The paper's moments accountant as an accountant object: each composed
    ``SampledWithReplacementDpEvent(N, s, GaussianDpEvent(sigma))`` (a round: ``s`` draws with replacement
    from ``N`` records, noise ``N(0, (sigma C)^2)`` on the clipped sum) adds Lemma D.1's bound on its log
    moment ``alpha(lambda)`` (at its smallest ``r_0 = sigma s / N``) for every integer ``lambda <=
    max_lambda``; ``delta(eps) = min_lambda exp(sum alpha(lambda) - lambda eps)`` and ``epsilon(delta) =
    min_lambda (sum alpha(lambda) + ln(1/delta)) / lambda``, the tail bound taken directly over integer
    ``lambda`` (digest §11.18).

    This is the paper's analysis, reproduced. It holds for rounds whose ``s`` gradients are all taken at one
    point (one record then moves the round's sum by at most ``C`` per draw); the paper's own client does
    not do that (:mod:`jaxfl.algorithms.async_dp`). Neighbours: dp_accounting's convention for sampling
    with replacement, one record replaced. Events Lemma D.1 does not cover (no sampling, ``s >= N``, any
    other event) are refused; a ``lambda`` where the lemma does not apply contributes ``inf``.

    Example (100 rounds of 16 draws with replacement from 10,000 records at sigma 8):
      >>> import dp_accounting
      >>> accountant = MomentsAccountant()
      >>> round_event = dp_accounting.SampledWithReplacementDpEvent(10_000, 16, dp_accounting.GaussianDpEvent(8.0))
      >>> round(accountant.compose(round_event, 100).get_epsilon(1e-5), 4)
      0.0432
    """

    name = "vandijk-moments"
    relations = frozenset({NeighboringRelation.REPLACE_ONE})
    relation_hint = "sampling with replacement, dp_accounting's convention (the paper's Lemma D.1 follows Abadi et al.)"

    def __init__(self, neighboring_relation=NeighboringRelation.REPLACE_ONE, max_lambda: int = 1000):
        super().__init__(neighboring_relation)
        self._lambdas = np.arange(1, checks.positive_int("max_lambda", max_lambda) + 1)
        self._total = np.zeros(self._lambdas.shape)
        self._bounds: dict = {}     # (N, s, sigma) -> alpha over lambdas, shared by copies

    def _config(self):
        return {"neighboring_relation": self._relation, "max_lambda": int(self._lambdas[-1])}

    def _shared(self):
        return [self._bounds]

    def _supports(self, event):
        steps = _with_replacement_steps(event, 1)
        return steps is not None and all(n is not None and 0 < k < n for n, k, _ in steps)

    def _round(self, n, k, z) -> np.ndarray:
        key = (int(n), float(k), float(z))
        if key not in self._bounds:
            self._bounds[key] = (np.full(self._lambdas.shape, np.inf) if z <= 0 else
                                 np.array([log_moment_bound(int(l), k, n, z) for l in self._lambdas]))
        return self._bounds[key]

    def _compose(self, event, count):
        for (n, k, z), times in collections.Counter(_with_replacement_steps(event, 1)).items():
            self._total = self._total + count * times * self._round(n, k, z)

    def _epsilon(self, delta):
        if not self._events:
            return 0.0
        return float(np.min((self._total + math.log(1.0 / delta)) / self._lambdas))

    def _delta(self, epsilon):
        if not self._events:
            return 0.0
        return float(min(1.0, np.min(np.exp(self._total - self._lambdas * epsilon))))


def _moments(sample_sizes, records, sigmas, max_lambda: int) -> MomentsAccountant:
    """A :class:`MomentsAccountant` over one round per sample size (``sigmas``: one, or one per round)."""
    s, n = _round_sizes(sample_sizes, records)
    sig = np.broadcast_to(np.asarray(sigmas, dtype=np.float64), s.shape)
    acc = MomentsAccountant(max_lambda=max_lambda)
    for (si, zi), count in zip(*np.unique(np.stack([s, sig], axis=1), axis=0, return_counts=True)):
        acc.compose(SampledWithReplacementDpEvent(n, float(si), GaussianDpEvent(float(zi))), int(count))
    return acc


def moments_delta(sample_sizes, records: int, sigmas, epsilon: float, max_lambda: int = 1000) -> float:
    """The paper's accountant, exactly: ``min over integer lambda of exp(sum_i alpha_i(lambda) - lambda eps)``
    over the rounds' sample sizes (and per-round or one ``sigmas``), with Lemma D.1's bound per round at its
    smallest ``r_0`` (:class:`MomentsAccountant`). ``1.0`` when no ``lambda <= max_lambda`` is valid for every
    round.

    Example (van Dijk et al.'s Example 3 schedule at sigma 8 and epsilon 1):
      >>> import math
      >>> sizes = [16 + math.ceil(1.3216 * i) for i in range(195)]
      >>> moments_delta(sizes, 10_000, 8.0, 1.0) < 1e-20
      True
    """
    eps = checks.positive_float("epsilon", epsilon)
    return _moments(sample_sizes, records, sigmas, max_lambda).delta(eps)


def moments_epsilon(sample_sizes, records: int, sigmas, delta: float, max_lambda: int = 1000) -> float:
    """The epsilon of :func:`moments_delta` at ``delta``: ``min_lambda (sum_i alpha_i(lambda) + ln(1/delta)) /
    lambda`` (``inf`` when no ``lambda`` is valid).

    Example:
      >>> import math
      >>> sizes = [16 + math.ceil(1.3216 * i) for i in range(195)]
      >>> round(moments_epsilon(sizes, 10_000, 8.0, 1e-5), 3)
      0.335
    """
    return _moments(sample_sizes, records, sigmas, max_lambda).epsilon(checks.probability("delta", delta))


def tight_epsilon(sample_sizes, records: int, sigmas, delta: float, accountant: str = "rdp") -> float:
    """The tight epsilon of the same rounds under *Poisson* sampling at ``q_i = s_i / N``: one
    ``PoissonSampledDpEvent(q_i, GaussianDpEvent(sigma_i))`` per round, composed by dp_accounting's RDP
    (``accountant="rdp"``) or PLD (``"pld"``) accountant, add/remove-one neighbours. Not the paper's analysis
    (its rounds sample with replacement; digest §8.9), reported beside it.

    Example (the same rounds, Poisson-sampled, by RDP: tighter than the moments bound's 0.335):
      >>> import math
      >>> sizes = [16 + math.ceil(1.3216 * i) for i in range(195)]
      >>> round(tight_epsilon(sizes, 10_000, 8.0, 1e-5), 3)
      0.099
    """
    from jaxfl.accounting.accountants import make_accountant
    from dp_accounting import PoissonSampledDpEvent

    s, n = _round_sizes(sample_sizes, records)
    sig = np.broadcast_to(np.asarray(sigmas, dtype=np.float64), s.shape)
    acc = make_accountant(checks.one_of("accountant", accountant, ("rdp", "pld")))
    for (si, zi), count in zip(*np.unique(np.stack([s, sig], axis=1), axis=0, return_counts=True)):
        acc.compose(PoissonSampledDpEvent(float(si / n), GaussianDpEvent(float(zi))), int(count))
    return float(acc.epsilon(checks.probability("delta", delta)))
