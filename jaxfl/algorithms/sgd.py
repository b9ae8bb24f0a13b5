"""Minibatch SGD and Local SGD (FedAvg), non-private or with per-silo (ISRL-DP) clipping and noise.

Both are the reference algorithms of the engine; the papers' variants (Lowy & Razaviyayn's noisy MB-SGD and
noisy Local SGD, Lowy et al.'s prox methods, ...) reuse these silo-side blocks and :func:`make_round`.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxfl import checks
from jaxfl.algorithms.common import (AdaptiveServerState, adaptive_server_step, check_private_args, init_server,
                                    mean_server, per_round_silo_privacy, per_silo_noise, sampled_silo_privacy)
from jaxfl.engine import local
from jaxfl.engine.participation import argument as participation_argument, resolve
from jaxfl.engine.protocol import FederatedAlgorithm, PerRound
from jaxfl.engine.rounds import make_round
from jaxfl.privacy import adaptive_clipping
from jaxfl.privacy import keys as keys_lib
from jaxfl.privacy.noise import add_gaussian_noise


def minibatch_sgd(loss_fn, *, server_opt: optax.GradientTransformation, batch_size: int | None = None,
                  sampling_rate=None, expected_batch_size=None, clip_norm=math.inf, noise_multiplier=0.0,
                  participation=None, silos_per_round=None, projection=None, microbatch="auto", chunk="auto",
                  name: str | None = None) -> FederatedAlgorithm:
    """Distributed minibatch SGD; with ``noise_multiplier > 0`` it is ISRL-DP noisy MB-SGD.

    Per round, each participating silo ``i`` samples a minibatch (``batch_size`` draws with
    replacement, or Poisson with ``sampling_rate``, or all records), sends
    ``g_i = (sum_j clip(grad f(w, x_ij), C) + N(0, (z C)^2 I)) / b`` and the server applies
    ``server_opt`` to the mean of the ``g_i`` over participants. ``b`` is ``expected_batch_size`` when given,
    else the silo's own batch size (``batch_size``, ``sampling_rate * n_i`` or ``n_i``).

    Args:
      loss_fn: per-example loss ``(params, x, y) -> scalar``.
      server_opt: e.g. ``optax.sgd(step_size)``; its learning rate may be traced.
      batch_size / sampling_rate: the minibatch sampler (see :func:`jaxfl.engine.local.make_sampler`).
        ``sampling_rate=PerRound(rates)`` (:class:`jaxfl.engine.PerRound`, host ``float[rounds]``) is a
        Poisson rate per round (expected sample sizes that grow with the round, say), fed through the
        driver's scan as the algorithm's ``schedule``; a run may not be longer than ``rates``.
      expected_batch_size: ``b``, a public constant fixed before any data is seen (Poisson or full batch; e.g.
        ``sampling_rate`` times the silo size you plan for, as Opacus's ``expected_batch_size``), or
        ``PerRound(sizes)`` beside ``PerRound`` rates. It makes the statement add/remove-one (see Privacy);
        the default, the silo's own size, is public only under replace-one neighbours.
      clip_norm: per-example global-norm clip ``C`` (``inf``: none). May be traced.
      noise_multiplier: ``z``; the noise std on each silo's clipped sum is ``z C``. May be traced.
        An array of one ``z_i`` per silo gives per-silo budgets (Lowy & Razaviyayn's Alg. 7).
      participation: ``None`` (all), an int ``M`` (uniform without replacement), or a
        participation callable from :mod:`jaxfl.engine.participation`.
      projection: ``params -> params`` applied after each server step (Lowy & Razaviyayn's ``Pi_W``), e.g.
        ``lambda p: optax.projections.projection_l2_ball(p, radius)``. Post-processing: no privacy cost.
      microbatch: each step's clipped sum (or gradient) taken in slices of this many records: ``"auto"``
        (default: slices on the CPU backend when the batch's intermediates overflow the cache), ``None``
        (the whole batch at once) or an int (:mod:`jaxfl.privacy.microbatch`). Memory and speed only: the
        same result to float rounding, the same privacy.
      chunk: with Poisson sampling, how many sampled records are gathered at a time: ``"auto"`` (default: the
        sample's mean plus three standard deviations when the rate is at most 1/2, so a step costs O(sampled
        records), not O(silo size); :func:`jaxfl.engine.local.gather_chunk`), an int, or ``None`` (every record
        under a mask). Speed only: the same sample and sum to float rounding.

    Privacy (ISRL-DP: each silo's own transcript, for one record of that silo): per round, one sampled
    Gaussian with noise multiplier ``z`` on the silo's clipped sum (with ``PerRound`` rates, round ``r``'s
    event has rate ``rates[r]``). **Add/remove-one** with ``expected_batch_size`` (the default to use: the
    sum's sensitivity is ``C`` and nothing about the silo's size is released); **replace-one** (sensitivity
    ``2C``, silo sizes public) without it, or with ``batch_size`` (draws with replacement). For the same
    noise, add/remove-one gives the smaller epsilon (Poisson rate 0.3, z = 1.5: 0.81 against 1.12 for one
    step). Poisson sampling is accounted by the RDP and PLD accountants under add/remove-one, by the PLD
    accountant only under replace-one; with-replacement sampling needs the ``"lowy"`` accountant (dp_accounting
    has no accountant for that event).

    Example:
      >>> import jax, numpy as np, optax, jaxfl
      >>> from jaxfl.data import iid
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (400, 5)))
      >>> y = (x[:, 0] > 0).astype(np.float32)
      >>> data = iid(x, y, num_silos=4, seed=0)               # 4 silos of 100 records
      >>> algorithm = minibatch_sgd(logistic_loss, server_opt=optax.sgd(1.0), sampling_rate=0.2,
      ...                           expected_batch_size=20, clip_norm=1.0, noise_multiplier=2.0)
      >>> result = jaxfl.train(algorithm, data, init_linear(5), rounds=50, delta=1e-5, progress=False)
      >>> result.epsilons.shape, bool(result.epsilon == result.epsilons.max())   # one ledger per silo
      ((4,), True)
    """
    participation = participation_argument(participation, silos_per_round, "minibatch_sgd")
    private = check_private_args(clip_norm, noise_multiplier)
    scheduled = isinstance(sampling_rate, PerRound)
    rates = _per_round_rates(sampling_rate.values) if scheduled else None
    sizes = _per_round_sizes(expected_batch_size, rates)
    sampler = local.make_sampler(batch_size, 1.0 if scheduled else sampling_rate, microbatch=microbatch,
                                 chunk=chunk if sampling_rate is not None else None,
                                 expected_batch_size=1.0 if sizes is not None else expected_batch_size)

    shared_z, silo_z = per_silo_noise(noise_multiplier)

    def client(params, x, y, count, silo_key, z=shared_z, **schedule):
        round_sampler = sampler
        if scheduled:
            round_sampler = round_sampler._replace(rate=schedule["inputs"]["sampling_rate"])
        if sizes is not None:
            round_sampler = round_sampler._replace(expected_batch_size=schedule["inputs"]["expected_batch_size"])
        return local.noisy_gradient(loss_fn, params, x, y, count, silo_key, 0, sampler=round_sampler,
                                    clip_norm=clip_norm, noise_multiplier=z)

    if not private:
        privacy = None
    elif scheduled:
        privacy = per_round_silo_privacy([sampler._replace(rate=float(q)) for q in rates], noise_multiplier)
    else:
        privacy = sampled_silo_privacy(sampler, noise_multiplier, 1)
    schedule = None
    if scheduled:
        schedule = {"sampling_rate": rates} if sizes is None else {"sampling_rate": rates, "expected_batch_size": sizes}
    return FederatedAlgorithm(
        init=init_server(server_opt),
        round=make_round(client, mean_server(server_opt, projection), resolve(participation), per_silo=silo_z,
                         scheduled=scheduled),
        privacy=privacy,
        name=name or ("dp_minibatch_sgd" if private else "minibatch_sgd"),
        schedule=schedule,
    )


def dp_sgd(loss_fn, *, optimizer: optax.GradientTransformation, expected_batch_size: float, num_records: int,
           clip_norm: float, noise_multiplier: float, microbatch="auto", chunk="auto") -> FederatedAlgorithm:
    """Central DP-SGD (Abadi et al.): one dataset, Poisson-sampled batches, per-example clipping, Gaussian noise.

    :func:`minibatch_sgd` on one silo with ``sampling_rate = expected_batch_size / num_records``: each step
    samples every record with that probability, sends ``(sum_j clip(grad f(w, x_j), C) + N(0, (z C)^2 I)) /
    expected_batch_size`` to ``optimizer`` (as Opacus's and TF-Privacy's DP-SGD, fixed denominator). A step
    gathers only the sampled records (``chunk``), so it costs O(``expected_batch_size``), not O(``num_records``).
    Train it with :func:`jaxfl.train` on :func:`jaxfl.data.from_silos` ``([(x, y)])``, ``rounds`` being steps
    (``epochs * num_records / expected_batch_size``); the result's ``params`` is the model and ``epsilon`` the
    guarantee at the ``delta`` passed to ``train``.

    Args:
      loss_fn: per-example loss ``(params, x, y) -> scalar`` (one record, no batch axis), e.g.
        :func:`jaxfl.models.per_example_loss` of a flax module.
      optimizer: an optax transformation applied to the noisy mean gradient, e.g. ``optax.sgd(0.25)``.
      expected_batch_size: ``b``, the expected records per step and the constant the noisy sum is divided by.
      num_records: ``n``, the dataset size the rate ``b / n`` is set from, a public number fixed in advance.
      clip_norm: ``C``, the per-example L2 clip; or :func:`jaxfl.privacy.adaptive_clip` ``(C_0, ...)``: the clip
        starts at ``C_0`` and follows a quantile of the per-example gradient norms, estimated privately at every
        step from a noisy count of the sampled records it did not shrink (Andrew et al. 2021; the state's
        ``clip_norm``, ``info["clip_norm"]``).
      noise_multiplier: ``z`` (noise std ``z C`` on the sum). With adaptive clipping ``z`` is the step's whole
        mechanism: the gradients' sum gets ``update_noise_multiplier(z, sigma_b)`` and the count ``sigma_b``
        (default ``expected_batch_size / 20``), one Gaussian of multiplier ``z`` together.
      microbatch, chunk: memory and speed only (:func:`minibatch_sgd`).

    Privacy: record level, **add/remove-one** (a dataset with one record more or less), ``n`` public: each
    step is a Poisson-subsampled Gaussian mechanism of rate ``b / n`` and noise multiplier ``z`` on a sum of
    sensitivity ``C``, accounted by the RDP (default) or PLD accountant of ``train``. With adaptive clipping the
    same: one record moves the clipped sum by at most ``C_t`` and the count of unclipped records (centred: each
    record adds ``+-1/2``) by at most 1/2 (:mod:`jaxfl.privacy.adaptive_clipping`).

    Example:
      >>> import jax, numpy as np, optax, jaxfl
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (1000, 5)))
      >>> y = (x[:, 0] > 0).astype(np.float32)
      >>> algorithm = dp_sgd(logistic_loss, optimizer=optax.sgd(0.5), expected_batch_size=50, num_records=1000,
      ...                    clip_norm=1.0, noise_multiplier=1.1)
      >>> result = jaxfl.train(algorithm, jaxfl.from_silos([(x, y)]), init_linear(5), rounds=100, delta=1e-5,
      ...                      progress=False)
      >>> round(result.epsilon, 2), result.params["w"].shape
      (3.31, (5,))
      >>> from jaxfl.privacy import adaptive_clip                 # the clip follows the median gradient norm
      >>> adaptive = dp_sgd(logistic_loss, optimizer=optax.sgd(0.5), expected_batch_size=50, num_records=1000,
      ...                   clip_norm=adaptive_clip(0.01), noise_multiplier=1.1)
      >>> result = jaxfl.train(adaptive, jaxfl.from_silos([(x, y)]), init_linear(5), rounds=100, delta=1e-5,
      ...                      progress=False)
      >>> round(result.epsilon, 2), float(result.state.clip_norm) > 0.01     # the same statement
      (3.31, True)
    """
    checks.positive_int("num_records", num_records)
    checks.positive_float("expected_batch_size", expected_batch_size)
    if expected_batch_size > num_records:
        raise ValueError(f"expected_batch_size ({expected_batch_size}) must be at most num_records ({num_records})")
    if isinstance(clip_norm, adaptive_clipping.AdaptiveClip):
        return _adaptive_dp_sgd(loss_fn, clip_norm, optimizer, expected_batch_size, num_records, noise_multiplier,
                                microbatch, chunk)
    return minibatch_sgd(loss_fn, server_opt=optimizer, sampling_rate=expected_batch_size / num_records,
                         expected_batch_size=expected_batch_size, clip_norm=clip_norm,
                         noise_multiplier=noise_multiplier, microbatch=microbatch, chunk=chunk, name="dp_sgd")


def _adaptive_dp_sgd(loss_fn, settings, optimizer, expected_batch_size, num_records, noise_multiplier, microbatch,
                     chunk):
    """:func:`dp_sgd` whose clip follows a private quantile of the per-example gradient norms."""
    check_private_args(settings.initial, noise_multiplier)
    count_stddev = adaptive_clipping.count_stddev_for(settings, expected_batch_size)
    update_multiplier = adaptive_clipping.update_noise_multiplier(noise_multiplier, count_stddev)
    sampler = local.make_sampler(sampling_rate=expected_batch_size / num_records, microbatch=microbatch, chunk=chunk,
                                 expected_batch_size=expected_batch_size)
    base_init = init_server(optimizer)

    def init(params):
        return AdaptiveServerState(*base_init(params), jnp.asarray(settings.initial, jnp.float32))

    def client(sent, x, y, count, silo_key):
        params, clip = sent
        gradient, info, (records, clipped) = local.noisy_gradient_and_counts(
            loss_fn, params, x, y, count, silo_key, 0, sampler=sampler, clip_norm=clip,
            noise_multiplier=update_multiplier)
        bits = (records - clipped) - 0.5 * records   # sum over the sampled records of 1{norm <= C_t} - 1/2
        noise_key = keys_lib.step_key(silo_key, 1, keys_lib.Purpose.NOISE)   # step 0's NOISE is the gradient's
        return (gradient, add_gaussian_noise(noise_key, bits, count_stddev)), info

    def server(state, summed, ctx):
        gradient, noisy_bits = summed   # one silo: its message itself
        return adaptive_server_step(optimizer, settings, state, gradient, noisy_bits, expected_batch_size)

    def round_(state, data, round_key, *args):
        if data.num_silos != 1:
            raise ValueError(f"dp_sgd with adaptive clipping trains one dataset, got {data.num_silos} silos "
                             "(jaxfl.from_silos([(x, y)]))")
        return inner(state, data, round_key, *args)

    inner = make_round(client, server, resolve(None), broadcast=lambda state: (state.params, state.clip_norm))
    return FederatedAlgorithm(init=init, round=round_, privacy=sampled_silo_privacy(sampler, noise_multiplier, 1),
                              name="dp_sgd")


def _per_round_rates(values) -> np.ndarray:
    """``float32[rounds]`` Poisson rates, each in (0, 1] (the float32 values are the ones the rounds use and
    the privacy statement accounts)."""
    rates = np.asarray(values, dtype=np.float32)
    if rates.ndim != 1 or rates.size == 0 or not np.all((rates > 0) & (rates <= 1)):
        raise ValueError(f"PerRound sampling rates must be a non-empty 1-D sequence in (0, 1], got {values!r}")
    return rates


def _per_round_sizes(expected_batch_size, rates):
    """``float32[rounds]`` expected batch sizes given as ``PerRound`` beside ``PerRound`` rates, else None (a
    plain ``expected_batch_size`` is one constant for every round)."""
    if not isinstance(expected_batch_size, PerRound):
        return None
    sizes = np.asarray(expected_batch_size.values, dtype=np.float32)
    if rates is None or sizes.shape != rates.shape or not np.all(np.isfinite(sizes) & (sizes > 0)):
        raise ValueError("PerRound expected_batch_size needs PerRound sampling rates of the same length and "
                         f"sizes > 0, got {expected_batch_size!r}")
    return sizes


def local_sgd(loss_fn, *, client_opt: optax.GradientTransformation, local_steps: int,
              server_opt: optax.GradientTransformation | None = None, batch_size: int | None = None,
              sampling_rate=None, expected_batch_size=None, clip_norm=math.inf, noise_multiplier=0.0,
              participation=None, silos_per_round=None,
              projection=None, microbatch="auto", chunk="auto", clients_per_pass: int | None = None,
              name: str | None = None) -> FederatedAlgorithm:
    """Local SGD / FedAvg; with ``noise_multiplier > 0`` every local step is clipped and noised.

    Each participating silo runs ``local_steps`` steps of ``client_opt`` from the server model
    (under ``lax.scan``) and sends ``w - w_local``; the server applies ``server_opt`` (default
    ``optax.sgd(1.0)``, i.e. plain model averaging) to the mean of those deltas, then ``projection``
    (see :func:`minibatch_sgd`; the other arguments, ``microbatch`` and ``chunk`` included, as there).

    ``clients_per_pass`` (optional, an int): the participants run that many at a time, one after another
    (:func:`jaxfl.engine.rounds.make_round`; not with one noise multiplier per silo), instead of all under
    one ``vmap``: the same result to float rounding (the order of the sum over silos). Speed only: on a CPU a
    long local loop of a small model is bound by streaming the vmapped models through the cache at every
    step, and fewer silos at a time keep them cached (Lowy et al.'s MNIST grid: ``docs/performance.md``,
    ``lowy_nonconvex_grid``); on a GPU the passes only serialise the work.

    Privacy: per round, each silo's transcript composes ``local_steps`` sampled Gaussians, under
    add/remove-one neighbours with ``expected_batch_size`` (every step's clipped sum divided by that public
    constant; the default to use) and replace-one without it (divided by the silo's own size), as in
    :func:`minibatch_sgd`.

    Example:
      >>> import jax, numpy as np, optax, jaxfl
      >>> from jaxfl.data import iid
      >>> from jaxfl.models import binary_accuracy, init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (400, 5)))
      >>> y = (x[:, 0] > 0).astype(np.float32)
      >>> algorithm = local_sgd(logistic_loss, client_opt=optax.sgd(0.5), local_steps=5, batch_size=10)  # FedAvg
      >>> result = jaxfl.train(algorithm, iid(x, y, num_silos=4, seed=0), init_linear(5), rounds=20,
      ...                      progress=False)
      >>> float(binary_accuracy(result.params, x, y)) > 0.9
      True
    """
    participation = participation_argument(participation, silos_per_round, "local_sgd")
    private = check_private_args(clip_norm, noise_multiplier)
    sampler = local.make_sampler(batch_size, sampling_rate, chunk if sampling_rate is not None else None,
                                 microbatch=microbatch, expected_batch_size=expected_batch_size)
    server_opt = optax.sgd(1.0) if server_opt is None else server_opt
    checks.positive_int("local_steps", local_steps)

    shared_z, silo_z = per_silo_noise(noise_multiplier)

    def client(params, x, y, count, silo_key, z=shared_z):
        def gradient(p, step, drawn):
            return local.noisy_gradient(loss_fn, p, x, y, count, silo_key, step, sampler=sampler,
                                        clip_norm=clip_norm, noise_multiplier=z, drawn=drawn)

        final, info = local.local_steps(params, num_steps=int(local_steps), client_opt=client_opt,
                                        gradient_fn=gradient,
                                        draw_fn=local.step_draws(sampler, silo_key, count, x.shape[0], params, z))
        return jax.tree_util.tree_map(lambda a, b: a - b, params, final), info

    return FederatedAlgorithm(
        init=init_server(server_opt),
        round=make_round(client, mean_server(server_opt, projection), resolve(participation), per_silo=silo_z,
                         clients_per_pass=clients_per_pass),
        privacy=sampled_silo_privacy(sampler, noise_multiplier, int(local_steps)) if private else None,
        name=name or ("dp_local_sgd" if private else "local_sgd"),
    )
