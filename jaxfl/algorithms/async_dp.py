"""Asynchronous (DP) federated learning with increasing sample sizes (van Dijk et al. 2020):
:func:`async_sgd` runs the protocol of :mod:`jaxfl.algorithms.async_timeline` on the engine, and
:func:`sync_sgd` is the same clients in synchronous rounds (the reference the asynchronous run equals with
zero delays and equal speeds).

The clients (Alg. 2.1): in round ``i`` client ``c`` takes ``s[i, c]`` single-record SGD steps on its local
model ``w_hat``, each on a record drawn uniformly with replacement from its ``N_c``, with the per-record
gradient clipped to ``C`` in DP mode; it accumulates ``Delta = sum_h eta_h g_h`` (``eta_h = eta_i`` for per-round
step sizes, the paper's ``eta_i U``; the per-iteration form sends the step-weighted sum, digest §6.4) and at
the round's end adds ``eta_i N(0, C^2 sigma^2 I)`` to ``Delta`` and subtracts it from ``w_hat`` (the paper's
``w_hat + eta n`` has the sign flipped: digest §4.4, fixed here so the local model matches the server's view).
The server subtracts every ``Delta`` as it arrives (a *sum*, not a mean) and broadcasts ``(v_hat, k)`` when
round ``k - 1`` is complete; a client accepting it continues from ``v_hat_k - Delta_partial``.

Randomness: every draw is addressed by (client round ``i``, client ``c``, step ``h``, purpose) from the run's
round-0 key (the driver's key of the first slice, kept in the server state), never by the slice, so the
draws do not depend on timing: with zero delays and equal speeds :func:`async_sgd` equals :func:`sync_sgd`
bitwise.

Privacy: the paper analyses each client round as a subsampled Gaussian on a sum of ``s_i`` clipped gradients
(sensitivity ``C`` per draw), with its moments accountant (:mod:`jaxfl.accounting.moments`,
:mod:`jaxfl.accounting.increasing_samples`). Its client takes those gradients at points its own earlier draws of
the round moved, and draws with replacement, so one record can move the round's sum by more than ``C`` (digest
§8.1, §11.7): jaxfl states no privacy for this client (``privacy=None``); the paper's accounting and the tight
Poisson-model epsilon of the same rounds are reported beside each run by the studies, labelled as such.
``sampling="poisson"`` is the stated variant (:func:`async_sgd`): every gradient of a round at its start point, a
Poisson sample per round, and the tight epsilon as its statement.

References:
  M. van Dijk, N. V. Nguyen, T. N. Nguyen, L. M. Nguyen, Q. Tran-Dinh and P. H. Nguyen. "Asynchronous
  Federated Learning with Reduced Number of Rounds and with Differential Privacy from Less Aggregated
  Gaussian Noise." arXiv preprint, 2020.
"""
from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np

from jaxfl import checks
from jaxfl.accounting.events import RoundScheduleDpEvent, clipped_sum_gaussian
from jaxfl.algorithms.async_schedules import StepSize
from jaxfl.algorithms.async_timeline import Timeline
from jaxfl.engine.protocol import FederatedAlgorithm, RoundPrivacy, SiloState
from jaxfl.privacy import keys, uniform
from jaxfl.privacy.clipping import selected_clipped_grad_sum
from jaxfl.privacy.noise import gaussian_like

_tmap = jax.tree_util.tree_map


class AsyncServer(NamedTuple):
    """``params``: the server's ``v_hat``; ``ring``: the broadcast models clients may still accept (leaves
    ``[ring, ...]``, broadcast ``k`` in slot ``k % ring``); ``k``: broadcasts sent; ``slice``: slices run;
    ``base``: the run's round-0 key data; ``applied [n]``: messages applied per client.

    Example: :func:`latest_broadcast` (``result.state.server``).
    """

    params: Any
    ring: Any
    k: jnp.ndarray
    slice: jnp.ndarray
    base: jnp.ndarray
    applied: jnp.ndarray


