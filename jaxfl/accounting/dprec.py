"""Privacy accounting of DP-REC (Triastcyn, Reisser & Louizos, "DP-REC: Private & Communication-Efficient
Federated Learning", 2021; Alg. 7, §4).

DP-REC adds no noise: a client clips its update to ``C = c sigma`` and sends the index of one of
``K = 2^b`` samples of the shared prior ``p = N(0, sigma^2 I)``, drawn with weights ``q/p`` where
``q = N(update, sigma^2 I)``. Only ``c = C / sigma`` (the *clip multiplier*) matters for privacy.

Theorem 1 (per step, Rényi order ``lambda + 1``, ``lambda`` a positive integer):

* the step's privacy loss is bounded by ``k_hat + m_hat`` with ``k_hat = D_{lambda+1}(mix || p)`` and
  ``m_hat = D_{lambda+1}(p || mix)``, ``mix = (1 - r) p + r q`` the subsampled message distribution
  (``r = 1`` without subsampling). By Mironov et al. 2019 (eq. 59) ``m_hat <= k_hat``, so
  ``k_hat + m_hat <= 2 k_hat``: **a DP-REC step costs twice the RDP of the (Poisson-)subsampled Gaussian
  mechanism with noise multiplier ``1/c``** -- the bound the paper's published numbers use (§4.6 of the
  digest: the exact ``m_hat`` gives lower values that do not match the paper);
* the importance-sampling bias bound (Agapiou et al. 2017) adds ``12 e^{D_2(q||p)} / 2^b`` per step to
  delta, with ``D_2(q || p) = c^2`` (no subsampling in this term) and ``b`` the **total** index bits of
  the update over all its blocks (Theorem 3: blocks compose into one index of ``sum b_m`` bits).

Composition is additive in RDP and in the overhead. Conversion to ``(epsilon, delta)`` is the classic one
(Theorem 1 / Alg. 7)::

    epsilon(delta) = min_lambda [ R(lambda + 1) - log(delta - overhead) / lambda ]
    delta(epsilon) = overhead + min_lambda exp(lambda (R(lambda + 1) - epsilon))

with ``R`` the composed RDP and ``overhead = sum_steps 12 e^{c^2} / 2^b``; when ``delta <= overhead``
there is no valid guarantee and ``epsilon`` is ``inf`` (:meth:`DprecAccountant.infeasibility` says why).

Sampling: Alg. 7 draws the ``B`` clients of a round **with replacement** from ``N`` and accounts each of
the ``T B`` slots as one step at mixture weight ``r = 1/N``. A round is therefore
``SampledWithReplacementDpEvent(N, B, DprecDpEvent(c, b))`` (:func:`dprec_round_event`).

Neighbouring relation: **add/remove one client** (the central guarantee of the paper). For substitution
(replace one client) the paper's App. A.1 gives ``(2 epsilon, 2 delta)``; this module does not apply it.

The DP-FedAvg baseline (Gaussian events) goes through the same accountant and the same classic conversion,
as the paper's baseline numbers do. All Rényi divergences of the (sub)sampled Gaussian come from
``dp_accounting.rdp`` at integer orders, where it uses the exact binomial expansion (the paper's eq. 62).

Units: epsilon and RDP in nats, delta a probability, bits a count of bits.
"""
from __future__ import annotations

import functools
import math
import numbers
from typing import Any, Sequence

import dp_accounting
import numpy as np
from dp_accounting import rdp as _rdp

from jaxfl import checks
from jaxfl.accounting.accountants import DpEvent, NeighboringRelation, _DpAccountingAccountant
from jaxfl.accounting.events import DprecDpEvent, _bits, _clip_multiplier

#: Alg. 7's Rényi orders alpha = lambda + 1 for integer lambda in 1..299.
DPREC_ORDERS: tuple[int, ...] = tuple(range(2, 301))

#: The constant of the importance-sampling bias bound (eq. 4, Agapiou et al. 2017 §2.2).
BIAS_CONSTANT = 12.0


