"""Lowy et al.'s noise formulas: each function equals the digest's expression, computed here from the formula
with independent numbers; the flagged typos (printed vs corrected) differ by the expected factors."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfl.accounting import sgd_noise
from jaxfl.accounting import variance_reduced_noise as ln


# ------------------------------------------------------------------------------------------------
# Noisy Prox-SGD (Alg. 6 / Thm E.1)


def test_sigma_prox_sgd_corrected_and_printed():
    # L = 3, K = 40, eps = 2, delta = 1e-6: ln(1e6) = 13.815510557964274
    lg = 13.815510557964274
    corrected = math.sqrt(16 * 9 * lg / (4 * 1600))  # 16 L^2 ln(1/delta) / (eps^2 K^2)
    printed = math.sqrt(8 * 9 * lg / (4 * 1600))
    assert ln.sigma_prox_sgd(3.0, 40, 2.0, 1e-6) == pytest.approx(corrected, rel=1e-12)
    assert ln.sigma_prox_sgd(3.0, 40, 2.0, 1e-6, printed=True) == pytest.approx(printed, rel=1e-12)
    assert corrected == pytest.approx(0.55754, rel=1e-4)  # sqrt(144 * 13.8155 / 6400) = sqrt(0.310849)
    assert ln.sigma_prox_sgd(3.0, 40, 2.0, 1e-6) / ln.sigma_prox_sgd(3.0, 40, 2.0, 1e-6, printed=True) == \
        pytest.approx(math.sqrt(2), rel=1e-12)


def test_sigma_prox_sgd_is_prop_d2_with_sensitivity_2L_over_K():
    """Prop. D.2: sigma^2 = 4 Delta^2 ln(1/delta)/eps^2 is eps^2/(8 ln(1/delta))-zCDP; Prop. D.1 turns it
    into (rho + 2 sqrt(rho ln(1/delta)), delta) <= (eps, delta). The printed sigma's zCDP does not."""
    L, K, eps, delta = 1.5, 25, 1.0, 1e-5
    for printed, ok in ((False, True), (True, False)):
        sigma = ln.sigma_prox_sgd(L, K, eps, delta, printed=printed)
        rho = (2 * L / K) ** 2 / (2 * sigma**2)
        eps_dp = rho + 2 * math.sqrt(rho * math.log(1 / delta))
        assert (eps_dp <= eps * (1 + 1e-12)) is ok


def test_sigma_prox_sgd_ranges():
    with pytest.raises(ValueError, match="epsilon"):
        ln.sigma_prox_sgd(1.0, 10, 5.0, 0.1)  # 2 ln(10) = 4.6 < 5
    assert ln.sigma_prox_sgd(1.0, 10, 5.0, 0.1, printed=True) > 0  # printed range: min(8 ln 10, 15)
    with pytest.raises(ValueError, match="epsilon"):
        ln.sigma_prox_sgd(1.0, 10, 16.0, 1e-9, printed=True)  # > 15
    with pytest.raises(ValueError, match="batch_size"):
        ln.sigma_prox_sgd(1.0, 0, 1.0, 1e-5)
    with pytest.raises(ValueError, match="delta"):
        ln.sigma_prox_sgd(1.0, 10, 1.0, 1.5)
    with pytest.raises(ValueError, match="lipschitz"):
        ln.sigma_prox_sgd(-1.0, 10, 1.0, 1e-5)


