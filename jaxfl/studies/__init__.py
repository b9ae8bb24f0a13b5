"""Privacy-utility studies: an experiment declared as data (:mod:`~jaxfl.studies.spec`), run by one runner
(:mod:`~jaxfl.studies.runner`) into ``results.json``, ``summary.md`` and figures (:mod:`~jaxfl.studies.report`,
:mod:`~jaxfl.studies.figures`), with the machine and code recorded (:mod:`~jaxfl.studies.provenance`).

Declare a :class:`Study` in your own module, :func:`register` it, and run it with
``jaxfl reproduce NAME --papers DIR`` or :func:`reproduce` (which writes where it is told). The papers' studies
live beside the library, one home per paper under ``papers/`` in the repository (:mod:`~jaxfl.studies.registry`);
:mod:`jaxfl.studies.demo` is a complete example. Importing this package imports no plotting library (figures need
the ``studies`` extra).
"""
from jaxfl.studies.registry import experiments, get_experiment, register, reproduce
from jaxfl.studies.report import Column, Curve, Figure, Report, RoundsFigure, Table
from jaxfl.studies.runner import Outcome, run
from jaxfl.studies.spec import (Combine, Family, Panel, Program, Select, Study, Trial, exp_grid, mean_train_loss,
                                scaled, train_loss_and_test_error)

__all__ = ["Column", "Combine", "Curve", "Family", "Figure", "Outcome", "Panel", "Program", "Report", "RoundsFigure",
           "Select", "Study", "Table", "Trial", "exp_grid", "experiments", "get_experiment", "mean_train_loss",
           "register", "reproduce", "run", "scaled", "train_loss_and_test_error"]
