"""Where dataset files live, what their bytes must be, and how to fetch them.

The registry maps a dataset name to the files a cache directory holds for it. Each
:class:`FileSpec` records the file's path inside the data directory, the sha256 of the cached
bytes, and the canonical sources with the step that turns a downloaded payload into the cached file.

Some cached files are compressed by us where the canonical source is not (``gzip -9 -n`` of the
LIBSVM text files, the insurance and obesity CSVs; see ``../shared/data/MANIFEST.md``). Python's
zlib does not always reproduce GNU gzip's deflate stream byte for byte, so for these files the
registry also records ``content_sha256``, the sha256 of the decompressed payload (equal to the
canonical bytes). A cached file is accepted when its own sha256 matches ``sha256``, or, for such a
file, when its decompressed content matches ``content_sha256``. Everything else raises
:class:`ChecksumError`.

Data-directory resolution (:func:`data_dirs`), in order:

1. an explicit ``data_dir=`` argument (then nothing else is searched);
2. the environment variable ``JAXFL_DATA_DIR``;
3. ``../shared/data`` next to the repository root (the directory holding ``pyproject.toml``), found
   upward from this file and from the current working directory;
4. the user cache ``~/.cache/jaxfl``, which is also where :func:`download` writes by default.
"""
from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from pathlib import Path
from typing import Iterable, NamedTuple, Sequence

ENV_VAR = "JAXFL_DATA_DIR"


class ChecksumError(ValueError):
    """A data file's bytes differ from the registry's digest (a ``ValueError``; ``path``, ``expected``, ``actual``).

    Example:
      >>> err = ChecksumError("mnist/t10k-labels-idx1-ubyte.gz", "ab" * 32, "cd" * 32)
      >>> isinstance(err, ValueError), err.path
      (True, 'mnist/t10k-labels-idx1-ubyte.gz')
    """

    def __init__(self, path, expected: str, actual: str):
        self.path, self.expected, self.actual = str(path), expected, actual
        super().__init__(f"checksum mismatch for {path}: expected sha256 {expected}, got {actual}")


class Source(NamedTuple):
    """One place a file can be fetched from.

    ``transform`` turns the downloaded payload into the cached bytes:

    - ``"none"``: stored as downloaded;
    - ``"gzip"``: gzip-compressed (level 9, no name, mtime 0), like ``gzip -9 -n``;
    - ``"crlf-gzip"``: CRLF line ends turned into LF, a final newline added, then ``"gzip"``;
    - ``"zip-gzip:<member>"``: ``<member>`` extracted from the downloaded zip, then ``"gzip"``.

    Example:
      >>> Source("https://example.org/data.csv", transform="crlf-gzip").transform
      'crlf-gzip'
    """

    url: str
    transform: str = "none"


class FileSpec(NamedTuple):
    """One cached file of a dataset.

    Attributes:
      key: the loader's name for the file (``"train_images"``, ``"test"``, ...).
      path: path relative to the data directory (``"mnist/train-images-idx3-ubyte.gz"``).
      sha256: sha256 of the cached file as the shared copy holds it.
      sources: canonical sources, tried in order by :func:`download`.
      content_sha256: sha256 of the decompressed content, for files that we compress (see the module
        docstring); None where the cached bytes are the canonical bytes.
      md5: the publisher's md5 of the cached bytes, where one is published (informational).
      size: size in bytes of the cached file, where known (informational).

    Example:
      >>> spec = file_spec("mnist", "test_labels")
      >>> spec.path, spec.sources[0].url
      ('mnist/t10k-labels-idx1-ubyte.gz', 'https://ossci-datasets.s3.amazonaws.com/mnist/t10k-labels-idx1-ubyte.gz')
    """

    key: str
    path: str
    sha256: str
    sources: tuple[Source, ...] = ()
    content_sha256: str | None = None
    md5: str | None = None
    size: int | None = None


_MNIST_URLS = ("https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/")
_FASHION_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
_LIBSVM_URL = "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary/"
_TICK_URL = ("https://raw.githubusercontent.com/X-DataInitiative/tick-datasets/"
             "9d959b6e53e17145e93e9849ff1f9f6d2de8ae51/binary/ijcnn1/")
