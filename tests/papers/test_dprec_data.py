"""Triastcyn et al.'s (DP-REC) datasets (``papers.dprec.data``): the MNIST Dirichlet clients
(Table 2 count statistics), the Fashion-MNIST stand-in for FEMNIST, and the LEAF FEMNIST reader."""
import json

import numpy as np
import pytest

from jaxfl.data import load_mnist
from papers.dprec import data as D


def _padding_is_zero(fd) -> bool:
    mask = np.asarray(fd.mask())
    return not np.asarray(fd.x)[~mask].any() and not np.asarray(fd.y)[~mask].any()


def _pooled_labels(fd):
    return np.concatenate([fd.silo(i)[1] for i in range(fd.num_silos)])


# ------------------------------------------------------------------------------------------------
# MNIST


@pytest.fixture(scope="module")
def mnist():
    return D.mnist_clients()


def test_mnist_shapes_and_counts(mnist):
    train = mnist.train
    assert all(isinstance(a, np.ndarray) for a in train)          # host leaves
    assert train.x.shape[0] == 100 and train.x.shape[2:] == (28, 28, 1) and train.x.dtype == np.float32
    assert mnist.test_x.shape == (10_000, 28, 28, 1) and mnist.test_x.dtype == np.float32
    assert mnist.test_y.shape == (10_000,) and mnist.test_y.dtype == np.int32
    stats = D.client_count_stats(train)
    # Table 2: 100 clients, 50,000 samples, mean 500.00 exactly ...
    assert stats["num_clients"] == 100 and stats["total"] == 50_000 and stats["mean"] == 500.0
    # ... but std 73.10 there; the per-class Dirichlet split gives ~154 (seed 0), recorded as a regression
    assert stats["std"] == pytest.approx(154.0595, abs=1e-3)
    assert np.asarray(train.counts)[:8].tolist() == [602, 312, 366, 323, 453, 411, 496, 387]
    assert mnist.info["counts"] == stats and mnist.info["paper_counts"]["std"] == 73.10
    assert _padding_is_zero(train)


def test_mnist_is_a_partition_of_the_first_50k(mnist):
    x, y = load_mnist("train")
    # every one of the first 50,000 records once: same label multiset and the same pixel total
    np.testing.assert_array_equal(np.bincount(_pooled_labels(mnist.train), minlength=10),
                                  np.bincount(y[:50_000], minlength=10))
    total = float(np.asarray(mnist.train.x).sum(dtype=np.float64))
    assert total == pytest.approx(x[:50_000].astype(np.float64).sum() / 255.0, rel=1e-6)
    # the server's set is the validation split train[50000:], pixels / 255
    np.testing.assert_array_equal(mnist.test_y, y[50_000:])
    np.testing.assert_allclose(mnist.test_x[..., 0], x[50_000:] / np.float32(255.0))
    assert 0.0 <= float(np.asarray(mnist.train.x).min()) and float(np.asarray(mnist.train.x).max()) == 1.0


def test_mnist_label_skew(mnist):
    fd = mnist.train
    props = np.stack([np.bincount(fd.silo(i)[1], minlength=10) / int(fd.counts[i]) for i in range(fd.num_silos)])
    # Dirichlet(1) skew: clients are far from the global ~10% per class
    assert props.max(axis=1).mean() > 0.25


def test_mnist_bad_eval_split():
    with pytest.raises(ValueError, match="eval_split"):
        D.mnist_clients(eval_split="val")
    with pytest.raises(ValueError, match="partition.*'hsu2019'"):
        D.mnist_clients(partition="hsu2019")


def test_mnist_hsu_partition(mnist):
    hsu = D.mnist_clients(partition="hsu")
    stats = D.client_count_stats(hsu.train)
    assert stats["total"] == 50_000 and stats["min"] == stats["max"] == 500  # equal sizes: std 0, not 73.10
    np.testing.assert_array_equal(np.bincount(_pooled_labels(hsu.train), minlength=10),
                                  np.bincount(_pooled_labels(mnist.train), minlength=10))
    assert "Hsu" in hsu.info["partition"] and "not Hsu" in mnist.info["partition"]
    top = [np.bincount(hsu.train.silo(i)[1], minlength=10).max() / 500 for i in range(100)]
    assert np.mean(top) > 0.5  # per-client Dirichlet(0.1, ...) mixes: one class holds most of a client


# ------------------------------------------------------------------------------------------------
# Fashion-MNIST stand-in for FEMNIST


