"""Small helpers shared by the algorithm factories."""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from jaxfl import checks
from jaxfl.accounting.events import RoundScheduleDpEvent
from jaxfl.engine.protocol import RoundPrivacy, ServerState

NeighboringRelation = dp_accounting.NeighboringRelation


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
    checks.positive_float("clip_norm", c, allow_inf=True)
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


def sampled_silo_privacy(sampler, noise_multiplier, steps_per_round: int = 1, relation=None):
    """``counts -> RoundPrivacy``: per silo with records, ``steps_per_round`` composed steps of
    ``sampler.event(n_i, z_i)`` (a sampled Gaussian on the silo's clipped sum, noise std ``z_i C``), for
    ``relation`` (default: the sampler's, :attr:`jaxfl.engine.local.Sampler.relation`)."""
    relation = sampler.relation if relation is None else relation

    def privacy(counts):
        events = []
        for n, z in silo_noise_multipliers(noise_multiplier, counts):
            step = sampler.event(n, z)
            events.append(step if steps_per_round == 1 else dp_accounting.SelfComposedDpEvent(step, steps_per_round))
        return RoundPrivacy(events=tuple(events), level="record", relation=relation)

    return privacy


def per_round_silo_privacy(round_samplers, noise_multiplier):
    """``counts -> RoundPrivacy`` for rounds that differ by their sampler (a schedule): per silo with
    records, a ``RoundScheduleDpEvent`` whose round ``r`` releases ``round_samplers[r].event(n_i, z_i)``
    (samplers of one neighbouring relation)."""
    relations = {s.relation for s in round_samplers}
    if len(relations) != 1:
        raise ValueError("per-round samplers must share one neighbouring relation, got "
                         f"{sorted(r.name for r in relations)}")
    relation = next(iter(relations))

    def privacy(counts):
        return RoundPrivacy(events=tuple(RoundScheduleDpEvent(tuple(s.event(n, z) for s in round_samplers))
                                         for n, z in silo_noise_multipliers(noise_multiplier, counts)),
                            level="record", relation=relation)

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
    inverse = jnp.where(total > 0, 1.0 / jnp.maximum(total, 1.0), 0.0)  # reciprocal: see privacy/noise.py
    return jax.tree_util.tree_map(lambda a: a * inverse, tree)


def mean_server(server_opt: optax.GradientTransformation, projection=None):
    """Server step on the mean of the participants' messages (MB-SGD, Local SGD), then ``projection``."""

    def server(state, summed, ctx):
        mean = safe_mean(summed, ctx.total_weight)
        return apply_server_update(server_opt, state, mean, projection), {"update_norm": optax.tree.norm(mean)}

    return server


class ModelTemplate(NamedTuple):
    """What a factory knows about the model before any ``init``: the flattened size, the map back to the
    pytree, and the tree structure and leaf shapes that ``init``'s params must have.

    Convention: a factory whose privacy statement or round depends on the model (P_vec's dimension,
    DP-REC's block layout, unflattening a decoded vector) takes ``params=``, the initial parameters or any
    pytree of the same structure, shapes and dtypes (``jax.ShapeDtypeStruct`` leaves allowed, e.g.
    ``jax.eval_shape(init_fn, ...)``), and builds a template once with :func:`model_template`. Its
    ``init`` then checks the params it gets with :func:`check_params`; nothing is learned from ``init``.
    """

    size: int
    unravel: Callable
    treedef: Any
    shapes: tuple


def concrete_params(params):
    """``params`` with every ``jax.ShapeDtypeStruct`` leaf replaced by zeros of its shape and dtype."""
    return jax.tree_util.tree_map(
        lambda a: jnp.zeros(a.shape, a.dtype) if isinstance(a, jax.ShapeDtypeStruct) else jnp.asarray(a), params)


def model_template(params) -> ModelTemplate:
    """The :class:`ModelTemplate` of ``params`` (arrays or ``jax.ShapeDtypeStruct`` leaves)."""
    concrete = concrete_params(params)
    flat, unravel = ravel_pytree(concrete)
    leaves, treedef = jax.tree_util.tree_flatten(concrete)
    if not leaves:
        raise ValueError("params must hold at least one array (the model, or a template of it)")
    return ModelTemplate(int(flat.size), unravel, treedef, tuple(tuple(np.shape(a)) for a in leaves))


def check_params(template: ModelTemplate, params, who: str) -> None:
    """Raises ``ValueError`` when ``params`` differ in structure or shapes from the factory's ``params=``."""
    leaves, treedef = jax.tree_util.tree_flatten(params)
    shapes = tuple(tuple(np.shape(a)) for a in leaves)
    if treedef != template.treedef or shapes != template.shapes:
        raise ValueError(f"{who}: init got params of structure {treedef} and shapes {shapes}, but the algorithm "
                         f"was built for params=... of structure {template.treedef} and shapes {template.shapes}")
