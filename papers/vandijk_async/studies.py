"""van Dijk et al.'s studies (van Dijk et al. 2020, App. E): ``jaxfl reproduce vandijk-async/{table3, sampling, dp}``.

Every run is :func:`jaxfl.algorithms.async_sgd` on a simulated timeline
(:func:`jaxfl.algorithms.async_timeline.simulate`): ``n`` clients, single-record SGD steps on records drawn
with replacement, the server summing the clients' updates and broadcasting per completed round. What the
paper leaves open (digest §9, §11), chosen here and recorded in ``results.json``:

* data: the training set dealt i.i.d. into ``n`` equal shards (:func:`jaxfl.data.partition.iid`); test
  accuracy of the server's model on the official test split (a9a.t, MNIST test), or on a fixed-seed 10 %
  hold-out where there is none (w8a's shards then come from the other 90 %: 8,954 records per client
  against the paper's N_c = 10,000, which w8a's 49,749 records cannot give 5 clients);
* models: logistic regression with a bias; strongly convex adds ``(lambda/2)||w||^2`` with ``lambda = 1/N``
  (``N`` the training records, the bias unregularised) to each record's loss; non-convex is the classic
  LeNet-5 (:class:`jaxfl.models.nets.ClassicLeNet5`, ReLU, max pooling) with cross-entropy;
* asynchrony: the paper does not say how it simulated it. Client speeds ``lognormal(0, 0.2)`` steps per time
  unit, message delays of mean 20 steps (lognormal, spread 0.5), lookahead ``d = 1`` (the paper: "we only
  need to require (2) for d = 1"), exact event times; each trial draws its own timing and data split;
* Table 3's 20,000 iterations are all clients' together (its rounds row is ``ceil(20000 / (5 s))``: ``s`` is
  per client and round); MNIST runs with Table 1's 4 clients (rounds ``ceil(20000 / (4 s))``: 100 ... 5; the
  table's shared rounds row is the convex problems' 5 clients);
* forms (variants): the paper's protocol (servers sum the clients' updates as they arrive), ``mean`` (the
  server applies ``1/n`` of each), ``no-delay`` (the protocol in synchronous rounds), ``sequential`` (one
  client: a single SGD trajectory), ``delayed`` (:func:`jaxfl.algorithms.delayed_sgd`: one trajectory at the
  largest delay the recursion allows with lookahead 1) and ``delayed-sync`` (the same at lookahead 0).

Quick forms (CI): fewer iterations and records, one trial.
"""
from __future__ import annotations


import jax

from jaxfl.algorithms.async_dp import latest_broadcast
from jaxfl.data import loaders
from jaxfl.studies.registry import register
from jaxfl.studies.report import Report, Table
from jaxfl.studies.spec import Family, Panel, Select, Study
from jaxfl.models import nets
from jaxfl.models.linear import init_linear
from papers.vandijk_async.data import _lenet_init, _linear_init, _trial, evaluate
from papers.vandijk_async.notes import _biased_notes, _rounds_figure, _sampling_notes, _table3_notes
from papers.vandijk_async.paper import BIASED, PAPER, PROBLEMS, SAMPLING, TABLE3_SIZES, TIMING
from papers.vandijk_async.programs import _biased_programs, _build, _sampling_programs, _size_label, _table3_programs


VARIANTS = {
    "mean": {"settings": {"aggregation": "mean"},
             "config": {"note": "the server applies each client's update divided by n (FedAvg-style) instead of "
                                "the paper's sum: tests whether the paper's numbers fit a mean"}},
    "no-delay": {"settings": {"timing": {"speed_spread": 0.0, "mean_delay": 0.0}},
                 "config": {"note": "equal speeds, no delays: synchronous rounds of the same protocol"}},
    "sequential": {"settings": {"clients": 1},
                   "config": {"note": "one client holding all the data: the iterations as one SGD trajectory, the "
                                      "Hogwild ideal the paper's sum stands for"}},
    "delayed": {"settings": {"form": "delayed"},
                "config": {"note": "delayed-gradient SGD (jaxfl.algorithms.delayed_sgd): one trajectory whose steps of "
                                   "round i all read the model at the start of round i - 1, the largest delay the "
                                   "paper's recursion allows at lookahead 1; the same clients' draws and sum"}},
    "delayed-sync": {"settings": {"form": "delayed", "timing": {"lookahead": 0}},
                     "config": {"note": "delayed-gradient SGD at lookahead 0: every step of round i at the round's "
                                        "start (synchronous large-batch SGD; the delayed form without delays)"}},
}
"""Variants of the non-DP studies: the server's aggregation and the timing model (what the paper leaves open)."""


