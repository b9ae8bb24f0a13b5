"""Small helpers shared by the algorithm factories."""
from __future__ import annotations

import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxfl.engine.protocol import RoundPrivacy, ServerState


def is_concrete_zero(value) -> bool:
    """True when ``value`` is a concrete number (or array) equal to 0 everywhere (traced values never are)."""
    try:
        return bool(np.all(np.asarray(value, dtype=np.float64) == 0.0))
    except (TypeError, jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        return False


def check_private_args(clip_norm, noise_multiplier) -> bool:
    """Validates ``(clip_norm, noise_multiplier)`` (the latter a scalar or one value per silo);
    returns whether the algorithm adds noise."""
    private = not is_concrete_zero(noise_multiplier)
    try:
        c = float(clip_norm)
        z = np.asarray(noise_multiplier, dtype=np.float64)
    except (TypeError, jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        return private  # traced hyperparameters: checked by whoever built the sweep
    if z.ndim > 1 or np.any(~(z >= 0)):
        raise ValueError(f"noise_multiplier must be >= 0 (a scalar or one value per silo), got {noise_multiplier}")
    if not c > 0:
        raise ValueError(f"clip_norm must be > 0, got {clip_norm}")
    if private and math.isinf(c):
        raise ValueError(f"noise_multiplier={noise_multiplier} needs a finite clip_norm (got inf)")
    return private


def per_silo_noise(noise_multiplier):
    """``(scalar_or_None, per_silo_or_None)``: a noise multiplier with one entry per silo goes to
    :func:`jaxfl.engine.rounds.make_round`'s ``per_silo``; a scalar is closed over."""
    return (None, jnp.asarray(noise_multiplier, jnp.float32)) if jnp.ndim(noise_multiplier) == 1 else (
        noise_multiplier, None)


def silo_noise_multipliers(noise_multiplier, counts) -> list:
    """Host-side ``[(count, z)]`` for the silos with ``count > 0`` (events for the privacy ledger)."""
    counts = np.asarray(counts)
    z = np.broadcast_to(np.asarray(noise_multiplier, dtype=np.float64), counts.shape) if np.ndim(
        noise_multiplier) == 0 else np.asarray(noise_multiplier, dtype=np.float64)
    if z.shape[0] < counts.shape[0]:  # padding silos appended after the real ones
        z = np.concatenate([z, np.repeat(z[-1:], counts.shape[0] - z.shape[0])])
    if z.shape != counts.shape:
        raise ValueError(f"noise_multiplier has {z.shape[0]} entries for {counts.shape[0]} silos")
    return [(int(n), float(zi)) for n, zi in zip(counts, z) if n > 0]


def sampled_silo_privacy(sampler, noise_multiplier, steps_per_round: int = 1, adjacency: str = "add_remove"):
    """``counts -> RoundPrivacy``: per silo with records, ``steps_per_round`` composed steps of
    ``sampler.event(n_i, z_i)`` (a sampled Gaussian on the silo's clipped sum)."""
    def privacy(counts):
        events = []
        for n, z in silo_noise_multipliers(noise_multiplier, counts):
            step = sampler.event(n, z)
            events.append(step if steps_per_round == 1 else dp_accounting.SelfComposedDpEvent(step, steps_per_round))
        return RoundPrivacy(events=tuple(events), level="record", adjacency=adjacency)

    return privacy


def init_server(server_opt: optax.GradientTransformation):
    """``params -> ServerState(params, server_opt.init(params), round=0)``."""
    return lambda params: ServerState(params, server_opt.init(params), jnp.zeros([], jnp.int32))


def apply_server_update(server_opt, state: ServerState, pseudo_gradient, projection=None):
    """One ``server_opt`` step on ``pseudo_gradient``, then ``projection`` (e.g. onto the constraint
    set ``W``: ``lambda p: optax.projections.projection_l2_ball(p, radius)``); returns the next state."""
    updates, opt_state = server_opt.update(pseudo_gradient, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    if projection is not None:
        params = projection(params)
    return ServerState(params, opt_state, state.round + 1)


def safe_mean(tree, total):
    """``tree / total``, or zeros when no silo took part."""
    inverse = jnp.where(total > 0, 1.0 / jnp.maximum(total, 1.0), 0.0)  # reciprocal: see engine/local.py
    return jax.tree_util.tree_map(lambda a: a * inverse, tree)


def mean_server(server_opt: optax.GradientTransformation, projection=None):
    """Server step on the mean of the participants' messages (MB-SGD, Local SGD), then ``projection``."""

    def server(state, summed, ctx):
        mean = safe_mean(summed, ctx.total_weight)
        return apply_server_update(server_opt, state, mean, projection), {"update_norm": optax.tree.norm(mean)}

    return server
