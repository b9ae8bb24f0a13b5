"""DP-REC's fused encoder against bare ``jax.random.normal`` and a materializing encoder.

For one block of ``d`` parameters and ``K = 2**bits`` codebook rows, three programs run side by side in
this process, each jitted and timed after a warm-up (best of ``--repeats``):

- ``fused``: :func:`jaxfl.compression.rec.encode` (scores streamed tile by tile + Gumbel-max);
- ``bare_normal``: ``jax.random.normal(key, (K, d))``, just generating the same number of normals;
- ``naive``: the materializing encoder (:func:`jaxfl.compression.rec.naive_block_logits`: the whole
  ``K x d`` prior sample, then the log-density ratio) + Gumbel-max.

``ratio`` (the headline) is ``bare_normal seconds / fused seconds`` at the largest ``d``: encoding
throughput relative to generating the samples alone (target >= 0.7; above 1 the encoder is faster than
``jax.random.normal`` itself). Memory per program: XLA's compiled allocation (arguments + outputs +
temporaries) and, in a fresh subprocess, the measured rise of the process's peak resident set
(``resource.getrusage``'s ``ru_maxrss``) during the program's first run after compilation; the rise is
only what the run adds above the peak compilation reached, so it is a lower bound and the XLA figure is
the one of record. A batched row encodes ``B``
clients of one MNIST LeNet-5 update (582,026 parameters, 8 tensors, 7 bits each) under ``vmap``, interleaved
with the same encoder hashing its tiles by JAX's ``threefry2x32`` primitive (the encoder before 553f767,
``seconds_primitive_hash``), and checks that the two choose the same indices.

Usage: python bench/rec_kernel.py [--sizes 10000 100000 1000000] [--bits 7] [--repeats 5]
                                  [--out bench/results/rec_kernel.json]
"""
from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
from unittest import mock

try:
    import resource  # POSIX only
except ImportError:  # Windows: no peak-RSS figure
    resource = None

import jax
import jax.numpy as jnp

from jaxfl.compression import rec
from jaxfl.studies.provenance import best_seconds, machine as processor, source_revision, write_benchmark
from jaxfl.privacy import normal

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # the sibling benchmark, under `jaxfl bench` too
from noise_rate import primitive_normal_pairs

SIGMA = 0.005
LENET5_TENSORS = (800, 32, 51200, 64, 524288, 512, 5120, 10)  # MnistLeNet5's leaves, 582,026 parameters


def programs(layout: rec.BlockLayout):
    rows = 2 ** layout.bits[0]

    def fused(mu, seed, key):
        return rec.encode(mu, seed, key, layout, SIGMA)

    def naive(mu, seed, key):
        logits = rec.naive_block_logits(mu, seed, layout, SIGMA)
        return jnp.stack([jnp.argmax(l + jax.random.gumbel(jax.random.fold_in(key, m), l.shape))
                          for m, l in enumerate(logits)])

    def bare(mu, seed, key):
        del seed
        return jax.random.normal(key, (rows, mu.shape[0]))

    return {"fused": fused, "naive": naive, "bare_normal": bare}


def inputs(size: int):
    return (jax.random.normal(jax.random.PRNGKey(0), (size,)) * SIGMA, jnp.uint32(7), jax.random.PRNGKey(1))


def compiled_bytes(fn, args) -> int:
    stats = jax.jit(fn).lower(*args).compile().memory_analysis()
    return int(stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes
               - stats.alias_size_in_bytes)


def _max_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB on Linux


def measure_peak_rss(program: str, size: int, bits: int) -> int:
    """Child-process entry: bytes the peak RSS rises by during ``program``'s first run after compiling."""
    layout = rec.whole(size, bits)
    args = jax.block_until_ready(inputs(size))
    compiled = jax.jit(programs(layout)[program]).lower(*args).compile()
    before = _max_rss_bytes()
    jax.block_until_ready(compiled(*args))
    return _max_rss_bytes() - before


