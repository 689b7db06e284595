"""The synchronous engine on a real LocalCluster: determinism, invariances, modes."""

import logging
import time
import warnings

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import dask_dgd._engine.runtime.executor as cluster_mod
from dask_dgd import LinearRegression, LogisticRegression
from dask_dgd._engine.data.ingest import build_shardset
from dask_dgd._engine.runtime.executor import DaskExecutor
from dask_dgd.exceptions import ChunkingError, ClusterError, DivergenceError, InputError


def _fit(client, X, y, **kw):
    kw.setdefault("tol", 1e-10)
    kw.setdefault("max_iter", 500)
    return LogisticRegression(client=client, **kw).fit(X, y)


def test_same_fit_twice_is_bit_identical(client, logistic_data):
    X, y = logistic_data
    Xd, yd = da.from_array(X, chunks=(300, -1)), da.from_array(y, chunks=300)
    a = _fit(client, Xd, yd)
    b = _fit(client, Xd, yd)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert a.intercept_ == b.intercept_
    assert a.loss_curve_ == b.loss_curve_


@pytest.mark.parametrize("chunks", [250, 777, 2000])
@pytest.mark.parametrize("split_every", [2, 8])
def test_chunking_and_split_every_change_only_rounding(client, logistic_data, chunks, split_every):
    X, y = logistic_data
    ref = _fit(None, X, y)  # in process, one block
    est = _fit(client, da.from_array(X, chunks=(chunks, -1)), da.from_array(y, chunks=chunks), split_every=split_every)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(est.intercept_, ref.intercept_, rtol=1e-7, atol=1e-9)


def test_worker_count_and_transport_do_not_change_a_bit(client, logistic_data, make_cluster):
    """Sums follow the tree over block indices: 2 or 3 workers, actor or task steps,
    the fitted coefficients are bit-identical."""
    X, y = logistic_data
    Xd, yd = da.from_array(X, chunks=(200, -1)), da.from_array(y, chunks=200)
    two = _fit(client, Xd, yd, split_every=2)
    with dask.config.set({"dgd.step-transport": "task"}):
        two_tasks = _fit(client, Xd, yd, split_every=2)  # inner dgd-reduce task levels
    # the solvers that sample rows on the driver (Lipschitz estimate, Newton's Hessian)
    sampled = {"gd": dict(solver="gd", max_iter=30), "newton": dict(solver="newton")}
    two_sampled = {k: _fit(client, Xd, yd, **kw) for k, kw in sampled.items()}
    client3 = make_cluster(3, processes=False)
    three = _fit(client3, Xd, yd, split_every=2)
    three_sampled = {k: _fit(client3, Xd, yd, **kw) for k, kw in sampled.items()}
    shards = build_shardset(DaskExecutor(client3), Xd, yd, None)
    assert shards.n_groups == 3 and len(set(shards.workers)) == 3
    assert sorted(b for g in shards.groups for b in g) == list(range(10))
    for other in (two_tasks, three):
        np.testing.assert_array_equal(other.coef_, two.coef_)
        np.testing.assert_array_equal(other.intercept_, two.intercept_)
        assert other.loss_curve_ == two.loss_curve_
    for k in sampled:
        np.testing.assert_array_equal(three_sampled[k].coef_, two_sampled[k].coef_)
        assert three_sampled[k].loss_curve_ == two_sampled[k].loss_curve_


def test_step_transport_choice():
    from dask_dgd._engine.runtime.executor import step_transport
    from dask_dgd.exceptions import ParameterError

    assert step_transport() == "tree"  # auto: the tree (a star when there are few groups)
    for name, expected in (("tree", "tree"), ("star", "star"), ("actor", "star"), ("task", "task")):
        with dask.config.set({"dgd.step-transport": name}):
            assert step_transport() == expected
    with dask.config.set({"dgd.step-transport": "mpi"}):
        with pytest.raises(ParameterError, match="dgd.step-transport must be one of 'auto', 'tree', 'star', "
                                                 "'actor', 'task'; got 'mpi'"):
            step_transport()


