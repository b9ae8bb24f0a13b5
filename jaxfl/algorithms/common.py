"""Small helpers shared by the algorithm factories."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import optax

from jaxfl.engine.protocol import ServerState


def is_concrete_zero(value) -> bool:
    """True when ``value`` is a Python/NumPy number equal to 0 (traced values are never 'zero')."""
    try:
        return float(value) == 0.0
    except (TypeError, jax.errors.ConcretizationTypeError):
        return False


def check_private_args(clip_norm, noise_multiplier) -> bool:
    """Validates ``(clip_norm, noise_multiplier)``; returns whether the algorithm adds noise."""
    private = not is_concrete_zero(noise_multiplier)
    try:
        c, z = float(clip_norm), float(noise_multiplier)
    except (TypeError, jax.errors.ConcretizationTypeError):
        return private  # traced hyperparameters: checked by whoever built the sweep
    if z < 0 or math.isnan(z):
        raise ValueError(f"noise_multiplier must be >= 0, got {noise_multiplier}")
    if not c > 0:
        raise ValueError(f"clip_norm must be > 0, got {clip_norm}")
    if private and math.isinf(c):
        raise ValueError(f"noise_multiplier={noise_multiplier} needs a finite clip_norm (got inf)")
    return private


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
