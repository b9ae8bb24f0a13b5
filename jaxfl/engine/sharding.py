"""The silo axis over devices: a 1-D ``Mesh`` with axis ``"silos"``.

Data are placed with ``NamedSharding(mesh, P("silos"))`` and rounds are jitted under
``jax.set_mesh(mesh)``; GSPMD partitions the per-silo ``vmap``. Per-silo messages are replicated
(:func:`replicate`) before they are summed, so every reduction runs in one fixed order and results
are bitwise identical on 1 device or many.

Several processes (``jax.distributed.initialize``, at least one per host): build the mesh over
``jax.devices()`` (every process's devices) and either pass the same full host copy of the data to
``jaxfl.train(mesh=)`` in every process (:func:`shard_data`; ``jax.device_put`` checks that the copies
are equal by gathering them, fine for small data) or let each process load only the silos its devices
hold (:func:`process_silos`, :func:`shard_local_data`). :func:`to_host` copies sharded results to every
process. See ``docs/performance.md``, "Beyond one machine".
"""
from __future__ import annotations

import contextlib
from typing import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jaxfl.data.federated import FederatedData

SILO_AXIS = "silos"


def silo_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A 1-D mesh over ``devices`` (default: all) with the axis name ``"silos"``.

    Example:
      >>> mesh = silo_mesh()
      >>> mesh.axis_names, mesh.size == len(jax.devices())
      (('silos',), True)
    """
    devices = jax.devices() if devices is None else list(devices)
    return Mesh(np.asarray(devices), (SILO_AXIS,))


def shard_data(data: FederatedData, mesh: Mesh) -> FederatedData:
    """Pads the silo axis to :func:`padded_silos` and shards it over ``"silos"``.

    Example (on one device: the data as they were, laid out on the mesh):
      >>> import numpy as np, jaxfl
      >>> data = jaxfl.from_silos([(np.ones((3, 2)), np.zeros(3))] * 4)
      >>> shard_data(data, silo_mesh()).x.shape[0] == padded_silos(4, silo_mesh())
      True
    """
    data = data.pad_silos(mesh.size, minimum=padded_silos(data.num_silos, mesh))
    sharding = NamedSharding(mesh, P(SILO_AXIS))
    return jax.tree_util.tree_map(lambda a: jax.device_put(a, sharding), data)


def padded_silos(num_silos: int, mesh: Mesh) -> int:
    """The silo axis's length on ``mesh``: a multiple of ``mesh.size`` and, on several devices, at least two
    silos per device. With one silo per device XLA:CPU compiled the per-device block differently and
    minibatch SGD's parameters differed from one device's in the last bits (7 silos on 8 devices, 15 on
    16); two or more per device gave bitwise-equal results in every layout tried.

    Example:
      >>> padded_silos(7, silo_mesh()) >= 7
      True
    """
    size = mesh.size
    per_device = -(-int(num_silos) // size)
    return size * (per_device if size == 1 else max(per_device, 2))


def _local_rows(mesh: Mesh, num_silos: int) -> list[int]:
    """Rows of the padded silo axis held by this process's devices, ascending."""
    padded = padded_silos(num_silos, mesh)
    index_map = NamedSharding(mesh, P(SILO_AXIS)).addressable_devices_indices_map((padded,))
    return sorted({i for index in index_map.values() for i in range(*index[0].indices(padded))})


def process_silos(mesh: Mesh, num_silos: int) -> np.ndarray:
    """Indices of the silos whose records this process's devices hold, ascending (``int64[k]``).

    ``num_silos`` silos are padded to :func:`padded_silos` (as :func:`shard_data` does) and split into
    ``mesh.size`` contiguous blocks, block ``j`` on ``mesh.devices[j]``; the indices of the blocks on this
    process's devices are returned, padding silos (indices ``>= num_silos``) left out. With one process:
    ``arange(num_silos)``.

    Example (one process holds every silo):
      >>> process_silos(silo_mesh(), 3).tolist() if jax.process_count() == 1 else [0, 1, 2]
      [0, 1, 2]
    """
    return np.asarray([i for i in _local_rows(mesh, num_silos) if i < num_silos], dtype=np.int64)


