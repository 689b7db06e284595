"""Three guarantees of training on a shared, possibly secured, Dask cluster.

1. TLS: every estimator and mode trains on a cluster whose connections all use TLS,
   gives the same model as on a plain cluster, and the library opens no plaintext
   connection of its own (nor an embedded cluster when a client is given).
2. Concurrency: fits run at once (threads, GridSearchCV) on one client do not share
   task keys or state: each gives what it gives alone.
3. Interrupts: a fit stopped by KeyboardInterrupt releases every task, key and actor
   it held on the cluster, and the interrupt reaches the caller as it is.
"""

import gc
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster

from dask_dgd import LinearRegression, LogisticRegression, MatrixFactorization
from dask_dgd._engine.data.ingest import build_shardset
from dask_dgd._engine.runtime import executor as cluster_mod
from dask_dgd._engine.runtime.executor import DaskExecutor
from dask_dgd.datasets import make_ratings
from dask_dgd.exceptions import ConcurrentFitError

# the short fits stop at max_iter on purpose; a module-wide filter, because
# warnings.catch_warnings changes process-wide state and is not safe in threads
pytestmark = pytest.mark.filterwarnings("ignore::dask_dgd.exceptions.ConvergenceWarning")

# --------------------------------------------------------------------------- data


def _logistic(seed, n=2000, d=6):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    w = rng.standard_normal(d)
    y = (rng.random(n) < 1 / (1 + np.exp(-(X @ w + 0.3)))).astype(np.int64)
    return X, y


def _linear(seed, n=2000, d=5):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = X @ rng.standard_normal(d) + 0.5 + 0.3 * rng.standard_normal(n)
    return X, y


def _dask(X, y, rows=250):
    return da.from_array(X, chunks=(rows, -1)), da.from_array(y, chunks=rows)


def _fit(est, *data):
    return est.fit(*data)


def _assert_same_model(a, b, tol=1e-12):
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=tol, atol=tol)
    np.testing.assert_allclose(a.intercept_, b.intercept_, rtol=tol, atol=tol)
    assert a.n_iter_ == b.n_iter_
    np.testing.assert_allclose(a.loss_curve_, b.loss_curve_, rtol=tol, atol=tol)


def _assert_same_factors(a, b, tol=1e-12):
    for name in ("user_factors_", "item_factors_", "user_bias_", "item_bias_"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=tol, atol=tol, err_msg=name)
    np.testing.assert_array_equal(a.user_ids_, b.user_ids_)


def _logistic_objective(X, y, est, alpha=1e-4):
    """Mean log-loss + alpha/2 |coef|^2 of a binary model."""
    z = X @ est.coef_[0] + est.intercept_[0]
    return np.mean(np.logaddexp(0, z) - y * z) + 0.5 * alpha * est.coef_[0] @ est.coef_[0]


def _ols_objective(X, y, est):
    """Half mean squared residual of ``est`` and of the least-squares optimum."""
    A = np.column_stack([X, np.ones(len(X))])
    opt = np.linalg.lstsq(A, y, rcond=None)[0]
    obj = 0.5 * np.mean((y - X @ est.coef_ - est.intercept_) ** 2)
    return obj, 0.5 * np.mean((y - A @ opt) ** 2)


# ------------------------------------------------------------------------ scheduler and worker views
# (module-level functions: client.run and run_on_scheduler ship them to the cluster)


def _scheduler_tasks(dask_scheduler):
    return {str(k): ts.state for k, ts in dask_scheduler.tasks.items()}


def _worker_actors(dask_worker):
    return sorted(str(k) for k in dask_worker.state.actors)


def _scheduler_addresses(dask_scheduler):
    comms = [bs.comm for bs in [*dask_scheduler.stream_comms.values(), *dask_scheduler.client_comms.values()]]
    return {
        "address": dask_scheduler.address,
        "listeners": [lst.contact_address for lst in dask_scheduler.listeners],
        "workers": list(dask_scheduler.workers),
        # where the fit's tasks and actors are, or run
        "holders": sorted(
            {ws.address for k, ts in dask_scheduler.tasks.items() if str(k).startswith("dgd-") for ws in ts.who_has or ()}
            | {
                ts.processing_on.address
                for k, ts in dask_scheduler.tasks.items()
                if str(k).startswith("dgd-") and ts.processing_on is not None
            }
        ),
        "comms": [(type(c).__name__, c.peer_address) for c in comms if c is not None],
    }


