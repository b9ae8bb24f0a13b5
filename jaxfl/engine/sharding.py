"""The silo axis over devices: a 1-D ``Mesh`` with axis ``"silos"``.

Data are placed with ``NamedSharding(mesh, P("silos"))`` and rounds are jitted under
``jax.set_mesh(mesh)``; GSPMD partitions the per-silo ``vmap``. Per-silo messages are replicated
(:func:`replicate`) before they are summed, so every reduction runs in one fixed order and results
are bitwise identical on 1 device or many.
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
    """A 1-D mesh over ``devices`` (default: all) with the axis name ``"silos"``."""
    devices = jax.devices() if devices is None else list(devices)
    return Mesh(np.asarray(devices), (SILO_AXIS,))


def shard_data(data: FederatedData, mesh: Mesh) -> FederatedData:
    """Pads the silo axis to a multiple of the mesh size and shards it over ``"silos"``."""
    data = data.pad_silos(mesh.size)
    sharding = NamedSharding(mesh, P(SILO_AXIS))
    return jax.tree_util.tree_map(lambda a: jax.device_put(a, sharding), data)


def shard_silo_state(state, mesh: Mesh):
    """Shards the ``silos`` part of a :class:`jaxfl.engine.protocol.SiloState` over ``"silos"`` like the
    data (its leading axis must already match the padded data); other states are returned unchanged."""
    if not hasattr(state, "silos"):
        return state
    sharding = NamedSharding(mesh, P(SILO_AXIS))
    return state._replace(silos=jax.tree_util.tree_map(lambda a: jax.device_put(a, sharding), state.silos))


def replicate(tree):
    """Replicates per-silo values over the ambient ``"silos"`` mesh (no-op without one).

    Sums over silos then run on one full copy in one fixed order rather than as partial sums plus
    an all-reduce, so results do not depend on how silos are laid out over devices.
    """
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or SILO_AXIS not in mesh.axis_names:
        return tree
    return jax.lax.with_sharding_constraint(tree, P())


def mesh_context(mesh: Mesh | None):
    """``jax.set_mesh(mesh)``, or a null context when ``mesh`` is None."""
    return contextlib.nullcontext() if mesh is None else jax.set_mesh(mesh)
