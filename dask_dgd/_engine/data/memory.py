"""Will the data fit?  The up-front check of each worker's share against its memory limit.

A fit keeps all of its data in the workers' memory for its whole duration (every step
reads every shard), so the share of the worker that gets the most must fit below the
line where Dask stops or kills a worker.  The check runs before any data is scattered or
persisted; a fit that cannot fit is refused with :class:`~dask_dgd.exceptions.ClusterError`
naming the share, the worker's limit, the number of workers and the fix, instead of
workers paused, killed and restarted, and a raw ``MemoryError`` or ``KilledWorker``
minutes later.

The estimates are of what the fit will certainly hold (its shards: X, y and weights as
the blocks hold them after the float conversion, see :func:`.blocks.make_shard`; the
raw blocks next to them while they are converted; a matrix factorization's rating
shards and input partitions).  The Python process itself and each step's temporaries
come on top, so passing the check does not promise success, but a refused fit could
not have run.

Skipped (documented in :func:`dask_fit_bytes`, :func:`in_memory_shares`): workers
without a memory limit, inputs whose size is unknown before they are computed (dask
arrays with unknown row chunks, such as a dask DataFrame's, and sparse dask arrays,
whose non-zeros are unknown), and arrays that live on a device (CuPy), whose memory is
not the worker's.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

import dask
import numpy as np
import scipy.sparse as sp

from ...exceptions import ClusterError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import dask.array as da
    import numpy.typing as npt
    from distributed import Client, Scheduler

__all__ = [
    "check_block_bytes",
    "check_worker_shares",
    "dask_fit_bytes",
    "format_bytes",
    "in_memory_shares",
    "memory_line",
    "held_factor",
    "worker_baselines",
    "worker_memory_limits",
]

_KEY = "distributed.worker.memory."


def memory_line() -> tuple[float, str | None]:
    """The fraction of a worker's memory limit that a fit's data must stay below, and
    the Dask config key (``distributed.worker.memory.<key>``) that sets it.

    Dask manages a worker's memory with four fractions of its limit: ``target`` (0.6)
    and ``spill`` (0.7) move data to disk, which slows a fit (its shards are read every
    step) but does not stop it; ``pause`` (0.8) stops the worker from starting tasks,
    and a worker held above it by a fit's own data never runs that fit's next step;
    ``terminate`` (0.95) makes the nanny kill and restart it (the fit then ends in
    ``KilledWorker``).  So the line is the lower of ``pause`` and ``terminate``, those
    not disabled (``False``); with both disabled, the limit itself (the memory the
    worker was given).  The fractions are read from this process's Dask config, which
    the workers share unless they are configured otherwise.
    """
    lines = []
    for key in ("pause", "terminate"):
        value = dask.config.get(_KEY + key, False)
        if value is not None and value is not False:
            lines.append((float(value), key))
    return min(lines) if lines else (1.0, None)


def format_bytes(n: float) -> str:
    """``n`` bytes in MiB, or GiB from 1 GiB, with one decimal."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


# (run on the scheduler: Client.run_on_scheduler always fills in ``dask_scheduler``)
def _memory_limits(dask_scheduler: Scheduler = None) -> dict[str, int]:  # type: ignore[assignment]
    return {addr: ws.memory_limit or 0 for addr, ws in dask_scheduler.workers.items()}


def worker_memory_limits(client: Client) -> dict[str, int]:
    """Each worker's memory limit in bytes (0: none), asked of the scheduler itself (the
    client's cached ``scheduler_info()`` can lack the per-worker entries)."""
    return client.run_on_scheduler(_memory_limits)


def _baselines(dask_scheduler: Scheduler = None,  # type: ignore[assignment]  # (run_on_scheduler's)
               pid: int | None = None) -> dict[str, int]:
    """Each worker's memory outside Dask's data (Python, libraries, caches): the
    process memory the scheduler last heard of less the data the worker holds in
    memory; 0 for a worker that runs in the process ``pid`` (an in-process worker shares
    its process, and so its memory, with the caller)."""
    return {
        addr: 0 if ws.pid == pid else int(max(0, ws.memory.unmanaged))
        for addr, ws in dask_scheduler.workers.items()
    }


def worker_baselines(client: Client) -> dict[str, int]:
    """Each worker's memory outside Dask's data, in bytes (see :func:`_baselines`).

    A worker process holds its interpreter and libraries before any data: a few hundred
    MiB, which on a worker with a small memory limit is much of the room below Dask's
    line.  The check counts it next to the fit's share."""
    return client.run_on_scheduler(_baselines, pid=os.getpid())


