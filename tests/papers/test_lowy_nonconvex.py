"""Lowy et al.'s reproductions (``jaxfl reproduce lowy-nonconvex/...``): quick forms end to end, the
noise-multiplier conversions of the experiments' calibrations, the families' programs and accounting,
the settings of the full forms, the report's paired differences."""
import json
import math
import statistics
from types import SimpleNamespace

import numpy as np
import pytest

from jaxfl.accounting import variance_reduced_noise as A
from jaxfl.cli import main
from jaxfl.engine import make_ledger
from papers.lowy_nonconvex import programs as NG, studies as N
from jaxfl.studies import report
from papers.lowy_nonconvex.data import CIFAR_SUBSET_NOTE
from jaxfl.studies.registry import BENCHMARKS, experiments
from jaxfl.studies.report import paired_difference
from jaxfl.studies.spec import Trial
from jaxfl.models import nets

NAMES = ["lowy-nonconvex/mnist", "lowy-nonconvex/cifar10", "lowy-nonconvex/wbcd"]
# the slow tier runs the smallest quick form; the others are paper studies (``-m study``)
QUICK = [pytest.param(name, marks=pytest.mark.study) for name in NAMES[:2]] + NAMES[2:]
STUDIES = {"lowy-nonconvex/mnist": N.MNIST, "lowy-nonconvex/cifar10": N.CIFAR10, "lowy-nonconvex/wbcd": N.WBCD}
SMOKE = "lowy-nonconvex/wbcd"  # the smallest quick form, whose stored parts the schema test reads
PNG = b"\x89PNG\r\n\x1a\n"
DP = {NG.SPIDER, NG.MB, NG.LOCAL, NG.ALG3, NG.ALG11}
NON_PRIVATE = {NG.NP_MB, NG.NP_LOCAL}
FAMILY = {f.name: f for f in NG.FAMILIES}


def test_experiments_and_benchmark_are_registered():
    known = experiments()
    assert set(NAMES) <= set(known)
    assert all(known[name].study is STUDIES[name] for name in NAMES)
    assert "lowy_nonconvex_grid" in BENCHMARKS
    assert list(FAMILY) == ["mbsgd", "local", "spider", "alt"]
    assert set(N.MNIST.variants) == {"authors-noise", "reduced"} and not N.CIFAR10.variants and not N.WBCD.variants


