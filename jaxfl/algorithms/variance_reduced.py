"""Variance-reduced noisy proximal methods for non-convex composite losses ``f(w, x) = f0(w, x) + f1(w)``
under ISRL-DP (and, in :mod:`jaxfl.algorithms.shuffled`, the shuffle model).

* :func:`noisy_prox_sgd` -- Alg. 6 (noisy distributed proximal SGD; one pass over disjoint batches,
  parallel composition) and :func:`noisy_prox_gd` (full local batches);
* :func:`fedprox_svrg` -- Alg. 1 (epochs of a noisy full-batch checkpoint plus noisy SVRG differences)
  and :func:`fedprox_pl_svrg` -- Alg. 2 (restarts from the uniformly drawn iterate, for proximal-PL losses);
* :func:`fedprox_spider` -- Alg. 3 (a checkpoint every ``q`` rounds, SPIDER differences between) and
  :func:`alt_fed_spider` -- Alg. 11, the alternate implementation of the experiments;
* the shuffle-model versions (Algs. 7-10) are in :mod:`jaxfl.algorithms.shuffled`: every per-record vector
  is run through P_vec's local randomizer (:mod:`jaxfl.privacy.shuffle`) and the shuffled counts are
  decoded by the server.

All of them are one round program (:func:`_variance_reduced`) on the shared engine: a silo's message in a
round is a *fresh* part (its clipped minibatch gradient at ``w_r``) and/or a *difference* part (the mean
of ``clip(grad f0(w_r, x)) - clip(grad f0(w_ref, x))`` over a minibatch, ``w_ref`` the previous iterate
for SPIDER or the epoch's anchor for SVRG), each privatized; the server keeps the running gradient
estimate, as the silos' messages are averages and every estimate in the papers is a server-side sum
of averaged messages (SPIDER's ``h_r = h_{r-1} + H_r``, SVRG's ``g~ + p~_t``). The server step is
``w_{r+1} = prox_{eta f1}(w_r - eta v_r)`` as an optax transformation
(:func:`jaxfl.algorithms.prox.proximal`).

Clipping is per example on the global L2 norm ``C`` (the paper's ``L``; the authors' code clips per
tensor, which weakens the stated epsilon). Clipping is nonexpansive, so a clipped difference is bounded
by ``min(2C, beta ||w_r - w_ref||)`` for ``beta``-smooth ``f0``: the difference noise is
``z2 * min(2C, beta ||dw||)`` on the sum (the paper's ``min{sigma_2^2 ||dw||^2, sigma_hat_2^2}`` rule),
and ``z2 * 2C`` when no smoothness is given (the experiments' ``sigma_2 = inf``). Either way every
difference step is a Gaussian of noise multiplier ``z2`` relative to its sensitivity.

Privacy statements (per silo, ``level="record"``): noise multipliers are the noise std over the bound on
each record's contribution to the privatized sum (``C`` for gradients, ``2C`` for differences), i.e. over
the add/remove-one sensitivity; the statement names its neighbouring relation (``RoundPrivacy.relation``)
and the accountants apply it (:func:`jaxfl.accounting.events.clipped_sum_gaussian`). Minibatches drawn with
replacement, one-pass batches and full batches (divided by the silo's own size ``n_i``, public only under
this relation) are stated for replace-one neighbours (the paper's relation; accountant ``"lowy"`` for draws,
``"rdp"``/``"pld"`` for one pass and full batches). Rounds of different kinds compose through
:class:`jaxfl.accounting.events.RoundCycleDpEvent`. The shuffle-model versions take the model's
``params=`` (or a template) up front: their P_vec events need its dimension before any ``init``.

References:
  A. Lowy, A. Ghafelebashi and M. Razaviyayn. "Private Non-Convex Federated Learning Without a Trusted
  Server." AISTATS 2023 (PMLR 206).
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from jaxfl.accounting.events import PvecDpEvent, RoundCycleDpEvent, clipped_sum_gaussian
from jaxfl.algorithms import prox as prox_lib
from jaxfl import checks
from jaxfl.algorithms.common import check_params, check_private_args, is_concrete_zero as is_zero, safe_mean
from jaxfl.algorithms.accelerated import one_pass_batch, one_pass_privacy
from jaxfl.engine import local
from jaxfl.engine.participation import argument as participation_argument, resolve
from jaxfl.engine.protocol import FederatedAlgorithm, RoundPrivacy
from jaxfl.engine.rounds import Aggregator, make_round, participant_count_sum, weighted_sum
from jaxfl.privacy import keys as keys_lib
from jaxfl.privacy import shuffle, uniform
from jaxfl.privacy.clipping import clip_by_global_norm, clipped_grad_sum, per_example_grads
from jaxfl.privacy.microbatch import check_microbatch
from jaxfl.privacy.noise import gaussian_like, noisy_clipped_mean


SPIDER, SVRG = "spider", "svrg"
SAMPLINGS = ("with_replacement", "one_pass", "full")


class VarianceReducedState(NamedTuple):
    """Server state of Lowy, Ghafelebashi & Razaviyayn's algorithms.

    Attributes:
      params: the current iterate ``w_r``.
      opt_state: the server optimizer's state.
      round: ``r``, rounds completed.
      reference: SPIDER: the previous iterate ``w_{r-1}``; SVRG: the epoch's anchor ``w_bar``.
      estimate: SPIDER: the running gradient estimate ``h_{r-1}``; SVRG: the epoch's checkpoint ``g~``.
      output: the reported model: ``w_r`` (``output="last"``) or an iterate drawn uniformly from those
        of the run (``output="uniform"``; for PL-SVRG, of the current restart).
      seed: ``uint32`` key data kept across rounds: the epoch's participation key (SVRG), the key that
        fixes one-pass batch orders (prox-SGD).

    Example: :func:`fedprox_spider` (``result.state``).
    """

    params: Any
    opt_state: Any
    round: jnp.ndarray
    reference: Any
    estimate: Any
    output: Any
    seed: jnp.ndarray


def output_params(state: VarianceReducedState):
    """The model the algorithm reports (its ``output`` rule), e.g. for evaluation.

    Example: :func:`fedprox_svrg`.
    """
    return state.output


# ------------------------------------------------------------------------------------------------
# Mechanisms: how a silo privatizes a fresh gradient or a difference, and how the server decodes them


class _Mechanism(NamedTuple):
    fresh: Callable          # (params, batch, key) -> message
    difference: Callable     # (params, reference, batch, key, bound) -> message
    aggregator: Callable     # (messages, weights, round_key) -> aggregate
    decode_fresh: Callable   # (aggregate, ctx) -> mean gradient pytree
    decode_difference: Callable  # (aggregate, ctx, bound) -> mean difference pytree
    init: Callable = lambda params: None  # checks init's params against what the mechanism was built for


def _gaussian(loss_fn, clip_norm, z_fresh, z_diff, microbatch="auto") -> _Mechanism:
    """ISRL-DP: each silo adds its own Gaussian noise (std ``z C`` on a clipped sum, ``z2 * bound`` on a
    clipped difference sum) and sends its mean; the server averages over participants. ``microbatch``: how
    each clipped sum is sliced (:func:`jaxfl.privacy.clipping.clipped_grad_sum`)."""
    microbatch = check_microbatch(microbatch)

    def fresh(params, batch, key):
        return local.noisy_batch_gradient(loss_fn, params, batch, key, clip_norm=clip_norm, noise_multiplier=z_fresh,
                                          microbatch=microbatch)[0]

    def difference(params, reference, batch, key, bound):
        def clipped(at):
            return clipped_grad_sum(loss_fn, at, batch.x, batch.y, batch.weights, clip_norm, microbatch=microbatch)
        at_w, at_ref = clipped(params).value, clipped(reference).value
        noiseless = z_diff is None or is_zero(z_diff)
        return noisy_clipped_mean(jax.tree_util.tree_map(jnp.subtract, at_w, at_ref),
                                  None if noiseless else gaussian_like(key, params, 1.0), clip_norm=bound,
                                  noise_multiplier=0 if noiseless else z_diff, denominator=batch.denominator)

    return _Mechanism(fresh, difference, weighted_sum,
                      decode_fresh=lambda summed, ctx: safe_mean(summed, ctx.total_weight),
                      decode_difference=lambda summed, ctx, bound: safe_mean(summed, ctx.total_weight))


def _pvec(loss_fn, clip_norm, fresh_params: shuffle.ShuffleParams, diff_params: shuffle.ShuffleParams,
          template) -> _Mechanism:
    """Shuffle model: every record's clipped vector goes through P_vec's local randomizer (bound ``C``
    for gradients, ``bound`` for differences); a silo's message is its per-coordinate count of one-bits
    and its number of reports, the exact shuffled transcript (:func:`jaxfl.privacy.shuffle.randomize`);
    the server runs the analyzer on the pooled counts and divides by the number of reports, unflattened
    by ``template`` (:func:`jaxfl.algorithms.common.model_template` of the factory's ``params``)."""

    def flat_grads(params, batch):
        clipped, _ = clip_by_global_norm(per_example_grads(loss_fn, params, batch.x, batch.y), clip_norm)
        return jax.vmap(lambda g: ravel_pytree(g)[0])(clipped)

    def report(key, vectors, batch, bound, params):
        ones = shuffle.randomize(key, vectors, batch.weights, bound, params, clip=True)
        return ones, jnp.sum(batch.weights > 0).astype(jnp.int32)

    def decoder(params):
        def decode(total, ctx, bound=clip_norm):
            ones, users = total
            inverse = jnp.where(users > 0, 1.0 / jnp.maximum(users, 1).astype(jnp.float32), 0.0)
            return template.unravel(shuffle.analyze(ones, users, bound, params) * inverse)
        return decode

    def init(params):
        check_params(template, params, "the shuffle-model (P_vec) algorithm")

    return _Mechanism(
        fresh=lambda params, batch, key: report(key, flat_grads(params, batch), batch, clip_norm, fresh_params),
        difference=lambda params, reference, batch, key, bound: report(
            key, flat_grads(params, batch) - flat_grads(reference, batch), batch, bound, diff_params),
        aggregator=participant_count_sum, decode_fresh=decoder(fresh_params), decode_difference=decoder(diff_params),
        init=init)


# ------------------------------------------------------------------------------------------------
# The shared round


def _maybe(pred, fn):
    """``fn()`` if ``pred`` else zeros of its shape, skipping the work when ``pred`` is false and not batched."""
    shape = jax.eval_shape(fn)
    return jax.lax.cond(pred, fn, lambda: jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shape))


