"""The Lipschitz bound of a linear model's mean-loss gradient, by power iteration on a sample.

What ``learning_rate="auto"`` divides by (see :func:`lipschitz_bound`); the iteration
uses only products with the sample and its transpose, and on a sparse sample only its
columns, so it scales to many (hashed) features.
"""

import numpy as np
import scipy.sparse as sp

from .._backend import is_sparse, to_numpy
from ..exceptions import InputError, ParameterError

__all__ = ["lipschitz_bound"]


def lipschitz_bound(
    objective,
    X_sample,
    sample_weight=None,
    alpha_l2=0.0,
    *,
    params=None,
    y=None,
    max_iter=50,
    tol=1e-7,
):
    r"""Estimate of the Lipschitz constant of the mean loss's gradient.

    Runs on the driver, on a sample of the rows, with NumPy / SciPy (other arrays are
    copied to the host first).

    Parameters
    ----------
    objective : LinearObjective
    X_sample : ndarray or sparse matrix of shape (n_samples, n_features)
        Rows representative of the data (all of it, for a small problem).
    sample_weight : array-like of shape (n_samples,) or None, default=None
    alpha_l2 : float, default=0.0
        Strength of the L2 penalty (``Penalty.l2_strength``), added to the bound.
    params : ndarray of shape (objective.n_params,) or None, default=None
        Only used when the loss has no curvature bound (the log-link families): the
        curvature is taken at these parameters; None means all zeros.
    y : array-like of shape (n_samples,) or None, default=None
        Targets of the sample's rows.  Only used when the loss has no curvature bound,
        and needed when its second derivative depends on the targets (the loss's
        ``curvature_needs_y``: Gamma, Tweedie, negative binomial; not Poisson).
    max_iter : int, default=50
        Power iterations.
    tol : float, default=1e-7
        Stop early when the eigenvalue estimate changes by less than this, relatively.

    Returns
    -------
    lipschitz : float

    Raises
    ------
    InputError
        If ``X_sample`` has no rows, the weights sum to zero, ``y`` has another
        length, or ``y`` is missing for a loss whose curvature depends on it.
    ParameterError
        If the loss has neither a ``curvature_bound`` nor a ``local_curvature``.

    Notes
    -----
    With :math:`X_1 = [X, \mathbf 1]` (the column of ones only when
    ``fit_intercept``), weights :math:`s` and :math:`c` the loss's
    ``curvature_bound``, the Hessian of the mean loss is bounded by
    :math:`c X_1^\top \operatorname{diag}(s) X_1 / \sum_i s_i` (times the identity of
    the outputs for the multinomial loss), so

    .. math:: L = c \, \lambda_{\max}\Big(\frac{X_1^\top \operatorname{diag}(s) X_1}
              {\sum_i s_i}\Big) + \alpha_{L2}.

    :math:`\lambda_{\max}` is found by power iteration from a fixed pseudo-random
    start, using only products with :math:`X` and :math:`X^\top`, so it scales to
    many features and to sparse data.  Power iteration approaches
    :math:`\lambda_{\max}` from below; after ``max_iter`` steps it is typically within
    a few percent, and a gradient step of :math:`1/L` stays stable for any
    :math:`L > \lambda_{\max} / 2`.

    For the log-link families (Poisson, Gamma, Tweedie, negative binomial) the
    curvature is unbounded; this function then uses
    :math:`c = \max(0, \max_i \partial_r^2 \ell(y_i, R_i))` over the sample at
    ``params``, from the loss's ``local_curvature(y, raw, xp)``: the *observed* second
    derivative (:math:`e^{r}` for Poisson, :math:`y e^{-r}` for Gamma), not the Fisher
    weight ``hessian_weight``, which differs from it for a non-canonical link.  The
    Hessian at ``params`` is :math:`X_1^\top \operatorname{diag}(s_i \ell''_i) X_1`,
    at most :math:`c` times the weighted Gram matrix (negative :math:`\ell''_i`, as
    for Tweedie powers above 2, only lower it).  That is a *local* estimate, valid
    near ``params`` only: a solver must be ready to shrink its step (line search or
    divergence guard).
    """
    X = X_sample if is_sparse(X_sample) else np.asarray(to_numpy(X_sample))
    if is_sparse(X):
        X = to_numpy(X).tocsr()
    objective._check_block(X)
    X_full, X = X, objective.features_of(X)  # the offset columns have no coefficients
    n = X.shape[0]
    if n == 0:
        raise InputError("X_sample has no rows; the Lipschitz bound needs data")
    if sample_weight is None:
        w = np.ones(n)
    else:
        w = np.asarray(to_numpy(sample_weight), dtype=np.float64).reshape(-1)
        if w.shape != (n,):
            raise InputError(f"sample_weight must have shape ({n},), got {w.shape}")
    total = float(w.sum())
    if not total > 0:
        raise InputError(f"the sample weights sum to {total!r}; they must be positive")
    w = w / total

    loss, name = objective.loss, type(objective.loss).__name__
    curvature = loss.curvature_bound
    if curvature is None and not hasattr(loss, "local_curvature"):
        raise ParameterError(f"{name} has neither a curvature_bound nor a local_curvature(y, raw, xp); "
                             "pass a numeric learning_rate")
    if curvature is None:
        if y is None and getattr(loss, "curvature_needs_y", True):
            raise InputError(f"the second derivative of {name} depends on the targets; pass them as y=")
        if y is not None:
            y = np.asarray(to_numpy(y), dtype=np.float64).reshape(-1)
            if y.shape != (n,):
                raise InputError(f"y must have shape ({n},), one target per row of X_sample, got {y.shape}")
        raw = objective.raw_prediction(np.zeros(objective.n_params) if params is None else params, X_full)
        with np.errstate(over="ignore"):  # overflow: an infinite bound, which the caller replaces
            second = loss.local_curvature(y, np.asarray(raw, dtype=np.float64), np)
        curvature = max(float(np.max(second)), 0.0)  # negative curvature only lowers the Hessian

    d = objective.n_features
    fit_intercept = objective.fit_intercept
    v = None
    if is_sparse(X):
        # the iteration lives on the columns the sample touches (the others' rows and
        # columns of the Gram matrix are zero): memory of the support, not of d (a
        # hashed model's 2**22 columns); the start vector is the same, restricted
        support = np.unique(X.indices)
        if 2 * support.size < d:
            X = sp.csr_matrix((X.data, np.searchsorted(support, X.indices), X.indptr), shape=(n, support.size))
            v, d = _power_start(d, fit_intercept, support), int(support.size)
    if v is None:
        v = _power_start(d, fit_intercept)

    def matvec(v):
        u = X @ v[:d]
        if fit_intercept:
            u = u + v[d]
        u = w * np.asarray(u, dtype=np.float64)
        out = np.asarray(X.T @ u, dtype=np.float64)
        return np.concatenate([out, [u.sum()]]) if fit_intercept else out

    eigenvalue = 0.0
    for _ in range(max_iter):
        mv = matvec(v)
        estimate = float(v @ mv)
        norm = np.linalg.norm(mv)
        if norm == 0.0:
            break
        v = mv / norm
        converged = abs(estimate - eigenvalue) <= tol * abs(estimate)
        eigenvalue = estimate
        if converged:
            break
    return curvature * eigenvalue + float(alpha_l2)


#: Entries of the power iteration's start vector drawn at a time (bounded memory).
_START_CHUNK = 2**20


def _power_start(d, fit_intercept, support=None):
    """The power iteration's start: a fixed pseudo-random unit vector of ``d`` entries
    (then the intercept's), or its entries at ``support`` (and the intercept's) scaled
    as in the full vector, drawn a chunk at a time."""
    rng = np.random.default_rng(0)
    n = d + fit_intercept
    if support is None:
        v = rng.standard_normal(n)
        return v / np.linalg.norm(v)
    keep = np.append(support, d) if fit_intercept else support
    parts, squares = [], 0.0
    for start in range(0, n, _START_CHUNK):
        chunk = rng.standard_normal(min(_START_CHUNK, n - start))
        squares += float(chunk @ chunk)
        lo, hi = np.searchsorted(keep, (start, start + chunk.size))
        parts.append(chunk[keep[lo:hi] - start])
    return np.concatenate(parts) / np.sqrt(squares)
