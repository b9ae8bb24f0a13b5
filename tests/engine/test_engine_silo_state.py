"""Engine 2: per-silo state (created by init_silos, read and written only by its silo, sharded, checkpointed)
and per-silo evaluation."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from _helpers import cpu_devices_flags
from jaxfl.algorithms.common import init_server, mean_server, sampled_silo_privacy
from jaxfl.engine import FederatedAlgorithm, SiloState, initial_state, local, run_rounds, train
from jaxfl.engine.participation import resolve
from jaxfl.engine.metrics import read_metrics
from jaxfl.engine.rounds import make_round
from jaxfl.models import init_linear, logistic_loss

REPO = Path(__file__).resolve().parents[2]


def momentum_sgd(participation=None, clients_per_pass=None, z=1.0, beta=0.9):
    """ISRL-DP minibatch SGD whose silos keep a momentum of their own noisy gradients across rounds (the
    momentum is post-processing of the silo's own transcript) and count the rounds they took part in."""
    sampler = local.make_sampler(sampling_rate=0.3, expected_batch_size=9.0)
    seen = {}

    def client(params, x, y, count, key, *, silo_state):
        g, info = local.noisy_gradient(logistic_loss, params, x, y, count, key, 0, sampler=sampler, clip_norm=1.0,
                                       noise_multiplier=z)
        momentum = jax.tree_util.tree_map(lambda m, gi: beta * m + gi, silo_state["momentum"], g)
        return momentum, info, {"momentum": momentum, "rounds": silo_state["rounds"] + 1}

    def server(state, summed, ctx):
        seen["server_state"] = type(state)  # recorded at trace time: the server never gets the silo state
        return mean_server(optax.sgd(0.3))(state, summed, ctx)

    def init_silos(params, num_silos):
        zeros = jax.tree_util.tree_map(lambda p: jnp.zeros((num_silos,) + jnp.shape(p), jnp.float32), params)
        return {"momentum": zeros, "rounds": jnp.zeros(num_silos, jnp.int32)}

    algorithm = FederatedAlgorithm(
        init=init_server(optax.sgd(0.3)),
        round=make_round(client, server, resolve(participation), silo_state=True,
                         clients_per_pass=clients_per_pass),
        privacy=sampled_silo_privacy(sampler, z), name="momentum_sgd", init_silos=init_silos)
    return algorithm, seen


def _tree_equal(a, b):
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in
               zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True))


def test_only_participants_change_their_silo_state_and_the_server_never_sees_it(small_data):
    alg, seen = momentum_sgd(participation=2)
    state = initial_state(alg, init_linear(5), small_data.num_silos)
    assert isinstance(state, SiloState) and state.silos["rounds"].shape == (5,)
    before = state
    for r in range(4):
        after, info = jax.jit(alg.round)(before, small_data, jax.random.key(r))
        changed = np.asarray(after.silos["rounds"] != before.silos["rounds"])
        assert changed.sum() == 2 == float(info["participants"])
        for leaf_after, leaf_before in zip(jax.tree_util.tree_leaves(after.silos["momentum"]),
                                           jax.tree_util.tree_leaves(before.silos["momentum"])):
            np.testing.assert_array_equal(np.asarray(leaf_after)[~changed], np.asarray(leaf_before)[~changed])
            assert np.all(np.any(np.asarray(leaf_after - leaf_before).reshape(5, -1)[changed] != 0, axis=1))
        before = after
    assert seen["server_state"] is not SiloState
    assert int(before.silos["rounds"].sum()) == 8


