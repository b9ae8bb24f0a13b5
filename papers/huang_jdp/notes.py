"""The notes and table layouts of the studies' reports: the paper's numbers beside jaxfl's."""
from __future__ import annotations

import math

import numpy as np

from jaxfl.studies.report import Column, Report, Table
from jaxfl.models import nets
from papers.huang_jdp.paper import (ABOVE_CHANCE, CHANCE, DP_RATE_CHOICE_PANELS, FULL, JOINT, LAYERS, NO_DP, PER_SILO,
                                    STATED, TABLE1, TABLE2, TABLE2_PANEL, TABLE4, TUNING_QUICK_RATES, TUNING_RATES)
from papers.huang_jdp.regimes import (REGIMES, _chosen, _dp_rate_label, _layers_label, _rate_label, _validation_errors,
                                      schedule, tuned_learning_rate)


def _tuning_notes(doc: dict) -> str:
    errors = _validation_errors(doc["runs"])
    rows = [f"| {lr:g} | {e:.4f} |" for lr, e in errors.items()]
    return "\n".join(["Mean validation error over the panels, per learning rate (no-DP regime):", "",
                      "| learning rate | validation error |", "|---|---|", *rows, "",
                      f"Chosen learning rate: {_chosen(errors):g}"])


# ------------------------------------------------------------------------------------------------
# Table 1 in the paper's layout


def _test_accuracies(doc: dict, panel: str, label: str, eps=None) -> list[float]:
    """Every run's (and seed's) test accuracy of regime ``label`` in ``panel`` (at ``eps`` when given)."""
    return [x for r in doc["runs"] if r["panel"] == panel and r["algorithm"] == label
            and (eps is None or r["epsilon"] == eps)
            for x in r["metrics"].get("test_accuracy_seeds", [r["metrics"]["test_accuracy"]])]


def _paper_mean(cell: str) -> float:
    """``"0.9445 ± 0.0069"`` (a cell of :data:`TABLE1`) -> 0.9445."""
    return float(cell.split()[0])


def _table1_layout(dataset: str, doc: dict) -> list[str]:
    """Table 1 in the paper's layout over the panels of ``doc``: each regime's mean ± std beside the paper's,
    the winner of {per-silo, full, joint} on both sides, joint DP minus full DP on both sides (points), and how
    many of our cells lie within 3 points of the paper's (the issue's criterion)."""
    labels = (PER_SILO, NO_DP, FULL, JOINT, STATED)
    compared = (PER_SILO, NO_DP, FULL, JOINT)   # the paper's four columns; STATED is ours alone
    lines = [f"Table 1 layout ({dataset}; test accuracy mean ± std over runs; ours | paper):", "",
             "| n | " + " | ".join(labels) + " | our winner of {per-silo, full, joint} | paper's winner "
             "| joint - full (points; ours \\| paper) |",
             "|---" * (len(labels) + 4) + "|"]
    within = {label: [0, 0] for label in compared}   # label -> [cells within 3 points, cells compared]
    for n in (int(p.split("=")[1]) for p in dict.fromkeys(r["panel"] for r in doc["runs"])):
        panel = f"n = {n}"
        paper = TABLE1[dataset].get(n)
        ours, means = [], {}
        for i, label in enumerate(labels):
            values = _test_accuracies(doc, panel, label)
            cell = f"{np.mean(values):.4f} ± {np.std(values):.4f}" if values else "-"
            means[label] = float(np.mean(values)) if values else -math.inf
            ours.append(f"{cell} \\| {paper[i]}" if paper is not None and i < 4 else cell)
            if paper is not None and label in within and values:
                within[label][0] += abs(means[label] - _paper_mean(paper[i])) <= 0.03
                within[label][1] += 1
        winner = max((PER_SILO, FULL, JOINT), key=lambda k: means[k])
        theirs, gap = "-", f"{100 * (means[JOINT] - means[FULL]):+.1f}"
        if paper is not None:
            theirs = (PER_SILO, FULL, JOINT)[int(np.argmax([_paper_mean(paper[i]) for i in (0, 2, 3)]))]
            gap += f" \\| {100 * (_paper_mean(paper[3]) - _paper_mean(paper[2])):+.1f}"
        lines.append(f"| {n} | " + " | ".join(ours) + f" | {winner} | {theirs} | {gap} |")
    counts = ", ".join(f"{label} {k} of {m}" for label, (k, m) in within.items() if m)
    return lines + ["", f"Cells within 3 points of the paper's: {counts}."]


