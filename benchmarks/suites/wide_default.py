"""Suite ``wide_default``: the default ``LogisticRegression()`` on a hashed click log
(issue 43, item 4: the driver's update of wide models), against scikit-learn's
``SGDClassifier`` and its lbfgs on the same rows, with the per-iteration split of a
dask_dgd fit into the distributed gradient and the driver's update.

Data: ``wide.problems.ZIPF_FIELDS``, the ``wide`` suite's click log (26 Zipf columns,
a hidden logistic model, seeded, generated in code) hashed to 2**20 columns: ``small``
is the issue's log (330,000 rows: 300,000 train, 30,000 held out), ``full`` 1,100,000
rows (1,000,000 train).  ``alpha`` = 1e-4 for every tool (``LogisticRegression``'s
and ``SGDClassifier``'s default; scikit-learn's lbfgs at ``C = 1 / (alpha n)``).

What is timed
-------------
* **dask_dgd**: ``LogisticRegression(client=...)`` with its defaults
  (``param_sharding="auto"``), and ``param_sharding=False`` beside it, on a
  ``LocalCluster`` of ``workers`` (2) single-threaded worker processes, the training
  rows persisted (the chunks generated and hashed on the workers, not timed), after an
  untimed warm-up fit of one iteration per setting (kernels compiled or loaded from
  their cache, the workers' imports done).  The fits run in a fresh Python process
  (``python -c``; its cluster started there), so that ``before`` (a checkout of this
  repository before a change: the environment variable ``DGD_BENCH_BEFORE``, or
  ``before=``) runs in the same way, alternating with the current code, ``repeats``
  times each; the medians are reported.  Per fit:
  its time, its held-out logloss, and from ``history_`` the medians over the steps of
  ``step_time`` (the distributed gradient: the broadcast, the workers' sums and their
  reduction), ``compute_time_max`` (the slowest worker's sums) and ``update_time``
  (the driver between two steps: the L-BFGS direction, line search, records).
* **scikit-learn** ``SGDClassifier(loss="log_loss", alpha=alpha)`` (its defaults: run
  to its own stopping rule) and ``LogisticRegression(solver="lbfgs")``, in this process
  on the in-memory CSR, one thread; median of ``repeats``, one of each in every round
  before the dask_dgd fits.

The target (issue 43): the default fit on 2 workers takes at most 1.0x the time
``SGDClassifier`` takes to its held-out logloss (and reaches that logloss).
"""

import json
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from .._common import md_table, median, suite_params
from .wide.problems import ZIPF_FIELDS, calibrated_intercept, click_log_csr, logloss

__all__ = ["DESCRIPTION", "NAME", "SIZES", "run"]

NAME = "wide_default"
DESCRIPTION = ("The default LogisticRegression() on a 300,000 x 2**20 hashed click log on 2 single-threaded workers "
               "against SGDClassifier and scikit-learn lbfgs; the distributed gradient against the driver's update")

TARGET_SGD_RATIO = 1.0

COMMON = dict(ZIPF_FIELDS, workers=2, repeats=3, shardings=("auto", False), before=None, timeout=900)
SIZES = {
    "small": dict(COMMON),
    "full": dict(COMMON, rows=1_100_000, chunk_rows=100_000),
}

_REPO = str(Path(__file__).resolve().parents[2])

