"""The time coordinate as a trend feature, and the seasonal terms' year fraction.

References: xarray's ``polyfit(dim="time", deg=1)``, whose x is the time in
nanoseconds since 1970-01-01 of the data's calendar (``xarray.computation.
computation._ensure_numeric``: ``datetime_to_numeric(..., offset=1970-01-01,
datetime_unit="ns")``), so its slope per nanosecond times the unit's length in
nanoseconds is the slope per unit; statsmodels' WLS and GLM on a time column built
here from ``(t - t0) / np.timedelta64(1, "D")``; xarray's ``.dt`` fields for the
seasonal terms.
"""

import os
import pickle
import warnings

import numpy as np
import pytest
import statsmodels.api as sm
import xarray as xr

import dask_dgd
from dask_dgd import InputError, ParameterError
from dask_dgd.climate import ClimateRegressor, to_design_matrix

DIMS = ("time", "lat", "lon")
A1B_DIMS = ("time", "latitude", "longitude")
#: Days in a unit, by calendar: the documented table (the tests' own copy).
YEAR = {"360_day": 360.0, "noleap": 365.0, "julian": 365.25, "datetime64": 365.2425, "standard": 365.2425}
NS_PER_DAY = 86400e9


def _unit_days(unit, calendar):
    return {"days": 1.0, "hours": 1 / 24, "years": YEAR[calendar], "decades": 10 * YEAR[calendar]}[unit]


def _a1b():
    """iris-sample-data's A1B scenario: annual air_temperature (240 steps) on a
    37 x 49 grid, cftime 360-day calendar."""
    iris_sample_data = pytest.importorskip("iris_sample_data")
    path = os.path.join(os.path.dirname(iris_sample_data.__file__), "sample_data", "A1B_north_america.nc")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = xr.open_dataset(path).load()
    assert ds["time"].dt.calendar == "360_day"
    return ds[["air_temperature"]]


def _grid(time, Y=3, X=4, seed=0, trend=0.02):
    """A target with a trend of ``trend`` K per day-count year (365.2425 days), a
    feature ``x`` and noise, on ``time`` (datetime64 or cftime)."""
    rng = np.random.default_rng(seed)
    T = len(time)
    days = _days(time)
    x = rng.normal(size=(T, Y, X))
    slope = trend * (1.0 + rng.normal(0, 0.5, size=(Y, X)))
    y = 280 + slope * days[:, None, None] / 365.2425 + 0.5 * x + rng.normal(size=(T, Y, X))
    return xr.Dataset(
        {"x": (DIMS, x), "tas": (DIMS, y, {"units": "K"})},
        coords={"time": time, "lat": ("lat", np.linspace(-60, 60, Y), {"units": "degrees_north"}),
                "lon": np.arange(X) * 30.0},
    )


def _days(time):
    """Days since the first time, computed here from xarray's own subtraction."""
    t = xr.DataArray(np.asarray(time), dims="time")
    return np.asarray((t - t[0]) / np.timedelta64(1, "D"), dtype=np.float64)


def _polyfit_slope(ds, target, unit, calendar):
    coef = ds[target].polyfit(dim="time", deg=1)["polyfit_coefficients"]
    return coef, coef.sel(degree=1) * _unit_days(unit, calendar) * NS_PER_DAY


# ----------------------------------------------------------------- pointwise trend
@pytest.mark.parametrize("unit", ["years", "decades", "days"])
def test_pointwise_trend_on_a_360_day_file_is_polyfit_in_the_unit(unit):
    ds = _a1b()
    model = ClimateRegressor(["time"], "air_temperature", model="pointwise", time_unit=unit).fit(ds)
    assert model.feature_names_ == ["time"]
    assert model.time_origin_ == ds["time"].values[0]
    assert model.time_origin_.calendar == "360_day"
    coef, slope = _polyfit_slope(ds, "air_temperature", unit, "360_day")
    ours = model.coef_.sel(feature="time")
    np.testing.assert_allclose(ours.values, slope.transpose(*ours.dims).values, rtol=1e-10, atol=0)
    # the intercept is the trend's value at the origin (the first time)
    at_origin = xr.polyval(ds["time"].isel(time=[0]), coef).isel(time=0)
    np.testing.assert_allclose(model.intercept_.values, at_origin.transpose(*model.intercept_.dims).values,
                               rtol=1e-10, atol=0)
    fitted = xr.polyval(ds["time"], coef).transpose(*A1B_DIMS)
    np.testing.assert_allclose(model.predict(ds).transpose(*A1B_DIMS).values, fitted.values, rtol=1e-10, atol=0)


