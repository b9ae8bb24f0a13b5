"""Lowy et al.'s noise calibrations (Lowy, Ghafelebashi & Razaviyayn, "Private Non-Convex Federated Learning
Without a Trusted Server", AISTATS 2023). Sections cited are the paper's (§3, §4, §6, §9).

Each function is one formula of the paper, as the digest gives it. Where the digest flags a typo the
default is the corrected formula and ``printed=True`` (or the keyword named in the docstring) gives the
printed one. Units: every ``sigma`` is the standard deviation, per coordinate, of the Gaussian noise a silo
adds to its minibatch-*mean* gradient (or gradient difference), in the units of ``L`` (the Lipschitz
constant, or the per-example clip norm used in its place). ``epsilon`` is in nats, ``delta`` a probability.
Adjacency is replace-one within a silo (ISRL-DP) or anywhere (SDP), so a mean of ``K`` gradients bounded by
``L`` has l2 sensitivity ``2L/K``. :func:`noise_multiplier` converts a sigma to the engine's multiplier.

Functions take plain Python scalars and raise ``ValueError`` naming the offending argument. Helpers already
in :mod:`jaxfl.accounting.sgd_noise` (Lowy & Razaviyayn) are reused where the formula is identical; their
*experiment* baselines use ``ln(1/delta)`` while Lowy et al.'s use ``ln(2/delta)``, so those are separate here.
"""
from __future__ import annotations

import math

from jaxfl import checks
from jaxfl.accounting import sgd_noise

# Guard for floor/ceil of values that are integers up to float rounding.
_ROUND_SLACK = 1e-12


def _floor(x: float) -> int:
    return int(math.floor(x * (1 + _ROUND_SLACK)))


def _ceil(x: float) -> int:
    return int(math.ceil(x * (1 - _ROUND_SLACK)))


def _silos(num_silos, silos_per_round) -> tuple[int, int]:
    N = checks.positive_int("num_silos", num_silos)
    M = checks.positive_int("silos_per_round", silos_per_round)
    if M > N:
        raise ValueError(f"silos_per_round must be <= num_silos={N}, got {silos_per_round!r}")
    return N, M


def _prop_d2_variance(sensitivity: float, epsilon: float, delta: float) -> float:
    """Prop. D.2 (Gaussian mechanism via zCDP, Bun-Steinke): ``sigma^2 = 4 Delta^2 ln(1/delta) / eps^2``
    is ``eps^2/(8 ln(1/delta))``-zCDP, hence (eps, delta)-DP for ``eps <= 2 ln(1/delta)``."""
    return 4.0 * sensitivity**2 * math.log(1.0 / delta) / epsilon**2


def _require_eps_at_most(epsilon: float, limit: float, what: str) -> None:
    if epsilon > limit:
        raise ValueError(f"{what} needs epsilon <= {limit:g}, got epsilon={epsilon!r}")


# ------------------------------------------------------------------------------------------------
# Noisy Distributed Proximal SGD (Algorithm 6, Theorem 2.1 / E.1)


def sigma_prox_sgd(lipschitz, batch_size, epsilon, delta, *, printed=False) -> float:
    """ISRL-DP Noisy Prox-SGD (Alg. 6, Thm E.1): noise std on a silo's mean of ``K`` gradients, per
    round. Batches are disjoint across rounds (parallel composition), so each round is (eps, delta)-DP.

    Corrected (default): Prop. D.2 with sensitivity ``2L/K``,
    ``sigma^2 = 16 L^2 ln(1/delta) / (eps^2 K^2)``; Prop. D.1 needs ``epsilon <= 2 ln(1/delta)`` (checked).
    ``printed=True``: the paper's ``sigma^2 = 8 L^2 ln(1/delta) / (eps^2 K^2)`` (digest §9 item 3: a
    factor 2 short of Prop. D.2 for sensitivity ``2L/K``; it gives zCDP ``eps^2/(4 ln(1/delta))``, which
    does not convert to (eps, delta)), with the theorem's stated range ``epsilon <= min(8 ln(1/delta), 15)``.

    Example (the corrected calibration is sqrt 2 above the printed one):
      >>> round(sigma_prox_sgd(1.0, 100, 1.0, 1e-5), 4), round(sigma_prox_sgd(1.0, 100, 1.0, 1e-5, printed=True), 4)
      (0.1357, 0.096)
    """
    L = checks.positive_float("lipschitz", lipschitz)
    K = checks.positive_int("batch_size", batch_size)
    eps = checks.epsilon("epsilon", epsilon)
    dlt = checks.delta("delta", delta, scalar=True)
    if printed:
        _require_eps_at_most(eps, min(8 * math.log(1 / dlt), 15.0), "Theorem 2.1 (printed) with this delta")
        return math.sqrt(8 * L**2 * math.log(1 / dlt) / (eps**2 * K**2))
    _require_eps_at_most(eps, 2 * math.log(1 / dlt), "Prop. D.2 (eps <= 2 ln(1/delta)) with this delta")
    return math.sqrt(_prop_d2_variance(2 * L / K, eps, dlt))


