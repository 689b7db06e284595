"""Climate models on xarray grids: design matrices, pointwise and pooled fits, files."""

import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
from sklearn.base import clone
from sklearn.linear_model import LinearRegression as SkLinear
from sklearn.linear_model import Ridge

from dask_dgd import ConvergenceWarning, InputError, ParameterError
from dask_dgd.climate import ClimateRegressor, from_design_matrix, to_design_matrix


def _grid(T=48, Y=5, X=6, calendar="360_day", seed=0, chunks=None):
    rng = np.random.default_rng(seed)
    if calendar == "datetime64":
        time = xr.date_range("2000-01-01", periods=T, freq="MS")
    else:
        time = xr.date_range("2000-01-01", periods=T, freq="MS", calendar=calendar, use_cftime=True)
    lat = np.linspace(-70, 70, Y)
    lon = np.arange(X) * 15.0
    a = rng.normal(size=(T, Y, X))
    index = rng.normal(size=T)
    slope = 1.0 + rng.normal(0, 0.5, size=(Y, X))
    y = 280 + slope * a + 0.5 * index[:, None, None] + 0.1 * rng.normal(size=(T, Y, X))
    y[:, 0, 0] = np.nan  # a land cell
    a[5, 2, 3] = np.nan  # a missing observation
    ds = xr.Dataset(
        {
            "a": (("time", "lat", "lon"), a),
            "index": (("time",), index),
            "tas": (("time", "lat", "lon"), y, {"units": "K", "long_name": "air temperature"}),
        },
        coords={"time": time, "lat": ("lat", lat, {"units": "degrees_north"}), "lon": lon},
    )
    return ds.chunk(chunks or {"time": 16, "lat": 3, "lon": 3})


def _columns(ds, lags_a=(0,), seasonal=0):
    """The design columns of every cell, built by hand with NumPy."""
    a = ds["a"].values
    T = a.shape[0]
    cols = []
    for s in lags_a:
        shifted = np.full_like(a, np.nan)
        shifted[s:] = a[: T - s] if s else a
        cols.append(shifted)
    cols.append(np.broadcast_to(ds["index"].values[:, None, None], a.shape))
    t = ds.indexes["time"]
    frac = (np.array([d.dayofyr for d in t]) - 1) / np.array([360 if t.calendar == "360_day" else 365] * T) \
        if hasattr(t, "calendar") else None
    for k in range(1, seasonal + 1):
        cols.append(np.broadcast_to(np.sin(2 * np.pi * k * frac)[:, None, None], a.shape))
        cols.append(np.broadcast_to(np.cos(2 * np.pi * k * frac)[:, None, None], a.shape))
    return np.stack(cols, axis=-1)  # (T, Y, X, p)


# ----------------------------------------------------------------- design matrix
@pytest.mark.parametrize("calendar", ["360_day", "noleap", "datetime64"])
def test_round_trip_restores_the_grid_exactly(calendar):
    ds = _grid(calendar=calendar)
    dm = to_design_matrix(ds, ["a", "index"], "tas", lags={"a": [0, 1]}, seasonal=1)
    assert dm.feature_names == ["a", "a_lag1", "index", "sin1", "cos1"]
    assert np.isnan(dm.X.shape[0])  # masked rows dropped lazily: sizes unknown until computed
    back = from_design_matrix(dm, dm.y, name="tas", attrs=ds["tas"].attrs).compute()
    expected = ds["tas"].where(ds["a"].shift(time=1).notnull() & ds["a"].notnull()).compute()
    xr.testing.assert_identical(back, expected)  # values, NaN where masked, coords, calendar, attrs
    assert back.indexes["time"].equals(ds.indexes["time"])
    # in-memory values (e.g. computed predictions) go back the same way
    values = dm.y.compute()
    again = dm.to_dataarray(values).compute()
    np.testing.assert_array_equal(again.values, back.values)
    # the mask is the set of rows
    assert int(dm.mask().sum()) == values.size == dm.X.compute().shape[0]


