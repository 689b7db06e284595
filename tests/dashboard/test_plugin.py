"""The scheduler plugin on a real cluster: its JSON, its page, the nav tab, replay,
worker sampling and loss, and a `dask scheduler --preload dask_dgd.dashboard` process.

Messages are logged by hand on the ``"dask_dgd"`` topic (the driver's side is tested in
tests/engine/runtime/test_publish.py); waits poll a condition until a deadline."""

import json
import math
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from bokeh.document import Document
from bokeh.models import Plot as figure_type

from dask_dgd.dashboard import TOPIC, DashboardPlugin, dashboard_url, records
from dask_dgd.dashboard._page import make_document
from dask_dgd.exceptions import InputError
from dask_dgd.testing import _die_with_parent, _stop

REPO = str(Path(__file__).resolve().parents[2])


def wait_for(condition, what, timeout=60):
    """Poll ``condition()`` until it returns something true (returned); fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: still not the case after {timeout} s")
        time.sleep(0.05)


def get(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.status, r.headers["Content-Type"], r.read().decode()


def base_of(client):
    return client.dashboard_link.rsplit("/", 1)[0]


def fits(client, query=""):
    status, ctype, body = get(base_of(client) + "/dgd/records.json" + query)
    assert status == 200 and ctype == "application/json"
    return json.loads(body)["fits"]


def start_msg(fit, workers=(), **fields):
    return {"kind": "start", "protocol": 1, "fit": fit, "estimator": "LogisticRegression", "mode": "sync",
            "max_iter": 50, "max_staleness": None, "n_groups": 2, "workers": list(workers), "driver": "here",
            "pid": os.getpid(), "wall": time.time(), **fields}


def recs(*steps, **fields):
    return [{"step": s, "iteration": s, "loss": 1.0 / s, "grad_norm": 0.1, "time": 0.01 * s, **fields} for s in steps]


@pytest.fixture
def client(make_cluster):
    c = make_cluster(2, processes=False)
    c.register_plugin(DashboardPlugin())
    return c


def test_records_json_serves_fits_and_filters(client):
    client.log_event(TOPIC, start_msg("a"))
    client.log_event(TOPIC, {"kind": "records", "fit": "a", "first": 0, "records": recs(1, 2, 3)})
    client.log_event(TOPIC, start_msg("b"))
    client.log_event(TOPIC, {"kind": "records", "fit": "b", "first": 0, "records": recs(1)})
    out = fits(client)
    assert [f["fit"] for f in out] == ["b", "a"]
    assert out[1]["records"] == recs(1, 2, 3) and out[1]["status"] == "running"
    (only,) = fits(client, "?fit=a&since=2")
    assert only["fit"] == "a" and only["records"] == recs(3) and only["next"] == 3
    assert fits(client, "?fit=unknown") == []
    assert records(client, fit="a", since=1)["fits"][0]["records"] == recs(2, 3)


def test_nan_in_records_is_null_in_the_json(client):
    client.log_event(TOPIC, start_msg("a"))
    client.log_event(TOPIC, {"kind": "records", "fit": "a", "first": 0,
                             "records": recs(1, loss=math.nan, grad_norm=math.inf)})
    body = get(base_of(client) + "/dgd/records.json")[2]
    assert "NaN" not in body and "Infinity" not in body
    (fit,) = json.loads(body)["fits"]
    assert (fit["records"][0]["loss"], fit["records"][0]["grad_norm"]) == (None, None)
    assert [f["kind"] for f in fit["flags"]] == ["divergence"]


def test_a_bad_since_is_a_400_naming_it(client):
    with pytest.raises(urllib.error.HTTPError, match="since must be an integer record index; got 'x'") as err:
        get(base_of(client) + "/dgd/records.json?since=x")
    assert err.value.code == 400


def test_page_is_a_bokeh_document_in_dasks_template_and_every_page_has_the_tab(client):
    status, ctype, page = get(base_of(client) + "/dgd")
    assert status == 200 and ctype.startswith("text/html")
    assert "static/js/bokeh.min.js" in page and "Bokeh.embed.embed_items" in page
    assert 'href="dgd"' in page and 'href="status"' in page  # Dask's navigation bar, with our tab
    # Dask's private API: if this fails, distributed changed how its nav bar is built
    assert 'href="dgd"' in get(base_of(client) + "/status")[2]
    assert dashboard_url(client) == base_of(client) + "/dgd"


def test_registering_twice_keeps_one_plugin_and_its_records(client):
    client.log_event(TOPIC, start_msg("a"))
    client.register_plugin(DashboardPlugin())
    scheduler = client.cluster.scheduler
    first = scheduler.plugins["dask_dgd"]
    client.register_plugin(DashboardPlugin())
    assert scheduler.plugins["dask_dgd"] is first  # (the first instance: its samples and flags stay)
    assert [n for n, p in scheduler.plugins.items() if isinstance(p, DashboardPlugin)] == ["dask_dgd"]
    assert [f["fit"] for f in fits(client)] == ["a"]


def test_a_fit_whose_driver_leaves_ends_as_an_error(client):
    from distributed import Client

    driver = Client(client.cluster, set_as_default=False)
    try:
        driver.log_event(TOPIC, start_msg("gone", client=driver.id))
        driver.log_event(TOPIC, {"kind": "records", "fit": "gone", "first": 0, "records": recs(1, 2)})
        client.log_event(TOPIC, start_msg("stays", client=client.id))
    finally:
        driver.close()
    gone = wait_for(lambda: [f for f in fits(client) if f["fit"] == "gone" and f["status"] != "running"],
                    "the fit of the client that left ended")
    assert gone[0]["status"] == "error" and "client left the scheduler" in gone[0]["message"]
    assert [f["status"] for f in fits(client) if f["fit"] == "stays"] == ["running"]


_WITHOUT_BOKEH = """
import json, logging, sys, urllib.error, urllib.request
sys.modules["distributed.dashboard.scheduler"] = None  # (Dask's own check for Bokeh)
sys.modules["dask_dgd.dashboard._page"] = None
from distributed import Client, LocalCluster
from dask_dgd.dashboard import DashboardPlugin
with LocalCluster(n_workers=1, processes=False, dashboard_address=":0", silence_logs=logging.ERROR,
                  scheduler_kwargs={"http_prefix": "/dask"}) as cluster, Client(cluster) as client:
    client.register_plugin(DashboardPlugin())
    root = f"http://127.0.0.1:{cluster.scheduler.http_server.port}"
    out = {}
    for path in ("/dask/dgd/records.json", "/dask/dgd", "/dask/dgd/", "/dgd/records.json"):
        try:
            with urllib.request.urlopen(root + path, timeout=30) as r:
                out[path] = [r.status, r.read().decode()]
        except urllib.error.HTTPError as err:
            out[path] = [err.code, ""]
    print(json.dumps(out))