def prox_sgd_rounds(kappa, mu, gap, lipschitz, M, n, epsilon, delta, dim, *, num_silos=None) -> int:
    """Thm E.1's number of rounds,
    ``R = ceil(2 kappa ln((mu Delta / L^2) min{M n, eps^2 n^2 M / (d ln(1/delta))}))``,
    with ``Delta >= F(w0) - F*`` (``gap``) and ``kappa = beta/mu``. With ``num_silos=N`` it is part 2
    (SDP Prox-SGD, Alg. 7): ``min{M n, eps^2 n^2 N^2 / (d ln(1/delta))}``. Returns at least 1 (a log of
    an argument <= 1 would give R <= 0: the bound then already holds at w0, but Alg. 6 needs R >= 1).

    Example:
      >>> prox_sgd_rounds(10.0, 0.1, 1.0, 1.0, 4, 1000, 1.0, 1e-5, 50)
      120
    """
    kappa = checks.positive_float("kappa", kappa)
    mu = checks.positive_float("mu", mu)
    gap = checks.positive_float("gap", gap)
    L = checks.positive_float("lipschitz", lipschitz)
    M = checks.positive_int("M", M)
    n = checks.positive_int("n", n)
    eps = checks.epsilon("epsilon", epsilon)
    dlt = checks.delta("delta", delta, scalar=True)
    d = checks.positive_int("dim", dim)
    if num_silos is None:
        privacy_term = eps**2 * n**2 * M / (d * math.log(1 / dlt))
    else:
        N, M = _silos(num_silos, M)
        privacy_term = eps**2 * n**2 * N**2 / (d * math.log(1 / dlt))
    arg = (mu * gap / L**2) * min(M * n, privacy_term)
    if arg <= 1.0:
        return 1
    return max(1, _ceil(2 * kappa * math.log(arg)))


def prox_sgd_batch(n, rounds) -> int:
    """Alg. 6 / Thm E.1: ``K = floor(n / R)`` (disjoint batches: one permutation per silo cut into R
    chunks). Raises if ``R > n``.

    Example:
      >>> prox_sgd_batch(1000, 7)
      142
    """
    n = checks.positive_int("n", n)
    R = checks.positive_int("rounds", rounds)
    if R > n:
        raise ValueError(f"rounds must be <= n={n} for disjoint batches of size floor(n/R) >= 1, got {rounds!r}")
    return n // R


# ------------------------------------------------------------------------------------------------
# FedProx-(PL-)SVRG (Algorithms 1-2, Theorem 2.2 / E.2)


