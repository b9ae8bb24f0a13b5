"""Per-silo (ISRL-DP) and central ledgers."""
import dp_accounting
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxfl.accounting import (CentralLedger, RdpAccountant, SiloLedger, UnsupportedEventError, epsilon_for,
                              gaussian_event)

BATCH = 10


def silo_event(n, sigma=1.0, local_steps=1):
    return gaussian_event(sigma, BATCH / n, local_steps)


def test_larger_silo_gets_smaller_epsilon():
    sizes = [100, 1000, 10000]
    ledger = SiloLedger([silo_event(n) for n in sizes]).record(100)
    eps = ledger.epsilons(1e-5)
    assert eps.shape == (3,) and eps.dtype == np.float64
    assert eps[0] > eps[1] > eps[2] > 0
    assert ledger.epsilon(1e-5) == eps[0]
    for n, e in zip(sizes, eps):
        assert e == pytest.approx(epsilon_for(1.0, BATCH / n, 100, 1e-5), rel=1e-12)
    # per-silo delta, e.g. 1/n_i^2
    per_silo = ledger.epsilons(np.array([1.0 / n**2 for n in sizes]))
    assert per_silo.shape == (3,)
    assert per_silo[1] == pytest.approx(epsilon_for(1.0, BATCH / 1000, 100, 1e-6), rel=1e-12)


def test_grouping_equals_ungrouped():
    a, b = silo_event(200), silo_event(5000, sigma=0.8, local_steps=3)
    events = [a, b, a, a, b, silo_event(200)]
    ledger = SiloLedger(events).record(40)
    assert ledger.num_groups == 2
    assert ledger.group_index.tolist() == [0, 1, 0, 0, 1, 0]
    deltas = np.array([1e-5, 1e-6, 1e-7, 1e-5, 1e-5, 1e-6])
    separate = [RdpAccountant().compose(e, 40).epsilon(d) for e, d in zip(events, deltas)]
    np.testing.assert_array_equal(ledger.epsilons(deltas), separate)


def test_shared_event_with_num_silos():
    ledger = SiloLedger(silo_event(500), num_silos=4).record(3)
    assert ledger.num_silos == 4 and ledger.num_groups == 1
    assert np.all(ledger.epsilons(1e-5) == ledger.epsilon(1e-5))
    with pytest.raises(ValueError, match="num_silos"):
        SiloLedger(silo_event(500))
    with pytest.raises(ValueError, match="num_silos"):
        SiloLedger([silo_event(500)] * 2, num_silos=3)


def test_record_and_rounds():
    ledger = SiloLedger([silo_event(100)], accountant="rdp")
    assert ledger.rounds == 0 and ledger.epsilon(1e-5) == 0.0
    ledger.record().record(0).record(4)
    assert ledger.rounds == 5
    assert ledger.accountant_name == "rdp"
    with pytest.raises(ValueError, match="rounds"):
        ledger.record(-1)


def test_state_dict_resume_recomposes_history():
    events = [silo_event(100), silo_event(1000)]
    ledger = SiloLedger(events, accountant="pld", value_discretization_interval=1e-3).record(7).record(5)
    state = ledger.state_dict()
    assert state == {"accountant": "pld", "num_silos": 2, "rounds": 12}
    resumed = SiloLedger(events, accountant="pld", value_discretization_interval=1e-3).load_state_dict(state)
    assert resumed.rounds == 12
    np.testing.assert_allclose(resumed.epsilons(1e-5), ledger.epsilons(1e-5), rtol=1e-3)
    with pytest.raises(ValueError, match="accountant"):
        SiloLedger(events).load_state_dict(state)


def test_copy_is_independent():
    ledger = SiloLedger([silo_event(100)]).record(3)
    twin = ledger.copy().record(10)
    assert ledger.rounds == 3 and twin.rounds == 13
    assert twin.epsilon(1e-5) > ledger.epsilon(1e-5)


def test_central_ledger():
    ledger = CentralLedger(gaussian_event(1.1, 256 / 60000)).record(14063)
    assert ledger.num_silos == 1
    assert ledger.accountant_name == "rdp"
    assert ledger.epsilon(1e-5) == pytest.approx(2.59666, abs=1e-5)
    assert ledger.epsilons(1e-5).shape == (1,)
    assert ledger.event == gaussian_event(1.1, 256 / 60000)


