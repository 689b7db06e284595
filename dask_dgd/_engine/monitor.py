"""What every engine reports: one record per step, to the history, a bar, logs, callbacks."""

import logging
import time

__all__ = ["Monitor", "RECORD_FIELDS"]

logger = logging.getLogger("dask_dgd")

#: Fields of each step record (``history_`` columns), in order.
RECORD_FIELDS = (
    "step",  # 1-based distributed step (one gradient evaluation over the data or a batch)
    "iteration",  # solver iteration (L-BFGS iteration, GD step, or SGD epoch)
    "loss",  # objective value: mean loss + penalty (on the batch, for mini-batch steps)
    "grad_norm",  # Euclidean norm of the objective's gradient
    "step_size",  # learning rate applied after this step (L-BFGS: None)
    "time",  # seconds since the fit started
    "step_time",  # wall seconds of this step, driver side
    "compute_time_max",  # slowest group's compute time in this step
    "compute_time_min",  # fastest group's compute time in this step
    "broadcast_time",  # driver sends the step -> the last group starts computing
    "reduce_time",  # the last group finishes -> the reduced sums are on the driver
    "update_time",  # driver time between the previous step's result and this step
    "n_samples",  # rows that contributed to this step
    "staleness_max",  # async: steps the pushing group was ahead of the slowest (bounded
    "staleness_mean",  # by max_staleness); sync and local: 0
    "delay_max",  # async: server updates between a gradient's pull and its push;
    "delay_mean",  # sync and local: 0
    "wait_time",  # longest time a group waited at the barrier (sync, local) or the bound
    "updates_per_group",  # tuple: optimizer steps each group took in this record
    "comm_bytes",  # bytes moved in this record: bytes_up + bytes_down
    "bytes_up_raw",  # gradient (and loss) bytes the groups would send uncompressed
    "bytes_up",  # ... as sent (compressed)
    "bytes_down",  # parameter bytes sent to the groups
)


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

    def make_record(self, **fields):
        """The record :meth:`record` would add, without adding it."""
        rec = {name: fields.get(name) for name in RECORD_FIELDS}
        # Records made elsewhere (the parameter server) carry their wall-clock stamp.
        rec["time"] = fields["wall"] - self.wall0 if "wall" in fields else self.elapsed()
        # optional fields (the validation scores of early stopping) follow the fixed ones
        rec.update({k: v for k, v in fields.items() if k not in rec and k != "wall"})
        return rec

    def record(self, **fields):
        rec = self.make_record(**fields)
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
