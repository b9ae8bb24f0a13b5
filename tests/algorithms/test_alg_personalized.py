"""Personalised local heads: a silo's private part depends only on its own data (bitwise), noise touches
only the shared part, per-silo evaluation of personalised models beats a shared model when silos'
label maps differ, and privacy is stated before init."""
from pathlib import Path

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxfl.algorithms import local_sgd, personalized
from jaxfl.algorithms.personalized import partition, shared_labels
from jaxfl.data.federated import FederatedData, from_silos
from jaxfl.engine import initial_state, run_rounds, train
from jaxfl.privacy import keys
from jaxfl.privacy.noise import gaussian_like

REPO = Path(__file__).resolve().parents[2]
SIZES = (40, 25, 33, 40)
LABELS = {"body": "shared", "head": "private"}  # a prefix of the params' structure


def flipped_silos(sizes=SIZES, d=5, seed=0):
    """One linear rule for every silo; the odd silos see the labels flipped."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(d)
    silos = []
    for i, n in enumerate(sizes):
        x = rng.standard_normal((n, d)).astype(np.float32)
        y = (x @ w + 0.2 * rng.standard_normal(n) > 0).astype(np.int32)
        silos.append((x, 1 - y if i % 2 else y))
    return from_silos(silos)


def init_mlp(d=5, h=8, seed=0):
    k1, k2 = jax.random.split(jax.random.key(seed))
    return {"body": {"w": jax.random.normal(k1, (d, h)) / np.sqrt(d), "b": jnp.zeros(h)},
            "head": {"w": jax.random.normal(k2, (h,)) * 0.1, "b": jnp.zeros(())}}


def logit(p, x):
    return jnp.tanh(x @ p["body"]["w"] + p["body"]["b"]) @ p["head"]["w"] + p["head"]["b"]


def loss(p, x, y):
    return optax.sigmoid_binary_cross_entropy(logit(p, x), y.astype(jnp.float32))


def _run(alg, data, rounds, key=0, *more_data):
    """``rounds`` rounds from ``init_mlp()`` on ``data`` (and on each of ``more_data``, same program)."""
    params = init_mlp()  # made outside jit: XLA would fold its division differently
    run = jax.jit(lambda d: run_rounds(alg, initial_state(alg, params, d.num_silos), d, jax.random.key(key), 0, rounds))
    return run(data) if not more_data else [run(d) for d in (data,) + more_data]


def _leaves(tree):
    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]


@pytest.mark.parametrize("private", [False, True], ids=["non_private", "isrl_dp"])
def test_private_part_of_a_silo_ignores_other_silos_data_when_the_shared_part_is_fixed(private):
    data = flipped_silos()
    dp = dict(clip_norm=1.0, noise_multiplier=0.8) if private else {}
    alg = personalized(loss, shared=LABELS, client_opt=optax.sgd(0.3), local_steps=3, sampling_rate=0.5,
                       server_opt=optax.sgd(0.0), **dp)  # the shared part never moves
    k = 2
    rng = np.random.default_rng(7)
    other = FederatedData(data.x.at[k].set(jnp.asarray(rng.standard_normal(data.x.shape[1:]), jnp.float32)),
                          data.y.at[k].set(1 - data.y[k]), data.counts)
    (a, _), (b, _) = _run(alg, data, 4, 0, other)
    for leaf_a, leaf_b, leaf_0 in zip(_leaves(a.params), _leaves(b.params), _leaves(init_mlp())):
        np.testing.assert_array_equal(leaf_a, leaf_0)  # a real fixed shared part (and untouched private leaves)
        np.testing.assert_array_equal(leaf_b, leaf_0)
    assert set(a.silos["body"].values()) == {None}  # silo state holds the private part only
    for leaf_a, leaf_b in zip(_leaves(a.silos), _leaves(b.silos)):
        for j in range(len(SIZES)):
            if j != k:
                np.testing.assert_array_equal(leaf_a[j], leaf_b[j])
        assert not np.array_equal(leaf_a[k], leaf_b[k])  # silo k's own part did see its data
    for leaf_a, leaf_0 in zip(_leaves(a.silos), _leaves(init_mlp()["head"])):
        assert all(not np.array_equal(leaf_a[j], leaf_0) for j in range(len(SIZES)))  # and every part trained


def test_noise_on_shared_touches_only_the_shared_part_and_states_no_privacy():
    """noise_on="shared", one round, one local SGD step: the private part equals the noiseless run's bitwise,
    and the shared model differs from it by exactly -lr * mean_i z C u_i / (q n_i), u_i the unit noise of
    derive(round 0, silo i, step 0, NOISE) shaped like the shared part. No record-level statement holds (the
    private part depends on every record), so none is made."""
    data = flipped_silos()
    lr, z, c, q, root = 0.3, 1.5, 0.7, 0.5, jax.random.key(11)
    kw = dict(shared=LABELS, client_opt=optax.sgd(lr), local_steps=1, sampling_rate=q, clip_norm=c, noise_on="shared")
    noisy = personalized(loss, noise_multiplier=z, **kw)
    clean = personalized(loss, noise_multiplier=0.0, **kw)
    assert noisy.privacy is None and clean.privacy is None
    with pytest.raises(ValueError, match="not private"):
        train(noisy, data, init_mlp(), rounds=1, target_epsilon=1.0, delta=1e-5, progress=False)
    run = lambda alg: jax.jit(lambda s: run_rounds(alg, s, data, root, 0, 1))(  # noqa: E731
        initial_state(alg, init_mlp(), data.num_silos))[0]
    a, b = run(noisy), run(clean)
    for leaf_a, leaf_b in zip(_leaves(a.silos), _leaves(b.silos)):
        np.testing.assert_array_equal(leaf_a, leaf_b)
    shared = partition(init_mlp(), shared_labels(LABELS, init_mlp()), True)
    expected = 0.0
    for i, n in enumerate(SIZES):
        key = keys.step_key(keys.silo_key(keys.round_key(root, 0), i), 0, keys.Purpose.NOISE)
        expected = expected + np.concatenate([np.ravel(u) for u in _leaves(gaussian_like(key, shared, 1.0))]) / (q * n)
    expected = -lr * z * c * expected / len(SIZES)
    diff = np.concatenate([np.ravel(x - y) for x, y in zip(_leaves(a.params["body"]), _leaves(b.params["body"]))])
    np.testing.assert_allclose(diff, expected, rtol=1e-4, atol=1e-5)
    for x, y in zip(_leaves(a.params["head"]), _leaves(b.params["head"])):
        np.testing.assert_array_equal(x, y)  # the server's copy of the private leaves never moves


def test_noise_on_all_is_dp_sgd_on_the_whole_model():
    """noise_on="all" (the default), one round, one local step: the shared model equals DP Local SGD's on the
    whole model (joint per-example clipping, noise on every leaf from the same keys), whose heads start equal,
    and each silo keeps its own noisy head; the statement is each step's sampled Gaussian."""
    data = flipped_silos()
    kw = dict(client_opt=optax.sgd(0.3), local_steps=1, sampling_rate=0.5, clip_norm=0.7, noise_multiplier=1.5)
    personal = personalized(loss, shared=LABELS, **kw)
    whole = local_sgd(loss, **kw)
    root = jax.random.key(5)
    a = jax.jit(lambda s: run_rounds(personal, s, data, root, 0, 1))(initial_state(personal, init_mlp(), data.num_silos))[0]
    b = jax.jit(lambda s: run_rounds(whole, s, data, root, 0, 1))(whole.init(init_mlp()))[0]
    for x, y in zip(_leaves(a.params["body"]), _leaves(b.params["body"])):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.mean(np.asarray(a.silos["head"]["w"]), axis=0), b.params["head"]["w"], rtol=1e-5,
                               atol=1e-6)  # local SGD averages the heads that personalized keeps apart
    assert personal.privacy(np.asarray(data.counts)) == whole.privacy(np.asarray(data.counts))


