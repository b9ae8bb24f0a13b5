"""User-level privacy from record-level privacy: group privacy, and the accountant-based alternative.

A user who holds ``k`` records changes ``k`` records at once. Two ways to state user-level DP:

* **Group privacy**: an (eps, delta)-DP mechanism is ``(k eps, delta (1 + e^eps + ... + e^{(k-1) eps}))``-
  indistinguishable on datasets that differ in ``k`` records (chaining the definition; Huang et al.'s Lemma
  3.6 prints the looser ``k e^{k eps} delta``). :func:`group_privacy` is that map, in either form;
  :func:`record_level_target` inverts it (Huang et al. §3.1.2: run record-level DP at ``eps' = eps / k`` and
  ``delta' = delta / (k e^eps)`` in the paper's form, its ``O(delta r / m)`` made exact).
* **Per-user sampling and clipping**: make the user the unit (:func:`jaxfl.data.users.group_by_user`,
  :func:`jaxfl.data.users.per_user_loss`), so each sampled/clipped "example" is one user and the
  accountant's events (``PoissonSampledDpEvent`` over users) state user-level DP directly.
  :func:`user_level_noise` calibrates both for one training run, side by side.

Which is tighter: per-user sampling, by a wide margin at every setting we computed (the
``test_acct_group`` tests and docs/joint-dp.md give numbers): group privacy divides the target epsilon by
``k`` *and* shrinks delta by ``k e^eps``, while the per-user run pays only for its fewer, larger units.
For the plain (unsampled) Gaussian both are exact in RDP: sensitivity ``k C`` is noise multiplier
``z / k`` (:func:`grouped_gaussian`).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import dp_accounting

from jaxfl import checks
from jaxfl.accounting.calibrate import calibrate


BOUNDS = ("chain", "paper")


def _chain_sum(epsilon: float, k: int) -> float:
    """``sum_{i<k} e^{i eps}``: the delta multiplier of chaining (eps, delta)-DP over ``k`` neighbours."""
    return float(k) if epsilon == 0 else math.expm1(k * epsilon) / math.expm1(epsilon)


def group_privacy(epsilon: float, delta: float, group_size: int, bound: str = "chain") -> tuple[float, float]:
    """What an (eps, delta)-DP mechanism guarantees for datasets differing in ``k = group_size`` records:
    ``(k eps, delta')`` with

    * ``bound="chain"`` (default): ``delta' = delta (1 + e^eps + ... + e^{(k-1) eps})``, chaining the
      definition over the ``k`` intermediate neighbours (exactly ``(eps, delta)`` at ``k = 1``; at most
      ``k e^{(k-1) eps} delta``, the Dwork & Roth form);
    * ``bound="paper"``: Huang et al.'s Lemma 3.6 as printed, ``delta' = k e^{k eps} delta`` (looser: not the
      identity at ``k = 1``).

    Example:
      >>> epsilon, delta = group_privacy(1.0, 1e-5, 2)            # delta (1 + e)
      >>> epsilon, round(delta, 10)
      (2.0, 3.71828e-05)
      >>> group_privacy(1.0, 1e-5, 1) == group_privacy(1.0, 1e-5, 1, bound="chain") == (1.0, 1e-5)
      True
    """
    epsilon = checks.epsilon("epsilon", epsilon, allow_zero=True)
    delta = checks.delta("delta", delta, scalar=True, allow_zero=True)
    k = checks.positive_int("group_size", group_size)
    checks.one_of("bound", bound, BOUNDS)
    factor = _chain_sum(epsilon, k) if bound == "chain" else k * math.exp(k * epsilon)
    return k * epsilon, factor * delta


def record_level_target(epsilon: float, delta: float, records_per_user: int, bound: str = "chain"
                        ) -> tuple[float, float]:
    """The record-level ``(eps / k, delta')`` whose :func:`group_privacy` (same ``bound``) at
    ``k = records_per_user`` is exactly the user-level ``(eps, delta)``: ``delta' = delta / sum_{i<k}
    e^{i eps / k}`` (``"chain"``), or Huang et al. §3.1.2's ``delta' = delta / (k e^eps)`` (``"paper"``: its
    ``O(delta r / m)`` made exact).

    Example (user-level (2, 1e-5) for users of 4 records, reached by group privacy from record level):
      >>> epsilon, delta = record_level_target(2.0, 1e-5, 4)
      >>> epsilon, group_privacy(epsilon, delta, 4)
      (0.5, (2.0, 1e-05))
    """
    epsilon = checks.epsilon("epsilon", epsilon)
    delta = checks.delta("delta", delta, scalar=True)
    k = checks.positive_int("records_per_user", records_per_user)
    checks.one_of("bound", bound, BOUNDS)
    factor = _chain_sum(epsilon / k, k) if bound == "chain" else k * math.exp(epsilon)
    return epsilon / k, delta / factor


def grouped_gaussian(noise_multiplier: float, group_size: int) -> dp_accounting.GaussianDpEvent:
    """The Gaussian event of a clipped sum when one neighbour changes ``group_size`` summands: sensitivity
    ``k C`` at noise ``z C`` is the event ``GaussianDpEvent(z / k)``. Exact (no conversion loss), but only
    for the unsampled Gaussian; sampled mechanisms need per-user sampling (:func:`user_level_noise`).

    Example:
      >>> grouped_gaussian(2.0, 4)
      GaussianDpEvent(noise_multiplier=0.5)
    """
    z = checks.positive_float("noise_multiplier", noise_multiplier)
    return dp_accounting.GaussianDpEvent(z / checks.positive_int("group_size", group_size))


class UserLevelNoise(NamedTuple):
    """Noise multipliers of one DP-SGD run made (eps, delta) user-level DP in two ways.

    Attributes:
      group: the record-level run calibrated to ``record_level`` (:func:`record_level_target`); noise std
        ``group * C`` on a sum of clipped *record* gradients, ``k`` of them per sampled user.
      per_user: the per-user run calibrated to (eps, delta) itself; noise std ``per_user * C`` on a sum of
        clipped *user* gradients (one per sampled user, each a mean of ``k`` records).
      rate: the Poisson sampling rate of both runs (of records in one, of users in the other).
      record_level: the ``(eps', delta')`` of the group-privacy run.
      records_per_user: ``k``. A user's signal is up to ``k C`` in the record run and ``C`` in the per-user
        run, so compare ``group / k`` (noise per unit of signal) with ``per_user``.

    Example: :func:`user_level_noise`.
    """

    group: float
    per_user: float
    rate: float
    record_level: tuple
    records_per_user: int


def user_level_noise(epsilon: float, delta: float, *, records_per_user: int, sampling_rate: float, steps: int,
                     accountant: str = "rdp", bound: str = "chain") -> UserLevelNoise:
    """Calibrates a DP-SGD run of ``steps`` Poisson-sampled steps to user-level (eps, delta) for users of
    ``k = records_per_user`` records: by group privacy from record level (records sampled at
    ``sampling_rate``) and by per-user sampling (users sampled at the same rate, one clipped gradient
    each). ``bound``: the group-privacy form (:func:`group_privacy`).

    Example (1,000 steps at rate 0.01, users of 4 records, user-level (2, 1e-5), by RDP):
      >>> noise = user_level_noise(2.0, 1e-5, records_per_user=4, sampling_rate=0.01, steps=1000)
      >>> round(noise.group, 2), round(noise.per_user, 2), noise.record_level[0]
      (2.9, 1.02, 0.5)
      >>> noise.group / noise.records_per_user < noise.per_user     # per unit of a user's signal, groups win here
      True
    """
    k = checks.positive_int("records_per_user", records_per_user)
    rate = checks.sampling_rate("sampling_rate", sampling_rate)
    steps = checks.positive_int("steps", steps)
    eps_r, delta_r = record_level_target(epsilon, delta, k, bound)

    def event(z):
        return dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(rate, dp_accounting.GaussianDpEvent(z)), steps)

    return UserLevelNoise(group=calibrate(event, eps_r, delta_r, accountant=accountant),
                          per_user=calibrate(event, epsilon, delta, accountant=accountant),
                          rate=rate, record_level=(eps_r, delta_r), records_per_user=k)
