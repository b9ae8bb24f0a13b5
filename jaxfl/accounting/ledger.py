"""Privacy ledgers consulted by the driver between compiled rounds.

:class:`SiloLedger` accounts inter-silo record-level DP (ISRL-DP, Lowy & Razaviyayn/002): every silo's own transcript
is accounted separately, with respect to one record of *that* silo, so silos with different data sizes
(different sampling rates, different noise) get different epsilons. Silos whose per-round events are
identical share one accountant (the RDP/PLD work is done once per distinct event).

:class:`CentralLedger` is the same object with a single accountant for the whole dataset (central DP, e.g.
user-level DP-FedAvg).

Both are plain Python objects: ``record`` after each round, ``rounds_within_budget`` before running more.
A ledger is built for one neighbouring relation (``neighboring_relation=``, the privacy statement's
``RoundPrivacy.relation``) and refuses, with one ``ValueError``, an accountant that does not support it.
Per-round events (:class:`~jaxfl.accounting.events.RoundCycleDpEvent`,
:class:`~jaxfl.accounting.events.RoundScheduleDpEvent`) are expanded here into the events of the rounds
recorded, from whatever round the ledger is at.
Units: epsilon in nats, delta a probability, rounds a count.
"""
from __future__ import annotations

from typing import Any, Sequence

import dp_accounting
import numpy as np

from jaxfl import checks
from jaxfl.accounting.accountants import (Accountant, DpEvent, UnsupportedEventError, accountant_relations,
                                          check_relation, make_accountant)
from jaxfl.accounting.events import DprecDpEvent, RoundCycleDpEvent, RoundScheduleDpEvent, per_round_members

__all__ = ["CentralLedger", "RoundCycleDpEvent", "RoundScheduleDpEvent", "SiloLedger"]

_PER_ROUND = (RoundCycleDpEvent, RoundScheduleDpEvent)


def _plan(event: DpEvent, start: int, rounds: int) -> list[tuple[DpEvent, int]]:
    """What ``rounds`` rounds from round ``start`` compose: ``[(event, times)]``."""
    if isinstance(event, _PER_ROUND):
        return event.counts(start, rounds)
    return [(event, rounds)] if rounds else []


def _group(events: Sequence[DpEvent]) -> tuple[list[DpEvent], np.ndarray]:
    """Distinct events (by value) and, per silo, the index of its distinct event."""
    unique: list[DpEvent] = []
    by_hash: dict[DpEvent, int] = {}
    unhashable: list[int] = []
    group_of = np.empty(len(events), dtype=np.int64)
    for i, event in enumerate(events):
        try:
            g = by_hash.get(event)
            if g is None:
                g = by_hash[event] = len(unique)
                unique.append(event)
        except TypeError:  # events holding lists (ComposedDpEvent, ...) are unhashable
            g = next((j for j in unhashable if unique[j] == event), None)
            if g is None:
                g = len(unique)
                unique.append(event)
                unhashable.append(g)
        group_of[i] = g
    return unique, group_of


