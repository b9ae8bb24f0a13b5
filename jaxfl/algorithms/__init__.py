"""Federated algorithms, each a factory returning a :class:`jaxfl.engine.FederatedAlgorithm`.

Modules are named after the paper whose algorithms they hold, as in :mod:`jaxfl.accounting` and
:mod:`jaxfl.experiments`: ``lowy_convex`` holds Lowy & Razaviyayn's ISRL-DP algorithms for convex losses (noisy
MB-SGD with its calibrations, accelerated AC-SA one-pass / ERM / multi-stage, ISRL-DP Local SGD,
shuffle-model variants); ``lowy_nonconvex`` Lowy et al.'s (prox-SGD/GD, FedProx-SVRG / PL-SVRG,
FedProx-SPIDER, Alt Fed-SPIDER and their shuffle-model versions); ``dprec`` Triastcyn et al.'s DP-REC
(relative-entropy-coded updates as the privacy mechanism); ``joint_dp`` Huang et al.'s A_NSGD and A_NSSGD (its
experiments' regimes are :func:`personalized` with different parameter partitions); ``async_dp`` van Dijk et al.'s
asynchronous protocol (its host timeline in ``async_timeline``, its sample- and step-size sequences in
``async_schedules``). ``prox`` holds the proximal operators they step with (composable with optax).
"""
from jaxfl.algorithms import (async_dp, async_schedules, async_timeline, dprec, joint_dp, lowy_convex, lowy_nonconvex,
                              prox)
from jaxfl.algorithms.async_dp import async_sgd, sync_sgd
from jaxfl.algorithms.dp_fedavg import dp_fedavg
from jaxfl.algorithms.dprec import dp_rec
from jaxfl.algorithms.joint_dp import ansgd, nssgd
from jaxfl.algorithms.personalized import personalized
from jaxfl.algorithms.scaffold import scaffold
from jaxfl.algorithms.sgd import dp_sgd, local_sgd, minibatch_sgd

__all__ = ["ansgd", "async_dp", "async_schedules", "async_sgd", "async_timeline", "sync_sgd", "dp_fedavg", "dp_rec",
           "dp_sgd", "dprec", "joint_dp", "local_sgd", "lowy_convex", "lowy_nonconvex", "minibatch_sgd",
           "nssgd", "personalized", "prox", "scaffold"]
