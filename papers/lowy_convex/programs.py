"""The programs of Lowy & Razaviyayn's studies: the trials, the algorithm families (builds, grids, calibrations), the
accounting of each reported row, and the report layout."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import dp_accounting
import numpy as np

from jaxfl.accounting import PldAccountant, epsilon_for
from jaxfl.algorithms import noisy_sgd
from jaxfl.studies.report import Column, Curve, Figure, Report, Table
from jaxfl.studies.spec import Family, Panel, Program, Study, Trial, scaled, train_loss_and_test_error


PAPER = "Lowy & Razaviyayn, Private Federated Learning Without a Trusted Server (Lowy & Razaviyayn), App. I"
MB, LOCAL = "ISRL-DP MB-SGD", "ISRL-DP Local SGD"
NP_MB, NP_LOCAL = "MB-SGD (non-private)", "Local SGD (non-private)"


def _trial(study: Study, t: int) -> Trial:
    d = study["trial_data"](t, **study["data_options"])
    naive = {"naive": jnp.asarray(d.info["naive"], jnp.float32)} if "naive" in d.info else {}
    return Trial.with_test_set(d.train, d.test_x, d.test_y, d.deltas, {"lipschitz": d.lipschitz, **d.info}, **naive)


def _seed_averaged_error(params, trial: Trial, study: Study) -> dict:
    """The paper's MNIST / obesity error: of ``w_R`` averaged over the repetitions."""
    mean = jax.tree_util.tree_map(lambda a: jnp.asarray(a.mean(axis=0)), params)
    ev = trial.eval_data
    return {"test_error": float(study["error"](mean, ev["test_x"], ev["test_y"], ev))}


def _build(family: str, static: dict, *, epsilon, step_size, unit_z, lipschitz, clip_norm=None):
    z = scaled(unit_z, epsilon)
    clip = lipschitz if clip_norm is None else clip_norm
    k, m, scripts = static["batch_size"], static["silos_per_round"], static["scripts"]
    if family == "mbsgd" and scripts:
        return noisy_sgd.authors_scripts_minibatch_sgd(static["loss"], step_size=step_size, batch_size=k,
                                                        clip_norm=clip, noise_multiplier=z, participation=m,
                                                        **dict(scripts))
    if family == "mbsgd":
        return noisy_sgd.noisy_minibatch_sgd(static["loss"], step_size=step_size, batch_size=k, clip_norm=clip,
                                              noise_multiplier=z, participation=m)
    window = dict(scripts).get("window", 1)
    window = {"averaging": "window", "window": window} if window > 1 else {}
    return noisy_sgd.noisy_local_sgd(static["loss"], step_size=step_size, local_steps=k, clip_norm=clip,
                                      noise_multiplier=z, participation=m, **window)


def _unit_z(family: str, study: Study, trial: Trial):
    """``z(eps = 1)`` per silo (a float when the silos agree) from the library's ``"experiment"`` rules."""
    counts, k, rounds = np.asarray(trial.train.counts), study["batch_size"], study["rounds"]
    if family == "mbsgd":
        return noisy_sgd.calibrate_minibatch_sgd(clip_norm=1.0, counts=counts, rounds=rounds, epsilon=1.0,
                                                  delta=trial.deltas, calibration="experiment",
                                                  batch_size=k).noise_multiplier
    return noisy_sgd.calibrate_local_sgd(clip_norm=1.0, counts=counts, rounds=rounds, local_steps=k, epsilon=1.0,
                                          delta=trial.deltas).noise_multiplier


def _programs(family: str):
    def programs(study: Study, panel: Panel, trial: Trial):
        grid = {"epsilon": [*study["epsilons"], 0.0], "step_size": list(study[f"{family}_steps"])}
        if study["clips"] is not None:
            grid["clip_norm"] = list(study["clips"])
        lipschitz = trial.info["lipschitz"]
        constants = {"unit_z": _unit_z(family, study, trial), "lipschitz": 1.0 if lipschitz is None else lipschitz}
        static = (("loss", study["loss"]), ("batch_size", study["batch_size"]),
                  ("silos_per_round", panel["silos_per_round"]), ("scripts", study["scripts"]))
        return [Program(static, grid, study["rounds"], constants)]

    return programs


