"""The jaxfl command line: demo, list, account, reproduce, bench; errors are one line with exit 2."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxfl.cli import main

REPO = Path(__file__).resolve().parents[1]


def _run(*args):
    """Runs ``jaxfl ARGS`` in a fresh process: (exit code, stdout, stderr)."""
    out = subprocess.run([sys.executable, "-m", "jaxfl", *args], capture_output=True, text=True, timeout=600)
    return out.returncode, out.stdout, out.stderr


@pytest.mark.parametrize("args, needle", [
    (["account", "--noise-multiplier", "1.1", "--steps", "10", "--delta", "1.5"], "--delta"),
    (["account", "--target-epsilon", "0", "--steps", "10", "--delta", "1e-5"], "--target-epsilon"),
    (["account", "--target-epsilon", "-2", "--steps", "10", "--delta", "1e-5"], "--target-epsilon"),
    (["reproduce", "no-such-experiment"], "no-such-experiment"),
    (["bench", "no-such-benchmark"], "no-such-benchmark"),
])
def test_bad_input_is_one_line_exit_2(args, needle, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jaxfl: error:") and needle in err[0]


@pytest.mark.parametrize("held, args, needle", [
    ({"config": {"form": "quick", "panels": ["n = 4", "n = 16"]}}, ["--panel", "n = 16"], "panel(s) n = 4"),
    ({"config": {"form": "full", "panels": ["n = 4", "n = 16"]}}, [], "'full' form"),
    ({"experiment": "huang-jdp/table4", "config": {"form": "quick", "panels": []}}, [], "'huang-jdp/table4'"),
    ({"config": {"form": "quick", "panels": ["n = 4", "n = 16"], "trials": 3}}, ["--trials", "1"], "holds 3 trials"),
])
def test_a_run_that_would_replace_other_results_stops_before_running(tmp_path, capsys, held, args, needle):
    """A results.json holding another study, another form, or panels the run leaves out is kept: the run
    stops with one line naming what it holds, before anything runs (no parts written)."""
    doc = {"experiment": "huang-jdp/tuning-mnist", **held}
    (tmp_path / "results.json").write_text(json.dumps(doc))
    argv = ["reproduce", "huang-jdp/tuning-mnist", "--quick", "--out", str(tmp_path), *args]
    assert main(argv) == 2 and main([*argv, "--workers", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("jaxfl: error:") and needle in line for line in err)
    assert json.loads((tmp_path / "results.json").read_text()) == doc
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


@pytest.mark.slow
def test_process_level_error_has_no_traceback():
    code, out, err = _run("account", "--noise-multiplier", "1.0", "--steps", "5", "--delta", "0")
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0 and "Traceback" not in err and "--delta" in err
    code, _, err = _run("account", "--accountant", "bogus", "--noise-multiplier", "1", "--steps", "5",
                        "--delta", "1e-5")
    assert code == 2 and "bogus" in err and "Traceback" not in err


def test_account_json_matches_oracle_a5(capsys):
    # Oracle A5 (jax_privacy docs): PLD, sigma=3, T=512, q=0.1, delta=1e-6 -> epsilon ~ 3.77.
    assert main(["account", "--accountant", "pld", "--noise-multiplier", "3", "--sampling-rate", "0.1",
                 "--steps", "512", "--delta", "1e-6", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["accountant"] == "pld" and doc["delta"] == 1e-6
    assert doc["epsilon"] == pytest.approx(3.76969, abs=5e-3)
    assert main(["account", "--accountant", "pld", "--target-epsilon", "1", "--sampling-rate", "0.1",
                 "--steps", "512", "--delta", "1e-6", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["noise_multiplier"] == pytest.approx(9.66183, abs=5e-3)


def test_list_names_experiments_and_benchmarks(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "demo" in out and "engine_vs_loop" in out


def test_reproduce_demo_quick_writes_results_schema(tmp_path, capsys):
    assert main(["reproduce", "demo", "--quick", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["experiment"] == "demo" and {"jaxfl_version", "config", "runs", "environment"} <= set(doc)
    assert doc["environment"]["backend"] == "cpu"
    private = [r for r in doc["runs"] if r["epsilon"] is not None]
    assert private and all(r["privacy"]["epsilon_spent"] <= r["epsilon"] + 1e-9 for r in private)
    assert all({"algorithm", "delta", "seed", "metrics", "privacy", "wall_seconds"} <= set(r) for r in doc["runs"])
    assert all(0.0 <= r["metrics"]["test_accuracy"] <= 1.0 for r in doc["runs"])
    assert all(len(r["metrics"]["test_accuracy_seeds"]) == 2 for r in doc["runs"])   # quick: 2 seeds
    best_nonprivate = max(r["metrics"]["test_accuracy"] for r in doc["runs"] if r["epsilon"] is None)
    assert best_nonprivate > 0.9
    header = (tmp_path / "curves.csv").read_text().splitlines()[0]
    assert "round" in header and "participants" in header
    assert (tmp_path / "figure.png").stat().st_size > 1000


def test_benchmark_records_name_the_code_that_ran_them(tmp_path):
    import json
    import subprocess
    from pathlib import Path

    from jaxfl.studies.provenance import write_benchmark

    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout: records carry source None")
    path = write_benchmark({"benchmark": "x", "ratio": 2.0}, tmp_path / "b" / "x.json")
    record = json.loads(path.read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                          text=True, check=True).stdout.strip()
    assert (record["ratio"] == 2.0 and record["source"]["commit"] == head
            and isinstance(record["source"]["modified"], bool))


def test_interleaved_timer_warms_up_each_side_then_alternates_them_and_keeps_each_ones_fastest_call(monkeypatch):
    """The benchmarks' side-by-side timer: one untimed call each, then ``repeats`` rounds calling every side in
    turn; the result is each side's shortest call (a fake clock, so no timing enters the test)."""
    import time

    from jaxfl.studies.provenance import interleaved_best_seconds

    clock = iter(range(0, 1000, 1))
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock))
    calls = []
    durations = {"a": iter([5, 2, 4]), "b": iter([3, 3, 1])}

    def side(name):
        def run():
            calls.append(name)
            if len(calls) > 2:                       # after the warm-up: advance the clock by this call's duration
                for _ in range(next(durations[name]) - 1):
                    next(clock)
        return run

    best = interleaved_best_seconds({"a": side("a"), "b": side("b")}, repeats=3)
    assert calls == ["a", "b", "a", "b", "a", "b", "a", "b"]
    assert best == {"a": 2, "b": 1}


