"""Local steps get their randomness as arguments (jaxfl.engine.local): drawn ahead of the step loop in
blocks or inside it, from the same keys, the numbers are the per-step draws bitwise."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxfl.algorithms import local_sgd
from jaxfl.engine import local, run_rounds
from jaxfl.models import init_linear, logistic_loss
from jaxfl.privacy import keys
from jaxfl.privacy.clipping import clipped_grad_sum, per_example_grads
from jaxfl.privacy.noise import gaussian_like

ALGORITHMS = {
    "with_replacement": dict(local_steps=7, batch_size=2, clip_norm=0.5, noise_multiplier=1.3),
    "poisson": dict(local_steps=5, sampling_rate=0.3, clip_norm=0.5, noise_multiplier=1.3, participation=3),
    "full_batch": dict(local_steps=3, clip_norm=0.5, noise_multiplier=0.7),
    "non_private": dict(local_steps=6, batch_size=3),
}
PARAMS = 6  # init_linear(5): w[5] and b


def _per_step_size(kwargs, max_records):
    """Random values one step draws: the sampler's plus the unit noise's."""
    sampler = {"batch_size" in kwargs: kwargs.get("batch_size"), "sampling_rate" in kwargs: max_records}.get(True, 0)
    return sampler + (PARAMS if kwargs.get("noise_multiplier", 0) else 0)


def _budgets(kwargs, max_records):
    """Budgets (DRAW_AHEAD_ELEMENTS) that draw in the loop, all steps at once, and blocks of 2 steps
    (with a rest when the step count is odd)."""
    return 0, local.DRAW_AHEAD_ELEMENTS, 2 * _per_step_size(kwargs, max_records)


def _run_local_sgd(small_data, kwargs, budget, monkeypatch):
    monkeypatch.setattr(local, "DRAW_AHEAD_ELEMENTS", budget)
    alg = local_sgd(logistic_loss, client_opt=optax.sgd(0.1), **kwargs)
    state, infos = jax.jit(lambda s: run_rounds(alg, s, small_data, jax.random.key(3), 0, 3))(alg.init(init_linear(5)))
    return jax.tree_util.tree_map(np.asarray, (state.params, infos))


def _assert_bitwise(a, b):
    leaves_a, leaves_b = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(leaves_a) == len(leaves_b)
    for u, v in zip(leaves_a, leaves_b):
        np.testing.assert_array_equal(u, v)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_local_sgd_draws_ahead_or_in_the_loop_bitwise_alike(small_data, name, monkeypatch):
    kwargs = ALGORITHMS[name]
    in_loop, *ahead = [_run_local_sgd(small_data, kwargs, b, monkeypatch)
                       for b in _budgets(kwargs, small_data.x.shape[1])]
    for other in ahead:
        _assert_bitwise(in_loop, other)


def _sampler(kwargs):
    return local.make_sampler(kwargs.get("batch_size"), kwargs.get("sampling_rate"))


def _bits(drawn):
    """The draws as one int32 vector of their bit patterns."""
    return jnp.concatenate([jax.lax.bitcast_convert_type(a, jnp.int32).ravel() if a.dtype == jnp.float32
                            else a.astype(jnp.int32).ravel() for a in jax.tree_util.tree_leaves(drawn)])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_local_steps_hands_each_step_its_step_draws(small_data, name, monkeypatch):
    """Whatever the blocking, gradient_fn gets draw_fn(step), and step_draws draws from exactly the
    step's MINIBATCH and NOISE keys (recorded bit for bit in integer parameters)."""
    kwargs = ALGORITHMS[name]
    sampler, num_steps, z = _sampler(kwargs), kwargs["local_steps"], kwargs.get("noise_multiplier", 0.0)
    x, count, silo_key, params = small_data.x[1], small_data.counts[1], jax.random.key(5), init_linear(5)
    draw = local.step_draws(sampler, silo_key, count, x.shape[0], params, z)

    def by_keys(step):
        minibatch = sampler.draw(keys.step_key(silo_key, step, keys.Purpose.MINIBATCH), count, x.shape[0])
        noise = gaussian_like(keys.step_key(silo_key, step, keys.Purpose.NOISE), params, 1.0) if z else None
        return minibatch, noise

    expected = np.stack([np.asarray(_bits(by_keys(jnp.int32(s)))) for s in range(num_steps)])
    assert expected.shape[1] == _per_step_size(kwargs, x.shape[0])

    def record(seen, step, drawn):  # row `step` gets the draws; integer adds of zeros elsewhere are exact
        return jnp.zeros_like(seen).at[step].set(_bits(drawn)), {}

    for budget in _budgets(kwargs, x.shape[0]):
        monkeypatch.setattr(local, "DRAW_AHEAD_ELEMENTS", budget)
        seen, _ = jax.jit(lambda s: local.local_steps(s, num_steps=num_steps, client_opt=optax.identity(),
                                                      gradient_fn=record, draw_fn=draw))(jnp.zeros_like(expected))
        np.testing.assert_array_equal(seen, expected)