def _log_overhead_step(clip_multiplier: float, bits: int) -> float:
    """``log(12 e^{c^2} / 2^b)``: the log of one step's delta overhead."""
    return math.log(BIAS_CONSTANT) + clip_multiplier**2 - bits * math.log(2.0)


def _overhead(log_per_step: float, steps: int) -> float:
    if steps == 0:
        return 0.0
    log_total = log_per_step + math.log(steps)
    return math.inf if log_total > 700.0 else math.exp(log_total)


def _gaussian_rdp_uncached(sampling_rate: float, noise_multiplier: float, orders: Sequence[float]) -> np.ndarray:
    """RDP (nats) of one Poisson-subsampled Gaussian step at ``orders``, from ``dp_accounting``
    (``sampling_rate = 1``: the plain Gaussian). At integer orders dp_accounting sums the exact binomial
    expansion (the paper's eq. 62). float64[len(orders)]."""
    gauss = dp_accounting.GaussianDpEvent(noise_multiplier)
    event = gauss if sampling_rate == 1.0 else dp_accounting.PoissonSampledDpEvent(sampling_rate, gauss)
    acc = _rdp.RdpAccountant(orders=list(orders), neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE)
    acc.compose(event, 1)
    return np.asarray(acc.rdp, dtype=np.float64)


@functools.lru_cache(maxsize=512)
def _gaussian_rdp(sampling_rate: float, noise_multiplier: float, orders: tuple[float, ...]) -> np.ndarray:
    """:func:`_gaussian_rdp_uncached`, cached by value; read-only."""
    out = _gaussian_rdp_uncached(sampling_rate, noise_multiplier, orders)
    out.setflags(write=False)
    return out


# A plan is what a composed event contributes: {(sampling rate, noise multiplier, factor): steps} for the
# RDP (factor 2 for DP-REC steps, 1 for Gaussian steps) and [(log overhead per step, steps)] for delta.
_Plan = tuple[dict, list]


def _add(plan: _Plan, key: tuple, log_overhead: float | None, count: int) -> None:
    rdp, overhead = plan
    rdp[key] = rdp.get(key, 0) + count
    if log_overhead is not None:
        overhead.append((log_overhead, count))


def _plan(event: DpEvent, count: int, plan: _Plan) -> bool:
    """Adds ``count`` compositions of ``event`` to ``plan``; False if the event is not supported."""
    if isinstance(event, dp_accounting.NoOpDpEvent):
        return True
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return _plan(event.event, count * event.count, plan)
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return all(_plan(e, count, plan) for e in event.events)
    if isinstance(event, DprecDpEvent):
        _add(plan, (1.0, 1.0 / event.clip_multiplier, 2), _log_overhead_step(event.clip_multiplier, event.bits),
             count)
        return True
    if isinstance(event, dp_accounting.GaussianDpEvent):
        _add(plan, (1.0, float(event.noise_multiplier), 1), None, count)
        return True
    if isinstance(event, dp_accounting.PoissonSampledDpEvent):
        r = float(event.sampling_probability)
        if not 0.0 <= r <= 1.0:
            return False
        inner = event.event
        if isinstance(inner, DprecDpEvent):  # mixture weight r in the RDP; rho is not subsampled (Alg. 7)
            _add(plan, (r, 1.0 / inner.clip_multiplier, 2), _log_overhead_step(inner.clip_multiplier, inner.bits),
                 count)
            return True
        if isinstance(inner, dp_accounting.GaussianDpEvent):
            _add(plan, (r, float(inner.noise_multiplier), 1), None, count)
            return True
        return False
    if isinstance(event, dp_accounting.SampledWithReplacementDpEvent):
        inner = event.event
        n, b = event.source_dataset_size, event.sample_size
        if not isinstance(inner, DprecDpEvent) or not isinstance(n, numbers.Integral) or n < 1 \
                or not isinstance(b, numbers.Integral) or b < 0:
            return False
        # Alg. 7: B slots drawn with replacement from N clients = B steps at mixture weight r = 1/N.
        _add(plan, (1.0 / n, 1.0 / inner.clip_multiplier, 2), _log_overhead_step(inner.clip_multiplier, inner.bits),
             count * b)
        return True
    return False