@pytest.mark.parametrize("per_pass", [1, 2])
def test_silo_state_with_clients_per_pass_equals_one_vmap(small_data, per_pass):
    full, _ = momentum_sgd(participation=3)
    passes, _ = momentum_sgd(participation=3, clients_per_pass=per_pass)
    params = init_linear(5)
    run = lambda alg: jax.jit(lambda s: run_rounds(alg, s, small_data, jax.random.key(1), 0, 5))(
        initial_state(alg, params, small_data.num_silos))
    (a, info_a), (b, info_b) = run(full), run(passes)
    np.testing.assert_array_equal(a.silos["rounds"], b.silos["rounds"])
    for x, y in zip(jax.tree_util.tree_leaves((a, info_a)), jax.tree_util.tree_leaves((b, info_b))):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_resume_with_silo_state_equals_unbroken_run(tmp_path, small_data):
    alg, _ = momentum_sgd(participation=3)
    kw = dict(rounds=8, key=5, eval_every=2, delta=1e-5, progress=False)
    unbroken = train(alg, small_data, init_linear(5), **kw)

    calls = {"n": 0}

    def dying_eval(p):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return {}

    ckpt = tmp_path / "ckpt"
    with pytest.raises(KeyboardInterrupt):
        train(alg, small_data, init_linear(5), eval_fn=dying_eval, checkpoint_dir=ckpt, **kw)
    resumed = train(alg, small_data, init_linear(5), checkpoint_dir=ckpt, **kw)
    assert resumed.rounds == 8
    assert _tree_equal(resumed.state, unbroken.state)
    assert int(np.sum(resumed.state.silos["rounds"])) == 8 * 3


def test_silo_eval_reports_one_value_per_silo(tmp_path, small_data):
    alg, _ = momentum_sgd()
    x, y = small_data.x, small_data.y
    real = np.arange(small_data.x.shape[1])[None, :] < np.asarray(small_data.counts)[:, None]

    def silo_eval(params, silo):  # accuracy on the silo's own real records
        correct = (x[silo] @ params["w"] + params["b"] > 0) == (y[silo] == 1)
        return {"acc": jnp.sum(jnp.asarray(real)[silo] * correct) / small_data.counts[silo]}

    result = train(alg, small_data, init_linear(5), rounds=4, key=0, eval_every=2, progress=False,
                   silo_eval_fn=silo_eval, metrics_path=tmp_path / "m.jsonl")
    record = read_metrics(tmp_path / "m.jsonl")[-1]
    assert list(record["silos"]) == ["acc"] and len(record["silos"]["acc"]) == small_data.num_silos
    params = result.state.params
    for i in range(small_data.num_silos):
        n = int(small_data.counts[i])
        expected = np.mean((np.asarray(x[i, :n]) @ np.asarray(params["w"]) + float(params["b"]) > 0)
                           == (np.asarray(y[i, :n]) == 1))
        assert record["silos"]["acc"][i] == pytest.approx(expected, abs=1e-6)