def _table1_notes(dataset: str):
    def notes(doc: dict) -> str:
        return "\n".join(_table1_layout(dataset, doc) + [""] + _compute_lines(doc))

    return notes


def _compute_lines(doc: dict) -> list[str]:
    """The notes' compute table: per panel of the full study, the gradient evaluations of one regime run
    (``n`` owners x local steps x rounds x the Poisson chunk, padding included) and the seconds of one trial
    (every regime): measured where the panel ran, else projected from the largest panel run at its seconds
    per evaluation (labelled so)."""
    settings = dict(doc["config"]["settings"])
    settings["table3"] = {int(k): v for k, v in settings["table3"].items()}
    trials = int(doc["config"]["trials"])
    evaluations = {n: n * sch["local_steps"] * sch["rounds"] * sch["chunk"]
                   for n in sorted(settings["table3"]) for sch in [schedule(settings, n)]}
    measured = {}
    for r in doc["runs"]:
        n = int(r["panel"].split("=")[1])
        measured[n] = measured.get(n, 0.0) + float(r["wall_seconds"]) / trials
    if not measured:
        return []
    largest = max(measured)
    per_evaluation = measured[largest] / (evaluations[largest] * len(REGIMES))
    rate = f"{per_evaluation * 1e3:.2f} ms" if per_evaluation >= 1e-4 else f"{per_evaluation * 1e6:.2f} µs"
    lines = [f"Compute on this machine: seconds per trial (all {len(REGIMES)} regimes; panels not run: projected at "
             f"n = {largest}'s {rate} per gradient evaluation):", "",
             "| n | gradient evaluations per regime run | seconds per trial | hours for " f"{trials} trials |",
             "|---|---|---|---|"]
    for n, count in evaluations.items():
        seconds = measured.get(n, count * len(REGIMES) * per_evaluation)
        tag = "" if n in measured else " (projected)"
        hours = seconds * trials / 3600
        digits = (0, 1) if hours >= 0.1 else (1, 3)  # a GPU's panels take seconds: keep them readable
        lines.append(f"| {n} | {count:,} | {seconds:,.{digits[0]}f}{tag} | {hours:.{digits[1]}f}{tag} |")
    return lines


def _report(dataset: str, notes) -> Report:
    columns = (Column(f"{FULL} (%)", FULL, "mean_std"), Column(f"{JOINT} (%)", JOINT, "mean_std"),
               Column(f"{STATED} (%)", STATED, "mean_std"), Column("stated eps spent", STATED, "certified"),
               Column("full-DP eps spent", FULL, "certified"))
    return Report(table=Table(columns=columns, metric="test_accuracy", metric_name="test accuracy",
                              references=(PER_SILO, NO_DP), scale=100, digits=2, over="seeds",
                              reference_value="mean_std"),
                  header="{name}, {panel}: {trials} run(s) ({form} form)", notes=notes,
                  combined=lambda doc: "\n".join(_table1_layout(dataset, doc)))


def _tuning_report() -> Report:
    rates = sorted({lr for stage in TUNING_RATES + TUNING_QUICK_RATES for lr in stage})
    return Report(table=Table(columns=(), metric="test_error", metric_name="validation error",
                              references=tuple(_rate_label(lr) for lr in rates), digits=4,
                              reference_value="mean_std"),
                  header="{name}, {panel}: validation error of the no-DP regime per learning rate ({form} form)",
                  notes=_tuning_notes)


