"""Central (shuffled) guarantees of Lowy & Razaviyayn's shuffle-model algorithms, as an accountant.

Two events describe what the *shuffled* transcript of one round reveals about one record anywhere in
the union of the silos (central DP, replace-one neighbours; both are defined, with their assumptions, in
:mod:`jaxfl.accounting.events` and re-exported here):

* :class:`PvecDpEvent` -- one run of the binomial vector-summation protocol P_vec over ``num_users``
  reports of dimension ``dim`` (Alg. 6). Its ``(epsilon, delta)`` comes from
  :func:`jaxfl.privacy.shuffle.shuffled_epsilon`.
* :class:`ShuffledGaussianDpEvent` -- Shuffled Noisy MB-SGD (Thm 5.1): each of ``reports`` available
  silos sends one record's clipped gradient plus ``N(0, (z C)^2)``; the server sees the shuffled
  reports. Chain (as the paper's proof, with jaxfl's tools): the Gaussian local randomizer (analytic
  Gaussian, sensitivity ``2C``) is ``(eps0, delta0)``-DP; shuffling ``reports`` of them gives
  Feldman-McMillan-Talwar's amplified ``(eps_s, delta_s)`` (:func:`jaxfl.privacy.shuffle.amplify_by_shuffling`);
  a given record is in the round with probability ``q = reports / (num_silos * records_per_silo)``
  (its silo available, then the one record drawn), so amplification by subsampling (Balle, Barthe,
  Gaboardi 2018) gives ``(log(1 + q (e^eps_s - 1)), q delta_s)``.

:class:`ShuffleAccountant` (registry name ``"shuffle"``) composes ``m`` such steps: with one step it
answers directly; with more, each step gets ``delta / (2m)`` and advanced composition
(Dwork-Roth 3.20) the remaining ``delta / 2``. Parallel composition (one pass over disjoint batches)
is the ledger's business (``composition="parallel"``), not the accountant's.
"""
from __future__ import annotations

import math

from jaxfl.accounting import closed_forms
from jaxfl.accounting.accountants import NeighboringRelation
from jaxfl.accounting.events import PvecDpEvent, ShuffledGaussianDpEvent, clipped_sum_sensitivity
from jaxfl.accounting.sgd_noise import LowyAccountant, flatten_steps
from jaxfl.privacy import shuffle

__all__ = ["PvecDpEvent", "ShuffleAccountant", "ShuffledGaussianDpEvent", "shuffled_gaussian_epsilon"]


def shuffled_gaussian_epsilon(event: ShuffledGaussianDpEvent, delta: float) -> float:
    """``epsilon`` of one :class:`ShuffledGaussianDpEvent` at ``delta`` (``inf`` where nothing is certified).

    ``delta`` is split: half for the shuffling theorem's own ``delta``, half (after the subsampling
    factor ``q``) for the local randomizers' ``n delta0`` term, with ``delta0`` shrunk until the total fits.

    Example (2,000 reports among 4,000 silos of 500 records; more noise, less epsilon; too few reports certify nothing):
      >>> from jaxfl.accounting.events import ShuffledGaussianDpEvent
      >>> eps = [shuffled_gaussian_epsilon(ShuffledGaussianDpEvent(z, m, 4000, 500), 1e-7)
      ...        for z, m in ((8.0, 2000), (16.0, 2000), (8.0, 20))]
      >>> eps[1] < eps[0] < 1e-3, eps[2]
      (True, inf)
    """
    q = event.reports / (event.num_silos * event.records_per_silo)
    target = delta / q  # the shuffled round may spend delta / q before subsampling
    if target >= 1.0:
        target = 1.0 - 1e-12
    delta_shuffle = target / 2
    delta0 = target / (4.0 * event.reports)
    for _ in range(60):
        eps0 = closed_forms.analytic_gaussian_epsilon(
            event.noise_multiplier, delta0, sensitivity=clipped_sum_sensitivity(NeighboringRelation.REPLACE_ONE))
        eps_s, delta_total = shuffle.amplify_by_shuffling(eps0, delta0, event.reports, delta_shuffle)
        if math.isinf(eps_s):
            return math.inf
        if delta_total <= target:
            return math.log1p(q * math.expm1(eps_s))
        delta0 /= 4.0
    return math.inf


def _step_epsilon(event, delta: float) -> float:
    if isinstance(event, PvecDpEvent):
        params = shuffle.ShuffleParams(event.granularity, event.trials, event.probability)
        return shuffle.shuffled_epsilon(params, event.num_users, event.dim, delta)
    return shuffled_gaussian_epsilon(event, delta)


def _flatten(event, count):
    return flatten_steps(event, count, lambda e: [e] if isinstance(e, (PvecDpEvent, ShuffledGaussianDpEvent)) else None)


class ShuffleAccountant(LowyAccountant):
    """Composes shuffle-model rounds (:class:`PvecDpEvent`, :class:`ShuffledGaussianDpEvent`); central
    DP, replace-one neighbours. See the module docstring for the calculus.

    Example (one P_vec sum of 1,000 users in 10 dimensions, calibrated to epsilon 1):
      >>> from jaxfl.accounting.events import PvecDpEvent
      >>> accountant = ShuffleAccountant().compose(PvecDpEvent(64, 5909, 0.25, 1000, 10))
      >>> accountant.get_epsilon(1e-5) <= 1.0
      True
    """

    name = "shuffle"
    relations = frozenset({NeighboringRelation.REPLACE_ONE})
    relation_hint = "the shuffle-model analyses (P_vec, FMT's amplification) are stated for replace-one"

    def _supports(self, event):
        return _flatten(event, 1) is not None

    def _compose(self, event, count):
        self._steps.extend(_flatten(event, count))

    def _epsilon(self, delta):
        m = len(self._steps)
        if m == 0:
            return 0.0
        if m == 1:
            return _step_epsilon(self._steps[0], delta)
        delta_step = delta / (2 * m)
        per_step = [_step_epsilon(e, delta_step) for e in self._steps]
        if any(math.isinf(e) for e in per_step):
            return math.inf
        eps, _ = closed_forms.advanced_composition(per_step, [delta_step] * m, m, delta / 2)
        return eps

