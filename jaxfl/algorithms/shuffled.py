"""Shuffle-model (SDP) algorithms: a secure shuffler permutes the silos' reports before the server sees them.

* :func:`shuffled_minibatch_sgd` -- noisy MB-SGD with ``K = 1`` and ``M`` silos a round, the reports shuffled;
  privacy both per silo (ISRL-DP) and for the shuffled transcript (central);
* :func:`sdp_accelerated_minibatch_sgd` -- one-pass AC-SA whose per-record gradients are summed by P_vec
  (:mod:`jaxfl.privacy.shuffle`);
* :func:`sdp_prox_sgd`, :func:`sdp_fedprox_spider`, :func:`sdp_fedprox_svrg` -- the variance-reduced proximal
  methods (:mod:`jaxfl.algorithms.variance_reduced`) with P_vec in place of Gaussian noise.

References:
  A. Lowy and M. Razaviyayn. "Private Federated Learning Without a Trusted Server: Optimal Algorithms
  for Convex Losses." ICLR 2023 (arXiv 2106.09779).
  A. Lowy, A. Ghafelebashi and M. Razaviyayn. "Private Non-Convex Federated Learning Without a Trusted
  Server." AISTATS 2023 (PMLR 206).
"""
from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from jaxfl import checks
from jaxfl.algorithms.common import check_params, model_template
from jaxfl.engine import local
from jaxfl.engine.participation import argument as participation_argument
from jaxfl.engine.protocol import FederatedAlgorithm
from jaxfl.accounting.events import PvecDpEvent, ShuffledGaussianDpEvent
from jaxfl.engine.rounds import participant_count_sum, weighted_sum
from jaxfl.privacy import keys as keys_lib
from jaxfl.privacy import shuffle
from jaxfl.privacy.clipping import per_example_grads



from jaxfl.algorithms.accelerated import one_pass_privacy
from jaxfl.algorithms.accelerated import AcsaSchedule, _acsa
from jaxfl.algorithms.noisy_sgd import noisy_minibatch_sgd
from jaxfl.algorithms.variance_reduced import SPIDER, SVRG, _pvec, _pvec_privacy, _sampler, _variance_reduced


# ------------------------------------------------------------------------------------------------
# Shuffle model (§3.5, §3.6)


def _shuffled_sum(messages, weights, round_key):
    """The shuffler: a uniform permutation of the silos' reports (keyed by the round), then the sum."""
    key = keys_lib.derive_from_round(round_key, silo=keys_lib.SERVER, step=0, purpose=keys_lib.Purpose.SHUFFLE)
    perm = jax.random.permutation(key, weights.shape[0])
    return weighted_sum(jax.tree_util.tree_map(lambda m: m[perm], messages), weights[perm], round_key)


