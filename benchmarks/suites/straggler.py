"""Training modes with and without a straggler: time to a target loss, rounds, bytes.

Issue target (training modes): with one of two workers slowed to half speed (a sleep
per computation equal to its compute time, ``dask_dgd.testing.straggler(factor=1)``),
async or local SGD reaches the target loss at least 1.5x faster than synchronous
training; without the straggler, no slower than 1.1x synchronous.  The rounds of
communication and the bytes moved are reported per mode.

Method.  Logistic regression, full-batch steps in every mode (``solver="gd"``, plain
gradient descent with the automatic step), from the same start, on the same persisted
data, the modes interleaved within each repeat:

* sync: one distributed gradient per update (one round: broadcast, compute, reduce);
* local: each group takes ``local_steps`` full passes over its own rows per round,
  then the parameters are averaged;
* async: each group pushes the gradient of its whole shard to the parameter server,
  which steps along the aggregate of the groups' latest gradients on every arrival
  (one round per push: the push and the returned parameters).

With full batches the recorded loss is the objective itself: at the current
parameters (sync), at the broadcast parameters (local), or the aggregate of the
groups' latest objectives at the parameters each computed on (async: slightly stale,
so an over-estimate while the loss falls).  Time to target: seconds since the fit
started (setup included) of the first record at or below ``optimum x (1 + rel_gap)``;
the final objective of every fit is also evaluated on the driver on all rows.
"""

import time
import warnings

import numpy as np

from .._common import gather_to_driver, make_data, md_table, median, start_cluster, suite_params
from .modes import objective, optimum

NAME = "straggler"
DESCRIPTION = (
    "Sync, local SGD and async training to a target loss, with and without a 2x straggler "
    "(time, rounds of communication, bytes)"
)

SIZES = {
    "small": dict(
        rows=400_000, features=50, chunks=16, workers=2, rel_gap=1e-3, max_iter=40,
        local_steps=4, factor=1.0, repeats=3, alpha=1e-4, seed=0,
    ),
    "full": dict(
        rows=2_000_000, features=100, chunks=16, workers=2, rel_gap=1e-3, max_iter=40,
        local_steps=4, factor=1.0, repeats=3, alpha=1e-4, seed=0,
    ),
}

MODES = ("sync", "local", "async")
TARGET_SPEEDUP = 1.5  # under the straggler: async or local >= 1.5x faster than sync
TARGET_NO_STRAGGLER = 1.1  # without it: no slower than 1.1x sync


def _estimator(client, p, mode):
    from dask_dgd import LogisticRegression

    extra = {"local_steps": p["local_steps"]} if mode == "local" else {}
    return LogisticRegression(
        alpha=p["alpha"], solver="gd", max_iter=p["max_iter"], tol=0.0, mode=mode,
        # a fixed budget: no stop on a stalled objective (an asynchronous one can stall for
        # a few epochs on a busy machine, and would end before it reached the target)
        n_iter_no_change=p["max_iter"],
        random_state=p["seed"], client=client, **extra,
    )


def reached(history, target, mode):
    """Time, rounds and bytes until the first record at or below ``target`` (None if never)."""
    hit = np.flatnonzero(history["loss"].to_numpy(dtype=float) <= target)
    if not len(hit):
        return None
    upto = history.iloc[: hit[0] + 1]
    return {
        "time": float(upto["time"].iloc[-1]),
        "records": int(len(upto)),
        "rounds": rounds(upto, mode),
        "bytes": int(upto["comm_bytes"].sum()),
    }


def rounds(history, mode):
    """Rounds of communication in these records: exchanges between the driver (or the
    server) and the groups that carried parameters.  A sync step or a local round is
    one (all groups at once); an asynchronous record counts its pushes (the first
    record of local and async fits is the synchronous start)."""
    if mode != "async":
        return int(len(history))
    return 1 + int(sum(sum(u) for u in history["updates_per_group"].iloc[1:]))


def fit_once(client, X, y, Xn, yn, p, mode, target):
    est = _estimator(client, p, mode)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tol=0: a fixed budget never "converges"
        t0 = time.perf_counter()
        est.fit(X, y)
        wall = time.perf_counter() - t0
    h = est.history_
    out = {
        "wall": wall,
        "records": int(len(h)),
        "rounds": rounds(h, mode),
        "bytes": int(h["comm_bytes"].sum()),
        "objective": objective(Xn, yn, est.coef_, est.intercept_, p["alpha"]),
        "reached": reached(h, target, mode),
        "staleness_max": int(h["staleness_max"].max()),
        "delay_max": int(h["delay_max"].max()),
        # optimizer steps per group (local and async: after the synchronous start)
        "updates": [int(u) for u in np.sum(
            np.array(h["updates_per_group"].iloc[0 if mode == "sync" else 1:].tolist()), axis=0)],
        "compute_time_max": median(h["compute_time_max"].astype(float).tolist()),
    }
    return out


def _summary(runs):
    hits = [r["reached"] for r in runs if r["reached"] is not None]
    if len(hits) < len(runs):
        return {"time": None, "rounds": None, "bytes": None, "misses": len(runs) - len(hits)}
    return {
        "time": median([h["time"] for h in hits]),
        "rounds": median([h["rounds"] for h in hits]),
        "bytes": median([h["bytes"] for h in hits]),
        "misses": 0,
    }


