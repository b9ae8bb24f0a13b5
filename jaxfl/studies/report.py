"""The one report writer of every study: ``results.json``, ``curves.csv``, ``summary.md``, ``figure.png``.

``results.json`` follows ARCHITECTURE §3.4 (one ``runs`` record per selected row). The summary and the
figure are drawn from those records alone, with their layout given as data (:class:`Report`), so
:func:`render` redraws both from a committed ``results.json`` without re-running anything -- which is
how ``jaxfl tables`` regenerates the tables of the papers' READMEs. The figures are drawn by
:mod:`jaxfl.studies.figures`; the machine and code a result came from by :mod:`jaxfl.studies.provenance`.

Example (the demo cut to one epsilon and two seeds: its outcome, the document, its summary and files):

  >>> import dataclasses, os, tempfile
  >>> from jaxfl.studies import run
  >>> from jaxfl.studies.demo import STUDY
  >>> small = dataclasses.replace(STUDY, quick={"reps": 2, "settings": {"epsilons": (1.0,)}}).form_of(quick=True)
  >>> outcome = run(small, log=lambda *line: None)
  >>> doc = document(outcome)
  >>> sorted(doc), form_label(small.form), study_config(small)["repetitions"]
  (['config', 'environment', 'experiment', 'jaxfl_version', 'runs', 'source'], 'quick', 2)
  >>> dp_runs = [run for run in doc["runs"] if run["family"] == "dp"]
  >>> stats = band(dp_runs, "test_accuracy", over="seeds")            # over the two seeds
  >>> stats["n"], 0.5 < stats["mean"] <= 1.0
  (2, True)
  >>> print(summary(doc, STUDY.report).splitlines()[2])                # the table's header row
  | epsilon | ISRL-DP minibatch SGD | epsilon spent | noise multiplier |
  >>> sorted(record(outcome.rows[0]))[:4], curves(outcome.rows)[0]["round"]
  (['algorithm', 'delta', 'diverged_configs', 'epsilon'], 1)
  >>> folder = tempfile.mkdtemp()
  >>> _ = write(outcome, folder)                                       # figure.png needs the studies extra
  >>> sorted(os.listdir(folder))
  ['curves.csv', 'figure.png', 'results.json', 'summary.md']
"""
from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
from jaxfl.studies.provenance import environment, source_revision



# ------------------------------------------------------------------------------------------------
# Layouts


_COLUMN_VALUES = ("band", "mean_std", "certified", "paper", "ordered")
_COLUMN_PREFIXES = ("privacy:", "field:", "metric:")


@dataclasses.dataclass(frozen=True)
class Column:
    """One column of the summary table, per epsilon.

    ``value``: ``"band"`` (mean [5th, 95th percentile] of ``Table.metric`` over the records: trials),
    ``"mean_std"`` (mean ± std, in ``scale`` units), ``"certified"`` (the largest ``epsilon_spent``),
    ``"privacy:NAME"`` (the largest value of the records' ``privacy.NAME``),
    ``"paper"`` (``Report.paper[(algorithm, epsilon)]``), ``"field:NAME"`` (the records' distinct values
    of ``NAME``), ``"metric:NAME"`` (mean of another metric), or ``"ordered"`` (whether the means of
    ``algorithms`` are in increasing order, and within the bands).

    Example:
      >>> Column("DP-SGD", "dp")                                  # the family labelled "dp": mean [5th, 95th]
      Column(title='DP-SGD', algorithm='dp', value='band', algorithms=(), fmt='{:.4g}')
      >>> Column("noise multiplier", "dp", "field:noise_multiplier").value
      'field:noise_multiplier'
      >>> Column("DP-SGD", "dp", "median")
      Traceback (most recent call last):
      ...
      ValueError: Column 'DP-SGD': value='median' is none of band, mean_std, certified, paper, ordered, ...
    """

    title: str
    algorithm: str = ""
    value: str = "band"
    algorithms: tuple = ()
    fmt: str = "{:.4g}"                # the format of "metric:" values

    def __post_init__(self):
        if self.value not in _COLUMN_VALUES and not self.value.startswith(_COLUMN_PREFIXES):
            raise ValueError(f"Column {self.title!r}: value={self.value!r} is none of {', '.join(_COLUMN_VALUES)}, "
                             f"or {', '.join(p + 'NAME' for p in _COLUMN_PREFIXES)}")


