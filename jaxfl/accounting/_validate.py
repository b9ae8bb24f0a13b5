"""Argument checks shared by the accounting modules.

Every check raises ``ValueError`` whose message names the argument and the bad value, so that the command
line can print it as one line. Checks return the value converted to a plain Python ``float``/``int``.
"""
from __future__ import annotations

import math
import numbers
import operator
from typing import Any


def _as_float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    return float(value)


def epsilon(value: Any, name: str = "epsilon", *, allow_zero: bool = False) -> float:
    """A privacy budget epsilon: finite and > 0 (>= 0 with ``allow_zero``)."""
    x = _as_float(name, value)
    ok = (x >= 0.0 if allow_zero else x > 0.0) and math.isfinite(x)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be finite and {bound}, got {value!r}")
    return x


def delta(value: Any, name: str = "delta") -> float:
    """A privacy parameter delta in the open interval (0, 1)."""
    x = _as_float(name, value)
    if not 0.0 < x < 1.0:  # also rejects NaN
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")
    return x


def sampling_rate(value: Any, name: str = "sampling_rate") -> float:
    """A sampling probability in (0, 1]."""
    x = _as_float(name, value)
    if not 0.0 < x <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {value!r}")
    return x


def positive(value: Any, name: str) -> float:
    """A finite real number > 0 (noise multipliers, sensitivities, ...)."""
    x = _as_float(name, value)
    if not (x > 0.0 and math.isfinite(x)):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return x


def count(value: Any, name: str = "steps", *, minimum: int = 0) -> int:
    """An integer count >= ``minimum`` (steps, rounds, sample sizes)."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    try:
        n = operator.index(value)
    except TypeError:
        if isinstance(value, numbers.Real) and float(value).is_integer():
            n = int(value)
        else:
            raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}") from None
    if n < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return n
