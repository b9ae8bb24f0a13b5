"""jaxfl: differentially private federated learning across silos, in JAX."""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("jaxfl")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.1.0"

from jaxfl.data.federated import FederatedData, from_silos
from jaxfl.engine import FederatedAlgorithm, RoundPrivacy, sweep, train

__all__ = ["FederatedData", "from_silos", "FederatedAlgorithm", "RoundPrivacy", "sweep", "train", "__version__"]
