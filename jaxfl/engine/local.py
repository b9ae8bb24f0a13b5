"""Silo-side building blocks shared by every algorithm: minibatch samplers and noisy gradients.

A silo sees its padded records ``x: [max_records, ...]``, ``y`` and its ``count``; every sampler
draws only among the first ``count`` rows.

**Draw-ahead.** :func:`local_steps` draws the randomness of its steps (each step's minibatch indices
and unit Gaussian noise, from the very keys ``derive(.., step, MINIBATCH)`` and ``derive(.., step,
NOISE)`` that :func:`noisy_gradient` would use) for a block of steps at once, before the sequential
step loop, and the loop only consumes it. The draws are the same numbers; the gain is that one
vectorized draw replaces one tiny draw per step, whose fixed cost (several kernel launches per
threefry hash on CPU) dominated small models' local steps. This applies to each
:func:`noisy_gradient` call that ``gradient_fn`` makes with the loop's own ``step`` (found by tracing
``gradient_fn`` once, abstractly); other calls draw in the loop as before.
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import dp_accounting
import jax
import jax.numpy as jnp
import optax

from jaxfl.privacy import keys as keys_lib
from jaxfl.privacy.clipping import clipped_grad_sum
from jaxfl.privacy.noise import gaussian_like

DRAW_AHEAD_ELEMENTS = 1 << 18
"""Most random values (indices + noise entries) :func:`local_steps` draws ahead per silo per block of
steps; blocks of fewer than 2 steps fall back to drawing inside the loop. 0 disables draw-ahead."""


class Batch(NamedTuple):
    x: jnp.ndarray  # [b, ...]
    y: jnp.ndarray  # [b, ...]
    weights: jnp.ndarray  # [b]; 0 on padding / unsampled records
    denominator: jnp.ndarray  # scalar: the (public) batch size the sum is divided by


class Sampler(NamedTuple):
    """How a silo picks its minibatch in one local step.

    ``kind`` is ``"with_replacement"`` (``batch_size`` uniform draws, seed 000's sampling; fixed
    shape, O(batch) work), ``"poisson"`` (each record with probability ``rate``; O(max_records)
    work; divided by the expected size ``rate * count``) or ``"full"`` (all records).
    ``sampler(key, x, y, count)`` is ``sampler.take(sampler.draw(key, count, len(x)), x, y, count)``.
    """

    kind: str
    batch_size: int | None = None
    rate: Any = None

    def __call__(self, key, x, y, count) -> Batch:
        return self.take(self.draw(key, count, x.shape[0]), x, y, count)

    def draw(self, key, count, max_records: int):
        """The step's randomness: indices ``int32[batch_size]``, a ``bool[max_records]`` Poisson mask,
        or ``None`` (full batch)."""
        if self.kind == "with_replacement":
            return jax.random.randint(key, (self.batch_size,), 0, jnp.maximum(count, 1))
        if self.kind == "poisson":
            return jax.random.bernoulli(key, self.rate, (max_records,))
        if self.kind == "full":
            return None
        raise ValueError(f"unknown sampler kind {self.kind!r}")

    def take(self, drawn, x, y, count) -> Batch:
        """The minibatch given the randomness ``drawn`` of :meth:`draw`."""
        if self.kind == "with_replacement":
            w = jnp.broadcast_to((count > 0).astype(jnp.float32), (self.batch_size,))
            return Batch(x[drawn], y[drawn], w, jnp.asarray(self.batch_size, jnp.float32))
        real = jnp.arange(x.shape[0]) < count
        if self.kind == "poisson":
            denom = jnp.maximum(self.rate * count.astype(jnp.float32), 1e-12)
            return Batch(x, y, (drawn & real).astype(jnp.float32), denom)
        if self.kind == "full":
            return Batch(x, y, real.astype(jnp.float32), jnp.maximum(count, 1).astype(jnp.float32))
        raise ValueError(f"unknown sampler kind {self.kind!r}")

    def draw_size(self, max_records: int) -> int:
        """Number of random values one :meth:`draw` returns."""
        return {"with_replacement": self.batch_size or 0, "poisson": max_records}.get(self.kind, 0)

    def event(self, count: int, noise_multiplier: float):
        """The ``dp_accounting`` event of one step on a silo with ``count`` records."""
        gaussian = dp_accounting.GaussianDpEvent(float(noise_multiplier))
        if self.kind == "with_replacement":
            return dp_accounting.SampledWithReplacementDpEvent(int(count), int(self.batch_size), gaussian)
        if self.kind == "poisson":
            return dp_accounting.PoissonSampledDpEvent(float(self.rate), gaussian)
        return gaussian


def make_sampler(batch_size: int | None = None, sampling_rate=None) -> Sampler:
    """``batch_size`` -> with-replacement sampler; ``sampling_rate`` -> Poisson; neither -> full batch."""
    if batch_size is not None and sampling_rate is not None:
        raise ValueError("give batch_size or sampling_rate, not both")
    if batch_size is not None:
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        return Sampler("with_replacement", batch_size=int(batch_size))
    if sampling_rate is not None:
        if isinstance(sampling_rate, (int, float)) and not 0.0 < sampling_rate <= 1.0:
            raise ValueError(f"sampling_rate must be in (0, 1], got {sampling_rate}")
        return Sampler("poisson", rate=sampling_rate)
    return Sampler("full")


def _is_python_zero(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0


def noisy_gradient(loss_fn, params, x, y, count, silo_key, step, *, sampler: Sampler, clip_norm,
                   noise_multiplier):
    """One silo's privatized minibatch gradient in local step ``step``.

    ``(sum_j w_j clip(g_j, C) + N(0, (z C)^2 I)) / denominator``; the minibatch comes from
    ``derive(.., step, MINIBATCH)`` and the noise from ``derive(.., step, NOISE)``. With
    ``clip_norm = inf`` and ``noise_multiplier = 0`` this is the plain minibatch gradient (a Python
    ``0`` draws no noise at all). Inside :func:`local_steps` the draws may have been made ahead of the
    step loop (same keys, same values).

    Returns ``(gradient, info)`` with ``info["clipped_fraction"]``.
    """
    context = _DRAW_AHEAD[-1] if _DRAW_AHEAD else None
    if context is not None:
        drawn = context.consume(_Request(sampler, silo_key, x, y, count, params, noise_multiplier), step)
        if drawn is not None:
            indices, unit_noise = drawn
            if context.probing:  # abstract trace of gradient_fn: only the shapes matter
                zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
                return zeros, {"clipped_fraction": jnp.zeros([], jnp.float32)}
            return _privatize(loss_fn, params, sampler.take(indices, x, y, count), unit_noise,
                              clip_norm=clip_norm, noise_multiplier=noise_multiplier)
    batch = sampler(keys_lib.step_key(silo_key, step, keys_lib.Purpose.MINIBATCH), x, y, count)
    return noisy_batch_gradient(loss_fn, params, batch, keys_lib.step_key(silo_key, step, keys_lib.Purpose.NOISE),
                                clip_norm=clip_norm, noise_multiplier=noise_multiplier)


def noisy_batch_gradient(loss_fn, params, batch: Batch, noise_key, *, clip_norm, noise_multiplier):
    """``(sum_j w_j clip(g_j, C) + N(0, (z C)^2 I)) / batch.denominator`` for a given minibatch (the
    part of :func:`noisy_gradient` after sampling; for samplers that need more than a step key)."""
    unit_noise = None if _is_python_zero(noise_multiplier) else gaussian_like(noise_key, params, 1.0)
    return _privatize(loss_fn, params, batch, unit_noise, clip_norm=clip_norm, noise_multiplier=noise_multiplier)


def _privatize(loss_fn, params, batch: Batch, unit_noise, *, clip_norm, noise_multiplier):
    """The clipped sum plus ``z C`` times ``unit_noise`` (i.i.d. N(0, 1) shaped like ``params``; None:
    no noise, for a Python ``0`` multiplier), divided by the batch's denominator."""
    summed = clipped_grad_sum(loss_fn, params, batch.x, batch.y, batch.weights, clip_norm)
    noisy = summed.value
    if unit_noise is not None:
        std = jnp.where(noise_multiplier > 0, noise_multiplier * clip_norm, 0.0)
        noisy = jax.tree_util.tree_map(lambda s, u: s + std * u, noisy, unit_noise)
    # Multiplying by the reciprocal (never dividing by a traced scalar) keeps XLA from rewriting the
    # division differently in differently-sharded programs: results stay bitwise device-independent.
    inverse = 1.0 / batch.denominator
    grad = jax.tree_util.tree_map(lambda g: g * inverse, noisy)
    info = {"clipped_fraction": summed.num_clipped / jnp.maximum(summed.count, 1.0)}
    return grad, info


