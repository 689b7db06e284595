"""The time axis of a climate Dataset: step numbers for lags and lead, checked order,
seasonal terms (numpy datetime64 and cftime calendars alike)."""

import numpy as np
import xarray as xr

from ..exceptions import InputError

__all__ = ["check_dates", "seasonal_terms", "time_steps"]


def time_steps(time, name="time"):
    """Integer step number of every time: consecutive steps of the series differ by 1.

    Times are counted in calendar units (years when the median spacing is 360 days or
    more, months when it is 28 days or more, otherwise multiples of the median spacing),
    then divided by the series' own median step in those units (so seasonal means step
    by 3 months, decadal data by 10 years).  A time that falls off that grid gets a step
    number no other time can be a whole number of steps from: it is a gap for lags.

    The times must be dates in strictly increasing order (``name``, the coordinate's
    name, is for the messages): a shift of ``s`` steps takes the row ``s`` positions
    earlier, so a series out of order, with a repeated time or a missing one (NaT)
    is an :class:`InputError` rather than rows silently dropped.
    """
    values = np.asarray(time)
    check_dates(values)
    t = xr.DataArray(values, dims="time")
    if t.size < 2:
        return np.arange(t.size, dtype=np.int64)
    days = _days(t)
    _check_order(values, days, name)
    spacing = float(np.median(np.diff(days)))
    if spacing >= 360:  # years
        units = t.dt.year.values.astype(np.int64)
    elif spacing >= 28:  # months
        units = (t.dt.year.values * 12 + t.dt.month.values).astype(np.int64)
    else:
        return np.round((days - days[0]) / spacing).astype(np.int64)
    units = units - units[0]
    k = max(int(np.median(np.diff(units))), 1)
    steps = units // k
    off = units % k != 0
    # off-grid times: far apart from everything and from each other
    steps[off] = -(np.arange(1, off.sum() + 1, dtype=np.int64) * 4 * (units.size + 1)) - 10 * units.size
    return steps


def check_dates(values):
    if values.size and not (np.issubdtype(values.dtype, np.datetime64) or hasattr(values.flat[0], "calendar")):
        raise InputError(
            f"lags, lead and seasonal terms need a time coordinate of dates (datetime64 or cftime); got dtype "
            f"{values.dtype}: decode the times (xr.decode_cf) or set one (ds.assign_coords(time=...))"
        )


def _check_order(values, days, name):
    """Refuse a time axis that is not strictly increasing: lags count positions."""
    missing = np.isnan(days)
    if missing.any():
        raise InputError(
            f"the time coordinate {name!r} has {int(missing.sum())} missing value(s) (NaT), the first at position "
            f"{int(np.flatnonzero(missing)[0])}: lags and lead need a date for every step; drop them with "
            f"ds.dropna({name!r}, subset=[{name!r}]) or set the dates"
        )
    step = np.diff(days)
    back = np.flatnonzero(step < 0)
    if back.size:
        i = int(back[0])
        raise InputError(
            f"the time coordinate {name!r} is not in increasing order: {_show(values[i + 1])} comes after "
            f"{_show(values[i])} (positions {i} and {i + 1}, {back.size} step(s) back in all); lags and lead "
            f"shift by steps of the series in the order stored: sort the Dataset with ds.sortby({name!r})"
        )
    same = np.flatnonzero(step == 0)
    if same.size:
        first = _show(values[int(same[0])])
        raise InputError(
            f"the time coordinate {name!r} has duplicate values ({same.size} repeated, the first {first} at "
            f"positions {int(same[0])} and {int(same[0]) + 1}): lags and lead need one time per step; drop the "
            f"repeats with ds.drop_duplicates({name!r}) or combine them (e.g. ds.groupby({name!r}).mean())"
        )


def _show(date):
    """A date for a message: ``2000-04-01`` (with the time of day only when there is one)."""
    if isinstance(date, np.datetime64):
        return np.datetime_as_string(date, unit="auto")
    text = str(date)
    return text[:-9] if text.endswith(" 00:00:00") else text


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
    day = t.dt.dayofyear.values - 1 + t.dt.hour.values / 24.0 + t.dt.minute.values / 1440.0
    frac = day / t.dt.days_in_year.values
    out = {}
    for k in range(1, harmonics + 1):
        out[f"sin{k}"] = np.sin(2 * np.pi * k * frac)
        out[f"cos{k}"] = np.cos(2 * np.pi * k * frac)
    return out
