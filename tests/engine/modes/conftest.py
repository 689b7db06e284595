"""Data the mode tests share: a logistic problem persisted on the test cluster."""

import dask.array as da
import numpy as np
import pytest


@pytest.fixture(scope="module")
def dask_data(client):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((8000, 6))
    w = np.array([1.0, -2.0, 0.5, 0.0, 1.5, -0.5])
    y = (rng.random(8000) < 1 / (1 + np.exp(-(X @ w + 0.3)))).astype(np.float64)
    Xd, yd = client.persist([da.from_array(X, chunks=1000), da.from_array(y, chunks=1000)])
    return X, y, Xd, yd
