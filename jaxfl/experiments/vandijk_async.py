"""van Dijk et al.'s studies (van Dijk et al. 2020, App. E): ``jaxfl reproduce vandijk-async/{table3, sampling, dp}``.

Every run is :func:`jaxfl.algorithms.async_sgd` on a simulated timeline
(:func:`jaxfl.algorithms.async_timeline.simulate`): ``n`` clients, single-record SGD steps on records drawn
with replacement, the server summing the clients' updates and broadcasting per completed round. What the
paper leaves open (digest §9, §11), chosen here and recorded in ``results.json``:

* data: the training set dealt i.i.d. into ``n`` equal shards (:func:`jaxfl.data.partition.iid`); test
  accuracy of the server's model on the official test split (a9a.t, MNIST test), or on a fixed-seed 10 %
  hold-out where there is none (w8a's shards then come from the other 90 %: 8,954 records per client
  against the paper's N_c = 10,000, which w8a's 49,749 records cannot give 5 clients);
* models: logistic regression with a bias; strongly convex adds ``(lambda/2)||w||^2`` with ``lambda = 1/N``
  (``N`` the training records, the bias unregularised) to each record's loss; non-convex is the classic
  LeNet-5 (:class:`jaxfl.models.nets.ClassicLeNet5`, ReLU, max pooling) with cross-entropy;
* asynchrony: the paper does not say how it simulated it. Client speeds ``lognormal(0, 0.2)`` steps per time
  unit, message delays of mean 20 steps (lognormal, spread 0.5), lookahead ``d = 1`` (the paper: "we only
  need to require (2) for d = 1"), exact event times; each trial draws its own timing and data split;
* Table 3's 20,000 iterations are all clients' together (its rounds row is ``ceil(20000 / (5 s))``: ``s`` is
  per client and round), with 5 clients also for MNIST (the shared rounds row; Table 1 says 4).

Quick forms (CI): fewer iterations and records, one trial.
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxfl.accounting import increasing_samples, moments
from jaxfl.algorithms import async_schedules as AS
from jaxfl.algorithms import async_timeline as AT
from jaxfl.algorithms.async_dp import async_sgd, latest_broadcast
from jaxfl.data import loaders
from jaxfl.data.partition import iid, label_pairs
from jaxfl.experiments.registry import register
from jaxfl.experiments.report import Column, Curve, Report, RoundsFigure, Table
from jaxfl.experiments.study import Family, Panel, Program, Select, Study, Trial
from jaxfl.models import nets
from jaxfl.models.linear import init_linear, linear, logistic_loss

PAPER = ("van Dijk, Nguyen, Nguyen, Nguyen, Tran-Dinh & Nguyen, Asynchronous Federated Learning with Reduced "
         "Number of Rounds and with Differential Privacy from Less Aggregated Gaussian Noise (van Dijk et al.), App. E")
TABLE3_SIZES = (50, 100, 200, 500, 700, 1000)
TABLE3 = {  # problem -> accuracy per sample size (Table 3)
    "a9a-strong": (0.8418, 0.8443, 0.8386, 0.8333, 0.8298, 0.7271),
    "a9a-plain": (0.8409, 0.8415, 0.8417, 0.8299, 0.8346, 0.7276),
    "covtype-strong": (0.8429, 0.8402, 0.8408, 0.8360, 0.8278, 0.7827),
    "covtype-plain": (0.8421, 0.8438, 0.8404, 0.8381, 0.8379, 0.7287),
    "mnist-nonconvex": (0.9450, 0.9470, 0.9180, 0.8740, 0.8700, 0.7080),
}
PROBLEMS = {"a9a-strong": "a9a, strongly convex", "a9a-plain": "a9a, plain convex",
            "covtype-strong": "covtype.binary, strongly convex", "covtype-plain": "covtype.binary, plain convex",
            "phishing-strong": "phishing, strongly convex", "phishing-plain": "phishing, plain convex",
            "ijcnn1-strong": "ijcnn1, strongly convex", "ijcnn1-plain": "ijcnn1, plain convex",
            "mnist-nonconvex": "MNIST, non-convex (LeNet-5)", "w8a-strong": "w8a, strongly convex",
            "w8a-plain": "w8a, plain convex", "mnist01-strong": "MNIST 0 vs 1, strongly convex",
            "mnist01-plain": "MNIST 0 vs 1, plain convex"}
TIMING = {"speed_spread": 0.2, "mean_delay": 20.0, "delay_spread": 0.5, "lookahead": 1}


# ------------------------------------------------------------------------------------------------
# Data and models


@functools.lru_cache(maxsize=4)
def _dataset(name: str):
    """``(x, y, x_test, y_test)`` of a9a, ijcnn1 (official test splits), w8a, phishing, covtype.binary (10 %
    fixed-seed hold-out; covtype's features scaled to [0, 1], LIBSVM's ``.scale`` form, fetched where a network
    exists) or MNIST (images in [0, 1])."""
    if name == "mnist":
        x, y = loaders.load_mnist("train")
        xt, yt = loaders.load_mnist("test")
        scale = lambda a: (np.asarray(a, np.float32) / np.float32(255.0))[..., None]   # noqa: E731
        return scale(x), np.asarray(y, np.int32), scale(xt), np.asarray(yt, np.int32)
    if name == "mnist01":                                     # digits 0 and 1, flattened, label = the digit
        x, y, xt, yt = _dataset("mnist")
        keep, keep_t = y <= 1, yt <= 1
        return x[keep].reshape(-1, 784), y[keep], xt[keep_t].reshape(-1, 784), yt[keep_t]
    if name in ("a9a", "ijcnn1"):
        return (*loaders.load_libsvm(name, "train"), *loaders.load_libsvm(name, "test"))
    x, y = _covtype() if name == "covtype" else loaders.load_libsvm(name, "train")
    perm = np.random.default_rng(0).permutation(len(x))  # host-rng-ok: fixed data hold-out, not noise or sampling
    cut = len(x) * 9 // 10
    return x[perm[:cut]], y[perm[:cut]], x[perm[cut:]], y[perm[cut:]]


def _covtype():
    """covtype.binary (``.scale``), downloaded (and verified) on first use; one clear error where it cannot be."""
    try:
        return loaders.load_covtype_binary(scale=True, download=True)
    except OSError as e:   # no network: say what is missing and how to provide it
        raise FileNotFoundError(f"covtype.binary is not bundled and could not be fetched ({e}); run "
                                f"jaxfl.data.download('covtype') where a network exists, or set JAXFL_DATA_DIR to "
                                f"a directory holding covtype/covtype.data.gz") from None


def _loss(problem: str, records: int):
    if problem.startswith("mnist-"):
        return nets.classic_lenet5_loss
    if problem.endswith("strong"):
        lam = 1.0 / records
        return lambda p, x, y: logistic_loss(p, x, y) + 0.5 * lam * jnp.sum(jnp.square(p["w"]))
    return logistic_loss


def _lenet_init(seed):
    return nets.init_params(nets.classic_lenet5, jax.random.PRNGKey(seed), nets.IMAGE28_INPUT_SHAPE)


def evaluate(params, eval_data) -> dict:
    """Test accuracy of the server's model (``eval_data``: ``{"x", "y", "image"}``)."""
    x, y = eval_data["x"], eval_data["y"]
    if x.ndim == 4:
        correct = jnp.argmax(nets.classic_lenet5.apply(params, x), axis=-1) == y
    else:
        correct = (linear(params, x) > 0) == (y > 0)
    accuracy = jnp.mean(correct.astype(jnp.float32))
    return {"test_accuracy": accuracy, "test_error": 1.0 - accuracy}


