"""The array namespace of a grid block, and moving small NumPy inputs onto its device.

A block task of the climate models gets the block's data (NumPy, CuPy, or any Array
API array, e.g. ``array_api_strict`` in the tests) together with small NumPy arrays
made on the driver: the cell weights, the time-only fields computed from the time
coordinate (seasonal terms, gap masks) and the fitted coefficients.  :func:`align`
finds the namespace of the data and moves those NumPy arrays onto the data's device,
once per task, so every operation that follows mixes nothing.  :func:`to_host` brings
a small result (per-cell statistics, scores) back to NumPy on the host.
"""

import array_api_compat

from .._backend import asarray_like, get_namespace, to_numpy

__all__ = ["align", "to_host"]


def align(*arrays):
    """``(xp, arrays)``: the namespace shared by the arrays that are not NumPy (NumPy
    if all are), and ``arrays`` with the NumPy ones copied onto the device of the
    others (``None`` entries stay ``None``).  Arrays of two non-NumPy namespaces raise
    ``TypeError`` (from ``array_api_compat``)."""
    device_arrays = [a for a in arrays if a is not None and not array_api_compat.is_numpy_array(a)]
    if not device_arrays:
        return get_namespace(), list(arrays)
    xp = get_namespace(*device_arrays)
    like = device_arrays[0]
    moved = [a if a is None or not array_api_compat.is_numpy_array(a) else asarray_like(a, like) for a in arrays]
    return xp, moved


def to_host(x):
    """``x`` (any namespace, any device) as a NumPy array on the host."""
    return to_numpy(x)