def _orders(orders: Sequence[Any] | None) -> tuple[int, ...]:
    if orders is None:
        return DPREC_ORDERS
    values = np.asarray(orders, dtype=np.float64).ravel()
    if values.size == 0 or not np.all(np.isfinite(values)) or np.any(values < 2) \
            or np.any(values != np.round(values)):
        raise ValueError(f"orders must be a non-empty sequence of integers >= 2 (alpha = lambda + 1), "
                         f"got {orders!r}")
    return tuple(sorted({int(a) for a in values}))


class DprecAccountant(_DpAccountingAccountant):
    """DP-REC's accountant (Theorem 1 / Alg. 7), registry name ``"dprec"``. See the module docstring.

    Accepts :class:`DprecDpEvent` (one client, no amplification: the local guarantee),
    ``PoissonSampledDpEvent(r, DprecDpEvent)`` (one step at mixture weight ``r``),
    ``SampledWithReplacementDpEvent(N, B, DprecDpEvent)`` (one round: ``B`` steps at ``r = 1/N``),
    ``GaussianDpEvent(z)`` and ``PoissonSampledDpEvent(q, GaussianDpEvent(z))`` (the DP-FedAvg baseline),
    and ``SelfComposedDpEvent`` / ``ComposedDpEvent`` / ``NoOpDpEvent`` of these.

    A DP-REC step contributes twice the (subsampled) Gaussian RDP at noise multiplier ``1/c`` (the paper's
    ``k_hat + m_hat <= 2 k_hat`` bound) and ``12 e^{c^2} / 2^b`` to the delta overhead; a Gaussian step
    contributes its RDP once and no overhead. Conversion is the classic one at integer ``lambda``.

    Args:
      orders: integer Rényi orders ``alpha = lambda + 1 >= 2``; ``None``: 2..300 (lambda = 1..299, as the
        paper).
      neighboring_relation: only ``"add_or_remove_one"`` (the paper's central guarantee; for substitution
        neighbours the paper doubles both epsilon and delta, App. A.1).

    Example:
      >>> accountant = DprecAccountant()
      >>> event = dprec_round_event(0.545, bits=56, num_clients=100, clients_per_round=10)
      >>> round(accountant.compose(event, 1000).epsilon(100 ** -1.1), 3)      # = dprec_epsilon(...)
      3.016
    """

    name = "dprec"
    relations = frozenset({NeighboringRelation.ADD_OR_REMOVE_ONE})
    relation_hint = "for substitution neighbours use 2 epsilon and 2 delta, paper App. A.1"

    def __init__(self, orders: Sequence[int] | None = None,
                 neighboring_relation: Any = NeighboringRelation.ADD_OR_REMOVE_ONE):
        super().__init__(neighboring_relation)
        self._orders = _orders(orders)
        self._lambdas = np.asarray(self._orders, dtype=np.float64) - 1.0
        self._total = np.zeros(len(self._orders), dtype=np.float64)
        self._overhead = 0.0
        self._steps = 0        # DP-REC steps composed
        self._mechanisms = 0   # all mechanism steps (DP-REC and Gaussian) composed

    # -- hooks ----------------------------------------------------------------------------------------
    def _config(self) -> dict[str, Any]:
        return {"orders": self._orders, "neighboring_relation": self._relation}

    def _supports(self, event: DpEvent) -> bool:
        return _plan(event, 1, ({}, []))

    def _compose(self, event: DpEvent, count: int) -> None:
        rdp_plan: dict = {}
        overhead_plan: list = []
        _plan(event, count, (rdp_plan, overhead_plan))
        orders = tuple(float(a) for a in self._orders)
        for (q, z, factor), steps in rdp_plan.items():
            if steps:
                self._total = self._total + (factor * steps) * _gaussian_rdp(q, z, orders)
                self._mechanisms += steps
                if factor == 2:
                    self._steps += steps
        for log_per_step, steps in overhead_plan:
            self._overhead += _overhead(log_per_step, steps)

    def _epsilon(self, delta: float) -> float:
        return self._epsilon_and_order(delta)[0]

    def _delta(self, epsilon: float) -> float:
        if self._mechanisms == 0:
            return 0.0
        with np.errstate(invalid="ignore", over="ignore"):
            log_terms = self._lambdas * (self._total - epsilon)
        best = float(np.nanmin(log_terms)) if np.any(~np.isnan(log_terms)) else math.inf
        return float(min(1.0, self._overhead + (math.exp(best) if best < 700.0 else math.inf)))

    # -- queries --------------------------------------------------------------------------------------
    def _epsilon_and_order(self, delta: float) -> tuple[float, float]:
        if self._mechanisms == 0:
            return 0.0, math.nan
        slack = delta - self._overhead
        if not slack > 0.0:
            return math.inf, math.nan
        with np.errstate(invalid="ignore"):
            values = self._total - math.log(slack) / self._lambdas
        if not np.any(np.isfinite(values)):
            return math.inf, math.nan
        i = int(np.nanargmin(values))
        return max(0.0, float(values[i])), float(self._orders[i])

    def epsilon_and_order(self, delta: float) -> tuple[float, float]:
        """``(epsilon, optimal Rényi order alpha = lambda + 1)`` at ``delta``; ``(inf, nan)`` when
        ``delta`` does not exceed the overhead (see :meth:`infeasibility`), ``(0, nan)`` when empty."""
        return self._epsilon_and_order(checks.delta("delta", delta, scalar=True))

    def infeasibility(self, delta: float) -> str | None:
        """``None`` when ``delta`` leaves a valid guarantee, else a one-line reason (the overhead is at
        least ``delta``)."""
        delta = checks.delta("delta", delta, scalar=True)
        if delta > self._overhead:
            return None
        return (f"no valid DP-REC guarantee: the importance-sampling overhead 12*sum(e^(c^2))/2^bits = "
                f"{self._overhead:.4g} over {self._steps} steps is >= delta = {delta:.4g} (use more bits, a "
                f"smaller clip multiplier, fewer steps or a larger delta)")

    @property
    def orders(self) -> np.ndarray:
        """The Rényi orders alpha = lambda + 1, int64[num_orders]."""
        return np.asarray(self._orders, dtype=np.int64)

    @property
    def rdp(self) -> np.ndarray:
        """The composed RDP bound ``R(alpha)`` (nats; DP-REC steps counted twice), float64[num_orders]."""
        return self._total.copy()

    @property
    def delta_overhead(self) -> float:
        """The composed importance-sampling overhead ``sum 12 e^{c^2} / 2^b`` (a probability, may be inf)."""
        return float(self._overhead)

    @property
    def steps(self) -> int:
        """Number of DP-REC steps composed (``T B`` for ``T`` rounds of ``B`` slots)."""
        return self._steps



