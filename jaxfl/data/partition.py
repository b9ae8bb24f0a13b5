"""Partitioners: plain host arrays ``(x, y)`` to a silo-major :class:`FederatedData`.

Every partitioner takes ``x: [n, *feature_shape]`` and ``y: [n, *target_shape]`` (a label
partitioner needs ``y: [n]``), chooses which records each silo holds, and builds the padded
``FederatedData(x: [num_silos, max_records, ...], y: [num_silos, max_records, ...], counts)`` with
:func:`from_silos` (features become ``float32``, integer labels ``int32``, padding rows are zero).

Randomness here is data preparation, not privacy noise: it uses a NumPy ``default_rng(seed)``, and
the same ``seed`` always gives the same partition. Bad input (``num_silos < 1``, more silos than
records, a silo left empty, ``alpha <= 0``, an unknown class, NaN features, mismatched lengths)
raises ``ValueError`` naming the value.
"""
from __future__ import annotations

import itertools
import math
from typing import Callable, Sequence

import numpy as np

from jaxfl import checks
from jaxfl.data.federated import FederatedData, from_silos

EVEN_ODD_PAIRS = tuple(itertools.product((0, 2, 4, 6, 8), (1, 3, 5, 7, 9)))
"""The 25 (even, odd) digit pairs of Lowy & Razaviyayn/002's MNIST silos, in the authors' order."""


# ----------------------------------------------------------------------------------------------
# Checks and assembly


def _check_xy(x, y) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(x), np.asarray(y)
    if x.ndim == 0 or y.ndim == 0:
        raise ValueError(f"x and y need a leading record axis, got shapes {x.shape} and {y.shape}")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x has {x.shape[0]} records but y has {y.shape[0]}")
    if x.shape[0] == 0:
        raise ValueError("no records: x and y are empty")
    for name, a in (("x", x), ("y", y)):
        if np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.complexfloating):
            bad = ~np.isfinite(a.reshape(a.shape[0], -1)).all(axis=1)
            if bad.any():
                raise ValueError(f"{name} has NaN or inf at record {int(np.flatnonzero(bad)[0])}")
    return x, y


def _check_labels(y: np.ndarray) -> np.ndarray:
    if y.ndim != 1:
        raise ValueError(f"this partitioner needs 1-D labels y: [n], got shape {y.shape}")
    return y


def _check_num_silos(num_silos, n: int) -> int:
    num_silos = checks.positive_int("num_silos", num_silos)
    if num_silos > n:
        raise ValueError(f"num_silos={num_silos} exceeds the number of records ({n})")
    return num_silos


def _rng(seed) -> np.random.Generator:
    if seed is None:
        raise ValueError("seed=None: pass an integer seed so the partition is reproducible")
    return np.random.default_rng(seed)  # host-rng-ok: data preparation, not privacy noise


def _build(x, y, silos: Sequence[np.ndarray], what: str,
           relabel: Callable[[np.ndarray], np.ndarray] | None = None) -> FederatedData:
    parts = []
    for i, idx in enumerate(silos):
        if len(idx) == 0:
            raise ValueError(f"{what}: silo {i} would have zero records")
        yi = y[idx]
        if relabel is not None:
            yi = np.asarray(relabel(yi))
            if yi.shape[:1] != (len(idx),):
                raise ValueError(f"relabel returned shape {yi.shape} for {len(idx)} records of silo {i}")
        parts.append((x[idx], yi))
    return from_silos(parts)


def _take(idx: np.ndarray, k: int | None, rng: np.random.Generator | None) -> np.ndarray:
    """``k`` of ``idx``: the first ``k`` (rng None) or a uniform subset kept in the original order."""
    if k is None or k >= len(idx):
        return idx
    if rng is None:
        return idx[:k]
    return np.sort(rng.choice(idx, size=k, replace=False))


def _check_count(name: str, k) -> int | None:
    return None if k is None else checks.positive_int(name, k)


