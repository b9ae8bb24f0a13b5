"""The Python driver: compiled round chunks, accounting between them, and callbacks (evaluation, metrics,
checkpoints, the budget stop: :mod:`jaxfl.engine.callbacks`) between the calls.

::

    result = jaxfl.train(algorithm, data, params, rounds=100, key=0, eval_fn=evaluate, eval_every=10,
                         target_epsilon=3.0, delta=1e-5, metrics_path="run/metrics.jsonl",
                         checkpoint_dir="run/ckpt")

Rounds between two evaluations run as one ``lax.scan`` inside one jitted program. The privacy
ledger is consulted before each chunk; a chunk is shortened so that the run stops *before* the
first round that would push any silo's epsilon past the target.
"""
from __future__ import annotations

import dataclasses
import signal
import threading
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from jaxfl import checks
from jaxfl.data.federated import FederatedData
from jaxfl.engine import callbacks as callbacks_lib, sharding
from jaxfl.engine.protocol import FederatedAlgorithm, SiloState, initial_state, schedule_length
from jaxfl.privacy import keys as keys_lib


def run_rounds(algorithm: FederatedAlgorithm, state, data: FederatedData, root_key, start, num_rounds: int,
               inputs=None, on_round: Callable[[Any], None] | None = None):
    """Rounds ``start .. start + num_rounds - 1`` under ``lax.scan`` (pure; jit/vmap-able).

    Round ``r`` gets the key ``fold_in(root_key, r)`` and, for a scheduled algorithm, its inputs
    ``algorithm.schedule[r]``: ``inputs`` (leaves ``[num_rounds, ...]``) if given, else sliced from the
    schedule at ``start`` (which may be traced; the caller checks that the schedule is long enough, as
    :func:`train` does). ``on_round(r)`` (optional) is called on the host as round ``r`` runs (a
    ``jax.debug.callback``: progress, not results). Returns ``(state, infos)`` with every info leaf stacked over
    rounds.

    Example:
      >>> import jax, numpy as np, optax, jaxfl
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (1000, 5)))
      >>> data = jaxfl.from_silos([(x, (x[:, 0] > 0).astype(np.float32))])
      >>> algorithm = jaxfl.dp_sgd(logistic_loss, optimizer=optax.sgd(0.5), expected_batch_size=50, num_records=1000,
      ...                          clip_norm=1.0, noise_multiplier=1.0)
      >>> state = algorithm.init(init_linear(5))
      >>> run = jax.jit(lambda s, start: run_rounds(algorithm, s, data, jax.random.key(0), start, 10))
      >>> state, infos = run(state, 0)                   # rounds 0..9, one compiled program
      >>> state, infos = run(state, 10)                  # rounds 10..19, the same program
      >>> infos["clipped_fraction"].shape                 # one value per round
      (10,)
    """
    if algorithm.schedule is not None and inputs is None:
        inputs = jax.tree_util.tree_map(
            lambda leaf: jax.lax.dynamic_slice_in_dim(jnp.asarray(leaf), start, num_rounds), algorithm.schedule)

    def body(state, xs):
        r, round_inputs = xs
        key = keys_lib.round_key(root_key, r)
        if on_round is not None:
            jax.debug.callback(on_round, r)
        if algorithm.schedule is None:
            return algorithm.round(state, data, key)
        return algorithm.round(state, data, key, round_inputs)

    return jax.lax.scan(body, state, (start + jnp.arange(num_rounds), inputs))


def schedule_slice(algorithm: FederatedAlgorithm, start: int, num_rounds: int):
    """Host slice ``schedule[start : start + num_rounds]`` of a scheduled algorithm (None otherwise).

    Example (an unscheduled algorithm has none):
      >>> import optax, jaxfl
      >>> from jaxfl.models import logistic_loss
      >>> schedule_slice(jaxfl.minibatch_sgd(logistic_loss, server_opt=optax.sgd(1.0)), 0, 10) is None
      True
    """
    if algorithm.schedule is None:
        return None
    return jax.tree_util.tree_map(lambda leaf: np.asarray(leaf)[start:start + num_rounds], algorithm.schedule)