def test_the_machine_a_part_ran_on_names_its_vector_extensions(monkeypatch):
    """Parts and results.json record the vector extensions XLA:CPU compiled for (two machines that differ there
    round floats differently): the SIMD flags of lscpu's list, sorted, and nothing else."""
    from jaxfl.studies import provenance
    from jaxfl.studies.runner import _machine_label

    monkeypatch.setattr(provenance, "cpu_flags",
                        lambda: "fpu sse2 sse4_2 fma avx2 avx512f avx512_vnni amx_tile avx rdrand")
    assert provenance.cpu_vector_extensions() == "amx_tile avx avx2 avx512_vnni avx512f fma sse4_2"
    assert (_machine_label({"machine": provenance.machine()})
            == f"{provenance.cpu_model()}: " + provenance.cpu_vector_extensions())
    monkeypatch.setattr(provenance, "cpu_flags", lambda: "")   # no lscpu
    assert provenance.cpu_vector_extensions() == "" and provenance.environment()["cpu_vector_extensions"] == ""
    assert _machine_label({"machine": provenance.machine()}).endswith(": none listed")
    assert _machine_label({}) == "unrecorded"


def test_the_machine_of_a_part_run_on_an_accelerator_names_it_before_its_host(monkeypatch):
    """On a GPU or TPU backend the record names the accelerator (count and kind) beside the host processor, so a
    part a lent GPU ran is not labelled with its host CPU alone; on the CPU backend there is no such field."""
    from jaxfl.studies import provenance
    from types import SimpleNamespace

    import jax

    
    from jaxfl.studies.runner import _machine_label

    assert "accelerator" not in provenance.machine()
    monkeypatch.setattr(provenance, "cpu_flags", lambda: "avx2 fma")
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(jax, "device_count", lambda: 2)
    monkeypatch.setattr(jax, "devices", lambda: [SimpleNamespace(device_kind="NVIDIA H200")] * 2)
    assert provenance.machine()["accelerator"] == "2 x NVIDIA H200"
    machine = provenance.machine()
    assert _machine_label({"machine": machine}) == f"2 x NVIDIA H200, host {provenance.cpu_model()}: avx2 fma"


