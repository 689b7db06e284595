"""Callbacks for the estimators' ``callbacks=`` parameter: :class:`HistoryWriter`
(stream the history to CSV/Parquet) and :class:`EarlyStopping` (stop when any record
field stalls).

A callback is any callable taking one step record (a dict: the future row of
``history_``, see the user guide's Monitoring section); if it returns ``True`` the fit
stops after that step.  Records carry no parameters, so callbacks observe a fit, they
do not change it.
"""

import os
from pathlib import Path

import pandas as pd

from .exceptions import ParameterError

__all__ = ["EarlyStopping", "HistoryWriter"]


def _cell(value):
    return ";".join(str(v) for v in value) if isinstance(value, tuple) else value


class HistoryWriter:
    """Write the step records to a CSV or Parquet file while the fit runs.

    Parameters
    ----------
    path : str or path-like
        ``.csv``: one line is appended (and flushed) per step, the header first, so
        another process can follow the fit.  ``.parquet``: the file is rewritten with
        every record so far every ``every`` steps and at the end (``close``), each time
        through a temporary file and an atomic rename, so a reader never sees half a
        file.  An existing file is replaced when the first record arrives.
    every : int, default=1
        Parquet: rewrite after this many new records.

    Examples
    --------
    >>> import numpy as np, dask_dgd, tempfile, os
    >>> from dask_dgd.callbacks import HistoryWriter
    >>> path = os.path.join(tempfile.mkdtemp(), "history.csv")
    >>> X = np.random.default_rng(0).standard_normal((200, 2))
    >>> est = dask_dgd.LinearRegression(solver="gd", max_iter=3, tol=0,
    ...                                 callbacks=[HistoryWriter(path)]).fit(X, X @ [1.0, 2.0])
    >>> len(open(path).read().splitlines()) == len(est.history_) + 1  # header + one line per step
    True
    """

    def __init__(self, path, every=1):
        self.path = Path(path)
        suffix = self.path.suffix.lower()
        if suffix not in (".csv", ".parquet"):
            raise ParameterError(f"HistoryWriter writes .csv or .parquet files; got {str(path)!r}")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ParameterError(f"every must be an int >= 1; got {every!r}")
        self.format = suffix[1:]
        self.every = every
        self.records = []
        self._columns = None

    def __call__(self, record):
        row = {k: _cell(v) for k, v in record.items()}
        self.records.append(row)
        if self.format == "csv":
            first = self._columns is None
            if first:
                self._columns = list(row)
            frame = pd.DataFrame([row]).reindex(columns=self._columns)
            frame.to_csv(self.path, mode="w" if first else "a", header=first, index=False)
        elif len(self.records) % self.every == 0:
            self._write_parquet()
        return False

    def _write_parquet(self):
        tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        pd.DataFrame(self.records).to_parquet(tmp, index=False)
        os.replace(tmp, self.path)

    def close(self):
        """Write what is not written yet (Parquet)."""
        if self.format == "parquet" and self.records:
            self._write_parquet()

    def read(self):
        """The file's records as a DataFrame."""
        return pd.read_csv(self.path) if self.format == "csv" else pd.read_parquet(self.path)


class EarlyStopping:
    """Stop the fit when a record field has not improved for ``patience`` records.

    Works in every mode and solver, on any numeric field of the step records: the
    validation score of ``early_stopping=True`` (``"val_score"``, recorded once per
    epoch: records where the field is None are skipped), the objective (``"loss"``),
    the gradient norm, ...  For the usual validation-set early stopping of synchronous
    training prefer the estimators' ``early_stopping`` parameters; this callback adds
    it to the local and async modes (on the objective) and to custom criteria.

    Parameters
    ----------
    monitor : str, default="loss"
        The record field to watch.
    mode : {"min", "max"}, default="min"
        Whether smaller or larger values are better ("max" for scores).
    patience : int, default=5
        Records (with a value) without an improvement of more than ``min_delta`` after
        which the fit stops.
    min_delta : float, default=0.0
        The smallest change that counts as an improvement.

    Attributes
    ----------
    best : float
        The best value seen.
    stopped_at : int or None
        The ``step`` of the record that stopped the fit.

    Examples
    --------
    >>> import numpy as np, dask_dgd
    >>> from dask_dgd.callbacks import EarlyStopping
    >>> X = np.random.default_rng(0).standard_normal((500, 3))
    >>> stop = EarlyStopping(monitor="loss", patience=2, min_delta=1e-3)
    >>> est = dask_dgd.LinearRegression(solver="gd", max_iter=1000, tol=0,
    ...                                 callbacks=[stop]).fit(X, X @ [1.0, 2.0, 3.0])
    >>> est.n_iter_ < 1000 and stop.stopped_at is not None
    True
    """

    def __init__(self, monitor="loss", mode="min", patience=5, min_delta=0.0):
        if not isinstance(monitor, str):
            raise ParameterError(f"monitor must be a record field name (str); got {monitor!r}")
        if mode not in ("min", "max"):
            raise ParameterError(f"mode must be 'min' or 'max'; got {mode!r}")
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
            raise ParameterError(f"patience must be an int >= 1; got {patience!r}")
        if not (isinstance(min_delta, (int, float)) and min_delta >= 0):
            raise ParameterError(f"min_delta must be a number >= 0; got {min_delta!r}")
        self.monitor, self.mode, self.patience, self.min_delta = monitor, mode, patience, float(min_delta)
        self.best = None
        self.wait = 0
        self.stopped_at = None

    def __call__(self, record):
        if self.monitor not in record:
            raise ParameterError(
                f"EarlyStopping monitors {self.monitor!r}, which the step records do not have; "
                f"they have {sorted(record)}"
            )
        value = record[self.monitor]
        if value is None:
            return False
        value = float(value)
        sign = 1.0 if self.mode == "max" else -1.0
        if self.best is None or sign * (value - self.best) > self.min_delta:
            self.best, self.wait = value, 0
            return False
        self.wait += 1
        if self.wait >= self.patience:
            self.stopped_at = record.get("step")
            return True
        return False
