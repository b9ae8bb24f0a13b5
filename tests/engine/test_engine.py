"""The driver: budget stop, checkpoints and resume, metrics, sharding, sweeps, participation."""
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from jaxfl.accounting import SiloLedger, epsilon_for
from jaxfl.algorithms import local_sgd, minibatch_sgd
from jaxfl.data.federated import from_silos
from jaxfl.engine import participation, sweep, train
from jaxfl.engine.metrics import read_metrics
from jaxfl.models import binary_accuracy, init_linear, logistic_loss
from jaxfl.engine.participation import poisson
from _helpers import cpu_devices_flags, make_silos

REPO = Path(__file__).resolve().parents[2]


def _dp_sgd(z=1.0, q=0.2, lr=0.5):
    return minibatch_sgd(logistic_loss, server_opt=optax.sgd(lr), sampling_rate=q, expected_batch_size=q * 20,
                         clip_norm=1.0, noise_multiplier=z)


def _leaves_equal(a, b):
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in
               zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


@pytest.mark.slow
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(target=st.floats(0.3, 6.0), z=st.floats(0.6, 3.0), eval_every=st.integers(1, 7))
def test_budget_stop_never_overshoots(small_data, target, z, eval_every):
    alg = _dp_sgd(z=z)
    delta = 1e-5
    result = train(alg, small_data, init_linear(5), rounds=40, key=1, eval_every=eval_every,
                   target_epsilon=target, delta=delta, progress=False)
    spent = epsilon_for(z, 0.2, result.rounds, delta) if result.rounds else 0.0
    assert result.epsilon is None or result.epsilon <= target + 1e-9
    assert spent <= target + 1e-9
    if result.stop_reason == "budget":
        assert result.rounds < 40
        assert epsilon_for(z, 0.2, result.rounds + 1, delta) > target
    else:
        assert result.rounds == 40
    for record in result.history:
        assert record["epsilon"] <= target + 1e-9


def test_per_silo_epsilons_differ_with_silo_size():
    data = from_silos([(np.ones((n, 2), np.float32), np.zeros(n, np.int32)) for n in (20, 200)])
    alg = minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.1), batch_size=5, clip_norm=1.0, noise_multiplier=2.0)
    privacy = alg.privacy(np.asarray(data.counts))
    assert privacy.level == "record" and len(privacy.events) == 2
    assert privacy.events[0].source_dataset_size == 20 and privacy.events[1].source_dataset_size == 200
    poisson_alg = minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.1), sampling_rate=0.1, expected_batch_size=2.0,
                                clip_norm=1.0,
                                noise_multiplier=2.0)
    ledger = SiloLedger(list(poisson_alg.privacy(np.array([20, 200])).events))
    ledger.record(10)
    eps = ledger.epsilons(np.array([1 / 20**2, 1 / 200**2]))
    assert eps[0] < eps[1]  # same rate, larger silo has smaller delta_i = 1/n_i^2 and so larger epsilon


def test_train_with_per_silo_delta_reports_per_silo_epsilons():
    data = from_silos(make_silos([60, 15, 30]))
    counts = np.asarray(data.counts)
    result = train(_dp_sgd(z=1.5), data, init_linear(5), rounds=12, key=np.int64(2), delta=1.0 / counts**2,
                   target_epsilon=50.0, progress=False)
    assert result.rounds == 12 and result.epsilons.shape == (3,)
    # Same sampling rate and noise for every silo: the smaller delta_i = 1/n_i^2 costs more epsilon.
    assert result.epsilons[0] > result.epsilons[2] > result.epsilons[1]
    assert result.epsilon == result.epsilons.max()
    with pytest.raises(ValueError, match="per-silo delta"):
        train(_dp_sgd(), data, init_linear(5), rounds=2, delta=[1e-5, 1e-5], progress=False)


