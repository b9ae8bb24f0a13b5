"""Argument checks shared by every public factory, the driver and the command line.

Each check takes the argument's ``name`` (as the caller knows it: ``"rounds"``, ``"--delta"``,
``"data.x"``) and its ``value``, and either returns the value converted (a plain ``int``/``float``, or a
``float64`` array for per-silo values) or raises ``ValueError`` whose one-line message names the argument
and the bad value, e.g. ``"rounds must be an integer >= 1, got 0"``. Call sites read::

    rounds = checks.positive_int("rounds", rounds)
    delta = checks.delta("delta", delta)

The ``jaxfl`` command prints such a message as ``jaxfl: error: ...`` (exit status 2).

These checks run on the host, before anything is compiled: they never touch traced values and never
change what compiled code computes. :func:`federated_data` is the check at the boundary into compiled
code (shapes, dtypes, finiteness of a :class:`~jaxfl.data.federated.FederatedData`), built on ``chex``
assertions whose ``AssertionError`` becomes a ``ValueError`` naming the field.
"""
from __future__ import annotations

import math
import numbers
import operator
from typing import Any, Iterable

import chex
import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "real", "finite", "positive_float", "non_negative_float", "epsilon", "integer", "positive_int",
    "non_negative_int", "probability", "sampling_rate", "delta", "per_silo", "positive_floats", "silo_counts",
    "one_of", "federated_data",
]


# ------------------------------------------------------------------------------------------------
# Scalars


def real(name: str, value: Any) -> float:
    """``value`` as a Python ``float``: a real number (Python, NumPy or a concrete 0-d array); bools,
    strings, ``None`` and arrays with more than one element are refused. NaN and inf pass (see
    :func:`finite`)."""
    if isinstance(value, (bool, np.bool_, str, bytes)) or value is None:
        raise ValueError(f"{name} must be a real number, got {value!r}")
    if isinstance(value, numbers.Real):
        return float(value)
    try:
        arr = np.asarray(value)
    except Exception:  # e.g. a traced value: not a host number
        raise ValueError(f"{name} must be a real number, got {value!r}") from None
    if arr.ndim != 0 or arr.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be a real number, got {value!r}")
    return float(arr)


def finite(name: str, value: Any):
    """A finite real number (returned as ``float``), or an array of them (returned as ``float64``)."""
    if np.ndim(value) == 0:
        x = real(name, value)
        if not math.isfinite(x):
            raise ValueError(f"{name} must be finite, got {value!r}")
        return x
    arr = _float_array(name, value)
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise ValueError(f"{name} must be finite, got {float(arr.ravel()[bad[0]])!r} at flat index {int(bad[0])}")
    return arr


def positive_float(name: str, value: Any, *, allow_inf: bool = False) -> float:
    """A finite real number > 0 (noise multipliers, sensitivities, step sizes, ...); ``allow_inf``
    also accepts ``inf`` (e.g. a clip norm, where ``inf`` means no clipping)."""
    x = real(name, value)
    if allow_inf:
        if not x > 0.0:  # also rejects NaN
            raise ValueError(f"{name} must be > 0, got {value!r}")
    elif not (x > 0.0 and math.isfinite(x)):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return x


def non_negative_float(name: str, value: Any, *, allow_inf: bool = False) -> float:
    """A finite real number >= 0 (``allow_inf``: ``inf`` too)."""
    x = real(name, value)
    if allow_inf:
        if not x >= 0.0:
            raise ValueError(f"{name} must be >= 0, got {value!r}")
    elif not (x >= 0.0 and math.isfinite(x)):
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return x


def epsilon(name: str, value: Any, *, allow_zero: bool = False) -> float:
    """A privacy budget epsilon: finite and > 0 (>= 0 with ``allow_zero``)."""
    return non_negative_float(name, value) if allow_zero else positive_float(name, value)


