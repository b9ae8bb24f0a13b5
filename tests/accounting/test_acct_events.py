"""jaxfl's own events (jaxfl.accounting.events), per-round schedules in ledgers, neighbouring relations and
the accountant table."""
import dataclasses
import subprocess
import sys

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld as dpa_pld
from dp_accounting import rdp as dpa_rdp

import jaxfl.accounting as acct
from jaxfl.accounting import (ACCOUNTANTS, CentralLedger, NeighboringRelation, SiloLedger, accountant_relations,
                              check_relation, events, make_accountant)

G = dp_accounting.GaussianDpEvent
P = dp_accounting.PoissonSampledDpEvent
ADD, REPLACE, SPECIAL = (NeighboringRelation.ADD_OR_REMOVE_ONE, NeighboringRelation.REPLACE_ONE,
                         NeighboringRelation.REPLACE_SPECIAL)
DELTA = 1e-5


# -- a schedule: a different event in every round -----------------------------------------------------------

def _growing(n, rounds=12, z=1.1, k0=4, growth=3):
    """Silo of ``n`` records, round ``r`` Poisson-samples ``k0 + growth r`` of them on average."""
    return events.RoundScheduleDpEvent(tuple(P((k0 + growth * r) / n, G(z)) for r in range(rounds)))


SIZES = (200, 350, 200)  # the two silos of 200 records share one accountant


def _by_hand(accountant, n, rounds, start=0):
    for r in range(start, start + rounds):
        accountant.compose(P((4 + 3 * r) / n, G(1.1)))
    return accountant


@pytest.mark.slow
def test_schedule_ledger_equals_hand_composition_in_rdp_exactly():
    ledger = SiloLedger([_growing(n) for n in SIZES], accountant="rdp")
    assert ledger.num_groups == 2
    ledger.record(5).record(4).record(3)  # uneven chunks: each starts where the last stopped
    expected = [_by_hand(dpa_rdp.RdpAccountant(), n, 12).get_epsilon(DELTA) for n in SIZES]
    np.testing.assert_array_equal(ledger.epsilons(DELTA), expected)
    # recorded in one go, or from a resumed state, the same
    np.testing.assert_array_equal(SiloLedger([_growing(n) for n in SIZES]).record(12).epsilons(DELTA), expected)
    resumed = SiloLedger([_growing(n) for n in SIZES]).load_state_dict(ledger.state_dict())
    np.testing.assert_array_equal(resumed.epsilons(DELTA), expected)


