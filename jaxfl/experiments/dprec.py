"""Seed 004 (DP-REC) reproductions: ``dprec/mnist`` and ``dprec/femnist-scale``.

Each runs DP-REC (7 bits per tensor, clients sampled with replacement) against DP-FedAvg (Poisson client
sampling, central Gaussian noise) at equal epsilon, both accounted by the ``"dprec"`` accountant with the
paper's conversion and ``delta = N^-1.1``, and reports test accuracy and total communication (GiB, the
paper's "GB"): DP-REC's exact bits up and down with history compression
(:class:`jaxfl.compression.history.CommunicationLedger`), DP-FedAvg's ``T B D (32 + 32)`` bits.

- ``dprec/mnist``: the paper's MNIST setting (App. C): 100 clients (Dirichlet(1) label split of the first
  50k training images), 10 per round, 1000 rounds, LeNet-5 (582,026 parameters, 8 tensors), local SGD
  lr 0.01, batch 20, one epoch, server Adam 2e-3; DP-REC sigma 0.005 with c = 0.545 / 0.87 (eps 3 / 6);
  DP-FedAvg C = 0.01 with z = 3.8 / 2.15. The full form is for an accelerator (on a 2-core CPU a round
  takes ~6 s for DP-FedAvg and ~10 s for DP-REC). :func:`run` takes ``rounds`` for reduced runs; with
  fewer rounds than the paper's, ``c`` and ``z`` are recalibrated so that both methods still spend
  exactly the target epsilon.
- ``dprec/femnist-scale``: the paper's FEMNIST CNN (231,742-parameter variant, 10 outputs) and its
  hyperparameters (local SGD lr 0.05, batch 20, one epoch, server SGD 1.0, DP-REC sigma 0.03, DP-FedAvg
  C = 0.1) on the offline stand-in: Fashion-MNIST over 300 non-iid clients
  (:data:`jaxfl.experiments.dprec_data.FEMNIST_SCALE_NOTE`), 10 clients per round (the paper's 100 of 3500,
  scaled), epsilons 1 / 3 / 6 recalibrated for the run's rounds; the output says so. With LEAF FEMNIST on
  disk, :func:`run` takes the real data through :func:`jaxfl.experiments.dprec_data.load_leaf_femnist`.

``quick`` forms run 2 rounds with 2 clients per round at one epsilon (the CI smoke test).
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from jaxfl.accounting import dprec as acct
from jaxfl.algorithms.dp_fedavg import dp_fedavg
from jaxfl.algorithms.dprec import dp_rec
from jaxfl.compression import history, rec
from jaxfl.data.federated import FederatedData
from jaxfl.engine import driver, participation
from jaxfl.experiments import dprec_data
from jaxfl.experiments.registry import register
from jaxfl.experiments.results import run_record, write_results
from jaxfl.models import nets
from jaxfl.privacy import keys as keys_lib

BITS_PER_TENSOR = 7


@dataclasses.dataclass(frozen=True)
class Setting:
    """One task of the paper: model, hyperparameters, and the paper's numbers to print beside ours."""

    name: str
    module: Callable[[], object]
    client_lr: float
    batch_size: int
    server_opt: Callable[[], optax.GradientTransformation]
    prior_std: float
    fedavg_clip: float
    clients_per_round: int
    rounds: int
    epsilons: tuple[float, ...]
    paper_clip_multipliers: dict
    paper_noise_multipliers: dict
    paper_rounds: int
    paper_clients: int
    paper_clients_per_round: int
    paper_module: Callable[[], object]
    paper_results: dict


MNIST = Setting(
    name="dprec/mnist", module=nets.MnistLeNet5, client_lr=0.01, batch_size=20,
    server_opt=lambda: optax.adam(2e-3, b1=0.9, b2=0.999), prior_std=0.005, fedavg_clip=0.01,
    clients_per_round=10, rounds=1000, epsilons=(3.0, 6.0),
    paper_clip_multipliers={3.0: 0.545, 6.0: 0.87}, paper_noise_multipliers={3.0: 3.8, 6.0: 2.15}, paper_rounds=1000, paper_clients=100,
    paper_clients_per_round=10, paper_module=nets.MnistLeNet5,
    paper_results={"dp_fedavg": {"accuracy": {3.0: "82.1 +- 0.8", 6.0: "90.0 +- 0.4"}, "gib": 43},
                   "dp_rec": {"accuracy": {3.0: "69.5 +- 1.5", 6.0: "83.7 +- 0.6"}, "gib": 0.01}})

