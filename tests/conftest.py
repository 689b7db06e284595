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


@pytest.fixture
def bars(monkeypatch):
    """Every tqdm bar opened (``tqdm.auto.tqdm``), each with ``shown`` (not disabled when
    opened; tqdm disables a bar when closing it) and ``closed_at``: its position when it
    was closed (None while open)."""
    import tqdm.auto

    opened = []

    class Recorded(tqdm.auto.tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.shown, self.closed_at = not self.disable, None
            opened.append(self)

        def close(self):
            if self.closed_at is None:
                self.closed_at = self.n
            super().close()

    monkeypatch.setattr(tqdm.auto, "tqdm", Recorded)
    return opened


@pytest.fixture(scope="session", autouse=True)
def _close_the_embedded_cluster():
    """Close dask_dgd's embedded cluster (if a test started it) while pytest's streams are
    still open: at interpreter exit its scheduler would log to a closed capture stream."""
    yield
    from dask_dgd._engine.executor import _close_embedded

    _close_embedded()
