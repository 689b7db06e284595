"""Which cells of a pointwise model's fitted grid the cells of a Dataset are.

A pointwise model predicts on any cells of its fitted grid, in any order and any
subset: each spatial dimension with 1-D coordinate values is matched by value (within
a tolerance far below the grid spacing, so float32 and float64 coordinates of one grid
match), a longitude in degrees modulo 360; a dimension without coordinate values by
position (the same size only).  Cells off the fitted grid are an :class:`InputError`
naming them and the way out.
"""

import numbers
import re

import numpy as np

from ..exceptions import InputError
from ._axes import _UNITS, classify

__all__ = ["grid_positions", "grid_table"]


#: Coordinate values match a fitted one within this much of their magnitude (float32
#: round trips are within 6e-8) and at most ``_GRID_SPACING`` of the fitted grid's spacing.
_GRID_RTOL = 1e-6
_GRID_SPACING = 0.01


def _is_longitude(ds, d):
    """Whether the dimension ``d`` of ``ds`` is a longitude in degrees: classified X
    (see :mod:`._axes`) with ``degrees_east`` units, standard_name ``longitude`` or
    the name ``lon``/``longitude`` (also with a numeric suffix: ``longitude_0``)."""
    if classify(ds, d)[0] != "X":
        return False
    attrs = ds[d].attrs
    return (_UNITS.get(str(attrs.get("units", "")).strip().lower()) == "X"
            or str(attrs.get("standard_name", "")).strip().lower() == "longitude"
            or re.sub(r"_?\d+$", "", str(d).lower()) in ("lon", "longitude"))


def _match_values(fitted, got, period=None):
    """The position in ``fitted`` of each value of ``got`` (-1 where none), both 1-D.

    Numbers match within ``_GRID_RTOL`` of their magnitude and ``_GRID_SPACING`` of the
    smallest spacing of ``fitted`` (``period``: modulo it, across the wrap too; a value
    repeated modulo ``period``, as a cyclic column at 0 and 360, is matched to its first
    position); other values (strings, dates) match exactly.  A fitted grid with repeated
    values (without ``period``) matches only itself, position by position."""
    if fitted.dtype.kind in "biuf" and got.dtype.kind in "biuf":
        f, g = np.asarray(fitted, dtype=np.float64), np.asarray(got, dtype=np.float64)
        if period:  # a longitude repeated modulo 360 (a cyclic column at 0 and 360) is one cell: its first
            f, g = np.mod(f, period), np.mod(g, period)
            sf, order = np.unique(f, return_index=True)
        else:
            order = np.argsort(f, kind="stable")
            sf = f[order]
        gaps = np.diff(np.concatenate([sf, sf[:1] + period])) if period else np.diff(sf)
        if not np.all(np.isfinite(sf)) or np.any(gaps <= 0):
            return _match_exactly(fitted, got)
        tol = min(_GRID_RTOL * max(1.0, float(np.max(np.abs(f)))), _GRID_SPACING * float(np.min(gaps, initial=np.inf)))
        if period:  # the neighbours across the wrap
            sf = np.concatenate([sf[-1:] - period, sf, sf[:1] + period])
            order = np.concatenate([order[-1:], order, order[:1]])
        pos = np.searchsorted(sf, g)
        lo, hi = np.clip(pos - 1, 0, sf.size - 1), np.clip(pos, 0, sf.size - 1)
        near = np.where(np.abs(sf[lo] - g) <= np.abs(sf[hi] - g), lo, hi)
        with np.errstate(invalid="ignore"):
            return np.where(np.abs(sf[near] - g) <= tol, order[near], -1)
    if fitted.dtype.kind in "biuf" or got.dtype.kind in "biuf":
        return np.full(got.size, -1)
    import pandas as pd

    index = pd.Index(fitted)
    return index.get_indexer(got) if index.is_unique else _match_exactly(fitted, got)


def _match_exactly(fitted, got):
    same = fitted.shape == got.shape and np.array_equal(fitted, got)
    return np.arange(got.size) if same else np.full(got.size, -1)


