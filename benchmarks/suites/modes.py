"""Mini-batch (and local-SGD) training against scikit-learn's SGDClassifier.

Issue target: samples/second per core within 2x of ``SGDClassifier``'s single-core
epoch rate, with a better objective after each epoch (Adam).

* scikit-learn: ``SGDClassifier(loss="log_loss", alpha, max_iter=epochs, tol=None)`` on
  the data gathered into the driver's memory, one BLAS thread (``threadpool_limits(1)``);
  rate = rows x epochs / fit wall.
* dask_dgd: ``LogisticRegression(solver="sgd", optimizer="adam", batch_size=b,
  max_iter=epochs, tol=0)`` on the persisted dask array, on a cluster of ``workers``
  single-threaded workers; rate per core = rows x epochs / fit wall / workers.  The fit
  wall includes the setup (shards, label summary, learning-rate estimate); the rate of
  the training steps alone (``history_["time"]`` at the last step) is shown next to it.

Both minimise the same objective, evaluated on the driver by :func:`objective` on all
the data: mean log-loss + alpha/2 ||coef||^2 (intercept unpenalised; the same ``alpha``
for both, which is SGDClassifier's ``alpha``).

Objective after each epoch: a callback cannot see the parameters between epochs, and
refitting with ``max_iter=k`` for every ``k`` would cost epochs^2/2 passes.  Instead one
continuous trajectory is followed per tool: dask_dgd ``fit(max_iter=1)`` then
``partial_fit`` once per further epoch (it continues the fitted Adam state and learning
rate, drawing its batches from another seed than ``fit`` would); scikit-learn
``partial_fit`` once per epoch (its learning-rate schedule continues across calls).  The
timed fits' final objectives are printed next to them, so the two ways of reaching epoch
``epochs`` can be compared.
"""

import math
import time
import warnings

import numpy as np

from .._common import gather_to_driver, make_data, md_table, median, start_cluster, suite_params

NAME = "modes"
DESCRIPTION = (
    "Mini-batch (Adam) and local-SGD throughput per core and objective per epoch, against "
    "scikit-learn's single-core SGDClassifier"
)

SIZES = {
    "small": dict(
        rows=200_000, features=50, chunks=16, workers=2, batch_sizes=(4096, 16384, 65536),
        epochs=5, repeats=2, alpha=1e-4, seed=0, online_batches=(None, 4096, 16384),
    ),
    "full": dict(
        rows=2_000_000, features=100, chunks=16, workers=2, batch_sizes=(4096, 16384, 65536),
        epochs=5, repeats=3, alpha=1e-4, seed=0, online_batches=(None, 4096, 16384),
    ),
}

TARGET_RATE_RATIO = 0.5  # "within 2x" of SGDClassifier's single-core rate
#: issue 43: solver="online" per core >= 1.0x SGDClassifier at batch <= ONLINE_TARGET_BATCH
ONLINE_TARGET_RATIO = 1.0
ONLINE_TARGET_BATCH = 4096
LOCAL_UNAVAILABLE = "not available yet (mode='local' lands with the training-modes issue)"


# ----------------------------------------------------------------------------- data




def objective(X, y, coef, intercept, alpha):
    """Mean log-loss + alpha/2 ||coef||^2 (intercept unpenalised), float64 NumPy."""
    coef = np.asarray(coef, dtype=np.float64).ravel()
    z = X @ coef + float(np.ravel(intercept)[0])
    return float(np.mean(np.logaddexp(0.0, z) - y * z) + 0.5 * alpha * (coef @ coef))


# ----------------------------------------------------------------------------- tools
def _sgd_classifier(p, max_iter):
    from sklearn.linear_model import SGDClassifier

    return SGDClassifier(
        loss="log_loss", alpha=p["alpha"], max_iter=max_iter, tol=None, random_state=p["seed"]
    )


def sklearn_timed(Xn, yn, p):
    from threadpoolctl import threadpool_limits

    est = _sgd_classifier(p, p["epochs"])
    with threadpool_limits(1):
        t0 = time.perf_counter()
        est.fit(Xn, yn)
        wall = time.perf_counter() - t0
    return {
        "wall": wall,
        "n_iter": int(est.n_iter_),
        "objective": objective(Xn, yn, est.coef_, est.intercept_, p["alpha"]),
    }


def sklearn_curve(Xn, yn, p):
    from threadpoolctl import threadpool_limits

    est = _sgd_classifier(p, 1)
    curve = []
    with threadpool_limits(1):
        for _ in range(p["epochs"]):
            est.partial_fit(Xn, yn, classes=np.array([0.0, 1.0]))
            curve.append(objective(Xn, yn, est.coef_, est.intercept_, p["alpha"]))
    return curve


