"""DP-FedAvg with adaptive clipping (Andrew et al. 2021): the clip follows the target quantile of the update norms,
the noise is split as the paper says, and the run's epsilon is the accountant's composition of both mechanisms."""
import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxfl
from jaxfl.algorithms import dp_fedavg
from jaxfl.algorithms.dp_fedavg import AdaptiveServerState
from jaxfl.audit import linear_loss
from jaxfl.engine.participation import poisson
from jaxfl.privacy.adaptive_clipping import (adaptive_clip, below_fraction, combined_noise_multiplier, next_clip,
                                             update_noise_multiplier)

CLIENTS, RATE, EXPECTED = 1000, 0.1, 100.0


def _norm_data(norms):
    """One client per norm, holding one record ``r e_0``: with the linear loss and one SGD step of size 1 its
    model delta is ``-r e_0``, of norm ``r``."""
    x = np.zeros((len(norms), 1, 4), np.float32)
    x[:, 0, 0] = norms
    return jaxfl.FederatedData(jnp.asarray(x), jnp.zeros((len(norms), 1)), jnp.ones(len(norms), jnp.int32))


def _algorithm(clip, z=1.0):
    return dp_fedavg(linear_loss, client_opt=optax.sgd(1.0), local_steps=1, participation=poisson(RATE),
                     expected_clients=EXPECTED, clip_norm=clip, noise_multiplier=z)


@pytest.mark.parametrize("quantile", [0.5, 0.8])
def test_the_clip_tracks_the_target_quantile_of_a_known_distribution(quantile):
    """Norms uniform on [1, 3]: the q-quantile is 1 + 2q. From a clip 20 times too small, 100 rounds at rate 0.1
    (about 100 clients a round, bits' noise 5) end within 6 % of it."""
    norms = np.linspace(1.0, 3.0, CLIENTS)
    result = jaxfl.train(_algorithm(adaptive_clip(0.1, target_quantile=quantile)), _norm_data(norms),
                         {"w": jnp.zeros(4)}, rounds=100, progress=False)
    assert isinstance(result.state, AdaptiveServerState)
    assert float(result.state.clip_norm) == pytest.approx(1.0 + 2.0 * quantile, rel=0.06)


def test_the_epsilon_is_the_composition_of_both_mechanisms():
    """The run's epsilon is dp_accounting's for rounds of one Poisson-sampled Gaussian whose multiplier combines
    the deltas' (z_delta on sensitivity C) and the bits' (sigma_b on sensitivity 1/2), and that multiplier is the
    z the run was given."""
    z, sigma_b = 1.0, EXPECTED / 20.0
    z_delta = update_noise_multiplier(z, sigma_b)
    assert z_delta == pytest.approx((1.0 - 1.0 / (2 * sigma_b) ** 2) ** -0.5)
    assert combined_noise_multiplier(z_delta, sigma_b) == pytest.approx(z, rel=1e-12)
    result = jaxfl.train(_algorithm(adaptive_clip(0.5), z), _norm_data(np.full(CLIENTS, 2.0)),
                         {"w": jnp.zeros(4)}, rounds=40, delta=1e-5, progress=False)
    # the two Gaussians on the same sampled clients, composed by RDP, as one event per round
    both = dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(z_delta),
                                          dp_accounting.GaussianDpEvent(2 * sigma_b)])
    unsampled = dp_accounting.rdp.RdpAccountant().compose(both, 40).get_epsilon(1e-5)
    assert unsampled == pytest.approx(
        dp_accounting.rdp.RdpAccountant().compose(dp_accounting.GaussianDpEvent(z), 40).get_epsilon(1e-5), rel=1e-6)
    expected = dp_accounting.rdp.RdpAccountant().compose(
        dp_accounting.PoissonSampledDpEvent(RATE, dp_accounting.GaussianDpEvent(
            combined_noise_multiplier(z_delta, sigma_b))), 40).get_epsilon(1e-5)
    assert result.epsilon == pytest.approx(expected, rel=1e-6)


