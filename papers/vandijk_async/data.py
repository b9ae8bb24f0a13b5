"""The datasets (LIBSVM a9a, w8a, phishing, ijcnn1, covtype; MNIST), the losses and models, the clients' split and
the evaluation."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxfl.data import loaders
from jaxfl.data.partition import iid, label_pairs
from jaxfl.studies.spec import Panel, Study, Trial
from jaxfl.models import nets
from jaxfl.models.linear import init_linear, linear, logistic_loss


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


def _linear_init(name: str):
    return lambda seed: init_linear(loaders.LIBSVM_FEATURES[name])
