"""The scheduler's memory of the fits it has seen: :class:`FitStore`.

Pure Python (no Dask, no NumPy): it runs inside the scheduler, fed by the driver's
messages on the ``"dask_dgd"`` event topic (protocol 1)::

    {"kind": "start", "protocol": 1, "fit": id, "estimator": ..., "mode": ..., "max_iter": ...,
     "max_staleness": ..., "n_groups": ..., "workers": [...], "driver": ..., "pid": ..., "wall": ...}
    {"kind": "records", "fit": id, "first": n, "records": [history_ rows]}
    {"kind": "end", "fit": id, "status": "done" | "error" | "stopped", "message": ..., "wall": ...}

Unknown kinds and unknown fields are ignored, and so is a message that is not a dict or
names no fit: a newer driver's messages are read as far as this protocol goes.  The
store is bounded: :data:`MAX_FITS` fits, :data:`MAX_RECORDS` records per fit (beyond
that, every other one of the older half is dropped, so old steps are kept at a coarser
resolution and recent ones in full; ``Fit.thinned`` counts the thinnings),
:data:`MAX_FLAGS` flags and :data:`MAX_SAMPLES` samples per worker (``Fit.samples_received``
counts them all).  Each record is JSON-encoded once, as it arrives (``Fit.texts``), and
:meth:`FitStore.to_json` joins those texts: a response costs the scheduler's event loop
little even for many long fits.

The flags it raises as the records arrive (:meth:`Fit.flag`):

- ``"divergence"``: a record's loss is not finite, or its ``lr_halvings`` (the fit's
  learning-rate halvings so far) went up (one flag per record and increase: a rejected step makes
  no record, and this count is the only trace of its backoff);
- ``"straggler"``: the slowest group computed for more than :data:`STRAGGLER_RATIO`
  times the step's median group time (and :data:`STRAGGLER_MIN_SECONDS` more), named
  with its worker when the start message's ``workers`` has one per group.  Step 1 is
  never flagged: it carries each worker's warm-up (kernel compilation, data loading,
  the first task of a fresh process), which made every fit's first step a "straggler";
- ``"staleness"``: ``staleness_max`` reached ``max_staleness``, once per episode (the
  first record at the bound after one below it); ``staleness_at_bound`` counts the
  records at the bound;
- ``"worker lost"``, ``"error"`` and ``"stopped early"``: see :meth:`FitStore.worker_lost`
  and the end message.
"""

from __future__ import annotations

import bisect
import json
import math
import time
from collections import deque
from typing import Any

__all__ = ["MAX_FITS", "MAX_FLAGS", "MAX_RECORDS", "MAX_SAMPLES", "PROTOCOL",
           "STRAGGLER_MIN_SECONDS", "STRAGGLER_RATIO", "FitStore", "json_safe"]

#: The protocol version this store reads (newer ones are read as far as it goes).
PROTOCOL = 1
#: Fits kept; the oldest finished fit goes first (a running fit only when all are running).
MAX_FITS = 20
#: Records kept per fit; beyond, the older half is thinned to every other record.
MAX_RECORDS = 20_000
#: Flags kept per fit (the newest); ``flag_counts`` counts them all.
MAX_FLAGS = 500
#: Worker cpu/memory samples kept per worker and fit (at one a second: an hour).
MAX_SAMPLES = 3600
#: A group is a straggler when its compute time is above this times the step's median
#: group compute time ...
STRAGGLER_RATIO = 2.0
#: ... and at least this many seconds above it (below, scheduling jitter, not a straggler:
#: without it, sub-millisecond steps were flagged at most steps).
STRAGGLER_MIN_SECONDS = 0.01
#: Records the ETA's rate is measured over (the newest).
ETA_WINDOW = 20

_STATUSES = ("done", "error", "stopped")


