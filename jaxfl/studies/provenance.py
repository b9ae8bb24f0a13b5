"""Where and how a number was measured: the processor (:func:`machine`), the software (:func:`environment`), the
code (:func:`source_revision`), and the timing helpers the benchmarks share (:func:`best_seconds`,
:func:`interleaved_best_seconds`, :func:`write_benchmark`). Results and benchmark JSON files carry these facts, so
prose never has to.
"""
from __future__ import annotations

import functools
import json
import math
import os
import platform
import subprocess
from pathlib import Path




def _lscpu(field: str) -> str | None:
    """The value of ``lscpu``'s line ``field:`` (Linux), or None where lscpu or the line is missing."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith(field + ":")), None)


def cpu_model() -> str:
    """The processor's name: ``lscpu``'s ``Model name`` (Linux), else ``platform``'s name for it, else the
    architecture. Benchmarks compare within one JSON; this says which machine made it.

    Example:
      >>> isinstance(cpu_model(), str) and cpu_model() != ""
      True
    """
    return _lscpu("Model name") or platform.processor() or platform.machine()


def cpu_flags() -> str:
    """The processor's instruction-set flags (``lscpu``'s ``Flags``; "" where not available): what code compiled
    for this CPU may use.

    Example:
      >>> isinstance(cpu_flags(), str)
      True
    """
    return _lscpu("Flags") or ""


VECTOR_FLAGS = ("sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "asimd", "sve", "sve2")
"""The instruction-set flags that change the code XLA:CPU emits for this machine (with every ``avx512*`` and
``amx*`` flag): :func:`cpu_vector_extensions` reports these."""


def cpu_vector_extensions() -> str:
    """The vector extensions among :func:`cpu_flags` (e.g. ``"avx avx2 fma sse4_1 sse4_2"``; "" where lscpu is
    not available). XLA:CPU compiles for the host's extensions, so two machines that differ here may round a
    program's floats differently: the same run agrees bitwise on one machine, to float rounding across them.

    Example (a subset of :func:`cpu_flags`):
      >>> set(cpu_vector_extensions().split()) <= set(cpu_flags().split())
      True
    """
    return " ".join(sorted(f for f in cpu_flags().split() if f in VECTOR_FLAGS or f.startswith(("avx512", "amx"))))


def best_seconds(fn, *args, repeats: int, warmup: bool = True) -> float:
    """The fastest of ``repeats`` timed calls ``fn(*args)`` (seconds, waiting for JAX results), after one
    untimed call (compilation, caches) unless ``warmup=False``: the benchmarks' timer.

    Example:
      >>> import jax.numpy as jnp
      >>> best_seconds(lambda a: a @ a, jnp.ones((64, 64)), repeats=3) > 0
      True
    """
    import time

    import jax

    if warmup:
        jax.block_until_ready(fn(*args))
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - start)
    return best


def interleaved_best_seconds(runs: dict, repeats: int) -> dict:
    """Side-by-side timing: each zero-argument callable of ``runs`` (``{name: fn}``, each waiting for its own
    results) called once untimed (compilation, allocators), then all of them in turn ``repeats`` times, so
    a slow spell of the machine hits every side; returns ``{name: its fastest call in seconds}``.

    Example (two sides timed in turn, so a slow spell of the machine hits both):
      >>> import numpy as np
      >>> a = np.ones((64, 64))
      >>> sorted(interleaved_best_seconds({"matmul": lambda: a @ a, "sum": lambda: a.sum()}, repeats=3))
      ['matmul', 'sum']
    """
    import time

    for run in runs.values():
        run()
    best = {name: math.inf for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def interleaved_best_records(runs: dict, repeats: int, key: str) -> dict:
    """Side-by-side measurement for callables that time themselves: each zero-argument callable of ``runs``
    (``{name: fn}``, returning a dict of measurements) called in turn ``repeats`` times; returns ``{name: its
    record with the smallest ``record[key]``}`` (e.g. seconds per step).

    Example:
      >>> import time
      >>> def timed():
      ...     start = time.perf_counter()
      ...     sum(range(1000))
      ...     return {"seconds": time.perf_counter() - start}
      >>> list(interleaved_best_records({"loop": timed}, repeats=3, key="seconds"))
      ['loop']
    """
    best = {}
    for _ in range(repeats):
        for name, run in runs.items():
            got = run()
            if name not in best or got[key] < best[name][key]:
                best[name] = got
    return best


def write_benchmark(record: dict, path) -> Path:
    """Writes a benchmark's JSON record (ARCHITECTURE §3.6), with the code that ran it (``source``:
    :func:`source_revision`), to ``path``, creating its folder; returns the path.

    Example:
      >>> import json, pathlib, tempfile
      >>> path = write_benchmark({"ratio": 1.5}, pathlib.Path(tempfile.mkdtemp()) / "bench" / "mine.json")
      >>> record = json.loads(path.read_text())
      >>> record["ratio"], "source" in record
      (1.5, True)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**record, "source": source_revision()}, indent=2) + "\n")
    return path


def machine() -> dict:
    """The processor a result came from: its name (:func:`cpu_model`) and the vector extensions XLA:CPU
    compiled for (:func:`cpu_vector_extensions`), as stored parts, results and benchmark records name it; on an
    accelerator backend also ``"accelerator": "COUNT x KIND"`` (e.g. ``"1 x NVIDIA H200"``), which ran the programs
    while the processor hosted them.

    Example:
      >>> sorted(machine())[:2]
      ['cpu', 'cpu_vector_extensions']
    """
    import jax

    accelerator = {} if jax.default_backend() == "cpu" else {
        "accelerator": f"{jax.device_count()} x {jax.devices()[0].device_kind}"}
    return {"cpu": cpu_model(), "cpu_vector_extensions": cpu_vector_extensions(), **accelerator}


def environment() -> dict:
    """Backend, device count and machine facts (:func:`machine`) for results and benchmark records.

    Example:
      >>> facts = environment()
      >>> {"backend", "devices", "jax_version", "cpu"} <= set(facts)
      True
    """
    import jax

    return {"backend": jax.default_backend(), "devices": jax.device_count(),
            "device_kind": jax.devices()[0].device_kind, **machine(), "cores": os.cpu_count(),
            "jax_version": jax.__version__, "python": platform.python_version(),
            "prng_impl": str(jax.config.jax_default_prng_impl)}


SOURCE_ENV = "JAXFL_SOURCE_COMMIT"
"""Names the commit of a tree copied out of its git checkout (a launcher shipping a clean checkout to another
machine sets it); when set it is recorded, as ``declared``, instead of asking git: a copied tree may sit beside
a ``.git`` that is not its own (a lent GPU machine's copy once read a stale one)."""


@functools.lru_cache(maxsize=1)
def source_revision() -> dict | None:
    """The code that ran: ``{"commit": $JAXFL_SOURCE_COMMIT, "modified": False, "declared": True}`` when that
    variable is set; else ``{"commit": HEAD's sha, "modified": whether the checkout's ``jaxfl/`` differs from
    it}`` when jaxfl runs from a git checkout; else None. Read once per process, when a study starts
    (:func:`jaxfl.studies.runner.run`; a commit made during the run does not relabel it), or at the first
    record otherwise (a study's parts may be reused by a later process at another commit: results.json lists
    theirs too)."""
    declared = os.environ.get(SOURCE_ENV, "").strip()
    if declared:  # the launcher knows the tree it shipped; a .git beside it may be another's
        return {"commit": declared, "modified": False, "declared": True}
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "jaxfl"],
                                capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "modified": bool(status.strip())}