def test_design_rows_match_numpy_and_weights_are_cos_lat():
    ds = _grid()
    dm = to_design_matrix(ds, ["a", "index"], "tas")
    X, y, w = dask.compute(dm.X, dm.y, dm.sample_weight)
    cols = _columns(ds)
    ok = np.isfinite(ds["tas"].values) & np.all(np.isfinite(cols), axis=-1)
    assert X.shape == (ok.sum(), 2)
    # rows come block by block: compare as sets of (x, y, w) tuples
    weights = np.broadcast_to(np.cos(np.deg2rad(ds["lat"].values))[None, :, None], ok.shape)
    ref = np.column_stack([cols[ok], ds["tas"].values[ok], weights[ok]])
    got = np.column_stack([X, y, w])
    np.testing.assert_allclose(np.sort(got, axis=0), np.sort(ref, axis=0))
    dm_flat = to_design_matrix(ds, ["a"], "tas", area_weights=False)
    assert np.all(dm_flat.sample_weight.compute() == 1.0)


def test_lags_do_not_cross_gaps_and_lead_shifts_the_predictors():
    ds = _grid(T=24)
    gappy = ds.isel(time=[i for i in range(24) if i != 10])  # month 10 is missing
    dm = to_design_matrix(gappy, ["a"], "tas", lags=[1], area_weights=False)
    grid = dm.to_dataarray(dm.X[:, 0]).compute()
    # the month after the gap has no lag-1 value (it would be two months back)
    assert np.all(np.isnan(grid.isel(time=10).values))
    np.testing.assert_array_equal(grid.isel(time=11).values[1:, 1:], gappy["a"].isel(time=10).values[1:, 1:])
    lead = to_design_matrix(ds, ["a"], "tas", lead=3, area_weights=False)
    g = lead.to_dataarray(lead.X[:, 0]).compute()
    np.testing.assert_array_equal(g.isel(time=7).values[1:, 1:], ds["a"].isel(time=4).values[1:, 1:])
    assert np.all(np.isnan(g.isel(time=slice(0, 3)).values))


def test_seasonal_terms_follow_the_calendar():
    ds = _grid(T=24, calendar="noleap")
    dm = to_design_matrix(ds, [], "tas", seasonal=2, area_weights=False)
    sin1 = dm.to_dataarray(dm.X[:, 0]).compute().isel(lat=1, lon=1).values
    doy = np.array([d.dayofyr for d in ds.indexes["time"]])
    np.testing.assert_allclose(sin1, np.sin(2 * np.pi * (doy - 1) / 365))
    d360 = _grid(T=24, calendar="360_day")
    dm = to_design_matrix(d360, [], "tas", seasonal=1, area_weights=False)
    cos1 = dm.to_dataarray(dm.X[:, 1]).compute().isel(lat=1, lon=1).values
    np.testing.assert_allclose(cos1, np.cos(2 * np.pi * (np.arange(24) % 12) * 30 / 360), atol=1e-12)


_GUARD = {"allowed": False, "computed": 0}


def _guarded(block):
    """Raises unless the test allows computing (the threaded test cluster shares this module)."""
    if not _GUARD["allowed"]:
        raise AssertionError("the data was computed before fit")
    _GUARD["computed"] += 1
    return block


def test_nothing_is_computed_before_fit(client):
    state = _GUARD
    ds = _grid()
    ds["a"] = ds["a"].copy(data=ds["a"].data.map_blocks(_guarded, dtype=float))
    model = ClimateRegressor(["a", "index"], "tas", model="pointwise", lags={"a": [0, 1]}, seasonal=1, client=client)
    dm = to_design_matrix(ds, ["a", "index"], "tas", lags={"a": [0, 1]}, seasonal=1)
    _ = (dm.X, dm.mask(), dm.to_dataarray(dm.y))
    pooled = ClimateRegressor(["a", "index"], "tas", client=client)
    assert state["computed"] == 0
    state["allowed"] = True
    model.fit(ds)
    pooled.fit(ds)
    assert state["computed"] > 0
    state["allowed"] = False
    lazy = model.predict(ds)  # predict is lazy too
    assert isinstance(lazy.data, da.Array)