def check_schedule(algorithm: FederatedAlgorithm, rounds: int) -> None:
    """Raises ValueError when ``rounds`` rounds would run past the algorithm's schedule.

    Example (the asynchronous protocol's schedule covers its timeline's slices only):
      >>> import numpy as np
      >>> from jaxfl.algorithms import async_schedules, async_timeline, async_sgd
      >>> from jaxfl.models import logistic_loss
      >>> timeline = async_timeline.simulate(np.full((2, 2), 3), async_timeline.draw_timing(2, 2))
      >>> algorithm = async_sgd(logistic_loss, timeline, step_size=async_schedules.step_size("constant", 0.1))
      >>> check_schedule(algorithm, timeline.num_slices + 1)
      Traceback (most recent call last):
      ...
      ValueError: ...
    """
    length = schedule_length(algorithm)
    if length is not None and rounds > length:
        raise ValueError(f"rounds={rounds} runs past the schedule of {algorithm.name!r}, which covers {length} rounds")


@dataclasses.dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
      state: the final algorithm state (``state.params`` is the model).
      rounds: rounds completed (including rounds restored from a checkpoint).
      stop_reason: ``"completed"``, ``"budget"`` (the next round would exceed the target epsilon) or
        ``"terminated"`` (SIGTERM, once the previous handler returned).
      history: the metrics records written, one per evaluation.
      epsilon: the epsilon spent at ``delta`` (max over silos for ISRL-DP), or None if non-private.
      epsilons: per-silo epsilons (ISRL-DP) or None.
      ledger: the privacy ledger, for further queries.

    Example:
      >>> import jax, numpy as np, optax, jaxfl
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (1000, 5)))
      >>> y = (x[:, 0] > 0).astype(np.float32)
      >>> algorithm = jaxfl.dp_sgd(logistic_loss, optimizer=optax.sgd(0.5), expected_batch_size=50, num_records=1000,
      ...                          clip_norm=1.0, noise_multiplier=1.0)
      >>> result = jaxfl.train(algorithm, jaxfl.from_silos([(x, y)]), init_linear(5), rounds=20, delta=1e-5,
      ...                      eval_every=10, progress=False)
      >>> result.rounds, result.stop_reason, len(result.history), result.params["w"].shape
      (20, 'completed', 2, (5,))
      >>> round(result.epsilon, 3), result.ledger.rounds, round(result.history[-1]["epsilon"], 3)
      (2.481, 20, 2.481)
    """

    state: Any
    rounds: int
    stop_reason: str
    history: list
    epsilon: float | None = None
    epsilons: np.ndarray | None = None
    ledger: Any = None

    @property
    def params(self):
        """The trained model: the algorithm's shared parameters (``state.params``; for silo-state algorithms
        the server's)."""
        return (self.state.server if isinstance(self.state, SiloState) else self.state).params


