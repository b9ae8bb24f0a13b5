"""A_NSGD (Huang et al. 2023, Alg. 1): noisy single-record SGD for joint DP, on the engine; and
A_NSSGD (Alg. 2, Appendix B, :func:`nssgd`): per-user mean gradients through a private mean estimator.

Owner ``j`` holds personal parameters ``x_j`` (its silo state, never noised or sent) and everyone shares
``u``. Step ``t`` (one engine round) samples one owner ``j_t`` uniformly (:func:`jaxfl.engine.participation.
uniform` with one participant) and one of its records ``z`` uniformly; the owner takes the single-record
gradient ``g = clip(grad_{(x, u)} h(x_j, u, z), L)`` (the paper bounds it by the Lipschitz constant ``L``;
``lipschitz=`` clips to it so the bound holds for any loss), updates ``x_j <- Pi_X(x_j - eta g_x)`` and
sends ``g_u + b_t``, ``b_t ~ N(0, sigma^2 I_U)``; the server sets ``u <- Pi_U(u - eta (g_u + b_t))``. The
output is the uniform average of the iterates ``t = 0 .. T-1`` (``silo_params`` gives every owner's averaged
``(x_j, u)``; ``state.params`` is the last shared iterate).

Noise calibration, both ways:

* the paper's formula (line 2): ``sigma^2 = c^2 L^2 T log(1/delta) / (eps^2 m^2 n^2)`` with Lemma 3.2's
  unspecified universal constant made explicit as ``c`` (:func:`paper_noise_multiplier`; ``c = 1`` is the
  algorithm as printed, which is correct only up to that constant);
* the accountant: the smallest ``z = sigma / L`` whose ``T`` steps of :func:`step_event` meet (eps, delta)
  (:func:`calibrated_noise_multiplier`).

**Privacy statement.** The u-gradient of a step on owner ``j`` is taken at ``x_j``, which depends on every
record of owner ``j`` used so far; changing one record therefore moves later u-gradients too, which the
paper's proof ignores (digest §3.1's caveat). The per-step event bounds the sensitivity only when ``grad_u h``
does not depend on ``x``, i.e. ``h(x, u, z) = h_1(x, z) + h_2(u, z)``: ``separable=True`` declares that (as
``lipschitz`` declares L), and only then does the algorithm state privacy (record level, replace-one, one
:func:`step_event` per owner per step). Otherwise ``privacy`` is None and the paper's number is available
from the functions above as what the paper claims, not as a guarantee.

References:
  Y. Huang, H. Jiang, D. Liu, M. Mahdian, J. Mao and V. Mirrokni. "Learning across Data Owners with
  Joint Differential Privacy." arXiv 2305.15723, 2023.
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

import dp_accounting
import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from jaxfl import checks
from jaxfl.accounting.calibrate import calibrate
from jaxfl.algorithms.personalized import has_leaves, merge, partition, shared_labels
from jaxfl.engine import local
from jaxfl.engine.participation import uniform
from jaxfl.engine.protocol import FederatedAlgorithm, RoundPrivacy
from jaxfl.engine.rounds import make_round
from jaxfl.privacy import keys as keys_lib
from jaxfl.privacy import mean_estimation
from jaxfl.privacy.noise import gaussian_like

_tmap = jax.tree_util.tree_map
REPLACE_ONE = dp_accounting.NeighboringRelation.REPLACE_ONE


class AnsgdState(NamedTuple):
    """Server state: ``params`` (shared leaves at the current ``u``, private leaves at their initial
    values), ``u_sum`` (the sum of the shared iterates ``u^0 .. u^{round-1}``) and ``round`` (= t).

    Example: :func:`ansgd`.
    """

    params: Any
    u_sum: Any
    round: jnp.ndarray


class AnsgdSilo(NamedTuple):
    """An owner's state: its current ``x`` (the private part), ``x_sum`` (the sum of its iterates up to
    ``last``, exclusive) and ``last`` (the step up to which ``x_sum`` is summed; ``x`` has not changed
    since).

    Example: :func:`ansgd`.
    """

    x: Any
    x_sum: Any
    last: jnp.ndarray


def paper_noise_multiplier(epsilon: float, delta: float, *, steps: int, records_per_owner: float, owners: int,
                           constant: float = 1.0) -> float:
    """``z = sigma / L = c sqrt(T log(1/delta)) / (eps m n)``: Alg. 1 line 2 (``sigma^2 = L^2 T log(1/delta) /
    (eps^2 m^2 n^2)``) with Lemma 3.2's unspecified constant ``c`` (digest §3.1: Lemma 3.2 as printed lacks
    the ``L`` and ``m`` factors of line 2; read as ``sigma >= c L sqrt(T log(1/delta)) / (eps m n)``).

    Example (10 owners of 100 records, T = 10,000 steps, (1, 1e-5), c = 1):
      >>> round(paper_noise_multiplier(1.0, 1e-5, steps=10_000, records_per_owner=100, owners=10), 4)
      0.3393
    """
    epsilon = checks.epsilon("epsilon", epsilon)
    delta = checks.delta("delta", delta, scalar=True)
    steps = checks.positive_int("steps", steps)
    m = checks.positive_float("records_per_owner", records_per_owner)
    n = checks.positive_int("owners", owners)
    return checks.positive_float("constant", constant) * math.sqrt(steps * math.log(1 / delta)) / (epsilon * m * n)


def step_event(noise_multiplier: float, *, records_per_owner: int, owners: int) -> dp_accounting.DpEvent:
    """One step as a record of an owner with ``m`` records sees it: used with probability ``1 / (n m)`` (one
    owner of ``n``, then one record of ``m``), a Gaussian of std ``z L`` on its clipped gradient. One draw
    with replacement is one draw without, so the event is ``SampledWithoutReplacementDpEvent(n m, 1,
    GaussianDpEvent(z))`` under replace-one neighbours, which dp_accounting's RDP accountant supports (the
    sensitivity ``2 L`` comes from the relation: :func:`jaxfl.accounting.events.clipped_sum_gaussian`).

    Example:
      >>> step_event(1.0, records_per_owner=100, owners=10)
      SampledWithoutReplacementDpEvent(source_dataset_size=1000, sample_size=1,
                                       event=GaussianDpEvent(noise_multiplier=1.0))
    """
    m = checks.positive_int("records_per_owner", records_per_owner)
    n = checks.positive_int("owners", owners)
    return dp_accounting.SampledWithoutReplacementDpEvent(n * m, 1,
                                                          dp_accounting.GaussianDpEvent(float(noise_multiplier)))


def calibrated_noise_multiplier(epsilon: float, delta: float, *, steps: int, records_per_owner: int, owners: int,
                                accountant: str = "rdp") -> float:
    """The smallest ``z`` whose ``steps`` :func:`step_event` s are (eps, delta)-DP under replace-one
    neighbours.

    Example (the same setting as :func:`paper_noise_multiplier`'s example, by the RDP accountant):
      >>> round(calibrated_noise_multiplier(1.0, 1e-5, steps=10_000, records_per_owner=100, owners=10), 3)
      2.063
    """
    steps = checks.positive_int("steps", steps)

    def event(z):
        return dp_accounting.SelfComposedDpEvent(step_event(z, records_per_owner=records_per_owner, owners=owners),
                                                 steps)

    return calibrate(event, epsilon, delta, accountant=accountant, neighboring_relation=REPLACE_ONE)


def default_schedule(*, records_per_owner: int, owners: int, radius: float, lipschitz: float, shared_dim: int,
                     epsilon: float, delta: float) -> tuple[int, float]:
    """``(T, eta)``: ``T = m^2 n^2`` (Thm 3.1) and the step size the proof's two bounds balance at (derived in
    digest §3.1; the paper states none): ``eta* = R / (L T sqrt(1/(m n) + l log(1/delta) / (eps^2 m^2 n^2)))``,
    ``R = sqrt(n D_X^2 + D_U^2)`` the diameter of the joint parameter set, ``l`` the shared dimension.

    Example:
      >>> steps, eta = default_schedule(records_per_owner=10, owners=4, radius=1.0, lipschitz=1.0, shared_dim=5,
      ...                               epsilon=1.0, delta=1e-5)
      >>> steps, round(eta, 5)                                     # T = (m n)^2
      (1600, 0.00253)
    """
    m = checks.positive_int("records_per_owner", records_per_owner)
    n = checks.positive_int("owners", owners)
    steps = (m * n) ** 2
    spread = (1 / (m * n) + checks.positive_int("shared_dim", shared_dim) * math.log(1 / delta)
              / (checks.epsilon("epsilon", epsilon) * m * n) ** 2)
    return steps, checks.positive_float("radius", radius) / (
        checks.positive_float("lipschitz", lipschitz) * steps * math.sqrt(spread))


def _ball(radius):
    if math.isinf(radius):
        return lambda tree: tree
    return lambda tree: optax.projections.projection_l2_ball(tree, radius)


def _check_common(learning_rate, noise_multiplier, shared_radius, private_radius):
    eta = checks.positive_float("learning_rate", learning_rate)
    z = checks.non_negative_float("noise_multiplier", noise_multiplier)
    project_u = _ball(checks.positive_float("shared_radius", shared_radius, allow_inf=True))
    project_x = _ball(checks.positive_float("private_radius", private_radius, allow_inf=True))
    return eta, z, project_u, project_x


def _owner_sgd(shared, *, eta, project_u, project_x, gradient, privacy, name) -> FederatedAlgorithm:
    """The loop A_NSGD and A_NSSGD share: one owner per round (uniform), which computes
    ``gradient(u, x_own, x, y, count, silo_key) -> (message for u, g_x, info)``, steps its ``x`` (silo state)
    and sends the message; the server steps ``u``; both keep the sums for the iterate averages."""
    part = lambda params, want: partition(params, shared_labels(shared, params), want)  # noqa: E731

    def init(params):
        if not (has_leaves(part(params, True)) and has_leaves(part(params, False))):
            raise ValueError(f"{name} needs shared (u) and private (x) leaves")
        return AnsgdState(params, _tmap(jnp.zeros_like, part(params, True)), jnp.zeros([], jnp.int32))

    def init_silos(params, num_silos):
        x = _tmap(lambda p: jnp.repeat(jnp.asarray(p)[None], num_silos, axis=0), part(params, False))
        return AnsgdSilo(x, _tmap(jnp.zeros_like, x), jnp.zeros([num_silos], jnp.int32))

    def client(sent, x, y, count, silo_key, *, silo_state):
        params, t = sent
        own = silo_state
        message, g_x, info = gradient(part(params, True), own.x, x, y, count, silo_key)
        x_sum = _tmap(lambda s, v: s + v * (t + 1 - own.last).astype(v.dtype), own.x_sum, own.x)
        x_new = project_x(_tmap(lambda v, d: v - eta * d, own.x, g_x))
        return message, info, AnsgdSilo(x_new, x_sum, t + 1)

    def server(state, summed, ctx):
        u = part(state.params, True)
        u_new = project_u(_tmap(lambda v, d: v - eta * d, u, summed))
        params = merge(u_new, part(state.params, False))
        return AnsgdState(params, _tmap(jnp.add, state.u_sum, u), state.round + 1), {
            "update_norm": optax.tree.norm(summed)}

    def silo_params(state):
        """Every owner's output ``(x_bar_j, u_bar)``: the averages of the iterates ``0 .. round-1``."""
        t = state.server.round
        scale = 1.0 / jnp.maximum(t, 1).astype(jnp.float32)
        own = state.silos
        x_bar = _tmap(lambda s, v: (s + v * (t - own.last).reshape((-1,) + (1,) * (v.ndim - 1)).astype(v.dtype))
                      * scale, own.x_sum, own.x)
        num_silos = own.last.shape[0]
        u_bar = _tmap(lambda s: jnp.broadcast_to(s * scale, (num_silos,) + s.shape), state.server.u_sum)
        return merge(u_bar, x_bar)

    return FederatedAlgorithm(
        init=init,
        round=make_round(client, server, uniform(1), broadcast=lambda s: (s.params, s.round), silo_state=True),
        privacy=privacy, name=name, init_silos=init_silos, silo_params=silo_params)


