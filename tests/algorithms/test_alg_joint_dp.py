"""A_NSGD (Huang et al. Alg. 1): the trajectory and iterate averages against a NumPy replay of the same draws,
noise on u only, the paper's calibration and the accountant's, and a statement only for separable losses;
A_NSSGD (Alg. 2) against a replay of its owner-mean steps."""
import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfl.accounting import make_accountant
from jaxfl.algorithms.joint_dp import (ansgd, calibrated_noise_multiplier, default_schedule, nssgd, nssgd_event,
                                       paper_noise_multiplier, step_event)
from jaxfl.data import from_silos, group_by_user
from jaxfl.engine import initial_state, run_rounds
from jaxfl.engine.participation import uniform
from jaxfl.privacy import keys
from jaxfl.privacy.noise import gaussian_like

D = 3
SIZES = (5, 8, 6)
SHARED = {"x": "private", "u": "shared"}


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return from_silos([(rng.normal(size=(n, D)).astype(np.float32), np.zeros(n, np.float32)) for n in SIZES])


def coupled(p, z, y):
    del y
    return 0.5 * jnp.sum((p["x"] + p["u"] - z) ** 2)


def _params():
    return {"x": jnp.full((D,), 0.2, jnp.float32), "u": jnp.full((D,), -0.1, jnp.float32)}


def _replay(data, root, rounds, eta, clip, radius):
    """NumPy A_NSGD on the engine's draws: owner j_t from uniform(1), record from randint(step_key(.., 0,
    MINIBATCH)); returns the last u, every x, and the averages of iterates 0 .. T-1."""
    counts = np.asarray(data.counts)
    x = np.tile(np.asarray(_params()["x"], np.float64), (len(SIZES), 1))
    u = np.asarray(_params()["u"], np.float64)
    x_sum, u_sum = np.zeros_like(x), np.zeros_like(u)
    for t in range(rounds):
        x_sum += x
        u_sum += u
        rk = keys.round_key(root, t)
        j = int(np.flatnonzero(np.asarray(uniform(1)(rk, data.counts)))[0])
        key = keys.step_key(keys.silo_key(rk, j), 0, keys.Purpose.MINIBATCH)
        i = int(jax.random.randint(key, (1,), 0, max(int(counts[j]), 1))[0])
        g = x[j] + u - np.asarray(data.x[j, i], np.float64)
        scale = min(1.0, clip / (math.sqrt(2) * np.linalg.norm(g))) if np.linalg.norm(g) > 0 else 1.0
        g = g * scale
        x[j] = x[j] - eta * g
        u = u - eta * g
        if np.linalg.norm(u) > radius:
            u = u * radius / np.linalg.norm(u)
    return u, x, x_sum / rounds, u_sum / rounds


@pytest.mark.parametrize("clip,radius", [(math.inf, math.inf), pytest.param(0.3, 0.5, marks=pytest.mark.slow)])
def test_trajectory_and_averages_match_a_numpy_replay(clip, radius):
    data, root, rounds, eta = _data(), jax.random.key(4), 12, 0.2
    alg = ansgd(coupled, shared=SHARED, learning_rate=eta, lipschitz=clip, shared_radius=radius)
    state, info = jax.jit(lambda s: run_rounds(alg, s, data, root, 0, rounds))(initial_state(alg, _params(), 3))
    u, x, x_bar, u_bar = _replay(data, root, rounds, eta, clip, radius)
    np.testing.assert_allclose(state.params["u"], u, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state.silos.x["x"], x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state.params["x"], _params()["x"])  # the server's copy of x never moves
    out = alg.silo_params(state)
    np.testing.assert_allclose(out["x"], x_bar, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["u"], np.tile(u_bar, (3, 1)), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(info["participants"]), np.ones(rounds))


@pytest.mark.slow  # ~3 s: second tier
def test_noise_is_added_to_u_only():
    """One step, noise multiplier z, L = 1: the chosen owner's x is bitwise the noiseless run's, and u moves by
    exactly -eta z L b, b the unit noise of step_key(silo_key(round 0, j), 0, NOISE)."""
    data, root, eta, z = _data(), jax.random.key(9), 0.1, 2.0
    run = lambda a: jax.jit(lambda s: run_rounds(a, s, data, root, 0, 1))(  # noqa: E731
        initial_state(a, _params(), 3))[0]
    kw = dict(shared=SHARED, learning_rate=eta, lipschitz=1.0)
    noisy, clean = run(ansgd(coupled, noise_multiplier=z, **kw)), run(ansgd(coupled, **kw))
    np.testing.assert_array_equal(noisy.silos.x["x"], clean.silos.x["x"])
    j = int(np.flatnonzero(np.asarray(uniform(1)(keys.round_key(root, 0), data.counts)))[0])
    b = gaussian_like(keys.step_key(keys.silo_key(keys.round_key(root, 0), j), 0, keys.Purpose.NOISE),
                      {"u": jnp.zeros(D)}, 1.0)["u"]
    np.testing.assert_allclose(np.asarray(noisy.params["u"]) - np.asarray(clean.params["u"]), -eta * z * b,
                               rtol=1e-5, atol=1e-6)


