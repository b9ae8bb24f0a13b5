"""Hyperparameter sweeps as one vmapped program.

Factories bind hyperparameters as traceable values, so a grid over epsilons (noise multipliers),
step sizes and seeds is a ``vmap`` of :func:`jaxfl.engine.driver.run_rounds`::

    out = sweep(lambda lr, z: minibatch_sgd(loss, server_opt=optax.sgd(lr), noise_multiplier=z, ...),
                {"lr": [0.1, 0.3], "z": [1.0, 2.0]}, data, params, rounds=35, seeds=range(3))
    out.params  # leaves shaped [2 configs... , 3 seeds, *param_shape] (grid axes flattened: [4, 3, ...])
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxfl.data.federated import FederatedData
from jaxfl.engine.driver import check_schedule, run_rounds
from jaxfl.engine.protocol import initial_state


class SweepResult(NamedTuple):
    """``configs``: one dict per grid point (row-major over the grid's keys);
    ``params``/``infos``/``metrics``: leaves ``[len(configs), len(seeds), ...]``."""

    configs: list
    seeds: np.ndarray
    params: Any
    infos: Any
    metrics: Any


def grid_points(grid: dict[str, Sequence]) -> list[dict]:
    """The Cartesian product of ``grid`` as a list of dicts (row-major in the keys' order)."""
    names = list(grid)
    return [dict(zip(names, values)) for values in itertools.product(*(list(grid[n]) for n in names))]


def sweep(build: Callable[..., Any], grid: dict[str, Sequence], data: FederatedData, params, *, rounds: int,
          seeds: Sequence[int] = (0,), evaluate: Callable[[Any], dict] | None = None,
          configs_per_batch: int | None = None) -> SweepResult:
    """Runs ``build(**config)`` for every grid point and seed as vmapped, compiled programs.

    Args:
      build: ``**hyperparameters -> FederatedAlgorithm``; every value arrives as a traced scalar.
      grid: hyperparameter name -> values.
      seeds: root seeds; run ``(config, seed)`` uses ``jax.random.key(seed)``.
      evaluate: optional ``params -> dict of scalars``, vmapped over the final models.
      configs_per_batch: run the grid in batches of this many configs (bounds memory); default all.
    """
    configs = grid_points(grid)
    names = list(grid)
    seeds = np.asarray(list(seeds))
    table = {n: jnp.asarray([c[n] for c in configs], jnp.float32) for n in names}
    table["__config__"] = jnp.arange(len(configs))  # gives vmap an axis even for an empty grid

    def one(hp, seed):
        algorithm = build(**{n: v for n, v in hp.items() if n != "__config__"})
        check_schedule(algorithm, rounds)
        state = initial_state(algorithm, params, data.num_silos)
        state, infos = run_rounds(algorithm, state, data, jax.random.key(seed), 0, rounds)
        metrics = evaluate(state.params) if evaluate is not None else {}
        return state.params, infos, metrics

    over_seeds = jax.vmap(one, in_axes=(None, 0))
    program = jax.jit(jax.vmap(over_seeds, in_axes=(0, None)))
    return SweepResult(configs, seeds, *run_batched(program, table, seeds, configs_per_batch))


def run_batched(program: Callable, table: dict, seeds, configs_per_batch: int | None = None, *args):
    """``program(table_batch, seeds, *args)`` over the config axis of ``table`` in batches of
    ``configs_per_batch`` (default: one batch), concatenated on the host.

    The last batch is padded by repeating its last config, so every batch has one shape (one
    compilation), and trimmed afterwards. For grid programs built like :func:`sweep`'s, e.g. with the
    data as an argument (``*args``) so one compilation serves several datasets.
    """
    num = len(next(iter(table.values())))
    batch = num if configs_per_batch is None else int(configs_per_batch)
    outs = []
    for lo in range(0, num, batch):
        take = np.minimum(np.arange(lo, lo + batch), num - 1)
        part = {n: v[take] for n, v in table.items()}
        out = jax.device_get(program(part, jnp.asarray(seeds), *args))
        outs.append(jax.tree_util.tree_map(lambda a: a[: min(batch, num - lo)], out))
    return jax.tree_util.tree_map(lambda *xs: np.concatenate(xs), *outs)
