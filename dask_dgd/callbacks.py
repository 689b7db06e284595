"""Callbacks for the estimators' ``callbacks=`` parameter.

A callback is any callable taking one step record (a dict: the future row of
``history_``, see the user guide's Monitoring section); if it returns ``True`` the fit
stops after that step.  Records carry no parameters, so callbacks observe a fit, they
do not change it.
"""

import os
from pathlib import Path

import pandas as pd

from .exceptions import ParameterError

__all__ = ["HistoryWriter"]


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
