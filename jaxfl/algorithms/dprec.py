"""DP-REC (Triastcyn et al., Algs 3, 4 and 8): relative-entropy coding of clipped client updates as the privacy
mechanism.

Per round the server draws ``B`` client slots uniformly **with replacement** from the ``N`` clients
(:func:`jaxfl.engine.participation.with_replacement`; a client drawn twice trains and encodes twice,
independently). Each slot trains locally for ``local_epochs`` epochs (:func:`jaxfl.engine.local.local_epochs`),
clips its update ``phi = w_s - w`` to global L2 norm ``C = c sigma`` (all tensors together), picks a
fresh 32-bit seed ``R`` from its own randomness, and REC-encodes ``phi_hat`` blockwise against the
prior ``N(0, sigma^2 I)`` (:func:`jaxfl.compression.rec.encode`, Gumbel noise from a second private key).
The message is ``(R, k*_1..k*_M)`` only. The server decodes each message
(:func:`jaxfl.compression.rec.decode`), averages over the ``B`` slots (uniform weights, ``1/|S'|``) and applies
``server_opt`` to the pseudo-gradient ``-mean`` (so ``optax.sgd(1.0)`` is parameter averaging; the paper's
``w <- w - O(Delta)`` with ``Delta = w_s - w``). No noise is added anywhere.

Privacy (user level, add/remove one client, central): one round is
``SampledWithReplacementDpEvent(N, B, DprecDpEvent(c, b_tot))``, which the ``"dprec"`` accountant counts as
``B`` steps at rate ``1/N`` (Alg. 7). The guarantee needs the secrecy of the Gumbel draws and the client's
choice of ``R``; both hold here by construction.

References:
  A. Triastcyn, M. Reisser and C. Louizos. "DP-REC: Private & Communication-Efficient Federated
  Learning." arXiv preprint, 2021.
"""
from __future__ import annotations

import warnings
from typing import Callable, NamedTuple

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from jaxfl import checks
from jaxfl.accounting.events import DprecDpEvent
from jaxfl.algorithms.common import check_params, concrete_params, model_template
from jaxfl.compression import rec
from jaxfl.engine import local
from jaxfl.engine.participation import Slots, with_replacement
from jaxfl.engine.protocol import FederatedAlgorithm, RoundPrivacy
from jaxfl.engine.rounds import make_slot_round
from jaxfl.privacy import keys as keys_lib
from jaxfl.privacy.clipping import clip_update
from jaxfl.privacy.microbatch import check_microbatch


class DpRecState(NamedTuple):
    """Server state of DP-REC.

    Attributes:
      params, opt_state, round: model, server optimizer state, rounds done.
      seeds: ``uint32[B]``, the last round's client seeds; indices: ``int32[B, M]``, its block indices.
        Together they are the round's whole client-to-server transcript, which the server forwards to
        clients as history (Algs 5/6, :mod:`jaxfl.compression.history`).

    Example: :func:`dp_rec` (``result.state``).
    """

    params: object
    opt_state: object
    round: jnp.ndarray
    seeds: jnp.ndarray
    indices: jnp.ndarray


def client_seed(slot_key) -> jnp.ndarray:
    """The seed ``R`` a client picks for its codebook: uint32 from ``step_key(slot, 0, CODEC)``.

    Example (a public uint32 seed, sent with the message; the Gumbel key is another draw, never derived from it):
      >>> import jax
      >>> slot = jax.random.key(0)
      >>> seed = client_seed(slot)
      >>> from_seed = jax.random.key_data(jax.random.key(int(seed)))
      >>> seed.dtype, bool((jax.random.key_data(gumbel_key(slot)) != from_seed).any())
      (dtype('uint32'), True)
    """
    return jax.random.bits(keys_lib.step_key(slot_key, 0, keys_lib.Purpose.CODEC), (), jnp.uint32)


def gumbel_key(slot_key) -> jax.Array:
    """The client's private key for the categorical (Gumbel-max) choice: ``step_key(slot, 1, CODEC)``,
    never derived from the seed ``R``.

    Example: :func:`client_seed`.
    """
    return keys_lib.step_key(slot_key, 1, keys_lib.Purpose.CODEC)


