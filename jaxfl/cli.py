"""The ``jaxfl`` command: demo, list, account, audit, reproduce, tables, compare-parts, bench.

Bad input prints one line ``jaxfl: error: ...`` and exits with status 2 (no traceback): argument values
are checked with :mod:`jaxfl.checks`, whose ``ValueError`` names the flag and the bad value.
"""
from __future__ import annotations

import argparse
import os
import runpy
import shutil
import subprocess
import sys
import time
from pathlib import Path


def _optional_positive_int(flag: str, value):
    """``value`` of an optional option ``flag``: None when not given, else checked to be an integer >= 1."""
    from jaxfl import checks

    return None if value is None else checks.positive_int(flag, value)


def _cmd_demo(args) -> int:
    from jaxfl.studies import demo

    demo.main(quick=args.quick, seeds=_optional_positive_int("--seeds", args.seeds))
    return 0


def _cmd_list(args) -> int:
    from jaxfl.studies import registry

    print("experiments (jaxfl reproduce NAME [--quick] [--variant V] [--out DIR]):")
    for name, exp in sorted(registry.experiments(args.papers).items()):
        variants = sorted(getattr(exp.study, "variants", {}) or {})
        print(f"  {name:28s} {exp.description}" + (f" [variants: {', '.join(variants)}]" if variants else ""))
    print("benchmarks (jaxfl bench NAME):")
    for name, description in sorted(registry.BENCHMARKS.items()):
        print(f"  {name:28s} {description}")
    return 0


CLAIMS = ".claims"   # under --out: the work units the workers of a --workers run have claimed


def _worker_share(text: str, out: Path):
    """``--worker I/N`` (1-based I) -> :class:`jaxfl.studies.runner.Share` claiming units under ``out``."""
    from jaxfl.studies.runner import Share

    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
        raise ValueError(f"--worker must be I/N with 1 <= I <= N, got {text!r}")
    return Share(int(index) - 1, int(count), claims=out / CLAIMS)


def _pin(core: int) -> None:
    """Pins this thread to ``core`` before JAX starts its backend: the threads XLA then creates inherit it,
    so XLA sizes its thread pool for one core (as under ``taskset -c CORE``)."""
    os.sched_setaffinity(0, {core})


def _run_workers(args, out: Path, workers: int) -> None:
    """Runs ``workers`` copies of this command at once, worker ``i`` with ``--worker i/N`` and pinned to its
    own core where the OS allows (Linux), and waits for all of them; raises if one fails. The workers claim
    work units under ``out/.claims``, cleared before they start and after they end."""
    shutil.rmtree(out / CLAIMS, ignore_errors=True)   # a killed earlier run's claims: its work is stored or redone
    argv = [sys.executable, "-m", "jaxfl", "reproduce", args.name, "--out", str(out)]
    argv += ["--papers", str(args.papers)] if args.papers else []
    argv += ["--quick"] * bool(args.quick) + (["--variant", args.variant] if args.variant else [])
    for label in args.panel or ():
        argv += ["--panel", label]
    if args.trials is not None:
        argv += ["--trials", str(args.trials)]
    if args.segment_rounds is not None:
        argv += ["--segment-rounds", str(args.segment_rounds)]
    if args.configs_per_batch is not None:
        argv += ["--configs-per-batch", str(args.configs_per_batch)]
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_setaffinity") else []
    procs = []
    for i in range(workers):
        pin = ["--pin", str(cores[i % len(cores)])] if cores else []
        procs.append(subprocess.Popen(argv + ["--worker", f"{i + 1}/{workers}"] + pin,
                                      env={**os.environ, "PYTHONUNBUFFERED": "1"}))
    try:
        codes = [proc.wait() for proc in procs]
    except BaseException:   # interrupted: stop the workers too (what they finished stays stored)
        for proc in procs:
            proc.terminate()
        raise
    shutil.rmtree(out / CLAIMS, ignore_errors=True)
    failed = [f"{i + 1} (status {code})" for i, code in enumerate(codes) if code != 0]
    if failed:
        raise ValueError(f"worker {', '.join(failed)} of {workers} failed; what the workers finished is kept under "
                         f"{out}: the same command resumes it")


