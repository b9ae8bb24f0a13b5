"""`jaxfl account --accountant dprec` (Triastcyn et al., Alg. 7) through the top-level entry point."""
import json
import subprocess
import sys

import pytest

from jaxfl.accounting import dprec_epsilon
from jaxfl.cli import main

FEMNIST = ["--bits", "56", "--clients-per-round", "100", "--clients", "3500", "--rounds", "4000"]
MNIST = ["--bits", "56", "--clients-per-round", "10", "--clients", "100", "--rounds", "1000"]
SO = ["--bits", "42", "--clients-per-round", "60", "--clients", "342477", "--rounds", "1500"]


def _main(capsys, *argv):
    code = main(["account", "--accountant", "dprec", *argv])
    out = capsys.readouterr()
    return code, out.out.strip(), out.err.strip()


def test_epsilon_plain_and_json(capsys):
    code, out, err = _main(capsys, "--clip-multiplier", "1.41", *FEMNIST)
    assert code == 0 and err == ""
    assert round(float(out), 3) == 3.016
    assert float(out) == dprec_epsilon(1.41, bits=56, num_clients=3500, clients_per_round=100, rounds=4000)
    code, out, _ = _main(capsys, "--clip-multiplier", "1.41", *FEMNIST, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["accountant"] == "dprec" and doc["epsilon"] == pytest.approx(3.0162353, abs=1e-6)
    assert doc["delta"] == 3500 ** -1.1  # default N^-1.1
    assert doc["order"] == 7 and doc["clip_multiplier"] == 1.41 and doc["bits"] == 56
    assert {"clients", "clients_per_round", "rounds", "delta_overhead"} <= set(doc)


def test_explicit_delta(capsys):
    code, out, _ = _main(capsys, "--clip-multiplier", "0.545", *MNIST, "--delta", "1e-5", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["delta"] == 1e-5
    assert doc["epsilon"] == dprec_epsilon(0.545, bits=56, num_clients=100, clients_per_round=10, rounds=1000,
                                           delta=1e-5)


def test_infeasible_prints_inf_and_explains_on_stderr(capsys):
    code, out, err = _main(capsys, "--clip-multiplier", "1.227", *SO)
    assert code == 0 and out == "inf"
    lines = err.splitlines()
    assert len(lines) == 1 and "1.107e-06" in lines[0] and "8.164e-07" in lines[0]
    code, out, err = _main(capsys, "--clip-multiplier", "1.227", *SO, "--json")
    assert code == 0 and "Infinity" not in out and err
    doc = json.loads(out, parse_constant=lambda name: pytest.fail(f"non-JSON constant {name}"))
    assert doc["epsilon"] == "inf" and doc["order"] is None and doc["delta_overhead"] > doc["delta"]
    code, out, err = _main(capsys, "--clip-multiplier", "1.227", *SO[2:], "--bits", "49")
    assert code == 0 and round(float(out), 3) == 0.935 and err == ""


def test_target_epsilon_prints_the_clip_multiplier(capsys):
    code, out, _ = _main(capsys, "--target-epsilon", "3", *MNIST)
    c = float(out)
    assert code == 0 and c == pytest.approx(0.545, abs=3e-3)
    eps = dprec_epsilon(c, bits=56, num_clients=100, clients_per_round=10, rounds=1000)
    assert eps <= 3.0 and eps == pytest.approx(3.0, abs=1e-6)


@pytest.mark.parametrize("argv, needle", [
    (["--clip-multiplier", "1", "--clients-per-round", "10", "--clients", "100", "--rounds", "10"], "--bits"),
    (["--clip-multiplier", "1", "--bits", "7", "--clients", "100", "--rounds", "10"], "--clients-per-round"),
    (["--clip-multiplier", "1", "--bits", "7", "--clients-per-round", "10", "--rounds", "10"], "--clients"),
    (["--clip-multiplier", "1", "--bits", "7", "--clients-per-round", "10", "--clients", "100"], "--rounds"),
    (MNIST, "--clip-multiplier"),
    (["--clip-multiplier", "1", *MNIST, "--steps", "5"], "--steps"),
    (["--clip-multiplier", "1", *MNIST, "--sampling-rate", "0.1"], "--sampling-rate"),
    (["--noise-multiplier", "1", *MNIST], "--noise-multiplier"),
    (["--clip-multiplier", "0", *MNIST], "--clip-multiplier"),
    (["--clip-multiplier", "1", *MNIST, "--delta", "1.5"], "--delta"),
    (["--clip-multiplier", "1", *MNIST[:-4], "--clients", "1", "--rounds", "10"], "--clients"),
    (["--clip-multiplier", "1", *MNIST[2:], "--bits", "0"], "--bits"),
    (["--target-epsilon", "0", *MNIST], "--target-epsilon"),
    (["--target-epsilon", "0.01", *SO], "--target-epsilon"),
])
def test_bad_or_missing_flags_are_one_line_exit_2(capsys, argv, needle):
    code, out, err = _main(capsys, *argv)
    lines = err.splitlines()
    assert code == 2 and out == ""
    assert len(lines) == 1 and lines[0].startswith("jaxfl: error:") and needle in lines[0]


def test_dprec_flags_are_rejected_for_gaussian_accountants(capsys):
    assert main(["account", "--accountant", "rdp", "--noise-multiplier", "1", "--steps", "10", "--delta", "1e-5",
                 "--bits", "7"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--bits" in err[0]
    assert main(["account", "--clip-multiplier", "1", "--steps", "10", "--delta", "1e-5"]) == 2
    assert "--clip-multiplier" in capsys.readouterr().err


def test_gaussian_mode_still_requires_its_flags_at_parse_time(capsys):
    for argv in (["--noise-multiplier", "1", "--steps", "10"], ["--steps", "10", "--delta", "1e-5"],
                 ["--noise-multiplier", "1", "--delta", "1e-5"]):
        with pytest.raises(SystemExit) as info:
            main(["account", *argv])
        assert info.value.code == 2
    assert main(["account", "--noise-multiplier", "1.3", "--sampling-rate", "0.0025", "--steps", "6000",
                 "--delta", "1e-5"]) == 0
    assert float(capsys.readouterr().out) == pytest.approx(0.7242234026109595, rel=1e-9)


def test_process_level_infeasible_exit_0_one_stderr_line():
    out = subprocess.run([sys.executable, "-m", "jaxfl.cli", "account", "--accountant", "dprec",
                          "--clip-multiplier", "1.227", *SO, "--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and "Traceback" not in out.stderr
    assert out.stderr.strip().count("\n") == 0 and "overhead" in out.stderr
    assert json.loads(out.stdout)["epsilon"] == "inf"
