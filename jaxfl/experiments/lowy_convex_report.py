"""Results files of the seed-000 reproductions: results.json, curves.csv, figure.png, summary.md.

The figure has the shape of the paper's Figs. 4-6: test error against epsilon, ISRL-DP MB-SGD and
ISRL-DP Local SGD with 90 % bands (5th-95th percentiles over trials; obesity: means only, as the
paper), the non-private runs as horizontal lines; one panel per number of participating silos M.
The epsilons on the axis are the paper's nominal ones; the caption states what jaxfl's accountant
certifies for the same noise.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from jaxfl.experiments.results import run_record, write_results

DP_STYLES = {"ISRL-DP MB-SGD": dict(color="tab:blue", marker="o"),
             "ISRL-DP Local SGD": dict(color="tab:orange", marker="s")}
NONPRIVATE_STYLES = {"MB-SGD (non-private)": dict(color="tab:green", linestyle="--"),
                     "Local SGD (non-private)": dict(color="tab:red", linestyle=":")}
TITLES = {"mnist": "MNIST odd/even logistic regression (N = 25)",
          "insurance": "Insurance linear regression (N = 10)",
          "obesity": "Obesity softmax regression (N = 7)"}
YLABELS = {"misclassification": "test error (misclassification rate)", "relative RMSE": "relative test RMSE"}


def _band(values) -> tuple[float, float, float]:
    v = np.asarray(values, np.float64)
    return float(np.mean(v)), float(np.percentile(v, 5)), float(np.percentile(v, 95))


def _fmt_eps(e: float) -> str:
    return "inf" if math.isinf(e) else f"{e:.3g}"


def aggregate(rows, m, key: str = "silos_per_round") -> dict:
    """``{algorithm: {eps or None: dict(mean, p5, p95, certified, reference, step sizes)}}`` for the rows
    whose ``key`` is ``m`` (the panel: seed 000's number of silos per round)."""
    out: dict = {}
    for r in rows:
        if r[key] != m:
            continue
        out.setdefault(r["algorithm"], {}).setdefault(r["epsilon"], []).append(r)
    table = {}
    for alg, by_eps in out.items():
        table[alg] = {}
        for eps, rs in by_eps.items():
            mean, p5, p95 = _band([r["test_error"] for r in rs])
            table[alg][eps] = {"mean": mean, "p5": p5, "p95": p95, "trials": len(rs),
                               "certified": max(r["epsilon_certified"] for r in rs),
                               "reference": max(r.get("epsilon_rdp_poisson_reference", math.inf) for r in rs),
                               "step_sizes": sorted({round(r["step_size"], 6) for r in rs})}
    return table


def summary_markdown(setup, rows) -> str:
    """Markdown tables: mean test error [5 %, 95 %] per epsilon and algorithm, certified epsilons."""
    lines = []
    for m in setup.silos_per_round:
        t = aggregate(rows, m)
        mb, loc = t.get("ISRL-DP MB-SGD", {}), t.get("ISRL-DP Local SGD", {})
        np_mb = t.get("MB-SGD (non-private)", {}).get(None)
        np_loc = t.get("Local SGD (non-private)", {}).get(None)
        lines.append(f"{setup.dataset}, M = {m}, {setup.trials} trials, {setup.metric} "
                     f"(mean [5th, 95th percentile] over trials){' -- QUICK FORM' if setup.quick else ''}")
        lines.append("")
        lines.append("| eps (nominal) | ISRL-DP MB-SGD | ISRL-DP Local SGD | certified eps MB-SGD "
                     "| certified eps Local SGD | RDP-Poisson reference MB / Local |")
        lines.append("|---|---|---|---|---|---|")
        for eps in setup.epsilons:
            a, b = mb.get(eps), loc.get(eps)
            if a is None or b is None:
                continue
            lines.append(f"| {eps:g} | {a['mean']:.4f} [{a['p5']:.4f}, {a['p95']:.4f}] | "
                         f"{b['mean']:.4f} [{b['p5']:.4f}, {b['p95']:.4f}] | {_fmt_eps(a['certified'])} | "
                         f"{_fmt_eps(b['certified'])} | {_fmt_eps(a['reference'])} / {_fmt_eps(b['reference'])} |")
        for name, cell in (("MB-SGD (non-private)", np_mb), ("Local SGD (non-private)", np_loc)):
            if cell is not None:
                lines.append(f"| {name} | {cell['mean']:.4f} [{cell['p5']:.4f}, {cell['p95']:.4f}] | | | | |")
        lines.append("")
    return "\n".join(lines)


def _figure(setup, rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ms = list(setup.silos_per_round)
    caption_lines = 2 * len(ms) + 2
    height = 4.4 + 0.12 * caption_lines
    fig, axes = plt.subplots(1, len(ms), figsize=(6.0 * len(ms), height), squeeze=False)
    bands = setup.dataset != "obesity"     # the paper's Fig. 6 shows means only (3 trials)
    captions = []
    for ax, m in zip(axes[0], ms):
        t = aggregate(rows, m)
        eps = np.asarray(setup.epsilons, np.float64)
        for (alg, style), shift in zip(DP_STYLES.items(), (0.97, 1.03)):
            cells = [t[alg][e] for e in setup.epsilons]
            mean = np.array([c["mean"] for c in cells])
            if bands:   # the two DP curves are drawn slightly apart so that their bars stay readable
                err = np.array([[c["mean"] - c["p5"] for c in cells], [c["p95"] - c["mean"] for c in cells]])
                ax.errorbar(eps * shift, mean, yerr=np.maximum(err, 0), capsize=3, label=alg, **style)
            else:
                ax.plot(eps, mean, label=alg, **style)
            cert = ", ".join(f"{e:g}->{_fmt_eps(c['certified'])}" for e, c in zip(setup.epsilons, cells))
            captions.append(f"M={m}, {alg}: nominal -> certified eps {cert}")
        for alg, style in NONPRIVATE_STYLES.items():
            c = t[alg][None]
            ax.axhline(c["mean"], label=alg, **style)
            if bands:
                ax.axhspan(c["p5"], c["p95"], color=style["color"], alpha=0.08)
        ax.set_xscale("log")
        ax.set_xticks(eps)
        ax.set_xticklabels([f"{e:g}" for e in eps])
        ax.minorticks_off()
        ax.set_xlabel("epsilon (paper's nominal calibration; delta_i = 1/n_i^2)")
        ax.set_ylabel(YLABELS[setup.metric])
        ax.set_title(f"{TITLES[setup.dataset]}, M = {m}" + (" [QUICK FORM]" if setup.quick else ""), fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    bars = ("error bars: 5th-95th percentiles over trials" if bands
            else "means over trials (no error bars, as the paper)")
    text = (f"{setup.trials} trials, R = {setup.rounds}, K = {setup.batch_size}; {bars}.\n"
            "Noise: the paper's calibration (nominal eps, unverified). Certified by jaxfl's 'lowy' accountant "
            "(inf = nothing):\n" + "\n".join(captions))
    fig.text(0.01, 0.01, text, fontsize=6.5, va="bottom", ha="left", wrap=True)
    fig.tight_layout(rect=(0, 0.12 * (caption_lines + 1) / height, 1, 1))
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _curves(rows) -> list[dict]:
    out = []
    for r in rows:
        infos = r["infos"]
        reps, rounds = next(iter(infos.values())).shape
        for rep in range(reps):
            for k in range(rounds):
                out.append({"algorithm": r["algorithm"], "epsilon": r["epsilon"],
                            "silos_per_round": r["silos_per_round"],
                            "seed": r["trial"], "rep": rep, "round": k + 1, "step_size": r["step_size"],
                            **{name: float(v[rep, k]) for name, v in infos.items()}})
    return out


def replot(results_json: Path, png: Path) -> None:
    """Redraws ``figure.png`` from a ``results.json`` written by :func:`write` (no re-run)."""
    import json
    from types import SimpleNamespace

    doc = json.loads(Path(results_json).read_text())
    c = doc["config"]
    setup = SimpleNamespace(dataset=c["dataset"], quick=c["quick"], epsilons=tuple(c["epsilons"]), rounds=c["rounds"],
                            batch_size=c["batch_size_K"], silos_per_round=tuple(c["silos_per_round"]),
                            trials=c["trials"], metric=c["metric"])
    num = lambda v: float(v) if v is not None else math.inf   # results.json writes inf as "inf"
    rows = [{"algorithm": r["algorithm"], "epsilon": r["epsilon"], "silos_per_round": r["silos_per_round"],
             "test_error": r["metrics"]["test_error"], "step_size": r["step_size"],
             "epsilon_certified": num(r["privacy"]["epsilon_spent"]),
             "epsilon_rdp_poisson_reference": num(r["privacy"].get("epsilon_rdp_poisson_reference"))}
            for r in doc["runs"]]
    _figure(setup, rows, Path(png))


def write(setup, rows, config, out_dir: Path) -> Path:
    """Writes results.json (ARCHITECTURE §3.4), curves.csv, figure.png and summary.md under ``out_dir``."""
    runs = []
    for r in rows:
        rec = run_record(r["algorithm"], epsilon=r["epsilon"], delta=r["delta"], seed=r["trial"],
                         metrics={"test_error": r["test_error"], "test_error_rep_mean": r["test_error_rep_mean"],
                                  "train_loss": r["train_loss"]},
                         epsilon_spent=r["epsilon_certified"], accountant="lowy" if r["private"] else None,
                         wall_seconds=r["wall_seconds"], silos_per_round=r["silos_per_round"],
                         step_size=r["step_size"], clip_norm=r["clip_norm"],
                         noise_multiplier=np.asarray(r["noise_multiplier"]).tolist(),
                         diverged_configs=r["diverged_configs"])
        if r["private"]:
            rec["privacy"].update({
                "epsilon_nominal": r["epsilon"],
                "nominal_calibration": "paper §6 (Abadi et al. Thm 1, constants unspecified, Poisson assumed): "
                                       "not verified by jaxfl",
                "epsilon_rdp_poisson_reference": r["epsilon_rdp_poisson_reference"],
                "reference_note": "RDP epsilon if the minibatches were Poisson-sampled; NOT a guarantee for the "
                                  "with-replacement sampling actually run",
            })
        runs.append(rec)
    return write_files(out_dir, f"lowy-convex/{setup.dataset}", config, runs, rows,
                       lambda p: _figure(setup, rows, p), summary_markdown(setup, rows))


def write_files(out_dir, experiment: str, config: dict, runs: list, rows: list, figure, summary: str) -> Path:
    """results.json with ``runs``, curves.csv from the ``rows``' infos, figure.png and summary.md."""
    out = Path(out_dir)
    path = write_results(out, experiment=experiment, config=config, runs=runs, curves=_curves(rows), figure=figure)
    (out / "summary.md").write_text(summary + "\n")
    return path
