"""Which dimensions of a Dataset are time, latitude-like (Y) and longitude-like (X), and
which latitude weights the cells.

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
   ``rlat``/``nj``/...; ``lon``/``longitude``/``x``/``rlon``/``ni``/..., also with a
   numeric suffix stripped (``latitude_0``/``longitude_0``, which iris writes when one
   file holds two grids; ``lat2``, ``lon_1``);
6. a 2-D auxiliary latitude or longitude coordinate over it (CF ``standard_name``
   ``latitude``/``longitude``, ``degrees_north``/``degrees_east`` units, or a name such
   as ``nav_lat``; those named in the target's CF ``coordinates`` attribute first): its
   first dimension is Y and its second X, as CF and every curvilinear model write them
   (ORCA2's ``y``/``x`` without coordinate values, also when called ``dim0``/``dim1``).

The result is ordered (time, Y, X).  A dimension that none of the rules classifies (a
``level``, an ensemble ``member``) is an :class:`InputError` whose advice fits it:
select or reduce it, or give ``sample_dims`` explicitly; drop it if it has size 1; make a
2-D latitude that is a data variable a coordinate.  The choice and its reasons are
logged at INFO on the ``dask_dgd.climate`` logger.

The latitude for the area weights (:func:`weight_latitude`) follows the same
classification: the Y dimension's own coordinate when it is a latitude, else the 2-D
auxiliary latitude; a rotated-pole latitude is weighted as it is (its cells' area);
the units are read or the coordinate refused.  Latitude bounds (the CF ``bounds``
attribute) are read here too.  ``cos`` of this latitude weights the cells only where the
latitude is 1-D (a grid regular in latitude and longitude, or in rotated latitude and
longitude): a 2-D latitude (a curvilinear grid) is weighted by its cells' areas on the
sphere, from CF vertex bounds or estimated from the centres (:mod:`._areas`), and the
file's own cell areas (CF ``cell_measures``) come before any latitude.
"""

import logging
import re
from typing import NamedTuple

import numpy as np
import xarray as xr

from ..exceptions import InputError, ParameterError

__all__ = ["AUTO", "Latitude", "latitude_bounds", "resolve_dims", "weight_latitude"]

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

# names of latitude and longitude *coordinates* (1-D or 2-D) without CF attributes
_COORD_NAMES = {
    **dict.fromkeys(("lat", "lats", "latitude", "nav_lat", "y_lat"), "Y"),
    **dict.fromkeys(("lon", "lons", "longitude", "nav_lon", "x_lon"), "X"),
}

_SUFFIX = re.compile(r"_?[0-9]+$")  # iris's latitude_0, lat2, lon_1, ...

_DEGREES = {u for u, axis in _UNITS.items() if axis == "Y"} | {"degrees", "degree"}
_RADIANS = {"radians", "radian", "rad"}


def _stripped(name):
    """``name`` in lower case without a numeric suffix (``latitude_0``, ``lat2``)."""
    return _SUFFIX.sub("", str(name).lower()) or str(name).lower()


def _by_name(name, table):
    """``(axis, why)`` from ``table`` by ``name``, or by ``name`` without its numeric suffix."""
    lower = str(name).lower()
    if lower in table:
        return table[lower], "its name"
    stripped = _stripped(name)
    if stripped in table:
        return table[stripped], f"its name without the suffix ({stripped!r})"
    return None, None


def _geographic(name, var):
    """``"Y"`` for a true latitude coordinate, ``"X"`` for a longitude, else None: by
    ``standard_name``, ``units`` (``degrees_north``/``degrees_east`` and variants) or,
    without either, by name (``lat``, ``nav_lat``, ``latitude_0``, ...).  A rotated
    latitude (``grid_latitude``) is not a true one."""
    attrs = var.attrs
    standard_name = str(attrs.get("standard_name", "")).strip().lower()
    if standard_name in ("latitude", "longitude"):
        return "Y" if standard_name == "latitude" else "X"
    if standard_name:
        return None
    units = str(attrs.get("units", var.encoding.get("units", ""))).strip().lower()
    if units in _UNITS:
        return _UNITS[units]
    return _by_name(name, _COORD_NAMES)[0]


