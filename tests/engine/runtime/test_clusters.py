"""The clusters dask_dgd starts run without the workers' statistical profiler where the
interpreter can deadlock on it (CPython 3.11 before 3.11.9, gh-106883: see
:mod:`dask_dgd._engine.runtime.clusters`), and with it everywhere else.

The deadlock itself is CPython's and needs a garbage collection at one instant of the
profiler's call; ``benchmarks/profiler_deadlock.py`` provokes it.  These tests check
that the setting reaches the workers: in-process workers, a nanny's worker process and
``dask worker`` commands.
"""

import logging
import os
import subprocess
import sys

import dask
import pytest
from distributed import Client

from dask_dgd._engine.runtime import clusters
from dask_dgd.testing import process_cluster


def _profiling(client):
    """Whether each worker of ``client``'s cluster runs distributed's profiler."""
    return set(client.run(lambda dask_worker: "profile" in dask_worker.periodic_callbacks).values())


@pytest.mark.parametrize("affected", [True, False])
def test_local_cluster_turns_the_profiler_off_only_where_it_deadlocks(monkeypatch, affected):
    monkeypatch.setattr(clusters, "PROFILER_DEADLOCKS", affected)
    # (the suite runs its own clusters without the profiler on this interpreter: Dask's
    # default here, so that the library's setting is what the test sees)
    with dask.config.set({"distributed.worker.profile.enabled": True}), \
            clusters.local_cluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0",
                                   silence_logs=logging.ERROR) as cluster, \
            Client(cluster, set_as_default=False) as client:
        assert _profiling(client) == {not affected}


@pytest.mark.slow
def test_a_nannys_worker_process_gets_the_setting(monkeypatch):
    monkeypatch.setattr(clusters, "PROFILER_DEADLOCKS", True)
    with dask.config.set({"distributed.worker.profile.enabled": True}), \
            clusters.local_cluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0",
                                   silence_logs=logging.ERROR) as cluster, \
            Client(cluster, set_as_default=False) as client:
        assert _profiling(client) == {False}


@pytest.mark.parametrize("affected", [True, False])
def test_the_environment_of_worker_commands_carries_the_setting(monkeypatch, affected):
    monkeypatch.setattr(clusters, "PROFILER_DEADLOCKS", affected)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    env.update(clusters.cluster_env())
    assert bool(clusters.cluster_env()) == affected
    read = subprocess.run([sys.executable, "-c", "import dask, distributed; "
                           "print(dask.config.get('distributed.worker.profile.enabled'))"],
                          env=env, capture_output=True, text=True, timeout=120, check=True)
    assert read.stdout.strip() == str(not affected)


@pytest.mark.slow
def test_process_cluster_workers_follow_the_interpreter(tmp_path):
    """``dask worker`` commands started by :func:`dask_dgd.testing.process_cluster`: no
    profiler on an affected interpreter, Dask's default (on) elsewhere."""
    with process_cluster(1, log_dir=tmp_path) as client:
        assert _profiling(client) == {not clusters.PROFILER_DEADLOCKS}
