"""The studies built on Table 1's setting: Table 2 (which layers are private), Table 4 (records per user), Figure 1
(epsilon), and the DP regimes' learning-rate diagnostic (``huang-jdp/dp-learning-rate``)."""
from __future__ import annotations

import dataclasses


from jaxfl.studies.registry import register
from jaxfl.studies.report import Column, Curve, Figure, Report, Table
from jaxfl.studies.spec import Panel, Study
from papers.huang_jdp.notes import _dp_rate_notes, _figure1_notes, _table2_notes, _table4_notes
from papers.huang_jdp.paper import (BATCH, CENTRAL_DP_RATES, CLIP, DELTA, DP_RATES, FULL, JOINT, LOW_DP_RATES,
                                    N128_DP_RATES, PAPER, PER_SILO, TABLE3, TABLE4)
from papers.huang_jdp.regimes import (REGIMES, _dp_rate_family, _dp_rate_label, _dp_tuned_variant, _families, _panels,
                                      _table2_dp_tuned, _table2_regimes)
from papers.huang_jdp.studies import QUICK, _table1, _tuning


def _variant_study(name, description, *, regimes, panels, notes, settings=None, figure=None, config=None,
                   quick_panels=QUICK["panels"], variants=None, combined=None):
    base = _table1("mnist")
    columns = tuple(Column(f"{r.label} (%)", r.label, "mean_std") for r in regimes if r.private)
    report = Report(table=Table(columns=columns, metric="test_accuracy", metric_name="test accuracy",
                                references=tuple(r.label for r in regimes if not r.private), scale=100, digits=2,
                                over="seeds", reference_value="mean_std"),
                    figure=figure, header="{name}, {panel}: {trials} run(s) ({form} form)", notes=notes,
                    combined=combined)
    return dataclasses.replace(
        base, name=name, description=description, families=_families(regimes), panels=panels, report=report,
        settings={**base.settings, **(settings or {})}, config={**base.config, **(config or {})},
        quick={**QUICK, "panels": quick_panels}, variants=variants or {})


TABLE_2 = register(_variant_study(
    "huang-jdp/table2", "Huang et al. Table 2 (MNIST): which layers are private under joint DP (eps 1), n = 256",
    regimes=_table2_regimes(), panels=_panels((256,)), notes=_table2_notes,
    quick_panels=(Panel("n = 4", (("owners", 4),)),),
    config={"panel": "n = 256: Table 2's numbers equal Table 1's n = 256 entries (its caption says 128, digest "
                      "§5.6)"},
    variants={"dp-tuned": _table2_dp_tuned()}))


TABLE_4 = register(_variant_study(
    "huang-jdp/table4", "Huang et al. Table 4 (MNIST): records per user m/r in {1, 2, 5, 10, 20}, full DP at eps 1 "
                        "and joint DP at eps 1, 3, 8, n = 4 and 256 (user level by group privacy)",
    regimes=(dataclasses.replace(REGIMES["full_dp"], epsilons=(1.0,)),
             dataclasses.replace(REGIMES["joint_dp"], epsilons=(1.0, 3.0, 8.0))),
    panels=tuple(Panel(f"n = {n}, m/r = {k}", (("owners", n), ("records_per_user", k)))
                 for n, k in TABLE4), notes=_table4_notes, combined=_table4_notes,  # n = 4 and 256 on two machines
    quick_panels=tuple(Panel(f"n = 4, m/r = {k}", (("owners", 4), ("records_per_user", k))) for k in (1, 2)),
    config={"user_level": "record-level DP-SGD calibrated to (eps / k, delta / (k e^eps)) (the paper's group "
                          "privacy, jaxfl.accounting.group.record_level_target(bound='paper')); per-silo and no-DP "
                          "do not depend on m/r: Table 1's rows"},
    variants={"dp-tuned": _dp_tuned_variant("mnist")}))


