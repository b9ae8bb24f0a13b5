"""Quick forms of the reproductions, each run once per test session and only when a test asks for it."""
import fcntl
import json
import os

import pytest

from jaxfl.cli import main


class QuickRuns(dict):
    """``runs[name] -> (out_dir, results.json as a dict)`` of ``jaxfl reproduce NAME --quick``, run on first
    use, so a test tier that skips a paper's heavier quick forms never pays for them.

    Under pytest-xdist the workers of one session share the runs: the first worker to ask for a form runs it in
    the session's common temporary folder under a file lock, and the others wait for it and read the result, so a
    form is never computed twice in parallel. Tests treat the folder as read-only (they copy before changing)."""

    def __init__(self, tmp_path_factory):
        super().__init__()
        base = tmp_path_factory.getbasetemp()
        # xdist gives each worker basetemp/popen-gwN under one folder per session; without xdist, basetemp itself
        self._root = (base.parent if "PYTEST_XDIST_WORKER" in os.environ else base) / "quick-forms"
        self._root.mkdir(parents=True, exist_ok=True)

    def __missing__(self, name):
        directory = self._root / name.replace("/", "_")
        with open(self._root / f"{directory.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            done = directory / "results.json"
            if not done.exists():
                assert main(["reproduce", name, "--quick", "--out", str(directory)]) == 0
            self[name] = (directory, json.loads(done.read_text()))
        return self[name]


@pytest.fixture(scope="session")
def quick_results(tmp_path_factory):
    return QuickRuns(tmp_path_factory)
