"""A study, declared: a privacy-utility experiment as data, run by :func:`jaxfl.studies.run` and reported by
:mod:`jaxfl.studies.report`.

A :class:`Study` says *what* an experiment is -- its trials' data, the algorithm families with their
builds, grids and calibrations, the panels of the figure, how a configuration is selected, what the
report shows, and how its quick form and named variants differ -- and :func:`jaxfl.studies.runner.run` turns it
into rows
(one per reported algorithm, epsilon, trial and panel) that :mod:`jaxfl.studies.report` writes as
``results.json``, ``curves.csv``, ``summary.md`` and ``figure.png``. A study module (a paper's home, or your
own file) holds studies and their settings only; the runner holds every loop::

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
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxfl import checks
from jaxfl.data.federated import FederatedData


RUNNERS = ("sweep", "train", "compute")


@dataclasses.dataclass(frozen=True)
class Trial:
    """One trial's data.

    Attributes:
      train: silo-major training data.
      eval_data: pytree handed to ``Study.evaluate`` (an argument of the compiled grid program).
      deltas: ``float64[num_silos]`` (or a scalar): the delta each run is accounted at.
      info: facts recorded in ``results.json`` ``config.per_trial``.

    Example (two silos, each accounted at delta = 1 / n_i^2, evaluated on a pooled test set):
      >>> import numpy as np
      >>> from jaxfl.data import from_silos
      >>> data = from_silos([(np.ones((4, 3)), np.zeros(4)), (np.ones((2, 3)), np.ones(2))])
      >>> trial = Trial.with_test_set(data, np.ones((5, 3)), np.zeros(5), 1.0 / np.asarray(data.counts) ** 2,
      ...                             {"test_records": 5})
      >>> trial.deltas.tolist(), sorted(trial.eval_data)
      ([0.0625, 0.25], ['test_x', 'test_y', 'train'])
    """

    train: FederatedData
    eval_data: Any
    deltas: Any
    info: Mapping = dataclasses.field(default_factory=dict)

    @classmethod
    def with_test_set(cls, train: FederatedData, test_x, test_y, deltas, info=None, **eval_extra) -> "Trial":
        """A trial evaluated on a pooled test set: ``eval_data = {"train", "test_x", "test_y", **eval_extra}``
        (see :func:`train_loss_and_test_error`); example in the class docstring."""
        eval_data = {"train": train, "test_x": jnp.asarray(test_x), "test_y": jnp.asarray(test_y), **eval_extra}
        return cls(train, eval_data, deltas, dict(info or {}))


@dataclasses.dataclass(frozen=True)
class Panel:
    """One panel of the figure (and one block of the summary): ``values`` reach every family.

    Example:
      >>> panel = Panel("M = 25, R = 50", (("silos_per_round", 25), ("rounds", 50)))
      >>> panel["rounds"], panel.label
      (50, 'M = 25, R = 50')
    """

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

    Example:
      >>> program = Program((("rounds", 25),), {"epsilon": [1.0, 3.0, 0.0], "step_size": [0.1, 1.0]}, rounds=25)
      >>> program.rounds, len(program.grid["epsilon"]) * len(program.grid["step_size"])   # one compiled grid of 6
      (25, 6)
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

    Example (the demo's DP family: one grid of epsilons, each with its calibrated noise multiplier):
      >>> from jaxfl.studies.demo import STUDY
      >>> dp = STUDY.families[2]
      >>> dp.name, dp.runner, dp.accountant
      ('dp', 'sweep', 'rdp')
      >>> type(dp.build({}, noise_multiplier=1.0, epsilon=1.0)).__name__        # one configuration's algorithm
      'FederatedAlgorithm'
      >>> Family("dp", "DP-SGD", dp.build, dp.programs, runner="scan")
      Traceback (most recent call last):
      ...
      ValueError: ...runner...
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
    reports every configuration.

    Example:
      >>> Select().score, Select().per                    # the default: smallest mean final training loss per epsilon
      ('train_loss', ('epsilon',))
    """

    score: str | None = "train_loss"
    per: tuple = ("epsilon",)
    describe: str = "per epsilon: the configuration with the smallest mean final training loss over the seeds"


