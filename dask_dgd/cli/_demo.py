"""``dask-dgd demo``: dask_dgd next to scikit-learn on a local Dask cluster.

The three linear estimators are trained on synthetic dask arrays by distributed gradient
descent and compared with their scikit-learn counterparts fitted in memory on the same
rows with the matching penalty.  The recommender has no in-memory peer in scikit-learn:
it is compared with the user+item bias model (``n_components=0``), the baseline a factor
model must beat.  The pointwise climate model is compared with scikit-learn's
``LinearRegression`` fitted cell by cell in memory, the usual way.  Each task returns
the two rows of the table (:class:`~dask_dgd.cli.Result`) and the history of the
dask_dgd fit.
"""

import csv
import math
import os
import sys
import time
import warnings
from dataclasses import asdict

import numpy as np

from .. import __version__
from ._common import (
    CommandError,
    Result,
    _has_module,
    _int_at_least,
    _positive_float,
    _quiet_distributed,
)
from ._demo_grid import demo_grid

__all__ = [
    "TABLE_NOTES", "climate_task", "demo_arguments", "format_table", "recommender_task", "run_demo", "warm_up",
]


# ------------------------------------------------------------------ linear models
def _mean_loss(kind, y, z):
    """Mean loss of linear predictor ``z`` in dask_dgd's units (see the estimators)."""
    if kind == "logistic":
        return float(np.mean(np.logaddexp(0.0, z) - y * z))
    if kind == "linear":
        return float(np.mean(0.5 * (y - z) ** 2))
    return float(np.mean(np.exp(z) - y * z))  # poisson


def _objective(kind, model, X, y, alpha):
    """Mean loss plus ``alpha / 2 * ||coef||^2`` of a fitted model on in-memory data."""
    coef = np.ravel(model.coef_)
    z = X @ coef + float(np.ravel(model.intercept_)[0])
    return _mean_loss(kind, y, z) + 0.5 * alpha * float(coef @ coef)


def _params(model):
    return np.concatenate([np.ravel(model.coef_), np.ravel(model.intercept_)])


def _sklearn_iters(model):
    n = getattr(model, "n_iter_", None)
    return None if n is None else int(np.max(n))


def _compare(kind, client, data, ours, theirs, setting_ours, setting_theirs, alpha, metric):
    """Fit ``ours`` on the cluster and ``theirs`` in memory; two table rows and our history."""
    import dask

    X, y, X_test, y_test = data
    X_mem, y_mem, X_test_mem, y_test_mem = dask.compute(X, y, X_test, y_test)
    n, d = X.shape
    blocks = X.numblocks[0]
    workers = len(client.nthreads())
    print(
        f"\n[{kind}] dask_dgd.{type(ours).__name__} on {n:,} rows x {d} features in {blocks} "
        f"blocks over {workers} workers ({setting_ours})"
    )
    sys.stdout.flush()  # the progress bar goes to stderr
    t0 = time.perf_counter()
    ours.fit(X, y)
    t_ours = time.perf_counter() - t0
    print(
        f"  done: {ours.n_iter_} {ours.solver_} iterations, {len(ours.history_)} distributed "
        f"gradient steps, {t_ours:.2f} s"
    )
    print(f"[{kind}] scikit-learn {type(theirs).__name__} in memory ({setting_theirs})")
    t0 = time.perf_counter()
    theirs.fit(X_mem, y_mem)
    t_theirs = time.perf_counter() - t0
    print(f"  done: {t_theirs:.2f} s")
    diff = float(np.max(np.abs(_params(ours) - _params(theirs))))
    common = {"task": kind, "rows": n, "features": d, "metric": metric}
    rows = [
        Result(
            tool="dask_dgd",
            setting=setting_ours,
            wall_s=t_ours,
            n_iter=int(ours.n_iter_),
            objective=_objective(kind, ours, X_mem, y_mem, alpha),
            score=float(ours.score(X_test, y_test)),
            max_abs_diff=diff,
            **common,
        ),
        Result(
            tool="scikit-learn",
            setting=setting_theirs,
            wall_s=t_theirs,
            n_iter=_sklearn_iters(theirs),
            objective=_objective(kind, theirs, X_mem, y_mem, alpha),
            score=float(theirs.score(X_test_mem, y_test_mem)),
            **common,
        ),
    ]
    return rows, ours.history_


def _split(client, X, y, test_fraction=0.2):
    """Persisted train and holdout parts (the last rows are the holdout)."""
    from distributed import wait

    n_test = max(1, int(round(X.shape[0] * test_fraction)))
    n_train = X.shape[0] - n_test
    parts = client.persist([X[:n_train], y[:n_train], X[n_train:], y[n_train:]])
    wait(parts)
    return parts