def shuffled_minibatch_sgd(loss_fn, *, step_size, clip_norm: float, noise_multiplier: float,
                           participation: int | None = None, silos_per_round=None,
                           projection: Callable | None = None, averaging: str = "last", mu: float = 0.0,
                           name: str | None = None) -> FederatedAlgorithm:
    """Shuffled Noisy MB-SGD (Thm 5.1 / G.1): Alg. 2 with ``K = 1``, ``M`` uniformly available silos and a
    secure shuffler permuting their reports before the server averages them.

    Privacy, both stated per round: each silo's own transcript (ISRL-DP: one with-replacement-sampled
    Gaussian; accountant ``"lowy"``), and the shuffled transcript's central guarantee
    (:class:`jaxfl.accounting.shuffle_model.ShuffledGaussianDpEvent`, accountant ``"shuffle"``; Lowy & Razaviyayn
    leaves the constant ``C`` of its sigma unspecified, so jaxfl accounts the chain numerically instead).
    Get both from :func:`jaxfl.engine.driver.make_ledger` (``central=True`` for the second).

    Example (four silos report a clipped noisy gradient of one record each round, shuffled):
      >>> import jax, numpy as np, jaxfl
      >>> from jaxfl.models import binary_accuracy, init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (4, 200, 3)))            # 4 silos of 200 records
      >>> y = (x[..., 0] > 0).astype(np.float32)
      >>> data = jaxfl.from_silos([(x[i], y[i]) for i in range(4)])
      >>> algorithm = shuffled_minibatch_sgd(logistic_loss, step_size=0.5, clip_norm=1.0, noise_multiplier=1.0,
      ...                                    participation=4)
      >>> result = jaxfl.train(algorithm, data, init_linear(3), rounds=20, progress=False)
      >>> float(binary_accuracy(result.params, x.reshape(-1, 3), y.reshape(-1))) > 0.7
      True
    """
    participation = participation_argument(participation, silos_per_round, "shuffled_minibatch_sgd")
    if not isinstance(participation, (int, np.integer)):
        raise ValueError(f"shuffled_minibatch_sgd needs participation=M, a fixed number of silos per round (the "
                         f"shuffle model amplifies M of the N silos), got {participation!r}")
    m = int(participation)
    alg = noisy_minibatch_sgd(loss_fn, step_size=step_size, batch_size=1, clip_norm=clip_norm,
                              noise_multiplier=noise_multiplier, participation=m, projection=projection,
                              averaging=averaging, mu=mu, aggregator=_shuffled_sum,
                              name=name or "shuffled_noisy_mbsgd")
    if alg.privacy is None:
        return alg
    silo_privacy = alg.privacy

    def privacy(counts):
        counts = np.asarray(counts)
        real = counts[counts > 0]
        if m > len(real):
            raise ValueError(f"participation={m} exceeds the {len(real)} silos with records")
        central = ShuffledGaussianDpEvent(float(noise_multiplier), m, len(real), int(real.min()))
        return silo_privacy(counts)._replace(central=central)

    return alg._replace(privacy=privacy)


