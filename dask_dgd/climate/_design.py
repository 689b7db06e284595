"""From an xarray Dataset to a lazy design matrix, and back.

A Dataset with sample dimensions such as ``(time, lat, lon)`` becomes a set of lazy
feature fields (:class:`Fields`) chunked like the data: predictors on the grid, their
lags and a lead time, and fields that vary only in time (a ``(time,)`` index, seasonal
harmonics) kept one-dimensional, never broadcast in memory.  The design matrix has one
row per (time, lat, lon) cell that is not masked: every grid block (one time chunk x
one spatial chunk) becomes one row block of the matrix, its cells in C order, with the
masked ones (NaN in any feature or in the target, or zero weight) dropped inside the
block's task.  Nothing is computed until the matrix is.

Every block task works in the array namespace of its block (NumPy, CuPy or any Array
API array; see :mod:`._namespace`): the small NumPy inputs made on the driver (cell
weights, seasonal terms, gap masks) move onto the block's device inside the task, and
lags are built per block from the source blocks they need (no graph-level pad or
rechunk), so a CuPy-backed Dataset stays on the GPU.

Time shifts are in *steps* of the series, and a shift never crosses a gap: the value
``s`` steps back is used only when the calendar says it is ``s`` steps back (annual
data: ``s`` years; monthly: ``s`` months; otherwise ``s`` times the median spacing),
otherwise the cell is masked.  Calendars: numpy datetime64 and cftime (360-day, noleap,
...) alike.  Shifts count positions, so they need the times strictly increasing (an
unsorted, repeated or NaT time is an error, see :func:`time_steps`); a fit without
shifts does not depend on the order.
"""

import numbers

import array_api_compat
import dask
import dask.array as da
import numpy as np
import xarray as xr
from dask.array.utils import meta_from_array
from dask.highlevelgraph import HighLevelGraph

from .._backend import get_namespace
from ..exceptions import InputError, ParameterError
from ._areas import estimated_areas, measured_areas, vertex_areas
from ._axes import AUTO, latitude_bounds, resolve_dims, weight_latitude
from ._blocks import design_block, mask_block, shift_block
from ._namespace import align
from ._time import TIME_UNITS, TimeRule, check_dates, is_dates, seasonal_terms, time_steps

__all__ = ["DesignMatrix", "FeatureSpec", "Fields", "to_design_matrix", "from_design_matrix"]