# ------------------------------------------------------------------------------------------------
# Local steps, with their randomness drawn ahead of the loop


class _Request(NamedTuple):
    """One :func:`noisy_gradient` call as ``gradient_fn`` makes it (trace-time objects)."""

    sampler: Sampler
    silo_key: Any
    x: Any
    y: Any
    count: Any
    params: Any
    noise_multiplier: Any

    def same_call(self, other: "_Request") -> bool:
        same = (self.silo_key is other.silo_key and self.x is other.x and self.y is other.y
                and self.count is other.count and self.sampler == other.sampler and self.noisy() == other.noisy())
        return same and jax.tree_util.tree_structure(self.params) == jax.tree_util.tree_structure(other.params)

    def noisy(self) -> bool:
        return not _is_python_zero(self.noise_multiplier)

    def draw(self, step):
        """This call's draws at ``step``: ``(sampler randomness, unit noise or None)``."""
        count = self.count
        indices = self.sampler.draw(keys_lib.step_key(self.silo_key, step, keys_lib.Purpose.MINIBATCH), count,
                                    self.x.shape[0])
        noise = gaussian_like(keys_lib.step_key(self.silo_key, step, keys_lib.Purpose.NOISE), self.params, 1.0) \
            if self.noisy() else None
        return indices, noise

    def size(self) -> int:
        noise = sum(math.prod(jnp.shape(p)) for p in jax.tree_util.tree_leaves(self.params)) if self.noisy() else 0
        return self.sampler.draw_size(self.x.shape[0]) + noise


