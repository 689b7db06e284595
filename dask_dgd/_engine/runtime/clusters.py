"""The Dask configuration of the clusters dask_dgd starts itself.

CPython 3.11 before 3.11.9 can deadlock a whole process (CPython issue gh-106883,
fixed in 3.11.9; 3.12 runs its garbage collections elsewhere and is not affected).
``sys._current_frames`` holds the interpreter's lock on its list of threads while it
makes frame objects; an allocation there can start a garbage collection, and a
finalizer that collection runs can give up the GIL (a ``distributed.Future``'s
``__del__`` writes to the event loop's socket).  A thread that starts or ends in that
moment holds the GIL and waits for the list's lock; the finalizer's thread holds the
list's lock and waits for the GIL: every thread of the process stops for good.

Distributed's statistical profiler calls ``sys._current_frames`` on every worker
every 10 ms, and threads start and end on the workers whenever a task secedes from
the worker's thread pool: each group loop of an asynchronous fit, a fit inside a
task.  Measured on this project's machine (CPython 3.11.7, distributed 2026.8.0):
the test suite's asynchronous climate fit on an in-process LocalCluster hung once in
about 40 loaded runs; ``benchmarks/profiler_deadlock.py`` hangs a threaded cluster
within a minute with the profiler on and runs clean with it off.

So on those interpreters the clusters dask_dgd starts (the embedded cluster of a fit
without a client, the command line's, :func:`dask_dgd.testing.process_cluster`) run
without the workers' profiler: :func:`cluster_config`, :func:`local_cluster`.  A cluster you start yourself
on such an interpreter needs the same setting (``distributed.worker.profile.enabled:
false``) or a newer Python.
"""

from __future__ import annotations

import sys
from typing import Any

import dask
from distributed import LocalCluster

__all__ = ["PROFILER_DEADLOCKS", "cluster_config", "cluster_env", "local_cluster"]

#: This interpreter can deadlock in ``sys._current_frames`` (see the module's text).
PROFILER_DEADLOCKS = (3, 11) <= sys.version_info[:3] < (3, 11, 9)


def cluster_config() -> dict[str, Any]:
    """The Dask configuration the clusters dask_dgd starts are created under
    (``dask.config.set(cluster_config())``): the workers' profiler off where this
    interpreter can deadlock on it, else nothing."""
    return {"distributed.worker.profile.enabled": False} if PROFILER_DEADLOCKS else {}


def cluster_env() -> dict[str, str]:
    """:func:`cluster_config` as the environment variables of worker processes started
    as commands (``dask worker``)."""
    return {"DASK_" + key.upper().replace(".", "__").replace("-", "_"): str(value)
            for key, value in cluster_config().items()}


def local_cluster(**kwargs: Any) -> LocalCluster:
    """``distributed.LocalCluster(**kwargs)``, its workers created under
    :func:`cluster_config`."""
    with dask.config.set(cluster_config()):
        return LocalCluster(**kwargs)
