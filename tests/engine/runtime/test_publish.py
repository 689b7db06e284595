"""The driver's side of the live training page (dask_dgd/_engine/runtime/publish.py):
what a fit on a cluster sends the scheduler on the event topic ``"dask_dgd"``, and that
a scheduler without the page's plugin costs the fit nothing but one log line."""

import logging
import math
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client
from processes import wait_for_file

from dask_dgd._engine.runtime import publish
from dask_dgd._engine.runtime.publish import BATCH, RECORDS_OP, TOPIC, Publisher, page_url, plain
from dask_dgd.exceptions import ParameterError
from dask_dgd.linear_model import LogisticRegression

REPO = str(Path(__file__).resolve().parents[3])


@pytest.fixture
def page(monkeypatch):
    """This process's memory of the schedulers it registered the page on, emptied."""
    monkeypatch.setattr(publish, "_pages", {})


@pytest.fixture
def page_client(make_cluster, page):
    """A fresh in-process cluster of 2 workers (its own event log) and its client."""
    return make_cluster(2, processes=False)


def _messages(client, kind=None):
    msgs = [m for _, m in client.get_events(TOPIC)]
    return [m for m in msgs if kind is None or m["kind"] == kind]


@pytest.fixture
def batches(page_client):
    """The batches of records the scheduler receives (through the plugin's own
    operation, not the event log), in order: the page registered first, its handler
    wrapped (a fit's registration of the idempotent plugin keeps it)."""
    from dask_dgd.dashboard import DashboardPlugin

    page_client.register_plugin(DashboardPlugin())
    scheduler, got = page_client.cluster.scheduler, []
    inner = scheduler.handlers[RECORDS_OP]

    def spy(msg=None):
        got.append(msg)
        return inner(msg=msg)

    scheduler.handlers[RECORDS_OP] = spy
    return got


def _published(batches, fit):
    """The records of ``fit`` as the scheduler received them, in order."""
    out = []
    for m in batches:
        if m["fit"] == fit:
            assert m["first"] == len(out), "a batch skipped or repeated records"
            out.extend(m["records"])
    return out


def _chunked(X):
    return da.from_array(X, chunks=(500, -1))


def _missing(v):
    return v is None or (isinstance(v, float) and math.isnan(v))


def _same(a, b):
    """Equal values; None and NaN alike (history_ is a DataFrame: a float column's None is NaN)."""
    return a == b or (_missing(a) and _missing(b))


def test_plain_makes_numpy_scalars_and_tuples_python():
    out = plain({"a": np.float64(1.5), "b": np.int32(3), "c": (1, np.float32(2.0)), "d": np.array([1, 2]),
                 "e": None, "f": float("nan"), "g": np.bool_(True), 4: "x"})
    assert out == {"a": 1.5, "b": 3, "c": [1, 2.0], "d": [1, 2], "e": None, "f": out["f"], "g": True, "4": "x"}
    assert math.isnan(out["f"])
    assert [type(out[k]) for k in "abg"] == [float, int, bool]  # exact types: msgpack's check is by type


def test_a_fit_publishes_exactly_its_history(page_client, batches, logistic_data):
    X, y = logistic_data
    est = LogisticRegression(max_iter=8, tol=0, client=page_client).fit(_chunked(X), y)
    (start,) = _messages(page_client, "start")
    assert start["protocol"] == 1 and start["estimator"] == "LogisticRegression"
    assert start["max_iter"] == 8 and start["n_groups"] >= 1 and len(start["workers"]) == start["n_groups"]
    assert set(start["workers"]) <= set(page_client.scheduler_info()["workers"])
    assert start["pid"] == os.getpid()
    sent = _published(batches, start["fit"])
    assert not _messages(page_client, "records")  # (records stay out of the event log)
    rows = est.history_.to_dict("records")
    assert len(sent) == len(rows) == len(est.history_)
    for got, row in zip(sent, rows):
        assert list(got) == list(est.history_.columns)
        want = plain(row)
        assert [k for k in want if not _same(got[k], want[k])] == [], (got, want)
    (end,) = _messages(page_client, "end")
    assert end["fit"] == start["fit"] and end["status"] == "done"


