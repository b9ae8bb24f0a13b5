"""Seed 001's studies (Huang et al. 2023, §4): ``jaxfl reproduce huang-jdp/{tuning,table1}-{mnist,fashion-mnist}``.

Per number of owners ``n`` (one panel each, Table 3's local ``E`` and rounds ``T``), the paper's
regimes as one algorithm (:func:`jaxfl.algorithms.personalized`) with different partitions of
:class:`jaxfl.models.nets.TwoHeadCNN`'s parameters:

* per-silo training: every parameter private, no noise (nothing leaves an owner);
* collaboration without DP: every parameter shared (FedAvg), no noise;
* collaboration with full DP: every parameter shared, local DP-SGD on the whole model (clip 15);
* collaboration with joint DP: ``fc1`` private per owner, local DP-SGD on the shared part only, the shared
  gradients taken at the owner's own ``fc1`` -- the paper's method. **jaxfl states no privacy for it**
  (:func:`jaxfl.algorithms.personalized`, digest §3.1's caveat); its noise is calibrated with the paper's
  accounting (the shared part's sampled Gaussian events, as for full DP) and the rows record that epsilon
  under ``privacy.paper_accounting_epsilon``, with ``epsilon_spent`` inf;
* joint DP, stated: the same with the shared gradients taken at ``fc1``'s initial (public) values, so the
  shared part's events are a guarantee (``epsilon_spent`` is what the accountant certifies).

Choices the paper leaves open (digest §5), made here and recorded in ``results.json``:

* data: ``N = 10,000`` records of the official training set over ``n`` owners of ``floor/ceil(N / n)``
  records, each owner holding 8 of the 10 classes chosen at random, its quota split evenly over them
  (:func:`jaxfl.data.partition.class_limited`); each owner's test split is drawn from the official test set
  the same way (5,000 records in all, so that every class has enough), and an owner's model is scored on
  its own split; the reported accuracy is the unweighted mean over owners;
* local training: Table 3's ``E`` read as local *iterations*, as the paper's text says ("E (the local
  iterations) and T (the global epochs)"; its Table 3 header says "Local epoch"). Read as epochs (variant
  ``epochs``), the runs take ``1 / q`` times the steps (10-80x the compute here) and, at eps = 1, a noise
  multiplier calibrated over that many more steps;
* DP placement: local DP-SGD on each owner (digest §5.3 reading (A)): Poisson sampling at rate
  ``q = min(1, B / (N / n))`` (``B = 32`` expected records), ``E`` local steps per round, per-example
  clipping to 15, noise ``N(0, (z 15)^2)`` per step, FedAvg of the shared deltas; ``z`` is the smallest
  noise multiplier whose ``T E`` steps are (eps, 1e-4)-DP for one record (RDP accountant; owners' data are
  disjoint);
* optimiser: plain SGD at a learning rate chosen by ``huang-jdp/tuning-DATASET``: FedAvg without DP (the
  no-DP regime only) over a learning-rate grid, scored on a validation split held out from the training
  owners' records (20 % of each owner's records; never the test split), at ``n`` = 16 and 128; the rate
  with the lowest mean validation error over those panels is used for every regime and ``n``.

Quick forms (CI): ``n`` in {4, 16}, 1,000 training records, one local iteration, two rounds, one seed, and
a fixed learning rate (not tuned).
"""
from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxfl.accounting.calibrate import noise_multiplier_for
from jaxfl.algorithms import personalized
from jaxfl.data import loaders
from jaxfl.data.partition import choose_silo_classes, class_limited, train_test_split_per_silo
from jaxfl.experiments.registry import register
from jaxfl.experiments.report import Column, Report, Table
from jaxfl.experiments.study import Family, Panel, Program, Select, Study, Trial
from jaxfl.models import nets

PAPER = ("Huang, Jiang, Liu, Mahdian, Mao & Mirrokni, Learning across Data Owners with Joint Differential Privacy "
         "(seed 001), §4")
PER_SILO, NO_DP, FULL, JOINT, STATED = ("Per-silo training", "Collab. without DP", "Collab. w/ full-DP",
                                        "Collab. w/ joint-DP", "Joint-DP, stated (shared grads at initial fc1)")
