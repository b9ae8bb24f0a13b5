"""Shared fixtures."""
import pytest

from _helpers import make_silos
from jaxfl.data.federated import from_silos


@pytest.fixture
def small_data():
    """Five silos of unequal size (padding present), 5 features, binary labels."""
    return from_silos(make_silos([40, 25, 33, 40, 18]))