@pytest.mark.slow
def test_resume_after_kill_equals_unbroken_run(tmp_path, small_data):
    alg = _dp_sgd(z=1.2)
    test_x = small_data.x.reshape(-1, 5)
    test_y = small_data.y.reshape(-1)
    evaluate = lambda p: {"acc": binary_accuracy(p, test_x, test_y)}
    kw = dict(rounds=10, key=3, eval_every=2, delta=1e-5, progress=False)
    unbroken = train(alg, small_data, init_linear(5), eval_fn=evaluate, **kw)

    calls = {"n": 0}

    def dying_eval(p):
        calls["n"] += 1
        if calls["n"] == 3:  # the process "dies" during the evaluation after round 6
            raise KeyboardInterrupt
        return evaluate(p)

    metrics, ckpt = tmp_path / "metrics.jsonl", tmp_path / "ckpt"
    with pytest.raises(KeyboardInterrupt):
        train(alg, small_data, init_linear(5), eval_fn=dying_eval, metrics_path=metrics, checkpoint_dir=ckpt, **kw)
    kept = read_metrics(metrics)
    assert [r["round"] for r in kept] == [2, 4]  # everything reported before the kill survives
    assert sorted(int(p.name) for p in ckpt.iterdir() if p.name.isdigit()) == [2, 4]

    resumed = train(alg, small_data, init_linear(5), eval_fn=evaluate, metrics_path=metrics, checkpoint_dir=ckpt, **kw)
    assert resumed.rounds == 10
    assert _leaves_equal(resumed.state, unbroken.state)
    assert resumed.epsilon == pytest.approx(unbroken.epsilon, rel=1e-12)
    assert [r["round"] for r in read_metrics(metrics)] == [2, 4, 6, 8, 10]
    assert read_metrics(metrics)[-1]["acc"] == pytest.approx(unbroken.history[-1]["acc"])
    with pytest.raises(ValueError, match="belongs to another run"):
        train(alg, small_data, init_linear(5), checkpoint_dir=ckpt, **{**kw, "key": 4})


@pytest.mark.slow
def test_resumed_run_counts_seconds_from_round_zero(tmp_path, small_data, monkeypatch):
    """``wall_seconds`` of a resumed run continues the killed sitting's count (a clock that ticks 1 s per
    reading makes it exact)."""
    from jaxfl.engine import callbacks, driver
    ticks = iter(range(1000))
    clock = type("Clock", (), {"perf_counter": staticmethod(lambda: float(next(ticks)))})
    monkeypatch.setattr(driver, "time", clock)      # the sitting's start
    monkeypatch.setattr(callbacks, "time", clock)   # each record's stamp
    kw = dict(rounds=6, key=3, eval_every=2, progress=False, metrics_path=tmp_path / "m.jsonl",
              checkpoint_dir=tmp_path / "ckpt")
    train(_dp_sgd(), small_data, init_linear(5), **{**kw, "rounds": 4})   # readings 0 (start), 1, 2
    train(_dp_sgd(), small_data, init_linear(5), **kw)                    # readings 3 (start), 4
    assert [r["wall_seconds"] for r in read_metrics(tmp_path / "m.jsonl")] == [1.0, 2.0, 3.0]


@pytest.mark.slow
def test_chunking_does_not_change_results(small_data):
    alg = local_sgd(logistic_loss, client_opt=optax.sgd(0.1), local_steps=3, batch_size=4, clip_norm=1.0,
                    noise_multiplier=0.8, participation=3)
    a = train(alg, small_data, init_linear(5), rounds=9, key=0, eval_every=9, progress=False)
    b = train(alg, small_data, init_linear(5), rounds=9, key=0, eval_every=2, progress=False)
    assert _leaves_equal(a.state, b.state)


