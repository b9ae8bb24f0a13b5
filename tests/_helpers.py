"""Small synthetic silos for engine tests (importable as ``_helpers`` from test modules)."""
import numpy as np


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
