"""Hypothesis over algorithm configurations and CLI arguments: any input either works, with a privacy statement
whose relation follows from the configuration, or is refused with one ValueError naming the bad argument (one
line, exit 2, no traceback, on the command line)."""
import math

import optax
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from jaxfl.algorithms import dp_fedavg, minibatch_sgd
from jaxfl.cli import main
from jaxfl.models import logistic_loss
from jaxfl.engine.participation import poisson

ADD, REPLACE = "ADD_OR_REMOVE_ONE", "REPLACE_ONE"
NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5), st.just(0.0),
                    st.floats(0.01, 1.0), st.sampled_from([0.3, 1.0, 7.0, math.inf]))


def _assert_names_one_of(error, *names):
    """A refusal is one line naming the bad argument."""
    message = str(error)
    assert "\n" not in message and any(name in message for name in names), message


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rate=st.one_of(st.none(), NUMBERS), expected=st.one_of(st.none(), NUMBERS),
       batch=st.one_of(st.none(), st.integers(-2, 50)), clip=NUMBERS, noise=NUMBERS)
def test_minibatch_sgd_configurations(rate, expected, batch, clip, noise):
    kwargs = {"sampling_rate": rate, "expected_batch_size": expected, "batch_size": batch}
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    try:
        algorithm = minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.1), clip_norm=clip, noise_multiplier=noise,
                                  **kwargs)
        statement = None if algorithm.privacy is None else algorithm.privacy([30, 20])
    except ValueError as error:
        _assert_names_one_of(error, "sampling_rate", "expected_batch_size", "batch_size", "clip_norm",
                             "noise_multiplier")
        return
    if statement is None:   # a non-private configuration states nothing
        assert noise == 0 or not math.isfinite(clip)
        return
    if batch is not None:
        assert statement.relation.name == REPLACE        # draws with replacement
    elif expected is not None:
        assert statement.relation.name == ADD            # a public constant denominator
    else:
        assert statement.relation.name == REPLACE        # divided by the silo's own size


@settings(max_examples=100, deadline=None)
@given(rate=NUMBERS, expected=st.one_of(st.none(), NUMBERS), clip=NUMBERS, noise=NUMBERS,
       steps=st.integers(-1, 3))
def test_dp_fedavg_configurations(rate, expected, clip, noise, steps):
    try:
        algorithm = dp_fedavg(logistic_loss, client_opt=optax.sgd(0.1), local_steps=steps, participation=poisson(rate),
                              expected_clients=expected, clip_norm=clip, noise_multiplier=noise)
        statement = None if algorithm.privacy is None else algorithm.privacy([30, 20])
    except ValueError as error:
        _assert_names_one_of(error, "client_rate", "expected_clients", "clip_norm", "noise_multiplier", "local_steps")
        return
    if statement is not None:    # user-level DP: one client added or removed, over a public expected count
        assert statement.relation.name == ADD and statement.level == "client"
        assert expected is not None


@pytest.mark.parametrize("kwargs, relation", [
    ({"sampling_rate": 0.3, "expected_batch_size": 7.0, "clip_norm": 1.0, "noise_multiplier": 1.0}, ADD),
    ({"sampling_rate": 0.3, "clip_norm": 1.0, "noise_multiplier": 1.0}, REPLACE),
    ({"batch_size": 4, "clip_norm": 1.0, "noise_multiplier": 1.0}, REPLACE),
    ({"clip_norm": 1.0, "noise_multiplier": 0.0}, None),
])
def test_each_outcome_is_reachable(kwargs, relation):
    """The property above is not vacuous: each of its branches is reached by a configuration."""
    algorithm = minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.1), **kwargs)
    statement = None if algorithm.privacy is None else algorithm.privacy([30, 20])
    assert (None if statement is None else statement.relation.name) == relation


ACCOUNT_VALUES = st.one_of(st.sampled_from(["0", "-1", "nan", "inf", "1e309", "abc", "", "1.5", "0.5", "1e-5", "3",
                                            "1", "1000000"]), st.floats(allow_nan=True).map(repr))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(noise="1e-5", rate="1e-5", steps="1000000", delta="1e-5", accountant="pld")   # was a MemoryError
@given(noise=ACCOUNT_VALUES, rate=ACCOUNT_VALUES, steps=ACCOUNT_VALUES, delta=ACCOUNT_VALUES,
       accountant=st.sampled_from(["rdp", "pld"]))
def test_account_arguments(noise, rate, steps, delta, accountant, capsys):
    argv = ["account", "--accountant", accountant, "--noise-multiplier", noise, "--sampling-rate", rate,
            "--steps", steps, "--delta", delta]
    try:
        code = main(argv)
    except SystemExit as exit_:      # argparse's own refusals (a value it cannot parse as a number)
        code = exit_.code
    out, err = capsys.readouterr()
    assert code in (0, 2), (argv, code)
    if code == 2:
        lines = err.strip().splitlines()
        assert lines and "Traceback" not in err
        assert lines[-1].startswith("jaxfl") and ("error" in lines[-1]), err
    else:
        assert out.strip()