# What a fresh process runs for one dask_dgd fit per sharding: the data on its own
# cluster, the fits, one JSON line of results.  It imports only what every checkout of
# the repository has (the generator of benchmarks/suites/wide/problems.py), so an older
# one runs it too.
_CHILD = r'''
import json, sys, time, warnings
import numpy as np
p = json.loads(sys.argv[1])
import dask_dgd
from dask_dgd import LogisticRegression
from distributed import Client, LocalCluster, futures_of, wait
from benchmarks.suites.wide.problems import calibrated_intercept, click_log_csr, click_log_dask, logloss
if __name__ == "__main__":
    import logging
    cluster = LocalCluster(n_workers=p["workers"], threads_per_worker=1, processes=True, dashboard_address=":0",
                           silence_logs=logging.ERROR)
    client = Client(cluster)
    b = p["intercept"]
    X, y = client.persist(list(click_log_dask(p, "train", intercept=b)))
    wait(futures_of(X) + futures_of(y))
    X_test, y_test = click_log_csr(p, "test", intercept=b)[:2]
    out = {"dask_dgd": dask_dgd.__file__, "fits": []}
    with warnings.catch_warnings():  # warm-up, untimed: the compiled kernels loaded, the workers' imports done
        warnings.simplefilter("ignore")
        for sharding in p["shardings"]:
            LogisticRegression(alpha=p["alpha"], param_sharding=sharding, max_iter=1, client=client).fit(X, y)
    for sharding in p["shardings"]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            m = LogisticRegression(alpha=p["alpha"], param_sharding=sharding, client=client).fit(X, y)
            wall = time.perf_counter() - t0
        h = m.history_
        med = lambda c: float(np.nanmedian(h[c].astype(float))) if c in h and len(h) > 1 else None
        out["fits"].append({"sharding": sharding, "wall": wall, "n_iter": int(m.n_iter_), "steps": int(len(h)),
                            "logloss": logloss(y_test, m.decision_function(X_test)),
                            "step_time": med("step_time"), "compute_time": med("compute_time_max"),
                            "update_time": med("update_time"), "bytes_down": med("bytes_down")})
    client.close()
    cluster.close()
    print("RESULT " + json.dumps(out))
'''


