"""van Dijk et al.'s privacy analysis against the paper's printed numbers (App. D.3.2, Examples 1-5; digest §8.7)
and its closed forms (Theorem 3.2's B, DP-Thm 3.1's schedule-free branch)."""
import math

import pytest
from hypothesis import given, settings, strategies as st

from jaxfl.accounting import increasing_samples, moments

E = math.e


def test_r_and_theorem_d3_b_match_the_papers_example_3_digits():
    r, u0, u1 = moments.r_factor(1 / E, 8.0)
    assert (r, u0, u1) == pytest.approx((5.7460446671129635, 0.4495546831835495, 0.15275204077456322), rel=1e-14)
    for gamma, b in ((0.0, 0.1368988621622339), (0.055680412559207, 0.12819685818649007),
                     (0.061482363524606794, 0.12734354695486969)):
        assert increasing_samples.theorem_d3_constants(1, 1 / E, 8.0, gamma)[1] == pytest.approx(b, rel=1e-13)
    assert increasing_samples.closed_form_b(1) == pytest.approx(0.5321797270231777, rel=1e-14)
    # K^- coefficient at eps 2
    assert increasing_samples.closed_form_b(1) * 2 ** (2 / 3) == pytest.approx(0.8447826585127415, rel=1e-14)
    with pytest.raises(ValueError, match="u_0"):
        moments.r_factor(1 / E, 1.0)


@pytest.mark.parametrize("sigma,p", [(3, 1), (5, 1), (8, 1), (3, 0), (8, 0), (1.5, 0.5)])
def test_r0_of_sigma_is_where_theorem_d3s_b_is_theorem_32s_closed_form(sigma, p):
    """The fixed point puts condition (24) at equality (alpha = r_0 / sigma, gamma = 0), where D.3's general B
    equals Theorem 3.2's closed form; and r_0 <= (sqrt 3 - 1) / 16 < 1/e."""
    r0 = increasing_samples.r0_of_sigma(sigma, p)
    assert 0 < r0 <= (math.sqrt(3) - 1) / 16
    assert increasing_samples.theorem_d3_constants(p, r0,
                                                   sigma)[1] == pytest.approx(increasing_samples.closed_form_b(p),
                                                                              rel=1e-12)


def test_r0_of_sigma_near_the_papers_rounded_values():
    """The paper prints r_0(3) = 0.0110, r_0(5) = 0.0202, r_0(8) = 0.0247; the fixed point is 0.01099, 0.02033,
    0.02480 (the paper's last two are ~0.5 % lower: fewer iterations, we take it)."""
    for sigma, printed in ((3, 0.0110), (5, 0.0202), (8, 0.0247)):
        assert increasing_samples.r0_of_sigma(sigma, 1) == pytest.approx(printed, rel=7e-3)
    with pytest.raises(ValueError, match="1.137"):
        increasing_samples.r0_of_sigma(1.0, 1)


def test_example_3_the_experiments_parameters():
    """N_c = 10,000, eps = 1, sigma = 8, K = 2.5 epochs, s_0 = 16, p = 1, r_0 = 1/e: three passes (T 175, 193, 195),
    q = 1.3216327772100012e-4, m = 12.106237281566509, B_priv = 5.78195582192962, delta = 5.502343985212556e-8,
    s_{i,c} = 16 + ceil(1.3216 i)."""
    sel = increasing_samples.select_parameters(16, 10_000, 1, 1.0, 8.0, 2.5, r0=1 / E, passes=3)
    first, second, third = sel.passes
    assert first.q_minus == pytest.approx(1.6420239582699232e-4, rel=1e-13)
    assert first.q_star == pytest.approx(4.229227601144147e-4, rel=1e-13)
    assert first.m == pytest.approx(9.744072197861225, rel=1e-13) and first.rounds == 175
    assert first.gamma == pytest.approx(0.055680412559207, rel=1e-12)
    assert second.q == pytest.approx(1.3483794319482493e-4, rel=1e-12) and second.rounds == 193
    assert second.m == pytest.approx(11.86609616024911, rel=1e-12)
    assert second.gamma == pytest.approx(0.061482363524606794, rel=1e-12)
    assert sel.q == pytest.approx(1.3216327772100012e-4, rel=1e-12) and sel.rounds == 195
    assert sel.m == pytest.approx(12.106237281566509, rel=1e-12)
    assert sel.gamma == pytest.approx(0.06208326811059748, rel=1e-12)
    assert sel.factor == pytest.approx(1.38361486085, rel=1e-11)
    assert sel.b_priv == pytest.approx(5.78195582192962, rel=1e-10)
    assert sel.delta == pytest.approx(5.502343985212556e-8, rel=1e-9)
    assert sel.sample_sizes == tuple(16 + math.ceil(1.3216327772100012 * i - 1e-9) for i in range(195))
    assert sel.aggregate_noise(8.0) == pytest.approx(math.sqrt(195) * 8)      # 112 (main text)
    # the constant schedule at the same budget: K / s_0 = 1563 rounds at sigma = B_priv 5.78, aggregate 229
    assert math.ceil(25_000 / 16) == 1563 and math.sqrt(1563) * 5.78 == pytest.approx(229, abs=0.5)
    # digest §11.8: 195 rounds hold 28,215 steps; 183 reach K = 25,000
    assert sum(sel.sample_sizes) == 28_215 and increasing_samples.rounds_to_reach(sel.sample_sizes, 25_000) == 183


