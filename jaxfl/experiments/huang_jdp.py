"""The studies of Huang et al. 2023 (§4): ``jaxfl reproduce huang-jdp/{tuning,table1}-{mnist,fashion-mnist}``.

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
* runs: the paper's 5 runs are 5 trials, each with its own draw of the owners' classes and records and
  its own training randomness (one trial per compiled program: the runs of n = 512 do not fit in memory
  together); the tables give mean ± std over them;
* optimiser: plain SGD at a learning rate chosen by ``huang-jdp/tuning-DATASET``: FedAvg without DP (the
  no-DP regime only) over a learning-rate grid, scored on a validation split held out from the training
  owners' records (20 % of each owner's records; never the test split), at ``n`` = 16 and 128; the rate
  with the lowest mean validation error over those panels is used for every regime and ``n``.

Quick forms (CI): ``n`` in {4, 16}, 1,000 training records, one local iteration, two rounds, one seed, and
a fixed learning rate (not tuned).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxfl.accounting.calibrate import epsilon_for, noise_multiplier_for
from jaxfl.accounting.group import group_privacy, record_level_target
from jaxfl.algorithms import personalized
from jaxfl.data import loaders
from jaxfl.data.partition import choose_silo_classes, class_limited, train_test_split_per_silo
from jaxfl.experiments.registry import register
from jaxfl.experiments.report import Column, Curve, Figure, Report, Table
from jaxfl.experiments.study import Family, Panel, Program, Select, Study, Trial
from jaxfl.models import nets

PAPER = ("Huang, Jiang, Liu, Mahdian, Mao & Mirrokni, Learning across Data Owners with Joint Differential Privacy "
         "(Huang et al.), §4")
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
    """Huang et al.'s owners: ``(train, test, classes)``, :class:`jaxfl.data.FederatedData` over ``num_owners``
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


@dataclasses.dataclass(frozen=True)
class Regime:
    """One regime of the paper: which layers are private (``"all"``: per-silo training), where the noise
    goes (``noise_on``, ``shared_gradient_at``: :func:`jaxfl.algorithms.personalized`), whether it is DP and,
    optionally, its own epsilons (default: the study's)."""

    name: str
    label: str
    private_layers: Any = ()
    noise_on: str = "all"
    at: str = "current"
    private: bool = False
    epsilons: tuple | None = None


REGIMES = {r.name: r for r in (
    Regime("per_silo", PER_SILO, "all"),
    Regime("no_dp", NO_DP),
    Regime("full_dp", FULL, private=True),
    Regime("joint_dp", JOINT, ("fc1",), "shared", private=True),
    Regime("joint_dp_stated", STATED, ("fc1",), "shared", "initial", private=True))}


def _layer(path) -> str:
    return str(getattr(path[1], "key", path[1])) if len(path) > 1 else ""


def _shared(private_layers):
    if private_layers == "all":
        return lambda path, leaf: False
    return lambda path, leaf: _layer(path) not in private_layers


def _build(regime: Regime, static: dict, *, epsilon, learning_rate, noise_multiplier=0.0):
    del epsilon  # the noise multiplier carries it
    return personalized(nets.two_head_loss, shared=_shared(regime.private_layers),
                        client_opt=optax.sgd(learning_rate), local_steps=static["local_steps"],
                        sampling_rate=static["rate"], chunk=static["chunk"],
                        expected_batch_size=static["expected_batch_size"] if regime.private else None,
                        clip_norm=CLIP if regime.private else math.inf,
                        noise_multiplier=noise_multiplier if regime.private else 0.0, noise_on=regime.noise_on,
                        shared_gradient_at=regime.at)


def schedule(study: Study | dict, n: int) -> dict:
    """Panel ``n``'s local training: Table 3's ``E`` and ``T``, the Poisson rate ``q`` and the local steps per
    round: ``E`` (``local_unit="iterations"``) or ``round(E / q)`` (``"epochs"``: ``E`` passes in expectation).
    ``study``: the study, or its settings (a mapping)."""
    local, rounds = study["table3"][n]
    rate = min(1.0, study["batch"] * n / study["records"])
    steps = local if study["local_unit"] == "iterations" else max(1, round(local / rate))
    records = math.ceil(study["records"] / n)
    mean = rate * records  # gradients in chunks of the sample's mean + 3 std: one pass in almost every step
    chunk = min(records, 8 * math.ceil((mean + 3 * math.sqrt(mean * (1 - rate))) / 8))
    return {"local": local, "rounds": rounds, "rate": rate, "local_steps": steps, "chunk": chunk,
            "expected_batch_size": mean}


def _records_per_user(panel: Panel) -> int:
    return dict(panel.values).get("records_per_user", 1)


def _rate_stages(study: Study, private: bool = False) -> tuple:
    """The study's learning rates as stages, one program each: ``learning_rates`` is a tuple of rates (one
    stage) or of tuples of rates; a grid extended by a stage reuses the stored parts of the stages before it.
    ``private``: a DP regime's, ``private_learning_rates`` when the study sets it."""
    rates = study["private_learning_rates"] if private and study["private_learning_rates"] is not None \
        else study["learning_rates"]
    rates = rates() if callable(rates) else rates
    return tuple(tuple(r) for r in rates) if isinstance(rates[0], (tuple, list)) else (tuple(rates),)