def _describe(family: str):
    def describe(study: Study, panel: Panel, trial: Trial, program: Program, row: dict) -> dict:
        out = {} if "clip_norm" in row else {"clip_norm": trial.info["lipschitz"]}
        if not row["private"]:
            return {**out, "noise_multiplier": 0.0}
        z = scaled(program.constants["unit_z"], row["epsilon"])
        counts = np.asarray(trial.train.counts, np.float64)
        rate, steps = (study["batch_size"] / counts, study["rounds"]) if family == "mbsgd" else \
            (1.0 / counts, study["rounds"] * study["batch_size"])
        zs = np.broadcast_to(np.asarray(z, np.float64), counts.shape)
        silos = {(float(a), float(b), float(c), int(n)) for a, b, c, n in zip(zs, rate, trial.deltas, counts)}
        reference = max(_rdp(zi, q, steps, d) for zi, q, d, _ in silos)
        draws = study["batch_size"] if family == "mbsgd" else 1
        tight = None if study["scripts"] else max(_pld(n, draws, zi, steps, d, study["pld_grid"])
                                                  for zi, _, d, n in silos)
        return {**out, "noise_multiplier": np.asarray(z).tolist(), "privacy": {
            "epsilon_nominal": row["epsilon"],
            "epsilon_pld": tight,
            "pld_note": "what the noise run actually certifies: jaxfl's PLD of the Gaussian on draws with "
                        "replacement (jaxfl.accounting.with_replacement), replace-one, each silo's R rounds, max over "
                        "silos; epsilon_spent is the 'lowy' closed-form chain of the paper's proof",
            "nominal_calibration": "paper §6 (Abadi et al. Thm 1, constants unspecified, Poisson assumed): "
                                   "not verified by jaxfl",
            "epsilon_rdp_poisson_reference": reference,
            "reference_note": "RDP epsilon if the minibatches were Poisson-sampled; NOT a guarantee for the "
                              "with-replacement sampling actually run"}}

    return describe


@functools.lru_cache(maxsize=4096)
def _rdp(z: float, rate: float, steps: int, delta: float) -> float:
    return epsilon_for(z, rate, steps, delta)


#: The PLD grid (nats) of the with-replacement certificate; its rounding is pessimistic, so a coarser grid
#: is still an upper bound (MNIST at nominal 0.75: 0.7094 at 1e-3 against 0.7093 at 1e-4, 10x faster). The
#: quick forms use a coarser one (0.716 there at 1e-2; 143.36 against 143.36 at 1e-3 where epsilon is large).
PLD_GRID, QUICK_PLD_GRID = 1e-3, 3e-2


@functools.lru_cache(maxsize=4096)
def _pld(n: int, draws: int, z: float, steps: int, delta: float, grid: float) -> float:
    accountant = PldAccountant(grid, neighboring_relation="replace_one")
    accountant.compose(dp_accounting.SampledWithReplacementDpEvent(n, draws, dp_accounting.GaussianDpEvent(z)), steps)
    return accountant.epsilon(delta)


FAMILIES = (
    Family("mbsgd", MB, functools.partial(_build, "mbsgd"), _programs("mbsgd"), nonprivate_label=NP_MB,
           accountant="lowy", describe=_describe("mbsgd")),
    Family("local", LOCAL, functools.partial(_build, "local"), _programs("local"), nonprivate_label=NP_LOCAL,
           accountant="lowy", describe=_describe("local")),
)