def test_the_deltas_noise_is_z_delta_times_the_round_clip():
    """Clients whose deltas are all 0: the first round's model change is the deltas' noise over the expected
    clients, of std z_delta C_0 / m per coordinate (over 300 keys x 4 coordinates, within 10 %). With the bits'
    noise 0.6, z_delta is 1.81 for z = 1: noise at z would be 45 % short."""
    z, clip, sigma_b = 1.0, 0.5, 0.6
    algorithm = _algorithm(adaptive_clip(clip, count_stddev=sigma_b), z)
    data = _norm_data(np.zeros(50))
    state = algorithm.init({"w": jnp.zeros(4)})
    moves = jax.vmap(lambda k: algorithm.round(state, data, jax.random.key(k))[0].params["w"])(jnp.arange(300))
    z_delta = update_noise_multiplier(z, sigma_b)
    assert z_delta == pytest.approx(1.809, abs=1e-3)
    assert float(jnp.std(moves)) == pytest.approx(z_delta * clip / EXPECTED, rel=0.1)


def test_the_geometric_step_and_the_fraction():
    assert float(next_clip(2.0, 0.5, 0.5, 0.3)) == pytest.approx(2.0)
    assert float(next_clip(2.0, 1.0, 0.5, 0.2)) == pytest.approx(2.0 * np.exp(-0.1))
    assert float(below_fraction(-50.0, 100.0)) == 0.0 and float(below_fraction(0.0, 100.0)) == 0.5


@pytest.mark.parametrize("kwargs, match", [
    (dict(target_quantile=0.0), "target_quantile"), (dict(target_quantile=1.5), "target_quantile"),
    (dict(learning_rate=0.0), "learning_rate"), (dict(count_stddev=-1.0), "count_stddev"),
])
def test_bad_settings_are_refused_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        adaptive_clip(0.1, **kwargs)
    with pytest.raises(ValueError, match="initial"):
        adaptive_clip(0.0)


def test_bits_noise_too_small_for_the_budget_is_refused():
    """z = 2 with 5 expected clients (sigma_b = 0.25): the bits alone would spend more than z allows."""
    with pytest.raises(ValueError, match="noise_multiplier=2.0 leaves nothing for the updates"):
        dp_fedavg(linear_loss, client_opt=optax.sgd(1.0), local_steps=1, participation=poisson(0.5),
                  expected_clients=5.0, clip_norm=adaptive_clip(1.0), noise_multiplier=2.0)


def _record_data(norms):
    """One dataset whose record ``j`` is ``r_j e_0``: its gradient of the linear loss has norm ``r_j``."""
    x = np.zeros((len(norms), 4), np.float32)
    x[:, 0] = norms
    return jaxfl.from_silos([(x, np.zeros(len(norms), np.float32))])


def _dp_sgd(clip, z=1.0):
    # a learning rate of 0 keeps the model (and so every gradient) fixed: only the clip moves
    return jaxfl.dp_sgd(linear_loss, optimizer=optax.sgd(0.0), expected_batch_size=100, num_records=2000,
                        clip_norm=clip, noise_multiplier=z)


@pytest.mark.parametrize("quantile", [0.5, 0.8])
def test_dp_sgd_clip_tracks_the_quantile_of_the_per_example_norms(quantile):
    """Per-example gradient norms uniform on [1, 3]: 100 steps at rate 0.05 (100 records a step) end within 6 %
    of the quantile, from a clip 20 times too small."""
    result = jaxfl.train(_dp_sgd(adaptive_clip(0.1, target_quantile=quantile)), _record_data(np.linspace(1, 3, 2000)),
                         {"w": jnp.zeros(4)}, rounds=100, progress=False)
    assert float(result.state.clip_norm) == pytest.approx(1.0 + 2.0 * quantile, rel=0.06)


def test_dp_sgd_adaptive_epsilon_is_the_poisson_gaussian_of_z():
    result = jaxfl.train(_dp_sgd(adaptive_clip(0.5)), _record_data(np.full(2000, 2.0)), {"w": jnp.zeros(4)},
                         rounds=30, delta=1e-5, progress=False)
    expected = dp_accounting.rdp.RdpAccountant().compose(
        dp_accounting.PoissonSampledDpEvent(0.05, dp_accounting.GaussianDpEvent(1.0)), 30).get_epsilon(1e-5)
    assert result.epsilon == pytest.approx(expected, rel=1e-6)


def test_dp_sgd_adaptive_trains_one_dataset_only():
    two = jaxfl.from_silos([(np.ones((10, 4), np.float32), np.zeros(10, np.float32))] * 2)
    with pytest.raises(ValueError, match="one dataset, got 2 silos"):
        jaxfl.train(_dp_sgd(adaptive_clip(0.5)), two, {"w": jnp.zeros(4)}, rounds=1, progress=False)


def test_adaptive_clipping_without_noise_is_refused():
    with pytest.raises(ValueError, match="needs noise_multiplier > 0"):
        _algorithm(adaptive_clip(1.0), z=0.0)
