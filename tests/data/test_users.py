"""Users of several records: regrouping keeps every kept record once, drops at most k - 1 per silo, and the
per-user loss is the mean of its records' losses; clipping its gradient bounds a whole user."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfl.data import from_silos, group_by_user, per_user_loss
from jaxfl.privacy.clipping import clipped_grad_sum


def _fed(sizes=(7, 12, 5), d=3, seed=0):
    rng = np.random.default_rng(seed)
    silos = []
    for i, n in enumerate(sizes):
        x = np.concatenate([np.full((n, 1), 100 * i) + np.arange(n)[:, None], rng.normal(size=(n, d - 1))], axis=1)
        silos.append((x.astype(np.float32), rng.integers(0, 2, n).astype(np.int32)))
    return from_silos(silos)


@pytest.mark.parametrize("seed", [None, 3])
def test_group_by_user_keeps_whole_users_only(seed):
    fd = _fed()
    grouped = group_by_user(fd, 3, seed=seed)
    assert grouped.x.shape == (3, 4, 3, 3) and grouped.y.shape == (3, 4, 3)
    np.testing.assert_array_equal(np.asarray(grouped.counts), [2, 4, 1])
    for i, (n, users) in enumerate(zip((7, 12, 5), (2, 4, 1))):
        ids = np.asarray(grouped.x[i, :users, :, 0]).ravel()
        assert len(np.unique(ids)) == 3 * users and set(ids) <= set(100 * i + np.arange(n))
        if seed is None:
            np.testing.assert_array_equal(ids, 100 * i + np.arange(3 * users))
        own = {int(r): int(l) for r, l in zip(np.asarray(fd.x[i, :n, 0]), np.asarray(fd.y[i, :n]))}
        assert all(own[int(r)] == int(l) for r, l in zip(ids, np.asarray(grouped.y[i, :users]).ravel()))
        assert not np.asarray(grouped.x[i, users:]).any()
    with pytest.raises(ValueError, match="silo 2 has 5 records, fewer than records_per_user=6"):
        group_by_user(fd, 6)
    with pytest.raises(ValueError, match="records_per_user"):
        group_by_user(fd, 0)


def test_per_user_loss_is_the_mean_and_clipping_bounds_a_user():
    w = jnp.array([0.5, -1.0, 2.0])

    def loss(p, x, y):
        return (x @ p - y) ** 2

    xs = jnp.array([[1.0, 2.0, 3.0], [0.0, 1.0, 0.0]])
    ys = jnp.array([1.0, 4.0])
    expected = 0.5 * (loss(w, xs[0], ys[0]) + loss(w, xs[1], ys[1]))
    np.testing.assert_allclose(per_user_loss(loss)(w, xs, ys), expected, rtol=1e-6)
    users_x = jnp.stack([xs, 10 * xs])
    users_y = jnp.stack([ys, ys])
    summed = clipped_grad_sum(per_user_loss(loss), w, users_x, users_y, jnp.ones(2), 0.1)
    grads = [jax.grad(per_user_loss(loss))(w, users_x[u], users_y[u]) for u in range(2)]
    clipped = sum(g * min(1.0, 0.1 / float(jnp.linalg.norm(g))) for g in grads)
    np.testing.assert_allclose(summed.value, clipped, rtol=1e-5)
    assert float(summed.num_clipped) == 2