def _programs(regime: Regime):
    def programs(study: Study, panel: Panel, trial: Trial):
        s = schedule(study, panel["owners"])
        k = _records_per_user(panel)
        static = (("local_steps", s["local_steps"]), ("rate", s["rate"]), ("chunk", s["chunk"]),
                  ("expected_batch_size", s["expected_batch_size"]))
        columns = {"table3_E": s["local"], "local_unit": study["local_unit"], "rounds": s["rounds"],
                   "sampling_rate": s["rate"], "local_steps": s["local_steps"], "private_layers":
                   regime.private_layers if isinstance(regime.private_layers, str) else ",".join(regime.private_layers)}
        if not regime.private:
            grids = [{"epsilon": [0.0], "learning_rate": list(rates)} for rates in _rate_stages(study)]
        else:
            steps = s["rounds"] * s["local_steps"]
            noise = {}
            for eps in regime.epsilons or study["epsilons"]:
                # user level (k records per user) by the paper's group privacy: record level at eps / k,
                # delta / (k e^eps) (Lemma 3.6 as printed, jaxfl.accounting.group)
                eps_r, delta_r = record_level_target(eps, DELTA, k, bound="paper") if k > 1 else (eps, DELTA)
                noise[eps] = noise_multiplier_for(eps_r, s["rate"], steps, delta_r)
            grids = [[{"epsilon": eps, "learning_rate": lr, "noise_multiplier": z} for eps, z in noise.items()
                      for lr in rates] for rates in _rate_stages(study, private=True)]
        return [Program(static, grid, s["rounds"], columns=columns) for grid in grids]

    return programs


def _describe(regime: Regime):
    def describe(study: Study, panel, trial: Trial, program: Program, row: dict) -> dict:
        if not row["private"]:
            return {}
        s = schedule(study, panel["owners"])
        k = _records_per_user(panel)
        privacy = {"records_per_user": k}
        if k > 1:  # the run's record-level epsilon at delta', and the user-level (eps, delta) it gives
            eps_r, delta_r = record_level_target(row["epsilon"], DELTA, k, bound="paper")
            spent = epsilon_for(row["noise_multiplier"], s["rate"], s["rounds"] * s["local_steps"], delta_r)
            user = group_privacy(spent, delta_r, k, bound="paper")
            privacy.update({"user_level": "group privacy (Lemma 3.6 as printed)",
                            "record_level_target": [eps_r, delta_r], "record_level_epsilon": spent,
                            "user_level_epsilon": user[0], "user_level_delta": user[1]})
        if regime.noise_on == "shared" and regime.at == "current":
            # The epsilon the paper's accounting gives this run (its calibration target); not a guarantee.
            privacy.update({"stated": False, "paper_accounting_epsilon": row["epsilon"],
                            "paper_accounting_steps": s["rounds"] * s["local_steps"]})
        return {"privacy": privacy}

    return describe


def _families(regimes):
    return tuple(Family(r.name, r.label, functools.partial(_build, r), _programs(r),
                        accountant="rdp" if r.private else None, describe=_describe(r)) for r in regimes)


# ------------------------------------------------------------------------------------------------
# Learning rate from the tuning study


def _validation_errors(runs, panels=None) -> dict:
    """``{learning rate: mean validation error over the runs (panels; those named in ``panels`` when given)
    at that rate}``."""
    errors: dict = {}
    for r in runs:
        if panels is not None and r.get("panel") not in panels:
            continue
        errors.setdefault(float(r["learning_rate"]), []).append(float(r["metrics"]["test_error"]))
    return {lr: float(np.mean(v)) for lr, v in sorted(errors.items())}


def _chosen(errors: dict) -> float:
    return min(errors, key=lambda lr: (errors[lr], lr))


# The panels the dp-tuned variants' rate is chosen on: dp-learning-rate's n = 64 panel came later and is
# reported beside them, not folded into the choice that the dp-tuned runs already used.
DP_RATE_CHOICE_PANELS = ("n = 4", "n = 16")


def tuned_learning_rate(dataset: str, results_dir=None, study: str | None = None) -> float:
    """The learning rate a tuning study chose: the lowest mean validation error over its runs (read from
    its committed ``results.json``). ``study`` (default ``tuning-DATASET``: the no-DP regime over its
    panels) may name ``dp-learning-rate`` (the full-DP and joint-DP regimes at eps 1, over its panels
    ``DP_RATE_CHOICE_PANELS``; MNIST, or its variant named by ``dataset``)."""
    name = study or f"tuning-{dataset}"
    variant = dataset if study == "dp-learning-rate" and dataset != "mnist" else None
    default = REPO / "results" / "huang-jdp" / name / (variant or "")
    path = Path(results_dir or default) / "results.json"
    if not path.exists():
        command = f"jaxfl reproduce huang-jdp/{name}" + (f" --variant {variant}" if variant else "")
        raise ValueError(f"no tuning results at {path}: run `{command}` first")
    panels = DP_RATE_CHOICE_PANELS if study == "dp-learning-rate" else None
    errors = _validation_errors(json.loads(path.read_text())["runs"], panels)
    if not errors:
        raise ValueError(f"no runs of the panels {', '.join(panels or ())} in {path} to choose a learning rate from")
    return _chosen(errors)


def _tuning_notes(doc: dict) -> str:
    errors = _validation_errors(doc["runs"])
    rows = [f"| {lr:g} | {e:.4f} |" for lr, e in errors.items()]
    return "\n".join(["Mean validation error over the panels, per learning rate (no-DP regime):", "",
                      "| learning rate | validation error |", "|---|---|", *rows, "",
                      f"Chosen learning rate: {_chosen(errors):g}"])


# ------------------------------------------------------------------------------------------------
# Table 1 in the paper's layout


