"""Seed 002's reproductions (``jaxfl reproduce lowy-nonconvex/...``): quick forms end to end, the
noise-multiplier conversions of the experiments' calibrations, the settings of the full forms."""
import json
import math
import statistics

import numpy as np
import pytest

from jaxfl.accounting import lowy_nonconvex as A
from jaxfl.cli import main
from jaxfl.experiments import lowy_nonconvex as N
from jaxfl.experiments.lowy_nonconvex_data import CIFAR_SUBSET_NOTE
from jaxfl.experiments.lowy_nonconvex_report import replot
from jaxfl.experiments.registry import BENCHMARKS, experiments

NAMES = ["lowy-nonconvex/mnist", "lowy-nonconvex/cifar10", "lowy-nonconvex/wbcd"]
SMOKE = "lowy-nonconvex/wbcd"  # the paper's end-to-end smoke test in the fast tier; the other quick forms are slow
PNG = b"\x89PNG\r\n\x1a\n"
DP = {"ISRL-DP SPIDER", "ISRL-DP MB-SGD", "ISRL-DP Local SGD", "ISRL-DP FedProx-SPIDER (Alg. 3)",
      "ISRL-DP Alt Fed-SPIDER (Alg. 11)"}
NON_PRIVATE = {"MB-SGD (non-private)", "Local SGD (non-private)"}


def test_experiments_and_benchmark_are_registered():
    assert set(NAMES) <= set(experiments())
    assert "lowy_nonconvex_grid" in BENCHMARKS


@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n == SMOKE else pytest.mark.slow) for n in NAMES])
def test_quick_form_writes_finite_results(quick_results, name):
    d, doc = quick_results[name]
    cfg = doc["config"]
    assert doc["experiment"] == name and cfg["quick"] is True and "QUICK" in cfg["form"]
    assert (d / "figure.png").read_bytes()[:8] == PNG and (d / "summary.md").read_text().count("|") > 10
    runs = doc["runs"]
    assert {r["algorithm"] for r in runs} == DP | NON_PRIVATE
    per_panel = cfg["trials"] * len(cfg["panels"])
    for alg in DP | NON_PRIVATE:
        mine = [r for r in runs if r["algorithm"] == alg]
        assert len(mine) == per_panel * (len(cfg["epsilons"]) if alg in DP else 1)
    for r in runs:
        assert {"algorithm", "epsilon", "delta", "seed", "metrics", "privacy", "step_size", "clip_norm", "panel"} <= set(r)
        err = r["metrics"]["test_error"]
        assert math.isfinite(err) and 0.0 <= err <= 1.0
        assert math.isfinite(r["metrics"]["train_loss"])
        if r["algorithm"] in DP:
            assert r["privacy"]["epsilon_nominal"] == r["epsilon"] and r["privacy"]["accountant"] == "lowy"
            assert r["privacy"]["epsilon_spent"] == "inf" or float(r["privacy"]["epsilon_spent"]) > 0
        else:
            assert r["epsilon"] is None and r["privacy"]["accountant"] is None
    # ISRL-DP SPIDER is, per trial and epsilon, the variant with the smaller training loss
    for r in (r for r in runs if r["algorithm"] == "ISRL-DP SPIDER"):
        same = [s for s in runs if s["algorithm"] in ("ISRL-DP FedProx-SPIDER (Alg. 3)", "ISRL-DP Alt Fed-SPIDER (Alg. 11)")
                and s["epsilon"] == r["epsilon"] and s["seed"] == r["seed"] and s["panel"] == r["panel"]]
        assert r["metrics"]["train_loss"] == min(s["metrics"]["train_loss"] for s in same)
        assert r["variant"] in {s["algorithm"] for s in same}
    assert set(cfg["ordering"]) == {f"M = {m}, R = {r}" for m, r in cfg["panels"]}
    replot(d / "results.json", d / "replot.png")
    assert (d / "replot.png").read_bytes()[:8] == PNG


