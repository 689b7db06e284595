"""The driver's BLAS keeps to one thread during a fit on a cluster of this machine."""

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from dask_dgd._engine.runtime.threads import driver_blas, workers_share_machine


def _blas_threads():
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


@pytest.mark.parametrize("addresses, expected", [
    (["tcp://127.0.0.1:4000"], True),
    (["inproc://10.1.2.3/1234/1"], False),  # (a worker in this process: its BLAS is the fit's compute)
    (["tcp://localhost:4000"], True),
    ([None, "tcp://[::1]:4000"], True),
    (["tcp://203.0.113.7:4000", "tls://198.51.100.2:8786"], False),  # documentation addresses
    ([None], False),
    ([], False),
])
def test_workers_share_machine(addresses, expected):
    assert workers_share_machine(addresses) is expected


def test_driver_blas_limits_only_a_cluster_on_this_machine():
    before = _blas_threads()
    if not before or max(before) == 1:
        pytest.skip("NumPy's BLAS is single-threaded already (or not one threadpoolctl controls)")
    with driver_blas("dask", ["tcp://127.0.0.1:4000"]):
        assert _blas_threads() == [1] * len(before)
    assert _blas_threads() == before
    with driver_blas("in-process", [None]):
        assert _blas_threads() == before
    with driver_blas("dask", ["tcp://203.0.113.7:4000"]):
        assert _blas_threads() == before


def test_driver_blas_restores_the_limits_after_an_error():
    before = _blas_threads()
    with pytest.raises(ZeroDivisionError), driver_blas("dask", ["tcp://127.0.0.1:1"]):
        raise ZeroDivisionError("inside the fit")
    assert _blas_threads() == before


def test_fits_side_by_side_keep_the_limit_until_the_last_ends():
    # fits in threads of one process: the first to start limits, the last to end
    # restores (not the first to end: the other fit still runs)
    before = _blas_threads()
    if not before or max(before) == 1:
        pytest.skip("NumPy's BLAS is single-threaded already (or not one threadpoolctl controls)")
    first, second = driver_blas("dask", ["tcp://127.0.0.1:1"]), driver_blas("dask", ["tcp://127.0.0.1:2"])
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert _blas_threads() == [1] * len(before)
    second.__exit__(None, None, None)
    assert _blas_threads() == before


@pytest.mark.slow
def test_a_fit_on_a_local_cluster_runs_with_one_blas_thread_and_restores_them(client, make_cluster):
    """The step records are made during the loop: the callback sees the limit (worker
    processes of this machine) or the threads as they were (workers in this process)."""
    import dask.array as da

    from dask_dgd import LogisticRegression

    before = _blas_threads()
    if not before or max(before) == 1:
        pytest.skip("NumPy's BLAS is single-threaded already (or not one threadpoolctl controls)")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 5))
    y = (X[:, 0] > 0).astype(float)
    for on, expected in ((make_cluster(2), [1] * len(before)), (client, before)):
        seen = []
        LogisticRegression(solver="lbfgs", max_iter=3, client=on,
                           callbacks=[lambda record, into=seen: into.append(_blas_threads())]).fit(
            da.from_array(X, chunks=100), da.from_array(y, chunks=100))
        assert seen and all(t == expected for t in seen)
        assert _blas_threads() == before