def test_the_scheduler_page_holds_the_fits_history(page_client, logistic_data):
    from dask_dgd import dashboard

    X, y = logistic_data
    est = LogisticRegression(max_iter=6, tol=0, client=page_client).fit(_chunked(X), y)
    (fit,) = dashboard.records(page_client)["fits"]
    assert fit["status"] == "done" and fit["estimator"] == "LogisticRegression"
    assert len(fit["records"]) == len(est.history_)
    for got, row in zip(fit["records"], est.history_.to_dict("records")):
        want = plain(row)
        assert list(got) == list(want)
        assert [k for k in want if not _same(got[k], want[k])] == [], (got, want)


def test_a_fit_stopped_by_a_callback_ends_stopped(page_client, batches, logistic_data):
    X, y = logistic_data
    est = LogisticRegression(max_iter=50, tol=0, callbacks=[lambda rec: rec["step"] >= 3],
                             client=page_client).fit(_chunked(X), y)
    (end,) = _messages(page_client, "end")
    assert end["status"] == "stopped"
    assert len(_published(batches, end["fit"])) == len(est.history_)


def test_a_fit_that_fails_ends_with_the_error(page_client, batches, logistic_data):
    X, y = logistic_data

    def fail(rec):
        if rec["step"] >= 2:
            raise RuntimeError("callback broke at step 2")

    with pytest.raises(RuntimeError, match="callback broke at step 2"):
        LogisticRegression(max_iter=50, tol=0, callbacks=[fail], client=page_client).fit(_chunked(X), y)
    (end,) = _messages(page_client, "end")
    assert end["status"] == "error" and "callback broke at step 2" in end["message"]
    assert len(_published(batches, end["fit"])) == 2


def test_the_page_is_announced_once_per_scheduler(page_client, logistic_data, caplog):
    X, y = logistic_data
    with caplog.at_level(logging.INFO, logger="dask_dgd"):
        for _ in range(2):
            LogisticRegression(max_iter=2, tol=0, client=page_client).fit(_chunked(X), y)
    said = [r.getMessage() for r in caplog.records if "live training page" in r.getMessage()]
    assert said == [f"live training page: {page_url(page_client)}"]
    assert page_url(page_client).endswith("/dgd") and page_url(page_client).startswith("http")
    assert len(_messages(page_client, "start")) == 2


def test_the_dashboard_config_off_sends_and_registers_nothing(page_client, logistic_data):
    X, y = logistic_data
    with dask.config.set({"dgd.dashboard": False}):
        LogisticRegression(max_iter=3, tol=0, client=page_client).fit(_chunked(X), y)
    assert _messages(page_client) == []
    assert "dask_dgd" not in page_client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.plugins))


def test_a_bad_dashboard_config_says_what_it_takes(page_client, logistic_data):
    X, y = logistic_data
    with dask.config.set({"dgd.dashboard": "yes"}), \
            pytest.raises(ParameterError, match=r"dgd.dashboard must be True or False; got 'yes'"):
        LogisticRegression(max_iter=3, tol=0, client=page_client).fit(_chunked(X), y)


class _Ops:
    """A fake client's ``scheduler``: every operation is a ``log_event`` of its name."""

    def __init__(self, client):
        self.client = client

    def __getattr__(self, op):
        return lambda msg: self.client.log_event(op, msg)


class _Fake:
    """What a Publisher uses of a client, its sends going to ``log_event``."""

    id = "fake-client"

    @property
    def scheduler(self):
        return _Ops(self)

    def sync(self, fn, **kwargs):
        return fn(**kwargs)


class _Refusing(_Fake):
    """A client whose every event is refused (a scheduler gone, a message too big)."""

    def __init__(self):
        self.calls = 0

    def log_event(self, topic, msg):
        self.calls += 1
        raise OSError("the scheduler went away")


def test_a_failing_send_stops_publishing_and_is_logged_once(caplog):
    client, records = _Refusing(), [{"step": i} for i in range(3)]
    with caplog.at_level(logging.INFO, logger="dask_dgd"):
        pub = Publisher(client, records, {"estimator": "X"})
        pub.flush()
        pub.close("done")
    assert client.calls == 1  # the start failed: nothing more was tried
    said = [r.getMessage() for r in caplog.records if "stopped sending" in r.getMessage()]
    assert len(said) == 1 and "OSError: the scheduler went away" in said[0]


