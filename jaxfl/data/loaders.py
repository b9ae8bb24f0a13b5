"""Loaders for the real datasets, returning host numpy arrays ``(x, y)``.

Every file is located through :mod:`jaxfl.data.sources` (explicit ``data_dir``, ``$JAXFL_DATA_DIR``,
``../shared/data``, ``~/.cache/jaxfl``), verified against the registry's sha256 before it is parsed,
and downloaded from its canonical source only when missing and ``download=True``.

Labels are returned as ``int32`` (never ``uint8``: ``2 * y - 1`` on ``uint8`` labels wraps around).
Images keep their ``uint8`` pixels; scaling and standardisation belong to :mod:`jaxfl.data.preprocess`.
"""
from __future__ import annotations

import contextlib
import csv
import gzip
import os
import pickle
import tarfile
import zipfile
import zlib
from typing import Callable, Sequence

import numpy as np

from jaxfl.data.sources import locate
from jaxfl.extras import require

PathLike = str | os.PathLike | None

#: What a truncated or corrupt file raises while it is parsed (gzip, zip, tar, pickle, text).
_UNREADABLE = (OSError, EOFError, zlib.error, zipfile.BadZipFile, tarfile.TarError, pickle.UnpicklingError,
               UnicodeDecodeError)


@contextlib.contextmanager
def readable(path):
    """Turns a truncated or corrupt file's parse error into one ``ValueError`` naming the file.

    Example:
      >>> import gzip, pathlib, tempfile
      >>> path = pathlib.Path(tempfile.mkdtemp()) / "cut.gz"
      >>> _ = path.write_bytes(gzip.compress(b"0123456789" * 100)[:20])        # a truncated download
      >>> with readable(path):
      ...     _ = gzip.open(path).read()
      Traceback (most recent call last):
      ...
      ValueError: ...cut.gz...
    """
    try:
        yield
    except _UNREADABLE as error:
        raise ValueError(f"{path}: cannot be read, truncated or corrupt ({type(error).__name__}: {error}); "
                         "delete it and fetch it again (jaxfl.data.download)") from error

# ----------------------------------------------------------------------------------------------
# IDX (MNIST, Fashion-MNIST)