_INSURANCE_URL = ("https://raw.githubusercontent.com/stedy/Machine-Learning-with-R-datasets/"
                  "ff933238d9c30da179b7e3ad4b6ca938d67efc53/insurance.csv")
_OBESITY_CSV = "ObesityDataSet_raw_and_data_sinthetic.csv"
_OBESITY_URL = ("https://archive.ics.uci.edu/static/public/544/"
                "estimation+of+obesity+levels+based+on+eating+habits+and+physical+condition.zip")


def _idx(folder: str, bases: Sequence[str], key: str, fname: str, sha: str, md5: str) -> FileSpec:
    return FileSpec(key, f"{folder}/{fname}", sha, tuple(Source(b + fname) for b in bases), md5=md5)


REGISTRY: dict[str, tuple[FileSpec, ...]] = {
    "mnist": (
        _idx("mnist", _MNIST_URLS, "train_images", "train-images-idx3-ubyte.gz",
             "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609", "f68b3c2dcbeaaa9fbdd348bbdeb94873"),
        _idx("mnist", _MNIST_URLS, "train_labels", "train-labels-idx1-ubyte.gz",
             "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c", "d53e105ee54ea40749a09fcbcd1e9432"),
        _idx("mnist", _MNIST_URLS, "test_images", "t10k-images-idx3-ubyte.gz",
             "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6", "9fb629c4189551a2d022fa330f9573f3"),
        _idx("mnist", _MNIST_URLS, "test_labels", "t10k-labels-idx1-ubyte.gz",
             "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6", "ec29112dd5afa0611ce80d1b7f02629c"),
    ),
    "fashion-mnist": (
        _idx("fashion-mnist", (_FASHION_URL,), "train_images", "train-images-idx3-ubyte.gz",
             "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84", "8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
        _idx("fashion-mnist", (_FASHION_URL,), "train_labels", "train-labels-idx1-ubyte.gz",
             "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845", "25c81989df183df01b3e8a0aad5dffbe"),
        _idx("fashion-mnist", (_FASHION_URL,), "test_images", "t10k-images-idx3-ubyte.gz",
             "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073", "bef4ecab320f06d8554ea6380940ec79"),
        _idx("fashion-mnist", (_FASHION_URL,), "test_labels", "t10k-labels-idx1-ubyte.gz",
             "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5", "bb300cfdad3c16e7a12a480ee83cd310"),
    ),
    # The official python batches. sha256 as pinned by keras.datasets.cifar10 (md5 and size as on
    # the official page https://www.cs.toronto.edu/~kriz/cifar.html and in torchvision).
    "cifar10": (
        FileSpec("archive", "cifar10/cifar-10-python.tar.gz",
                 "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
                 (Source("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"),),
                 md5="c58f30108f718f92721af3b95e74349a", size=170_498_071),
    ),
    # Genuine CIFAR-10 pixels (first 4000 of data_batch_1, first 1000 of test_batch) rebuilt from the
    # ConvNetJS demo strips (see MANIFEST.md). No canonical download: copy it from shared/data, or
    # pass download(..., base_url=<a mirror holding cifar10_subset.npz>).
    "cifar10-subset": (
        FileSpec("npz", "cifar10-subset/cifar10_subset.npz",
                 "5e81f99fe5af185b32d0cb5efbf72c956a858f8e684fdfba6995f9e197878f5c", size=14_163_561),
    ),
    "insurance": (
        FileSpec("csv", "insurance/insurance.csv.gz",
                 "1a495fb86eb0e2ab5de6c43b170af6c7948c6f07d263a437f1143eb5938bb4b4",
                 (Source(_INSURANCE_URL, "gzip"),),
                 content_sha256="505c1cbc2e63d0363bac59501563df2530aadf4cdb9cfee226f4ef32f5468281"),
    ),
    "obesity": (
        FileSpec("csv", f"obesity/{_OBESITY_CSV}.gz",
                 "2ee1f894858a675e8930d04d84cf5be2ae64f78e8de53c453f694296203cec5c",
                 (Source(_OBESITY_URL, f"zip-gzip:{_OBESITY_CSV}"),),
                 content_sha256="28b6991062855d3d15642e38b1aa9d1b32fb7abbb5abf5b096f1868cd706154b"),
    ),
    "a9a": (
        FileSpec("train", "libsvm/a9a.gz", "b301f3e87350539f3ebc751d07b4691a8c66f0bf38c1d179c86bbf5e2d9623b2",
                 (Source(_LIBSVM_URL + "a9a", "gzip"),),
                 content_sha256="f5d5ffd8d865ff41328e7ee043e4b020816914ff6843ff15b98905ddbedce906"),
        FileSpec("test", "libsvm/a9a.t.gz", "92967561181c73a60149cc8221b936eb746573fda8cbf483115d673f42b26c3f",
                 (Source(_LIBSVM_URL + "a9a.t", "gzip"),),
                 content_sha256="1f448a153f0320399a7e40836eb207655b0bde0f21fc941cc472193daa9f5de9"),
    ),
    "w8a": (
        FileSpec("train", "libsvm/w8a.gz", "758d97c654378b34cca0160e7a6b2ac926d882b51dddd2f0d3d3743f0ed9135b",
                 (Source(_LIBSVM_URL + "w8a", "gzip"),),
                 content_sha256="b464b4f6ce6a5d9e181ffc793e19a04751036273722312398ef7673705014902"),
    ),
    "phishing": (
        FileSpec("train", "libsvm/phishing.gz", "ef3c8253cb6ac33b2849c2c4cee00c4199afe31ecb373c198bbc7e203829b082",
                 (Source(_LIBSVM_URL + "phishing", "crlf-gzip"),),
                 content_sha256="0cf66ef36604c393da9359b2e5d894a2df8aee31fd184633cefa138add2ef08a"),
    ),
    # UCI Covertype (581,012 rows: 54 integer features and the class 1-7, comma-separated), the source of
    # LIBSVM's covtype.binary (jaxfl.data.load_covtype_binary derives it). sha256 as pinned by
    # scikit-learn's fetch_covtype (sklearn/datasets/_covtype.py), whose figshare mirror is the second source.
    # Not in shared/data: fetched where a network exists.
    "covtype": (
        FileSpec("all", "covtype/covtype.data.gz", "614360d0257557dd1792834a85a1cdebfadc3c4f30b011d56afee7ffb5b15771",
                 (Source("https://archive.ics.uci.edu/ml/machine-learning-databases/covtype/covtype.data.gz"),
                  Source("https://ndownloader.figshare.com/files/5976039"))),
    ),
    # ijcnn1 as redistributed (unchanged) by tick-datasets: trn = LIBSVM ijcnn1.tr + ijcnn1.val,
    # tst = LIBSVM ijcnn1.t. The LIBSVM page (_LIBSVM_URL) is the reference; its bz2 files are
    # different bytes, so the byte-identical tick-datasets copy is the download source.
    "ijcnn1": (
        FileSpec("train", "libsvm/ijcnn1.trn.bz2", "b38a4198ce142d43e96fb86d17b87211feec1f909ac344fa057455c69de29de3",
                 (Source(_TICK_URL + "ijcnn1.trn.bz2"),),
                 content_sha256="7fe291672c3fefe6a7e3c51529becd23f0e985ba05ffb8d53c9c648c1e91cc19"),
        FileSpec("test", "libsvm/ijcnn1.tst.bz2", "acd1db430684fdd3f0c768ecc49aa8e749d0004fc117611220c2aa576a7b6a24",
                 (Source(_TICK_URL + "ijcnn1.tst.bz2"),),
                 content_sha256="e7b0bbd518641980dc322746c6bc59d019d3153934e6258e48f9d8cfae2c4bb8"),
    ),
}


def file_spec(name: str, key: str) -> FileSpec:
    """The registry entry ``key`` of dataset ``name``; ValueError naming either if unknown.

    Example:
      >>> spec = file_spec("mnist", "test_labels")
      >>> spec.path, len(spec.sha256)
      ('mnist/t10k-labels-idx1-ubyte.gz', 64)
      >>> file_spec("mnist", "nope")
      Traceback (most recent call last):
      ...
      ValueError: ...
    """
    if name not in REGISTRY:
        raise ValueError(f"unknown dataset {name!r} in the file registry (known: {', '.join(sorted(REGISTRY))})")
    for spec in REGISTRY[name]:
        if spec.key == key:
            return spec
    keys = ", ".join(s.key for s in REGISTRY[name])
    raise ValueError(f"dataset {name!r} has no file {key!r} (files: {keys})")


# ----------------------------------------------------------------------------------------------
# Data directories


def _project_roots() -> list[Path]:
    roots = []
    for start in (Path(__file__).resolve().parent, Path.cwd().resolve()):
        for d in (start, *start.parents):
            if (d / "pyproject.toml").is_file():
                if d not in roots:
                    roots.append(d)
                break
    return roots


def user_cache_dir() -> Path:
    """``~/.cache/jaxfl``: where downloads go when neither ``data_dir`` nor ``JAXFL_DATA_DIR`` is set.

    Example:
      >>> user_cache_dir().parts[-2:]
      ('.cache', 'jaxfl')
    """
    return Path.home() / ".cache" / "jaxfl"


def data_dirs(data_dir: str | os.PathLike | None = None) -> list[Path]:
    """The directories searched for data files, in order (see the module docstring).

    An explicit ``data_dir`` is the only directory searched. Otherwise the list holds
    ``$JAXFL_DATA_DIR`` (if set), each ``<repo root>/../shared/data`` that exists, and the user cache.

    Example:
      >>> data_dirs("my-data")                        # an explicit directory is the only one searched
      [PosixPath('my-data')]
    """
    if data_dir is not None:
        return [Path(data_dir).expanduser()]
    dirs = []
    env = os.environ.get(ENV_VAR)
    if env:
        dirs.append(Path(env).expanduser())
    for root in _project_roots():
        shared = (root.parent / "shared" / "data").resolve()
        if shared.is_dir() and shared not in dirs:
            dirs.append(shared)
    dirs.append(user_cache_dir())
    return dirs


def download_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """Where :func:`download` writes: ``data_dir``, else ``$JAXFL_DATA_DIR``, else ``~/.cache/jaxfl``.

    Example:
      >>> download_dir("my-data").as_posix()                   # a folder given wins over the environment
      'my-data'
      >>> import os
      >>> os.environ.get(ENV_VAR) is not None or download_dir() == user_cache_dir()
      True
    """
    if data_dir is not None:
        return Path(data_dir).expanduser()
    env = os.environ.get(ENV_VAR)
    return Path(env).expanduser() if env else user_cache_dir()


def find_file(relpath: str, data_dir: str | os.PathLike | None = None) -> Path | None:
    """The first ``<dir>/<relpath>`` that exists among :func:`data_dirs`, or None.

    Example:
      >>> find_file("mnist/no-such-file.gz") is None
      True
    """
    for d in data_dirs(data_dir):
        p = d / relpath
        if p.is_file():
            return p
    return None


# ----------------------------------------------------------------------------------------------
# Verification

_VERIFIED: dict[tuple[str, int, int, str], bool] = {}


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks.

    Example:
      >>> import hashlib, pathlib, tempfile
      >>> path = pathlib.Path(tempfile.mkdtemp()) / "f.txt"
      >>> _ = path.write_bytes(b"hello")
      >>> sha256_file(path) == hashlib.sha256(b"hello").hexdigest()
      True
    """
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _decompressed_sha256(path: Path, suffix: str) -> str | None:
    opener = {".gz": gzip.open, ".bz2": bz2.open}.get(suffix)
    if opener is None:
        return None
    h = hashlib.sha256()
    try:
        with opener(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except (OSError, EOFError, zlib.error):
        return None
    return h.hexdigest()


def verify(path: str | os.PathLike, spec: FileSpec) -> Path:
    """Checks ``path`` against ``spec`` and returns it; raises :class:`ChecksumError` on mismatch.

    A file passes when its sha256 equals ``spec.sha256``, or (files we compress) when its
    decompressed content's sha256 equals ``spec.content_sha256``. A pass is remembered for this
    process, keyed by path, size and mtime, so repeated loads hash each file once.

    Example:
      >>> import hashlib, pathlib, tempfile
      >>> path = pathlib.Path(tempfile.mkdtemp()) / "f.txt"
      >>> _ = path.write_bytes(b"hello")
      >>> spec = FileSpec("f", "f.txt", hashlib.sha256(b"hello").hexdigest())
      >>> verify(path, spec) == path
      True
      >>> verify(path, spec._replace(sha256="0" * 64))
      Traceback (most recent call last):
      ...
      jaxfl.data.sources.ChecksumError: ...
    """
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, spec.sha256)
    if _VERIFIED.get(key):
        return path
    actual = sha256_file(path)
    ok = actual == spec.sha256
    if not ok and spec.content_sha256 is not None:
        ok = _decompressed_sha256(path, Path(spec.path).suffix) == spec.content_sha256
    if not ok:
        raise ChecksumError(path, spec.sha256, actual)
    _VERIFIED[key] = True
    return path


def locate(name: str, key: str, data_dir: str | os.PathLike | None = None, *, download: bool = False) -> Path:
    """The verified path of file ``key`` of dataset ``name``.

    Searches :func:`data_dirs`; if the file is nowhere and ``download`` is True, fetches it with
    :func:`download` into :func:`download_dir`.

    Raises:
      FileNotFoundError: the file is missing and ``download`` is False (the message says where it
        looked and how to fetch it).
      ChecksumError: the file found has the wrong bytes.

    Example:
      >>> import tempfile
      >>> locate("mnist", "test_labels", tempfile.mkdtemp())
      Traceback (most recent call last):
      ...
      FileNotFoundError: mnist/t10k-labels-idx1-ubyte.gz (dataset 'mnist') not found in: ...
    """
    spec = file_spec(name, key)
    path = find_file(spec.path, data_dir)
    if path is None:
        if not download:
            where = ", ".join(str(d) for d in data_dirs(data_dir))
            raise FileNotFoundError(
                f"{spec.path} (dataset {name!r}) not found in: {where}. Pass download=True, call "
                f"jaxfl.data.download({name!r}), or set {ENV_VAR} to a directory holding it.")
        (path,) = _download_specs(name, [spec], download_dir(data_dir), base_url=None)
    return verify(path, spec)


# ----------------------------------------------------------------------------------------------
# Download


def _gzip(data: bytes) -> bytes:
    # Same header as `gzip -9 -n` (no name, mtime 0, XFL=2, OS=3 Unix); the deflate stream is zlib's.
    c = zlib.compressobj(9, zlib.DEFLATED, -15, 8)
    body = c.compress(data) + c.flush()
    trailer = zlib.crc32(data).to_bytes(4, "little") + (len(data) & 0xFFFFFFFF).to_bytes(4, "little")
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03" + body + trailer


def _apply_transform(transform: str, payload: bytes, spec: FileSpec) -> bytes:
    """Turns a downloaded payload into the cached bytes; checks ``content_sha256`` on the way."""
    if transform == "none":
        return payload
    if transform.startswith("zip-gzip:"):
        member = transform.split(":", 1)[1]
        try:
            with zipfile.ZipFile(io.BytesIO(payload)) as zf:
                payload = zf.read(member)
        except (zipfile.BadZipFile, KeyError) as e:
            raise ChecksumError(spec.path, spec.content_sha256 or spec.sha256,
                                f"<not a zip holding {member}: {e}>") from None
        transform = "gzip"
    if transform == "crlf-gzip":
        payload = payload.replace(b"\r\n", b"\n")
        if payload and not payload.endswith(b"\n"):
            payload += b"\n"
        transform = "gzip"
    if transform != "gzip":
        raise ValueError(f"unknown transform {transform!r} for {spec.path}")
    if spec.content_sha256 is not None:
        actual = hashlib.sha256(payload).hexdigest()
        if actual != spec.content_sha256:
            raise ChecksumError(f"{spec.path} (decompressed content)", spec.content_sha256, actual)
    return _gzip(payload)


def _fetch(url: str, timeout: float) -> bytes:
    req = urllib.request.Request(url, headers={"User-Agent": "jaxfl-data"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read()


def _fetch_to(url: str, fileobj, timeout: float) -> None:
    req = urllib.request.Request(url, headers={"User-Agent": "jaxfl-data"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for chunk in iter(lambda: r.read(1 << 20), b""):
            fileobj.write(chunk)


def _download_one(spec: FileSpec, source: Source, target: Path, timeout: float) -> Path:
    """Fetches ``source`` into ``target`` atomically (temp file + rename) and verifies it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            if source.transform == "none":
                _fetch_to(source.url, f, timeout)   # streamed: the CIFAR-10 archive is 170 MB
            else:
                f.write(_apply_transform(source.transform, _fetch(source.url, timeout), spec))
        verify(tmp, spec)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    st = target.stat()
    _VERIFIED[(str(target.resolve()), st.st_size, st.st_mtime_ns, spec.sha256)] = True
    return target


def _download_specs(name: str, specs: Iterable[FileSpec], target_dir: Path, *, base_url: str | None,
                    timeout: float = 60.0, force: bool = False) -> list[Path]:
    paths = []
    for spec in specs:
        target = target_dir / spec.path
        if target.is_file() and not force:
            try:
                paths.append(verify(target, spec))
                continue
            except ChecksumError:
                pass   # a corrupt cached copy is fetched again and replaced atomically
        if base_url is not None:
            first = spec.sources[0] if spec.sources else Source(spec.path)
            remote = urllib.parse.unquote(first.url.rstrip("/").rsplit("/", 1)[-1])
            sources = [Source(base_url.rstrip("/") + "/" + urllib.parse.quote(remote), first.transform)]
        else:
            sources = list(spec.sources)
        if not sources:
            raise ValueError(
                f"{spec.path} (dataset {name!r}) has no canonical download source; copy it from the "
                f"project's shared/data directory or pass base_url= pointing at a mirror")
        errors: list[BaseException] = []
        for source in sources:
            try:
                paths.append(_download_one(spec, source, target, timeout))
                break
            except ChecksumError as e:
                errors.append(e)
            except (urllib.error.URLError, OSError) as e:
                errors.append(OSError(f"{source.url}: {e}"))
        else:
            checksum = [e for e in errors if isinstance(e, ChecksumError)]
            if checksum:
                raise checksum[0]
            raise OSError(f"could not download {spec.path} (dataset {name!r}): "
                          + "; ".join(str(e) for e in errors))
    return paths


def download(name: str, data_dir: str | os.PathLike | None = None, *, base_url: str | None = None,
             files: Sequence[str] | None = None, force: bool = False, timeout: float = 60.0) -> list[Path]:
    """Fetches the files of dataset ``name`` that are missing from the download directory.

    Each file is fetched from its canonical source (or ``base_url + "/" + <source file name>`` when
    ``base_url`` is given, e.g. a mirror or a test server), transformed as its :class:`Source`
    says, written to a temp file beside the target, verified, and only then renamed into place, so
    a failed or corrupt download leaves nothing behind.

    Args:
      name: a registry name (``"mnist"``, ``"a9a"``, ...).
      data_dir: where to write (default: ``$JAXFL_DATA_DIR``, else ``~/.cache/jaxfl``).
      base_url: fetch from this URL prefix instead of the canonical sources.
      files: only these files, by key (``"test_labels"``) or relative path.
      force: download again even if a verified copy is present.
      timeout: socket timeout in seconds.

    Returns:
      The verified paths, in registry order.

    Raises:
      ValueError: unknown dataset or file. ChecksumError: the fetched bytes are wrong.
      OSError: no source could be reached.

    Example (a mirror given as ``base_url``; here the bundled copy, so it runs without a network):
      >>> import tempfile
      >>> mirror = find_file("mnist/t10k-labels-idx1-ubyte.gz").parent.as_uri()
      >>> target = tempfile.mkdtemp()
      >>> paths = download("mnist", target, base_url=mirror, files=["test_labels"])
      >>> [p.relative_to(target).as_posix() for p in paths]
      ['mnist/t10k-labels-idx1-ubyte.gz']
      >>> download("mnist", target, files=["nope"])
      Traceback (most recent call last):
      ...
      ValueError: ...
    """
    if name not in REGISTRY:
        raise ValueError(f"unknown dataset {name!r} (downloadable: {', '.join(sorted(REGISTRY))})")
    specs = list(REGISTRY[name])
    if files is not None:
        wanted = set(files)
        unknown = wanted - {s.key for s in specs} - {s.path for s in specs}
        if unknown:
            raise ValueError(f"dataset {name!r} has no file(s) {sorted(unknown)} "
                             f"(files: {', '.join(s.key for s in specs)})")
        specs = [s for s in specs if s.key in wanted or s.path in wanted]
    return _download_specs(name, specs, download_dir(data_dir), base_url=base_url, timeout=timeout, force=force)
