"""Empirical privacy auditing: a black-box canary game on an algorithm's own rounds.

An auditor who claims nothing about the code builds two neighbouring federated datasets under the relation an
algorithm states (:class:`CanaryGame`: one with a canary record or client, one without it, or with the canary
replaced), runs the algorithm's compiled rounds many times on each with fresh keys, and looks only at what a
round releases (the change of the shared model). Several test statistics of that release (:data:`STATISTICS`:
its projection on the canary's direction, its norm, the gap between two rounds' releases) are scored; for each,
a threshold is chosen on held-out runs and the rates of the test on the other runs give, with Clopper-Pearson
bounds, a lower bound on epsilon (Kairouz et al. 2015's hypothesis-testing view of (epsilon, delta)-DP;
Jagielski et al. 2020; Nasr et al. 2021, 2023). The scores and bounds are jax-privacy's
``auditing.CanaryScoreAuditor``; jaxfl's part is running a federated round as the auditor's black box.

A lower bound above the epsilon the algorithm's own accountant claims for the same rounds is a proof (at the
stated confidence) that the claim is false. A lower bound below it proves nothing, unless the same game catches
a sabotaged variant (:data:`SABOTAGES`): noise halved, clipping off, a data-dependent denominator under
add/remove-one, a noise key reused across rounds. ``jaxfl audit NAME`` runs the named audits of
:data:`AUDITS` (:mod:`jaxfl.audit.catalogue`: one per DP mechanism jaxfl states); the tests run every one of
them and every sabotage.

The canary's gradient is a known direction: the game's loss is ``-<w, x>`` (per-record gradient ``-x``), the
background records are zero (they contribute nothing) and the canary is ``x = 100 C e_0``, clipped to
``C e_0``; every other record of a silo makes the release noisier and the audit weaker, so this is the
auditor's best dataset for the round, as in the worst case of the privacy definition.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np

from jaxfl import checks
from jaxfl.accounting.events import as_relation
from jaxfl.data.federated import FederatedData
from jaxfl.engine.driver import make_ledger
from jaxfl.engine.protocol import FederatedAlgorithm, initial_state, schedule_length
from jaxfl.privacy import keys as keys_lib

ADD_OR_REMOVE_ONE = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
REPLACE_ONE = dp_accounting.NeighboringRelation.REPLACE_ONE
CANARY_SCALE = 100.0
"""The canary's norm over the clip bound: far outside it, so clipping (or its absence) decides its effect."""
STATISTICS = ("canary", "norm", "gap")
"""The test statistics of a transcript ``releases [rounds, d]``: ``canary``, the sum over rounds of the release's
projection on the canary's direction; ``norm``, the squared norm of the whole transcript (it reveals a release
scaled by a data-dependent count); ``gap``, the smallest distance between two rounds' releases (0 when two rounds
share their noise; only with ``rounds >= 2``)."""


def linear_loss(params, x, y):
    """``-<w, x>``: a per-record loss whose gradient is ``-x`` wherever the model is (the canary game's loss).

    Example:
      >>> import jax, jax.numpy as jnp
      >>> jax.grad(linear_loss)({"w": jnp.zeros(3)}, jnp.array([1.0, 2.0, 3.0]), 0.0)["w"].tolist()
      [-1.0, -2.0, -3.0]
    """
    del y
    return -jnp.vdot(params["w"], x)


class CanaryGame(NamedTuple):
    """Two neighbouring datasets and what the auditor knows of them.

    Attributes:
      inside: the dataset with the canary (record or client).
      outside: its neighbour without it (add/remove-one) or with the canary replaced by its opposite
        (replace-one: the contribution ``+C`` becomes ``-C``, the largest change the relation allows).
      params: the model both runs start from (``{"w": float32[d]}``).
      direction: the unit vector along which the canary moves the model: a pytree like ``params``, ``e_0`` in
        ``w`` and zeros elsewhere.
      relation: the neighbouring relation the two datasets are neighbours under.
      level: ``"record"`` (the canary is one record of silo 0) or ``"client"`` (the canary is silo 0).

    Example: :func:`canary_game`.
    """

    inside: FederatedData
    outside: FederatedData
    params: Any
    direction: Any
    relation: dp_accounting.NeighboringRelation
    level: str

    def with_parameters(self, **extra) -> "CanaryGame":
        """The same game for a model with more parameters beside ``w`` (e.g. a private head), which the game's loss
        leaves alone: ``extra`` maps names to initial arrays."""
        params = {**self.params, **{k: jnp.asarray(v) for k, v in extra.items()}}
        direction = {**self.direction, **{k: jnp.zeros_like(jnp.asarray(v)) for k, v in extra.items()}}
        return self._replace(params=params, direction=direction)