@pytest.mark.parametrize("freq, periods", [("D", 10958), ("MS", 360)])  # 30 years of days, of months
def test_pointwise_trend_on_datetime64_is_polyfit_in_the_unit(freq, periods):
    time = xr.date_range("1991-01-01", periods=periods, freq=freq)
    assert np.issubdtype(time.dtype, np.datetime64)
    ds = _grid(time)
    for unit in ("years", "hours"):
        model = ClimateRegressor(["time"], "tas", model="pointwise", time_unit=unit).fit(ds)
        assert model.time_origin_ == np.datetime64("1991-01-01")
        _, slope = _polyfit_slope(ds, "tas", unit, "datetime64")
        ours = model.coef_.sel(feature="time")
        np.testing.assert_allclose(ours.values, slope.transpose(*ours.dims).values, rtol=1e-10, atol=0)


def test_pointwise_glm_trend_matches_statsmodels_per_cell():
    time = xr.date_range("1991-01-01", periods=240, freq="MS", calendar="noleap", use_cftime=True)
    rng = np.random.default_rng(3)
    years = _days(time) / 365.0
    eta = 0.2 + 0.05 * years[:, None, None] + 0.1 * rng.normal(size=(240, 2, 3))
    counts = rng.poisson(np.exp(eta)).astype(float)
    exceed = (rng.random((240, 2, 3)) < 1 / (1 + np.exp(-(eta - 1.0)))).astype(float)
    ds = xr.Dataset({"n": (DIMS, counts), "e": (DIMS, exceed)},
                    coords={"time": time, "lat": [-20.0, 20.0], "lon": [0.0, 10.0, 20.0]})
    design = sm.add_constant(years[:, None])
    for target, name, family in (("n", "poisson", sm.families.Poisson()), ("e", "binomial", sm.families.Binomial())):
        model = ClimateRegressor(["time"], target, model="pointwise", family=name, tol=1e-8).fit(ds)
        for i in range(2):
            for j in range(3):
                ref = sm.GLM(ds[target].values[:, i, j], design, family=family).fit(tol=1e-13).params
                assert float(model.intercept_[i, j]) == pytest.approx(ref[0], rel=1e-7, abs=1e-9)
                assert float(model.coef_[i, j, 0]) == pytest.approx(ref[1], rel=1e-7, abs=1e-9)


# ------------------------------------------------------------------ pooled trend
@pytest.mark.parametrize("calendar", ["noleap", "datetime64"])
def test_pooled_trend_matches_weighted_least_squares_with_area_weights(calendar, client):
    if calendar == "datetime64":
        time = xr.date_range("1981-01-01", periods=240, freq="MS")
    else:
        time = xr.date_range("1981-01-01", periods=240, freq="MS", calendar=calendar, use_cftime=True)
    ds = _grid(time, seed=1)
    model = ClimateRegressor(["time", "x"], "tas", model="pooled", time_unit="decades", solver="lbfgs", tol=1e-12, max_iter=1000,
                             client=client).fit(ds)
    assert model.feature_names_ == ["time", "x"]
    decades = _days(time) / (10 * YEAR[calendar])
    T, Y, X = ds["tas"].shape
    A = np.column_stack([np.repeat(decades, Y * X), ds["x"].values.ravel()])
    w = np.broadcast_to(np.cos(np.deg2rad(ds["lat"].values))[None, :, None], (T, Y, X)).ravel()
    ref = sm.WLS(ds["tas"].values.ravel(), sm.add_constant(A), weights=w).fit().params
    np.testing.assert_allclose(model.coef_.values, ref[1:], rtol=1e-9)
    assert model.intercept_ == pytest.approx(ref[0], rel=1e-10)


