"""Pointwise models predict on any cells of their fitted grid, and fits warn about tiny chunks (issue 50, items 6, 9).

Item 6: a pointwise model predicts on a Dataset whose spatial cells are cells of the
fitted grid, matched by coordinate value (float32 round trips within tolerance) in any
order and subset, longitudes modulo 360; its predictions equal the full grid's on the
matched cells, with the Dataset's own coordinates.  Other cells are refused, naming
them and the way out.  Item 9: a fit whose grid is in many tiny dask blocks warns
``ChunkSizeWarning`` with the chunks to use.
"""

import os
import warnings

import numpy as np
import pytest
import xarray as xr

from dask_dgd.climate import ClimateRegressor
from dask_dgd.exceptions import ChunkSizeWarning, DGDWarning, InputError

A1B = os.path.join("sample_data", "A1B_north_america.nc")


def _a1b(**open_kw):
    iris_sample_data = pytest.importorskip("iris_sample_data")
    return xr.open_dataset(os.path.join(os.path.dirname(iris_sample_data.__file__), A1B), **open_kw)


def _global(T=36, seed=0):
    """A monthly global grid (lat -82.5..82.5 by 15, lon 0..345 by 15, CF attributes):
    ``tas = 1 + slope * x + noise`` with a slope varying by cell, ``n`` Poisson counts."""
    rng = np.random.default_rng(seed)
    time = xr.date_range("2000-01-01", periods=T, freq="MS", calendar="360_day", use_cftime=True)
    lat, lon = np.arange(-82.5, 83.0, 15.0), np.arange(0.0, 360.0, 15.0)
    x = rng.normal(size=(T, lat.size, lon.size))
    slope = 1.0 + rng.normal(0, 0.5, size=(lat.size, lon.size))
    tas = 1.0 + slope * x + 0.2 * rng.normal(size=x.shape)
    n = rng.poisson(np.exp(0.5 + 0.3 * x)).astype(float)
    dims = ("time", "lat", "lon")
    return xr.Dataset(
        {"x": (dims, x), "tas": (dims, tas), "n": (dims, n)},
        coords={"time": time,
                "lat": ("lat", lat, {"units": "degrees_north", "standard_name": "latitude"}),
                "lon": ("lon", lon, {"units": "degrees_east", "standard_name": "longitude"})},
    ).chunk({"time": 12, "lat": 6, "lon": 12})


def _to_180(obj, name="lon"):
    return obj.assign_coords({name: ((obj[name] + 180) % 360) - 180}).sortby(name)


def _float32(obj):
    return obj.assign_coords(lat=obj.lat.astype(np.float32), lon=obj.lon.astype(np.float32))


#: The same selection of cells, applied to the Dataset and to the full grid's predictions.
CASES = {
    "sub-region": lambda o: o.isel(lat=slice(0, 5), lon=slice(3, 10)),
    "reversed latitude": lambda o: o.sortby("lat", ascending=False),
    "longitude -180..180": _to_180,
    "float32 coordinates": _float32,
    "scattered cells, -180..180, float32": lambda o: _float32(_to_180(o)).isel(lat=[7, 0, 3], lon=[20, 2, 11, 5]),
}


@pytest.fixture(scope="module")
def global_models():
    ds = _global()
    return ds, {
        "gaussian": ClimateRegressor(["x"], "tas", model="pointwise", seasonal=1).fit(ds),
        "poisson": ClimateRegressor(["x"], "n", model="pointwise", family="poisson").fit(ds),
    }


@pytest.mark.parametrize("family", ["gaussian", "poisson"])
@pytest.mark.parametrize("case", list(CASES))
def test_pointwise_predictions_on_cells_of_the_fitted_grid_equal_the_full_grids(global_models, family, case):
    ds, models = global_models
    model = models[family]
    full = model.predict(ds).compute()
    part = CASES[case](ds)
    lazy = model.predict(part)
    assert lazy.chunks[1:] == part["x"].chunks[1:]  # the coefficients taken are chunked like the Dataset
    pred = lazy.compute()
    np.testing.assert_allclose(pred.values, CASES[case](full).values, rtol=1e-12, atol=0)
    for d in ("time", "lat", "lon"):  # the Dataset's own coordinates, not the fitted grid's
        np.testing.assert_array_equal(pred[d].values, part[d].values)
        assert pred[d].dtype == part[d].dtype
    scores = model.evaluate(part)
    assert scores["n"] == part[model.target].size and np.isfinite(scores["r2"])