@pytest.mark.slow  # a 4-device subprocess, ~20-40 s: second tier
def test_silo_state_bitwise_identical_on_one_and_four_devices():
    """Stateful silos (momentum, SCAFFOLD's control variates, personalised heads with ISRL-DP noise), with
    and without clients_per_pass, every silo or participants only: the same model, silo state and per-silo
    metrics on no mesh, 1 and 4 devices."""
    script = textwrap.dedent("""
        import jax, numpy as np, optax
        from _helpers import make_silos
        from test_engine_silo_state import momentum_sgd
        from jaxfl.algorithms import personalized, scaffold
        from jaxfl.data.federated import from_silos
        from jaxfl.engine import sharding, train
        from jaxfl.models import init_linear, logistic_loss
        assert jax.device_count() == 4, jax.devices()
        data = from_silos(make_silos([30, 12, 25, 40, 33, 17, 28], seed=4))  # 7 silos: padded to 8 on 4 devices
        algs = [momentum_sgd(participation=4, clients_per_pass=per_pass)[0] for per_pass in (None, 2)] + [
            scaffold(logistic_loss, client_opt=optax.sgd(0.2), local_steps=3, batch_size=6, participation=4),
            personalized(logistic_loss, shared={"w": "shared", "b": "private"}, client_opt=optax.sgd(0.2),
                         local_steps=3, sampling_rate=0.4, clip_norm=1.0, noise_multiplier=1.0, participation=5)]
        # 20 silos, 3 per round: participants only (3 slots, 8 = two per device on 4 devices)
        many = from_silos(make_silos([12, 20, 15, 9, 18] * 4, seed=5))
        few = [momentum_sgd(participation=3)[0],
               scaffold(logistic_loss, client_opt=optax.sgd(0.2), local_steps=3, batch_size=6, participation=3),
               personalized(logistic_loss, shared={"w": "shared", "b": "private"}, client_opt=optax.sgd(0.2),
                            local_steps=3, sampling_rate=0.4, clip_norm=1.0, noise_multiplier=1.0, participation=3)]
        for data, alg in [(data, a) for a in algs] + [(many, a) for a in few]:
            outs = []
            num = data.num_silos
            for mesh in [None, sharding.silo_mesh(jax.devices()[:1]), sharding.silo_mesh(jax.devices())]:
                res = train(alg, data, init_linear(5), rounds=6, key=7, eval_every=3, mesh=mesh, progress=False,
                            silo_eval_fn=lambda p, i: {"w0": p["w"][0] + i})
                if mesh is not None and mesh.size == 4:
                    spec = jax.tree_util.tree_leaves(res.state.silos)[0].sharding.spec
                    assert tuple(spec)[:1] == ("silos",), spec
                silos = jax.tree_util.tree_map(lambda a: np.asarray(a)[:num], res.state.silos)
                outs.append(np.concatenate([np.ravel(l) for l in jax.tree_util.tree_leaves((res.state.params, silos))]
                                           + [np.asarray(res.history[-1]["silos"]["w0"])]))
            assert all(np.array_equal(outs[0], o) for o in outs[1:]), (alg.name, num, outs)
            assert len(res.history[-1]["silos"]["w0"]) == num
        print("BITWISE-OK")
    """)
    paths = [REPO / "tests", REPO / "tests" / "engine", REPO]
    env = dict(os.environ, XLA_FLAGS=cpu_devices_flags(4),
               PYTHONPATH=os.pathsep.join(str(p) for p in paths))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert "BITWISE-OK" in out.stdout, out.stderr[-3000:]


def test_silo_state_client_must_return_its_new_state(small_data):
    def client(params, x, y, count, key, *, silo_state):
        return params, {}

    alg = FederatedAlgorithm(init=init_server(optax.sgd(0.1)),
                             round=make_round(client, mean_server(optax.sgd(0.1)), resolve(None),
                                              silo_state=True),
                             init_silos=lambda params, n: {"c": jnp.zeros((n,))})
    with pytest.raises(ValueError, match="new_silo_state"):
        run_rounds(alg, initial_state(alg, init_linear(5), small_data.num_silos), small_data, jax.random.key(0), 0, 1)


@pytest.mark.slow
def test_sweep_runs_algorithms_with_silo_state_and_schedules(small_data):
    """sweep builds each configuration's SiloState and feeds a schedule through its scan."""
    from jaxfl.algorithms import minibatch_sgd, scaffold
    from jaxfl.engine import PerRound, sweep

    build = lambda lr: scaffold(logistic_loss, client_opt=optax.sgd(lr), local_steps=3, batch_size=6,  # noqa: E731
                                participation=3)
    out = sweep(build, {"lr": [0.1, 0.3]}, small_data, init_linear(5), rounds=4, seeds=[0, 2])
    for i, lr in enumerate([0.1, 0.3]):
        for j, seed in enumerate([0, 2]):
            single = train(build(lr), small_data, init_linear(5), rounds=4, key=seed, progress=False)
            np.testing.assert_allclose(out.params["w"][i, j], single.state.params["w"], rtol=1e-5, atol=1e-6)
    rates = PerRound(np.linspace(0.2, 0.9, 6))
    grow = lambda lr: minibatch_sgd(logistic_loss, server_opt=optax.sgd(lr), sampling_rate=rates)  # noqa: E731
    out = sweep(grow, {"lr": [0.5]}, small_data, init_linear(5), rounds=6, seeds=[1])
    single = train(grow(0.5), small_data, init_linear(5), rounds=6, key=1, eval_every=4, progress=False)
    np.testing.assert_allclose(out.params["w"][0, 0], single.state.params["w"], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="runs past the schedule"):
        sweep(grow, {"lr": [0.5]}, small_data, init_linear(5), rounds=7)