# --------------------------------------------------- the rule at predict, combined
def test_a_future_scenario_on_the_same_calendar_gets_the_extrapolated_trend():
    ds = _a1b()
    past, future = ds.isel(time=slice(0, 120)), ds.isel(time=slice(120, None))
    model = ClimateRegressor(["time"], "air_temperature", model="pointwise").fit(past)
    coef = past["air_temperature"].polyfit(dim="time", deg=1)["polyfit_coefficients"]
    expected = xr.polyval(future["time"], coef).transpose(*A1B_DIMS)
    np.testing.assert_allclose(model.predict(future).transpose(*A1B_DIMS).values, expected.values, rtol=1e-10)
    # the column is the years since the fit's origin, 1860-06-01, not the future's first time
    dm = to_design_matrix(past, ["time"], "air_temperature", area_weights=False)
    assert dm.time_origin == past["time"].values[0]


def test_trend_with_seasonal_terms_other_features_their_lags_and_a_lead():
    time = xr.date_range("2001-01-01", periods=36, freq="MS", calendar="360_day", use_cftime=True)
    ds = _grid(time).chunk({"time": 10, "lat": 2})
    dm = to_design_matrix(ds, ["x", "time"], "tas", lags={"x": [0, 1]}, lead=1, seasonal=1, time_unit="months",
                          area_weights=False)
    assert dm.feature_names == ["x", "x_lag1", "time", "sin1", "cos1"]  # lead 1: x at t-1 and t-2
    grid = dm.to_dataarray(dm.X[:, 2]).compute()
    months = np.arange(36.0)  # 30-day months of a 360-day year: exactly 1 per step, from 0
    ok = np.isfinite(grid.values)
    assert ok[2:].all() and not ok[:2].any()  # rows without x_lag2 are dropped
    np.testing.assert_allclose(grid.values[2:], np.broadcast_to(months[2:, None, None], (34, 3, 4)), atol=1e-12)
    model = ClimateRegressor(["x", "time"], "tas", model="pointwise", lags={"x": [0, 1]}, lead=1, seasonal=1).fit(ds)
    assert model.feature_names_ == ["x", "x_lag1", "time", "sin1", "cos1"]
    assert model.predict(ds).shape == (36, 3, 4)


def test_another_calendar_or_no_dates_at_predict_is_refused():
    time = xr.date_range("1991-01-01", periods=120, freq="MS", calendar="360_day", use_cftime=True)
    ds = _grid(time)
    model = ClimateRegressor(["time"], "tas", model="pointwise").fit(ds)
    other = ds.convert_calendar("noleap", align_on="year")
    with pytest.raises(InputError, match=r"calendar 'noleap' but the model's trend on time was fitted on the calendar "
                                         r"'360_day' .*ds\.convert_calendar\('360_day', align_on='year'\)"):
        model.predict(other)
    with pytest.raises(InputError, match=r"has dtype float64, not dates: decode the times \(xr\.decode_cf\)"):
        model.predict(ds.assign_coords(time=np.arange(120.0)))
    # datetime64 is proleptic Gregorian: a cftime "standard" Dataset (e.g. past 2262) is the same calendar
    gregorian = _grid(xr.date_range("1991-01-01", periods=120, freq="MS"))
    fitted = ClimateRegressor(["time"], "tas", model="pointwise").fit(gregorian)
    as_cftime = gregorian.convert_calendar("standard", use_cftime=True)
    assert as_cftime["time"].dtype == object
    np.testing.assert_allclose(fitted.predict(as_cftime).values, fitted.predict(gregorian).values, rtol=1e-13)
    with pytest.raises(InputError, match=r"calendar 'julian' .* ds\.convert_calendar\('proleptic_gregorian'\)"):
        fitted.predict(gregorian.convert_calendar("julian"))


