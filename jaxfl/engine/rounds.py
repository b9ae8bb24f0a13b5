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
from jaxfl.engine.protocol import SiloState
from jaxfl.privacy import keys as keys_lib

# client_fn(broadcast, x_i, y_i, count_i, silo_key[, silo_values_i]) -> (message, info)
ClientFn = Callable[..., tuple]
# server_fn(state, aggregate, context) -> (state, info)
ServerFn = Callable[..., tuple]


class RoundContext(NamedTuple):
    """What the server knows in a round besides the aggregate.

    Example:
      >>> ctx = RoundContext(total_weight=jnp.float32(2), round_key=jax.random.key(0), counts=jnp.array([3, 5, 0]))
      >>> int(jnp.sum(ctx.counts > 0))              # real silos (a padding silo has count 0)
      2
    """

    total_weight: jnp.ndarray  # sum of participation weights (number of participants)
    round_key: jax.Array
    counts: jnp.ndarray  # int32[num_silos], public silo sizes (0 for padding silos)
    inputs: Any = None  # the round's scheduled inputs (FederatedAlgorithm.schedule[r]), or None


class Aggregator(NamedTuple):
    """An aggregator ``(messages [num_silos, ...], weights [num_silos], round_key) -> aggregate`` and whether it
    depends on participants only (``participants_only``: non-participants' messages weighted 0 and added in silo
    order, so that :func:`make_round` may run the participants' clients alone). A plain function of that
    signature may stand in for one (treated as depending on every silo).

    Example:
      >>> mean = Aggregator(lambda m, w, key: jnp.tensordot(w, m, 1) / jnp.sum(w), participants_only=True)
      >>> mean(jnp.array([[1.0, 2.0], [3.0, 4.0], [9.0, 9.0]]), jnp.array([1.0, 1.0, 0.0]), jax.random.key(0))
      Array([2., 3.], dtype=float32)
    """

    aggregate: Callable[[Any, jnp.ndarray, jax.Array], Any]
    participants_only: bool = False

    def __call__(self, messages, weights, round_key):
        return self.aggregate(messages, weights, round_key)


def _weighted_sum(messages, weights, round_key):
    """``sum_i weights_i * message_i``, added silo after silo in silo order on replicated messages.

    The order is explicit (a ``scan`` over silos) rather than left to a reduction: XLA:CPU reduces in
    different orders depending on what it fuses into the reduction (e.g. a message recomputed inline on
    one device, all-gathered from four), and results must not depend on the number of devices.
    """
    del round_key
    messages, weights = sharding.replicate((messages, weights))  # no-op for already replicated weights

    def in_silo_order(m):
        add = lambda total, wm: (total + wm[0] * wm[1], None)
        return jax.lax.scan(add, jnp.zeros(m.shape[1:], m.dtype), (weights.astype(m.dtype), m))[0]

    return jax.tree_util.tree_map(in_silo_order, messages)


weighted_sum = Aggregator(_weighted_sum, participants_only=True)


def _participant_count_sum(messages, weights, round_key):
    """``sum_i message_i`` over participants (``weights_i > 0``) in int32, for integer messages such as
    the shuffle model's counts of one-bits, which are added, not weighted."""
    del round_key
    messages, weights = sharding.replicate((messages, weights))
    return jax.tree_util.tree_map(
        lambda m: jnp.sum(jnp.where(weights.reshape((-1,) + (1,) * (m.ndim - 1)) > 0, m, 0), axis=0,
                          dtype=jnp.int32), messages)


participant_count_sum = Aggregator(_participant_count_sum, participants_only=True)


def _fit_silo_axis(values, num_silos: int):
    values = jnp.asarray(values)
    if values.ndim == 0 or values.shape[0] > num_silos:
        raise ValueError(f"per-silo values need a leading axis of at most {num_silos} silos, got shape {values.shape}")
    pad = num_silos - values.shape[0]
    return values if pad == 0 else jnp.concatenate([values, jnp.repeat(values[-1:], pad, axis=0)])


