"""A worker process frozen in the middle of a fit (SIGSTOP): the fit does not wait for it
for ever.

A stopped process fails no call: its connections stay open and everything it was asked
waits.  A step that has waited longer than ``max(dgd.step-timeout, 20 x the median step
time)`` asks the scheduler which of its workers have gone silent (no heartbeat), drops
them from the cluster and recovers as for a killed worker.  Every freeze is triggered by
progress (the victim stops itself at its n-th group computation,
:func:`dask_dgd.testing.freezing_worker`), never by a clock; a small ``dgd.step-timeout``
keeps the tests short.  A stopped process is continued on exit, and any worker process
of a test's cluster still stopped at the end is killed.
"""

import logging
import os
import re
import warnings

import dask
import dask.array as da
import numpy as np
import pytest
from test_worker_loss import _async_fit, _server_actors, _spread

from dask_dgd import ConvergenceWarning, LogisticRegression
from dask_dgd._engine.runtime.collective import Collective
from dask_dgd.exceptions import ClusterError, ParameterError
from dask_dgd.testing import freezing_worker

#: The step timeout of the tests: well above a step (milliseconds) and the scheduler's
#: heartbeat interval (0.5 s), well below the time the scheduler itself takes to give
#: up on a silent worker (distributed.scheduler.worker-ttl, 5 minutes).
STEP_TIMEOUT = 4


# ----------------------------------------------------------------- the limit itself
def test_the_step_timeout_is_the_configured_floor_or_20_median_steps():
    collective = Collective(shards=None)
    assert collective.step_timeout() == 60.0  # before any step: the floor
    collective.step_times.extend([0.01, 2.0, 10.0])
    assert collective.step_timeout() == 60.0  # 20 x 2 s is below it
    collective.step_times.extend([5.0, 5.0])
    assert collective.step_timeout() == 100.0  # 20 x the median, 5 s
    with dask.config.set({"dgd.step-timeout": "3 minutes"}):
        assert collective.step_timeout() == 180.0
    with dask.config.set({"dgd.step-timeout": None}):
        assert collective.step_timeout() is None


def test_the_step_timeout_is_read_from_the_environment():
    """``DASK_DGD__STEP_TIMEOUT`` reaches dask's config as ``dgd.step_timeout``: the
    underscore spelling is the same key."""
    with dask.config.set(dask.config.collect_env({"DASK_DGD__STEP_TIMEOUT": "7"})):
        assert Collective(shards=None).step_timeout() == 7.0


@pytest.mark.parametrize("bad", [0, -1, "soon", True, float("inf"), float("nan"), [5]])
def test_a_bad_step_timeout_is_refused_with_the_value_and_the_fix(bad):
    with dask.config.set({"dgd.step-timeout": bad}), pytest.raises(
            ParameterError, match=r"dask config dgd.step-timeout must be a number of seconds > 0, a duration "
                                  r"such as '90s', or None \(no limit\); got "):
        Collective(shards=None).step_timeout()


def test_the_actor_timeout_is_configured_in_seconds_or_a_duration():
    from dask_dgd._engine.runtime.collective import ACTOR_TIMEOUT_DEFAULT, actor_timeout

    assert actor_timeout() == ACTOR_TIMEOUT_DEFAULT == 10.0
    with dask.config.set({"dgd.actor-timeout": "1 minute"}):
        assert actor_timeout() == 60.0
    with dask.config.set(dask.config.collect_env({"DASK_DGD__ACTOR_TIMEOUT": "2.5"})):
        assert actor_timeout() == 2.5


@pytest.mark.parametrize("bad", [0, -1, "soon", True, None, float("inf"), [5]])
def test_a_bad_actor_timeout_is_refused_with_the_value_and_the_fix(bad):
    from dask_dgd._engine.runtime.collective import actor_timeout

    with dask.config.set({"dgd.actor-timeout": bad}), pytest.raises(
            ParameterError, match=r"dask config dgd.actor-timeout must be a number of seconds > 0, a duration "
                                  rf"such as '90s'; got {re.escape(repr(bad))}$"):
        actor_timeout()


def test_an_asynchronous_fit_waits_for_its_server_the_configured_seconds(client, monkeypatch):
    """Every call of the parameter server (polls, stop, result) waits ``dgd.actor-timeout``
    (a poll bringing the whole state at least that long)."""
    from dask_dgd._engine.runtime.executor import DaskExecutor

    waits = []
    real = DaskExecutor.call_actor_within

    def record(self, timeout, *args, **kwargs):
        waits.append(timeout)
        return real(self, timeout, *args, **kwargs)

    monkeypatch.setattr(DaskExecutor, "call_actor_within", record)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 3))
    y = (X[:, 0] > 0).astype(int)
    with dask.config.set({"dgd.actor-timeout": 37}):
        LogisticRegression(mode="async", solver="gd", max_iter=3, tol=0.0, client=client).fit(
            da.from_array(X, chunks=(100, -1)), da.from_array(y, chunks=100))
    assert waits and min(waits) == 37.0, waits


