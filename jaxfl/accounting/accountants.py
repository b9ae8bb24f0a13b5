"""Accountant objects: thin, plain-Python wrappers around ``dp_accounting``.

Accountants are consulted between compiled rounds and are never traced (ARCHITECTURE principle 4). Privacy
is described by ``dp_accounting`` events; all Rényi-DP and privacy-loss-distribution mathematics is done by
``dp_accounting`` itself. Units: epsilon is in nats (natural log), delta is a probability, counts are
numbers of mechanism invocations.

Neighbouring relation: add/remove one record (``dp_accounting``'s default) unless the accountant is built
with ``neighboring_relation=...``; every accountant class declares the relations it supports
(``relations``) and refuses the others with one ``ValueError`` (:func:`check_relation`). A Gaussian
event's noise multiplier is, as ``dp_accounting`` defines it, the noise standard deviation over the bound
``C`` on each record's contribution; the sensitivity is ``C`` under add/remove-one and ``2C`` under
replace-one, and the accountants apply it (:func:`jaxfl.accounting.events.clipped_sum_gaussian`).

Known ``dp_accounting`` 0.6.0 limitation: neither its RDP nor its PLD accountant supports
``SampledWithReplacementDpEvent`` (and only RDP with ``replace_one`` supports
``SampledWithoutReplacementDpEvent``). jaxfl's ``"pld"`` accountant composes draws with replacement of a
Gaussian under replace-one neighbours (:mod:`jaxfl.accounting.with_replacement`); composing an event no
accountant supports raises :class:`dp_accounting.UnsupportedEventError`.
"""
from __future__ import annotations

import copy as _copy
import functools
import logging
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

import dp_accounting
import numpy as np
from dp_accounting import rdp as _rdp

from jaxfl import checks
from jaxfl.accounting import events as _events
from jaxfl.accounting.with_replacement import PLDAccountantWithReplacement

NeighboringRelation = dp_accounting.NeighboringRelation
DpEvent = dp_accounting.DpEvent
UnsupportedEventError = dp_accounting.UnsupportedEventError



