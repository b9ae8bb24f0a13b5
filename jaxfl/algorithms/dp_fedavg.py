"""DP-FedAvg (McMahan et al. 2018): client-level clipping of model deltas + central Gaussian noise.

DP-REC's baseline. Clients take part by Poisson sampling with rate ``q`` (``participation=poisson(q)``); each
runs non-private local SGD, clips its delta to ``C``, and the server adds ``N(0, (z C)^2 I)`` to the sum and
divides by ``expected_clients``, a constant the user fixes before any data is seen (McMahan et al.'s
fixed-denominator estimator, ``q W``), never by a count of the clients present: adding or removing one client
then moves the release by at most ``C / expected_clients`` and changes nothing else. With
``clip_norm=adaptive_clip(...)`` the clip follows a private quantile of the update norms
(:mod:`jaxfl.privacy.adaptive_clipping`, Andrew et al. 2021).
"""
from __future__ import annotations

import math
import warnings

import dp_accounting
import jax
import jax.numpy as jnp
import optax

from jaxfl.accounting.events import clipped_sum_gaussian
from jaxfl import checks
from jaxfl.algorithms.common import (AdaptiveServerState, adaptive_server_step, apply_server_update,
                                    check_private_args, init_server)
from jaxfl.engine import local
from jaxfl.engine.participation import Participation, poisson
from jaxfl.engine.protocol import FederatedAlgorithm, RoundPrivacy
from jaxfl.engine.rounds import make_round
from jaxfl.privacy import adaptive_clipping
from jaxfl.privacy import keys as keys_lib
from jaxfl.privacy.clipping import clip_update
from jaxfl.privacy.noise import add_gaussian_noise


