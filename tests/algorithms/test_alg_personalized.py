"""Personalised local heads: a silo's private part depends only on its own data (bitwise), noise touches
only the shared part, per-silo evaluation of personalised models beats a shared model when silos'
label maps differ, and privacy is stated before init."""
import math
from pathlib import Path

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxfl.algorithms import local_sgd, minibatch_sgd, personalized
from jaxfl.algorithms.personalized import partition, shared_labels
from jaxfl.data.federated import FederatedData, from_silos
from jaxfl.engine import initial_state, make_ledger, run_rounds, train
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
    a = jax.jit(lambda s: run_rounds(personal, s, data, root, 0, 1))(initial_state(personal, init_mlp(),
                                                                                   data.num_silos))[0]
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
    full = jax.tree_util.tree_map_with_path(lambda path, _: "shared" if path[0].key == "body" else "private",
                                            init_mlp())
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
    with pytest.raises(ValueError, match="shared_gradient_at"):
        personalized(loss, shared=LABELS, client_opt=optax.sgd(0.1), local_steps=1, shared_gradient_at="server")
    with pytest.raises(ValueError, match="'shared' and 'private'"):
        personalized(loss, shared=LABELS, client_opt={"shared": optax.sgd(0.1)}, local_steps=1)
    with pytest.raises(ValueError, match="adds no noise"):
        personalized(loss, shared={"body": "private", "head": "private"}, client_opt=optax.sgd(0.1), local_steps=1,
                     clip_norm=1.0, noise_multiplier=1.0, noise_on="shared").init(init_mlp())
    for bad, err in [({"body": "shared", "head": "mine"}, ValueError),
                     (lambda path, leaf: jnp.ndim(leaf) > 1 and jnp.sum(leaf) > 0, TypeError)]:
        with pytest.raises(err):
            personalized(loss, shared=bad, client_opt=optax.sgd(0.1), local_steps=1).init(init_mlp())


ALL_SHARED = {"body": "shared", "head": "shared"}
ALL_PRIVATE = {"body": "private", "head": "private"}


def test_everything_private_is_per_silo_training():
    """Every leaf private (Huang et al.'s per-silo regime): silo 0's model in a federation of four equals silo 0
    trained alone (same records, same padding, same keys) to float rounding (bitwise under JAX 0.10's XLA:CPU;
    JAX 0.12's rounds the two programs' shapes apart in the last bits), and the server's model never moves."""
    data = flipped_silos()
    alg = personalized(loss, shared=ALL_PRIVATE, client_opt=optax.sgd(0.3), local_steps=3, sampling_rate=0.5)
    alone = FederatedData(data.x[:1], data.y[:1], data.counts[:1])
    (fed, _), (solo, _) = _run(alg, data, 3, 0, alone)
    assert alg.privacy is None
    for a, b, p0 in zip(_leaves(fed.silos), _leaves(solo.silos), _leaves(init_mlp())):
        np.testing.assert_allclose(a[0], b[0], rtol=1e-5, atol=1e-7)
        assert not np.allclose(a[0], p0)
    for a, p0 in zip(_leaves(fed.params), _leaves(init_mlp())):
        np.testing.assert_array_equal(a, p0)


@pytest.mark.slow  # ~7 s: second tier
def test_nothing_private_is_full_dp_whichever_part_is_noised():
    """Every leaf shared: noise_on="shared" is noise_on="all" (bitwise), both are DP Local SGD on the whole
    model, and every silo evaluates the shared model (silo_params gives None)."""
    data = flipped_silos()
    kw = dict(shared=ALL_SHARED, client_opt=optax.sgd(0.3), local_steps=2, sampling_rate=0.5, clip_norm=0.7,
              noise_multiplier=1.5)
    a, _ = _run(personalized(loss, noise_on="shared", **kw), data, 2)
    b, _ = _run(personalized(loss, noise_on="all", **kw), data, 2)
    whole = local_sgd(loss, **{k: v for k, v in kw.items() if k != "shared"})
    c, _ = _run(whole, data, 2)
    for x, y, w in zip(_leaves(a.params), _leaves(b.params), _leaves(c.params)):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_allclose(x, w, rtol=1e-5, atol=1e-6)
    assert personalized(loss, noise_on="shared", **kw).silo_params(a) is None