def test_shards_follow_the_blocks_placement_on_distinct_workers(client, logistic_data):
    X, y = logistic_data
    Xd, yd = client.persist([da.from_array(X, chunks=(250, -1)), da.from_array(y, chunks=250)])
    shards = build_shardset(DaskExecutor(client), Xd, yd, None)
    who = client.who_has(Xd)
    holder = [who[k[0]][0] for k in Xd.__dask_keys__()]
    owner = {b: w for blocks, w in zip(shards.groups, shards.workers) for b in blocks}
    for b in range(8):  # a block moves only off a worker holding more than its share
        if holder.count(holder[b]) <= 4:
            assert owner[b] == holder[b]
    assert sorted(len(g) for g in shards.groups) == [4, 4]
    assert len(set(shards.workers)) == 2
    assert shards.n_rows == 2000 and list(shards.block_rows) == [250] * 8


def test_unknown_chunk_sizes_and_dask_dataframe(client, logistic_data):
    X, y = logistic_data
    ref = _fit(None, X, y)
    Xd = da.from_array(X, chunks=(500, -1))
    keep = da.from_array(np.ones(2000, dtype=bool), chunks=500)
    Xu, yu = Xd[keep], da.from_array(y, chunks=500)[keep]
    assert np.isnan(Xu.chunks[0][0])
    est = _fit(client, Xu, yu)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-6, atol=1e-8)
    df = dd.from_pandas(pd.DataFrame(X, columns=[f"f{i}" for i in range(6)]), npartitions=3)
    ys = dd.from_pandas(pd.Series(y), npartitions=3)
    est = _fit(client, df, ys)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-6, atol=1e-8)
    assert list(est.feature_names_in_) == [f"f{i}" for i in range(6)]
    pred = est.predict(df)
    assert isinstance(pred, da.Array)
    np.testing.assert_array_equal(pred.compute(), ref.predict(X))


def test_numpy_input_on_a_cluster_is_scattered_in_groups(client, logistic_data):
    X, y = logistic_data
    ref = _fit(None, X, y)
    est = _fit(client, X, y)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-7, atol=1e-9)


def test_y_numpy_with_dask_x_and_rechunked_y(client, logistic_data):
    X, y = logistic_data
    ref = _fit(None, X, y)
    est = _fit(client, da.from_array(X, chunks=(400, -1)), y)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-7, atol=1e-9)
    est = _fit(client, da.from_array(X, chunks=(400, -1)), da.from_array(y, chunks=300))
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-7, atol=1e-9)