def dp_fedavg(loss_fn, *, client_opt: optax.GradientTransformation, local_steps: int | None = None,
              participation: Participation | None = None, expected_clients, clip_norm, noise_multiplier,
              server_opt: optax.GradientTransformation | None = None, batch_size: int | None = None,
              local_epochs: int | None = None, clients_per_pass="auto", microbatch="auto", name: str = "dp_fedavg",
              client_rate=None) -> FederatedAlgorithm:
    """Builds DP-FedAvg.

    Args:
      loss_fn: per-example loss ``(params, x, y) -> scalar``.
      client_opt: the clients' optimizer for ``local_steps`` steps on minibatches of
        ``batch_size`` (with replacement; ``None``: full local batch), or, with ``local_epochs`` instead of
        ``local_steps``, for that many passes over the client's records in minibatches of ``batch_size``
        (:func:`jaxfl.engine.local.local_epochs`, as DP-REC's clients train).
      participation: :func:`jaxfl.engine.participation.poisson` ``(q)``: each client takes part in a round
        independently with probability ``q`` (may be traced), what the accounting covers. ``client_rate=q`` is
        its deprecated spelling.
      expected_clients: the public constant the noisy sum is divided by, fixed in advance, e.g.
        ``q`` times the number of clients you plan for (required: dividing by the number of clients
        in the data would make the scale of the release reveal whether a client is there; an audit of that
        finds epsilon >= 8 where 0.81 is claimed). May be traced.
      clip_norm: ``C``, the L2 bound on each client's model delta; or
        :func:`jaxfl.privacy.adaptive_clipping.adaptive_clip` ``(C_0, target_quantile=...)``: the bound starts at
        ``C_0`` and follows that quantile of the clients' delta norms, estimated privately each round (the state
        is an :class:`AdaptiveServerState`; ``info["clip_norm"]`` is the round's bound).
      noise_multiplier: ``z``; noise std on the sum of clipped deltas is ``z C``. With adaptive clipping ``z`` is
        the round's whole mechanism (what the statement below composes): the deltas get
        :func:`~jaxfl.privacy.adaptive_clipping.update_noise_multiplier` ``(z, sigma_b)``, a little more, and the
        bits' sum ``sigma_b``.
      server_opt: applied to the noisy mean delta (default ``optax.sgd(1.0)``).
      clients_per_pass: the sampled clients (only those) run this many at a time, one block after another
        (:func:`jaxfl.engine.rounds.make_round`): a round costs about as many client runs as clients were sampled.
        ``"auto"`` (default): 1 on the CPU backend (a client's own products are as wide as a CPU uses; no
        padding), ``ceil(expected_clients)`` on others (a public constant: no extra privacy statement) or every
        client when ``expected_clients`` is traced; ``None``: every client runs, non-participants weighted 0
        (what a sampled cohort cost before 0.2.0, ~1 / ``q`` times the work).
      microbatch: each local step's gradient taken in slices of this many records: ``"auto"``
        (default: slices on the CPU backend when the batch's intermediates overflow the cache), ``None``
        (the whole batch at once) or an int (:mod:`jaxfl.privacy.microbatch`). Memory and speed only: the
        same result to float rounding, the same privacy.

    Privacy (client level, central: add/remove one client's whole data, against anyone who sees the server's
    models; the server is trusted with the clipped updates; the number of clients is not assumed public): per
    round ``PoissonSampledDpEvent(q, GaussianDpEvent(z))``. With adaptive clipping the same: the noisy deltas at
    ``z_delta C_t`` and the noisy bits at ``sigma_b`` (sensitivity 1/2) are one Gaussian mechanism of multiplier
    ``z`` (Andrew et al.); ``C_t`` is a function of earlier releases.

    Example:
      >>> import jax, numpy as np, optax, jaxfl
      >>> from jaxfl.data import iid
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (2000, 5)))
      >>> y = (x[:, 0] > 0).astype(np.float32)
      >>> data = iid(x, y, num_silos=200, seed=0)            # 200 clients of 10 records
      >>> algorithm = dp_fedavg(logistic_loss, client_opt=optax.sgd(0.5), local_steps=2, batch_size=5,
      ...                       participation=jaxfl.engine.participation.poisson(0.1), expected_clients=20,
      ...                       clip_norm=1.0, noise_multiplier=1.0)
      >>> result = jaxfl.train(algorithm, data, init_linear(5), rounds=30, delta=1e-4, progress=False)
      >>> round(result.epsilon, 2)                           # client level: one client's data added or removed
      4.05
      >>> from jaxfl.privacy import adaptive_clip                 # the clip follows the median of the delta norms
      >>> adaptive = dp_fedavg(logistic_loss, client_opt=optax.sgd(0.5), local_steps=2, batch_size=5,
      ...                      participation=jaxfl.engine.participation.poisson(0.1), expected_clients=20,
      ...                      clip_norm=adaptive_clip(0.01), noise_multiplier=1.0)
      >>> result = jaxfl.train(adaptive, data, init_linear(5), rounds=30, delta=1e-4, progress=False)
      >>> round(result.epsilon, 2), float(result.state.clip_norm) > 0.01     # the same statement; the clip grew
      (4.05, True)
    """
    client_rate = _client_rate(participation, client_rate)
    adaptive = clip_norm if isinstance(clip_norm, adaptive_clipping.AdaptiveClip) else None
    if adaptive is not None:
        clip_norm = adaptive.initial
    check_private_args(clip_norm, noise_multiplier)
    if isinstance(client_rate, (int, float)):  # a traced rate (a sweep) is checked by whoever built the sweep
        checks.probability("client_rate", client_rate)
    if expected_clients is None:
        raise ValueError("dp_fedavg needs expected_clients=, a public constant fixed in advance that the noisy sum "
                         "is divided by (e.g. q * the number of clients you plan for)")
    if isinstance(expected_clients, (int, float)):
        checks.positive_float("expected_clients", expected_clients)
    if isinstance(clip_norm, (int, float)) and math.isinf(clip_norm):
        raise ValueError("dp_fedavg needs a finite clip_norm")
    if (local_steps is None) == (local_epochs is None):
        raise ValueError(f"give local_steps or local_epochs, not both or neither (got {local_steps}, {local_epochs})")
    if local_epochs is not None and batch_size is None:
        raise ValueError("local_epochs needs a batch_size")
    if local_steps is not None:
        checks.positive_int("local_steps", local_steps)
    sampler = local.make_sampler(batch_size, microbatch=microbatch)
    server_opt = optax.sgd(1.0) if server_opt is None else server_opt
    clients_per_pass = _clients_per_pass(clients_per_pass, expected_clients)

    def local_delta(params, x, y, count, silo_key):
        def gradient(p, step, drawn):
            return local.noisy_gradient(loss_fn, p, x, y, count, silo_key, step, sampler=sampler,
                                        clip_norm=math.inf, noise_multiplier=0.0, drawn=drawn)

        if local_epochs is not None:
            final, _ = local.local_epochs(loss_fn, params, x, y, count, silo_key, client_opt=client_opt,
                                          batch_size=batch_size, epochs=local_epochs, microbatch=microbatch)
        else:
            final, _ = local.local_steps(params, num_steps=int(local_steps), client_opt=client_opt,
                                         gradient_fn=gradient,
                                         draw_fn=local.step_draws(sampler, silo_key, count, x.shape[0], params, 0.0))
        return jax.tree_util.tree_map(lambda a, b: a - b, params, final)

    def client(params, x, y, count, silo_key):
        clipped, norm = clip_update(local_delta(params, x, y, count, silo_key), clip_norm)
        return clipped, {"delta_norm": norm, "clipped_fraction": (norm > clip_norm).astype(jnp.float32)}

    def server(state, summed, ctx):
        mean = _noisy_mean(ctx.round_key, summed, noise_multiplier * clip_norm, expected_clients)
        return apply_server_update(server_opt, state, mean), {"update_norm": optax.tree.norm(mean)}

    def privacy(counts):
        relation = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE  # one client more or less
        event = dp_accounting.PoissonSampledDpEvent(float(client_rate),
                                                    clipped_sum_gaussian(float(noise_multiplier), relation))
        return RoundPrivacy(events=(event,), level="client", relation=relation)

    if adaptive is not None:
        return _adaptive(adaptive, local_delta, server_opt, noise_multiplier, expected_clients, client_rate,
                         clients_per_pass, privacy, name)
    return FederatedAlgorithm(init=init_server(server_opt),
                              round=make_round(client, server, poisson(client_rate), clients_per_pass=clients_per_pass),
                              privacy=privacy, name=name)


