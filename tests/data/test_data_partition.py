"""Partitioners: every record placed as promised, padding masked, determinism, errors."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from jaxfl.data import (EVEN_ODD_PAIRS, FederatedData, by_silo_ids, choose_silo_classes, class_limited, dirichlet,
                        dirichlet_mix, iid, label_pairs, load_mnist, one_class_per_silo, shards, sorted_by_target,
                        train_test_split_per_silo)

SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def records(n, num_classes, seed=0):
    """``x[:, 0]`` is the record id, so a silo's rows name the records it holds; ``y`` labels."""
    rng = np.random.default_rng(seed)
    x = np.stack([np.arange(n), rng.normal(size=n)], axis=1).astype(np.float32)
    y = rng.integers(0, num_classes, size=n).astype(np.int32)
    return x, y


def host_silos(fd: FederatedData):
    """Each silo's real ``(x, y)`` rows as numpy arrays (sliced on the host: no per-shape compiles)."""
    fx, fy, counts = np.asarray(fd.x), np.asarray(fd.y), np.asarray(fd.counts)
    return [(fx[i, :c], fy[i, :c]) for i, c in enumerate(counts)]


def silo_ids(fd: FederatedData):
    """Record ids held by each silo (padding removed)."""
    return [xi[:, 0].astype(int) for xi, _ in host_silos(fd)]


def check_layout(fd: FederatedData, x, y):
    """Padding rows are zero; each real row carries its own record's features and label."""
    counts = np.asarray(fd.counts)
    assert counts.dtype == np.int32 and (counts >= 1).all()
    mask = np.arange(fd.max_records)[None] < counts[:, None]
    fx, fy = np.asarray(fd.x), np.asarray(fd.y)
    assert not fx[~mask].any() and not fy[~mask].any()
    assert fd.max_records == counts.max()
    for ids, (xi, yi) in zip(silo_ids(fd), host_silos(fd)):
        np.testing.assert_array_equal(xi, np.asarray(x, np.float32)[ids])
        np.testing.assert_array_equal(yi, y[ids].astype(yi.dtype))


def assert_same(a: FederatedData, b: FederatedData):
    for u, v in zip(a, b):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


def assert_exactly_once(fd, n):
    np.testing.assert_array_equal(np.sort(np.concatenate(silo_ids(fd))), np.arange(n))


sizes = st.integers(1, 40).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n)))


@SETTINGS
@given(sizes, st.integers(1, 4), st.integers(0, 2**31))
def test_iid_properties(n_k, num_classes, seed):
    (n, k), (x, y) = n_k, records(n_k[0], num_classes, seed)
    fd = iid(x, y, k, seed=seed)
    assert fd.num_silos == k and int(fd.counts.sum()) == n
    assert int(fd.counts.max()) - int(fd.counts.min()) <= 1
    assert_exactly_once(fd, n)
    check_layout(fd, x, y)
    assert_same(fd, iid(x, y, k, seed=seed))


@SETTINGS
@given(st.integers(1, 6), st.integers(3, 30), st.integers(1, 4), st.sampled_from([0.5, 1.0, 10.0]),
       st.integers(0, 2**31))
def test_dirichlet_properties(k, per_silo, num_classes, alpha, seed):
    n = k * per_silo
    x, y = records(n, num_classes, seed)
    fd = dirichlet(x, y, k, alpha=alpha, seed=seed, max_tries=1000)
    assert fd.num_silos == k and int(fd.counts.min()) >= 1
    assert_exactly_once(fd, n)
    check_layout(fd, x, y)
    assert_same(fd, dirichlet(x, y, k, alpha=alpha, seed=seed, max_tries=1000))


@SETTINGS
@given(sizes, st.integers(1, 4), st.sampled_from([1e-6, 0.5, 1.0, 1e6]), st.integers(0, 2**31))
def test_dirichlet_mix_properties(n_k, num_classes, alpha, seed):
    (n, k), (x, y) = n_k, records(n_k[0], num_classes, seed)
    fd = dirichlet_mix(x, y, k, alpha=alpha, seed=seed)
    assert fd.num_silos == k and int(fd.counts.max()) - int(fd.counts.min()) <= 1
    assert_exactly_once(fd, n)
    check_layout(fd, x, y)
    assert_same(fd, dirichlet_mix(x, y, k, alpha=alpha, seed=seed))