def test_prox_sgd_rounds_and_batch():
    # kappa = 4, mu = 0.5, Delta = 2, L = 1, M = 10, n = 500, eps = 1, delta = 1e-4, d = 100:
    # min{M n, eps^2 n^2 M / (d ln(1/delta))} = min{5000, 2.5e6 / (100 * 9.21034)} = 2714.336...
    # R = ceil(2 * 4 * ln(1 * 2714.336)) = ceil(8 * 7.90631) = ceil(63.25) = 64
    priv = 2.5e6 / (100 * math.log(1e4))
    expected = math.ceil(8 * math.log(0.5 * 2 / 1 * min(5000, priv)))
    assert expected == 64
    assert ln.prox_sgd_rounds(4.0, 0.5, 2.0, 1.0, 10, 500, 1.0, 1e-4, 100) == 64
    # SDP (part 2): N = 20 -> eps^2 n^2 N^2 / (d ln) = 2.5e5 * 400 / 921.03 > M n, so min = 5000
    assert ln.prox_sgd_rounds(4.0, 0.5, 2.0, 1.0, 10, 500, 1.0, 1e-4, 100, num_silos=20) == \
        math.ceil(8 * math.log(5000))
    # argument <= 1: at least one round
    assert ln.prox_sgd_rounds(4.0, 1e-6, 1e-3, 10.0, 1, 10, 1.0, 1e-4, 100) == 1
    assert ln.prox_sgd_batch(500, 64) == 7  # floor(500 / 64)
    assert ln.prox_sgd_batch(1238, 25) == 49
    with pytest.raises(ValueError, match="rounds"):
        ln.prox_sgd_batch(10, 11)


# ------------------------------------------------------------------------------------------------
# FedProx-PL-SVRG (Thm E.2)


def test_sigma_pl_svrg_as_stated_and_variants():
    # L = 2, n = 800, eps = 1.5, delta = 1e-5, S = 3, E = 4, R = 40
    L, n, eps, delta, S, E, R = 2.0, 800, 1.5, 1e-5, 3, 4, 40
    v1 = 256 * 4 * 3 * 4 * math.log(2e5) * math.log(5 * 4 / 1e-5) / (2.25 * 640000)
    v2 = 1024 * 4 * 3 * 40 * math.log(2e5) * math.log(2.5 * 40 / 1e-5) / (2.25 * 640000)
    s1, s2 = ln.sigma_pl_svrg(L, n, eps, delta, restarts=S, epochs=E, rounds=R)
    assert (s1, s2) == (pytest.approx(math.sqrt(v1), rel=1e-12), pytest.approx(math.sqrt(v2), rel=1e-12))
    assert s1 == pytest.approx(1.2293, rel=1e-4)  # sqrt(12288 * 12.2061 * 14.5087 / 1.44e6) = sqrt(1.5112)
    s1p, s2p = ln.sigma_pl_svrg(L, n, eps, delta, restarts=S, epochs=E, rounds=R, proof_log=True)
    assert s1p == s1
    assert s2p == pytest.approx(math.sqrt(v2 * math.log(5 * 40 / 1e-5) / math.log(2.5 * 40 / 1e-5)), rel=1e-12)
    _, s2c = ln.sigma_pl_svrg(L, n, eps, delta, restarts=S, epochs=E, rounds=R, corrected_sensitivity=True)
    assert s2c == pytest.approx(2 * s2, rel=1e-12)
    with pytest.raises(ValueError, match="epsilon"):
        ln.sigma_pl_svrg(L, n, 16.0, 1e-9, restarts=S, epochs=E, rounds=R)
    with pytest.raises(ValueError, match="restarts"):
        ln.sigma_pl_svrg(L, n, eps, delta, restarts=0, epochs=E, rounds=R)


def test_sigma_pl_svrg_sigma1_follows_the_proof_chain():
    """sigma1: checkpoint sensitivity 2L/n, classic Gaussian at (eps1~/2, delta1~/2), eps1~ =
    eps/(2 sqrt(2E ln(2/delta))), delta1~ = delta/(2E), times S."""
    L, n, eps, delta, E = 1.0, 1000, 1.0, 1e-6, 5
    e1, d1 = eps / (2 * math.sqrt(2 * E * math.log(2 / delta))), delta / (2 * E)
    var = 2 * (2 * L / n) ** 2 * math.log(1.25 / (d1 / 2)) / (e1 / 2) ** 2
    s1, _ = ln.sigma_pl_svrg(L, n, eps, delta, restarts=1, epochs=E, rounds=50)
    assert s1 == pytest.approx(math.sqrt(var), rel=1e-12)


