"""Which silos take part in a round: ``(round_key, counts) -> weights float32[num_silos]``.

Each silo's draw comes from its own key ``derive(round, silo, 0, PARTICIPATION)``, so whether silo
``i`` takes part depends only on ``(root, round, i)``. Silos with zero records (padding) never do.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from jaxfl.privacy import keys as keys_lib
from jaxfl.privacy import uniform as uniform_draws


class Participation(NamedTuple):
    """A participation rule: ``rule(round_key, counts) -> weights float32[num_silos]`` and, where the rule
    bounds it, ``max_participants`` (``M`` for :func:`uniform`), which lets
    :func:`jaxfl.engine.rounds.make_round` run the client on the participants only. Any function of that
    signature may stand in for one (:func:`resolve` wraps it, without a bound)."""

    weights: Callable[[jax.Array, jnp.ndarray], jnp.ndarray]
    max_participants: int | None = None

    def __call__(self, round_key, counts):
        return self.weights(round_key, counts)


def _silo_uniforms(round_key, num_silos):
    def draw(silo):
        k = keys_lib.step_key(keys_lib.silo_key(round_key, silo), 0, keys_lib.Purpose.PARTICIPATION)
        return uniform_draws.uniform(k)

    return jax.vmap(draw)(jnp.arange(num_silos))


def all_silos() -> Participation:
    """Every silo with records takes part in every round."""
    return Participation(lambda round_key, counts: (counts > 0).astype(jnp.float32))


def uniform(silos_per_round: int) -> Participation:
    """``silos_per_round`` silos drawn uniformly without replacement (Lowy & Razaviyayn's ``M_r = M``).

    Uses the ``silos_per_round`` largest per-silo uniforms among the silos with records. Its
    ``max_participants`` (``M``) lets :func:`jaxfl.engine.rounds.make_round` run the client on the participants
    only.
    """
    m = int(silos_per_round)
    if m < 1:
        raise ValueError(f"silos_per_round must be >= 1, got {silos_per_round}")

    def weights(round_key, counts):
        n = counts.shape[0]
        if m > n:
            raise ValueError(f"silos_per_round={m} exceeds the number of silos ({n})")
        u = jnp.where(counts > 0, _silo_uniforms(round_key, n), -1.0)
        _, chosen = jax.lax.top_k(u, m)
        return jnp.zeros(n, jnp.float32).at[chosen].set(1.0) * (counts > 0)

    return Participation(weights, max_participants=m)


def poisson(rate) -> Participation:
    """Each silo takes part independently with probability ``rate`` (may be traced)."""

    def weights(round_key, counts):
        u = _silo_uniforms(round_key, counts.shape[0])
        return ((u < rate) & (counts > 0)).astype(jnp.float32)

    return Participation(weights)


def resolve(participation, num_silos_hint=None) -> Participation:
    """``None`` -> all silos; an int ``M`` -> :func:`uniform`; a :class:`Participation` is returned as is, any
    other callable wrapped in one (no bound on the participants)."""
    if participation is None:
        return all_silos()
    if isinstance(participation, int):
        return uniform(participation)
    if isinstance(participation, Participation):
        return participation
    if callable(participation):
        return Participation(participation)
    raise ValueError(f"participation must be None, an int or a callable, got {participation!r}")


def with_replacement(slots: int):
    """``(round_key, counts) -> int32[slots]``: silo ids drawn uniformly **with replacement** among the
    silos with records (DP-REC's client sampling; a silo may fill several slots). The draw is the
    server's, from ``derive(round, SERVER, 0, PARTICIPATION)``; use with
    :func:`jaxfl.engine.rounds.make_slot_round`."""
    b = int(slots)
    if b < 1:
        raise ValueError(f"slots must be >= 1, got {slots}")

    def draw(round_key, counts):
        key = keys_lib.derive_from_round(round_key, silo=keys_lib.SERVER, step=0,
                                         purpose=keys_lib.Purpose.PARTICIPATION)
        real = (counts > 0).astype(jnp.float32)
        return jax.random.choice(key, counts.shape[0], (b,), replace=True, p=real / jnp.sum(real)).astype(jnp.int32)

    return draw
