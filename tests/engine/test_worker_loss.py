"""A worker process killed in the middle of a fit: the fit finishes, unchanged.

A LocalCluster of process workers (with nannies, which start a fresh worker after the
kill); the victim is killed by its pid from a thread, half-way through the time an
undisturbed fit takes.
"""

import logging
import os
import signal
import threading
import time
import warnings

import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster

from dask_dgd import ConvergenceWarning, LogisticRegression

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def process_client():
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=logging.CRITICAL) as cluster, Client(cluster, set_as_default=False) as client:
        yield client


@pytest.fixture(scope="module")
def data(process_client):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((150_000, 10))
    y = (X[:, 0] - X[:, 1] + rng.standard_normal(150_000) > 0).astype(float)
    Xd, yd = process_client.persist([da.from_array(X, chunks=(12_500, -1)), da.from_array(y, chunks=12_500)])
    return X, y, Xd, yd


def _fit(client, Xd, yd, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return LogisticRegression(client=client, **{"solver": "gd", "tol": 0.0, "max_iter": 60, **kw}).fit(Xd, yd)


def _fit_killing_a_worker(client, Xd, yd, after, caplog, **kw):
    victim = sorted(client.scheduler_info()["workers"])[-1]
    pid = client.run(os.getpid, workers=[victim])[victim]

    def kill():
        time.sleep(after)
        os.kill(pid, signal.SIGKILL)

    killer = threading.Thread(target=kill)
    with caplog.at_level(logging.WARNING, logger="dask_dgd"):
        killer.start()
        est = _fit(client, Xd, yd, **kw)
        killer.join()
    assert any("lost worker(s)" in r.getMessage() and victim in r.getMessage() for r in caplog.records)
    client.wait_for_workers(3, timeout=60)  # the nanny starts a fresh worker
    return est


def test_sync_fit_survives_a_killed_worker_with_the_same_coefficients(process_client, data, caplog):
    _, _, Xd, yd = data
    ref = _fit(process_client, Xd, yd)
    est = _fit_killing_a_worker(process_client, Xd, yd, ref.history_["time"].iloc[-1] / 2, caplog)
    # the sums follow the block tree: the retried step and all after it are unchanged
    np.testing.assert_array_equal(est.coef_, ref.coef_)
    np.testing.assert_array_equal(est.intercept_, ref.intercept_)


def test_compressed_fit_survives_with_fresh_residuals(process_client, data, caplog):
    X, y, Xd, yd = data
    ref = _fit(process_client, Xd, yd, compression="topk:0.2")
    est = _fit_killing_a_worker(process_client, Xd, yd, ref.history_["time"].iloc[-1] / 2, caplog,
                                compression="topk:0.2")

    def objective(m):
        z = X @ m.coef_[0] + m.intercept_[0]
        return np.mean(np.logaddexp(0, z) - y * z) + 0.5e-4 * m.coef_[0] @ m.coef_[0]

    # the residuals restart from zero (nothing is corrupted): the fit still converges
    assert np.all(np.isfinite(est.coef_))
    assert abs(objective(est) - objective(ref)) < 1e-3
    assert (est.history_["bytes_up"] < est.history_["bytes_up_raw"]).all()


def test_scattered_input_cannot_survive_and_says_why(process_client, data):
    X, y, _, _ = data
    t0 = time.perf_counter()
    _fit(process_client, X, y, max_iter=1)  # how long the setup (scatter) takes
    setup = time.perf_counter() - t0
    victim = sorted(process_client.scheduler_info()["workers"])[-1]
    pid = process_client.run(os.getpid, workers=[victim])[victim]
    killer = threading.Timer(setup + 1.0, os.kill, (pid, signal.SIGKILL))
    killer.start()
    from dask_dgd.exceptions import ClusterError

    est = LogisticRegression(client=process_client, solver="gd", tol=0.0, max_iter=100_000)
    with pytest.raises(ClusterError, match=r"cannot be recomputed .* pass a dask array"):
        est.fit(X, y)  # in-memory input: scattered to the workers, nowhere else to recompute it from
    killer.join()
    process_client.wait_for_workers(3, timeout=60)
