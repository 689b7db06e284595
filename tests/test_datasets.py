"""dask_dgd.datasets: shapes, determinism, laziness, the true model, and errors."""

import dask
import dask.array as da
import numpy as np
import pytest

from dask_dgd.datasets import make_classification, make_poisson, make_regression
from dask_dgd.exceptions import ParameterError

GENERATORS = [make_regression, make_classification, make_poisson]


@pytest.mark.parametrize("make", GENERATORS)
def test_numpy_shapes_and_dtypes(make):
    X, y, coef = make(300, 4, return_coef=True)
    assert isinstance(X, np.ndarray) and isinstance(y, np.ndarray)
    assert X.shape == (300, 4) and y.shape == (300,) and coef.shape == (4,)
    assert X.dtype == np.float64
    assert y.dtype == (np.int64 if make is make_classification else np.float64)


@pytest.mark.parametrize("make", GENERATORS)
def test_float32(make):
    X, y = make(50, 3, dtype=np.float32)
    assert X.dtype == np.float32
    assert y.dtype == (np.int64 if make is make_classification else np.float32)


@pytest.mark.parametrize("make", GENERATORS)
def test_same_seed_same_data_other_seed_other_data(make):
    X1, y1 = make(200, 3, random_state=7)
    X2, y2 = make(200, 3, random_state=7)
    X3, _ = make(200, 3, random_state=8)
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)
    assert not np.array_equal(X1, X3)


@pytest.mark.parametrize("make", GENERATORS)
def test_dask_is_lazy_and_chunked(make, monkeypatch):
    import dask_dgd.datasets as mod

    calls = []
    original = mod._block

    def counting(*args):
        calls.append(args[2])
        return original(*args)

    monkeypatch.setattr(mod, "_block", counting)
    X, y = make(1000, 5, chunks=300, random_state=3)
    assert calls == []  # nothing generated yet
    assert isinstance(X, da.Array) and isinstance(y, da.Array)
    assert X.chunks == ((300, 300, 300, 100), (5,))
    assert y.chunks == ((300, 300, 300, 100),)
    X.blocks[2].compute(scheduler="sync")
    assert calls == [2]  # only the block asked for
    calls.clear()
    Xc, yc = dask.compute(X, y, scheduler="sync")
    assert sorted(calls) == [0, 1, 2, 3]  # one task per block makes both X and y
    assert Xc.shape == (1000, 5) and yc.shape == (1000,)


@pytest.mark.parametrize("make", GENERATORS)
def test_dask_deterministic_for_seed_and_chunks(make):
    X1, y1 = make(500, 3, chunks=(100, 250, 150), random_state=1)
    X2, y2 = make(500, 3, chunks=(100, 250, 150), random_state=1)
    assert X1.name == X2.name and y1.name == y2.name
    a = dask.compute(X1, y1, scheduler="threads")
    b = dask.compute(X2, y2, scheduler="sync")
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    # Blocks are independent of each other: computing one alone gives the same rows.
    np.testing.assert_array_equal(X1.blocks[1].compute(), a[0][100:350])


@pytest.mark.parametrize("make", GENERATORS)
def test_single_chunk_equals_numpy(make):
    X, y = make(120, 2, random_state=5)
    Xd, yd = make(120, 2, chunks=120, random_state=5)
    np.testing.assert_array_equal(X, Xd.compute())
    np.testing.assert_array_equal(y, yd.compute())


def test_coef_does_not_depend_on_chunks():
    *_, c1 = make_regression(100, 6, chunks=10, return_coef=True, random_state=2)
    *_, c2 = make_regression(100, 6, return_coef=True, random_state=2)
    np.testing.assert_array_equal(c1, c2)
    assert np.linalg.norm(c1) == pytest.approx(1.0)


def test_regression_follows_the_model():
    X, y, coef = make_regression(4000, 3, noise=0.5, intercept=2.0, return_coef=True)
    residual = y - X @ coef - 2.0
    assert abs(residual.mean()) < 0.05
    assert residual.std() == pytest.approx(0.5, rel=0.05)
    X, y, coef = make_regression(50, 3, noise=0.0, signal=4.0, return_coef=True)
    np.testing.assert_allclose(y, X @ coef)
    assert np.linalg.norm(coef) == pytest.approx(4.0)


