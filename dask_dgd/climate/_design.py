"""From an xarray Dataset to a lazy design matrix, and back.

A Dataset with sample dimensions such as ``(time, lat, lon)`` becomes a stack of
feature fields ``F`` (feature, time, lat, lon) — the predictor variables broadcast to
the sample dimensions, their lags, a lead time, seasonal harmonics — all lazy, chunked
like the data.  The design matrix has one row per (time, lat, lon) cell that is not
masked: every block of ``F`` (one time chunk x one spatial chunk) becomes one row block
of the matrix, its cells in C order, with the masked ones (NaN in any feature or in the
target, or zero weight) dropped inside the block's task.  Nothing is computed until
the matrix is.

Time shifts are in *steps* of the series, and a shift never crosses a gap: the value
``s`` steps back is used only when the calendar says it is ``s`` steps back (annual
data: ``s`` years; monthly: ``s`` months; otherwise ``s`` times the median spacing),
otherwise the cell is masked.  Calendars: numpy datetime64 and cftime (360-day, noleap,
...) alike.
"""

import math
import numbers

import dask
import dask.array as da
import numpy as np
import xarray as xr

from ..exceptions import InputError, ParameterError

__all__ = ["DesignMatrix", "FeatureSpec", "to_design_matrix", "from_design_matrix"]

_LAT_NAMES = ("lat", "latitude", "nav_lat", "y_lat")


# ------------------------------------------------------------------- time axis
def time_steps(time):
    """Integer step number of every time (differences of 1 = consecutive steps)."""
    t = xr.DataArray(np.asarray(time), dims="time")
    if t.size < 2:
        return np.arange(t.size, dtype=np.int64)
    days = _days(t)
    spacing = float(np.median(np.diff(days)))
    if spacing <= 0:
        raise InputError("the time coordinate is not increasing; sort the Dataset by time first")
    if spacing >= 360:  # annual
        return t.dt.year.values.astype(np.int64)
    if spacing >= 28:  # monthly
        return (t.dt.year.values * 12 + t.dt.month.values).astype(np.int64)
    return np.round((days - days[0]) / spacing).astype(np.int64)


def _days(t):
    values = t.values
    if np.issubdtype(values.dtype, np.datetime64):
        return (values - values[0]) / np.timedelta64(1, "D")
    import cftime

    calendar = getattr(values[0], "calendar", "standard")
    return np.asarray(cftime.date2num(list(values), "days since 0001-01-01", calendar=calendar), dtype=np.float64)


def seasonal_terms(time, harmonics):
    """``sin/cos(2 pi k f)`` for k = 1..harmonics, ``f`` the fraction of the year
    (day of year over the calendar's year length)."""
    t = xr.DataArray(np.asarray(time), dims="time")
    frac = (t.dt.dayofyear.values - 1 + t.dt.hour.values / 24.0) / t.dt.days_in_year.values
    out = {}
    for k in range(1, harmonics + 1):
        out[f"sin{k}"] = np.sin(2 * np.pi * k * frac)
        out[f"cos{k}"] = np.cos(2 * np.pi * k * frac)
    return out


# ---------------------------------------------------------------- feature spec
class FeatureSpec:
    """What the columns of a design matrix are, checked against a Dataset.

    Parameters are those of :func:`to_design_matrix`.
    """

    def __init__(self, features, target, sample_dims, time_dim, lags, lead, seasonal, area_weights, lat):
        if isinstance(features, str):
            features = [features]
        self.features = list(features)
        if not self.features and not seasonal:
            raise ParameterError("features is empty and seasonal is off: the model would have no inputs")
        self.target = target
        self.sample_dims = tuple(sample_dims)
        if time_dim not in self.sample_dims:
            raise ParameterError(f"time_dim {time_dim!r} is not one of sample_dims {self.sample_dims}")
        self.time_dim = time_dim
        self.lags = _lags(lags, self.features)
        if isinstance(lead, bool) or not isinstance(lead, numbers.Integral) or lead < 0:
            raise ParameterError(f"lead must be an int >= 0 (time steps ahead); got {lead!r}")
        self.lead = int(lead)
        if seasonal is not None and (isinstance(seasonal, bool) or not isinstance(seasonal, numbers.Integral)
                                     or seasonal < 1):
            raise ParameterError(f"seasonal must be None or an int >= 1 (harmonics of the year); got {seasonal!r}")
        self.seasonal = int(seasonal or 0)
        self.area_weights = bool(area_weights)
        self.lat = lat
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
            kind = ds[name].dtype.kind
            if kind not in "biuf":
                raise InputError(f"variable {name!r} must be numeric; got dtype {ds[name].dtype}")
        n_time = ds.sizes[self.time_dim]
        if self.max_shift >= n_time:
            raise InputError(
                f"lags and lead shift by up to {self.max_shift} time steps but the series has only "
                f"{n_time}; use shorter lags or a longer series"
            )

    def lat_name(self, ds):
        if self.lat != "auto":
            if self.lat not in ds.coords and self.lat not in ds.variables:
                raise InputError(f"the Dataset has no latitude coordinate {self.lat!r}")
            return self.lat
        for d in self.space_dims():
            coord = ds[d] if d in ds.variables else None
            if d.lower() in _LAT_NAMES:
                return d
            if coord is not None and (coord.attrs.get("standard_name") == "latitude"
                                      or coord.attrs.get("units") in ("degrees_north", "degree_north")):
                return d
        raise InputError(
            f"no latitude among the spatial dimensions {list(self.space_dims())} for the area weights; "
            "pass lat='name' or area_weights=False"
        )


