"""dprec/mnist and dprec/femnist-scale: the paper's traffic figures from the exact byte counter, and the
quick forms end to end (results schema, epsilon spent equals the target for both methods)."""
import json

import pytest

from papers.dprec import programs as dprec_programs, studies as dprec
from jaxfl.studies import tables


@pytest.mark.slow
def test_traffic_of_the_papers_full_settings_matches_table_1():
    """Table 1: MNIST DP-REC 0.01 GB vs DP-FedAvg 43 GB (4300x); FEMNIST 14.2 GB vs 259 GB (18x). "GB" is GiB."""
    mnist = dprec_programs.paper_traffic(dprec.MNIST)
    assert mnist["num_params"] == 582_026 and mnist["message_bits"] == 8 * 7 + 32
    assert round(mnist["dp_rec_gib"]["total"], 2) == 0.01
    assert round(mnist["dp_fedavg_gib"]) == 43
    assert 4000 < mnist["compression"] < 4600
    femnist = dprec_programs.paper_traffic(dprec.FEMNIST_SCALE)    # the paper's DP-FedAvg ran 1500 rounds there
    assert femnist["num_params"] == 231_742
    assert round(femnist["dp_rec_gib"]["total"], 1) == 14.2
    assert round(femnist["dp_fedavg_gib"]) == 259
    assert femnist["dp_rec_full_downloads"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["dprec/mnist", pytest.param("dprec/femnist-scale", marks=pytest.mark.study)])
def test_quick_forms_run_both_methods_at_equal_epsilon(name, tmp_path):
    from jaxfl.studies.registry import get_experiment

    path = get_experiment(name).run(True, tmp_path / "results" / name)
    doc = json.loads(path.read_text())
    assert doc["experiment"] == name and (tmp_path / "results" / name / "curves.csv").exists()
    by_method = {r["algorithm"]: r for r in doc["runs"]}
    assert set(by_method) == {"DP-REC", "DP-FedAvg"}
    for run in doc["runs"]:
        assert run["privacy"]["accountant"] == "dprec"
        assert run["epsilon"] - 0.01 <= run["privacy"]["epsilon_spent"] <= run["epsilon"] + 1e-9
        assert 0.0 <= run["metrics"]["test_accuracy"] <= 1.0
    rec_gib = by_method["DP-REC"]["metrics"]["gib_total"]
    assert 0 < rec_gib < by_method["DP-FedAvg"]["metrics"]["gib_total"] / 100
    assert all(r["calibration"].startswith("recalibrated") for r in doc["runs"])
    assert "DP-REC accuracy" in (tmp_path / "results" / name / "summary.md").read_text()
    # the runs' own seconds (checkpointed runs): a second sitting finds them done and reports the same total
    runs_seconds = sum(r["wall_seconds"] for r in doc["runs"])
    assert doc["config"]["runs_seconds_total"] == pytest.approx(runs_seconds) and runs_seconds > 0
    written = {f: f.read_text() for f in (tmp_path / "results" / name / "checkpoints").glob("*/metrics.jsonl")}
    again = json.loads(get_experiment(name).run(True, tmp_path / "results" / name).read_text())
    assert again["config"]["runs_seconds_total"] == pytest.approx(runs_seconds)
    # the second sitting retrained nothing: a retrained run would append its records again
    assert len(written) == len(doc["runs"]) and all(f.read_text() == text for f, text in written.items())
    assert f"{runs_seconds:,.0f} s over its runs" in tables.block(tmp_path, f"results/{name}")
    if name == "dprec/femnist-scale":
        assert "Fashion-MNIST" in doc["config"]["note"]


@pytest.mark.study
def test_long_runs_log_their_progress_between_evaluations(tmp_path):
    """A study's checkpointed runs log one line per evaluation before the last (the quick form, evaluated
    after every round)."""
    import dataclasses

    from jaxfl.studies import runner
    from jaxfl.studies.registry import get_experiment

    form = dataclasses.replace(get_experiment("dprec/mnist").study.form_of(True), eval_every=1)
    lines = []
    runner.run(form, tmp_path, lines.append)
    progress = [line for line in lines if ", round 1/2: " in line]
    assert sorted(line.split()[0] for line in progress) == ["dp_fedavg", "dp_rec"]   # one per run
    assert all("test_accuracy" in line and "wall_seconds" in line for line in progress)
