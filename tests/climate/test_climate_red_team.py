"""Red-team cases (issue 22, items 4 and 5): a time axis out of order and latitudes that
are not latitudes must be refused, not fitted into silently wrong coefficients."""

import numpy as np
import pytest
import xarray as xr

from dask_dgd import InputError
from dask_dgd.climate import ClimateRegressor, to_design_matrix


def _grid(T=24, Y=4, X=3, calendar="datetime64", lat=None, seed=0, chunks=None):
    """``tas = 1 + 2 a + 0.5 a(t-1)`` plus a little noise on a small monthly grid."""
    rng = np.random.default_rng(seed)
    if calendar == "datetime64":
        time = xr.date_range("2000-01-01", periods=T, freq="MS")
    else:
        time = xr.date_range("2000-01-01", periods=T, freq="MS", calendar=calendar, use_cftime=True)
    a = rng.normal(size=(T, Y, X))
    lag1 = np.concatenate([np.zeros((1, Y, X)), a[:-1]])
    tas = 1.0 + 2.0 * a + 0.5 * lag1 + 0.01 * rng.normal(size=(T, Y, X))
    lat = np.linspace(-60.0, 60.0, Y) if lat is None else lat
    ds = xr.Dataset(
        {"a": (("time", "lat", "lon"), a), "tas": (("time", "lat", "lon"), tas)},
        coords={"time": time, "lat": ("lat", lat, {"units": "degrees_north"}), "lon": np.arange(X) * 10.0},
    )
    return ds.chunk(chunks or {"time": 8})


def _shuffled(ds, seed=1):
    return ds.isel(time=np.random.default_rng(seed).permutation(ds.sizes["time"]))


_POOLED = {"model": "pooled", "solver": "lbfgs", "max_iter": 200, "tol": 1e-10}


def _training(model):
    """The pooled model's training settings (pointwise models refuse them)."""
    return {k: v for k, v in _POOLED.items() if k != "model"} if model == "pooled" else {}
_CALENDARS = ["datetime64", "360_day", "noleap"]


# ------------------------------------------------------------------ item 4: time order
@pytest.mark.parametrize("calendar", _CALENDARS)
@pytest.mark.parametrize("model", ["pooled", "pointwise"])
def test_shuffled_time_with_lags_is_refused(model, calendar, client):
    ds = _shuffled(_grid(calendar=calendar))
    est = ClimateRegressor(["a"], "tas", model=model, lags=[0, 1], client=client, **_training(model))
    with pytest.raises(InputError, match=r"the time coordinate 'time' is not in increasing order: .* comes after "
                                         r".*sort the Dataset with ds\.sortby\('time'\)"):
        est.fit(ds)
    with pytest.raises(InputError, match=r"'time' is not in increasing order.*ds\.sortby\('time'\)"):
        ClimateRegressor(["a"], "tas", model=model, lead=1, client=client, **_training(model)).fit(ds)
    with pytest.raises(InputError, match=r"'time' is not in increasing order.*ds\.sortby\('time'\)"):
        to_design_matrix(ds, ["a"], "tas", lags=[1])


@pytest.mark.parametrize("calendar", _CALENDARS)
def test_reversed_time_with_lags_is_refused(calendar):
    ds = _grid(calendar=calendar).isel(time=slice(None, None, -1))
    with pytest.raises(InputError, match=r"'time' is not in increasing order.*ds\.sortby\('time'\)"):
        to_design_matrix(ds, ["a"], "tas", lags=[1])


def test_shuffled_time_is_refused_at_predict_and_evaluate(client):
    ds = _grid()
    model = ClimateRegressor(["a"], "tas", model="pointwise", lags=[0, 1], client=client).fit(ds)
    np.testing.assert_allclose(model.coef_.values, np.broadcast_to([2.0, 0.5], (4, 3, 2)), atol=0.05)
    with pytest.raises(InputError, match=r"'time' is not in increasing order.*ds\.sortby\('time'\)"):
        model.predict(_shuffled(ds))
    with pytest.raises(InputError, match=r"'time' is not in increasing order.*ds\.sortby\('time'\)"):
        model.evaluate(_shuffled(ds))


@pytest.mark.parametrize("calendar", ["datetime64", "360_day"])
@pytest.mark.parametrize("model", ["pooled", "pointwise"])
def test_duplicate_times_with_lags_are_refused(model, calendar, client):
    ds = _grid(calendar=calendar)
    doubled = ds.isel(time=[0, 1, 2, 3, 3, 4, 5] + list(range(6, 24)))
    with pytest.raises(InputError, match=r"the time coordinate 'time' has duplicate values \(1 repeated, the first "
                                         r"2000-04-01.*\): .*ds\.drop_duplicates\('time'\)"):
        ClimateRegressor(["a"], "tas", model=model, lags=[0, 1], client=client, **_training(model)).fit(doubled)


def test_missing_times_with_lags_are_refused():
    ds = _grid()
    times = ds["time"].values.copy()
    times[5] = np.datetime64("NaT")
    with pytest.raises(InputError, match=r"the time coordinate 'time' has 1 missing value\(s\) \(NaT\).*"
                                         r"ds\.dropna\('time'"):
        to_design_matrix(ds.assign_coords(time=times), ["a"], "tas", lags=[1])