def sigma_pl_svrg(lipschitz, n, epsilon, delta, *, restarts, epochs, rounds, proof_log=False,
                  corrected_sensitivity=False) -> tuple[float, float]:
    """ISRL-DP FedProx-PL-SVRG (Alg. 2, Thm E.2 part 1), ``(sigma1, sigma2)`` as stated:

    * checkpoint (full local batch): ``sigma1^2 = 256 L^2 S E ln(2/delta) ln(5E/delta) / (eps^2 n^2)``;
    * inner difference step: ``sigma2^2 = 1024 L^2 S R ln(2/delta) ln(2.5 R/delta) / (eps^2 n^2)``,

    with ``S`` restarts, ``E`` epochs, ``R = E Q`` inner steps per restart (``rounds``). The theorem needs
    ``epsilon <= min(2 ln(2/delta), 15)`` (checked) and a batch ``K`` of at least
    :func:`pl_svrg_batch`.

    ``proof_log=True`` uses the proof's ``ln(5R/delta)`` (per-message ``delta~ = delta/(2R)`` then
    ``ln(1.25/(delta~/2))``, the same step that gives sigma1's ``ln(5E/delta)``) instead of the statement's
    ``ln(2.5R/delta)``. ``corrected_sensitivity=True`` multiplies sigma2 by 2: the proof uses the constant
    for sensitivity ``2L/K`` although the difference of two gradients has sensitivity ``4L/K`` (digest §9
    item 6: a factor 4 in variance). Defaults reproduce the statement.

    Example:
      >>> [round(s, 4) for s in sigma_pl_svrg(1.0, 1000, 1.0, 1e-5, restarts=2, epochs=3, rounds=30)]
      [0.5164, 3.4456]
    """
    L = checks.positive_float("lipschitz", lipschitz)
    n = checks.positive_int("n", n)
    eps = checks.epsilon("epsilon", epsilon)
    dlt = checks.delta("delta", delta, scalar=True)
    S = checks.positive_int("restarts", restarts)
    E = checks.positive_int("epochs", epochs)
    R = checks.positive_int("rounds", rounds)
    _require_eps_at_most(eps, min(2 * math.log(2 / dlt), 15.0), "Theorem E.2 (eps <= min(2 ln(2/delta), 15))")
    base = L**2 * S * math.log(2 / dlt) / (eps**2 * n**2)
    var1 = 256 * base * E * math.log(5 * E / dlt)
    var2 = 1024 * base * R * math.log((5.0 if proof_log else 2.5) * R / dlt)
    if corrected_sensitivity:
        var2 *= 4.0
    return math.sqrt(var1), math.sqrt(var2)


def pl_svrg_batch(n, epsilon, delta, restarts, rounds) -> int:
    """Thm E.2's batch condition ``K >= eps n / (4 sqrt(2 S R ln(2/delta)))`` as the smallest integer
    (at least 1): Lowy & Razaviyayn's :func:`sgd_noise.min_batch_theorem` with ``S R`` rounds.

    Example:
      >>> pl_svrg_batch(1000, 1.0, 1e-5, 2, 30)
      7
    """
    S = checks.positive_int("restarts", restarts)
    R = checks.positive_int("rounds", rounds)
    return int(sgd_noise.min_batch_theorem(checks.positive_int("n", n), S * R, checks.epsilon("epsilon", epsilon),
                                             checks.delta("delta", delta, scalar=True)))


def pl_svrg_step_size(beta, batch_size, silos_per_round, n) -> float:
    """Thm E.2's step size ``eta = (1/(8 beta)) min(1, K^{3/2} sqrt(M) / n)``.

    Example:
      >>> pl_svrg_step_size(1.0, 100, 4, 1000)              # (1/8) min(1, 1000 * 2 / 1000)
      0.125
    """
    beta = checks.positive_float("beta", beta)
    K = checks.positive_int("batch_size", batch_size)
    M = checks.positive_int("silos_per_round", silos_per_round)
    n = checks.positive_int("n", n)
    return min(1.0, K**1.5 * math.sqrt(M) / n) / (8 * beta)


# ------------------------------------------------------------------------------------------------
# FedProx-SPIDER (Algorithm 3, Theorem 3.1 / F.1)


SPIDER_CALIBRATIONS = ("paper", "authors-code")


