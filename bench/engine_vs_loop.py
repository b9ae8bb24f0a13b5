"""jaxfl's compiled rounds against vectorized NumPy at Lowy & Razaviyayn's MNIST shape.

Shape: 25 silos x 1238 records x 50 features (MNIST, PCA-50, (even, odd) digit-pair silos),
minibatch 443 drawn with replacement per silo, per-example clipping + Gaussian noise, 35 rounds,
all 25 silos per round. Every side runs in this process on the same data with the same
hyperparameters. The headline baseline is the strongest NumPy a competent user would write, and the one
``bench/lowy_convex_grid.py`` times (its ``silo_vectorised_mbsgd``): vectorized over the silos *and* each
minibatch (one flat ``take`` of every silo's draws per round), the logistic gradient's closed forms (example
``j``'s gradient ``a_j x_j``, its norm ``|a_j| ||x_j||`` from row norms computed once), one product per round
for the clipped means, looping only over rounds. Two weaker baselines are extra rows, named as such: the same
vectorization with fancy indexing and the per-example gradients materialised (this benchmark's headline
until 2026-11-27, 3-4x slower than the one above), and the silo loop of Lowy & Razaviyayn's authors' scripts
(vectorized within each minibatch). Beside the times, the run's arithmetic (flops and bytes
touched) is printed with what it would cost at this machine's measured float32 GEMM rate and memory
bandwidth: a floor no implementation reaches, to show how far each side is from it.

Usage: python bench/engine_vs_loop.py [--repeats 21] [--out bench/results/engine_vs_loop.json]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxfl.accounting import sgd_noise
from jaxfl.algorithms import minibatch_sgd
from jaxfl.data import load_mnist, partition, preprocess
from jaxfl.engine import local, run_rounds
from jaxfl.studies.provenance import machine as processor, source_revision, write_benchmark
from jaxfl.privacy import keys as keys_lib
from jaxfl.privacy.clipping import clipped_grad_sum

SILOS, RECORDS, FEATURES, BATCH, ROUNDS = 25, 1238, 50, 443, 35
EPSILON = 1.5  # one point of the paper's grid; only sets the noise scale
STEP_SIZE = 0.5


def mnist_silos(seed: int = 0):
    """Lowy & Razaviyayn's MNIST silos: PCA-50 of [0,1] pixels, 774 images per digit, 25 digit-pair silos,
    80/20 split -> 1238 training records per silo; label 1 for even digits."""
    x, y = load_mnist("train")
    x = x.reshape(len(x), -1).astype(np.float32) / 255.0
    x, _ = preprocess.pca(x, dim=FEATURES)
    fd = partition.label_pairs(x, y, per_label=774, seed=seed, relabel=lambda d: (d % 2 == 0).astype(np.int32))
    train, _ = partition.train_test_split_per_silo(fd, 0.2, seed=seed)
    return train


def loss(params, x, y):
    """Lowy & Razaviyayn's logistic loss: no bias, logit clipped to [-15, 15]."""
    return optax.sigmoid_binary_cross_entropy(jnp.clip(x @ params["w"], -15.0, 15.0), y.astype(jnp.float32))