def test_lags_of_the_time_and_bad_units_are_refused():
    time = xr.date_range("1991-01-01", periods=24, freq="MS", calendar="noleap", use_cftime=True)
    ds = _grid(time)
    with pytest.raises(ParameterError, match=r"lags \[0, 1\] of the time coordinate 'time': a lag of the time is the "
                                             r"time minus a constant, collinear .* lags=\{'x': \[0, 1\]\}"):
        ClimateRegressor(["x", "time"], "tas", lags=1).fit(ds)
    with pytest.raises(ParameterError, match=r"lags \[2\] of the time coordinate 'time'.*leave lags=None"):
        to_design_matrix(ds, ["time"], "tas", lags={"time": [2]})
    with pytest.raises(ParameterError, match=r"'time_unit' parameter of ClimateRegressor must be one of .*'years'"):
        ClimateRegressor(["time"], "tas", time_unit="year").fit(ds)
    with pytest.raises(ParameterError, match=r"time_unit must be one of \[.*'decades'.*\]; got 'week'"):
        to_design_matrix(ds, ["time"], "tas", time_unit="week")


def test_dates_that_are_not_the_time_coordinate_name_the_fix():
    time = xr.date_range("1991-01-01", periods=24, freq="MS")
    ds = _grid(time)
    stamps = np.broadcast_to(time.values[:, None, None], ds["x"].shape)
    cases = [
        (ds.assign_coords(valid=("time", time.values)), "valid", r"\(dates along 'time'\): only the time dimension's "
                                                        r"coordinate .* \(ds\.swap_dims\(\{'time': 'valid'\}\) and "
                                                        r"time_dim='valid'\), or name 'time' in features"),
        (ds.assign(peak=(DIMS, stamps)), "peak", r"\(dates\): .* turn 'peak' into numbers first, e\.g\. "
                                                 r"\(ds\['peak'\] - ds\['peak'\]\.min\(\)\) / np\.timedelta64"),
        (ds.assign(spell=(DIMS, stamps - stamps.min())), "spell", r"\(durations\): turn 'spell' into numbers first"),
    ]
    for data, name, fix in cases:
        with pytest.raises(InputError, match=rf"variable '{name}' must be numeric; got dtype \w+\[ns\] {fix}"):
            ClimateRegressor([name], "tas", model="pointwise").fit(data)
    labels = ds.assign(label=(DIMS, np.full(ds["x"].shape, "a")))
    with pytest.raises(InputError, match=r"variable 'label' must be numeric; got dtype <U1$"):
        ClimateRegressor(["label"], "tas").fit(labels)


def test_a_time_coordinate_of_numbers_is_used_as_it_is():
    ds = _grid(xr.date_range("1991-01-01", periods=24, freq="MS")).assign_coords(time=1991 + np.arange(24) / 12)
    dm = to_design_matrix(ds, ["time"], "tas", area_weights=False)
    assert dm.time_origin is None
    grid = dm.to_dataarray(dm.X[:, 0]).compute()
    np.testing.assert_array_equal(grid.values[:, 0, 0], ds["time"].values)
    model = ClimateRegressor(["time"], "tas", model="pointwise").fit(ds)
    assert model.time_origin_ is None
    with pytest.raises(InputError, match=r"fitted with 'time' as numbers but this Dataset's 'time' holds dates"):
        model.predict(_grid(xr.date_range("1991-01-01", periods=24, freq="MS")))


def test_time_origin_needs_a_fit_and_is_none_without_a_trend():
    ds = _grid(xr.date_range("1991-01-01", periods=24, freq="MS"))
    with pytest.raises(AttributeError, match="has no attribute 'time_origin_'"):
        _ = ClimateRegressor(["time"], "tas").time_origin_
    assert ClimateRegressor(["x"], "tas", model="pointwise").fit(ds).time_origin_ is None


def test_save_load_and_pickle_keep_the_rule(tmp_path):
    ds = _a1b()
    past, future = ds.isel(time=slice(0, 200)), ds.isel(time=slice(200, None))
    model = ClimateRegressor(["time"], "air_temperature", model="pointwise", time_unit="decades").fit(past)
    model.save(tmp_path / "trend.npz")
    for copy in (dask_dgd.load(tmp_path / "trend.npz"), pickle.loads(pickle.dumps(model))):
        assert copy.spec_.time_rule == model.spec_.time_rule
        assert copy.time_origin_ == model.time_origin_
        np.testing.assert_array_equal(copy.predict(future).values, model.predict(future).values)
        with pytest.raises(InputError, match="convert_calendar"):
            copy.predict(future.convert_calendar("noleap", align_on="year"))