def test_rounds_within_budget_edges():
    ledger = SiloLedger([silo_event(100), silo_event(1000)])
    assert ledger.rounds_within_budget(3.0, 1e-5, 0) == 0
    assert ledger.rounds_within_budget(1.0, 1e-5, 10) == 0  # one round of q=0.1 already costs eps 2.13
    budget = ledger.rounds_within_budget(3.0, 1e-5, 10**6)
    assert 0 < budget < 10**6
    assert ledger.rounds == 0 and ledger.epsilon(1e-5) == 0.0  # not mutated
    assert ledger.rounds_within_budget(100.0, 1e-5, 50) == 50  # max_rounds reached
    assert ledger.can_record(3.0, 1e-5, budget) and not ledger.can_record(3.0, 1e-5, budget + 1)
    ledger.record(budget + 5)
    assert ledger.rounds_within_budget(3.0, 1e-5, 100) == 0  # already over budget
    assert not ledger.can_record(3.0, 1e-5)
    with pytest.raises(ValueError, match="epsilon"):
        ledger.rounds_within_budget(0.0, 1e-5, 10)
    with pytest.raises(ValueError, match="delta"):
        ledger.rounds_within_budget(1.0, 2.0, 10)
    with pytest.raises(ValueError, match="max_rounds"):
        ledger.rounds_within_budget(1.0, 1e-5, -1)


def test_rounds_within_budget_pld():
    ledger = SiloLedger([silo_event(50, sigma=1.5)], accountant="pld", value_discretization_interval=1e-3)
    ledger.record(3)
    t = ledger.rounds_within_budget(3.0, 1e-5, 200)
    assert 0 < t < 200
    assert ledger.copy().record(t).epsilon(1e-5) <= 3.0
    assert ledger.copy().record(t + 1).epsilon(1e-5) > 3.0


def test_unsupported_event_fails_at_construction():
    event = gaussian_event(1.0, sampling="with_replacement", dataset_size=100, sample_size=10)
    with pytest.raises(UnsupportedEventError):
        SiloLedger([event])
    with pytest.raises(ValueError, match="DpEvent"):
        SiloLedger([silo_event(100), "gaussian"])


def test_unhashable_events_are_grouped():
    composed = dp_accounting.ComposedDpEvent([silo_event(100), dp_accounting.GaussianDpEvent(5.0)])
    other = dp_accounting.ComposedDpEvent([silo_event(100), dp_accounting.GaussianDpEvent(6.0)])
    ledger = SiloLedger([composed, other, composed]).record(2)
    assert ledger.group_index.tolist() == [0, 1, 0]
    eps = ledger.epsilons(1e-5)
    assert eps[0] == eps[2] > eps[1]


@settings(max_examples=15, deadline=None, derandomize=True, database=None)
@given(sizes=st.lists(st.integers(20, 5000), min_size=1, max_size=3),
       sigma=st.floats(0.7, 3.0),
       already=st.integers(0, 30),
       target=st.floats(0.3, 8.0),
       max_rounds=st.integers(0, 3000),
       per_silo_delta=st.booleans())
def test_rounds_within_budget_never_overshoots_and_is_tight(sizes, sigma, already, target, max_rounds,
                                                           per_silo_delta):
    ledger = SiloLedger([silo_event(n, sigma) for n in sizes]).record(already)
    delta = np.array([1.0 / n**2 for n in sizes]) if per_silo_delta else 1e-5
    before = ledger.epsilons(delta)
    t = ledger.rounds_within_budget(target, delta, max_rounds)
    assert 0 <= t <= max_rounds
    np.testing.assert_array_equal(ledger.epsilons(delta), before)  # not mutated
    assert ledger.rounds == already
    if ledger.epsilon(delta) > target:
        assert t == 0
        return
    assert ledger.copy().record(t).epsilon(delta) <= target  # never overshoots
    if t < max_rounds:  # tight
        assert ledger.copy().record(t + 1).epsilon(delta) > target
