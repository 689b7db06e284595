"""Shared fixtures: one LocalCluster (2 workers, 1 thread each) for the session (of each
pytest-xdist worker), and ``make_cluster`` / ``make_module_cluster`` for a test's (or a
module's) own cluster."""

import contextlib
import logging
import os

import dask
import numpy as np
import pytest
from distributed import Client, LocalCluster

from dask_dgd._engine.runtime.clusters import cluster_config

#: At most this many pytest-xdist workers for ``-n auto``: each holds LocalClusters (some of
#: several worker processes), so many more would cost memory rather than save time.
MAX_TEST_PROCESSES = 8


#: What a worker process imports to run the library's tasks, imported once per test process
#: by the forkserver that every worker process is then forked from.
_WORKER_PRELOAD = ("dask_dgd.linear_model", "dask_dgd.recommender", "dask_dgd.climate", "dask_dgd.losses._rowloss",
                   "dask_dgd._engine.train", "sparse", "numba")


def _forked_worker_processes():
    """Worker processes (LocalCluster(processes=True), and the fresh worker a nanny starts
    after a kill) forked from a server that has imported the library, as distributed's own
    test suite does (Dask's ``multiprocessing-method: forkserver``), not spawned.

    A spawned worker imports the library's task code (scikit-learn, SciPy, pandas,
    Numba: about 3 s of CPU) before its first task: the 3 worker processes of every fault
    test, and each victim's replacement, cost the suite minutes of CPU on 2 cores without
    testing anything.  The worker processes, their nannies, the kills and the restarts
    are Dask's own; only how a fresh process gets its imports differs.  Clusters of
    ``dask worker`` processes (started as commands) are not affected.

    A forked worker inherits the server's environment variables, set when the first
    worker process of the test process started, not the test's: a test that needs a
    variable in its workers passes it as Dask config (``make_cluster(config=...)``, sent
    by the nanny) or starts its processes as commands."""
    import multiprocessing.forkserver

    from distributed.utils import get_mp_context

    dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"})
    context = get_mp_context()  # distributed sets its own preload (distributed, numpy, pandas, ...) once ...
    preload = list(multiprocessing.forkserver._forkserver._preload_modules)
    context.set_forkserver_preload(preload + [m for m in _WORKER_PRELOAD if m not in preload])  # ... extended


_forked_worker_processes()

# Every cluster of the suite (in-process workers, nannies' worker processes) without the
# workers' statistical profiler where the interpreter can deadlock on it (CPython 3.11
# before 3.11.9, gh-106883: see dask_dgd._engine.runtime.clusters); the clusters the
# library starts itself get the same setting from the library.
dask.config.set(cluster_config())


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (in the addopts): one test process per core this process may use, at
    most :data:`MAX_TEST_PROCESSES`."""
    return max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
                      MAX_TEST_PROCESSES))


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


_LOCALCLUSTER_DEFAULT = object()


class _ClusterFactory:
    """``make_cluster(n_workers=2, processes=True, memory_limit=..., config=None,
    silence_logs=logging.ERROR, **kwargs)``: a LocalCluster (1 thread per worker, a
    dashboard on a free port, ``config`` set while it is created: read by the scheduler
    and the workers when they start) and a Client to it (not the default client),
    returned.  ``client.cluster`` is the cluster.  All are closed at the fixture's end.
    Without ``memory_limit``, LocalCluster's own default (the machine's memory shared by
    the workers; an explicit "auto" would give each worker a share by threads instead)."""

    def __init__(self):
        self._opened = []

    def __call__(self, n_workers=2, *, processes=True, memory_limit=_LOCALCLUSTER_DEFAULT, config=None,
                 silence_logs=logging.ERROR, **kwargs):
        kwargs = {"threads_per_worker": 1, "dashboard_address": ":0", **kwargs}
        if memory_limit is not _LOCALCLUSTER_DEFAULT:
            kwargs["memory_limit"] = memory_limit
        with dask.config.set(config or {}):
            cluster = LocalCluster(n_workers=n_workers, processes=processes, silence_logs=silence_logs, **kwargs)
        self._opened.append(cluster)
        client = Client(cluster, set_as_default=False)
        self._opened.append(client)
        return client

    def close(self):
        """Worker processes still stopped (SIGSTOP) are killed (by their ids, children
        of this process); then the clients and clusters are closed, the last first."""
        if not self._opened:
            return
        import psutil

        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if child.status() == psutil.STATUS_STOPPED:
                    child.kill()
        while self._opened:
            # distributed's LocalCluster may trip on its record of a worker a test killed
            # or removed (KeyError in _update_worker_status) while closing: seen in CI
            with contextlib.suppress(KeyError):
                self._opened.pop().close()


@pytest.fixture
def make_cluster():
    """A factory of the test's own clusters (see ``_ClusterFactory``), closed at its end."""
    factory = _ClusterFactory()
    try:
        yield factory
    finally:
        factory.close()


@pytest.fixture(scope="module")
def make_module_cluster():
    """``make_cluster`` for module-scoped fixtures: the clusters live until the module ends."""
    factory = _ClusterFactory()
    try:
        yield factory
    finally:
        factory.close()


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
    from dask_dgd._engine.runtime.executor import _close_embedded

    _close_embedded()