@pytest.mark.slow
@pytest.mark.parametrize("name", QUICK)
def test_quick_form_writes_finite_results(quick_results, name, tmp_path):
    d, doc = quick_results[name]
    study = STUDIES[name]
    quick = study.form_of(quick=True)
    cfg = doc["config"]
    assert doc["experiment"] == name and cfg["quick"] is True and cfg["form"] == "quick"
    assert cfg["panels"] == [p.label for p in quick.panels] and cfg["trials"] == quick.trials
    assert cfg["epsilons"] == list(quick["epsilons"]) == cfg["settings"]["epsilons"]
    assert (d / "figure.png").read_bytes()[:8] == PNG
    summary = (d / "summary.md").read_text()
    assert summary.count("|") > 10
    runs = doc["runs"]
    assert {r["algorithm"] for r in runs} == DP | NON_PRIVATE
    per_panel = cfg["trials"] * len(cfg["panels"])
    for alg in DP | NON_PRIVATE:
        mine = [r for r in runs if r["algorithm"] == alg]
        assert len(mine) == per_panel * (len(cfg["epsilons"]) if alg in DP else 1)
    fields = {"algorithm", "epsilon", "delta", "seed", "trial", "metrics", "privacy", "step_size", "clip_norm", "panel",
              "silos_per_round", "rounds", "batch_size", "phase_length", "noise_multiplier", "diverged_configs",
              "wall_seconds"}
    for r in runs:
        assert fields <= set(r)
        assert r["panel"] == f"M = {r['silos_per_round']}, R = {r['rounds']}" and r["panel"] in cfg["panels"]
        assert r["batch_size"] == A.batch_experiment_code(NG.calibration(
            cfg["per_trial"][r["trial"]]["silo_sizes"])[0], r["rounds"])
        assert r["clip_norm"] in quick["clips"]
        err = r["metrics"]["test_error"]
        assert math.isfinite(err) and 0.0 <= err <= 1.0
        assert math.isfinite(r["metrics"]["train_loss"])
        if r["algorithm"] in DP:
            assert r["privacy"]["epsilon_nominal"] == r["epsilon"] and r["privacy"]["accountant"] == "lowy"
            assert r["privacy"]["epsilon_spent"] == "inf" or float(r["privacy"]["epsilon_spent"]) > 0
            assert np.all(np.asarray(r["noise_multiplier"]) > 0)
        else:
            assert r["epsilon"] is None and r["privacy"]["accountant"] is None and r["noise_multiplier"] == 0.0
        if r["algorithm"] == NG.ALG3:
            assert r["phase_length"] in dict(quick["phase_lengths"])[r["rounds"]]
        elif r["algorithm"] != NG.SPIDER:
            assert r["phase_length"] is None
    # ISRL-DP SPIDER is, per trial, panel and epsilon, the variant with the smaller training loss
    for r in (r for r in runs if r["algorithm"] == NG.SPIDER):
        same = [s for s in runs if s["algorithm"] in (NG.ALG3, NG.ALG11)
                and s["epsilon"] == r["epsilon"] and s["trial"] == r["trial"] and s["panel"] == r["panel"]]
        assert len(same) == 2
        assert r["metrics"]["train_loss"] == min(s["metrics"]["train_loss"] for s in same)
        (pick,) = [s for s in same if s["family"] == r["family"]]
        assert {k: v for k, v in r.items() if k not in ("algorithm", "variant")} == \
            {k: v for k, v in pick.items() if k != "algorithm"}
        assert r["variant"] == ("Alg. 11" if r["family"] == "alt" else f"Alg. 3 q={r['phase_length']}")
    # the summary has the SPIDER <= MB <= Local ordering column and the paired differences, per panel
    for panel in cfg["panels"]:
        assert panel in summary
    assert "SPIDER <= MB <= Local" in summary and summary.count("Paired by trial") == len(cfg["panels"])
    # the summary and the figure are redrawn from results.json alone
    report.render(json.loads((d / "results.json").read_text()), study.report, tmp_path)
    assert (tmp_path / "summary.md").read_text() == summary
    assert (tmp_path / "figure.png").read_bytes()[:8] == PNG


@pytest.mark.slow
def test_cifar_quick_says_it_runs_on_the_subset(quick_results):
    d, doc = quick_results["lowy-nonconvex/cifar10"]
    assert CIFAR_SUBSET_NOTE in doc["config"]["notes"]
    assert "subset" in doc["config"]["per_trial"][0]["source"]
    assert doc["config"]["settings"]["data_options"] == {"source": "subset", "per_silo": 8}


@pytest.mark.slow
def test_mnist_quick_learns(quick_results):
    _, doc = quick_results["lowy-nonconvex/mnist"]
    errs = [r["metrics"]["test_error"] for r in doc["runs"] if r["algorithm"] == NG.NP_MB]
    assert np.mean(errs) < 0.3          # chance is 0.5


# ------------------------------------------------------------------------------------------------
# Noise multipliers: the engine's z from the paper's sigma (std on a mean of K terms)


