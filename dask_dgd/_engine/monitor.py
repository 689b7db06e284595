"""What every engine reports: one record per step, to the history, a bar, logs, callbacks."""

import logging
import time

from .records import RECORD_FIELDS

__all__ = ["Monitor", "RECORD_FIELDS", "communicated"]

logger = logging.getLogger("dask_dgd")

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
        Expected number of steps, for the progress bar.
    """

    def __init__(self, verbose=0, callbacks=(), total=None, desc="dask-dgd"):
        self.verbose = int(verbose)
        self.callbacks = list(callbacks or ())
        self.records = []
        self.t0 = time.perf_counter()
        self.wall0 = time.time()
        self.stop_requested = False
        self._bar = None
        if self.verbose >= 1:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=desc, unit="step", leave=False)

    def elapsed(self):
        return time.perf_counter() - self.t0

    def stamp(self, record):
        """``record`` (from :func:`~.records.make_record`) with its ``time``: seconds since
        the fit started, from its ``wall`` clock stamp if it was made in another
        process (the parameter server)."""
        rec = {name: record.get(name) for name in RECORD_FIELDS}
        wall = record.get("wall")
        rec["time"] = wall - self.wall0 if wall is not None else self.elapsed()
        rec.update({k: v for k, v in record.items() if k not in rec and k != "wall"})
        return rec

    def record(self, record):
        """Add one step record: to the history, the bar, the log and the callbacks."""
        rec = self.stamp(record)
        self.records.append(rec)
        if self._bar is not None:
            self._bar.update(1)
            shown = {"loss": f"{rec['loss']:.6g}"}
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

    def close(self):
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        for cb in self.callbacks:  # e.g. a writer flushing what it buffered
            closer = getattr(cb, "close", None)
            if callable(closer):
                closer()


def communicated(history):
    """Totals of a fit's bytes (from its history): up the tree raw and as sent, down to
    the groups, all, and the compression ratio of the way up."""
    up_raw = int(history["bytes_up_raw"].fillna(0).sum()) if len(history) else 0
    up = int(history["bytes_up"].fillna(0).sum()) if len(history) else 0
    down = int(history["bytes_down"].fillna(0).sum()) if len(history) else 0
    return {
        "up_raw": up_raw,
        "up": up,
        "down": down,
        "total": up + down,
        "compression_ratio": up_raw / up if up else 1.0,
    }
