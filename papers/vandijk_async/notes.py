"""The notes and table layouts of the studies' reports: the paper's numbers beside jaxfl's."""
from __future__ import annotations


import numpy as np

from jaxfl.studies.report import Column, Curve, RoundsFigure
from papers.vandijk_async.data import _majority
from papers.vandijk_async.paper import CONSTANT_LABEL, DP, PROBLEMS, TABLE3, TABLE3_SIZES
from papers.vandijk_async.programs import _increasing_label, _mean_curve


def _rounds_figure(curves: tuple, title: str) -> RoundsFigure:
    colors = ("C0", "C1", "C2", "C3", "C4", "C5", "C6")
    return RoundsFigure(curves=tuple(Curve(c, {"color": col}) for c, col in zip(curves, colors)), title=title,
                        ylabel="test accuracy (latest broadcast)", x="curve_server_rounds",
                        xlabel="communication rounds completed", caption="Mean over trials (band: min-max); "
                        "evaluated every ~1/40 of the run's slices.")


def _table3_notes(doc: dict) -> str:
    acc: dict = {}
    for r in doc["runs"]:
        acc.setdefault((r["problem"], r["sample_size"]), []).append(r["metrics"]["test_accuracy"])
    sizes = sorted({s for _, s in acc})
    lines = ["Table 3 layout (test accuracy, mean over trials; ours | paper):", "",
             "| problem | " + " | ".join(f"s = {s}" for s in sizes) + " |", "|---" * (len(sizes) + 1) + "|"]
    rounds = {r["sample_size"]: r["rounds"] for r in doc["runs"]}
    lines.append("| rounds | " + " | ".join(str(rounds[s]) for s in sizes) + " |")
    for problem in dict.fromkeys(p for p, _ in acc):
        paper = dict(zip(TABLE3_SIZES, TABLE3.get(problem, ())))
        cells = [f"{np.mean(acc[(problem, s)]):.4f}" + (f" \\| {paper[s]:.4f}" if s in paper else "") for s in sizes]
        lines.append(f"| {PROBLEMS[problem]} | " + " | ".join(cells) + " |")
    return "\n".join(lines + _majority(doc))