def peak_rss_in_subprocess(program: str, size: int, bits: int) -> int | None:
    if resource is None:
        return None
    out = subprocess.run([sys.executable, __file__, "--child", program, str(size), str(bits)], check=True,
                         capture_output=True, text=True).stdout
    return int(out.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--bits", type=int, default=7)
    parser.add_argument("--clients", type=int, default=10, help="B for the batched LeNet-5 row")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="bench/results/rec_kernel.json")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(measure_peak_rss(args.child[0], int(args.child[1]), int(args.child[2])))
        return 0

    # Peak-RSS children first: on Linux a child's ru_maxrss starts at the RSS of the process that spawned
    # it, so they must be spawned before this process runs the large programs.
    rss_by_size = {size: {name: peak_rss_in_subprocess(name, size, args.bits) for name in ("fused", "naive")}
                   for size in args.sizes}
    rows = []
    print(f"{'d':>9} {'K':>5} | {'fused s':>8} {'bare s':>8} {'naive s':>8} | {'bare/fused':>10} "
          f"{'naive/fused':>11} | {'fused MiB':>9} {'naive MiB':>9} {'block MiB':>9} | "
          f"{'fused RSS':>9} {'naive RSS':>9}")
    for size in args.sizes:
        layout = rec.whole(size, args.bits)
        fns = {name: jax.jit(fn) for name, fn in programs(layout).items()}
        data = inputs(size)
        secs = {name: best_seconds(fn, *data, repeats=args.repeats) for name, fn in fns.items()}
        xla = {name: compiled_bytes(fn, data) for name, fn in programs(layout).items()}
        rss = rss_by_size[size]
        block = 4 * size
        row = {"d": size, "K": 2**args.bits, "seconds": secs,
               "ratio_bare_over_fused": secs["bare_normal"] / secs["fused"],
               "ratio_naive_over_fused": secs["naive"] / secs["fused"],
               "normals_per_second_fused": 2**args.bits * size / secs["fused"],
               "block_bytes": block, "xla_bytes": xla, "peak_rss_rise_bytes": rss,
               "fused_xla_over_block": xla["fused"] / block,
               "fused_rss_over_block": None if rss["fused"] is None else rss["fused"] / block}
        rows.append(row)
        mib = lambda b: "n/a" if b is None else f"{b / 2**20:.1f}"
        print(f"{size:>9} {2**args.bits:>5} | "
              f"{secs['fused']:>8.3f} {secs['bare_normal']:>8.3f} {secs['naive']:>8.3f} | "
              f"{row['ratio_bare_over_fused']:>10.2f} {row['ratio_naive_over_fused']:>11.2f} | "
              f"{mib(xla['fused']):>9} {mib(xla['naive']):>9} {mib(block):>9} | "
              f"{mib(rss['fused']):>9} {mib(rss['naive']):>9}")

    lenet = rec.BlockLayout(LENET5_TENSORS, (args.bits,) * len(LENET5_TENSORS))
    b = args.clients
    batched = jax.jit(jax.vmap(lambda m, s, k: rec.encode(m, s, k, lenet, SIGMA)))
    bare_batched = jax.jit(lambda k: jax.random.normal(k, (b, 2**args.bits, lenet.size)))
    mus = jax.random.normal(jax.random.PRNGKey(0), (b, lenet.size)) * SIGMA
    seeds = jnp.arange(b, dtype=jnp.uint32)
    keys = jax.random.split(jax.random.PRNGKey(1), b)
    # the same encoder with its tiles hashed by JAX's threefry primitive (the encoder before 553f767): traced
    # with normal_pairs swapped for the primitive version, so it is its own compiled program
    with mock.patch.object(normal, "normal_pairs", primitive_normal_pairs):
        batched_primitive = jax.jit(jax.vmap(lambda m, s, k: rec.encode(m, s, k, lenet, SIGMA))).lower(
            mus, seeds, keys).compile()
    same = bool(jnp.array_equal(batched(mus, seeds, keys), batched_primitive(mus, seeds, keys)))
    t_batched = t_primitive = math.inf
    for _ in range(max(1, args.repeats // 2)):   # the two encoders interleaved, best of each
        t_batched = min(t_batched, best_seconds(batched, mus, seeds, keys, repeats=1, warmup=False))
        t_primitive = min(t_primitive, best_seconds(batched_primitive, mus, seeds, keys, repeats=1, warmup=False))
    t_bare = best_seconds(bare_batched, jax.random.PRNGKey(2), repeats=max(1, args.repeats // 2))
    lenet_row = {"model": "MnistLeNet5 (582,026 params, 8 tensors)", "clients": b, "K": 2**args.bits,
                 "seconds_fused": t_batched, "seconds_bare_normal": t_bare, "ratio_bare_over_fused": t_bare / t_batched,
                 "seconds_primitive_hash": t_primitive, "ratio_primitive_hash_over_fused": t_primitive / t_batched,
                 "primitive_hash_same_indices": same}
    print(f"LeNet-5 x {b} clients (vmap): fused {t_batched:.2f} s, bare normal {t_bare:.2f} s, "
          f"ratio {t_bare / t_batched:.2f}; with the primitive hash {t_primitive:.2f} s "
          f"({t_primitive / t_batched:.2f}x the fused; same indices: {same})")

    record = {
        "benchmark": "rec_kernel",
        "machine": {**processor(), "cores": os.cpu_count(),
                    "device": jax.devices()[0].platform, "jax": jax.__version__},
        "ratio": rows[-1]["ratio_bare_over_fused"],
        "baseline": f"jax.random.normal generating the same K x d = {2**args.bits} x {rows[-1]['d']} samples",
        "rows": rows, "batched": lenet_row,
        "notes": "ratio = bare normal seconds / fused encode seconds (>= 0.7 is the target; > 1: faster than "
                 "jax.random.normal). xla_bytes = compiled arguments + outputs + temporaries; "
                 "peak_rss_rise_bytes = rise of the peak RSS (ru_maxrss) during the first run after compiling, in "
                 "a fresh process; only what the run adds above the peak compilation reached, a lower bound, so "
                 "xla_bytes is the figure of record.",
    }
    out = write_benchmark(record, args.out)
    print(f"ratio (bare / fused, d = {rows[-1]['d']}): {record['ratio']:.2f}; wrote {out}")
    return 0


if __name__ == "__main__":
    source_revision()   # the checkout as it is now: write_benchmark records it at the end
    raise SystemExit(main())