TABLE3 = {4: (20, 10), 16: (10, 10), 64: (10, 10), 128: (5, 20), 256: (5, 20), 512: (5, 20)}
"""Table 3: owners ``n`` -> (local ``E``, global rounds ``T``); ``E`` is read as local iterations (see above)."""
CLIP, DELTA, CLASSES_PER_OWNER, BATCH = 15.0, 1e-4, 8, 32
REPO = Path(__file__).resolve().parents[2]

# Table 1 (5 runs, m = r): per-silo, collab. without DP, full-DP (eps 1), joint-DP (eps 1).
TABLE1 = {
    "mnist": {4: ("0.9445 ± 0.0069", "0.9602 ± 0.0017", "0.4444 ± 0.0844", "0.4658 ± 0.0307"),
              16: ("0.9457 ± 0.0038", "0.9468 ± 0.0014", "0.2926 ± 0.0239", "0.3207 ± 0.0690"),
              64: ("0.9209 ± 0.0010", "0.9402 ± 0.0037", "0.6982 ± 0.0314", "0.7651 ± 0.0401"),
              128: ("0.8639 ± 0.0010", "0.9376 ± 0.0043", "0.8081 ± 0.0240", "0.8169 ± 0.0160"),
              256: ("0.7678 ± 0.0015", "0.9196 ± 0.0028", "0.7399 ± 0.0324", "0.7835 ± 0.0136"),
              512: ("0.7240 ± 0.0001", "0.9326 ± 0.0093", "0.6023 ± 0.0621", "0.7423 ± 0.0832")},
    "fashion-mnist": {4: ("0.8888 ± 0.0253", "0.8759 ± 0.0042", "0.4560 ± 0.0142", "0.4533 ± 0.0121"),
                      16: ("0.8575 ± 0.0135", "0.8301 ± 0.0078", "0.4044 ± 0.0473", "0.4205 ± 0.0539"),
                      64: ("0.8498 ± 0.0041", "0.8232 ± 0.0088", "0.5354 ± 0.0249", "0.5564 ± 0.0207"),
                      128: ("0.7506 ± 0.0017", "0.7676 ± 0.0123", "0.6593 ± 0.0137", "0.6719 ± 0.0272"),
                      256: ("0.6489 ± 0.0004", "0.8010 ± 0.0018", "0.6749 ± 0.0160", "0.6908 ± 0.0145"),
                      512: ("0.6355 ± 0.0007", "0.8242 ± 0.0069", "0.6484 ± 0.0227", "0.6667 ± 0.0062")},
}


# ------------------------------------------------------------------------------------------------
# Data


@functools.lru_cache(maxsize=4)
def _images(dataset: str, split: str):
    load = {"mnist": loaders.load_mnist, "fashion-mnist": loaders.load_fashion_mnist}[dataset]
    x, y = load(split)
    return (np.asarray(x, np.float32) / np.float32(255.0))[..., None], np.asarray(y, np.int32)


def owners(dataset: str, num_owners: int, *, seed: int, total: int = 10_000, test_total: int = 5_000,
           classes_per_owner: int = CLASSES_PER_OWNER):
    """Seed 001's owners: ``(train, test, classes)``, :class:`jaxfl.data.FederatedData` over ``num_owners``
    silos of ``floor/ceil(total / n)`` training and ``floor/ceil(test_total / n)`` test records, each owner's
    from its own ``classes_per_owner`` classes (``classes: [n, classes_per_owner]``)."""
    classes = choose_silo_classes(num_owners, np.arange(10), classes_per_owner, seed=seed)
    x, y = _images(dataset, "train")
    xt, yt = _images(dataset, "test")
    return (class_limited(x, y, classes, total=total, seed=seed + 1),
            class_limited(xt, yt, classes, total=test_total, seed=seed + 2), classes)


def _trial(study: Study, t: int, panel: Panel) -> Trial:
    n = panel["owners"]
    train, test, classes = owners(study["dataset"], n, seed=1000 * t + n, total=study["records"],
                                  test_total=study["test_records"])
    if study["validation"]:  # tuning: score on records held out from the training owners, never on the test split
        train, test = train_test_split_per_silo(train, study["validation"], seed=1000 * t + n + 3)
    info = {"owners": n, "train_records": int(np.sum(np.asarray(train.counts))),
            "eval_records": int(np.sum(np.asarray(test.counts))), "eval_split": "validation" if study["validation"]
            else "test", "classes_per_owner": int(classes.shape[1]), "owner_classes": classes.tolist()}
    return Trial(train, {"test": test}, DELTA, info)