FEMNIST_SCALE = Setting(
    name="dprec/femnist-scale", module=lambda: nets.FemnistCNN(variant="paper", num_classes=10), client_lr=0.05,
    batch_size=20, server_opt=lambda: optax.sgd(1.0), prior_std=0.03, fedavg_clip=0.1, clients_per_round=10,
    rounds=100, epsilons=(1.0, 3.0, 6.0),
    paper_clip_multipliers={1.0: 0.77, 3.0: 1.41, 6.0: 1.745}, paper_noise_multipliers={1.0: 5.0, 3.0: 1.85, 6.0: 1.15},
    paper_rounds=4000, paper_clients=3500, paper_clients_per_round=100,
    paper_module=lambda: nets.FemnistCNN(variant="paper"),
    paper_results={"dp_fedavg": {"accuracy": {1.0: "66.0 +- 0.2", 3.0: "74.6 +- 0.1", 6.0: "75.6 +- 0.1"}, "gib": 259},
                   "dp_rec": {"accuracy": {1.0: "59.7 +- 0.3", 3.0: "67.1 +- 0.2", 6.0: "69.2 +- 0.3"}, "gib": 14.2}})


def _device_data(fd: FederatedData) -> FederatedData:
    return FederatedData(jnp.asarray(fd.x), jnp.asarray(fd.y), jnp.asarray(fd.counts))


def _accuracy_fn(module, x, y, batch: int = 1000):
    error = jax.jit(nets.multiclass_error(module))

    def evaluate(params) -> dict:
        wrong = sum(float(error(params, x[i:i + batch], y[i:i + batch])) * len(y[i:i + batch])
                    for i in range(0, len(y), batch))
        return {"test_accuracy": 1.0 - wrong / len(y)}

    return evaluate


def _slot_clients(slots: int, counts, root, rounds: int) -> np.ndarray:
    """The clients DP-REC's rounds drew (the same draws as the compiled rounds): int[rounds, slots]."""
    draw = participation.with_replacement(slots)
    return np.asarray(jax.jit(jax.vmap(lambda r: draw(keys_lib.round_key(root, r), counts)))(jnp.arange(rounds)))


