"""Personalised local heads (FedPer / FedRep style): shared parameters are averaged across silos, the
rest ("private" parameters, e.g. a classification head) stay on each silo, in its silo state.

The split is given by ``shared=``: a label tree (the params' structure, or a prefix of it, with leaves
``"shared"`` / ``"private"``, like ``optax.multi_transform``'s labels) or a predicate
``(path, leaf) -> bool`` (True: shared) as for ``jax.tree_util.tree_map_with_path``. Labels are computed
from the params whenever needed (inside ``init``, ``round``, ...), so the algorithm keeps no template.
A "part" is the params tree with ``None`` in place of the other part's leaves (equinox-style partition).
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxfl import checks
from jaxfl.algorithms.common import check_private_args, per_silo_noise, safe_mean, sampled_silo_privacy
from jaxfl.engine import local
from jaxfl.engine.participation import argument as participation_argument, resolve
from jaxfl.engine.protocol import FederatedAlgorithm, ServerState
from jaxfl.engine.rounds import make_round

_tmap = jax.tree_util.tree_map
_is_none = lambda v: v is None  # noqa: E731


def shared_labels(shared, params):
    """A tree of Python bools shaped like ``params``: True on shared leaves (see the module docstring).
    Every leaf may be shared (collaboration on the whole model) or private (per-silo training).

    Example:
      >>> import jax.numpy as jnp
      >>> shared_labels({"body": "shared", "head": "private"}, {"body": jnp.ones(2), "head": jnp.zeros(1)})
      {'body': True, 'head': False}
    """
    if callable(shared):
        def label(path, leaf):
            value = shared(path, leaf)
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"the shared predicate must return a Python bool (from the path / shape), got "
                                f"{type(value).__name__} at {jax.tree_util.keystr(path)}")
            return bool(value)
        return jax.tree_util.tree_map_with_path(label, params)

    def expand(lab, subtree):
        if lab not in ("shared", "private"):
            raise ValueError(f"shared labels must be 'shared' or 'private', got {lab!r}")
        return _tmap(lambda _: lab == "shared", subtree)
    return _tmap(expand, shared, params)


def has_leaves(part) -> bool:
    """Whether a part of :func:`partition` holds any array.

    Example:
      >>> has_leaves({"body": None, "head": None}), has_leaves({"body": None, "head": 1.0})
      (False, True)
    """
    return bool(jax.tree_util.tree_leaves(part))


def partition(params, labels, want_shared: bool):
    """The shared (or private) part: ``params`` with ``None`` in place of the other leaves.

    Example:
      >>> import jax.numpy as jnp
      >>> params = {"body": jnp.ones(2), "head": jnp.zeros(1)}
      >>> partition(params, {"body": True, "head": False}, want_shared=True)["head"] is None
      True
    """
    return _tmap(lambda lab, p: p if lab == want_shared else None, labels, params)


def merge(first, second):
    """Recombines two parts of :func:`partition` (each leaf is set in exactly one of them).

    Example:
      >>> import jax.numpy as jnp
      >>> params = {"body": jnp.ones(2), "head": jnp.zeros(1)}
      >>> labels = {"body": True, "head": False}
      >>> merged = merge(partition(params, labels, True), partition(params, labels, False))
      >>> merged["body"].tolist(), merged["head"].tolist()
      ([1.0, 1.0], [0.0])
    """
    return _tmap(lambda a, b: b if a is None else a, first, second, is_leaf=_is_none)


def _per_part(opt) -> optax.GradientTransformation:
    """``opt`` applied to the shared and the private part of a ``(shared, private)`` pair separately, so no
    cross-leaf operation of ``opt`` (global-norm clipping, ...) mixes the private gradient into the shared one.
    ``opt`` is one transformation for both parts or, as in ``optax.multi_transform``, a mapping
    ``{"shared": ..., "private": ...}``."""
    opts = (opt["shared"], opt["private"]) if isinstance(opt, Mapping) else (opt, opt)

    def update(grads, state, params=None):
        (u_s, s_s), (u_p, s_p) = (o.update(g, st, p) for o, g, st, p in zip(opts, grads, state, params or (None, None)))
        return (u_s, u_p), (s_s, s_p)

    return optax.GradientTransformation(lambda pair: tuple(o.init(p) for o, p in zip(opts, pair)), update)


def personalized(loss_fn, *, shared, client_opt, local_steps: int,
                 server_opt: optax.GradientTransformation | None = None, batch_size: int | None = None,
                 sampling_rate=None, expected_batch_size=None, clip_norm=math.inf, noise_multiplier=0.0,
                 participation=None, silos_per_round=None, noise_on: str = "all", shared_gradient_at: str = "current",
                 noise_placement: str = "local", owners: int | None = None, chunk="auto", microbatch="auto",
                 name: str | None = None) -> FederatedAlgorithm:
    """Shared body + per-silo private parameters (FedPer-style joint local training; Huang et al.'s regimes).

    Every silo's private part starts at the initial params' private leaves. Per round each participant
    runs ``local_steps`` steps of ``client_opt`` (applied to the two parts separately; a mapping
    ``{"shared": opt, "private": opt}`` gives each part its own) on one minibatch per step, keeps its
    private part and sends the shared delta only; the server applies ``server_opt`` (default
    ``optax.sgd(1.0)``) to the mean delta. ``state.params`` is the shared model (private leaves at their
    initial values); ``silo_params(state)`` is every silo's own model. With ``sampling_rate``, ``chunk``
    takes the Poisson sample's gradients that many records at a time (``"auto"``, the default, as
    :func:`jaxfl.engine.local.gather_chunk` decides; ``None``: every record under a mask);
    ``microbatch`` slices each step's clipped sums as in :func:`jaxfl.algorithms.sgd.minibatch_sgd`, and
    ``expected_batch_size`` (a public constant fixed in advance) is what a Poisson or full batch's clipped sum
    is divided by, which makes every statement below add/remove-one (without it the sum is divided by the
    silo's own size and the statements are replace-one: :class:`jaxfl.engine.local.Sampler`).

    The split may put every leaf on one side: all private is per-silo training (nothing is sent; the
    server's model never moves), all shared is Local SGD / FedAvg on the whole model (DP-SGD steps with
    noise). Huang et al.'s four regimes are this one algorithm with four splits and noise settings.

    With ``noise_multiplier > 0``, ``noise_on`` says where the Gaussian mechanism acts:

    - ``"all"`` (default): every local step is DP-SGD on the whole model, per-example clipping of the
      joint (shared + private) gradient to ``clip_norm`` and ``N(0, (z C)^2)`` noise on both parts. The
      private part is post-processing of the silo's noisy steps, so the statement
      ``sampled_silo_privacy(sampler, z, local_steps)`` (ISRL-DP for one record of the silo, under the
      sampler's neighbouring relation) covers everything the silo computes, its private part included.
    - ``"shared"`` (joint DP): per-example clipping of the *shared part's* gradient to ``clip_norm`` and
      noise on the shared part only; the private part trains on the plain minibatch gradient and is
      never noised or sent. ``shared_gradient_at`` says where the shared gradient is taken:

      * ``"current"`` (Huang et al.'s experiments): at the silo's own private part. **No privacy is stated**
        (``privacy`` is None and a budget is refused): the private part depends on every record of the
        silo, so one record moves all the other records' shared gradients and per-example clipping does
        not bound the sensitivity (digest §3.1's caveat, which the paper's accounting ignores).
      * ``"initial"``: at the private leaves' initial (public) values, which no data touches. The shared
        steps are then DP-SGD with a fixed public private part, and the silo's transcript (its shared
        deltas) has the statement ``sampled_silo_privacy(sampler, z, local_steps)``; the private parts,
        trained at the current shared iterate on the silo's own data and never sent, are outside it, as
        joint DP allows (billboard model: every other silo's output is post-processing of the transcript
        and its own data).

    ``noise_placement`` says who adds the noise:

    - ``"local"`` (default): each silo adds ``N(0, (z C)^2)`` to its own clipped sums (ISRL-DP; no one is
      trusted). The mean of ``n`` silos' updates then carries ``sqrt(n)`` times the noise of one central draw.
    - ``"central"``: central DP-SGD, the noise of one draw ``N(0, (z C)^2)`` on the sum over the ``owners``
      silos' clipped sums (Huang et al.'s "central-DP noise ... for each global model update"), added in shares:
      each silo adds ``N(0, (z C)^2 / owners)``, which sum to that draw under **secure aggregation** (the
      server sees the sum only; every owner honest in adding its share; a trusted aggregator adding one draw to
      the plain sum releases the same). ``owners`` is the public number of silos, all of which take part in
      every round (no ``participation``); a round with fewer would carry less noise, so the statement refuses
      silo counts that differ from it. Two statements: ``events``, what one silo's own message reveals (ISRL-DP
      at ``z / sqrt(owners)``, true even without secure aggregation), and ``RoundPrivacy.central``, what the
      aggregate reveals about any record of any silo (``sampler.event`` at ``z``; the smallest silo's for
      size-dependent samplers), which :func:`jaxfl.engine.driver.make_ledger` accounts with ``central=True``.
      The central statement needs ``local_steps=1``: with more local steps a silo's later gradients are
      taken at points its own lightly noised steps moved, which the other silos' shares do not hide, so only
      the per-silo statement is made (``central`` is None).

    Example:
      >>> import jax, numpy as np, optax, jaxfl
      >>> from jaxfl.data import iid
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (400, 5)))
      >>> y = (x[:, 0] > 0).astype(np.float32)
      >>> data = iid(x, y, num_silos=8, seed=0)                  # 8 silos of 50 records
      >>> algorithm = personalized(logistic_loss, shared={"w": "shared", "b": "private"}, client_opt=optax.sgd(0.5),
      ...                          local_steps=5, sampling_rate=0.2, expected_batch_size=10, clip_norm=1.0,
      ...                          noise_multiplier=1.0)
      >>> result = jaxfl.train(algorithm, data, init_linear(5), rounds=20, delta=1e-5, progress=False)
      >>> jax.tree_util.tree_map(np.shape, result.state.silos)   # each silo's own bias, never sent
      {'b': (8,), 'w': None}
      >>> round(result.epsilon, 2)
      16.08
    """
    participation = participation_argument(participation, silos_per_round, "personalized")
    private = check_private_args(clip_norm, noise_multiplier)
    sampler = local.make_sampler(batch_size, sampling_rate, chunk if sampling_rate is not None else None,
                                 microbatch=microbatch,
                                 expected_batch_size=expected_batch_size)
    server_opt = optax.sgd(1.0) if server_opt is None else server_opt
    num_steps = checks.positive_int("local_steps", local_steps)
    checks.one_of("noise_on", noise_on, ("all", "shared"))
    checks.one_of("shared_gradient_at", shared_gradient_at, ("current", "initial"))
    if isinstance(client_opt, Mapping) and set(client_opt) != {"shared", "private"}:
        raise ValueError("a client_opt mapping needs exactly the keys 'shared' and 'private', "
                         f"got {sorted(client_opt)}")
    central = checks.one_of("noise_placement", noise_placement, ("local", "central")) == "central"
    share = _noise_share(noise_multiplier, owners, participation, private) if central else noise_multiplier
    if not central and owners is not None:
        raise ValueError(f"owners={owners} sets the noise shares of noise_placement='central' (got 'local')")
    shared_z, silo_z = per_silo_noise(share)
    part = lambda params, want: partition(params, shared_labels(shared, params), want)  # noqa: E731
    stated = private and (noise_on == "all" or shared_gradient_at == "initial")

    def init(params):
        if private and noise_on == "shared" and not has_leaves(part(params, True)):
            raise ValueError(f"noise_on='shared' with every leaf private adds no noise; pass noise_multiplier=0 "
                             f"for per-silo training (got {noise_multiplier})")
        return ServerState(params, server_opt.init(part(params, True)), jnp.zeros([], jnp.int32))

    def init_silos(params, num_silos):
        return _tmap(lambda p: jnp.repeat(jnp.asarray(p)[None], num_silos, axis=0), part(params, False))

    def client(sent, x, y, count, silo_key, z=shared_z, *, silo_state):
        start = part(sent, True)
        initial_private = part(sent, False)  # the server's private leaves never move: the public initial values
        joint = noise_on == "all" or not has_leaves(start) or not has_leaves(silo_state)
        joint_z, joint_clip = (z, clip_norm) if noise_on == "all" or has_leaves(start) else (0.0, math.inf)

        def joint_gradient(parts, step, drawn):  # DP-SGD on the whole model (or plain SGD, per-silo training)
            return local.noisy_gradient(lambda sp, xj, yj: loss_fn(merge(*sp), xj, yj), parts, x, y, count, silo_key,
                                        step, sampler=sampler, clip_norm=joint_clip, noise_multiplier=joint_z,
                                        drawn=drawn)

        def gradient(parts, step, drawn):  # clipping and noise on the shared part only
            s, p = parts
            if shared_gradient_at == "current":  # both parts' gradients at (s, p): one forward pass
                return local.noisy_and_plain_gradients(lambda s_, p_, xj, yj: loss_fn(merge(s_, p_), xj, yj), s, p,
                                                       x, y, count, silo_key, step, sampler=sampler,
                                                       clip_norm=clip_norm, noise_multiplier=z, drawn=drawn)
            g_s, info = local.noisy_gradient(lambda s_, xj, yj: loss_fn(merge(s_, initial_private), xj, yj), s, x, y,
                                             count, silo_key, step, sampler=sampler, clip_norm=clip_norm,
                                             noise_multiplier=z, drawn=drawn)
            g_p, _ = local.noisy_gradient(lambda p_, xj, yj: loss_fn(merge(s, p_), xj, yj), p, x, y, count,
                                          silo_key, step, sampler=sampler, clip_norm=math.inf, noise_multiplier=0,
                                          drawn=(drawn[0], None))
            return (g_s, g_p), info

        (final, own), info = local.local_steps(
            (start, silo_state), num_steps=num_steps, client_opt=_per_part(client_opt),
            gradient_fn=joint_gradient if joint else gradient,
            draw_fn=local.step_draws(sampler, silo_key, count, x.shape[0], (start, silo_state) if joint else start,
                                     joint_z if joint else z))
        return _tmap(jnp.subtract, start, final), info, own

    def server(state, summed, ctx):
        mean = safe_mean(summed, ctx.total_weight)
        shared_now = part(state.params, True)
        updates, opt_state = server_opt.update(mean, state.opt_state, shared_now)
        params = merge(optax.apply_updates(shared_now, updates), part(state.params, False))
        return ServerState(params, opt_state, state.round + 1), {"update_norm": optax.tree.norm(mean)}

    def silo_params(state):
        own = state.silos
        if not has_leaves(own):
            return None  # nothing private: every silo's model is the shared one
        num_silos = jax.tree_util.tree_leaves(own)[0].shape[0]
        return merge(_tmap(lambda a: jnp.broadcast_to(a, (num_silos,) + jnp.shape(a)), part(state.params, True)), own)

    return FederatedAlgorithm(
        init=init,
        round=make_round(client, server, resolve(participation), per_silo=silo_z, silo_state=True),
        privacy=(_central_privacy(sampler, noise_multiplier, share, owners, num_steps) if central
                 else sampled_silo_privacy(sampler, noise_multiplier, num_steps)) if stated else None,
        name=name or ("dp_personalized" if stated else "personalized"),
        init_silos=init_silos, silo_params=silo_params)


def _noise_share(noise_multiplier, owners, participation, private) -> float:
    """The noise multiplier each silo adds under ``noise_placement="central"``: ``z / sqrt(owners)``."""
    owners = checks.positive_int("owners", owners)
    if not private:
        return 0.0
    if np.ndim(noise_multiplier) != 0:
        raise ValueError("noise_placement='central' adds shares of one draw: noise_multiplier must be one number, "
                         f"got {np.shape(noise_multiplier)[0]} per silo")
    if participation is not None:
        raise ValueError(f"noise_placement='central' needs every owner in every round (the shares sum to one "
                         f"draw), got participation={participation!r}")
    return noise_multiplier / math.sqrt(owners)   # traced in sweeps


def _central_privacy(sampler, noise_multiplier, share, owners, num_steps):
    """``counts -> RoundPrivacy``: per silo its own message at ``share`` (ISRL-DP), and the aggregate's central
    event at ``noise_multiplier`` for one local step (see :func:`personalized`)."""
    silo_privacy = sampled_silo_privacy(sampler, share, num_steps)

    def privacy(counts):
        real = [int(c) for c in np.asarray(counts) if c > 0]
        if len(real) != owners:
            raise ValueError(f"noise_placement='central' with owners={owners}: the shares sum to one draw only "
                             f"over {owners} silos, but {len(real)} hold records")
        statement = silo_privacy(counts)
        if num_steps != 1:
            return statement
        return statement._replace(central=sampler.event(min(real), float(noise_multiplier)))

    return privacy
