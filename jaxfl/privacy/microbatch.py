"""Microbatches: a sum over a batch's records, taken a cache-sized slice of the batch at a time.

A batch's gradient (clipped or not) is a sum over its records, so it can be taken in slices (a
``lax.scan`` over ``[k, size, ...]``) and the slices' sums added: the same value up to the order of the
float additions. On a CPU this is faster whenever the whole batch's intermediates (for the conv models,
the im2col patches: 235 KB per CIFAR image, 25 copies of the input) overflow the caches, because every
layer then streams them from memory several times per step: on the 2-core AMD EPYC VM a CIFAR CNN DP-SGD
step at batch 1,024 ran 1.8-1.9x faster in slices of 17 (``git show 1c41c36:bench/results/clipping_vs_opacus.json``),
on the Intel Xeon VM 1.19x in slices of 69 (``bench/results/clipping_vs_opacus.json``). On a GPU or TPU
the slices would only serialise the work, so the default (``"auto"``) slices on the CPU backend only.

``"auto"`` sizes the slices from the per-record forward pass: the bytes of every intermediate value of
``loss_fn`` on one record (its jaxpr, sub-jaxprs included), against :data:`BUDGET_BYTES`, which is sized from
the machine's last-level cache (:func:`cache_budget_bytes`). Under ``vmap`` (silos) every silo takes its own
slices, so the working set is ``silos x size`` records.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jex_core

MIN_BUDGET_BYTES = 12 * 2**20
"""The smallest budget :func:`cache_budget_bytes` gives, and the budget where the cache cannot be read. On the
2-core AMD EPYC VM (32 MiB L3) it gives slices of 16-17 records for the CIFAR CNN and 10-11 for LeNet-5, where
slices of 8-16 ran fastest for both (one-off timings of ``bench/local_training.py``'s and
``bench/clipping_vs_opacus.py``'s steps)."""

MAX_BUDGET_BYTES = 48 * 2**20
"""The largest budget :func:`cache_budget_bytes` gives. On the 2-core Intel Xeon VM (2 MiB L2 per core, 300 MiB
L3 reported) slices of about 32-64 records (35-44 MiB) ran fastest for the CIFAR CNN's and LeNet-5's local
training at batch 64 and DP-SGD at batch 256 and 1,024, ahead of both 12 MiB slices and slices of 86-128
records (88-93 MiB) (one-off sweeps of the same steps; the benchmarks' JSONs time the default)."""

CACHE_DIR_ENV = "JAXFL_CPU_CACHE_DIR"
"""Overrides where :func:`cache_budget_bytes` reads the CPU's caches (a folder laid out like Linux sysfs's
``cpu0/cache``, e.g. another CPU's, or an empty folder for the 12 MiB floor)."""


def _default_cache_dir() -> Path:
    return Path(os.environ.get(CACHE_DIR_ENV) or Path("/sys", "devices", "system", "cpu", "cpu0", "cache"))


def _sysfs_size(text: str) -> int:
    """``"32768K"`` / ``"32M"`` / ``"512"`` (sysfs cache sizes) -> bytes."""
    text = text.strip().upper()
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
    return int(text[:-1] if scale > 1 else text) * scale


def cache_budget_bytes(cache_dir=None) -> int:
    """The ``"auto"`` slices' budget for this machine: a third of CPU 0's last-level cache (the highest level of
    ``cache_dir``; default ``$JAXFL_CPU_CACHE_DIR``, else Linux sysfs's ``cpu0/cache``), kept within
    [:data:`MIN_BUDGET_BYTES`, :data:`MAX_BUDGET_BYTES`] (the bounds are where the slices measured fastest on a
    32 MiB and a 300 MiB L3); :data:`MIN_BUDGET_BYTES` where the cache cannot be read (no sysfs, another OS).

    Example:
      >>> MIN_BUDGET_BYTES <= cache_budget_bytes() <= MAX_BUDGET_BYTES
      True
    """
    levels = {}
    try:
        for index in Path(_default_cache_dir() if cache_dir is None else cache_dir).glob("index*"):
            if (index / "type").read_text().strip() in ("Unified", "Data"):
                level = int((index / "level").read_text())
                levels[level] = max(levels.get(level, 0), _sysfs_size((index / "size").read_text()))
    except (OSError, ValueError):
        return MIN_BUDGET_BYTES
    if not levels:
        return MIN_BUDGET_BYTES
    return min(max(levels[max(levels)] // 3, MIN_BUDGET_BYTES), MAX_BUDGET_BYTES)


BUDGET_BYTES = cache_budget_bytes()
"""Intermediates per slice for ``"auto"`` on this machine (:func:`cache_budget_bytes`, read at import)."""

MIN_SIZE = 8
"""``"auto"`` never takes slices smaller than this (a matrix product of fewer rows wastes the vector units)."""


def _sub_jaxprs(params: dict):
    for value in params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, jex_core.ClosedJaxpr):
                yield item.jaxpr
            elif isinstance(item, jex_core.Jaxpr):
                yield item


def _intermediate_bytes(jaxpr) -> int:
    total = 0
    for eqn in jaxpr.eqns:
        subs = list(_sub_jaxprs(eqn.params))
        if subs:  # a nested call (jit, custom_jvp, ...): its outputs are its body's, counted there
            total += sum(_intermediate_bytes(sub) for sub in subs)
            continue
        for var in eqn.outvars:
            aval = var.aval
            if hasattr(aval, "shape") and hasattr(aval, "dtype"):
                total += math.prod(aval.shape) * np.dtype(aval.dtype).itemsize
    return total


def forward_bytes(loss_fn, params, x, y) -> int:
    """Bytes of all intermediate values of ``loss_fn(params, x[0], y[0])`` (one record's forward pass).

    ``x, y``: batches ``[batch, ...]`` (arrays or tracers; only shapes and dtypes are read).

    Example:
      >>> import jax.numpy as jnp
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> forward_bytes(logistic_loss, init_linear(100), jnp.zeros((8, 100)), jnp.zeros(8)) > 0
      True
    """
    spec = lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a))
    row = lambda a: jax.ShapeDtypeStruct(jnp.shape(a)[1:], jnp.result_type(a))
    closed = jax.make_jaxpr(loss_fn)(jax.tree_util.tree_map(spec, params), row(x), row(y))
    return _intermediate_bytes(closed.jaxpr)


