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
from jaxfl.privacy import adaptive_clipping

NeighboringRelation = dp_accounting.NeighboringRelation


def is_concrete_zero(value) -> bool:
    """True when ``value`` is a concrete number (or array) equal to 0 everywhere (traced values never are).

    Example:
      >>> import jax.numpy as jnp
      >>> is_concrete_zero(0.0), is_concrete_zero(jnp.zeros(3)), is_concrete_zero(0.1)
      (True, True, False)
    """
    try:
        return bool(np.all(np.asarray(value, dtype=np.float64) == 0.0))
    except (TypeError, jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        return False


def check_private_args(clip_norm, noise_multiplier) -> bool:
    """Validates ``(clip_norm, noise_multiplier)`` (the latter a scalar or one value per silo);
    returns whether the algorithm adds noise.

    Example (whether the algorithm adds noise):
      >>> check_private_args(1.0, 0.0), check_private_args(1.0, 1.0), check_private_args(1.0, [1.0, 2.0])
      (False, True, True)
    """
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
    :func:`jaxfl.engine.rounds.make_round`'s ``per_silo``; a scalar is closed over.

    Example:
      >>> per_silo_noise(1.0)
      (1.0, None)
      >>> per_silo_noise([1.0, 2.0])[1].tolist()
      [1.0, 2.0]
    """
    return (None, jnp.asarray(noise_multiplier, jnp.float32)) if np.ndim(noise_multiplier) == 1 else (
        noise_multiplier, None)


def silo_noise_multipliers(noise_multiplier, counts) -> list:
    """Host-side ``[(count, z)]`` for the silos with ``count > 0`` (events for the privacy ledger).

    Example (the empty silo states nothing):
      >>> silo_noise_multipliers([1.0, 2.0, 3.0], [5, 0, 3])
      [(5, 1.0), (3, 3.0)]
    """
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
    ``relation`` (default: the sampler's, :attr:`jaxfl.engine.local.Sampler.relation`).

    Example (two silos, Poisson rate 0.1, z = 1, two steps a round):
      >>> from jaxfl.engine.local import make_sampler
      >>> privacy = sampled_silo_privacy(make_sampler(sampling_rate=0.1, expected_batch_size=5.0), 1.0, 2)([50, 30])
      >>> len(privacy.events), privacy.events[0].count
      (2, 2)
    """
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
    (samplers of one neighbouring relation).

    Example: :func:`sampled_silo_privacy` (the same per round, one sampler per round).
    """
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
    """``params -> ServerState(params, server_opt.init(params), round=0)``.

    Example:
      >>> import jax.numpy as jnp, optax
      >>> init_server(optax.sgd(1.0))({"w": jnp.ones(2)}).round
      Array(0, dtype=int32)
    """
    return lambda params: ServerState(params, server_opt.init(params), jnp.zeros([], jnp.int32))


def apply_server_update(server_opt, state: ServerState, pseudo_gradient, projection=None):
    """One ``server_opt`` step on ``pseudo_gradient``, then ``projection`` (e.g. onto the constraint
    set ``W``: ``lambda p: optax.projections.projection_l2_ball(p, radius)``); returns the next state.

    Example (a step of size 1 on a pseudo-gradient of ones):
      >>> import jax.numpy as jnp, optax
      >>> state = init_server(optax.sgd(1.0))({"w": jnp.ones(2)})
      >>> state = apply_server_update(optax.sgd(1.0), state, {"w": jnp.ones(2)})
      >>> state.params["w"].tolist(), int(state.round)
      ([0.0, 0.0], 1)
    """
    updates, opt_state = server_opt.update(pseudo_gradient, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    if projection is not None:
        params = projection(params)
    return ServerState(params, opt_state, state.round + 1)


class AdaptiveServerState(NamedTuple):
    """The server state of an adaptively clipped algorithm (:func:`jaxfl.algorithms.dp_fedavg.dp_fedavg`,
    :func:`jaxfl.algorithms.sgd.dp_sgd` with ``adaptive_clip``): the model, the server optimizer's state, the
    round counter and ``clip_norm``, the bound the next round clips to.

    Example: :func:`jaxfl.algorithms.dp_fedavg.dp_fedavg`.
    """

    params: Any
    opt_state: Any
    round: jnp.ndarray
    clip_norm: jnp.ndarray


def adaptive_server_step(server_opt, settings, state: AdaptiveServerState, pseudo_gradient, noisy_bits,
                         expected) -> tuple:
    """One server step of an adaptively clipped algorithm: ``server_opt`` on ``pseudo_gradient`` and the clip's
    geometric step from the noisy sum of centred bits over the public ``expected`` count; returns ``(state,
    info)``. Example: :func:`jaxfl.algorithms.dp_fedavg.dp_fedavg` (and :func:`jaxfl.algorithms.sgd.dp_sgd`) with
    ``adaptive_clip``."""
    fraction = adaptive_clipping.below_fraction(noisy_bits, jnp.asarray(expected, jnp.float32))
    clip = adaptive_clipping.next_clip(state.clip_norm, fraction, settings.target_quantile, settings.learning_rate)
    stepped = apply_server_update(server_opt, state, pseudo_gradient)
    return (AdaptiveServerState(*stepped, clip),
            {"update_norm": optax.tree.norm(pseudo_gradient), "clip_norm": state.clip_norm, "below_fraction": fraction})


def safe_mean(tree, total):
    """``tree / total``, or zeros when no silo took part.

    Example:
      >>> import jax.numpy as jnp
      >>> safe_mean({"w": jnp.full(2, 4.0)}, 2.0)["w"].tolist(), safe_mean({"w": jnp.full(2, 4.0)}, 0.0)["w"].tolist()
      ([2.0, 2.0], [0.0, 0.0])
    """
    inverse = jnp.where(total > 0, 1.0 / jnp.maximum(total, 1.0), 0.0)  # reciprocal: see privacy/noise.py
    return jax.tree_util.tree_map(lambda a: a * inverse, tree)


def mean_server(server_opt: optax.GradientTransformation, projection=None):
    """Server step on the mean of the participants' messages (MB-SGD, Local SGD), then ``projection``.

    Example: :func:`jaxfl.algorithms.sgd.minibatch_sgd` is built on it.
    """

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

    Example: :func:`model_template`.
    """

    size: int
    unravel: Callable
    treedef: Any
    shapes: tuple


def concrete_params(params):
    """``params`` with every ``jax.ShapeDtypeStruct`` leaf replaced by zeros of its shape and dtype.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> concrete_params({"w": jax.ShapeDtypeStruct((2,), jnp.float32)})["w"].tolist()
      [0.0, 0.0]
    """
    return jax.tree_util.tree_map(
        lambda a: jnp.zeros(a.shape, a.dtype) if isinstance(a, jax.ShapeDtypeStruct) else jnp.asarray(a), params)


def model_template(params) -> ModelTemplate:
    """The :class:`ModelTemplate` of ``params`` (arrays or ``jax.ShapeDtypeStruct`` leaves).

    Example:
      >>> import jax.numpy as jnp
      >>> template = model_template({"w": jnp.ones((2, 3)), "b": jnp.zeros(3)})
      >>> template.size, template.shapes
      (9, ((3,), (2, 3)))
    """
    concrete = concrete_params(params)
    flat, unravel = ravel_pytree(concrete)
    leaves, treedef = jax.tree_util.tree_flatten(concrete)
    if not leaves:
        raise ValueError("params must hold at least one array (the model, or a template of it)")
    return ModelTemplate(int(flat.size), unravel, treedef, tuple(tuple(np.shape(a)) for a in leaves))


def check_params(template: ModelTemplate, params, who: str) -> None:
    """Raises ``ValueError`` when ``params`` differ in structure or shapes from the factory's ``params=``.

    Example:
      >>> import jax.numpy as jnp
      >>> template = model_template({"w": jnp.ones((2, 3)), "b": jnp.zeros(3)})
      >>> check_params(template, {"w": jnp.ones((2, 2)), "b": jnp.zeros(3)}, "sdp_prox_sgd")
      Traceback (most recent call last):
      ...
      ValueError: sdp_prox_sgd: init got params of structure ... and shapes ((3,), (2, 2)), but the algorithm was ...
    """
    leaves, treedef = jax.tree_util.tree_flatten(params)
    shapes = tuple(tuple(np.shape(a)) for a in leaves)
    if treedef != template.treedef or shapes != template.shapes:
        raise ValueError(f"{who}: init got params of structure {treedef} and shapes {shapes}, but the algorithm "
                         f"was built for params=... of structure {template.treedef} and shapes {template.shapes}")
