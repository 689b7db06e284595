"""The driver's BLAS threads while the workers compute on the same machine.

On a cluster the driver's own arithmetic between two steps is vector work of the
parameters' length: L-BFGS's two-loop recursion and line search, the update rule, the
records' norms.  Such level-1 BLAS calls (dot products, matrix-vector products with
one column) are bound by memory, not by cores: one thread does a dot product of 2**20
floats in about 0.2 ms.  A threaded BLAS (OpenBLAS, MKL) splits them over its threads
all the same, and afterwards those threads keep spinning for a while, waiting for more
work: on a machine whose cores the cluster's workers also use (a ``LocalCluster``)
they take cores from the workers while the driver waits for the step, and every call
waits for threads the workers have descheduled.  Measured on 2 cores with 2 workers
(2**20 + 1 parameters, 10 pairs): a two-loop recursion of 220-350 ms with OpenBLAS's
2 threads, 40-55 ms with one.

:func:`driver_blas` therefore limits the driver process's BLAS to one thread for the
fit, when the executor is a Dask cluster with a worker on this machine (the workers
then compute every gradient; the driver only combines vectors).  A fit in process
keeps its threads: its blocks are computed by the driver itself.

A threaded BLAS sums a long dot product in one partial sum per thread; with one thread
it is one sum, so results on a machine whose BLAS had several threads may differ from
before in the last bits (they already differed between machines of different thread
counts; vectors shorter than OpenBLAS's threading threshold, 10,000 entries, are
unchanged).
"""

from __future__ import annotations

import contextlib
import functools
import socket
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

__all__ = ["driver_blas", "workers_share_machine"]

_LOOPBACK = ("127.", "localhost", "::1", "[::1]")
_LOCK = threading.Lock()
_LIMITER: Any = None  # (the limits of the fits running now, restored by the last to end)
_DEPTH = 0


@functools.cache
def _own_hosts() -> frozenset[str]:
    """This machine's names and addresses (as far as the resolver knows them)."""
    names = {socket.gethostname(), socket.getfqdn()}
    hosts = set(names)
    for name in names:
        with contextlib.suppress(OSError):
            hosts.update(str(info[4][0]) for info in socket.getaddrinfo(name, None))
    return frozenset(hosts)


def workers_share_machine(addresses: Iterable[str | None]) -> bool:
    """Whether any of the workers ``addresses`` (``"tcp://host:port"``) is another
    process on this machine (``"inproc://..."`` workers run in this process: their BLAS
    calls are the fit's compute, left as they are)."""
    from distributed.comm.addressing import get_address_host, parse_address

    for address in addresses:
        if not address:
            continue
        try:
            scheme, _ = parse_address(address)
            if scheme == "inproc":  # (in this process: its BLAS is the workers' own too)
                continue
            host = get_address_host(address)
        except ValueError:
            continue
        if host.startswith(_LOOPBACK) or host in _own_hosts():
            return True
    return False


@contextlib.contextmanager
def driver_blas(executor_kind: str, workers: Iterable[str | None]) -> Iterator[None]:
    """Within the block, the driver's BLAS uses one thread when ``executor_kind`` is
    ``"dask"`` and a worker of ``workers`` is on this machine (module docstring);
    otherwise nothing changes.  The previous limits are restored on exit."""
    if executor_kind != "dask" or not workers_share_machine(workers):
        yield
        return
    global _LIMITER, _DEPTH
    with _LOCK:  # fits side by side in threads: the first limits, the last restores
        if _DEPTH == 0:
            from threadpoolctl import threadpool_limits

            # (it finds the loaded libraries anew, a few ms a fit: one loaded since, e.g.
            # SciPy's own OpenBLAS, is limited too)
            _LIMITER = threadpool_limits(limits=1, user_api="blas")
        _DEPTH += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0 and _LIMITER is not None:
                _LIMITER.restore_original_limits()
                _LIMITER = None
