"""Climate models on ``array_api_strict`` blocks: the proof, without a GPU, that every block
computation uses the namespace of its block and keeps to its device.

``array_api_strict`` has no NumPy-only functions or methods, refuses ``np.asarray`` of an
array on "device1" and refuses to mix devices, so a block function that calls NumPy on a
block, or forgets to move a NumPy constant (weights, seasonal terms, coefficients) onto
the block's device, raises here.  The results are compared with the NumPy path (the Numba
kernel for the per-cell statistics).
"""

import array_api_strict as xps
import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
from namespace_checks import climate_grid

from dask_dgd.climate import ClimateRegressor, to_design_matrix
from dask_dgd.climate._blocks import block_features, design_block, mask_block, shift_block
from dask_dgd.climate._design import _unstack, shifted
from dask_dgd.climate._namespace import to_host
from dask_dgd.climate._pointwise import cell_stats
from dask_dgd.climate._pointwise import pointwise_block as _pointwise_block
from dask_dgd.climate._pointwise import pooled_block as _pooled_block
from dask_dgd.climate._pointwise import score_block as _score_block
from dask_dgd.climate._pointwise_glm import glm_stats
from dask_dgd.testing import STRICT_DEVICE, on_array_api_strict

DEVICE = xps.Device(STRICT_DEVICE)
STRICT = type(xps.asarray(0.0))


def strict(a):
    return xps.asarray(np.asarray(a), device=DEVICE)


def assert_strict(a, shape=None):
    assert isinstance(a, STRICT), type(a)
    assert a.device == DEVICE
    if shape is not None:
        assert tuple(a.shape) == tuple(shape)


def block_inputs(T=9, Y=3, X=4, seed=0, n_full=2, n_time=2):
    """One grid block: the target, the cell weights, full fields then time-only fields,
    with NaN in the target, in a feature, in a time field and zero/NaN weights."""
    rng = np.random.default_rng(seed)
    y = 280 + rng.normal(size=(T, Y, X))
    y[:, 0, 0] = np.nan  # a land cell
    y[4, 1, 2] = np.nan
    w = np.cos(np.deg2rad(np.linspace(-60, 60, Y)))[:, None] * np.ones((Y, X))
    w[2, 3] = 0.0  # zero weight
    w[1, 1] = np.nan
    full = [rng.normal(size=(T, Y, X)) * (10.0 ** k) for k in range(n_full)]
    if n_full:
        full[0][2, 1, 1] = np.nan
        full[-1][T - 1, 2, 0] = np.inf
    timef = [rng.normal(size=T) for _ in range(n_time)]
    if n_time:
        timef[-1][3] = np.nan  # a step masked for every cell
    order = [(0, i) for i in range(n_full)] + [(1, i) for i in range(n_time)]
    return order, y, w, full, timef


def on_device(y, w, full, timef):
    """The strict version of a block: data on device1; the weights and the first time
    field stay NumPy, as the driver makes them (they must be moved in the task)."""
    return strict(y), w, [strict(f) for f in full], [t if i == 0 else strict(t) for i, t in enumerate(timef)]


SHAPES = [dict(), dict(n_full=0), dict(n_time=0), dict(n_full=3, n_time=1, T=5)]
SHAPE_IDS = ["full+time", "time only", "full only", "short chunk"]


# --------------------------------------------------------------- block functions
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_cell_stats_on_strict_equal_the_numba_kernel(shape):
    order, y, w, full, timef = block_inputs(**shape)
    expected = cell_stats(order, y, w, *full, *timef)  # NumPy blocks: the Numba kernel
    ys, ws, fs, ts = on_device(y, w, full, timef)
    got = cell_stats(order, ys, ws, *fs, *ts)
    assert isinstance(got, np.ndarray) and got.shape == expected.shape  # back on the host
    p = len(order) + 1
    count = expected[..., -1]
    assert count.min() == 0 and np.any((count > 0) & (count < y.shape[0]))  # masked cells and steps
    np.testing.assert_array_equal(got[..., -1], count)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
    gram = got[..., : p * p].reshape(got.shape[:-1] + (p, p))
    np.testing.assert_array_equal(gram, np.swapaxes(gram, -1, -2))  # exactly symmetric, as the kernel's