def _majority(doc: dict) -> list:
    """The notes' line on the accuracy of always predicting the test split's majority class, per dataset."""
    rates = {p["problem"].split("-")[0]: p["test_majority"] for t in doc["config"].get("per_trial", [])
             for p in t["panels"].values() if "test_majority" in p}
    if not rates:
        return []
    return ["", "Predicting the majority class scores " + ", ".join(f"{v:.4f} ({k})" for k, v in rates.items())
            + " on the test split."]


def _trial(study: Study, t: int, panel: Panel) -> Trial:
    problem = panel["problem"]
    x, y, xt, yt = _dataset(problem.split("-")[0])
    clients, per_client = study["clients"], study.settings.get("records_per_client")
    rng = np.random.default_rng(100 + t)  # host-rng-ok: which records a quick form keeps (data layout)
    take = rng.permutation(len(x))[:per_client * clients] if per_client else slice(None)
    split = dict(panel.values).get("split", "iid")
    if split == "biased":      # E.2.4: each client its own digits (0 | 1, or study["digit_groups"])
        train = label_pairs(x[take], y[take], pairs=study["digit_groups"])
    else:
        train = iid(x[take], y[take], clients, seed=t)
    test = slice(None) if study["test_records"] is None else slice(0, study["test_records"])
    labels = np.asarray(yt[test])
    info = {"trial": t, "problem": problem, "clients": clients, "train_records": int(np.sum(np.asarray(train.counts))),
            "test_records": int(len(labels)),
            "test_majority": float(np.max(np.unique(labels, return_counts=True)[1]) / len(labels))}
    return Trial(train, {"x": jnp.asarray(xt[test]), "y": jnp.asarray(yt[test])}, study.settings.get("delta"), info)


def sizes_of(spec: tuple, clients: int) -> np.ndarray:
    """``s[i, c]`` of a schedule spec: per client ``("constant", s, rounds)``, ``("linear", a, rounds)`` (``a i`` from
    ``i = 1``) or ``("dp", s_0, q, m, p, rounds, records)`` (``ceil(N_c q (i + m)^p)``); global and split over the
    clients (``ceil(s_i / n)``) ``("power", a, c, rounds)`` (``a i^c``, ``i = 1..``) or ``("i_over_log", a, rounds)``
    (``a i / ln i``, ``i = 2..``)."""
    if spec[0] == "constant":
        return AS.per_client(AS.constant(spec[1] * clients, spec[2]), clients)
    if spec[0] == "linear":                                   # ("linear", a, rounds): s_{i,c} = a i, i = 1..
        return AS.per_client(AS.power(spec[1] * clients, 1.0, 0.0, spec[2], start=1), clients)
    if spec[0] == "power":                                    # ("power", a, c, rounds): global a i^c, i = 1..
        return AS.per_client(AS.power(spec[1], spec[2], 0.0, spec[3], start=1), clients)
    if spec[0] == "i_over_log":                               # ("i_over_log", a, rounds): global a i / ln i, i = 2..
        return AS.per_client(AS.i_over_log(spec[1], 0.0, spec[2], start=2), clients)
    _, _, q, m, p, rounds, records = spec
    return np.repeat(AS.dp(records, q, m, p, rounds)[:, None], clients, axis=1)


@functools.lru_cache(maxsize=64)
def _timeline(spec: tuple, clients: int, seed: int, timing: tuple) -> AT.Timeline:
    t = dict(timing)
    s = sizes_of(spec, clients)
    draw = AT.draw_timing(clients, s.shape[0], seed=seed, speed_spread=t["speed_spread"], mean_delay=t["mean_delay"],
                          delay_spread=t["delay_spread"])
    return AT.simulate(s, draw, lookahead=t["lookahead"])


def _build(static: dict, *, epsilon, learning_rate, noise_multiplier=0.0, beta=0.0):
    del epsilon
    timeline = _timeline(static["schedule"], static["clients"], static["timing_seed"], static["timing"])
    eta = AS.StepSize(static["step_kind"], learning_rate, beta, static["step_per"])
    return async_sgd(_loss(static["problem"], static["records"]), timeline, step_size=eta,
                     clip_norm=static["clip"], noise_multiplier=noise_multiplier, aggregation=static["aggregation"],
                     sampling=static.get("sampling", "replacement"), records=static.get("client_records"))