def test_a1b_file_predicts_on_a_sub_region_another_longitude_convention_and_reversed_latitudes():
    """iris-sample-data's A1B_north_america.nc (air_temperature, 240 years, latitude
    15..60, longitude 225..315 degrees east as float32): a per-cell AR(1) model."""
    ds = _a1b().chunk({"time": 48})
    model = ClimateRegressor(["air_temperature"], "air_temperature", model="pointwise", lags={"air_temperature": [1]})
    model.fit(ds.isel(time=slice(0, 48)))
    full = model.predict(ds).compute()
    cases = {
        "sub-region": lambda o: o.isel(latitude=slice(0, 10)),
        "-180..180": lambda o: _to_180(o, "longitude"),
        "reversed latitude": lambda o: o.sortby("latitude", ascending=False),
        "both, a corner": lambda o: _to_180(o, "longitude").sortby("latitude", ascending=False).isel(
            latitude=slice(0, 8), longitude=slice(-12, None)),
    }
    for name, case in cases.items():
        part = case(ds)
        pred = model.predict(part).compute()
        np.testing.assert_allclose(pred.values, case(full).values, rtol=1e-12, atol=0, err_msg=name)
        np.testing.assert_array_equal(pred.longitude.values, part.longitude.values)
    assert float(_to_180(ds, "longitude").longitude.min()) == -135.0
    # and back: a model fitted on -180..180 predicts on 0..360
    west = _to_180(ds, "longitude")
    back = ClimateRegressor(["air_temperature"], "air_temperature", model="pointwise",
                            lags={"air_temperature": [1]}).fit(west.isel(time=slice(0, 48)))
    np.testing.assert_allclose(back.predict(ds).values, full.values, rtol=1e-12, atol=0)


def test_cells_off_the_fitted_grid_are_refused_naming_them_and_the_way_out(global_models):
    ds, models = global_models
    model = models["gaussian"]
    shifted = ds.assign_coords(lon=ds.lon + 1.0)
    with pytest.raises(InputError, match=r"^24 of the 24 'lon' values of this Dataset are not on the grid the pointwise "
                                         r"model was fitted on \(not found: 1, 16, 31, \.\.\.; fitted: 24 values from 0 "
                                         r"to 345, matched modulo 360\): a pointwise model predicts on cells of its fitted "
                                         r"grid only \(any subset, in any order\); take the fitted cells: convert to "
                                         r"the fitted longitudes first, ds = ds\.assign_coords\(lon=ds\.lon % 360\)"
                                         r"\.sortby\('lon'\), then ds\.reindex\(lon=model\.coef_\.lon, "
                                         r"method=\"nearest\", tolerance=7\.5\) \(NaN where none is near\) or "
                                         r"ds\.interp\(lon=model\.coef_\.lon\), or refit on this grid$"):
        model.predict(shifted)
    # the ways out named work: the nearest (or interpolated) values on the fitted cells
    for fixed in (shifted.reindex(lon=model.coef_.lon, method="nearest", tolerance=7.5),
                  shifted.interp(lon=model.coef_.lon)):
        pred = model.predict(fixed).compute()
        np.testing.assert_array_equal(pred.lon.values, ds.lon.values)
        assert np.isfinite(pred.isel(lon=slice(1, None)).values).all()
    # a latitude between the fitted ones: no modulo for latitudes
    between = xr.concat([ds.isel(lat=[0, 1]), ds.isel(lat=[2]).assign_coords(lat=[-50.0])], dim="lat")
    with pytest.raises(InputError, match=r"^1 of the 3 'lat' values .* \(not found: -50; fitted: 12 values from -82\.5 "
                                         r"to 82\.5\): a pointwise model"):
        model.predict(between)
    # the tolerance is for rounding, far below the grid spacing (15 degrees): 1e-3 degrees off is another cell
    with pytest.raises(InputError, match=r"^1 of the 24 'lon' values .*not found: 30\.001;"):
        model.predict(ds.assign_coords(lon=ds.lon.values + np.where(ds.lon.values == 30.0, 1e-3, 0.0)))


