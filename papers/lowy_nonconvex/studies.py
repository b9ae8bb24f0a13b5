"""Lowy et al.'s studies (Lowy, Ghafelebashi & Razaviyayn, §4 / App. H):
``jaxfl reproduce lowy-nonconvex/{mnist,cifar10,wbcd}``.

Figures 4-10 of the paper: test error against epsilon for ISRL-DP SPIDER (per epsilon the better, by
final training loss, of FedProx-SPIDER (Alg. 3) over its phase-length grid and Alt Fed-SPIDER (Alg.
11)), ISRL-DP MB-SGD, ISRL-DP Local SGD, and non-private MB-SGD / Local SGD reference lines.

* Noise: the paper's experimental calibrations, one function
  (:func:`jaxfl.accounting.variance_reduced_noise.experiment_noise_multipliers`; digest §4.6, §4.8, §4.9) with
  ``L`` the per-example clip ``C`` (a grid parameter), at the smallest silo ``n`` and ``delta = 1/n^2``.
  Every multiplier is proportional to ``1/eps``: the grid takes its value at ``eps = 1`` as a trial
  constant. ``K = int(n sqrt(24) / (2 sqrt(R)))`` (the authors' code) for every algorithm.
* Honesty: every DP row records the paper's nominal epsilon and what jaxfl's ``"lowy"`` accountant
  certifies for the noise added (Alt Fed-SPIDER: all ``2R`` messages; inf where nothing is certified).
* Protocol: per trial and (M, R) panel each family's grid (epsilons [plus the non-private 0], step
  sizes, clips) x repetitions is one compiled program (per ``q`` for FedProx-SPIDER); per epsilon the
  configuration (and ``q``) with the smallest mean final training loss is reported, with the mean test
  error of the final iterates ``w_R`` (the authors' CIFAR/WBCD code reports the iterate of smallest
  training loss instead; see ``papers/lowy_nonconvex/README.md``).

Variant ``authors-noise`` (MNIST): FedProx-SPIDER with the authors' code's checkpoint noise (without Thm F.1's
``max(R/q, 1)``) against MB-SGD on the full grid, each row with the epsilon the accountant certifies for it.

Variant ``reduced`` (MNIST): Fig. 4's panel (M = R = 25), 3 trials x 2 repetitions, step sizes the
paper's 3 largest of 5 and clips {1, 10} -- the form ``papers/lowy_nonconvex/README.md`` reports on 2 CPU cores.
"""
from __future__ import annotations

import math


from papers.lowy_nonconvex import data as D
from jaxfl.studies.registry import register
from jaxfl.studies.spec import exp_grid
from jaxfl.models import nets
from papers.lowy_nonconvex.programs import FAMILIES, _panels, _steps, _study, _trials




MLP_NOTE = "MLP 50-64-1 without dropout (one logit; the authors: 50-64-2 with Dropout(0.5))"
MNIST_GRID = exp_grid(-9, 0, 5)

#: FedProx-SPIDER with the authors' code's checkpoint noise (sigma_1^2 without max(R/q, 1)) against MB-SGD, on the
#: full grid; its certified epsilons say what that noise buys.
AUTHORS_NOISE = {
    "families": tuple(f for f in FAMILIES if f.name in ("mbsgd", "spider")),
    "settings": {"spider_calibration": "authors-code"},
    "config": {"notes": [
        "VARIANT authors-noise: FedProx-SPIDER's checkpoint noise as the authors' code computes it, sigma_1^2 = "
        "16 L^2 ln(1/delta) / (eps^2 n^2) without Thm F.1's max(R/q, 1) (min(q/R, 1) times the paper's "
        "variance), against MB-SGD; Alt Fed-SPIDER and Local SGD not run (the full form's rows are unchanged)",
        MLP_NOTE]}}

MNIST = register(_study(
    "lowy-nonconvex/mnist", "Lowy et al. Figs. 4, 5, 9, 10: ISRL-DP SPIDER vs MB-SGD / Local SGD, MNIST MLP, "
                            "25 digit-pair silos",
    title="MNIST odd/even MLP (N = 25)",
    settings={"trial_data": D.mnist_trial, "model": (nets.MnistMLP(), nets.MNIST_INPUT_SHAPE),
              "loss": nets.mnist_loss, "error": nets.mnist_error,
              "epsilons": (0.75, 1.0, 1.5, 3.0, 6.0, 12.0, 18.0),
              "steps": _steps((25, 50), *[lambda r: MNIST_GRID] * 3), "clips": (1.0, 5.0, 10.0, 100.0, 10000.0),
              "phase_lengths": ((25, (1, 2)), (50, (1, 2, 3, 4))),   # large q needs a large K
              # Local SGD's participants one at a time: the vmapped models of a call (configs x reps) stay in
              # the cache through the 606 / 428 single-record local steps (docs/performance.md,
              # lowy_nonconvex_grid); the same results to float rounding
              "local_clients_per_pass": 1},
    panels=_panels((25, 25), (12, 50), (12, 25), (25, 50)), trials=_trials(3), reps=2, seed_base=11_000_000,
    # A Local SGD call shares each step's noise across its configs (same seeds), so more configs per call
    # amortise it, until a silo's vmapped models (configs x reps, one silo per pass) outgrow the cache; the
    # other families gain nothing from more than about 10 (docs/performance.md, lowy_nonconvex_grid)
    configs_per_batch={"mbsgd": 10, "local": 100, "spider": 10, "alt": 10}, notes=(MLP_NOTE,),
    quick={"trials": 1, "reps": 1, "panels": _panels((25, 4)), "configs_per_batch": None,
           "settings": {"epsilons": (0.75, 12.0), "clips": (1.0, 10.0), "phase_lengths": ((4, (2,)),),
                        "steps": _steps((4,), lambda r: exp_grid(-2.25, 0, 2), lambda r: exp_grid(-4.5, -2.25, 2),
                                        lambda r: exp_grid(-2.25, 0, 2)),
                        "data_options": {"per_label": 40, "pca_fit_records": 3000}},
           "config": {"epsilons": [0.75, 12.0], "notes": [
               "quick form: 40 images per digit (64 training records per silo), PCA fitted on the first 3000 "
               "training images, R = 4, 2 epsilons, 2 step sizes and 2 clips, q = 2 only, 1 trial", MLP_NOTE]}},
    variants={"authors-noise": AUTHORS_NOISE,
              "reduced": {"trials": 3, "reps": 2, "panels": _panels((25, 25)), "configs_per_batch": 8,
                          "settings": {"steps": _steps((25,), *[lambda r: MNIST_GRID[2:]] * 3), "clips": (1.0, 10.0),
                                       "phase_lengths": ((25, (1, 2)),)},
                          "config": {"notes": [
                              "REDUCED FORM: Fig. 4's panel (M = 25, R = 25) only, 3 trials, 2 repetitions, step "
                              "sizes exp({-4.5, -2.25, 0}) (the paper's 3 largest of 5), clips {1, 10} (of 1, 5, 10, "
                              "100, 10000); the paper's data, model, epsilons, K and q in {1, 2}", MLP_NOTE]}}}))

