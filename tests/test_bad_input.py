"""The bad-input table: one test per row, for every estimator family, NumPy and dask input.

Each row asserts either the exception (its type and its message: what is wrong, where,
the value received and the fix) or, where the input is usable, the documented behaviour
(e.g. a zero-row chunk: the fit equals the fit without it).  Rows that scikit-learn's own
validation answers for in-memory input expect scikit-learn's ``ValueError`` and message.

Families: linear (LinearRegression, LogisticRegression binary and multinomial,
PoissonRegressor), recommender (MatrixFactorization, ImplicitMatrixFactorization with
BPR and with confidence-weighted least squares) and climate (ClimateRegressor, pooled and
pointwise).  Dask input runs on the session ``client`` (passed as ``client=``); NumPy input
is fitted in process.
"""

import warnings

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from sklearn.exceptions import DataConversionWarning
from sklearn.metrics import accuracy_score

from dask_dgd import (
    ImplicitMatrixFactorization,
    LinearRegression,
    LogisticRegression,
    MatrixFactorization,
    PoissonRegressor,
)
from dask_dgd.climate import ClimateRegressor
from dask_dgd.exceptions import ChunkingError, DivergenceError, InputError

# ------------------------------------------------------------------- linear data
N, P, CHUNK = 40, 3, 10  # rows, features, dask row chunk (4 blocks); bad values go in row 25
BAD_ROW = 25
_rng = np.random.default_rng(0)
X = _rng.standard_normal((N, P))
TARGETS = {
    "linear": X @ np.array([1.0, -2.0, 0.5]) + 0.3 + 0.1 * _rng.standard_normal(N),
    "binary": (X[:, 0] + 0.7 * _rng.standard_normal(N) > 0).astype(np.int64),
    "multinomial": np.digitize(X[:, 0] + 0.5 * _rng.standard_normal(N), [-0.5, 0.5]).astype(np.int64),
    "poisson": _rng.poisson(np.exp(0.3 + 0.4 * X[:, 0])).astype(np.float64),
}
ESTIMATORS = {
    "linear": LinearRegression,
    "binary": LogisticRegression,
    "multinomial": LogisticRegression,
    "poisson": PoissonRegressor,
}
FAMILIES = list(ESTIMATORS)
REGRESSORS = ["linear", "poisson"]
CLASSIFIERS = ["binary", "multinomial"]
KINDS = ["numpy", "dask"]
#: settings for fits whose coefficients are compared
EXACT = dict(solver="lbfgs", tol=1e-10, max_iter=1000)


def make(family, kind, client, **params):
    est = ESTIMATORS[family](**params)
    return est.set_params(client=client) if kind == "dask" else est


def as_kind(kind, *arrays, chunks=CHUNK):
    """The arrays as given (numpy) or as dask arrays of ``chunks`` rows (dask)."""
    if kind == "numpy":
        return arrays if len(arrays) > 1 else arrays[0]
    out = tuple(None if a is None else da.from_array(a, chunks=(chunks,) + a.shape[1:]) for a in arrays)
    return out if len(out) > 1 else out[0]


def where(kind, name="X"):
    """The block holding row 25: the whole array in process, block 2 of 4 for dask; the
    shape is that of the array ``name`` there (X's 2-D, y's and sample_weight's 1-D),
    then the row in the block."""
    rows, row = (40, BAD_ROW) if kind == "numpy" else (10, BAD_ROW - 20)
    block = 0 if kind == "numpy" else 2
    shape = rf"shape \({rows}, 3\)" if name == "X" else rf"{name}'s shape \({rows},\)"
    return rf"block {block} \({shape}\), first at row {row} of the block"


def assert_same_fit(a, b, atol):
    np.testing.assert_allclose(np.asarray(a.coef_), np.asarray(b.coef_), rtol=0, atol=atol)
    np.testing.assert_allclose(np.asarray(a.intercept_), np.asarray(b.intercept_), rtol=0, atol=atol)


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


# ----------------------------------------------------- row: NaN / inf in X and y
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_nan_or_inf_in_X(family, kind, bad, client):
    Xb = X.copy()
    Xb[BAD_ROW, 1] = bad
    with pytest.raises(InputError, match=rf"Input X contains NaN or infinity in {where(kind)}; drop or impute those rows"):
        make(family, kind, client).fit(*as_kind(kind, Xb, TARGETS[family]))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_nan_in_y(family, kind, client):
    yb = TARGETS[family].astype(np.float64)
    yb[BAD_ROW] = np.nan
    est = make(family, kind, client)
    if family in CLASSIFIERS and kind == "numpy":  # scikit-learn's check of class labels
        with pytest.raises(ValueError, match="Input y contains NaN"):
            est.fit(X, yb)
    else:
        with pytest.raises(InputError, match=rf"Input y contains NaN or infinity in {where(kind, 'y')}; drop those rows"):
            est.fit(*as_kind(kind, X, yb))


