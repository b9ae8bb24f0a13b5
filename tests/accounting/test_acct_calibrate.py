"""epsilon_for / noise_multiplier_for / calibrate."""
import pytest

from jaxfl.accounting import (SiloLedger, analytic_gaussian_sigma, calibrate, epsilon_for, gaussian_event,
                              noise_multiplier_for)


@pytest.mark.parametrize("target, q, steps, delta", [(2.0, 0.01, 1000, 1e-5), (0.5, 1.0, 1, 1e-6),
                                                    (8.0, 0.2, 50, 1e-5)])
def test_rdp_round_trip(target, q, steps, delta):
    tol = 1e-5
    sigma = noise_multiplier_for(target, q, steps, delta, tol=tol)
    eps = epsilon_for(sigma, q, steps, delta)
    assert eps <= target
    assert eps == pytest.approx(target, abs=1e-3)
    # smallest: a bit less noise breaks the budget
    assert epsilon_for(sigma - 10 * tol, q, steps, delta) > target


def test_pld_single_gaussian_close_to_analytic():
    sigma = noise_multiplier_for(1.0, 1.0, 1, 1e-5, accountant="pld", tol=1e-4)
    exact = analytic_gaussian_sigma(1.0, 1e-5)
    assert exact - 1e-3 <= sigma <= exact + 1e-2
    assert epsilon_for(sigma, 1.0, 1, 1e-5, accountant="pld") <= 1.0


def test_accountant_kwargs_pass_through():
    coarse = epsilon_for(1.0, 0.01, 100, 1e-5, accountant="rdp", orders=[2, 3])
    fine = epsilon_for(1.0, 0.01, 100, 1e-5, accountant="rdp")
    assert coarse > fine


def test_calibrate_discrete_steps_matches_ledger():
    """The largest number of steps within budget, two ways: calibrate (discrete, increasing parameter with
    an explicit bracket) and the ledger's rounds_within_budget."""
    make = lambda t: gaussian_event(1.0, 0.01, t)  # noqa: E731
    steps = calibrate(make, 2.0, 1e-5, bracket=(1, 20000), discrete=True)
    assert isinstance(steps, int)
    assert epsilon_for(1.0, 0.01, steps, 1e-5) <= 2.0 < epsilon_for(1.0, 0.01, steps + 1, 1e-5)
    ledger = SiloLedger(gaussian_event(1.0, 0.01), num_silos=1)
    assert ledger.rounds_within_budget(2.0, 1e-5, 20000) == steps


def test_calibrate_generic_noise():
    sigma = calibrate(lambda s: gaussian_event(s, 0.05, 200), 3.0, 1e-5, tol=1e-6)
    assert sigma == pytest.approx(noise_multiplier_for(3.0, 0.05, 200, 1e-5), abs=1e-5)


@pytest.mark.parametrize("kwargs, match", [
    ({"target_epsilon": 0.0}, "target_epsilon"),
    ({"target_epsilon": -1.0}, "target_epsilon"),
    ({"delta": 1.5}, "delta"),
    ({"delta": 0.0}, "delta"),
    ({"sampling_rate": 0.0}, "sampling_rate"),
    ({"steps": -2}, "steps"),
    ({"steps": 0}, "steps"),
    ({"accountant": "moments"}, "moments"),
])
def test_noise_multiplier_for_rejects(kwargs, match):
    args = {"target_epsilon": 1.0, "sampling_rate": 0.1, "steps": 10, "delta": 1e-5} | kwargs
    with pytest.raises(ValueError, match=match):
        noise_multiplier_for(**args)


@pytest.mark.parametrize("kwargs, match", [
    ({"noise_multiplier": 0.0}, "noise_multiplier"),
    ({"delta": 1.0}, "delta"),
    ({"sampling_rate": 1.01}, "sampling_rate"),
    ({"steps": -1}, "steps"),
    ({"accountant": "nope"}, "nope"),
])
def test_epsilon_for_rejects(kwargs, match):
    args = {"noise_multiplier": 1.0, "sampling_rate": 0.1, "steps": 10, "delta": 1e-5} | kwargs
    with pytest.raises(ValueError, match=match):
        epsilon_for(**args)