def ansgd(loss_fn, *, shared, learning_rate: float, noise_multiplier: float = 0.0, lipschitz=math.inf,
          shared_radius=math.inf, private_radius=math.inf, separable: bool = False, name: str = "ansgd"
          ) -> FederatedAlgorithm:
    """Builds A_NSGD (see the module docstring); one engine round is one step ``t``.

    Args:
      loss_fn: per-record loss ``(params, x, y) -> scalar`` on the whole model.
      shared: which leaves are ``u`` (as :func:`jaxfl.algorithms.personalized.personalized`'s ``shared=``).
      learning_rate: ``eta``, constant (see :func:`default_schedule`).
      noise_multiplier: ``z``; the noise on the u-gradient has std ``z L``.
      lipschitz: ``L``, the bound every single-record gradient is clipped to (inf: no clipping, allowed only
        without noise).
      shared_radius, private_radius: ``U`` and ``X`` as L2 balls of these radii around 0 (``D_U / 2``,
        ``D_X / 2``; inf: unconstrained).
      separable: declares ``grad_u h`` independent of ``x`` (see the module docstring); needed for a
        privacy statement.

    Example:
      >>> import jax.numpy as jnp, numpy as np, jaxfl
      >>> import jax
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (4, 50, 3)))
      >>> data = jaxfl.from_silos([(x[i], np.zeros(50, np.float32)) for i in range(4)])
      >>> def loss(p, z, y):                        # separable: the u-gradient does not depend on x
      ...     return 0.5 * jnp.sum((p["x"] - z) ** 2) + 0.5 * jnp.sum((p["u"] - z) ** 2)
      >>> algorithm = ansgd(loss, shared={"x": "private", "u": "shared"}, learning_rate=0.05, noise_multiplier=2.0,
      ...                   lipschitz=5.0, separable=True)
      >>> result = jaxfl.train(algorithm, data, {"x": jnp.zeros(3), "u": jnp.zeros(3)}, rounds=200, delta=1e-5,
      ...                      progress=False)
      >>> result.epsilons.round(3)                    # record level, one ledger per owner
      array([1.091, 1.091, 1.091, 1.091])
    """
    eta, z, project_u, project_x = _check_common(learning_rate, noise_multiplier, shared_radius, private_radius)
    clip = checks.positive_float("lipschitz", lipschitz, allow_inf=True)
    if z > 0 and math.isinf(clip):
        raise ValueError(f"noise_multiplier={noise_multiplier} needs a finite lipschitz bound to clip to")
    sampler = local.make_sampler(batch_size=1)

    def gradient(u, x_own, x, y, count, silo_key):
        g, info = local.noisy_gradient(lambda parts, xi, yi: loss_fn(merge(*parts), xi, yi), (u, x_own), x, y,
                                       count, silo_key, 0, sampler=sampler, clip_norm=clip, noise_multiplier=0.0)
        g_u, g_x = g
        if z > 0:
            noise = gaussian_like(keys_lib.step_key(silo_key, 0, keys_lib.Purpose.NOISE), u, z * clip)
            g_u = _tmap(jnp.add, g_u, noise)
        return g_u, g_x, info

    def privacy(counts):
        owners = int(sum(1 for c in counts if c > 0))
        return RoundPrivacy(events=tuple(step_event(z, records_per_owner=int(c), owners=owners)
                                         for c in counts if c > 0), level="record", relation=REPLACE_ONE)

    return _owner_sgd(shared, eta=eta, project_u=project_u, project_x=project_x, gradient=gradient,
                      privacy=privacy if z > 0 and separable else None, name=name)


