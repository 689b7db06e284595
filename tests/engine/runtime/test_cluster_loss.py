"""Losing what a fit cannot survive: the scheduler, or a matrix factorization's worker.

Each loss is triggered by progress, never by a clock: a fit callback kills the scheduler
process at step k, or a worker kills itself at its n-th group computation
(:func:`dask_dgd.testing.killing_worker`).  The fit must stop with a
:class:`~dask_dgd.exceptions.ClusterError` that says what was lost and what to do, never
with a raw ``RuntimeError``/``OSError`` from the connection, nor with advice that is
wrong for the case.
"""

import logging
import os
import shutil
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from distributed import Client
from distributed.diagnostics.plugin import SchedulerPlugin
from processes import wait_for_file

from dask_dgd import LogisticRegression, MatrixFactorization
from dask_dgd.datasets import make_ratings
from dask_dgd.exceptions import ClusterError
from dask_dgd.testing import killing_worker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

REPO = str(Path(__file__).resolve().parents[3])


# ------------------------------------------------------------------ the scheduler
@pytest.fixture
def scheduler_cluster(tmp_path):
    """A `dask scheduler` process (a free port, its address in a scheduler file) and two
    single-threaded `dask worker` processes; yields ``(client, scheduler process)``.  Every
    process is stopped at the end, whatever the test did to it."""
    dask_cmd = shutil.which("dask", path=os.path.dirname(sys.executable)) or shutil.which("dask")
    if dask_cmd is None:
        pytest.skip("the `dask` command is not installed")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)}
    scheduler_file = tmp_path / "scheduler.json"
    procs, client = [], None
    log = open(tmp_path / "cluster.log", "w")
    try:
        scheduler = subprocess.Popen(
            [dask_cmd, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--scheduler-file", str(scheduler_file)], stdout=log, stderr=subprocess.STDOUT, env=env)
        procs.append(scheduler)
        wait_for_file(scheduler, scheduler_file, "scheduler")
        procs.append(subprocess.Popen(
            [dask_cmd, "worker", "--scheduler-file", str(scheduler_file), "--nworkers", "2", "--nthreads", "1",
             "--no-dashboard", "--local-directory", str(tmp_path)], stdout=log, stderr=subprocess.STDOUT, env=env))
        client = Client(scheduler_file=str(scheduler_file), timeout="20s", set_as_default=False)
        client.wait_for_workers(2, timeout=120)
        yield client, scheduler
    finally:
        if client is not None:
            try:
                client.close(timeout=10)
            except Exception:  # noqa: BLE001 - its scheduler is gone
                pass
        for proc in procs[::-1]:
            if proc.poll() is None:
                proc.kill()
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass
        log.close()


class _KillScheduler:
    """A fit callback that SIGKILLs the scheduler process once the fit reaches ``step``."""

    def __init__(self, proc, step):
        self.proc, self.step, self.killed_at = proc, step, None

    def __call__(self, record):
        if self.killed_at is None and record["step"] >= self.step:
            self.killed_at = record["step"]
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=60)
        return False


@pytest.mark.parametrize("mode", ["sync", "local", "async"])
def test_losing_the_scheduler_mid_fit_is_a_cluster_error_that_says_so(scheduler_cluster, mode):
    client, scheduler = scheduler_cluster
    address = client.scheduler.address
    rng = np.random.default_rng(0)
    X = rng.standard_normal((20_000, 5))
    y = (X[:, 0] - X[:, 1] > 0).astype(float)
    Xd, yd = da.from_array(X, chunks=(2500, -1)), da.from_array(y, chunks=2500)
    kill = _KillScheduler(scheduler, step=5)
    est = LogisticRegression(client=client, solver="gd", mode=mode, max_iter=1_000_000, tol=0.0, learning_rate=0.01,
                             callbacks=[kill])
    # the client gives up reconnecting after its connect timeout: a short one keeps the test quick
    with dask.config.set({"distributed.comm.timeouts.connect": "5s"}), pytest.raises(ClusterError) as info:
        est.fit(Xd, yd)
    assert kill.killed_at is not None
    message = str(info.value)
    assert f"lost the connection to the Dask scheduler at {address}" in message, message
    assert "has no workers" not in message
    step = int(message.split("the fit stopped at step ")[1].split()[0].rstrip(":;,."))
    assert step >= kill.killed_at
    assert "Restart the scheduler and its workers" in message
    assert "checkpoint=" in message and "resume=True" in message


# ------------------------------------------------- a matrix factorization's worker
@pytest.fixture  # a fresh cluster per case: never waits for a nanny to replace a killed worker
def process_client(make_cluster):
    return make_cluster(2, silence_logs=logging.CRITICAL)


@pytest.fixture(scope="module")
def ratings():
    return make_ratings(300, 150, 12000, rank=3, noise=0.1, random_state=0)[0]


@pytest.mark.parametrize("source", ["dask", "pandas"])
def test_a_lost_matrix_factorization_worker_says_what_was_lost_and_what_to_do(process_client, ratings, source):
    victim = sorted(process_client.scheduler_info()["workers"])[-1]
    X = dd.from_pandas(ratings, npartitions=4) if source == "dask" else ratings
    # (a fixed alpha: with alpha="auto" the penalty path's fits run whole in tasks, and a
    # worker lost there costs only its task, which runs again elsewhere)
    mf = MatrixFactorization(n_components=3, alpha=0.05, max_iter=60, tol=0, random_state=0, client=process_client)
    with killing_worker(process_client, victim, after=5), pytest.raises(ClusterError) as info, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mf.fit(X)
    message = str(info.value)
    assert victim in message, message
    assert "in-memory" not in message and "scattered" not in message and "dask array" not in message, message
    assert "user factors" in message and "only on their worker" in message, message
    assert "cannot be recovered" in message
    assert "checkpoint=" in message and "resume=True" in message



class _OnlyReplicaOn(SchedulerPlugin):
    """Once the penalty path's copies of the held-out split are all in memory, every other
    worker drops its replica of the scattered data ``victim`` holds (as Dask's active
    memory manager does on its own, on a clock): the victim then holds the only copy of
    a piece of the pandas frame, which Dask cannot recompute.  ``dropped``: those keys."""

    name = "only-replica-on"

    def __init__(self, scheduler, victim):
        self.scheduler, self.victim, self.dropped = scheduler, victim, []

    def transition(self, key, start, finish, *args, **kwargs):
        if finish != "memory" or not str(key).startswith("dgd-mf-path-copy") or self.dropped:
            return
        copies = [ts for k, ts in self.scheduler.tasks.items() if str(k).startswith("dgd-mf-path-copy")]
        if any(ts.state != "memory" for ts in copies):
            return
        for ts in list(self.scheduler.tasks.values()):
            holders = {ws.address for ws in ts.who_has or ()}
            if ts.run_spec is None and ts.state == "memory" and self.victim in holders and len(holders) > 1:
                for other in holders - {self.victim}:
                    self.scheduler.request_remove_replicas(other, [ts.key], stimulus_id="test-only-replica")
                self.dropped.append(ts.key)


@pytest.mark.parametrize("only_copy", [False, True], ids=["replicas-kept", "only-copy-lost"])
def test_a_worker_lost_during_the_penalty_path_costs_only_its_task(process_client, ratings, only_copy):
    # alpha="auto" on worker processes: each path fit is one task on a copy of the
    # held-out shards; the worker killed inside one takes its copy along, and the model
    # is the one a fit without the fault makes, to rounding (the shards recomputed after
    # the loss may sit in other groups: the same sums in another order).  The copy is
    # made again elsewhere from the frame's pieces: by Dask when another worker still
    # holds them ("replicas-kept"), or, when the lost worker held the only copy of a
    # piece ("only-copy-lost", which Dask's memory manager brings about on its own
    # clock), from the pieces this process sends again
    victim = sorted(process_client.scheduler_info()["workers"])[-1]
    plugin = _OnlyReplicaOn(process_client.cluster.scheduler, victim)
    if only_copy:
        process_client.cluster.scheduler.add_plugin(plugin)

    def fit():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return MatrixFactorization(n_components=3, max_iter=30, random_state=0, client=process_client).fit(ratings)

    with killing_worker(process_client, victim, after=5):
        hit = fit()
    assert victim not in process_client.scheduler_info()["workers"]  # (it died: the fault fired)
    assert bool(plugin.dropped) == only_copy  # (and the only copy of a piece went with it)
    if only_copy:
        process_client.cluster.scheduler.remove_plugin(plugin.name)
    clean = fit()
    pd.testing.assert_frame_equal(hit.validation_path_, clean.validation_path_, check_exact=False, rtol=1e-9)
    assert hit.alpha_ == clean.alpha_
    np.testing.assert_allclose(hit.item_factors_, clean.item_factors_, rtol=1e-7, atol=1e-10)
    np.testing.assert_allclose(hit.user_factors_, clean.user_factors_, rtol=1e-7, atol=1e-10)
