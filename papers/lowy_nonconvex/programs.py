"""The programs of Lowy et al.'s studies: the trials, the algorithm families (builds, grids, calibrations) and the
report layout."""
from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from jaxfl.accounting import variance_reduced_noise as A
from jaxfl.algorithms import local_sgd, minibatch_sgd, variance_reduced
from jaxfl.studies.report import Column, Curve, Figure, Report, Table, paired_overview
from jaxfl.studies.spec import Combine, Family, Panel, Program, Study, Trial, train_loss_and_test_error
from jaxfl.models import nets
import optax


ALG3, ALG11 = "ISRL-DP FedProx-SPIDER (Alg. 3)", "ISRL-DP Alt Fed-SPIDER (Alg. 11)"
PAPER = ("Lowy, Ghafelebashi & Razaviyayn, Private Non-Convex Federated Learning Without a Trusted Server "
         "(Lowy et al.), §4 / App. H")
SPIDER, MB, LOCAL = "ISRL-DP SPIDER", "ISRL-DP MB-SGD", "ISRL-DP Local SGD"
NP_MB, NP_LOCAL = "MB-SGD (non-private)", "Local SGD (non-private)"
MODEL_SEED = 1                       # the authors' seedModel = 1: one fixed initialisation for every run


def calibration(counts) -> tuple[int, float]:
    """``(n, delta)`` the noise is calibrated with: the smallest silo, ``delta = 1/n^2``."""
    counts = np.asarray(counts)
    n = int(np.min(counts[counts > 0]))
    return n, 1.0 / n**2


def _trial(study: Study, t: int) -> Trial:
    d = study["trial_data"](t, **study["data_options"])
    limit = study["test_limit"]
    return Trial.with_test_set(d.train, d.test_x[:limit], d.test_y[:limit], d.deltas, d.info)


def _build(family: str, static: dict, *, epsilon, step_size, clip_norm, unit_z, n, delta):
    m, rounds, k, q, loss = (static[f] for f in ("silos_per_round", "rounds", "batch_size", "phase_length", "loss"))
    if isinstance(epsilon, float):   # host, for the accounting: the formula at epsilon itself
        z = A.experiment_noise_multipliers(family, int(n), float(delta), epsilon, rounds, k, q,
                                           spider_calibration=static.get("spider_calibration", "paper")) \
            if epsilon > 0 else jax.tree_util.tree_map(lambda u: 0.0, unit_z)
    else:
        scale = jnp.where(epsilon > 0, 1.0 / jnp.maximum(epsilon, 1e-6), 0.0)
        z = jax.tree_util.tree_map(lambda u: u * scale, unit_z)
    if family == "mbsgd":
        return minibatch_sgd(loss, server_opt=optax.sgd(step_size), batch_size=k, clip_norm=clip_norm,
                             noise_multiplier=z, participation=m)
    if family == "local":
        return local_sgd(loss, client_opt=optax.sgd(step_size), local_steps=k, batch_size=1, clip_norm=clip_norm,
                         noise_multiplier=z, participation=m, clients_per_pass=static.get("clients_per_pass"))
    if family == "spider":
        return variance_reduced.fedprox_spider(loss, step_size=step_size, phase_length=q, clip_norm=clip_norm,
                                         batch_size=k, noise_multiplier=z[0], difference_noise_multiplier=z[1],
                                         participation=m)
    return variance_reduced.alt_fed_spider(loss, step_size=step_size, batch_size=k, clip_norm=clip_norm,
                                     noise_multiplier=z[0], difference_noise_multiplier=z[1], participation=m)


