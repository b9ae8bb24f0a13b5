"""Closed-form privacy of Gaussian rounds whose sample sizes grow (van Dijk et al.'s DP theorems), and the
parameter selection that reproduces their Examples 1-5.

* :func:`theorem_31_sigma`: DP-Thm 3.1 (any sample sizes), the smallest sigma it certifies;
* :func:`theorem_d3_constants` (A, B of Theorem D.3 for any ``r_0``, ``gamma``, ``alpha``),
  :func:`closed_form_b` (Theorem 3.2's B at ``r_0(sigma)``), :func:`r0_of_sigma` (the fixed point),
  :func:`k_bounds` (K^-, K^+, K^*), :func:`theorem_32` (DP-Thm 3.2: which case, and the delta it certifies);
* :func:`sample_sizes` (``s_i = q (i + m)^p N``), :func:`select_parameters`: the parameter-selection procedure
  of the paper's §8.6.

These are the paper's bounds, on its per-round log-moment bound (:mod:`jaxfl.accounting.moments`, which also
checks any schedule exactly). Units: epsilon in nats, delta a probability, sigma the noise multiplier
(noise std / C), sample sizes in records per client and round. Typos the paper's digest flags are fixed and
marked in comments.

References:
  M. van Dijk, N. V. Nguyen, T. N. Nguyen, L. M. Nguyen, Q. Tran-Dinh and P. H. Nguyen. "Asynchronous
  Federated Learning with Reduced Number of Rounds and with Differential Privacy from Less Aggregated Gaussian
  Noise." arXiv preprint, 2020.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

from jaxfl import checks
from jaxfl.accounting.moments import _round_sizes, r_factor


SQRT3_HALF = (math.sqrt(3.0) - 1.0) / 2.0
TRANSITION = 2.0 * math.sqrt(SQRT3_HALF)
"""Theorem 3.2's "1.21" between its two cases: ``2 sqrt((sqrt 3 - 1) / 2) = 1.2100007`` (digest §8.4)."""
MIN_SIGMA = 1.137
"""Theorem 3.2 holds for ``sigma >= 1.137`` (where ``u_0, u_1 < 1`` at ``r_0(sigma)``)."""

# ------------------------------------------------------------------------------------------------
# DP-Thm 3.1 (any sample sizes)


@dataclasses.dataclass(frozen=True)
class Theorem31:
    """DP-Thm 3.1 for one schedule: ``sigma_min`` and its intermediate quantities (``s_hat = (S^_1, S^_2,
    S^_3)``, ``rho``, ``rho_hat``, ``c1``, ``c0``, ``r``, ``r0``), and ``branch``: ``"2/(rho_hat x)"`` (sigma_min
    is then ``sqrt(2 ln(1/delta) / eps)``, whatever the schedule) or ``"r rho"``. Example: :func:`theorem_31_sigma`.
    """

    sigma_min: float
    s_hat: tuple
    rho: float
    rho_hat: float
    c1: float
    c0: float
    r: float
    r0: float
    branch: str