def mean_simpson(fd: FederatedData, num_classes: int) -> float:
    """Mean over silos of sum_k share_k^2, the chance that two of a silo's records share a label."""
    return float(np.mean([((np.bincount(yi, minlength=num_classes) / len(yi)) ** 2).sum()
                          for _, yi in host_silos(fd)]))


def test_dirichlet_mix_is_hsu_et_al_per_silo_skew():
    """Closed forms for m records per silo drawn from a mix q: E[sum share^2] = E[sum q^2] + (1 - E[sum q^2]) / m.
    Hsu et al.'s q ~ Dir(alpha p), p uniform over K = 10, alpha = 1: E[sum q^2] = (alpha/K + 1)/(alpha + 1) = 0.55,
    lowered a little by the classes that run out late (their slots take other classes). The per-class split
    (dirichlet) leaves q close to Dir(alpha 1_K): (alpha + 1)/(K alpha + 1) = 0.18. alpha -> inf: q = p, 0.1."""
    x, y = records(10_000, 10, seed=1)
    p2 = float(((np.bincount(y) / len(y)) ** 2).sum())
    flat = mean_simpson(dirichlet_mix(x, y, 200, alpha=1e6, seed=0), 10)
    assert abs(flat - (p2 + (1 - p2) / 50)) < 0.005, flat
    hsu = np.mean([mean_simpson(dirichlet_mix(x, y, 200, alpha=1.0, seed=s), 10) for s in range(3)])
    per_class = np.mean([mean_simpson(dirichlet(x, y, 200, alpha=1.0, seed=s), 10) for s in range(3)])
    assert 0.45 < hsu < 0.55 + 0.45 / 50 + 0.01, hsu
    assert abs(per_class - (2 / 11 + (9 / 11) / 50)) < 0.03, per_class


@SETTINGS
@given(st.integers(1, 5), st.integers(1, 3), st.integers(0, 10), st.integers(0, 2**31))
def test_shards_properties(k, per, extra, seed):
    n = k * per + extra
    x, y = records(n, 3, seed)
    fd = shards(x, y, k, per, seed=seed)
    assert_exactly_once(fd, n)
    check_layout(fd, x, y)
    assert_same(fd, shards(x, y, k, per, seed=seed))
    shard = n // (k * per)
    assert set(np.asarray(fd.counts)) <= set(range(per * shard, per * (shard + 1) + 1))


@SETTINGS
@given(sizes, st.integers(0, 2**31))
def test_by_silo_ids_properties(n_k, seed):
    n, k = n_k
    x, y = records(n, 3, seed)
    ids = np.random.default_rng(seed).permutation(np.arange(n) % k)
    fd = by_silo_ids(x, y, ids)
    np.testing.assert_array_equal(np.asarray(fd.counts), np.bincount(ids, minlength=k))
    for i, held in enumerate(silo_ids(fd)):
        np.testing.assert_array_equal(held, np.flatnonzero(ids == i))   # original order kept
    check_layout(fd, x, y)


@SETTINGS
@given(sizes, st.sampled_from(["ceil", "even"]), st.integers(0, 2**31))
def test_sorted_by_target_properties(n_k, rule, seed):
    n, k = n_k
    rng = np.random.default_rng(seed)
    x = np.stack([np.arange(n), rng.normal(size=n)], axis=1)
    y = rng.normal(size=n).round(1)   # ties included
    if rule == "ceil" and math.ceil(n / k) * (k - 1) >= n:
        with pytest.raises(ValueError, match="zero records"):
            sorted_by_target(x, y, k, rule=rule)
        return
    fd = sorted_by_target(x, y, k, rule=rule)
    assert_exactly_once(fd, n)
    check_layout(fd, x, y)
    ys = [yi for _, yi in host_silos(fd)]
    for a, b in zip(ys, ys[1:]):
        assert a.max() <= b.min()
    counts = np.asarray(fd.counts)
    if rule == "ceil":
        assert (counts[:-1] == math.ceil(n / k)).all()
    else:
        assert counts.max() - counts.min() <= 1