class _DrawContext:
    """Trace-time state of one :func:`local_steps`: probing records the calls; replaying hands each
    matching call its pre-drawn values."""

    def __init__(self, step, requests=None, draws=None):
        self.step, self.probing = step, requests is None
        self.requests = [] if requests is None else requests
        self.draws, self.position, self.usable = draws, 0, True
        self.trace = getattr(step, "_trace", None) if self.probing else None

    def consume(self, request: _Request, step):
        if self.probing:
            inside = self.trace is None or any(_made_in(v, self.trace) for v in (request.silo_key, request.x,
                                                                                   request.y, request.count))
            if step is self.step and not inside:
                shapes = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)),
                                                request.params)
                self.requests.append(request._replace(params=shapes))
                return (None, None)
            self.usable = False  # another step than the loop's, or a key or data made inside gradient_fn
            return None
        i = self.position
        if step is not self.step or i >= len(self.requests) or not self.requests[i].same_call(request):
            return None
        self.position += 1
        return self.draws[i]


_DRAW_AHEAD: list = []


def _probe(params, gradient_fn):
    """The :func:`noisy_gradient` calls ``gradient_fn(params, step)`` makes with the step it is given,
    found by an abstract trace (nothing is computed); None if some call uses another step or a key or
    data made inside ``gradient_fn`` (which cannot be used outside it)."""
    found = {}

    def traced(p, step):
        context = _DrawContext(step)
        _DRAW_AHEAD.append(context)
        try:
            out = gradient_fn(p, step)
        finally:
            _DRAW_AHEAD.pop()
        found["requests"] = context.requests if context.usable and context.requests else None
        return out  # no tracer of this trace outlives it (tracer-leak checks stay quiet)

    jax.eval_shape(traced, params, jax.ShapeDtypeStruct((), jnp.int32))
    return found["requests"]


def _made_in(value, trace) -> bool:
    """Whether ``value`` is a tracer of ``trace`` or of a transformation nested in it (e.g. a key that
    ``gradient_fn`` derives itself), which cannot be used outside ``gradient_fn``."""
    t = getattr(value, "_trace", None)
    for _ in range(64):
        if t is None:
            return False
        if t is trace:
            return True
        t = getattr(t, "parent_trace", None)
    return True


