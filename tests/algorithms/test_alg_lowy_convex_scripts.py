"""Lowy & Razaviyayn, the authors' scripts' MB-SGD variant and sliding-window output averaging (digest §6.2-6.4).

Oracles are closed forms (gradient-descent recursions, Gaussian moments) or the paper's algorithm
(``noisy_minibatch_sgd``) run on the same keys, never the variant's own output."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfl.algorithms import noisy_sgd
from jaxfl.data.federated import from_silos
from jaxfl.engine import train
from jaxfl.models import init_linear, logistic_loss
from jaxfl.privacy import keys as keys_lib
from jaxfl.privacy.normal import standard_normal


def _quadratic(p, x, y):
    return 0.5 * jnp.sum((p["w"] - x) ** 2)


def _constant_silos(centres, n=6):
    """Silo i holds n copies of centres[i]: any with-replacement minibatch of it has gradient w - c_i."""
    return from_silos([(np.tile(np.asarray(c, np.float32), (n, 1)), np.zeros(n, np.int32)) for c in centres])


CENTRES = [[1.0, -2.0], [3.0, 0.5], [-1.0, 4.0]]
P0 = {"w": jnp.array([5.0, 5.0])}


def _rounds(alg, data, params, rounds, key=0):
    """The states after rounds 1..R (round r gets keys.round_key(root, r - 1), as jaxfl.train does)."""
    root = keys_lib.as_key(key)
    step = jax.jit(lambda s, k: alg.round(s, data, k))
    state, states = alg.init(params), []
    for r in range(rounds):
        state, _ = step(state, keys_lib.round_key(root, r))
        states.append(state)
    return states


# -- sliding-window output averaging -------------------------------------------------------------------

def test_window_average_of_mbsgd_is_the_mean_of_the_last_iterates_closed_form():
    eta, rounds, window = 0.3, 12, 8
    xbar = np.mean(np.asarray(CENTRES), axis=0)
    # Full participation, constant silos: w_r = xbar + (1 - eta)^r (w_0 - xbar) (plain GD on the mean).
    iterates = [xbar + (1 - eta) ** r * (np.asarray(P0["w"]) - xbar) for r in range(rounds + 1)]
    alg = noisy_sgd.noisy_minibatch_sgd(_quadratic, step_size=eta, batch_size=3, clip_norm=math.inf,
                                          averaging="window", window=window)
    states = _rounds(alg, _constant_silos(CENTRES), P0, rounds)
    for r, state in enumerate(states, start=1):
        expected = np.mean(iterates[max(1, r - window + 1): r + 1], axis=0)  # w_1 .. w_r, at most 8 of them
        np.testing.assert_allclose(state.params["w"], expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(state.iterate.params["w"], iterates[r], rtol=1e-5, atol=1e-6)  # broadcast
    assert int(states[-1].round) == rounds
    # The initial state reports w_0.
    np.testing.assert_array_equal(alg.init(P0).params["w"], P0["w"])


@pytest.mark.slow
def test_window_average_equals_the_mean_of_the_last_iterate_runs_with_noise_and_sampling(small_data):
    """With noise, silo sampling and random minibatches: the iterates of the ``averaging="last"`` run
    (same keys), averaged over the last min(r, 8) in numpy."""
    make = lambda avg, **kw: noisy_sgd.noisy_minibatch_sgd(logistic_loss, step_size=0.5, batch_size=4, clip_norm=1.0,
                                                             noise_multiplier=0.8, participation=3, averaging=avg,
                                                             **kw)
    rounds = 11
    last = [np.asarray(s.params["w"]) for s in _rounds(make("last"), small_data, init_linear(5), rounds, key=3)]
    window = _rounds(make("window"), small_data, init_linear(5), rounds, key=3)
    for r in (1, 5, 8, 9, 11):
        np.testing.assert_allclose(window[r - 1].params["w"], np.mean(last[max(0, r - 8): r], axis=0),
                                   rtol=1e-5, atol=1e-6)
    # train() reports the window average too.
    res = train(make("window", window=3), small_data, init_linear(5), rounds=rounds, key=3, progress=False)
    np.testing.assert_allclose(res.state.params["w"], np.mean(last[-3:], axis=0), rtol=1e-5, atol=1e-6)


def test_window_average_of_local_sgd_closed_form():
    eta, steps, rounds, window = 0.2, 3, 10, 4
    xbar = np.mean(np.asarray(CENTRES), axis=0)
    # Each silo: w_K = c_i + (1 - eta)^K (w - c_i); the server averages: w' = xbar + (1 - eta)^K (w - xbar).
    q = (1 - eta) ** steps
    iterates = [xbar + q**r * (np.asarray(P0["w"]) - xbar) for r in range(rounds + 1)]
    alg = noisy_sgd.noisy_local_sgd(_quadratic, step_size=eta, local_steps=steps, clip_norm=math.inf,
                                      averaging="window", window=window)
    states = _rounds(alg, _constant_silos(CENTRES), P0, rounds)
    for r, state in enumerate(states, start=1):
        np.testing.assert_allclose(state.params["w"], np.mean(iterates[max(1, r - window + 1): r + 1], axis=0),
                                   rtol=1e-5, atol=1e-6)
    default = noisy_sgd.noisy_local_sgd(_quadratic, step_size=eta, local_steps=steps, clip_norm=math.inf)
    np.testing.assert_allclose(_rounds(default, _constant_silos(CENTRES), P0, 2)[-1].params["w"], iterates[2],
                               rtol=1e-5)


# -- the authors' scripts' MB-SGD ---------------------------------------------------------------------

def _scripts(loss=logistic_loss, **kw):
    base = dict(step_size=0.5, batch_size=4, clip_norm=1.0, noise_multiplier=0.0, participation=2)
    return noisy_sgd.authors_scripts_minibatch_sgd(loss, **{**base, **kw})


def test_paper_choices_equal_noisy_minibatch_sgd_bitwise_with_noise(small_data):
    kw = dict(step_size=0.7, batch_size=6, clip_norm=0.3, noise_multiplier=1.3, participation=3)
    paper = noisy_sgd.noisy_minibatch_sgd(logistic_loss, **kw)
    scripts = noisy_sgd.authors_scripts_minibatch_sgd(logistic_loss, aggregate="mean", clip="per_example",
                                                        gradient="mean", noise="per_silo", window=1, **kw)
    a = _rounds(paper, small_data, init_linear(5), 4, key=11)
    b = _rounds(scripts, small_data, init_linear(5), 4, key=11)
    for sa, sb in zip(a, b):
        np.testing.assert_array_equal(np.asarray(sa.params["w"]), np.asarray(sb.params["w"]))
        np.testing.assert_array_equal(np.asarray(sa.params["b"]), np.asarray(sb.params["b"]))
    assert not np.allclose(a[0].params["w"], 0.0)


def test_per_silo_budgets_equal_noisy_minibatch_sgd_bitwise(small_data):
    z = np.array([0.5, 1.0, 1.5, 2.0, 2.5], np.float32)
    kw = dict(step_size=0.4, batch_size=5, clip_norm=0.5, noise_multiplier=z, participation=2)
    paper = noisy_sgd.noisy_minibatch_sgd(logistic_loss, **kw)
    scripts = noisy_sgd.authors_scripts_minibatch_sgd(logistic_loss, aggregate="mean", clip="per_example",
                                                        window=1, **kw)
    a = _rounds(paper, small_data, init_linear(5), 3, key=2)[-1]
    b = _rounds(scripts, small_data, init_linear(5), 3, key=2)[-1]
    np.testing.assert_array_equal(np.asarray(a.params["w"]), np.asarray(b.params["w"]))


@pytest.mark.parametrize("clip", ["batch_mean", "per_example"])
def test_summed_silos_equal_averaged_silos_with_m_times_the_step(small_data, clip):
    m = 2
    summed = _rounds(_scripts(aggregate="sum", clip=clip, step_size=0.25, participation=m, window=3),
                     small_data, init_linear(5), 5, key=5)[-1]
    averaged = _rounds(_scripts(aggregate="mean", clip=clip, step_size=0.25 * m, participation=m, window=3),
                       small_data, init_linear(5), 5, key=5)[-1]
    np.testing.assert_allclose(summed.params["w"], averaged.params["w"], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_batch_mean_clipping_bounds_the_silo_message_not_each_record():
    # One silo per round, step 1, summed: w_0 - w_1 is that silo's message.
    rng = np.random.default_rng(0)
    x = (5.0 + rng.standard_normal((20, 3))).astype(np.float32)
    data = from_silos([(x, np.zeros(20, np.int32)), (x[:10] + 1.0, np.zeros(10, np.int32))])
    p0 = {"w": jnp.zeros(3)}

    def message(clip_norm, clip="batch_mean", gradient="mean"):
        alg = _scripts(_quadratic, step_size=1.0, batch_size=5, clip_norm=clip_norm, participation=1, window=1,
                       clip=clip, gradient=gradient)
        return np.asarray(p0["w"] - _rounds(alg, data, p0, 1, key=7)[0].params["w"])

    free = message(1e32)  # the silo's unclipped minibatch-mean gradient, ||.|| ~ 5 sqrt(3)
    assert np.linalg.norm(free) > 3.0
    for c in (0.5, 2.0):
        clipped = message(c)
        assert np.linalg.norm(clipped) <= c * (1 + 1e-6)
        np.testing.assert_allclose(clipped, free * c / np.linalg.norm(free), rtol=1e-5)  # the mean, rescaled
        summed = message(c, gradient="sum")  # the sum is clipped as a whole too
        assert np.linalg.norm(summed) <= c * (1 + 1e-6)
    # Per-example clipping of the sum (obesity script): each of the K = 5 gradients (all pointing about the
    # same way here) is clipped to c, so the message's norm is about K c, far above c.
    norm = np.linalg.norm(message(0.5, clip="per_example", gradient="sum"))
    assert 4 * 0.5 < norm <= 5 * 0.5 * (1 + 1e-6)


@pytest.mark.slow
def test_summed_minibatch_gradient_equals_the_mean_with_k_times_the_step(small_data):
    k = 6
    for clip in ("batch_mean", "per_example"):
        summed = _rounds(_scripts(gradient="sum", clip=clip, batch_size=k, step_size=0.05, clip_norm=math.inf,
                                  window=4), small_data, init_linear(5), 6, key=9)[-1]
        mean = _rounds(_scripts(gradient="mean", clip=clip, batch_size=k, step_size=0.05 * k, clip_norm=math.inf,
                                window=4), small_data, init_linear(5), 6, key=9)[-1]
        np.testing.assert_allclose(summed.params["w"], mean.params["w"], rtol=1e-5, atol=1e-6)


def _zero_gradient(p, x, y):
    return 0.0 * jnp.sum(p["w"])


def _noise_std(dim=4000, seeds=3, rounds=1, **kw):
    """Empirical std of the one-round update under a zero gradient (step 1): the noise alone."""
    data = _constant_silos([[0.0]] * 5)
    p0 = {"w": jnp.zeros(dim)}
    alg = _scripts(_zero_gradient, step_size=1.0, window=1, **kw)
    draws = []
    for seed in range(seeds):
        states = _rounds(alg, data, p0, rounds, key=seed)
        previous = [p0["w"]] + [s.params["w"] for s in states[:-1]]
        draws += [np.asarray(s.params["w"] - w) for s, w in zip(states, previous)]
    draws = np.concatenate(draws)
    return float(np.std(draws)), draws.size


@pytest.mark.slow
@pytest.mark.parametrize("aggregate", ["mean", "sum"])
def test_central_noise_is_one_draw_of_std_sigma_whatever_m(aggregate):
    z, c, k = 1.5, 2.0, 4
    sigma = z * c / k
    for m in (1, 4):
        std, n = _noise_std(noise="central", aggregate=aggregate, noise_multiplier=z, clip_norm=c, batch_size=k,
                            participation=m, rounds=2)
        assert std == pytest.approx(sigma, rel=6 / math.sqrt(2 * n))  # 6 standard errors of a sample std


@pytest.mark.slow
def test_per_silo_noise_std_is_sigma_per_silo():
    z, c, k, m = 1.5, 2.0, 4, 4
    sigma = z * c / k
    for aggregate, expected in (("mean", sigma / math.sqrt(m)), ("sum", sigma * math.sqrt(m))):
        for gradient in ("mean", "sum"):  # sigma = zC/K whatever the gradient is
            std, n = _noise_std(noise="per_silo", aggregate=aggregate, gradient=gradient, noise_multiplier=z,
                                clip_norm=c, batch_size=k, participation=m)
            assert std == pytest.approx(expected, rel=6 / math.sqrt(2 * n))


def test_central_noise_key_is_the_servers_noise_key():
    z, c, k, dim = 1.0, 1.0, 2, 50
    data = _constant_silos([[0.0]] * 3)
    alg = _scripts(_zero_gradient, step_size=1.0, window=1, noise="central", aggregate="mean", noise_multiplier=z,
                   clip_norm=c, batch_size=k, participation=2)
    w1 = _rounds(alg, data, {"w": jnp.zeros(dim)}, 1, key=4)[0].params["w"]
    key = keys_lib.derive(keys_lib.as_key(4), round=0, silo=keys_lib.SERVER, step=0, purpose=keys_lib.Purpose.NOISE)
    expected = -(z * c / k) * standard_normal(jax.random.fold_in(key, 0), (dim,))  # leaf 0 of gaussian_like
    np.testing.assert_allclose(w1, expected, rtol=1e-6, atol=1e-7)


def test_step_size_and_noise_multiplier_may_be_traced():
    data = _constant_silos([[0.0]] * 3)
    p0 = {"w": jnp.zeros(3000)}

    def one_round(z, eta):
        alg = _scripts(_zero_gradient, step_size=eta, noise_multiplier=z, window=2, noise="central",
                       aggregate="mean", clip_norm=2.0, batch_size=4)
        state, _ = alg.round(alg.init(p0), data, keys_lib.round_key(keys_lib.as_key(0), 0))
        return state.params["w"]

    out = jax.jit(jax.vmap(one_round))(jnp.array([0.0, 1.0, 2.0]), jnp.array([1.0, 1.0, 0.5]))
    assert float(jnp.max(jnp.abs(out[0]))) == 0.0
    np.testing.assert_allclose(float(jnp.std(out[1])), 1.0 * 2.0 / 4, rtol=0.1)
    np.testing.assert_allclose(float(jnp.std(out[2])), 0.5 * 2.0 * 2.0 / 4, rtol=0.1)


def test_the_variant_states_no_privacy(small_data):
    for kw in ({}, {"noise": "central", "gradient": "sum", "aggregate": "mean", "clip": "per_example"},
               {"aggregate": "mean", "clip": "per_example", "window": 1}):
        alg = _scripts(noise_multiplier=1.0, **kw)
        assert alg.privacy is None
    with pytest.raises(ValueError, match="not private"):
        train(alg, small_data, init_linear(5), rounds=2, target_epsilon=1.0, delta=1e-5, progress=False)
    res = train(alg, small_data, init_linear(5), rounds=2, delta=1e-5, progress=False)
    assert res.epsilon is None and res.ledger is None
    assert np.all(np.isfinite(np.asarray(res.state.params["w"])))


def test_bad_arguments_raise():
    for option, bad in (("aggregate", "median"), ("clip", "none"), ("gradient", "max"), ("noise", "shuffled")):
        with pytest.raises(ValueError, match=option):
            _scripts(**{option: bad})
    with pytest.raises(ValueError, match="scalar"):
        _scripts(noise="central", noise_multiplier=np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="window"):
        _scripts(window=0)
    with pytest.raises(ValueError, match="averaging"):
        noisy_sgd.noisy_local_sgd(logistic_loss, step_size=0.1, local_steps=2, clip_norm=1.0, averaging="uniform")
    with pytest.raises(ValueError, match="window"):
        noisy_sgd.noisy_minibatch_sgd(logistic_loss, step_size=0.1, batch_size=2, clip_norm=1.0,
                                        averaging="window", window=0)
