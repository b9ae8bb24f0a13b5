"""Key hygiene: every key a round draws private randomness from is used once.

The harness wraps every sampler jaxfl draws private randomness with (its own threefry samplers for noise, records
and participation, and ``jax.random``'s), records each key it is handed from inside the compiled rounds (a host
callback, so under ``jit``, ``vmap`` over silos and ``lax.scan`` over steps alike) and asserts that no key is
handed out twice across rounds, silos, steps and purposes -- for every algorithm of the privacy-statement catalogue.
Excluded by design: the DP-REC codebook's rows (``normal_row`` / ``normal_pairs``), shared randomness that the
client and the server both regenerate from one key. A sabotaged round (one noise key for every silo) is caught."""
import collections
import functools
import sys

import jax
import numpy as np
import pytest
from _helpers import make_silos

from jaxfl.data.federated import from_silos
from jaxfl.engine import driver
from jaxfl.privacy import noise as noise_mod, normal as normal_mod, uniform as uniform_mod

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[1] / "algorithms"))
from test_alg_privacy_statements import ALGORITHMS, PARAMS  # noqa: E402  (the catalogue of every algorithm)

SAMPLERS = [(jax.random, name) for name in ("normal", "uniform", "bernoulli", "randint", "choice", "permutation",
                                             "gumbel", "categorical", "truncated_normal", "bits", "split")]
SAMPLERS += [(uniform_mod, "uniform"), (uniform_mod, "bernoulli"), (uniform_mod, "randint"),
             (normal_mod, "standard_normal"), (noise_mod, "standard_normal")]


def _words(key):
    return jax.random.key_data(key) if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) else key


class KeyLog:
    """The keys handed to the wrapped samplers, as ``{key bytes: [sampler, ...]}``."""

    def __init__(self):
        self.uses = collections.defaultdict(list)

    def record(self, name, words):
        words = np.asarray(words).reshape(-1, 2)  # a batch of keys when the sampler ran under vmap
        for row in words:
            self.uses[row.tobytes()].append(name)

    def reused(self, replays=()):
        """Keys handed out more than once, except a draw replayed at one of the ``replays`` sites (the same
        draw regenerated in a later round, by design) and nowhere else."""
        return {k: v for k, v in self.uses.items()
                if len(v) > 1 and not (len(set(v)) == 1 and v[0].split(" at ")[1] in replays)}


@pytest.fixture
def key_log(monkeypatch):
    log = KeyLog()
    depth = [0]  # trace-time nesting: a sampler built on another (bernoulli on uniform) is one use of its key
    for module, name in SAMPLERS:
        original = getattr(module, name)

        def wrapped(key, *args, _original=original, _name=f"{module.__name__}.{name}", **kwargs):
            if depth[0] == 0:
                caller = sys._getframe(1)
                site = f"{caller.f_code.co_filename.split('jaxfl/')[-1]}:{caller.f_code.co_name}"
                jax.debug.callback(functools.partial(log.record, f"{_name} at {site}"), _words(key))
            depth[0] += 1
            try:
                return _original(key, *args, **kwargs)
            finally:
                depth[0] -= 1

        monkeypatch.setattr(module, name, wrapped)
    jax.clear_caches()  # nothing compiled before the wrap may run without it
    yield log
    jax.clear_caches()


DATA = from_silos(make_silos([40, 40, 24, 40], features=5, seed=3))

#: Draws that are regenerated from one key in later rounds by design, by the algorithms that do so.
ONE_PASS_ORDER = "algorithms/accelerated.py:one_pass_batch"   # one random order per silo for the whole run
EPOCH_PARTICIPANTS = "engine/participation.py:draw"            # SVRG: the same silos for a whole epoch
REPLAYS = {"isrl accelerated one_pass": {ONE_PASS_ORDER}, "isrl sdp accelerated": {ONE_PASS_ORDER},
           "isrl sdp accelerated template": {ONE_PASS_ORDER}, "nc prox_sgd one_pass": {ONE_PASS_ORDER},
           "nc sdp prox_sgd": {ONE_PASS_ORDER}, "nc svrg": {EPOCH_PARTICIPANTS}, "nc sdp svrg": {EPOCH_PARTICIPANTS}}


def _run(build, rounds=2):
    driver.train(build(), DATA, PARAMS, rounds=rounds, key=7, progress=False)
    jax.effects_barrier()


#: Run in the fast tier (Poisson records, client sampling, the codec, draws with replacement, phases); the rest,
#: shufflers and replayed draws among them, in the slow tier.
FAST = {"minibatch_sgd poisson", "dp_fedavg", "dp_rec", "isrl noisy_minibatch_sgd", "nc spider draws"}


#: Catalogue entries that run the same rounds as another one (a template of params, a constant denominator).
SAME_ROUNDS = {"dp_rec template", "isrl sdp accelerated template", "minibatch_sgd full fixed"}
CASES = [a for a in ALGORITHMS if a[0] not in SAME_ROUNDS]


@pytest.mark.parametrize("name, build", [pytest.param(a[0], a[1], marks=() if a[0] in FAST else pytest.mark.slow)
                                         for a in CASES], ids=[a[0] for a in CASES])
def test_no_key_is_used_twice(name, build, key_log):
    _run(build)
    assert key_log.uses, f"{name}: no private randomness recorded (is a sampler missing from the harness?)"
    reused = key_log.reused(REPLAYS.get(name, ()))
    assert not reused, f"{name}: {len(reused)} keys used more than once, e.g. {next(iter(reused.values()))}"


def test_a_key_shared_by_every_silo_is_caught(key_log, monkeypatch):
    """Sabotage: the silo id left out of the key derivation, so every silo draws the same noise and records."""
    from jaxfl.privacy import keys

    monkeypatch.setattr(keys, "silo_key", lambda round_key, silo: round_key)
    name, build = ALGORITHMS[0][:2]
    _run(build, rounds=1)
    reused = key_log.reused()
    assert reused and all(len(uses) == 4 for uses in reused.values()), reused   # 4 silos, one key each draw
