"""Namespace cleanliness end to end: the estimators on ``array_api_strict`` blocks.

``dask_dgd.testing.on_array_api_strict`` puts every block of a dask array on
``array_api_strict``'s "device1": a NumPy-only call on a block, or a parameter that
was not moved to the block's device, raises.  This is how CI proves, without a GPU,
that training and prediction stay in the blocks' namespace (CuPy on a GPU); the same
checks run on CuPy in ``tests/gpu`` where a CUDA device exists.
"""

import pathlib

import array_api_compat
import array_api_strict as xps
import dask.array as da
import numpy as np
import pytest
from namespace_checks import CASE_IDS, CASES, blocks, check_fit_predict, problem

import dask_dgd
from dask_dgd._backend import take_rows, to_numpy
from dask_dgd.exceptions import ParameterError
from dask_dgd.testing import STRICT_DEVICE, on_array_api_strict

DEVICE = xps.Device(STRICT_DEVICE)


def is_strict_on_device(a):
    return (
        hasattr(a, "__array_namespace__")
        and array_api_compat.is_array_api_strict_namespace(a.__array_namespace__())
        and a.device == DEVICE
    )


@pytest.mark.filterwarnings("ignore::dask_dgd.ConvergenceWarning")
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_fit_and_predict_on_strict_blocks_equal_numpy(client, case):
    check_fit_predict(client, case, on_array_api_strict, is_strict_on_device, rtol=1e-10)


def test_async_on_strict_blocks_reaches_the_optimum(client):
    X, y, _ = problem("regression")
    optimum = np.linalg.lstsq(np.c_[X, np.ones(len(X))], y, rcond=None)[0]
    Xd = on_array_api_strict(da.from_array(X, chunks=250))
    yd = on_array_api_strict(da.from_array(y, chunks=250))
    # max_staleness: with unbounded staleness a worker slowed 10x (a busy machine) left
    # the fit 1.0 from the optimum after 300 epochs; bounded at 2, within 2e-6
    est = dask_dgd.LinearRegression(solver="gd", mode="async", max_iter=300, tol=0, random_state=0,
                                    max_staleness=2, client=client).fit(Xd, yd)
    np.testing.assert_allclose(est.coef_, optimum[:-1], atol=2e-3)
    assert all(is_strict_on_device(b) for b in blocks(client, est.predict(Xd)))


@pytest.mark.parametrize("where", ["dask", "memory", "scalar"])
def test_host_targets_and_weights_with_strict_X(client, where):
    """NumPy y and sample weights next to device X blocks are moved to the device."""
    X, y, w = problem("regression")
    Xd = da.from_array(X, chunks=250)
    if where == "dask":
        y_host, w_host = da.from_array(y, chunks=250), da.from_array(w, chunks=250)
    elif where == "memory":
        y_host, w_host = y, w
    else:
        y_host, w_host = da.from_array(y, chunks=250), 2.0
    kw = dict(solver="gd", max_iter=20, client=client)
    ref = dask_dgd.LinearRegression(**kw).fit(Xd, y_host, sample_weight=w_host)
    est = dask_dgd.LinearRegression(**kw).fit(on_array_api_strict(Xd), y_host, sample_weight=w_host)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-10)
    clf_ref = dask_dgd.LogisticRegression(**kw).fit(Xd, (y > 0).astype(int), sample_weight=w)
    clf = dask_dgd.LogisticRegression(**kw).fit(on_array_api_strict(Xd), (y > 0).astype(int), sample_weight=w)
    np.testing.assert_allclose(clf.coef_, clf_ref.coef_, rtol=1e-10)


@pytest.mark.parametrize("kind", ["regression", "binary", "count"])
def test_score_on_strict_blocks_equals_numpy(client, kind):
    X, y, w = problem(kind)
    cls = {"regression": dask_dgd.LinearRegression, "binary": dask_dgd.LogisticRegression,
           "count": dask_dgd.PoissonRegressor}[kind]
    est = cls(solver="lbfgs", client=client).fit(X, y)
    Xs = on_array_api_strict(da.from_array(X, chunks=250))
    ys, ws = on_array_api_strict(da.from_array(y, chunks=250)), on_array_api_strict(da.from_array(w, chunks=250))
    assert est.score(Xs, ys, sample_weight=ws) == pytest.approx(est.score(X, y, sample_weight=w), rel=1e-12)


def test_partial_fit_on_strict_blocks_equals_numpy(client):
    X, y, _ = problem("binary")
    kw = dict(optimizer="adam", batch_size=100, random_state=0, client=client)
    ref = dask_dgd.LogisticRegression(**kw)
    est = dask_dgd.LogisticRegression(**kw)
    for start in (0, 500):
        part = slice(start, start + 500)
        ref.partial_fit(da.from_array(X[part], chunks=250), da.from_array(y[part], chunks=250), classes=[0, 1])
        est.partial_fit(on_array_api_strict(da.from_array(X[part], chunks=250)),
                        on_array_api_strict(da.from_array(y[part], chunks=250)), classes=[0, 1])
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-10)


def test_string_classes_come_back_as_host_labels(client):
    X, y, _ = problem("binary")
    labels = np.array(["no", "yes"])[y]
    est = dask_dgd.LogisticRegression(solver="lbfgs", client=client).fit(X, labels)
    got = blocks(client, est.predict(on_array_api_strict(da.from_array(X, chunks=250))))
    assert all(isinstance(b, np.ndarray) and b.dtype.kind == "U" for b in got)
    np.testing.assert_array_equal(np.concatenate(got), est.predict(X))


