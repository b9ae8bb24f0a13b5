"""The same training run on 2 and 4 processes coordinated by ``jax.distributed`` (CPU, gloo collectives over
loopback) is bitwise equal to one plain process; plus the single-process behaviour of the helpers."""
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxfl.data.federated import from_silos
from jaxfl.engine import sharding
from _helpers import cpu_devices_flags, make_silos

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("distributed_worker.py")
RUN_TIMEOUT_S = 120  # per launch (all processes of one run together); the 4-process run takes ~20 s on 2 cores


def _gloo_available() -> str | None:
    """None if this jax has the CPU-collectives option (gloo is its default), else why not."""
    if "jax_cpu_collectives_implementation" not in jax.config.values:
        return f"jax {jax.__version__} has no jax_cpu_collectives_implementation option"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(workdir: Path, name: str, processes: int, local_devices: int = 1, data: str = "full") -> dict:
    """Runs the worker as ``processes`` processes; returns process 0's arrays. Kills every process it started
    if one fails or the run passes ``RUN_TIMEOUT_S``."""
    out = workdir / f"{name}.npz"
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=cpu_devices_flags(local_devices),
               PYTHONPATH=os.pathsep.join([str(REPO / "tests"), str(REPO)]))
    env.pop("JAX_COORDINATOR_ADDRESS", None)
    port = _free_port()
    procs, logs = [], []
    try:
        for i in range(processes):
            log = open(workdir / f"{name}.{i}.log", "w")
            logs.append(log)
            procs.append(subprocess.Popen(
                [sys.executable, str(WORKER), str(out), "--processes", str(processes), "--process-id", str(i),
                 "--port", str(port), "--data", data], env=env, stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while any(p.poll() is None for p in procs):
            failed = [i for i, p in enumerate(procs) if p.returncode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        for log in logs:
            log.close()
    codes = [p.returncode for p in procs]
    if codes != [0] * processes:
        tails = "\n".join(f"--- process {i} (exit {c}):\n" + (workdir / f"{name}.{i}.log").read_text()[-1500:]
                          for i, c in enumerate(codes))
        pytest.fail(f"{name}: {processes} processes x {local_devices} devices exited {codes} "
                    f"(negative: killed after {RUN_TIMEOUT_S} s or after another process failed)\n{tails}")
    with np.load(out) as arrays:
        return dict(arrays)


@pytest.fixture(scope="module")
def workdir():
    with tempfile.TemporaryDirectory(prefix="jaxfl-distributed-") as d:
        yield Path(d)


@pytest.fixture(scope="module")
def reference(workdir):
    return _launch(workdir, "reference", processes=1)


@pytest.mark.slow  # a reference process then 2 + 4 + 2 jax.distributed processes: ~45 s on 2 cores
@pytest.mark.parametrize("processes,local_devices,data", [(2, 1, "full"), (4, 1, "local"), (2, 2, "local")],
                         ids=["2procs-full-copy", "4procs-local-silos", "2procs-2devices-local-silos"])
def test_multi_process_run_is_bitwise_equal_to_one_process(workdir, reference, processes, local_devices, data):
    reason = _gloo_available()
    if reason is not None:
        pytest.skip(reason)
    got = _launch(workdir, f"p{processes}d{local_devices}{data}", processes, local_devices, data)
    assert sorted(got) == sorted(reference)
    for name in reference:  # params, epsilon, gathered per-silo state and per-silo metrics of both algorithms
        np.testing.assert_array_equal(got[name], reference[name], err_msg=name)
    assert np.any(reference["mbsgd/params['w']"] != 0)
    assert (workdir / f"p{processes}d{local_devices}{data}.npz.mbsgd.jsonl").read_text().count("\n") == 2


def test_local_silo_helpers_on_one_process():
    data = from_silos(make_silos([30, 12, 25, 40, 33, 17, 28], seed=4))
    mesh = sharding.silo_mesh()
    np.testing.assert_array_equal(sharding.process_silos(mesh, 7), np.arange(7))
    built = sharding.shard_local_data(data, mesh, 7)
    expected = sharding.shard_data(data, mesh)
    for a, b in zip(built, expected):
        assert a.shape == b.shape and a.sharding == b.sharding
        np.testing.assert_array_equal(sharding.to_host(a), np.asarray(b))
    with pytest.raises(ValueError, match="holds silos"):
        sharding.shard_local_data(data, mesh, 9)
    host = sharding.to_host({"a": built.counts, "b": [np.float32(1.5)]})
    assert isinstance(host["a"], np.ndarray) and host["b"][0] == 1.5