@pytest.mark.parametrize("first", [True, False], ids=["first pass", "later pass"])
@pytest.mark.parametrize("family", ["poisson", "binomial"])
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_glm_stats_on_strict_equal_the_numba_kernel(shape, family, first):
    order, y, w, full, timef = block_inputs(**shape)
    rng = np.random.default_rng(1)
    y = np.where(np.isfinite(y), rng.poisson(1.5, size=y.shape) if family == "poisson"
                 else rng.random(y.shape) < 0.4, np.nan)
    y[2, 2, 2] = -1.0 if family == "poisson" else 1.5  # outside the range: counted
    p = len(order) + 1
    coef = rng.normal(0, 0.1, size=y.shape[1:] + (p,)) / np.r_[1.0, [10.0 ** k for k in range(len(full))],
                                                              np.ones(len(timef))]
    expected = glm_stats(order, family, first, coef, y, w, *full, *timef)  # the Numba kernel
    ys, ws, fs, ts = on_device(y, w, full, timef)
    got = glm_stats(order, family, first, coef, ys, ws, *fs, *ts)
    assert isinstance(got, np.ndarray) and got.shape == expected.shape == (1,) + y.shape[1:] + (p * p + p + 6,)
    assert expected[..., -2].sum() == 1 and expected[..., -4].min() == 0  # the bad value; masked cells
    assert (expected[..., -1] != 0).any() == (first and family == "poisson")  # 0/1 data: no constant
    assert (expected[..., -6] != 0).any() == (not first)  # the deviance: not on the start pass
    np.testing.assert_array_equal(got[..., -4], expected[..., -4])
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())


def test_block_functions_refuse_a_second_device():
    order, y, w, full, timef = block_inputs()
    other = xps.asarray(full[1], device=xps.Device("device2"))
    with pytest.raises(ValueError, match="device"):
        cell_stats(order, strict(y), w, strict(full[0]), other, *timef)


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_design_and_mask_blocks_on_strict_equal_numpy(shape):
    order, y, w, full, timef = block_inputs(**shape)
    ys, ws, fs, ts = on_device(y, w, full, timef)
    expected = design_block(order, y, w, *full, *timef)
    got = design_block(order, ys, ws, *fs, *ts)
    assert_strict(got, expected.shape)
    np.testing.assert_array_equal(to_host(got), expected)
    mask = mask_block(order, y, w, *full, *timef)
    got_mask = mask_block(order, ys, ws, *fs, *ts)
    assert_strict(got_mask, y.shape)
    np.testing.assert_array_equal(to_host(got_mask), mask)
    # the mask by hand: finite target and features, weight > 0, finite time fields
    ok = np.isfinite(y) & (np.nan_to_num(w) > 0)[None]
    for f in full:
        ok &= np.isfinite(f)
    for t in timef:
        ok &= np.isfinite(t)[:, None, None]
    np.testing.assert_array_equal(mask, ok)
    assert expected.shape == (ok.sum(), len(order) + 2)
    np.testing.assert_array_equal(expected[:, -2], y[ok])
    np.testing.assert_array_equal(expected[:, -1], np.broadcast_to(w, y.shape)[ok])
    features = block_features(order, y.shape, [*full, *timef])
    got_features = block_features(order, y.shape, [*fs, *ts])
    assert_strict(got_features, (y.size, len(order)))
    np.testing.assert_array_equal(to_host(got_features), features)
    np.testing.assert_array_equal(features[ok.reshape(-1)], expected[:, :-2])