def _static(study, trial, problem, schedule, step_kind="constant", step_per="rounds", clip=math.inf, t=0):
    timing = tuple(sorted({**TIMING, **study.settings.get("timing", {})}.items()))
    return (("problem", problem), ("schedule", tuple(schedule)),
            ("clients", int(trial.train.num_silos)), ("timing_seed", int(t)), ("timing", timing),
            ("step_kind", step_kind), ("step_per", step_per), ("clip", clip),
            ("aggregation", study.settings.get("aggregation", "sum")),
            ("records", int(np.sum(np.asarray(trial.train.counts))))) + (
        # the client's sampling, named only when not the paper's (the stated variant, whose rate s_i / N_c takes
        # the clients' record counts as public, fixed in advance: add/remove-one): earlier parts stay valid
        (("sampling", study["client_sampling"]),
         ("client_records", tuple(int(c) for c in np.asarray(trial.train.counts))))
        if study.settings.get("client_sampling", "replacement") != "replacement"
        else ())


def _slices(static) -> int:
    s = dict(static)
    return _timeline(s["schedule"], s["clients"], s["timing_seed"], s["timing"]).num_slices


def _facts(static) -> dict:
    s = dict(static)
    tl = _timeline(s["schedule"], s["clients"], s["timing_seed"], s["timing"])
    return {"rounds": int(tl.sizes.shape[0]), "slices": tl.num_slices, "iterations": int(tl.sizes.sum()),
            "max_lookahead": int(tl.lookahead.max()), "end_time": float(tl.boundaries[-1])}


CURVE_POINTS = 40
"""Learning-curve points per run (the paper's figures plot accuracy against rounds)."""


