"""Pointwise fits of a small in-memory grid run in process, without Dask.

A NumPy-backed Dataset whose grid is one dask block (the chunks dask's ``"auto"``
gives it) is fitted by calling the block functions directly; the reference is the
same Dataset as one dask chunk, which goes through the dask graph: every fitted
attribute must be equal, bit for bit.
"""

import dask
import numpy as np
import pytest
import xarray as xr
from dask.callbacks import Callback

from dask_dgd.climate import ClimateRegressor
from dask_dgd.climate._design import FeatureSpec, Fields

DIMS = ("time", "lat", "lon")


def _grid(T=60, Y=5, X=7, seed=0):
    """Gaussian, count and 0/1 targets on a grid field ``a``, a static field ``h``
    and a time series ``index``; a land cell, missing values, a cell with no event."""
    rng = np.random.default_rng(seed)
    time = xr.date_range("2000-01-01", periods=T, freq="MS")
    a = rng.normal(size=(T, Y, X))
    index = rng.normal(size=T)
    eta = 0.3 + 0.5 * a + 0.3 * index[:, None, None]
    y = 2.0 + eta + rng.normal(size=(T, Y, X))
    n = rng.poisson(np.exp(eta)).astype(float)
    e = (rng.random((T, Y, X)) < 1.0 / (1.0 + np.exp(-eta))).astype(float)
    n[:, 0, 0] = 0.0
    for v in (y, n, e):
        v[:, 1, 1] = np.nan
        v[7, -2, -3] = np.nan
    a[11, -1, -2] = np.nan
    return xr.Dataset(
        {"a": (DIMS, a), "h": (("lat", "lon"), rng.normal(size=(Y, X))), "index": (("time",), index),
         "y": (DIMS, y), "n": (DIMS, n), "e": (DIMS, e)},
        coords={"time": time, "lat": ("lat", np.linspace(-60, 60, Y), {"units": "degrees_north"}),
                "lon": np.arange(X) * 20.0},
        attrs={"history": "made by the test"},
    )


def _dask_tasks(fit):
    """The fitted model and the number of tasks dask ran during ``fit()``."""
    tasks = []
    with Callback(pretask=lambda key, *_: tasks.append(key)):
        model = fit()
    return model, len(tasks)


CASES = {
    "gaussian": dict(features=["a", "h", "index"], target="y", lags={"a": [0, 1]}, seasonal=1),
    "poisson": dict(features=["a", "index"], target="n", family="poisson", lags={"a": [0, 2]}),
    "binomial": dict(features=["a", "h"], target="e", family="binomial", seasonal=1, alpha=0.1),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_in_memory_grid_is_fitted_in_process_with_the_dask_paths_result(case):
    ds = _grid()
    kw = dict(CASES[case])
    make = lambda: ClimateRegressor(kw.pop("features"), kw.pop("target"), model="pointwise", **kw)  # noqa: E731
    model = make()
    with dask.config.set(scheduler="sync"):
        fast, fast_tasks = _dask_tasks(lambda: model.fit(ds))
        lazy, lazy_tasks = _dask_tasks(lambda: ClimateRegressor(**model.get_params()).fit(ds.chunk()))
    assert fast_tasks == 0 and lazy_tasks > 0
    for name in ("intercept_", "coef_", "n_samples_"):
        xr.testing.assert_identical(getattr(fast, name), getattr(lazy, name))
    assert fast.n_iter_ == lazy.n_iter_
    if case != "gaussian":
        assert fast.n_iter_ >= 3
        cols = ["loss", "grad_norm", "n_samples", "cells_iterating"]
        np.testing.assert_array_equal(fast.history_[cols].to_numpy(), lazy.history_[cols].to_numpy())
    xr.testing.assert_identical(fast.predict(ds).compute(), lazy.predict(ds).compute())


def _fields(ds, **kw):
    spec = FeatureSpec(["a", "index"], "y", DIMS, "time", None, 0, None, True, "auto")
    return Fields(spec, ds, **kw)


def test_only_a_numpy_grid_of_one_dask_block_is_taken_in_process():
    ds = _grid()
    assert _fields(ds, in_process=True).in_process
    assert not _fields(ds).in_process  # not asked for (predict, pooled models)
    assert not _fields(ds.chunk(), in_process=True).in_process  # dask-backed: its graph may read a store
    mixed = ds.assign(a=ds["a"].chunk())
    assert not _fields(mixed, in_process=True).in_process
    with dask.config.set({"array.chunk-size": "1KiB"}):  # the grid would be several dask blocks
        assert not _fields(ds, in_process=True).in_process
    fields = _fields(ds, in_process=True)
    assert all(type(a) is np.ndarray for a in [fields.y, fields.weight, *fields.full, *fields.time])


def test_a_grid_of_several_dask_blocks_keeps_the_dask_path():
    ds = _grid()
    with dask.config.set({"array.chunk-size": "1KiB", "scheduler": "sync"}):
        model, tasks = _dask_tasks(lambda: ClimateRegressor(["a", "index"], "y", model="pointwise").fit(ds))
    assert tasks > 0
    reference = ClimateRegressor(["a", "index"], "y", model="pointwise").fit(ds)
    np.testing.assert_allclose(model.coef_.values, reference.coef_.values, rtol=1e-12)


@pytest.mark.parametrize("n_active", [4, 12], ids=["few iterating: gathered", "most iterating: every cell"])
def test_glm_statistics_are_computed_for_the_cells_still_iterating_only(n_active):
    """The statistics of a state's active cells equal those of all the cells, bit for
    bit; the others' are zeros (no pass reads them), whether the active cells are
    gathered (few) or every cell is computed (at least ``DENSE_SHARE`` of them)."""
    from dask_dgd.climate._pointwise_glm import ACTIVE, CONVERGED, glm_stats, glm_stats_of_state, initial_state

    rng = np.random.default_rng(3)
    T, Y, X, p = 40, 3, 5, 3
    x = rng.normal(size=(T, Y, X))
    z = rng.normal(size=T)
    y = rng.poisson(2.0, size=(T, Y, X)).astype(float)
    y[4, 1, 2] = np.nan
    w = rng.uniform(0.5, 1.0, size=(Y, X))
    state = initial_state(w, p)
    state[..., :p] = rng.normal(0, 0.3, size=(Y, X, p))
    active = np.zeros(Y * X, dtype=bool)
    active[rng.permutation(Y * X)[:n_active]] = True
    active = active.reshape(Y, X)
    state[..., 3 * p + 2] = np.where(active, ACTIVE, CONVERGED)
    state[~active, 0] = np.nan  # a cell without data (or converged anywhere): its statistics are not made
    order = [(0, 0), (1, 0)]
    whole = glm_stats(order, "poisson", False, state[..., :p], y, w, x, z)
    got = glm_stats_of_state(order, "poisson", False, state, y, w, x, z)
    assert got.shape == whole.shape and active.any() and not active.all()
    np.testing.assert_array_equal(got[0][active], whole[0][active])
    assert not got[0][~active].any()
    # the start pass reads every cell, whatever the status
    np.testing.assert_array_equal(glm_stats_of_state(order, "poisson", True, state, y, w, x, z),
                                  glm_stats(order, "poisson", True, state[..., :p], y, w, x, z))
