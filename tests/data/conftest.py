"""Fixtures for the jaxfl.data tests: the shared data files and a local HTTP server."""
from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

import pytest

from jaxfl.data.sources import find_file


def _shared_file(relpath: str) -> Path:
    path = find_file(relpath)
    if path is None:
        pytest.skip(f"shared data file {relpath} not found (set JAXFL_DATA_DIR or provide ../shared/data)")
    return path


@pytest.fixture
def shared():
    """``shared(relpath)``: the data file found by the library's own resolution, or skip the test."""
    return _shared_file


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def http_dir(tmp_path):
    """``(served_dir, base_url)``: a thread serving ``served_dir`` on 127.0.0.1."""
    served = tmp_path / "served"
    served.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield served, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