def _line_text(limit: float, fraction: float, key: str | None) -> str:
    if key is None:
        return f"it cannot hold more than that ({format_bytes(limit)})"
    verb = "pauses a worker" if key == "pause" else "kills a worker (the nanny)"
    return f"Dask {verb} at {fraction:.0%} of it ({format_bytes(fraction * limit)}, {_KEY}{key})"


def check_worker_shares(client: Client, shares: Mapping[str, float], *, held: str, spread: str, even: bool = False,
                        limits: Mapping[str, int] | None = None, baselines: Mapping[str, int] | None = None) -> None:
    """Refuse a fit whose share on some worker exceeds that worker's memory line.

    Parameters
    ----------
    client : distributed.Client
    shares : dict
        Worker address -> the bytes of this fit's data it will hold.
    held : str
        What the bytes are, for the message ("X and y as the fit holds them, float64").
    spread : str
        How the data is split over the workers, which says why more workers help.
    even : bool
        The shares are the total spread evenly (an estimate: the exact placement is
        decided later); the message then says "each of the N workers ... about".
    limits : dict or None
        Worker address -> memory limit (0: none); None asks the scheduler.
    baselines : dict or None
        Worker address -> the bytes the worker process uses outside Dask's data (see
        :func:`worker_baselines`), counted next to its share; None asks the scheduler.

    Raises
    ------
    ClusterError
        With the share, the limit, the line Dask draws, the number of workers and the
        fix: how many such workers, or how much memory per worker, would do.
    """
    limits = worker_memory_limits(client) if limits is None else limits
    fraction, key = memory_line()
    if not any(limits.get(w) for w in shares):
        return  # no worker has a limit: nothing to ask the scheduler
    baselines = worker_baselines(client) if baselines is None else baselines
    over = [
        (b + baselines.get(w, 0) - fraction * limits[w], w, b, limits[w], baselines.get(w, 0))
        for w, b in shares.items()
        if limits.get(w) and b + baselines.get(w, 0) > fraction * limits[w]
    ]
    if not over:
        return
    _, worker, share, limit, base = max(over, key=lambda t: t[0])
    total, n = sum(shares.values()), len(shares)
    room = fraction * limit - base
    needed = math.ceil(total / room) if room > 0 else None
    if even:
        who = (f"each of the {n} workers would hold about {format_bytes(share)} of this fit's data ({held}; "
               f"{format_bytes(total)} in all)")
        limit_text = f"a worker's memory limit is {format_bytes(limit)}"
        if len({limits.get(w) for w in shares}) > 1:
            limit_text = f"the smallest worker memory limit is {format_bytes(limit)}"
    else:
        who = (f"worker {worker} would hold {format_bytes(share)} of this fit's data ({held}; "
               f"{format_bytes(total)} in all over {n} workers)")
        limit_text = f"its memory limit is {format_bytes(limit)}"
    if base:
        limit_text += (f", {format_bytes(base)} of which the worker process already uses outside Dask's data "
                       "(Python, libraries)")
    more = (f"use at least {needed} workers with this memory limit, or " if needed else
            "more workers with this memory limit do not help: ")
    raise ClusterError(
        f"the data do not fit in the workers' memory: {who}, but {limit_text} and "
        f"{_line_text(limit, fraction, key)}; {more}"
        f"workers with a memory limit of at least {format_bytes((share + base) / fraction)}; {spread}"
    )


def check_block_bytes(client: Client, block_bytes: Sequence[int], row_bytes: int, n_rows: int, *, name: str = "X",
                      limits: Mapping[str, int] | None = None) -> None:
    """Refuse a block of dask input larger than the memory line of the largest worker:
    a block is never split across workers (rebalancing splits it only once it is in
    memory), so more workers do not help; smaller row blocks do."""
    limits = worker_memory_limits(client) if limits is None else limits
    if not block_bytes or not all(limits.values()):
        return  # some worker has no limit: the block may go there
    fraction, key = memory_line()
    largest = max(limits.values())
    b = int(np.argmax(block_bytes))
    if block_bytes[b] <= fraction * largest:
        return
    rows = max(1, min(math.ceil(n_rows / len(limits)), int(fraction * largest / (2 * row_bytes))))
    raise ClusterError(
        f"block {b} of {name} holds {format_bytes(block_bytes[b])} (with its rows of the targets and weights, "
        f"as the fit holds them), more than any worker can hold: the largest worker memory limit is "
        f"{format_bytes(largest)} and {_line_text(largest, fraction, key)}; a block is never split "
        f"across workers, so rechunk {name} into smaller row blocks, e.g. {name}.rechunk({{0: {rows}}})"
    )


