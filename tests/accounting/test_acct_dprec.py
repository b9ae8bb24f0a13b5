"""DP-REC's accountant (Triastcyn et al., Theorem 1 / Alg. 7) against the digest's oracle numbers (§4.6) and an
independent evaluation of the paper's eq. 62."""
import math

import dp_accounting
import numpy as np
import pytest
from scipy.special import gammaln, logsumexp

from jaxfl.accounting import (Accountant, CentralLedger, DprecAccountant, DprecDpEvent, UnsupportedEventError,
                              available_accountants, calibrate_clip_multiplier, default_delta, dpfedavg_epsilon,
                              dprec_delta_overhead, dprec_epsilon, dprec_local_epsilon, dprec_round_event,
                              make_accountant)
from jaxfl.accounting.dprec import DPREC_ORDERS, dprec_accountant

MNIST = dict(num_clients=100, clients_per_round=10, rounds=1000, bits=56)
FEMNIST = dict(num_clients=3500, clients_per_round=100, rounds=4000, bits=56)
SHAKESPEARE = dict(num_clients=660, clients_per_round=66, rounds=200, bits=77)
SO = dict(num_clients=342477, clients_per_round=60, rounds=1500, bits=42)


def eq62(c, r, alpha):
    """The paper's eq. 62 (Alg. 7's k_hat per step) at integer order alpha, mixture weight r."""
    k = np.arange(alpha + 1)
    log_binom = gammaln(alpha + 1) - gammaln(k + 1) - gammaln(alpha - k + 1)
    with np.errstate(divide="ignore"):
        terms = log_binom + k * np.log(r) + (alpha - k) * np.log1p(-r) + (k * k - k) * c * c / 2
    return float(logsumexp(terms)) / (alpha - 1)


# -- digest §4.6: DP-REC epsilon (3 decimals) and optimal lambda ------------------------------------------


@pytest.mark.parametrize("setting, c, eps, lam", [
    (MNIST, 0.545, 3.016, 4),
    (MNIST, 0.87, 5.980, 2),
    (FEMNIST, 0.77, 1.003, 18),
    (FEMNIST, 1.41, 3.016, 6),
    (FEMNIST, 1.745, 5.988, 3),
    (SHAKESPEARE, 1.435, 3.014, 4),
])
def test_table_oracles(setting, c, eps, lam):
    assert round(dprec_epsilon(c, **setting), 3) == eps
    acc = dprec_accountant(c, **setting)
    e, order = acc.epsilon_and_order(default_delta(setting["num_clients"]))
    assert round(e, 3) == eps and order == lam + 1
    assert acc.steps == setting["rounds"] * setting["clients_per_round"]


def test_stackoverflow_strict_is_infeasible_and_49_bits_gives_0935():
    delta = default_delta(SO["num_clients"])
    assert delta == pytest.approx(8.16e-7, rel=1e-3)
    acc = dprec_accountant(1.227, **SO)
    assert acc.delta_overhead == pytest.approx(1.107e-6, rel=1e-3)
    assert dprec_delta_overhead(1.227, 42, 90000) == acc.delta_overhead
    assert math.isinf(dprec_epsilon(1.227, **SO)) and math.isinf(acc.epsilon(delta))
    assert math.isnan(acc.epsilon_and_order(delta)[1])
    reason = acc.infeasibility(delta)
    assert "1.107e-06" in reason and "8.164e-07" in reason and "\n" not in reason
    assert acc.infeasibility(1e-3) is None
    assert round(dprec_epsilon(1.227, **{**SO, "bits": 49}), 3) == 0.935
    assert round(dprec_epsilon(1.227, **{**SO, "bits": 200}), 3) == 0.935


# -- DP-FedAvg baseline (classic conversion, q = B/N), 2 decimals ---------------------------------------


@pytest.mark.parametrize("z, n, b, t, eps", [
    (3.8, 100, 10, 1000, 3.09),
    (2.15, 100, 10, 1000, 6.24),
    (5.0, 3500, 100, 1500, 0.98),
    (1.85, 3500, 100, 1500, 3.03),
    (1.15, 3500, 100, 1500, 6.02),
    (2.15, 660, 66, 200, 3.03),
    (0.957, 342477, 60, 1500, 1.00),
])
def test_dpfedavg_oracles(z, n, b, t, eps):
    assert round(dpfedavg_epsilon(z, sampling_rate=b / n, rounds=t, delta=n ** -1.1), 2) == eps


def test_gaussian_events_use_the_classic_conversion():
    event = dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.GaussianDpEvent(2.0))
    ref = dp_accounting.rdp.RdpAccountant(orders=list(DPREC_ORDERS))
    ref.compose(event, 50)
    classic = np.min(ref.rdp - math.log(1e-5) / (np.asarray(DPREC_ORDERS) - 1.0))
    acc = DprecAccountant().compose(event, 50)
    assert acc.epsilon(1e-5) == pytest.approx(classic, rel=1e-12)
    assert acc.delta_overhead == 0.0 and acc.steps == 0
    assert acc.epsilon(1e-5) >= ref.get_epsilon(1e-5)  # the modern conversion is tighter


