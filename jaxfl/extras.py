"""Optional dependencies: which extra installs each, and one clear error when one is missing.

Training needs only JAX, optax, flax, dp_accounting, jax-privacy, orbax and NumPy/SciPy (``pip install jaxfl``).
Figures and the studies' data helpers need ``pip install 'jaxfl[studies]'`` (matplotlib, scikit-learn); the
benchmarks' baselines ``'jaxfl[bench]'`` (PyTorch, Opacus);
TensorBoard metrics ``'jaxfl[tensorboard]'`` (tensorboardX). ``import jaxfl`` imports none of them.
"""
from __future__ import annotations

import importlib
from types import ModuleType

EXTRA_OF = {"matplotlib": "studies", "sklearn": "studies", "torch": "bench", "opacus": "bench",
            "tensorboardX": "tensorboard"}
"""Top-level module -> the jaxfl extra that installs it."""


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra that installs it."""


def require(module: str) -> ModuleType:
    """``importlib.import_module(module)``, or :class:`MissingExtraError` naming the extra that installs it.

    >>> require("math").sqrt(4.0)
    2.0
    """
    try:
        return importlib.import_module(module)
    except ImportError as error:
        top = module.split(".")[0]
        if top not in EXTRA_OF:
            raise
        raise MissingExtraError(f"{module} is not installed: it comes with jaxfl's optional extra, "
                                f"pip install 'jaxfl[{EXTRA_OF[top]}]'") from error
