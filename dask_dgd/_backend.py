"""Array namespace of a block: NumPy, CuPy, or their sparse matrices.

Block functions never ask "is this CuPy?" by looking at type names; they call
:func:`get_namespace` and use what it returns.  CuPy is never imported here: a CuPy
block can only exist if the user imported CuPy, so ``sys.modules`` tells us whether to
look for it.
"""

import sys

import array_api_compat
import array_api_compat.numpy  # noqa: F401  (get_namespace() of nothing returns it)
import numpy as np
import scipy.sparse as sp

__all__ = ["get_namespace", "is_sparse", "is_device_array", "to_numpy", "asarray_like", "finfo_max", "dtype_name",
           "take_rows"]


def _cupyx_sparse():
    mod = sys.modules.get("cupyx.scipy.sparse")
    return mod


def is_sparse(x):
    """True for SciPy or CuPy sparse matrices/arrays."""
    if sp.issparse(x):
        return True
    mod = _cupyx_sparse()
    return mod is not None and mod.issparse(x)


def get_namespace(*arrays):
    """The array-API namespace shared by ``arrays`` (``None`` entries are skipped).

    Sparse SciPy matrices count as NumPy, CuPy sparse matrices as CuPy.
    """
    dense = []
    for a in arrays:
        if a is None:
            continue
        if sp.issparse(a):
            dense.append(np.empty(0))
        elif is_sparse(a):
            import cupy  # already imported: a cupyx block exists

            dense.append(cupy.empty(0))
        else:
            dense.append(a)
    if not dense:
        return array_api_compat.numpy
    return array_api_compat.array_namespace(*dense)


def is_device_array(x):
    """True for a dense in-memory array of another namespace than NumPy: CuPy, or any
    array with ``__array_namespace__`` (array_api_strict...). CuPy's arrays are asked
    for by name: CuPy 14's ``ndarray`` has no ``__array_namespace__`` (seen on a GPU)."""
    if isinstance(x, np.ndarray) or is_sparse(x):
        return False
    return array_api_compat.is_cupy_array(x) or hasattr(x, "__array_namespace__")


def to_numpy(x):
    """Copy an array (any namespace) to a NumPy array on the host."""
    if isinstance(x, np.ndarray):
        return x
    if array_api_compat.is_cupy_array(x):
        return x.get()
    if is_sparse(x):
        return x.get() if hasattr(x, "get") else x
    if hasattr(x, "__array_namespace__") and array_api_compat.is_array_api_strict_namespace(x.__array_namespace__()):
        import array_api_strict as xps  # its arrays off the CPU device refuse np.asarray

        x = x.to_device(xps.Device("CPU_DEVICE"))
    return np.asarray(x)


def asarray_like(values, like, dtype=None):
    """``values`` (NumPy) moved to the namespace and device of ``like`` (one copy to
    the device; none for NumPy), as ``dtype`` if given (a dtype of that namespace)."""
    xp = get_namespace(like)
    if array_api_compat.is_numpy_namespace(xp):
        return np.asarray(values, dtype=dtype)
    device = None if is_sparse(like) else array_api_compat.device(like)
    return xp.asarray(values, dtype=dtype, device=device)


def finfo_max(dtype, like):
    """Largest finite number of the floating ``dtype`` of the array ``like``."""
    if is_sparse(like):
        return float(np.finfo(like.dtype).max)
    return float(get_namespace(like).finfo(dtype).max)


def dtype_name(dtype):
    """``"float64"``-style name of a dtype of any namespace."""
    try:
        return np.dtype(dtype).name
    except TypeError:  # array_api_strict dtypes are not NumPy dtypes
        return str(dtype).rsplit(".", 1)[-1].strip("'>)")



def take_rows(a, rows):
    """Rows ``rows`` (host NumPy integer indices or boolean mask) of the block ``a``,
    in ``a``'s namespace and on its device (the indices are moved there, once)."""
    rows = np.asarray(rows)
    if rows.dtype == bool:
        rows = np.flatnonzero(rows)
    if isinstance(a, np.ndarray) or is_sparse(a):
        return a[rows]
    xp = get_namespace(a)
    return xp.take(a, asarray_like(rows.astype(np.int64), a), axis=0)
