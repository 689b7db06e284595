"""Area weights where cos(latitude) is not a cell's area (issue 50): CF cell_measures,
2-D vertex bounds (spherical polygons), areas estimated from the centres of a
curvilinear grid; ORCA2 (NEMO) from iris-sample-data end to end."""

import glob
import logging
import os

import numpy as np
import pytest
import xarray as xr
from sklearn.linear_model import LinearRegression as SkLinear
from sklearn.linear_model import Ridge

from dask_dgd import InputError
from dask_dgd.climate import ClimateRegressor, to_design_matrix
from dask_dgd.climate._areas import polygon_areas

_POOLED = {"model": "pooled", "solver": "lbfgs", "max_iter": 500, "tol": 1e-12}


def _grid(lat=(-60.0, -20.0, 20.0, 60.0), lon=(0.0, 20.0, 40.0), T=24, seed=0):
    """``tas = 1 + slope(row) a + noise`` on (time, lat, lon)."""
    lat, lon = np.asarray(lat, dtype=float), np.asarray(lon, dtype=float)
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(T, lat.size, lon.size))
    slope = 2.0 + 1.5 * np.arange(lat.size)[:, None]
    tas = 1.0 + slope * a + 0.05 * rng.normal(size=a.shape)
    coords = {"time": xr.date_range("2000-01-01", periods=T, freq="MS"),
              "lat": ("lat", lat, {"units": "degrees_north"}), "lon": ("lon", lon, {"units": "degrees_east"})}
    dims = ("time", "lat", "lon")
    return xr.Dataset({"a": (dims, a), "tas": (dims, tas)}, coords=coords)


def _weights(ds, target="tas", features=("a",), **kw):
    """The area weight of each spatial cell, as the design matrix has it."""
    dm = to_design_matrix(ds, list(features), target, **kw)
    w = dm.to_dataarray(dm.sample_weight).compute()
    return w.isel({dm.spec.time_dim: 0}).transpose(*dm.spec.space_dims()).values


def _messages(caplog):
    return [r.getMessage() for r in caplog.records]


# ------------------------------------------------------------- 1: CF cell_measures
def test_cell_measures_give_the_weights_divided_by_their_largest(caplog, client):
    ds = _grid()
    area = np.random.default_rng(1).uniform(1.0, 2.0, size=(4, 3)) * np.array([1.0, 1.0, 1.0, 6.0])[:, None]
    ds["areacella"] = (("lat", "lon"), area, {"units": "m2"})
    ds["tas"].attrs["cell_measures"] = "area: areacella"
    with caplog.at_level(logging.INFO, logger="dask_dgd.climate"):
        w = _weights(ds)
    np.testing.assert_allclose(w, area / area.max(), rtol=1e-12)
    assert ("area weights: the cell areas 'areacella' (CF cell_measures of 'tas'), divided by their largest value "
            f"{area.max():g}") in _messages(caplog)
    # not cos(latitude): a pooled fit is the weighted least squares with the file's areas
    est = ClimateRegressor("a", "tas", client=client, **_POOLED).fit(ds)
    a, tas = ds["a"].values, ds["tas"].values
    ref = SkLinear().fit(a.reshape(-1, 1), tas.ravel(), sample_weight=np.broadcast_to(area, a.shape).ravel())
    np.testing.assert_allclose(float(est.coef_.sel(feature="a")), ref.coef_[0], rtol=1e-5)
    cos = SkLinear().fit(a.reshape(-1, 1), tas.ravel(),
                         sample_weight=np.broadcast_to(np.cos(np.deg2rad(ds["lat"].values))[:, None], a.shape).ravel())
    assert abs(cos.coef_[0] - ref.coef_[0]) > 0.05
    # with volume measures too, on a subset of the spatial dims (broadcast), named by the first feature
    ds = _grid()
    ds["area_by_lat"] = ("lat", np.array([1.0, 3.0, 3.0, 2.0]))
    ds["a"].attrs["cell_measures"] = "volume: vol area: area_by_lat"
    np.testing.assert_allclose(_weights(ds), np.broadcast_to(np.array([1.0, 3.0, 3.0, 2.0])[:, None] / 3.0, (4, 3)))
    # the target's attribute comes first
    ds["other"] = ("lon", np.array([2.0, 4.0, 1.0]))
    ds["tas"].attrs["cell_measures"] = "area: other"
    np.testing.assert_allclose(_weights(ds), np.broadcast_to(np.array([0.5, 1.0, 0.25]), (4, 3)))


