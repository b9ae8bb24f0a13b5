"""What :func:`jaxfl.engine.train` does between compiled calls, as pluggable callbacks.

``train`` runs rounds in compiled calls; between two calls it builds one metrics *record* (the round, the
rounds' mean infos, the epsilon spent so far, the wall seconds) and hands it to its callbacks in order. Its
keyword arguments build the default ones (``eval_fn`` -> :class:`Evaluate`, ``target_epsilon`` ->
:class:`BudgetStop`, ``metrics_path`` -> :class:`MetricsFile`, ``checkpoint_dir`` -> :class:`Checkpoints`,
``on_record`` -> :class:`OnRecord`); ``callbacks=`` adds more after them, e.g. :class:`TensorBoard`::

    result = jaxfl.train(algorithm, data, params, rounds=100, eval_fn=evaluate, eval_every=10,
                         callbacks=[TensorBoard("runs/tb")])

A callback subclasses :class:`Callback` and overrides what it needs; all hooks run on the host, outside jit.

Example (a small DP-SGD run through every callback: the defaults from ``train``'s arguments, a callback of one's
own, a resumed run):

  >>> import pathlib, tempfile
  >>> import jax, numpy as np, optax, jaxfl
  >>> from jaxfl.engine.metrics import read_metrics
  >>> from jaxfl.models import binary_accuracy, init_linear, logistic_loss
  >>> x = np.asarray(jax.random.normal(jax.random.key(0), (400, 5)))
  >>> y = (x[:, 0] > 0).astype(np.float32)
  >>> data = jaxfl.from_silos([(x, y)])
  >>> algorithm = jaxfl.dp_sgd(logistic_loss, optimizer=optax.sgd(0.5), expected_batch_size=40,
  ...                          num_records=400, clip_norm=1.0, noise_multiplier=1.0)
  >>> class NormLog(Callback):                         # keeps the model's norm after every compiled call
  ...     def __init__(self):
  ...         self.norms = []
  ...     def on_record(self, run, record):
  ...         self.norms.append((run.round, float(np.linalg.norm(run.state.params["w"]))))
  >>> folder, log, records = pathlib.Path(tempfile.mkdtemp()), NormLog(), []
  >>> first = jaxfl.train(algorithm, data, init_linear(5), rounds=20, eval_every=10, delta=1e-5, progress=False,
  ...                     eval_fn=lambda params: {"accuracy": binary_accuracy(params, x, y)},   # Evaluate
  ...                     metrics_path=folder / "metrics.jsonl",                              # MetricsFile
  ...                     checkpoint_dir=folder / "checkpoints",                              # Checkpoints
  ...                     on_record=records.append, callbacks=[log])                          # OnRecord, yours
  >>> [(r["round"], r["accuracy"] > 0.5, r["epsilon"] > 0) for r in records]       # Stamp adds the epsilon
  [(10, True, True), (20, True, True)]
  >>> [r for r, _ in log.norms], [r["round"] for r in read_metrics(folder / "metrics.jsonl")]
  ([10, 20], [10, 20])
  >>> resumed = jaxfl.train(algorithm, data, init_linear(5), rounds=40, eval_every=10, delta=1e-5,
  ...                       progress=False, checkpoint_dir=folder / "checkpoints")          # rounds 21-40 only
  >>> whole = jaxfl.train(algorithm, data, init_linear(5), rounds=40, eval_every=10, delta=1e-5, progress=False)
  >>> bool(np.array_equal(resumed.params["w"], whole.params["w"])), resumed.epsilon == whole.epsilon
  (True, True)
  >>> capped = jaxfl.train(algorithm, data, init_linear(5), rounds=10_000, delta=1e-5, progress=False,
  ...                      callbacks=[BudgetStop(1.0)])                                 # as target_epsilon=1.0
  >>> capped.stop_reason, capped.epsilon <= 1.0
  ('budget', True)
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxfl.engine import sharding
from jaxfl.engine.checkpoint import Checkpointer
from jaxfl.engine.metrics import MetricsWriter
from jaxfl.engine.protocol import FederatedAlgorithm, silo_models_of


@dataclasses.dataclass
class Run:
    """The loop of one :func:`~jaxfl.engine.train` call, as its callbacks see it.

    Attributes:
      algorithm: the algorithm being run.
      data: the data it runs on (with a mesh: padded and sharded over ``"silos"``).
      state: the algorithm state after ``round`` rounds (a callback may replace it before the first call:
        :class:`Checkpoints` restores it).
      round: rounds completed so far (including rounds restored from a checkpoint).
      rounds: rounds asked for.
      ledger: the privacy ledger (None for a non-private algorithm or without ``delta``).
      delta: the ``delta`` epsilons are reported at.
      run_id: the algorithm's name and the root key (what a checkpoint must match to be resumed).
      num_silos: silos in the data (before padding for a mesh).
      seconds_before: wall seconds of earlier sittings of a resumed run.
      started: ``time.perf_counter()`` when this sitting's first compiled call began.
      stop_reason: set by a callback to end the run after the current record (e.g. ``"budget"``).
      failure: an exception raised while building the record (an evaluation's), raised by ``train`` once every
        callback has seen the record.

    Example: the module docstring's.
    """

    algorithm: FederatedAlgorithm
    data: Any
    state: Any
    round: int
    rounds: int
    ledger: Any
    delta: Any
    run_id: dict
    num_silos: int
    seconds_before: float = 0.0
    started: float = 0.0
    stop_reason: str | None = None
    failure: BaseException | None = None


class Callback:
    """Hooks of :func:`~jaxfl.engine.train`; each default does nothing. ``train`` calls ``restore`` on every
    callback, then ``on_start`` on every callback, then per compiled call ``rounds_allowed`` and ``on_record``,
    and ``on_end`` when the run ends; each in the callbacks' order. Example: the module docstring's ``NormLog``.
    """

    def restore(self, run: Run) -> None:
        """First of all: a callback that keeps the run elsewhere (:class:`Checkpoints`) may set ``run.state``,
        ``run.round`` and ``run.seconds_before`` to resume it."""

    def on_start(self, run: Run) -> None:
        """Before the first compiled call, once every callback has restored what it keeps."""

    def rounds_allowed(self, run: Run, rounds: int) -> int:
        """How many of the next ``rounds`` rounds may run (0 ends the run with ``run.stop_reason``)."""
        return rounds

    def on_record(self, run: Run, record: dict) -> None:
        """After a compiled call: ``record`` (a dict, updated in place by the callbacks before this one)."""

    def on_end(self, run: Run) -> None:
        """When the run ends, normally or not."""


class Evaluate(Callback):
    """Adds ``eval_fn(params)`` (the shared model) and, with ``silo_eval_fn``, per-silo metrics on each silo's
    own model (``record["silos"][name]``, one value per silo) to every record. An exception in either is
    recorded (``record["eval_error"]``) and raised by ``train`` once the record is saved.

    Args:
      eval_fn: ``params -> dict of floats``, or None.
      silo_eval_fn: ``(silo_params, silo) -> dict of scalars``, vmapped over silos and jitted, or None.

    Example: the module docstring's.
    """

    def __init__(self, eval_fn: Callable[[Any], dict] | None = None,
                 silo_eval_fn: Callable[[Any, Any], dict] | None = None):
        self.eval_fn, self.silo_eval_fn = eval_fn, silo_eval_fn
        self._silos = None

    def on_start(self, run: Run) -> None:
        if self.silo_eval_fn is not None:
            algorithm, fn, num = run.algorithm, self.silo_eval_fn, run.data.num_silos

            def evaluate(state):
                return jax.vmap(fn)(silo_models_of(algorithm, state, num), jnp.arange(num))

            self._silos = jax.jit(evaluate)

    def on_record(self, run: Run, record: dict) -> None:
        try:
            if self.eval_fn is not None:
                record.update({k: float(v) for k, v in self.eval_fn(run.state.params).items()})
            if self._silos is not None:
                per_silo = sharding.to_host(self._silos(run.state))
                record["silos"] = {k: np.asarray(v)[:run.num_silos].astype(float).tolist()
                                   for k, v in per_silo.items()}
        except Exception as error:  # raised by train once the record is saved
            run.failure = error
            record["eval_error"] = f"{type(error).__name__}: {error}"


class Stamp(Callback):
    """Adds the epsilon spent so far (``record["epsilon"]``, the largest over silos, with a ledger) and the run's
    wall seconds since round 0 (``record["wall_seconds"]``, summed over the sittings of a resumed run).

    Example: the module docstring's.
    """

    def on_record(self, run: Run, record: dict) -> None:
        if run.ledger is not None:
            record["epsilon"] = float(run.ledger.epsilon(run.delta))
        record["wall_seconds"] = run.seconds_before + time.perf_counter() - run.started


class BudgetStop(Callback):
    """Stops the run before the first round that would push any silo's epsilon past ``target_epsilon`` at the
    run's ``delta`` (``stop_reason`` ``"budget"``): each call is shortened to the rounds the ledger allows.

    Example: the module docstring's.
    """

    def __init__(self, target_epsilon: float):
        self.target_epsilon = target_epsilon

    def rounds_allowed(self, run: Run, rounds: int) -> int:
        allowed = run.ledger.rounds_within_budget(self.target_epsilon, run.delta, rounds)
        if allowed == 0:
            run.stop_reason = "budget"
        return allowed

    def on_record(self, run: Run, record: dict) -> None:
        if run.round < run.rounds and run.ledger.rounds_within_budget(self.target_epsilon, run.delta, 1) == 0:
            run.stop_reason = "budget"


class MetricsFile(Callback):
    """Appends every record to a JSONL file (flushed and fsync'ed); a resumed run first drops the lines past the
    round it resumes from.

    Example: the module docstring's.
    """

    def __init__(self, path: str | os.PathLike):
        self.writer = MetricsWriter(path)

    def on_start(self, run: Run) -> None:
        if run.round > 0:
            self.writer.truncate_after(run.round)

    def on_record(self, run: Run, record: dict) -> None:
        self.writer.write(record)


class Checkpoints(Callback):
    """Orbax checkpoints of the state after every compiled call; an existing checkpoint in ``directory`` is
    resumed (its run must have the same algorithm name and root key, else ``ValueError``), its rounds charged to
    the ledger once.

    Args:
      directory: the checkpoint folder.
      max_to_keep: checkpoints kept (the newest ones).

    Example: the module docstring's.
    """

    def __init__(self, directory: str | os.PathLike, max_to_keep: int = 2):
        self.directory = directory
        self.ckpt = Checkpointer(directory, max_to_keep=max_to_keep)

    def restore(self, run: Run) -> None:
        step = self.ckpt.latest_step()
        if step is None:
            return
        state, meta = self.ckpt.restore(step, run.state)
        if {k: meta.get(k) for k in run.run_id} != run.run_id:
            raise ValueError(f"checkpoint in {self.directory} belongs to another run (algorithm "
                             f"{meta.get('algorithm')!r}, key {meta.get('key')}); this run is {run.run_id}")
        run.state, run.round = state, int(meta["round"])
        run.seconds_before = float(meta.get("wall_seconds", 0.0))
        if run.ledger is not None:
            run.ledger.record(run.round)

    def on_record(self, run: Run, record: dict) -> None:
        self.ckpt.save(run.round, run.state, {"round": run.round, **run.run_id,
                                              "wall_seconds": record["wall_seconds"]})

    def on_end(self, run: Run) -> None:
        self.ckpt.close()


class OnRecord(Callback):
    """Calls ``fn(record)`` with every record that was built without an evaluation error (e.g. to log a long
    run's progress).

    Example: the module docstring's.
    """

    def __init__(self, fn: Callable[[dict], None]):
        self.fn = fn

    def on_record(self, run: Run, record: dict) -> None:
        if run.failure is None:
            self.fn(record)


class TensorBoard(Callback):
    """Every numeric field of every record as a TensorBoard scalar at step ``record["round"]`` (per-silo metrics
    as ``silos/NAME/SILO``), through tensorboardX (``pip install 'jaxfl[tensorboard]'``).

    Args:
      logdir: the event files' folder (``tensorboard --logdir`` it).

    Example (the module docstring's run, with ``callbacks=[TensorBoard(logdir)]``; needs the ``tensorboard`` extra):
      >>> TensorBoard("runs/tb")                                  # doctest: +SKIP
    """

    def __init__(self, logdir: str | os.PathLike):
        from jaxfl.extras import require

        self.writer = require("tensorboardX").SummaryWriter(str(logdir))

    def on_record(self, run: Run, record: dict) -> None:
        step = int(record["round"])
        for name, value in record.items():
            if name != "round" and isinstance(value, (int, float)) and not isinstance(value, bool):
                if math.isfinite(value):
                    self.writer.add_scalar(name, value, step)
        for name, values in record.get("silos", {}).items():
            for silo, value in enumerate(values):
                self.writer.add_scalar(f"silos/{name}/{silo}", value, step)
        self.writer.flush()

    def on_end(self, run: Run) -> None:
        self.writer.close()


def default_callbacks(*, eval_fn=None, silo_eval_fn=None, target_epsilon=None, metrics_path=None,
                      checkpoint_dir=None, on_record=None) -> list[Callback]:
    """The callbacks :func:`~jaxfl.engine.train`'s keyword arguments stand for, in the order they run:
    :class:`Evaluate` (with an ``eval_fn`` or ``silo_eval_fn``), :class:`Stamp`, :class:`BudgetStop` (with a
    ``target_epsilon``), :class:`MetricsFile`, :class:`Checkpoints`, :class:`OnRecord` (each with its
    argument).

    Example:
      >>> [type(c).__name__ for c in default_callbacks(eval_fn=lambda params: {}, target_epsilon=1.0)]
      ['Evaluate', 'Stamp', 'BudgetStop']
    """
    hooks: list[Callback] = []
    if eval_fn is not None or silo_eval_fn is not None:
        hooks.append(Evaluate(eval_fn, silo_eval_fn))
    hooks.append(Stamp())
    if target_epsilon is not None:
        hooks.append(BudgetStop(target_epsilon))
    if metrics_path is not None:
        hooks.append(MetricsFile(metrics_path))
    if checkpoint_dir is not None:
        hooks.append(Checkpoints(checkpoint_dir))
    if on_record is not None:
        hooks.append(OnRecord(on_record))
    return hooks
