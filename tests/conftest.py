"""Shared fixtures."""
import pytest

from _helpers import make_silos
from jaxfl.data.federated import from_silos


def pytest_collection_modifyitems(config, items):
    """Full-size reproductions (``full``: hours) run only when ``-m`` names them: a ``-m`` that replaces the
    default one (e.g. ``-m "not slow"``) would otherwise select them."""
    if "full" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="a full-size reproduction (hours): run with -m full")
    for item in items:
        if item.get_closest_marker("full") is not None:
            item.add_marker(skip)


@pytest.fixture
def small_data():
    """Five silos of unequal size (padding present), 5 features, binary labels."""
    return from_silos(make_silos([40, 25, 33, 40, 18]))
