"""The programs of Triastcyn et al.'s studies: the clients' data, DP-REC and DP-FedAvg as families, their traffic counts
and the report layout."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxfl.accounting import dprec as acct
from jaxfl.algorithms import dp_fedavg, dp_rec
from jaxfl.compression import history, rec
from jaxfl.data.federated import FederatedData
from jaxfl.engine import participation
from papers.dprec import data as dprec_data
from jaxfl.studies.report import Column, Report, Table
from jaxfl.studies.spec import Family, Program, Select, Study, Trial
from jaxfl.models import nets
from jaxfl.privacy import keys as keys_lib
from jaxfl.engine.participation import poisson, with_replacement


PAPER = "Triastcyn, Reisser & Louizos, DP-REC: Private & Communication-Efficient Federated Learning (Triastcyn et al.)"
BITS_PER_TENSOR = 7
REC, FEDAVG = "DP-REC", "DP-FedAvg"


def _trial(study: Study, t: int) -> Trial:
    data = study["clients"]()
    limit = study["test_limit"]
    train = FederatedData(jnp.asarray(data.train.x), jnp.asarray(data.train.y), jnp.asarray(data.train.counts))
    n = int(np.sum(np.asarray(data.train.counts) > 0))
    return Trial(train, (jnp.asarray(data.test_x[:limit]), jnp.asarray(data.test_y[:limit])), acct.default_delta(n),
                 {"clients": n, "data": data.info})


@functools.lru_cache(maxsize=None)
def _error(module_factory):
    return jax.jit(nets.multiclass_error(module_factory()))


@functools.lru_cache(maxsize=None)
def _evaluate(module_factory, batch: int = 1000):
    """Host evaluation: test accuracy over the evaluation set in batches of ``batch``."""
    def evaluate(params, eval_data) -> dict:
        x, y = eval_data
        wrong = sum(float(_error(module_factory)(params, x[i:i + batch], y[i:i + batch])) * len(y[i:i + batch])
                    for i in range(0, len(y), batch))
        return {"test_accuracy": 1.0 - wrong / len(y)}

    return evaluate


@functools.lru_cache(maxsize=None)
def _template(module_factory):
    return nets.init_params(module_factory(), jax.random.PRNGKey(0), dprec_data.IMAGE_SHAPE)


def _build(method: str, static: dict, *, epsilon, clip_multiplier=None, noise_multiplier=None):
    s = dict(static["setting"])
    module = s["module"]
    loss = nets.per_example_loss(module(), nets.softmax_cross_entropy)
    per_pass = 1 if jax.default_backend() == "cpu" else None   # one client at a time on CPU (make_slot_round)
    b = static["clients_per_round"]
    if method == "dp_rec":
        return dp_rec(loss, params=_template(module), client_opt=optax.sgd(s["client_lr"]),
                      participation=with_replacement(b),
                      batch_size=s["batch_size"], prior_std=s["prior_std"], clip_multiplier=clip_multiplier,
                      layout=rec.per_tensor(_template(module), BITS_PER_TENSOR), server_opt=s["server_opt"](),
                      clients_per_pass=per_pass)
    return dp_fedavg(loss, client_opt=optax.sgd(s["client_lr"]), local_epochs=1, batch_size=s["batch_size"],
                     participation=poisson(b / static["clients"]), expected_clients=b, clip_norm=s["fedavg_clip"],
                     noise_multiplier=noise_multiplier,
                     server_opt=s["server_opt"](), clients_per_pass=per_pass or b)


def _paper_shape(study: Study, clients: int) -> bool:
    return (study["rounds"], study["clients_per_round"], clients) == (
        study["paper_rounds"], study["paper_clients_per_round"], study["paper_clients"])


def _programs(method: str):
    def programs(study: Study, panel, trial: Trial):
        n, b, rounds = trial.info["clients"], study["clients_per_round"], study["rounds"]
        module = study["module"]
        bits = rec.per_tensor(_template(module), BITS_PER_TENSOR).total_bits
        grid = []
        for eps in study["epsilons"]:
            if method == "dp_rec":
                c = study["paper_c"][eps] if _paper_shape(study, n) else acct.calibrate_clip_multiplier(
                    eps, bits=bits, num_clients=n, clients_per_round=b, rounds=rounds, delta=trial.deltas)
                grid.append({"epsilon": eps, "clip_multiplier": float(c)})
            else:
                z = study["paper_z"][eps] if _paper_shape(study, n) else acct.calibrate_dpfedavg_noise(
                    eps, sampling_rate=b / n, rounds=rounds, delta=trial.deltas)
                grid.append({"epsilon": eps, "noise_multiplier": float(z)})
        setting = tuple((k, study[k]) for k in ("module", "client_lr", "batch_size", "prior_std", "fedavg_clip",
                                                "server_opt"))
        static = (("setting", setting), ("clients_per_round", b), ("clients", n))
        return [Program(static, grid, rounds, columns={"calibration": "paper" if _paper_shape(study, n) else
                                                       "recalibrated to the target epsilon for this run"})]

    return programs


def _slot_clients(slots: int, counts, root, rounds: int) -> np.ndarray:
    """The clients DP-REC's rounds drew (the same draws as the compiled rounds): int[rounds, slots]."""
    draw = participation.with_replacement(slots)
    return np.asarray(jax.jit(jax.vmap(lambda r: draw(keys_lib.round_key(root, r), counts)))(jnp.arange(rounds)))


