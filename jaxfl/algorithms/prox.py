"""Proximal operators for composite losses ``f = f0 + f1`` (Lowy et al., digest §4.10), composable with optax.

A :class:`Prox` computes ``prox_{eta f1}(z) = argmin_y ( eta f1(y) + ||y - z||^2 / 2 )`` on a whole
parameter pytree (the norms are *global* over all leaves), and evaluates ``f1`` itself::

    p = l1(0.1)
    w_next = p(w - eta * g, eta)          # one proximal gradient step (w, g pytrees)
    p.penalty(w_next)                     # f1(w_next) = 0.1 ||w_next||_1

Factories: :func:`identity` (f1 = 0, what Lowy et al.'s experiments use), :func:`l1` (soft-thresholding),
:func:`l2_squared`, :func:`elastic_net`, :func:`l2_ball` and :func:`box` (indicators: the prox is the
Euclidean projection and the step size is ignored), and :func:`chain` for the compositions that are
*exactly* the prox of the sum of the penalties (see its docstring; others raise ``ValueError``).

:func:`proximal` wraps an optax optimizer so that ``optax.apply_updates`` takes a proximal step,
:func:`gradient_mapping` is the paper's stationarity measure ``G_eta``, and :func:`moreau_envelope` smooths a
non-smooth per-example loss (the Moreau envelope, whose gradient is ``beta (w - prox(w))``).

All operators are pure ``jax.numpy`` and work under ``jit``/``vmap``; the step size may be traced.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, NamedTuple, Union

import jax
import jax.numpy as jnp
import optax

PyTree = Any
StepSize = Union[float, jax.Array, Callable[[jax.Array], jax.Array]]

# Relative slack when testing membership of an l2 ball: a projected point's norm, recomputed in float32,
# can exceed the radius by a few ulps. Box membership is tested exactly (clip returns the bounds).
_BALL_RTOL = 1e-5

_SEPARABLE = ("l1", "l2_squared", "elastic_net")  # kinds whose prox acts coordinatewise, scaling-covariant


@dataclasses.dataclass(frozen=True, eq=False)
class Prox:
    """A proximal operator of a proper closed convex ``f1``.

    ``apply(params, eta)`` returns ``prox_{eta f1}(params)``; ``penalty(params)`` returns ``f1(params)``
    (a scalar; ``0``/``inf`` for indicators); ``name`` is human-readable; ``kind`` drives :func:`chain`'s
    exactness rules (``"identity"``, ``"l1"``, ``"l2_squared"``, ``"elastic_net"``, ``"l2_ball"``,
    ``"box"``, or ``"<separable>+<indicator>"`` for a chained terminal prox). Instances are hashable
    (by identity), so they can be static arguments of ``jit``.

    Example (a prox of one's own: ``f1 = lambda ||w||_inf`` would need its own rule; here a scaled identity):
      >>> import jax.numpy as jnp
      >>> half = Prox(lambda params, eta: {"w": params["w"] / 2}, lambda params: jnp.zeros(()), "half")
      >>> half({"w": jnp.array([2.0, -4.0])}, 0.1)["w"].tolist(), half.kind
      ([1.0, -2.0], 'custom')
    """

    apply: Callable[[PyTree, Any], PyTree]
    penalty: Callable[[PyTree], jax.Array]
    name: str
    kind: str = "custom"

    def __call__(self, params: PyTree, eta) -> PyTree:
        return self.apply(params, eta)


# ------------------------------------------------------------------------------------------------
# Pytree helpers


def _global_norm(tree: PyTree) -> jax.Array:
    leaves = jax.tree.leaves(tree)
    if not leaves:
        return jnp.zeros(())
    return jnp.sqrt(sum(jnp.sum(jnp.square(jnp.asarray(x))) for x in leaves))


def _sum_abs(tree: PyTree) -> jax.Array:
    leaves = jax.tree.leaves(tree)
    return sum((jnp.sum(jnp.abs(jnp.asarray(x))) for x in leaves), jnp.zeros(()))


def _sq_norm(tree: PyTree) -> jax.Array:
    leaves = jax.tree.leaves(tree)
    return sum((jnp.sum(jnp.square(jnp.asarray(x))) for x in leaves), jnp.zeros(()))


def _nonneg(value, name: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite real number >= 0, got {value!r}") from None
    if not (x >= 0.0 and math.isfinite(x)):
        raise ValueError(f"{name} must be a finite real number >= 0, got {value!r}")
    return x


def _soft_threshold(x, threshold):
    x = jnp.asarray(x)
    return jnp.sign(x) * jnp.maximum(jnp.abs(x) - threshold, 0.0).astype(x.dtype)


# ------------------------------------------------------------------------------------------------
# Factories


def identity() -> Prox:
    """``f1 = 0``: the prox is the identity (Lowy et al.'s experiments; plain gradient steps).

    Example:
      >>> import jax.numpy as jnp
      >>> identity()(jnp.array([1.0, -2.0]), 0.5).tolist(), float(identity().penalty(jnp.ones(3)))
      ([1.0, -2.0], 0.0)
    """
    return Prox(lambda params, eta: params, lambda params: jnp.zeros(()), "identity", "identity")


def l1(strength) -> Prox:
    """``f1 = lambda ||w||_1``: soft-thresholding ``sign(z) max(|z| - eta lambda, 0)`` per coordinate.

    Example:
      >>> import jax.numpy as jnp
      >>> p = l1(0.5)
      >>> p(jnp.array([1.0, -0.2, -3.0]), 1.0).tolist(), float(p.penalty(jnp.array([1.0, -3.0])))   # eta 1
      ([0.5, -0.0, -2.5], 2.0)
    """
    lam = _nonneg(strength, "strength")

    def apply(params, eta):
        return jax.tree.map(lambda x: _soft_threshold(x, eta * lam), params)

    return Prox(apply, lambda params: lam * _sum_abs(params), f"l1({lam:g})", "l1")


def l2_squared(strength) -> Prox:
    """``f1 = (lambda/2) ||w||^2``: the prox is ``z / (1 + eta lambda)``.

    Example:
      >>> import jax.numpy as jnp
      >>> l2_squared(1.0)(jnp.array([2.0, -4.0]), 1.0).tolist()           # z / 2
      [1.0, -2.0]
    """
    lam = _nonneg(strength, "strength")

    def apply(params, eta):
        return jax.tree.map(lambda x: x / (1.0 + eta * lam), params)

    return Prox(apply, lambda params: 0.5 * lam * _sq_norm(params), f"l2_squared({lam:g})", "l2_squared")


def elastic_net(l1_strength, l2_strength) -> Prox:
    """``f1 = lambda1 ||w||_1 + (lambda2/2) ||w||^2``: soft-threshold by ``eta lambda1``, then divide by
    ``1 + eta lambda2``.

    Example (equal to soft-thresholding then shrinking, i.e. ``chain(l1(a), l2_squared(b))``):
      >>> import jax.numpy as jnp
      >>> elastic_net(0.5, 1.0)(jnp.array([1.5, -0.25]), 1.0).tolist()    # soft-threshold by 0.5, then / 2
      [0.5, -0.0]
    """
    lam1 = _nonneg(l1_strength, "l1_strength")
    lam2 = _nonneg(l2_strength, "l2_strength")

    def apply(params, eta):
        return jax.tree.map(lambda x: _soft_threshold(x, eta * lam1) / (1.0 + eta * lam2), params)

    def penalty(params):
        return lam1 * _sum_abs(params) + 0.5 * lam2 * _sq_norm(params)

    return Prox(apply, penalty, f"elastic_net({lam1:g}, {lam2:g})", "elastic_net")


def l2_ball(radius) -> Prox:
    """``f1 = iota_{||w|| <= radius}`` with the *global* l2 norm over the whole pytree: the prox is the
    projection ``w min(1, radius / ||w||)`` (the step size is ignored). ``penalty`` is ``0`` inside the
    ball (with a relative slack of 1e-5 for rounding) and ``inf`` outside.

    Example (the norm is global over the pytree's leaves):
      >>> import jax.numpy as jnp
      >>> out = l2_ball(1.0)({"a": jnp.array([3.0]), "b": jnp.array([4.0])}, 0.1)      # norm 5 -> 1
      >>> [round(float(v[0]), 6) for v in (out["a"], out["b"])], float(l2_ball(1.0).penalty(jnp.array([3.0])))
      ([0.6, 0.8], inf)
    """
    r = _nonneg(radius, "radius")

    def apply(params, eta):
        del eta
        norm = _global_norm(params)
        scale = jnp.where(norm > r, r / jnp.where(norm > 0, norm, 1.0), 1.0)
        return jax.tree.map(lambda x: (x * scale).astype(jnp.asarray(x).dtype), params)

    def penalty(params):
        return jnp.where(_global_norm(params) <= r * (1.0 + _BALL_RTOL), 0.0, jnp.inf)

    return Prox(apply, penalty, f"l2_ball({r:g})", "l2_ball")


def _bounds_like(bound, params):
    """``bound`` as a pytree matching ``params``: a scalar/array leaf is broadcast to every leaf."""
    if jax.tree.structure(bound) == jax.tree.structure(params):
        return bound
    if len(jax.tree.leaves(bound)) == 1 and jax.tree.structure(bound).num_nodes == 1:
        return jax.tree.map(lambda _: bound, params)
    raise ValueError("box bounds must be scalars/arrays broadcastable to every leaf, or pytrees with the "
                     f"structure of params; got {jax.tree.structure(bound)} for params "
                     f"{jax.tree.structure(params)}")


def box(lower, upper) -> Prox:
    """``f1 = iota_{lower <= w <= upper}`` (coordinatewise): the prox is ``clip(z, lower, upper)`` (the
    step size is ignored). ``lower``/``upper`` are scalars, arrays broadcastable to every leaf, or pytrees
    matching the parameters; ``-inf``/``inf`` leave a side open.

    Example:
      >>> import jax.numpy as jnp
      >>> box(0.0, jnp.inf)(jnp.array([-1.0, 2.0]), 0.1).tolist()        # the nonnegative orthant
      [0.0, 2.0]
      >>> box(1.0, 0.0)
      Traceback (most recent call last):
      ...
      ValueError: box needs lower <= upper everywhere, got lower=1.0, upper=0.0
    """
    try:
        bad = any(bool(jnp.any(jnp.asarray(lo) > jnp.asarray(hi)))
                  for lo, hi in zip(jax.tree.leaves(lower), jax.tree.leaves(upper)))
    except (TypeError, jax.errors.ConcretizationTypeError):
        bad = False
    if bad:
        raise ValueError(f"box needs lower <= upper everywhere, got lower={lower!r}, upper={upper!r}")

    def apply(params, eta):
        del eta
        lo, hi = _bounds_like(lower, params), _bounds_like(upper, params)
        return jax.tree.map(lambda x, a, b: jnp.clip(x, a, b).astype(jnp.asarray(x).dtype), params, lo, hi)

    def penalty(params):
        lo, hi = _bounds_like(lower, params), _bounds_like(upper, params)
        inside = jax.tree.map(lambda x, a, b: jnp.all((x >= a) & (x <= b)), params, lo, hi)
        ok = jnp.all(jnp.stack([jnp.asarray(v) for v in jax.tree.leaves(inside)])) if jax.tree.leaves(inside) \
            else jnp.asarray(True)
        return jnp.where(ok, 0.0, jnp.inf)

    return Prox(apply, penalty, f"box({lower!r}, {upper!r})", "box")


# ------------------------------------------------------------------------------------------------
# Exact compositions


def _chain_kind(first: str, second: str) -> str | None:
    """The kind of ``second ∘ first`` when it is exactly ``prox_{eta (f_first + f_second)}``, else None."""
    if first == "identity":
        return second
    if second == "identity":
        return first
    if first == "l1" and second == "l2_squared":
        return "elastic_net"  # soft(z, eta l1) / (1 + eta l2) is the elastic-net prox verbatim
    if first in _SEPARABLE and second in ("l2_ball", "box"):
        return f"{first}+{second}"
    return None


def chain(*proxes: Prox) -> Prox:
    """Applies ``proxes`` left to right, *only* where the composition is exactly the prox of the sum
    of their penalties; every other combination raises ``ValueError`` (the composition of proxes is in
    general not the prox of the sum). Exact cases (``identity`` may appear anywhere):

    * ``chain(l1(a), l2_squared(b))`` = ``elastic_net(a, b)``;
    * ``chain(s, l2_ball(r))`` for ``s`` in ``l1``, ``l2_squared``, ``elastic_net`` (or a chain equal to
      one): ``y = P_ball(prox_s(z))``. Proof, for ``f = a ||.||_1 + (b/2) ||.||^2`` (covers all three):
      let ``s = prox_{eta f}(z)``, so ``z - s = eta (a g + b s)`` with ``g in ∂||s||_1``, and ``y = c s``
      with ``c in (0, 1]`` (``y = s = 0`` is trivial). A positive scaling keeps the signs, so
      ``g in ∂||y||_1``, and ``z - y - eta (a g + b y) = (1 - c)(1 + eta b) s``, a nonnegative multiple of
      ``y``: it lies in the ball's normal cone at ``y`` (zero when ``c = 1``; ``||y|| = r`` otherwise).
      That is the optimality condition of ``eta f + iota_ball`` at ``y``. The ball is centred at 0.
    * ``chain(s, box(lo, hi))`` for the same ``s``: the problem separates into 1-D strictly convex
      problems, whose minimiser over an interval is the clip of the unconstrained minimiser.

    Indicators end a chain (ball-then-box and box-then-ball are projections onto an intersection, not
    exact); ``l2_squared`` before ``l1`` is not exact either.

    Example:
      >>> import jax.numpy as jnp
      >>> sparse_in_ball = chain(l1(0.1), l2_ball(1.0))
      >>> sparse_in_ball.kind, [round(float(v), 4) for v in sparse_in_ball(jnp.array([3.1, 4.1, 0.05]), 1.0)]
      ('l1+l2_ball', [0.6, 0.8, 0.0])
      >>> chain(l2_ball(1.0), l1(0.1))
      Traceback (most recent call last):
      ...
      ValueError: chain: applying l1(0.1) after 'l2_ball' is not the prox of the sum of the penalties; ...
    """
    if not proxes:
        return identity()
    for p in proxes:
        if not isinstance(p, Prox):
            raise ValueError(f"chain takes Prox objects, got {p!r}")
    kind = proxes[0].kind
    for p in proxes[1:]:
        new = _chain_kind(kind, p.kind)
        if new is None:
            raise ValueError(f"chain: applying {p.name} after {kind!r} is not the prox of the sum of the "
                             "penalties; exact chains are l1 -> l2_squared, and l1/l2_squared/elastic_net "
                             "-> l2_ball or box (identity anywhere)")
        kind = new

    def apply(params, eta):
        for p in proxes:
            params = p.apply(params, eta)
        return params

    def penalty(params):
        return sum((p.penalty(params) for p in proxes), jnp.zeros(()))

    return Prox(apply, penalty, "chain(" + ", ".join(p.name for p in proxes) + ")", kind)


# ------------------------------------------------------------------------------------------------
# optax composition and the gradient mapping


class ProximalState(NamedTuple):
    """:func:`proximal`'s state: the wrapped optimizer's (``inner``) and the update count (for a schedule).

    Example: :func:`proximal`.
    """

    inner: optax.OptState
    count: jax.Array


def proximal(optimizer: optax.GradientTransformation, prox: Prox, step_size: StepSize
             ) -> optax.GradientTransformation:
    """``optimizer`` followed by ``prox_{step_size f1}``: the update is ``prox(params + u, step_size) -
    params`` where ``u`` is ``optimizer``'s update, so ``optax.apply_updates(params, update)`` equals
    ``prox(params + u, step_size)`` (up to one float rounding of the subtraction and re-addition).

    ``proximal(optax.sgd(eta), prox, eta)`` is the proximal gradient step ``prox_{eta f1}(w - eta g)``.
    ``step_size`` is a number or an optax schedule ``count -> step`` (evaluated at the update count, like
    ``optax.sgd``'s schedule). ``update`` needs ``params``.

    Example (one proximal gradient step with an l1 penalty):
      >>> import jax.numpy as jnp
      >>> opt = proximal(optax.sgd(0.5), l1(0.2), 0.5)
      >>> params, grads = jnp.array([1.0, 0.1]), jnp.array([1.0, 0.0])
      >>> updates, _ = opt.update(grads, opt.init(params), params)
      >>> [round(float(v), 6) for v in optax.apply_updates(params, updates)]   # soft([0.5, 0.1], 0.5 * 0.2)
      [0.4, 0.0]
    """
    schedule = step_size if callable(step_size) else None

    def init_fn(params):
        return ProximalState(optimizer.init(params), jnp.zeros([], jnp.int32))

    def update_fn(updates, state, params=None):
        if params is None:
            raise ValueError("proximal(...).update needs params (the prox acts on params + update)")
        u, inner = optimizer.update(updates, state.inner, params)
        eta = schedule(state.count) if schedule is not None else step_size
        target = prox(optax.apply_updates(params, u), eta)
        new_updates = jax.tree.map(lambda t, p: (t - p).astype(jnp.asarray(p).dtype), target, params)
        return new_updates, ProximalState(inner, optax.safe_increment(state.count))

    return optax.GradientTransformation(init_fn, update_fn)


def gradient_mapping(grad_f0: PyTree, params: PyTree, prox: Prox, eta) -> PyTree:
    """The proximal gradient mapping (Lowy et al. §2, the non-convex stationarity measure)
    ``G_eta(w) = (w - prox_{eta f1}(w - eta grad_f0(w))) / eta``, as a pytree like ``params``.
    Equals ``grad_f0`` when ``f1 = 0``. Pass the full-batch gradient of ``F_hat^0`` for the paper's ERM
    measure.

    Example (with ``f1 = 0`` the mapping is the gradient; at a point the l1 prox keeps fixed it is 0):
      >>> import jax.numpy as jnp
      >>> round(float(gradient_mapping(jnp.array([0.3]), jnp.array([1.0]), identity(), 0.1)[0]), 5)
      0.3
      >>> gradient_mapping(jnp.array([0.05]), jnp.array([0.0]), l1(0.1), 1.0).tolist()     # |g| < lambda at 0
      [0.0]
    """
    stepped = jax.tree.map(lambda w, g: w - eta * g, params, grad_f0)
    return jax.tree.map(lambda w, p: (w - p) / eta, params, prox(stepped, eta))


def gradient_mapping_sq_norm(grad_f0: PyTree, params: PyTree, prox: Prox, eta) -> jax.Array:
    """``||G_eta(w)||^2`` (global squared l2 norm over the pytree): the quantity Theorems 3.1/3.2 bound.

    Example:
      >>> import jax.numpy as jnp
      >>> float(gradient_mapping_sq_norm({"w": jnp.array([3.0, 4.0])}, {"w": jnp.zeros(2)}, identity(), 0.1))
      25.0
    """
    return _sq_norm(gradient_mapping(grad_f0, params, prox, eta))


__all__ = ["Prox", "ProximalState", "box", "chain", "elastic_net", "gradient_mapping", "gradient_mapping_sq_norm",
           "identity", "l1", "l2_ball", "l2_squared", "proximal"]


# ------------------------------------------------------------------------------------------------
# Moreau envelope (smoothing a non-smooth per-example loss)


def moreau_envelope(loss_fn: Callable, beta: float, *, inner_steps: int = 100, projection: Callable | None = None):
    """The Moreau envelope ``f_beta(w, x) = min_{v in W} f(v, x) + (beta/2) ||w - v||^2`` of a per-example
    loss (Lowy & Razaviyayn 2023, Thm D.2 runs noisy MB-SGD on it; Lemma D.7: convex, beta-smooth,
    ``f_beta <= f <= f_beta + L^2/(2 beta)``).

    The inner problem is ``beta``-strongly convex; it is solved by ``inner_steps`` projected subgradient
    steps ``v <- Pi_W(v - (grad f(v) + beta (v - w)) / (beta (t + 1)))`` from ``v = w``. The returned loss
    is ``f(v*) + (beta/2)||w - v*||^2`` with ``v*`` held constant, so its gradient is the Moreau identity
    ``beta (w - prox(w))`` (envelope theorem). Lowy & Razaviyayn flags that ``f_beta`` is ``2L``-Lipschitz when
    ``W`` is bounded (Lemma D.7): clip at ``2L`` to keep every per-example gradient (jaxfl clips anyway,
    so the privacy guarantee never depends on this).
    """
    beta = float(beta)
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    project = projection if projection is not None else (lambda v: v)

    def smoothed(params, x, y):
        def step(v, t):
            g = jax.grad(loss_fn)(v, x, y)
            lr = 1.0 / (beta * (t + 1.0))
            v = jax.tree_util.tree_map(lambda vi, gi, wi: vi - lr * (gi + beta * (vi - wi)), v, g, params)
            return project(v), None

        v, _ = jax.lax.scan(step, params, jnp.arange(inner_steps, dtype=jnp.float32))
        v = jax.lax.stop_gradient(v)
        gap = sum(jnp.sum((w - vi) ** 2) for w, vi in zip(jax.tree_util.tree_leaves(params),
                                                             jax.tree_util.tree_leaves(v)))
        return loss_fn(v, x, y) + 0.5 * beta * gap

    return smoothed