@pytest.mark.parametrize("shift", [1, 3, 7, 11])
def test_shifted_blocks_on_strict_equal_numpy(shift):
    """Lags and lead: each output block built from the source blocks it needs (also when a
    shift spans several time chunks, or the whole block is before the series starts)."""
    rng = np.random.default_rng(1)
    a = rng.normal(size=(14, 3, 2))
    ok = np.ones(14, dtype=bool)
    ok[:shift] = False
    ok[9] = False  # a gap in the series
    x = da.from_array(a, chunks=(4, 2, 2))
    expected = np.full_like(a, np.nan)
    expected[shift:] = a[:-shift]
    expected[~ok] = np.nan
    np.testing.assert_array_equal(shifted(x, shift, ok).compute(scheduler="sync"), expected)
    got = shifted(on_array_api_strict(x), shift, ok)
    blocks = dask.compute(*got.to_delayed().ravel(), scheduler="sync")
    ref = dask.compute(*shifted(x, shift, ok).to_delayed().ravel(), scheduler="sync")
    for b, r in zip(blocks, ref):
        assert_strict(b, r.shape)
        np.testing.assert_array_equal(to_host(b), r)
    # one block directly: 2 rows of padding, then rows 1.. of two consecutive source blocks
    one = shift_block(2, 1, ok[:5], strict(a[:2]), strict(a[2:4]))
    assert_strict(one, (5, 3, 2))
    np.testing.assert_array_equal(to_host(one), shift_block(2, 1, ok[:5], a[:2], a[2:4]))


@pytest.mark.parametrize("family", ["gaussian", "poisson", "binomial"])
def test_prediction_blocks_on_strict_equal_numpy(family):
    order, y, w, full, timef = block_inputs()
    ys, ws, fs, ts = on_device(y, w, full, timef)
    rng = np.random.default_rng(2)
    coef = rng.normal(size=len(order)) * 0.01
    expected = _pooled_block(order, coef, 0.3, family, w, *full, *timef)
    got = _pooled_block(order, coef, 0.3, family, ws, *fs, *ts)
    assert_strict(got, y.shape)
    np.testing.assert_allclose(to_host(got), expected, rtol=1e-12, atol=0)
    table = rng.normal(size=y.shape[1:] + (len(order) + 1,))
    table[0, 0] = np.nan  # a cell without a model
    expected = _pointwise_block(order, "gaussian", table, w, *full, *timef)
    got = _pointwise_block(order, "gaussian", table, ws, *fs, *ts)
    assert_strict(got, y.shape)
    np.testing.assert_allclose(to_host(got), expected, rtol=1e-12, atol=0)
    X = block_features(order, y.shape, [*full, *timef]).reshape(y.shape + (len(order),))
    by_hand = table[..., 0] + np.einsum("tyxp,yxp->tyx", X, table[..., 1:])
    np.testing.assert_allclose(expected, by_hand, rtol=1e-12)
    assert np.all(np.isnan(expected[:, 0, 0])) and np.isnan(expected[3]).all()  # no model; a NaN time field


def test_unstack_and_score_blocks_on_strict_equal_numpy():
    order, y, w, full, timef = block_inputs()
    ys, ws, fs, ts = on_device(y, w, full, timef)
    mask = mask_block(order, y, w, *full, *timef)
    values = np.arange(mask.sum(), dtype=np.float64)
    expected = _unstack(mask, values)
    for strict_values in (strict(values), values):  # from a strict predict, or in memory (NumPy)
        got = _unstack(mask_block(order, ys, ws, *fs, *ts), strict_values)
        assert_strict(got, y.shape)
        np.testing.assert_array_equal(to_host(got), expected)
    pred = y + np.random.default_rng(3).normal(size=y.shape)
    pred[1] = np.nan
    expected = _score_block(y, pred, w)
    got = _score_block(ys, strict(pred), ws)
    assert isinstance(got, np.ndarray) and got.shape == (1, 1, 1, 5)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert expected[..., 4] == np.sum(np.isfinite(y) & np.isfinite(pred) & (np.nan_to_num(w) > 0))


# -------------------------------------------------------------------- end to end


def _chunked(ds):
    return ds.chunk({"time": 12, "lat": 2, "lon": 5})


def _on_strict(ds):
    return ds.copy(data={name: on_array_api_strict(v.data) for name, v in _chunked(ds).data_vars.items()})