def _worker_comms(dask_worker):
    pool = dask_worker.rpc
    comms = [c for group in (pool.available, pool.occupied) for cs in list(group.values()) for c in cs]
    stream = dask_worker.batched_stream.comm
    return {
        "address": dask_worker.address,
        "listeners": [lst.contact_address for lst in dask_worker.listeners],
        "comms": [(type(c).__name__, c.peer_address) for c in [*comms, stream] if c is not None],
    }


# ------------------------------------------------------------------------ callbacks
# (module level: an estimator's callbacks are cloned with it)

_SNAPSHOT = {"client": None, "armed": False, "views": []}


def _snapshot_addresses(record):
    """Once armed, at the first record from the 3rd step on: what the scheduler and
    the workers know of addresses and connections, while the fit runs."""
    if _SNAPSHOT["armed"] and record["step"] >= 3:
        _SNAPSHOT["armed"] = False
        client = _SNAPSHOT["client"]
        _SNAPSHOT["views"].append((client.run_on_scheduler(_scheduler_addresses), client.run(_worker_comms)))


_STEPS = []


def _interrupt_at_step_3(record):
    _STEPS.append(record["step"])
    if record["step"] >= 3:
        raise KeyboardInterrupt


# ============================================================================ 1. TLS

TLS = "tls://"


class _ConnectionLog:
    """Every connection this process opens over TCP or TLS (in-process workers
    included): ``(address with its scheme, require_encryption)``."""

    def __init__(self):
        self.entries = []
        self._lock = threading.Lock()

    def install(self, monkeypatch):
        from distributed.comm.tcp import BaseTCPConnector

        original = BaseTCPConnector.connect
        log = self

        async def connect(self, address, deserialize=True, **connection_args):
            with log._lock:
                log.entries.append((self.prefix + address, connection_args.get("require_encryption")))
            return await original(self, address, deserialize=deserialize, **connection_args)

        monkeypatch.setattr(BaseTCPConnector, "connect", connect)

    def snapshot(self):
        with self._lock:
            return list(self.entries)


@pytest.fixture(scope="module")
def security():
    pytest.importorskip("cryptography")  # Security.temporary needs it
    from distributed.security import Security

    sec = Security.temporary()
    assert sec.require_encryption  # a plaintext connection with it raises
    return sec


@pytest.fixture(scope="module")
def tls_setup(security):
    """A 2-worker TLS LocalCluster (in-process workers, so that every connection of
    the cluster passes through the connection log), and the log."""
    log = _ConnectionLog()
    with pytest.MonkeyPatch.context() as mp:
        log.install(mp)
        with LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=False,
            protocol="tls",
            security=security,
            dashboard_address=":0",
            silence_logs=logging.ERROR,
        ) as cluster, Client(cluster, security=security, set_as_default=False) as client:
            yield client, log


@pytest.fixture
def tls_client(tls_setup):
    return tls_setup[0]


@pytest.fixture
def no_embedded_cluster(monkeypatch):
    """Fail if the library starts its embedded (plaintext) LocalCluster."""

    def refuse(*args, **kwargs):
        raise AssertionError("the embedded LocalCluster was started although a client was given")

    monkeypatch.setattr(cluster_mod, "embedded_client", refuse)
    monkeypatch.setattr(cluster_mod, "local_cluster", refuse)


def _assert_all_tls(views, during_fit=True):
    scheduler, workers = views
    addresses = [scheduler["address"], *scheduler["listeners"], *scheduler["workers"], *scheduler["holders"]]
    for w in workers.values():
        addresses += [w["address"], *w["listeners"]]
    comms = scheduler["comms"] + [c for w in workers.values() for c in w["comms"]]
    addresses += [peer for _, peer in comms]
    if during_fit:
        assert scheduler["holders"], "no task or actor of the fit was seen on the cluster"
    assert len(workers) == 2 and len(scheduler["workers"]) == 2
    assert all(a.startswith(TLS) for a in addresses), addresses
    assert comms and {kind for kind, _ in comms} == {"TLS"}, comms


