"""Microbatched sums equal the whole-batch sum: clipped gradient sums, local training, the slice arithmetic.

The oracle is the same function with ``microbatch=None`` (one pass over the whole batch, the path every
other test checks against ``vmap(grad)``) and closed forms for the slice sizes and byte counts.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings, strategies as st

from jaxfl.engine import local
from jaxfl.models import nets, per_example_loss
from jaxfl.privacy import microbatch
from jaxfl.privacy.clipping import _global_norms, clipped_grad_sum, per_example_grads
from jaxfl.engine.participation import poisson, with_replacement
from _helpers import assert_clipped_sums_equal


class SmallCNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(4, (3, 3), padding="VALID")(x))
        return nn.Dense(3)(x.reshape(x.shape[:-3] + (-1,)))


SHAPE, CLASSES, N = (6, 6, 2), 3, 23
LOSS = per_example_loss(SmallCNN(), nets.softmax_cross_entropy)
PARAMS = nets.init_params(SmallCNN(), jax.random.PRNGKey(0), SHAPE)
X = jax.random.normal(jax.random.PRNGKey(1), (N,) + SHAPE)
Y = jnp.arange(N) % CLASSES
# padding (0), records counted twice (2), the rest once
MASK = jnp.where(jnp.arange(N) % 5 == 0, 0.0, jnp.where(jnp.arange(N) % 7 == 3, 2.0, 1.0))
# about half the records clipped, halfway between two records' norms (no record's norm near the bound)
CLIP = float(np.mean(np.sort(_global_norms(per_example_grads(LOSS, PARAMS, X, Y)))[N // 2:N // 2 + 2]))


@pytest.mark.parametrize("method", ["auto", "explicit"])
@pytest.mark.parametrize("clip_norm", [CLIP, float("inf")], ids=["clip", "inf"])
def test_clipped_sum_in_slices_equals_whole_batch(method, clip_norm):
    whole = jax.jit(lambda p: clipped_grad_sum(LOSS, p, X, Y, MASK, clip_norm, method=method, microbatch=None))
    expected = whole(PARAMS)
    if np.isfinite(clip_norm):
        assert 0 < float(expected.num_clipped) < float(expected.count)   # some records clipped, not all
    for size in (1, 4, 8, N, N + 5):                                      # 23 = 5 x 4 + 3: a padded last slice
        sliced = jax.jit(lambda p: clipped_grad_sum(LOSS, p, X, Y, MASK, clip_norm, method=method, microbatch=size))
        assert_clipped_sums_equal(expected, sliced(PARAMS))


def test_auto_slices_when_the_batch_overflows_the_budget(monkeypatch):
    per_record = microbatch.forward_bytes(LOSS, PARAMS, X, Y)
    monkeypatch.setattr(microbatch, "BUDGET_BYTES", 8 * per_record)       # 8 records per slice: 3 slices
    assert microbatch.microbatch_size(LOSS, PARAMS, X, Y) == 8
    expected = clipped_grad_sum(LOSS, PARAMS, X, Y, MASK, CLIP, microbatch=None)
    assert_clipped_sums_equal(expected, jax.jit(lambda p: clipped_grad_sum(LOSS, p, X, Y, MASK, CLIP))(PARAMS))
    # and under vmap over silos, as the engine calls it
    xs, ys, ms = (jnp.stack([a, a[::-1]]) for a in (X, Y, MASK))
    batched = jax.jit(jax.vmap(lambda x, y, m: clipped_grad_sum(LOSS, PARAMS, x, y, m, CLIP)))(xs, ys, ms)
    assert_clipped_sums_equal(expected, jax.tree_util.tree_map(lambda a: a[0], batched))
    assert_clipped_sums_equal(clipped_grad_sum(LOSS, PARAMS, X[::-1], Y[::-1], MASK[::-1], CLIP, microbatch=None),
                       jax.tree_util.tree_map(lambda a: a[1], batched))


def test_auto_keeps_small_records_whole_and_skips_accelerators(monkeypatch):
    assert microbatch.microbatch_size(LOSS, PARAMS, X, Y) == N                # 23 small records fit the budget
    monkeypatch.setattr(microbatch, "BUDGET_BYTES", 1)
    assert microbatch.microbatch_size(LOSS, PARAMS, X, Y) == 8                # never under MIN_SIZE: 23 = 3 x 8 - 1
    monkeypatch.setattr(microbatch, "BUDGET_BYTES", 12 * microbatch.forward_bytes(LOSS, PARAMS, X, Y))
    assert microbatch.microbatch_size(LOSS, PARAMS, X, Y) == N                # 2 slices of 12 would do: whole
    monkeypatch.setattr(microbatch, "BUDGET_BYTES", 11 * microbatch.forward_bytes(LOSS, PARAMS, X, Y))
    assert microbatch.microbatch_size(LOSS, PARAMS, X[:22], Y[:22]) == 22     # exactly 2 slices of 11: whole
    monkeypatch.setattr(microbatch.jax, "default_backend", lambda: "gpu")
    assert microbatch.microbatch_size(LOSS, PARAMS, X, Y) == N


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(1, 500), per_record=st.integers(1, 10**6), budget=st.integers(1, 10**8))
def test_auto_size_is_the_fewest_equal_slices_within_budget(batch, per_record, budget):
    x = jax.ShapeDtypeStruct((batch, 2), jnp.float32)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(microbatch, "forward_bytes", lambda *a: per_record)
        size = microbatch.microbatch_size(None, None, x, x, budget_bytes=budget)
    target = max(microbatch.MIN_SIZE, budget // per_record)
    if batch <= 2 * target:
        assert size == batch                                                 # two slices or fewer: whole
        return
    slices = -(-batch // size)
    assert size <= target and slices >= 3
    assert slices == -(-batch // target)                                     # the fewest slices within the target
    assert slices * size - batch < slices                                    # equal slices: padding < one per slice


def test_forward_bytes_counts_every_intermediate():
    # x * p and sin: f32[1000] each (4,000 bytes); the sum: f32[] (4 bytes). A nested jit's intermediates
    # count once (its outputs are its body's).
    loss = lambda p, x, y: jnp.sum(jax.jit(lambda v: jnp.sin(v) + 1.0)(x * p))
    x = jnp.zeros((5, 1000), jnp.float32)
    assert microbatch.forward_bytes(loss, jnp.float32(1.0), x, x) == 4000 + 4000 + 4000 + 4


def test_microbatch_sum_pads_with_real_rows_of_weight_zero():
    rows = jnp.arange(10.0)
    seen = []

    def fn(valid, r):
        seen.append(r.shape)
        return {"sum": jnp.sum(valid * r), "min": jnp.min(r), "count": jnp.sum(valid)}

    out = microbatch.microbatch_sum(fn, 4, rows)                            # 3 slices, 2 padding rows
    assert float(out["sum"]) == 45.0 and float(out["count"]) == 10.0
    assert float(out["min"]) == 0.0 + 4.0 + 0.0                             # the padding repeats rows 0 and 1
    assert seen[-1] == (4,)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "fast"])
def test_bad_microbatch_is_one_clear_error(bad):
    with pytest.raises(ValueError, match="microbatch must be"):
        clipped_grad_sum(LOSS, PARAMS, X, Y, MASK, 1.0, microbatch=bad)


def test_local_epochs_in_slices_equals_whole_batch():
    count = jnp.int32(N - 3)                                                   # 3 padding records at the end
    run = lambda mb: jax.jit(lambda p: local.local_epochs(LOSS, p, X, Y, count, jax.random.PRNGKey(5),
                                                          client_opt=optax.sgd(0.1), batch_size=9, epochs=2,
                                                          microbatch=mb))(PARAMS)
    (expected, loss_whole), (got, loss_sliced) = run(None), run(4)
    np.testing.assert_allclose(loss_sliced, loss_whole, rtol=1e-5)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6), expected, got)


def _scan_lengths(jaxpr) -> list[int]:
    """Lengths of every ``scan`` in a jaxpr, nested ones included."""
    lengths = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "scan":
            lengths.append(int(eqn.params["length"]))
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    lengths += _scan_lengths(inner)
    return lengths


@pytest.mark.parametrize("build", [
    "local_sgd", "minibatch_sgd", "dp_fedavg", "scaffold", "fedprox_spider",
    *(pytest.param(b, marks=pytest.mark.slow) for b in ("noisy_minibatch_sgd", "accelerated_minibatch_sgd",
                                                         "fedprox_svrg", "noisy_prox_sgd"))])
def test_algorithms_take_their_steps_in_the_slices_asked_for(build, small_data):
    """``microbatch=2`` on minibatches of 8 puts a 4-slice scan in the round (none without it) and moves the
    result by float rounding only; the privacy statement does not depend on it. Lowy & Razaviyayn's and Lowy et al.'s
    constructors (the last five) included."""
    from jaxfl.algorithms import accelerated, dp_fedavg, local_sgd, minibatch_sgd, noisy_sgd, scaffold, variance_reduced
    from jaxfl.engine import train
    from jaxfl.engine.driver import initial_state
    from jaxfl.models import init_linear, logistic_loss

    def make(mb):
        common = dict(batch_size=8, microbatch=mb)
        private = dict(clip_norm=1.0, noise_multiplier=0.7)
        return {"local_sgd": lambda: local_sgd(logistic_loss, client_opt=optax.sgd(0.1), local_steps=3, **private,
                                               **common),
                "minibatch_sgd": lambda: minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.1), **private, **common),
                "dp_fedavg": lambda: dp_fedavg(logistic_loss, client_opt=optax.sgd(0.1), local_steps=3,
                                               participation=poisson(0.5),
                                               expected_clients=2.0,
                                               **private, **common),
                "scaffold": lambda: scaffold(logistic_loss, client_opt=optax.sgd(0.1), local_steps=3, **common),
                "fedprox_spider": lambda: variance_reduced.fedprox_spider(logistic_loss, step_size=0.1, phase_length=2,
                                                                        **private, **common),
                "noisy_minibatch_sgd": lambda: noisy_sgd.noisy_minibatch_sgd(logistic_loss, step_size=0.1, **private,
                                                                               **common),
                "accelerated_minibatch_sgd": lambda: accelerated.accelerated_minibatch_sgd(
                    logistic_loss, schedule=accelerated.acsa_schedule(2, smoothness=1.0, noise_std=0.1, radius=1.0),
                    sampling="with_replacement", **private, **common),
                "fedprox_svrg": lambda: variance_reduced.fedprox_svrg(logistic_loss, step_size=0.1, epoch_length=2,
                                                                    **private, **common),
                "noisy_prox_sgd": lambda: variance_reduced.noisy_prox_sgd(
                    logistic_loss, step_size=0.1, sampling="with_replacement", **private, **common),
                }[build]()

    lengths = {}
    for mb in (None, 2):
        alg = make(mb)
        state = initial_state(alg, init_linear(5), small_data.num_silos)
        jaxpr = jax.make_jaxpr(alg.round)(state, small_data, jax.random.PRNGKey(0)).jaxpr
        lengths[mb] = _scan_lengths(jaxpr)
    assert 4 in lengths[2] and 4 not in lengths[None]
    whole, sliced = (train(make(mb), small_data, init_linear(5), rounds=2, key=1, progress=False).state.params
                     for mb in (None, 2))
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6), whole, sliced)
    counts = np.asarray(small_data.counts)
    privacy = [None if alg.privacy is None else alg.privacy(counts) for alg in (make(None), make(2))]
    assert privacy[0] == privacy[1]


def test_algorithm_constructors_reject_a_bad_microbatch():
    from jaxfl.algorithms import accelerated, dp_rec, local_sgd, noisy_sgd, variance_reduced
    from jaxfl.compression import rec
    from jaxfl.models import logistic_loss

    with pytest.raises(ValueError, match="microbatch must be"):
        local_sgd(logistic_loss, client_opt=optax.sgd(0.1), local_steps=2, batch_size=4, microbatch=0)
    with pytest.raises(ValueError, match="microbatch must be"):
        dp_rec(LOSS, params=PARAMS, client_opt=optax.sgd(0.1), participation=with_replacement(2), batch_size=4,
               prior_std=0.01,
               clip_multiplier=0.5, layout=rec.per_tensor(PARAMS, 3), microbatch="fast")
    with pytest.raises(ValueError, match="microbatch must be .* got -2"):
        noisy_sgd.noisy_minibatch_sgd(logistic_loss, step_size=0.1, batch_size=4, clip_norm=1.0, microbatch=-2)
    with pytest.raises(ValueError, match="microbatch must be .* got 0"):
        accelerated.accelerated_minibatch_sgd(logistic_loss, schedule=accelerated.acsa_schedule(
            2, smoothness=1.0, noise_std=0.1, radius=1.0), batch_size=4, clip_norm=1.0, microbatch=0)
    with pytest.raises(ValueError, match="microbatch must be .* got 0"):
        variance_reduced.fedprox_spider(logistic_loss, step_size=0.1, phase_length=2, clip_norm=1.0, microbatch=0)
    with pytest.raises(ValueError, match="microbatch must be .* got 0"):
        variance_reduced.fedprox_svrg(logistic_loss, step_size=0.1, batch_size=4, epoch_length=2, clip_norm=1.0,
                                    microbatch=0)
    with pytest.raises(ValueError, match="microbatch must be .* got 0"):
        variance_reduced.noisy_prox_gd(logistic_loss, step_size=0.1, clip_norm=1.0, microbatch=0)


def _fake_sysfs(root, caches):
    """``caches``: (level, type, size text) per ``index*`` folder, as Linux lists CPU 0's caches."""
    for i, (level, kind, size) in enumerate(caches):
        index = root / f"index{i}"
        index.mkdir(parents=True)
        (index / "level").write_text(f"{level}\n")
        (index / "type").write_text(f"{kind}\n")
        (index / "size").write_text(f"{size}\n")
    return root


