"""Sphinx configuration of the jaxfl docs site (Sphinx + MyST-NB, sphinx-book-theme).

Build: ``python -m sphinx -W --keep-going -b html docs docs/_build/html`` (what ``tests/test_docs_site.py``
runs). Before reading the sources it copies ``notebooks/*.ipynb`` into ``docs/notebooks/`` (executed by MyST-NB
at their small settings), each paper home's ``papers/<home>/README.md`` into ``docs/papers/<home>.md`` (its links
made relative to the docs), and writes the benchmark table from ``bench/results/*.json`` into
``docs/_generated/benchmarks.md``; all of these are git-ignored.
"""
import importlib.util
import re
import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
REPO = DOCS.parent
sys.path.insert(0, str(REPO))

project = "jaxfl"
author = "the jaxfl authors"
copyright = "2026, the jaxfl authors"
from importlib.metadata import version as _version  # noqa: E402

release = _version("jaxfl")
version = release

extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.mathjax",
              "sphinx.ext.intersphinx"]
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3
exclude_patterns = ["_build", "_generated", "jupyter_execute", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]

html_theme = "sphinx_book_theme"
html_title = f"jaxfl {release}"
html_theme_options = {"repository_url": "https://github.com/jaxfl/jaxfl", "use_repository_button": False,
                      "show_toc_level": 2}

autodoc_typehints = "none"
autodoc_member_order = "bysource"
autodoc_default_options = {"show-inheritance": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True
intersphinx_mapping = {}

# Notebooks run at their small settings on every build; an error in a cell fails the build.
nb_execution_mode = "force"
nb_execution_timeout = 600
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True


def _copy_notebooks() -> None:
    target = DOCS / "notebooks"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    for notebook in sorted((REPO / "notebooks").glob("*.ipynb")):
        shutil.copy2(notebook, target / notebook.name)


def _copy_paper_readmes() -> None:
    """``papers/<home>/README.md`` -> ``docs/papers/<home with hyphens>.md`` (the studies' name prefix): links into the
    docs (``../../docs/X``) become ``../X``, and the home's own files (``results/...``) are reached from the docs
    folder."""
    for readme in sorted((REPO / "papers").glob("*/README.md")):
        home, page = readme.parent.name, readme.parent.name.replace("_", "-")
        text = readme.read_text()
        text = text.replace("](../../docs/", "](../").replace("](results/", f"](../../papers/{home}/results/")
        # a link to one of the home's files (not a page of the docs) is named, not linked
        text = re.sub(r"(?<!!)\[([^]]*)\]\((\.\./\.\./papers/[^)]*)\)", lambda m: f"`{m.group(2)[6:]}`", text)
        (DOCS / "papers" / f"{page}.md").write_text(text)


def _write_benchmark_table() -> None:
    spec = importlib.util.spec_from_file_location("bench_summary", REPO / "bench" / "summary.py")
    summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(summary)
    target = DOCS / "_generated"
    target.mkdir(exist_ok=True)
    (target / "benchmarks.md").write_text("\n".join(summary.rows(REPO / "bench" / "results")) + "\n")


_copy_notebooks()
_write_benchmark_table()
_copy_paper_readmes()
