"""Parameter checks of the cross-validated estimators."""

import numbers

import numpy as np

from .._validation import Interval, Options, client_is_a_client

__all__ = ["_COMMON_CONSTRAINTS", "_cv_like", "_grid_like", "_ratios_like"]


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
