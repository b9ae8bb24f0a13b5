"""make_round's participants-only path: with M of N silos per round, only the M participants' clients run,
and every algorithm's result is the all-silo round's (non-participants there weigh 0) up to float rounding
(the device-layout tests check it bitwise across layouts)."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from _helpers import make_silos
from jaxfl.algorithms import local_sgd, minibatch_sgd, personalized, scaffold, variance_reduced
from jaxfl.algorithms.common import init_server, mean_server
from jaxfl.data.federated import from_silos
from jaxfl.engine import FederatedAlgorithm, initial_state, participation, run_rounds
from jaxfl.engine.rounds import Aggregator, make_round, weighted_sum
from jaxfl.models import init_linear, logistic_loss

DATA = from_silos(make_silos([40, 25, 33, 40, 18, 22, 30], seed=2))


def every_silo(m):
    """uniform(m) without its ``max_participants``: make_round then runs every silo."""
    uniform = participation.uniform(m)
    return lambda key, counts: uniform(key, counts)


BUILDERS = {
    "minibatch_sgd": lambda sp: minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.3), batch_size=8, clip_norm=1.0,
                                              noise_multiplier=1.0, participation=sp),
    "per-silo z": lambda sp: minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.3), batch_size=8, clip_norm=1.0,
                                           noise_multiplier=np.linspace(0.5, 2.0, 7), participation=sp),
    "local_sgd": lambda sp: local_sgd(logistic_loss, client_opt=optax.sgd(0.1), local_steps=4, batch_size=1,
                                      clip_norm=1.0, noise_multiplier=1.0, participation=sp),
    "fedprox_spider": lambda sp: variance_reduced.fedprox_spider(
        logistic_loss, step_size=0.1, phase_length=2, clip_norm=1.0, batch_size=8, noise_multiplier=1.0,
        difference_noise_multiplier=1.0, participation=sp),
    "alt_fed_spider": lambda sp: variance_reduced.alt_fed_spider(
        logistic_loss, step_size=0.1, clip_norm=1.0, batch_size=8, noise_multiplier=1.0,
        difference_noise_multiplier=1.0, participation=sp),
    "scaffold": lambda sp: scaffold(logistic_loss, client_opt=optax.sgd(0.2), local_steps=3, batch_size=6,
                                    participation=sp),
    "personalized": lambda sp: personalized(logistic_loss, shared={"w": "shared", "b": "private"},
                                            client_opt=optax.sgd(0.2), local_steps=3, sampling_rate=0.4,
                                            clip_norm=1.0, noise_multiplier=1.0, participation=sp),
}


def _run(alg, rounds=6, data=DATA):
    """The data are an argument of the compiled run, as in the engine's drivers (a closed-over constant
    would be folded at compile time, in different float arithmetic than the run's)."""
    state = initial_state(alg, init_linear(5), data.num_silos)
    return jax.jit(lambda s, d: run_rounds(alg, s, d, jax.random.key(3), 0, rounds))(state, data)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_participants_only_equals_every_silo(name):
    (gathered, g_info), (full, f_info) = _run(BUILDERS[name](3)), _run(BUILDERS[name](every_silo(3)))
    for a, b in zip(jax.tree_util.tree_leaves(gathered), jax.tree_util.tree_leaves(full), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(g_info["participants"], f_info["participants"])
    assert np.all(np.asarray(g_info["participants"]) == 3)


def _counting_sgd(silos_per_round, seen, participants_only=True):
    """Plain one-step SGD whose aggregator records how many slots it is handed (at trace time)."""
    def client(params, x, y, count, key):
        grads = jax.grad(lambda p: jnp.sum(jax.vmap(logistic_loss, (None, 0, 0))(p, x, y)))(params)
        return grads, {"count": count.astype(jnp.float32)}

    def aggregate(messages, weights, round_key):
        seen.append(weights.shape[0])
        return weighted_sum(messages, weights, round_key)

    return FederatedAlgorithm(init=init_server(optax.sgd(0.01)),
                              round=make_round(client, mean_server(optax.sgd(0.01)),
                                               participation.resolve(silos_per_round),
                                               aggregator=Aggregator(aggregate, participants_only)))


@pytest.mark.parametrize("silos_per_round, participants_only, slots", [
    (2, True, 2), (7, True, 7), (None, True, 7), (2, False, 7)])
def test_only_the_participants_clients_run(silos_per_round, participants_only, slots):
    seen = []
    _, info = _run(_counting_sgd(silos_per_round, seen, participants_only), rounds=2)
    assert seen == [slots]
    if silos_per_round in (None, 7):  # client infos are averaged over the participants
        np.testing.assert_allclose(info["count"], np.mean(np.asarray(DATA.counts)), rtol=1e-6)
    else:
        ref = _run(_counting_sgd(every_silo(silos_per_round), []), rounds=2)[1]
        np.testing.assert_allclose(info["count"], ref["count"], rtol=1e-6)


def test_silo_state_of_non_participants_is_untouched():
    alg = BUILDERS["scaffold"](2)
    state = initial_state(alg, init_linear(5), DATA.num_silos)
    after, info = jax.jit(alg.round)(state, DATA, jax.random.key(5))  # DATA an argument
    changed = [np.any(np.asarray(a != b).reshape(DATA.num_silos, -1), axis=1)
               for a, b in zip(jax.tree_util.tree_leaves(after.silos), jax.tree_util.tree_leaves(state.silos))]
    assert np.sum(np.any(changed, axis=0)) == 2 == float(info["participants"])


def test_padding_silos_fill_slots_with_weight_zero():
    """Fewer silos with records than M: the extra slots add nothing and write no state."""
    padded = DATA.pad_silos(1, minimum=10)  # 7 real silos + 3 empty ones
    build = lambda sp: minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.3), batch_size=8,  # noqa: E731
                                     participation=sp)
    out, info = _run(build(8), rounds=3, data=padded)
    ref, _ = _run(build(every_silo(8)), rounds=3, data=padded)
    np.testing.assert_allclose(out.params["w"], ref.params["w"], rtol=1e-6, atol=1e-7)
    assert np.all(np.asarray(info["participants"]) == 7)