@pytest.mark.parametrize("l3, expected_mib", [
    ("32768K", 12),      # the AMD EPYC VM: a third (10.7 MiB) is under the floor
    ("98304K", 32),      # a third of 96 MiB
    ("307200K", 48),     # the Intel Xeon VM: a third (100 MiB) is over the ceiling
    ("1G", 48),
])
def test_cache_budget_is_a_third_of_the_last_level_cache_within_its_bounds(tmp_path, l3, expected_mib):
    root = _fake_sysfs(tmp_path, [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"),
                                  (3, "Unified", l3)])
    assert microbatch.cache_budget_bytes(root) == expected_mib * 2**20


def test_cache_budget_uses_the_highest_level_present_and_the_floor_without_a_readable_cache(tmp_path):
    two_levels = _fake_sysfs(tmp_path / "l2", [(1, "Data", "32K"), (2, "Unified", "96M")])
    assert microbatch.cache_budget_bytes(two_levels) == 32 * 2**20            # no L3: the L2 is the last level
    assert microbatch.cache_budget_bytes(tmp_path / "missing") == microbatch.MIN_BUDGET_BYTES
    broken = _fake_sysfs(tmp_path / "broken", [(3, "Unified", "lots")])
    assert microbatch.cache_budget_bytes(broken) == microbatch.MIN_BUDGET_BYTES
    only_instructions = _fake_sysfs(tmp_path / "icache", [(1, "Instruction", "32K")])
    assert microbatch.cache_budget_bytes(only_instructions) == microbatch.MIN_BUDGET_BYTES


def test_cache_budget_reads_the_folder_the_environment_names(tmp_path, monkeypatch):
    _fake_sysfs(tmp_path, [(2, "Unified", "2048K"), (3, "Unified", "98304K")])
    monkeypatch.setenv(microbatch.CACHE_DIR_ENV, str(tmp_path))
    assert microbatch.cache_budget_bytes() == 32 * 2**20
    monkeypatch.setenv(microbatch.CACHE_DIR_ENV, str(tmp_path / "empty"))
    assert microbatch.cache_budget_bytes() == microbatch.MIN_BUDGET_BYTES
