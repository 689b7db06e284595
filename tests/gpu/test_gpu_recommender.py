"""The recommenders on CuPy-backed dask arrays: the shards train on the GPU, the model
equals the CPU fit, the fitted attributes are NumPy and ``predict`` answers on the GPU.

The same checks run without a GPU on ``array_api_strict`` blocks in
``tests/recommender/test_factorization_array_api.py``.
"""

import warnings

import dask.array as da
import numpy as np
import pytest
from namespace_checks import spy_factorization_kernels

from dask_dgd import ImplicitMatrixFactorization, MatrixFactorization
from dask_dgd.datasets import make_ratings


@pytest.fixture(scope="module")
def data():
    ratings, _ = make_ratings(60, 30, 800, rank=2, noise=0.2, random_state=0)
    pairs = da.from_array(ratings[["user", "item"]].to_numpy(), chunks=(200, 2))
    y = da.from_array(ratings["rating"].to_numpy(), chunks=200)
    more, _ = make_ratings(70, 35, 300, rank=2, noise=0.2, random_state=1)  # new users and items
    more_pairs = da.from_array(more[["user", "item"]].to_numpy(), chunks=(100, 2))
    more_y = da.from_array(more["rating"].to_numpy(), chunks=100)
    return pairs, y, more_pairs, more_y


@pytest.fixture
def kernel_calls(monkeypatch, cp):
    """For every kernel call on the shards: whether ratings, factors and item table were
    CuPy arrays."""
    return spy_factorization_kernels(
        monkeypatch, lambda lu, gi, U, V: all(isinstance(a, cp.ndarray) for a in (lu, gi, U, V)))


CASES = {
    "explicit": lambda c: MatrixFactorization(3, solver="gd", max_iter=5, tol=0, random_state=0, client=c),
    "explicit-minibatch": lambda c: MatrixFactorization(3, max_iter=2, batch_size=200, optimizer="adagrad", tol=0,
                                                        random_state=1, client=c),
    "bpr": lambda c: ImplicitMatrixFactorization(3, loss="bpr", alpha=0.01, max_iter=5, tol=0, random_state=2,
                                                 client=c),
    "bpr-minibatch": lambda c: ImplicitMatrixFactorization(3, loss="bpr", alpha=0.01, max_iter=2, batch_size=200, tol=0,
                                                           random_state=3, client=c),
    "wls": lambda c: ImplicitMatrixFactorization(3, loss="wls", alpha=0.01, rating_col="rating", max_iter=5, tol=0,
                                                 solver="gd", random_state=4, client=c),
    "wls-minibatch": lambda c: ImplicitMatrixFactorization(3, loss="wls", alpha=0.01, rating_col="rating", max_iter=2,
                                                           batch_size=200, tol=0, random_state=5, client=c),
}
USES_Y = {"explicit", "explicit-minibatch", "wls", "wls-minibatch"}


def _fit(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, y)


def assert_same_model(got, want, atol):
    for name in ("user_factors_", "item_factors_", "user_bias_", "item_bias_"):
        if hasattr(want, name):
            assert type(getattr(got, name)) is np.ndarray, name
            np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=0, atol=atol, err_msg=name)
    np.testing.assert_allclose(got.loss_curve_, want.loss_curve_, rtol=atol)
    for state in (got._user_state_, got._item_state_):
        for name, value in state._asdict().items():
            assert value is None or isinstance(value, (int, np.ndarray)), (name, type(value))


@pytest.mark.parametrize("case", sorted(CASES))
def test_fit_on_cupy_blocks_equals_cpu_fit(client, data, kernel_calls, on_gpu, cp, case):
    pairs, y, _, _ = data
    y_in = y if case in USES_Y else None
    if case.startswith("wls"):  # confidence-weighted strengths must be >= 0
        y_in = abs(y)
    want = _fit(CASES[case](client), pairs, y_in)
    kernel_calls.clear()
    got = _fit(CASES[case](client), on_gpu(pairs), None if y_in is None else on_gpu(y_in))
    assert kernel_calls and all(kernel_calls)  # every shard step ran on the GPU
    assert_same_model(got, want, atol=1e-6)
    pred = got.predict(on_gpu(pairs))
    assert isinstance(pred, da.Array) and isinstance(pred._meta, cp.ndarray)
    out = pred.compute(scheduler="sync")
    assert isinstance(out, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(out), want.predict(pairs.compute()), rtol=0, atol=1e-6)
    # the model fitted on the GPU predicts on the CPU too
    np.testing.assert_allclose(got.predict(pairs.compute()), cp.asnumpy(out), rtol=0, atol=1e-12)


def test_partial_fit_on_cupy_blocks_equals_cpu(client, data, kernel_calls, on_gpu):
    pairs, y, more_pairs, more_y = data
    fits = []
    for conv in (lambda a: a, on_gpu):
        est = _fit(CASES["explicit-minibatch"](client), conv(pairs), conv(y))
        kernel_calls.clear()
        est.partial_fit(conv(more_pairs), conv(more_y))
        assert kernel_calls and all(c == (conv is on_gpu) for c in kernel_calls)
        fits.append(est)
    assert len(fits[1].user_ids_) > np.unique(pairs.compute()[:, 0]).size
    assert_same_model(fits[1], fits[0], atol=1e-6)