def test_cell_measures_pointwise_alpha_applies_to_the_weighted_sum():
    ds = _grid()
    area = np.random.default_rng(2).uniform(1.0, 5.0, size=(4, 3))
    ds["areacella"] = (("lat", "lon"), area)
    ds["tas"].attrs["cell_measures"] = "area: areacella"
    alpha = 5.0
    est = ClimateRegressor("a", "tas", model="pointwise", alpha=alpha).fit(ds)
    a, tas, w = ds["a"].values, ds["tas"].values, area / area.max()
    for j in range(4):
        for i in range(3):
            ref = Ridge(alpha=alpha).fit(a[:, j, i, None], tas[:, j, i], sample_weight=np.full(24, w[j, i]))
            np.testing.assert_allclose(float(est.coef_.isel(lat=j, lon=i, feature=0)), ref.coef_[0], rtol=1e-8)


def test_a_missing_cell_measures_variable_falls_back_to_the_grid_and_says_so(caplog):
    ds = _grid()
    ds["tas"].attrs["cell_measures"] = "area: areacella"  # CF lets it live in another file
    with caplog.at_level(logging.INFO, logger="dask_dgd.climate"):
        w = _weights(ds)
    np.testing.assert_allclose(w, np.broadcast_to(np.cos(np.deg2rad(ds["lat"].values))[:, None], (4, 3)), rtol=1e-12)
    assert any("cell_measures of 'tas' names the cell areas 'areacella', which are not in the Dataset" in m
               for m in _messages(caplog))


def test_bad_cell_areas_are_refused_with_the_fix():
    ds = _grid()
    area = np.ones((4, 3))
    area[1, 2] = -1.0
    ds["cella"] = (("lat", "lon"), area)
    ds["tas"].attrs["cell_measures"] = "area: cella"
    with pytest.raises(InputError, match=r"the cell areas 'cella' \(cell_measures of 'tas'\) are negative or not "
                                         r"finite \(NaN, inf\) at 1 cells where 'tas' has values: fix them \(areas are "
                                         r">= 0\), drop the attribute \(del ds\['tas'\]\.attrs\['cell_measures'\]\) to "
                                         r"weight by the grid, or pass area_weights=False"):
        _weights(ds)
    area[1, 2] = np.nan
    ds["cella"] = (("lat", "lon"), area)
    with pytest.raises(InputError, match=r"negative or not finite \(NaN, inf\) at 1 cells where 'tas' has values"):
        _weights(ds)
    # a NaN area where the target has no value (land in an ocean file) is masked like the target
    ds["tas"] = ds["tas"].where(~((ds["lat"] == -20.0) & (ds["lon"] == 40.0)))
    w = _weights(ds)
    assert np.isnan(w[1, 2]) and np.isfinite(np.delete(w.ravel(), 5)).all()
    # areas on another dimension
    ds = _grid().assign(cella=("time", np.ones(24)))
    ds["tas"].attrs["cell_measures"] = "area: cella"
    with pytest.raises(InputError, match=r"the cell areas 'cella' \(cell_measures of 'tas'\) have dimensions "
                                         r"\('time',\); they must be on the spatial dimensions \('lat', 'lon'\) or "
                                         r"some of them"):
        _weights(ds)
    ds["cella"] = (("lat", "lon"), np.zeros((4, 3)))
    with pytest.raises(InputError, match=r"the cell areas 'cella' \(cell_measures of 'tas'\) are all zero"):
        _weights(ds)


# -------------------------------------------------- 2: vertex bounds of a 2-D grid
def _two_d_grid(step=1.0, bounds=True, clockwise=False, T=2):
    """A regular ``step``-degree global grid written as 2-D coordinates (a curvilinear
    grid's layout), with CF 4-vertex bounds; the exact relative areas."""
    lat_e = np.arange(-90.0, 90.0 + step / 2, step)
    lon_e = np.arange(0.0, 360.0 + step / 2, step)
    lat_c, lon_c = (lat_e[:-1] + lat_e[1:]) / 2, (lon_e[:-1] + lon_e[1:]) / 2
    ny, nx = lat_c.size, lon_c.size
    LAT, LON = np.meshgrid(lat_c, lon_c, indexing="ij")
    dims = ("time", "y", "x")
    rng = np.random.default_rng(0)
    ds = xr.Dataset({"a": (dims, rng.normal(size=(T, ny, nx))), "tas": (dims, rng.normal(size=(T, ny, nx)))},
                    coords={"time": xr.date_range("2000-01-01", periods=T, freq="MS"),
                            "nav_lat": (("y", "x"), LAT, {"standard_name": "latitude", "units": "degrees_north"}),
                            "nav_lon": (("y", "x"), LON, {"standard_name": "longitude", "units": "degrees_east"})})
    if bounds:
        order = [0, 1, 2, 3] if not clockwise else [0, 3, 2, 1]
        lo, hi = lat_e[:-1][:, None], lat_e[1:][:, None]
        w, e = lon_e[:-1][None, :], lon_e[1:][None, :]
        blat = np.stack([np.broadcast_to(v, (ny, nx)) for v in (lo, lo, hi, hi)], axis=-1)[..., order]
        blon = np.stack([np.broadcast_to(v, (ny, nx)) for v in (w, e, e, w)], axis=-1)[..., order]
        ds["bounds_lat"] = (("y", "x", "nvertex"), blat)
        ds["bounds_lon"] = (("y", "x", "nvertex"), blon)
        ds["nav_lat"].attrs["bounds"] = "bounds_lat"
        ds["nav_lon"].attrs["bounds"] = "bounds_lon"
    exact = (np.sin(np.deg2rad(lat_e[1:])) - np.sin(np.deg2rad(lat_e[:-1])))[:, None] * np.deg2rad(step)
    return ds, np.broadcast_to(exact / exact.max(), (ny, nx))


