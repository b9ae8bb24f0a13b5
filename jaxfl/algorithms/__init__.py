"""Federated algorithms, each a factory returning a :class:`jaxfl.engine.FederatedAlgorithm`.

``isrl`` holds seed 000's ISRL-DP algorithms for convex losses (noisy MB-SGD with its calibrations,
accelerated AC-SA one-pass / ERM / multi-stage, ISRL-DP Local SGD, shuffle-model variants);
``nonconvex`` seed 002's (prox-SGD/GD, FedProx-SVRG / PL-SVRG, FedProx-SPIDER, Alt Fed-SPIDER and
their shuffle-model versions); ``prox`` the proximal operators they step with (composable with optax);
``dp_rec`` seed 004's DP-REC (relative-entropy-coded updates as the privacy mechanism).
"""
from jaxfl.algorithms import dp_rec, isrl, nonconvex, prox
from jaxfl.algorithms.dp_fedavg import dp_fedavg
from jaxfl.algorithms.personalized import personalized
from jaxfl.algorithms.scaffold import scaffold
from jaxfl.algorithms.sgd import local_sgd, minibatch_sgd

__all__ = ["dp_fedavg", "dp_rec", "isrl", "local_sgd", "minibatch_sgd", "nonconvex", "personalized", "prox", "scaffold"]
