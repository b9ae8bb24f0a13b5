"""The asynchronous protocol's timeline (van Dijk et al. §4), simulated on the host as a deterministic event queue.

Who computes when, which messages reach the server in which order, and which broadcast each client accepts
depend on compute speeds, delays, sample sizes and the wait rule only, never on model values. So the whole
timeline is simulated first (this module, plain Python) and then executed by compiled, vmapped *slices*
(:func:`jaxfl.algorithms.async_dp.async_sgd`): slice ``j`` covers the times ``[b_{j-1}, b_j)``; every client
runs the local steps it *starts* in it, then at ``b_j``, in this order, clients that finished a round send
it (noise added), the server applies the messages that arrived (in arrival order; after each, while round
``k`` is complete for every client, ``k += 1`` and it broadcasts ``(v_hat, k)``), and clients accept the
newest broadcast delivered to them with ``k > k_old``.

The protocol (digest §4.2-4.5, appendix conventions):

* client ``c`` runs rounds ``i = 0..T-1`` of ``s[i, c]`` single-record steps, each taking ``step_time[c]``;
  steps are atomic: a broadcast delivered during a step is accepted when the step ends
  (``w_hat = v_hat_k - eta_i U_partial``, which includes the step), and one delivered while the client waits is
  accepted at once;
* round ``i``'s message reaches the server ``upload[i, c]`` after the round's last step ends; broadcast ``k``
  (it holds every round ``< k``) reaches client ``c`` ``download[k, c]`` after it is sent;
* wait rule, checked before every step: ``lookahead=d``, a client computes round ``i`` only if
  ``i <= k_old + d`` (``d = 0``: synchronous rounds); or ``tau``, it computes a step only if
  ``t_delay <= tau(t_glob)`` with ``t_glob = sum_{j<=i} s_j - (s_{i,c} - h) - 1`` and ``t_delay =
  sum_{j=k_old}^{i} s_j - (s_{i,c} - h)`` (``s_j`` the round's global size; the main text's "wait while
  tau(t_glob) = t_delay" and the appendix's "<=" both keep this invariant); ``None``: never wait;
* ``quantum``: ``None`` simulates exact times (a slice per distinct event time). A positive quantum puts every
  arrival and delivery on the grid ``quantum * N`` (ceil), and a client that ends a round starts the next on
  the grid: slices are then grid intervals, so thousands of clients share few slices.

Ties at equal times are processed as: step ends (and round ends) first, then arrivals at the server, then
deliveries, each in client order. With zero delays and equal speeds every round is therefore synchronous.
"""
from __future__ import annotations

import dataclasses
import heapq
import math
from typing import Callable

import numpy as np

from jaxfl import checks

_STEP_END, _ARRIVAL, _DELIVERY = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class Timing:
    """Compute speeds and delays of one simulated run: ``step_time [n]`` (seconds per local step),
    ``upload [T, n]`` (round ``i``'s message of client ``c``), ``download [T + 1, n]`` (broadcast ``k``'s
    delay to client ``c``; row 0 unused).

    Example: :func:`draw_timing`.
    """

    step_time: np.ndarray
    upload: np.ndarray
    download: np.ndarray


