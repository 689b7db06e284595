"""Which dimensions of a Dataset are time, latitude-like (Y) and longitude-like (X).

``sample_dims="auto"`` and ``time_dim="auto"`` are resolved here, against the target
variable's dimensions, by the CF conventions first and common names last.  For each
dimension, the first rule that matches decides:

1. its coordinate's ``axis`` attribute (``"T"``, ``"Y"``, ``"X"``; ``"Z"`` is a vertical
   axis, not a sample dimension);
2. its ``standard_name``: ``time``; ``latitude``, ``grid_latitude``,
   ``projection_y_coordinate``; ``longitude``, ``grid_longitude``,
   ``projection_x_coordinate``;
3. its ``units``: ``degrees_north`` and variants (``degree_N``, ``degreesN``, ...),
   ``degrees_east`` and variants, ``<unit> since <date>`` (time not decoded);
4. its values: datetime64 or cftime dates are time;
5. its name: ``time``/``t``/``valid_time``/``date``/...; ``lat``/``latitude``/``y``/
   ``rlat``/``nj``/...; ``lon``/``longitude``/``x``/``rlon``/``ni``/....

The result is ordered (time, Y, X).  A dimension that none of the rules classifies (a
``level``, an ensemble ``member``) is an :class:`InputError`: it must be selected or
reduced first, or ``sample_dims`` given explicitly.  The choice and its reasons are
logged at INFO on the ``dask_dgd.climate`` logger.

Latitude bounds (the CF ``bounds`` attribute) are read here too, for the area weights.
"""

import logging

import numpy as np
import xarray as xr

from ..exceptions import InputError, ParameterError

__all__ = ["AUTO", "latitude_bounds", "resolve_dims"]

logger = logging.getLogger("dask_dgd.climate")

AUTO = "auto"

_KINDS = {"T": "time", "Y": "latitude-like (Y)", "X": "longitude-like (X)"}

_STANDARD_NAMES = {
    "time": "T",
    "latitude": "Y", "grid_latitude": "Y", "projection_y_coordinate": "Y", "projection_y_angular_coordinate": "Y",
    "longitude": "X", "grid_longitude": "X", "projection_x_coordinate": "X", "projection_x_angular_coordinate": "X",
}

_UNITS = {
    **dict.fromkeys(("degrees_north", "degree_north", "degrees_n", "degree_n", "degreesn", "degreen"), "Y"),
    **dict.fromkeys(("degrees_east", "degree_east", "degrees_e", "degree_e", "degreese", "degreee"), "X"),
}

_NAMES = {
    **dict.fromkeys(("time", "t", "valid_time", "date", "dates", "datetime", "times", "time_counter",
                     "ocean_time"), "T"),
    **dict.fromkeys(("lat", "lats", "latitude", "y", "rlat", "nj", "j", "yc", "south_north", "grid_yt",
                     "nav_lat"), "Y"),
    **dict.fromkeys(("lon", "lons", "longitude", "x", "rlon", "ni", "i", "xc", "west_east", "grid_xt",
                     "nav_lon"), "X"),
}


def classify(ds, dim):
    """``(axis, why)`` of dimension ``dim`` of ``ds``: ``axis`` is ``"T"``, ``"Y"``,
    ``"X"``, another CF axis letter (e.g. ``"Z"``) or None when no rule matches."""
    coord = ds.variables.get(dim)  # the dimension coordinate, if it has one
    if coord is not None:
        attrs = coord.attrs
        axis = str(attrs.get("axis", "")).strip().upper()
        if axis:
            return axis, f"CF axis {axis}"
        standard_name = str(attrs.get("standard_name", "")).strip().lower()
        if standard_name in _STANDARD_NAMES:
            return _STANDARD_NAMES[standard_name], f"standard_name {standard_name!r}"
        units = str(attrs.get("units", coord.encoding.get("units", ""))).strip()
        if units.lower() in _UNITS:
            return _UNITS[units.lower()], f"units {units!r}"
        if " since " in units.lower():
            return "T", f"units {units!r}"
        if coord.dtype.kind == "M":
            return "T", "datetime64 values"
        if coord.dtype.kind == "O" and coord.size:
            first = np.asarray(coord.values).ravel()[0]
            if type(first).__module__.split(".")[0] == "cftime":
                return "T", "cftime values"
    axis = _NAMES.get(str(dim).lower())
    return axis, ("its name" if axis else None)


