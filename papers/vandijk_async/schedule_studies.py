"""van Dijk et al.'s step- and sample-size schedule studies: constant against diminishing step sizes with increasing
sample sizes (E.2.3: Fig. 1a, 6, 7, 8) and constant step sizes beside them (Fig. 9b)."""
from __future__ import annotations



from jaxfl.algorithms.async_dp import latest_broadcast
from jaxfl.studies.registry import register
from jaxfl.studies.report import Report, Table
from jaxfl.studies.spec import Family, Panel, Select, Study
from papers.vandijk_async.data import _linear_init, _trial, evaluate
from papers.vandijk_async.notes import _diminishing_notes, _rounds_figure, _step_size_notes
from papers.vandijk_async.paper import CONSTANT_LABEL, DIMINISHING, PAPER, PROBLEMS, STEP_SIZE_RATES, TIMING
from papers.vandijk_async.programs import (_build, _constant_rate_label, _diminishing_programs, _increasing_label,
                                           _step_size_programs)
from papers.vandijk_async.studies import VARIANTS
from papers.vandijk_async.data import _lenet_init


def _diminishing(dataset: str, convexities=("strong", "plain"), init=None, figures="Fig. 1a, 6, 7",
                 step_sizes: bool = False) -> Study:
    """E.2.3 on ``dataset``; ``step_sizes``: Fig. 9's form (constant against diminishing steps, both on the
    increasing sizes) instead of Fig. 1a / 6-8's (constant steps and sizes against diminishing and increasing)."""
    increasing = (_increasing_label("iterations"), _increasing_label("rounds"))
    constants = tuple(map(_constant_rate_label, STEP_SIZE_RATES)) if step_sizes else (CONSTANT_LABEL,)
    labels = constants + increasing
    first = f"{dataset}-{convexities[0]}"
    return Study(
        name=f"vandijk-async/{'step-sizes' if step_sizes else 'diminishing'}-{dataset}",
        description=f"van Dijk et al. E.2.3 ({figures}) on {dataset}: " + (
            "constant step sizes 0.01 and 0.005 against diminishing ones from eta_0 = 0.1, all with increasing "
            "sample sizes" if step_sizes else
            "constant step and sample size (20 rounds) against diminishing steps with increasing sample sizes "
            "(9 rounds)") + ", 20,000 iterations over 5 clients",
        data=_trial, data_per_panel=True,
        families=(Family("async", "async SGD", _build, _step_size_programs if step_sizes else _diminishing_programs,
                         accountant=None,
                         describe=lambda study, panel, trial, program, row: {"algorithm": row["setting"]}),),
        evaluate=evaluate, evaluate_on=latest_broadcast, init=init or _linear_init(dataset),
        report=Report(table=Table(columns=(), metric="test_accuracy", metric_name="test accuracy", digits=4,
                                  references=labels, reference_value="mean_std"),
                      header="{name}, {panel}: {trials} trial(s) ({form} form)",
                      notes=_step_size_notes if step_sizes else _diminishing_notes,
                      rounds_figure=_rounds_figure(labels, f"van Dijk et al. {figures} ({{panel}})")),
        panels=tuple(Panel(PROBLEMS[f"{dataset}-{c}"], (("problem", f"{dataset}-{c}"),)) for c in convexities),
        select=Select(score=None), trials=3, seed=lambda trial, panel, rep: trial,
        settings={"clients": 5, "diminishing": DIMINISHING, "test_records": None,
                  **({"constant_rates": STEP_SIZE_RATES} if step_sizes else {})},
        config={"paper": PAPER, "timing": TIMING, "diminishing": {k: v for k, v in DIMINISHING.items()}},
        quick={"trials": 1, "panels": (Panel(PROBLEMS[first], (("problem", first),)),),
               "settings": {"diminishing": {**DIMINISHING, "iterations": 1_000, "constant_size": 50,
                                            "increasing_slope": 10},
                            "records_per_client": 400, "test_records": 1_000},
               "config": {"note": f"quick form: {PROBLEMS[first]} only, 1,000 iterations, "
                                  + ("s = 10 i" if step_sizes else "s = 50 against 10 i")}},
        variants=VARIANTS)


DIMINISHING_STUDIES = {d: register(_diminishing(d)) for d in ("phishing", "ijcnn1")}
DIMINISHING_STUDIES["mnist"] = register(_diminishing("mnist", ("nonconvex",), _lenet_init, "Fig. 8"))


STEP_SIZES_W8A = register(_diminishing("w8a", ("strong",), figures="Fig. 9b", step_sizes=True))