"""


def test_without_bokeh_the_plain_page_and_the_json_keep_the_prefix():
    # (in a process of its own: Dask remembers a failed Bokeh import for later clusters)
    done = subprocess.run([sys.executable, "-c", _WITHOUT_BOKEH], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              p for p in (REPO, os.environ.get("PYTHONPATH")) if p)})
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    status, body = out["/dask/dgd/records.json"]
    assert status == 200 and json.loads(body)["fits"] == []
    for page in ("/dask/dgd", "/dask/dgd/"):  # (the link is absolute: the same from both)
        status, body = out[page]
        assert status == 200 and 'href="/dask/dgd/records.json"' in body and "no Bokeh" in body
    assert out["/dgd/records.json"][0] == 404  # (under the prefix only)


def test_records_of_a_scheduler_without_the_plugin_names_its_address(make_cluster):
    c = make_cluster(1, processes=False)
    address = c.scheduler.address
    with pytest.raises(InputError, match=f"the scheduler at {address} runs no dask_dgd dashboard plugin; "
                                         r"register it with client.register_plugin\(DashboardPlugin\(\)\)"):
        records(address)


def test_events_logged_before_registration_are_replayed(make_cluster):
    c = make_cluster(2, processes=False)
    c.log_event(TOPIC, start_msg("early"))
    c.log_event(TOPIC, {"kind": "records", "fit": "early", "first": 0, "records": recs(1, 2)})
    with pytest.raises(urllib.error.HTTPError):  # no plugin yet: no page
        get(base_of(c) + "/dgd/records.json")
    c.register_plugin(DashboardPlugin())
    (fit,) = fits(c)
    assert fit["fit"] == "early" and fit["records"] == recs(1, 2)


def test_records_without_the_plugin_is_an_input_error(make_cluster):
    c = make_cluster(1, processes=False)
    with pytest.raises(InputError, match=r"runs no dask_dgd dashboard plugin; register it with "
                                         r"client.register_plugin\(DashboardPlugin\(\)\)"):
        records(c)


def test_workers_of_running_fits_are_sampled_and_a_lost_one_is_flagged(client):
    workers = sorted(client.scheduler_info()["workers"])
    client.log_event(TOPIC, start_msg("a", workers))
    client.log_event(TOPIC, start_msg("elsewhere", ["tcp://10.0.0.1:1"]))
    sampled = wait_for(lambda: (m := fits(client, "?fit=a")[0]["worker_metrics"]) and len(m) == 2 and m,
                       "cpu and memory samples of both workers of the running fit")
    for series in sampled.values():
        assert len(series["time"]) == len(series["cpu"]) == len(series["memory"]) >= 1
        assert series["memory"][0] > 0
    client.retire_workers([workers[1]])
    flags = wait_for(lambda: fits(client, "?fit=a")[0]["flags"], "a 'worker lost' flag after retiring a worker")
    assert [f["kind"] for f in flags] == ["worker lost"] and workers[1] in flags[0]["message"]
    assert fits(client, "?fit=elsewhere")[0]["flags"] == []


def test_unregistering_stops_sampling_and_the_routes_answer_404(client):
    plugin = client.cluster.scheduler.plugins["dask_dgd"]
    assert plugin._sampler is not None and plugin._sampler.is_running()
    client.unregister_scheduler_plugin("dask_dgd")
    wait_for(lambda: plugin._sampler is None, "the unregistered plugin's sampler stopped")
    with pytest.raises(urllib.error.HTTPError, match="404"):
        get(base_of(client) + "/dgd/records.json")
    client.register_plugin(DashboardPlugin())  # the routes find the new plugin
    assert fits(client) == []


def test_without_bokeh_dgd_is_a_plain_page_pointing_at_the_json(make_cluster, monkeypatch):
    monkeypatch.setitem(sys.modules, "dask_dgd.dashboard._page", None)  # import fails: as without bokeh
    c = make_cluster(1, processes=False)
    c.register_plugin(DashboardPlugin())
    status, _, page = get(base_of(c) + "/dgd")
    assert status == 200 and "has no Bokeh" in page and 'href="/dgd/records.json"' in page
    assert fits(c) == []


def test_the_dashboard_prefix_is_honoured(make_cluster):
    c = make_cluster(1, processes=False, scheduler_kwargs={"http_prefix": "/dask"})
    c.register_plugin(DashboardPlugin())
    base = base_of(c) + "/dask"  # (Dask's dashboard_link leaves the prefix out)
    assert 'href="dgd"' in get(base + "/status")[2]
    assert json.loads(get(base + "/dgd/records.json")[2])["fits"] == []
    assert "static/js/bokeh.min.js" in get(base + "/dgd")[2]
    with pytest.raises(urllib.error.HTTPError, match="404"):
        get(base_of(c) + "/dgd/records.json")


def test_scheduler_kwargs_preload_adds_the_plugin_before_any_client_registers_it(make_cluster):
    c = make_cluster(1, processes=False, scheduler_kwargs={"preload": ["dask_dgd.dashboard"]})
    c.log_event(TOPIC, start_msg("p"))
    assert [f["fit"] for f in fits(c)] == ["p"]


# ------------------------------------------------------------------ the Bokeh document
class _Scheduler:
    """What make_document reads from a scheduler: its plugins."""

    def __init__(self, plugin):
        self.plugins = {"dask_dgd": plugin}


def _page():
    plugin = DashboardPlugin()
    doc = Document()
    make_document(_Scheduler(plugin), "/", doc)
    (callback,) = doc.session_callbacks
    return plugin, doc, callback.callback, lambda name: doc.select_one({"name": name})


def test_page_has_the_named_models_and_waits_for_a_fit():
    _, _, update, model = _page()
    for name in ("dgd-fit", "dgd-header", "dgd-steps", "dgd-workers", "dgd-flags", "dgd-flag-rows"):
        assert model(name) is not None, name
    update()
    assert "No dask_dgd fit yet" in model("dgd-header").text and model("dgd-fit").options == []


def test_page_streams_new_records_of_the_newest_running_fit_and_resets_on_a_switch():
    plugin, _, update, model = _page()
    plugin.store.apply(start_msg("old"))
    plugin.store.apply({"kind": "records", "fit": "old", "first": 0, "records": recs(1, 2, 3, 4)})
    plugin.store.apply(start_msg("new"))
    plugin.store.apply({"kind": "end", "fit": "new", "status": "done"})
    plugin.store.apply(start_msg("run"))
    plugin.store.apply({"kind": "records", "fit": "run", "first": 0,
                        "records": recs(1, 2, compute_time_max=0.5, compute_time_median=0.1, bytes_up=10,
                                        bytes_up_raw=40)})
    update()
    assert model("dgd-fit").value == "run"  # the newest running fit
    assert [o[0] for o in model("dgd-fit").options] == ["run", "new", "old"]
    assert "LogisticRegression · running" in model("dgd-fit").options[0][1]
    steps = model("dgd-steps")
    assert steps.data["step"] == [1.0, 2.0] and steps.data["ratio"] == [4.0, 4.0]
    assert math.isnan(steps.data["val_score"][0])
    assert model("dgd-flag-rows").data["kind"] == ["straggler"]  # step 2's: step 1 is the workers' warm-up
    plugin.store.apply({"kind": "records", "fit": "run", "first": 1, "records": recs(2, 3)})
    update()
    assert steps.data["step"] == [1.0, 2.0, 3.0]  # only the new record was added
    assert "steps: 3" in model("dgd-header").text and "/ 50" in model("dgd-header").text
    model("dgd-fit").value = "old"
    assert model("dgd-steps").data["step"] == [1.0, 2.0, 3.0, 4.0]
    assert model("dgd-flag-rows").data["kind"] == []


def test_page_objective_on_a_linear_axis_once_it_is_not_positive_and_val_score_once_there():
    plugin, doc, update, _ = _page()
    plugin.store.apply(start_msg("run"))
    plugin.store.apply({"kind": "records", "fit": "run", "first": 0, "records": recs(1)})
    update()

    def shown(title):
        return {type(p.y_scale).__name__: p.visible for p in doc.select({"type": figure_type})
                if p.title.text == title}

    assert shown("Objective") == {"LogScale": True, "LinearScale": False}
    assert shown("Validation score") == {"LinearScale": False}
    plugin.store.apply({"kind": "records", "fit": "run", "first": 1, "records": recs(2, loss=-0.5, val_score=0.9)})
    update()
    assert shown("Objective") == {"LogScale": False, "LinearScale": True}
    assert shown("Validation score") == {"LinearScale": True}


def test_page_shows_worker_samples():
    plugin, _, update, model = _page()
    plugin.store.apply(start_msg("run", ["tcp://a:1"]))
    plugin.store.add_metrics(100.0, {"tcp://a:1": (55.0, 1e9)})
    update()
    assert model("dgd-workers").data["worker"] == ["tcp://a:1"]
    assert model("dgd-workers").data["cpu"] == [[55.0]] and model("dgd-workers").data["time"] == [[100000.0]]


def test_page_header_counts_halvings_and_records_at_the_staleness_bound():
    plugin, _, update, model = _page()
    plugin.store.apply(start_msg("run", mode="async", max_staleness=2))
    rows = [*recs(1, 2, staleness_max=2, lr_halvings=0), *recs(3, staleness_max=2, lr_halvings=2)]
    plugin.store.apply({"kind": "records", "fit": "run", "first": 0, "records": rows})
    update()
    header = model("dgd-header").text
    assert "learning rate halved: 2×" in header and "at max_staleness: 3 of 3 records" in header
    assert model("dgd-flag-rows").data["kind"] == ["staleness", "divergence"]


def test_page_header_escapes_what_the_messages_say():
    plugin, _, update, model = _page()
    plugin.store.apply(start_msg("run", estimator="A<B>&C", mode="<i>sync</i>"))
    plugin.store.apply({"kind": "records", "fit": "run", "first": 0, "records": recs(1)})
    plugin.store.apply({"kind": "end", "fit": "run", "status": "error",
                        "message": "KilledWorker: ('x', <WorkerState 'tcp://1.2.3.4:1'>) & <img src=x onerror=alert(1)>"})
    update()
    header = model("dgd-header").text
    assert "<b>A&lt;B&gt;&amp;C</b> (&lt;i&gt;sync&lt;/i&gt;)" in header
    assert ("KilledWorker: (&#x27;x&#x27;, &lt;WorkerState &#x27;tcp://1.2.3.4:1&#x27;&gt;) &amp; "
            "&lt;img src=x onerror=alert(1)&gt;") in header
    assert "<img" not in header and "<WorkerState" not in header and "<i>" not in header


def test_page_shows_a_huge_eta_as_over_1000_hours_and_one_failing_part_does_not_freeze_the_rest(
        monkeypatch, caplog):
    from dask_dgd.dashboard import _page as page_module

    plugin, _, update, model = _page()
    plugin.store.apply(start_msg("run", max_iter=10**18))  # no datetime.timedelta holds its ETA
    plugin.store.apply({"kind": "records", "fit": "run", "first": 0, "records": recs(1, 2)})
    update()
    assert "ETA: &gt; 1000 h" in model("dgd-header").text
    assert model("dgd-steps").data["step"] == [1.0, 2.0]

    def broken(fit):
        raise RuntimeError("header broke")

    monkeypatch.setattr(page_module, "_header", broken)
    caplog.set_level("WARNING", logger=page_module.__name__)
    for first, step in ((2, 3), (3, 4)):
        plugin.store.apply({"kind": "records", "fit": "run", "first": first, "records": recs(step)})
        update()
    assert model("dgd-steps").data["step"] == [1.0, 2.0, 3.0, 4.0]  # the plots go on
    (warning,) = [r for r in caplog.records if r.name == page_module.__name__]  # logged once
    assert "updating its header failed" in warning.getMessage() and "header broke" in warning.exc_text


def test_page_worker_plots_go_on_once_the_sample_deques_are_full(monkeypatch):
    from dask_dgd.dashboard import _store

    monkeypatch.setattr(_store, "MAX_SAMPLES", 2)
    plugin, _, update, model = _page()
    plugin.store.apply(start_msg("run", ["tcp://a:1"]))
    for t in range(1, 5):
        plugin.store.add_metrics(float(t), {"tcp://a:1": (float(t), 1e9)})
        update()
        assert model("dgd-workers").data["cpu"] == [[float(v) for v in range(max(1, t - 1), t + 1)]]


def test_page_resends_the_records_when_the_store_thins_them(monkeypatch):
    from dask_dgd.dashboard import _store

    monkeypatch.setattr(_store, "MAX_RECORDS", 10)
    plugin, _, update, model = _page()
    plugin.store.apply(start_msg("run", max_iter=100))
    for first in range(0, 16, 4):
        plugin.store.apply({"kind": "records", "fit": "run", "first": first, "records": recs(*range(first + 1,
                                                                                                    first + 5))})
        update()
    served = [float(r["step"]) for r in plugin.store.fits_json()["fits"][0]["records"]]
    assert len(served) < 16 and model("dgd-steps").data["step"] == served


def test_page_follows_the_newest_running_fit_unless_the_user_picked_one():
    plugin, _, update, model = _page()
    select = model("dgd-fit")
    plugin.store.apply(start_msg("fold1"))
    update()
    assert select.value == "fold1"
    plugin.store.apply({"kind": "end", "fit": "fold1", "status": "done"})
    update()
    assert select.value == "fold1"  # finished, and nothing newer runs: it stays
    plugin.store.apply(start_msg("fold2"))
    plugin.store.apply({"kind": "records", "fit": "fold2", "first": 0, "records": recs(1)})
    update()
    assert select.value == "fold2" and model("dgd-steps").data["step"] == [1.0]
    select.value = "fold1"  # the user's pick: kept while newer fits start
    plugin.store.apply(start_msg("fold3"))
    update()
    assert select.value == "fold1" and model("dgd-steps").data["step"] == []
    select.value = "fold3"  # picking the newest running fit follows again
    plugin.store.apply(start_msg("fold4"))
    update()
    assert select.value == "fold4"


# ------------------------------------------------------------------ dask scheduler --preload
def test_dask_scheduler_preload_serves_the_page_before_any_fit(tmp_path):
    from distributed import Client

    dask_cmd = shutil.which("dask", path=os.path.dirname(sys.executable)) or shutil.which("dask")
    if dask_cmd is None:
        pytest.skip("the `dask` command is not installed")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)}
    scheduler_file = tmp_path / "scheduler.json"
    with open(tmp_path / "scheduler.log", "w") as log:
        proc = subprocess.Popen(
            _die_with_parent([dask_cmd, "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address",
                              "127.0.0.1:0", "--preload", "dask_dgd.dashboard", "--scheduler-file",
                              str(scheduler_file)]),
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    client = None
    try:
        wait_for(lambda: proc.poll() is not None or (scheduler_file.exists() and scheduler_file.stat().st_size),
                 "the scheduler's file", timeout=120)
        assert proc.poll() is None, (tmp_path / "scheduler.log").read_text()
        client = Client(scheduler_file=str(scheduler_file), timeout="30s", set_as_default=False)
        assert fits(client) == []  # the page is there before any fit
        assert client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.plugins["dask_dgd"].__module__) \
            == "dask_dgd.dashboard._plugin"
        client.register_plugin(DashboardPlugin())  # as a fit does: a no-op
        client.log_event(TOPIC, start_msg("cli"))
        client.log_event(TOPIC, {"kind": "records", "fit": "cli", "first": 0, "records": recs(1, 2)})
        (fit,) = fits(client)
        assert fit["fit"] == "cli" and fit["records"] == recs(1, 2)
        assert 'href="dgd"' in get(base_of(client) + "/dgd")[2]
    finally:
        if client is not None:
            client.close(timeout=10)
        _stop([proc], timeout=30)