def test_tls_sync_fits_equal_plain_cluster(tls_client, client, no_embedded_cluster):
    X, y = _logistic(0)
    Xd, yd = _dask(X, y)
    for solver, extra in (("gd", {"max_iter": 40}), ("lbfgs", {"tol": 1e-8})):
        secure = _fit(LogisticRegression(client=tls_client, solver=solver, **extra), Xd, yd)
        plain = _fit(LogisticRegression(client=client, solver=solver, **extra), Xd, yd)
        assert secure.history_["compute_time_max"].iloc[1:].gt(0).all()
        _assert_same_model(secure, plain)
    assert secure.n_iter_ > 3


def test_tls_local_and_async_modes(tls_client, client, no_embedded_cluster):
    X, y = _logistic(1)
    # in-memory input: one block per worker in a fixed order, so the local-SGD groups
    # (and the model) do not depend on the cluster
    secure = _fit(LogisticRegression(client=tls_client, mode="local", solver="gd", local_steps=4, max_iter=20), X, y)
    plain = _fit(LogisticRegression(client=client, mode="local", solver="gd", local_steps=4, max_iter=20), X, y)
    _assert_same_model(secure, plain)
    assert secure.history_["updates_per_group"].iloc[-1] == (4, 4)

    # async is not deterministic: it reaches the optimum (bounded staleness: a group
    # that falls behind on the 2 shared cores makes the other wait)
    Xl, yl = _linear(2)
    asynchronous = LinearRegression(client=tls_client, mode="async", solver="gd", max_iter=60, max_staleness=2)
    _fit(asynchronous, *_dask(Xl, yl))
    obj, best = _ols_objective(Xl, yl, asynchronous)
    assert obj - best < 1e-3 * best, (obj, best)
    pushes = np.sum(np.vstack(asynchronous.history_["updates_per_group"].to_numpy()), axis=0)
    assert len(pushes) == 2 and (pushes > 0).all(), pushes  # both groups took part


@pytest.mark.slow
def test_tls_matrix_factorization_equals_plain_cluster(tls_client, client, no_embedded_cluster):
    ratings, _ = make_ratings(200, 60, 3000, rank=3, npartitions=4, random_state=0)
    kw = {"n_components": 3, "max_iter": 15, "tol": 0, "random_state": 0}
    secure = _fit(MatrixFactorization(client=tls_client, **kw), ratings)
    plain = _fit(MatrixFactorization(client=client, **kw), ratings)
    assert len(secure.shard_ratings_) == 2 and secure.n_iter_ == 15
    _assert_same_factors(secure, plain)


def test_tls_no_plaintext_connection(tls_setup, no_embedded_cluster):
    """Every connection made in this process since the TLS cluster started (its
    workers' included: they are in-process) is TLS, and every address the scheduler
    and the workers know, and every comm they hold, during a fit of each mode."""
    client, log = tls_setup
    X, y = _logistic(3)
    Xd, yd = _dask(X, y)
    _SNAPSHOT.update(client=client, views=[])
    try:
        for kw in ({"solver": "gd"}, {"mode": "local", "solver": "gd"}, {"mode": "async", "solver": "gd"}):
            _SNAPSHOT["armed"] = True
            _fit(LogisticRegression(client=client, max_iter=10, callbacks=[_snapshot_addresses], **kw), Xd, yd)
    finally:
        views = _SNAPSHOT["views"]
        _SNAPSHOT.update(client=None, armed=False, views=[])
    assert len(views) == 3
    for v in views:
        _assert_all_tls(v)
    # after the fits too, with the connections the async mode's loops opened to the
    # server's worker through the workers' own pools (ServerLink)
    _assert_all_tls((client.run_on_scheduler(_scheduler_addresses), client.run(_worker_comms)), during_fit=False)
    entries = log.snapshot()
    assert entries, "the connection log saw no connection: it is not installed"
    assert all(address.startswith(TLS) for address, _ in entries), entries
    assert all(required for _, required in entries), entries
    info = client.scheduler_info()
    targets = {address for address, _ in entries}
    assert info["address"] in targets and set(info["workers"]) <= targets