# ------------------------------------------------------------------------------------------------
# Convenience functions (digest §6.1 item 6)


def _num_clients(value: Any, name: str = "num_clients") -> int:
    return checks.integer(name, value, minimum=2)


def default_delta(num_clients: int) -> float:
    """The paper's ``delta = N^-1.1`` (Fig. 3 caption) for a federation of ``N >= 2`` clients.

    Example:
      >>> round(default_delta(100), 6)                          # 100 ** -1.1
      0.00631
    """
    return float(_num_clients(num_clients)) ** -1.1


def dprec_round_event(clip_multiplier: float, bits: int, num_clients: int,
                      clients_per_round: int) -> DpEvent:
    """One DP-REC round: ``clients_per_round`` slots drawn with replacement from ``num_clients`` clients,
    each a :class:`DprecDpEvent` (``bits`` = total index bits of one update).

    Example:
      >>> event = dprec_round_event(0.545, bits=56, num_clients=100, clients_per_round=10)
      >>> type(event).__name__, event.sample_size, event.event
      ('SampledWithReplacementDpEvent', 10, DprecDpEvent(clip_multiplier=0.545, bits=56))
    """
    n = checks.positive_int("num_clients", num_clients)
    b = checks.positive_int("clients_per_round", clients_per_round)
    return dp_accounting.SampledWithReplacementDpEvent(n, b, DprecDpEvent(clip_multiplier, bits))