def sigma_spider(lipschitz, n, epsilon, delta, *, rounds, phase_length, smoothness=None, calibration="paper"
                 ) -> tuple[float, float, float]:
    """ISRL-DP FedProx-SPIDER (Alg. 3, Thm F.1; K1 = K2 = n), ``(sigma1, sigma2, sigma_hat2)``:

    * checkpoint: ``sigma1^2 = 16 L^2 ln(1/delta) max(R/q, 1) / (eps^2 n^2)`` (``calibration="paper"``, the
      theorem as printed), or without the factor ``max(R/q, 1)`` (``"authors-code"``, what the authors' code
      computes: ``min(q/R, 1)`` times the paper's variance; it does not meet the theorem's epsilon when
      ``q < R``, and what it does meet is the accountant's to say);
    * difference, smooth branch: ``sigma2^2 = 16 beta^2 R ln(1/delta) / (eps^2 n^2)`` (multiplies
      ``||w_r - w_{r-1}||``); ``math.inf`` when ``smoothness`` (beta) is None -- the experiments'
      ``sigma2 = inf``, beta unknown, so the cap always applies;
    * difference, cap: ``sigma_hat2^2 = 64 L^2 R ln(1/delta) / (eps^2 n^2)``.

    A difference step's noise std is :func:`spider_difference_sigma`. Needs ``epsilon <= 2 ln(1/delta)``
    (Prop. D.1; checked). Caveats (digest §9 item 9, §7): checkpoints and difference steps each spend about
    the whole zCDP budget, so the total is about twice the target.

    Example:
      >>> paper = sigma_spider(1.0, 1238, 1.0, 1238 ** -2, rounds=25, phase_length=1)
      >>> code = sigma_spider(1.0, 1238, 1.0, 1238 ** -2, rounds=25, phase_length=1, calibration="authors-code")
      >>> round((code[0] / paper[0]) ** 2, 6), code[2] == paper[2]     # q / R = 1/25 of the checkpoint variance
      (0.04, True)
    """
    L = checks.positive_float("lipschitz", lipschitz)
    n = checks.positive_int("n", n)
    eps = checks.epsilon("epsilon", epsilon)
    dlt = checks.delta("delta", delta, scalar=True)
    R = checks.positive_int("rounds", rounds)
    q = checks.positive_int("phase_length", phase_length)
    _require_eps_at_most(eps, 2 * math.log(1 / dlt), "Theorem F.1 (eps <= 2 ln(1/delta)) with this delta")
    checks.one_of("calibration", calibration, SPIDER_CALIBRATIONS)
    unit = math.log(1 / dlt) / (eps**2 * n**2)
    sigma1 = math.sqrt(16 * L**2 * unit * (max(R / q, 1.0) if calibration == "paper" else 1.0))
    if smoothness is None:
        sigma2 = math.inf
    else:
        sigma2 = math.sqrt(16 * checks.positive_float("smoothness", smoothness) ** 2 * R * unit)
    sigma_hat2 = math.sqrt(64 * L**2 * R * unit)
    return sigma1, sigma2, sigma_hat2


def spider_difference_sigma(sigma2, sigma_hat2, step_norm):
    """Alg. 3 line 10: the noise std of a difference step, ``sqrt(min(sigma2^2 ||dw||^2, sigma_hat2^2))``
    ``= min(sigma2 ||dw||, sigma_hat2)`` with ``dw = w_r - w_{r-1}`` (public). ``sigma2 = inf`` gives
    ``sigma_hat2`` (also for ``||dw|| = 0``). ``step_norm`` may be a JAX array (also traced), in which case
    a JAX array is returned; ``sigma2``/``sigma_hat2`` are plain numbers.

    Example (a short step is noised by its length; a long one by the cap):
      >>> round(spider_difference_sigma(2.0, 0.5, 0.1), 6), spider_difference_sigma(2.0, 0.5, 1.0)
      (0.2, 0.5)
    """
    s2 = float(sigma2)
    sh2 = checks.positive_float("sigma_hat2", sigma_hat2)
    if not s2 >= 0.0:
        raise ValueError(f"sigma2 must be >= 0 (inf allowed), got {sigma2!r}")
    if math.isinf(s2):
        return sh2
    if isinstance(step_norm, (int, float)):
        if not step_norm >= 0:
            raise ValueError(f"step_norm must be >= 0, got {step_norm!r}")
        return min(s2 * float(step_norm), sh2)
    import jax.numpy as jnp  # only for array inputs (accounting stays importable without tracing)
    return jnp.minimum(s2 * jnp.abs(step_norm), sh2)


