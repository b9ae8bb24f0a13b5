"""The papers' closed forms (Lowy & Razaviyayn digest §2.3)."""
import math

import numpy as np
import pytest

from jaxfl.accounting import closed_forms as cf


def test_gaussian_sigma_hand_value():
    # sqrt(2 ln(1.25 / 1e-5)) / 0.5 = sqrt(2 * 11.736069...) * 2
    assert cf.gaussian_sigma(0.5, 1e-5) == pytest.approx(9.689610525210778, rel=1e-12)
    assert cf.gaussian_sigma(0.5, 1e-5, sensitivity=3.0) == pytest.approx(3 * 9.689610525210778, rel=1e-12)


@pytest.mark.parametrize("eps", [0.05, 0.3, 0.7, 1.0])
@pytest.mark.parametrize("delta", [1e-3, 1e-6])
def test_gaussian_sigma_is_sound(eps, delta):
    # the classic form over-noises: its exact (Balle-Wang) epsilon is below the target
    assert cf.analytic_gaussian_epsilon(cf.gaussian_sigma(eps, delta), delta) <= eps


def test_gaussian_sigma_rejects_eps_above_one():
    with pytest.raises(ValueError, match="1.5"):
        cf.gaussian_sigma(1.5, 1e-5)
    with pytest.raises(ValueError, match="epsilon"):
        cf.gaussian_sigma(0.0, 1e-5)
    with pytest.raises(ValueError, match="delta"):
        cf.gaussian_sigma(0.5, 1.5)


def test_bun_steinke_is_twice_classic_and_sound():
    assert cf.gaussian_sigma_bun_steinke(0.5, 1e-5) == pytest.approx(2 * cf.gaussian_sigma(0.5, 1e-5))
    delta = 1e-5
    for eps in [0.1, 1.0, 5.0, 20.0, 8 * math.log(1 / delta)]:
        sigma = cf.gaussian_sigma_bun_steinke(eps, delta)
        assert sigma == pytest.approx(math.sqrt(8 * math.log(1.25 / delta)) / eps)
        assert cf.analytic_gaussian_epsilon(sigma, delta) <= eps
    with pytest.raises(ValueError, match="8 ln"):
        cf.gaussian_sigma_bun_steinke(8 * math.log(1 / delta) + 1e-6, delta)


def test_analytic_gaussian_round_trip():
    sigma = cf.analytic_gaussian_sigma(0.8, 1e-6, sensitivity=2.0)
    assert cf.analytic_gaussian_epsilon(sigma, 1e-6, sensitivity=2.0) == pytest.approx(0.8, abs=1e-8)
    assert sigma < cf.gaussian_sigma(0.8, 1e-6, sensitivity=2.0)


def test_advanced_composition_hand_value():
    # sqrt(2 * 100 * ln(1e5)) * 0.1 + 100 * 0.1 * (e^0.1 - 1) = 4.7985261... + 1.0517091... ; delta 100e-7 + 1e-5
    eps, delta = cf.advanced_composition(0.1, 1e-7, 100, 1e-5)
    assert eps == pytest.approx(5.8502350929445575, rel=1e-12)
    assert delta == pytest.approx(2e-5, rel=1e-12)


def test_advanced_composition_heterogeneous_form():
    per_step = [0.1, 0.2, 0.05]
    eps, delta = cf.advanced_composition(per_step, [1e-7, 0.0, 2e-7], None, 1e-6)
    expected = math.sqrt(2 * math.log(1e6) * sum(e * e for e in per_step)) + sum(
        e * math.expm1(e) for e in per_step)
    assert eps == pytest.approx(expected, rel=1e-12)
    assert delta == pytest.approx(1.3e-6, rel=1e-12)
    # equal steps reduce to the homogeneous form
    assert cf.advanced_composition([0.1] * 100, 1e-7, 100, 1e-5)[0] == pytest.approx(
        cf.advanced_composition(0.1, 1e-7, 100, 1e-5)[0], rel=1e-12)
    with pytest.raises(ValueError, match="steps"):
        cf.advanced_composition([0.1, 0.2], 0.0, 3, 1e-6)


@pytest.mark.parametrize("eps0, delta0, rounds", [(1.0, 1e-5, 100), (0.1, 1e-6, 7), (5.0, 1e-3, 1000),
                                                  (2 * math.log(2 / 1e-4), 1e-4, 10)])