def _test_accuracies(doc: dict, panel: str, label: str, eps=None) -> list[float]:
    """Every run's (and seed's) test accuracy of regime ``label`` in ``panel`` (at ``eps`` when given)."""
    return [x for r in doc["runs"] if r["panel"] == panel and r["algorithm"] == label
            and (eps is None or r["epsilon"] == eps)
            for x in r["metrics"].get("test_accuracy_seeds", [r["metrics"]["test_accuracy"]])]


def _paper_mean(cell: str) -> float:
    """``"0.9445 ± 0.0069"`` (a cell of :data:`TABLE1`) -> 0.9445."""
    return float(cell.split()[0])


def _table1_layout(dataset: str, doc: dict) -> list[str]:
    """Table 1 in the paper's layout over the panels of ``doc``: each regime's mean ± std beside the paper's,
    the winner of {per-silo, full, joint} on both sides, joint DP minus full DP on both sides (points), and how
    many of our cells lie within 3 points of the paper's (the issue's criterion)."""
    labels = (PER_SILO, NO_DP, FULL, JOINT, STATED)
    compared = (PER_SILO, NO_DP, FULL, JOINT)   # the paper's four columns; STATED is ours alone
    lines = [f"Table 1 layout ({dataset}; test accuracy mean ± std over runs; ours | paper):", "",
             "| n | " + " | ".join(labels) + " | our winner of {per-silo, full, joint} | paper's winner "
             "| joint - full (points; ours \\| paper) |",
             "|---" * (len(labels) + 4) + "|"]
    within = {label: [0, 0] for label in compared}   # label -> [cells within 3 points, cells compared]
    for n in (int(p.split("=")[1]) for p in dict.fromkeys(r["panel"] for r in doc["runs"])):
        panel = f"n = {n}"
        paper = TABLE1[dataset].get(n)
        ours, means = [], {}
        for i, label in enumerate(labels):
            values = _test_accuracies(doc, panel, label)
            cell = f"{np.mean(values):.4f} ± {np.std(values):.4f}" if values else "-"
            means[label] = float(np.mean(values)) if values else -math.inf
            ours.append(f"{cell} \\| {paper[i]}" if paper is not None and i < 4 else cell)
            if paper is not None and label in within and values:
                within[label][0] += abs(means[label] - _paper_mean(paper[i])) <= 0.03
                within[label][1] += 1
        winner = max((PER_SILO, FULL, JOINT), key=lambda k: means[k])
        theirs, gap = "-", f"{100 * (means[JOINT] - means[FULL]):+.1f}"
        if paper is not None:
            theirs = (PER_SILO, FULL, JOINT)[int(np.argmax([_paper_mean(paper[i]) for i in (0, 2, 3)]))]
            gap += f" \\| {100 * (_paper_mean(paper[3]) - _paper_mean(paper[2])):+.1f}"
        lines.append(f"| {n} | " + " | ".join(ours) + f" | {winner} | {theirs} | {gap} |")
    counts = ", ".join(f"{label} {k} of {m}" for label, (k, m) in within.items() if m)
    return lines + ["", f"Cells within 3 points of the paper's: {counts}."]


def _table1_notes(dataset: str):
    def notes(doc: dict) -> str:
        return "\n".join(_table1_layout(dataset, doc) + [""] + _compute_lines(doc))

    return notes


def _compute_lines(doc: dict) -> list[str]:
    """The notes' compute table: per panel of the full study, the gradient evaluations of one regime run
    (``n`` owners x local steps x rounds x the Poisson chunk, padding included) and the seconds of one trial
    (every regime): measured where the panel ran, else projected from the largest panel run at its seconds
    per evaluation (labelled so)."""
    settings = dict(doc["config"]["settings"])
    settings["table3"] = {int(k): v for k, v in settings["table3"].items()}
    trials = int(doc["config"]["trials"])
    evaluations = {n: n * sch["local_steps"] * sch["rounds"] * sch["chunk"]
                   for n in sorted(settings["table3"]) for sch in [schedule(settings, n)]}
    measured = {}
    for r in doc["runs"]:
        n = int(r["panel"].split("=")[1])
        measured[n] = measured.get(n, 0.0) + float(r["wall_seconds"]) / trials
    if not measured:
        return []
    largest = max(measured)
    per_evaluation = measured[largest] / (evaluations[largest] * len(REGIMES))
    rate = f"{per_evaluation * 1e3:.2f} ms" if per_evaluation >= 1e-4 else f"{per_evaluation * 1e6:.2f} µs"
    lines = [f"Compute on this machine: seconds per trial (all {len(REGIMES)} regimes; panels not run: projected at "
             f"n = {largest}'s {rate} per gradient evaluation):", "",
             "| n | gradient evaluations per regime run | seconds per trial | hours for " f"{trials} trials |",
             "|---|---|---|---|"]
    for n, count in evaluations.items():
        seconds = measured.get(n, count * len(REGIMES) * per_evaluation)
        tag = "" if n in measured else " (projected)"
        hours = seconds * trials / 3600
        digits = (0, 1) if hours >= 0.1 else (1, 3)  # a GPU's panels take seconds: keep them readable
        lines.append(f"| {n} | {count:,} | {seconds:,.{digits[0]}f}{tag} | {hours:.{digits[1]}f}{tag} |")
    return lines


def _report(dataset: str, notes) -> Report:
    columns = (Column(f"{FULL} (%)", FULL, "mean_std"), Column(f"{JOINT} (%)", JOINT, "mean_std"),
               Column(f"{STATED} (%)", STATED, "mean_std"), Column("stated eps spent", STATED, "certified"),
               Column("full-DP eps spent", FULL, "certified"))
    return Report(table=Table(columns=columns, metric="test_accuracy", metric_name="test accuracy",
                              references=(PER_SILO, NO_DP), scale=100, digits=2, over="seeds",
                              reference_value="mean_std"),
                  header="{name}, {panel}: {trials} run(s) ({form} form)", notes=notes,
                  combined=lambda doc: "\n".join(_table1_layout(dataset, doc)))


