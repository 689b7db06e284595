"""Pointwise Poisson and binomial models: one GLM per grid cell by batched Newton passes.

References: statsmodels' GLM (IRLS) fitted cell by cell, scikit-learn's
PoissonRegressor and LogisticRegression for the penalised objective.
"""

import warnings

import dask
import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import xarray as xr
from dask.callbacks import Callback
from sklearn.linear_model import LogisticRegression, PoissonRegressor

import dask_dgd
from dask_dgd import ConvergenceWarning, InputError, ParameterError
from dask_dgd.climate import ClimateRegressor
from dask_dgd.climate._pointwise_glm import ACTIVE, CONVERGED, glm_stats, newton_update
from dask_dgd.optim._linesearch import INCREASE_SLACK, MAX_HALVINGS

DIMS = ("time", "lat", "lon")


def _grid(T=96, Y=4, X=6, seed=0, chunks=None):
    """Counts and 0/1 exceedances driven by a grid field ``a`` and a time series
    ``index``, per-cell coefficients; cell (0, 0) never has an event, cell (0, 1)
    always exceeds, cell (1, 1) is land (NaN) and a few values are missing."""
    rng = np.random.default_rng(seed)
    time = xr.date_range("2000-01-01", periods=T, freq="MS", calendar="noleap", use_cftime=True)
    a = rng.normal(size=(T, Y, X))
    index = rng.normal(size=T)
    b0 = rng.normal(0.3, 0.3, (Y, X))
    b1 = rng.normal(0.5, 0.2, (Y, X))
    eta = b0 + b1 * a + 0.3 * index[:, None, None]
    counts = rng.poisson(np.exp(eta)).astype(float)
    exceed = (rng.random((T, Y, X)) < 1.0 / (1.0 + np.exp(-(eta - 0.3)))).astype(float)
    counts[:, 0, 0] = 0.0
    exceed[:, 0, 0] = 0.0
    exceed[:, 0, 1] = 1.0
    for v in (counts, exceed):
        v[:, 1, 1] = np.nan
        v[7, -2, -3] = np.nan
    a[11, -1, -2] = np.nan
    ds = xr.Dataset(
        {"a": (DIMS, a), "index": (("time",), index), "n": (DIMS, counts), "e": (DIMS, exceed)},
        coords={"time": time, "lat": ("lat", np.linspace(-60, 60, Y), {"units": "degrees_north"}),
                "lon": np.arange(X) * 20.0},
    )
    return ds.chunk(chunks or {"time": 40, "lat": 2, "lon": 3})


FAMILIES = {"poisson": ("n", sm.families.Poisson()), "binomial": ("e", sm.families.Binomial())}


def _statsmodels(ds, target, family, design):
    """statsmodels GLM per cell (None for the edge and land cells)."""
    Y, X = ds.sizes["lat"], ds.sizes["lon"]
    out = np.full((Y, X, design(ds, 0, 0).shape[1]), np.nan)
    y = ds[target].values
    for i in range(Y):
        for j in range(X):
            A = design(ds, i, j)
            ok = np.isfinite(y[:, i, j]) & np.all(np.isfinite(A), axis=1)
            if not ok.any() or np.nanmin(y[:, i, j]) == np.nanmax(y[:, i, j]):
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out[i, j] = sm.GLM(y[ok, i, j], A[ok], family=family).fit(tol=1e-13, maxiter=200).params
    return out


def _plain(ds, i, j):
    return sm.add_constant(np.column_stack([ds["a"].values[:, i, j], ds["index"].values]), has_constant="add")


def _table(model):
    return np.concatenate([model.intercept_.values[..., None], model.coef_.values], axis=-1)