def optimum(Xn, yn, p):
    """The objective's minimum (scikit-learn lbfgs to a tight tolerance; a reference, untimed)."""
    from sklearn.linear_model import LogisticRegression

    est = LogisticRegression(C=1.0 / (p["alpha"] * len(yn)), tol=1e-10, max_iter=10_000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(Xn, yn)
    return objective(Xn, yn, est.coef_, est.intercept_, p["alpha"])


def local_mode_available():
    from dask_dgd import LogisticRegression

    return "mode" in LogisticRegression().get_params()


def _dgd(client, p, batch_size, max_iter, **extra):
    from dask_dgd import LogisticRegression

    return LogisticRegression(
        alpha=p["alpha"], solver="sgd", optimizer="adam", batch_size=batch_size,
        max_iter=max_iter, tol=0.0, random_state=p["seed"], client=client, **extra,
    )


def dgd_timed(client, X, y, Xn, yn, p, batch_size, **extra):
    est = _dgd(client, p, batch_size, p["epochs"], **extra)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tol=0 with a fixed epoch count never "converges"
        t0 = time.perf_counter()
        est.fit(X, y)
        wall = time.perf_counter() - t0
    h = est.history_
    solve = float(h["time"].iloc[-1]) if len(h) else float("nan")
    return {
        "wall": wall,
        "solve": solve,
        "n_iter": int(est.n_iter_),
        "n_steps": int(len(h)),
        "step_time": median(h["step_time"].astype(float).tolist()),
        "compute_time_max": median(h["compute_time_max"].astype(float).tolist()),
        "objective": objective(Xn, yn, est.coef_, est.intercept_, p["alpha"]),
    }


def online_timed(client, X, y, Xn, yn, p, batch_size):
    """``solver="online"`` (issue 43): compiled local epochs on each worker's group, its
    default optimizer (VW's normalized adaptive rule), per row (``batch_size`` None: one
    pass a round) or ``local_steps`` (8) micro-batches of its share of ``batch_size`` a
    round; timed as :func:`dgd_timed`."""
    from dask_dgd import LogisticRegression

    est = LogisticRegression(alpha=p["alpha"], solver="online", batch_size=batch_size, max_iter=p["epochs"],
                             tol=0.0, random_state=p["seed"], client=client)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        est.fit(X, y)
        wall = time.perf_counter() - t0
    return {"wall": wall, "n_iter": int(est.n_iter_), "n_steps": int(len(est.history_)),
            "objective": objective(Xn, yn, est.coef_, est.intercept_, p["alpha"])}


def dgd_curve(client, X, y, Xn, yn, p, batch_size):
    est = _dgd(client, p, batch_size, 1)
    curve = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
        curve.append(objective(Xn, yn, est.coef_, est.intercept_, p["alpha"]))
        for _ in range(p["epochs"] - 1):
            est.partial_fit(X, y)
            curve.append(objective(Xn, yn, est.coef_, est.intercept_, p["alpha"]))
    return curve


# ----------------------------------------------------------------------------- report
def _t(x):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return None
    if x < 1:
        return f"{x * 1e3:.1f} ms"
    return f"{x:.2f} s"


def _rate(x):
    return None if x is None or not math.isfinite(x) else f"{x:,.0f}"


def run(size, *, repeats=None, log=print, **overrides):
    p = suite_params(NAME, SIZES, size, repeats, overrides)
    repeats = p["repeats"]
    rows, epochs, W = p["rows"], p["epochs"], p["workers"]
    samples = rows * epochs

    cluster, client = start_cluster(W)
    try:
        client.wait_for_workers(W)
        t0 = time.perf_counter()
        X, y = make_data(client, rows, p["features"], p["chunks"], p["seed"])
        Xn, yn = gather_to_driver(X, y)
        log(f"data {rows} x {p['features']} generated and gathered in {time.perf_counter() - t0:.1f}s")
        best = optimum(Xn, yn, p)
        log(f"optimum of the objective (reference): {best:.10f}")

        # scikit-learn, one core
        sk_runs = []
        for _ in range(repeats):
            sk_runs.append(sklearn_timed(Xn, yn, p))
            log(f"SGDClassifier: {sk_runs[-1]['wall']:.2f}s for {epochs} epochs")
        sk_curve = sklearn_curve(Xn, yn, p)
        sk_wall = median([r["wall"] for r in sk_runs])
        sk_rate = samples / sk_wall

        # dask_dgd, untimed warm-up (imports and caches on the workers)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _dgd(client, p, p["batch_sizes"][-1], 1).fit(X, y)

        dgd = {}
        for b in p["batch_sizes"]:
            runs = []
            for _ in range(repeats):
                runs.append(dgd_timed(client, X, y, Xn, yn, p, b))
                log(f"dask_dgd sgd/adam batch {b}: {runs[-1]['wall']:.2f}s, {runs[-1]['n_steps']} steps")
            curve = dgd_curve(client, X, y, Xn, yn, p, b)
            wall = median([r["wall"] for r in runs])
            solve = median([r["solve"] for r in runs])
            dgd[b] = {
                "runs": runs,
                "wall": wall,
                "solve": solve,
                "rate_per_core": samples / wall / W,
                "solve_rate_per_core": samples / solve / W,
                "ratio": samples / wall / W / sk_rate,
                "solve_ratio": samples / solve / W / sk_rate,
                "n_iter": runs[0]["n_iter"],
                "n_steps": runs[0]["n_steps"],
                "step_time": median([r["step_time"] for r in runs]),
                "compute_time_max": median([r["compute_time_max"] for r in runs]),
                "objective": median([r["objective"] for r in runs]),
                "curve": curve,
                "epochs_better": sum(d < s for d, s in zip(curve, sk_curve)),
            }

        # solver="online" (issue 43)
        online = {}
        for b in p.get("online_batches", ()):
            try:
                runs = [online_timed(client, X, y, Xn, yn, p, b) for _ in range(repeats)]
            except Exception as err:  # noqa: BLE001 - reported in the table, not hidden
                online[b] = {"error": f"{type(err).__name__}: {err}"}
                log(f"dask_dgd online batch {b}: failed: {online[b]['error']}")
                continue
            wall = median([r["wall"] for r in runs])
            online[b] = {"runs": runs, "wall": wall, "rate_per_core": samples / wall / W,
                         "ratio": samples / wall / W / sk_rate, "n_iter": runs[0]["n_iter"],
                         "n_steps": runs[0]["n_steps"], "objective": median([r["objective"] for r in runs])}
            log(f"dask_dgd online batch {b}: {wall:.2f}s, {online[b]['ratio']:.2f}x SGDClassifier per core")

        # local SGD: only when the estimator has it
        local = {"available": local_mode_available(), "status": LOCAL_UNAVAILABLE}
        if local["available"]:
            b = p["batch_sizes"][len(p["batch_sizes"]) // 2]
            try:
                runs = [dgd_timed(client, X, y, Xn, yn, p, b, mode="local") for _ in range(repeats)]
                wall = median([r["wall"] for r in runs])
                local.update(
                    status="ok", batch_size=b, runs=runs, wall=wall,
                    rate_per_core=samples / wall / W, ratio=samples / wall / W / sk_rate,
                    objective=median([r["objective"] for r in runs]),
                )
            except Exception as err:  # noqa: BLE001 - reported in the table, not hidden
                local["status"] = f"failed: {type(err).__name__}: {err}"
    finally:
        client.close()
        cluster.close()

    # ---- tables
    sk_obj = median([r["objective"] for r in sk_runs])
    head = ["tool", "batch", "epochs", "steps", "median step", "compute max", "median wall",
            "samples/s", "samples/s per core",
            "**per core / SGDClassifier**", "training steps only: per core / SGDClassifier",
            f"objective after {epochs} epochs", "gap to optimum"]
    rows_t = [[
        "SGDClassifier (1 core)", 1, sk_runs[0]["n_iter"], None, None, None, _t(sk_wall),
        _rate(sk_rate),
        _rate(sk_rate), "1.00", None, f"{sk_obj:.8f}", f"{sk_obj - best:.2e}",
    ]]
    for b, d in dgd.items():
        rows_t.append([
            f"dask_dgd sgd/adam ({W} workers)", b, d["n_iter"], d["n_steps"], _t(d["step_time"]),
            _t(d["compute_time_max"]), _t(d["wall"]),
            _rate(samples / d["wall"]), _rate(d["rate_per_core"]), f"**{d['ratio']:.2f}**",
            f"{d['solve_ratio']:.2f}", f"{d['objective']:.8f}", f"{d['objective'] - best:.2e}",
        ])
    if local.get("status") == "ok":
        rows_t.append([
            f"dask_dgd local SGD ({W} workers)", local["batch_size"], epochs, None, None, None,
            _t(local["wall"]), _rate(local["rate_per_core"] * W), _rate(local["rate_per_core"]),
            f"**{local['ratio']:.2f}**", None, f"{local['objective']:.8f}",
            f"{local['objective'] - best:.2e}",
        ])
    else:
        rows_t.append([f"dask_dgd local SGD: {local['status']}"] + [None] * (len(head) - 1))
    for b, d in online.items():
        label = f"dask_dgd online ({W} workers)"
        if "error" in d:
            rows_t.append([f"{label}: failed: {d['error']}", b or "per row"] + [None] * (len(head) - 2))
            continue
        rows_t.append([label, b or "per row", d["n_iter"], d["n_steps"], None, None, _t(d["wall"]),
                       _rate(d["rate_per_core"] * W), _rate(d["rate_per_core"]), f"**{d['ratio']:.2f}**", None,
                       f"{d['objective']:.8f}", f"{d['objective'] - best:.2e}"])
    throughput = md_table(head, rows_t)

    bs = list(dgd)
    curve_t = md_table(
        ["epoch", "SGDClassifier"] + [f"dask_dgd adam, batch {b}" for b in bs],
        [
            [k + 1, f"{sk_curve[k]:.8f}"] + [
                f"{dgd[b]['curve'][k]:.8f}" + (" (lower)" if dgd[b]["curve"][k] < sk_curve[k] else "")
                for b in bs
            ]
            for k in range(epochs)
        ],
    )
    top = max(bs, key=lambda b: dgd[b]["ratio"])
    rate_ok = [b for b in bs if dgd[b]["ratio"] >= TARGET_RATE_RATIO]
    loss_ok = [b for b in bs if dgd[b]["epochs_better"] == epochs]
    verdict = (
        f"Throughput target (per core >= {TARGET_RATE_RATIO} x SGDClassifier's single-core "
        f"rate): best {dgd[top]['ratio']:.2f} at batch {top}; met at batch sizes "
        f"{rate_ok or 'none'}. Objective lower than SGDClassifier's after every epoch: "
        f"batch sizes {loss_ok or 'none'}; after the last epoch: "
        f"{[b for b in bs if dgd[b]['curve'][-1] < sk_curve[-1]] or 'none'}."
    )
    small = {b: d for b, d in online.items() if "error" not in d and (b is None or b <= ONLINE_TARGET_BATCH)}
    if small:
        ob = max(small, key=lambda b: small[b]["ratio"])
        ok = small[ob]["ratio"] >= ONLINE_TARGET_RATIO
        verdict += (
            f"\n\nIssue 43 (solver='online', per core >= {ONLINE_TARGET_RATIO:g}x SGDClassifier at batch <= "
            f"{ONLINE_TARGET_BATCH:,}): best {small[ob]['ratio']:.2f}x ({'per row' if ob is None else f'batch {ob}'}"
            f"; objective {small[ob]['objective']:.8f} against SGDClassifier's {sk_obj:.8f}): "
            f"**{'met' if ok else 'missed'}**."
        )
    reading = (
        f"{rows:,} x {p['features']} float64 in {p['chunks']} blocks, generated on "
        f"{W} single-threaded workers; alpha={p['alpha']:g} for both tools; {epochs} epochs; "
        f"median of {repeats} fits. Rates: rows x epochs / wall (dask_dgd: / {W} workers; "
        f"wall includes setup, the 'training steps only' column does not). Objective per "
        f"epoch: one continuous trajectory per tool (dask_dgd `fit(max_iter=1)` then "
        f"`partial_fit` per epoch; SGDClassifier `partial_fit` per epoch), evaluated on the "
        f"driver on all rows. The optimum (scikit-learn `LogisticRegression`, lbfgs, "
        f"C = 1/(alpha n), tol 1e-10; untimed reference) is {best:.8f}."
    )
    markdown = "\n\n".join([
        reading, "### Throughput", throughput, verdict,
        "### Objective after each epoch (all rows, evaluated on the driver)", curve_t,
    ])
    return {
        "title": "Mini-batch and local-SGD modes against SGDClassifier",
        "markdown": markdown,
        "table": "\n\n".join([throughput, verdict, curve_t]),
        "data": {
            "parameters": {**p, "repeats": repeats},
            "optimum": best,
            "sklearn": {"runs": sk_runs, "wall": sk_wall, "rate": sk_rate, "curve": sk_curve},
            "dask_dgd": {str(b): d for b, d in dgd.items()},
            "local": local,
            "online": {str(b): d for b, d in online.items()},
            "target_rate_ratio": TARGET_RATE_RATIO,
            "rate_ok": rate_ok,
            "loss_ok": loss_ok,
        },
    }