def canary_game(*, level: str = "record", relation=ADD_OR_REMOVE_ONE, dim: int = 1024, background: int = 4,
                clip_norm: float = 1.0, silos: int = 1) -> CanaryGame:
    """The auditor's dataset pair for one silo's records (``level="record"``: silo 0 holds ``background`` zero
    records and the canary, and each of the other ``silos - 1`` silos ``background`` zero records: the setting
    of a central statement over all silos' records) or for clients (``level="client"``: ``background`` clients
    of zero records and a canary client of one canary record), in ``dim`` dimensions.

    Removing the canary leaves its row as padding (``count`` one less, or the canary client with ``count = 0``),
    so both datasets have the same shapes and one compiled program serves both.

    Example:
      >>> game = canary_game(dim=8)                           # one silo: four zero records, then the canary
      >>> game.inside.counts.tolist(), game.outside.counts.tolist(), float(game.inside.x[0, 4, 0])
      ([5], [4], 100.0)
      >>> canary_game(level="client", dim=8).inside.counts.tolist()       # five clients of one record
      [1, 1, 1, 1, 1]
      >>> canary_game(relation="replace_one", dim=8).outside.counts.tolist()   # the canary flipped, not removed
      [5]
    """
    checks.one_of("level", level, ("record", "client"))
    relation = as_relation(relation)
    if relation not in (ADD_OR_REMOVE_ONE, REPLACE_ONE):
        raise ValueError(f"relation must be add_or_remove_one or replace_one, got {relation.name.lower()}")
    dim, background = checks.positive_int("dim", dim), checks.positive_int("background", background)
    silos = checks.positive_int("silos", silos)
    if silos > 1 and level != "record":
        raise ValueError(f"silos={silos} adds silos of background records to a record-level game, not {level!r}")
    canary = np.zeros(dim, np.float32)
    canary[0] = CANARY_SCALE * float(clip_norm)
    direction = {"w": jnp.asarray(np.eye(dim, dtype=np.float32)[0])}
    if level == "record":
        x = np.zeros((silos, background + 1, dim), np.float32)
        x[0, background] = canary
        inside_counts = np.array([background + 1] + [background] * (silos - 1))
    else:
        x = np.zeros((background + 1, 1, dim), np.float32)
        x[background, 0] = canary
        inside_counts = np.ones(background + 1, np.int32)
    y = np.zeros(x.shape[:2], np.float32)
    inside = FederatedData(jnp.asarray(x), jnp.asarray(y), jnp.asarray(inside_counts, jnp.int32))
    if relation is REPLACE_ONE:
        flipped = x.copy()
        flipped[(0, background) if level == "record" else (background, 0)] = -canary
        outside = FederatedData(jnp.asarray(flipped), inside.y, inside.counts)
    else:
        counts = inside_counts.copy()
        counts[0 if level == "record" else background] -= 1
        outside = FederatedData(inside.x, inside.y, jnp.asarray(counts, jnp.int32))
    return CanaryGame(inside, outside, {"w": jnp.zeros(dim, jnp.float32)}, direction, relation, level)


# ------------------------------------------------------------------------------------------------
# Running the rounds


def releases(algorithm: FederatedAlgorithm, data: FederatedData, params, *, runs: int, rounds: int = 1, key=0,
             batch: int = 2048) -> np.ndarray:
    """``float32[runs, rounds, d]``: what each of ``rounds`` rounds releases (the change of the flattened shared
    model), for ``runs`` independent runs from ``params``, run ``r`` with the root key ``fold_in(key, r)``.
    The rounds are the algorithm's own, compiled once and vmapped over ``batch`` runs at a time.

    Example (plain full-batch gradient descent on the game: every run releases the clipped canary's step):
      >>> import optax
      >>> from jaxfl.algorithms import minibatch_sgd
      >>> game = canary_game(dim=8)
      >>> gd = minibatch_sgd(linear_loss, server_opt=optax.sgd(1.0), sampling_rate=1.0, clip_norm=1.0)
      >>> out = releases(gd, game.inside, game.params, runs=3, rounds=2)
      >>> out.shape, [round(float(v), 3) for v in out[0, :, 0]]        # mean of the 5 clipped gradients: 1/5
      ((3, 2, 8), [0.2, 0.2])
    """
    runs, rounds = checks.positive_int("runs", runs), checks.positive_int("rounds", rounds)
    length = schedule_length(algorithm)
    if length is not None and length < rounds:
        raise ValueError(f"rounds={rounds} but the algorithm's schedule covers {length} rounds")
    root = keys_lib.as_key(key)

    def one(run):
        run_key = keys_lib.fold_in(root, run)

        def round_(state, xs):
            r, inputs = xs
            before = flat(state.params)
            round_key = keys_lib.round_key(run_key, r)
            args = () if algorithm.schedule is None else (inputs,)
            state, _ = algorithm.round(state, data, round_key, *args)
            return state, flat(state.params) - before

        inputs = None if algorithm.schedule is None else jax.tree_util.tree_map(
            lambda leaf: jnp.asarray(leaf)[:rounds], algorithm.schedule)
        state = initial_state(algorithm, params, data.num_silos)
        return jax.lax.scan(round_, state, (jnp.arange(rounds), inputs))[1]

    program = jax.jit(jax.vmap(one))
    parts = [np.asarray(program(jnp.arange(start, min(start + batch, runs))))
             for start in range(0, runs, batch)]
    return np.concatenate(parts)


