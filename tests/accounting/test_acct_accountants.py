"""Accountant objects, the registry and gaussian_event."""
import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld as dpa_pld
from dp_accounting import rdp as dpa_rdp

from jaxfl.accounting import (ACCOUNTANTS, Accountant, NeighboringRelation, PldAccountant, RdpAccountant,
                              UnsupportedEventError, available_accountants, gaussian_event, make_accountant,
                              register_accountant)

G = dp_accounting.GaussianDpEvent
P = dp_accounting.PoissonSampledDpEvent
S = dp_accounting.SelfComposedDpEvent


def test_registry_and_names():
    assert {"rdp", "pld"} <= set(available_accountants())
    assert make_accountant("rdp").name == "rdp"
    assert make_accountant("pld").name == "pld"
    assert isinstance(make_accountant("rdp"), Accountant)
    assert isinstance(make_accountant("pld", value_discretization_interval=1e-3), PldAccountant)


def test_unknown_accountant_names_value():
    with pytest.raises(ValueError, match="'nope'"):
        make_accountant("nope")


def test_register_accountant():
    try:
        register_accountant("test-rdp", lambda **kw: RdpAccountant(orders=[2, 4, 8], **kw))
        assert "test-rdp" in available_accountants()
        assert make_accountant("test-rdp").orders.tolist() == [2, 4, 8]
        with pytest.raises(ValueError, match="already registered"):
            register_accountant("test-rdp", RdpAccountant)
    finally:
        ACCOUNTANTS.pop("test-rdp", None)


def test_rdp_matches_dp_accounting_bit_for_bit():
    events = [(S(P(0.01, G(1.1)), 7), 3), (G(2.0), 2), (P(0.3, G(1.5)), 1), (S(G(3.0), 4), 1)]
    ours = RdpAccountant()
    ref = dpa_rdp.RdpAccountant()
    for event, count in events:
        ours.compose(event, count)
        ref.compose(event, count)
    assert ours.epsilon(1e-5) == ref.get_epsilon(1e-5)
    assert ours.delta(2.0) == ref.get_delta(2.0)
    np.testing.assert_array_equal(ours.rdp, ref._rdp)


def test_pld_matches_dp_accounting():
    ours = PldAccountant(value_discretization_interval=1e-3)
    ref = dpa_pld.PLDAccountant(value_discretization_interval=1e-3)
    for acc in (ours, ref):
        acc.compose(P(0.1, G(1.5)), 20)
        acc.compose(G(4.0), 2)
    assert ours.epsilon(1e-5) == ref.get_epsilon(1e-5)
    assert ours.delta(1.0) == ref.get_delta(1.0)


@pytest.mark.parametrize("name", ["rdp", "pld"])
def test_history_copy_rebuild(name):
    kw = {"value_discretization_interval": 1e-3} if name == "pld" else {}
    acc = make_accountant(name, **kw).compose(gaussian_event(1.2, 0.05), 10)
    assert acc.events == ((P(0.05, G(1.2)), 10),)
    twin = acc.copy()
    twin.compose(G(1.0))
    assert len(acc.events) == 1 and len(twin.events) == 2
    assert twin.epsilon(1e-5) > acc.epsilon(1e-5)
    assert acc.rebuild().epsilon(1e-5) == pytest.approx(acc.epsilon(1e-5), rel=1e-12)
    assert acc.copy().epsilon(1e-5) == acc.epsilon(1e-5)
    assert isinstance(acc.ledger, dp_accounting.DpEvent)


def test_empty_accountant():
    assert RdpAccountant().epsilon(1e-5) == 0.0
    assert isinstance(RdpAccountant().ledger, dp_accounting.NoOpDpEvent)
    assert RdpAccountant().compose(G(1.0), 0).epsilon(1e-5) == 0.0


@pytest.mark.parametrize("name,relation", [("rdp", "add_or_remove_one"), ("rdp", "replace_one"),
                                           ("pld", "add_or_remove_one")])
def test_with_replacement_is_unsupported(name, relation):
    """RDP never composes draws with replacement; PLD only under replace-one (test_acct_with_replacement)."""
    event = gaussian_event(1.0, steps=1, sampling="with_replacement", dataset_size=100, sample_size=10)
    assert isinstance(event, dp_accounting.SampledWithReplacementDpEvent)
    acc = make_accountant(name, neighboring_relation=relation)
    assert not acc.supports(event)
    with pytest.raises(UnsupportedEventError):
        acc.compose(event)
    assert acc.events == ()


@pytest.mark.parametrize("bad", [0.0, 1.0, 1.5, -1e-5, float("nan")])
def test_epsilon_rejects_bad_delta(bad):
    with pytest.raises(ValueError, match="delta"):
        RdpAccountant().epsilon(bad)


def test_delta_rejects_negative_epsilon():
    with pytest.raises(ValueError, match="-1"):
        RdpAccountant().delta(-1.0)
    assert RdpAccountant().compose(G(1.0)).delta(0.0) > 0