def _class_indices(y: np.ndarray, classes) -> list[np.ndarray]:
    present = np.unique(y)
    out = []
    for c in classes:
        idx = np.flatnonzero(y == c)
        if len(idx) == 0:
            raise ValueError(f"unknown class {c!r}: no record has this label (labels: {present.tolist()})")
        out.append(idx)
    return out


# ----------------------------------------------------------------------------------------------
# Partitioners


def iid(x, y, num_silos: int, *, seed: int) -> FederatedData:
    """Shuffles the records and deals them into ``num_silos`` silos whose sizes differ by at most one.

    Every record is assigned exactly once.

    Example:
      >>> import numpy as np
      >>> x, y = np.arange(40, dtype=np.float32).reshape(20, 2), np.arange(20) % 4    # 20 records, 4 classes
      >>> data = iid(x, y, num_silos=4, seed=0)
      >>> data.num_silos, data.counts.tolist(), data.x.shape       # x: [silos, max records, *features]
      (4, [5, 5, 5, 5], (4, 5, 2))
    """
    x, y = _check_xy(x, y)
    num_silos = _check_num_silos(num_silos, len(x))
    perm = _rng(seed).permutation(len(x))
    return _build(x, y, np.array_split(perm, num_silos), "iid")


def one_class_per_silo(x, y, *, classes: Sequence | None = None, max_per_silo: int | None = None,
                       seed: int | None = None) -> FederatedData:
    """Silo ``i`` holds the records of label ``classes[i]`` (default: every label, sorted).

    Lowy et al.'s CIFAR-10 and WBCD silos and Lowy & Razaviyayn's obesity silos.

    Args:
      classes: the label of each silo, in silo order; each must occur in ``y``.
      max_per_silo: keep at most this many records per silo: the first ones (``seed=None``) or a
        uniformly random subset (kept in the original order) drawn with ``seed``.

    Example:
      >>> import numpy as np
      >>> x, y = np.arange(40, dtype=np.float32).reshape(20, 2), np.arange(20) % 4    # 20 records, 4 classes
      >>> data = one_class_per_silo(x, y)
      >>> [sorted(set(data.y[i, :n].tolist())) for i, n in enumerate(data.counts)]
      [[0], [1], [2], [3]]
    """
    x, y = _check_xy(x, y)
    y = _check_labels(y)
    classes = np.unique(y).tolist() if classes is None else list(classes)
    if len(classes) == 0:
        raise ValueError("classes is empty: need at least one class")
    if len(set(classes)) != len(classes):
        raise ValueError(f"classes has repeated labels: {classes}")
    k = _check_count("max_per_silo", max_per_silo)
    rng = None if seed is None or k is None else _rng(seed)
    silos = [_take(idx, k, rng) for idx in _class_indices(y, classes)]
    return _build(x, y, silos, "one_class_per_silo")


