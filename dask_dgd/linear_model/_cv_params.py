"""Parameter checks and shared docstring parts of the cross-validated estimators."""

import numbers

import numpy as np

from .._validation import Interval, Options, client_is_a_client

__all__ = ["_COMMON_CONSTRAINTS", "_REGRESSOR_DOC_PARAMS", "_cv_like", "_grid_like", "_ratios_like"]


def _cv_like(value):
    """an int >= 2 (the number of folds)"""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 2


def _ratios_like(value):
    """a float in [0, 1] or a non-empty list of them"""
    values = np.atleast_1d(np.asarray(value, dtype=object))
    return values.size > 0 and all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) and 0 <= v <= 1 for v in values)


def _grid_like(value):
    """an int >= 1 (how many, on a log scale) or a non-empty list of positive numbers"""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return value >= 1
    values = np.atleast_1d(np.asarray(value, dtype=object))
    return values.ndim == 1 and values.size > 0 and all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) and np.isfinite(v) and v > 0 for v in values)


_COMMON_CONSTRAINTS = {
    "fit_intercept": [bool],
    "cv": [_cv_like],
    "solver": [Options("auto", "cd", "lbfgs", "gd")],
    "max_iter": [Interval(numbers.Integral, 1, None, "left")],
    "tol": [Interval(numbers.Real, 0, None, "left")],
    "random_state": [None, Interval(numbers.Integral, 0, None, "left")],
    "verbose": [Interval(numbers.Integral, 0, None, "left"), bool],
    "client": [None, client_is_a_client],
}


_REGRESSOR_DOC_PARAMS = """
    fit_intercept : bool, default=True
        Whether to fit an intercept (never penalised).
    cv : int, default=5
        Number of folds.  Fold membership is computed on the workers from
        ``random_state`` and each row's position in the data
        (:func:`~dask_dgd.linear_model._cv.fold_ids`): folds are balanced within one row,
        as ``KFold(shuffle=True)``, and do not depend on the chunking nor on which worker
        holds a block.  scikit-learn splitters are not accepted: they need the rows'
        positions on the driver.
    solver : {"auto", "cd", "lbfgs", "gd"}, default="auto"
        "cd": for least squares (:class:`ElasticNetCV`), the exact path: one pass
        over ``X`` computing every fold's Gram matrix, then coordinate descent on the
        driver for every fold and penalty (:mod:`~dask_dgd._engine.solvers.gram_path`); for
        the other single-output families (binary logistic, Poisson, Gamma, Tweedie,
        negative binomial, binomial), IRLS coordinate descent along the path, one
        penalty at a time with every fold's Hessian from one Gram matrix's work per
        pass (:mod:`~dask_dgd._engine.solvers.cd_path`).  "lbfgs" (smooth penalties) and "gd"
        (proximal gradient, for L1) train the stacked path in warm-started groups of
        penalties.  "auto" picks "cd" up to ``dgd.cd-max-params`` (1024) coefficients
        per model, else "gd" for a path with an L1 part, else "lbfgs" (the multinomial
        always takes "gd"/"lbfgs").
    max_iter : int
        Iterations of the path's solver (and of the refit); with "cd", passes per
        penalty, and ``n_iter_`` counts passes (the exact least-squares path: the pass
        of the Gram matrices as one).
    tol : float, default=1e-4
        Stop when the largest entry of every column's (proximal) gradient ("cd": its
        minimum-norm subgradient) is at most ``tol``; the refit uses the same tolerance.
    random_state : int or None, default=None
        Seed of the fold assignment (None: 0; the folds are always reproducible).
    verbose : int, default=0
    client : distributed.Client or None, default=None
        As :class:`~dask_dgd.LinearRegression`'s."""