def draw_timing(num_clients: int, rounds: int, *, seed: int = 0, speed_spread: float = 0.0,
                mean_delay: float = 0.0, delay_spread: float = 0.5, step_time: float = 1.0) -> Timing:
    """A seeded timing model: client speeds ``step_time * lognormal(0, speed_spread)`` (fixed per client) and
    message delays ``mean_delay * lognormal(-delay_spread^2 / 2, delay_spread)`` drawn per message (mean
    ``mean_delay``, in the same unit as ``step_time``). ``speed_spread = mean_delay = 0``: equal speeds, no
    delays.

    Example (3 clients, 4 rounds, spread-out speeds, mean message delay of one step):
      >>> timing = draw_timing(3, 4, seed=0, speed_spread=0.5, mean_delay=1.0)
      >>> timing.step_time.round(3).tolist(), timing.upload.shape, timing.download.shape
      ([1.065, 0.936, 1.377], (4, 3), (5, 3))
    """
    n, t = checks.positive_int("num_clients", num_clients), checks.positive_int("rounds", rounds)
    rng = np.random.default_rng(  # host-rng-ok: the simulated timing (speeds, delays), not noise or sampling
        checks.non_negative_int("seed", seed))
    spread = checks.non_negative_float("speed_spread", speed_spread)
    delay, dspread = checks.non_negative_float("mean_delay", mean_delay), checks.non_negative_float("delay_spread",
                                                                                                   delay_spread)
    speed = checks.positive_float("step_time", step_time) * np.exp(spread * rng.standard_normal(n))

    def delays(shape):
        return delay * np.exp(dspread * rng.standard_normal(shape) - dspread ** 2 / 2)

    return Timing(speed, delays((t, n)), delays((t + 1, n)))


@dataclasses.dataclass(frozen=True)
class Timeline:
    """The simulated run, as slices (``S``) and facts.

    Per slice (host arrays with a leading slice axis, the compiled run's schedule):

    - steps ``[S, n]``: local steps each client starts in the slice;
    - sends ``[S, n]``: the client ends a round at the slice's end;
    - apply_client ``[S, M]``: the clients whose messages the server applies at the slice's end, in arrival
      order (``-1`` pads); apply_round ``[S, M]``: those messages' rounds;
    - broadcast_after ``[S, M]``: ``k`` when the server broadcasts ``(v_hat, k)`` right after applying that
      entry, else ``-1``;
    - accept ``[S, n]``: the broadcast ``k`` each client accepts at the slice's end, else ``-1``.

    Facts: ``boundaries [S]`` (slice end times), ``send_time``/``arrival_time``/``start_time [T, n]`` (round
    ``i``: its message sent, applied, and its first step), ``lookahead [T, n]`` (``i - k_old`` at each round's
    first step), ``max_delay_ratio`` (the largest ``t_delay / tau(t_glob)`` over all steps; tau rule only),
    ``broadcast_time [T + 1]``, ``outbox`` (messages a client can have in flight) and ``ring`` (broadcasts
    that must be kept: the compiled run's buffer sizes), ``sizes [T, n]``.

    Example: :func:`simulate`.
    """

    steps: np.ndarray
    sends: np.ndarray
    apply_client: np.ndarray
    apply_round: np.ndarray
    broadcast_after: np.ndarray
    accept: np.ndarray
    boundaries: np.ndarray
    send_time: np.ndarray
    arrival_time: np.ndarray
    start_time: np.ndarray
    lookahead: np.ndarray
    broadcast_time: np.ndarray
    max_delay_ratio: float
    outbox: int
    ring: int
    sizes: np.ndarray

    @property
    def num_slices(self) -> int:
        return int(self.steps.shape[0])

    def schedule(self) -> dict:
        """The per-slice arrays the compiled run reads (``int32``)."""
        return {"steps": self.steps.astype(np.int32), "sends": self.sends,
                "apply_client": self.apply_client.astype(np.int32), "apply_round": self.apply_round.astype(np.int32),
                "broadcast_after": self.broadcast_after.astype(np.int32), "accept": self.accept.astype(np.int32)}


