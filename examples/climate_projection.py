"""Predicting a climate projection's temperature from the previous years, cell by cell.

The data is the Met Office model projection ``A1B_north_america.nc`` (yearly air
temperature, 240 years x 37 latitudes x 49 longitudes, 360-day calendar) that ships
inside the ``iris-sample-data`` package (part of the ``test`` extra): nothing is
downloaded.  It is opened lazily with dask chunks, as a user would open a NetCDF file.

Each cell's temperature in year t is predicted from its own temperature in the three
previous years (lags 1-3) and the area-weighted domain mean of year t:

* ``pointwise``: one linear model per grid cell (1,813 models), all fitted in one pass;
* ``pooled``: one linear model for all cells, by distributed gradient descent;

trained on the first 180 years and scored on the last 60 (area-weighted RMSE and R^2)
against two baselines: persistence (last year's value) and the training climatology
(each cell's mean over the training years).  Predictions are written back to NetCDF
with their coordinates and the 360-day calendar.

Run with ``python examples/climate_projection.py``.
"""

import os
import tempfile

import numpy as np
import xarray as xr

from dask_dgd.climate import ClimateRegressor

DIMS = ("time", "latitude", "longitude")


def load(chunks=None):
    import iris_sample_data

    path = os.path.join(iris_sample_data.path, "A1B_north_america.nc")
    ds = xr.open_dataset(path, chunks=chunks or {"time": 60})[["air_temperature"]]
    weights = np.cos(np.deg2rad(ds["latitude"]))
    ds["domain_mean"] = ds["air_temperature"].weighted(weights).mean(("latitude", "longitude"))
    return ds


def _skill(pred, truth, weights):
    ok = np.isfinite(pred) & np.isfinite(truth)
    w = weights.broadcast_like(truth).where(ok, 0.0)
    err = (pred - truth).where(ok, 0.0)
    rmse = float(np.sqrt((w * err**2).sum() / w.sum()))
    mean = float((w * truth.where(ok, 0.0)).sum() / w.sum())
    r2 = 1.0 - float((w * err**2).sum()) / float((w * (truth.where(ok, 0.0) - mean) ** 2).sum())
    return rmse, r2


def main(client=None, out_dir=None):
    ds = load()
    train = ds.isel(time=slice(0, 180))
    test = ds.isel(time=slice(180 - 3, 240))  # three years of history for the lags
    common = dict(sample_dims=DIMS, lags={"air_temperature": [1, 2, 3], "domain_mean": [0]}, client=client)
    features = ["air_temperature", "domain_mean"]
    print(f"{ds.sizes['time']} years x {ds.sizes['latitude']} x {ds.sizes['longitude']} cells, calendar "
          f"{ds.indexes['time'].calendar}; train on 180 years, test on 60")

    pointwise = ClimateRegressor(features, "air_temperature", model="pointwise", **common).fit(train)
    pooled = ClimateRegressor(features, "air_temperature", model="pooled", solver="lbfgs", tol=1e-8,
                              max_iter=500, **common).fit(train)

    truth = test["air_temperature"].isel(time=slice(3, None)).load()
    weights = np.cos(np.deg2rad(truth["latitude"]))
    scores = {}
    for name, model in (("pointwise", pointwise), ("pooled", pooled)):
        pred = model.predict(test).isel(time=slice(3, None)).load()
        scores[name] = _skill(pred, truth, weights)
    persistence = test["air_temperature"].shift(time=1).isel(time=slice(3, None)).load()
    scores["persistence"] = _skill(persistence, truth, weights)
    climatology = train["air_temperature"].mean("time").broadcast_like(truth).load()
    scores["climatology"] = _skill(climatology, truth, weights)
    print("test years 2040-2099, area-weighted:")
    for name, (rmse, r2) in scores.items():
        print(f"  {name:<12} RMSE {rmse:6.3f} K   R^2 {r2:6.3f}")

    coef = pointwise.coef_.sel(feature="domain_mean")
    print(f"pointwise slope on the domain mean: {float(coef.min()):.2f} .. {float(coef.max()):.2f} "
          f"(mean {float(coef.mean()):.2f})")
    out_dir = out_dir or tempfile.mkdtemp(prefix="dask-dgd-climate-")
    path = os.path.join(out_dir, "pointwise_prediction.nc")
    pointwise.predict(test).to_netcdf(path)
    written = xr.open_dataarray(path)
    print(f"predictions written to {path}: dims {written.dims}, calendar {written.indexes['time'].calendar}")
    written.close()
    return {"scores": scores, "path": path, "coef_domain_mean": coef}


if __name__ == "__main__":
    main()