def shard_local_data(local: FederatedData, mesh: Mesh, num_silos: int) -> FederatedData:
    """The global silo-sharded ``FederatedData`` of ``num_silos`` silos from this process's silos only.

    Args:
      local: silos ``process_silos(mesh, num_silos)`` of the full data set, in that order
        (``x: [k, max_records, ...]``, host or device arrays); ``max_records`` and the feature/target
        shapes must be the same in every process (e.g. ``from_silos(..., max_records=M)``).
      mesh: a ``"silos"`` mesh (all processes' devices, :func:`silo_mesh`).
      num_silos: the number of silos over all processes.

    Returns a ``FederatedData`` of global arrays (``x: [padded_silos(num_silos, mesh),
    max_records, ...]``) sharded ``P("silos")``; empty padding silos (count 0) are appended on the process
    holding the last block. Every process must call it (``jax.make_array_from_process_local_data``); each
    copies only its own silos to its devices. The result is what :func:`shard_data` makes from the full
    data, so ``jaxfl.train(data=result, mesh=mesh)`` runs the same rounds.

    Example: ``tests/engine/test_distributed.py`` runs it in two processes.
    """
    rows = _local_rows(mesh, num_silos)
    expected = sum(i < num_silos for i in rows)
    if local.num_silos != expected:
        raise ValueError(f"this process (index {jax.process_index()}) holds silos "
                         f"{process_silos(mesh, num_silos).tolist()} of {num_silos}; got {local.num_silos} silos")
    sharding = NamedSharding(mesh, P(SILO_AXIS))
    padded = padded_silos(num_silos, mesh)

    def put(a):
        a = np.asarray(a)
        a = np.concatenate([a, np.zeros((len(rows) - expected,) + a.shape[1:], a.dtype)])
        return jax.make_array_from_process_local_data(sharding, a, (padded,) + a.shape[1:])

    return FederatedData(*(put(a) for a in local))


def to_host(tree):
    """Numpy copies of every array in ``tree``, on every process.

    An array sharded over the devices of several processes (e.g. per-silo state or metrics) is gathered
    with ``jax.experimental.multihost_utils.process_allgather``, a collective: every process must call
    ``to_host`` on the same values. Other arrays are copied with ``np.asarray``.

    Example:
      >>> import jax.numpy as jnp
      >>> to_host({"a": jnp.ones(2)})["a"].tolist()
      [1.0, 1.0]
    """
    def one(a):
        if isinstance(a, jax.Array) and not a.is_fully_addressable and not a.is_fully_replicated:
            from jax.experimental import multihost_utils

            return np.asarray(multihost_utils.process_allgather(a, tiled=True))
        return np.asarray(a)

    return jax.tree_util.tree_map(one, tree)


def shard_silo_state(state, mesh: Mesh):
    """Shards the ``silos`` part of a :class:`jaxfl.engine.protocol.SiloState` over ``"silos"`` like the
    data (its leading axis must already match the padded data); other states are returned unchanged.

    Example: :func:`jaxfl.engine.driver.train` with ``mesh=``.
    """
    if not hasattr(state, "silos"):
        return state
    sharding = NamedSharding(mesh, P(SILO_AXIS))
    return state._replace(silos=jax.tree_util.tree_map(lambda a: jax.device_put(a, sharding), state.silos))


def ambient_silo_mesh():
    """The ambient (``jax.set_mesh``) mesh if it has a ``"silos"`` axis, else None.

    Example:
      >>> ambient_silo_mesh() is None                             # no mesh set
      True
      >>> with mesh_context(silo_mesh()):
      ...     ambient_silo_mesh().axis_names
      ('silos',)
    """
    mesh = jax.sharding.get_abstract_mesh()
    return None if mesh.empty or SILO_AXIS not in mesh.axis_names else mesh


def replicate(tree):
    """Replicates per-silo values over the ambient ``"silos"`` mesh (no-op without one).

    Sums over silos then run on one full copy in one fixed order rather than as partial sums plus
    an all-reduce, so results do not depend on how silos are laid out over devices.

    Example: :func:`constrain_silos`.
    """
    return tree if ambient_silo_mesh() is None else jax.lax.with_sharding_constraint(tree, P())


def constrain_silos(tree):
    """Lays a leading silo axis out over the ambient ``"silos"`` mesh, like the data (no-op without one).

    Example (no-ops without an ambient mesh):
      >>> import jax.numpy as jnp
      >>> constrain_silos(jnp.ones((4, 2))).shape, replicate(jnp.ones(4)).shape
      ((4, 2), (4,))
    """
    return tree if ambient_silo_mesh() is None else jax.lax.with_sharding_constraint(tree, P(SILO_AXIS))


def mesh_context(mesh: Mesh | None):
    """``jax.set_mesh(mesh)``, or a null context when ``mesh`` is None.

    Example: :func:`ambient_silo_mesh`.
    """
    return contextlib.nullcontext() if mesh is None else jax.set_mesh(mesh)
