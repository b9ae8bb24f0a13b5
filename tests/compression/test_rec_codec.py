"""The REC codec: fused logits vs the dense reference, exact decoding, the categorical law (chi-square),
the importance-sampling bias bound (Triastcyn et al. eq. 4), tiling invariance, block independence, layouts."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from jaxfl.compression import codebook as cb
from jaxfl.compression import rec

SIGMA = 0.01


def _update(size, scale=SIGMA, seed=0):
    return jax.random.normal(jax.random.PRNGKey(seed), (size,)) * scale


@pytest.mark.parametrize("sizes,bits", [((1000,), (7,)), pytest.param((5, 3000, 17), (4, 7, 3), marks=pytest.mark.slow),
                                        pytest.param((64,) * 5 + (9,), (5,) * 6, marks=pytest.mark.slow)])
def test_fused_logits_match_dense_reference_up_to_the_constant(sizes, bits):
    layout = rec.BlockLayout(sizes, bits)
    mu = _update(layout.size)
    fused = rec.block_logits(mu, jnp.uint32(7), layout, SIGMA)
    dense = rec.naive_block_logits(mu, jnp.uint32(7), layout, SIGMA)
    for m, (a, b) in enumerate(zip(fused, dense)):
        block = mu[layout.offsets[m]:layout.offsets[m] + layout.sizes[m]]
        constant = float(jnp.sum(block**2)) / (2 * SIGMA**2)  # log-ratio = <Delta, mu>/s^2 - ||mu||^2/(2 s^2)
        assert a.shape == (2**bits[m],)
        np.testing.assert_allclose(np.asarray(a) - constant, np.asarray(b), atol=2e-3 * (1 + np.abs(b).max()))


@pytest.mark.slow
def test_tiling_does_not_change_the_scores(monkeypatch):
    layout = rec.BlockLayout((5000, 333), (6, 6))
    mu = _update(layout.size)
    reference = rec.block_logits(mu, jnp.uint32(3), layout, SIGMA)
    for tile_elements in (64 * 7, 64 * 1000, 2**22):  # remainder tiles, several tiles, one tile
        monkeypatch.setattr(rec, "TILE_ELEMENTS", tile_elements)
        tiled = rec.block_logits(mu, jnp.uint32(3), layout, SIGMA)
        for a, b in zip(tiled, reference):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-3)


def test_messages_do_not_depend_on_how_the_codebook_tiles_are_hashed(monkeypatch):
    """The encoder's tiles come from the fused threefry behind an optimization barrier; the same encoder with
    JAX's threefry primitive as the hash (what encoded before) gives bitwise the same logits and indices, so
    messages (and DP-REC runs) recorded with either reproduce. Without the barrier XLA fuses the hash into
    the reduction and the sums move in their last bits."""
    from jax.extend.random import threefry_2x32

    from jaxfl.privacy import normal

    def primitive_pairs(key_data, rows, pairs):
        rows, pairs = jnp.broadcast_arrays(jnp.asarray(rows).astype(jnp.uint32),
                                           jnp.asarray(pairs).astype(jnp.uint32))
        w0, w1 = threefry_2x32(key_data, jnp.stack([rows.ravel(), pairs.ravel()]))
        return normal.normal_from_bits(w0).reshape(rows.shape), normal.normal_from_bits(w1).reshape(rows.shape)

    layout = rec.BlockLayout((20_000, 333, 20_000), (7, 4, 7))
    mu, seed, key = _update(layout.size), jnp.uint32(11), jax.random.PRNGKey(5)

    def messages():
        logits = jax.jit(lambda f, s: rec.block_logits(f, s, layout, SIGMA))(mu, seed)
        return logits, jax.jit(lambda f, s, k: rec.encode(f, s, k, layout, SIGMA))(mu, seed, key)

    logits, indices = messages()
    monkeypatch.setattr(normal, "normal_pairs", primitive_pairs)
    logits_primitive, indices_primitive = messages()
    for a, b in zip(logits, logits_primitive):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(indices, indices_primitive)


@pytest.mark.slow
def test_decode_regenerates_exactly_the_chosen_codebook_row():
    layout = rec.BlockLayout((300, 41, 1000), (7, 3, 5))
    mu = _update(layout.size)
    seed = jnp.uint32(2024)
    indices = jax.jit(lambda f, s, k: rec.encode(f, s, k, layout, SIGMA))(mu, seed, jax.random.PRNGKey(1))
    decoded = np.asarray(rec.decode(indices, seed, layout, SIGMA))
    for m, (offset, size, bits) in enumerate(zip(layout.offsets, layout.sizes, layout.bits)):
        row = SIGMA * np.asarray(cb.codebook(cb.block_key(seed, m), 2**bits, size))[int(indices[m])]
        np.testing.assert_array_equal(decoded[offset:offset + size], row)


def test_codebook_does_not_depend_on_the_threefry_partitionable_flag():
    key = cb.block_key(jnp.uint32(99), 3)
    before = np.asarray(cb.codebook(key, 8, 50))
    flag = jax.config.jax_threefry_partitionable
    try:
        jax.config.update("jax_threefry_partitionable", not flag)
        after = np.asarray(cb.codebook(cb.block_key(jnp.uint32(99), 3), 8, 50))
    finally:
        jax.config.update("jax_threefry_partitionable", flag)
    np.testing.assert_array_equal(before, after)


def test_codebook_entries_are_standard_normal_and_seeds_differ():
    z = np.asarray(cb.codebook(cb.block_key(jnp.uint32(5), 0), 64, 4096)).ravel()
    assert stats.kstest(z, "norm").pvalue > 1e-3
    assert np.all(np.isfinite(z))
    other = np.asarray(cb.codebook(cb.block_key(jnp.uint32(6), 0), 64, 4096)).ravel()
    assert abs(np.corrcoef(z, other)[0, 1]) < 0.01


def test_index_frequencies_follow_softmax_of_the_logits_chi_square():
    layout = rec.BlockLayout((20,), (4,))
    mu = _update(20, scale=0.6 * SIGMA / np.sqrt(20) * 4)
    seed = jnp.uint32(11)
    logits = np.asarray(rec.block_logits(mu, seed, layout, SIGMA)[0], np.float64)
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    keys = jax.random.split(jax.random.PRNGKey(0), 40_000)
    picks = np.asarray(jax.jit(jax.vmap(lambda k: rec.encode(mu, seed, k, layout, SIGMA)[0]))(keys))
    observed = np.bincount(picks, minlength=16)
    assert stats.chisquare(observed, probs * picks.size).pvalue > 1e-3


def test_decoded_mean_is_within_the_importance_sampling_bias_bound():
    """Eq. 4 (Agapiou et al.): |E_q~[zeta] - E_q[zeta]| <= (12/K) exp(D_2(q||p)) for |zeta| <= 1, with
    D_2 = ||mu||^2 / sigma^2, over fresh seeds R and private keys; zeta = tanh(Delta_j / sigma) has a
    quadrature oracle. The decoded mean itself is held to the same bound per coordinate (units of sigma)."""
    d, bits = 6, 7
    layout = rec.BlockLayout((d,), (bits,))
    mu = jnp.asarray([0.5, -0.4, 0.3, 0.0, 0.2, -0.1]) * SIGMA  # ||mu|| / sigma = 0.74
    bound = 12 / 2**bits * np.exp(float(jnp.sum(mu**2)) / SIGMA**2)
    n = 30_000

    def one(i):
        seed = jax.random.bits(jax.random.fold_in(jax.random.PRNGKey(1), i), (), jnp.uint32)
        k = rec.encode(mu, seed, jax.random.fold_in(jax.random.PRNGKey(2), i), layout, SIGMA)
        return rec.decode(k, seed, layout, SIGMA)

    decoded = np.asarray(jax.jit(jax.vmap(one))(jnp.arange(n)), np.float64) / SIGMA
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    target = np.asarray(mu, np.float64) / SIGMA
    exact_tanh = np.array([np.sum(weights * np.tanh(m + nodes)) / np.sqrt(2 * np.pi) for m in target])
    tanh_bias = np.abs(np.tanh(decoded).mean(axis=0) - exact_tanh)
    se = np.tanh(decoded).std(axis=0) / np.sqrt(n)
    assert np.all(tanh_bias <= bound + 5 * se)
    mean_bias = np.abs(decoded.mean(axis=0) - target)
    assert np.all(mean_bias <= bound + 5 * decoded.std(axis=0) / np.sqrt(n))


def test_bias_shrinks_as_the_codebook_grows():
    d = 4
    mu = jnp.asarray([1.0, -1.0, 0.5, 0.0]) * SIGMA
    errors = []
    for bits in (2, 8):
        layout = rec.BlockLayout((d,), (bits,))

        def one(i, layout=layout):
            seed = jax.random.bits(jax.random.fold_in(jax.random.PRNGKey(3), i), (), jnp.uint32)
            k = rec.encode(mu, seed, jax.random.fold_in(jax.random.PRNGKey(4), i), layout, SIGMA)
            return rec.decode(k, seed, layout, SIGMA)

        decoded = np.asarray(jax.jit(jax.vmap(one))(jnp.arange(20_000))) / SIGMA
        errors.append(np.linalg.norm(decoded.mean(axis=0) - np.asarray(mu) / SIGMA))
    assert errors[1] < 0.5 * errors[0]


@pytest.mark.slow
def test_blocks_are_encoded_independently():
    layout = rec.BlockLayout((100, 200), (5, 5))
    mu = _update(300)
    changed = mu.at[150].set(1.0)  # only block 1 changes
    a = rec.block_logits(mu, jnp.uint32(1), layout, SIGMA)
    b = rec.block_logits(changed, jnp.uint32(1), layout, SIGMA)
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.allclose(a[1], b[1])
    key = jax.random.PRNGKey(0)
    assert int(rec.encode(mu, jnp.uint32(1), key, layout, SIGMA)[0]) == int(
        rec.encode(changed, jnp.uint32(1), key, layout, SIGMA)[0])


@pytest.mark.slow
def test_encoding_batches_over_clients_with_vmap():
    layout = rec.BlockLayout((128, 70), (6, 4))
    mus = jax.random.normal(jax.random.PRNGKey(0), (3, layout.size)) * SIGMA
    seeds = jnp.asarray([1, 2, 3], jnp.uint32)
    keys = jax.random.split(jax.random.PRNGKey(5), 3)
    batched = jax.vmap(lambda m, s, k: rec.encode(m, s, k, layout, SIGMA))(mus, seeds, keys)
    for i in range(3):
        np.testing.assert_array_equal(batched[i], rec.encode(mus[i], seeds[i], keys[i], layout, SIGMA))


def test_layouts():
    params = {"b": jnp.zeros(10), "w": jnp.zeros((3, 100))}
    layout = rec.per_tensor(params)
    assert layout.sizes == (10, 300) and layout.bits == (7, 7) and layout.total_bits == 14
    assert layout.message_bits() == 14 + 32 and layout.names == ("['b']", "['w']")
    split = rec.per_tensor(params, bits=6, max_block_size=120)
    assert split.sizes == (10, 100, 100, 100) and split.total_bits == 24
    assert rec.fixed_size(130, 64).sizes == (64, 64, 2)
    assert rec.whole(5, 9).sizes == (5,)
    with pytest.raises(ValueError, match="bits per block"):
        rec.BlockLayout((3,), (0,))
    with pytest.raises(ValueError, match="float32\\[310\\]"):
        rec.encode(jnp.zeros(7), jnp.uint32(0), jax.random.PRNGKey(0), layout, SIGMA)
    with pytest.raises(ValueError, match="int32\\[2\\]"):
        rec.decode(jnp.zeros(3, jnp.int32), jnp.uint32(0), layout, SIGMA)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=20).flatmap(
    lambda bits: st.tuples(st.just(bits), st.tuples(*[st.integers(0, 2**b - 1) for b in bits]))))
def test_index_packing_round_trips(case):
    bits, indices = case
    packed = rec.pack_indices(indices, bits)
    assert len(packed) == -(-sum(bits) // 8)
    np.testing.assert_array_equal(rec.unpack_indices(packed, bits), indices)


def test_packing_rejects_an_index_that_does_not_fit():
    with pytest.raises(ValueError, match="index 8 does not fit in 3 bits"):
        rec.pack_indices([8], [3])
