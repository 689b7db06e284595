"""Cell areas for the area weights of grids where ``cos(latitude)`` is not the area.

``cos(latitude)`` of a cell's centre is its relative area only on a grid regular in
latitude and longitude (or in rotated latitude and longitude).  On a curvilinear grid
(ORCA2/NEMO's ``nav_lat(y, x)``) it is not: on ORCA2 it gives the equatorial band about
1.9 times its share of the area, and the ratio to the true area runs from 0.016 to 4
over the sea cells.  The weights come instead from, in this order:

1. the cell areas the file gives, CF ``cell_measures = "area: <name>"`` on the target
   (else the first feature) naming a variable of the Dataset on the spatial dimensions
   (:func:`measured_areas`), on any grid;
2. on a curvilinear grid, the CF vertex bounds of the 2-D latitude and longitude
   (``bounds`` attributes naming ``(Y, X, n_vertex)`` variables): each cell's area on
   the unit sphere, the area of its spherical polygon (:func:`vertex_areas`,
   :func:`polygon_areas`);
3. on a curvilinear grid with neither, the areas estimated from the cell centres
   (:func:`centre_areas`): each cell's vertices at the normalised mean of the unit
   vectors of the four centres around them, the centres extrapolated by one row and
   column beyond the edges.  Measured against the exact areas: within 0.02% on a
   regular 1-degree grid, and on ORCA2 within 0.16% on interior sea cells and 1.5% on
   the edge rows and columns.  Without a 2-D longitude over the same dimensions, with
   latitudes or longitudes that are not all finite, or with fewer than 2 cells along a
   dimension, the grid is refused (:func:`no_areas_error`).

All are divided by their largest finite value: the weights are at most 1, on the scale
of ``cos(latitude)``.
"""

import logging
import re

import numpy as np
import xarray as xr

from ..exceptions import InputError
from ._axes import _RADIANS, _auxiliary

__all__ = ["centre_areas", "estimated_areas", "measured_areas", "no_areas_error", "polygon_areas", "vertex_areas"]

logger = logging.getLogger("dask_dgd.climate")

_ROWS = 256  # grid rows per pass of the vectorised area formulas


def _attr(var, key):
    return str(var.attrs.get(key, var.encoding.get(key, ""))).strip()


