"""The training regimes (per-silo, no DP, full DP, joint DP) as algorithm families: builds, schedules, learning-rate
stages and the tuning helpers."""
from __future__ import annotations

import dataclasses
import functools
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import optax

from jaxfl.accounting.calibrate import epsilon_for, noise_multiplier_for
from jaxfl.accounting.group import group_privacy, record_level_target
from jaxfl.algorithms import personalized
from jaxfl.engine.driver import make_ledger
from jaxfl.studies.spec import Family, Panel, Program, Study, Trial
from jaxfl.models import nets
from papers.huang_jdp.paper import (CLIP, DELTA, DP_RATE_CHOICE_PANELS, FULL, HOME, JOINT, NO_DP, PER_SILO, SETTINGS,
                                    STATED, TABLE2)


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
    central = regime.private and static.get("placement") == "central"
    return personalized(nets.two_head_loss, shared=_shared(regime.private_layers),
                        client_opt=optax.sgd(learning_rate), local_steps=static["local_steps"],
                        sampling_rate=static["rate"], chunk=static["chunk"],
                        expected_batch_size=static["expected_batch_size"] if regime.private else None,
                        clip_norm=CLIP if regime.private else math.inf,
                        noise_multiplier=noise_multiplier if regime.private else 0.0, noise_on=regime.noise_on,
                        shared_gradient_at=regime.at, noise_placement="central" if central else "local",
                        owners=static["owners"] if central else None)


def _setting(study: Study | dict, name: str, default):
    """``study[name]``, or ``default`` for settings older results do not record."""
    try:
        return study[name]
    except KeyError:
        return default