def make_ledger(algorithm: FederatedAlgorithm, counts, accountant: str = "rdp", *, central: bool = False,
                **accountant_kw):
    """The privacy ledger of ``algorithm`` on silos of sizes ``counts``, or None if non-private.

    The ledger's accountants are built for the statement's neighbouring relation (``RoundPrivacy.relation``);
    an accountant that does not support it is refused with a ``ValueError`` naming both (e.g. ``"lowy"``
    for an add/remove-one statement). ``central=True``: the ledger of the algorithm's central guarantee
    (``RoundPrivacy.central``: a shuffle-model algorithm's shuffled transcript, accountant ``"shuffle"``, or
    central noise placement's aggregate), None if the algorithm states none. Needs no ``init``: an algorithm's
    privacy statement exists as soon as it is built. ``accountant_kw`` go to the accountant's constructor (e.g.
    ``value_discretization_interval=`` for ``"pld"``).

    Example:
      >>> import optax
      >>> from jaxfl.algorithms import minibatch_sgd
      >>> from jaxfl.models import logistic_loss
      >>> algorithm = minibatch_sgd(logistic_loss, server_opt=optax.sgd(1.0), sampling_rate=0.2, expected_batch_size=20,
      ...                           clip_norm=1.0, noise_multiplier=2.0)
      >>> ledger = make_ledger(algorithm, counts=[100, 100, 100, 100])    # before any training: how far can we go?
      >>> ledger.record(50)                                               # 50 rounds
      SiloLedger(accountant='rdp', num_silos=4, groups=1, rounds=50)
      >>> round(ledger.epsilon(1e-5), 2)                                  # each silo's epsilon (ISRL-DP), the worst
      3.85
    """
    if algorithm.privacy is None:
        return None
    from jaxfl.accounting import ledger as ledger_lib

    counts = np.asarray(counts)
    privacy = algorithm.privacy(counts)
    kwargs = {"composition": privacy.composition, "round_limit": privacy.round_limit,
              "neighboring_relation": privacy.relation, **accountant_kw}
    if central:
        return None if privacy.central is None else ledger_lib.CentralLedger(privacy.central, accountant=accountant,
                                                                             **kwargs)
    if privacy.level == "client":
        return ledger_lib.CentralLedger(privacy.events[0], accountant=accountant, **kwargs)
    return ledger_lib.SiloLedger(list(privacy.events), accountant=accountant, **kwargs)


def _check_budget_args(target_epsilon, delta, ledger):
    if target_epsilon is not None:
        checks.epsilon("target_epsilon", target_epsilon)
    if delta is not None:
        checks.delta("delta", delta)
    if target_epsilon is not None and delta is None:
        raise ValueError("target_epsilon needs a delta")
    if target_epsilon is not None and ledger is None:
        raise ValueError("target_epsilon was given but the algorithm is not private (it adds no noise)")


class _TerminationGuard:
    """While active (main thread only), SIGTERM only sets :attr:`requested`: the round in flight finishes and is
    saved, then the signal goes on to the handler there was before (by default, the process ends)."""

    def __init__(self):
        self.requested = False
        self._installed = False
        self._previous = None

    def _handle(self, signum, frame):
        del frame
        self.requested = True

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc):
        if self._installed:  # None: a handler not installed from Python, restored as the default
            signal.signal(signal.SIGTERM, signal.SIG_DFL if self._previous is None else self._previous)
            if self.requested:
                signal.raise_signal(signal.SIGTERM)
        return False


