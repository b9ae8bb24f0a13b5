"""Lowy & Razaviyayn's reproductions (``jaxfl reproduce lowy-convex/...``): quick forms end to end, the data
construction against closed-form facts, the paper's settings, the noise calibration and the
accounting of the families' builds, and the study's grids as :func:`jaxfl.engine.sweep` programs."""
import csv
import dataclasses
import json
import math
import pickle
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfl.accounting.sgd_noise import noise_multiplier_from_sigma, sigma_experiment_local_sgd, sigma_experiment_mbsgd
from jaxfl.algorithms import noisy_sgd
from jaxfl.cli import main
from jaxfl.data import EVEN_ODD_PAIRS, from_silos, load_insurance, load_mnist, load_obesity
from jaxfl.engine import make_ledger, sweep
from papers.lowy_convex import data as D, programs as LCG, studies as LC
from jaxfl.studies import provenance, report
from jaxfl.studies.registry import experiments
from jaxfl.studies.spec import Panel, Trial, scaled
from jaxfl.studies.runner import run

NAMES = ["lowy-convex/mnist", "lowy-convex/insurance", "lowy-convex/obesity"]
STUDIES = {"lowy-convex/mnist": LC.MNIST, "lowy-convex/insurance": LC.INSURANCE, "lowy-convex/obesity": LC.OBESITY}
SMOKE = "lowy-convex/insurance"  # the paper's end-to-end smoke test in the fast tier; the other quick forms are slow
PNG = b"\x89PNG\r\n\x1a\n"
ALGORITHMS = {LCG.MB, LCG.LOCAL, LCG.NP_MB, LCG.NP_LOCAL}


# ------------------------------------------------------------------------------------------------
# Quick forms through the command line


def test_names_with_a_slash_are_registered():
    known = experiments()
    assert set(NAMES) <= set(known)
    for name in NAMES:
        assert known[name].study is STUDIES[name]
    assert set(LC.INSURANCE.variants) == {"authors-scripts", "ablation-sum-aggregate", "ablation-batch-clip",
                                          "ablation-window"}
    assert set(LC.OBESITY.variants) == {"authors-scripts", "ablation-sum-gradient", "ablation-central-noise",
                                        "ablation-resample", "ablation-window"}
    assert [f.name for f in LCG.FAMILIES] == ["mbsgd", "local"]