FIGURE_1 = register(_variant_study(
    "huang-jdp/figure1", "Huang et al. Figure 1 (MNIST): full DP vs joint DP over eps in {1, 2, 5, 10, 100}, per n, "
                         "with per-silo training for reference",
    regimes=(REGIMES["per_silo"], REGIMES["full_dp"], REGIMES["joint_dp"]), panels=_panels(sorted(TABLE3)),
    notes=_figure1_notes, combined=_figure1_notes,  # panels run on several machines or sittings: one table
    settings={"epsilons": (1.0, 2.0, 5.0, 10.0, 100.0)},
    figure=Figure(curves=(Curve(FULL, {"color": "C0", "marker": "o"}), Curve(JOINT, {"color": "C1", "marker": "s"}),
                          Curve(PER_SILO, {"color": "gray", "linestyle": "--"}, line=True)),
                  title="Huang et al. Figure 1, {panel}", ylabel="test accuracy", metric="test_accuracy"),
    variants={"dp-tuned": _dp_tuned_variant("mnist")}))


def _dp_learning_rate() -> Study:
    base = _tuning("mnist")
    families = (_dp_rate_family(REGIMES["full_dp"]), _dp_rate_family(REGIMES["joint_dp"]))

    def report(rates, of=families):
        labels = tuple(_dp_rate_label(f.label, lr) for f in of for lr in rates)
        return Report(table=Table(columns=tuple(Column(label, label, "mean_std") for label in labels),
                                  metric="test_accuracy", metric_name="validation accuracy", digits=4),
                      header="{name}, {panel}: validation accuracy per regime and learning rate, eps 1 ({form} "
                             "form)", notes=_dp_rate_notes)

    fashion = {"settings": {"dataset": "fashion-mnist"}, "config": {"note": "Fashion-MNIST instead of MNIST"}}

    def on_fashion(variant: dict) -> dict:
        """``variant`` on Fashion-MNIST: its settings plus the dataset, the two notes joined."""
        return {**variant, "settings": {**variant["settings"], **fashion["settings"]},
                "config": {"note": "; ".join(v["config"]["note"] for v in (fashion, variant))}}

    # the same runs (panels, seeds, data) at rates below the grid: run with --panel 'n = 64'
    low = {"settings": {"learning_rates": LOW_DP_RATES}, "report": report(LOW_DP_RATES),
           "config": {"note": "learning rates below the base form's grid"}}
    # the next n (more noise per owner) at the rates around n = 64's best: its own panel, so its own parts
    n128 = {"settings": {"learning_rates": N128_DP_RATES}, "panels": _panels((128,)), "report": report(N128_DP_RATES),
            "config": {"note": "n = 128 only"}}
    # central noise placement (one draw on the owners' sum per global update), chosen on full DP (the regime with
    # a central guarantee) at n = 64: the rate Table 1's central variants run at
    central = {"settings": {"placement": "central", "learning_rates": CENTRAL_DP_RATES}, "panels": _panels((64,)),
               "families": families[:1], "report": report(CENTRAL_DP_RATES, families[:1]),
               "config": {"note": "central noise placement, full DP at n = 64 (the rate of table1's central "
                                  "variants)"}}
    return dataclasses.replace(
        base, name="huang-jdp/dp-learning-rate",
        description="Huang et al. (MNIST, n = 4, 16 and 64; variants fashion-mnist, low-rates, "
                    "fashion-mnist-low-rates, fashion-mnist-n128): validation accuracy of the full-DP and joint-DP "
                    "regimes at eps 1 over learning rates; a diagnostic of Table 1's DP rows, not its tuning procedure",
        families=families, panels=_panels((4, 16, 64)), report=report(DP_RATES),
        settings={**base.settings, "learning_rates": DP_RATES, "epsilons": (1.0,)},
        config={"paper": PAPER, "clip": CLIP, "delta": DELTA, "batch": BATCH,
                "procedure": "validation split of the training owners (20 %), as the tuning study; tuning on a "
                             "private regime's validation error is not itself private (not accounted)"},
        quick={**QUICK, "settings": {**QUICK["settings"], "learning_rates": (0.01, 0.1)}},
        variants={"fashion-mnist": fashion, "low-rates": low, "fashion-mnist-low-rates": on_fashion(low),
                  "fashion-mnist-n128": on_fashion(n128), "central": central,
                  "fashion-mnist-central": on_fashion(central)})


DP_LEARNING_RATE = register(_dp_learning_rate())
