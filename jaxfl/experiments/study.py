"""Studies: a paper's experiments as data, run by one runner and reported by one writer.

A :class:`Study` says *what* an experiment is -- its trials' data, the algorithm families with their
builds, grids and calibrations, the panels of the figure, how a configuration is selected, what the
report shows, and how its quick form and named variants differ -- and :func:`run` turns it into rows
(one per reported algorithm, epsilon, trial and panel) that :mod:`jaxfl.experiments.report` writes as
``results.json``, ``curves.csv``, ``summary.md`` and ``figure.png``. A paper module holds studies and
the paper's settings only; this module holds every loop::

    for trial:                       Study.data(trial) -> Trial (train data, evaluation data, deltas)
      for panel:                     Study.panels (e.g. silos per round M, rounds R)
        for family:                  Study.families
          for program:               Family.programs(study, panel, trial) (one per static choice, e.g. q)
            engine.sweep(...)        the whole grid x seeds as one compiled program ("sweep" families)
            or engine.train(...)     one long run per configuration and seed ("train" families)
            select per epsilon       Study.select: the smallest mean score over seeds (e.g. train loss)
        Study.combine                best-of rows across families (e.g. "ISRL-DP SPIDER")

Programs are cached by (family, static): every trial reuses the compiled grid of the first. With an
output directory, each finished grid is stored under ``out_dir/parts/`` and reused when the same form,
program and seeds run again, so a study longer than one sitting is run in parts: stop it (or let a time
limit stop it) and run the same command again to continue where it stopped.
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
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxfl import checks
from jaxfl.data.federated import FederatedData
from jaxfl.engine import driver
from jaxfl.engine.sweep import SweepResult, checkpoint_seconds, configurations, stable_name, sweep
from jaxfl.experiments.report import machine, source_revision


RUNNERS = ("sweep", "train", "compute")


@dataclasses.dataclass(frozen=True)
class Trial:
    """One trial's data.

    Attributes:
      train: silo-major training data.
      eval_data: pytree handed to ``Study.evaluate`` (an argument of the compiled grid program).
      deltas: ``float64[num_silos]`` (or a scalar): the delta each run is accounted at.
      info: facts recorded in ``results.json`` ``config.per_trial``.
    """

    train: FederatedData
    eval_data: Any
    deltas: Any
    info: Mapping = dataclasses.field(default_factory=dict)

    @classmethod
    def with_test_set(cls, train: FederatedData, test_x, test_y, deltas, info=None, **eval_extra) -> "Trial":
        """A trial evaluated on a pooled test set: ``eval_data = {"train", "test_x", "test_y", **eval_extra}``
        (see :func:`train_loss_and_test_error`)."""
        eval_data = {"train": train, "test_x": jnp.asarray(test_x), "test_y": jnp.asarray(test_y), **eval_extra}
        return cls(train, eval_data, deltas, dict(info or {}))


@dataclasses.dataclass(frozen=True)
class Panel:
    """One panel of the figure (and one block of the summary): ``values`` reach every family."""

    label: str
    values: tuple = ()            # ((name, value), ...)

    def __getitem__(self, name):
        return dict(self.values)[name]


@dataclasses.dataclass(frozen=True)
class Program:
    """One compiled grid of a family on one panel and trial.

    Attributes:
      static: hashable ``((name, value), ...)`` passed to ``Family.build``; with the family it keys the
        build function, so equal statics share one compiled program across trials.
      grid: ``name -> values`` (Cartesian product) or a list of configurations; an ``epsilon`` key
        marks private (``> 0``) and non-private (``0``) configurations.
      rounds: engine rounds.
      constants: values of the build that change with the trial (e.g. calibrated noise multipliers):
        traced arguments of the program, host values for the accounting.
      columns: facts copied into every row (e.g. the minibatch size).
      eval_every: also evaluate every this many rounds (a learning curve: each row's ``curve``, the mean
        over seeds of every metric after rounds ``eval_every, 2 eval_every, ...`` and the last round;
        ``"sweep"`` families).
    """

    static: tuple
    grid: Any
    rounds: int
    constants: Mapping = dataclasses.field(default_factory=dict)
    columns: Mapping = dataclasses.field(default_factory=dict)
    eval_every: int | None = None


@dataclasses.dataclass(frozen=True)
class Family:
    """An algorithm family: ``build(static: dict, **config, **constants) -> FederatedAlgorithm``.

    ``programs(study, panel, trial)`` lists its grids; ``runner`` is ``"sweep"`` (vmapped grid),
    ``"train"`` (:func:`jaxfl.engine.driver.train`, one run per configuration and seed, with checkpoints)
    or ``"compute"`` (no training: ``build(static, **config)`` returns the row's ``metrics``,
    ``epsilon_spent`` and any other facts, e.g. an accounting table);
    ``accountant`` accounts every configuration at the trial's deltas (None: not accounted);
    ``describe(study, panel, trial, program, row) -> dict`` adds paper-specific facts to a selected row;
    ``short(row)`` names the row when a :class:`Combine` picks it.
    """

    name: str
    label: str
    build: Callable[..., Any]
    programs: Callable[..., Sequence[Program]]
    nonprivate_label: str | None = None
    runner: str = "sweep"
    accountant: str | None = "rdp"
    describe: Callable[..., dict] | None = None
    short: Callable[[dict], str] | None = None

    def __post_init__(self):
        checks.one_of("runner", self.runner, RUNNERS)


@dataclasses.dataclass(frozen=True)
class Select:
    """The configuration reported per value of ``per``: the smallest mean of metric ``score`` over seeds
    (non-finite means never win); across a family's programs the smaller score wins. ``score=None``
    reports every configuration."""

    score: str | None = "train_loss"
    per: tuple = ("epsilon",)
    describe: str = "per epsilon: the configuration with the smallest mean final training loss over the seeds"


@dataclasses.dataclass(frozen=True)
class Combine:
    """A reported row per epsilon that is the best (by selection score) of the ``of`` families' rows."""

    label: str
    of: tuple