@pytest.mark.slow  # a 4-device subprocess, ~20-40 s: second tier
def test_bitwise_identical_on_one_and_four_devices():
    script = textwrap.dedent("""
        import jax, jax.numpy as jnp, numpy as np, optax
        from _helpers import make_silos
        from jaxfl.algorithms import accelerated, dp_fedavg, local_sgd, minibatch_sgd
        from jaxfl.data.federated import from_silos
        from jaxfl.engine import sharding, train
        from jaxfl.engine.participation import poisson
        from jaxfl.models import init_linear, logistic_loss
        assert jax.device_count() == 4, jax.devices()
        data = from_silos(make_silos([30, 12, 25, 40, 33, 17, 28], seed=4))  # 7 silos: padded to 8 on 4 devices
        algs = [minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.5), batch_size=8, clip_norm=1.0,
                              noise_multiplier=1.1, participation=5),
                minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.5), batch_size=8, clip_norm=1.0,
                              noise_multiplier=np.linspace(0.5, 2.0, 7)),  # per-silo z: padded silo reuses the last
                local_sgd(logistic_loss, client_opt=optax.sgd(0.2), local_steps=4, sampling_rate=0.3, clip_norm=0.5,
                          noise_multiplier=0.9),
                dp_fedavg(logistic_loss, client_opt=optax.sgd(0.2), local_steps=3, batch_size=5,
                          participation=poisson(0.5),
                          expected_clients=3.5, clip_norm=0.3, noise_multiplier=1.0),
                accelerated.accelerated_minibatch_sgd(
                    logistic_loss, batch_size=2, clip_norm=1.0, noise_multiplier=0.7,
                    schedule=accelerated.acsa_schedule(6, smoothness=1.0, noise_std=0.5, radius=2.0))]
        for alg in algs:
            outs = []
            for mesh in [None, sharding.silo_mesh(jax.devices()[:1]), sharding.silo_mesh(jax.devices())]:
                res = train(alg, data, init_linear(5), rounds=6, key=7, eval_every=3, mesh=mesh, progress=False)
                outs.append(np.concatenate([np.ravel(l) for l in jax.tree_util.tree_leaves(res.state.params)]))
            if alg.name == "dp_local_sgd" and jax.__version_info__ >= (0, 11):
                # JAX 0.12's XLA:CPU rounds the local steps of 8 and of 2 silos per device apart in the last
                # bits (README, sharp edges); JAX 0.10's computes them alike
                assert all(np.allclose(outs[0], o, rtol=1e-6, atol=1e-7) for o in outs[1:]), (alg.name, outs)
            else:
                assert all(np.array_equal(outs[0], o) for o in outs[1:]), (alg.name, outs)
            assert np.any(outs[0] != 0)
        print("BITWISE-OK")
    """)
    env = dict(os.environ, XLA_FLAGS=cpu_devices_flags(4),
               PYTHONPATH=os.pathsep.join([str(REPO / "tests"), str(REPO)]))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert "BITWISE-OK" in out.stdout, out.stderr[-3000:]


@pytest.mark.slow  # an 8-device subprocess: second tier
def test_bitwise_identical_with_fewer_silos_than_two_per_device():
    """7 silos on 8 devices: padded to two silos per device (one per device compiled differently)."""
    script = textwrap.dedent("""
        import jax, numpy as np, optax
        from _helpers import make_silos
        from jaxfl.algorithms import minibatch_sgd
        from jaxfl.data.federated import from_silos
        from jaxfl.engine import sharding, train
        from jaxfl.models import init_linear, logistic_loss
        data = from_silos(make_silos([30, 12, 25, 40, 33, 17, 28], seed=4))
        mesh = sharding.silo_mesh(jax.devices())
        assert sharding.shard_data(data, mesh).num_silos == 16
        alg = minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.5), batch_size=8, clip_norm=1.0, noise_multiplier=1.1)
        outs = [np.ravel(train(alg, data, init_linear(5), rounds=6, key=7, mesh=m, progress=False).state.params["w"])
                for m in (None, mesh)]
        assert np.array_equal(outs[0], outs[1]), outs
        print("BITWISE-OK")
    """)
    env = dict(os.environ, XLA_FLAGS=cpu_devices_flags(8),
               PYTHONPATH=os.pathsep.join([str(REPO / "tests"), str(REPO)]))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert "BITWISE-OK" in out.stdout, out.stderr[-3000:]


@pytest.mark.slow
def test_per_silo_noise_multipliers():
    data = from_silos(make_silos([30, 12, 25], seed=2))
    build = lambda z: minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.5), batch_size=8, clip_norm=1.0,
                                    noise_multiplier=z)
    run = lambda alg: train(alg, data, init_linear(5), rounds=3, key=5, progress=False).state.params
    same = lambda a, b: np.allclose(a["w"], b["w"], rtol=0, atol=1e-6)
    assert same(run(build(1.3)), run(build(np.full(3, 1.3))))  # same draws, same result (up to f32 rounding)
    assert not same(run(build(1.3)), run(build(np.array([1.3, 1.3, 2.6]))))
    clean = run(minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.5), batch_size=8, clip_norm=1.0))
    assert _leaves_equal(run(build(np.array([0.0, 0.0, 0.0]))), clean)
    events = build(np.array([0.5, 1.0, 2.0])).privacy(np.array([30, 0, 25])).events
    assert [e.event.noise_multiplier for e in events] == [0.5, 2.0]  # silos with records only, in order
    with pytest.raises(ValueError, match="noise_multiplier"):
        build(np.array([1.0, -1.0, 1.0]))


