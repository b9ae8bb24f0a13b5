"""The named audits ``jaxfl audit NAME`` runs (:data:`AUDITS`: one per DP mechanism jaxfl states) and the
sabotaged variants the tests must catch (:data:`SABOTAGES`), each at a small size that runs in seconds.

The setting: one silo (or client) of four zero records and the canary (:func:`jaxfl.audit.canary_game`), clip
1, claims at delta 1e-3 by the accountant each mechanism's documentation names (the tightest it states).
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxfl.engine.participation import poisson, with_replacement
from jaxfl.audit import ADD_OR_REMOVE_ONE, CANARY_SCALE, REPLACE_ONE, AuditResult, audit, canary_game, linear_loss
from jaxfl.engine import local
from jaxfl.engine.protocol import FederatedAlgorithm, schedule_length
from jaxfl.engine.rounds import make_round
from jaxfl.privacy import keys as keys_lib
from jaxfl.privacy.noise import unit_noise_like

# ------------------------------------------------------------------------------------------------
# Named audits and sabotages

RATE, NOISE, CLIP, BACKGROUND, DELTA = 0.3, 1.5, 1.0, 4, 1e-3
"""The named audits' setting: Poisson rate 0.3 (records, or clients), noise multiplier 1.5, clip 1, four
background records (or clients); claims are the PLD accountant's (the tightest jaxfl states) at delta 1e-3:
0.81 for one round under add/remove-one, 1.12 under replace-one."""


class Audit(NamedTuple):
    """A named audit: ``build() -> (algorithm, game)``, the accountant of its claim and its rounds (``None``: the
    algorithm's whole schedule).

    Example:
      >>> algorithm, game = AUDITS["dp_fedavg"].build()
      >>> game.level, AUDITS["dp_fedavg"].accountant
      ('client', 'pld')
    """

    build: Callable[[], tuple]
    accountant: str = "pld"
    rounds: int | None = 1
    about: str = ""
    central: bool = False     # the algorithm's central statement (the aggregate over the game's silos)


def _minibatch_sgd(expected: bool, **overrides):
    from jaxfl.algorithms import minibatch_sgd

    kwargs = dict(server_opt=optax.sgd(1.0), sampling_rate=RATE, clip_norm=CLIP, noise_multiplier=NOISE,
                  expected_batch_size=RATE * (BACKGROUND + 1) if expected else None, microbatch=None)
    return minibatch_sgd(linear_loss, **{**kwargs, **overrides})


def _local_sgd(**overrides):
    from jaxfl.algorithms import local_sgd

    kwargs = dict(client_opt=optax.sgd(1.0), local_steps=2, sampling_rate=RATE, clip_norm=CLIP,
                  noise_multiplier=NOISE, expected_batch_size=RATE * (BACKGROUND + 1), microbatch=None)
    return local_sgd(linear_loss, **{**kwargs, **overrides})


def _dp_fedavg(**overrides):
    from jaxfl.algorithms import dp_fedavg

    kwargs = dict(client_opt=optax.sgd(1.0), local_steps=1, participation=poisson(RATE),
                  expected_clients=RATE * (BACKGROUND + 1),
                  clip_norm=CLIP, noise_multiplier=NOISE, microbatch=None)
    return dp_fedavg(linear_loss, **{**kwargs, **overrides})


def _personalized(noise_on: str = "all", **overrides):
    from jaxfl.algorithms import personalized

    kwargs = dict(shared={"w": "shared", "head": "private"}, client_opt=optax.sgd(1.0), local_steps=1,
                  sampling_rate=RATE, expected_batch_size=RATE * (BACKGROUND + 1), clip_norm=CLIP,
                  noise_multiplier=NOISE, noise_on=noise_on, shared_gradient_at="initial", microbatch=None)
    return personalized(linear_loss, **{**kwargs, **overrides})


OWNERS = 4
"""The central audits' silos: the canary's and three of background records, each adding a quarter of the noise
variance."""


def _personalized_central(owners: int = OWNERS):
    return _personalized(noise_placement="central", owners=owners)


def _central_game():
    return _with_head(canary_game(level="record", background=BACKGROUND, clip_norm=CLIP, silos=OWNERS))


def _noisy_minibatch_sgd(**overrides):
    from jaxfl.algorithms import noisy_sgd

    kwargs = dict(step_size=1.0, batch_size=2, clip_norm=CLIP, noise_multiplier=10.0, microbatch=None)
    return noisy_sgd.noisy_minibatch_sgd(linear_loss, **{**kwargs, **overrides})


def _noisy_prox_gd(**overrides):
    from jaxfl.algorithms import variance_reduced

    kwargs = dict(step_size=1.0, clip_norm=CLIP, noise_multiplier=NOISE, microbatch=None)
    return variance_reduced.noisy_prox_gd(linear_loss, **{**kwargs, **overrides})


def _full_batch(**overrides):
    from jaxfl.algorithms import minibatch_sgd

    kwargs = dict(server_opt=optax.sgd(1.0), expected_batch_size=float(BACKGROUND + 1), clip_norm=CLIP,
                  noise_multiplier=NOISE, microbatch=None)
    return minibatch_sgd(linear_loss, **{**kwargs, **overrides})


def _accelerated_one_pass(**overrides):
    from jaxfl.algorithms import accelerated

    schedule = accelerated.acsa_schedule(1, smoothness=1.0, noise_std=1.0, radius=1.0)
    kwargs = dict(schedule=schedule, batch_size=BACKGROUND + 1, clip_norm=CLIP, noise_multiplier=NOISE,
                  microbatch=None)
    return accelerated.accelerated_minibatch_sgd(linear_loss, **{**kwargs, **overrides})


def _prox_sgd_one_pass(**overrides):
    from jaxfl.algorithms import variance_reduced

    kwargs = dict(step_size=1.0, batch_size=BACKGROUND + 1, clip_norm=CLIP, noise_multiplier=NOISE, microbatch=None)
    return variance_reduced.noisy_prox_sgd(linear_loss, **{**kwargs, **overrides})


def _fedprox_spider(**overrides):
    from jaxfl.algorithms import variance_reduced

    kwargs = dict(step_size=1.0, phase_length=2, clip_norm=CLIP, noise_multiplier=NOISE, microbatch=None)
    return variance_reduced.fedprox_spider(linear_loss, **{**kwargs, **overrides})


def _fedprox_svrg(**overrides):
    from jaxfl.algorithms import variance_reduced

    kwargs = dict(step_size=1.0, batch_size=2, epoch_length=2, clip_norm=CLIP, noise_multiplier=3.0,
                  output="last", microbatch=None)
    return variance_reduced.fedprox_svrg(linear_loss, **{**kwargs, **overrides})


def _shuffled_minibatch_sgd(**overrides):
    from jaxfl.algorithms import shuffled

    kwargs = dict(step_size=1.0, clip_norm=CLIP, noise_multiplier=1.0, participation=1)
    return shuffled.shuffled_minibatch_sgd(linear_loss, **{**kwargs, **overrides})


def _async_sgd(**overrides):
    from jaxfl.algorithms import async_dp, async_schedules, async_timeline

    timeline = async_timeline.simulate(np.array([[2]]), async_timeline.draw_timing(1, 1), lookahead=1)
    kwargs = dict(step_size=async_schedules.step_size("constant", 1.0, 0.0, per="rounds"), clip_norm=CLIP,
                  noise_multiplier=1.0, sampling="poisson", records=BACKGROUND + 1, chunk=BACKGROUND + 1)
    return async_dp.async_sgd(linear_loss, timeline, **{**kwargs, **overrides})


def _ansgd(**overrides):
    from jaxfl.algorithms import joint_dp

    kwargs = dict(shared={"w": "shared", "head": "private"}, learning_rate=1.0, noise_multiplier=NOISE,
                  lipschitz=CLIP, separable=True)
    return joint_dp.ansgd(linear_loss, **{**kwargs, **overrides})


def _nssgd(**overrides):
    from jaxfl.algorithms import joint_dp

    kwargs = dict(shared={"w": "shared", "head": "private"}, learning_rate=1.0, tau=CLIP, bound=CLIP,
                  noise_multiplier=4.0, separable=True)
    return joint_dp.nssgd(linear_loss, **{**kwargs, **overrides})


def _user_game():
    """The record game with every record a user of its own (``group_by_user(..., 1)``): the canary is a user."""
    from jaxfl.data.users import group_by_user

    game = _with_head(_record_game(REPLACE_ONE))
    return game._replace(inside=group_by_user(game.inside, 1), outside=group_by_user(game.outside, 1))


SDP_DIM = 16


def _sdp_prox_sgd(**overrides):
    """SDP prox-SGD on a 16-parameter game (P_vec's bound composes over the coordinates), one pass in one batch,
    P_vec calibrated by :func:`jaxfl.privacy.shuffle.pvec_parameters` to epsilon 2 for the silo's 5 reports."""
    from jaxfl.algorithms import shuffled

    kwargs = dict(params={"w": jnp.zeros(SDP_DIM, jnp.float32)}, step_size=1.0, batch_size=BACKGROUND + 1,
                  clip_norm=CLIP, shuffle_params=_sdp_prox_sgd_params(), participation=1)
    return shuffled.sdp_prox_sgd(linear_loss, **{**kwargs, **overrides})


def _sdp_prox_sgd_params():
    from jaxfl.privacy import shuffle

    return shuffle.pvec_parameters(2.0, DELTA, BACKGROUND + 1, SDP_DIM)


DPREC_DIM = 64


def _dp_rec(**overrides):
    """DP-REC on a 64-parameter client game: 64 index bits (8 blocks of 8 entries, 8 bits each), so that the
    importance-sampling term ``12 e^{c^2} / 2^64`` on delta is negligible (7 bits would exceed any delta)."""
    from jaxfl.algorithms import dprec
    from jaxfl.compression import rec

    kwargs = dict(params={"w": jnp.zeros(DPREC_DIM, jnp.float32)}, client_opt=optax.sgd(1.0),
                  participation=with_replacement(2),
                  batch_size=1, prior_std=0.05, clip_multiplier=0.5, layout=rec.fixed_size(DPREC_DIM, 8, 8),
                  microbatch=None)
    return dprec.dp_rec(linear_loss, **{**kwargs, **overrides})


def _record_game(relation=ADD_OR_REMOVE_ONE, dim: int = 1024):
    return canary_game(level="record", relation=relation, background=BACKGROUND, clip_norm=CLIP, dim=dim)


def _client_game(dim: int = 1024):
    return canary_game(level="client", background=BACKGROUND, clip_norm=CLIP, dim=dim)


def _with_head(game):
    return game.with_parameters(head=jnp.zeros(1))


AUDITS = {
    "minibatch_sgd": Audit(lambda: (_minibatch_sgd(True), _record_game()), "pld", 1,
                           "Poisson rate 0.3, z 1.5, expected_batch_size fixed: add/remove-one record"),
    "minibatch_sgd_replace_one": Audit(lambda: (_minibatch_sgd(False), _record_game(REPLACE_ONE)), "pld", 1,
                                       "the same divided by the silo's own size: replace-one record"),
    "local_sgd": Audit(lambda: (_local_sgd(), _record_game()), "pld", 1,
                       "2 local steps of DP-SGD per round, expected_batch_size fixed: add/remove-one record"),
    "full_batch": Audit(lambda: (_full_batch(), _record_game()), "pld", 1,
                        "minibatch_sgd on every record, z 1.5, divided by a fixed expected_batch_size: "
                        "add/remove-one record"),
    "dp_fedavg": Audit(lambda: (_dp_fedavg(), _client_game()),
                       "pld", 1, "client rate 0.3, z 1.5, expected_clients fixed: add/remove-one client"),
    "dp_sgd_adaptive": Audit(lambda: (_dp_sgd_adaptive(), _record_game()), "pld", 2,
                             "dp_sgd with adaptive clipping (rate 0.3, bits' noise 2, step 1): two steps, the "
                             "second at the clip the first's noisy count set: add/remove-one record"),
    "dp_fedavg_adaptive": Audit(lambda: (_dp_fedavg(clip_norm=_ADAPTIVE()), _client_game()), "pld", 2,
                                "dp_fedavg with adaptive clipping (bits' noise 2, step 1): two rounds, the second "
                                "at the clip the first's noisy bits set: add/remove-one client"),
    "personalized": Audit(lambda: (_personalized(), _with_head(_record_game())), "pld", 1,
                          "shared body and a private head, noise on both, expected_batch_size fixed: add/remove-one"),
    "personalized_joint": Audit(lambda: (_personalized("shared"), _with_head(_record_game())),
                                "pld", 1, "joint DP: noise on the shared part, taken at the head's public initial "
                                          "value: add/remove-one record, from the other silos"),
    "personalized_central": Audit(lambda: (_personalized_central(), _central_game()), "pld", 1,
                                  "central noise placement: 4 owners each add N(0, (z C)^2 / 4), z 1.5, the "
                                  "aggregate's central statement: add/remove-one record of any owner",
                                  central=True),
    "noisy_minibatch_sgd": Audit(lambda: (_noisy_minibatch_sgd(), _record_game(REPLACE_ONE)), "lowy", 1,
                                 "Lowy & Razaviyayn's noisy MB-SGD, K = 2 draws with replacement, z 10: replace-one, "
                                 "closed-form accountant"),
    "noisy_minibatch_sgd_pld": Audit(lambda: (_noisy_minibatch_sgd(noise_multiplier=3.0), _record_game(REPLACE_ONE)),
                                     "pld", 1, "the same with z 3, claimed by the PLD of draws with replacement"),
    "noisy_prox_gd": Audit(lambda: (_noisy_prox_gd(), _record_game(REPLACE_ONE)), "pld", 1,
                           "Lowy, Ghafelebashi & Razaviyayn's noisy prox-GD: the full batch's noisy clipped sum "
                           "over n_i, z 1.5: replace-one record"),
    "accelerated_one_pass": Audit(lambda: (_accelerated_one_pass(), _record_game(REPLACE_ONE)), "pld", 1,
                                  "Lowy & Razaviyayn's accelerated MB-SGD, one pass (every record in one batch of "
                                  "K = 5), z 1.5: replace-one record"),
    "prox_sgd_one_pass": Audit(lambda: (_prox_sgd_one_pass(), _record_game(REPLACE_ONE)), "pld", 1,
                               "noisy prox-SGD, one pass (one batch of K = 5), z 1.5: replace-one record"),
    "fedprox_spider": Audit(lambda: (_fedprox_spider(), _record_game(REPLACE_ONE)), "pld", 2,
                            "FedProx-SPIDER, full gradients, phase length 2 (a fresh round and a difference round), "
                            "z 1.5: replace-one record"),
    "fedprox_svrg": Audit(lambda: (_fedprox_svrg(), _record_game(REPLACE_ONE)), "pld", 1,
                          "FedProx-SVRG's first round (a full-batch gradient at the anchor and K = 2 draws with "
                          "replacement), z 3 on both parts, the last iterate released: replace-one record"),
    "shuffled_minibatch_sgd": Audit(lambda: (_shuffled_minibatch_sgd(), _record_game(REPLACE_ONE)), "pld", 1,
                                    "shuffled noisy MB-SGD (K = 1 draw), z 1: the silo's own guarantee "
                                    "(ISRL-DP), replace-one record"),
    "async_sgd": Audit(lambda: (_async_sgd(), _record_game()), "pld", None,
                       "van Dijk et al.'s asynchronous client, stated variant: s = 2 of the public N_c = 5 "
                       "(Poisson rate 0.4), z 1: add/remove-one record"),
    "ansgd": Audit(lambda: (_ansgd(), _with_head(_record_game(REPLACE_ONE))), "rdp", 1,
                   "Huang et al.'s A_NSGD: one record drawn, noise z 1.5 on the shared part: replace-one record"),
    "nssgd": Audit(lambda: (_nssgd(), _user_game()), "rdp", 1,
                   "Huang et al.'s A_NSSGD: the users' mean gradients through the winsorized private mean "
                   "estimator (tau = bound = 1, z 4): replace-one user"),
    "sdp_prox_sgd": Audit(lambda: (_sdp_prox_sgd(), _record_game(REPLACE_ONE, SDP_DIM)), "shuffle", 1,
                          "SDP prox-SGD: the silo's 5 clipped gradients summed by P_vec (binomial noise bits, "
                          "calibrated to epsilon 2): the silo's own guarantee, replace-one record"),
    "dp_rec": Audit(lambda: (_dp_rec(), _client_game(DPREC_DIM)), "dprec", 1,
                    "Triastcyn et al.'s DP-REC: B = 2 slots drawn with replacement from 5 clients, c = 0.5, 64 index "
                    "bits: add/remove-one client"),
}
"""The audits ``jaxfl audit NAME`` runs: name -> :class:`Audit`."""


def _ADAPTIVE():
    from jaxfl.privacy.adaptive_clipping import adaptive_clip

    return adaptive_clip(CLIP, learning_rate=1.0, count_stddev=2.0)


def _dp_sgd_adaptive():
    from jaxfl.algorithms import dp_sgd

    return dp_sgd(linear_loss, optimizer=optax.sgd(1.0), expected_batch_size=RATE * (BACKGROUND + 1),
                  num_records=BACKGROUND + 1, clip_norm=_ADAPTIVE(), noise_multiplier=NOISE, microbatch=None)


class _AdaptiveState(NamedTuple):
    params: Any
    clip: jax.Array


def _adaptive_bits_unnoised():
    """DP-FedAvg with adaptive clipping (one local step on the linear loss) whose server sets the next clip from
    the exact fraction of clients under the clip: the second round's noise scale then tells whether the canary
    took part in the first. A sabotage, not an algorithm."""
    from jaxfl.privacy import adaptive_clipping as ac
    from jaxfl.privacy.clipping import clip_update
    from jaxfl.privacy.noise import add_gaussian_noise

    settings, expected = _ADAPTIVE(), RATE * (BACKGROUND + 1)
    z_delta = ac.update_noise_multiplier(NOISE, settings.count_stddev)

    def client(sent, x, y, count, silo_key):
        params, clip = sent
        clipped, norm = clip_update({"w": -x[0]}, clip)   # one SGD step of size 1 on -<w, x>
        return (clipped, (norm <= clip).astype(jnp.float32) - 0.5), {}

    def server(state, summed, ctx):
        delta_sum, bit_sum = summed
        key = keys_lib.derive_from_round(ctx.round_key, silo=keys_lib.SERVER, step=0, purpose=keys_lib.Purpose.NOISE)
        noisy = add_gaussian_noise(key, delta_sum, z_delta * state.clip)
        fraction = ac.below_fraction(bit_sum, expected)   # the sabotage: no noise on the bits
        clip = ac.next_clip(state.clip, fraction, settings.target_quantile, settings.learning_rate)
        params = jax.tree_util.tree_map(lambda p, d: p - d / expected, state.params, noisy)
        return _AdaptiveState(params, clip), {}

    return FederatedAlgorithm(lambda params: _AdaptiveState(params, jnp.asarray(CLIP, jnp.float32)),
                              make_round(client, server, poisson(RATE), broadcast=lambda s: (s.params, s.clip)),
                              name="dp_fedavg")


class _StaleNoise(NamedTuple):
    params: Any
    first_key: jax.Array  # the key data of round 0's noise key, kept for every later round
    round: jax.Array


def _noise_key_reused(expected_batch_size: float):
    """Minibatch SGD on one silo that keeps drawing its noise from round 0's key (its Poisson samples stay
    fresh): two rounds' releases then differ by the canary's contributions without noise. A sabotage, not an
    algorithm."""
    from jaxfl.algorithms.common import safe_mean
    from jaxfl.engine.participation import resolve

    sampler = local.make_sampler(sampling_rate=RATE, expected_batch_size=expected_batch_size, microbatch=None)
    noise_key = lambda silo_key: keys_lib.step_key(silo_key, 0, keys_lib.Purpose.NOISE)  # noqa: E731

    def client(sent, x, y, count, silo_key):
        params, first_key, r = sent
        key = jnp.where(r == 0, jax.random.key_data(noise_key(silo_key)), first_key)
        mask = sampler.draw(keys_lib.step_key(silo_key, 0, keys_lib.Purpose.MINIBATCH), count, x.shape[0])
        noise = unit_noise_like(jax.random.wrap_key_data(key), params, NOISE)
        return local.noisy_gradient(linear_loss, params, x, y, count, silo_key, 0, sampler=sampler, clip_norm=CLIP,
                                    noise_multiplier=NOISE, drawn=(mask, noise))

    def server(state, summed, ctx):
        mean = safe_mean(summed, ctx.total_weight)
        first = jax.random.key_data(noise_key(keys_lib.silo_key(ctx.round_key, 0)))
        first = jnp.where(state.round == 0, first, state.first_key)
        return _StaleNoise(jax.tree_util.tree_map(jnp.subtract, state.params, mean), first, state.round + 1), {}

    def init(params):
        blank = jax.random.key_data(keys_lib.as_key(0))
        return _StaleNoise(params, jnp.zeros_like(blank), jnp.zeros([], jnp.int32))

    return FederatedAlgorithm(init, make_round(client, server, resolve(None),
                                               broadcast=lambda s: (s.params, s.first_key, s.round)),
                              name="noise_key_reused")


class Sabotage(NamedTuple):
    """A sabotaged variant held to an honest algorithm's claim: ``build() -> (sabotaged, honest, game)``.

    Example:
      >>> sabotaged, honest, game = SABOTAGES["noise_halved"].build()
      >>> sabotaged.name == honest.name, SABOTAGES["noise_halved"].about
      (True, 'minibatch_sgd with z halved')
    """

    build: Callable[[], tuple]
    accountant: str = "pld"
    rounds: int | None = 1
    about: str = ""
    central: bool = False


SABOTAGES = {
    "noise_halved": Sabotage(lambda: (_minibatch_sgd(True, noise_multiplier=NOISE / 2), _minibatch_sgd(True),
                                      _record_game()), about="minibatch_sgd with z halved"),
    "clipping_off": Sabotage(lambda: (_minibatch_sgd(True, clip_norm=CANARY_SCALE * CLIP,
                                                     noise_multiplier=NOISE / CANARY_SCALE),
                                      _minibatch_sgd(True), _record_game()),
                             about="minibatch_sgd with the clip 100x looser (the same noise std)"),
    "own_size_denominator": Sabotage(lambda: (_minibatch_sgd(False), _minibatch_sgd(True), _record_game()),
                                     about="minibatch_sgd divided by rate * n_i, claimed add/remove-one"),
    "noise_key_reused": Sabotage(lambda: (_noise_key_reused(RATE * (BACKGROUND + 1)), _minibatch_sgd(True),
                                          _record_game()), rounds=2,
                                 about="minibatch_sgd whose noise key is reused across rounds"),
    "central_shares_too_small": Sabotage(lambda: (_personalized_central(4 * OWNERS), _personalized_central(),
                                                  _central_game()), central=True,
                                         about="central placement whose owners add shares for 16 owners (z / 4 "
                                               "each: z / 2 on the aggregate), held to 4 owners' claim"),
    "noisy_minibatch_sgd_clipping_off": Sabotage(
        lambda: (_noisy_minibatch_sgd(clip_norm=CANARY_SCALE * CLIP, noise_multiplier=10.0 / CANARY_SCALE),
                 _noisy_minibatch_sgd(), _record_game(REPLACE_ONE)), "lowy",
        about="noisy MB-SGD (draws with replacement) with the clip 100x looser, the same noise std"),
    "dp_fedavg_noise_halved": Sabotage(lambda: (_dp_fedavg(noise_multiplier=NOISE / 2), _dp_fedavg(), _client_game()),
                                       about="dp_fedavg with z halved"),
    "adaptive_bits_unnoised": Sabotage(lambda: (_adaptive_bits_unnoised(), _dp_fedavg(clip_norm=_ADAPTIVE()),
                                                _client_game()), rounds=2,
                                       about="adaptive clipping whose server reads the clients' bits without noise"),
    "noisy_minibatch_sgd_pld_noise_reduced": Sabotage(
        lambda: (_noisy_minibatch_sgd(noise_multiplier=0.75), _noisy_minibatch_sgd(noise_multiplier=3.0),
                 _record_game(REPLACE_ONE)), "pld",
        about="noisy MB-SGD (draws with replacement) with z 0.75, held to the PLD claim of z 3"),
    "noisy_prox_gd_noise_halved": Sabotage(lambda: (_noisy_prox_gd(noise_multiplier=NOISE / 2), _noisy_prox_gd(),
                                                    _record_game(REPLACE_ONE)),
                                           about="noisy prox-GD with z halved"),
    "fedprox_svrg_clipping_off": Sabotage(
        lambda: (_fedprox_svrg(clip_norm=CANARY_SCALE * CLIP, noise_multiplier=3.0 / CANARY_SCALE),
                 _fedprox_svrg(), _record_game(REPLACE_ONE)),
        about="FedProx-SVRG with the clip 100x looser, the same noise std"),
    "async_sgd_noise_reduced": Sabotage(lambda: (_async_sgd(noise_multiplier=0.25), _async_sgd(), _record_game()),
                                        rounds=None, about="the asynchronous client with z 0.25, held to z 1's claim"),
    "nssgd_noise_reduced": Sabotage(lambda: (_nssgd(noise_multiplier=0.05), _nssgd(), _user_game()), "rdp",
                                    about="A_NSSGD with the mean estimator's z 0.05, held to z 4's claim"),
    "sdp_prox_sgd_noise_off": Sabotage(
        lambda: (_sdp_prox_sgd(shuffle_params=_sdp_prox_sgd_params()._replace(trials=0)), _sdp_prox_sgd(),
                 _record_game(REPLACE_ONE, SDP_DIM)), "shuffle",
        about="SDP prox-SGD with P_vec's noise bits off, held to the calibrated claim"),
    "dp_rec_clipping_loosened": Sabotage(
        lambda: (_dp_rec(clip_multiplier=4.0), _dp_rec(), _client_game(DPREC_DIM)), "dprec",
        about="DP-REC with c = 4, held to c = 0.5's claim"),
}
"""Sabotaged variants and the honest claims they are held to: name -> :class:`Sabotage`."""


def _rounds(spec, algorithm) -> int:
    return spec.rounds if spec.rounds is not None else int(schedule_length(algorithm))


def run_named(name: str, *, runs: int = 20_000, delta: float = DELTA, key=0) -> AuditResult:
    """Runs :data:`AUDITS` ``[name]`` or :data:`SABOTAGES` ``[name]`` (what ``jaxfl audit NAME`` prints).

    Example (fewer runs than the default 20,000: a weaker but faster audit):
      >>> result = run_named("minibatch_sgd", runs=2000)
      >>> result.verdict, round(result.claimed_epsilon, 2)
      ('holds', 0.81)
      >>> run_named("clipping_off", runs=2000).verdict            # caught: a lower bound above the honest claim
      'violated'
    """
    if name in AUDITS:
        spec = AUDITS[name]
        algorithm, game = spec.build()
        return audit(algorithm, game, runs=runs, rounds=_rounds(spec, algorithm), delta=delta,
                     accountant=spec.accountant, key=key, name=name, central=spec.central)
    if name in SABOTAGES:
        spec = SABOTAGES[name]
        sabotaged, honest, game = spec.build()
        return audit(sabotaged, game, runs=runs, rounds=_rounds(spec, honest), delta=delta,
                     accountant=spec.accountant, key=key, claim=honest, name=name, central=spec.central)
    raise ValueError(f"unknown audit {name!r}; known: {', '.join(sorted(AUDITS) + sorted(SABOTAGES))}")