@pytest.mark.parametrize("eps", [0.75, 3.0, 18.0])
def test_noise_multipliers_are_the_papers_sigmas(eps):
    n, R, K, q = 1238, 25, 606, 2
    delta = 1.0 / n**2
    z = A.experiment_noise_multipliers
    for clip in (1.0, 5.0, 1e4):       # the paper's L is the clip C; z does not depend on it
        mb = A.sigma_experiment_mbsgd(clip, n, eps, delta, R)
        assert z("mbsgd", n, delta, eps, R, K) == pytest.approx(mb * K / clip)
        assert mb**2 == pytest.approx(8 * clip**2 * R * math.log(2 / delta) / (n**2 * eps**2))
        step = math.sqrt(8 * clip**2 * K * R * math.log(2 / delta) / (n**2 * eps**2))
        assert z("local", n, delta, eps, R, K) == pytest.approx(step / clip)
        s1 = math.sqrt(16 * clip**2 * math.log(1 / delta) * max(R / q, 1) / (eps**2 * n**2))
        s_hat2 = math.sqrt(64 * clip**2 * R * math.log(1 / delta) / (eps**2 * n**2))
        z1, z2 = z("spider", n, delta, eps, R, K, q)
        assert z1 == pytest.approx(s1 * K / clip) and z2 == pytest.approx(s_hat2 * K / (2 * clip))
        fresh = math.sqrt(8 * clip**2 * math.log(2 / delta) * R / (n**2 * eps**2))
        zf, zd = z("alt", n, delta, eps, R, K)
        assert zf == pytest.approx(fresh * K / clip) and zd == pytest.approx(2 * fresh * K / (2 * clip))
    # z is proportional to 1/eps, which the grid programs rely on (they get z(eps = 1) and divide)
    for fam, qq in (("mbsgd", None), ("local", None), ("spider", 3), ("alt", None)):
        unit = np.atleast_1d(z(fam, n, delta, 1.0, R, K, qq))
        np.testing.assert_allclose(np.atleast_1d(z(fam, n, delta, eps, R, K, qq)), unit / eps)
    with pytest.raises(ValueError, match="algorithm"):
        z("fedavg", n, delta, eps, R, K)


def _trial(counts) -> Trial:
    """A stand-in trial for the programs: only the silo sizes matter."""
    counts = np.asarray(counts)
    return Trial(SimpleNamespace(counts=counts), None, 1.0 / np.maximum(counts, 1).astype(np.float64) ** 2)


def test_calibration_uses_the_smallest_silo():
    counts = np.array([169, 285, 0])
    assert NG.calibration(counts) == (169, 1.0 / 169**2)
    assert A.batch_experiment_code(1238, 25) == 606 and A.batch_experiment_code(1238, 50) == 428
    # the families' programs: K, the engine rounds (Alt Fed-SPIDER: 2 per round) and z(eps = 1) at the smallest silo
    panel = N.MNIST.panels[0]                                   # M = 25, R = 25
    assert (panel["silos_per_round"], panel["rounds"]) == (25, 25)
    trial = _trial([1238] * 24 + [1300])
    for name, family in FAMILY.items():
        programs = family.programs(N.MNIST, panel, trial)
        assert len(programs) == (2 if name == "spider" else 1)                  # q in {1, 2} at R = 25
        for program in programs:
            static = dict(program.static)
            assert static["batch_size"] == program.columns["batch_size"] == 606
            assert static["silos_per_round"] == 25 and static["rounds"] == 25
            assert program.rounds == (50 if name == "alt" else 25)
            assert program.constants["n"] == 1238 and program.constants["delta"] == 1.0 / 1238**2
            unit = A.experiment_noise_multipliers(name, 1238, 1.0 / 1238**2, 1.0, 25, 606, static["phase_length"])
            np.testing.assert_allclose(np.atleast_1d(program.constants["unit_z"]), np.atleast_1d(unit), rtol=1e-6)
            assert program.grid["epsilon"] == [*N.MNIST["epsilons"], *([0.0] if name in ("mbsgd", "local") else [])]
            assert program.grid["clip_norm"] == list(N.MNIST["clips"])
        assert [dict(p.static)["phase_length"] for p in programs] == ([1, 2] if name == "spider" else [None])


def _build(name, rounds, epsilon, phase_length=None, unit_z=None, m=25, k=606, n=1238):
    static = {"loss": nets.mnist_loss, "silos_per_round": m, "rounds": rounds, "batch_size": k,
              "phase_length": phase_length}
    return NG._build(name, static, epsilon=epsilon, step_size=0.1, clip_norm=1.0, unit_z=unit_z, n=n,
                    delta=1.0 / n**2)


