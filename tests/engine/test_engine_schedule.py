"""Engine 2: scheduled rounds (host-computed inputs with a leading round axis, fed through the driver's scan)."""
import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxfl.algorithms import minibatch_sgd
from jaxfl.algorithms.common import apply_server_update, init_server, safe_mean
from jaxfl.engine import FederatedAlgorithm, PerRound, local, participation, run_rounds, train
from jaxfl.engine.rounds import make_round
from jaxfl.models import init_linear, logistic_loss
from jaxfl.privacy import keys as keys_lib

ROUNDS = 9


def growing_schedule(num_silos, rounds=ROUNDS):
    """Per round: a server learning rate, a Poisson rate that grows, an active mask, per-silo local steps."""
    r = np.arange(rounds)
    return {"lr": (0.5 / np.sqrt(r + 1)).astype(np.float32),
            "rate": np.linspace(0.1, 0.9, rounds).astype(np.float32),
            "active": (np.add.outer(r, np.arange(num_silos)) % 3 != 0),
            "steps": (1 + np.add.outer(r, np.arange(num_silos)) % 4).astype(np.int32)}


def scheduled_sgd(schedule):
    """Each active silo sends the mean of ``steps[r, silo]`` Poisson-sampled gradients at rate ``rate[r]``;
    the server steps with ``lr[r]``."""

    def client(params, x, y, count, key, *, inputs, silo):
        sampler = local.make_sampler(sampling_rate=inputs["rate"])
        steps = inputs["steps"][silo]

        def body(step, total):
            g, _ = local.noisy_gradient(logistic_loss, params, x, y, count, key, step, sampler=sampler,
                                        clip_norm=1.0, noise_multiplier=0.0)
            return jax.tree_util.tree_map(lambda t, gi: t + jnp.where(step < steps, gi, 0.0), total, g)

        total = jax.lax.fori_loop(0, 4, body, jax.tree_util.tree_map(jnp.zeros_like, params))
        return jax.tree_util.tree_map(lambda t: t / steps, total), {"steps": steps.astype(jnp.float32)}

    def server(state, summed, ctx):
        mean = safe_mean(summed, ctx.total_weight)
        state = apply_server_update(optax.sgd(1.0), state, jax.tree_util.tree_map(lambda m: ctx.inputs["lr"] * m, mean))
        return state, {"lr": ctx.inputs["lr"]}

    return FederatedAlgorithm(init=init_server(optax.sgd(1.0)),
                              round=make_round(client, server, participation.resolve(None), scheduled=True,
                                               active=lambda inputs: inputs["active"]),
                              name="scheduled_sgd", schedule=schedule)


def _equal(a, b):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.slow
def test_chunked_training_equals_calling_each_round_with_its_inputs(small_data):
    schedule = growing_schedule(small_data.num_silos)
    alg = scheduled_sgd(schedule)
    state = alg.init(init_linear(5))
    root = jax.random.key(11)
    infos = []
    for r in range(ROUNDS):
        inputs = jax.tree_util.tree_map(lambda a: jnp.asarray(a[r]), schedule)
        state, info = jax.jit(alg.round)(state, small_data, keys_lib.round_key(root, r), inputs)
        infos.append(info)
    result = train(alg, small_data, init_linear(5), rounds=ROUNDS, key=root, eval_every=4, progress=False)
    _equal(result.state, state)
    assert [info["participants"] for info in infos] == list(schedule["active"].sum(axis=1).astype(float))
    assert [float(info["lr"]) for info in infos] == list(schedule["lr"].astype(float))
    traced_start = jax.jit(lambda s, start: run_rounds(alg, s, small_data, root, start, 4))
    first, _ = run_rounds(alg, alg.init(init_linear(5)), small_data, root, 0, 5)
    rest, rest_infos = traced_start(first, jnp.asarray(5))
    _equal(rest, state)
    np.testing.assert_array_equal(rest_infos["lr"], schedule["lr"][5:])


def test_each_silo_reads_its_own_entry_of_per_silo_inputs(small_data):
    schedule = growing_schedule(small_data.num_silos)
    alg = scheduled_sgd(schedule)
    _, infos = jax.jit(lambda s: run_rounds(alg, s, small_data, jax.random.key(0), 0, ROUNDS))(alg.init(init_linear(5)))
    active = schedule["active"]
    expected = (schedule["steps"] * active).sum(axis=1) / active.sum(axis=1)  # mean over participants
    np.testing.assert_allclose(infos["steps"], expected, rtol=1e-6)


def test_a_run_longer_than_its_schedule_is_refused(small_data):
    alg = scheduled_sgd(growing_schedule(small_data.num_silos, rounds=4))
    with pytest.raises(ValueError, match="rounds=5 runs past the schedule of 'scheduled_sgd', which covers 4 rounds"):
        train(alg, small_data, init_linear(5), rounds=5, progress=False)
    bad = alg._replace(schedule={"lr": np.ones(4), "rate": np.ones(3)})
    with pytest.raises(ValueError, match="same leading round axis"):
        train(bad, small_data, init_linear(5), rounds=2, progress=False)


def test_a_scheduled_round_needs_its_inputs(small_data):
    alg = scheduled_sgd(growing_schedule(small_data.num_silos))
    with pytest.raises(ValueError, match="scheduled"):
        alg.round(alg.init(init_linear(5)), small_data, jax.random.key(0))


def test_a_growing_sampling_rate_is_accounted_round_by_round_and_the_budget_stop_is_exact(small_data):
    rates = np.linspace(0.05, 0.8, 40)
    alg = minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.5), sampling_rate=PerRound(rates),
                        expected_batch_size=5.0, clip_norm=1.0, noise_multiplier=1.2)
    result = train(alg, small_data, init_linear(5), rounds=40, key=0, eval_every=7, target_epsilon=2.0, delta=1e-5,
                   progress=False)

    def by_hand(rounds):  # the same events composed directly in dp_accounting
        accountant = dp_accounting.rdp.RdpAccountant()
        for q in rates.astype(np.float32)[:rounds]:
            accountant.compose(dp_accounting.PoissonSampledDpEvent(float(q), dp_accounting.GaussianDpEvent(1.2)))
        return accountant.get_epsilon(1e-5)

    assert result.stop_reason == "budget" and 0 < result.rounds < 40
    assert by_hand(result.rounds) <= 2.0 < by_hand(result.rounds + 1)  # stops before the round that would overshoot
    assert result.epsilon == pytest.approx(by_hand(result.rounds), rel=1e-9)
    assert len(alg.privacy(np.asarray(small_data.counts)).events) == small_data.num_silos
    with pytest.raises(ValueError, match="PerRound sampling rates"):
        minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.5), sampling_rate=PerRound([0.1, 1.5]), clip_norm=1.0,
                      noise_multiplier=1.0)
