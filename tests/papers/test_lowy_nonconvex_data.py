"""Lowy et al.'s datasets (``papers.lowy_nonconvex.data``): shapes, counts, labels,
normalisation, determinism per trial."""
import numpy as np
import pytest

from jaxfl.data import load_breast_cancer, load_cifar10_subset
from papers.lowy_convex import data as C
from papers.lowy_nonconvex import data as D

SUBSET_TRAIN_COUNTS = [396, 366, 420, 384, 422, 393, 414, 385, 407, 413]   # shared/data MANIFEST
SUBSET_TEST_COUNTS = [103, 89, 100, 103, 90, 86, 112, 102, 106, 109]
PCA_FIT = 1000      # quick PCA: the silos do not depend on it


def _silos(fd):
    return [fd.silo(i) for i in range(fd.num_silos)]


def _same(a, b) -> bool:
    return (np.array_equal(np.asarray(a.train.x), np.asarray(b.train.x))
            and np.array_equal(np.asarray(a.train.y), np.asarray(b.train.y))
            and np.array_equal(np.asarray(a.train.counts), np.asarray(b.train.counts))
            and np.array_equal(a.test_x, b.test_x) and np.array_equal(a.test_y, b.test_y))


def _padding_is_zero(fd) -> bool:
    mask = np.asarray(fd.mask())
    return not np.asarray(fd.x)[~mask].any() and not np.asarray(fd.y)[~mask].any()


# ------------------------------------------------------------------------------------------------
# MNIST


@pytest.fixture(scope="module")
def mnist():
    return {t: D.mnist_trial(t, pca_fit_records=PCA_FIT) for t in (0, 1)}


def test_mnist_shapes_and_counts(mnist):
    d = mnist[0]
    assert d.train.x.shape == (25, 1238, 50) and d.train.num_silos == 25
    assert np.asarray(d.train.counts).tolist() == [1238] * 25
    assert d.test_x.shape == (7750, 50) and d.test_y.shape == (7750,) and d.info["test_records"] == 7750
    assert d.lipschitz is None
    np.testing.assert_allclose(d.deltas, np.full(25, 1.0 / 1238 ** 2))
    assert d.train.x.dtype == np.float32 and d.test_x.dtype == np.float32


def test_mnist_labels_even_is_one(mnist):
    d = mnist[0]
    assert set(np.unique(d.test_y).tolist()) == {0, 1}
    # each silo holds 774 images of its even digit (label 1) and 774 of its odd digit; the test part
    # is 310 records of the silo, so train ones + test ones = 774 per silo
    test_ones = d.test_y.reshape(25, 310).sum(axis=1)
    for i, (x, y) in enumerate(_silos(d.train)):
        assert set(np.unique(y).tolist()) == {0, 1}
        assert int(y.sum()) + int(test_ones[i]) == 774


def test_mnist_is_seed_000s_silos(mnist):
    convex = C.mnist_trial(0, pca_fit_records=PCA_FIT)
    assert _same(convex, mnist[0]) and convex.lipschitz is not None
    np.testing.assert_array_equal(convex.deltas, mnist[0].deltas)


def test_mnist_deterministic_per_trial(mnist):
    assert _same(D.mnist_trial(1, pca_fit_records=PCA_FIT), mnist[1])
    assert not _same(mnist[0], mnist[1])


# ------------------------------------------------------------------------------------------------
# CIFAR-10


@pytest.fixture(scope="module")
def cifar():
    return D.cifar10_trial(0)


def test_cifar_subset_silos_are_the_manifest_classes(cifar):
    assert cifar.train.num_silos == 10
    assert np.asarray(cifar.train.counts).tolist() == SUBSET_TRAIN_COUNTS
    assert cifar.train.x.shape == (10, 422, 32, 32, 3) and cifar.train.x.dtype == np.float32
    for c, (x, y) in enumerate(_silos(cifar.train)):
        assert np.unique(y).tolist() == [c]
    assert _padding_is_zero(cifar.train)
    np.testing.assert_allclose(cifar.deltas, 1.0 / np.array(SUBSET_TRAIN_COUNTS, np.float64) ** 2)
    assert cifar.lipschitz is None