def test_authors_noise_variant_runs_spider_with_less_checkpoint_noise_and_certifies_more():
    study = N.MNIST.form_of(variant="authors-noise")
    assert [f.name for f in study.families] == ["mbsgd", "spider"]
    counts, deltas = np.full(25, 1238), np.full(25, 1 / 1238.0**2)
    programs = {dict(p.static)["phase_length"]: p
                for p in study.families[1].programs(study, study.panels[0], _trial(counts))}   # M = R = 25
    for q, program in programs.items():
        paper = A.experiment_noise_multipliers("spider", 1238, deltas[0], 1.0, 25, 606, q)
        np.testing.assert_allclose(program.constants["unit_z"], [paper[0] * math.sqrt(q / 25), paper[1]], rtol=1e-6)
        static = dict(program.static)
        code = NG._build("spider", static, epsilon=0.75, step_size=0.1, clip_norm=1.0, unit_z=None, n=1238,
                         delta=deltas[0])
        printed = _build("spider", 25, 0.75, phase_length=q)
        # the statement follows the noise actually added: the authors' noise certifies a larger epsilon
        spent = [make_ledger(a, counts, "lowy").record(25).epsilon(deltas) for a in (code, printed)]
        assert spent[0] > spent[1]


def test_certified_epsilon_counts_alt_spider_messages_twice():
    counts, deltas = np.full(25, 1238), np.full(25, 1 / 1238.0**2)
    (program,) = FAMILY["alt"].programs(N.MNIST, N.MNIST.panels[0], _trial(counts))
    alt = _build("alt", 25, 0.75)
    one = make_ledger(alt, counts, "lowy").record(program.rounds).epsilon(deltas)       # 2R = 50 messages
    # FedProx-SPIDER with q = 2 over 50 rounds sends the same 25 fresh + 25 difference messages; given Alt
    # Fed-SPIDER's noise (traced path: z(eps = 1) / eps with eps = 1) its ledger must agree
    z = A.experiment_noise_multipliers("alt", 1238, deltas[0], 0.75, 25, 606)
    fed = _build("spider", 50, np.float32(1.0), phase_length=2, unit_z=z)
    two = make_ledger(fed, counts, "lowy").record(50).epsilon(deltas)
    assert math.isfinite(one) and one == pytest.approx(two, rel=1e-5)
    # counting only R messages would certify less than the truth
    assert make_ledger(alt, counts, "lowy").record(25).epsilon(deltas) < one
    # non-private builds state no privacy at all; every family's ledger at eps = 18 certifies nothing
    assert make_ledger(_build("mbsgd", 25, 0.0, unit_z=1.0), counts) is None
    for name, q in (("mbsgd", None), ("local", None), ("spider", 2), ("alt", None)):
        rounds = 50 if name == "alt" else 25
        assert math.isinf(make_ledger(_build(name, 25, 18.0, q), counts, "lowy").record(rounds).epsilon(deltas))


# ------------------------------------------------------------------------------------------------
# The full forms' settings (digest §6)


def _pairs(study):
    return {(p["silos_per_round"], p["rounds"]) for p in study.panels}


