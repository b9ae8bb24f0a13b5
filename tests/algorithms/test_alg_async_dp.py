"""van Dijk et al.'s asynchronous protocol: the host timeline (deterministic, every message applied once, staleness
as configured) and the compiled run (equal to synchronous rounds where the protocol is synchronous, bitwise;
the server sums; clients end on the last broadcast)."""
import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfl.algorithms import async_dp as AD
from jaxfl.algorithms import async_schedules as AS
from jaxfl.algorithms import async_timeline as AT
from jaxfl.data import from_silos
from jaxfl.engine.driver import make_ledger, train

N, D = 3, 5


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    return from_silos([(rng.standard_normal((20 + i, D)).astype(np.float32),
                        (rng.random(20 + i) > 0.5).astype(np.float32)) for i in range(N)])


def logistic(p, x, y):
    z = x @ p["w"] + p["b"]
    return jnp.logaddexp(0.0, z) - y * z + 0.005 * jnp.sum(p["w"] ** 2)


PARAMS = {"w": jnp.zeros(D), "b": jnp.zeros(())}
SIZES = AS.per_client(AS.power(6, 1, 3, 4, start=0), N)      # 3, 9, 15, 21 over 3 clients: 1, 3, 5, 7 each
ETA = AS.step_size("inverse", 0.1, 0.01, per="rounds")


def _run(algorithm, data, rounds, key=3):
    return train(algorithm, data, PARAMS, rounds=rounds, key=key, progress=False).state


def _equal(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


def test_schedules_per_client_split():
    assert SIZES.tolist() == [[1, 1, 1], [3, 3, 3], [5, 5, 5], [7, 7, 7]]


@pytest.mark.parametrize("lookahead,per", [(1, "iterations"), pytest.param(0, "rounds", marks=pytest.mark.slow),
                                           pytest.param(None, "rounds", marks=pytest.mark.slow),
                                           pytest.param(0, "iterations", marks=pytest.mark.slow)])
def test_zero_delays_and_equal_speeds_are_synchronous_rounds_bitwise(data, lookahead, per):
    eta = AS.step_size("inverse_sqrt", 0.1, 0.01, per=per)
    timeline = AT.simulate(SIZES, AT.draw_timing(N, 4), lookahead=lookahead)
    assert timeline.num_slices == 4 and timeline.outbox == 1 and timeline.ring == 1
    for z in (0.0, 1.5):
        run = _run(AD.async_sgd(logistic, timeline, step_size=eta, clip_norm=1.0, noise_multiplier=z), data, 4)
        ref = _run(AD.sync_sgd(logistic, SIZES, step_size=eta, clip_norm=1.0, noise_multiplier=z), data, 4)
        assert _equal(run.params, ref.params)


@pytest.mark.slow
def test_lookahead_zero_is_synchronous_whatever_the_timing(data):
    """d = 0: a client starts round i only once v_hat_i (every round < i) reached it, so it starts every
    round from the global model; delays and speeds change when, not what (and the order of the server's
    floating-point sum: messages are applied in arrival order, the reference in client order)."""
    timing = AT.draw_timing(N, 4, seed=5, speed_spread=0.8, mean_delay=4.0)
    timeline = AT.simulate(SIZES, timing, lookahead=0)
    assert timeline.num_slices > 4
    run = _run(AD.async_sgd(logistic, timeline, step_size=ETA, clip_norm=1.0, noise_multiplier=1.0), data,
               timeline.num_slices)
    ref = _run(AD.sync_sgd(logistic, SIZES, step_size=ETA, clip_norm=1.0, noise_multiplier=1.0), data, 4)
    order = [(int(i), int(c)) for cs, rs in zip(timeline.apply_client, timeline.apply_round)
             for c, i in zip(cs, rs) if c >= 0]
    assert order != sorted(order)                                           # some messages arrive out of client order
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7), run.params, ref.params)


