"""The default ClimateRegressor against the field's baselines on a real projection.

iris-sample-data's A1B_north_america.nc (HadCM3 annual air temperature, 240 years on
a 37 x 49 grid), pattern scaling: each cell's temperature regressed on the regional
mean temperature, 150 years fitted and 90 held out.  References: each cell's
``numpy.linalg.lstsq`` (per-cell least squares), each cell's mean over the fitted years
(the climatology) and scikit-learn's ``r2_score`` with the cells' ``cos(latitude)``
weights.
"""

import os

import numpy as np
import pytest
import xarray as xr
from sklearn.metrics import r2_score

from dask_dgd import ParameterError
from dask_dgd.climate import ClimateRegressor

FITTED = 150


@pytest.fixture(scope="module")
def a1b():
    iris_sample_data = pytest.importorskip("iris_sample_data")
    path = os.path.join(os.path.dirname(iris_sample_data.__file__), "sample_data", "A1B_north_america.nc")
    ds = xr.open_dataset(path)[["air_temperature"]].load()
    weights = np.cos(np.deg2rad(ds.latitude))
    ds["regional"] = ds["air_temperature"].weighted(weights).mean(("latitude", "longitude"))
    return ds.isel(time=slice(0, FITTED)), ds.isel(time=slice(FITTED, None))


def _weighted_r2(ds, predicted):
    """Area-weighted R² of ``predicted`` (time, latitude, longitude) on ``ds``."""
    y = ds["air_temperature"].transpose("time", "latitude", "longitude").values
    w = np.broadcast_to(np.cos(np.deg2rad(ds.latitude.values))[None, :, None], y.shape)
    return r2_score(y.ravel(), np.asarray(predicted).ravel(), sample_weight=w.ravel())


def test_the_default_fit_is_per_cell_least_squares_and_beats_the_climatology_and_one_pooled_model(a1b, client):
    train, test = a1b
    default = ClimateRegressor(["regional"], "air_temperature", client=client).fit(train)
    assert default.model == "pointwise"
    # per-cell least squares, by hand
    y = train["air_temperature"].transpose("time", "latitude", "longitude").values
    X = np.c_[np.ones(FITTED), train["regional"].values]
    coef = np.linalg.lstsq(X, y.reshape(FITTED, -1), rcond=None)[0].reshape(2, *y.shape[1:])
    np.testing.assert_allclose(default.coef_.sel(feature="regional").transpose("latitude", "longitude").values,
                               coef[1], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(default.intercept_.transpose("latitude", "longitude").values, coef[0], rtol=1e-9)
    # held out: the score is the area-weighted R² of the per-cell predictions
    by_hand = np.einsum("tk,kyx->tyx", np.c_[np.ones(test.sizes["time"]), test["regional"].values], coef)
    held_out = default.score(test)
    assert held_out == pytest.approx(_weighted_r2(test, by_hand), rel=1e-9)
    climatology = _weighted_r2(test, np.broadcast_to(y.mean(axis=0), by_hand.shape))
    pooled = ClimateRegressor(["regional"], "air_temperature", model="pooled", client=client).fit(train)
    # measured: 0.986, the climatology 0.862 (its error 10x the default's), one pooled model 0.015
    assert 1 - held_out < (1 - climatology) / 2 and held_out > pooled.score(test) + 0.5, (
        held_out, climatology, pooled.score(test))


def test_a_pooled_training_parameter_with_the_default_model_names_the_way_out(a1b):
    train, _ = a1b
    with pytest.raises(ParameterError, match=r"^solver='sgd': pointwise models do not use this .* leave it at its "
                                             r"default or use model='pooled'$"):
        ClimateRegressor(["regional"], "air_temperature", solver="sgd").fit(train)