def _programs(family: str):
    def programs(study: Study, panel: Panel, trial: Trial):
        m, rounds = panel["silos_per_round"], panel["rounds"]
        n, delta = calibration(trial.train.counts)
        k = A.batch_experiment_code(n, rounds)
        steps = dict(study["steps"])[("spider" if family == "alt" else family, rounds)]
        grid = {"epsilon": [*study["epsilons"], *([0.0] if family in ("mbsgd", "local") else [])],
                "step_size": list(steps), "clip_norm": list(study["clips"])}
        phases = dict(study["phase_lengths"])[rounds] if family == "spider" else (None,)
        per_pass = study.settings.get("local_clients_per_pass") if family == "local" else None  # None: one vmap
        spider_noise = study.settings.get("spider_calibration", "paper")
        out = []
        for q in phases:
            unit = A.experiment_noise_multipliers(family, n, delta, 1.0, rounds, k, q, spider_calibration=spider_noise)
            static = (("loss", study["loss"]), ("silos_per_round", m), ("rounds", rounds), ("batch_size", k),
                      ("phase_length", q))
            if family == "spider" and spider_noise != "paper":
                static += (("spider_calibration", spider_noise),)
            if per_pass:
                static += (("clients_per_pass", per_pass),)
            out.append(Program(static, grid, 2 * rounds if family == "alt" else rounds,
                               {"unit_z": jax.tree_util.tree_map(lambda u: np.float32(u), unit), "n": n,
                                "delta": delta}, {"batch_size": k, "phase_length": q}))
        return out

    return programs


def _describe(family: str):
    def describe(study, panel: Panel, trial: Trial, program: Program, row: dict) -> dict:
        if not row["private"]:
            return {"noise_multiplier": 0.0}
        static = dict(program.static)
        spider_noise = static.get("spider_calibration", "paper")
        z = A.experiment_noise_multipliers(family, program.constants["n"], program.constants["delta"],
                                           row["epsilon"], static["rounds"], static["batch_size"],
                                           static["phase_length"], spider_calibration=spider_noise)
        how = ("the authors' code: Thm F.1's sigma_1 without max(R/q, 1)" if spider_noise == "authors-code" else
               "paper App. H / authors' code (moments-accountant heuristics): not verified by jaxfl")
        return {"noise_multiplier": list(z) if isinstance(z, tuple) else z, "privacy": {
            "epsilon_nominal": row["epsilon"], "nominal_calibration": how}}

    return describe


def _family(name, label, nonprivate=None, short=None):
    return Family(name, label, functools.partial(_build, name), _programs(name), nonprivate_label=nonprivate,
                  accountant="lowy", describe=_describe(name), short=short)


FAMILIES = (_family("mbsgd", MB, NP_MB), _family("local", LOCAL, NP_LOCAL),
            _family("spider", ALG3, short=lambda r: f"Alg. 3 q={r['phase_length']}"),
            _family("alt", ALG11, short=lambda r: "Alg. 11"))

REPORT = Report(
    table=Table(columns=(Column(SPIDER, SPIDER), Column("SPIDER variant(s)", SPIDER, "field:variant"),
                         Column(MB, MB), Column(LOCAL, LOCAL), Column("FedProx-SPIDER (Alg. 3)", ALG3),
                         Column("Alt Fed-SPIDER (Alg. 11)", ALG11),
                         Column("SPIDER <= MB <= Local (means / bars)", value="ordered",
                                algorithms=(SPIDER, MB, LOCAL)),
                         Column("certified eps SPIDER", SPIDER, "certified"),
                         Column("certified eps MB", MB, "certified"),
                         Column("certified eps Local", LOCAL, "certified")),
                metric_name="misclassification", references=(NP_MB, NP_LOCAL),
                paired=(("SPIDER - MB-SGD", SPIDER, MB), ("MB-SGD - Local SGD", MB, LOCAL),
                        ("SPIDER - Local SGD", SPIDER, LOCAL))),
    figure=Figure(curves=(Curve(SPIDER, {"color": "tab:purple", "marker": "D"}),
                          Curve(MB, {"color": "tab:blue", "marker": "o"}),
                          Curve(LOCAL, {"color": "tab:orange", "marker": "s"}),
                          Curve(NP_MB, {"color": "tab:green", "linestyle": "--"}, line=True),
                          Curve(NP_LOCAL, {"color": "tab:red", "linestyle": ":"}, line=True)),
                  title="{dataset_title}, {panel}", ylabel="test error (misclassification rate)",
                  xlabel="epsilon (paper's nominal calibration; delta = 1/n^2)",
                  caption="{trials} trial(s) x {repetitions} rep(s); error bars: 5th-95th percentiles over trials; "
                          "test error of the final iterate w_R; hyperparameters chosen per epsilon by final training "
                          "loss. ISRL-DP SPIDER = the better of FedProx-SPIDER (Alg. 3, over q) and Alt Fed-SPIDER "
                          "(Alg. 11)."),
    header="{name}, {panel}, {trials} trial(s) x {reps} rep(s), misclassification (mean [5th, 95th percentile] "
           "over trials; {form} form)",
    notes=lambda doc: paired_overview(doc, REPORT) + "\n\n" + PAPER_AVERAGES)