@dataclasses.dataclass(frozen=True)
class Study:
    """A reproduction, declared. See the module docstring for the loop it describes.

    Attributes:
      name, description: ``jaxfl reproduce NAME`` and its one-line description.
      data: ``(study, trial index) -> Trial``, or ``(study, trial index, panel) -> Trial`` with
        ``data_per_panel`` (panels that differ in their data, e.g. Huang et al.'s number of owners).
      families, panels, select, combine: what runs and what is reported.
      evaluate: ``(params, eval_data) -> dict of scalars`` (traced for sweeps; host for train runs).
      init: ``seed -> initial params``; sweeps use ``init(init_seed)``, train runs ``init(seed)`` unless
        ``init_seed`` is set.
      trials, reps: trials (fresh data) and repetitions (seeds) per configuration.
      seed: ``(trial, panel index, rep) -> root seed``.
      settings: the paper's parameters the families read (rounds, grids, batch sizes, ...).
      report: a :class:`jaxfl.experiments.report.Report` (table and figure layouts).
      config: what ``results.json`` records as the experiment's configuration besides the generic fields.
      final: optional ``(params over seeds, trial, study) -> metrics`` overriding a selected row's
        metrics (e.g. the error of the seed-averaged model); the overridden means stay as ``<m>_seed_mean``.
      quick, variants: field overrides making the quick form and each named variant (``settings`` and
        ``config`` overrides are merged into the base values).
      configs_per_batch: grid points per compiled call (bounds memory; None: the whole grid), or a mapping
        from family name to that number (families not named: the whole grid); see :meth:`batch_for`.
      eval_every: train runs: rounds between evaluations (and checkpoints).
      silo_models: sweeps: ``evaluate`` receives every silo's own model (leaves ``[num_silos, ...]``; see
        :func:`jaxfl.engine.sweep.sweep`), for personalised algorithms evaluated per silo.
      evaluate_on: sweeps: ``state -> params``, the model ``evaluate`` receives (default ``state.params``).
      reuses_base_parts: set by a variant that changes some programs and nothing the others or the data
        depend on (e.g. only the DP regimes' learning rate): a program it runs unchanged (same family,
        static settings, grid, rounds and seeds) is taken from the base form's stored part, under the output
        directory's parent (the CLI's ``results/NAME`` for a variant's ``results/NAME/VARIANT``), when one
        is there, and copied into this form's parts.
      form: set by :meth:`form`: ``"full"``, ``"quick"``, plus ``"+variant"``.
      only_panels: set by :meth:`form_of`: the labels of the panels to run (None: all). A partial run keeps
        every panel's index, so its stored parts are the full run's and a later full run reuses them.
    """

    name: str
    description: str
    data: Callable[["Study", int], Trial]
    families: tuple
    evaluate: Callable
    init: Callable[[int], Any]
    report: Any
    panels: tuple = (Panel(""),)
    select: Select = Select()
    combine: tuple = ()
    trials: int = 1
    reps: int = 1
    seed: Callable[[int, int, int], int] = lambda trial, panel, rep: 1000 * trial + rep
    init_seed: int | None = 0
    settings: Mapping = dataclasses.field(default_factory=dict)
    config: Mapping = dataclasses.field(default_factory=dict)
    final: Callable | None = None
    quick: Mapping = dataclasses.field(default_factory=dict)
    variants: Mapping = dataclasses.field(default_factory=dict)
    configs_per_batch: int | Mapping[str, int | None] | None = None
    eval_every: int | None = None
    silo_models: bool = False
    evaluate_on: Callable | None = None
    data_per_panel: bool = False
    reuses_base_parts: bool = False
    form: str = "full"
    only_panels: tuple | None = None

    def __getitem__(self, name):
        return self.settings[name]

    def batch_for(self, family: str) -> int | None:
        """Grid points per compiled call for ``family``'s programs (None: the whole grid in one call)."""
        if isinstance(self.configs_per_batch, Mapping):
            return self.configs_per_batch.get(family)
        return self.configs_per_batch

    @property
    def is_quick(self) -> bool:
        return self.form.startswith("quick")

    def form_of(self, quick: bool = False, variant: str | None = None, panels=None) -> "Study":
        """This study's quick form and/or named variant (overrides applied in that order), restricted to the
        panels labelled ``panels`` (a sequence of labels; None: every panel)."""
        study = self
        if variant is not None and variant not in self.variants:
            known = ", ".join(sorted(self.variants)) or "none"
            raise ValueError(f"unknown variant {variant!r} of {self.name} (known: {known})")
        for overrides in ([self.quick] if quick else []) + ([self.variants[variant]] if variant else []):
            overrides = dict(overrides)
            for merged in ("settings", "config"):
                if merged in overrides:
                    overrides[merged] = {**getattr(study, merged), **overrides[merged]}
            study = dataclasses.replace(study, **overrides)
        form = ("quick" if quick else "full") + (f"+{variant}" if variant else "")
        if panels is not None:
            labels = [p.label for p in study.panels]
            unknown = [p for p in panels if p not in labels]
            if unknown or not panels:
                raise ValueError(f"unknown panel {unknown[0] if unknown else '(none given)'!r} of {study.name} "
                                 f"({form} form; its panels: {', '.join(map(repr, labels))})")
            panels = tuple(p for p in labels if p in panels)
        return dataclasses.replace(study, form=form, only_panels=panels)

    @property
    def panels_run(self) -> tuple:
        """``(index, panel)`` of the panels a run computes: every panel, or those in ``only_panels``."""
        return tuple((p, panel) for p, panel in enumerate(self.panels)
                     if self.only_panels is None or panel.label in self.only_panels)


