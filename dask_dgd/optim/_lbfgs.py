"""L-BFGS for full-batch training: its settings and the two-loop recursion."""

import dataclasses
import math
from typing import ClassVar

import numpy as np

from ._checks import check_int

__all__ = ["LBFGS", "cubic_minimizer", "lbfgs", "lbfgs_direction", "strong_wolfe"]


@dataclasses.dataclass(frozen=True)
class LBFGS:
    """Settings of the limited-memory BFGS quasi-Newton method.

    Unlike the first-order optimizers this has no ``init``/``update``: the engine's
    L-BFGS solver keeps the pairs and runs the line search (each trial point is one
    distributed evaluation of the loss and gradient), with these settings and the
    direction of :func:`lbfgs_direction`.  It needs the exact full-batch gradient, so
    ``full_batch_only`` is True.

    Parameters
    ----------
    memory : int, default=10
        Number of past (step, gradient change) pairs kept to approximate the inverse
        Hessian (SciPy's ``maxcor``), >= 1.
    max_linesearch : int, default=20
        Most function evaluations per line search (SciPy's ``maxls``), >= 1.

    Notes
    -----
    The step is :math:`\\Delta_t = -\\alpha_t H_t g_t`, where :math:`H_t` is the two-loop
    recursion's inverse-Hessian approximation built from the last ``memory`` pairs
    :math:`(s_i, y_i) = (\\theta_{i+1} - \\theta_i, g_{i+1} - g_i)` and :math:`\\alpha_t`
    satisfies the strong Wolfe conditions (:func:`strong_wolfe`).

    References
    ----------
    Byrd, R. H., Lu, P., Nocedal, J. and Zhu, C. (1995). A Limited Memory Algorithm for
    Bound Constrained Optimization. SIAM J. Sci. Comput. 16(5).

    Examples
    --------
    >>> from dask_dgd.optim import LBFGS
    >>> LBFGS(memory=5)
    LBFGS(memory=5, max_linesearch=20)
    """

    full_batch_only: ClassVar[bool] = True

    memory: int = 10
    max_linesearch: int = 20

    def __post_init__(self):
        for name in ("memory", "max_linesearch"):
            object.__setattr__(self, name, check_int(name, getattr(self, name), 1))


def lbfgs(memory=10, max_linesearch=20):
    """Build :class:`LBFGS` settings; the arguments are those of :class:`LBFGS`.

    Examples
    --------
    >>> from dask_dgd.optim import lbfgs
    >>> lbfgs(memory=3).full_batch_only
    True
    """
    return LBFGS(memory=memory, max_linesearch=max_linesearch)


def lbfgs_direction(grad, s_list, y_list):
    """The L-BFGS search direction ``-H grad`` by the two-loop recursion.

    Parameters
    ----------
    grad : ndarray of shape (n,)
    s_list, y_list : lists of ndarray of shape (n,)
        The kept pairs, oldest first: parameter steps and gradient changes, each with
        ``s @ y > 0``.

    Returns
    -------
    ndarray of shape (n,)
        Minus the gradient scaled by the inverse-Hessian approximation, whose initial
        matrix is ``(s @ y) / (y @ y)`` times the identity (the newest pair's).

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd.optim import lbfgs_direction
    >>> A = np.diag([1.0, 10.0])  # a quadratic: the gradient change is A s
    >>> s = [np.array([1.0, 0.0]), np.array([0.0, 1.0])]
    >>> y = [A @ v for v in s]
    >>> lbfgs_direction(np.array([1.0, 10.0]), s, y)  # exactly -A^-1 g here
    array([-1., -1.])
    """
    q = np.array(grad, dtype=np.float64, copy=True)
    rho = [1.0 / float(y @ s) for s, y in zip(s_list, y_list)]
    alpha = []
    for s, y, r in zip(reversed(s_list), reversed(y_list), reversed(rho)):
        a = r * float(s @ q)
        alpha.append(a)
        q -= a * y
    if s_list:
        q *= float(s_list[-1] @ y_list[-1]) / float(y_list[-1] @ y_list[-1])
    for s, y, r, a in zip(s_list, y_list, rho, reversed(alpha)):
        b = r * float(y @ q)
        q += (a - b) * s
    return -q


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