# ------------------------------------------------------------------------------------------------
# Evaluation: each owner's own model on its own split


def evaluate(models, eval_data) -> dict:
    """``{"test_accuracy", "test_error"}``: the unweighted mean over owners (with records) of owner ``j``'s
    model (leaves ``[n, ...]``) on owner ``j``'s evaluation records."""
    test = eval_data["test"]

    def owner(params, x, y, count):
        correct = jnp.argmax(nets.two_head_cnn.apply(params, x), axis=-1) == y
        return jnp.sum(correct * (jnp.arange(x.shape[0]) < count)) / jnp.maximum(count, 1)

    accuracy = jax.vmap(owner)(models, test.x, test.y, test.counts)
    real = (test.counts > 0).astype(jnp.float32)
    mean = jnp.sum(accuracy * real) / jnp.sum(real)
    return {"test_accuracy": mean, "test_error": 1.0 - mean}


# ------------------------------------------------------------------------------------------------
# The regimes


REGIMES = {  # family -> (label, private layers or "all", noise_on, shared_gradient_at, private?)
    "per_silo": (PER_SILO, "all", "all", "current", False),
    "no_dp": (NO_DP, (), "all", "current", False),
    "full_dp": (FULL, (), "all", "current", True),
    "joint_dp": (JOINT, ("fc1",), "shared", "current", True),
    "joint_dp_stated": (STATED, ("fc1",), "shared", "initial", True),
}


def _layer(path) -> str:
    return str(getattr(path[1], "key", path[1])) if len(path) > 1 else ""


def _shared(private_layers):
    if private_layers == "all":
        return lambda path, leaf: False
    return lambda path, leaf: _layer(path) not in private_layers


def _build(regime: str, static: dict, *, epsilon, learning_rate, noise_multiplier=0.0):
    del epsilon  # the noise multiplier carries it
    _, private_layers, noise_on, at, private = REGIMES[regime]
    return personalized(nets.two_head_loss, shared=_shared(private_layers), client_opt=optax.sgd(learning_rate),
                        local_steps=static["local_steps"], sampling_rate=static["rate"], chunk=static["chunk"],
                        clip_norm=CLIP if private else math.inf, noise_multiplier=noise_multiplier if private else 0.0,
                        noise_on=noise_on, shared_gradient_at=at)


def schedule(study: Study, n: int) -> dict:
    """Panel ``n``'s local training: Table 3's ``E`` and ``T``, the Poisson rate ``q`` and the local steps per
    round: ``E`` (``local_unit="iterations"``) or ``round(E / q)`` (``"epochs"``: ``E`` passes in expectation)."""
    local, rounds = study["table3"][n]
    rate = min(1.0, study["batch"] * n / study["records"])
    steps = local if study["local_unit"] == "iterations" else max(1, round(local / rate))
    records = math.ceil(study["records"] / n)
    mean = rate * records  # gradients in chunks of the sample's mean + 3 std: one pass in almost every step
    chunk = min(records, 8 * math.ceil((mean + 3 * math.sqrt(mean * (1 - rate))) / 8))
    return {"local": local, "rounds": rounds, "rate": rate, "local_steps": steps, "chunk": chunk}


def _programs(regime: str):
    def programs(study: Study, panel: Panel, trial: Trial):
        s = schedule(study, panel["owners"])
        static = (("local_steps", s["local_steps"]), ("rate", s["rate"]), ("chunk", s["chunk"]))
        columns = {"table3_E": s["local"], "local_unit": study["local_unit"], "rounds": s["rounds"],
                   "sampling_rate": s["rate"], "local_steps": s["local_steps"]}
        rates = study["learning_rates"]() if callable(study["learning_rates"]) else study["learning_rates"]
        if not REGIMES[regime][4]:
            grid = {"epsilon": [0.0], "learning_rate": list(rates)}
        else:
            steps = s["rounds"] * s["local_steps"]
            grid = [{"epsilon": eps, "learning_rate": lr,
                     "noise_multiplier": noise_multiplier_for(eps, s["rate"], steps, DELTA)}
                    for eps in study["epsilons"] for lr in rates]
        return [Program(static, grid, s["rounds"], columns=columns)]

    return programs