# ---------------------------------------------------------------- feature spec
class FeatureSpec:
    """What the columns of a design matrix are, checked against a Dataset.

    Parameters are those of :func:`to_design_matrix`; ``trials``: the variable holding
    the number of binomial trials of each value of the target (then a count of
    successes), or None.
    """

    def __init__(self, features, target, sample_dims, time_dim, lags, lead, seasonal, area_weights, lat,
                 time_unit="years", *, trials=None):
        if isinstance(features, str):
            features = [features]
        self.features = list(features)
        if not self.features and not seasonal:
            raise ParameterError("features is empty and seasonal is off: the model would have no inputs")
        self.target = target
        if time_dim not in tuple(sample_dims):
            raise ParameterError(f"time_dim {time_dim!r} is not one of sample_dims {tuple(sample_dims)}")
        # time first, whatever order the user gave (and whatever order the data is stored in)
        self.sample_dims = (time_dim,) + tuple(d for d in sample_dims if d != time_dim)
        self.time_dim = time_dim
        self.lags = _lags(lags, self.features)
        if time_dim in self.features and self.lags[time_dim] != [0]:
            others = [v for v in self.features if v != time_dim]
            fix = (f"give the other features' lags as a dict without {time_dim!r} (e.g. lags={{{others[0]!r}: [0, 1]}})"
                   if others else "leave lags=None (a trend on time alone has no lags)")
            raise ParameterError(
                f"lags {self.lags[time_dim]} of the time coordinate {time_dim!r}: a lag of the time is the time "
                f"minus a constant, collinear with it and the intercept; {fix}"
            )
        if time_unit not in TIME_UNITS:
            raise ParameterError(f"time_unit must be one of {list(TIME_UNITS)}; got {time_unit!r}")
        self.time_unit = time_unit
        self.time_rule = None  # the trend on time: set from the fit's dates (set_time_origin)
        if isinstance(lead, bool) or not isinstance(lead, numbers.Integral) or lead < 0:
            raise ParameterError(f"lead must be an int >= 0 (time steps ahead); got {lead!r}")
        self.lead = int(lead)
        if seasonal is not None and (isinstance(seasonal, bool) or not isinstance(seasonal, numbers.Integral)
                                     or seasonal < 1):
            raise ParameterError(f"seasonal must be None or an int >= 1 (harmonics of the year); got {seasonal!r}")
        self.seasonal = int(seasonal or 0)
        self.area_weights = bool(area_weights)
        self.lat = lat
        self.trials = trials
        if target in self.features and 0 in self.lags[target] and self.lead == 0:
            raise ParameterError(
                f"feature {target!r} is the target at lag 0 with lead=0: it would predict itself; "
                "use lags >= 1 for it (e.g. lags={" + repr(target) + ": [1]}) or a lead >= 1"
            )

    @property
    def names(self):
        """Column names: ``var`` (lag 0), ``var_lagK``, then ``sinK``/``cosK``."""
        cols = []
        for v in self.features:
            cols += [v if s == 0 else f"{v}_lag{s}" for s in self.lags[v]]
        for k in range(1, self.seasonal + 1):
            cols += [f"sin{k}", f"cos{k}"]
        return cols

    def trend(self, ds, name):
        """Whether feature ``name`` is the time dimension's coordinate holding dates:
        a trend on time, ``(t - origin) / time_unit`` (see :class:`~._time.TimeRule`)."""
        return name == self.time_dim and name in ds.variables and is_dates(ds[name].values)

    def set_time_origin(self, ds):
        """Fix the trend's rule on the fit's Dataset: the origin is its first time."""
        self.time_rule = None
        if self.time_dim in self.features and self.trend(ds, self.time_dim):
            self.time_rule = TimeRule.first(ds[self.time_dim].values, self.time_unit, self.time_dim)

    @property
    def max_shift(self):
        return self.lead + max((max(s) for s in self.lags.values()), default=0)

    def space_dims(self):
        return tuple(d for d in self.sample_dims if d != self.time_dim)

    def check(self, ds, need_target):
        """Clear errors for a Dataset that does not fit this spec."""
        if not isinstance(ds, xr.Dataset):
            raise InputError(f"expected an xarray Dataset; got {type(ds).__name__}")
        wanted = list(self.features) + ([self.target] if need_target else [])
        if need_target and getattr(self, "trials", None) is not None:  # a spec saved before trials existed
            wanted.append(self.trials)
        for name in wanted:
            if name not in ds.variables:
                raise InputError(
                    f"the Dataset has no variable {name!r} (variables: {sorted(map(str, ds.data_vars))})"
                )
        for d in self.sample_dims:
            if d not in ds.dims:
                raise InputError(
                    f"the Dataset has no dimension {d!r} (dimensions: {list(map(str, ds.dims))}); "
                    "set sample_dims=... to its dimension names"
                )
        for name in wanted:
            extra = [d for d in ds[name].dims if d not in self.sample_dims]
            if extra:
                raise InputError(
                    f"variable {name!r} has dimensions {list(ds[name].dims)}; {extra} are not sample "
                    f"dimensions {list(self.sample_dims)}: select or reduce them first (e.g. ds.isel({extra[0]}=0))"
                )
            rule = getattr(self, "time_rule", None)  # a spec saved before trends on time has none
            if name == self.time_dim and rule is not None:
                rule.check(ds[name].values, name)
            elif not self.trend(ds, name) and ds[name].dtype.kind not in "biuf":
                raise InputError(self._not_numeric(ds, name))
            elif (name == self.time_dim and not self.trend(ds, name)
                  and " since " in str(ds[name].attrs.get("units", "")).lower()):
                units = ds[name].attrs["units"]
                raise InputError(
                    f"the time coordinate {name!r} holds numbers in {units!r} (times not decoded): as a feature it "
                    f"would be a trend per {units.split()[0].rstrip('s')}, not per time_unit={self.time_unit!r}; "
                    "decode the times first (ds = xr.decode_cf(ds), or open the file without decode_times=False)"
                )
        if need_target:
            lacking = [d for d in self.sample_dims if d not in ds[self.target].dims]
            if lacking:  # a broadcast target would repeat one value over every missing step/cell
                raise InputError(
                    f"the target {self.target!r} has dimensions {list(ds[self.target].dims)} and lacks the sample "
                    f"dimension(s) {lacking}: a target must vary over every sample dimension "
                    f"{list(self.sample_dims)}; choose another target, or set sample_dims to the target's dimensions"
                )
        empty = [d for d in self.sample_dims if ds.sizes[d] == 0]
        if empty:
            raise InputError(
                f"the Dataset is empty along {empty} (size 0): there are no samples; select a non-empty "
                "range (e.g. check the ds.sel(time=...) bounds)"
            )
        for name in self.features:
            if self.static(ds, name) and self.lags[name] != [0]:
                raise InputError(
                    f"feature {name!r} has no {self.time_dim!r} dimension (a static field): it has no lags; "
                    f"drop it from lags (got {self.lags[name]})"
                )
        n_time = ds.sizes[self.time_dim]
        if self.max_shift >= n_time:
            raise InputError(
                f"lags and lead shift by up to {self.max_shift} time steps but the series has only "
                f"{n_time}; use shorter lags or a longer series"
            )

    def _not_numeric(self, ds, name):
        """The message for a feature that is neither numbers nor the trend on time."""
        msg = f"variable {name!r} must be numeric; got dtype {ds[name].dtype}"
        values = np.asarray(ds[name].isel({d: slice(0, 1) for d in ds[name].dims}).values)  # its first value only
        if is_dates(values) and ds[name].dims == (self.time_dim,):
            return (f"{msg} (dates along {self.time_dim!r}): only the time dimension's coordinate becomes a trend on "
                    f"time; make {name!r} that coordinate (ds.swap_dims({{{self.time_dim!r}: {name!r}}}) and "
                    f"time_dim={name!r}), or name {self.time_dim!r} in features")
        if is_dates(values):
            return (f"{msg} (dates): only the time dimension's coordinate becomes a trend on time; turn {name!r} into "
                    f"numbers first, e.g. (ds[{name!r}] - ds[{name!r}].min()) / np.timedelta64(1, 'D')")
        if values.dtype.kind == "m":
            return f"{msg} (durations): turn {name!r} into numbers first, e.g. ds[{name!r}] / np.timedelta64(1, 'D')"
        return msg

    def lat_name(self, ds):
        """The name of the latitude coordinate the area weights are read from (see
        :func:`._axes.weight_latitude` for the rules of ``lat="auto"`` and the units)."""
        return weight_latitude(ds, self.space_dims(), self.target, self.lat).name

    def cell_weights(self, ds):
        """The area weight of every cell (dims: those of the cell areas or the
        latitude coordinate), checked.

        The cell areas named by CF ``cell_measures`` (:func:`._areas.measured_areas`)
        when ``ds`` has them; on a 2-D latitude, the areas from its vertex bounds
        (:func:`._areas.vertex_areas`) or estimated from the centres
        (:func:`._areas.estimated_areas`); otherwise ``cos(latitude)`` of the cell's
        centre; with CF latitude bounds ``(lo, hi)`` (the coordinate's ``bounds``
        attribute names a variable of shape ``(nlat, 2)``), the mean of ``cos`` over the
        cell, ``(sin(hi) - sin(lo)) / (hi - lo)`` in radians: the cell's exact area per
        unit of latitude, on the scale of ``cos(centre)``.  The
        latitude and its units come from :func:`._axes.weight_latitude` (which refuses
        what is not a latitude); latitudes or bounds outside [-90, 90] degrees
        ([-pi/2, pi/2] in radians) are an :class:`InputError`."""
        first = [v for v in self.features[:1] if not self.trend(ds, v)]
        measured = measured_areas(ds, [self.target, *first], self.space_dims(), self.target)
        if measured is not None:
            return measured
        lat, radians = weight_latitude(ds, self.space_dims(), self.target, self.lat)
        coord = ds[lat]
        degrees = _checked_degrees(np.asarray(coord.values, dtype=np.float64), radians,
                                   f"the latitude coordinate {lat!r}")
        if coord.ndim >= 2:  # curvilinear: cos(latitude) is not the area
            from_vertices = vertex_areas(ds, lat, radians, self.target)
            return from_vertices if from_vertices is not None else estimated_areas(ds, lat, radians, self.target)
        bounds = latitude_bounds(ds, lat)
        if bounds is None:
            w = np.cos(np.deg2rad(degrees)).clip(min=0.0)
            return xr.DataArray(w, dims=coord.dims)
        name = coord.attrs.get("bounds", coord.encoding.get("bounds"))
        lo, hi = np.deg2rad(_checked_degrees(bounds, radians, f"the latitude bounds variable {name!r} of {lat!r}")).T
        width = hi - lo
        flat = np.abs(width) < 1e-12  # a cell of no height: the limit of the mean is cos(lo)
        with np.errstate(invalid="ignore", divide="ignore"):
            w = np.where(flat, np.cos(lo), (np.sin(hi) - np.sin(lo)) / np.where(flat, 1.0, width))
        return xr.DataArray(w.clip(min=0.0), dims=coord.dims)

    def static(self, ds, name):
        """Whether feature ``name`` has no time dimension (a static field)."""
        return self.time_dim not in ds[name].dims

    def needs_time_steps(self, ds):
        return any(s + self.lead > 0 for v in self.features if not (self.static(ds, v) or self.trend(ds, v))
                   for s in self.lags[v])


