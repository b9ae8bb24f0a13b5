"""The algorithm protocol (ARCHITECTURE §3.2)."""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Sequence

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np

Params = Any
State = Any
RoundInfo = dict


class RoundPrivacy(NamedTuple):
    """What one round of an algorithm costs in privacy.

    Attributes:
      events: one ``dp_accounting.DpEvent`` per silo (ISRL-DP: each silo's own transcript in one
        round, ``level="record"``), or a single event for the whole population (``level="client"``,
        central user-level DP such as DP-FedAvg).
      level: ``"record"`` (inter-silo record-level / ISRL-DP) or ``"client"`` (user-level, central).
      relation: the ``dp_accounting.NeighboringRelation`` that ``events`` (and ``central``) are stated for:
        ``ADD_OR_REMOVE_ONE`` (one record, or client, more or less) or ``REPLACE_ONE`` (one replaced; e.g.
        minibatches drawn with replacement, one-pass batches, the shuffle model). The ledger builds its
        accountants for this relation and refuses one that does not support it
        (:func:`jaxfl.engine.driver.make_ledger`); a Gaussian's sensitivity follows from it
        (:func:`jaxfl.accounting.events.clipped_sum_gaussian`).
      composition: ``"sequential"`` (rounds compose) or ``"parallel"`` (rounds touch disjoint records,
        so the run costs one round; one-pass algorithms).
      round_limit: the most rounds the statement covers (one-pass: ``floor(n / K)``), or None.
      central: the one event describing what a round's *aggregate* reveals about any record of the union of the
        silos (central DP), or None: the shuffled transcript of shuffle-model algorithms (Lowy & Razaviyayn §5), or
        the sum of the silos' noise shares under central noise placement
        (:func:`jaxfl.algorithms.personalized`, ``noise_placement="central"``).

    Example:
      >>> import numpy as np, optax, jaxfl
      >>> from jaxfl.models import logistic_loss
      >>> algorithm = jaxfl.dp_fedavg(logistic_loss, client_opt=optax.sgd(0.1), local_steps=5, batch_size=4,
      ...                             participation=jaxfl.engine.participation.poisson(0.1), expected_clients=10,
      ...                             clip_norm=1.0, noise_multiplier=1.0)
      >>> statement = algorithm.privacy(np.full(100, 20))        # 100 clients of 20 records
      >>> statement.level, statement.relation.name, statement.events
      ('client', 'ADD_OR_REMOVE_ONE',
       (PoissonSampledDpEvent(sampling_probability=0.1, event=GaussianDpEvent(noise_multiplier=1.0)),))
    """

    events: Sequence[Any]
    level: str = "record"
    relation: dp_accounting.NeighboringRelation = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    composition: str = "sequential"
    round_limit: Optional[int] = None
    central: Any = None


class FederatedAlgorithm(NamedTuple):
    """A federated algorithm as pure functions plus its privacy statement: a value, like an optax
    transformation. Nothing about a run lives in the factory's closure; everything lives in the state.

    Attributes:
      init: ``params -> server state``; a pytree with a ``.params`` attribute (the shared model).
      round: ``(state, data, round_key) -> (state, info)``, jit-able; ``round_key`` is
        ``keys.round_key(root, r)`` and ``info`` a dict of scalars. With a ``schedule`` the round takes
        the round's inputs as a fourth argument: ``(state, data, round_key, inputs)``.
      privacy: ``counts (int[num_silos], host) -> RoundPrivacy``, or None for non-private
        algorithms. A function of the silo sizes because sampling rates depend on them; record-level
        events come one per silo with ``count > 0``, in silo order (padding silos have none). It works
        before ``init``: whatever it needs (model size, block layout, schedule) the factory was given.
      name: a short label for tables and results files.
      init_silos: ``(params, num_silos) -> silo state`` (leaves ``[num_silos, ...]``), or None for
        algorithms that keep nothing on silos. The run's state is then :class:`SiloState` ``(server,
        silos)`` (see :func:`initial_state`).
      schedule: host-computed round inputs, a pytree of arrays with a leading round axis (round ``r``
        receives ``schedule[r]``: sample sizes, step counts, learning rates, active masks, ...), or
        None. A run may not be longer than the schedule.
      silo_params: ``state -> params of every silo's own model`` (leaves ``[num_silos, ...]``), for
        personalised evaluation; None (or a function returning None): every silo evaluates the shared
        ``state.params``.

    Example:
      >>> import numpy as np, optax, jaxfl
      >>> from jaxfl.models import logistic_loss
      >>> algorithm = jaxfl.dp_sgd(logistic_loss, optimizer=optax.sgd(0.5), expected_batch_size=50, num_records=1000,
      ...                          clip_norm=1.0, noise_multiplier=1.0)
      >>> isinstance(algorithm, FederatedAlgorithm), algorithm.name
      (True, 'dp_sgd')
      >>> algorithm.privacy(np.array([1000])).events        # what one round releases, for the ledger
      (PoissonSampledDpEvent(sampling_probability=0.05, event=GaussianDpEvent(noise_multiplier=1.0)),)
    """

    init: Callable[[Params], State]
    round: Callable[..., tuple]
    privacy: Optional[Callable[[np.ndarray], RoundPrivacy]] = None
    name: str = "algorithm"
    init_silos: Optional[Callable[[Params, int], Any]] = None
    schedule: Any = None
    silo_params: Optional[Callable[[State], Any]] = None