def _lags(lags, features):
    def check(seq, where):
        seq = [seq] if isinstance(seq, numbers.Integral) and not isinstance(seq, bool) else list(seq)
        for s in seq:
            if isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 0:
                raise ParameterError(f"lags{where} must be ints >= 0 (time steps back); got {s!r}")
        return sorted(set(int(s) for s in seq))

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
def feature_fields(spec, ds, chunks=None):
    """The stack of feature fields ``F`` (feature, *sample_dims) as a lazy DataArray,
    chunked like the data (one chunk along ``feature``)."""
    tdim = spec.time_dim
    steps = time_steps(ds[tdim].values)
    template = _template(spec, ds)
    fields = []
    for v in spec.features:
        x = ds[v].astype(np.float64)
        x, _ = xr.broadcast(x, template)
        x = x.transpose(*spec.sample_dims)
        for s in spec.lags[v]:
            shift = s + spec.lead
            if shift == 0:
                fields.append(x)
                continue
            ok = np.zeros(steps.size, dtype=bool)
            ok[shift:] = (steps[shift:] - steps[:-shift]) == shift  # no gap in between
            shifted = x.shift({tdim: shift}).where(xr.DataArray(ok, dims=tdim, coords={tdim: ds[tdim]}))
            fields.append(shifted)
    if spec.seasonal:
        for name, values in seasonal_terms(ds[tdim].values, spec.seasonal).items():
            term = xr.DataArray(values, dims=tdim, coords={tdim: ds[tdim]})
            term, _ = xr.broadcast(term, template)
            fields.append(term.transpose(*spec.sample_dims))
    F = xr.concat(fields, dim="feature", coords="minimal", compat="override", join="override")
    F = F.assign_coords(feature=spec.names)
    data = F.data if isinstance(F.data, da.Array) else da.from_array(F.data, chunks=chunks or "auto")
    data = data.rechunk({0: -1})
    return F.copy(data=data)


def _template(spec, ds):
    """A lazy zero field on the sample dimensions, chunked like the data."""
    shape = tuple(ds.sizes[d] for d in spec.sample_dims)
    ref = None
    for name in ([spec.target] if spec.target in ds.variables else []) + spec.features:
        if set(ds[name].dims) == set(spec.sample_dims) and isinstance(ds[name].data, da.Array):
            ref = ds[name].transpose(*spec.sample_dims).data
            break
    chunks = ref.chunks if ref is not None else "auto"
    coords = {d: ds[d] for d in spec.sample_dims if d in ds.coords}
    return xr.DataArray(da.zeros(shape, chunks=chunks), dims=spec.sample_dims, coords=coords)


def target_field(spec, ds):
    y = ds[spec.target].astype(np.float64)
    y, _ = xr.broadcast(y, _template(spec, ds))
    return y.transpose(*spec.sample_dims)


def weight_field(spec, ds):
    template = _template(spec, ds)
    if not spec.area_weights:
        return template + 1.0
    lat = spec.lat_name(ds)
    w = np.cos(np.deg2rad(ds[lat].astype(np.float64)))
    w = w.clip(min=0.0)
    w, _ = xr.broadcast(w, template)
    return w.transpose(*spec.sample_dims)


