"""CF-aware defaults (issue 25, item 3): ``sample_dims="auto"`` and ``time_dim="auto"``
find the time, latitude-like and longitude-like dimensions from CF attributes, values or
names; latitude bounds give exact area weights; curvilinear grids fit end to end."""

import logging

import dask
import numpy as np
import pytest
import xarray as xr
from sklearn.linear_model import LinearRegression as SkLinear
from sklearn.linear_model import Ridge

from dask_dgd import InputError, ParameterError
from dask_dgd.climate import ClimateRegressor, to_design_matrix
from dask_dgd.climate._areas import centre_areas

_POOLED = {"model": "pooled", "solver": "lbfgs", "max_iter": 500, "tol": 1e-12}


def _kw(model):
    """The training settings of ``model`` (pointwise models take none)."""
    return {k: v for k, v in _POOLED.items() if k != "model"} if model == "pooled" else {}


def _data(T=24, Y=4, X=3, seed=0, heterogeneous=False):
    """``tas = 1 + 2 a + noise`` (the slope growing with the row if ``heterogeneous``)."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(T, Y, X))
    slope = 2.0 + (np.arange(Y)[:, None] * 1.5 if heterogeneous else 0.0)
    tas = 1.0 + slope * a + 0.05 * rng.normal(size=(T, Y, X))
    return a, tas


def _dataset(dims, coords, T=24, Y=4, X=3, seed=0, chunks=8, heterogeneous=False):
    a, tas = _data(T, Y, X, seed, heterogeneous)
    ds = xr.Dataset({"a": (dims, a), "tas": (dims, tas, {"units": "K"})}, coords=coords)
    return ds.chunk({dims[0]: chunks})


def _era5(T=24, Y=4, X=3, **kw):
    """ERA5's names and CF attributes: valid_time (axis T), latitude (descending), longitude."""
    time = xr.date_range("2000-01-01", periods=T, freq="MS")
    coords = {
        "valid_time": ("valid_time", time, {"axis": "T", "standard_name": "time"}),
        "latitude": ("latitude", np.linspace(60.0, -60.0, Y), {"standard_name": "latitude",
                                                               "units": "degrees_north"}),
        "longitude": ("longitude", np.arange(X) * 10.0, {"standard_name": "longitude", "units": "degrees_east"}),
    }
    return _dataset(("valid_time", "latitude", "longitude"), coords, T, Y, X, **kw)


def _weighted_reference(ds, weights):
    """Intercept and slope of ``tas ~ a`` by scikit-learn, ``weights`` on the space dims."""
    a, tas = ds["a"].values, ds["tas"].values  # stored (time, Y, X)
    w = np.broadcast_to(weights, a.shape)
    ref = SkLinear().fit(a.reshape(-1, 1), tas.ravel(), sample_weight=w.ravel())
    return ref.intercept_, ref.coef_[0]


# ------------------------------------------------------------ "auto" dimensions
@pytest.mark.parametrize("model", ["pooled", "pointwise"])
def test_era5_names_fit_without_sample_dims_as_with_the_explicit_tuple(model):
    ds = _era5()
    auto = ClimateRegressor("a", "tas", model=model, **_kw(model)).fit(ds)
    assert auto.sample_dims_ == ("valid_time", "latitude", "longitude") and auto.time_dim_ == "valid_time"
    explicit = ClimateRegressor("a", "tas", model=model, sample_dims=("valid_time", "latitude", "longitude"),
                                time_dim="valid_time", **_kw(model)).fit(ds)
    np.testing.assert_allclose(auto.coef_.values, explicit.coef_.values, rtol=1e-12)
    np.testing.assert_allclose(auto.intercept_, explicit.intercept_, rtol=1e-12)
    if model == "pooled":  # the weights are cos(latitude) of the ERA5 latitudes
        _, b1 = _weighted_reference(ds, np.cos(np.deg2rad(ds["latitude"].values))[:, None])
        np.testing.assert_allclose(float(auto.coef_.sel(feature="a")), b1, rtol=1e-5)
    xr.testing.assert_allclose(auto.predict(ds).compute(), explicit.predict(ds).compute())
    # the design matrix takes the same default
    dm = to_design_matrix(ds, ["a"], "tas")
    assert dm.spec.sample_dims == ("valid_time", "latitude", "longitude")
    X, w = dask.compute(dm.X, dm.sample_weight)
    assert X.shape == (24 * 4 * 3, 1) and np.isclose(w.max(), np.cos(np.deg2rad(20.0)))