def theorem_31_sigma(sample_sizes, records: int, epsilon: float, delta: float, sigma: float,
                     r0: float | None = None) -> Theorem31:
    """DP-Thm 3.1: the rounds (sizes ``s_1..s_T`` of one client with ``N_c = records``) at noise ``sigma``
    are (eps, delta)-DP if ``sigma >= sigma_min = (2 / sqrt(c_0)) sqrt(S^_2 T ln(1/delta)) / eps``, where
    ``S^_j = (1/T) sum_i s_i^j / (N_c (N_c - s_i)^{j-1})``, ``rho = S^_1 S^_3 / S^_2^2``, ``rho_hat = S^_1^2 / S^_2``,
    ``c_1 = eps / (T S^_1^2)`` and ``c_0 = min((sqrt(2 r rho c_1 + 1) - 1) / (r rho c_1), 2 / (rho_hat c_1))``.
    ``r0`` (default ``sigma max_i s_i / N_c``, the smallest allowed) must be ``<= 1/e``.

    Example (van Dijk et al.'s Example 3: the linear schedule and the constant one need the same sigma here):
      >>> import math
      >>> linear = theorem_31_sigma([16 + math.ceil(1.3216 * i) for i in range(195)], 10_000, 1.0, 5.5e-8, 8.0)
      >>> constant = theorem_31_sigma([16] * 1563, 10_000, 1.0, 5.5e-8, 8.0)
      >>> round(linear.sigma_min, 3), round(constant.sigma_min, 3), linear.branch
      (5.782, 5.782, '2/(rho_hat x)')
    """
    s, n = _round_sizes(sample_sizes, records)
    eps = checks.positive_float("epsilon", epsilon)
    d = checks.probability("delta", delta)
    sigma = checks.positive_float("sigma", sigma)
    r0 = sigma * float(np.max(s)) / n if r0 is None else checks.positive_float("r0", r0)
    if r0 > 1.0 / math.e or float(np.max(s)) / n > r0 / sigma * (1 + 1e-12):
        raise ValueError(f"r0 must satisfy max s_i / N_c <= r0 / sigma and r0 <= 1/e, got r0={r0!r} "
                         f"(max s_i / N_c = {float(np.max(s)) / n:.6g}, sigma={sigma!r})")
    r, _, _ = r_factor(r0, sigma)
    t = s.size
    s_hat = tuple(float(np.mean(s ** j / (n * (n - s) ** (j - 1)))) for j in (1, 2, 3))
    rho = s_hat[0] * s_hat[2] / s_hat[1] ** 2
    rho_hat = s_hat[0] ** 2 / s_hat[1]
    c1 = eps / (t * s_hat[0] ** 2)
    first = (math.sqrt(2 * r * rho * c1 + 1) - 1) / (r * rho * c1)
    second = 2.0 / (rho_hat * c1)
    c0 = min(first, second)
    sigma_min = 2.0 / math.sqrt(c0) * math.sqrt(s_hat[1] * t * math.log(1.0 / d)) / eps
    return Theorem31(sigma_min, s_hat, rho, rho_hat, c1, c0, r, r0, "r rho" if first < second else "2/(rho_hat x)")


# ------------------------------------------------------------------------------------------------
# Theorem D.3 / DP-Thm 3.2 (q_i = q (i + m)^p)


def _p(p) -> float:
    return checks.non_negative_float("p", p)


def theorem_d3_constants(p: float, r0: float, sigma: float, gamma: float = 0.0,
                         alpha: float | None = None) -> tuple[float, float]:
    """``(A, B)`` of Theorem D.3 for any ``r_0``, ``gamma >= m / T`` and ``alpha >= q (T + m)^p`` (default
    ``r_0 / sigma``, as in the paper's examples), with ``r`` from eq. (14)::

        A = (p+1)^{-p/(1+2p)} (r (2p+1)^2 / (3p+1) (1+gamma)^{3(1+2p)} / (1-alpha)^2)^{(1+p)/(1+2p)}
        B = A (1+gamma)^{-(1+p)(3+4p)/(1+2p)}
              (2 / ((2 r (p+1)(2p+1) (1+gamma)^{2p} / ((3p+1)(1-alpha)^2) + 1)^2 - 1))^{(1+p)/(1+2p)}

    Example (at ``r_0(sigma)`` and ``gamma = 0``, B is Theorem 3.2's closed form):
      >>> a, b = theorem_d3_constants(1, r0_of_sigma(8.0, 1), 8.0)
      >>> round(b, 12) == round(closed_form_b(1), 12)
      True
    """
    p = _p(p)
    gamma = checks.non_negative_float("gamma", gamma)
    alpha = r0 / sigma if alpha is None else checks.probability("alpha", alpha, open_high=True)
    r, _, _ = r_factor(r0, sigma)
    e = (1 + p) / (1 + 2 * p)
    a = (p + 1) ** (-p / (1 + 2 * p)) * (r * (2 * p + 1) ** 2 / (3 * p + 1) * (1 + gamma) ** (3 * (1 + 2 * p))
                                         / (1 - alpha) ** 2) ** e
    inner = 2 * r * (p + 1) * (2 * p + 1) * (1 + gamma) ** (2 * p) / ((3 * p + 1) * (1 - alpha) ** 2) + 1
    b = a * (1 + gamma) ** (-(1 + p) * (3 + 4 * p) / (1 + 2 * p)) * (2.0 / (inner ** 2 - 1)) ** e
    return a, b


