"""The recommenders on dask arrays whose blocks are not NumPy, without a GPU.

``array_api_strict`` blocks on a device of their own (:func:`dask_dgd.testing.on_array_api_strict`)
stand in for CuPy: a NumPy-only call on the shards' arrays, or a parameter left on the
host, fails.  A fit on such blocks must give the NumPy fit's model, with the shards'
kernels running on the blocks' device and NumPy fitted attributes; ``predict`` on such
blocks answers on their device.  ``tests/gpu/test_gpu_recommender.py`` repeats this with CuPy.
"""

import warnings

import array_api_compat
import array_api_strict as xps
import dask.array as da
import numpy as np
import pytest
from namespace_checks import spy_factorization_kernels

from dask_dgd import ImplicitMatrixFactorization, MatrixFactorization
from dask_dgd._backend import to_numpy
from dask_dgd.datasets import make_ratings
from dask_dgd.testing import STRICT_DEVICE, on_array_api_strict


def on_device(a):
    """Whether ``a`` is an array_api_strict array on the device of on_array_api_strict."""
    return (
        array_api_compat.is_array_api_strict_namespace(array_api_compat.array_namespace(a))
        and a.device == xps.Device(STRICT_DEVICE)
    )


@pytest.fixture(scope="module")
def data():
    ratings, _ = make_ratings(40, 25, 500, rank=2, noise=0.2, random_state=0)
    n = len(ratings)
    pairs = da.from_array(ratings[["user", "item"]].to_numpy(), chunks=(130, 2))
    y = da.from_array(ratings["rating"].to_numpy(), chunks=130)
    more, _ = make_ratings(50, 30, 200, rank=2, noise=0.2, random_state=1)  # new users and items
    more_pairs = da.from_array(more[["user", "item"]].to_numpy(), chunks=(70, 2))
    more_y = da.from_array(more["rating"].to_numpy(), chunks=70)
    assert n > 400 and pairs.numblocks[0] == 4
    return pairs, y, more_pairs, more_y


@pytest.fixture
def kernel_calls(monkeypatch):
    """Every kernel call on the shards: whether its ratings, factors and item table were
    array_api_strict arrays on the device."""
    return spy_factorization_kernels(monkeypatch, lambda lu, gi, U, V: (on_device(lu), on_device(U), on_device(V)))


CASES = {
    "explicit": lambda c: MatrixFactorization(3, solver="gd", max_iter=4, tol=0, random_state=0, client=c),
    "explicit-minibatch": lambda c: MatrixFactorization(3, max_iter=2, batch_size=150, optimizer="adagrad",
                                                        tol=0, random_state=1, client=c),
    "bpr": lambda c: ImplicitMatrixFactorization(3, loss="bpr", alpha=0.01, max_iter=4, tol=0, random_state=2,
                                                 client=c),
    "bpr-minibatch": lambda c: ImplicitMatrixFactorization(3, loss="bpr", alpha=0.01, max_iter=2, batch_size=150, tol=0,
                                                           random_state=3, client=c),
    "wls": lambda c: ImplicitMatrixFactorization(3, loss="wls", alpha=0.01, rating_col="rating", max_iter=4, tol=0,
                                                 solver="gd", optimizer="sgd", learning_rate=0.05, random_state=4,
                                                 client=c),
    "wls-minibatch": lambda c: ImplicitMatrixFactorization(3, loss="wls", alpha=0.01, rating_col="rating", max_iter=2,
                                                           batch_size=150, tol=0, random_state=5, client=c),
}
#: the implicit fits without ``y`` detect the namespace from the pairs alone
USES_Y = {"explicit", "explicit-minibatch", "wls", "wls-minibatch"}


def _fit(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, y)


@pytest.fixture(scope="module")
def numpy_fits():
    """The fits of the cases on the NumPy blocks (made once, on first use)."""
    return {}


def numpy_fit(numpy_fits, client, data, kernel_calls, case):
    if case not in numpy_fits:
        pairs, y, _, _ = data
        calls = len(kernel_calls)
        numpy_fits[case] = _fit(CASES[case](client), pairs, y if case in USES_Y else None)
        # NumPy blocks: the Numba kernels, on NumPy arrays
        assert len(kernel_calls) > calls and not any(any(c) for c in kernel_calls[calls:])
    return numpy_fits[case]


def assert_same_model(got, want, atol):
    for name in ("user_factors_", "item_factors_", "user_bias_", "item_bias_"):
        if hasattr(want, name):
            np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=0, atol=atol, err_msg=name)
    np.testing.assert_allclose(got.loss_curve_, want.loss_curve_, rtol=atol)
    np.testing.assert_array_equal(got.user_ids_, want.user_ids_)
    np.testing.assert_array_equal(got.item_ids_, want.item_ids_)
    assert (got._seen != want._seen).nnz == 0