def test_minibatch_is_reproducible_from_random_state(client, logistic_data):
    X, y = logistic_data
    Xd, yd = da.from_array(X, chunks=(500, -1)), da.from_array(y, chunks=500)
    kw = dict(solver="sgd", batch_size=100, max_iter=3, random_state=7, tol=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = _fit(client, Xd, yd, **kw)
        b = _fit(client, Xd, yd, **kw)
        c = _fit(client, Xd, yd, **{**kw, "random_state": 8})
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert not np.array_equal(a.coef_, c.coef_)
    assert a.n_iter_ == 3 and len(a.history_) == 3 * 20  # 3 epochs of 20 steps, no extra batch
    ref = _fit(None, X, y)
    assert abs(a.score(X, y) - ref.score(X, y)) < 0.02


def test_gd_optimizers_reach_the_lbfgs_optimum(client, logistic_data):
    X, y = logistic_data
    Xd, yd = da.from_array(X, chunks=(500, -1)), da.from_array(y, chunks=500)
    ref = _fit(None, X, y, alpha=1e-2)
    best = ref.loss_curve_[-1]
    for opt in ["sgd", "adam", "rmsprop", "adagrad", "adamw"]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = _fit(client, Xd, yd, solver="gd", optimizer=opt, alpha=1e-2, max_iter=300, tol=1e-6)
        assert est.loss_curve_[-1] <= best * (1 + 1e-3), opt


def test_divergent_learning_rate_backs_off(client, logistic_data):
    X, y = logistic_data
    Xd = da.from_array(X, chunks=(500, -1))
    est = LinearRegression(client=client, solver="gd", learning_rate=100.0, max_iter=200, tol=1e-8)
    est.fit(Xd, da.from_array(X[:, 0] * 2.0 + 1.0, chunks=500))
    assert est.history_["step_size"].iloc[-1] < 2.0  # halved from 100 until stable
    np.testing.assert_allclose(est.coef_[0], 2.0, rtol=1e-6)
    np.testing.assert_allclose(est.intercept_, 1.0, rtol=1e-6)


def test_divergence_error_names_step_and_remedy(client, monkeypatch, logistic_data):
    X, y = logistic_data
    monkeypatch.setattr("dask_dgd._engine.update.MAX_BACKOFFS", 2)
    est = LinearRegression(client=client, solver="gd", learning_rate=1e6, on_divergence="backoff")
    with pytest.raises(DivergenceError, match=r"diverged at step \d+ .*halving the learning rate 2 times"):
        est.fit(da.from_array(X * 1e3, chunks=(500, -1)), da.from_array(X[:, 0], chunks=500))


def test_bad_dask_input_errors(client, logistic_data):
    X, y = logistic_data
    with pytest.raises(ChunkingError, match=r"X is chunked along columns .*use X.rechunk\(\{1: -1\}\)"):
        _fit(client, da.from_array(X, chunks=(500, 3)), da.from_array(y, chunks=500))
    Xn = X.copy()
    Xn[1234, 2] = np.nan
    with pytest.raises(InputError, match=r"Input X contains NaN or infinity in block 2 \(shape \(500, 6\)\)"):
        _fit(client, da.from_array(Xn, chunks=(500, -1)), da.from_array(y, chunks=500))
    with pytest.raises(InputError, match="X and y have different lengths: 2000 and 1999"):
        _fit(client, da.from_array(X, chunks=(500, -1)), da.from_array(y[:-1], chunks=700))
    with pytest.raises(InputError, match="X and y have different lengths: 2000 and 1999"):
        _fit(client, da.from_array(X, chunks=(500, -1)), da.from_array(y[:-1], chunks=(500, 500, 500, 499)))
    keep = np.ones(2000, dtype=bool)
    keep[1800] = False  # unknown chunk sizes: the mismatch is found block by block
    y_unknown = da.from_array(y, chunks=500)[da.from_array(keep, chunks=500)]
    with pytest.raises(InputError, match=r"different numbers of rows in block 3: X has 500, y has 499"):
        _fit(client, da.from_array(X, chunks=(500, -1)), y_unknown)
    with pytest.raises(InputError, match="X must be numeric; got dtype <U1"):
        _fit(client, da.from_array(np.full((10, 2), "a"), chunks=(5, -1)), da.from_array(y[:10], chunks=5))
    with pytest.raises(InputError, match=r"X has 5 features, but LogisticRegression is expecting 6"):
        _fit(client, da.from_array(X, chunks=(500, -1)), y).predict(da.from_array(X[:, :5], chunks=(500, -1)))


def test_embedded_cluster_is_threads_started_once_and_announced_once(monkeypatch, logistic_data):
    X, y = logistic_data
    started = []
    real = cluster_mod.local_cluster

    def small_cluster(**kw):
        started.append(kw)
        return real(**{**kw, "n_workers": 2, "dashboard_address": ":0", "silence_logs": logging.ERROR})

    # A handler of our own on the dask_dgd logger: starting an in-process cluster with
    # silence_logs may change the levels of pytest's capture handlers.
    records = []

    class ListHandler(logging.Handler):
        def emit(self, record):
            records.append((record.levelno, record.getMessage()))

    logger, handler = logging.getLogger("dask_dgd"), ListHandler()
    logger.addHandler(handler)
    monkeypatch.setattr(cluster_mod, "local_cluster", small_cluster)
    monkeypatch.setitem(cluster_mod._embedded, "client", None)
    monkeypatch.setitem(cluster_mod._embedded, "announced", False)
    try:
        a = _fit(None, da.from_array(X, chunks=(500, -1)), da.from_array(y, chunks=1000))
        b = _fit(None, da.from_array(X, chunks=(1000, -1)), da.from_array(y, chunks=1000))
        assert len(started) == 1 and started[0]["processes"] is False  # threads: no __main__ guard needed
        cluster_mod._close_embedded()
        _fit(None, da.from_array(X, chunks=(1000, -1)), da.from_array(y, chunks=1000))  # started again
        assert len(started) == 2
        announced = [(level, m) for level, m in records if "started an embedded LocalCluster" in m]
        assert len(announced) == 1 and announced[0][0] == logging.WARNING
        assert "single-threaded worker threads in this process" in announced[0][1]
        assert "pass client=..." in announced[0][1]
        np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-7)
        with dask.config.set({"dgd.embedded-processes": True}):
            cluster_mod._close_embedded()
            monkeypatch.setattr(cluster_mod, "local_cluster", lambda **kw: started.append(kw) or real(
                **{**kw, "n_workers": 1, "processes": False, "dashboard_address": ":0"}))
            _fit(None, da.from_array(X, chunks=(1000, -1)), da.from_array(y, chunks=1000))
        assert started[-1]["processes"] is True  # worker processes only when asked for
    finally:
        logger.removeHandler(handler)
        cluster_mod._close_embedded()


