"""Faults injected into group computations, for tests and benchmarks.

Every group computation of every training mode (a synchronous step, a local round, an
asynchronous step) calls :func:`inject_faults` when it has computed.  Faults are set per
worker address (so they also work for the threads of an in-process LocalCluster)
through :mod:`dask_dgd.testing`, and are triggered by *progress*, never by a clock: a
failure, a kill or a freeze happens at the ``after + 1``-th computation on that worker,
so a test does the same thing on a quiet machine and on a busy one.
"""

from __future__ import annotations

import os
import signal
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from distributed import Worker

__all__ = ["inject_faults", "set_failure", "set_freeze", "set_kill", "set_slowdown"]

#: Injected faults, per worker address (None outside a worker).
_SLOWDOWN: dict[str | None, float] = {}
_FAILURES: dict[str | None, list[Any]] = {}  # [computations left before it fires, message]
_KILLS: dict[str | None, list[int]] = {}  # [computations left]
_FREEZES: dict[str | None, list[int]] = {}


def _key(dask_worker: Worker | None) -> str | None:
    return None if dask_worker is None else dask_worker.address


def set_slowdown(factor: float, dask_worker: Worker | None = None) -> float:
    """Make every group computation on this worker (``dask_worker``, which
    ``client.run`` fills in; None: outside any worker) sleep ``factor`` times its
    compute time afterwards (0 turns it off); returns the previous factor.

    A straggler for tests and benchmarks (see :func:`dask_dgd.testing.straggler`); it
    applies to every training mode alike.
    """
    previous = _SLOWDOWN.pop(_key(dask_worker), 0.0)
    if factor > 0:
        _SLOWDOWN[_key(dask_worker)] = float(factor)
    return previous


def set_failure(after: int | None, message: str, dask_worker: Worker | None = None) -> None:
    """Make the group computation number ``after + 1`` on this worker (and every later
    one) raise ``RuntimeError(message)``; ``after=None`` removes the fault."""
    _FAILURES.pop(_key(dask_worker), None)
    if after is not None:
        _FAILURES[_key(dask_worker)] = [int(after), str(message)]


def set_kill(after: int | None, dask_worker: Worker | None = None) -> None:
    """Make the group computation number ``after + 1`` on this worker kill the worker's
    process (SIGKILL, as a crash or the out-of-memory killer would); ``after=None``
    removes the fault.  Only for worker *processes* (a nanny restarts them)."""
    _KILLS.pop(_key(dask_worker), None)
    if after is not None:
        _KILLS[_key(dask_worker)] = [int(after)]


def set_freeze(after: int | None, dask_worker: Worker | None = None) -> None:
    """Make the group computation number ``after + 1`` on this worker stop the worker's
    process (SIGSTOP, as a debugger, a suspended VM or a swapped-out machine would):
    it answers nothing, not even the scheduler's heartbeats, until it gets SIGCONT;
    ``after=None`` removes the fault.  Only for worker *processes*."""
    _FREEZES.pop(_key(dask_worker), None)
    if after is not None:
        _FREEZES[_key(dask_worker)] = [int(after)]


def _worker_address() -> str | None:
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return None


def _countdown(table: Mapping[str | None, list[Any]], key: str | None) -> bool:
    """Whether the fault in ``table`` for ``key`` fires now (its count reached 0)."""
    fault = table.get(key)
    if fault is None:
        return False
    if fault[0] <= 0:
        return True
    fault[0] -= 1
    return False


def inject_faults(t0: float) -> None:
    """Apply this worker's injected faults to a computation that started at ``t0``
    (``time.perf_counter()``): kill the process, stop it, raise the failure, or sleep
    the slowdown."""
    if not (_SLOWDOWN or _FAILURES or _KILLS or _FREEZES):
        return
    key = _worker_address()
    if _countdown(_KILLS, key):
        os.kill(os.getpid(), signal.SIGKILL)
    if _countdown(_FREEZES, key):
        _FREEZES.pop(key, None)  # once: a process continued (SIGCONT) goes on
        os.kill(os.getpid(), signal.SIGSTOP)
    if _countdown(_FAILURES, key):
        raise RuntimeError(_FAILURES[key][1])
    factor = _SLOWDOWN.get(key, 0.0)
    if factor > 0:
        time.sleep(factor * (time.perf_counter() - t0))
