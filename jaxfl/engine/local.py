"""Silo-side building blocks shared by every algorithm: minibatch samplers, noisy gradients, local steps.

A silo sees its padded records ``x: [max_records, ...]``, ``y`` and its ``count``; every sampler
draws only among the first ``count`` rows.

**Randomness of local steps.** A local step receives its random draws as an argument:
``local_steps(params, num_steps=, client_opt=, gradient_fn=, draw_fn=)`` runs
``g, info = gradient_fn(params, step, draw_fn(step))`` for ``step = 0 .. num_steps - 1`` (``drawn`` is
``None`` without a ``draw_fn``). ``draw_fn`` sees only the step (keys, counts and shapes it closes over
are fixed for the whole loop), so :func:`local_steps` may evaluate it ahead of the sequential loop,
vmapped over a block of steps (at most :data:`DRAW_AHEAD_ELEMENTS` random values per block): one
vectorized draw replaces one tiny draw per step, whose fixed cost (several kernel launches per
threefry hash on CPU) dominated small models' local steps. Where ``draw_fn`` is evaluated changes no
value. :func:`step_draws` is the draw of :func:`noisy_gradient` (minibatch from
``step_key(silo_key, step, MINIBATCH)``, unit noise from ``step_key(silo_key, step, NOISE)``), which
draws from those keys itself when given no draws.
"""
from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxfl import checks
from jaxfl.models.rewrite import for_backend
from jaxfl.privacy import keys as keys_lib, uniform
from jaxfl.privacy.clipping import ClippedSum, clipped_grad_sum, selected_clipped_grad_sum
from jaxfl.privacy.microbatch import check_microbatch, microbatch_size, microbatch_sum
from jaxfl.privacy.noise import noisy_clipped_mean, unit_noise_like

DRAW_AHEAD_ELEMENTS = 1 << 18
"""Most random values (e.g. indices + noise entries) :func:`local_steps` draws ahead of its loop per
silo per block of steps; blocks of fewer than 2 steps fall back to calling ``draw_fn`` inside the loop.
0 always draws inside the loop (same values)."""


class Batch(NamedTuple):
    """A minibatch as :func:`noisy_batch_gradient` takes it: records ``x``, ``y`` with per-record ``weights``
    (0 on padding and unsampled rows) and the public ``denominator`` the clipped sum is divided by. Example:
    :func:`noisy_batch_gradient`."""

    x: jnp.ndarray  # [b, ...]
    y: jnp.ndarray  # [b, ...]
    weights: jnp.ndarray  # [b]; 0 on padding / unsampled records
    denominator: jnp.ndarray  # scalar: the public constant the sum is divided by (Sampler.denominator)