def test_cluster_without_workers_is_a_clear_error(logistic_data, make_cluster):
    import dask

    from dask_dgd.exceptions import ClusterError

    X, y = logistic_data
    c = make_cluster(0, processes=False, silence_logs=logging.WARN)
    with dask.config.set({"dgd.worker-timeout": 1}):
        with pytest.raises(ClusterError, match=r"has no workers; start some"):
            LogisticRegression(client=c).fit(da.from_array(X, chunks=(500, -1)), y)


def test_paused_closing_and_restarting_workers_are_named_not_called_absent():
    """Workers that are there but not running are not "no workers; start some": a
    paused worker is named with its memory and the remedy, and so is a cluster whose
    workers keep being removed (a nanny killing them at their limit, restarting)."""
    from dask_dgd._engine.runtime.executor import absent_workers_message

    msg = absent_workers_message("tcp://s:8786", {"tcp://w:1": ("paused", 100 * 2**20, 130 * 2**20),
                                                  "tcp://w:2": ("closing_gracefully", None, 0)})
    assert "has 2 worker(s) but none running" in msg and "start some" not in msg
    assert "tcp://w:1 is paused (uses 130" in msg and "of its 100" in msg and "tcp://w:2 is closing_gracefully" in msg
    assert "--memory-limit" in msg
    msg = absent_workers_message("tcp://s:8786", {}, removed=4, window=60.0)
    assert "removed 4 time(s) in the last 60 s" in msg and "restarting" in msg and "start some" not in msg
    assert "has no workers; start some" in absent_workers_message("tcp://s:8786", {})


def test_a_fit_on_a_paused_worker_says_it_is_paused(logistic_data, make_cluster):
    """A worker above its memory pause threshold runs nothing: the fit ends after
    dgd.worker-timeout with a ClusterError naming the paused worker, its memory and the
    remedy (it said "has no workers; start some")."""
    X, y = logistic_data
    memory = {"distributed.worker.memory.target": False, "distributed.worker.memory.spill": False,
              "distributed.worker.memory.pause": 0.001, "distributed.worker.memory.terminate": False}
    with dask.config.set(memory):  # the driver's too: the message names the pause threshold
        c = make_cluster(1, memory_limit="4GB", silence_logs=logging.WARN)
        deadline = time.monotonic() + 60  # until the worker's memory monitor has paused it (progress, not a clock)
        while not any(w.get("status") == "paused" for w in c.run_on_scheduler(
                lambda dask_scheduler: [{"status": ws.status.name} for ws in dask_scheduler.workers.values()])):
            assert time.monotonic() < deadline, "the worker was never paused"
            time.sleep(0.05)
        with dask.config.set({"dgd.worker-timeout": 2}), pytest.raises(ClusterError) as info:
            LogisticRegression(client=c).fit(da.from_array(X, chunks=(500, -1)), y)
    message = str(info.value)
    assert "but none running" in message and "is paused (uses" in message and "start some" not in message