def test_schedule_ledger_equals_hand_composition_in_pld():
    kw = {"value_discretization_interval": 1e-3}
    ledger = SiloLedger([_growing(n) for n in SIZES], accountant="pld", **kw).record(5).record(4).record(3)
    expected = [_by_hand(dpa_pld.PLDAccountant(value_discretization_interval=1e-3), n, 12).get_epsilon(DELTA)
                for n in SIZES]
    np.testing.assert_allclose(ledger.epsilons(DELTA), expected, rtol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_schedule_budget_search_equals_a_brute_force_scan(accountant):
    kw = {"value_discretization_interval": 1e-2} if accountant == "pld" else {}
    horizon = 17 if accountant == "rdp" else 8  # PLD composition is slow: a shorter scan
    ledger = SiloLedger([_growing(n, rounds=horizon + 3) for n in SIZES], accountant=accountant, **kw).record(3)
    eps = lambda t: ledger.copy().record(t).epsilon(DELTA)  # noqa: E731
    curve = [eps(t) for t in range(horizon + 1)]
    assert all(a < b for a, b in zip(curve, curve[1:]))  # growing samples: every round costs more
    for target in (curve[0] * 1.01, curve[4], (curve[5] + curve[6]) / 2, curve[horizon] * 0.999,
                   curve[horizon] * 2):
        for max_rounds in (horizon, horizon // 2):
            brute = max([t for t in range(max_rounds + 1) if curve[t] <= target], default=0)
            assert ledger.rounds_within_budget(target, DELTA, max_rounds) == brute
            assert ledger.can_record(target, DELTA, brute)
    assert ledger.rounds == 3  # the search did not record anything


def test_schedule_refuses_rounds_past_its_end_naming_the_round():
    ledger = SiloLedger([_growing(200)], accountant="rdp").record(10)
    with pytest.raises(ValueError, match="round 12 is past the end"):
        ledger.record(3)
    assert ledger.rounds == 10 and ledger.epsilon(DELTA) == SiloLedger([_growing(200)]).record(10).epsilon(DELTA)
    with pytest.raises(ValueError, match="round 12"):
        ledger.rounds_within_budget(100.0, DELTA, 5)
    assert ledger.rounds_within_budget(100.0, DELTA, 2) == 2
    ledger.record(2)
    with pytest.raises(ValueError, match="round 12"):
        ledger.record(1)
    with pytest.raises(ValueError, match="RoundScheduleDpEvent"):
        events.RoundScheduleDpEvent(())
    with pytest.raises(ValueError, match="ordinary"):
        events.RoundScheduleDpEvent((G(1.0), events.RoundCycleDpEvent((G(1.0),))))
    with pytest.raises(ValueError, match="parallel"):
        SiloLedger([_growing(200)], composition="parallel")


def test_schedule_counts_merge_equal_rounds():
    a, b = G(2.0), G(3.0)
    schedule = events.RoundScheduleDpEvent([a, b, a, dp_accounting.ComposedDpEvent([a, b]), a])
    assert isinstance(schedule.events, tuple) and schedule.rounds == 5
    assert schedule.counts(0, 5) == [(a, 3), (b, 1), (dp_accounting.ComposedDpEvent([a, b]), 1)]
    assert schedule.counts(1, 2) == [(b, 1), (a, 1)]
    assert schedule.counts(5, 0) == []


# -- the events module --------------------------------------------------------------------------------------

EVENTS = [events.PvecDpEvent(64, 40, 0.25, 100, 6), events.ShuffledGaussianDpEvent(10.0, 20, 40, 500),
          events.DprecDpEvent(0.5, 14), events.RoundCycleDpEvent((G(1.0), G(2.0))),
          events.RoundScheduleDpEvent((G(1.0), G(2.0)))]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_events_are_frozen_documented_dataclasses(event):
    assert isinstance(event, dp_accounting.DpEvent) and dataclasses.is_dataclass(event)
    assert type(event).__doc__ and "neighbo" in type(event).__doc__.lower()  # each states its relation
    field = dataclasses.fields(event)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(event, field, getattr(event, field))
    assert event == dataclasses.replace(event) and hash(event) == hash(dataclasses.replace(event))


def test_old_import_paths_reexport_the_events():
    from jaxfl.accounting import dprec, ledger, shuffle_model
    assert acct.RoundCycleDpEvent is ledger.RoundCycleDpEvent is events.RoundCycleDpEvent
    assert acct.RoundScheduleDpEvent is ledger.RoundScheduleDpEvent is events.RoundScheduleDpEvent
    assert shuffle_model.PvecDpEvent is events.PvecDpEvent
    assert shuffle_model.ShuffledGaussianDpEvent is events.ShuffledGaussianDpEvent
    assert acct.DprecDpEvent is dprec.DprecDpEvent is events.DprecDpEvent


def test_clipped_sum_gaussian_states_the_sensitivity_of_each_relation():
    assert events.clipped_sum_sensitivity(ADD) == events.clipped_sum_sensitivity(SPECIAL) == 1.0
    assert events.clipped_sum_sensitivity("replace_one") == 2.0
    # dp_accounting's definition: the multiplier is std over the per-record bound, whatever the relation
    assert events.clipped_sum_gaussian(3.0, REPLACE) == events.clipped_sum_gaussian(3.0) == G(3.0)
    with pytest.raises(ValueError, match="neighboring_relation"):
        events.clipped_sum_gaussian(3.0, "sideways")
    with pytest.raises(ValueError, match="noise_multiplier"):
        events.clipped_sum_gaussian(-1.0, ADD)


@pytest.mark.slow
@pytest.mark.parametrize("z", [0.7, 3.0, 11.0])
def test_replace_one_gaussian_has_sensitivity_2c_in_rdp_and_pld(z):
    # replace-one with multiplier z is the add/remove Gaussian of multiplier z / 2 (sensitivity 2C), in both
    # accountants: jaxfl's RDP halves the multiplier (dp_accounting's RDP would not), dp_accounting's PLD
    # shifts by +-C itself.
    event = dp_accounting.SelfComposedDpEvent(events.clipped_sum_gaussian(z, REPLACE), 5)
    half = dp_accounting.SelfComposedDpEvent(G(z / 2), 5)
    rdp = make_accountant("rdp", neighboring_relation=REPLACE).compose(event).epsilon(DELTA)
    assert rdp == make_accountant("rdp").compose(half).epsilon(DELTA)
    raw = dpa_rdp.RdpAccountant(neighboring_relation=REPLACE)
    raw.compose(event)
    assert raw.get_epsilon(DELTA) < rdp  # what jaxfl corrects: dp_accounting's RDP reads sensitivity C
    pld = make_accountant("pld", neighboring_relation=REPLACE).compose(event).epsilon(DELTA)
    assert pld == pytest.approx(make_accountant("pld").compose(half).epsilon(DELTA), rel=1e-9)
    # the same event under add/remove is the plain Gaussian of multiplier z
    assert make_accountant("rdp").compose(event).epsilon(DELTA) == make_accountant("rdp").compose(
        dp_accounting.SelfComposedDpEvent(G(z), 5)).epsilon(DELTA)


def test_rdp_event_rewrites_nested_gaussians_only_under_replace_one():
    inner = dp_accounting.ComposedDpEvent([G(2.0), dp_accounting.SelfComposedDpEvent(G(4.0), 3)])
    wor = dp_accounting.SampledWithoutReplacementDpEvent(100, 10, inner)
    assert events.rdp_event(wor, ADD) is wor and events.rdp_event(wor, SPECIAL) is wor
    assert events.rdp_event(wor, REPLACE) == dp_accounting.SampledWithoutReplacementDpEvent(
        100, 10, dp_accounting.ComposedDpEvent([G(1.0), dp_accounting.SelfComposedDpEvent(G(2.0), 3)]))
    assert events.rdp_event(dp_accounting.LaplaceDpEvent(3.0), REPLACE) == dp_accounting.LaplaceDpEvent(1.5)
    dprec_event = events.DprecDpEvent(1.0, 7)
    assert events.rdp_event(dprec_event, REPLACE) is dprec_event


# -- neighbouring relations: declared by each accountant, checked by ledgers ---------------------------------

def test_each_accountant_declares_its_relations():
    assert accountant_relations("rdp") == accountant_relations("pld") == frozenset({ADD, REPLACE, SPECIAL})
    assert accountant_relations("lowy") == accountant_relations("shuffle") == frozenset({REPLACE})
    assert accountant_relations("dprec") == frozenset({ADD})
    for name in ("rdp", "pld", "lowy", "shuffle", "dprec"):
        for relation in accountant_relations(name):
            assert check_relation(name, relation.name.lower()) is relation
            assert make_accountant(name, neighboring_relation=relation).neighboring_relation is relation


@pytest.mark.parametrize("name, relation, event", [
    ("lowy", ADD, dp_accounting.SampledWithReplacementDpEvent(100, 5, G(20.0))),
    ("shuffle", ADD, events.PvecDpEvent(64, 40, 0.25, 100, 6)),
    ("dprec", REPLACE, events.DprecDpEvent(0.5, 14)),
])
def test_ledgers_refuse_an_accountant_that_does_not_support_the_relation(name, relation, event):
    message = f"neighboring_relation '{relation.name.lower()}' is not supported by the '{name}' accountant"
    with pytest.raises(ValueError, match=message):
        SiloLedger([event] * 3, accountant=name, neighboring_relation=relation)
    with pytest.raises(ValueError, match=message):
        CentralLedger(event, accountant=name, neighboring_relation=relation.name.lower())
    with pytest.raises(ValueError, match=message):
        make_accountant(name, neighboring_relation=relation)
    # the supported relation is accepted
    (supported,) = accountant_relations(name)
    ledger = SiloLedger([event] * 3, accountant=name, neighboring_relation=supported)
    assert ledger.neighboring_relation is supported


def test_ledger_builds_its_accountants_for_the_relation():
    event = G(4.0)
    replace = SiloLedger([event], accountant="rdp", neighboring_relation="replace_one").record(3)
    assert replace.neighboring_relation is REPLACE
    assert replace.epsilon(DELTA) == SiloLedger([G(2.0)], accountant="rdp").record(3).epsilon(DELTA)
    assert SiloLedger([event]).neighboring_relation is ADD  # the accountant's default
    # per-event limits stay dp_accounting's: Poisson sampling is add/remove only in its RDP
    with pytest.raises(dp_accounting.UnsupportedEventError):
        SiloLedger([P(0.1, event)], accountant="rdp", neighboring_relation=REPLACE)


def test_a_users_accountant_without_declared_relations_is_checked_by_its_own():
    from jaxfl.accounting import RdpAccountant, register_accountant
    try:
        register_accountant("test-fixed-rdp", lambda: RdpAccountant(orders=[2, 4, 8]))
        assert accountant_relations("test-fixed-rdp") is None
        assert SiloLedger([G(2.0)], accountant="test-fixed-rdp", neighboring_relation=ADD).record(1).rounds == 1
        with pytest.raises(ValueError, match="'replace_one' is not supported by the 'test-fixed-rdp'"):
            SiloLedger([G(2.0)], accountant="test-fixed-rdp", neighboring_relation=REPLACE)
    finally:
        ACCOUNTANTS.pop("test-fixed-rdp", None)


# -- the accountant table ------------------------------------------------------------------------------------

def test_one_table_lists_all_six_accountants():
    assert set(ACCOUNTANTS) >= {"rdp", "pld", "lowy", "shuffle", "dprec", "vandijk-moments"}
    classes = {"rdp": "RdpAccountant", "pld": "PldAccountant", "lowy": "LowyAccountant",
               "shuffle": "ShuffleAccountant", "dprec": "DprecAccountant", "vandijk-moments": "MomentsAccountant"}
    for name, cls in classes.items():
        acc = make_accountant(name)
        assert type(acc).__name__ == cls and acc.name == name


def test_importing_the_accountants_module_alone_gives_all_six():
    code = ("import jaxfl.accounting.accountants as a; "
            "print(','.join(n for n in a.available_accountants() if not n.startswith('test')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "dprec,lowy,pld,rdp,shuffle,vandijk-moments"


def test_no_module_registers_an_accountant_as_an_import_side_effect():
    import inspect

    from jaxfl.accounting import (dprec, increasing_samples, moments, sgd_noise, shuffle_model, variance_reduced_noise,
                                  with_replacement)
    for module in (dprec, increasing_samples, moments, sgd_noise, shuffle_model, variance_reduced_noise,
                   with_replacement):
        assert "register_accountant(" not in inspect.getsource(module)
