"""Federated algorithms, each a factory returning a :class:`jaxfl.engine.FederatedAlgorithm`.

One module per concept: ``sgd`` (DP-SGD, minibatch SGD and Local SGD on the engine), ``dp_fedavg``,
``noisy_sgd`` (noisy minibatch / Local SGD under ISRL-DP with their calibrations), ``accelerated`` (AC-SA made
ISRL-DP: one pass, federated ERM, multi-stage), ``variance_reduced`` (noisy prox-SGD/GD, FedProx-SVRG / PL-SVRG,
FedProx-SPIDER), ``shuffled`` (the shuffle-model versions of both), ``averaging`` (output averaging of iterates),
``prox`` (proximal operators composable with optax, and the Moreau envelope), ``personalized`` and ``joint_dp``
(private and shared parameters: joint differential privacy), ``async_dp`` (asynchronous rounds with growing sample
sizes; its host timeline in ``async_timeline``, its sample- and step-size sequences in ``async_schedules``),
``dprec`` (relative-entropy-coded updates as the privacy mechanism), ``scaffold``. Each module's docstring cites
the papers it implements under References; :doc:`/papers/index` maps each paper to its functions.
"""
from jaxfl.algorithms import (accelerated, async_dp, async_schedules, async_timeline, averaging, dprec, joint_dp,
                              noisy_sgd, prox, shuffled, variance_reduced)
from jaxfl.algorithms.async_dp import async_sgd, delayed_sgd, sync_sgd
from jaxfl.algorithms.dp_fedavg import dp_fedavg
from jaxfl.algorithms.dprec import dp_rec
from jaxfl.algorithms.joint_dp import ansgd, nssgd
from jaxfl.algorithms.personalized import personalized
from jaxfl.algorithms.scaffold import scaffold
from jaxfl.algorithms.sgd import dp_sgd, local_sgd, minibatch_sgd

__all__ = ["accelerated", "ansgd", "async_dp", "async_schedules", "async_sgd", "async_timeline", "averaging",
           "sync_sgd", "delayed_sgd", "dp_fedavg", "dp_rec", "dp_sgd", "dprec", "joint_dp", "local_sgd",
           "minibatch_sgd", "noisy_sgd",
           "nssgd", "personalized", "prox", "scaffold", "shuffled", "variance_reduced"]
