"""jaxfl.checks: every check returns the converted value or raises one ValueError naming the field."""
import math

import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxfl
from jaxfl import checks
from jaxfl.algorithms import minibatch_sgd
from jaxfl.data.federated import FederatedData
from jaxfl.models import init_linear, logistic_loss


# ------------------------------------------------------------------------------------------------
# Scalars


@pytest.mark.parametrize("value, expected", [(3, 3), (np.int64(4), 4), (2.0, 2), (np.float32(5.0), 5),
                                             (np.asarray(7), 7), (jnp.asarray(6), 6)])
def test_positive_int_converts(value, expected):
    out = checks.positive_int("rounds", value)
    assert out == expected and type(out) is int


@pytest.mark.parametrize("value", [0, -1, 2.5, True, "3", None, math.nan, math.inf, [1, 2]])
def test_positive_int_rejects(value):
    with pytest.raises(ValueError, match=r"^rounds must be an integer >= 1, got "):
        checks.positive_int("rounds", value)


def test_non_negative_int_and_integer():
    assert checks.non_negative_int("steps", 0) == 0
    assert checks.integer("clients", 2, minimum=2) == 2
    assert checks.integer("offset", -3) == -3
    with pytest.raises(ValueError, match="steps must be an integer >= 0, got -1"):
        checks.non_negative_int("steps", -1)
    with pytest.raises(ValueError, match="--clients must be an integer >= 2, got 1"):
        checks.integer("--clients", 1, minimum=2)


@pytest.mark.parametrize("value", [1, 0.5, np.float32(2.5), np.asarray(3.0), jnp.asarray(0.25)])
def test_positive_float_converts(value):
    out = checks.positive_float("noise_multiplier", value)
    assert type(out) is float and out == float(value)


@pytest.mark.parametrize("value", [0.0, -1.0, math.inf, math.nan, True, "1.0", None, np.ones(2)])
def test_positive_float_rejects(value):
    with pytest.raises(ValueError, match="^noise_multiplier must be "):
        checks.positive_float("noise_multiplier", value)


def test_positive_float_allow_inf():
    assert checks.positive_float("clip_norm", math.inf, allow_inf=True) == math.inf
    for bad in (0.0, -1.0, math.nan):
        with pytest.raises(ValueError, match=r"clip_norm must be > 0, got"):
            checks.positive_float("clip_norm", bad, allow_inf=True)


def test_non_negative_float():
    assert checks.non_negative_float("lam", 0) == 0.0
    assert checks.non_negative_float("lam", math.inf, allow_inf=True) == math.inf
    for bad in (-0.1, math.inf, math.nan):
        with pytest.raises(ValueError, match="lam must be finite and >= 0"):
            checks.non_negative_float("lam", bad)


def test_epsilon():
    assert checks.epsilon("target_epsilon", 2) == 2.0
    assert checks.epsilon("epsilon", 0.0, allow_zero=True) == 0.0
    with pytest.raises(ValueError, match="target_epsilon must be finite and > 0, got 0"):
        checks.epsilon("target_epsilon", 0)


def test_real_and_finite():
    assert checks.real("x", np.float64(1.5)) == 1.5
    assert math.isnan(checks.real("x", math.nan))
    assert checks.finite("lr", 0.1) == 0.1
    np.testing.assert_array_equal(checks.finite("w", [1, 2]), np.array([1.0, 2.0]))
    assert checks.finite("w", [1, 2]).dtype == np.float64
    with pytest.raises(ValueError, match="x must be a real number, got 'a'"):
        checks.real("x", "a")
    with pytest.raises(ValueError, match="lr must be finite, got inf"):
        checks.finite("lr", math.inf)
    with pytest.raises(ValueError, match="w must be finite, got nan at flat index 1"):
        checks.finite("w", [1.0, math.nan])


@pytest.mark.parametrize("kwargs, good, bad, interval", [
    ({}, [1.0, 0.5], [0.0, 1.5, -0.1, math.nan], r"\(0, 1\]"),
    ({"open_high": True}, [0.5], [1.0, 0.0], r"\(0, 1\)"),
    ({"open_low": False}, [0.0, 1.0], [-0.1, 1.1], r"\[0, 1\]"),
])
def test_probability(kwargs, good, bad, interval):
    for value in good:
        assert checks.probability("rate", value, **kwargs) == value
    for value in bad:
        with pytest.raises(ValueError, match=f"rate must be in {interval}, got"):
            checks.probability("rate", value, **kwargs)


def test_sampling_rate():
    assert checks.sampling_rate("--sampling-rate", 1) == 1.0
    with pytest.raises(ValueError, match="--sampling-rate must be in"):
        checks.sampling_rate("--sampling-rate", 0)


# ------------------------------------------------------------------------------------------------
# Deltas and per-silo values


def test_delta_scalar_and_per_silo():
    assert checks.delta("delta", 1e-5) == 1e-5 and type(checks.delta("delta", 1e-5)) is float
    per_silo = checks.delta("delta", [1e-5, 1e-4])
    assert per_silo.dtype == np.float64 and per_silo.tolist() == [1e-5, 1e-4]
    assert checks.delta("delta", 0.0, allow_zero=True) == 0.0
    for bad in (0.0, 1.0, 1.5, -1e-3, math.nan):
        with pytest.raises(ValueError, match=r"delta must be in \(0, 1\), got"):
            checks.delta("delta", bad)
    with pytest.raises(ValueError, match=r"delta must be in \(0, 1\), got 1.0 \(entry 1 of"):
        checks.delta("delta", [1e-5, 1.0])
    with pytest.raises(ValueError, match=r"deltas must be in \[0, 1\), got 1.0"):
        checks.delta("deltas", 1.0, allow_zero=True)
    with pytest.raises(ValueError, match="delta must be a real number"):
        checks.delta("delta", [1e-5, 1e-4], scalar=True)


