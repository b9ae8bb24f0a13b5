"""Triastcyn et al.'s privacy numbers (Triastcyn, Reisser & Louizos, DP-REC): ``jaxfl reproduce dprec/epsilon-table``.

For every configuration of the paper's Table 1 (MNIST eps = 3, 6; FEMNIST eps = 1, 3, 6; Shakespeare
eps = 3; StackOverflow eps = 1) with the hyperparameters of App. C.2 (digest §5.4):

* the DP-REC central epsilon by Alg. 7 (:mod:`jaxfl.accounting.dprec`: ``T B`` steps at mixture weight
  ``1/N``, twice the subsampled-Gaussian RDP per step, delta overhead ``12 T B e^{c^2} / 2^{b_tot}``,
  integer ``lambda`` in 1..299, ``delta = N^-1.1``) and its optimal ``lambda``;
* the local epsilon of one update (no amplification, real ``lambda``);
* the DP-FedAvg baseline's epsilon from its noise multiplier (``q = B/N``, the paper's DP-FedAvg round
  count, classic RDP conversion at the same orders), as the paper accounts its baselines.

StackOverflow: with 6 groups x 7 bits the overhead exceeds ``delta = N^-1.1``, so strict Alg. 7 gives no
guarantee; the output says so and computes what more bits (or no overhead) would give, and the clip
multiplier that reaches exactly eps = 1 with enough bits. Everything is computed, nothing is copied from
the digest. The computation takes seconds, so the quick and full forms are the same. A study whose one
family is a ``"compute"`` family (no training): one row per configuration, one panel per task.
"""
from __future__ import annotations

import dataclasses
import math

from jaxfl.accounting import dprec as A
from papers.dprec import programs, studies
from jaxfl.studies.registry import register
from jaxfl.studies.report import Column, Report, Table
from jaxfl.studies.spec import Family, Panel, Program, Select, Study, Trial

NAME = "dprec/epsilon-table"
BITS_PER_BLOCK = 7
NO_OVERHEAD_BITS = 1024  # overhead 12 e^{c^2} T B / 2^1024 ~ 1e-300: numerically none


@dataclasses.dataclass(frozen=True)
class Config:
    """One Table 1 cell pair (DP-REC and its DP-FedAvg baseline) with App. C.2's hyperparameters."""

    task: str
    target_epsilon: float      # the paper's epsilon for the cell
    clients: int               # N
    clients_per_round: int     # B
    rounds: int                # T for DP-REC
    blocks: int                # index blocks of one update (7 bits each)
    blocks_note: str
    clip_multiplier: float     # c = C / sigma (DP-REC)
    noise_multiplier: float    # z (DP-FedAvg)
    dpfedavg_rounds: int       # T for DP-FedAvg

    @property
    def bits(self) -> int:
        return BITS_PER_BLOCK * self.blocks

    @property
    def delta(self) -> float:
        return A.default_delta(self.clients)


_MNIST = dict(task="MNIST", clients=100, clients_per_round=10, rounds=1000, blocks=8,
              blocks_note="per tensor, 8 tensors", dpfedavg_rounds=1000)
_FEMNIST = dict(task="FEMNIST", clients=3500, clients_per_round=100, rounds=4000, blocks=8,
                blocks_note="per tensor, 8 tensors", dpfedavg_rounds=1500)
_SHAKESPEARE = dict(task="Shakespeare", clients=660, clients_per_round=66, rounds=200, blocks=11,
                    blocks_note="per tensor, 11 tensors", dpfedavg_rounds=200)
_SO = dict(task="StackOverflow", clients=342477, clients_per_round=60, rounds=1500, blocks=6,
           blocks_note="6 groups: W in 5 slices of 1e6 entries + the bias", dpfedavg_rounds=1500)

CONFIGS: tuple[Config, ...] = (
    Config(**_MNIST, target_epsilon=3.0, clip_multiplier=0.545, noise_multiplier=3.8),
    Config(**_MNIST, target_epsilon=6.0, clip_multiplier=0.87, noise_multiplier=2.15),
    Config(**_FEMNIST, target_epsilon=1.0, clip_multiplier=0.77, noise_multiplier=5.0),
    Config(**_FEMNIST, target_epsilon=3.0, clip_multiplier=1.41, noise_multiplier=1.85),
    Config(**_FEMNIST, target_epsilon=6.0, clip_multiplier=1.745, noise_multiplier=1.15),
    Config(**_SHAKESPEARE, target_epsilon=3.0, clip_multiplier=1.435, noise_multiplier=2.15),
    Config(**_SO, target_epsilon=1.0, clip_multiplier=1.227, noise_multiplier=0.957),
)