def _cmd_reproduce(args) -> int:
    if args.pin is not None:
        _pin(args.pin)
    from jaxfl import checks
    from jaxfl.studies import registry

    experiment = registry.get_experiment(args.name, args.papers)
    workers = checks.positive_int("--workers", args.workers)
    options = {"segment_rounds": _optional_positive_int("--segment-rounds", args.segment_rounds),
               "configs_per_batch": _optional_positive_int("--configs-per-batch", args.configs_per_batch),
               "trials": _optional_positive_int("--trials", args.trials)}
    # Full runs land in the paper home's results/ (committed: its README's tables are generated from them), quick
    # ones in runs/quick/.
    out = Path(args.out) if args.out else experiment.default_out(args.quick, args.variant)
    share = None if args.worker is None else _worker_share(args.worker, out)
    registry.check_keeps_results(experiment.study.form_of(args.quick, args.variant, args.panel, options["trials"]),
                                 out)
    if share is not None:
        experiment.run(args.quick, out, args.variant, args.panel, share, **options)
        return 0
    record = None
    if workers > 1:
        start = time.perf_counter()
        _run_workers(args, out, workers)
        record = {"count": workers, "wall_seconds": time.perf_counter() - start}
        print(f"{args.name}: the {workers} workers are done ({record['wall_seconds']:.0f} s); collecting their results")
    path = experiment.run(args.quick, out, args.variant, args.panel, workers=record, **options)
    print(f"wrote {path}")
    return 0


def _cmd_tables(args) -> int:
    from jaxfl.studies import tables

    return tables.main(check=args.check, docs=Path(args.docs) if args.docs else None, papers=args.papers)


def _cmd_compare_parts(args) -> int:
    from jaxfl.studies.runner import compare_parts

    c = compare_parts(args.a, args.b, args.metric)
    def listed(values):
        return " ".join(f"{x:.4f}" for x in values.reshape(-1))

    for name, va, vb in c["parts"]:
        print(f"{name}: {listed(va)} | {listed(vb)}")
    for side, folder in (("a", args.a), ("b", args.b)):
        if c[f"only_{side}"]:
            print(f"only in {folder}: {len(c[f'only_{side}'])} parts ({', '.join(c[f'only_{side}'])})")
    print(f"{args.metric}: {len(c['parts'])} parts in both, {c['values']} values; |a - b| max {c['max_abs']:.4f} "
          f"({c['worst']}), mean {c['mean_abs']:.4f}")
    return 0


def _cmd_audit(args) -> int:
    import json

    from jaxfl import audit, checks

    names = sorted(audit.AUDITS) + sorted(audit.SABOTAGES)
    if args.list or not args.names:
        width = max(map(len, names))
        for name in names:
            spec = audit.AUDITS.get(name) or audit.SABOTAGES[name]
            kind = "audit" if name in audit.AUDITS else "sabotage"
            print(f"  {name:{width}s} {kind:9s} {spec.about}")
        return 0
    unknown = [n for n in args.names if n not in names]
    if unknown:
        raise ValueError(f"unknown audit {unknown[0]!r}; known: {', '.join(names)}")
    runs = checks.positive_int("--runs", args.runs)
    delta = checks.delta("--delta", args.delta)
    results = []
    for name in (names if "all" in args.names else args.names):
        result = audit.run_named(name, runs=runs, delta=delta, key=args.seed)
        results.append(result.as_dict())
        if not args.json:
            print(f"{name}: claimed epsilon {result.claimed_epsilon:.3f} ({result.relation}, delta {result.delta:g}), "
                  f"empirical lower bound {result.epsilon_lower_bound:.3f} ({result.statistic}, {runs} runs a side, "
                  f"95% confidence): {result.verdict}")
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


def _cmd_bench(args) -> int:
    from jaxfl.studies import registry
    from jaxfl.studies.provenance import source_revision

    script = registry.benchmark_script(args.name)
    source_revision()  # the commit checked out now is the code timed, whatever is committed before the JSON is written
    sys.argv = [str(script), *args.bench_args]
    runpy.run_path(str(script), run_name="__main__")
    return 0


PAPERS_HELP = ("the folder of paper homes whose studies to load (default: $JAXFL_PAPERS, or the papers/ folder at or "
               "above the working directory, as in a clone of the repository)")