@SETTINGS
@given(st.integers(2, 40), st.integers(1, 4), st.one_of(st.none(), st.integers(1, 5)), st.integers(0, 2**31))
def test_one_class_per_silo_properties(n, num_classes, cap, seed):
    x, y = records(n, num_classes, seed)
    fd = one_class_per_silo(x, y, max_per_silo=cap, seed=seed)
    classes = np.unique(y)
    assert fd.num_silos == len(classes)
    for i, c in enumerate(classes):
        xi, yi = host_silos(fd)[i]
        assert set(yi.tolist()) == {c}
        full = np.flatnonzero(y == c)
        assert len(yi) == (len(full) if cap is None else min(cap, len(full)))
        assert set(xi[:, 0].astype(int)) <= set(full)
    check_layout(fd, x, y)
    assert_same(fd, one_class_per_silo(x, y, max_per_silo=cap, seed=seed))
    if cap is not None:   # seed=None: the first `cap` records of each class
        first = one_class_per_silo(x, y, max_per_silo=cap)
        for i, c in enumerate(classes):
            np.testing.assert_array_equal(silo_ids(first)[i], np.flatnonzero(y == c)[:cap])


@SETTINGS
@given(st.integers(1, 4), st.integers(0, 2**31))
def test_train_test_split_per_silo_properties(k, seed):
    x, y = records(12 * k + 7, 3, seed)
    fd = iid(x, y, k, seed=seed)
    train, test = train_test_split_per_silo(fd, 0.2, seed=seed)
    for i in range(k):
        n = int(fd.counts[i])
        assert int(test.counts[i]) == math.ceil(0.2 * n) and int(train.counts[i]) == n - math.ceil(0.2 * n)
        both = np.concatenate([silo_ids(train)[i], silo_ids(test)[i]])
        np.testing.assert_array_equal(np.sort(both), np.sort(silo_ids(fd)[i]))
    check_layout(train, x, y)
    check_layout(test, x, y)
    for a, b in zip((train, test), train_test_split_per_silo(fd, 0.2, seed=seed)):
        assert_same(a, b)


def test_label_pairs_default_is_seed_000_layout():
    y = np.repeat(np.arange(10), [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]).astype(np.int32)
    x = np.arange(len(y), dtype=np.float32)[:, None]
    fd = label_pairs(x, y, per_label=4)
    assert fd.num_silos == 25 and (np.asarray(fd.counts) == 8).all()
    for i, (e, o) in enumerate(EVEN_ODD_PAIRS):
        xi, yi = host_silos(fd)[i]
        np.testing.assert_array_equal(yi, [e] * 4 + [o] * 4)   # original labels, even part first
        # seed=None: the first 4 records of each digit, as in the authors' code
        np.testing.assert_array_equal(xi[:, 0], np.concatenate([np.flatnonzero(y == e)[:4],
                                                                np.flatnonzero(y == o)[:4]]))
    rel = label_pairs(x, y, pairs=[(0, 1), (2, 3)], per_label=3, seed=5,
                      relabel=lambda t: (t % 2 == 0).astype(np.int32))
    np.testing.assert_array_equal(np.asarray(rel.y), [[1, 1, 1, 0, 0, 0]] * 2)
    assert_same(rel, label_pairs(x, y, pairs=[(0, 1), (2, 3)], per_label=3, seed=5,
                                 relabel=lambda t: (t % 2 == 0).astype(np.int32)))
    # a digit's chosen records are the same in every silo using it
    first = {int(v) for v in host_silos(rel)[0][0][:3, 0]}
    assert first <= set(np.flatnonzero(y == 0))


def test_seed_000_mnist_and_insurance_sizes(shared):
    shared("mnist/train-labels-idx1-ubyte.gz")
    _, y = load_mnist("train")
    n_m = int(np.bincount(y).min() / 7)
    assert n_m == 774
    fd = label_pairs(np.arange(len(y), dtype=np.float32)[:, None], y, per_label=n_m)
    assert fd.num_silos == 25 and (np.asarray(fd.counts) == 1548).all()
    train, test = train_test_split_per_silo(fd, 0.2, seed=1)
    assert (np.asarray(train.counts) == 1238).all() and (np.asarray(test.counts) == 310).all()
    # insurance, N = 10: nine silos of ceil(1338/10) = 134 records and a last one of 132
    ins = sorted_by_target(np.zeros((1338, 1)), np.arange(1338.0)[::-1], 10)
    assert np.asarray(ins.counts).tolist() == [134] * 9 + [132]


