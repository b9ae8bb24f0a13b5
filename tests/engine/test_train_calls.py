"""train's calls of the compiled rounds: rounds_per_call splits them without changing a bit, the progress callback
sees every round once and in order, and dp_sgd is minibatch_sgd on one silo, stated add/remove-one."""
import dp_accounting
import jax
import numpy as np
import optax
import pytest
from _helpers import make_silos

import jaxfl
from jaxfl.algorithms import minibatch_sgd
from jaxfl.data.federated import from_silos
from jaxfl.engine import run_rounds
from jaxfl.models.linear import init_linear, logistic_loss


def _algorithm():
    return minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.5), sampling_rate=0.3, expected_batch_size=6.0,
                         clip_norm=1.0, noise_multiplier=1.1)


def test_rounds_per_call_gives_the_same_rounds_bitwise():
    data = from_silos(make_silos([20, 30, 25], seed=1))
    runs = [jaxfl.train(_algorithm(), data, init_linear(5), rounds=7, key=3, delta=1e-5, progress=False, **kw)
            for kw in ({}, {"rounds_per_call": 3})]
    for a, b in zip(jax.tree_util.tree_leaves(runs[0].params), jax.tree_util.tree_leaves(runs[1].params)):
        np.testing.assert_array_equal(a, b)
    assert runs[0].epsilon == runs[1].epsilon and runs[1].rounds == 7
    with pytest.raises(ValueError, match="rounds_per_call"):
        jaxfl.train(_algorithm(), data, init_linear(5), rounds=2, rounds_per_call=0, progress=False)


def test_the_progress_callback_sees_every_round_once():
    data = from_silos(make_silos([20, 30], seed=2))
    seen = []
    algorithm = _algorithm()
    state, _ = jax.jit(lambda s: run_rounds(algorithm, s, data, jax.random.key(0), 4, 5,
                                            on_round=lambda r: seen.append(int(r))))(algorithm.init(init_linear(5)))
    jax.block_until_ready(state)
    jax.effects_barrier()
    assert sorted(seen) == [4, 5, 6, 7, 8]


def test_dp_sgd_is_minibatch_sgd_on_one_silo_stated_add_remove_one():
    x, y = make_silos([200], seed=3)[0]
    data = from_silos([(x, y)])
    algorithm = jaxfl.dp_sgd(logistic_loss, optimizer=optax.sgd(0.5), expected_batch_size=20, num_records=200,
                             clip_norm=1.0, noise_multiplier=1.2)
    same = minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.5), sampling_rate=0.1, expected_batch_size=20,
                         clip_norm=1.0, noise_multiplier=1.2)
    runs = [jaxfl.train(a, data, init_linear(5), rounds=5, key=0, delta=1e-5, progress=False)
            for a in (algorithm, same)]
    for a, b in zip(jax.tree_util.tree_leaves(runs[0].params), jax.tree_util.tree_leaves(runs[1].params)):
        np.testing.assert_array_equal(a, b)
    assert algorithm.privacy(np.array([200])).relation is dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    # the oracle: dp_accounting's RDP accountant on the same five Poisson-subsampled Gaussian steps
    rdp = dp_accounting.rdp.RdpAccountant()
    rdp.compose(dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(1.2)), 5)
    assert runs[0].epsilon == pytest.approx(rdp.get_epsilon(1e-5), rel=1e-6)
    for bad in ({"expected_batch_size": 300}, {"num_records": 0}, {"expected_batch_size": -1}):
        with pytest.raises(ValueError):
            jaxfl.dp_sgd(logistic_loss, **{"optimizer": optax.sgd(0.5), "expected_batch_size": 20, "num_records": 200,
                                           "clip_norm": 1.0, "noise_multiplier": 1.2, **bad})
