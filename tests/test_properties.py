"""Property tests: random shapes, row chunkings (zero-row chunks included) and sample
weights driven through fit and predict.

LinearRegression with a ridge penalty ``alpha = 1 / sum(weights)`` minimises the same
objective as scikit-learn's ``Ridge(alpha=1)`` (the README's mapping), which has one
solution for any number of rows: the in-process fit must match Ridge, and the fit on
dask input must match the in-process fit on the same rows whatever the chunking.
"""

import warnings

import dask.array as da
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.linear_model import Ridge

from dask_dgd import LinearRegression, LogisticRegression

#: coefficients of two fits of the same rows agree to this (absolute)
ATOL = 1e-6
EXACT = dict(solver="lbfgs", tol=1e-10, max_iter=1000)
FIXTURE_OK = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def chunkings(draw, n_rows):
    """Row chunk sizes summing to ``n_rows``: 1 to 6 chunks, zero-row chunks allowed."""
    n_chunks = draw(st.integers(1, 6))
    cuts = sorted(draw(st.lists(st.integers(0, n_rows), min_size=n_chunks - 1, max_size=n_chunks - 1)))
    return tuple(int(c) for c in np.diff([0, *cuts, n_rows]))


@st.composite
def regression_problems(draw):
    n_rows = draw(st.integers(1, 60))
    n_features = draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, n_features))
    y = X @ rng.normal(0, 2, n_features) + rng.normal(0, 3) + rng.normal(0, 0.5, n_rows)
    weights = None
    if draw(st.booleans()):  # non-negative, not all zero
        weights = np.array(draw(st.lists(st.one_of(st.just(0.0), st.floats(0.1, 5.0)), min_size=n_rows, max_size=n_rows)))
        weights[draw(st.integers(0, n_rows - 1))] = draw(st.floats(0.1, 5.0))
    return X, y, weights, draw(chunkings(n_rows))


def _ridge_pair(X, weights):
    total = float(X.shape[0] if weights is None else weights.sum())
    return dict(alpha=1.0 / total, **EXACT), Ridge(alpha=1.0)


def _check_predictions(pred, n_rows):
    assert pred.shape == (n_rows,)
    assert pred.dtype == np.float64
    assert np.all(np.isfinite(pred))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")  # tol=1e-10 can end "ABNORMAL"
@settings(max_examples=60, deadline=None)
@given(problem=regression_problems())
def test_in_process_fit_matches_scikit_learn_ridge(problem):
    X, y, weights, _ = problem
    params, ridge = _ridge_pair(X, weights)
    ours = LinearRegression(**params).fit(X, y, sample_weight=weights)
    ref = ridge.fit(X, y, sample_weight=weights)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=0, atol=ATOL)
    assert ours.intercept_ == pytest.approx(ref.intercept_, abs=ATOL)
    _check_predictions(ours.predict(X), X.shape[0])


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@settings(FIXTURE_OK, max_examples=25)
@given(problem=regression_problems())
@pytest.mark.slow
def test_dask_fit_matches_the_in_process_fit_whatever_the_chunking(problem, client):
    X, y, weights, chunks = problem
    params, _ = _ridge_pair(X, weights)
    in_process = LinearRegression(**params).fit(X, y, sample_weight=weights)
    Xd = da.from_array(X, chunks=(chunks, X.shape[1]))
    yd = da.from_array(y, chunks=(chunks,))
    wd = None if weights is None else da.from_array(weights, chunks=(chunks,))
    on_dask = LinearRegression(client=client, **params).fit(Xd, yd, sample_weight=wd)
    np.testing.assert_allclose(on_dask.coef_, in_process.coef_, rtol=0, atol=ATOL)
    assert on_dask.intercept_ == pytest.approx(in_process.intercept_, abs=ATOL)
    lazy = on_dask.predict(Xd)
    assert isinstance(lazy, da.Array)
    pred = lazy.compute()
    _check_predictions(pred, X.shape[0])
    np.testing.assert_allclose(pred, in_process.predict(X), rtol=0, atol=1e-5)


@st.composite
def classification_problems(draw):
    n_rows = draw(st.integers(2, 60))
    n_features = draw(st.integers(1, 5))
    labels = draw(st.sampled_from([np.array([0, 1, 2, 3]), np.array([-7, 5]), np.array(["ant", "bee", "cat"])]))
    y = np.array(draw(st.lists(st.sampled_from(list(labels)), min_size=n_rows, max_size=n_rows)), dtype=labels.dtype)
    if np.unique(y).size < 2:  # at least two classes in the data
        y[0], y[-1] = labels[0], labels[1]
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    X = rng.standard_normal((n_rows, n_features))
    return X, y, labels, draw(chunkings(n_rows))


def _check_labels(est, X_new, y, pred, proba):
    seen = np.unique(y)
    np.testing.assert_array_equal(est.classes_, seen)  # only labels present at fit
    assert pred.shape == (X_new.shape[0],) and pred.dtype == seen.dtype
    assert set(pred.tolist()) <= set(seen.tolist())
    assert proba.shape == (X_new.shape[0], seen.size)
    assert np.all(np.isfinite(proba)) and np.allclose(proba.sum(axis=1), 1.0)


@settings(max_examples=40, deadline=None)
@given(problem=classification_problems(), scale=st.sampled_from([1.0, 1e3, 1e50]))
def test_logistic_predicts_only_labels_seen_at_fit(problem, scale):
    X, y, _, _ = problem
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tiny or separable problems may not converge
        est = LogisticRegression(max_iter=30).fit(X, y)
    X_new = np.random.default_rng(1).standard_normal((17, X.shape[1])) * scale  # huge predictors too
    _check_labels(est, X_new, y, est.predict(X_new), est.predict_proba(X_new))


@settings(FIXTURE_OK, max_examples=15)
@given(problem=classification_problems())
@pytest.mark.slow
def test_logistic_on_dask_predicts_only_labels_seen_at_fit(problem, client):
    X, y, _, chunks = problem
    Xd = da.from_array(X, chunks=(chunks, X.shape[1]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = LogisticRegression(max_iter=30, client=client).fit(Xd, da.from_array(y, chunks=(chunks,)))
    pred, proba = est.predict(Xd).compute(), est.predict_proba(Xd).compute()
    _check_labels(est, X, y, pred, proba)