def train(algorithm: FederatedAlgorithm, data: FederatedData, params, *, rounds: int, key=0,
          eval_fn: Callable[[Any], dict] | None = None, eval_every: int | None = None,
          rounds_per_call: int | None = None,
          accountant: str = "rdp", target_epsilon: float | None = None, delta=None,
          metrics_path=None, checkpoint_dir=None, mesh=None, progress: bool = True,
          run_info: dict | None = None, silo_eval_fn: Callable[[Any, Any], dict] | None = None,
          on_record: Callable[[dict], None] | None = None, callbacks=()) -> TrainResult:
    """Runs ``rounds`` rounds of ``algorithm`` on ``data`` from ``params``.

    Args:
      algorithm: a :class:`FederatedAlgorithm`.
      data: silo-major data; with ``mesh`` it is padded and sharded over ``"silos"``. Checked once on the host
        before anything compiles (:func:`jaxfl.checks.federated_data`: shapes, integer counts in range,
        finite floating ``x``/``y``); a bad field raises ``ValueError`` naming it.
      params: initial model parameters.
      rounds: total number of rounds (a resumed run continues up to this number).
      key: root PRNG key or int seed; round ``r`` uses ``fold_in(key, r)``.
      eval_fn: ``params -> dict of floats`` on the shared model, called every ``eval_every`` rounds and at
        the end.
      silo_eval_fn: ``(silo_params, silo) -> dict of scalars``, vmapped over silos at each evaluation, on
        each silo's own model (``algorithm.silo_params(state)``, e.g. shared layers plus the silo's
        private head; the shared model for algorithms without one); ``silo`` is the silo's index (e.g.
        to pick its held-out records). Recorded as ``record["silos"][name]``, one value per silo.
      eval_every: rounds between evaluations, metrics records and checkpoints (default: once, at the end).
      rounds_per_call: at most this many rounds per call of the compiled program (default: up to the next
        evaluation); each distinct length compiles once. Memory and responsiveness only: the same rounds.
      accountant: ``"rdp"`` or ``"pld"`` for the privacy ledger (private algorithms only).
      target_epsilon, delta: stop before the round that would exceed ``(target_epsilon, delta)``;
        ``delta`` may be per silo (e.g. ``1/n_i^2``). ``delta`` alone just reports epsilon.
      metrics_path: JSONL file appended to at every evaluation. Each record's ``wall_seconds`` counts the
        run's seconds since round 0, summed over the sittings of a resumed run (the checkpoint stores them;
        a checkpoint written before jaxfl recorded them restarts the count at the resumed round).
      checkpoint_dir: orbax checkpoints after every chunk; an existing checkpoint is resumed.
      mesh: a ``"silos"`` mesh (see :func:`jaxfl.engine.sharding.silo_mesh`) to shard silos over. Several
        processes (``jax.distributed``): a mesh over all processes' devices, every process calling ``train``
        with the same arguments; ``data`` either the same full host copy in each process or the global array
        of :func:`jaxfl.engine.sharding.shard_local_data` (padding silos then appear in per-silo metrics).
      progress: show a progress bar, advanced as each round runs (by a host callback from the compiled
        rounds; without a mesh) or, with a mesh, after each compiled call.
      run_info: extra fields written into every metrics record (e.g. ``{"seed": 0}``).
      on_record: called with every metrics record once it is written and checkpointed (e.g. to log a
        long run's progress).
      callbacks: more :class:`jaxfl.engine.callbacks.Callback` s, run after the ones the arguments above stand for
        (:func:`jaxfl.engine.callbacks.default_callbacks`: evaluation, the record's epsilon and wall seconds, the
        budget stop, the metrics file, checkpoints, ``on_record``), e.g.
        :class:`jaxfl.engine.callbacks.TensorBoard`.

    Faults: an exception in ``eval_fn`` or ``silo_eval_fn`` is raised after the round's metrics record (with
    ``eval_error``) and checkpoint are written; SIGTERM (in the main thread) lets the round in flight finish
    and be saved, then goes on to the previous handler (``stop_reason`` ``"terminated"`` if that returns). A
    resumed run recomputes nothing it saved and charges the ledger once per round.

    Example:
      >>> import jax, numpy as np, optax, jaxfl
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (1000, 5)))
      >>> y = (x[:, 0] > 0).astype(np.float32)
      >>> algorithm = jaxfl.dp_sgd(logistic_loss, optimizer=optax.sgd(0.5), expected_batch_size=50,
      ...                          num_records=1000, clip_norm=1.0, noise_multiplier=1.0)
      >>> result = jaxfl.train(algorithm, jaxfl.from_silos([(x, y)]), init_linear(5), rounds=1000,
      ...                      target_epsilon=2.0, delta=1e-5, progress=False)
      >>> result.stop_reason, result.rounds < 1000, result.epsilon <= 2.0   # stopped before exceeding the budget
      ('budget', True, True)
    """
    rounds = checks.non_negative_int("rounds", rounds)
    eval_every = rounds if eval_every is None else checks.integer("eval_every", eval_every)
    if eval_every < 1 and rounds > 0:
        raise ValueError(f"eval_every must be >= 1, got {eval_every}")
    if rounds_per_call is not None and checks.integer("rounds_per_call", rounds_per_call) < 1:
        raise ValueError(f"rounds_per_call must be >= 1, got {rounds_per_call}")
    check_schedule(algorithm, rounds)
    checked = data
    if isinstance(data, FederatedData) and isinstance(data.counts, jax.Array):
        checked = data._replace(counts=sharding.to_host(data.counts))  # gathered if data spans several processes
    checks.federated_data(checked)  # shapes, dtypes and finiteness, once on the host before anything compiles
    counts_host = np.asarray(checked.counts)
    ledger = (make_ledger(algorithm, counts_host, accountant)
              if (target_epsilon is not None or delta is not None) else None)
    _check_budget_args(target_epsilon, delta, ledger)
    if ledger is not None and np.ndim(delta) > 0:
        delta = np.asarray(delta, float)
        if delta.shape != (int(np.sum(counts_host > 0)),):
            raise ValueError(f"per-silo delta has shape {delta.shape}; expected one value per silo with records "
                             f"({int(np.sum(counts_host > 0))})")

    root = keys_lib.as_key(key)
    num_silos = data.num_silos  # before padding for the mesh: per-silo metrics cover these
    if mesh is not None:
        data = sharding.shard_data(data, mesh)
    state = initial_state(algorithm, params, data.num_silos)
    if mesh is not None:
        state = sharding.shard_silo_state(state, mesh)
    run_id = {"algorithm": algorithm.name, "key": np.asarray(jax.random.key_data(root)).ravel().tolist()}
    run = callbacks_lib.Run(algorithm, data, state, 0, rounds, ledger, delta, run_id, num_silos)
    hooks = callbacks_lib.default_callbacks(
        eval_fn=eval_fn, silo_eval_fn=silo_eval_fn, target_epsilon=target_epsilon, metrics_path=metrics_path,
        checkpoint_dir=checkpoint_dir, on_record=on_record) + list(callbacks)
    history = []
    bar = tqdm(total=rounds, disable=not progress, desc=algorithm.name, leave=False)
    per_round = progress and mesh is None  # with a mesh each device would call back
    on_round = (lambda _: bar.update(1)) if per_round else None
    chunk = jax.jit(lambda st, d, k, s, inputs, n: run_rounds(algorithm, st, d, k, s, n, inputs, on_round),
                    static_argnums=5)
    terminate = _TerminationGuard()
    try:
        for hook in hooks:
            hook.restore(run)
        for hook in hooks:
            hook.on_start(run)
        bar.n = run.round
        bar.refresh()
        run.started = time.perf_counter()
        with sharding.mesh_context(mesh), terminate:
            while run.round < rounds and run.stop_reason is None:
                r = run.round
                n = min(eval_every - (r % eval_every), rounds - r, rounds_per_call or rounds)
                for hook in hooks:
                    n = hook.rounds_allowed(run, n) if n > 0 else 0
                if n == 0:
                    break
                run.state, infos = chunk(run.state, data, root, jnp.asarray(r, jnp.int32),
                                         schedule_slice(algorithm, r, n), n)
                run.round = r = r + n
                if ledger is not None:
                    ledger.record(n)
                record = {"round": r, **(run_info or {})}
                record.update({k: float(np.mean(v)) for k, v in sharding.to_host(infos).items()})
                history.append(record)
                for hook in hooks:  # evaluation and the stamp first: they fill the record the others save
                    hook.on_record(run, record)
                if run.failure is not None:
                    run.failure.add_note(f"jaxfl: raised by the evaluation after round {r}; that round's metrics"
                                         + (" and checkpoint were" if checkpoint_dir is not None else " were")
                                         + " saved first")
                    raise run.failure
                if per_round:
                    bar.n = r  # the callbacks have counted these rounds; this only settles the count
                    bar.refresh()
                else:
                    bar.update(n)
                if terminate.requested:
                    run.stop_reason = "terminated"
    finally:
        bar.close()
        for hook in hooks:
            hook.on_end(run)
    epsilon = epsilons = None
    if ledger is not None:
        epsilon = float(ledger.epsilon(delta))
        epsilons = np.asarray(ledger.epsilons(delta))
    return TrainResult(run.state, run.round, run.stop_reason or "completed", history, epsilon, epsilons,
                       ledger)