def spider_parameters(lipschitz, smoothness, gap, n, dim, epsilon, delta, silos_per_round, num_silos
                      ) -> tuple[int, int]:
    """Thm F.1's ``(R, q)``:

    ``q = floor(min{(eps n L sqrt(M) / sqrt(d ln(1/delta) Delta beta))^{2/3}, n M / 1{M<N}})`` (no cap when
    ``M = N``), then ``R = ceil(eps n sqrt(M q) sqrt(Delta beta) / (L sqrt(d ln(1/delta))))`` with that
    integer q. ``q < 1`` returns ``(0, 0)``: the proof then outputs ``w0`` (run no rounds).
    ``gap`` is ``Delta_hat_X >= F_hat(w0) - F_hat*``.

    Example:
      >>> spider_parameters(1.0, 1.0, 1.0, 1000, 50, 1.0, 1e-5, 4, 4)
      (364, 19)
    """
    L = checks.positive_float("lipschitz", lipschitz)
    beta = checks.positive_float("smoothness", smoothness)
    gap = checks.positive_float("gap", gap)
    n = checks.positive_int("n", n)
    d = checks.positive_int("dim", dim)
    eps = checks.epsilon("epsilon", epsilon)
    dlt = checks.delta("delta", delta, scalar=True)
    N, M = _silos(num_silos, silos_per_round)
    log_term = d * math.log(1 / dlt)
    q_real = (eps * n * L * math.sqrt(M) / math.sqrt(log_term * gap * beta)) ** (2.0 / 3.0)
    if M < N:
        q_real = min(q_real, n * M)
    q = _floor(q_real)
    if q < 1:
        return 0, 0
    R = _ceil(eps * n * math.sqrt(M * q) * math.sqrt(gap * beta) / (L * math.sqrt(log_term)))
    return max(R, 1), q


# ------------------------------------------------------------------------------------------------
# Alternate Fed-SPIDER (Algorithm 11) and the experiments' baselines (App. H; authors' code)


def sigma_experiment_mbsgd(lipschitz, n, epsilon, delta, rounds) -> float:
    """Lowy et al.'s experiments, ISRL-DP MB-SGD (§4.9; authors' code, moments-accountant heuristic):
    ``sigma^2 = 8 L^2 R ln(2/delta) / (n^2 eps^2)``. (Lowy & Razaviyayn's
    :func:`sgd_noise.sigma_experiment_mbsgd` has ``ln(1/delta)``.) Not an accountant-verified bound.

    Example:
      >>> round(sigma_experiment_mbsgd(1.0, 1000, 1.0, 1e-5, 10), 4)
      0.0312
    """
    L = checks.positive_float("lipschitz", lipschitz)
    n = checks.positive_int("n", n)
    eps = checks.epsilon("epsilon", epsilon)
    dlt = checks.delta("delta", delta, scalar=True)
    R = checks.positive_int("rounds", rounds)
    return math.sqrt(8 * L**2 * R * math.log(2 / dlt) / (n**2 * eps**2))


def sigma_experiment_local_sgd(lipschitz, n, epsilon, delta, rounds, local_steps) -> float:
    """Lowy et al.'s experiments, ISRL-DP Local SGD (§4.9, code): per local step,
    ``sigma^2 = 8 L^2 K R ln(2/delta) / (n^2 eps^2)`` with ``K`` one-sample local steps per round.

    Example:
      >>> round(sigma_experiment_local_sgd(1.0, 1000, 1.0, 1e-5, 10, 5), 4)
      0.0699
    """
    K = checks.positive_int("local_steps", local_steps)
    return sigma_experiment_mbsgd(lipschitz, n, epsilon, delta, rounds) * math.sqrt(K)


