"""`jaxfl account` through a small parser built with add_account_parser (ARCHITECTURE §3.5)."""
import argparse
import json

import pytest

from jaxfl.accounting import add_account_parser, epsilon_for, run_account


@pytest.fixture
def parser():
    p = argparse.ArgumentParser(prog="jaxfl")
    add_account_parser(p.add_subparsers(dest="command", required=True))
    return p


def run(parser, capsys, argv):
    args = parser.parse_args(["account", *argv])
    assert args.func is run_account
    assert run_account(args) == 0
    return capsys.readouterr().out.strip()


BASE = ["--sampling-rate", "0.0025", "--steps", "6000", "--delta", "1e-5"]


def test_plain_epsilon(parser, capsys):
    out = run(parser, capsys, ["--accountant", "rdp", "--noise-multiplier", "1.3", *BASE])
    assert float(out) == pytest.approx(0.7242234026109595, rel=1e-9)


def test_json_epsilon(parser, capsys):
    out = run(parser, capsys, ["--noise-multiplier", "1.3", *BASE, "--json"])
    data = json.loads(out)
    assert set(data) == {"epsilon", "delta", "accountant"}
    assert data["accountant"] == "rdp" and data["delta"] == 1e-5
    assert isinstance(data["epsilon"], float)
    assert data["epsilon"] == pytest.approx(0.7242234026109595, rel=1e-9)


def test_pld_and_default_sampling_rate(parser, capsys):
    out = run(parser, capsys, ["--accountant", "pld", "--noise-multiplier", "3", "--steps", "4",
                               "--delta", "1e-6", "--json"])
    data = json.loads(out)
    assert data["accountant"] == "pld"
    assert data["epsilon"] == pytest.approx(epsilon_for(3.0, 1.0, 4, 1e-6, accountant="pld"))


def test_calibration_mode(parser, capsys):
    argv = ["--target-epsilon", "2", "--sampling-rate", "0.01", "--steps", "500", "--delta", "1e-5"]
    sigma = float(run(parser, capsys, argv))
    data = json.loads(run(parser, capsys, [*argv, "--json"]))
    assert set(data) == {"noise_multiplier", "epsilon", "delta", "accountant"}
    assert data == {"noise_multiplier": sigma, "epsilon": 2.0, "delta": 1e-5, "accountant": "rdp"}
    eps = epsilon_for(sigma, 0.01, 500, 1e-5)
    assert eps <= 2.0 and eps == pytest.approx(2.0, abs=1e-3)


@pytest.mark.parametrize("argv, match", [
    (["--target-epsilon", "0", *BASE], "--target-epsilon"),
    (["--target-epsilon", "-1", *BASE], "--target-epsilon"),
    (["--noise-multiplier", "0", *BASE], "--noise-multiplier"),
    (["--noise-multiplier", "1", "--steps", "10", "--delta", "1.5"], "--delta.*1.5"),
    (["--noise-multiplier", "1", "--steps", "10", "--delta", "0"], "--delta"),
    (["--noise-multiplier", "1", "--steps", "-3", "--delta", "1e-5"], "--steps"),
    (["--noise-multiplier", "1", "--sampling-rate", "0", "--steps", "3", "--delta", "1e-5"],
     "--sampling-rate"),
    (["--target-epsilon", "1", "--steps", "0", "--delta", "1e-5"], "--steps"),
])
def test_bad_values_raise_value_error(parser, argv, match):
    args = parser.parse_args(["account", *argv])
    with pytest.raises(ValueError, match=match):
        run_account(args)


@pytest.mark.parametrize("argv", [
    ["--accountant", "moments", "--noise-multiplier", "1", *BASE],  # unknown accountant
    ["--noise-multiplier", "1", "--target-epsilon", "1", *BASE],  # mutually exclusive
    BASE,  # one of them is required
    ["--noise-multiplier", "1", "--sampling-rate", "0.1", "--steps", "10"],  # --delta missing
    ["--noise-multiplier", "abc", *BASE],
])
def test_argparse_errors_exit_2(parser, argv, capsys):
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["account", *argv])
    assert info.value.code == 2


def test_unknown_accountant_in_namespace_raises_value_error():
    args = argparse.Namespace(accountant="moments", noise_multiplier=1.0, target_epsilon=None,
                              sampling_rate=1.0, steps=1, delta=1e-5, json=False)
    with pytest.raises(ValueError, match="moments"):
        run_account(args)