def dprec_accountant(clip_multiplier: float, *, bits: int, num_clients: int, clients_per_round: int,
                     rounds: int, orders: Sequence[int] | None = None) -> DprecAccountant:
    """A :class:`DprecAccountant` with ``rounds`` DP-REC rounds composed (``rounds * clients_per_round``
    steps at mixture weight ``1 / num_clients``).

    Example (Triastcyn et al.'s MNIST setting: 100 clients, 10 a round, 1,000 rounds, 56 bits, clip multiplier 0.87):
      >>> accountant = dprec_accountant(0.87, bits=56, num_clients=100, clients_per_round=10, rounds=1000)
      >>> epsilon, order = accountant.epsilon_and_order(default_delta(100))
      >>> round(epsilon, 3), accountant.steps                          # the paper's epsilon 6
      (5.98, 10000)
    """
    event = dprec_round_event(clip_multiplier, bits, num_clients, clients_per_round)
    return DprecAccountant(orders=orders).compose(event, checks.non_negative_int("rounds", rounds))


def dprec_epsilon(clip_multiplier: float, *, bits: int, num_clients: int, clients_per_round: int, rounds: int,
                  delta: float | None = None) -> float:
    """Central epsilon (nats, add/remove one client) of ``rounds`` DP-REC rounds by Alg. 7.

    Args:
      clip_multiplier: ``c = C / sigma`` (> 0).
      bits: total index bits of one client update (all blocks).
      num_clients: ``N``, the federation size (mixture weight ``1/N``).
      clients_per_round: ``B``, slots drawn with replacement per round.
      rounds: ``T``.
      delta: target delta; ``None``: ``N^-1.1``.

    Returns:
      epsilon, or ``inf`` when ``delta <= 12 T B e^{c^2} / 2^bits`` (no valid guarantee).

    Example:
      >>> round(dprec_epsilon(0.545, bits=56, num_clients=100, clients_per_round=10, rounds=1000), 3)  # paper: 3.016
      3.016
    """
    acc = dprec_accountant(clip_multiplier, bits=bits, num_clients=num_clients,
                           clients_per_round=clients_per_round, rounds=rounds)
    delta = default_delta(num_clients) if delta is None else checks.delta("delta", delta, scalar=True)
    return acc.epsilon(delta)


def dprec_delta_overhead(clip_multiplier: float, bits: int, steps: int) -> float:
    """The delta overhead ``12 steps e^{c^2} / 2^bits`` of ``steps`` DP-REC steps (a probability; ``inf``
    on overflow). ``bits`` are the total index bits of one update.

    Example:
      >>> import math
      >>> math.isclose(dprec_delta_overhead(1.0, bits=56, steps=10_000), 12 * 10_000 * math.e / 2**56)
      True
    """
    c = _clip_multiplier(clip_multiplier)
    return _overhead(_log_overhead_step(c, _bits(bits)), checks.non_negative_int("steps", steps))


def _local_epsilon_and_lambda(clip_multiplier: float, bits: int, delta: float) -> tuple[float, float]:
    from scipy import optimize

    c = _clip_multiplier(clip_multiplier)
    slack = delta - dprec_delta_overhead(c, bits, 1)
    if not slack > 0.0:
        return math.inf, math.nan
    log_slack = math.log(slack)
    z = 1.0 / c

    def objective(lam: float) -> float:
        # Twice the Gaussian RDP at order lambda + 1 (from dp_accounting; = (lambda + 1) c^2).
        return 2.0 * float(_gaussian_rdp_uncached(1.0, z, [1.0 + lam])[0]) - log_slack / lam

    # The objective is convex in lambda (c^2 lambda - log(slack) / lambda + const).
    res = optimize.minimize_scalar(objective, bounds=(1e-6, 1e6), method="bounded",
                                   options={"xatol": 1e-10, "maxiter": 500})
    return float(res.fun), float(res.x)


