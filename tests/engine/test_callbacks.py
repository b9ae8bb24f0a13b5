"""train's callbacks: the hooks run in order around each compiled call, a callback can stop a run, and
TensorBoard receives every record's scalars."""
import struct
import sys

import numpy as np
import optax
import pytest

from jaxfl import train
from jaxfl.algorithms import minibatch_sgd
from jaxfl.engine import callbacks
from jaxfl.models import init_linear, logistic_loss


def _algorithm():
    return minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.5), sampling_rate=0.3, expected_batch_size=8.0,
                         clip_norm=1.0, noise_multiplier=1.0)


class Log(callbacks.Callback):
    def __init__(self, stop_after=None):
        self.calls, self.stop_after = [], stop_after

    def on_start(self, run):
        self.calls.append(("start", run.round))

    def rounds_allowed(self, run, rounds):
        self.calls.append(("allowed", run.round, rounds))
        return rounds

    def on_record(self, run, record):
        self.calls.append(("record", record["round"], sorted(record)))
        if self.stop_after is not None and run.round >= self.stop_after:
            run.stop_reason = "enough"

    def on_end(self, run):
        self.calls.append(("end", run.round))


def test_hooks_run_once_each_around_every_call_and_see_the_filled_record(small_data):
    log = Log()
    result = train(_algorithm(), small_data, init_linear(5), rounds=6, eval_every=2, delta=1e-5, progress=False,
                   eval_fn=lambda p: {"norm": float(np.linalg.norm(p["w"]))}, callbacks=[log])
    assert log.calls[0] == ("start", 0) and log.calls[-1] == ("end", 6)
    records = [c for c in log.calls if c[0] == "record"]
    assert [c[1] for c in records] == [2, 4, 6]
    assert all({"norm", "epsilon", "wall_seconds"} <= set(c[2]) for c in records)  # evaluated and stamped first
    assert [c for c in log.calls if c[0] == "allowed"] == [("allowed", r, 2) for r in (0, 2, 4)]
    assert [h["round"] for h in result.history] == [2, 4, 6] and result.stop_reason == "completed"


def test_a_callback_stops_the_run_after_its_record_and_the_checkpoint_resumes_there(small_data, tmp_path):
    kw = dict(rounds=8, eval_every=2, key=3, progress=False, checkpoint_dir=tmp_path / "ckpt")
    stopped = train(_algorithm(), small_data, init_linear(5), callbacks=[Log(stop_after=4)], **kw)
    assert (stopped.rounds, stopped.stop_reason) == (4, "enough")
    resumed = train(_algorithm(), small_data, init_linear(5), **kw)
    whole = train(_algorithm(), small_data, init_linear(5), rounds=8, eval_every=2, key=3, progress=False)
    assert resumed.rounds == 8
    np.testing.assert_array_equal(np.asarray(resumed.params["w"]), np.asarray(whole.params["w"]))


def _scalars(logdir):
    """(tag, step, value) of every scalar in the TFRecord event files under ``logdir``."""
    from tensorboardX.proto import event_pb2

    out = []
    for path in sorted(logdir.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        at = 0
        while at < len(data):
            (length,) = struct.unpack("<Q", data[at:at + 8])
            event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
            at += 12 + length + 4
            out += [(v.tag, event.step, v.simple_value) for v in event.summary.value]
    return out


def test_tensorboard_receives_every_records_scalars(small_data, tmp_path):
    pytest.importorskip("tensorboardX")
    result = train(_algorithm(), small_data, init_linear(5), rounds=4, eval_every=2, delta=1e-5, progress=False,
                   silo_eval_fn=lambda p, i: {"w0": p["w"][0]}, callbacks=[callbacks.TensorBoard(tmp_path)])
    scalars = _scalars(tmp_path)
    eps = {step: value for tag, step, value in scalars if tag == "epsilon"}
    assert eps == pytest.approx({h["round"]: h["epsilon"] for h in result.history})
    assert {tag for tag, _, _ in scalars} >= {"epsilon", "wall_seconds", "silos/w0/0",
                                              f"silos/w0/{small_data.num_silos - 1}"}


def test_tensorboard_without_tensorboardx_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)   # an import of it raises ImportError
    with pytest.raises(ImportError, match=r"jaxfl\[tensorboard\]"):
        callbacks.TensorBoard(tmp_path)