CIFAR_SPIDER = lambda r: exp_grid(-5, 0, 12) if r == 50 else exp_grid(-5, 1, 8)   # noqa: E731

CIFAR10 = register(_study(
    "lowy-nonconvex/cifar10", "Lowy et al. Figs. 6, 7: ISRL-DP SPIDER vs baselines, CIFAR-10 LeNet, 10 one-class "
                              "silos (offline subset)",
    title="CIFAR-10 LeNet (N = 10, offline subset)",
    settings={"trial_data": D.cifar10_trial, "model": (nets.CifarCNN(), nets.CIFAR_INPUT_SHAPE),
              "loss": nets.cifar_loss, "error": nets.cifar_error, "data_options": {"source": "subset"},
              "epsilons": (0.75, 1.0, 1.5, 3.0, 6.0, 12.0, 18.0),
              "steps": _steps((50, 100), CIFAR_SPIDER, lambda r: exp_grid(-5, 1, 20), CIFAR_SPIDER),
              "clips": (0.001, 0.01, 0.1, 1.0, 5.0, 10.0),
              "phase_lengths": ((50, (1, 2, 3, 4)), (100, tuple(range(1, 9))))},
    panels=_panels((10, 50), (10, 100)), trials=_trials(3), reps=2, seed_base=12_000_000, configs_per_batch=4,
    notes=(D.CIFAR_SUBSET_NOTE,),
    quick={"trials": 1, "reps": 1, "panels": _panels((10, 2)), "configs_per_batch": None,
           "settings": {"epsilons": (0.75, 6.0), "clips": (1.0,), "phase_lengths": ((2, (2,)),), "test_limit": 200,
                        "steps": _steps((2,), lambda r: (math.exp(-2),), lambda r: (math.exp(-4),),
                                        lambda r: (math.exp(-2),)),
                        "data_options": {"source": "subset", "per_silo": 8}},
           "config": {"epsilons": [0.75, 6.0], "notes": [
               D.CIFAR_SUBSET_NOTE, "quick form: 8 images per silo, the first 200 test images, R = 2, 2 epsilons, "
                                    "1 step size, 1 clip, q = 2 only, 1 trial"]}}))

WBCD_GRID = exp_grid(-9, 0, 15)
WBCD_NOTE = ("every training record kept (169 malignant, 285 benign); the authors resample each silo with "
             "replacement to int(q * min class count)")

WBCD = register(_study(
    "lowy-nonconvex/wbcd", "Lowy et al. Fig. 8: ISRL-DP SPIDER vs baselines, breast cancer MLP, 2 one-class silos",
    title="WBCD MLP (N = 2)",
    settings={"trial_data": D.wbcd_trial, "model": (nets.WbcdMLP(), nets.WBCD_INPUT_SHAPE), "loss": nets.wbcd_loss,
              "error": nets.wbcd_error, "epsilons": (0.75, 1.0, 1.5, 3.0, 6.0, 12.0, 18.0),
              "steps": _steps((25,), *[lambda r: WBCD_GRID] * 3), "clips": (0.1, 1.0, 5.0, 10.0),
              "phase_lengths": ((25, tuple(range(1, 11))),)},
    panels=_panels((2, 25)), trials=_trials(10), reps=3, seed_base=13_000_000, configs_per_batch=120,
    notes=(WBCD_NOTE,),
    quick={"trials": 1, "reps": 1, "panels": _panels((2, 6)), "configs_per_batch": None,
           "settings": {"epsilons": (0.75, 18.0), "clips": (1.0, 5.0), "phase_lengths": ((6, (3,)),),
                        "steps": _steps((6,), *[lambda r: exp_grid(-4.5, 0, 3)] * 3)},
           "config": {"epsilons": [0.75, 18.0], "notes": [
               WBCD_NOTE, "quick form: R = 6, 2 epsilons, 3 step sizes, 2 clips, q = 3 only, 1 trial"]}}))