def _auxiliary(ds, target=None):
    """``[(name, axis)]``: the 2-D latitude (``"Y"``) and longitude (``"X"``) coordinates
    of ``ds``, those named in the target's CF ``coordinates`` attribute first."""
    names = list(map(str, ds.coords))
    if target is not None and target in ds.variables:
        var = ds.variables[target]
        named = str(var.attrs.get("coordinates", var.encoding.get("coordinates", ""))).split()
        names = [n for n in named if n in ds.variables] + names
    bounds = {str(v.attrs.get("bounds", v.encoding.get("bounds", ""))) for v in ds.variables.values()}
    out = []
    for name in dict.fromkeys(names):
        var = ds.variables[name]
        if var.ndim == 2 and name not in bounds:  # CF cell bounds are not coordinates
            axis = _geographic(name, var)
            if axis:
                out.append((name, axis))
    return out


def classify(ds, dim, target=None):
    """``(axis, why)`` of dimension ``dim`` of ``ds``: ``axis`` is ``"T"``, ``"Y"``,
    ``"X"``, another CF axis letter (e.g. ``"Z"``) or None when no rule matches
    (``target``: the variable whose CF ``coordinates`` attribute names 2-D auxiliary
    coordinates, if any)."""
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
    axis, why = _by_name(dim, _NAMES)
    if axis:
        return axis, why
    for name, kind in _auxiliary(ds, target):
        dims = ds.variables[name].dims
        if dim in dims:  # (Y, X), as CF and every curvilinear model write them
            which = "latitude" if kind == "Y" else "longitude"
            return "YX"[dims.index(dim)], f"dimension {dims.index(dim) + 1} of the 2-D {which} {name!r}{dims}"
    return None, None


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
        axis, why = classify(ds, d, target)
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
        shown = ", ".join(f"{d!r}" + (f" ({why})" if why else "") for d, why in unknown)
        raise InputError(
            f"the target {target!r} has the dimension(s) {shown}, which sample_dims=\"auto\" cannot classify as "
            f"time, latitude-like (Y) or longitude-like (X): {_unknown_advice(ds, unknown[0][0])}"
        )
    time, time_why = found["T"][0]
    if auto_dims:
        chosen = tuple(d for axis in "TYX" for d, _ in found[axis])
        reasons = ", ".join(f"{d} ({why})" for axis in "TYX" for d, why in found[axis])
        logger.info('sample_dims="auto" chose %s for %r: %s', chosen, target, reasons)
        return chosen, time
    logger.info('time_dim="auto" chose %r among sample_dims %s: %s (%s)', time, dims, time, time_why)
    return sample_dims, time


def _unknown_advice(ds, dim):
    """What to do about a dimension that no rule classifies."""
    if ds.sizes[dim] == 1:
        return (f"it has size 1: drop it (ds.squeeze({dim!r}) or ds.isel({dim}=0)), "
                "or pass sample_dims=(...) explicitly")
    for name, var in ds.data_vars.items():  # a 2-D latitude/longitude that is not a coordinate
        if var.ndim == 2 and dim in var.dims and _geographic(name, var.variable):
            return (f"the 2-D variable {name!r}{var.dims} looks like its latitude or longitude but is a data "
                    f"variable: make it a coordinate (ds = ds.set_coords({name!r})) so that its dimensions are "
                    "spatial (Y, X), or pass sample_dims=(...) explicitly")
    return (f"select or reduce them first (e.g. ds.isel({dim}=0) or ds.mean({dim!r})), "
            "or pass sample_dims=(...) explicitly")


