"""Preprocessing: fitted on train, applied to every split; PCA against scikit-learn."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxfl.data import add_bias_column, minmax_scale, one_hot, pca, standardize


def data(n=50, d=4, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, d)) * [1.0, 5.0, 0.1, 2.0][:d] + [3.0, -1.0, 0.0, 7.0][:d]).astype(np.float32)


def test_standardize_fits_on_train_and_keeps_constant_columns():
    train, test = data(), data(seed=1)
    train[:, 2] = 4.0   # a constant column passes unchanged
    tr, te, fit = standardize(train, test)
    np.testing.assert_allclose(tr[:, [0, 1, 3]].mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(tr[:, [0, 1, 3]].std(0), 1, atol=1e-5)
    np.testing.assert_array_equal(tr[:, 2], 4.0)
    np.testing.assert_allclose(te, (test - fit.shift) * fit.mul, rtol=1e-5)
    np.testing.assert_allclose(fit.apply(test), te)
    assert tr.dtype == np.float32


def test_standardize_columns_and_ddof():
    train = data()
    tr, fit = standardize(train, columns=[0, 3], ddof=1)
    np.testing.assert_array_equal(tr[:, [1, 2]], train[:, [1, 2]])
    np.testing.assert_allclose(tr[:, [0, 3]].std(0, ddof=1), 1, atol=1e-5)
    with pytest.raises(ValueError, match="column 9 is out of range"):
        standardize(train, columns=[9])
    with pytest.raises(ValueError, match=r"others\[0\].*feature shape \(3,\)"):
        standardize(train, train[:, :3])
    bad = train.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        standardize(bad)


def test_minmax_scale():
    train = data()
    train[:, 1] = -2.0
    tr, te, fit = minmax_scale(train, train * 2, feature_range=(-1, 1))
    np.testing.assert_allclose(tr[:, [0, 2, 3]].min(0), -1, atol=1e-6)
    np.testing.assert_allclose(tr[:, [0, 2, 3]].max(0), 1, atol=1e-6)
    np.testing.assert_array_equal(tr[:, 1], -1.0)
    tc, _ = minmax_scale(train, columns=[0])
    np.testing.assert_allclose(tc[:, 0].min(), 0, atol=1e-6)
    np.testing.assert_array_equal(tc[:, 1:], train[:, 1:])
    with pytest.raises(ValueError, match="feature_range"):
        minmax_scale(train, feature_range=(1, 1))


@settings(max_examples=15, deadline=None)
@given(st.integers(5, 60), st.integers(2, 12), st.integers(0, 1000))
def test_pca_matches_sklearn_up_to_sign(n, d, seed):
    from sklearn.decomposition import PCA

    x = np.random.default_rng(seed).normal(size=(n, d)) @ np.diag(np.linspace(3, 0.5, d))
    dim = min(n, d) - 1 or 1
    proj, other, fit = pca(x, x[:3] + 1.0, dim=dim)
    ref = PCA(n_components=dim, svd_solver="full").fit(x)
    np.testing.assert_allclose(np.abs(fit.components), np.abs(ref.components_), atol=1e-6)
    np.testing.assert_allclose(fit.explained_variance, ref.explained_variance_, rtol=1e-6)
    np.testing.assert_allclose(np.abs(proj), np.abs(ref.transform(x)), atol=1e-6)
    np.testing.assert_allclose(fit.components @ fit.components.T, np.eye(dim), atol=1e-8)
    rows = np.arange(dim)
    assert (fit.components[rows, np.argmax(np.abs(fit.components), axis=1)] > 0).all()   # sign convention
    np.testing.assert_allclose(other, fit.apply(x[:3] + 1.0))


def test_pca_images_flattened_and_deterministic():
    imgs = np.random.default_rng(0).integers(0, 256, size=(40, 4, 4), dtype=np.uint8)
    a, fa = pca(imgs / 255.0, dim=5)
    b, fb = pca(imgs / 255.0, dim=5)
    assert a.shape == (40, 5)
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match=r"dim must be an integer in 1..min\(n, d\) = 16, got 17"):
        pca(imgs, dim=17)


def test_one_hot_and_bias():
    np.testing.assert_array_equal(one_hot([2, 0, 1]), np.eye(3)[[2, 0, 1]])
    assert one_hot(np.array([0, 1]), 4).shape == (2, 4)
    with pytest.raises(ValueError, match="label 4 is out of range for num_classes=3"):
        one_hot([4], 3)
    with pytest.raises(ValueError, match="labels must be >= 0, got -1"):
        one_hot([-1, 0])
    with pytest.raises(ValueError, match="integer labels"):
        one_hot([0.5])
    xb = add_bias_column(np.zeros((3, 2), np.float32))
    np.testing.assert_array_equal(xb[:, 0], 1.0)
    assert xb.shape == (3, 3) and xb.dtype == np.float32
    assert add_bias_column(np.zeros((3, 2)), first=False)[:, -1].tolist() == [1.0] * 3