def _checked_degrees(values, radians, what):
    """``values`` (radians if ``radians``) in degrees, refused beyond [-90, 90]."""
    degrees = np.rad2deg(values) if radians else values
    with np.errstate(invalid="ignore"):
        beyond = np.abs(degrees) > 90.0 + 1e-4  # float32 rounding at the poles is within
    if beyond.any():
        lo, hi = np.nanmin(values), np.nanmax(values)
        unit, bounds = ("radians", "[-pi/2, pi/2]") if radians else ("degrees", "[-90, 90]")
        raise InputError(
            f"{what} ranges from {lo:g} to {hi:g} {unit}, outside {bounds}: area weights "
            f"(cos(latitude)) need latitudes in {unit}; fix the coordinate or pass area_weights=False"
        )
    return degrees


def _lags(lags, features):
    def check(seq, where):
        seq = [seq] if isinstance(seq, numbers.Integral) and not isinstance(seq, bool) else list(seq)
        for s in seq:
            if isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 0:
                raise ParameterError(f"lags{where} must be ints >= 0 (time steps back); got {s!r}")
        return sorted({int(s) for s in seq})

    if lags is None:
        return {v: [0] for v in features}
    if isinstance(lags, dict):
        unknown = [k for k in lags if k not in features]
        if unknown:
            raise ParameterError(f"lags names {unknown} that are not features {features}")
        return {v: check(lags.get(v, [0]), f"[{v!r}]") for v in features}
    if isinstance(lags, numbers.Integral) and not isinstance(lags, bool):
        if lags < 0:
            raise ParameterError(f"lags must be an int >= 0, a list of ints or a dict; got {lags!r}")
        return {v: list(range(0, int(lags) + 1)) for v in features}
    return {v: check(lags, "") for v in features}