def _check_target_spans_features(ds, target, features, dims):
    """The time, Y and X dimensions of the features all among the target's ``dims``."""
    names = [features] if isinstance(features, str) else list(features or ())
    grid = {}
    for name in [target] + names:
        if name not in ds.variables:
            continue  # a missing feature is reported by the feature spec
        for d in ds[name].dims:
            axis, _ = classify(ds, d, target)
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
    cells have vertex bounds: :func:`._areas.vertex_areas` reads them)."""
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


# ---------------------------------------------------------------- area-weight latitude
class Latitude(NamedTuple):
    """The coordinate the area weights are read from: its name and whether its values
    are radians (else degrees)."""

    name: str
    radians: bool


def weight_latitude(ds, space_dims, target, lat=AUTO):
    """The latitude coordinate whose ``cos`` weights the cells (a 1-D one; a 2-D one
    gives the cells whose areas weight them, see :mod:`._areas`), with its units checked.

    ``lat="auto"`` follows the classification of the spatial dimensions: the
    coordinate of the latitude-like (Y) dimension when it is a latitude (CF
    ``standard_name`` ``latitude``, ``units`` in degrees or radians, or a latitude name
    such as ``lat``, ``latitude_0``) or a rotated latitude (see below); else the 2-D
    auxiliary latitude coordinate over the spatial dimensions (``nav_lat(y, x)``; those
    named in the target's CF ``coordinates`` attribute first); without a Y dimension
    (stations), a latitude coordinate on the spatial dimensions.

    A rotated-pole grid (a Y coordinate with ``standard_name`` ``grid_latitude``, named
    ``rlat``, or a dimension of a target whose CF ``grid_mapping`` is
    ``rotated_latitude_longitude``) is weighted by its *rotated* latitude, also where a
    2-D true latitude is present: a rotation of the sphere keeps areas, so a cell
    spanning ``d_phi'`` by ``d_lambda'`` of the rotated grid has the area
    ``R^2 cos(phi') d_phi' d_lambda'`` (``cos`` of the true latitude would not give it).

    Units: ``degrees_north`` and its variants, ``degrees``, ``degree`` are degrees;
    ``radians``, ``radian``, ``rad`` radians; without ``units``, values beyond pi/2 are
    degrees and values all within [-pi/2, pi/2] are ambiguous (radians, or a narrow band
    in degrees) and refused, as are other units (``m`` of a projection ``y``).

    Raises
    ------
    InputError
        No latitude found, a Y dimension without coordinate values (and no 2-D
        latitude), a Y coordinate that is not a latitude (a projection ``y`` in metres,
        a ``y`` without units) and no 2-D latitude, ambiguous or foreign units.
    """
    if lat != AUTO:
        if lat not in ds.variables:
            if lat in ds.dims:
                raise _bare_lat_error(ds, lat)
            raise InputError(f"the Dataset has no latitude coordinate {lat!r}")
        return _checked_latitude(ds, lat, target)
    space = set(space_dims)
    aux = [n for n, axis in _auxiliary(ds, target) if axis == "Y" and set(ds.variables[n].dims) <= space]
    for d in space_dims:
        if classify(ds, d, target)[0] != "Y":
            continue
        if d not in ds.variables:  # no coordinate values: its index is no latitude
            if aux:
                return _checked_latitude(ds, aux[0], target)
            raise _bare_lat_error(ds, d)
        why_not = _not_latitude(ds, d, target)
        if why_not is None:
            return _checked_latitude(ds, d, target)
        if aux:
            return _checked_latitude(ds, aux[0], target)
        raise InputError(
            f"the latitude-like (Y) dimension {d!r} has a coordinate that is not a latitude ({why_not}) and no 2-D "
            f"latitude coordinate over {list(space_dims)} gives the latitude of each cell for the area weights: "
            + (f"set ds[{d!r}].attrs['units'] = 'degrees_north' if its values are latitudes, "
               if why_not.startswith("no units") else "")
            + f"give each cell its latitude (e.g. ds = ds.assign_coords(lat=({tuple(space_dims)}, values, "
            "{'units': 'degrees_north'}))), pass lat=<the latitude coordinate in degrees>, or area_weights=False"
        )
    for name, coord in ds.coords.items():  # no Y dimension (e.g. stations): a latitude on the spatial dims
        if coord.dims and set(coord.dims) <= space and _geographic(name, coord.variable) == "Y":
            return _checked_latitude(ds, str(name), target)
    raise InputError(
        f"no latitude among the spatial dimensions {list(space_dims)} or their coordinates for the "
        "area weights; pass lat='name' or area_weights=False"
    )


def _not_latitude(ds, name, target):
    """Why the coordinate ``name`` is not a (true or rotated) latitude, or None if it is."""
    var = ds.variables[name]
    standard_name = str(var.attrs.get("standard_name", "")).strip().lower()
    if standard_name in ("latitude", "grid_latitude") or _rotated(ds, name, target):
        return None
    if standard_name:
        return f"standard_name {standard_name!r}"
    units = str(var.attrs.get("units", var.encoding.get("units", ""))).strip()
    if units:
        return None if units.lower() in _DEGREES | _RADIANS else f"units {units!r}"
    if _by_name(name, _COORD_NAMES)[0] == "Y":
        return None
    return "no units or standard_name say its values are latitudes"


def _grid_mapping(ds, target):
    """The name of the target's CF grid-mapping variable if it is a rotated pole."""
    if target is None or target not in ds.variables:
        return None
    var = ds.variables[target]
    named = str(var.attrs.get("grid_mapping", var.encoding.get("grid_mapping", ""))).split(":")[0].strip()
    if named in ds.variables and ds.variables[named].attrs.get("grid_mapping_name") == "rotated_latitude_longitude":
        return named
    return None


def _rotated(ds, name, target):
    """Why the coordinate ``name`` is a rotated latitude, or None."""
    var = ds.variables[name]
    if str(var.attrs.get("standard_name", "")).strip().lower() == "grid_latitude":
        return "standard_name 'grid_latitude'"
    if _stripped(name) == "rlat":
        return "its name"
    mapping = _grid_mapping(ds, target)
    if mapping is not None and name in ds.variables[target].dims:
        return f"a dimension of {target!r}, whose grid_mapping {mapping!r} is rotated_latitude_longitude"
    return None


def _checked_latitude(ds, name, target):
    """:class:`Latitude` of coordinate ``name``, its units read (see :func:`weight_latitude`)."""
    coord = ds.variables[name]
    rotated = _rotated(ds, name, target)
    units = str(coord.attrs.get("units", coord.encoding.get("units", ""))).strip()
    if units.lower() in _DEGREES | _RADIANS:
        radians = units.lower() in _RADIANS
    elif units:
        raise InputError(
            f"the coordinate {name!r} has units {units!r}, which are not a latitude's (degrees_north, degrees or "
            "radians): area weights need the latitude of every cell; pass lat=<the latitude coordinate in degrees>, "
            "or area_weights=False"
        )
    else:
        values = np.asarray(coord.values, dtype=np.float64)
        finite = values[np.isfinite(values)]
        radians = False  # values beyond pi/2 cannot be radians
        if finite.size and np.abs(finite).max() <= np.pi / 2:
            raise InputError(
                f"the latitude coordinate {name!r} has no units and ranges from {finite.min():g} to "
                f"{finite.max():g}, within [-pi/2, pi/2]: radians, or a narrow band in degrees? Say which: "
                f"ds[{name!r}].attrs['units'] = 'radians' (or 'degrees_north'), or pass area_weights=False"
            )
    if rotated:
        logger.info("area weights: %r is a rotated latitude (%s): cells weighted by cos(%s), their area on the "
                    "sphere (a rotation keeps areas)", name, rotated, name)
    return Latitude(name, radians)


def _bare_lat_error(ds, dim):
    return InputError(
        f"area weights need the latitude of every cell in degrees, but the dimension {dim!r} has no coordinate "
        f"values (its index 0..{ds.sizes[dim] - 1} is not a latitude): give it one "
        f"(ds.assign_coords({dim}=...)) or pass area_weights=False"
    )