@pytest.mark.slow
def test_tls_worker_processes(security, client):
    """Worker processes: every argument and result crosses a TLS connection."""
    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        protocol="tls",
        security=security,
        dashboard_address=":0",
        silence_logs=logging.ERROR,
    ) as cluster, Client(cluster, security=security, set_as_default=False) as tls_proc:
        X, y = _logistic(4)
        Xd, yd = _dask(X, y)
        _SNAPSHOT.update(client=tls_proc, armed=True, views=[])
        try:
            secure = _fit(LogisticRegression(client=tls_proc, tol=1e-8, callbacks=[_snapshot_addresses]), Xd, yd)
            asynchronous = _fit(
                LogisticRegression(client=tls_proc, mode="async", solver="gd", max_iter=60, max_staleness=2), Xd, yd
            )
        finally:
            views = _SNAPSHOT["views"]
            _SNAPSHOT.update(client=None, armed=False, views=[])
        plain = _fit(LogisticRegression(client=client, tol=1e-8), Xd, yd)
        _assert_same_model(secure, plain)
        gap = _logistic_objective(X, y, asynchronous) - _logistic_objective(X, y, plain)
        assert 0 <= gap < 1e-3, gap
        assert len(views) == 1
        _assert_all_tls(views[0])


# ============================================================================ 2. concurrency


def _concurrent_specs():
    """Four different fits: (estimator, data), and the async fit's data in memory."""
    Xa, ya = _logistic(10)
    Xb, yb = _linear(11)
    Xc, yc = _logistic(12, n=1500, d=4)
    Xd_, yd_ = _linear(13, n=1600, d=3)
    return {
        "sync-gd": (LogisticRegression(solver="gd", alpha=1e-3, max_iter=60, tol=1e-12), _dask(Xa, ya)),
        "sync-sgd": (
            LinearRegression(solver="sgd", batch_size=100, max_iter=8, tol=1e-12, random_state=0),
            _dask(Xb, yb, rows=400),
        ),
        "local": (
            LogisticRegression(mode="local", solver="gd", alpha=1e-2, local_steps=3, max_iter=30),
            (Xc, yc),
        ),
        # bounded staleness: a group that falls behind (2 shared cores, 4 fits) makes the
        # others wait, rather than leaving them to step along its stale gradient
        "async": (
            LinearRegression(mode="async", solver="gd", max_iter=60, max_staleness=2),
            _dask(Xd_, yd_, rows=200),
        ),
    }, (Xd_, yd_)


def _run_fit(est, data, client, barrier=None, meet=None):
    """A copy of ``est`` on ``client`` fitted on ``data``, started when every thread has
    reached ``barrier``; with ``meet`` (a Barrier), the fit waits at it after its first
    step record (a callback that leaves the fit unchanged): concurrent fits all pass it,
    each having stepped while the others run, or it breaks (a timeout) and so do they."""
    params = {**est.get_params(), "client": client}
    if meet is not None:
        met = []

        def after_first_record(record):
            if not met:
                met.append(record)
                meet.wait()

        params["callbacks"] = [*(params.get("callbacks") or ()), after_first_record]
    est = type(est)(**params)
    if barrier is not None:
        barrier.wait()
    return _fit(est, *data)


@pytest.mark.slow
def test_concurrent_fits_equal_sequential_fits(client):
    specs, (Xd_, yd_) = _concurrent_specs()
    scheduler = dask.config.get("scheduler", None)
    alone = {name: _run_fit(est, data, client) for name, (est, data) in specs.items()}
    # they really run at the same time: no fit goes past its first step record until
    # every fit has recorded one (progress, not a clock); fits run one after another
    # would break the barrier (its timeout) and fail
    barrier, meet = threading.Barrier(len(specs)), threading.Barrier(len(specs), timeout=120)
    with ThreadPoolExecutor(len(specs)) as pool:
        futures = {name: pool.submit(_run_fit, est, data, client, barrier, meet)
                   for name, (est, data) in specs.items()}
        together = {name: f.result(timeout=240) for name, f in futures.items()}
    assert not meet.broken
    for name in ("sync-gd", "sync-sgd", "local"):
        _assert_same_model(together[name], alone[name])
    # async is not deterministic: both runs reach the optimum, and agree with each other
    (obj_c, best), (obj_a, _) = (_ols_objective(Xd_, yd_, e) for e in (together["async"], alone["async"]))
    assert obj_c - best < 1e-3 * best and obj_a - best < 1e-3 * best, (obj_c, obj_a, best)
    assert abs(obj_c - obj_a) < 1e-3 * obj_a
    # the process-wide dask config is as it was: dask.compute still runs locally
    assert dask.config.get("scheduler", None) == scheduler
    assert da.ones(4, chunks=2).sum().compute() == 4


