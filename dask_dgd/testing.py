"""Helpers for testing and benchmarking distributed training on a real cluster.

:func:`straggler` slows one worker down, the classic failure of synchronous training,
so that the training modes can be compared under it; :func:`failing_worker` makes the
computations on one worker raise, to check that training stops with the error;
:func:`killing_worker` makes a worker process die in the middle of a fit, to check that
the fit survives it; :func:`freezing_worker` stops a worker process (SIGSTOP) in the
middle of a fit, to check that the fit does not wait for it for ever.  The faults are
triggered by progress (the worker's n-th group computation), never by a clock, so a
test does the same on a quiet and on a busy machine.
:func:`process_cluster` starts a real cluster of separate `dask scheduler` and
`dask worker` processes (what ``dask scheduler`` / ``dask worker`` on a laptop give) and
yields a client to it; on Linux they die with the process that started them, even
one killed with SIGKILL.
:func:`on_array_api_strict` turns the blocks of an array into ``array_api_strict``
arrays on a device of their own, so a pipeline can be checked for NumPy-only calls and
host/device mixing without a GPU.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ._engine.runtime.faults import set_failure, set_freeze, set_kill, set_slowdown

__all__ = ["STRICT_DEVICE", "failing_worker", "freezing_worker", "killing_worker", "on_array_api_strict",
           "process_cluster", "straggler"]

#: The ``array_api_strict`` device :func:`on_array_api_strict` puts blocks on.
STRICT_DEVICE = "device1"


def _check(client, worker):
    from distributed import Client

    from .exceptions import ParameterError

    if not isinstance(client, Client):
        raise ParameterError(f"client must be a distributed.Client; got {type(client).__name__}")
    workers = client.run(lambda: None)
    if worker not in workers:
        raise ParameterError(f"worker {worker!r} is not in the cluster; workers: {sorted(workers)}")


@contextmanager
def straggler(client, worker, factor=1.0):
    """Make ``worker`` a straggler while the block runs.

    Every group computation on that worker (a synchronous step, a local round, an
    asynchronous step) sleeps ``factor`` times its own compute time afterwards, so
    ``factor=1`` makes the worker two times slower.  The worker's process is changed
    through ``client.run``; the slowdown is removed on exit.

    Parameters
    ----------
    client : distributed.Client
    worker : str
        Address of the worker to slow down (one of ``client.scheduler_info()["workers"]``).
    factor : float, default=1.0
        Sleep per computation, as a multiple of its compute time; > 0.

    Examples
    --------
    >>> with straggler(client, sorted(client.scheduler_info()["workers"])[-1]):  # doctest: +SKIP
    ...     model.fit(X, y)
    """
    from .exceptions import ParameterError

    if isinstance(factor, bool) or not (isinstance(factor, (int, float)) and factor > 0):
        raise ParameterError(f"factor must be a number > 0; got {factor!r}")
    _check(client, worker)
    client.run(set_slowdown, float(factor), workers=[worker])
    try:
        yield worker
    finally:
        client.run(set_slowdown, 0.0, workers=[worker])


@contextmanager
def failing_worker(client, worker, after=0, message="injected failure"):
    """Make group computations on ``worker`` raise ``RuntimeError(message)`` while the
    block runs, after the first ``after`` of them succeed.

    A group computation is a synchronous step, a local round or one asynchronous step
    of the group on that worker (setup tasks are not counted).

    Examples
    --------
    >>> with failing_worker(client, address, after=1):  # doctest: +SKIP
    ...     model.fit(X, y)  # raises RuntimeError: injected failure
    """
    from .exceptions import ParameterError

    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ParameterError(f"after must be an int >= 0; got {after!r}")
    _check(client, worker)
    client.run(set_failure, after, message, workers=[worker])
    try:
        yield worker
    finally:
        client.run(set_failure, None, "", workers=[worker])


@contextmanager
def killing_worker(client, worker, after=0):
    """Make the worker *process* at ``worker`` kill itself (SIGKILL, as a crash or the
    out-of-memory killer would) at its group computation number ``after + 1`` while
    the block runs; its nanny starts a fresh worker, without the fault.

    A group computation is a synchronous step, a local round or one asynchronous step
    of a group on that worker (setup tasks are not counted).  Only for clusters of
    worker processes (``LocalCluster(processes=True)``, ``dask worker``).

    Examples
    --------
    >>> with killing_worker(client, address, after=10):  # doctest: +SKIP
    ...     model.fit(X, y)  # the fit goes on without that worker
    """
    from .exceptions import ParameterError

    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ParameterError(f"after must be an int >= 0; got {after!r}")
    _check(client, worker)
    client.run(set_kill, after, workers=[worker])
    try:
        yield worker
    finally:
        # The worker is usually gone (its replacement has no fault): calling a gone
        # address would wait for the connect timeout (30 s by default).
        if worker in client.scheduler_info()["workers"]:
            try:
                client.run(set_kill, None, workers=[worker], on_error="ignore")
            except Exception:  # noqa: BLE001 - it may have left the cluster just now
                pass


def _host_and_pid():
    return socket.gethostname(), os.getpid()


@contextmanager
def freezing_worker(client, worker, after=0):
    """Make the worker *process* at ``worker`` stop itself (SIGSTOP, as a debugger, a
    suspended virtual machine or a swapped-out host would) at its group computation
    number ``after + 1`` while the block runs; yields the process id.

    A stopped process answers nothing, not even the scheduler's heartbeats, but its
    connections stay open: nothing fails, everything waits.  On exit the process, if it
    still exists, is continued (SIGCONT) and the fault removed.  A group computation
    is a synchronous step, a local round or one asynchronous step of a group on that
    worker (setup tasks are not counted).  Only for worker processes on this machine
    (``LocalCluster(processes=True)``, :func:`process_cluster`).

    Examples
    --------
    >>> with dask.config.set({"dgd.step-timeout": 5}):  # doctest: +SKIP
    ...     with freezing_worker(client, address, after=10):
    ...         model.fit(X, y)  # after 5 s the silent worker is dropped as lost
    """
    import psutil

    from .exceptions import ParameterError

    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ParameterError(f"after must be an int >= 0; got {after!r}")
    _check(client, worker)
    host, pid = client.run(_host_and_pid, workers=[worker])[worker]
    if host != socket.gethostname() or pid == os.getpid():
        where = "this process (a worker thread)" if pid == os.getpid() else f"host {host!r}"
        raise ParameterError(f"worker {worker!r} runs in {where}: freezing_worker needs a worker process on this "
                             "machine (LocalCluster(processes=True) or process_cluster)")
    process = psutil.Process(pid)  # knows its start time: never a later process with the same id
    client.run(set_freeze, after, workers=[worker])
    try:
        yield pid
    finally:
        try:
            if process.is_running():
                process.resume()
        except psutil.NoSuchProcess:
            pass
        if worker in client.scheduler_info()["workers"]:
            try:
                client.run(set_freeze, None, workers=[worker], on_error="ignore")
            except Exception:  # noqa: BLE001 - it may have left the cluster just now
                pass


#: Put in front of every command :func:`process_cluster` starts, on Linux: the process
#: asks the kernel for SIGKILL when the thread that started it ends (``prctl``
#: ``PR_SET_PDEATHSIG``, kept across ``exec``; where it is refused, e.g. by a seccomp
#: filter, the command runs without it), checks that its parent has not already gone,
#: and becomes the command.  Its own children (the workers a ``dask worker`` nanny
#: spawns) exit when their parent does (distributed watches for that).  A script, not a
#: ``preexec_fn``: that runs between fork and exec, unsafe in a process with threads.
_DIE_WITH_PARENT = """import ctypes, os, signal, sys
ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)
os.execv(sys.argv[2], sys.argv[2:])
"""


def _die_with_parent(command):
    """``command`` made to die with this process (Linux; elsewhere unchanged)."""
    if not sys.platform.startswith("linux"):
        return command
    return [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *command]


def _stop(procs, timeout=60):
    """Stop the processes of :func:`process_cluster`, newest first, each gone before the
    next is told: SIGTERM (a clean close), SIGKILL after ``timeout`` seconds; then
    SIGKILL whatever is left of each one's process group (its children).  (Workers
    whose scheduler has already gone keep trying to reach it until their nannies kill
    them, 8 s later.)"""
    for proc in procs[::-1]:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError, AttributeError):
            pass  # the group is empty (or no process groups here)


@contextmanager
def process_cluster(n_workers, *, log_dir=None, timeout=120):
    """A `dask scheduler` process and ``n_workers`` single-threaded `dask worker`
    processes (one ``dask worker --nworkers`` command, a nanny each) on loopback; yields
    a :class:`distributed.Client` to it (not the default client) and stops everything
    on exit.

    Each command runs in a process group of its own, and on exit whatever is left of
    the groups is killed.  On Linux the processes also die with the thread that
    entered the block, should it end without exiting the block (the process killed by
    SIGKILL, a crash): no scheduler or worker outlives it.

    The workers import the same ``dask_dgd`` as this process (its directory goes first
    on their ``PYTHONPATH``) and run with one BLAS thread.  ``log_dir``: a directory for
    ``scheduler.log`` and ``workers.log`` (default: discarded).  ``timeout``: seconds to
    wait for all workers.

    Examples
    --------
    >>> with process_cluster(8) as client:  # doctest: +SKIP
    ...     LogisticRegression(client=client).fit(X, y)
    """
    import tempfile

    from distributed import Client

    from ._engine.runtime.clusters import cluster_env
    from .exceptions import ParameterError

    if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
        raise ParameterError(f"n_workers must be an int >= 1; got {n_workers!r}")
    dask = shutil.which("dask", path=os.path.dirname(sys.executable)) or shutil.which("dask")
    if dask is None:
        raise RuntimeError("the `dask` command (from the distributed package) is not on PATH")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    here = str(Path(__file__).resolve().parents[1])
    # (cluster_env: the workers' profiler off where it can deadlock the interpreter)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           **cluster_env(), "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)}
    with tempfile.TemporaryDirectory(prefix="dgd-cluster-") as tmp:
        logs = Path(log_dir) if log_dir is not None else None

        def out(name):
            return open(logs / name, "w") if logs is not None else subprocess.DEVNULL

        def start(command, log):
            return subprocess.Popen(_die_with_parent(command), stdout=out(log), stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)

        procs = [start([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                       "scheduler.log")]
        client = None
        try:
            procs.append(start([dask, "worker", address, "--nthreads", "1", "--nworkers", str(n_workers),
                                "--no-dashboard", "--local-directory", tmp], "workers.log"))
            deadline = time.monotonic() + timeout
            while client is None:
                try:
                    client = Client(address, timeout="5s", set_as_default=False)
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.5)
            client.wait_for_workers(n_workers, timeout=timeout)
            yield client
        finally:
            if client is not None:
                client.close()
            _stop(procs)


def _strict_block(block, device):
    import array_api_strict as xps

    return xps.asarray(block, device=xps.Device(device))


def on_array_api_strict(x, device=STRICT_DEVICE):
    """``x`` with every block an ``array_api_strict`` array on ``device``.

    ``array_api_strict`` is the reference implementation of the Array API: it has no
    NumPy-only functions or methods, and refuses to mix arrays of different devices.
    Training or predicting on such blocks fails on any NumPy-only call and on any
    parameter that was not moved to the block's device, like CuPy would on a GPU.

    Parameters
    ----------
    x : numpy.ndarray or dask.array.Array
        A NumPy array is converted whole; a dask array block by block (lazily).  The
        dask array keeps a NumPy ``_meta`` (dask needs a NumPy dtype, as it has for
        CuPy-backed arrays).
    device : str, default="device1"
        Name of the ``array_api_strict`` device (``"CPU_DEVICE"``, ``"device1"`` or
        ``"device2"``).

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> X = on_array_api_strict(da.ones((4, 2), chunks=2))
    >>> type(X.blocks[0].compute()).__module__
    'array_api_strict._array_object'
    """
    import dask.array as da

    from .exceptions import ParameterError

    if isinstance(x, da.Array):
        return x.map_blocks(_strict_block, device, dtype=x.dtype, meta=x._meta)
    if isinstance(x, np.ndarray):
        return _strict_block(x, device)
    raise ParameterError(f"x must be a numpy.ndarray or a dask array; got {type(x).__name__}")