def _table3(name: str, problems: tuple, init, quick_problem: str, note: str, clients: int = 5) -> Study:
    return Study(
        name=name,
        description=f"van Dijk et al. Table 3 ({note}): asynchronous FL with constant sample sizes, 20,000 iterations "
                    f"over {clients} clients, eta 0.0025",
        data=_trial, data_per_panel=True,
        families=(Family("async", "async SGD", _build, _table3_programs, accountant=None,
                         describe=lambda study, panel, trial, program, row: {
                             "algorithm": _size_label(int(row["sample_size"]))}),),
        evaluate=evaluate, init=init,
        report=Report(table=Table(columns=(), metric="test_accuracy", metric_name="test accuracy",
                                  references=tuple(_size_label(s) for s in TABLE3_SIZES), digits=4,
                                  reference_value="mean_std"),
                      header="{name}, {panel}: test accuracy per sample size, {trials} trial(s) ({form} form)",
                      notes=_table3_notes),
        panels=tuple(Panel(PROBLEMS[p], (("problem", p),)) for p in problems), select=Select(score=None),
        trials=3, seed=lambda trial, panel, rep: trial,
        settings={"clients": clients, "iterations": 20_000, "sizes": TABLE3_SIZES, "learning_rate": 0.0025,
                  "test_records": None},
        config={"paper": PAPER, "timing": TIMING, "step_size": "constant 0.0025 per iteration"},
        quick={"trials": 1, "panels": (Panel(PROBLEMS[quick_problem], (("problem", quick_problem),)),),
               "settings": {"iterations": 1_000, "sizes": (50, 100), "records_per_client": 400, "test_records": 1_000},
               "config": {"note": "quick form: one panel, 1,000 iterations, sizes 50 and 100, 400 records per client"}},
        variants=VARIANTS)


TABLE3_A9A = register(_table3("vandijk-async/table3-a9a", ("a9a-strong", "a9a-plain"),
                              lambda seed: init_linear(loaders.LIBSVM_FEATURES["a9a"]), "a9a-strong",
                              "a9a, strongly and plain convex logistic regression"))
TABLE3_COVTYPE = register(_table3("vandijk-async/table3-covtype", ("covtype-strong", "covtype-plain"),
                                  lambda seed: init_linear(loaders.COVTYPE_FEATURES), "covtype-strong",
                                  "covtype.binary, strongly and plain convex logistic regression; fetched from UCI "
                                  "where a network exists"))
TABLE3_MNIST = register(_table3(
    "vandijk-async/table3-mnist", ("mnist-nonconvex",),
    _lenet_init, "mnist-nonconvex", "MNIST, LeNet-5", clients=4))