def sigma_alt_spider(lipschitz, n, epsilon, delta, rounds) -> tuple[float, float]:
    """Alt ISRL-DP Fed-SPIDER (Alg. 11, App. H.2), ``(sigma_difference, sigma_fresh)``:
    ``32`` and ``8`` times ``L^2 ln(2/delta) R / (n^2 eps^2)`` (variances). The difference step has twice
    the sensitivity (factor 4). Two messages per round are calibrated as if only R mechanisms composed
    (digest §4.8 flag): a reproduction of the paper, not a verified guarantee.

    Example (the difference step's std is twice the fresh one's):
      >>> [round(s, 4) for s in sigma_alt_spider(1.0, 1000, 1.0, 1e-5, 10)]
      [0.0625, 0.0312]
    """
    fresh = sigma_experiment_mbsgd(lipschitz, n, epsilon, delta, rounds)
    return 2.0 * fresh, fresh


def batch_experiment_paper(n, rounds, epsilon) -> int:
    """The paper's experiment batch (App. H.2; Alg. 11's and the baselines' ``K1 = K2``):
    ``K = int(max(1, n sqrt(eps) / (2 sqrt(R))))`` -- Lowy & Razaviyayn's :func:`sgd_noise.batch_experiment`
    (the same formula, one name for it).

    Example:
      >>> batch_experiment_paper(1238, 25, 4.0)
      247
    """
    return int(sgd_noise.batch_experiment(checks.positive_int("n", n), checks.positive_int("rounds", rounds),
                                            checks.epsilon("epsilon", epsilon)))


def batch_experiment_code(n, rounds) -> int:
    """The authors' code: ``K = int(max(1, n sqrt(24) / (2 sqrt(R))))`` for every epsilon ("24 >= the
    largest epsilon tested"), ported literally. MNIST n = 1238: 606 (R = 25), 428 (R = 50); CIFAR-10
    n = 1000: 346 (R = 50), 244 (R = 100).

    Example:
      >>> batch_experiment_code(1238, 25), batch_experiment_code(1238, 50)
      (606, 428)
    """
    n = checks.positive_int("n", n)
    R = checks.positive_int("rounds", rounds)
    return int(max(1, n * math.sqrt(24) / (2 * math.sqrt(R))))


# ------------------------------------------------------------------------------------------------
# Shuffle model: the (epsilon, delta) passed to P_vec (Algorithms 7, 8, 10)


def sdp_prox_sgd_pvec(epsilon, delta, num_silos, silos_per_round) -> tuple[float, float]:
    """SDP Prox-SGD (Alg. 7): each round runs P_vec at ``(N eps / (2M), delta)``; silo subsampling (M of
    N) then gives (eps, delta)-SDP, which needs ``M >= N min(eps/2, 1)`` (raises otherwise).

    Example (8 of 10 silos a round):
      >>> sdp_prox_sgd_pvec(1.0, 1e-5, 10, 8)
      (0.625, 1e-05)
    """
    eps = checks.epsilon("epsilon", epsilon)
    dlt = checks.delta("delta", delta, scalar=True)
    N, M = _silos(num_silos, silos_per_round)
    need = N * min(eps / 2, 1.0)
    if M < need * (1 - _ROUND_SLACK):
        raise ValueError(f"SDP Prox-SGD needs silos_per_round >= N min(eps/2, 1) = {need:g}, got "
                         f"silos_per_round={silos_per_round!r} (num_silos={N}, epsilon={eps!r})")
    return N * eps / (2 * M), dlt