def nssgd_event(noise_multiplier: float, *, owners: int) -> dp_accounting.DpEvent:
    """One A_NSSGD step as a user of an owner sees it: the owner is one of ``n`` drawn uniformly, then its
    users' mean goes through the private mean estimator (two Gaussians,
    :func:`jaxfl.privacy.mean_estimation.winsorized_mean_event`); replace-one (user) neighbours.

    Example (an owner drawn among 10, then the private mean's two Gaussians):
      >>> nssgd_event(1.0, owners=10).source_dataset_size
      10
    """
    return dp_accounting.SampledWithoutReplacementDpEvent(checks.positive_int("owners", owners), 1,
                                                          mean_estimation.winsorized_mean_event(noise_multiplier,
                                                                                                noise_multiplier))


def nssgd(loss_fn, *, shared, learning_rate: float, tau: float, bound: float, noise_multiplier: float = 0.0,
          gamma: float = 1e-3, shared_radius=math.inf, private_radius=math.inf, separable: bool = False,
          name: str = "nssgd") -> FederatedAlgorithm:
    """Builds A_NSSGD (Huang et al. Alg. 2, Appendix B) on data grouped by user
    (:func:`jaxfl.data.group_by_user`: silo rows are users, ``x: [users, records_per_user, ...]``).

    Step ``t``: one owner ``j`` (uniform); every user ``k`` of ``j`` gives its mean gradient ``X_k`` (line 4:
    ``(r / m) sum`` over its ``m / r`` records); the u-part of the ``X_k`` goes through the private mean
    estimator :func:`jaxfl.privacy.mean_estimation.winsorized_mean` (``tau``-concentrated, norms clipped to
    ``bound``; the paper cites Levy et al. 2021 without stating it), the x-part is averaged exactly (joint DP
    needs only ``u`` private; the paper leaves it open); then an SGD step on ``(x_j, u)`` (the paper's
    "update" is unspecified), with projections and iterate averages as :func:`ansgd`. ``noise_multiplier``
    is the estimator's ``z`` for both of its mechanisms (:func:`mean_estimation.calibrate_winsorized_mean`
    per step). Privacy is stated (user level, :func:`nssgd_event` per step) only with ``separable=True``,
    for the reason given in the module docstring.

    Example:
      >>> import jax, jax.numpy as jnp, numpy as np, jaxfl
      >>> from jaxfl.data import group_by_user
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (4, 40, 3)))
      >>> silos = jaxfl.from_silos([(x[i], np.zeros(40, np.float32)) for i in range(4)])
      >>> users = group_by_user(silos, records_per_user=2)            # 20 users of 2 records per owner
      >>> def loss(p, z, y):                                           # separable, as for ansgd
      ...     return 0.5 * jnp.sum((p["x"] - z) ** 2) + 0.5 * jnp.sum((p["u"] - z) ** 2)
      >>> algorithm = nssgd(loss, shared={"x": "private", "u": "shared"}, learning_rate=0.1, tau=2.0, bound=5.0,
      ...                   noise_multiplier=4.0, separable=True)
      >>> result = jaxfl.train(algorithm, users, {"x": jnp.zeros(3), "u": jnp.zeros(3)}, rounds=20, delta=1e-5,
      ...                      progress=False)
      >>> result.epsilons.round(2)           # user level, one ledger per owner: 20 steps, each owner drawn 1 in 4
      array([9.65, 9.65, 9.65, 9.65])
    """
    eta, z, project_u, project_x = _check_common(learning_rate, noise_multiplier, shared_radius, private_radius)
    tau = checks.positive_float("tau", tau)
    bound = checks.positive_float("bound", bound)
    if z <= 0:
        raise ValueError(f"nssgd's mean estimator needs noise_multiplier > 0, got {noise_multiplier}")

    def gradient(u, x_own, x, y, count, silo_key):
        def user_grad(xs, ys):
            return jax.grad(lambda parts: jnp.mean(jax.vmap(lambda a, b: loss_fn(merge(*parts), a, b))(xs, ys)))(
                (u, x_own))

        g_u, g_x = jax.vmap(user_grad)(x, y)                     # leaves [users, ...]
        real = (jnp.arange(x.shape[0]) < count).astype(jnp.float32)
        flat_u = jax.vmap(lambda g: ravel_pytree(g)[0])(g_u)       # [users, d_u]
        estimate = mean_estimation.winsorized_mean(keys_lib.step_key(silo_key, 0, keys_lib.Purpose.NOISE), flat_u,
                                                   tau=tau, bound=bound, noise_multiplier=z, gamma=gamma, mask=real)
        message = ravel_pytree(_tmap(lambda a: a[0], g_u))[1](estimate.mean)
        inverse = 1.0 / jnp.maximum(jnp.sum(real), 1.0)
        g_x = _tmap(lambda a: jnp.tensordot(real, a, axes=1) * inverse, g_x)
        return message, g_x, {"winsorized": estimate.clipped.astype(jnp.float32)}

    def privacy(counts):
        owners = int(sum(1 for c in counts if c > 0))
        # level "record": a row of the grouped data, i.e. one user
        return RoundPrivacy(events=tuple(nssgd_event(z, owners=owners) for c in counts if c > 0), level="record",
                            relation=REPLACE_ONE)

    return _owner_sgd(shared, eta=eta, project_u=project_u, project_x=project_x, gradient=gradient,
                      privacy=privacy if separable else None, name=name)