#: Section 4's aggregate claim (digest §6.4), over all of the paper's experiments and privacy levels.
PAPER_AVERAGES = ("Paper (Section 4, averaged over all its experiments and privacy levels): SPIDER improves on "
                  "ISRL-DP Local SGD by 6.06% and on ISRL-DP MB-SGD by 1.72% (whether relative or absolute is not "
                  "stated), and \"ISRL-DP MB-SGD never outperformed ISRL-DP SPIDER for any value of eps\".")


def _steps(rounds_list, mb, local, spider) -> tuple:
    return tuple(((f, r), s) for r in rounds_list for f, s in (("mbsgd", mb(r)), ("local", local(r)),
                                                               ("spider", spider(r))))


def _panels(*pairs) -> tuple:
    return tuple(Panel(f"M = {m}, R = {r}", (("silos_per_round", m), ("rounds", r))) for m, r in pairs)


def _trials(default: int) -> int:
    """``JAXFL_TRIALS`` overrides the number of trials of a full run (the docs say which was used)."""
    return int(os.environ.get("JAXFL_TRIALS", default))


def _study(name, description, *, title, settings, panels, trials, reps, seed_base, quick, variants=None,
           configs_per_batch=None, notes=()):
    settings = {"data_options": {}, "test_limit": None, **settings}
    module, shape = settings.pop("model")
    return Study(
        name=name, description=description, data=_trial, families=FAMILIES,
        evaluate=train_loss_and_test_error(settings["loss"], settings["error"]),
        init=lambda seed: nets.init_params(module, jax.random.key(seed), shape), init_seed=MODEL_SEED,
        report=REPORT, panels=panels, combine=(Combine(SPIDER, ("spider", "alt")),), trials=trials, reps=reps,
        seed=lambda trial, panel, rep: seed_base + 1000 * trial + 100_000 * panel + rep, settings=settings,
        config={"paper": PAPER, "dataset_title": title, "epsilons": list(settings["epsilons"]),
                "metric": "misclassification", "delta": "1/n_i^2 per silo (calibration at n = min n_i)",
                "noise": "digest §4.6/§4.8/§4.9 (paper App. H / authors' code): "
                         "MB-SGD 8 L^2 R ln(2/delta)/(n^2 eps^2); "
                         "Local SGD K x that per step; FedProx-SPIDER 16 L^2 ln(1/delta) max(R/q,1)/(eps^2 n^2) and "
                         "64 L^2 R ln(1/delta)/(eps^2 n^2) (sigma_2 = inf); Alt Fed-SPIDER 8 / 32 L^2 R ln(2/delta)/"
                         "(n^2 eps^2); L = the clip threshold C (per example, global L2 norm)",
                "accountant": "lowy (with-replacement sampling, each silo's own transcript; Alt Fed-SPIDER: 2R "
                              "messages; inf = nothing certified)",
                "aggregation": "mean over the M participating silos; reported iterate: final w_R",
                "notes": list(notes)},
        quick=quick, variants=variants or {}, configs_per_batch=configs_per_batch)