def build_parser() -> argparse.ArgumentParser:
    from jaxfl.accounting import cli as account_cli

    parser = argparse.ArgumentParser(prog="jaxfl", description="Differentially private federated learning in JAX.")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="DP and non-DP federated logistic regression on bundled data")
    demo.add_argument("--quick", action="store_true", help="fewer seeds and settings")
    demo.add_argument("--seeds", type=int, default=None, help="seeds per setting")
    demo.add_argument("--out", default=None, help="also write results.json, curves.csv, summary.md, figure.png here")
    demo.set_defaults(func=_cmd_demo)

    lst = sub.add_parser("list", help="registered experiments and benchmarks")
    lst.add_argument("--papers", default=None, help=PAPERS_HELP)
    lst.set_defaults(func=_cmd_list)

    account_cli.add_account_parser(sub)

    aud = sub.add_parser("audit", help="empirical privacy audit of an algorithm's rounds (a canary game): claimed "
                                       "epsilon, lower bound, verdict")
    aud.add_argument("names", nargs="*", metavar="NAME", help="audits or sabotaged variants to run ('all': every one; "
                                                              "none: list them)")
    aud.add_argument("--list", action="store_true", help="list the audits and sabotages")
    aud.add_argument("--runs", type=int, default=20_000, help="runs on each of the two datasets (default 20000)")
    aud.add_argument("--delta", type=float, default=1e-3, help="the delta of the claim and of the bound (default 1e-3)")
    aud.add_argument("--seed", type=int, default=0, help="root key of the runs")
    aud.add_argument("--json", action="store_true", help="print the results as JSON")
    aud.set_defaults(func=_cmd_audit)

    rep = sub.add_parser("reproduce", help="run a registered experiment and write its results")
    rep.add_argument("name")
    rep.add_argument("--quick", action="store_true", help="the small CI-sized form")
    rep.add_argument("--out", default=None, help="output directory (default: the paper home's results/STUDY[/VARIANT];"
                                                  " quick forms: runs/quick/NAME[/VARIANT])")
    rep.add_argument("--papers", default=None, help=PAPERS_HELP)
    rep.add_argument("--variant", default=None, help="a named variant of the study (e.g. authors-scripts)")
    rep.add_argument("--panel", action="append", default=None, metavar="LABEL",
                     help="run only this panel (repeatable; e.g. --panel 'n = 4'): a partial run, marked so in its "
                          "results, whose stored parts a later full run reuses")
    rep.add_argument("--trials", type=int, default=None, metavar="K",
                     help="run only the study's first K trials: a partial run, marked so in its results, whose "
                          "stored parts a later run of more trials reuses")
    rep.add_argument("--workers", type=int, default=1,
                     help="run the study's grid programs and checkpointed runs in this many processes at once, each "
                          "pinned to its own core (Linux), then collect them (docs/performance.md, pinned_runs)")
    rep.add_argument("--segment-rounds", type=int, default=None, metavar="K",
                     help="run each grid program in segments of about K rounds, checkpointed under OUT/checkpoints "
                          "after every segment, so that a program stopped mid-way resumes there (results equal up "
                          "to float rounding; default: one program per part)")
    rep.add_argument("--configs-per-batch", type=int, default=None, metavar="N",
                     help="grid points per compiled call of every grid program, instead of the study's own (memory "
                          "and speed only: e.g. more on a GPU; results equal to float rounding; stored parts are "
                          "reused only by runs with the same N)")
    rep.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # I/N: one worker's share (internal)
    rep.add_argument("--pin", type=int, default=None, help=argparse.SUPPRESS)  # a worker's core (internal)
    rep.set_defaults(func=_cmd_reproduce)

    tab = sub.add_parser("tables", help="regenerate the results tables of README.md and papers/*/README.md")
    tab.add_argument("--check", action="store_true", help="only check that the documents match the results (exit 1 "
                                                          "if not)")
    tab.add_argument("--docs", default=None, help="the markdown file (default: README.md and papers/*/README.md)")
    tab.add_argument("--papers", default=None, help=PAPERS_HELP)
    tab.set_defaults(func=_cmd_tables)

    cmp = sub.add_parser("compare-parts", help="compare the stored parts of one study run in two results directories "
                                                "(e.g. CPU and GPU)")
    cmp.add_argument("a", help="a results directory (or its parts/ folder)")
    cmp.add_argument("b", help="another results directory of the same study and form")
    cmp.add_argument("--metric", default="test_accuracy", help="the metric compared (default test_accuracy)")
    cmp.set_defaults(func=_cmd_compare_parts)

    bench = sub.add_parser("bench", help="run a benchmark from bench/")
    bench.add_argument("name")
    bench.add_argument("bench_args", nargs=argparse.REMAINDER, help="passed to the benchmark script")
    bench.set_defaults(func=_cmd_bench)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from dp_accounting import UnsupportedEventError

    from jaxfl.extras import MissingExtraError

    try:
        code = args.func(args)
    except (ValueError, FileNotFoundError, UnsupportedEventError, MissingExtraError) as e:
        message = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f"jaxfl: error: {message}", file=sys.stderr)
        return 2
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