class SiloState(NamedTuple):
    """The state of an algorithm that keeps state on silos.

    ``server`` is what the server holds (with ``.params``); ``silos`` is a pytree whose leaves have a
    leading axis of one entry per silo, sharded like the data over the ``"silos"`` mesh axis. Silo
    ``i``'s slice is read and written only by silo ``i``'s client function and by per-silo evaluation;
    the aggregator and the server function never receive it (they see only the clients' messages and
    ``server``).

    Example:
      >>> import jax.numpy as jnp
      >>> state = SiloState(server={"params": jnp.zeros(3)}, silos=jnp.zeros((4, 3)))   # one row per silo
      >>> state.silos.shape[0]
      4
    """

    server: Any
    silos: Any

    @property
    def params(self):
        """The shared model (``server.params``)."""
        return self.server.params


class PerRound(NamedTuple):
    """A hyperparameter given one value per round: ``values[r]`` is used in round ``r`` (host array with a
    leading round axis). Factories that accept it put it in the algorithm's ``schedule`` and state the
    privacy of every round with that round's value.

    Example:
      >>> import numpy as np
      >>> rates = PerRound(np.linspace(0.01, 0.05, 5))     # round r uses rates.values[r]
      >>> rates.values.shape
      (5,)
    """

    values: Any


def initial_state(algorithm: FederatedAlgorithm, params, num_silos: int):
    """``algorithm.init(params)``, paired with ``init_silos(params, num_silos)`` in a
    :class:`SiloState` when the algorithm keeps silo state.

    Example:
      >>> import optax
      >>> from jaxfl.algorithms import scaffold
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> state = initial_state(scaffold(logistic_loss, client_opt=optax.sgd(0.1), local_steps=2, batch_size=4),
      ...                       init_linear(3), num_silos=4)
      >>> type(state).__name__, state.silos["w"].shape      # one control variate row per silo
      ('SiloState', (4, 3))
    """
    server = algorithm.init(params)
    if algorithm.init_silos is None:
        return server
    return SiloState(server, algorithm.init_silos(params, int(num_silos)))


def silo_models_of(algorithm: FederatedAlgorithm, state, num_silos: int):
    """Every silo's own model (leaves ``[num_silos, ...]``): ``algorithm.silo_params(state)``, or the shared
    ``state.params`` repeated when the algorithm keeps no per-silo parameters.

    Example (an algorithm without per-silo parameters: the shared model, once per silo):
      >>> import optax, jaxfl
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> algorithm = jaxfl.minibatch_sgd(logistic_loss, server_opt=optax.sgd(1.0))
      >>> state = initial_state(algorithm, init_linear(3), 4)
      >>> silo_models_of(algorithm, state, 4)["w"].shape
      (4, 3)
    """
    own = None if algorithm.silo_params is None else algorithm.silo_params(state)
    if own is not None:
        return own
    return jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (num_silos,) + jnp.shape(a)), state.params)


def schedule_length(algorithm: FederatedAlgorithm) -> int | None:
    """Rounds covered by the algorithm's schedule (None: unscheduled).

    Example:
      >>> import optax, jaxfl
      >>> from jaxfl.models import logistic_loss
      >>> schedule_length(jaxfl.minibatch_sgd(logistic_loss, server_opt=optax.sgd(1.0))) is None
      True
    """
    if algorithm.schedule is None:
        return None
    leaves = jax.tree_util.tree_leaves(algorithm.schedule)
    if not leaves:
        raise ValueError("an algorithm's schedule must hold at least one array with a leading round axis")
    lengths = {int(np.shape(leaf)[0]) if np.ndim(leaf) else -1 for leaf in leaves}
    if len(lengths) != 1 or -1 in lengths:
        raise ValueError(f"every schedule leaf needs the same leading round axis; got lengths {sorted(lengths)}")
    return lengths.pop()


class ServerState(NamedTuple):
    """The server state of the reference algorithms: model, server optimizer state, round counter.

    Example:
      >>> import jax.numpy as jnp, optax
      >>> from jaxfl.algorithms import minibatch_sgd
      >>> from jaxfl.models import init_linear, logistic_loss
      >>> state = minibatch_sgd(logistic_loss, server_opt=optax.sgd(0.1), batch_size=4).init(init_linear(3))
      >>> isinstance(state, ServerState), state.params["w"].shape, int(state.round)
      (True, (3,), 0)
    """

    params: Params
    opt_state: Any
    round: jnp.ndarray