@pytest.mark.parametrize("at", [pytest.param("current", marks=pytest.mark.slow), "initial"])
def test_shared_clipping_bound_excludes_the_private_part(at):
    """noise_on="shared", full batches, one local step, no noise: the shared delta is exactly -lr times the mean
    of the per-example shared gradients, each clipped to C on its own (the private part's gradient takes no part
    in the norm), with the private part at the silo's own value ("current") or its initial one ("initial")."""
    data = flipped_silos()
    lr, c = 0.3, 0.05
    alg = personalized(loss, shared=LABELS, client_opt=optax.sgd(lr), local_steps=1, clip_norm=c,
                       noise_multiplier=0.0, noise_on="shared", shared_gradient_at=at)
    state, _ = _run(alg, data, 1)
    p0 = init_mlp()
    deltas = []
    for i, n in enumerate(SIZES):
        grads = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(p0, data.x[i, :n], data.y[i, :n])["body"]
        flat = np.concatenate([np.asarray(g).reshape(n, -1) for g in jax.tree_util.tree_leaves(grads)], axis=1)
        norms = np.linalg.norm(flat, axis=1)
        assert np.all(norms > c)  # every shared gradient is clipped
        deltas.append(np.mean(flat * (c / norms)[:, None], axis=0))
    expected = -lr * np.mean(deltas, axis=0)
    got = np.concatenate([np.ravel(a - b) for a, b in zip(_leaves(state.params["body"]), _leaves(p0["body"]))])
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-7)
    assert np.linalg.norm(got) <= lr * c * (1 + 1e-5)


@pytest.mark.slow  # ~8 s: second tier
def test_joint_dp_at_the_initial_private_part_is_dp_sgd_on_the_shared_part_and_is_stated():
    """shared_gradient_at="initial": the shared model equals DP Local SGD on the shared leaves alone with the
    private leaves frozen at their initial values (same keys, same noise), whatever the private parts learn;
    the private parts never receive noise (one local step, fixed server: bitwise the noiseless run's); the
    statement is each step's sampled Gaussian, as DP-SGD's."""
    data = flipped_silos()
    p0 = init_mlp()
    kw = dict(client_opt=optax.sgd(0.3), local_steps=2, sampling_rate=0.5, clip_norm=0.7, noise_multiplier=1.5)
    joint = personalized(loss, shared=LABELS, noise_on="shared", shared_gradient_at="initial", **kw)
    frozen = local_sgd(lambda body, x, y: loss({"body": body, "head": p0["head"]}, x, y), **kw)
    root = jax.random.key(3)
    a = jax.jit(lambda s: run_rounds(joint, s, data, root, 0, 3))(initial_state(joint, p0, data.num_silos))[0]
    b = jax.jit(lambda s: run_rounds(frozen, s, data, root, 0, 3))(frozen.init(p0["body"]))[0]
    for x, y in zip(_leaves(a.params["body"]), _leaves(b.params)):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    assert all(not np.array_equal(s[j], h) for s, h in zip(_leaves(a.silos), _leaves(p0["head"])) for j in range(4))
    counts = np.asarray(data.counts)
    assert joint.privacy(counts) == frozen.privacy(counts) and joint.name == "dp_personalized"
    one = dict(kw, local_steps=1)
    noisy, clean = (personalized(loss, shared=LABELS, noise_on="shared", shared_gradient_at="initial",
                                 server_opt=optax.sgd(0.0), **dict(one, noise_multiplier=z)) for z in (1.5, 0.0))
    (u, _), (v, _) = _run(noisy, data, 1), _run(clean, data, 1)
    for x, y in zip(_leaves(u.silos), _leaves(v.silos)):
        np.testing.assert_array_equal(x, y)


@pytest.mark.slow  # ~3 s: second tier
def test_client_opt_mapping_gives_each_part_its_own_optimizer():
    """{"shared": sgd(a), "private": sgd(0)}: the private parts stay at their initial values while the shared
    part trains as with sgd(a) on both parts."""
    data = flipped_silos()
    split, _ = _run(personalized(loss, shared=LABELS, client_opt={"shared": optax.sgd(0.3), "private": optax.sgd(0.0)},
                                 local_steps=2, sampling_rate=0.5), data, 2)
    for s, h in zip(_leaves(split.silos), _leaves(init_mlp()["head"])):
        for j in range(len(SIZES)):
            np.testing.assert_array_equal(s[j], h)
    assert not np.array_equal(split.params["body"]["w"], init_mlp()["body"]["w"])


# ------------------------------------------------------------------------------------------------
# noise_placement="central": shares of one draw


def _sq_loss(p, x, y):
    return 0.5 * jnp.sum((x - p["w"]) ** 2) + 0.5 * p["b"] ** 2