def closed_form_b(p: float) -> float:
    """Theorem 3.2's ``B = (1/(1+p)) (((sqrt 3 - 1)/2) (2p+1))^{(1+p)/(1+2p)}``: Theorem D.3's B at
    ``r_0 = r_0(sigma)`` and ``gamma = 0`` (0.5321797270231777 at p = 1).

    Example:
      >>> closed_form_b(1)
      0.5321797270231777
    """
    p = _p(p)
    return (SQRT3_HALF * (2 * p + 1)) ** ((1 + p) / (1 + 2 * p)) / (1 + p)


def r0_of_sigma(sigma: float, p: float, iterations: int = 200) -> float:
    """``r_0(sigma)`` (Theorem D.3): the fixed point of ``r_0 <- ((sqrt 3 - 1)/2) (3p+1) / ((p+1)(2p+1))
    (1 - r_0/sigma)^2 / (r / r_0)`` from ``r_0 = 0``, where Theorem D.3's condition (24) holds with equality at
    ``alpha = r_0 / sigma``, ``gamma = 0``. Needs ``sigma >= 1.137``.

    Example (the paper's Example 4 prints the rounded 0.0247 at sigma 8):
      >>> round(r0_of_sigma(8.0, 1), 4)
      0.0248
      >>> r0_of_sigma(1.0, 1)
      Traceback (most recent call last):
      ...
      ValueError: sigma must be >= ... for r_0(sigma) (Theorem 3.2), got 1.0
    """
    sigma = checks.positive_float("sigma", sigma)
    if sigma < MIN_SIGMA:
        raise ValueError(f"sigma must be >= {MIN_SIGMA} for r_0(sigma) (Theorem 3.2), got {sigma!r}")
    p = _p(p)
    scale = SQRT3_HALF * (3 * p + 1) / ((p + 1) * (2 * p + 1))
    r0 = 0.0
    for _ in range(checks.positive_int("iterations", iterations)):
        ratio = (8.0 * (1.0 / (1.0 - 2.0 * math.sqrt(r0 * sigma) / (sigma - r0))
                        + math.e ** 3 / sigma ** 3 / (1.0 - 2.0 * math.e * math.sqrt(r0 * sigma)
                                                      / ((sigma - r0) * sigma)))
                 * math.exp(3.0 / sigma ** 2))
        r0 = scale * (1.0 - r0 / sigma) ** 2 / ratio
    return r0


@dataclasses.dataclass(frozen=True)
class KBounds:
    """``K^-``, ``K^+`` and ``K^*`` (gradient computations per client), for ``q`` and ``N_c``. Example:
    :func:`k_bounds`."""

    k_minus: float
    k_plus: float
    k_star: float


