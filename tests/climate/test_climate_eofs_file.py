"""Issue 50 on a second real file: eofs' Pacific SST anomalies (``sst_ndjfm_anom.nc``,
50 winters x 18 latitudes x 30 longitudes from 117.5 to 262.5 degrees east, datetime64
times at noon, NaN over land), shipped inside the ``eofs`` package.

The longitudes cross the date line, so the -180..180 convention reorders them: the
pointwise model's predictions there must be the same cells' predictions."""

import numpy as np
import pytest
import xarray as xr
from eofs import examples as eofs_examples  # the test extra installs eofs

from dask_dgd.climate import ClimateRegressor


@pytest.fixture(scope="module")
def sst():
    ds = xr.open_dataset(eofs_examples.example_data_path("sst_ndjfm_anom.nc"))[["sst"]].load()
    assert np.isnan(ds["sst"].values).any() and ds["longitude"].max() > 180  # land, and across the date line
    return ds


def test_a_trend_on_time_equals_polyfit_rescaled_on_the_sst_file(sst):
    """datetime64 times at noon: the trend per decade (365.2425-day years) is polyfit's
    slope per nanosecond rescaled, cell by cell, land (all-NaN cells) left NaN."""
    model = ClimateRegressor(["time"], "sst", model="pointwise", time_unit="decades").fit(sst)
    slope = model.coef_.sel(feature="time")
    ref = sst["sst"].polyfit(dim="time", deg=1)["polyfit_coefficients"].sel(degree=1) * (3652.425 * 86400e9)
    sea = np.isfinite(ref.values)
    assert sea.sum() > 300 and np.array_equal(np.isfinite(slope.values), sea)
    np.testing.assert_allclose(slope.values[sea], ref.values[sea], rtol=1e-10, atol=0)


def test_pointwise_predictions_across_the_date_line_in_the_other_longitude_convention(sst):
    model = ClimateRegressor(["time"], "sst", model="pointwise").fit(sst)
    full = model.predict(sst)
    shifted = sst.assign_coords(longitude=((sst["longitude"] + 180) % 360) - 180).sortby("longitude")
    got = model.predict(shifted)
    assert float(got["longitude"].min()) < 0 < float(got["longitude"].max())  # reordered across the date line
    expected = full.assign_coords(longitude=((full["longitude"] + 180) % 360) - 180).sortby("longitude")
    np.testing.assert_allclose(got.values, expected.values, rtol=1e-12, atol=0)
    assert model.evaluate(shifted) == pytest.approx(model.evaluate(sst), rel=1e-12)
