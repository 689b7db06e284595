"""The linear estimators on CuPy blocks (needs a CUDA device; skipped otherwise).

The same checks as ``tests/test_array_namespaces.py`` runs on ``array_api_strict``
blocks in every CI run, here on the GPU: fitted coefficients equal the CPU fit's to
1e-6, fitted attributes are NumPy, every prediction comes back as CuPy blocks.
"""

import dask.array as da
import numpy as np
import pytest
from namespace_checks import CASE_IDS, CASES, blocks, check_fit_predict, problem

import dask_dgd
from dask_dgd._backend import to_numpy


@pytest.fixture(scope="module")
def is_cupy(cp):
    return lambda a: isinstance(a, cp.ndarray)


@pytest.mark.filterwarnings("ignore::dask_dgd.ConvergenceWarning")
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_fit_and_predict_on_cupy_blocks_equal_cpu(client, case, on_gpu, is_cupy):
    check_fit_predict(client, case, on_gpu, is_cupy, rtol=1e-6)


def test_async_on_cupy_blocks_reaches_the_optimum(client, on_gpu, is_cupy):
    X, y, _ = problem("regression")
    optimum = np.linalg.lstsq(np.c_[X, np.ones(len(X))], y, rcond=None)[0]
    Xd, yd = on_gpu(da.from_array(X, chunks=250)), on_gpu(da.from_array(y, chunks=250))
    est = dask_dgd.LinearRegression(solver="gd", mode="async", max_iter=300, tol=0, random_state=0,
                                    client=client).fit(Xd, yd)
    np.testing.assert_allclose(est.coef_, optimum[:-1], atol=2e-3)
    assert all(is_cupy(b) for b in blocks(client, est.predict(Xd)))


def test_cupy_sparse_blocks_equal_scipy_sparse(client, cp):
    import cupyx.scipy.sparse as csp
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    X = sp.random(1000, 20, density=0.2, format="csr", random_state=0)
    y = (X @ rng.standard_normal(20) > 0).astype(np.int64)
    Xs = da.from_array(X, chunks=(250, 20), asarray=False)
    Xg = Xs.map_blocks(lambda b: csp.csr_matrix(b), dtype=X.dtype, meta=csp.csr_matrix((0, 20)))
    kw = dict(solver="lbfgs", client=client)
    ref = dask_dgd.LogisticRegression(**kw).fit(Xs, da.from_array(y, chunks=250))
    est = dask_dgd.LogisticRegression(**kw).fit(Xg, da.from_array(cp.asarray(y), chunks=250, asarray=False))
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-6, atol=1e-8)


def test_in_memory_cupy_array_predicts_on_the_gpu(cp):
    X, y, _ = problem("multinomial", n=300)
    est = dask_dgd.LogisticRegression(solver="lbfgs").fit(X, y)
    for method in ("predict", "predict_proba", "decision_function"):
        got = getattr(est, method)(cp.asarray(X))
        assert isinstance(got, cp.ndarray)
        np.testing.assert_allclose(to_numpy(got), getattr(est, method)(X), rtol=1e-6, atol=1e-8)


def test_model_trained_on_gpu_predicts_on_cpu(client, on_gpu):
    X, y, _ = problem("regression")
    est = dask_dgd.LinearRegression(solver="lbfgs", client=client).fit(
        on_gpu(da.from_array(X, chunks=250)), on_gpu(da.from_array(y, chunks=250)))
    assert isinstance(est.coef_, np.ndarray)
    ref = dask_dgd.LinearRegression(solver="lbfgs").fit(X, y)
    np.testing.assert_allclose(est.predict(X), ref.predict(X), rtol=1e-6)


def test_skewed_cupy_blocks_rebalanced_equal_cpu(client, on_gpu):
    """rebalance=True rechunks the blocks with dask (concatenating CuPy blocks)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((3000, 5))
    y = X @ np.arange(5.0)
    rows = (2000,) + (100,) * 10
    kw = dict(solver="gd", max_iter=20, rebalance=True, random_state=0, client=client)
    ref = dask_dgd.LinearRegression(**kw).fit(da.from_array(X, chunks=(rows, 5)), da.from_array(y, chunks=(rows,)))
    est = dask_dgd.LinearRegression(**kw).fit(on_gpu(da.from_array(X, chunks=(rows, 5))),
                                              on_gpu(da.from_array(y, chunks=(rows,))))
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-6)