def test_full_settings_are_the_papers():
    s = N.MNIST
    assert s.form == "full" and _pairs(s) == {(12, 25), (12, 50), (25, 25), (25, 50)}
    assert {p.label for p in s.panels} == {f"M = {m}, R = {r}" for m, r in _pairs(s)}
    assert s["epsilons"] == (0.75, 1.0, 1.5, 3.0, 6.0, 12.0, 18.0) and s["clips"] == (1.0, 5.0, 10.0, 100.0, 10000.0)
    steps = dict(s["steps"])
    for fam in ("mbsgd", "local", "spider"):                  # Alt Fed-SPIDER uses SPIDER's grid
        for r in (25, 50):
            assert steps[fam, r] == pytest.approx(tuple(np.exp(np.linspace(-9, 0, 5))))
    assert dict(s["phase_lengths"]) == {25: (1, 2), 50: (1, 2, 3, 4)}
    assert s.reps == 2 and s.trials == NG._trials(3)
    c = N.CIFAR10
    assert _pairs(c) == {(10, 50), (10, 100)} and c["clips"] == (0.001, 0.01, 0.1, 1.0, 5.0, 10.0)
    steps = dict(c["steps"])
    assert len(steps["local", 50]) == 20 and len(steps["spider", 50]) == 12
    assert len(steps["mbsgd", 100]) == 8 and dict(c["phase_lengths"])[100] == tuple(range(1, 9))
    assert c["data_options"] == {"source": "subset"}
    w = N.WBCD
    assert _pairs(w) == {(2, 25)} and w["clips"] == (0.1, 1.0, 5.0, 10.0)
    assert dict(w["phase_lengths"])[25] == tuple(range(1, 11)) and w.reps == 3
    # through the programs: Alt Fed-SPIDER's step sizes, FedProx-SPIDER's phase lengths
    trial = _trial([169, 285])
    (alt,) = FAMILY["alt"].programs(w, w.panels[0], trial)
    assert alt.grid["step_size"] == pytest.approx(list(np.exp(np.linspace(-9, 0, 15))))
    assert [p.columns["phase_length"] for p in FAMILY["spider"].programs(w, w.panels[0], trial)] == list(range(1, 11))
    # the reduced variant (papers/lowy-nonconvex/): Fig. 4's panel, 3 trials x 2 reps, 3 step sizes, 2 clips
    r = N.MNIST.form_of(variant="reduced")
    assert r.form == "full+reduced" and _pairs(r) == {(25, 25)} and (r.trials, r.reps) == (3, 2)
    assert dict(r["steps"])["mbsgd", 25] == pytest.approx(tuple(np.exp(np.linspace(-9, 0, 5)))[2:])
    assert r["clips"] == (1.0, 10.0) and r["epsilons"] == s["epsilons"]


def test_unknown_variant_is_refused_by_name():
    with pytest.raises(ValueError, match="'tiny'.*lowy-nonconvex/mnist.*reduced"):
        N.MNIST.form_of(quick=True, variant="tiny")
    with pytest.raises(ValueError, match="reduced"):
        N.WBCD.form_of(variant="reduced")