@pytest.mark.parametrize("clockwise", [False, True])
def test_vertex_bounds_of_a_regular_grid_give_its_exact_areas(clockwise, caplog):
    ds, exact = _two_d_grid(clockwise=clockwise)
    with caplog.at_level(logging.INFO, logger="dask_dgd.climate"):
        w = _weights(ds)
    # the polar cells have two vertices at the pole (a triangle): exact too
    np.testing.assert_allclose(w, exact, rtol=0, atol=1e-12)
    assert ("area weights: 'nav_lat' is a 2-D latitude (a curvilinear grid): cells weighted by their areas on the "
            "sphere from the vertex bounds 'bounds_lat' and 'bounds_lon', divided by the largest") in _messages(caplog)


def test_polygon_areas_of_the_whole_sphere_and_of_collapsed_cells():
    ds, _ = _two_d_grid(step=5.0)
    area = polygon_areas(np.deg2rad(ds["bounds_lat"].values), np.deg2rad(ds["bounds_lon"].values))
    np.testing.assert_allclose(area.sum(), 4 * np.pi, rtol=1e-12)
    # great-circle edges only: the polygon between two parallels is larger (the edges bulge poleward)
    cell = np.deg2rad([[10.0, 10.0, 20.0, 20.0], [0.0, 30.0, 30.0, 0.0]])
    exact = (np.sin(np.deg2rad(20.0)) - np.sin(np.deg2rad(10.0))) * np.deg2rad(30.0)
    np.testing.assert_allclose(polygon_areas(*cell), exact, rtol=1e-13)
    assert polygon_areas(*cell, parallels=False) > exact * 1.001
    # a cell collapsed to a point (a fold or pole) has no area; a repeated vertex adds none
    assert polygon_areas(np.full(4, 0.3), np.full(4, 1.0)) == 0.0
    tri = polygon_areas(np.deg2rad([0.0, 0.0, 90.0]), np.deg2rad([0.0, 90.0, 0.0]))
    np.testing.assert_allclose(tri, np.pi / 2, rtol=1e-14)  # an octant
    np.testing.assert_allclose(polygon_areas(np.deg2rad([0.0, 0.0, 0.0, 90.0]), np.deg2rad([0.0, 0.0, 90.0, 0.0])),
                               np.pi / 2, rtol=1e-14)


def test_bad_vertex_bounds_are_refused_with_the_fix():
    ds, _ = _two_d_grid(step=30.0)
    bad = ds.copy()
    bad = bad.drop_vars("bounds_lat").assign(bounds_lat=(("y", "x", "two"), ds["bounds_lat"].values[..., :2]))
    with pytest.raises(InputError, match=r"the bounds variable 'bounds_lat' of the 2-D coordinate 'nav_lat'\('y', 'x'\) "
                                         r"has dimensions \{'y': 6, 'x': 12, 'two': 2\}; CF vertex bounds of a 2-D "
                                         r"coordinate are \(y, x, n_vertex\) with at least 3 vertices"):
        _weights(bad)
    bad = ds.copy()
    bad["bounds_lon"] = bad["bounds_lon"].where(bad["bounds_lon"] != 30.0)
    with pytest.raises(InputError, match=r"the vertex bounds 'bounds_lat' or 'bounds_lon' are not all finite \(NaN or "
                                         r"inf\): fix them, or drop the bounds attributes"):
        _weights(bad)