# ------------------------------------------------------------- feature fields
class Fields:
    """The lazy inputs of a model on one Dataset, chunked alike.

    ``full``: the feature fields that vary over space (dims ``sample_dims``, the grid's
    chunks); ``time``: those that vary only in time (dims ``(time,)``, the grid's time
    chunks), never broadcast to the grid; ``order``: for each design column, ``(0, i)``
    for ``full[i]`` or ``(1, i)`` for ``time[i]``; ``weight``: the per-cell weight on the
    spatial dims (the area weight, see :meth:`FeatureSpec.cell_weights`; ones with
    ``area_weights=False`` or without a target, where it only gives the grid's shape);
    ``y``: the target on the grid (or None); ``trials``: the binomial trials of each
    target value on the grid (``spec.trials``; None without them or without a target).

    ``in_process=True`` asks for NumPy arrays instead of dask arrays when the grid is
    one dask block (the chunks dask's ``"auto"`` gives it, ``array.chunk-size``) and
    every variable read is an in-memory NumPy array: Dask would run each stage of a
    fit as one task on that block anyway, so the caller can run the same block
    functions directly, with none of the graph building, hashing of the data
    (``from_array``'s names) or scheduling.  ``in_process`` is then True (the arrays
    are NumPy: the blocks the dask path would see, bit for bit); otherwise False and
    the fields are lazy as usual.
    """

    def __init__(self, spec, ds, need_target=True, in_process=False):
        self.spec = spec
        tdim = spec.time_dim
        grid_chunks = _grid_chunks(spec, ds)
        self.grid_chunks = grid_chunks
        self.in_process = bool(in_process) and _one_numpy_block(spec, ds, grid_chunks, need_target)
        template = []  # made on first use: most grids have every field on every sample dimension

        def broadcast(field):
            if not template:
                template.append(_template(spec, ds, grid_chunks, self.in_process))
            return xr.broadcast(field, template[0])[0]

        lazy = _as_numpy if self.in_process else _as_dask
        ref = _reference(spec, ds)
        # every coordinate on the sample dimensions (dimension and auxiliary ones)
        self.coords = {name: c for name, c in ds.coords.items() if set(c.dims) <= set(spec.sample_dims)}
        self.out_dims = tuple(d for d in (ds[ref].dims if ref else spec.sample_dims) if d in spec.sample_dims)
        steps = time_steps(ds[tdim].values, tdim) if spec.needs_time_steps(ds) else None
        full, time_only, order = [], [], []

        def add(field):
            if field.dims == (tdim,):
                time_only.append(lazy(field.data, grid_chunks[:1]))
                order.append((1, len(time_only) - 1))
            else:
                if set(field.dims) != set(spec.sample_dims):
                    field = broadcast(field)
                full.append(lazy(field.transpose(*spec.sample_dims).data, grid_chunks))
                order.append((0, len(full) - 1))

        for v in spec.features:
            if spec.trend(ds, v):  # the time of the row (also with a lead): never shifted
                rule = getattr(spec, "time_rule", None)
                if rule is None:
                    raise InputError(
                        f"the model was fitted with {v!r} as numbers but this Dataset's {v!r} holds dates: give it "
                        "the numbers of the fit, or refit on dates"
                    )
                add(xr.DataArray(rule.column(ds[v].values, v), dims=tdim))
                continue
            x = _float64(ds[v], self.in_process)
            if spec.static(ds, v):  # no time dimension: no lag, no lead
                add(x)
                continue
            for s in spec.lags[v]:
                shift = s + spec.lead
                if shift == 0:
                    add(x)
                    continue
                ok = np.zeros(steps.size, dtype=bool)
                ok[shift:] = (steps[shift:] - steps[:-shift]) == shift  # no gap in between
                dims = [d for d in spec.sample_dims if d in x.dims]  # time first
                x_t = x.transpose(*dims)
                data = lazy(x_t.data, tuple(grid_chunks[spec.sample_dims.index(d)] for d in dims))
                add(x_t.copy(data=(shifted_numpy if self.in_process else shifted)(data, shift, ok)))
        if spec.seasonal:
            check_dates(np.asarray(ds[tdim].values))  # the terms of each date: any order will do
            for values in seasonal_terms(ds[tdim].values, spec.seasonal).values():
                add(xr.DataArray(values, dims=tdim))
        self.full, self.time, self.order = full, time_only, order
        self.y = self.trials = None
        if need_target:
            y = _float64(ds[spec.target], self.in_process)
            if set(y.dims) != set(spec.sample_dims):
                y = broadcast(y)
            self.y = lazy(y.transpose(*spec.sample_dims).data, grid_chunks)
            if getattr(spec, "trials", None) is not None:  # binomial trials, broadcast like a feature
                n = _float64(ds[spec.trials], self.in_process)
                if set(n.dims) != set(spec.sample_dims):
                    n = broadcast(n)
                self.trials = lazy(n.transpose(*spec.sample_dims).data, grid_chunks)
        space = spec.space_dims()
        space_chunks = grid_chunks[1:]
        shape = tuple(ds.sizes[d] for d in space)
        if spec.area_weights and need_target:  # without a target the weights only give the shape
            w = spec.cell_weights(ds)
            w = w.broadcast_like(xr.DataArray(np.zeros(shape), dims=space)).transpose(*space).values
        else:
            w = np.ones(shape)
        w = np.asarray(w, dtype=np.float64)
        self.weight = w if self.in_process else da.from_array(w, chunks=space_chunks)

    @property
    def p(self):
        return len(self.order)

    def meta(self, ndim, dtype=np.float64):
        """An empty array of the data's array type (the first field that is not
        NumPy-backed, e.g. CuPy; NumPy otherwise), for the outputs' dask meta."""
        arrays = ([] if self.y is None else [self.y]) + self.full + self.time
        ref = next((a._meta for a in arrays if not array_api_compat.is_numpy_array(a._meta)), np.empty(0))
        return meta_from_array(ref, ndim=ndim, dtype=dtype)

    @property
    def numblocks(self):
        return tuple(len(c) for c in self.grid_chunks)

    def block_args(self, idx, with_target=True):
        """The delayed inputs of grid block ``idx``: (y, weight, *full, *time)."""
        if not hasattr(self, "_delayed"):
            td = lambda a: a.to_delayed(optimize_graph=False)  # noqa: E731
            self._delayed = (
                None if self.y is None else td(self.y), td(self.weight),
                [td(a) for a in self.full], [td(a) for a in self.time],
            )
        yd, wd, fd, tdd = self._delayed
        y = yd[idx] if (with_target and yd is not None) else None
        return (y, wd[idx[1:]], *[f[idx] for f in fd], *[t[idx[:1]] for t in tdd])

    def blockwise_args(self, index, with_target=True):
        """Arguments for ``da.blockwise``: the arrays with their index strings."""
        args = []
        if with_target:
            args += [self.y, index]
        args += [self.weight, index[1:]]
        for a in self.full:
            args += [a, index]
        for a in self.time:
            args += [a, index[:1]]
        return args