def simulate(sizes, timing: Timing, *, lookahead: int | None = None, tau: Callable | None = None,
             quantum: float | None = None) -> Timeline:
    """Simulates the protocol for per-client sample sizes ``sizes [T, n]`` (every client runs ``T`` rounds)
    under ``timing``; see the module docstring for the rules. Give at most one of ``lookahead`` and ``tau``.

    Example (3 clients, 4 rounds of 5 local steps each):
      >>> import numpy as np
      >>> timeline = simulate(np.full((4, 3), 5), draw_timing(3, 4, seed=0, speed_spread=0.5, mean_delay=1.0))
      >>> int(timeline.sends.sum()), int(timeline.steps.sum())          # every round of every client, sent
      (12, 60)
    """
    s = np.asarray(sizes, dtype=np.int64)
    if s.ndim != 2 or s.size == 0 or np.any(s < 1):
        raise ValueError(f"sizes must be a [rounds, clients] array of sizes >= 1, got shape {np.shape(sizes)}")
    T, n = s.shape
    step_time = np.asarray(timing.step_time, np.float64)
    up, down = np.asarray(timing.upload, np.float64), np.asarray(timing.download, np.float64)
    if step_time.shape != (n,) or np.any(step_time <= 0):
        raise ValueError(f"timing.step_time must hold {n} positive times, got {timing.step_time!r}")
    if up.shape != (T, n) or down.shape != (T + 1, n) or np.any(up < 0) or np.any(down < 0):
        raise ValueError(f"timing.upload must be [{T}, {n}] and timing.download [{T + 1}, {n}], non-negative; "
                         f"got {up.shape} and {down.shape}")
    if lookahead is not None and tau is not None:
        raise ValueError("give lookahead or tau, not both")
    d = None if lookahead is None else checks.non_negative_int("lookahead", lookahead)
    grid = None if quantum is None else checks.positive_float("quantum", quantum)

    def on_grid(t):
        return t if grid is None else math.ceil(t / grid - 1e-9) * grid

    glob = s.sum(axis=1)                      # s_j: round j's global size
    before = np.concatenate([[0], np.cumsum(glob)])   # sum_{j<i} s_j

    def allowed(c, i, h, k):
        if d is not None:
            return i <= k + d
        if tau is None:
            return True
        t_glob = before[i + 1] - (s[i, c] - h) - 1
        t_delay = before[i + 1] - before[min(k, i + 1)] - (s[i, c] - h)
        return t_delay <= float(tau(t_glob))

    # client state
    rnd = np.zeros(n, np.int64)
    step = np.zeros(n, np.int64)
    k_old = np.zeros(n, np.int64)
    busy = np.zeros(n, bool)
    runs = []                                  # (c, t_start, count) of consecutive steps
    send_time = np.full((T, n), np.nan)
    send_at = np.full((T, n), np.nan)
    arrival_time = np.full((T, n), np.nan)
    start_time = np.full((T, n), np.nan)
    look = np.zeros((T, n), np.int64)
    ratio = [0.0]
    # server state
    applied = np.zeros(T, np.int64)
    k_server = 0
    broadcast_time = np.full(T + 1, np.nan)
    broadcast_time[0] = 0.0
    server_log = []                            # (time, c, i, k broadcast after or -1)
    accepts = []                               # (time, c, k)
    events: list = []
    seq = [0]

    def push(t, kind, c, payload):
        heapq.heappush(events, (t, kind, c, seq[0], payload))
        seq[0] += 1

    def run_from(c, t):
        """Starts client c's steps at t: as many as the wait rule allows before the round ends."""
        i, h = int(rnd[c]), int(step[c])
        if i >= T:
            return
        count = 0
        while h + count < s[i, c] and allowed(c, i, h + count, int(k_old[c])):
            if tau is not None:
                t_glob = before[i + 1] - (s[i, c] - h - count) - 1
                t_delay = before[i + 1] - before[min(int(k_old[c]), i + 1)] - (s[i, c] - h - count)
                ratio[0] = max(ratio[0], t_delay / max(float(tau(t_glob)), 1e-300))
            count += 1
        if count == 0:
            return                             # waits for a delivery
        if h == 0:
            start_time[i, c] = t
            look[i, c] = i - k_old[c]
        runs.append((c, t, count, step_time[c]))
        busy[c] = True
        push(t + count * step_time[c], _STEP_END, c, count)

    for c in range(n):
        run_from(c, 0.0)
    while events:
        t, kind, c, _, payload = heapq.heappop(events)
        if kind == _STEP_END:
            busy[c] = False
            step[c] += payload
            i = int(rnd[c])
            if step[c] == s[i, c]:             # round end: send (processed on the grid)
                send_time[i, c] = t
                send_at[i, c] = on_grid(t)
                push(on_grid(t + up[i, c]), _ARRIVAL, c, i)
                rnd[c], step[c] = i + 1, 0
                restart = on_grid(t)
                if restart > t:
                    push(restart, _DELIVERY, c, -1)   # wake-up on the grid (no broadcast)
                    continue
            run_from(c, t)
        elif kind == _ARRIVAL:
            i = payload
            arrival_time[i, c] = t
            applied[i] += 1
            after = -1
            while k_server < T and applied[k_server] == n:
                k_server += 1
                after = k_server
                broadcast_time[k_server] = t
                for c2 in range(n):
                    push(on_grid(t + down[k_server, c2]), _DELIVERY, c2, k_server)
            server_log.append((t, c, i, after))
        else:
            k = payload
            if k > k_old[c]:
                k_old[c] = k
                accepts.append((t, c, k))
            if not busy[c]:
                run_from(c, t)
    if np.any(rnd < T) or k_server < T:
        raise ValueError(f"the run stalls: clients reached rounds {rnd.tolist()} of {T} and the server broadcast "
                         f"{k_server} (a wait rule no broadcast can release; raise lookahead or tau)")
    return _slices(s, runs, server_log, accepts, send_time, send_at, arrival_time, start_time, look, broadcast_time,
                   ratio[0] if tau is not None else math.nan)