def held_factor(dtype: npt.DTypeLike, as_fit: bool = True) -> float:
    """Bytes a fit holds per byte of a raw block of ``dtype``: the block as
    :func:`.blocks.make_shard` holds it (float64, float32 kept) plus, when the dtype
    changes, the raw block next to it while it is cast; 1 for the raw blocks."""
    dtype = np.dtype(dtype)
    if not as_fit or dtype in (np.float32, np.float64):
        return 1.0
    return _held_itemsize(dtype) / dtype.itemsize + 1.0


def _held_itemsize(dtype: npt.DTypeLike) -> int:
    """Bytes per value of a block as the fit holds it (:func:`.blocks._as_float`):
    float32 stays float32, everything else becomes float64."""
    return 4 if np.dtype(dtype) == np.float32 else 8


def _dtype_of(a: Any) -> np.dtype[Any]:
    dtype = getattr(a, "dtype", None)  # (a dtype is falsy: it has no fields)
    return np.dtype(np.float64 if dtype is None else dtype)


def _row_bytes_1d(a: Any, held: int | None, as_fit: bool) -> int:
    """Bytes per row of a target or weight column: as the fit holds it (``held``:
    bytes per value, or None when kept as is), plus the raw column while it is cast."""
    if a is None:
        return 0
    dtype = _dtype_of(a)
    if not as_fit or held is None:
        return dtype.itemsize
    return held + (dtype.itemsize if dtype != (np.float32 if held == 4 else np.float64) else 0)


def dask_fit_bytes(X: da.Array, y: Any, sample_weight: Any, *, as_fit: bool = True,
                   y_numeric: bool = True) -> tuple[list[int], int] | None:
    """Bytes held for each row block of dask ``X`` (with its rows of y and weights),
    and per row; None when they cannot be known without computing the data.

    ``as_fit``: the blocks as :func:`.blocks.make_shard` holds them (float64, or
    float32 for float32 X, y and weights cast to X's dtype) plus the raw blocks while
    they are cast (a copy only when the dtype changes); else the raw blocks.
    ``sample_weight`` may be a number (a float64 column per block).

    None (no check) when: X's row chunks are unknown (a dask DataFrame's partitions
    have no known lengths until they are read, and estimating them would mean reading
    them); its columns are unknown; its blocks are sparse (their non-zeros are unknown,
    and the dense shape would overstate them many times); its blocks are not NumPy
    (CuPy blocks live in device memory, which the worker's memory limit does not cover).
    """
    rows = X.chunks[0]
    if any(math.isnan(c) for c in rows) or math.isnan(X.shape[1]) or type(X._meta) is not np.ndarray:
        return None
    x_raw = X.dtype.itemsize
    if as_fit:
        x_held = _held_itemsize(X.dtype)
        x_row = X.shape[1] * (x_held + (x_raw if X.dtype not in (np.float32, np.float64) else 0))
    else:
        x_held, x_row = None, X.shape[1] * x_raw
    weight = sample_weight
    if sample_weight is not None and np.ndim(sample_weight) == 0:
        weight = np.empty(0)  # a float64 column
    row = x_row + _row_bytes_1d(y, x_held if y_numeric else None, as_fit) + _row_bytes_1d(weight, x_held, as_fit)
    return [int(r) * row for r in rows], row


def in_memory_shares(X: Any, y: Any, sample_weight: Any, bounds: Sequence[tuple[int | np.integer, int | np.integer]],
                     workers: Sequence[str], *, y_numeric: bool = True) -> dict[str, int] | None:
    """Bytes each worker will hold when in-memory input is cut at ``bounds`` and piece
    ``i`` goes to ``workers[i % len(workers)]`` (as :func:`.blocks.make_shard` holds
    it); None for input other than NumPy or CSR (nothing to measure on the host)."""
    dense = isinstance(X, np.ndarray)
    if not (dense or (sp.issparse(X) and X.format == "csr")):
        return None
    held = _held_itemsize(X.dtype)
    # dense X: y and weights cast to X's dtype; sparse X: each to float64 or float32
    y_held = held if dense else _held_itemsize(_dtype_of(y))
    w_held = held if dense else _held_itemsize(_dtype_of(sample_weight))
    y_row = y_held if y_numeric else _dtype_of(y).itemsize
    shares: dict[str, int] = {}
    for i, (a, b) in enumerate(bounds):
        n = int(b - a)
        if dense:
            x = n * X.shape[1] * held
        else:
            nnz = int(X.indptr[b] - X.indptr[a])
            x = nnz * (held + X.indices.itemsize) + (n + 1) * X.indptr.itemsize
        w = workers[i % len(workers)]
        shares[w] = shares.get(w, 0) + x + n * (y_row + (0 if sample_weight is None else w_held))
    return shares