def json_safe(value: Any) -> Any:
    """``value`` with NaN and infinities turned into None and tuples into lists
    (recursively through dicts, lists and tuples), ready for ``json.dumps(...,
    allow_nan=False)``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, deque)):
        return [json_safe(v) for v in value]
    return value


def _encode(record: dict[str, Any]) -> str:
    """``record`` as strict JSON text, NaN and infinities as null (:func:`json_safe`,
    walked only when the C encoder meets one)."""
    try:
        return json.dumps(record, allow_nan=False)
    except ValueError:  # a NaN or an infinity somewhere
        return json.dumps(json_safe(record), allow_nan=False)


def _number(value: Any) -> float | None:
    """``value`` as a finite float, or None (missing, not a number, NaN, inf)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _straggles(slowest: float, median: float) -> bool:
    """Whether a group computing ``slowest`` seconds straggles behind the step's
    ``median`` (:data:`STRAGGLER_RATIO`, :data:`STRAGGLER_MIN_SECONDS`)."""
    return median > 0 and slowest > STRAGGLER_RATIO * median and slowest - median >= STRAGGLER_MIN_SECONDS


class Fit:
    """One fit as the scheduler saw it (see :meth:`FitStore.fits_json` for the fields)."""

    def __init__(self, fit_id: str) -> None:
        self.fit = fit_id
        self.estimator = "?"
        self.mode: str | None = None
        self.max_iter: int | None = None
        self.max_staleness: int | None = None
        self.n_groups: int | None = None
        self.workers: list[str] = []
        self.driver: str | None = None
        self.pid: int | None = None
        self.started: float | None = None
        self.ended: float | None = None
        self.status = "running"
        self.message = ""
        self.protocol = PROTOCOL
        self.records: list[dict[str, Any]] = []
        self.index: list[int] = []  # the protocol index of each kept record
        self.texts: list[str] = []  # each kept record's JSON text, encoded once (NaN, inf: null)
        self.thinned = 0  # times the records were thinned (MAX_RECORDS): an open page resends them
        self.samples_received = 0  # worker samples received (the deques stop growing when full)
        self.received = 0  # the index the next record will have
        self.flags: deque[dict[str, Any]] = deque(maxlen=MAX_FLAGS)
        self.flag_counts: dict[str, int] = {}
        self.worker_metrics: dict[str, dict[str, deque[float | None]]] = {}
        self.halvings = 0  # the last record's lr_halvings
        self.at_bound = False  # whether the last record's staleness was at max_staleness
        self.staleness_at_bound = 0  # records at max_staleness
        self.order = 0  # when it was (last) started, for eviction and listing

    @property
    def running(self) -> bool:
        return self.status == "running"

    def flag(self, kind: str, step: int | None, message: str) -> None:
        self.flags.append({"step": step, "kind": kind, "message": message})
        self.flag_counts[kind] = self.flag_counts.get(kind, 0) + 1

    def last_step(self) -> int | None:
        return _int_or_none(self.records[-1].get("step")) if self.records else None

    def eta_seconds(self) -> float | None:
        """Seconds to ``max_iter`` at the rate of the last :data:`ETA_WINDOW` records
        (iterations per second of their ``time``); None when finished or unknown."""
        if not self.running or self.max_iter is None or len(self.records) < 2:
            return None
        window = self.records[-ETA_WINDOW:]
        it0, it1 = _number(window[0].get("iteration")), _number(window[-1].get("iteration"))
        t0, t1 = _number(window[0].get("time")), _number(window[-1].get("time"))
        if it0 is None or it1 is None or t0 is None or t1 is None or it1 <= it0 or t1 <= t0:
            return None
        rate = (it1 - it0) / (t1 - t0)
        return max(0.0, (self.max_iter - it1) / rate)

    def add_records(self, first: int, records: list[Any]) -> int:
        """Append ``records`` (the first has protocol index ``first``), skipping those
        already received; returns how many were added."""
        skip = max(0, self.received - first)
        new = [r for r in records[skip:] if isinstance(r, dict)]
        for rec in new:
            self._check(rec)
        self.index.extend(range(max(first, self.received), max(first, self.received) + len(new)))
        self.records.extend(new)
        self.texts.extend(map(_encode, new))
        self.received = max(self.received, first + len(records))
        if len(self.records) > MAX_RECORDS:
            half = len(self.records) // 2
            self.records[:half] = self.records[:half:2]
            self.index[:half] = self.index[:half:2]
            self.texts[:half] = self.texts[:half:2]
            self.thinned += 1
        return len(new)

    def _check(self, rec: dict[str, Any]) -> None:
        """Flag what ``rec`` shows: divergence, a straggler, staleness at its bound (see
        the module's docstring)."""
        step = _int_or_none(rec.get("step"))
        loss = rec.get("loss")
        not_finite = f"the objective is not finite at step {step} (loss={loss})"
        halvings = _int_or_none(rec.get("lr_halvings"))
        if halvings is not None and halvings > self.halvings:  # one flag per record, even when both
            new = halvings - self.halvings
            message = (f"the learning rate was halved {new} time{'s' * (new > 1)} before step {step} "
                       f"(on_divergence='backoff'; {halvings} in this fit)")
            self.flag("divergence", step, message if _number(loss) is not None else f"{message}; {not_finite}")
            self.halvings = halvings
        elif loss is not None and _number(loss) is None:
            self.flag("divergence", step, not_finite)
        t_max, t_med = _number(rec.get("compute_time_max")), _number(rec.get("compute_time_median"))
        if step != 1 and t_max is not None and t_med is not None and _straggles(t_max, t_med):  # 1: warm-up
            self.flag("straggler", step, f"{self._group_name(rec.get('slowest_group'))} computed for {t_max:.3g} s "
                                         f"at step {step}, {t_max / t_med:.1f}x the median group's {t_med:.3g} s")
        bound, stale = self.max_staleness, _number(rec.get("staleness_max"))
        at_bound = bound is not None and bound > 0 and stale is not None and stale >= bound
        if at_bound:
            self.staleness_at_bound += 1
            if not self.at_bound:
                self.flag("staleness", step, f"staleness {stale:g} reached max_staleness={bound} at step {step}: "
                                             "the fastest groups wait for the slowest (flagged once until it "
                                             "drops below; staleness_at_bound counts the records at the bound)")
        self.at_bound = at_bound

    def _group_name(self, group: Any) -> str:
        """``"group g (worker address)"``; the worker when the start message listed one
        per group."""
        g = _int_or_none(group)
        if g is None:
            return "the slowest group"
        per_group = self.n_groups is None or len(self.workers) == self.n_groups
        return f"group {g} (worker {self.workers[g]})" if per_group and 0 <= g < len(self.workers) else f"group {g}"

    def summary(self) -> dict[str, Any]:
        """The fit without its records and samples."""
        return {
            "fit": self.fit, "estimator": self.estimator, "status": self.status, "message": self.message,
            "mode": self.mode, "started": self.started, "ended": self.ended, "driver": self.driver,
            "pid": self.pid, "workers": list(self.workers), "max_iter": self.max_iter,
            "max_staleness": self.max_staleness, "n_groups": self.n_groups, "protocol": self.protocol,
            "steps": self.received, "iteration": self.records[-1].get("iteration") if self.records else None,
            "eta_seconds": self.eta_seconds(), "flags": list(self.flags), "flag_counts": dict(self.flag_counts),
            "staleness_at_bound": self.staleness_at_bound,
        }

    def records_since(self, since: int) -> list[dict[str, Any]]:
        """The kept records whose protocol index is ``since`` or more."""
        return self.records[bisect.bisect_left(self.index, since):]

    def texts_since(self, since: int) -> list[str]:
        """The JSON texts of :meth:`records_since`."""
        return self.texts[bisect.bisect_left(self.index, since):]


