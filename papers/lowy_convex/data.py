"""Lowy & Razaviyayn's three experimental datasets, silo-major, as the paper's App. I builds them.

Each ``*_trial(trial, ...)`` returns a :class:`TrialData` for one trial (a fresh random split; the
host randomness is data preparation, seeded by the trial number, never privacy noise):

* **MNIST** (App. I.1): odd/even logistic regression, one silo per (even, odd) digit pair (25
  silos), ``774 = floor(5421 / 7)`` images of each digit (1/7 of the data), so 1548 records per silo,
  split 80/20 per silo (1238 / 310). Pixels in [0, 1], PCA to 50 dimensions fitted on the 60 000
  training images, no bias, labels even = 1.
* **Insurance** (App. I.2): linear regression of the charges on (age, sex, bmi, children, smoker,
  region) label-encoded plus a first column of ones (d = 7); silos are the target-sorted chunks of
  ``ceil(1338 / N)`` records (the last holds the rest); 80/20 split per silo; age and bmi
  standardised with each silo's own training statistics (the authors' code).
* **Obesity** (App. I.3): 7-class softmax regression, label-encoded categoricals, Age, Height,
  Weight, CH2O, TUE standardised with training statistics, a first column of ones (17 x 7
  parameters); a global 80/20 split, then one class per silo, every silo cut down to the smallest
  class's training count by discarding randomly chosen records (the paper), not resampled with
  replacement (the authors' code). The test set is the global 20 %.
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxfl.data import (FederatedData, add_bias_column, from_silos, label_pairs, load_insurance, load_mnist,
                        load_obesity, one_class_per_silo, pca, sorted_by_target, standardize, train_test_split_per_silo)
from jaxfl.data.loaders import OBESITY_COLUMNS

MNIST_PER_LABEL = 774            # floor(5421 / 7): 1/7 of the rarest digit's 5421 training images
MNIST_PCA_DIM = 50
MNIST_LOGIT_CLIP = 15.0
INSURANCE_RECORDS = 1338
INSURANCE_STANDARDIZE = (0, 2)   # age, bmi
OBESITY_STANDARDIZE = tuple(OBESITY_COLUMNS.index(c) for c in ("Age", "Height", "Weight", "CH2O", "TUE"))
OBESITY_CLASSES = 7
TEST_FRACTION = 0.2


class TrialData(NamedTuple):
    """One trial's data.

    Attributes:
      train: silo-major training data (``counts`` = the ``n_i``).
      test_x, test_y: the pooled test set (all silos' test parts, or the global test set).
      lipschitz: ``L = 2 max ||x||`` over the training features the model sees (MNIST, obesity), or
        None (insurance: ``L`` is the tuned clip threshold).
      deltas: ``float64[num_silos]``, ``delta_i = 1 / n_i^2``.
      info: extra facts for the results (e.g. the naive predictor of insurance).
    """

    train: FederatedData
    test_x: np.ndarray
    test_y: np.ndarray
    lipschitz: float | None
    deltas: np.ndarray
    info: dict


def lipschitz_bound(train: FederatedData) -> float:
    """``2 max_x ||x||`` over the real (unpadded) training records: the paper's bound on the Lipschitz
    constant of the logistic and softmax losses (a per-example gradient is at most ``sqrt(2) ||x||``)."""
    x = np.asarray(train.x, np.float64)
    norms = np.linalg.norm(x.reshape(x.shape[0], x.shape[1], -1), axis=-1)
    norms = np.where(np.asarray(train.mask()), norms, 0.0)
    return float(2.0 * norms.max())


def _pooled(fd: FederatedData) -> tuple[np.ndarray, np.ndarray]:
    parts = [fd.silo(i) for i in range(fd.num_silos)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _deltas(train: FederatedData) -> np.ndarray:
    return 1.0 / np.asarray(train.counts, np.float64) ** 2


# ------------------------------------------------------------------------------------------------
# MNIST


@functools.lru_cache(maxsize=2)
def mnist_features(pca_fit_records: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """PCA-50 features of the 60 000 MNIST training images (pixels / 255) and their labels.

    The paper fits the PCA on all 60 000 images (``pca_fit_records=None``, ~10 s on a laptop CPU);
    quick forms fit it on the first ``pca_fit_records`` images. Cached per process.
    """
    x, y = load_mnist("train")
    x = x.reshape(len(x), -1).astype(np.float32) / np.float32(255.0)
    fit_on = x if pca_fit_records is None else x[:pca_fit_records]
    _, fit = pca(fit_on, dim=MNIST_PCA_DIM)
    return fit.apply(x).astype(np.float32), y


def even_is_one(y: np.ndarray) -> np.ndarray:
    """The odd/even target: 1 for even digits, 0 for odd ones (the authors' coding)."""
    return (np.asarray(y) % 2 == 0).astype(np.int32)


def mnist_silos(x, y, trial: int, *, per_label: int = MNIST_PER_LABEL) -> tuple[FederatedData, FederatedData]:
    """The 25 digit-pair silos of one trial, split 80/20 per silo: ``(train, test)``.

    Each digit's ``per_label`` images are a fresh uniform subset per trial and are shared by the 5
    silos holding that digit (as in the authors' code, where a digit's pool serves every pair).
    """
    fd = label_pairs(x, y, per_label=per_label, seed=10_000 + trial, relabel=even_is_one)
    return train_test_split_per_silo(fd, TEST_FRACTION, seed=trial)


def mnist_trial(trial: int, *, per_label: int = MNIST_PER_LABEL, pca_fit_records: int | None = None) -> TrialData:
    """Trial ``trial`` of the MNIST experiment (see the module docstring)."""
    x, y = mnist_features(pca_fit_records)
    train, test = mnist_silos(x, y, trial, per_label=per_label)
    test_x, test_y = _pooled(test)
    return TrialData(train, test_x, test_y, lipschitz_bound(train), _deltas(train),
                     {"test_records": int(len(test_y))})


def mnist_loss(params, x, y):
    """The authors' logistic loss: ``-[y log(1e-12 + s) + (1 - y) log(1e-12 + 1 - s)]`` with
    ``s = sigmoid(clip(<w, x>, -15, 15))``; no bias. ``params = {"w": [50]}``."""
    s = jax.nn.sigmoid(jnp.clip(x @ params["w"], -MNIST_LOGIT_CLIP, MNIST_LOGIT_CLIP))
    y = y.astype(s.dtype)
    return -(y * jnp.log(1e-12 + s) + (1.0 - y) * jnp.log(1e-12 + 1.0 - s))


def mnist_error(params, x, y, eval_data=None):
    """Misclassification rate of the 0.5-thresholded sigmoid."""
    return jnp.mean(((x @ params["w"]) > 0).astype(jnp.int32) != y)


# ------------------------------------------------------------------------------------------------
# Insurance


def insurance_silos(trial: int, num_silos: int = 10) -> tuple[list, list]:
    """Per-silo ``(x, y)`` lists ``(train, test)`` of one trial: target-sorted silos (ceil rule),
    80/20 split per silo, age and bmi standardised with the silo's training statistics (``ddof=1``,
    pandas as in the authors' code), then a first column of ones."""
    x, y = load_insurance()
    fd = sorted_by_target(x, y, num_silos, rule="ceil")
    train, test = train_test_split_per_silo(fd, TEST_FRACTION, seed=trial)
    parts_train, parts_test = [], []
    for i in range(num_silos):
        (x_tr, y_tr), (x_te, y_te) = train.silo(i), test.silo(i)
        x_tr, x_te, _ = standardize(x_tr, x_te, columns=INSURANCE_STANDARDIZE, ddof=1)
        parts_train.append((add_bias_column(x_tr), y_tr.astype(np.float32)))
        parts_test.append((add_bias_column(x_te), y_te.astype(np.float32)))
    return parts_train, parts_test


def insurance_trial(trial: int, num_silos: int = 10) -> TrialData:
    """Trial ``trial`` of the insurance experiment; ``info["naive"]`` is the mean training label
    (the naive predictor of the relative RMSE)."""
    parts_train, parts_test = insurance_silos(trial, num_silos)
    train = from_silos(parts_train)
    test_x = np.concatenate([p[0] for p in parts_test])
    test_y = np.concatenate([p[1] for p in parts_test])
    naive = float(np.concatenate([p[1] for p in parts_train]).astype(np.float64).mean())
    return TrialData(train, test_x, test_y, None, _deltas(train),
                     {"naive": naive, "test_records": int(len(test_y))})


def squared_loss(params, x, y):
    """``(y - <w, x>)^2 / 2`` (the bias is the column of ones). ``params = {"w": [7]}``."""
    return 0.5 * (y - x @ params["w"]) ** 2


def relative_rmse(params, x, y, naive):
    """``sqrt(sum (y - yhat)^2 / sum (y - naive)^2)`` over the pooled test set (App. I.2); ``naive`` is
    the mean training label, or evaluation data holding it as ``"naive"``."""
    if isinstance(naive, dict):
        naive = naive["naive"]
    return jnp.sqrt(jnp.sum((y - x @ params["w"]) ** 2) / jnp.sum((y - naive) ** 2))


# ------------------------------------------------------------------------------------------------
# Obesity


def obesity_trial(trial: int, with_replacement: bool = False) -> TrialData:
    """Trial ``trial`` of the obesity experiment (see the module docstring).

    ``with_replacement=True`` balances the silos as the authors' scripts do: each class's training rows
    resampled to ``n_min`` uniformly with replacement (the paper discards records instead). The silos are
    padded to a fixed ``max_records`` (the smallest class's total size, an upper bound on every trial's
    balanced silo size) so that every trial has the same array shapes.
    """
    x, y = load_obesity()
    n = len(y)
    rng = np.random.default_rng(trial)  # host-rng-ok: the trial's train/test split (data preparation)
    perm = rng.permutation(n)
    n_test = math.ceil(TEST_FRACTION * n)
    test_idx, train_idx = perm[:n_test], perm[n_test:]
    x_tr, x_te, _ = standardize(x[train_idx], x[test_idx], columns=OBESITY_STANDARDIZE, ddof=1)
    x_tr, x_te = add_bias_column(x_tr), add_bias_column(x_te)
    y_tr, y_te = y[train_idx], y[test_idx]
    n_min = int(np.bincount(y_tr, minlength=OBESITY_CLASSES).min())
    if with_replacement:
        pick = np.random.default_rng(20_000 + trial)  # host-rng-ok: data preparation (the scripts' resampling)
        fd = from_silos([(x_tr[i], y_tr[i]) for i in (pick.choice(np.flatnonzero(y_tr == c), n_min)
                                                      for c in range(OBESITY_CLASSES))])
    else:
        fd = one_class_per_silo(x_tr, y_tr, classes=list(range(OBESITY_CLASSES)), max_per_silo=n_min,
                                seed=20_000 + trial)
    cap = int(np.bincount(y, minlength=OBESITY_CLASSES).min())
    train = from_silos([fd.silo(i) for i in range(fd.num_silos)], max_records=cap)
    return TrialData(train, x_te, y_te.astype(np.int32), lipschitz_bound(train), _deltas(train),
                     {"n_min": n_min, "test_records": int(len(y_te))})


def softmax_loss(params, x, y):
    """Multiclass cross-entropy of ``softmax(x @ W)``; ``params = {"w": [17, 7]}`` (bias row first)."""
    logits = x @ params["w"]
    return jax.nn.logsumexp(logits) - logits[y]


def softmax_error(params, x, y, eval_data=None):
    """Misclassification rate of the arg-max class."""
    return jnp.mean(jnp.argmax(x @ params["w"], axis=-1) != y)