class AsyncClients(NamedTuple):
    """Per client (leading axis ``n``): the local ``model`` (``w_hat``), the round's ``partial`` step-weighted
    gradient sum, the ``outbox`` of sent messages in flight (``[n, outbox, ...]``, round ``i`` in slot
    ``i % outbox``), the ``round`` and ``step`` within it, the newest accepted broadcast ``k_old``, and ``sent``,
    the sum of every message sent (what the server must have subtracted once all arrived). With
    ``sampling="poisson"``: ``pending``, a broadcast accepted mid-round (``v_hat_k``, the next round's start
    once the round's message is subtracted), and ``has_pending [n]``; None otherwise.

    Example: :func:`async_sgd`.
    """

    model: Any
    partial: Any
    outbox: Any
    round: jnp.ndarray
    step: jnp.ndarray
    k_old: jnp.ndarray
    sent: Any
    pending: Any = None
    has_pending: Any = None


class SyncServer(NamedTuple):
    """:func:`sync_sgd`'s server: the model ``params``, rounds run and the run's round-0 key data ``base``.
    Example: :func:`sync_sgd`."""

    params: Any
    round: jnp.ndarray
    base: jnp.ndarray


def _base_key(stored, key, first):
    data = jax.random.key_data(key)
    return jnp.where(first, data, stored)


def _key_template() -> jnp.ndarray:
    return jnp.zeros_like(jax.random.key_data(jax.random.key(0)))