def decoded_mean(seeds, indices, layout: rec.BlockLayout, prior_std) -> jnp.ndarray:
    """``float32[D]``: the mean over ``B`` messages of their decoded updates (Alg. 4 + aggregation).

    Example: :func:`server_step`, as :func:`dp_rec` runs it.
    """
    decoded = jax.vmap(lambda s, k: rec.decode(k, s, layout, prior_std))(seeds, indices)
    return jnp.sum(decoded, axis=0) * (1.0 / seeds.shape[0])


def server_step(server_opt: optax.GradientTransformation, unravel: Callable, state: DpRecState, seeds, indices,
                layout: rec.BlockLayout, prior_std) -> DpRecState:
    """One server update from a round's messages; clients replaying a history use this same function
    (Alg. 6), so their model equals the server's.

    Example: :func:`dp_rec` (each round's server update; a client replaying the history calls it too).
    """
    mean = unravel(decoded_mean(seeds, indices, layout, prior_std))
    pseudo_gradient = jax.tree_util.tree_map(jnp.negative, mean)
    updates, opt_state = server_opt.update(pseudo_gradient, state.opt_state, state.params)
    return DpRecState(optax.apply_updates(state.params, updates), opt_state, state.round + 1, seeds, indices)


def _slots(participation, clients_per_round) -> int:
    """``B`` from :func:`dp_rec`'s ``participation`` (or its deprecated ``clients_per_round``)."""
    if clients_per_round is not None:
        if participation is not None:
            raise ValueError("dp_rec: give participation=with_replacement(B) only (clients_per_round= is its "
                             "deprecated name)")
        warnings.warn("dp_rec(clients_per_round=B) is deprecated: use "
                      "participation=jaxfl.engine.participation.with_replacement(B)", DeprecationWarning, stacklevel=3)
        return checks.positive_int("clients_per_round", clients_per_round)
    if not isinstance(participation, Slots):
        raise ValueError("dp_rec's accounting is for clients drawn with replacement: pass "
                         f"participation=jaxfl.engine.participation.with_replacement(B), got {participation!r}")
    return participation.slots


