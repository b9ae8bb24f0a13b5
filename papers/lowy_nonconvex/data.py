"""Lowy et al.'s three experimental datasets (Lowy et al., non-convex ISRL-DP FL, Section 4 / App. H).

Each ``*_trial(trial, ...)`` returns a :class:`~papers.lowy_convex.data.TrialData` for
one trial (the host randomness is data preparation seeded by the trial number, never privacy noise).
``lipschitz`` is always None: the non-convex experiments clip per-example gradients at a tuned
threshold ``L``. ``deltas`` are ``1 / n_i^2`` with ``n_i`` the silo's training count.

* **MNIST** (§6.1): exactly Lowy & Razaviyayn's silos — 25 (even, odd) digit-pair silos, 774 images per
  digit, PCA-50 of pixels / 255 fitted on the 60 000 training images, 80/20 split per silo
  (1238 / 310 records), label 1 = even.
* **CIFAR-10** (§6.2): 10 one-class silos. ``source="subset"`` (offline, ``shared/data``): the
  4000-image subset of ``data_batch_1`` (396..422 images per class) and its 1000 test images, NOT
  the paper's 1000 images per silo and 10k test set. ``source="full"``: the official batches, 1000
  images per class drawn per trial **without** replacement (the authors' code draws
  ``int(0.2 * 5000)`` with replacement), test = the official 10 000 test images (the authors' code;
  the paper says a per-silo 80/20 split). Pixels / 255, normalised per channel with the mean and
  std of the trial's pooled training images (the authors hard-code the 50k training set's
  statistics for the training images and the test set's own for the test images), NHWC float32.
* **WBCD** (§6.3): scikit-learn's copy (569 x 30); silo 0 = malignant (label 1), silo 1 = benign
  (label 0). scikit-learn codes 0 = malignant, 1 = benign; we flip it so that 1 = malignant.
  Per-silo 80/20 split with a trial-seeded shuffle (212 -> 169 / 43, 357 -> 285 / 72, the sizes of
  the authors' ``KFold(5, shuffle=True, random_state=seed)`` fold 0). Features are standardised
  with the pooled TRAINING mean / std (``ddof=0``). The authors fit a StandardScaler per silo (and
  another on the test set); with one-class silos that puts the label into the scaling (each silo's
  features are centred on its own class mean), so we do not. The authors then resample each silo
  with replacement to ``int(q * min class count)`` records; we keep every training record.
"""
from __future__ import annotations

import numpy as np

from jaxfl.data import (from_silos, load_breast_cancer, load_cifar10, load_cifar10_subset, one_class_per_silo,
                        standardize, train_test_split_per_silo)
from jaxfl.data.federated import FederatedData
from papers.lowy_convex.data import (MNIST_PER_LABEL, TEST_FRACTION, TrialData, _deltas, _pooled, mnist_features,
                                     mnist_silos)

CIFAR_CLASSES = 10
CIFAR_FULL_PER_SILO = 1000         # int(0.2 * 5000): the authors' q_pct_of_data = 0.2
CIFAR_SUBSET_NOTE = ("offline CIFAR-10 subset: ~400 training images per silo (396..422, the first 4000 of "
                     "data_batch_1) and 1000 test images, instead of the paper's 1000 per silo and the 10k test set")
WBCD_MALIGNANT, WBCD_BENIGN = 1, 0


def _host(fd: FederatedData) -> FederatedData:
    """``fd`` with numpy leaves, so that slicing silos out of it compiles nothing."""
    return FederatedData(np.asarray(fd.x), np.asarray(fd.y), np.asarray(fd.counts))


# ------------------------------------------------------------------------------------------------
# MNIST


def mnist_trial(trial: int, *, per_label: int = MNIST_PER_LABEL, pca_fit_records: int | None = None) -> TrialData:
    """Trial ``trial`` of the MNIST experiment: Lowy & Razaviyayn's 25 digit-pair silos (1238 training and 310
    test records each, label 1 = even, PCA-50 features), ``lipschitz=None``.

    ``pca_fit_records`` fits the PCA on the first that many training images (quick forms, tests);
    None fits it on all 60 000 (the paper, ~10 s).
    """
    x, y = mnist_features(pca_fit_records)
    train, test = mnist_silos(x, y, trial, per_label=per_label)
    test_x, test_y = _pooled(_host(test))
    return TrialData(train, test_x, test_y, None, _deltas(train),
                     {"source": "mnist", "test_records": int(len(test_y))})


# ------------------------------------------------------------------------------------------------
# CIFAR-10


