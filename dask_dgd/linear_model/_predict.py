"""Predictions of the linear estimators, block by block where the data lives.

The linear predictor and whatever follows it (an inverse link, probabilities, classes)
run in one task per block, in the block's array namespace and on its device: NumPy for
in-memory NumPy/SciPy input, an array of the input's namespace for an in-memory array
of another one (CuPy...), a lazy dask array for dask input.
"""

import numpy as np
import scipy.sparse as sp
from sklearn.utils.validation import check_is_fitted, validate_data

from .._backend import asarray_like, get_namespace, is_device_array, is_sparse
from .._engine.data.blocks import check_chunking, check_finite_block
from .._engine.runtime.executor import is_dask_collection
from .._frames import is_frame, numeric_frame
from ..exceptions import InputError
from ._input import block_offset, check_feature_names, check_n_features, check_offset

__all__ = ["coef_matrix", "raw_prediction"]


def _predict_block(X, offset, coef, intercept, squeeze, post, *post_args):
    """Linear predictor of one block (plus its ``offset`` rows, shape (n, n_outputs),
    if not None), then ``post(raw, *post_args)`` (an inverse link, probabilities,
    classes) in the same task and the block's namespace and device.

    ``X`` (and ``offset``) come as lists of their column chunks (``blockwise`` without
    concatenation, which dask could only do for NumPy-like blocks); training needs one
    column chunk, and so does predict."""
    if isinstance(X, list):
        (X,) = X
    raw = _raw_block(X, coef, intercept, False)
    if offset is not None:
        offset = block_offset(offset, raw.shape[0])
        raw = raw + asarray_like(offset, raw, dtype=raw.dtype)
    if squeeze:
        raw = raw[:, 0]
    return raw if post is None else post(raw, *post_args)


def _raw_block(X, coef, intercept, squeeze):
    """Linear predictor of one block (runs on the workers for dask input)."""
    if sp.issparse(X) or isinstance(X, np.ndarray):
        if X.dtype not in (np.float64, np.float32):  # integer or float16 blocks of a dask X: float64, like fit
            X = X.astype(np.float64)
        coef = coef.astype(X.dtype, copy=False)  # float32 X: float32 out
        intercept = intercept.astype(X.dtype, copy=False)
    else:  # on X's device (CuPy, CuPy sparse, ...), once per block, in X's floating dtype
        if is_sparse(X):
            if X.dtype not in (np.float64, np.float32):
                X = X.astype(np.float64)
        else:
            xp = get_namespace(X)
            if X.dtype != xp.float64 and X.dtype != xp.float32:
                X = xp.astype(X, xp.float64)
        coef = asarray_like(coef.toarray() if sp.issparse(coef) else coef, X, dtype=X.dtype)
        intercept = asarray_like(intercept, X, dtype=X.dtype)
    raw = X @ coef
    if is_sparse(raw):  # a sparse coef_ (sparse_coef, sparsify()) and sparse X
        raw = raw.toarray()
    raw = np.asarray(raw) if isinstance(raw, np.matrix) else raw
    raw = raw + intercept
    return raw[:, 0] if squeeze else raw


def coef_matrix(est, sparse=False):
    """``(coef, intercept)``: the coefficients as an (n_features, n_outputs) matrix
    (SciPy CSC when ``coef_`` is sparse and ``sparse``, else dense) and the intercepts."""
    if sp.issparse(est.coef_):
        coef = sp.csc_matrix(est.coef_.T, dtype=np.float64)
        if not sparse:
            coef = coef.toarray()
        return coef, np.atleast_1d(np.asarray(est.intercept_, dtype=np.float64))
    coef = np.asarray(est.coef_, dtype=np.float64)
    coef = coef[:, None] if coef.ndim == 1 else coef.T
    intercept = np.atleast_1d(np.asarray(est.intercept_, dtype=np.float64))
    return coef, intercept