def _aligned_blocks(F, y, w):
    """F, y and w with the same chunks along the sample dimensions."""
    chunks = F.data.chunks[1:]
    y = y.data.rechunk(chunks) if isinstance(y.data, da.Array) else da.from_array(y.values, chunks=chunks)
    w = w.data.rechunk(chunks) if isinstance(w.data, da.Array) else da.from_array(w.values, chunks=chunks)
    return F.data, y, w


def _block_rows(Fb, yb, wb):
    """The unmasked cells of one block: ``(X, y, w, keep)`` with ``keep`` in C order."""
    p = Fb.shape[0]
    X = Fb.reshape(p, -1).T
    y = yb.reshape(-1)
    w = wb.reshape(-1)
    keep = np.isfinite(y) & np.isfinite(w) & (w > 0) & np.all(np.isfinite(X), axis=1)
    return X, y, w, keep


def design_block(Fb, yb, wb):
    """``[X | y | w]`` of the unmasked cells of a block (C order)."""
    X, y, w, keep = _block_rows(Fb, yb, wb)
    return np.column_stack([X[keep], y[keep], w[keep]])


def mask_block(Fb, yb, wb):
    return _block_rows(Fb, yb, wb)[3].reshape(yb.shape)


class DesignMatrix:
    """A lazy design matrix built from a Dataset (see :func:`to_design_matrix`).

    Attributes
    ----------
    X : dask.array.Array of shape (n_samples, n_features)
        One row block per (time chunk, spatial chunk) of the data; masked cells dropped
        (the row counts are unknown until computed).
    y : dask.array.Array of shape (n_samples,)
    sample_weight : dask.array.Array of shape (n_samples,)
        ``cos(latitude)`` area weights (ones with ``area_weights=False``).
    feature_names : list of str
    """

    def __init__(self, spec, ds, F, y, w):
        self.spec = spec
        self.feature_names = spec.names
        self._F, self._y, self._w = _aligned_blocks(F, y, w)
        self._coords = {d: ds[d] for d in spec.sample_dims if d in ds.coords}
        self._dims = spec.sample_dims
        p = len(self.feature_names)
        Fd, yd, wd = self._F.to_delayed(optimize_graph=False), self._y.to_delayed(optimize_graph=False), self._w.to_delayed(optimize_graph=False)
        self._block_index = list(np.ndindex(*self._y.numblocks))
        self._block_shapes = [tuple(c[i] for c, i in zip(self._y.chunks, idx)) for idx in self._block_index]
        blocks = [
            da.from_delayed(dask.delayed(design_block)(Fd[(0,) + idx], yd[idx], wd[idx]),
                            shape=(np.nan, p + 2), dtype=np.float64)
            for idx in self._block_index
        ]
        D = da.concatenate(blocks, axis=0) if len(blocks) > 1 else blocks[0]
        self.X = D[:, :p]
        self.y = D[:, p]
        self.sample_weight = D[:, p + 1]

    @property
    def n_blocks(self):
        return len(self._block_index)

    def mask(self):
        """The cells kept (True) on the sample grid, as a lazy boolean DataArray."""
        Fd, yd, wd = self._F.to_delayed(optimize_graph=False), self._y.to_delayed(optimize_graph=False), self._w.to_delayed(optimize_graph=False)
        blocks = {
            idx: da.from_delayed(dask.delayed(mask_block)(Fd[(0,) + idx], yd[idx], wd[idx]), shape=shape, dtype=bool)
            for idx, shape in zip(self._block_index, self._block_shapes)
        }
        return xr.DataArray(_assemble(blocks, self._y.numblocks), dims=self._dims, coords=self._coords)

    def to_dataarray(self, values, name=None, attrs=None):
        """Values of the design rows (e.g. predictions) back on the sample grid, NaN
        where a cell was masked: the inverse of the stacking.

        ``values`` is a dask array with one block per row block of ``X`` (as returned by
        ``X.map_blocks``/an estimator's ``predict``) or an in-memory array of length
        ``n_samples``.
        """
        Fd, yd, wd = self._F.to_delayed(optimize_graph=False), self._y.to_delayed(optimize_graph=False), self._w.to_delayed(optimize_graph=False)
        if isinstance(values, da.Array):
            if values.numblocks[0] != self.n_blocks:
                raise InputError(
                    f"values have {values.numblocks[0]} row blocks but the design matrix has {self.n_blocks}; "
                    "pass values computed block by block from X (e.g. estimator.predict(dm.X))"
                )
            vd = [v for v in values.to_delayed(optimize_graph=False).ravel()]
        else:
            values = np.asarray(values, dtype=np.float64)
            counts = dask.compute(*[dask.delayed(np.count_nonzero)(dask.delayed(mask_block)(Fd[(0,) + i], yd[i], wd[i]))
                                    for i in self._block_index])
            if values.shape[0] != sum(counts):
                raise InputError(f"values have {values.shape[0]} rows; the design matrix has {sum(counts)}")
            edges = np.concatenate([[0], np.cumsum(counts)])
            vd = [values[a:b] for a, b in zip(edges[:-1], edges[1:])]
        blocks = {
            idx: da.from_delayed(
                dask.delayed(_unstack)(dask.delayed(mask_block)(Fd[(0,) + idx], yd[idx], wd[idx]), v),
                shape=shape, dtype=np.float64,
            )
            for idx, shape, v in zip(self._block_index, self._block_shapes, vd)
        }
        return xr.DataArray(_assemble(blocks, self._y.numblocks), dims=self._dims, coords=self._coords,
                            name=name, attrs=dict(attrs or {}))


