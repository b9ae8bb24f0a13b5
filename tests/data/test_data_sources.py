"""Data-directory resolution, checksum verification, and downloads from a local HTTP server."""
import bz2
import gzip
import hashlib
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from jaxfl.data import ChecksumError, data_dirs, download, find_file, load_insurance, load_obesity, locate, read_idx
from jaxfl.data import sources
from jaxfl.data.sources import REGISTRY, Source, file_spec, sha256_file, verify

T10K_LABELS = "mnist/t10k-labels-idx1-ubyte.gz"


def copy_into(src: Path, root: Path, relpath: str) -> Path:
    dst = root / relpath
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    return dst


def flip_byte(path: Path, at: int = 100) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def leftovers(root: Path):
    return sorted(p.name for p in root.rglob("*") if p.is_file())


def test_registry_matches_shared_sha256sums(shared):
    manifest = shared("SHA256SUMS")
    listed = dict(reversed(line.split()) for line in manifest.read_text().splitlines() if line.strip())
    registered = {s.path: s.sha256 for specs in REGISTRY.values() for s in specs}
    for path, digest in listed.items():
        assert registered.get(path) == digest, path


def test_data_dir_resolution(tmp_path, monkeypatch):
    assert data_dirs(tmp_path) == [tmp_path]
    monkeypatch.setenv("JAXFL_DATA_DIR", str(tmp_path))
    dirs = data_dirs()
    assert dirs[0] == tmp_path and dirs[-1] == Path.home() / ".cache" / "jaxfl"
    assert sources.download_dir() == tmp_path
    monkeypatch.delenv("JAXFL_DATA_DIR")
    assert sources.download_dir() == Path.home() / ".cache" / "jaxfl"
    shared = Path(__file__).resolve().parents[3] / "shared" / "data"
    if shared.is_dir():
        assert shared.resolve() in data_dirs()


def test_env_dir_is_searched_first(shared, tmp_path, monkeypatch):
    copy_into(shared("insurance/insurance.csv.gz"), tmp_path, "insurance/insurance.csv.gz")
    monkeypatch.setenv("JAXFL_DATA_DIR", str(tmp_path))
    assert find_file("insurance/insurance.csv.gz") == tmp_path / "insurance/insurance.csv.gz"
    flip_byte(tmp_path / "insurance/insurance.csv.gz")
    with pytest.raises(ChecksumError):
        load_insurance()