def _describe(regime: str):
    def describe(study: Study, panel, trial: Trial, program: Program, row: dict) -> dict:
        if regime != "joint_dp" or not row["private"]:
            return {}
        s = schedule(study, panel["owners"])
        # The epsilon the paper's accounting gives this run (its calibration target); not a guarantee.
        return {"privacy": {"stated": False, "paper_accounting_epsilon": row["epsilon"],
                            "paper_accounting_steps": s["rounds"] * s["local_steps"]}}

    return describe


def _families(regimes):
    return tuple(Family(name, REGIMES[name][0], functools.partial(_build, name), _programs(name),
                        accountant="rdp" if REGIMES[name][4] else None, describe=_describe(name))
                 for name in regimes)


# ------------------------------------------------------------------------------------------------
# Learning rate from the tuning study


def tuned_learning_rate(dataset: str, results_dir=None) -> float:
    """The learning rate ``huang-jdp/tuning-DATASET`` chose: the lowest mean validation error of the no-DP
    regime over its panels (read from its committed ``results.json``)."""
    path = Path(results_dir or REPO / "results" / "huang-jdp" / f"tuning-{dataset}") / "results.json"
    if not path.exists():
        raise ValueError(f"no tuning results at {path}: run `jaxfl reproduce huang-jdp/tuning-{dataset}` first")
    runs = json.loads(path.read_text())["runs"]
    errors: dict = {}
    for r in runs:
        errors.setdefault(float(r["learning_rate"]), []).append(float(r["metrics"]["test_error"]))
    return min(errors, key=lambda lr: (np.mean(errors[lr]), lr))


def _tuning_notes(doc: dict) -> str:
    errors: dict = {}
    for r in doc["runs"]:
        errors.setdefault(float(r["learning_rate"]), []).append(float(r["metrics"]["test_error"]))
    rows = [f"| {lr:g} | {np.mean(v):.4f} |" for lr, v in sorted(errors.items())]
    best = min(errors, key=lambda lr: (np.mean(errors[lr]), lr))
    return "\n".join(["Mean validation error over the panels, per learning rate (no-DP regime):", "",
                      "| learning rate | validation error |", "|---|---|", *rows, "",
                      f"Chosen learning rate: {best:g}"])


# ------------------------------------------------------------------------------------------------
# Table 1 in the paper's layout


def _table1_notes(dataset: str):
    def notes(doc: dict) -> str:
        cells: dict = {}
        for r in doc["runs"]:
            cells.setdefault((r["panel"], r["algorithm"]), []).append(r)
        labels = (PER_SILO, NO_DP, FULL, JOINT, STATED)
        lines = [f"Table 1 layout ({dataset}; test accuracy mean ± std over runs; ours | paper):", "",
                 "| n | " + " | ".join(labels) + " | our winner of {per-silo, full, joint} | paper's winner |",
                 "|---" * (len(labels) + 3) + "|"]
        for n in (int(p.split("=")[1]) for p in dict.fromkeys(r["panel"] for r in doc["runs"])):
            panel = f"n = {n}"
            paper = TABLE1[dataset].get(n)
            ours, means = [], {}
            for i, label in enumerate(labels):
                recs = cells.get((panel, label), [])
                values = [x for rec in recs for x in rec["metrics"].get("test_accuracy_seeds",
                                                                          [rec["metrics"]["test_accuracy"]])]
                cell = f"{np.mean(values):.4f} ± {np.std(values):.4f}" if values else "-"
                means[label] = np.mean(values) if values else -math.inf
                ours.append(f"{cell} \\| {paper[i]}" if paper is not None and i < 4 else cell)
            winner = max((PER_SILO, FULL, JOINT), key=lambda k: means[k])
            if paper is None:
                theirs = "-"
            else:
                theirs = (PER_SILO, FULL, JOINT)[int(np.argmax([float(paper[i].split()[0]) for i in (0, 2, 3)]))]
            lines.append(f"| {n} | " + " | ".join(ours) + f" | {winner} | {theirs} |")
        return "\n".join(lines)

    return notes