def _fmt_bytes(n):
    if n is None:
        return None
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def run(size, *, repeats=None, log=print, **overrides):
    p = suite_params(NAME, SIZES, size, repeats, overrides)
    W = p["workers"]
    cluster, client = start_cluster(W)
    results = {False: {m: [] for m in MODES}, True: {m: [] for m in MODES}}
    try:
        from dask_dgd.testing import straggler

        client.wait_for_workers(W)
        X, y = make_data(client, p["rows"], p["features"], p["chunks"], p["seed"])
        Xn, yn = gather_to_driver(X, y)
        best = optimum(Xn, yn, p)
        target = best * (1 + p["rel_gap"])
        log(f"optimum {best:.10f}, target {target:.10f}")
        slow = sorted(client.scheduler_info()["workers"])[-1]
        with warnings.catch_warnings():  # untimed warm-up: imports, kernels, caches
            warnings.simplefilter("ignore")
            for mode in MODES:
                _estimator(client, {**p, "max_iter": 1}, mode).fit(X, y)
        for _ in range(p["repeats"]):
            for slowed in (False, True):
                for mode in MODES:
                    if slowed:
                        with straggler(client, slow, p["factor"]):
                            r = fit_once(client, X, y, Xn, yn, p, mode, target)
                    else:
                        r = fit_once(client, X, y, Xn, yn, p, mode, target)
                    results[slowed][mode].append(r)
                    t = r["reached"]["time"] if r["reached"] else float("nan")
                    log(f"{'straggler' if slowed else 'no straggler'} {mode}: target at {t:.2f}s, fit {r['wall']:.2f}s")
    finally:
        client.close()
        cluster.close()

    summary = {s: {m: _summary(results[s][m]) for m in MODES} for s in (False, True)}
    ratios = {}
    for s in (False, True):
        base = summary[s]["sync"]["time"]
        ratios[s] = {
            m: (summary[s][m]["time"] / base if base and summary[s][m]["time"] else None) for m in MODES
        }
    # the verdict: a mode that wins under the straggler and holds up without it
    verdict_rows, met = [], False
    for m in ("local", "async"):
        r_slow, r_fast = ratios[True][m], ratios[False][m]
        ok = (r_slow is not None and r_fast is not None and r_slow <= 1 / TARGET_SPEEDUP
              and r_fast <= TARGET_NO_STRAGGLER)
        met = met or ok
        verdict_rows.append([
            m, None if r_slow is None else f"{1 / r_slow:.2f}x", None if r_fast is None else f"{r_fast:.2f}",
            "yes" if ok else "no",
        ])

    head = ["straggler", "mode", "median time to target", "x sync", "rounds to target",
            "bytes to target", "median fit wall (budget)", "rounds (budget)", "final objective gap",
            "updates per group", "max staleness", "max delay", "median slowest compute"]
    rows_t = []
    for s in (False, True):
        for m in MODES:
            runs, sm = results[s][m], summary[s][m]
            rows_t.append([
                "2x" if s else "none", m,
                None if sm["time"] is None
                else f"{sm['time']:.2f} s" + (f" ({sm['misses']} missed)" if sm["misses"] else ""),
                None if ratios[s][m] is None else f"{ratios[s][m]:.2f}",
                None if sm["rounds"] is None else f"{sm['rounds']:.0f}",
                _fmt_bytes(sm["bytes"]),
                f"{median([r['wall'] for r in runs]):.2f} s",
                f"{median([r['rounds'] for r in runs]):.0f}",
                f"{median([r['objective'] for r in runs]) - best:.2e}",
                "/".join(str(u) for u in runs[0]["updates"]),
                runs[0]["staleness_max"], runs[0]["delay_max"],
                f"{median([r['compute_time_max'] for r in runs]) * 1e3:.0f} ms",
            ])
    table = md_table(head, rows_t)
    verdict_t = md_table(
        ["mode", f"speed-up over sync under the straggler (target >= {TARGET_SPEEDUP})",
         f"time / sync without it (target <= {TARGET_NO_STRAGGLER})", "met"],
        verdict_rows,
    )
    reading = (
        f"{p['rows']:,} x {p['features']} float64 in {p['chunks']} blocks on {W} single-threaded "
        f"workers; logistic regression alpha={p['alpha']:g}, plain gradient descent with the "
        f"automatic step, full batches, {p['max_iter']} epochs per fit (local: "
        f"{p['local_steps']} local passes per round); the straggler is the worker of the last "
        f"group, sleeping {p['factor']:g}x its compute time after every computation. Target: "
        f"objective <= optimum x (1 + {p['rel_gap']:g}) = {target:.8f} (optimum {best:.8f}, "
        f"scikit-learn lbfgs, tol 1e-10, untimed). Medians of {p['repeats']} repeats, the six "
        f"runs of a repeat back to back. Rounds: exchanges carrying parameters (a sync step or "
        f"a local round: all groups at once; async: one per push). Bytes: parameters and "
        f"gradients, 8 per entry per message, both ways."
    )
    markdown = "\n\n".join([reading, table, "### Targets", verdict_t,
                            f"Target met (async or local): {'yes' if met else 'no'}."])
    return {
        "title": "Training modes under a straggler: sync, local SGD, async",
        "markdown": markdown,
        "table": "\n\n".join([table, verdict_t]),
        "data": {
            "parameters": p,
            "optimum": best,
            "target": target,
            "runs": {("straggler" if s else "none"): results[s] for s in (False, True)},
            "summary": {("straggler" if s else "none"): summary[s] for s in (False, True)},
            "ratios": {("straggler" if s else "none"): ratios[s] for s in (False, True)},
            "met": met,
        },
    }
