"""The live training page in a real browser: headless Chromium (Debian's, driven by
Playwright) loads ``<dashboard>/dgd`` while a fit runs on a LocalCluster, sees the
plots' data grow as the fit steps, and reaches the page in one click from Dask's own
``/status`` page.

The fit is paced by the test, not by the clock: its callback waits at every step for a
permit the test hands out once the page has shown the rows so far, so "the plots update"
is the row count of the page's ``dgd-steps`` source growing.  The waits are Playwright's
``wait_for_function`` (a condition polled by the browser, with a generous limit that
only turns a hang into a failure).
"""

import json
import logging
import threading
import time
import urllib.error
import urllib.request

import pytest

#: Limit of one wait for the page (ms): far above what any step needs, only a hang hits it.
WAIT_MS = 120_000

#: JavaScript: the Bokeh model named ``name`` in any document on the page, or null.
FIND = """(name) => {
    if (!window.Bokeh || !Bokeh.documents) return null;
    for (const doc of Bokeh.documents) {
        const m = doc.get_model_by_name(name);
        if (m) return m;
    }
    return null;
}"""

#: JavaScript: the rows of the ``dgd-steps`` source (-1 while it is not on the page).
ROWS = f"""() => {{
    const src = ({FIND})("dgd-steps");
    if (!src) return -1;
    const col = src.data instanceof Map ? src.data.get("step") : src.data["step"];
    return col ? col.length : 0;
}}"""

#: JavaScript: one column of the ``dgd-steps`` source as a plain array.
COLUMN = f"""(name) => {{
    const src = ({FIND})("dgd-steps");
    const col = src.data instanceof Map ? src.data.get(name) : src.data[name];
    return Array.from(col);
}}"""


class Gate:
    """A fit callback that holds the fit at every step until the test gives it a permit
    (``release(n)``: n more steps); ``finish()`` lets it end at its next step.  A test
    that dies leaves it waiting at most ``patience`` seconds before it stops the fit."""

    def __init__(self, patience=600):
        self.permits = threading.Semaphore(0)
        self.done = threading.Event()
        self.patience = patience

    def __call__(self, record):
        if self.done.is_set():
            return True
        if not self.permits.acquire(timeout=self.patience):
            return True
        return self.done.is_set()

    def release(self, n):
        for _ in range(n):
            self.permits.release()

    def finish(self):
        self.done.set()
        self.permits.release()


def _records(base):
    """``<dashboard>/dgd/records.json`` (no fits while the fit has not registered the page yet: 404)."""
    try:
        with urllib.request.urlopen(base + "/dgd/records.json", timeout=30) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return {"fits": []}
        raise


def _wait_for(condition, what, limit=WAIT_MS / 1000):
    """Poll ``condition()`` until it returns something truthy (returned); fail naming
    ``what`` past ``limit`` seconds (a hang guard, not a timing assertion)."""
    deadline = time.monotonic() + limit
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what} after {limit:.0f} s")
        threading.Event().wait(0.05)


@pytest.fixture
def paced_fit(make_cluster):
    """A LogisticRegression fit on a 2-worker cluster, in a background thread, held at
    every step by a :class:`Gate`; yields ``(client, base, gate, thread)`` and ends the
    fit at the fixture's end."""
    from dask_dgd import LogisticRegression
    from dask_dgd.datasets import make_classification

    client = make_cluster(2, processes=False, silence_logs=logging.ERROR)
    base = client.dashboard_link.rsplit("/", 1)[0]
    X, y = make_classification(4_000, 5, chunks=1_000, random_state=0)
    X, y = client.persist([X, y])
    gate = Gate()
    est = LogisticRegression(solver="gd", max_iter=10_000, tol=0, n_iter_no_change=10_000, callbacks=[gate],
                             client=client)
    failure = []

    def fit():
        try:
            est.fit(X, y)
        except BaseException as err:  # reported by the fixture's end
            failure.append(err)

    thread = threading.Thread(target=fit, name="paced-fit", daemon=True)
    thread.start()
    try:
        yield client, base, gate, est
    finally:
        gate.finish()
        thread.join(timeout=300)
    assert not thread.is_alive(), "the paced fit did not end after gate.finish()"
    assert not failure, f"the paced fit raised {failure[0]!r}"