def test_personalised_models_beat_the_shared_model_on_flipped_label_maps():
    data = flipped_silos()
    real = np.arange(data.max_records)[None, :] < np.asarray(data.counts)[:, None]

    def silo_eval(params, silo):  # accuracy of the silo's own model on the silo's own records
        correct = (logit(params, data.x[silo]) > 0) == (data.y[silo] == 1)
        return {"acc": jnp.sum(jnp.asarray(real)[silo] * correct) / data.counts[silo]}

    kw = dict(client_opt=optax.sgd(0.5), local_steps=5, sampling_rate=0.5)
    algs = {"personal": personalized(loss, shared=lambda path, leaf: path[0].key == "body", **kw),
            "shared": local_sgd(loss, **kw)}
    acc = {}
    for name, alg in algs.items():
        result = train(alg, data, init_mlp(), rounds=30, key=0, eval_every=15, progress=False, silo_eval_fn=silo_eval)
        acc[name] = np.asarray(result.history[-1]["silos"]["acc"])
        assert acc[name].shape == (len(SIZES),)
    assert np.all(acc["personal"] >= 0.9), acc
    assert np.mean(acc["personal"]) > np.mean(acc["shared"]) + 0.2, acc


def test_silo_params_merge_the_shared_model_with_each_private_part():
    data = flipped_silos()
    alg = personalized(loss, shared=LABELS, client_opt=optax.sgd(0.5), local_steps=2)
    state, _ = _run(alg, data, 2)
    models = alg.silo_params(state)
    assert models["body"]["w"].shape == (len(SIZES), 5, 8) and models["head"]["w"].shape == (len(SIZES), 8)
    for j in range(len(SIZES)):
        np.testing.assert_array_equal(models["body"]["w"][j], state.params["body"]["w"])
        np.testing.assert_array_equal(models["head"]["b"][j], state.silos["head"]["b"][j])
    # label tree (prefix), full label tree and predicate give the same algorithm
    full = jax.tree_util.tree_map_with_path(lambda path, _: "shared" if path[0].key == "body" else "private", init_mlp())
    for spec in (full, lambda path, leaf: path[0].key == "body"):
        other, _ = _run(personalized(loss, shared=spec, client_opt=optax.sgd(0.5), local_steps=2), data, 2)
        for x, y in zip(_leaves(other), _leaves(state)):
            np.testing.assert_array_equal(x, y)