def integer(name: str, value: Any, *, minimum: int | None = None) -> int:
    """An integer (Python, NumPy, or a float with an integral value such as ``3.0``) >= ``minimum``,
    returned as ``int``; bools are refused."""
    wanted = "an integer" if minimum is None else f"an integer >= {minimum}"
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be {wanted}, got {value!r}")
    try:
        n = operator.index(value)
    except TypeError:
        try:
            x = real(name, value)
        except ValueError:
            raise ValueError(f"{name} must be {wanted}, got {value!r}") from None
        if not x.is_integer():  # also NaN and inf
            raise ValueError(f"{name} must be {wanted}, got {value!r}") from None
        n = int(x)
    if minimum is not None and n < minimum:
        raise ValueError(f"{name} must be {wanted}, got {value!r}")
    return n


def positive_int(name: str, value: Any) -> int:
    """An integer >= 1 (rounds, steps, batch sizes, silos per round, ...)."""
    return integer(name, value, minimum=1)


def non_negative_int(name: str, value: Any) -> int:
    """An integer >= 0."""
    return integer(name, value, minimum=0)


def probability(name: str, value: Any, *, open_low: bool = True, open_high: bool = False) -> float:
    """A real number in ``[0, 1]``, the ends excluded as asked: the default is a rate in ``(0, 1]``
    (sampling rates, participation rates); ``open_high=True`` gives ``(0, 1)``."""
    x = real(name, value)
    low_ok = x > 0.0 if open_low else x >= 0.0
    high_ok = x < 1.0 if open_high else x <= 1.0
    if not (low_ok and high_ok):  # also rejects NaN
        interval = f"{'(' if open_low else '['}0, 1{')' if open_high else ']'}"
        raise ValueError(f"{name} must be in {interval}, got {value!r}")
    return x


def sampling_rate(name: str, value: Any) -> float:
    """A sampling probability in ``(0, 1]``."""
    return probability(name, value)


# ------------------------------------------------------------------------------------------------
# Scalars or arrays (per-silo values)


def _float_array(name: str, value: Any) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except Exception:
        raise ValueError(f"{name} must be a real number or an array of them, got {value!r}") from None
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be a real number or an array of them, got {value!r}")
    return arr.astype(np.float64)


def delta(name: str, value: Any, *, allow_zero: bool = False, scalar: bool = False):
    """A privacy parameter delta in ``(0, 1)`` (``[0, 1)`` with ``allow_zero``): a scalar (returned as
    ``float``) or an array, e.g. one value per silo (returned as ``float64``); ``scalar=True`` refuses
    arrays."""
    interval = "[0, 1)" if allow_zero else "(0, 1)"
    ok = (lambda d: 0.0 <= d < 1.0) if allow_zero else (lambda d: 0.0 < d < 1.0)  # NaN fails both
    if scalar or np.ndim(value) == 0:
        x = real(name, value)
        if not ok(x):
            raise ValueError(f"{name} must be in {interval}, got {value!r}")
        return x
    arr = _float_array(name, value)
    for i, d in enumerate(arr.ravel()):
        if not ok(float(d)):
            raise ValueError(f"{name} must be in {interval}, got {float(d)!r} (entry {i} of {value!r})")
    return arr


def positive_floats(name: str, value: Any) -> np.ndarray:
    """A scalar or an array of finite reals > 0, returned as a ``float64`` array (0-d for a scalar)."""
    arr = _float_array(name, value)
    if np.any(~(arr > 0)) or np.any(~np.isfinite(arr)):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return arr


def per_silo(name: str, value: Any, num_silos: int) -> np.ndarray:
    """A scalar (broadcast) or one value per silo, returned as ``float64[num_silos]``."""
    if np.ndim(value) == 0:
        return np.full(num_silos, real(name, value))
    arr = _float_array(name, value)
    if arr.shape != (num_silos,):
        raise ValueError(f"{name} must be a scalar or have one value per silo ({num_silos}), got shape {arr.shape}")
    return arr