@pytest.mark.parametrize("model", ["pooled", "pointwise"])
def test_order_does_not_matter_without_lags(model, client):
    ds = _grid(calendar="noleap")
    kwargs = {"model": model, "seasonal": 1, "client": client, **_training(model)}
    ref = ClimateRegressor(["a"], "tas", **kwargs).fit(ds)
    for other in (_shuffled(ds), ds.isel(time=slice(None, None, -1))):
        got = ClimateRegressor(["a"], "tas", **kwargs).fit(other)
        np.testing.assert_allclose(got.coef_.values, ref.coef_.values, atol=1e-6)
        pred = got.predict(other).compute()
        xr.testing.assert_allclose(pred.sortby("time"), ref.predict(ds).compute(), atol=1e-6)


def test_sorted_data_with_a_gap_still_fits_with_lags(client):
    ds = _grid(T=36).drop_isel(time=[10])
    model = ClimateRegressor(["a"], "tas", model="pointwise", lags=[0, 1], client=client).fit(ds)
    np.testing.assert_allclose(model.coef_.values, np.broadcast_to([2.0, 0.5], (4, 3, 2)), atol=0.05)
    assert int(model.n_samples_.min()) == 36 - 1 - 2  # the first step and the one after the gap


# ---------------------------------------------------------------- item 5: latitudes
@pytest.mark.parametrize("model", ["pooled", "pointwise"])
def test_area_weights_refuse_a_latitude_dim_without_coordinate(model, client):
    ds = _grid(Y=120, X=2, T=12).drop_vars("lat")
    est = ClimateRegressor(["a"], "tas", model=model, client=client, **_training(model))
    msg = (r"area weights need the latitude of every cell in degrees, but the dimension 'lat' has no coordinate "
           r"values \(its index 0\.\.119 is not a latitude\): give it one \(ds\.assign_coords\(lat=\.\.\.\)\) "
           r"or pass area_weights=False")
    with pytest.raises(InputError, match=msg):
        est.fit(ds)
    with pytest.raises(InputError, match=msg):
        ClimateRegressor(["a"], "tas", model=model, lat="lat", client=client, **_training(model)).fit(ds)
    with pytest.raises(InputError, match=msg):
        to_design_matrix(ds, ["a"], "tas")
    # without area weights the same data fits every row
    flat = ClimateRegressor(["a"], "tas", model=model, area_weights=False, client=client, **_training(model)).fit(ds)
    assert np.isfinite(flat.coef_.values).all()


@pytest.mark.parametrize("model", ["pooled", "pointwise"])
def test_area_weights_refuse_latitudes_beyond_90_degrees(model, client):
    ds = _grid(Y=120, X=2, T=12, lat=np.arange(120.0))
    msg = (r"the latitude coordinate 'lat' ranges from 0 to 119 degrees, outside \[-90, 90\]: area weights "
           r"\(cos\(latitude\)\) need latitudes in degrees; fix the coordinate or pass area_weights=False")
    with pytest.raises(InputError, match=msg):
        ClimateRegressor(["a"], "tas", model=model, client=client, **_training(model)).fit(ds)
    south = _grid(Y=3, X=2, T=12, lat=np.array([-95.0, 0.0, 10.0]))
    with pytest.raises(InputError, match=r"'lat' ranges from -95 to 10 degrees, outside \[-90, 90\]"):
        ClimateRegressor(["a"], "tas", model=model, client=client, **_training(model)).fit(south)
    flat = ClimateRegressor(["a"], "tas", model=model, area_weights=False, client=client, **_training(model)).fit(ds)
    assert np.isfinite(flat.coef_.values).all()


def test_latitudes_in_radians_and_auxiliary_coordinates_are_checked_too():
    rad = _grid(lat=np.array([-1.0, 0.0, 0.5, 2.0]))
    rad["lat"].attrs["units"] = "radians"
    with pytest.raises(InputError, match=r"'lat' ranges from -1 to 2 radians, outside \[-pi/2, pi/2\]"):
        to_design_matrix(rad, ["a"], "tas")
    # the poles in float32 radians are within the range
    poles = _grid(lat=np.array([-np.pi / 2, 0.0, 0.5, np.pi / 2], dtype=np.float32))
    poles["lat"].attrs["units"] = "radians"
    w = to_design_matrix(poles, ["a"], "tas").sample_weight.compute()
    assert w.min() >= 0 and w.max() == pytest.approx(1.0)
    # a curvilinear grid: 2-D latitudes found by their CF attributes
    ds = _grid().drop_vars(["lat", "lon"]).rename_dims({"lat": "y", "lon": "x"})
    nav = np.array([[-10.0, 0.0, 10.0]] * 2 + [[80.0, 91.0, 100.0]] * 2)
    ds = ds.assign_coords(nav_lat=(("y", "x"), nav, {"standard_name": "latitude"}))
    with pytest.raises(InputError, match=r"'nav_lat' ranges from -10 to 100 degrees, outside \[-90, 90\]"):
        to_design_matrix(ds, ["a"], "tas", sample_dims=("time", "y", "x"))


def test_predict_does_not_need_latitudes(client):
    # the weights enter the fit and the score, not the predictions
    ds = _grid()
    model = ClimateRegressor(["a"], "tas", client=client, **_POOLED).fit(ds)
    no_lat = ds.drop_vars("lat")
    pred = model.predict(no_lat).compute()
    np.testing.assert_allclose(pred.values, model.predict(ds).compute().values)
    with pytest.raises(InputError, match=r"the dimension 'lat' has no coordinate values"):
        model.evaluate(no_lat)
