"""jaxfl's own privacy events, and the one place where a Gaussian's sensitivity meets a neighbouring relation.

Like ``dp_accounting``'s events, each event here is an immutable value that documents the mechanism it
stands for, the neighbouring relation it is stated for and what it assumes, so that an accountant can be
written from the docstring alone. They subclass ``dp_accounting.DpEvent`` and compose with its events
(``SelfComposedDpEvent``, ``ComposedDpEvent``, ...); an accountant that does not know one answers
``supports(event) == False``.

* :func:`clipped_sum_gaussian`, :func:`clipped_sum_sensitivity`, :func:`rdp_event`: the Gaussian mechanism
  on a sum of clipped per-record contributions, under each neighbouring relation;
* :class:`PvecDpEvent`, :class:`ShuffledGaussianDpEvent`: shuffle-model rounds (Lowy & Razaviyayn and Lowy et al.,
  accountant ``"shuffle"``);
* :class:`DprecDpEvent`: one DP-REC release (Triastcyn et al., accountant ``"dprec"``);
* :class:`RoundCycleDpEvent`, :class:`RoundScheduleDpEvent`: *per-round* events, a statement of what each
  round of a run releases; only ledgers (:mod:`jaxfl.accounting.ledger`) understand them, and hand the
  accountants the member events.

Sampling with replacement needs no event of jaxfl's own: it is
``dp_accounting.SampledWithReplacementDpEvent(n, K, clipped_sum_gaussian(z))``, which dp_accounting 0.6.0's
RDP and PLD accountants do not support and jaxfl's ``"pld"`` (tight, :mod:`jaxfl.accounting.with_replacement`)
and ``"lowy"`` (closed forms) accountants do, under replace-one neighbours;
:func:`jaxfl.accounting.gaussian_event` and :meth:`jaxfl.engine.local.Sampler.event` build it.

Units: noise multipliers are a noise standard deviation over a per-record bound (see
:func:`clipped_sum_gaussian`), counts are numbers of records, reports or rounds.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import dp_accounting

from jaxfl import checks

DpEvent = dp_accounting.DpEvent
NeighboringRelation = dp_accounting.NeighboringRelation

__all__ = [
    "DprecDpEvent", "PvecDpEvent", "RoundCycleDpEvent", "RoundScheduleDpEvent", "ShuffledGaussianDpEvent",
    "as_relation", "clipped_sum_gaussian", "clipped_sum_sensitivity", "rdp_event", "per_round_members",
]


# ------------------------------------------------------------------------------------------------
# The Gaussian mechanism on a clipped sum


def as_relation(value: Any) -> NeighboringRelation:
    """``value`` (a ``NeighboringRelation`` or its name, e.g. ``"replace_one"``) as a ``NeighboringRelation``;
    one ``ValueError`` naming the known relations otherwise.

    Example:
      >>> as_relation("replace_one")
      <NeighboringRelation.REPLACE_ONE: 2>
      >>> as_relation("swap")
      Traceback (most recent call last):
      ...
      ValueError: ...
    """
    if isinstance(value, NeighboringRelation):
        return value
    if isinstance(value, str):
        try:
            return NeighboringRelation[value.strip().upper().replace("-", "_")]
        except KeyError:
            pass
    names = ", ".join(r.name.lower() for r in NeighboringRelation)
    raise ValueError(f"neighboring_relation must be one of {names}, got {value!r}")


def clipped_sum_sensitivity(relation: Any) -> float:
    """The L2 sensitivity, in units of the clip bound ``C``, of a sum of per-record contributions each of
    norm at most ``C``: ``1`` under add/remove-one (one contribution appears or vanishes) and
    replace-special (one contribution becomes the zero record), ``2`` under replace-one (``+C`` may become
    ``-C``).

    Example:
      >>> clipped_sum_sensitivity("add_or_remove_one"), clipped_sum_sensitivity("replace_one")
      (1.0, 2.0)
    """
    return 2.0 if as_relation(relation) is NeighboringRelation.REPLACE_ONE else 1.0


def clipped_sum_gaussian(noise_multiplier: float, relation: Any = NeighboringRelation.ADD_OR_REMOVE_ONE
                         ) -> dp_accounting.GaussianDpEvent:
    """The event of ``sum_i clip(v_i, C) + N(0, (z C)^2 I)``: a Gaussian of std ``z C`` on a sum of per-record
    contributions clipped to norm ``C``, whose sensitivity is ``C`` under add/remove-one (and
    replace-special) neighbours and ``2C`` under replace-one neighbours
    (:func:`clipped_sum_sensitivity`).

    The event is ``dp_accounting.GaussianDpEvent(z)`` under every relation, by dp_accounting's own
    definition of that event: its ``noise_multiplier`` is ``s / C`` with ``C`` the bound on each value
    (``dp_event.py``), not ``s`` over the sensitivity. The relation belongs to the privacy statement
    (:class:`jaxfl.engine.protocol.RoundPrivacy`), the ledger builds its accountants with it, and each
    accountant applies the relation's factor: dp_accounting's PLD accountant does (``REPLACE_ONE`` shifts
    the two Gaussians by ``+-C``), so do jaxfl's ``"lowy"`` and ``"shuffle"`` accountants (through
    :func:`clipped_sum_sensitivity`). dp_accounting 0.6.0's RDP accountant does not: it reads the
    multiplier as std over sensitivity under every relation (google/differential-privacy#378), which under
    ``REPLACE_ONE`` would understate a clipped sum's RDP fourfold. jaxfl's
    :class:`~jaxfl.accounting.accountants.RdpAccountant` therefore hands it :func:`rdp_event` of every
    event, the one place where the multiplier is divided by the relation's sensitivity. A call site never
    halves ``z`` itself.

    Args:
      noise_multiplier: ``z`` (>= 0): noise std over the clip bound ``C`` (0: no noise, no privacy).
      relation: the neighbouring relation the statement is for (a ``dp_accounting.NeighboringRelation`` or
        its lower-case name); validated, and documented here, but it does not change the event.

    Example:
      >>> clipped_sum_gaussian(1.1)                             # std 1.1 C on a sum of records clipped to C
      GaussianDpEvent(noise_multiplier=1.1)
    """
    as_relation(relation)
    z = checks.epsilon("noise_multiplier", noise_multiplier, allow_zero=True)  # finite and >= 0
    return dp_accounting.GaussianDpEvent(z)


def rdp_event(event: DpEvent, relation: Any) -> DpEvent:
    """The event to hand dp_accounting's RDP accountant so that it accounts ``event`` under ``relation``.

    dp_accounting's Gaussian and Laplace events carry ``s / C`` (``C`` the bound on each value), and its RDP
    formulas (the plain Gaussian ``alpha / (2 sigma^2)``, sampling without replacement (Wang, Balle,
    Kasiviswanathan 2019), the Laplace mechanism) take ``sigma`` = std over *sensitivity*. These agree under
    add/remove-one and replace-special neighbours (sensitivity ``C``), but under replace-one the sensitivity
    is ``2C`` (:func:`clipped_sum_sensitivity`), so every ``GaussianDpEvent`` / ``LaplaceDpEvent`` in
    ``event`` is rewritten with its multiplier divided by 2 (nested in ``SelfComposedDpEvent``,
    ``ComposedDpEvent`` and the sampling events). Other relations, and other events, are returned as they
    are.

    Example (under replace-one the sensitivity doubles, so the multiplier handed to RDP halves):
      >>> import dp_accounting
      >>> rdp_event(dp_accounting.GaussianDpEvent(2.0), "replace_one")
      GaussianDpEvent(noise_multiplier=1.0)
      >>> rdp_event(dp_accounting.GaussianDpEvent(2.0), "add_or_remove_one")
      GaussianDpEvent(noise_multiplier=2.0)
    """
    factor = clipped_sum_sensitivity(relation)
    return event if factor == 1.0 else _scaled(event, factor)


def _scaled(event: DpEvent, factor: float) -> DpEvent:
    if isinstance(event, dp_accounting.GaussianDpEvent):
        return dp_accounting.GaussianDpEvent(event.noise_multiplier / factor)
    if isinstance(event, dp_accounting.LaplaceDpEvent):
        return dp_accounting.LaplaceDpEvent(event.noise_multiplier / factor)
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        return dp_accounting.SelfComposedDpEvent(_scaled(event.event, factor), event.count)
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return dp_accounting.ComposedDpEvent([_scaled(e, factor) for e in event.events])
    if isinstance(event, dp_accounting.PoissonSampledDpEvent):
        return dp_accounting.PoissonSampledDpEvent(event.sampling_probability, _scaled(event.event, factor))
    if isinstance(event, (dp_accounting.SampledWithoutReplacementDpEvent,
                          dp_accounting.SampledWithReplacementDpEvent)):
        return type(event)(event.source_dataset_size, event.sample_size, _scaled(event.event, factor))
    return event


# ------------------------------------------------------------------------------------------------
# Shuffle model (Lowy & Razaviyayn §5, Lowy et al. §4)


@dataclasses.dataclass(frozen=True)
class PvecDpEvent(DpEvent):
    """One run of the binomial vector-summation protocol P_vec (Cheu et al.; Lowy & Razaviyayn Alg. 6, Lowy et al.
    Algs. 7-10) over ``num_users`` reports of dimension ``dim``, with ``ShuffleParams(granularity, trials,
    probability)``.

    Mechanism: each user clips its vector to the protocol's bound, rounds every coordinate randomly to the
    grid of ``granularity`` steps, and adds ``trials`` Bernoulli(``probability``) bits per coordinate; the
    shuffler hides which user sent which bit, and the analyzer sees only the per-coordinate counts
    (:mod:`jaxfl.privacy.shuffle`). Neighbouring relation: replace-one record (one user's vector
    replaced by any other of norm at most the bound). Assumes a trusted shuffler and that the number of
    users is public. Its ``(epsilon, delta)`` is jaxfl's own analysis of the protocol
    (:func:`jaxfl.privacy.shuffle.shuffled_epsilon`), not Cheu et al.'s constants. Accountant: ``"shuffle"``.

    Example:
      >>> from jaxfl.accounting import make_accountant
      >>> from jaxfl.privacy.shuffle import pvec_parameters
      >>> g, b, p = pvec_parameters(1.0, 1e-5, num_users=1000, dim=10)     # calibrated to epsilon 1
      >>> event = PvecDpEvent(g, b, p, num_users=1000, dim=10)
      >>> make_accountant("shuffle").compose(event).epsilon(1e-5) <= 1.0
      True
    """

    granularity: int
    trials: int
    probability: float
    num_users: int
    dim: int


@dataclasses.dataclass(frozen=True)
class ShuffledGaussianDpEvent(DpEvent):
    """One round of Shuffled Noisy MB-SGD (Lowy & Razaviyayn, Thm 5.1), as the shuffled transcript reveals it about
    one record anywhere in the union of the silos (central DP).

    Mechanism: ``reports`` of the ``num_silos`` silos are available; each draws one of its records (silos
    hold at least ``records_per_silo``, the smallest silo's size), clips its gradient to ``C`` and sends it
    plus ``N(0, (noise_multiplier C)^2 I)``; a trusted shuffler permutes the reports before the server sums
    them. Neighbouring relation: replace-one record, so a local randomizer's sensitivity is ``2C``
    (:func:`clipped_sum_sensitivity`). Accounted (accountant ``"shuffle"``,
    :func:`jaxfl.accounting.shuffle_model.shuffled_gaussian_epsilon`) by the analytic Gaussian mechanism,
    Feldman-McMillan-Talwar amplification by shuffling and amplification by subsampling at rate
    ``reports / (num_silos * records_per_silo)``.

    Example:
      >>> from jaxfl.accounting import make_accountant
      >>> event = ShuffledGaussianDpEvent(5.0, reports=10_000, num_silos=10_000, records_per_silo=100)
      >>> round(make_accountant("shuffle").compose(event).epsilon(1e-5), 4)
      0.0059
      >>> few = ShuffledGaussianDpEvent(5.0, reports=1000, num_silos=1000, records_per_silo=100)
      >>> make_accountant("shuffle").compose(few).epsilon(1e-5)   # too few reports to amplify
      inf
    """

    noise_multiplier: float
    reports: int
    num_silos: int
    records_per_silo: int


# ------------------------------------------------------------------------------------------------
# DP-REC (Triastcyn et al.)


def _clip_multiplier(value: Any) -> float:
    return checks.positive_float("clip_multiplier", value)


def _bits(value: Any) -> int:
    return checks.positive_int("bits", value)


@dataclasses.dataclass(frozen=True)
class DprecDpEvent(DpEvent):
    """One DP-REC release of one client's clipped update (Triastcyn et al., Alg. 3; digest §3).

    Mechanism: the client clips its update to ``C = c sigma`` and sends the index of one of ``K = 2^bits``
    samples of the shared prior ``N(0, sigma^2 I)``, chosen with weights ``q / p`` where
    ``q = N(update, sigma^2 I)``; no noise is added. Neighbouring relation: add/remove one client (the
    paper's central guarantee; replace-one would double epsilon and delta, App. A.1). Assumes the client's
    Gumbel draws and its choice of the codebook seed stay secret. Accounted (accountant ``"dprec"``) by
    Theorem 1: twice the Rényi divergence of the (subsampled) Gaussian with noise multiplier ``1/c``, plus
    the importance-sampling overhead ``12 e^{c^2} / 2^bits`` on delta.

    Attributes:
      clip_multiplier: ``c = C / sigma`` (> 0): the clip norm over the prior's standard deviation; the
        Rényi divergence of order ``alpha`` between message and prior is at most ``alpha c^2 / 2`` nats.
      bits: the **total** index bits ``b_tot`` of the update over all its blocks (>= 1); ``K = 2^b_tot``
        enters the delta overhead ``12 e^{c^2} / 2^b_tot``.

    Example:
      >>> from jaxfl.accounting import make_accountant
      >>> round(make_accountant("dprec").compose(DprecDpEvent(0.5, bits=56)).epsilon(1e-5), 3)  # one client
      3.645
    """

    clip_multiplier: float
    bits: int

    def __post_init__(self):
        object.__setattr__(self, "clip_multiplier", _clip_multiplier(self.clip_multiplier))
        object.__setattr__(self, "bits", _bits(self.bits))


# ------------------------------------------------------------------------------------------------
# Per-round events: what each round of a run releases


def _per_round_members(name: str, events: Any) -> tuple:
    members = tuple(events) if isinstance(events, (tuple, list)) else events
    if not isinstance(members, tuple) or not members or not all(isinstance(e, DpEvent) for e in members):
        raise ValueError(f"{name} needs a non-empty tuple of DpEvents, got {events!r}")
    for e in members:
        if isinstance(e, (RoundCycleDpEvent, RoundScheduleDpEvent)):
            raise ValueError(f"{name} members must be ordinary DpEvents (what one round releases), got {e!r}")
    return members


def _tally(events) -> list[tuple[DpEvent, int]]:
    """``[(event, times)]`` of an iterable of events, equal events merged, in order of first appearance."""
    plan: list[list] = []
    index: dict = {}
    for event in events:
        try:
            slot = index.get(event)
        except TypeError:  # unhashable (ComposedDpEvent holds a list): compare by value
            slot = next((p for p in plan if p[0] == event), None)
        if slot is None:
            slot = [event, 0]
            plan.append(slot)
            try:
                index[event] = slot
            except TypeError:
                pass
        slot[1] += 1
    return [(e, t) for e, t in plan if t]


@dataclasses.dataclass(frozen=True)
class RoundCycleDpEvent(DpEvent):
    """A per-round event that repeats with a period: round ``r`` releases ``events[r % len(events)]``.

    For algorithms whose rounds differ in a fixed pattern (FedProx-SPIDER: a checkpoint every ``q``
    rounds, difference steps between them). The members are ordinary events, each stated for the
    neighbouring relation of the privacy statement that holds the cycle. Only ledgers understand it: they
    hand the accountants the member events, each composed as often as the recorded rounds hit its position.

    Example:
      >>> import dp_accounting
      >>> from jaxfl.accounting.ledger import CentralLedger
      >>> cycle = RoundCycleDpEvent((dp_accounting.GaussianDpEvent(2.0), dp_accounting.GaussianDpEvent(4.0)))
      >>> pair = dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(2.0), dp_accounting.GaussianDpEvent(4.0)])
      >>> both_twice = dp_accounting.SelfComposedDpEvent(pair, 2)
      >>> CentralLedger(cycle).record(4).epsilon(1e-5) == CentralLedger(both_twice).record(1).epsilon(1e-5)
      True
    """

    events: tuple

    def __post_init__(self):
        object.__setattr__(self, "events", _per_round_members("RoundCycleDpEvent", self.events))

    def counts(self, start: int, rounds: int) -> list[tuple[DpEvent, int]]:
        """``[(event, times)]`` released by rounds ``start .. start + rounds - 1``."""
        period = len(self.events)
        full, rest = divmod(rounds, period)
        plan: list[list] = []
        for k, event in enumerate(self.events):
            times = full + (1 if (k - start) % period < rest else 0)
            same = next((p for p in plan if p[0] == event), None)
            if same is not None:
                same[1] += times
            elif times:
                plan.append([event, times])
        return [(e, t) for e, t in plan if t]


@dataclasses.dataclass(frozen=True)
class RoundScheduleDpEvent(DpEvent):
    """A per-round event that may differ in every round: round ``r`` releases ``events[r]``, for
    ``r < len(events)``.

    For runs driven by a host-computed schedule (a sample size or sampling rate growing with the round,
    a per-round step count, ...): e.g. ``RoundScheduleDpEvent(tuple(PoissonSampledDpEvent(q_r,
    GaussianDpEvent(z)) for q_r in rates))``. The members are ordinary events, each stated for the
    neighbouring relation of the privacy statement that holds the schedule. The schedule says nothing past
    its end: accounting round ``len(events)`` or later raises ``ValueError`` naming the round. Only ledgers
    understand it: they hand the accountants the member events of the rounds they record, from whatever
    round they are at.

    Example:
      >>> import dp_accounting
      >>> from jaxfl.accounting.ledger import CentralLedger
      >>> rates = (0.01, 0.02, 0.04)                                          # a growing sampling rate
      >>> schedule = RoundScheduleDpEvent(tuple(
      ...     dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(1.0)) for q in rates))
      >>> ledger = CentralLedger(schedule).record(3)
      >>> ledger.record(1)
      Traceback (most recent call last):
      ...
      ValueError: round 3 is past the end of the privacy schedule, which covers rounds 0..2 (asked for rounds 3..3)
    """

    events: tuple

    def __post_init__(self):
        object.__setattr__(self, "events", _per_round_members("RoundScheduleDpEvent", self.events))

    @property
    def rounds(self) -> int:
        """The number of rounds the schedule covers."""
        return len(self.events)

    def check(self, start: int, rounds: int) -> None:
        """Raises ``ValueError`` (naming the first round without an event) when rounds ``start ..
        start + rounds - 1`` run past the schedule."""
        if rounds > 0 and start + rounds > len(self.events):
            raise ValueError(f"round {max(start, len(self.events))} is past the end of the privacy schedule, "
                             f"which covers rounds 0..{len(self.events) - 1} (asked for rounds "
                             f"{start}..{start + rounds - 1})")

    def counts(self, start: int, rounds: int) -> list[tuple[DpEvent, int]]:
        """``[(event, times)]`` released by rounds ``start .. start + rounds - 1`` (equal events merged)."""
        self.check(start, rounds)
        return _tally(self.events[start:start + rounds]) if rounds > 0 else []


def per_round_members(event: DpEvent) -> tuple:
    """The events an accountant will be handed for ``event``: a per-round event's members, else ``(event,)``.

    Example:
      >>> import dp_accounting
      >>> per_round_members(dp_accounting.GaussianDpEvent(2.0))
      (GaussianDpEvent(noise_multiplier=2.0),)
    """
    if isinstance(event, (RoundCycleDpEvent, RoundScheduleDpEvent)):
        return event.events
    return (event,)