def _dprec(cfg: Config, bits: int | None = None) -> tuple[float, float, A.DprecAccountant]:
    """``(epsilon, optimal lambda, accountant)`` of the DP-REC run at ``bits`` (default: the config's)."""
    acc = A.dprec_accountant(cfg.clip_multiplier, bits=cfg.bits if bits is None else bits,
                             num_clients=cfg.clients, clients_per_round=cfg.clients_per_round, rounds=cfg.rounds)
    eps, order = acc.epsilon_and_order(cfg.delta)
    return eps, order - 1.0, acc


def evaluate(cfg: Config) -> dict:
    """Every number of one configuration."""
    eps, lam, acc = _dprec(cfg)
    q = cfg.clients_per_round / cfg.clients
    return {
        "epsilon_dprec": eps, "optimal_lambda": None if math.isnan(lam) else int(lam),
        "delta_overhead": acc.delta_overhead, "steps": acc.steps, "infeasible": acc.infeasibility(cfg.delta),
        "epsilon_local": A.dprec_local_epsilon(cfg.clip_multiplier, bits=cfg.bits, delta=cfg.delta),
        "epsilon_dpfedavg": A.dpfedavg_epsilon(cfg.noise_multiplier, sampling_rate=q, rounds=cfg.dpfedavg_rounds,
                                               delta=cfg.delta),
        "dpfedavg_sampling_rate": q,
    }


def stackoverflow_analysis(cfg: Config) -> dict:
    """Why StackOverflow's eps = 1 has no strict Alg. 7 guarantee, and what would give one (all computed)."""
    eps_strict, _, acc = _dprec(cfg)
    eps_free, lam_free, _ = _dprec(cfg, NO_OVERHEAD_BITS)
    first_feasible = next(b for b in range(cfg.bits, NO_OVERHEAD_BITS + 1)
                          if A.dprec_delta_overhead(cfg.clip_multiplier, b, acc.steps) < cfg.delta)
    eps_first, lam_first, _ = _dprec(cfg, first_feasible)
    # From how many bits on epsilon equals the no-overhead value to 3 decimals.
    settled = next(b for b in range(first_feasible, NO_OVERHEAD_BITS + 1)
                   if round(_dprec(cfg, b)[0], 3) == round(eps_free, 3))
    eps_settled, lam_settled, _ = _dprec(cfg, settled)
    settled_overhead = A.dprec_delta_overhead(cfg.clip_multiplier, settled, acc.steps)
    clip_at_one = A.calibrate_clip_multiplier(cfg.target_epsilon, bits=settled, num_clients=cfg.clients,
                                              clients_per_round=cfg.clients_per_round, rounds=cfg.rounds)
    text = (
        f"StackOverflow: the paper splits the update into {cfg.blocks} groups x {BITS_PER_BLOCK} bits, so "
        f"b_tot = {cfg.bits} and the importance-sampling overhead of strict Alg. 7 is 12 T B e^(c^2) / 2^{cfg.bits} "
        f"= 12 x {acc.steps} x e^({cfg.clip_multiplier}^2) / 2^{cfg.bits} = {acc.delta_overhead:.4g}, which exceeds "
        f"delta = N^-1.1 = {cfg.delta:.4g}: no valid (epsilon, delta) guarantee (epsilon = {eps_strict}). "
        f"The smallest total bit count with overhead below delta is {first_feasible} (epsilon = {eps_first:.3f}, "
        f"lambda = {lam_first:.0f}); from {settled} bits on (overhead {settled_overhead:.3g}) "
        f"epsilon = {eps_settled:.3f} (lambda = {lam_settled:.0f}), the value without any overhead "
        f"({eps_free:.4f}), i.e. within the paper's eps = {cfg.target_epsilon:g}. At {settled} bits the clip "
        f"multiplier giving exactly eps = {cfg.target_epsilon:g} is c = {clip_at_one:.4f} (the paper used "
        f"c = {cfg.clip_multiplier}).")
    return {"strict_bits": cfg.bits, "strict_overhead": acc.delta_overhead, "delta": cfg.delta,
            "strict_epsilon": eps_strict, "reason": acc.infeasibility(cfg.delta),
            "first_feasible_bits": first_feasible, "epsilon_at_first_feasible_bits": eps_first,
            "settled_bits": settled, "epsilon_at_settled_bits": eps_settled,
            "lambda_at_settled_bits": int(lam_settled),
            "epsilon_without_overhead": eps_free, "lambda_without_overhead": int(lam_free),
            "clip_multiplier_for_target_at_settled_bits": clip_at_one, "explanation": text}


