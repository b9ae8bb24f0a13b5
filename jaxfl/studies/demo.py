"""``jaxfl demo``: DP and non-DP federated logistic regression on the bundled breast-cancer data.

Five silos (iid split of the 455 training records), logistic regression, 60 rounds: non-private
minibatch SGD and FedAvg, and ISRL-DP noisy minibatch SGD (record-level DP for each silo's own
transcript; Poisson sampling, per-example clipping) at several epsilons with delta_i = 1/n_i^2. Noise
multipliers are calibrated by the RDP accountant; the epsilon printed is what the accountant reports for
the rounds actually run (the max over silos). Each setting runs all seeds as one vmapped program; the DP
setting runs all epsilons in one program too. A study (:mod:`jaxfl.studies.spec`):
this module holds the demo's settings alone.
"""
from __future__ import annotations

import dataclasses
import functools
import time

import jax.numpy as jnp
import numpy as np
import optax

from jaxfl.accounting import noise_multiplier_for
from jaxfl.algorithms import local_sgd, minibatch_sgd
from jaxfl.data import iid, load_breast_cancer, standardize
from jaxfl.studies import registry, report, runner
from jaxfl.studies.report import Column, Curve, Figure, Report, Table
from jaxfl.studies.spec import Family, Program, Select, Study, Trial
from jaxfl.extras import require
from jaxfl.models import binary_accuracy, init_linear, logistic_loss

SILOS, ROUNDS, RATE, CLIP = 5, 60, 0.2, 1.0
SERVER_LR, LOCAL_LR, LOCAL_STEPS = 1.0, 0.2, 5
EXPECTED_BATCH = RATE * 91
DP, MB, FEDAVG = "ISRL-DP minibatch SGD", "minibatch SGD (non-private)", "FedAvg / local SGD (non-private)"


def _trial(study: Study, seed: int) -> Trial:
    x, y = load_breast_cancer()
    split = require("sklearn.model_selection").train_test_split
    x_tr, x_te, y_tr, y_te = split(x, y, test_size=0.2, random_state=seed, stratify=y)
    x_tr, x_te, _ = standardize(x_tr, x_te)
    data = iid(x_tr, y_tr, SILOS, seed=seed)
    return Trial(data, (jnp.asarray(x_te, jnp.float32), jnp.asarray(y_te)), 1.0 / np.asarray(data.counts, float) ** 2,
                 {"test_records": int(len(y_te))})


def _evaluate(params, test):
    return {"test_accuracy": binary_accuracy(params, *test)}


def _build(name: str, static: dict, noise_multiplier=0.0, epsilon=0.0):
    if name == "fedavg":
        return local_sgd(logistic_loss, client_opt=optax.sgd(LOCAL_LR), local_steps=LOCAL_STEPS, sampling_rate=RATE)
    # add/remove-one: each silo's clipped sum is divided by a constant fixed before the data are split (the
    # expected sample of a silo of 455 / 5 = 91 training records), never by the silo's own count
    private = {"clip_norm": CLIP, "noise_multiplier": noise_multiplier,
               "expected_batch_size": EXPECTED_BATCH} if name == "dp" else {}
    return minibatch_sgd(logistic_loss, server_opt=optax.sgd(SERVER_LR), sampling_rate=RATE, **private)


def _programs(name: str):
    def programs(study: Study, panel, trial: Trial):
        if name != "dp":
            return [Program((), [{}], ROUNDS)]
        delta = float(np.min(trial.deltas))
        return [Program((), [{"epsilon": e, "noise_multiplier": noise_multiplier_for(e, RATE, ROUNDS, delta)}
                             for e in study["epsilons"]], ROUNDS)]

    return programs


def _family(name: str, label: str) -> Family:
    return Family(name, label, functools.partial(_build, name), _programs(name), accountant="rdp")


STUDY = registry.register(Study(
    name="demo", description="the jaxfl demo: DP vs non-DP federated logistic regression on breast cancer",
    data=_trial, families=(_family("mbsgd", MB), _family("fedavg", FEDAVG), _family("dp", DP)),
    evaluate=_evaluate, init=lambda seed: init_linear(30), select=Select(score=None), reps=5,
    seed=lambda trial, panel, rep: rep, settings={"epsilons": (0.5, 1.0, 2.0, 4.0, 8.0)},
    report=Report(
        table=Table(columns=(Column(DP, DP, "mean_std"), Column("epsilon spent", DP, "certified"),
                             Column("noise multiplier", DP, "field:noise_multiplier")),
                    metric="test_accuracy", metric_name="test accuracy", over="seeds", reference_value="mean_std",
                    references=(MB, FEDAVG)),
        figure=Figure(curves=(Curve(DP, {"marker": "o"}), Curve(MB, {"color": "gray", "linestyle": "--"}, line=True),
                              Curve(FEDAVG, {"color": "gray", "linestyle": ":"}, line=True)),
                      title="jaxfl demo: breast cancer, 5 silos", ylabel="test accuracy", metric="test_accuracy",
                      bands=False, columns=1, xlabel="epsilon (per silo, delta_i = 1/n_i^2)"),
        header="jaxfl demo ({form} form): federated logistic regression, 5 silos of the breast-cancer data, 60 rounds, "
               "{reps} seeds per setting; ISRL-DP: each silo's transcript is (eps, delta_i = 1/n_i^2)-DP for its own "
               "records, add/remove-one (RDP accountant, Poisson sampling rate 0.2, each silo's clipped sum divided by "
               "the fixed expected batch size 18.2, clip 1.0); test accuracy mean ± std over seeds"),
    config={"dataset": "breast_cancer (scikit-learn)", "silos": SILOS, "rounds": ROUNDS, "sampling_rate": RATE,
            "expected_batch_size": EXPECTED_BATCH, "neighbouring_relation": "add_or_remove_one", "clip_norm": CLIP,
            "server_lr": SERVER_LR, "local_lr": LOCAL_LR, "local_steps": LOCAL_STEPS,
            "delta": "1/n_i^2 per silo", "accountant": "rdp"},
    quick={"reps": 2, "settings": {"epsilons": (1.0, 8.0)}}))


def main(quick: bool = False, seeds: int | None = None, out_dir=None) -> None:
    """Runs the demo, prints its table (and writes its results under ``out_dir`` when given).

    Example (what ``jaxfl demo --quick`` runs; about 20 s):
      >>> main(quick=True)                                        # doctest: +SKIP
    """
    t0 = time.perf_counter()
    form = STUDY.form_of(quick)
    if seeds is not None:
        form = dataclasses.replace(form, reps=int(seeds))
    outcome = runner.run(form, log=lambda *_: None)
    for row in outcome.rows:
        if row["private"] and row["epsilon_spent"] > row["epsilon"] + 1e-9:
            raise AssertionError(f"calibrated run spent epsilon {row['epsilon_spent']} > target {row['epsilon']}")
    if out_dir:
        report.write(outcome, out_dir)
    print(report.summary(report.document(outcome), STUDY.report))
    print(f"\n({time.perf_counter() - t0:.1f} s in all; step sizes fixed in advance, not tuned on the test set"
          f"{'; results in ' + str(out_dir) if out_dir else ''})")

