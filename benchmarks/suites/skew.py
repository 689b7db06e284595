"""Data skew: per-step time with balanced chunks, skewed chunks, and skewed chunks
rebalanced; dynamic balancing under a slow worker.

Issue targets (data skew): with ``rebalance="auto"`` the per-step time on skewed chunks
within 1.1x of the balanced chunks' (the skewed case without rebalancing shown for
contrast); with one worker slowed 2x, dynamic balancing within 1.2x of the ideal step
(total work / total speed, plus the measured per-step overhead).

Method.  The same persisted data (logistic regression, float64), in three chunkings:
16 equal blocks; a skewed chunking (the first block holds ``first_block`` = 75% of
the rows, the other 15 share the rest: one block larger than a worker's share, as a
power-law key or a bad filter leaves it), fitted with ``rebalance=False``; and the same
skewed chunking with ``rebalance="auto"``.  Each fit is
``solver="gd"`` for ``steps`` steps (``tol=0``; 100, the estimators' default
``max_iter``, which is also the horizon over which ``"auto"`` weighs a rechunk); the
step time is the median of
``history_["step_time"]`` without the first step.  The fit wall (setup included: the
rechunk and the moves) is shown too.  Slow worker: the balanced chunks with one of two
workers sleeping its compute time after every computation
(``dask_dgd.testing.straggler``), fitted with ``rebalance=False`` and with ``"auto"``
(dynamic balancing, which measures the workers' speeds at step 4); the step time is the
median after the move.  Ideal: ``C * 2 / 1.5 + o`` with ``C`` the slowest compute time
and ``o`` the overhead (step - slowest compute) of the undisturbed balanced fit.
"""

import time
import warnings

import numpy as np

from .._common import make_data, md_table, median, start_cluster, suite_params

NAME = "skew"
DESCRIPTION = (
    "Per-step time on balanced, skewed and rebalanced chunks; dynamic balancing under a 2x "
    "slower worker"
)

SIZES = {
    "small": dict(rows=400_000, features=50, chunks=16, workers=2, steps=100, first_block=0.75,
                  repeats=3, alpha=1e-4, seed=0),
    "full": dict(rows=2_000_000, features=100, chunks=16, workers=2, steps=100, first_block=0.75,
                 repeats=3, alpha=1e-4, seed=0),
}

TARGET_REBALANCED = 1.1
TARGET_DYNAMIC = 1.2


def skewed_chunks(rows, n, first):
    """``n`` row chunks: the first with ``first`` of the rows, the others even."""
    head = int(round(rows * first))
    rest = np.diff(np.linspace(0, rows - head, n).round().astype(np.int64))
    return (head,) + tuple(int(c) for c in rest)