def flat(tree) -> jax.Array:
    """A pytree's leaves raveled and concatenated in ``tree_leaves`` order (the coordinates of a release).

    Example:
      >>> import jax.numpy as jnp
      >>> flat({"b": jnp.array([3.0]), "a": jnp.ones((2, 1))}).tolist()      # keys in sorted order: a, then b
      [1.0, 1.0, 3.0]
    """
    return jnp.concatenate([jnp.ravel(a) for a in jax.tree_util.tree_leaves(tree)])


def scores(transcripts: np.ndarray, direction) -> dict:
    """The :data:`STATISTICS` of each transcript (``[runs, rounds, d]`` -> ``{name: float64[runs]}``);
    ``direction``: the canary's, a pytree like the model (or its flat vector).

    Example:
      >>> import numpy as np
      >>> transcripts = np.array([[[1.0, 0.0], [1.0, 0.0]], [[0.0, 2.0], [0.0, 1.0]]])   # 2 runs, 2 rounds, d = 2
      >>> {name: values.tolist() for name, values in scores(transcripts, np.array([1.0, 0.0])).items()}
      {'canary': [2.0, 0.0], 'norm': [2.0, 5.0], 'gap': [0.0, 1.0]}
    """
    t = np.asarray(transcripts, np.float64)
    direction = np.asarray(flat(direction), np.float64)
    out = {"canary": np.einsum("nrd,d->n", t, direction),
           "norm": np.einsum("nrd,nrd->n", t, t)}
    if t.shape[1] >= 2:
        gaps = [np.linalg.norm(t[:, i] - t[:, j], axis=-1) for i in range(t.shape[1]) for j in range(i)]
        out["gap"] = np.min(np.stack(gaps), axis=0)
    return out


# ------------------------------------------------------------------------------------------------
# The audit


@dataclasses.dataclass(frozen=True)
class AuditResult:
    """What an audit found.

    Attributes:
      name: the audit's label.
      claimed_epsilon: what the algorithm's own ledger certifies for the audited rounds (``inf`` when it states
        no privacy).
      delta: the delta both epsilons are for.
      epsilon_lower_bound: the largest of the statistics' lower bounds (each statistic's two rules at
        confidence ``1 - significance / (2 * number of statistics)``, so the maximum holds at ``1 - significance``).
      lower_bounds: ``{statistic: lower bound}``.
      statistic: the statistic that gave ``epsilon_lower_bound``.
      relation: the neighbouring relation of the claim and of the game (lower-case name).
      runs, rounds: runs per dataset, rounds per run.

    Example: :func:`audit`.
    """

    name: str
    claimed_epsilon: float
    delta: float
    epsilon_lower_bound: float
    lower_bounds: dict
    statistic: str
    relation: str
    runs: int
    rounds: int

    @property
    def verdict(self) -> str:
        """``"violated"`` when the lower bound exceeds the claim, else ``"holds"`` (not refuted)."""
        return "violated" if self.epsilon_lower_bound > self.claimed_epsilon else "holds"

    def as_dict(self) -> dict:
        """The fields and the verdict, as ``jaxfl audit --json`` prints them."""
        return {**dataclasses.asdict(self), "verdict": self.verdict}


def claimed_epsilon(algorithm: FederatedAlgorithm, game: CanaryGame, *, rounds: int, delta: float,
                    accountant: str = "rdp", central: bool = False) -> float:
    """The epsilon the algorithm's ledger certifies for ``rounds`` rounds on the game's larger dataset, for the
    canary's silo (record level) or for any client (client level); ``inf`` for an algorithm that states no
    privacy. ``central``: the algorithm's central statement (``RoundPrivacy.central``: the aggregate over the
    game's silos). Refuses a statement made for another relation than the game's.

    Example (one round of Poisson-sampled DP-SGD, rate 0.3, noise multiplier 1.5, by the PLD accountant):
      >>> import optax
      >>> from jaxfl.algorithms import minibatch_sgd
      >>> dp = minibatch_sgd(linear_loss, server_opt=optax.sgd(1.0), sampling_rate=0.3, clip_norm=1.0,
      ...                    noise_multiplier=1.5, expected_batch_size=1.5)
      >>> round(claimed_epsilon(dp, canary_game(dim=8), rounds=1, delta=1e-3, accountant="pld"), 2)
      0.81
      >>> claimed_epsilon(dp, canary_game(relation="replace_one", dim=8), rounds=1, delta=1e-3)
      Traceback (most recent call last):
      ...
      ValueError: the algorithm states add_or_remove_one privacy; audit it with a canary game of that relation, ...
    """
    ledger = make_ledger(algorithm, np.asarray(game.inside.counts), accountant, central=central)
    if ledger is None:
        return math.inf
    if ledger.neighboring_relation is not None and ledger.neighboring_relation is not game.relation:
        raise ValueError(f"the algorithm states {ledger.neighboring_relation.name.lower()} privacy; audit it with a "
                         f"canary game of that relation, not {game.relation.name.lower()}")
    ledger.record(rounds)
    if game.level == "client" or central:
        return float(ledger.epsilon(delta))
    return float(ledger.epsilons(delta)[0])


