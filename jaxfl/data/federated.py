"""Silo-major federated datasets.

A :class:`FederatedData` holds every silo's records in one padded array so that per-silo work is a
``vmap`` over the leading axis and the silo axis can be sharded over a ``"silos"`` mesh axis.
Rows at positions ``>= counts[i]`` of silo ``i`` are padding: they are masked out of every loss,
gradient, sample and count (see :meth:`FederatedData.mask`).
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import jax.numpy as jnp
import numpy as np


class FederatedData(NamedTuple):
    """Records of ``num_silos`` silos, padded to a common ``max_records``.

    Attributes:
      x: features, ``[num_silos, max_records, *feature_shape]``.
      y: targets, ``[num_silos, max_records, *target_shape]``.
      counts: ``int32[num_silos]``, the number of real (non-padding) records of each silo.

    Example:
      >>> import numpy as np
      >>> data = from_silos([(np.ones((3, 2)), np.zeros(3)), (np.ones((5, 2)), np.ones(5))])
      >>> data.num_silos, data.max_records, data.counts.tolist()
      (2, 5, [3, 5])
      >>> data.mask().astype(int).tolist()        # 1 on real records, 0 on padding
      [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    """

    x: jnp.ndarray
    y: jnp.ndarray
    counts: jnp.ndarray

    @property
    def num_silos(self) -> int:
        return self.x.shape[0]

    @property
    def max_records(self) -> int:
        return self.x.shape[1]

    def mask(self) -> jnp.ndarray:
        """``bool[num_silos, max_records]``: True on real records, False on padding."""
        return jnp.arange(self.max_records)[None, :] < self.counts[:, None]

    def silo(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """The real records ``(x, y)`` of silo ``i`` as host arrays, padding removed."""
        n = int(self.counts[i])
        return np.asarray(self.x[i, :n]), np.asarray(self.y[i, :n])

    def pad_silos(self, multiple: int, minimum: int = 0) -> "FederatedData":
        """Appends empty silos (count 0) so that ``num_silos`` is a multiple of ``multiple`` and at least
        ``minimum``.

        Used to shard the silo axis evenly over devices; empty silos take part in no sum.
        """
        target = max(-(-self.num_silos // multiple) * multiple, -(-int(minimum) // multiple) * multiple)
        extra = target - self.num_silos
        if extra == 0:
            return self
        pad = lambda a: jnp.concatenate([a, jnp.zeros((extra,) + a.shape[1:], a.dtype)])
        return FederatedData(pad(self.x), pad(self.y), pad(self.counts))


def from_silos(silos: Sequence[tuple[np.ndarray, np.ndarray]], *, max_records: int | None = None,
               allow_empty: bool = False, dtype=np.float32) -> FederatedData:
    """Builds a :class:`FederatedData` from a list of per-silo ``(x, y)`` host arrays.

    Args:
      silos: one ``(x_i, y_i)`` per silo, ``x_i: [n_i, *feature_shape]``, ``y_i: [n_i, *target_shape]``.
      max_records: pad to this many rows (default: the largest ``n_i``).
      allow_empty: accept silos with zero records (rejected by default: such a silo has no
        sampling rate and breaks every per-silo mean).
      dtype: floating dtype of the features; integer targets keep an integer dtype.

    Raises:
      ValueError: naming the offending silo and value, for an empty silo, NaN/inf features or targets,
        mismatched feature shapes, or ``x_i``/``y_i`` of different lengths.

    Example:
      >>> import numpy as np, jaxfl
      >>> silos = [(np.ones((3, 2)), np.zeros(3, np.int32)), (np.ones((5, 2)), np.ones(5, np.int32))]
      >>> data = jaxfl.from_silos(silos)
      >>> data.x.shape, data.y.shape, data.counts.tolist()   # padded to the largest silo
      ((2, 5, 2), (2, 5), [3, 5])
    """
    if len(silos) == 0:
        raise ValueError("need at least one silo, got 0")
    xs, ys = [], []
    feature_shape = target_shape = None
    for i, (x, y) in enumerate(silos):
        x, y = np.asarray(x), np.asarray(y)
        if x.ndim == 0 or y.ndim == 0:
            raise ValueError(f"silo {i}: x and y need a leading record axis, got shapes {x.shape} and {y.shape}")
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"silo {i}: x has {x.shape[0]} records but y has {y.shape[0]}")
        if x.shape[0] == 0 and not allow_empty:
            raise ValueError(f"silo {i} has zero records")
        if feature_shape is None:
            feature_shape, target_shape = x.shape[1:], y.shape[1:]
        elif x.shape[1:] != feature_shape or y.shape[1:] != target_shape:
            raise ValueError(
                f"silo {i}: feature/target shape {x.shape[1:]}/{y.shape[1:]} differs from silo 0's "
                f"{feature_shape}/{target_shape}")
        for name, a in (("features", x), ("targets", y)):
            if np.issubdtype(a.dtype, np.floating) and not np.all(np.isfinite(a)):
                bad = np.argwhere(~np.isfinite(a.reshape(a.shape[0], -1)))[0]
                raise ValueError(f"silo {i}: {name} contain NaN or inf (record {bad[0]})")
        xs.append(x.astype(dtype))
        ys.append(y)
    counts = np.array([x.shape[0] for x in xs], np.int32)
    n_max = int(counts.max()) if max_records is None else int(max_records)
    if n_max < counts.max():
        raise ValueError(f"max_records={n_max} is smaller than the largest silo ({counts.max()} records)")
    y_dtype = np.result_type(*[y.dtype for y in ys])
    if np.issubdtype(y_dtype, np.floating):
        y_dtype = dtype
    elif np.issubdtype(y_dtype, np.integer):
        y_dtype = np.int32
    x_pad = np.zeros((len(xs), n_max) + feature_shape, dtype)
    y_pad = np.zeros((len(ys), n_max) + target_shape, y_dtype)
    for i, (x, y) in enumerate(zip(xs, ys)):
        x_pad[i, : len(x)] = x
        y_pad[i, : len(y)] = y
    return FederatedData(jnp.asarray(x_pad), jnp.asarray(y_pad), jnp.asarray(counts))