def test_example_5_converges_in_three_passes():
    sel = increasing_samples.select_parameters(16, 25_000, 1, 2.0, 8.0, 5, r0=1 / E)
    assert [p.rounds for p in sel.passes] == [349, 364, 364]
    assert sel.passes[0].coef_minus == pytest.approx(0.21731339780957962, rel=1e-13)
    assert sel.passes[0].q_minus == pytest.approx(8.210119791349613e-5, rel=1e-12)
    assert sel.passes[0].q_star == pytest.approx(2.1146138005720736e-4, rel=1e-12)
    assert sel.passes[0].m == pytest.approx(7.795257758288984, rel=1e-12)
    assert sel.passes[0].gamma == pytest.approx(0.022335982115441216, rel=1e-12)
    assert sel.passes[1].coef_minus == pytest.approx(0.21158875536302124, rel=1e-12)
    assert sel.passes[1].q == pytest.approx(7.578229244195698e-5, rel=1e-12)
    assert sel.passes[1].m == pytest.approx(8.445244652504904, rel=1e-12)
    assert sel.passes[1].gamma == pytest.approx(0.02320122157281567, rel=1e-12)
    assert sel.passes[2].coef_minus == pytest.approx(0.21137208415301048, rel=1e-12)
    assert sel.q == pytest.approx(7.554972e-5, rel=1e-6) and sel.m == pytest.approx(8.471242187728482, rel=1e-12)
    assert sel.gamma == pytest.approx(0.023272643372880444, rel=1e-12)
    assert sel.factor == pytest.approx(1.1486274762710156, rel=1e-12)
    assert sel.b_priv == pytest.approx(6.964834261123335, rel=1e-12)
    assert sel.delta == pytest.approx(8.56732681988984e-22, rel=1e-9)
    assert sel.sample_sizes[:3] == (16, 18, 20)        # 16 + ceil(1.8887430727901684 i)


def test_example_1_first_and_second_pass():
    """N_c = 50,000, sigma = 3, r_0 = 0.0110 (rounded r_0(3)), eps = 2, K = 100 epochs: K^* binds. The paper reports
    the first pass's factor and delta, then a second pass's sequence (m = 4026.8, T = 50168) whose delta at
    eps = 8 it prints (its "eps = 6" is a typo, digest §8.7)."""
    one = increasing_samples.select_parameters(16, 50_000, 1, 2.0, 3.0, 100, r0=0.0110, passes=1)
    assert one.q == pytest.approx(6.72222222222222e-8, rel=1e-13)
    assert one.m == pytest.approx(4760.330578512398, rel=1e-13) and one.rounds == 54_546
    assert one.gamma == pytest.approx(0.08727185455418175, rel=1e-12)
    assert one.factor == pytest.approx(1.5222584705194226, rel=1e-13)
    assert one.b_priv == pytest.approx(1.9707559905883425, rel=1e-13)
    assert one.delta == pytest.approx(0.020570872204539764, rel=1e-12)
    # K^-'s bound on q at Theorem 3.2's closed-form B: (0.8447826585127415 / 100)^3
    assert (increasing_samples.closed_form_b(1) * 2 ** (2 / 3) / 100) ** 3 == pytest.approx(6.028856829700258e-7,
                                                                                            rel=1e-12)
    two = increasing_samples.select_parameters(16, 50_000, 1, 2.0, 3.0, 100, r0=0.0110, passes=2)
    assert two.m == pytest.approx(4026.8070594438323, rel=1e-13) and two.rounds == 50_168
    assert math.exp(-8.0 * two.b_priv ** 2 / 2) == pytest.approx(6.34577338911708e-8, rel=1e-12)