def make_round(client_fn: ClientFn, server_fn: ServerFn, participation: Participation, *,
               broadcast: Callable[[Any], Any] = lambda state: state.params,
               aggregator: Aggregator = weighted_sum, per_silo: Any = None,
               participation_key: Callable[[Any, jax.Array], jax.Array] | None = None,
               clients_per_pass: int | None = None, silo_state: bool = False, scheduled: bool = False,
               active: Callable[[Any], jnp.ndarray] | None = None, participants_only: bool = True):
    """Builds ``round(state, data, round_key[, inputs]) -> (state, info)``.

    The round draws participation weights ``w: [num_silos]``, runs ``client_fn`` on every silo under
    ``vmap`` (non-participants' messages get weight 0), aggregates ``sum_i w_i m_i`` with
    ``aggregator`` and hands it, with a :class:`RoundContext`, to ``server_fn``. Client infos are averaged over
    participants; the info also reports ``participants``.

    The client is called ``client_fn(sent, x_i, y_i, count_i, silo_key_i[, per_silo_i], **extra)`` with
    ``sent = broadcast(server state)`` and returns ``(message, info)``; ``extra`` holds only what the round
    was built for:

    - ``silo_state=True``: the state is a :class:`jaxfl.engine.protocol.SiloState` ``(server, silos)``;
      the client receives its slice as ``silo_state=`` and returns ``(message, info, new_silo_state)``.
      Only participants' (``w_i > 0``) silo state changes. ``broadcast`` and ``server_fn`` receive
      ``state.server``, never the silo state: a client shares what it puts in its message, nothing more.
    - ``scheduled=True``: the round takes the round's inputs (``FederatedAlgorithm.schedule[r]``) as a
      fourth argument; the client receives them whole as ``inputs=`` with its silo index as ``silo=``
      (to pick its own entry of per-silo inputs), and the server as ``RoundContext.inputs``.
      ``active(inputs) -> [num_silos]`` (optional) masks the drawn participation (e.g. the silos whose
      update arrives this round in a simulated asynchronous timeline).

    ``per_silo`` (optional) is a pytree whose leaves have a leading axis of one entry per silo (e.g.
    per-silo noise multipliers for per-silo budgets, Lowy & Razaviyayn's Alg. 7), or a callable
    ``num_silos -> pytree`` (e.g. ``jnp.arange`` for silo indices); silo ``i``'s slice is passed to
    ``client_fn`` as a sixth argument. Padding silos appended to the data (count 0, e.g. by
    sharding) reuse the last entry; they never take part.

    ``participation_key(state, round_key) -> key`` (optional) picks the key the participation is drawn
    with, e.g. a key stored in the state so that one sample of silos serves several rounds (FedProx-SVRG's
    epochs); silo keys still come from ``round_key``.

    **Participants only.** When the participation fixes how many silos take part at most (its
    ``max_participants``, e.g. ``M`` for :func:`jaxfl.engine.participation.uniform`) and the
    aggregator adds messages in silo order with non-participants weighted 0 (an :class:`Aggregator` with
    ``participants_only``: :data:`weighted_sum`, :data:`participant_count_sum`), the round gathers the participants (in
    silo order, keys and per-silo values by silo id) and runs ``client_fn`` on those ``M`` only (padded with
    weight-0 slots to :func:`jaxfl.engine.sharding.padded_silos` on a silo mesh): ``M / N`` of the client
    work. Keys and weights are those of the all-silo round, so results equal it up to floating-point
    rounding (XLA may contract ``a * b + c`` differently in the two programs), and are bitwise the same on
    every device layout. ``participants_only=False`` always runs every silo.

    ``clients_per_pass`` (optional; needs the default ``weighted_sum`` aggregator and no ``per_silo``):
    instead of running ``client_fn`` on every silo, the participants are gathered and processed
    ``clients_per_pass`` at a time in a ``while`` loop, so a round costs about as many client runs as there
    are participants (Poisson sampling of few clients out of many). Same keys, same result up to the
    order of floating-point summation.

    Example:
      >>> from typing import NamedTuple
      >>> import numpy as np, jaxfl
      >>> from jaxfl.data import iid
      >>> from jaxfl.engine import FederatedAlgorithm
      >>> from jaxfl.engine.participation import uniform
      >>> from jaxfl.models import binary_accuracy, init_linear, logistic_loss
      >>> class State(NamedTuple):
      ...     params: dict
      >>> def client(params, x, y, count, silo_key):          # one silo (vmapped): its mean gradient
      ...     mask = jnp.arange(x.shape[0]) < count
      ...     mean_loss = lambda p: jnp.sum(jax.vmap(logistic_loss, (None, 0, 0))(p, x, y) * mask) / count
      ...     return jax.grad(mean_loss)(params), {}
      >>> def server(state, summed, ctx):                     # a step along the participants' mean
      ...     return State(jax.tree.map(lambda p, g: p - g / ctx.total_weight, state.params, summed)), {}
      >>> fedsgd = FederatedAlgorithm(init=State, round=make_round(client, server, uniform(2)), name="fedsgd")
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (400, 5)))
      >>> y = (x[:, 0] > 0).astype(np.float32)
      >>> result = jaxfl.train(fedsgd, iid(x, y, num_silos=4, seed=0), init_linear(5), rounds=50, progress=False)
      >>> float(binary_accuracy(result.params, x, y)) > 0.95, result.history[-1]["participants"]
      (True, 2.0)
    """
    if clients_per_pass is not None and (aggregator is not weighted_sum or per_silo is not None):
        raise ValueError("clients_per_pass needs the weighted_sum aggregator and no per_silo values")
    if clients_per_pass is not None and int(clients_per_pass) < 1:
        raise ValueError(f"clients_per_pass must be >= 1, got {clients_per_pass}")
    if active is not None and not scheduled:
        raise ValueError("active= masks participation by the round's inputs: it needs scheduled=True")

    def round_fn(state, data: FederatedData, round_key, inputs=None):
        if scheduled and inputs is None:
            raise ValueError("this round is scheduled: call it with the round's inputs "
                             "(FederatedAlgorithm.schedule[r])")
        server_state, silos = (state.server, state.silos) if silo_state else (state, None)
        drawn_with = round_key if participation_key is None else participation_key(server_state, round_key)
        weights = participation(drawn_with, data.counts)
        if active is not None:
            weights = weights * jnp.asarray(active(inputs), weights.dtype)
        call = _client_call(client_fn, broadcast(server_state), silo_state, scheduled, inputs)
        if clients_per_pass is not None:
            summed, info_sums, silos = _passes(call, data, silos, round_key, weights, int(clients_per_pass))
            server_state, info = _server_step(server_state, summed, info_sums, jnp.sum(weights), round_key,
                                              data.counts, server_fn, inputs)
        else:
            values = per_silo(data.num_silos) if callable(per_silo) else per_silo
            values = jax.tree_util.tree_map(lambda v: _fit_silo_axis(v, data.num_silos), values)
            slots = _participant_slots(participation, aggregator) if participants_only else None
            if slots is None:
                silo_ids = jnp.arange(data.num_silos)
                silo_keys = jax.vmap(keys_lib.silo_key, in_axes=(None, 0))(round_key, silo_ids)
                out = jax.vmap(call)(data.x, data.y, data.counts, silo_keys, silo_ids, values, silos)
                if silo_state:
                    silos = _keep_participants(out[2], silos, weights)
            else:
                out, weights, silos = _run_participants(call, data, values, silos, round_key, weights, slots)
            messages, client_info = out[0], out[1]
            server_state, info = _finish(server_state, messages, client_info, weights, round_key, data.counts,
                                         aggregator, server_fn, inputs)
        return (SiloState(server_state, silos) if silo_state else server_state), info

    return round_fn