def strongest_numpy():
    """``bench/lowy_convex_grid.py``'s headline NumPy noisy MB-SGD (``silo_vectorised_mbsgd(x, y, n, *, rounds,
    batch, lr, sigma, clip, rng)``), imported as a module."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import lowy_convex_grid
    return lowy_convex_grid.silo_vectorised_mbsgd


def numpy_noisy_mbsgd_vectorized(x, y, *, rounds, batch, clip, sigma, lr, rng):
    """A weaker NumPy baseline (this benchmark's headline until 2026-11-27): loops over rounds only; each
    round's minibatches of every silo are one ``[silos, batch, features]`` fancy-indexed gather, their
    per-example gradients materialised, clipped and averaged in whole-array operations."""
    silos, n, d = x.shape
    w = np.zeros(d, np.float32)
    rows = np.arange(silos)[:, None]
    for _ in range(rounds):
        idx = rng.integers(0, n, (silos, batch))
        xb, yb = x[rows, idx], y[rows, idx]                                  # [S, B, d], [S, B]
        s = 1.0 / (1.0 + np.exp(-np.clip(xb @ w, -15.0, 15.0)))
        g = (s - yb)[..., None] * xb
        norms = np.sqrt(np.einsum("sbd,sbd->sb", g, g))
        g *= np.minimum(1.0, clip / np.maximum(norms, 1e-12))[..., None]
        noisy = g.mean(axis=1) + sigma * rng.standard_normal((silos, d)).astype(np.float32)
        w -= lr * noisy.mean(axis=0)
    return w


def numpy_noisy_mbsgd(x, y, *, rounds, batch, clip, sigma, lr, rng):
    """The authors' scripts' structure (an extra, weaker baseline): loops over rounds and silos,
    vectorized within each minibatch."""
    silos, n, d = x.shape
    w = np.zeros(d, np.float32)
    for _ in range(rounds):
        total = np.zeros(d, np.float32)
        for i in range(silos):
            idx = rng.integers(0, n, batch)
            xb, yb = x[i, idx], y[i, idx]
            s = 1.0 / (1.0 + np.exp(-np.clip(xb @ w, -15.0, 15.0)))
            g = (s - yb)[:, None] * xb
            norms = np.sqrt(np.einsum("ij,ij->i", g, g))
            g *= np.minimum(1.0, clip / np.maximum(norms, 1e-12))[:, None]
            total += g.mean(axis=0) + sigma * rng.standard_normal(d).astype(np.float32)
        w -= lr * total / silos
    return w


def machine_rates(size: int = 1024, mib: int = 4) -> dict:
    """This machine's float32 GEMM rate (flop/s, NumPy's BLAS) and cache-resident copy bandwidth (bytes/s,
    read + write, ``mib`` MiB blocks: one run's working set -- a [443, 50] minibatch, the 6 MiB data --
    stays in cache), best of 5."""
    a = np.ones((size, size), np.float32)
    src, dst = np.ones(mib * 2**20 // 4, np.float32), np.empty(mib * 2**20 // 4, np.float32)
    gemm, copy = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        a @ a
        gemm.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(10):
            np.copyto(dst, src)
        copy.append((time.perf_counter() - t0) / 10)
    return {"gemm_flops_per_second": 2 * size**3 / min(gemm), "copy_bytes_per_second": 2 * src.nbytes / min(copy)}


def arithmetic(rates: dict) -> dict:
    """One run's work: per round and silo, the minibatch's logits (2Bd flops), per-example gradients
    (Bd), their norms (2Bd), clipping (Bd) and mean (Bd): ~7 B d flops; bytes: the gathered ``[B, d]``
    float32 minibatch read once and the gradient block written and read back (3 B d 4 bytes). The
    floor is the larger of flops / GEMM rate and bytes / cache bandwidth: an estimate of what no
    implementation beats, not a measurement of one."""
    per = ROUNDS * SILOS * BATCH * FEATURES
    flops, nbytes = 7 * per, 3 * 4 * per
    compute, memory = flops / rates["gemm_flops_per_second"], nbytes / rates["copy_bytes_per_second"]
    return {"flops": flops, "bytes": nbytes, "floor_compute_seconds": compute, "floor_memory_seconds": memory,
            "floor_seconds": max(compute, memory), **rates}


def component_programs(x, y, clip: float) -> dict:
    """Parts of one jaxfl run as separate jitted programs, to show where its time goes: the run's index
    draws (the engine's keys and sampler), the minibatch gathers alone (each round's
    ``[silos, batch, features]`` gather, summed over the batch so it is not optimised away) and the
    gathers with the library's clipped sums (``clipped_grad_sum`` per silo and round, a scalar step
    between rounds), the latter two on indices drawn once beforehand."""

    sampler = local.make_sampler(batch_size=BATCH)

    def draw_indices(root):
        def one_round(r):
            round_key = keys_lib.round_key(root, r)
            return jax.vmap(lambda s: sampler.draw(
                keys_lib.derive_from_round(round_key, silo=s, step=0, purpose=keys_lib.Purpose.MINIBATCH),
                jnp.int32(RECORDS), RECORDS))(jnp.arange(SILOS))
        return jax.vmap(one_round)(jnp.arange(ROUNDS))

    def over_rounds(per_silo):
        def run(idx):
            def one_round(w, i):
                return w - 1e-3 * jax.vmap(lambda xs, ys, ii: per_silo(w, xs, ys, ii))(x, y, i).mean(0), None
            return jax.lax.scan(one_round, jnp.zeros(FEATURES, jnp.float32), idx)[0]
        return jax.jit(run)

    return {
        "index draws": jax.jit(draw_indices),
        "gathers": over_rounds(lambda w, xs, ys, ii: jnp.sum(xs[ii], axis=0)),
        "gathers + clipped sums": over_rounds(
            lambda w, xs, ys, ii: clipped_grad_sum(loss, {"w": w}, xs[ii], ys[ii], jnp.ones(BATCH), clip).value["w"]),
    }


def interleaved(contenders: dict, repeats: int) -> dict:
    """Seconds per call of each contender, timed round-robin ``repeats`` times."""
    times = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--seeds", type=int, default=20, help="runs in the vmapped batch row")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "engine_vs_loop.json"))
    args = parser.parse_args()

    data = mnist_silos()
    assert data.x.shape == (SILOS, RECORDS, FEATURES), data.x.shape
    x_host, y_host = np.asarray(data.x), np.asarray(data.y).astype(np.float32)
    n = RECORDS
    delta = 1.0 / n**2
    clip = float(np.max(np.linalg.norm(x_host, axis=-1)))  # logistic gradients have norm <= ||x||
    lipschitz = 2 * clip  # Lowy & Razaviyayn's L = 2 max ||x||
    # Lowy & Razaviyayn's experimental noise on each silo's mean gradient, and jaxfl's multiplier for it.
    sigma = sgd_noise.sigma_experiment_mbsgd(lipschitz, n, ROUNDS, EPSILON, delta)
    noise_multiplier = sgd_noise.noise_multiplier_from_sigma(sigma, clip, BATCH)

    algorithm = minibatch_sgd(loss, server_opt=optax.sgd(STEP_SIZE), batch_size=BATCH, clip_norm=clip,
                              noise_multiplier=noise_multiplier)
    params = {"w": jnp.zeros(FEATURES, jnp.float32)}

    def one_run(key):
        state, _ = run_rounds(algorithm, algorithm.init(params), data, key, 0, ROUNDS)
        return state.params["w"]

    single = jax.jit(one_run)
    batched = jax.jit(jax.vmap(one_run))
    key = jax.random.key(0)
    batch_keys = jax.random.split(key, args.seeds)

    t0 = time.perf_counter()
    single(key).block_until_ready()
    compile_single = time.perf_counter() - t0
    t0 = time.perf_counter()
    batched(batch_keys).block_until_ready()
    compile_batched = time.perf_counter() - t0

    rng = np.random.default_rng(0)  # host-rng-ok: the NumPy baselines' own generator
    numpy_strong = strongest_numpy()
    contenders = {
        "numpy": lambda: numpy_strong(x_host, y_host, n, rounds=ROUNDS, batch=BATCH, lr=STEP_SIZE, sigma=sigma,
                                      clip=clip, rng=rng),
        "numpy_materialised": lambda: numpy_noisy_mbsgd_vectorized(x_host, y_host, rounds=ROUNDS, batch=BATCH,
                                                                   clip=clip, sigma=sigma, lr=STEP_SIZE, rng=rng),
        "numpy_silo_loop": lambda: numpy_noisy_mbsgd(x_host, y_host, rounds=ROUNDS, batch=BATCH, clip=clip,
                                                     sigma=sigma, lr=STEP_SIZE, rng=rng),
        "jaxfl": lambda: single(key).block_until_ready(),
        # The same program keyed with JAX's Philox generator instead of the default threefry, whose CPU
        # lowering is a rolled loop (several small kernels per hash); single-device only in JAX 0.10.
        "jaxfl_philox": lambda: single(philox_key).block_until_ready(),
        "jaxfl_vmapped": lambda: batched(batch_keys).block_until_ready(),
    }
    philox_key = jax.random.key(0, impl="philox4x32")
    single(philox_key).block_until_ready()
    parts = component_programs(jnp.asarray(x_host), jnp.asarray(y_host), clip)
    indices = parts["index draws"](key).block_until_ready()
    part_args = {"index draws": key, "gathers": indices, "gathers + clipped sums": indices}
    for name, fn in parts.items():
        fn(part_args[name]).block_until_ready()
        contenders[f"part: {name}"] = lambda fn=fn, a=part_args[name]: fn(a).block_until_ready()
    times = interleaved(contenders, args.repeats)
    np_best, np_median = min(times["numpy"]), statistics.median(times["numpy"])
    loop_best, loop_median = min(times["numpy_silo_loop"]), statistics.median(times["numpy_silo_loop"])
    mat_best, mat_median = min(times["numpy_materialised"]), statistics.median(times["numpy_materialised"])
    work = arithmetic(machine_rates())
    jax_best, jax_median = min(times["jaxfl"]), statistics.median(times["jaxfl"])
    philox_best = min(times["jaxfl_philox"])
    vmap_best = min(times["jaxfl_vmapped"])
    # Each repeat times every contender back to back, so the per-repeat ratio sees one machine state;
    # its median is the headline (this VM's speed drifts by up to 2x between minutes).
    paired = statistics.median(n / j for n, j in zip(times["numpy"], times["jaxfl"]))

    # Same algorithm on both sides: the final models' losses agree up to the noise.
    w_jax = np.asarray(single(key))
    w_np = numpy_strong(x_host, y_host, n, rounds=ROUNDS, batch=BATCH, lr=STEP_SIZE, sigma=sigma, clip=clip,
                        rng=rng)
    w_mat = numpy_noisy_mbsgd_vectorized(x_host, y_host, rounds=ROUNDS, batch=BATCH, clip=clip, sigma=sigma,
                                         lr=STEP_SIZE, rng=rng)
    w_loop = numpy_noisy_mbsgd(x_host, y_host, rounds=ROUNDS, batch=BATCH, clip=clip, sigma=sigma, lr=STEP_SIZE,
                               rng=rng)
    def train_loss(w):
        z = np.clip(x_host.reshape(-1, FEATURES) @ w, -15, 15)
        yy = y_host.reshape(-1)
        return float(np.mean(np.logaddexp(0, z) - yy * z))

    ratio = paired
    per_run_vmapped = vmap_best / args.seeds
    record = {
        "benchmark": "engine_vs_loop",
        "machine": {**processor(), "cores": os.cpu_count(),
                    "device": jax.default_backend(), "jax": jax.__version__, "numpy": np.__version__},
        "ratio": ratio,
        "baseline": "NumPy noisy MB-SGD vectorized over the 25 silos and each minibatch (one flat take per round, "
                    "closed-form per-example norms from row norms computed once, one product for the clipped means: "
                    "bench/lowy_convex_grid.py's silo_vectorised_mbsgd), looping over the 35 rounds only (same "
                    "process, same data and hyperparameters; ratio = median over repeats of the NumPy/jaxfl time "
                    "ratio, each repeat timing every contender back to back). Weaker baselines in rows",
        "repeats": args.repeats,
        "shape": {"silos": SILOS, "records": RECORDS, "features": FEATURES, "batch": BATCH, "rounds": ROUNDS},
        "rows": [
            {"setting": "one run, steady state (best)", "numpy_seconds": np_best, "jaxfl_seconds": jax_best,
             "ratio": np_best / jax_best},
            {"setting": "one run, steady state (median)", "numpy_seconds": np_median, "jaxfl_seconds": jax_median,
             "ratio": np_median / jax_median},
            {"setting": "weaker baseline: NumPy vectorized, fancy-indexed gather and materialised per-example "
                        "gradients (the headline until 2026-11-27), one run (best)",
             "numpy_seconds": mat_best, "jaxfl_seconds": jax_best, "ratio": mat_best / jax_best},
            {"setting": "weaker baseline: NumPy vectorized, materialised gradients, one run (median)",
             "numpy_seconds": mat_median, "jaxfl_seconds": jax_median, "ratio": mat_median / jax_median},
            {"setting": "weaker baseline: NumPy silo loop (the authors' scripts' structure), one run (best)",
             "numpy_seconds": loop_best, "jaxfl_seconds": jax_best, "ratio": loop_best / jax_best},
            {"setting": "weaker baseline: NumPy silo loop, one run (median)", "numpy_seconds": loop_median,
             "jaxfl_seconds": jax_median, "ratio": loop_median / jax_median},
            {"setting": "one run, Philox keys instead of threefry (best)", "numpy_seconds": np_best,
             "jaxfl_seconds": philox_best, "ratio": np_best / philox_best},
            {"setting": "one run, first call incl. compile", "numpy_seconds": np_best,
             "jaxfl_seconds": compile_single, "ratio": np_best / compile_single},
            {"setting": f"{args.seeds} runs vmapped in one program, per run (best)", "numpy_seconds": np_best,
             "jaxfl_seconds": per_run_vmapped, "ratio": np_best / per_run_vmapped,
             "compile_seconds": compile_batched},
        ],
        "components": {
            "seconds_best": {name: min(times[f"part: {name}"]) for name in parts},
            "note": "parts of one jaxfl run (best of the repeats, interleaved with the contenders), each its own "
                    "jitted program: the run's index draws; the minibatch gathers alone (summed per batch); the "
                    "gathers with the library's clipped sums. The one-run time less 'gathers + clipped sums' "
                    "leaves the draws, the noise and the update; compare each with the 10x target "
                    "(NumPy best / 10)",
        },
        "arithmetic": {**work, "note": "one run's flops and bytes and the floor max(flops / GEMM rate, bytes / "
                                         "bandwidth) on this machine: what no implementation beats"},
        "check": {"train_loss_jaxfl": train_loss(w_jax), "train_loss_numpy": train_loss(w_np),
                  "train_loss_numpy_materialised": train_loss(w_mat),
                  "train_loss_numpy_silo_loop": train_loss(w_loop),
                  "train_loss_at_zero": train_loss(np.zeros(FEATURES, np.float32))},
    }
    out = write_benchmark(record, args.out)
    for row in record["rows"]:
        print(f"{row['setting']:50s} numpy {row['numpy_seconds']*1e3:8.2f} ms   "
              f"jaxfl {row['jaxfl_seconds']*1e3:8.2f} ms"
              f"   ratio {row['ratio']:7.1f}x")
    print(f"headline ratio (median of paired vectorized-NumPy / jaxfl times, one run, steady state): {ratio:.1f}x"
          f"   -> {out}")
    print(f"one run's arithmetic: {work['flops'] / 1e6:.0f} Mflop, {work['bytes'] / 2**20:.0f} MiB touched; floor "
          f"{work['floor_seconds'] * 1e3:.2f} ms at {work['gemm_flops_per_second'] / 1e9:.0f} Gflop/s GEMM and "
          f"{work['copy_bytes_per_second'] / 1e9:.1f} GB/s cache-resident copy  (jaxfl best {jax_best * 1e3:.2f} ms, "
          f"NumPy best {np_best * 1e3:.2f} ms)")
    print("parts of one jaxfl run (best): " + ", ".join(
        f"{name} {sec * 1e3:.2f} ms" for name, sec in record["components"]["seconds_best"].items())
        + f"   (10x target: {np_best / 10 * 1e3:.2f} ms)")
    print("final training loss: jaxfl {train_loss_jaxfl:.4f}  numpy {train_loss_numpy:.4f}  numpy materialised "
          "{train_loss_numpy_materialised:.4f}  numpy silo loop "
          "{train_loss_numpy_silo_loop:.4f}  (w = 0: {train_loss_at_zero:.4f})".format(**record["check"]))


if __name__ == "__main__":
    source_revision()   # the checkout as it is now: write_benchmark records it at the end
    main()