def dprec_local_epsilon(clip_multiplier: float, *, bits: int, delta: float) -> float:
    """Local epsilon (nats) of one DP-REC update without amplification (digest §3, after Alg. 7):
    ``min_lambda [(lambda + 1) c^2 - log(delta - 12 e^{c^2} / 2^bits) / lambda]`` over real ``lambda > 0``
    (scalar minimisation; the objective is convex). ``inf`` when ``delta <= 12 e^{c^2} / 2^bits``.

    Example:
      >>> round(dprec_local_epsilon(0.545, bits=56, delta=1e-5), 3)        # one client, one update, no sampling
      3.995
      >>> dprec_local_epsilon(2.0, bits=8, delta=1e-5)     # 12 e^4 / 2^8 > delta: no guarantee
      inf
    """
    return _local_epsilon_and_lambda(clip_multiplier, _bits(bits), checks.delta("delta", delta, scalar=True))[0]


def _max_feasible_clip(bits: int, steps: int, delta: float) -> float:
    """The ``c`` at which the overhead ``12 steps e^{c^2} / 2^bits`` reaches ``delta`` (0 if it is >= delta
    already at ``c = 0``)."""
    c2 = math.log(delta) + bits * math.log(2.0) - math.log(BIAS_CONSTANT) - math.log(steps)
    return math.sqrt(c2) if c2 > 0 else 0.0


def calibrate_clip_multiplier(target_epsilon: float, *, bits: int, num_clients: int, clients_per_round: int,
                              rounds: int, delta: float | None = None, tol: float = 1e-9) -> float:
    """The largest clip multiplier ``c`` (within ``tol``, absolute) whose DP-REC run has epsilon <=
    ``target_epsilon`` at ``delta`` (``None``: ``N^-1.1``); the returned ``c`` always meets the target.

    Epsilon increases with ``c`` and is finite below the overhead limit ``c_max`` (where
    ``12 T B e^{c^2} / 2^bits = delta``). The search brackets the answer geometrically inside
    ``(0, c_max)`` and then narrows the bracket by Brent's method (bisection safeguarded by secant and
    inverse quadratic steps; ~10 evaluations of the 299-order accountant instead of ~30 for plain
    bisection), keeping the side that meets the target.

    Raises ``ValueError`` (naming ``target_epsilon``) when no ``c > 0`` meets the target.

    Example:
      >>> c = calibrate_clip_multiplier(3.0, bits=56, num_clients=100, clients_per_round=10, rounds=1000)
      >>> round(c, 3), dprec_epsilon(c, bits=56, num_clients=100, clients_per_round=10, rounds=1000) <= 3.0
      (0.543, True)
      >>> # the paper's c = 0.545 spends 3.016 (dprec_epsilon): just over the target
    """
    from scipy import optimize

    target = checks.epsilon("target_epsilon", target_epsilon)
    n = _num_clients(num_clients)
    b = checks.positive_int("clients_per_round", clients_per_round)
    t = checks.positive_int("rounds", rounds)
    bits = _bits(bits)
    delta = default_delta(n) if delta is None else checks.delta("delta", delta, scalar=True)
    tol = checks.positive_float("tol", tol)

    seen: dict[float, float] = {}

    def eps(c: float) -> float:
        if c not in seen:
            seen[c] = dprec_epsilon(c, bits=bits, num_clients=n, clients_per_round=b, rounds=t, delta=delta)
        return seen[c]

    c_max = _max_feasible_clip(bits, t * b, delta)
    if c_max <= 0.0:
        raise ValueError(f"target_epsilon {target_epsilon!r}: no clip multiplier gives a valid guarantee "
                         f"(the overhead 12*{t * b}*e^(c^2)/2^{bits} exceeds delta = {delta:.4g} for every c)")
    # As c -> 0 the RDP vanishes: epsilon never drops below -log(delta - overhead(c=0)) / lambda_max.
    floor = -math.log(delta - _overhead(_log_overhead_step(0.0, bits), t * b)) / (DPREC_ORDERS[-1] - 1)
    if target < floor:
        raise ValueError(f"target_epsilon {target_epsilon!r} is below {floor:.4g}, the epsilon of the overhead "
                         f"and delta alone at the largest order (bits={bits}, delta={delta:.4g})")
    top = c_max * (1.0 - 1e-12)  # epsilon is finite (and large) just below the limit
    # Geometric bracket lo < hi with eps(lo) <= target < eps(hi).
    x = min(1.0, 0.5 * top)
    if eps(x) <= target:
        lo = x
        while True:
            x = min(2.0 * x, top)
            if eps(x) > target:
                hi = x
                break
            lo = x
            if x >= top:
                return float(top)
    else:
        hi = x
        while True:
            x = 0.5 * x
            if x < 1e-8:
                raise ValueError(f"target_epsilon {target_epsilon!r} is not met by any clip multiplier down to "
                                 f"1e-8 (bits={bits}, delta={delta:.4g})")
            if eps(x) <= target:
                lo = x
                break
            hi = x
    root = optimize.brentq(lambda c: eps(c) - target, lo, hi, xtol=tol, rtol=4 * np.finfo(float).eps)
    c = min(max(root, lo), hi)
    while c > lo and eps(c) > target:  # stay on the side that meets the target
        c = max(lo, c - tol)
    return float(c)