def _report(dataset: str, notes) -> Report:
    columns = (Column(f"{FULL} (%)", FULL, "mean_std"), Column(f"{JOINT} (%)", JOINT, "mean_std"),
               Column(f"{STATED} (%)", STATED, "mean_std"), Column("stated eps spent", STATED, "certified"),
               Column("full-DP eps spent", FULL, "certified"))
    return Report(table=Table(columns=columns, metric="test_accuracy", metric_name="test accuracy",
                              references=(PER_SILO, NO_DP), scale=100, digits=2, over="seeds",
                              reference_value="mean_std"),
                  header="{name}, {panel}: {trials} trial x {reps} run(s) ({form} form)", notes=notes)


SETTINGS = {"records": 10_000, "test_records": 5_000, "batch": BATCH, "table3": TABLE3,
            "local_unit": "iterations", "validation": 0.0, "epsilons": (1.0,)}
EPOCHS_VARIANT = {"settings": {"local_unit": "epochs"},
                  "config": {"note": "Table 3's E read as local epochs (its header) instead of iterations"}}
QUICK = {"reps": 1, "panels": (Panel("n = 4", (("owners", 4),)), Panel("n = 16", (("owners", 16),))),
         "settings": {"records": 1_000, "test_records": 500, "table3": {4: (1, 2), 16: (1, 2)},
                      "learning_rates": (0.05,)},
         "config": {"note": "quick form: 1,000 records, one local step, two rounds, one run, learning rate fixed at "
                             "0.05"}}


def _panels(ns) -> tuple:
    return tuple(Panel(f"n = {n}", (("owners", n),)) for n in ns)


def _tuning(dataset: str) -> Study:
    return Study(
        name=f"huang-jdp/tuning-{dataset}",
        description=f"seed 001: learning rate of plain SGD for every regime, tuned on the no-DP regime's "
                    f"validation error ({dataset}, n = 16 and 128)",
        data=_trial, data_per_panel=True, families=_families(("no_dp",)), evaluate=evaluate, silo_models=True,
        init=lambda seed: nets.init_params(nets.two_head_cnn, jax.random.PRNGKey(seed), nets.IMAGE28_INPUT_SHAPE),
        report=_report(dataset, _tuning_notes), panels=_panels((16, 128)), select=Select(score=None),
        reps=1, settings={**SETTINGS, "dataset": dataset, "validation": 0.2, "learning_rates": (0.01, 0.03, 0.1, 0.3)},
        config={"paper": PAPER, "procedure": "no-DP regime only, validation split of the training owners"},
        quick={**QUICK, "settings": {**QUICK["settings"], "learning_rates": (0.03, 0.1)}})


def _table1(dataset: str) -> Study:
    return Study(
        name=f"huang-jdp/table1-{dataset}",
        description=f"seed 001 Table 1 ({dataset}): per-silo, no-DP, full-DP and joint-DP (eps 1) over n owners",
        data=_trial, data_per_panel=True, families=_families(tuple(REGIMES)), evaluate=evaluate, silo_models=True,
        init=lambda seed: nets.init_params(nets.two_head_cnn, jax.random.PRNGKey(seed), nets.IMAGE28_INPUT_SHAPE),
        report=_report(dataset, _table1_notes(dataset)), panels=_panels(sorted(TABLE3)), select=Select(score=None),
        reps=5, seed=lambda trial, panel, rep: rep,
        settings={**SETTINGS, "dataset": dataset,
                  "learning_rates": lambda: (tuned_learning_rate(dataset),)},
        config={"paper": PAPER, "delta": DELTA, "clip": CLIP, "batch": BATCH,
                "learning_rate": "huang-jdp/tuning-" + dataset},
        quick=QUICK, variants={"epochs": EPOCHS_VARIANT})


TUNING = {d: register(_tuning(d)) for d in ("mnist", "fashion-mnist")}
TABLE_1 = {d: register(_table1(d)) for d in ("mnist", "fashion-mnist")}