def test_pl_svrg_batch_and_step_size():
    # eps n / (4 sqrt(2 S R ln(2/delta))) = 2 * 1000 / (4 sqrt(2 * 2 * 30 * ln(2e4))) = 2000 / (4 * 34.434) = 14.52
    raw = 2 * 1000 / (4 * math.sqrt(2 * 2 * 30 * math.log(2e4)))
    assert ln.pl_svrg_batch(1000, 2.0, 1e-4, 2, 30) == math.ceil(raw) == 15
    assert ln.pl_svrg_batch(1000, 2.0, 1e-4, 2, 30) == sgd_noise.min_batch_theorem(1000, 60, 2.0, 1e-4)
    assert ln.pl_svrg_batch(10, 0.01, 1e-4, 1, 1) == 1
    # eta = (1/(8 beta)) min(1, K^1.5 sqrt(M)/n): K = 16, M = 4, n = 1000 -> 64 * 2 / 1000 = 0.128
    assert ln.pl_svrg_step_size(2.0, 16, 4, 1000) == pytest.approx(0.128 / 16, rel=1e-12)
    assert ln.pl_svrg_step_size(2.0, 100, 4, 1000) == pytest.approx(1 / 16, rel=1e-12)  # capped at 1


# ------------------------------------------------------------------------------------------------
# FedProx-SPIDER (Alg. 3 / Thm F.1)


def test_sigma_spider_formulas():
    # L = 2, n = 1238, eps = 3, delta = 1/n^2, R = 50, q = 5, beta = 4
    L, n, eps, R, q, beta = 2.0, 1238, 3.0, 50, 5, 4.0
    delta = 1 / n**2
    lg = 2 * math.log(1238)  # ln(1/delta) = 14.2424...
    s1, s2, sh2 = ln.sigma_spider(L, n, eps, delta, rounds=R, phase_length=q, smoothness=beta)
    assert s1 == pytest.approx(math.sqrt(16 * 4 * lg * 10 / (9 * n**2)), rel=1e-12)  # R/q = 10
    assert s2 == pytest.approx(math.sqrt(16 * 16 * 50 * lg / (9 * n**2)), rel=1e-12)
    assert sh2 == pytest.approx(math.sqrt(64 * 4 * 50 * lg / (9 * n**2)), rel=1e-12)
    assert s1 == pytest.approx(0.02570, rel=1e-3)  # sqrt(64 * 14.2424 * 10 / 13793796) = sqrt(6.6082e-4)


def test_sigma_spider_checkpoint_factor_max_R_over_q_1():
    base = ln.sigma_spider(1.0, 500, 1.0, 1e-5, rounds=10, phase_length=10)[0]
    assert base == pytest.approx(math.sqrt(16 * math.log(1e5) / 500**2), rel=1e-12)
    # q > R: only one checkpoint, factor 1 (not R/q < 1)
    assert ln.sigma_spider(1.0, 500, 1.0, 1e-5, rounds=10, phase_length=40)[0] == pytest.approx(base, rel=1e-12)
    assert ln.sigma_spider(1.0, 500, 1.0, 1e-5, rounds=10, phase_length=1)[0] == pytest.approx(
        base * math.sqrt(10), rel=1e-12)
    # q = 1 (MB-SGD): sigma1 = sqrt(16 L^2 R ln(1/delta)) / (eps n) = sigma_hat2 / 2
    s1, _, sh2 = ln.sigma_spider(1.0, 500, 1.0, 1e-5, rounds=10, phase_length=1)
    assert s1 == pytest.approx(sh2 / 2, rel=1e-12)


def test_sigma_spider_authors_code_drops_the_checkpoint_factor():
    """The authors' code computes sigma1^2 = 16 L^2 ln(1/delta) / (eps^2 n^2) whatever R and q; the difference
    steps' cap is the paper's."""
    for rounds, q in ((10, 1), (10, 4), (10, 40), (25, 2)):
        paper = ln.sigma_spider(1.0, 500, 1.0, 1e-5, rounds=rounds, phase_length=q)
        code = ln.sigma_spider(1.0, 500, 1.0, 1e-5, rounds=rounds, phase_length=q, calibration="authors-code")
        assert code[0] == pytest.approx(math.sqrt(16 * math.log(1e5) / 500**2), rel=1e-12)
        assert code[0] ** 2 == pytest.approx(paper[0] ** 2 * min(q / rounds, 1.0), rel=1e-12)
        assert code[1:] == paper[1:]
    with pytest.raises(ValueError, match="calibration"):
        ln.sigma_spider(1.0, 500, 1.0, 1e-5, rounds=10, phase_length=1, calibration="code")