def _settings_table(doc: dict, key: str, intro: str, facts=("rounds",), reach: str | None = None) -> str:
    """Notes: per panel and value of the runs' column ``key``, the runs' ``facts`` and final test accuracy
    (mean ± std over trials); with ``reach`` (a value of ``key``), also the first round at which each mean
    learning curve reaches that setting's final mean accuracy in the panel."""
    cells: dict = {}
    for r in doc["runs"]:
        cells.setdefault((r["panel"], r[key]), []).append(r)
    target = {panel: np.mean([r["metrics"]["test_accuracy"] for r in recs])
              for (panel, value), recs in cells.items() if value == reach}
    extra = (f"first round at {reach}'s final accuracy",) if reach is not None else ()
    header = ("panel", key, *facts, "test accuracy", *extra)
    lines = [intro, "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (panel, value), recs in cells.items():
        acc = [r["metrics"]["test_accuracy"] for r in recs]
        row = f"| {panel} | {value} | " + "".join(f"{recs[0][f]} | " for f in facts) + \
            f"{np.mean(acc):.4f} ± {np.std(acc):.4f} |"
        if extra:
            rounds, curve = _mean_curve(recs) if all(r.get("curve") for r in recs) else ([], [])
            hit = np.flatnonzero(np.asarray(curve) >= target.get(panel, np.inf) - 1e-9)
            row += f" {rounds[hit[0]]:.0f} |" if len(hit) else " - |"   # "-": not reached
        lines.append(row)
    return "\n".join(lines + _majority(doc))


def _diminishing_notes(doc: dict) -> str:
    return _settings_table(doc, "setting", "Rounds and final test accuracy (mean ± std over trials). The paper's "
                           "claim (Fig. 1a, E.2.3): the constant setting needs 20 rounds, diminishing steps with "
                           "increasing samples 9, at similar or better accuracy. Last column: from the mean "
                           "learning curve (server rounds completed, mean over trials).", ("rounds", "iterations"),
                           reach=CONSTANT_LABEL)


def _step_size_notes(doc: dict) -> str:
    return _settings_table(doc, "setting", "Rounds and final test accuracy (mean ± std over trials), every setting on "
                           "the same increasing sample sizes. The paper's claim (Fig. 9): diminishing steps from "
                           "eta_0 = 0.1 reach the accuracy that constant steps reach only when fine-tuned (0.01, "
                           "0.005). Last column: from the mean learning curve (server rounds completed, mean over "
                           "trials).", ("rounds", "iterations"), reach=_increasing_label("rounds"))


def _sampling_notes(figure: str):
    def notes(doc: dict) -> str:
        return _settings_table(doc, "method", f"{figure} layout: communication rounds to 20,000 iterations, and "
                               "final test accuracy (mean ± std over trials), per sample-size method. The paper's "
                               "claim: c = 1 and i / ln i need the fewest rounds at good accuracy. Last column: from "
                               "the mean learning curve (server rounds completed, mean over trials).", reach="50 i^0")

    return notes


def _biased_notes(doc: dict) -> str:
    cells: dict = {}
    for r in doc["runs"]:
        cells.setdefault((r["problem"], r["split"]), []).append(r["metrics"]["test_accuracy"])
    lines = ["Final test accuracy (mean ± std over trials), biased against unbiased clients. The paper's claim "
             "(E.2.4): no significant difference.", "", "| problem | biased | unbiased |", "|---|---|---|"]
    for problem in dict.fromkeys(p for p, _ in cells):
        cell = lambda v: f"{np.mean(v):.4f} ± {np.std(v):.4f}" if v else "-"   # noqa: E731
        lines.append(f"| {PROBLEMS[problem]} | {cell(cells.get((problem, 'biased')))} | "
                     f"{cell(cells.get((problem, 'unbiased')))} |")
    return "\n".join(lines + _majority(doc))


def _dp_notes(doc: dict) -> str:
    lines = ["Per run (mean over trials): test accuracy, rounds, aggregate noise sqrt(T) sigma, and three epsilons "
             f"at delta = {DP['delta']:g}: the paper's claim (eps 1, from its selection / Theorem 3.2), its moments "
             "accountant evaluated directly (Lemma D.1, these rounds and N_c), and the tight RDP epsilon of Poisson "
             "rounds at q_i = s_i / N_c. None is a guarantee for the paper's client (module docstring); the last "
             "column is what jaxfl certifies (the stated variant's ledger, worst client; inf: nothing).", "",
             "| panel | run | accuracy | rounds | sqrt(T) sigma | paper's delta at eps 1 | moments eps | tight eps | "
             "certified eps |", "|---|---|---|---|---|---|---|---|---|"]
    cells: dict = {}
    for r in doc["runs"]:
        cells.setdefault((r["panel"], r["algorithm"]), []).append(r)
    for (panel, name), recs in cells.items():
        acc = np.mean([r["metrics"]["test_accuracy"] for r in recs])
        p = recs[0]["privacy"]
        if "moments_epsilon" in p:
            spent = max(float(r["privacy"]["epsilon_spent"]) for r in recs)
            extra = (f"{p['rounds']} | {p['aggregate_noise']:.1f} | {p['paper_selection_delta']:.3g} | "
                     f"{p['moments_epsilon']:.3f} | {p['tight_epsilon_poisson_rdp']:.3f} | {spent:.3f}")
        else:
            extra = f"{recs[0]['rounds']} | - | - | - | - | -"
        lines.append(f"| {panel} | {name} | {acc:.4f} | {extra} |")
    return "\n".join(lines + _majority(doc))


EXAMPLE_COLUMNS = (Column("T (ours)", "selection", "metric:rounds", fmt="{:.0f}"),
                   Column("T (paper)", "selection", "metric:paper_rounds", fmt="{:.0f}"),
                   Column("B_priv (ours)", "selection", "metric:b_priv", fmt="{:.6g}"),
                   Column("B_priv (paper)", "selection", "metric:paper_b_priv", fmt="{:.6g}"),
                   Column("delta (ours)", "selection", "metric:delta", fmt="{:.4g}"),
                   Column("delta (paper)", "selection", "metric:paper_delta", fmt="{:.4g}"),
                   Column("sqrt(T) sigma", "selection", "metric:aggregate_noise", fmt="{:.0f}"),
                   Column("moments eps at that delta", "selection", "metric:moments_epsilon", fmt="{:.3f}"),
                   Column("tight eps (Poisson RDP)", "selection", "metric:tight_epsilon", fmt="{:.3f}"))