def test_dirichlet_skew_grows_as_alpha_shrinks():
    x, y = records(3000, 10, seed=1)
    glob = np.bincount(y, minlength=10) / len(y)

    def mean_tv(alpha):
        fd = dirichlet(x, y, 10, alpha=alpha, seed=0)
        tv = [0.5 * np.abs(np.bincount(host_silos(fd)[i][1], minlength=10) / int(fd.counts[i]) - glob).sum()
              for i in range(10)]
        return float(np.mean(tv))

    skewed, flat = mean_tv(0.05), mean_tv(1000.0)
    assert skewed > 0.6 and flat < 0.1, (skewed, flat)


def test_padding_is_masked():
    x, y = records(10, 2)
    fd = by_silo_ids(x, y, np.array([0] * 7 + [1] * 3))
    np.testing.assert_array_equal(np.asarray(fd.mask()), np.arange(7)[None] < np.array([[7], [3]]))
    assert not np.asarray(fd.x)[1, 3:].any()


def test_shards_give_few_labels_per_silo():
    x, y = records(1000, 10, seed=2)
    fd = shards(x, y, 10, 2, seed=0)
    assert all(len(set(host_silos(fd)[i][1].tolist())) <= 4 for i in range(10))


@pytest.mark.parametrize("k", [0, -1, 2.5, 11])
def test_bad_num_silos(k):
    x, y = records(10, 2)
    for fn in (lambda: iid(x, y, k, seed=0), lambda: dirichlet(x, y, k, alpha=1.0, seed=0),
               lambda: dirichlet_mix(x, y, k, alpha=1.0, seed=0),
               lambda: shards(x, y, k, 1, seed=0), lambda: sorted_by_target(x, y, k)):
        with pytest.raises(ValueError, match=f"num_silos.*{k}"):
            fn()


def test_bad_inputs_name_the_value():
    x, y = records(10, 2)
    with pytest.raises(ValueError, match="alpha.*0"):
        dirichlet(x, y, 2, alpha=0.0, seed=0)
    with pytest.raises(ValueError, match="alpha.*-1"):
        dirichlet(x, y, 2, alpha=-1, seed=0)
    with pytest.raises(ValueError, match="alpha.*nan"):
        dirichlet(x, y, 2, alpha=float("nan"), seed=0)
    with pytest.raises(ValueError, match="alpha.*0"):
        dirichlet_mix(x, y, 2, alpha=0.0, seed=0)
    with pytest.raises(ValueError, match="1-D labels"):
        dirichlet_mix(x, np.stack([y, y], 1), 2, alpha=1.0, seed=0)
    with pytest.raises(ValueError, match="unknown class 7"):
        one_class_per_silo(x, y, classes=[0, 7])
    with pytest.raises(ValueError, match="unknown class 9"):
        label_pairs(x, y, pairs=[(0, 9)])
    with pytest.raises(ValueError, match="per_label=9 exceeds"):
        label_pairs(np.zeros((4, 1)), np.array([0, 0, 1, 1]), pairs=[(0, 1)], per_label=9)
    with pytest.raises(ValueError, match="silo 1 would have zero records"):
        by_silo_ids(x, y, np.array([0] * 5 + [2] * 5))
    with pytest.raises(ValueError, match="silo id 3 is out of range"):
        by_silo_ids(x, y, np.array([0] * 5 + [3] * 5), num_silos=2)
    with pytest.raises(ValueError, match="silo_ids must be >= 0, got -1"):
        by_silo_ids(x, y, np.array([0] * 9 + [-1]))
    with pytest.raises(ValueError, match="zero records"):
        sorted_by_target(x, y.astype(float), 6)   # ceil(10/6) = 2: five silos take everything
    with pytest.raises(ValueError, match="seed=None"):
        iid(x, y, 2, seed=None)
    with pytest.raises(ValueError, match="test_fraction.*1.0"):
        train_test_split_per_silo(iid(x, y, 2, seed=0), 1.0, seed=0)
    with pytest.raises(ValueError, match="silo 0 has 1 records"):
        train_test_split_per_silo(by_silo_ids(x, y, np.array([0] + [1] * 9)), 0.2, seed=0)


