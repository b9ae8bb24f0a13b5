"""van Dijk et al.'s DP studies: Fig. 12 / 1b (w8a) and Fig. 13 (MNIST), increasing against constant sample sizes at the
same noise, and App. D.3.2's Examples 1-5 (the parameter selection, computed)."""
from __future__ import annotations



from jaxfl.algorithms.async_dp import latest_broadcast
from jaxfl.data import loaders
from jaxfl.studies.registry import register
from jaxfl.studies.report import Column, Report, Table
from jaxfl.studies.spec import Family, Panel, Program, Select, Study, Trial
from jaxfl.models.linear import init_linear
from papers.vandijk_async.data import _lenet_init, _trial, evaluate
from papers.vandijk_async.notes import EXAMPLE_COLUMNS, _dp_notes, _rounds_figure
from papers.vandijk_async.paper import DP, EXAMPLES, INCREASING, PAPER, PROBLEMS, TIMING
from papers.vandijk_async.programs import _dp_family, _dp_names, _example_row


def _dp_study(name: str, problems: tuple, init, description: str, settings: dict, quick_note: str,
              trials: int) -> Study:
    return Study(
        name=name, description=description, data=_trial, data_per_panel=True,
        families=(_dp_family(None),),
        evaluate=evaluate, evaluate_on=latest_broadcast, init=init,
        report=Report(table=Table(columns=tuple(Column(n.split(",", 1)[1].strip() if n.startswith(INCREASING)
                                                       else "const. s = 16," + n.split(",", 1)[1], n, "mean_std")
                                                for n in _dp_names()[0]),
                                  metric="test_accuracy", metric_name="test accuracy", digits=4,
                                  references=_dp_names()[1], reference_value="mean_std"),
                      header="{name}, {panel}: test accuracy, {trials} trial(s) ({form} form); first column: "
                             "increasing s", notes=_dp_notes,
                      rounds_figure=_rounds_figure(_dp_names()[0] + _dp_names()[1],
                                                   "van Dijk et al. Fig. " + ("13" if problems[0].startswith("mnist")
                                                                       else "1b / 12") + " ({panel})")),
        panels=tuple(Panel(PROBLEMS[p], (("problem", p),)) for p in problems), select=Select(score=None),
        trials=trials, seed=lambda trial, panel, rep: trial,
        settings={"clients": 5, "k_per_client": DP["k_per_client"], "test_records": None, **settings},
        config={"paper": PAPER, "timing": TIMING, "dp": DP, "example_3": "q, m of App. D.3.2 Example 3; rounds "
                "until K = 25,000 per client (183: the paper's T = 195 holds 28,215, digest §11.8)"},
        quick={"trials": 1, "panels": (Panel(PROBLEMS[problems[0]], (("problem", problems[0]),)),),
               "settings": {"k_per_client": 400, "records_per_client": 2_000, "test_records": 1_000},
               "config": {"note": f"quick form: {quick_note}, K = 400 per client, 2,000 records per client"}},
        variants={"stated": {
            "settings": {"client_sampling": "poisson", "delta": DP["delta"]}, "families": (_dp_family("rdp"),),
            "config": {"note": "the stated client (async_sgd(sampling='poisson')): every gradient of a round at its "
                               "start point, a Poisson sample of rate s_i / N_c with the clients' record counts public "
                               "(records=N_c: add/remove-one); epsilon_spent is jaxfl's statement "
                               "(the ledger over each client's rounds, worst client, at delta 5.5e-8)"}}})


DP_STUDY = register(_dp_study(
    "vandijk-async/dp", ("w8a-strong", "w8a-plain"), lambda seed: init_linear(loaders.LIBSVM_FEATURES["w8a"]),
    "van Dijk et al. Fig. 12 / 1b: DP asynchronous FL on w8a, increasing sample sizes (Example 3) against constant "
    "s = 16 at the same sigma 8, C 0.1, K = 25,000 per client", {}, "strongly convex only", trials=3))


DP_MNIST_STUDY = register(_dp_study(
    "vandijk-async/dp-mnist", ("mnist-nonconvex",), _lenet_init,
    "van Dijk et al. Fig. 13: DP asynchronous FL on MNIST (LeNet-5), increasing sample sizes (Example 3) against "
    "constant s = 16 at the same sigma 8, C 0.1, K = 25,000 per client, N_c = 10,000", {"records_per_client": 10_000},
    "LeNet-5", trials=2))


EXAMPLES_STUDY = register(Study(
    name="vandijk-async/examples",
    description="van Dijk et al. App. D.3.2 Examples 1-5: the parameter selection beside the paper's numbers, and the "
                "direct moments and tight epsilons of the same rounds; computed, no training",
    data=lambda study, t, panel=None: Trial(None, None, None), data_per_panel=True, evaluate=None, init=None,
    families=(Family("selection", "selection", _example_row,
                     lambda study, panel, trial: [Program((("example", panel["example"]),),
                                                          [{"epsilon": EXAMPLES[panel["example"]][1]}], 0)],
                     runner="compute", accountant=None),),
    panels=tuple(Panel(name, (("example", name),)) for name in EXAMPLES), select=Select(score=None),
    report=Report(table=Table(columns=EXAMPLE_COLUMNS),
                  header="vandijk-async/examples, {panel}: s_0 = 16, p = 1; the row's epsilon is the example's "
                         "target"),
    config={"paper": PAPER, "examples": {k: list(v[:6]) for k, v in EXAMPLES.items()}},
    quick={}))
