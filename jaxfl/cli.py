"""The ``jaxfl`` command: demo, list, account, reproduce, bench.

Bad input prints one line ``jaxfl: error: ...`` and exits with status 2 (no traceback).
"""
from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path


def _cmd_demo(args) -> int:
    from jaxfl.experiments import demo

    demo.main(quick=args.quick, seeds=args.seeds)
    return 0


def _cmd_list(args) -> int:
    from jaxfl.experiments import registry

    print("experiments (jaxfl reproduce NAME [--quick] [--out DIR]):")
    for name, exp in sorted(registry.experiments().items()):
        print(f"  {name:28s} {exp.description}")
    print("benchmarks (jaxfl bench NAME):")
    for name, description in sorted(registry.BENCHMARKS.items()):
        print(f"  {name:28s} {description}")
    return 0


def _cmd_reproduce(args) -> int:
    from jaxfl.experiments import registry

    experiment = registry.get_experiment(args.name)
    out = Path(args.out) if args.out else Path("results") / args.name.replace("/", "_")
    path = experiment.run(args.quick, out)
    print(f"wrote {path}")
    return 0


def _cmd_bench(args) -> int:
    from jaxfl.experiments import registry

    script = registry.benchmark_script(args.name)
    sys.argv = [str(script), *args.bench_args]
    runpy.run_path(str(script), run_name="__main__")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from jaxfl.accounting import cli as account_cli

    parser = argparse.ArgumentParser(prog="jaxfl", description="Differentially private federated learning in JAX.")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="DP and non-DP federated logistic regression on bundled data")
    demo.add_argument("--quick", action="store_true", help="fewer seeds and settings")
    demo.add_argument("--seeds", type=int, default=None, help="seeds per setting")
    demo.set_defaults(func=_cmd_demo)

    lst = sub.add_parser("list", help="registered experiments and benchmarks")
    lst.set_defaults(func=_cmd_list)

    account_cli.add_account_parser(sub)

    rep = sub.add_parser("reproduce", help="run a registered experiment and write its results")
    rep.add_argument("name")
    rep.add_argument("--quick", action="store_true", help="the small CI-sized form")
    rep.add_argument("--out", default=None, help="output directory (default results/NAME)")
    rep.set_defaults(func=_cmd_reproduce)

    bench = sub.add_parser("bench", help="run a benchmark from bench/")
    bench.add_argument("name")
    bench.add_argument("bench_args", nargs=argparse.REMAINDER, help="passed to the benchmark script")
    bench.set_defaults(func=_cmd_bench)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from dp_accounting import UnsupportedEventError

    try:
        code = args.func(args)
    except (ValueError, FileNotFoundError, UnsupportedEventError) as e:
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"jaxfl: error: {message}", file=sys.stderr)
        return 2
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