SETTINGS = {"records": 10_000, "test_records": 5_000, "batch": BATCH, "table3": TABLE3,
            "local_unit": "iterations", "validation": 0.0, "epsilons": (1.0,), "private_learning_rates": None}
EPOCHS_VARIANT = {"settings": {"local_unit": "epochs"},
                  "config": {"note": "Table 3's E read as local epochs (its header) instead of iterations"}}


def _dp_tuned_variant(dataset: str) -> dict:
    """The ``dp-tuned`` variant: the DP regimes at the rate ``huang-jdp/dp-learning-rate`` chose on
    ``dataset``; the other regimes keep the no-DP tuning's."""
    source = "huang-jdp/dp-learning-rate" + ("" if dataset == "mnist" else f" --variant {dataset}")
    return {"reuses_base_parts": True,  # per-silo and no-DP run as in the base form
            "settings": {"private_learning_rates":
                         lambda: (tuned_learning_rate(dataset, study="dp-learning-rate"),)},
            "config": {"learning_rate_private": source,
                       "note": f"the DP regimes at the learning rate chosen on their own validation accuracy "
                               f"({source}; that choice is not itself private), the others at the no-DP "
                               f"tuning's"}}


QUICK = {"trials": 1, "reps": 1, "panels": (Panel("n = 4", (("owners", 4),)), Panel("n = 16", (("owners", 16),))),
         "settings": {"records": 1_000, "test_records": 500, "table3": {4: (1, 2), 16: (1, 2)},
                      "learning_rates": (0.05,)},
         "config": {"note": "quick form: 1,000 records, one local step, two rounds, one run, learning rate fixed at "
                             "0.05"}}


def _panels(ns) -> tuple:
    return tuple(Panel(f"n = {n}", (("owners", n),)) for n in ns)


# The second stage extends the first run's grid past its largest rate (0.3 was chosen there).
TUNING_RATES, TUNING_QUICK_RATES = ((0.01, 0.03, 0.1, 0.3), (1.0,)), ((0.03,), (0.1,))


def _rate_label(lr: float) -> str:
    return f"{NO_DP}, learning rate {lr:g}"


def _tuning_family() -> Family:
    """The no-DP regime over the learning-rate grid, one reported row per rate (labelled by it)."""
    regime = REGIMES["no_dp"]
    return Family(regime.name, regime.label, functools.partial(_build, regime), _programs(regime), accountant=None,
                  describe=lambda study, panel, trial, program, row: {"algorithm": _rate_label(row["learning_rate"])})


def _tuning_report() -> Report:
    rates = sorted({lr for stage in TUNING_RATES + TUNING_QUICK_RATES for lr in stage})
    return Report(table=Table(columns=(), metric="test_error", metric_name="validation error",
                              references=tuple(_rate_label(lr) for lr in rates), digits=4,
                              reference_value="mean_std"),
                  header="{name}, {panel}: validation error of the no-DP regime per learning rate ({form} form)",
                  notes=_tuning_notes)


def _tuning(dataset: str) -> Study:
    return Study(
        name=f"huang-jdp/tuning-{dataset}",
        description=f"Huang et al.: learning rate of plain SGD for every regime, tuned on the no-DP regime's "
                    f"validation error ({dataset}, n = 16 and 128)",
        data=_trial, data_per_panel=True, families=(_tuning_family(),), evaluate=evaluate, silo_models=True,
        init=lambda seed: nets.init_params(nets.two_head_cnn, jax.random.PRNGKey(seed), nets.IMAGE28_INPUT_SHAPE),
        report=_tuning_report(), panels=_panels((16, 128)), select=Select(score=None),
        reps=1, configs_per_batch=1,
        settings={**SETTINGS, "dataset": dataset, "validation": 0.2, "learning_rates": TUNING_RATES},
        config={"paper": PAPER, "procedure": "no-DP regime only, validation split of the training owners"},
        quick={**QUICK, "settings": {**QUICK["settings"], "learning_rates": TUNING_QUICK_RATES}})


def _table1(dataset: str) -> Study:
    return Study(
        name=f"huang-jdp/table1-{dataset}",
        description=f"Huang et al. Table 1 ({dataset}): per-silo, no-DP, full-DP and joint-DP (eps 1) over n owners",
        data=_trial, data_per_panel=True, families=_families(tuple(REGIMES.values())), evaluate=evaluate,
        silo_models=True,
        init=lambda seed: nets.init_params(nets.two_head_cnn, jax.random.PRNGKey(seed), nets.IMAGE28_INPUT_SHAPE),
        report=_report(dataset, _table1_notes(dataset)), panels=_panels(sorted(TABLE3)), select=Select(score=None),
        trials=5, seed=lambda trial, panel, rep: trial, configs_per_batch=1,
        settings={**SETTINGS, "dataset": dataset,
                  "learning_rates": lambda: (tuned_learning_rate(dataset),)},
        config={"paper": PAPER, "delta": DELTA, "clip": CLIP, "batch": BATCH,
                "learning_rate": "huang-jdp/tuning-" + dataset},
        quick=QUICK,
        variants={"epochs": EPOCHS_VARIANT, "dp-tuned": _dp_tuned_variant(dataset)})


# ------------------------------------------------------------------------------------------------
# Table 2 (which layers are private), Table 4 (records per user), Figure 1 (epsilon)