# ---------------------------------------------------------------------- pointwise
@pytest.mark.parametrize("alpha", [0.0, 2.0])
def test_pointwise_matches_per_cell_scikit_learn(alpha, client):
    ds = _grid()
    model = ClimateRegressor(["a", "index"], "tas", model="pointwise", lags={"a": [0, 1]}, alpha=alpha, client=client)
    model.fit(ds)
    cols = _columns(ds, lags_a=(0, 1))
    y = ds["tas"].values
    w_lat = np.cos(np.deg2rad(ds["lat"].values))
    for i in range(y.shape[1]):
        for j in range(y.shape[2]):
            ok = np.isfinite(y[:, i, j]) & np.all(np.isfinite(cols[:, i, j]), axis=1)
            if not ok.any():
                assert np.all(np.isnan(model.coef_.values[i, j])) and model.n_samples_.values[i, j] == 0
                continue
            ref = (Ridge(alpha=alpha) if alpha else SkLinear()).fit(
                cols[ok, i, j], y[ok, i, j], sample_weight=np.full(ok.sum(), w_lat[i]))
            np.testing.assert_allclose(model.coef_.values[i, j], ref.coef_, rtol=0, atol=1e-5)
            assert model.intercept_.values[i, j] == pytest.approx(ref.intercept_, abs=1e-5)
    assert model.coef_.dims == ("lat", "lon", "feature")
    assert list(model.coef_["feature"].values) == ["a", "a_lag1", "index"]
    np.testing.assert_array_equal(model.coef_["lat"].values, ds["lat"].values)
    pred = model.predict(ds).compute()
    assert pred.dims == ("time", "lat", "lon") and pred.attrs == ds["tas"].attrs and pred.name == "tas"
    assert np.all(np.isnan(pred.isel(lat=0, lon=0)))  # never observed: no model
    assert np.all(np.isnan(pred.isel(time=0)))  # no lag-1 value
    assert model.score(ds) > 0.9


def test_pointwise_does_not_depend_on_chunks(client):
    a = ClimateRegressor(["a", "index"], "tas", model="pointwise", client=client).fit(_grid())
    b = ClimateRegressor(["a", "index"], "tas", model="pointwise", client=client).fit(
        _grid(chunks={"time": 7, "lat": 2, "lon": 6}))
    np.testing.assert_allclose(a.coef_.values, b.coef_.values, atol=1e-10)


# ------------------------------------------------------------------------ pooled
def test_area_weights_change_the_pooled_fit_as_sample_weight_does(client):
    ds = _grid()
    # the slope of tas on a differs with latitude, so weighting by area matters
    weighted = ClimateRegressor(["a", "index"], "tas", model="pooled", solver="lbfgs", tol=1e-10, max_iter=500, client=client).fit(ds)
    flat = ClimateRegressor(["a", "index"], "tas", model="pooled", solver="lbfgs", tol=1e-10, max_iter=500, area_weights=False,
                            client=client).fit(ds)
    assert abs(float(weighted.coef_.sel(feature="a")) - float(flat.coef_.sel(feature="a"))) > 1e-3
    cols = _columns(ds)
    y = ds["tas"].values
    ok = np.isfinite(y) & np.all(np.isfinite(cols), axis=-1)
    w = np.broadcast_to(np.cos(np.deg2rad(ds["lat"].values))[None, :, None], y.shape)
    ref = SkLinear().fit(cols[ok], y[ok], sample_weight=w[ok])
    np.testing.assert_allclose(weighted.coef_.values, ref.coef_, atol=1e-5)
    assert weighted.intercept_ == pytest.approx(ref.intercept_, abs=1e-4)
    unweighted = SkLinear().fit(cols[ok], y[ok])
    np.testing.assert_allclose(flat.coef_.values, unweighted.coef_, atol=1e-5)
    # score is the area-weighted R^2 of the predictions
    pred = weighted.predict(ds).values
    e = np.where(ok, pred - y, 0.0)
    yw = np.where(ok, y, 0.0)
    ww = np.where(ok, w, 0.0)
    mean = (ww * yw).sum() / ww.sum()
    r2 = 1 - (ww * e * e).sum() / (ww * (yw - mean) ** 2 * ok).sum()
    assert weighted.score(ds) == pytest.approx(r2, rel=1e-9)
    assert weighted.evaluate(ds)["rmse"] == pytest.approx(np.sqrt((ww * e * e).sum() / ww.sum()), rel=1e-9)


def test_pooled_poisson_link(client):
    ds = _grid()
    rng = np.random.default_rng(1)
    rate = np.exp(0.3 + 0.5 * ds["a"].fillna(0).values)
    ds["count"] = (("time", "lat", "lon"), rng.poisson(rate).astype(float))
    ds = ds.chunk({"time": 16, "lat": 3, "lon": 3})
    model = ClimateRegressor(["a"], "count", model="pooled", family="poisson", alpha=0.0, client=client).fit(ds)
    assert float(model.coef_.sel(feature="a")) == pytest.approx(0.5, abs=0.1)
    pred = model.predict(ds).compute()
    assert float(pred.min()) > 0  # expected counts


