"""Peak resident memory of each worker during fits, against its share of X.

Issue target: peak resident memory per worker at most 1.3x its share of the data (no
hidden copies of X).

On a cluster of ``workers`` single-threaded worker processes (Linux only: the suite
reads ``/proc/self/status`` inside each worker with ``client.run``):

1. the worker's resident set (``VmRSS``) is read on the fresh worker, after importing
   what the fits use (dask.array, SciPy, scikit-learn, dask_dgd), and after an untimed
   warm-up fit on a few rows: *idle*;
2. X (rows x features float64, ``chunks`` blocks) and y are generated on the workers and
   persisted; ``VmRSS`` again: *with data*; each worker's share of X is the bytes of the
   blocks it holds (``client.who_has``), next to the even share ``X.nbytes / workers``;
3. for each solver (lbfgs, gd, sgd) the kernel's peak counter is reset (``"5"`` written
   to ``/proc/self/clear_refs``: ``VmHWM`` restarts from the current RSS), the fit runs,
   and ``VmHWM`` is the worker's peak RSS during that fit.

Reported per worker and fit: peak / even share (the target, <= 1.3), (peak - idle) /
even share (the data-dependent part: about 1 plus y plus whatever copies the fit makes),
and the number of copies of X's blocks the workers hold after the fit (``who_has``:
each block once means no replica was left behind).  The idle RSS (the worker process
with dask.array, which loads pandas, pyarrow and xarray, SciPy, scikit-learn, dask_dgd)
is a fixed ~0.3 GB per worker: at ``--size small`` it is twice the share and the target
ratio says little there; the full size (0.8 GB per worker) is what the target is about.
"""

import time
import warnings

from .._common import make_data, md_table, start_cluster, suite_params

NAME = "memory"
DESCRIPTION = "Peak resident memory per worker during lbfgs, gd and sgd fits, against its share of X"

SIZES = {
    "small": dict(
        rows=400_000, features=100, chunks=16, workers=2, solvers=("lbfgs", "gd", "sgd"),
        max_iter=20, sgd_epochs=2, batch_size=16384, repeats=1, seed=0,
    ),
    "full": dict(
        rows=2_000_000, features=100, chunks=16, workers=2, solvers=("lbfgs", "gd", "sgd"),
        max_iter=20, sgd_epochs=2, batch_size=16384, repeats=1, seed=0,
    ),
}

TARGET = 1.3
MiB = 2**20


# ----------------------------------------------------------------------------- on the workers
def _proc_status():
    """VmRSS and VmHWM of this process, bytes."""
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key = line.split(":", 1)[0]
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(line.split()[1]) * 1024
    return out


def _reset_peak():
    """Restart the kernel's peak-RSS counter (VmHWM) from the current RSS."""
    import gc

    gc.collect()
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    return _proc_status()


def _import_modules():
    """Import what the fits use (dask.array, SciPy, scikit-learn, dask_dgd); RSS after."""
    import dask.array  # noqa: F401
    import scipy.optimize  # noqa: F401
    import sklearn.linear_model  # noqa: F401

    import dask_dgd.linear_model  # noqa: F401

    return _proc_status()


def _held(keys, dask_worker=None):
    """(index, nbytes) of each of ``keys`` in this worker's memory."""
    out = []
    for i, k in enumerate(keys):
        try:
            a = dask_worker.data[k]
        except KeyError:
            continue
        out.append((i, int(getattr(a, "nbytes", 0))))
    return out


# ----------------------------------------------------------------------------- data


def _x_keys(X):
    return [k[0] if isinstance(k, list) else k for k in X.__dask_keys__()]


def census(client, X):
    """Per worker: bytes of X's blocks held; in total: block copies and blocks."""
    keys = _x_keys(X)
    held = client.run(_held, keys)
    return {
        "bytes": {w: sum(n for _, n in v) for w, v in held.items()},
        "blocks": {w: len(v) for w, v in held.items()},
        "copies": sum(len(v) for v in held.values()),
        "n_blocks": len(keys),
    }


def _estimator(client, solver, p):
    from dask_dgd import LogisticRegression

    if solver == "sgd":
        return LogisticRegression(
            solver="sgd", optimizer="adam", batch_size=p["batch_size"], max_iter=p["sgd_epochs"],
            tol=0.0, random_state=p["seed"], client=client,
        )
    return LogisticRegression(
        solver=solver, max_iter=p["max_iter"], tol=0.0 if solver == "gd" else 1e-4, client=client
    )


