"""engine.sweep: the data as an argument of one cached program, every configuration accounted, checkpointed
segments."""
import functools
import importlib
import pickle
import re

import chex
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxfl.algorithms import minibatch_sgd
from jaxfl.data.federated import from_silos
from jaxfl.engine import make_ledger, sweep, train
from jaxfl.models import binary_accuracy, init_linear, logistic_loss
from _helpers import Killed, make_silos, watch_checkpoint_writes


def _build(lr, z):
    return minibatch_sgd(logistic_loss, server_opt=optax.sgd(lr), sampling_rate=0.3, expected_batch_size=6.0,
                         clip_norm=1.0,
                         noise_multiplier=z)


@pytest.mark.slow
def test_every_configuration_is_accounted_by_its_own_ledger(small_data):
    grid = {"lr": [0.1, 0.5], "z": [0.0, 0.8, 2.0]}
    deltas = 1.0 / np.asarray(small_data.counts, float) ** 2
    out = sweep(_build, grid, small_data, init_linear(5), rounds=6, seeds=[0], delta=deltas)
    assert out.epsilons.shape == (6,)
    for config, epsilon in zip(out.configs, out.epsilons):
        ledger = make_ledger(_build(**config), np.asarray(small_data.counts))
        expected = np.inf if ledger is None else ledger.record(6).epsilon(deltas)
        assert epsilon == expected, (config, epsilon, expected)
    assert np.isinf(out.epsilons[0]) and 0 < out.epsilons[2] < out.epsilons[1] < np.inf  # z = 0, 2.0, 0.8
    run = train(_build(0.1, 2.0), small_data, init_linear(5), rounds=6, delta=deltas, progress=False)
    assert out.epsilons[2] == run.epsilon
    assert sweep(_build, grid, small_data, init_linear(5), rounds=2).epsilons is None