@pytest.mark.parametrize("lookahead", [1, pytest.param(None, marks=pytest.mark.slow)])
def test_every_update_is_applied_exactly_once(data, lookahead):
    sizes = AS.per_client(AS.power(6, 1, 3, 6, start=0), N)
    timing = AT.draw_timing(N, 6, seed=1, speed_spread=0.7, mean_delay=6.0)
    tl = AT.simulate(sizes, timing, lookahead=lookahead)
    applied = [(int(c), int(i)) for cs, rs in zip(tl.apply_client, tl.apply_round) for c, i in zip(cs, rs) if c >= 0]
    assert sorted(applied) == [(c, i) for c in range(N) for i in range(6)]            # each once
    assert np.all(tl.arrival_time >= tl.send_time) and tl.sends.sum() == 6 * N
    assert sorted(b for b in tl.broadcast_after.ravel() if b >= 0) == list(range(1, 7))
    run = _run(AD.async_sgd(logistic, tl, step_size=ETA, clip_norm=1.0, noise_multiplier=1.0), data, tl.num_slices)
    assert run.server.applied.tolist() == [6] * N and int(run.server.k) == 6 and run.silos.round.tolist() == [6] * N
    # v_hat_0 - v_hat_T is the sum of every message sent (float rounding of a different order)
    for v0, v, s in zip(jax.tree_util.tree_leaves(PARAMS), jax.tree_util.tree_leaves(run.params),
                        jax.tree_util.tree_leaves(run.silos.sent)):
        np.testing.assert_allclose(v0 - v, s.sum(axis=0), atol=1e-6)
    # every client accepted the last broadcast after its last send: its model is v_hat_T
    for leaf, server in zip(jax.tree_util.tree_leaves(run.silos.model), jax.tree_util.tree_leaves(run.params)):
        assert all(np.array_equal(row, server) for row in leaf)
    # the newest broadcast: the initial model before the first, v_hat_T after the last
    assert _equal(AD.latest_broadcast(run), run.params)
    first = int(np.argmax(tl.broadcast_after.max(axis=1) >= 0))
    assert _equal(AD.latest_broadcast(_run(AD.async_sgd(logistic, tl, step_size=ETA), data, first)), PARAMS)


def test_the_server_sums_the_clients_updates(data):
    """A loss with a constant gradient -a_c on client c (||a_c|| < C): v_hat_T = v_hat_0 + sum_i eta_i
    sum_c s_{i,c} a_c, the Hogwild sum of every single-record step (not a mean over clients)."""
    a = np.array([[0.1, 0.2, 0.0, 0.0, 0.0], [0.0, 0.0, 0.3, 0.0, 0.0], [0.0, 0.0, 0.0, 0.1, 0.1]], np.float32)
    silos = from_silos([(np.repeat(a[c:c + 1], 10, axis=0), np.zeros(10, np.float32)) for c in range(N)])
    linear = lambda p, x, y: -jnp.dot(p["w"], x) + 0.0 * p["b"]   # noqa: E731
    tl = AT.simulate(SIZES, AT.draw_timing(N, 4, seed=2, speed_spread=0.5, mean_delay=2.0), lookahead=2)
    run = _run(AD.async_sgd(linear, tl, step_size=ETA, clip_norm=1.0), silos, tl.num_slices)
    before = np.concatenate([[0], np.cumsum(SIZES.sum(axis=1))])
    expected = sum(ETA(float(before[i])) * (SIZES[i][:, None] * a).sum(axis=0) for i in range(4))
    np.testing.assert_allclose(run.params["w"], expected, rtol=1e-5)


@pytest.mark.parametrize("d", [0, 1, 2, 3])
def test_lookahead_staleness_is_bounded_and_reached(d):
    """With heterogeneous speeds and delays, rounds start at most d rounds ahead of the newest accepted
    broadcast, and (for d > 0) some round starts exactly d ahead: the bound binds."""
    sizes = AS.per_client(AS.constant(4, 12), 4)
    tl = AT.simulate(sizes, AT.draw_timing(4, 12, seed=3, speed_spread=1.0, mean_delay=10.0), lookahead=d)
    assert tl.lookahead.max() == d and tl.lookahead.min() >= 0


def test_tau_rule_keeps_t_delay_within_tau():
    sizes = AS.per_client(AS.power(8, 1, 8, 10, start=0), 4)
    tau = lambda t: 60.0 + 2.0 * np.sqrt(np.asarray(t, float))   # >= the last round's global size 80
    tl = AT.simulate(sizes, AT.draw_timing(4, 10, seed=4, speed_spread=1.0, mean_delay=20.0), tau=tau)
    assert 0.0 < tl.max_delay_ratio <= 1.0
    free = AT.simulate(sizes, AT.draw_timing(4, 10, seed=4, speed_spread=1.0, mean_delay=20.0))
    assert free.lookahead.max() > tl.lookahead.max()                   # the rule binds
    with pytest.raises(ValueError, match="stalls"):
        AT.simulate(sizes, AT.draw_timing(4, 10), tau=lambda t: -1.0)