def _fit(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # capped iterations are fine here
        t0 = time.perf_counter()
        est.fit(X, y)
    return time.perf_counter() - t0


# ----------------------------------------------------------------------------- suite
def _mib(x):
    return None if x is None else f"{x / MiB:,.0f} MiB"


def run(size, *, repeats=None, log=print, **overrides):
    p = suite_params(NAME, SIZES, size, repeats, overrides)
    repeats = p["repeats"]
    W = p["workers"]

    cluster, client = start_cluster(W)
    try:
        client.wait_for_workers(W)
        fresh = client.run(_proc_status)  # a bare Dask worker: before any task ran there
        imported = client.run(_import_modules)
        # Warm-up on a few rows: imports and first-call allocations, then drop the data.
        Xw, yw = make_data(client, 64 * p["chunks"], p["features"], p["chunks"], p["seed"] + 1)
        _fit(_estimator(client, "lbfgs", {**p, "max_iter": 2}), Xw, yw)
        del Xw, yw
        time.sleep(0.5)  # let the scheduler release the warm-up keys
        idle = client.run(_reset_peak)
        log("idle RSS: " + ", ".join(f"{v['VmRSS'] / MiB:.0f} MiB" for v in idle.values()))

        t0 = time.perf_counter()
        X, y = make_data(client, p["rows"], p["features"], p["chunks"], p["seed"])
        gen_time = time.perf_counter() - t0
        with_data = client.run(_proc_status)
        start = census(client, X)
        even = X.nbytes / W
        log(f"data {p['rows']} x {p['features']} ({X.nbytes / MiB:.0f} MiB) in {gen_time:.1f}s; "
            f"blocks per worker {sorted(start['blocks'].values())}")

        fits = []
        for solver in p["solvers"]:
            peaks = dict.fromkeys(idle, 0)
            walls = []
            for _ in range(repeats):
                client.run(_reset_peak)
                walls.append(_fit(_estimator(client, solver, p), X, y))
                for w, st in client.run(_proc_status).items():
                    peaks[w] = max(peaks[w], st["VmHWM"])
            after = client.run(_proc_status)
            cen = census(client, X)
            fits.append({"solver": solver, "walls": walls, "peak": peaks, "after": after, "census": cen})
            log(f"{solver}: peaks " + ", ".join(f"{v / MiB:.0f} MiB" for v in peaks.values())
                + f"; {cen['copies']} copies of {cen['n_blocks']} blocks")
    finally:
        client.close()
        cluster.close()

    workers = sorted(idle)
    rows = []
    per = []
    for f in fits:
        for i, w in enumerate(workers):
            peak = f["peak"][w]
            share = start["bytes"].get(w, 0)
            rec = {
                "solver": f["solver"], "worker": i, "address": w,
                "fresh": fresh[w]["VmRSS"], "imported": imported[w]["VmRSS"], "idle": idle[w]["VmRSS"],
                "with_data": with_data[w]["VmRSS"],
                "held_share": share, "even_share": even, "peak": peak,
                "after": f["after"][w]["VmRSS"],
                "peak_over_share": peak / even, "extra_over_share": (peak - idle[w]["VmRSS"]) / even,
                "held_after": f["census"]["bytes"].get(w, 0),
            }
            per.append(rec)
            rows.append([
                f["solver"], i, _mib(rec["fresh"]), _mib(rec["imported"]), _mib(rec["idle"]), _mib(rec["with_data"]),
                _mib(share),
                _mib(even), _mib(peak), f"**{rec['peak_over_share']:.2f}**",
                f"{rec['extra_over_share']:.2f}", _mib(rec["after"]), _mib(rec["held_after"]),
                f"{f['census']['copies']} / {f['census']['n_blocks']}",
            ])
    table = md_table(
        ["fit", "worker", "fresh worker RSS", "after imports", "idle RSS", "RSS with data", "X held at start",
         "X.nbytes / workers",
         "peak RSS in fit", "**peak / share**", "(peak - idle) / share", "RSS after fit",
         "X held after fit", "block copies / blocks"],
        rows,
    )
    worst = max(r["peak_over_share"] for r in per)
    worst_extra = max(r["extra_over_share"] for r in per)
    y_share = (p["rows"] * 8 / W) / even
    idle_share = max(r["idle"] for r in per) / even
    fresh_share = max(r["fresh"] for r in per) / even
    imported_share = max(r["imported"] for r in per) / even
    verdict = (
        f"Largest peak / share: **{worst:.2f}** ({'meets' if worst <= TARGET else 'ABOVE'} the "
        f"{TARGET} target); largest (peak - idle) / share: {worst_extra:.2f} (y adds "
        f"{y_share:.2f} of the share). The idle worker alone is {idle_share:.2f} of the share "
        f"(a fresh Dask worker, before any task: {fresh_share:.2f}; after importing dask.array, "
        f"SciPy, scikit-learn and dask_dgd: {imported_share:.2f}). Copies of X's blocks held after the fits: "
        + ", ".join(f"{f['solver']} {f['census']['copies']}" for f in fits)
        + f" for {start['n_blocks']} blocks ({start['copies']} right after generation)."
    )
    reading = (
        f"{p['rows']:,} x {p['features']} float64 ({X.nbytes / MiB:,.0f} MiB, {p['chunks']} "
        f"blocks) generated on {W} single-threaded workers and persisted. Peak = `VmHWM` "
        f"after resetting it (`/proc/self/clear_refs`) right before each fit; idle = `VmRSS` "
        f"after a warm-up fit on a few rows and before the data; fresh = `VmRSS` of the "
        f"new worker before any task, then after importing what the fits use. Fits: lbfgs "
        f"(max_iter={p['max_iter']}), gd (max_iter={p['max_iter']}, tol=0), sgd (adam, "
        f"batch {p['batch_size']}, {p['sgd_epochs']} epochs); {repeats} fit(s) each, the "
        f"largest peak kept."
    )
    return {
        "title": "Peak worker memory against the share of X",
        "markdown": "\n\n".join([reading, table, verdict]),
        "table": "\n\n".join([table, verdict]),
        "data": {
            "parameters": {**p, "repeats": repeats},
            "x_nbytes": X.nbytes,
            "even_share": even,
            "generate_time": gen_time,
            "census_start": start,
            "per_worker": per,
            "fits": fits,
            "worst_peak_over_share": worst,
            "worst_extra_over_share": worst_extra,
            "target": TARGET,
        },
    }