def _fmt(x: float, digits: int = 3) -> str:
    return "inf" if math.isinf(x) else f"{x:.{digits}f}"


def table(configs, results) -> str:
    """The printed table (one line per configuration)."""
    head = (f"{'task':13s} {'eps':>4s} {'N':>7s} {'B':>4s} {'T':>5s} {'bits':>4s} {'c':>6s} {'delta':>9s} "
            f"{'eps DP-REC':>10s} {'lam':>4s} {'overhead':>9s} {'eps local':>9s} | {'z':>6s} {'T':>5s} "
            f"{'eps DP-FedAvg':>13s}")
    lines = [head, "-" * len(head)]
    for cfg, r in zip(configs, results):
        lam = "-" if r["optimal_lambda"] is None else str(r["optimal_lambda"])
        lines.append(
            f"{cfg.task:13s} {cfg.target_epsilon:4g} {cfg.clients:7d} {cfg.clients_per_round:4d} {cfg.rounds:5d} "
            f"{cfg.bits:4d} {cfg.clip_multiplier:6.3f} {cfg.delta:9.3g} {_fmt(r['epsilon_dprec']):>10s} {lam:>4s} "
            f"{r['delta_overhead']:9.3g} {_fmt(r['epsilon_local'], 2):>9s} | {cfg.noise_multiplier:6.3f} "
            f"{cfg.dpfedavg_rounds:5d} {_fmt(r['epsilon_dpfedavg'], 2):>13s}")
    return "\n".join(lines)


def _compute(static: dict, *, epsilon: float) -> dict:
    """One Table 1 cell pair (the study's ``"compute"`` family): every number, as a row."""
    cfg = static["config"]
    r = evaluate(cfg)
    metrics = {k: r[k] for k in ("epsilon_dprec", "optimal_lambda", "delta_overhead", "epsilon_local",
                                 "epsilon_dpfedavg")}
    metrics["epsilon_dprec_3dp"] = None if math.isinf(r["epsilon_dprec"]) else round(r["epsilon_dprec"], 3)
    extra = {"note": stackoverflow_analysis(cfg)["explanation"]} if cfg.task == "StackOverflow" else {}
    return {"metrics": metrics, "epsilon_spent": r["epsilon_dprec"], "delta": cfg.delta, "seed": None,
            "task": cfg.task, "clients": cfg.clients, "clients_per_round": cfg.clients_per_round,
            "rounds": cfg.rounds, "bits": cfg.bits, "blocks": cfg.blocks_note, "clip_multiplier": cfg.clip_multiplier,
            "steps": r["steps"], "infeasible": r["infeasible"],
            "baseline": {"algorithm": "DP-FedAvg", "noise_multiplier": cfg.noise_multiplier,
                         "rounds": cfg.dpfedavg_rounds, "sampling_rate": r["dpfedavg_sampling_rate"],
                         "epsilon": r["epsilon_dpfedavg"], "accountant": "dprec (classic RDP conversion)"}, **extra}


def _programs(study: Study, panel: Panel, trial: Trial) -> list[Program]:
    return [Program((("config", cfg),), [{"epsilon": cfg.target_epsilon}], 0)
            for cfg in CONFIGS if cfg.task == panel["task"]]


STACKOVERFLOW = next(c for c in CONFIGS if c.task == "StackOverflow")
TASKS = tuple(dict.fromkeys(c.task for c in CONFIGS))