@pytest.mark.slow
def test_the_simulation_is_deterministic_for_a_seed(data):
    sizes = AS.per_client(AS.power(6, 1, 3, 5, start=0), N)
    make = lambda seed: AT.simulate(  # noqa: E731
        sizes, AT.draw_timing(N, 5, seed=seed, speed_spread=0.6, mean_delay=3.0), lookahead=1)
    one, two, other = make(7), make(7), make(8)
    for field in ("steps", "sends", "apply_client", "broadcast_after", "accept", "boundaries"):
        assert np.array_equal(getattr(one, field), getattr(two, field))
    assert not np.array_equal(one.boundaries, other.boundaries)
    algorithm = AD.async_sgd(logistic, one, step_size=ETA, clip_norm=1.0, noise_multiplier=1.0)
    assert _equal(_run(algorithm, data, one.num_slices), _run(algorithm, data, one.num_slices))
    assert not _equal(_run(algorithm, data, one.num_slices).params, _run(algorithm, data, one.num_slices, key=4).params)


def test_a_quantum_puts_events_on_a_grid_with_fewer_slices(data):
    sizes = AS.per_client(AS.constant(5, 6), 8)
    timing = AT.draw_timing(8, 6, seed=6, speed_spread=0.5, mean_delay=3.0)
    exact, coarse = AT.simulate(sizes, timing, lookahead=1), AT.simulate(sizes, timing, lookahead=1, quantum=4.0)
    assert coarse.num_slices < exact.num_slices
    assert np.allclose(coarse.boundaries / 4.0, np.round(coarse.boundaries / 4.0))
    assert coarse.sends.sum() == 48 and (coarse.apply_client >= 0).sum() == 48
    assert coarse.steps.sum() == exact.steps.sum() == sizes.sum()


def test_bad_inputs_name_the_value(data):
    with pytest.raises(ValueError, match="sizes"):
        AT.simulate(np.zeros((2, 2)), AT.draw_timing(2, 2))
    with pytest.raises(ValueError, match="lookahead or tau"):
        AT.simulate(SIZES, AT.draw_timing(N, 4), lookahead=1, tau=lambda t: 1.0)
    with pytest.raises(ValueError, match="finite clip_norm"):
        AD.sync_sgd(logistic, SIZES, step_size=ETA, noise_multiplier=1.0)
    tl = AT.simulate(SIZES[:, :2], AT.draw_timing(2, 4))
    with pytest.raises(ValueError, match="3 silos but the timeline has 2"):
        _run(AD.async_sgd(logistic, tl, step_size=ETA), data, tl.num_slices)
    assert AD.async_sgd(logistic, tl, step_size=ETA).privacy is None       # states none (module docstring)


# -- the stated variant: gradients at the round's start point, Poisson sampling ------------------------------

ETA_ROUNDS = AS.step_size("inverse_sqrt", 0.1, 0.01, per="rounds")


@pytest.mark.slow
@pytest.mark.parametrize("z", [0.0, 1.5])
def test_poisson_variant_with_zero_delays_is_its_synchronous_reference_bitwise(data, z):
    timeline = AT.simulate(SIZES, AT.draw_timing(N, 4), lookahead=1)
    run = _run(AD.async_sgd(logistic, timeline, step_size=ETA_ROUNDS, clip_norm=1.0, noise_multiplier=z,
                            sampling="poisson"), data, 4)
    ref = _run(AD.sync_sgd(logistic, SIZES, step_size=ETA_ROUNDS, clip_norm=1.0, noise_multiplier=z,
                           sampling="poisson"), data, 4)
    assert _equal(run.params, ref.params)
    other = _run(AD.sync_sgd(logistic, SIZES, step_size=ETA_ROUNDS, clip_norm=1.0, noise_multiplier=z), data, 4)
    assert not _equal(run.params, other.params)