# ------------------------------------------------------------- row: wrong dtypes
@pytest.mark.parametrize("dtype", ["str", "object", "complex"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_non_numeric_X(family, kind, dtype, client):
    if dtype == "complex":
        Xb = X.astype(np.complex128)
    else:
        Xb = np.full((N, P), "a", dtype=object if dtype == "object" else "<U1")
    est = make(family, kind, client)
    if kind == "numpy":  # scikit-learn's check_array
        message = "Complex data not supported" if dtype == "complex" else r"could not convert string to float: (np\.str_\()?'a'"
        with pytest.raises(ValueError, match=message):
            est.fit(Xb, TARGETS[family])
    else:
        shown = {"str": "<U1", "object": "object", "complex": "complex128"}[dtype]
        with pytest.raises(InputError, match=rf"X must be numeric; got dtype {shown}; encode non-numeric features first"):
            est.fit(*as_kind(kind, Xb, TARGETS[family]))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_numbers_stored_as_strings_or_objects(family, kind, client):
    """Documented: in-memory numbers stored as str/object are converted as scikit-learn
    does (same fit as the floats); a dask array of them is refused before any work."""
    as_str, as_obj = X.astype(str), X.astype(object)
    if kind == "numpy":
        ref = make(family, kind, client, **EXACT).fit(X, TARGETS[family])
        for Xs in (as_str, as_obj):
            assert_same_fit(make(family, kind, client, **EXACT).fit(Xs, TARGETS[family]), ref, atol=1e-12)
            np.testing.assert_array_equal(ref.predict(Xs), ref.predict(X))
    else:
        for Xs, shown in ((as_str, "<U"), (as_obj, "object")):
            with pytest.raises(InputError, match=rf"X must be numeric; got dtype {shown}"):
                make(family, kind, client).fit(*as_kind(kind, Xs, TARGETS[family]))
        frame = dd.from_pandas(pd.DataFrame(X, columns=["a", "b", "c"]).assign(c=list("xyz") * 13 + ["x"]), npartitions=2)
        with pytest.raises(InputError, match=r"X column 'c' holds text \(dtype .*\); training needs numbers: one-hot encode "
                                             r"categories, e.g. X.categorize\(columns=\['c'\]\) and then dask_ml.preprocessing.DummyEncoder\(\); "
                                             r"or, for many categories, hash them on the workers: dask_dgd.FeatureHasher\(\) in a "
                                             r"Pipeline; convert numbers stored as text with dd.to_numeric\(X\['c'\]\)"):
            make(family, kind, client).fit(frame, da.from_array(TARGETS[family], chunks=20))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", REGRESSORS)
def test_non_numeric_y_for_a_regressor(family, kind, client):
    ys = np.array(["a"] * N)
    est = make(family, kind, client)
    if kind == "numpy":
        with pytest.raises(ValueError, match="dtype='numeric' is not compatible with arrays of bytes/strings"):
            est.fit(X, ys)
    else:
        name = ESTIMATORS[family].__name__
        with pytest.raises(InputError, match=rf"y must be numeric for {name}; got dtype <U1: convert it, e.g. y.astype\(float\)"):
            est.fit(*as_kind(kind, X, ys))


# ------------------------------------------------------------ row: empty data
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_empty_data(family, kind, client):
    name = ESTIMATORS[family].__name__
    est = make(family, kind, client)
    error = ValueError if kind == "numpy" else InputError  # scikit-learn's message, our type for dask
    with pytest.raises(error, match=rf"Found array with 0 sample\(s\) \(shape=\(0, 3\)\) while a minimum of 1 is required by {name}"):
        est.fit(*as_kind(kind, X[:0], TARGETS[family][:0]))
    with pytest.raises(error, match=rf"Found array with 0 feature\(s\) \(shape=\(40, 0\)\) while a minimum of 1 is required by {name}"):
        est.fit(*as_kind(kind, X[:, :0], TARGETS[family]))


# ------------------------------------------------- row: a zero-row chunk (works)
@pytest.mark.parametrize("rebalance", ["auto", False])
@pytest.mark.parametrize("family", FAMILIES)
def test_zero_row_chunk_in_the_middle(family, rebalance, client):
    """Documented: an empty block contributes nothing; the fit equals the fit without it."""
    y = TARGETS[family]
    chunks = (10, 10, 0, 10, 10)
    Xz, yz = da.from_array(X, chunks=(chunks, P)), da.from_array(y, chunks=(chunks,))
    assert 0 in Xz.chunks[0]
    w = np.linspace(0.5, 2.0, N)
    with_empty = make(family, "dask", client, rebalance=rebalance, **EXACT).fit(
        Xz, yz, sample_weight=da.from_array(w, chunks=(chunks,)))
    without = make(family, "dask", client, rebalance=rebalance, **EXACT).fit(*as_kind("dask", X, y), sample_weight=as_kind("dask", w))
    assert_same_fit(with_empty, without, atol=1e-8)
    in_process = make(family, "numpy", None, **EXACT).fit(X, y, sample_weight=w)
    assert_same_fit(with_empty, in_process, atol=1e-6)
    pred = with_empty.predict(Xz).compute()
    assert pred.shape == (N,)
    if family in REGRESSORS:
        np.testing.assert_allclose(pred, in_process.predict(X), atol=1e-5)
    else:
        np.testing.assert_allclose(with_empty.predict_proba(Xz).compute(), in_process.predict_proba(X), atol=1e-5)


# ----------------------------------------------- row: unknown chunk sizes (works)
@pytest.mark.parametrize("source", ["boolean-index", "dataframe-values"])
@pytest.mark.parametrize("family", FAMILIES)
def test_unknown_chunk_sizes(family, source, client):
    """Documented: unknown row-chunk sizes are computed on the cluster; y with other
    (or unknown) chunks is matched to X's blocks; the fit is that of the same rows."""
    y = TARGETS[family]
    keep = np.arange(N) != 7
    if source == "boolean-index":
        mask = da.from_array(keep, chunks=CHUNK)
        Xu, yu = da.from_array(X, chunks=(CHUNK, P))[mask], da.from_array(y, chunks=CHUNK)[mask]
        rows = keep
    else:
        Xu = dd.from_pandas(pd.DataFrame(X), npartitions=3).values
        yu = da.from_array(y, chunks=CHUNK)  # known chunks that differ from X's
        rows = np.ones(N, dtype=bool)
    assert np.isnan(Xu.shape[0])
    fitted = make(family, "dask", client, **EXACT).fit(Xu, yu)
    ref = make(family, "numpy", None, **EXACT).fit(X[rows], y[rows])
    assert_same_fit(fitted, ref, atol=1e-6)
    pred = fitted.predict(Xu).compute()
    assert pred.shape == (rows.sum(),)


# ----------------------------------------- row: mismatched X / y / weight chunking
@pytest.mark.parametrize("family", FAMILIES)
def test_mismatched_row_chunking_is_rechunked(family, client):
    """Documented: y and sample_weight are rechunked to X's row blocks (no error)."""
    y, w = TARGETS[family], np.linspace(0.5, 2.0, N)
    odd = make(family, "dask", client, **EXACT).fit(
        da.from_array(X, chunks=(CHUNK, P)), da.from_array(y, chunks=15), sample_weight=da.from_array(w, chunks=7))
    assert odd.skew_report_ is not None
    same = make(family, "dask", client, **EXACT).fit(*as_kind("dask", X, y), sample_weight=as_kind("dask", w))
    assert_same_fit(odd, same, atol=1e-10)
    mixed = make(family, "dask", client, **EXACT).fit(da.from_array(X, chunks=(CHUNK, P)), y, sample_weight=w)
    assert_same_fit(mixed, same, atol=1e-10)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_mismatched_lengths(family, kind, client):
    y = TARGETS[family]
    est = make(family, kind, client)
    if kind == "numpy":
        with pytest.raises(ValueError, match=r"Found input variables with inconsistent numbers of samples: \[40, 39\]"):
            est.fit(X, y[:-1])
        with pytest.raises(InputError, match=r"sample_weight must have shape \(40,\) like y; got \(39,\)"):
            est.fit(X, y, sample_weight=np.ones(N - 1))
        with pytest.raises(InputError, match="y is a dask collection but X is not; pass both as dask collections"):
            est.fit(X, da.from_array(y, chunks=CHUNK))
    else:
        Xd = da.from_array(X, chunks=(CHUNK, P))
        with pytest.raises(InputError, match="X and y have different lengths: 40 and 39"):
            est.fit(Xd, da.from_array(y[:-1], chunks=13))
        with pytest.raises(InputError, match="X and sample_weight have different lengths: 40 and 39"):
            est.fit(Xd, da.from_array(y, chunks=CHUNK), sample_weight=da.ones(N - 1, chunks=CHUNK))
        # unknown chunk sizes on both sides: the mismatch is found block by block
        Xu = dd.from_pandas(pd.DataFrame(X), npartitions=3).values
        yu = dd.from_pandas(pd.Series(y[:-1]), npartitions=3).values
        with pytest.raises(InputError, match=r"X and y have different numbers of rows in block 0: X has 14, y has 13"):
            est.fit(Xu, yu)


# ------------------------------------------------------------ row: sample weights
@pytest.mark.parametrize("bad", [-1.0, np.nan, np.inf], ids=["negative", "nan", "inf"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_negative_nan_or_inf_sample_weight(family, kind, bad, client):
    w = np.ones(N)
    w[BAD_ROW] = bad
    with pytest.raises(InputError, match=rf"sample_weight contains negative, NaN or infinite values in {where(kind, 'sample_weight')}; "
                                         "weights must be finite and non-negative"):
        make(family, kind, client).fit(*as_kind(kind, X, TARGETS[family]), sample_weight=as_kind(kind, w))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_zero_sample_weights(family, kind, client):
    y = TARGETS[family]
    with pytest.raises(InputError, match="Sample weights must contain at least one non-zero number: the total sample weight is zero"):
        make(family, kind, client).fit(*as_kind(kind, X, y), sample_weight=as_kind(kind, np.zeros(N)))
    # documented: a zero weight drops the row (the fit equals the fit without those rows)
    w = np.ones(N)
    w[28:34] = 0.0
    zeroed = make(family, kind, client, **EXACT).fit(*as_kind(kind, X, y), sample_weight=as_kind(kind, w))
    keep = w > 0
    dropped = make(family, "numpy", None, **EXACT).fit(X[keep], y[keep])
    assert_same_fit(zeroed, dropped, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_non_numeric_or_huge_sample_weight(family, kind, client):
    est = make(family, kind, client)
    with pytest.raises(InputError, match="sample_weight must be numeric; got dtype <U1"):
        est.fit(*as_kind(kind, X, TARGETS[family]), sample_weight=as_kind(kind, np.array(["a"] * N)))
    w = np.ones(N)
    w[BAD_ROW] = 1e300
    with pytest.raises(InputError, match=rf"Input sample_weight has values up to 1e\+300 in absolute value in {where(kind, 'sample_weight')}; "
                                         r"above 1e\+102 \(float64\) the loss and its gradient overflow: divide the weights"):
        est.fit(*as_kind(kind, X, TARGETS[family]), sample_weight=as_kind(kind, w))


# ----------------------------------------- row: labels unseen at fit (predict/score)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", CLASSIFIERS)
def test_labels_unseen_at_fit(family, kind, client):
    """Documented (scikit-learn's behaviour): predict returns only ``classes_``; score is
    the accuracy, where a label unseen at fit is always an error; labels of another
    type are scikit-learn's ValueError."""
    y = TARGETS[family]
    est = make(family, kind, client).fit(*as_kind(kind, X, y))
    np.testing.assert_array_equal(est.classes_, np.unique(y))
    pred = est.predict(as_kind(kind, X))
    pred = np.asarray(pred.compute() if kind == "dask" else pred)
    assert set(pred.tolist()) <= set(est.classes_.tolist())
    y_new = y.copy()
    y_new[:10] = 7  # never seen
    expected = accuracy_score(y_new, pred)
    assert expected <= 30 / 40
    assert est.score(*as_kind(kind, X, y_new)) == pytest.approx(expected)
    with pytest.raises(ValueError, match=r"Mix of label input types \(string and number\)"):
        est.score(as_kind(kind, X), np.array(["a"] * N))


@pytest.mark.parametrize("case", ["missing", "mixed", "continuous", "one-class"])
@pytest.mark.parametrize("kind", KINDS)
def test_bad_class_labels(kind, case, client):
    labels = np.array(["no", "yes"] * (N // 2), dtype=object)
    if case == "missing":
        labels[BAD_ROW] = None
        message = (r"y has 1 missing label\(s\) \(None or NaN\), at row\(s\) 25; drop those rows" if kind == "numpy" else
                   r"y has 1 missing label\(s\) \(None or NaN\) in block 2 \(y's shape \(10,\)\), at row\(s\) 5 of the block")
        error = InputError
    elif case == "mixed":
        labels[BAD_ROW] = 3
        message, error = r"y mixes label types that cannot be ordered .*; use one type for all labels, e.g. y.astype\(str\)", InputError
    elif case == "continuous":
        labels = X[:, 0]
        message, error = "Unknown label type: continuous", (ValueError if kind == "numpy" else InputError)
    else:
        labels = np.full(N, "yes", dtype=object)
        message, error = "needs samples of at least 2 classes in the data, but the data contains only one class: 'yes'", InputError
    with pytest.raises(error, match=message):
        make("binary", kind, client).fit(*as_kind(kind, X, labels))


@pytest.mark.parametrize("kind", KINDS)
def test_poisson_target_outside_its_domain(kind, client):
    y = TARGETS["poisson"].copy()
    y[BAD_ROW] = -0.5
    with pytest.raises(InputError, match=r"PoissonRegressor requires non-negative y \(counts or rates\); the smallest value is -0.5"):
        make("poisson", kind, client).fit(*as_kind(kind, X, y))
    with pytest.raises(InputError, match=r"PoissonRegressor requires y with a positive \(weighted\) sum"):
        make("poisson", kind, client).fit(*as_kind(kind, X, np.zeros(N)))


# ------------------------------------------- row: wrong number of features at predict
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_wrong_number_of_features_at_predict(family, kind, client):
    name = ESTIMATORS[family].__name__
    est = make(family, kind, client).fit(*as_kind(kind, X, TARGETS[family]))
    error = ValueError if kind == "numpy" else InputError
    for bad in (X[:, :2], np.hstack([X, X[:, :1]])):
        with pytest.raises(error, match=rf"X has {bad.shape[1]} features, but {name} is expecting 3 features as input"):
            est.predict(as_kind(kind, bad))
    if kind == "dask":  # a DataFrame must bring the columns of fit, in order
        frame = dd.from_pandas(pd.DataFrame(X, columns=["a", "b", "c"]), npartitions=2)
        named = make(family, kind, client).fit(frame, da.from_array(TARGETS[family], chunks=20))
        with pytest.raises(InputError, match=r"The feature names should match those that were passed during fit: "
                                             r"got \['a', 'c', 'b'\], expected \['a', 'b', 'c'\]"):
            named.predict(frame[["a", "c", "b"]])


# ------------------------------------------------------------------ row: 1-D X
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_one_dimensional_X(family, kind, client):
    if kind == "numpy":
        error, message = ValueError, r"(?s)Expected 2D array, got 1D array instead.*Reshape your data"
    else:
        error, message = InputError, r"X must be 2-D; got an array of shape \(40,\): \(n_samples, n_features\) is needed, use X.reshape\(-1, 1\)"
    with pytest.raises(error, match=message):
        make(family, kind, client).fit(*as_kind(kind, X[:, 0], TARGETS[family]))
    fitted = make(family, kind, client).fit(*as_kind(kind, X[:, :1], TARGETS[family]))
    with pytest.raises(error, match=message):
        fitted.predict(as_kind(kind, X[:, 0]))


# ------------------------------------------------------- row: huge values (overflow)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_huge_values_are_refused(family, kind, client):
    """Values whose products overflow float64 (above 1e102) are refused before training,
    naming the block: otherwise L-BFGS returned NaN coefficients without an error."""
    Xh = X.copy()
    Xh[BAD_ROW, 0] = -1e300
    with pytest.raises(InputError, match=rf"Input X has values up to 1e\+300 in absolute value in {where(kind)}; above "
                                         r"1e\+102 \(float64\) the loss and its gradient overflow: scale the features"):
        make(family, kind, client).fit(*as_kind(kind, Xh, TARGETS[family]))
    with pytest.raises(InputError, match=r"Input X has values up to \d(\.\d+)?e\+300"):
        make(family, kind, client).fit(*as_kind(kind, X * 1e300, TARGETS[family]))
    if family in REGRESSORS:
        yh = TARGETS[family].copy()
        yh[BAD_ROW] = 1e300
        with pytest.raises(InputError, match=rf"Input y has values up to 1e\+300 in absolute value in {where(kind, 'y')}; .* "
                                             r"scale the target"):
            make(family, kind, client).fit(*as_kind(kind, X, yh))
    # float32 data overflows much sooner: its limit is 1e12
    with pytest.raises(InputError, match=r"Input X has values up to 1e\+15 .* above 1e\+12 \(float32\)"):
        make(family, kind, client).fit(*as_kind(kind, np.where(np.arange(N)[:, None] == BAD_ROW, 1e15, X).astype(np.float32),
                                               TARGETS[family]))


@pytest.mark.parametrize("family", FAMILIES)
def test_large_values_below_the_limit_fit_without_nan(family):
    """Documented: below the limit the fit never produces NaN; the logistic and softmax
    losses are computed stably (log-sum-exp), so huge linear predictors during the line
    search give finite losses (the fit may stop early with a ConvergenceWarning)."""
    est = quiet(make(family, "numpy", None).fit, X * 1e50, TARGETS[family])
    assert np.all(np.isfinite(est.coef_)) and np.all(np.isfinite(est.intercept_))
    # every step's objective is a number (a Poisson trial step may overflow to +inf)
    assert not est.history_["loss"].isna().any() and np.isfinite(est.history_["loss"].iloc[0])
    with np.errstate(over="ignore"):
        pred = est.predict(X * 1e50)
    assert not np.any(np.isnan(np.asarray(pred, dtype=np.float64)))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_predictions_on_huge_values_are_not_nan(family, kind, client):
    """Documented: probabilities stay in [0, 1] (stable sigmoid/softmax); Poisson means
    overflow to +inf, never NaN."""
    est = make(family, kind, client).fit(*as_kind(kind, X, TARGETS[family]))
    Xh = as_kind(kind, X * 1e300)
    with np.errstate(over="ignore"):
        pred = np.asarray(est.predict(Xh) if kind == "numpy" else est.predict(Xh).compute(), dtype=np.float64)
        assert not np.any(np.isnan(pred))
        if family in CLASSIFIERS:
            proba = est.predict_proba(Xh)
            proba = proba if kind == "numpy" else proba.compute()
            assert np.all((proba >= 0) & (proba <= 1)) and np.allclose(proba.sum(axis=1), 1.0)
        if family == "poisson":
            assert np.all((pred == np.inf) | (pred == 0) | np.isfinite(pred)) and np.any(pred == np.inf)


# ------------------------------------------------------------- row: y of wrong shape
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_two_dimensional_y(family, kind, client):
    y = TARGETS[family]
    name = ESTIMATORS[family].__name__
    if kind == "numpy":
        error, message = ValueError, r"y should be a 1d array, got an array of shape \(40, 2\) instead"
    else:
        error, message = InputError, rf"y must be 1-D \(n_samples,\); got a dask array of shape \(40, 2\): {name} fits one target"
    with pytest.raises(error, match=message):
        make(family, kind, client).fit(*as_kind(kind, X, np.column_stack([y, y])))
    # documented: a column vector is raveled with scikit-learn's DataConversionWarning
    with pytest.warns(DataConversionWarning, match="A column-vector y was passed when a 1d array was expected"):
        column = make(family, kind, client, **EXACT).fit(*as_kind(kind, X, y[:, None]))
    assert_same_fit(column, make(family, kind, client, **EXACT).fit(*as_kind(kind, X, y)), atol=1e-12)


# ---------------------------------------------------------- row: column-chunked X
@pytest.mark.parametrize("family", FAMILIES)
def test_X_chunked_along_columns(family, client):
    Xc = da.from_array(X, chunks=(CHUNK, 2))
    message = r"X is chunked along columns \(2 column chunks: \(2, 1\)\); training needs whole rows in each block; use X.rechunk\(\{1: -1\}\)"
    with pytest.raises(ChunkingError, match=message):
        make(family, "dask", client).fit(Xc, da.from_array(TARGETS[family], chunks=CHUNK))
    fitted = make(family, "dask", client).fit(*as_kind("dask", X, TARGETS[family]))
    with pytest.raises(ChunkingError, match=message):
        fitted.predict(Xc)
    np.testing.assert_array_equal(fitted.predict(Xc.rechunk({1: -1})).compute(), fitted.predict(as_kind("dask", X)).compute())


# -------------------------------------------------------- row: NaN in X at predict
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_nan_in_X_at_predict(family, kind, client):
    """NaN rows at predict are an error for dask input too (they used to give NaN
    predictions, and for a classifier silently ``classes_[0]``)."""
    est = make(family, kind, client).fit(*as_kind(kind, X, TARGETS[family]))
    Xb = X.copy()
    Xb[BAD_ROW, 2] = np.nan
    methods = ["predict"] + (["predict_proba", "decision_function"] if family in CLASSIFIERS else [])
    for method in methods:
        if kind == "numpy":
            with pytest.raises(ValueError, match="Input X contains NaN"):
                getattr(est, method)(Xb)
        else:
            lazy = getattr(est, method)(as_kind(kind, Xb))  # lazy: the error comes when computed
            with pytest.raises(InputError, match=r"Input X contains NaN or infinity in row block 2 \(rows 20 to 29\); "
                                                 "predictions need finite features: drop or impute those rows"):
                lazy.compute()


# ================================================================ recommenders
RATINGS = pd.DataFrame({
    "user": [1, 1, 2, 2, 3, 3, 4, 4],
    "item": [1, 2, 1, 3, 2, 3, 1, 4],
    "rating": [1.0, 2.0, 3.0, 4.0, 5.0, 1.0, 2.0, 4.0],
})
RECOMMENDERS = {
    "explicit": lambda **k: MatrixFactorization(n_components=2, max_iter=3, tol=0, random_state=0, **k),
    "bpr": lambda **k: ImplicitMatrixFactorization(n_components=2, loss="bpr", alpha=0.01, max_iter=3, tol=0,
                                                   random_state=0, **k),
    "wls": lambda **k: ImplicitMatrixFactorization(n_components=2, loss="wls", alpha=0.01, rating_col="rating",
                                                   max_iter=3, tol=0, random_state=0, **k),
    # the shipped default (alpha="auto", n_components="auto"), but for a short fit
    "implicit-default": lambda **k: ImplicitMatrixFactorization(max_iter=5, random_state=0, **k),
}
FRAMES = ["pandas", "dask"]


def rec(model, kind, client):
    return RECOMMENDERS[model](**({"client": client} if kind == "dask" else {}))


def frame(kind, df):
    return df if kind == "pandas" else dd.from_pandas(df, npartitions=2)


@pytest.mark.parametrize("bad", [np.nan, np.inf], ids=["nan", "inf"])
@pytest.mark.parametrize("kind", FRAMES)
@pytest.mark.parametrize("model", list(RECOMMENDERS))
def test_recommender_nan_ratings(model, kind, bad, client):
    df = RATINGS.assign(rating=[1.0, bad, 3.0, 4.0, 5.0, 1.0, 2.0, 4.0])
    if model in ("bpr", "implicit-default"):  # documented: rating_col=None ignores the column entirely
        fitted = rec(model, kind, client).fit(frame(kind, df))
        ref = rec(model, "pandas", client).fit(RATINGS.drop(columns="rating"))
        np.testing.assert_allclose(fitted.item_factors_, ref.item_factors_, atol=1e-10)
        with pytest.raises(InputError, match="1 values of the 'rating' column are NaN or infinite"):
            rec(model, kind, client).set_params(rating_col="rating", max_iter=1).fit(frame(kind, df))
        return
    with pytest.raises(InputError, match="1 values of the 'rating' column are NaN or infinite; drop or fill them before fitting"):
        rec(model, kind, client).fit(frame(kind, df))


@pytest.mark.parametrize("column", ["user", "item"])
@pytest.mark.parametrize("kind", FRAMES)
@pytest.mark.parametrize("model", list(RECOMMENDERS))
def test_recommender_missing_ids(model, kind, column, client):
    if column == "user":  # string ids, one None
        df = RATINGS.assign(user=[f"u{u}" if r != 3 else None for r, u in enumerate(RATINGS["user"])])
    else:  # numeric ids, one NaN
        df = RATINGS.assign(item=RATINGS["item"].astype(float).where(RATINGS.index != 3))
    with pytest.raises(InputError, match=r"1 user or item ids are missing \(NaN/None\); drop those rows before fitting"):
        rec(model, kind, client).fit(frame(kind, df))
    pairs = np.array(RATINGS[["user", "item"]], dtype=float)
    pairs[3, 0] = np.nan
    with pytest.raises(InputError, match=r"1 user or item ids are missing"):
        rec(model, "pandas", client).fit(pairs, RATINGS["rating"].to_numpy())


@pytest.mark.parametrize("kind", FRAMES)
@pytest.mark.parametrize("model", list(RECOMMENDERS))
def test_recommender_empty_frame(model, kind, client):
    with pytest.raises(InputError, match=r"the ratings are empty \(0 rows\); fit needs at least one rating"):
        rec(model, kind, client).fit(frame(kind, RATINGS.iloc[:0]))


@pytest.mark.parametrize("kind", FRAMES)
@pytest.mark.parametrize("model", list(RECOMMENDERS))
def test_recommender_negative_strengths(model, kind, client):
    df = RATINGS.assign(rating=[1.0, -1.0, 3.0, 4.0, 5.0, 1.0, 2.0, 4.0])
    if model == "wls":
        with pytest.raises(InputError, match=r"1 values of the 'rating' column are negative \(the smallest: -1\); "
                                             r"confidence-weighted least squares needs strengths >= 0 \(confidence = 1 \+ "
                                             r"confidence_scale \* strength\); drop those rows"):
            rec(model, kind, client).fit(frame(kind, df))
    else:  # documented: explicit ratings may be any real number; BPR ignores them
        fitted = quiet(rec(model, kind, client).fit, frame(kind, df))
        assert np.all(np.isfinite(fitted.item_factors_))
        if model == "explicit":
            assert fitted.global_mean_ == pytest.approx(df["rating"].mean())


@pytest.mark.parametrize("kind", FRAMES)
@pytest.mark.parametrize("model", list(RECOMMENDERS))
def test_recommender_unknown_ids_at_predict(model, kind, client):
    """Documented fallback: an unknown (or missing) user/item contributes nothing."""
    fitted = quiet(rec(model, kind, client).fit, frame(kind, RATINGS))
    pairs = pd.DataFrame({"user": [1.0, 99.0, 1.0, 99.0, np.nan], "item": [1.0, 1.0, 99.0, 99.0, 1.0]})
    pred = fitted.predict(frame(kind, pairs))
    pred = np.asarray(pred if kind == "pandas" else pred.compute())
    u, i = 0, 0  # user 1 and item 1 are the first ids
    if model == "explicit":
        mu = fitted.global_mean_
        expected = [mu + fitted.user_bias_[u] + fitted.item_bias_[i] + fitted.user_factors_[u] @ fitted.item_factors_[i],
                    mu + fitted.item_bias_[i], mu + fitted.user_bias_[u], mu, mu + fitted.item_bias_[i]]
    elif model == "bpr":
        expected = [fitted.item_bias_[i] + fitted.user_factors_[u] @ fitted.item_factors_[i],
                    fitted.item_bias_[i], 0.0, 0.0, fitted.item_bias_[i]]
    else:
        expected = [fitted.user_factors_[u] @ fitted.item_factors_[i], 0.0, 0.0, 0.0, 0.0]
    np.testing.assert_allclose(pred, expected, atol=1e-12)
    with pytest.raises(InputError, match=r"1 user\(s\) were not seen in fit: 99.0; predict\(\) scores unknown users with the "
                                         "bias fallback, recommend/similar_items need known ones"):
        fitted.recommend([99.0])


@pytest.mark.parametrize("kind", FRAMES)
@pytest.mark.parametrize("model", ["explicit", "wls"])
def test_recommender_non_numeric_ratings(model, kind, client):
    for values in (list("abcdefgh"), [True, False] * 4):
        with pytest.raises(InputError, match=r"the 'rating' column must be numeric; got dtype (str|string|object|bool)"):
            rec(model, kind, client).fit(frame(kind, RATINGS.assign(rating=values)))


@pytest.mark.parametrize("model", list(RECOMMENDERS))
def test_recommender_bad_shapes_and_columns(model, client):
    pairs, r = RATINGS[["user", "item"]].to_numpy(), RATINGS["rating"].to_numpy()
    with pytest.raises(InputError, match=r"X must be a DataFrame or an \(n, 2\) array of \(user, item\) pairs; got shape \(8, 3\)"):
        rec(model, "pandas", client).fit(RATINGS.to_numpy(), r)
    with pytest.raises(InputError, match=r"X must be a DataFrame or an \(n, 2\) array .*; got shape \(8,\)"):
        rec(model, "pandas", client).fit(pairs[:, 0], r)
    for kind, X_pairs in (("pandas", pairs), ("dask", da.from_array(pairs, chunks=(3, 2)))):
        # dask pairs with a y of another length used to fail inside dask ("Chunks do not add up")
        with pytest.raises(InputError, match=r"y must be 1-D with one value per row of X \(8\); got shape \(7,\)"):
            rec(model, kind, client).fit(X_pairs, r[:-1])
    with pytest.raises(InputError, match=r"X has no column 'item' \(columns: \['user', 'rating'\]\); name the columns with "
                                         r"user_col=..., item_col=..."):
        rec(model, "dask", client).fit(frame("dask", RATINGS.drop(columns="item")))


@pytest.mark.parametrize("kind", FRAMES)
def test_recommender_huge_ratings(kind, client):
    """Documented: ratings so large that the squared error overflows stop the fit with a
    DivergenceError at the first step (confidence-weighted strengths stay finite: solver
    "auto" takes gradient steps when the squares of the ratings overflow)."""
    huge = RATINGS.assign(rating=[1e300, 2.0, 3.0, 4.0, 5.0, 1.0, 2.0, 4.0])
    with pytest.raises(DivergenceError, match=r"the objective is not finite at the initial parameters \(loss=inf\)"):
        rec("explicit", kind, client).fit(frame(kind, huge))
    wls = quiet(rec("wls", kind, client).fit, frame(kind, huge))
    assert np.all(np.isfinite(wls.item_factors_)) and np.all(np.isfinite(wls.user_factors_))


@pytest.mark.parametrize("model", list(RECOMMENDERS))
def test_recommender_empty_partition(model, client):
    """Documented: an empty partition of a dask frame changes nothing."""
    parts = [dd.from_pandas(RATINGS.iloc[:4], npartitions=1), dd.from_pandas(RATINGS.iloc[:0], npartitions=1),
             dd.from_pandas(RATINGS.iloc[4:], npartitions=1)]
    with_empty = dd.concat(parts)
    assert with_empty.npartitions == 3
    a = quiet(rec(model, "dask", client).fit, with_empty)
    b = quiet(rec(model, "pandas", client).fit, RATINGS)
    np.testing.assert_allclose(a.item_factors_, b.item_factors_, atol=1e-10)
    np.testing.assert_allclose(a.user_factors_, b.user_factors_, atol=1e-10)


# ===================================================================== climate
MODELS = ["pooled", "pointwise"]


def climate_grid(T=24, Y=3, Xn=4, chunks=None):
    rng = np.random.default_rng(1)
    time = xr.date_range("2000-01-01", periods=T, freq="MS", calendar="noleap", use_cftime=True)
    a = rng.normal(size=(T, Y, Xn))
    index = rng.normal(size=T)
    tas = 280 + 1.5 * a + 0.5 * index[:, None, None] + 0.1 * rng.normal(size=(T, Y, Xn))
    ds = xr.Dataset(
        {"a": (("time", "lat", "lon"), a), "index": (("time",), index), "tas": (("time", "lat", "lon"), tas)},
        coords={"time": time, "lat": ("lat", np.linspace(-40, 40, Y), {"units": "degrees_north"}),
                "lon": np.arange(Xn) * 30.0},
    )
    return ds.chunk(chunks or {"time": 12, "lat": 2, "lon": 2})


def climate(model, client, features=("a", "index"), **params):
    extra = dict(solver="lbfgs", tol=1e-10, max_iter=500) if model == "pooled" else {}
    return ClimateRegressor(list(features), "tas", model=model, client=client, **extra, **params)


@pytest.mark.parametrize("model", MODELS)
def test_climate_missing_variables(model, client):
    ds = climate_grid()
    for features, target in ((["pr"], "tas"), (["a"], "pr")):
        with pytest.raises(InputError, match=r"the Dataset has no variable 'pr' \(variables: \['a', 'index', 'tas'\]\)"):
            ClimateRegressor(features, target, model=model, client=client).fit(ds)
    fitted = climate(model, client).fit(ds)
    with pytest.raises(InputError, match=r"the Dataset has no variable 'index' \(variables: \['a', 'tas'\]\)"):
        fitted.predict(ds.drop_vars("index"))
    with pytest.raises(InputError, match="expected an xarray Dataset; got ndarray"):
        climate(model, client).fit(np.zeros((3, 3)))


@pytest.mark.parametrize("lacking", [("time",), ("lat",), ("lat", "lon")])
@pytest.mark.parametrize("model", MODELS)
def test_climate_target_lacking_a_sample_dim(model, lacking, client):
    ds = climate_grid()
    ds = ds.assign(tas=ds["tas"].isel(dict.fromkeys(lacking, 0), drop=True))
    with pytest.raises(InputError, match=rf"the target 'tas' has dimensions \[.*\] and lacks the sample dimension\(s\) "
                                         rf"\[{', '.join(repr(d) for d in lacking)}\]: a target must vary over every sample "
                                         r"dimension \['time', 'lat', 'lon'\]"):
        climate(model, client).fit(ds)


@pytest.mark.parametrize("model", MODELS)
def test_climate_features_of_mismatched_dims(model, client):
    ds = climate_grid()
    with pytest.raises(InputError, match=r"variable 'a' has dimensions \['member', 'time', 'lat', 'lon'\]; \['member'\] are "
                                         r"not sample dimensions .*: select or reduce them first \(e.g. ds.isel\(member=0\)\)"):
        climate(model, client).fit(ds.assign(a=ds["a"].expand_dims(member=2)))
    station = xr.DataArray(np.zeros((24, 3)), dims=("time", "station"))
    with pytest.raises(InputError, match=r"variable 'b' has dimensions \['time', 'station'\]; \['station'\] are not sample"):
        climate(model, client, features=("a", "b")).fit(ds.assign(b=station))
    # documented: a feature on a subset of the sample dims is broadcast to every cell
    lat_only = ds.assign(b=ds["lat"] * 0.01)
    fitted = climate(model, client, features=("a", "b")).fit(lat_only)
    assert fitted.feature_names_ == ["a", "b"]
    assert np.all(np.isfinite(np.asarray(fitted.predict(lat_only).values)))


@pytest.mark.parametrize("what", ["target NaN", "feature NaN", "feature inf"])
@pytest.mark.parametrize("model", MODELS)
def test_climate_all_masked(model, what, client):
    ds = climate_grid()
    bad = {"target NaN": {"tas": ds["tas"] * np.nan}, "feature NaN": {"a": ds["a"] * np.nan},
           "feature inf": {"a": ds["a"] * np.inf}}[what]
    with pytest.raises(InputError, match=r"every cell of 'tas' or its features is masked \(NaN\) or has zero weight: nothing to fit"):
        climate(model, client).fit(ds.assign(**bad))


@pytest.mark.parametrize("model", MODELS)
def test_climate_partly_masked_cells_are_dropped(model, client):
    """Documented: a NaN feature masks its cell, as a NaN target there does."""
    ds = climate_grid()
    holes = xr.zeros_like(ds["a"], dtype=bool).copy(data=np.random.default_rng(2).random(ds["a"].shape) < 0.2)
    by_feature = climate(model, client).fit(ds.assign(a=ds["a"].where(~holes)))
    by_target = climate(model, client).fit(ds.assign(tas=ds["tas"].where(~holes)))
    np.testing.assert_allclose(np.asarray(by_feature.coef_), np.asarray(by_target.coef_), atol=1e-6)


@pytest.mark.parametrize("model", MODELS)
def test_climate_lags_longer_than_the_series(model, client):
    ds = climate_grid()
    with pytest.raises(InputError, match="lags and lead shift by up to 24 time steps but the series has only 24; use shorter "
                                         "lags or a longer series"):
        climate(model, client, lags={"a": [0, 24]}).fit(ds)
    with pytest.raises(InputError, match="shift by up to 25 time steps but the series has only 24"):
        climate(model, client, lags={"a": [20]}, lead=5).fit(ds)


@pytest.mark.parametrize("model", MODELS)
def test_climate_empty_or_non_numeric(model, client):
    ds = climate_grid()
    with pytest.raises(InputError, match=r"the Dataset is empty along \['time'\] \(size 0\): there are no samples"):
        climate(model, client).fit(ds.isel(time=slice(0, 0)))
    with pytest.raises(InputError, match=r"variable 'index' must be numeric; got dtype <U"):
        climate(model, client).fit(ds.assign(index=ds["index"].astype(str)))


@pytest.mark.parametrize("model", MODELS)
def test_climate_zero_size_chunks(model, client):
    """Documented: zero-size chunks (e.g. after a selection) are dropped; same fit."""
    ds = climate_grid()
    odd = ds.chunk({"time": (12, 0, 12), "lat": (2, 0, 1)})
    assert 0 in odd["a"].data.chunks[0]
    a = climate(model, client).fit(odd)
    b = climate(model, client).fit(ds)
    np.testing.assert_allclose(np.asarray(a.coef_), np.asarray(b.coef_), atol=1e-6)
    xr.testing.assert_allclose(a.predict(odd).compute(), b.predict(ds).compute(), atol=1e-5)


@pytest.mark.parametrize("model", MODELS)
def test_climate_huge_values(model, client):
    ds = climate_grid()
    huge = ds.assign(a=ds["a"] * 1e300)
    message = (r"Input X has values up to .*e\+300 in absolute value in block \d+ .*scale the features" if model == "pooled" else
               r"the least-squares sums of \d+ grid cell\(s\) overflow float64: a feature or the target has values too large .* "
               r"scale the variables")
    with pytest.raises(InputError, match=message):
        climate(model, client).fit(huge)


@pytest.mark.parametrize("model", MODELS)
def test_climate_predict_on_another_grid(model, client):
    fitted = climate(model, client).fit(climate_grid())
    other = climate_grid(Y=4)  # latitudes -40, -13.3, 13.3, 40: two of them off the fitted -40, 0, 40
    if model == "pointwise":
        with pytest.raises(InputError, match=r"^2 of the 4 'lat' values of this Dataset are not on the grid the pointwise "
                                             r"model was fitted on \(not found: -13\.3333, 13\.3333; fitted: 3 values from "
                                             r"-40 to 40\).*ds\.reindex\(lat=model\.coef_\.lat, method=\"nearest\", tolerance=20\) "
                                             r"\(NaN where none is near\)"):
            fitted.predict(other)
        # cells of the fitted grid (the first and last latitudes) are predicted as on the full grid
        part = climate_grid().isel(lat=[2, 0])
        xr.testing.assert_allclose(fitted.predict(part).compute(),
                                   fitted.predict(climate_grid()).compute().isel(lat=[2, 0]), rtol=1e-12, atol=0)
    else:  # documented: one pooled model predicts on any grid
        assert fitted.predict(other).shape == (24, 4, 4)
