"""The user guide's picture of the live training page, ``docs/img/dashboard-dgd.png``.

``python -m benchmarks.dashboard_screenshot [OUT.png]``: starts a LocalCluster of 3
single-threaded workers, makes one of them a 4x straggler
(``dask_dgd.testing.straggler``), runs an asynchronous ``LogisticRegression``
(``max_staleness=2``: the fast groups reach the bound) in a thread, opens
``<dashboard>/dgd`` in a headless Chromium (Debian's ``chromium`` or ``$DGD_CHROMIUM``,
driven by Playwright) once the page has records, flags and a few worker samples, takes a
full-page screenshot, then stops the fit.  Needs ``pip install playwright`` and
``apt-get install chromium`` (never ``playwright install``).
"""

import argparse
import json
import logging
import os
import shutil
import sys
import threading
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "docs" / "img" / "dashboard-dgd.png"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", "--hide-scrollbars"]


def chromium_path():
    return os.environ.get("DGD_CHROMIUM") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").is_file()
                                              else shutil.which("chromium"))


def records(base):
    try:
        with urllib.request.urlopen(base + "/dgd/records.json", timeout=30) as resp:
            return json.loads(resp.read())["fits"]
    except urllib.error.HTTPError as err:
        if err.code == 404:  # the fit has not registered the page yet
            return []
        raise


def wait_for(condition, what, limit=300.0):
    deadline = time.monotonic() + limit
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up waiting for {what} after {limit:.0f} s")
        threading.Event().wait(0.2)
    return value


def ready(base, min_records, min_samples):
    """The running fit, once it has ``min_records`` records, a flag and ``min_samples``
    cpu samples of every worker."""
    fits = [f for f in records(base) if f["status"] == "running"]
    if not fits:
        return None
    fit = fits[0]
    samples = [len(m["time"]) for m in fit["worker_metrics"].values()]
    if len(fit["records"]) >= min_records and fit["flags"] and samples and min(samples) >= min_samples:
        return fit
    return None


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.dashboard_screenshot", description=__doc__)
    p.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT)
    p.add_argument("--min-records", type=int, default=150)
    p.add_argument("--min-samples", type=int, default=8)
    args = p.parse_args(argv)
    if chromium_path() is None:
        raise SystemExit("no Chromium: apt-get install chromium, or set DGD_CHROMIUM")
    from distributed import Client, LocalCluster
    from playwright.sync_api import sync_playwright

    from dask_dgd import LogisticRegression
    from dask_dgd.datasets import make_classification
    from dask_dgd.testing import straggler

    stop = threading.Event()
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        base = client.dashboard_link.rsplit("/", 1)[0]
        X, y = make_classification(60_000, 20, chunks=10_000, random_state=0)
        X, y = client.persist([X, y])
        est = LogisticRegression(mode="async", max_staleness=2, solver="sgd", batch_size=2_000, max_iter=10_000,
                                 tol=0, n_iter_no_change=10_000, callbacks=[lambda rec: stop.is_set()],
                                 client=client)
        failure = []

        def fit():
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    est.fit(X, y)
            except BaseException as err:  # reported below
                failure.append(err)

        slow = sorted(client.scheduler_info()["workers"])[-1]
        with straggler(client, slow, factor=3.0):
            thread = threading.Thread(target=fit, daemon=True)
            thread.start()
            try:
                fit_json = wait_for(lambda: ready(base, args.min_records, args.min_samples),
                                    "the fit's records, a flag and the workers' samples")
                with sync_playwright() as pw:
                    browser = pw.chromium.launch(executable_path=chromium_path(), args=FLAGS, headless=True)
                    try:
                        page = browser.new_page(viewport={"width": 1400, "height": 1000})
                        page.goto(base + "/dgd")
                        page.wait_for_function("""() => window.Bokeh && Bokeh.documents.some(d => {
                            const s = d.get_model_by_name("dgd-steps");
                            return s && s.get_length() > 0; })""", timeout=120_000)
                        page.wait_for_timeout(1500)  # (a picture: let the first render settle)
                        args.out.parent.mkdir(parents=True, exist_ok=True)
                        page.screenshot(path=str(args.out), full_page=True, type="png")
                    finally:
                        browser.close()
            finally:
                stop.set()
                thread.join(timeout=300)
        if failure:
            raise failure[0]
    flags = sorted({f["kind"] for f in fit_json["flags"]})
    print(f"{args.out}: {args.out.stat().st_size / 1024:.0f} KiB; fit {fit_json['fit'][:8]} with "
          f"{len(fit_json['records'])} records, flags {flags}", file=sys.stderr)


if __name__ == "__main__":
    main()