def run(setting: Setting, data: dprec_data.DprecData, out_dir: Path, *, rounds: int | None = None,
        clients_per_round: int | None = None, epsilons=None, seeds=(0,), eval_every: int | None = None,
        methods=("dp_rec", "dp_fedavg"), note: str = "") -> Path:
    """Trains DP-REC and DP-FedAvg at each target epsilon and seed; writes results.json and curves.csv.

    ``clip multiplier`` and ``noise multiplier`` are the paper's when the run has the paper's rounds,
    clients and clients per round, and are otherwise calibrated to the target epsilon for this run
    (``calibrate_clip_multiplier`` / ``calibrate_dpfedavg_noise``, same accountant and delta).
    """
    rounds = setting.rounds if rounds is None else int(rounds)
    b = setting.clients_per_round if clients_per_round is None else int(clients_per_round)
    epsilons = setting.epsilons if epsilons is None else tuple(epsilons)
    train = _device_data(data.train)
    n = int(np.sum(np.asarray(data.train.counts) > 0))
    delta = acct.default_delta(n)
    module = setting.module()
    loss = nets.per_example_loss(module, nets.softmax_cross_entropy)
    evaluate = _accuracy_fn(module, jnp.asarray(data.test_x), jnp.asarray(data.test_y))
    params0 = nets.init_params(module, jax.random.PRNGKey(0), dprec_data.IMAGE_SHAPE)
    layout = rec.per_tensor(params0, BITS_PER_TENSOR)
    num_params = int(ravel_pytree(params0)[0].size)
    paper_shape = (rounds, b, n) == (setting.paper_rounds, setting.paper_clients_per_round, setting.paper_clients)
    runs, curves = [], []
    eval_every = eval_every or max(1, rounds // 10)
    # One client at a time on CPU (faster there: see make_slot_round), all B under vmap on accelerators.
    per_pass = 1 if jax.default_backend() == "cpu" else None
    for eps in epsilons:
        if paper_shape:
            c, z = setting.paper_clip_multipliers[eps], setting.paper_noise_multipliers[eps]
        else:
            c = acct.calibrate_clip_multiplier(eps, bits=layout.total_bits, num_clients=n, clients_per_round=b,
                                               rounds=rounds, delta=delta)
            z = acct.calibrate_dpfedavg_noise(eps, sampling_rate=b / n, rounds=rounds, delta=delta)
        for seed in seeds:
            params = nets.init_params(module, jax.random.PRNGKey(seed), dprec_data.IMAGE_SHAPE)
            for method in methods:
                if method == "dp_rec":
                    algo = dp_rec(loss, params=params, client_opt=optax.sgd(setting.client_lr), clients_per_round=b,
                                  batch_size=setting.batch_size, prior_std=setting.prior_std, clip_multiplier=c,
                                  layout=layout, server_opt=setting.server_opt(), clients_per_pass=per_pass)
                else:
                    algo = dp_fedavg(loss, client_opt=optax.sgd(setting.client_lr), local_epochs=1,
                                     batch_size=setting.batch_size, client_rate=b / n, clip_norm=setting.fedavg_clip,
                                     noise_multiplier=z, server_opt=setting.server_opt(), clients_per_pass=per_pass or b)
                start = time.perf_counter()
                result = driver.train(algo, train, params, rounds=rounds, key=seed, eval_fn=evaluate,
                                      eval_every=eval_every, accountant="dprec", delta=delta, progress=False,
                                      run_info={"algorithm": method, "epsilon": eps, "seed": seed})
                wall = time.perf_counter() - start
                if method == "dp_rec":
                    ledger = history.CommunicationLedger(
                        n, message_bits=layout.message_bits(), model_bits=32 * num_params,
                        optimizer_bits=_optimizer_bits(setting.server_opt(), params))
                    ledger.record_rounds(_slot_clients(b, train.counts, keys_lib.as_key(seed), rounds))
                    gib = ledger.gib()
                    traffic = {"gib_total": gib["total"], "gib_up": gib["up"], "gib_down": gib["down"],
                               "full_model_downloads": ledger.full_downloads}
                else:
                    total = history.uncompressed_bits(rounds, b, num_params) / 8 / history.GIB
                    traffic = {"gib_total": total, "gib_up": total / 2, "gib_down": total / 2}
                final = result.history[-1]
                runs.append(run_record(
                    method, epsilon=eps, delta=delta, seed=seed,
                    metrics={"test_accuracy": final["test_accuracy"], "train_loss": final.get("train_loss"),
                             **traffic},
                    epsilon_spent=result.epsilon, accountant="dprec", wall_seconds=wall,
                    clip_multiplier=c if method == "dp_rec" else None,
                    noise_multiplier=z if method == "dp_fedavg" else None, rounds=result.rounds))
                curves.extend(result.history)
                print(f"{setting.name} {method:9s} eps {eps:g} seed {seed}: accuracy {final['test_accuracy']:.4f}, "
                      f"epsilon spent {result.epsilon:.3f}, {traffic['gib_total']:.4g} GiB, {wall:.0f} s", flush=True)
    config = {"rounds": rounds, "clients": n, "clients_per_round": b, "delta": delta, "num_params": num_params,
              "blocks": layout.num_blocks, "bits_per_update": layout.total_bits,
              "message_bits": layout.message_bits(), "prior_std": setting.prior_std,
              "fedavg_clip": setting.fedavg_clip, "epsilons": list(epsilons), "seeds": list(seeds),
              "paper": {"rounds": setting.paper_rounds, "clip_multipliers": setting.paper_clip_multipliers,
                        "noise_multipliers": setting.paper_noise_multipliers, "results": setting.paper_results},
              "calibration": "paper's c and z" if paper_shape else
              "c and z recalibrated to each target epsilon for this run's rounds / clients (same accountant)",
              "data": data.info, "note": note,
              "paper_setting_traffic": paper_traffic(setting, fedavg_rounds=1500 if setting is FEMNIST_SCALE else None)}
    print(_summary(runs, setting))
    return write_results(out_dir, experiment=setting.name, config=config, runs=runs, curves=curves)


def _optimizer_bits(opt: optax.GradientTransformation, params) -> int:
    """Bits of the server optimizer state a full download carries (32 per float32 entry)."""
    return 32 * sum(int(np.prod(leaf.shape)) for leaf in jax.tree_util.tree_leaves(opt.init(params))
                    if jnp.issubdtype(leaf.dtype, jnp.floating))


def paper_traffic(setting: Setting, seed: int = 0, fedavg_rounds: int | None = None) -> dict:
    """Total traffic (GiB) of the paper's full setting, computed without training: DP-REC's clients are
    drawn exactly as its compiled rounds draw them (with replacement, ``seed``) and every message and
    history is counted by :class:`~jaxfl.compression.history.CommunicationLedger`; DP-FedAvg sends the
    model both ways, ``T B D (32 + 32)`` bits (``fedavg_rounds``: the paper's FEMNIST baseline ran 1500)."""
    params = nets.init_params(setting.paper_module(), jax.random.PRNGKey(0), dprec_data.IMAGE_SHAPE)
    layout = rec.per_tensor(params, BITS_PER_TENSOR)
    n, b, t = setting.paper_clients, setting.paper_clients_per_round, setting.paper_rounds
    d = int(ravel_pytree(params)[0].size)
    ledger = history.CommunicationLedger(n, message_bits=layout.message_bits(), model_bits=32 * d,
                                         optimizer_bits=_optimizer_bits(setting.server_opt(), params))
    ledger.record_rounds(_slot_clients(b, jnp.ones(n, jnp.int32), keys_lib.as_key(seed), t))
    fedavg = history.uncompressed_bits(fedavg_rounds or t, b, d) / 8 / history.GIB
    return {"num_params": d, "message_bits": layout.message_bits(), "dp_rec_gib": ledger.gib(),
            "dp_rec_full_downloads": ledger.full_downloads, "dp_fedavg_gib": fedavg,
            "compression": fedavg / ledger.gib()["total"], "paper_gib": {m: setting.paper_results[m]["gib"]
                                                                          for m in ("dp_rec", "dp_fedavg")}}


def _summary(runs: list, setting: Setting) -> str:
    lines = [f"{'method':10s} {'eps':>4s} {'accuracy (mean over seeds)':>27s} {'GiB':>10s} | paper accuracy, GiB"]
    for method in ("dp_fedavg", "dp_rec"):
        for eps in sorted({r["epsilon"] for r in runs}):
            chosen = [r for r in runs if r["algorithm"] == method and r["epsilon"] == eps]
            if not chosen:
                continue
            acc = [r["metrics"]["test_accuracy"] for r in chosen]
            paper = setting.paper_results[method]
            lines.append(f"{method:10s} {eps:4g} {100 * np.mean(acc):22.1f} +- {100 * np.std(acc):.1f} "
                         f"{chosen[0]['metrics']['gib_total']:10.4g} | {paper['accuracy'].get(eps, '-')}, {paper['gib']}")
    return "\n".join(lines)


@register(MNIST.name, "seed 004 Table 1 MNIST: DP-REC (7 bits/tensor) vs DP-FedAvg at eps 3 and 6, LeNet-5, "
                      "100 clients; accuracy and total GiB")
def reproduce_mnist(quick: bool, out_dir: Path) -> Path:
    data = dprec_data.mnist_clients()
    if quick:
        data = data._replace(test_x=data.test_x[:1000], test_y=data.test_y[:1000])
        return run(MNIST, data, Path(out_dir), rounds=2, clients_per_round=2, epsilons=(3.0,), eval_every=2,
                   note="quick form: 2 rounds, 2 clients per round, 1000 evaluation images")
    return run(MNIST, data, Path(out_dir), seeds=range(3))


@register(FEMNIST_SCALE.name, "seed 004 FEMNIST setting (CNN, hyperparameters) on Fashion-MNIST split over 300 "
                              "non-iid clients (offline stand-in for FEMNIST)")
def reproduce_femnist_scale(quick: bool, out_dir: Path) -> Path:
    data = dprec_data.femnist_scale_clients()
    note = dprec_data.FEMNIST_SCALE_NOTE
    print(note)
    if quick:
        data = data._replace(test_x=data.test_x[:1000], test_y=data.test_y[:1000])
        return run(FEMNIST_SCALE, data, Path(out_dir), rounds=2, clients_per_round=2, epsilons=(3.0,), eval_every=2,
                   note="quick form: 2 rounds, 2 clients per round, 1000 evaluation images. " + note)
    return run(FEMNIST_SCALE, data, Path(out_dir), note=note)