def _skew_note(entry: dict[str, Any], last: int | None) -> tuple[str, int | None, str]:
    """The flag of the data-skew placement at the start of a fit (``skew_report_``)."""
    return ("skew", None, f"data skew at the start: max/mean worker load {_fmt(entry.get('imbalance_before'))} "
                          f"before, {_fmt(entry.get('imbalance_after'))} after ({entry.get('action')}; "
                          f"{entry.get('moved_blocks')} blocks moved)")


def _rebalance_note(entry: dict[str, Any], last: int | None) -> tuple[str, int | None, str]:
    """The flag of a move of blocks toward faster workers during the fit."""
    step = _int_or_none(entry.get("step"))
    return ("rebalance", step if step is not None else last,
            f"{entry.get('moved_blocks')} blocks moved toward faster workers (predicted step "
            f"{_fmt(entry.get('predicted_step_ratio'))}x)")


def _retry_note(entry: dict[str, Any], last: int | None) -> tuple[str, int | None, str]:
    """The flag of a step retried after a worker loss (its shards recomputed elsewhere)."""
    return ("retry", last, f"lost worker(s) {entry.get('lost')}: shards recomputed, step retried")


def _fmt(value: Any) -> str:
    number = _number(value)
    return "?" if number is None else f"{number:.2f}"