class _DroppedOrderFilter(logging.Filter):
    """Hides dp_accounting's per-order convergence warnings.

    At small fractional orders (e.g. 1.1-1.7 for q = 0.2) dp_accounting's series for the sampled
    Gaussian may not converge; it then drops that order and logs one warning per order and per call.
    The epsilon it returns is still valid (a minimum over the remaining orders), so jaxfl keeps the
    log readable instead of printing hundreds of such lines during a calibration.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return "failed to converge" not in record.getMessage()


logging.getLogger("absl").addFilter(_DroppedOrderFilter())

#: dp_accounting's default RDP orders (fractional 1.1..10.9, integers 11..63, 128, 256, 512, 1024).
DEFAULT_RDP_ORDERS: tuple[float, ...] = tuple(_rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS)


@runtime_checkable
class Accountant(Protocol):
    """What every registered accountant offers (RDP, PLD, and later ones such as DP-REC's).

    Example:
      >>> accountant = make_accountant("rdp")
      >>> isinstance(accountant, Accountant)
      True
      >>> round(accountant.compose(gaussian_event(1.1, sampling_rate=0.01, steps=1000)).epsilon(1e-5), 2)
      1.71
      >>> len(accountant.events)     # what was composed, for a copy or a ledger's state
      1
    """

    name: str

    def compose(self, event: DpEvent, count: int = 1) -> "Accountant": ...

    def epsilon(self, delta: float) -> float: ...

    def delta(self, epsilon: float) -> float: ...

    def copy(self) -> "Accountant": ...

    @property
    def events(self) -> tuple[tuple[DpEvent, int], ...]: ...


_relation = _events.as_relation  # NeighboringRelation or its lower-case name -> NeighboringRelation

#: Every neighbouring relation dp_accounting names.
ALL_RELATIONS: frozenset = frozenset(NeighboringRelation)


def _relation_names(relations) -> str:
    return ", ".join(sorted(r.name.lower() for r in relations))


def _refuse_relation(name: str, relation: NeighboringRelation, supported, hint: str = "") -> None:
    """Raises the one ``ValueError`` for an accountant that does not support ``relation``."""
    if relation not in supported:
        raise ValueError(f"neighboring_relation {relation.name.lower()!r} is not supported by the {name!r} "
                         f"accountant, which accounts {_relation_names(supported)} neighbours only"
                         + (f" ({hint})" if hint else ""))


class _DpAccountingAccountant:
    """Shared machinery: history of (event, count), validation, copying, dp_accounting aliases.

    Subclasses implement ``_supports``, ``_compose``, ``_epsilon``, ``_delta`` and ``_config``, and declare
    ``relations``, the neighbouring relations they can account (data, read by :func:`check_relation`
    before any accountant is built).
    """

    name: str = ""
    #: The neighbouring relations this accountant supports (per-event limits are ``supports``'s business).
    relations: frozenset = frozenset({NeighboringRelation.ADD_OR_REMOVE_ONE})
    #: Appended to the refusal of an unsupported relation (e.g. how to convert the guarantee).
    relation_hint: str = ""

    def __init__(self, neighboring_relation: Any = NeighboringRelation.ADD_OR_REMOVE_ONE):
        self._relation = _relation(neighboring_relation)
        _refuse_relation(self.name, self._relation, type(self).relations, type(self).relation_hint)
        self._events: list[tuple[DpEvent, int]] = []
        self._builder = dp_accounting.DpEventBuilder()

    # -- subclass hooks -------------------------------------------------------------------------------
    def _config(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def _supports(self, event: DpEvent) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def _compose(self, event: DpEvent, count: int) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _epsilon(self, delta: float) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def _delta(self, epsilon: float) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def _shared(self) -> list[Any]:
        """Objects that copies share instead of deep-copying (caches)."""
        return []

    # -- public interface -----------------------------------------------------------------------------
    @property
    def neighboring_relation(self) -> NeighboringRelation:
        """The neighbouring-dataset relation the accountant assumes."""
        return self._relation

    @property
    def events(self) -> tuple[tuple[DpEvent, int], ...]:
        """The composed history, as ``(event, count)`` pairs in composition order."""
        return tuple(self._events)

    @property
    def ledger(self) -> DpEvent:
        """The composed history as one ``dp_accounting`` event (``NoOpDpEvent`` when empty)."""
        return self._builder.build()

    def supports(self, event: DpEvent) -> bool:
        """Whether ``event`` can be composed."""
        return bool(self._supports(event))

    def compose(self, event: DpEvent, count: int = 1) -> "_DpAccountingAccountant":
        """Composes ``event`` ``count`` times (``count`` >= 0 invocations); returns ``self``.

        Raises ``UnsupportedEventError`` (naming the event) when ``dp_accounting`` cannot account it.
        """
        if not isinstance(event, DpEvent):
            raise ValueError(f"event must be a dp_accounting.DpEvent, got {event!r}")
        count = checks.non_negative_int("count", count)
        if not self._supports(event):
            raise UnsupportedEventError(
                f"the {self.name!r} accountant ({self._relation.name.lower()} neighbours) cannot "
                f"account {event!r}")
        if count:  # composing zero times is a no-op and leaves no trace in the history
            self._compose(event, count)
            self._builder.compose(event, count)
            self._events.append((event, count))
        return self

    def epsilon(self, delta: float) -> float:
        """Smallest epsilon (nats) such that the composed history is (epsilon, delta)-DP."""
        return float(self._epsilon(checks.delta("delta", delta, scalar=True)))

    def delta(self, epsilon: float) -> float:
        """Smallest delta such that the composed history is (epsilon, delta)-DP (epsilon >= 0, nats)."""
        return float(self._delta(checks.epsilon("epsilon", epsilon, allow_zero=True)))

    def copy(self) -> "_DpAccountingAccountant":
        """An independent accountant with the same configuration and composed history."""
        return _copy.deepcopy(self, {id(obj): obj for obj in self._shared()})

    def rebuild(self) -> "_DpAccountingAccountant":
        """A fresh accountant of the same configuration that recomposes :attr:`events` one by one."""
        new = type(self)(**self._config())
        for event, count in self._events:
            new.compose(event, count)
        return new

    # dp_accounting.PrivacyAccountant-style aliases, so these objects can stand in for one.
    def get_epsilon(self, target_delta: float) -> float:
        return self.epsilon(target_delta)

    def get_delta(self, target_epsilon: float) -> float:
        return self.delta(target_epsilon)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._config()!r}, events={len(self._events)})"


def _unwrap_self_composed(event: DpEvent, count: int) -> tuple[DpEvent, int]:
    while isinstance(event, dp_accounting.SelfComposedDpEvent):
        event, count = event.event, count * event.count
    return event, count


@functools.lru_cache(maxsize=None)
def upstream_scales_replace_one() -> bool:
    """Whether the installed dp_accounting's RDP accountant already reads a Gaussian's multiplier under replace-one
    as std over the per-record bound (sensitivity ``2C``), as google/differential-privacy#378 asks and PR #464 would
    do. Measured, not read from a version string: one Gaussian of multiplier 1 at order 2 gives RDP 1 under
    add/remove-one, and 4 under replace-one once the factor is applied upstream (1 while it is not). jaxfl halves
    the multiplier itself (:func:`jaxfl.accounting.events.rdp_event`) only when this is False, so the correction
    never applies twice."""
    def rdp(relation):
        acc = _rdp.RdpAccountant(orders=[2.0], neighboring_relation=relation)
        acc.compose(dp_accounting.GaussianDpEvent(1.0))
        return float(acc._rdp[0])  # pylint: disable=protected-access

    add, replace = rdp(NeighboringRelation.ADD_OR_REMOVE_ONE), rdp(NeighboringRelation.REPLACE_ONE)
    if np.isclose(replace, 4.0 * add):
        return True
    if np.isclose(replace, add):
        return False
    raise RuntimeError(f"dp_accounting's RDP of a Gaussian under replace-one is {replace} against {add} under "
                       "add/remove-one: neither the known behaviour nor the fix of google/differential-privacy#378")


class RdpAccountant(_DpAccountingAccountant):
    """Rényi-DP accountant over ``dp_accounting.rdp``, with the modern RDP -> (eps, delta) conversion
    (Balle et al. 2020 / Canonne et al. 2020) of ``dp_accounting.rdp.compute_epsilon``.

    The RDP curve of each distinct event is computed once by a fresh ``dp_accounting.rdp.RdpAccountant`` and
    cached (shared with copies), since RDP composes additively; the totals are bit-identical to composing
    into one ``dp_accounting`` accountant.

    Neighbouring relations: all three; which events each supports is ``dp_accounting``'s rule (e.g.
    ``PoissonSampledDpEvent`` not under replace-one, ``SampledWithoutReplacementDpEvent`` only under
    replace-one). Under replace-one, dp_accounting 0.6.0's RDP reads a Gaussian's multiplier as std over
    sensitivity while the event carries std over the per-record bound ``C`` (sensitivity ``2C``): every
    event is handed over as :func:`jaxfl.accounting.events.rdp_event` of it, which halves the multiplier, unless
    the installed dp_accounting applies that factor itself (:func:`upstream_scales_replace_one`, measured at
    first use).

    Args:
      orders: Rényi orders alpha > 1; ``None`` uses ``dp_accounting``'s default orders
        (:data:`DEFAULT_RDP_ORDERS`). Fractional orders give a slightly pessimistic (safe) RDP.
      neighboring_relation: ``"add_or_remove_one"`` (default), ``"replace_one"`` or ``"replace_special"``.

    Example:
      >>> accountant = RdpAccountant().compose(gaussian_event(1.1, 256 / 60000), 14063)
      >>> round(accountant.epsilon(1e-5), 5)                       # Abadi et al.'s MNIST run (dp_accounting: 2.59666)
      2.59666
    """

    name = "rdp"
    relations = ALL_RELATIONS

    def __init__(self, orders: Sequence[float] | None = None,
                 neighboring_relation: Any = NeighboringRelation.ADD_OR_REMOVE_ONE):
        if orders is None:
            orders = DEFAULT_RDP_ORDERS
        orders = tuple(float(a) for a in np.asarray(orders, dtype=np.float64).ravel())
        if not orders or min(orders) < 1.0:
            raise ValueError(f"orders must be a non-empty sequence of values >= 1, got {orders!r}")
        super().__init__(neighboring_relation)
        self._orders = orders
        self._total = np.zeros(len(orders), dtype=np.float64)
        self._cache: dict[DpEvent, np.ndarray] = {}

    def _fresh(self) -> Any:
        return _rdp.RdpAccountant(orders=list(self._orders), neighboring_relation=self._relation)

    def _config(self) -> dict[str, Any]:
        return {"orders": self._orders, "neighboring_relation": self._relation}

    def _shared(self) -> list[Any]:
        return [self._cache]

    def _handed(self, event: DpEvent) -> DpEvent:
        """The event dp_accounting's accountant is given: the relation's sensitivity applied once."""
        return event if upstream_scales_replace_one() else _events.rdp_event(event, self._relation)

    def _supports(self, event: DpEvent) -> bool:
        return self._fresh().supports(self._handed(event))

    def _unit_rdp(self, event: DpEvent) -> np.ndarray:
        try:
            return self._cache[event]
        except TypeError:  # unhashable event (holds a list): no caching
            return self._compute_unit_rdp(event)
        except KeyError:
            rdp = self._cache[event] = self._compute_unit_rdp(event)
            return rdp

    def _compute_unit_rdp(self, event: DpEvent) -> np.ndarray:
        acc = self._fresh()
        acc.compose(self._handed(event), 1)
        rdp = np.array(acc._rdp, dtype=np.float64)  # pylint: disable=protected-access
        rdp.setflags(write=False)
        return rdp

    def _compose(self, event: DpEvent, count: int) -> None:
        event, count = _unwrap_self_composed(event, count)
        if count:  # a nested SelfComposedDpEvent may have count 0
            self._total = self._total + count * self._unit_rdp(event)

    def _epsilon(self, delta: float) -> float:
        return _rdp.compute_epsilon(self._orders, self._total, delta)[0]

    def _delta(self, epsilon: float) -> float:
        return _rdp.rdp_privacy_accountant.compute_delta(self._orders, self._total, epsilon)[0]

    @property
    def orders(self) -> np.ndarray:
        """The Rényi orders, float64[num_orders]."""
        return np.asarray(self._orders, dtype=np.float64)

    @property
    def rdp(self) -> np.ndarray:
        """The composed RDP curve (nats) at :attr:`orders`, float64[num_orders] (a copy)."""
        return self._total.copy()

    def epsilon_and_order(self, delta: float) -> tuple[float, float]:
        """``(epsilon, optimal order)`` at ``delta``."""
        eps, order = _rdp.compute_epsilon(self._orders, self._total, checks.delta("delta", delta, scalar=True))
        return float(eps), float(order)


class PldAccountant(_DpAccountingAccountant):
    """Privacy-loss-distribution accountant (``dp_accounting.pld.PLDAccountant``, pessimistic estimate).

    Neighbouring relations: all three (per-event limits as ``dp_accounting``'s). Under replace-one,
    dp_accounting's PLD shifts a Gaussian by ``+-C`` (sensitivity ``2C``), as the events assume; under
    replace-one it also composes ``SampledWithReplacementDpEvent(n, K, GaussianDpEvent(z))``, which
    dp_accounting does not (:mod:`jaxfl.accounting.with_replacement`).

    Args:
      value_discretization_interval: width of the privacy-loss grid (nats); smaller is tighter and slower.
      neighboring_relation: ``"add_or_remove_one"`` (default), ``"replace_one"`` or ``"replace_special"``.

    Example:
      >>> accountant = PldAccountant().compose(gaussian_event(3.0, 0.1), 512)
      >>> round(accountant.epsilon(1e-6), 4)                       # jax_privacy's docstring: about 3.77
      3.7697
    """

    name = "pld"
    relations = ALL_RELATIONS

    def __init__(self, value_discretization_interval: float = 1e-4,
                 neighboring_relation: Any = NeighboringRelation.ADD_OR_REMOVE_ONE):
        super().__init__(neighboring_relation)
        self._vdi = checks.positive_float("value_discretization_interval", value_discretization_interval)
        self._acc = PLDAccountantWithReplacement(neighboring_relation=self._relation,
                                                 value_discretization_interval=self._vdi)

    def _config(self) -> dict[str, Any]:
        return {"value_discretization_interval": self._vdi, "neighboring_relation": self._relation}

    def _supports(self, event: DpEvent) -> bool:
        return self._acc.supports(event)

    def _compose(self, event: DpEvent, count: int) -> None:
        try:
            self._acc.compose(event, count)
        except MemoryError as error:  # a tiny noise multiplier spreads the privacy loss over an enormous grid
            raise ValueError(f"the PLD of {event!r} needs a privacy-loss grid of width "
                             f"{self._vdi} too large for memory (is the noise multiplier that small?): use a larger "
                             "value_discretization_interval, or accountant='rdp'") from error

    def _epsilon(self, delta: float) -> float:
        return self._acc.get_epsilon(delta)

    def _delta(self, epsilon: float) -> float:
        return self._acc.get_delta(epsilon)

    @property
    def value_discretization_interval(self) -> float:
        """Width of the privacy-loss grid (nats)."""
        return self._vdi


class _Lazy:
    """An accountant factory that imports its class when first used (no import cycles, no registration as
    an import side effect). Calling it builds an accountant; ``relations`` is the class's."""

    def __init__(self, module: str, qualname: str):
        self.module, self.qualname = module, qualname

    def load(self) -> type:
        import importlib

        return getattr(importlib.import_module(self.module), self.qualname)

    def __call__(self, **kwargs: Any) -> Accountant:
        return self.load()(**kwargs)

    @property
    def relations(self) -> frozenset:
        return self.load().relations

    def __repr__(self) -> str:
        return f"{self.module}.{self.qualname}"


#: The accountants jaxfl ships, by name: one table. ``register_accountant`` adds users' own.
ACCOUNTANTS: dict[str, Callable[..., Accountant]] = {
    "rdp": RdpAccountant,                                              # dp_accounting's RDP
    "pld": PldAccountant,                                              # dp_accounting's PLD
    "lowy": _Lazy("jaxfl.accounting.sgd_noise", "LowyAccountant"),     # Lowy & Razaviyayn: sampling with replacement
    "shuffle": _Lazy("jaxfl.accounting.shuffle_model", "ShuffleAccountant"),  # both ISRL-DP papers: shuffle model
    "dprec": _Lazy("jaxfl.accounting.dprec", "DprecAccountant"),         # Triastcyn et al.: DP-REC, Theorem 1
    "vandijk-moments": _Lazy("jaxfl.accounting.moments", "MomentsAccountant"),  # van Dijk et al.: Lemma D.1
}


def register_accountant(name: str, factory: Callable[..., Accountant], *, overwrite: bool = False) -> None:
    """Registers ``factory(**kw) -> Accountant`` under ``name`` for :func:`make_accountant` and the CLI.

    A factory that declares ``relations`` (a class deriving from jaxfl's accountants does) and accepts
    ``neighboring_relation=`` can serve ledgers of any statement whose relation it supports; one that
    does not is used by ledgers only for statements of its own relation (``neighboring_relation``).

    Example:
      >>> register_accountant("my-rdp", lambda **kw: RdpAccountant(orders=[2, 4, 8, 16, 32], **kw))
      >>> accountant = make_accountant("my-rdp")
      >>> round(accountant.compose(gaussian_event(1.0)).epsilon(1e-5), 4)
      5.0879
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"accountant name must be a non-empty string, got {name!r}")
    if name in ACCOUNTANTS and not overwrite:
        raise ValueError(f"accountant {name!r} is already registered")
    ACCOUNTANTS[name] = factory


def available_accountants() -> tuple[str, ...]:
    """Names accepted by :func:`make_accountant`, sorted.

    Example:
      >>> available_accountants()
      ('dprec', 'lowy', 'pld', 'rdp', 'shuffle', 'vandijk-moments')
    """
    return tuple(sorted(ACCOUNTANTS))


def _factory(name: str) -> Callable[..., Accountant]:
    try:
        return ACCOUNTANTS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown accountant {name!r}; choose from {', '.join(available_accountants())}") from None


def make_accountant(name: str, **kwargs: Any) -> Accountant:
    """A fresh accountant by registry name (``"rdp"``, ``"pld"``, ...); ``kwargs`` go to its constructor.

    Example:
      >>> accountant = make_accountant("rdp", neighboring_relation="replace_one")
      >>> accountant.neighboring_relation.name
      'REPLACE_ONE'
    """
    return _factory(name)(**kwargs)


def accountant_relations(name: str) -> frozenset | None:
    """The neighbouring relations the accountant registered as ``name`` declares (``relations``), or None
    for a user's factory that declares none.

    Example:
      >>> sorted(r.name for r in accountant_relations("pld"))
      ['ADD_OR_REMOVE_ONE', 'REPLACE_ONE', 'REPLACE_SPECIAL']
    """
    relations = getattr(_factory(name), "relations", None)
    return None if relations is None else frozenset(relations)


def check_relation(name: str, relation: Any) -> NeighboringRelation:
    """``relation`` as a ``NeighboringRelation``; raises the one ``ValueError`` naming the accountant and
    the relation when the accountant registered as ``name`` does not support it. A user's factory that
    declares no ``relations`` supports the ``neighboring_relation`` of the accountants it builds.

    Example:
      >>> check_relation("rdp", "replace_one")
      <NeighboringRelation.REPLACE_ONE: 2>
      >>> check_relation("pld-with-replacement", "add_or_remove_one")
      Traceback (most recent call last):
      ...
      ValueError: ...
    """
    relation = _relation(relation)
    factory = _factory(name)
    supported = accountant_relations(name)
    if supported is None:  # a user's factory: its accountants' own relation is the only one it supports
        own = getattr(factory(), "neighboring_relation", None)
        if own is None:
            raise ValueError(f"the {name!r} accountant declares no neighbouring relation (neither 'relations' on "
                             f"its factory nor 'neighboring_relation' on its accountants), so it cannot be used "
                             f"for a statement about {relation.name.lower()!r} neighbours")
        supported = frozenset({_relation(own)})
    cls = factory.load() if isinstance(factory, _Lazy) else factory
    _refuse_relation(name, relation, supported, getattr(cls, "relation_hint", ""))
    return relation


SAMPLING_SCHEMES = ("poisson", "with_replacement", "none")


def gaussian_event(noise_multiplier: float, sampling_rate: float = 1.0, steps: int = 1,
                   sampling: str = "poisson", dataset_size: int | None = None,
                   sample_size: int | None = None) -> DpEvent:
    """The ``dp_accounting`` event of ``steps`` (sub)sampled Gaussian-mechanism releases.

    Args:
      noise_multiplier: noise standard deviation / the bound on each record's contribution (> 0, unitless;
        the L2 sensitivity under add/remove-one, half of it under replace-one).
      sampling_rate: Poisson inclusion probability q in (0, 1]; q = 1 is the plain Gaussian.
      steps: number of releases (>= 0); 0 gives ``NoOpDpEvent``.
      sampling: ``"poisson"`` (``PoissonSampledDpEvent``), ``"with_replacement"``
        (``SampledWithReplacementDpEvent``, needs ``dataset_size`` and ``sample_size``; accounted by the
        ``"pld"`` accountant under replace-one neighbours and by ``"lowy"``'s closed forms) or ``"none"``
        (``GaussianDpEvent``; q must be 1).
      dataset_size: records n the sample is drawn from (``"with_replacement"`` only).
      sample_size: records K drawn per step (``"with_replacement"`` only).

    Returns:
      The event of one step, wrapped in ``SelfComposedDpEvent`` when ``steps > 1``.

    Example:
      >>> gaussian_event(1.1, 0.01, steps=3)
      SelfComposedDpEvent(event=PoissonSampledDpEvent(sampling_probability=0.01, event=GaussianDpEvent(...)), count=3)
    """
    sigma = checks.positive_float("noise_multiplier", noise_multiplier)
    q = checks.sampling_rate("sampling_rate", sampling_rate)
    steps = checks.non_negative_int("steps", steps)
    gauss = _events.clipped_sum_gaussian(sigma)
    if sampling == "poisson":
        event = gauss if q == 1.0 else dp_accounting.PoissonSampledDpEvent(q, gauss)
    elif sampling == "none":
        if q != 1.0:
            raise ValueError(f"sampling='none' needs sampling_rate 1.0, got {sampling_rate!r}")
        event = gauss
    elif sampling == "with_replacement":
        if dataset_size is None or sample_size is None:
            raise ValueError("sampling='with_replacement' needs dataset_size and sample_size")
        n = checks.positive_int("dataset_size", dataset_size)
        k = checks.positive_int("sample_size", sample_size)
        if q != 1.0 and not np.isclose(q, k / n):
            raise ValueError(
                f"sampling_rate {sampling_rate!r} disagrees with sample_size/dataset_size = {k}/{n}")
        event = dp_accounting.SampledWithReplacementDpEvent(n, k, gauss)
    else:
        raise ValueError(f"sampling must be one of {', '.join(SAMPLING_SCHEMES)}, got {sampling!r}")
    if steps == 0:
        return dp_accounting.NoOpDpEvent()
    return event if steps == 1 else dp_accounting.SelfComposedDpEvent(event, steps)


def rdp_to_epsilon(orders: Sequence[float], rdp: Sequence[float], delta: float) -> tuple[float, float]:
    """``(epsilon, optimal order)`` of an RDP curve at ``delta``, by ``dp_accounting.rdp.compute_epsilon``
    (the modern conversion). Use for mechanisms whose RDP curve is known but have no ``DpEvent``.

    Example:
      >>> import math
      >>> orders = [2, 4, 8, 16, 32, 64]
      >>> rdp = [a / (2 * 1.0**2) for a in orders]      # the Gaussian mechanism at z = 1: alpha / (2 z^2)
      >>> eps, order = rdp_to_epsilon(orders, rdp, delta=1e-5)
      >>> round(eps, 4), order
      (5.0879, 4.0)
      >>> eps <= min(r + math.log(1e5) / (a - 1) for a, r in zip(orders, rdp))   # below the classic conversion
      True
    """
    delta = checks.delta("delta", delta, scalar=True)
    eps, order = _rdp.compute_epsilon(list(orders), list(rdp), delta)
    return float(eps), float(order)


def rdp_to_delta(orders: Sequence[float], rdp: Sequence[float], epsilon: float) -> tuple[float, float]:
    """``(delta, optimal order)`` of an RDP curve at ``epsilon`` (nats), by ``dp_accounting``.

    Example:
      >>> orders = [2, 4, 8, 16, 32, 64]
      >>> delta, order = rdp_to_delta(orders, [a / 2 for a in orders], epsilon=5.0879)   # inverts rdp_to_epsilon
      >>> f"{delta:.1e}", order
      ('1.0e-05', 4.0)
    """
    epsilon = checks.epsilon("epsilon", epsilon, allow_zero=True)
    d, order = _rdp.rdp_privacy_accountant.compute_delta(list(orders), list(rdp), epsilon)
    return float(d), float(order)