def test_noisy_gradient_draws_from_the_step_keys(small_data):
    """Without draws, noisy_gradient samples and noises from the step's keys (the per-step reference)."""
    sampler, silo_key, params = local.make_sampler(2), jax.random.key(5), init_linear(5)
    x, y, count = small_data.x[2], small_data.y[2], small_data.counts[2]
    step = jnp.int32(4)
    batch = sampler(keys.step_key(silo_key, step, keys.Purpose.MINIBATCH), x, y, count)
    expected = local.noisy_batch_gradient(logistic_loss, params, batch,
                                          keys.step_key(silo_key, step, keys.Purpose.NOISE),
                                          clip_norm=0.5, noise_multiplier=1.3)
    drawn = local.step_draws(sampler, silo_key, count, x.shape[0], params, 1.3)(step)
    for given in (None, drawn):
        out = local.noisy_gradient(logistic_loss, params, x, y, count, silo_key, step, sampler=sampler, clip_norm=0.5,
                                   noise_multiplier=1.3, drawn=given)
        _assert_bitwise(expected, out)


def test_python_zero_noise_multiplier_draws_no_noise(small_data):
    sampler = local.make_sampler(2)
    draw = local.step_draws(sampler, jax.random.key(0), small_data.counts[0], small_data.x.shape[1], init_linear(5), 0)
    minibatch, noise = draw(jnp.int32(0))
    assert minibatch.shape == (2,) and noise is None
    with pytest.raises(ValueError, match="noise would be lost"):  # draws without noise for a noisy gradient
        local.noisy_gradient(logistic_loss, init_linear(5), small_data.x[0], small_data.y[0], small_data.counts[0],
                             jax.random.key(0), 0, sampler=sampler, clip_norm=1.0, noise_multiplier=1.0,
                             drawn=(minibatch, None))


@pytest.mark.slow
def test_draws_of_a_vmapped_gradient_fn(small_data):
    """Batched draws (two keys per step, for a vmap inside gradient_fn) pass through the blocks; the
    result is that of noisy_gradient drawing each step itself (up to XLA's fusion of the arithmetic)."""
    x, y, count = small_data.x[0], small_data.y[0], small_data.counts[0]
    sampler = local.make_sampler(2)
    params = init_linear(5)

    def client(params, key, draw_ahead):
        silo_keys = jax.random.split(jax.random.fold_in(key, 1), 2)

        def gradient(p, step, drawn):
            g, info = jax.vmap(lambda k, d: local.noisy_gradient(logistic_loss, p, x, y, count, k, step,
                                                                 sampler=sampler, clip_norm=1.0, noise_multiplier=1.0,
                                                                 drawn=d), in_axes=(0, 0 if draw_ahead else None))(
                silo_keys, drawn)
            return jax.tree_util.tree_map(lambda a: a.mean(0), (g, info))

        draw_fn = (lambda s: jax.vmap(lambda k: local.step_draws(sampler, k, count, x.shape[0], params, 1.0)(s))(
            silo_keys)) if draw_ahead else None
        return local.local_steps(params, num_steps=4, client_opt=optax.sgd(0.1), gradient_fn=gradient, draw_fn=draw_fn)

    with jax.checking_leaks():
        ahead = jax.jit(lambda p, k: client(p, k, True))(params, jax.random.key(0))
    in_loop = jax.jit(lambda p, k: client(p, k, False))(params, jax.random.key(0))
    for a, b in zip(jax.tree_util.tree_leaves(ahead), jax.tree_util.tree_leaves(in_loop)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_clipped_sum_equals_the_sum_of_clipped_per_example_gradients():
    x = jax.random.normal(jax.random.key(0), (64, 5)) * 3.0
    y = (jax.random.uniform(jax.random.key(1), (64,)) > 0.5).astype(jnp.int32)
    params = {"w": jnp.ones(5), "b": jnp.asarray(0.3)}
    mask = jnp.arange(64) < 50
    grads = per_example_grads(logistic_loss, params, x, y)
    norms = jnp.sqrt(jnp.sum(grads["w"] ** 2, axis=1) + grads["b"] ** 2)
    scale = mask * jnp.minimum(1.0, 0.7 / norms)
    out = clipped_grad_sum(logistic_loss, params, x, y, mask, 0.7)
    np.testing.assert_allclose(out.value["w"], (scale[:, None] * grads["w"]).sum(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.value["b"], (scale * grads["b"]).sum(0), rtol=1e-5, atol=1e-6)
    assert float(out.num_clipped) == float(jnp.sum(mask * (norms > 0.7)))
