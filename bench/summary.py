"""The table of bench/README.md: every committed benchmark's headline ratio, baseline and machine.

Reads ``bench/results/*.json`` (nothing is timed here) and prints a markdown table, one row per
benchmark: the headline ``ratio`` (jaxfl against the benchmark's strongest baseline; > 1 means jaxfl is
faster unless the benchmark says otherwise), the baseline as the JSON states it, the machine and, where
the JSON records one, the distance to the arithmetic limit of this machine.

Usage: python bench/summary.py [--results bench/results]  (``jaxfl bench summary``)
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def _limit(name: str, doc: dict) -> str:
    """The distance to the machine's arithmetic limit where the JSON measures one."""
    if name == "engine_vs_loop":
        best = min(row["jaxfl_seconds"] for row in doc["rows"] if row["setting"].startswith("one run, steady"))
        floor = doc["arithmetic"]["floor_seconds"]
        return f"{best / floor:.1f}x the floor ({1e3 * floor:.1f} ms at the measured bandwidth and GEMM rate)"
    if name == "noise_rate":
        row = doc["rows"][0]
        return f"{100 * row['fraction_of_write_bandwidth']:.0f} % of the write bandwidth (compute-bound)"
    if name == "rec_kernel":
        row = doc["rows"][-1]
        return f"{row['normals_per_second_fused'] / 1e6:.0f} M normals/s fused (the generator is the bound)"
    if name == "conv_layers":
        jaxfl = [row["gflops"]["jaxfl"] for row in doc["rows"]]
        torch = [row["gflops"]["torch"] for row in doc["rows"]]
        return (f"jaxfl {min(jaxfl):.0f}-{max(jaxfl):.0f} Gflop/s per layer, PyTorch {min(torch):.0f}-{max(torch):.0f} "
                "(the layers' multiply-adds)")
    return "not measured"


def rows(results: Path) -> list[str]:
    lines = ["| benchmark | ratio | baseline | machine | distance to the arithmetic limit |",
             "|---|---:|---|---|---|"]
    for path in sorted(results.glob("*.json")):
        doc = json.loads(path.read_text())
        machine = doc.get("machine", {})
        cpu = f"{machine.get('cores', '?')} cores, {machine.get('cpu', '?')}"
        baseline = " ".join(str(doc.get("baseline", "")).split())
        if doc.get("complete") is False:   # a run stopped mid-way: its ratio covers the programs it timed
            baseline += (f" (stopped after {doc['programs_timed']} of {doc['programs']} programs: the ratio covers "
                         "those)")
        lines.append(f"| `{path.stem}` | {doc['ratio']:.2f} | {baseline} | {cpu} | {_limit(path.stem, doc)} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(Path(__file__).resolve().parent / "results"))
    args = parser.parse_args(argv)
    print("\n".join(rows(Path(args.results))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