def _chunk_rows(n_rows, n_workers):
    """Rows per block: about four blocks per worker."""
    return max(1, math.ceil(n_rows / (4 * n_workers)))


def _logistic_task(client, args, n_rows):
    from sklearn.linear_model import LogisticRegression as SkLogistic

    from .. import LogisticRegression
    from ..datasets import make_classification

    X, y = make_classification(
        n_rows, args.features, chunks=_chunk_rows(n_rows, args.workers), random_state=args.seed
    )
    data = _split(client, X, y)
    n_train = data[0].shape[0]
    C = 1.0 / (args.alpha * n_train)
    ours = LogisticRegression(
        alpha=args.alpha, tol=args.tol, max_iter=args.max_iter, verbose=1, client=client
    )
    theirs = SkLogistic(C=C, tol=1e-10, max_iter=10_000)
    return _compare(
        "logistic", client, data, ours, theirs,
        f"alpha={args.alpha:g}", f"C=1/(alpha*n)={C:.4g}", args.alpha, "accuracy",
    )


def _linear_task(client, args, n_rows):
    from sklearn.linear_model import Ridge

    from .. import LinearRegression
    from ..datasets import make_regression

    X, y = make_regression(
        n_rows, args.features, noise=1.0, intercept=1.0,
        chunks=_chunk_rows(n_rows, args.workers), random_state=args.seed + 1,
    )
    data = _split(client, X, y)
    ridge_alpha = args.alpha * data[0].shape[0]
    ours = LinearRegression(
        alpha=args.alpha, tol=args.tol, max_iter=args.max_iter, verbose=1, client=client
    )
    theirs = Ridge(alpha=ridge_alpha, tol=1e-10)
    return _compare(
        "linear", client, data, ours, theirs,
        f"alpha={args.alpha:g}", f"Ridge alpha=alpha*n={ridge_alpha:.4g}", args.alpha, "R2",
    )


def _poisson_task(client, args, n_rows):
    from sklearn.linear_model import PoissonRegressor as SkPoisson

    from .. import PoissonRegressor
    from ..datasets import make_poisson

    X, y = make_poisson(
        n_rows, args.features, chunks=_chunk_rows(n_rows, args.workers), random_state=args.seed + 2
    )
    data = _split(client, X, y)
    ours = PoissonRegressor(
        alpha=args.alpha, tol=args.tol, max_iter=args.max_iter, verbose=1, client=client
    )
    theirs = SkPoisson(alpha=args.alpha, tol=1e-10, max_iter=10_000)
    return _compare(
        "poisson", client, data, ours, theirs,
        f"alpha={args.alpha:g}", f"alpha={args.alpha:g}", args.alpha, "D2",
    )


