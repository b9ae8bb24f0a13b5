"""DP-REC on the engine: slots with replacement, messages are (seed, indices) only, the server step is the
mean decoded update, history replay reproduces the server model, the privacy statement, traffic counts."""
import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from _helpers import make_silos
from jax.flatten_util import ravel_pytree

from jaxfl.engine.participation import with_replacement
from jaxfl.accounting.dprec import DprecDpEvent
from jaxfl.algorithms import dprec as dp_rec_lib
from jaxfl.compression import history, rec
from jaxfl.data.federated import from_silos
from jaxfl.engine import participation, rounds
from jaxfl.engine.local import local_epochs
from jaxfl.models.linear import init_linear, logistic_loss
from jaxfl.privacy import keys as keys_lib

SIGMA = 0.05


def _setup(num_silos=6, clients_per_round=4, **kw):
    data = from_silos(make_silos([30, 25, 40, 20, 35, 28][:num_silos], features=5))
    params = init_linear(5)
    algo = dp_rec_lib.dp_rec(logistic_loss, params=params, client_opt=optax.sgd(0.1),
                             participation=with_replacement(clients_per_round), batch_size=8, prior_std=SIGMA,
                             clip_multiplier=1.0, **kw)
    return data, algo, params


def test_with_replacement_draws_only_real_silos_uniformly():
    counts = jnp.asarray([5, 5, 0, 5, 0], jnp.int32)
    draw = jax.jit(participation.with_replacement(3).draw)
    picks = np.concatenate([np.asarray(draw(jax.random.PRNGKey(i), counts)) for i in range(600)])
    freq = np.bincount(picks, minlength=5) / picks.size
    assert freq[2] == 0 and freq[4] == 0
    np.testing.assert_allclose(freq[[0, 1, 3]], 1 / 3, atol=0.04)


def test_a_silo_drawn_twice_gets_independent_slot_keys():
    silos = jnp.asarray([4, 1, 4, 4], jnp.int32)
    np.testing.assert_array_equal(rounds.occurrences(silos), [0, 0, 1, 2])
    rk = jax.random.PRNGKey(0)
    keys = [jax.random.key_data(rounds.slot_key(rk, s, o)) for s, o in zip(silos, rounds.occurrences(silos))]
    assert len({tuple(np.asarray(k)) for k in keys}) == 4
    # a slot's key depends on (round, silo, occurrence), not on where the slot sits
    np.testing.assert_array_equal(keys[1], jax.random.key_data(rounds.slot_key(rk, 1, 0)))


@pytest.mark.slow
def test_round_sends_only_seeds_and_indices_and_the_server_applies_their_decoded_mean():
    data, algo, params = _setup()
    state = algo.init(params)
    layout = rec.per_tensor(params)
    new, info = jax.jit(algo.round)(state, data, jax.random.PRNGKey(3))
    assert new.seeds.shape == (4,) and new.seeds.dtype == jnp.uint32
    assert new.indices.shape == (4, layout.num_blocks) and int(new.indices.max()) < 2**7
    decoded = [rec.decode(new.indices[i], new.seeds[i], layout, SIGMA) for i in range(4)]
    expected = ravel_pytree(params)[0] + sum(decoded) / 4  # sgd(1.0) on -mean: parameter averaging
    np.testing.assert_allclose(ravel_pytree(new.params)[0], expected, rtol=1e-6, atol=1e-7)
    assert float(info["participants"]) == 4 and 0 <= float(info["clipped_fraction"]) <= 1
    assert int(new.round) == 1


@pytest.mark.slow
def test_messages_encode_the_clipped_local_update():
    data, algo, params = _setup()
    rk = jax.random.PRNGKey(8)
    state = algo.init(params)
    new, _ = jax.jit(algo.round)(state, data, rk)
    silos = participation.with_replacement(4)(rk, data.counts)
    layout = rec.per_tensor(params)
    for i, (s, o) in enumerate(zip(silos, rounds.occurrences(silos))):
        key = rounds.slot_key(rk, s, o)
        trained, _ = local_epochs(logistic_loss, params, data.x[s], data.y[s], data.counts[s], key,
                                  client_opt=optax.sgd(0.1), batch_size=8)
        update = ravel_pytree(trained)[0] - ravel_pytree(params)[0]
        clipped = update * min(1.0, SIGMA / float(jnp.linalg.norm(update)))
        seed = dp_rec_lib.client_seed(key)
        assert int(new.seeds[i]) == int(seed)
        expect = rec.encode(clipped, seed, dp_rec_lib.gumbel_key(key), layout, SIGMA)
        np.testing.assert_array_equal(new.indices[i], expect)