@pytest.mark.parametrize("names", [("y", "x"), ("northing", "easting")])
def test_projected_grid_is_found_by_standard_name(names):
    ydim, xdim = names
    time = xr.date_range("2000-01-01", periods=24, freq="D")
    coords = {
        "time": time,
        ydim: (ydim, np.arange(4) * 1000.0, {"standard_name": "projection_y_coordinate", "units": "m"}),
        xdim: (xdim, np.arange(3) * 1000.0, {"standard_name": "projection_x_coordinate", "units": "m"}),
    }
    ds = _dataset(("time", ydim, xdim), coords)
    # a projected y is no latitude: the weights need the 2-D latitude coordinate (or none)
    lat2d = np.linspace(40.0, 50.0, 12).reshape(4, 3)
    lon2d = np.tile(np.linspace(-5.0, 5.0, 3), (4, 1))
    ds = ds.assign_coords(lat=((ydim, xdim), lat2d, {"standard_name": "latitude", "units": "degrees_north"}),
                          lon=((ydim, xdim), lon2d, {"standard_name": "longitude", "units": "degrees_east"}))
    model = ClimateRegressor("a", "tas", model="pointwise").fit(ds)
    assert model.sample_dims_ == ("time", ydim, xdim)
    assert model.coef_.dims == (ydim, xdim, "feature")
    np.testing.assert_allclose(model.coef_.values, 2.0, atol=0.05)
    w = to_design_matrix(ds, ["a"], "tas").sample_weight.compute()
    # a 2-D latitude (curvilinear) without cell areas or vertex bounds: the areas estimated from the centres
    np.testing.assert_allclose(np.sort(np.unique(w)), np.sort(_estimated(ds, "lat", "lon").ravel()))


@pytest.mark.parametrize("names", [("time", "lat", "lon"), ("t", "latitude", "longitude"), ("date", "y", "x"),
                                   ("valid_time", "rlat", "rlon"), ("time_counter", "nj", "ni")])
def test_names_alone_are_enough(names):
    tdim, ydim, xdim = names
    ds = _dataset(names, {tdim: np.arange(24.0)})  # no attributes, numbers for times, no lat/lon values
    dm = to_design_matrix(ds.transpose(xdim, tdim, ydim), ["a"], "tas", area_weights=False)
    assert dm.spec.sample_dims == names and dm.spec.time_dim == tdim
    est = ClimateRegressor("a", "tas", model="pointwise", area_weights=False).fit(ds)
    assert est.sample_dims_ == names


def test_cftime_values_and_undecoded_units_make_a_time_dimension():
    cf = xr.date_range("2000-01-01", periods=24, freq="MS", calendar="360_day", use_cftime=True)
    ds = _dataset(("month", "lat", "lon"), {"month": cf, "lat": [-30.0, -10.0, 10.0, 30.0]})
    assert to_design_matrix(ds, ["a"], "tas").spec.time_dim == "month"
    raw = _dataset(("step", "lat", "lon"), {"step": ("step", np.arange(24.0), {"units": "days since 2000-01-01"}),
                                            "lat": [-30.0, -10.0, 10.0, 30.0]})
    assert to_design_matrix(raw, ["a"], "tas").spec.sample_dims == ("step", "lat", "lon")