def _report(title: str, metric: str, bands: bool = True) -> Report:
    ylabel = {"misclassification": "test error (misclassification rate)", "relative RMSE": "relative test RMSE"}
    bars = ("error bars: 5th-95th percentiles over trials" if bands
            else "means over trials (no error bars, as the paper)")
    return Report(
        table=Table(columns=(Column(MB, MB), Column(LOCAL, LOCAL),
                             Column("PLD eps MB-SGD", MB, "privacy:epsilon_pld"),
                             Column("PLD eps Local SGD", LOCAL, "privacy:epsilon_pld"),
                             Column("closed-form eps MB-SGD", MB, "certified"),
                             Column("RDP-Poisson reference MB", MB, "privacy:epsilon_rdp_poisson_reference")),
                    metric_name=metric, references=(NP_MB, NP_LOCAL)),
        figure=Figure(curves=(Curve(MB, {"color": "tab:blue", "marker": "o"}),
                              Curve(LOCAL, {"color": "tab:orange", "marker": "s"}),
                              Curve(NP_MB, {"color": "tab:green", "linestyle": "--"}, line=True),
                              Curve(NP_LOCAL, {"color": "tab:red", "linestyle": ":"}, line=True)),
                      title=title + ", {panel}", ylabel=ylabel[metric], bands=bands, certified_caption=True,
                      xlabel="epsilon (paper's nominal calibration; delta_i = 1/n_i^2)", columns=3,
                      caption="{trials} trials, R = {rounds}, K = {batch_size_K}; " + bars + ".\nNoise: the "
                              "paper's calibration (nominal eps, unverified). The closed-form 'lowy' chain certifies "
                              "(inf = nothing; the tables give the tight PLD):"),
        header="{name}, {panel}, {trials} trials, " + metric + " (mean [5th, 95th percentile] over trials; "
               "{form} form)")


def _study(name, description, *, dataset, metric, title, settings, params, quick, trials, seed_base, final=None,
           panels=(25,), bands=True, variants=None, configs_per_batch=None, notes=()):
    """A study of Lowy & Razaviyayn's convex ISRL-DP paper; ``params``: the initial model (w_0 = 0, the same
    for every run)."""
    settings = {"loss": None, "error": None, "clips": None, "scripts": (), "data_options": {}, "pld_grid": PLD_GRID,
                **settings}
    quick = {**quick, "settings": {"pld_grid": QUICK_PLD_GRID, **quick.get("settings", {})}}
    k, r = settings["batch_size"], settings["rounds"]
    return Study(
        name=name, description=description, data=_trial, families=FAMILIES,
        evaluate=train_loss_and_test_error(settings["loss"], settings["error"], True), init=lambda seed: params,
        report=_report(title, metric, bands),
        panels=tuple(Panel(f"M = {m}", (("silos_per_round", m),)) for m in panels), trials=trials, reps=3,
        seed=lambda trial, panel, rep: seed_base + 1000 * trial + rep, settings=settings, final=final,
        config={"paper": PAPER, "dataset": dataset, "metric": metric, "rounds": r, "batch_size_K": k,
                "epsilons": list(settings["epsilons"]), "delta": "1/n_i^2 per silo",
                "noise": "paper §6: sigma^2 = 8 L^2 R ln(1/delta)/(n^2 eps^2) (MB-SGD, on the minibatch mean); "
                         "8 L^2 R K ln(1/delta)/(n^2 eps^2) per Local SGD step",
                "accountant": "pld (privacy.epsilon_pld: the PLD of the Gaussian on draws with replacement, "
                              "replace-one, R rounds of each silo's own transcript) and lowy (epsilon_spent: Ullman "
                              "amplification + advanced composition; inf = nothing certified)",
                "aggregation": "mean over the M participating silos; reported iterate: final w_R",
                "test_error_of": "repetition-averaged w_R" if final else "mean over repetitions of the test error "
                                                                         "of w_R",
                "notes": list(notes)},
        quick=quick, variants=variants or {}, configs_per_batch=configs_per_batch)
