"""van Dijk et al.'s settings and published numbers (Table 3, the figures' settings, Examples 1-5)."""
from __future__ import annotations

import math




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


CURVE_POINTS = 40
"""Learning-curve points per run (the paper's figures plot accuracy against rounds)."""


# ------------------------------------------------------------------------------------------------
# E.2.3 (Fig. 1a, 6, 7): constant step and sample size against diminishing step, increasing sample size

DIMINISHING = {"iterations": 20_000, "constant_size": 200, "constant_rate": 0.0025, "eta0": 0.1,
               "increasing_slope": 100, "beta": {"strong": 0.001, "plain": 0.01, "nonconvex": 0.01}}
"""E.2.3 as the digest reads it (§9.7): 20,000 iterations over 5 clients; constant eta 0.0025 with s = 200 per
client (20 rounds); diminishing eta_t = 0.1 / (1 + 0.001 t) (strongly convex) or 0.1 / (1 + 0.01 sqrt t) (plain
convex, and non-convex: Fig. 8), per iteration (diminishing1) or per round (diminishing2), with s_{i,c} = 100 i
(9 rounds: the paper's slope is not given; this is the linear schedule its "9 rounds" fits)."""
CONSTANT_LABEL = "constant eta 0.0025, s = 200"


STEP_SIZE_RATES = (0.01, 0.005)
"""Fig. 9's constant step sizes: the paper says only diminishing eta_0 = 0.1 reached the accuracy "which can only be
achieved by fine tuning constant step sizes eta = 0.01 and eta = 0.005 for the two data sets" (real-sim, w8a)."""


# ------------------------------------------------------------------------------------------------
# E.2.2 (Fig. 3-5): sample-size methods

SAMPLING = {"iterations": 20_000, "a": 50, "exponents": (0.0, 0.25, 0.5, 0.75, 1.0), "eta0": 0.01,
            "beta": {"strong": 0.001, "plain": 0.01}}
"""E.2.2: global ``s_i = 50 i^c`` (the "O(i) method"; the paper does not list its c, these are the digest's
suggestion) and ``50 i / ln i``, ``b = 0``, split over 5 clients; 20,000 iterations; eta0 0.01 per round."""


# ------------------------------------------------------------------------------------------------
# E.2.4 (Fig. 2, 10, 11): biased against unbiased data

BIASED = {"eta0": 0.01, "beta": {"strong": 0.001, "plain": 0.01, "nonconvex": 0.01}, "slope": 50}
"""E.2.4: eta0 0.01 per round (diminishing2), eta0 / (1 + beta t) strongly convex, / (1 + beta sqrt t) otherwise;
linear s_{i,c} = 50 i (the paper gives no slope)."""


# ------------------------------------------------------------------------------------------------
# DP (Fig. 12 / 1b): increasing against constant sample sizes at the same per-round noise

DP = {"epsilon": 1.0, "delta": 5.5e-8, "sigma": 8.0, "clip": 0.1, "k_per_client": 25_000, "initial_size": 16,
      "eta0": 0.15, "baseline_rates": (0.01, 0.001)}
INCREASING, CONSTANT = "increasing s (16 + ceil(1.32 i)), diminishing eta", "constant s = 16"
DP_STEPS = {"w8a-strong": ("inverse", 0.001), "w8a-plain": ("inverse_sqrt", 0.01),
            "mnist-nonconvex": ("inverse_sqrt", 0.01)}


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
