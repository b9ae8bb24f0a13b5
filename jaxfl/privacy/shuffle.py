"""The shuffle model of Lowy & Razaviyayn: binomial vector summation (P_vec / P_1D) and amplification by shuffling.

Two shuffle-DP tools that Lowy & Razaviyayn (2023) use without a trusted server:

* **P_vec** (Lowy & Razaviyayn Algorithms 4-5, App. G.2, after Cheu, Joseph, Mao, Peng, "Shuffle private stochastic
  convex optimization", arXiv 2106.09805 / ICLR 2022). Each user shifts every coordinate of its vector
  ``x`` (``||x||_2 <= L``) into ``[0, 2L]``, rounds it without bias onto a grid of ``g`` steps, adds
  ``Binomial(b, p)`` noise bits and sends, per coordinate, ``g + b`` labelled bits. The shuffler mixes the
  bits of all users; the analyzer counts ones per coordinate and debiases.
  :func:`randomize` / :func:`analyze` / :func:`shuffle_sum` simulate it in O(U d) work, :func:`sum_variance`
  and :func:`variance_bound` give its exact and worst-case error, :func:`shuffled_epsilon` and
  :func:`local_epsilon` what it certifies, :func:`pvec_parameters` picks ``(g, b, p)`` for a target.
* **Amplification by shuffling** (:func:`amplify_by_shuffling`) of ``(eps0, delta0)``-DP local
  randomizers, for Lowy & Razaviyayn's Shuffled Noisy MB-SGD (Thm 5.1), after Feldman, McMillan, Talwar,
  "Hiding among the clones" (FOCS 2021). ``dp_accounting`` 0.6.0 has no shuffle module, so it is here.

Fixes to Lowy & Razaviyayn's pseudocode (its Alg. 6), each marked ``FIX`` in the code:
  1. the shifted coordinates ``x_j + L`` lie in ``[0, 2L]``, so the 1-D range is ``2L`` (not ``L``);
  2. re-centring a sum of ``U`` shifted vectors subtracts ``U * L`` (not ``L``);
  3. the analyzer's debiasing subtracts ``p * b * (number of users)``.

**Where the privacy numbers come from (read this).** The exact (b, g, p) theorem of Cheu et al. could not be
retrieved (the stored copies of arXiv 2106.09805 show only its abstract; Lowy & Razaviyayn's Lemma G.1 only says that
suitable values exist). A third-party implementation of the same protocol found by search
(a federated linear-bandit code base citing Cheu et al.) uses ``g = max(2 sqrt(n), d, 4)``, ``p = 1/4`` and
``b = C g^2 log^2(d/delta) / (eps^2 n)`` with an unstated constant ``C``, which fixes only the *shape*.
So jaxfl does **not** claim Cheu et al.'s constants. Instead :func:`shuffled_epsilon` evaluates the following
analysis, which is stated here in full and is sound for any parameters (neighbouring inputs: one user's
vector replaced, every vector of L2 norm ``<= L``, the number of users public, all users honest):

  (a) *What the analyzer sees.* The shuffled multiset of labelled bits is determined by the per-coordinate
      numbers of ones ``C_j = sum_i r_ij + N_j`` (``r_ij`` the rounded grid value of user ``i``,
      ``N_j ~ Binomial(m, p)`` with ``m = b * (number of users)`` the pooled noise bits). The other users'
      rounding is independent of the changed user, so it suffices to bound ``M(x) = r(x) + N``.
  (b) *Rounding.* With ``w = (x + L) g / (2L)`` and the coupling ``r = floor(w + U_j)``,
      ``r' = floor(w' + U_j)`` (shared ``U_j ~ U[0, 1)``, which has the right marginals), the shift
      ``Delta = r - r'`` satisfies ``|Delta_j| <= ceil(|w_j - w'_j|) <= g`` and ``Delta_j = 0`` where
      ``w_j = w'_j``; as ``||w - w'||_2 <= g``: ``||Delta||_2 <= D := min(g + sqrt(d), g sqrt(d))`` and
      ``||Delta||_1 <= min(g sqrt(d) + d, g d)``. By joint convexity of the hockey-stick divergence it
      suffices to bound every fixed integer shift ``Delta`` of this kind.
  (c) *One coordinate.* Let ``[lo, hi]`` be a window with ``P(N < lo) <= t/2`` and ``P(N > hi) <= t/2``
      (exact binomial tails, scipy). The log-likelihood ratio of ``N + r`` vs ``N + r'`` at any output whose
      noise lies in the window telescopes into ``|Delta_j|`` terms ``log rho(z)``,
      ``rho(z) = P(N = z) / P(N = z + 1) = (z + 1)(1 - p) / ((m - z) p)``, with
      ``z in [lo - g, hi + g - 1]``; ``log rho`` is increasing, so each coordinate is
      ``(|Delta_j| * lam, t)``-indistinguishable (both directions) with
      ``lam = max(|log rho(lo - g)|, |log rho(hi + g - 1)|)`` (``inf`` if ``lo < g`` or ``hi + g > m``).
  (d) *Coordinates.* The coordinates are independent, so by basic composition the vector is
      ``(lam * ||Delta||_1, d t)``-DP, and by the heterogeneous form of advanced composition
      (Dwork, Rothblum, Vadhan 2010 Thm III.3 / Dwork & Roth 2014 Thm 3.20, whose Azuma-based proof
      gives ``sqrt(2 ln(1/s) sum eps_j^2) + sum eps_j (e^{eps_j} - 1)`` for per-step ``eps_j`` and slack
      ``s``; here ``eps_j = lam |Delta_j| <= lam g``)
      ``(lam D sqrt(2 ln(1/s)) + lam^2 D^2 (e^{lam g} - 1)/(lam g), s + d t)``-DP.
      :func:`shuffled_epsilon` splits ``delta`` between ``s`` and ``d t`` over a small grid and returns the
      smallest certified epsilon.

For ``eps, delta`` of interest this gives per-coordinate noise of order
``L sqrt(log(d/delta) log(1/delta)) / eps``,
i.e. ``E||P_vec(X) - sum x||^2 = O(d L^2 log^2(d/delta) / eps^2)`` as in Lowy & Razaviyayn's Lemma G.1.

Sampling: noise is drawn with ``jax.random.binomial`` (present in JAX 0.10.2; inversion for ``b p <= 10``,
BTRS rejection otherwise, in the default float dtype). Each user draws its own ``Binomial(b, p)`` so that
float values stay exact integers (``b < 2**24``); a single ``Binomial(U b, p)`` draw in float32 would round
large counts to a coarser lattice, which would *leak* the rounded input. Counts are ``int32``.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from jaxfl import checks
from jaxfl.privacy import keys as keys_lib

_INT32_LIMIT = 2**31 - 1
_FLOAT32_EXACT = 2**24


class ShuffleParams(NamedTuple):
    """Static parameters of P_vec / P_1D (plain Python numbers, hashable: bind them in a closure).

    Attributes:
      granularity: ``g >= 1``, number of grid steps over the shifted range ``[0, 2L]`` of one coordinate
        (the grid is ``{0, 2L/g, ..., 2L}``). Each user sends ``g + b`` bits per coordinate.
      trials: ``b >= 0``, number of ``Bernoulli(p)`` noise bits each user adds per coordinate (``b = 0``:
        no noise, certifies nothing).
      probability: ``p in (0, 1/2]``, probability of each noise bit.

    Example (usually from :func:`pvec_parameters`):
      >>> ShuffleParams(granularity=64, trials=5909, probability=0.25).trials
      5909
    """

    granularity: int
    trials: int
    probability: float


def _check_params(params) -> ShuffleParams:
    if not isinstance(params, ShuffleParams):
        raise ValueError(f"params must be a ShuffleParams, got {params!r}")
    g, b, p = params
    if isinstance(g, bool) or not isinstance(g, int) or g < 1:
        raise ValueError(f"granularity must be an integer >= 1, got {g!r}")
    if isinstance(b, bool) or not isinstance(b, int) or b < 0:
        raise ValueError(f"trials must be an integer >= 0, got {b!r}")
    if b >= _FLOAT32_EXACT:
        raise ValueError(f"trials must be < 2**24 so binomial draws stay exact integers, got {b!r}")
    if not isinstance(p, (int, float)) or not 0.0 < p <= 0.5:
        raise ValueError(f"probability must be in (0, 1/2], got {p!r}")
    return ShuffleParams(g, b, float(p))


def _check_lipschitz(lipschitz):
    """``L`` may be traced; a concrete value must be finite and positive."""
    if isinstance(lipschitz, (int, float)) and not (math.isfinite(lipschitz) and lipschitz > 0):
        raise ValueError(f"lipschitz must be finite and > 0, got {lipschitz!r}")


def _check_vectors(vectors, mask):
    if jnp.ndim(vectors) != 2:
        raise ValueError(f"vectors must have shape [num_users, dim], got shape {jnp.shape(vectors)}")
    if jnp.shape(mask) != jnp.shape(vectors)[:1]:
        raise ValueError(f"mask must have shape {jnp.shape(vectors)[:1]}, got shape {jnp.shape(mask)}")


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def _probability(name, value, *, low_open=True):
    ok = isinstance(value, (int, float)) and (0.0 < value < 1.0 if low_open else 0.0 <= value < 1.0)
    if not ok:
        raise ValueError(f"{name} must be in {'(0' if low_open else '[0'}, 1), got {value!r}")
    return float(value)


# ----------------------------------------------------------------------------------------------------
# The protocol
# ----------------------------------------------------------------------------------------------------
def clip_to_norm(vectors, lipschitz):
    """Scales each row of ``vectors [U, d]`` to L2 norm at most ``lipschitz`` (rows already inside kept).

    Example:
      >>> import jax.numpy as jnp
      >>> [[round(float(v), 6) for v in row] for row in clip_to_norm(jnp.array([[3.0, 4.0], [0.3, 0.4]]), 1.0)]
      [[0.6, 0.8], [0.3, 0.4]]
    """
    norms = jnp.linalg.norm(vectors, axis=-1, keepdims=True)
    scale = jnp.where(norms > lipschitz, lipschitz / jnp.where(norms > 0, norms, 1.0), 1.0)
    return vectors * scale


def _grid_values(vectors, lipschitz, granularity):
    """``w = (x + L) * g / (2L)`` in grid units, clamped to ``[0, g]``.

    FIX 1 (Lowy & Razaviyayn Alg. 5 assumes inputs in [0, L]): after the shift ``x_j + L`` the coordinates lie in
    ``[0, 2L]``, so the grid spacing is ``2L / g``. The clamp only touches inputs violating ``|x_j| <= L``
    (a report has exactly ``g + b`` bits); such inputs void the privacy guarantee anyway.
    """
    w = (vectors + lipschitz) * (granularity / (2.0 * lipschitz))
    return jnp.clip(w, 0.0, float(granularity))


def randomize(key, vectors, mask, lipschitz, params: ShuffleParams, *, clip: bool = False):
    """Local randomizers of all this caller's users, reduced to what the shuffled transcript reveals.

    Each real user ``i`` (``mask_i = 1``) runs R_vec: for every coordinate ``j`` it shifts ``x_ij + L``,
    rounds ``w_ij = (x_ij + L) g / (2L)`` without bias to ``r_ij in {floor(w_ij), floor(w_ij) + 1}``, draws
    ``eta_ij ~ Binomial(b, p)`` and sends ``g + b`` bits labelled ``j`` of which ``r_ij + eta_ij`` are ones.
    Padding rows (``mask_i = 0``) send nothing; their values are never read (NaN is fine).

    After shuffling, the analyzer receives the multiset of labelled bits, and a multiset of
    ``(label, bit)`` pairs with ``U (g + b)`` messages per label is fully described by the number of ones
    per label. The returned counts are therefore an exact representation of the shuffled transcript
    (not a lossy summary), and counts from several callers (silos) simply add.

    Inputs must satisfy ``||x_i||_2 <= L`` for the privacy guarantee; nothing is clipped unless
    ``clip=True`` (then each row is first scaled to norm ``<= L`` by :func:`clip_to_norm`).

    User ``i`` draws from ``fold_in(key, i)``, so appending padding rows never changes the real users'
    draws. Work is O(U d) and the function is jit- and vmap-friendly (``lipschitz`` may be traced;
    ``params`` are static Python numbers, e.g. ``jax.jit(randomize, static_argnums=4)``).

    Args:
      key: PRNG key.
      vectors: ``[U, d]`` float, one row per user.
      mask: ``[U]``, 1 for real users, 0 for padding.
      lipschitz: ``L > 0``, the L2 bound of each row (same units as ``vectors``).
      params: :class:`ShuffleParams`.
      clip: scale rows to norm ``<= L`` first.
    Returns:
      ``ones: int32 [d]``, the number of 1-bits per coordinate over this caller's users.

    Example (1,000 users of 10 coordinates each; each coordinate's count of ones, int32):
      >>> import jax
      >>> params = ShuffleParams(64, 5909, 0.25)           # pvec_parameters(1.0, 1e-5, 1000, 10)
      >>> x = 0.1 * jax.random.normal(jax.random.key(0), (1000, 10))
      >>> ones = randomize(jax.random.key(1), x, jnp.ones(1000), 1.0, params)
      >>> ones.shape, ones.dtype
      ((10,), dtype('int32'))
    """
    params = _check_params(params)
    _check_lipschitz(lipschitz)
    _check_vectors(vectors, mask)
    num_users, _ = jnp.shape(vectors)
    g, b, p = params
    if num_users * (g + b) > _INT32_LIMIT:
        raise ValueError(f"num_users * (granularity + trials) = {num_users * (g + b)} overflows int32 counts")
    real = jnp.asarray(mask) > 0
    x = jnp.where(real[:, None], jnp.asarray(vectors, jnp.float32), 0.0)
    if clip:
        x = clip_to_norm(x, lipschitz)
    w = _grid_values(x, lipschitz, g)

    def one_user(i, w_i):
        k_round, k_noise = jax.random.split(keys_lib.fold_in(key, i))
        low = jnp.floor(w_i)
        # Unbiased randomized rounding: P(r = floor(w) + 1) = w - floor(w).
        r = low + (jax.random.uniform(k_round, w_i.shape) < (w_i - low))
        eta = jax.random.binomial(k_noise, float(b), p, shape=w_i.shape) if b > 0 else jnp.zeros_like(w_i)
        return r.astype(jnp.int32) + eta.astype(jnp.int32)

    per_user = jax.vmap(one_user)(jnp.arange(num_users), w)
    return jnp.sum(jnp.where(real[:, None], per_user, 0), axis=0, dtype=jnp.int32)


def analyze(ones, num_users, lipschitz, params: ShuffleParams):
    """Analyzer A_vec: the unbiased estimate of ``sum_i x_i`` from the per-coordinate counts.

    ``estimate_j = (2L/g) * (ones_j - p b U) - U L`` with ``U = num_users``:
    FIX 1: the grid step is ``2L / g`` (shifted range ``[0, 2L]``);
    FIX 3: the debiasing subtracts the expected noise ``p * b * U`` of *all* ``U`` users;
    FIX 2: re-centring a sum of ``U`` shifted vectors subtracts ``U * L`` (Lowy & Razaviyayn writes ``L``).
    Unbiased because ``E[ones_j] = sum_i w_ij + p b U`` and ``(2L/g) w_ij - L = x_ij``.

    Args:
      ones: ``int [d]`` counts from :func:`randomize` (summed over callers if several).
      num_users: number of real users whose bits are in ``ones``; may be a traced integer.
      lipschitz: ``L``, as given to :func:`randomize`.
      params: :class:`ShuffleParams`.
    Returns:
      ``float32 [d]`` estimate of ``sum_i x_i`` (units of ``vectors``).

    Example (the counts of :func:`randomize`'s example; the same as :func:`shuffle_sum` with the same key):
      >>> import jax
      >>> params = ShuffleParams(64, 5909, 0.25)           # pvec_parameters(1.0, 1e-5, 1000, 10)
      >>> x = 0.1 * jax.random.normal(jax.random.key(0), (1000, 10))
      >>> ones = randomize(jax.random.key(1), x, jnp.ones(1000), 1.0, params)
      >>> bool(jnp.array_equal(analyze(ones, 1000, 1.0, params),
      ...                      shuffle_sum(jax.random.key(1), x, jnp.ones(1000), 1.0, params)))
      True
    """
    g, b, p = _check_params(params)
    _check_lipschitz(lipschitz)
    n = jnp.asarray(num_users, jnp.int32)
    pb = p * b
    whole = math.floor(pb)
    # Subtract the integer part of p*b*U in int32 (exact), the small fractional part in float.
    centred = ((jnp.asarray(ones, jnp.int32) - whole * n).astype(jnp.float32)
               - (pb - whole) * n.astype(jnp.float32))
    return (2.0 * lipschitz / g) * centred - n.astype(jnp.float32) * lipschitz


def shuffle_sum(key, vectors, mask, lipschitz, params: ShuffleParams, *, clip: bool = False):
    """P_vec end to end, simulating every user: ``analyze(randomize(...), sum(mask))``.

    Args/shapes as :func:`randomize`; returns the ``float32 [d]`` estimate of ``sum_{i: mask_i=1} x_i``.

    Example (eps 1 for 1,000 users in 10 dimensions: per-coordinate noise std about 33, against a sum whose
    entries are at most 1,000 L):

      >>> import jax
      >>> params = ShuffleParams(64, 5909, 0.25)           # pvec_parameters(1.0, 1e-5, 1000, 10)
      >>> x = 0.1 * jax.random.normal(jax.random.key(0), (1000, 10))
      >>> estimate = shuffle_sum(jax.random.key(1), x, jnp.ones(1000), 1.0, params)
      >>> std = jnp.sqrt(sum_variance(x, jnp.ones(1000), 1.0, params))
      >>> estimate.shape, bool(jnp.all(jnp.abs(estimate - x.sum(0)) < 5 * std))
      ((10,), True)
    """
    ones = randomize(key, vectors, mask, lipschitz, params, clip=clip)
    num_users = jnp.sum(jnp.asarray(mask) > 0, dtype=jnp.int32)
    return analyze(ones, num_users, lipschitz, params)


def shuffle_sum_tree(key, stacked_tree, mask, lipschitz, params: ShuffleParams, *, clip: bool = False):
    """P_vec applied to per-user pytrees (e.g. per-record gradients), returning a pytree sum.

    Each user's pytree is flattened (``jax.flatten_util.ravel_pytree``) into one vector, so ``L`` bounds the
    *global* L2 norm over all leaves; the summed vector is unflattened back.

    The other arguments are as in :func:`shuffle_sum`.

    Args:
      stacked_tree: pytree whose leaves have a leading user axis ``[U, ...]``.
      mask: ``[U]`` real-user mask.

    Returns:
      a pytree shaped like one user's tree, the estimate of the sum over real users.

    Example (per-user pytrees of two leaves; L bounds each user's norm over both):
      >>> import jax
      >>> params = ShuffleParams(64, 5909, 0.25)           # pvec_parameters(1.0, 1e-5, 1000, 10)
      >>> x = 0.1 * jax.random.normal(jax.random.key(0), (1000, 10))
      >>> total = shuffle_sum_tree(jax.random.key(1), {"a": x[:, :4], "b": x[:, 4:]}, jnp.ones(1000), 1.0, params)
      >>> jax.tree.map(jnp.shape, total)
      {'a': (4,), 'b': (6,)}
    """
    one = jax.tree_util.tree_map(lambda leaf: leaf[0], stacked_tree)
    _, unravel = ravel_pytree(one)
    flat = jax.vmap(lambda tree: ravel_pytree(tree)[0])(stacked_tree)
    return unravel(shuffle_sum(key, flat, mask, lipschitz, params, clip=clip))


def sum_variance(vectors, mask, lipschitz, params: ShuffleParams):
    """Exact per-coordinate variance of :func:`shuffle_sum`'s output for these inputs.

    ``Var_j = (2L/g)^2 * ( sum_{i real} f_ij (1 - f_ij) + U b p (1 - p) )``, ``f_ij = frac(w_ij)``: the
    Bernoulli rounding variances plus the pooled ``Binomial(U b, p)`` noise, in squared input units.

    Returns:
      ``float32 [d]``.

    Example (no noise bits and inputs on the grid: no variance at all):
      >>> x = jnp.array([[0.5, -0.5]])                    # L = 1, g = 4: grid values 3 and 1
      >>> sum_variance(x, jnp.ones(1), 1.0, ShuffleParams(4, 0, 0.25)).tolist()
      [0.0, 0.0]
    """
    g, b, p = _check_params(params)
    _check_lipschitz(lipschitz)
    _check_vectors(vectors, mask)
    real = jnp.asarray(mask) > 0
    x = jnp.where(real[:, None], jnp.asarray(vectors, jnp.float32), 0.0)
    w = _grid_values(x, lipschitz, g)
    frac = w - jnp.floor(w)
    rounding = jnp.sum(jnp.where(real[:, None], frac * (1.0 - frac), 0.0), axis=0)
    n = jnp.sum(real, dtype=jnp.float32)
    return (2.0 * lipschitz / g) ** 2 * (rounding + n * b * p * (1.0 - p))


def variance_bound(num_users, dim, lipschitz, params: ShuffleParams):
    """Worst-case total error ``E||P_vec(X) - sum_i x_i||_2^2`` over inputs of norm ``<= L``.

    ``d * (2L/g)^2 * U * (1/4 + b p (1 - p))`` (each rounding variance ``f(1-f) <= 1/4``).
    ``num_users``, ``lipschitz`` may be traced.

    Example:
      >>> float(variance_bound(1, 1, 1.0, ShuffleParams(4, 0, 0.25)))       # (2/4)^2 * 1/4
      0.0625
    """
    g, b, p = _check_params(params)
    return dim * (2.0 * lipschitz / g) ** 2 * num_users * (0.25 + b * p * (1.0 - p))


# ----------------------------------------------------------------------------------------------------
# Privacy accounting (plain Python, never traced)
# ----------------------------------------------------------------------------------------------------
# Fractions of delta given to the advanced-composition slack (the rest goes to the binomial tails).
_SPLITS = (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def _binomial_window(m: int, p: float, tail: float) -> tuple[int, int]:
    """Integers ``lo <= hi`` with ``P(N < lo) <= tail/2`` and ``P(N > hi) <= tail/2``, ``N ~ Bin(m, p)``."""
    from scipy.stats import binom

    half = tail / 2.0
    lo = int(binom.ppf(half, m, p))
    while lo > 0 and binom.cdf(lo - 1, m, p) > half:  # guard against ppf rounding
        lo -= 1
    while lo < m and binom.cdf(lo, m, p) <= half:
        lo += 1
    hi = int(binom.isf(half, m, p))
    while hi < m and binom.sf(hi, m, p) > half:
        hi += 1
    while hi - 1 >= lo and binom.sf(hi - 1, m, p) <= half:
        hi -= 1
    return lo, max(lo, hi)


def _log_rho(z: int, m: int, p: float) -> float:
    """``log P(N = z) / P(N = z + 1)`` for ``N ~ Bin(m, p)``, ``0 <= z <= m - 1``."""
    return math.log(z + 1) - math.log(m - z) + math.log1p(-p) - math.log(p)


def _certified_epsilon(m: int, g: int, p: float, dim: int, delta: float) -> float:
    """Epsilon of the analysis in the module docstring for ``m`` pooled noise bits per coordinate."""
    if m <= 0:
        return math.inf
    l2 = min(g + math.sqrt(dim), g * math.sqrt(dim))
    l1 = min(g * math.sqrt(dim) + dim, float(g * dim))
    best = math.inf
    for theta in _SPLITS:
        tail = (1.0 - theta) * delta / dim
        lo, hi = _binomial_window(m, p, tail)
        if lo - g < 0 or hi + g > m:
            continue
        lam = max(abs(_log_rho(lo - g, m, p)), abs(_log_rho(hi + g - 1, m, p)))
        best = min(best, lam * l1)  # basic composition, delta = dim * tail <= delta
        if theta > 0:
            x = lam * g
            growth = math.expm1(x) / x if x > 0 else 1.0
            eps_adv = lam * l2 * math.sqrt(2.0 * math.log(1.0 / (theta * delta))) + (lam * l2) ** 2 * growth
            best = min(best, eps_adv)
    return best


def shuffled_epsilon(params: ShuffleParams, num_users: int, dim: int, delta: float) -> float:
    """Central (shuffled) epsilon that P_vec with ``params`` certifies at ``delta``.

    Evaluates the analysis (a)-(d) of the module docstring with ``m = b * num_users`` pooled noise bits per
    coordinate (replace-one neighbours, ``||x_i|| <= L``, all ``num_users`` users honest and reporting).
    Returns ``math.inf`` where the analysis certifies nothing (e.g. ``b = 0`` or too few noise bits).
    This is the inverse of :func:`pvec_parameters`: ``shuffled_epsilon(pvec_parameters(eps, delta, n, d),
    n, d, delta) <= eps``.

    Example:
      >>> params = ShuffleParams(64, 5909, 0.25)           # pvec_parameters(1.0, 1e-5, 1000, 10)
      >>> shuffled_epsilon(params, 1000, 10, 1e-5) <= 1.0, shuffled_epsilon(params._replace(trials=0), 1000, 10, 1e-5)
      (True, inf)
    """
    g, b, p = _check_params(params)
    num_users = _positive_int("num_users", num_users)
    dim = _positive_int("dim", dim)
    delta = checks.delta("delta", delta, scalar=True)
    return _certified_epsilon(b * num_users, g, p, dim, delta)


def local_epsilon(params: ShuffleParams, dim: int, delta: float, reports_per_silo: int) -> float:
    """ISRL-DP epsilon of the P_vec randomizer alone, for one silo, *without* the shuffler.

    A silo whose ``reports_per_silo`` users (its records) each run R_vec and which releases only the
    multiset of its labelled bits (equivalently its per-coordinate counts, what :func:`randomize` returns
    for that silo) exposes ``r + Binomial(reports_per_silo * b, p)`` per coordinate; changing one record
    changes one report. The same analysis as :func:`shuffled_epsilon` therefore applies with
    ``m = reports_per_silo * b``. If the silo's individual reports are linkable to records, use
    ``reports_per_silo=1``. Returns ``math.inf`` where nothing is certified.

    Example (the noise of 100 reports alone hides a record less than that of 1,000 shuffled ones):
      >>> params = ShuffleParams(64, 5909, 0.25)           # pvec_parameters(1.0, 1e-5, 1000, 10)
      >>> round(local_epsilon(params, 10, 1e-5, reports_per_silo=100), 2)
      3.25
    """
    g, b, p = _check_params(params)
    dim = _positive_int("dim", dim)
    delta = checks.delta("delta", delta, scalar=True)
    reports_per_silo = _positive_int("reports_per_silo", reports_per_silo)
    return _certified_epsilon(b * reports_per_silo, g, p, dim, delta)


def default_granularity(num_users: int, dim: int) -> int:
    """``g = max(4, ceil(2 sqrt(U)), ceil(4 sqrt(d)))``.

    ``2 sqrt(U)`` keeps the total rounding variance ``<= d L^2 / 4`` (the shape of Cheu et al.'s choice);
    ``4 sqrt(d)`` keeps the rounding overhead in the L2 shift ``(g + sqrt(d)) / g <= 1.25``. Larger ``g``
    barely reduces the error but grows the counts (``~ g^2``) towards the int32 limit.

    Example:
      >>> default_granularity(1000, 10), default_granularity(10, 10_000)
      (64, 400)
    """
    return max(4, math.ceil(2.0 * math.sqrt(num_users)), math.ceil(4.0 * math.sqrt(dim)))


def pvec_parameters(epsilon: float, delta: float, num_users: int, dim: int, *,
                    granularity: int | None = None, probability: float = 0.25) -> ShuffleParams:
    """Parameters ``(g, b, p)`` for which P_vec is ``(epsilon, delta)``-shuffle-DP.

    Cheu et al.'s exact constants could not be retrieved (see the module docstring), so this uses their
    shape and calibrates the noise with jaxfl's own analysis:

      * ``g = default_granularity(num_users, dim)`` unless given;
      * ``p = probability`` (``1/4`` as in the third-party implementation of Cheu et al.);
      * ``b`` = the smallest integer with ``shuffled_epsilon(ShuffleParams(g, b, p), num_users, dim, delta)
        <= epsilon`` (found by doubling then bisection; the returned value is always checked).

    Lowy & Razaviyayn's Lemma G.1 is quoted for ``0 < eps <= 15, 0 < delta < 1/2``; the analysis here holds for any
    ``eps > 0`` and ``0 < delta < 1``.

    Raises:
      ValueError: a bad argument (named), or no ``b < 2**24`` reaches ``epsilon``.

    Example (eps 1 for 1,000 users in 10 dimensions: 5,909 noise bits per user and coordinate):
      >>> pvec_parameters(1.0, 1e-5, 1000, 10)
      ShuffleParams(granularity=64, trials=5909, probability=0.25)
    """
    if not isinstance(epsilon, (int, float)) or not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon!r}")
    delta = checks.delta("delta", delta, scalar=True)
    num_users = _positive_int("num_users", num_users)
    dim = _positive_int("dim", dim)
    if granularity is None:
        g = default_granularity(num_users, dim)
    else:
        g = _positive_int("granularity", granularity)
    _check_params(ShuffleParams(g, 1, probability))

    def ok(b):
        return _certified_epsilon(b * num_users, g, float(probability), dim, delta) <= epsilon

    hi = 1
    while not ok(hi):
        hi *= 2
        if hi >= _FLOAT32_EXACT:
            raise ValueError(f"epsilon={epsilon!r} is not reachable with trials < 2**24 "
                             f"(num_users={num_users}, dim={dim}, delta={delta})")
    lo = hi // 2  # ok(lo) is False (or lo == 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return ShuffleParams(g, hi, float(probability))


# ----------------------------------------------------------------------------------------------------
# Amplification by shuffling for (eps0, delta0)-DP local randomizers
# ----------------------------------------------------------------------------------------------------
def amplify_by_shuffling(epsilon_local: float, delta_local: float, num_reports: int,
                         delta: float) -> tuple[float, float]:
    """Central ``(epsilon, delta_total)`` after shuffling ``n`` reports of ``(eps0, delta0)``-DP randomizers.

    Feldman, McMillan, Talwar, "Hiding among the clones" (FOCS 2021, arXiv 2012.12803), Thm 3.1 (pure
    ``eps0``) and its approximate-DP extension Thm 3.8, in the form of the authors' reference code
    (github.com/apple/ml-shuffling-amplification, ``computeamplification.closedformanalysis``)::

        a = 8 sqrt(e^eps0 ln(4/delta) / n),  c = 8 e^eps0 / n,  e1 = ln(1 + a + c)
        epsilon = ln(1 + (1 - e^-eps0) / (1 + e^(-eps0 - e1)) * (a + c))
        delta_total = delta + (e^epsilon + 1)(1 + e^-eps0 / 2) n delta0

    valid when ``eps0 <= ln(n / (16 ln(4/delta)))``. Notes on the choice, all conservative:
    the published statement (also Lowy & Razaviyayn's Thm D.5 with one record per silo) uses the factor
    ``(e^eps0 - 1)/(e^eps0 + 1) = (1 - e^-eps0)/(1 + e^-eps0)``, never larger than the code's factor used
    here; the published validity condition has ``ln(2/delta)``, the code's ``ln(4/delta)`` is stricter;
    Lowy & Razaviyayn's Thm D.5 (n = 1) has the smaller ``delta + 2 n delta0``. The README of the reference code
    reports ``epsilon = 0.5378040242374512`` for ``n = 10^5, eps0 = 4, delta = 1e-6``.

    Returns:
      ``(epsilon, delta_total)``; ``(math.inf, 1.0)`` where the condition fails (nothing certified).

    Example (the reference code's README value):
      >>> amplify_by_shuffling(4.0, 0.0, 10**5, 1e-6)
      (0.5378040242374512, 1e-06)
      >>> amplify_by_shuffling(4.0, 0.0, 100, 1e-6)                       # too few reports to amplify
      (inf, 1.0)
    """
    finite = isinstance(epsilon_local, (int, float)) and math.isfinite(epsilon_local)
    if not (finite and epsilon_local >= 0):
        raise ValueError(f"epsilon_local must be finite and >= 0, got {epsilon_local!r}")
    delta_local = _probability("delta_local", delta_local, low_open=False)
    n = _positive_int("num_reports", num_reports)
    delta = checks.delta("delta", delta, scalar=True)
    eps0 = float(epsilon_local)
    ratio = n / (16.0 * math.log(4.0 / delta))
    if ratio <= 1.0 or eps0 > math.log(ratio):
        return math.inf, 1.0
    a = 8.0 * math.sqrt(math.exp(eps0) * math.log(4.0 / delta) / n)
    c = 8.0 * math.exp(eps0) / n
    e1 = math.log1p(a + c)
    factor = -math.expm1(-eps0) / (1.0 + math.exp(-eps0 - e1))
    epsilon = math.log1p(factor * (a + c))
    delta_total = delta + (math.exp(epsilon) + 1.0) * (1.0 + math.exp(-eps0) / 2.0) * n * delta_local
    return epsilon, delta_total


__all__ = [
    "ShuffleParams", "clip_to_norm", "randomize", "analyze", "shuffle_sum", "shuffle_sum_tree",
    "sum_variance", "variance_bound", "shuffled_epsilon", "local_epsilon", "default_granularity",
    "pvec_parameters", "amplify_by_shuffling",
]