def _reference(spec, ds):
    """The variable whose dimension order the outputs follow: the target if present,
    else the first feature on all the sample dimensions."""
    for name in ([spec.target] if spec.target in ds.variables else []) + spec.features:
        if set(ds[name].dims) == set(spec.sample_dims):
            return name
    return None


def _as_dask(a, chunks):
    a = a if isinstance(a, da.Array) else da.from_array(np.asarray(a), chunks=chunks)
    return a.rechunk(chunks) if a.chunks != tuple(chunks) else a


def _float64(x, in_process):
    """``x`` as float64: a lazy cast, or in process (the arrays are read during the
    fit only) no copy of what already is float64."""
    return x if in_process and x.dtype == np.float64 else x.astype(np.float64)


def _as_numpy(a, chunks):
    """The in-process counterpart of :func:`_as_dask`: the NumPy array (a view where
    it already is one; ``chunks`` is the one block)."""
    return np.asarray(a)


def _one_numpy_block(spec, ds, grid_chunks, need_target):
    """Whether the grid is one dask block and every variable a fit reads is an
    in-memory NumPy array (see :class:`Fields`'s ``in_process``)."""
    if any(len(c) != 1 for c in grid_chunks):
        return False
    names = list(spec.features) + ([spec.target] if need_target else [])
    if need_target and getattr(spec, "trials", None) is not None:
        names.append(spec.trials)
    return all(ds[v].chunks is None and type(ds[v].data) is np.ndarray for v in names)


def _grid_chunks(spec, ds):
    """The grid's chunks on the sample dimensions: those of the first dask-backed
    variable on all of them (target first), or dask's ``"auto"`` chunks of a float64
    grid."""
    shape = tuple(ds.sizes[d] for d in spec.sample_dims)
    ref = None
    for name in ([spec.target] if spec.target in ds.variables else []) + spec.features:
        if set(ds[name].dims) == set(spec.sample_dims) and isinstance(ds[name].data, da.Array):
            ref = ds[name].transpose(*spec.sample_dims).data
            break
    if ref is None:
        return da.core.normalize_chunks("auto", shape, dtype=np.float64)
    chunks = ref.chunks
    if any(0 in c for c in chunks):
        # zero-size chunks (e.g. after a selection) hold no cells: drop them, so that every
        # grid block has at least one time step and one cell (the fit is the same without them)
        chunks = tuple(tuple(n for n in c if n) or c for c in chunks)
    return chunks


def _template(spec, ds, chunks, in_process):
    """A zero field on the sample dimensions, chunked like the data (lazy), or a
    read-only NumPy view of one zero (``in_process``), to broadcast fields against."""
    shape = tuple(ds.sizes[d] for d in spec.sample_dims)
    coords = {d: ds[d] for d in spec.sample_dims if d in ds.coords}
    data = np.broadcast_to(np.float64(0.0), shape) if in_process else da.zeros(shape, chunks=chunks)
    return xr.DataArray(data, dims=spec.sample_dims, coords=coords)


