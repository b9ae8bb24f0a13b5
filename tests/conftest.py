"""Shared fixtures, and the test run's persistent compilation cache."""
import hashlib
import os
import platform
import shutil
from pathlib import Path

import jax
import pytest

COMPILATION_CACHE_ENV = "JAXFL_TEST_COMPILATION_CACHE"
COMPILATION_CACHE_CAP_BYTES = 2 * 2**30


def _use_compilation_cache() -> None:
    """Keeps the XLA programs the tests compile in ``.pytest_cache/`` (pytest's own, git-ignored folder) and
    reuses them in later runs: most of the fast tier's time is compilation, which a warm cache skips.
    Results are unchanged: a cached executable is the compiled program itself. The folder is keyed by the
    processor's instruction set and the JAX version (an executable compiled for another CPU may not run here)
    and set through the environment, so the tests' subprocesses share it. JAX's size cap is left off: its
    eviction scans the whole folder at every write (thousands of files here, so a cold run slowed); instead a folder
    over ``COMPILATION_CACHE_CAP_BYTES`` is emptied when a run starts. Off with
    ``JAXFL_TEST_COMPILATION_CACHE=0``, or when the caller has set ``JAX_COMPILATION_CACHE_DIR`` (then that
    folder is used as configured)."""
    if os.environ.get(COMPILATION_CACHE_ENV, "1") == "0" or os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return
    from jaxfl.studies.provenance import cpu_flags

    machine = f"{platform.machine()} {cpu_flags()} jax {jax.__version__}"
    folder = Path(__file__).resolve().parents[1] / ".pytest_cache" / (
        "jax-" + hashlib.sha256(machine.encode()).hexdigest()[:16])
    if "PYTEST_XDIST_WORKER" not in os.environ and folder.is_dir() and sum(
            f.stat().st_size for f in folder.iterdir()) > COMPILATION_CACHE_CAP_BYTES:
        shutil.rmtree(folder, ignore_errors=True)   # the controller, before any worker starts
    settings = {"jax_compilation_cache_dir": str(folder), "jax_persistent_cache_min_compile_time_secs": 0.0}
    os.environ.update({name.upper(): str(value) for name, value in settings.items()})
    for name, value in settings.items():  # this process has imported JAX already: its config, too
        jax.config.update(name, value)


FAST_COMPILATION_FLAG = "--xla_llvm_disable_expensive_passes=true"


def _use_fast_compilation() -> None:
    """Compiles the tests' programs without LLVM's expensive optimisation passes (``XLA_FLAGS``, inherited by the
    tests' subprocesses): most of a cold run is XLA compiling small programs that then run for milliseconds, and
    this flag cut a cold run of the engine, audit and microbatch tests by a fifth (164 s to 126 s on 2 cores).
    The results are bitwise the same (quick reproductions of lowy-convex/mnist and huang-jdp/table2 compared
    with and without it); ``--xla_backend_optimization_level=0`` would save a little more but changes the last
    bits of some results, so it is not used. Off with ``JAXFL_TEST_FAST_COMPILATION=0``."""
    if os.environ.get("JAXFL_TEST_FAST_COMPILATION", "1") == "0":
        return
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_llvm_disable_expensive_passes" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {FAST_COMPILATION_FLAG}".strip()


_use_fast_compilation()   # before the CPU backend starts (it reads XLA_FLAGS once)
_use_compilation_cache()  # before anything compiles (the cache is set up at the first compilation)

from _helpers import make_silos
from jaxfl.data.federated import from_silos


REASONS = {"full": "a full-size reproduction (hours): run with -m full",
           "study": "a paper home's further quick form, run end to end: run with -m study"}


def pytest_collection_modifyitems(config, items):
    """Full-size reproductions (``full``: hours) and the paper homes' further quick forms (``study``) run only
    when ``-m`` names them: a ``-m`` that replaces the default one (e.g. ``-m slow``) would otherwise select them."""
    expression = config.getoption("markexpr") or ""
    for marker, reason in REASONS.items():
        if marker in expression:
            continue
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if item.get_closest_marker(marker) is not None:
                item.add_marker(skip)


@pytest.fixture
def small_data():
    """Five silos of unequal size (padding present), 5 features, binary labels."""
    return from_silos(make_silos([40, 25, 33, 40, 18]))