def _dask_dgd_fits(root, p, intercept):
    """One fresh process with ``root`` first on its path: ``{"dask_dgd": file, "fits": [...]}``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, _REPO] + ([os.environ["PYTHONPATH"]]
                                                                     if os.environ.get("PYTHONPATH") else [])))
    args = {k: v for k, v in p.items() if k != "shardings"}
    args.update(intercept=intercept, shardings=list(p["shardings"]))
    with tempfile.TemporaryDirectory() as cwd:  # (not the repository: its checkout would come first)
        done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(args)], env=env, cwd=cwd,
                              capture_output=True, text=True, timeout=p["timeout"])
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"the dask_dgd fit under {root} failed: {done.stderr.strip()[-2000:]}")
    out = json.loads(lines[-1][len("RESULT "):])
    if not Path(out["dask_dgd"]).resolve().is_relative_to(Path(root).resolve()):
        raise RuntimeError(f"the fit meant for {root} imported dask_dgd from {out['dask_dgd']}")
    return out["fits"]


def _sklearn(data, p, r, runs):
    """One fit of each scikit-learn peer (repeat ``r``), appended to ``runs``."""
    from sklearn.linear_model import LogisticRegression, SGDClassifier

    X, y, X_test, y_test = data
    for key, est in (("sgd", SGDClassifier(loss="log_loss", alpha=p["alpha"], random_state=p["seed"] + r)),
                     ("lbfgs", LogisticRegression(C=1.0 / (p["alpha"] * X.shape[0]), max_iter=1000))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            est.fit(X, y)
            wall = time.perf_counter() - t0
        runs[key].append({"wall": wall, "logloss": logloss(y_test, est.decision_function(X_test)),
                          "n_iter": int(np.max(est.n_iter_))})


def benchmark(p, log):
    intercept = calibrated_intercept(p)
    X, y = click_log_csr(p, "train", intercept=intercept)[:2]
    X_test, y_test = click_log_csr(p, "test", intercept=intercept)[:2]
    log(f"click log: {X.shape[0]:,} train + {X_test.shape[0]:,} held-out rows x 2**{int(math.log2(X.shape[1]))}, "
        f"{X.nnz / X.shape[0]:.1f} non-zeros a row")
    result = {"n_train": int(X.shape[0]), "n_test": int(X_test.shape[0])}
    roots = {"current": _REPO} if not p["before"] else {"current": _REPO, "before": str(p["before"])}
    fits = {name: [] for name in roots}
    peers = {"sgd": [], "lbfgs": []}
    for r in range(p["repeats"]):
        # each round: the peers, then the checkouts, so that the machine's load falls on all alike
        _sklearn((X, y, X_test, y_test), p, r, peers)
        for k, v in peers.items():
            log(f"scikit-learn {k}: {v[-1]['wall']:.2f}s, held-out logloss {v[-1]['logloss']:.5f}, "
                f"{v[-1]['n_iter']} iterations")
        for name, root in roots.items():
            got = _dask_dgd_fits(root, p, intercept)
            fits[name].append(got)
            for f in got:
                log(f"{name} param_sharding={f['sharding']!r}: {f['wall']:.1f}s, "
                    f"{f['n_iter']} iterations, held-out logloss {f['logloss']:.5f}, step {f['step_time']:.3f}s, "
                    f"driver update {f['update_time']:.3f}s")
    result["sklearn"] = {k: {f: median([v[f] for v in vs]) for f in ("wall", "logloss", "n_iter")}
                         for k, vs in peers.items()}
    result["dask_dgd"] = {name: [{k: (median([run[i][k] for run in runs]) if isinstance(runs[0][i][k], float)
                                      else runs[0][i][k]) for k in runs[0][i]} for i in range(len(p["shardings"]))]
                          for name, runs in fits.items()}
    return result


def _ms(x):
    return None if x is None else f"{x * 1e3:.0f} ms"


def verdicts(result, p):
    sgd = result["sklearn"]["sgd"]
    default = next(f for f in result["dask_dgd"]["current"] if f["sharding"] == "auto")
    ratio = default["wall"] / sgd["wall"]
    reached = default["logloss"] <= sgd["logloss"]
    met = reached and ratio <= TARGET_SGD_RATIO
    why = "" if met else (f": {ratio:.1f}x its time" + ("" if reached else
                                                        f", and a held-out logloss of {default['logloss']:.5f} "
                                                        f"against its {sgd['logloss']:.5f}"))
    return [f"- Default fit on {p['workers']} workers <= {TARGET_SGD_RATIO:.1f}x SGDClassifier's time to its held-out "
            f"logloss ({ratio:.2f}x): **{'met' if met else 'missed'}**{why}"]


def report(result, p):
    sk = result["sklearn"]
    rows = []
    for name, fits in result["dask_dgd"].items():
        for f in fits:
            label = f"dask_dgd LogisticRegression(param_sharding={f['sharding']!r})" + (
                " (default)" if f["sharding"] == "auto" else "") + ("" if name == "current" else f", {name}")
            rows.append([label, f"{p['workers']} workers x 1 thread",
                         f"{f['wall']:.2f} s", f"{f['logloss']:.5f}", f"{f['wall'] / sk['sgd']['wall']:.1f}",
                         str(f["n_iter"]), _ms(f["step_time"]), _ms(f["compute_time"]), _ms(f["update_time"])])
    for k, label in (("sgd", "scikit-learn SGDClassifier(loss='log_loss')"),
                     ("lbfgs", "scikit-learn LogisticRegression(solver='lbfgs')")):
        v = sk[k]
        rows.append([label, "1 (in process)", f"{v['wall']:.2f} s", f"{v['logloss']:.5f}",
                     f"{v['wall'] / sk['sgd']['wall']:.1f}", str(v["n_iter"]), None, None, None])
    table = md_table(["tool", "cores", f"fit (median of {p['repeats']})", "held-out logloss",
                      "time / SGDClassifier", "iterations (epochs)", "gradient step / iteration",
                      "slowest worker's sums", "driver update / iteration"], rows)
    return table


def run(size, *, repeats=None, log=print, **overrides):
    p = suite_params(NAME, SIZES, size, repeats, overrides)
    if p["before"] is None and os.environ.get("DGD_BENCH_BEFORE"):
        p["before"] = os.environ["DGD_BENCH_BEFORE"]
    result = benchmark(p, log)
    result["verdicts"] = verdicts(result, p)
    table = report(result, p)
    markdown = (f"{result['n_train']:,} training rows, {result['n_test']:,} held out, 2**"
                f"{int(math.log2(p['n_features']))} hashed columns, alpha={p['alpha']:g}"
                + (f"; `before`: {p['before']}" if p["before"] else "") + "\n\n" + table + "\n\n"
                + "\n".join(result["verdicts"]))
    return {"title": f"Default LogisticRegression on a {p['rows']:,}-row click log, 2**"
                     f"{int(math.log2(p['n_features']))} hashed columns",
            "markdown": markdown, "table": table + "\n\n" + "\n".join(result["verdicts"]),
            "data": {"parameters": p, **result}}
