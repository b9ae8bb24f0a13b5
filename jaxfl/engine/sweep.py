"""Hyperparameter sweeps as one vmapped program.

Factories bind hyperparameters as traceable values, so a grid over epsilons (noise multipliers),
step sizes and seeds is a ``vmap`` of :func:`jaxfl.engine.driver.run_rounds`::

    out = sweep(lambda lr, z: minibatch_sgd(loss, server_opt=optax.sgd(lr), noise_multiplier=z, ...),
                {"lr": [0.1, 0.3], "z": [1.0, 2.0]}, data, params, rounds=35, seeds=range(3), delta=1e-5)
    out.params    # leaves shaped [2 configs... , 3 seeds, *param_shape] (grid axes flattened: [4, 3, ...])
    out.epsilons  # float64[4]: each configuration's epsilon after 35 rounds, from its own ledger

The data, the initial parameters and the evaluation data are arguments of the compiled program, and the
program is cached per (``build``, grid names, rounds, ``evaluate``): a new trial's data of the same
shapes reuses it without recompiling (pass the same ``build`` and ``evaluate`` functions). Values of
``build`` that change with the data but are not grid axes (e.g. a noise multiplier calibrated to the
trial's silo sizes) travel as ``constants``, arguments of the program too.

A long sweep can run in segments of rounds and keep its progress in a file (``checkpoint=``): killed at any
point, the same call resumes after the last finished segment.
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import os
import pickle
import re
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxfl import checks
from jaxfl.data.federated import FederatedData
from jaxfl.engine.driver import check_schedule, make_ledger, run_rounds
from jaxfl.engine.protocol import initial_state, silo_models_of


class SweepResult(NamedTuple):
    """``configs``: one dict per grid point (row-major over the grid's keys);
    ``params``/``infos``/``metrics``: leaves ``[len(configs), len(seeds), ...]``;
    ``epsilons``: ``float64[len(configs)]``, each configuration's epsilon (nats; the worst silo's for
    ISRL-DP) after the sweep's rounds at its ``delta``, ``inf`` for configurations that are not private,
    or None when no ``delta`` was given; ``history``: with ``eval_every = k``, the evaluation after rounds
    ``k, 2k, ...`` (leaves ``[len(configs), len(seeds), rounds // k]``), else None.

    Example:
      >>> import jax, numpy as np, optax, jaxfl
      >>> from jaxfl.data import iid
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (200, 3)))
      >>> data = iid(x, (x[:, 0] > 0).astype(np.float32), num_silos=2, seed=0)
      >>> build = lambda lr: jaxfl.minibatch_sgd(logistic_loss, server_opt=optax.sgd(lr), batch_size=10)
      >>> out = jaxfl.sweep(build, {"lr": [0.1, 1.0]}, data, init_linear(3), rounds=5, seeds=range(2))
      >>> out.configs, out.params["w"].shape, out.epsilons is None     # [configs, seeds, ...]; no delta: no epsilons
      ([{'lr': 0.1}, {'lr': 1.0}], (2, 2, 3), True)
    """

    configs: list
    seeds: np.ndarray
    params: Any
    infos: Any
    metrics: Any
    epsilons: np.ndarray | None = None
    history: Any = None


def grid_points(grid: dict[str, Sequence]) -> list[dict]:
    """The Cartesian product of ``grid`` as a list of dicts (row-major in the keys' order).

    Example:
      >>> grid_points({"lr": [0.1, 0.3], "z": [1.0, 2.0]})
      [{'lr': 0.1, 'z': 1.0}, {'lr': 0.1, 'z': 2.0}, {'lr': 0.3, 'z': 1.0}, {'lr': 0.3, 'z': 2.0}]
    """
    names = list(grid)
    return [dict(zip(names, values)) for values in itertools.product(*(list(grid[n]) for n in names))]


def configurations(grid: dict[str, Sequence] | Sequence[dict]) -> list[dict]:
    """The configurations of a grid: the Cartesian product of a ``name -> values`` dict
    (:func:`grid_points`), or a list of configurations taken as given (all with the same keys).

    Example:
      >>> configurations({"step_size": [0.1, 1.0], "epsilon": [1.0]})
      [{'step_size': 0.1, 'epsilon': 1.0}, {'step_size': 1.0, 'epsilon': 1.0}]
    """
    if isinstance(grid, dict):
        return grid_points(grid)
    configs = [dict(c) for c in grid]
    names = tuple(configs[0]) if configs else ()
    if any(tuple(c) != names for c in configs):
        raise ValueError(f"every configuration of a grid list needs the keys {names}, got {configs}")
    return configs


def sweep(build: Callable[..., Any], grid: dict[str, Sequence] | Sequence[dict], data: FederatedData, params, *,
          rounds: int, seeds: Sequence[int] = (0,), evaluate: Callable[..., dict] | None = None, eval_data: Any = None,
          configs_per_batch: int | None = None, delta=None, accountant: str = "rdp",
          constants: dict | None = None, silo_models: bool = False, eval_every: int | None = None,
          evaluate_on: Callable[[Any], Any] | None = None, segment_rounds: int | None = None,
          checkpoint: str | os.PathLike | None = None) -> SweepResult:
    """Runs ``build(**config)`` for every grid point and seed as vmapped, compiled programs.

    Args:
      build: ``**hyperparameters -> FederatedAlgorithm``; every value arrives as a traced scalar (and, for
        the accounting, as a Python float).
      grid: hyperparameter name -> values (their Cartesian product), or a list of configurations (dicts
        with the same keys), e.g. epsilons zipped with their calibrated noise multipliers.
      data, params: the silos' data and the initial parameters (arguments of the compiled program).
      seeds: root seeds; run ``(config, seed)`` uses ``jax.random.key(seed)``.
      evaluate: optional ``params -> dict of scalars`` (``(params, eval_data) -> dict`` when ``eval_data``
        is given), vmapped over the final models.
      eval_data: optional pytree handed to ``evaluate`` as an argument of the program (e.g. a trial's
        test set), so that new evaluation data does not recompile either.
      configs_per_batch: run the grid in batches of this many configs (bounds memory); default all.
      delta: if given (a scalar, or one value per silo with records), every configuration is accounted:
        ``build(**config)``'s ledger (:func:`jaxfl.engine.driver.make_ledger`) records ``rounds`` rounds
        and ``SweepResult.epsilons`` holds its epsilon at ``delta``.
      accountant: the ledger's accountant (``"rdp"``, ``"pld"``, ``"lowy"``, ...).
      constants: optional ``name -> value`` (pytrees of arrays) handed to every ``build`` call as keyword
        arguments: traced arguments of the compiled program (so new values do not recompile) and, for
        the accounting, the host values exactly as given.
      silo_models: hand ``evaluate`` every silo's own model instead of the shared one: leaves
        ``[num_silos, ...]``, from ``algorithm.silo_params`` (personalised algorithms), or the shared model
        repeated for every silo when the algorithm has none. (``SweepResult.params`` stays the shared model.)
      eval_every: also evaluate after every ``eval_every`` rounds (``SweepResult.history``: a learning curve
        of ``rounds // eval_every`` points, the rounds running as a scan of ``eval_every``-round scans, so one
        compiled body serves every point); needs ``evaluate``.
      evaluate_on: ``state -> params``, the model ``evaluate`` receives (e.g.
        :func:`jaxfl.algorithms.async_dp.latest_broadcast`); default ``state.params`` (or, with
        ``silo_models``, every silo's own model). A module-level function: it keys the compiled program.
      segment_rounds: run the rounds as compiled segments of this many rounds (a multiple of ``eval_every``),
        the states brought to the host between segments: the same rounds, keys and steps as one program,
        equal to it up to float rounding (other compiled programs). Default: one program, or with
        ``checkpoint``, about a tenth of ``rounds`` (rounded up to a multiple of ``eval_every``).
      checkpoint: a file for the sweep's progress, written atomically after every segment (a pickle of host
        arrays: the finished config batches and the current one's states). A call with an existing
        checkpoint of the same sweep (grid, seeds, rounds, segments, batches, and the bytes of data, params,
        eval_data and constants) resumes after its last segment, giving what an uninterrupted call gives;
        one of another sweep raises ValueError. Removed when the sweep returns.

    Example:
      >>> import optax, jaxfl
      >>> from jaxfl.data import iid
      >>> from jaxfl.models import binary_accuracy, init_linear, logistic_loss
      >>> import jax, jax.numpy as jnp, numpy as np
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (400, 5)))
      >>> y = (x[:, 0] > 0).astype(np.float32)
      >>> data = iid(x, y, num_silos=4, seed=0)
      >>> build = lambda z: jaxfl.minibatch_sgd(logistic_loss, server_opt=optax.sgd(1.0), sampling_rate=0.2,
      ...                                       expected_batch_size=20, clip_norm=1.0, noise_multiplier=z)
      >>> out = jaxfl.sweep(build, {"z": [0.5, 2.0]}, data, init_linear(5), rounds=50, seeds=range(3),
      ...                   evaluate=lambda p: {"acc": binary_accuracy(p, jnp.asarray(x), jnp.asarray(y))})
      >>> out.metrics["acc"].shape                            # [configurations, seeds]
      (2, 3)
    """
    checks.federated_data(data)
    if eval_every is not None:
        checks.positive_int("eval_every", eval_every)
        if evaluate is None:
            raise ValueError(f"eval_every={eval_every} needs an evaluate function")
        if eval_every > rounds:
            raise ValueError(f"eval_every={eval_every} is more than the sweep's rounds={rounds}")
    if delta is not None:
        checks.delta("delta", delta)
    configs = configurations(grid)
    names = tuple(grid) if isinstance(grid, dict) else tuple(configs[0]) if configs else ()
    seeds = np.asarray(list(seeds))
    table = {n: jnp.asarray([c[n] for c in configs], jnp.float32) for n in names}
    table["__config__"] = jnp.arange(len(configs))  # gives vmap an axis even for an empty grid
    constants = dict(constants or {})
    if evaluate_on is not None and silo_models:
        raise ValueError("give silo_models or evaluate_on, not both")
    key = (build, names, int(rounds), evaluate, eval_data is not None, bool(silo_models),
           None if eval_every is None else int(eval_every), evaluate_on)
    traced = jax.tree_util.tree_map(jnp.asarray, constants)
    segment = _segment_length(int(rounds), eval_every, segment_rounds, checkpoint is not None)
    if segment is None:
        params_out, infos, metrics, history = run_batched(_program(*key), table, seeds, configs_per_batch, data,
                                                          params, eval_data, traced)
    else:
        fingerprint = _fingerprint(key, configs, seeds, segment, configs_per_batch,
                                   (data, params, eval_data, constants))
        params_out, infos, metrics, history = _run_segmented(
            _segment_programs(*key), segment, table, seeds, configs_per_batch, (data, params, eval_data, traced),
            None if checkpoint is None else Path(checkpoint), fingerprint)
    epsilons = None if delta is None else _account(build, configs, np.asarray(data.counts), int(rounds), delta,
                                                   accountant, constants)
    return SweepResult(configs, seeds, params_out, infos, metrics, epsilons,
                       None if eval_every is None else history)


def _algorithm(build, names: tuple, rounds: int, hp, constants):
    algorithm = build(**{n: hp[n] for n in names}, **constants)
    check_schedule(algorithm, rounds)
    return algorithm


def _measure_fn(algorithm, data, eval_data, evaluate, with_eval_data: bool, silo_models: bool, evaluate_on):
    """``state -> evaluate(the state's models)`` (see :func:`sweep`'s ``silo_models`` / ``evaluate_on``)."""

    def measure(state):
        models = (evaluate_on(state) if evaluate_on is not None else
                  silo_models_of(algorithm, state, data.num_silos) if silo_models else state.params)
        return evaluate(models, eval_data) if with_eval_data else evaluate(models)

    return measure


def _advance(algorithm, state, data, key, start, num_rounds: int, eval_every: int | None, measure):
    """Rounds ``start .. start + num_rounds - 1``: ``(state, infos, history)``, infos stacked over the rounds;
    with ``eval_every``, ``history`` holds ``measure`` after every ``eval_every`` rounds from ``start`` (the
    rounds running as a scan of ``eval_every``-round scans, then the remainder), else ``{}``."""
    if eval_every is None:
        state, infos = run_rounds(algorithm, state, data, key, start, num_rounds)
        return state, infos, {}
    points, rest = divmod(num_rounds, eval_every)

    def at(offset):  # round start + offset; a literal start 0 adds no op (the whole program lowers as it did)
        return offset if isinstance(start, int) and start == 0 else start + offset

    def block(state, b):
        state, block_infos = run_rounds(algorithm, state, data, key, at(b * eval_every), eval_every)
        return state, (block_infos, measure(state))

    state, (infos, history) = jax.lax.scan(block, state, jnp.arange(points))
    infos = jax.tree_util.tree_map(lambda a: a.reshape((points * eval_every,) + a.shape[2:]), infos)
    if rest:
        state, last = run_rounds(algorithm, state, data, key, at(points * eval_every), rest)
        infos = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b]), infos, last)
    return state, infos, history


def _over_grid(fn, num_args: int, per_run: tuple = ()):
    """``fn(hp, seed, *rest)`` (``num_args`` positional arguments) vmapped over seeds and then over configs
    (``hp``: the table, axis 0), jitted; arguments at the indices ``per_run`` carry leading axes
    ``[configs, seeds]`` (states), the others are shared."""
    seed_axes = tuple(0 if i == 1 or i in per_run else None for i in range(num_args))
    config_axes = tuple(0 if i == 0 or i in per_run else None for i in range(num_args))
    return jax.jit(jax.vmap(jax.vmap(fn, in_axes=seed_axes), in_axes=config_axes))


@functools.lru_cache(maxsize=64)
def _program(build, names: tuple, rounds: int, evaluate, with_eval_data: bool, silo_models: bool = False,
             eval_every: int | None = None, evaluate_on=None):
    """The jitted grid program ``(table, seeds, data, params, eval_data, constants) -> (params, infos,
    metrics, history)`` (``history`` ``{}`` without ``eval_every``); cached, so that jit's own cache serves
    every later call with arguments of the same shapes."""

    def one(hp, seed, data, params, eval_data, constants):
        algorithm = _algorithm(build, names, rounds, hp, constants)
        measure = _measure_fn(algorithm, data, eval_data, evaluate, with_eval_data, silo_models, evaluate_on)
        state = initial_state(algorithm, params, data.num_silos)
        state, infos, history = _advance(algorithm, state, data, jax.random.key(seed), 0, rounds, eval_every,
                                         measure)
        metrics = {} if evaluate is None else measure(state)
        return state.params, infos, metrics, history

    return _over_grid(one, 6)


class _SegmentPrograms(NamedTuple):
    """:func:`_program` cut into three jitted programs: ``start`` the initial states ``[configs, seeds, ...]``,
    ``advance(length)`` ``length`` rounds from a traced first round, ``finish`` the final ``(params, metrics)``."""

    rounds: int
    start: Callable
    advance: Callable
    finish: Callable


@functools.lru_cache(maxsize=64)
def _segment_programs(build, names: tuple, rounds: int, evaluate, with_eval_data: bool, silo_models: bool,
                      eval_every: int | None, evaluate_on) -> _SegmentPrograms:
    """The segments' programs of a sweep key (cached, as :func:`_program`)."""
    def measure_fn(algorithm, data, eval_data):
        return _measure_fn(algorithm, data, eval_data, evaluate, with_eval_data, silo_models, evaluate_on)

    def start(hp, seed, data, params, constants):
        return initial_state(_algorithm(build, names, rounds, hp, constants), params, data.num_silos)

    @functools.lru_cache(maxsize=4)
    def advance(length: int):
        def segment(hp, seed, data, state, first, eval_data, constants):
            algorithm = _algorithm(build, names, rounds, hp, constants)
            return _advance(algorithm, state, data, jax.random.key(seed), first, length, eval_every,
                            measure_fn(algorithm, data, eval_data))

        return _over_grid(segment, 7, per_run=(3,))

    def finish(hp, seed, data, state, eval_data, constants):
        algorithm = _algorithm(build, names, rounds, hp, constants)
        return state.params, {} if evaluate is None else measure_fn(algorithm, data, eval_data)(state)

    return _SegmentPrograms(rounds, _over_grid(start, 5), advance, _over_grid(finish, 6, per_run=(3,)))