def resolve_dims(ds, target, sample_dims=AUTO, time_dim=AUTO, features=None):
    """``(sample_dims, time_dim)`` with ``"auto"`` resolved against ``ds``'s ``target``.

    An explicit ``sample_dims`` and ``time_dim`` are returned as they are (checked
    later by the feature spec).  ``sample_dims="auto"``: the target's dimensions
    ordered (time, Y, X); ``time_dim="auto"``: the one time dimension among them.  A
    time, Y or X dimension of a feature (``features``: names, or None) that the
    target lacks is an error, as with explicit sample dimensions: a target must vary
    over every sample dimension.

    Raises
    ------
    ParameterError
        ``sample_dims`` is a string other than ``"auto"``.
    InputError
        The target is missing, has a dimension that is not time, Y or X, has two
        dimensions of one kind, or has no time dimension.
    """
    if isinstance(sample_dims, str) and sample_dims != AUTO:
        raise ParameterError(
            f"sample_dims must be 'auto' or a tuple of dimension names such as ('time', 'lat', 'lon'); "
            f"got {sample_dims!r}"
        )
    auto_dims, auto_time = isinstance(sample_dims, str), isinstance(time_dim, str) and time_dim == AUTO
    if not (auto_dims or auto_time):
        return sample_dims, time_dim
    if not isinstance(ds, xr.Dataset):
        raise InputError(f"expected an xarray Dataset; got {type(ds).__name__}")
    if auto_dims and target not in ds.variables:
        raise InputError(f"the Dataset has no variable {target!r} (variables: {sorted(map(str, ds.data_vars))})")
    dims = tuple(ds[target].dims) if auto_dims else tuple(sample_dims)
    if auto_dims:
        _check_target_spans_features(ds, target, features, dims)
    where = f"the dimensions {list(dims)} of the target {target!r}" if auto_dims else f"sample_dims {dims}"
    found = {"T": [], "Y": [], "X": []}
    unknown = []
    for d in dims:
        if not auto_time and d == time_dim:
            found["T"].append((d, "time_dim"))
            continue
        axis, why = classify(ds, d)
        if axis in found:
            found[axis].append((d, why))
        else:
            unknown.append((d, why))
    if not auto_time and time_dim not in dims:
        raise InputError(
            f"time_dim {time_dim!r} is not one of {where}; pass the target's time dimension, or time_dim='auto'"
        )
    setting = 'sample_dims="auto"' if auto_dims else 'time_dim="auto"'
    if not found["T"]:
        raise InputError(
            f"{setting} found no time dimension among {where}: none has a coordinate with CF axis 'T', "
            "standard_name 'time', datetime or cftime values, or a name such as 'time' or 'valid_time'; "
            "give its coordinate axis='T', or pass time_dim= (and sample_dims=) explicitly"
        )
    for axis, hits in found.items():
        if len(hits) > 1 and (auto_dims or axis == "T"):
            shown = " and ".join(f"{d!r} ({why})" for d, why in hits)
            raise InputError(
                f"{setting} found {len(hits)} {_KINDS[axis]} dimensions among {where}: {shown}; "
                "select one, or pass sample_dims= and time_dim= explicitly"
            )
    if auto_dims and unknown:
        names = [d for d, _ in unknown]
        shown = ", ".join(f"{d!r}" + (f" ({why})" if why else "") for d, why in unknown)
        raise InputError(
            f"the target {target!r} has the dimension(s) {shown}, which sample_dims=\"auto\" cannot classify as "
            f"time, latitude-like (Y) or longitude-like (X): select or reduce them first (e.g. "
            f"ds.isel({names[0]}=0) or ds.mean({names[0]!r})), or pass sample_dims=(...) explicitly"
        )
    time, time_why = found["T"][0]
    if auto_dims:
        chosen = tuple(d for axis in "TYX" for d, _ in found[axis])
        reasons = ", ".join(f"{d} ({why})" for axis in "TYX" for d, why in found[axis])
        logger.info('sample_dims="auto" chose %s for %r: %s', chosen, target, reasons)
        return chosen, time
    logger.info('time_dim="auto" chose %r among sample_dims %s: %s (%s)', time, dims, time, time_why)
    return sample_dims, time


def _check_target_spans_features(ds, target, features, dims):
    """The time, Y and X dimensions of the features all among the target's ``dims``."""
    names = [features] if isinstance(features, str) else list(features or ())
    grid = {}
    for name in [target] + names:
        if name not in ds.variables:
            continue  # a missing feature is reported by the feature spec
        for d in ds[name].dims:
            axis, _ = classify(ds, d)
            if axis in _KINDS and d not in grid:
                grid[d] = axis
    lacking = [d for d in grid if d not in dims]
    if lacking:
        every = [d for axis in "TYX" for d in grid if grid[d] == axis]
        raise InputError(
            f"the target {target!r} has dimensions {list(dims)} and lacks the sample dimension(s) {lacking}: a target "
            f"must vary over every sample dimension {every} (the features have them); choose another target, or "
            "select the features to the target's dimensions"
        )


def latitude_bounds(ds, name):
    """The CF cell bounds of the 1-D latitude coordinate ``name`` as an array of shape
    ``(n, 2)`` (the coordinate's units), or None without a ``bounds`` attribute, when
    the variable it names is not in ``ds`` or the coordinate is not 1-D (curvilinear
    cells have 4 vertices: their weights stay ``cos(latitude)``)."""
    coord = ds[name]
    bounds_name = coord.attrs.get("bounds", coord.encoding.get("bounds"))
    if not bounds_name or bounds_name not in ds.variables or coord.ndim != 1:
        return None
    bounds = ds[bounds_name]
    (dim,) = coord.dims
    if bounds.ndim != 2 or dim not in bounds.dims or bounds.sizes[dim] != coord.size:
        raise InputError(
            f"the latitude bounds variable {bounds_name!r} of {name!r} has dimensions {dict(bounds.sizes)}; CF "
            f"bounds of a 1-D coordinate have shape ({dim}: {coord.size}, 2): fix them, or drop the bounds attribute "
            f"(del ds[{name!r}].attrs['bounds']) to weight by cos(latitude)"
        )
    other = next(d for d in bounds.dims if d != dim)
    if bounds.sizes[other] != 2:
        raise InputError(
            f"the latitude bounds variable {bounds_name!r} of {name!r} has {bounds.sizes[other]} vertices per cell "
            f"along {other!r}; CF bounds of a 1-D coordinate have 2: fix them, or drop the bounds attribute"
        )
    values = np.asarray(bounds.transpose(dim, other).values, dtype=np.float64)
    if not np.isfinite(values).all():
        raise InputError(f"the latitude bounds variable {bounds_name!r} of {name!r} is not all finite (NaN or inf): "
                         "fix it, or drop the bounds attribute to weight by cos(latitude)")
    return values
