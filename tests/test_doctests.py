"""Every example in a docstring of jaxfl runs and prints what it shows (doctest), one test per module."""
import doctest
import importlib
import pkgutil

import pytest

import jaxfl


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


def test_some_modules_have_examples():
    assert {"jaxfl.algorithms.sgd", "jaxfl.models.rewrite"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name} (run with -s to see)"