def _select(pred, a, b):
    return jax.tree_util.tree_map(lambda u, v: jnp.where(pred, u, v), a, b)


def _fresh_batch(sampling, sampler, x, y, count, silo_key, silo_index, round_index, pass_seed):
    if sampling == "one_pass":
        return one_pass_batch(x, y, count, sampler.batch_size, silo_index, round_index, pass_seed, silo_key)
    return sampler(keys_lib.step_key(silo_key, 0, keys_lib.Purpose.MINIBATCH), x, y, count)


def _check_common(kind, period, sampling, output, restart_length):
    checks.one_of("sampling", sampling, SAMPLINGS)
    checks.one_of("output", output, ("last", "uniform"))
    if isinstance(period, (int, np.integer)) and int(period) < 1:
        raise ValueError(f"{'phase_length' if kind == SPIDER else 'epoch_length'} must be >= 1, got {period}")
    if restart_length is not None and (int(restart_length) < 1 or int(restart_length) % int(period)):
        raise ValueError(f"restart_length must be a positive multiple of the epoch length {period}, "
                         f"got {restart_length}")


def _variance_reduced(*, kind: str, period, mechanism: _Mechanism, step_size, prox, sampling: str,
                      fresh_sampler: local.Sampler, diff_sampler: local.Sampler, clip_norm, smoothness,
                      participation, output: str, restart_length, privacy, name: str) -> FederatedAlgorithm:
    """The round program of every algorithm of Lowy, Ghafelebashi & Razaviyayn (see the module docstring).

    ``kind="spider"``: round ``r`` is a checkpoint (fresh part only) when ``r % period == 0``, else a
    difference against ``w_{r-1}``; ``h_r`` is the fresh mean or ``h_{r-1}`` plus the difference mean.
    ``kind="svrg"``: every round sends a difference against the epoch's anchor, and the first round of
    each epoch of ``period`` rounds also a fresh (checkpoint) part at the anchor, which is the current
    iterate; ``v = g~ + difference``; one silo sample per epoch. ``restart_length`` (SVRG): every so
    many rounds the iterate restarts from the drawn output (PL-SVRG).
    """
    _check_common(kind, period, sampling, output, restart_length)
    never_differs = kind == SPIDER and isinstance(period, (int, np.integer)) and int(period) == 1
    server_opt = prox_lib.proximal(optax.sgd(step_size), prox, step_size) if prox is not None else optax.sgd(step_size)
    two_c = 2.0 * clip_norm

    def phase(r):
        return r % period

    def init(params):
        mechanism.init(params)
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        seed = jax.random.key_data(jax.random.key(0))
        return VarianceReducedState(params, server_opt.init(params), jnp.zeros([], jnp.int32), params, zeros,
                                    params, seed)

    def reference_of(state):
        if kind == SVRG:  # the anchor: the current iterate at an epoch's first round
            return _select(phase(state.round) == 0, state.params, state.reference)
        return state.reference

    def bound_of(params, reference):
        if smoothness is None:
            return jnp.asarray(two_c, jnp.float32)
        step = optax.tree.norm(jax.tree_util.tree_map(jnp.subtract, params, reference))
        return jnp.minimum(two_c, smoothness * step)

    def broadcast(state):
        reference = reference_of(state)
        return state.params, reference, state.round, state.seed, bound_of(state.params, reference)

    def client(sent, x, y, count, silo_key, silo_index):
        params, reference, r, seed, bound = sent
        first = phase(r) == 0

        def fresh():
            batch = _fresh_batch(sampling, fresh_sampler, x, y, count, silo_key, silo_index, r, seed)
            return mechanism.fresh(params, batch, keys_lib.step_key(silo_key, 0, keys_lib.Purpose.NOISE))

        def difference():
            batch = diff_sampler(keys_lib.step_key(silo_key, 1, keys_lib.Purpose.MINIBATCH), x, y, count)
            return mechanism.difference(params, reference, batch,
                                        keys_lib.step_key(silo_key, 1, keys_lib.Purpose.NOISE), bound)

        if never_differs:
            return (fresh(), None), {}
        differs = jnp.logical_not(first) if kind == SPIDER else jnp.asarray(True)
        return (_maybe(first, fresh), _maybe(differs, difference)), {}

    def participation_key(state, round_key):
        if kind != SVRG:
            return round_key
        stored = jax.random.wrap_key_data(state.seed)
        return jax.random.wrap_key_data(jnp.where(phase(state.round) == 0, jax.random.key_data(round_key),
                                                  jax.random.key_data(stored)))

    def server(state, aggregate, ctx):
        r = state.round
        first = phase(r) == 0
        fresh_part, diff_part = aggregate
        fresh = mechanism.decode_fresh(fresh_part, ctx)
        reference = reference_of(state)
        if never_differs:
            direction, estimate = fresh, fresh
        else:
            diff = mechanism.decode_difference(diff_part, ctx, bound_of(state.params, reference))
            if kind == SPIDER:
                estimate = _select(first, fresh, jax.tree_util.tree_map(jnp.add, state.estimate, diff))
                direction = estimate
            else:
                estimate = _select(first, fresh, state.estimate)
                direction = jax.tree_util.tree_map(jnp.add, estimate, diff)
        updates, opt_state = server_opt.update(direction, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        position = r % restart_length if restart_length else r
        if output == "uniform":  # reservoir sampling: w_{r+1} replaces the kept iterate w.p. 1/(position+1)
            key = keys_lib.derive_from_round(ctx.round_key, silo=keys_lib.SERVER, step=0, purpose=keys_lib.Purpose.AUX)
            keep_new = uniform.uniform(key) * (position + 1).astype(jnp.float32) < 1.0
            out = _select(keep_new, params, state.output)
        else:
            out = params
        if restart_length:
            params = _select(position + 1 == restart_length, out, params)
        new_reference = state.params if kind == SPIDER else reference
        if kind == SVRG:
            seed = jnp.where(first, jax.random.key_data(ctx.round_key), state.seed)
        else:
            seed = jnp.where(r == 0, jax.random.key_data(ctx.round_key), state.seed)
        info = {"update_norm": optax.tree.norm(direction)}
        return VarianceReducedState(params, opt_state, r + 1, new_reference, estimate, out, seed), info

    return FederatedAlgorithm(
        init=init,
        round=make_round(client, server, resolve(participation), broadcast=broadcast, per_silo=jnp.arange,
                         aggregator=_pair_aggregator(mechanism.aggregator), participation_key=participation_key),
        privacy=privacy, name=name)


def _pair_aggregator(aggregator):
    """Aggregates the (fresh, difference) message pair part by part (a missing part stays None)."""

    def aggregate(messages, weights, round_key):
        return tuple(None if m is None else aggregator(m, weights, round_key) for m in messages)

    return Aggregator(aggregate, participants_only=isinstance(aggregator, Aggregator) and aggregator.participants_only)


# ------------------------------------------------------------------------------------------------
# Privacy statements


def _cycle(first, later, period: int):
    """The per-round event of a silo: ``first`` at phase 0, ``later`` at the other ``period - 1`` phases."""
    return first if period == 1 else RoundCycleDpEvent((first,) + (later,) * (period - 1))


def _gaussian_privacy(kind, period, fresh_sampler, diff_sampler, z_fresh, z_diff):
    """``counts -> RoundPrivacy`` for the Gaussian mechanisms: per silo with records, the fresh part's
    sampled Gaussian ``z_fresh`` and the difference's ``z_diff`` (each relative to its per-record bound).
    Replace-one neighbours when either part's sampler is stated for it (draws with replacement, or a sum
    divided by the silo's own size: :attr:`jaxfl.engine.local.Sampler.relation`), else add/remove-one."""
    samplers = (fresh_sampler,) if z_diff is None else (fresh_sampler, diff_sampler)
    relation = (dp_accounting.NeighboringRelation.REPLACE_ONE
                if any(s.relation is dp_accounting.NeighboringRelation.REPLACE_ONE for s in samplers)
                else dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)

    def privacy(counts):
        q = int(period)
        events = []
        for n in np.asarray(counts):
            if n <= 0:
                continue
            fresh = fresh_sampler.event(int(n), float(z_fresh))
            diff = diff_sampler.event(int(n), float(z_diff)) if z_diff is not None else None
            if kind == SPIDER:
                events.append(_cycle(fresh, diff, q))
            else:
                events.append(_cycle(dp_accounting.ComposedDpEvent([fresh, diff]), diff, q))
        return RoundPrivacy(events=tuple(events), level="record", relation=relation)

    return privacy


def _pvec_privacy(kind, period, fresh_params, diff_params, fresh_reports, diff_reports, participation, dim: int):
    """``counts -> RoundPrivacy`` for the shuffle-model versions: each silo's own reports (per silo, its
    counts are P_vec over its own ``K`` reports) and, as ``central``, the shuffled round over the ``M``
    silos' pooled reports (accountant ``"shuffle"``, replace-one neighbours; no amplification by
    subsampling is claimed). ``dim``: the model dimension."""

    def events(reports_of, m):
        def pair(n):
            fresh = PvecDpEvent(*fresh_params, num_users=m * reports_of(fresh_reports, n), dim=dim)
            diff = PvecDpEvent(*diff_params, num_users=m * reports_of(diff_reports, n), dim=dim)
            first = fresh if kind == SPIDER else dp_accounting.ComposedDpEvent([fresh, diff])
            return _cycle(first, diff, int(period))
        return pair

    def reports(k, n):
        return int(n) if k is None else int(k)

    def privacy(counts):
        counts = np.asarray(counts)
        real = counts[counts > 0]
        if not isinstance(participation, (int, np.integer)) or not 0 < participation <= len(real):
            raise ValueError("the shuffled (central) guarantee needs a fixed number of silos per round, "
                             f"1 <= participation <= {len(real)}; got {participation!r}")
        per_silo = [events(reports, 1)(n) for n in real]
        central = events(lambda k, n: reports(k, int(real.min())), int(participation))(int(real.min()))
        return RoundPrivacy(events=tuple(per_silo), level="record",
                            relation=dp_accounting.NeighboringRelation.REPLACE_ONE, central=central)

    return privacy


# ------------------------------------------------------------------------------------------------
# ISRL-DP algorithms


def _sampler(batch_size):
    return local.make_sampler(batch_size=batch_size) if batch_size is not None else local.make_sampler()


def fedprox_spider(loss_fn, *, step_size, phase_length, clip_norm, batch_size: int | None = None,
                   difference_batch_size: int | None = None, noise_multiplier=0.0, difference_noise_multiplier=None,
                   smoothness: float | None = None, prox=None, participation=None, silos_per_round=None,
                   output: str = "last",
                   microbatch="auto", name: str | None = None) -> FederatedAlgorithm:
    """ISRL-DP FedProx-SPIDER (Alg. 3).

    Round ``r``: if ``r % q == 0`` each available silo sends its clipped minibatch gradient at ``w_r``
    plus ``N(0, (z1 C)^2)`` on the sum (``h_r`` = their mean); otherwise the mean over a fresh minibatch
    of ``clip(grad f0(w_r, x)) - clip(grad f0(w_{r-1}, x))`` (same records at both points) plus noise of
    std ``z2 min(2C, beta ||w_r - w_{r-1}||)`` on the sum, and ``h_r = h_{r-1} + mean``. Then
    ``w_{r+1} = prox_{eta f1}(w_r - eta h_r)``. ``q = 1`` is noisy (prox) minibatch SGD.

    Args:
      loss_fn: per-example ``f0(params, x, y)``.
      step_size: ``eta`` (the theory's ``1 / (2 beta)``). May be traced.
      phase_length: ``q``. An int, or traced in sweeps (then both branches are computed).
      clip_norm: ``C``, the per-example global L2 clip (the paper's ``L``).
      batch_size / difference_batch_size: ``K1`` / ``K2`` draws with replacement (the experiments);
        None: the full local batch (the theory's ``K1 = K2 = n``).
      noise_multiplier / difference_noise_multiplier: ``z1``, ``z2`` (default ``z1``). From the paper's
        sigmas (std on a mean of ``K`` terms): ``z1 = sigma_1 K / C``, ``z2 = sigma_hat_2 K / (2C)``
        (:mod:`jaxfl.accounting.variance_reduced_noise`).
      smoothness: ``beta`` of ``f0``, if known: the difference noise then shrinks with
        ``||w_r - w_{r-1}||``. The guarantee rests on ``f0`` really being ``beta``-smooth.
      prox: a :mod:`jaxfl.algorithms.prox` operator for ``f1`` (None: ``f1 = 0``).
      output: ``"last"`` (``w_R``) or ``"uniform"`` (an iterate drawn uniformly, the theory's output;
        server-side post-processing). Read it with :func:`output_params`.
      microbatch: each clipped sum (fresh and difference) taken in slices of this many records: ``"auto"``
        (default; slices on the CPU backend when a batch's intermediates overflow the cache), ``None`` (the
        whole batch at once) or an int (:mod:`jaxfl.privacy.microbatch`). Memory and speed only: the same
        sums to float rounding, the same privacy. The other constructors of this module take it too.

    Privacy per silo and round: a sampled Gaussian ``z1`` at checkpoints, ``z2`` otherwise, composed
    round by round through a :class:`~jaxfl.accounting.ledger.RoundCycleDpEvent` (``"lowy"`` for draws
    with replacement, ``"rdp"`` for full batches).

    Example (a checkpoint every 5 rounds; no delta given, so no ledger is built):
      >>> import jax, numpy as np, jaxfl
      >>> from jaxfl.models import binary_accuracy, init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (4, 200, 3)))            # 4 silos of 200 records
      >>> y = (x[..., 0] > 0).astype(np.float32)
      >>> data = jaxfl.from_silos([(x[i], y[i]) for i in range(4)])
      >>> algorithm = fedprox_spider(logistic_loss, step_size=0.5, phase_length=5, clip_norm=1.0, batch_size=20,
      ...                            noise_multiplier=2.0)
      >>> result = jaxfl.train(algorithm, data, init_linear(3), rounds=20, progress=False)
      >>> int(result.state.round), float(binary_accuracy(result.params, x.reshape(-1, 3), y.reshape(-1))) > 0.7
      (20, True)
    """
    participation = participation_argument(participation, silos_per_round, "fedprox_spider")
    private = check_private_args(clip_norm, noise_multiplier)
    z2 = noise_multiplier if difference_noise_multiplier is None else difference_noise_multiplier
    if private and is_zero(z2):
        raise ValueError("difference_noise_multiplier=0 with noisy checkpoints leaks the differences")
    fresh_sampler = _sampler(batch_size)
    diff_sampler = _sampler(batch_size if difference_batch_size is None else difference_batch_size)
    return _variance_reduced(
        kind=SPIDER, period=phase_length, mechanism=_gaussian(loss_fn, clip_norm, noise_multiplier, z2, microbatch),
        step_size=step_size, prox=prox, sampling=fresh_sampler.kind, fresh_sampler=fresh_sampler,
        diff_sampler=diff_sampler, clip_norm=clip_norm, smoothness=smoothness, participation=participation,
        output=output, restart_length=None,
        privacy=_gaussian_privacy(SPIDER, phase_length, fresh_sampler, diff_sampler, noise_multiplier, z2)
        if private else None,
        name=name or ("dp_fedprox_spider" if private else "fedprox_spider"))


def alt_fed_spider(loss_fn, *, step_size, batch_size: int, clip_norm, noise_multiplier=0.0,
                   difference_noise_multiplier=None, participation=None, silos_per_round=None, output: str = "last",
                   microbatch="auto", name: str | None = None) -> FederatedAlgorithm:
    """ISRL-DP Fed-SPIDER, the alternate implementation (Alg. 11, no prox): each of its rounds sends a
    SPIDER difference and a fresh gradient, two messages and two model updates. This is
    :func:`fedprox_spider` with ``q = 2``: **one Alg.-11 round is two engine rounds** (a difference round
    then a fresh round; engine round 0 is its initial fresh gradient), so run ``2 R`` rounds for its ``R``.
    Noise as its §H.2: ``sigma_fresh^2 = 8 L^2 R ln(2/delta) / (n^2 eps^2)``, ``sigma_diff^2 = 32 ...``
    (:func:`jaxfl.accounting.variance_reduced_noise.sigma_alt_spider`); the ledger composes all ``2 R`` messages
    (the paper's accounting counts ``R``).

    Example (20 engine rounds are 10 of Alg. 11's):
      >>> import jax, numpy as np, jaxfl
      >>> from jaxfl.models import binary_accuracy, init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (4, 200, 3)))            # 4 silos of 200 records
      >>> y = (x[..., 0] > 0).astype(np.float32)
      >>> data = jaxfl.from_silos([(x[i], y[i]) for i in range(4)])
      >>> algorithm = alt_fed_spider(logistic_loss, step_size=0.5, batch_size=20, clip_norm=1.0, noise_multiplier=2.0)
      >>> result = jaxfl.train(algorithm, data, init_linear(3), rounds=20, progress=False)
      >>> float(binary_accuracy(result.params, x.reshape(-1, 3), y.reshape(-1))) > 0.9
      True
    """
    participation = participation_argument(participation, silos_per_round, "alt_fed_spider")
    return fedprox_spider(loss_fn, step_size=step_size, phase_length=2, clip_norm=clip_norm, batch_size=batch_size,
                          noise_multiplier=noise_multiplier, difference_noise_multiplier=difference_noise_multiplier,
                          participation=participation, output=output, microbatch=microbatch,
                          name=name or ("dp_alt_fed_spider" if not is_zero(noise_multiplier) else "alt_fed_spider"))


def noisy_prox_sgd(loss_fn, *, step_size, batch_size: int | None, clip_norm, noise_multiplier=0.0, prox=None,
                   participation=None, silos_per_round=None,
                   sampling: str = "one_pass", output: str = "last", microbatch="auto",
                   name: str | None = None) -> FederatedAlgorithm:
    """ISRL-DP noisy distributed proximal SGD (Alg. 6): each available silo sends its clipped minibatch
    gradient at ``w_r`` plus ``N(0, (z C)^2)`` on the sum; ``w_{r+1} = prox_{eta f1}(w_r - eta mean)``
    (theory: ``eta = 1 / (2 beta)``).

    ``sampling="one_pass"`` (the paper): disjoint batches of ``K = floor(n / R)`` records in a per-silo
    random order fixed for the run, so the run is as private as one round (parallel composition, at most
    ``floor(n_min / K)`` rounds); calibrate ``z`` with
    :func:`jaxfl.accounting.variance_reduced_noise.sigma_prox_sgd`
    (``z = sigma K / C``; the events state it for replace-one neighbours). ``"with_replacement"``: ``K``
    draws with replacement every round (rounds compose). ``"full"`` (``batch_size=None``): see
    :func:`noisy_prox_gd`.

    Example (one pass over disjoint batches of 10: each record is used once, so the run costs one round):
      >>> import jax, numpy as np, jaxfl
      >>> from jaxfl.models import binary_accuracy, init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (4, 200, 3)))            # 4 silos of 200 records
      >>> y = (x[..., 0] > 0).astype(np.float32)
      >>> data = jaxfl.from_silos([(x[i], y[i]) for i in range(4)])
      >>> algorithm = noisy_prox_sgd(logistic_loss, step_size=0.5, batch_size=10, clip_norm=1.0, noise_multiplier=2.0)
      >>> result = jaxfl.train(algorithm, data, init_linear(3), rounds=20, delta=1e-5, accountant="pld", progress=False)
      >>> round(result.epsilon, 2), float(binary_accuracy(result.params, x.reshape(-1, 3), y.reshape(-1))) > 0.8
      (4.38, True)
    """
    participation = participation_argument(participation, silos_per_round, "noisy_prox_sgd")
    private = check_private_args(clip_norm, noise_multiplier)
    if sampling == "full" or batch_size is None:
        sampling, batch_size = "full", None
    sampler = _sampler(batch_size)
    if not private:
        privacy = None
    elif sampling == "one_pass":
        privacy = one_pass_privacy(int(batch_size), lambda counts: [
            clipped_sum_gaussian(float(noise_multiplier), dp_accounting.NeighboringRelation.REPLACE_ONE)
            for n in counts if n > 0])
    else:
        privacy = _gaussian_privacy(SPIDER, 1, sampler, sampler, noise_multiplier, None)
    return _variance_reduced(
        kind=SPIDER, period=1, mechanism=_gaussian(loss_fn, clip_norm, noise_multiplier, None, microbatch),
        step_size=step_size, prox=prox, sampling=sampling, fresh_sampler=sampler, diff_sampler=sampler,
        clip_norm=clip_norm, smoothness=None, participation=participation, output=output, restart_length=None,
        privacy=privacy, name=name or ("dp_prox_sgd" if private else "prox_sgd"))


def noisy_prox_gd(loss_fn, *, step_size, clip_norm, noise_multiplier=0.0, prox=None, participation=None,
                  silos_per_round=None,
                  output: str = "last", microbatch="auto", name: str | None = None) -> FederatedAlgorithm:
    """ISRL-DP noisy distributed proximal gradient descent: :func:`noisy_prox_sgd` on full local batches
    (every round uses every record; rounds compose, e.g. by ``"rdp"``).

    Example (every record in every round: 20 rounds compose):
      >>> import jax, numpy as np, jaxfl
      >>> from jaxfl.models import binary_accuracy, init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (4, 200, 3)))            # 4 silos of 200 records
      >>> y = (x[..., 0] > 0).astype(np.float32)
      >>> data = jaxfl.from_silos([(x[i], y[i]) for i in range(4)])
      >>> algorithm = noisy_prox_gd(logistic_loss, step_size=0.5, clip_norm=1.0, noise_multiplier=5.0)
      >>> result = jaxfl.train(algorithm, data, init_linear(3), rounds=20, delta=1e-5, progress=False)
      >>> round(result.epsilon, 2), float(binary_accuracy(result.params, x.reshape(-1, 3), y.reshape(-1))) > 0.8
      (9.37, True)
    """
    participation = participation_argument(participation, silos_per_round, "noisy_prox_gd")
    private = not is_zero(noise_multiplier)
    return noisy_prox_sgd(loss_fn, step_size=step_size, batch_size=None, clip_norm=clip_norm,
                          noise_multiplier=noise_multiplier, prox=prox, participation=participation,
                          sampling="full", output=output, microbatch=microbatch,
                          name=name or ("dp_prox_gd" if private else "prox_gd"))


def fedprox_svrg(loss_fn, *, step_size, batch_size: int, epoch_length: int, clip_norm, noise_multiplier=0.0,
                 difference_noise_multiplier=None, smoothness: float | None = None, prox=None,
                 participation=None, silos_per_round=None, output: str = "uniform", restart_length: int | None = None,
                 microbatch="auto", name: str | None = None) -> FederatedAlgorithm:
    """ISRL-DP FedProx-SVRG (Alg. 1), one round per inner step.

    Epochs of ``Q = epoch_length`` rounds (the paper's ``floor(n / K)``) share one silo sample. At an
    epoch's first round the anchor ``w_bar`` is the current iterate and each silo also sends its clipped
    full-batch gradient there plus ``N(0, (z1 C)^2)`` on the sum (``g~`` = their mean). Every round each
    silo sends the mean over ``K`` draws with replacement of ``clip(grad f0(w, x)) - clip(grad f0(w_bar,
    x))`` plus noise ``z2 min(2C, beta ||w - w_bar||)`` on the sum; ``w <- prox_{eta f1}(w - eta (g~ +
    mean))``. ``output="uniform"`` draws the reported iterate uniformly (the theory's ``w_priv``).
    ``restart_length`` restarts from that draw every so many rounds (:func:`fedprox_pl_svrg`).

    Privacy per silo: a full-batch Gaussian ``z1`` per epoch and a with-replacement sampled Gaussian ``z2``
    per round (accountant ``"lowy"``). Theorem E.2's sigmas:
    :func:`jaxfl.accounting.variance_reduced_noise.sigma_pl_svrg`.

    Example (epochs of 5 rounds; the reported model is a uniformly drawn iterate, :func:`output_params`):
      >>> import jax, numpy as np, jaxfl
      >>> from jaxfl.models import binary_accuracy, init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (4, 200, 3)))            # 4 silos of 200 records
      >>> y = (x[..., 0] > 0).astype(np.float32)
      >>> data = jaxfl.from_silos([(x[i], y[i]) for i in range(4)])
      >>> algorithm = fedprox_svrg(logistic_loss, step_size=0.5, batch_size=20, epoch_length=5, clip_norm=1.0,
      ...                          noise_multiplier=2.0)
      >>> result = jaxfl.train(algorithm, data, init_linear(3), rounds=20, progress=False)
      >>> float(binary_accuracy(output_params(result.state), x.reshape(-1, 3), y.reshape(-1))) > 0.8
      True
    """
    participation = participation_argument(participation, silos_per_round, "fedprox_svrg")
    private = check_private_args(clip_norm, noise_multiplier)
    z2 = noise_multiplier if difference_noise_multiplier is None else difference_noise_multiplier
    full, sampler = local.make_sampler(), _sampler(batch_size)
    return _variance_reduced(
        kind=SVRG, period=epoch_length, mechanism=_gaussian(loss_fn, clip_norm, noise_multiplier, z2, microbatch),
        step_size=step_size, prox=prox, sampling="full", fresh_sampler=full, diff_sampler=sampler,
        clip_norm=clip_norm, smoothness=smoothness, participation=participation, output=output,
        restart_length=restart_length,
        privacy=_gaussian_privacy(SVRG, epoch_length, full, sampler, noise_multiplier, z2) if private else None,
        name=name or ("dp_fedprox_svrg" if private else "fedprox_svrg"))


def fedprox_pl_svrg(loss_fn, *, step_size, batch_size: int, epoch_length: int, epochs: int, clip_norm,
                    noise_multiplier=0.0, difference_noise_multiplier=None, smoothness: float | None = None,
                    prox=None, participation=None, silos_per_round=None,
                    microbatch="auto", name: str | None = None) -> FederatedAlgorithm:
    """ISRL-DP FedProx-PL-SVRG (Alg. 2): :func:`fedprox_svrg` restarted from its uniformly drawn iterate
    every ``epochs * epoch_length`` rounds; run ``S`` restarts as ``S * epochs * epoch_length`` rounds. The
    output is the iterate after the last restart (``state.params`` at a restart boundary).
    Theorem E.2 calibrates ``sigma_1, sigma_2`` for ``S`` restarts
    (:func:`~jaxfl.accounting.variance_reduced_noise.sigma_pl_svrg`).

    Example (two restarts of two epochs of 5 rounds):
      >>> import jax, numpy as np, jaxfl
      >>> from jaxfl.models import binary_accuracy, init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (4, 200, 3)))            # 4 silos of 200 records
      >>> y = (x[..., 0] > 0).astype(np.float32)
      >>> data = jaxfl.from_silos([(x[i], y[i]) for i in range(4)])
      >>> algorithm = fedprox_pl_svrg(logistic_loss, step_size=0.5, batch_size=20, epoch_length=5, epochs=2,
      ...                             clip_norm=1.0, noise_multiplier=2.0)
      >>> result = jaxfl.train(algorithm, data, init_linear(3), rounds=20, progress=False)
      >>> float(binary_accuracy(result.params, x.reshape(-1, 3), y.reshape(-1))) > 0.9
      True
    """
    participation = participation_argument(participation, silos_per_round, "fedprox_pl_svrg")
    alg = fedprox_svrg(loss_fn, step_size=step_size, batch_size=batch_size, epoch_length=epoch_length,
                       clip_norm=clip_norm, noise_multiplier=noise_multiplier,
                       difference_noise_multiplier=difference_noise_multiplier, smoothness=smoothness, prox=prox,
                       participation=participation, output="uniform",
                       restart_length=int(epochs) * int(epoch_length), microbatch=microbatch, name=name)
    return alg._replace(name=name or alg.name.replace("svrg", "pl_svrg"))