@pytest.mark.parametrize("method", ["fit", "partial_fit"])
def test_one_estimator_fitted_from_two_threads_refuses_the_second_call(method):
    """Two threads fitting one estimator object at once mixed their data: the second
    fit's feature count ended up in the first's model (issue 44).  Now the second call
    raises ConcurrentFitError at once, naming the fix, and the first fit is unharmed.
    The first fit is held inside its first step record (a callback) until the second
    call has been refused: events, no sleeps.  In process (small NumPy input)."""
    X, y = _linear(0)
    inside, release = threading.Event(), threading.Event()

    def hold(record):
        if threading.current_thread() is not threading.main_thread():
            inside.set()
            assert release.wait(60)

    est = LinearRegression(solver="gd", max_iter=3, tol=0.0, callbacks=[hold])
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(getattr(est, method), X, y)
        assert inside.wait(60)
        try:
            with pytest.raises(ConcurrentFitError) as info:
                getattr(est, method)(X[:, :3], y)  # another feature count
        finally:
            release.set()
        assert first.result(timeout=60) is est
    assert str(info.value) == (
        f"LinearRegression.{method} was called while another thread is fitting this LinearRegression object (in "
        f"its {method}); one estimator object trains one model at a time: give each thread its own copy, "
        "sklearn.base.clone(est), or wait for the other fit to end")
    assert isinstance(info.value, RuntimeError)
    assert est.n_features_in_ == 5 and est.coef_.shape == (5,) and est.predict(X).shape == (len(X),)
    # the first fit has ended: the object fits again, any data
    est.set_params(callbacks=None)
    assert est.fit(X[:, :3], y).n_features_in_ == 3


_PROBE = {"client": None, "seen": []}


def _long_running(dask_worker):
    return sorted(repr(ts) for ts in dask_worker.state.long_running)  # TaskState reprs


def _probe(x):
    return x + 1


def _probe_workers(record):
    """While the async loops run: which tasks the workers count as long-running, and
    whether a small task still gets a slot on each single-threaded worker; then stop."""
    if record["step"] < 3 or _PROBE["seen"]:
        return None
    client = _PROBE["client"]
    long_running = client.run(_long_running)
    results = [
        client.submit(_probe, i, workers=[w], allow_other_workers=False, pure=False).result(timeout=5)
        for i, w in enumerate(sorted(long_running))
    ]
    _PROBE["seen"].append((long_running, results))
    return True


def test_async_loops_leave_worker_slots_free(client):
    """An async fit's loops run for the whole fit; they leave the workers' task slots
    (secede), so that on single-threaded workers other fits' tasks, and other fits'
    loops, still run.  Held slots made two concurrent async fits queue loops behind
    each other and train some groups alone."""
    X, y = _linear(70)
    _PROBE.update(client=client, seen=[])
    try:
        # mini-batches of 4 rows: 500 pushes an epoch, so the loops outlive the first records
        est = LinearRegression(
            client=client, mode="async", solver="sgd", batch_size=4, max_iter=1000, callbacks=[_probe_workers]
        )
        _fit(est, *_dask(X, y))
    finally:
        seen = _PROBE["seen"]
        _PROBE.update(client=None, seen=[])
    assert len(seen) == 1
    long_running, results = seen[0]
    assert len(long_running) == 2
    assert all(any("'dgd-async-" in k for k in keys) for keys in long_running.values()), long_running
    assert results == [1, 2]
    assert est.n_iter_ < 1000  # stopped by the callback, while the loops ran


class _Blocking:
    """An actor-method stand-in for call_actor: sets ``entered``, waits for ``leave``."""

    def __init__(self):
        self.entered, self.leave = threading.Event(), threading.Event()

    def __call__(self):
        self.entered.set()
        assert self.leave.wait(10)
        return self

    def result(self):
        return "done"


