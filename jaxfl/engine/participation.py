"""Which silos take part in a round: every factory's ``participation=`` argument.

One argument, the same in every algorithm that samples silos:

* ``None``: every silo with records takes part in every round (:func:`all_silos`);
* an int ``M``: ``M`` silos drawn uniformly without replacement (:func:`uniform`);
* :func:`poisson` ``(q)``: each silo independently with probability ``q`` (DP-FedAvg's client sampling);
* :func:`with_replacement` ``(B)``: ``B`` slots filled with replacement (DP-REC's client sampling).

An algorithm takes the rules its privacy analysis covers and names the one to use otherwise (DP-FedAvg's
accounting is for Poisson sampling, DP-REC's for slots drawn with replacement, the shuffle model's for a fixed
``M``). Each silo's draw comes from its own key ``derive(round, silo, 0, PARTICIPATION)``, so whether silo ``i``
takes part depends only on ``(root, round, i)``. Silos with zero records (padding) never do.

Example:
  >>> from jaxfl.engine import participation
  >>> participation.resolve(3).max_participants            # an int M: M silos, uniformly without replacement
  3
  >>> participation.poisson(0.1).rate
  0.1
  >>> participation.with_replacement(8).slots
  8
"""
from __future__ import annotations

import warnings
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from jaxfl.privacy import keys as keys_lib
from jaxfl.privacy import uniform as uniform_draws


class Participation(NamedTuple):
    """A participation rule: ``rule(round_key, counts) -> weights float32[num_silos]`` and, where the rule
    bounds it, ``max_participants`` (``M`` for :func:`uniform`), which lets
    :func:`jaxfl.engine.rounds.make_round` run the client on the participants only; ``rate`` is ``q`` for
    :func:`poisson` (an accountant needs it), else None. Any function of that signature may stand in for one
    (:func:`resolve` wraps it, without a bound).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> every_other = Participation(lambda key, counts: (jnp.arange(counts.shape[0]) % 2 == 0).astype(jnp.float32),
      ...                             max_participants=2)            # your own rule: silos 0 and 2 of 4
      >>> every_other.weights(jax.random.key(0), jnp.array([5, 5, 5, 5])).tolist()
      [1.0, 0.0, 1.0, 0.0]
      >>> poisson(0.1).rate, uniform(3).max_participants
      (0.1, 3)
    """

    weights: Callable[[jax.Array, jnp.ndarray], jnp.ndarray]
    max_participants: int | None = None
    rate: float | jax.Array | None = None

    def __call__(self, round_key, counts):
        return self.weights(round_key, counts)


def _silo_uniforms(round_key, num_silos):
    def draw(silo):
        k = keys_lib.step_key(keys_lib.silo_key(round_key, silo), 0, keys_lib.Purpose.PARTICIPATION)
        return uniform_draws.uniform(k)

    return jax.vmap(draw)(jnp.arange(num_silos))


def all_silos() -> Participation:
    """Every silo with records takes part in every round.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> all_silos().weights(jax.random.key(0), jnp.array([5, 0, 5])).tolist()        # the empty silo is out
      [1.0, 0.0, 1.0]
    """
    return Participation(lambda round_key, counts: (counts > 0).astype(jnp.float32))


def uniform(count: int) -> Participation:
    """``count`` silos (``M``) drawn uniformly without replacement (Lowy & Razaviyayn's ``M_r = M``); what
    ``participation=M`` means in every factory.

    Uses the ``count`` largest per-silo uniforms among the silos with records. Its ``max_participants``
    (``M``) lets :func:`jaxfl.engine.rounds.make_round` run the client on the participants only.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> rule = uniform(2)
      >>> weights = rule.weights(jax.random.key(0), jnp.array([5, 0, 5, 5, 5, 5]))
      >>> float(weights.sum()), float(weights[1]), rule.max_participants           # never the empty silo 1
      (2.0, 0.0, 2)
    """
    m = int(count)
    if m < 1:
        raise ValueError(f"participation must be >= 1 silo per round, got {count}")

    def weights(round_key, counts):
        n = counts.shape[0]
        if m > n:
            raise ValueError(f"participation={m} exceeds the number of silos ({n})")
        u = jnp.where(counts > 0, _silo_uniforms(round_key, n), -1.0)
        _, chosen = jax.lax.top_k(u, m)
        return jnp.zeros(n, jnp.float32).at[chosen].set(1.0) * (counts > 0)

    return Participation(weights, max_participants=m)