def _blocks(client, *arrays):
    """The blocks of dask arrays, computed one by one (a strict array cannot be
    concatenated by dask's NumPy dispatch): a list of blocks per array."""
    delayed = [list(x.to_delayed(optimize_graph=False).ravel()) for x in arrays]
    flat = client.gather(client.compute([d for ds in delayed for d in ds]))
    out, i = [], 0
    for ds in delayed:
        out.append(flat[i:i + len(ds)])
        i += len(ds)
    return out if len(arrays) > 1 else out[0]


def _check_predictions(client, model, ref, sds, ds):
    pred = model.predict(sds)
    assert pred.dims == ("time", "lat", "lon") and pred.name == "tas"
    got, expected = _blocks(client, pred.data, ref.predict(_chunked(ds)).data)
    assert len(got) == len(expected) > 1
    for b, e in zip(got, expected):
        assert_strict(b, e.shape)
        np.testing.assert_allclose(to_host(b), e, rtol=1e-12, atol=0)
    assert model.evaluate(sds) == pytest.approx(ref.evaluate(_chunked(ds)), rel=1e-12)


POINTWISE = [
    dict(seasonal=1),
    dict(lead=2, lags={"a": [0, 1], "index": [0, 3]}, alpha=1.0),
]


@pytest.mark.parametrize("params", POINTWISE, ids=["seasonal", "lead+lags+ridge"])
def test_pointwise_on_strict_blocks_equals_numpy(params, client):
    ds = climate_grid()
    sds = _on_strict(ds)
    assert isinstance(sds["a"].data.blocks[0, 0, 0].compute(), STRICT)
    ref = ClimateRegressor(["a", "index"], "tas", model="pointwise", client=client, **params).fit(_chunked(ds))
    model = ClimateRegressor(["a", "index"], "tas", model="pointwise", client=client, **params).fit(sds)
    assert isinstance(model.coef_.values, np.ndarray)  # fitted attributes are NumPy
    np.testing.assert_allclose(model.coef_.values, ref.coef_.values, rtol=0, atol=1e-10)
    np.testing.assert_allclose(model.intercept_.values, ref.intercept_.values, rtol=1e-12, atol=1e-10)
    np.testing.assert_array_equal(model.n_samples_.values, ref.n_samples_.values)
    assert np.isnan(model.coef_.values[0, 0]).all() and np.isfinite(model.coef_.values[1:]).all()
    _check_predictions(client, model, ref, sds, ds)
    # fitted on strict blocks, predicts on NumPy
    xr.testing.assert_allclose(model.predict(_chunked(ds)).compute(), ref.predict(_chunked(ds)).compute())


