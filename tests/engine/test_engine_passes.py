"""Engine options added for DP-REC: participants processed in passes, local epochs, stored participation keys."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from _helpers import make_silos

from jaxfl.algorithms import local_sgd
from jaxfl.algorithms.dp_fedavg import dp_fedavg
from jaxfl.data.federated import from_silos
from jaxfl.engine import local, participation, run_rounds, sweep
from jaxfl.engine.rounds import make_round
from jaxfl.models.linear import init_linear, logistic_loss
from jaxfl.engine.participation import poisson, with_replacement


@pytest.mark.parametrize("per_pass", [1, 3, 16, "auto"])
def test_processing_participants_in_passes_equals_running_every_silo(per_pass):
    data = from_silos(make_silos([30, 12, 25, 40, 33, 17, 28, 9], seed=4))
    kwargs = dict(client_opt=optax.sgd(0.2), batch_size=5, local_epochs=1, participation=poisson(0.4),
                  expected_clients=3.2,
                  clip_norm=0.3,
                  noise_multiplier=1.0)
    full = dp_fedavg(logistic_loss, clients_per_pass=None, **kwargs)  # every silo, non-participants weighted 0
    passes = dp_fedavg(logistic_loss, clients_per_pass=per_pass, **kwargs)
    params = init_linear(5)
    outs = []
    for alg in (full, passes):
        state, infos = jax.jit(lambda s, alg=alg: run_rounds(alg, s, data, jax.random.PRNGKey(3), 0, 4))(
            alg.init(params))
        outs.append((state.params, infos))
    for a, b in zip(jax.tree_util.tree_leaves(outs[0][0]), jax.tree_util.tree_leaves(outs[1][0])):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for name in ("participants", "delta_norm", "clipped_fraction"):
        np.testing.assert_allclose(outs[0][1][name], outs[1][1][name], rtol=1e-5, atol=1e-6)
    assert np.any(np.asarray(outs[0][1]["participants"]) > 0)



@pytest.mark.parametrize("per_pass", [1, 2])
def test_local_sgd_in_passes_equals_one_vmap_in_a_sweep(per_pass):
    """Lowy et al.'s MNIST grid runs Local SGD's participants one at a time inside the vmapped grid program
    (configs x seeds, so the passes' loop runs under vmap): the same models and infos as one vmap over the
    participants, to float rounding."""
    data = from_silos(make_silos([30, 12, 25, 40, 33, 17], seed=2))
    outs = []
    for passes in (None, per_pass):
        build = lambda lr, z, passes=passes: local_sgd(
            logistic_loss, client_opt=optax.sgd(lr), local_steps=7, batch_size=1, clip_norm=0.5, noise_multiplier=z,
            participation=4, clients_per_pass=passes)
        outs.append(sweep(build, {"lr": [0.05, 0.3], "z": [0.0, 1.5]}, data, init_linear(5), rounds=3,
                          seeds=[0, 7]))
    full, passes = outs
    for a, b in zip(jax.tree_util.tree_leaves((full.params, full.infos)),
                    jax.tree_util.tree_leaves((passes.params, passes.infos))):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    leaves = jax.tree_util.tree_leaves(full.params)
    assert not np.allclose(leaves[0][0], leaves[0][1])   # the configs differ: a real grid, not one run


def test_local_sgd_in_passes_refuses_per_silo_noise_multipliers():
    with pytest.raises(ValueError, match="clients_per_pass needs .* no per_silo"):
        local_sgd(logistic_loss, client_opt=optax.sgd(0.1), local_steps=2, batch_size=1, clip_norm=1.0,
                  noise_multiplier=jnp.ones(6), clients_per_pass=1)


def test_local_epochs_visit_every_record_once_per_epoch():
    """With a loss whose gradient marks the record, one epoch's summed steps touch each real record once."""
    x = jnp.arange(12, dtype=jnp.float32).reshape(12, 1)
    y = jnp.zeros(12, jnp.int32)
    count = jnp.asarray(7)
    loss = lambda p, xi, yi: p["w"][xi[0].astype(jnp.int32)]  # d loss / d w = one-hot of the record id
    final, _ = local.local_epochs(loss, {"w": jnp.zeros(12)}, x, y, count, jax.random.PRNGKey(0),
                                  client_opt=optax.sgd(1.0), batch_size=3, epochs=2)
    # each step subtracts one over the batch's real size; 7 records in batches 3, 3, 1 per epoch
    visits = -np.asarray(final["w"])
    assert np.all(visits[7:] == 0)
    assert np.isclose(visits[:7].sum(), 2 * 3)  # 3 steps per epoch, each step's weights sum to 1
    assert np.all(visits[:7] > 0)


def test_local_epochs_reject_bad_sizes():
    with pytest.raises(ValueError, match="batch_size and epochs"):
        local.local_epochs(logistic_loss, init_linear(2), jnp.zeros((3, 2)), jnp.zeros(3, jnp.int32), 3,
                           jax.random.PRNGKey(0), client_opt=optax.sgd(1.0), batch_size=0)


def test_participation_key_chooses_the_key_participation_is_drawn_with():
    """FedProx-SVRG keeps one silo sample per epoch through make_round(participation_key=...)."""
    data = from_silos(make_silos([30, 25, 40, 35, 28, 33], seed=1))

    def client(params, x, y, count, key, silo):
        return jax.nn.one_hot(silo, 6), {}

    def server(state, summed, ctx):
        return summed, {}

    fixed = jax.random.PRNGKey(42)
    pinned = make_round(client, server, participation.uniform(2), per_silo=jnp.arange,
                        participation_key=lambda state, round_key: fixed, broadcast=lambda state: state)
    free = make_round(client, server, participation.uniform(2), per_silo=jnp.arange, broadcast=lambda state: state)
    keys = [jax.random.PRNGKey(r) for r in range(6)]
    pinned_sets = [np.asarray(pinned(jnp.zeros(6), data, k)[0]) for k in keys]
    free_sets = [np.asarray(free(jnp.zeros(6), data, k)[0]) for k in keys]
    assert all(s.sum() == 2 for s in pinned_sets + free_sets)
    assert all(np.array_equal(pinned_sets[0], s) for s in pinned_sets)
    assert not all(np.array_equal(free_sets[0], s) for s in free_sets)


def test_local_epochs_under_vmap_equal_each_silo_alone():
    """The loop stops at each silo's own step count; vmapped, finished silos keep their params."""
    data = from_silos(make_silos([30, 7, 19, 1], seed=5))
    keys = jax.random.split(jax.random.PRNGKey(2), 4)
    train = lambda x, y, c, k: local.local_epochs(logistic_loss, init_linear(5), x, y, c, k,
                                                  client_opt=optax.adam(0.1), batch_size=4, epochs=2)
    batched = jax.jit(jax.vmap(train))(data.x, data.y, data.counts, keys)
    for s in range(4):
        alone = jax.jit(train)(data.x[s], data.y[s], data.counts[s], keys[s])
        for a, b in zip(jax.tree_util.tree_leaves(alone), jax.tree_util.tree_leaves(batched)):
            np.testing.assert_allclose(a, b[s], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("per_pass", [1, 3])
def test_slot_rounds_in_passes_equal_one_vmap(per_pass):
    from jaxfl.algorithms.dprec import dp_rec
    from jaxfl.compression import rec

    data = from_silos(make_silos([30, 12, 25, 40, 33], seed=6))
    kwargs = dict(params=init_linear(5), client_opt=optax.sgd(0.2), participation=with_replacement(4), batch_size=5,
                  prior_std=0.05, clip_multiplier=1.0, layout=rec.BlockLayout((3, 3), (4, 4)))
    outs = []
    for alg in (dp_rec(logistic_loss, **kwargs), dp_rec(logistic_loss, clients_per_pass=per_pass, **kwargs)):
        outs.append(jax.jit(lambda s, alg=alg: run_rounds(alg, s, data, jax.random.PRNGKey(1), 0, 3))(
            alg.init(init_linear(5)))[0])
    np.testing.assert_array_equal(outs[0].indices, outs[1].indices)
    np.testing.assert_array_equal(outs[0].seeds, outs[1].seeds)
    for a, b in zip(jax.tree_util.tree_leaves(outs[0].params), jax.tree_util.tree_leaves(outs[1].params)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