def test_overlapping_actor_calls_leave_dask_config_alone(client):
    """Two threads in DaskExecutor.call_actor, entered A, B and left A, B: the order
    in which Client.as_current's dask.config.set leaves scheduler="dask.distributed"
    set for the whole process."""
    ex = DaskExecutor(client)
    a, b = _Blocking(), _Blocking()
    with dask.config.set(scheduler="threads"), ThreadPoolExecutor(2) as pool:
        fa = pool.submit(ex.call_actor, a)
        assert a.entered.wait(10)
        fb = pool.submit(ex.call_actor, b)
        assert b.entered.wait(10)
        a.leave.set()
        assert fa.result(10) == "done"
        b.leave.set()
        assert fb.result(10) == "done"
        assert dask.config.get("scheduler") == "threads"


@pytest.mark.slow
def test_grid_search_threads_equal_one_job(client):
    from joblib import parallel_backend
    from sklearn.model_selection import GridSearchCV

    X, y = _logistic(20, n=1200)
    grid = {"alpha": [1e-4, 1e-2, 1e-1]}
    est = LogisticRegression(client=client, solver="gd", max_iter=25, tol=1e-12)
    one = _fit(GridSearchCV(est, grid, cv=3, n_jobs=1), X, y)
    with parallel_backend("threading", n_jobs=2):
        two = _fit(GridSearchCV(est, grid, cv=3, n_jobs=2), X, y)
    scores = one.cv_results_["mean_test_score"]
    assert np.ptp(scores) > 0  # the grid points differ: a mix-up would show
    np.testing.assert_allclose(two.cv_results_["mean_test_score"], scores, rtol=1e-12, atol=1e-12)
    for s in range(3):
        key = f"split{s}_test_score"
        np.testing.assert_allclose(two.cv_results_[key], one.cv_results_[key], rtol=1e-12, atol=1e-12)
    _assert_same_model(two.best_estimator_, one.best_estimator_)


class _KeyLog:
    """The keys a client submits, by the thread that submitted them."""

    def __init__(self, client, monkeypatch):
        self.keys = {}
        original = client.submit

        def submit(*args, key=None, **kwargs):
            future = original(*args, key=key, **kwargs)
            self.keys.setdefault(threading.current_thread().name, []).append(str(future.key))
            return future

        monkeypatch.setattr(client, "submit", submit)


@pytest.fixture(scope="module")
def client3(make_module_cluster):
    """Three workers: more groups than split_every=2, so steps as tasks have an inner
    level of dgd-reduce merge tasks."""
    return make_module_cluster(3, processes=False)


def test_concurrent_fits_submit_disjoint_keys(client3, monkeypatch):
    """Task transport, tree merges on the cluster: two fits at once submit no key in
    common (a shared key would hand one fit the other's task), and no fit submits a
    key twice."""
    datasets = [_dask(*_logistic(30 + i, n=2400), rows=200) for i in range(2)]
    # rebalance=True: equal blocks on all three workers, three groups
    est = LogisticRegression(client=client3, solver="gd", max_iter=6, split_every=2, rebalance=True)
    with dask.config.set({"dgd.step-transport": "task"}):
        alone = [_fit(type(est)(**est.get_params()), *data) for data in datasets]
        log = _KeyLog(client3, monkeypatch)
        barrier = threading.Barrier(2)
        with ThreadPoolExecutor(2, thread_name_prefix="fit") as pool:
            together = list(pool.map(lambda d: _run_fit(est, d, client3, barrier), datasets))
    assert len(log.keys) == 2
    keys = list(log.keys.values())
    for k in keys:
        assert len(k) == len(set(k)), "a fit submitted a key twice"
        assert sum(x.startswith("dgd-reduce-") for x in k) >= 6  # the merge level ran
        assert sum(x.startswith("dgd-grad-") for x in k) >= 6 * 3
    assert not set(keys[0]) & set(keys[1])
    for a, b in zip(together, alone):
        _assert_same_model(a, b)


def _times(shard, factor):
    return shard.n_rows * factor


def _same(shard):
    return shard