def sdp_accelerated_minibatch_sgd(loss_fn, *, params, schedule: AcsaSchedule, batch_size: int, clip_norm: float,
                                  shuffle_params: shuffle.ShuffleParams, mu: float = 0.0, regularization: float = 0.0,
                                  participation=None, silos_per_round=None, projection: Callable | None = None,
                                  name: str | None = None) -> FederatedAlgorithm:
    """SDP one-pass accelerated noisy MB-SGD (Alg. 6): AC-SA whose gradients are summed by P_vec.

    Each available silo draws ``K`` fresh records (disjoint across rounds), clips every per-record gradient
    to ``L = clip_norm`` (global L2 norm of the flattened pytree) and runs P_vec's local randomizer on each;
    the shuffled bits are counted per coordinate; the analyzer's unbiased sum over the ``M_r K`` reports,
    divided by ``M_r K``, is the gradient of the AC-SA step (:func:`accelerated_minibatch_sgd`).

    Privacy: the shuffled transcript of a round is P_vec over ``M K`` users
    (:class:`jaxfl.accounting.shuffle_model.PvecDpEvent`, accountant ``"shuffle"``; ``M`` must then be a
    fixed number of silos per round); disjoint batches make the whole run as private as one round
    (parallel composition, ``R <= floor(n_min / K)``). Each silo's own transcript (its per-coordinate
    counts) gets :func:`jaxfl.privacy.shuffle.local_epsilon`'s guarantee (usually weak: P_vec calibrates
    its noise for the pooled sum). Choose parameters with :func:`jaxfl.privacy.shuffle.pvec_parameters`.

    ``params``: the initial model parameters, or a template with the same structure and shapes
    (:func:`jaxfl.algorithms.common.model_template`): P_vec's events need the model dimension, and the
    server unflattens the decoded sum, before any ``init``.

    Example:
      >>> import jax, numpy as np, jaxfl
      >>> from jaxfl.models import binary_accuracy, init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (4, 200, 3)))            # 4 silos of 200 records
      >>> y = (x[..., 0] > 0).astype(np.float32)
      >>> data = jaxfl.from_silos([(x[i], y[i]) for i in range(4)])
      >>> from jaxfl.algorithms.accelerated import acsa_schedule
      >>> from jaxfl.privacy.shuffle import ShuffleParams
      >>> algorithm = sdp_accelerated_minibatch_sgd(
      ...     logistic_loss, params=init_linear(3), batch_size=10, clip_norm=1.0,
      ...     schedule=acsa_schedule(20, smoothness=0.25, noise_std=0.5, radius=10.0),
      ...     shuffle_params=ShuffleParams(64, 200, 0.25))
      >>> result = jaxfl.train(algorithm, data, init_linear(3), rounds=20, progress=False)
      >>> float(binary_accuracy(result.params, x.reshape(-1, 3), y.reshape(-1))) > 0.9
      True
    """
    participation = participation_argument(participation, silos_per_round, "sdp_accelerated_minibatch_sgd")
    k = int(batch_size)
    if not clip_norm > 0 or math.isinf(clip_norm):
        raise ValueError(f"clip_norm must be finite and > 0 (it is P_vec's L), got {clip_norm}")
    template = model_template(params)
    pvec = shuffle.ShuffleParams(*shuffle_params)

    def message(w_md, batch, noise_key, z):
        del z
        grads = per_example_grads(loss_fn, w_md, batch.x, batch.y)
        flat = jax.vmap(lambda g: ravel_pytree(g)[0])(grads)
        return shuffle.randomize(noise_key, flat, batch.weights, clip_norm, pvec, clip=True), {}

    def decode(total, ctx):
        users = (ctx.total_weight * k).astype(jnp.int32)
        estimate = shuffle.analyze(total, users, clip_norm, pvec)
        inverse = jnp.where(users > 0, 1.0 / jnp.maximum(users, 1).astype(jnp.float32), 0.0)
        return template.unravel(estimate * inverse)

    def events_for(counts):
        return [PvecDpEvent(*pvec, num_users=k, dim=template.size) for n in counts if n > 0]

    def central_for(real):
        if not isinstance(participation, int):
            raise ValueError("the central P_vec guarantee needs a fixed number of silos per round "
                             f"(participation=int), got {participation!r}")
        return PvecDpEvent(*pvec, num_users=int(participation) * k, dim=template.size)

    alg = _acsa(schedule=schedule, batch_size=k, mu=mu, regularization=regularization, sampling="one_pass",
                participation=participation, projection=projection, message_fn=message,
                aggregator=participant_count_sum, decode=decode, privacy=one_pass_privacy(k, events_for, central_for),
                name=name or "sdp_accelerated_mbsgd", noise_multiplier=0.0)
    acsa_init = alg.init

    def init(p):
        check_params(template, p, alg.name)
        return acsa_init(p)

    return alg._replace(init=init)
# ------------------------------------------------------------------------------------------------
# Shuffle-model (SDP) versions


def _check_pvec(clip_norm, participation):
    checks.positive_float("clip_norm (P_vec's bound L)", clip_norm)
    if not isinstance(participation, (int, np.integer)):
        raise ValueError(f"the shuffle model needs a fixed number of silos per round, got {participation!r}")