def schedule(study: Study | dict, n: int, placement: str | None = None, unit: str | None = None) -> dict:
    """Panel ``n``'s local training: Table 3's ``E`` and ``T``, the Poisson rate ``q`` and the local steps per
    round: ``E`` (``local_unit="iterations"``) or ``round(E / q)`` (``"epochs"``: ``E`` passes in expectation).
    With ``placement="central"`` every step is a global update (central DP-SGD, one local step per round), so
    the rounds are ``T`` times those steps (``placement``, ``unit``: default the study's placement and
    ``local_unit``). ``study``: the study, or its settings (a mapping)."""
    local, rounds = study["table3"][n]
    rate = min(1.0, study["batch"] * n / study["records"])
    steps = local if (unit or study["local_unit"]) == "iterations" else max(1, round(local / rate))
    if (placement or _setting(study, "placement", "local")) == "central":
        rounds, steps = rounds * steps, 1
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
        placement = study["placement"] if regime.private else "local"   # where there is noise to place
        unit = _private_unit(study) if regime.private else study["local_unit"]
        s = schedule(study, panel["owners"], placement, unit)
        k = _records_per_user(panel)
        static = (("local_steps", s["local_steps"]), ("rate", s["rate"]), ("chunk", s["chunk"]),
                  ("expected_batch_size", s["expected_batch_size"])) + (
            # named only when central: the stored parts of the local placement stay valid
            (("placement", "central"), ("owners", panel["owners"])) if placement == "central" else ())
        columns = {"table3_E": s["local"], "local_unit": unit, "placement": placement,
                   "rounds": s["rounds"],
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


def _private_unit(study: Study | dict) -> str:
    """How the DP regimes read Table 3's ``E``: ``private_local_unit`` when the study sets it (the central
    variants: the non-DP regimes keep the base form's reading and its runs), else ``local_unit``."""
    return _setting(study, "private_local_unit", None) or study["local_unit"]


def _describe(regime: Regime):
    def describe(study: Study, panel, trial: Trial, program: Program, row: dict) -> dict:
        if not row["private"]:
            return {}
        s = schedule(study, panel["owners"], unit=_private_unit(study))
        k = _records_per_user(panel)
        privacy = {"records_per_user": k}
        if k > 1:  # the run's record-level epsilon at delta', and the user-level (eps, delta) it gives
            eps_r, delta_r = record_level_target(row["epsilon"], DELTA, k, bound="paper")
            spent = epsilon_for(row["noise_multiplier"], s["rate"], s["rounds"] * s["local_steps"], delta_r)
            user = group_privacy(spent, delta_r, k, bound="paper")
            privacy.update({"user_level": "group privacy (Lemma 3.6 as printed)",
                            "record_level_target": [eps_r, delta_r], "record_level_epsilon": spent,
                            "user_level_epsilon": user[0], "user_level_delta": user[1]})
        out = {}
        if regime.noise_on == "shared" and regime.at == "current":
            # The epsilon the paper's accounting gives this run (its calibration target); not a guarantee.
            privacy.update({"stated": False, "paper_accounting_epsilon": row["epsilon"],
                            "paper_accounting_steps": s["rounds"] * s["local_steps"]})
        elif dict(program.static).get("placement") == "central":
            # the aggregate's statement (one draw on the owners' sum) is the run's; each owner's own message at
            # z / sqrt(n) is what the sweep's per-silo ledger gave
            algorithm = _build(regime, dict(program.static), epsilon=row["epsilon"],
                               learning_rate=row["learning_rate"], noise_multiplier=row["noise_multiplier"])
            ledger = make_ledger(algorithm, np.asarray(trial.train.counts), "rdp", central=True)
            out["epsilon_spent"] = ledger.record(s["rounds"]).epsilon(DELTA)
            privacy.update({"statement": "central: the owners' noise shares sum to one draw on their sum (secure "
                                         "aggregation, or one draw by a trusted aggregator)",
                            "per_owner_epsilon": row["epsilon_spent"]})
        return {**out, "privacy": privacy}

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


def tuned_learning_rate(dataset: str, results_dir=None, study: str | None = None, placement: str = "local") -> float:
    """The learning rate a tuning study chose: the lowest mean validation error over its runs (read from
    its committed ``results.json``). ``study`` (default ``tuning-DATASET``: the no-DP regime over its
    panels) may name ``dp-learning-rate`` (the full-DP and joint-DP regimes at eps 1, over its panels
    ``DP_RATE_CHOICE_PANELS``; MNIST, or its variant named by ``dataset``; with ``placement="central"`` its
    central variant, over every panel it ran)."""
    name = study or f"tuning-{dataset}"
    variant = None
    if study == "dp-learning-rate":
        parts = ([] if dataset == "mnist" else [dataset]) + (["central"] if placement == "central" else [])
        variant = "-".join(parts) or None
    default = HOME / "results" / name / (variant or "")
    path = Path(results_dir or default) / "results.json"
    if not path.exists():
        command = f"jaxfl reproduce huang-jdp/{name}" + (f" --variant {variant}" if variant else "")
        raise ValueError(f"no tuning results at {path}: run `{command}` first")
    panels = DP_RATE_CHOICE_PANELS if study == "dp-learning-rate" and placement == "local" else None
    errors = _validation_errors(json.loads(path.read_text())["runs"], panels)
    if not errors:
        raise ValueError(f"no runs of the panels {', '.join(panels or ())} in {path} to choose a learning rate from")
    return _chosen(errors)


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


def _central_variant(dataset: str, unit: str = "iterations") -> dict:
    """The ``central`` (and ``central-epochs``) variants: Table 1 with the DP regimes' noise placed centrally
    (every step a global update: one draw on the owners' sum), at the rate ``huang-jdp/dp-learning-rate``'s
    central variant chose on validation data; per-silo and no-DP as in the base form."""
    source = "huang-jdp/dp-learning-rate --variant " + ("" if dataset == "mnist" else f"{dataset}-") + "central"
    return {"reuses_base_parts": True,
            "settings": {"placement": "central", "private_local_unit": unit, "private_learning_rates":
                         lambda: (tuned_learning_rate(dataset, study="dp-learning-rate", placement="central"),)},
            "config": {"learning_rate_private": source,
                       "note": f"central noise placement (one draw N(0, (z C)^2) on the owners' sum of clipped "
                               f"gradients per global update; each step a global update), the DP regimes reading E "
                               f"as local {unit} (per-silo and no-DP as in the base form) at the learning rate "
                               f"{source} chose on validation accuracy (that choice is not itself private)"}}


def _panels(ns) -> tuple:
    return tuple(Panel(f"n = {n}", (("owners", n),)) for n in ns)


def _rate_label(lr: float) -> str:
    return f"{NO_DP}, learning rate {lr:g}"


def _tuning_family() -> Family:
    """The no-DP regime over the learning-rate grid, one reported row per rate (labelled by it)."""
    regime = REGIMES["no_dp"]
    return Family(regime.name, regime.label, functools.partial(_build, regime), _programs(regime), accountant=None,
                  describe=lambda study, panel, trial, program, row: {"algorithm": _rate_label(row["learning_rate"])})


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


def _table2_dp_tuned() -> dict:
    """Every Table 2 regime is private, so all run at the DP rate; n = 4 and 16 join n = 256 because that rate
    trains the DP regimes there at eps 1 (Table 1's dp-tuned rows). The paper reports n = 256 only."""
    variant = _dp_tuned_variant("mnist")
    return {**variant, "panels": _panels((4, 16, 256)),
            "config": {**variant["config"], "panel": "n = 4 and 16 (where the DP rate trains at eps 1) beside "
                                                     "n = 256, the paper's (its caption says 128, digest §5.6)"}}

# ------------------------------------------------------------------------------------------------
# The noise the paper's setting implies (computed, no training)


def _noise_row(static: dict, *, epsilon: float) -> dict:
    """One (n, reading of E) cell: the calibrated noise multiplier and the noise it puts on a coordinate of one
    owner's noisy mean gradient (``z C / (q m)``) and of the mean over the ``n`` owners' (``/ sqrt(n)``; placed
    centrally, one draw on the mean: ``/ n``, the same ``z`` since central DP-SGD takes as many steps)."""
    n, unit = static["owners"], static["reading"]
    s = schedule({**SETTINGS, "local_unit": unit}, n)  # a settings mapping serves: schedule reads study[name]
    steps = s["rounds"] * s["local_steps"]
    z = noise_multiplier_for(epsilon, s["rate"], steps, DELTA)
    per_owner = z * CLIP / (s["rate"] * SETTINGS["records"] / n)
    return {"metrics": {"noise_multiplier": z, "noise_std_owner": per_owner, "noise_std_mean": per_owner / math.sqrt(n),
                        "noise_std_central": per_owner / n, "steps": steps},
            "epsilon_spent": epsilon_for(z, s["rate"], steps, DELTA), "delta": DELTA,
            "seed": None, "owners": n, "sampling_rate": s["rate"], "local_steps": s["local_steps"],
            "rounds": s["rounds"]}


def _noise_programs(unit: str):
    def programs(study: Study, panel: Panel, trial: Trial) -> list[Program]:
        return [Program((("reading", unit), ("owners", panel["owners"])), [{"epsilon": e} for e in study["epsilons"]],
                        0)]

    return programs


def _dp_rate_label(label: str, lr: float) -> str:
    return f"{label}, learning rate {lr:g}"


def _dp_rate_family(regime: Regime) -> Family:
    """``regime``'s family with one reported row per learning rate (labelled by it)."""
    family = _families((regime,))[0]

    def describe(study, panel, trial, program, row):
        return {**family.describe(study, panel, trial, program, row),
                "algorithm": _dp_rate_label(regime.label, row["learning_rate"])}

    return dataclasses.replace(family, describe=describe)