def test_compose_rejects_bad_count_and_event():
    with pytest.raises(ValueError, match="count"):
        RdpAccountant().compose(G(1.0), -1)
    with pytest.raises(ValueError, match="DpEvent"):
        RdpAccountant().compose("gaussian")


def test_neighboring_relation():
    acc = RdpAccountant(neighboring_relation="replace_one")
    assert acc.neighboring_relation is NeighboringRelation.REPLACE_ONE
    # Poisson sampling is defined for add/remove only in dp_accounting's RDP
    assert not acc.supports(P(0.1, G(1.0)))
    assert acc.supports(G(1.0))
    with pytest.raises(ValueError, match="neighboring_relation"):
        RdpAccountant(neighboring_relation="sideways")


def test_bad_orders():
    with pytest.raises(ValueError, match="orders"):
        RdpAccountant(orders=[0.5, 2])


# -- gaussian_event --------------------------------------------------------------------------------------

def test_gaussian_event_shapes():
    assert gaussian_event(1.5) == G(1.5)
    assert gaussian_event(1.5, sampling="none", steps=3) == S(G(1.5), 3)
    assert gaussian_event(1.5, 0.1) == P(0.1, G(1.5))
    assert gaussian_event(1.5, 0.1, 10) == S(P(0.1, G(1.5)), 10)
    assert gaussian_event(1.5, 0.1, 0) == dp_accounting.NoOpDpEvent()
    wr = gaussian_event(2.0, 0.1, 5, sampling="with_replacement", dataset_size=100, sample_size=10)
    assert wr == S(dp_accounting.SampledWithReplacementDpEvent(100, 10, G(2.0)), 5)


@pytest.mark.parametrize("kwargs, match", [
    ({"noise_multiplier": 0.0}, "noise_multiplier"),
    ({"noise_multiplier": -1.0}, "noise_multiplier"),
    ({"noise_multiplier": 1.0, "sampling_rate": 0.0}, "sampling_rate"),
    ({"noise_multiplier": 1.0, "sampling_rate": 1.5}, "sampling_rate"),
    ({"noise_multiplier": 1.0, "steps": -1}, "steps"),
    ({"noise_multiplier": 1.0, "steps": 2.5}, "steps"),
    ({"noise_multiplier": 1.0, "sampling": "shuffle"}, "sampling"),
    ({"noise_multiplier": 1.0, "sampling_rate": 0.5, "sampling": "none"}, "sampling_rate"),
    ({"noise_multiplier": 1.0, "sampling": "with_replacement"}, "dataset_size"),
    ({"noise_multiplier": 1.0, "sampling": "with_replacement", "dataset_size": 10, "sample_size": 2,
      "sampling_rate": 0.5}, "disagrees"),
])
def test_gaussian_event_rejects(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gaussian_event(**kwargs)


# --- google/differential-privacy#378: the replace-one factor applied once, whichever dp_accounting is installed


def _raw_rdp_epsilon(z, relation, delta=1e-5):
    acc = dpa_rdp.RdpAccountant(neighboring_relation=relation)
    acc.compose(dp_accounting.GaussianDpEvent(z))
    return acc.get_epsilon(delta)


def test_the_installed_dp_accounting_is_measured_not_read_from_its_version():
    from jaxfl.accounting import accountants

    # dp_accounting 0.6.0 (pinned by the tests' environment) reads the multiplier as std over sensitivity
    acc = dpa_rdp.RdpAccountant(orders=[2.0], neighboring_relation=NeighboringRelation.REPLACE_ONE)
    acc.compose(dp_accounting.GaussianDpEvent(1.0))
    assert accountants.upstream_scales_replace_one() is (float(acc._rdp[0]) > 2.0)


@pytest.mark.parametrize("upstream_fixed", [False, True])
def test_the_replace_one_correction_applies_exactly_once(monkeypatch, upstream_fixed):
    """Either dp_accounting halves (PR #464 merged: jaxfl hands the event as it is) or jaxfl does (today): a
    clipped sum's Gaussian of multiplier z under replace-one is accounted as a Gaussian of z / 2 under add/remove."""
    from jaxfl.accounting import accountants

    z, delta = 2.0, 1e-5
    monkeypatch.setattr(accountants, "upstream_scales_replace_one", lambda: upstream_fixed)
    acc = RdpAccountant(neighboring_relation="replace_one")
    acc.compose(dp_accounting.GaussianDpEvent(z))
    handed = z if upstream_fixed else z / 2   # what dp_accounting's replace-one accountant receives
    assert acc.get_epsilon(delta) == pytest.approx(_raw_rdp_epsilon(handed, NeighboringRelation.REPLACE_ONE, delta))
    if not upstream_fixed:   # on today's dp_accounting, the sound value: z / 2 under add/remove-one
        assert acc.get_epsilon(delta) == pytest.approx(
            _raw_rdp_epsilon(z / 2, NeighboringRelation.ADD_OR_REMOVE_ONE, delta))