def poisson(rate) -> Participation:
    """Each silo takes part independently with probability ``rate`` (may be traced).

    Example (its ``rate`` is what the ledger amplifies by; the draw is keyed by round and silo):
      >>> import jax, jax.numpy as jnp
      >>> rule = poisson(0.5)
      >>> draws = jax.vmap(lambda r: rule.weights(jax.random.fold_in(jax.random.key(0), r), jnp.full(100, 5)))(
      ...     jnp.arange(50))
      >>> rule.rate, 0.45 < float(draws.mean()) < 0.55
      (0.5, True)
    """

    def weights(round_key, counts):
        u = _silo_uniforms(round_key, counts.shape[0])
        return ((u < rate) & (counts > 0)).astype(jnp.float32)

    return Participation(weights, rate=rate)


def resolve(participation, num_silos_hint=None) -> Participation:
    """``None`` -> all silos; an int ``M`` -> :func:`uniform`; a :class:`Participation` is returned as is, any
    other callable wrapped in one (no bound on the participants).

    Example:
      >>> resolve(3).max_participants, resolve(None).max_participants, resolve(poisson(0.1)).rate
      (3, None, 0.1)
      >>> resolve("all")
      Traceback (most recent call last):
      ...
      ValueError: participation must be None, an int or a callable, got 'all'
    """
    if participation is None:
        return all_silos()
    if isinstance(participation, int):
        return uniform(participation)
    if isinstance(participation, Participation):
        return participation
    if callable(participation):
        return Participation(participation)
    raise ValueError(f"participation must be None, an int or a callable, got {participation!r}")


def argument(participation, silos_per_round, factory: str):
    """A factory's ``participation``, given under that name or its deprecated one, ``silos_per_round`` (which
    warns; both at once is an error).

    Example:
      >>> argument(3, None, "dp_fedavg")
      3
      >>> argument(3, 3, "dp_fedavg")
      Traceback (most recent call last):
      ...
      ValueError: dp_fedavg: give participation= only (silos_per_round= is its deprecated name)
    """
    if silos_per_round is None:
        return participation
    if participation is not None:
        raise ValueError(f"{factory}: give participation= only (silos_per_round= is its deprecated name)")
    warnings.warn(f"{factory}(silos_per_round=...) is deprecated: use participation= (the same values)",
                  DeprecationWarning, stacklevel=3)
    return silos_per_round


class Slots(NamedTuple):
    """``slots`` silo ids drawn with replacement each round (:func:`with_replacement`):
    ``draw(round_key, counts) -> int32[slots]``; for :func:`jaxfl.engine.rounds.make_slot_round`.

    Example: :func:`with_replacement`.
    """

    draw: Callable[[jax.Array, jnp.ndarray], jnp.ndarray]
    slots: int

    def __call__(self, round_key, counts):
        return self.draw(round_key, counts)


def with_replacement(slots: int) -> Slots:
    """``(round_key, counts) -> int32[slots]``: silo ids drawn uniformly **with replacement** among the
    silos with records (DP-REC's client sampling; a silo may fill several slots). The draw is the
    server's, from ``derive(round, SERVER, 0, PARTICIPATION)``; use with
    :func:`jaxfl.engine.rounds.make_slot_round`.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> slots = with_replacement(4)
      >>> ids = slots(jax.random.key(0), jnp.array([5, 0, 5, 5]))
      >>> ids.shape, slots.slots, 1 in ids.tolist()                # four ids among silos 0, 2, 3
      ((4,), 4, False)
    """
    b = int(slots)
    if b < 1:
        raise ValueError(f"slots must be >= 1, got {slots}")

    def draw(round_key, counts):
        key = keys_lib.derive_from_round(round_key, silo=keys_lib.SERVER, step=0,
                                         purpose=keys_lib.Purpose.PARTICIPATION)
        real = (counts > 0).astype(jnp.float32)
        return jax.random.choice(key, counts.shape[0], (b,), replace=True, p=real / jnp.sum(real)).astype(jnp.int32)

    return Slots(draw, b)
