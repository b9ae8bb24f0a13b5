"""Users who hold several records: one training "example" per user, for user-level DP.

Huang et al. distinguishes record-level DP (one record per user) from user-level DP (each of an owner's
``r`` users holds ``m / r`` records; neighbouring datasets differ in all records of one user).
:func:`group_by_user` regroups a silo-major :class:`FederatedData` so that each row is one user's
``records_per_user`` records, and :func:`per_user_loss` turns a per-record loss into that user's mean
loss. Everything downstream (samplers, per-example clipping, the accountants' events) then works per
user unchanged: a clipped per-user gradient bounds one user's contribution, so the privacy statements
the algorithms make for "one record" hold for one user. The alternative, running record-level DP and
converting with group privacy, is :func:`jaxfl.accounting.group.group_privacy`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxfl import checks
from jaxfl.data.federated import FederatedData


def group_by_user(fd: FederatedData, records_per_user: int, *, seed: int | None = None) -> FederatedData:
    """Silo ``i``'s records as ``counts[i] // records_per_user`` users of ``records_per_user`` records each.

    Args:
      fd: ``x: [num_silos, max_records, *feature_shape]``, ``y: [num_silos, max_records, *target_shape]``.
      records_per_user: ``k``, records per user (``m / r`` in Huang et al.).
      seed: None groups consecutive records (record ``j`` belongs to user ``j // k``); an integer shuffles
        each silo's records first (NumPy, data preparation), so users mix the silo's records at random.

    Returns:
      A :class:`FederatedData` with ``x [num_silos, max_users, k, *feature_shape]``,
      ``y [num_silos, max_users, k, ...]`` and ``counts`` the users per silo. The
      ``counts[i] mod k`` records that do not fill a user are dropped (Huang et al.'s ``m / r`` is not an
      integer for most of its settings; the dropped records are at most ``k - 1`` per silo).

    Raises:
      ValueError: ``records_per_user`` not a positive integer, or a silo with fewer records than one user.

    Example:
      >>> import numpy as np
      >>> from jaxfl.data import iid
      >>> x, y = np.arange(40, dtype=np.float32).reshape(20, 2), np.arange(20) % 4
      >>> users = group_by_user(iid(x, y, num_silos=2, seed=0), records_per_user=2, seed=0)
      >>> users.x.shape, users.counts.tolist()     # [silos, users, records per user, *features]: 5 users a silo
      ((2, 5, 2, 2), [5, 5])
    """
    k = checks.positive_int("records_per_user", records_per_user)
    counts = np.asarray(fd.counts)
    users = counts // k
    if np.any(users[counts > 0] == 0):
        i = int(np.flatnonzero((users == 0) & (counts > 0))[0])
        raise ValueError(f"silo {i} has {int(counts[i])} records, fewer than records_per_user={k}")
    rng = None if seed is None else np.random.default_rng(seed)  # host-rng-ok: data preparation
    x, y = np.asarray(fd.x), np.asarray(fd.y)
    max_users = max(int(users.max()), 1)
    gx = np.zeros((fd.num_silos, max_users, k) + x.shape[2:], x.dtype)
    gy = np.zeros((fd.num_silos, max_users, k) + y.shape[2:], y.dtype)
    for i, (n, u) in enumerate(zip(counts, users)):
        order = np.arange(n) if rng is None else rng.permutation(n)
        take = order[: u * k]
        gx[i, :u] = x[i, take].reshape((u, k) + x.shape[2:])
        gy[i, :u] = y[i, take].reshape((u, k) + y.shape[2:])
    return FederatedData(jnp.asarray(gx), jnp.asarray(gy), jnp.asarray(users.astype(np.int32)))


def per_user_loss(loss_fn):
    """``(params, x: [k, ...], y: [k, ...]) -> mean of loss_fn(params, x[j], y[j])``: one user's loss from a
    per-record loss, for data regrouped by :func:`group_by_user`. Clipping its gradient to ``C`` bounds the
    user's whole contribution by ``C``.

    Example:
      >>> import jax.numpy as jnp
      >>> record_loss = lambda p, x, y: (p * x - y) ** 2
      >>> user_loss = per_user_loss(record_loss)                      # the mean over one user's records
      >>> float(user_loss(2.0, jnp.array([1.0, 2.0]), jnp.array([0.0, 0.0])))   # (4 + 16) / 2
      10.0
    """

    def loss(params, xs, ys):
        return jnp.mean(jax.vmap(loss_fn, in_axes=(None, 0, 0))(params, xs, ys))

    return loss