def raw_prediction(est, X, squeeze=True, post=None, post_args=(), out=None, offset=None):
    """Linear predictor (plus ``offset``, see :func:`~._input.check_offset`), then
    ``post(raw, *post_args)`` if given, block by block:
    NumPy for in-memory NumPy/SciPy X, an array of X's namespace on X's device for
    an in-memory array of another namespace (CuPy...), a lazy dask array for dask X
    (blocks of X's namespace).  ``out = (ndim, n_columns, dtype)`` describes
    ``post``'s result (default: the raw predictor's)."""
    check_is_fitted(est, "coef_")
    if is_frame(X):
        X = numeric_frame(X)
    coef, intercept = coef_matrix(est, sparse=True)
    squeeze = squeeze and coef.shape[1] == 1
    if offset is not None:
        offset = check_offset(offset, X, coef.shape[1])
    if is_dask_collection(X):
        import dask.dataframe as dd

        if isinstance(X, dd.DataFrame):
            check_n_features(est, len(X.columns))
            check_feature_names(est, np.asarray(X.columns, dtype=object))
            X = X.to_dask_array()
        else:
            check_chunking(X)
            check_n_features(est, X.shape[1])
        if X.dtype.kind not in "biuf":
            raise InputError(f"X must be numeric; got dtype {X.dtype}")
        # NaN/inf rows raise when computed (as scikit-learn does for in-memory X),
        # instead of becoming NaN predictions or, for a classifier, classes_[0]
        X = X.map_blocks(check_finite_block, dtype=X.dtype, meta=X._meta)
        dtype = np.float32 if X.dtype == np.float32 else np.float64
        ndim, n_cols = (1, None) if squeeze else (2, coef.shape[1])
        if out is not None:  # (ndim, n_cols, dtype), dtype None: the predictor's
            ndim, n_cols, dtype = out[0], out[1], out[2] or dtype
        import dask.array as da
        from dask.array.utils import meta_from_array

        if np.dtype(dtype).kind not in "biuf":  # e.g. string class labels: host blocks
            meta = np.empty((0,) * ndim, dtype=dtype)
        elif sp.issparse(X._meta) or X._meta is None:  # dense results of sparse blocks
            meta = np.empty((0,) * ndim, dtype=dtype)
        elif is_sparse(X._meta):  # CuPy sparse blocks: dense CuPy results
            meta = asarray_like(np.empty((0,) * ndim, dtype=dtype), X._meta)
        else:
            meta = meta_from_array(X._meta, ndim=ndim, dtype=dtype)
        if offset is None:
            args = (None, None)
        else:  # X's row blocks, one column chunk; contracted "m": a list of one block
            offset = offset.rechunk({1: -1})
            if offset.numblocks[0] != X.numblocks[0] or offset.chunks[0] != X.chunks[0]:
                if any(np.isnan(c) for c in X.chunks[0] + offset.chunks[0]):
                    raise InputError(
                        f"offset has {offset.numblocks[0]} row blocks and X {X.numblocks[0]}, of unknown "
                        "sizes; partition offset as X (e.g. a column of the same DataFrame)"
                    )
                offset = offset.rechunk({0: X.chunks[0]})
            args = (offset, "im")
        args += (coef, None, intercept, None, squeeze, None, post, None)
        args += tuple(a for value in post_args for a in (value, None))
        # align_arrays=False: dask would otherwise merge zero-row chunks away
        kw = dict(concatenate=False, align_arrays=False, meta=meta)
        if ndim == 1:
            return da.blockwise(_predict_block, "i", X, "ij", *args, **kw)
        return da.blockwise(_predict_block, "ik", X, "ij", *args, new_axes={"k": n_cols}, **kw)
    if is_device_array(X):  # an in-memory CuPy (or other array-API) array
        _check_device_array(est, X)
        return _predict_block(X, offset, coef, intercept, squeeze, post, *post_args)
    X = validate_data(est, X, reset=False, accept_sparse="csr", dtype=[np.float64, np.float32],
                      ensure_all_finite=False)
    check_finite_block(X)  # the message of dask input's check (scikit-learn's runs to 9 lines)
    if offset is not None and offset.shape[0] != X.shape[0]:
        raise InputError(f"offset has {offset.shape[0]} rows but X has {X.shape[0]}; pass one offset per sample")
    return _predict_block(X, offset, coef, intercept, squeeze, post, *post_args)


def _check_device_array(est, X):
    """scikit-learn's checks of an in-memory X, for arrays it cannot convert."""
    from .._engine.data.blocks import check_finite_block

    if X.ndim != 2:
        raise InputError(f"X must be 2-D; got an array of shape {tuple(X.shape)}")
    check_n_features(est, X.shape[1])
    check_finite_block(X)