def _segment_length(rounds: int, eval_every, segment_rounds, checkpointed: bool) -> int | None:
    """Rounds per segment (None: one program); ``segment_rounds`` checked."""
    if segment_rounds is None:
        if not checkpointed:
            return None
        step = 1 if eval_every is None else int(eval_every)
        return -(-max(1, -(-rounds // 10)) // step) * step
    checks.positive_int("segment_rounds", segment_rounds)
    if eval_every is not None and segment_rounds % eval_every:
        raise ValueError(f"segment_rounds={segment_rounds} must be a multiple of eval_every={eval_every}")
    return int(segment_rounds)


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def stable_name(function: Callable) -> str:
    """A callable's name that every process spells alike: its qualified name, else its ``repr`` without memory
    addresses (a ``functools.partial``'s repr names its function's address, another in every process).

    Example (no memory address, so every process of a multi-process sweep names it alike):
      >>> import functools
      >>> from jaxfl.models import logistic_loss
      >>> stable_name(logistic_loss), stable_name(functools.partial(logistic_loss))
      ('logistic_loss', 'functools.partial(<function logistic_loss>)')
    """
    return getattr(function, "__qualname__", None) or _ADDRESS.sub("", repr(function))


def _fingerprint(key: tuple, configs: list, seeds, segment: int, configs_per_batch, arrays) -> str:
    """What a checkpoint must have been written by: the program's key, grid, seeds, segments, batches and a
    hash of the arrays' shapes, dtypes and bytes."""
    digest = hashlib.sha256()
    for leaf in jax.tree_util.tree_leaves(arrays):
        a = np.ascontiguousarray(np.asarray(leaf))
        digest.update(repr((a.shape, str(a.dtype))).encode())
        digest.update(a.tobytes())
    names = tuple(stable_name(f) if callable(f) else f for f in key)
    return repr((names, [sorted((k, float(v)) for k, v in c.items()) for c in configs], [int(s) for s in seeds],
                 segment, configs_per_batch, jax.__version__, digest.hexdigest()))


def _run_segmented(programs: _SegmentPrograms, segment: int, table: dict, seeds, configs_per_batch,
                   arrays: tuple, checkpoint: Path | None, fingerprint: str):
    """:func:`run_batched` of the grid program, each config batch as segments of ``segment`` rounds, the
    progress kept in ``checkpoint`` (see :func:`sweep`)."""
    data, params, eval_data, constants = arrays
    progress = _read_checkpoint(checkpoint, fingerprint)
    started, earlier = time.perf_counter(), progress.get("seconds", 0.0)

    def save():
        progress["seconds"] = earlier + time.perf_counter() - started
        _write_checkpoint(checkpoint, progress)

    seeds = jnp.asarray(seeds)
    for part, trim in _config_batches(table, configs_per_batch, skip=len(progress["done"])):
        if progress["state"] is None:
            progress.update(state=jax.device_get(programs.start(part, seeds, data, params, constants)),
                            round=0, infos=[], history=[])
        while progress["round"] < programs.rounds:
            length = min(segment, programs.rounds - progress["round"])
            state, infos, history = jax.device_get(programs.advance(length)(
                part, seeds, data, progress["state"], progress["round"], eval_data, constants))
            progress.update(state=state, round=progress["round"] + length, infos=progress["infos"] + [infos],
                            history=progress["history"] + [history])
            save()
        final_params, metrics = jax.device_get(programs.finish(part, seeds, data, progress["state"], eval_data,
                                                               constants))
        joined = lambda chunks: jax.tree_util.tree_map(lambda *xs: np.concatenate(xs, axis=2), *chunks)
        out = (final_params, joined(progress["infos"]), metrics, joined(progress["history"]))
        progress.update(done=progress["done"] + [trim(out)], state=None)
        save()
    out = jax.tree_util.tree_map(lambda *xs: np.concatenate(xs), *progress["done"])
    if checkpoint is not None:
        checkpoint.unlink(missing_ok=True)
    return out


def checkpoint_seconds(checkpoint) -> float:
    """The wall seconds that the sittings stored in a sweep's ``checkpoint`` file spent on it (0 without one):
    what a resumed sweep's own time leaves out.

    Example:
      >>> checkpoint_seconds("no-such-checkpoint.npz")
      0.0
    """
    path = Path(checkpoint)
    return float(pickle.loads(path.read_bytes()).get("seconds", 0.0)) if path.is_file() else 0.0


def _read_checkpoint(checkpoint: Path | None, fingerprint: str) -> dict:
    fresh = {"fingerprint": fingerprint, "done": [], "state": None}
    if checkpoint is None or not checkpoint.exists():
        return fresh
    stored = pickle.loads(checkpoint.read_bytes())
    # checkpoints written before stable_name held an address where a partial was named: read them without it
    if _ADDRESS.sub("", stored.get("fingerprint", "")) != fingerprint:
        raise ValueError(f"checkpoint {checkpoint} belongs to another sweep (other grid, seeds, rounds, segments, "
                         f"data or JAX version); remove it to start this one afresh")
    return stored


def _write_checkpoint(checkpoint: Path | None, progress: dict) -> None:
    if checkpoint is None:
        return
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    partial = checkpoint.with_name(checkpoint.name + ".tmp")
    partial.write_bytes(pickle.dumps(progress))
    partial.replace(checkpoint)  # atomic: the file holds the last finished segment or the one before


def _account(build, configs: list, counts: np.ndarray, rounds: int, delta, accountant: str,
             constants: dict) -> np.ndarray:
    """``float64[len(configs)]``: each configuration's epsilon after ``rounds`` rounds at ``delta``; the
    ledger is computed once per distinct privacy statement (a step-size grid shares one)."""
    epsilons = np.empty(len(configs))
    known: dict = {}
    for i, config in enumerate(configs):
        algorithm = build(**{n: float(v) for n, v in config.items()}, **constants)
        check_schedule(algorithm, rounds)
        statement = None if algorithm.privacy is None else algorithm.privacy(counts)
        try:
            epsilons[i] = known[statement]
            continue
        except (KeyError, TypeError):  # new, or unhashable (events holding lists): computed anew
            pass
        ledger = make_ledger(algorithm, counts, accountant)
        epsilons[i] = np.inf if ledger is None else ledger.record(rounds).epsilon(delta)
        try:
            known[statement] = epsilons[i]
        except TypeError:
            pass
    return epsilons


def run_batched(program: Callable, table: dict, seeds, configs_per_batch: int | None = None, *args):
    """``program(table_batch, seeds, *args)`` over the config axis of ``table`` in batches of
    ``configs_per_batch`` (default: one batch), concatenated on the host.

    The last batch is padded by repeating its last config, so every batch has one shape (one
    compilation), and trimmed afterwards. For grid programs built like :func:`sweep`'s, e.g. with the
    data as an argument (``*args``) so one compilation serves several datasets.

    Example (five configurations in batches of two: one compiled shape, the last batch padded and trimmed):
      >>> import numpy as np
      >>> out = run_batched(lambda table, seeds: table["a"][:, None] * seeds[None, :], {"a": np.arange(5.0)},
      ...                   np.arange(2.0), 2)
      >>> out.shape, out[:, 1].tolist()
      ((5, 2), [0.0, 1.0, 2.0, 3.0, 4.0])
    """
    outs = [trim(jax.device_get(program(part, jnp.asarray(seeds), *args)))
            for part, trim in _config_batches(table, configs_per_batch)]
    return jax.tree_util.tree_map(lambda *xs: np.concatenate(xs), *outs)


def _config_batches(table: dict, configs_per_batch: int | None, skip: int = 0):
    """``(table batch, trim)`` per batch of ``configs_per_batch`` configs after the first ``skip`` batches: the
    last batch padded by repeating its last config (one shape, one compilation); ``trim(outputs)`` drops the
    padding's rows."""
    num = len(next(iter(table.values())))
    batch = num if configs_per_batch is None else min(int(configs_per_batch), num)
    for lo in range(skip * batch, num, batch):
        take = np.minimum(np.arange(lo, lo + batch), num - 1)
        kept = min(batch, num - lo)
        yield {n: v[take] for n, v in table.items()}, lambda out, kept=kept: jax.tree_util.tree_map(
            lambda a: a[:kept], out)