def _curve(static, columns: dict) -> dict:
    """``Program`` keywords for a run evaluated at ~:data:`CURVE_POINTS` evenly spaced slices and its end:
    ``eval_every`` and ``columns`` with ``curve_server_rounds``, the rounds the server had completed (broadcast)
    when each point was taken, the x axis of the paper's figures."""
    s = dict(static)
    tl = _timeline(s["schedule"], s["clients"], s["timing_seed"], s["timing"])
    every = max(1, tl.num_slices // CURVE_POINTS)
    completed = np.maximum(np.maximum.accumulate(tl.broadcast_after.max(axis=1)), 0)   # [S], the latest k
    points = completed[every - 1::every][: tl.num_slices // every]
    if tl.num_slices % every:                       # the curve's last point is the run's end (Program.eval_every)
        points = np.append(points, completed[-1])
    return {"eval_every": every, "columns": {**columns, **_facts(static), "curve_server_rounds": points.tolist()}}


def _rounds_figure(curves: tuple, title: str) -> RoundsFigure:
    colors = ("C0", "C1", "C2", "C3", "C4", "C5", "C6")
    return RoundsFigure(curves=tuple(Curve(c, {"color": col}) for c, col in zip(curves, colors)), title=title,
                        ylabel="test accuracy (latest broadcast)", x="curve_server_rounds",
                        xlabel="communication rounds completed", caption="Mean over trials (band: min-max); "
                        "evaluated every ~1/40 of the run's slices.")


VARIANTS = {
    "mean": {"settings": {"aggregation": "mean"},
             "config": {"note": "the server applies each client's update divided by n (FedAvg-style) instead of "
                                "the paper's sum: tests whether the paper's numbers fit a mean"}},
    "no-delay": {"settings": {"timing": {"speed_spread": 0.0, "mean_delay": 0.0}},
                 "config": {"note": "equal speeds, no delays: synchronous rounds of the same protocol"}},
    "sequential": {"settings": {"clients": 1},
                   "config": {"note": "one client holding all the data: the iterations as one SGD trajectory, the "
                                      "Hogwild ideal the paper's sum stands for"}},
}
"""Variants of the non-DP studies: the server's aggregation and the timing model (what the paper leaves open)."""


# ------------------------------------------------------------------------------------------------
# Table 3: constant sample sizes


def _size_label(s: int) -> str:
    return f"s = {s} per client"


def _table3_programs(study: Study, panel: Panel, trial: Trial):
    programs = []
    clients = study["clients"]
    for s in study["sizes"]:
        rounds = math.ceil(study["iterations"] / (clients * s))
        static = _static(study, trial, panel["problem"], ("constant", s, rounds), t=trial.info["trial"])
        programs.append(Program(static, {"epsilon": [0.0], "learning_rate": [study["learning_rate"]]}, _slices(static),
                                columns={"sample_size": s, **_facts(static)}))
    return programs


def _table3_notes(doc: dict) -> str:
    acc: dict = {}
    for r in doc["runs"]:
        acc.setdefault((r["problem"], r["sample_size"]), []).append(r["metrics"]["test_accuracy"])
    sizes = sorted({s for _, s in acc})
    lines = ["Table 3 layout (test accuracy, mean over trials; ours | paper):", "",
             "| problem | " + " | ".join(f"s = {s}" for s in sizes) + " |", "|---" * (len(sizes) + 1) + "|"]
    rounds = {r["sample_size"]: r["rounds"] for r in doc["runs"]}
    lines.append("| rounds | " + " | ".join(str(rounds[s]) for s in sizes) + " |")
    for problem in dict.fromkeys(p for p, _ in acc):
        paper = dict(zip(TABLE3_SIZES, TABLE3.get(problem, ())))
        cells = [f"{np.mean(acc[(problem, s)]):.4f}" + (f" \\| {paper[s]:.4f}" if s in paper else "") for s in sizes]
        lines.append(f"| {PROBLEMS[problem]} | " + " | ".join(cells) + " |")
    return "\n".join(lines + _majority(doc))


def _table3(name: str, problems: tuple, init, quick_problem: str, note: str) -> Study:
    return Study(
        name=name,
        description=f"van Dijk et al. Table 3 ({note}): asynchronous FL with constant sample sizes, 20,000 iterations "
                    "over 5 clients, eta 0.0025",
        data=_trial, data_per_panel=True,
        families=(Family("async", "async SGD", _build, _table3_programs, accountant=None,
                         describe=lambda study, panel, trial, program, row: {
                             "algorithm": _size_label(int(row["sample_size"]))}),),
        evaluate=evaluate, init=init,
        report=Report(table=Table(columns=(), metric="test_accuracy", metric_name="test accuracy",
                                  references=tuple(_size_label(s) for s in TABLE3_SIZES), digits=4,
                                  reference_value="mean_std"),
                      header="{name}, {panel}: test accuracy per sample size, {trials} trial(s) ({form} form)",
                      notes=_table3_notes),
        panels=tuple(Panel(PROBLEMS[p], (("problem", p),)) for p in problems), select=Select(score=None),
        trials=3, seed=lambda trial, panel, rep: trial,
        settings={"clients": 5, "iterations": 20_000, "sizes": TABLE3_SIZES, "learning_rate": 0.0025,
                  "test_records": None},
        config={"paper": PAPER, "timing": TIMING, "step_size": "constant 0.0025 per iteration"},
        quick={"trials": 1, "panels": (Panel(PROBLEMS[quick_problem], (("problem", quick_problem),)),),
               "settings": {"iterations": 1_000, "sizes": (50, 100), "records_per_client": 400, "test_records": 1_000},
               "config": {"note": "quick form: one panel, 1,000 iterations, sizes 50 and 100, 400 records per client"}},
        variants=VARIANTS)


TABLE3_A9A = register(_table3("vandijk-async/table3-a9a", ("a9a-strong", "a9a-plain"),
                              lambda seed: init_linear(loaders.LIBSVM_FEATURES["a9a"]), "a9a-strong",
                              "a9a, strongly and plain convex logistic regression"))
TABLE3_COVTYPE = register(_table3("vandijk-async/table3-covtype", ("covtype-strong", "covtype-plain"),
                                  lambda seed: init_linear(loaders.COVTYPE_FEATURES), "covtype-strong",
                                  "covtype.binary, strongly and plain convex logistic regression; fetched from UCI "
                                  "where a network exists"))
TABLE3_MNIST = register(_table3(
    "vandijk-async/table3-mnist", ("mnist-nonconvex",),
    _lenet_init, "mnist-nonconvex", "MNIST, LeNet-5"))


# ------------------------------------------------------------------------------------------------
# E.2.3 (Fig. 1a, 6, 7): constant step and sample size against diminishing step, increasing sample size

DIMINISHING = {"iterations": 20_000, "constant_size": 200, "constant_rate": 0.0025, "eta0": 0.1,
               "increasing_slope": 100, "beta": {"strong": 0.001, "plain": 0.01, "nonconvex": 0.01}}
"""E.2.3 as the digest reads it (§9.7): 20,000 iterations over 5 clients; constant eta 0.0025 with s = 200 per
client (20 rounds); diminishing eta_t = 0.1 / (1 + 0.001 t) (strongly convex) or 0.1 / (1 + 0.01 sqrt t) (plain
convex, and non-convex: Fig. 8), per iteration (diminishing1) or per round (diminishing2), with s_{i,c} = 100 i
(9 rounds: the paper's slope is not given; this is the linear schedule its "9 rounds" fits)."""
CONSTANT_LABEL = "constant eta 0.0025, s = 200"


def _increasing_label(per: str) -> str:
    return f"diminishing{1 if per == 'iterations' else 2}, s = 100 i"


def rounds_for(sizes_per_client, clients: int, iterations: int) -> int:
    """Rounds until the clients' steps together reach ``iterations``."""
    return increasing_samples.rounds_to_reach(np.asarray(sizes_per_client) * clients, iterations)


def _increasing_schedule(study: Study) -> tuple:
    """E.2.3's linearly increasing sizes ``s_{i,c} = slope i`` for as many rounds as reach the iterations."""
    d, clients = study["diminishing"], study["clients"]
    slope = d["increasing_slope"]
    return "linear", slope, rounds_for(slope * np.arange(1, 1000), clients, d["iterations"])


def _diminishing_runs(study: Study, panel: Panel, trial: Trial) -> list:
    """The increasing schedule under eta_0 / (1 + beta t) (strongly convex) or eta_0 / (1 + beta sqrt t),
    per iteration (diminishing1) and per round (diminishing2)."""
    d, t = study["diminishing"], trial.info["trial"]
    convexity = panel["problem"].rsplit("-", 1)[1]
    kind = "inverse" if convexity == "strong" else "inverse_sqrt"
    out = []
    for per in ("iterations", "rounds"):
        static = _static(study, trial, panel["problem"], _increasing_schedule(study), kind, per, t=t)
        out.append(Program(static, [{"epsilon": 0.0, "learning_rate": d["eta0"], "beta": d["beta"][convexity]}],
                           _slices(static), **_curve(static, {"setting": _increasing_label(per)})))
    return out


def _diminishing_programs(study: Study, panel: Panel, trial: Trial):
    d, clients = study["diminishing"], study["clients"]
    constant = ("constant", d["constant_size"], math.ceil(d["iterations"] / (clients * d["constant_size"])))
    static = _static(study, trial, panel["problem"], constant, t=trial.info["trial"])
    return [Program(static, {"epsilon": [0.0], "learning_rate": [d["constant_rate"]]}, _slices(static),
                    **_curve(static, {"setting": CONSTANT_LABEL}))] + _diminishing_runs(study, panel, trial)


STEP_SIZE_RATES = (0.01, 0.005)
"""Fig. 9's constant step sizes: the paper says only diminishing eta_0 = 0.1 reached the accuracy "which can only be
achieved by fine tuning constant step sizes eta = 0.01 and eta = 0.005 for the two data sets" (real-sim, w8a)."""


def _constant_rate_label(lr: float) -> str:
    return f"constant eta {lr:g}, s = 100 i"


def _step_size_programs(study: Study, panel: Panel, trial: Trial):
    """Fig. 9: the same increasing sample sizes under constant step sizes and under diminishing ones."""
    static = _static(study, trial, panel["problem"], _increasing_schedule(study), t=trial.info["trial"])
    return [Program(static, {"epsilon": [0.0], "learning_rate": [lr]}, _slices(static),
                    **_curve(static, {"setting": _constant_rate_label(lr)})) for lr in study["constant_rates"]] \
        + _diminishing_runs(study, panel, trial)


def _mean_curve(runs: list) -> tuple[np.ndarray, np.ndarray]:
    """``(server rounds, accuracy)``: the pointwise mean learning curve of ``runs`` (trials), each sampled at
    the shortest's number of points (as ``curves.png`` draws it)."""
    m = min(len(r["curve"]["test_accuracy"]) for r in runs)
    pick = lambda v: np.asarray(v, np.float64)[np.round(np.linspace(0, len(v) - 1, m)).astype(int)]  # noqa: E731
    return (np.mean([pick(r["curve_server_rounds"]) for r in runs], axis=0),
            np.mean([pick(r["curve"]["test_accuracy"]) for r in runs], axis=0))


def _settings_table(doc: dict, key: str, intro: str, facts=("rounds",), reach: str | None = None) -> str:
    """Notes: per panel and value of the runs' column ``key``, the runs' ``facts`` and final test accuracy
    (mean ± std over trials); with ``reach`` (a value of ``key``), also the first round at which each mean
    learning curve reaches that setting's final mean accuracy in the panel."""
    cells: dict = {}
    for r in doc["runs"]:
        cells.setdefault((r["panel"], r[key]), []).append(r)
    target = {panel: np.mean([r["metrics"]["test_accuracy"] for r in recs])
              for (panel, value), recs in cells.items() if value == reach}
    extra = (f"first round at {reach}'s final accuracy",) if reach is not None else ()
    header = ("panel", key, *facts, "test accuracy", *extra)
    lines = [intro, "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (panel, value), recs in cells.items():
        acc = [r["metrics"]["test_accuracy"] for r in recs]
        row = f"| {panel} | {value} | " + "".join(f"{recs[0][f]} | " for f in facts) + \
            f"{np.mean(acc):.4f} ± {np.std(acc):.4f} |"
        if extra:
            rounds, curve = _mean_curve(recs) if all(r.get("curve") for r in recs) else ([], [])
            hit = np.flatnonzero(np.asarray(curve) >= target.get(panel, np.inf) - 1e-9)
            row += f" {rounds[hit[0]]:.0f} |" if len(hit) else " - |"   # "-": not reached
        lines.append(row)
    return "\n".join(lines + _majority(doc))


def _diminishing_notes(doc: dict) -> str:
    return _settings_table(doc, "setting", "Rounds and final test accuracy (mean ± std over trials). The paper's "
                           "claim (Fig. 1a, E.2.3): the constant setting needs 20 rounds, diminishing steps with "
                           "increasing samples 9, at similar or better accuracy. Last column: from the mean "
                           "learning curve (server rounds completed, mean over trials).", ("rounds", "iterations"),
                           reach=CONSTANT_LABEL)


def _step_size_notes(doc: dict) -> str:
    return _settings_table(doc, "setting", "Rounds and final test accuracy (mean ± std over trials), every setting on "
                           "the same increasing sample sizes. The paper's claim (Fig. 9): diminishing steps from "
                           "eta_0 = 0.1 reach the accuracy that constant steps reach only when fine-tuned (0.01, "
                           "0.005). Last column: from the mean learning curve (server rounds completed, mean over "
                           "trials).", ("rounds", "iterations"), reach=_increasing_label("rounds"))


def _linear_init(name: str):
    return lambda seed: init_linear(loaders.LIBSVM_FEATURES[name])


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


# ------------------------------------------------------------------------------------------------
# E.2.2 (Fig. 3-5): sample-size methods

SAMPLING = {"iterations": 20_000, "a": 50, "exponents": (0.0, 0.25, 0.5, 0.75, 1.0), "eta0": 0.01,
            "beta": {"strong": 0.001, "plain": 0.01}}
"""E.2.2: global ``s_i = 50 i^c`` (the "O(i) method"; the paper does not list its c, these are the digest's
suggestion) and ``50 i / ln i``, ``b = 0``, split over 5 clients; 20,000 iterations; eta0 0.01 per round."""


def _method_label(spec: tuple) -> str:
    return f"50 i^{spec[2]:g}" if spec[0] == "power" else "50 i / ln i"


def _sampling_specs(study: Study) -> list:
    d, n = study["sampling"], study["clients"]
    specs = []
    for c in d["exponents"]:
        spec = ("power", d["a"], c, 1)
        specs.append(spec[:3] + (rounds_for(sizes_of(spec[:3] + (5000,), n)[:, 0], n, d["iterations"]),))
    spec = ("i_over_log", d["a"], 5000)
    specs.append(spec[:2] + (rounds_for(sizes_of(spec, n)[:, 0], n, d["iterations"]),))
    return specs


def _sampling_programs(study: Study, panel: Panel, trial: Trial):
    d, t = study["sampling"], trial.info["trial"]
    convexity = panel["problem"].rsplit("-", 1)[1]
    kind = "inverse" if convexity == "strong" else "inverse_sqrt"
    out = []
    for spec in _sampling_specs(study):
        static = _static(study, trial, panel["problem"], spec, kind, "rounds", t=t)
        out.append(Program(static, [{"epsilon": 0.0, "learning_rate": d["eta0"], "beta": d["beta"][convexity]}],
                           _slices(static), **_curve(static, {"method": _method_label(spec)})))
    return out


def _sampling_notes(figure: str):
    def notes(doc: dict) -> str:
        return _settings_table(doc, "method", f"{figure} layout: communication rounds to 20,000 iterations, and "
                               "final test accuracy (mean ± std over trials), per sample-size method. The paper's "
                               "claim: c = 1 and i / ln i need the fewest rounds at good accuracy. Last column: from "
                               "the mean learning curve (server rounds completed, mean over trials).", reach="50 i^0")

    return notes


def _sampling_study(dataset: str, figure: str, init) -> Study:
    methods = tuple(f"50 i^{c:g}" for c in SAMPLING["exponents"]) + ("50 i / ln i",)
    return Study(
        name=f"vandijk-async/sampling-{dataset}",
        description=f"van Dijk et al. E.2.2 ({figure}): rounds and accuracy by sample-size method "
                    f"(50 i^c, 50 i / ln i) on {dataset}"
                    + ("; fetched from UCI where a network exists" if dataset == "covtype" else ""),
        data=_trial, data_per_panel=True,
        families=(Family("async", "async SGD", _build, _sampling_programs, accountant=None,
                         describe=lambda study, panel, trial, program, row: {"algorithm": row["method"]}),),
        evaluate=evaluate, evaluate_on=latest_broadcast, init=init,
        report=Report(table=Table(columns=(), metric="test_accuracy", metric_name="test accuracy", digits=4,
                                  references=methods, reference_value="mean_std"),
                      header="{name}, {panel}: {trials} trial(s) ({form} form)", notes=_sampling_notes(figure),
                      rounds_figure=_rounds_figure(methods, f"van Dijk et al. {figure} ({{panel}})")),
        panels=tuple(Panel(PROBLEMS[f"{dataset}-{c}"], (("problem", f"{dataset}-{c}"),)) for c in ("strong", "plain")),
        select=Select(score=None), trials=3, seed=lambda trial, panel, rep: trial,
        settings={"clients": 5, "sampling": SAMPLING, "test_records": None},
        config={"paper": PAPER, "timing": TIMING, "sampling": dict(SAMPLING)},
        quick={"trials": 1, "panels": (Panel(PROBLEMS[f"{dataset}-strong"], (("problem", f"{dataset}-strong"),)),),
               "settings": {"sampling": {**SAMPLING, "iterations": 1_000, "exponents": (0.0, 1.0)},
                            "records_per_client": 400, "test_records": 1_000},
               "config": {"note": "quick form: strongly convex only, 1,000 iterations, c in {0, 1} and i / ln i"}},
        variants=VARIANTS)


SAMPLING_STUDY = register(_sampling_study("a9a", "Fig. 3-4", _linear_init("a9a")))
SAMPLING_COVTYPE = register(_sampling_study("covtype", "Fig. 5",
                                            lambda seed: init_linear(loaders.COVTYPE_FEATURES)))


# ------------------------------------------------------------------------------------------------
# E.2.4 (Fig. 2, 10, 11): biased against unbiased data

BIASED = {"eta0": 0.01, "beta": {"strong": 0.001, "plain": 0.01, "nonconvex": 0.01}, "slope": 50}
"""E.2.4: eta0 0.01 per round (diminishing2), eta0 / (1 + beta t) strongly convex, / (1 + beta sqrt t) otherwise;
linear s_{i,c} = 50 i (the paper gives no slope)."""


def _biased_programs(study: Study, panel: Panel, trial: Trial):
    convexity = panel["problem"].rsplit("-", 1)[1]
    clients = trial.train.num_silos
    rounds = rounds_for(BIASED["slope"] * np.arange(1, 1000), clients, study["iterations"])
    static = _static(study, trial, panel["problem"], ("linear", BIASED["slope"], rounds),
                     "inverse" if convexity == "strong" else "inverse_sqrt", "rounds", t=trial.info["trial"])
    return [Program(static, [{"epsilon": 0.0, "learning_rate": BIASED["eta0"], "beta": BIASED["beta"][convexity]}],
                    _slices(static), columns={"split": panel["split"], **_facts(static)})]


def _biased_notes(doc: dict) -> str:
    cells: dict = {}
    for r in doc["runs"]:
        cells.setdefault((r["problem"], r["split"]), []).append(r["metrics"]["test_accuracy"])
    lines = ["Final test accuracy (mean ± std over trials), biased against unbiased clients. The paper's claim "
             "(E.2.4): no significant difference.", "", "| problem | biased | unbiased |", "|---|---|---|"]
    for problem in dict.fromkeys(p for p, _ in cells):
        cell = lambda v: f"{np.mean(v):.4f} ± {np.std(v):.4f}" if v else "-"   # noqa: E731
        lines.append(f"| {PROBLEMS[problem]} | {cell(cells.get((problem, 'biased')))} | "
                     f"{cell(cells.get((problem, 'unbiased')))} |")
    return "\n".join(lines + _majority(doc))


def _biased(name: str, problems: tuple, clients: int, groups: tuple, iterations: int, init, note: str) -> Study:
    panels = tuple(Panel(f"{PROBLEMS[p]}, {split}", (("problem", p), ("split", split)))
                   for p in problems for split in ("biased", "unbiased"))
    return Study(
        name=name, description=f"van Dijk et al. E.2.4 ({note}): biased (each client its own digits) against "
                                "unbiased clients",
        data=_trial, data_per_panel=True,
        families=(Family("async", "async SGD", _build, _biased_programs, accountant=None,
                         describe=lambda study, panel, trial, program, row: {"algorithm": row["split"]}),),
        evaluate=evaluate, init=init,
        report=Report(table=Table(columns=(), metric="test_accuracy", metric_name="test accuracy", digits=4,
                                  references=("biased", "unbiased"), reference_value="mean_std"),
                      header="{name}, {panel}: {trials} trial(s) ({form} form)", notes=_biased_notes),
        panels=panels, select=Select(score=None), trials=3, seed=lambda trial, panel, rep: trial,
        settings={"clients": clients, "digit_groups": groups, "iterations": iterations, "test_records": None},
        config={"paper": PAPER, "timing": TIMING, "biased": dict(BIASED), "digit_groups": [list(g) for g in groups]},
        quick={"trials": 1, "panels": panels[:2], "settings": {"iterations": 1_000, "test_records": 1_000},
               "config": {"note": "quick form: the first problem only, 1,000 iterations"}},
        variants={k: v for k, v in VARIANTS.items() if k != "sequential"})   # the split fixes the clients


BIASED_STUDIES = {
    "mnist01": register(_biased("vandijk-async/biased-mnist01", ("mnist01-strong", "mnist01-plain"), 2, ((0,), (1,)),
                                10_000, lambda seed: init_linear(784), "Fig. 2, 10: logistic regression, MNIST 0 vs 1, "
                                "2 clients, 10,000 iterations")),
    "mnist": register(_biased("vandijk-async/biased-mnist", ("mnist-nonconvex",), 4,
                              ((0, 1, 2), (3, 4, 5), (6, 7), (8, 9)),
                              20_000, lambda seed: nets.init_params(nets.classic_lenet5, jax.random.PRNGKey(seed),
                                                                    nets.IMAGE28_INPUT_SHAPE),
                              "Fig. 11: LeNet-5, 4 clients with digits {0,1,2}, {3,4,5}, {6,7}, {8,9}, "
                              "20,000 iterations")),
}


# ------------------------------------------------------------------------------------------------
# DP (Fig. 12 / 1b): increasing against constant sample sizes at the same per-round noise

DP = {"epsilon": 1.0, "delta": 5.5e-8, "sigma": 8.0, "clip": 0.1, "k_per_client": 25_000, "initial_size": 16,
      "eta0": 0.15, "baseline_rates": (0.01, 0.001)}
INCREASING, CONSTANT = "increasing s (16 + ceil(1.32 i)), diminishing eta", "constant s = 16"
DP_STEPS = {"w8a-strong": ("inverse", 0.001), "w8a-plain": ("inverse_sqrt", 0.01),
            "mnist-nonconvex": ("inverse_sqrt", 0.01)}


def example_3() -> increasing_samples.Selection:
    """The paper's Example 3 (its DP experiments' parameters): N_c = 10,000, eps 1, sigma 8, K = 2.5 epochs."""
    return increasing_samples.select_parameters(DP["initial_size"], 10_000, 1.0, DP["epsilon"], DP["sigma"], 2.5,
                                                r0=1 / math.e,
                                  passes=3)


def _dp_programs(study: Study, panel: Panel, trial: Trial):
    sel, t = example_3(), trial.info["trial"]
    k = study["k_per_client"]
    rounds = increasing_samples.rounds_to_reach(increasing_samples.sample_sizes(10_000, sel.q, sel.m, 1.0,
                                                                                10 * int(sel.rounds)), k)
    increasing = ("dp", DP["initial_size"], sel.q, sel.m, 1.0, rounds, 10_000)
    constant = ("constant", DP["initial_size"], math.ceil(k / DP["initial_size"]))
    kind, beta = DP_STEPS[panel["problem"]]
    sigma, fair = DP["sigma"], round(sel.b_priv, 2)
    out = []
    for schedule, step, grid, label in (
            (increasing, kind, [{"epsilon": e, "learning_rate": DP["eta0"], "noise_multiplier": z, "beta": beta}
                                for e, z in ((DP["epsilon"], sigma), (0.0, 0.0))], INCREASING),
            (constant, "constant", [{"epsilon": e, "learning_rate": lr, "noise_multiplier": z, "beta": 0.0}
                                    for lr in DP["baseline_rates"] for e, z in ((DP["epsilon"], sigma), (0.0, 0.0))]
             + [{"epsilon": DP["epsilon"], "learning_rate": DP["baseline_rates"][0], "noise_multiplier": fair,
                 "beta": 0.0}], CONSTANT)):
        for private in (True, False):
            rows = [g for g in grid if (g["epsilon"] > 0) == private]
            static = _static(study, trial, panel["problem"], schedule, kind if schedule is increasing else "constant",
                             clip=DP["clip"] if private else math.inf, t=t)
            out.append(Program(static, rows, _slices(static), **_curve(static, {"schedule": label})))
    return out


def _dp_name(label: str, lr: float, z: float) -> str:
    return f"{label}, eta {lr:g}" + (f", sigma {z:g}" if z > 0 else ", no DP")


def _dp_names() -> tuple[tuple, tuple]:
    """The DP study's row names: ``(private, non-private)``."""
    fair = round(example_3().b_priv, 2)
    lr, small = DP["baseline_rates"]
    return ((_dp_name(INCREASING, DP["eta0"], DP["sigma"]), _dp_name(CONSTANT, lr, DP["sigma"]),
             _dp_name(CONSTANT, small, DP["sigma"]), _dp_name(CONSTANT, lr, fair)),
            (_dp_name(INCREASING, DP["eta0"], 0.0), _dp_name(CONSTANT, lr, 0.0), _dp_name(CONSTANT, small, 0.0)))


def _dp_describe(study, panel, trial, program, row) -> dict:
    s = dict(program.static)
    sizes = sizes_of(s["schedule"], s["clients"])[:, 0]
    z = row.get("noise_multiplier", 0.0)
    name = _dp_name(program.columns["schedule"], row["learning_rate"], z if row["private"] else 0.0)
    if not row["private"]:
        return {"algorithm": name}
    records = int(np.min(np.asarray(trial.train.counts)))
    delta = DP["delta"]
    stated = s.get("sampling") == "poisson"   # the ledger's epsilon_spent is then the statement
    privacy = {"stated": stated, "records_per_client": records, "sigma": z, "rounds": len(sizes),
               "aggregate_noise": math.sqrt(len(sizes)) * z,
               "moments_epsilon": moments.moments_epsilon(sizes, records, z, delta),
               "tight_epsilon_poisson_rdp": moments.tight_epsilon(sizes, records, z, delta)}
    if s["schedule"][0] == "dp":
        privacy["paper_selection_delta"] = example_3().delta       # the paper's claim at eps 1 (N_c = 10,000)
    else:
        privacy["paper_selection_delta"] = math.exp(-DP["epsilon"] * z ** 2 / 2)   # sigma = B_priv, p = 0
    return {"algorithm": name, "privacy": privacy}


def _dp_notes(doc: dict) -> str:
    lines = ["Per run (mean over trials): test accuracy, rounds, aggregate noise sqrt(T) sigma, and three epsilons "
             f"at delta = {DP['delta']:g}: the paper's claim (eps 1, from its selection / Theorem 3.2), its moments "
             "accountant evaluated directly (Lemma D.1, these rounds and N_c), and the tight RDP epsilon of Poisson "
             "rounds at q_i = s_i / N_c. None is a guarantee for the paper's client (module docstring); the last "
             "column is what jaxfl certifies (the stated variant's ledger, worst client; inf: nothing).", "",
             "| panel | run | accuracy | rounds | sqrt(T) sigma | paper's delta at eps 1 | moments eps | tight eps | "
             "certified eps |", "|---|---|---|---|---|---|---|---|---|"]
    cells: dict = {}
    for r in doc["runs"]:
        cells.setdefault((r["panel"], r["algorithm"]), []).append(r)
    for (panel, name), recs in cells.items():
        acc = np.mean([r["metrics"]["test_accuracy"] for r in recs])
        p = recs[0]["privacy"]
        if "moments_epsilon" in p:
            spent = max(float(r["privacy"]["epsilon_spent"]) for r in recs)
            extra = (f"{p['rounds']} | {p['aggregate_noise']:.1f} | {p['paper_selection_delta']:.3g} | "
                     f"{p['moments_epsilon']:.3f} | {p['tight_epsilon_poisson_rdp']:.3f} | {spent:.3f}")
        else:
            extra = f"{recs[0]['rounds']} | - | - | - | - | -"
        lines.append(f"| {panel} | {name} | {acc:.4f} | {extra} |")
    return "\n".join(lines + _majority(doc))


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


def _dp_family(accountant) -> Family:
    return Family("async", "async SGD", _build, _dp_programs, accountant=accountant, describe=_dp_describe)


DP_STUDY = register(_dp_study(
    "vandijk-async/dp", ("w8a-strong", "w8a-plain"), lambda seed: init_linear(loaders.LIBSVM_FEATURES["w8a"]),
    "van Dijk et al. Fig. 12 / 1b: DP asynchronous FL on w8a, increasing sample sizes (Example 3) against constant "
    "s = 16 at the same sigma 8, C 0.1, K = 25,000 per client", {}, "strongly convex only", trials=3))
DP_MNIST_STUDY = register(_dp_study(
    "vandijk-async/dp-mnist", ("mnist-nonconvex",), _lenet_init,
    "van Dijk et al. Fig. 13: DP asynchronous FL on MNIST (LeNet-5), increasing sample sizes (Example 3) against "
    "constant s = 16 at the same sigma 8, C 0.1, K = 25,000 per client, N_c = 10,000", {"records_per_client": 10_000},
    "LeNet-5", trials=2))


# ------------------------------------------------------------------------------------------------
# App. D.3.2's Examples 1-5: the paper's selection beside the tight epsilon of the same rounds (computed)

EXAMPLES = {  # name -> (N_c, eps, sigma, K epochs, r_0, passes, the paper's T, B_priv, delta)
    "Example 1": (50_000, 2.0, 3.0, 100, 0.0110, 1, 54_546, 1.9707559905883425, 0.020570872204539764),
    "Example 2": (10_000, 2.0, 5.0, 10, 0.0202, 1, 4951, None, None),
    "Example 3": (10_000, 1.0, 8.0, 2.5, 1 / math.e, 3, 195, 5.78195582192962, 5.502343985212556e-8),
    "Example 4": (25_000, 2.0, 8.0, 5, 0.0247, 1, 3239, 3.11154847209, 6.241319203188485e-5),
    "Example 5": (25_000, 2.0, 8.0, 5, 1 / math.e, None, 364, 6.964834261123335, 8.56732681988984e-22),
}
"""The paper's inputs and printed outputs (digest §8.7; Example 2 is its "bad bound", no delta printed;
Example 4's printed B_priv divides r_0 by 5 instead of sigma, so ours differs)."""


def _example_row(static: dict, *, epsilon: float) -> dict:
    """One Example: the selection (q, m, T, B_priv, delta), the paper's printed T / B_priv / delta, and at the
    selection's delta the moments accountant on its rounds and the tight Poisson RDP epsilon of the same rounds."""
    records, eps, sigma, k, r0, passes, paper_t, paper_b, paper_delta = EXAMPLES[static["example"]]
    sel = increasing_samples.select_parameters(16, records, 1.0, eps, sigma, k, r0=r0, passes=passes)
    sizes = np.asarray(sel.sample_sizes)
    metrics = {"q": sel.q, "m": sel.m, "rounds": sel.rounds, "b_priv": sel.b_priv, "delta": sel.delta,
               "paper_rounds": paper_t, "paper_b_priv": math.nan if paper_b is None else paper_b,
               "paper_delta": math.nan if paper_delta is None else paper_delta,
               "aggregate_noise": sel.aggregate_noise(sigma),
               "moments_epsilon": moments.moments_epsilon(sizes, records, sigma, sel.delta),
               "tight_epsilon": moments.tight_epsilon(sizes, records, sigma, sel.delta)}
    return {"metrics": metrics, "epsilon_spent": math.inf, "delta": sel.delta, "seed": None, "records": records,
            "sigma": sigma, "target_epsilon": eps}


EXAMPLE_COLUMNS = (Column("T (ours)", "selection", "metric:rounds", fmt="{:.0f}"),
                   Column("T (paper)", "selection", "metric:paper_rounds", fmt="{:.0f}"),
                   Column("B_priv (ours)", "selection", "metric:b_priv", fmt="{:.6g}"),
                   Column("B_priv (paper)", "selection", "metric:paper_b_priv", fmt="{:.6g}"),
                   Column("delta (ours)", "selection", "metric:delta", fmt="{:.4g}"),
                   Column("delta (paper)", "selection", "metric:paper_delta", fmt="{:.4g}"),
                   Column("sqrt(T) sigma", "selection", "metric:aggregate_noise", fmt="{:.0f}"),
                   Column("moments eps at that delta", "selection", "metric:moments_epsilon", fmt="{:.3f}"),
                   Column("tight eps (Poisson RDP)", "selection", "metric:tight_epsilon", fmt="{:.3f}"))

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
