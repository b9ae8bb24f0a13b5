"""``jaxfl tables``: the tables of ``README.md`` and the papers' READMEs (``papers/*/README.md``), generated from
their committed results.

Every table of reproduced numbers in the docs sits between two markers naming its results directory, relative to
the repository's root::

    <!-- generated from papers/lowy_convex/results/insurance -->
    ...
    <!-- end generated -->

and is the study's own summary (:func:`jaxfl.studies.report.summary`) of
``papers/<home>/results/<study>[/<variant>]/results.json`` (``results/<name>`` for the library's own studies),
followed by one line naming the file, the run's form, wall time and machine. A block may name several directories of
one study and form, joined by commas (panels run on different machines, e.g.
``papers/huang_jdp/results/table1-mnist,papers/huang_jdp/results/table1-mnist/gpu``):
it holds the study's combined table (:attr:`jaxfl.studies.report.Report.combined`) over all their panels,
then one line per file naming its panels and machine. ``jaxfl tables`` rewrites every block (and redraws
each committed run's ``summary.md`` and ``figure.png`` with the current report layout, and a combined block's
figure over all its panels, :func:`draw_combined_figures`); ``jaxfl tables
--check`` (and the test suite) fails when a block differs from what the committed results give, so no number
in those tables is typed by hand.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from jaxfl.studies import figures, registry, report

BLOCK = re.compile(r"(<!-- generated from (?P<path>\S+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)


def repo_root(papers=None) -> Path:
    """The root the documents and results paths are relative to: the parent of the paper homes' folder
    (:func:`jaxfl.studies.registry.find_papers`), else the working directory."""
    found = registry.find_papers(papers)
    return found.parent if found is not None else Path.cwd()


def _experiment(rel: str):
    """``papers/HOME/results/STUDY[/VARIANT][/...]`` or ``results/NAME[/VARIANT][/...]`` (a run kept beside the main
    one, e.g. on another machine) -> the registered experiment of ``HOME/STUDY`` (hyphens for the home's
    underscores) or NAME."""
    parts = Path(rel).parts
    if parts[0] == "papers" and len(parts) > 3 and parts[2] == "results":
        parts = (parts[1].replace("_", "-"),) + parts[3:]
    else:
        parts = parts[1:]
    known = registry.experiments()
    for cut in range(len(parts), 0, -1):
        name = "/".join(parts[:cut])
        if name in known:
            return known[name]
    raise ValueError(f"{rel}: no registered experiment (known: {', '.join(sorted(known))})")


def _report_of(study, doc: dict):
    """The report of the form that wrote ``doc`` (``config.form``: ``full`` or ``quick``, ``+VARIANT``): a variant
    may lay out its own table."""
    quick_or_full, _, variant = str(doc["config"].get("form", "full")).partition("+")
    return study.form_of(quick=quick_or_full == "quick", variant=variant or None).report


def _load(root: Path, rel: str) -> dict:
    path = root / rel / "results.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} (run `jaxfl reproduce` for it, or remove its block from the docs)")
    return json.loads(path.read_text())


def _machine(env: dict) -> str:
    backend = env.get("backend")
    if backend != "cpu" and env.get("device_kind"):  # an accelerator: name it
        backend = f"{backend} ({env['device_kind']})"
    return f"{env.get('cores')} cores, {backend}, JAX {env.get('jax_version')}"


def _merged(root: Path, rels: list[str]):
    """The results files ``rels`` of one study and form (each panel in one file only) -> ``(report, merged, docs)``:
    the form's report, one document holding all their runs in the study's panel order, and each file's own.
    Raises ValueError for a study whose report has no combined table, files of different studies or forms, and
    a panel in two files."""
    docs = [_load(root, rel) for rel in rels]
    first = docs[0]
    layout = _report_of(_experiment(rels[0]).study, first)
    if layout.combined is None:
        raise ValueError(f"{', '.join(rels)}: {first['experiment']} has no combined table (Report.combined)")
    for rel, doc in zip(rels[1:], docs[1:]):
        if (doc["experiment"], doc["config"].get("form")) != (first["experiment"], first["config"].get("form")):
            raise ValueError(f"{rel}: {doc['experiment']} ({doc['config'].get('form')} form) cannot be combined with "
                             f"{rels[0]}: {first['experiment']} ({first['config'].get('form')} form)")
    seen = {}
    for rel, doc in zip(rels, docs):
        for panel in doc["config"]["panels"]:
            if panel in seen:
                raise ValueError(f"panel {panel!r} is in both {seen[panel]} and {rel}: a combined block takes each "
                                 "panel from one file")
            seen[panel] = rel
    order = first["config"].get("panels_of_full_study") or list(seen)
    merged = {**first, "runs": sorted((r for doc in docs for r in doc["runs"]),
                                      key=lambda r: order.index(r["panel"]) if r["panel"] in order else len(order)),
              "config": {**first["config"], "panels": [p for p in order if p in seen],
                         "panels_not_run": [p for p in order if p not in seen]}}
    return layout, merged, docs


def combined_block(root: Path, rels: list[str]) -> str:
    """One table over the panels of several results files of one study and form (each panel in one file only),
    laid out by the study's :attr:`~jaxfl.studies.report.Report.combined`, then each file's panels and
    machine."""
    layout, merged, docs = _merged(root, rels)
    missing = merged["config"]["panels_not_run"]
    lines = [f"**Panels not run**: {', '.join(missing)}.", ""] if missing else []
    lines += [layout.combined(merged), ""]
    lines += [f"From `{rel}/results.json` ({', '.join(doc['config']['panels'])}; "
              f"{report.form_label(doc['config'].get('form'))} form; {_machine(doc['environment'])})."
              for rel, doc in zip(rels, docs)]
    return "\n".join(lines) + "\n"


COMBINED_FIGURE = "combined.png"
"""A combined block's figure (for a study whose report draws one), written in its first directory."""