@pytest.mark.slow
def test_sweep_equals_individual_runs(small_data):
    build = lambda lr, z: minibatch_sgd(logistic_loss, server_opt=optax.sgd(lr), batch_size=6, clip_norm=1.0,
                                        noise_multiplier=z)
    grid = {"lr": [0.1, 0.5], "z": [0.5, 2.0]}
    out = sweep(build, grid, small_data, init_linear(5), rounds=5, seeds=[0, 3])
    assert out.params["w"].shape == (4, 2, 5)
    for i, cfg in enumerate(out.configs):
        for j, seed in enumerate([0, 3]):
            single = train(build(**cfg), small_data, init_linear(5), rounds=5, key=seed, progress=False)
            np.testing.assert_allclose(out.params["w"][i, j], single.state.params["w"], rtol=1e-5, atol=1e-6)


def test_uniform_participation_picks_m_real_silos():
    counts = jnp.asarray([10, 0, 5, 7, 3, 0, 9], jnp.int32)
    pick = jax.jit(participation.uniform(3).weights)  # compiled once: 200 eager draws dispatch op by op
    seen = np.zeros(7)
    for r in range(200):
        w = np.asarray(pick(jax.random.fold_in(jax.random.key(0), r), counts))
        assert w.sum() == 3 and w[1] == 0 and w[5] == 0
        seen += w
    assert np.all(seen[[0, 2, 3, 4, 6]] > 80)  # each of the 5 real silos ~ 120 times


def test_train_rejects_bad_privacy_input(small_data):
    alg = _dp_sgd()
    for kwargs, match in [(dict(target_epsilon=0.0, delta=1e-5), "target_epsilon"),
                          (dict(target_epsilon=-1.0, delta=1e-5), "target_epsilon"),
                          (dict(target_epsilon=1.0, delta=1.5), "delta"),
                          (dict(target_epsilon=1.0, delta=0.0), "delta"),
                          (dict(target_epsilon=1.0), "delta")]:
        with pytest.raises(ValueError, match=match):
            train(alg, small_data, init_linear(5), rounds=2, progress=False, **kwargs)
    nonprivate = minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.1), batch_size=4)
    with pytest.raises(ValueError, match="not private"):
        train(nonprivate, small_data, init_linear(5), rounds=2, target_epsilon=1.0, delta=1e-5, progress=False)


def test_metrics_file_has_one_record_per_evaluation(tmp_path, small_data):
    path, seen = tmp_path / "m.jsonl", []
    train(_dp_sgd(), small_data, init_linear(5), rounds=7, eval_every=3, delta=1e-5, metrics_path=path,
          run_info={"seed": 0}, progress=False, on_record=lambda r: seen.append(read_metrics(path)[-1] == r))
    rows = read_metrics(path)
    assert [r["round"] for r in rows] == [3, 6, 7]
    assert seen == [True, True, True]   # on_record gets each record once it is written
    assert all({"epsilon", "seed", "participants", "clipped_fraction", "wall_seconds"} <= set(r) for r in rows)
    assert rows[0]["epsilon"] < rows[1]["epsilon"] < rows[2]["epsilon"]
    json.dumps(rows)


