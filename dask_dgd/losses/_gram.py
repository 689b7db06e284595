r"""The weighted Gram matrix of one block: the one place it is computed.

:math:`\tilde X^\top \operatorname{diag}(a) \tilde X`, with :math:`\tilde X` the block's
features and, for a model with an intercept, a column of ones.  It is the Hessian
of a linear model's loss (``a`` the sample weights times the loss's second
derivative), the Fisher information and the sandwich's meat of the inference
(:mod:`dask_dgd.linear_model._inference`), the Hessian sums of ``solver="cd"``
(:mod:`dask_dgd._engine.solvers.newton`) when the fit is not scaled, the Hessian of an in-memory
problem (:func:`~dask_dgd.losses.objective_hessian`) and the fold Gram matrices of the exact
elastic-net path (:mod:`dask_dgd._engine.solvers.gram_path`).
"""

import array_api_compat
import numpy as np

from .._backend import asarray_like, get_namespace, is_sparse, to_numpy

__all__ = ["GRAM_SLICE_BYTES", "weighted_gram"]

#: Bytes of a dense block's rows weighted at a time (the temporary ``X * a`` of one
#: slice): the Gram matrix of a block of any length needs this much extra memory.
GRAM_SLICE_BYTES = 2**20


def weighted_gram(X, a, fit_intercept=False, *, intercept_first=False):
    r"""``X~^T diag(a) X~`` of one block, as a host float64 matrix.

    Parameters
    ----------
    X : array of shape (n_samples, d)
        Dense (NumPy, CuPy or any array-API namespace) or sparse (SciPy, CuPy): the
        product is computed where ``X`` lives, in float64.
    a : array of shape (n_samples,)
        The row weights, host NumPy or in ``X``'s namespace.
    fit_intercept : bool, default=False
        Add the column of ones: the result is ``(d + 1, d + 1)``.
    intercept_first : bool, default=False
        Put the intercept's row and column first (statsmodels' order) rather than
        last (the parameters' order in :class:`~dask_dgd.losses.LinearObjective`).

    Returns
    -------
    ndarray of shape (d + fit_intercept, d + fit_intercept)
        Symmetric to the last bit (the upper triangle mirrored), not normalised:
        blocks add up.
    """
    n, d = X.shape
    xp = get_namespace(X)
    if is_sparse(X):
        X = X.astype(np.float64)
        a = asarray_like(to_numpy(a), X, dtype=np.float64).reshape(-1)
        inner = X.T @ X.multiply(a.reshape(-1, 1))
        inner = np.asarray(to_numpy(inner.toarray() if is_sparse(inner) else inner), dtype=np.float64)
        column = np.asarray(to_numpy(X.T @ a), dtype=np.float64).reshape(d)
        total = float(to_numpy(a).sum())
    else:
        f64 = xp.float64
        a = asarray_like(a, X) if isinstance(a, np.ndarray) else a
        a = xp.reshape(xp.astype(a, f64, copy=False), (n,))
        rows = max(256, GRAM_SLICE_BYTES // (8 * max(d, 1)))
        device = array_api_compat.device(X)
        inner = xp.zeros((d, d), dtype=f64, device=device)
        column = xp.zeros((d,), dtype=f64, device=device)
        for start in range(0, n, rows):
            stop = min(start + rows, n)  # the array API leaves out-of-bounds slices unspecified
            Xs = xp.astype(X[start:stop, :], f64, copy=False)
            weighted = Xs * a[start:stop, None]
            inner = inner + Xs.T @ weighted
            column = column + xp.sum(weighted, axis=0)
        inner = np.asarray(to_numpy(inner), dtype=np.float64).reshape(d, d)
        column = np.asarray(to_numpy(column), dtype=np.float64).reshape(d)
        total = float(to_numpy(xp.sum(a)))
    inner = np.triu(inner) + np.triu(inner, 1).T
    if not fit_intercept:
        return inner
    out = np.empty((d + 1, d + 1))
    i, rest = (0, slice(1, None)) if intercept_first else (d, slice(0, d))
    out[rest, rest] = inner
    out[i, rest] = out[rest, i] = column
    out[i, i] = total
    return out