def test_nan_and_shape_mismatch_rejected():
    x, y = records(10, 2)
    bad = x.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="x has NaN or inf at record 3"):
        iid(bad, y, 2, seed=0)
    with pytest.raises(ValueError, match="x has 10 records but y has 9"):
        iid(x, y[:9], 2, seed=0)
    with pytest.raises(ValueError, match="1-D labels"):
        dirichlet(x, np.stack([y, y], 1), 2, alpha=1.0, seed=0)
    with pytest.raises(ValueError, match="silo_ids must have shape"):
        by_silo_ids(x, y, np.zeros(9, int))
    with pytest.raises(ValueError, match="no records"):
        iid(x[:0], y[:0], 1, seed=0)


# ------------------------------------------------------------------------------------------------
# class_limited (Huang et al.'s owners)


@SETTINGS
@given(n=st.integers(600, 1500), silos=st.integers(1, 40), k=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_class_limited_deals_equal_sizes_from_each_silos_own_classes(n, silos, k, seed):
    """Sizes floor/ceil(total / silos) (the larger first), each silo's labels within its classes and spread
    over them as evenly as its quota allows, no record twice; total <= k * (smallest class - silos) always fits
    (a silo's per-class quota is at most ceil(size / k))."""
    x, y = records(n, 6, seed)
    classes = choose_silo_classes(silos, np.unique(y), k, seed=seed)
    assert classes.shape == (silos, k) and all(len(set(row)) == k for row in classes)
    total = max(silos, min(n, k * (int(np.bincount(y).min()) - silos)))
    fd = class_limited(x, y, classes, total=total, seed=seed)
    check_layout(fd, x, y)
    counts = np.asarray(fd.counts)
    assert counts.sum() == total and counts.max() - counts.min() <= 1
    assert list(counts) == sorted(counts, reverse=True)
    ids = np.concatenate(silo_ids(fd))
    assert len(np.unique(ids)) == len(ids)
    for (xi, yi), row, m in zip(host_silos(fd), classes, counts):
        assert set(yi.tolist()) <= set(row.tolist())
        per_class = np.array([np.sum(yi == c) for c in row])
        assert per_class.max() - per_class.min() <= 1 and per_class.sum() == m


def test_class_limited_is_reproducible_and_reuses_the_classes_for_a_test_split():
    x, y = records(3000, 10, 1)
    xt, yt = records(1000, 10, 2)
    classes = choose_silo_classes(12, np.arange(10), 8, seed=5)
    a = class_limited(x, y, classes, total=2000, seed=3)
    b = class_limited(x, y, classes, total=2000, seed=3)
    np.testing.assert_array_equal(np.asarray(a.x), np.asarray(b.x))
    test = class_limited(xt, yt, classes, total=500, seed=4)
    for (_, yi), (_, yti), row in zip(host_silos(a), host_silos(test), classes):
        assert set(yi.tolist()) | set(yti.tolist()) <= set(row.tolist())
    assert not np.array_equal(np.asarray(class_limited(x, y, classes, total=2000, seed=4).x), np.asarray(a.x))


def test_class_limited_names_bad_input():
    x, y = records(200, 4, 0)
    rows = np.array([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="class 0 has"):
        class_limited(x, y, np.array([[0], [0]]), total=200, seed=0)
    with pytest.raises(ValueError, match="repeats a label"):
        class_limited(x, y, np.array([[0, 0]]), seed=0)
    with pytest.raises(ValueError, match="total=300 exceeds"):
        class_limited(x, y, rows, total=300, seed=0)
    with pytest.raises(ValueError, match="cannot fill"):
        class_limited(x, y, np.zeros((3, 1), int), total=2, seed=0)
    with pytest.raises(ValueError, match="unknown class 7"):
        class_limited(x, y, np.array([[7]]), total=10, seed=0)
    with pytest.raises(ValueError, match="classes_per_silo=5 exceeds"):
        choose_silo_classes(3, np.arange(4), 5, seed=0)