@pytest.mark.slow
def test_sigkill_mid_run_keeps_metrics_and_checkpoint(tmp_path):
    """A real kill -9 during training: every metrics line written so far parses, the last checkpoint
    restores, and a resumed run finishes with the same model as an unbroken one."""
    script = textwrap.dedent(f"""
        import time, optax
        from _helpers import make_silos
        from jaxfl.algorithms import minibatch_sgd
        from jaxfl.data.federated import from_silos
        from jaxfl.engine import train
        from jaxfl.models import init_linear, logistic_loss
        data = from_silos(make_silos([40, 25, 33, 40, 18]))
        alg = minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.5), sampling_rate=0.2, expected_batch_size=4.0,
                            clip_norm=1.0,
                            noise_multiplier=1.0)
        def slow_eval(p):
            time.sleep(0.4)
            return {{"w0": float(p["w"][0])}}
        train(alg, data, init_linear(5), rounds=40, key=5, eval_every=2, eval_fn=slow_eval, delta=1e-5,
              metrics_path={str(tmp_path / "m.jsonl")!r}, checkpoint_dir={str(tmp_path / "ckpt")!r}, progress=False)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "tests"), str(REPO)]))
    proc = subprocess.Popen([sys.executable, "-c", script], env=env)
    metrics = tmp_path / "m.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (not metrics.exists() or len(metrics.read_text().splitlines()) < 4):
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    rows = read_metrics(metrics)  # every line written before the kill is complete JSON
    assert len(rows) >= 4 and rows[-1]["round"] < 40
    from jaxfl.engine.checkpoint import Checkpointer
    ckpt = Checkpointer(tmp_path / "ckpt")
    last = ckpt.latest_step()
    ckpt.close()
    assert last is not None and last >= rows[-2]["round"]

    alg = _dp_sgd(z=1.0)
    data = from_silos(make_silos([40, 25, 33, 40, 18]))
    kw = dict(rounds=40, key=5, eval_every=2, delta=1e-5, progress=False)
    resumed = train(alg, data, init_linear(5), metrics_path=metrics, checkpoint_dir=tmp_path / "ckpt", **kw)
    unbroken = train(alg, data, init_linear(5), **kw)
    assert _leaves_equal(resumed.state, unbroken.state)
    assert [r["round"] for r in read_metrics(metrics)] == list(range(2, 41, 2))


def test_projection_keeps_the_model_in_the_constraint_set(small_data):
    radius = 0.05
    alg = minibatch_sgd(logistic_loss, server_opt=optax.sgd(2.0), batch_size=8,
                        projection=lambda p: optax.projections.projection_l2_ball(p, radius))
    free = minibatch_sgd(logistic_loss, server_opt=optax.sgd(2.0), batch_size=8)
    projected = train(alg, small_data, init_linear(5), rounds=6, eval_every=1, progress=False,
                      eval_fn=lambda p: {"norm": optax.tree.norm(p)})
    unconstrained = train(free, small_data, init_linear(5), rounds=6, progress=False)
    assert all(r["norm"] <= radius * (1 + 1e-6) for r in projected.history)
    assert float(optax.tree.norm(unconstrained.state.params)) > radius


def test_with_replacement_minibatches_are_accounted_by_the_theorem_calculus(small_data):
    from jaxfl.accounting import sgd_noise

    n_min, rounds, eps, delta = int(np.min(np.asarray(small_data.counts))), 20, 4.0, 1e-5
    K = sgd_noise.min_batch_theorem(n_min, rounds, eps, delta)
    z = sgd_noise.noise_multiplier_from_sigma(sgd_noise.sigma_theorem(1.0, n_min, rounds, eps, delta), clip_norm=1.0,
                                              batch_size=K)
    alg = minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.5), batch_size=K, clip_norm=1.0, noise_multiplier=z)
    with pytest.raises(Exception, match="cannot account"):
        train(alg, small_data, init_linear(5), rounds=2, delta=delta, progress=False)  # RDP has no such event
    done = train(alg, small_data, init_linear(5), rounds=rounds, accountant="lowy", target_epsilon=eps, delta=delta,
                 eval_every=5, progress=False)
    assert done.stop_reason == "completed" and done.epsilon <= eps  # the smallest silo is the theorem's n
    assert np.argmax(done.epsilons) == int(np.argmin(np.asarray(small_data.counts)))
    stopped = train(alg, small_data, init_linear(5), rounds=4 * rounds, accountant="lowy", target_epsilon=eps,
                    delta=delta, eval_every=7, progress=False)
    assert stopped.stop_reason == "budget" and rounds <= stopped.rounds < 4 * rounds and stopped.epsilon <= eps