class Sampler(NamedTuple):
    """How a silo picks its minibatch in one local step.

    ``kind`` is ``"with_replacement"`` (``batch_size`` uniform draws, Lowy & Razaviyayn's sampling; fixed
    shape, O(batch) work), ``"poisson"`` (each record with probability ``rate``; O(max_records)
    work) or ``"full"`` (all records). What a step's clipped sum is divided by, and with it the neighbouring
    relation the step is private under, is :meth:`denominator` and :attr:`relation`:

    - ``expected_batch_size`` given (Poisson or full batch; a public constant fixed before any data is seen,
      e.g. ``rate`` times the silo size the user plans for, as Opacus's ``expected_batch_size`` and
      TF-Privacy's fixed denominators): the sum is divided by that constant, and adding or removing one
      record moves the release by at most ``C / expected_batch_size``: **add/remove-one**.
    - otherwise the divisor is the silo's own size (``rate * count`` for Poisson, ``count`` for the full
      batch, ``batch_size`` with replacement), which adding or removing a record changes, so that the scale of
      the whole release reveals membership (an audit finds epsilon >= 8 where 0.81 would be claimed). It is
      public only under **replace-one** neighbours (sensitivity ``2C``), the relation stated then.

    A Poisson sampler
    with ``chunk`` gathers the sampled records and takes their gradients ``chunk`` at a time, as many
    chunks as the draw needs (the same sample and sum, O(sampled records) gradient work: for rates well
    below 1 on large silos) in :func:`noisy_gradient`; :meth:`take` still gives the whole masked batch.
    ``microbatch`` is how :func:`noisy_gradient` takes the step's clipped sum: in slices of that many records
    (``"auto"``, ``None`` or an int: :func:`jaxfl.privacy.microbatch.microbatch_size`); it changes memory and
    speed, not the sample or (beyond float rounding) the sum.
    ``sampler(key, x, y, count)`` is ``sampler.take(sampler.draw(key, count, len(x)), x, y, count)``.

    Example: :func:`make_sampler`.
    """

    kind: str
    batch_size: int | None = None
    rate: Any = None
    chunk: Any = None
    microbatch: Any = "auto"
    expected_batch_size: Any = None

    @property
    def relation(self) -> dp_accounting.NeighboringRelation:
        """The neighbouring relation a step of this sampler is private under (see the class docstring)."""
        if self.kind != "with_replacement" and self.expected_batch_size is not None:
            return dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
        return dp_accounting.NeighboringRelation.REPLACE_ONE

    def denominator(self, count):
        """What a step's clipped sum on a silo with ``count`` records is divided by: ``expected_batch_size``
        when given; else ``batch_size`` (with replacement), ``rate * count`` (Poisson, floored at 1e-12; 1
        for a silo without records, whose message is then its noise at scale ``z C`` rather than that noise
        times 1e12) or ``max(count, 1)`` (full batch)."""
        if self.kind == "with_replacement":
            return jnp.asarray(self.batch_size, jnp.float32)
        if self.expected_batch_size is not None:
            return jnp.asarray(self.expected_batch_size, jnp.float32)
        count = jnp.asarray(count)
        if self.kind == "poisson":
            return jnp.where(count > 0, jnp.maximum(self.rate * count.astype(jnp.float32), 1e-12), 1.0)
        return jnp.maximum(count, 1).astype(jnp.float32)

    def __call__(self, key, x, y, count) -> Batch:
        return self.take(self.draw(key, count, x.shape[0]), x, y, count)

    def draw(self, key, count, max_records: int):
        """The step's randomness: indices ``int32[batch_size]``, a ``bool[max_records]`` Poisson mask,
        or ``None`` (full batch)."""
        if self.kind == "with_replacement":
            return uniform.randint(key, (self.batch_size,), 0, jnp.maximum(count, 1))
        if self.kind == "poisson":
            return uniform.bernoulli(key, self.rate, (max_records,))
        if self.kind == "full":
            return None
        raise ValueError(f"unknown sampler kind {self.kind!r}")

    def take(self, drawn, x, y, count) -> Batch:
        """The minibatch given the randomness ``drawn`` of :meth:`draw`."""
        if self.kind == "with_replacement":
            w = jnp.broadcast_to((count > 0).astype(jnp.float32), (self.batch_size,))
            return Batch(x[drawn], y[drawn], w, self.denominator(count))
        real = jnp.arange(x.shape[0]) < count
        if self.kind == "poisson":
            return Batch(x, y, (drawn & real).astype(jnp.float32), self.denominator(count))
        if self.kind == "full":
            return Batch(x, y, real.astype(jnp.float32), self.denominator(count))
        raise ValueError(f"unknown sampler kind {self.kind!r}")

    def event(self, count: int, noise_multiplier: float):
        """The ``dp_accounting`` event of one step on a silo with ``count`` records."""
        gaussian = dp_accounting.GaussianDpEvent(float(noise_multiplier))
        if self.kind == "with_replacement":
            return dp_accounting.SampledWithReplacementDpEvent(int(count), int(self.batch_size), gaussian)
        if self.kind == "poisson":
            return dp_accounting.PoissonSampledDpEvent(float(self.rate), gaussian)
        return gaussian


