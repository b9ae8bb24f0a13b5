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


import jax

from jaxfl.studies.registry import register
from jaxfl.studies.report import Report, Table
from jaxfl.studies.spec import Family, Panel, Select, Study, Trial
from jaxfl.models import nets
from papers.huang_jdp.data import _trial, evaluate
from papers.huang_jdp.notes import _noise_columns, _report, _table1_notes, _tuning_report
from papers.huang_jdp.paper import (BATCH, CLIP, DELTA, NOISE_LABELS, PAPER, SETTINGS, TABLE3, TUNING_QUICK_RATES,
                                    TUNING_RATES)
from papers.huang_jdp.regimes import (REGIMES, _central_variant, _dp_tuned_variant, _families, _noise_programs,
                                      _noise_row, _panels, _tuning_family, tuned_learning_rate)


EPOCHS_VARIANT = {"settings": {"local_unit": "epochs"},
                  "config": {"note": "Table 3's E read as local epochs (its header) instead of iterations"}}


QUICK = {"trials": 1, "reps": 1, "panels": (Panel("n = 4", (("owners", 4),)), Panel("n = 16", (("owners", 16),))),
         "settings": {"records": 1_000, "test_records": 500, "table3": {n: (1, 2) for n in (4, 16, 64, 128)},
                      "learning_rates": (0.05,)},
         "config": {"note": "quick form: 1,000 records, one local step, two rounds, one run, learning rate fixed at "
                             "0.05"}}


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
        variants={"epochs": EPOCHS_VARIANT, "dp-tuned": _dp_tuned_variant(dataset),
                  "central": _central_variant(dataset), "central-epochs": _central_variant(dataset, "epochs")})


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
            "noise_std_mean": "noise_std_owner / sqrt(n): on the mean of the n owners' (FedAvg of one-step deltas)",
            "noise_std_central": "noise_std_owner / n: one central draw on the owners' mean (noise_placement="
                                 "'central', each step a global update)"},
    quick={}))


TUNING = {d: register(_tuning(d)) for d in ("mnist", "fashion-mnist")}
TABLE_1 = {d: register(_table1(d)) for d in ("mnist", "fashion-mnist")}