def _client_call(client_fn, sent, silo_state: bool, scheduled: bool, inputs):
    """``(x, y, count, key, silo, per_silo, silo_state) -> client_fn(...)`` with the round's conventions
    (see :func:`make_round`); ``per_silo`` / ``silo_state`` are None when unused."""

    def call(x, y, count, key, silo, values, state_i):
        args = (sent, x, y, count, key) + (() if values is None else (values,))
        extra = {}
        if silo_state:
            extra["silo_state"] = state_i
        if scheduled:
            extra.update(inputs=inputs, silo=silo)
        out = client_fn(*args, **extra)
        if silo_state and len(out) != 3:
            raise ValueError("with silo_state=True a client returns (message, info, new_silo_state)")
        return out

    return call


def _participant_slots(participation, aggregator) -> int | None:
    """How many slots the participants-only path runs (see :func:`make_round`), or None for every silo."""
    most = participation.max_participants if isinstance(participation, Participation) else None
    if most is None or not (isinstance(aggregator, Aggregator) and aggregator.participants_only):
        return None
    mesh = sharding.ambient_silo_mesh()
    # Taken whether or not it saves work (M = N), so that the program's structure, and with it XLA's
    # floating-point contractions, is the same on every device layout (the padded silo count varies).
    return int(most) if mesh is None else sharding.padded_silos(int(most), mesh)