def _adaptive(settings, local_delta, server_opt, noise_multiplier, expected_clients, client_rate, clients_per_pass,
              privacy, name):
    """DP-FedAvg whose clip follows a private quantile (:mod:`jaxfl.privacy.adaptive_clipping`)."""
    count_stddev = adaptive_clipping.count_stddev_for(settings, expected_clients)
    update_multiplier = adaptive_clipping.update_noise_multiplier(noise_multiplier, count_stddev)
    base_init = init_server(server_opt)

    def init(params):
        return AdaptiveServerState(*base_init(params), jnp.asarray(settings.initial, jnp.float32))

    def client(sent, x, y, count, silo_key):
        params, clip = sent
        clipped, norm = clip_update(local_delta(params, x, y, count, silo_key), clip)
        below = (norm <= clip).astype(jnp.float32)
        return (clipped, below - 0.5), {"delta_norm": norm, "clipped_fraction": 1.0 - below}

    def server(state, summed, ctx):
        delta_sum, bit_sum = summed
        mean = _noisy_mean(ctx.round_key, delta_sum, update_multiplier * state.clip_norm, expected_clients)
        noisy_bits = add_gaussian_noise(_server_noise_key(ctx.round_key, 1), bit_sum, count_stddev)
        return adaptive_server_step(server_opt, settings, state, mean, noisy_bits, expected_clients)

    return FederatedAlgorithm(init=init,
                              round=make_round(client, server, poisson(client_rate), clients_per_pass=clients_per_pass,
                                               broadcast=lambda state: (state.params, state.clip_norm)),
                              privacy=privacy, name=name)


def _server_noise_key(round_key, step):
    """The server's NOISE key of ``step`` in a round (0: the deltas' noise, 1: adaptive clipping's bits')."""
    return keys_lib.derive_from_round(round_key, silo=keys_lib.SERVER, step=step, purpose=keys_lib.Purpose.NOISE)


def _noisy_mean(round_key, summed, std, expected_clients):
    """The sum of clipped deltas plus ``N(0, std^2)`` (step 0's key) over the public ``expected_clients``."""
    noisy = add_gaussian_noise(_server_noise_key(round_key, 0), summed, std)
    inverse = 1.0 / jnp.asarray(expected_clients, jnp.float32)  # reciprocal: see privacy/noise.py
    return jax.tree_util.tree_map(lambda a: a * inverse, noisy)


def _client_rate(participation, client_rate):
    """``q`` from :func:`dp_fedavg`'s ``participation`` (or its deprecated ``client_rate``)."""
    if client_rate is not None:
        if participation is not None:
            raise ValueError("dp_fedavg: give participation=poisson(q) only (client_rate= is its deprecated name)")
        warnings.warn("dp_fedavg(client_rate=q) is deprecated: use participation=jaxfl.engine.participation.poisson(q)",
                      DeprecationWarning, stacklevel=3)
        return client_rate
    if not isinstance(participation, Participation) or participation.rate is None:
        raise ValueError("dp_fedavg's accounting is for Poisson client sampling: pass "
                         f"participation=jaxfl.engine.participation.poisson(q), got participation={participation!r}")
    return participation.rate


def _clients_per_pass(clients_per_pass, expected_clients):
    """:func:`dp_fedavg`'s ``clients_per_pass``, ``"auto"`` resolved (see there)."""
    if not (isinstance(clients_per_pass, str) and clients_per_pass == "auto"):
        return clients_per_pass
    if jax.default_backend() == "cpu":
        return 1
    return math.ceil(expected_clients) if isinstance(expected_clients, (int, float)) else None