def k_bounds(p: float, q: float, records: int, epsilon: float, sigma: float, r0: float, gamma: float = 0.0,
             a_b: tuple | None = None) -> KBounds:
    """Theorem 3.2 / D.3: ``K^- = B eps^{(1+p)/(1+2p)} q^{-1/(1+2p)} N_c``, ``K^+`` the same with ``A``, and
    ``K^* = ((r_0/sigma)^{(1+p)/p} / (p+1)) q^{-1/p} N_c (1+gamma)^{1+p}`` (``inf`` at p = 0). ``a_b``: ``(A, B)``
    (default :func:`theorem_d3_constants` at ``r0``, ``gamma``).

    Example (Example 3's q at N_c = 10,000, eps 1, sigma 8, r_0 = 1/e):
      >>> import math
      >>> bounds = k_bounds(1, 1.3216327772100012e-4, 10_000, 1.0, 8.0, 1 / math.e)
      >>> round(bounds.k_minus), bounds.k_minus < bounds.k_star < bounds.k_plus
      (26876, True)
    """
    p = _p(p)
    q = checks.probability("q", q)
    n = checks.positive_int("records", records)
    eps = checks.positive_float("epsilon", epsilon)
    a, b = theorem_d3_constants(p, r0, sigma, gamma) if a_b is None else a_b
    scale = eps ** ((1 + p) / (1 + 2 * p)) * q ** (-1.0 / (1 + 2 * p)) * n
    star = (math.inf if p == 0
            else ((r0 / sigma) ** ((1 + p) / p) / (p + 1)) * q ** (-1.0 / p) * n * (1 + gamma) ** (1 + p))
    return KBounds(b * scale, a * scale, star)


def noise_factor(gamma: float, r0: float, sigma: float, p: float) -> float:
    """``(1 + gamma)^{2+3p} / sqrt(1 - r_0 / sigma)``: Theorem 3.2's case-1 bound is ``sigma >= sqrt(2 ln(1/delta)
    / eps) x`` this factor, so ``B_priv = sigma / factor`` is the largest ``sqrt(2 ln(1/delta) / eps)`` a
    ``sigma`` covers.

    Example:
      >>> import math
      >>> round(noise_factor(0.0, 1 / math.e, 8.0, 1), 4)          # 1 / sqrt(1 - r_0 / sigma) at gamma 0
      1.0238
    """
    return (1 + gamma) ** (2 + 3 * _p(p)) / math.sqrt(1.0 - r0 / sigma)


@dataclasses.dataclass(frozen=True)
class Theorem32:
    """DP-Thm 3.2 for ``q_i = q (i + m)^p`` over ``T`` rounds: ``K`` (per client), its bounds, the ``case``
    (``1``: ``K <= K^-``; ``2``: ``K >= K^+``; ``None``: between, or ``K > K^*``: the theorem states nothing),
    and the ``delta`` it certifies at the run's epsilon (1.0 when it states nothing). Example: :func:`theorem_32`.
    """

    k: float
    bounds: KBounds
    case: int | None
    b_priv: float
    delta: float


def theorem_32(p: float, q: float, m: float, rounds: int, records: int, epsilon: float, sigma: float,
               r0: float | None = None) -> Theorem32:
    """DP-Thm 3.2 at the paper's ``K / N_c = sum_{i=1}^{T} q (i+m)^p`` (Theorem D.3's indexing), ``gamma = m / T``,
    ``r_0`` default ``r_0(sigma)``. Case 1: ``delta = exp(-eps B_priv^2 / 2)`` with ``B_priv = sigma / factor``;
    case 2: ``B_priv`` further divided by ``(K/K^+)^{(1+2p)/(2+2p)} 1.21``.

    Example (Example 3's q and m: 150 rounds are in case 1; its own 195 exceed K^-, where the theorem is silent):
      >>> import math
      >>> q, m = 1.3216327772100012e-4, 12.106237281566509
      >>> short = theorem_32(1, q, m, 150, 10_000, 1.0, 8.0, r0=1 / math.e)
      >>> short.case, short.delta < 1e-6
      (1, True)
      >>> full = theorem_32(1, q, m, 195, 10_000, 1.0, 8.0, r0=1 / math.e)
      >>> full.case, full.delta, round(full.k)
      (None, 1.0, 28376)
    """
    p, T = _p(p), checks.positive_int("rounds", rounds)
    n = checks.positive_int("records", records)
    eps = checks.positive_float("epsilon", epsilon)
    r0 = r0_of_sigma(sigma, p) if r0 is None else r0
    m = checks.non_negative_float("m", m)
    k = n * q * float(np.sum((np.arange(1, T + 1) + m) ** p))
    gamma = m / T
    bounds = k_bounds(p, q, n, eps, sigma, r0, gamma)
    b_priv = sigma / noise_factor(gamma, r0, sigma, p)
    case = None
    if k <= bounds.k_star:
        if k <= bounds.k_minus:
            case = 1
        elif k >= bounds.k_plus:
            case, b_priv = 2, b_priv / ((k / bounds.k_plus) ** ((1 + 2 * p) / (2 + 2 * p)) * TRANSITION)
    delta = math.exp(-eps * b_priv ** 2 / 2) if case else 1.0
    return Theorem32(k, bounds, case, b_priv, delta)


