"""The time axis of a climate Dataset: step numbers for lags and lead, checked order,
seasonal terms, the time as a trend feature (numpy datetime64 and cftime calendars
alike)."""

import dataclasses

import numpy as np
import xarray as xr

from ..exceptions import InputError

__all__ = ["TIME_UNITS", "YEAR_DAYS", "TimeRule", "check_dates", "is_dates", "seasonal_terms", "time_steps"]

#: Days in the mean year of each CF calendar (numpy datetime64 is ``proleptic_gregorian``).
YEAR_DAYS = {
    "360_day": 360.0, "noleap": 365.0, "365_day": 365.0, "all_leap": 366.0, "366_day": 366.0,
    "julian": 365.25, "standard": 365.2425, "gregorian": 365.2425, "proleptic_gregorian": 365.2425,
}
#: ``time_unit`` -> (length, per): the unit is ``length`` days (``per="day"``) or
#: ``length`` mean years of the calendar (``per="year"``), a fixed duration either way.
TIME_UNITS = {
    "seconds": (1 / 86400, "day"), "minutes": (1 / 1440, "day"), "hours": (1 / 24, "day"), "days": (1.0, "day"),
    "months": (1 / 12, "year"), "years": (1.0, "year"), "decades": (10.0, "year"), "centuries": (100.0, "year"),
}
#: Calendars that are one for elapsed time: aliases, and ``standard`` (Julian before
#: 1582-10-15) with ``proleptic_gregorian`` (datetime64), which agree from then on.
_SAME_CALENDAR = {"365_day": "noleap", "366_day": "all_leap", "gregorian": "standard",
                  "proleptic_gregorian": "standard"}


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


def is_dates(values):
    """Whether ``values`` (a NumPy array) are dates: datetime64 or cftime objects."""
    values = np.asarray(values)
    return np.issubdtype(values.dtype, np.datetime64) or (
        values.dtype.kind == "O" and values.size > 0 and type(values.flat[0]).__module__.split(".")[0] == "cftime")


def _calendar(values):
    """The CF calendar of dates ``values``: ``proleptic_gregorian`` for datetime64."""
    if np.issubdtype(values.dtype, np.datetime64):
        return "proleptic_gregorian"
    return str(getattr(values.flat[0], "calendar", ""))


@dataclasses.dataclass(frozen=True)
class TimeRule:
    """Dates as the time elapsed since an origin, in a fixed unit of their calendar.

    The time coordinate named among the features becomes ``(t - origin) / unit``:
    ``origin`` is the first (earliest) time of the fit's data, ``unit`` a fixed
    duration (:data:`TIME_UNITS`; ``"years"`` is the calendar's mean year,
    :data:`YEAR_DAYS`), so the column is exactly linear in time and a model's
    intercept is its value at the origin.  ``predict`` applies the same rule (origin,
    unit, calendar) to its own dates.

    Parameters
    ----------
    origin : str
        The origin as an ISO date (``"1860-06-01T00:00:00"``).
    calendar : str
        The CF calendar of the fit's dates (``"proleptic_gregorian"`` for datetime64).
    unit : str
        A key of :data:`TIME_UNITS`.
    cftime : bool
        Whether the fit's dates were cftime objects (the type of :attr:`origin_date`).
    """

    origin: str
    calendar: str
    unit: str
    cftime: bool

    @classmethod
    def first(cls, values, unit, name="time"):
        """The rule whose origin is the earliest of ``values`` (dates; ``name``, the
        coordinate's name, is for the messages)."""
        values = np.asarray(values)
        check_dates(values)
        if np.issubdtype(values.dtype, np.datetime64):
            known = values[~np.isnat(values)]
            if not known.size:
                raise InputError(f"the time coordinate {name!r} is all missing (NaT): a trend on time needs dates")
            return cls(np.datetime_as_string(known.min(), unit="auto"), "proleptic_gregorian", unit, False)
        calendar = _calendar(values)
        if calendar not in YEAR_DAYS:
            raise InputError(
                f"the time coordinate {name!r} has the calendar {calendar!r}, which has no year length for a trend "
                f"on time (calendars: {', '.join(sorted(YEAR_DAYS))}); convert it with ds.convert_calendar(...)"
            )
        return cls(min(values.ravel()).isoformat(), calendar, unit, True)

    @property
    def unit_days(self):
        """The length of the unit in days."""
        length, per = TIME_UNITS[self.unit]
        return length * (YEAR_DAYS[self.calendar] if per == "year" else 1.0)

    @property
    def origin_date(self):
        """The origin as a date of the fit's type (``numpy.datetime64`` or cftime)."""
        if not self.cftime:
            return np.datetime64(self.origin)
        import cftime

        return cftime.num2date(0.0, f"days since {self.origin}", calendar=self.calendar)

    def check(self, values, name="time"):
        """Refuse ``values`` that are not dates of this rule's calendar."""
        values = np.asarray(values)
        if not is_dates(values):
            raise InputError(
                f"the model has the time coordinate {name!r} as a trend feature (time since {self.origin} in "
                f"{self.unit}, calendar {self.calendar!r}) but this Dataset's {name!r} has dtype {values.dtype}, not "
                "dates: decode the times (xr.decode_cf) or set them (ds.assign_coords(time=...))"
            )
        calendar = _calendar(values) if values.size else self.calendar
        if _SAME_CALENDAR.get(calendar, calendar) != _SAME_CALENDAR.get(self.calendar, self.calendar):
            align = ", align_on='year'" if "360_day" in (calendar, self.calendar) else ""
            raise InputError(
                f"the time coordinate {name!r} has the calendar {calendar!r} but the model's trend on time was fitted "
                f"on the calendar {self.calendar!r} (time since {self.origin} in {self.unit} of "
                f"{self.unit_days:g} days), whose dates and years differ; convert the Dataset with "
                f"ds.convert_calendar({self.calendar!r}{align})"
            )

    def column(self, values, name="time"):
        """``(t - origin) / unit`` of every date of ``values`` (float64; NaN for NaT)."""
        values = np.asarray(values)
        self.check(values, name)
        if np.issubdtype(values.dtype, np.datetime64):
            days = (values - np.datetime64(self.origin)) / np.timedelta64(1, "D")
        else:
            import cftime

            days = cftime.date2num(values, f"days since {self.origin}", calendar=_calendar(values))
        return np.asarray(days, dtype=np.float64) / self.unit_days


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
    """``sin/cos(2 pi k f)`` for k = 1..harmonics, ``f`` the fraction of the calendar
    year reached at each time:

    ``f = (dayofyear - 1 + hour / 24 + minute / 1440) / days_in_year``

    with xarray's ``.dt`` fields of the date (``days_in_year``: 360 in the 360-day
    calendar, 365 or 366 in the others, by the year; seconds are not counted), so
    ``f`` is 0 at midnight starting 1 January and the terms repeat every year."""
    t = xr.DataArray(np.asarray(time), dims="time")
    day = t.dt.dayofyear.values - 1 + t.dt.hour.values / 24.0 + t.dt.minute.values / 1440.0
    frac = day / t.dt.days_in_year.values
    out = {}
    for k in range(1, harmonics + 1):
        out[f"sin{k}"] = np.sin(2 * np.pi * k * frac)
        out[f"cos{k}"] = np.cos(2 * np.pi * k * frac)
    return out