def shifted_numpy(a, shift, ok):
    """:func:`shifted` of a NumPy array that is one block: the same
    :func:`~._blocks.shift_block` call as the graph's one task."""
    return shift_block(min(shift, a.shape[0]), 0, ok, a)


def shifted(a, shift, ok):
    """``a`` (a dask array, time first) ``shift`` steps later in time: row ``t`` holds
    row ``t - shift``, NaN where ``t < shift`` or ``ok[t]`` is False (a gap).

    Each output block is one task (:func:`shift_block`) on the source blocks it needs,
    all in one graph layer, so no array is padded or rechunked at the graph level and the
    blocks keep their namespace and device."""
    edges = np.cumsum((0,) + a.chunks[0])
    name = "climate-shift-" + dask.base.tokenize(a.name, shift, ok)
    dsk = {}
    for idx in np.ndindex(*a.numblocks):
        t0, t1 = int(edges[idx[0]]), int(edges[idx[0] + 1])
        lo, hi = max(t0 - shift, 0), t1 - shift  # source rows
        n_pad = min(max(shift - t0, 0), t1 - t0)
        ks = [k for k in range(len(a.chunks[0])) if edges[k] < hi and edges[k + 1] > lo] if hi > lo else []
        start = lo - int(edges[ks[0]]) if ks else 0
        pieces = [(a.name, k) + idx[1:] for k in ks] or [(a.name,) + idx]  # the block itself: its namespace
        dsk[(name,) + idx] = (shift_block, n_pad, start, ok[t0:t1], *pieces)
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=[a])
    return da.Array(graph, name, a.chunks, meta=a._meta)


class DesignMatrix:
    """A lazy design matrix built from a Dataset (see :func:`to_design_matrix`).

    Attributes
    ----------
    X : dask.array.Array of shape (n_samples, n_features)
        One row block per (time chunk, spatial chunk) of the data; masked cells dropped
        (the row counts are unknown until computed).
    y : dask.array.Array of shape (n_samples,)
    sample_weight : dask.array.Array of shape (n_samples,)
        Area weights (see :func:`to_design_matrix`'s ``area_weights``; ones with
        ``area_weights=False``).
    feature_names : list of str
    time_origin : numpy.datetime64, cftime date or None
        The origin of a trend on time (the feature named as the time coordinate is the
        time elapsed since it; see :func:`to_design_matrix`'s ``time_unit``); None
        without one.
    """

    def __init__(self, spec, fields):
        self.spec = spec
        self.feature_names = spec.names
        self._fields = fields
        self._coords = fields.coords
        self._dims = spec.sample_dims
        p = fields.p
        self._block_index = list(np.ndindex(*fields.numblocks))
        chunks = fields.grid_chunks
        self._block_shapes = [tuple(c[i] for c, i in zip(chunks, idx)) for idx in self._block_index]
        blocks = [
            da.from_delayed(dask.delayed(design_block)(fields.order, *self._block_args(idx),
                                                       trials=fields.trials is not None),
                            shape=(np.nan, p + 2), dtype=np.float64, meta=fields.meta(2))
            for idx in self._block_index
        ]
        D = da.concatenate(blocks, axis=0) if len(blocks) > 1 else blocks[0]
        self.X = D[:, :p]
        self.y = D[:, p]
        self.sample_weight = D[:, p + 1]

    @property
    def time_origin(self):
        rule = getattr(self.spec, "time_rule", None)
        return None if rule is None else rule.origin_date

    @property
    def n_blocks(self):
        return len(self._block_index)

    def _block_args(self, idx):
        """The block functions' inputs of grid block ``idx``, the trials' block last (if any)."""
        args = self._fields.block_args(idx)
        if self._fields.trials is None:
            return args
        if not hasattr(self, "_trials_delayed"):
            self._trials_delayed = self._fields.trials.to_delayed(optimize_graph=False)
        return (*args, self._trials_delayed[idx])

    def _mask(self, idx):
        return dask.delayed(mask_block)(self._fields.order, *self._block_args(idx),
                                        trials=self._fields.trials is not None)

    def mask(self):
        """The cells kept (True) on the sample grid, as a lazy boolean DataArray."""
        blocks = {
            idx: da.from_delayed(self._mask(idx), shape=shape, dtype=bool, meta=self._fields.meta(len(shape), bool))
            for idx, shape in zip(self._block_index, self._block_shapes)
        }
        out = xr.DataArray(_assemble(blocks, self._fields.numblocks), dims=self._dims, coords=self._coords)
        return out.transpose(*self._fields.out_dims)

    def to_dataarray(self, values, name=None, attrs=None):
        """Values of the design rows (e.g. predictions) back on the sample grid, NaN
        where a cell was masked: the inverse of the stacking.

        ``values`` is a dask array with one block per row block of ``X`` (as returned by
        ``X.map_blocks``/an estimator's ``predict``) or an in-memory array of length
        ``n_samples``.
        """
        if isinstance(values, da.Array):
            if values.numblocks[0] != self.n_blocks:
                raise InputError(
                    f"values have {values.numblocks[0]} row blocks but the design matrix has {self.n_blocks}; "
                    "pass values computed block by block from X (e.g. estimator.predict(dm.X))"
                )
            vd = list(values.to_delayed(optimize_graph=False).ravel())
        else:
            values = np.asarray(values, dtype=np.float64)
            counts = dask.compute(*[dask.delayed(_count)(self._mask(i)) for i in self._block_index])
            if values.shape[0] != sum(counts):
                raise InputError(f"values have {values.shape[0]} rows; the design matrix has {sum(counts)}")
            edges = np.concatenate([[0], np.cumsum(counts)])
            vd = [values[a:b] for a, b in zip(edges[:-1], edges[1:])]
        blocks = {
            idx: da.from_delayed(dask.delayed(_unstack)(self._mask(idx), v), shape=shape, dtype=np.float64,
                                 meta=self._fields.meta(len(shape)))
            for idx, shape, v in zip(self._block_index, self._block_shapes, vd)
        }
        out = xr.DataArray(_assemble(blocks, self._fields.numblocks), dims=self._dims, coords=self._coords,
                           name=name, attrs=dict(attrs or {}))
        return out.transpose(*self._fields.out_dims)