def test_new_data_of_the_same_shapes_reuses_the_compiled_program():
    traces = []

    def build(lr):
        traces.append(lr)
        return minibatch_sgd(logistic_loss, server_opt=optax.sgd(lr), batch_size=4)

    def evaluate(params, test):
        return {"acc": binary_accuracy(params, test[0], test[1])}

    first, second = (from_silos(make_silos([30, 20, 25], seed=s)) for s in (1, 2))
    tests = [(jnp.asarray(d.x.reshape(-1, 5)), jnp.asarray(d.y.reshape(-1))) for d in (first, second)]
    a = sweep(build, {"lr": [0.1, 0.4]}, first, init_linear(5), rounds=3, evaluate=evaluate, eval_data=tests[0])
    b = sweep(build, {"lr": [0.1, 0.4]}, second, init_linear(5), rounds=3, evaluate=evaluate, eval_data=tests[1])
    assert len(traces) == 1  # one trace of the grid program for both datasets
    assert not np.array_equal(a.params["w"], b.params["w"])
    single = train(build(0.4), second, init_linear(5), rounds=3, key=0, progress=False)
    np.testing.assert_allclose(b.params["w"][1, 0], single.state.params["w"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.metrics["acc"][1, 0], binary_accuracy(single.state.params, *tests[1]), atol=1e-6)
    with pytest.raises(ValueError, match="delta"):
        sweep(build, {"lr": [0.1]}, first, init_linear(5), rounds=3, delta=2.0)


def test_constants_are_program_arguments_and_host_values_for_the_accounting(small_data):
    """A per-trial value of the build (a unit noise multiplier) changes neither the compiled program nor
    the accounting's exactness: the traced path and the host path see the same value."""
    traces, host_values = [], []

    def build(lr, unit_z):
        if isinstance(unit_z, np.ndarray):
            host_values.append(float(unit_z))
        else:
            traces.append(lr)
        return _build(lr, unit_z)

    deltas = 1.0 / np.asarray(small_data.counts, float) ** 2
    a = sweep(build, {"lr": [0.1, 0.5]}, small_data, init_linear(5), rounds=4, delta=deltas,
              constants={"unit_z": np.asarray(0.8)})
    b = sweep(build, {"lr": [0.1, 0.5]}, small_data, init_linear(5), rounds=4, delta=deltas,
              constants={"unit_z": np.asarray(2.0)})
    assert len(traces) == 1 and host_values[-1] == 2.0
    direct = sweep(_build, {"lr": [0.1, 0.5], "z": [2.0]}, small_data, init_linear(5), rounds=4, delta=deltas)
    np.testing.assert_array_equal(b.params["w"], direct.params["w"])
    np.testing.assert_array_equal(b.epsilons, direct.epsilons)
    assert a.epsilons[0] > b.epsilons[0]


@pytest.mark.slow
def test_a_list_of_configurations_is_run_as_given(small_data):
    """Zipped values (epsilons with their calibrated multipliers) instead of a Cartesian product."""
    configs = [{"lr": 0.1, "z": 0.5}, {"lr": 0.4, "z": 2.0}]
    out = sweep(_build, configs, small_data, init_linear(5), rounds=3, seeds=[0, 1])
    product = sweep(_build, {"lr": [0.1, 0.4], "z": [0.5, 2.0]}, small_data, init_linear(5), rounds=3, seeds=[0, 1])
    assert out.configs == configs
    # Equal up to float rounding: a vmap over 2 configs compiles differently from one over 4.
    np.testing.assert_allclose(out.params["w"][0], product.params["w"][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.params["w"][1], product.params["w"][3], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="keys"):
        sweep(_build, [{"lr": 0.1, "z": 0.5}, {"lr": 0.1}], small_data, init_linear(5), rounds=1)


@pytest.mark.slow
@pytest.mark.parametrize("rounds", [6, 7])
def test_eval_every_records_the_curve_that_shorter_sweeps_end_on(small_data, rounds):
    """``eval_every=k``: point ``i`` is the evaluation a sweep of ``(i + 1) k`` rounds ends with (the same
    round keys and steps), the infos cover every round, and a remainder of rounds runs after the last point."""
    test = (jnp.asarray(small_data.x.reshape(-1, 5)), jnp.asarray(small_data.y.reshape(-1)))

    def evaluate(params, data):
        return {"acc": binary_accuracy(params, *data), "w0": params["w"][0]}

    grid = {"lr": [0.1, 0.5], "z": [0.0, 0.8]}
    out = sweep(_build, grid, small_data, init_linear(5), rounds=rounds, seeds=[0, 3], evaluate=evaluate,
                eval_data=test, eval_every=2)
    assert out.history["w0"].shape == (4, 2, 3)
    assert out.infos["update_norm"].shape == (4, 2, rounds)
    for i, r in enumerate((2, 4, 6)):
        short = sweep(_build, grid, small_data, init_linear(5), rounds=r, seeds=[0, 3], evaluate=evaluate,
                      eval_data=test)
        np.testing.assert_allclose(out.history["w0"][:, :, i], short.metrics["w0"], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(out.history["acc"][:, :, i], short.metrics["acc"])
    whole = sweep(_build, grid, small_data, init_linear(5), rounds=rounds, seeds=[0, 3], evaluate=evaluate,
                  eval_data=test)
    np.testing.assert_allclose(out.params["w"], whole.params["w"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.infos["update_norm"], whole.infos["update_norm"], rtol=1e-5, atol=1e-6)
    assert whole.history is None


def test_eval_every_refuses_what_it_cannot_do(small_data):
    with pytest.raises(ValueError, match="evaluate"):
        sweep(_build, {"lr": [0.1], "z": [0.0]}, small_data, init_linear(5), rounds=4, eval_every=2)
    evaluate = lambda p: {"w0": p["w"][0]}  # noqa: E731
    for bad in (0, 5):
        with pytest.raises(ValueError, match="eval_every"):
            sweep(_build, {"lr": [0.1], "z": [0.0]}, small_data, init_linear(5), rounds=4, evaluate=evaluate,
                  eval_every=bad)


def _curve_sweep(data, build=_build, **kw):
    test = (jnp.asarray(data.x.reshape(-1, 5)), jnp.asarray(data.y.reshape(-1)))

    def evaluate(params, d):
        return {"acc": binary_accuracy(params, *d), "w0": params["w"][0]}

    return sweep(build, {"lr": [0.1, 0.5], "z": [0.0, 0.8]}, data, init_linear(5), rounds=7, seeds=[0, 3],
                 evaluate=evaluate, eval_data=test, eval_every=2, configs_per_batch=3, **kw)


def _outputs(out):
    return (out.params, out.infos, out.metrics, out.history)


def test_a_sweep_stopped_mid_way_resumes_from_its_checkpoint(small_data, tmp_path, monkeypatch):
    """Segments of rounds give one program's result up to float rounding; a checkpointed sweep killed after a
    segment resumes after it and ends bitwise where the uninterrupted segmented sweep ends (two config batches,
    the curve's points, a shorter last segment), and removes its checkpoint."""
    whole = _curve_sweep(small_data)
    segmented = _curve_sweep(small_data, segment_rounds=4)
    chex.assert_trees_all_close(_outputs(segmented), _outputs(whole), rtol=1e-5, atol=1e-6)
    assert segmented.history["w0"].shape == (4, 2, 3) and segmented.infos["update_norm"].shape == (4, 2, 7)

    path = tmp_path / "sweep.pkl"
    writes = watch_checkpoint_writes(monkeypatch, die_at=4)  # batch 1 of 2: segments to rounds 4 and 7, its end;
    with pytest.raises(Killed):                               # then batch 2's first segment
        _curve_sweep(small_data, segment_rounds=4, checkpoint=path)
    assert writes == [4, 7, 7, 4] and path.exists()
    writes = watch_checkpoint_writes(monkeypatch)
    resumed = _curve_sweep(small_data, segment_rounds=4, checkpoint=path)
    assert writes == [7, 7]  # only batch 2's last segment ran, then its end was recorded
    chex.assert_trees_all_equal(_outputs(resumed), _outputs(segmented))
    assert not path.exists()


def _partial_build():
    """``_build`` as a ``functools.partial`` of a function object made afresh, at another address (as in another
    process: a later sitting, a ``--workers`` worker)."""
    def build(lr, z, clip):
        return minibatch_sgd(logistic_loss, server_opt=optax.sgd(lr), sampling_rate=0.3, expected_batch_size=6.0,
                             clip_norm=clip,
                             noise_multiplier=z)
    return functools.partial(build, clip=1.0)


def test_a_partial_build_resumes_where_its_function_has_another_address(small_data, tmp_path, monkeypatch):
    """The studies give their builds as partials, whose repr holds the function's address: the checkpoint names
    the build without it, so another process resumes it; one written with the address (as before) resumes too."""
    first, second = _partial_build(), _partial_build()
    assert repr(first) != repr(second) and " at 0x" in repr(first)
    path = tmp_path / "sweep.pkl"
    watch_checkpoint_writes(monkeypatch, die_at=1)
    with pytest.raises(Killed):
        _curve_sweep(small_data, build=first, segment_rounds=4, checkpoint=path)
    stored = pickle.loads(path.read_bytes())
    assert stored["round"] == 4 and " at 0x" not in stored["fingerprint"]
    stored["fingerprint"] = re.sub(r"(<function [^>]*)>", r"\1 at 0x7f5b07111da0>", stored["fingerprint"], count=1)
    assert " at 0x" in stored["fingerprint"]
    path.write_bytes(pickle.dumps(stored))
    writes = watch_checkpoint_writes(monkeypatch)
    resumed = _curve_sweep(small_data, build=second, segment_rounds=4, checkpoint=path)
    assert writes == [7, 7, 4, 7, 7]   # from round 4 on: batch 1 went on, batch 2 ran whole
    chex.assert_trees_all_equal(_outputs(resumed), _outputs(_curve_sweep(small_data, segment_rounds=4)))


def test_a_checkpoint_of_another_sweep_is_refused_and_kept(small_data, tmp_path):
    path = tmp_path / "sweep.pkl"
    sweep_module = importlib.import_module("jaxfl.engine.sweep")
    progress = {"fingerprint": "another sweep", "done": [], "state": None}
    sweep_module._write_checkpoint(path, progress)
    with pytest.raises(ValueError, match="belongs to another sweep"):
        _curve_sweep(small_data, checkpoint=path)
    assert pickle.loads(path.read_bytes()) == progress
    for bad, match in ((0, "segment_rounds"), (3, "multiple of eval_every")):
        with pytest.raises(ValueError, match=match):
            _curve_sweep(small_data, segment_rounds=bad)