def sdp_prox_sgd(loss_fn, *, params, step_size, batch_size: int, clip_norm: float,
                 shuffle_params: shuffle.ShuffleParams, participation: int | None = None, silos_per_round=None,
                 prox=None, sampling: str = "one_pass",
                 output: str = "last", name: str | None = None) -> FederatedAlgorithm:
    """SDP noisy distributed proximal SGD (Alg. 7): the ``M K`` clipped per-record gradients of a round are
    summed by P_vec (parameters ``shuffle_params``, e.g. :func:`jaxfl.privacy.shuffle.pvec_parameters` at
    :func:`jaxfl.accounting.variance_reduced_noise.sdp_prox_sgd_pvec`'s ``(N eps / (2M), delta)``) and the server
    steps with their mean. One pass over disjoint batches by default (parallel composition). ``params``: the
    model's initial parameters or a template of them (the P_vec events need its dimension).

    Example (P_vec with 200 noise bits per user and coordinate; usually from
    :func:`jaxfl.privacy.shuffle.pvec_parameters`):

      >>> import jax, numpy as np, jaxfl
      >>> from jaxfl.models import binary_accuracy, init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (4, 200, 3)))            # 4 silos of 200 records
      >>> y = (x[..., 0] > 0).astype(np.float32)
      >>> data = jaxfl.from_silos([(x[i], y[i]) for i in range(4)])
      >>> from jaxfl.privacy.shuffle import ShuffleParams
      >>> algorithm = sdp_prox_sgd(logistic_loss, params=init_linear(3), step_size=0.5, batch_size=10, clip_norm=1.0,
      ...                          shuffle_params=ShuffleParams(64, 200, 0.25), participation=4)
      >>> result = jaxfl.train(algorithm, data, init_linear(3), rounds=20, progress=False)
      >>> float(binary_accuracy(result.params, x.reshape(-1, 3), y.reshape(-1))) > 0.9
      True
    """
    participation = participation_argument(participation, silos_per_round, "sdp_prox_sgd")
    _check_pvec(clip_norm, participation)
    template = model_template(params)
    pvec = shuffle.ShuffleParams(*shuffle_params)
    mechanism = _pvec(loss_fn, clip_norm, pvec, pvec, template)
    sampler = _sampler(batch_size)
    privacy = _pvec_privacy(SPIDER, 1, pvec, pvec, int(batch_size), int(batch_size), participation, template.size)
    if sampling == "one_pass":
        stated = privacy

        def privacy(counts):
            stated_round = stated(counts)
            real = np.asarray(counts)[np.asarray(counts) > 0]
            return stated_round._replace(composition="parallel", round_limit=int(real.min()) // int(batch_size))
    return _variance_reduced(
        kind=SPIDER, period=1, mechanism=mechanism, step_size=step_size, prox=prox, sampling=sampling,
        fresh_sampler=sampler, diff_sampler=sampler, clip_norm=clip_norm, smoothness=None,
        participation=int(participation), output=output, restart_length=None, privacy=privacy,
        name=name or "sdp_prox_sgd")


def sdp_fedprox_spider(loss_fn, *, params, step_size, phase_length: int, clip_norm: float,
                       checkpoint_params: shuffle.ShuffleParams, difference_params: shuffle.ShuffleParams,
                       participation: int | None = None, silos_per_round=None,
                       batch_size: int | None = None, difference_batch_size: int | None = None,
                       smoothness: float | None = None, prox=None, output: str = "last",
                       name: str | None = None) -> FederatedAlgorithm:
    """SDP FedProx-SPIDER (Alg. 10): :func:`fedprox_spider` whose checkpoints and differences are summed by
    P_vec (bound ``C`` for gradients, ``min(2C, beta ||dw||)`` for differences), with the parameters of
    :func:`jaxfl.accounting.variance_reduced_noise.sdp_spider_pvec`. ``params``: the model's initial parameters or a
    template of them.

    Example:
      >>> import jax, numpy as np, jaxfl
      >>> from jaxfl.models import binary_accuracy, init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (4, 200, 3)))            # 4 silos of 200 records
      >>> y = (x[..., 0] > 0).astype(np.float32)
      >>> data = jaxfl.from_silos([(x[i], y[i]) for i in range(4)])
      >>> from jaxfl.privacy.shuffle import ShuffleParams
      >>> pvec = ShuffleParams(64, 200, 0.25)
      >>> algorithm = sdp_fedprox_spider(logistic_loss, params=init_linear(3), step_size=0.5, phase_length=5,
      ...                                clip_norm=1.0, checkpoint_params=pvec, difference_params=pvec, batch_size=20,
      ...                                participation=4)
      >>> result = jaxfl.train(algorithm, data, init_linear(3), rounds=20, progress=False)
      >>> float(binary_accuracy(result.params, x.reshape(-1, 3), y.reshape(-1))) > 0.9
      True
    """
    participation = participation_argument(participation, silos_per_round, "sdp_fedprox_spider")
    _check_pvec(clip_norm, participation)
    template = model_template(params)
    fresh_params, diff_params = shuffle.ShuffleParams(*checkpoint_params), shuffle.ShuffleParams(*difference_params)
    mechanism = _pvec(loss_fn, clip_norm, fresh_params, diff_params, template)
    fresh_sampler = _sampler(batch_size)
    diff_k = batch_size if difference_batch_size is None else difference_batch_size
    diff_sampler = _sampler(diff_k)
    return _variance_reduced(
        kind=SPIDER, period=phase_length, mechanism=mechanism, step_size=step_size, prox=prox,
        sampling=fresh_sampler.kind, fresh_sampler=fresh_sampler, diff_sampler=diff_sampler, clip_norm=clip_norm,
        smoothness=smoothness, participation=int(participation), output=output, restart_length=None,
        privacy=_pvec_privacy(SPIDER, phase_length, fresh_params, diff_params, batch_size, diff_k, participation,
                              template.size),
        name=name or "sdp_fedprox_spider")


def sdp_fedprox_svrg(loss_fn, *, params, step_size, batch_size: int, epoch_length: int, clip_norm: float,
                     checkpoint_params: shuffle.ShuffleParams, difference_params: shuffle.ShuffleParams,
                     participation: int | None = None, silos_per_round=None,
                     smoothness: float | None = None, prox=None, output: str = "uniform",
                     restart_length: int | None = None, name: str | None = None) -> FederatedAlgorithm:
    """SDP FedProx-SVRG (Alg. 8; with ``restart_length``, Alg. 9's SDP FedProx-PL-SVRG): checkpoints sum all
    ``M n`` clipped per-record gradients by P_vec, inner steps the ``M K`` clipped differences (bound
    ``2C``); parameters from :func:`jaxfl.accounting.variance_reduced_noise.sdp_svrg_pvec`. ``params``: the model's
    initial parameters or a template of them.

    Example:
      >>> import jax, numpy as np, jaxfl
      >>> from jaxfl.models import binary_accuracy, init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (4, 200, 3)))            # 4 silos of 200 records
      >>> y = (x[..., 0] > 0).astype(np.float32)
      >>> data = jaxfl.from_silos([(x[i], y[i]) for i in range(4)])
      >>> from jaxfl.algorithms.variance_reduced import output_params
      >>> from jaxfl.privacy.shuffle import ShuffleParams
      >>> pvec = ShuffleParams(64, 200, 0.25)
      >>> algorithm = sdp_fedprox_svrg(logistic_loss, params=init_linear(3), step_size=0.5, batch_size=20,
      ...                              epoch_length=5, clip_norm=1.0, checkpoint_params=pvec, difference_params=pvec,
      ...                              participation=4)
      >>> result = jaxfl.train(algorithm, data, init_linear(3), rounds=20, progress=False)
      >>> float(binary_accuracy(output_params(result.state), x.reshape(-1, 3), y.reshape(-1))) > 0.9
      True
    """
    participation = participation_argument(participation, silos_per_round, "sdp_fedprox_svrg")
    _check_pvec(clip_norm, participation)
    template = model_template(params)
    fresh_params, diff_params = shuffle.ShuffleParams(*checkpoint_params), shuffle.ShuffleParams(*difference_params)
    mechanism = _pvec(loss_fn, clip_norm, fresh_params, diff_params, template)
    full, sampler = local.make_sampler(), _sampler(batch_size)
    return _variance_reduced(
        kind=SVRG, period=epoch_length, mechanism=mechanism, step_size=step_size, prox=prox, sampling="full",
        fresh_sampler=full, diff_sampler=sampler, clip_norm=clip_norm, smoothness=smoothness,
        participation=int(participation), output=output, restart_length=restart_length,
        privacy=_pvec_privacy(SVRG, epoch_length, fresh_params, diff_params, None, int(batch_size), participation,
                              template.size),
        name=name or ("sdp_fedprox_pl_svrg" if restart_length else "sdp_fedprox_svrg"))
