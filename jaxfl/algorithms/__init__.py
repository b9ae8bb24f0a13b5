"""Federated algorithms, each a factory returning a :class:`jaxfl.engine.FederatedAlgorithm`."""
from jaxfl.algorithms.dp_fedavg import dp_fedavg
from jaxfl.algorithms.sgd import local_sgd, minibatch_sgd

__all__ = ["dp_fedavg", "local_sgd", "minibatch_sgd"]
