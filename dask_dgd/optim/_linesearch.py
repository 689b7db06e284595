r"""The line-search rules of every full-batch solver, written once.

- :func:`strong_wolfe`: the strong Wolfe search of L-BFGS (a generator of trial steps);
- :func:`sufficient_decrease`: Armijo's rule, and with ``slope`` the model decrease
  :math:`\Delta = g^\top d + \lambda (\lVert x + d \rVert_1 - \lVert x \rVert_1)`
  Tseng and Yun's rule for a composite (L1) objective, for the backtracking of the
  Newton/IRLS solvers;
- :func:`ties`: the objective's values differ only by rounding (``64 eps |f|``); near
  the optimum a step whose values tie is judged by another measure (:func:`accepts`: a
  smaller gradient or subgradient shows the step is right; L-BFGS judges a tie by the
  change its slopes imply), and a model decrease below :func:`rounding_level` is no
  decrease.

Pure functions: nothing here knows how a trial is evaluated (the solvers make each one
distributed step).
"""

import math

import numpy as np

__all__ = ["ARMIJO", "INCREASE_SLACK", "MAX_HALVINGS", "accepts", "cubic_minimizer", "no_increase",
           "rounding_level", "strong_wolfe", "sufficient_decrease", "ties"]

#: Armijo's (and Tseng-Yun's) sufficient-decrease constant.
ARMIJO = 1e-4
#: Halvings of a Newton step before its backtracking gives up.
MAX_HALVINGS = 30
#: The relative increase of an objective that :func:`no_increase` still counts as none.
INCREASE_SLACK = 1e-12


def rounding_level(f):
    """The change of an objective of value ``f`` that rounding can make: ``64 eps |f|``."""
    return 64 * np.finfo(float).eps * abs(f)


def ties(f_new, f_old):
    """Whether ``f_new`` is no more than ``f_old`` plus its rounding level."""
    return f_new <= f_old + rounding_level(f_old)


def no_increase(f_new, f_old):
    """Whether ``f_new`` is at most ``f_old`` plus :data:`INCREASE_SLACK` of its
    magnitude; elementwise on arrays.  An infinite ``f_old`` (nothing accepted yet)
    admits every finite ``f_new``; a NaN is never admitted.

    >>> import numpy as np
    >>> no_increase(np.array([1.0, 1.0 + 1e-13, 1.1, np.nan]), np.array([1.0, 1.0, 1.0, 1.0])).tolist()
    [True, True, False, False]
    >>> bool(no_increase(5.0, np.inf))
    True
    """
    finite = np.isfinite(f_old)
    slack = INCREASE_SLACK * np.abs(np.where(finite, f_old, 0.0))
    return f_new <= f_old + slack


def sufficient_decrease(f_new, f_old, t, slope):
    """Armijo's condition at step ``t`` (``slope``: the directional derivative, or the
    model decrease of a composite objective, Tseng and Yun)."""
    return f_new <= f_old + ARMIJO * t * slope


def accepts(f_new, f_old, t, slope, measure_new, measure_old):
    """A backtracking step's acceptance: sufficient decrease, or values that tie at
    rounding level with a smaller ``measure`` (the largest entry of the gradient or of
    the minimum-norm subgradient)."""
    return sufficient_decrease(f_new, f_old, t, slope) or (ties(f_new, f_old) and measure_new < measure_old)


def cubic_minimizer(x1, f1, g1, x2, f2, g2, bounds=None):
    """The minimiser of the cubic through two points with their slopes, clipped to
    ``bounds`` (default: the interval between the points); the middle of the bounds
    when the cubic has no minimiser or a value is not finite."""
    lo, hi = bounds if bounds is not None else (min(x1, x2), max(x1, x2))
    if not all(math.isfinite(v) for v in (f1, g1, f2, g2)) or x1 == x2:
        return 0.5 * (lo + hi)
    d1 = g1 + g2 - 3.0 * (f1 - f2) / (x1 - x2)
    d2_square = d1 * d1 - g1 * g2
    if d2_square < 0:
        return 0.5 * (lo + hi)
    d2 = math.sqrt(d2_square)
    if x1 <= x2:
        denom = g2 - g1 + 2.0 * d2
        pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / denom) if denom != 0 else 0.5 * (lo + hi)
    else:
        denom = g1 - g2 + 2.0 * d2
        pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / denom) if denom != 0 else 0.5 * (lo + hi)
    if not math.isfinite(pos):
        return 0.5 * (lo + hi)
    return min(max(pos, lo), hi)


def strong_wolfe(f0, slope0, t, max_trials, c1=1e-4, c2=0.9, min_width=1e-12):
    """A line search for the strong Wolfe conditions, as a generator.

    It yields trial step lengths and is sent back ``(value, slope)`` at each (the
    objective and its directional derivative there; ``inf`` when not finite), so the
    caller decides how a trial is evaluated (here: one distributed step each).  It
    returns the accepted step length, or 0.0 when none decreased the objective.
    Bracketing by cubic extrapolation, then zooming by safeguarded cubic interpolation
    (Nocedal and Wright, *Numerical Optimization*, algorithms 3.5 and 3.6).
    """
    t_prev, f_prev, g_prev = 0.0, f0, slope0
    trials = 0
    bracket = None
    while trials < max_trials:
        f_new, g_new = yield t
        trials += 1
        if f_new > f0 + c1 * t * slope0 or (trials > 1 and f_new >= f_prev):
            bracket = [[t_prev, f_prev, g_prev], [t, f_new, g_new]]
            break
        if abs(g_new) <= -c2 * slope0:
            return t
        if g_new >= 0:
            bracket = [[t_prev, f_prev, g_prev], [t, f_new, g_new]]
            break
        # extrapolate: a longer step, at least 1% further, at most 10x
        t_next = cubic_minimizer(t_prev, f_prev, g_prev, t, f_new, g_new,
                                 bounds=(t + 0.01 * (t - t_prev), 10.0 * t))
        t_prev, f_prev, g_prev = t, f_new, g_new
        t = t_next
    if bracket is None:  # the trials ran out while the objective kept decreasing
        return t_prev
    insufficient = False
    while trials < max_trials:
        low, high = (bracket[0], bracket[1]) if bracket[0][1] <= bracket[1][1] else (bracket[1], bracket[0])
        a, b = min(bracket[0][0], bracket[1][0]), max(bracket[0][0], bracket[1][0])
        if b - a <= min_width * max(abs(a), abs(b)):  # the bracket has shrunk to rounding
            break
        t = cubic_minimizer(*bracket[0], *bracket[1])
        margin = 0.1 * (b - a)
        if min(b - t, t - a) < margin:  # too close to an end: move inside
            if insufficient or t >= b or t <= a:
                t = b - margin if abs(t - b) < abs(t - a) else a + margin
                insufficient = False
            else:
                insufficient = True
        else:
            insufficient = False
        f_new, g_new = yield t
        trials += 1
        point = [t, f_new, g_new]
        if f_new > f0 + c1 * t * slope0 or f_new >= low[1]:
            high[:] = point
        else:
            if abs(g_new) <= -c2 * slope0:
                return t
            if g_new * (high[0] - low[0]) >= 0:
                high[:] = low
            low[:] = point
    low = bracket[0] if bracket[0][1] <= bracket[1][1] else bracket[1]
    return low[0] if low[1] < f0 else 0.0
