"""The results schema of ``jaxfl reproduce`` (ARCHITECTURE §3.4): results.json, curves.csv, figure.png."""
from __future__ import annotations

import csv
import json
import math
import os
import platform
from pathlib import Path
from typing import Callable

import jax


def environment() -> dict:
    """Backend, device count and machine facts for results and benchmark records."""
    return {"backend": jax.default_backend(), "devices": jax.device_count(),
            "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "jax_version": jax.__version__, "python": platform.python_version()}


def _clean(value):
    if isinstance(value, float) and (math.isinf(value) or math.isnan(value)):
        return str(value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return _clean(value.item())
    return value


def run_record(algorithm: str, *, epsilon, delta, seed, metrics: dict, epsilon_spent, accountant,
               wall_seconds: float, **extra) -> dict:
    """One entry of ``runs`` in results.json."""
    return {"algorithm": algorithm, "epsilon": epsilon, "delta": delta, "seed": seed, "metrics": metrics,
            "privacy": {"epsilon_spent": epsilon_spent, "accountant": accountant},
            "wall_seconds": wall_seconds, **extra}


def write_results(out_dir: str | os.PathLike, *, experiment: str, config: dict, runs: list[dict],
                  curves: list[dict] | None = None, figure: Callable[[Path], None] | None = None) -> Path:
    """Writes ``results.json`` (+ ``curves.csv`` and ``figure.png`` when given) under ``out_dir``."""
    from jaxfl import __version__

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"experiment": experiment, "jaxfl_version": __version__, "config": config, "runs": runs,
           "environment": environment()}
    (out / "results.json").write_text(json.dumps(_clean(doc), indent=2) + "\n")
    if curves:
        fields = list(dict.fromkeys(k for row in curves for k in row))
        with (out / "curves.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(curves)
    if figure is not None:
        figure(out / "figure.png")
    return out / "results.json"
