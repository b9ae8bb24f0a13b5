"""SCAFFOLD (Karimireddy et al. 2020, "SCAFFOLD: Stochastic Controlled Averaging for Federated Learning",
Algorithm 1 with control variates option II), on the engine with per-silo state.

The server holds the global model ``x`` and the server control variate ``c``; silo ``i`` holds its own
control variate ``c_i`` (zeros at init) in its silo state. Non-private.
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxfl import checks
from jaxfl.algorithms.common import apply_server_update, safe_mean
from jaxfl.engine import local
from jaxfl.engine.participation import argument as participation_argument, resolve
from jaxfl.engine.protocol import FederatedAlgorithm, ServerState
from jaxfl.engine.rounds import make_round

_tmap = jax.tree_util.tree_map


class ScaffoldServer(NamedTuple):
    """SCAFFOLD's server state: the model, the server optimizer state, the round counter and ``c``.

    Example: :func:`scaffold`.
    """

    params: Any
    opt_state: Any
    round: jnp.ndarray
    control: Any  # the server control variate c, shaped like params


def _with_gradient_sum(client_opt: optax.GradientTransformation) -> optax.GradientTransformation:
    """``client_opt`` on the first half of a ``(params, gradient sum)`` pair; the second half's "update"
    is the step's raw gradient, so that after the local loop it holds ``sum_k g_i(y_k)``."""

    def update(grads, state, params=None):
        updates, state = client_opt.update(grads[0], state, None if params is None else params[0])
        return (updates, grads[1]), state

    return optax.GradientTransformation(lambda pair: client_opt.init(pair[0]), update)


def scaffold(loss_fn, *, client_opt: optax.GradientTransformation, local_steps: int,
             server_opt: optax.GradientTransformation | None = None, batch_size: int | None = None,
             sampling_rate=None, participation=None, silos_per_round=None, microbatch="auto",
             name: str | None = None) -> FederatedAlgorithm:
    """SCAFFOLD with control variates option II.

    Each participating silo ``i`` receives ``(x, c)``, runs ``local_steps = K`` steps of ``client_opt``
    from ``y_0 = x`` on the corrected gradient ``g_i(y_k) - c_i + c`` (``g_i``: the minibatch gradient
    of :func:`jaxfl.engine.local.noisy_gradient` with ``clip_norm = inf`` and no noise; keys per
    (round, silo, step, purpose) as :func:`jaxfl.algorithms.sgd.local_sgd`), sets
    ``c_i+ = (1/K) sum_k g_i(y_k)`` and sends ``(x - y_K, c_i+ - c_i)``. The server applies
    ``server_opt`` (default ``optax.sgd(1.0)``: ``x <- x + mean(y_K - x)``; ``optax.sgd(eta_g)`` is the
    paper's global step) to the participants' mean of ``x - y_K`` and sets
    ``c <- c + (1/N) sum_{i in S} (c_i+ - c_i)`` (the paper's ``(|S|/N) mean``), ``N`` the silos with
    records. Hence ``c = mean_i c_i`` over all silos after every round.

    **Option II for a general optax client optimizer.** The paper's option II,
    ``c_i+ = c_i - c + (x - y_K) / (K eta_l)``, assumes plain SGD with step ``eta_l``; then
    ``x - y_K = eta_l sum_k (g_i(y_k) - c_i + c)`` and option II is exactly
    ``c_i - c + (1/K) sum_k (corrected gradient fed to the optimizer) = (1/K) sum_k g_i(y_k)``. jaxfl
    *defines* option II by this sum of applied corrected gradients, for any ``client_opt`` (momentum,
    Adam, schedules, ...): no learning rate is needed, and for ``optax.sgd(eta_l)`` it equals the paper's
    formula up to floating-point rounding. The corrected gradient is what ``client_opt`` receives, so the
    client optimizer stays an ordinary optax transformation.

    ``microbatch``: each step's gradient taken in slices of records, as in
    :func:`jaxfl.algorithms.sgd.minibatch_sgd`.

    Example:
      >>> import jax, numpy as np, optax, jaxfl
      >>> from jaxfl.data import iid
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (400, 5)))
      >>> y = (x[:, 0] > 0).astype(np.float32)
      >>> data = iid(x, y, num_silos=8, seed=0)                  # 8 silos of 50 records
      >>> algorithm = scaffold(logistic_loss, client_opt=optax.sgd(0.5), local_steps=5, batch_size=10, participation=4)
      >>> result = jaxfl.train(algorithm, data, init_linear(5), rounds=20, progress=False)
      >>> jax.tree_util.tree_map(np.shape, result.state.silos)   # each silo's control variate c_i
      {'b': (8,), 'w': (8, 5)}
      >>> bool(result.params["w"][0] > 1.0)                        # the label is the sign of feature 0
      True
    """
    participation = participation_argument(participation, silos_per_round, "scaffold")
    sampler = local.make_sampler(batch_size, sampling_rate, microbatch=microbatch)
    server_opt = optax.sgd(1.0) if server_opt is None else server_opt
    num_steps = checks.positive_int("local_steps", local_steps)

    def init(params):
        return ScaffoldServer(params, server_opt.init(params), jnp.zeros([], jnp.int32), _tmap(jnp.zeros_like, params))

    def init_silos(params, num_silos):
        return _tmap(lambda p: jnp.zeros((num_silos,) + jnp.shape(p), jnp.result_type(p)), params)

    def client(sent, x, y, count, silo_key, *, silo_state):
        params, control = sent
        correction = _tmap(jnp.subtract, control, silo_state)  # c - c_i

        def gradient(pair, step, drawn):
            g, info = local.noisy_gradient(loss_fn, pair[0], x, y, count, silo_key, step, sampler=sampler,
                                           clip_norm=math.inf, noise_multiplier=0, drawn=drawn)
            return (_tmap(jnp.add, g, correction), g), info

        (final, grad_sum), info = local.local_steps(
            (params, _tmap(jnp.zeros_like, params)), num_steps=num_steps, client_opt=_with_gradient_sum(client_opt),
            gradient_fn=gradient, draw_fn=local.step_draws(sampler, silo_key, count, x.shape[0], params, 0))
        new_control = _tmap(lambda s: s * (1.0 / num_steps), grad_sum)
        message = (_tmap(jnp.subtract, params, final), _tmap(jnp.subtract, new_control, silo_state))
        return message, info, new_control

    def server(state, summed, ctx):
        model_sum, control_sum = summed
        mean = safe_mean(model_sum, ctx.total_weight)
        model = apply_server_update(server_opt, ServerState(state.params, state.opt_state, state.round), mean)
        inverse = 1.0 / jnp.maximum(jnp.sum(ctx.counts > 0), 1).astype(jnp.float32)  # reciprocal: see common.py
        control = _tmap(lambda c, d: c + d * inverse.astype(d.dtype), state.control, control_sum)
        return ScaffoldServer(*model, control), {"update_norm": optax.tree.norm(mean)}

    return FederatedAlgorithm(
        init=init,
        round=make_round(client, server, resolve(participation), silo_state=True,
                         broadcast=lambda state: (state.params, state.control)),
        privacy=None, name=name or "scaffold", init_silos=init_silos)