# ------------------------------------------------------- recommender and climate
def recommender_task(client, args, n_ratings):
    """Matrix factorization of power-law ratings on the cluster vs the bias model."""
    import dask.dataframe as dd

    from .. import MatrixFactorization
    from ..datasets import make_ratings
    from ..recommender import train_test_split

    # about 40 ratings per user, and at least 3 cells of the matrix per rating
    n_users = max(20, n_ratings // 40)
    n_items = max(10, n_ratings // 100, -(-3 * n_ratings // n_users))
    frame, _ = make_ratings(n_users, n_items, n_ratings, rank=4, noise=0.5, random_state=args.seed + 3)
    train, test = train_test_split(frame, test_size=0.2, random_state=args.seed)
    train = dd.from_pandas(train, npartitions=2 * args.workers)
    from ._warm import RECOMMENDER_SETTINGS

    common = dict(**RECOMMENDER_SETTINGS, random_state=args.seed, client=client)  # max_iter: default
    rows, history = [], None
    for tool, setting, est in (
        ("dask_dgd", "rank 4, Adam, full batch", MatrixFactorization(n_components=4, verbose=1, **common)),
        ("bias-model", "rank 0 (user+item biases)", MatrixFactorization(n_components=0, **common)),
    ):
        print(f"\n[recommender] {tool}: {setting} on {len(frame):,} ratings of {n_users:,} users x "
              f"{n_items:,} items")
        sys.stdout.flush()
        t0 = time.perf_counter()
        est.fit(train)
        wall = time.perf_counter() - t0
        rmse = float(np.sqrt(np.mean((est.predict(test[["user", "item"]]) - test["rating"].to_numpy()) ** 2)))
        print(f"  done: {est.n_iter_} epochs, {wall:.2f} s, holdout RMSE {rmse:.4f}")
        rows.append(Result(task="recommend", tool=tool, setting=setting, rows=int(len(frame) - len(test)),
                           features=int(est.n_components_), wall_s=wall, n_iter=int(est.n_iter_),
                           objective=float(est.history_["loss"].iloc[-1]), metric="RMSE", score=rmse))
        history = est.history_ if history is None else history
    return rows, history


def climate_task(client, args, n_cells):
    """One regression per grid cell on the cluster vs scikit-learn cell by cell."""
    from sklearn.linear_model import LinearRegression as SkLinear

    from ..climate import ClimateRegressor

    ds = demo_grid(args.seed, n_cells)
    train, test = ds.isel(time=slice(0, 96)), ds.isel(time=slice(96, None))
    ny, nx = ds.sizes["lat"], ds.sizes["lon"]
    print(f"\n[climate] dask_dgd ClimateRegressor(model='pointwise') on {ny} x {nx} cells x 96 months "
          "(features: a, index)")
    sys.stdout.flush()
    t0 = time.perf_counter()
    ours = ClimateRegressor(features=["a", "index"], target="tas", model="pointwise", client=client)
    ours.fit(train.chunk({"time": 48, "lat": max(1, ny // 2)}))
    t_ours = time.perf_counter() - t0
    ours_rmse = float(ours.evaluate(test)["rmse"])
    print(f"  done: one pass, {t_ours:.2f} s")
    print("[climate] scikit-learn LinearRegression per cell, in memory")
    t0 = time.perf_counter()
    coef, intercept = np.full((ny, nx, 2), np.nan), np.full((ny, nx), np.nan)
    pred = np.full(test["tas"].shape, np.nan)
    a, index, y = train["a"].values, train["index"].values, train["tas"].values
    for i in range(ny):
        for j in range(nx):
            ok = np.isfinite(y[:, i, j])
            if not ok.any():
                continue
            X = np.column_stack([a[ok, i, j], index[ok]])
            m = SkLinear().fit(X, y[ok, i, j])
            coef[i, j], intercept[i, j] = m.coef_, m.intercept_
            pred[:, i, j] = m.predict(np.column_stack([test["a"].values[:, i, j], test["index"].values]))
    t_theirs = time.perf_counter() - t0
    print(f"  done: {t_theirs:.2f} s")
    w = np.cos(np.deg2rad(test["lat"].values))[None, :, None] * np.ones(test["tas"].shape)
    ok = np.isfinite(pred) & np.isfinite(test["tas"].values)
    their_rmse = float(np.sqrt(np.sum(w[ok] * (pred[ok] - test["tas"].values[ok]) ** 2) / np.sum(w[ok])))
    ours_coef = ours.coef_.transpose("lat", "lon", "feature").values
    diff = float(np.nanmax(np.abs(ours_coef - coef)))
    common = dict(task="climate", rows=int(np.isfinite(y).sum()), features=2, metric="RMSE")
    rows = [
        Result(tool="dask_dgd", setting="pointwise, one blockwise pass", wall_s=t_ours, n_iter=1,
               objective=_wmse(ours.predict(train).values, y, train), score=ours_rmse, max_abs_diff=diff,
               **common),
        Result(tool="scikit-learn", setting="LinearRegression per cell", wall_s=t_theirs, n_iter=None,
               objective=_wmse(_sk_fitted(coef, intercept, train), y, train), score=their_rmse, **common),
    ]
    return rows, None


def _sk_fitted(coef, intercept, train):
    """The per-cell scikit-learn fits' predictions on the training months."""
    a, index = train["a"].values, train["index"].values
    return intercept[None] + coef[None, :, :, 0] * a + coef[None, :, :, 1] * index[:, None, None]


def _wmse(pred, y, train):
    """Area-weighted mean squared error over the observed cells (the training objective)."""
    w = np.cos(np.deg2rad(train["lat"].values))[None, :, None] * np.ones(y.shape)
    ok = np.isfinite(pred) & np.isfinite(y)
    return float(np.sum(w[ok] * (pred[ok] - y[ok]) ** 2) / np.sum(w[ok]))


# ---------------------------------------------------------------------- warm-up
def warm_up(client, args, linear_only=False):
    """A small fit of each model on the cluster before anything is timed.

    The first fit after an install compiles dask_dgd's Numba kernels (about 5 s of
    one core; later runs load them from Numba's on-disk cache): each model's kernels
    are first compiled once, side by side on the workers
    (:func:`~dask_dgd.cli._warm.warm_cache`; before, every worker compiled all of them
    at once: 41 s on 2 workers), then a tiny fit of each model through the same code
    path and on the same workers loads them, so that the timed fits measure training
    only.  Returns the seconds it took.
    """
    import dask.array as da

    from .. import LinearRegression, LogisticRegression, MatrixFactorization, PoissonRegressor
    from ..climate import ClimateRegressor
    from ..datasets import make_ratings
    from ._warm import PARTS, RECOMMENDER_SETTINGS, warm_cache

    t0 = time.perf_counter()
    warm_cache(client, ("linear",) if linear_only else PARTS)
    n_blocks = 2 * max(1, len(client.nthreads()))
    rng = np.random.default_rng(0)
    X = da.from_array(rng.standard_normal((16 * n_blocks, args.features)), chunks=(16, -1))
    z = X @ np.full(args.features, 0.1)
    y_class = (z > 0).astype(np.int64)
    y_count = da.floor(da.exp(z))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for est, y in ((LogisticRegression(max_iter=2, client=client), y_class),
                       (LinearRegression(max_iter=2, client=client), z),
                       (PoissonRegressor(max_iter=2, client=client), y_count)):
            est.fit(X, y)
        if not linear_only:
            import dask.dataframe as dd

            frame, _ = make_ratings(40, 20, 400, rank=2, random_state=0)
            MatrixFactorization(n_components=2, max_iter=2, client=client, **RECOMMENDER_SETTINGS).fit(
                dd.from_pandas(frame, npartitions=n_blocks))
            grid = demo_grid(args.seed, 16)
            ClimateRegressor(["a", "index"], "tas", model="pointwise", client=client).fit(
                grid.isel(time=slice(0, 24)).chunk({"time": 12, "lat": 1}))
    return time.perf_counter() - t0


# ------------------------------------------------------------ table and outputs
def _fmt(value, spec):
    return "-" if value is None else format(value, spec)


TABLE_NOTES = """\
rows: training rows (the last 20% of the generated rows are the holdout)
wall s: time of fit; dask_dgd's includes placing the data as shards on the workers, not the
  Numba compilation (done by the small warm-up fits before any timing)
objective: mean loss + alpha/2 * ||coef||^2 on the training rows, same formula for both
  (recommend: each model's training objective; climate: area-weighted training MSE)
max|diff|: largest absolute difference of coef and intercept between the two tools
recommend: rank-4 factors vs the user+item bias model (no in-memory peer); RMSE on each
  user's held-out 20%; climate: one regression per grid cell, RMSE on the last 24 months"""


def format_table(results):
    """The comparison table as text."""
    header = (
        f"{'task':<9} {'tool':<12} {'rows':>9} {'wall s':>7} {'iters':>5} "
        f"{'objective':>16} {'holdout':>16} {'max|diff|':>9}  setting"
    )
    lines = [header, "-" * len(header)]
    for r in results:
        lines.append(
            f"{r.task:<9} {r.tool:<12} {r.rows:>9,} {r.wall_s:>7.2f} {_fmt(r.n_iter, 'd'):>5} "
            f"{r.objective:>16.10f} {r.metric + ' ' + format(r.score, '.4f'):>16} "
            f"{_fmt(r.max_abs_diff, '.1e'):>9}  {r.setting}"
        )
    return "\n".join(lines)


def _write_outputs(out_dir, results, histories, reference):
    """summary.csv, history.csv and (with matplotlib) loss_curve.png in ``out_dir``."""
    summary = os.path.join(out_dir, "summary.csv")
    with open(summary, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(asdict(results[0])))
        writer.writeheader()
        for r in results:
            writer.writerow(asdict(r))
    print(f"wrote {summary}")
    history = os.path.join(out_dir, "history.csv")
    import pandas as pd

    frames = [h.assign(task=task) for task, h in histories.items()]
    pd.concat(frames, ignore_index=True).to_csv(history, index=False)
    print(f"wrote {history}")
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: skipped loss_curve.png (pip install matplotlib)")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for task, h in histories.items():
        if task not in reference:
            continue  # no peer optimum to measure the gap to (the recommender)
        gap = np.maximum(h["loss"].to_numpy() - reference[task], 1e-16)
        ax.semilogy(h["step"], gap, marker=".", label=task)
    ax.set_xlabel("distributed gradient step")
    ax.set_ylabel("objective - scikit-learn's objective")
    ax.set_title("dask_dgd convergence (dask-dgd demo)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = os.path.join(out_dir, "loss_curve.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


# ---------------------------------------------------------------------- command
def _print_warnings(caught):
    seen = set()
    for w in caught:
        line = f"warning: {w.category.__name__}: {' '.join(str(w.message).split())}"
        if line not in seen:
            seen.add(line)
            print(line)


def run_demo(args):
    """``dask-dgd demo``: train on a LocalCluster, compare with scikit-learn."""
    from distributed import Client

    from .._engine.runtime.clusters import local_cluster

    if args.out is not None:
        if os.path.exists(args.out) and not os.path.isdir(args.out):
            raise CommandError(
                f"--out {args.out} is a file; pass a directory (it is created if missing)"
            )
        try:
            os.makedirs(args.out, exist_ok=True)
        except OSError as err:
            raise CommandError(f"cannot create --out directory {args.out}: {err.strerror}") from err
    small = min(args.rows, args.small_rows)
    print(
        f"dask-dgd {__version__} demo: starting a LocalCluster with {args.workers} "
        "single-threaded worker processes"
    )
    t_start = time.perf_counter()
    with _quiet_distributed(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with local_cluster(
            n_workers=args.workers, threads_per_worker=1, dashboard_address=":0"
        ) as cluster, Client(cluster) as client:
            elapsed = time.perf_counter() - t_start
            print(f"cluster ready at {cluster.scheduler_address} in {elapsed:.1f} s")
            if _has_module("bokeh"):
                print(f"dashboard: {cluster.dashboard_link}")
            print("compiling the Numba kernels (or loading them from Numba's cache) with a small fit of each "
                  "model on the workers, outside the timed fits ...")
            sys.stdout.flush()
            print(f"  done: {warm_up(client, args, linear_only=args.linear_only):.1f} s (not in any wall time below)")
            results, histories, reference = [], {}, {}
            for task, fit_pair, n_rows in (
                ("logistic", _logistic_task, args.rows),
                ("linear", _linear_task, small),
                ("poisson", _poisson_task, small),
            ):
                (ours, theirs), histories[task] = fit_pair(client, args, n_rows)
                results += [ours, theirs]
                reference[task] = theirs.objective
            if not args.linear_only:
                rows, histories["recommend"] = recommender_task(client, args, args.ratings)
                results += rows
                rows, _ = climate_task(client, args, args.cells)
                results += rows
    print()
    _print_warnings(
        w for w in caught if not issubclass(w.category, (ResourceWarning, DeprecationWarning))
    )
    print(format_table(results))
    print(TABLE_NOTES)
    if args.out is not None:
        _write_outputs(args.out, results, histories, reference)
    print(f"total {time.perf_counter() - t_start:.1f} s", flush=True)
    return 0


def demo_arguments(p):
    p.add_argument(
        "--rows", type=_int_at_least(100), default=200_000,
        help="rows generated for the logistic-regression data set (a dask array; the last 20%% are held "
             "out, so 200,000 trains on 160,000)",
    )
    p.add_argument(
        "--features", type=_int_at_least(1), default=20, help="features of every data set"
    )
    p.add_argument(
        "--small-rows", type=_int_at_least(100), default=20_000,
        help="rows of the linear and Poisson data sets (at most --rows)",
    )
    p.add_argument(
        "--workers", type=_int_at_least(1), default=2,
        help="worker processes of the LocalCluster (one thread each)",
    )
    p.add_argument(
        "--alpha", type=_positive_float, default=1e-4,
        help="L2 penalty of every dask_dgd model; scikit-learn gets the matching C or alpha",
    )
    p.add_argument(
        "--tol", type=_positive_float, default=1e-6,
        help="dask_dgd's stopping tolerance on the largest gradient entry",
    )
    p.add_argument(
        "--max-iter", type=_int_at_least(1), default=200, help="dask_dgd's iteration limit"
    )
    p.add_argument("--seed", type=_int_at_least(0), default=0, help="random seed of the data sets")
    p.add_argument("--ratings", type=_int_at_least(100), default=20_000,
                   help="ratings of the recommender data (matrix factorization vs the bias model)")
    p.add_argument("--cells", type=_int_at_least(4), default=192,
                   help="about this many grid cells of the climate data, as a lat x lon grid with at most "
                        "this many (192: 11 x 17 = 187 cells; pointwise regression vs scikit-learn per cell)")
    p.add_argument("--linear-only", action="store_true",
                   help="only the three linear models (skip the recommender and climate parts)")
    p.add_argument(
        "--out", metavar="DIR", default=None,
        help="also write summary.csv, history.csv and loss_curve.png (needs matplotlib) to DIR",
    )
