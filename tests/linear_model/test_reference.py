"""Coefficients match scikit-learn's on the same data and penalty (1e-4 relative)."""

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn import linear_model as sk
from sklearn.datasets import make_classification, make_regression

from dask_dgd import LinearRegression, LogisticRegression, PoissonRegressor

RTOL = 1e-4


def _close(ours, theirs):
    scale = max(np.abs(theirs).max(), 1e-12)
    np.testing.assert_allclose(ours, theirs, rtol=RTOL, atol=RTOL * scale)


def _inputs(X, y, kind, client, sample_weight=None):
    if kind == "numpy":
        return X, y, sample_weight, None
    Xd = da.from_array(X, chunks=(max(1, len(X) // 5), -1))
    yd = da.from_array(y, chunks=Xd.chunks[0])
    sw = None if sample_weight is None else da.from_array(sample_weight, chunks=Xd.chunks[0])
    return Xd, yd, sw, client


@pytest.fixture
def regression():
    X, y = make_regression(600, 8, noise=5.0, random_state=0)
    return X, y + 10.0


@pytest.mark.parametrize("kind", ["numpy", "dask"])
def test_linear_regression_matches_ols(regression, kind, client):
    X, y = regression
    Xi, yi, _, c = _inputs(X, y, kind, client)
    ours = LinearRegression(tol=1e-10, client=c).fit(Xi, yi)
    ref = sk.LinearRegression().fit(X, y)
    _close(ours.coef_, ref.coef_)
    _close(ours.intercept_, ref.intercept_)


@pytest.mark.parametrize("kind", ["numpy", "dask"])
def test_ridge_mapping_alpha_over_n(regression, kind, client):
    X, y = regression
    w = np.random.default_rng(1).uniform(0.5, 2.0, len(y))
    Xi, yi, wi, c = _inputs(X, y, kind, client, w)
    ours = LinearRegression(alpha=3.0 / w.sum(), tol=1e-10, client=c).fit(Xi, yi, sample_weight=wi)
    ref = sk.Ridge(alpha=3.0).fit(X, y, sample_weight=w)
    _close(ours.coef_, ref.coef_)
    _close(ours.intercept_, ref.intercept_)


def test_elastic_net_by_proximal_gradient(regression):
    X, y = regression
    ours = LinearRegression(alpha=0.5, l1_ratio=0.7, solver="gd", max_iter=5000, tol=1e-9).fit(X, y)
    ref = sk.ElasticNet(alpha=0.5, l1_ratio=0.7, tol=1e-12, max_iter=100000).fit(X, y)
    assert ours.solver_ == "gd"
    _close(ours.coef_, ref.coef_)
    np.testing.assert_array_equal(ours.coef_ == 0, ref.coef_ == 0)  # same sparsity


@pytest.mark.parametrize("kind", ["numpy", "dask"])
def test_binary_logistic_matches_C_mapping(kind, client):
    X, y = make_classification(800, 6, random_state=0)
    Xi, yi, _, c = _inputs(X, y, kind, client)
    C = 0.5
    ours = LogisticRegression(alpha=1 / (C * len(y)), tol=1e-10, client=c).fit(Xi, yi)
    ref = sk.LogisticRegression(C=C, tol=1e-12, max_iter=10000).fit(X, y)
    assert ours.coef_.shape == (1, 6) and ours.intercept_.shape == (1,)
    _close(ours.coef_, ref.coef_)
    _close(ours.intercept_, ref.intercept_)
    proba = ours.predict_proba(Xi)
    proba = proba.compute() if kind == "dask" else proba
    _close(proba, ref.predict_proba(X))


@pytest.mark.parametrize("kind", ["numpy", "dask"])
def test_multinomial_logistic_matches(kind, client):
    X, y = make_classification(900, 7, n_informative=5, n_classes=4, random_state=0)
    Xi, yi, _, c = _inputs(X, y, kind, client)
    ours = LogisticRegression(alpha=1 / len(y), tol=1e-10, client=c).fit(Xi, yi)
    ref = sk.LogisticRegression(C=1.0, tol=1e-12, max_iter=10000).fit(X, y)
    assert ours.coef_.shape == (4, 7)
    _close(ours.coef_, ref.coef_)
    _close(ours.intercept_, ref.intercept_)
    proba = ours.predict_proba(Xi)
    proba = proba.compute() if kind == "dask" else proba
    assert proba.shape == (900, 4)
    _close(proba, ref.predict_proba(X))


def test_class_weight_balanced_and_string_labels():
    X, y = make_classification(700, 5, weights=[0.8, 0.2], random_state=3)
    labels = np.array(["spam", "ham"], dtype=object)[y]
    ours = LogisticRegression(alpha=1 / 700, class_weight="balanced", tol=1e-10).fit(X, labels)
    ref = sk.LogisticRegression(C=1.0, class_weight="balanced", tol=1e-12, max_iter=10000).fit(X, labels)
    assert list(ours.classes_) == ["ham", "spam"]
    _close(ours.coef_, ref.coef_)
    assert set(ours.predict(X[:20])) <= {"ham", "spam"}
    cw = {"ham": 1.0, "spam": 3.0}
    total_weight = sum(cw[label] for label in labels)  # C maps to 1 / (C * total weight)
    ours = LogisticRegression(alpha=1 / total_weight, class_weight=cw, tol=1e-10).fit(X, labels)
    ref = sk.LogisticRegression(C=1.0, class_weight=cw, tol=1e-12, max_iter=10000).fit(X, labels)
    _close(ours.coef_, ref.coef_)


@pytest.mark.parametrize("kind", ["numpy", "dask"])
def test_poisson_matches(kind, client):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((700, 5)) * 0.5
    y = rng.poisson(np.exp(X @ [0.3, -0.2, 0.1, 0.0, 0.4] + 1.0)).astype(float)
    Xi, yi, _, c = _inputs(X, y, kind, client)
    ours = PoissonRegressor(alpha=0.01, tol=1e-10, client=c).fit(Xi, yi)
    ref = sk.PoissonRegressor(alpha=0.01, tol=1e-12, max_iter=10000).fit(X, y)
    _close(ours.coef_, ref.coef_)
    _close(ours.intercept_, ref.intercept_)
    np.testing.assert_allclose(ours.score(X, y), ref.score(X, y), rtol=1e-6)


def test_sparse_csr_input_matches_dense(client):
    X, y = make_classification(600, 10, random_state=1)
    X[np.abs(X) < 0.8] = 0.0
    dense = LogisticRegression(alpha=1e-3, tol=1e-10).fit(X, y)
    sparse = LogisticRegression(alpha=1e-3, tol=1e-10).fit(sp.csr_matrix(X), y)
    _close(sparse.coef_, dense.coef_)
    Xd = da.from_array(X, chunks=(150, -1)).map_blocks(sp.csr_matrix, dtype=X.dtype)
    on_cluster = LogisticRegression(alpha=1e-3, tol=1e-10, client=client).fit(Xd, da.from_array(y, chunks=150))
    _close(on_cluster.coef_, dense.coef_)


def test_no_intercept():
    X, y = make_classification(500, 4, random_state=2)
    ours = LogisticRegression(alpha=1 / 500, fit_intercept=False, tol=1e-10).fit(X, y)
    ref = sk.LogisticRegression(C=1.0, fit_intercept=False, tol=1e-12, max_iter=10000).fit(X, y)
    _close(ours.coef_, ref.coef_)
    assert ours.intercept_ == 0.0


def test_lasso_from_a_warm_start_is_not_rejected_as_divergent(regression):
    """The backoff compares the whole objective: a proximal step may raise the smooth
    part alone (shrinking an OLS warm start) while lowering smooth part + L1."""
    X, y = regression
    est = LinearRegression(tol=1e-10, warm_start=True).fit(X, y)
    est.set_params(alpha=0.5, l1_ratio=1.0, solver="gd", max_iter=5000, tol=1e-9).fit(X, y)
    ref = sk.Lasso(alpha=0.5, tol=1e-12, max_iter=100000).fit(X, y)
    _close(est.coef_, ref.coef_)
