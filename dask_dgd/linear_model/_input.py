"""Input checks of the linear estimators: scikit-learn's for in-memory data, lazy ones
for dask collections (shapes, dtypes, feature names; the values are checked in the
blocks, where they live)."""

import math
import numbers
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.utils.validation import check_array, check_consistent_length, column_or_1d, validate_data

from .._backend import asarray_like, get_namespace, is_sparse, to_numpy
from .._engine.data.blocks import check_chunking
from .._engine.runtime.executor import is_dask_collection
from .._frames import is_frame, numeric_frame
from .._validation import user_stacklevel
from ..exceptions import InputError

__all__ = ["block_offset", "check_feature_names", "check_n_features", "check_offset", "validate_fit_input",
           "with_offset"]


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
                stacklevel=user_stacklevel(),
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


# ------------------------------------------------------------------ offsets
def check_offset(offset, X, n_outputs=None):
    """``offset`` as a 2-D array of shape (n_samples, width) matching ``X``'s rows:
    NumPy for in-memory ``X``, a dask array with ``X``'s row chunks (one column chunk)
    for a dask array ``X`` (its values are checked in the blocks).  ``n_outputs``
    (when known) is the width it must have; a 1-D offset is one column."""
    if offset is None:  # the usual case: no import of dask.dataframe (0.3 s on a first fit)
        return None
    import dask.array as da
    import pandas as pd

    if is_dask_collection(offset):
        import dask.dataframe as dd

        if not is_dask_collection(X):
            raise InputError(
                "offset is a dask collection but X is not; pass both as dask collections "
                "(or both in memory)"
            )
        if isinstance(offset, (dd.Series, dd.DataFrame)):
            offset = offset.to_dask_array()
        if not isinstance(offset, da.Array):
            raise InputError(f"offset must be an array-like or a dask array; got {type(offset).__name__}")
    elif isinstance(offset, (pd.Series, pd.DataFrame)):
        offset = offset.to_numpy()
    elif sp.issparse(offset):
        raise InputError(
            f"offset must be dense; got a sparse {type(offset).__name__}: use offset.toarray()"
        )
    kind = getattr(getattr(offset, "dtype", None), "kind", None)
    if not isinstance(offset, da.Array):
        try:
            raw = np.asarray(offset)
        except (TypeError, ValueError) as err:
            raise InputError(f"offset must be numeric; could not convert it to an array ({err})") from err
        kind = raw.dtype.kind
        if kind not in "biuf":
            raise InputError(
                f"offset must be numeric; got dtype {raw.dtype}: convert it, e.g. "
                "np.asarray(offset, dtype=float)"
            )
        offset = raw.astype(np.float64)
    elif kind not in "biuf":
        raise InputError(
            f"offset must be numeric; got dtype {offset.dtype}: convert it, e.g. offset.astype(float)"
        )
    if offset.ndim == 1:
        offset = offset[:, None]
    if offset.ndim != 2:
        raise InputError(
            f"offset must have shape (n_samples,) or (n_samples, n_outputs); got shape {tuple(offset.shape)}"
        )
    if n_outputs is not None and offset.shape[1] != n_outputs:
        raise InputError(_width_message(offset.shape[1], n_outputs))
    n_rows = getattr(X, "shape", (None,))[0]  # unknown (None, NaN, lazy) for some dask input
    if isinstance(n_rows, numbers.Integral) and not math.isnan(offset.shape[0]) and offset.shape[0] != n_rows:
        raise InputError(f"offset has {offset.shape[0]} rows but X has {n_rows}; pass one offset per sample")
    if isinstance(offset, da.Array):
        return offset
    if is_dask_collection(X):  # an in-memory offset of a dask X: cut as X's rows
        chunks = _row_chunks(X)
        if chunks is None:
            raise InputError(
                "X is a dask collection of unknown chunk sizes (e.g. a dask DataFrame): pass offset "
                "as a dask Series or array partitioned like X (e.g. a column of the same DataFrame)"
            )
        return da.from_array(offset, chunks=(chunks, -1))
    bad = ~np.isfinite(offset)
    if bad.any():
        rows = np.flatnonzero(bad.any(axis=1))
        raise InputError(
            f"offset contains NaN or infinity in {len(rows)} row(s) (first: row {rows[0]}); "
            "an offset must be finite (log(exposure) needs exposure > 0)"
        )
    return offset


