"""Quick forms of the reproductions, each run once per test run and only when a test asks for it."""
import json

import pytest
from filelock import FileLock

from jaxfl.cli import main


class QuickRuns(dict):
    """``runs[name] -> (out_dir, results.json as a dict)`` of ``jaxfl reproduce NAME --quick``, run on first
    use, so a test tier that skips a paper's heavier quick forms never pays for them. The folder is shared by
    the run's xdist workers: the first to ask runs the quick form under a file lock, the others wait for it and
    read the same results (they only read or copy it)."""

    def __init__(self, root):
        super().__init__()
        self._root = root

    def __missing__(self, name):
        directory = self._root / name.replace("/", "_")
        with FileLock(f"{directory}.lock"):
            if not (directory / "results.json").is_file():
                assert main(["reproduce", name, "--quick", "--out", str(directory)]) == 0
        self[name] = (directory, json.loads((directory / "results.json").read_text()))
        return self[name]


@pytest.fixture(scope="session")
def quick_results(tmp_path_factory, worker_id):
    root = tmp_path_factory.getbasetemp()
    if worker_id != "master":  # each worker's basetemp is a folder of the run's own
        root = root.parent
    root = root / "quick_forms"
    root.mkdir(exist_ok=True)
    return QuickRuns(root)