def test_examples_2_and_4():
    two = increasing_samples.select_parameters(16, 10_000, 1, 2.0, 5.0, 10, r0=0.0202, passes=1)
    assert two.q == pytest.approx(8.160800000000002e-7, rel=1e-13)
    assert two.m == pytest.approx(1960.5920988138412, rel=1e-12) and two.rounds == 4951
    assert two.gamma == pytest.approx(0.39599921204076777, rel=1e-12)
    assert two.factor == pytest.approx(5.31257308281, rel=1e-10) and two.b_priv == pytest.approx(0.94, abs=0.005)
    four = increasing_samples.select_parameters(16, 25_000, 1, 2.0, 8.0, 5, r0=0.0247, passes=1)
    assert four.passes[0].q_minus == pytest.approx(4.82308546e-3, rel=3e-3)   # at D.3's B for r_0 = 0.0247
    assert four.q == pytest.approx(9.53265625e-7, rel=1e-13) and four.rounds == 3239
    assert four.m == pytest.approx(671.376354308, rel=1e-11) and four.gamma == pytest.approx(0.20727889913, rel=1e-10)
    # the paper's factor divides r_0 by 5 instead of sigma = 8 (digest §11.12): its printed digits are that typo
    printed = increasing_samples.noise_factor(four.gamma, 0.0247, 5.0, 1)
    assert printed == pytest.approx(2.57106713, rel=1e-9) and four.factor < printed
    assert 8.0 / printed == pytest.approx(3.11154847209, rel=1e-10)
    assert math.exp(-2.0 * (8.0 / printed) ** 2 / 2) == pytest.approx(6.241319203188485e-5, rel=1e-9)


def test_theorem_31_is_schedule_free_in_its_second_branch():
    """DP-Thm 3.1's c_0 = 2 / (rho_hat c_1) branch gives sigma_min = sqrt(2 ln(1/delta) / eps) whatever the
    schedule (derived from the theorem, digest §8.3): the linear and the constant schedule of Example 3."""
    closed = increasing_samples.b_priv(1.0, 5.5e-8)
    linear = increasing_samples.theorem_31_sigma([16 + math.ceil(1.3216 * i) for i in range(195)], 10_000, 1.0, 5.5e-8,
                                                 8.0)
    constant = increasing_samples.theorem_31_sigma([16] * 1563, 10_000, 1.0, 5.5e-8, 8.0)
    for t in (linear, constant):
        assert t.branch == "2/(rho_hat x)" and t.sigma_min == pytest.approx(closed, rel=1e-12)
    assert linear.r0 == pytest.approx(8 * (16 + math.ceil(1.3216 * 194)) / 10_000)
    with pytest.raises(ValueError, match="r0"):
        increasing_samples.theorem_31_sigma([16], 10_000, 1.0, 1e-5, 8.0, r0=0.5)


def test_lemma_d1_bound_and_the_moments_accountant():
    """Lemma D.1 at lambda = 1: its leading term is s^2 * 2 / (N (N - s) sigma^2); invalid lambdas are inf; the
    composition over rounds adds log moments, so T equal rounds at eps give delta = min_l exp(T a(l) - l eps)."""
    a1 = moments.log_moment_bound(1, 16, 10_000, 8.0)
    lead = 16 ** 2 * 2 / (10_000 * 9_984 * 64)
    assert lead < a1 < 1.01 * lead
    assert moments.log_moment_bound(10_000, 16, 10_000, 8.0) == math.inf        # lambda > sigma^2 ln(N / (s sigma))
    manual = min(math.exp(100 * moments.log_moment_bound(l, 16, 10_000, 8.0) - l * 0.5) for l in range(1, 200))
    assert moments.moments_delta([16] * 100, 10_000, 8.0, 0.5, max_lambda=199) == pytest.approx(manual, rel=1e-12)
    eps = moments.moments_epsilon([16] * 100, 10_000, 8.0, 1e-6, max_lambda=199)
    assert moments.moments_delta([16] * 100, 10_000, 8.0, eps, max_lambda=199) == pytest.approx(1e-6, rel=1e-6)


def test_the_moments_accountant_object_composes_rounds_as_lemma_d1_adds_log_moments():
    """``make_accountant("vandijk-moments")``: a round is ``SampledWithReplacementDpEvent(N, s, Gaussian(z))``;
    composing T of them (one by one, with a count, or self-composed) gives the hand-computed tail bound of T
    times Lemma D.1's log moment; it refuses add/remove neighbours, unsampled and Poisson events."""
    import dp_accounting as dpa
    from jaxfl.accounting import UnsupportedEventError, make_accountant

    round_event = dpa.SampledWithReplacementDpEvent(10_000, 16, dpa.GaussianDpEvent(8.0))
    manual = min(math.exp(100 * moments.log_moment_bound(l, 16, 10_000, 8.0) - l * 0.5) for l in range(1, 200))
    one_by_one = make_accountant("vandijk-moments", max_lambda=199)
    for _ in range(100):
        one_by_one.compose(round_event)
    counted = make_accountant("vandijk-moments", max_lambda=199).compose(round_event, 100)
    nested = make_accountant("vandijk-moments", max_lambda=199).compose(
        dpa.ComposedDpEvent([dpa.SelfComposedDpEvent(round_event, 60), dpa.SelfComposedDpEvent(round_event, 40)]))
    for acc in (one_by_one, counted, nested):
        assert acc.delta(0.5) == pytest.approx(manual, rel=1e-12)
        assert acc.delta(acc.epsilon(1e-6)) == pytest.approx(1e-6, rel=1e-6)
    copy = counted.copy().compose(round_event, 50)
    assert copy.epsilon(1e-6) > counted.epsilon(1e-6)                    # the copy is independent
    assert make_accountant("vandijk-moments").epsilon(1e-6) == 0.0
    with pytest.raises(ValueError, match="add_or_remove_one"):
        make_accountant("vandijk-moments", neighboring_relation="add_or_remove_one")
    for bad in (dpa.GaussianDpEvent(8.0), dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(8.0))):
        with pytest.raises(UnsupportedEventError):
            make_accountant("vandijk-moments").compose(bad)


