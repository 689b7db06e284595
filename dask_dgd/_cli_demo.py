"""The recommender and climate parts of ``dask-dgd demo``.

Each task returns the two rows of the demo's table (:class:`~dask_dgd.cli.Result`) and
the history of the dask_dgd fit.  The recommender has no in-memory peer in
scikit-learn: it is compared with the user+item bias model (``n_components=0``), the
baseline a factor model must beat.  The pointwise climate model is compared with
scikit-learn's ``LinearRegression`` fitted cell by cell in memory, the usual way.
"""

import sys
import time

import numpy as np

__all__ = ["recommender_task", "climate_task"]


def recommender_task(client, args, n_ratings):
    """Matrix factorization of power-law ratings on the cluster vs the bias model."""
    import dask.dataframe as dd

    from . import MatrixFactorization
    from .cli import Result
    from .datasets import make_ratings
    from .recommender import train_test_split

    # about 40 ratings per user, and at least 3 cells of the matrix per rating
    n_users = max(20, n_ratings // 40)
    n_items = max(10, n_ratings // 100, -(-3 * n_ratings // n_users))
    frame, _ = make_ratings(n_users, n_items, n_ratings, rank=4, noise=0.5, random_state=args.seed + 3)
    train, test = train_test_split(frame, test_size=0.2, random_state=args.seed)
    train = dd.from_pandas(train, npartitions=2 * args.workers)
    common = dict(alpha=0.02, max_iter=60, learning_rate=0.05, random_state=args.seed, client=client)
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
                           features=int(est.n_components), wall_s=wall, n_iter=int(est.n_iter_),
                           objective=float(est.history_["loss"].iloc[-1]), metric="RMSE", score=rmse))
        history = est.history_ if history is None else history
    return rows, history


def _grid(args, n_cells):
    import xarray as xr

    rng = np.random.default_rng(args.seed + 4)
    T, ny = 120, max(2, int(np.sqrt(n_cells / 1.5)))
    nx = max(2, n_cells // ny)
    time_ = xr.date_range("2000-01-01", periods=T, freq="MS")  # datetime64: no cftime needed
    a = rng.standard_normal((T, ny, nx))
    index = rng.standard_normal(T)
    slope = 1.0 + 0.5 * rng.standard_normal((ny, nx))
    tas = 280.0 + slope * a + 0.3 * index[:, None, None] + 0.2 * rng.standard_normal((T, ny, nx))
    tas[:, 0, 0] = np.nan  # a masked (land) cell
    ds = xr.Dataset(
        {"a": (("time", "lat", "lon"), a), "index": (("time",), index),
         "tas": (("time", "lat", "lon"), tas, {"units": "K"})},
        coords={"time": time_, "lat": np.linspace(-60, 60, ny), "lon": np.linspace(0, 357.5, nx)},
    )
    return ds


def climate_task(client, args, n_cells):
    """One regression per grid cell on the cluster vs scikit-learn cell by cell."""
    from sklearn.linear_model import LinearRegression as SkLinear

    from .cli import Result
    from .climate import ClimateRegressor

    ds = _grid(args, n_cells)
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