def _run_participants(call, data, values, silos, round_key, weights, slots: int):
    """The clients of the (at most ``slots``) participants, gathered in silo order; slots past the
    participants repeat silo 0 with weight 0 and write no silo state. Returns ``(client outputs, slot
    weights, silo state)``."""
    num_silos = data.num_silos
    ids = jnp.nonzero(weights > 0, size=slots, fill_value=0)[0]
    valid = jnp.arange(slots) < jnp.sum(weights > 0)
    slot_weights = jnp.where(valid, jnp.take(weights, ids), 0.0)
    take = lambda a: sharding.constrain_silos(jnp.take(a, ids, axis=0))
    keys = jax.vmap(keys_lib.silo_key, in_axes=(None, 0))(round_key, ids)
    own = jax.tree_util.tree_map(take, silos)
    out = jax.vmap(call)(take(data.x), take(data.y), take(data.counts), keys, ids,
                         jax.tree_util.tree_map(take, values), own)
    if silos is not None:  # rows of slots that do not take part go out of bounds and are dropped
        rows = jnp.where(slot_weights > 0, ids, num_silos)
        silos = jax.tree_util.tree_map(lambda s, n: s.at[rows].set(n.astype(s.dtype), mode="drop"), silos, out[2])
    return out, slot_weights, silos


def _keep_participants(new, old, weights):
    """Silo state: ``new`` for participants (``weights > 0``), ``old`` for everyone else."""
    def pick(n, o):
        return jnp.where((weights > 0).reshape((-1,) + (1,) * (o.ndim - 1)), n.astype(o.dtype), o)

    return jax.tree_util.tree_map(pick, new, old)