def test_sigma_spider_without_smoothness_is_infinite_sigma2():
    s1, s2, sh2 = ln.sigma_spider(1.0, 500, 1.0, 1e-5, rounds=10, phase_length=2)
    assert s2 == math.inf and math.isfinite(sh2)
    with pytest.raises(ValueError, match="epsilon"):
        ln.sigma_spider(1.0, 500, 30.0, 1e-5, rounds=10, phase_length=2)  # 2 ln(1e5) = 23.0
    with pytest.raises(ValueError, match="phase_length"):
        ln.sigma_spider(1.0, 500, 1.0, 1e-5, rounds=10, phase_length=0)


def test_spider_per_step_zcdp_matches_the_proof():
    """Each difference step: sensitivity (1/n) min(2 beta ||dw||, 4L) under noise min(sigma2 ||dw||,
    sigma_hat2) gives rho <= eps^2 / (8 R ln(1/delta)) in both branches of the min."""
    L, beta, n, eps, delta, R = 1.0, 3.0, 400, 2.0, 1e-6, 30
    _, s2, sh2 = ln.sigma_spider(L, n, eps, delta, rounds=R, phase_length=3, smoothness=beta)
    target = eps**2 / (8 * R * math.log(1 / delta))
    for dw in (1e-4, 0.01, 0.1, 0.6667, 1.0, 10.0):
        sens = min(2 * beta * dw, 4 * L) / n
        sd = ln.spider_difference_sigma(s2, sh2, dw)
        assert sens**2 / (2 * sd**2) <= target * (1 + 1e-9)


def test_spider_difference_sigma_min_rule():
    assert ln.spider_difference_sigma(2.0, 1.0, 0.25) == pytest.approx(0.5)  # sqrt(min(4 * 0.0625, 1))
    assert ln.spider_difference_sigma(2.0, 1.0, 3.0) == pytest.approx(1.0)   # capped
    assert ln.spider_difference_sigma(2.0, 1.0, 0.0) == 0.0
    assert ln.spider_difference_sigma(math.inf, 1.0, 0.0) == 1.0  # experiments: always the cap
    assert ln.spider_difference_sigma(math.inf, 1.0, 5.0) == 1.0
    out = jax.jit(lambda s: ln.spider_difference_sigma(2.0, 1.0, s))(jnp.array([0.25, 3.0]))
    np.testing.assert_allclose(np.asarray(out), [0.5, 1.0])
    with pytest.raises(ValueError, match="sigma2"):
        ln.spider_difference_sigma(-1.0, 1.0, 0.1)


def test_spider_parameters():
    # L = 1, beta = 2, Delta = 1, n = 1000, d = 50, eps = 1, delta = 1e-5, M = 5, N = 10
    L, beta, gap, n, d, eps, delta, M, N = 1.0, 2.0, 1.0, 1000, 50, 1.0, 1e-5, 5, 10
    lt = d * math.log(1e5)  # 575.646
    q_real = (eps * n * L * math.sqrt(M) / math.sqrt(lt * gap * beta)) ** (2 / 3)  # (2236.07/33.93)^(2/3) = 16.31
    q = math.floor(min(q_real, n * M))
    R = math.ceil(eps * n * math.sqrt(M * q) * math.sqrt(gap * beta) / (L * math.sqrt(lt)))
    assert q == 16 and R == 528  # 1000 * sqrt(80) * 1.41421 / 23.9926 = 527.2
    assert ln.spider_parameters(L, beta, gap, n, d, eps, delta, M, N) == (R, q)
    # the n M / 1{M < N} cap: binds only when M < N (tiny n)
    assert ln.spider_parameters(1.0, 1e-8, 1.0, 2, 1, 10.0, 0.1, 1, 2)[1] == 2  # q capped at n M = 2
    assert ln.spider_parameters(1.0, 1e-8, 1.0, 2, 1, 10.0, 0.1, 2, 2)[1] > 4   # M = N: no cap
    # q < 1: output w0
    assert ln.spider_parameters(1e-3, 10.0, 10.0, 100, 1000, 0.1, 1e-5, 2, 10) == (0, 0)
    with pytest.raises(ValueError, match="silos_per_round"):
        ln.spider_parameters(L, beta, gap, n, d, eps, delta, 11, 10)