@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n == SMOKE else pytest.mark.slow) for n in NAMES])
def test_quick_form_writes_the_results_schema(quick_results, name, tmp_path):
    d, doc = quick_results[name]
    study = STUDIES[name]
    quick = study.form_of(quick=True)
    assert doc["experiment"] == name and {"jaxfl_version", "config", "runs", "environment"} <= set(doc)
    cfg = doc["config"]
    assert cfg["quick"] is True and cfg["form"] == "quick"
    assert cfg["trials"] == quick.trials and cfg["repetitions"] == quick.reps == 2
    assert cfg["panels"] == [p.label for p in quick.panels]
    assert cfg["settings"]["epsilons"] == list(quick["epsilons"]) == cfg["epsilons"]
    assert cfg["settings"]["rounds"] == cfg["rounds"] and cfg["settings"]["batch_size"] == cfg["batch_size_K"]
    assert "selection" in cfg and len(cfg["per_trial"]) == cfg["trials"]
    assert len({len(t["silo_sizes"]) for t in cfg["per_trial"]}) == 1 and "lipschitz" in cfg["per_trial"][0]
    assert (d / "figure.png").read_bytes()[:8] == PNG and (d / "figure.png").stat().st_size > 10_000
    runs = doc["runs"]
    fields = {"algorithm", "epsilon", "delta", "seed", "trial", "panel", "silos_per_round", "step_size", "clip_norm",
              "noise_multiplier", "diverged_configs", "metrics", "privacy", "wall_seconds"}
    assert all(fields <= set(r) for r in runs)
    assert {r["algorithm"] for r in runs} == ALGORITHMS
    epsilons, trials, panels = cfg["epsilons"], cfg["trials"], cfg["panels"]
    for alg in ALGORITHMS:
        mine = [r for r in runs if r["algorithm"] == alg]
        assert len(mine) == trials * len(panels) * (len(epsilons) if alg.startswith("ISRL") else 1)
        assert {r["trial"] for r in mine} == set(range(trials)) and all(r["seed"] == r["trial"] for r in mine)
    for r in runs:
        err = r["metrics"]["test_error"]
        assert math.isfinite(err) and err >= 0
        assert len(r["metrics"]["test_error_seeds"]) == cfg["repetitions"]
        # the error of the repetition-averaged model (MNIST, obesity) keeps the mean error beside it
        assert ("test_error_seed_mean" in r["metrics"]) == (study.final is not None)
        assert r["panel"] in panels and r["panel"] == f"M = {r['silos_per_round']}"
        assert np.isclose(r["step_size"], quick[f"{r['family']}_steps"], rtol=1e-6).any()
        if r["algorithm"].startswith("ISRL"):
            # the paper's nominal epsilon and what jaxfl certifies are both recorded
            assert r["privacy"]["epsilon_nominal"] == r["epsilon"] and r["privacy"]["accountant"] == "lowy"
            spent = r["privacy"]["epsilon_spent"]
            assert spent == "inf" or float(spent) > 0
            assert 0 < r["privacy"]["epsilon_rdp_poisson_reference"] < math.inf
            assert np.all(np.asarray(r["noise_multiplier"]) > 0)
        else:
            assert r["epsilon"] is None and r["privacy"]["accountant"] is None and r["noise_multiplier"] == 0.0
    with (d / "curves.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {"algorithm", "epsilon", "panel", "trial", "rep", "round", "participants"} <= set(rows[0])
    assert max(int(r["round"]) for r in rows) == cfg["rounds"]
    summary = (d / "summary.md").read_text()
    assert summary.count("|") > 10
    # the summary and the figure are redrawn from results.json alone
    report.render(json.loads((d / "results.json").read_text()), study.report, tmp_path)
    assert (tmp_path / "summary.md").read_text() == summary
    assert (tmp_path / "figure.png").read_bytes()[:8] == PNG


def _mean_error(doc, algorithm, epsilon=None):
    errs = [r["metrics"]["test_error"] for r in doc["runs"] if r["algorithm"] == algorithm and r["epsilon"] == epsilon]
    return float(np.mean(errs))


@pytest.mark.slow
def test_mnist_quick_is_sane(quick_results):
    _, doc = quick_results["lowy-convex/mnist"]
    assert _mean_error(doc, LCG.NP_MB) < 0.3          # chance is 0.5
    lo, hi = min(doc["config"]["epsilons"]), max(doc["config"]["epsilons"])
    for alg in (LCG.MB, LCG.LOCAL):
        assert _mean_error(doc, alg, hi) < _mean_error(doc, alg, lo)


def test_insurance_quick_beats_the_naive_predictor_without_privacy(quick_results):
    _, doc = quick_results["lowy-convex/insurance"]
    assert _mean_error(doc, LCG.NP_MB) < 1.0
    assert _mean_error(doc, LCG.NP_LOCAL) < 1.0


@pytest.mark.slow
def test_obesity_quick_errors_are_rates(quick_results):
    _, doc = quick_results["lowy-convex/obesity"]
    assert all(0.0 <= r["metrics"]["test_error"] <= 1.0 for r in doc["runs"])


# ------------------------------------------------------------------------------------------------
# Forms and variants


def test_unknown_variant_is_refused_by_name():
    with pytest.raises(ValueError, match="no-such-variant"):
        LC.INSURANCE.form_of(variant="no-such-variant")
    with pytest.raises(ValueError, match="authors-scripts.*lowy-convex/mnist"):
        LC.MNIST.form_of(quick=True, variant="authors-scripts")


def test_variant_overrides_merge_into_the_quick_form():
    form = LC.INSURANCE.form_of(quick=True, variant="authors-scripts")
    assert form.form == "quick+authors-scripts" and form.is_quick
    assert dict(form["scripts"])["aggregate"] == "sum"
    assert form["epsilons"] == LC.INSURANCE.quick["settings"]["epsilons"]        # quick settings kept
    assert form["clips"] == LC.INSURANCE.quick["settings"]["clips"]
    assert form["loss"] is D.squared_loss                                          # base settings kept
    assert "SUMS" in form.config["aggregation"] and form.config["paper"] == LCG.PAPER
    assert LC.INSURANCE["scripts"] == () and LC.INSURANCE.form == "full"          # the base study untouched
    obesity = LC.OBESITY.form_of(variant="authors-scripts")
    assert obesity.form == "full+authors-scripts" and obesity["data_options"] == {"with_replacement": True}


@pytest.mark.slow
def test_authors_scripts_variant_runs_and_certifies_nothing(tmp_path):
    name = "lowy-convex/insurance"
    assert main(["reproduce", name, "--quick", "--variant", "authors-scripts", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["config"]["form"] == "quick+authors-scripts" and doc["config"]["quick"] is True
    assert "SUMS" in doc["config"]["aggregation"]
    assert dict(map(tuple, doc["config"]["settings"]["scripts"]))["clip"] == "batch_mean"
    runs = doc["runs"]
    assert {r["algorithm"] for r in runs} == ALGORITHMS
    assert all(math.isfinite(r["metrics"]["test_error"]) for r in runs)
    private = [r for r in runs if r["epsilon"] is not None]
    assert len(private) == 2 * doc["config"]["trials"] * len(doc["config"]["epsilons"])
    assert all(r["privacy"]["epsilon_spent"] == "inf" for r in runs)       # no guarantee stated
    assert (tmp_path / "summary.md").read_text().count("| inf |") >= 2


# ------------------------------------------------------------------------------------------------
# Data construction


def test_mnist_silos_are_digit_pairs_with_the_paper_sizes():
    _, y = load_mnist("train")
    # the digit itself as the only feature, so each silo's digits can be read back
    train, test = D.mnist_silos(y[:, None].astype(np.float32), y, trial=0)
    assert train.num_silos == 25
    assert np.all(np.asarray(train.counts) == 1238) and np.all(np.asarray(test.counts) == 310)
    pairs = set()
    for i in range(25):
        digits = np.concatenate([train.silo(i)[0][:, 0], test.silo(i)[0][:, 0]]).astype(int)
        labels = np.concatenate([train.silo(i)[1], test.silo(i)[1]])
        pair = tuple(sorted(set(digits.tolist())))
        assert len(pair) == 2 and pair[0] % 2 != pair[1] % 2
        assert np.bincount(digits % 2).tolist() == [774, 774]      # 774 even and 774 odd images
        assert np.array_equal(labels, (digits % 2 == 0).astype(np.int32))   # even = 1
        pairs.add(pair)
    assert pairs == {tuple(sorted(p)) for p in EVEN_ODD_PAIRS}


def test_mnist_features_are_pca_50():
    x, y = D.mnist_features(3000)
    assert x.shape == (60000, 50) and y.shape == (60000,)
    # centred on the fit set: the first principal coordinate has (about) zero mean there
    assert abs(float(x[:3000, 0].mean())) < 1e-3


def test_insurance_silos_follow_the_ceil_rule():
    parts_train, parts_test = D.insurance_silos(trial=3)
    sizes = [len(a[1]) + len(b[1]) for a, b in zip(parts_train, parts_test)]
    assert sizes == [math.ceil(1338 / 10)] * 9 + [1338 - 9 * math.ceil(1338 / 10)]
    assert [len(b[1]) for b in parts_test] == [math.ceil(0.2 * s) for s in sizes]
    _, y = load_insurance()
    assert sorted(np.concatenate([np.concatenate([a[1], b[1]]) for a, b in zip(parts_train, parts_test)])) \
        == sorted(y)
    for i in range(9):   # silos hold contiguous ranges of the sorted targets
        hi = max(parts_train[i][1].max(), parts_test[i][1].max())
        lo = min(parts_train[i + 1][1].min(), parts_test[i + 1][1].min())
        assert hi <= lo
    for x, _ in parts_train:
        assert x.shape[1] == 7 and np.all(x[:, 0] == 1.0)              # the column of ones, d = 7
        for col in (1, 3):                                             # age, bmi after the bias column
            assert abs(x[:, col].mean()) < 1e-4 and abs(x[:, col].std(ddof=1) - 1) < 1e-4


def test_obesity_silos_are_one_class_each_and_balanced():
    data = D.obesity_trial(1)
    x, y = load_obesity()
    counts = np.asarray(data.train.counts)
    assert data.train.num_silos == 7 and len(set(counts.tolist())) == 1
    assert len(data.test_y) == math.ceil(0.2 * len(y))
    # n_min is the smallest class count of the training split (all records not in the test set)
    train_class_counts = np.bincount(y, minlength=7) - np.bincount(data.test_y, minlength=7)
    assert counts[0] == train_class_counts.min() == data.info["n_min"]
    for i in range(7):
        xi, yi = data.train.silo(i)
        assert np.all(yi == i) and xi.shape[1] == 17 and np.all(xi[:, 0] == 1.0)
    assert np.allclose(data.deltas, 1.0 / counts.astype(float) ** 2)


def test_lipschitz_bound_is_twice_the_largest_norm_ignoring_padding():
    fd = from_silos([(np.array([[3.0, 4.0]]), np.array([0])), (np.array([[1.0, 0.0], [0.0, 12.0]]), np.array([1, 0]))])
    assert D.lipschitz_bound(fd) == 24.0
    data = D.obesity_trial(0)
    assert data.lipschitz == pytest.approx(2 * max(np.linalg.norm(data.train.silo(i)[0], axis=1).max()
                                                   for i in range(7)))


# ------------------------------------------------------------------------------------------------
# The paper's settings


def _trial(counts, lipschitz=1.0) -> Trial:
    """A stand-in trial for the calibrations: only the silo sizes, deltas = 1/n_i^2 and L matter."""
    counts = np.asarray(counts)
    return Trial(SimpleNamespace(counts=counts), None, 1.0 / counts.astype(np.float64) ** 2,
                 {"lipschitz": lipschitz})


def test_batch_sizes_are_the_papers():
    assert LC.MNIST["batch_size"] == 443
    assert LC.INSURANCE["batch_size"] == 19
    assert LC.OBESITY["batch_size"] == 30
    full = LC.MNIST
    assert full["rounds"] == 35 and full.trials == 20 and full.reps == 3
    assert [p["silos_per_round"] for p in full.panels] == [25, 12] and [p.label for p in full.panels] == \
        ["M = 25", "M = 12"]
    assert full["epsilons"] == (0.75, 1.5, 3.0, 6.0, 12.0, 18.0) and full["clips"] is None
    assert full["mbsgd_steps"] == pytest.approx(tuple(np.exp(np.linspace(-6, 0, 10))))
    assert full["local_steps"] == pytest.approx(tuple(np.exp(np.linspace(-8, -1, 10))))
    assert LC.INSURANCE.trials == 20 and [p["silos_per_round"] for p in LC.INSURANCE.panels] == [5]
    assert LC.INSURANCE["clips"] == (100.0, 1e4, 1e6, 1e8, 1e32)
    assert LC.OBESITY["rounds"] == 100 and [p["silos_per_round"] for p in LC.OBESITY.panels] == [3]
    # the families' programs carry K, M and R into the builds
    trial = _trial(np.full(25, 1238), lipschitz=2.5)
    for family in LCG.FAMILIES:
        (program,) = family.programs(full, full.panels[1], trial)
        static = dict(program.static)
        assert static["batch_size"] == 443 and static["silos_per_round"] == 12 and static["scripts"] == ()
        assert program.rounds == 35 and program.constants["lipschitz"] == 2.5
        assert program.grid["epsilon"] == [*full["epsilons"], 0.0]
        assert program.grid["step_size"] == list(full[f"{family.name}_steps"]) and "clip_norm" not in program.grid
    (program,) = LCG.FAMILIES[0].programs(LC.INSURANCE, LC.INSURANCE.panels[0], _trial(np.full(10, 100), None))
    assert program.grid["clip_norm"] == list(LC.INSURANCE["clips"]) and program.constants["lipschitz"] == 1.0


# ------------------------------------------------------------------------------------------------
# Noise calibration and accounting


@pytest.mark.parametrize("lipschitz", [0.7, 20.0, 1e4])
def test_noise_multipliers_follow_the_paper_and_scale_as_one_over_epsilon(lipschitz):
    n, delta = np.array([1238.0, 900.0]), np.array([1 / 1238.0**2, 1 / 900.0**2])
    trial = _trial([1238, 900])
    mb, local = LCG._unit_z("mbsgd", LC.MNIST, trial), LCG._unit_z("local", LC.MNIST, trial)
    for eps in (0.75, 18.0):
        sigma = sigma_experiment_mbsgd(lipschitz, n, 35, eps, delta)           # on the minibatch mean
        assert scaled(mb, eps) == pytest.approx(noise_multiplier_from_sigma(sigma, lipschitz, 443))
        sigma_step = sigma_experiment_local_sgd(lipschitz, n, 35, 443, eps, delta)
        assert scaled(local, eps) == pytest.approx(sigma_step / lipschitz)
        # the traced form the grid programs use divides the same unit by the traced epsilon
        np.testing.assert_allclose(np.asarray(scaled(jnp.asarray(mb, jnp.float32), jnp.float32(eps))),
                                   scaled(mb, eps), rtol=1e-6)
    assert scaled(mb, 0.0) == 0.0 and float(scaled(jnp.asarray(mb), jnp.float32(0.0))[0]) == 0.0
    # equal silos: one float; the library's own calibration at epsilon itself agrees
    equal = _trial(np.full(25, 1238))
    unit = LCG._unit_z("mbsgd", LC.MNIST, equal)
    assert isinstance(unit, float)
    direct = noisy_sgd.calibrate_minibatch_sgd(clip_norm=lipschitz, counts=np.full(25, 1238), rounds=35, epsilon=3.0,
                                                delta=equal.deltas, calibration="experiment", batch_size=443)
    assert unit / 3.0 == pytest.approx(direct.noise_multiplier)


def _certified(family, epsilon, unit, counts, deltas, m=25, rounds=35, k=443):
    static = {"loss": D.mnist_loss, "batch_size": k, "silos_per_round": m, "scripts": ()}
    algorithm = LCG._build(family, static, epsilon=epsilon, step_size=1.0, unit_z=unit, lipschitz=1.0)
    return make_ledger(algorithm, counts, "lowy").record(rounds).epsilon(deltas)


def test_certified_epsilon_is_inf_where_the_calculus_proves_nothing():
    trial = _trial(np.full(25, 1238))
    n, delta = np.asarray(trial.train.counts), trial.deltas
    mb, local = LCG._unit_z("mbsgd", LC.MNIST, trial), LCG._unit_z("local", LC.MNIST, trial)
    # Gaussian step needs z >= 2 sqrt(2 ln(1.25 / delta~)), delta~ = delta / (2 R): false at eps = 18
    z18 = mb / 18
    assert z18 < 2 * math.sqrt(2 * math.log(1.25 * 2 * 35 / delta[0]))
    assert math.isinf(_certified("mbsgd", 18.0, mb, n, delta))
    assert math.isfinite(_certified("mbsgd", 0.75, mb, n, delta))
    assert math.isinf(_certified("local", 0.75, local, n, delta))
    # non-private (epsilon 0): no ledger at all
    static = {"loss": D.mnist_loss, "batch_size": 443, "silos_per_round": 25, "scripts": ()}
    assert make_ledger(LCG._build("mbsgd", static, epsilon=0.0, step_size=1.0, unit_z=mb, lipschitz=1.0), n) is None


# ------------------------------------------------------------------------------------------------
# A study's grid is jaxfl.engine.sweep of the family's build, the trial's data as arguments


@pytest.mark.slow
def test_study_grid_matches_engine_sweep(small_data):
    x_te = np.random.default_rng(0).standard_normal((20, 5)).astype(np.float32)
    data = D.TrialData(small_data, x_te, x_te.sum(axis=1), None, D._deltas(small_data), {"naive": 0.1})
    base = LC.INSURANCE.form_of(quick=True)
    settings = {**base.settings, "trial_data": lambda t: data, "epsilons": (1.0,), "rounds": 3, "batch_size": 4,
                "mbsgd_steps": (0.1, 0.5), "clips": (0.5,)}
    study = dataclasses.replace(base, settings=settings, init=lambda seed: {"w": jnp.zeros(5)},
                                families=LCG.FAMILIES[:1], trials=1, reps=2,
                                panels=(Panel("M = 3", (("silos_per_round", 3),)),))
    outcome = run(study, log=lambda *a: None)
    assert {r["algorithm"] for r in outcome.rows} == {LCG.MB, LCG.NP_MB}

    # the same grid, built by hand from the library's algorithm and calibration
    unit = noisy_sgd.calibrate_minibatch_sgd(clip_norm=1.0, counts=small_data.counts, rounds=3, epsilon=1.0,
                                              delta=data.deltas, calibration="experiment",
                                              batch_size=4).noise_multiplier

    def build(epsilon, step_size, clip_norm):
        z = jnp.where(epsilon > 0, jnp.asarray(unit) / jnp.maximum(epsilon, 1e-6), 0.0) if not isinstance(
            epsilon, float) else (np.asarray(unit) / epsilon if epsilon > 0 else 0.0)
        return noisy_sgd.noisy_minibatch_sgd(D.squared_loss, step_size=step_size, batch_size=4, clip_norm=clip_norm,
                                              noise_multiplier=z, participation=3)

    def evaluate(params):
        per = jax.vmap(jax.vmap(D.squared_loss, in_axes=(None, 0, 0)), in_axes=(None, 0, 0))(
            params, small_data.x, small_data.y)
        mask = small_data.mask().astype(per.dtype)
        return {"train_loss": jnp.sum(per * mask) / jnp.sum(mask),
                "test_error": D.relative_rmse(params, jnp.asarray(x_te), jnp.asarray(x_te.sum(axis=1)), 0.1)}

    grid = {"epsilon": [1.0, 0.0], "step_size": [0.1, 0.5], "clip_norm": [0.5]}
    seeds = [study.seed(0, 0, r) for r in range(2)]
    ref = sweep(build, grid, small_data, {"w": jnp.zeros(5)}, rounds=3, seeds=seeds, evaluate=evaluate,
                delta=data.deltas, accountant="lowy")
    assert np.ptp(ref.params["w"][0], axis=0).max() > 0      # the two seeds differ
    loss = ref.metrics["train_loss"].mean(axis=1)
    for row in outcome.rows:
        eps = 0.0 if row["epsilon"] is None else row["epsilon"]
        same = [i for i, c in enumerate(ref.configs) if c["epsilon"] == eps]
        best = same[int(np.argmin(loss[same]))]                 # the selection: smallest mean training loss
        assert (row["step_size"], row["clip_norm"]) == (ref.configs[best]["step_size"], ref.configs[best]["clip_norm"])
        assert row["params"] is None and study.final is None  # no final: rows and stored parts keep no params
        for metric in ("train_loss", "test_error"):
            np.testing.assert_allclose(row["per_seed"][metric], ref.metrics[metric][best], rtol=1e-5)
        jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), row["infos"],
                               jax.tree_util.tree_map(lambda a: np.asarray(a)[best], ref.infos))
        if eps:
            assert row["epsilon_spent"] == pytest.approx(ref.epsilons[best]) and row["accountant"] == "lowy"
        else:
            assert math.isinf(row["epsilon_spent"]) and row["accountant"] is None
        assert row["diverged_configs"] == int(np.sum(~np.isfinite(loss[same])))


@pytest.mark.slow
def test_a_rerun_reuses_the_stored_parts_and_writes_the_same_rows(quick_results, monkeypatch, tmp_path):
    """A study stopped mid-way resumes from out_dir/parts: re-running the finished smoke form runs no grid."""
    from jaxfl.studies import runner

    directory, first = quick_results[SMOKE]
    again = tmp_path / "again"
    shutil.copytree(directory / "parts", again / "parts")
    (again / "parts" / sorted(p.name for p in (again / "parts").iterdir())[-1]).unlink()  # as if stopped there
    oldest = sorted((again / "parts").iterdir())[0]  # as if stored before parts recorded the code that ran them
    stored = pickle.loads(oldest.read_bytes())
    del stored["source"], stored["machine"]
    oldest.write_bytes(pickle.dumps(stored))
    ran = []
    real = runner._sweep
    monkeypatch.setattr(runner, "_sweep", lambda *a, **k: ran.append(1) or real(*a, **k))
    assert main(["reproduce", SMOKE, "--quick", "--out", str(again)]) == 0
    assert len(ran) == 1  # only the missing part was run
    second = json.loads((again / "results.json").read_text())
    strip = lambda run: {k: v for k, v in run.items() if "seconds" not in k}
    assert [strip(r) for r in second["runs"]] == [strip(r) for r in first["runs"]]
    # the time of the parts run earlier still counts: summed as recorded when they ran
    parts = sorted((again / "parts").iterdir())
    assert second["config"]["parts_reused"] == len(parts) - 1
    recorded = sum(pickle.loads(p.read_bytes())["seconds"] for p in parts)
    assert second["config"]["parts_seconds_total"] == pytest.approx(recorded)
    assert sum(t["parts_seconds"] for t in second["config"]["per_trial"]) == pytest.approx(recorded)
    # the code that ran: this checkout's commit for the results and the new part, "unrecorded" for the old part
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parents[2], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert second["source"]["commit"] == head
    assert len(second["config"]["parts_sources"]) == 2 and "unrecorded" in second["config"]["parts_sources"]
    assert any(label.startswith(head[:12]) for label in second["config"]["parts_sources"])
    # and the machine that finished each part: this one's name and vector extensions, "unrecorded" for the old one
    here = f"{provenance.cpu_model()}: {provenance.cpu_vector_extensions() or 'none listed'}"
    assert second["config"]["parts_machines"] == sorted([here, "unrecorded"])
    assert second["environment"]["cpu_vector_extensions"] == provenance.cpu_vector_extensions()


def test_each_ablation_variant_is_the_papers_form_with_one_scripts_choice():
    paper = dict(LC.PAPER_SCRIPTS)
    for study, scripts in ((LC.INSURANCE, LC.INSURANCE_SCRIPTS), (LC.OBESITY, LC.OBESITY_SCRIPTS)):
        changed = set()
        for name in (v for v in study.variants if v.startswith("ablation-")):
            form = study.form_of(variant=name)
            if form["scripts"]:
                diff = {o: v for o, v in form["scripts"] if paper[o] != v}
                assert len(diff) == 1 and form["data_options"] == study["data_options"], name
                changed |= set(diff.items())
            else:                                          # the data's change alone
                assert form["data_options"] == {"with_replacement": True}, name
                changed.add(("data", "with_replacement"))
        # together the single changes are the authors-scripts variant's
        full = study.form_of(variant="authors-scripts")
        expected = {(o, v) for o, v in full["scripts"] if paper[o] != v}
        expected |= {("data", "with_replacement")} if full["data_options"].get("with_replacement") else set()
        assert changed == expected