@pytest.mark.parametrize("method", ["predict", "predict_proba", "decision_function"])
def test_in_memory_strict_array_predicts_in_its_namespace(method):
    X, y, _ = problem("multinomial", n=300)
    est = dask_dgd.LogisticRegression(solver="lbfgs").fit(X, y)
    got = getattr(est, method)(xps.asarray(X, device=DEVICE))
    assert is_strict_on_device(got)
    np.testing.assert_allclose(to_numpy(got), getattr(est, method)(X), rtol=1e-12, atol=1e-12)


def test_in_memory_strict_array_is_checked_like_numpy():
    X, y, _ = problem("regression", n=100)
    est = dask_dgd.LinearRegression(solver="lbfgs").fit(X, y)
    with pytest.raises(dask_dgd.InputError, match="X has 3 features, but LinearRegression is expecting 5"):
        est.predict(xps.asarray(X[:, :3], device=DEVICE))
    bad = X.copy()
    bad[7, 1] = np.nan
    with pytest.raises(dask_dgd.InputError, match="NaN or infinity"):
        est.predict(xps.asarray(bad, device=DEVICE))
    with pytest.raises(dask_dgd.InputError, match="X must be 2-D"):
        est.predict(xps.asarray(X[:, 0], device=DEVICE))


def test_parameters_move_to_the_device_once_per_shard_and_step(client, monkeypatch):
    """One transfer per device per step, not one per block."""
    from dask_dgd._engine.data.blocks import make_shard
    from dask_dgd._engine.objective import LinearTraining
    from dask_dgd.losses import HalfSquaredError, LinearObjective

    X, y, _ = problem("regression", n=800)
    objective = LinearObjective(HalfSquaredError(), 5, fit_intercept=True)
    parts = [(i, on_array_api_strict(X[i * 200:(i + 1) * 200]), on_array_api_strict(y[i * 200:(i + 1) * 200]), None)
             for i in range(4)]
    shard = make_shard([p[0] for p in parts], [p[1] for p in parts], [p[2] for p in parts], [None] * 4)
    calls = []
    place = LinearObjective.place
    monkeypatch.setattr(LinearObjective, "place", lambda self, params, X: calls.append(1) or place(self, params, X))
    params = np.zeros(objective.n_params)
    sums, _ = LinearTraining(objective).group_sums(shard, params, None, None, None)
    assert len(calls) == 1 and len(sums) == 4
    want = [objective.block_sums(params, X[i * 200:(i + 1) * 200], y[i * 200:(i + 1) * 200]) for i in range(4)]
    for i in range(4):
        np.testing.assert_allclose(sums[i].grad, want[i][1], rtol=1e-12)


def test_take_rows_keeps_the_namespace_and_device():
    a = xps.asarray(np.arange(12.0).reshape(6, 2), device=DEVICE)
    got = take_rows(a, np.array([True, False, True, False, False, True]))
    assert is_strict_on_device(got)
    np.testing.assert_array_equal(to_numpy(got), np.arange(12.0).reshape(6, 2)[[0, 2, 5]])


def test_on_array_api_strict_refuses_other_inputs():
    with pytest.raises(ParameterError, match="x must be a numpy.ndarray or a dask array; got list"):
        on_array_api_strict([1.0, 2.0])


@pytest.mark.slow
def test_cupy_is_never_imported_without_a_cupy_block():
    """A finder that records (and refuses) every import of cupy or cupyx made by
    dask_dgd's own code, installed before dask_dgd: fitting and predicting every model
    family on NumPy data must not try one, whether or not CuPy is installed.  (dask and
    xarray look for CuPy themselves: that is theirs, and let through.)"""
    import subprocess
    import sys

    code = """
import sys
PACKAGE = %r
tried = []
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in ("cupy", "cupyx"):
            return None
        frame = sys._getframe(1)
        while frame.f_code.co_filename.startswith("<frozen") or "importlib" in frame.f_code.co_filename:
            frame = frame.f_back
        if frame.f_code.co_filename.startswith(PACKAGE):
            tried.append((name, frame.f_code.co_filename, frame.f_lineno))
            raise ImportError(f"refused: {name}")
        return None  # dask and xarray look for CuPy themselves when it is installed
sys.meta_path.insert(0, Refuse())
import numpy as np, pandas as pd, xarray as xr, dask_dgd
from dask_dgd.climate import ClimateRegressor
rng = np.random.default_rng(0)
X = rng.standard_normal((200, 3)); y = X.sum(1)
dask_dgd.LinearRegression(solver="gd", max_iter=5).fit(X, y).predict(X)
dask_dgd.LogisticRegression(solver="lbfgs").fit(X, y > 0).predict_proba(X)
r = pd.DataFrame({"user": rng.integers(0, 20, 300), "item": rng.integers(0, 15, 300), "rating": rng.random(300)})
dask_dgd.MatrixFactorization(n_components=2, max_iter=3).fit(r).predict(r)
t = pd.date_range("2000-01-01", periods=24, freq="MS")
ds = xr.Dataset({"x": (("time", "lat", "lon"), rng.random((24, 3, 4))), "y": (("time", "lat", "lon"), rng.random((24, 3, 4)))},
                coords={"time": t, "lat": [0.0, 10.0, 20.0], "lon": [0.0, 1.0, 2.0, 3.0]})
ClimateRegressor(["x"], "y", model="pointwise").fit(ds).predict(ds)
ClimateRegressor(["x"], "y", model="pooled", lags={"x": [1]}, solver="lbfgs").fit(ds).predict(ds)
assert not tried, tried
"""
    import dask_dgd

    package = str(pathlib.Path(dask_dgd.__file__).parent)
    subprocess.run([sys.executable, "-c", code % package], check=True, timeout=300)