# ------------------------------------------------------------------------------------------------
# Alt Fed-SPIDER and experiment baselines


def test_experiment_sigmas_use_ln_2_over_delta():
    # L = 5, n = 1238, eps = 1.5, delta = 1/n^2, R = 25, local steps K = 17
    n = 1238
    delta = 1 / n**2
    lg2 = math.log(2 * n**2)
    mb = math.sqrt(8 * 25 * 25 * lg2 / (n**2 * 2.25))
    assert ln.sigma_experiment_mbsgd(5.0, n, 1.5, delta, 25) == pytest.approx(mb, rel=1e-12)
    assert ln.sigma_experiment_local_sgd(5.0, n, 1.5, delta, 25, 17) == pytest.approx(
        math.sqrt(8 * 25 * 17 * 25 * lg2 / (n**2 * 2.25)), rel=1e-12)
    diff, fresh = ln.sigma_alt_spider(5.0, n, 1.5, delta, 25)
    assert diff == pytest.approx(math.sqrt(32 * 25 * lg2 * 25 / (n**2 * 2.25)), rel=1e-12)
    assert fresh == pytest.approx(math.sqrt(8 * 25 * lg2 * 25 / (n**2 * 2.25)), rel=1e-12)
    # Lowy & Razaviyayn's experiment sigma has ln(1/delta) instead: not the same function
    assert sgd_noise.sigma_experiment_mbsgd(5.0, n, 25, 1.5, delta) < mb


def test_experiment_batch_sizes():
    assert ln.batch_experiment_code(1238, 25) == 606
    assert ln.batch_experiment_code(1238, 50) == 428
    assert ln.batch_experiment_code(1000, 50) == 346
    assert ln.batch_experiment_code(1000, 100) == 244
    assert ln.batch_experiment_code(3, 10000) == 1
    # paper: n sqrt(eps) / (2 sqrt(R)); 1238 * sqrt(3) / (2 * 5) = 214.4
    assert ln.batch_experiment_paper(1238, 25, 3.0) == 214 == sgd_noise.batch_experiment(1238, 25, 3.0)
    assert ln.batch_experiment_paper(1238, 25, 24.0) == 606


# ------------------------------------------------------------------------------------------------
# Shuffle-model P_vec parameters


def test_sdp_prox_sgd_pvec_and_its_M_condition():
    assert ln.sdp_prox_sgd_pvec(1.0, 1e-5, 20, 10) == (pytest.approx(1.0), 1e-5)  # 20 * 1 / (2 * 10)
    assert ln.sdp_prox_sgd_pvec(0.5, 1e-5, 20, 5) == (pytest.approx(1.0), 1e-5)   # M = N eps/2 = 5
    assert ln.sdp_prox_sgd_pvec(4.0, 1e-5, 20, 20)[0] == pytest.approx(2.0)       # eps >= 2: M = N
    with pytest.raises(ValueError, match="silos_per_round"):
        ln.sdp_prox_sgd_pvec(0.5, 1e-5, 20, 4)  # needs M >= 5
    with pytest.raises(ValueError, match="silos_per_round"):
        ln.sdp_prox_sgd_pvec(4.0, 1e-5, 20, 19)  # needs M >= N min(2, 1) = 20
    with pytest.raises(ValueError, match="silos_per_round"):
        ln.sdp_prox_sgd_pvec(1.0, 1e-5, 20, 21)


def test_sdp_svrg_pvec():
    # eps = 2, delta = 1e-6, N = 10, M = 5, n = 600, K = 30, E = 3, Q = 20
    eps_t = 2 * 10 * 600 / (8 * 5 * 30 * math.sqrt(4 * 3 * 20 * math.log(2e6)))
    e, d = ln.sdp_svrg_pvec(2.0, 1e-6, 10, 5, 600, 30, 3, 20)
    assert e == pytest.approx(eps_t, rel=1e-12) and eps_t == pytest.approx(0.16947, rel=1e-4)  # 12000 / (1200 * 59.01)
    assert d == pytest.approx(1e-6 / 120, rel=1e-12)