LAYERS = ("conv1", "conv2", "fc1")
TABLE2 = {(): ("0", "0.7399 ± 0.0324"), ("conv1",): ("416", "0.7240 ± 0.0130"),
          ("conv2",): ("12,832", "0.7090 ± 0.0014"), ("conv1", "conv2"): ("13,248", "0.1863 ± 0.0329"),
          ("fc1",): ("17,248", "0.7835 ± 0.0136"), ("conv1", "fc1"): ("17,664", "0.6606 ± 0.0259"),
          ("conv2", "fc1"): ("30,080", "0.7291 ± 0.0320"), ("conv1", "conv2", "fc1"): ("30,496", "0.1727 ± 0.0419")}
"""Table 2 (MNIST, joint DP at eps 1; FC2 always shared): private layers -> (paper's parameter count, accuracy)."""
TABLE2_PANEL = "n = 256"  # Table 2's numbers are Table 1's n = 256 entries (its caption says 128, digest §5.6)
TABLE4 = {(4, 1): ("0.4444 ± 0.0844", "0.4658 ± 0.0307", "0.5841 ± 0.0656", "0.8103 ± 0.0177"),
          (4, 2): ("0.2867 ± 0.0387", "0.3297 ± 0.0256", "0.5011 ± 0.0616", "0.6576 ± 0.0502"),
          (4, 5): ("0.1986 ± 0.0479", "0.2064 ± 0.0470", "0.2867 ± 0.0315", "0.4802 ± 0.0365"),
          (4, 10): ("0.1526 ± 0.0022", "0.1708 ± 0.0262", "0.2644 ± 0.0656", "0.3709 ± 0.0581"),
          (4, 20): ("0.1517 ± 0.0438", "0.1691 ± 0.0628", "0.1864 ± 0.0318", "0.2741 ± 0.0196"),
          (256, 1): ("0.7399 ± 0.0324", "0.7835 ± 0.0136", "0.8124 ± 0.0262", "0.8896 ± 0.0124"),
          (256, 2): ("0.2606 ± 0.0259", "0.3930 ± 0.0622", "0.6962 ± 0.0375", "0.8160 ± 0.0218"),
          (256, 5): ("0.1700 ± 0.0154", "0.2517 ± 0.0355", "0.3715 ± 0.0642", "0.7020 ± 0.0964"),
          (256, 10): ("0.1450 ± 0.0227", "0.1603 ± 0.0204", "0.2764 ± 0.0620", "0.4703 ± 0.1100"),
          (256, 20): ("0.1089 ± 0.0264", "0.1297 ± 0.0082", "0.2400 ± 0.0329", "0.2941 ± 0.0659")}
"""Table 4 (MNIST, m/r records per user): (n, m/r) -> full DP eps 1, joint DP eps 1, 3, 8."""


def _layers_label(private: tuple) -> str:
    return "private: " + (", ".join(private) if private else "none (full DP)")


def _table2_regimes() -> tuple:
    out = []
    for private in TABLE2:
        if not private:
            out.append(Regime("layers-none", _layers_label(private), private=True))
        else:
            out.append(Regime("layers-" + "-".join(private), _layers_label(private), private, "shared", private=True))
    return tuple(out)


def _records_table(title: str, header: tuple, rows) -> list[str]:
    """A markdown table: ``rows`` of ``(cells...)``."""
    return [title, "", "| " + " | ".join(header) + " |", "|---" * len(header) + "|",
            *("| " + " | ".join(str(c) for c in row) + " |" for row in rows)]


def _accuracy(doc: dict, panel: str, label: str, eps=None) -> str:
    values = _test_accuracies(doc, panel, label, eps)
    return f"{np.mean(values):.4f} ± {np.std(values):.4f}" if values else "-"


def _table2_notes(doc: dict) -> str:
    """Table 2's layout for each panel run; the paper's column is its n = 256 (the only n it reports)."""
    counts, tables = nets.TWO_HEAD_PARAMS, []
    for panel in dict.fromkeys(r["panel"] for r in doc["runs"]):
        paper_at = "paper" if panel == TABLE2_PANEL else f"paper at {TABLE2_PANEL}"
        rows = [(*("Yes" if layer in private else "No" for layer in LAYERS),
                 f"{sum(counts[layer] for layer in private):,} \\| {paper[0]}",
                 f"{_accuracy(doc, panel, _layers_label(private))} \\| {paper[1]}")
                for private, paper in TABLE2.items()]
        tables.append("\n".join(_records_table(f"Table 2 layout ({panel}; joint DP eps 1; ours | {paper_at}):",
                                                ("Conv1 individual", "Conv2 individual", "FC1 individual",
                                                 "individual parameters", "test accuracy"), rows)))
    return "\n\n".join(tables)


def _table4_notes(doc: dict) -> str:
    rows = []
    for (n, k), paper in TABLE4.items():
        panel = f"n = {n}, m/r = {k}"
        cells = [_accuracy(doc, panel, FULL, 1.0)] + [_accuracy(doc, panel, JOINT, e) for e in (1.0, 3.0, 8.0)]
        rows.append((n, k, *(f"{c} \\| {p}" for c, p in zip(cells, paper))))
    return "\n".join(_records_table("Table 4 layout (MNIST; user level by group privacy; ours | paper):",
                                     ("n", "m/r", "full-DP eps 1", "joint-DP eps 1", "joint-DP eps 3",
                                      "joint-DP eps 8"), rows))


CHANCE = 1 / CLASSES_PER_OWNER  # an owner's test records cover its own classes only
ABOVE_CHANCE = CHANCE + 0.05  # an accuracy below this is reported as "at chance"


