"""What every engine reports: one record per step, to the history, a bar, logs, callbacks."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from typing import TYPE_CHECKING, Any, cast

from .records import RECORD_FIELDS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    import pandas as pd
    from tqdm.auto import tqdm

    from .publish import Publisher

__all__ = ["CAPPED_FORMAT", "Monitor", "RECORD_FIELDS", "communicated", "progress_bar", "progress_label"]

logger = logging.getLogger("dask_dgd")

#: The label a fit's progress bar takes over its own (an estimator that fits another one
#: inside, e.g. ClimateRegressor's pooled model, names the bar after itself).
_LABEL: contextvars.ContextVar[str | None] = contextvars.ContextVar("dask_dgd_progress_label", default=None)


@contextlib.contextmanager
def progress_label(label: str) -> Iterator[None]:
    """Progress bars opened inside this block are labelled ``label``."""
    token = _LABEL.set(label)
    try:
        yield
    finally:
        _LABEL.reset(token)


#: The bar of a fit whose ``total`` is only a limit: the count, the limit, the time and
#: the rate, without the percentage, the bar and the time left that would be read as a
#: forecast (a fit stopped by its tolerance after 3 of 100 iterations is not 3% done).
CAPPED_FORMAT = "{desc}: {n_fmt} {unit} (at most {total_fmt}) [{elapsed}, {rate_fmt}{postfix}]"


def progress_bar(verbose: int, total: int | None, desc: str, unit: str, capped: bool = False) -> tqdm | None:
    """A tqdm bar labelled ``desc`` (or the enclosing :func:`progress_label`) with
    ``total`` units, or None when ``verbose < 1``.

    ``capped``: ``total`` is a limit that another rule (a tolerance, early stopping, a
    time limit) usually ends the fit before, so the bar shows no percentage or time
    left (:data:`CAPPED_FORMAT`): with them a fit of 0.1 s that converges in a few of
    its ``max_iter=100`` iterations showed an ETA of over a minute."""
    if int(verbose) < 1:
        return None
    from tqdm.auto import tqdm

    fmt = CAPPED_FORMAT if capped and total is not None else None
    return tqdm(total=total, desc=_LABEL.get() or desc, unit=unit, leave=False, bar_format=fmt)

class Monitor:
    """Collects step records and shows them.

    Parameters
    ----------
    verbose : int
        0: silent; 1: a tqdm progress bar; 2: also one ``logging`` line per step on the
        ``dask_dgd`` logger.
    callbacks : sequence of callables
        Each is called with every record (a dict); if any returns ``True`` the fit stops
        after that step (the record's ``stopped_by`` names it).
    total : int or None
        The iteration limit (``max_iter``: iterations, or epochs for mini-batch,
        local and asynchronous training), the progress bar's total.  The bar advances
        with the records' ``iteration`` and shows the loss and the distributed steps.
    desc : str
        The bar's label: the estimator's name (an enclosing :func:`progress_label`
        takes precedence).
    capped : bool
        ``total`` is only a limit (a tolerance, early stopping or a time limit may end
        the fit first): the bar shows no percentage or time left (see
        :func:`progress_bar`).
    """

    def __init__(self, verbose: int = 0, callbacks: Sequence[Callable[[dict[str, Any]], Any]] | None = (),
                 total: int | None = None, desc: str = "dask_dgd.train", capped: bool = False) -> None:
        self.verbose = int(verbose)
        self.callbacks = list(callbacks or ())
        self.records: list[dict[str, Any]] = []
        self.t0 = time.perf_counter()
        self.wall0 = time.time()
        self.stop_requested = False
        self._bar = progress_bar(self.verbose, total, desc, "iter", capped)
        self._publisher: Publisher | None = None

    def publish(self, client: Any, notes: Callable[[], Mapping[str, Sequence[Any]]] | None = None,
                **start: Any) -> None:
        """Send the records to the live page of ``client``'s scheduler as they are made
        (see :mod:`.publish`): a distributed client, with the dask config
        ``dgd.dashboard`` on (the default); otherwise nothing.  ``start``: the fit's
        ``estimator``, ``mode``, ``max_iter``, ``max_staleness``, ``n_groups`` and
        ``workers`` (each group's); ``notes``: what else the page shows, as lists the
        fit appends to (see :class:`~.publish.Publisher`)."""
        from .publish import start_publisher

        self._publisher = start_publisher(client, self.records, start, notes)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def stamp(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """``record`` (from :func:`~.records.make_record`) with its ``time``: seconds since
        the fit started, from its ``wall`` clock stamp if it was made in another
        process (the parameter server)."""
        rec = {name: record.get(name) for name in RECORD_FIELDS}
        wall = record.get("wall")
        rec["time"] = wall - self.wall0 if wall is not None else self.elapsed()
        rec.update({k: v for k, v in record.items() if k not in rec and k != "wall"})
        return rec

    def record(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """Add one step record: to the history, the bar, the log and the callbacks."""
        rec = self.stamp(record)
        self.records.append(rec)
        if self._bar is not None:
            done = self._clamped(rec.get("iteration") or 0)
            if done > self._bar.n:
                self._bar.update(done - self._bar.n)
            shown = {"loss": f"{rec['loss']:.6g}", "steps": len(self.records)}
            if rec.get("val_score") is not None:
                shown["val_score"] = f"{rec['val_score']:.6g}"
            self._bar.set_postfix(shown, refresh=False)
        if self.verbose >= 2:
            logger.info(
                "step %d iter %d loss %.8g |grad| %.3g step_size %s %.3fs",
                rec["step"],
                rec["iteration"],
                rec["loss"],
                rec["grad_norm"],
                rec["step_size"],
                rec["step_time"],
            )
        for cb in self.callbacks:
            if cb(rec) is True:
                self.stop_requested = True
        return rec

    def finish(self, n_iter: int) -> None:
        """The fit ended after ``n_iter`` iterations: the bar shows them (a record is
        stamped with the iteration it was computed in, e.g. a line search's trial)."""
        if self._bar is not None:
            done = self._clamped(n_iter)
            if done != self._bar.n:
                self._bar.n = done
                self._bar.refresh()

    def _clamped(self, n_iter: int) -> int:
        """``n_iter`` as the bar shows it: at most its total."""
        bar = self._bar  # (open: called only while it is)
        return int(n_iter) if bar.total is None else min(int(n_iter), int(bar.total))  # type: ignore[union-attr]

    def close(self, status: str = "done", message: str = "") -> None:
        """The fit ended (``status``: ``"done"``, ``"error"`` or ``"stopped"``, with
        ``message``): the bar closes, the callbacks that can close close, and the live
        page gets the last records and the end."""
        publisher, self._publisher = self._publisher, None
        if publisher is not None:
            publisher.close(status, message)
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        for cb in self.callbacks:  # e.g. a writer flushing what it buffered
            closer = getattr(cb, "close", None)
            if callable(closer):
                closer()


def communicated(history: pd.DataFrame | Sequence[Mapping[str, Any]]) -> dict[str, int | float]:
    """Totals of a fit's bytes (from its history, or the records it is built from): up
    the tree raw and as sent, down to the groups, all, and the compression ratio of the
    way up."""
    def total(key: str) -> int:
        if isinstance(history, (list, tuple)):
            # the records' byte counts are whole numbers: any order of summing them is exact
            return int(sum(v for v in (r.get(key) for r in history) if v is not None and v == v))
        frame = cast("pd.DataFrame", history)
        return int(frame[key].fillna(0).sum()) if len(frame) else 0

    up_raw, up, down = total("bytes_up_raw"), total("bytes_up"), total("bytes_down")
    return {
        "up_raw": up_raw,
        "up": up,
        "down": down,
        "total": up + down,
        "compression_ratio": up_raw / up if up else 1.0,
    }