class _Stuck(_Fake):
    """A client whose sends hang until released (a scheduler gone: up to the connect timeout)."""

    def __init__(self):
        self.release, self.entered, self.calls = threading.Event(), threading.Event(), 0

    def log_event(self, topic, msg):
        self.calls += 1
        self.entered.set()
        self.release.wait()
        raise OSError("timed out connecting to the scheduler")


def test_a_stuck_scheduler_does_not_hold_the_end_of_the_fit(caplog):
    client = _Stuck()
    try:
        with caplog.at_level(logging.INFO, logger="dask_dgd"):
            pub = Publisher(client, [{"step": 1}], {"estimator": "X"})
            assert client.entered.wait(60), "the publisher's thread never sent its start"
            pub.close("error", "the scheduler is gone", timeout=0.05)  # returns with the start still in flight
            assert pub.failed
    finally:
        client.release.set()
        pub._thread.join()
    said = [r.getMessage() for r in caplog.records if r.name == "dask_dgd"]
    assert len(said) == 1 and "did not take fit" in said[0] and "the live page misses them" in said[0]
    assert client.calls == 1


class _Recording(_Fake):
    def __init__(self):
        self.msgs = []

    def log_event(self, topic, msg):
        assert topic == (RECORDS_OP if msg["kind"] == "records" else TOPIC)  # (records: the plugin's operation)
        self.msgs.append(msg)


def test_a_long_backlog_goes_in_batches_in_order():
    client, records = _Recording(), [{"step": i, "loss": np.float64(i)} for i in range(2 * BATCH + 5)]
    pub = Publisher(client, records, {"estimator": "X", "max_iter": np.int64(5)})
    pub.close("done", "reached max_iter")
    kinds = [m["kind"] for m in client.msgs]
    assert kinds == ["start", "records", "records", "records", "end"]
    assert client.msgs[0]["max_iter"] == 5 and type(client.msgs[0]["max_iter"]) is int
    batches = client.msgs[1:-1]
    assert [m["first"] for m in batches] == [0, BATCH, 2 * BATCH]
    assert [r["step"] for m in batches for r in m["records"]] == list(range(2 * BATCH + 5))
    assert client.msgs[-1]["status"] == "done" and client.msgs[-1]["message"] == "reached max_iter"


# --------------------------------------------------- a scheduler without the plugin
_BLOCKER = '''
"""Preloaded into the scheduler: dask_dgd's page cannot be imported there."""
import sys


class _Blocked:
    def find_spec(self, name, path=None, target=None):
        if name == "dask_dgd.dashboard" or name.startswith("dask_dgd.dashboard."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked for this test)")
        return None


sys.modules.pop("dask_dgd.dashboard", None)
sys.meta_path.insert(0, _Blocked())
'''


@pytest.fixture
def blind_scheduler(tmp_path, page):
    """A `dask scheduler` process that cannot import ``dask_dgd.dashboard`` (a preloaded
    import blocker) and one `dask worker`; yields a client.  Both die at the end."""
    dask_cmd = shutil.which("dask", path=os.path.dirname(sys.executable)) or shutil.which("dask")
    if dask_cmd is None:
        pytest.skip("the `dask` command is not installed")
    blocker = tmp_path / "block_dgd_dashboard.py"
    blocker.write_text(textwrap.dedent(_BLOCKER))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)}
    scheduler_file = tmp_path / "scheduler.json"
    procs, client = [], None
    log = open(tmp_path / "cluster.log", "w")
    try:
        scheduler = subprocess.Popen(
            [dask_cmd, "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", ":0",
             "--preload", str(blocker), "--scheduler-file", str(scheduler_file)],
            stdout=log, stderr=subprocess.STDOUT, env=env)
        procs.append(scheduler)
        wait_for_file(scheduler, scheduler_file, "scheduler")
        procs.append(subprocess.Popen(
            [dask_cmd, "worker", "--scheduler-file", str(scheduler_file), "--nworkers", "1", "--nthreads", "1",
             "--no-dashboard", "--local-directory", str(tmp_path)], stdout=log, stderr=subprocess.STDOUT, env=env))
        client = Client(scheduler_file=str(scheduler_file), timeout="20s", set_as_default=False)
        client.wait_for_workers(1, timeout=120)
        yield client
    finally:
        if client is not None:
            client.close(timeout=10)
        for proc in procs[::-1]:
            if proc.poll() is None:
                proc.kill()
        for proc in procs:
            proc.wait(timeout=60)
        log.close()


