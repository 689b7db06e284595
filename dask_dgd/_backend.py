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

__all__ = ["get_namespace", "is_sparse", "to_numpy", "asarray_like"]


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


def to_numpy(x):
    """Copy an array (any namespace) to a NumPy array on the host."""
    if isinstance(x, np.ndarray):
        return x
    if array_api_compat.is_cupy_array(x):
        return x.get()
    if is_sparse(x):
        return x.get() if hasattr(x, "get") else x
    return np.asarray(x)


def asarray_like(values, like):
    """``values`` (NumPy) moved to the namespace and device of ``like``."""
    xp = get_namespace(like)
    if array_api_compat.is_numpy_namespace(xp):
        return np.asarray(values)
    device = None if is_sparse(like) else array_api_compat.device(like)
    return xp.asarray(values, device=device)