def _optimizer_bits(opt: optax.GradientTransformation, params) -> int:
    """Bits of the server optimizer state a full download carries (32 per float32 entry)."""
    state = jax.eval_shape(opt.init, params)   # shapes only: params may be jax.ShapeDtypeStructs
    return 32 * sum(int(np.prod(leaf.shape)) for leaf in jax.tree_util.tree_leaves(state)
                    if jnp.issubdtype(leaf.dtype, jnp.floating))


def _traffic(method: str):
    """Total GiB of a finished run (DP-REC: the exact messages and history downloads of its draws)."""
    def describe(study: Study, panel, trial: Trial, program: Program, row: dict) -> dict:
        params = _template(study["module"])
        d = nets.num_params(params)
        b, n = study["clients_per_round"], trial.info["clients"]
        if method == "dp_rec":
            layout = rec.per_tensor(params, BITS_PER_TENSOR)
            ledger = history.CommunicationLedger(n, message_bits=layout.message_bits(), model_bits=32 * d,
                                                 optimizer_bits=_optimizer_bits(study["server_opt"](), params))
            ledger.record_rounds(_slot_clients(b, trial.train.counts, keys_lib.as_key(row["seed"]), row["rounds"]))
            gib = ledger.gib()
            traffic = {"gib_total": gib["total"], "gib_up": gib["up"], "gib_down": gib["down"],
                       "full_model_downloads": ledger.full_downloads}
        else:
            total = history.uncompressed_bits(row["rounds"], b, d) / 8 / history.GIB
            traffic = {"gib_total": total, "gib_up": total / 2, "gib_down": total / 2}
        row["metrics"].update(traffic)
        return {}

    return describe


def paper_traffic(study: Study, seed: int = 0) -> dict:
    """Total traffic (GiB) of the paper's full setting, computed without training: DP-REC's clients are
    drawn exactly as its compiled rounds draw them (with replacement, ``seed``) and every message and
    history is counted; DP-FedAvg sends the model both ways, ``T B D (32 + 32)`` bits, for the paper's
    DP-FedAvg rounds (FEMNIST: 1500)."""
    # Shapes only (jax.eval_shape): an eager init of the paper's models compiles each of its ops.
    module = study["paper_module"]()
    params = jax.eval_shape(lambda: nets.init_params(module, jax.random.PRNGKey(0), dprec_data.IMAGE_SHAPE))
    layout = rec.per_tensor(params, BITS_PER_TENSOR)
    n, b, t = study["paper_clients"], study["paper_clients_per_round"], study["paper_rounds"]
    d = nets.num_params(params)
    ledger = history.CommunicationLedger(n, message_bits=layout.message_bits(), model_bits=32 * d,
                                         optimizer_bits=_optimizer_bits(study["server_opt"](), params))
    ledger.record_rounds(_slot_clients(b, jnp.ones(n, jnp.int32), keys_lib.as_key(seed), t))
    fedavg = history.uncompressed_bits(study["paper_fedavg_rounds"], b, d) / 8 / history.GIB
    return {"num_params": d, "message_bits": layout.message_bits(), "dp_rec_gib": ledger.gib(),
            "dp_rec_full_downloads": ledger.full_downloads, "dp_fedavg_gib": fedavg,
            "compression": fedavg / ledger.gib()["total"], "paper_gib": study["paper_gib"]}


FAMILIES = (Family("dp_rec", REC, functools.partial(_build, "dp_rec"), _programs("dp_rec"), runner="train",
                   accountant="dprec", describe=_traffic("dp_rec")),
            Family("dp_fedavg", FEDAVG, functools.partial(_build, "dp_fedavg"), _programs("dp_fedavg"),
                   runner="train", accountant="dprec", describe=_traffic("dp_fedavg")))


def _report(paper: dict) -> Report:
    columns = []
    for name in (FEDAVG, REC):
        columns += [Column(f"{name} accuracy (%)", name, "mean_std"), Column(f"{name} eps spent", name, "certified"),
                    Column(f"{name} GiB", name, "metric:gib_total"), Column(f"paper {name} (%, GB)", name, "paper")]
    return Report(table=Table(columns=tuple(columns), metric="test_accuracy", metric_name="test accuracy", scale=100,
                              digits=1), paper=paper,
                  header="{name}: {trials} trial x {reps} seed(s), test accuracy mean ± std over seeds ({form} form)")


def _study(name, description, *, settings, paper, seeds, quick_note, variants=None):
    return Study(
        name=name, description=description, data=_trial, families=FAMILIES,
        evaluate=_evaluate(settings["module"]), report=_report(paper), select=Select(score=None),
        init=lambda seed: nets.init_params(settings["module"](), jax.random.PRNGKey(seed), dprec_data.IMAGE_SHAPE),
        init_seed=None, reps=seeds, seed=lambda trial, panel, rep: rep, settings={"test_limit": None, **settings},
        eval_every=max(1, settings["rounds"] // 10),
        config={"paper": PAPER, "delta": "N^-1.1 (N = clients holding data)",
                "paper_setting_traffic": paper_traffic},
        quick={"reps": 1, "eval_every": 2,
               "settings": {"rounds": 2, "clients_per_round": 2, "epsilons": (3.0,), "test_limit": 1000},
               "config": {"note": quick_note}},
        variants=variants or {})
