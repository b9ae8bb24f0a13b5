"""A chunked Poisson sampler draws the same sample as the plain one and sums the same clipped gradients,
whatever the chunk (smaller than the sample: several passes; larger: one)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfl.engine import local


def _loss(p, x, y):
    return (jnp.tanh(x @ p["w"]) @ p["v"] - y) ** 2


@pytest.mark.slow
@pytest.mark.parametrize("chunk", [1, 3, 64, "auto"])
def test_chunked_poisson_gradient_equals_the_masked_one(chunk):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(40, 4)), jnp.float32)
    y = jnp.asarray(rng.normal(size=40), jnp.float32)
    params = {"w": jnp.asarray(rng.normal(size=(4, 3)), jnp.float32), "v": jnp.ones(3)}
    key = jax.random.key(3)
    plain = local.make_sampler(sampling_rate=0.3, chunk=None)  # the masked pass over every record
    chunked = local.make_sampler(sampling_rate=0.3, chunk=chunk)
    for count in (40, 25, 0):
        kw = dict(clip_norm=0.5, noise_multiplier=1.2)
        a, info_a = jax.jit(lambda c: local.noisy_gradient(_loss, params, x, y, c, key, 2, sampler=plain, **kw))(count)
        b, info_b = jax.jit(
            lambda c: local.noisy_gradient(_loss, params, x, y, c, key, 2, sampler=chunked, **kw))(count)
        for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
            np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(info_a["clipped_fraction"], info_b["clipped_fraction"], rtol=1e-6)
    mask = plain.draw(jax.random.key(0), 40, 40)
    assert 0 < int(jnp.sum(mask)) < 40  # a real sample: more than one chunk at chunk=3


def test_chunk_needs_a_poisson_rate():
    with pytest.raises(ValueError, match="chunk needs a Poisson"):
        local.make_sampler(batch_size=4, chunk=2)
    for bad in (0, 2.5, "big", True):
        with pytest.raises(ValueError, match="chunk must be 'auto', None or an int >= 1"):
            local.make_sampler(sampling_rate=0.5, chunk=bad)


def test_auto_chunk_gathers_the_mean_plus_three_deviations_for_rates_up_to_a_half():
    # 60,000 records at rate 256/60,000: mean 256, std sqrt(256 (1 - q)) = 15.97; 256 + 47.9 -> 304 (a multiple of 8)
    assert local.gather_chunk(local.make_sampler(sampling_rate=256 / 60000), 60000) == 304
    assert local.gather_chunk(local.make_sampler(sampling_rate=0.5), 10) == 10   # capped at the silo
    assert local.gather_chunk(local.make_sampler(sampling_rate=0.6), 1000) is None  # gathering would save little
    assert local.gather_chunk(local.make_sampler(sampling_rate=jnp.float32(0.1)), 1000) is None  # not a number
    assert local.gather_chunk(local.make_sampler(sampling_rate=0.1, chunk=None), 1000) is None
    assert local.gather_chunk(local.make_sampler(sampling_rate=0.1, chunk=7), 1000) == 7
    assert local.gather_chunk(local.make_sampler(batch_size=4), 1000) is None


@pytest.mark.parametrize("chunk", [None, 3])
def test_a_silo_without_records_sends_noise_at_its_own_scale(chunk):
    """count = 0: the clipped sum is 0 and is divided by 1 (not by the 1e-12 floor of ``rate * count``), so
    the message is exactly ``z C`` times the step's unit noise."""
    x, y = jnp.ones((8, 4)), jnp.zeros(8)
    params = {"w": jnp.ones((4, 3)), "v": jnp.ones(3)}
    key, clip, z = jax.random.key(5), 0.5, 1.2
    sampler = local.make_sampler(sampling_rate=0.3, chunk=chunk)
    grad, _ = jax.jit(lambda c: local.noisy_gradient(_loss, params, x, y, c, key, 1, sampler=sampler, clip_norm=clip,
                                                     noise_multiplier=z))(0)
    unit = local.step_draws(sampler, key, 0, 8, params, z)(1)[1]
    for g, u in zip(jax.tree_util.tree_leaves(grad), jax.tree_util.tree_leaves(unit)):
        np.testing.assert_allclose(g, z * clip * u, rtol=1e-6)
    assert float(sampler.denominator(10)) == pytest.approx(3.0)
    assert float(sampler._replace(expected_batch_size=2.5).denominator(10)) == 2.5
