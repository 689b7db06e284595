"""The up-front memory check: a fit whose per-worker share of the data exceeds the
workers' memory limit is refused, with the numbers and the fix, before any transfer.

The clusters here are in-process (``processes=False``) with a 16 MiB memory limit per
worker.  Their memory monitors would measure the whole test process (far above 16 MiB)
and pause the workers, so spilling and pausing are switched off while the workers are
created; the check itself reads the default fractions (pause at 80%: 12.8 MiB).
"""

import logging

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from dask_dgd import LinearRegression, MatrixFactorization
from dask_dgd.exceptions import ClusterError

QUIET_WORKERS = {
    "distributed.worker.memory.target": False,
    "distributed.worker.memory.spill": False,
    "distributed.worker.memory.pause": False,
}


@pytest.fixture(scope="module")
def small(make_module_cluster):
    """A client of two workers with a 16 MiB memory limit each."""
    return make_module_cluster(2, processes=False, memory_limit="16 MiB", config=QUIET_WORKERS)


@pytest.fixture(scope="module")
def unlimited(make_module_cluster):
    """A client of two workers without a memory limit."""
    return make_module_cluster(2, processes=False, memory_limit=0, config=QUIET_WORKERS)


def _transitions(client):
    return client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.transition_counter)


def _nothing_held(client):
    return all(not keys for keys in client.has_what().values())


def _ratings(n, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "user": rng.integers(0, n // 20, n),
        "item": rng.integers(0, 5000, n),
        "rating": rng.normal(3.5, 1.0, n),
    })


# ----------------------------------------------------------------- the threshold
def test_the_line_is_where_dask_pauses_or_kills_a_worker():
    from dask_dgd._engine.data.memory import memory_line

    assert memory_line() == (0.8, "pause")
    with dask.config.set({"distributed.worker.memory.pause": False}):
        assert memory_line() == (0.95, "terminate")
    with dask.config.set({"distributed.worker.memory.pause": 0.99}):
        assert memory_line() == (0.95, "terminate")
    with dask.config.set({"distributed.worker.memory.pause": False, "distributed.worker.memory.terminate": False}):
        assert memory_line() == (1.0, None)


# ----------------------------------------------------------------- refused
def test_a_lazy_dask_array_too_large_is_refused_before_any_task_runs(small):
    X = da.random.random((4_000_000, 10), chunks=(250_000, 10))  # 320 MB, never computed
    y = da.random.random(4_000_000, chunks=250_000)
    before = _transitions(small)
    # 352,000,000 bytes (X and y as float64) over 2 workers: 167.8 MiB each
    with pytest.raises(ClusterError, match=r"(?s)each of the 2 workers would hold about 167\.8 MiB.*"
                       r"335\.7 MiB in all.*memory limit is 16\.0 MiB.*pauses a worker at 80% of it "
                       r"\(12\.8 MiB.*at least 27 workers.*at least 209\.8 MiB.*smaller chunks do not help"):
        LinearRegression(client=small, max_iter=2).fit(X, y)
    assert _transitions(small) == before  # no task was submitted
    assert _nothing_held(small)


def test_int8_dask_input_is_counted_as_the_float64_the_fit_holds(small):
    # raw X: 3 MB; as the fit holds it: 24 MB float64 next to the 3 MB int8 blocks
    X = da.zeros((300_000, 10), dtype=np.int8, chunks=(50_000, 10))
    y = da.zeros(300_000, chunks=50_000)
    with pytest.raises(ClusterError, match=r"each of the 2 workers would hold about 14\.0 MiB.*float64"):
        LinearRegression(client=small, max_iter=2).fit(X, y)
    assert _nothing_held(small)


def test_one_block_larger_than_a_worker_is_refused_with_rechunk(small):
    # 7.3 MiB per worker would fit, but block 0 alone is 13.7 MiB
    X = da.random.random((320_000, 5), chunks=((300_000, 20_000), 5))
    y = da.random.random(320_000, chunks=((300_000, 20_000),))
    before = _transitions(small)
    with pytest.raises(ClusterError, match=r"block 0 of X.*13\.7 MiB.*12\.8 MiB.*rechunk.*X\.rechunk\(\{0: "):
        LinearRegression(client=small, max_iter=2).fit(X, y)
    assert _transitions(small) == before
    assert _nothing_held(small)


