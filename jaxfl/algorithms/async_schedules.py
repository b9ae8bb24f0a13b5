"""van Dijk et al.'s schedules (digest §5-6): sample sizes per round, step sizes per iteration or per round, and
the permissible delay function.

Sample-size sequences are host arrays ``s[i]`` (int, records per round, ``i = 0..rounds-1``); the paper's
``s_i`` is the global size of round ``i`` (all clients together) and :func:`per_client` splits it.
:class:`StepSize` is a value (``eta(t)``, jnp-traceable) applied *per iteration* (``"iterations"``: the
paper's diminishing1, ``t = sum_{j<i} s_j + n h`` for client step ``h`` of round ``i``) or *per round*
(``"rounds"``: diminishing2, every step of round ``i`` at ``t = sum_{j<i} s_j``); see
:func:`jaxfl.algorithms.async_dp.async_sgd`.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxfl import checks
from jaxfl.accounting.increasing_samples import sample_sizes as dp_sizes


def _rounds(rounds) -> np.ndarray:
    return np.arange(checks.positive_int("rounds", rounds), dtype=np.float64)


def _sizes(values, name: str) -> np.ndarray:
    out = np.ceil(np.asarray(values) * (1 - 1e-12)).astype(np.int64)
    if np.any(out < 1):
        raise ValueError(f"{name}: every sample size must be >= 1; round {int(np.argmin(out))} has "
                         f"{int(out.min())} (raise b or start)")
    return out


def constant(size: int, rounds: int) -> np.ndarray:
    """``s_i = size``.

    Example:
      >>> constant(4, 3).tolist()
      [4, 4, 4]
    """
    return np.full(checks.positive_int("rounds", rounds), checks.positive_int("size", size), dtype=np.int64)


def power(a: float, c: float, b: float, rounds: int, start: int = 1) -> np.ndarray:
    """The paper's "O(i) method" ``s_i = ceil(a i^c + b)`` (``c`` in [0, 1]; ``c = 1`` linear), ``i`` counted
    from ``start`` (the paper does not say; at ``i = 0``, ``b = 0`` gives an empty round).

    Example:
      >>> power(1.0, 1.0, 0.0, 4).tolist(), power(2.0, 0.5, 1.0, 4).tolist()       # i, then ceil(2 sqrt(i) + 1)
      ([1, 2, 3, 4], [3, 4, 5, 5])
    """
    a, b = checks.non_negative_float("a", a), checks.non_negative_float("b", b)
    c = checks.non_negative_float("c", c)
    return _sizes(a * (_rounds(rounds) + checks.non_negative_int("start", start)) ** c + b, "power")


def i_over_log(a: float, b: float, rounds: int, start: int = 2) -> np.ndarray:
    """The "O(i / ln i) method" ``s_i = ceil(a i / ln(i) + b)``, ``i`` from ``start >= 2`` (undefined at 0, 1).

    Example (``i / ln i`` falls from i = 2 to its minimum at i = e, then grows):
      >>> i_over_log(10.0, 0.0, 4).tolist()
      [29, 28, 29, 32]
    """
    start = checks.integer("start", start, minimum=2)
    i = _rounds(rounds) + start
    return _sizes(checks.non_negative_float("a", a) * i / np.log(i) + checks.non_negative_float("b", b), "i_over_log")


def lemma_b3(g: float, gamma: Callable[[np.ndarray], np.ndarray], m: int, d: int, rounds: int) -> np.ndarray:
    """Lemma B.3's sequence satisfying condition (2) for lookahead ``d``: ``s_i = ceil(S((m+i+1)/(d+1)) / (d+1))``
    with ``S(x) = ((x / omega(x)) (g-1)/g)^{1/(g-1)}``, ``omega(x) = gamma((x (g-1)/g)^{g/(g-1)})``.

    Example (``g = 2``, ``gamma(z) = 4 ln z``: :func:`theorem_22`'s sequence):
      >>> import numpy as np
      >>> lemma_b3(2.0, lambda z: 4.0 * np.log(z), 2000, 1, 4).tolist() == theorem_22(2000, 1, 4).tolist()
      True
    """
    g = checks.positive_float("g", g)
    if g <= 1:
        raise ValueError(f"g must be > 1, got {g!r}")
    d = checks.non_negative_int("d", d)
    x = (checks.non_negative_int("m", m) + _rounds(rounds) + 1) / (d + 1)
    omega = gamma((x * (g - 1) / g) ** (g / (g - 1)))
    return _sizes(((x / omega) * (g - 1) / g) ** (1 / (g - 1)) / (d + 1), "lemma_b3")


def theorem_22(m: int, d: int, rounds: int) -> np.ndarray:
    """Theorem 2.2's ``s_i = ceil((m+i+1) / (16 (d+1)^2) / ln((m+i+1) / (2(d+1))))``: Lemma B.3 with ``g = 2``,
    ``gamma(z) = 4 ln z`` (``Theta(i / ln i)``). Needs ``m + 1 > 2 (d + 1)``.

    Example:
      >>> theorem_22(2000, 1, 4).tolist()
      [6, 6, 6, 6]
      >>> theorem_22(3, 1, 4)
      Traceback (most recent call last):
      ...
      ValueError: m must exceed 2 (d + 1) - 1 = 3 (the logarithm is not positive), got 3
    """
    if checks.non_negative_int("m", m) + 1 <= 2 * (checks.non_negative_int("d", d) + 1):
        raise ValueError(f"m must exceed 2 (d + 1) - 1 = {2 * d + 1} (the logarithm is not positive), got {m!r}")
    return lemma_b3(2.0, lambda z: 4.0 * np.log(z), m, d, rounds)


def dp(records: int, q: float, m: float, p: float, rounds: int) -> np.ndarray:
    """The DP schedule ``s_{i,c} = ceil(N_c q (i + m)^p)`` (per client; Theorem 3.2).

    Example (a client of 1,000 records, q 0.01, m 10, p 0.5):
      >>> dp(1000, 0.01, 10, 0.5, 4).tolist()
      [32, 34, 35, 37]
    """
    return np.asarray(dp_sizes(records, q, m, p, rounds), dtype=np.int64)


def per_client(sizes, num_clients: int, weights=None, mode: str = "split", seed: int = 0) -> np.ndarray:
    """``s_{i,c}`` (``[rounds, num_clients]``) from the global ``s_i``: ``"split"``, ``ceil(p_c s_i)`` (the
    experiments' ``s_i / n`` at equal weights; the paper's DP deterministic form); ``"multinomial"``, Setup's
    coin flips (each of the ``s_i`` iterations assigned to client ``c`` with probability ``p_c``, seeded;
    a client may get 0).

    Example:
      >>> per_client([10, 20, 30], 4).tolist()                        # ceil(s_i / 4) each
      [[3, 3, 3, 3], [5, 5, 5, 5], [8, 8, 8, 8]]
      >>> per_client([10, 20, 30], 4, mode="multinomial").sum(axis=1).tolist()   # s_i iterations dealt out
      [10, 20, 30]
    """
    s = np.asarray(sizes, dtype=np.int64)
    n = checks.positive_int("num_clients", num_clients)
    w = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (n,) or np.any(w < 0) or not math.isclose(float(w.sum()), 1.0, rel_tol=1e-9):
        raise ValueError(f"weights must be {n} non-negative numbers summing to 1, got {weights!r}")
    if checks.one_of("mode", mode, ("split", "multinomial")) == "split":
        return _sizes(np.outer(s, w), "per_client")
    rng = np.random.default_rng(seed)  # host-rng-ok: Setup's schedule, fixed before the run (no data)
    return np.stack([rng.multinomial(int(si), w) for si in s]).astype(np.int64)


# ------------------------------------------------------------------------------------------------
# Step sizes


class StepSize(NamedTuple):
    """``eta(t)`` at global iteration ``t``: ``"constant"`` ``eta0``; ``"inverse"`` ``eta0 / (1 + beta t)``
    (strongly convex); ``"inverse_sqrt"`` ``eta0 / (1 + beta sqrt(t))`` (plain convex, non-convex).
    ``per``: ``"iterations"`` (diminishing1) or ``"rounds"`` (diminishing2), see the module docstring.

    Example:
      >>> import numpy as np
      >>> StepSize("inverse", 0.5, 0.1)(np.array([0, 10])).tolist()        # 0.5 / (1 + 0.1 t)
      [0.5, 0.25]
    """

    kind: str
    eta0: float
    beta: float = 0.0
    per: str = "rounds"

    def __call__(self, t):
        """``eta(t)``: jnp for traced or jax arrays, NumPy float64 for host numbers and arrays."""
        xp = jnp if isinstance(t, jax.Array) else np
        t = xp.asarray(t, jnp.float32 if xp is jnp else np.float64)
        if self.kind == "constant":
            return xp.full_like(t, self.eta0)
        scale = t if self.kind == "inverse" else xp.sqrt(t)
        return self.eta0 / (1.0 + self.beta * scale)


def step_size(kind: str, eta0: float, beta: float = 0.0, per: str = "rounds") -> StepSize:
    """A checked :class:`StepSize`.

    Example:
      >>> round(float(step_size("inverse_sqrt", 0.1, 1.0)(4.0)), 6)              # 0.1 / (1 + sqrt 4)
      0.033333
      >>> step_size("cosine", 0.1)
      Traceback (most recent call last):
      ...
      ValueError: kind must be one of ...
    """
    return StepSize(checks.one_of("kind", kind, ("constant", "inverse", "inverse_sqrt")),
                    checks.positive_float("eta0", eta0), checks.non_negative_float("beta", beta),
                    checks.one_of("per", per, ("iterations", "rounds")))


def theorem_22_round_steps(sizes, mu: float, big_l: float, m: int, d: int) -> np.ndarray:
    """Theorem 2.2's round step ``eta_i = (12/mu) / (S_i + 2 M_1 + sqrt((M_0 + S_i) / ln(M_0 + S_i)))`` with
    ``S_i = sum_{j<i} s_j``, ``M_0 = (m+1)^2 / 4`` and ``M_1`` of :func:`theorem_22_delay` (``alpha = 36``).

    Example (diminishing with the iterations done before each round):
      >>> steps = theorem_22_round_steps(theorem_22(2000, 1, 4), mu=1.0, big_l=1.0, m=2000, d=1)
      >>> [round(float(eta), 5) for eta in steps]
      [0.02904, 0.02863, 0.02822, 0.02783]
    """
    s = np.asarray(sizes, dtype=np.float64)
    mu = checks.positive_float("mu", mu)
    m0, m1 = _m0_m1(mu, big_l, m, d)
    before = np.concatenate([[0.0], np.cumsum(s)[:-1]])
    return (12.0 / mu) / (before + 2 * m1 + np.sqrt((m0 + before) / np.log(m0 + before)))


def _m0_m1(mu, big_l, m, d) -> tuple[float, float]:
    m, d = checks.non_negative_int("m", m), checks.non_negative_int("d", d)
    if m + 1 <= 2 * (d + 1):
        raise ValueError(f"m must exceed {2 * d + 1}, got {m!r}")
    m0 = (m + 1) ** 2 / 4.0
    m1 = max(d + 1, 2 * checks.positive_float("big_l", big_l) * 36 / checks.positive_float("mu", mu),
             0.5 * math.ceil((m + 1) / (16 * (d + 1) ** 2) / math.log((m + 1) / (2 * (d + 1)))))
    return m0, m1


def theorem_22_delay(mu: float, big_l: float, m: int, d: int) -> Callable[[np.ndarray], np.ndarray]:
    """Theorem 2.2's permissible delay ``tau(t) = M_1 + sqrt((t + M_0) / (4 ln(t + M_0)))``.

    Example:
      >>> tau = theorem_22_delay(mu=1.0, big_l=1.0, m=2000, d=1)
      >>> [round(float(v), 2) for v in tau([0.0, 1e4])]
      [206.58, 207.2]
    """
    m0, m1 = _m0_m1(mu, big_l, m, d)
    return lambda t: m1 + np.sqrt((np.asarray(t, np.float64) + m0) / (4.0 * np.log(np.asarray(t, np.float64) + m0)))


def satisfies_condition_2(sizes, tau: Callable, d: int) -> bool:
    """Condition (2): ``tau(sum_{j<=i} s_j) >= sum_{j=i-d}^{i} s_j`` for every ``i >= d + 1``.

    Example (Theorem 2.2's sizes meet it; rounds of a million iterations exceed the permitted delay):
      >>> tau = theorem_22_delay(mu=1.0, big_l=1.0, m=2000, d=1)
      >>> satisfies_condition_2(theorem_22(2000, 1, 50), tau, 1), satisfies_condition_2(constant(10**6, 50), tau, 1)
      (True, False)
    """
    s = np.asarray(sizes, dtype=np.float64)
    d = checks.non_negative_int("d", d)
    total = np.cumsum(s)
    window = np.array([s[max(0, i - d):i + 1].sum() for i in range(len(s))])
    i = np.arange(len(s)) >= d + 1
    return bool(np.all(tau(total[i]) >= window[i]))