@dataclasses.dataclass(frozen=True)
class Table:
    """Per panel: one row per epsilon with ``columns``, then the ``references`` (non-private) rows, then
    a trial-paired difference table for ``paired`` (``(title, a, b)``: test error of a minus b).

    Example (the demo's: test accuracy of the DP family per epsilon, the certified epsilon beside it, the two
    non-private families as reference rows, statistics over seeds):

      >>> table = Table(columns=(Column("DP", "dp", "mean_std"), Column("epsilon spent", "dp", "certified")),
      ...               metric="test_accuracy", metric_name="test accuracy", references=("mbsgd", "fedavg"),
      ...               over="seeds", reference_value="mean_std")
      >>> [column.title for column in table.columns], table.references
      (['DP', 'epsilon spent'], ('mbsgd', 'fedavg'))
      >>> Table(columns=(), over="trials")
      Traceback (most recent call last):
      ...
      ValueError: Table: over='trials' is neither 'records' nor 'seeds'
    """

    columns: tuple
    metric: str = "test_error"
    metric_name: str = "test error"
    references: tuple = ()
    paired: tuple = ()
    scale: float = 1.0
    digits: int = 4
    over: str = "records"              # "seeds": statistics over every record's per-seed values
    reference_value: str = "band"      # how the reference rows show the metric ("band" or "mean_std")

    def __post_init__(self):
        if self.over not in ("records", "seeds"):
            raise ValueError(f"Table: over={self.over!r} is neither 'records' nor 'seeds'")
        if self.reference_value not in ("band", "mean_std"):
            raise ValueError(f"Table: reference_value={self.reference_value!r} is neither 'band' nor 'mean_std'")


@dataclasses.dataclass(frozen=True)
class Curve:
    """A curve (``band``: 5th-95th percentile error bars) or, for ``line=True``, a horizontal line.

    ``style``: matplotlib keyword arguments of the line.

    Example:
      >>> Curve("dp", {"marker": "o"}).line, Curve("mbsgd", {"linestyle": "--"}, line=True).line   # line: no epsilon
      (False, True)
    """

    algorithm: str
    style: Mapping = dataclasses.field(default_factory=dict)
    line: bool = False


@dataclasses.dataclass(frozen=True)
class Figure:
    """Metric against epsilon, one subplot per panel (``figure.png``, drawn with the ``studies`` extra).

    Example:
      >>> figure = Figure((Curve("dp", {"marker": "o"}), Curve("mbsgd", {"color": "gray"}, line=True)),
      ...                 title="{panel}", ylabel="test accuracy", metric="test_accuracy", bands=False)
      >>> figure.xlabel, figure.xscale
      ('epsilon', 'log')
    """

    curves: tuple
    title: str                         # format fields: {panel} and results.json's config
    ylabel: str
    xlabel: str = "epsilon"
    metric: str = "test_error"
    bands: bool = True
    columns: int = 2
    caption: str = ""
    certified_caption: bool = False    # list nominal -> certified epsilons under the plot
    xscale: str = "log"


@dataclasses.dataclass(frozen=True)
class RoundsFigure:
    """Learning curves (``curves.png``): a metric against rounds from the runs' ``curve`` (programs with
    ``eval_every``), one subplot per panel, one line per curve's algorithm: the pointwise mean over its runs
    (trials), with their min-max as a band (runs with more points are sampled at the shortest's count).
    ``x``: ``"round"`` (engine rounds), or a run's list column of the same length as its curve (e.g. the
    server rounds completed at each point).

    Example (accuracy against rounds, for a study whose programs set ``eval_every``):
      >>> RoundsFigure((Curve("dp"), Curve("fedavg")), title="{panel}", ylabel="test accuracy").metric
      'test_accuracy'
    """

    curves: tuple
    title: str                         # format fields: {panel} and results.json's config
    ylabel: str
    metric: str = "test_accuracy"
    x: str = "round"
    xlabel: str = "round"
    columns: int = 2
    caption: str = ""