def _zero_silos(n, records=10, dim=3):
    return from_silos([(np.zeros((records, dim), np.float32), np.zeros(records, np.float32)) for _ in range(n)])


def _update_std(placement, n, *, runs=400, owners=None):
    """The std of one coordinate of the server's first update on zero records (clipped sums 0: noise only)."""
    algorithm = personalized(_sq_loss, shared={"w": "shared", "b": "private"}, client_opt=optax.sgd(1.0),
                             local_steps=1, sampling_rate=0.5, expected_batch_size=5.0, clip_norm=2.0,
                             noise_multiplier=1.5, noise_placement=placement,
                             owners=(n if owners is None else owners) if placement == "central" else None)
    data = _zero_silos(n)
    params = {"w": jnp.zeros(3), "b": jnp.zeros(())}
    step = jax.jit(lambda key: algorithm.round(initial_state(algorithm, params, n), data, key)[0].server.params["w"])
    updates = np.stack([np.asarray(step(jax.random.key(k))) for k in range(runs)])
    return updates.std()


def test_central_noise_is_one_draw_on_the_sum():
    """Oracle (closed form): each of n silos adds N(0, (zC)^2 / n) to its clipped sum over B = 5, and the server
    averages: the update's std is z C / (n B) = 1.5 * 2 / (4 * 5) = 0.15; local noise gives sqrt(n) times that."""
    n = 4
    assert _update_std("central", n) == pytest.approx(1.5 * 2.0 / (n * 5.0), rel=0.08)
    assert _update_std("local", n) == pytest.approx(1.5 * 2.0 / (math.sqrt(n) * 5.0), rel=0.08)


def test_central_statements():
    algorithm = personalized(_sq_loss, shared={"w": "shared", "b": "private"}, client_opt=optax.sgd(1.0),
                             local_steps=1, sampling_rate=0.5, expected_batch_size=5.0, clip_norm=2.0,
                             noise_multiplier=1.5, noise_placement="central", owners=4)
    statement = algorithm.privacy(np.array([10, 10, 12, 10, 0]))      # a padding silo holds no records
    gaussian = dp_accounting.GaussianDpEvent
    assert statement.events == (dp_accounting.PoissonSampledDpEvent(0.5, gaussian(0.75)),) * 4   # z / sqrt(4)
    assert statement.central == dp_accounting.PoissonSampledDpEvent(0.5, gaussian(1.5))
    ledger = make_ledger(algorithm, [10] * 4, central=True).record(10)
    poisson = make_ledger(minibatch_sgd(_sq_loss, server_opt=optax.sgd(1.0), sampling_rate=0.5,
                                        expected_batch_size=5.0, clip_norm=2.0, noise_multiplier=1.5), [10]).record(10)
    assert ledger.epsilon(1e-5) == pytest.approx(poisson.epsilon(1e-5))        # central DP-SGD's epsilon
    assert make_ledger(algorithm, [10] * 4).record(10).epsilon(1e-5) > 2 * ledger.epsilon(1e-5)
    several = personalized(_sq_loss, shared={"w": "shared", "b": "private"}, client_opt=optax.sgd(1.0),
                           local_steps=3, sampling_rate=0.5, expected_batch_size=5.0, clip_norm=2.0,
                           noise_multiplier=1.5, noise_placement="central", owners=4)
    assert several.privacy([10] * 4).central is None and make_ledger(several, [10] * 4, central=True) is None
    with pytest.raises(ValueError, match="owners=4.*3 hold records"):
        algorithm.privacy([10, 10, 10])


@pytest.mark.parametrize("kwargs, match", [
    ({"noise_placement": "central"}, "owners"),
    ({"noise_placement": "central", "owners": 4, "participation": 2}, "every owner"),
    ({"noise_placement": "central", "owners": 4, "noise_multiplier": [1.0, 1.0, 1.0, 1.0]}, "one number"),
    ({"owners": 4}, "owners=4 sets the noise shares"),
    ({"noise_placement": "everywhere"}, "noise_placement"),
])
def test_central_bad_input(kwargs, match):
    base = dict(shared={"w": "shared", "b": "private"}, client_opt=optax.sgd(1.0), local_steps=1, sampling_rate=0.5,
                expected_batch_size=5.0, clip_norm=2.0, noise_multiplier=1.5)
    with pytest.raises(ValueError, match=match):
        personalized(_sq_loss, **{**base, **kwargs})