def test_sklearn_contract_and_pickle(client):
    import pickle

    model = ClimateRegressor(["a"], "tas", model="pointwise", lags=[1], client=client)
    copy = clone(model)
    assert copy.get_params()["lags"] == [1] and copy.client is client
    model.fit(_grid())
    back = pickle.loads(pickle.dumps(model))
    assert back.client is None
    xr.testing.assert_allclose(back.predict(_grid()).compute(), model.predict(_grid()).compute())


# --------------------------------------------------------------------------- files
@pytest.mark.parametrize("fmt", ["netcdf", "zarr"])
def test_reads_lazily_from_files_and_writes_predictions_back(fmt, tmp_path, client):
    ds = _grid().compute()
    path = tmp_path / ("data.nc" if fmt == "netcdf" else "data.zarr")
    if fmt == "netcdf":
        ds.to_netcdf(path)
        opened = xr.open_dataset(path, chunks={"time": 12, "lat": 5, "lon": 3})
    else:
        ds.chunk({"time": 12, "lat": 5, "lon": 3}).to_zarr(path, consolidated=False)
        opened = xr.open_zarr(path, chunks={"time": 12, "lat": 5, "lon": 3}, consolidated=False)
    assert isinstance(opened["tas"].data, da.Array)
    model = ClimateRegressor(["a", "index"], "tas", model="pointwise", lags={"a": [0, 1]}, client=client).fit(opened)
    pred = model.predict(opened)
    out = tmp_path / ("pred.nc" if fmt == "netcdf" else "pred.zarr")
    if fmt == "netcdf":
        pred.to_netcdf(out)
        back = xr.open_dataarray(out).load()
    else:
        pred.to_dataset().to_zarr(out, consolidated=False)
        back = xr.open_zarr(out, consolidated=False)["tas"].load()
    xr.testing.assert_allclose(back, pred.compute())
    assert back.indexes["time"].equals(ds.indexes["time"])  # the 360-day calendar survives
    assert back.attrs["units"] == "K"


# ---------------------------------------------------------------------- bad input
def test_bad_input_is_a_clear_error(client):
    ds = _grid()
    with pytest.raises(InputError, match=r"the Dataset has no variable 'pr' \(variables: \['a', 'index', 'tas'\]\)"):
        ClimateRegressor(["pr"], "tas").fit(ds)
    with pytest.raises(InputError, match="the Dataset has no dimension 'latitude'"):
        ClimateRegressor(["a"], "tas", sample_dims=("time", "latitude", "lon")).fit(ds)
    with pytest.raises(InputError, match="shift by up to 48 time steps but the series has only 48"):
        ClimateRegressor(["a"], "tas", lags=[48]).fit(ds)
    with pytest.raises(InputError, match="every cell of 'tas' or its features is masked"):
        ClimateRegressor(["a"], "tas", model="pointwise", client=client).fit(ds.assign(tas=ds["tas"] * np.nan))
    with pytest.raises(InputError, match="every cell of 'tas' or its features is masked"):
        ClimateRegressor(["a"], "tas", client=client).fit(ds.assign(tas=ds["tas"] * np.nan))
    fitted = ClimateRegressor(["a"], "tas", model="pointwise", client=client).fit(ds)
    other = _grid(Y=4)
    with pytest.raises(InputError, match=r"2 of the 4 'lat' values of this Dataset are not on the grid"):
        fitted.predict(other)
    with pytest.raises(ParameterError, match="feature 'tas' is the target at lag 0 with lead=0"):
        ClimateRegressor(["tas"], "tas").fit(ds)
    with pytest.raises(ParameterError, match="lags must be ints >= 0"):
        ClimateRegressor(["a"], "tas", lags=[-1]).fit(ds)
    with pytest.raises(ParameterError, match="'model' parameter of ClimateRegressor must be"):
        ClimateRegressor(["a"], "tas", model="gridded").fit(ds)
    with pytest.raises(InputError, match=r"variable 'a' has dimensions \['time', 'lat', 'lon', 'member'\]"):
        ClimateRegressor(["a"], "tas").fit(ds.assign(a=ds["a"].expand_dims(member=2, axis=-1)))
    with pytest.raises(InputError, match="expected an xarray Dataset; got ndarray"):
        ClimateRegressor(["a"], "tas").fit(np.zeros(3))


