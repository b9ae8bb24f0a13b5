"""``jaxfl reproduce lowy-nonconvex/spider-noise``: what the MNIST experiment's noise certifies, computed (no training).

FedProx-SPIDER's checkpoint noise two ways -- Thm F.1's ``sigma_1^2 = 16 L^2 ln(1/delta) max(R/q, 1) / (eps^2 n^2)``
(``paper``) and the authors' code's, without ``max(R/q, 1)`` (``authors-code``) -- and ISRL-DP MB-SGD's, at each
nominal epsilon of the MNIST grid, on a silo of ``n`` records (``delta = 1/n^2``, ``K`` the authors' batch). Each row
is the epsilon one silo's transcript of ``R`` rounds spends by the PLD accountant (``epsilon_spent``:
with-replacement minibatches, replace-one, a pessimistic privacy-loss grid of ``PLD_GRID`` nats) and by the
``"lowy"`` accountant the MNIST study reports (``epsilon_lowy``; inf where it certifies nothing).
"""
from __future__ import annotations

import numpy as np

from jaxfl.accounting import variance_reduced_noise as A
from jaxfl.engine import make_ledger
from jaxfl.models import nets
from jaxfl.studies.registry import register
from jaxfl.studies.report import Column, Report, Table
from jaxfl.studies.spec import Family, Panel, Program, Select, Study, Trial
from papers.lowy_nonconvex import data as D
from papers.lowy_nonconvex.programs import MB, PAPER, _build, calibration

#: The PLD accountant's privacy-loss grid (nats): 10x the library default and about 10x faster; still an upper bound.
PLD_GRID = 1e-3
FAMILIES = {"mbsgd": (MB, "mbsgd", None, "paper"),
            **{f"spider-{c}-q{q}": (f"SPIDER q={q}, {c} noise", "spider", q, c)
               for q in (1, 2) for c in A.SPIDER_CALIBRATIONS}}


def _trial(study: Study, t: int, panel: Panel | None = None) -> Trial:
    n, delta = calibration(D.mnist_trial(t, **study["data_options"]).train.counts)
    return Trial(None, None, delta, {"n": n})


def _row(static: dict, *, epsilon: float) -> dict:
    family, q, noise, n, rounds = (static[f] for f in ("family", "phase_length", "calibration", "n", "rounds"))
    k, delta = A.batch_experiment_code(n, rounds), 1.0 / n**2
    build = {"loss": nets.mnist_loss, "silos_per_round": 1, "rounds": rounds, "batch_size": k, "phase_length": q,
             "spider_calibration": noise}
    algorithm = _build(family, build, epsilon=epsilon, step_size=0.1, clip_norm=1.0, unit_z=None, n=n, delta=delta)
    counts, deltas = np.array([n]), np.array([delta])
    z = A.experiment_noise_multipliers(family, n, delta, epsilon, rounds, k, q, spider_calibration=noise)
    pld = make_ledger(algorithm, counts, "pld", value_discretization_interval=PLD_GRID)
    return {"metrics": {"noise_multiplier": float(np.atleast_1d(z)[0]),
                        "epsilon_lowy": make_ledger(algorithm, counts, "lowy").record(rounds).epsilon(deltas)},
            "epsilon_spent": pld.record(rounds).epsilon(deltas), "delta": delta, "seed": None, "rounds": rounds,
            "batch_size": k, "phase_length": q}


def _programs(name: str):
    _, family, q, noise = FAMILIES[name]

    def programs(study: Study, panel: Panel, trial: Trial) -> list[Program]:
        static = (("family", family), ("phase_length", q), ("calibration", noise), ("n", trial.info["n"]),
                  ("rounds", panel["rounds"]))
        return [Program(static, [{"epsilon": e} for e in study["epsilons"]], 0)]

    return programs


def _columns() -> tuple:
    out = []
    for label, *_ in FAMILIES.values():
        out += [Column(f"{label}: z", label, "metric:noise_multiplier", fmt="{:.2f}"),
                Column("eps (PLD)", label, "certified"), Column("eps (lowy)", label, "metric:epsilon_lowy")]
    return tuple(out)


SPIDER_NOISE = register(Study(
    name="lowy-nonconvex/spider-noise",
    description="Lowy et al.: the epsilon the MNIST experiment's noise spends (FedProx-SPIDER's checkpoint noise as "
                "the paper prints it and as the authors' code computes it, and MB-SGD's); computed, no training",
    data=_trial, data_per_panel=True, evaluate=None, init=None,
    families=tuple(Family(name, label, _row, _programs(name),
                          runner="compute", accountant=None) for name, (label, *_) in FAMILIES.items()),
    panels=tuple(Panel(f"R = {r}", (("rounds", r),)) for r in (25, 50)), select=Select(score=None),
    settings={"epsilons": (0.75, 1.0, 1.5, 3.0, 6.0, 12.0, 18.0), "data_options": {}},
    report=Report(table=Table(columns=_columns()),
                  header="lowy-nonconvex/spider-noise, {panel}: one MNIST silo (n records, delta = 1/n^2, the "
                         "authors' K), the epsilon its R rounds spend at each nominal epsilon"),
    config={"paper": PAPER, "pld_value_discretization_interval": PLD_GRID,
            "noise": "z: the checkpoint's (SPIDER) or the step's (MB-SGD) noise multiplier on a silo's sum of K "
                     "clipped gradients (sensitivity 2C, replace-one)"},
    quick={"settings": {"epsilons": (0.75, 6.0), "data_options": {"per_label": 40, "pca_fit_records": 3000}},
           "panels": (Panel("R = 4", (("rounds", 4),)),)}))