@pytest.mark.full
@pytest.mark.parametrize("name", NAMES)
def test_full_reproduction_runs(tmp_path, name):
    """The full forms (MNIST: about an hour per trial on 2 CPU cores; see papers/lowy_nonconvex/README.md)."""
    assert main(["reproduce", name, "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert all(math.isfinite(r["metrics"]["test_error"]) for r in doc["runs"])


# ------------------------------------------------------------------------------------------------
# The report's paired differences


def test_paired_difference_is_over_trials_of_the_same_panel_and_epsilon():
    def row(alg, trial, err, eps=3.0, panel="M = 25, R = 25"):
        return {"algorithm": alg, "trial": trial, "metrics": {"test_error": err}, "epsilon": eps, "panel": panel}

    rows = [row(NG.SPIDER, 0, 0.10), row(NG.SPIDER, 1, 0.20), row(NG.SPIDER, 2, 0.30), row(NG.SPIDER, 3, 0.0),
            row(NG.MB, 0, 0.20), row(NG.MB, 1, 0.25), row(NG.MB, 2, 0.50),
            row(NG.MB, 1, 9.0, eps=6.0), row(NG.MB, 2, 9.0, panel="M = 12, R = 25")]
    doc = {"runs": rows}
    p = paired_difference(doc, "M = 25, R = 25", 3.0, NG.SPIDER, NG.MB)
    d = [-0.10, -0.05, -0.20]                       # trial 3 has no MB-SGD row: not paired
    assert p["trials"] == 3
    assert p["mean"] == pytest.approx(statistics.mean(d))
    assert p["se"] == pytest.approx(statistics.stdev(d) / math.sqrt(3))
    assert p["verdict"] == "lower"                  # -0.1167 + 2 x 0.0441 < 0
    assert paired_difference(doc, "M = 25, R = 25", 3.0, NG.MB, NG.SPIDER)["verdict"] == "higher"
    one = paired_difference({"runs": rows[:1] + rows[4:5]}, "M = 25, R = 25", 3.0, NG.SPIDER, NG.MB)
    assert one["trials"] == 1 and math.isnan(one["se"]) and one["verdict"] == "tie"
    close = [row(NG.SPIDER, 0, 0.10), row(NG.SPIDER, 1, 0.30), row(NG.MB, 0, 0.20), row(NG.MB, 1, 0.25)]
    assert paired_difference({"runs": close}, "M = 25, R = 25", 3.0, NG.SPIDER, NG.MB)["verdict"] == "tie"
    none = paired_difference(doc, "M = 25, R = 25", 12.0, NG.SPIDER, NG.MB)
    assert none["trials"] == 0 and none["verdict"] == "tie"
    # another metric of the same records
    rows2 = [dict(r, metrics={"test_error": 0.0, "train_loss": r["metrics"]["test_error"]}) for r in rows]
    assert paired_difference({"runs": rows2}, "M = 25, R = 25", 3.0, NG.SPIDER, NG.MB,
                             "train_loss")["mean"] == pytest.approx(p["mean"])


def test_paired_overview_counts_verdicts_and_averages_improvements_over_cells():
    def row(alg, trial, err, eps, panel):
        return {"algorithm": alg, "trial": trial, "metrics": {"test_error": err}, "epsilon": eps, "panel": panel}

    # cell A (panel P, eps 1): SPIDER 0.1 / 0.1 vs MB 0.2 / 0.2 -> difference -0.1, se 0 -> lower, relative -50%
    # cell B (panel Q, eps 2): SPIDER 0.3 / 0.5 vs MB 0.2 / 0.2 -> +0.2 +- 0.1 -> tie, relative +100%
    rows = [row(NG.SPIDER, 0, 0.1, 1.0, "P"), row(NG.SPIDER, 1, 0.1, 1.0, "P"),
            row(NG.MB, 0, 0.2, 1.0, "P"), row(NG.MB, 1, 0.2, 1.0, "P"),
            row(NG.SPIDER, 0, 0.3, 2.0, "Q"), row(NG.SPIDER, 1, 0.5, 2.0, "Q"),
            row(NG.MB, 0, 0.2, 2.0, "Q"), row(NG.MB, 1, 0.2, 2.0, "Q")]
    text = NG.REPORT.notes({"runs": rows})
    line = next(l for l in text.splitlines() if l.startswith("| SPIDER - MB-SGD |"))
    # improvement = -(mean difference): -((-0.1 + 0.2) / 2) = -0.05; relative -((-0.5 + 1.0) / 2) = -25%
    assert line == "| SPIDER - MB-SGD | 2 | 1 | 1 | 0 | -0.0500 | -25.00% |"
    assert "6.06%" in text and "1.72%" in text


@pytest.mark.slow
def test_stored_parts_hold_no_params_when_the_study_does_not_use_them(quick_results):
    """Lowy et al.'s studies select on metrics and have no ``final``: a stored part keeps metrics, infos and
    epsilons only, small enough to commit a long study's finished parts."""
    import pickle

    from jaxfl.engine.sweep import SweepResult

    directory, _ = quick_results[SMOKE]
    parts = sorted((directory / "parts").iterdir())
    assert parts and N.WBCD.final is None
    for path in parts:
        stored = SweepResult(*pickle.loads(path.read_bytes())["result"])
        assert stored.params is None and set(stored.metrics) == {"train_loss", "test_error"}


@pytest.mark.study
def test_configs_per_batch_option_splits_every_grid_program_alike(quick_results, monkeypatch, tmp_path):
    """``--configs-per-batch N`` runs every grid program N configurations per call (the quick form: the whole grid
    in one), recorded in ``config``; the selections are the one-call run's, the metrics equal to float rounding."""
    from jaxfl.studies import runner

    _, whole = quick_results[SMOKE]
    calls, sweep = [], runner.sweep

    def spy(*args, **kwargs):
        calls.append(kwargs["configs_per_batch"])
        return sweep(*args, **kwargs)

    monkeypatch.setattr(runner, "sweep", spy)
    assert main(["reproduce", SMOKE, "--quick", "--configs-per-batch", "2", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert calls and set(calls) == {2} and whole["config"]["configs_per_batch"] is None
    assert doc["config"]["configs_per_batch"] == 2
    assert len(doc["runs"]) == len(whole["runs"])
    for ours, theirs in zip(doc["runs"], whole["runs"]):
        assert {k: ours[k] for k in ("algorithm", "epsilon", "step_size", "clip_norm", "phase_length")} == \
            {k: theirs[k] for k in ("algorithm", "epsilon", "step_size", "clip_norm", "phase_length")}
        assert ours["metrics"] == pytest.approx(theirs["metrics"], rel=1e-4, abs=1e-5)
    assert main(["reproduce", SMOKE, "--quick", "--configs-per-batch", "0", "--out", str(tmp_path)]) == 2


def test_mnist_runs_local_sgd_more_configs_per_call():
    assert N.MNIST.batch_for("local") == 100 and N.MNIST.batch_for("alt") == 10
    assert N.MNIST.form_of(True).batch_for("local") is None  # the quick form: the whole grid per call
    assert N.WBCD.batch_for("local") == 120


def test_mnist_runs_local_sgd_one_participant_at_a_time_and_cifar_does_not():
    """MNIST's Local SGD programs carry clients_per_pass = 1 (static, so part fingerprints name it); the other
    families' programs and the CIFAR-10 study's (whose GPU parts are stored) stay as they were."""
    trial = _trial([1238] * 25)
    for name, family in FAMILY.items():
        for study in (N.MNIST, N.CIFAR10):
            for program in family.programs(study, study.panels[0], trial):
                static = dict(program.static)
                expected = 1 if (name, study) == ("local", N.MNIST) else None
                assert static.get("clients_per_pass") == expected, (name, study.name)
                if name != "local":
                    assert "clients_per_pass" not in static
    program = FAMILY["local"].programs(N.MNIST, N.MNIST.panels[0], trial)[0]
    with pytest.raises(ValueError, match="clients_per_pass needs .* no per_silo"):   # it reaches make_round
        NG._build("local", {**dict(program.static), "silos_per_round": None}, epsilon=np.float32(1.0), step_size=0.1,
                 clip_norm=1.0, unit_z=np.ones(25, np.float32), n=1238, delta=1.0 / 1238**2)


def test_spider_noise_study_accounts_both_calibrations_by_pld_and_lowy():
    from papers.lowy_nonconvex import noise_study as S
    assert experiments()["lowy-nonconvex/spider-noise"].study is S.SPIDER_NOISE
    rows = {c: S._row({"family": "spider", "phase_length": 1, "calibration": c, "n": 1238, "rounds": 25},
                      epsilon=0.75) for c in A.SPIDER_CALIBRATIONS}
    paper, code = rows["paper"], rows["authors-code"]
    # the authors' checkpoint noise is sqrt(q / R) = 1/5 of the paper's at q = 1, R = 25 ...
    assert code["metrics"]["noise_multiplier"] == pytest.approx(paper["metrics"]["noise_multiplier"] / 5, rel=1e-9)
    # ... so it spends more; the PLD accountant is tighter than the "lowy" one the MNIST study reports
    assert paper["epsilon_spent"] < code["epsilon_spent"]
    for row in rows.values():
        assert row["epsilon_spent"] <= row["metrics"]["epsilon_lowy"]
    assert paper["epsilon_spent"] <= 0.75 < code["epsilon_spent"]   # the printed noise meets the nominal epsilon