@pytest.mark.slow
def test_cifar_quick_says_it_runs_on_the_subset(quick_results):
    d, doc = quick_results["lowy-nonconvex/cifar10"]
    assert doc["config"]["data"] == CIFAR_SUBSET_NOTE and CIFAR_SUBSET_NOTE in doc["config"]["notes"]
    assert "subset" in doc["config"]["per_trial"][0]["source"]


@pytest.mark.slow
def test_mnist_quick_learns(quick_results):
    _, doc = quick_results["lowy-nonconvex/mnist"]
    errs = [r["metrics"]["test_error"] for r in doc["runs"] if r["algorithm"] == "MB-SGD (non-private)"]
    assert np.mean(errs) < 0.3          # chance is 0.5


# ------------------------------------------------------------------------------------------------
# Noise multipliers: the engine's z from the paper's sigma (std on a mean of K terms)


@pytest.mark.parametrize("eps", [0.75, 3.0, 18.0])
def test_noise_multipliers_are_the_papers_sigmas(eps):
    n, R, K, q = 1238, 25, 606, 2
    delta = 1.0 / n**2
    for clip in (1.0, 5.0, 1e4):       # the paper's L is the clip C; z does not depend on it
        mb = A.sigma_mbsgd_experiment(clip, n, eps, delta, R)
        assert N.noise_multipliers(N.MB, n, delta, eps, R, K) == pytest.approx(mb * K / clip)
        assert mb**2 == pytest.approx(8 * clip**2 * R * math.log(2 / delta) / (n**2 * eps**2))
        step = math.sqrt(8 * clip**2 * K * R * math.log(2 / delta) / (n**2 * eps**2))
        assert N.noise_multipliers(N.LOCAL, n, delta, eps, R, K) == pytest.approx(step / clip)
        s1 = math.sqrt(16 * clip**2 * math.log(1 / delta) * max(R / q, 1) / (eps**2 * n**2))
        s_hat2 = math.sqrt(64 * clip**2 * R * math.log(1 / delta) / (eps**2 * n**2))
        z1, z2 = N.noise_multipliers(N.SPIDER, n, delta, eps, R, K, q)
        assert z1 == pytest.approx(s1 * K / clip) and z2 == pytest.approx(s_hat2 * K / (2 * clip))
        fresh = math.sqrt(8 * clip**2 * math.log(2 / delta) * R / (n**2 * eps**2))
        zf, zd = N.noise_multipliers(N.ALT, n, delta, eps, R, K)
        assert zf == pytest.approx(fresh * K / clip) and zd == pytest.approx(2 * fresh * K / (2 * clip))
    # z is proportional to 1/eps, which the grid programs rely on (they get z(eps = 1) and divide)
    for fam, qq in ((N.MB, None), (N.LOCAL, None), (N.SPIDER, 3), (N.ALT, None)):
        unit = np.atleast_1d(N.noise_multipliers(fam, n, delta, 1.0, R, K, qq))
        np.testing.assert_allclose(np.atleast_1d(N.noise_multipliers(fam, n, delta, eps, R, K, qq)), unit / eps)


def test_calibration_uses_the_smallest_silo():
    counts = np.array([169, 285, 0])
    assert N.calibration(counts) == (169, 1.0 / 169**2)
    assert N.batch_size(np.full(25, 1238), 25) == 606 and N.batch_size(np.full(25, 1238), 50) == 428
    assert N.engine_rounds(N.ALT, 25) == 50 and N.engine_rounds(N.SPIDER, 25) == 25


def test_certified_epsilon_counts_alt_spider_messages_twice():
    setup = N.mnist_setup(True)
    counts, deltas = np.full(25, 1238), np.full(25, 1 / 1238.0**2)
    z = N.noise_multipliers(N.ALT, 1238, deltas[0], 0.75, 25, 606)
    one = N.certified_epsilon(setup, N.ALT, 25, 25, 606, z, counts, deltas)
    fed = N.certified_epsilon(setup, N.SPIDER, 25, 50, 606, z, counts, deltas, q=2)   # the same 50 messages
    assert math.isfinite(one) and one == pytest.approx(fed)