@dataclasses.dataclass(frozen=True)
class Report:
    """What a study reports: a summary table and (optionally) a figure; ``paper`` holds the paper's own
    numbers by ``(algorithm, epsilon)``, printed beside ours; ``header`` opens each panel's table (format
    fields: ``{name}``, ``{panel}``, ``{trials}``, ``{reps}``, ``{form}``); ``combined`` lays out one table over
    the panels of several results files of the same form (panels run on different machines), for a docs block
    naming them (:mod:`jaxfl.studies.tables`).

    Example (the paper's own numbers print beside the study's, keyed by family and epsilon):
      >>> report = Report(Table((Column("DP", "dp"), Column("paper", "dp", "paper"))),
      ...                 paper={("dp", 1.0): 0.12, ("dp", 8.0): 0.05})
      >>> report.paper[("dp", 8.0)], report.figure is None
      (0.05, True)
      >>> from jaxfl.studies.demo import STUDY                # a complete report: table, figure and header
      >>> STUDY.report.table.metric, len(STUDY.report.figure.curves)
      ('test_accuracy', 3)
    """

    table: Table
    figure: Figure | None = None
    paper: Mapping = dataclasses.field(default_factory=dict)
    header: str = "{name}, {panel}: {trials} trial(s) x {reps} seed(s) ({form} form)"
    notes: Callable[[dict], str] | None = None
    rounds_figure: RoundsFigure | None = None
    combined: Callable[[dict], str] | None = None


# ------------------------------------------------------------------------------------------------
# results.json