def make_sampler(batch_size: int | None = None, sampling_rate=None, chunk="auto",
                 microbatch="auto", expected_batch_size=None) -> Sampler:
    """``batch_size`` -> with-replacement sampler; ``sampling_rate`` -> Poisson (gradients ``chunk`` sampled
    records at a time when given: see :class:`Sampler`); neither -> full batch. ``microbatch``: how the
    step's clipped sum is sliced; ``expected_batch_size``: the public constant a Poisson or full-batch sum is
    divided by, which makes the step add/remove-one private (:class:`Sampler`; a positive number, may be
    traced).

    Example:
      >>> make_sampler(sampling_rate=0.1, expected_batch_size=10.0)
      Sampler(kind='poisson', batch_size=None, rate=0.1, chunk='auto', microbatch='auto', expected_batch_size=10.0)
      >>> make_sampler(batch_size=8).kind, make_sampler().kind
      ('with_replacement', 'full')
    """
    sampler = _sampler(batch_size, sampling_rate, chunk)._replace(microbatch=check_microbatch(microbatch))
    if expected_batch_size is not None:
        if sampler.kind == "with_replacement":
            raise ValueError("expected_batch_size is for Poisson or full-batch sampling; with batch_size the sum "
                             f"is divided by batch_size (got expected_batch_size={expected_batch_size})")
        if isinstance(expected_batch_size, (int, float)):
            checks.positive_float("expected_batch_size", expected_batch_size)
        sampler = sampler._replace(expected_batch_size=expected_batch_size)
    return sampler


def _sampler(batch_size, sampling_rate, chunk) -> Sampler:
    if batch_size is not None and sampling_rate is not None:
        raise ValueError("give batch_size or sampling_rate, not both")
    auto = isinstance(chunk, str) and chunk == "auto"
    if chunk is not None and not auto:
        if sampling_rate is None:
            raise ValueError("chunk needs a Poisson sampler (sampling_rate)")
        if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
            raise ValueError(f"chunk must be 'auto', None or an int >= 1, got {chunk!r}")
        chunk = int(chunk)
    if batch_size is not None:
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        return Sampler("with_replacement", batch_size=int(batch_size))
    if sampling_rate is not None:
        if isinstance(sampling_rate, (int, float)) and not 0.0 < sampling_rate <= 1.0:
            raise ValueError(f"sampling_rate must be in (0, 1], got {sampling_rate}")
        return Sampler("poisson", rate=sampling_rate, chunk=chunk)
    return Sampler("full")


def gather_chunk(sampler: Sampler, max_records: int) -> int | None:
    """How many sampled records a Poisson step gathers at a time (:func:`selected_clipped_grad_sum`), or None for
    the masked pass over all ``max_records`` rows.

    ``chunk="auto"`` (the default) with a rate known at build time (a Python number) gathers when the expected
    sample ``q n`` is at most half the silo (``n = max_records``), in chunks of its mean plus three standard
    deviations rounded up to 8 (one pass in almost every step: O(q n) gradient work, not O(n)); a rate known only
    when the program runs (a sweep over rates, ``PerRound`` rates) takes the masked pass, as does a rate above
    one half (gathering would save little). An int is that chunk; None the masked pass.

    Example (rate 0.01 of 10,000 records: gather 136 at a time, far above the expected 100, not all 10,000):
      >>> gather_chunk(make_sampler(sampling_rate=0.01), 10_000), gather_chunk(make_sampler(sampling_rate=0.5), 100)
      (136, 72)
    """
    if sampler.kind != "poisson" or sampler.chunk is None:
        return None
    if sampler.chunk != "auto":
        return int(sampler.chunk)
    rate = sampler.rate
    if not isinstance(rate, (int, float, np.floating)) or float(rate) > 0.5:
        return None
    mean = float(rate) * max_records
    return min(max_records, 8 * math.ceil((mean + 3 * math.sqrt(mean * (1 - float(rate)))) / 8))


def step_draws(sampler: Sampler, silo_key, count, max_records: int, params, noise_multiplier) -> Callable:
    """The ``draw_fn`` of :func:`noisy_gradient` for :func:`local_steps`.

    Args:
      sampler: the minibatch sampler; silo_key, count: the silo's key and number of records.
      max_records: ``x.shape[0]``; params: a pytree of the parameters' shapes and dtypes (arrays or
        ``jax.ShapeDtypeStruct`` values).
      noise_multiplier: only whether it is a Python ``0`` (no noise drawn) matters here.
    Returns:
      ``draw_fn(step) -> (sampler randomness, unit noise or None)``: :meth:`Sampler.draw` from
      ``step_key(silo_key, step, MINIBATCH)`` and ``gaussian_like(step_key(silo_key, step, NOISE),
      params, 1.0)``.

    Example: :func:`local_steps` (``draw_fn``), as :func:`jaxfl.algorithms.sgd.local_sgd` builds it.
    """

    def draw_fn(step):
        minibatch = sampler.draw(keys_lib.step_key(silo_key, step, keys_lib.Purpose.MINIBATCH), count, max_records)
        noise = unit_noise_like(keys_lib.step_key(silo_key, step, keys_lib.Purpose.NOISE), params, noise_multiplier)
        return minibatch, noise

    return draw_fn