# ------------------------------------------------------------ review cases
def test_pointwise_handles_large_means_and_rank_deficient_cells_like_scikit_learn(client):
    rng = np.random.default_rng(3)
    T = 80
    time = xr.date_range("2000-01-01", periods=T, freq="D")
    psl = 101_325 + rng.normal(0, 30, size=(T, 2, 2))  # Pa: large mean, small spread
    psl[:, 0, 0] = 101_000.0  # constant in one cell: rank deficient
    other = rng.normal(size=(T, 2, 2))
    tas = 0.01 * psl + 2 * other - 730 + 0.1 * rng.normal(size=(T, 2, 2))
    tas[5:, 1, 1] = np.nan  # too few steps for the features in this cell
    ds = xr.Dataset({"psl": (("time", "lat", "lon"), psl), "o": (("time", "lat", "lon"), other),
                     "tas": (("time", "lat", "lon"), tas)},
                    coords={"time": time, "lat": [0.0, 10.0], "lon": [0.0, 10.0]}).chunk({"time": 40})
    model = ClimateRegressor(["psl", "o"], "tas", model="pointwise", area_weights=False, client=client).fit(ds)
    for i in range(2):
        for j in range(2):
            ok = np.isfinite(tas[:, i, j])
            X = np.column_stack([psl[ok, i, j], other[ok, i, j]])
            ref = SkLinear().fit(X, tas[ok, i, j])
            new = np.array([[101_400.0, 0.5]])  # predictions away from the training values agree too
            ours = model.intercept_.values[i, j] + new @ model.coef_.values[i, j]
            np.testing.assert_allclose(ours, ref.predict(new), rtol=1e-6)
            np.testing.assert_allclose(model.coef_.values[i, j], ref.coef_, atol=1e-5)


@pytest.mark.parametrize("chunks", [None, {"time": 25, "lat": 2}], ids=["one block", "time chunks"])
@pytest.mark.parametrize("mean, spread", [(101_325.0, 0.1), (271.35, 1e-3)], ids=["pressure", "sea-ice sst"])
def test_pointwise_keeps_its_precision_when_the_spread_is_tiny_next_to_the_mean(chunks, mean, spread, client):
    """A pressure of 101,325 Pa varying by 0.1 Pa, a sea-surface temperature held at the
    freezing point of sea water: slopes as precise as least squares on the anomalies
    (raw sums of squares, centred afterwards, lost 1e-3 of the slope here)."""
    rng = np.random.default_rng(0)
    T = 120
    e = rng.normal(size=(T, 3, 4))
    x = mean + spread * e
    y = 5.0 + 2.0 * e + rng.normal(0, 0.1, e.shape)
    y[7, 1, 2] = np.nan
    ds = xr.Dataset({"x": (("time", "lat", "lon"), x), "y": (("time", "lat", "lon"), y)},
                    coords={"time": xr.date_range("2000-01-01", periods=T, freq="MS"), "lat": [60.0, 0.0, -60.0],
                            "lon": [0.0, 90.0, 180.0, 270.0]})
    model = ClimateRegressor(["x"], "y", model="pointwise", client=client).fit(
        ds if chunks is None else ds.chunk(chunks))
    for i in range(3):
        for j in range(4):
            ok = np.isfinite(y[:, i, j])
            A = np.column_stack([np.ones(ok.sum()), x[ok, i, j] - mean])  # anomalies: well conditioned
            b0, b1 = np.linalg.lstsq(A, y[ok, i, j], rcond=None)[0]
            assert model.coef_.values[i, j, 0] == pytest.approx(b1, rel=1e-9)
            assert model.intercept_.values[i, j] == pytest.approx(b0 - b1 * mean, rel=1e-9)


def test_sample_dims_in_any_order_and_data_stored_in_any_order(client):
    ds = _grid()
    a = ClimateRegressor(["a", "index"], "tas", model="pointwise", client=client).fit(ds)
    stored = ds.transpose("lon", "time", "lat")
    b = ClimateRegressor(["a", "index"], "tas", model="pointwise", sample_dims=("lat", "lon", "time"),
                         client=client).fit(stored)
    xr.testing.assert_allclose(a.coef_, b.coef_.transpose(*a.coef_.dims))
    pred = b.predict(stored)
    assert pred.dims == ("lon", "time", "lat")  # the order of the data's target
    xr.testing.assert_allclose(pred.transpose("time", "lat", "lon").compute(), a.predict(ds).compute())