# ------------------------------------------------------------------------------------------------
# The full forms' settings (digest §6)


def test_full_settings_are_the_papers():
    s = N.mnist_setup(False)
    assert set(s.panels) == {(12, 25), (12, 50), (25, 25), (25, 50)}
    assert s.epsilons == (0.75, 1.0, 1.5, 3.0, 6.0, 12.0, 18.0) and s.clips == (1.0, 5.0, 10.0, 100.0, 10000.0)
    for fam in (N.MB, N.LOCAL, N.SPIDER, N.ALT):
        assert s.step_sizes(fam, 25) == pytest.approx(tuple(np.exp(np.linspace(-9, 0, 5))))
    assert s.phases(25) == (1, 2) and s.phases(50) == (1, 2, 3, 4)
    c = N.cifar10_setup(False)
    assert set(c.panels) == {(10, 50), (10, 100)} and c.clips == (0.001, 0.01, 0.1, 1.0, 5.0, 10.0)
    assert len(c.step_sizes(N.LOCAL, 50)) == 20 and len(c.step_sizes(N.SPIDER, 50)) == 12
    assert len(c.step_sizes(N.MB, 100)) == 8 and c.phases(100) == tuple(range(1, 9))
    w = N.wbcd_setup(False)
    assert w.panels == ((2, 25),) and w.clips == (0.1, 1.0, 5.0, 10.0) and w.phases(25) == tuple(range(1, 11))
    assert w.step_sizes(N.ALT, 25) == pytest.approx(tuple(np.exp(np.linspace(-9, 0, 15))))


@pytest.mark.full
@pytest.mark.parametrize("name", NAMES)
def test_full_reproduction_runs(tmp_path, name):
    """The full forms (MNIST: about an hour per trial on 2 CPU cores; see docs/reproductions.md)."""
    assert main(["reproduce", name, "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert all(math.isfinite(r["metrics"]["test_error"]) for r in doc["runs"])


def test_paired_difference_is_over_trials_of_the_same_panel_and_epsilon():
    from jaxfl.experiments.lowy_nonconvex_report import MB, SPIDER, paired_difference

    def row(alg, trial, err, eps=3.0, panel="M = 25, R = 25"):
        return {"algorithm": alg, "trial": trial, "test_error": err, "epsilon": eps, "panel": panel}

    rows = [row(SPIDER, 0, 0.10), row(SPIDER, 1, 0.20), row(SPIDER, 2, 0.30), row(SPIDER, 3, 0.0),
            row(MB, 0, 0.20), row(MB, 1, 0.25), row(MB, 2, 0.50),
            row(MB, 1, 9.0, eps=6.0), row(MB, 2, 9.0, panel="M = 12, R = 25")]
    p = paired_difference(rows, "M = 25, R = 25", 3.0, SPIDER, MB)
    d = [-0.10, -0.05, -0.20]                       # trial 3 has no MB-SGD row: not paired
    assert p["trials"] == 3
    assert p["mean"] == pytest.approx(statistics.mean(d))
    assert p["se"] == pytest.approx(statistics.stdev(d) / math.sqrt(3))
    assert p["verdict"] == "lower"                  # -0.1167 + 2 x 0.0441 < 0
    assert paired_difference(rows, "M = 25, R = 25", 3.0, MB, SPIDER)["verdict"] == "higher"
    one = paired_difference(rows[:1] + rows[4:5], "M = 25, R = 25", 3.0, SPIDER, MB)
    assert one["trials"] == 1 and math.isnan(one["se"]) and one["verdict"] == "tie"
    close = [row(SPIDER, 0, 0.10), row(SPIDER, 1, 0.30), row(MB, 0, 0.20), row(MB, 1, 0.25)]
    assert paired_difference(close, "M = 25, R = 25", 3.0, SPIDER, MB)["verdict"] == "tie"   # d = -0.1, +0.05