def test_a_declared_commit_is_recorded_instead_of_git_and_none_without_either(monkeypatch):
    """A launcher that ships a tree to another machine names its commit ($JAXFL_SOURCE_COMMIT): recorded as
    declared, before git is asked (a copied tree may sit beside a .git not its own); where neither answers, None."""
    from jaxfl.studies import provenance
    import subprocess

    
    from jaxfl.studies.runner import _source_label

    asked = []

    def no_git(*args, **kwargs):
        asked.append(args)
        raise OSError("git: not found")

    monkeypatch.setattr(subprocess, "run", no_git)
    provenance.source_revision.cache_clear()
    try:
        monkeypatch.delenv(provenance.SOURCE_ENV, raising=False)
        assert provenance.source_revision() is None and _source_label(None) == "unrecorded" and asked
        provenance.source_revision.cache_clear()
        asked.clear()
        monkeypatch.setenv(provenance.SOURCE_ENV, "0123456789abcdef0123")
        source = provenance.source_revision()
        assert source == {"commit": "0123456789abcdef0123", "modified": False, "declared": True} and not asked
        assert _source_label(source) == "0123456789ab (declared)"
    finally:
        provenance.source_revision.cache_clear()


@pytest.mark.slow
def test_a_run_records_the_code_checked_out_when_it_started(tmp_path, monkeypatch):
    """A commit made while a study runs does not relabel it: the parts and results.json name the commit of
    the start (stood in for by $JAXFL_SOURCE_COMMIT, changed after the run began)."""
    from jaxfl.studies import provenance, runner

    original = runner._stored_sweep

    def commit_meanwhile(*args, **kwargs):
        monkeypatch.setenv(provenance.SOURCE_ENV, "after")
        return original(*args, **kwargs)

    monkeypatch.setattr(runner, "_stored_sweep", commit_meanwhile)
    monkeypatch.setenv(provenance.SOURCE_ENV, "before")
    provenance.source_revision.cache_clear()
    try:
        assert main(["reproduce", "demo", "--quick", "--out", str(tmp_path)]) == 0
    finally:
        provenance.source_revision.cache_clear()
    doc = json.loads((tmp_path / "results.json").read_text())
    assert os.environ[provenance.SOURCE_ENV] == "after"  # the stand-in commit did happen during the run
    assert doc["source"]["commit"] == "before" and doc["config"]["parts_sources"] == ["before (declared)"]


@pytest.mark.slow
def test_reproduce_in_workers_splits_the_runs_and_collects_them(tmp_path, capfd):
    """``--workers 2``: the workers run each checkpointed run once (their lines say so) and the final
    collection trains nothing; the table matches a run in one process (to float rounding: the workers run on
    one core each, where XLA:CPU may sum in another order)."""
    assert main(["reproduce", "dprec/mnist", "--quick", "--out", str(tmp_path / "two"), "--workers", "2"]) == 0
    out = capfd.readouterr().out
    finished = [line for line in out.splitlines() if line.startswith("[worker") and " seed " in line
                and "wall_seconds" in line and ", round " not in line]
    assert len(finished) == 2   # each run once, by whichever worker claimed it
    two = json.loads((tmp_path / "two" / "results.json").read_text())
    # the collection resumed each run at its last round: a retrained run would append its records again
    for ckpt in (tmp_path / "two" / "checkpoints").iterdir():
        rounds = [json.loads(line)["round"] for line in (ckpt / "metrics.jsonl").read_text().splitlines() if line]
        assert len(rounds) == len(set(rounds)) > 0
    assert two["config"]["runs_seconds_total"] == pytest.approx(sum(r["wall_seconds"] for r in two["runs"]))
    assert main(["reproduce", "dprec/mnist", "--quick", "--out", str(tmp_path / "one")]) == 0
    one = json.loads((tmp_path / "one" / "results.json").read_text())
    key = lambda r: (r["algorithm"], r["epsilon"], r["seed"])  # noqa: E731
    for a, b in zip(sorted(one["runs"], key=key), sorted(two["runs"], key=key)):
        assert key(a) == key(b) and b["privacy"]["epsilon_spent"] == a["privacy"]["epsilon_spent"]
        assert b["metrics"]["test_accuracy"] == pytest.approx(a["metrics"]["test_accuracy"], abs=0.02)