def test_repeated_calls_of_one_fit_get_new_keys(client):
    """Two calls under one name while the first's futures are alive (and a ShardSet
    derived by transform, which keeps the token): new keys, their own results."""
    X, y = _logistic(40, n=600)
    shards = build_shardset(DaskExecutor(client), *_dask(X, y, rows=100), None)
    first = shards.map(_times, 1, name="dgd-test")
    second = shards.map(_times, 2, name="dgd-test")
    derived = shards.transform(_same, name="dgd-test")
    third = derived.map(_times, 3, name="dgd-test")
    assert derived.token == shards.token
    keys = [{f.key for f in fs} for fs in (first, second, derived.handles, third)]
    assert sum(map(len, keys)) == len(set().union(*keys)) == 4 * shards.n_groups
    rows = [len(g) * 100 for g in shards.groups]
    assert shards.gather(first) == rows
    assert shards.gather(second) == [2 * r for r in rows]
    assert derived.gather(third) == [3 * r for r in rows]


# ============================================================================ 3. interrupts

def _interrupted_case(mode, client):
    """The estimator and its data, for each mode."""
    X, y = _logistic(50)
    Xd, yd = _dask(X, y)
    kw = {"client": client, "callbacks": [_interrupt_at_step_3]}
    if mode == "sync-gd":
        return LogisticRegression(solver="gd", max_iter=1000, **kw), (Xd, yd)
    if mode == "sync-lbfgs":
        return LogisticRegression(solver="lbfgs", tol=1e-14, max_iter=1000, **kw), (Xd, yd)
    if mode == "local":
        return LogisticRegression(mode="local", solver="gd", max_iter=1000, **kw), (Xd, yd)
    if mode == "async":
        return LogisticRegression(mode="async", solver="gd", max_iter=10_000, tol=0, **kw), (Xd, yd)
    ratings, _ = make_ratings(200, 60, 3000, rank=3, npartitions=4, random_state=0)
    return MatrixFactorization(n_components=3, max_iter=1000, **kw), (ratings,)


def _cluster_state(client):
    return client.run_on_scheduler(_scheduler_tasks), client.run(_worker_actors)


@pytest.mark.parametrize("keep_traceback", [False, True], ids=["dropped", "kept"])
@pytest.mark.parametrize(
    "mode",
    ["sync-gd", "sync-lbfgs", "local", "async", "mf"],
)
def test_interrupted_fit_releases_cluster_state(client, mode, keep_traceback):
    """KeyboardInterrupt from a callback mid-fit: it reaches the caller as it is; then
    the scheduler holds no key the fit created (dgd- tasks, actors, its copies of the
    input) and no worker holds a dgd actor, without the garbage collector's help.

    ``kept``: the caller keeps the traceback (as ``sys.last_traceback`` of an
    interactive session does), and with it the fit's frames."""
    est, data = _interrupted_case(mode, client)
    tasks0, actors0 = _cluster_state(client)
    del _STEPS[:]
    gc.disable()  # a reference cycle must not be what keeps (or frees) anything
    try:
        excinfo = None
        try:
            _fit(est, *data)
        except KeyboardInterrupt as err:
            excinfo = (type(err), err, err.__traceback__) if keep_traceback else type(err)
        assert excinfo is not None, "the fit was not interrupted"
        assert (excinfo[0] if keep_traceback else excinfo) is KeyboardInterrupt
        assert _STEPS[-1] >= 3 and not hasattr(est, "coef_") and not hasattr(est, "item_factors_")
        deadline = time.monotonic() + 30.0  # the scheduler forgets released keys soon; a busy machine takes longer
        while True:
            tasks, actors = _cluster_state(client)
            new = sorted(set(tasks) - set(tasks0))
            new_actors = sorted(a for w, acts in actors.items() for a in acts if a not in actors0.get(w, []))
            if (not new and not new_actors) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert not [k for k in new if k.startswith("dgd-")], new
        assert not new_actors, new_actors
        assert not new, {k: tasks[k] for k in new}
    finally:
        gc.enable()
    # the cluster is fine afterwards: the same estimator fits
    est.set_params(callbacks=None, max_iter=3)
    _fit(est, *data)
    assert np.all(np.isfinite(est.item_factors_ if mode == "mf" else est.coef_))