_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Parses an IDX file (gzip-compressed if its name ends in ``.gz``) into an array of its shape.

    Raises:
      ValueError: naming the file, for a bad magic number, unknown type code or wrong length.

    Example:
      >>> import pathlib, tempfile
      >>> path = pathlib.Path(tempfile.mkdtemp()) / "tiny-idx1-ubyte"
      >>> _ = path.write_bytes(bytes([0, 0, 0x08, 1]) + (3).to_bytes(4, "big") + bytes([7, 2, 1]))  # uint8, 1-d, 3
      >>> read_idx(path)
      array([7, 2, 1], dtype=uint8)
    """
    opener = gzip.open if str(path).endswith(".gz") else open
    with readable(path), opener(path, "rb") as f:
        data = bytearray(f.read())
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path}: not an IDX file (magic {bytes(data[:4]).hex()})")
    code, ndim = data[2], data[3]
    if code not in _IDX_DTYPES:
        raise ValueError(f"{path}: unknown IDX type code 0x{code:02x}")
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    dtype = np.dtype(_IDX_DTYPES[code])
    offset = 4 + 4 * ndim
    expected = int(np.prod(dims)) * dtype.itemsize
    if len(data) - offset != expected:
        raise ValueError(f"{path}: IDX header says {dims} ({expected} bytes) but {len(data) - offset} follow")
    arr = np.frombuffer(data, dtype, offset=offset).reshape(dims)
    return arr if dtype.byteorder in "=|" else arr.astype(dtype.newbyteorder("="))


def _check_split(dataset: str, split: str, splits: Sequence[str]) -> None:
    if split not in splits:
        raise ValueError(f"unknown split {split!r} for {dataset} (splits: {', '.join(splits)})")


def _load_idx_pair(name: str, split: str, data_dir: PathLike, download: bool):
    _check_split(name, split, ("train", "test"))
    x = read_idx(locate(name, f"{split}_images", data_dir, download=download))
    y = read_idx(locate(name, f"{split}_labels", data_dir, download=download))
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"{name} {split}: {x.shape[0]} images but {y.shape[0]} labels")
    return x, y.astype(np.int32)


def load_mnist(split: str = "train", *, data_dir: PathLike = None, download: bool = False):
    """MNIST digits: ``x: uint8[n, 28, 28]``, ``y: int32[n]`` in 0..9 (n = 60000 train, 10000 test).

    Example:
      >>> x, y = load_mnist("test")                  # the shared copy, or pass download=True
      >>> x.shape, x.dtype, y.dtype, int(y.max())
      ((10000, 28, 28), dtype('uint8'), dtype('int32'), 9)
      >>> images = (x[..., None] / 255.0).astype("float32")   # [n, 28, 28, 1] in [0, 1], what the CNNs take
    """
    return _load_idx_pair("mnist", split, data_dir, download)


def load_fashion_mnist(split: str = "train", *, data_dir: PathLike = None, download: bool = False):
    """Fashion-MNIST: ``x: uint8[n, 28, 28]``, ``y: int32[n]`` in 0..9 (n = 60000 train, 10000 test).

    Example:
      >>> x, y = load_fashion_mnist("test")
      >>> x.shape, x.dtype, y.dtype
      ((10000, 28, 28), dtype('uint8'), dtype('int32'))
    """
    return _load_idx_pair("fashion-mnist", split, data_dir, download)


# ----------------------------------------------------------------------------------------------
# CIFAR-10

def load_cifar10_subset(split: str = "train", *, data_dir: PathLike = None, download: bool = False):
    """The genuine CIFAR-10 subset of ``shared/data``: ``x: uint8[n, 32, 32, 3]``, ``y: int32[n]``.

    ``train`` is the first 4000 images of ``data_batch_1``, ``test`` the first 1000 of ``test_batch``,
    in the official order.

    Example:
      >>> x, y = load_cifar10_subset("test")
      >>> x.shape, x.dtype, sorted(set(y.tolist())) == list(range(10))
      ((1000, 32, 32, 3), dtype('uint8'), True)
    """
    _check_split("cifar10-subset", split, ("train", "test"))
    path = locate("cifar10-subset", "npz", data_dir, download=download)
    with readable(path), np.load(path, allow_pickle=False) as z:
        return np.array(z[f"x_{split}"]), z[f"y_{split}"].astype(np.int32)


def read_cifar10_archive(path: str | os.PathLike, split: str):
    """Reads ``split`` from the official ``cifar-10-python.tar.gz`` in one pass over the archive.

    Returns ``x: uint8[n, 32, 32, 3]`` (HWC, as ``data_batch_*`` rows are CHW) and ``y: int32[n]``;
    train is ``data_batch_1..5`` in order (n = 50000), test is ``test_batch`` (n = 10000). The batches
    are pickles: call this only on an archive whose checksum was verified (as :func:`load_cifar10` does).

    Example (the official archive, after ``jaxfl.data.download("cifar10")`` on a machine with a network):
      >>> from jaxfl.data.sources import find_file
      >>> x, y = read_cifar10_archive(find_file("cifar10/cifar-10-python.tar.gz"), "test")  # doctest: +SKIP
      >>> x.shape, y.shape                                                                # doctest: +SKIP
      ((10000, 32, 32, 3), (10000,))
    """
    _check_split("cifar10", split, ("train", "test"))
    names = [f"data_batch_{i}" for i in range(1, 6)] if split == "train" else ["test_batch"]
    found: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    with readable(path), tarfile.open(path, "r:gz") as tf:
        for member in tf:
            base = member.name.rsplit("/", 1)[-1]
            if member.isfile() and base in names:
                batch = pickle.load(tf.extractfile(member), encoding="bytes")
                data = np.asarray(batch[b"data"], np.uint8)
                found[base] = (data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1),
                               np.asarray(batch[b"labels"], np.int32))
    missing = [n for n in names if n not in found]
    if missing:
        raise ValueError(f"{path}: archive lacks {missing}")
    return (np.concatenate([found[n][0] for n in names]), np.concatenate([found[n][1] for n in names]))


def load_cifar10(split: str = "train", *, data_dir: PathLike = None, download: bool = False):
    """Full CIFAR-10 from the official python batches: ``x: uint8[n, 32, 32, 3]``, ``y: int32[n]``.

    n = 50000 (train) or 10000 (test). The 170 MB archive is not in ``shared/data``; pass
    ``download=True`` on a machine with a network (it is verified against its sha256).

    Example:
      >>> x, y = load_cifar10("test", download=True)            # doctest: +SKIP
      >>> x.shape, x.dtype, y.shape                               # doctest: +SKIP
      ((10000, 32, 32, 3), dtype('uint8'), (10000,))

      Where the archive is in none of the data directories and ``download`` is False, the error says what to do:

      >>> import tempfile
      >>> load_cifar10("test", data_dir=tempfile.mkdtemp())
      Traceback (most recent call last):
      ...
      FileNotFoundError: cifar10/cifar-10-python.tar.gz (dataset 'cifar10') not found in: ... Pass download=True, ...
    """
    return read_cifar10_archive(locate("cifar10", "archive", data_dir, download=download), split)


# ----------------------------------------------------------------------------------------------
# LIBSVM

LIBSVM_FEATURES = {"a9a": 123, "w8a": 300, "phishing": 68, "ijcnn1": 22}
_LIBSVM_SPLITS = {"a9a": ("train", "test"), "w8a": ("train",), "phishing": ("train",), "ijcnn1": ("train", "test")}


def load_libsvm(name: str, split: str = "train", *, labels: str = "01", data_dir: PathLike = None,
                download: bool = False):
    """A LIBSVM binary dataset as dense arrays: ``x: float32[n, d]``, ``y``.

    Shapes: a9a (32561 | 16281, 123), w8a (49749, 300), phishing (11055, 68),
    ijcnn1 (49990 | 91701, 22); ``split`` is ``"train"`` or (a9a, ijcnn1) ``"test"``.

    Args:
      labels: ``"01"`` (default) maps the two classes to ``int32`` 0/1 (negative class 0),
        ``"pm1"`` to ``int32`` -1/+1, ``"raw"`` keeps the file's values as ``float32``
        (±1 for a9a/w8a/ijcnn1, 0/1 for phishing).

    Example:
      >>> x, y = load_libsvm("a9a", "test")          # labels {-1, +1} as {0, 1} (labels="01")
      >>> x.shape, x.dtype, sorted(set(y.tolist()))
      ((16281, 123), dtype('float32'), [0, 1])
    """
    load_svmlight_file = require("sklearn.datasets").load_svmlight_file

    if name not in LIBSVM_FEATURES:
        raise ValueError(f"unknown LIBSVM dataset {name!r} (known: {', '.join(LIBSVM_FEATURES)})")
    _check_split(name, split, _LIBSVM_SPLITS[name])
    if labels not in ("01", "pm1", "raw"):
        raise ValueError(f"unknown labels={labels!r} (use '01', 'pm1' or 'raw')")
    path = locate(name, split, data_dir, download=download)
    with readable(path):
        x, y = load_svmlight_file(str(path), n_features=LIBSVM_FEATURES[name], dtype=np.float32)
    x = np.asarray(x.toarray(), np.float32)
    if labels == "raw":
        return x, y.astype(np.float32)
    values = np.unique(y)
    if len(values) > 2:
        raise ValueError(f"{path}: expected two classes, found labels {values[:5]}")
    positive = y > 0
    return x, (positive.astype(np.int32) if labels == "01" else np.where(positive, 1, -1).astype(np.int32))


COVTYPE_ROWS, COVTYPE_FEATURES = 581_012, 54


def load_covtype_binary(*, scale: bool = True, labels: str = "01", data_dir: PathLike = None,
                        download: bool = False):
    """LIBSVM's covtype.binary, derived from the UCI Covertype file: ``x: float32[581012, 54]``, ``y``.

    LIBSVM's binary form is class 2 (Lodgepole Pine, 283,301 rows; its label 2) against the six other
    classes (297,711 rows; its label 1), rows in the UCI order; ``scale=True`` gives its ``.scale`` form,
    every feature min-max scaled to [0, 1] over all rows (``svm-scale -l 0 -u 1``), ``scale=False`` the raw
    integers (elevation in metres, ...). There is no official test split.

    Args:
      labels: ``"01"`` (default): class 2 -> 1, the others -> 0 (``int32``); ``"pm1"``: +1 / -1;
        ``"raw"``: LIBSVM's 2 / 1 as ``float32``.
      data_dir, download: where to look, and whether to fetch the UCI file (``jaxfl.data.download("covtype")``)
        when it is nowhere; it is not in ``shared/data``.

    Example:
      >>> x, y = load_covtype_binary(download=True)               # doctest: +SKIP
      >>> x.shape, float(x.max()), int(y.sum())                    # doctest: +SKIP
      ((581012, 54), 1.0, 283301)
    """
    from jaxfl.data.preprocess import minmax_scale

    if labels not in ("01", "pm1", "raw"):
        raise ValueError(f"unknown labels={labels!r} (use '01', 'pm1' or 'raw')")
    path = locate("covtype", "all", data_dir, download=download)
    with readable(path), gzip.open(path, "rb") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.int32, ndmin=2)
    if table.shape[1] != COVTYPE_FEATURES + 1:
        raise ValueError(f"{path}: expected {COVTYPE_FEATURES + 1} columns, found {table.shape[1]}")
    x = table[:, :COVTYPE_FEATURES].astype(np.float32)
    if scale:
        x = minmax_scale(x)[0].astype(np.float32)
    positive = table[:, -1] == 2
    if labels == "raw":
        return x, np.where(positive, 2.0, 1.0).astype(np.float32)
    return x, (positive.astype(np.int32) if labels == "01" else np.where(positive, 1, -1).astype(np.int32))


# ----------------------------------------------------------------------------------------------
# CSV datasets (insurance, obesity)

INSURANCE_COLUMNS = ("age", "sex", "bmi", "children", "smoker", "region", "charges")
INSURANCE_CATEGORIES = {"sex": ("female", "male"), "smoker": ("no", "yes"),
                        "region": ("northeast", "northwest", "southeast", "southwest")}

OBESITY_COLUMNS = ("Gender", "Age", "Height", "Weight", "family_history_with_overweight", "FAVC", "FCVC",
                   "NCP", "CAEC", "SMOKE", "CH2O", "SCC", "FAF", "TUE", "CALC", "MTRANS", "NObeyesdad")
_YES_NO = ("no", "yes")
_FREQ = ("Always", "Frequently", "Sometimes", "no")
OBESITY_CATEGORIES = {"Gender": ("Female", "Male"), "family_history_with_overweight": _YES_NO,
                      "FAVC": _YES_NO, "CAEC": _FREQ, "SMOKE": _YES_NO, "SCC": _YES_NO, "CALC": _FREQ,
                      "MTRANS": ("Automobile", "Bike", "Motorbike", "Public_Transportation", "Walking")}
# NObeyesdad codes as sklearn's LabelEncoder gives them (sorted names), as in the authors' code.
OBESITY_CLASSES = ("Insufficient_Weight", "Normal_Weight", "Obesity_Type_I", "Obesity_Type_II",
                   "Obesity_Type_III", "Overweight_Level_I", "Overweight_Level_II")


def _read_csv_gz(path, columns: Sequence[str]) -> list[list[str]]:
    with readable(path), gzip.open(path, "rt", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    if not rows or tuple(rows[0]) != tuple(columns):
        raise ValueError(f"{path}: header {rows[0] if rows else None} differs from {list(columns)}")
    return rows[1:]


def _encode_table(rows, columns, categories, encoding, path):
    """Columns of ``rows`` as float columns: numbers parsed, categories label- or one-hot encoded.

    Label encoding gives the index in the sorted category tuple (sklearn's ``LabelEncoder``). One-hot
    encoding keeps two-valued columns as one 0/1 column and expands the others to one column each.
    """
    if encoding not in ("label", "onehot"):
        raise ValueError(f"unknown encoding={encoding!r} (use 'label' or 'onehot')")
    out, names = [], []
    for j, col in enumerate(columns):
        raw = [r[j] for r in rows]
        if col not in categories:
            try:
                out.append(np.array(raw, np.float64))
            except ValueError:
                raise ValueError(f"{path}: column {col!r} has a non-numeric value") from None
            names.append(col)
            continue
        cats = categories[col]
        index = {c: i for i, c in enumerate(cats)}
        bad = sorted(set(raw) - set(index))
        if bad:
            raise ValueError(f"{path}: column {col!r} has unknown categories {bad} (known: {list(cats)})")
        codes = np.array([index[v] for v in raw], np.int64)
        if encoding == "label" or len(cats) == 2:
            out.append(codes.astype(np.float64))
            names.append(col)
        else:
            out.extend((codes == k).astype(np.float64) for k in range(len(cats)))
            names.extend(f"{col}={c}" for c in cats)
    return np.stack(out, axis=1), tuple(names)


def insurance_feature_names(encoding: str = "label") -> tuple[str, ...]:
    """Column names of :func:`load_insurance`'s ``x`` for ``encoding``.

    Example:
      >>> insurance_feature_names()
      ('age', 'sex', 'bmi', 'children', 'smoker', 'region')
    """
    return _encode_table([], INSURANCE_COLUMNS[:-1], INSURANCE_CATEGORIES, encoding, "")[1]


def load_insurance(*, encoding: str = "label", data_dir: PathLike = None, download: bool = False):
    """Medical insurance charges: ``x: float32[1338, 6]`` (``9`` one-hot), ``y: float32[1338]`` charges.

    Columns (``encoding="label"``, as Lowy & Razaviyayn's code with ``LabelEncoder``): age, sex (female 0,
    male 1), bmi, children, smoker (no 0, yes 1), region (northeast 0, northwest 1, southeast 2,
    southwest 3). ``encoding="onehot"`` replaces region by four 0/1 columns
    (:func:`insurance_feature_names`). No bias column and no standardisation: Lowy & Razaviyayn adds a column
    of ones and standardises age and bmi with per-silo training statistics
    (:func:`jaxfl.data.preprocess.standardize` with ``columns=``).

    Example:
      >>> x, y = load_insurance(encoding="onehot")
      >>> x.shape, insurance_feature_names("onehot")[-4:]
      ((1338, 9), ('region=northeast', 'region=northwest', 'region=southeast', 'region=southwest'))
    """
    path = locate("insurance", "csv", data_dir, download=download)
    rows = _read_csv_gz(path, INSURANCE_COLUMNS)
    x, _ = _encode_table([r[:-1] for r in rows], INSURANCE_COLUMNS[:-1], INSURANCE_CATEGORIES, encoding, path)
    y, _ = _encode_table([r[-1:] for r in rows], INSURANCE_COLUMNS[-1:], {}, "label", path)
    return x.astype(np.float32), y[:, 0].astype(np.float32)


def obesity_feature_names(encoding: str = "label") -> tuple[str, ...]:
    """Column names of :func:`load_obesity`'s ``x`` for ``encoding``.

    Example:
      >>> len(obesity_feature_names()), len(obesity_feature_names("onehot"))
      (16, 26)
    """
    return _encode_table([], OBESITY_COLUMNS[:-1], OBESITY_CATEGORIES, encoding, "")[1]


def load_obesity(*, encoding: str = "label", data_dir: PathLike = None, download: bool = False):
    """UCI obesity levels: ``x: float32[2111, 16]`` (``26`` one-hot), ``y: int32[2111]`` in 0..6.

    Features in the file's column order (``Gender, Age, Height, Weight, ..., CALC, MTRANS``); the
    categorical ones label-encoded as Lowy & Razaviyayn's code does (``LabelEncoder``: sorted category names,
    e.g. CAEC Always 0, Frequently 1, Sometimes 2, no 3), or with ``encoding="onehot"`` the
    multi-valued CAEC, CALC, MTRANS expanded to 0/1 columns (:func:`obesity_feature_names`).
    ``y`` indexes :data:`OBESITY_CLASSES` (sorted names, the authors' encoding). No bias column and no
    standardisation (Lowy & Razaviyayn standardises Age, Height, Weight, CH2O, TUE with training statistics).

    Example:
      >>> x, y = load_obesity()
      >>> x.shape, len(OBESITY_CLASSES), int(y.max())
      ((2111, 16), 7, 6)
    """
    path = locate("obesity", "csv", data_dir, download=download)
    rows = _read_csv_gz(path, OBESITY_COLUMNS)
    x, _ = _encode_table([r[:-1] for r in rows], OBESITY_COLUMNS[:-1], OBESITY_CATEGORIES, encoding, path)
    y, _ = _encode_table([r[-1:] for r in rows], OBESITY_COLUMNS[-1:], {"NObeyesdad": OBESITY_CLASSES},
                         "label", path)
    return x.astype(np.float32), y[:, 0].astype(np.int32)


# ----------------------------------------------------------------------------------------------
# Bundled with scikit-learn (zero setup, no file)

def load_breast_cancer():
    """Wisconsin diagnostic breast cancer (WBCD), bundled with scikit-learn: no file, no network.

    Returns ``x: float32[569, 30]``, ``y: int32[569]`` with 0 = malignant (212), 1 = benign (357),
    scikit-learn's coding.

    Example:
      >>> x, y = load_breast_cancer()
      >>> x.shape, int((y == 0).sum()), int((y == 1).sum())     # malignant, benign
      ((569, 30), 212, 357)
    """
    d = require("sklearn.datasets").load_breast_cancer()
    return d.data.astype(np.float32), d.target.astype(np.int32)


def load_digits():
    """scikit-learn's 8x8 digits: ``x: float32[1797, 64]`` in 0..16, ``y: int32[1797]`` in 0..9.

    Example:
      >>> x, y = load_digits()
      >>> x.shape, float(x.max())
      ((1797, 64), 16.0)
    """
    d = require("sklearn.datasets").load_digits()
    return d.data.astype(np.float32), d.target.astype(np.int32)


# ----------------------------------------------------------------------------------------------
# One entry point

_UNSPLIT = ("all",)
_DATASETS: dict[str, tuple[Callable, tuple[str, ...]]] = {
    "mnist": (lambda split, **kw: load_mnist(split, **kw), ("train", "test")),
    "fashion-mnist": (lambda split, **kw: load_fashion_mnist(split, **kw), ("train", "test")),
    "cifar10": (lambda split, **kw: load_cifar10(split, **kw), ("train", "test")),
    "cifar10-subset": (lambda split, **kw: load_cifar10_subset(split, **kw), ("train", "test")),
    **{n: ((lambda split, _n=n, **kw: load_libsvm(_n, split, **kw)), s) for n, s in _LIBSVM_SPLITS.items()},
    "covtype-binary": (lambda split, **kw: load_covtype_binary(**kw), _UNSPLIT),
    "insurance": (lambda split, **kw: load_insurance(**kw), _UNSPLIT),
    "obesity": (lambda split, **kw: load_obesity(**kw), _UNSPLIT),
    "breast-cancer": (lambda split, **kw: load_breast_cancer(**kw), _UNSPLIT),
    "digits": (lambda split, **kw: load_digits(**kw), _UNSPLIT),
}
_ALIASES = {"wbcd": "breast-cancer", "fmnist": "fashion-mnist", "covtype.binary": "covtype-binary"}

DATASETS = tuple(_DATASETS)


def load(name: str, split: str | None = None, **kw):
    """Loads dataset ``name`` as host arrays ``(x, y)``.

    Args:
      name: one of :data:`DATASETS` (``_`` and ``-`` are interchangeable; ``wbcd`` means
        ``breast-cancer``).
      split: ``"train"`` or ``"test"`` for datasets with an official split; ``"all"`` for those
        without one (covtype-binary, insurance, obesity, breast-cancer, digits). Default: ``"train"``
        where it exists, else ``"all"``.
      **kw: passed to the loader (``data_dir``, ``download``, ``labels``, ``encoding``).

    Raises:
      ValueError: ``unknown dataset 'foo' (known: ...)``, or a split the dataset does not have.

    Example:
      >>> x, y = load("wbcd")                        # breast-cancer, split "all"
      >>> x.shape
      (569, 30)
      >>> load("mnist", "all")
      Traceback (most recent call last):
      ...
      ValueError: unknown split 'all' for mnist (splits: train, test)
    """
    key = str(name).lower().replace("_", "-")
    key = _ALIASES.get(key, key)
    if key not in _DATASETS:
        raise ValueError(f"unknown dataset {name!r} (known: {', '.join(DATASETS)})")
    loader, splits = _DATASETS[key]
    split = splits[0] if split is None else split
    _check_split(key, split, splits)
    return loader(split, **kw)