def noisy_gradient(loss_fn, params, x, y, count, silo_key, step, *, sampler: Sampler, clip_norm,
                   noise_multiplier, drawn=None):
    """One silo's privatized minibatch gradient in local step ``step``.

    ``(sum_j w_j clip(g_j, C) + N(0, (z C)^2 I)) / denominator``; the minibatch comes from
    ``derive(.., step, MINIBATCH)`` and the noise from ``derive(.., step, NOISE)``, or from ``drawn``,
    this step's value of :func:`step_draws` (the same numbers, drawn ahead by :func:`local_steps`).
    With ``clip_norm = inf`` and ``noise_multiplier = 0`` this is the plain minibatch gradient (a
    Python ``0`` draws no noise at all).

    Returns ``(gradient, info)`` with ``info["clipped_fraction"]``.

    Example (DP-SGD's step: Poisson rate 0.1, clip 1, noise multiplier 1, divided by the expected batch 10):
      >>> import jax, jax.numpy as jnp
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> x = jax.random.normal(jax.random.key(0), (100, 3))            # one silo of 100 records
      >>> y = (x[:, 0] > 0).astype(jnp.float32)
      >>> sampler = make_sampler(sampling_rate=0.1, expected_batch_size=10.0)
      >>> grad, info = noisy_gradient(logistic_loss, init_linear(3), x, y, 100, jax.random.key(1), 0, sampler=sampler,
      ...                             clip_norm=1.0, noise_multiplier=1.0)
      >>> grad["w"].shape, sorted(info)
      ((3,), ['clipped_fraction'])
    """
    gradient, info, _ = noisy_gradient_and_counts(loss_fn, params, x, y, count, silo_key, step, sampler=sampler,
                                                  clip_norm=clip_norm, noise_multiplier=noise_multiplier, drawn=drawn)
    return gradient, info


def noisy_gradient_and_counts(loss_fn, params, x, y, count, silo_key, step, *, sampler: Sampler, clip_norm,
                              noise_multiplier, drawn=None):
    """:func:`noisy_gradient` and ``(records, clipped)``: how many records the step summed and how many of them
    its clip shrank (before noise: not private on their own; adaptive clipping releases a noisy count of them).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> x = 10 * jax.random.normal(jax.random.key(0), (100, 3))
      >>> y = (x[:, 0] > 0).astype(jnp.float32)
      >>> grad, info, (records, clipped) = noisy_gradient_and_counts(
      ...     logistic_loss, init_linear(3), x, y, 100, jax.random.key(1), 0, sampler=make_sampler(), clip_norm=0.1,
      ...     noise_multiplier=0.0)
      >>> float(records), float(clipped) / float(records) == float(info["clipped_fraction"])
      (100.0, True)
    """
    if drawn is None:
        drawn = step_draws(sampler, silo_key, count, x.shape[0], params, noise_multiplier)(step)
    minibatch, unit_noise = drawn
    summed, denominator = _step_sum(loss_fn, params, x, y, count, minibatch, sampler=sampler, clip_norm=clip_norm)
    gradient, info = _noisy_mean(summed, unit_noise, denominator, clip_norm, noise_multiplier)
    return gradient, info, (summed.count, summed.num_clipped)