def test_only_longitudes_in_degrees_are_matched_modulo_360():
    ds = _global(T=24).rename(lon="x_m")  # "x": longitude-like by name, but no degrees: metres, say
    ds["x_m"].attrs = {"units": "m"}
    model = ClimateRegressor(["x"], "tas", model="pointwise", sample_dims=("time", "lat", "x_m")).fit(ds)
    with pytest.raises(InputError, match=r"^24 of the 24 'x_m' values .*\(not found: -360, -345, -330, \.\.\.; "
                                         r"fitted: 24 values from 0 to 345\): a pointwise"):
        model.predict(ds.assign_coords(x_m=ds.x_m - 360.0))
    # a name lon/longitude (no attributes) is a longitude in degrees
    plain = _global(T=24)
    plain["lon"].attrs = {}
    fitted = ClimateRegressor(["x"], "tas", model="pointwise").fit(plain)
    np.testing.assert_allclose(fitted.predict(_to_180(plain)).values, _to_180(fitted.predict(plain)).values,
                               rtol=1e-12, atol=0)
    # so is longitude_0 (iris's name for a second grid) whose attributes a conversion dropped
    suffixed = _global(T=24).rename(lon="longitude_0")
    model = ClimateRegressor(["x"], "tas", model="pointwise").fit(suffixed)
    converted = suffixed.assign_coords(longitude_0=((suffixed.longitude_0.values + 180) % 360) - 180)
    converted["longitude_0"].attrs = {}
    np.testing.assert_allclose(model.predict(converted.sortby("longitude_0")).values,
                               model.predict(suffixed).sortby(((suffixed.longitude_0 + 180) % 360) - 180).values,
                               rtol=1e-12, atol=0)


def test_a_grid_with_a_cyclic_column_matches_either_copy_of_it():
    ds = _global(T=24)
    cyclic = xr.concat([ds, ds.isel(lon=[0]).assign_coords(lon=[360.0])], dim="lon")  # 0 and 360: one cell twice
    model = ClimateRegressor(["x"], "tas", model="pointwise").fit(cyclic)
    full = model.predict(cyclic).compute()
    np.testing.assert_array_equal(full.isel(lon=24).values, full.isel(lon=0).values)  # the same data: the same fit
    unique = full.isel(lon=slice(0, 24))
    for part in (cyclic.isel(lon=[24, 3, 0]), cyclic.isel(lon=slice(2, 6)), _to_180(cyclic)):
        same = unique.sel(lon=np.mod(part.lon.values, 360))
        np.testing.assert_allclose(model.predict(part).values, same.values, rtol=1e-12, atol=0)


def test_dimensions_without_coordinate_values_keep_the_same_size_rule():
    ds = _global(T=24)
    bare = ds.drop_vars(["lat", "lon"])
    model = ClimateRegressor(["x"], "tas", model="pointwise", area_weights=False).fit(bare)
    np.testing.assert_allclose(model.predict(bare).values, model.predict(ds).values, rtol=0, atol=0)
    with pytest.raises(InputError, match=r"^the 'lat' dimension of this Dataset \(5 values\) differs from the grid the "
                                         r"pointwise model was fitted on \(12 values\): the model was fitted without "
                                         r"coordinate values for 'lat', so its cells are matched by position and the "
                                         r"sizes must be equal"):
        model.predict(bare.isel(lat=slice(0, 5)))
    fitted = ClimateRegressor(["x"], "tas", model="pointwise").fit(ds)
    with pytest.raises(InputError, match=r"^the 'lon' dimension of this Dataset \(24 values\) differs .*: this Dataset "
                                         r"has no coordinate values for 'lon' \(the fitted grid has: 24 values from 0 to "
                                         r"345\), so its cells cannot be matched .*ds\.assign_coords\(lon=\.\.\.\)"):
        fitted.predict(ds.drop_vars("lon"))


def test_a_curvilinear_grid_without_1d_coordinates_predicts_on_the_same_size_only():
    ds = _global(T=24).rename(lat="y", lon="x_i").drop_vars(["y", "x_i"])
    lat2d, lon2d = np.meshgrid(np.arange(-82.5, 83.0, 15.0), np.arange(24) * 15.0, indexing="ij")
    ds = ds.assign_coords(nav_lat=(("y", "x_i"), lat2d), nav_lon=(("y", "x_i"), lon2d))  # the areas from both
    model = ClimateRegressor(["x"], "tas", model="pointwise", sample_dims=("time", "y", "x_i")).fit(ds)
    assert model.predict(ds).shape == (24, 12, 24)
    with pytest.raises(InputError, match=r"the 'x_i' dimension of this Dataset \(3 values\) differs .*matched by "
                                         r"position and the sizes must be equal"):
        model.predict(ds.isel(x_i=slice(0, 3)))


