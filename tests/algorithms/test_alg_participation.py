"""One argument for participation in every factory: ``participation=`` (None, an int M, poisson(q),
with_replacement(B)); the old names still work and warn; a rule an algorithm's accounting does not cover is refused
with the one it needs."""
import importlib
import inspect
import pkgutil

import optax
import pytest

from jaxfl import algorithms
from jaxfl.algorithms import dp_fedavg, minibatch_sgd, scaffold
from jaxfl.algorithms.dprec import dp_rec
from jaxfl.engine.participation import poisson, uniform, with_replacement
from jaxfl.models import init_linear, logistic_loss


def _factories():
    """Every public factory of jaxfl.algorithms' modules that samples silos (it names the argument)."""
    out = {}
    for info in pkgutil.iter_modules(algorithms.__path__, "jaxfl.algorithms."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if inspect.isfunction(obj) and obj.__module__ == module.__name__ and not name.startswith("_") \
                    and "participation" in inspect.signature(obj).parameters:
                out[name] = obj
    return out


def test_every_sampling_factory_takes_participation_and_none_the_old_names_alone():
    factories = _factories()
    assert {"minibatch_sgd", "local_sgd", "dp_fedavg", "scaffold", "personalized", "fedprox_spider",
            "shuffled_minibatch_sgd", "accelerated_minibatch_sgd", "dp_rec"} <= set(factories), sorted(factories)
    for name, factory in factories.items():
        params = inspect.signature(factory).parameters
        for old in ("silos_per_round", "client_rate", "clients_per_round"):
            if old in params:  # a deprecated spelling: keyword-only, defaulting to None, after participation
                assert params[old].default is None and params[old].kind is inspect.Parameter.KEYWORD_ONLY, (name, old)


def _sgd(**kw):
    return minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.1), batch_size=4, **kw)


def test_the_old_name_gives_the_same_rule_and_warns(monkeypatch):
    import jaxfl.algorithms.sgd as sgd

    seen = []
    monkeypatch.setattr(sgd, "resolve", lambda rule: seen.append(rule) or uniform(rule))
    _sgd(participation=3)
    with pytest.warns(DeprecationWarning, match="participation="):
        _sgd(silos_per_round=3)
    assert seen == [3, 3]
    with pytest.raises(ValueError, match="participation= only"):
        _sgd(participation=3, silos_per_round=3)


def test_dp_fedavg_takes_poisson_and_names_it_otherwise():
    kwargs = dict(client_opt=optax.sgd(0.1), local_steps=1, expected_clients=2.0, clip_norm=1.0, noise_multiplier=1.0)
    alg = dp_fedavg(logistic_loss, participation=poisson(0.2), **kwargs)
    assert alg.privacy([5] * 10).events[0].sampling_probability == 0.2
    for wrong in (3, uniform(3), None):
        with pytest.raises(ValueError, match=r"participation=jaxfl.engine.participation.poisson\(q\)"):
            dp_fedavg(logistic_loss, participation=wrong, **kwargs)
    with pytest.warns(DeprecationWarning, match="client_rate"):
        old = dp_fedavg(logistic_loss, client_rate=0.2, **kwargs)
    assert old.privacy([5] * 10) == alg.privacy([5] * 10)


def test_dp_rec_takes_slots_with_replacement_and_names_them_otherwise():
    kwargs = dict(params=init_linear(3), client_opt=optax.sgd(0.1), batch_size=4, prior_std=0.01,
                  clip_multiplier=1.0)
    alg = dp_rec(logistic_loss, participation=with_replacement(3), **kwargs)
    assert alg.privacy([5] * 10).events[0].sample_size == 3
    for wrong in (3, poisson(0.3), None):
        with pytest.raises(ValueError, match=r"with_replacement\(B\)"):
            dp_rec(logistic_loss, participation=wrong, **kwargs)
    with pytest.warns(DeprecationWarning, match="clients_per_round"):
        old = dp_rec(logistic_loss, clients_per_round=3, **kwargs)
    assert old.privacy([5] * 10) == alg.privacy([5] * 10)


def test_a_poisson_rule_samples_silos_in_scaffold_too(monkeypatch):
    scaffold_module = importlib.import_module("jaxfl.algorithms.scaffold")  # the package names the function

    seen = []
    monkeypatch.setattr(scaffold_module, "resolve", lambda rule: seen.append(rule) or rule)
    rule = poisson(0.5)
    scaffold(logistic_loss, client_opt=optax.sgd(0.1), local_steps=1, participation=rule)
    assert seen == [rule] and rule.rate == 0.5