def test_per_step_split_round_trips(eps0, delta0, rounds):
    eps_step, delta_step = cf.advanced_composition_per_step(eps0, delta0, rounds)
    assert eps_step == pytest.approx(eps0 / (2 * math.sqrt(2 * rounds * math.log(2 / delta0))))
    assert delta_step == pytest.approx(delta0 / (2 * rounds))
    eps, delta = cf.advanced_composition(eps_step, delta_step, rounds, delta0 / 2)
    assert eps <= eps0
    assert delta == pytest.approx(delta0, rel=1e-12)


def test_per_step_split_needs_paper_assumption():
    with pytest.raises(ValueError, match="2 ln"):
        cf.advanced_composition_per_step(2 * math.log(2 / 1e-4) * 1.01, 1e-4, 10)


def test_per_step_split_needs_small_step_epsilon():
    # eps0 = 2 ln(2/delta0) with R = 1 meets the paper's stated assumption, but eps~ = 2.2 > 1 and
    # advanced composition would then give 28.3 > eps0 = 19.8: the split refuses.
    eps0 = 2 * math.log(2 / 1e-4)
    with pytest.raises(ValueError, match="eps~"):
        cf.advanced_composition_per_step(eps0, 1e-4, 1)
    eps_step = eps0 / (2 * math.sqrt(2 * math.log(2 / 1e-4)))
    assert cf.advanced_composition(eps_step, 1e-4 / 2, 1, 1e-4 / 2)[0] > eps0


def test_ullman_rule():
    assert cf.amplify_with_replacement_ullman(0.5, 10, 1000) == pytest.approx(0.01)
    assert cf.amplify_with_replacement_ullman(1.0, 1, 2) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="1.2"):
        cf.amplify_with_replacement_ullman(1.2, 10, 1000)
    with pytest.raises(ValueError, match="sample_size"):
        cf.amplify_with_replacement_ullman(0.5, 0, 1000)


def test_lowy_theorem_2_1_sigma_from_the_pieces():
    """Per-step split + Ullman + classic Gaussian with Delta = 2L/K reproduce Thm 2.1's closed form
    sigma^2 = 256 L^2 R ln(2.5R/delta0) ln(2/delta0) / (n^2 eps0^2)."""
    L, n, R, eps0, delta0 = 1.5, 1000, 50, 1.0, 1e-5
    eps_round, delta_round = cf.advanced_composition_per_step(eps0, delta0, R)
    K = math.ceil(eps0 * n / (4 * math.sqrt(2 * R * math.log(2 / delta0))))  # the paper's K condition
    eps_inner = n * eps_round / (2 * K)  # eps' of the minibatch mechanism, <= 1 by the K condition
    assert eps_inner <= 1.0
    assert cf.amplify_with_replacement_ullman(eps_inner, K, n) == pytest.approx(eps_round)
    sigma = cf.gaussian_sigma(eps_inner, delta_round, sensitivity=2 * L / K)
    paper = 256 * L**2 * R * math.log(2.5 * R / delta0) * math.log(2 / delta0) / (n**2 * eps0**2)
    assert sigma**2 == pytest.approx(paper, rel=1e-12)


def test_amplify_poisson():
    assert cf.amplify_poisson(0.7, 1e-6, 1.0) == pytest.approx((0.7, 1e-6))
    eps, delta = cf.amplify_poisson(1.0, 1e-6, 0.01)
    assert eps == pytest.approx(math.log(1 + 0.01 * (math.e - 1)), rel=1e-12)
    assert delta == pytest.approx(1e-8)
    assert cf.amplify_poisson(1e-3, 0.0, 0.1)[0] == pytest.approx(0.1 * 1e-3, rel=1e-3)
    with pytest.raises(ValueError, match="sampling_rate"):
        cf.amplify_poisson(1.0, 0.0, 0.0)


def test_amplify_without_replacement():
    assert cf.amplify_without_replacement(0.7, 1e-6, 50, 50) == pytest.approx((0.7, 1e-6))
    eps, delta = cf.amplify_without_replacement(2.0, 1e-5, 10, 1000)
    assert eps == pytest.approx(math.log1p(0.01 * math.expm1(2.0)), rel=1e-12)
    assert delta == pytest.approx(1e-7)
    with pytest.raises(ValueError, match="sample_size"):
        cf.amplify_without_replacement(1.0, 0.0, 11, 10)


def test_parallel_composition():
    assert cf.parallel_composition([0.5, 2.0, 1.0], [1e-6, 1e-7, 0.0]) == (2.0, 1e-6)
    assert cf.parallel_composition(0.3) == (0.3, 0.0)
    assert cf.parallel_composition(np.array([0.1, 0.2])) == (0.2, 0.0)
    with pytest.raises(ValueError, match="deltas"):
        cf.parallel_composition([0.1], [1.0])