def test_decoded_updates_average_to_the_clipped_update():
    """Over many rounds of one silo, the mean decoded update approaches the silo's clipped update."""
    data = from_silos(make_silos([40], features=5))
    params = init_linear(5)
    algo = dp_rec_lib.dp_rec(logistic_loss, params=params, client_opt=optax.sgd(0.5), participation=with_replacement(1),
                             batch_size=40, prior_std=SIGMA, clip_multiplier=0.8, layout=rec.whole(6, 8))
    state = algo.init(params)
    steps = jax.jit(jax.vmap(lambda k: ravel_pytree(algo.round(state, data, k)[0].params)[0]))(
        jax.random.split(jax.random.PRNGKey(0), 4000))
    mean_step = np.asarray(steps - ravel_pytree(params)[0]).mean(axis=0)
    trained, _ = local_epochs(logistic_loss, params, data.x[0], data.y[0], data.counts[0], jax.random.PRNGKey(0),
                              client_opt=optax.sgd(0.5), batch_size=40)  # full batch: key-independent
    update = np.asarray(ravel_pytree(trained)[0] - ravel_pytree(params)[0])
    clipped = update * min(1.0, 0.8 * SIGMA / np.linalg.norm(update))
    bound = 12 / 2**8 * np.exp(0.8**2) * SIGMA  # eq. 4 per coordinate, plus Monte-Carlo error
    assert np.all(np.abs(mean_step - clipped) <= bound + 5 * SIGMA / np.sqrt(4000))


def test_history_replay_reproduces_the_server_model():
    data, algo, params = _setup(server_opt=optax.adam(1e-2))
    server_opt = optax.adam(1e-2)
    step = jax.jit(algo.round)
    state = algo.init(params)
    snapshot = state  # what a client holds after taking part in round 0's broadcast
    transcripts = []
    for r in range(4):
        state, _ = step(state, data, keys_lib.round_key(jax.random.PRNGKey(0), r))
        transcripts.append((state.seeds, state.indices))
    layout, unravel = rec.per_tensor(params), ravel_pytree(params)[1]
    replay_step = jax.jit(lambda st, s, k: dp_rec_lib.server_step(server_opt, unravel, st, s, k, layout, SIGMA))
    rebuilt = history.replay(snapshot, transcripts, replay_step)
    for a, b in zip(jax.tree_util.tree_leaves(rebuilt.params), jax.tree_util.tree_leaves(state.params)):
        np.testing.assert_array_equal(a, b)


def test_privacy_is_one_with_replacement_round_of_dprec_steps():
    data, algo, params = _setup()  # never initialised: the statement exists as soon as the algorithm is built
    privacy = algo.privacy(np.asarray(data.counts))
    assert privacy.level == "client" and privacy.relation is dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    assert privacy.events == (dp_accounting.SampledWithReplacementDpEvent(6, 4, DprecDpEvent(1.0, 14)),)
    # a template of shapes is enough, and gives the same statement
    template = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), params)
    shaped = dp_rec_lib.dp_rec(logistic_loss, params=template, client_opt=optax.sgd(0.1),
                               participation=with_replacement(4),
                               batch_size=8, prior_std=SIGMA, clip_multiplier=1.0)
    assert shaped.privacy(np.asarray(data.counts)) == privacy
    with pytest.raises(ValueError, match="init got params"):
        shaped.init(init_linear(6))


@pytest.mark.parametrize("kwargs,match", [({"clients_per_round": 0}, "clients_per_round"),
                                          ({"prior_std": 0.0}, "prior_std"),
                                          ({"clip_multiplier": float("inf")}, "clip_multiplier")])
def test_bad_hyperparameters_are_named(kwargs, match):
    args = dict(params=init_linear(5), client_opt=optax.sgd(0.1), participation=with_replacement(4), batch_size=8,
                prior_std=SIGMA,
                clip_multiplier=1.0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        dp_rec_lib.dp_rec(logistic_loss, **args)


def test_layout_must_cover_the_model():
    with pytest.raises(ValueError, match="covers 5 entries but the model has 6"):
        _setup(layout=rec.whole(5, 7))


def test_communication_ledger_counts_histories_by_hand():
    # 3 clients, 2 slots per round, 10-bit messages, a 100-bit model, 4-bit init seed
    ledger = history.CommunicationLedger(3, message_bits=10, model_bits=100, init_bits=4)
    assert ledger.record_round([0, 1]) == (20, 8)  # both fetch the init seed
    # client 2 now holds init + 2 messages = 24 bits; client 0 holds client 1's message = 10 bits
    assert ledger.record_round([2, 0]) == (20, 24 + 10)
    # client 2 again: round 1's message of client 0 = 10; client 1: round 0's (other) 10 + round 1's 20 = 30
    assert ledger.record_round([2, 1]) == (20, 10 + 30)
    # client 0 twice: round 1's other message (10) + round 2's two (20) = 30, then nothing at its second slot
    assert ledger.record_round([0, 0]) == (20, 30 + 0)
    assert ledger.up_bits == 80 and ledger.down_bits == 8 + 34 + 40 + 30
    big = history.CommunicationLedger(2, message_bits=60, model_bits=50, optimizer_bits=20)
    big.record_round([0, 0])
    big.record_round([1, 1])  # history 32 + 120 > 70: the model and optimizer state are sent instead
    assert big.down_bits == 32 + 70 and big.full_downloads == 1
    assert history.uncompressed_bits(2, 3, 10) == 2 * 3 * 10 * 64
