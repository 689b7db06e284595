"""Climate models on CuPy-backed Datasets: fits equal the CPU fits, predictions stay on the GPU.

The same block functions run on ``array_api_strict`` blocks in every CI run
(``tests/climate/test_climate_array_api.py``); here CuPy also takes the graph-level
operations dask has CuPy dispatches for (a static field broadcast to the grid, data
stored in another dimension order, concatenating the predicted blocks).
"""


import dask
import numpy as np
import pytest
import xarray as xr
from namespace_checks import climate_grid

from dask_dgd.climate import ClimateRegressor, to_design_matrix
from dask_dgd.climate._blocks import design_block, mask_block
from dask_dgd.climate._pointwise import cell_stats
from dask_dgd.climate._pointwise import pointwise_block as _pointwise_block
from dask_dgd.climate._pointwise import pooled_block as _pooled_block

CHUNKS = {"time": 12, "lat": 2, "lon": 5}


@pytest.fixture
def gpu_dataset(on_gpu):
    def convert(ds):
        ds = ds.chunk({d: CHUNKS[d] for d in ds.dims})
        return ds.copy(data={name: on_gpu(v.data) for name, v in ds.data_vars.items()})

    return convert


def _blocks(client, *arrays):
    delayed = [list(x.to_delayed(optimize_graph=False).ravel()) for x in arrays]
    flat = client.gather(client.compute([d for ds in delayed for d in ds]))
    out, i = [], 0
    for ds in delayed:
        out.append(flat[i:i + len(ds)])
        i += len(ds)
    return out


def _check_predictions(client, cp, model, ref, gds, ds):
    pred = model.predict(gds)
    assert isinstance(pred.data._meta, cp.ndarray)
    got, expected = _blocks(client, pred.data, ref.predict(ds.chunk({d: CHUNKS[d] for d in ds.dims})).data)
    assert len(got) == len(expected) > 1
    for b, e in zip(got, expected):
        assert isinstance(b, cp.ndarray), type(b)
        np.testing.assert_allclose(cp.asnumpy(b), e, rtol=1e-9, atol=1e-6)
    whole = pred.compute()  # dask concatenates CuPy blocks
    assert isinstance(whole.data, cp.ndarray) and whole.dims == pred.dims
    # a model fitted on the GPU predicts on NumPy data, and the other way round
    xr.testing.assert_allclose(model.predict(ds).compute(), ref.predict(ds).compute(), atol=1e-6)
    assert isinstance(ref.predict(gds).data.blocks[(0,) * pred.ndim].compute(), cp.ndarray)
    assert model.evaluate(gds)["r2"] == pytest.approx(ref.evaluate(ds)["r2"], abs=1e-9)


# --------------------------------------------------------------- block functions
def test_block_functions_on_cupy_equal_numpy(cp):
    rng = np.random.default_rng(0)
    y = 280 + rng.normal(size=(9, 3, 4))
    y[:, 0, 0] = np.nan
    w = np.cos(np.deg2rad(np.linspace(-60, 60, 3)))[:, None] * np.ones((3, 4))
    w[2, 3] = 0.0
    a = rng.normal(size=(9, 3, 4))
    a[2, 1, 1] = np.nan
    season = rng.normal(size=9)  # NumPy, as the driver makes it
    index = rng.normal(size=9)
    index[3] = np.nan
    order = [(0, 0), (1, 0), (1, 1)]
    args_np, args_gpu = (a, season, index), (cp.asarray(a), season, cp.asarray(index))
    expected = cell_stats(order, y, w, *args_np)
    got = cell_stats(order, cp.asarray(y), w, *args_gpu)
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
    for fn in (design_block, mask_block):
        out = fn(order, cp.asarray(y), w, *args_gpu)
        assert isinstance(out, cp.ndarray)
        np.testing.assert_array_equal(cp.asnumpy(out), fn(order, y, w, *args_np))
    table = rng.normal(size=(3, 4, 4))
    out = _pointwise_block(order, "gaussian", table, w, *args_gpu)
    assert isinstance(out, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(out), _pointwise_block(order, "gaussian", table, w, *args_np), rtol=1e-12)
    for family in ("gaussian", "poisson", "binomial"):
        out = _pooled_block(order, table[0, 0, 1:] * 0.1, 0.2, family, w, *args_gpu)
        assert isinstance(out, cp.ndarray)
        np.testing.assert_allclose(cp.asnumpy(out), _pooled_block(order, table[0, 0, 1:] * 0.1, 0.2, family, w,
                                                                   *args_np), rtol=1e-12)