# -- local epsilon (real lambda), 2 decimals ----------------------------------------------------------------


@pytest.mark.parametrize("c, n, bits, eps", [
    (0.545, 100, 56, 2.75), (0.87, 100, 56, 4.67), (0.77, 3500, 56, 5.21), (1.41, 3500, 56, 10.44),
    (1.745, 3500, 56, 13.50), (1.435, 660, 77, 9.73), (1.227, 342477, 42, 10.69),
])
def test_local_epsilon_oracles(c, n, bits, eps):
    delta = default_delta(n)
    local = dprec_local_epsilon(c, bits=bits, delta=delta)
    assert round(local, 2) == eps
    # Closed form of min over real lambda of (lambda + 1) c^2 + L / lambda: c^2 + 2 c sqrt(L).
    big_l = -math.log(delta - 12 * math.exp(c * c) / 2**bits)
    assert local == pytest.approx(c * c + 2 * c * math.sqrt(big_l), rel=1e-8)
    # Integer lambda (the accountant on one DprecDpEvent) can only be larger.
    acc = DprecAccountant().compose(DprecDpEvent(c, bits))
    assert local <= acc.epsilon(delta) <= local + c * c


def test_local_epsilon_infeasible_is_inf():
    assert math.isinf(dprec_local_epsilon(3.0, bits=8, delta=1e-3))


# -- eq. 62 computed independently equals the accountant's per-step RDP -------------------------------------


@pytest.mark.parametrize("c, n", [(0.545, 100), (1.41, 3500), (1.227, 342477), (2.0, 10)])
def test_eq62_equals_per_step_rdp(c, n):
    acc = DprecAccountant().compose(dp_accounting.PoissonSampledDpEvent(1.0 / n, DprecDpEvent(c, 56)))
    per_step = acc.rdp / 2.0  # a DP-REC step counts twice (k_hat + m_hat <= 2 k_hat)
    for i, alpha in enumerate(DPREC_ORDERS):
        if alpha in (2, 3, 5, 17, 64, 150, 300):
            assert per_step[i] == pytest.approx(eq62(c, 1.0 / n, alpha), rel=1e-9, abs=1e-300)


def test_unsubsampled_step_is_twice_the_gaussian():
    c, bits = 0.7, 20
    acc = DprecAccountant().compose(DprecDpEvent(c, bits), 3)
    np.testing.assert_allclose(acc.rdp, 3 * np.asarray(DPREC_ORDERS) * c * c, rtol=1e-12)
    assert acc.delta_overhead == pytest.approx(3 * 12 * math.exp(c * c) / 2**bits, rel=1e-12)


# -- composition ---------------------------------------------------------------------------------------------


def test_round_event_is_b_steps_at_rate_one_over_n():
    c, bits, n, b, t = 0.9, 30, 50, 4, 25
    by_rounds = DprecAccountant().compose(dprec_round_event(c, bits, n, b), t)
    by_steps = DprecAccountant().compose(dp_accounting.PoissonSampledDpEvent(1 / n, DprecDpEvent(c, bits)), t * b)
    np.testing.assert_allclose(by_rounds.rdp, by_steps.rdp, rtol=1e-12)
    assert by_rounds.delta_overhead == pytest.approx(by_steps.delta_overhead, rel=1e-12)
    assert by_rounds.delta_overhead == pytest.approx(dprec_delta_overhead(c, bits, t * b), rel=1e-12)
    assert by_rounds.steps == t * b
    nested = DprecAccountant().compose(dp_accounting.ComposedDpEvent([
        dp_accounting.SelfComposedDpEvent(dprec_round_event(c, bits, n, b), t - 5),
        dp_accounting.NoOpDpEvent(),
        dp_accounting.SelfComposedDpEvent(dprec_round_event(c, bits, n, b), 5)]))
    np.testing.assert_allclose(nested.rdp, by_rounds.rdp, rtol=1e-12)
    delta = 1e-4
    assert nested.epsilon(delta) == pytest.approx(by_rounds.epsilon(delta), rel=1e-12)
    assert CentralLedger(dprec_round_event(c, bits, n, b), accountant="dprec").record(t).epsilon(delta) == \
        pytest.approx(by_rounds.epsilon(delta), rel=1e-12)


def test_mixed_dprec_and_gaussian_history():
    rec = dp_accounting.PoissonSampledDpEvent(0.01, DprecDpEvent(1.0, 40))
    gauss = dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0))
    both = DprecAccountant().compose(rec, 10).compose(gauss, 10)
    np.testing.assert_allclose(both.rdp, 3 * DprecAccountant().compose(gauss, 10).rdp, rtol=1e-12)
    assert both.steps == 10 and both.delta_overhead == pytest.approx(dprec_delta_overhead(1.0, 40, 10))


