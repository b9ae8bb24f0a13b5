"""The studies' programs: timelines of the asynchronous protocol, sample-size and step-size schedules, the compiled
slices' builds, and the DP runs' calibration (Example 3)."""
from __future__ import annotations

import functools
import math

import numpy as np

from jaxfl.accounting import increasing_samples, moments
from jaxfl.algorithms import async_schedules as AS, async_timeline as AT
from jaxfl.algorithms.async_dp import async_sgd, delayed_sgd
from jaxfl.studies.spec import Family, Panel, Program, Study, Trial
from papers.vandijk_async.data import _loss
from papers.vandijk_async.paper import (BIASED, CONSTANT, CONSTANT_LABEL, CURVE_POINTS, DP, DP_STEPS, EXAMPLES,
                                        INCREASING, TIMING)


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
    eta = AS.StepSize(static["step_kind"], learning_rate, beta, static["step_per"])
    if static.get("form") == "delayed":       # the recursion at the protocol's largest delay, no timeline
        return delayed_sgd(_loss(static["problem"], static["records"]), sizes_of(static["schedule"], static["clients"]),
                           step_size=eta, lookahead=dict(static["timing"])["lookahead"],
                           aggregation=static["aggregation"])
    timeline = _timeline(static["schedule"], static["clients"], static["timing_seed"], static["timing"])
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
        (("form", study["form"]),) if study.settings.get("form", "protocol") != "protocol" else ()) + (
        # the client's sampling, named only when not the paper's (the stated variant, whose rate s_i / N_c takes
        # the clients' record counts as public, fixed in advance: add/remove-one): earlier parts stay valid
        (("sampling", study["client_sampling"]),
         ("client_records", tuple(int(c) for c in np.asarray(trial.train.counts))))
        if study.settings.get("client_sampling", "replacement") != "replacement"
        else ())


def _slices(static) -> int:
    s = dict(static)
    if s.get("form") == "delayed":             # one round of every client per engine round
        return int(sizes_of(s["schedule"], s["clients"]).shape[0])
    return _timeline(s["schedule"], s["clients"], s["timing_seed"], s["timing"]).num_slices


def _facts(static) -> dict:
    s = dict(static)
    if s.get("form") == "delayed":
        sizes = sizes_of(s["schedule"], s["clients"])
        return {"rounds": int(sizes.shape[0]), "iterations": int(sizes.sum()),
                "lookahead": int(dict(s["timing"])["lookahead"])}
    tl = _timeline(s["schedule"], s["clients"], s["timing_seed"], s["timing"])
    return {"rounds": int(tl.sizes.shape[0]), "slices": tl.num_slices, "iterations": int(tl.sizes.sum()),
            "max_lookahead": int(tl.lookahead.max()), "end_time": float(tl.boundaries[-1])}


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


def _biased_programs(study: Study, panel: Panel, trial: Trial):
    convexity = panel["problem"].rsplit("-", 1)[1]
    clients = trial.train.num_silos
    rounds = rounds_for(BIASED["slope"] * np.arange(1, 1000), clients, study["iterations"])
    static = _static(study, trial, panel["problem"], ("linear", BIASED["slope"], rounds),
                     "inverse" if convexity == "strong" else "inverse_sqrt", "rounds", t=trial.info["trial"])
    return [Program(static, [{"epsilon": 0.0, "learning_rate": BIASED["eta0"], "beta": BIASED["beta"][convexity]}],
                    _slices(static), columns={"split": panel["split"], **_facts(static)})]


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


def _dp_family(accountant) -> Family:
    return Family("async", "async SGD", _build, _dp_programs, accountant=accountant, describe=_dp_describe)


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