def draw_combined_figures(docs_text: str, root: Path) -> list[Path]:
    """Draws the figure over all panels of each combined block of ``docs_text`` whose study has a figure, as
    ``COMBINED_FIGURE`` in the block's first directory; returns the paths written."""
    written = []
    for match in BLOCK.finditer(docs_text):
        rels = match.group("path").split(",")
        if len(rels) < 2:
            continue
        layout, merged, _ = _merged(root, rels)
        if layout.figure is not None:
            figures.figure(merged, layout.figure, root / rels[0] / COMBINED_FIGURE)
            written.append(root / rels[0] / COMBINED_FIGURE)
    return written


def block(root: Path, rel: str) -> str:
    """The generated text of one block: the summary of ``root/rel/results.json`` and its provenance (several
    directories joined by commas: :func:`combined_block`)."""
    if "," in rel:
        return combined_block(root, rel.split(","))
    doc = _load(root, rel)
    text = report.summary(doc, _report_of(_experiment(rel).study, doc))
    env, config = doc["environment"], doc["config"]
    seconds = float(config.get("wall_seconds_total", float("nan")))
    time_text = f"wall time {seconds:,.0f} s"
    if config.get("parts_reused"):  # resumed: the last sitting's wall time alone understates the run
        before = "by this sitting's workers or in earlier sittings" if config.get("workers") else "in earlier sittings"
        time_text = (f"{float(config['parts_seconds_total']):,.0f} s over its grid programs, "
                     f"{config['parts_reused']} of them run {before}; last sitting's wall time {seconds:,.0f} s")
    elif config.get("runs_seconds_total"):  # checkpointed runs: their own seconds, whatever sittings they took
        time_text = (f"{float(config['runs_seconds_total']):,.0f} s over its runs (each from round 0, summed over "
                     f"the sittings it took); last sitting's wall time {seconds:,.0f} s")
    if config.get("workers"):   # this sitting ran in pinned worker processes before the collecting pass
        workers = config["workers"]
        time_text += (f"; this sitting's {workers['count']} workers took {float(workers['wall_seconds']):,.0f} s "
                      "of wall time")
    prng = env.get("prng_impl", "threefry2x32")
    keys = "" if prng == "threefry2x32" else f", {prng} keys"
    return (f"{text}\n\nFrom `{rel}/results.json` ({report.form_label(config.get('form'))} form; {time_text} on "
            f"{_machine(env)}{keys}).\n")


def generate(docs_text: str, root: Path) -> str:
    """``docs_text`` with every generated block rewritten from ``root``'s results."""
    return BLOCK.sub(lambda m: m.group(1) + block(root, m.group("path")) + m.group(4), docs_text)


def documents(root: Path) -> list[Path]:
    """The documents with generated tables: ``README.md`` and every paper home's ``README.md``."""
    return [root / "README.md", *sorted(root.glob("papers/*/README.md"))]


def main(check: bool = False, docs: Path | None = None, root: Path | None = None, papers=None) -> int:
    """Rewrites (or, with ``check``, verifies) the generated blocks of ``docs`` (default: :func:`documents`);
    returns an exit status. ``papers``: the paper homes' folder (see :func:`repo_root`)."""
    root = root or repo_root(papers)
    registry.experiments(papers)
    paths = [docs] if docs is not None else documents(root)
    stale = []
    for path in paths:
        text = path.read_text()
        new = generate(text, root)
        count = len(BLOCK.findall(text))
        if check:
            print(f"{path}: {count} generated tables " + ("match results/" if new == text else
                                                            "DIFFER from results/ (run `jaxfl tables`)"))
            stale += [path] if new != text else []
        else:
            path.write_text(new)
            print(f"{path}: {count} tables regenerated from results/")
    if check:
        return 1 if stale else 0
    runs = sorted([*root.glob("results/**/results.json"), *root.glob("papers/*/results/**/results.json")])
    for path in runs:
        doc = json.loads(path.read_text())
        report.render(doc, _report_of(registry.get_experiment(doc["experiment"]).study, doc), path.parent)
    combined = [figure for path in paths for figure in draw_combined_figures(path.read_text(), root)]
    print(f"{len(runs)} summaries and figures of committed results redrawn, and {len(combined)} combined figures")
    return 0
