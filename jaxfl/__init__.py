"""jaxfl: differentially private federated learning across silos, in JAX.

Subpackages: :mod:`jaxfl.data` (silo-major datasets, loaders, partitioners), :mod:`jaxfl.privacy`
(keys, clipping, noise, optax transforms), :mod:`jaxfl.accounting` (accountants, ledgers, closed
forms), :mod:`jaxfl.engine` (algorithm protocol, rounds, driver, sweeps, sharding),
:mod:`jaxfl.algorithms`, :mod:`jaxfl.models`, :mod:`jaxfl.studies` (privacy-utility studies: spec, runner, reports).
"""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("jaxfl")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.2.0"

from jaxfl import accounting, algorithms, data, engine, models, privacy
from jaxfl.data.federated import FederatedData, from_silos
from jaxfl.algorithms import dp_fedavg, dp_sgd, local_sgd, minibatch_sgd
from jaxfl.engine import FederatedAlgorithm, RoundPrivacy, sweep, train

__all__ = ["FederatedData", "from_silos", "FederatedAlgorithm", "RoundPrivacy", "sweep", "train", "dp_sgd",
           "dp_fedavg", "minibatch_sgd", "local_sgd", "accounting",
           "algorithms", "data", "engine", "models", "privacy", "__version__"]