def test_poisson_variant_samples_each_record_at_rate_s_over_n():
    """A linear loss whose clipped per-record gradient is -e_0: each client's round message (no noise) is
    ``-eta_i |S_i| e_0``, so the sizes of the Poisson samples are read off the messages: their mean over 40
    rounds of 3 clients is s = 5 (N_c = 50, q = 0.1) within 4 standard errors."""
    sizes = np.full((40, N), 5)
    silos = from_silos([(np.tile(np.eye(1, D), (50, 1)).astype(np.float32), np.zeros(50, np.float32))
                        for _ in range(N)])
    linear = lambda p, x, y: -jnp.dot(p["w"], x) + 0.0 * p["b"]   # noqa: E731
    eta = AS.step_size("constant", 1.0, 0.0, per="rounds")
    tl = AT.simulate(sizes, AT.draw_timing(N, 40, seed=4, speed_spread=0.5, mean_delay=3.0), lookahead=1)
    run = _run(AD.async_sgd(linear, tl, step_size=eta, clip_norm=10.0, sampling="poisson", chunk=2), silos,
               tl.num_slices)
    drawn = -np.asarray(run.silos.sent["w"])[:, 0]                  # records sampled per client, all rounds
    assert np.allclose(drawn, np.round(drawn)) and np.all(np.asarray(run.silos.sent["w"])[:, 1:] == 0)
    mean, std_err = drawn.sum() / (40 * N), math.sqrt(5 * 0.9 / (40 * N))
    assert abs(mean - 5.0) < 4 * std_err


def test_public_records_fix_the_rate_and_the_relation(data):
    """records= equal to the counts runs the same rounds bitwise (the rate is s_i / N_c either way) and states
    add/remove-one; bad values are refused by name."""
    counts = np.asarray(data.counts)
    tl = AT.simulate(SIZES, AT.draw_timing(N, 4, seed=3), lookahead=1)
    own, public = (AD.async_sgd(logistic, tl, step_size=ETA_ROUNDS, clip_norm=1.0, noise_multiplier=1.0,
                                sampling="poisson", records=r) for r in (None, counts))
    assert _equal(_run(own, data, tl.num_slices).params, _run(public, data, tl.num_slices).params)
    assert public.privacy(counts).relation is dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    for bad in (0, [40, 40], 2.5, [40, 40, math.nan]):
        with pytest.raises(ValueError, match="records must be"):
            AD.async_sgd(logistic, tl, step_size=ETA_ROUNDS, clip_norm=1.0, sampling="poisson", records=bad)
    with pytest.raises(ValueError, match="sampling='poisson'"):
        AD.async_sgd(logistic, tl, step_size=ETA_ROUNDS, clip_norm=1.0, records=40)


@pytest.mark.slow
def test_poisson_variant_one_record_moves_a_rounds_message_by_at_most_2_eta_c(data):
    """Replace one record of client 0 by an outlier: the first round's messages (no noise) change by at most
    ``2 eta_0 C`` in norm (gradients at the round's start point; replace-one = remove + add), at two seeds."""
    x, y = np.asarray(data.x).copy(), np.asarray(data.y).copy()
    x[0, 3] = 50.0
    other = from_silos([(x[c, :int(data.counts[c])], y[c, :int(data.counts[c])]) for c in range(N)])
    sizes = np.full((1, N), 8)
    for key in range(2):
        a, b = (train(AD.sync_sgd(logistic, sizes, step_size=ETA_ROUNDS, clip_norm=0.5, sampling="poisson"), d,
                      PARAMS, rounds=1, key=key, progress=False).state.params for d in (data, other))
        diff = math.sqrt(sum(float(np.sum((u - v) ** 2)) for u, v in zip(jax.tree_util.tree_leaves(a),
                                                                          jax.tree_util.tree_leaves(b))))
        assert diff <= 2 * ETA_ROUNDS(0.0) * 0.5 * (1 + 1e-5)