def _at_chance(cells) -> str:
    """``"; both regimes at chance (below X) in k of them"`` for ``cells`` of ``(difference, at chance)``, or
    ``""`` when none is."""
    k = sum(at for _, at in cells)
    return f"; both regimes at chance (below {ABOVE_CHANCE:.3f}) in {k} of them" if k else ""


def _figure1_notes(doc: dict) -> str:
    """Figure 1 as numbers (the paper gives none beyond Table 1) and its three claims (digest §5.8) checked
    on the means: (1) joint DP above full DP for every eps <= 10, (2) full DP at or above joint DP at
    eps = 100, (3) joint DP's gain at eps <= 10 larger for larger n."""
    panels = list(dict.fromkeys(r["panel"] for r in doc["runs"]))
    epsilons = sorted({r["epsilon"] for r in doc["runs"] if r["algorithm"] == JOINT})
    mean = lambda values: float(np.mean(values)) if values else math.nan
    rows, low, high, gains = [], [], [], {}
    for panel in panels:
        n = int(panel.split("=")[1])
        for eps in epsilons:
            full, joint = (mean(_test_accuracies(doc, panel, label, eps)) for label in (FULL, JOINT))
            (low if eps <= 10 else high).append((joint - full, max(full, joint) < ABOVE_CHANCE))
            if eps <= 10:
                gains.setdefault(n, []).append(joint - full)
            rows.append((n, f"{eps:g}", _accuracy(doc, panel, FULL, eps), _accuracy(doc, panel, JOINT, eps),
                         f"{joint - full:+.4f}", _accuracy(doc, panel, PER_SILO)))
    table = _records_table("Figure 1 as numbers (MNIST; test accuracy mean ± std over runs):",
                           ("n", "eps", "full DP", "joint DP", "joint - full", "per-silo (dashed line)"), rows)
    mean_gain = {n: float(np.mean(g)) for n, g in gains.items()}
    ordered = [mean_gain[n] for n in sorted(mean_gain)]
    claims = [
        "", "The paper's claims (digest §5.8), checked on the means above:", "",
        f"1. joint DP above full DP for eps <= 10: {sum(d > 0 for d, _ in low)} of {len(low)} (n, eps) cells"
        f"{_at_chance(low)}.",
        f"2. full DP at or above joint DP at eps = 100: {sum(d <= 0 for d, _ in high)} of {len(high)} panels"
        f"{_at_chance(high)}.",
        "3. joint DP's mean gain over full DP at eps <= 10, by n: "
        + ", ".join(f"n = {n}: {g:+.4f}" for n, g in sorted(mean_gain.items()))
        + ("; larger for larger n: " + ("yes" if all(a < b for a, b in zip(ordered, ordered[1:])) else "no")
           if len(ordered) > 1 else " (one panel: not testable)") + "."]
    return "\n".join(table + claims)


def _variant_study(name, description, *, regimes, panels, notes, settings=None, figure=None, config=None,
                   quick_panels=QUICK["panels"], variants=None, combined=None):
    base = _table1("mnist")
    columns = tuple(Column(f"{r.label} (%)", r.label, "mean_std") for r in regimes if r.private)
    report = Report(table=Table(columns=columns, metric="test_accuracy", metric_name="test accuracy",
                                references=tuple(r.label for r in regimes if not r.private), scale=100, digits=2,
                                over="seeds", reference_value="mean_std"),
                    figure=figure, header="{name}, {panel}: {trials} run(s) ({form} form)", notes=notes,
                    combined=combined)
    return dataclasses.replace(
        base, name=name, description=description, families=_families(regimes), panels=panels, report=report,
        settings={**base.settings, **(settings or {})}, config={**base.config, **(config or {})},
        quick={**QUICK, "panels": quick_panels}, variants=variants or {})


def _table2_dp_tuned() -> dict:
    """Every Table 2 regime is private, so all run at the DP rate; n = 4 and 16 join n = 256 because that rate
    trains the DP regimes there at eps 1 (Table 1's dp-tuned rows). The paper reports n = 256 only."""
    variant = _dp_tuned_variant("mnist")
    return {**variant, "panels": _panels((4, 16, 256)),
            "config": {**variant["config"], "panel": "n = 4 and 16 (where the DP rate trains at eps 1) beside "
                                                     "n = 256, the paper's (its caption says 128, digest §5.6)"}}


TABLE_2 = register(_variant_study(
    "huang-jdp/table2", "Huang et al. Table 2 (MNIST): which layers are private under joint DP (eps 1), n = 256",
    regimes=_table2_regimes(), panels=_panels((256,)), notes=_table2_notes,
    quick_panels=(Panel("n = 4", (("owners", 4),)),),
    config={"panel": "n = 256: Table 2's numbers equal Table 1's n = 256 entries (its caption says 128, digest "
                      "§5.6)"},
    variants={"dp-tuned": _table2_dp_tuned()}))

TABLE_4 = register(_variant_study(
    "huang-jdp/table4", "Huang et al. Table 4 (MNIST): records per user m/r in {1, 2, 5, 10, 20}, full DP at eps 1 "
                        "and joint DP at eps 1, 3, 8, n = 4 and 256 (user level by group privacy)",
    regimes=(dataclasses.replace(REGIMES["full_dp"], epsilons=(1.0,)),
             dataclasses.replace(REGIMES["joint_dp"], epsilons=(1.0, 3.0, 8.0))),
    panels=tuple(Panel(f"n = {n}, m/r = {k}", (("owners", n), ("records_per_user", k)))
                 for n, k in TABLE4), notes=_table4_notes, combined=_table4_notes,  # n = 4 and 256 on two machines
    quick_panels=tuple(Panel(f"n = 4, m/r = {k}", (("owners", 4), ("records_per_user", k))) for k in (1, 2)),
    config={"user_level": "record-level DP-SGD calibrated to (eps / k, delta / (k e^eps)) (the paper's group "
                          "privacy, jaxfl.accounting.group.record_level_target(bound='paper')); per-silo and no-DP "
                          "do not depend on m/r: Table 1's rows"},
    variants={"dp-tuned": _dp_tuned_variant("mnist")}))

