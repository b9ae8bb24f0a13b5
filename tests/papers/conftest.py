"""Quick forms of the reproductions, each run once per test session and only when a test asks for it."""
import json

import pytest

from jaxfl.cli import main


class QuickRuns(dict):
    """``runs[name] -> (out_dir, results.json as a dict)`` of ``jaxfl reproduce NAME --quick``, run on first
    use, so a test tier that skips a paper's heavier quick forms never pays for them."""

    def __init__(self, tmp_path_factory):
        super().__init__()
        self._tmp = tmp_path_factory

    def __missing__(self, name):
        directory = self._tmp.mktemp(name.replace("/", "_"))
        assert main(["reproduce", name, "--quick", "--out", str(directory)]) == 0
        self[name] = (directory, json.loads((directory / "results.json").read_text()))
        return self[name]


@pytest.fixture(scope="session")
def quick_results(tmp_path_factory):
    return QuickRuns(tmp_path_factory)
