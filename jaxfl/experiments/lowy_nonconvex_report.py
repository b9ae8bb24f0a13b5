"""Results files of the seed-002 reproductions: results.json, curves.csv, figure.png, summary.md.

The figure has the shape of the paper's Figs. 4-10: test error against epsilon for ISRL-DP SPIDER,
ISRL-DP MB-SGD and ISRL-DP Local SGD (5th-95th percentile bands over trials) with the non-private
MB-SGD / Local SGD runs as horizontal lines; one panel per (M, R). Aggregation and formatting are
seed 000's (:mod:`jaxfl.experiments.lowy_convex_report`), keyed by the (M, R) panel.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from jaxfl.experiments.lowy_convex_report import _fmt_eps, aggregate, write_files
from jaxfl.experiments.results import run_record

SPIDER, MB, LOCAL = "ISRL-DP SPIDER", "ISRL-DP MB-SGD", "ISRL-DP Local SGD"
ALG3, ALG11 = "ISRL-DP FedProx-SPIDER (Alg. 3)", "ISRL-DP Alt Fed-SPIDER (Alg. 11)"
DP_STYLES = {SPIDER: dict(color="tab:purple", marker="D"), MB: dict(color="tab:blue", marker="o"),
             LOCAL: dict(color="tab:orange", marker="s")}
NONPRIVATE_STYLES = {"MB-SGD (non-private)": dict(color="tab:green", linestyle="--"),
                     "Local SGD (non-private)": dict(color="tab:red", linestyle=":")}
TITLES = {"mnist": "MNIST odd/even MLP (N = 25)", "cifar10": "CIFAR-10 LeNet (N = 10, offline subset)",
          "wbcd": "WBCD MLP (N = 2)"}


def _panels(setup) -> list[str]:
    return [f"M = {m}, R = {r}" for m, r in setup.panels]


PAIRS = (("spider_minus_mbsgd", SPIDER, MB), ("mbsgd_minus_local", MB, LOCAL), ("spider_minus_local", SPIDER, LOCAL))


def paired_difference(rows, panel: str, eps, a: str, b: str) -> dict:
    """Test error of ``a`` minus that of ``b`` at ``eps``, paired by trial (same data split):
    ``{"mean", "se", "trials", "verdict"}`` with ``se`` the standard error of the mean over trials
    (``nan`` for one trial) and ``verdict`` ``"lower"`` / ``"higher"`` where ``mean -/+ 2 se`` excludes 0,
    else ``"tie"`` (within 2 standard errors; always ``"tie"`` for one trial)."""
    err = {alg: {r["trial"]: r["test_error"] for r in rows
                 if r["panel"] == panel and r["algorithm"] == alg and r["epsilon"] == eps} for alg in (a, b)}
    trials = sorted(set(err[a]) & set(err[b]))
    d = np.array([err[a][t] - err[b][t] for t in trials], np.float64)
    if d.size == 0:
        return {"mean": math.nan, "se": math.nan, "trials": 0, "verdict": "tie"}
    se = float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else math.nan
    mean = float(d.mean())
    verdict = "tie" if not math.isfinite(se) or abs(mean) <= 2 * se else ("lower" if mean < 0 else "higher")
    return {"mean": mean, "se": se, "trials": int(d.size), "verdict": verdict}


def ordering(setup, rows) -> dict:
    """Per panel and epsilon: the mean test errors of SPIDER, MB-SGD and Local SGD, whether
    ``SPIDER <= MB-SGD <= Local SGD`` holds for the means, whether it holds within the error bars
    (each ``<=`` read as ``a.p5 <= b.p95``: the 5th-95th percentile bands over trials overlap or are in
    order), and the trial-paired differences of :func:`paired_difference` (``spider_minus_mbsgd``,
    ``mbsgd_minus_local``, ``spider_minus_local``)."""
    out = {}
    for panel in _panels(setup):
        t = aggregate(rows, panel, key="panel")
        out[panel] = {}
        for eps in setup.epsilons:
            s, m, loc = (t.get(a, {}).get(eps) for a in (SPIDER, MB, LOCAL))
            if s is None or m is None or loc is None:
                continue
            out[panel][str(eps)] = {
                "spider": s["mean"], "mbsgd": m["mean"], "local_sgd": loc["mean"],
                "means_ordered": bool(s["mean"] <= m["mean"] <= loc["mean"]),
                "ordered_within_bars": bool(s["p5"] <= m["p95"] and m["p5"] <= loc["p95"]),
                **{name: paired_difference(rows, panel, eps, a, b) for name, a, b in PAIRS}}
    return out


def _paired_cell(p) -> str:
    se = f" ± {p['se']:.4f}" if math.isfinite(p["se"]) else ""
    return f"{p['mean']:+.4f}{se} ({p['verdict']})"


def _cell(c) -> str:
    return "" if c is None else f"{c['mean']:.4f} [{c['p5']:.4f}, {c['p95']:.4f}]"


def summary_markdown(setup, rows) -> str:
    """Markdown tables per (M, R): mean test error [5 %, 95 %] over trials per epsilon and algorithm, the
    variant SPIDER picked, the certified epsilons and the ordering check."""
    lines, order = [], ordering(setup, rows)
    for panel in _panels(setup):
        t = aggregate(rows, panel, key="panel")
        picks = {}
        for r in rows:
            if r["panel"] == panel and r["algorithm"] == SPIDER:
                picks.setdefault(r["epsilon"], []).append(
                    "Alg. 11" if r["variant"] == ALG11 else f"Alg. 3 q={r['phase_length']}")
        lines.append(f"{setup.dataset}, {panel}, {setup.trials} trial(s) x {setup.reps} rep(s), misclassification "
                     f"(mean [5th, 95th percentile] over trials){' -- QUICK FORM' if setup.quick else ''}")
        lines.append("")
        lines.append("| eps (nominal) | ISRL-DP SPIDER | SPIDER variant(s) | ISRL-DP MB-SGD | ISRL-DP Local SGD "
                     "| FedProx-SPIDER (Alg. 3) | Alt Fed-SPIDER (Alg. 11) | SPIDER <= MB <= Local (means / bars) "
                     "| certified eps SPIDER / MB / Local |")
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for eps in setup.epsilons:
            cells = {a: t.get(a, {}).get(eps) for a in (SPIDER, MB, LOCAL, ALG3, ALG11)}
            if any(c is None for c in cells.values()):
                continue
            o = order[panel].get(str(eps), {})
            yes = lambda b: "yes" if b else "no"
            cert = " / ".join(_fmt_eps(cells[a]["certified"]) for a in (SPIDER, MB, LOCAL))
            lines.append(f"| {eps:g} | {_cell(cells[SPIDER])} | {', '.join(picks.get(eps, []))} | {_cell(cells[MB])} "
                         f"| {_cell(cells[LOCAL])} | {_cell(cells[ALG3])} | {_cell(cells[ALG11])} "
                         f"| {yes(o.get('means_ordered'))} / {yes(o.get('ordered_within_bars'))} | {cert} |")
        for name in NONPRIVATE_STYLES:
            cell = t.get(name, {}).get(None)
            if cell is not None:
                lines.append(f"| {name} | {_cell(cell)} | | | | | | | |")
        lines.append("")
        lines.append(f"Paired by trial (same data split): test error difference, mean ± standard error over "
                     f"{setup.trials} trial(s); lower / higher where 2 SE exclude 0, else tie")
        lines.append("")
        lines.append("| eps (nominal) | SPIDER - MB-SGD | MB-SGD - Local SGD | SPIDER - Local SGD |")
        lines.append("|---|---|---|---|")
        for eps in setup.epsilons:
            o = order[panel].get(str(eps))
            if o is not None:
                lines.append(f"| {eps:g} | " + " | ".join(_paired_cell(o[name]) for name, _, _ in PAIRS) + " |")
        lines.append("")
    return "\n".join(lines)


def _figure(setup, rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = _panels(setup)
    cols = min(2, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6.0 * cols, 4.3 * nrows + 0.8), squeeze=False)
    eps = np.asarray(setup.epsilons, np.float64)
    for ax, panel in zip(axes.ravel(), panels):
        t = aggregate(rows, panel, key="panel")
        for (alg, style), shift in zip(DP_STYLES.items(), (0.96, 1.0, 1.04)):
            cells = [t[alg][e] for e in setup.epsilons]
            mean = np.array([c["mean"] for c in cells])
            err = np.array([[c["mean"] - c["p5"] for c in cells], [c["p95"] - c["mean"] for c in cells]])
            ax.errorbar(eps * shift, mean, yerr=np.maximum(err, 0), capsize=3, label=alg, **style)
        for alg, style in NONPRIVATE_STYLES.items():
            c = t[alg][None]
            ax.axhline(c["mean"], label=alg, **style)
            ax.axhspan(c["p5"], c["p95"], color=style["color"], alpha=0.08)
        ax.set_xscale("log")
        ax.set_xticks(eps)
        ax.set_xticklabels([f"{e:g}" for e in eps])
        ax.minorticks_off()
        ax.set_xlabel("epsilon (paper's nominal calibration; delta = 1/n^2)")
        ax.set_ylabel("test error (misclassification rate)")
        ax.set_title(f"{TITLES[setup.dataset]}, {panel}" + (" [QUICK FORM]" if setup.quick else ""), fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes.ravel()[len(panels):]:
        ax.axis("off")
    fig.text(0.01, 0.01, f"{setup.trials} trial(s) x {setup.reps} rep(s); error bars: 5th-95th percentiles over "
             "trials; test error of the final iterate w_R; hyperparameters chosen per epsilon by final training "
             "loss. ISRL-DP SPIDER = the better of FedProx-SPIDER (Alg. 3, over q) and Alt Fed-SPIDER (Alg. 11).",
             fontsize=6.5, va="bottom", ha="left", wrap=True)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=130)
    plt.close(fig)


def replot(results_json: Path, png: Path) -> None:
    """Redraws ``figure.png`` from a ``results.json`` written by :func:`write` (no re-run)."""
    doc = json.loads(Path(results_json).read_text())
    c = doc["config"]
    setup = SimpleNamespace(dataset=c["dataset"], quick=c["quick"], epsilons=tuple(c["epsilons"]),
                            panels=tuple(tuple(p) for p in c["panels"]), trials=c["trials"], reps=c["repetitions"])
    num = lambda v: float(v) if v is not None else math.inf   # results.json writes inf as "inf"
    rows = [{"algorithm": r["algorithm"], "epsilon": r["epsilon"], "panel": r["panel"],
             "test_error": r["metrics"]["test_error"], "step_size": r["step_size"],
             "epsilon_certified": num(r["privacy"]["epsilon_spent"])} for r in doc["runs"]]
    _figure(setup, rows, Path(png))


def write(setup, rows, config, out_dir: Path) -> Path:
    """Writes results.json (ARCHITECTURE §3.4), curves.csv, figure.png and summary.md under ``out_dir``."""
    runs = []
    for r in rows:
        rec = run_record(r["algorithm"], epsilon=r["epsilon"], delta=r["delta"], seed=r["trial"],
                         metrics={"test_error": r["test_error"], "test_error_reps": r["test_error_reps"],
                                  "train_loss": r["train_loss"]},
                         epsilon_spent=r["epsilon_certified"], accountant="lowy" if r["private"] else None,
                         wall_seconds=r["wall_seconds"], silos_per_round=r["silos_per_round"], rounds=r["rounds"],
                         panel=r["panel"], batch_size=r["batch_size"], step_size=r["step_size"],
                         clip_norm=r["clip_norm"], phase_length=r["phase_length"], variant=r.get("variant"),
                         noise_multiplier=r["noise_multiplier"], diverged_configs=r["diverged_configs"])
        if r["private"]:
            rec["privacy"].update({
                "epsilon_nominal": r["epsilon"],
                "nominal_calibration": "paper App. H / authors' code (moments-accountant heuristics): not verified "
                                       "by jaxfl"})
        runs.append(rec)
    return write_files(out_dir, f"lowy-nonconvex/{setup.dataset}", {**config, "ordering": ordering(setup, rows)},
                       runs, rows, lambda p: _figure(setup, rows, p), summary_markdown(setup, rows))