def sdp_svrg_pvec(epsilon, delta, num_silos, silos_per_round, n, batch_size, epochs, inner_steps
                  ) -> tuple[float, float]:
    """SDP Prox-SVRG (Alg. 8): every P_vec call runs at
    ``eps~ = eps N n / (8 M K sqrt(4 E Q ln(2/delta)))``, ``delta~ = delta / (2 E Q)``
    (``Q = inner_steps``, normally ``floor(n/K)``). For Alg. 9 (PL restarts) pass
    ``eps / (2 sqrt(2S))`` and ``delta / (2S)``. The amplification step needs ``eps~ <= 1`` (the theorem's
    M condition); the digest (§9 item 5) notes the same ``eps~`` is used for the n-sample checkpoint.

    Example:
      >>> epsilon, delta = sdp_svrg_pvec(1.0, 1e-5, 10, 8, 1000, 100, 3, 10)
      >>> round(epsilon, 4), f"{delta:.3g}"
      (0.0408, '1.67e-07')
    """
    eps = checks.epsilon("epsilon", epsilon)
    dlt = checks.delta("delta", delta, scalar=True)
    N, M = _silos(num_silos, silos_per_round)
    n = checks.positive_int("n", n)
    K = checks.positive_int("batch_size", batch_size)
    E = checks.positive_int("epochs", epochs)
    Q = checks.positive_int("inner_steps", inner_steps)
    eps_t = eps * N * n / (8 * M * K * math.sqrt(4 * E * Q * math.log(2 / dlt)))
    return eps_t, dlt / (2 * E * Q)


def sdp_spider_pvec(epsilon, delta, num_silos, silos_per_round, checkpoint_batch, difference_batch, rounds,
                    phase_length, *, n=None, printed=False) -> tuple[tuple[float, float], tuple[float, float]]:
    """SDP FedProx-SPIDER (Alg. 10): ``((eps_ckpt, delta_ckpt), (eps_diff, delta_diff))`` for P_vec.

    * checkpoint (line 8): ``eps n N / (4 K1 M sqrt(2 ln(1/delta)) max(1, sqrt(R/q)))``,
      ``delta_ckpt = delta q / (2R)`` -- for ``q <= R`` this is the proof's
      ``eps sqrt(q) / (2 sqrt(2R ln(1/delta)))`` per checkpoint before silo amplification. For ``q > R`` a
      single checkpoint runs, and the default caps ``delta_ckpt`` at ``delta/2``
      (``delta / (2 max(1, R/q))``);
    * difference (line 12): ``eps N n / (4 M K2 sqrt(2R ln(1/delta)))``, ``delta_diff = delta / (2R)``,
      with P_vec's norm bound ``min(2L, beta ||w_r - w_{r-1}||)``.

    ``printed=True``: the printed ``max(1, sqrt(q)/sqrt(R))`` (digest §9 item 10: inverted; with ``K1 = n``
    it does not reduce to the proof's ``eps sqrt(q)/(...)``) and the uncapped ``delta q / (2R)``.
    ``n`` is the local dataset size; the theory uses ``K1 = K2 = n``, so when ``n`` is None the two batch
    sizes must be equal and are taken as ``n``.

    Example:
      >>> (e1, d1), (e2, d2) = sdp_spider_pvec(1.0, 1e-5, 10, 8, 100, 100, 20, 5)
      >>> round(e1, 4), d1, round(e2, 4)
      (0.0326, 1.25e-06, 0.0146)
    """
    eps = checks.epsilon("epsilon", epsilon)
    dlt = checks.delta("delta", delta, scalar=True)
    N, M = _silos(num_silos, silos_per_round)
    K1 = checks.positive_int("checkpoint_batch", checkpoint_batch)
    K2 = checks.positive_int("difference_batch", difference_batch)
    R = checks.positive_int("rounds", rounds)
    q = checks.positive_int("phase_length", phase_length)
    if n is None:
        if K1 != K2:
            raise ValueError(f"sdp_spider_pvec needs n when checkpoint_batch={K1} != difference_batch={K2}")
        n = K1
    n = checks.positive_int("n", n)
    log_term = math.log(1 / dlt)
    if printed:
        factor = max(1.0, math.sqrt(q) / math.sqrt(R))
        delta_ckpt = dlt * q / (2 * R)
    else:
        factor = max(1.0, math.sqrt(R / q))
        delta_ckpt = dlt / (2 * max(1.0, R / q))
    eps_ckpt = eps * n * N / (4 * K1 * M * math.sqrt(2 * log_term) * factor)
    eps_diff = eps * N * n / (4 * M * K2 * math.sqrt(2 * R * log_term))
    return (eps_ckpt, delta_ckpt), (eps_diff, dlt / (2 * R))


# ------------------------------------------------------------------------------------------------