@pytest.mark.parametrize("model", ["pooled", "pointwise"])
def test_storage_order_lat_lon_time_is_sorted_out(model):
    ds = _era5()
    stored = ds.transpose("latitude", "longitude", "valid_time")
    est = ClimateRegressor("a", "tas", model=model, **_kw(model)).fit(stored)
    assert est.sample_dims_ == ("valid_time", "latitude", "longitude")
    ref = ClimateRegressor("a", "tas", model=model, **_kw(model)).fit(ds)
    np.testing.assert_allclose(est.coef_.transpose(*ref.coef_.dims).values, ref.coef_.values, rtol=1e-8)
    pred = est.predict(stored)
    assert pred.dims == ("latitude", "longitude", "valid_time")  # the target's order, as before
    np.testing.assert_allclose(pred.transpose(*ds["tas"].dims).values, ref.predict(ds).values, rtol=1e-8)


def test_an_unclassifiable_dimension_is_refused_with_the_fix():
    ds = _era5()
    ds = xr.concat([ds, ds + 1.0], dim="member")
    msg = (r"the target 'tas' has the dimension\(s\) 'member', which sample_dims=\"auto\" cannot classify as time, "
           r"latitude-like \(Y\) or longitude-like \(X\): select or reduce them first \(e\.g\. ds\.isel\(member=0\) "
           r"or ds\.mean\('member'\)\), or pass sample_dims=\(\.\.\.\) explicitly")
    with pytest.raises(InputError, match=msg):
        ClimateRegressor("a", "tas").fit(ds)
    with pytest.raises(InputError, match=msg):
        to_design_matrix(ds, ["a"], "tas")
    # a vertical level with a CF axis says what it is
    level = ds.isel(member=0).expand_dims(level=[850.0])
    level["level"].attrs["axis"] = "Z"
    with pytest.raises(InputError, match=r"the dimension\(s\) 'level' \(CF axis Z\), which sample_dims=\"auto\" "
                                         r"cannot classify"):
        ClimateRegressor("a", "tas", model="pointwise").fit(level)
    # selecting it is the fix
    fitted = ClimateRegressor("a", "tas", model="pointwise").fit(level.isel(level=0))
    assert fitted.sample_dims_ == ("valid_time", "latitude", "longitude")


def test_no_time_dimension_is_refused():
    ds = _dataset(("step", "lat", "lon"), {"step": np.arange(24), "lat": [-30.0, -10.0, 10.0, 30.0]})
    msg = (r"sample_dims=\"auto\" found no time dimension among the dimensions \['step', 'lat', 'lon'\] of the "
           r"target 'tas': none has a coordinate with CF axis 'T', standard_name 'time', datetime or cftime values, or "
           r"a name such as 'time' or 'valid_time'; give its coordinate axis='T', or pass time_dim=")
    with pytest.raises(InputError, match=msg):
        ClimateRegressor("a", "tas").fit(ds)
    with pytest.raises(InputError, match=msg):
        to_design_matrix(ds, ["a"], "tas")
    with pytest.raises(InputError, match=r"time_dim=\"auto\" found no time dimension among sample_dims "
                                         r"\('step', 'lat', 'lon'\)"):
        to_design_matrix(ds, ["a"], "tas", sample_dims=("step", "lat", "lon"))
    # the CF attribute, or naming the time dimension, is the fix
    assert to_design_matrix(ds, ["a"], "tas", time_dim="step").spec.sample_dims == ("step", "lat", "lon")
    ds["step"].attrs["axis"] = "T"
    assert to_design_matrix(ds, ["a"], "tas").spec.time_dim == "step"


def test_two_dimensions_of_one_kind_are_ambiguous():
    ds = _dataset(("time", "lat", "y"), {"time": np.arange(24.0)})
    with pytest.raises(InputError, match=r"sample_dims=\"auto\" found 2 latitude-like \(Y\) dimensions among the "
                                         r"dimensions \['time', 'lat', 'y'\] of the target 'tas': 'lat' \(its name\) "
                                         r"and 'y' \(its name\); select one, or pass sample_dims="):
        to_design_matrix(ds, ["a"], "tas", area_weights=False)