# ------------------------------------------------------------------------------------------------
# Helpers for study modules


def exp_grid(lo: float, hi: float, num: int) -> tuple:
    """``exp(linspace(lo, hi, num))`` as floats: the papers' log-spaced step-size grids."""
    return tuple(float(v) for v in np.exp(np.linspace(lo, hi, num)))


def mean_train_loss(loss, params, data: FederatedData):
    """The mean of ``loss(params, x, y)`` over every silo's real (unpadded) records (traceable)."""
    per = jax.vmap(jax.vmap(loss, in_axes=(None, 0, 0)), in_axes=(None, 0, 0))(params, data.x, data.y)
    mask = data.mask().astype(per.dtype)
    return jnp.sum(per * mask) / jnp.sum(mask)


@functools.lru_cache(maxsize=None)
def train_loss_and_test_error(loss, error, with_eval_data: bool = False):
    """The evaluation of the papers' grids: ``(params, eval_data) -> {"train_loss", "test_error"}`` with
    ``eval_data`` from :meth:`Trial.with_test_set`; ``error(params, x, y[, eval_data])``. One function per
    ``(loss, error)``, so every trial reuses the compiled program."""

    def evaluate(params, ev):
        args = (params, ev["test_x"], ev["test_y"]) + ((ev,) if with_eval_data else ())
        return {"train_loss": mean_train_loss(loss, params, ev["train"]), "test_error": error(*args)}

    return evaluate


def scaled(unit, epsilon):
    """``unit / epsilon``, 0 for the non-private ``epsilon = 0``: noise multipliers proportional to
    ``1/epsilon`` from their value at ``epsilon = 1``. Traced in compiled grids; on the host (Python
    ``epsilon``, for the accounting) in float64, a float when every silo's value agrees."""
    if isinstance(epsilon, (int, float)):
        if epsilon <= 0:
            return 0.0
        z = np.asarray(unit, np.float64) / epsilon
        return float(z.reshape(-1)[0]) if np.all(z == z.reshape(-1)[0]) else z
    return jnp.where(epsilon > 0, unit / jnp.maximum(epsilon, 1e-6), 0.0)


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
    :data:`jaxfl.experiments.report.SOURCE_ENV`) or ``"unrecorded"`` (no git checkout, or a part stored before
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
    shape."""
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
    checkpoints); a final :func:`run` without a share then reuses all of it."""

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
    """What :func:`run` produced: ``rows`` (selected rows, host values) and per-trial facts."""

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
    after every segment, so that a part stopped mid-way resumes there (:func:`_stored_sweep`)."""
    if share is not None and out_dir is None:
        raise ValueError("a worker's share needs an out_dir to store its parts and checkpoints in")
    # The code that runs is the checkout's at the start: read it now, before a commit made during a long run
    # could be stamped on its parts and results.
    source_revision()
    t_start = time.perf_counter()
    rows, per_trial = [], []
    for t in range(study.trials):
        t0 = time.perf_counter()
        parts_seconds, parts_reused, sources, machines, runs_seconds = 0.0, 0, set(), set(), 0.0
        trial = None if study.data_per_panel else study.data(study, t)
        panel_info = {}
        if trial is not None:
            log(f"  trial {t + 1}/{study.trials}: " + _facts(trial.info))
        for p, panel in study.panels_run:
            if study.data_per_panel:
                trial = study.data(study, t, panel)
                sizes = {} if trial.train is None else {"silo_sizes": np.asarray(trial.train.counts).tolist()}
                panel_info[panel.label] = {**sizes, **trial.info}
                log(f"  trial {t + 1}/{study.trials}, {panel.label}: " + _facts(trial.info))
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
