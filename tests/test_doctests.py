"""Every example in a docstring of jaxfl runs and prints what it shows (doctest), one test per module."""
import doctest
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import jaxfl
from jaxfl.data.sources import find_file


def _modules_with_examples():
    names = []
    for info in pkgutil.walk_packages(jaxfl.__path__, "jaxfl."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        if any(test.examples for test in doctest.DocTestFinder(exclude_empty=True).find(module)):
            names.append(info.name)
    return names


MODULES = _modules_with_examples()

#: Modules whose examples read the bundled data files (``../shared/data`` or ``$JAXFL_DATA_DIR``): skipped, as the
#: data tests are, on a machine without them.
NEEDS_DATA = {"jaxfl.data.loaders": "mnist/t10k-images-idx3-ubyte.gz",
              "jaxfl.data.sources": "mnist/t10k-labels-idx1-ubyte.gz"}


#: Modules whose examples take over ~5 s on one core (they train or audit several algorithms): the slow tier.
SLOW = {"jaxfl.models.nets", "jaxfl.algorithms.shuffled", "jaxfl.algorithms.variance_reduced", "jaxfl.privacy.shuffle",
        "jaxfl.audit", "jaxfl.audit.catalogue", "jaxfl.accounting.moments", "jaxfl.studies.registry",
        "jaxfl.privacy.ghost", "jaxfl.models.conv"}


def test_some_modules_have_examples():
    assert {"jaxfl.algorithms.sgd", "jaxfl.models.rewrite"} <= set(MODULES) and SLOW <= set(MODULES)


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name
                                  for name in MODULES])
def test_docstring_examples_run(name):
    if name in NEEDS_DATA and find_file(NEEDS_DATA[name]) is None:
        pytest.skip(f"{name}'s examples read {NEEDS_DATA[name]}, not found here (set JAXFL_DATA_DIR)")
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name} (run with -s to see)"


def _documented_modules():
    text = "".join(path.read_text() for path in (Path(__file__).parents[1] / "docs" / "api").glob("*.md"))
    return sorted(set(re.findall(r"automodule:: ([\w.]+)", text)))


def test_every_documented_function_and_class_has_an_example():
    """What the API reference documents (its modules' public functions and classes, ``__all__`` where a module has
    one) carries a runnable example or names the one that shows it ("Example: :func:`...`"). Functions built by a
    factory (the model-bound losses, ``per_example_loss(model, loss)``) are documented with their module."""
    modules = _documented_modules()
    assert len(modules) > 50
    missing = []
    for name in modules:
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]:
            value = getattr(module, attr)
            if not (inspect.isfunction(value) or inspect.isclass(value)) or value.__module__ != name:
                continue
            if "<locals>" in value.__qualname__:
                continue
            doc = inspect.getdoc(value) or ""
            if ">>>" not in doc and "Example" not in doc:
                missing.append(f"{name}.{attr}")
    assert not missing, "no example in the docstrings of: " + ", ".join(missing)
