"""Published oracle values A1-A12 (shared/spec/oracles.md).

Neighbouring relation: add/remove one record (dp_accounting's default) unless stated. "Current conversion"
is dp_accounting's RDP -> (eps, delta) conversion (Balle et al. 2020); orders as stated per row.
"""
import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant
from scipy.stats import norm

from jaxfl.accounting import (PldAccountant, RdpAccountant, analytic_gaussian_epsilon, analytic_gaussian_sigma,
                              epsilon_for, gaussian_event, make_accountant, noise_multiplier_for, rdp_to_delta,
                              rdp_to_epsilon)

TF_ORDERS_TUTORIAL = [1.25, 1.5, 1.75, 2., 2.25, 2.5, 3., 3.5, 4., 4.5] + list(range(5, 64)) + [128, 256, 512]


def test_a1_poisson_gaussian_default_orders():
    # Opacus reports 7.32911117143 with its own RDP code and orders; dp_accounting's default orders give:
    eps = epsilon_for(1.5, 0.04, 2250, 1e-5, accountant="rdp")
    assert eps == pytest.approx(7.3293347, abs=1e-6)


def test_a2_tf_privacy_best_order_19():
    acc = RdpAccountant().compose(gaussian_event(1.3, 150 / 60000, 6000))
    eps, order = acc.epsilon_and_order(1e-5)
    assert eps == pytest.approx(0.7242234026109595, rel=1e-9)
    assert order == 19


def test_a3_tf_privacy_order_13():
    acc = RdpAccountant().compose(gaussian_event(1.0, 0.001, 30000))
    eps, order = acc.epsilon_and_order(1e-7)
    assert eps == pytest.approx(1.4154988495444842, rel=1e-9)
    assert order == 13


def test_a4_abadi_mnist_current_conversion():
    eps = epsilon_for(1.1, 256 / 60000, 14063, 1e-5)
    assert eps == pytest.approx(2.59666, abs=1e-5)


def test_a4_abadi_mnist_old_conversion_tf_orders():
    # Old conversion eps = min_a rdp(a) + log(1/delta)/(a-1), on the raw RDP curve of our accountant.
    acc = RdpAccountant(orders=TF_ORDERS_TUTORIAL).compose(gaussian_event(1.1, 256 / 60000, 14063))
    old = acc.rdp + math.log(1 / 1e-5) / (acc.orders - 1)
    assert old.min() == pytest.approx(3.0092, abs=1e-4)
    assert acc.epsilon(1e-5) < old.min()  # the modern conversion is tighter


def test_a5_pld_epsilon():
    eps = epsilon_for(3.0, 0.1, 512, 1e-6, accountant="pld")
    assert eps == pytest.approx(3.76969, abs=1e-4)


def test_a5_pld_sigma_calibration():
    sigma = noise_multiplier_for(1.0, 0.1, 512, 1e-6, accountant="pld", tol=1e-4)
    assert sigma == pytest.approx(9.66183, abs=2e-4)
    assert epsilon_for(sigma, 0.1, 512, 1e-6, accountant="pld") <= 1.0


def test_a6_jax_privacy_orders():
    orders = np.concatenate([np.linspace(1.01, 8, 50), np.arange(8, 64), np.linspace(65, 512, 10)])
    eps = epsilon_for(4.0, 1024 / 50000, 10000, 1e-5, accountant="rdp", orders=orders)
    assert eps == pytest.approx(2.27535, rel=1e-5)


def test_a7_pld_gaussian_mu_one():
    acc = PldAccountant().compose(dp_accounting.GaussianDpEvent(math.sqrt(3)), 1)
    acc.compose(dp_accounting.GaussianDpEvent(math.sqrt(3)), 2)
    exact = norm.cdf(-0.5) - math.e * norm.cdf(-1.5)
    assert exact == pytest.approx(0.126936, abs=1e-6)
    assert acc.delta(1.0) == pytest.approx(exact, abs=1e-5)
    assert acc.delta(1.0) >= exact - 1e-9  # pessimistic estimate
    assert acc.epsilon(exact) == pytest.approx(1.0, abs=1e-3)


def test_a8_pld_poisson_gaussian():
    acc = make_accountant("pld").compose(gaussian_event(0.5, 0.2, 3))
    assert acc.delta(1.0) == pytest.approx(0.15594, abs=1e-3)


A9 = {2: 1.7181342207453427, 4: 3.6315404891075524, 10: 382.7041889494864}


def test_a9_raw_rdp_via_dp_accounting_helper():
    raw = rdp_privacy_accountant._compute_rdp_poisson_subsampled_gaussian(0.01, 1.0, list(A9)) * 10000
    np.testing.assert_allclose(raw, list(A9.values()), rtol=1e-10)


def test_a9_raw_rdp_of_accountant():
    acc = RdpAccountant(orders=list(A9)).compose(gaussian_event(1.0, 0.01, 10000))
    np.testing.assert_allclose(acc.rdp, list(A9.values()), rtol=1e-10)


def test_a10_pure_dp_rdp_curve():
    orders = list(range(2, 33))
    eps, order = rdp_to_epsilon(orders, [1.1] * len(orders), 1e-5)
    assert eps == pytest.approx(1.32783806176, abs=1e-10)
    assert order == 32
    delta, order = rdp_to_delta(orders, [1.1] * len(orders), 1.32783806176)
    assert delta == pytest.approx(1e-5, rel=1e-8)
    assert order == 32


def test_a11_gaussian_exactly_one_one_em6():
    orders = [0.001 * i for i in range(1000, 100000)]
    acc = RdpAccountant(orders=orders).compose(dp_accounting.GaussianDpEvent(4.530877117))
    assert acc.epsilon(1e-6) == pytest.approx(1.0, abs=1e-7)
    assert acc.delta(1.0) == pytest.approx(1e-6, rel=1e-6)
    # the exact (analytic) epsilon is smaller: RDP is an upper bound
    assert analytic_gaussian_epsilon(4.530877117, 1e-6) < 1.0


def test_a12_analytic_gaussian():
    assert analytic_gaussian_epsilon(1.0, 1e-5) == pytest.approx(4.377178, abs=1e-6)
    assert analytic_gaussian_sigma(1.0, 1e-5) == pytest.approx(3.730632, abs=1e-6)
    # sensitivity scales sigma linearly
    assert analytic_gaussian_sigma(1.0, 1e-5, sensitivity=2.0) == pytest.approx(2 * 3.730632, abs=2e-6)
    assert analytic_gaussian_epsilon(2.0, 1e-5, sensitivity=2.0) == pytest.approx(4.377178, abs=1e-6)
