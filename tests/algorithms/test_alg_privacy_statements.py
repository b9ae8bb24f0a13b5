"""Every algorithm is a value: its privacy statement exists before ``init``, names its neighbouring relation,
and is accepted by the accountant its documentation names (and refused by one that cannot account it)."""
import dp_accounting
import jax
import numpy as np
import optax
import pytest

from jaxfl.accounting import SiloLedger
from jaxfl.algorithms import (accelerated, dp_fedavg, dprec, local_sgd, minibatch_sgd, noisy_sgd, shuffled,
                              variance_reduced)
from jaxfl.engine import make_ledger
from jaxfl.models import init_linear, logistic_loss
from jaxfl.privacy import shuffle
from jaxfl.engine.participation import poisson, with_replacement

ADD = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
REPLACE = dp_accounting.NeighboringRelation.REPLACE_ONE
COUNTS = np.array([40, 40, 0, 40])  # a padding silo: no event
PARAMS = init_linear(5)              # 6 parameters
TEMPLATE = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), PARAMS)
PVEC = shuffle.ShuffleParams(64, 40, 0.25)
SCHEDULE = accelerated.acsa_schedule(4, smoothness=1.0, noise_std=0.1, radius=1.0)
SGD = optax.sgd(0.1)


# (name, factory, relation, accountant, central accountant or None); every factory only *builds*
ALGORITHMS = [
    ("minibatch_sgd poisson", lambda: minibatch_sgd(logistic_loss, server_opt=SGD, sampling_rate=0.2,
                                                    expected_batch_size=5.0, clip_norm=1.0,
                                                    noise_multiplier=1.0), ADD, "rdp", None),
    ("minibatch_sgd poisson own size", lambda: minibatch_sgd(logistic_loss, server_opt=SGD, sampling_rate=0.2,
                                                             clip_norm=1.0, noise_multiplier=1.0),
     REPLACE, "pld", None),
    ("minibatch_sgd draws", lambda: minibatch_sgd(logistic_loss, server_opt=SGD, batch_size=4, clip_norm=1.0,
                                                  noise_multiplier=30.0), REPLACE, "lowy", None),
    ("minibatch_sgd full", lambda: minibatch_sgd(logistic_loss, server_opt=SGD, clip_norm=1.0, noise_multiplier=3.0),
     REPLACE, "pld", None),
    ("minibatch_sgd full fixed", lambda: minibatch_sgd(logistic_loss, server_opt=SGD, expected_batch_size=20.0,
                                                       clip_norm=1.0, noise_multiplier=3.0), ADD, "rdp", None),
    ("local_sgd draws", lambda: local_sgd(logistic_loss, client_opt=SGD, local_steps=3, batch_size=1, clip_norm=1.0,
                                          noise_multiplier=30.0), REPLACE, "lowy", None),
    ("dp_fedavg", lambda: dp_fedavg(logistic_loss, client_opt=SGD, local_steps=2, participation=poisson(0.5),
                                    expected_clients=2.0, clip_norm=1.0, noise_multiplier=1.0), ADD, "rdp", None),
    ("dp_rec", lambda: dprec.dp_rec(logistic_loss, params=PARAMS, client_opt=SGD, participation=with_replacement(2),
                                    batch_size=8,
                                     prior_std=0.05, clip_multiplier=0.5), ADD, "dprec", None),
    ("dp_rec template", lambda: dprec.dp_rec(logistic_loss, params=TEMPLATE, client_opt=SGD,
                                             participation=with_replacement(2),
                                              batch_size=8, prior_std=0.05, clip_multiplier=0.5), ADD, "dprec", None),
    ("isrl noisy_minibatch_sgd", lambda: noisy_sgd.noisy_minibatch_sgd(logistic_loss, step_size=0.1, batch_size=4,
                                                                  clip_norm=1.0, noise_multiplier=30.0),
     REPLACE, "lowy", None),
    ("isrl noisy_local_sgd", lambda: noisy_sgd.noisy_local_sgd(logistic_loss, step_size=0.1, local_steps=3,
                                                          clip_norm=1.0, noise_multiplier=30.0),
     REPLACE, "lowy", None),
    ("isrl accelerated one_pass", lambda: accelerated.accelerated_minibatch_sgd(
        logistic_loss, schedule=SCHEDULE, batch_size=10, clip_norm=1.0, noise_multiplier=4.0), REPLACE, "rdp", None),
    ("isrl accelerated erm", lambda: accelerated.accelerated_minibatch_sgd(
        logistic_loss, schedule=SCHEDULE, batch_size=4, clip_norm=1.0, noise_multiplier=30.0,
        sampling="with_replacement"), REPLACE, "lowy", None),
    ("isrl shuffled", lambda: shuffled.shuffled_minibatch_sgd(logistic_loss, step_size=0.1, clip_norm=1.0,
                                                          noise_multiplier=30.0, participation=2),
     REPLACE, "lowy", "shuffle"),
    ("isrl sdp accelerated", lambda: shuffled.sdp_accelerated_minibatch_sgd(
        logistic_loss, params=PARAMS, schedule=SCHEDULE, batch_size=10, clip_norm=1.0, shuffle_params=PVEC,
        participation=2), REPLACE, "shuffle", "shuffle"),
    ("isrl sdp accelerated template", lambda: shuffled.sdp_accelerated_minibatch_sgd(
        logistic_loss, params=TEMPLATE, schedule=SCHEDULE, batch_size=10, clip_norm=1.0, shuffle_params=PVEC,
        participation=2), REPLACE, "shuffle", "shuffle"),
    ("nc prox_sgd one_pass", lambda: variance_reduced.noisy_prox_sgd(logistic_loss, step_size=0.1, batch_size=10,
                                                                     clip_norm=1.0,
                                                      noise_multiplier=4.0), REPLACE, "pld", None),
    ("nc prox_gd", lambda: variance_reduced.noisy_prox_gd(logistic_loss, step_size=0.1, clip_norm=1.0,
                                                          noise_multiplier=4.0),
     REPLACE, "rdp", None),   # divided by n_i: public only under replace-one
    ("nc spider draws", lambda: variance_reduced.fedprox_spider(logistic_loss, step_size=0.1, phase_length=3,
                                                                clip_norm=1.0,
                                                  batch_size=8, noise_multiplier=30.0), REPLACE, "lowy", None),
    ("nc spider full", lambda: variance_reduced.fedprox_spider(logistic_loss, step_size=0.1, phase_length=3,
                                                               clip_norm=1.0,
                                                 noise_multiplier=4.0), REPLACE, "rdp", None),
    ("nc svrg", lambda: variance_reduced.fedprox_svrg(logistic_loss, step_size=0.1, batch_size=4, epoch_length=2,
                                                      clip_norm=1.0,
                                        noise_multiplier=50.0), REPLACE, "lowy", None),
    ("nc sdp prox_sgd", lambda: shuffled.sdp_prox_sgd(logistic_loss, params=PARAMS, step_size=0.1, batch_size=10,
                                                clip_norm=1.0, shuffle_params=PVEC, participation=2),
     REPLACE, "shuffle", "shuffle"),
    ("nc sdp spider", lambda: shuffled.sdp_fedprox_spider(logistic_loss, params=TEMPLATE, step_size=0.1, phase_length=2,
                                                    clip_norm=1.0, checkpoint_params=PVEC, difference_params=PVEC,
                                                    participation=2), REPLACE, "shuffle", "shuffle"),
    ("nc sdp svrg", lambda: shuffled.sdp_fedprox_svrg(logistic_loss, params=PARAMS, step_size=0.1, batch_size=4,
                                                epoch_length=2, clip_norm=1.0, checkpoint_params=PVEC,
                                                difference_params=PVEC, participation=2),
     REPLACE, "shuffle", "shuffle"),
]


