"""Feature preprocessing on host numpy arrays, fitted on training data and applied to all splits.

The fitting functions take ``train`` and any number of ``others`` (test sets, other silos), fit on
``train`` only and return the transformed arrays followed by the fitted parameters::

    x_train, x_test, fit = standardize(x_train, x_test)
    x_train, x_test, fit = pca(x_train, x_test, dim=50)
    x_new = fit.apply(x_new)

Note (Lowy & Razaviyayn §6.0): preprocessing fitted on the pooled data is not private; the papers do it
non-privately and say so.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np


class AffineFit(NamedTuple):
    """A fitted per-feature affine map ``x -> (x - shift) * mul + offset``.

    ``shift``, ``mul``: ``[*feature_shape]``; ``offset``: a scalar.

    Example:
      >>> import numpy as np
      >>> train, fit = standardize(np.array([[0.0, 10.0], [2.0, 30.0]]))
      >>> fit.shift.tolist(), fit.mul.tolist()                       # x -> (x - mean) / std
      ([1.0, 20.0], [1.0, 0.1])
    """

    shift: np.ndarray
    mul: np.ndarray
    offset: float = 0.0

    def apply(self, x) -> np.ndarray:
        x = np.asarray(x)
        _check_features(x, self.shift.shape, "x")
        return ((x - self.shift) * self.mul + self.offset).astype(_float_dtype(x))


class PCAFit(NamedTuple):
    """A fitted PCA: ``x -> (x.reshape(n, -1) - mean) @ components.T``.

    Attributes:
      mean: ``[d]`` training mean. components: ``[dim, d]`` orthonormal rows, by decreasing variance,
        each with its largest-magnitude entry positive. explained_variance: ``[dim]`` (``s**2/(n-1)``).

    Example:
      >>> import numpy as np
      >>> import jax
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (100, 5))) * [3.0, 1.0, 0.1, 0.1, 0.1]
      >>> train, fit = pca(x, dim=2)
      >>> train.shape, fit.components.shape, bool(fit.explained_variance[0] > fit.explained_variance[1])
      ((100, 2), (2, 5), True)
    """

    mean: np.ndarray
    components: np.ndarray
    explained_variance: np.ndarray

    def apply(self, x) -> np.ndarray:
        x = np.asarray(x)
        flat = x.reshape(x.shape[0], -1)
        if flat.shape[1] != self.mean.shape[0]:
            raise ValueError(f"x has {flat.shape[1]} features per record, the PCA was fitted on {self.mean.shape[0]}")
        return ((flat - self.mean) @ self.components.T).astype(_float_dtype(x))


def _float_dtype(x: np.ndarray):
    return np.result_type(x.dtype, np.float32)


def _check_features(x: np.ndarray, feature_shape: tuple, name: str) -> None:
    if x.ndim < 1 or x.shape[1:] != tuple(feature_shape):
        raise ValueError(f"{name} has feature shape {x.shape[1:]}, expected {tuple(feature_shape)}")


def _check_train(train) -> np.ndarray:
    train = np.asarray(train)
    if train.ndim < 2 or train.shape[0] == 0:
        raise ValueError(f"train must be [n >= 1, *features], got shape {train.shape}")
    if np.issubdtype(train.dtype, np.floating) and not np.all(np.isfinite(train)):
        raise ValueError("train contains NaN or inf")
    return train


def _select(train: np.ndarray, columns: Sequence[int] | None) -> np.ndarray | None:
    """Boolean mask over the last axis (2-D data only), or None for all columns."""
    if columns is None:
        return None
    if train.ndim != 2:
        raise ValueError(f"columns= needs 2-D data [n, d], got shape {train.shape}")
    d = train.shape[1]
    mask = np.zeros(d, bool)
    for c in columns:
        if not -d <= int(c) < d:
            raise ValueError(f"column {c} is out of range for {d} features")
        mask[int(c)] = True
    return mask


def _apply_all(fit, train, others):
    outs = [fit.apply(train)]
    for i, o in enumerate(others):
        o = np.asarray(o)
        try:
            outs.append(fit.apply(o))
        except ValueError as e:
            raise ValueError(f"others[{i}]: {e}") from None
    return outs


def standardize(train, *others, columns: Sequence[int] | None = None, ddof: int = 0):
    """Zero mean, unit variance per feature, with statistics of ``train``.

    Args:
      train: ``[n, *feature_shape]``. others: arrays with the same feature shape.
      columns: standardise only these columns of 2-D data (Lowy & Razaviyayn: age and bmi of insurance;
        Age, Height, Weight, CH2O, TUE of obesity); the rest pass unchanged.
      ddof: ``0`` (sklearn's StandardScaler) or ``1`` (pandas ``.std()``, which Lowy & Razaviyayn's code uses).

    Columns with zero standard deviation (a bias column, a constant pixel) pass unchanged.

    Returns:
      ``(train_std, *others_std, fit)`` with ``fit`` an :class:`AffineFit`.

    Example:
      >>> import numpy as np
      >>> x = np.arange(40, dtype=np.float32).reshape(20, 2)
      >>> train, test, fit = standardize(x[:10], x[10:])          # statistics of the training part only
      >>> train.mean(axis=0).round(6).tolist(), train.std(axis=0).round(6).tolist(), test.shape
      ([0.0, 0.0], [1.0, 1.0], (10, 2))
    """
    train = _check_train(train)
    if ddof not in (0, 1) or train.shape[0] <= ddof:
        raise ValueError(f"ddof={ddof} needs ddof in (0, 1) and more than {ddof} training records")
    x = train.astype(np.float64)
    mean, std = x.mean(axis=0), x.std(axis=0, ddof=ddof)
    keep = std > 0
    mask = _select(train, columns)
    if mask is not None:
        keep &= mask
    fit = AffineFit(np.where(keep, mean, 0.0), np.where(keep, 1.0 / np.where(keep, std, 1.0), 1.0))
    return (*_apply_all(fit, train, others), fit)


def minmax_scale(train, *others, feature_range: tuple[float, float] = (0.0, 1.0),
                 columns: Sequence[int] | None = None):
    """Maps each feature's ``train`` range ``[min, max]`` linearly onto ``feature_range``.

    Constant features map to ``feature_range[0]``. ``others`` may fall outside the range.

    Returns:
      ``(train_scaled, *others_scaled, fit)`` with ``fit`` an :class:`AffineFit`.

    Example:
      >>> import numpy as np
      >>> x = np.arange(40, dtype=np.float32).reshape(20, 2)
      >>> train, test, fit = minmax_scale(x[:10], x[10:])
      >>> float(train.min()), float(train.max()), round(float(test.max()), 4)   # the test part may leave [0, 1]
      (0.0, 1.0, 2.1111)
    """
    train = _check_train(train)
    lo, hi = map(float, feature_range)
    if not lo < hi:
        raise ValueError(f"feature_range must be (low, high) with low < high, got {feature_range!r}")
    x = train.astype(np.float64)
    xmin, xmax = x.min(axis=0), x.max(axis=0)
    span = np.where(xmax > xmin, xmax - xmin, 1.0)
    mask = _select(train, columns)
    shift, mul, offset = xmin, (hi - lo) / span, lo
    if mask is not None:   # unselected columns: (x - 0) * 1 + 0; offset folded into the shift
        shift = np.where(mask, xmin - lo * span / (hi - lo), 0.0)
        mul, offset = np.where(mask, mul, 1.0), 0.0
    fit = AffineFit(shift, mul, offset)
    return (*_apply_all(fit, train, others), fit)


def pca(train, *others, dim: int):
    """Principal components of ``train`` (numpy SVD), projecting every array onto the top ``dim``.

    Lowy & Razaviyayn/002's MNIST preprocessing: ``pca(x_train / 255., dim=50)`` on the flattened 60k images.
    Arrays are flattened to ``[n, d]``. The sign of each component is fixed so that its
    largest-magnitude entry is positive, so the result is deterministic.

    Returns:
      ``(train_proj, *others_proj, fit)``: ``[n, dim]`` arrays and a :class:`PCAFit`.

    Example:
      >>> import numpy as np
      >>> x = np.arange(40, dtype=np.float32).reshape(20, 2)
      >>> train, test, fit = pca(x[:10], x[10:], dim=1)
      >>> train.shape, test.shape
      ((10, 1), (10, 1))
    """
    train = _check_train(train)
    x = train.reshape(train.shape[0], -1).astype(np.float64)
    n, d = x.shape
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or not 1 <= dim <= min(n, d):
        raise ValueError(f"dim must be an integer in 1..min(n, d) = {min(n, d)}, got {dim!r}")
    mean = x.mean(axis=0)
    xc = x - mean
    if n > 2 * d:   # tall data: the SVD of the d x d scatter matrix gives the same components, faster
        _, s2, vt = np.linalg.svd(xc.T @ xc, hermitian=True)
    else:
        _, s, vt = np.linalg.svd(xc, full_matrices=False)
        s2 = s ** 2
    comps = vt[:dim]
    signs = np.sign(comps[np.arange(dim), np.argmax(np.abs(comps), axis=1)])
    comps = comps * np.where(signs == 0, 1.0, signs)[:, None]
    fit = PCAFit(mean, comps, s2[:dim] / max(n - 1, 1))
    return (*_apply_all(fit, train, others), fit)


def one_hot(y, num_classes: int | None = None, dtype=np.float32) -> np.ndarray:
    """``int[...]`` labels in ``0..num_classes-1`` to ``dtype[..., num_classes]`` (default: max + 1).

    Example:
      >>> import numpy as np
      >>> one_hot(np.array([0, 2, 1])).tolist()
      [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
    """
    y = np.asarray(y)
    if not np.issubdtype(y.dtype, np.integer):
        if not (np.issubdtype(y.dtype, np.floating) and np.all(np.isfinite(y)) and np.all(y == np.round(y))):
            raise ValueError(f"one_hot needs integer labels, got dtype {y.dtype}")
        y = y.astype(np.int64)
    if y.size and y.min() < 0:
        raise ValueError(f"labels must be >= 0, got {int(y.min())}")
    k = (int(y.max()) + 1 if y.size else 0) if num_classes is None else int(num_classes)
    if y.size and y.max() >= k:
        raise ValueError(f"label {int(y.max())} is out of range for num_classes={k}")
    return (y[..., None] == np.arange(k)).astype(dtype)


def add_bias_column(x, value: float = 1.0, *, first: bool = True) -> np.ndarray:
    """``[n, d]`` to ``[n, d + 1]`` with a constant column (first, as Lowy & Razaviyayn's code, or last).

    Example:
      >>> import numpy as np
      >>> add_bias_column(np.zeros((2, 2))).tolist()
      [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    """
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"add_bias_column needs x: [n, d], got shape {x.shape}")
    col = np.full((x.shape[0], 1), value, dtype=_float_dtype(x))
    return np.concatenate([col, x] if first else [x, col], axis=1).astype(_float_dtype(x))
