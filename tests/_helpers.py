"""Small synthetic silos for engine tests, shared assertions, and a sweep checkpoint writer that stands for a
killed sitting (importable as ``_helpers`` from test modules)."""
import importlib
import os

import numpy as np

_SWEEP = importlib.import_module("jaxfl.engine.sweep")  # the module: ``jaxfl.engine.sweep`` names the function
_WRITE_CHECKPOINT = _SWEEP._write_checkpoint


def cpu_devices_flags(count) -> str:
    """``XLA_FLAGS`` for a subprocess with ``count`` CPU devices, keeping the flags this run set (the tests' fast
    compilation: ``tests/conftest.py``)."""
    return f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={count}".strip()


def make_silos(sizes, features=5, seed=0):
    """One ``(x, y)`` per size: Gaussian features, labels from a noisy linear rule."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(features)
    silos = []
    for n in sizes:
        x = rng.standard_normal((n, features)).astype(np.float32)
        y = (x @ w + 0.3 * rng.standard_normal(n) > 0).astype(np.int32)
        silos.append((x, y))
    return silos


def assert_clipped_sums_equal(expected, got, rtol=2e-5):
    """Two :class:`jaxfl.privacy.clipping.ClippedSum`: values to ``rtol`` (relative to the largest entry),
    count, number clipped and sensitivity exactly."""
    import jax

    scale = max(float(np.max(np.abs(leaf))) for leaf in jax.tree_util.tree_leaves(expected.value))
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(b, a, rtol=rtol, atol=rtol * scale),
                           expected.value, got.value)
    assert float(got.count) == float(expected.count)
    assert float(got.num_clipped) == float(expected.num_clipped)
    assert float(got.sensitivity) == float(expected.sensitivity)


class Killed(Exception):
    """A sitting killed just after it saved a sweep checkpoint."""


def watch_checkpoint_writes(monkeypatch, die_at=None):
    """Patch the sweep's checkpoint writer: each write still happens, and its round is appended to the returned
    list; the ``die_at``-th write (counted from this call) then raises :class:`Killed`. ``die_at=None`` never dies."""
    rounds = []

    def write(checkpoint, progress):
        _WRITE_CHECKPOINT(checkpoint, progress)
        rounds.append(progress["round"])
        if len(rounds) == die_at:
            raise Killed

    monkeypatch.setattr(_SWEEP, "_write_checkpoint", write)
    return rounds