def _sampling_study(dataset: str, figure: str, init) -> Study:
    methods = tuple(f"50 i^{c:g}" for c in SAMPLING["exponents"]) + ("50 i / ln i",)
    return Study(
        name=f"vandijk-async/sampling-{dataset}",
        description=f"van Dijk et al. E.2.2 ({figure}): rounds and accuracy by sample-size method "
                    f"(50 i^c, 50 i / ln i) on {dataset}"
                    + ("; fetched from UCI where a network exists" if dataset == "covtype" else ""),
        data=_trial, data_per_panel=True,
        families=(Family("async", "async SGD", _build, _sampling_programs, accountant=None,
                         describe=lambda study, panel, trial, program, row: {"algorithm": row["method"]}),),
        evaluate=evaluate, evaluate_on=latest_broadcast, init=init,
        report=Report(table=Table(columns=(), metric="test_accuracy", metric_name="test accuracy", digits=4,
                                  references=methods, reference_value="mean_std"),
                      header="{name}, {panel}: {trials} trial(s) ({form} form)", notes=_sampling_notes(figure),
                      rounds_figure=_rounds_figure(methods, f"van Dijk et al. {figure} ({{panel}})")),
        panels=tuple(Panel(PROBLEMS[f"{dataset}-{c}"], (("problem", f"{dataset}-{c}"),)) for c in ("strong", "plain")),
        select=Select(score=None), trials=3, seed=lambda trial, panel, rep: trial,
        settings={"clients": 5, "sampling": SAMPLING, "test_records": None},
        config={"paper": PAPER, "timing": TIMING, "sampling": dict(SAMPLING)},
        quick={"trials": 1, "panels": (Panel(PROBLEMS[f"{dataset}-strong"], (("problem", f"{dataset}-strong"),)),),
               "settings": {"sampling": {**SAMPLING, "iterations": 1_000, "exponents": (0.0, 1.0)},
                            "records_per_client": 400, "test_records": 1_000},
               "config": {"note": "quick form: strongly convex only, 1,000 iterations, c in {0, 1} and i / ln i"}},
        variants=VARIANTS)


SAMPLING_STUDY = register(_sampling_study("a9a", "Fig. 3-4", _linear_init("a9a")))
SAMPLING_COVTYPE = register(_sampling_study("covtype", "Fig. 5",
                                            lambda seed: init_linear(loaders.COVTYPE_FEATURES)))


def _biased(name: str, problems: tuple, clients: int, groups: tuple, iterations: int, init, note: str) -> Study:
    panels = tuple(Panel(f"{PROBLEMS[p]}, {split}", (("problem", p), ("split", split)))
                   for p in problems for split in ("biased", "unbiased"))
    return Study(
        name=name, description=f"van Dijk et al. E.2.4 ({note}): biased (each client its own digits) against "
                                "unbiased clients",
        data=_trial, data_per_panel=True,
        families=(Family("async", "async SGD", _build, _biased_programs, accountant=None,
                         describe=lambda study, panel, trial, program, row: {"algorithm": row["split"]}),),
        evaluate=evaluate, init=init,
        report=Report(table=Table(columns=(), metric="test_accuracy", metric_name="test accuracy", digits=4,
                                  references=("biased", "unbiased"), reference_value="mean_std"),
                      header="{name}, {panel}: {trials} trial(s) ({form} form)", notes=_biased_notes),
        panels=panels, select=Select(score=None), trials=3, seed=lambda trial, panel, rep: trial,
        settings={"clients": clients, "digit_groups": groups, "iterations": iterations, "test_records": None},
        config={"paper": PAPER, "timing": TIMING, "biased": dict(BIASED), "digit_groups": [list(g) for g in groups]},
        quick={"trials": 1, "panels": panels[:2], "settings": {"iterations": 1_000, "test_records": 1_000},
               "config": {"note": "quick form: the first problem only, 1,000 iterations"}},
        variants={k: v for k, v in VARIANTS.items() if k != "sequential"})   # the split fixes the clients


BIASED_STUDIES = {
    "mnist01": register(_biased("vandijk-async/biased-mnist01", ("mnist01-strong", "mnist01-plain"), 2, ((0,), (1,)),
                                10_000, lambda seed: init_linear(784), "Fig. 2, 10: logistic regression, MNIST 0 vs 1, "
                                "2 clients, 10,000 iterations")),
    "mnist": register(_biased("vandijk-async/biased-mnist", ("mnist-nonconvex",), 4,
                              ((0, 1, 2), (3, 4, 5), (6, 7), (8, 9)),
                              20_000, lambda seed: nets.init_params(nets.classic_lenet5, jax.random.PRNGKey(seed),
                                                                    nets.IMAGE28_INPUT_SHAPE),
                              "Fig. 11: LeNet-5, 4 clients with digits {0,1,2}, {3,4,5}, {6,7}, {8,9}, "
                              "20,000 iterations")),
}