def dpfedavg_epsilon(noise_multiplier: float, *, sampling_rate: float, rounds: int, delta: float) -> float:
    """Epsilon (nats) of DP-FedAvg as the paper accounts its baseline: ``rounds`` Poisson-subsampled
    Gaussian releases at rate ``sampling_rate = B/N`` with noise multiplier ``z`` (noise std ``z C``), RDP
    at integer orders 2..300 and the classic conversion (through :class:`DprecAccountant`).

    Example:
      >>> round(dpfedavg_epsilon(1.0, sampling_rate=0.1, rounds=100, delta=1e-5), 3)
      8.928
    """
    z = checks.positive_float("noise_multiplier", noise_multiplier)
    q = checks.sampling_rate("sampling_rate", sampling_rate)
    t = checks.non_negative_int("rounds", rounds)
    gauss = dp_accounting.GaussianDpEvent(z)
    event = gauss if q == 1.0 else dp_accounting.PoissonSampledDpEvent(q, gauss)
    return DprecAccountant().compose(event, t).epsilon(checks.delta("delta", delta, scalar=True))


def calibrate_dpfedavg_noise(target_epsilon: float, *, sampling_rate: float, rounds: int, delta: float,
                             tol: float = 1e-6) -> float:
    """The smallest DP-FedAvg noise multiplier ``z`` (within ``tol``) with :func:`dpfedavg_epsilon` <=
    ``target_epsilon``: the baseline calibrated to the same epsilon, through the same accountant and
    conversion as DP-REC. Epsilon decreases in ``z``; Brent's method on a geometric bracket.

    Example (the DP-FedAvg baseline at the same epsilon, rate 0.1, 1,000 rounds):
      >>> z = calibrate_dpfedavg_noise(5.98, sampling_rate=0.1, rounds=1000, delta=default_delta(100))
      >>> round(z, 3), dpfedavg_epsilon(z, sampling_rate=0.1, rounds=1000, delta=default_delta(100)) <= 5.98
      (2.219, True)
    """
    from scipy import optimize

    target = checks.epsilon("target_epsilon", target_epsilon)
    eps = lambda z: dpfedavg_epsilon(z, sampling_rate=sampling_rate, rounds=rounds, delta=delta)
    lo, hi = 0.25, 1.0
    while eps(hi) > target:
        lo, hi = hi, 2.0 * hi
        if hi > 1e4:
            raise ValueError(f"target_epsilon {target_epsilon!r} needs a noise multiplier above 1e4")
    while eps(lo) <= target:
        lo, hi = 0.5 * lo, lo
        if lo < 1e-3:
            return float(hi)
    z = optimize.brentq(lambda v: eps(v) - target, lo, hi, xtol=tol)
    while eps(z) > target:
        z += tol
    return float(z)