def label_pairs(x, y, *, pairs: Sequence[Sequence] | None = None, per_label: int | None = None,
                seed: int | None = None, relabel: Callable[[np.ndarray], np.ndarray] | None = None
                ) -> FederatedData:
    """One silo per group of labels: Lowy & Razaviyayn/002's MNIST silos, one per (even, odd) digit pair.

    Silo ``i`` holds the selected records of ``pairs[i][0]``, then those of ``pairs[i][1]`` (and so
    on for longer groups). A label's selected records are the same in every silo that uses it (each
    digit appears in 5 of the 25 default silos), as in the authors' code, so records are shared
    between silos and ``sum(counts)`` exceeds the number of distinct records.

    Args:
      pairs: label groups, default :data:`EVEN_ODD_PAIRS` (25 silos).
      per_label: keep this many records of each label: the first ones (``seed=None``, the authors'
        code: ``floor(5421 / 7) = 774``, 5421 being the count of the rarest digit) or a uniformly random
        subset drawn with ``seed``. Must not exceed any used label's count.
      relabel: applied to each silo's labels, e.g. ``lambda y: (y % 2 == 0).astype(np.int32)`` for
        the even = 1 / odd = 0 target. The original labels are kept when None.

    Example:
      >>> import numpy as np
      >>> x, y = np.arange(40, dtype=np.float32).reshape(20, 2), np.arange(20) % 4    # 20 records, 4 classes
      >>> label_pairs(x, y, pairs=[(0, 1), (2, 3)]).counts.tolist()
      [10, 10]
    """
    x, y = _check_xy(x, y)
    y = _check_labels(y)
    pairs = EVEN_ODD_PAIRS if pairs is None else [tuple(p) for p in pairs]
    if len(pairs) == 0:
        raise ValueError("pairs is empty: need at least one label group")
    for p in pairs:
        if len(p) == 0 or len(set(p)) != len(p):
            raise ValueError(f"label group {p!r} must be non-empty without repeated labels")
    k = _check_count("per_label", per_label)
    used = list(dict.fromkeys(itertools.chain.from_iterable(pairs)))   # first-appearance order
    rng = None if seed is None or k is None else _rng(seed)
    chosen = {}
    for label, idx in zip(used, _class_indices(y, used)):
        if k is not None and k > len(idx):
            raise ValueError(f"per_label={k} exceeds the {len(idx)} records of label {label!r}")
        chosen[label] = _take(idx, k, rng)
    silos = [np.concatenate([chosen[label] for label in p]) for p in pairs]
    return _build(x, y, silos, "label_pairs", relabel)


def sorted_by_target(x, y, num_silos: int, *, rule: str = "ceil") -> FederatedData:
    """Sorts the records by target and cuts them into contiguous chunks: Lowy & Razaviyayn's insurance silos.

    Silo 0 holds the smallest targets, the last silo the largest. Deterministic (stable sort).

    Args:
      y: ``[n]`` (or ``[n, 1]``) real targets.
      rule: ``"ceil"`` (the authors' code): the first ``num_silos - 1`` silos hold
        ``ceil(n / num_silos)`` records and the last holds the rest; ``"even"``: sizes differ by at
        most one.

    Example:
      >>> import numpy as np
      >>> x, y = np.arange(40, dtype=np.float32).reshape(20, 2), np.arange(20) % 4    # 20 records, 4 classes
      >>> data = sorted_by_target(x, y, 2)
      >>> data.y[0, :data.counts[0]].tolist()                       # the first silo holds the smallest targets
      [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
    """
    x, y = _check_xy(x, y)
    if y.ndim > 2 or (y.ndim == 2 and y.shape[1] != 1):
        raise ValueError(f"sorted_by_target needs a scalar target per record, got y shape {y.shape}")
    n = len(x)
    num_silos = _check_num_silos(num_silos, n)
    order = np.argsort(y.reshape(n), kind="stable")
    if rule == "ceil":
        size = math.ceil(n / num_silos)
        silos = [order[i * size:(i + 1) * size] for i in range(num_silos)]
        if len(silos[-1]) == 0:
            raise ValueError(f"sorted_by_target: with n={n} and num_silos={num_silos} the chunk size "
                             f"ceil(n/num_silos)={size} leaves silo {num_silos - 1} with zero records; "
                             f"use rule='even'")
    elif rule == "even":
        silos = np.array_split(order, num_silos)
    else:
        raise ValueError(f"unknown rule={rule!r} (use 'ceil' or 'even')")
    return _build(x, y, silos, "sorted_by_target")