def test_lags_on_seasonal_means_and_decadal_data():
    seasons = xr.date_range("2000-03-01", periods=40, freq="QS-MAR")
    ds = _grid(T=40).assign_coords(time=seasons)
    dm = to_design_matrix(ds, ["a"], "tas", lead=1, area_weights=False)
    grid = dm.to_dataarray(dm.X[:, 0]).compute()
    # lead 1 = the previous season, not "three months that are never there"
    np.testing.assert_array_equal(grid.isel(time=5).values[1:, 1:], ds["a"].isel(time=4).values[1:, 1:])
    decades = xr.date_range("1850-01-01", periods=20, freq="10YS")
    dd_ = _grid(T=20).assign_coords(time=decades)
    dm = to_design_matrix(dd_.drop_isel(time=[7]), ["a"], "tas", lags=[1], area_weights=False)
    g = dm.to_dataarray(dm.X[:, 0]).compute()
    assert np.isfinite(g.isel(time=3).values[1:, 1:]).all()
    assert np.isnan(g.isel(time=7).values).all()  # after the missing decade: a gap


def test_static_fields_other_coordinates_and_time_without_dates(client):
    ds = _grid()
    ds = ds.assign(orog=(("lat", "lon"), np.random.default_rng(0).normal(size=(5, 6))))
    ds = ds.assign_coords(height=2.0, cell_area=(("lat", "lon"), np.ones((5, 6))))
    model = ClimateRegressor(["a", "orog"], "tas", lead=1, client=client).fit(ds)
    assert model.feature_names_ == ["a", "orog"]
    pred = model.predict(ds)
    assert set(pred.coords) == {"time", "lat", "lon", "height", "cell_area"}
    with pytest.raises(InputError, match="feature 'orog' has no 'time' dimension \\(a static field\\): it has no lags"):
        ClimateRegressor(["a", "orog"], "tas", lags=1).fit(ds)
    numeric = _grid().assign_coords(time=np.arange(48.0))
    ClimateRegressor(["a"], "tas", model="pointwise", client=client).fit(numeric)  # no lags: no dates needed
    with pytest.raises(InputError, match="lags, lead and seasonal terms need a time coordinate of dates"):
        ClimateRegressor(["a"], "tas", lags=[1]).fit(numeric)


def test_predict_uses_the_fitted_settings_and_a_refit_starts_clean(client):
    ds = _grid()
    model = ClimateRegressor(["a"], "tas", model="pointwise", client=client).fit(ds)
    before = model.predict(ds).compute()
    model.set_params(seasonal=2, lags=[0, 1])  # not refitted: predictions must not change
    xr.testing.assert_identical(model.predict(ds).compute(), before)
    model.set_params(model="pooled", seasonal=None, lags=None).fit(ds)
    assert not hasattr(model, "n_samples_") and hasattr(model, "estimator_")
    no_coords = _grid().drop_vars(["lat", "lon"])
    fitted = ClimateRegressor(["a"], "tas", model="pointwise", area_weights=False, client=client).fit(no_coords)
    with pytest.raises(InputError, match=r"the 'lat' dimension of this Dataset \(4 values\) differs"):
        fitted.predict(_grid(Y=4).drop_vars(["lat", "lon"]))


@pytest.mark.parametrize("scheduler", ["client", "local"])
def test_fits_show_a_progress_bar_labelled_with_the_model(scheduler, bars, capsys, request):
    """Pointwise: the spatial chunks solved (futures on a cluster, task callbacks
    locally); pooled: the iterations of max_iter.  The results do not change."""
    closed = lambda: [(b.desc, b.total, b.closed_at) for b in bars if b.shown]
    client = request.getfixturevalue("client") if scheduler == "client" else None
    ds = _grid()  # 2 x 2 spatial chunks
    quiet = ClimateRegressor(["a", "index"], "tas", model="pointwise", client=client).fit(ds)
    shown = ClimateRegressor(["a", "index"], "tas", model="pointwise", client=client, verbose=1).fit(ds)
    assert "ClimateRegressor (pointwise):" in capsys.readouterr().err
    assert closed() == [("ClimateRegressor (pointwise)", 4, 4)]
    np.testing.assert_array_equal(shown.coef_.values, quiet.coef_.values)
    np.testing.assert_array_equal(shown.n_samples_.values, quiet.n_samples_.values)
    if scheduler == "client":
        pooled = ClimateRegressor(["a", "index"], "tas", model="pooled", solver="gd", max_iter=5, tol=0, verbose=1, client=client)
        with pytest.warns(ConvergenceWarning):
            pooled.fit(ds)
        assert "ClimateRegressor (pooled):" in capsys.readouterr().err
        assert closed()[-1] == ("ClimateRegressor (pooled)", 5, 5)