@pytest.mark.parametrize("family", ["poisson", "binomial"])
def test_pointwise_glm_equals_statsmodels_per_cell(family, client):
    ds = _grid()
    target, sm_family = FAMILIES[family]
    model = ClimateRegressor(["a", "index"], target, model="pointwise", family=family, client=client).fit(ds)
    expected = _statsmodels(ds, target, sm_family, _plain)
    got = _table(model)
    cells = np.isfinite(expected[..., 0])
    assert cells.sum() >= 20
    np.testing.assert_allclose(got[cells], expected[cells], rtol=1e-6, atol=1e-8)
    assert 3 <= model.n_iter_ <= 8
    assert model.coef_.dims == ("lat", "lon", "feature") and list(model.coef_.feature.values) == ["a", "index"]
    np.testing.assert_array_equal(model.n_samples_.values[1, 1], 0)
    assert np.isnan(got[1, 1]).all()  # land
    assert model.n_samples_.values[2, 3] == ds.sizes["time"] - 1 == model.n_samples_.values[3, 4]


def test_pointwise_glm_with_lags_and_seasonal_terms_equals_statsmodels():
    ds = _grid(T=120)
    model = ClimateRegressor(["a", "index"], "n", model="pointwise", family="poisson",
                             lags={"a": [0, 2]}, seasonal=1).fit(ds)
    assert model.feature_names_ == ["a", "a_lag2", "index", "sin1", "cos1"]
    frac = (ds.time.dt.dayofyear.values - 1) / 365.0

    def design(ds, i, j):
        a = ds["a"].values[:, i, j]
        lag = np.r_[np.nan, np.nan, a[:-2]]
        cols = [a, lag, ds["index"].values, np.sin(2 * np.pi * frac), np.cos(2 * np.pi * frac)]
        return sm.add_constant(np.column_stack(cols), has_constant="add")

    expected = _statsmodels(ds, "n", sm.families.Poisson(), design)
    cells = np.isfinite(expected[..., 0])
    np.testing.assert_allclose(_table(model)[cells], expected[cells], rtol=1e-6, atol=1e-8)


def test_pointwise_glm_predicts_the_mean_and_the_edges_exactly(tmp_path):
    ds = _grid()
    pois = ClimateRegressor(["a", "index"], "n", model="pointwise", family="poisson").fit(ds)
    binom = ClimateRegressor(["a", "index"], "e", model="pointwise", family="binomial").fit(ds)
    for model in (pois, binom):
        assert model.intercept_.values[0, 0] == -np.inf and np.all(model.coef_.values[0, 0] == 0.0)
    assert binom.intercept_.values[0, 1] == np.inf and np.all(binom.coef_.values[0, 1] == 0.0)
    assert np.isfinite(pois.intercept_.values[0, 1])
    mu, p = pois.predict(ds).compute(), binom.predict(ds).compute()
    eta = pois.intercept_ + (pois.coef_.sel(feature="a") * ds["a"] + pois.coef_.sel(feature="index") * ds["index"])
    xr.testing.assert_allclose(mu.transpose(*DIMS), np.exp(eta).transpose(*DIMS).compute())
    assert np.all(mu.values[:, 0, 0] == 0.0) and np.all(p.values[:, 0, 0] == 0.0) and np.all(p.values[:, 0, 1] == 1.0)
    assert np.all((p.values[np.isfinite(p.values)] >= 0) & (p.values[np.isfinite(p.values)] <= 1))
    assert np.isnan(mu.values[:, 1, 1]).all()
    for model in (pois, binom):  # the edge cells' infinite intercepts are saved and loaded
        path = tmp_path / f"{model.family}.npz"
        model.save(path)
        again = dask_dgd.load(path)
        xr.testing.assert_identical(again.intercept_, model.intercept_)
        xr.testing.assert_identical(again.predict(ds).compute(), model.predict(ds).compute())
    # a GLM is scored by the R^2 of its mean, like the pooled models
    assert 0.0 < pois.score(ds) < 1.0