def _slices(s, runs, server_log, accepts, send_time, send_at, arrival_time, start_time, look, broadcast_time, ratio):
    T, n = s.shape
    times = sorted(set(send_at.ravel().tolist()) | {t for t, *_ in server_log} | {t for t, *_ in accepts})
    boundaries = np.asarray(times, np.float64)
    S = len(boundaries)
    index = {t: j for j, t in enumerate(times)}
    steps = np.zeros((S, n), np.int64)
    for c, t0, count, dt in runs:
        starts = t0 + np.arange(count) * dt
        slot = np.searchsorted(boundaries, starts, side="right")   # start in [b_{j-1}, b_j) -> slice j
        np.add.at(steps[:, c], slot, 1)
    sends = np.zeros((S, n), bool)
    for i in range(T):
        for c in range(n):
            sends[index[send_at[i, c]], c] = True
    per_slice = [[] for _ in range(S)]
    for t, c, i, after in server_log:
        per_slice[index[t]].append((c, i, after))
    M = max(1, max(len(x) for x in per_slice))
    apply_client = np.full((S, M), -1, np.int64)
    apply_round = np.zeros((S, M), np.int64)
    broadcast_after = np.full((S, M), -1, np.int64)
    for j, entries in enumerate(per_slice):
        for e, (c, i, after) in enumerate(entries):
            apply_client[j, e], apply_round[j, e], broadcast_after[j, e] = c, i, after
    accept = np.full((S, n), -1, np.int64)
    last_use = np.full(T + 1, -1)
    for t, c, k in accepts:
        accept[index[t], c] = max(accept[index[t], c], k)
        last_use[k] = max(last_use[k], index[t])
    # buffer sizes: broadcast k + ring must be written after k's last use; message i + outbox of a client
    # must be sent at a later slice than message i arrives
    gen = np.array([0] + [index[t] for t in broadcast_time[1:]])
    ring = 1
    while any(gen[k + ring] <= last_use[k] for k in range(T + 1 - ring)):
        ring += 1
    send_slice = np.vectorize(index.get)(send_at)
    arrive_slice = np.vectorize(index.get)(arrival_time)
    outbox = 1
    while np.any(send_slice[outbox:] <= arrive_slice[:-outbox]) if outbox < T else False:
        outbox += 1
    return Timeline(steps, sends, apply_client, apply_round, broadcast_after, accept, boundaries, send_time,
                    arrival_time, start_time, look, broadcast_time, ratio, outbox, ring, s)

