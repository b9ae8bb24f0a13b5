"""Faults: a failing evaluation or SIGTERM leaves the round's metrics and a valid checkpoint, a resumed run equals an
unbroken one (state bitwise, the ledger charged once per round, every round once in the metrics), and a damaged
checkpoint or data file gives one error naming it."""
import gzip
import json
import os
import signal

import jax
import numpy as np
import optax
import pytest
from _helpers import make_silos

from jaxfl.algorithms import minibatch_sgd
from jaxfl.data import loaders
from jaxfl.data.federated import from_silos
from jaxfl.engine import driver
from jaxfl.models import init_linear, logistic_loss

DATA = from_silos(make_silos([30, 20, 25], features=5, seed=1))
ROUNDS = 6


def _algorithm():
    return minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.5), sampling_rate=0.3, expected_batch_size=7.0,
                         clip_norm=1.0, noise_multiplier=1.2)


def _train(tmp_path, eval_fn=None, **kwargs):
    return driver.train(_algorithm(), DATA, init_linear(5), rounds=ROUNDS, key=3, eval_every=1, delta=1e-5,
                        eval_fn=eval_fn, checkpoint_dir=tmp_path / "ckpt", metrics_path=tmp_path / "metrics.jsonl",
                        progress=False, **kwargs)


def _metrics(tmp_path):
    return [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines() if line]


def _assert_like_unbroken(tmp_path, resumed, unbroken):
    jax.tree_util.tree_map(np.testing.assert_array_equal, resumed.state.params, unbroken.state.params)
    assert resumed.epsilon == unbroken.epsilon   # the ledger charged once per round
    assert [r["round"] for r in _metrics(tmp_path)] == list(range(1, ROUNDS + 1))


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("unbroken"))


def test_failing_evaluation_saves_the_round_first(tmp_path, unbroken):
    def flaky(params, fail_at=[4]):
        flaky.calls = getattr(flaky, "calls", 0) + 1
        if flaky.calls == fail_at[0]:
            raise RuntimeError("evaluation server down")
        return {"norm": float(np.linalg.norm(params["w"]))}

    with pytest.raises(RuntimeError, match="evaluation server down") as caught:
        _train(tmp_path, flaky)
    assert "after round 4" in "".join(getattr(caught.value, "__notes__", []))
    records = _metrics(tmp_path)
    assert [r["round"] for r in records] == [1, 2, 3, 4] and "eval_error" in records[-1]
    resumed = _train(tmp_path, lambda p: {"norm": 0.0})
    _assert_like_unbroken(tmp_path, resumed, unbroken)


def test_sigterm_finishes_and_saves_the_round(tmp_path, unbroken):
    delivered = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: delivered.append(signum))
    try:
        def terminate_at_3(params, calls=[0]):
            calls[0] += 1
            if calls[0] == 3:
                os.kill(os.getpid(), signal.SIGTERM)
            return {}

        stopped = _train(tmp_path, terminate_at_3)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert stopped.stop_reason == "terminated" and stopped.rounds == 3
    assert delivered == [signal.SIGTERM]          # passed on to the handler there was before, once
    resumed = _train(tmp_path)
    _assert_like_unbroken(tmp_path, resumed, unbroken)


def test_damaged_checkpoint_names_itself(tmp_path):
    _train(tmp_path)
    step = tmp_path / "ckpt" / str(ROUNDS)
    for path in step.rglob("*"):
        if path.is_file() and path.stat().st_size > 0:
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match=f"checkpoint .*{step.name}.* cannot be restored"):
        _train(tmp_path)


@pytest.mark.parametrize("writer, reader", [
    (lambda p, b: p.write_bytes(gzip.compress(b)[:40]), lambda p: loaders.read_idx(p)),
    (lambda p, b: p.write_bytes(b"\x1f\x8b" + b"junk"), lambda p: loaders._read_csv_gz(p, ("a",))),
])
def test_damaged_data_file_names_itself(tmp_path, writer, reader):
    path = tmp_path / "data.gz"
    writer(path, bytes(range(256)) * 64)
    with pytest.raises(ValueError, match=f"{path.name}: cannot be read, truncated or corrupt"):
        reader(path)