# ------------------------------------------------------------- frozen worker processes
@pytest.fixture
def data(process_client):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((150_000, 10))
    y = (X[:, 0] - X[:, 1] + rng.standard_normal(150_000) > 0).astype(float)
    return X, y


def _fit(client, X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return LogisticRegression(client=client, **{"solver": "lbfgs", "tol": 0.0, "max_iter": 30, **kw}).fit(X, y)


def _fit_freezing_a_worker(client, X, y, after, caplog, victim=-1, expect_recovery=True, **kw):
    """The fit with a worker (``victim``: its index in address order) stopped at its
    ``after + 1``-th group computation, under the tests' step timeout; checks that the
    silent worker was named, dropped and (``expect_recovery``: the runners' recovery,
    not Dask's rerun of a task) recovered from, and replaced."""
    victim = sorted(client.scheduler_info()["workers"])[victim]
    with dask.config.set({"dgd.step-timeout": STEP_TIMEOUT}), caplog.at_level(logging.INFO, logger="dask_dgd"), \
            freezing_worker(client, victim, after=after) as pid:
        est = _fit(client, X, y, **kw)
        _replaced(client, pid)
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"worker {victim} sent no heartbeat" in m and "dgd.step-timeout" in m for m in messages), messages
    if expect_recovery:  # the worker-loss recovery
        assert any("lost worker(s)" in m and victim in m for m in messages), messages
    return est


def _replaced(client, pid, n_workers=3):
    """Wait until the stopped process ``pid`` is gone and a fresh worker has taken its
    place (polled, bounded): dropped as lost, it does not linger, its nanny kills it
    (after giving it 4 s to close) and starts a new one, as after a crash."""
    import time

    import psutil

    deadline = time.monotonic() + 120  # (a load of 14 once took more than 60 s)
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the stopped worker process {pid} is still there 120 s after the fit")
    client.wait_for_workers(n_workers, timeout=60)


@pytest.mark.slow
@pytest.mark.timeout(240)  # without the step timeout: the scheduler's worker-ttl, 5 minutes
def test_a_sync_lbfgs_fit_survives_a_frozen_worker_with_the_same_coefficients(process_client, data, caplog):
    X, y = data
    Xd, yd = process_client.persist([da.from_array(X, chunks=(12_500, -1)), da.from_array(y, chunks=12_500)])
    ref = _fit(process_client, Xd, yd)
    est = _fit_freezing_a_worker(process_client, Xd, yd, 10, caplog)  # mid-fit (ref: 30 iterations)
    # the silent worker was dropped as a killed one would be: the step retried, the same sums
    np.testing.assert_array_equal(est.coef_, ref.coef_)
    np.testing.assert_array_equal(est.intercept_, ref.intercept_)
    assert est.n_iter_ == ref.n_iter_


@pytest.mark.slow
@pytest.mark.timeout(240)  # without the step timeout: the task waited on for ever
def test_steps_as_scheduler_tasks_survive_a_frozen_worker_with_the_same_coefficients(process_client, data,
                                                                                     caplog):
    """``dgd.step-transport="task"``: a step is tasks through the scheduler, and the
    frozen worker's task never finished; its silent worker is dropped after the step
    timeout, Dask reruns the task elsewhere, and the sums are the same."""
    X, y = data
    Xd, yd = process_client.persist([da.from_array(X, chunks=(12_500, -1)), da.from_array(y, chunks=12_500)])
    with dask.config.set({"dgd.step-transport": "task"}):
        ref = _fit(process_client, Xd, yd)
        est = _fit_freezing_a_worker(process_client, Xd, yd, 10, caplog, expect_recovery=False)
    np.testing.assert_array_equal(est.coef_, ref.coef_)
    np.testing.assert_array_equal(est.intercept_, ref.intercept_)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("position", ["interior", "leaf"])
def test_a_runner_frozen_inside_the_tree_is_dropped_with_the_same_coefficients(process_client, data, caplog,
                                                                               position):
    """Fan-in 2 over 3 groups: the driver calls groups 0 and 2, group 0 forwards to group
    1.  A frozen interior runner leaves the driver's call waiting; a frozen leaf leaves
    its (live) parent waiting: either way the silent worker is found among the subtree's
    workers and dropped."""
    X, y = data
    Xd, yd = _spread(process_client, X, y)
    ref = _fit(process_client, Xd, yd, split_every=2)
    assert (ref.history_["tree_depth"] == 2).all()
    est = _fit_freezing_a_worker(process_client, Xd, yd, 10, caplog, victim=0 if position == "interior" else 1,
                                    split_every=2)
    np.testing.assert_array_equal(est.coef_, ref.coef_)
    np.testing.assert_array_equal(est.intercept_, ref.intercept_)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_frozen_worker_holding_scattered_input_ends_the_fit_saying_why(process_client, data):
    X, y = data
    victim = sorted(process_client.scheduler_info()["workers"])[-1]
    with dask.config.set({"dgd.step-timeout": STEP_TIMEOUT}), freezing_worker(process_client, victim, after=3) as pid:
        with pytest.raises(ClusterError, match=r"cannot be recomputed .* pass a dask array"):
            _fit(process_client, X, y)  # in-memory input: scattered to the workers, nowhere else to recompute it from
        _replaced(process_client, pid)