# ------------------------------------------- 3: a curvilinear grid without either
def test_without_areas_or_bounds_the_areas_are_estimated_from_the_centres(caplog):
    ds, exact = _two_d_grid(bounds=False)
    with caplog.at_level(logging.INFO, logger="dask_dgd.climate"):
        w = _weights(ds)
    # measured: within 1.3e-4 of the exact areas on every cell, the polar rows included
    np.testing.assert_allclose(w, exact, rtol=2e-4)
    assert any("'nav_lat' is a 2-D latitude (a curvilinear grid) without cell areas or vertex bounds: cells weighted "
               "by their areas estimated from the centres 'nav_lat' and 'nav_lon'" in m for m in _messages(caplog))


def test_a_curvilinear_grid_whose_areas_cannot_be_estimated_is_refused_with_the_fixes():
    ds, _ = _two_d_grid(step=30.0, bounds=False)
    fixes = (r"add the cell areas as a variable named by the target's cell_measures \(ds\['areacello'\] = \(\('y', "
             r"'x'\), areas\); ds\['tas'\]\.attrs\['cell_measures'\] = 'area: areacello'\), give 'nav_lat' and the "
             r"2-D longitude CF vertex bounds \(a \(y, x, n_vertex\) variable named by each one's 'bounds' "
             r"attribute\), or pass area_weights=False")
    head = (r"the latitude 'nav_lat'\('y', 'x'\) is 2-D \(a curvilinear grid\), where cos\(latitude\) is not a cell's "
            r"relative area, and the Dataset has no cell areas or vertex bounds ")
    with pytest.raises(InputError, match=head + r"\(no 2-D longitude over \('y', 'x'\) to estimate them from the "
                                               r"centres\): " + fixes):
        _weights(ds.drop_vars("nav_lon"))
    holes = ds.assign_coords(nav_lat=ds["nav_lat"].where(ds["nav_lat"] < 70.0))
    with pytest.raises(InputError, match=head + r"\('nav_lat' or 'nav_lon' is not finite everywhere"):
        _weights(holes)
    with pytest.raises(InputError, match=head + r"\(a grid of 1 x 12 cells is too small"):
        _weights(ds.isel(y=[2]))
    # each fix works
    assert np.isfinite(_weights(ds.drop_vars("nav_lon"), area_weights=False)).all()
    ds["cella"] = (("y", "x"), np.ones((6, 12)))
    ds["tas"].attrs["cell_measures"] = "area: cella"
    np.testing.assert_allclose(_weights(ds.drop_vars("nav_lon")), 1.0)


# ------------------------------------------------------- ORCA2 from iris-sample-data
def _orca2():
    """The three monthly ORCA2 (NEMO) files concatenated along ``time_counter``:
    ``tos(time_counter, y, x)``, ``nav_lat``/``nav_lon(y, x)`` with their vertex bounds
    ``bounds_lat``/``bounds_lon(y, x, nvertex)``, a month number as the predictor."""
    iris_sample_data = pytest.importorskip("iris_sample_data")
    folder = os.path.join(os.path.dirname(iris_sample_data.__file__), "sample_data", "NEMO")
    files = sorted(glob.glob(os.path.join(folder, "nemo_1m_*_grid-T.nc")))
    assert len(files) == 3
    ds = xr.open_mfdataset(files, combine="nested", concat_dim="time_counter", data_vars="minimal",
                           coords="minimal", compat="override")
    return ds[["tos", "bounds_lat", "bounds_lon"]].assign(month=("time_counter", np.array([1.0, 2.0, 3.0])))


def _geod_areas(ds):
    """Each ORCA2 cell's area on the unit sphere by pyproj: the geodesic polygon of its
    vertices (signed, counterclockwise positive), and for each edge between two vertices
    of the same latitude (a parallel) the area between the parallel and the geodesic:
    the cap sector from the nearer pole, ``s dlon (1 - s sin(lat))``, less pyproj's area
    of the triangle (pole, a, b)."""
    pyproj = pytest.importorskip("pyproj")
    geod = pyproj.Geod(a=1.0, b=1.0)
    lat, lon = ds["bounds_lat"].values.astype(np.float64), ds["bounds_lon"].values.astype(np.float64)
    out = np.empty(lat.shape[:2])
    n = lat.shape[-1]
    for j, i in np.ndindex(*out.shape):
        la, lo = lat[j, i], lon[j, i]
        area = geod.polygon_area_perimeter(lo, la)[0]
        for k in range(n):
            a, b = k, (k + 1) % n
            d_lon = (lo[b] - lo[a] + 180.0) % 360.0 - 180.0
            if la[a] == la[b] and d_lon != 0 and abs(la[a]) < 90.0:
                s = 1.0 if la[a] >= 0 else -1.0
                cap = s * np.deg2rad(d_lon) * (1.0 - s * np.sin(np.deg2rad(la[a])))
                area += cap - geod.polygon_area_perimeter([lo[a], lo[a], lo[b]], [90.0 * s, la[a], la[b]])[0]
        out[j, i] = abs(area)
    return out