def _width_message(width, n_outputs):
    if n_outputs == 1:
        return f"offset must have shape (n_samples,) (one value per sample); got {width} columns"
    return (
        f"offset must have shape (n_samples, {n_outputs}) (one column per class of the "
        f"multinomial model); got {width} column(s)"
    )


def _row_chunks(X):
    import dask.array as da

    chunks = X.chunks[0] if isinstance(X, da.Array) else None
    if chunks is None or any(math.isnan(c) for c in chunks):
        return None
    return chunks


def block_offset(offset, n_rows):
    """One block's offset (as it comes to a ``blockwise`` task: maybe a list of its one
    column chunk) as a host NumPy array, checked to have the block's ``n_rows`` rows and
    finite values; runs where the block is for dask input."""
    if isinstance(offset, list):
        (offset,) = offset
    offset = to_numpy(offset)
    if offset.shape[0] != n_rows:
        raise InputError(
            f"X and offset have different numbers of rows in a block: {n_rows} and "
            f"{offset.shape[0]}; chunk offset as X's rows"
        )
    if not np.all(np.isfinite(offset)):
        raise InputError(
            "offset contains NaN or infinity; an offset must be finite (log(exposure) needs exposure > 0)"
        )
    return offset


def _offset_block(X, offset):
    """One block of ``X`` with its offset columns appended (dense or sparse, any
    namespace; runs where the block is for dask input)."""
    if isinstance(X, list):
        (X,) = X
    offset = block_offset(offset, X.shape[0])
    dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.float64
    if sp.issparse(X):
        return sp.hstack([X.astype(dtype), sp.csr_matrix(offset.astype(dtype))], format="csr")
    if is_sparse(X):  # CuPy sparse
        import cupyx.scipy.sparse as csp

        return csp.hstack([X.astype(dtype), csp.csr_matrix(asarray_like(offset, X, dtype=dtype))], format="csr")
    xp = get_namespace(X)
    if X.dtype != xp.float64 and X.dtype != xp.float32:
        X = xp.astype(X, xp.float64)
    return xp.concat([X, asarray_like(offset, X, dtype=X.dtype)], axis=1)


def with_offset(X, offset):
    """``X`` (validated) with the columns of ``offset`` (from :func:`check_offset`)
    appended, block by block for dask ``X``."""
    if offset is None:
        return X
    if not is_dask_collection(X):
        return _offset_block(X, offset)
    import dask.array as da
    import dask.dataframe as dd
    from dask.array.utils import meta_from_array

    if isinstance(X, dd.DataFrame):
        X = X.to_dask_array()
    check_chunking(X)
    offset = offset.rechunk({1: -1})
    if offset.numblocks[0] != X.numblocks[0] or (_row_chunks(X) and offset.chunks[0] != X.chunks[0]):
        if _row_chunks(X) is None or any(math.isnan(c) for c in offset.chunks[0]):
            raise InputError(
                f"offset has {offset.numblocks[0]} row blocks and X {X.numblocks[0]}, of unknown sizes; "
                "partition offset as X (e.g. a column of the same DataFrame)"
            )
        offset = offset.rechunk({0: X.chunks[0]})
    width = offset.shape[1]
    dtype = np.float32 if X.dtype == np.float32 else np.float64
    meta = X._meta if is_sparse(X._meta) else meta_from_array(X._meta, ndim=2, dtype=dtype)
    return da.blockwise(
        _offset_block, "ij", X, "ij", offset, "im", concatenate=False, align_arrays=False,
        adjust_chunks={"j": lambda n: n + width}, dtype=dtype, meta=meta,
    )