def _count(mask):
    return int(get_namespace(mask).count_nonzero(mask))


def _unstack(mask, values):
    """Row values back on a block's grid, NaN where masked (the block's namespace)."""
    xp, (mask, values) = align(mask, values)
    out = xp.full(mask.shape, xp.nan, dtype=xp.float64, device=array_api_compat.device(mask))
    out[mask] = xp.astype(xp.reshape(values, (-1,)), xp.float64)
    return out


def _assemble(blocks, numblocks):
    def nest(prefix):
        if len(prefix) == len(numblocks):
            return blocks[tuple(prefix)]
        return [nest(prefix + [i]) for i in range(numblocks[len(prefix)])]

    return da.block(nest([]))


def to_design_matrix(ds, features, target, sample_dims=AUTO, *, time_dim=AUTO, lags=None, lead=0, seasonal=None,
                     area_weights=True, lat="auto", time_unit="years"):
    """An xarray Dataset as a lazy design matrix (samples x features), without loading it.

    Parameters
    ----------
    ds : xarray.Dataset
        Backed by dask (``xr.open_dataset(..., chunks=...)``, ``xr.open_zarr``) or NumPy.
    features : str or list of str
        Predictor variables; each may have any subset of ``sample_dims`` (e.g. a
        ``(time,)`` index is broadcast to every cell).  The time dimension's
        coordinate (e.g. ``"time"``) holding dates (datetime64 or cftime, any
        calendar) is a trend on time: the column ``(t - origin) / time_unit``, the time
        elapsed since the first (earliest) time of the data, keeping the coordinate's
        name (see ``time_unit``); it is the time of each row (not shifted by ``lead``)
        and has no lags.  A time coordinate of numbers is used as it is.
    target : str
        The variable to predict.
    sample_dims : "auto" or tuple of str, default="auto"
        Dimensions whose cells are the samples, e.g. ``("time", "lat", "lon")``.
        ``"auto"``: the target's dimensions, each recognised as time, latitude-like (Y)
        or longitude-like (X) by its coordinate's CF attributes (``axis``,
        ``standard_name``, ``units`` such as ``degrees_north``), its date values or its
        name (``time``/``valid_time``, ``lat``/``latitude``/``y``/``rlat``,
        ``lon``/``longitude``/``x``/``rlon``, ...), ordered (time, Y, X); the choice is
        logged at INFO on the ``dask_dgd.climate`` logger and kept in ``dm.spec``.  Any
        other dimension of the target (a ``level``, an ensemble ``member``) must be
        selected or reduced first, or ``sample_dims`` given explicitly.  Names with a
        numeric suffix (``latitude_0``, ``lon_1``) are read without it; a dimension no
        rule names that a 2-D latitude/longitude coordinate spans (``nav_lat(dim0,
        dim1)``) is Y (its first dimension) or X (its second).
    time_dim : str, default="auto"
        The time dimension (lags, lead and seasonal terms act along it); ``"auto"``: the
        one of ``sample_dims`` recognised as time as above.
    lags : None, int, list of int or dict, default=None
        Time steps back of each predictor: None: only the current value (lag 0); an int
        ``n``: lags ``0..n``; a list: those lags for every feature; a dict: per feature
        (a feature left out keeps lag 0).  A lag never crosses a gap in the series.
    lead : int, default=0
        Forecast lead time in steps: the row at time ``t`` predicts the target at ``t``
        from predictors at ``t - lead - lag``.
    seasonal : int or None, default=None
        Number of harmonics of the seasonal cycle: ``sin(2 pi k f)`` and
        ``cos(2 pi k f)`` for ``k = 1..seasonal``, ``f`` the fraction of the calendar
        year, ``f = (dayofyear - 1 + hour / 24 + minute / 1440) / days_in_year`` from
        xarray's ``.dt`` fields of each date (``days_in_year`` is 360 in the 360-day
        calendar, 365 or 366 by the year in the others; seconds are not counted), for
        any calendar.
    area_weights : bool, default=True
        Weight each cell by its relative area, from the first of (logged at INFO on
        ``dask_dgd.climate``): (1) the file's cell areas: the target (else the first
        feature) has CF ``cell_measures = "area: <name>"`` and ``<name>`` is a variable
        of ``ds`` on the spatial dimensions (or some of them, broadcast): the areas
        divided by their largest finite value (at most 1, the scale of
        ``cos(latitude)``; a pointwise ``alpha`` applies to the weighted sum); a
        ``<name>`` not in ``ds`` is logged and skipped; negative or non-finite areas
        where the target has values are an ``InputError``; (2) on a curvilinear grid
        (the latitude is 2-D, e.g. ``nav_lat(y, x)``), where ``cos(latitude)`` is not
        the area: each cell's area on the sphere, the spherical polygon of the CF
        vertex bounds of the 2-D latitude and longitude (``bounds`` attributes naming
        ``(Y, X, n_vertex)`` variables; an edge between vertices of one latitude follows
        the parallel), divided by the largest; without bounds the areas estimated from
        the centres (vertices at the mean of the four centres around them; within
        0.23% of the exact areas on ORCA2's interior sea cells); without a 2-D
        longitude, with non-finite centres or a single row or column, an
        ``InputError`` naming the fixes (cell areas via ``cell_measures``, vertex
        bounds, or ``area_weights=False``); (3) on a 1-D latitude, ``cos(latitude)`` of
        the cell's centre or, when the latitude coordinate has CF ``bounds`` (a
        ``(nlat, 2)`` variable such as ``lat_bnds``), the mean of ``cos`` over the
        cell, ``(sin(hi) - sin(lo)) / (hi - lo)``.  Needs a latitude coordinate in degrees
        within [-90, 90] (``units`` ``degrees_north`` and variants, ``degrees``,
        ``degree``) or radians (``radians``, ``radian``, ``rad``); without ``units``,
        values beyond pi/2 are degrees and values all within [-pi/2, pi/2] are refused as
        ambiguous (set the units); other units are refused as not a latitude.  A
        rotated-pole grid is weighted by ``cos`` of its
        *rotated* latitude, its cells' area on the sphere (a rotation keeps areas),
        never by the 2-D true latitude.
    lat : str, default="auto"
        The latitude coordinate for the weights.  ``"auto"`` follows the
        classification of the spatial dimensions: the coordinate of the Y dimension
        when it is a latitude (CF ``standard_name`` ``latitude`` or ``grid_latitude``,
        units in degrees or radians, a name such as ``lat``/``rlat``/``latitude_0``, a
        dimension of a target whose ``grid_mapping`` is a rotated pole), else the 2-D
        auxiliary latitude coordinate over the spatial dimensions (a Y dimension
        without coordinate values, a projection ``y`` in metres, a ``y`` without
        units); without a Y dimension, a latitude coordinate on the spatial
        dimensions.  A rotated latitude (also named here) is logged at INFO on the
        ``dask_dgd.climate`` logger.
    time_unit : str, default="years"
        The unit of a trend on time (the time coordinate among ``features``): a fixed
        duration, so the column is exactly linear in time: ``"seconds"``,
        ``"minutes"``, ``"hours"``, ``"days"``, or ``"months"`` (a twelfth of a
        year), ``"years"``, ``"decades"``, ``"centuries"`` of the calendar's mean
        year: 360 days (``360_day``), 365 (``noleap``/``365_day``), 366
        (``all_leap``/``366_day``), 365.25 (``julian``), 365.2425 (``standard``,
        ``gregorian``, ``proleptic_gregorian``; numpy datetime64 is proleptic
        Gregorian).  The origin and unit are kept in ``dm.time_origin`` and
        ``dm.spec.time_rule``.

    Returns
    -------
    DesignMatrix
        ``.X``, ``.y``, ``.sample_weight`` (dask arrays, masked cells dropped),
        ``.feature_names``, ``.mask()`` and ``.to_dataarray(values)`` (the inverse).

    Raises
    ------
    InputError
        A missing variable or dimension, non-numeric data (other than the time
        coordinate's dates), lags longer than the series;
        with ``"auto"`` dimensions, a target dimension that is not time, Y or X, or no
        time dimension;
        with lags or lead, a time coordinate out of order, with repeated or missing
        (NaT) times; with area weights, a latitude dimension without coordinate values
        (and no 2-D latitude), a Y coordinate that is not a latitude (and no 2-D
        latitude), a latitude without units within [-pi/2, pi/2] or with units that
        are not a latitude's, or latitudes (or their bounds) outside [-90, 90] degrees.
    ParameterError
        Bad ``sample_dims``, ``lags``, ``lead``, ``seasonal`` or ``time_unit``; lags of
        the time coordinate (collinear with it).
    """
    sample_dims, time_dim = resolve_dims(ds, target, sample_dims, time_dim, features)
    spec = FeatureSpec(features, target, sample_dims, time_dim, lags, lead, seasonal, area_weights, lat, time_unit)
    spec.check(ds, need_target=True)
    spec.set_time_origin(ds)
    return DesignMatrix(spec, Fields(spec, ds))


def from_design_matrix(dm, values, name=None, attrs=None):
    """The inverse of :func:`to_design_matrix`: row values back on the grid (NaN where masked)."""
    return dm.to_dataarray(values, name=name, attrs=attrs)