def test_corrupted_file_raises_checksum_error(shared, tmp_path):
    src = shared("insurance/insurance.csv.gz")
    dst = copy_into(src, tmp_path, "insurance/insurance.csv.gz")
    np.testing.assert_array_equal(load_insurance(data_dir=tmp_path)[1], load_insurance()[1])
    flip_byte(dst, at=len(dst.read_bytes()) // 2)   # new mtime: the cached verdict does not apply
    with pytest.raises(ChecksumError) as err:
        load_insurance(data_dir=tmp_path)
    spec = file_spec("insurance", "csv")
    msg = str(err.value)
    assert str(dst) in msg and spec.sha256 in msg and sha256_file(dst) in msg
    assert isinstance(err.value, ValueError) and err.value.actual == sha256_file(dst)

    labels = copy_into(shared(T10K_LABELS), tmp_path, T10K_LABELS)
    flip_byte(labels, at=2000)
    with pytest.raises(ChecksumError, match="t10k-labels"):
        locate("mnist", "test_labels", tmp_path)


def test_recompressed_copy_is_accepted_by_content(shared, tmp_path):
    """Our own gzip of a canonical payload differs in bytes from GNU gzip's; its content is checked."""
    src = shared("libsvm/a9a.t.gz")
    dst = tmp_path / "libsvm/a9a.t.gz"
    dst.parent.mkdir()
    dst.write_bytes(gzip.compress(gzip.decompress(src.read_bytes()), compresslevel=1, mtime=0))
    spec = file_spec("a9a", "test")
    assert sha256_file(dst) != spec.sha256
    assert verify(dst, spec) == dst
    dst.write_bytes(gzip.compress(gzip.decompress(src.read_bytes())[:-10], mtime=0))
    with pytest.raises(ChecksumError):
        verify(dst, spec)


def test_verified_files_are_hashed_once(shared, monkeypatch):
    path = shared(T10K_LABELS)
    spec = file_spec("mnist", "test_labels")
    verify(path, spec)
    calls = []
    monkeypatch.setattr(sources, "sha256_file", lambda p: calls.append(p) or "x")
    verify(path, spec)
    assert calls == []


def test_download_from_local_server(shared, http_dir, tmp_path):
    served, url = http_dir
    shutil.copyfile(shared(T10K_LABELS), served / "t10k-labels-idx1-ubyte.gz")
    cache = tmp_path / "cache"
    (path,) = download("mnist", cache, base_url=url, files=["test_labels"])
    assert path == cache / T10K_LABELS
    assert sha256_file(path) == file_spec("mnist", "test_labels").sha256
    assert read_idx(path)[:5].tolist() == [7, 2, 1, 0, 4]
    assert leftovers(cache) == ["t10k-labels-idx1-ubyte.gz"]
    assert download("mnist", cache, base_url=url + "/nothing-here", files=[T10K_LABELS]) == [path]   # present


def test_corrupt_download_leaves_nothing(shared, http_dir, tmp_path):
    served, url = http_dir
    bad = served / "t10k-labels-idx1-ubyte.gz"
    shutil.copyfile(shared(T10K_LABELS), bad)
    flip_byte(bad, at=3000)
    cache = tmp_path / "cache"
    with pytest.raises(ChecksumError, match="t10k-labels"):
        download("mnist", cache, base_url=url, files=["test_labels"])
    assert leftovers(cache) == []
    with pytest.raises(OSError, match="could not download"):   # 404 for the image file
        download("mnist", cache, base_url=url, files=["test_images"])
    assert leftovers(cache) == []


def test_download_transforms(shared, http_dir, tmp_path):
    """gzip (insurance), CRLF normalisation (phishing) and zip extraction (obesity) end in verified files."""
    served, url = http_dir
    cache = tmp_path / "cache"
    (served / "insurance.csv").write_bytes(gzip.decompress(shared("insurance/insurance.csv.gz").read_bytes()))
    phishing = gzip.decompress(shared("libsvm/phishing.gz").read_bytes())
    (served / "phishing").write_bytes(phishing.rstrip(b"\n").replace(b"\n", b"\r\n"))
    csv = gzip.decompress(shared("obesity/ObesityDataSet_raw_and_data_sinthetic.csv.gz").read_bytes())
    zip_name = sources._OBESITY_URL.rsplit("/", 1)[-1]
    with zipfile.ZipFile(served / zip_name, "w") as zf:
        zf.writestr("ObesityDataSet_raw_and_data_sinthetic.csv", csv)

    (ins,) = download("insurance", cache, base_url=url)
    assert sha256_file(ins) == file_spec("insurance", "csv").sha256   # zlib reproduces this one exactly
    np.testing.assert_array_equal(load_insurance(data_dir=cache)[0], load_insurance()[0])
    (ph,) = download("phishing", cache, base_url=url)
    assert gzip.decompress(ph.read_bytes()) == phishing
    download("obesity", cache, base_url=url)
    np.testing.assert_array_equal(load_obesity(data_dir=cache)[1], load_obesity()[1])

    (served / "insurance.csv").write_bytes(b"age,sex\n")   # wrong content: checked before compression
    with pytest.raises(ChecksumError, match="decompressed content"):
        download("insurance", tmp_path / "other", base_url=url)
    assert leftovers(tmp_path / "other") == []


def test_loader_downloads_when_asked(shared, http_dir, tmp_path, monkeypatch):
    served, url = http_dir
    shutil.copyfile(shared(T10K_LABELS), served / "t10k-labels-idx1-ubyte.gz")
    spec = file_spec("mnist", "test_labels")
    local = spec._replace(sources=(Source(url + "/t10k-labels-idx1-ubyte.gz"),))
    monkeypatch.setitem(REGISTRY, "mnist", tuple(local if s.key == "test_labels" else s for s in REGISTRY["mnist"]))
    cache = tmp_path / "cache"
    with pytest.raises(FileNotFoundError, match="download=True"):
        locate("mnist", "test_labels", cache)
    path = locate("mnist", "test_labels", cache, download=True)
    assert path == cache / T10K_LABELS and leftovers(cache) == ["t10k-labels-idx1-ubyte.gz"]


def test_download_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown dataset 'foo'"):
        download("foo", tmp_path)
    with pytest.raises(ValueError, match="has no file\\(s\\) \\['nope'\\]"):
        download("mnist", tmp_path, files=["nope"])
    with pytest.raises(ValueError, match="no canonical download source"):
        download("cifar10-subset", tmp_path)
    assert leftovers(tmp_path) == []
    with pytest.raises(ValueError, match="has no file 'x'"):
        file_spec("mnist", "x")


def test_bz2_content_digest_recorded(shared):
    """ijcnn1 is cached as distributed; its content digest is the MANIFEST's raw sha256."""
    path = shared("libsvm/ijcnn1.trn.bz2")
    spec = file_spec("ijcnn1", "train")
    assert hashlib.sha256(bz2.decompress(path.read_bytes())).hexdigest() == spec.content_sha256


def test_covtype_binary_is_derived_from_the_uci_file(http_dir, tmp_path, monkeypatch):
    """A UCI-format file (54 integer features, class 1-7) served at the registry's file name: download verifies
    it, and the loader gives LIBSVM's covtype.binary: class 2 against the rest, features scaled to [0, 1]
    over all rows (or raw), labels 0/1, -1/+1 or LIBSVM's 2/1."""
    from jaxfl.data import load, load_covtype_binary

    served, url = http_dir
    rng = np.random.default_rng(0)
    classes = np.array([5, 2, 1, 2, 7, 3, 2, 4, 6, 1])
    features = np.column_stack([rng.integers(1800, 3900, 10), rng.integers(0, 360, 10),
                                rng.integers(0, 2, (10, 52))])
    features[0, 2:] = 0   # a column that is 0 in one row only still spans [0, 1]
    text = "".join(",".join(map(str, row)) + "\n" for row in np.column_stack([features, classes]))
    payload = gzip.compress(text.encode(), mtime=0)
    (served / "covtype.data.gz").write_bytes(payload)
    assert REGISTRY["covtype"][0].sources[0].url.endswith("/covtype.data.gz")   # the name a mirror serves
    spec = REGISTRY["covtype"][0]._replace(sha256=hashlib.sha256(payload).hexdigest())
    monkeypatch.setitem(REGISTRY, "covtype", (spec,))
    cache = tmp_path / "cache"
    with pytest.raises(FileNotFoundError, match="jaxfl.data.download\\('covtype'\\)"):
        load_covtype_binary(data_dir=cache)
    (path,) = download("covtype", cache, base_url=url)
    assert path == cache / "covtype" / "covtype.data.gz"

    x, y = load_covtype_binary(data_dir=cache)
    assert x.shape == (10, 54) and x.dtype == np.float32 and y.dtype == np.int32
    assert y.tolist() == (classes == 2).astype(int).tolist()
    lo, hi = features.min(axis=0), features.max(axis=0)
    expected = np.where(hi > lo, (features - lo) / np.where(hi > lo, hi - lo, 1), 0.0)
    np.testing.assert_allclose(x, expected, rtol=1e-6)
    raw, libsvm = load_covtype_binary(data_dir=cache, scale=False, labels="raw")
    np.testing.assert_array_equal(raw, features.astype(np.float32))
    assert libsvm.tolist() == [2.0 if c == 2 else 1.0 for c in classes]
    assert load("covtype.binary", data_dir=cache, labels="pm1")[1].tolist() == [1 if c == 2 else -1 for c in classes]
    with pytest.raises(ValueError, match="unknown labels='yes'"):
        load_covtype_binary(data_dir=cache, labels="yes")

    short = gzip.compress(b"1,2,3\n4,5,6\n", mtime=0)
    (served / "covtype.data.gz").write_bytes(short)
    monkeypatch.setitem(REGISTRY, "covtype", (spec._replace(sha256=hashlib.sha256(short).hexdigest()),))
    download("covtype", tmp_path / "short", base_url=url)
    with pytest.raises(ValueError, match="expected 55 columns, found 3"):
        load_covtype_binary(data_dir=tmp_path / "short")