def noise_multiplier(sigma, clip_norm, batch_size, sensitivity=1.0) -> float:
    """The engine's noise multiplier for a paper sigma: the engine adds ``N(0, (z sensitivity C)^2)`` to a
    silo's *sum* of ``K`` clipped gradients and divides by ``K``, so ``z = sigma K / (sensitivity C)``
    (Lowy & Razaviyayn's :func:`sgd_noise.noise_multiplier_from_sigma` with clip norm ``sensitivity C``).

    Example:
      >>> noise_multiplier(0.02, 1.0, 100), noise_multiplier(0.02, 1.0, 100, sensitivity=2.0)
      (2.0, 1.0)
    """
    C = checks.positive_float("clip_norm", clip_norm)
    s = checks.positive_float("sensitivity", sensitivity)
    K = checks.positive_int("batch_size", batch_size)
    checks.positive_float("sigma", sigma)
    return float(sgd_noise.noise_multiplier_from_sigma(sigma, s * C, K))



EXPERIMENT_ALGORITHMS = ("mbsgd", "local", "spider", "alt")


def experiment_noise_multipliers(algorithm: str, n: int, delta: float, epsilon: float, rounds: int, batch_size: int,
                                 phase_length: int | None = None, spider_calibration: str = "paper"):
    """The engine's noise multiplier(s) for the experiments' sigma of ``algorithm`` at ``epsilon``, with
    ``L = C`` (so they do not depend on the clip ``C``):

    * ``"mbsgd"``: ``sigma K / C`` (:func:`sigma_experiment_mbsgd` on the minibatch mean);
    * ``"local"``: ``sigma / C`` per one-sample local step (:func:`sigma_experiment_local_sgd`);
    * ``"spider"`` (FedProx-SPIDER, Alg. 3): ``(sigma_1 K / C, sigma_hat_2 K / (2C))`` from
      :func:`sigma_spider` (``sigma_2 = inf``: the difference cap; ``spider_calibration`` its ``calibration``);
    * ``"alt"`` (Alt Fed-SPIDER, Alg. 11): ``(sigma_fresh K / C, sigma_diff K / (2C))``.

    Example:
      >>> round(experiment_noise_multipliers("mbsgd", 1000, 1e-5, 1.0, 10, 100), 4)
      3.1249
    """
    if algorithm == "mbsgd":
        return noise_multiplier(sigma_experiment_mbsgd(1.0, n, epsilon, delta, rounds), 1.0, batch_size)
    if algorithm == "local":
        return noise_multiplier(sigma_experiment_local_sgd(1.0, n, epsilon, delta, rounds, batch_size), 1.0, 1)
    if algorithm == "spider":
        s1, _, s_hat2 = sigma_spider(1.0, n, epsilon, delta, rounds=rounds, phase_length=phase_length,
                                     calibration=spider_calibration)
        return noise_multiplier(s1, 1.0, batch_size), noise_multiplier(s_hat2, 1.0, batch_size, sensitivity=2.0)
    if algorithm == "alt":
        s_diff, s_fresh = sigma_alt_spider(1.0, n, epsilon, delta, rounds)
        return (noise_multiplier(s_fresh, 1.0, batch_size),
                noise_multiplier(s_diff, 1.0, batch_size, sensitivity=2.0))
    raise ValueError(f"algorithm must be one of {EXPERIMENT_ALGORITHMS}, got {algorithm!r}")

__all__ = [
    "batch_experiment_code", "batch_experiment_paper", "experiment_noise_multipliers",
    "noise_multiplier", "pl_svrg_batch",
    "pl_svrg_step_size", "prox_sgd_batch", "prox_sgd_rounds", "sdp_prox_sgd_pvec", "sdp_spider_pvec",
    "sdp_svrg_pvec", "sigma_alt_spider", "sigma_experiment_local_sgd", "sigma_experiment_mbsgd",
    "sigma_pl_svrg", "sigma_prox_sgd", "SPIDER_CALIBRATIONS", "sigma_spider", "spider_difference_sigma",
    "spider_parameters",
]
