"""Output averaging of a federated algorithm's iterates: running weighted averages (uniform ``gamma_r = 1/R``,
Stich's weights for strongly convex losses) and a sliding window (:func:`window_average`). The output is
post-processing of the released iterates, so an averaged algorithm's privacy statement is its inner one's.

References:
  A. Lowy and M. Razaviyayn. "Private Federated Learning Without a Trusted Server: Optimal Algorithms
  for Convex Losses." ICLR 2023 (arXiv 2106.09779).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxfl.engine.protocol import FederatedAlgorithm, ServerState


class AveragedState(NamedTuple):
    """Server state with an averaged output: ``params`` is ``w^_R = sum_r gamma_r w_r / Gamma_R`` over
    the iterates ``w_0 .. w_{R-1}`` seen so far; ``iterate`` is the inner server state (``w_r``).

    Example: :func:`window_average` (its state is a :class:`WindowState`; :func:`averaged` builds this one).
    """

    params: Any
    iterate: ServerState
    round: jnp.ndarray


def averaging_weights(kind: str, *, mu: float = 0.0, step_size: float | None = None):
    """``r -> gamma_r / Gamma_r`` (the running-average update weight of iterate ``w_r``).

    ``"uniform"``: ``gamma_r = 1/R`` (convex, Thm D.1) -> ``1/(r+1)``. ``"stich"``: Lemma D.5's
    ``gamma_r = (1 - mu eta)^{-(r+1)}`` (strongly convex) -> ``(q - 1)/(q - q^{-r})`` with
    ``q = 1/(1 - mu eta)``, computed without overflow.

    Example (uniform averaging: the running mean's update weights):
      >>> weight = averaging_weights("uniform")
      >>> [float(weight(r)) for r in range(3)]
      [1.0, 0.5, 0.3333333333333333]
    """
    if kind == "uniform":
        return lambda r: 1.0 / (r + 1.0)
    if kind == "stich":
        if step_size is None or not 0 < mu * step_size < 1:
            raise ValueError(f"'stich' averaging needs 0 < mu * step_size < 1, got mu={mu}, step_size={step_size}")
        q = 1.0 / (1.0 - mu * step_size)
        return lambda r: (q - 1.0) / (q - q ** (-r.astype(jnp.float32)))
    raise ValueError(f"averaging must be 'last', 'uniform', 'stich' or 'window', got {kind!r}")


def averaged(init, server_fn, weight_of_round):
    """Wraps a server so that the output is the running weighted average of the iterates before each step.

    Example: :func:`jaxfl.algorithms.noisy_sgd.noisy_minibatch_sgd` with ``averaging="uniform"`` uses it.
    """

    def averaged_init(params):
        return AveragedState(params, init(params), jnp.zeros([], jnp.int32))

    def averaged_server(state, aggregate, ctx):
        w = weight_of_round(state.round)
        average = jax.tree_util.tree_map(lambda a, x: a + w * (x - a), state.params, state.iterate.params)
        inner, info = server_fn(state.iterate, aggregate, ctx)
        return AveragedState(average, inner, state.round + 1), info

    return averaged_init, averaged_server


class WindowState(NamedTuple):
    """State of a :func:`window_average`-d algorithm: ``params`` is the mean of the last
    ``min(round, window)`` iterates ``w_1 .. w_round`` (``w_0`` before the first round); ``iterate`` is
    the inner algorithm's state (the current iterate, which is what the inner round broadcasts);
    ``recent`` holds leaves ``[window, ...]``, a ring buffer where iterate ``w_r`` sits in slot
    ``(r - 1) % window``; ``round`` counts the rounds done.

    Example: :func:`window_average`.
    """

    params: Any
    iterate: Any
    recent: Any
    round: jnp.ndarray


def window_average(algorithm: FederatedAlgorithm, window: int = 8) -> FederatedAlgorithm:
    """``algorithm`` reporting the sliding-window average of its iterates (Lowy & Razaviyayn §6.4, the authors'
    scripts: "the last 7 iterates plus the new one" for ``window = 8``).

    After round ``r`` the reported ``state.params`` is ``mean(w_{max(1, r-window+1)} .. w_r)``, the mean
    of the last ``min(r, window)`` iterates *after* each step (unlike ``averaging="uniform"``, which
    averages the iterates ``w_0 .. w_{R-1}`` before each step). The inner algorithm runs unchanged on
    ``state.iterate`` (same keys, same broadcast: the current iterate); only the output differs, so the
    privacy statement is the inner one's (post-processing). Works for any algorithm without silo state
    (its round may take scheduled inputs).

    Example (the reported model is the mean of the last two iterates):
      >>> import jax, numpy as np, optax, jaxfl
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (100, 3)))
      >>> data = jaxfl.from_silos([(x, (x[:, 0] > 0).astype(np.float32))])
      >>> inner = jaxfl.minibatch_sgd(logistic_loss, server_opt=optax.sgd(1.0))              # full-batch GD
      >>> two = jaxfl.train(inner, data, init_linear(3), rounds=2, progress=False).params["w"]
      >>> three = jaxfl.train(inner, data, init_linear(3), rounds=3, progress=False).params["w"]
      >>> windowed = jaxfl.train(window_average(inner, window=2), data, init_linear(3), rounds=3, progress=False)
      >>> bool(np.allclose(windowed.params["w"], (two + three) / 2))
      True
    """
    window = int(window)
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if algorithm.init_silos is not None:
        raise ValueError(f"window_average needs an algorithm without silo state; {algorithm.name} keeps silo state")
    inner_init, inner_round = algorithm.init, algorithm.round

    def init(params):
        inner = inner_init(params)
        recent = jax.tree_util.tree_map(lambda p: jnp.zeros((window,) + jnp.shape(p), jnp.result_type(p)),
                                        inner.params)
        return WindowState(inner.params, inner, recent, jnp.zeros([], jnp.int32))

    def round_fn(state, data, round_key, *inputs):
        inner, info = inner_round(state.iterate, data, round_key, *inputs)
        slot = state.round % window
        recent = jax.tree_util.tree_map(lambda buf, p: buf.at[slot].set(p.astype(buf.dtype)), state.recent,
                                        inner.params)
        filled = jnp.minimum(state.round + 1, window)
        mask = jnp.arange(window) < filled

        def mean(buf):
            kept = jnp.where(mask.reshape((window,) + (1,) * (buf.ndim - 1)), buf, jnp.zeros((), buf.dtype))
            return jnp.sum(kept, axis=0) * (jnp.ones((), buf.dtype) / filled.astype(buf.dtype))

        params = jax.tree_util.tree_map(mean, recent)
        return WindowState(params, inner, recent, state.round + 1), info

    return algorithm._replace(init=init, round=round_fn)