# ------------------------------------------------------------------ item 9: tiny chunks
def _grid_for_chunks(T=48):
    return _global(T=T).compute()  # in memory; chunked by each test


@pytest.mark.parametrize("model", ["pointwise", "pooled"])
def test_a_grid_in_one_step_blocks_warns_with_the_chunks_to_use(model):
    ds = _grid_for_chunks().chunk({"time": 1, "lat": -1, "lon": -1})
    kw = dict(solver="lbfgs", max_iter=20) if model == "pooled" else {}
    with pytest.warns(ChunkSizeWarning, match=r"^the grid of 'tas' is in 48 dask blocks of 288 cells \(2\.25 kiB as "
                                              r"float64\) on average, far below a useful size: .* below about 1\.00 MiB, "
                                              r".*rechunk, e\.g\. ds = ds\.chunk\(\{'time': 48\}\) \(dask's \"auto\" "
                                              r"chunks for this grid\), or open the file with "
                                              r"xr\.open_dataset\(path, chunks=\{'time': 48\}\)$") as record:
        ClimateRegressor(["x"], "tas", model=model, **kw).fit(ds)
    assert sum(issubclass(w.category, ChunkSizeWarning) for w in record) == 1
    assert issubclass(ChunkSizeWarning, DGDWarning)
    # the same grid chunked "auto": no warning, even with every warning an error
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ClimateRegressor(["x"], "tas", model=model, **{**kw, "max_iter": 200, "tol": 1e-6}).fit(ds.chunk("auto"))


def test_tiny_spatial_chunks_get_auto_chunks_along_every_dimension():
    ds = _grid_for_chunks(T=24).chunk({"time": -1, "lat": 1, "lon": 1})
    with pytest.warns(ChunkSizeWarning, match=r"in 288 dask blocks of 24 cells .*ds\.chunk\(\{'time': 24, 'lat': 12, "
                                              r"'lon': 24\}\)"):
        ClimateRegressor(["x"], "tas", model="pointwise").fit(ds)


def test_the_chunk_warning_can_be_silenced_by_its_category_and_the_in_process_path_never_warns():
    ds = _grid_for_chunks()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=ChunkSizeWarning)
        ClimateRegressor(["x"], "tas", model="pointwise").fit(ds.chunk({"time": 1}))
        ClimateRegressor(["x"], "tas", model="pointwise").fit(ds)  # one NumPy block: fitted in process
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ClimateRegressor(["x"], "tas", model="pointwise").fit(ds)
    # a few small blocks (16 at most) are no reason to warn
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ClimateRegressor(["x"], "tas", model="pointwise").fit(ds.chunk({"time": 3}))


def test_the_a1b_file_opened_with_its_own_chunks_warns_and_the_named_fix_does_not():
    ds = _a1b(chunks={})  # the file's chunking: one year per block
    assert ds.air_temperature.data.numblocks[0] == 240
    model = ClimateRegressor(["air_temperature"], "air_temperature", model="pointwise", lags={"air_temperature": [1]})
    with pytest.warns(ChunkSizeWarning, match=r"in 240 dask blocks of 1,813 cells .*ds\.chunk\(\{'time': 240\}\)"):
        model.fit(ds)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ChunkSizeWarning)
        model.fit(ds.chunk({"time": 240}))


def test_the_named_way_out_takes_the_right_cells_from_another_longitude_convention():
    """nearest/interp are not modulo 360: the message converts the convention first, and
    its tolerance leaves the fitted cells beyond the Dataset's extent NaN, not its edge."""
    ds = _global()
    model = ClimateRegressor(["x"], "tas", model="pointwise").fit(ds)
    finer = _to_180(ds).interp(lon=np.arange(-180.0, 180.0, 5.0))  # another grid, -180..175
    with pytest.raises(InputError) as err:
        model.predict(finer)
    assert "ds = ds.assign_coords(lon=ds.lon % 360).sortby('lon')" in str(err.value)
    fixed = finer.assign_coords(lon=finer.lon % 360).sortby("lon").reindex(lon=model.coef_.lon, method="nearest",
                                                                           tolerance=7.5)
    np.testing.assert_allclose(fixed.x.values, ds.x.values)
    region = ds.isel(lat=slice(0, 3))
    kept = region.reindex(lat=model.coef_.lat, method="nearest", tolerance=7.5)
    assert np.isnan(kept.x.isel(lat=slice(3, None)).values).all()