class _Client(NamedTuple):
    """What a client step needs, built once per algorithm (hyperparameters only)."""

    loss_fn: Any
    step_size: StepSize
    clip_norm: float
    noise_multiplier: Any
    before: np.ndarray       # [T + 1] sum_{j<i} s_j (global sizes)
    num_clients: int
    sizes: np.ndarray        # [T, n] s_{i,c}
    sampling: str            # "replacement" (the paper's client) or "poisson" (the stated variant)
    chunk: int               # "poisson": records per gradient pass
    records: Any = None      # "poisson": float64[n] public record counts N_c (None: each client's own count)

    def eta(self, rnd, h):
        t = jnp.asarray(self.before, jnp.float32)[rnd]
        if self.step_size.per == "iterations":
            t = t + self.num_clients * h
        return self.step_size(t)

    def steps(self, base, model, partial, x, y, count, silo, rnd, start, num, frozen=False):
        """``num`` steps ``start, start + 1, ...`` of round ``rnd``: ``(model, partial)``. ``frozen``: every
        gradient at ``model``, which the steps do not move (:func:`delayed_sgd`)."""
        # keys.derive(root, round=rnd, silo=silo, step=h, ...), its first two fold_ins hoisted out of the loop
        client_key = keys.silo_key(keys.round_key(jax.random.wrap_key_data(base), rnd), silo)
        if self.sampling == "poisson":
            return model, self._poisson_steps(client_key, model, partial, x, y, count, silo, rnd, start, num)

        def body(carry):
            j, model, partial = carry
            h = start + j
            draw = keys.step_key(client_key, h, keys.Purpose.MINIBATCH)
            idx = uniform.randint(draw, (), 0, jnp.maximum(count, 1))
            g = jax.grad(self.loss_fn)(model, x[idx], y[idx])
            if not math.isinf(self.clip_norm):
                norm = jnp.sqrt(sum(jnp.sum(jnp.square(leaf)) for leaf in jax.tree_util.tree_leaves(g)))
                g = _tmap(lambda leaf: leaf * jnp.minimum(1.0, self.clip_norm / jnp.maximum(norm, 1e-30)), g)
            eta = self.eta(rnd, h)
            moved = model if frozen else _tmap(lambda w, gi: w - eta * gi, model, g)
            return j + 1, moved, _tmap(lambda p, gi: p + eta * gi, partial, g)

        _, model, partial = jax.lax.while_loop(lambda c: c[0] < num, body, (jnp.int32(0), model, partial))
        return model, partial

    def _poisson_steps(self, client_key, model, partial, x, y, count, silo, rnd, start, num):
        """The stated variant's steps: round ``rnd``'s records are split into ``s = s[rnd, silo]`` contiguous
        blocks and step ``h`` adds ``eta_i`` times the clipped gradients, at ``model`` (the round's start point,
        which no record of the round moves), of the records of block ``h`` that a Bernoulli(``q = s / N_c``)
        draw keeps: over the round, a Poisson sample of rate ``q`` (each record in exactly one block). ``N_c`` is
        the public ``records[silo]`` when given, else the client's own count."""
        size = jnp.asarray(self.sizes, jnp.int32)[rnd, silo]
        count = jnp.maximum(count, 1)
        public = count if self.records is None else jnp.asarray(self.records, jnp.float32)[silo]
        rate = size.astype(jnp.float32) / jnp.asarray(public, jnp.float32)
        block = -(-x.shape[0] // int(self.sizes.min())) + 1        # the largest block of any round (static)
        eta = self.eta(rnd, 0)

        def body(carry):
            j, partial = carry
            h = start + j
            lo, hi = (h * count) // size, ((h + 1) * count) // size
            draw = keys.step_key(client_key, h, keys.Purpose.MINIBATCH)
            take = (lo + jnp.arange(block) < hi) & (uniform.uniform(draw, (block,)) < rate)
            g = selected_clipped_grad_sum(self.loss_fn, model, x, y, take, self.clip_norm, chunk=self.chunk,
                                          offset=lo).value
            return j + 1, _tmap(lambda p, gi: p + eta * gi, partial, g)

        _, partial = jax.lax.while_loop(lambda c: c[0] < num, body, (jnp.int32(0), partial))
        return partial

    def noise(self, base, params, silo, rnd):
        """``eta_i sigma C N(0, I)`` of round ``rnd`` (a Python-0 noise multiplier: None, nothing drawn)."""
        if isinstance(self.noise_multiplier, (int, float)) and self.noise_multiplier == 0:
            return None
        draw = keys.derive(jax.random.wrap_key_data(base), round=rnd, silo=silo, step=0, purpose=keys.Purpose.NOISE)
        z = self.noise_multiplier
        scale = self.eta(rnd, 0) * jnp.where(z > 0, z * self.clip_norm, 0.0)   # never 0 * inf
        return _tmap(lambda u: scale * u, gaussian_like(draw, params, 1.0))


def _client(loss_fn, sizes, step_size, clip_norm, noise_multiplier, sampling="replacement", chunk=4,
            records=None) -> _Client:
    if not isinstance(step_size, StepSize):
        raise ValueError(f"step_size must be a jaxfl.algorithms.async_schedules.StepSize, got {step_size!r}")
    checks.one_of("sampling", sampling, ("replacement", "poisson"))
    chunk = checks.positive_int("chunk", chunk)
    if sampling == "poisson" and step_size.per != "rounds":
        raise ValueError(f"sampling='poisson' takes one step size per round (step_size.per='rounds'), got "
                         f"per={step_size.per!r}")
    clip = checks.positive_float("clip_norm", clip_norm, allow_inf=True)
    z = noise_multiplier
    if isinstance(z, (int, float, np.floating)):   # a traced value (sweeps) is checked by its grid's builder
        z = checks.non_negative_float("noise_multiplier", z)
        if z > 0 and math.isinf(clip):
            raise ValueError("noise_multiplier > 0 needs a finite clip_norm (the noise std is sigma C)")
        z = z if z > 0 else 0
    sizes = np.asarray(sizes)
    before = np.concatenate([[0], np.cumsum(sizes.sum(axis=1))]).astype(np.float64)
    return _Client(loss_fn, step_size, clip, z, before, int(sizes.shape[1]), sizes, sampling, chunk,
                   _public_records(records, sizes, sampling))


def _public_records(records, sizes: np.ndarray, sampling: str):
    """``records`` (an int for every client, or one per client) as ``float64[n]``, checked against the sizes."""
    if records is None:
        return None
    if sampling != "poisson":
        raise ValueError("records= sets the Poisson rate s_i / N_c of sampling='poisson'; the paper's client "
                         "(sampling='replacement') draws from its own records")
    n = sizes.shape[1]
    values = np.broadcast_to(np.asarray(records, np.float64), (n,)) if np.ndim(records) == 0 else \
        np.asarray(records, np.float64)
    if values.shape != (n,) or not np.all(np.isfinite(values)) or np.any(values < 1) or \
            np.any(values != np.round(values)):
        raise ValueError(f"records must be one positive integer, or one per client ({n}), got {records!r}")
    over = np.flatnonzero(sizes.max(axis=0) > values)
    if over.size:
        c = int(over[0])
        raise ValueError(f"client {c}: a round's sample size {int(sizes[:, c].max())} exceeds its {int(values[c])} "
                         f"public records (records=; sampling='poisson' needs s_i <= N_c)")
    return values


def _stack(tree, n):
    return _tmap(lambda leaf: jnp.broadcast_to(leaf, (n,) + jnp.shape(leaf)), tree)


def _check_silos(num_silos, n):
    if int(num_silos) != n:
        raise ValueError(f"the data has {num_silos} silos but the timeline has {n} clients")


def _server_scale(aggregation: str, n: int) -> float:
    """The factor the server applies each message with: 1 (``"sum"``, the paper) or ``1/n`` (``"mean"``)."""
    return 1.0 if checks.one_of("aggregation", aggregation, ("sum", "mean")) == "sum" else 1.0 / n


def async_sgd(loss_fn, timeline: Timeline, *, step_size: StepSize, clip_norm: float = math.inf,
              noise_multiplier: float = 0.0, aggregation: str = "sum", sampling: str = "replacement",
              records=None, chunk: int = 4, name: str = "async SGD") -> FederatedAlgorithm:
    """van Dijk et al.'s asynchronous protocol on ``timeline`` (:func:`jaxfl.algorithms.async_timeline.simulate`):
    one engine round per slice (``rounds=timeline.num_slices``), clients vmapped. ``loss_fn(params, x, y)``
    is one record's loss; ``clip_norm`` (``inf``: no clipping) and ``noise_multiplier`` give Alg. 2.1's DP
    client. ``aggregation``: ``"sum"`` (the paper: ``v_hat -= eta U``) or ``"mean"`` (``v_hat -= eta U / n``, a
    FedAvg-style alternative for comparison). The server's ``params`` after the last slice is ``v_hat_T``.

    ``sampling``: ``"replacement"`` (the paper's client: ``s_i`` single-record steps on records drawn with
    replacement, each at the model the previous ones moved; states no privacy, module docstring) or
    ``"poisson"``, the stated variant: round ``i`` takes every gradient at its start point, on a Poisson
    sample of rate ``q_i = s_i / N_c`` (``s_i`` steps of one block of records each, the gradients ``chunk``
    records at a time), sends ``eta_i (sum of clipped gradients + N(0, (sigma C)^2 I))`` and starts the next
    round from its start point (or a broadcast accepted meanwhile) minus that message, so one record moves
    a round's sum by at most ``C``. Its privacy statement (finite ``clip_norm``): per client with records,
    ``PoissonSampledDpEvent(q_i, GaussianDpEvent(sigma))`` at the slice where it sends round ``i`` (ISRL-DP);
    needs per-round step sizes.

    ``records`` (``sampling="poisson"``): the public ``N_c`` the rate is set with, one int for every client or
    one per client, fixed before the data are seen (the design's record counts). With it the rate is the same on
    neighbouring datasets and the statement is **add/remove-one record** (the smaller epsilon; what
    ``"rdp"`` accounts). Without it the rate is ``s_i`` over the client's own count, which a record added or
    removed changes, so the statement is **replace-one record** with the counts public (accounted by ``"pld"``;
    ``"rdp"`` refuses Poisson under replace-one).

    Example:
      >>> import jax, numpy as np, jaxfl
      >>> from jaxfl.algorithms import async_schedules, async_timeline
      >>> from jaxfl.data import iid
      >>> from jaxfl.models import binary_accuracy, init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (400, 5)))
      >>> y = (x[:, 0] > 0).astype(np.float32)
      >>> sizes = np.full((6, 4), 10)                          # 6 rounds of 10 steps for each of 4 clients
      >>> timing = async_timeline.draw_timing(4, 6, seed=0, speed_spread=0.3, mean_delay=5.0)
      >>> timeline = async_timeline.simulate(sizes, timing, lookahead=1)
      >>> algorithm = async_sgd(logistic_loss, timeline, step_size=async_schedules.step_size("constant", 0.05))
      >>> result = jaxfl.train(algorithm, iid(x, y, num_silos=4, seed=0), init_linear(5), rounds=timeline.num_slices,
      ...                      progress=False)
      >>> float(binary_accuracy(result.params, x, y)) > 0.9, algorithm.privacy is None  # the paper's client states none
      (True, True)
    """
    client = _client(loss_fn, timeline.sizes, step_size, clip_norm, noise_multiplier, sampling, chunk, records)
    n, outbox, ring = client.num_clients, int(timeline.outbox), int(timeline.ring)
    scale = _server_scale(aggregation, n)
    poisson = sampling == "poisson"

    def init(params):
        return AsyncServer(params, _stack(params, ring), jnp.int32(0), jnp.int32(0), _key_template(),
                           jnp.zeros(n, jnp.int32))

    def init_silos(params, num_silos):
        _check_silos(num_silos, n)
        zeros = _tmap(jnp.zeros_like, params)
        return AsyncClients(_stack(params, n), _stack(zeros, n), _stack(_stack(zeros, outbox), n),
                            jnp.zeros(n, jnp.int32), jnp.zeros(n, jnp.int32), jnp.zeros(n, jnp.int32), _stack(zeros, n),
                            _stack(params, n) if poisson else None, jnp.zeros(n, bool) if poisson else None)

    def round_fn(state: SiloState, data, key, inputs):
        server, c = state.server, state.silos
        base = _base_key(server.base, key, server.slice == 0)
        silo = jnp.arange(n)
        # 1. every client's local steps of the slice
        model, partial = jax.vmap(client.steps, in_axes=(None, 0, 0, 0, 0, 0, 0, 0, 0, 0))(
            base, c.model, c.partial, data.x, data.y, data.counts, silo, c.round, c.step, inputs["steps"])
        step = c.step + inputs["steps"]
        # 2. clients that end a round: noise, send (outbox slot round % outbox), start the next round
        sends = inputs["sends"]

        def send(model, partial):
            noise = jax.vmap(client.noise, in_axes=(None, None, 0, 0))(base, server.params, silo, c.round)
            message = partial if noise is None else \
                _tmap(lambda p, u: jnp.where(_bcast(sends, u), p + u, p), partial, noise)
            if poisson:   # the next round starts at the round's start point (or a pending broadcast) - message
                start = _tmap(lambda w, b: jnp.where(_bcast(c.has_pending, w), b, w), model, c.pending)
                return _tmap(lambda w, st, m: jnp.where(_bcast(sends, w), st - m, w), model, start, message), message
            if noise is None:
                return model, message
            return _tmap(lambda w, u: jnp.where(_bcast(sends, u), w - u, w), model, noise), message

        model, message = jax.lax.cond(jnp.any(sends), send, lambda m, p: (m, p), model, partial)
        slot = c.round % outbox
        box = _tmap(lambda b, msg: jnp.where(_bcast(sends, b), b.at[silo, slot].set(msg), b), c.outbox, message)
        sent = _tmap(lambda s, msg: s + jnp.where(_bcast(sends, msg), msg, 0.0), c.sent, message)
        partial = _tmap(lambda p: jnp.where(_bcast(sends, p), 0.0, p), message)
        rnd, step = c.round + sends, jnp.where(sends, 0, step)

        # 3. the server applies the messages that arrived, in order, broadcasting after completions
        def apply(carry, entry):
            v, ring_models, k, applied = carry
            who, which, after = entry
            valid = who >= 0
            msg = _tmap(lambda b: b[jnp.maximum(who, 0), which % outbox], box)
            v = _tmap(lambda vi, m: jnp.where(valid, vi - (m if scale == 1.0 else scale * m), vi), v, msg)
            applied = applied.at[jnp.maximum(who, 0)].add(valid.astype(jnp.int32))
            ring_models = _tmap(lambda r, vi: jnp.where(after >= 0, r.at[jnp.maximum(after, 0) % ring].set(vi), r),
                                ring_models, v)
            return (v, ring_models, jnp.where(after >= 0, after, k), applied), None

        (v, ring_models, k, applied), _ = jax.lax.scan(
            apply, (server.params, server.ring, server.k, server.applied),
            (inputs["apply_client"], inputs["apply_round"], inputs["broadcast_after"]))
        # 4. clients accept the newest broadcast delivered: w_hat = v_hat_k - Delta_partial ("poisson": only at a
        #    round's start; mid-round the broadcast waits in ``pending`` for the round's end)
        accept = inputs["accept"] >= 0
        fresh = _tmap(lambda r: r[jnp.maximum(inputs["accept"], 0) % ring], ring_models)
        now = accept & (step == 0) if poisson else accept
        model = _tmap(lambda w, f, p: jnp.where(_bcast(now, w), f - p, w), model, fresh, partial)
        pending, has_pending = c.pending, c.has_pending
        if poisson:
            later = accept & (step > 0)
            pending = _tmap(lambda b, f: jnp.where(_bcast(later, b), f, b), pending, fresh)
            has_pending = jnp.where(accept, later, has_pending & ~sends)
        k_old = jnp.where(accept, inputs["accept"], c.k_old)
        info = {"broadcasts": k, "sends": jnp.sum(sends.astype(jnp.int32)), "steps": jnp.sum(inputs["steps"])}
        return (SiloState(AsyncServer(v, ring_models, k, server.slice + 1, base, applied),
                          AsyncClients(model, partial, box, rnd, step, k_old, sent, pending, has_pending)), info)

    stated = poisson and not math.isinf(client.clip_norm)
    return FederatedAlgorithm(init, round_fn, _send_privacy(timeline, client) if stated else None, name,
                              init_silos, timeline.schedule(), silo_params=lambda state: state.silos.model)


def _send_privacy(timeline: Timeline, client: _Client):
    """``counts -> RoundPrivacy`` of the stated variant: per client with records, a ``RoundScheduleDpEvent``
    over the slices releasing ``PoissonSampledDpEvent(s_{i,c} / N_c, Gaussian(sigma))`` where it sends round
    ``i`` and nothing elsewhere: add/remove one record with the public ``records``, else replace-one (the rate
    is set from the client's own count)."""
    relation = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE if client.records is not None else \
        dp_accounting.NeighboringRelation.REPLACE_ONE
    sends = np.asarray(timeline.sends, bool)
    nothing = dp_accounting.NoOpDpEvent()

    def privacy(counts):
        gaussian = clipped_sum_gaussian(float(client.noise_multiplier), relation)
        events = []
        for c, records in enumerate(np.asarray(counts)):
            if records <= 0:
                continue
            rates = client.sizes[:, c] / float(records if client.records is None else client.records[c])
            if np.any(rates > 1):
                raise ValueError(f"client {c}: a round's sample size {int(client.sizes[:, c].max())} exceeds its "
                                 f"{int(records)} records (sampling='poisson' needs s_i <= N_c)")
            sent = np.cumsum(sends[:, c]) - 1                     # the round each slice's send closes
            events.append(RoundScheduleDpEvent(tuple(
                dp_accounting.PoissonSampledDpEvent(float(rates[sent[t]]), gaussian) if sends[t, c] else nothing
                for t in range(sends.shape[0]))))
        return RoundPrivacy(events=tuple(events), level="record", relation=relation)

    return privacy


def sync_sgd(loss_fn, sizes, *, step_size: StepSize, clip_norm: float = math.inf, noise_multiplier: float = 0.0,
             aggregation: str = "sum", sampling: str = "replacement", records=None, chunk: int = 4,
             name: str = "sync SGD") -> FederatedAlgorithm:
    """The same clients in synchronous rounds: round ``i`` starts every client from ``v_hat``, runs its
    ``sizes[i, c]`` steps (``sampling`` and ``records`` as in :func:`async_sgd`) and round noise, and the server
    subtracts the clients' messages in client order (scaled by ``1/n`` with ``aggregation="mean"``).
    ``rounds=sizes.shape[0]``; a reference, it states no privacy.

    Example:
      >>> import jax, numpy as np, jaxfl
      >>> from jaxfl.algorithms.async_schedules import step_size
      >>> from jaxfl.data import iid
      >>> from jaxfl.models import binary_accuracy, init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (400, 5)))
      >>> y = (x[:, 0] > 0).astype(np.float32)
      >>> algorithm = sync_sgd(logistic_loss, np.full((6, 4), 10), step_size=step_size("constant", 0.05),
      ...                      aggregation="mean")
      >>> result = jaxfl.train(algorithm, iid(x, y, num_silos=4, seed=0), init_linear(5), rounds=6, progress=False)
      >>> float(binary_accuracy(result.params, x, y)) > 0.9
      True
    """
    sizes = _round_sizes(sizes)
    client = _client(loss_fn, sizes, step_size, clip_norm, noise_multiplier, sampling, chunk, records)
    n = client.num_clients
    scale = _server_scale(aggregation, n)

    def init(params):
        return SyncServer(params, jnp.int32(0), _key_template())

    def round_fn(state: SyncServer, data, key, inputs):
        _check_silos(data.x.shape[0], n)
        base = _base_key(state.base, key, state.round == 0)
        v = _synchronous_round(client, scale, base, state.params, state.params, state.round, data, inputs["sizes"])
        return SyncServer(v, state.round + 1, base), {"steps": jnp.sum(inputs["sizes"])}

    return FederatedAlgorithm(init, round_fn, None, name, schedule={"sizes": sizes.astype(np.int32)})


def _round_sizes(sizes) -> np.ndarray:
    """``sizes`` as ``int64[rounds, clients]``, every entry >= 1."""
    sizes = np.asarray(sizes, dtype=np.int64)
    if sizes.ndim != 2 or np.any(sizes < 1):
        raise ValueError(f"sizes must be a [rounds, clients] array of sizes >= 1, got shape {sizes.shape}")
    return sizes


def _synchronous_round(client: _Client, scale, base, params, at, rnd, data, sizes, frozen=False):
    """``params`` minus every client's round-``rnd`` message (in client order, times ``scale``), the clients
    starting from ``at`` (``frozen``: every gradient taken at ``at``)."""
    n = client.num_clients
    silo = jnp.arange(n)
    rnd = jnp.full(n, rnd)
    zeros = _tmap(jnp.zeros_like, at)
    _, partial = jax.vmap(functools.partial(client.steps, frozen=frozen),
                          in_axes=(None, None, None, 0, 0, 0, 0, 0, None, 0))(
        base, at, zeros, data.x, data.y, data.counts, silo, rnd, jnp.int32(0), sizes)
    noise = jax.vmap(client.noise, in_axes=(None, None, 0, 0))(base, at, silo, rnd)
    if noise is not None:
        partial = _tmap(jnp.add, partial, noise)

    def apply(v, msg):
        return _tmap(lambda vi, m: vi - (m if scale == 1.0 else scale * m), v, msg), None

    return jax.lax.scan(apply, params, partial)[0]


class DelayedServer(NamedTuple):
    """``params``: ``w`` after the rounds run; ``ring``: the models at the starts of the last ``d + 1`` rounds
    (round ``i``'s in slot ``i % (d + 1)``); ``round``; ``base``: the run's round-0 key data.

    Example: :func:`delayed_sgd`.
    """

    params: Any
    ring: Any
    round: jnp.ndarray
    base: jnp.ndarray


def delayed_sgd(loss_fn, sizes, *, step_size: StepSize, lookahead: int = 1, aggregation: str = "sum",
                name: str = "delayed SGD") -> FederatedAlgorithm:
    """Delayed-gradient SGD: van Dijk et al.'s recursion (1) at the largest delay its protocol allows.

    One trajectory ``w``: in round ``i`` every client ``c`` takes ``sizes[i, c]`` single-record gradients on
    records drawn uniformly with replacement from its own (the draws of :func:`sync_sgd`), **all at**
    ``w_hat_i = w_{start of round max(i - d, 0)}``, and ``w`` moves by the sum of the clients' step-weighted
    sums (``1/n`` of it with ``aggregation="mean"``). With lookahead ``d`` a client of round ``i`` holds
    broadcast ``k >= i - d``, which contains every update before round ``k``; the updates it is guaranteed to
    see are those before round ``i - d``, so step ``t`` of round ``i`` here reads the model with delay
    ``tau(t) = (t - S_i) + sum_{i-d <= j < i} s_j`` (``S_i`` the steps before round ``i``): the worst case
    consistent with the paper's delay function, where the protocol (:func:`async_sgd`) lets a client see its
    own steps and any broadcast that arrived early. ``d = 0`` is synchronous large-batch SGD (every gradient
    of a round at its start). ``rounds=sizes.shape[0]``; a reference without noise, it states no privacy.

    Example:
      >>> import jax, numpy as np, jaxfl
      >>> from jaxfl.algorithms.async_schedules import step_size
      >>> from jaxfl.data import iid
      >>> from jaxfl.models import binary_accuracy, init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (400, 5)))
      >>> y = (x[:, 0] > 0).astype(np.float32)
      >>> data, sizes, eta = iid(x, y, num_silos=4, seed=0), np.full((6, 4), 10), step_size("constant", 0.05)
      >>> stale = jaxfl.train(delayed_sgd(logistic_loss, sizes, step_size=eta), data, init_linear(5), rounds=6,
      ...                     progress=False)                  # every step of round i at round i - 1's start
      >>> float(binary_accuracy(stale.params, x, y)) > 0.9
      True
    """
    sizes = _round_sizes(sizes)
    d = checks.non_negative_int("lookahead", lookahead)
    client = _client(loss_fn, sizes, step_size, math.inf, 0.0)
    n = client.num_clients
    scale = _server_scale(aggregation, n)

    def init(params):
        return DelayedServer(params, _stack(params, d + 1), jnp.int32(0), _key_template())

    def round_fn(state: DelayedServer, data, key, inputs):
        _check_silos(data.x.shape[0], n)
        base = _base_key(state.base, key, state.round == 0)
        i = state.round
        ring = _tmap(lambda r, w: r.at[i % (d + 1)].set(w), state.ring, state.params)
        at = _tmap(lambda r: r[jnp.maximum(i - d, 0) % (d + 1)], ring)
        v = _synchronous_round(client, scale, base, state.params, at, i, data, inputs["sizes"], frozen=True)
        return DelayedServer(v, ring, i + 1, base), {"steps": jnp.sum(inputs["sizes"])}

    return FederatedAlgorithm(init, round_fn, None, name, schedule={"sizes": sizes.astype(np.int32)})


def _bcast(mask, like):
    return jnp.reshape(mask, mask.shape + (1,) * (jnp.ndim(like) - mask.ndim))


def latest_broadcast(state: SiloState):
    """The newest model the server has broadcast, ``v_hat_k`` at ``k = state.server.k`` (the initial model
    before the first broadcast): what clients train from, and what the paper's figures plot per round.
    ``state.params`` (``v_hat``) may also hold messages of rounds still open.

    Example (the example of :func:`async_sgd`, then the model its clients last received):
      >>> import jax, numpy as np, jaxfl
      >>> from jaxfl.algorithms import async_schedules, async_timeline
      >>> from jaxfl.data import iid
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (400, 5)))
      >>> y = (x[:, 0] > 0).astype(np.float32)
      >>> timeline = async_timeline.simulate(np.full((6, 4), 10), async_timeline.draw_timing(4, 6, seed=0,
      ...                                    speed_spread=0.3, mean_delay=5.0), lookahead=1)
      >>> algorithm = async_sgd(logistic_loss, timeline, step_size=async_schedules.step_size("constant", 0.05))
      >>> result = jaxfl.train(algorithm, iid(x, y, num_silos=4, seed=0), init_linear(5), rounds=timeline.num_slices,
      ...                      progress=False)
      >>> broadcast = latest_broadcast(result.state)
      >>> int(result.state.server.k) > 0, broadcast["w"].shape
      (True, (5,))
    """
    server = state.server
    ring = jax.tree_util.tree_leaves(server.ring)[0].shape[0]
    return _tmap(lambda r: r[server.k % ring], server.ring)