def test_binary_classification_follows_the_model():
    X, y, coef = make_classification(20000, 3, intercept=1.0, return_coef=True)
    assert set(np.unique(y)) == {0, 1}
    p = 1.0 / (1.0 + np.exp(-(X @ coef + 1.0)))
    assert y.mean() == pytest.approx(p.mean(), abs=0.02)
    # Within a band of predicted probability, the observed frequency matches.
    band = (p > 0.6) & (p < 0.7)
    assert y[band].mean() == pytest.approx(0.65, abs=0.04)


def test_multiclass_labels_and_coef_shape():
    X, y, coef = make_classification(3000, 4, n_classes=4, return_coef=True, chunks=1000)
    assert coef.shape == (4, 4)
    np.testing.assert_allclose(np.linalg.norm(coef, axis=1), 3.0)
    labels = np.unique(y.compute())
    np.testing.assert_array_equal(labels, [0, 1, 2, 3])
    # The most likely class is the most frequent label.
    Xc, yc = dask.compute(X, y)
    assert (np.argmax(Xc @ coef.T, axis=1) == yc).mean() > 0.5


def test_poisson_counts_follow_the_model():
    X, y, coef = make_poisson(20000, 3, intercept=1.0, return_coef=True)
    assert np.all(y >= 0) and np.all(y == np.round(y))
    mu = np.exp(X @ coef + 1.0)
    assert y.mean() == pytest.approx(mu.mean(), rel=0.03)


def test_random_state_objects_and_none():
    X1, _ = make_regression(10, 2, random_state=np.random.RandomState(0))
    X2, _ = make_regression(10, 2, random_state=np.random.RandomState(0))
    np.testing.assert_array_equal(X1, X2)
    X3, _ = make_regression(10, 2, random_state=np.random.default_rng(0))
    assert X3.shape == (10, 2)
    # None: a fresh seed, but a dask result is still consistent with itself.
    X, _ = make_regression(100, 2, chunks=30, random_state=None)
    np.testing.assert_array_equal(X.compute(), X.compute())


def test_chunks_larger_than_n_samples():
    X, y = make_regression(10, 2, chunks=1000)
    assert X.chunks == ((10,), (2,))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"n_samples": 0}, r"n_samples must be an int >= 1; got 0"),
        ({"n_samples": 10.5}, r"n_samples must be an int >= 1; got 10.5"),
        ({"n_features": 0}, r"n_features must be an int >= 1; got 0; pass the number"),
        ({"noise": -1.0}, r"noise must be a finite float >= 0.0; got -1.0; pass e.g. noise=1.0"),
        ({"signal": float("nan")}, r"signal must be a finite float >= 0.0; got nan"),
        ({"intercept": "1"}, r"intercept must be a finite float; got '1'"),
        ({"chunks": 0}, r"chunks must be a positive number of rows per block; got 0; pass e.g. chunks=25"),
        ({"chunks": (50, 40)}, r"add up to 90 rows, but n_samples is 100"),
        ({"chunks": (50, -50, 100)}, r"chunks must contain only positive ints"),
        ({"chunks": (25, 4)}, r"add up to 29 rows"),
        ({"chunks": "auto"}, r"chunks must be None, an int \(rows per block\).*got 'auto'"),
        ({"random_state": -1}, r"random_state must be an int >= 0; got -1; pass e.g. random_state=0"),
        ({"random_state": "seed"}, r"random_state must be an int >= 0, None.*got 'seed' of type str"),
        ({"dtype": np.int64}, r"dtype must be float32 or float64; got int64"),
        ({"return_coef": 1}, r"return_coef must be True or False; got 1"),
    ],
)
def test_bad_arguments(kwargs, match):
    kwargs = {"n_samples": 100, "n_features": 3, **kwargs}
    with pytest.raises(ParameterError, match=match):
        make_regression(**kwargs)


def test_bad_n_classes():
    with pytest.raises(ParameterError, match=r"n_classes must be an int >= 2; got 1; a classification"):
        make_classification(100, 3, n_classes=1)


def test_parameter_error_is_a_value_error():
    with pytest.raises(ValueError):
        make_poisson(-5, 3)