STUDY = register(Study(
    name=NAME, description="Triastcyn et al. (DP-REC): Alg. 7 epsilon of every Table 1 configuration, local epsilon, "
                           "DP-FedAvg baseline epsilon, StackOverflow overhead analysis",
    data=lambda study, t: Trial(None, None, None), evaluate=None, init=None,
    families=(Family("dprec", "DP-REC", _compute, _programs, runner="compute", accountant="dprec"),),
    panels=tuple(Panel(task, (("task", task),)) for task in TASKS), select=Select(score=None),
    report=Report(
        table=Table(columns=(Column("N", "DP-REC", "field:clients"), Column("B", "DP-REC", "field:clients_per_round"),
                             Column("T", "DP-REC", "field:rounds"), Column("bits", "DP-REC", "field:bits"),
                             Column("c", "DP-REC", "field:clip_multiplier"),
                             Column("eps DP-REC (Alg. 7)", "DP-REC", "metric:epsilon_dprec", fmt="{:.3f}"),
                             Column("lambda", "DP-REC", "metric:optimal_lambda", fmt="{:.0f}"),
                             Column("delta overhead", "DP-REC", "metric:delta_overhead", fmt="{:.3g}"),
                             Column("eps local", "DP-REC", "metric:epsilon_local", fmt="{:.2f}"),
                             Column("eps DP-FedAvg (z, its T)", "DP-REC", "metric:epsilon_dpfedavg", fmt="{:.2f}"))),
        header="{panel}: DP-REC privacy accounting (Alg. 7) of the paper's Table 1 configurations",
        notes=lambda doc: (doc["config"]["stackoverflow"]["explanation"] + "\n\n"
                           + traffic_table(doc["config"]["traffic"]))),
    config={
        "paper": "Triastcyn, Reisser & Louizos, DP-REC: Private & Communication-Efficient Federated Learning "
                 "(Triastcyn et al.), Table 1 / App. C.2 / Alg. 7",
        "accounting": "Alg. 7: T*B steps at mixture weight 1/N (clients sampled with replacement), per step twice "
                      "the Poisson-subsampled Gaussian RDP at noise multiplier 1/c (k_hat + m_hat <= 2 k_hat), delta "
                      "overhead 12 T B e^(c^2) / 2^b_tot, classic conversion min over integer lambda in 1..299",
        "delta": "N^-1.1", "neighbouring_relation": "add/remove one client",
        "local_epsilon": "one update, no amplification: min over real lambda of (lambda+1) c^2 - "
                         "log(delta - 12 e^(c^2) / 2^b_tot) / lambda",
        "dpfedavg": "Poisson-subsampled Gaussian, q = B/N, the paper's DP-FedAvg rounds (FEMNIST 1500), classic "
                    "conversion at the same orders",
        "bits_per_block": BITS_PER_BLOCK, "stackoverflow": lambda study: stackoverflow_analysis(STACKOVERFLOW),
        "table": lambda study: table(CONFIGS, [evaluate(c) for c in CONFIGS]),
        "traffic": lambda study: {"MNIST, 1000 rounds x 10 of 100 clients": programs.paper_traffic(studies.MNIST),
                                  "FEMNIST, 4000 rounds x 100 of 3500 clients (DP-FedAvg 1500 rounds)":
                                      programs.paper_traffic(studies.FEMNIST_SCALE)}}))


def traffic_table(traffic: dict) -> str:
    """Table 1's "Comm." column from the protocol alone (:func:`papers.dprec.programs.paper_traffic`)."""
    lines = ["Communication of the paper's full settings (computed without training: DP-REC's clients drawn as its "
             "compiled rounds draw them, every message and history counted):", "",
             "| setting | parameters | DP-REC GiB (paper) | DP-FedAvg GiB (paper) | compression |",
             "|---|---|---|---|---|"]
    for name, t in traffic.items():
        lines.append(f"| {name} | {t['num_params']:,} | {t['dp_rec_gib']['total']:.4g} "
                     f"({t['paper_gib']['dp_rec']}) | {t['dp_fedavg_gib']:.4g} ({t['paper_gib']['dp_fedavg']}) | "
                     f"{t['compression']:.1f}x |")
    return "\n".join(lines)
