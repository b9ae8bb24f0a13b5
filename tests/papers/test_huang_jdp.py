"""huang-jdp studies: the owners' data, per-owner evaluation, the local schedule read from Table 3, and the
quick forms end to end (every regime reported, the paper's method stated as not private, the stated regimes
certified at the target)."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfl.data import from_silos
from papers.huang_jdp import (data as HD, derived_studies as HX, notes as HN, paper as HP, regimes as HR,
                               studies as H)
from jaxfl.models import nets


def test_owners_split_ten_thousand_records_over_class_limited_owners():
    train, test, classes = HD.owners("mnist", 64, seed=0)
    counts, test_counts = np.asarray(train.counts), np.asarray(test.counts)
    assert counts.sum() == 10_000 and set(counts) == {156, 157} and test_counts.sum() == 5_000
    assert classes.shape == (64, 8)
    for j in range(64):
        labels = set(np.asarray(train.y[j, :counts[j]]).tolist()) | set(np.asarray(test.y[j, :test_counts[j]]).tolist())
        assert labels <= set(classes[j].tolist())
    assert float(np.asarray(train.x).max()) <= 1.0 and train.x.shape[-3:] == (28, 28, 1)


@pytest.mark.slow  # compiles the CNN: second tier
def test_each_owner_is_scored_on_its_own_split():
    """Owner j's model predicts class j whatever the input (zero weights, a bias on logit j); owner j's split
    holds 4 records of which j + 1 have label j: accuracy (j + 1) / 4, averaged without weights over owners."""
    params = nets.init_params(nets.two_head_cnn, jax.random.PRNGKey(0), nets.IMAGE28_INPUT_SHAPE)
    zero = jax.tree_util.tree_map(jnp.zeros_like, params)
    models = jax.tree_util.tree_map(lambda a: jnp.stack([a] * 3), zero)
    bias = jnp.stack([jnp.eye(10)[j] for j in range(3)])
    models["params"]["fc1"]["dense0"]["bias"] = bias
    x = np.zeros((4, 28, 28, 1), np.float32)
    silos = [(x, np.array([j] * (j + 1) + [9] * (3 - j), np.int32)) for j in range(3)]
    out = HD.evaluate(models, {"test": from_silos(silos)})
    assert float(out["test_accuracy"]) == pytest.approx(np.mean([(j + 1) / 4 for j in range(3)]))
    assert float(out["test_error"]) == pytest.approx(1 - float(out["test_accuracy"]))


def test_schedule_reads_table_3():
    study = H.TABLE_1["mnist"]
    s = HR.schedule(study, 64)
    assert s["rate"] == pytest.approx(32 * 64 / 10_000) and s["local_steps"] == 10 and s["rounds"] == 10
    mean = s["rate"] * 157
    assert s["chunk"] == 8 * math.ceil((mean + 3 * math.sqrt(mean * (1 - s["rate"]))) / 8)
    assert HR.schedule(study, 512)["rate"] == 1.0 and HR.schedule(study, 512)["chunk"] == 20
    epochs = study.form_of(variant="epochs")
    assert HR.schedule(epochs, 64)["local_steps"] == round(10 / s["rate"])


@pytest.mark.study
def test_table1_quick_form_reports_every_regime(quick_results):
    out, doc = quick_results["huang-jdp/table1-mnist"]
    labels = {HP.PER_SILO, HP.NO_DP, HP.FULL, HP.JOINT, HP.STATED}
    for panel in ("n = 4", "n = 16"):
        rows = {r["algorithm"]: r for r in doc["runs"] if r["panel"] == panel}
        assert set(rows) == labels
        assert rows[HP.PER_SILO]["epsilon"] is None and rows[HP.NO_DP]["epsilon"] is None
        joint = rows[HP.JOINT]["privacy"]
        assert joint["epsilon_spent"] == "inf" and joint["stated"] is False and joint["paper_accounting_epsilon"] == 1.0
        for name in (HP.FULL, HP.STATED):
            assert 0.99 <= rows[name]["privacy"]["epsilon_spent"] <= 1.0 + 1e-9
        assert rows[HP.FULL]["noise_multiplier"] == rows[HP.JOINT]["noise_multiplier"] > 0
        for r in rows.values():
            assert 0.0 <= r["metrics"]["test_accuracy"] <= 1.0
    summary = (out / "summary.md").read_text()
    assert "Table 1 layout" in summary and "0.9445 ± 0.0069" in summary


@pytest.mark.study
def test_table1_central_variant_states_the_aggregate_and_reads_e_for_the_dp_regimes_only(tmp_path):
    """``central-epochs`` at n = 4: the DP regimes run one local step per round over T round(E / q) rounds and spend
    eps 1 by the central statement (each owner's own messages far more); per-silo and no-DP keep the base form's
    schedule; the paper's joint DP states nothing."""
    from jaxfl.studies import runner

    form = H.TABLE_1["mnist"].form_of(quick=True, variant="central-epochs", panels=["n = 4"])
    rows = {r["algorithm"]: r for r in runner.run(form, tmp_path, lambda line: None).rows}
    s = HR.schedule(form, 4, "central", "epochs")
    for name in (HP.FULL, HP.STATED):
        row = rows[name]
        assert (row["local_steps"], row["rounds"], row["placement"]) == (1, s["rounds"], "central")
        assert 0.99 <= row["epsilon_spent"] <= 1.0 + 1e-9 and row["privacy"]["per_owner_epsilon"] > 1.5
    assert rows[HP.JOINT]["epsilon_spent"] == math.inf and rows[HP.JOINT]["privacy"]["stated"] is False
    base = HR.schedule(form, 4, "local", "iterations")
    assert (rows[HP.NO_DP]["local_steps"], rows[HP.NO_DP]["rounds"]) == (base["local_steps"], base["rounds"])


@pytest.mark.slow
def test_tuning_quick_form_picks_the_lowest_validation_error(quick_results):
    out, doc = quick_results["huang-jdp/tuning-mnist"]
    assert {r["algorithm"] for r in doc["runs"]} == {HR._rate_label(lr) for lr in (0.03, 0.1)}
    assert all(p["eval_split"] == "validation" for t in doc["config"]["per_trial"] for p in t["panels"].values())
    errors = {}
    for r in doc["runs"]:
        errors.setdefault(r["learning_rate"], []).append(r["metrics"]["test_error"])
    assert sorted(errors) == [0.03, 0.1] and all(len(v) == 2 for v in errors.values())  # every rate, both panels
    best = min(errors, key=lambda lr: (np.mean(errors[lr]), lr))
    assert HR.tuned_learning_rate("mnist", out) == pytest.approx(best)
    with pytest.raises(ValueError, match="reproduce huang-jdp/tuning-mnist"):
        HR.tuned_learning_rate("mnist", out / "missing")


@pytest.mark.slow
def test_a_partial_run_stores_the_full_runs_parts(quick_results, monkeypatch, tmp_path, capsys):
    """``--panel`` runs only the panels named, marks its results partial and keeps the panels' indices, so
    the full run in the same directory reuses its parts and runs only the rest (here: the tuning study's two
    learning-rate stages, one program each, at n = 4)."""
    import json

    from jaxfl.cli import main
    from jaxfl.studies import runner

    _, full = quick_results["huang-jdp/tuning-mnist"]
    assert main(["reproduce", "huang-jdp/tuning-mnist", "--quick", "--panel", "n = 99", "--out", str(tmp_path)]) == 2
    assert "unknown panel 'n = 99'" in capsys.readouterr().err
    assert main(["reproduce", "huang-jdp/tuning-mnist", "--quick", "--panel", "n = 16", "--out", str(tmp_path)]) == 0
    partial = json.loads((tmp_path / "results.json").read_text())
    assert partial["config"]["partial"] is True and partial["config"]["panels"] == ["n = 16"]
    assert "Partial run" in (tmp_path / "summary.md").read_text()
    assert sorted(p.name for p in (tmp_path / "parts").iterdir()) == [f"trial0-panel1-no_dp-{j}.pkl" for j in (0, 1)]
    strip = lambda runs: [{k: v for k, v in r.items() if "seconds" not in k} for r in runs]
    assert strip(partial["runs"]) == strip([r for r in full["runs"] if r["panel"] == "n = 16"])

    ran = []
    real = runner._sweep
    monkeypatch.setattr(runner, "_sweep", lambda *a, **k: ran.append(1) or real(*a, **k))
    assert main(["reproduce", "huang-jdp/tuning-mnist", "--quick", "--out", str(tmp_path)]) == 0
    again = json.loads((tmp_path / "results.json").read_text())
    assert len(ran) == 2 and again["config"]["parts_reused"] == 2 and "partial" not in again["config"]
    assert strip(again["runs"]) == strip(full["runs"])
    # A partial run over it now would drop n = 4's results: refused, the file kept
    assert main(["reproduce", "huang-jdp/tuning-mnist", "--quick", "--panel", "n = 16", "--out", str(tmp_path)]) == 2
    assert "panel(s) n = 4, which this run would drop" in capsys.readouterr().err
    assert json.loads((tmp_path / "results.json").read_text()) == again


@pytest.mark.study
def test_table4_quick_form_calibrates_user_level_by_group_privacy(quick_results):
    """m/r = 2: full and joint DP are calibrated to the record-level (eps / 2, delta / (2 e^eps)) of Lemma 3.6
    as printed; the accountant certifies eps / 2 at that delta for the run, which group privacy turns into the
    user-level (eps, delta); more noise than at m/r = 1; joint DP runs at eps 1, 3 and 8."""
    from jaxfl.accounting.calibrate import noise_multiplier_for

    _, doc = quick_results["huang-jdp/table4"]
    runs = {(r["panel"], r["algorithm"], r["epsilon"]): r for r in doc["runs"]}
    assert {e for (p, a, e) in runs if a == HP.JOINT} == {1.0, 3.0, 8.0}
    one, two = runs[("n = 4, m/r = 1", HP.FULL, 1.0)], runs[("n = 4, m/r = 2", HP.FULL, 1.0)]
    target = (0.5, 1e-4 / (2 * math.e))
    assert two["privacy"]["record_level_target"] == pytest.approx(list(target))
    assert 0.49 <= two["privacy"]["record_level_epsilon"] <= 0.5 + 1e-9
    assert 0.98 <= two["privacy"]["user_level_epsilon"] <= 1.0 + 1e-9
    assert two["privacy"]["user_level_delta"] == pytest.approx(  # k e^{k eps'} delta / (k e^eps)
        1e-4 * math.exp(2 * two["privacy"]["record_level_epsilon"] - 1.0), rel=1e-9)
    assert "record_level_target" not in one["privacy"]
    steps = two["rounds"] * two["local_steps"]
    assert two["noise_multiplier"] == pytest.approx(noise_multiplier_for(*target[:1], two["sampling_rate"], steps,
                                                                         target[1]), rel=1e-6)
    assert two["noise_multiplier"] > one["noise_multiplier"]
    assert runs[("n = 4, m/r = 2", HP.JOINT, 3.0)]["privacy"]["paper_accounting_epsilon"] == 3.0


@pytest.mark.study
def test_table2_quick_form_runs_every_split_of_private_layers(quick_results):
    out, doc = quick_results["huang-jdp/table2"]
    layers = {r["algorithm"]: r["private_layers"] for r in doc["runs"]}
    assert len(layers) == 8 and layers["private: none (full DP)"] == ""
    assert layers["private: conv1, conv2, fc1"] == "conv1,conv2,fc1"
    assert "Table 2 layout" in (out / "summary.md").read_text()


def test_table2_dp_tuned_variant_adds_small_n_and_lays_out_each_panel_beside_the_papers_n256():
    """The dp-tuned Table 2 runs n = 4 and 16 (where the DP rate trains) beside the paper's n = 256; the notes give
    one layout per panel run, the paper's column marked as its n = 256 where the panel is another."""
    form = HX.TABLE_2.form_of(variant="dp-tuned")
    assert [p.label for p in form.panels] == ["n = 4", "n = 16", "n = 256"]
    assert [p.label for p in HX.TABLE_2.form_of().panels] == ["n = 256"]
    label = HR._layers_label(("fc1",))
    runs = [{"panel": panel, "algorithm": label, "epsilon": 1.0, "metrics": {"test_accuracy": a}}
            for panel, a in (("n = 4", 0.8), ("n = 4", 0.9), ("n = 256", 0.5))]
    text = HN._table2_notes({"runs": runs})
    assert "Table 2 layout (n = 4; joint DP eps 1; ours | paper at n = 256):" in text
    assert "Table 2 layout (n = 256; joint DP eps 1; ours | paper):" in text
    assert "| No | No | Yes | 15,690 \\| 17,248 | 0.8500 ± 0.0500 \\| 0.7835 ± 0.0136 |" in text
    assert "| No | No | Yes | 15,690 \\| 17,248 | 0.5000 ± 0.0000 \\| 0.7835 ± 0.0136 |" in text
    assert "n = 16" not in text  # a panel not run has no layout


@pytest.mark.study
def test_figure1_quick_form_runs_every_epsilon_and_checks_the_claims(quick_results):
    out, doc = quick_results["huang-jdp/figure1"]
    cells = {(r["panel"], r["algorithm"], r["epsilon"]) for r in doc["runs"]}
    for panel in ("n = 4", "n = 16"):
        assert (panel, HP.PER_SILO, None) in cells
        assert all((panel, label, eps) in cells for label in (HP.FULL, HP.JOINT) for eps in (1.0, 2.0, 5.0, 10.0,
                                                                                             100.0))
    summary = (out / "summary.md").read_text()
    assert "Figure 1 as numbers" in summary and "of 8 (n, eps) cells" in summary and "of 2 panels" in summary


@pytest.mark.study
def test_dp_learning_rate_quick_form_reports_every_regime_and_rate(quick_results):
    out, doc = quick_results["huang-jdp/dp-learning-rate"]
    cells = {(r["panel"], r["algorithm"]) for r in doc["runs"]}
    assert cells == {(f"n = {n}", HR._dp_rate_label(label, lr)) for n in (4, 16) for label in (HP.FULL, HP.JOINT)
                     for lr in (0.01, 0.1)}
    assert all(r["privacy"]["accountant"] == "rdp" and r["epsilon"] == 1.0 for r in doc["runs"])
    assert all(panel["eval_split"] == "validation" for panel in doc["config"]["per_trial"][0]["panels"].values())
    assert "Best rate per regime and panel" in (out / "summary.md").read_text()


def test_dp_learning_rate_n128_variant_is_fashion_mnist_at_n128_over_its_own_rates():
    """The n = 128 variant: Fashion-MNIST, its one panel (so its parts are its own), the rates around n = 64's
    best, and a report whose columns are those rates' (not the base grid's)."""
    form = HX.DP_LEARNING_RATE.form_of(variant="fashion-mnist-n128")
    assert [p.label for p in form.panels] == ["n = 128"] and dict(form.panels[0].values)["owners"] == 128
    assert form.settings["dataset"] == "fashion-mnist" and form.settings["learning_rates"] == HP.N128_DP_RATES
    assert form.settings["epsilons"] == (1.0,) and form.form == "full+fashion-mnist-n128"
    columns = [c.algorithm for c in form.report.table.columns]
    assert columns == [HR._dp_rate_label(label, lr) for label in (HP.FULL, HP.JOINT) for lr in HP.N128_DP_RATES]


def test_noise_rows_follow_from_the_calibration():
    """n = 512: Poisson rate 1 (32 > 10,000 / 512 records), T E = 20 x 5 steps either way; the per-coordinate
    noise is z C / (q m) for one owner and that over sqrt(n) for the owners' mean; eps spent is the target."""
    from jaxfl.accounting.calibrate import noise_multiplier_for

    row = HR._noise_row({"owners": 512, "reading": "iterations"}, epsilon=1.0)
    z = noise_multiplier_for(1.0, 1.0, 100, 1e-4)
    assert row["metrics"]["steps"] == 100 and row["sampling_rate"] == 1.0
    assert row["metrics"]["noise_multiplier"] == pytest.approx(z)
    assert row["metrics"]["noise_std_owner"] == pytest.approx(z * 15 / (10_000 / 512))
    assert row["metrics"]["noise_std_mean"] == pytest.approx(z * 15 / (10_000 / 512) / math.sqrt(512))
    assert 0.99 <= row["epsilon_spent"] <= 1.0 + 1e-9
    epochs = HR._noise_row({"owners": 64, "reading": "epochs"}, epsilon=1.0)
    assert epochs["metrics"]["steps"] == 10 * round(10 / (32 * 64 / 10_000))


def test_table1_layout_counts_cells_within_three_points_and_names_both_winners():
    """Hand-made accuracies at n = 4 against the paper's MNIST cells (0.9445, 0.9602, 0.4444, 0.4658): per-silo
    2.9 points above (within), no-DP 3.1 below (outside), full DP equal, joint DP 10 above; n = 1024 has no
    paper row."""
    acc = {HP.PER_SILO: 0.9735, HP.NO_DP: 0.9292, HP.FULL: 0.4444, HP.JOINT: 0.5658, HP.STATED: 0.5}
    runs = [{"panel": f"n = {n}", "algorithm": label, "epsilon": None, "metrics": {"test_accuracy": a}}
            for n in (4, 1024) for label, a in acc.items()]
    lines = HN._table1_layout("mnist", {"runs": runs})
    row4 = next(line for line in lines if line.startswith("| 4 |"))
    assert row4.endswith(f"| {HP.PER_SILO} | {HP.PER_SILO} | +12.1 \\| +2.1 |")
    assert "0.9735 ± 0.0000 \\| 0.9445 ± 0.0069" in row4
    assert next(line for line in lines if line.startswith("| 1024 |")).endswith(f"| {HP.PER_SILO} | - | +12.1 |")
    assert lines[-1] == (f"Cells within 3 points of the paper's: {HP.PER_SILO} 1 of 1, {HP.NO_DP} 0 of 1, "
                         f"{HP.FULL} 1 of 1, {HP.JOINT} 0 of 1.")


def test_figure1_notes_check_the_papers_claims_on_the_means():
    """Two panels, hand-made accuracies: joint above full at eps 1 and 10 in both panels but one (n = 4, eps 10),
    n = 4 at eps 1 at chance (0.10, 0.15 < 0.125 + 0.05), full above joint at eps 100 in one panel of two, and a
    gain that grows with n."""
    acc = {(4, 1.0): (0.10, 0.15), (4, 10.0): (0.80, 0.70), (4, 100.0): (0.90, 0.85),
           (16, 1.0): (0.20, 0.60), (16, 10.0): (0.70, 0.90), (16, 100.0): (0.80, 0.95)}
    runs = [{"panel": f"n = {n}", "algorithm": label, "epsilon": eps, "metrics": {"test_accuracy": a}}
            for (n, eps), pair in acc.items() for label, a in zip((HP.FULL, HP.JOINT), pair)]
    runs += [{"panel": f"n = {n}", "algorithm": HP.PER_SILO, "epsilon": None, "metrics": {"test_accuracy": 0.9}}
             for n in (4, 16)]
    text = HN._figure1_notes({"runs": runs})
    assert "| 16 | 10 | 0.7000 ± 0.0000 | 0.9000 ± 0.0000 | +0.2000 | 0.9000 ± 0.0000 |" in text
    assert "eps <= 10: 3 of 4 (n, eps) cells; both regimes at chance (below 0.175) in 1 of them." in text
    assert "eps = 100: 1 of 2 panels." in text
    # gains at eps <= 10: n = 4: (0.05 - 0.1) / 2 = -0.025; n = 16: (0.4 + 0.2) / 2 = 0.3
    assert "n = 4: -0.0250, n = 16: +0.3000; larger for larger n: yes." in text


def test_dp_regimes_take_the_private_learning_rates_when_the_study_sets_them(tmp_path):
    import json

    settings = {**HP.SETTINGS, "learning_rates": (0.3,), "private_learning_rates": lambda: (0.03,)}
    assert HR._rate_stages(settings) == ((0.3,),) and HR._rate_stages(settings, private=True) == ((0.03,),)
    assert HR._rate_stages({**settings, "private_learning_rates": None}, private=True) == ((0.3,),)
    # the dp-tuned variant's rate: the lowest mean validation error over the runs of panels n = 4 and 16
    # (0.03: (0.2 + 0.3) / 2 against 0.01's 0.4); n = 64's runs, which favour 0.01, are not part of the choice
    runs = [{"panel": panel, "learning_rate": lr, "metrics": {"test_error": e}}
            for panel, lr, e in (("n = 4", 0.01, 0.4), ("n = 4", 0.03, 0.2), ("n = 16", 0.01, 0.4),
                                 ("n = 16", 0.03, 0.3), ("n = 4", 0.1, 0.8), ("n = 64", 0.01, 0.1),
                                 ("n = 64", 0.03, 0.9))]
    (tmp_path / "results.json").write_text(json.dumps({"runs": runs}))
    assert HR.tuned_learning_rate("mnist", results_dir=tmp_path, study="dp-learning-rate") == 0.03
    with pytest.raises(ValueError, match="huang-jdp/dp-learning-rate"):
        HR.tuned_learning_rate("mnist", results_dir=tmp_path / "missing", study="dp-learning-rate")
    (tmp_path / "results.json").write_text(json.dumps({"runs": [r for r in runs if r["panel"] == "n = 64"]}))
    with pytest.raises(ValueError, match="no runs of the panels n = 4, n = 16"):
        HR.tuned_learning_rate("mnist", results_dir=tmp_path, study="dp-learning-rate")


def test_dp_tuned_variants_read_the_rate_chosen_on_their_own_dataset(tmp_path, monkeypatch):
    """Table 1 (both datasets), Table 2, Figure 1 and Table 4 have a dp-tuned variant: the DP regimes at the rate with
    the lowest mean validation error in dp-learning-rate (MNIST) or its fashion-mnist variant, the others at the
    no-DP tuning's; a missing result names the command that makes it."""
    import json

    monkeypatch.setattr(HR, "HOME", tmp_path)
    chosen = {"mnist": 0.03, "fashion-mnist": 0.01}
    for dataset, rate in chosen.items():
        where = tmp_path / "results" / "dp-learning-rate" / ("" if dataset == "mnist" else dataset)
        with pytest.raises(ValueError, match="reproduce huang-jdp/dp-learning-rate"
                                             + ("" if dataset == "mnist" else " --variant fashion-mnist")):
            HR.tuned_learning_rate(dataset, study="dp-learning-rate")
        where.mkdir(parents=True, exist_ok=True)
        runs = [{"panel": "n = 4", "learning_rate": lr, "metrics": {"test_error": 0.2 if lr == rate else 0.5}}
                for lr in HP.DP_RATES]
        (where / "results.json").write_text(json.dumps({"runs": runs}))
    for study, dataset in ((H.TABLE_1["mnist"], "mnist"), (H.TABLE_1["fashion-mnist"], "fashion-mnist"),
                           (HX.TABLE_2, "mnist"), (HX.FIGURE_1, "mnist"), (HX.TABLE_4, "mnist")):
        form = study.form_of(variant="dp-tuned")
        assert HR._rate_stages(form, private=True) == ((chosen[dataset],),), study.name
        assert form["private_learning_rates"] is not None and study["private_learning_rates"] is None


def test_dp_rate_notes_name_the_dataset_and_the_best_rate_per_regime(tmp_path, monkeypatch):
    import json

    monkeypatch.setattr(HR, "HOME", tmp_path)
    tuning = tmp_path / "results" / "tuning-fashion-mnist"
    tuning.mkdir(parents=True)
    (tuning / "results.json").write_text(json.dumps({"runs": [
        {"learning_rate": lr, "metrics": {"test_error": e}} for lr, e in ((0.1, 0.3), (0.3, 0.2))]}))
    acc = {(HP.FULL, 0.01): 0.5, (HP.FULL, 0.1): 0.7, (HP.JOINT, 0.01): 0.6, (HP.JOINT, 0.1): 0.45}
    runs = [{"panel": "n = 4", "algorithm": HR._dp_rate_label(label, lr), "epsilon": 1.0,
             "learning_rate": lr, "metrics": {"test_accuracy": a, "test_error": 1 - a}}
            for (label, lr), a in acc.items()]
    # n = 64 favours 0.01 by far; the dp-tuned choice (over n = 4 and 16) stays 0.1 (mean validation error 0.425
    # against 0.45 at 0.01), which counting n = 64 would flip (0.583 against 0.333)
    runs += [{"panel": "n = 64", "algorithm": HR._dp_rate_label(HP.FULL, lr), "epsilon": 1.0, "learning_rate": lr,
              "metrics": {"test_accuracy": a, "test_error": 1 - a}} for lr, a in ((0.01, 0.9), (0.1, 0.1))]
    # a regime no rate lifts above chance (CHANCE + 0.05) has no best rate
    runs += [{"panel": "n = 64", "algorithm": HR._dp_rate_label(HP.JOINT, lr), "epsilon": 1.0, "learning_rate": lr,
              "metrics": {"test_accuracy": a, "test_error": 1 - a}} for lr, a in ((0.01, 0.13), (0.1, 0.17))]
    text = HN._dp_rate_notes({"runs": runs, "config": {"settings": {"dataset": "fashion-mnist"}}})
    assert "per learning rate (fashion-mnist; chance: 0.125)" in text
    assert "| 0.01 | 0.5000 | 0.6000 | 0.9000 | 0.1300 |" in text
    assert "| 0.1 | 0.7000 | 0.4500 | 0.1000 | 0.1700 |" in text
    # on a grid of two rates every best rate is at one of its ends
    assert (f"{HP.FULL}, n = 4: 0.1 (0.7000, the grid's highest); {HP.JOINT}, n = 4: 0.01 (0.6000, the grid's lowest); "
            f"{HP.FULL}, n = 64: 0.01 (0.9000, the grid's lowest); "
            f"{HP.JOINT}, n = 64: none above chance (best 0.1700, at 0.1; below 0.175).") in text
    assert "no-DP validation error) chose 0.3; the dp-tuned variants use the lowest mean validation error over " \
           "n = 4 and n = 16: 0.1." in text



def test_dp_rate_notes_mark_a_best_rate_at_either_end_of_the_grid(tmp_path, monkeypatch):
    import json

    monkeypatch.setattr(HR, "HOME", tmp_path)
    tuning = tmp_path / "results" / "tuning-mnist"
    tuning.mkdir(parents=True)
    (tuning / "results.json").write_text(json.dumps({"runs": [{"learning_rate": 0.3, "metrics": {"test_error": 0.1}}]}))
    acc = {(HP.FULL, 0.003): 0.6, (HP.FULL, 0.03): 0.3, (HP.FULL, 0.3): 0.2,     # best at the lowest rate
           (HP.JOINT, 0.003): 0.2, (HP.JOINT, 0.03): 0.7, (HP.JOINT, 0.3): 0.3}  # best inside the grid
    runs = [{"panel": "n = 16", "algorithm": HR._dp_rate_label(label, lr), "epsilon": 1.0, "learning_rate": lr,
             "metrics": {"test_accuracy": a, "test_error": 1 - a}} for (label, lr), a in acc.items()]
    text = HN._dp_rate_notes({"runs": runs, "config": {"settings": {"dataset": "mnist"}}})
    assert f"{HP.FULL}, n = 16: 0.003 (0.6000, the grid's lowest); {HP.JOINT}, n = 16: 0.03 (0.7000)." in text
    # the low-rates variants run n = 64 only: the dp-tuned choice is the base form's, not re-made from them
    for r in runs:
        r["panel"] = "n = 64"
    text = HN._dp_rate_notes({"runs": runs, "config": {"settings": {"dataset": "mnist"}}})
    assert text.endswith("chose 0.3; the dp-tuned variants' rate is chosen on the base form's n = 4 and n = 16.")

@pytest.mark.study
def test_dp_tuned_reuses_the_base_forms_parts_for_the_regimes_it_leaves_unchanged(quick_results, monkeypatch,
                                                                                    tmp_path):
    """table1-mnist --quick --variant dp-tuned beside the base quick form: per-silo and no-DP (same programs) come
    from the base form's stored parts, copied into the variant's; the three DP regimes run at their own rate;
    the copied rows equal the base form's; a re-run of the variant runs nothing."""
    from jaxfl.studies import runner
    import json
    import pickle
    import shutil

    from jaxfl.cli import main
    

    directory, base_doc = quick_results["huang-jdp/table1-mnist"]
    base = tmp_path / "table1-mnist"
    shutil.copytree(directory / "parts", base / "parts")
    monkeypatch.setattr(HR, "HOME", tmp_path)
    rates = tmp_path / "results" / "dp-learning-rate"
    rates.mkdir(parents=True)
    (rates / "results.json").write_text(json.dumps({"runs": [{"panel": "n = 4", "learning_rate": 0.02,
                                                               "metrics": {"test_error": 0.5}}]}))
    ran = []
    real = runner._sweep
    monkeypatch.setattr(runner, "_sweep",
                        lambda study, family, *a: ran.append(family.name) or real(study, family, *a))
    variant = base / "dp-tuned"
    assert main(["reproduce", "huang-jdp/table1-mnist", "--quick", "--variant", "dp-tuned", "--out", str(variant)]) == 0
    private = {"full_dp", "joint_dp", "joint_dp_stated"}
    assert sorted(ran) == sorted(list(private) * 2)  # two panels
    doc = json.loads((variant / "results.json").read_text())
    assert doc["config"]["parts_reused"] == 4
    key = lambda r: (r["panel"], r["algorithm"])
    strip = lambda r: {k: v for k, v in r.items() if "seconds" not in k}
    base_rows = {key(r): strip(r) for r in base_doc["runs"]}
    for r in doc["runs"]:
        if r["family"] in private:
            assert r["learning_rate"] == 0.02
        else:
            assert r["learning_rate"] == 0.05 and strip(r) == base_rows[key(r)]
    for name in (p.name for p in (base / "parts").iterdir() if "per_silo" in p.name or "no_dp" in p.name):
        copied = pickle.loads((variant / "parts" / name).read_bytes())
        assert copied["reused_from"] == "quick"
        stored = pickle.loads((base / "parts" / name).read_bytes())
        assert pickle.dumps(copied["result"]) == pickle.dumps(stored["result"])
        assert (copied["seconds"], copied["source"]) == (stored["seconds"], stored["source"])
    ran.clear()
    assert main(["reproduce", "huang-jdp/table1-mnist", "--quick", "--variant", "dp-tuned", "--out", str(variant)]) == 0
    assert ran == [] and json.loads((variant / "results.json").read_text())["config"]["parts_reused"] == 10


@pytest.mark.slow
def test_a_part_stopped_mid_program_resumes_from_its_segment_checkpoint(quick_results, monkeypatch, tmp_path):
    """``--segment-rounds 1``: each grid program runs round by round with its progress under
    ``OUT/checkpoints``; killed after its first round, the same command resumes there, and the results are
    the whole programs' up to float rounding."""
    import json
    import pickle

    from _helpers import Killed, watch_checkpoint_writes
    from jaxfl.cli import main

    _, full = quick_results["huang-jdp/tuning-mnist"]
    argv = ["reproduce", "huang-jdp/tuning-mnist", "--quick", "--segment-rounds", "1", "--out", str(tmp_path)]
    watch_checkpoint_writes(monkeypatch, die_at=1)
    with pytest.raises(Killed):
        main(argv)
    (stopped,) = (tmp_path / "checkpoints").iterdir()
    progress = pickle.loads(stopped.read_bytes())
    assert progress["round"] == 1 and progress["seconds"] > 0
    rounds = watch_checkpoint_writes(monkeypatch)
    assert main(argv) == 0
    assert rounds[0] == 2 and not any((tmp_path / "checkpoints").iterdir())  # resumed at round 2
    parts = {p.name: pickle.loads(p.read_bytes()) for p in (tmp_path / "parts").iterdir()}
    assert parts and all(p["segment_rounds"] == 1 for p in parts.values())
    assert parts[stopped.name]["seconds"] > progress["seconds"]  # the killed sitting's time counts too
    again = json.loads((tmp_path / "results.json").read_text())
    assert len(again["runs"]) == len(full["runs"])
    for ours, theirs in zip(again["runs"], full["runs"]):
        assert {k: v for k, v in ours.items() if k not in ("metrics", "wall_seconds")} == \
            {k: v for k, v in theirs.items() if k not in ("metrics", "wall_seconds")}
        assert ours["metrics"] == pytest.approx(theirs["metrics"], rel=1e-4, abs=1e-4)
    assert main(["reproduce", "huang-jdp/tuning-mnist", "--quick", "--segment-rounds", "0", "--out",
                 str(tmp_path)]) == 2
