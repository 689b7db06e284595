"""Fixtures of the engine's fault tests."""

import contextlib
import logging

import pytest
from distributed import Client, LocalCluster


@pytest.fixture
def process_client():
    """A fresh cluster of 3 worker processes (with nannies) for every test that kills or
    freezes a worker: whether and when a nanny brings back an earlier test's victim is
    Dask's business and the machine's load (a CI run under load once waited more than 3
    minutes for it), not these tests'.  Worker processes still stopped (SIGSTOP) at the
    end are killed (by their ids, children of this process)."""
    import psutil

    cluster = LocalCluster(n_workers=3, threads_per_worker=1, processes=True, dashboard_address=":0",
                           silence_logs=logging.CRITICAL)
    try:
        with Client(cluster, set_as_default=False) as client:
            yield client
    finally:
        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if child.status() == psutil.STATUS_STOPPED:
                    child.kill()
        # distributed's LocalCluster may trip on its record of a worker these tests
        # killed (KeyError in _update_worker_status) while closing: seen once in CI
        with contextlib.suppress(KeyError):
            cluster.close()
