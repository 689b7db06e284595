"""ClimateRegressor fits on one grid chunked 1, 12, 120 time steps per block and "auto".

``python -m benchmarks.climate_chunks [REPEATS] [T] [NY] [NX] [STEPS]`` (defaults 3, 480,
64, 128, ``1,12,120``: the time steps per block, comma-separated; "auto" is always
added): a synthetic monthly float64 grid (a feature ``x`` and the target ``y``), in memory
and then chunked along time only (spatial dims whole); for each chunking, a pointwise
gaussian fit and a pooled fit (``solver="gd"``, ``max_iter=5``, ``tol=0``), on a
2-worker ``LocalCluster`` (one thread each) and in process (no client: dask's threaded
scheduler), after one warm-up fit, ``REPEATS`` times each, alternating the chunkings; prints every fit's time,
then per case the median, the mean block (cells, MiB) and the ratio to "auto".  Issue 50,
item 9: where the per-block overhead dominates (the threshold of the tiny-chunks
warning; see ``benchmarks/RESULTS.md``).

``python -m benchmarks.climate_chunks a1b [REPEATS]``: the same on iris-sample-data's
``A1B_north_america.nc`` (240 years x 37 x 49, float32), opened with ``chunks={}``
(its own chunking, one year per block) and with ``chunks={"time": 240}`` (the fix the
warning names); a per-cell AR(1) pointwise fit and a pooled one (``lags=[1]``).
"""
import os
import statistics
import sys
import time
import warnings

import numpy as np
import xarray as xr
from distributed import Client, LocalCluster

from dask_dgd.climate import ClimateRegressor


def grid(T, ny, nx):
    rng = np.random.default_rng(0)
    t = xr.date_range("1980-01-01", periods=T, freq="MS", calendar="noleap", use_cftime=True)
    x = rng.normal(size=(T, ny, nx))
    y = 1.0 + 2.0 * x + rng.normal(size=(T, ny, nx))
    return xr.Dataset({"x": (("time", "lat", "lon"), x), "y": (("time", "lat", "lon"), y)},
                      coords={"time": t, "lat": np.linspace(-80, 80, ny),
                              "lon": np.linspace(0, 360, nx, endpoint=False)})


def fit(ds, model, client):
    extra = dict(solver="gd", max_iter=5, tol=0.0) if model == "pooled" else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        ClimateRegressor(["x"], "y", model=model, client=client, **extra).fit(ds)
        return time.perf_counter() - t0


def a1b(repeats):
    import iris_sample_data

    path = os.path.join(os.path.dirname(iris_sample_data.__file__), "sample_data", "A1B_north_america.nc")
    openings = {"chunks={}": {}, "chunks={'time': 240}": {"time": 240}}
    lags = {"air_temperature": [1]}
    times = {}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster, Client(cluster) as client:
        for where, cl in (("cluster", client), ("in process", None)):
            for model in ("pointwise", "pooled"):
                extra = dict(solver="gd", max_iter=5, tol=0.0) if model == "pooled" else {}
                for rep in range(repeats + 1):  # the first: a warm-up
                    for name, chunks in openings.items():
                        ds = xr.open_dataset(path, chunks=chunks)
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            t0 = time.perf_counter()
                            ClimateRegressor(["air_temperature"], "air_temperature", model=model, lags=lags,
                                             client=cl, **extra).fit(ds)
                            wall = time.perf_counter() - t0
                        if rep:
                            times.setdefault((where, model, name), []).append(wall)
                        print(f"{where} {model} {name} rep {rep}: {wall:.2f} s", flush=True)
    for (where, model, name), walls in times.items():
        med = statistics.median(walls)
        fixed = statistics.median(times[(where, model, "chunks={'time': 240}")])
        print(f"{where:10s} {model:9s} {name:22s} median {med:6.2f} s, {med / fixed:5.2f}x the fix")


def main():
    if sys.argv[1:2] == ["a1b"]:
        return a1b(int(sys.argv[2]) if len(sys.argv) > 2 else 3)
    args = [int(a) for a in sys.argv[1:5]]
    repeats, T, ny, nx = (args + [3, 480, 64, 128][len(args):])[:4]
    steps = sys.argv[5].split(",") if len(sys.argv) > 5 else ["1", "12", "120"]
    base = grid(T, ny, nx)
    chunkings = {**{n: {"time": int(n)} for n in steps}, "auto": "auto"}
    data = {name: base.chunk(c).persist() for name, c in chunkings.items()}
    cells = T * ny * nx
    times = {}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster, Client(cluster) as client:
        for where, cl in (("cluster", client), ("in process", None)):
            for model in ("pointwise", "pooled"):
                fit(data["auto"], model, cl)  # warm-up: Numba's compilation on the workers, imports
                for rep in range(repeats):
                    for name, ds in data.items():
                        if cl is not None:
                            ds = ds.chunk(chunkings[name])  # a fresh graph, read from the driver's memory
                        wall = fit(ds, model, cl)
                        times.setdefault((where, model, name), []).append(wall)
                        print(f"{where} {model} chunks={name} rep {rep}: {wall:.2f} s", flush=True)
    print(f"grid {T} x {ny} x {nx} float64 ({cells * 8 / 2**20:.1f} MiB per variable)")
    for (where, model, name), walls in times.items():
        blocks = data[name]["y"].data.npartitions
        med = statistics.median(walls)
        auto = statistics.median(times[(where, model, "auto")])
        print(f"{where:10s} {model:9s} chunks={name:5s} blocks={blocks:4d} mean block {cells / blocks:9.0f} cells "
              f"{cells * 8 / blocks / 2**20:7.3f} MiB: median {med:6.2f} s, {med / auto:5.2f}x auto")


if __name__ == "__main__":
    main()