FIGURE_1 = register(_variant_study(
    "huang-jdp/figure1", "Huang et al. Figure 1 (MNIST): full DP vs joint DP over eps in {1, 2, 5, 10, 100}, per n, "
                         "with per-silo training for reference",
    regimes=(REGIMES["per_silo"], REGIMES["full_dp"], REGIMES["joint_dp"]), panels=_panels(sorted(TABLE3)),
    notes=_figure1_notes, combined=_figure1_notes,  # panels run on several machines or sittings: one table
    settings={"epsilons": (1.0, 2.0, 5.0, 10.0, 100.0)},
    figure=Figure(curves=(Curve(FULL, {"color": "C0", "marker": "o"}), Curve(JOINT, {"color": "C1", "marker": "s"}),
                          Curve(PER_SILO, {"color": "gray", "linestyle": "--"}, line=True)),
                  title="Huang et al. Figure 1, {panel}", ylabel="test accuracy", metric="test_accuracy"),
    variants={"dp-tuned": _dp_tuned_variant("mnist")}))

# ------------------------------------------------------------------------------------------------
# The noise the paper's setting implies (computed, no training)


def _noise_row(static: dict, *, epsilon: float) -> dict:
    """One (n, reading of E) cell: the calibrated noise multiplier and the noise it puts on a coordinate of one
    owner's noisy mean gradient (``z C / (q m)``) and of the mean over the ``n`` owners' (``/ sqrt(n)``)."""
    n, unit = static["owners"], static["reading"]
    s = schedule({**SETTINGS, "local_unit": unit}, n)  # a settings mapping serves: schedule reads study[name]
    steps = s["rounds"] * s["local_steps"]
    z = noise_multiplier_for(epsilon, s["rate"], steps, DELTA)
    per_owner = z * CLIP / (s["rate"] * SETTINGS["records"] / n)
    return {"metrics": {"noise_multiplier": z, "noise_std_owner": per_owner, "noise_std_mean": per_owner / math.sqrt(n),
                        "steps": steps}, "epsilon_spent": epsilon_for(z, s["rate"], steps, DELTA), "delta": DELTA,
            "seed": None, "owners": n, "sampling_rate": s["rate"], "local_steps": s["local_steps"],
            "rounds": s["rounds"]}


def _noise_programs(unit: str):
    def programs(study: Study, panel: Panel, trial: Trial) -> list[Program]:
        return [Program((("reading", unit), ("owners", panel["owners"])), [{"epsilon": e} for e in study["epsilons"]],
                        0)]

    return programs


NOISE_LABELS = {"iterations": "E = local iterations", "epochs": "E = local epochs"}


def _noise_columns(label: str) -> tuple:
    return (Column(f"{label}: steps", label, "metric:steps", fmt="{:.0f}"),
            Column("z", label, "metric:noise_multiplier", fmt="{:.2f}"),
            Column("noise std / coordinate, one owner", label, "metric:noise_std_owner", fmt="{:.3f}"),
            Column("... mean over n owners", label, "metric:noise_std_mean", fmt="{:.3f}"),
            Column("eps spent", label, "certified"))


NOISE = register(Study(
    name="huang-jdp/noise", description="Huang et al.: the DP-SGD noise Table 1's setting implies at eps 1 (clip 15, "
                                        "delta 1e-4), per n and reading of E; computed, no training",
    data=lambda study, t, panel=None: Trial(None, None, DELTA), data_per_panel=True, evaluate=None, init=None,
    families=tuple(Family(unit, label, _noise_row, _noise_programs(unit), runner="compute", accountant="rdp")
                   for unit, label in NOISE_LABELS.items()),
    panels=_panels(sorted(TABLE3)), select=Select(score=None), settings={"epsilons": (1.0,)},
    report=Report(table=Table(columns=_noise_columns(NOISE_LABELS["iterations"])
                                      + _noise_columns(NOISE_LABELS["epochs"])),
                  header="huang-jdp/noise, {panel}: local DP-SGD at eps 1, clip 15, delta 1e-4, Poisson rate "
                         "min(1, 32 n / 10,000)"),
    config={"paper": PAPER, "clip": CLIP, "delta": DELTA, "batch": BATCH,
            "noise_std_owner": "z C / (q m): the noise on a coordinate of one owner's noisy mean gradient per step",
            "noise_std_mean": "noise_std_owner / sqrt(n): on the mean of the n owners' (FedAvg of one-step deltas)"},
    quick={}))


TUNING = {d: register(_tuning(d)) for d in ("mnist", "fashion-mnist")}
TABLE_1 = {d: register(_table1(d)) for d in ("mnist", "fashion-mnist")}

# ------------------------------------------------------------------------------------------------
# Sensitivity: the DP regimes' validation accuracy over learning rates (a diagnostic, not the procedure)

DP_RATES = (0.003, 0.01, 0.03, 0.1, 0.3)
# Below the grid: at n = 64 the best rates of both datasets sit at or next to its lowest rate.
LOW_DP_RATES = (0.0003, 0.001)
# n = 128 (Fashion-MNIST only: on MNIST no rate trained at n = 64): the rates around n = 64's best ones.
N128_DP_RATES = (0.003, 0.01, 0.03)


