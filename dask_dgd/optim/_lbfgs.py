"""L-BFGS for full-batch training: its settings and the two-loop recursion (its line
search is :func:`~._linesearch.strong_wolfe`)."""

import dataclasses
from typing import ClassVar

import numpy as np

from ._checks import check_int

__all__ = ["LBFGS", "lbfgs", "lbfgs_direction"]


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
    sy = [float(y @ s) for s, y in zip(s_list, y_list)]
    yy = [float(y @ y) for y in y_list[-1:]]
    return two_loop(grad, s_list, y_list, sy, yy[-1] if yy else None)


def two_loop(grad, s_list, y_list, sy, yy_last, work=None):
    """:func:`lbfgs_direction` from the pairs' dot products, which a solver keeps as it
    adds the pairs: ``sy`` (``s @ y`` of each pair) and ``yy_last`` (``y @ y`` of the
    newest; None without pairs).  The vector work is done in place, in one result and
    one scratch vector (``work``, of ``grad``'s length: allocated when None): the same
    operations, so the same floats, as the textbook recursion, without the
    ``2 * memory`` temporaries of ``q -= a * y``."""
    q = np.array(grad, dtype=np.float64, copy=True)
    tmp = np.empty_like(q) if work is None else work
    rho = [1.0 / v for v in sy]
    alpha = []
    for s, y, r in zip(reversed(s_list), reversed(y_list), reversed(rho)):
        a = r * float(s @ q)
        alpha.append(a)
        q -= np.multiply(y, a, out=tmp)
    if s_list:
        q *= sy[-1] / yy_last
    for s, y, r, a in zip(s_list, y_list, rho, reversed(alpha)):
        b = r * float(y @ q)
        q += np.multiply(s, a - b, out=tmp)
    return np.negative(q, out=q)