def _passes(call, data, silos, round_key, weights, per_pass):
    """The participants (``weights > 0``), ``per_pass`` at a time: ``(sum_i w_i m_i, info sums, silo
    state)``; a participant's new silo state is written back to its own row only."""
    num_silos = data.num_silos
    order = jnp.argsort(jnp.where(weights > 0, 0, 1), stable=True)  # participants first, in silo order
    order = jnp.concatenate([order, jnp.zeros(per_pass, order.dtype)])
    num = jnp.sum(weights > 0)

    def run(ids, silos):
        keys = jax.vmap(keys_lib.silo_key, in_axes=(None, 0))(round_key, ids)
        take = lambda a: jnp.take(a, ids, axis=0)
        own = None if silos is None else jax.tree_util.tree_map(take, silos)
        return jax.vmap(call)(take(data.x), take(data.y), take(data.counts), keys, ids, None, own)

    shapes = jax.eval_shape(run, order[:per_pass], silos)
    zeros = jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape[1:], a.dtype), shapes[:2])

    def one_pass(i, carry):
        sums, silos = carry
        ids = jax.lax.dynamic_slice(order, (i * per_pass,), (per_pass,))
        valid = i * per_pass + jnp.arange(per_pass) < num
        w = jnp.take(weights, ids) * valid
        out = run(ids, silos)
        add = lambda acc, m: acc + jnp.tensordot(w.astype(m.dtype), m, axes=1)
        sums = jax.tree_util.tree_map(add, sums, out[:2])
        if silos is not None:  # rows past the participants go out of bounds and are dropped
            rows = jnp.where(valid, ids, num_silos)
            silos = jax.tree_util.tree_map(lambda s, n: s.at[rows].set(n.astype(s.dtype), mode="drop"), silos, out[2])
        return sums, silos

    (summed, info_sums), silos = jax.lax.fori_loop(0, (num + per_pass - 1) // per_pass, one_pass, (zeros, silos))
    return summed, info_sums, silos


def _finish(state, messages, client_info, weights, round_key, counts, aggregator, server_fn, inputs=None):
    """Aggregation, server update and the round's info, shared by both round builders."""
    weights, client_info = sharding.replicate((weights, client_info))
    aggregate = aggregator(messages, weights, round_key)
    info_sums = {name: jnp.sum(weights * value) for name, value in client_info.items()}
    return _server_step(state, aggregate, info_sums, jnp.sum(weights), round_key, counts, server_fn, inputs)


def _server_step(state, aggregate, info_sums, total, round_key, counts, server_fn, inputs=None):
    """``server_fn`` on the aggregate; the round's info adds the participant-weighted mean of each client
    info (``info_sums`` holds the weighted sums) and the number of ``participants``."""
    state, info = server_fn(state, aggregate, RoundContext(total, round_key, counts, inputs))
    inverse = 1.0 / jnp.maximum(total, 1.0)
    info = dict(info)
    info.update({name: value * inverse for name, value in info_sums.items()})
    info["participants"] = total
    return state, info


def occurrences(silos: jnp.ndarray) -> jnp.ndarray:
    """``int32[B]``: how many earlier slots drew the same silo (0 for a silo's first slot).

    Example:
      >>> import jax.numpy as jnp
      >>> occurrences(jnp.array([2, 0, 2, 2, 1])).tolist()
      [0, 0, 1, 2, 0]
    """
    b = silos.shape[0]
    earlier = jnp.arange(b)[None, :] < jnp.arange(b)[:, None]
    return jnp.sum(earlier & (silos[None, :] == silos[:, None]), axis=1).astype(jnp.int32)


def slot_key(round_key, silo, occurrence) -> jax.Array:
    """Key of a silo's ``occurrence``-th slot in a round: ``fold_in(silo_key(round, silo), occurrence)``.

    Example (a silo drawn twice gets two keys):
      >>> import jax
      >>> round_key = jax.random.key(0)
      >>> first, second = slot_key(round_key, 2, 0), slot_key(round_key, 2, 1)
      >>> bool((jax.random.key_data(first) != jax.random.key_data(second)).any())
      True
    """
    return keys_lib.fold_in(keys_lib.silo_key(round_key, silo), occurrence)


def make_slot_round(client_fn: ClientFn, server_fn: ServerFn, slots, *,
                    broadcast: Callable[[Any], Any] = lambda state: state.params,
                    aggregator: Aggregator = weighted_sum, clients_per_pass: int | None = None):
    """Builds ``round(state, data, round_key) -> (state, info)`` for sampling **with replacement**.

    ``slots(round_key, counts) -> int32[B]`` draws the silo of each of ``B`` slots (e.g.
    :func:`jaxfl.engine.participation.with_replacement`). Only the drawn silos' records are gathered and
    ``client_fn`` runs under ``vmap`` over the ``B`` slots (not over all silos, so ``B << N`` costs ``B``
    clients); a silo drawn twice runs twice, independently: slot keys are
    :func:`slot_key` ``(round, silo, occurrence)``, a function of the silo id and of how many earlier slots
    drew it, never of the slot's position alone. Every slot has weight 1; the rest is as in :func:`make_round`.

    ``clients_per_pass`` (optional): run the slots ``clients_per_pass`` at a time (``lax.map`` with that
    ``batch_size``) instead of all ``B`` under one ``vmap``. Same keys and messages up to floating-point
    rounding. On CPU, ``1`` is fastest for convolutional models: a silo's local loop then stops at its own
    step count, and XLA:CPU runs per-silo convolutions faster than their vmapped (grouped) form.

    Example: :func:`jaxfl.algorithms.dprec.dp_rec` builds its round with it.
    """
    if clients_per_pass is not None and int(clients_per_pass) < 1:
        raise ValueError(f"clients_per_pass must be >= 1, got {clients_per_pass}")

    def round_fn(state, data: FederatedData, round_key):
        silos = slots(round_key, data.counts)
        keys = jax.vmap(slot_key, in_axes=(None, 0, 0))(round_key, silos, occurrences(silos))
        take = lambda a: jnp.take(a, silos, axis=0)
        sent = broadcast(state)
        inputs = (take(data.x), take(data.y), take(data.counts), keys)
        if clients_per_pass is None:
            messages, client_info = jax.vmap(client_fn, in_axes=(None, 0, 0, 0, 0))(sent, *inputs)
        else:
            per_pass = int(clients_per_pass)
            messages, client_info = jax.lax.map(lambda args: client_fn(sent, *args), inputs,
                                                batch_size=None if per_pass == 1 else per_pass)
        weights = jnp.ones(silos.shape, jnp.float32)
        return _finish(state, messages, client_info, weights, round_key, data.counts, aggregator, server_fn)

    return round_fn