def dirichlet(x, y, num_silos: int, *, alpha: float, seed: int, min_per_silo: int = 1,
              max_tries: int = 100) -> FederatedData:
    """Label skew: each class is split over the silos in proportions ``p ~ Dirichlet(alpha * 1)``
    (the per-class scheme of Yurochkin et al. 2019 and Wang et al. 2020; silo sizes vary).

    Small ``alpha`` (0.1) gives silos dominated by few classes, large ``alpha`` (100) nearly iid
    silos. Hsu et al. (2019)'s per-silo scheme, equal sizes and a sharper skew at the same ``alpha``,
    is :func:`dirichlet_mix`. Every record is assigned exactly once. Draws are repeated (at most
    ``max_tries`` times) until every silo holds at least ``min_per_silo`` records.

    Example:
      >>> import numpy as np
      >>> x, y = np.arange(40, dtype=np.float32).reshape(20, 2), np.arange(20) % 4    # 20 records, 4 classes
      >>> data = dirichlet(x, y, 3, alpha=0.5, seed=0)               # small alpha: skewed class mixes and sizes
      >>> data.counts.tolist(), int(data.counts.sum())
      ([2, 7, 11], 20)
    """
    x, y = _check_xy(x, y)
    y = _check_labels(y)
    n = len(x)
    num_silos = _check_num_silos(num_silos, n)
    checks.positive_float("alpha", alpha)
    min_per_silo = _check_count("min_per_silo", min_per_silo)
    if num_silos * min_per_silo > n:
        raise ValueError(f"min_per_silo={min_per_silo} x num_silos={num_silos} exceeds the {n} records")
    rng = _rng(seed)
    by_class = _class_indices(y, np.unique(y))
    for _ in range(max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_silos)]
        for idx in by_class:
            idx = rng.permutation(idx)
            p = rng.dirichlet(np.full(num_silos, float(alpha)))
            cuts = (np.cumsum(p)[:-1] * len(idx)).astype(int)
            for i, chunk in enumerate(np.split(idx, cuts)):
                parts[i].append(chunk)
        silos = [np.sort(np.concatenate(p)) for p in parts]
        if min(len(s) for s in silos) >= min_per_silo:
            return _build(x, y, silos, "dirichlet")
    raise ValueError(f"dirichlet: no draw in max_tries={max_tries} gave every silo >= {min_per_silo} "
                     f"records (alpha={alpha}, num_silos={num_silos}, n={n}); raise alpha or max_tries")


def dirichlet_mix(x, y, num_silos: int, *, alpha: float, seed: int) -> FederatedData:
    """Hsu et al. (2019)'s label skew: each silo draws its own class mix ``q_i ~ Dirichlet(alpha * p)``,
    ``p`` the class frequencies of ``y``, and fills equal-sized silos (sizes differ by at most one) with
    records whose labels follow ``q_i``.

    The concentration sums to ``alpha`` over the classes, so with 10 balanced classes ``alpha = 1``
    gives each silo ``q_i ~ Dirichlet(0.1, ..., 0.1)``: most silos are dominated by one or two
    classes. :func:`dirichlet` with the same ``alpha`` is much milder: it splits each class over the
    silos, which leaves each silo's mix close to ``Dirichlet(alpha, ..., alpha)``, i.e. this function's
    ``10 * alpha`` for 10 balanced classes.

    Every record is assigned exactly once. Silo slots are filled in a uniformly random order; each slot
    draws a class from its silo's ``q_i`` restricted to the classes that still have records (the
    distribution of redrawing until an unexhausted class comes up), then takes that class's next record
    of a shuffled order. So late slots of silos whose favourite classes ran out take other classes.

    Example:
      >>> import numpy as np
      >>> x, y = np.arange(40, dtype=np.float32).reshape(20, 2), np.arange(20) % 4    # 20 records, 4 classes
      >>> dirichlet_mix(x, y, 4, alpha=1.0, seed=0).counts.tolist()   # equal sizes, each silo its own mix
      [5, 5, 5, 5]
    """
    x, y = _check_xy(x, y)
    y = _check_labels(y)
    n = len(x)
    num_silos = _check_num_silos(num_silos, n)
    checks.positive_float("alpha", alpha)
    rng = _rng(seed)
    by_class = [rng.permutation(idx) for idx in _class_indices(y, np.unique(y))]
    supply = np.array([len(idx) for idx in by_class])
    mix = rng.dirichlet(float(alpha) * supply / n, size=num_silos)
    sizes = np.array([len(a) for a in np.array_split(np.arange(n), num_silos)])
    slot_silo = rng.permutation(np.repeat(np.arange(num_silos), sizes))
    slot_class = _draw_classes(mix[slot_silo], np.ones(len(supply), bool), rng)
    start, left = 0, supply.copy()
    while True:  # each pass accepts the slots up to the next exhausted class: at most one pass per class
        demand = np.cumsum(slot_class[start:, None] == np.arange(len(supply)), axis=0, dtype=np.int64)
        over = np.flatnonzero((demand > left).any(axis=1))
        if len(over) == 0:
            break
        first = int(over[0])
        if first:
            left = left - demand[first - 1]
        start += first
        open_ = left > 0
        redraw = start + np.flatnonzero(~open_[slot_class[start:]])
        slot_class[redraw] = _draw_classes(mix[slot_silo[redraw]], open_, rng)
    slot_record = np.empty(n, np.int64)
    for c, idx in enumerate(by_class):
        slot_record[slot_class == c] = idx  # the class's records in its shuffled order, slot by slot
    by_silo = np.argsort(slot_silo, kind="stable")
    silos = np.split(slot_record[by_silo], np.cumsum(sizes)[:-1])
    return _build(x, y, [np.sort(s) for s in silos], "dirichlet_mix")


