"""vandijk-async studies: the quick forms end to end (every sample size reported with its rounds, the DP rows
carry the paper's claim, the moments accountant and the tight epsilon, and state no privacy)."""
import math

import numpy as np
import pytest

from jaxfl.accounting import vandijk_async as acct
from jaxfl.experiments import vandijk_async as V


def test_schedule_specs():
    assert V.sizes_of(("constant", 50, 3), 5).tolist() == [[50] * 5] * 3
    sel = V.example_3()
    dp = V.sizes_of(("dp", 16, sel.q, sel.m, 1.0, 4, 10_000), 2)
    assert dp[:, 0].tolist() == [16, 18, 19, 20] and np.array_equal(dp[:, 0], dp[:, 1])


@pytest.mark.slow
def test_table3_quick_form_reports_every_sample_size(quick_results):
    out, doc = quick_results["vandijk-async/table3-a9a"]
    rows = {r["sample_size"]: r for r in doc["runs"]}
    assert sorted(rows) == [50, 100]
    assert rows[50]["rounds"] == math.ceil(1_000 / (5 * 50)) and rows[100]["rounds"] == 2
    assert all(rows[s]["iterations"] == 5 * s * rows[s]["rounds"] for s in rows)
    assert all(r["max_lookahead"] <= 1 and 0.5 < r["metrics"]["test_accuracy"] <= 1.0 for r in rows.values())
    assert "Table 3 layout" in (out / "summary.md").read_text()


@pytest.mark.slow
def test_dp_quick_form_reports_three_epsilons_and_no_guarantee(quick_results):
    _, doc = quick_results["vandijk-async/dp"]
    private = [r for r in doc["runs"] if r["epsilon"] is not None]
    assert {r["algorithm"] for r in private} == set(V._dp_names()[0])
    for r in private:
        p = r["privacy"]
        assert p["stated"] is False and p["epsilon_spent"] == "inf"
        assert 0 < p["tight_epsilon_poisson_rdp"] < p["moments_epsilon"]
        assert p["aggregate_noise"] == pytest.approx(math.sqrt(p["rounds"]) * p["sigma"])
        if r["algorithm"].startswith(V.INCREASING):
            assert p["paper_selection_delta"] == pytest.approx(5.502343985212556e-8, rel=1e-9)
        else:
            assert p["moments_epsilon"] == pytest.approx(acct.moments_epsilon([16] * p["rounds"],
                                                                                p["records_per_client"], p["sigma"],
                                                                                5.5e-8))
