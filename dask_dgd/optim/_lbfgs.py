"""L-BFGS settings for full-batch training."""

import dataclasses
from typing import ClassVar

from ._checks import check_int

__all__ = ["LBFGS", "lbfgs"]


@dataclasses.dataclass(frozen=True)
class LBFGS:
    """Settings of the limited-memory BFGS quasi-Newton method.

    Unlike the first-order optimizers this has no ``init``/``update``: the engine runs
    SciPy's L-BFGS-B (``scipy.optimize.minimize(method="L-BFGS-B")``) on the distributed
    loss and gradient, with these settings.  It needs the exact full-batch gradient, so
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
    satisfies the Wolfe conditions.

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
