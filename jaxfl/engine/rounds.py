"""One federated round as one program: participation, vmapped clients, aggregation, server update.

Every algorithm of jaxfl is built from :func:`make_round`; none writes its own round loop.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from jaxfl.data.federated import FederatedData
from jaxfl.engine import sharding
from jaxfl.engine.participation import Participation
from jaxfl.privacy import keys as keys_lib

# client_fn(broadcast, x_i, y_i, count_i, silo_key[, silo_values_i]) -> (message, info)
ClientFn = Callable[..., tuple]
# aggregator(messages [num_silos, ...], weights [num_silos], round_key) -> aggregate
Aggregator = Callable[[Any, jnp.ndarray, jax.Array], Any]
# server_fn(state, aggregate, context) -> (state, info)
ServerFn = Callable[..., tuple]


class RoundContext(NamedTuple):
    """What the server knows in a round besides the aggregate."""

    total_weight: jnp.ndarray  # sum of participation weights (number of participants)
    round_key: jax.Array
    counts: jnp.ndarray  # int32[num_silos], public silo sizes (0 for padding silos)


def weighted_sum(messages, weights, round_key):
    """``sum_i weights_i * message_i``, reduced in one fixed order on replicated messages."""
    del round_key
    messages, weights = sharding.replicate((messages, weights))  # no-op for already replicated weights
    return jax.tree_util.tree_map(lambda m: jnp.tensordot(weights.astype(m.dtype), m, axes=1), messages)


def participant_count_sum(messages, weights, round_key):
    """``sum_i message_i`` over participants (``weights_i > 0``) in int32, for integer messages such as
    the shuffle model's counts of one-bits, which are added, not weighted."""
    del round_key
    messages, weights = sharding.replicate((messages, weights))
    return jax.tree_util.tree_map(
        lambda m: jnp.sum(jnp.where(weights.reshape((-1,) + (1,) * (m.ndim - 1)) > 0, m, 0), axis=0,
                          dtype=jnp.int32), messages)


def _fit_silo_axis(values, num_silos: int):
    values = jnp.asarray(values)
    if values.ndim == 0 or values.shape[0] > num_silos:
        raise ValueError(f"per-silo values need a leading axis of at most {num_silos} silos, got shape {values.shape}")
    pad = num_silos - values.shape[0]
    return values if pad == 0 else jnp.concatenate([values, jnp.repeat(values[-1:], pad, axis=0)])


def make_round(client_fn: ClientFn, server_fn: ServerFn, participation: Participation, *,
               broadcast: Callable[[Any], Any] = lambda state: state.params,
               aggregator: Aggregator = weighted_sum, per_silo: Any = None,
               participation_key: Callable[[Any, jax.Array], jax.Array] | None = None):
    """Builds ``round(state, data, round_key) -> (state, info)``.

    The round draws participation weights ``w: [num_silos]``, runs ``client_fn`` on every silo under
    ``vmap`` (non-participants' messages get weight 0), aggregates ``sum_i w_i m_i`` with
    ``aggregator`` and hands it, with a :class:`RoundContext`, to ``server_fn``. Client infos are averaged over
    participants; the info also reports ``participants``.

    ``per_silo`` (optional) is a pytree whose leaves have a leading axis of one entry per silo (e.g.
    per-silo noise multipliers for per-silo budgets, seed 000's Alg. 7), or a callable
    ``num_silos -> pytree`` (e.g. ``jnp.arange`` for silo indices); silo ``i``'s slice is passed to
    ``client_fn`` as a sixth argument. Padding silos appended to the data (count 0, e.g. by
    sharding) reuse the last entry; they never take part.
    """

    def round_fn(state, data: FederatedData, round_key):
        weights = participation(round_key, data.counts)
        silo_ids = jnp.arange(data.num_silos)
        silo_keys = jax.vmap(keys_lib.silo_key, in_axes=(None, 0))(round_key, silo_ids)
        sent = broadcast(state)
        if per_silo is None:
            messages, client_info = jax.vmap(client_fn, in_axes=(None, 0, 0, 0, 0))(
                sent, data.x, data.y, data.counts, silo_keys)
        else:
            values = per_silo(data.num_silos) if callable(per_silo) else per_silo
            values = jax.tree_util.tree_map(lambda v: _fit_silo_axis(v, data.num_silos), values)
            messages, client_info = jax.vmap(client_fn, in_axes=(None, 0, 0, 0, 0, 0))(
                sent, data.x, data.y, data.counts, silo_keys, values)
        weights, client_info = sharding.replicate((weights, client_info))
        total = jnp.sum(weights)
        aggregate = aggregator(messages, weights, round_key)
        state, info = server_fn(state, aggregate, RoundContext(total, round_key, data.counts))
        inverse = 1.0 / jnp.maximum(total, 1.0)
        info = dict(info)
        for name, value in client_info.items():
            info[name] = jnp.sum(weights * value) * inverse
        info["participants"] = total
        return state, info

    return round_fn