def test_femnist_scale_small_deterministic():
    a = D.femnist_scale_clients(40, seed=3)
    b = D.femnist_scale_clients(40, seed=3)
    c = D.femnist_scale_clients(40, seed=4)
    for u, v in zip(a.train, b.train):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))
    assert not np.array_equal(np.asarray(a.train.counts), np.asarray(c.train.counts))
    stats = a.info["counts"]
    assert stats["num_clients"] == 40 and stats["total"] == 8_000 and stats["mean"] == 200.0
    assert stats["min"] >= D.FEMNIST_SCALE_MIN_RECORDS
    assert a.train.x.shape[2:] == (28, 28, 1) and a.train.x.dtype == np.float32
    assert set(np.unique(_pooled_labels(a.train))) <= set(range(10))
    assert a.test_x.shape == (10_000, 28, 28, 1) and a.test_y.shape == (10_000,)
    assert "Fashion-MNIST" in a.info["note"] and "NOT FEMNIST" in a.info["note"]
    assert _padding_is_zero(a.train)


@pytest.mark.slow      # ~5-9 s: builds the full 300 x ~460 padded set (430 MB)
def test_femnist_scale_default_shape():
    d = D.femnist_scale_clients()
    stats = d.info["counts"]
    assert (stats["num_clients"], stats["total"], stats["mean"]) == (300, 60_000, 200.0)
    # FEMNIST's count std / mean is 78.92 / 201.60 = 0.39; the stand-in's is close (seed 0)
    assert 0.3 < stats["std"] / stats["mean"] < 0.45
    np.testing.assert_array_equal(np.bincount(_pooled_labels(d.train)), np.full(10, 6000))


def test_femnist_scale_bad_sizes():
    with pytest.raises(ValueError, match="exceeds"):
        D.femnist_scale_clients(400, records_per_client=200)
    with pytest.raises(ValueError, match="records_per_client"):
        D.femnist_scale_clients(10, records_per_client=0)


# ------------------------------------------------------------------------------------------------
# LEAF FEMNIST reader


def _leaf_file(path, users):
    """``users``: {name: (x [n, 784], y [n])}."""
    d = {"users": list(users), "num_samples": [len(y) for _, y in users.values()],
         "user_data": {u: {"x": np.asarray(x).tolist(), "y": np.asarray(y).tolist()} for u, (x, y) in users.items()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(d))


def _user(rng, n):
    return rng.uniform(0, 1, (n, 784)).astype(np.float32), rng.integers(0, 62, n)


def test_leaf_reader(tmp_path):
    rng = np.random.default_rng(0)
    w = {name: _user(rng, n) for name, n in (("f0001_01", 5), ("f0002_02", 3), ("f0003_03", 0), ("f0004_04", 7))}
    t = {name: _user(rng, n) for name, n in (("f0001_01", 2), ("f0002_02", 1), ("f0004_04", 1))}
    _leaf_file(tmp_path / "train" / "all_data_1_train.json", {k: w[k] for k in ("f0004_04",)})
    _leaf_file(tmp_path / "train" / "all_data_0_train.json", {k: w[k] for k in ("f0001_01", "f0002_02", "f0003_03")})
    _leaf_file(tmp_path / "test" / "all_data_0_test.json", t)
    d = D.load_leaf_femnist(tmp_path)
    assert d.info["users"] == ["f0001_01", "f0002_02", "f0004_04"]       # file-name order, empty writer dropped
    assert d.info["dropped_users"] == ["f0003_03"]
    assert np.asarray(d.train.counts).tolist() == [5, 3, 7] and d.train.x.shape == (3, 7, 28, 28, 1)
    for i, u in enumerate(d.info["users"]):
        xi, yi = d.train.silo(i)
        np.testing.assert_allclose(xi.reshape(len(yi), 784), w[u][0])
        np.testing.assert_array_equal(yi, w[u][1])
    assert d.test_x.shape == (4, 28, 28, 1) and d.test_x.dtype == np.float32 and d.test_y.dtype == np.int32
    np.testing.assert_array_equal(d.test_y, np.concatenate([t[u][1] for u in t]))
    assert d.info["counts"]["total"] == 15 and d.info["paper_counts"]["num_clients"] == 3500


def test_leaf_reader_errors(tmp_path):
    with pytest.raises(ValueError, match=str(tmp_path / "train")):
        D.load_leaf_femnist(tmp_path)
    rng = np.random.default_rng(1)
    _leaf_file(tmp_path / "train" / "a.json", {"u": _user(rng, 2)})
    with pytest.raises(ValueError, match=str(tmp_path / "test")):
        D.load_leaf_femnist(tmp_path)
    x, y = _user(rng, 2)
    _leaf_file(tmp_path / "test" / "a.json", {"u": (x[:, :100], y)})
    with pytest.raises(ValueError, match="784"):
        D.load_leaf_femnist(tmp_path)
    _leaf_file(tmp_path / "test" / "a.json", {"u": (x, np.array([3, 62]))})
    with pytest.raises(ValueError, match="labels"):
        D.load_leaf_femnist(tmp_path)