@pytest.mark.parametrize("name, build, relation, accountant, central", ALGORITHMS, ids=[a[0] for a in ALGORITHMS])
def test_privacy_works_before_init_and_names_its_relation(name, build, relation, accountant, central):
    algorithm = build()  # never initialised
    privacy = algorithm.privacy(COUNTS)
    assert privacy.relation is relation
    expected_events = 1 if privacy.level == "client" else int(np.sum(COUNTS > 0))
    assert len(privacy.events) == expected_events
    assert algorithm.privacy(COUNTS) == privacy  # a value: the same statement every time
    ledger = make_ledger(algorithm, COUNTS, accountant)
    assert ledger.neighboring_relation is relation
    assert ledger.record(1).epsilon(1e-2) >= 0.0  # accounted (inf where a calculus proves nothing)
    if central is not None:
        central_ledger = make_ledger(algorithm, COUNTS, central, central=True)
        assert central_ledger.neighboring_relation is relation
        assert central_ledger.record(1).epsilon(1e-2) >= 0.0


def test_pvec_events_carry_the_model_dimension_from_params():
    for params in (PARAMS, TEMPLATE):
        alg = shuffled.sdp_accelerated_minibatch_sgd(logistic_loss, params=params, schedule=SCHEDULE, batch_size=10,
                                                 clip_norm=1.0, shuffle_params=PVEC, participation=2)
        assert {e.dim for e in alg.privacy(COUNTS).events} == {6}
        assert alg.privacy(COUNTS).central.dim == 6
    sdp = shuffled.sdp_prox_sgd(logistic_loss, params=init_linear(9), step_size=0.1, batch_size=10, clip_norm=1.0,
                          shuffle_params=PVEC, participation=2)
    assert {e.dim for e in sdp.privacy(COUNTS).events} == {10}
    with pytest.raises(ValueError, match="init got params"):
        sdp.init(PARAMS)  # not the model it was built for