def noisy_and_plain_gradients(loss_fn, noised, plain, x, y, count, silo_key, step, *, sampler: Sampler, clip_norm,
                              noise_multiplier, drawn=None):
    """:func:`noisy_gradient` of ``noised`` and the plain minibatch gradient of ``plain`` (same minibatch, no
    clipping, no noise) from one forward pass, for a per-record ``loss_fn(noised, plain, x, y)``.

    The same values, to float rounding, as the two calls ``noisy_gradient(lambda n, xj, yj: loss_fn(n, plain, xj,
    yj), noised, ...)`` and ``noisy_gradient(lambda q, xj, yj: loss_fn(noised, q, xj, yj), plain, ...,
    clip_norm=inf, noise_multiplier=0, drawn=(drawn[0], None))``: the per-example norms cover ``noised`` only
    (:func:`jaxfl.privacy.clipping.clipped_grad_sum`'s ``unclipped``), so the noisy gradient's sensitivity
    statement is unchanged, and ``drawn`` is :func:`step_draws`'s for ``noised``. The second call's forward
    pass is the one saved (for Huang et al.'s joint DP, a whole CNN forward per step).

    Returns ``((noisy gradient like noised, plain gradient like plain), info)``.

    Example: :func:`noisy_gradient` (the same call with a second, plain part).
    """
    if drawn is None:
        drawn = step_draws(sampler, silo_key, count, x.shape[0], noised, noise_multiplier)(step)
    minibatch, unit_noise = drawn
    summed, denominator = _step_sum(lambda pair, xj, yj: loss_fn(*pair, xj, yj), (noised, plain), x, y, count,
                                    minibatch, sampler=sampler, clip_norm=clip_norm, unclipped=(False, True))
    value, plain_value = summed.value
    gradient, info = _noisy_mean(summed._replace(value=value), unit_noise, denominator, clip_norm, noise_multiplier)
    plain_gradient, _ = _noisy_mean(summed._replace(value=plain_value), None, denominator, math.inf, 0)
    return (gradient, plain_gradient), info


def _step_sum(loss_fn, params, x, y, count, minibatch, *, sampler: Sampler, clip_norm, unclipped=None):
    """``(ClippedSum over the step's minibatch, what it is divided by)`` (:func:`noisy_gradient`)."""
    chunk = gather_chunk(sampler, x.shape[0])
    if chunk is not None:
        selected = minibatch & (jnp.arange(x.shape[0]) < count)
        summed = selected_clipped_grad_sum(loss_fn, params, x, y, selected, clip_norm, chunk=chunk,
                                           microbatch=sampler.microbatch, unclipped=unclipped)
        return summed, sampler.denominator(count)
    batch = sampler.take(minibatch, x, y, count)
    summed = clipped_grad_sum(loss_fn, params, batch.x, batch.y, batch.weights, clip_norm,
                              microbatch=sampler.microbatch, unclipped=unclipped)
    return summed, batch.denominator


def noisy_batch_gradient(loss_fn, params, batch: Batch, noise_key, *, clip_norm, noise_multiplier,
                         microbatch="auto"):
    """``(sum_j w_j clip(g_j, C) + N(0, (z C)^2 I)) / batch.denominator`` for a given minibatch (the
    part of :func:`noisy_gradient` after sampling; for samplers that need more than a step key).

    Example (a given batch of 10 records, no noise: the mean of the clipped gradients):
      >>> import jax, jax.numpy as jnp
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> x = jax.random.normal(jax.random.key(0), (100, 3))            # one silo of 100 records
      >>> y = (x[:, 0] > 0).astype(jnp.float32)
      >>> batch = Batch(x[:10], y[:10], jnp.ones(10), jnp.float32(10.0))
      >>> grad, info = noisy_batch_gradient(logistic_loss, init_linear(3), batch, jax.random.key(2), clip_norm=1.0,
      ...                                   noise_multiplier=0.0)
      >>> grad["w"].shape, float(info["clipped_fraction"]) <= 1.0
      ((3,), True)
    """
    unit_noise = unit_noise_like(noise_key, params, noise_multiplier)  # None for a Python 0 multiplier
    summed = clipped_grad_sum(loss_fn, params, batch.x, batch.y, batch.weights, clip_norm, microbatch=microbatch)
    return _noisy_mean(summed, unit_noise, batch.denominator, clip_norm, noise_multiplier)