def test_per_silo():
    out = checks.per_silo("epsilon", 2, 3)
    assert out.dtype == np.float64 and out.tolist() == [2.0, 2.0, 2.0]
    out = checks.per_silo("epsilon", np.array([1, 2, 3], np.float32), 3)
    assert out.dtype == np.float64 and out.tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(ValueError,
                       match=r"epsilon must be a scalar or have one value per silo \(3\), got shape \(2,\)"):
        checks.per_silo("epsilon", [1.0, 2.0], 3)
    with pytest.raises(ValueError, match="epsilon must be a real number"):
        checks.per_silo("epsilon", "a", 3)


def test_positive_floats_and_silo_counts():
    assert checks.positive_floats("n", 3).shape == ()
    assert checks.positive_floats("n", [1, 2]).tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="n must be finite and > 0"):
        checks.positive_floats("n", [1, 0])
    counts = checks.silo_counts("counts", [3, 4.0])
    assert counts.dtype == np.int64 and counts.tolist() == [3, 4]
    for bad in ([], [3, 0], [[3]], [2.5], "ab"):
        with pytest.raises(ValueError, match="counts must be a non-empty list of positive silo sizes"):
            checks.silo_counts("counts", bad)


def test_one_of():
    assert checks.one_of("calibration", "theorem", ("theorem", "experiment")) == "theorem"
    with pytest.raises(ValueError, match=r"calibration must be one of \('theorem', 'experiment'\), got 'x'"):
        checks.one_of("calibration", "x", ("theorem", "experiment"))
    with pytest.raises(ValueError, match="noise_on must be one of"):
        checks.one_of("noise_on", np.ones(2), ["all", "shared"])


# ------------------------------------------------------------------------------------------------
# Federated data


def _data(num_silos=3, max_records=4, features=2):
    x = np.arange(num_silos * max_records * features, dtype=np.float32).reshape(num_silos, max_records, features)
    y = np.zeros((num_silos, max_records), np.int32)
    return FederatedData(x, y, np.array([4, 2, 1], np.int32)[:num_silos])


def test_federated_data_accepts_and_returns_the_data(small_data):
    assert checks.federated_data(small_data) is small_data
    data = _data()
    assert checks.federated_data(data) is data


@pytest.mark.parametrize("change, match", [
    (lambda d: d._replace(x=jnp.asarray(d.x).at[1, 3, 0].set(jnp.nan)),
     r"data.x contains non-finite values \(first at silo 1, record 3\)"),
    (lambda d: d._replace(y=np.full(d.y.shape, np.inf, np.float32)), r"data.y contains non-finite values"),
    (lambda d: d._replace(counts=np.array([4, 2], np.int32)), r"data.counts must have one entry per silo \(3\)"),
    (lambda d: d._replace(counts=np.array([[4, 2, 1]], np.int32)), r"data.counts must have one entry per silo"),
    (lambda d: d._replace(counts=np.array([4.0, 2.0, 1.0])), r"data.counts must hold integers, got dtype float64"),
    (lambda d: d._replace(counts=np.array([4, 5, 1])),
     r"data.counts must be in \[0, max_records=4\], got 5 for silo 1"),
    (lambda d: d._replace(counts=np.array([4, -1, 1])), r"data.counts must be in \[0, max_records=4\], got -1"),
    (lambda d: d._replace(y=np.zeros((3, 5), np.int32)), r"data.y must have the same \[num_silos, max_records\]"),
    (lambda d: d._replace(x=np.zeros(3, np.float32)),
     r"data.x must be \[num_silos, max_records, ...\], got shape \(3,\)"),
    (lambda d: (d.x, d.y), r"data must be a FederatedData"),
])
def test_federated_data_rejects(change, match):
    with pytest.raises(ValueError, match=match):
        checks.federated_data(change(_data()))


def test_federated_data_checks_device_arrays_too():
    d = _data()
    d = FederatedData(jnp.asarray(d.x).at[2, 0, 1].set(jnp.inf), jnp.asarray(d.y), jnp.asarray(d.counts))
    with pytest.raises(ValueError, match=r"data.x contains non-finite values \(first at silo 2, record 0\)"):
        checks.federated_data(d)


# ------------------------------------------------------------------------------------------------
# The boundary into compiled code: jaxfl.train


def _alg():
    return minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.5), sampling_rate=0.2, clip_norm=1.0,
                         noise_multiplier=1.0)


def test_train_rejects_nan_features_with_one_clear_error(small_data):
    bad = small_data._replace(x=small_data.x.at[2, 5, 1].set(jnp.nan))
    with pytest.raises(ValueError, match=r"^data.x contains non-finite values \(first at silo 2, record 5\)$"):
        jaxfl.train(_alg(), bad, init_linear(5), rounds=2, key=0, progress=False)


def test_train_rejects_counts_of_the_wrong_length(small_data):
    bad = small_data._replace(counts=small_data.counts[:4])
    with pytest.raises(ValueError, match=r"^data.counts must have one entry per silo \(5\), got shape \(4,\)$"):
        jaxfl.train(_alg(), bad, init_linear(5), rounds=2, key=0, progress=False)


def test_train_names_bad_rounds(small_data):
    with pytest.raises(ValueError, match="rounds must be an integer >= 0, got -1"):
        jaxfl.train(_alg(), small_data, init_linear(5), rounds=-1, progress=False)