# -------------------------------------------------------------------- end to end
POINTWISE = [
    ("lags", ["a", "index"], dict(lead=1, lags={"a": [0, 1], "index": [0, 3]}, seasonal=1)),
    ("static+order", ["a", "orog"], dict(alpha=1.0)),
]


@pytest.mark.parametrize("name, features, params", POINTWISE, ids=[p[0] for p in POINTWISE])
def test_pointwise_on_gpu_equals_cpu(name, features, params, cp, gpu_dataset, client):
    ds = climate_grid()
    if name == "static+order":
        ds = ds.transpose("lon", "time", "lat")
    gds = gpu_dataset(ds)
    ref = ClimateRegressor(features, "tas", model="pointwise", client=client, **params).fit(ds)
    model = ClimateRegressor(features, "tas", model="pointwise", client=client, **params).fit(gds)
    assert isinstance(model.coef_.values, np.ndarray)  # fitted attributes stay on the host
    np.testing.assert_allclose(model.coef_.values, ref.coef_.values, rtol=0, atol=1e-6)
    np.testing.assert_allclose(model.intercept_.values, ref.intercept_.values, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(model.n_samples_.values, ref.n_samples_.values)
    _check_predictions(client, cp, model, ref, gds, ds)


POOLED = [
    ("gaussian", ["a", "index", "orog"], dict(lags={"a": [0, 1]}, seasonal=1)),
    ("poisson", ["a", "index"], dict()),
    ("binomial", ["a", "index"], dict(lead=1)),
]


@pytest.mark.parametrize("family, features, params", POOLED, ids=[p[0] for p in POOLED])
def test_pooled_on_gpu_equals_cpu(family, features, params, cp, gpu_dataset, client):
    ds = climate_grid()
    if family == "poisson":
        ds["tas"] = (ds["tas"] - 278).clip(0).round()
    elif family == "binomial":
        ds["tas"] = (ds["tas"] > 280).astype(float).where(ds["tas"].notnull())
    gds = gpu_dataset(ds)
    kw = dict(model="pooled", family=family, solver="newton", tol=1e-12, max_iter=50, client=client, **params)
    ref = ClimateRegressor(features, "tas", **kw).fit(ds)
    model = ClimateRegressor(features, "tas", **kw).fit(gds)
    np.testing.assert_allclose(model.coef_.values, ref.coef_.values, rtol=0, atol=1e-6)
    assert model.intercept_ == pytest.approx(ref.intercept_, abs=1e-6)
    _check_predictions(client, cp, model, ref, gds, ds)


@pytest.mark.parametrize("family", ["poisson", "binomial"])
def test_pointwise_glm_on_gpu_equals_cpu(family, cp, gpu_dataset, client):
    ds = climate_grid(T=36)
    if family == "poisson":
        ds["tas"] = (ds["tas"] - 278).clip(0).round()
    else:
        ds["tas"] = (ds["tas"] > 280).astype(float).where(ds["tas"].notnull())
    gds = gpu_dataset(ds)
    kw = dict(model="pointwise", family=family, lags={"a": [0, 1]}, seasonal=1, client=client)
    ref = ClimateRegressor(["a", "index"], "tas", **kw).fit(ds)
    model = ClimateRegressor(["a", "index"], "tas", **kw).fit(gds)
    assert isinstance(model.coef_.values, np.ndarray) and model.n_iter_ == ref.n_iter_
    np.testing.assert_allclose(model.coef_.values, ref.coef_.values, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(model.intercept_.values, ref.intercept_.values, rtol=1e-9, atol=1e-9)
    pred = model.predict(gds)
    assert isinstance(pred.data.blocks[0, 0, 0].compute(), cp.ndarray)
    xr.testing.assert_allclose(model.predict(ds).compute(), ref.predict(ds).compute(), atol=1e-9)


def test_design_matrix_on_gpu(cp, gpu_dataset, client):
    ds = climate_grid().chunk(CHUNKS)  # the CPU design in the same row order
    gds = gpu_dataset(ds)
    dm = to_design_matrix(gds, ["a", "index", "orog"], "tas", lags={"a": [0, 2]}, seasonal=1)
    ref = to_design_matrix(ds, ["a", "index", "orog"], "tas", lags={"a": [0, 2]}, seasonal=1)
    X, back = dask.compute(dm.X, dm.to_dataarray(dm.y).data)
    assert isinstance(X, cp.ndarray) and isinstance(back, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(X), ref.X.compute())
    np.testing.assert_array_equal(cp.asnumpy(back), ref.to_dataarray(ref.y).values)
