"""Gaussian noise at the speed of memory? Normals per second of JAX's key implementations against NumPy.

Local SGD and SPIDER draw d-dimensional noise at every local step; drawn ahead in large blocks, the cost
is a generator's throughput. This measures, in one process on one block of ``--normals`` float32 normals
(default 2^24 = 64 MiB):

* jaxfl's noise generator, :func:`jaxfl.privacy.normal.standard_normal` (threefry2x32 on explicit
  counters, both output words used: two normals per hash; addressable and identical on 1 and N devices;
  the hash written in ``jax.numpy`` ops that XLA fuses with the normal transform), and the same samples
  with JAX's ``threefry2x32`` primitive as the hash (``jax.extend.random.threefry_2x32``, what the noise
  used before the fused hash),
* ``jax.random.normal`` under ``jit`` for each key implementation (threefry2x32, the default key, which
  folds the hash's two words into one normal; philox4x32; rbg; unsafe_rbg),
* NumPy's ``Generator.standard_normal(dtype=float32)`` (PCG64 + ziggurat: what a NumPy user calls),
* the machine's memory bandwidth for writing the same block (a jitted fill and ``np.copyto``), the
  ceiling a generator that only writes its output would reach.

Headline ``ratio``: NumPy seconds / jaxfl's generator's seconds per block. Rows give normals/s and
the fraction of the write bandwidth each generator reaches.

Usage: python bench/noise_rate.py [--normals 16777216] [--repeats 7] [--out bench/results/noise_rate.json]
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry_2x32

from jaxfl.studies.provenance import best_seconds, machine as processor, source_revision, write_benchmark
from jaxfl.privacy.normal import normal_from_bits, standard_normal

IMPLS = ("threefry2x32", "philox4x32", "rbg", "unsafe_rbg")


def primitive_normal_pairs(key_data, rows, pairs):
    """:func:`jaxfl.privacy.normal.normal_pairs`'s samples with JAX's ``threefry2x32`` primitive as the hash
    and no barrier: what jaxfl's noise used before the fused hash and DP-REC's encoder before 553f767."""
    rows, pairs = jnp.broadcast_arrays(jnp.asarray(rows).astype(jnp.uint32), jnp.asarray(pairs).astype(jnp.uint32))
    w0, w1 = threefry_2x32(key_data, jnp.stack([rows.ravel(), pairs.ravel()]))
    return normal_from_bits(w0).reshape(rows.shape), normal_from_bits(w1).reshape(rows.shape)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--normals", type=int, default=2**24)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "noise_rate.json"))
    args = parser.parse_args()
    n, nbytes = args.normals, 4 * args.normals

    fill = jax.jit(lambda v: jnp.full((n,), v, jnp.float32))
    src, dst = np.ones(n, np.float32), np.empty(n, np.float32)
    write = {"jax_fill": best_seconds(lambda: fill(1.0).block_until_ready(), repeats=args.repeats),
             "numpy_copyto": best_seconds(lambda: np.copyto(dst, src), repeats=args.repeats)}
    bandwidth = nbytes / write["jax_fill"]                         # bytes written per second

    def make_row(name, seconds):
        return {"generator": name, "seconds": seconds, "normals_per_second": n / seconds,
                "fraction_of_write_bandwidth": (nbytes / seconds) / bandwidth}

    key = jax.random.key(0)
    ours = jax.jit(lambda k: standard_normal(k, (n,)))
    rows = [make_row("jaxfl.privacy.normal.standard_normal (threefry2x32, both words; jaxfl's noise)",
                     best_seconds(lambda: ours(key).block_until_ready(), repeats=args.repeats))]

    def primitive_hash(k):
        even, odd = primitive_normal_pairs(jax.random.key_data(k), 0, jnp.arange(n // 2, dtype=jnp.uint32))
        return jnp.stack([even, odd], axis=-1).reshape(-1)

    primitive = jax.jit(primitive_hash)
    if n % 2 == 0 and not bool(jnp.all(primitive(key) == ours(key))):
        raise RuntimeError("the primitive hash's samples differ from jaxfl's generator's")
    rows.append(make_row("the same samples, hashed by JAX's threefry2x32 primitive (jaxfl's noise before the fused "
                         "hash)", best_seconds(lambda: primitive(key).block_until_ready(), repeats=args.repeats)))
    for impl in IMPLS:
        key = jax.random.key(0, impl=impl)
        draw = jax.jit(lambda k: jax.random.normal(k, (n,), jnp.float32))
        seconds = best_seconds(lambda: draw(key).block_until_ready(), repeats=args.repeats)
        rows.append(make_row(f"jax.random.normal, {impl}" + (" (the default key)" if impl == "threefry2x32" else ""),
                        seconds))
    rng = np.random.default_rng(0)  # host-rng-ok: the NumPy baseline's own generator
    numpy_seconds = best_seconds(lambda: rng.standard_normal(n, dtype=np.float32), repeats=args.repeats)
    rows.append(make_row("NumPy Generator.standard_normal (PCG64, ziggurat), float32", numpy_seconds))
    default = rows[0]["seconds"]
    record = {
        "benchmark": "noise_rate",
        "machine": {**processor(), "cores": os.cpu_count(),
                    "device": jax.default_backend(), "jax": jax.__version__, "numpy": np.__version__,
                    "load_average_1min": os.getloadavg()[0]},
        "ratio": numpy_seconds / default,
        "baseline": "NumPy Generator.standard_normal(dtype=float32) on the same block, same process; ratio = NumPy "
                    "seconds / jaxfl.privacy.normal.standard_normal (the generator of jaxfl's privacy noise) "
                    "seconds, best of repeats",
        "normals": n, "repeats": args.repeats,
        "write_bandwidth": {"bytes_per_second_jax_fill": bandwidth,
                            "bytes_per_second_numpy_copyto_read_plus_write": 2 * nbytes / write["numpy_copyto"],
                            "seconds": write},
        "rows": rows,
    }
    out = write_benchmark(record, args.out)
    print(f"block of {n:,} float32 normals ({nbytes / 2**20:.0f} MiB); write bandwidth {bandwidth / 1e9:.1f} GB/s "
          f"(jitted fill)")
    for row in rows:
        print(f"  {row['generator']:80s} {row['seconds'] * 1e3:8.1f} ms  {row['normals_per_second'] / 1e6:8.1f} M/s  "
              f"{100 * row['fraction_of_write_bandwidth']:5.1f} % of write bandwidth")
    print(f"headline ratio (NumPy / jaxfl's noise): {record['ratio']:.2f}x   -> {out}")


if __name__ == "__main__":
    source_revision()   # the checkout as it is now: write_benchmark records it at the end
    main()