def microbatch_size(loss_fn, params, x, y, microbatch="auto", *, batch: int | None = None,
                    budget_bytes: int | None = None) -> int:
    """Records per slice for a batch of ``x: [batch, ...]``; ``batch`` itself means one slice (no ``scan``).

    Args:
      x, y: records ``[n, ...]`` (only shapes and dtypes are read); batch: records per batch (default ``n``).
      microbatch: ``"auto"``: on the CPU backend, ``batch`` split into the fewest equal slices whose
        intermediates (:func:`forward_bytes` per record) fit ``budget_bytes``, none under
        :data:`MIN_SIZE` records, when the batch needs more than two such slices (else ``batch``); on
        other backends ``batch``. ``None``: ``batch``. An int ``s >= 1``:
        slices of ``s`` records (the last padded).
      budget_bytes: for ``"auto"``; default :data:`BUDGET_BYTES`.

    Example (a batch of 256 records: a fixed slice size, or one slice):
      >>> import jax.numpy as jnp
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> x, y = jnp.zeros((256, 100)), jnp.zeros(256)
      >>> params = init_linear(100)
      >>> microbatch_size(logistic_loss, params, x, y, 64), microbatch_size(logistic_loss, params, x, y, None)
      (64, 256)
    """
    batch = int(jnp.shape(x)[0]) if batch is None else int(batch)
    microbatch = check_microbatch(microbatch)
    if microbatch is None:
        return batch
    if microbatch == "auto":
        if jax.default_backend() != "cpu":
            return batch
        per_record = max(forward_bytes(loss_fn, params, x, y), 1)
        target = max(MIN_SIZE, (BUDGET_BYTES if budget_bytes is None else int(budget_bytes)) // per_record)
        if batch <= 2 * target:  # two slices or fewer: splitting gained nothing measurable
            return batch
        slices = -(-batch // target)
        return -(-batch // slices)
    return min(microbatch, batch)


def check_microbatch(microbatch):
    """``microbatch`` as :func:`microbatch_size` takes it (``"auto"``, ``None`` or a positive int, returned as
    ``int``); anything else raises ``ValueError`` naming the value.

    Example:
      >>> check_microbatch("auto"), check_microbatch(8), check_microbatch(None)
      ('auto', 8, None)
      >>> check_microbatch(0)
      Traceback (most recent call last):
      ...
      ValueError: ...
    """
    if microbatch is None or (isinstance(microbatch, str) and microbatch == "auto"):
        return microbatch
    if isinstance(microbatch, bool) or not isinstance(microbatch, (int, np.integer)) or microbatch < 1:
        raise ValueError(f"microbatch must be 'auto', None or a positive int, got {microbatch!r}")
    return int(microbatch)


def microbatch_sum(fn, size: int, *arrays):
    """``fn`` summed over slices of ``size`` records: ``sum_s fn(valid_s, *[a[slice s] for a in arrays])``.

    Args:
      fn: ``(valid, *slices) -> pytree`` of sums over a slice's records; ``valid: [size]`` float32, 0 on the
        padding rows that complete the last slice (they repeat the batch's first rows, so ``fn`` sees only
        real inputs; it must give them weight 0, e.g. by multiplying its mask by ``valid``).
      size: records per slice (:func:`microbatch_size`); ``size >= batch`` calls ``fn`` once on the whole batch.
      arrays: batched arrays with the same leading axis ``batch``.

    Example (sums of 10 records in slices of 4: the last slice's 2 padding rows have ``valid`` 0):
      >>> import jax.numpy as jnp
      >>> total = microbatch_sum(lambda valid, a: jnp.sum(valid * a), 4, jnp.arange(10.0))
      >>> float(total)
      45.0
    """
    batch = arrays[0].shape[0]
    if size >= batch:
        return fn(jnp.ones((batch,), jnp.float32), *arrays)
    slices = -(-batch // size)
    padded = slices * size
    if padded != batch:
        rows = jnp.arange(padded) % batch
        arrays = tuple(a[rows] for a in arrays)
    valid = (jnp.arange(padded) < batch).astype(jnp.float32).reshape(slices, size)
    stacked = tuple(a.reshape((slices, size) + a.shape[1:]) for a in arrays)
    shapes = jax.eval_shape(fn, valid[0], *(a[0] for a in stacked))
    zeros = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    def add(total, inputs):
        return jax.tree_util.tree_map(jnp.add, total, fn(*inputs)), None

    return jax.lax.scan(add, zeros, (valid,) + stacked)[0]
