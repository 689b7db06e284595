"""Input checks of the linear estimators: scikit-learn's for in-memory data, lazy ones
for dask collections (shapes, dtypes, feature names; the values are checked in the
blocks, where they live)."""

import warnings

import numpy as np
from sklearn.utils.validation import check_array, check_consistent_length, column_or_1d, validate_data

from .._engine.blocks import check_chunking
from .._engine.executor import is_dask_collection
from .._frames import is_frame, numeric_frame
from ..exceptions import InputError

__all__ = ["check_feature_names", "check_n_features", "validate_fit_input"]


def validate_fit_input(est, X, y, sample_weight, reset=True):
    """In-memory input through scikit-learn's validation; dask input checked lazily."""
    if y is None:
        raise InputError(
            f"{type(est).__name__} requires y to be passed, but the target y is None"
        )
    if is_frame(X):  # the same columns accepted and refused for pandas and dask
        X = numeric_frame(X)
    if is_dask_collection(X) or is_dask_collection(y):
        _check_dask_input(est, X, reset)
        y, sample_weight = _check_dask_targets(est, y, sample_weight)
        return X, y, sample_weight
    # X and y separately: non-finite values are left for the block checks, which
    # name the block (the same code path as for dask input).
    X = validate_data(
        est,
        X,
        reset=reset,
        accept_sparse="csr",
        dtype=[np.float64, np.float32],
        ensure_all_finite=False,
    )
    y = check_array(
        y,
        ensure_2d=False,
        dtype=None if est._is_classifier() else "numeric",
        ensure_all_finite=False,
        input_name="y",
    )
    y = column_or_1d(y, warn=True)
    if not est._is_classifier() and y.dtype.kind not in "fc":
        y = y.astype(np.float64)
    check_consistent_length(X, y)
    if sample_weight is not None:
        raw = np.asarray(sample_weight)
        problem = ""  # strings and complex numbers: no silent conversion
        if raw.dtype.kind not in "USc":
            try:
                sample_weight, problem = np.asarray(raw, dtype=np.float64), None
            except (TypeError, ValueError) as err:
                problem = f" ({err})"
        if problem is not None:
            raise InputError(
                f"sample_weight must be numeric; got dtype {raw.dtype}{problem}; "
                "convert it, e.g. np.asarray(sample_weight, dtype=float)"
            )
        if sample_weight.ndim == 0:
            sample_weight = np.full(X.shape[0], float(sample_weight))
        if sample_weight.shape != (X.shape[0],):
            raise InputError(
                f"sample_weight must have shape ({X.shape[0]},) like y; got "
                f"{sample_weight.shape}"
            )
    return X, y, sample_weight


def _check_dask_input(est, X, reset):
    """Feature count (and names) of a dask X; its data is checked in the blocks."""
    import dask.dataframe as dd

    if not is_dask_collection(X):
        raise InputError(
            "y is a dask collection but X is not; pass both as dask collections "
            "(or both in memory)"
        )
    names = None
    if isinstance(X, dd.DataFrame):
        names = np.asarray(X.columns, dtype=object)
        n_features = len(names)
        if not all(isinstance(n, str) for n in names):
            names = None
    else:
        check_chunking(X)
        n_features = X.shape[1]
    if reset:
        if n_features == 0:  # as scikit-learn's check for in-memory X
            shape = (X.shape[0] if hasattr(X, "shape") and not isinstance(X, dd.DataFrame) else "?", 0)
            raise InputError(
                f"Found array with 0 feature(s) (shape={shape}) while a minimum of 1 is "
                f"required by {type(est).__name__}"
            )
        est.n_features_in_ = n_features
        if names is not None:
            est.feature_names_in_ = names
        elif hasattr(est, "feature_names_in_"):
            del est.feature_names_in_
    else:
        check_n_features(est, n_features)
        check_feature_names(est, names)


def _check_dask_targets(est, y, sample_weight):
    """Shape and dtype of dask y and sample_weight, checked before any computation:
    a column vector y is raveled (with scikit-learn's DataConversionWarning, as for
    in-memory y); other 2-D targets, non-numeric regression targets and weights
    are errors."""
    import dask.array as da
    from sklearn.exceptions import DataConversionWarning

    name = type(est).__name__
    if isinstance(y, da.Array):
        if y.ndim == 2 and y.shape[1] == 1:
            warnings.warn(
                "A column-vector y was passed when a 1d array was expected. Please change "
                "the shape of y to (n_samples, ), for example using ravel().",
                DataConversionWarning,
                stacklevel=4,
            )
            y = y[:, 0]
        elif y.ndim != 1:
            raise InputError(
                f"y must be 1-D (n_samples,); got a dask array of shape {y.shape}: {name} "
                "fits one target, fit one model per column"
            )
    kind = getattr(getattr(y, "dtype", None), "kind", None)
    if not est._is_classifier() and kind is not None and kind not in "biuf":
        raise InputError(
            f"y must be numeric for {name}; got dtype {y.dtype}: convert it, e.g. "
            "y.astype(float)"
        )
    if is_dask_collection(sample_weight):
        kind = getattr(getattr(sample_weight, "dtype", None), "kind", None)
        if kind is not None and kind not in "biuf":
            raise InputError(
                f"sample_weight must be numeric; got dtype {sample_weight.dtype}: convert "
                "it, e.g. sample_weight.astype(float)"
            )
        if getattr(sample_weight, "ndim", 1) != 1:
            raise InputError(
                f"sample_weight must be 1-D (n_samples,); got a dask array of shape "
                f"{sample_weight.shape}"
            )
    return y, sample_weight


def check_feature_names(est, names):
    """A dask DataFrame at predict time must have the columns seen in fit, in order."""
    fitted = getattr(est, "feature_names_in_", None)
    if names is None or fitted is None:
        return
    if len(names) != len(fitted) or not np.all(names == fitted):
        raise InputError(
            f"The feature names should match those that were passed during fit: "
            f"got {list(names)}, expected {list(fitted)}"
        )


def check_n_features(est, n_features):
    if n_features != est.n_features_in_:
        raise InputError(
            f"X has {n_features} features, but {type(est).__name__} is expecting "
            f"{est.n_features_in_} features as input"
        )

# --------------------------------------------------------------------- fit