def _values_range(values):
    if values.size and values.dtype.kind in "biuf":
        return f"{values.size} values from {_shown(np.min(values))} to {_shown(np.max(values))}"
    return f"{values.size} values, {values[:1].tolist()}.."


def _shown(value):
    return f"{value:g}" if isinstance(value, (numbers.Real, np.floating, np.integer)) else repr(value)


def grid_table(grid, table, space_dims, ds):
    """A pointwise model's coefficient table ``table`` (``(*space, p)``, NumPy, on the
    fitted ``grid``: ``{dim: (size, values or None)}``) for the cells of ``ds``: the
    table itself on the fitted grid, else its rows taken at the positions of ``ds``'s
    cells in the fitted grid (:func:`grid_positions`)."""
    for axis, d in enumerate(space_dims):
        take = grid_positions(grid, ds, d)
        if take is not None:
            table = np.take(table, take, axis=axis)
    return table

def grid_positions(grid, ds, d):
    """The positions in the fitted grid of the cells of ``ds`` along the spatial
    dimension ``d`` (None: the fitted grid itself), matched by coordinate value
    (see :func:`_match_values`; longitudes modulo 360); without coordinate values,
    by position (the same size only).  Cells not on the fitted grid are an
    :class:`InputError` naming them and the way out."""
    size, values = grid[d]
    got = np.asarray(ds[d].values) if d in ds.coords and ds[d].ndim == 1 else None
    n = ds.sizes[d]
    if values is None or got is None:
        if values is None and n == size:
            return None
        if values is None:
            why = (f"the model was fitted without coordinate values for {d!r}, so its cells are matched by "
                   "position and the sizes must be equal: predict on the whole dimension, or give it "
                   f"coordinate values before fitting (ds.assign_coords({d}=...)) to predict on a part")
        else:
            why = (f"this Dataset has no coordinate values for {d!r} (the fitted grid has: "
                   f"{_values_range(values)}), so its cells cannot be matched to the fitted ones: give it its "
                   f"coordinates (ds.assign_coords({d}=...))")
        raise InputError(
            f"the {d!r} dimension of this Dataset ({n} values) differs from the grid the pointwise model was "
            f"fitted on ({size} values): {why}"
        )
    period = 360.0 if _is_longitude(ds, d) else None
    take = _match_values(values, got, period)
    missing = take < 0
    if missing.any():
        shown = ", ".join(_shown(v) for v in got[missing][:3]) + (", ..." if missing.sum() > 3 else "")
        modulo = ", matched modulo 360" if period else ""
        ref = f"ds.{d}" if str(d).isidentifier() else f"ds[{d!r}]"
        to = f"{d}=model.coef_.{d}" if str(d).isidentifier() else f"{{{d!r}: model.coef_[{d!r}]}}"
        convert = ""
        if period and values.dtype.kind in "biuf":  # nearest/interp are not modulo 360: the fitted convention first
            wrapped = f"{ref} % 360" if np.nanmin(values) >= 0 else f"({ref} + 180) % 360 - 180"
            assign = f"{d}={wrapped}" if str(d).isidentifier() else f"{{{d!r}: {wrapped}}}"
            convert = f"convert to the fitted longitudes first, ds = ds.assign_coords({assign}).sortby({d!r}), then "
        half = ""
        if values.dtype.kind in "biuf" and values.size > 1:  # no tolerance: cells beyond ds's extent get its edge
            half = f", tolerance={_shown(float(np.min(np.abs(np.diff(np.sort(values.astype(float)))))) / 2)}"
        raise InputError(
            f"{int(missing.sum())} of the {got.size} {d!r} values of this Dataset are not on the grid the "
            f"pointwise model was fitted on (not found: {shown}; fitted: {_values_range(values)}{modulo}): a "
            f"pointwise model predicts on cells of its fitted grid only (any subset, in any order); take the "
            f'fitted cells: {convert}ds.reindex({to}, method="nearest"{half}) (NaN where none is near) or '
            f"ds.interp({to}), or refit on this grid"
        )
    return None if take.size == size and np.array_equal(take, np.arange(size)) else take