def test_in_memory_input_too_large_is_refused_before_it_is_scattered(small):
    rng = np.random.default_rng(0)
    X = rng.random((400_000, 10))  # 32 MB: 16.8 MiB per worker with y
    y = rng.random(400_000)
    before = _transitions(small)
    with pytest.raises(ClusterError, match=r"(?s)worker \S+ would hold 16\.8 MiB.*33\.6 MiB in all over 2 workers.*"
                       r"its memory limit is 16\.0 MiB.*12\.8 MiB.*at least 3 workers.*one piece per worker"):
        LinearRegression(client=small, max_iter=2).fit(X, y)
    assert _transitions(small) == before
    assert _nothing_held(small)


def test_matrix_factorization_of_a_pandas_frame_too_large_is_refused_before_it_is_scattered(small):
    ratings = _ratings(1_000_000)  # 24 MB, and 24 bytes per rating in the shards
    before = _transitions(small)
    with pytest.raises(ClusterError, match=r"(?s)each of the 2 workers would hold about 22\.9 MiB.*ratings.*"
                       r"memory limit is 16\.0 MiB.*12\.8 MiB.*at least 4 workers"):
        MatrixFactorization(n_components=2, max_iter=2, client=small).fit(ratings)
    assert _transitions(small) == before
    assert _nothing_held(small)


def test_matrix_factorization_of_a_dask_frame_is_refused_before_its_shards_are_built(small):
    # the partitions (19.2 MB) fit; with the shards' 24 bytes per rating they do not
    ratings = dd.from_pandas(_ratings(800_000), npartitions=4)
    with pytest.raises(ClusterError, match=r"(?s)worker \S+ would hold \d+\.\d MiB.*ratings.*memory limit is 16\.0 MiB"):
        MatrixFactorization(n_components=2, max_iter=2, client=small).fit(ratings)


# ----------------------------------------------------------------- not refused
def test_a_fit_that_fits_is_not_refused(small):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2000, 5))
    y = X @ [1.0, -1.0, 0.5, 0.0, 2.0]
    assert LinearRegression(client=small, max_iter=3).fit(X, y).coef_.shape == (5,)
    Xd, yd = da.from_array(X, chunks=500), da.from_array(y, chunks=500)
    assert LinearRegression(client=small, max_iter=3).fit(Xd, yd).coef_.shape == (5,)
    mf = MatrixFactorization(n_components=2, max_iter=2, client=small).fit(_ratings(2000))
    assert mf.user_factors_.shape[1] == 2


def test_workers_without_a_memory_limit_are_never_refused(unlimited):
    from dask_dgd._engine.data.memory import check_worker_shares, worker_memory_limits

    limits = worker_memory_limits(unlimited)
    assert set(limits.values()) == {0}
    check_worker_shares(unlimited, dict.fromkeys(limits, 2**50), held="X", spread="")  # 1 PiB each: no limit
    rng = np.random.default_rng(0)
    X = rng.random((400_000, 10))  # refused with a 16 MiB limit
    y = rng.random(400_000)
    assert LinearRegression(client=unlimited, max_iter=1).fit(X, y).coef_.shape == (10,)
    assert MatrixFactorization(n_components=2, max_iter=1, client=unlimited).fit(_ratings(1_000_000)) is not None


# ----------------------------------------------------------------- issue 44, item 6: sizes known only once read
def test_a_dask_dataframe_too_large_is_refused_once_its_partitions_are_read(small):
    """A dask DataFrame's partition lengths are unknown until read, so the up-front check
    cannot size it; once persisted, the scheduler knows the blocks' bytes, and the shards
    are refused before they are built (a 400 MB frame on 2 x 500 MB workers ran 180 s
    without an answer, or ended in a raw KilledWorker)."""
    import dask

    def part(seed):  # 100,000 rows: X 4 MB, y 0.8 MB; 6 of them
        rng = np.random.default_rng(seed)
        return pd.DataFrame(rng.standard_normal((100_000, 6)), columns=list("abcdey"))

    ddf = dd.from_delayed([dask.delayed(part)(s) for s in range(6)], meta=part(0).iloc[:0])
    with pytest.raises(ClusterError, match=r"(?s)each of the 2 workers would hold about 13\.7 MiB.*X and y as the "
                       r"fit holds them, float64, measured once computed; 27\.5 MiB in all.*memory limit is 16\.0 MiB"
                       r".*smaller partitions do not help"):
        LinearRegression(client=small, max_iter=2).fit(ddf[list("abcde")], ddf["y"])