def _records_table(title: str, header: tuple, rows) -> list[str]:
    """A markdown table: ``rows`` of ``(cells...)``."""
    return [title, "", "| " + " | ".join(header) + " |", "|---" * len(header) + "|",
            *("| " + " | ".join(str(c) for c in row) + " |" for row in rows)]


def _accuracy(doc: dict, panel: str, label: str, eps=None) -> str:
    values = _test_accuracies(doc, panel, label, eps)
    return f"{np.mean(values):.4f} ± {np.std(values):.4f}" if values else "-"


def _table2_notes(doc: dict) -> str:
    """Table 2's layout for each panel run; the paper's column is its n = 256 (the only n it reports)."""
    counts, tables = nets.TWO_HEAD_PARAMS, []
    for panel in dict.fromkeys(r["panel"] for r in doc["runs"]):
        paper_at = "paper" if panel == TABLE2_PANEL else f"paper at {TABLE2_PANEL}"
        rows = [(*("Yes" if layer in private else "No" for layer in LAYERS),
                 f"{sum(counts[layer] for layer in private):,} \\| {paper[0]}",
                 f"{_accuracy(doc, panel, _layers_label(private))} \\| {paper[1]}")
                for private, paper in TABLE2.items()]
        tables.append("\n".join(_records_table(f"Table 2 layout ({panel}; joint DP eps 1; ours | {paper_at}):",
                                                ("Conv1 individual", "Conv2 individual", "FC1 individual",
                                                 "individual parameters", "test accuracy"), rows)))
    return "\n\n".join(tables)


def _table4_notes(doc: dict) -> str:
    rows = []
    for (n, k), paper in TABLE4.items():
        panel = f"n = {n}, m/r = {k}"
        cells = [_accuracy(doc, panel, FULL, 1.0)] + [_accuracy(doc, panel, JOINT, e) for e in (1.0, 3.0, 8.0)]
        rows.append((n, k, *(f"{c} \\| {p}" for c, p in zip(cells, paper))))
    return "\n".join(_records_table("Table 4 layout (MNIST; user level by group privacy; ours | paper):",
                                     ("n", "m/r", "full-DP eps 1", "joint-DP eps 1", "joint-DP eps 3",
                                      "joint-DP eps 8"), rows))


def _at_chance(cells) -> str:
    """``"; both regimes at chance (below X) in k of them"`` for ``cells`` of ``(difference, at chance)``, or
    ``""`` when none is."""
    k = sum(at for _, at in cells)
    return f"; both regimes at chance (below {ABOVE_CHANCE:.3f}) in {k} of them" if k else ""


def _figure1_notes(doc: dict) -> str:
    """Figure 1 as numbers (the paper gives none beyond Table 1) and its three claims (digest §5.8) checked
    on the means: (1) joint DP above full DP for every eps <= 10, (2) full DP at or above joint DP at
    eps = 100, (3) joint DP's gain at eps <= 10 larger for larger n."""
    panels = list(dict.fromkeys(r["panel"] for r in doc["runs"]))
    epsilons = sorted({r["epsilon"] for r in doc["runs"] if r["algorithm"] == JOINT})
    mean = lambda values: float(np.mean(values)) if values else math.nan
    rows, low, high, gains = [], [], [], {}
    for panel in panels:
        n = int(panel.split("=")[1])
        for eps in epsilons:
            full, joint = (mean(_test_accuracies(doc, panel, label, eps)) for label in (FULL, JOINT))
            (low if eps <= 10 else high).append((joint - full, max(full, joint) < ABOVE_CHANCE))
            if eps <= 10:
                gains.setdefault(n, []).append(joint - full)
            rows.append((n, f"{eps:g}", _accuracy(doc, panel, FULL, eps), _accuracy(doc, panel, JOINT, eps),
                         f"{joint - full:+.4f}", _accuracy(doc, panel, PER_SILO)))
    table = _records_table("Figure 1 as numbers (MNIST; test accuracy mean ± std over runs):",
                           ("n", "eps", "full DP", "joint DP", "joint - full", "per-silo (dashed line)"), rows)
    mean_gain = {n: float(np.mean(g)) for n, g in gains.items()}
    ordered = [mean_gain[n] for n in sorted(mean_gain)]
    claims = [
        "", "The paper's claims (digest §5.8), checked on the means above:", "",
        f"1. joint DP above full DP for eps <= 10: {sum(d > 0 for d, _ in low)} of {len(low)} (n, eps) cells"
        f"{_at_chance(low)}.",
        f"2. full DP at or above joint DP at eps = 100: {sum(d <= 0 for d, _ in high)} of {len(high)} panels"
        f"{_at_chance(high)}.",
        "3. joint DP's mean gain over full DP at eps <= 10, by n: "
        + ", ".join(f"n = {n}: {g:+.4f}" for n, g in sorted(mean_gain.items()))
        + ("; larger for larger n: " + ("yes" if all(a < b for a, b in zip(ordered, ordered[1:])) else "no")
           if len(ordered) > 1 else " (one panel: not testable)") + "."]
    return "\n".join(table + claims)