@pytest.mark.slow
def test_poisson_variant_states_the_tight_epsilon_of_its_rounds(data):
    """The run's ledger (add/remove one record, one schedule of Poisson-sampled Gaussians per client over the
    slices) certifies what jaxfl.accounting.moments.tight_epsilon computes for the client's rounds; the
    paper's variant and an unclipped one state nothing; s_i > N_c and per-iteration steps are refused."""
    from jaxfl.accounting import moments

    tl = AT.simulate(SIZES, AT.draw_timing(N, 4, seed=3, speed_spread=0.6, mean_delay=5.0), lookahead=1)
    counts = np.asarray(data.counts)
    algorithm = AD.async_sgd(logistic, tl, step_size=ETA_ROUNDS, clip_norm=1.0, noise_multiplier=2.0,
                             sampling="poisson", records=counts)
    result = train(algorithm, data, PARAMS, rounds=tl.num_slices, key=0, delta=1e-5, progress=False)
    expected = [moments.tight_epsilon(SIZES[:, c], int(counts[c]), 2.0, 1e-5) for c in range(N)]
    ledger = make_ledger(algorithm, counts).record(tl.num_slices)
    np.testing.assert_allclose(ledger.epsilons(1e-5), expected, rtol=1e-9)   # client 0 has the fewest records
    assert result.epsilon == pytest.approx(max(expected), rel=1e-9) and expected[0] > expected[1] > expected[2]
    assert AD.async_sgd(logistic, tl, step_size=ETA_ROUNDS, clip_norm=1.0, noise_multiplier=2.0).privacy is None
    assert AD.async_sgd(logistic, tl, step_size=ETA_ROUNDS, sampling="poisson").privacy is None
    with pytest.raises(ValueError, match="exceeds"):
        AD.async_sgd(logistic, tl, step_size=ETA_ROUNDS, clip_norm=1.0, sampling="poisson", records=[3, 30, 30])
    own = AD.async_sgd(logistic, tl, step_size=ETA_ROUNDS, clip_norm=1.0, noise_multiplier=2.0, sampling="poisson")
    assert own.privacy(counts).relation is dp_accounting.NeighboringRelation.REPLACE_ONE  # the rate from the count
    with pytest.raises(ValueError, match="exceeds"):
        own.privacy(np.array([3, 30, 30]))
    with pytest.raises(ValueError, match="per='rounds'"):
        AD.async_sgd(logistic, tl, step_size=AS.step_size("inverse", 0.1, 0.01, per="iterations"), clip_norm=1.0,
                     sampling="poisson")


# ------------------------------------------------------------------------------------------------
# delayed_sgd: the recursion at the protocol's largest delay


@pytest.mark.parametrize("d", [0, 1, 2])
def test_delayed_sgd_follows_the_delayed_recursion(data, d):
    """With a record-free loss ``0.5 ||w - c||^2`` every gradient is ``w_hat - c``, so round ``i`` moves ``w`` by
    ``eta B_i (w_hat_i - c)`` with ``w_hat_i`` the start of round ``max(i - d, 0)`` (oracle: the recursion in
    NumPy)."""
    c = np.array([1.0, -2.0, 0.5, 3.0, 0.0])
    loss = lambda p, x, y: 0.5 * jnp.sum((p["w"] - c) ** 2) + 0.5 * p["b"] ** 2  # noqa: E731
    eta = 0.01
    algorithm = AD.delayed_sgd(loss, SIZES, step_size=AS.step_size("constant", eta), lookahead=d)
    state = _run(algorithm, data, 4)
    starts = [np.zeros(D)]
    for i, b in enumerate(SIZES.sum(axis=1)):
        starts.append(starts[-1] - eta * b * (starts[max(i - d, 0)] - c))
    np.testing.assert_allclose(state.params["w"], starts[-1], rtol=1e-5)


def test_delayed_sgd_with_one_step_a_round_is_sync_sgd(data):
    """One step per client and round, no lookahead: every gradient is at the round's start, as in sync_sgd."""
    sizes = np.ones((5, N), np.int64)
    eta = AS.step_size("constant", 0.1)
    delayed = _run(AD.delayed_sgd(logistic, sizes, step_size=eta, lookahead=0), data, 5)
    sync = _run(AD.sync_sgd(logistic, sizes, step_size=eta), data, 5).params  # another program: XLA may round apart
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7), delayed.params, sync)
    assert not _equal(_run(AD.delayed_sgd(logistic, sizes, step_size=eta, lookahead=1), data, 5).params,
                      delayed.params)


def test_delayed_sgd_bad_input():
    with pytest.raises(ValueError, match="lookahead"):
        AD.delayed_sgd(logistic, SIZES, step_size=ETA, lookahead=-1)
    with pytest.raises(ValueError, match="sizes"):
        AD.delayed_sgd(logistic, np.zeros((2, 3)), step_size=ETA)