def test_trend_on_array_api_strict_blocks_equals_numpy(client):
    """The time column is made on the driver in NumPy, like the seasonal terms: each
    task moves it onto its block's device (array_api_strict stands in for a GPU)."""
    pytest.importorskip("array_api_strict")
    from namespace_checks import climate_grid

    from dask_dgd.testing import on_array_api_strict

    ds = climate_grid(T=36).chunk({"time": 12, "lat": 2, "lon": 5})
    strict = ds.copy(data={name: on_array_api_strict(v.data) for name, v in ds.data_vars.items()})
    params = dict(model="pointwise", seasonal=1, lags={"a": [0, 1]}, time_unit="decades", client=client)
    ref = ClimateRegressor(["a", "time"], "tas", **params).fit(ds)
    model = ClimateRegressor(["a", "time"], "tas", **params).fit(strict)
    np.testing.assert_allclose(model.coef_.values, ref.coef_.values, rtol=1e-12, atol=1e-10)
    assert np.isfinite(ref.coef_.sel(feature="time").values[1:]).all()
    assert model.evaluate(strict) == pytest.approx(ref.evaluate(ds), rel=1e-12)


# ------------------------------------------------------------------ seasonal terms
@pytest.mark.parametrize("calendar", ["360_day", "datetime64"])
@pytest.mark.parametrize("freq", ["h", "90min"])
def test_seasonal_terms_are_the_documented_year_fraction(calendar, freq):
    if calendar == "datetime64":
        time = xr.date_range("2003-12-30", periods=2000, freq=freq)
    else:
        time = xr.date_range("2003-12-29", periods=2000, freq=freq, calendar=calendar, use_cftime=True)
    T = len(time)
    ds = xr.Dataset({"tas": (("time", "lat", "lon"), np.ones((T, 1, 1)))},
                    coords={"time": time, "lat": [0.0], "lon": [0.0]})
    X = to_design_matrix(ds, [], "tas", seasonal=2, area_weights=False).X.compute()
    dt = ds["time"].dt
    assert dt.hour.values.any() and (freq == "h" or dt.minute.values.any())
    frac = ((dt.dayofyear - 1 + dt.hour / 24 + dt.minute / 1440) / dt.days_in_year).values
    assert set(dt.days_in_year.values) == ({360} if calendar == "360_day" else {365, 366})  # 2003 and 2004
    expected = np.column_stack([f(2 * np.pi * k * frac) for k in (1, 2) for f in (np.sin, np.cos)])
    np.testing.assert_allclose(X, expected, rtol=0, atol=1e-12)


def test_a_time_coordinate_not_decoded_is_refused_as_a_trend():
    """Times left as numbers in '<unit> since <date>' (decode_times=False) would be a trend
    per day whatever time_unit says: refused, naming xr.decode_cf."""
    t = xr.date_range("2000-01-01", periods=24, freq="MS", use_cftime=False)
    rng = np.random.default_rng(0)
    ds = xr.Dataset({"y": (("time", "lat", "lon"), rng.normal(size=(24, 2, 2)))},
                    coords={"time": t, "lat": [0.0, 10.0], "lon": [0.0, 1.0]})
    raw = xr.decode_cf(ds)  # a round trip through the encoding: numbers with units
    raw = raw.assign_coords(time=("time", np.arange(24.0) * 30, {"units": "days since 2000-01-01"}))
    with pytest.raises(InputError, match=r"holds numbers in 'days since 2000-01-01' \(times not decoded\).*xr.decode_cf"):
        ClimateRegressor(["time"], "y", model="pointwise", time_unit="decades").fit(raw)
    ClimateRegressor(["time"], "y", model="pointwise", time_unit="decades").fit(xr.decode_cf(raw))