def _noisy_mean(summed: ClippedSum, unit_noise, denominator, clip_norm, noise_multiplier):
    grad = noisy_clipped_mean(summed.value, unit_noise, clip_norm=clip_norm, noise_multiplier=noise_multiplier,
                              denominator=denominator)
    info = {"clipped_fraction": summed.num_clipped / jnp.maximum(summed.count, 1.0)}
    return grad, info


# ------------------------------------------------------------------------------------------------
# Local steps, with their randomness drawn ahead of the loop


def _draw_block(draw_fn, num_steps: int) -> int:
    """Steps whose draws are made at once (within :data:`DRAW_AHEAD_ELEMENTS`); < 2: draw in the loop."""
    if draw_fn is None or DRAW_AHEAD_ELEMENTS <= 0 or num_steps < 2:
        return 0
    shapes = jax.eval_shape(draw_fn, jax.ShapeDtypeStruct((), jnp.int32))
    per_step = sum(math.prod(s.shape) for s in jax.tree_util.tree_leaves(shapes))
    return min(num_steps, DRAW_AHEAD_ELEMENTS // per_step) if per_step else 0


def local_steps(params, *, num_steps: int, client_opt: optax.GradientTransformation, gradient_fn: Callable,
                draw_fn: Callable | None = None):
    """``num_steps`` local optimizer steps under ``lax.scan``.

    Args:
      params: the starting parameters.
      num_steps: a Python int.
      client_opt: the optimizer applied to each step's gradient.
      gradient_fn: ``(params, step, drawn) -> (gradient, info)``, ``step`` an int32 scalar and
        ``drawn`` this step's ``draw_fn(step)`` (``None`` without ``draw_fn``).
      draw_fn: ``step -> pytree`` of the step's random draws, e.g. :func:`step_draws`; a function of
        ``step`` only, evaluated ahead of the loop for blocks of steps (see the module docstring).

    Returns ``(final_params, info averaged over steps)``.

    Example (five full-batch gradient steps; ``gradient_fn`` returns the step's gradient and facts):
      >>> import jax, jax.numpy as jnp
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> x = jax.random.normal(jax.random.key(0), (100, 3))            # one silo of 100 records
      >>> y = (x[:, 0] > 0).astype(jnp.float32)
      >>> import optax
      >>> def gradient_fn(params, step, drawn):
      ...     loss, grad = mean_loss_and_grad(logistic_loss, params, x, y, jnp.ones(100))
      ...     return grad, {"loss": loss}
      >>> params, info = local_steps(init_linear(3), num_steps=5, client_opt=optax.sgd(1.0), gradient_fn=gradient_fn)
      >>> float(mean_loss_and_grad(logistic_loss, params, x, y, jnp.ones(100))[0]) < 0.6931      # below log 2
      True
    """
    num_steps = int(num_steps)

    def body(carry, step, drawn):
        p, opt_state = carry
        g, info = gradient_fn(p, step, drawn)
        updates, opt_state = client_opt.update(g, opt_state, p)
        return (optax.apply_updates(p, updates), opt_state), info

    def in_loop(carry, step):
        return body(carry, step, None if draw_fn is None else draw_fn(step))

    def run(carry, steps):
        """Steps ``steps`` (``int32[k]``) with their draws made first, in one vmapped draw."""
        drawn = jax.vmap(draw_fn)(steps)
        return jax.lax.scan(lambda c, xs: body(c, *xs), carry, (steps, drawn))

    carry = (params, client_opt.init(params))
    block = _draw_block(draw_fn, num_steps)
    if block < 2:
        (final, _), infos = jax.lax.scan(in_loop, carry, jnp.arange(num_steps))
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


def mean_loss_and_grad(loss_fn, params, x, y, mask, *, microbatch="auto"):
    """The masked mean loss ``sum_j mask_j f(params, x_j, y_j) / max(sum_j mask_j, 1)`` and its gradient.

    Args:
      loss_fn: per-example loss ``(params, x, y) -> scalar``; x, y: a minibatch ``[batch, ...]``;
        mask: ``[batch]`` weights (0 on padding).
      microbatch: the gradient taken in slices of records (:mod:`jaxfl.privacy.microbatch`; ``"auto"``, the
        default, slices on the CPU backend when the minibatch's intermediates overflow the cache; ``None``:
        never). The same value to float rounding.
    Returns:
      ``(loss, grad)``.

    Example (zero parameters: every record's loss is log 2; the masked half does not count):
      >>> import jax, jax.numpy as jnp
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> x = jax.random.normal(jax.random.key(0), (100, 3))            # one silo of 100 records
      >>> y = (x[:, 0] > 0).astype(jnp.float32)
      >>> mask = (jnp.arange(100) < 50).astype(jnp.float32)
      >>> loss, grad = mean_loss_and_grad(logistic_loss, init_linear(3), x, y, mask)
      >>> round(float(loss), 4), grad["w"].shape
      (0.6931, (3,))
    """
    size = microbatch_size(loss_fn, params, x, y, microbatch)
    per_example = jax.vmap(for_backend(loss_fn), in_axes=(None, 0, 0))
    if size >= x.shape[0]:
        return jax.value_and_grad(lambda p: jnp.sum(per_example(p, x, y) * mask) / jnp.maximum(jnp.sum(mask), 1.0))(
            params)

    def sums(valid, xs, ys, ms):
        return jax.value_and_grad(lambda p: jnp.sum(ms * valid * per_example(p, xs, ys)))(params)

    loss, grad = microbatch_sum(sums, size, x, y, mask)
    n = jnp.maximum(jnp.sum(mask), 1.0)
    return loss / n, jax.tree_util.tree_map(lambda g: g / n, grad)


def local_epochs(loss_fn, params, x, y, count, silo_key, *, client_opt: optax.GradientTransformation,
                 batch_size: int, epochs: int = 1, microbatch="auto"):
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
      microbatch: each step's gradient taken in slices of records (:func:`mean_loss_and_grad`).
    Returns:
      ``(params, mean training loss over the steps taken)``.

    Example (two epochs in minibatches of 10):
      >>> import jax, jax.numpy as jnp
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> x = jax.random.normal(jax.random.key(0), (100, 3))            # one silo of 100 records
      >>> y = (x[:, 0] > 0).astype(jnp.float32)
      >>> import optax
      >>> params, _ = local_epochs(logistic_loss, init_linear(3), x, y, 100, jax.random.key(3),
      ...                          client_opt=optax.sgd(0.5), batch_size=10, epochs=2)
      >>> float(mean_loss_and_grad(logistic_loss, params, x, y, jnp.ones(100))[0]) < 0.5
      True
    """
    batch_size, epochs = int(batch_size), int(epochs)
    if batch_size < 1 or epochs < 1:
        raise ValueError(f"batch_size and epochs must be >= 1, got {batch_size} and {epochs}")
    max_records = x.shape[0]
    per_epoch = -(-max_records // batch_size)
    real = jnp.arange(max_records) < count
    steps_per_epoch = (count + batch_size - 1) // batch_size

    def order(epoch):
        u = uniform.uniform(keys_lib.step_key(silo_key, epoch, keys_lib.Purpose.MINIBATCH), (max_records,))
        return jnp.argsort(jnp.where(real, u, 2.0))  # a uniform permutation of the real records, padding last

    orders = jax.vmap(order)(jnp.arange(epochs))
    padded = jnp.pad(orders, ((0, 0), (0, per_epoch * batch_size - max_records)))

    def body(step, carry):
        p, opt_state, loss_sum = carry
        epoch, i = jnp.divmod(step, jnp.maximum(steps_per_epoch, 1))
        positions = i * batch_size + jnp.arange(batch_size)
        idx = jax.lax.dynamic_slice(padded[epoch], (i * batch_size,), (batch_size,))
        mask = (positions < count).astype(jnp.float32)
        loss, g = mean_loss_and_grad(loss_fn, p, x[idx], y[idx], mask, microbatch=microbatch)
        updates, opt_state = client_opt.update(g, opt_state, p)
        return optax.apply_updates(p, updates), opt_state, loss_sum + loss

    steps = epochs * steps_per_epoch
    final, _, loss_sum = jax.lax.fori_loop(0, steps, body, (params, client_opt.init(params), jnp.float32(0.0)))
    return final, loss_sum / jnp.maximum(steps, 1)

