"""Ratings input of the recommenders: DataFrames or (user, item) pairs with ratings,
as one pandas or dask DataFrame with the configured columns; ids as sorted indexes."""

import numpy as np
import pandas as pd

from .._backend import to_numpy
from ..exceptions import InputError

__all__ = ["as_frame", "host_blocks", "id_index", "ids_preview", "pairs_shape_error"]


def ids_preview(ids, limit=5):
    shown = ", ".join(repr(v) for v in np.asarray(ids).tolist()[:limit])
    more = f" and {len(ids) - limit} more" if len(ids) > limit else ""
    return shown + more


def host_blocks(a):
    """A dask array with NumPy blocks (a copy from the device per block if needed)."""
    return a.map_blocks(to_numpy, dtype=a.dtype, meta=np.empty((0,) * a.ndim, dtype=a.dtype))


def pairs_shape_error(shape):
    return InputError(f"X must be a DataFrame or an (n, 2) array of (user, item) pairs; got shape {shape}")


def id_index(uniques, what):
    """A sorted pd.Index of the distinct ids found in the partitions."""
    values = pd.unique(np.concatenate([np.asarray(u, dtype=object) for u in uniques])) if uniques else []
    try:
        index = pd.Index(values).sort_values()
    except TypeError as err:
        raise InputError(
            f"the {what} ids mix types that cannot be ordered ({err}); use one type (e.g. all str)"
        ) from err
    if index.dtype == object:
        inferred = pd.Index(list(index))  # ints stay ints when every id is an int
        index = inferred if inferred.dtype != object or not len(index) else index
    return index


def as_frame(est, X, y, *, need_rating):
    """``X`` (and ``y``) as a pandas or dask DataFrame with the configured columns."""
    import dask.array as da
    import dask.dataframe as dd

    ucol, icol, rcol = est.user_col, est.item_col, est._rating_col()
    ycol = rcol if rcol is not None else "rating"
    y_given = y is not None
    if isinstance(X, (pd.DataFrame, dd.DataFrame)):
        if y is not None and isinstance(X, dd.DataFrame):
            raise InputError(
                "with a dask DataFrame, pass the ratings as one of its columns (rating_col=...), not as y: "
                "a separate y cannot be matched to the rows by position"
            )
        frame = X
    elif isinstance(X, da.Array):
        if X.ndim != 2 or X.shape[1] != 2:
            raise pairs_shape_error(X.shape)
        X = host_blocks(X)  # the ids go through pandas
        if y is not None:
            if any(np.isnan(c) for c in X.chunks[0]):
                X = X.compute_chunk_sizes()
            yv = host_blocks(y) if isinstance(y, da.Array) else to_numpy(y)
            if yv.ndim == 1 and yv.shape[0] == X.shape[0] and not isinstance(yv, da.Array):
                yv = da.from_array(yv, chunks=(X.chunks[0],))  # only once the lengths agree
            if yv.ndim != 1 or yv.shape[0] != X.shape[0]:
                raise InputError(f"y must be 1-D with one value per row of X ({X.shape[0]}); got shape {yv.shape}")
            yv = yv.rechunk((X.chunks[0],))
            # the same row chunks: the two frames get the same index and divisions
            frame = dd.from_dask_array(X, columns=[ucol, icol]).assign(**{ycol: dd.from_dask_array(yv)})
            y = None
        else:
            frame = dd.from_dask_array(X, columns=[ucol, icol])
    else:
        arr = to_numpy(X)
        if arr.ndim != 2 or arr.shape[1] != 2:
            raise pairs_shape_error(arr.shape)
        frame = pd.DataFrame({ucol: arr[:, 0], icol: arr[:, 1]})
    missing = [c for c in (ucol, icol) if c not in frame.columns]
    if missing:
        raise InputError(
            f"X has no column {missing[0]!r} (columns: {list(frame.columns)}); "
            "name the columns with user_col=..., item_col=..."
        )
    if y is not None:  # in-memory frame: y pairs with the rows by position
        yv = to_numpy(y)
        if yv.ndim != 1 or yv.shape[0] != len(frame):
            raise InputError(f"y must be 1-D with one value per row of X ({len(frame)}); got shape {yv.shape}")
        frame = frame.assign(**{ycol: yv})
    if y_given:
        rcol = ycol
    if need_rating:
        if rcol is None or rcol not in frame.columns:
            raise InputError(
                f"the ratings have no column {rcol!r} (columns: {list(frame.columns)}); "
                "pass y=... or name the column with rating_col=..."
            )
    if rcol is not None and rcol in frame.columns:
        dtype = frame[rcol].dtype
        if not pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype):
            raise InputError(f"the {rcol!r} column must be numeric; got dtype {frame[rcol].dtype}")
        cols = (ucol, icol, rcol)
    else:
        cols = (ucol, icol, None)
    keep = [c for c in cols if c is not None]
    return frame[keep], cols
