"""The ``dask-dgd demo``'s synthetic climate grid (the demo and its warm-up fit it)."""

import numpy as np


def demo_grid(seed, n_cells):
    """The demo's synthetic grid of about ``n_cells`` cells: 120 months of a field ``a``,
    an index, and ``tas`` = 280 K + a cell's slope x ``a`` + 0.3 index + noise, one
    cell masked (NaN)."""
    import xarray as xr

    rng = np.random.default_rng(seed + 4)
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