def _dp_rate_label(label: str, lr: float) -> str:
    return f"{label}, learning rate {lr:g}"


def _dp_rate_family(regime: Regime) -> Family:
    """``regime``'s family with one reported row per learning rate (labelled by it)."""
    family = _families((regime,))[0]

    def describe(study, panel, trial, program, row):
        return {**family.describe(study, panel, trial, program, row),
                "algorithm": _dp_rate_label(regime.label, row["learning_rate"])}

    return dataclasses.replace(family, describe=describe)


def _dp_rate_notes(doc: dict) -> str:
    dataset = doc["config"]["settings"]["dataset"]
    panels = list(dict.fromkeys(r["panel"] for r in doc["runs"]))
    rates = sorted({float(r["learning_rate"]) for r in doc["runs"]})
    header = ("learning rate", *(f"{label}, {panel}" for panel in panels for label in (FULL, JOINT)))
    rows, best = [], {}
    for lr in rates:
        cells = []
        for panel in panels:
            for label in (FULL, JOINT):
                values = _test_accuracies(doc, panel, _dp_rate_label(label, lr))
                cells.append(f"{np.mean(values):.4f}" if values else "-")
                if values and np.mean(values) > best.get((panel, label), (None, -1.0))[1]:
                    best[(panel, label)] = (lr, float(np.mean(values)))
        rows.append((f"{lr:g}", *cells))
    lines = _records_table(f"Validation accuracy of the DP regimes at eps 1 per learning rate ({dataset}; chance: "
                           f"{CHANCE}):",
                           header, rows)
    # a best rate at either end of the grid may not be the best rate: a rate beyond it was not tried
    edge = {rates[0]: ", the grid's lowest", rates[-1]: ", the grid's highest"}
    errors, choice_panels = _validation_errors(doc["runs"], DP_RATE_CHOICE_PANELS), " and ".join(DP_RATE_CHOICE_PANELS)
    choice = (f"the dp-tuned variants use the lowest mean validation error over {choice_panels}: {_chosen(errors):g}"
              if errors else f"the dp-tuned variants' rate is chosen on the base form's {choice_panels}")
    lines += ["", "Best rate per regime and panel: " + "; ".join(
        f"{label}, {panel}: " + (f"{lr:g} ({acc:.4f}{edge.get(lr, '')})" if acc >= ABOVE_CHANCE else
                                 f"none above chance (best {acc:.4f}, at {lr:g}; below {ABOVE_CHANCE:.3f})")
        for (panel, label), (lr, acc) in best.items())
        + f". The procedure of Table 1 (no-DP validation error) chose {tuned_learning_rate(dataset):g}; {choice}."]
    return "\n".join(lines)


def _dp_learning_rate() -> Study:
    base = _tuning("mnist")
    families = (_dp_rate_family(REGIMES["full_dp"]), _dp_rate_family(REGIMES["joint_dp"]))

    def report(rates):
        labels = tuple(_dp_rate_label(f.label, lr) for f in families for lr in rates)
        return Report(table=Table(columns=tuple(Column(label, label, "mean_std") for label in labels),
                                  metric="test_accuracy", metric_name="validation accuracy", digits=4),
                      header="{name}, {panel}: validation accuracy per regime and learning rate, eps 1 ({form} "
                             "form)", notes=_dp_rate_notes)

    fashion = {"settings": {"dataset": "fashion-mnist"}, "config": {"note": "Fashion-MNIST instead of MNIST"}}

    def on_fashion(variant: dict) -> dict:
        """``variant`` on Fashion-MNIST: its settings plus the dataset, the two notes joined."""
        return {**variant, "settings": {**variant["settings"], **fashion["settings"]},
                "config": {"note": "; ".join(v["config"]["note"] for v in (fashion, variant))}}

    # the same runs (panels, seeds, data) at rates below the grid: run with --panel 'n = 64'
    low = {"settings": {"learning_rates": LOW_DP_RATES}, "report": report(LOW_DP_RATES),
           "config": {"note": "learning rates below the base form's grid"}}
    # the next n (more noise per owner) at the rates around n = 64's best: its own panel, so its own parts
    n128 = {"settings": {"learning_rates": N128_DP_RATES}, "panels": _panels((128,)), "report": report(N128_DP_RATES),
            "config": {"note": "n = 128 only"}}
    return dataclasses.replace(
        base, name="huang-jdp/dp-learning-rate",
        description="Huang et al. (MNIST, n = 4, 16 and 64; variants fashion-mnist, low-rates, "
                    "fashion-mnist-low-rates, fashion-mnist-n128): validation accuracy of the full-DP and joint-DP "
                    "regimes at eps 1 over learning rates; a diagnostic of Table 1's DP rows, not its tuning procedure",
        families=families, panels=_panels((4, 16, 64)), report=report(DP_RATES),
        settings={**base.settings, "learning_rates": DP_RATES, "epsilons": (1.0,)},
        config={"paper": PAPER, "clip": CLIP, "delta": DELTA, "batch": BATCH,
                "procedure": "validation split of the training owners (20 %), as the tuning study; tuning on a "
                             "private regime's validation error is not itself private (not accounted)"},
        quick={**QUICK, "settings": {**QUICK["settings"], "learning_rates": (0.01, 0.1)}},
        variants={"fashion-mnist": fashion, "low-rates": low, "fashion-mnist-low-rates": on_fashion(low),
                  "fashion-mnist-n128": on_fashion(n128)})


DP_LEARNING_RATE = register(_dp_learning_rate())