@pytest.mark.parametrize("family", ["poisson", "binomial"])
def test_pointwise_glm_ridge_matches_scikit_learn(family):
    ds = _grid(T=60)
    alpha = 3.0
    target = FAMILIES[family][0]
    model = ClimateRegressor(["a", "index"], target, model="pointwise", family=family, alpha=alpha,
                             area_weights=False, tol=1e-6).fit(ds)
    y = ds[target].values
    for i, j in [(0, 2), (1, 0), (2, 3), (3, 5)]:
        X = np.column_stack([ds["a"].values[:, i, j], ds["index"].values])
        ok = np.isfinite(y[:, i, j]) & np.all(np.isfinite(X), axis=1)
        if family == "poisson":  # 1/(2n) deviance + alpha_sk/2 |b|^2, so alpha = n alpha_sk
            ref = PoissonRegressor(alpha=alpha / ok.sum(), tol=1e-12, max_iter=10_000).fit(X[ok], y[ok, i, j])
        else:  # C logloss + |b|^2 / 2, logloss = deviance / 2: alpha = 1 / C
            ref = LogisticRegression(C=1.0 / alpha, tol=1e-12, max_iter=10_000).fit(X[ok], y[ok, i, j])
        np.testing.assert_allclose(model.coef_.values[i, j], np.ravel(ref.coef_), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(model.intercept_.values[i, j], np.ravel(ref.intercept_)[0], rtol=1e-6, atol=1e-8)


def test_pointwise_glm_steps_back_from_a_start_far_away():
    """Counts in the thousands: a full Newton step from the cell's mean overshoots in
    cells with a strong slope; step halving keeps every objective decreasing."""
    ds = _grid(T=80)
    ds["big"] = np.exp(5.0 + 2.5 * ds["a"]).fillna(0.0).round()
    model = ClimateRegressor(["a"], "big", model="pointwise", family="poisson", tol=1e-8).fit(ds)
    np.testing.assert_allclose(model.intercept_.values, 5.0, atol=1e-3)
    np.testing.assert_allclose(model.coef_.values[..., 0], 2.5, atol=1e-3)


def test_step_halving_follows_the_shared_line_search_rules():
    """A cell's step halving (one intercept here): a rise of the objective within the
    shared slack is no rise; a real one halves the step from the last accepted point,
    up to MAX_HALVINGS times, and then the cell stays there."""
    # state: point 1.5, accepted 1.0 (objective 10), step 0.5 at length 1, active, 5 rows
    state = np.array([[1.5, 1.0, 0.5, 10.0, 1.0, ACTIVE, 5.0, 0.0]])

    def stats(objective):  # Fisher information 1, score 0, the deviance (objective = deviance / 2)
        return np.array([[1.0, 0.0, 2.0 * objective, 5.0, 5.0, 5.0, 0.0, 0.0]])

    kept = newton_update(state, stats(10.0 * (1.0 + 0.5 * INCREASE_SLACK)), 1, "poisson", 0.0, 1e-8, False)
    assert kept[0, 1] == 1.5 and kept[0, 5] == CONVERGED  # accepted; a zero Newton step converged
    for k in range(1, MAX_HALVINGS + 1):
        state = newton_update(state, stats(11.0), 1, "poisson", 0.0, 1e-8, False)
        assert state[0, 4] == 0.5**k and state[0, 0] == 1.0 + 0.5**k * 0.5 and state[0, 5] == ACTIVE
    state = newton_update(state, stats(11.0), 1, "poisson", 0.0, 1e-8, False)
    assert state[0, 0] == 1.0 and state[0, 5] == CONVERGED


def test_chunks_whose_cells_converged_are_not_read_again():
    """One spatial chunk is all edge cells (no events): read once (the start pass),
    while the other chunk's blocks are read on every pass."""
    ds = _grid(Y=2, X=4, chunks={"time": 32, "lat": 2, "lon": 2})  # 3 time chunks x 2 spatial chunks
    ds["n"] = ds["n"].where(ds.lon >= 40.0, 0.0).where(np.isfinite(ds["n"]))
    ds["n"][:, 1, 1] = 0.0  # no land cell in the chunk of edges (it would have no data, not an edge)
    calls = {}

    def count(key, *args):
        name = key[0] if isinstance(key, tuple) else key
        if str(name).startswith("glm_stats"):
            calls[key[-2]] = calls.get(key[-2], 0) + 1  # key: (name, time, lat, lon, 0) blocks

    with dask.config.set(scheduler="sync"), Callback(pretask=count):
        model = ClimateRegressor(["a", "index"], "n", model="pointwise", family="poisson").fit(ds)
    assert np.all(model.intercept_.values[:, :2] == -np.inf)
    assert calls[0] == 3  # the start pass over 3 time chunks, then never again
    assert calls[1] == 3 * model.n_iter_ and model.n_iter_ >= 3


def test_a_separated_cell_warns_after_max_iter_and_a_penalty_fixes_it():
    ds = _grid(T=40, Y=2, X=3, chunks={"time": 20, "lat": 1, "lon": 3})
    e = ds["e"].values.copy()
    e[:, 1, 0] = (ds["a"].values[:, 1, 0] > 0).astype(float)  # a splits the cell's events perfectly
    ds["e"] = (DIMS, e)
    with pytest.warns(ConvergenceWarning, match=r"^1 of 5 grid cells did not converge in max_iter=5 Newton passes"):
        ClimateRegressor(["a"], "e", model="pointwise", family="binomial", max_iter=5).fit(ds)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        model = ClimateRegressor(["a"], "e", model="pointwise", family="binomial", alpha=1.0).fit(ds)
    assert np.isfinite(model.coef_.values[1, 0]).all() and model.coef_.values[1, 0, 0] > 1.0


@pytest.mark.parametrize("family, value, message", [
    ("poisson", -1.0, r"family='poisson' needs counts >= 0 as the target: 1 unmasked value\(s\) of 'n'"),
    ("binomial", 2.0, r"family='binomial' needs values in \[0, 1\] .* 1 unmasked value\(s\) of 'n'"),
])
def test_a_target_outside_the_family_range_is_refused(family, value, message):
    ds = _grid(T=24)
    n = ds["n"].values.copy()
    n = np.clip(n, 0, 1)
    n[3, 2, 2] = value
    ds["n"] = (DIMS, n)
    with pytest.raises(InputError, match=message):
        ClimateRegressor(["a"], "n", model="pointwise", family=family).fit(ds)


def test_a_fully_masked_target_is_refused_for_glms_too():
    ds = _grid(T=24)
    ds["n"] = ds["n"] * np.nan
    with pytest.raises(InputError, match="every cell of 'n' or its features is masked"):
        ClimateRegressor(["a"], "n", model="pointwise", family="poisson").fit(ds)


@pytest.mark.parametrize("params, shown", [
    (dict(mode="async"), "mode='async'"),
    (dict(optimizer="adam", checkpoint="ck"), "optimizer='adam', checkpoint='ck'"),
    (dict(learning_rate=0.1), "learning_rate=0.1"),
    (dict(compression="sign"), "compression='sign'"),
])
def test_pooled_training_parameters_are_refused_by_pointwise_models(params, shown):
    ds = _grid(T=24)
    for family in ("gaussian", "poisson"):
        model = ClimateRegressor(["a"], "n", model="pointwise", family=family, **params)
        with pytest.raises(ParameterError, match=rf"^{shown}: pointwise models do not use"):
            model.fit(ds)
    # the parameters pointwise models use are accepted
    ClimateRegressor(["a"], "n", model="pointwise", family="poisson", max_iter=50, tol=1e-6, split_every=2).fit(ds)


def test_glm_statistics_at_the_coefficients_are_the_deviance_and_its_derivatives(monkeypatch):
    """The kernel's statistics of one block against a direct computation (its NumPy
    stage in one piece, and row by row in pieces of 2 rows)."""
    rng = np.random.default_rng(4)
    T, C = 30, 5
    x = rng.normal(size=(T, 1, C))
    z = rng.normal(size=T)
    y = rng.poisson(2.0, size=(T, 1, C)).astype(float)
    y[3, 0, 2] = np.nan
    w = np.linspace(0.5, 1.0, C)[None, :]
    coef = rng.normal(0, 0.3, size=(1, C, 3))
    out = glm_stats([(0, 0), (1, 0)], "poisson", False, coef, y, w, x, z)[0, 0]
    start = glm_stats([(0, 0), (1, 0)], "poisson", True, coef, y, w, x, z)[0, 0]
    from dask_dgd.climate import _pointwise_glm

    monkeypatch.setattr(_pointwise_glm, "ROWS_ELEMENTS", 2 * C)
    for first, whole in ((False, out), (True, start)):
        np.testing.assert_allclose(glm_stats([(0, 0), (1, 0)], "poisson", first, coef, y, w, x, z)[0, 0], whole,
                                   rtol=1e-13, atol=1e-13)
    for c in range(C):
        ok = np.isfinite(y[:, 0, c])
        A = np.column_stack([np.ones(T), x[:, 0, c], z])[ok]
        eta = A @ coef[0, c]
        mu = np.exp(eta)
        yc = y[ok, 0, c]
        ylogy = np.where(yc > 0, yc * np.log(np.where(yc > 0, yc, 1)), 0)
        dev = 2 * np.sum(ylogy - yc * np.log(mu) - (yc - mu))
        constant = 2 * np.sum(ylogy - yc)
        np.testing.assert_allclose(out[c, :9].reshape(3, 3), w[0, c] * (A.T * mu) @ A, rtol=1e-12)
        np.testing.assert_allclose(out[c, 9:12], w[0, c] * A.T @ (yc - mu), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(out[c, 12:], [w[0, c] * (dev - constant), w[0, c] * ok.sum(), ok.sum(),
                                                 w[0, c] * yc.sum(), 0.0, 0.0], rtol=1e-12)
        # the start: R's mu = y + 0.1, the working response z = log(mu) + (y - mu) / mu
        mu0 = yc + 0.1
        z0 = np.log(mu0) + (yc - mu0) / mu0
        np.testing.assert_allclose(start[c, :9].reshape(3, 3), w[0, c] * (A.T * mu0) @ A, rtol=1e-12)
        np.testing.assert_allclose(start[c, 9:12], w[0, c] * A.T @ (mu0 * z0), rtol=1e-12)
        np.testing.assert_allclose(start[c, 12:], [0.0, w[0, c] * ok.sum(), ok.sum(), w[0, c] * yc.sum(), 0.0,
                                                   w[0, c] * constant], rtol=1e-12)


@pytest.mark.parametrize("start", [True, False], ids=["start", "later pass"])
@pytest.mark.parametrize("family", [1, 2], ids=["poisson", "binomial"])
@pytest.mark.parametrize("kind", [[0], [1, 0], [0, 1, 0], [1]], ids=["grid", "time, grid", "grid, time, grid", "time"])
def test_the_kernel_reads_a_run_of_cells_in_place_with_the_gathered_values(kind, family, start):
    """``glm_acc_kernel`` on a run of cells (every cell, or a range: read in place,
    after the start in one fused loop) gives each cell the statistics, bit for bit,
    that the gathered path gives it among other cells (NaN targets, features and
    time steps, zero weights and targets out of range included)."""
    from dask_dgd.climate._kernels import glm_acc_kernel

    rng = np.random.default_rng(sum(kind) * 7 + family + 2 * start)
    T, C = 17, 23
    kind = np.array(kind)
    pos = np.zeros(len(kind), dtype=np.int64)
    pos[kind == 0] = np.arange((kind == 0).sum())
    pos[kind == 1] = np.arange((kind == 1).sum())
    full = rng.normal(size=(max((kind == 0).sum(), 1), T, C))
    full[rng.random(full.shape) < 0.05] = np.nan
    timef = rng.normal(size=(max((kind == 1).sum(), 1), T))
    timef[0, 5] = np.nan
    y = rng.poisson(2.0, (T, C)).astype(float) if family == 1 else (rng.random((T, C)) < 0.4).astype(float)
    y[rng.random((T, C)) < 0.1] = np.nan
    y[3, 4] = -1.0  # out of range, unmasked: counted
    full[:, 3, 4] = 0.5
    w = rng.random(C)
    w[[2, 9]] = 0.0
    eta = rng.normal(size=(T, C))
    mu = np.exp(eta) if family == 1 else np.exp(-np.abs(eta))
    aux = rng.random((T, C))
    p = len(kind) + 1

    def stats(cells):
        acc = np.zeros((p * p + p + 6, cells.size))
        glm_acc_kernel(full, timef, kind, pos, y, w, cells, 0, eta[:, cells].copy(), mu[:, cells].copy(),
                       aux[:, cells].copy(), family, start, np.empty((p + 4, cells.size)), acc)
        return acc

    every = stats(np.arange(C))
    assert np.isfinite(every).all() and (every[p * p + p + 4] > 0).any()  # the bad value is counted
    for run in (np.arange(C), np.arange(5, 19)):  # read in place
        np.testing.assert_array_equal(stats(run), every[:, run])
    for cells in (np.arange(0, C, 2), np.array([1, 2, 4, 9, 22])):  # gathered
        np.testing.assert_array_equal(stats(cells), every[:, cells])


def test_batched_spd_solve_is_scale_free_and_falls_back_to_minimum_norm():
    from dask_dgd.climate._pointwise import solve_spd

    rng = np.random.default_rng(7)
    A = rng.normal(size=(50, 3, 10))
    M0 = A @ np.swapaxes(A, 1, 2)
    M = M0.copy()
    b = rng.normal(size=(50, 3))
    scale = np.array([1e5, 1.0, 1e-4])  # features in very different units: well posed all the same
    Ms = M0 * scale[:, None] * scale[None, :]
    bs = b * scale
    M[3, 2, :] = M[3, :, 2] = 0.0  # a feature constant in the cell
    M[4, 1], M[4, :, 1] = M[4, 0], M[4, :, 0]  # two identical features
    M[4, 1, 1] = M[4, 0, 0]
    got, got_scaled = solve_spd(M, b, 1e-10), solve_spd(Ms, bs, 1e-10)
    good = np.ones(50, dtype=bool)
    good[[3, 4]] = False
    np.testing.assert_allclose(got[good], np.linalg.solve(M[good], b[good][..., None])[..., 0], rtol=1e-9)
    np.testing.assert_allclose(got_scaled * scale, np.linalg.solve(M0, b[..., None])[..., 0], rtol=1e-8)
    for i in (3, 4):
        np.testing.assert_allclose(got[i], np.linalg.lstsq(M[i], b[i], rcond=1e-10)[0], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("share, reads", [(0.25, 1), (0.0, None)], ids=["cached", "too big to cache"])
def test_inputs_are_read_once_when_they_fit_in_memory(share, reads, monkeypatch):
    """The Newton passes after the first use the inputs kept in memory when they fit
    (a quarter of the memory at hand); otherwise every pass reads them again."""
    from dask_dgd.climate import _pointwise_glm

    monkeypatch.setattr(_pointwise_glm, "CACHE_SHARE", share)
    ds = _grid(T=48, chunks={"time": 24, "lat": 2, "lon": 3})
    calls = []

    def read(block):  # stands for reading a block of the store
        if block.size:  # not dask's call on an empty block for the meta
            calls.append(block.shape)
        return block

    ds["n"] = ds["n"].copy(data=ds["n"].data.map_blocks(read, dtype=np.float64))
    with dask.config.set(scheduler="sync"):
        model = ClimateRegressor(["a", "index"], "n", model="pointwise", family="poisson").fit(ds)
    n_blocks = ds["n"].data.npartitions
    assert model.n_iter_ >= 3
    if reads:
        assert len(calls) == n_blocks * reads
    else:  # every pass reads the store (but for spatial chunks whose cells have all converged), and so does
        # the separation screen after them (alpha=0)
        assert n_blocks * model.n_iter_ <= len(calls) <= n_blocks * (model.n_iter_ + 1)


@pytest.mark.parametrize("model_kind", ["pointwise", "pooled"])
def test_predict_uses_the_family_of_the_fit(model_kind):
    ds = _grid(T=24)
    kw = dict(max_iter=200, tol=1e-10) if model_kind == "pooled" else {}
    model = ClimateRegressor(["a"], "n", model=model_kind, family="poisson", **kw).fit(ds)
    before = model.predict(ds).compute()
    model.set_params(family="gaussian")  # takes effect at the next fit, as every parameter
    xr.testing.assert_identical(model.predict(ds).compute(), before)
    assert model.family_ == "poisson" and np.nanmin(before.values) >= 0


# ------------------------------------------------- the passes as steps of the one loop
def test_each_newton_pass_is_a_record_of_the_history_and_of_the_callbacks():
    """One record per pass (the start's IRLS step included): the objective summed over
    the cells at their last accepted points falls, the largest gradient shrinks, the
    cells still iterating count down to none; a callback sees the same records, and
    the coefficients are those of a fit without one."""
    ds = _grid()
    seen = []
    model = ClimateRegressor(["a", "index"], "n", model="pointwise", family="poisson", tol=1e-8,
                             callbacks=[seen.append]).fit(ds)
    h = model.history_
    assert len(h) == model.n_iter_ >= 4
    assert h["iteration"].tolist() == h["step"].tolist() == list(range(1, model.n_iter_ + 1))
    assert np.isnan(h["loss"].iloc[0]) and np.isnan(h["grad_norm"].iloc[0])  # the start evaluates no coefficients
    loss = h["loss"].to_numpy()[1:]
    assert np.all(np.diff(loss) <= INCREASE_SLACK * np.abs(loss[:-1])) and loss[-1] < loss[0]
    assert h["grad_norm"].iloc[-1] < 1e-6 * h["grad_norm"].iloc[1]
    iterating = h["cells_iterating"].tolist()
    assert iterating == sorted(iterating, reverse=True) and iterating[-1] == 0
    assert iterating[0] == 6 * 4 - 2  # every cell with a finite fit: not the land cell, not the edge cell
    assert [rec["step"] for rec in seen] == h["step"].tolist()
    np.testing.assert_array_equal([rec["loss"] for rec in seen], h["loss"])  # NaN the same
    quiet = ClimateRegressor(["a", "index"], "n", model="pointwise", family="poisson", tol=1e-8).fit(ds)
    np.testing.assert_array_equal(_table(model), _table(quiet))


def test_the_history_is_made_when_first_asked_for_and_travels_as_a_dataframe(tmp_path):
    """A pointwise GLM fit keeps its passes' records and makes ``history_`` from them
    on first access (as the linear models do); pickling and saving carry the
    DataFrame under its own name, and a refit starts without the old records."""
    import pickle

    ds = _grid()
    model = ClimateRegressor(["a", "index"], "n", model="pointwise", family="poisson").fit(ds)
    assert "history_" not in vars(model) and len(vars(model)["_history_records"][0]) == model.n_iter_
    for copy in (pickle.loads(pickle.dumps(model)), _saved_and_loaded(model, tmp_path / "m.npz")):
        assert "_history_records" not in vars(copy) and isinstance(vars(copy)["history_"], pd.DataFrame)
        pd.testing.assert_frame_equal(copy.history_, model.history_)
    h = model.history_  # made once, then kept
    assert model.history_ is h and "_history_records" not in vars(model)
    assert h["step"].tolist() == list(range(1, model.n_iter_ + 1)) and h["cells_iterating"].iloc[-1] == 0
    model.fit(ds)  # a refit: its own records, not the old frame
    assert "history_" not in vars(model) and model.history_ is not h
    with pytest.raises(AttributeError, match="no attribute 'history_'"):
        _ = ClimateRegressor(["a"], "n", model="pointwise", family="poisson").history_


def _saved_and_loaded(model, path):
    model.save(path)
    return dask_dgd.load(path)


def test_a_callback_returning_true_stops_the_passes():
    ds = _grid()
    stopped = ClimateRegressor(["a", "index"], "e", model="pointwise", family="binomial",
                               callbacks=[lambda rec: rec["step"] >= 2])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)  # the user stopped it: no warning, as every estimator
        stopped.fit(ds)
    assert stopped.n_iter_ == len(stopped.history_) == 2 and stopped.history_["cells_iterating"].iloc[-1] > 0
    full = ClimateRegressor(["a", "index"], "e", model="pointwise", family="binomial").fit(ds)
    assert full.n_iter_ > 2
    assert not np.array_equal(_table(stopped), _table(full), equal_nan=True)


def test_max_time_stops_the_passes_with_a_convergence_warning():
    ds = _grid()
    model = ClimateRegressor(["a", "index"], "n", model="pointwise", family="poisson", max_time=1e-9)
    with pytest.warns(ConvergenceWarning, match=r"^22 of 23 grid cells did not converge \(reached max_time=1e-09 s\)"):
        model.fit(ds)
    assert model.n_iter_ == len(model.history_) == 1  # the time limit is asked after each pass
    assert np.isfinite(model.coef_.values[~np.isnan(model.coef_.values)]).all()


def test_gaussian_pointwise_models_refuse_max_time_and_callbacks():
    """Least squares per cell is one solve, not passes: nothing to stop or report."""
    ds = _grid(T=24)
    for params, shown in ((dict(max_time=5.0), "max_time=5.0"), (dict(callbacks=[print]), "callbacks=")):
        with pytest.raises(ParameterError, match=rf"^{shown}.*: pointwise models do not use this"):
            ClimateRegressor(["a"], "n", model="pointwise", **params).fit(ds)


@pytest.mark.parametrize("chunks", [None, {"time": 30}], ids=["one block", "time chunks"])
@pytest.mark.parametrize("family", ["poisson", "binomial"])
def test_pointwise_glm_keeps_its_precision_when_the_spread_is_tiny_next_to_the_mean(family, chunks, client):
    """A pressure of 101,325 Pa varying by 0.1 Pa (and a time series near 1e4): the cells'
    slopes are statsmodels' on the anomalies (the raw design's Newton systems, condition
    number about 1e12, lost them: slope 0, no warning)."""
    rng = np.random.default_rng(0)
    T = 120
    e = rng.normal(size=(T, 3, 4))
    index = rng.normal(size=T)
    eta = 0.5 + 0.4 * e + 0.2 * index[:, None, None]
    y = (rng.poisson(np.exp(eta)) if family == "poisson" else rng.random(e.shape) < 1 / (1 + np.exp(-eta)))
    ds = xr.Dataset({"p": (DIMS, 101_325.0 + 0.1 * e), "index": (("time",), 1e4 + index),
                     "y": (DIMS, y.astype(float))},
                    coords={"time": xr.date_range("2000-01-01", periods=T, freq="MS"), "lat": [60.0, 0.0, -60.0],
                            "lon": [0.0, 90.0, 180.0, 270.0]})
    model = ClimateRegressor(["p", "index"], "y", model="pointwise", family=family, area_weights=False,
                             client=client).fit(ds if chunks is None else ds.chunk(chunks))
    for i in range(3):
        for j in range(4):
            X = sm.add_constant(np.column_stack([0.1 * e[:, i, j], index]))
            ref = sm.GLM(y[:, i, j].astype(float), X, family=FAMILIES[family][1]).fit(tol=1e-14).params
            np.testing.assert_allclose(model.coef_.values[i, j], ref[1:], rtol=1e-7)
            intercept = ref[0] - ref[1] * 101_325.0 - ref[2] * 1e4  # the features' own origin
            assert model.intercept_.values[i, j] == pytest.approx(intercept, rel=1e-7)