#: The notes a driver sends besides its records (``{"kind": "note", "what": ..., "entry":
#: {...}}``): the data-skew placement at the start (``skew_report_``), a dynamic
#: rebalancing (an entry of ``skew_report_["dynamic"]``), a step retried after a worker
#: loss: each becomes a flag.
_NOTES = {"skew": _skew_note, "rebalance": _rebalance_note, "retry": _retry_note}


class FitStore:
    """The fits the scheduler has seen, fed by :meth:`apply` (one protocol message).

    Examples
    --------
    >>> store = FitStore()
    >>> store.apply({"kind": "start", "fit": "f1", "estimator": "LogisticRegression", "max_iter": 10})
    True
    >>> store.apply({"kind": "records", "fit": "f1", "first": 0,
    ...              "records": [{"step": 1, "iteration": 1, "loss": float("nan")}]})
    True
    >>> out = store.fits_json()
    >>> out["fits"][0]["records"], out["fits"][0]["flags"][0]["kind"]
    ([{'step': 1, 'iteration': 1, 'loss': None}], 'divergence')
    """

    def __init__(self) -> None:
        self.fits: dict[str, Fit] = {}
        self._counter = 0

    def apply(self, msg: Any) -> bool:
        """Apply one message; returns whether it was understood (False: ignored)."""
        if not isinstance(msg, dict) or not isinstance(msg.get("fit"), str):
            return False
        kind = msg.get("kind")
        if kind == "start":
            self._start(msg)
        elif kind == "records":
            first, records = _int_or_none(msg.get("first")), msg.get("records")
            if first is None or first < 0 or not isinstance(records, (list, tuple)):
                return False
            self._get(msg["fit"]).add_records(first, list(records))
        elif kind == "note":
            entry = msg.get("entry")
            if msg.get("what") not in _NOTES or not isinstance(entry, dict):
                return False
            fit = self._get(msg["fit"])
            fit.flag(*_NOTES[msg["what"]](entry, fit.last_step()))
        elif kind == "end":
            fit = self._get(msg["fit"])
            status = msg.get("status")
            fit.status = status if status in _STATUSES else "done"
            fit.message = str(msg.get("message") or "")
            fit.ended = _number(msg.get("wall")) or time.time()
            if fit.status == "error":
                fit.flag("error", fit.last_step(), fit.message or "the fit failed")
            elif fit.status == "stopped":
                fit.flag("stopped early", fit.last_step(), fit.message or "the fit was stopped")
        else:
            return False
        return True

    def _start(self, msg: dict[str, Any]) -> None:
        fit = self._get(msg["fit"])
        protocol = _int_or_none(msg.get("protocol"))
        fit.protocol = PROTOCOL if protocol is None else protocol
        fit.estimator = str(msg.get("estimator") or "?")
        fit.mode = msg.get("mode") if isinstance(msg.get("mode"), str) else None
        fit.max_iter = _int_or_none(msg.get("max_iter"))
        fit.max_staleness = _int_or_none(msg.get("max_staleness"))
        fit.n_groups = _int_or_none(msg.get("n_groups"))
        workers = msg.get("workers")
        fit.workers = [str(w) for w in workers] if isinstance(workers, (list, tuple)) else []
        fit.driver = str(msg["driver"]) if msg.get("driver") is not None else None
        fit.pid = _int_or_none(msg.get("pid"))
        fit.started = _number(msg.get("wall")) or fit.started or time.time()

    def _get(self, fit_id: str) -> Fit:
        """The fit ``fit_id``, created (and the store trimmed to :data:`MAX_FITS`) when
        new: records whose start message was lost still show."""
        fit = self.fits.get(fit_id)
        if fit is None:
            fit = self.fits[fit_id] = Fit(fit_id)
            fit.started = time.time()
            self._counter += 1
            fit.order = self._counter
            while len(self.fits) > MAX_FITS:
                finished = [f for f in self.fits.values() if not f.running and f is not fit]
                victim = min(finished or [f for f in self.fits.values() if f is not fit], key=lambda f: f.order)
                del self.fits[victim.fit]
        return fit

    def worker_lost(self, address: str) -> list[str]:
        """Flag "worker lost" on the running fits that use worker ``address``; returns
        their ids."""
        hit = [f for f in self.fits.values() if f.running and address in f.workers]
        for fit in hit:
            fit.flag("worker lost", fit.last_step(), f"worker {address} left the cluster during the fit")
        return [f.fit for f in hit]

    def running_workers(self) -> set[str]:
        """The workers of the running fits."""
        return {w for f in self.fits.values() if f.running for w in f.workers}

    def add_metrics(self, wall: float, metrics: dict[str, tuple[Any, Any]]) -> None:
        """One sample ``{address: (cpu percent, memory bytes)}`` taken at ``wall``, kept
        for the running fits that use each worker."""
        for fit in self.fits.values():
            if not fit.running:
                continue
            for address in fit.workers:
                if address not in metrics:
                    continue
                cpu, memory = metrics[address]
                series = fit.worker_metrics.setdefault(
                    address, {k: deque(maxlen=MAX_SAMPLES) for k in ("time", "cpu", "memory")})
                series["time"].append(float(wall))
                series["cpu"].append(_number(cpu))
                series["memory"].append(_number(memory))
                fit.samples_received += 1

    def ordered(self) -> list[Fit]:
        """The fits, newest first."""
        return sorted(self.fits.values(), key=lambda f: f.order, reverse=True)

    def fits_json(self, fit: str | None = None, since: int = 0) -> dict[str, Any]:
        """``{"protocol": 1, "fits": [...]}``, newest fit first (only ``fit`` when given:
        an unknown id gives no fits), each with its records from protocol index ``since``
        on (``"next"``: the index to ask for next), JSON-ready (NaN and inf are None).

        Each fit: ``fit``, ``estimator``, ``status`` ("running", "done", "error",
        "stopped"), ``message``, ``mode``, ``started`` and ``ended`` (Unix time),
        ``driver``, ``pid``, ``workers``, ``max_iter``, ``max_staleness``, ``n_groups``,
        ``protocol``, ``steps`` (records received), ``iteration``, ``eta_seconds``,
        ``flags`` (``{"step", "kind", "message"}``), ``flag_counts``,
        ``staleness_at_bound`` (records at ``max_staleness``), ``records``, ``first``
        (index of the first record returned), ``next`` and ``worker_metrics``
        (``{address: {"time", "cpu", "memory"}}``).
        """
        return dict(json.loads(self.to_json(fit, since)))

    def to_json(self, fit: str | None = None, since: int = 0) -> str:
        """:meth:`fits_json` as a JSON string (strict: no NaN).

        Cheap on the scheduler's event loop: each record was encoded once, as it
        arrived (:attr:`Fit.texts`), and a response joins those texts."""
        fits = self.ordered() if fit is None else [self.fits[fit]] if fit in self.fits else []
        out = []
        for f in fits:
            d = f.summary()
            texts = f.texts_since(since)
            d["first"] = f.index[len(f.index) - len(texts)] if texts else f.received
            d["next"] = f.received
            d["worker_metrics"] = f.worker_metrics
            head = json.dumps(json_safe(d), allow_nan=False)  # an object: "{...}"
            out.append(f'{head[:-1]}, "records": [{", ".join(texts)}]}}')
        return f'{{"protocol": {PROTOCOL}, "fits": [{", ".join(out)}]}}'
