"""DataFrame features to the numbers training needs: one rule for pandas and dask.

Accepted, and converted to one float dtype (float32 when every column is float32,
else float64): numeric columns of NumPy dtypes, booleans (what one-hot encoders such as
``pandas.get_dummies`` and ``dask_ml.preprocessing.DummyEncoder`` produce), and pandas'
nullable and pyarrow-backed numeric and boolean dtypes, whose missing values become NaN
(and are refused as non-finite by the block checks, naming the block).  Refused with a
hint naming the fix: categorical and text columns (one-hot encode them, or hash them
with :class:`dask_dgd.FeatureHasher`), dates and
durations, and anything else.  The rule looks at dtypes only, so a dask DataFrame is
checked before anything is computed, and gets the same answer as the same rows in
pandas.
"""

import numpy as np
import pandas as pd

from .exceptions import InputError

__all__ = ["is_frame", "numeric_frame"]


def is_frame(X):
    """Whether ``X`` is a pandas or dask DataFrame."""
    if isinstance(X, pd.DataFrame):
        return True
    import dask

    if not dask.is_dask_collection(X):
        return False
    import dask.dataframe as dd

    return isinstance(X, dd.DataFrame)


def _numeric(dtype):
    """The NumPy dtype a numeric or boolean column converts to; None for other columns."""
    if isinstance(dtype, pd.CategoricalDtype):
        return None
    if pd.api.types.is_bool_dtype(dtype):
        return np.dtype(np.float64)
    if pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_complex_dtype(dtype):
        numpy_type = getattr(dtype, "numpy_dtype", None) or getattr(dtype, "subtype", None) or dtype
        try:
            numpy_type = np.dtype(numpy_type)
        except TypeError:
            return None
        return numpy_type if numpy_type.kind in "iuf" else None
    return None


def _refusal(name, dtype, lazy):
    """The InputError for a column of ``dtype`` that is not a number."""
    shown = repr(name)
    types = pd.api.types
    if isinstance(dtype, pd.CategoricalDtype) or types.is_string_dtype(dtype) or types.is_object_dtype(dtype):
        encode = (
            f"X.categorize(columns=[{shown}]) and then dask_ml.preprocessing.DummyEncoder()"
            if lazy
            else f"pd.get_dummies(X, columns=[{shown}], dtype=float) or scikit-learn's OneHotEncoder in a Pipeline"
        )
        hashed = "; or, for many categories, hash them on the workers: dask_dgd.FeatureHasher() in a Pipeline"
        if isinstance(dtype, pd.CategoricalDtype):
            return InputError(
                f"X column {shown} is categorical (dtype {dtype}); training needs numbers: "
                f"one-hot encode it, e.g. {encode}{hashed}"
            )
        return InputError(
            f"X column {shown} holds text (dtype {dtype}); training needs numbers: one-hot encode "
            f"categories, e.g. {encode}{hashed}; convert numbers stored as text with "
            f"{'dd' if lazy else 'pd'}.to_numeric(X[{shown}])"
        )
    if pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype):
        return InputError(
            f"X column {shown} holds dates or durations (dtype {dtype}); training needs numbers: "
            f"derive them first, e.g. X[{shown}].dt.year or the seconds since a reference time"
        )
    return InputError(f"X column {shown} has dtype {dtype}; training needs numeric or boolean columns")


def numeric_frame(X):
    """``X`` (a pandas or dask DataFrame) with every column of one float dtype, the
    column names kept; :class:`InputError` naming the first column that is not a
    number and how to encode it."""
    lazy = not isinstance(X, pd.DataFrame)
    targets = {}
    for name, dtype in X.dtypes.items():
        target = _numeric(dtype)
        if target is None:
            raise _refusal(name, dtype, lazy)
        targets[name] = target
    common = np.dtype(np.float32) if targets and all(t == np.float32 for t in targets.values()) else np.dtype(
        np.float64)
    if all(isinstance(d, np.dtype) and d == common for d in X.dtypes):
        return X
    return X.astype(common)