# ------------------------------------------------------------------------------------------------
# Parameter selection (§8.6)


@dataclasses.dataclass(frozen=True)
class SelectionPass:
    """One pass of :func:`select_parameters`: the K^- and K^* coefficients (``K^- = coef_minus q^{-1/(1+2p)} N_c``,
    ``K^* = coef_star q^{-1/p} N_c``), the q bounds they give, and the resulting ``q``, ``m``, ``T``, ``gamma``.
    Example: :func:`select_parameters`."""

    coef_minus: float
    coef_star: float
    q_minus: float
    q_star: float
    q: float
    m: float
    rounds: float
    gamma: float


@dataclasses.dataclass(frozen=True)
class Selection:
    """What §8.6 chose: ``q``, ``m``, ``rounds`` (T), ``gamma = m / T``, the noise ``factor``, ``b_priv``,
    ``delta`` at the epsilon, the passes, and ``sample_sizes`` ``ceil(N_c q (i + m)^p)`` for ``i = 0..T-1``.
    Example: :func:`select_parameters`."""

    q: float
    m: float
    rounds: float
    gamma: float
    factor: float
    b_priv: float
    delta: float
    passes: tuple
    sample_sizes: tuple

    def aggregate_noise(self, sigma: float) -> float:
        """``sqrt(T) sigma``: the std (in units of C) of all rounds' noise together, the paper's figure of merit."""
        return math.sqrt(self.rounds) * sigma


def _ceil(x: float) -> int:
    return int(math.ceil(x * (1 - 1e-12)))


def sample_sizes(records: int, q: float, m: float, p: float, rounds: int) -> tuple:
    """The DP schedule ``s_{i,c} = ceil(N_c q (i + m)^p)`` for rounds ``i = 0..rounds-1`` (float round-off
    below an integer does not round up).

    Example (Example 3's schedule: 16 + ceil(1.3216 i)):
      >>> sample_sizes(10_000, 1.3216327772100012e-4, 12.106237281566509, 1, 4)
      (16, 18, 19, 20)
    """
    n = checks.positive_int("records", records)
    return tuple(_ceil(n * q * (i + m) ** _p(p)) for i in range(checks.positive_int("rounds", rounds)))