def test_orca2_weights_are_the_cells_areas_on_the_sphere_and_fits_use_them(caplog, client):
    ds = _orca2()
    with caplog.at_level(logging.INFO, logger="dask_dgd.climate"):
        dm = to_design_matrix(ds, ["month"], "tos")
        w = dm.to_dataarray(dm.sample_weight).isel(time_counter=0).compute().values
    # the file's tos says cell_measures = "area: area", a variable the file does not hold
    assert any("cell_measures of 'tos' names the cell areas 'area', which are not in the Dataset" in m
               for m in _messages(caplog))
    sea = np.isfinite(ds["tos"].isel(time_counter=0).values)
    assert sea.sum() > 50_000 and np.array_equal(np.isfinite(w), sea)
    area = _geod_areas(ds)
    ref = area / area.max()
    # summed over latitude bands of 10 degrees, against pyproj's areas
    nav_lat = ds["nav_lat"].values.astype(np.float64)
    band = np.floor(nav_lat / 10.0)
    for b in np.unique(band[sea]):
        cells = sea & (band == b)
        np.testing.assert_allclose(w[cells].sum(), ref[cells].sum(), rtol=1e-6)
    np.testing.assert_allclose(w[sea], ref[sea], rtol=1e-6)
    # cos(nav_lat) is not the cells' relative area: off by a factor 60 between cells
    cos = np.cos(np.deg2rad(nav_lat))
    ratio = (cos[sea] / cos[sea].sum()) / (ref[sea] / ref[sea].sum())
    assert ratio.min() < 0.05 and ratio.max() > 3.0
    # the areas estimated from the centres alone (the bounds dropped) against these: 0.3% on interior cells,
    # 2% on the edge rows and columns (each divided by its own largest)
    estimated = _weights(ds.drop_vars(["bounds_lat", "bounds_lon"]), target="tos", features=("month",))
    inner = sea.copy()
    inner[[0, -1], :] = inner[:, [0, -1]] = False
    np.testing.assert_allclose(estimated[inner], ref[inner], rtol=3e-3)
    np.testing.assert_allclose(estimated[sea], ref[sea], rtol=2e-2)
    # the file's own areas, when given, are the weights
    with_area = ds.assign(area=(("y", "x"), area * 6371e3 ** 2, {"units": "m2"}))
    np.testing.assert_allclose(_weights(with_area, target="tos", features=("month",))[sea], ref[sea], rtol=1e-12)
    # pooled: weighted least squares over every sea cell and month with these weights
    tos = ds["tos"].values.astype(np.float64)
    month = np.broadcast_to(np.array([1.0, 2.0, 3.0])[:, None, None], tos.shape)
    keep = np.isfinite(tos)
    sk = SkLinear().fit(month[keep][:, None], tos[keep], sample_weight=np.broadcast_to(ref, tos.shape)[keep])
    pooled = ClimateRegressor(["month"], "tos", client=client, **_POOLED).fit(ds)
    np.testing.assert_allclose(float(pooled.coef_.sel(feature="month")), sk.coef_[0], rtol=1e-5)
    np.testing.assert_allclose(pooled.intercept_, sk.intercept_, rtol=1e-5)
    by_cos = SkLinear().fit(month[keep][:, None], tos[keep], sample_weight=np.broadcast_to(cos, tos.shape)[keep])
    assert abs(by_cos.intercept_ - sk.intercept_) > 1e-3 * abs(sk.intercept_)
    # pointwise with a ridge penalty: each cell's weight matters; cells against scikit-learn
    alpha = 2.0
    pointwise = ClimateRegressor(["month"], "tos", model="pointwise", alpha=alpha).fit(ds)
    rng = np.random.default_rng(0)
    js, is_ = np.nonzero(sea)
    for k in rng.choice(js.size, 8, replace=False):
        j, i = js[k], is_[k]
        cell = Ridge(alpha=alpha).fit(np.array([[1.0], [2.0], [3.0]]), tos[:, j, i], sample_weight=np.full(3, ref[j, i]))
        np.testing.assert_allclose(float(pointwise.coef_.isel(y=j, x=i, feature=0)), cell.coef_[0],
                                   rtol=1e-6, atol=1e-10)
