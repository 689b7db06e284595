"""Small argument checks shared by the optimizers and schedules.

Each check returns the value normalised to a builtin ``float``/``int`` (so that reprs,
equality and hashing do not depend on NumPy scalar types) or raises
:class:`~dask_dgd.exceptions.ParameterError` naming the parameter, the value received and
the valid range.
"""

import math
from numbers import Integral, Real

import numpy as np

from ..exceptions import ParameterError


def _is_real(value):
    return isinstance(value, Real) and not isinstance(value, bool)


def check_interval(name, value, low, high, *, closed="left"):
    """``value`` as a float in the interval from ``low`` to ``high``.

    ``closed`` is one of ``"left"`` ``[low, high)``, ``"right"`` ``(low, high]``,
    ``"both"`` ``[low, high]`` or ``"neither"`` ``(low, high)``.  ``high`` may be
    ``math.inf``; infinities and NaN are always rejected.
    """
    left = "[" if closed in ("left", "both") else "("
    right = "]" if closed in ("right", "both") else ")"
    ok = _is_real(value) and math.isfinite(value)
    if ok:
        ok = (low <= value if left == "[" else low < value) and (
            value <= high if right == "]" else value < high
        )
    if not ok:
        high_text = "inf" if high == math.inf else f"{high:g}"
        raise ParameterError(
            f"{name} must be in {left}{low:g}, {high_text}{right}; got {value!r}"
        )
    return float(value)


def check_positive(name, value):
    """``value`` as a finite float > 0."""
    return check_interval(name, value, 0, math.inf, closed="neither")


def check_int(name, value, minimum):
    """``value`` as an int >= ``minimum`` (bools are rejected)."""
    if not isinstance(value, Integral) or isinstance(value, bool) or value < minimum:
        raise ParameterError(f"{name} must be an int >= {minimum}; got {value!r}")
    return int(value)


def check_bool(name, value):
    """``value`` as a bool (NumPy bools are accepted)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ParameterError(f"{name} must be True or False; got {value!r}")
    return bool(value)
