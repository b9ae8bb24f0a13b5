"""The docs site builds with warnings as errors, executing every notebook at its small settings."""
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_docs_site_builds_with_warnings_as_errors(tmp_path):
    """Sphinx + MyST-NB: the API reference from the docstrings, every page, and the notebooks run top to bottom
    (a failing cell, a broken cross-reference or a malformed docstring fails the build)."""
    build = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                            str(REPO / "docs"), str(tmp_path / "html")], cwd=REPO, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-6000:]
    notebooks = sorted(p.stem for p in (REPO / "notebooks").glob("*.ipynb"))
    assert len(notebooks) >= 7
    for name in notebooks:
        page = (tmp_path / "html" / "notebooks" / f"{name}.html").read_text()
        assert "Traceback" not in page, name
    api = (tmp_path / "html" / "api" / "algorithms.html").read_text()
    assert 'id="jaxfl.algorithms.sgd.dp_sgd"' in api
