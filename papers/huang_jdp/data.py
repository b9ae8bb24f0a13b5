"""The data owners: MNIST / Fashion-MNIST split into owners of 8 classes each (train, validation, test), and
the per-owner evaluation."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxfl.data import loaders
from jaxfl.data.partition import choose_silo_classes, class_limited, train_test_split_per_silo
from jaxfl.studies.spec import Panel, Study, Trial
from jaxfl.models import nets
from papers.huang_jdp.paper import CLASSES_PER_OWNER, DELTA


# ------------------------------------------------------------------------------------------------
# Data


@functools.lru_cache(maxsize=4)
def _images(dataset: str, split: str):
    load = {"mnist": loaders.load_mnist, "fashion-mnist": loaders.load_fashion_mnist}[dataset]
    x, y = load(split)
    return (np.asarray(x, np.float32) / np.float32(255.0))[..., None], np.asarray(y, np.int32)


def owners(dataset: str, num_owners: int, *, seed: int, total: int = 10_000, test_total: int = 5_000,
           classes_per_owner: int = CLASSES_PER_OWNER):
    """Huang et al.'s owners: ``(train, test, classes)``, :class:`jaxfl.data.FederatedData` over ``num_owners``
    silos of ``floor/ceil(total / n)`` training and ``floor/ceil(test_total / n)`` test records, each owner's
    from its own ``classes_per_owner`` classes (``classes: [n, classes_per_owner]``)."""
    classes = choose_silo_classes(num_owners, np.arange(10), classes_per_owner, seed=seed)
    x, y = _images(dataset, "train")
    xt, yt = _images(dataset, "test")
    return (class_limited(x, y, classes, total=total, seed=seed + 1),
            class_limited(xt, yt, classes, total=test_total, seed=seed + 2), classes)


def _trial(study: Study, t: int, panel: Panel) -> Trial:
    n = panel["owners"]
    train, test, classes = owners(study["dataset"], n, seed=1000 * t + n, total=study["records"],
                                  test_total=study["test_records"])
    if study["validation"]:  # tuning: score on records held out from the training owners, never on the test split
        train, test = train_test_split_per_silo(train, study["validation"], seed=1000 * t + n + 3)
    info = {"owners": n, "train_records": int(np.sum(np.asarray(train.counts))),
            "eval_records": int(np.sum(np.asarray(test.counts))), "eval_split": "validation" if study["validation"]
            else "test", "classes_per_owner": int(classes.shape[1]), "owner_classes": classes.tolist()}
    return Trial(train, {"test": test}, DELTA, info)


# ------------------------------------------------------------------------------------------------
# Evaluation: each owner's own model on its own split


def evaluate(models, eval_data) -> dict:
    """``{"test_accuracy", "test_error"}``: the unweighted mean over owners (with records) of owner ``j``'s
    model (leaves ``[n, ...]``) on owner ``j``'s evaluation records."""
    test = eval_data["test"]

    def owner(params, x, y, count):
        correct = jnp.argmax(nets.two_head_cnn.apply(params, x), axis=-1) == y
        return jnp.sum(correct * (jnp.arange(x.shape[0]) < count)) / jnp.maximum(count, 1)

    accuracy = jax.vmap(owner)(models, test.x, test.y, test.counts)
    real = (test.counts > 0).astype(jnp.float32)
    mean = jnp.sum(accuracy * real) / jnp.sum(real)
    return {"test_accuracy": mean, "test_error": 1.0 - mean}
