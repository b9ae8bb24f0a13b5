"""What secure noise costs: a clipped sum released with lattice discrete Gaussian noise against float noise.

One process, one machine, for each model size ``d`` (default 16,384 and 1,048,576 parameters), jitted, best of
``--repeats``:

* default: :func:`jaxfl.privacy.noise.noisy_clipped_mean` with :func:`jaxfl.privacy.noise.unit_noise_like` (float32
  Gaussian noise: what every jaxfl algorithm adds; open to floating-point attacks),
* secure: :meth:`jaxfl.privacy.secure.LatticeGaussian.release` (rounding to the lattice, 96 random bits and a
  binary search of the discrete Gaussian's table a coordinate),

at noise multiplier 1 and clip 1 (the table grows with ``z sqrt(d)``; its one-time host build is reported apart).
Headline ``ratio`` (the benchmarks' convention, > 1 when the measured side is faster): default seconds / secure
seconds at the largest ``d``; each row also gives the slowdown, its inverse.

Usage: python bench/secure_noise.py [--dims 16384 1048576] [--repeats 7] [--out bench/results/secure_noise.json]
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxfl.studies.provenance import best_seconds, machine as processor, source_revision, write_benchmark
from jaxfl.privacy.noise import noisy_clipped_mean, unit_noise_like
from jaxfl.privacy.secure import LatticeGaussian, discrete_gaussian_table


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[2 ** 14, 2 ** 20])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "secure_noise.json"))
    args = parser.parse_args()
    rows = []
    for d in args.dims:
        clipped_sum = jnp.asarray(np.random.default_rng(0).standard_normal(d), jnp.float32)  # host-rng-ok: data
        key = jax.random.key(0)
        default = jax.jit(lambda k, s: noisy_clipped_mean(s, unit_noise_like(k, s, 1.0), clip_norm=1.0,
                                                          noise_multiplier=1.0, denominator=1.0))
        lattice = LatticeGaussian(clip_norm=1.0, noise_multiplier=1.0, dim=d)
        start = time.perf_counter()
        table = discrete_gaussian_table(lattice.scale)[0]
        table_seconds = time.perf_counter() - start
        secure = jax.jit(lattice.release)
        row = {"dim": d, "default_seconds": best_seconds(default, key, clipped_sum, repeats=args.repeats),
               "secure_seconds": best_seconds(secure, key, clipped_sum, repeats=args.repeats),
               "table_build_seconds": table_seconds, "table_entries": int(table.shape[0]),
               "table_bytes": int(table.nbytes), "lattice_step": lattice.step,
               "equivalent_noise_multiplier": lattice.equivalent_noise_multiplier()}
        row["slowdown"] = row["secure_seconds"] / row["default_seconds"]
        rows.append(row)
        print(f"d = {d:>9,}: default {row['default_seconds'] * 1e3:8.2f} ms, "
              f"secure {row['secure_seconds'] * 1e3:8.2f} ms "
              f"({row['slowdown']:.1f}x slower); table {row['table_entries']:,} entries built in {table_seconds:.1f} s")
    record = {
        "benchmark": "secure_noise",
        "machine": {**processor(), "cores": os.cpu_count(), "device": jax.default_backend(), "jax": jax.__version__,
                    "load_average_1min": os.getloadavg()[0]},
        "ratio": 1.0 / rows[-1]["slowdown"],
        "baseline": "jaxfl's default float32 Gaussian noise on the same clipped sum, same process; ratio = default "
                    "seconds / secure (LatticeGaussian.release) seconds at the largest dim, best of repeats (< 1: "
                    "the secure release is slower; rows give the slowdown at each dim)",
        "repeats": args.repeats, "noise_multiplier": 1.0, "clip_norm": 1.0, "rows": rows,
    }
    out = write_benchmark(record, args.out)
    print(f"headline ratio (default / secure at d = {rows[-1]['dim']:,}): {record['ratio']:.3f}   -> {out}")


if __name__ == "__main__":
    source_revision()
    main()