class SiloLedger:
    """Per-silo (ISRL-DP) privacy ledger.

    Args:
      silo_events: one ``dp_accounting`` event per silo describing what that silo releases in *one round*
        (e.g. ``gaussian_event(sigma_i, q_i, local_steps)``), or a single event shared by all silos together
        with ``num_silos``.
      accountant: registry name (``"rdp"``, ``"pld"``, ...).
      num_silos: number of silos when ``silo_events`` is a single event.
      composition: ``"sequential"`` (every round composes the events again) or ``"parallel"``: rounds
        touch disjoint records (one-pass algorithms, Lowy & Razaviyayn's Thm 3.1), so by parallel composition
        the whole run costs one round's events.
      round_limit: the most rounds the events are valid for (one-pass: ``floor(n / K)``; beyond it
        records would be reused); epsilons are ``inf`` past it.
      neighboring_relation: the relation the events are stated for (a ``dp_accounting.NeighboringRelation``
        or its lower-case name; ``RoundPrivacy.relation``). The accountants are built with it, and an
        accountant that does not support it is refused with a ``ValueError`` naming both. None: the
        accountant's own default (add/remove-one for ``"rdp"``/``"pld"``/``"dprec"``, replace-one for
        ``"lowy"``/``"shuffle"``).
      **accountant_kw: passed to the accountant constructor (e.g. ``orders=``).

    Example:
      >>> from jaxfl.accounting import gaussian_event
      >>> ledger = SiloLedger([gaussian_event(1.0, sampling_rate=0.1, steps=10),        # silo 0
      ...                      gaussian_event(2.0, sampling_rate=0.1, steps=10)])       # silo 1: more noise
      >>> ledger.record(5).epsilons(1e-5).round(3), ledger.rounds
      (array([5.885, 1.844]), 5)
      >>> bool(ledger.epsilon(1e-5) == ledger.epsilons(1e-5).max())   # the statement: the worst silo
      True
    """

    def __init__(self, silo_events: DpEvent | Sequence[DpEvent], accountant: str = "rdp", *,
                 num_silos: int | None = None, composition: str = "sequential", round_limit: int | None = None,
                 neighboring_relation: Any = None, **accountant_kw: Any):
        checks.one_of("composition", composition, ("sequential", "parallel"))
        self._parallel = composition == "parallel"
        self._round_limit = None if round_limit is None else checks.non_negative_int("round_limit", round_limit)
        if isinstance(silo_events, DpEvent):
            if num_silos is None:
                raise ValueError("a single shared event needs num_silos")
            events = [silo_events] * checks.positive_int("num_silos", num_silos)
        else:
            events = list(silo_events)
            if not events:
                raise ValueError("silo_events must not be empty")
            if num_silos is not None and checks.positive_int("num_silos", num_silos) != len(events):
                raise ValueError(f"num_silos={num_silos!r} but {len(events)} silo events were given")
        for i, event in enumerate(events):
            if not isinstance(event, DpEvent):
                raise ValueError(f"silo_events[{i}] must be a dp_accounting.DpEvent, got {event!r}")
        if neighboring_relation is not None:
            neighboring_relation = check_relation(accountant, neighboring_relation)
            if accountant_relations(accountant) is not None:  # else the factory has the relation built in
                accountant_kw = {**accountant_kw, "neighboring_relation": neighboring_relation}
        self._accountant_name = accountant
        self._accountant_kw = dict(accountant_kw)
        self._events = tuple(events)
        self._unique, self._group_of = _group(events)
        self._accountants: list[Accountant] = []
        for event in self._unique:
            if self._parallel and isinstance(event, _PER_ROUND):
                raise ValueError(f"parallel composition of a {type(event).__name__} is not supported")
            acc = make_accountant(accountant, **accountant_kw)
            supports = getattr(acc, "supports", None)
            for member in per_round_members(event):
                if supports is not None and not supports(member):
                    raise UnsupportedEventError(_unsupported(accountant, member, neighboring_relation))
            self._accountants.append(acc)
        self._relation = getattr(self._accountants[0], "neighboring_relation", neighboring_relation)
        self._rounds = 0

    # -- inspection -----------------------------------------------------------------------------------
    @property
    def accountant_name(self) -> str:
        """Registry name of the accountant in use."""
        return self._accountant_name

    @property
    def neighboring_relation(self):
        """The ``dp_accounting.NeighboringRelation`` the ledger accounts (None if its accountant names none)."""
        return self._relation

    @property
    def num_silos(self) -> int:
        return len(self._events)

    @property
    def rounds(self) -> int:
        """Rounds recorded so far."""
        return self._rounds

    @property
    def silo_events(self) -> tuple[DpEvent, ...]:
        """The per-round event of each silo."""
        return self._events

    @property
    def num_groups(self) -> int:
        """Number of distinct per-round events, i.e. of accountants actually run."""
        return len(self._unique)

    @property
    def group_index(self) -> np.ndarray:
        """int64[num_silos]: the accountant group of each silo."""
        return self._group_of.copy()

    # -- recording ------------------------------------------------------------------------------------
    def record(self, rounds: int = 1) -> "SiloLedger":
        """Composes every silo's per-round event ``rounds`` (>= 0) more times; returns ``self``. Recording
        past the end of a :class:`RoundScheduleDpEvent` raises ``ValueError`` naming the round."""
        rounds = checks.non_negative_int("rounds", rounds)
        self._check_schedules(rounds)  # before composing anything: a refused record leaves no trace
        if rounds:
            compositions = self._compositions(rounds)
            for acc, event in zip(self._accountants, self._unique):
                for member, times in _plan(event, self._rounds, compositions):
                    acc.compose(member, times)
            self._rounds += rounds
        return self

    def _compositions(self, more_rounds: int) -> int:
        """How many times ``more_rounds`` further rounds compose the per-round events."""
        if not self._parallel:
            return more_rounds
        return 1 if (self._rounds == 0 and more_rounds > 0) else 0

    def _past_limit(self, more_rounds: int = 0) -> bool:
        return self._round_limit is not None and self._rounds + more_rounds > self._round_limit

    def _check_schedules(self, more_rounds: int) -> None:
        """Raises ValueError (naming the round) when ``more_rounds`` further rounds run past a schedule."""
        for event in self._unique:
            if isinstance(event, RoundScheduleDpEvent):
                event.check(self._rounds, self._compositions(more_rounds))

    def copy(self) -> "SiloLedger":
        """An independent ledger with the same events and history."""
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        new._accountants = [acc.copy() for acc in self._accountants]
        return new

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint needs: the ledger is rebuilt from its (static) events by recomposing."""
        return {"accountant": self._accountant_name, "num_silos": self.num_silos, "rounds": self._rounds}

    def load_state_dict(self, state: dict[str, Any]) -> "SiloLedger":
        """Restores a fresh ledger built with the same events from :meth:`state_dict` (recomposes the
        recorded rounds, so a resumed run accounts its whole history); returns ``self``."""
        if self._rounds:
            raise ValueError(f"load_state_dict needs a fresh ledger, this one has {self._rounds} rounds")
        if state.get("accountant") != self._accountant_name:
            raise ValueError(f"state is for accountant {state.get('accountant')!r}, "
                             f"ledger uses {self._accountant_name!r}")
        if state.get("num_silos") != self.num_silos:
            raise ValueError(f"state is for {state.get('num_silos')!r} silos, ledger has {self.num_silos}")
        return self.record(state["rounds"])

    # -- queries --------------------------------------------------------------------------------------
    def _deltas(self, delta: float | Sequence[float] | np.ndarray) -> np.ndarray:
        return checks.delta("delta", checks.per_silo("delta", delta, self.num_silos))

    def _groups_deltas(self, deltas: np.ndarray) -> list[list[float]]:
        per_group: list[list[float]] = [[] for _ in self._unique]
        for g, d in zip(self._group_of, deltas):
            if float(d) not in per_group[g]:
                per_group[g].append(float(d))
        return per_group

    def epsilons(self, delta: float | Sequence[float] | np.ndarray) -> np.ndarray:
        """float64[num_silos]: each silo's epsilon (nats) so far, at ``delta`` (scalar, or one per silo,
        e.g. ``1 / n_i**2``)."""
        deltas = self._deltas(delta)
        if self._past_limit():
            return np.full(self.num_silos, np.inf)
        cache: dict[tuple[int, float], float] = {}
        out = np.empty(self.num_silos, dtype=np.float64)
        for i, (g, d) in enumerate(zip(self._group_of, deltas)):
            key = (int(g), float(d))
            if key not in cache:
                cache[key] = self._accountants[g].epsilon(float(d))
            out[i] = cache[key]
        return out

    def epsilon(self, delta: float | Sequence[float] | np.ndarray) -> float:
        """The worst silo's epsilon (nats) so far: the ISRL-DP guarantee of the whole run."""
        return float(self.epsilons(delta).max())

    def _within(self, t: int, target: float, per_group: list[list[float]]) -> bool:
        if self._past_limit(t):
            return False
        compositions = self._compositions(t)
        for acc, event, deltas in zip(self._accountants, self._unique, per_group):
            plan = _plan(event, self._rounds, compositions)
            trial = acc.copy() if plan else acc
            for member, times in plan:
                trial.compose(member, times)
            if any(trial.epsilon(d) > target for d in deltas):
                return False
        return True

    def can_record(self, epsilon: float, delta: float | Sequence[float] | np.ndarray, rounds: int = 1) -> bool:
        """Whether recording ``rounds`` more rounds keeps every silo within (epsilon, delta)."""
        target = checks.epsilon("epsilon", epsilon)
        rounds = checks.non_negative_int("rounds", rounds)
        self._check_schedules(rounds)
        return self._within(rounds, target, self._groups_deltas(self._deltas(delta)))

    def rounds_within_budget(self, epsilon: float, delta: float | Sequence[float] | np.ndarray,
                             max_rounds: int) -> int:
        """The largest t in [0, max_rounds] such that recording t more rounds keeps every silo's epsilon
        <= ``epsilon`` at ``delta``; 0 also when the ledger is already over budget. Does not mutate the
        ledger. Exponential then binary search (epsilon is non-decreasing in t). With a
        :class:`RoundScheduleDpEvent`, ``max_rounds`` may not run past the schedule (``ValueError``)."""
        target = checks.epsilon("epsilon", epsilon)
        max_rounds = checks.non_negative_int("max_rounds", max_rounds)
        self._check_schedules(max_rounds)
        per_group = self._groups_deltas(self._deltas(delta))
        if max_rounds == 0 or not self._within(0, target, per_group):
            return 0
        good, bad = 0, None
        t = 1
        while t < max_rounds:
            if self._within(t, target, per_group):
                good, t = t, 2 * t
            else:
                bad = t
                break
        if bad is None:
            if self._within(max_rounds, target, per_group):
                return max_rounds
            bad = max_rounds
        while bad - good > 1:
            mid = (good + bad) // 2
            if self._within(mid, target, per_group):
                good = mid
            else:
                bad = mid
        return good

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(accountant={self._accountant_name!r}, num_silos={self.num_silos}, "
                f"groups={self.num_groups}, rounds={self._rounds})")


