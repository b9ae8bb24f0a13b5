"""The figures of a study's report, drawn from ``results.json`` alone: ``figure.png`` (:func:`figure`: a metric
against epsilon, one panel per :class:`~jaxfl.studies.report.Panel`) and ``curves.png`` (:func:`rounds_figure`:
learning curves). matplotlib is the ``studies`` extra.
"""
from __future__ import annotations

import math

import numpy as np

from jaxfl.extras import require
from jaxfl.studies.report import Figure, RoundsFigure, _cells, _epsilons, _fmt_eps, _num, _panels, band, form_label


# ------------------------------------------------------------------------------------------------
# Figure


def _pyplot():
    """matplotlib's pyplot on the file-only Agg backend (the ``studies`` extra)."""
    require("matplotlib").use("Agg")
    return require("matplotlib.pyplot")


def figure(doc: dict, layout: Figure, path) -> None:
    """Metric against epsilon per panel, curves and reference lines as ``layout`` says.

    Example: :func:`jaxfl.studies.report.write` draws ``figure.png`` with it (the report module's example).
    """
    plt = _pyplot()

    cells = _cells(doc)
    panels = _panels(doc)
    cols = min(layout.columns, len(panels))
    nrows = math.ceil(len(panels) / cols)
    captions = []
    points = [c for c in layout.curves if not c.line]
    shifts = np.linspace(0.97, 1.03, len(points)) if len(points) > 1 else [1.0]
    extra = 0.12 * (len(points) * len(panels) + 2) if layout.certified_caption else 0.8
    fig, axes = plt.subplots(nrows, cols, figsize=(6.0 * cols, 4.3 * nrows + extra), squeeze=False)
    for ax, panel in zip(axes.ravel(), panels):
        eps = np.asarray(_epsilons(doc, panel), np.float64)
        for curve, shift in zip(points, shifts):
            stats = [band(cells[(panel, curve.algorithm, e)], layout.metric) for e in eps
                     if (panel, curve.algorithm, e) in cells]
            if len(stats) != len(eps):
                continue
            mean = np.array([s["mean"] for s in stats])
            if layout.bands:  # the curves are drawn slightly apart so that their bars stay readable
                err = np.array([[s["mean"] - s["p5"] for s in stats], [s["p95"] - s["mean"] for s in stats]])
                ax.errorbar(eps * shift, mean, yerr=np.maximum(err, 0), capsize=3, label=curve.algorithm,
                            **curve.style)
            else:
                ax.plot(eps, mean, label=curve.algorithm, **curve.style)
            if layout.certified_caption:
                cert = ", ".join(
                    f"{e:g}->"
                    f"{_fmt_eps(max(_num(r['privacy']['epsilon_spent']) for r in cells[(panel, curve.algorithm, e)]))}"
                    for e in eps)
                captions.append(f"{panel}, {curve.algorithm}: nominal -> certified eps {cert}")
        for curve in (c for c in layout.curves if c.line):
            records = cells.get((panel, curve.algorithm, None))
            if not records:
                continue
            s = band(records, layout.metric)
            ax.axhline(s["mean"], label=curve.algorithm, **curve.style)
            if layout.bands:
                ax.axhspan(s["p5"], s["p95"], color=curve.style.get("color"), alpha=0.08)
        ax.set_xscale(layout.xscale)
        if len(eps):
            ax.set_xticks(eps)
            ax.set_xticklabels([f"{e:g}" for e in eps])
        ax.minorticks_off()
        _finish_axes(ax, doc, layout, panel)
    for ax in axes.ravel()[len(panels):]:
        ax.axis("off")
    text = layout.caption.format(**doc["config"]) if layout.caption else ""
    if captions:
        text += "\n" + "\n".join(captions)
    fig.text(0.01, 0.01, text, fontsize=6.5, va="bottom", ha="left", wrap=True)
    height = fig.get_figheight()
    fig.tight_layout(rect=(0, min(0.45, (0.12 * (text.count("\n") + 2) + 0.1) / height), 1, 1))
    fig.savefig(path, dpi=130)
    plt.close(fig)


def _finish_axes(ax, doc: dict, layout, panel: str) -> None:
    """Labels, the panel's title (marked when the form is not the full one), grid and legend."""
    ax.set_xlabel(layout.xlabel)
    ax.set_ylabel(layout.ylabel)
    form = form_label(doc["config"].get("form", "full"))
    ax.set_title(layout.title.format(**{**doc["config"], "panel": panel})
                 + ("" if form == "full" else f" [{form.upper()} FORM]"), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def rounds_figure(doc: dict, layout: RoundsFigure, path) -> None:
    """Learning curves per panel as ``layout`` says (runs without a ``curve`` are skipped).

    Example: :func:`figure` (``curves.png`` for studies with a :class:`~jaxfl.studies.report.RoundsFigure`).
    """
    plt = _pyplot()

    panels = [p for p in _panels(doc) if any(r.get("curve") and r.get("panel", "") == p for r in doc["runs"])]
    if not panels:
        return
    cols = min(layout.columns, len(panels))
    fig, axes = plt.subplots(math.ceil(len(panels) / cols), cols,
                             figsize=(6.0 * cols, 4.3 * math.ceil(len(panels) / cols) + 0.6), squeeze=False)
    for ax, panel in zip(axes.ravel(), panels):
        for curve in layout.curves:
            runs = [r for r in doc["runs"] if r.get("panel", "") == panel and r["algorithm"] == curve.algorithm
                    and r.get("curve")]
            if not runs:
                continue
            # runs may have different point counts (e.g. a timeline per trial): each is sampled at the same
            # fractions of its run, as many points as the shortest has, first and last kept
            ys = [np.asarray(r["curve"][layout.metric], np.float64) for r in runs]
            xs = [np.asarray(r["curve"]["round"] if layout.x == "round" else r[layout.x], np.float64) for r in runs]
            m = min(len(v) for v in ys)
            pick = [np.round(np.linspace(0, len(v) - 1, m)).astype(int) for v in ys]
            y = np.stack([v[i] for v, i in zip(ys, pick)])                                  # [runs, points]
            x = np.stack([v[i] for v, i in zip(xs, pick)])
            ax.plot(x.mean(axis=0), y.mean(axis=0), label=curve.algorithm, **curve.style)
            if len(runs) > 1:
                ax.fill_between(x.mean(axis=0), y.min(axis=0), y.max(axis=0), alpha=0.12,
                                color=curve.style.get("color"))
        _finish_axes(ax, doc, layout, panel)
    for ax in axes.ravel()[len(panels):]:
        ax.axis("off")
    if layout.caption:
        fig.text(0.01, 0.01, layout.caption.format(**doc["config"]), fontsize=6.5, va="bottom", ha="left", wrap=True)
    fig.tight_layout(rect=(0, 0.06 if layout.caption else 0, 1, 1))
    fig.savefig(path, dpi=130)
    plt.close(fig)