def test_explicit_time_dim_with_auto_sample_dims():
    ds = _dataset(("init", "lat", "lon"), {"init": np.arange(24.0), "lat": [-30.0, -10.0, 10.0, 30.0]})
    dm = to_design_matrix(ds, ["a"], "tas", time_dim="init")
    assert dm.spec.sample_dims == ("init", "lat", "lon")
    with pytest.raises(InputError, match=r"time_dim 'when' is not one of the dimensions \['init', 'lat', 'lon'\] "
                                         r"of the target 'tas'; pass the target's time dimension"):
        to_design_matrix(ds, ["a"], "tas", time_dim="when")


def test_invalid_sample_dims_string_is_a_parameter_error():
    ds = _era5()
    with pytest.raises(ParameterError, match=r"The 'sample_dims' parameter of ClimateRegressor must be one of "
                                             r"'auto' or an instance of tuple or an instance of list; got 'time'"):
        ClimateRegressor("a", "tas", sample_dims="time").fit(ds)
    with pytest.raises(ParameterError, match=r"sample_dims must be 'auto' or a tuple of dimension names such as "
                                             r"\('time', 'lat', 'lon'\); got 'Auto'"):
        to_design_matrix(ds, ["a"], "tas", sample_dims="Auto")


def test_the_choice_is_logged_and_kept(caplog):
    ds = _era5()
    del ds["longitude"].attrs["standard_name"]
    with caplog.at_level(logging.INFO, logger="dask_dgd.climate"):
        est = ClimateRegressor("a", "tas", model="pointwise").fit(ds)
    lines = [r.getMessage() for r in caplog.records if r.name == "dask_dgd.climate"]
    assert lines == ["sample_dims=\"auto\" chose ('valid_time', 'latitude', 'longitude') for 'tas': "
                     "valid_time (CF axis T), latitude (standard_name 'latitude'), longitude (units 'degrees_east')"]
    assert est.sample_dims_ == ("valid_time", "latitude", "longitude") and est.time_dim_ == "valid_time"
    assert est.spec_.sample_dims == est.sample_dims_
    # predict reuses the fit's dimensions: nothing is resolved (or logged) again
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="dask_dgd.climate"):
        est.predict(ds)
    assert not [r for r in caplog.records if r.name == "dask_dgd.climate"]
    # explicit dimensions are not logged; an "auto" time_dim is
    with caplog.at_level(logging.INFO, logger="dask_dgd.climate"):
        ClimateRegressor("a", "tas", model="pointwise", sample_dims=("latitude", "valid_time", "longitude"),
                         time_dim="valid_time").fit(ds)
        assert not [r for r in caplog.records if r.name == "dask_dgd.climate"]
        to_design_matrix(ds, ["a"], "tas", sample_dims=("latitude", "valid_time", "longitude"))
    assert [r.getMessage() for r in caplog.records if r.name == "dask_dgd.climate"] == [
        "time_dim=\"auto\" chose 'valid_time' among sample_dims ('latitude', 'valid_time', 'longitude'): "
        "valid_time (CF axis T)"]
    # explicit dimensions are kept time first, as the fit uses them
    est.set_params(sample_dims=("latitude", "longitude", "valid_time"), time_dim="valid_time")
    assert est.fit(ds).sample_dims_ == ("valid_time", "latitude", "longitude")


# ---------------------------------------------------------------- latitude bounds
def _with_bounds(ds, bounds):
    ds = ds.assign_coords(lat_bnds=(("latitude", "bnds"), np.asarray(bounds, dtype=float)))
    ds["latitude"].attrs["bounds"] = "lat_bnds"
    return ds