def assert_numpy_attributes(est):
    """Every fitted array (optimizer states included) is NumPy: the model predicts on the host."""
    arrays = {name: v for name, v in vars(est).items() if name.endswith("_") and array_api_compat.is_array_api_obj(v)}
    assert {"user_factors_", "item_factors_"} <= set(arrays)
    for state in (est._user_state_, est._item_state_):
        arrays.update({f"state.{k}": v for k, v in state._asdict().items() if array_api_compat.is_array_api_obj(v)})
    for name, value in arrays.items():
        assert type(value) is np.ndarray, (name, type(value))


def blocks_of(client, result):
    """The computed blocks of a dask array, as they are (not concatenated)."""
    return client.gather(client.compute(list(result.to_delayed().ravel())))


@pytest.mark.parametrize("case", sorted(CASES))
def test_fit_on_strict_blocks_equals_numpy_fit(client, data, kernel_calls, numpy_fits, case):
    pairs, y, _, _ = data
    want = numpy_fit(numpy_fits, client, data, kernel_calls, case)
    kernel_calls.clear()
    got = _fit(CASES[case](client), on_array_api_strict(pairs), on_array_api_strict(y) if case in USES_Y else None)
    # every kernel call ran on the device: ratings, user factors and the item table
    assert kernel_calls and all(all(c) for c in kernel_calls), kernel_calls[:3]
    assert_same_model(got, want, atol=1e-10)
    assert_numpy_attributes(got)
    # predict on strict blocks: a dask array whose blocks stay on the device
    pred = got.predict(on_array_api_strict(pairs))
    assert isinstance(pred, da.Array) and pred.shape == (pairs.shape[0],)
    blocks = blocks_of(client, pred)
    assert len(blocks) == pairs.numblocks[0] and all(on_device(b) for b in blocks)
    expected = want.predict(pairs.compute())
    np.testing.assert_allclose(np.concatenate([to_numpy(b) for b in blocks]), expected, rtol=0, atol=1e-10)
    # ... and on NumPy blocks NumPy blocks, with the same scores from a NumPy array
    host = blocks_of(client, got.predict(pairs))
    assert all(type(b) is np.ndarray for b in host)
    np.testing.assert_allclose(np.concatenate(host), got.predict(pairs.compute()), rtol=0, atol=1e-12)


def test_partial_fit_on_strict_blocks_equals_numpy(client, data, kernel_calls):
    """Continued training sends the fitted user rows and optimizer state to the shards:
    they must land on the device (new users and items included)."""
    pairs, y, more_pairs, more_y = data
    fits = []
    for conv in (lambda a: a, on_array_api_strict):
        est = _fit(CASES["explicit-minibatch"](client), conv(pairs), conv(y))
        kernel_calls.clear()
        est.partial_fit(conv(more_pairs), conv(more_y))
        fits.append(est)
        assert kernel_calls and all(all(c) == (conv is on_array_api_strict) for c in kernel_calls)
    first = pairs.compute()
    assert len(fits[1].user_ids_) > np.unique(first[:, 0]).size  # new users
    assert len(fits[1].item_ids_) > np.unique(first[:, 1]).size  # and new items
    assert_same_model(fits[1], fits[0], atol=1e-10)
    assert_numpy_attributes(fits[1])


def test_numpy_pairs_with_strict_ratings_train_on_the_device(client, data, kernel_calls, numpy_fits):
    """The device is taken from whichever input's blocks are not NumPy."""
    pairs, y, _, _ = data
    want = numpy_fit(numpy_fits, client, data, kernel_calls, "explicit")
    kernel_calls.clear()
    got = _fit(CASES["explicit"](client), pairs, on_array_api_strict(y))
    assert kernel_calls and all(all(c) for c in kernel_calls)
    assert_same_model(got, want, atol=1e-10)


def test_recommend_and_similar_items_take_device_ids(client, data, kernel_calls, numpy_fits):
    """Ids given as device arrays are looked up on the host, same answers."""
    est = numpy_fit(numpy_fits, client, data, kernel_calls, "explicit")
    users = np.asarray(est.user_ids_[:3])
    items = np.asarray(est.item_ids_[:2])
    for method, ids in (("recommend", users), ("similar_items", items)):
        want = getattr(est, method)(ids, k=4)
        got = getattr(est, method)(xps.asarray(ids, device=xps.Device(STRICT_DEVICE)), k=4)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
