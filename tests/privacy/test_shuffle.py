"""Tests for jaxfl.privacy.shuffle (P_vec vector summation and amplification by shuffling).

Oracles are closed forms (binomial pmfs, the protocol's moments, published values), never the module's
own output.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import binom

from jaxfl.privacy import shuffle as S
from jaxfl.privacy.shuffle import ShuffleParams

KEY = jax.random.PRNGKey(0)
# Compiled entry points (params are static, hashable NamedTuples); eager while-loops are slow on CPU.
_randomize = jax.jit(S.randomize, static_argnums=(4,), static_argnames=("clip",))
_shuffle_sum = jax.jit(S.shuffle_sum, static_argnums=(4,), static_argnames=("clip",))


def _inputs():
    """6 real users (norm <= L = 1.5, most coordinates off-grid) + 2 padding rows of NaN, d = 3."""
    x = np.array([[0.3, -0.4, 1.1], [-1.5, 0.0, 0.0], [0.7, 0.7, -0.7], [0.0, 0.0, 0.0],
                  [1.2, -0.5, 0.2], [-0.33, 1.01, 0.55], [np.nan] * 3, [np.nan] * 3], np.float32)
    mask = np.array([1, 1, 1, 1, 1, 1, 0, 0], np.int32)
    return jnp.asarray(x), jnp.asarray(mask)


# ------------------------------------------------------------------------------------------------
# The protocol
# ------------------------------------------------------------------------------------------------
def test_unbiased_and_exact_variance():
    x, mask = _inputs()
    lip, params = 1.5, ShuffleParams(granularity=5, trials=30, probability=0.25)
    runs = 3000
    keys = jax.random.split(KEY, runs)
    est = jax.jit(jax.vmap(lambda k: S.shuffle_sum(k, x, mask, lip, params)))(keys)
    est = np.asarray(est, np.float64)
    true = np.nansum(np.where(np.asarray(mask)[:, None] > 0, np.asarray(x), 0.0), axis=0)

    # Closed-form moments (oracle): w = (x + L) g / (2L), Var = (2L/g)^2 (sum f(1-f) + U b p (1-p)).
    real = np.asarray(x)[:6].astype(np.float64)
    w = (real + lip) * 5 / (2 * lip)
    f = w - np.floor(w)
    var = (2 * lip / 5) ** 2 * (np.sum(f * (1 - f), axis=0) + 6 * 30 * 0.25 * 0.75)
    np.testing.assert_allclose(np.asarray(S.sum_variance(x, mask, lip, params)), var, rtol=1e-5)

    # Mean: z-test per coordinate at 5 sigma (two-sided P ~ 6e-7 each; the seed is fixed anyway).
    z = (est.mean(axis=0) - true) / np.sqrt(var / runs)
    assert np.all(np.abs(z) < 5.0), z
    # Variance: the sample variance of R near-Gaussian draws has relative sd sqrt(2/(R-1)) ~ 0.026;
    # 0.15 is about 5.8 of those sds (allowing for the mild excess kurtosis of the rounding part).
    np.testing.assert_allclose(est.var(axis=0, ddof=1), var, rtol=0.15)
    # The exact variance never exceeds the stated worst case.
    assert var.sum() <= S.variance_bound(6, 3, lip, params) + 1e-9


def test_counts_are_the_shuffled_transcript():
    """E[ones_j] = sum_i w_ij + U b p: the counts are the number of one-bits, nothing else."""
    x, mask = _inputs()
    lip, params = 1.5, ShuffleParams(5, 30, 0.25)
    ones = jax.jit(jax.vmap(lambda k: S.randomize(k, x, mask, lip, params)))(jax.random.split(KEY, 2000))
    assert ones.dtype == jnp.int32 and ones.shape == (2000, 3)
    w = (np.asarray(x)[:6].astype(np.float64) + lip) * 5 / (2 * lip)
    expected = w.sum(axis=0) + 6 * 30 * 0.25
    assert np.all(np.asarray(ones) >= 0) and np.all(np.asarray(ones) <= 6 * (5 + 30))
    # Var(ones_j) = sum f(1-f) + U b p (1-p) <= 1.5 + 33.75 < 60: atol is over 5 standard errors.
    mean = np.asarray(ones, np.float64).mean(axis=0)
    np.testing.assert_allclose(mean, expected, atol=5 * math.sqrt(60 / 2000))


def test_padding_rows_change_nothing():
    x, mask = _inputs()
    params = ShuffleParams(5, 30, 0.25)
    base = _randomize(KEY, x, mask, 1.5, params)
    # Other garbage in the padding rows: identical output.
    x2 = x.at[6:].set(1e30)
    np.testing.assert_array_equal(_randomize(KEY, x2, mask, 1.5, params), base)
    # Without the padding rows at all: identical output (user i always draws from fold_in(key, i)).
    np.testing.assert_array_equal(_randomize(KEY, x[:6], mask[:6], 1.5, params), base)
    assert np.all(np.isfinite(np.asarray(_shuffle_sum(KEY, x, mask, 1.5, params))))


def test_edge_inputs_are_exact_without_noise():
    """With b = 0 and grid-aligned inputs (x = -L, 0, +L; g even) the protocol is deterministic and exact."""
    lip = 2.0
    x = jnp.array([[-lip, 0.0, 0.0], [lip, 0.0, 0.0], [0.0, -lip, 0.0]])
    mask = jnp.ones(3, jnp.int32)
    params = ShuffleParams(4, 0, 0.25)
    # w = (x + L) * 4 / (2L): -L -> 0, 0 -> 2, +L -> 4; counts are the column sums of w.
    np.testing.assert_array_equal(_randomize(KEY, x, mask, lip, params), [0 + 4 + 2, 2 + 2 + 0, 2 + 2 + 2])
    np.testing.assert_allclose(_shuffle_sum(KEY, x, mask, lip, params), [0.0, -lip, 0.0], atol=1e-6)
    np.testing.assert_allclose(S.sum_variance(x, mask, lip, params), 0.0, atol=0)
    # clip=True scales a row of norm 2L back to norm L; here onto a grid point again.
    big = jnp.array([[2 * lip, 0.0, 0.0]])
    clipped = _shuffle_sum(KEY, big, jnp.ones(1), lip, params, clip=True)
    np.testing.assert_allclose(clipped, [lip, 0, 0], atol=1e-6)


def test_edges_with_noise_have_only_binomial_variance():
    lip = 1.0
    x = jnp.array([[-1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    params = ShuffleParams(6, 50, 0.3)
    expected = (2 * lip / 6) ** 2 * 3 * 50 * 0.3 * 0.7
    np.testing.assert_allclose(S.sum_variance(x, jnp.ones(3), lip, params), [expected] * 2, rtol=1e-6)


def test_analyze_closed_form_and_traced_num_users():
    params = ShuffleParams(10, 7, 0.25)  # p b = 1.75: integer part 1, fraction 0.75
    ones = jnp.array([0, 100, 12345], jnp.int32)
    lip, n = 0.5, 9
    expected = [(2 * lip / 10) * (c - 0.25 * 7 * n) - n * lip for c in (0, 100, 12345)]
    out = jax.jit(lambda o, k: S.analyze(o, k, lip, params))(ones, jnp.int32(n))
    np.testing.assert_allclose(out, expected, rtol=1e-6)


def test_pytree_helper_round_trips_structure():
    lip = 1.0
    tree = {"a": jnp.array([[1.0, 0.0], [0.0, -1.0], [0.0, 0.0]]), "b": jnp.array([[0.0], [0.0], [-1.0]])}
    out = S.shuffle_sum_tree(KEY, tree, jnp.ones(3), lip, ShuffleParams(2, 0, 0.25))
    assert jax.tree_util.tree_structure(out) == jax.tree_util.tree_structure({"a": 0, "b": 0})
    np.testing.assert_allclose(out["a"], [1.0, -1.0], atol=1e-6)
    np.testing.assert_allclose(out["b"], [-1.0], atol=1e-6)


@pytest.mark.parametrize("call, name", [
    (lambda: S.randomize(KEY, jnp.zeros((2, 3)), jnp.ones(2), 1.0, ShuffleParams(0, 1, 0.25)), "granularity"),
    (lambda: S.randomize(KEY, jnp.zeros((2, 3)), jnp.ones(2), 1.0, ShuffleParams(4, -1, 0.25)), "trials"),
    (lambda: S.randomize(KEY, jnp.zeros((2, 3)), jnp.ones(2), 1.0, ShuffleParams(4, 1, 0.7)), "probability"),
    (lambda: S.randomize(KEY, jnp.zeros((2, 3)), jnp.ones(2), -1.0, ShuffleParams(4, 1, 0.25)), "lipschitz"),
    (lambda: S.randomize(KEY, jnp.zeros(3), jnp.ones(3), 1.0, ShuffleParams(4, 1, 0.25)), "vectors"),
    (lambda: S.randomize(KEY, jnp.zeros((2, 3)), jnp.ones(3), 1.0, ShuffleParams(4, 1, 0.25)), "mask"),
    (lambda: S.randomize(KEY, jnp.zeros((200, 3)), jnp.ones(200), 1.0, ShuffleParams(4, 2**24 - 1, 0.25)),
     "int32"),
    (lambda: S.pvec_parameters(0.0, 1e-6, 10, 3), "epsilon"),
    (lambda: S.pvec_parameters(1.0, 1.5, 10, 3), "delta"),
    (lambda: S.pvec_parameters(1.0, 1e-6, 0, 3), "num_users"),
    (lambda: S.pvec_parameters(1.0, 1e-6, 10, 2.5), "dim"),
    (lambda: S.shuffled_epsilon(ShuffleParams(4, 1, 0.25), 10, 3, 0.0), "delta"),
    (lambda: S.local_epsilon(ShuffleParams(4, 1, 0.25), 3, 1e-6, 0), "reports_per_silo"),
    (lambda: S.amplify_by_shuffling(-1.0, 0.0, 100, 1e-6), "epsilon_local"),
    (lambda: S.amplify_by_shuffling(1.0, 1.0, 100, 1e-6), "delta_local"),
    (lambda: S.amplify_by_shuffling(1.0, 0.0, 0, 1e-6), "num_reports"),
])
def test_bad_inputs_raise_value_error_naming_the_value(call, name):
    with pytest.raises(ValueError, match=name):
        call()


# ------------------------------------------------------------------------------------------------
# Privacy accounting
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("eps, delta, n, d, g", [
    # g = max(4, ceil(2 sqrt(n)), ceil(4 sqrt(d))):
    (1.0, 1e-6, 100, 10, 20),     # max(4, ceil(20.0) = 20, ceil(12.65) = 13) = 20
    (1.0, 1e-6, 1000, 785, 113),  # max(4, ceil(63.25) = 64, ceil(112.07) = 113) = 113
    (5.0, 1e-6, 50, 20, 18),      # max(4, ceil(14.14) = 15, ceil(17.89) = 18) = 18
    (15.0, 0.4, 1, 1, 4),         # max(4, 2, 4) = 4
])
def test_pvec_parameters_formula_and_minimal_trials(eps, delta, n, d, g):
    params = S.pvec_parameters(eps, delta, n, d)
    assert params.granularity == g and params.probability == 0.25
    assert S.shuffled_epsilon(params, n, d, delta) <= eps
    if params.trials > 1:  # b is the smallest number of noise bits that certifies eps
        assert S.shuffled_epsilon(params._replace(trials=params.trials - 1), n, d, delta) > eps


def test_noise_free_or_tiny_noise_certifies_nothing():
    assert S.shuffled_epsilon(ShuffleParams(8, 0, 0.25), 100, 4, 1e-6) == math.inf
    assert S.shuffled_epsilon(ShuffleParams(8, 1, 0.25), 2, 4, 1e-6) == math.inf


def test_binomial_ratio_helpers_hand_computed():
    # m = 40, p = 1/4: P(N = z) / P(N = z + 1) = (z + 1)(3/4) / ((40 - z)(1/4)) = 3 (z + 1) / (40 - z).
    assert S._log_rho(9, 40, 0.25) == pytest.approx(math.log(30 / 31))
    assert S._log_rho(0, 40, 0.25) == pytest.approx(math.log(3 / 40))
    lo, hi = S._binomial_window(40, 0.25, 0.01)
    assert binom.cdf(lo - 1, 40, 0.25) <= 0.005 < binom.cdf(lo, 40, 0.25)
    assert binom.sf(hi, 40, 0.25) <= 0.005 < binom.sf(hi - 1, 40, 0.25)


def _mixture_pmf(w, m, p, support):
    """pmf of r + Binomial(m, p), r the unbiased rounding of w (closed form)."""
    low, frac = math.floor(w), w - math.floor(w)
    return (1 - frac) * binom.pmf(support - low, m, p) + frac * binom.pmf(support - low - 1, m, p)


def _hockey_stick(a, b, eps):
    return float(np.sum(np.maximum(a - math.exp(eps) * b, 0.0)))


@pytest.mark.parametrize("eps, delta, n, d", [(2.0, 1e-3, 10, 1), (1.0, 1e-4, 20, 1), (4.0, 1e-2, 5, 2)])
def test_certified_epsilon_is_sound_against_exact_privacy_profile(eps, delta, n, d):
    """Exact delta(eps) of the shuffled counts, from binomial pmfs, for neighbouring inputs at the edges."""
    params = S.pvec_parameters(eps, delta, n, d)
    g, b, p = params
    m, lip = n * b, 1.0
    cert = S.shuffled_epsilon(params, n, d, delta)
    support = np.arange(0, m + g + 1)
    s = 1 / math.sqrt(2)
    pairs = ([((-1.0,), (1.0,)), ((-0.99,), (0.97,)), ((0.3,), (-1.0,))] if d == 1 else
             [((-s, -s), (s, s)), ((-1.0, 0.0), (1.0, 0.0)), ((-0.6, -0.8), (0.6, 0.8))])
    worst = 0.0
    for x, xp in pairs:  # other users' contributions are independent post-processing: omitted
        a = b_ = None
        for j in range(d):
            pj = _mixture_pmf((x[j] + lip) * g / (2 * lip), m, p, support)
            qj = _mixture_pmf((xp[j] + lip) * g / (2 * lip), m, p, support)
            a = pj if a is None else np.multiply.outer(a, pj)
            b_ = qj if b_ is None else np.multiply.outer(b_, qj)
        worst = max(worst, _hockey_stick(a, b_, cert), _hockey_stick(b_, a, cert))
    assert worst <= delta


def test_local_epsilon_is_weaker_than_shuffled():
    params = S.pvec_parameters(1.0, 1e-6, 100, 10)
    shuffled = S.shuffled_epsilon(params, 100, 10, 1e-6)
    assert S.local_epsilon(params, 10, 1e-6, 100) == pytest.approx(shuffled)
    local = [S.local_epsilon(params, 10, 1e-6, k) for k in (50, 10, 1)]
    assert shuffled <= local[0] <= local[1] <= local[2]


# ------------------------------------------------------------------------------------------------
# Amplification by shuffling
# ------------------------------------------------------------------------------------------------
def test_amplification_matches_published_value():
    # README of github.com/apple/ml-shuffling-amplification (the authors' code):
    # n = 1e5, eps0 = 4, delta = 1e-6 -> closed-form epsilon 0.5378040242374512.
    eps, delta_total = S.amplify_by_shuffling(4.0, 0.0, 100000, 1e-6)
    assert eps == pytest.approx(0.5378040242374512, rel=1e-12)
    assert delta_total == 1e-6


def test_amplification_hand_computed():
    eps0, delta0, n, delta = 1.0, 1e-9, 10000, 1e-6
    a = 8 * math.sqrt(math.e * math.log(4e6) / 1e4)   # 8 sqrt(2.71828 * 15.2018 / 1e4) = 0.51430
    c = 8 * math.e / 1e4                               # 0.0021746
    e1 = math.log(1 + a + c)
    factor = (1 - math.exp(-1)) / (1 + math.exp(-1 - e1))
    eps = math.log(1 + factor * (a + c))
    assert a == pytest.approx(0.5143, abs=1e-4)
    dtot = delta + (math.exp(eps) + 1) * (1 + math.exp(-1) / 2) * n * delta0
    got = S.amplify_by_shuffling(eps0, delta0, n, delta)
    assert got == pytest.approx((eps, dtot), rel=1e-12)
    # Never smaller than the published (e^eps0 - 1)/(e^eps0 + 1) form (we use the conservative one).
    published = math.log(1 + (math.e - 1) / (math.e + 1) * (a + c))
    assert got[0] >= published


def test_amplification_monotone_and_validity():
    eps = [S.amplify_by_shuffling(2.0, 1e-10, n, 1e-6)[0] for n in (10**3, 10**4, 10**5, 10**6)]
    assert all(e1 > e2 for e1, e2 in zip(eps, eps[1:])), eps
    # Validity: eps0 <= ln(n / (16 ln(4/delta))). n = 1000, delta = 1e-6: ln(1000 / (16 * 15.2)) = 1.41.
    assert S.amplify_by_shuffling(1.4, 0.0, 1000, 1e-6)[0] < math.inf
    assert S.amplify_by_shuffling(1.42, 0.0, 1000, 1e-6) == (math.inf, 1.0)
    assert S.amplify_by_shuffling(0.1, 0.0, 100, 1e-6)[0] == math.inf  # n / (16 ln(4/delta)) < 1