def _noise_columns(label: str) -> tuple:
    return (Column(f"{label}: steps", label, "metric:steps", fmt="{:.0f}"),
            Column("z", label, "metric:noise_multiplier", fmt="{:.2f}"),
            Column("noise std / coordinate, one owner", label, "metric:noise_std_owner", fmt="{:.3f}"),
            Column("... mean over n owners", label, "metric:noise_std_mean", fmt="{:.3f}"),
            Column("... central (one draw on the mean)", label, "metric:noise_std_central", fmt="{:.3f}"),
            Column("eps spent", label, "certified"))


def _dp_rate_notes(doc: dict) -> str:
    dataset = doc["config"]["settings"]["dataset"]
    panels = list(dict.fromkeys(r["panel"] for r in doc["runs"]))
    rates = sorted({float(r["learning_rate"]) for r in doc["runs"]})
    regimes = [label for label in (FULL, JOINT) if any(r["algorithm"].startswith(label + ",") for r in doc["runs"])]
    header = ("learning rate", *(f"{label}, {panel}" for panel in panels for label in regimes))
    rows, best = [], {}
    for lr in rates:
        cells = []
        for panel in panels:
            for label in regimes:
                values = _test_accuracies(doc, panel, _dp_rate_label(label, lr))
                cells.append(f"{np.mean(values):.4f}" if values else "-")
                if values and np.mean(values) > best.get((panel, label), (None, -1.0))[1]:
                    best[(panel, label)] = (lr, float(np.mean(values)))
        rows.append((f"{lr:g}", *cells))
    lines = _records_table(f"Validation accuracy of the DP regimes at eps 1 per learning rate ({dataset}; chance: "
                           f"{CHANCE}):",
                           header, rows)
    # a best rate at either end of the grid may not be the best rate: a rate beyond it was not tried
    edge = {rates[0]: ", the grid's lowest", rates[-1]: ", the grid's highest"}
    if doc["config"]["settings"].get("placement") == "central":
        choice = (f"Table 1's central variants use the lowest mean validation error here: "
                  f"{_chosen(_validation_errors(doc['runs'])):g}")
    else:
        errors = _validation_errors(doc["runs"], DP_RATE_CHOICE_PANELS)
        choice_panels = " and ".join(DP_RATE_CHOICE_PANELS)
        choice = (f"the dp-tuned variants use the lowest mean validation error over {choice_panels}: "
                  f"{_chosen(errors):g}" if errors else
                  f"the dp-tuned variants' rate is chosen on the base form's {choice_panels}")
    lines += ["", "Best rate per regime and panel: " + "; ".join(
        f"{label}, {panel}: " + (f"{lr:g} ({acc:.4f}{edge.get(lr, '')})" if acc >= ABOVE_CHANCE else
                                 f"none above chance (best {acc:.4f}, at {lr:g}; below {ABOVE_CHANCE:.3f})")
        for (panel, label), (lr, acc) in best.items())
        + f". The procedure of Table 1 (no-DP validation error) chose {tuned_learning_rate(dataset):g}; {choice}."]
    return "\n".join(lines)