def test_latitude_bounds_give_the_mean_cosine_of_each_cell():
    ds = _era5(Y=4)  # centres 60, 20, -20, -60
    bounds = [[90.0, 55.0], [55.0, 19.0], [19.0, -21.0], [-21.0, -90.0]]  # very unequal cells
    dm = to_design_matrix(_with_bounds(ds, bounds), ["a"], "tas")
    w = dm.to_dataarray(dm.sample_weight).compute()
    lo, hi = np.deg2rad(np.array(bounds)).T
    expected = (np.sin(hi) - np.sin(lo)) / (hi - lo)
    np.testing.assert_allclose(w.isel(valid_time=0, longitude=0).values, expected, rtol=1e-12)
    assert not np.allclose(expected, np.cos(np.deg2rad(ds["latitude"].values)), rtol=0.05)
    # narrow cells keep the scale of cos(centre) (ridge's alpha applies to the weighted sum)
    narrow = [[c + 0.5, c - 0.5] for c in ds["latitude"].values]
    w = to_design_matrix(_with_bounds(ds, narrow), ["a"], "tas").sample_weight.compute()
    np.testing.assert_allclose(np.sort(np.unique(w)), np.sort(np.unique(np.cos(np.deg2rad(ds["latitude"].values)))),
                               rtol=1e-4)
    # bounds in (bnds, latitude) order and radians are read alike
    rad = ds.assign_coords(latitude=np.deg2rad(ds["latitude"].values))
    rad["latitude"].attrs.update(units="radians", bounds="lat_bnds")
    rad = rad.assign_coords(lat_bnds=(("bnds", "latitude"), np.deg2rad(np.array(bounds)).T))
    dm_rad = to_design_matrix(rad, ["a"], "tas")
    w_rad = dm_rad.to_dataarray(dm_rad.sample_weight).compute()
    np.testing.assert_allclose(w_rad.isel(valid_time=0, longitude=0).values, expected, rtol=1e-12)