def test_privacy_is_stated_before_init_and_bad_splits_are_refused():
    z = np.array([1.0, 2.0, 1.5])
    alg = personalized(loss, shared=LABELS, client_opt=optax.sgd(0.1), local_steps=4, sampling_rate=0.2,
                       clip_norm=1.0, noise_multiplier=z)
    privacy = alg.privacy(np.array([40, 25, 33]))  # nothing has been initialised
    assert len(privacy.events) == 3 and privacy.level == "record"
    for event, zi in zip(privacy.events, z):
        assert isinstance(event, dp_accounting.SelfComposedDpEvent) and event.count == 4
        assert event.event == dp_accounting.PoissonSampledDpEvent(0.2, dp_accounting.GaussianDpEvent(zi))
    assert alg.name == "dp_personalized"
    assert personalized(loss, shared=LABELS, client_opt=optax.sgd(0.1), local_steps=1).privacy is None
    with pytest.raises(ValueError, match="finite clip_norm"):
        personalized(loss, shared=LABELS, client_opt=optax.sgd(0.1), local_steps=1, noise_multiplier=1.0)
    with pytest.raises(ValueError, match="noise_on"):
        personalized(loss, shared=LABELS, client_opt=optax.sgd(0.1), local_steps=1, noise_on="private")
    for bad, err in [({"body": "shared", "head": "shared"}, ValueError), ({"body": "shared", "head": "mine"}, ValueError),
                     (lambda path, leaf: jnp.ndim(leaf) > 1 and jnp.sum(leaf) > 0, TypeError)]:
        with pytest.raises(err):
            personalized(loss, shared=bad, client_opt=optax.sgd(0.1), local_steps=1).init(init_mlp())
