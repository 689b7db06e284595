"""Separated pointwise GLM cells, overflow-free predictions and binomial trials.

References: statsmodels' GLM(Binomial) with the (successes, failures) two-column form
per cell and pooled (``var_weights`` the area weights); scikit-learn's
LogisticRegression(C=1/alpha) per cell for the penalised fits; the separated cells
are made so by construction (the target 0 below a value of the feature and 1 above).
"""

import warnings

import array_api_strict as xps
import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import xarray as xr
from sklearn.linear_model import LogisticRegression

from dask_dgd import ConvergenceWarning, InputError, ParameterError
from dask_dgd.climate import ClimateRegressor
from dask_dgd.climate._pointwise import MAX_LOG, _inverse_link
from dask_dgd.climate._pointwise_glm import SCREEN_ETA, edge_block
from dask_dgd.linear_model._separation import mle_missing

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")  # no overflow anywhere (numpy's warnings)

DIMS = ("time", "lat", "lon")
LAT = [51.25, 52.5, 53.75]
LON = [0.0, 1.25, 2.5, 3.75]


def _separated(T=60, seed=0, chunks=None):
    """0/1 exceedances of a feature ``x`` on a 3 x 4 grid: cell (0, 0) completely
    separated (1 exactly where ``x > 0.1``), cell (0, 1) quasi-completely (1 where ``x >
    0``, five ties at ``x = 0`` with both outcomes), cell (2, 3) constant (never 1); the
    others ordinary logistic draws."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(T, 3, 4))
    y = (rng.random(x.shape) < 1 / (1 + np.exp(-(0.5 + x)))).astype(float)
    y[:, 0, 0] = (x[:, 0, 0] > 0.1).astype(float)
    x[:5, 0, 1] = 0.0
    y[:, 0, 1] = (x[:, 0, 1] > 0).astype(float)
    y[:5, 0, 1] = [0, 1, 0, 1, 1]
    y[:, 2, 3] = 0.0
    ds = xr.Dataset({"x": (DIMS, x), "y": (DIMS, y)},
                    coords={"time": np.arange(T), "lat": ("lat", LAT, {"units": "degrees_north"}), "lon": LON})
    return ds if chunks is None else ds.chunk(chunks)


def _fit(ds, **kw):
    return ClimateRegressor("x", "y", model="pointwise", family="binomial", sample_dims=DIMS, time_dim="time",
                            **kw).fit(ds)


@pytest.mark.parametrize("chunks", [None, {"time": 25, "lat": 2, "lon": 3}], ids=["in-process", "dask"])
def test_separated_cells_are_warned_listed_and_predict_without_overflow(chunks):
    ds = _separated(chunks=chunks)
    with pytest.warns(ConvergenceWarning, match=r"2 grid cell\(s\) of 'y' are separated .*"
                      r"\(lat=51\.25, lon=0\.0\), \(lat=51\.25, lon=1\.25\).*separated_.*alpha > 0"):
        model = _fit(ds)
    sep = model.separated_
    assert sep.dims == ("lat", "lon") and sep.dtype == bool
    np.testing.assert_array_equal(sep["lat"].values, LAT)
    expected = np.zeros((3, 4), dtype=bool)
    expected[0, 0] = expected[0, 1] = True
    np.testing.assert_array_equal(sep.values, expected)
    # the constant cell keeps its documented infinite intercept and is not "separated"
    assert model.intercept_.values[2, 3] == -np.inf and not sep.values[2, 3]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        pred = model.predict(ds).values
    assert np.isfinite(pred).all() and pred.min() >= 0.0 and pred.max() <= 1.0
    y, x = ds["y"].values[:, 0, 0], ds["x"].values[:, 0, 0]
    np.testing.assert_allclose(pred[:, 0, 0], y, atol=1e-6)  # the separated cell predicts its 0s and 1s
    assert (x[pred[:, 0, 0] > 0.5] > 0.1).all()


def test_penalty_gives_separated_cells_a_finite_fit_equal_to_sklearn():
    ds = _separated()
    alpha = 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        model = _fit(ds, alpha=alpha, tol=1e-10)
    assert not model.separated_.values.any()
    w = np.cos(np.deg2rad(LAT))
    for i in range(3):
        for j in range(4):
            y = ds["y"].values[:, i, j]
            if np.all(y == y[0]):
                continue
            ref = LogisticRegression(C=1 / alpha, tol=1e-12, max_iter=10_000).fit(
                ds["x"].values[:, i, j, None], y, sample_weight=np.full(y.shape, w[i]))
            got = [model.intercept_.values[i, j], model.coef_.values[i, j, 0]]
            assert np.isfinite(got).all()
            np.testing.assert_allclose(got, [ref.intercept_[0], ref.coef_[0, 0]], rtol=1e-5, atol=1e-7)


def test_ordinary_cells_are_never_flagged():
    """500 ordinary cells per family, some with strong effects, fitted with alpha=0:
    no warning, none listed."""
    rng = np.random.default_rng(3)
    T, Y, X = 80, 20, 25
    x = rng.normal(size=(T, Y, X))
    b1 = rng.uniform(0.2, 2.0, size=(Y, X))
    eta = rng.normal(0, 0.5, size=(Y, X)) + b1 * x
    y = (rng.random(x.shape) < 1 / (1 + np.exp(-eta))).astype(float)
    counts = rng.poisson(np.exp(0.5 + 0.6 * x)).astype(float)
    # keep every cell overlapping (both outcomes on both sides of the median of x)
    med = np.median(x, axis=0)
    lo, hi = np.argmin(np.where(x < med, x, np.inf), axis=0), np.argmax(np.where(x > med, x, -np.inf), axis=0)
    ii, jj = np.meshgrid(range(Y), range(X), indexing="ij")
    y[lo, ii, jj], y[hi, ii, jj] = 1.0, 0.0
    counts[lo, ii, jj] = 1.0
    ds = xr.Dataset({"x": (DIMS, x), "y": (DIMS, y), "n": (DIMS, counts)},
                    coords={"time": np.arange(T), "lat": np.linspace(-60, 60, Y), "lon": np.arange(X) * 10.0})
    for family, target in (("binomial", "y"), ("poisson", "n")):
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConvergenceWarning)
            model = ClimateRegressor("x", target, model="pointwise", family=family).fit(ds)
        assert model.separated_.shape == (Y, X) and not model.separated_.values.any()
        assert np.isfinite(model.coef_.values).all()


def test_far_fitted_values_of_an_overlapping_cell_pass_the_screen_but_are_not_separated():
    """A leverage point far out (fitted probability 1 - 1e-13) sends the cell through
    the screen; the exact test clears it."""
    rng = np.random.default_rng(5)
    T = 200
    x = rng.normal(size=(T, 1, 1))
    y = (rng.random(x.shape) < 1 / (1 + np.exp(-x))).astype(float)
    x[0, 0, 0], y[0, 0, 0] = 40.0, 1.0
    ds = xr.Dataset({"x": (DIMS, x), "y": (DIMS, y)},
                    coords={"time": np.arange(T), "lat": [10.0], "lon": [0.0]})
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        model = _fit(ds)
    coef = np.concatenate([model.intercept_.values[..., None], model.coef_.values], axis=-1)
    screen = edge_block([(0, 0)], "binomial", coef, y, np.ones((1, 1)), x)[0]
    assert screen[0, 0] > SCREEN_ETA  # the screen passed it on
    assert not model.separated_.values.any()


def test_poisson_counts_zero_on_one_side_are_separated():
    """Counts always 0 in one phase of an indicator (e.g. of El Nino) have no finite
    fit: the indicator's coefficient goes to -inf."""
    rng = np.random.default_rng(2)
    T = 60
    phase = (rng.random(T) < 0.4).astype(float)
    x = np.broadcast_to(phase[:, None, None], (T, 1, 2)).copy()
    n = rng.poisson(np.exp(0.5 + 0.5 * x)).astype(float)
    n[:, 0, 0] = np.where(phase > 0, 0.0, n[:, 0, 0])
    n[0, 0, 0], phase[0] = 2.0, 0.0  # some counts where the indicator is 0
    x[0] = 0.0
    ds = xr.Dataset({"x": (DIMS, x), "n": (DIMS, n)},
                    coords={"time": np.arange(T), "lat": [-5.0], "lon": [10.0, 20.0]})
    with pytest.warns(ConvergenceWarning, match=r"1 grid cell\(s\) of 'n' are separated \(counts 0 on one side.*"
                      r"\(lat=-5\.0, lon=10\.0\)"):
        model = ClimateRegressor("x", "n", model="pointwise", family="poisson").fit(ds)
    np.testing.assert_array_equal(model.separated_.values, [[True, False]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        pred = model.predict(ds).values
    assert np.isfinite(pred).all() and pred.min() >= 0
    assert pred[x[:, 0, 0] > 0, 0, 0].max() < 1e-3


@pytest.mark.parametrize("X, y, family, expected", [
    ([[1, -1], [1, 1]], [0, 1], "binomial", True),
    ([[1, -1], [1, 0], [1, 0], [1, 1]], [0, 0, 1, 1], "binomial", True),  # quasi-complete
    ([[1, -1], [1, 0], [1, 1], [1, 2]], [0, 1, 0, 1], "binomial", False),
    ([[1, -1], [1, 1]], [0.5, 0.5], "binomial", False),
    ([[1, 0], [1, 0], [1, 1], [1, 1]], [2, 1, 0, 0], "poisson", True),  # zero wherever the indicator is 1
    ([[1, -1], [1, 1], [1, 2]], [0, 3, 1], "poisson", False),  # counts on either side of x = 0
    ([[1, -1], [1, 1], [1, 2]], [2, 0, 1], "poisson", False),
])
def test_mle_missing_on_small_designs(X, y, family, expected):
    assert mle_missing(np.asarray(X, float), np.asarray(y, float), family) is expected


def test_inverse_links_never_overflow_in_the_blocks_namespace():
    eta = np.array([-1e4, -800.0, -30.0, 0.0, 30.0, 800.0, 1e4, np.inf, -np.inf, np.nan])
    strict = xps.asarray(eta)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        p = np.asarray(_inverse_link(xps, "binomial", strict))
        m = np.asarray(_inverse_link(xps, "poisson", strict))
        p_np = _inverse_link(np, "binomial", eta)
    np.testing.assert_array_equal(p, p_np)
    np.testing.assert_allclose(p[:-1], [0, 0, 1 / (1 + np.exp(30)), 0.5, 1 / (1 + np.exp(-30)), 1, 1, 1, 0], rtol=1e-15)
    assert np.isnan(p[-1]) and np.isnan(m[-1])
    assert np.isfinite(m[:-1]).all()  # eta beyond MAX_LOG (+inf too) gives exp(MAX_LOG), about 1.8e308
    assert m[5] == m[6] == m[7] == np.exp(MAX_LOG) and m[0] == m[8] == 0.0
    np.testing.assert_allclose(m[2:5], np.exp([-30.0, 0.0, 30.0]), rtol=1e-15)


# ------------------------------------------------------------------ trials
def _hot_days(calendar, T=48, seed=1, chunks=None):
    """Monthly hot-day counts out of the days of each month (``days`` on ``(time,)``)."""
    rng = np.random.default_rng(seed)
    time = xr.date_range("2000-01-01", periods=T, freq="MS", calendar=calendar, use_cftime=True)
    days = xr.DataArray(time, dims="time").dt.days_in_month.values.astype(float)
    x = rng.normal(size=(T, 3, 4))
    p = 1 / (1 + np.exp(-(-1.0 + rng.uniform(0.3, 1.0, (3, 4)) * x)))
    hot = rng.binomial(days[:, None, None].astype(int), p).astype(float)
    hot[5, 1, 2] = np.nan
    ds = xr.Dataset({"x": (DIMS, x), "hot": (DIMS, hot), "days": ("time", days)},
                    coords={"time": time, "lat": ("lat", [-30.0, 0.0, 45.0], {"units": "degrees_north"}),
                            "lon": [0.0, 1.0, 2.0, 3.0]})
    return ds if chunks is None else ds.chunk(chunks)


def _trials_model(**kw):
    return ClimateRegressor("x", "hot", family="binomial", trials="days", **kw)


@pytest.mark.parametrize("calendar", ["360_day", "noleap"])
@pytest.mark.parametrize("chunks", [None, {"time": 20, "lat": 2}], ids=["in-process", "dask"])
def test_pointwise_trials_equal_statsmodels_per_cell(calendar, chunks):
    ds = _hot_days(calendar, chunks=chunks)
    model = _trials_model(model="pointwise", tol=1e-8).fit(ds)
    days = ds["days"].values
    assert (len(set(days)) == 1) == (calendar == "360_day")
    for i in range(3):
        for j in range(4):
            k, x = ds["hot"].values[:, i, j], ds["x"].values[:, i, j]
            ok = np.isfinite(k)
            ref = sm.GLM(np.c_[k[ok], days[ok] - k[ok]], sm.add_constant(x[ok]),
                         family=sm.families.Binomial()).fit(tol=1e-13)
            got = [model.intercept_.values[i, j], model.coef_.values[i, j, 0]]
            np.testing.assert_allclose(got, ref.params, rtol=1e-8)
    assert int(model.n_samples_.values[1, 2]) == ds.sizes["time"] - 1
    pred = model.predict(ds)
    assert float(pred.min()) > 0 and float(pred.max()) < 1  # probabilities, not counts


def test_pooled_trials_equal_statsmodels():
    ds = _hot_days("noleap")
    model = _trials_model(model="pooled", solver="newton", tol=1e-10, max_iter=200).fit(ds)
    k, x = ds["hot"].values.ravel(), ds["x"].values.ravel()
    days = np.broadcast_to(ds["days"].values[:, None, None], ds["hot"].shape).ravel()
    w = np.broadcast_to(np.cos(np.deg2rad(ds["lat"].values))[None, :, None], ds["hot"].shape).ravel()
    ok = np.isfinite(k)
    ref = sm.GLM(np.c_[k[ok], days[ok] - k[ok]], sm.add_constant(x[ok]), family=sm.families.Binomial(),
                 var_weights=w[ok]).fit(tol=1e-13)
    np.testing.assert_allclose([model.intercept_, float(model.coef_.values[0])], ref.params, rtol=1e-6)


def test_zero_and_nan_trials_are_masked_like_a_nan_target():
    ds = _hot_days("noleap")
    days = np.broadcast_to(ds["days"].values[:, None, None], ds["hot"].shape).copy()
    days[3, 0, 0], days[8, 2, 1] = 0.0, np.nan
    hot = ds["hot"].values.copy()
    hot[3, 0, 0] = 0.0
    masked = ds.assign(days=(DIMS, days), hot=(DIMS, hot))
    model = _trials_model(model="pointwise", tol=1e-8).fit(masked)
    hot_nan = hot.copy()
    hot_nan[3, 0, 0] = hot_nan[8, 2, 1] = np.nan
    ref = _trials_model(model="pointwise", tol=1e-8).fit(
        ds.assign(hot=(DIMS, hot_nan), days=(DIMS, np.nan_to_num(days, nan=30.0))))
    np.testing.assert_allclose(model.coef_.values, ref.coef_.values, rtol=1e-12)
    assert int(model.n_samples_.values[0, 0]) == ds.sizes["time"] - 1


def test_evaluate_with_trials_weights_the_proportions_by_the_trials():
    ds = _hot_days("noleap")
    model = _trials_model(model="pointwise", tol=1e-8).fit(ds)
    got = model.evaluate(ds)
    prop = ds["hot"] / ds["days"]
    w = (ds["days"] * np.cos(np.deg2rad(ds["lat"]))).broadcast_like(prop).where(np.isfinite(prop))
    e = prop - model.predict(ds)
    mean = float((w * prop).sum() / w.sum())
    r2 = 1 - float((w * e**2).sum()) / float((w * (prop - mean) ** 2).sum())
    assert got["n"] == int(np.isfinite(prop).sum())
    np.testing.assert_allclose(got["r2"], r2, rtol=1e-10)
    np.testing.assert_allclose(got["rmse"], float(np.sqrt((w * e**2).sum() / w.sum())), rtol=1e-10)
    assert model.score(ds) == got["r2"]


@pytest.mark.parametrize("family", ["gaussian", "poisson"])
def test_trials_need_the_binomial_family(family):
    with pytest.raises(ParameterError, match=r"trials='days' counts the trials of a binomial target; "
                       rf"family='{family}' has none: use family='binomial'"):
        _trials_model(model="pointwise").set_params(family=family).fit(_hot_days("noleap"))


@pytest.mark.parametrize("model", ["pointwise", "pooled"])
@pytest.mark.parametrize("where, hot, days", [
    ((2, 1, 3), 5.0, -1.0),    # negative trials
    ((2, 1, 3), -1.0, 30.0),   # negative successes
    ((2, 1, 3), 31.0, 30.0),   # more successes than trials
])
def test_bad_counts_are_refused_naming_the_cell(model, where, hot, days):
    ds = _hot_days("360_day")
    h = ds["hot"].values.copy()
    d = np.broadcast_to(ds["days"].values[:, None, None], h.shape).copy()
    h[where], d[where] = hot, days
    bad = ds.assign(hot=(DIMS, h), days=(DIMS, d))
    with pytest.raises(InputError, match=r"'hot' counts successes out of trials='days': they need 0 <= successes "
                       r"<= trials; 1 value\(s\) do not, the first at time=2000-03-01 00:00:00, lat=0\.0, lon=3\.0 "
                       rf"\(successes={hot:g}, trials={days:g}\); fix the data"):
        _trials_model(model=model).fit(bad)


def test_missing_trials_variable_is_refused():
    with pytest.raises(InputError, match=r"the Dataset has no variable 'ndays'"):
        ClimateRegressor("x", "hot", family="binomial", trials="ndays", model="pointwise").fit(_hot_days("noleap"))


@pytest.mark.parametrize("family", ["binomial", "poisson"])
def test_edge_screen_on_strict_blocks_equals_numpy(family):
    """The screen's Array API path (CuPy, array_api_strict) gives the Numba path's values."""
    from dask_dgd.testing import on_array_api_strict

    rng = np.random.default_rng(4)
    y = (rng.random((30, 3, 4)) < 0.5).astype(float)
    x, z = rng.normal(size=(30, 3, 4)), rng.normal(size=30)
    y[0, 0, 0], x[1, 1, 1] = np.nan, np.nan
    w = np.array([[0.98] * 4, [0.64] * 4, [0.0] * 4])  # the last row has weight 0: no observed step
    coef = rng.normal(0, 5, size=(3, 4, 3))
    order = [(0, 0), (1, 0)]
    expected = edge_block(order, family, coef, y, w, x, z)
    got = edge_block(order, family, coef, on_array_api_strict(y), on_array_api_strict(w), on_array_api_strict(x),
                     on_array_api_strict(z))
    assert expected.shape == (1, 3, 4) and np.all(expected[0, 2] == -np.inf)
    np.testing.assert_allclose(got, expected, rtol=1e-14)
    eta = coef[..., 0] + coef[..., 1] * x + coef[..., 2] * z[:, None, None]
    far = np.abs(eta) if family == "binomial" else -eta
    np.testing.assert_allclose(expected[0, :2], np.nanmax(np.where(np.isfinite(y), far, np.nan), axis=0)[:2])


def test_pooled_trials_evaluate_and_features_none_leave_the_trials_out():
    ds = _hot_days("noleap")
    model = ClimateRegressor(None, "hot", model="pooled", family="binomial", trials="days", solver="newton", tol=1e-10,
                             max_iter=200).fit(ds)
    assert model.feature_names_ == ["x"]  # "days" is the trials, not a feature
    got = model.evaluate(ds)
    prop = ds["hot"] / ds["days"]
    w = (ds["days"] * np.cos(np.deg2rad(ds["lat"]))).broadcast_like(prop).where(np.isfinite(prop))
    e = prop - model.predict(ds)
    np.testing.assert_allclose(got["rmse"], float(np.sqrt((w * e**2).sum() / w.sum())), rtol=1e-10)


def _trials_grid():
    rng = np.random.default_rng(0)
    T, Y, X = 24, 2, 2
    n = np.full((T, Y, X), 30.0)
    k = rng.binomial(30, 0.3, size=(T, Y, X)).astype(float)
    x = rng.normal(size=(T, Y, X))
    return xr.Dataset(
        {"k": (("time", "lat", "lon"), k), "n": (("time", "lat", "lon"), n), "x": (("time", "lat", "lon"), x)},
        coords={"time": pd.date_range("2000", periods=T, freq="MS"),
                "lat": ("lat", [0.0, 10.0], {"units": "degrees_north"}), "lon": [0.0, 1.0]},
    ).chunk({"time": 12})


def _on_strict(ds):
    from dask_dgd.testing import on_array_api_strict

    return ds.copy(data={v: on_array_api_strict(a.data) for v, a in ds.data_vars.items()})


def test_trials_on_array_api_strict_blocks_fit_and_check_as_on_numpy():
    """The trials check works in the blocks' namespace (a CuPy-backed Dataset too): the fit
    equals the NumPy one, and bad counts are the same InputError naming the cell."""
    ds = _trials_grid()
    est = dict(model="pointwise", family="binomial", trials="n")
    ref = ClimateRegressor("x", "k", **est).fit(ds)
    got = ClimateRegressor("x", "k", **est).fit(_on_strict(ds))
    np.testing.assert_allclose(got.coef_.values, ref.coef_.values, rtol=1e-10)
    bad = ds.assign(k=ds["k"].where(ds["time"] != ds["time"][3], 99.0))
    for data in (bad, _on_strict(bad)):
        with pytest.raises(InputError, match=r"the first at time=2000-04-01.*successes=99, trials=30"):
            ClimateRegressor("x", "k", **est).fit(data)


def test_the_exact_test_runs_only_on_cells_whose_fit_kept_moving(monkeypatch):
    """Rare-event cells (fitted probabilities far below 1e-3 at one end, a finite
    estimate) pass the |eta| screen but converged with a small last step: no linear
    programme runs for them; the separated cells beside them are still found."""
    import dask_dgd.climate._pointwise_glm as G

    rng = np.random.default_rng(0)
    T, Y, X = 240, 6, 8
    years = np.arange(T) / 10.0
    eta = -12 + 0.6 * years[:, None, None] + rng.normal(0, 0.3, size=(1, Y, X))
    y = (rng.random((T, Y, X)) < 1 / (1 + np.exp(-eta))).astype(float)
    y[:, 0, :2] = (years >= 12.0)[:, None]  # two completely separated cells
    ds = xr.Dataset({"y": (("time", "lat", "lon"), y), "t": (("time",), years)},
                    coords={"time": pd.date_range("1800-01-01", periods=T, freq="YS"),
                            "lat": ("lat", np.linspace(30, 60, Y), {"units": "degrees_north"}),
                            "lon": np.arange(X) * 1.0})
    tested = []
    exact = G.mle_missing
    monkeypatch.setattr(G, "mle_missing", lambda *a: tested.append(1) or exact(*a))
    with pytest.warns(ConvergenceWarning, match=r"2 grid cell\(s\) of 'y' are separated"):
        model = ClimateRegressor(["t"], "y", model="pointwise", family="binomial").fit(ds)
    assert model.separated_.values.sum() == 2 and model.separated_.values[0, :2].all()
    assert len(tested) == 2  # the 46 rare-event cells were spared the exact test


@pytest.mark.parametrize("tol", [1e-4, 1e-2])
def test_separated_cells_with_large_valued_features_are_found_at_any_tol(tol):
    """A separated cell's last Newton step is small in coefficient units when its
    feature's values are large (1e4: a step of 1 in eta is 1e-4 in the slope), so the
    screen measures the step in units of the linear predictor."""
    rng = np.random.default_rng(1)
    T = 60
    x = rng.choice([-1, 1], size=(T, 2, 2)) * rng.uniform(1e4, 3e4, size=(T, 2, 2))
    ds = xr.Dataset({"x": (DIMS, x), "y": (DIMS, (x > 0).astype(float))},
                    coords={"time": np.arange(T), "lat": ("lat", [10.0, 20.0], {"units": "degrees_north"}),
                            "lon": [0.0, 1.0]})
    with pytest.warns(ConvergenceWarning, match=r"4 grid cell\(s\) of 'y' are separated"):
        model = _fit(ds, tol=tol)
    assert model.separated_.values.all()
