"""The study runner: :func:`run` turns a :class:`~jaxfl.studies.spec.Study` into rows (one per reported algorithm,
epsilon, trial and panel), caching compiled grid programs by (family, static) and storing each finished grid under
``out_dir/parts/`` so that a study longer than one sitting is run by repeating the same command.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import pickle
import time
from pathlib import Path
from typing import Callable, Mapping

import jax
import numpy as np

from jaxfl.engine import driver
from jaxfl.engine.sweep import SweepResult, checkpoint_seconds, configurations, stable_name, sweep
from jaxfl.studies.provenance import machine, source_revision
from jaxfl.studies.spec import Family, Panel, Program, Study, Trial


# ------------------------------------------------------------------------------------------------
# The runner


@functools.lru_cache(maxsize=256)
def _builder(family: Family, static: tuple) -> Callable:
    """One build function per (family, static): the compiled-program cache key of :func:`sweep`."""
    return functools.partial(family.build, dict(static))


def _scores(metrics: dict, name: str) -> np.ndarray:
    values = np.asarray(metrics[name], np.float64)          # [configs, seeds]
    return np.where(np.isfinite(values), values, np.inf).mean(axis=1)


def _row(family: Family, config: dict, panel: Panel, trial_index: int, program: Program) -> dict:
    """The facts every row starts with: family, algorithm label, privacy (``epsilon > 0``), trial,
    panel, the program's columns and the configuration's other values."""
    private = float(config.get("epsilon", 0.0)) > 0
    return {"family": family.name, "algorithm": family.label if private else family.nonprivate_label or family.label,
            "private": private, "epsilon": float(config["epsilon"]) if private else None, "trial": trial_index,
            "panel": panel.label, **dict(panel.values), **dict(program.columns),
            **{k: float(v) for k, v in config.items() if k != "epsilon"},
            "accountant": family.accountant if private else None}


def _select(study: Study, family: Family, panel: Panel, trial_index: int, trial: Trial, program: Program,
            out: SweepResult, seconds: float) -> list[dict]:
    """One row per value of ``study.select.per`` from a finished grid."""
    if study.select.score is None:
        score, keys = np.zeros(len(out.configs)), list(range(len(out.configs)))
    else:
        score = _scores(out.metrics, study.select.score)
        keys = [tuple(c.get(k, 0.0) for k in study.select.per) for c in out.configs]
    groups = list(dict.fromkeys(keys))
    rows = []
    for key in groups:
        idx = np.flatnonzero([k == key for k in keys])
        best = int(idx[np.argmin(score[idx])])
        row = _row(family, out.configs[best], panel, trial_index, program)
        metrics = {m: float(np.mean(np.asarray(v, np.float64)[best])) for m, v in out.metrics.items()}
        if study.select.score is not None:
            metrics[study.select.score] = float(score[best])
        row.update({"delta": _delta_field(trial.deltas), "metrics": metrics,
                    "per_seed": {m: np.asarray(v, np.float64)[best].tolist() for m, v in out.metrics.items()},
                    "score": float(score[best]), "diverged_configs": int(np.sum(~np.isfinite(score[idx]))),
                    "epsilon_spent": float(out.epsilons[best]) if row["private"] and out.epsilons is not None
                    else math.inf,
                    "wall_seconds": seconds / len(groups),
                    "infos": {k: np.asarray(v)[best] for k, v in out.infos.items()},
                    **({} if out.history is None
                       else {"curve": _curve(out.history, out.metrics, best, program.eval_every, program.rounds)}),
                    "params": None if out.params is None else
                    jax.tree_util.tree_map(lambda a: np.asarray(a)[best], out.params)})
        if study.final is not None:
            for name, value in study.final(row["params"], trial, study).items():
                if name in metrics:
                    metrics[f"{name}_seed_mean"] = metrics[name]
                metrics[name] = float(value)
        if family.describe is not None:
            row.update(family.describe(study, panel, trial, program, row))
        rows.append(row)
    return rows


def _curve(history: dict, final: dict, config: int, every: int, rounds: int) -> dict:
    """A row's learning curve: ``{"round": [k, 2k, ..., rounds], metric: mean over seeds, metric_seeds:
    [seed][point]}``; the final evaluation closes it when ``rounds`` is not a multiple of ``k``."""
    values = {m: np.asarray(v, np.float64)[config] for m, v in history.items()}   # [seeds, points]
    points = next(iter(values.values())).shape[-1]
    curve = {"round": [every * (i + 1) for i in range(points)]}
    if rounds % every:
        curve["round"].append(rounds)
        values = {m: np.concatenate([v, np.asarray(final[m], np.float64)[config][:, None]], axis=1)
                  for m, v in values.items()}
    for m, v in values.items():
        curve[m] = v.mean(axis=0).tolist()
        curve[f"{m}_seeds"] = v.tolist()
    return curve


def _delta_field(deltas):
    d = np.atleast_1d(np.asarray(deltas, np.float64))
    return float(d[0]) if np.all(d == d[0]) else d.tolist()


def _sweep(study: Study, family: Family, program: Program, trial: Trial, seeds: list,
           segments: tuple[int, Path] | None = None) -> SweepResult:
    """The grid program as :func:`jaxfl.engine.sweep.sweep` runs it; ``segments``: ``(rounds, checkpoint file)``
    to run it in segments of about that many rounds (rounded up to a multiple of the program's ``eval_every``),
    its progress kept in the file."""
    segment_rounds, checkpoint = (None, None) if segments is None else segments
    if segment_rounds is not None and program.eval_every is not None:
        segment_rounds = -(-segment_rounds // program.eval_every) * program.eval_every
    return sweep(_builder(family, program.static), program.grid, trial.train, study.init(study.init_seed),
                 rounds=program.rounds, seeds=seeds, evaluate=study.evaluate, eval_data=trial.eval_data,
                 configs_per_batch=study.batch_for(family.name),
                 delta=None if family.accountant is None else trial.deltas, accountant=family.accountant or "rdp",
                 constants=program.constants, silo_models=study.silo_models, eval_every=program.eval_every,
                 evaluate_on=study.evaluate_on, segment_rounds=segment_rounds, checkpoint=checkpoint)


def _fingerprint(study: Study, family: Family, program: Program, seeds: list) -> str:
    """What a stored part must have been run with to be reused: the form, family, program and seeds."""
    def plain(value):
        if isinstance(value, Mapping):
            return sorted((str(k), plain(v)) for k, v in value.items())
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if callable(value):
            return stable_name(value)
        return np.asarray(value).tolist()

    curve = (() if program.eval_every is None else (("eval_every", int(program.eval_every)),)) + (
        () if study.evaluate_on is None else (("evaluate_on", plain(study.evaluate_on)),))   # older parts: neither
    return repr((study.name, study.form, family.name, plain(dict(program.static)), plain(program.grid),
                 plain(dict(program.constants)), int(program.rounds), [int(s) for s in seeds],
                 study.batch_for(family.name), jax.__version__) + curve)


def _source_label(source: Mapping | None) -> str:
    """``"COMMIT"`` (12 hex digits), ``"COMMIT+modified"``, ``"COMMIT (declared)"`` (a copied tree,
    :data:`jaxfl.studies.provenance.SOURCE_ENV`) or ``"unrecorded"`` (no git checkout, or a part stored before
    parts recorded their source)."""
    if not source:
        return "unrecorded"
    return source["commit"][:12] + ("+modified" if source["modified"] else "") + (
        " (declared)" if source.get("declared") else "")


def _machine_label(stored: Mapping | None) -> str:
    """``"CPU NAME: EXTENSIONS"`` of a part's :func:`machine` (``"ACCELERATOR, host CPU NAME: EXTENSIONS"`` where an
    accelerator ran it), or ``"unrecorded"`` (a part stored before parts recorded it)."""
    m = (stored or {}).get("machine")
    if not m:
        return "unrecorded"
    host = f"{m['cpu']}: {m['cpu_vector_extensions'] or 'none listed'}"
    return f"{m['accelerator']}, host {host}" if m.get("accelerator") else host


def _stored_sweep(study: Study, family: Family, program: Program, trial: Trial, seeds: list,
                  part: Path | None, base: tuple[Study, Path] | None = None,
                  segment_rounds: int | None = None) -> tuple[SweepResult, float, str, str, str]:
    """:func:`_sweep`, its seconds, where it came from (``""``: run now; ``"stored"``: ``part``; ``"base"``:
    the base form's part), the code that ran it (:func:`_source_label`) and the machine that finished it
    (:func:`_machine_label`; earlier segments of a resumed part may have run on another). Kept in ``part`` (a
    pickle of host arrays) and reused from it when the same form, program and seeds were run before, so a long
    study stopped mid-way resumes at its next part. ``base``: the base form and its part of the same name
    (:attr:`Study.reuses_base_parts`), reused when it holds the same program and seeds, and copied into
    ``part``. A part is keyed by its settings, not by the code, so results.json lists the sources of its
    parts. ``part=None``: always run. ``segment_rounds`` (with a ``part``): the program runs in segments of about
    that many rounds, its progress kept in ``checkpoints/<part's name>`` beside ``parts/`` (resumed from there
    when the same part is run again; equal to one program up to float rounding, and not part of the key: the
    part records it)."""
    fingerprint = _fingerprint(study, family, program, seeds) if part is not None else None
    stored, origin = (_stored_part(study, part, fingerprint), "stored") if part is not None else (None, "")
    if stored is None and base is not None and part is not None:
        stored = _stored_part(base[0], base[1], _fingerprint(base[0], family, program, seeds))
        origin = "base"
        if stored is not None:
            _write_part(part, {**stored, "fingerprint": fingerprint, "reused_from": base[0].form})
    if stored is not None:
        return (_without_unused_params(study, SweepResult(*stored["result"])), stored["seconds"], origin,
                _source_label(stored.get("source")), _machine_label(stored))
    segments = None if part is None or segment_rounds is None else (
        segment_rounds, part.parents[1] / "checkpoints" / part.name)
    earlier = 0.0 if segments is None else checkpoint_seconds(segments[1])  # earlier sittings' segments
    start = time.perf_counter()
    out = _without_unused_params(study, jax.device_get(_sweep(study, family, program, trial, seeds, segments)))
    seconds = earlier + time.perf_counter() - start
    ran = {"source": source_revision(), "machine": machine()}
    if part is not None:
        _write_part(part, {"fingerprint": fingerprint, "result": tuple(out), "seconds": seconds, **ran,
                           "segment_rounds": segment_rounds})
    return out, seconds, "", _source_label(ran["source"]), _machine_label(ran)


def _stored_part(study: Study, part: Path, fingerprint: str) -> dict | None:
    """The part stored at ``part`` when it was run with ``fingerprint`` (and holds what ``study`` uses)."""
    if not part.exists():
        return None
    stored = pickle.loads(part.read_bytes())
    usable = SweepResult(*stored["result"]).params is not None or study.final is None
    return stored if stored["fingerprint"] == fingerprint and usable else None


def _write_part(part: Path, stored: dict) -> None:
    part.parent.mkdir(parents=True, exist_ok=True)
    partial = part.with_suffix(".tmp")
    partial.write_bytes(pickle.dumps(stored))
    partial.replace(part)  # atomic: a part is either whole or absent


def compare_parts(a: str | os.PathLike, b: str | os.PathLike, metric: str = "test_accuracy") -> dict:
    """Compares the stored parts of one study run twice (e.g. on a CPU and on a GPU, whose parts are kept
    apart because a part is keyed by the JAX version): ``metric`` of every part stored in both ``a`` and ``b``
    (results directories, or their ``parts/`` folders), value by value (``[configs, seeds]`` each).

    Returns ``{"parts": [(name, values in a, values in b), ...], "only_a": [...], "only_b": [...],
    "values": count, "max_abs": ..., "mean_abs": ..., "worst": name}`` (absolute differences of the metric).
    Raises ValueError when a folder holds no parts, none is in both, or a part lacks ``metric`` or differs in
    shape.

    Example: ``jaxfl compare-parts A B`` (the CLI), e.g. a study's CPU and GPU results folders.
    """
    def stored(folder) -> dict[str, Path]:
        folder = Path(folder)
        folder = folder / "parts" if (folder / "parts").is_dir() else folder
        found = {p.stem: p for p in sorted(folder.glob("*.pkl"))}
        if not found:
            raise ValueError(f"no stored parts (*.pkl) in {folder}")
        return found

    def values(path: Path) -> np.ndarray:
        metrics = SweepResult(*pickle.loads(path.read_bytes())["result"]).metrics
        if metric not in metrics:
            raise ValueError(f"part {path} has no metric {metric!r} (it has {', '.join(sorted(metrics))})")
        return np.asarray(metrics[metric], np.float64)

    in_a, in_b = stored(a), stored(b)
    shared = [name for name in in_a if name in in_b]
    if not shared:
        raise ValueError(f"no part is stored in both {a} and {b}")
    rows, worst = [], (-1.0, "")
    for name in shared:
        va, vb = values(in_a[name]), values(in_b[name])
        if va.shape != vb.shape:
            raise ValueError(f"part {name}: {metric} has shape {va.shape} in {a} and {vb.shape} in {b}")
        rows.append((name, va, vb))
        worst = max(worst, (float(np.max(np.abs(va - vb))), name))
    diffs = np.concatenate([np.abs(va - vb).reshape(-1) for _, va, vb in rows])
    return {"parts": rows, "only_a": sorted(set(in_a) - set(in_b)), "only_b": sorted(set(in_b) - set(in_a)),
            "values": int(diffs.size), "max_abs": float(diffs.max()), "mean_abs": float(diffs.mean()),
            "worst": worst[1]}


def _without_unused_params(study: Study, out: SweepResult) -> SweepResult:
    """``out`` without its final parameters when the study does not use them (no ``final``): a stored part
    then holds metrics, infos and epsilons only (~0.2 MB instead of ~5 MB for Lowy et al.'s MNIST grids, small
    enough to commit a long study's finished parts and resume it in a later sitting)."""
    return out if study.final is not None else out._replace(params=None)


@dataclasses.dataclass
class Share:
    """One worker's share of a study (``jaxfl reproduce --workers N``). The study's work units -- grid
    programs and checkpointed runs, numbered in the order :func:`run` meets them -- go to whichever worker
    claims them first (an exclusively created file ``claims/<unit>``, so the workers balance themselves), or,
    without ``claims``, units ``index``, ``index + count``, ... Workers store what they run (parts,
    checkpoints); a final :func:`run` without a share then reuses all of it.

    Example (without a claims folder, worker 1 of 3 takes units 1, 4, 7, ...):
      >>> Share(1, 3).index, Share(1, 3).count
      (1, 3)
    """

    index: int
    count: int
    claims: Path | None = None
    seen: int = 0

    def __post_init__(self):
        if not 0 <= self.index < self.count:
            raise ValueError(f"worker index must be in 0..{self.count - 1}, got {self.index}")

    def take(self) -> bool:
        """Whether the next work unit is this worker's (claims it)."""
        unit, self.seen = self.seen, self.seen + 1
        if self.claims is None:
            return unit % self.count == self.index
        Path(self.claims).mkdir(parents=True, exist_ok=True)
        try:
            os.close(os.open(Path(self.claims) / str(unit), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True


def _trained(study: Study, family: Family, panel: Panel, trial_index: int, trial: Trial, program: Program,
             seeds: list, out_dir: Path | None, log, share: Share | None = None) -> list[dict]:
    """``"train"`` families: each configuration and seed as one :func:`driver.train` run (checkpointed and
    resumed under ``out_dir/checkpoints``), one row each (no selection): the final evaluation's metrics.
    With ``share``, only the share's runs."""
    build = _builder(family, program.static)
    rows = []
    for config in configurations(program.grid):
        for seed in seeds:
            if share is not None and not share.take():
                continue
            t0 = time.perf_counter()
            tag = "-".join(f"{k}{v:g}" for k, v in config.items())
            ckpt = None if out_dir is None else Path(out_dir) / "checkpoints" / f"{family.name}-{tag}-seed{seed}"
            if ckpt is not None:
                ckpt.mkdir(parents=True, exist_ok=True)
            info = {"algorithm": family.name, **config, "seed": seed}

            def progress(record, rounds=program.rounds, label=f"{family.name} {tag} seed {seed}", info=info):
                if record["round"] < rounds:   # the final record is logged below, with the run's row
                    log(f"      {label}, round {record['round']}/{rounds}: " + ", ".join(
                        f"{k} {v:.4g}" for k, v in record.items() if isinstance(v, float) and k not in info))

            result = driver.train(build(**config, **program.constants), trial.train,
                                  study.init(seed if study.init_seed is None else study.init_seed),
                                  rounds=program.rounds, key=seed, eval_every=study.eval_every,
                                  eval_fn=lambda p: study.evaluate(p, trial.eval_data),
                                  accountant=family.accountant or "rdp",
                                  delta=None if family.accountant is None else trial.deltas,
                                  checkpoint_dir=ckpt, metrics_path=None if ckpt is None else ckpt / "metrics.jsonl",
                                  progress=False, run_info=info, on_record=progress)
            history = result.history
            if ckpt is not None:   # a resumed run: its history is the metrics file (last record per round)
                records = [json.loads(line) for line in (ckpt / "metrics.jsonl").read_text().splitlines() if line]
                history = list({r["round"]: r for r in records}.values())
            final = history[-1]
            log(f"    {family.name} {tag} seed {seed}: " + ", ".join(
                f"{k} {v:.4g}" for k, v in final.items() if isinstance(v, float)))
            skip = {"round", "epsilon", "wall_seconds", "seed", *config}
            row = _row(family, config, panel, trial_index, program)
            row.update({"seed": int(seed), "delta": _delta_field(trial.deltas),
                        "metrics": {k: float(v) for k, v in final.items()
                                    if isinstance(v, (int, float)) and k not in skip},
                        "epsilon_spent": float(np.max(np.atleast_1d(result.epsilon))) if result.epsilon is not None
                        else math.inf,
                        # the run's own seconds summed over its sittings (a resumed run), else this sitting's
                        "wall_seconds": float(final.get("wall_seconds", time.perf_counter() - t0)),
                        "rounds": program.rounds, "history": history})
            if family.describe is not None:
                row.update(family.describe(study, panel, trial, program, row))
            rows.append(row)
    return rows


def _computed(family: Family, panel: Panel, trial_index: int, program: Program) -> list[dict]:
    """``"compute"`` families: one row per configuration, from ``build(static, **config)``."""
    rows = []
    for config in configurations(program.grid):
        t0 = time.perf_counter()
        result = dict(_builder(family, program.static)(**config, **program.constants))
        rows.append({**_row(family, config, panel, trial_index, program), "accountant": family.accountant,
                     "wall_seconds": time.perf_counter() - t0, **result})
    return rows


def _combined(study: Study, rows: list[dict]) -> list[dict]:
    out = []
    families = {f.name: f for f in study.families}
    for combine in study.combine:
        for eps in dict.fromkeys(r["epsilon"] for r in rows if r["family"] in combine.of and r["private"]):
            picks = [r for r in rows if r["family"] in combine.of and r["epsilon"] == eps]
            pick = min(picks, key=lambda r: r["score"])
            short = families[pick["family"]].short
            out.append({**pick, "algorithm": combine.label, "variant": short(pick) if short else pick["algorithm"]})
    return out


def _facts(info: Mapping) -> str:
    return ", ".join(f"{k} {v}" for k, v in info.items() if not isinstance(v, (list, dict)))


@dataclasses.dataclass
class Outcome:
    """What :func:`run` produced: ``rows`` (selected rows, host values) and per-trial facts; :func:`report.write
    <jaxfl.studies.report.write>` turns it into ``results.json``, ``summary.md`` and figures. Example: :func:`run`.
    """

    study: Study
    rows: list
    per_trial: list
    seconds: float
    parts_seconds: float = 0.0   # the grid programs' seconds, stored parts' as recorded when they ran
    parts_reused: int = 0        # grid programs taken from stored parts (a resumed run)
    parts_sources: list = dataclasses.field(default_factory=list)  # the code that ran the grid programs
    runs_seconds: float = 0.0    # "train" runs' own seconds, each counted from round 0 over all its sittings
    workers: dict | None = None  # set by jaxfl reproduce --workers: {"count", "wall_seconds"} of the workers' pass
    parts_machines: list = dataclasses.field(default_factory=list)  # the machines that finished them


def run(study: Study, out_dir: Path | None = None, log=print, share: Share | None = None,
        segment_rounds: int | None = None) -> Outcome:
    """Runs every trial, panel, family and program of ``study``; returns the selected rows. With ``share``
    (a worker of ``jaxfl reproduce --workers``), only the share's grid programs and runs, stored under
    ``out_dir`` for the final run without a share; its rows are incomplete. ``segment_rounds`` (with
    ``out_dir``): grid programs run in segments of about that many rounds, each program's progress checkpointed
    after every segment, so that a part stopped mid-way resumes there (:func:`_stored_sweep`).

    Example:
      >>> from jaxfl.studies.demo import STUDY
      >>> outcome = run(STUDY.form_of(quick=True), log=lambda *line: None)     # out_dir=None: nothing written
      >>> [(row["family"], row["epsilon"]) for row in outcome.rows]
      [('mbsgd', None), ('fedavg', None), ('dp', 1.0), ('dp', 8.0)]
      >>> all(row["epsilon_spent"] <= row["epsilon"] * (1 + 1e-9) for row in outcome.rows if row["private"])
      True
    """
    if share is not None and out_dir is None:
        raise ValueError("a worker's share needs an out_dir to store its parts and checkpoints in")
    # The code that runs is the checkout's at the start: read it now, before a commit made during a long run
    # could be stamped on its parts and results.
    source_revision()
    t_start = time.perf_counter()
    rows, per_trial = [], []
    for t in range(study.trials_run):
        t0 = time.perf_counter()
        parts_seconds, parts_reused, sources, machines, runs_seconds = 0.0, 0, set(), set(), 0.0
        trial = None if study.data_per_panel else study.data(study, t)
        panel_info = {}
        if trial is not None:
            log(f"  trial {t + 1}/{study.trials_run}: " + _facts(trial.info))
        for p, panel in study.panels_run:
            if study.data_per_panel:
                trial = study.data(study, t, panel)
                sizes = {} if trial.train is None else {"silo_sizes": np.asarray(trial.train.counts).tolist()}
                panel_info[panel.label] = {**sizes, **trial.info}
                log(f"  trial {t + 1}/{study.trials_run}, {panel.label}: " + _facts(trial.info))
            seeds = [study.seed(t, p, r) for r in range(study.reps)]
            best: dict = {}
            panel_rows = []
            for family in study.families:
                for j, program in enumerate(family.programs(study, panel, trial)):
                    if family.runner == "compute":
                        if share is None:  # cheap: left to the final run
                            panel_rows += _computed(family, panel, t, program)
                        continue
                    if family.runner == "train":
                        trained = _trained(study, family, panel, t, trial, program, seeds, out_dir, log, share)
                        runs_seconds += sum(r["wall_seconds"] for r in trained)
                        panel_rows += trained
                        continue
                    if share is not None and not share.take():
                        continue
                    name = f"trial{t}-panel{p}-{family.name}-{j}.pkl"
                    part = None if out_dir is None else Path(out_dir) / "parts" / name
                    base = None if part is None or not study.reuses_base_parts else (
                        dataclasses.replace(study, form=study.form.split("+")[0]), part.parents[2] / "parts" / name)
                    out, seconds, origin, source, ran_on = _stored_sweep(study, family, program, trial, seeds, part,
                                                                         base, segment_rounds)
                    sources.add(source)
                    machines.add(ran_on)
                    parts_seconds, parts_reused = parts_seconds + seconds, parts_reused + bool(origin)
                    shown = {k: v for k, v in program.static if not callable(v)}
                    log(f"   {panel.label} {family.name} {shown}: "
                        f"{len(out.configs)} configs x {len(seeds)} seeds {seconds:6.1f} s"
                        + (" (stored part, reused)" if origin == "stored" else
                           f" (the {base[0].form} form's stored part, reused)" if origin == "base" else ""))
                    for j_row, row in enumerate(_select(study, family, panel, t, trial, program, out, seconds)):
                        # one row per epsilon and family, the best over programs; score None: every configuration
                        key = (family.name, row["epsilon"]) + ((j, j_row) if study.select.score is None else ())
                        if key not in best or row["score"] < best[key]["score"]:
                            best[key] = row
            panel_rows += list(best.values())
            rows += panel_rows + _combined(study, panel_rows)
        if study.data_per_panel:
            facts = {"panels": panel_info}
        else:
            facts = {} if trial.train is None else {"silo_sizes": np.asarray(trial.train.counts).tolist()}
            facts.update(trial.info)
        per_trial.append({"trial": t, **facts, "seconds": time.perf_counter() - t0,
                          "parts_seconds": parts_seconds, "parts_reused": parts_reused,
                          "parts_sources": sorted(sources), "parts_machines": sorted(machines),
                          "runs_seconds": runs_seconds})
    return Outcome(study, rows, per_trial, time.perf_counter() - t_start,
                   sum(p["parts_seconds"] for p in per_trial), sum(p["parts_reused"] for p in per_trial),
                   sorted({s for p in per_trial for s in p["parts_sources"]}),
                   sum(p["runs_seconds"] for p in per_trial),
                   parts_machines=sorted({m for p in per_trial for m in p["parts_machines"]}))
