"""``jaxfl demo``: DP and non-DP federated logistic regression on the bundled breast-cancer data.

Five silos (iid split of the 455 training records), logistic regression, 60 rounds:
non-private minibatch SGD and FedAvg, and ISRL-DP noisy minibatch SGD (record-level DP for each
silo's own transcript; Poisson sampling, per-example clipping) at several epsilons with
delta_i = 1/n_i^2. Noise multipliers are calibrated by the RDP accountant; the epsilon printed is
what the accountant reports for the rounds actually run (the max over silos). Each setting runs all
seeds as one vmapped program; the DP settings run all epsilons in one program too.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import optax
from sklearn.model_selection import train_test_split

from jaxfl.accounting import noise_multiplier_for
from jaxfl.algorithms import local_sgd, minibatch_sgd
from jaxfl.data import iid, load_breast_cancer, standardize
from jaxfl.engine import sweep
from jaxfl.experiments.registry import register
from jaxfl.experiments.results import run_record, write_results
from jaxfl.models import binary_accuracy, init_linear, logistic_loss

SILOS, ROUNDS, RATE, CLIP = 5, 60, 0.2, 1.0
SERVER_LR, LOCAL_LR, LOCAL_STEPS = 1.0, 0.2, 5
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)


def _data(seed: int = 0):
    x, y = load_breast_cancer()
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)
    x_tr, x_te, _ = standardize(x_tr, x_te)
    return iid(x_tr, y_tr, SILOS, seed=seed), jnp.asarray(x_te, jnp.float32), jnp.asarray(y_te)


def run(quick: bool = False, seeds: int | None = None):
    """Runs every setting; returns ``(rows, config, curves)`` for the table and results files."""
    num_seeds = seeds or (2 if quick else 5)
    epsilons = (1.0, 8.0) if quick else EPSILONS
    data, x_te, y_te = _data()
    counts = np.asarray(data.counts)
    deltas = 1.0 / counts.astype(float) ** 2
    params = init_linear(data.x.shape[-1])
    evaluate = lambda p: {"test_accuracy": binary_accuracy(p, x_te, y_te)}
    seed_list = list(range(num_seeds))

    def dp_sgd(z):
        return minibatch_sgd(logistic_loss, server_opt=optax.sgd(SERVER_LR), sampling_rate=RATE, clip_norm=CLIP,
                             noise_multiplier=z)

    settings = [("minibatch SGD (non-private)",
                 lambda: minibatch_sgd(logistic_loss, server_opt=optax.sgd(SERVER_LR), sampling_rate=RATE)),
                ("FedAvg / local SGD (non-private)",
                 lambda: local_sgd(logistic_loss, client_opt=optax.sgd(LOCAL_LR), local_steps=LOCAL_STEPS,
                                   sampling_rate=RATE))]
    rows, curves = [], []
    for name, build in settings:
        t0 = time.perf_counter()
        out = sweep(build, {}, data, params, rounds=ROUNDS, seeds=seed_list, evaluate=evaluate, delta=deltas)
        acc = out.metrics["test_accuracy"][0]
        rows.append(dict(setting=name, target=None, spent=float(out.epsilons[0]), z=0.0, accuracy=acc,
                         seconds=time.perf_counter() - t0))
        curves += _curves(name, None, out, seed_list)

    # All DP settings in one vmapped program: the noise multiplier is a traced hyperparameter.
    t0 = time.perf_counter()
    zs = [noise_multiplier_for(eps, RATE, ROUNDS, float(deltas.min())) for eps in epsilons]
    out = sweep(dp_sgd, {"z": zs}, data, params, rounds=ROUNDS, seeds=seed_list, evaluate=evaluate, delta=deltas)
    seconds = (time.perf_counter() - t0) / len(zs)
    for i, (eps, z) in enumerate(zip(epsilons, zs)):
        spent = float(out.epsilons[i])
        if spent > eps + 1e-9:
            raise AssertionError(f"calibrated run spent epsilon {spent} > target {eps}")
        rows.append(dict(setting="ISRL-DP minibatch SGD", target=eps, spent=spent, z=float(z),
                         accuracy=out.metrics["test_accuracy"][i], seconds=seconds))
        curves += _curves("ISRL-DP minibatch SGD", eps, out, seed_list, index=i)
    config = dict(dataset="breast_cancer (scikit-learn)", silos=SILOS, silo_sizes=counts.tolist(), rounds=ROUNDS,
                  sampling_rate=RATE, clip_norm=CLIP, server_lr=SERVER_LR, local_lr=LOCAL_LR,
                  local_steps=LOCAL_STEPS, delta="1/n_i^2 per silo", accountant="rdp", seeds=num_seeds,
                  test_records=int(len(y_te)))
    return rows, config, curves


def _curves(name, eps, out, seeds, index=0):
    rows = []
    infos = {k: np.asarray(v)[index] for k, v in out.infos.items()}  # [seeds, rounds]
    for j, seed in enumerate(seeds):
        for r in range(infos["participants"].shape[1]):
            rows.append({"algorithm": name, "epsilon": eps, "seed": seed, "round": r + 1,
                         **{k: float(v[j, r]) for k, v in infos.items()}})
    return rows


def format_table(rows) -> str:
    lines = [f"{'setting':34s} {'target eps':>10s} {'eps spent':>10s} {'noise mult.':>11s} {'test accuracy':>17s}",
             "-" * 86]
    for r in rows:
        acc = np.asarray(r["accuracy"])
        target = "-" if r["target"] is None else f"{r['target']:.2f}"
        spent = "inf (no DP)" if math.isinf(r["spent"]) else f"{r['spent']:.3f}"
        lines.append(f"{r['setting']:34s} {target:>10s} {spent:>10s} {r['z']:11.3f} "
                     f"{acc.mean():8.4f} +- {acc.std():.4f}")
    return "\n".join(lines)


def main(quick: bool = False, seeds: int | None = None) -> None:
    t0 = time.perf_counter()
    rows, config, _ = run(quick, seeds)
    print(f"jaxfl demo: federated logistic regression, {config['silos']} silos {config['silo_sizes']} of the "
          f"breast-cancer data, {config['rounds']} rounds, {config['seeds']} seeds per setting")
    print("ISRL-DP: each silo's transcript is (eps, delta_i = 1/n_i^2)-DP for its own records (RDP accountant, "
          "Poisson sampling rate 0.2, clip 1.0)\n")
    print(format_table(rows))
    print(f"\n({time.perf_counter() - t0:.1f} s in all; step sizes fixed in advance, not tuned on the test set)")


@register("demo", "the jaxfl demo: DP vs non-DP federated logistic regression on breast cancer")
def reproduce(quick: bool, out_dir: Path) -> Path:
    rows, config, curves = run(quick)
    runs = []
    for r in rows:
        for seed, acc in enumerate(np.asarray(r["accuracy"])):
            runs.append(run_record(r["setting"], epsilon=r["target"], delta=config["delta"], seed=seed,
                                   metrics={"test_accuracy": float(acc), "test_error": 1.0 - float(acc)},
                                   epsilon_spent=r["spent"], accountant="rdp" if r["target"] else None,
                                   wall_seconds=r["seconds"] / len(np.asarray(r["accuracy"])),
                                   noise_multiplier=r["z"]))

    def figure(path):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5.5, 3.8))
        dp = [r for r in rows if r["target"] is not None]
        eps = [r["target"] for r in dp]
        err = [1 - np.asarray(r["accuracy"]) for r in dp]
        ax.errorbar(eps, [e.mean() for e in err], yerr=[e.std() for e in err], marker="o", capsize=3,
                    label="ISRL-DP minibatch SGD")
        for r, style in zip([r for r in rows if r["target"] is None], ["--", ":"]):
            ax.axhline(1 - np.mean(r["accuracy"]), linestyle=style, color="gray", label=r["setting"])
        ax.set_xscale("log")
        ax.set_xlabel("epsilon (per silo, delta_i = 1/n_i^2)")
        ax.set_ylabel("test error")
        ax.set_title("jaxfl demo: breast cancer, 5 silos")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)

    return write_results(out_dir, experiment="demo", config=config, runs=runs, curves=curves, figure=figure)