@dataclasses.dataclass(frozen=True)
class Combine:
    """A reported row per epsilon that is the best (by selection score) of the ``of`` families' rows.

    Example (report SPIDER as the better of its printed and its authors'-code noise, per epsilon):
      >>> Combine("FedProx-SPIDER", ("spider", "alt")).of
      ('spider', 'alt')
    """

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
      report: a :class:`jaxfl.studies.report.Report` (table and figure layouts).
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
      only_trials: set by :meth:`form_of`: run the first ``only_trials`` trials only (None: all), a partial run
        whose stored parts a later run of more trials reuses (a trial's seeds do not depend on how many run).

    Example:
      >>> from jaxfl.studies import run
      >>> from jaxfl.studies.demo import STUDY               # a complete study in ~110 lines
      >>> quick = STUDY.form_of(quick=True)
      >>> [family.name for family in quick.families]
      ['mbsgd', 'fedavg', 'dp']
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
    only_trials: int | None = None

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

    def form_of(self, quick: bool = False, variant: str | None = None, panels=None,
                trials: int | None = None) -> "Study":
        """This study's quick form and/or named variant (overrides applied in that order), restricted to the
        panels labelled ``panels`` (a sequence of labels; None: every panel) and to its first ``trials`` trials
        (None: all)."""
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
        if trials is not None:
            trials = checks.positive_int("trials", trials)
            if trials > study.trials:
                raise ValueError(f"trials={trials}, but {study.name} ({form} form) has {study.trials}")
            trials = trials if trials < study.trials else None
        return dataclasses.replace(study, form=form, only_panels=panels, only_trials=trials)

    @property
    def trials_run(self) -> int:
        """How many trials a run computes: :attr:`only_trials`, or every trial."""
        return self.trials if self.only_trials is None else self.only_trials

    @property
    def panels_run(self) -> tuple:
        """``(index, panel)`` of the panels a run computes: every panel, or those in ``only_panels``."""
        return tuple((p, panel) for p, panel in enumerate(self.panels)
                     if self.only_panels is None or panel.label in self.only_panels)


# ------------------------------------------------------------------------------------------------
# Helpers for study modules


def exp_grid(lo: float, hi: float, num: int) -> tuple:
    """``exp(linspace(lo, hi, num))`` as floats: the papers' log-spaced step-size grids.

    Example:
      >>> [round(v, 4) for v in exp_grid(-4, 0, 3)]       # e^-4 .. e^0
      [0.0183, 0.1353, 1.0]
    """
    return tuple(float(v) for v in np.exp(np.linspace(lo, hi, num)))


def mean_train_loss(loss, params, data: FederatedData):
    """The mean of ``loss(params, x, y)`` over every silo's real (unpadded) records (traceable).

    Example:
      >>> import jax.numpy as jnp, numpy as np
      >>> from jaxfl.data import from_silos
      >>> data = from_silos([(np.array([[1.0], [3.0]]), np.zeros(2)), (np.array([[5.0]]), np.zeros(1))])
      >>> float(mean_train_loss(lambda p, x, y: p * x[0], 1.0, data))      # (1 + 3 + 5) / 3: padding left out
      3.0
    """
    per = jax.vmap(jax.vmap(loss, in_axes=(None, 0, 0)), in_axes=(None, 0, 0))(params, data.x, data.y)
    mask = data.mask().astype(per.dtype)
    return jnp.sum(per * mask) / jnp.sum(mask)


@functools.lru_cache(maxsize=None)
def train_loss_and_test_error(loss, error, with_eval_data: bool = False):
    """The evaluation of the papers' grids: ``(params, eval_data) -> {"train_loss", "test_error"}`` with
    ``eval_data`` from :meth:`Trial.with_test_set`; ``error(params, x, y[, eval_data])``. One function per
    ``(loss, error)``, so every trial reuses the compiled program.

    Example:
      >>> import numpy as np
      >>> from jaxfl.data import from_silos
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> def error(params, x, y):
      ...     return ((x @ params["w"] + params["b"] > 0) != (y > 0.5)).mean()
      >>> data = from_silos([(np.ones((4, 3), np.float32), np.zeros(4)), (np.ones((2, 3), np.float32), np.ones(2))])
      >>> trial = Trial.with_test_set(data, np.ones((5, 3), np.float32), np.zeros(5), 1e-5)
      >>> evaluate = train_loss_and_test_error(logistic_loss, error)
      >>> metrics = evaluate(init_linear(3), trial.eval_data)            # zero parameters: loss log 2
      >>> round(float(metrics["train_loss"]), 4), float(metrics["test_error"])
      (0.6931, 0.0)
    """

    def evaluate(params, ev):
        args = (params, ev["test_x"], ev["test_y"]) + ((ev,) if with_eval_data else ())
        return {"train_loss": mean_train_loss(loss, params, ev["train"]), "test_error": error(*args)}

    return evaluate


def scaled(unit, epsilon):
    """``unit / epsilon``, 0 for the non-private ``epsilon = 0``: noise multipliers proportional to
    ``1/epsilon`` from their value at ``epsilon = 1``. Traced in compiled grids; on the host (Python
    ``epsilon``, for the accounting) in float64, a float when every silo's value agrees.

    Example:
      >>> scaled(2.0, 4.0), scaled(2.0, 0.0)              # epsilon 0 marks the non-private run
      (0.5, 0.0)
    """
    if isinstance(epsilon, (int, float)):
        if epsilon <= 0:
            return 0.0
        z = np.asarray(unit, np.float64) / epsilon
        return float(z.reshape(-1)[0]) if np.all(z == z.reshape(-1)[0]) else z
    return jnp.where(epsilon > 0, unit / jnp.maximum(epsilon, 1e-6), 0.0)