def lower_bound(inside: dict, outside: dict, *, delta: float, significance: float = 0.05, seed: int = 0) -> dict:
    """``{statistic: epsilon lower bound}`` from the scores of the runs with and without the canary.

    A statistic may be larger or smaller with the canary (a release divided by a larger count has a smaller
    norm), so both rules, "in when above the threshold" and "in when below", are tried. For each, the threshold
    is chosen on a random half of the runs and the two-sided Clopper-Pearson bound computed on the other half
    (jax-privacy's ``CanaryScoreAuditor.epsilon_clopper_pearson`` with ``Split``), at confidence
    ``1 - significance / (2 * number of statistics)``, so every bound returned holds at once with probability
    at least ``1 - significance``.

    Example (scores that separate perfectly give a large bound; identical ones give none):
      >>> import numpy as np
      >>> inside, outside = {"canary": np.full(2000, 1.0)}, {"canary": np.full(2000, -1.0)}
      >>> lower_bound(inside, outside, delta=1e-5)["canary"] > 5
      True
      >>> lower_bound(inside, inside, delta=1e-5)["canary"]
      0.0
    """
    from jax_privacy import auditing

    per = significance / (2 * len(inside))

    def bound(a, b):
        return float(auditing.CanaryScoreAuditor(a, b).epsilon_clopper_pearson(
            per, delta, one_sided=False, threshold_strategy=auditing.Split(seed=seed)))

    return {name: max(bound(inside[name], outside[name]), bound(-inside[name], -outside[name])) for name in inside}


def audit(algorithm: FederatedAlgorithm, game: CanaryGame, *, runs: int = 20_000, rounds: int = 1,
          delta: float = 1e-5, accountant: str = "rdp", significance: float = 0.05, key=0, claim=None,
          name: str | None = None, central: bool = False) -> AuditResult:
    """Audits ``algorithm`` on ``game``: ``runs`` runs of ``rounds`` rounds on each dataset (the same keys on
    both), the :data:`STATISTICS` of their releases, and the lower bound of :func:`lower_bound` against the
    epsilon the algorithm's ledger claims (:func:`claimed_epsilon`, its central statement with ``central``;
    ``claim``: another algorithm's statement to hold this one to, e.g. the honest algorithm's for a sabotaged
    variant).

    Example (the honest mechanism holds; with a fifth of its noise it is caught against the honest claim):
      >>> import optax
      >>> from jaxfl.algorithms import minibatch_sgd
      >>> def dp(z):
      ...     return minibatch_sgd(linear_loss, server_opt=optax.sgd(1.0), sampling_rate=0.3, clip_norm=1.0,
      ...                          noise_multiplier=z, expected_batch_size=1.5)
      >>> game = canary_game(dim=8)
      >>> honest = audit(dp(1.5), game, runs=2000, delta=1e-3, accountant="pld")
      >>> honest.verdict, round(honest.claimed_epsilon, 2)
      ('holds', 0.81)
      >>> audit(dp(0.3), game, runs=2000, delta=1e-3, accountant="pld", claim=dp(1.5)).verdict
      'violated'
    """
    checks.delta("delta", delta)
    claimed = claimed_epsilon(algorithm if claim is None else claim, game, rounds=rounds, delta=delta,
                              accountant=accountant, central=central)
    inside = scores(releases(algorithm, game.inside, game.params, runs=runs, rounds=rounds, key=key), game.direction)
    outside = scores(releases(algorithm, game.outside, game.params, runs=runs, rounds=rounds, key=key),
                     game.direction)
    bounds = lower_bound(inside, outside, delta=delta, significance=significance)
    best = max(bounds, key=bounds.get)
    return AuditResult(name or algorithm.name, claimed, float(delta), bounds[best], bounds, best,
                       game.relation.name.lower(), int(runs), int(rounds))


from jaxfl.audit.catalogue import AUDITS, DELTA, SABOTAGES, Audit, Sabotage, run_named  # noqa: E402,F401