def measured_areas(ds, variables, space_dims, target):
    """Weights from CF ``cell_measures`` (rule 1), or None.

    The first of ``variables`` (the target, then the first feature) in ``ds`` with a
    ``cell_measures`` attribute decides; its ``area: <name>`` names the cell areas.
    ``<name>`` not in ``ds`` (CF lets it live in another file): None, logged at INFO.
    Its dimensions must be the spatial dimensions or some of them (it is broadcast).
    The areas divided by their largest finite value are returned; cells whose area is
    negative or not finite get NaN weights (masked) when ``target`` has no value there,
    and are an :class:`InputError` otherwise.
    """
    owner = next((v for v in variables if v is not None and v in ds.variables
                  and _attr(ds.variables[v], "cell_measures")), None)
    if owner is None:
        return None
    found = re.search(r"(?:^|\s)area:\s*(\S+)", _attr(ds.variables[owner], "cell_measures"))
    if found is None:
        return None
    name = found.group(1)
    if name not in ds.variables:
        logger.info("area weights: cell_measures of %r names the cell areas %r, which are not in the Dataset "
                    "(add them, e.g. ds[%r] = the areas from the grid file, to weight by them): weights from "
                    "the grid instead", owner, name, name)
        return None
    area = ds[name]
    if not area.dims or not set(area.dims) <= set(space_dims):
        raise InputError(
            f"the cell areas {name!r} (cell_measures of {owner!r}) have dimensions {area.dims}; they must be on "
            f"the spatial dimensions {tuple(space_dims)} or some of them: fix the variable, or drop the attribute "
            f"(del ds[{owner!r}].attrs['cell_measures']) to weight by the grid"
        )
    values = np.asarray(area.values, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        has_data = np.zeros(values.shape, dtype=bool)
        if target is not None and target in ds.variables:
            present = ds[target].notnull()
            others = [d for d in present.dims if d not in area.dims]
            has_data = np.asarray(present.any(others).broadcast_like(area).transpose(*area.dims).values)
        hit = bad & has_data
        if hit.any():
            raise InputError(
                f"the cell areas {name!r} (cell_measures of {owner!r}) are negative or not finite (NaN, inf) at "
                f"{int(hit.sum())} cells where {target!r} has values: fix them (areas are >= 0), drop the attribute "
                f"(del ds[{owner!r}].attrs['cell_measures']) to weight by the grid, or pass area_weights=False"
            )
    good = values[~bad]
    top = good.max() if good.size else 0.0
    if not top > 0:
        raise InputError(f"the cell areas {name!r} (cell_measures of {owner!r}) are all zero, negative or NaN: fix "
                         f"them, or drop the attribute (del ds[{owner!r}].attrs['cell_measures'])")
    logger.info("area weights: the cell areas %r (CF cell_measures of %r), divided by their largest value %g",
                name, owner, top)
    return xr.DataArray(np.where(bad, np.nan, values / top), dims=area.dims)


def polygon_areas(lat, lon, parallels=True):
    """The area on the unit sphere (steradians) of each spherical polygon.

    ``lat``, ``lon``: radians, shape ``(..., n_vertex)``, the vertices in order (either
    way round).  The edges are great-circle arcs, except that (with ``parallels``) an edge
    between two vertices of the same latitude follows that parallel (a latitude-longitude cell's edge:
    a regular grid written with 2-D coordinates gets the exact areas
    ``(sin(hi) - sin(lo)) * dlon``, as with 1-D bounds).  The polygon is cut into
    triangles from its first vertex; each triangle's signed solid angle ``E`` comes from
    Van Oosterom & Strackee (1983), ``tan(E / 2) = a . (b x c) / (1 + a . b + b . c + c .
    a)`` on the unit vectors of its vertices; each parallel edge from ``a`` to ``b`` adds
    the area between it and the great circle, ``s (dlon (1 - s sin(lat)) - E)`` (``s``
    the sign of the nearer pole, ``E`` the triangle (pole, a, b) from its colatitude and
    ``dlon``: ``tan(E / 2) = t sin(dlon) / (1 + t cos(dlon))``, ``t`` the squared
    tangent of half the colatitude); the absolute value of the sum is the area
    (right for convex and concave cells alike).  Repeated vertices (cells collapsed at the poles or the fold of
    a tripolar grid) add triangles of zero area."""
    lat = np.asarray(lat, dtype=np.float64)
    lon = np.asarray(lon, dtype=np.float64)
    v = _unit_vectors(lat, lon)
    signed = _excess(v[..., :1, :], v[..., 1:-1, :], v[..., 2:, :]).sum(axis=-1)
    # an edge between two vertices of the same latitude follows the parallel: add the
    # area between it and the great circle, the cap sector from the nearer pole less the
    # triangle (pole, a, b)
    lat_b, lon_b = np.roll(lat, -1, axis=-1), np.roll(lon, -1, axis=-1)
    d_lon = lon_b - lon  # within (-pi, pi], wrapped only where needed (keeps its digits)
    d_lon = np.where(d_lon > np.pi, d_lon - 2 * np.pi, np.where(d_lon <= -np.pi, d_lon + 2 * np.pi, d_lon))
    parallel = (lat == lat_b) & (d_lon != 0) & (np.abs(lat) < np.pi / 2)
    if parallels and parallel.any():
        s = np.where(lat >= 0, 1.0, -1.0)
        far = 1.0 - s * np.sin(lat)  # 1 - cos(colatitude from the nearer pole)
        t = far / (1.0 + s * np.sin(lat))  # tan(colatitude / 2) ** 2
        triangle = 2.0 * np.arctan2(t * np.sin(d_lon), 1.0 + t * np.cos(d_lon))
        signed = signed + np.where(parallel, s * (d_lon * far - triangle), 0.0).sum(axis=-1)
    return np.abs(signed)


def _excess(a, b, c):
    """The signed solid angle of the spherical triangles ``a, b, c`` (unit vectors on the
    last axis), by Van Oosterom & Strackee's formula; the triple product as
    ``a . ((b - a) x (c - a))``, which keeps its precision on small cells."""
    num = np.einsum("...i,...i->...", a, np.cross(b - a, c - a))
    den = 1.0 + np.einsum("...i,...i->...", a, b) + np.einsum("...i,...i->...", b, c) \
        + np.einsum("...i,...i->...", c, a)
    return 2.0 * np.arctan2(num, den)


def _bounds(ds, name, dims):
    """The CF vertex bounds of the 2-D coordinate ``name`` as ``(Y, X, n_vertex)``
    values, or None without a ``bounds`` attribute naming a variable of ``ds``."""
    bname = _attr(ds.variables[name], "bounds")
    if not bname or bname not in ds.variables:
        return None
    bounds = ds[bname]
    extra = [d for d in bounds.dims if d not in dims]
    if bounds.ndim != 3 or len(extra) != 1 or bounds.sizes[extra[0]] < 3:
        raise InputError(
            f"the bounds variable {bname!r} of the 2-D coordinate {name!r}{dims} has dimensions "
            f"{dict(bounds.sizes)}; CF vertex bounds of a 2-D coordinate are ({dims[0]}, {dims[1]}, n_vertex) with "
            f"at least 3 vertices: fix them, or drop the attribute (del ds[{name!r}].attrs['bounds'])"
        )
    return bname, np.asarray(bounds.transpose(*dims, extra[0]).values, dtype=np.float64)


def longitude_2d(ds, lat, target):
    """The 2-D longitude coordinate over the dimensions of the 2-D latitude ``lat``, or
    None."""
    dims = ds[lat].dims
    return next((n for n, axis in _auxiliary(ds, target) if axis == "X" and ds.variables[n].dims == dims), None)


def vertex_areas(ds, lat, radians, target):
    """Weights from the CF vertex bounds of the 2-D latitude ``lat`` and of the 2-D
    longitude over the same dimensions (rule 2): the cells' areas on the unit sphere
    (:func:`polygon_areas`) divided by the largest; None when either has no bounds.
    Vertices that are not finite are an :class:`InputError`."""
    dims = ds[lat].dims
    lons = [n for n in [longitude_2d(ds, lat, target)] if n is not None]
    if not lons:
        return None
    lat_b, lon_b = _bounds(ds, lat, dims), _bounds(ds, lons[0], dims)
    if lat_b is None or lon_b is None:
        return None
    (lat_name, lat_v), (lon_name, lon_v) = lat_b, lon_b
    if lat_v.shape != lon_v.shape:
        raise InputError(f"the vertex bounds {lat_name!r} {lat_v.shape} and {lon_name!r} {lon_v.shape} differ in "
                         "shape: fix them, or drop the bounds attributes")
    if not (np.isfinite(lat_v).all() and np.isfinite(lon_v).all()):
        raise InputError(f"the vertex bounds {lat_name!r} or {lon_name!r} are not all finite (NaN or inf): fix them, "
                         f"or drop the bounds attributes (del ds[{lat!r}].attrs['bounds'])")
    lon_radians = _attr(ds.variables[lons[0]], "units").lower() in _RADIANS
    lat_r, lon_r = (lat_v if radians else np.deg2rad(lat_v)), (lon_v if lon_radians else np.deg2rad(lon_v))
    area = np.concatenate([polygon_areas(lat_r[i:i + _ROWS], lon_r[i:i + _ROWS])  # rows at a time: bounded memory
                           for i in range(0, lat_r.shape[0], _ROWS)])
    top = area.max()
    if not top > 0:
        raise InputError(f"every cell of the vertex bounds {lat_name!r}/{lon_name!r} has zero area: fix them, or "
                         "drop the bounds attributes")
    logger.info("area weights: %r is a 2-D latitude (a curvilinear grid): cells weighted by their areas on the "
                "sphere from the vertex bounds %r and %r, divided by the largest", lat, lat_name, lon_name)
    return xr.DataArray(area / top, dims=dims)


def _unit_vectors(lat, lon):
    cos_lat = np.cos(lat)
    return np.stack([cos_lat * np.cos(lon), cos_lat * np.sin(lon), np.sin(lat)], axis=-1)


def _reflect(c0, c1):
    """``c1`` reflected through ``c0`` on the sphere: the point beyond ``c0`` on the
    great circle from ``c1``, at the same distance."""
    return 2.0 * np.einsum("...i,...i->...", c0, c1)[..., None] * c0 - c1


def centre_areas(lat, lon):
    """The areas on the unit sphere of the cells of a 2-D grid estimated from their
    centres ``lat``, ``lon`` (radians, shape ``(Y, X)``, at least 2 by 2).

    The centres' unit vectors are extrapolated by one row and column beyond each edge
    (``c[1]`` reflected through ``c[0]`` along their great circle); the vertex between four neighbouring centres is
    the normalised mean of their unit vectors; each cell is the spherical quadrilateral
    of its four vertices with great-circle edges (:func:`polygon_areas`; computed
    vertices share a latitude only up to rounding)."""
    v = _unit_vectors(np.asarray(lat, dtype=np.float64), np.asarray(lon, dtype=np.float64))
    for axis in (0, 1):  # one row (column) beyond each edge: the reflection of the next through the edge
        v = np.moveaxis(v, axis, 0)
        v = np.concatenate([_reflect(v[0], v[1])[None], v, _reflect(v[-1], v[-2])[None]])
        v = np.moveaxis(v, 0, axis)
    corner = v[:-1, :-1] + v[1:, :-1] + v[:-1, 1:] + v[1:, 1:]
    corner /= np.linalg.norm(corner, axis=-1, keepdims=True)
    out = []
    for i in range(0, corner.shape[0] - 1, _ROWS):  # rows at a time: bounded memory
        c = corner[i:i + _ROWS + 1]
        quad = np.stack([c[:-1, :-1], c[:-1, 1:], c[1:, 1:], c[1:, :-1]], axis=-2)
        out.append(polygon_areas(np.arcsin(np.clip(quad[..., 2], -1.0, 1.0)), np.arctan2(quad[..., 1], quad[..., 0]),
                                 parallels=False))
    return np.concatenate(out)


def estimated_areas(ds, lat, radians, target):
    """Weights of a curvilinear grid without cell areas or vertex bounds (rule 3): the
    areas from the centres (:func:`centre_areas`) divided by the largest, logged at
    INFO; an :class:`InputError` (:func:`no_areas_error`) where they cannot be
    estimated."""
    dims = ds[lat].dims
    lon = longitude_2d(ds, lat, target)
    if lon is None:
        raise no_areas_error(ds, lat, target, f"no 2-D longitude over {dims} to estimate them from the centres")
    lat_v = np.asarray(ds[lat].values, dtype=np.float64)
    lon_v = np.asarray(ds[lon].values, dtype=np.float64)
    if min(lat_v.shape) < 2:
        raise no_areas_error(ds, lat, target, f"a grid of {lat_v.shape[0]} x {lat_v.shape[1]} cells is too small "
                                              "to estimate them from the centres")
    if not (np.isfinite(lat_v).all() and np.isfinite(lon_v).all()):
        raise no_areas_error(ds, lat, target, f"{lat!r} or {lon!r} is not finite everywhere (NaN, inf), so the "
                                              "areas cannot be estimated from the centres")
    lon_radians = _attr(ds.variables[lon], "units").lower() in _RADIANS
    area = centre_areas(lat_v if radians else np.deg2rad(lat_v), lon_v if lon_radians else np.deg2rad(lon_v))
    top = area.max()
    if not top > 0:
        raise no_areas_error(ds, lat, target, f"the centres {lat!r}/{lon!r} enclose no area")
    logger.info("area weights: %r is a 2-D latitude (a curvilinear grid) without cell areas or vertex bounds: "
                "cells weighted by their areas estimated from the centres %r and %r (vertices at the mean of the "
                "four centres around them), divided by the largest", lat, lat, lon)
    return xr.DataArray(area / top, dims=dims)


def no_areas_error(ds, lat, target, why):
    """The :class:`InputError` of a curvilinear grid whose cell areas cannot be had
    (rule 3)."""
    dims = ds[lat].dims
    owner = target or "<target>"
    return InputError(
        f"the latitude {lat!r}{dims} is 2-D (a curvilinear grid), where cos(latitude) is not a cell's relative "
        f"area, and the Dataset has no cell areas or vertex bounds ({why}): add the cell areas as a variable "
        f"named by the target's cell_measures (ds['areacello'] = ({dims}, areas); "
        f"ds[{owner!r}].attrs['cell_measures'] = 'area: areacello'), give {lat!r} and the 2-D longitude CF "
        f"vertex bounds (a ({dims[0]}, {dims[1]}, n_vertex) variable named by each one's 'bounds' "
        "attribute), or pass area_weights=False"
    )