def _clean(value):
    if isinstance(value, float) and (math.isinf(value) or math.isnan(value)):
        return str(value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return _clean(value.item())
    if hasattr(value, "tolist"):
        return _clean(value.tolist())
    return value


_NOT_RECORDED = {"algorithm", "epsilon", "delta", "trial", "metrics", "per_seed", "epsilon_spent", "accountant",
                 "wall_seconds", "infos", "params", "history", "private", "score", "privacy"}


def record(row: dict) -> dict:
    """The ``runs`` entry of one row (ARCHITECTURE §3.4): every scalar fact of the row beside the schema's
    fields; per-seed metrics as ``<metric>_seeds``.

    Example: the module docstring's.
    """
    metrics = dict(row["metrics"])
    metrics.update({f"{k}_seeds": v for k, v in row.get("per_seed", {}).items() if len(v) > 1})
    privacy = {"epsilon_spent": row["epsilon_spent"], "accountant": row["accountant"], **row.get("privacy", {})}
    rec = {"algorithm": row["algorithm"], "epsilon": row["epsilon"], "delta": row["delta"],
           "seed": row.get("seed", row["trial"]), "trial": row["trial"], "metrics": metrics, "privacy": privacy,
           "wall_seconds": row["wall_seconds"]}
    rec.update({k: v for k, v in row.items() if k not in _NOT_RECORDED and k not in rec})
    return _clean(rec)


def curves(rows: list[dict]) -> list[dict]:
    """``curves.csv`` rows: one per selected row, seed and round (the rounds' info), or per evaluation
    (train runs' histories).

    Example: the module docstring's.
    """
    out = []
    for r in rows:
        base = {"algorithm": r["algorithm"], "epsilon": r["epsilon"], "panel": r["panel"], "trial": r["trial"]}
        if "history" in r:
            out += [{**base, "seed": r.get("seed"), **{k: v for k, v in h.items() if not isinstance(v, (dict, list))}}
                    for h in r["history"]]
            continue
        curve = r.get("curve") or {}
        metrics = [m for m in curve if m != "round" and m.endswith("_seeds")]
        for s, _ in enumerate(curve[metrics[0]] if metrics else ()):
            out += [{**base, "rep": s, "round": x, "evaluated": True,
                     **{m.removesuffix("_seeds"): curve[m][s][i] for m in metrics}}
                    for i, x in enumerate(curve["round"])]
        infos = r.get("infos") or {}
        if not infos:
            continue
        seeds, rounds = next(iter(infos.values())).shape[:2]
        for s in range(seeds):
            for k in range(rounds):
                out.append({**base, "rep": s, "round": k + 1,
                            **{name: float(v[s, k]) for name, v in infos.items() if v.ndim == 2}})
    return out


def document(outcome) -> dict:
    """The ``results.json`` document of a finished study (``Study.config`` values that are callables are
    called with the study).

    Example: the module docstring's.
    """
    from jaxfl import __version__

    study = outcome.study
    config = {k: v(study) if callable(v) else v for k, v in study.config.items()}
    doc = {"experiment": study.name, "jaxfl_version": __version__,
           "config": {**study_config(study), **config, "per_trial": outcome.per_trial,
                      "wall_seconds_total": outcome.seconds, "parts_seconds_total": outcome.parts_seconds,
                      "parts_reused": outcome.parts_reused, "parts_sources": outcome.parts_sources,
                      "parts_machines": outcome.parts_machines,
                      "runs_seconds_total": outcome.runs_seconds,
                      **({"workers": outcome.workers} if outcome.workers else {})},
           "runs": [record(r) for r in outcome.rows], "environment": environment(), "source": source_revision()}
    return _clean(doc)


def write(outcome, out_dir) -> Path:
    """Writes ``results.json``, ``curves.csv``, ``summary.md`` and ``figure.png`` of a finished study.

    Example: the module docstring's.
    """
    study = outcome.study
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    doc = document(outcome)
    (out / "results.json").write_text(json.dumps(doc, indent=2) + "\n")
    rows = curves(outcome.rows)
    if rows:
        fields = list(dict.fromkeys(k for row in rows for k in row))
        with (out / "curves.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
    render(doc, study.report, out)
    return out / "results.json"


def study_config(study) -> dict:
    """The generic part of ``results.json``'s ``config``.

    Example: the module docstring's.
    """
    partial = {} if study.only_panels is None else {"partial": True,
                                                     "panels_of_full_study": [p.label for p in study.panels]}
    if study.only_trials is not None:
        partial.update({"partial": True, "trials_of_full_study": study.trials})
    return {"form": study.form, "quick": study.is_quick, "trials": study.trials_run, "repetitions": study.reps,
            "panels": [p.label for _, p in study.panels_run], **partial, "selection": study.select.describe,
            "configs_per_batch": study.configs_per_batch,
            "settings": {k: v for k, v in study.settings.items() if not callable(v)}}


def render(doc: dict, report: Report, out_dir) -> None:
    """Writes ``summary.md`` (and ``figure.png`` when the report has a figure) from a results document.

    Example (redraw a committed run's summary without re-running it, as ``jaxfl tables`` does):
      >>> import json, pathlib, tempfile
      >>> from jaxfl.studies.demo import STUDY
      >>> committed = pathlib.Path("results/demo/results.json")                  # from the repository's root
      >>> folder = tempfile.mkdtemp()
      >>> if committed.is_file():
      ...     render(json.loads(committed.read_text()), STUDY.report, folder)
      ...     print((pathlib.Path(folder) / "summary.md").read_text() == (committed.parent / "summary.md").read_text())
      ... else:
      ...     print(True)
      True
    """
    from jaxfl.studies.figures import figure, rounds_figure

    out = Path(out_dir)
    (out / "summary.md").write_text(summary(doc, report) + "\n")
    if report.figure is not None:
        figure(doc, report.figure, out / "figure.png")
    if report.rounds_figure is not None:
        rounds_figure(doc, report.rounds_figure, out / "curves.png")


# ------------------------------------------------------------------------------------------------
# Aggregation


def form_label(form) -> str:
    """How a run's form is shown: ``"full"``, ``"quick"``, a variant's name, or ``"quick+VARIANT"``.

    Example: the module docstring's.
    """
    return str(form).removeprefix("full+")


def _num(v) -> float:
    if v is None:
        return math.inf
    return float(v)


def _cells(doc: dict) -> dict:
    """``{(panel, algorithm, epsilon): [records]}``."""
    cells: dict = {}
    for r in doc["runs"]:
        cells.setdefault((r.get("panel", ""), r["algorithm"], r["epsilon"]), []).append(r)
    return cells


def _metric(rec: dict, metric: str) -> float:
    return _num(rec["metrics"].get(metric))


def band(records: list, metric: str, over: str = "records") -> dict:
    """Mean, std and 5th / 95th percentiles of ``metric`` over the records (trials), or, for
    ``over="seeds"``, over every record's per-seed values (``<metric>_seeds``).

    Example: the module docstring's.
    """
    if over == "seeds":
        v = np.asarray([x for r in records for x in r["metrics"].get(f"{metric}_seeds", [_metric(r, metric)])],
                       np.float64)
    else:
        v = np.asarray([_metric(r, metric) for r in records], np.float64)
    return {"mean": float(v.mean()), "std": float(v.std()), "p5": float(np.percentile(v, 5)),
            "p95": float(np.percentile(v, 95)), "n": int(v.size)}


def _fmt_eps(e: float) -> str:
    return "inf" if math.isinf(e) else f"{e:.3g}"


def paired_difference(doc: dict, panel: str, eps, a: str, b: str, metric: str = "test_error") -> dict:
    """``a``'s metric minus ``b``'s at ``eps``, paired by trial (same data split): ``{"mean", "se",
    "trials", "verdict", "base"}``; ``verdict`` is ``"lower"`` / ``"higher"`` where ``mean -/+ 2 se``
    excludes 0, else ``"tie"`` (always for one trial); ``base`` is ``b``'s mean over the paired trials.

    Example: :func:`paired_overview`; the lowy-nonconvex study's tables pair SPIDER with MB-SGD by trial.
    """
    err = {alg: {r["trial"]: _metric(r, metric) for r in doc["runs"]
                 if r.get("panel", "") == panel and r["algorithm"] == alg and r["epsilon"] == eps} for alg in (a, b)}
    trials = sorted(set(err[a]) & set(err[b]))
    d = np.array([err[a][t] - err[b][t] for t in trials], np.float64)
    if d.size == 0:
        return {"mean": math.nan, "se": math.nan, "trials": 0, "verdict": "tie", "base": math.nan}
    se = float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else math.nan
    mean = float(d.mean())
    verdict = "tie" if not math.isfinite(se) or abs(mean) <= 2 * se else ("lower" if mean < 0 else "higher")
    return {"mean": mean, "se": se, "trials": int(d.size), "verdict": verdict,
            "base": float(np.mean([err[b][t] for t in trials]))}


def paired_overview(doc: dict, report: Report) -> str:
    """The table's ``paired`` comparisons over every (panel, epsilon) cell (markdown): how many cells
    each verdict of :func:`paired_difference` has, and ``b``'s mean improvement by ``a`` -- absolute
    (``b - a``, in the metric's units) and relative (``(b - a) / b``, over the cells where ``b`` > 0) --
    averaged over the cells.

    Example: ``papers/lowy_nonconvex`` (its :class:`Table` sets ``paired``), rendered by ``jaxfl tables``.
    """
    t = report.table
    lines = [f"Over all {len(_panels(doc))} panel(s) x epsilons: verdicts of the paired differences above, and the "
             f"mean improvement (the second minus the first, so positive = the first is better) averaged over "
             f"the cells", "",
             "| comparison | cells | lower | tie | higher | mean improvement (absolute) "
             "| mean improvement (relative) |",
             "|---|---|---|---|---|---|---|"]
    for title, a, b in t.paired:
        diffs = [paired_difference(doc, panel, eps, a, b, t.metric) for panel in _panels(doc)
                 for eps in _epsilons(doc, panel)]
        diffs = [p for p in diffs if p["trials"]]
        if not diffs:
            continue
        counts = {v: sum(p["verdict"] == v for p in diffs) for v in ("lower", "tie", "higher")}
        absolute = -float(np.mean([p["mean"] for p in diffs]))
        ratios = [p["mean"] / p["base"] for p in diffs if p["base"] != 0]  # a cell where b errs nowhere has none
        relative = -float(np.mean(ratios)) if ratios else math.nan
        lines.append(f"| {title} | {len(diffs)} | {counts['lower']} | {counts['tie']} | {counts['higher']} | "
                     f"{t.scale * absolute:+.4f} | {100 * relative:+.2f}% |")
    return "\n".join(lines)


def _cell(report: Report, cells: dict, panel: str, eps, column: Column) -> str:
    t = report.table
    if column.value == "paper":
        return str(report.paper.get((column.algorithm, eps), "-"))
    if column.value == "ordered":
        stats = [cells.get((panel, a, eps)) for a in column.algorithms]
        if any(s is None for s in stats):
            return ""
        b = [band(s, t.metric, t.over) for s in stats]
        means = all(x["mean"] <= y["mean"] for x, y in zip(b, b[1:]))
        bars = all(x["p5"] <= y["p95"] for x, y in zip(b, b[1:]))
        return f"{'yes' if means else 'no'} / {'yes' if bars else 'no'}"
    records = cells.get((panel, column.algorithm, eps))
    if not records:
        return ""
    if column.value == "certified" or column.value.startswith("privacy:"):
        name = "epsilon_spent" if column.value == "certified" else column.value[len("privacy:"):]
        return _fmt_eps(max(_num(r["privacy"].get(name)) for r in records))
    if column.value.startswith("field:"):
        name = column.value[len("field:"):]
        return ", ".join(str(v) for v in dict.fromkeys(_show(r.get(name)) for r in records))
    if column.value.startswith("metric:"):
        name = column.value[len("metric:"):]
        values = [r["metrics"].get(name) for r in records]
        return "-" if any(v is None for v in values) else column.fmt.format(np.mean([_num(v) for v in values]))
    b = band(records, t.metric, t.over)
    s, d = t.scale, t.digits
    if column.value == "mean_std":
        return f"{s * b['mean']:.{d}f} ± {s * b['std']:.{d}f}"
    return f"{s * b['mean']:.{d}f} [{s * b['p5']:.{d}f}, {s * b['p95']:.{d}f}]"


def _show(v):
    return f"{v:g}" if isinstance(v, float) else v


def _epsilons(doc: dict, panel: str) -> list:
    return sorted({r["epsilon"] for r in doc["runs"] if r.get("panel", "") == panel and r["epsilon"] is not None})


def _panels(doc: dict) -> list:
    return list(dict.fromkeys(r.get("panel", "") for r in doc["runs"]))


def summary(doc: dict, report: Report) -> str:
    """The summary tables of a results document (markdown).

    Example: the module docstring's.
    """
    t = report.table
    cells = _cells(doc)
    c = doc["config"]
    lines = []
    if c.get("panels_of_full_study"):
        missing = [p for p in c["panels_of_full_study"] if p not in c["panels"]]
        lines += [f"**Partial run**: panels {', '.join(c['panels'])} only (not run: {', '.join(missing)}).", ""]
    if c.get("trials_of_full_study"):
        lines += [f"**Partial run**: {c['trials']} of the study's {c['trials_of_full_study']} trials.", ""]
    for panel in _panels(doc):
        lines.append(report.header.format(name=doc["experiment"], panel=panel, trials=c.get("trials"),
                                          reps=c.get("repetitions"), form=form_label(c.get("form"))))
        lines.append("")
        titles = [col.title for col in t.columns] or [t.metric_name]  # no columns: the reference rows' metric
        lines.append("| epsilon | " + " | ".join(titles) + " |")
        lines.append("|---" * (len(titles) + 1) + "|")
        for eps in _epsilons(doc, panel):
            lines.append(f"| {eps:g} | " + " | ".join(_cell(report, cells, panel, eps, col) for col in t.columns)
                         + " |")
        for name in t.references:
            records = cells.get((panel, name, None))
            if records:
                cell = _cell(report, cells, panel, None, Column(name, name, t.reference_value))
                lines.append(f"| {name} | {cell} |" + " |" * (len(t.columns) - 1))
        lines.append("")
        ran = {r["algorithm"] for r in doc["runs"] if r.get("panel", "") == panel}
        paired = [(title, a, b) for title, a, b in t.paired if a in ran and b in ran]   # a variant may run fewer
        if paired:
            lines.append(f"Paired by trial (same data split): {t.metric_name} difference, mean ± standard error "
                         "over trials; lower / higher where 2 SE exclude 0, else tie")
            lines.append("")
            lines.append("| epsilon | " + " | ".join(title for title, _, _ in paired) + " |")
            lines.append("|---" * (len(paired) + 1) + "|")
            for eps in _epsilons(doc, panel):
                diffs = [paired_difference(doc, panel, eps, a, b, t.metric) for _, a, b in paired]
                lines.append(f"| {eps:g} | " + " | ".join(_paired_cell(p) for p in diffs) + " |")
            lines.append("")
    if report.notes is not None:
        lines.append(report.notes(doc))
    return "\n".join(lines).rstrip()


def _paired_cell(p) -> str:
    se = f" ± {p['se']:.4f}" if math.isfinite(p["se"]) else ""
    return f"{p['mean']:+.4f}{se} ({p['verdict']})"