def local_steps(params, *, num_steps: int, client_opt: optax.GradientTransformation, gradient_fn: Callable):
    """``num_steps`` local optimizer steps under ``lax.scan``; ``gradient_fn(params, step) -> (g, info)``.

    The randomness of :func:`noisy_gradient` calls made with the loop's ``step`` is drawn ahead of the
    loop in blocks of steps (see the module docstring and :data:`DRAW_AHEAD_ELEMENTS`); the results
    are those of drawing it step by step.

    Returns ``(final_params, info averaged over steps)``.
    """
    num_steps = int(num_steps)

    def body(carry, step, drawn):
        p, opt_state = carry
        if drawn is None:
            g, info = gradient_fn(p, step)
        else:
            _DRAW_AHEAD.append(_DrawContext(step, requests, drawn))
            try:
                g, info = gradient_fn(p, step)
            finally:
                _DRAW_AHEAD.pop()
        updates, opt_state = client_opt.update(g, opt_state, p)
        return (optax.apply_updates(p, updates), opt_state), info

    def run(carry, steps):
        """Steps ``steps`` (an int32 vector) with their draws made first."""
        drawn = jax.vmap(lambda s: [r.draw(s) for r in requests])(steps) if requests else None
        return jax.lax.scan(lambda c, xs: body(c, xs[0], xs[1]), carry, (steps, drawn))

    carry = (params, client_opt.init(params))
    requests = _probe(params, gradient_fn) if DRAW_AHEAD_ELEMENTS > 0 and num_steps > 1 else None
    block = min(num_steps, DRAW_AHEAD_ELEMENTS // max(1, sum(r.size() for r in requests))) if requests else 0
    if block < 2:
        (final, _), infos = jax.lax.scan(lambda c, s: body(c, s, None), carry, jnp.arange(num_steps))
        return final, jax.tree_util.tree_map(jnp.mean, infos)
    blocks, rest = divmod(num_steps, block)
    parts = []
    if blocks == 1:
        carry, infos = run(carry, jnp.arange(block))
        parts.append(infos)
    else:
        carry, infos = jax.lax.scan(lambda c, b: run(c, b * block + jnp.arange(block)), carry, jnp.arange(blocks))
        parts.append(jax.tree_util.tree_map(lambda a: a.reshape((blocks * block,) + a.shape[2:]), infos))
    if rest:
        carry, infos = run(carry, blocks * block + jnp.arange(rest))
        parts.append(infos)
    infos = jax.tree_util.tree_map(lambda *a: jnp.concatenate(a), *parts)
    return carry[0], jax.tree_util.tree_map(jnp.mean, infos)


def local_epochs(loss_fn, params, x, y, count, silo_key, *, client_opt: optax.GradientTransformation,
                 batch_size: int, epochs: int = 1):
    """Non-private local training: ``epochs`` passes over the silo's ``count`` records in a fresh random
    order per epoch, in minibatches of ``batch_size`` (the last one of a pass may be smaller), one
    ``client_opt`` step on the minibatch's mean loss each.

    The loop runs ``epochs * ceil(count / batch_size)`` steps (a ``lax.while_loop`` with a data-dependent
    trip count), so a silo with fewer records than the largest one costs only its own steps when silos run
    one after another; under ``vmap`` the batched loop runs to the longest silo's count and keeps each
    finished silo's params and optimizer state (fedjax-style masking).

    Args:
      loss_fn: per-example loss ``(params, x, y) -> scalar``.
      x, y: the silo's padded records ``[max_records, ...]``; count: its number of real records.
      silo_key: the silo's key; epoch ``e``'s order comes from ``step_key(silo_key, e, MINIBATCH)``.
    Returns:
      ``(params, mean training loss over the steps taken)``.
    """
    batch_size, epochs = int(batch_size), int(epochs)
    if batch_size < 1 or epochs < 1:
        raise ValueError(f"batch_size and epochs must be >= 1, got {batch_size} and {epochs}")
    max_records = x.shape[0]
    per_epoch = -(-max_records // batch_size)
    real = jnp.arange(max_records) < count
    steps_per_epoch = (count + batch_size - 1) // batch_size

    def order(epoch):
        u = jax.random.uniform(keys_lib.step_key(silo_key, epoch, keys_lib.Purpose.MINIBATCH), (max_records,))
        return jnp.argsort(jnp.where(real, u, 2.0))  # a uniform permutation of the real records, padding last

    orders = jax.vmap(order)(jnp.arange(epochs))
    padded = jnp.pad(orders, ((0, 0), (0, per_epoch * batch_size - max_records)))

    def batch_loss(p, idx, mask):
        losses = jax.vmap(loss_fn, in_axes=(None, 0, 0))(p, x[idx], y[idx])
        return jnp.sum(losses * mask) / jnp.maximum(jnp.sum(mask), 1.0)

    def body(step, carry):
        p, opt_state, loss_sum = carry
        epoch, i = jnp.divmod(step, jnp.maximum(steps_per_epoch, 1))
        positions = i * batch_size + jnp.arange(batch_size)
        idx = jax.lax.dynamic_slice(padded[epoch], (i * batch_size,), (batch_size,))
        mask = (positions < count).astype(jnp.float32)
        loss, g = jax.value_and_grad(batch_loss)(p, idx, mask)
        updates, opt_state = client_opt.update(g, opt_state, p)
        return optax.apply_updates(p, updates), opt_state, loss_sum + loss

    steps = epochs * steps_per_epoch
    final, _, loss_sum = jax.lax.fori_loop(0, steps, body, (params, client_opt.init(params), jnp.float32(0.0)))
    return final, loss_sum / jnp.maximum(steps, 1)

