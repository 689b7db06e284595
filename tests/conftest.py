"""Shared fixtures: one LocalCluster (2 workers, 1 thread each) for the session."""

import logging

import numpy as np
import pytest
from distributed import Client, LocalCluster


@pytest.fixture(scope="session")
def cluster():
    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=False,
        dashboard_address=":0",
        silence_logs=logging.ERROR,
    ) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def client(cluster):
    with Client(cluster, set_as_default=False) as client:
        yield client


@pytest.fixture
def logistic_data():
    """A non-separable binary problem with a known model."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2000, 6))
    w = np.array([1.0, -2.0, 0.5, 0.0, 1.5, -0.5])
    p = 1 / (1 + np.exp(-(X @ w + 0.3)))
    y = (rng.random(2000) < p).astype(np.int64)
    return X, y