@pytest.mark.slow
def test_reproduce_in_workers_shares_the_grid_programs(tmp_path, capfd):
    assert main(["reproduce", "lowy-nonconvex/wbcd", "--quick", "--out", str(tmp_path), "--workers", "2"]) == 0
    out = capfd.readouterr().out
    ran = [line for line in out.splitlines() if line.startswith("[worker") and " configs x " in line]
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["config"]["parts_reused"] == len(ran) > 1   # each program once, the collection ran none itself
    assert not (tmp_path / ".claims").exists()
    assert doc["config"]["workers"]["count"] == 2 and doc["config"]["workers"]["wall_seconds"] > 0


def test_reproduce_rejects_a_bad_worker_count(capsys):
    assert main(["reproduce", "demo", "--quick", "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err


def test_worker_shares_claim_each_unit_once(tmp_path):
    from jaxfl.studies.runner import Share

    a, b = Share(0, 2, claims=tmp_path), Share(1, 2, claims=tmp_path)
    taken = [(a.take(), b.take()) for _ in range(5)] + [(False, b.take()) for _ in range(2)]
    assert taken == [(True, False)] * 5 + [(False, True)] * 2   # a unit claimed by one is skipped by the other
    static = [Share(i, 3) for i in range(3)]
    assert [[s.take() for s in static] for _ in range(2)] == [[True, False, False], [False, True, False]]  # u % 3


def _store_parts(folder, parts: dict):
    """Writes ``{name: test accuracies [configs, seeds]}`` as stored parts (the pickles runner.run keeps)."""
    import pickle

    import numpy as np

    from jaxfl.engine.sweep import SweepResult

    (folder / "parts").mkdir(parents=True)
    for name, acc in parts.items():
        acc = np.asarray(acc, np.float32)
        result = SweepResult([{}] * acc.shape[0], np.arange(acc.shape[1]), None, {}, {"test_accuracy": acc})
        (folder / "parts" / f"{name}.pkl").write_bytes(pickle.dumps({"result": tuple(result), "seconds": 1.0}))


def test_compare_parts_pairs_the_parts_stored_in_both_and_reports_their_differences(tmp_path, capsys):
    _store_parts(tmp_path / "cpu", {"trial0-a-0": [[0.5], [0.25]], "trial0-b-0": [[0.125]], "trial1-a-0": [[1.0]]})
    _store_parts(tmp_path / "gpu", {"trial0-a-0": [[0.5], [0.375]], "trial0-b-0": [[0.0625]], "trial2-a-0": [[0.0]]})
    assert main(["compare-parts", str(tmp_path / "cpu"), str(tmp_path / "gpu" / "parts")]) == 0
    out = capsys.readouterr().out
    # |differences|: 0, 0.125 (trial0-a), 0.0625 (trial0-b): max 0.125, mean 0.0625
    assert "2 parts in both, 3 values; |a - b| max 0.1250 (trial0-a-0), mean 0.0625" in out
    assert "only in " in out and "trial1-a-0" in out and "trial2-a-0" in out


@pytest.mark.parametrize("gpu, metric, needle", [
    ({"other-0": [[0.5]]}, "test_accuracy", "no part is stored in both"),
    ({"trial0-a-0": [[0.5]]}, "test_loss", "no metric 'test_loss'"),
    ({"trial0-a-0": [[0.5, 0.5]]}, "test_accuracy", "shape"),
])
def test_compare_parts_rejects_what_it_cannot_compare_in_one_line(tmp_path, capsys, gpu, metric, needle):
    _store_parts(tmp_path / "cpu", {"trial0-a-0": [[0.5]]})
    _store_parts(tmp_path / "gpu", gpu)
    assert main(["compare-parts", str(tmp_path / "cpu"), str(tmp_path / "gpu"), "--metric", metric]) == 2
    err = capsys.readouterr().err
    assert err.startswith("jaxfl: error:") and needle in err and err.count("\n") == 1
    assert main(["compare-parts", str(tmp_path / "cpu"), str(tmp_path / "empty")]) == 2
    assert "no stored parts" in capsys.readouterr().err


def test_audit_lists_its_audits_and_prints_claim_bound_and_verdict(capsys):
    assert main(["audit"]) == 0
    listed = capsys.readouterr().out
    assert "minibatch_sgd" in listed and "noise_halved" in listed and "sabotage" in listed
    assert main(["audit", "own_size_denominator", "--runs", "4000", "--json"]) == 0
    (result,) = json.loads(capsys.readouterr().out)
    assert result["claimed_epsilon"] == pytest.approx(0.807, abs=0.01)
    assert result["verdict"] == "violated" and result["epsilon_lower_bound"] > 4.0


@pytest.mark.parametrize("args, needle", [(["audit", "nope"], "unknown audit 'nope'"),
                                          (["audit", "minibatch_sgd", "--runs", "0"], "--runs must be"),
                                          (["audit", "minibatch_sgd", "--delta", "2"], "delta")])
def test_audit_bad_input_is_one_line_exit_2(args, needle, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_outside_a_clone_reproduce_says_where_the_paper_homes_come_from(tmp_path):
    """The papers' studies live in the repository's papers/, not in the installed library: from elsewhere a paper's
    study is one line naming the fix (a clone, --papers or $JAXFL_PAPERS), the library's own demo still listed."""
    env = {k: v for k, v in os.environ.items() if k != "JAXFL_PAPERS"}
    run = lambda *argv: subprocess.run([sys.executable, "-m", "jaxfl", *argv], cwd=tmp_path, env=env,
                                       capture_output=True, text=True)
    failed = run("reproduce", "lowy-convex/mnist", "--quick")
    assert failed.returncode == 2 and failed.stderr.count("\n") == 1
    assert "no papers/ folder found" in failed.stderr and "--papers" in failed.stderr
    listed = run("list", "--papers", str(REPO / "papers"))
    assert listed.returncode == 0 and "lowy-convex/mnist" in listed.stdout and "demo" in listed.stdout


def test_a_paper_homes_full_runs_default_to_its_results_and_quick_ones_to_runs(tmp_path, monkeypatch):
    from jaxfl.studies import registry

    experiment = registry.get_experiment("lowy-convex/insurance", REPO / "papers")
    assert experiment.home == REPO / "papers" / "lowy_convex"
    assert experiment.default_out(False) == REPO / "papers" / "lowy_convex" / "results" / "insurance"
    assert experiment.default_out(False, "authors-scripts") == experiment.home / "results/insurance/authors-scripts"
    assert experiment.default_out(True) == Path("runs/quick/lowy-convex/insurance")
    assert registry.get_experiment("demo").default_out(False) == Path("results/demo")
    with pytest.raises(ValueError, match="not a folder of paper homes"):
        registry.find_papers(tmp_path)


@pytest.mark.slow
def test_a_partial_run_of_the_first_trials(tmp_path):
    """``--trials K`` (``Study.form_of(trials=K)``) runs the first K trials only, marks the results partial, and a
    later run of more trials reuses their stored parts (a trial's seeds do not depend on how many run)."""
    import dataclasses

    from jaxfl.studies import report, runner
    from jaxfl.studies.demo import STUDY

    study = dataclasses.replace(STUDY, trials=2)
    with pytest.raises(ValueError, match="trials=3, but"):
        study.form_of(quick=True, trials=3)
    assert study.form_of(quick=True, trials=2).only_trials is None
    first = study.form_of(quick=True, trials=1)
    assert first.trials_run == 1 and report.study_config(first)["trials_of_full_study"] == 2
    one = runner.run(first, tmp_path, lambda line: None)
    assert {row["trial"] for row in one.rows} == {0}
    both = runner.run(study.form_of(quick=True), tmp_path, lambda line: None)
    assert {row["trial"] for row in both.rows} == {0, 1} and both.parts_reused > 0
    strip = lambda rows: [{k: v for k, v in r.items() if "seconds" not in k and k != "params"} for r in rows]
    assert str(strip([r for r in both.rows if r["trial"] == 0])) == str(strip(one.rows))