def _channel_stats(fd: FederatedData) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and std (``ddof=0``) of the real training pixels of ``fd`` (0..255), divided
    by 255."""
    x, _ = _pooled(fd)
    flat = x.reshape(-1, x.shape[-1]).astype(np.float64) / 255.0
    return flat.mean(axis=0), flat.std(axis=0)


def cifar10_trial(trial: int, *, source: str = "subset", per_silo: int | None = None, data_dir=None,
                  download: bool = False) -> TrialData:
    """Trial ``trial`` of the CIFAR-10 experiment: 10 one-class silos (silo ``c`` holds class ``c``).

    Args:
      source: ``"subset"`` (offline ``shared/data`` subset: each silo holds all of its class's 4000-image
        subset training images, 396..422, and the test set is the subset's 1000 test images) or
        ``"full"`` (official batches via :func:`jaxfl.data.load_cifar10`: ``per_silo`` (default 1000)
        images of each class drawn uniformly without replacement per trial; test = official 10k).
      per_silo: keep this many images per silo, a uniform subset drawn per trial without
        replacement (a silo with fewer keeps all). For the subset, None keeps every image and the
        training data is then the same in every trial.
      data_dir, download: passed to the loader.

    Returns:
      :class:`TrialData` with ``train.x: float32[10, max_n, 32, 32, 3]`` (pixels / 255 normalised per
      channel with the pooled training images' mean / std), ``train.y: int32`` class labels,
      ``test_x: float32[n_test, 32, 32, 3]``, ``test_y: int32[n_test]``; ``info`` records the source,
      the normalisation statistics and (subset) a note on how it differs from the paper.
    """
    if source == "subset":
        (x, y), (x_te, y_te) = (load_cifar10_subset(s, data_dir=data_dir, download=download)
                                for s in ("train", "test"))
        k = per_silo
    elif source == "full":
        (x, y), (x_te, y_te) = (load_cifar10(s, data_dir=data_dir, download=download) for s in ("train", "test"))
        k = CIFAR_FULL_PER_SILO if per_silo is None else per_silo
    else:
        raise ValueError(f"source must be 'subset' or 'full', got {source!r}")
    fd = _host(one_class_per_silo(x, y, classes=list(range(CIFAR_CLASSES)), max_per_silo=k, seed=30_000 + trial))
    mean, std = _channel_stats(fd)      # of pixels / 255
    mean32, std32 = mean.astype(np.float32), std.astype(np.float32)

    def norm(a):                        # raw 0..255 pixels -> normalised float32
        return (np.asarray(a, np.float32) / np.float32(255.0) - mean32) / std32

    train = from_silos([(norm(xi), yi) for xi, yi in (fd.silo(i) for i in range(fd.num_silos))])
    info = {"source": "cifar10-subset" if source == "subset" else "cifar10",
            "test_records": int(len(y_te)),
            "channel_mean": [float(v) for v in mean], "channel_std": [float(v) for v in std]}
    if source == "subset":
        info["note"] = CIFAR_SUBSET_NOTE
    return TrialData(train, norm(x_te), np.asarray(y_te, np.int32), None, _deltas(train), info)


# ------------------------------------------------------------------------------------------------
# WBCD


def wbcd_trial(trial: int) -> TrialData:
    """Trial ``trial`` of the WBCD experiment: silo 0 = the malignant records (label 1), silo 1 = the
    benign ones (label 0), each split 80/20 with a trial-seeded shuffle (169 + 285 = 454 training
    records, 43 + 72 = 115 test records); features standardised with the pooled training mean / std.

    Returns:
      :class:`TrialData` with ``train.x: float32[2, 285, 30]``, ``train.y: int32[2, 285]``, the pooled
      test parts (malignant first) as ``test_x: float32[115, 30]``, ``test_y: int32[115]``.
    """
    x, y_sk = load_breast_cancer()
    y = (np.asarray(y_sk) == 0).astype(np.int32)          # scikit-learn: 0 = malignant -> 1
    fd = one_class_per_silo(x, y, classes=[WBCD_MALIGNANT, WBCD_BENIGN])
    train, test = map(_host, train_test_split_per_silo(fd, TEST_FRACTION, seed=trial))
    x_tr, _ = _pooled(train)
    _, fit = standardize(x_tr)
    train = from_silos([(fit.apply(xi), yi) for xi, yi in (train.silo(i) for i in range(train.num_silos))])
    test_x, test_y = _pooled(test)
    return TrialData(train, fit.apply(test_x).astype(np.float32), test_y.astype(np.int32), None, _deltas(train),
                     {"source": "wbcd", "test_records": int(len(test_y)),
                      "labels": "1 = malignant (sklearn target 0), 0 = benign"})