def test_a_dask_dataframe_that_fits_is_fitted_as_the_same_numbers_in_memory(small):
    rng = np.random.default_rng(1)
    frame = pd.DataFrame(rng.standard_normal((3000, 4)), columns=list("abcd"))
    y = frame.to_numpy() @ [1.0, -2.0, 0.5, 3.0] + rng.standard_normal(3000)
    ddf = dd.from_pandas(frame.assign(y=y), npartitions=3)
    lazy = LinearRegression(client=small).fit(ddf[list("abcd")], ddf["y"])
    eager = LinearRegression(client=small).fit(frame.to_numpy(), y)
    np.testing.assert_allclose(lazy.coef_, eager.coef_, rtol=1e-8)


def test_the_worker_process_own_memory_counts_next_to_the_share():
    """A worker process holds its interpreter and libraries (a few hundred MiB) before
    any data: on 500 MB workers that is most of the room below the pause line, and a
    share that fits the line alone is refused with the baseline named."""
    from dask_dgd._engine.data.memory import check_worker_shares

    limits = {"tcp://a:1": 500 * 2**20, "tcp://b:1": 500 * 2**20}
    shares = dict.fromkeys(limits, 200 * 2**20)  # 200 MiB each, under the 400 MiB line
    check_worker_shares(None, shares, held="X", spread="", limits=limits, baselines=dict.fromkeys(limits, 0))
    with pytest.raises(ClusterError, match=r"(?s)about 200\.0 MiB.*memory limit is 500\.0 MiB, 250\.0 MiB of which "
                       r"the worker process already uses outside Dask's data.*at least 3 workers.*"
                       r"at least 562\.5 MiB"):
        check_worker_shares(None, shares, held="X", spread="", even=True, limits=limits,
                            baselines=dict.fromkeys(limits, 250 * 2**20))
    with pytest.raises(ClusterError, match=r"more workers with this memory limit do not help: workers with a "
                       r"memory limit of at least"):
        check_worker_shares(None, shares, held="X", spread="", limits=limits,
                            baselines=dict.fromkeys(limits, 450 * 2**20))


def test_in_process_workers_have_no_baseline_of_their_own(small):
    from dask_dgd._engine.data.memory import worker_baselines

    assert set(worker_baselines(small).values()) == {0}  # their process is the test's


def _hoards(n_bytes):
    """A partition that holds ``n_bytes`` while the worker keeps it (its nanny kills it)."""
    block = np.ones(n_bytes // 8)
    return pd.DataFrame({"a": block, "y": block})


@pytest.mark.slow
def test_workers_killed_at_their_memory_limit_while_reading_the_input_is_a_cluster_error(make_cluster):
    """A partition larger than its worker can hold, in a frame whose size is unknown up
    front: the nanny kills the worker, Dask gives up on the task (KilledWorker), and the
    fit says that memory killed it, from the nannies' logs, with the remedy."""
    import dask

    config = {"distributed.scheduler.allowed-failures": 0, "distributed.worker.memory.target": False,
              "distributed.worker.memory.spill": False, "distributed.worker.memory.pause": False}
    with dask.config.set(config):
        client = make_cluster(1, memory_limit="600 MiB", silence_logs=logging.CRITICAL)
        from dask_dgd._engine.data.memory import worker_baselines

        assert all(b > 0 for b in worker_baselines(client).values())  # a process of its own
        meta = pd.DataFrame({"a": np.ones(0), "y": np.ones(0)})
        ddf = dd.from_delayed([dask.delayed(_hoards)(400 * 2**20)], meta=meta, verify_meta=False)
        with pytest.raises(ClusterError, match=r"(?s)workers died while reading the input.*nannies restarted "
                           r"workers \d+ time\(s\) for exceeding their memory budget.*up to \d+\.\d MiB used.*memory limit 600\.0 MiB.*"
                           r"more memory or use more workers"):
            LinearRegression(client=client, max_iter=2).fit(ddf[["a"]], ddf["y"])