def test_delta_inverts_epsilon_and_includes_overhead():
    acc = dprec_accountant(0.87, **MNIST)
    delta = default_delta(100)
    assert acc.delta(acc.epsilon(delta)) == pytest.approx(delta, rel=1e-9)
    assert acc.delta(0.0) == 1.0
    so = dprec_accountant(1.227, **SO)
    assert so.delta(50.0) >= so.delta_overhead
    empty = DprecAccountant()
    assert empty.epsilon(1e-5) == 0.0 and empty.delta(0.0) == 0.0


def test_copy_and_rebuild_are_independent():
    acc = DprecAccountant().compose(dprec_round_event(0.5, 20, 10, 2), 3)
    twin = acc.copy().compose(dprec_round_event(0.5, 20, 10, 2), 3)
    assert twin.epsilon(1e-3) > acc.epsilon(1e-3)
    assert acc.rebuild().epsilon(1e-3) == acc.epsilon(1e-3)


# -- registry, events, validation ----------------------------------------------------------------------------


def test_registered_and_protocol():
    assert "dprec" in available_accountants()
    acc = make_accountant("dprec")
    assert isinstance(acc, DprecAccountant) and isinstance(acc, Accountant) and acc.name == "dprec"
    assert acc.orders[0] == 2 and acc.orders[-1] == 300 and len(acc.orders) == 299
    assert list(DprecAccountant(orders=[5, 3, 3.0]).orders) == [3, 5]


@pytest.mark.parametrize("event", [
    dp_accounting.LaplaceDpEvent(1.0),
    dp_accounting.SampledWithReplacementDpEvent(10, 2, dp_accounting.GaussianDpEvent(1.0)),
    dp_accounting.PoissonSampledDpEvent(0.1, dp_accounting.LaplaceDpEvent(1.0)),
    dp_accounting.SampledWithoutReplacementDpEvent(10, 2, DprecDpEvent(1.0, 7)),
    dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(1.0), 0),
])
def test_unsupported_events(event):
    acc = DprecAccountant()
    assert not acc.supports(event)
    with pytest.raises(UnsupportedEventError):
        acc.compose(event)


def test_event_validation_and_value_semantics():
    e = DprecDpEvent(1.5, 56.0)
    assert e.bits == 56 and isinstance(e.bits, int)
    assert e == DprecDpEvent(1.5, 56) and hash(e) == hash(DprecDpEvent(1.5, 56))
    for c in (0.0, -1.0, float("nan"), float("inf"), "1"):
        with pytest.raises(ValueError, match="clip_multiplier"):
            DprecDpEvent(c, 7)
    for b in (0, -3, 1.5, True):
        with pytest.raises(ValueError, match="bits"):
            DprecDpEvent(1.0, b)


@pytest.mark.parametrize("call, match", [
    (lambda: DprecAccountant(neighboring_relation="replace_one"), "neighboring_relation"),
    (lambda: DprecAccountant(orders=[1.5, 3]), "orders"),
    (lambda: DprecAccountant(orders=[1]), "orders"),
    (lambda: default_delta(1), "num_clients"),
    (lambda: dprec_epsilon(0.0, **MNIST), "clip_multiplier"),
    (lambda: dprec_epsilon(0.5, **{**MNIST, "rounds": -1}), "rounds"),
    (lambda: dprec_epsilon(0.5, **{**MNIST, "bits": 0}), "bits"),
    (lambda: dprec_epsilon(0.5, **MNIST, delta=1.0), "delta"),
    (lambda: dprec_round_event(0.5, 7, 0, 1), "num_clients"),
    (lambda: dprec_round_event(0.5, 7, 10, 0), "clients_per_round"),
    (lambda: dprec_local_epsilon(-1, bits=7, delta=1e-3), "clip_multiplier"),
    (lambda: dprec_delta_overhead(0.5, 7, -2), "steps"),
    (lambda: dpfedavg_epsilon(0.0, sampling_rate=0.1, rounds=3, delta=1e-5), "noise_multiplier"),
    (lambda: dpfedavg_epsilon(1.0, sampling_rate=1.5, rounds=3, delta=1e-5), "sampling_rate"),
    (lambda: calibrate_clip_multiplier(0.0, **MNIST), "target_epsilon"),
    (lambda: calibrate_clip_multiplier(0.01, **SO), "target_epsilon"),  # below the overhead-only floor
])
def test_bad_input_names_the_value(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# -- calibration ---------------------------------------------------------------------------------------------


def test_calibration_inverts_epsilon():
    c = calibrate_clip_multiplier(3.0, **MNIST)
    assert c == pytest.approx(0.545, abs=3e-3)  # the paper's c for MNIST eps = 3 (3.016 -> slightly smaller)
    assert dprec_epsilon(c, **MNIST) <= 3.0
    assert dprec_epsilon(c, **MNIST) == pytest.approx(3.0, abs=1e-6)
    assert dprec_epsilon(c + 1e-6, **MNIST) > 3.0  # the largest c meeting the target (tolerance 1e-9)