def dp_rec(loss_fn, *, params, client_opt: optax.GradientTransformation, participation: Slots | None = None,
           batch_size: int, prior_std: float, clip_multiplier: float, local_epochs: int = 1,
           layout: rec.BlockLayout | Callable[[object], rec.BlockLayout] | None = None,
           server_opt: optax.GradientTransformation | None = None, clients_per_pass: int | None = None,
           microbatch="auto", name: str = "dp_rec", clients_per_round: int | None = None) -> FederatedAlgorithm:
    """Builds DP-REC.

    Args:
      loss_fn: per-example loss ``(params, x, y) -> scalar``.
      params: the model's initial parameters, or a template with the same structure, shapes and dtypes
        (``jax.ShapeDtypeStruct`` leaves allowed; :func:`jaxfl.algorithms.common.model_template`). The block
        layout, and with it the privacy statement (its total index bits), is fixed from it when the
        algorithm is built, so ``privacy`` works before ``init``; ``init`` checks its params against it.
      client_opt: local optimizer (the paper: plain SGD).
      participation: :func:`jaxfl.engine.participation.with_replacement` ``(B)``: ``B`` slots filled with
        replacement each round, what the accounting covers (``clients_per_round=B`` is its deprecated spelling).
      batch_size, local_epochs: local training (the paper: 1 epoch).
      prior_std: ``sigma`` of the prior ``N(0, sigma^2 I)`` and of the message distribution.
      clip_multiplier: ``c``; updates are clipped to ``C = c sigma``; privacy depends on ``c`` only.
      layout: a :class:`~jaxfl.compression.rec.BlockLayout` or ``params -> layout`` (called once, on
        ``params``); default 7 bits per tensor (:func:`jaxfl.compression.rec.per_tensor`).
      server_opt: optax transformation applied to ``-mean decoded update`` (default ``optax.sgd(1.0)``).
      clients_per_pass: run the ``B`` slots this many at a time instead of all under one ``vmap``
        (:func:`jaxfl.engine.rounds.make_slot_round`; ``1`` is fastest on CPU for convolutional models).
      microbatch: each local step's gradient taken in slices of this many records: ``"auto"``
        (default: slices on the CPU backend when the batch's intermediates overflow the cache), ``None``
        (the whole batch at once) or an int (:mod:`jaxfl.privacy.microbatch`). Memory and speed only: the
        same result to float rounding, the same privacy.

    Example:
      >>> import jax, numpy as np, optax, jaxfl
      >>> from jaxfl.compression.rec import fixed_size
      >>> from jaxfl.data import iid
      >>> from jaxfl.engine.participation import with_replacement
      >>> from jaxfl.models import binary_accuracy, init_linear, logistic_loss
      >>> x = np.asarray(jax.random.normal(jax.random.key(0), (2000, 5)))
      >>> y = (x[:, 0] > 0).astype(np.float32)
      >>> algorithm = dp_rec(logistic_loss, params=init_linear(5), client_opt=optax.sgd(0.5),
      ...                    participation=with_replacement(10), batch_size=10, prior_std=0.1, clip_multiplier=0.5,
      ...                    layout=fixed_size(6, 1, bits=8))     # each of the 6 parameters sent as an 8-bit index
      >>> result = jaxfl.train(algorithm, iid(x, y, num_silos=100, seed=0), init_linear(5), rounds=50,
      ...                      delta=100 ** -1.1, accountant="dprec", progress=False)
      >>> round(result.epsilon, 3), float(binary_accuracy(result.params, x, y)) > 0.9
      (0.566, True)
    """
    b = _slots(participation, clients_per_round)
    microbatch = check_microbatch(microbatch)
    sigma = checks.positive_float("prior_std", prior_std)
    c = checks.positive_float("clip_multiplier", clip_multiplier)
    server_opt = optax.sgd(1.0) if server_opt is None else server_opt
    template = model_template(params)
    make_layout = layout if callable(layout) else (lambda p: layout) if layout is not None else rec.per_tensor
    blocks = make_layout(concrete_params(params))
    if blocks.size != template.size:
        raise ValueError(f"the block layout covers {blocks.size} entries but the model has {template.size}")

    def init(params):
        check_params(template, params, name)
        return DpRecState(params, server_opt.init(params), jnp.zeros([], jnp.int32), jnp.zeros(b, jnp.uint32),
                          jnp.zeros((b, blocks.num_blocks), jnp.int32))

    def client(params, x, y, count, slot_key):
        trained, train_loss = local.local_epochs(loss_fn, params, x, y, count, slot_key, client_opt=client_opt,
                                                 batch_size=batch_size, epochs=local_epochs, microbatch=microbatch)
        update = jax.tree_util.tree_map(jnp.subtract, trained, params)
        clipped, norm = clip_update(update, c * sigma)
        seed = client_seed(slot_key)
        indices = rec.encode(ravel_pytree(clipped)[0], seed, gumbel_key(slot_key), blocks, sigma)
        return (seed, indices), {"update_norm": norm, "clipped_fraction": (norm > c * sigma).astype(jnp.float32),
                                 "train_loss": train_loss}

    def keep_messages(messages, weights, round_key):
        del weights, round_key  # every slot has weight 1; the server sees only (R, k*) per slot
        return messages

    def server(state, messages, ctx):
        seeds, indices = messages
        new = server_step(server_opt, template.unravel, state, seeds, indices, blocks, sigma)
        return new, {"server_step_norm": optax.tree.norm(
            jax.tree_util.tree_map(jnp.subtract, new.params, state.params))}

    def privacy(counts):
        clients = int(np.sum(np.asarray(counts) > 0))
        step = DprecDpEvent(c, blocks.total_bits)
        return RoundPrivacy(events=(dp_accounting.SampledWithReplacementDpEvent(clients, b, step),),
                            level="client", relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)

    return FederatedAlgorithm(init=init, round=make_slot_round(client, server, with_replacement(b),
                                                               aggregator=keep_messages,
                                                               clients_per_pass=clients_per_pass),
                              privacy=privacy, name=name)
