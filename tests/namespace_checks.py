"""End-to-end checks on blocks of another array namespace, and the data they use.

The linear checks below are shared by ``tests/test_array_namespaces.py`` (``array_api_strict`` blocks on a device of
their own: runs in every CI run, fails on any NumPy-only call or host/device mixing)
and ``tests/gpu/test_gpu_linear.py`` (CuPy blocks on a CUDA device).  A *backend* is
``(convert, is_native, rtol)``: ``convert`` turns a NumPy or dask array into the other
namespace, ``is_native(a)`` says whether a result block is of that namespace and on
that device, ``rtol`` is how close the fit must be to the NumPy fit.
"""

import dask.array as da
import numpy as np

import dask_dgd
from dask_dgd._backend import to_numpy

CHUNK = 250


def problem(kind, n=1000, p=5, seed=0):
    """``(X, y, sample_weight)`` of a regression, binary, multinomial or count problem."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    raw = X @ np.linspace(-1.0, 1.0, p) + 0.3
    if kind == "regression":
        y = raw + 0.1 * rng.standard_normal(n)
    elif kind == "binary":
        y = (rng.random(n) < 1 / (1 + np.exp(-raw))).astype(np.int64)
    elif kind == "multinomial":
        y = np.digitize(raw + 0.5 * rng.standard_normal(n), [-0.5, 0.8])
    else:
        y = rng.poisson(np.exp(0.3 * raw)).astype(np.float64)
    w = rng.uniform(0.5, 2.0, n)
    return X, y, w


#: (id, estimator class, problem, parameters, fit with sample weights, float32 X)
CASES = [
    ("linear-gd", dask_dgd.LinearRegression, "regression", {"solver": "gd"}, False, False),
    ("linear-gd-weights-float32", dask_dgd.LinearRegression, "regression", {"solver": "gd"}, True, True),
    ("linear-lbfgs-ridge", dask_dgd.LinearRegression, "regression", {"solver": "lbfgs", "alpha": 0.1}, False, False),
    ("linear-newton", dask_dgd.LinearRegression, "regression", {"solver": "newton"}, True, False),
    ("linear-sgd-adam", dask_dgd.LinearRegression, "regression",
     {"solver": "sgd", "batch_size": 64, "optimizer": "adam"}, False, False),
    ("linear-gd-lasso", dask_dgd.LinearRegression, "regression",
     {"solver": "gd", "alpha": 0.01, "l1_ratio": 1.0}, False, False),
    ("linear-gd-topk", dask_dgd.LinearRegression, "regression",
     {"solver": "gd", "compression": "topk"}, False, False),
    # local SGD averages per-group models, so its result depends on which blocks share a
    # worker (placement); one local plain-SGD step per round is a synchronous step,
    # equal whatever the grouping
    ("linear-local", dask_dgd.LinearRegression, "regression",
     {"solver": "gd", "mode": "local", "local_steps": 1, "optimizer": "sgd"}, False, False),
    ("logistic-gd", dask_dgd.LogisticRegression, "binary", {"solver": "gd"}, False, False),
    ("logistic-lbfgs-balanced", dask_dgd.LogisticRegression, "binary",
     {"solver": "lbfgs", "class_weight": "balanced"}, True, False),
    ("multinomial-lbfgs", dask_dgd.LogisticRegression, "multinomial", {"solver": "lbfgs"}, False, False),
    ("multinomial-sgd-early-stopping", dask_dgd.LogisticRegression, "multinomial",
     {"solver": "sgd", "batch_size": 64, "early_stopping": True}, False, False),
    ("poisson-lbfgs", dask_dgd.PoissonRegressor, "count", {"solver": "lbfgs"}, True, False),
    ("linear-cd-lasso", dask_dgd.LinearRegression, "regression",
     {"solver": "cd", "alpha": 0.01, "l1_ratio": 1.0}, True, False),
    ("poisson-cd-enet", dask_dgd.PoissonRegressor, "count", {"solver": "cd", "alpha": 0.01, "l1_ratio": 0.5},
     False, False),
    # the CV paths: the exact least-squares path (fold Gram matrices), IRLS-CD along the
    # path (the fold Gram matrices of each pass), the stacked proximal-gradient one
    ("elasticnet-cv-exact", dask_dgd.ElasticNetCV, "regression", {"alphas": 3, "cv": 3}, True, False),
    ("poisson-cv-cd", dask_dgd.PoissonRegressorCV, "count", {"alphas": [0.1, 0.01], "cv": 3}, False, False),
    ("logistic-cv-cd-enet", dask_dgd.LogisticRegressionCV, "binary", {"Cs": 3, "cv": 3, "l1_ratios": [0.5]},
     True, False),
    ("poisson-cv-stacked", dask_dgd.PoissonRegressorCV, "count", {"alphas": [0.1, 0.01], "cv": 3, "solver": "gd"},
     False, False),
    ("multinomial-cv", dask_dgd.LogisticRegressionCV, "multinomial", {"Cs": 2, "cv": 3}, True, False),
]
CASE_IDS = [c[0] for c in CASES]


def _dask(a, dtype=None):
    a = a if dtype is None else a.astype(dtype)
    chunks = (CHUNK,) + a.shape[1:]
    return da.from_array(a, chunks=chunks)


def blocks(client, x):
    """The computed blocks of a dask array, unconcatenated (dask can only concatenate
    NumPy-like blocks)."""
    return client.gather(client.compute(list(x.to_delayed().ravel())))


def check_fit_predict(client, case, convert, is_native, rtol):
    """Fit on converted blocks = fit on NumPy blocks; fitted attributes are NumPy;
    every prediction method returns blocks of the namespace equal to the NumPy ones."""
    _, cls, kind, params, weighted, f32 = case
    X, y, w = problem(kind)
    dtype = np.float32 if f32 else None
    if f32:  # float32 sums in another order (NumPy takes the fused kernel): float32 accuracy
        rtol = max(rtol, 1e-5)
    kw = {"max_iter": 40, "random_state": 0, "client": client, **params}
    fit_args = lambda conv: dict(sample_weight=conv(_dask(w))) if weighted else {}  # noqa: E731
    ref = cls(**kw).fit(_dask(X, dtype), _dask(y), **fit_args(lambda a: a))
    est = cls(**kw).fit(convert(_dask(X, dtype)), convert(_dask(y)), **fit_args(convert))
    for name in ("coef_", "intercept_"):
        got, want = getattr(est, name), getattr(ref, name)
        assert isinstance(got, np.ndarray) or isinstance(got, float), (name, type(got))
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max())
    if not f32:
        assert est.n_iter_ == ref.n_iter_
    Xd = convert(_dask(X, dtype))
    methods = ["predict"] + [m for m in ("predict_proba", "predict_log_proba", "decision_function")
                             if hasattr(est, m)]
    for method in methods:
        out = getattr(est, method)(Xd)
        got = blocks(client, out)
        assert all(is_native(b) for b in got), (method, {type(b) for b in got})
        want = getattr(est, method)(X.astype(dtype) if f32 else X)
        np.testing.assert_allclose(np.concatenate([to_numpy(b) for b in got]), want,
                                   rtol=max(rtol, 1e-5 if f32 else 1e-12), atol=1e-6 if f32 else 1e-10)
        assert out.shape == want.shape
    return est, ref


def climate_grid(T=24, Y=4, X=5, seed=0):
    """A small monthly (noleap) Dataset: a grid predictor ``a`` with a missing value, a
    time-only ``index``, a static ``orog`` and the target ``tas`` with a land cell."""
    import xarray as xr

    rng = np.random.default_rng(seed)
    time = xr.date_range("2000-01-01", periods=T, freq="MS", calendar="noleap", use_cftime=True)
    a = rng.normal(size=(T, Y, X))
    index = rng.normal(size=T)
    slope = 1.0 + rng.normal(0, 0.5, size=(Y, X))
    y = 280 + slope * a + 0.5 * index[:, None, None] + 0.1 * rng.normal(size=(T, Y, X))
    y[:, 0, 0] = np.nan  # a land cell
    a[5, 2, 3] = np.nan  # a missing observation
    return xr.Dataset(
        {"a": (("time", "lat", "lon"), a), "index": (("time",), index), "tas": (("time", "lat", "lon"), y),
         "orog": (("lat", "lon"), rng.normal(size=(Y, X)))},
        coords={"time": time, "lat": ("lat", np.linspace(-60, 60, Y), {"units": "degrees_north"}),
                "lon": np.arange(X) * 30.0},
    )


def spy_factorization_kernels(monkeypatch, check):
    """Record ``check(lu, gi, U, V)`` for every matrix-factorization kernel call on the
    shards (the test cluster's workers are threads of this process)."""
    from dask_dgd.losses import _factorization as kernels

    calls = []

    def spy(name):
        real = getattr(kernels, name)

        def wrapper(lu, gi, *args):
            U, V = (args[3], args[4]) if name == "bpr_sums" else (args[2], args[3])
            calls.append(check(lu, gi, U, V))
            return real(lu, gi, *args)

        return wrapper

    for name in ("explicit_sums", "bpr_sums", "wls_sums"):
        monkeypatch.setattr(kernels, name, spy(name))
    return calls
