"""SCAFFOLD (option II): reaches the global optimum of heterogeneous least squares where FedAvg stops at a
biased fixed point; option II equals the paper's formula for SGD; silo state of non-participants is
untouched; the server control variate is the mean of the silos' control variates."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxfl.algorithms import local_sgd, scaffold
from jaxfl.data.federated import from_silos
from jaxfl.engine import SiloState, initial_state, run_rounds
from jaxfl.models import init_linear, squared_loss

SIZES = (30, 12, 50, 20)


def _problem(sizes=SIZES, d=3, seed=0):
    """Silos of different sizes, feature scales, shifts and linear rules; the minimiser of the sum of the
    silos' mean squared losses, in float64 by the normal equations."""
    rng = np.random.default_rng(seed)
    silos, a, r = [], np.zeros((d + 1, d + 1)), np.zeros(d + 1)
    for n in sizes:
        x = (rng.standard_normal((n, d)) * rng.uniform(0.3, 1.5, d) + rng.normal(0, 1, d)).astype(np.float32)
        y = (x @ rng.normal(0, 2, d) + rng.normal(0, 2) + 0.1 * rng.standard_normal(n)).astype(np.float32)
        silos.append((x, y))
        xb = np.c_[x, np.ones(n)].astype(np.float64)
        a += xb.T @ xb / n
        r += xb.T @ y.astype(np.float64) / n
    return from_silos(silos), np.linalg.solve(a, r)


def _flat(params):
    return np.r_[np.asarray(params["w"], np.float64), np.asarray(params["b"], np.float64)[None]]


def _run(alg, data, rounds, key=0):
    state = initial_state(alg, init_linear(data.x.shape[-1]), data.num_silos)
    return jax.jit(lambda s: run_rounds(alg, s, data, jax.random.key(key), 0, rounds))(state)


@pytest.mark.parametrize("client_opt", [optax.sgd(0.05), optax.sgd(0.05, momentum=0.5)], ids=["sgd", "momentum"])
def test_scaffold_reaches_the_global_optimum_where_fedavg_is_biased(client_opt):
    data, optimum = _problem()
    kw = dict(client_opt=client_opt, local_steps=10)
    state, info = _run(scaffold(squared_loss, **kw), data, 300)
    fedavg, fedavg_info = _run(local_sgd(squared_loss, **kw), data, 300)
    scaffold_err = np.max(np.abs(_flat(state.params) - optimum))
    fedavg_err = np.max(np.abs(_flat(fedavg.params) - optimum))
    assert scaffold_err < 1e-4, scaffold_err
    assert fedavg_err > 0.1 > 1000 * scaffold_err, (fedavg_err, scaffold_err)
    # FedAvg has stopped moving: its error is a biased fixed point, not slow progress
    assert float(fedavg_info["update_norm"][-1]) < 1e-4
    assert float(info["participants"][-1]) == len(SIZES)


def test_option_ii_equals_the_papers_formula_for_sgd():
    """With one silo per round and the server's default sgd(1.0), the new model is the participant's
    y_K, so c_i+ = c_i - c + (x - y_K) / (K eta_l) can be checked against the silo state."""
    data, _ = _problem()
    lr, k = 0.05, 7
    alg = scaffold(squared_loss, client_opt=optax.sgd(lr), local_steps=k, participation=1)
    state = initial_state(alg, init_linear(3), data.num_silos)
    step = jax.jit(alg.round)
    seen = set()
    for r in range(6):
        new, _ = step(state, data, jax.random.key(r))
        changed = [i for i in range(len(SIZES)) if not np.array_equal(new.silos["w"][i], state.silos["w"][i])]
        assert len(changed) == 1
        i = changed[0]
        seen.add(i)
        for name in ("w", "b"):
            x, y_k = np.asarray(state.params[name]), np.asarray(new.params[name])
            expected = state.silos[name][i] - state.server.control[name] + (x - y_k) / (k * lr)
            np.testing.assert_allclose(new.silos[name][i], expected, rtol=2e-4, atol=2e-4)
        state = new
    assert np.any(np.asarray(state.server.control["w"]) != 0) and len(seen) > 1


@pytest.mark.parametrize("silos_per_round", [None, 2])
def test_non_participants_keep_their_state_and_c_is_the_mean_of_the_c_i(silos_per_round):
    data, _ = _problem()
    alg = scaffold(squared_loss, client_opt=optax.sgd(0.05), local_steps=5, batch_size=8,
                   participation=silos_per_round)
    state = initial_state(alg, init_linear(3), data.num_silos)
    assert isinstance(state, SiloState) and state.silos["w"].shape == (len(SIZES), 3)
    assert all(not np.any(leaf) for leaf in jax.tree_util.tree_leaves((state.silos, state.server.control)))
    step = jax.jit(alg.round)
    for r in range(5):
        new, info = step(state, data, jax.random.key(r))
        changed = np.array([not all(np.array_equal(a[i], b[i]) for a, b in
                                    zip(jax.tree_util.tree_leaves(new.silos), jax.tree_util.tree_leaves(state.silos)))
                            for i in range(len(SIZES))])
        assert changed.sum() == float(info["participants"]) == (silos_per_round or len(SIZES))
        for a, b in zip(jax.tree_util.tree_leaves(new.silos), jax.tree_util.tree_leaves(state.silos)):
            np.testing.assert_array_equal(np.asarray(a)[~changed], np.asarray(b)[~changed])
        for name in ("w", "b"):  # the SCAFFOLD invariant c = (1/N) sum_i c_i
            np.testing.assert_allclose(new.server.control[name], np.mean(np.asarray(new.silos[name]), axis=0),
                                       rtol=1e-5, atol=1e-6)
        state = new
    assert np.all(np.isfinite(_flat(state.params)))


def test_scaffold_is_non_private_and_rejects_bad_steps():
    alg = scaffold(squared_loss, client_opt=optax.sgd(0.1), local_steps=2)
    assert alg.privacy is None and alg.name == "scaffold" and alg.init_silos is not None
    with pytest.raises(ValueError, match="local_steps"):
        scaffold(squared_loss, client_opt=optax.sgd(0.1), local_steps=0)
    # a deterministic function of the key: same key, same state
    data, _ = _problem()
    a, _ = _run(alg, data, 3, key=4)
    b, _ = _run(alg, data, 3, key=4)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(x, y)
    assert jnp.asarray(a.server.round) == 3
