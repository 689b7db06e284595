"""The step record: one per distributed step of every mode and model family.

:func:`make_record` is the only place a record is built, on the driver (synchronous and
local steps) as in the parameter server (asynchronous updates); this module imports no
Dask, so it runs on the workers too.  Records become the rows of ``history_``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["RECORD_FIELDS", "Bytes", "Route", "Timing", "make_record"]

#: Fields of each step record (``history_`` columns), in order.
RECORD_FIELDS = (
    "step",  # 1-based distributed step (one gradient evaluation over the data or a batch)
    "iteration",  # solver iteration (L-BFGS iteration, GD step, or SGD epoch)
    "loss",  # objective value: mean loss + penalty (on the batch, for mini-batch steps)
    "grad_norm",  # Euclidean norm of the objective's gradient
    "step_size",  # learning rate applied after this step (L-BFGS: None)
    "lr_halvings",  # learning-rate halvings (divergence backoffs) of the fit so far (None: no divergence guard)
    "time",  # seconds since the fit started
    "step_time",  # wall seconds of this step, driver side
    "compute_time_max",  # slowest group's compute time in this step
    "compute_time_min",  # fastest group's compute time in this step
    "compute_time_median",  # median group compute time, to the histogram's resolution (None: unknown)
    "slowest_group",  # index of the group whose compute time is compute_time_max (None: unknown)
    "broadcast_time",  # driver sends the step -> the last group starts computing
    "reduce_time",  # the last group finishes -> the reduced sums are on the driver
    "update_time",  # driver time between the previous step's result and this step
    "driver_cpu_time",  # CPU seconds of the driver process (all its threads) during this step
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
    "tree_depth",  # levels of runners the step went through (1: the driver called every group; 0: in process)
    "driver_messages",  # messages the driver sent and received for this record (star: 2 x groups)
    "driver_bytes",  # bytes the driver sent and received for this record (None: unknown, e.g. task steps)
    "level_times",  # tuple: seconds from receiving the step to answering, slowest runner of each tree level
)


@dataclass(frozen=True)
class Timing:
    """Where a step's time went (seconds; None when unknown)."""

    step_time: float
    compute_time_max: float
    compute_time_min: float
    broadcast_time: float | None = None
    reduce_time: float | None = None
    update_time: float | None = None
    wait_time: float | None = None
    driver_cpu_time: float | None = None
    compute_time_median: float | None = None
    slowest_group: int | None = None


@dataclass(frozen=True)
class Route:
    """How a step travelled: runner-tree levels, the driver's messages and bytes, the
    seconds through each level (the roots' first)."""

    depth: int | None = None
    messages: int | None = None
    driver_bytes: int | None = None
    level_times: tuple[float, ...] = ()

    @classmethod
    def of(cls, traffic: Mapping[str, Any]) -> Route:
        """From a collective's ``last_traffic``."""
        return cls(traffic["depth"], traffic["messages"], traffic["driver_bytes"], tuple(traffic["level_times"]))


@dataclass(frozen=True)
class Bytes:
    """Bytes a step moved: up the reduction (raw and as sent) and down to the groups."""

    up_raw: int
    up: int
    down: int


def nonneg(seconds: float | None) -> float | None:
    """A wall-clock difference between processes: None if unknown, clipped at 0 (the
    clocks of different machines may disagree by a little)."""
    return None if seconds is None or not math.isfinite(seconds) else max(0.0, float(seconds))


def make_record(*, step: int, iteration: int, loss: float, grad_norm: float, step_size: float | None,
                timing: Timing, n_samples: float, updates_per_group: Sequence[int], nbytes: Bytes,
                route: Route | None = None, staleness: tuple[int, float] = (0, 0.0),
                delay: tuple[int, float] = (0, 0.0), lr_halvings: int | None = None,
                **extra: Any) -> dict[str, Any]:
    """One step record (a dict with :data:`RECORD_FIELDS` first, then ``extra`` fields,
    e.g. validation scores; ``time`` is filled in by the monitor, or given as ``wall``
    by a record made in another process)."""
    wait = timing.wait_time
    if wait is None and timing.compute_time_max is not None:  # unknown for the per-cell passes' dask graphs
        wait = max(0.0, timing.compute_time_max - timing.compute_time_min)
    rec = {
        "step": int(step),
        "iteration": int(iteration),
        "loss": float(loss),
        "grad_norm": float(grad_norm),
        "step_size": None if step_size is None else float(step_size),
        "lr_halvings": None if lr_halvings is None else int(lr_halvings),
        "time": None,
        "step_time": timing.step_time,
        "compute_time_max": timing.compute_time_max,
        "compute_time_min": timing.compute_time_min,
        "compute_time_median": None if timing.compute_time_median is None else float(timing.compute_time_median),
        "slowest_group": None if timing.slowest_group is None else int(timing.slowest_group),
        "broadcast_time": nonneg(timing.broadcast_time),
        "reduce_time": nonneg(timing.reduce_time),
        "update_time": timing.update_time,
        "driver_cpu_time": timing.driver_cpu_time,
        "n_samples": n_samples,
        "staleness_max": staleness[0],
        "staleness_mean": float(staleness[1]),
        "delay_max": delay[0],
        "delay_mean": float(delay[1]),
        "wait_time": wait,
        "updates_per_group": tuple(updates_per_group),
        "comm_bytes": int(nbytes.up + nbytes.down),
        "bytes_up_raw": int(nbytes.up_raw),
        "bytes_up": int(nbytes.up),
        "bytes_down": int(nbytes.down),
        "tree_depth": None if route is None else route.depth,
        "driver_messages": None if route is None else route.messages,
        "driver_bytes": None if route is None else route.driver_bytes,
        "level_times": () if route is None else tuple(float(t) for t in route.level_times),
    }
    rec.update(extra)
    return rec