def _draw_classes(mix: np.ndarray, open_: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One class per row of ``mix: float64[m, K]`` restricted to the classes ``open_: bool[K]``, by
    inverse CDF. A row whose open weights all underflowed to 0 draws uniformly among the open classes."""
    weights = mix * open_
    weights = np.where(weights.sum(axis=1, keepdims=True) > 0, weights, open_.astype(np.float64))
    cdf = np.cumsum(weights, axis=1)
    cdf /= cdf[:, -1:]  # the last entry is exactly 1, so a zero-weight class is never drawn
    return (rng.random((len(weights), 1)) >= cdf).sum(axis=1)


def shards(x, y, num_silos: int, shards_per_silo: int, *, seed: int) -> FederatedData:
    """McMahan et al. (2017) pathological non-iid split: sort by label, cut into
    ``num_silos * shards_per_silo`` contiguous shards (sizes differ by at most one), and give each
    silo ``shards_per_silo`` shards chosen at random. Every record is assigned exactly once.

    Example:
      >>> import numpy as np
      >>> x, y = np.arange(40, dtype=np.float32).reshape(20, 2), np.arange(20) % 4    # 20 records, 4 classes
      >>> shards(x, y, 4, 2, seed=0).counts.tolist()               # 8 label-sorted shards, 2 per silo
      [5, 5, 5, 5]
    """
    x, y = _check_xy(x, y)
    y = _check_labels(y)
    n = len(x)
    num_silos = _check_num_silos(num_silos, n)
    shards_per_silo = _check_count("shards_per_silo", shards_per_silo)
    total = num_silos * shards_per_silo
    if total > n:
        raise ValueError(f"num_silos * shards_per_silo = {total} shards exceed the {n} records")
    pieces = np.array_split(np.argsort(y, kind="stable"), total)
    owner = _rng(seed).permutation(total).reshape(num_silos, shards_per_silo)
    silos = [np.sort(np.concatenate([pieces[j] for j in row])) for row in owner]
    return _build(x, y, silos, "shards")


def by_silo_ids(x, y, silo_ids, *, num_silos: int | None = None) -> FederatedData:
    """Explicit assignment: record ``j`` goes to silo ``silo_ids[j]`` (records keep their order).

    Args:
      silo_ids: ``int[n]`` in ``0..num_silos-1``.
      num_silos: default ``max(silo_ids) + 1``; every silo must receive at least one record.

    Example:
      >>> import numpy as np
      >>> x, y = np.arange(40, dtype=np.float32).reshape(20, 2), np.arange(20) % 4    # 20 records, 4 classes
      >>> by_silo_ids(x, y, np.arange(20) % 3).counts.tolist()
      [7, 7, 6]
    """
    x, y = _check_xy(x, y)
    ids = np.asarray(silo_ids)
    if ids.shape != (len(x),):
        raise ValueError(f"silo_ids must have shape ({len(x)},), got {ids.shape}")
    if not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"silo_ids must be integers, got dtype {ids.dtype}")
    if ids.min() < 0:
        raise ValueError(f"silo_ids must be >= 0, got {int(ids.min())}")
    num_silos = int(ids.max()) + 1 if num_silos is None else _check_num_silos(num_silos, len(x))
    if ids.max() >= num_silos:
        raise ValueError(f"silo id {int(ids.max())} is out of range for num_silos={num_silos}")
    return _build(x, y, [np.flatnonzero(ids == i) for i in range(num_silos)], "by_silo_ids")


def train_test_split_per_silo(fd: FederatedData, test_fraction: float, *, seed: int
                              ) -> tuple[FederatedData, FederatedData]:
    """Splits every silo's real records into train and test parts (Lowy & Razaviyayn/002's 80/20 splits).

    Silo ``i`` puts ``ceil(test_fraction * counts[i])`` shuffled records in the test part and the rest
    in the train part (the sizes sklearn's ``train_test_split`` gives: 1548 -> 1238 / 310).

    Returns:
      ``(train, test)``, two :class:`FederatedData` with the same number of silos.

    Raises:
      ValueError: ``test_fraction`` outside (0, 1), or a silo too small to give both parts a record.

    Example:
      >>> import numpy as np
      >>> x, y = np.arange(40, dtype=np.float32).reshape(20, 2), np.arange(20) % 4    # 20 records, 4 classes
      >>> train, test = train_test_split_per_silo(iid(x, y, num_silos=4, seed=0), 0.2, seed=0)
      >>> train.counts.tolist(), test.counts.tolist()
      ([4, 4, 4, 4], [1, 1, 1, 1])
    """
    checks.probability("test_fraction", test_fraction, open_high=True)
    rng = _rng(seed)
    xs, ys, counts = np.asarray(fd.x), np.asarray(fd.y), np.asarray(fd.counts)
    train, test = [], []
    for i in range(fd.num_silos):
        n = int(counts[i])
        xi, yi = xs[i, :n], ys[i, :n]
        n_test = math.ceil(test_fraction * n)
        if n_test < 1 or n - n_test < 1:
            raise ValueError(f"silo {i} has {n} records: test_fraction={test_fraction} leaves "
                             f"{n - n_test} for training and {n_test} for testing")
        perm = rng.permutation(n)
        test.append((xi[perm[:n_test]], yi[perm[:n_test]]))
        train.append((xi[perm[n_test:]], yi[perm[n_test:]]))
    return from_silos(train, dtype=xs.dtype), from_silos(test, dtype=xs.dtype)


def choose_silo_classes(num_silos: int, labels: Sequence, classes_per_silo: int, *, seed: int) -> np.ndarray:
    """Each silo's set of ``classes_per_silo`` labels, drawn uniformly without replacement from
    ``labels`` independently per silo (Huang et al.'s owners hold "at most 8 of the 10 classes").

    Returns:
      ``[num_silos, classes_per_silo]`` labels, each row sorted; pass it to :func:`class_limited` for the
      train split and again for the test split so that both are divided the same way.

    Example:
      >>> choose_silo_classes(3, [0, 1, 2, 3], 2, seed=0).tolist()
      [[2, 3], [0, 1], [0, 3]]
    """
    num_silos = checks.positive_int("num_silos", num_silos)
    labels = np.unique(np.asarray(labels))
    k = checks.positive_int("classes_per_silo", classes_per_silo)
    if k > len(labels):
        raise ValueError(f"classes_per_silo={k} exceeds the {len(labels)} labels {labels.tolist()}")
    rng = _rng(seed)
    return np.stack([np.sort(rng.choice(labels, size=k, replace=False)) for _ in range(num_silos)])


def class_limited(x, y, silo_classes, *, total: int | None = None, seed: int) -> FederatedData:
    """Equal-size silos that each hold records of their own few classes only (Huang et al.'s non-IID owners).

    ``total`` records are dealt to ``num_silos = len(silo_classes)`` silos as evenly as possible (the first
    ``total mod num_silos`` silos get ``ceil(total / num_silos)``, the others the floor: Huang et al.'s
    m = N/n is not an integer for n >= 64). Silo ``i``'s quota is split evenly over its classes
    ``silo_classes[i]`` (remainders to classes in a random order), and each class's quotas are filled by
    drawing that class's records without replacement, so no record goes to two silos. A class whose
    records run out raises ``ValueError`` naming it. A silo's quota for one class is at most
    ``ceil(size / classes_per_silo)``, so ``total <= classes_per_silo * (fewest records of any class -
    num_silos)`` always fits.

    Args:
      x: ``[n, *feature_shape]``; y: ``[n]`` integer labels.
      silo_classes: ``[num_silos, classes_per_silo]`` from :func:`choose_silo_classes` (or any table of
        labels present in ``y``; a row may not repeat a label).
      total: records to deal (default: all ``n``).
      seed: the draw of records (and of which classes get a silo's remainder).

    Example:
      >>> import numpy as np
      >>> x, y = np.arange(40, dtype=np.float32).reshape(20, 2), np.arange(20) % 4    # 20 records, 4 classes
      >>> classes = choose_silo_classes(3, [0, 1, 2, 3], 2, seed=0)
      >>> class_limited(x, y, classes, total=12, seed=0).counts.tolist()
      [4, 4, 4]
    """
    x, y = _check_xy(x, y)
    y = _check_labels(y)
    table = np.asarray(silo_classes)
    if table.ndim != 2 or table.shape[1] == 0:
        raise ValueError(f"silo_classes must be [num_silos, classes_per_silo], got shape {table.shape}")
    num_silos, k = table.shape
    for i, row in enumerate(table):
        if len(np.unique(row)) != k:
            raise ValueError(f"silo_classes row {i} repeats a label: {row.tolist()}")
    total = len(y) if total is None else checks.positive_int("total", total)
    if total > len(y):
        raise ValueError(f"total={total} exceeds the {len(y)} records")
    if total < num_silos:
        raise ValueError(f"total={total} records cannot fill {num_silos} silos")
    rng = _rng(seed)
    sizes = np.full(num_silos, total // num_silos)
    sizes[: total % num_silos] += 1
    quotas: dict = {}  # class -> [(silo, count)]
    for i, (row, size) in enumerate(zip(table, sizes)):
        per_class = np.full(k, size // k)
        per_class[rng.permutation(k)[: size % k]] += 1
        for c, q in zip(row.tolist(), per_class):
            if q:
                quotas.setdefault(c, []).append((i, int(q)))
    silos: list[list[np.ndarray]] = [[] for _ in range(num_silos)]
    for c, pool in zip(sorted(quotas), _class_indices(y, sorted(quotas))):
        demand = sum(q for _, q in quotas[c])
        if demand > len(pool):
            raise ValueError(f"class_limited: class {c!r} has {len(pool)} records but its silos need {demand} "
                             f"(total={total}); lower total")
        drawn = rng.permutation(pool)[:demand]
        start = 0
        for i, q in quotas[c]:
            silos[i].append(drawn[start:start + q])
            start += q
    return _build(x, y, [np.sort(np.concatenate(parts)) for parts in silos], "class_limited")