@pytest.mark.parametrize("build, accountant", [
    (lambda: dp_fedavg(logistic_loss, client_opt=SGD, local_steps=2, participation=poisson(0.5), expected_clients=2.0,
                       clip_norm=1.0, noise_multiplier=1.0), "lowy"),   # add/remove, replace-one accountant
    (lambda: minibatch_sgd(logistic_loss, server_opt=SGD, sampling_rate=0.2, expected_batch_size=5.0,
                           clip_norm=1.0, noise_multiplier=1.0), "shuffle"),
    (lambda: noisy_sgd.noisy_minibatch_sgd(logistic_loss, step_size=0.1, batch_size=4, clip_norm=1.0,
                                      noise_multiplier=30.0), "dprec"),   # replace-one, add/remove accountant
])
def test_make_ledger_refuses_a_mismatched_relation(build, accountant):
    algorithm = build()
    relation = algorithm.privacy(COUNTS).relation.name.lower()
    with pytest.raises(ValueError, match=f"neighboring_relation '{relation}' is not supported by the "
                                         f"'{accountant}' accountant"):
        make_ledger(algorithm, COUNTS, accountant)


@pytest.mark.parametrize("z", [2.0, 4.0, 9.5])
def test_one_pass_epsilons_are_unchanged(z):
    """The one-pass statements used to be ``GaussianDpEvent(z / 2)`` under add/remove neighbours; stated now at
    their true sensitivity under replace-one, the ledger gives the same epsilons (RDP bitwise)."""
    for alg in (accelerated.accelerated_minibatch_sgd(logistic_loss, schedule=SCHEDULE, batch_size=10, clip_norm=1.0,
                                               noise_multiplier=z),
                variance_reduced.noisy_prox_sgd(logistic_loss, step_size=0.1, batch_size=10, clip_norm=1.0,
                                                noise_multiplier=z)):
        for accountant in ("rdp", "pld"):
            before = SiloLedger([dp_accounting.GaussianDpEvent(z / 2)] * 3, accountant, composition="parallel",
                                round_limit=4).record(2).epsilon(1e-5)
            now = make_ledger(alg, COUNTS, accountant).record(2).epsilon(1e-5)
            if accountant == "rdp":
                assert now == before
            else:
                assert now == pytest.approx(before, rel=1e-12)