@pytest.mark.slow
def test_a_scheduler_that_cannot_import_the_page_costs_one_log_line(blind_scheduler, logistic_data, caplog):
    X, y = logistic_data
    with caplog.at_level(logging.INFO, logger="dask_dgd"):
        fits = [LogisticRegression(max_iter=3, tol=0, client=blind_scheduler).fit(_chunked(X), y) for _ in range(2)]
    assert all(len(est.history_) > 0 for est in fits)
    said = [r for r in caplog.records if "no live training page" in r.getMessage()]
    address = blind_scheduler.scheduler.address
    assert len(said) == 1, [r.getMessage() for r in said]
    assert said[0].levelno == logging.WARNING  # (shown without any logging set up)
    said = said[0].getMessage()
    assert said.startswith(f"the scheduler at {address} cannot import dask_dgd (")
    assert "blocked for this test" in said and "their records are in each fitted model's history_" in said
    assert not any(r.getMessage().startswith("live training page:") for r in caplog.records)
    assert blind_scheduler.get_events(TOPIC) == ()


class _Linked:
    def __init__(self, link, services):
        self.dashboard_link, self._services = link, services

    def scheduler_info(self):
        return {"services": self._services}


@pytest.mark.parametrize("link, services, url", [
    ("http://h:8787/status", {"dashboard": 8787}, "http://h:8787/dgd"),
    ("http://h:1/jupyter/proxy/1/status", {"dashboard": 1}, "http://h:1/jupyter/proxy/1/dgd"),  # a prefix
    ("http://h:8787/status", {}, None),  # no dashboard: Dask's link names the default port anyway
])
def test_the_page_address_is_the_dashboard_link_with_dgd(link, services, url):
    assert page_url(_Linked(link, services)) == url


def test_a_pointwise_climate_fit_publishes_its_passes(page_client, batches):
    xr = pytest.importorskip("xarray")
    from dask_dgd.climate import ClimateRegressor

    rng = np.random.default_rng(0)
    T, Y, X = 48, 2, 3
    a, index = rng.normal(size=(T, Y, X)), rng.normal(size=T)
    counts = rng.poisson(np.exp(0.3 + 0.5 * a + 0.3 * index[:, None, None])).astype(float)
    dims = ("time", "lat", "lon")
    ds = xr.Dataset({"a": (dims, a), "index": (("time",), index), "n": (dims, counts)},
                    coords={"time": xr.date_range("2000-01-01", periods=T, freq="MS", calendar="noleap",
                                                  use_cftime=True),
                            "lat": ("lat", [-30.0, 30.0], {"units": "degrees_north"}), "lon": [0.0, 20.0, 40.0]})
    model = ClimateRegressor(["a", "index"], "n", model="pointwise", family="poisson",
                             client=page_client).fit(ds.chunk({"time": 24}))
    (start,) = _messages(page_client, "start")
    (end,) = _messages(page_client, "end")
    assert start["mode"] == "sync" and end["fit"] == start["fit"] and end["status"] == "done"
    assert sorted(start["workers"]) == sorted(page_client.scheduler_info()["workers"])  # (the page samples them)
    assert len(_published(batches, start["fit"])) == len(model.history_) == model.n_iter_


class _Changing(dict):
    """A record whose reading fails (as a dict a callback changes while it is read would)."""

    def items(self):
        raise RuntimeError("dictionary changed size during iteration")


def test_a_record_that_cannot_be_read_stops_the_records_but_not_the_end(caplog):
    client = _Recording()
    with caplog.at_level(logging.INFO, logger="dask_dgd"):
        pub = Publisher(client, [{"step": 1}, _Changing(step=2)], {"estimator": "X"})
        pub.close("done")
    assert [m["kind"] for m in client.msgs] == ["start", "end"]
    said = [r.getMessage() for r in caplog.records if "stopped sending" in r.getMessage()]
    assert len(said) == 1 and "dictionary changed size" in said[0]


def test_a_scheduler_started_anew_at_the_same_address_gets_the_page_again(make_cluster, page):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for _ in range(2):
        c = make_cluster(1, processes=False, host="127.0.0.1", scheduler_port=port)
        assert publish.register_page(c)
        assert "dask_dgd" in c.cluster.scheduler.plugins  # (not only remembered: registered on this one)
        c.close()
        c.cluster.close()