def test_cifar_subset_test_set(cifar):
    assert cifar.test_x.shape == (1000, 32, 32, 3) and cifar.test_x.dtype == np.float32
    assert cifar.test_y.dtype == np.int32
    assert np.bincount(cifar.test_y, minlength=10).tolist() == SUBSET_TEST_COUNTS
    assert cifar.test_y[:10].tolist() == [3, 8, 8, 0, 6, 6, 1, 6, 3, 1]      # test_batch's first labels
    assert cifar.info["test_records"] == 1000


def test_cifar_info(cifar):
    assert cifar.info["source"] == "cifar10-subset"
    note = cifar.info["note"]
    assert isinstance(note, str) and "\n" not in note and "1000" in note and "10k" in note
    # the subset's channel means are close to the full training set's (0.4915, 0.4823, 0.4468)
    np.testing.assert_allclose(cifar.info["channel_mean"], [0.4915, 0.4823, 0.4468], atol=0.005)
    np.testing.assert_allclose(cifar.info["channel_std"], [0.2470, 0.2435, 0.2616], atol=0.005)


def test_cifar_normalisation(cifar):
    x = np.concatenate([x for x, _ in _silos(cifar.train)]).reshape(-1, 3).astype(np.float64)
    np.testing.assert_allclose(x.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(x.std(axis=0), 1.0, atol=1e-5)
    # the images are the loader's, in order, with the training statistics applied (test set too)
    raw_x, raw_y = load_cifar10_subset("train")
    mean, std = np.array(cifar.info["channel_mean"]), np.array(cifar.info["channel_std"])
    first_frog = np.flatnonzero(raw_y == 6)[0]
    np.testing.assert_allclose(cifar.train.silo(6)[0][0], (raw_x[first_frog] / 255.0 - mean) / std, atol=1e-5)
    raw_test, _ = load_cifar10_subset("test")
    np.testing.assert_allclose(cifar.test_x[0], (raw_test[0] / 255.0 - mean) / std, atol=1e-5)


def test_cifar_subset_per_silo_draws_per_trial(cifar):
    a, a2, b = D.cifar10_trial(0, per_silo=50), D.cifar10_trial(0, per_silo=50), D.cifar10_trial(1, per_silo=50)
    assert np.asarray(a.train.counts).tolist() == [50] * 10 and a.train.x.shape[1] == 50
    assert [np.unique(y).tolist() for _, y in _silos(a.train)] == [[c] for c in range(10)]
    assert _same(a, a2) and not _same(a, b)
    np.testing.assert_array_equal(a.test_y, cifar.test_y)
    # the whole subset does not depend on the trial
    assert _same(cifar, D.cifar10_trial(3))


def test_cifar_bad_source():
    with pytest.raises(ValueError, match="source"):
        D.cifar10_trial(0, source="imagenet")


def test_cifar_full_source_draws_1000_per_class(monkeypatch):
    """The ``full`` path with a fake loader (the official archive is not available offline)."""
    rng = np.random.default_rng(0)
    fake = {"train": (rng.integers(0, 256, (10_100, 32, 32, 3), dtype=np.uint8), np.repeat(np.arange(10), 1010)),
            "test": (rng.integers(0, 256, (30, 32, 32, 3), dtype=np.uint8), np.arange(30) % 10)}
    calls = []

    def load_cifar10(split, *, data_dir=None, download=False):
        calls.append((split, download))
        x, y = fake[split]
        return x, y.astype(np.int32)

    monkeypatch.setattr(D, "load_cifar10", load_cifar10)
    d = D.cifar10_trial(0, source="full", download=True)
    assert sorted(calls) == [("test", True), ("train", True)]
    assert np.asarray(d.train.counts).tolist() == [1000] * 10
    assert [np.unique(y).tolist() for _, y in _silos(d.train)] == [[c] for c in range(10)]
    assert d.test_x.shape == (30, 32, 32, 3) and d.info["source"] == "cifar10" and "note" not in d.info
    # drawn without replacement: no image twice in a silo
    x0 = d.train.silo(0)[0].reshape(1000, -1)
    assert len(np.unique(x0, axis=0)) == 1000
    small = [D.cifar10_trial(t, source="full", per_silo=7) for t in (0, 0, 1)]
    assert np.asarray(small[0].train.counts).tolist() == [7] * 10
    assert _same(small[0], small[1]) and not _same(small[0], small[2])


# ------------------------------------------------------------------------------------------------
# WBCD


@pytest.fixture(scope="module")
def wbcd():
    return {t: D.wbcd_trial(t) for t in (0, 1)}


def test_wbcd_silos(wbcd):
    d = wbcd[0]
    assert d.train.num_silos == 2 and d.train.x.shape == (2, 285, 30)
    counts = np.asarray(d.train.counts).tolist()
    assert counts == [169, 285]                            # 212 - ceil(42.4), 357 - ceil(71.4)
    assert abs(sum(counts) - 0.8 * 569) < 2
    assert [np.unique(y).tolist() for _, y in _silos(d.train)] == [[1], [0]]
    assert d.test_x.shape == (115, 30) and np.bincount(d.test_y).tolist() == [72, 43]
    assert d.lipschitz is None and d.info["source"] == "wbcd"
    np.testing.assert_allclose(d.deltas, [1 / 169 ** 2, 1 / 285 ** 2])
    assert _padding_is_zero(d.train)
    assert d.train.x.dtype == np.float32 and d.test_x.dtype == np.float32 and d.test_y.dtype == np.int32


def test_wbcd_label_one_is_malignant(wbcd):
    """scikit-learn codes 0 = malignant (212 records); malignant tumours have the larger mean radius."""
    x, y = load_breast_cancer()
    assert int((y == 0).sum()) == 212
    d = wbcd[0]
    (x_m, _), (x_b, _) = _silos(d.train)
    assert x_m[:, 0].mean() > x_b[:, 0].mean()               # feature 0 = mean radius (scale > 0)
    assert int(d.test_y.sum()) == 43                          # ceil(0.2 * 212) malignant test records


def test_wbcd_standardised_with_pooled_training_stats(wbcd):
    d = wbcd[0]
    x = np.concatenate([x for x, _ in _silos(d.train)]).astype(np.float64)
    np.testing.assert_allclose(x.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(x.std(axis=0), 1.0, atol=1e-5)
    # not per silo: each one-class silo is off-centre
    assert np.abs(_silos(d.train)[0][0].mean(axis=0)).max() > 0.5
    # the test set uses the training statistics: close to, but not exactly, standard
    assert np.abs(d.test_x.mean(axis=0)).max() < 0.5 and np.abs(d.test_x.mean(axis=0)).max() > 1e-4


def test_wbcd_split_partitions_the_data(wbcd):
    """Train + test of one trial is the whole data set (a bijection, up to the affine rescaling)."""
    x, _ = load_breast_cancer()
    d = wbcd[0]
    allx = np.concatenate([x for x, _ in _silos(d.train)] + [d.test_x]).astype(np.float64)
    assert len(allx) == 569
    # every feature of train + test is one increasing affine image of the raw column (the same records)
    for j in (0, 7, 29):
        a, b = np.sort(allx[:, j]), np.sort(x[:, j].astype(np.float64))
        slope, intercept = np.polyfit(a, b, 1)
        assert slope > 0
        np.testing.assert_allclose(slope * a + intercept, b, rtol=1e-4, atol=1e-4 * np.abs(b).max())


def test_wbcd_deterministic_per_trial(wbcd):
    assert _same(D.wbcd_trial(0), wbcd[0])
    assert not _same(wbcd[0], wbcd[1])
    assert np.asarray(wbcd[1].train.counts).tolist() == [169, 285]