@pytest.mark.slow
@pytest.mark.browser
def test_page_shows_the_running_fit_and_updates(page, paced_fit):  # (page first: no cluster when it skips)
    client, base, gate, est = paced_fit
    # the fit has published its first record: the page and its JSON exist now
    fits = _wait_for(lambda: [f for f in _records(base)["fits"] if f["records"]], "the fit's first record")
    (fit,) = fits
    assert fit["status"] == "running" and fit["estimator"] == "LogisticRegression"

    page.goto(base + "/dgd")
    page.wait_for_function(f"() => ({ROWS})() >= 1", timeout=WAIT_MS)
    first = page.evaluate(ROWS)
    # the fit selector lists the running fit
    options = page.evaluate(f"() => JSON.stringify(({FIND})('dgd-fit').options)")
    assert fit["fit"] in options, options

    # three more steps: the page's data gains the rows, in step order, as published
    gate.release(3)
    page.wait_for_function(f"() => ({ROWS})() >= {first + 3}", timeout=WAIT_MS)
    steps = page.evaluate(COLUMN, "step")
    assert steps == list(range(1, len(steps) + 1))
    published = _records(base)["fits"][0]["records"]
    assert [r["step"] for r in published[: len(steps)]] == steps
    losses = page.evaluate(COLUMN, "loss")
    assert losses == pytest.approx([r["loss"] for r in published[: len(steps)]], rel=1e-12)
    # the flags table is on the page
    assert page.evaluate(f"() => ({FIND})('dgd-flags') !== null")


@pytest.mark.slow
@pytest.mark.browser
def test_page_is_one_click_from_the_dashboards_status_page(page, paced_fit):
    client, base, gate, est = paced_fit
    _wait_for(lambda: [f for f in _records(base)["fits"] if f["records"]], "the fit's first record")
    # the address the Client prints, then the dashboard's own navigation bar
    page.goto(client.dashboard_link)
    page.click('a[href="dgd"]', timeout=WAIT_MS)
    page.wait_for_url("**/dgd", timeout=WAIT_MS)
    page.wait_for_function(f"() => ({ROWS})() >= 1", timeout=WAIT_MS)


#: JavaScript: every element of the page, into the shadow roots Bokeh renders in.
ELEMENTS = """() => {
    const out = [];
    const walk = (root) => {
        for (const el of root.querySelectorAll("*")) {
            out.push(el);
            if (el.shadowRoot) walk(el.shadowRoot);
        }
    };
    walk(document);
    return out;
}"""


@pytest.mark.browser
def test_page_shows_an_error_message_as_text_never_as_html(page, make_cluster):
    from dask_dgd.dashboard import TOPIC, DashboardPlugin

    client = make_cluster(1, processes=False, silence_logs=logging.ERROR)
    client.register_plugin(DashboardPlugin())
    message = "KilledWorker: ('x', <WorkerState 'tcp://1.2.3.4:1'>) & <img src=x onerror=\"window.PWNED=1\">"
    client.log_event(TOPIC, {"kind": "start", "fit": "f1", "estimator": "LogisticRegression", "mode": "sync"})
    client.log_event(TOPIC, {"kind": "records", "fit": "f1", "first": 0, "records": [{"step": 1, "loss": 1.0}]})
    client.log_event(TOPIC, {"kind": "end", "fit": "f1", "status": "error", "message": message})
    page.goto(client.dashboard_link.rsplit("/", 1)[0] + "/dgd")
    # the header, as rendered: its text shows the message as written (a raw-HTML header
    # drops "<WorkerState ...>" as an unknown tag and turns "<img ...>" into an image)
    page.wait_for_function(f"() => ({ELEMENTS})().some(el => el.textContent.includes('status: error'))",
                           timeout=WAIT_MS)
    shown = page.evaluate(f"() => ({ELEMENTS})().filter(el => el.textContent.includes('status: error'))"
                          ".map(el => el.textContent)")
    assert any(message in text for text in shown), shown
    images = page.evaluate(f"() => ({ELEMENTS})().filter(el => el.tagName === 'IMG').map(el => el.getAttribute('src'))")
    assert "x" not in images, images
    assert page.evaluate("() => window.PWNED") is None


def test_without_chromium_the_reason_names_the_fix(monkeypatch, tmp_path, why_no_browser):
    monkeypatch.setenv("DGD_CHROMIUM", str(tmp_path / "no-such-chromium"))
    why = why_no_browser()
    assert why.startswith("no Chromium: apt-get install chromium, or set DGD_CHROMIUM")
    assert "no-such-chromium" in why and "is not an executable file" in why