@pytest.mark.parametrize("family", ["poisson", "binomial"])
def test_pointwise_glm_on_strict_blocks_equals_numpy(family, client):
    ds = climate_grid(T=36)
    rng = np.random.default_rng(5)
    mean = np.exp(0.3 * ds["a"].fillna(0.0) + 0.2 * ds["index"])
    ds["k"] = xr.where(np.isfinite(ds["tas"]), rng.poisson(mean.values) if family == "poisson"
                       else rng.random(mean.shape) < mean / (1 + mean), np.nan).astype(np.float64)
    sds = _on_strict(ds)
    params = dict(model="pointwise", family=family, lags={"a": [0, 1]}, seasonal=1, client=client)
    ref = ClimateRegressor(["a", "index"], "k", **params).fit(_chunked(ds))
    model = ClimateRegressor(["a", "index"], "k", **params).fit(sds)
    assert model.n_iter_ == ref.n_iter_ >= 3
    np.testing.assert_allclose(model.coef_.values, ref.coef_.values, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(model.intercept_.values, ref.intercept_.values, rtol=1e-9, atol=1e-10)
    pred = model.predict(sds)
    (got,), (expected,) = _blocks(client, pred.data[:12, :2, :5]), _blocks(client, ref.predict(_chunked(ds)).data[:12, :2, :5])
    assert_strict(got, expected.shape)
    np.testing.assert_allclose(to_host(got), expected, rtol=1e-9, atol=1e-12)


POOLED = [
    ("gaussian", dict(lags={"a": [0, 1]}, seasonal=1)),
    ("poisson", dict()),
    ("binomial", dict(lead=1)),
]


@pytest.mark.parametrize("family, params", POOLED, ids=[f for f, _ in POOLED])
def test_pooled_on_strict_blocks_equals_numpy(family, params, client):
    ds = climate_grid()
    if family == "poisson":
        ds["tas"] = (ds["tas"] - 278).clip(0).round()
    elif family == "binomial":
        ds["tas"] = (ds["tas"] > 280).astype(float).where(ds["tas"].notnull())
    sds = _on_strict(ds)
    kw = dict(model="pooled", family=family, solver="newton", tol=1e-12, max_iter=50, client=client, **params)
    ref = ClimateRegressor(["a", "index"], "tas", **kw).fit(_chunked(ds))
    model = ClimateRegressor(["a", "index"], "tas", **kw).fit(sds)
    assert np.abs(ref.coef_.values).max() > 0.05  # a model was learnt
    np.testing.assert_allclose(model.coef_.values, ref.coef_.values, rtol=0, atol=1e-10)
    assert model.intercept_ == pytest.approx(ref.intercept_, abs=1e-10)
    _check_predictions(client, model, ref, sds, ds)


def test_design_matrix_on_strict_blocks(client):
    ds = climate_grid()
    sds = _on_strict(ds)
    kw = dict(lags={"a": [0, 2]}, seasonal=1)
    dm = to_design_matrix(sds, ["a", "index"], "tas", **kw)
    ref = to_design_matrix(_chunked(ds), ["a", "index"], "tas", **kw)
    values = np.concatenate(_blocks(client, ref.y))  # in memory (NumPy): goes onto the strict blocks' device
    pairs = [(dm.X, ref.X), (dm.mask().data, ref.mask().data), (dm.to_dataarray(dm.y).data, ref.to_dataarray(ref.y).data),
             (dm.to_dataarray(values).data, ref.to_dataarray(ref.y).data)]
    computed = _blocks(client, *[a for pair in pairs for a in pair])
    for got, expected in zip(computed[::2], computed[1::2]):
        assert len(got) == len(expected) > 1
        for b, e in zip(got, expected):
            assert_strict(b, e.shape)
            np.testing.assert_array_equal(to_host(b), e)


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_merged_statistics_of_time_chunks_equal_those_of_the_whole_block(shape):
    """The statistics of the time chunks of a block, merged (any grouping, a chunk where
    some cells have no unmasked step among them), equal the whole block's: counts and
    weights exactly, means and centred cross-products to rounding."""
    from dask_dgd.climate._pointwise import merge_cell_stats

    order, y, w, full, timef = block_inputs(**{**shape, "T": 12})
    y[:3, 2, 1] = np.nan  # cell (2, 1): nothing in the first chunk
    p = len(order) + 1
    whole = cell_stats(order, y, w, *full, *timef)
    cuts = [(0, 3), (3, 4), (4, 9), (9, 12)]
    parts = [cell_stats(order, y[a:b], w, *[f[a:b] for f in full], *[t[a:b] for t in timef]) for a, b in cuts]
    assert parts[0][0, 2, 1, -1] == 0 and parts[0][0, 2, 1, -2] == 0  # an empty cell of a chunk
    flat = merge_cell_stats(np.concatenate(parts), p, keepdims=True)
    tree = merge_cell_stats(np.concatenate([merge_cell_stats(np.concatenate(parts[:2]), p, keepdims=True),
                                            merge_cell_stats(np.concatenate(parts[2:]), p, keepdims=True)]),
                            p, keepdims=True)
    for got in (flat, tree):
        assert got.shape == whole.shape
        np.testing.assert_array_equal(got[..., -1], whole[..., -1])
        np.testing.assert_allclose(got[..., -2], whole[..., -2], rtol=1e-15)
        np.testing.assert_allclose(got, whole, rtol=1e-12, atol=1e-12 * np.abs(whole).max())
    np.testing.assert_array_equal(merge_cell_stats(whole, p, keepdims=True), whole)  # one block: as it is
