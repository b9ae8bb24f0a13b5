"""Proximal operators: closed forms, the argmin definition (numerical minimisation), nonexpansiveness,
the exact chains, optax composition and the gradient mapping."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings, strategies as st
from scipy import optimize

from jaxfl.algorithms import prox as P


def _flat(tree):
    return np.concatenate([np.ravel(np.asarray(x, dtype=np.float64)) for x in jax.tree.leaves(tree)])


def _tree(v):
    """A two-leaf pytree from a flat vector (global norms must see both leaves)."""
    v = np.asarray(v, dtype=np.float32)
    return {"a": jnp.asarray(v[:2]), "b": jnp.asarray(v[2:])}


def _unflat_like(v):
    return {"a": v[:2], "b": v[2:]}


def _argmin_numeric(f1, z, eta, constraint=None):
    """argmin_y eta f1(y) + ||y - z||^2 / 2 by scipy (SLSQP with the constraint when given)."""
    obj = lambda y: eta * f1(y) + 0.5 * np.sum((y - z) ** 2)  # noqa: E731
    if constraint is None:
        res = optimize.minimize(obj, z, method="Powell", options={"xtol": 1e-10, "ftol": 1e-14, "maxiter": 200000})
        return res.x
    res = optimize.minimize(obj, np.zeros_like(z), method="SLSQP", constraints=[constraint],
                            options={"ftol": 1e-14, "maxiter": 2000})
    return res.x


Z = np.array([1.3, -0.2, 0.05, -2.4, 0.7])
ETA = 0.5


# ------------------------------------------------------------------------------------------------
# closed forms


def test_identity():
    p = P.identity()
    assert np.allclose(_flat(p(_tree(Z), ETA)), Z)
    assert float(p.penalty(_tree(Z))) == 0.0


def test_l1_soft_threshold_closed_form():
    p = P.l1(0.8)  # threshold eta * lambda = 0.4
    expected = np.array([0.9, 0.0, 0.0, -2.0, 0.3])
    np.testing.assert_allclose(_flat(p(_tree(Z), ETA)), expected, atol=1e-6)
    assert float(p.penalty(_tree(Z))) == pytest.approx(0.8 * np.abs(Z).sum(), rel=1e-6)


def test_l2_squared_closed_form():
    p = P.l2_squared(3.0)  # 1 + eta lambda = 2.5
    np.testing.assert_allclose(_flat(p(_tree(Z), ETA)), Z / 2.5, rtol=1e-6)
    assert float(p.penalty(_tree(Z))) == pytest.approx(1.5 * np.sum(Z**2), rel=1e-6)


def test_elastic_net_closed_form():
    p = P.elastic_net(0.8, 3.0)
    expected = np.array([0.9, 0.0, 0.0, -2.0, 0.3]) / 2.5
    np.testing.assert_allclose(_flat(p(_tree(Z), ETA)), expected, atol=1e-6)
    assert float(p.penalty(_tree(Z))) == pytest.approx(0.8 * np.abs(Z).sum() + 1.5 * np.sum(Z**2), rel=1e-6)


def test_l2_ball_uses_the_global_norm_and_ignores_eta():
    p = P.l2_ball(1.0)
    norm = np.linalg.norm(Z)  # ~2.85, across both leaves
    out = _flat(p(_tree(Z), ETA))
    np.testing.assert_allclose(out, Z / norm, rtol=1e-6)
    np.testing.assert_allclose(_flat(p(_tree(Z), 123.0)), out)
    # per-leaf projection would differ: leaf "a" alone has norm 1.315 > 1 but "b" has 2.50
    assert not np.allclose(out[:2], Z[:2] / np.linalg.norm(Z[:2]))
    inside = Z / (2 * norm)
    np.testing.assert_allclose(_flat(p(_tree(inside), ETA)), inside, rtol=1e-6)
    np.testing.assert_array_equal(_flat(p(_tree(np.zeros(5)), ETA)), np.zeros(5))
    assert float(p.penalty(_tree(inside))) == 0.0
    assert float(p.penalty(p(_tree(Z), ETA))) == 0.0  # the projection counts as inside despite rounding
    assert math.isinf(float(p.penalty(_tree(Z))))


def test_box_scalar_and_pytree_bounds():
    p = P.box(-0.5, 1.0)
    np.testing.assert_allclose(_flat(p(_tree(Z), ETA)), np.clip(Z, -0.5, 1.0))
    assert float(p.penalty(p(_tree(Z), ETA))) == 0.0
    assert math.isinf(float(p.penalty(_tree(Z))))
    lo = {"a": jnp.array([0.0, -1.0]), "b": -jnp.inf * jnp.ones(3)}
    hi = {"a": jnp.array([1.0, 0.0]), "b": jnp.array([0.0, 0.0, 0.0])}
    out = _flat(P.box(lo, hi)(_tree(Z), ETA))
    np.testing.assert_allclose(out, [1.0, -0.2, 0.0, -2.4, 0.0])
    with pytest.raises(ValueError, match="lower <= upper"):
        P.box(1.0, 0.0)


@pytest.mark.parametrize("factory, arg", [(P.l1, -1.0), (P.l2_squared, float("nan")), (P.l2_ball, -2.0)])
def test_invalid_strengths_raise(factory, arg):
    with pytest.raises(ValueError):
        factory(arg)


# ------------------------------------------------------------------------------------------------
# the argmin definition, numerically


def _l1(v):
    return np.abs(v).sum()


@pytest.mark.parametrize("name, prox, f1, constraint", [
    ("l1", P.l1(0.8), lambda y: 0.8 * _l1(y), None),
    ("l2_squared", P.l2_squared(3.0), lambda y: 1.5 * np.sum(y**2), None),
    ("elastic_net", P.elastic_net(0.8, 3.0), lambda y: 0.8 * _l1(y) + 1.5 * np.sum(y**2), None),
    ("l2_ball", P.l2_ball(1.0), lambda y: 0.0, {"type": "ineq", "fun": lambda y: 1.0 - np.sum(y**2)}),
    ("box", P.box(-0.5, 1.0), lambda y: 0.0,
     {"type": "ineq", "fun": lambda y: np.concatenate([y + 0.5, 1.0 - y])}),
])
def test_prox_is_the_argmin(name, prox, f1, constraint):
    got = _flat(prox(_tree(Z), ETA))
    ref = _argmin_numeric(f1, Z, ETA, constraint)
    np.testing.assert_allclose(got, ref, atol=2e-4, err_msg=name)
    obj = lambda y: ETA * f1(y) + 0.5 * np.sum((y - Z) ** 2)  # noqa: E731
    assert obj(got) <= obj(ref) + 1e-6


def test_l1_prox_beats_a_dense_grid_in_2d():
    z, eta, lam = np.array([0.9, -0.15]), 1.0, 0.3
    g = np.linspace(-1.5, 1.5, 601)
    Y1, Y2 = np.meshgrid(g, g, indexing="ij")
    obj = eta * lam * (np.abs(Y1) + np.abs(Y2)) + 0.5 * ((Y1 - z[0]) ** 2 + (Y2 - z[1]) ** 2)
    i, j = np.unravel_index(np.argmin(obj), obj.shape)
    got = np.asarray(P.l1(lam)(jnp.asarray(z), eta), dtype=np.float64)
    np.testing.assert_allclose(got, [g[i], g[j]], atol=g[1] - g[0])
    np.testing.assert_allclose(got, [0.6, 0.0], atol=1e-6)


# ------------------------------------------------------------------------------------------------
# exact chains


def _ball(r):
    return {"type": "ineq", "fun": lambda y: r**2 - np.sum(y**2)}


@pytest.mark.parametrize("first, f1", [
    (P.l1(0.8), lambda y: 0.8 * _l1(y)),
    (P.l2_squared(3.0), lambda y: 1.5 * np.sum(y**2)),
    (P.elastic_net(0.8, 3.0), lambda y: 0.8 * _l1(y) + 1.5 * np.sum(y**2)),
])
@pytest.mark.parametrize("radius", [0.5, 1.5, 10.0])
def test_separable_then_l2_ball_is_the_prox_of_the_sum(first, f1, radius):
    """prox_{eta (f + iota_ball)} = P_ball(prox_{eta f}) -- checked against SLSQP and by the optimality
    condition z - y - eta g in N_ball(y) (a nonnegative multiple of y on the sphere)."""
    p = P.chain(first, P.l2_ball(radius))
    got = _flat(p(_tree(Z), ETA))
    ref = _argmin_numeric(f1, Z, ETA, _ball(radius))
    np.testing.assert_allclose(got, ref, atol=2e-4)
    assert float(p.penalty(p(_tree(Z), ETA))) == pytest.approx(float(first.penalty(p(_tree(Z), ETA))), rel=1e-6)


def test_l1_then_ball_optimality_condition_exactly():
    lam, r, eta = 0.8, 1.0, ETA
    z = Z.astype(np.float64)
    s = np.sign(z) * np.maximum(np.abs(z) - eta * lam, 0)
    y = _flat(P.chain(P.l1(lam), P.l2_ball(r))(_tree(Z), eta))
    assert np.linalg.norm(y) == pytest.approx(r, rel=1e-5)  # the constraint is active here
    # subgradient of ||.||_1 at y: sign(y) on the support, (z - y)/(eta lam) clipped elsewhere
    resid = z - y
    support = y != 0
    t = (resid[support] - eta * lam * np.sign(y[support])) / y[support]
    assert np.all(t >= -1e-5) and np.ptp(t) < 1e-4  # one common nonnegative multiple of y
    off = ~support
    assert np.all(np.abs(resid[off]) <= eta * lam + 1e-6)  # |z_j| <= eta lam where y_j = 0
    np.testing.assert_array_equal(y == 0, s == 0)


def test_separable_then_box_is_the_prox_of_the_sum():
    lo, hi = np.array([0.2, -1.0, -1.0, -3.0, 0.5]), np.array([1.0, 1.0, 1.0, -2.1, 2.0])
    box = {"type": "ineq", "fun": lambda y: np.concatenate([y - lo, hi - y])}
    p = P.chain(P.elastic_net(0.8, 3.0), P.box(_unflat_like(jnp.asarray(lo, jnp.float32)),
                                               _unflat_like(jnp.asarray(hi, jnp.float32))))
    got = _flat(p(_tree(Z), ETA))
    ref = _argmin_numeric(lambda y: 0.8 * _l1(y) + 1.5 * np.sum(y**2), Z, ETA, box)
    np.testing.assert_allclose(got, ref, atol=2e-4)


def test_l1_then_l2_squared_is_elastic_net():
    a = P.chain(P.l1(0.8), P.identity(), P.l2_squared(3.0))
    b = P.elastic_net(0.8, 3.0)
    np.testing.assert_allclose(_flat(a(_tree(Z), ETA)), _flat(b(_tree(Z), ETA)), rtol=1e-6)
    assert a.kind == "elastic_net"
    assert float(a.penalty(_tree(Z))) == pytest.approx(float(b.penalty(_tree(Z))), rel=1e-6)
    # ... and it may still be followed by a ball
    P.chain(a, P.l2_ball(1.0))


@pytest.mark.parametrize("proxes", [
    (P.l2_ball(1.0), P.l1(0.1)),          # projection first: not exact
    (P.l2_squared(1.0), P.l1(0.1)),       # shrink then threshold: threshold is off by (1 + eta l2)
    (P.l2_ball(1.0), P.box(-1.0, 1.0)),   # intersection of sets: not exact
    (P.box(-1.0, 1.0), P.l2_ball(1.0)),
    (P.l1(0.1), P.l2_ball(1.0), P.box(-1.0, 1.0)),
])
def test_inexact_chains_raise(proxes):
    with pytest.raises(ValueError, match="not the prox"):
        P.chain(*proxes)


def test_the_rejected_order_really_is_inexact():
    """Justifies rejecting ball-then-l1: it is not the argmin of the summed objective."""
    z = np.array([3.0, 0.3])
    wrong = np.sign(z / np.linalg.norm(z)) * np.maximum(np.abs(z / np.linalg.norm(z)) - 0.5, 0)
    right = _flat(P.chain(P.l1(0.5), P.l2_ball(1.0))(jnp.asarray(z, jnp.float32), 1.0))
    obj = lambda y: 0.5 * _l1(y) + 0.5 * np.sum((y - z) ** 2)  # noqa: E731
    assert obj(right) < obj(wrong) - 1e-3


# ------------------------------------------------------------------------------------------------
# nonexpansiveness (property)

PROXES = [P.identity(), P.l1(0.3), P.l2_squared(2.0), P.elastic_net(0.3, 2.0), P.l2_ball(1.0),
          P.box(-0.5, 0.25), P.chain(P.l1(0.3), P.l2_ball(0.7)), P.chain(P.l2_squared(1.0), P.box(-1.0, 0.0))]

vec = st.lists(st.floats(-10, 10, allow_nan=False, width=32), min_size=5, max_size=5)


@settings(max_examples=60, deadline=None)
@given(x=vec, y=vec, eta=st.floats(0.01, 5.0), i=st.integers(0, len(PROXES) - 1))
def test_prox_is_firmly_nonexpansive(x, y, eta, i):
    p = PROXES[i]
    px, py = _flat(p(_tree(x), eta)), _flat(p(_tree(y), eta))
    x, y = np.asarray(x, np.float32).astype(np.float64), np.asarray(y, np.float32).astype(np.float64)
    tol = 1e-4 * (1 + np.linalg.norm(x - y))
    assert np.linalg.norm(px - py) <= np.linalg.norm(x - y) + tol
    assert np.dot(px - py, x - y) >= np.sum((px - py) ** 2) - tol * (1 + np.linalg.norm(x - y))


def test_prox_works_under_jit_and_vmap_with_traced_eta():
    p = P.chain(P.l1(0.8), P.l2_ball(1.0))
    f = jax.jit(lambda w, eta: p(w, eta))
    np.testing.assert_allclose(_flat(f(_tree(Z), ETA)), _flat(p(_tree(Z), ETA)), rtol=1e-6)
    batch = jnp.stack([jnp.asarray(Z, jnp.float32), -jnp.asarray(Z, jnp.float32)])
    out = jax.vmap(lambda w: P.l1(0.8)(w, ETA))(batch)
    np.testing.assert_allclose(np.asarray(out[1]), -np.asarray(out[0]))


# ------------------------------------------------------------------------------------------------
# optax and the gradient mapping


@pytest.mark.parametrize("p", [P.identity(), P.l1(0.8), P.chain(P.elastic_net(0.8, 1.0), P.l2_ball(1.5)),
                               P.box(-0.5, 1.0)])
def test_proximal_sgd_is_the_proximal_gradient_step(p):
    eta = 0.3
    w = _tree(Z)
    g = _tree(np.array([0.5, -1.0, 2.0, 0.1, -0.3]))
    tx = P.proximal(optax.sgd(eta), p, eta)
    state = tx.init(w)
    for _ in range(3):
        upd, state = tx.update(g, state, w)
        new = optax.apply_updates(w, upd)
        expected = p(jax.tree.map(lambda a, b: a - eta * b, w, g), eta)
        np.testing.assert_allclose(_flat(new), _flat(expected), atol=1e-6)
        w = new
    assert int(state.count) == 3


def test_proximal_with_a_schedule_and_momentum_and_jit():
    sched = optax.linear_schedule(0.5, 0.1, 4)
    p = P.l1(1.0)
    tx = P.proximal(optax.sgd(sched, momentum=0.9), p, sched)
    inner = optax.sgd(sched, momentum=0.9)
    w = jnp.asarray(Z, jnp.float32)
    g = jnp.asarray([0.5, -1.0, 2.0, 0.1, -0.3], jnp.float32)
    state, istate = tx.init(w), inner.init(w)
    step = jax.jit(tx.update)
    for k in range(4):
        upd, state = step(g, state, w)
        u, istate = inner.update(g, istate, w)
        expected = p(w + u, sched(k))
        w = optax.apply_updates(w, upd)
        np.testing.assert_allclose(np.asarray(w), np.asarray(expected), atol=1e-6)


def test_proximal_needs_params():
    tx = P.proximal(optax.sgd(0.1), P.l1(0.1), 0.1)
    state = tx.init(jnp.zeros(3))
    with pytest.raises(ValueError, match="params"):
        tx.update(jnp.ones(3), state)


def test_gradient_mapping_equals_gradient_when_f1_is_zero():
    w, g = _tree(Z), _tree(np.array([0.5, -1.0, 2.0, 0.1, -0.3]))
    for eta in (0.01, 0.5, 3.0):
        gm = P.gradient_mapping(g, w, P.identity(), eta)
        np.testing.assert_allclose(_flat(gm), _flat(g), atol=1e-5)
        assert float(P.gradient_mapping_sq_norm(g, w, P.identity(), eta)) == pytest.approx(
            float(np.sum(_flat(g) ** 2)), rel=1e-4)


def test_gradient_mapping_with_l1_and_at_a_stationary_point():
    eta, lam = 0.5, 0.8
    w = _tree(Z)
    g = _tree(np.array([0.5, -1.0, 2.0, 0.1, -0.3]))
    z = Z - eta * _flat(g)
    expected = (Z - np.sign(z) * np.maximum(np.abs(z) - eta * lam, 0)) / eta
    np.testing.assert_allclose(_flat(P.gradient_mapping(g, w, P.l1(lam), eta)), expected, atol=1e-5)
    # w* = 0 minimises lam ||w||_1 + <c, w> when |c| <= lam: the mapping vanishes there
    c = _tree(np.array([0.3, -0.7, 0.0, 0.79, -0.1]))
    zero = _tree(np.zeros(5))
    assert float(P.gradient_mapping_sq_norm(c, zero, P.l1(lam), eta)) == 0.0
    # ... but not for f1 = 0
    assert float(P.gradient_mapping_sq_norm(c, zero, P.identity(), eta)) > 0.5


def test_prox_objects_are_hashable_static_args():
    p = P.l1(0.1)
    f = jax.jit(lambda w, pr: pr(w, 0.5), static_argnums=1)
    np.testing.assert_allclose(np.asarray(f(jnp.ones(2), p)), [0.95, 0.95], rtol=1e-6)
    assert len({p, P.l1(0.1)}) == 2 and p.name == "l1(0.1)"


def test_all_factories_listed():
    names = {"identity", "l1", "l2_ball", "box", "elastic_net", "l2_squared", "chain", "proximal",
             "gradient_mapping", "gradient_mapping_sq_norm", "Prox"}
    assert names <= set(P.__all__)