class CentralLedger(SiloLedger):
    """Central-DP ledger: one accountant for the whole dataset (e.g. user-level DP-FedAvg). Same interface as
    :class:`SiloLedger` with ``num_silos == 1``.

    Args:
      event: what one round releases about the whole dataset, as a ``dp_accounting`` event.
      accountant: registry name; ``neighboring_relation=``, ``composition=``, ``round_limit=`` as for
        :class:`SiloLedger`; other keywords go to the accountant's constructor.

    Example:
      >>> from jaxfl.accounting import gaussian_event
      >>> ledger = CentralLedger(gaussian_event(1.0, sampling_rate=0.01))     # one round of user-level DP-FedAvg
      >>> round(ledger.record(100).epsilon(1e-5), 3)
      1.214
    """

    def __init__(self, event: DpEvent, accountant: str = "rdp", **kwargs: Any):
        if not isinstance(event, DpEvent):
            raise ValueError(f"event must be a dp_accounting.DpEvent, got {event!r}")
        super().__init__([event], accountant, **kwargs)

    @property
    def event(self) -> DpEvent:
        """The per-round event."""
        return self._events[0]


def _unsupported(accountant: str, event, relation) -> str:
    """The refusal of an event, with what to do where there is a way out."""
    message = f"the {accountant!r} accountant cannot account {event!r}"
    replace_one = relation is dp_accounting.NeighboringRelation.REPLACE_ONE
    if isinstance(event, dp_accounting.PoissonSampledDpEvent) and replace_one:
        message += (" under replace-one neighbours, the relation stated when a Poisson sample's clipped sum is divided "
                    "by the silo's own size: pass expected_batch_size= (a public constant fixed in advance) to the "
                    "algorithm for add/remove-one, or use accountant='pld'")
    elif isinstance(event, dp_accounting.SampledWithReplacementDpEvent) and isinstance(event.event, DprecDpEvent):
        message += ": DP-REC's rounds are accounted by accountant='dprec' (jaxfl.accounting.dprec)"
    elif isinstance(event, dp_accounting.SampledWithReplacementDpEvent):
        message += (" (batch_size= draws records with replacement, and dp_accounting has no accountant for that): "
                    "sample by Poisson instead, sampling_rate= with expected_batch_size= (DP-SGD's sampling, "
                    "add/remove-one, any accountant; jaxfl.dp_sgd for one dataset), or keep batch_size= with "
                    "accountant='pld' (replace-one, tight) or accountant='lowy' (Lowy & Razaviyayn's closed forms)")
    return message
