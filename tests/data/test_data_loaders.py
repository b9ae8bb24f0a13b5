"""Loaders against the real files (MANIFEST.md figures), and the parsers on synthetic input."""
import io
import pickle
import tarfile

import numpy as np
import pytest

from jaxfl.data import (DATASETS, OBESITY_CLASSES, insurance_feature_names, load, load_breast_cancer,
                        load_cifar10, load_cifar10_subset, load_fashion_mnist, load_insurance, load_libsvm,
                        load_mnist, load_obesity, obesity_feature_names, read_idx)
from jaxfl.data.loaders import read_cifar10_archive

MNIST_TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]


def test_mnist(shared):
    shared("mnist/train-images-idx3-ubyte.gz")
    x, y = load_mnist("train")
    assert x.shape == (60000, 28, 28) and x.dtype == np.uint8 and y.dtype == np.int32
    assert np.bincount(y).tolist() == MNIST_TRAIN_COUNTS
    assert y[:10].tolist() == [5, 0, 4, 1, 9, 2, 1, 3, 1, 4]
    xt, yt = load("mnist", "test")
    assert xt.shape == (10000, 28, 28) and yt[:5].tolist() == [7, 2, 1, 0, 4]
    assert x.max() == 255 and x.flags.writeable


def test_fashion_mnist(shared):
    shared("fashion-mnist/train-images-idx3-ubyte.gz")
    x, y = load_fashion_mnist("train")
    assert x.shape == (60000, 28, 28) and x.dtype == np.uint8
    assert (np.bincount(y) == 6000).all()
    xt, yt = load("fashion_mnist", "test")
    assert xt.shape == (10000, 28, 28) and (np.bincount(yt) == 1000).all()


def test_cifar10_subset(shared):
    shared("cifar10-subset/cifar10_subset.npz")
    x, y = load_cifar10_subset("train")
    assert x.shape == (4000, 32, 32, 3) and x.dtype == np.uint8 and y.dtype == np.int32
    assert y[:10].tolist() == [6, 9, 9, 4, 1, 1, 2, 7, 8, 3]
    assert x[0, 0, :3].tolist() == [[59, 62, 63], [43, 46, 45], [50, 48, 43]]
    assert np.bincount(y).tolist() == [396, 366, 420, 384, 422, 393, 414, 385, 407, 413]
    xt, yt = load("cifar10-subset", "test")
    assert xt.shape == (1000, 32, 32, 3) and yt[:10].tolist() == [3, 8, 8, 0, 6, 6, 1, 6, 3, 1]


@pytest.mark.parametrize("name,split,shape,positives", [
    ("a9a", "train", (32561, 123), 7841), ("a9a", "test", (16281, 123), 3846),
    ("w8a", "train", (49749, 300), 1479), ("phishing", "train", (11055, 68), 6157),
    ("ijcnn1", "train", (49990, 22), 4853), ("ijcnn1", "test", (91701, 22), 8712),
])
def test_libsvm(shared, name, split, shape, positives):
    from jaxfl.data.sources import file_spec
    shared(file_spec(name, split).path)
    x, y = load_libsvm(name, split)
    assert x.shape == shape and x.dtype == np.float32 and y.dtype == np.int32
    assert set(np.unique(y).tolist()) == {0, 1} and int(y.sum()) == positives


def test_libsvm_label_modes(shared):
    shared("libsvm/phishing.gz")
    _, raw = load_libsvm("phishing", labels="raw")
    _, pm = load_libsvm("phishing", labels="pm1")
    assert set(np.unique(raw).tolist()) == {0.0, 1.0} and set(np.unique(pm).tolist()) == {-1, 1}
    x, _ = load("phishing")
    np.testing.assert_allclose(np.unique(x), [0.0, 0.18257], rtol=1e-5)   # 30 non-zeros of 1/sqrt(30)
    with pytest.raises(ValueError, match="unknown split 'test' for w8a"):
        load_libsvm("w8a", "test")
    with pytest.raises(ValueError, match="unknown labels='x'"):
        load_libsvm("phishing", labels="x")


