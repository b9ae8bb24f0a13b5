"""Seed 000's reproductions (``jaxfl reproduce lowy-convex/...``): quick forms end to end, the data
construction against closed-form facts, the noise calibration and the grid program."""
import csv
import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfl.accounting.lowy_convex import noise_multiplier_from_sigma, sigma_experiment_local_sgd, sigma_experiment_mbsgd
from jaxfl.data import EVEN_ODD_PAIRS, from_silos, load_insurance, load_mnist, load_obesity
from jaxfl.engine import sweep
from jaxfl.experiments import lowy_convex as LC
from jaxfl.experiments import lowy_convex_data as D
from jaxfl.experiments.lowy_convex_report import replot
from jaxfl.experiments.registry import experiments

NAMES = ["lowy-convex/mnist", "lowy-convex/insurance", "lowy-convex/obesity"]
SMOKE = "lowy-convex/insurance"  # the paper's end-to-end smoke test in the fast tier; the other quick forms are slow
PNG = b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------------------------
# Quick forms through the command line


def test_names_with_a_slash_are_registered():
    assert set(NAMES) <= set(experiments())


@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n == SMOKE else pytest.mark.slow) for n in NAMES])
def test_quick_form_writes_the_results_schema(quick_results, name):
    d, doc = quick_results[name]
    assert doc["experiment"] == name and {"jaxfl_version", "config", "runs", "environment"} <= set(doc)
    assert doc["config"]["quick"] is True and "QUICK" in doc["config"]["form"]
    assert (d / "figure.png").read_bytes()[:8] == PNG and (d / "figure.png").stat().st_size > 10_000
    runs = doc["runs"]
    assert all({"algorithm", "epsilon", "delta", "seed", "metrics", "privacy", "wall_seconds"} <= set(r) for r in runs)
    algorithms = {r["algorithm"] for r in runs}
    assert algorithms == {"ISRL-DP MB-SGD", "ISRL-DP Local SGD", "MB-SGD (non-private)", "Local SGD (non-private)"}
    epsilons = doc["config"]["epsilons"]
    trials = doc["config"]["trials"]
    for alg in algorithms:
        mine = [r for r in runs if r["algorithm"] == alg]
        assert len(mine) == trials * (len(epsilons) if alg.startswith("ISRL") else 1)
    for r in runs:
        err = r["metrics"]["test_error"]
        assert math.isfinite(err) and err >= 0
        if r["algorithm"].startswith("ISRL"):
            # the paper's nominal epsilon and what jaxfl certifies are both recorded
            assert r["privacy"]["epsilon_nominal"] == r["epsilon"] and r["privacy"]["accountant"] == "lowy"
            spent = r["privacy"]["epsilon_spent"]
            assert spent == "inf" or float(spent) > 0
        else:
            assert r["epsilon"] is None and r["privacy"]["accountant"] is None
    with (d / "curves.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {"algorithm", "epsilon", "seed", "round", "participants"} <= set(rows[0])
    assert max(int(r["round"]) for r in rows) == doc["config"]["rounds"]
    assert (d / "summary.md").read_text().count("|") > 10
    replot(d / "results.json", d / "replot.png")       # figures can be redrawn from results.json alone
    assert (d / "replot.png").read_bytes()[:8] == PNG


def _mean_error(doc, algorithm, epsilon=None):
    errs = [r["metrics"]["test_error"] for r in doc["runs"] if r["algorithm"] == algorithm and r["epsilon"] == epsilon]
    return float(np.mean(errs))


@pytest.mark.slow
def test_mnist_quick_is_sane(quick_results):
    _, doc = quick_results["lowy-convex/mnist"]
    assert _mean_error(doc, "MB-SGD (non-private)") < 0.3          # chance is 0.5
    lo, hi = min(doc["config"]["epsilons"]), max(doc["config"]["epsilons"])
    for alg in ("ISRL-DP MB-SGD", "ISRL-DP Local SGD"):
        assert _mean_error(doc, alg, hi) < _mean_error(doc, alg, lo)


def test_insurance_quick_beats_the_naive_predictor_without_privacy(quick_results):
    _, doc = quick_results["lowy-convex/insurance"]
    assert _mean_error(doc, "MB-SGD (non-private)") < 1.0
    assert _mean_error(doc, "Local SGD (non-private)") < 1.0


@pytest.mark.slow
def test_obesity_quick_errors_are_rates(quick_results):
    _, doc = quick_results["lowy-convex/obesity"]
    assert all(0.0 <= r["metrics"]["test_error"] <= 1.0 for r in doc["runs"])


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


def test_batch_sizes_are_the_papers():
    assert LC.mnist_setup(False).batch_size == 443
    assert LC.insurance_setup(False).batch_size == 19
    assert LC.obesity_setup(False).batch_size == 30
    full = LC.mnist_setup(False)
    assert full.rounds == 35 and full.silos_per_round == (25, 12) and full.trials == 20 and full.reps == 3
    assert full.mb_steps == pytest.approx(tuple(np.exp(np.linspace(-6, 0, 10))))


# ------------------------------------------------------------------------------------------------
# Noise calibration and accounting


@pytest.mark.parametrize("lipschitz", [0.7, 20.0, 1e4])
def test_noise_multipliers_follow_the_paper_and_scale_as_one_over_epsilon(lipschitz):
    setup = LC.mnist_setup(False)
    n, delta = np.array([1238.0, 900.0]), np.array([1 / 1238.0**2, 1 / 900.0**2])
    units = LC.unit_noise_multipliers(setup, n, delta)
    for eps in (0.75, 18.0):
        sigma = sigma_experiment_mbsgd(lipschitz, n, 35, eps, delta)           # on the minibatch mean
        assert units[LC.MB] / eps == pytest.approx(noise_multiplier_from_sigma(sigma, lipschitz, 443))
        sigma_step = sigma_experiment_local_sgd(lipschitz, n, 35, 443, eps, delta)
        assert units[LC.LOCAL] / eps == pytest.approx(sigma_step / lipschitz)


def test_certified_epsilon_is_inf_where_the_calculus_proves_nothing():
    setup = LC.mnist_setup(False)
    n = np.full(25, 1238)
    delta = np.full(25, 1 / 1238.0**2)
    units = LC.unit_noise_multipliers(setup, n, delta)
    # Gaussian step needs z >= 2 sqrt(2 ln(1.25 / delta~)), delta~ = delta / (2 R): false at eps = 18
    z18 = float(units[LC.MB][0]) / 18
    assert z18 < 2 * math.sqrt(2 * math.log(1.25 * 2 * 35 / delta[0]))
    assert math.isinf(LC.certified_epsilon(setup, LC.MB, 25, z18, n, delta))
    assert math.isfinite(LC.certified_epsilon(setup, LC.MB, 25, float(units[LC.MB][0]) / 0.75, n, delta))
    assert math.isinf(LC.certified_epsilon(setup, LC.LOCAL, 25, float(units[LC.LOCAL][0]) / 0.75, n, delta))


# ------------------------------------------------------------------------------------------------
# The grid program is jaxfl.engine.sweep with the data as an argument


def test_grid_sweep_matches_engine_sweep(small_data):
    setup = dataclasses.replace(LC.insurance_setup(True), rounds=3, batch_size=4, silos_per_round=(3,), reps=2,
                                init=lambda: {"w": jnp.zeros(5)})
    x_te = np.random.default_rng(0).standard_normal((20, 5)).astype(np.float32)
    data = D.TrialData(small_data, x_te, x_te.sum(axis=1), None, D._deltas(small_data), {"naive": 0.1})
    grid = {"eps": [1.0, 0.0], "lr": [0.1, 0.5], "clip": [0.5]}
    aux = LC.trial_aux(setup, data, LC.MB)
    ours = LC.grid_sweep(setup, LC.MB, 3, grid, data, aux, seeds=[5, 6])

    def build(eps, lr, clip):
        z = jnp.where(eps > 0, aux["unit_z"] / jnp.maximum(eps, 1e-6), 0.0)
        return LC.build_algorithm(setup, LC.MB, 3, lr=lr, z=z, clip=clip)

    ref = sweep(build, grid, small_data, setup.init(), rounds=3, seeds=[5, 6],
                evaluate=lambda p: LC._evaluate(setup, p, small_data, aux))
    assert ours.configs == ref.configs
    np.testing.assert_allclose(ours.params["w"], ref.params["w"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours.metrics["train_loss"], ref.metrics["train_loss"], rtol=1e-5)
    assert np.ptp(ours.params["w"][0], axis=0).max() > 0      # the two seeds differ
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), ours.infos, ref.infos)