def test_sdp_spider_pvec_corrected_vs_printed():
    # eps = 1, delta = 1e-5, N = 8, M = 4, K1 = K2 = n = 200, R = 40, q = 10
    eps, delta, N, M, K, R, q = 1.0, 1e-5, 8, 4, 200, 40, 10
    lg = math.log(1e5)
    (ec, dc), (ed, dd) = ln.sdp_spider_pvec(eps, delta, N, M, K, K, R, q)
    assert ec == pytest.approx(eps * N / (4 * M * math.sqrt(2 * lg) * 2), rel=1e-12)  # sqrt(R/q) = 2
    # with K1 = n it reduces to the proof's eps N sqrt(q) / (4 M sqrt(2 R ln(1/delta)))
    assert ec == pytest.approx(eps * N * math.sqrt(q) / (4 * M * math.sqrt(2 * R * lg)), rel=1e-12)
    assert dc == pytest.approx(delta * q / (2 * R), rel=1e-12)
    assert ed == pytest.approx(eps * N / (4 * M * math.sqrt(2 * R * lg)), rel=1e-12)
    assert dd == pytest.approx(delta / (2 * R), rel=1e-12)
    (ep, dp), diff_p = ln.sdp_spider_pvec(eps, delta, N, M, K, K, R, q, printed=True)
    assert ep == pytest.approx(eps * N / (4 * M * math.sqrt(2 * lg)), rel=1e-12)  # max(1, sqrt(q/R)) = 1
    assert ep / ec == pytest.approx(2.0, rel=1e-12) and dp == dc and diff_p == (ed, dd)
    # q > R: one checkpoint; corrected factor 1 and delta capped at delta/2; printed factor sqrt(q/R)
    (e2, d2), _ = ln.sdp_spider_pvec(eps, delta, N, M, K, K, 10, 40)
    assert e2 == pytest.approx(eps * N / (4 * M * math.sqrt(2 * lg)), rel=1e-12) and d2 == delta / 2
    (e3, d3), _ = ln.sdp_spider_pvec(eps, delta, N, M, K, K, 10, 40, printed=True)
    assert e3 == pytest.approx(e2 / 2, rel=1e-12) and d3 == pytest.approx(2 * delta, rel=1e-12)
    # n / K scaling when the batches are smaller than n
    (e4, _), (e5, _) = ln.sdp_spider_pvec(eps, delta, N, M, 50, 100, R, q, n=200)
    assert e4 == pytest.approx(4 * ec, rel=1e-12) and e5 == pytest.approx(2 * ed, rel=1e-12)
    with pytest.raises(ValueError, match="needs n"):
        ln.sdp_spider_pvec(eps, delta, N, M, 50, 100, R, q)


# ------------------------------------------------------------------------------------------------


def test_noise_multiplier():
    # sigma = 0.02 on a mean of K = 50 gradients clipped to C = 0.5, sensitivity 2 (replace-one):
    # z = 0.02 * 50 / (2 * 0.5) = 1.0
    assert ln.noise_multiplier(0.02, 0.5, 50, sensitivity=2.0) == pytest.approx(1.0)
    assert ln.noise_multiplier(0.02, 0.5, 50) == pytest.approx(sgd_noise.noise_multiplier_from_sigma(0.02, 0.5, 50))
    with pytest.raises(ValueError, match="sigma"):
        ln.noise_multiplier(math.inf, 0.5, 50)
    with pytest.raises(ValueError, match="clip_norm"):
        ln.noise_multiplier(0.1, 0.0, 50)


def test_public_api_names():
    for name in ["sigma_prox_sgd", "prox_sgd_rounds", "prox_sgd_batch", "sigma_pl_svrg", "pl_svrg_batch",
                 "pl_svrg_step_size", "sigma_spider", "spider_difference_sigma", "spider_parameters",
                 "sigma_alt_spider", "sigma_experiment_mbsgd", "sigma_experiment_local_sgd",
                 "batch_experiment_code", "batch_experiment_paper", "sdp_prox_sgd_pvec", "sdp_svrg_pvec",
                 "sdp_spider_pvec", "noise_multiplier", "experiment_noise_multipliers"]:
        assert name in ln.__all__ and callable(getattr(ln, name))