def test_a_worker_lost_while_receiving_in_memory_data_is_a_cluster_error(client, logistic_data, monkeypatch):
    """A worker that dies during the scatter of NumPy input (killed at its memory limit)
    is a ClusterError naming the worker, its share and the remedy, not a raw
    CommClosedError from the connection."""
    from distributed.comm.core import CommClosedError

    def dies(*args, **kwargs):
        raise CommClosedError("in <TCP (closed) ConnectionPool.scatter>: Stream is closed")

    monkeypatch.setattr(client, "scatter", dies)
    X, y = logistic_data
    with pytest.raises(ClusterError, match=r"was lost while receiving its share of the in-memory data \(.*B\).*"
                                           r"CommClosedError.*pass a dask array"):
        LogisticRegression(client=client).fit(X, y)


def test_y_with_other_chunk_boundaries_and_scalar_weight(client, logistic_data):
    X, y = logistic_data
    ref = _fit(None, X, y)
    Xd = da.from_array(X, chunks=(300, -1))  # 7 blocks
    yd = da.from_array(y, chunks=((300,) * 5 + (500, 0)))  # 7 blocks, other boundaries
    est = _fit(client, Xd, yd)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-7, atol=1e-9)
    est = LogisticRegression(client=client, tol=1e-10).fit(Xd, yd, sample_weight=2.0)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-6, atol=1e-8)


def test_dataframe_column_checks(client, logistic_data):
    X, y = logistic_data
    pdf = pd.DataFrame(X, columns=[f"f{i}" for i in range(6)])
    bad = pdf.assign(f5=pd.Series(["a"] * 2000, dtype="string"))
    with pytest.raises(InputError, match=r"X column 'f5' holds text \(dtype string\); training needs numbers: one-hot encode"):
        _fit(client, dd.from_pandas(bad, npartitions=2), dd.from_pandas(pd.Series(y), npartitions=2))
    est = _fit(client, dd.from_pandas(pdf, npartitions=2), dd.from_pandas(pd.Series(y), npartitions=2))
    renamed = dd.from_pandas(pdf.rename(columns={"f0": "zz"}), npartitions=2)
    with pytest.raises(InputError, match="The feature names should match those that were passed during fit"):
        est.predict(renamed)


def test_float32_dask_predictions_have_the_declared_dtype(client, logistic_data):
    X, y = logistic_data
    est = _fit(client, da.from_array(X.astype(np.float32), chunks=(500, -1)), da.from_array(y, chunks=500), tol=1e-5)
    lazy = est.predict_proba(da.from_array(X.astype(np.float32), chunks=(500, -1)))
    assert lazy.dtype == lazy.compute().dtype == np.float32
    ref = _fit(None, X, y, tol=1e-5)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-3, atol=1e-4)


def test_minibatch_of_zero_weight_rows_does_not_abort(client, logistic_data):
    X, y = logistic_data
    w = np.zeros(2000)
    w[::100] = 1.0  # 1% of rows carry weight: many batches of 10 have none
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = LogisticRegression(client=client, solver="sgd", batch_size=10, max_iter=2, random_state=0)
        est.fit(da.from_array(X, chunks=(500, -1)), da.from_array(y, chunks=500), sample_weight=w)
    assert np.all(np.isfinite(est.coef_))


def test_lbfgs_refuses_a_non_finite_start():
    X = np.random.default_rng(0).standard_normal((50, 2))
    # Targets of 1e200 are now refused before training (InputError, see
    # tests/test_bad_input.py); a start whose objective overflows is reached here by
    # warm-starting from huge coefficients.
    est = LinearRegression(warm_start=True).fit(X, X[:, 0])
    est.coef_ = np.full(2, 1e300)
    with pytest.raises(DivergenceError, match="not finite at the initial parameters"), np.errstate(over="ignore"):
        est.fit(X, X[:, 0])