def _unstack(mask, values):
    out = np.full(mask.shape, np.nan)
    out[mask] = np.asarray(values).reshape(-1)
    return out


def _assemble(blocks, numblocks):
    def nest(prefix):
        if len(prefix) == len(numblocks):
            return blocks[tuple(prefix)]
        return [nest(prefix + [i]) for i in range(numblocks[len(prefix)])]

    return da.block(nest([]))


def to_design_matrix(ds, features, target, sample_dims=("time", "lat", "lon"), *, time_dim="time", lags=None,
                     lead=0, seasonal=None, area_weights=True, lat="auto"):
    """An xarray Dataset as a lazy design matrix (samples x features), without loading it.

    Parameters
    ----------
    ds : xarray.Dataset
        Backed by dask (``xr.open_dataset(..., chunks=...)``, ``xr.open_zarr``) or NumPy.
    features : str or list of str
        Predictor variables; each may have any subset of ``sample_dims`` (e.g. a
        ``(time,)`` index is broadcast to every cell).
    target : str
        The variable to predict.
    sample_dims : tuple of str, default=("time", "lat", "lon")
        Dimensions whose cells are the samples.
    time_dim : str, default="time"
        The time dimension (lags, lead and seasonal terms act along it).
    lags : None, int, list of int or dict, default=None
        Time steps back of each predictor: None: only the current value (lag 0); an int
        ``n``: lags ``0..n``; a list: those lags for every feature; a dict: per feature
        (a feature left out keeps lag 0).  A lag never crosses a gap in the series.
    lead : int, default=0
        Forecast lead time in steps: the row at time ``t`` predicts the target at ``t``
        from predictors at ``t - lead - lag``.
    seasonal : int or None, default=None
        Number of harmonics of the seasonal cycle (``sin``/``cos`` of ``2 pi k`` times
        the fraction of the calendar year), for any calendar.
    area_weights : bool, default=True
        Weight each cell by ``cos(latitude)`` (its relative area).
    lat : str, default="auto"
        The latitude coordinate for the weights ("auto": a spatial dimension named
        ``lat``/``latitude`` or with CF latitude attributes).

    Returns
    -------
    DesignMatrix
        ``.X``, ``.y``, ``.sample_weight`` (dask arrays, masked cells dropped),
        ``.feature_names``, ``.mask()`` and ``.to_dataarray(values)`` (the inverse).

    Raises
    ------
    InputError
        A missing variable or dimension, non-numeric data, lags longer than the series.
    ParameterError
        Bad ``lags``, ``lead`` or ``seasonal``.
    """
    spec = FeatureSpec(features, target, sample_dims, time_dim, lags, lead, seasonal, area_weights, lat)
    spec.check(ds, need_target=True)
    return DesignMatrix(spec, ds, feature_fields(spec, ds), target_field(spec, ds), weight_field(spec, ds))


def from_design_matrix(dm, values, name=None, attrs=None):
    """The inverse of :func:`to_design_matrix`: row values back on the grid (NaN where masked)."""
    return dm.to_dataarray(values, name=name, attrs=attrs)


def check_not_all_masked(n_rows, what="the data"):
    if n_rows == 0 or (isinstance(n_rows, float) and math.isnan(n_rows)):
        raise InputError(
            f"every cell of {what} is masked (NaN in a feature or the target, or zero weight): nothing to fit"
        )