def fit(client, X, y, p, **kw):
    from dask_dgd import LogisticRegression

    est = LogisticRegression(alpha=p["alpha"], solver="gd", max_iter=p["steps"], tol=0.0,
                             client=client, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tol=0: a fixed number of steps
        t0 = time.perf_counter()
        est.fit(X, y)
        wall = time.perf_counter() - t0
    h = est.history_
    r = est.skew_report_
    moved_at = r["dynamic"][0]["step"] if r["dynamic"] else None
    after = h.iloc[moved_at:] if moved_at else h.iloc[1:]
    return {
        "wall": wall,
        "step": median(h["step_time"].iloc[1:].astype(float).tolist()),
        "step_after_move": median(after["step_time"].astype(float).tolist()),
        "compute_max": median(h["compute_time_max"].iloc[1:].astype(float).tolist()),
        "overhead": median((h["step_time"] - h["compute_time_max"]).iloc[1:].astype(float).tolist()),
        "imbalance_before": r["imbalance_before"],
        "imbalance_after": r["imbalance_after"],
        "action": r["action"],
        "n_blocks": r["n_blocks"],
        "moved_blocks": r["moved_blocks"],
        "moved_bytes": r["moved_bytes"],
        "dynamic": r["dynamic"],
    }


def run(size, *, repeats=None, log=print, **overrides):
    p = suite_params(NAME, SIZES, size, repeats, overrides)
    W = p["workers"]
    cluster, client = start_cluster(W)
    cases = ("balanced", "skewed", "rebalanced", "slow: static", "slow: dynamic")
    runs = {c: [] for c in cases}
    try:
        from distributed import wait

        from dask_dgd.testing import straggler

        client.wait_for_workers(W)
        X, y = make_data(client, p["rows"], p["features"], p["chunks"], p["seed"])
        chunks = skewed_chunks(p["rows"], p["chunks"], p["first_block"])
        Xs, ys = client.persist([X.rechunk({0: chunks}), y.rechunk({0: chunks})])
        wait([Xs, ys])
        slow = sorted(client.scheduler_info()["workers"])[-1]
        fit(client, X, y, {**p, "steps": 2})  # warm-up: kernels, imports
        for _ in range(p["repeats"]):
            runs["balanced"].append(fit(client, X, y, p))
            runs["skewed"].append(fit(client, Xs, ys, p, rebalance=False))
            runs["rebalanced"].append(fit(client, Xs, ys, p, rebalance="auto"))
            with straggler(client, slow, 1.0):
                runs["slow: static"].append(fit(client, X, y, p, rebalance=False))
                runs["slow: dynamic"].append(fit(client, X, y, p, rebalance="auto"))
            log("; ".join(f"{c} {runs[c][-1]['step'] * 1e3:.0f} ms" for c in cases))
    finally:
        client.close()
        cluster.close()

    def med(case, key):
        return median([r[key] for r in runs[case]])

    base = med("balanced", "step")
    ideal = med("balanced", "compute_max") * 2 / 1.5 + med("balanced", "overhead")
    ratio_rebalanced = med("rebalanced", "step") / base
    ratio_dynamic = med("slow: dynamic", "step_after_move") / ideal
    rows_t = []
    for c in cases:
        r0 = runs[c][0]
        step_key = "step_after_move" if c == "slow: dynamic" else "step"
        dyn = r0["dynamic"][0] if r0["dynamic"] else None
        rows_t.append([
            c, f"{r0['imbalance_before']:.2f}", f"{r0['imbalance_after']:.2f}", r0["action"],
            r0["n_blocks"], r0["moved_blocks"], f"{r0['moved_bytes'] / 2**20:.0f} MiB",
            f"{med(c, step_key) * 1e3:.1f} ms", f"{med(c, step_key) / base:.2f}",
            f"{med(c, 'wall'):.2f} s",
            None if dyn is None else f"step {dyn['step']}: {dyn['moved_blocks']} blocks, rows "
            + "/".join(str(v) for v in dyn["rows_per_worker"].values()),
        ])
    table = md_table(
        ["case", "max/mean load before", "after", "setup action", "blocks", "blocks moved",
         "bytes moved", "median step", "x balanced", "median fit wall", "dynamic balancing"],
        rows_t,
    )
    verdict = md_table(
        ["target", "measured", "met"],
        [
            [f"rebalanced step <= {TARGET_REBALANCED}x balanced", f"{ratio_rebalanced:.2f}x",
             "yes" if ratio_rebalanced <= TARGET_REBALANCED else "no"],
            ["(contrast) skewed without rebalancing", f"{med('skewed', 'step') / base:.2f}x", "–"],
            [f"slow worker: dynamic step <= {TARGET_DYNAMIC}x ideal ({ideal * 1e3:.1f} ms)",
             f"{ratio_dynamic:.2f}x", "yes" if ratio_dynamic <= TARGET_DYNAMIC else "no"],
            ["(contrast) slow worker, static", f"{med('slow: static', 'step') / ideal:.2f}x ideal", "–"],
        ],
    )
    reading = (
        f"{p['rows']:,} x {p['features']} float64, {W} single-threaded workers, "
        f"{p['chunks']} blocks (balanced: equal; skewed: the first block "
        f"{chunks[0] / p['rows']:.0%} of the rows, the rest even), logistic regression alpha={p['alpha']:g}, "
        f"plain gradient descent, {p['steps']} steps per fit; medians of {p['repeats']} "
        f"repeats, the five cases of a repeat back to back. Slow worker: the worker of the "
        f"last group sleeps its compute time after each computation; ideal step = "
        f"slowest compute of the balanced fit x 2 / 1.5 + its overhead. The fit wall "
        f"includes the setup: compare 'rebalanced' with 'skewed' to see whether the "
        f"rechunk paid for itself within the fit."
    )
    return {
        "title": "Data skew: balanced, skewed, rebalanced chunks; dynamic balancing",
        "markdown": "\n\n".join([reading, table, "### Targets", verdict]),
        "table": "\n\n".join([table, verdict]),
        "data": {
            "parameters": p,
            "chunks_skewed": chunks,
            "runs": runs,
            "ratio_rebalanced": ratio_rebalanced,
            "ratio_dynamic": ratio_dynamic,
            "ideal_step": ideal,
        },
    }