# ----------------------------------------------------------- asynchronous fits
_FREEZE = {}


def _freeze_at_step_30(record):
    """From the driver, once the asynchronous fit is under way: make the worker holding
    the parameter server, or another one (a loop's), as ``_FREEZE["which"]`` says, stop
    itself at its next group computation (progress, not a clock)."""
    from dask_dgd._engine.runtime.faults import set_freeze

    if record["step"] < 30 or "client" not in _FREEZE:
        return
    client = _FREEZE.pop("client")
    (server,) = {w for w, keys in client.run(_server_actors).items() if keys}
    target = server if _FREEZE["which"] == "server" else next(
        w for w in sorted(client.scheduler_info()["workers"]) if w != server)
    _FREEZE["frozen"] = target
    _FREEZE["pid"] = client.run(os.getpid, workers=[target])[target]
    client.run(set_freeze, 0, workers=[target])


@pytest.mark.slow
@pytest.mark.timeout(240)  # without the step timeout: a hang (the loop's or the server's worker never answers)
@pytest.mark.parametrize("which", ["loop", "server"])
def test_an_async_fit_survives_a_frozen_worker_as_a_killed_one(process_client, data, caplog, which):
    """A frozen loop stops pushing (the other groups then wait at the staleness bound)
    and a frozen server answers no poll: the fit hung until someone killed the worker.
    Now the silent worker is dropped after the step timeout and the fit ends as after a
    kill (the loop rerun elsewhere, or the server restarted from the driver's copy)."""
    X, y = data
    Xd, yd = _spread(process_client, X, y)
    ref = _async_fit(process_client, Xd, yd)
    _FREEZE.clear()
    _FREEZE.update(client=process_client, which=which)
    with dask.config.set({"dgd.step-timeout": STEP_TIMEOUT}), caplog.at_level(logging.INFO, logger="dask_dgd"):
        est = _async_fit(process_client, Xd, yd, callbacks=[_freeze_at_step_30])
    target = _FREEZE["frozen"]  # the freeze happened during the fit ...
    _replaced(process_client, _FREEZE["pid"])
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"worker {target} sent no heartbeat" in m and "dgd.step-timeout" in m for m in messages), messages
    if which == "server":
        assert any("lost the parameter server's worker" in m and target in m for m in messages), messages
    assert est.history_["step"].iloc[-1] > 100  # ... and the fit went on well after it
    # as after a kill (test_worker_loss): the undisturbed fit's result within its noise
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=6e-3)


# ----------------------------------------------------------- slow is not silent
def test_a_slow_step_whose_workers_answer_is_waited_for_and_said(client, caplog):
    """Over the limit, but every worker still sends heartbeats (a straggler, here a
    thread of this process): nothing is dropped, a WARNING says the step is waited for,
    and the fit is the undisturbed one."""
    from dask_dgd.testing import straggler

    rng = np.random.default_rng(1)
    X = rng.standard_normal((4_000, 5))
    y = (X[:, 0] > 0).astype(float)
    Xd, yd = da.from_array(X, chunks=(1_000, -1)), da.from_array(y, chunks=1_000)
    ref = _fit(client, Xd, yd, max_iter=3)
    victim = sorted(client.scheduler_info()["workers"])[-1]
    # steps of 0.1-1 s (the straggler sleeps 500 x its compute time, 0.2-2 ms) against a
    # limit of 0.05 s; the silence that gets a worker dropped (4 heartbeats, 2 s) is never
    # reached: the sleeping worker's event loop answers the scheduler
    with dask.config.set({"dgd.step-timeout": 0.05}), caplog.at_level(logging.INFO, logger="dask_dgd"), \
            straggler(client, victim, factor=500):
        est = _fit(client, Xd, yd, max_iter=3)
    messages = [r.getMessage() for r in caplog.records]
    assert any("every worker it waits for still answers the scheduler: waiting on" in m for m in messages), messages
    assert not any("sent no heartbeat" in m or "lost worker(s)" in m for m in messages), messages
    np.testing.assert_array_equal(est.coef_, ref.coef_)


def test_freezing_worker_refuses_a_worker_thread(client):
    worker = sorted(client.scheduler_info()["workers"])[0]
    with pytest.raises(ParameterError, match=r"runs in this process \(a worker thread\): freezing_worker needs a "
                                             r"worker process on this machine"):
        with freezing_worker(client, worker):
            pass


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_freezing_worker_needs_a_count(client, bad):
    worker = sorted(client.scheduler_info()["workers"])[0]
    with pytest.raises(ParameterError, match=rf"after must be an int >= 0; got {bad!r}"):
        with freezing_worker(client, worker, after=bad):
            pass