def silo_counts(name: str, value: Any) -> np.ndarray:
    """Records per silo: a non-empty 1-D sequence of integers >= 1, returned as ``int64``."""
    try:
        arr = np.asarray(value)
    except Exception:
        arr = np.asarray(None)
    integral = arr.dtype.kind in "iu" or (arr.dtype.kind == "f" and bool(np.all(np.isfinite(arr)))
                                           and bool(np.all(arr == np.round(arr))))
    if not integral or arr.ndim != 1 or arr.size == 0 or np.any(arr < 1):
        raise ValueError(f"{name} must be a non-empty list of positive silo sizes, got {value!r}")
    return arr.astype(np.int64)


# ------------------------------------------------------------------------------------------------
# Choices


def one_of(name: str, value: Any, choices: Iterable) -> Any:
    """``value`` itself, if it is one of ``choices`` (compared with ``==``)."""
    choices = tuple(choices)
    try:
        found = any(value == c for c in choices)
    except Exception:  # arrays and other values without a plain truth value
        found = False
    if not found:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


# ------------------------------------------------------------------------------------------------
# Federated data: the boundary into compiled code


@jax.jit
def _all_finite(a):
    return jnp.all(jnp.isfinite(a))


def _finite_everywhere(a) -> bool:
    if isinstance(a, jax.Array):
        return bool(_all_finite(a))  # reduced where the data lives: no copy of the data to the host
    return bool(np.all(np.isfinite(a)))


def _chex(message: str, assertion, *args) -> None:
    """Runs a ``chex`` assertion; its ``AssertionError`` becomes ``ValueError(message)``."""
    try:
        assertion(*args)
    except AssertionError:
        raise ValueError(message) from None


def federated_data(data, name: str = "data"):
    """Checks a :class:`~jaxfl.data.federated.FederatedData` on the host, before compiled code sees it;
    returns it unchanged.

    ``x: [num_silos, max_records, ...]`` and ``y: [num_silos, max_records, ...]`` with the same two leading
    dimensions, ``counts``: integers, one per silo, each in ``[0, max_records]``; floating ``x`` and ``y``
    hold no NaN or inf (padding rows included). Raises ``ValueError`` naming the field, e.g.
    ``"data.x contains non-finite values (first at silo 0, record 3)"`` or ``"data.counts must have one
    entry per silo"``.
    """
    try:
        x, y, counts = data.x, data.y, data.counts
    except AttributeError:
        raise ValueError(f"{name} must be a FederatedData (x, y, counts), got {type(data).__name__}") from None
    for field, a in (("x", x), ("y", y)):
        if np.ndim(a) < 2:
            raise ValueError(f"{name}.{field} must be [num_silos, max_records, ...], got shape {np.shape(a)}")
    num_silos, max_records = np.shape(x)[:2]
    _chex(f"{name}.y must have the same [num_silos, max_records] = {(num_silos, max_records)} as {name}.x, "
          f"got shape {np.shape(y)}", chex.assert_equal_shape_prefix, [x, y], 2)
    _chex(f"{name}.counts must have one entry per silo ({num_silos}), got shape {np.shape(counts)}",
          lambda c: (chex.assert_rank(c, 1), chex.assert_axis_dimension(c, 0, num_silos)), counts)
    _chex(f"{name}.counts must hold integers, got dtype {getattr(counts, 'dtype', type(counts))}",
          chex.assert_type, counts, int)
    host_counts = np.asarray(counts)
    bad = np.flatnonzero((host_counts < 0) | (host_counts > max_records))
    if bad.size:
        raise ValueError(f"{name}.counts must be in [0, max_records={max_records}], got {int(host_counts[bad[0]])} "
                         f"for silo {int(bad[0])}")
    for field, a in (("x", x), ("y", y)):
        if jnp.issubdtype(a.dtype, jnp.inexact) and not _finite_everywhere(a):
            first = np.argwhere(~np.isfinite(np.asarray(a)))[0]
            raise ValueError(f"{name}.{field} contains non-finite values (first at silo {int(first[0])}, "
                             f"record {int(first[1])})")
    return data