def test_insurance(shared):
    shared("insurance/insurance.csv.gz")
    x, y = load_insurance()
    assert x.shape == (1338, 6) and x.dtype == np.float32 and y.shape == (1338,)
    assert insurance_feature_names() == ("age", "sex", "bmi", "children", "smoker", "region")
    assert abs(float(np.mean(y.astype(np.float64))) - 13270.422265) < 1e-2
    assert int(x[:, 4].sum()) == 274 and int(x[:, 1].sum()) == 676   # smokers, males
    assert np.bincount(x[:, 5].astype(int)).tolist() == [324, 325, 364, 325]   # NE, NW, SE, SW
    assert x[0].tolist() == pytest.approx([19, 0, 27.9, 0, 1, 3])
    xo, yo = load_insurance(encoding="onehot")
    assert xo.shape == (1338, 9) and xo[:, 5:].sum(0).tolist() == [324, 325, 364, 325]
    np.testing.assert_array_equal(yo, y)


def test_obesity(shared):
    shared("obesity/ObesityDataSet_raw_and_data_sinthetic.csv.gz")
    x, y = load_obesity()
    assert x.shape == (2111, 16) and y.dtype == np.int32
    counts = dict(zip(OBESITY_CLASSES, np.bincount(y).tolist()))
    assert counts == {"Insufficient_Weight": 272, "Normal_Weight": 287, "Obesity_Type_I": 351,
                      "Obesity_Type_II": 297, "Obesity_Type_III": 324, "Overweight_Level_I": 290,
                      "Overweight_Level_II": 290}
    # row 0: Female,21,1.62,64,yes,no,2,3,Sometimes,no,2,no,0,1,no,Public_Transportation,Normal_Weight
    assert x[0].tolist() == pytest.approx([0, 21, 1.62, 64, 1, 0, 2, 3, 2, 0, 2, 0, 0, 1, 3, 3])
    assert y[0] == OBESITY_CLASSES.index("Normal_Weight")
    xo, _ = load("obesity", encoding="onehot")
    assert xo.shape == (2111, len(obesity_feature_names("onehot"))) == (2111, 26)


def test_bundled_and_unknown_names():
    x, y = load_breast_cancer()
    assert x.shape == (569, 30) and x.dtype == np.float32 and np.bincount(y).tolist() == [212, 357]
    assert load("wbcd")[0].shape == (569, 30) and load("digits")[0].shape == (1797, 64)
    with pytest.raises(ValueError, match=r"unknown dataset 'foo' \(known: mnist, .*insurance"):
        load("foo")
    with pytest.raises(ValueError, match="unknown split 'valid' for mnist"):
        load("mnist", "valid")
    with pytest.raises(ValueError, match="unknown split 'train' for insurance"):
        load("insurance", "train")
    assert {"mnist", "fashion-mnist", "cifar10", "cifar10-subset", "a9a", "w8a", "phishing", "ijcnn1",
            "insurance", "obesity", "breast-cancer"} <= set(DATASETS)


def test_cifar10_archive_reader(tmp_path):
    """The official tarball layout (pickled CHW rows) read back as HWC, batches in order."""
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, size=(12, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, size=12)
    path = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        names = [f"data_batch_{i}" for i in (3, 1, 2, 5, 4)] + ["test_batch", "batches.meta"]
        for name in names:   # stored out of order: the reader must reorder
            k = 5 if name == "test_batch" else int(name[-1]) - 1 if name.startswith("data") else 0
            sl = slice(2 * k, 2 * k + 2)
            batch = {b"data": imgs[sl].transpose(0, 3, 1, 2).reshape(-1, 3072), b"labels": labels[sl].tolist()}
            blob = pickle.dumps(batch)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(blob)
            tf.addfile(info, io.BytesIO(blob))
    x, y = read_cifar10_archive(path, "train")
    np.testing.assert_array_equal(x, imgs[:10])
    np.testing.assert_array_equal(y, labels[:10])
    xt, yt = read_cifar10_archive(path, "test")
    np.testing.assert_array_equal(xt, imgs[10:])
    assert xt.dtype == np.uint8 and yt.dtype == np.int32


def test_missing_files_and_bad_idx(tmp_path):
    with pytest.raises(FileNotFoundError, match="cifar-10-python.tar.gz.*download=True"):
        load_cifar10("train", data_dir=tmp_path)
    bad = tmp_path / "bad.idx"
    bad.write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x05abc")
    with pytest.raises(ValueError, match="IDX header says \\[5\\] \\(5 bytes\\) but 3 follow"):
        read_idx(bad)
    bad.write_bytes(b"\x12\x34\x08\x01")
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(bad)