def test_privacy_is_stated_only_for_separable_losses():
    counts = np.array(SIZES)
    kw = dict(shared=SHARED, learning_rate=0.1, lipschitz=1.0, noise_multiplier=1.5)
    assert ansgd(coupled, **kw).privacy is None  # grad_u depends on x: the paper's claim does not hold
    statement = ansgd(coupled, separable=True, **kw).privacy(counts)
    assert statement.relation == dp_accounting.NeighboringRelation.REPLACE_ONE and statement.level == "record"
    assert statement.events == tuple(
        dp_accounting.SampledWithoutReplacementDpEvent(3 * n, 1, dp_accounting.GaussianDpEvent(1.5)) for n in SIZES)
    assert ansgd(coupled, separable=True, shared=SHARED, learning_rate=0.1).privacy is None  # no noise
    with pytest.raises(ValueError, match="finite lipschitz"):
        ansgd(coupled, shared=SHARED, learning_rate=0.1, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="shared .u. and private .x. leaves"):
        ansgd(coupled, shared={"x": "shared", "u": "shared"}, learning_rate=0.1).init(_params())


@pytest.mark.slow
def test_calibrations():
    """Alg. 1 line 2 with the constant made explicit: z = c sqrt(T log(1/delta)) / (eps m n); the accountant's z
    meets (eps, delta) for T steps of step_event under replace-one neighbours, and less noise does not;
    default_schedule is T = (m n)^2 and the derived eta* (digest §3.1)."""
    m, n, steps, eps, delta = 50, 4, 2000, 2.0, 1e-5
    assert paper_noise_multiplier(eps, delta, steps=steps, records_per_owner=m, owners=n, constant=3.0) == \
        pytest.approx(3.0 * math.sqrt(steps * math.log(1 / delta)) / (eps * m * n))
    z = calibrated_noise_multiplier(eps, delta, steps=steps, records_per_owner=m, owners=n)
    acc = lambda zz: make_accountant("rdp", neighboring_relation="replace_one").compose(  # noqa: E731
        dp_accounting.SelfComposedDpEvent(step_event(zz, records_per_owner=m, owners=n), steps)).epsilon(delta)
    assert acc(z) <= eps + 1e-6 < acc(0.97 * z)
    t, eta = default_schedule(records_per_owner=m, owners=n, radius=2.0, lipschitz=1.5, shared_dim=10,
                              epsilon=eps, delta=delta)
    assert t == (m * n) ** 2
    assert eta == pytest.approx(2.0 / (1.5 * t * math.sqrt(1 / (m * n)
                                                           + 10 * math.log(1 / delta) / (eps * m * n) ** 2)))


@pytest.mark.slow  # ~4 s: second tier
def test_nssgd_with_negligible_noise_steps_on_the_owners_mean_gradient():
    """A_NSSGD on users of 2 records, tau and the norm bound large enough that nothing is winsorised and the
    noise negligible: each step is SGD on (x_j, u) with owner j's mean gradient over its users' records
    (NumPy replay on the same owner draws), and the privacy statement needs separable=True."""
    data = group_by_user(_data(), 2)
    root, rounds, eta = jax.random.key(2), 6, 0.3
    alg = nssgd(coupled, shared=SHARED, learning_rate=eta, tau=50.0, bound=100.0, noise_multiplier=1e-10)
    state, info = jax.jit(lambda s: run_rounds(alg, s, data, root, 0, rounds))(initial_state(alg, _params(), 3))
    counts = np.asarray(data.counts)
    x = np.tile(np.asarray(_params()["x"], np.float64), (3, 1))
    u = np.asarray(_params()["u"], np.float64)
    for t in range(rounds):
        j = int(np.flatnonzero(np.asarray(uniform(1)(keys.round_key(root, t), data.counts)))[0])
        records = np.asarray(data.x[j, :counts[j]], np.float64).reshape(-1, D)
        g = x[j] + u - records.mean(axis=0)
        x[j], u = x[j] - eta * g, u - eta * g
    np.testing.assert_allclose(state.params["u"], u, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(state.silos.x["x"], x, rtol=1e-4, atol=1e-5)
    assert float(np.max(info["winsorized"])) == 0.0
    assert alg.privacy is None
    stated = nssgd(coupled, shared=SHARED, learning_rate=eta, tau=1.0, bound=5.0, noise_multiplier=2.0,
                   separable=True).privacy(counts)
    assert stated.events == (nssgd_event(2.0, owners=3),) * 3 and stated.relation.name == "REPLACE_ONE"
    with pytest.raises(ValueError, match="noise_multiplier > 0"):
        nssgd(coupled, shared=SHARED, learning_rate=eta, tau=1.0, bound=5.0)
