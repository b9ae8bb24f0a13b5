"""Calibration: epsilon of a (sub)sampled Gaussian, and the smallest noise meeting a budget.

Both directions go through a registered accountant (``"rdp"`` by default) and
``dp_accounting.calibrate_dp_mechanism`` (Brent's method, returning a parameter whose epsilon is <= the
target). Units: epsilon in nats, delta a probability, noise multiplier = noise std / the bound on each
record's contribution (the L2 sensitivity under add/remove-one neighbours).
"""
from __future__ import annotations

from typing import Any, Callable

import dp_accounting
from dp_accounting import mechanism_calibration as _mc

from jaxfl import checks
from jaxfl.accounting.accountants import DpEvent, gaussian_event, make_accountant


def epsilon_for(noise_multiplier: float, sampling_rate: float, steps: int, delta: float,
                accountant: str = "rdp", **accountant_kw: Any) -> float:
    """Epsilon (nats) of ``steps`` Poisson-subsampled Gaussian releases at rate ``sampling_rate``
    (``1.0`` = plain Gaussian) with the given noise multiplier, at ``delta``, add/remove-one neighbours
    unless ``neighboring_relation`` is passed in ``accountant_kw``.

    Example:
      >>> round(epsilon_for(1.1, 256 / 60000, 14063, 1e-5), 5)    # Abadi et al.'s MNIST run, 60 epochs of batch 256
      2.59666
      >>> round(epsilon_for(3.0, 0.1, 512, 1e-6, accountant="pld"), 4)
      3.7697
    """
    delta = checks.delta("delta", delta, scalar=True)
    event = gaussian_event(noise_multiplier, sampling_rate, steps)
    return make_accountant(accountant, **accountant_kw).compose(event).epsilon(delta)


def noise_multiplier_for(target_epsilon: float, sampling_rate: float, steps: int, delta: float,
                         accountant: str = "rdp", tol: float = 1e-6, **accountant_kw: Any) -> float:
    """The smallest noise multiplier (within ``tol``, absolute) whose ``steps`` Poisson-subsampled Gaussian
    releases at rate ``sampling_rate`` are (``target_epsilon``, ``delta``)-DP. The returned value always
    meets the budget (its epsilon is <= ``target_epsilon``).

    Example:
      >>> round(noise_multiplier_for(1.0, 0.1, 512, 1e-6, accountant="pld"), 3)   # jax_privacy's docstring: 9.66
      9.662
    """
    target_epsilon = checks.epsilon("target_epsilon", target_epsilon)
    q = checks.sampling_rate("sampling_rate", sampling_rate)
    steps = checks.positive_int("steps", steps)
    return calibrate(lambda s: gaussian_event(s, q, steps), target_epsilon, delta,
                     accountant=accountant, tol=tol, **accountant_kw)


class _FreshAccountant:
    """Adapter presenting a fresh jaxfl accountant as a dp_accounting one to ``calibrate_dp_mechanism``."""

    ledger = dp_accounting.NoOpDpEvent()

    def __init__(self, accountant: Any):
        self._acc = accountant

    def compose(self, event: DpEvent, count: int = 1) -> "_FreshAccountant":
        self._acc.compose(event, count)
        return self

    def get_epsilon(self, target_delta: float) -> float:
        return self._acc.epsilon(target_delta)


def _search_bracket(gap: Callable[[float], float], guess: float = 1.0, lower_limit: float = 1e-6,
                    upper_limit: float = 1e12) -> tuple[float, float]:
    """Geometric search for (lo, hi) with gap(lo) > 0 >= gap(hi), assuming gap decreases in the parameter."""
    x = guess
    g = gap(x)
    if g > 0:
        while g > 0:
            lo, x = x, 2.0 * x
            if x > upper_limit:
                raise ValueError(f"target epsilon is not met by any parameter up to {upper_limit:g}")
            g = gap(x)
        return lo, x
    while g <= 0:
        hi, x = x, 0.5 * x
        if x < lower_limit:
            raise ValueError(f"target epsilon is met by every parameter down to {lower_limit:g}; "
                             "pass an explicit bracket")
        g = gap(x)
    return x, hi


def calibrate(make_event: Callable[[float], DpEvent], target_epsilon: float, delta: float,
              accountant: str = "rdp", bracket: Any = None, tol: float | None = None,
              discrete: bool = False, **accountant_kw: Any) -> float:
    """The parameter value at which ``make_event(value)`` spends exactly ``target_epsilon`` at ``delta``
    (within ``tol``), on the safe side (the returned value's epsilon is <= ``target_epsilon``).

    Args:
      make_event: parameter -> ``DpEvent`` (e.g. noise multiplier -> whole-run event).
      target_epsilon: budget (nats, > 0).
      delta: in (0, 1).
      accountant: registry name of the accountant.
      bracket: ``(lo, hi)`` bracketing the answer, or a ``dp_accounting`` ``BracketInterval``. ``None``
        searches geometrically from 1 and assumes epsilon *decreases* as the parameter grows (noise-like
        parameters); pass a bracket for parameters where it increases (steps, sampling rate).
      tol: absolute tolerance in parameter space (dp_accounting's default 1e-6 when ``None``).
      discrete: integer-valued parameter (then an ``int`` is returned).
      **accountant_kw: passed to the accountant's constructor.

    Example:
      >>> from jaxfl.accounting import gaussian_event
      >>> z = calibrate(lambda z: gaussian_event(z, 0.1, 512), 1.0, 1e-6, accountant="pld")
      >>> round(z, 3)
      9.662
    """
    target_epsilon = checks.epsilon("target_epsilon", target_epsilon)
    delta = checks.delta("delta", delta, scalar=True)
    make_accountant(accountant, **accountant_kw)  # fail early on an unknown name

    def fresh() -> _FreshAccountant:
        return _FreshAccountant(make_accountant(accountant, **accountant_kw))

    if bracket is None:
        def gap(x: float) -> float:
            x = round(x) if discrete else x
            return fresh().compose(make_event(x)).get_epsilon(delta) - target_epsilon
        lo, hi = _search_bracket(gap)
        bracket = _mc.ExplicitBracketInterval(lo, hi)
    elif isinstance(bracket, tuple):
        bracket = _mc.ExplicitBracketInterval(float(bracket[0]), float(bracket[1]))
    result = dp_accounting.calibrate_dp_mechanism(
        fresh, make_event, target_epsilon, delta, bracket_interval=bracket, discrete=discrete, tol=tol)
    return int(result) if discrete else float(result)