@pytest.mark.slow
def test_the_paper_the_moments_accountant_and_the_tight_accountant_on_example_3():
    """At Example 3's schedule and sigma 8 the direct moments accountant certifies far more than the paper's
    (eps 1, delta 5.5e-8), and the tight Poisson RDP epsilon is smaller still (digest §8.9: the bounds are loose)."""
    sel = increasing_samples.select_parameters(16, 10_000, 1, 1.0, 8.0, 2.5, r0=1 / E, passes=3)
    moments_eps = moments.moments_epsilon(sel.sample_sizes, 10_000, 8.0, sel.delta)
    tight = moments.tight_epsilon(sel.sample_sizes, 10_000, 8.0, sel.delta)
    assert tight < moments_eps < 1.0
    assert moments.tight_epsilon(sel.sample_sizes, 10_000, 8.0, sel.delta, accountant="pld") == pytest.approx(tight,
                                                                                                              rel=0.15)
    # the same rounds are each a Poisson-sampled Gaussian: one round's RDP epsilon equals the library's event's
    from jaxfl.accounting import epsilon_for
    assert moments.tight_epsilon([16] * 50, 10_000, 3.0, 1e-5) == pytest.approx(epsilon_for(3.0, 16 / 10_000, 50, 1e-5),
                                                                           rel=1e-9)


def test_theorem_32_cases():
    """Case 1 below K^-, none between K^- and K^+, and the K of Example 3's own 195 rounds (28,376 by D.3's
    indexing) exceeds its K^- (24,983): the selection's T formula ignores the offset m (digest §11.8)."""
    sel = increasing_samples.select_parameters(16, 10_000, 1, 1.0, 8.0, 2.5, r0=1 / E, passes=3)
    full = increasing_samples.theorem_32(1, sel.q, sel.m, 195, 10_000, 1.0, 8.0, r0=1 / E)
    assert full.k > full.bounds.k_minus and full.case is None and full.delta == 1.0
    short = increasing_samples.theorem_32(1, sel.q, sel.m, 150, 10_000, 1.0, 8.0, r0=1 / E)
    assert short.k <= short.bounds.k_minus and short.case == 1
    assert short.delta == pytest.approx(math.exp(-short.b_priv ** 2 / 2))
    assert short.b_priv == pytest.approx(8.0 / increasing_samples.noise_factor(sel.m / 150, 1 / E, 8.0, 1))


@settings(max_examples=30, deadline=None)
@given(st.floats(1.2, 20.0), st.floats(0.0, 1.0), st.floats(0.0, 0.5))
def test_d3_b_falls_and_a_grows_with_gamma(sigma, p, gamma):
    """Theorem D.3's B falls and A grows with gamma (so K^- shrinks and K^+ grows as m / T does); 0 < B <= A."""
    r0 = increasing_samples.r0_of_sigma(sigma, p)
    a0, b0 = increasing_samples.theorem_d3_constants(p, r0, sigma, 0.0)
    a, b = increasing_samples.theorem_d3_constants(p, r0, sigma, gamma)
    assert b > 0 and a >= b * (1 - 1e-12)
    assert b <= b0 * (1 + 1e-12) and a >= a0 * (1 - 1e-12)


def test_bad_inputs_name_the_value():
    with pytest.raises(ValueError, match="sample_sizes"):
        moments.moments_delta([0, 16], 100, 8.0, 1.0)
    with pytest.raises(ValueError, match="p must be > 0"):
        increasing_samples.select_parameters(16, 10_000, 0, 1.0, 8.0, 2.5)
    with pytest.raises(ValueError, match="k="):
        increasing_samples.rounds_to_reach([16, 16], 100)
    with pytest.raises(ValueError, match="r0"):
        moments.log_moment_bound(1, 16, 10_000, 8.0, r0=0.001)     # s / N > r0 / sigma