def select_parameters(initial_size: int, records: int, p: float, epsilon: float, sigma: float, k_epochs: float,
                      r0: float | None = None, passes: int | None = None, integer_rounds: bool = True,
                      max_passes: int = 50) -> Selection:
    """The paper's parameter selection (§3 / D.3.2, digest §8.6), case 1. Per pass, from ``gamma`` (0 at first):
    ``q = min(q^-, q^*)``, the largest q with ``K <= K^-`` and ``K <= K^*`` (``K = k_epochs N_c``); ``m =
    (s_0 / (N_c q))^{1/p}``; ``T = ((p+1) K / (N_c q))^{1/(p+1)}`` (rounded up with ``integer_rounds``, as the
    paper's examples); ``gamma = m / T``. ``passes``: how many (the paper's Example 3 stops at 3); default until
    T repeats. Then ``B_priv = sigma / noise_factor(gamma)`` and ``delta = exp(-eps B_priv^2 / 2)``.

    ``r0``: default ``r_0(sigma)`` (:func:`r0_of_sigma`); the paper's Examples 3 and 5 use ``1/e``, Examples 1
    and 4 the rounded ``r_0(sigma)`` 0.0110 and 0.0247.

    Example (the paper's Example 3: N_c 10,000, eps 1, sigma 8, K 2.5 epochs, s_0 16, p 1, three passes):
      >>> import math
      >>> sel = select_parameters(16, 10_000, 1, 1.0, 8.0, 2.5, r0=1 / math.e, passes=3)
      >>> [p.rounds for p in sel.passes], round(sel.b_priv, 4), f"{sel.delta:.3g}"
      ([175.0, 193.0, 195.0], 5.782, '5.5e-08')
      >>> round(sel.aggregate_noise(8.0))                            # sqrt(T) sigma: the paper's 112
      112
    """
    s0 = checks.positive_int("initial_size", initial_size)
    n = checks.positive_int("records", records)
    p = _p(p)
    if p == 0:
        raise ValueError("p must be > 0 for the increasing schedule (p = 0 is the constant schedule: T = K / s_0)")
    eps = checks.positive_float("epsilon", epsilon)
    sigma = checks.positive_float("sigma", sigma)
    k = checks.positive_float("k_epochs", k_epochs) * n
    r0 = r0_of_sigma(sigma, p) if r0 is None else checks.positive_float("r0", r0)
    gamma, history = 0.0, []
    for _ in range(checks.positive_int("passes", passes) if passes is not None else max_passes):
        _, b = theorem_d3_constants(p, r0, sigma, gamma)
        coef_minus = b * eps ** ((1 + p) / (1 + 2 * p))
        coef_star = (r0 / sigma) ** ((1 + p) / p) / (p + 1) * (1 + gamma) ** (1 + p)
        q_minus, q_star = (coef_minus * n / k) ** (1 + 2 * p), (coef_star * n / k) ** p
        q = min(q_minus, q_star)
        m = (s0 / (n * q)) ** (1.0 / p)
        rounds = ((p + 1) * k / (n * q)) ** (1.0 / (p + 1))
        rounds = float(_ceil(rounds)) if integer_rounds else rounds
        repeat = bool(history) and history[-1].rounds == rounds
        gamma = m / rounds
        history.append(SelectionPass(coef_minus, coef_star, q_minus, q_star, q, m, rounds, gamma))
        if passes is None and repeat:
            break
    last = history[-1]
    factor = noise_factor(last.gamma, r0, sigma, p)
    b_priv = sigma / factor
    sizes = sample_sizes(n, last.q, last.m, p, int(math.ceil(last.rounds)))
    return Selection(last.q, last.m, last.rounds, last.gamma, factor, b_priv, math.exp(-eps * b_priv ** 2 / 2),
                     tuple(history), sizes)


def b_priv(epsilon: float, delta: float) -> float:
    """The privacy budget ``sqrt(2 ln(1/delta) / eps)`` of §8.6 (the sigma case 1 needs, before its factors).

    Example:
      >>> round(b_priv(1.0, 5.5e-8), 3)
      5.782
    """
    return math.sqrt(2 * math.log(1.0 / checks.probability("delta", delta)) / checks.positive_float("epsilon", epsilon))


def rounds_to_reach(sizes: Sequence[int], k: float) -> int:
    """The number of leading rounds of ``sizes`` whose sum first reaches ``k`` gradient computations (digest
    §11.8: Example 3's 195 rounds hold 28,215 steps; 183 reach K = 25,000).

    Example:
      >>> rounds_to_reach([16, 18, 19, 20], 50)
      3
    """
    total = np.cumsum(np.asarray(sizes, dtype=np.float64))
    if total[-1] < k:
        raise ValueError(f"the schedule's {len(sizes)} rounds hold {total[-1]:g} < k={k!r} computations")
    return int(np.searchsorted(total, k) + 1)
