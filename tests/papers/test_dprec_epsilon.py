"""`jaxfl reproduce dprec/epsilon-table` (Triastcyn et al. Table 1 privacy numbers) into a temporary directory."""
import contextlib
import io
import json

import pytest

from papers.dprec import epsilon_table as dprec_epsilon
from jaxfl.studies.registry import experiments

# (task, paper eps) -> (DP-REC eps to 3 dp or None for inf, optimal lambda, local eps 2 dp, DP-FedAvg eps 2 dp);
# digest of Triastcyn et al. §4.6.
EXPECTED = {
    ("MNIST", 3.0): (3.016, 4, 2.75, 3.09),
    ("MNIST", 6.0): (5.980, 2, 4.67, 6.24),
    ("FEMNIST", 1.0): (1.003, 18, 5.21, 0.98),
    ("FEMNIST", 3.0): (3.016, 6, 10.44, 3.03),
    ("FEMNIST", 6.0): (5.988, 3, 13.50, 6.02),
    ("Shakespeare", 3.0): (3.014, 4, 9.73, 3.03),
    ("StackOverflow", 1.0): (None, None, 10.69, 1.00),
}


@pytest.fixture(scope="module")
def produced(tmp_path_factory):
    out = tmp_path_factory.mktemp("dprec")
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        path = experiments()["dprec/epsilon-table"].run(True, out)
    return json.loads(path.read_text()), buf.getvalue()


def test_registered():
    assert dprec_epsilon.NAME in experiments()


@pytest.mark.slow
def test_schema(produced):
    doc, _ = produced
    assert doc["experiment"] == "dprec/epsilon-table"
    assert {"jaxfl_version", "config", "runs", "environment"} <= set(doc)
    assert len(doc["runs"]) == 7
    for run in doc["runs"]:
        assert {"algorithm", "epsilon", "delta", "seed", "metrics", "privacy", "wall_seconds"} <= set(run)
        assert run["privacy"]["accountant"] == "dprec"
        assert run["delta"] == pytest.approx(run["clients"] ** -1.1, rel=1e-12)


def test_numbers(produced):
    doc, _ = produced
    for run in doc["runs"]:
        eps, lam, local, fedavg = EXPECTED[run["task"], run["epsilon"]]
        m = run["metrics"]
        if eps is None:
            assert m["epsilon_dprec"] == "inf" and m["optimal_lambda"] is None and run["infeasible"]
            assert run["privacy"]["epsilon_spent"] == "inf"
        else:
            assert round(m["epsilon_dprec"], 3) == eps and m["epsilon_dprec_3dp"] == eps
            assert m["optimal_lambda"] == lam and run["infeasible"] is None
        assert round(m["epsilon_local"], 2) == local
        assert round(m["epsilon_dpfedavg"], 2) == fedavg == round(run["baseline"]["epsilon"], 2)


def test_stackoverflow_explained(produced):
    doc, printed = produced
    so = doc["config"]["stackoverflow"]
    assert so["strict_overhead"] == pytest.approx(1.107e-6, rel=1e-3) and so["strict_epsilon"] == "inf"
    assert so["delta"] == pytest.approx(8.164e-7, rel=1e-3)
    assert so["settled_bits"] == 49 and round(so["epsilon_at_settled_bits"], 3) == 0.935
    assert round(so["epsilon_without_overhead"], 3) == 0.935
    assert so["first_feasible_bits"] == 43 and so["epsilon_at_first_feasible_bits"] > 0.935
    assert so["clip_multiplier_for_target_at_settled_bits"] == pytest.approx(1.264, abs=5e-4)
    for text in (so["explanation"], printed):
        assert "1.107e-06" in text and "8.164e-07" in text and "49 bits" in text and "0.935" in text
        assert "1.264" in text
    so_run = next(r for r in doc["runs"] if r["task"] == "StackOverflow")
    assert so_run["note"] == so["explanation"]


def test_printed_table(produced):
    _, printed = produced
    for needle in ("3.016", "5.980", "1.003", "5.988", "3.014", "inf", "6.24", "13.50"):
        assert needle in printed