def test_latitude_bounds_change_a_pooled_fit():
    ds = _era5(Y=4, heterogeneous=True)  # the slope differs by latitude: the weights matter
    bounds = [[90.0, 59.0], [59.0, 21.0], [21.0, -19.0], [-19.0, -90.0]]
    bounded = _with_bounds(ds, bounds)
    with_bounds = ClimateRegressor("a", "tas", **_POOLED).fit(bounded)
    centres = ClimateRegressor("a", "tas", **_POOLED).fit(ds)
    lo, hi = np.deg2rad(np.array(bounds)).T
    b0, b1 = _weighted_reference(ds, ((np.sin(hi) - np.sin(lo)) / (hi - lo))[:, None])
    c0, c1 = _weighted_reference(ds, np.cos(np.deg2rad(ds["latitude"].values))[:, None])
    assert abs(b1 - c1) > 0.05  # the two weightings disagree
    np.testing.assert_allclose(float(with_bounds.coef_.sel(feature="a")), b1, rtol=1e-5)
    np.testing.assert_allclose(with_bounds.intercept_, b0, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(float(centres.coef_.sel(feature="a")), c1, rtol=1e-5)
    # the skill is weighted alike
    assert with_bounds.evaluate(bounded)["n"] == 24 * 4 * 3


def test_bad_latitude_bounds_are_refused():
    ds = _era5(Y=4)
    beyond = _with_bounds(ds, [[95.0, 40.0], [40.0, 0.0], [0.0, -40.0], [-40.0, -90.0]])
    with pytest.raises(InputError, match=r"the latitude bounds variable 'lat_bnds' of 'latitude' ranges from -90 "
                                         r"to 95 degrees, outside \[-90, 90\]: area weights \(cos\(latitude\)\) "
                                         r"need latitudes in degrees; fix the coordinate or pass area_weights=False"):
        ClimateRegressor("a", "tas").fit(beyond)
    three = ds.assign_coords(lat_bnds=(("latitude", "nv"), np.zeros((4, 3))))
    three["latitude"].attrs["bounds"] = "lat_bnds"
    with pytest.raises(InputError, match=r"the latitude bounds variable 'lat_bnds' of 'latitude' has 3 vertices per cell "
                                         r"along 'nv'; CF bounds of a 1-D coordinate have 2"):
        to_design_matrix(three, ["a"], "tas")
    nan = _with_bounds(ds, [[90.0, 40.0], [40.0, np.nan], [0.0, -40.0], [-40.0, -90.0]])
    with pytest.raises(InputError, match=r"the latitude bounds variable 'lat_bnds' of 'latitude' is not all finite"):
        to_design_matrix(nan, ["a"], "tas")
    # bounds named but not in the Dataset (e.g. dropped by a selection): cos(centre)
    gone = _era5(Y=4)
    gone["latitude"].attrs["bounds"] = "lat_bnds"
    w = to_design_matrix(gone, ["a"], "tas").sample_weight.compute()
    np.testing.assert_allclose(np.unique(w), np.unique(np.cos(np.deg2rad(ds["latitude"].values))))


# -------------------------------------------------------------- curvilinear grids
def _estimated(ds, lat="nav_lat", lon="nav_lon"):
    """The weights of a curvilinear grid without cell areas or vertex bounds: its cells'
    areas estimated from the centres (their accuracy: tests/climate/test_climate_cell_areas.py)."""
    area = centre_areas(np.deg2rad(ds[lat].values), np.deg2rad(ds[lon].values))
    return area / area.max()


def _curvilinear(T=24, ny=4, nx=3):
    time = xr.date_range("2000-01-01", periods=T, freq="MS")
    ds = _dataset(("time_counter", "y", "x"), {"time_counter": ("time_counter", time, {"axis": "T"})},
                  T, ny, nx, heterogeneous=True)
    nav_lat = np.linspace(-85.0, 10.0, ny * nx).reshape(ny, nx)  # the steep slopes get the large weights
    nav_lon = np.tile(np.arange(nx) * 30.0, (ny, 1))
    return ds.assign_coords(nav_lat=(("y", "x"), nav_lat, {"standard_name": "latitude", "units": "degrees_north"}),
                            nav_lon=(("y", "x"), nav_lon, {"standard_name": "longitude", "units": "degrees_east"}))


def test_curvilinear_grid_pointwise_fit_weights_each_cell_by_its_2d_latitude():
    ds = _curvilinear()
    alpha = 5.0  # a ridge penalty on the weighted sum: the fit depends on each cell's weight
    est = ClimateRegressor("a", "tas", model="pointwise", alpha=alpha).fit(ds)
    assert est.sample_dims_ == ("time_counter", "y", "x")
    assert est.coef_.dims == ("y", "x", "feature") and "nav_lat" in est.coef_.coords
    w = _estimated(ds)  # its cells' areas estimated from the centres (no cell areas or vertex bounds)
    a, tas = ds["a"].values, ds["tas"].values
    for j in range(4):
        for i in range(3):
            ref = Ridge(alpha=alpha).fit(a[:, j, i, None], tas[:, j, i], sample_weight=np.full(24, w[j, i]))
            np.testing.assert_allclose(float(est.coef_.isel(y=j, x=i, feature=0)), ref.coef_[0], rtol=1e-8)
            np.testing.assert_allclose(float(est.intercept_.isel(y=j, x=i)), ref.intercept_, rtol=1e-8, atol=1e-10)
    flat = ClimateRegressor("a", "tas", model="pointwise", alpha=alpha, area_weights=False).fit(ds)
    assert not np.allclose(flat.coef_.values, est.coef_.values, rtol=1e-3)
    pred = est.predict(ds)
    assert pred.dims == ("time_counter", "y", "x") and "nav_lon" in pred.coords


def test_curvilinear_grid_pooled_fit_matches_weighted_least_squares():
    ds = _curvilinear()
    est = ClimateRegressor("a", "tas", **_POOLED).fit(ds)
    b0, b1 = _weighted_reference(ds, _estimated(ds))
    np.testing.assert_allclose(float(est.coef_.sel(feature="a")), b1, rtol=1e-5)
    np.testing.assert_allclose(est.intercept_, b0, rtol=1e-4, atol=1e-6)
    unweighted = ClimateRegressor("a", "tas", area_weights=False, **_POOLED).fit(ds)
    assert abs(float(unweighted.coef_.sel(feature="a")) - b1) > 0.05
