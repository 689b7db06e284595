"""Input to shards: persisted, measured, balanced and validated blocks.

In process, the whole in-memory input is one shard of one block.  On a cluster, an
in-memory input is cut into one block per worker and scattered; a dask input keeps its
chunks as blocks, which are persisted, measured and (``rebalance``, see :mod:`.skew`)
rechunked and placed, each worker's blocks assembled into its shard there
(:func:`~.blocks.make_shard`).  Before any of that, the input is checked to fit in the
workers' memory (:mod:`.memory`).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import dask.array as da
import numpy as np
from distributed import Client, KilledWorker, futures_of, wait

from ..._backend import is_sparse
from ..._frames import numeric_frame
from ...exceptions import ClusterError, InputError, ParameterError
from ..runtime.executor import DaskExecutor, InProcessExecutor, _nbytes, current_client, is_dask_collection
from . import skew
from .blocks import check_chunking, make_shard
from .memory import (
    check_block_bytes,
    check_worker_shares,
    dask_fit_bytes,
    format_bytes,
    held_factor,
    in_memory_shares,
    worker_memory_limits,
)
from .shards import ShardSet
from .skew import balanced_chunks, even_blocks, groups_by_worker, place_blocks

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import TypeAlias, TypeVar

    import dask.dataframe as dd
    import numpy.typing as npt
    from distributed import Future

    from .blocks import Shard

    T = TypeVar("T")
    #: The block futures of X, y and sample weights (None where there is no such input).
    BlockFutures: TypeAlias = "tuple[Sequence[Future], Sequence[Future | None], Sequence[Future | None]]"

__all__ = ["build_shardset", "in_process_shardset", "rebalance"]


def in_process_shardset(X: Any, y: Any, sample_weight: Any, y_numeric: bool = True) -> ShardSet:
    """One shard holding the whole in-memory input as a single block."""
    shard = make_shard(0, [X], [y], [sample_weight], y_numeric=y_numeric)
    # (the ignores on ShardSet(...) below: block rows given as a list, which ShardSet makes an array)
    return ShardSet(InProcessExecutor(), [shard], [(0,)], [None], [X.shape[0]],  # type: ignore[arg-type]
                    X.shape[1], is_sparse(X))


def _futures_in_order(arr: da.Array) -> list[Future]:
    """The futures of a persisted array, in row-block order."""
    by_key = {f.key: f for f in futures_of(arr)}
    keys = [k[0] if arr.ndim == 2 else k for k in arr.__dask_keys__()]  # type: ignore[index]  # (2-D: a list a row)
    return [by_key[k] for k in keys]


def _nrows(x: Any) -> int:
    return x.shape[0]


def _with_known_rows(client: Client, arr: da.Array) -> da.Array:
    """``arr`` persisted on the cluster, its row-chunk sizes computed there if unknown."""
    arr = client.persist(arr)
    if not any(np.isnan(c) for c in arr.chunks[0]):
        return arr
    futures = _futures_in_order(arr)
    rows = client.gather([client.submit(_nrows, f, pure=False) for f in futures])
    return da.Array(arr.dask, arr.name, chunks=(tuple(rows),) + arr.chunks[1:], meta=arr._meta)


def _full_rows(block: Any, value: float) -> npt.NDArray[np.float64]:
    """A constant weight per row of ``block`` (given as the list of its single column
    chunk), on the host: ``make_shard`` moves it next to a device ``X``."""
    if isinstance(block, list):
        (block,) = block
    return np.full(block.shape[0], value, dtype=np.float64)


def _known(chunks: Iterable[float]) -> bool:
    return not any(np.isnan(c) for c in chunks)


def _to_dask_arrays(client: Client, X: Any, y: Any, sample_weight: Any, workers: Sequence[str], *, as_fit: bool,
                    y_numeric: bool) -> tuple[da.Array, da.Array | None, da.Array | None, bool | None]:
    """Dask arrays for X, y, weights with matching row blocks (computed on ``client``),
    once :func:`_check_dask_fits` has found that they fit in the workers' memory."""
    import dask.dataframe as dd

    if isinstance(X, dd.DataFrame):
        X = numeric_frame(X).to_dask_array()
        # A frame's values are column-major (pandas keeps columns together): made
        # row-major in the same task, so the persisted block is the one the shard holds
        # (make_shard's copy of every block, next to the originals, doubled the memory).
        X = X.map_blocks(np.ascontiguousarray, dtype=X.dtype)
    if isinstance(y, (dd.Series, dd.DataFrame)):
        y = y.to_dask_array()
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
    if isinstance(sample_weight, dd.Series):
        sample_weight = sample_weight.to_dask_array()
    if not isinstance(X, da.Array):
        X = da.asarray(X)
    check_chunking(X)
    if X.dtype.kind not in "biuf":
        raise InputError(
            f"X must be numeric; got dtype {X.dtype}; encode non-numeric features first"
        )
    if sample_weight is not None and np.ndim(sample_weight) == 0:
        # no concatenation of X's blocks (dask knows how only for NumPy-like ones)
        sample_weight = da.blockwise(
            _full_rows, "i", X, "ij", float(sample_weight), None, concatenate=False,
            align_arrays=False, meta=np.empty((0,), dtype=np.float64),
        )
    checked = _check_dask_fits(client, workers, X, y, sample_weight, as_fit=as_fit, y_numeric=y_numeric)
    arrays = [y, sample_weight]
    for i, a in enumerate(arrays):
        if a is None:
            continue
        name = "y" if i == 0 else "sample_weight"
        if isinstance(a, da.Array) and a.numblocks[0] == X.numblocks[0]:
            if not (_known(a.chunks[0]) and _known(X.chunks[0])):
                continue  # lengths are checked block by block in make_shard
            if a.chunks[0] == X.chunks[0]:
                continue
        X = _with_known_rows(client, X)
        if isinstance(a, da.Array):
            a = _with_known_rows(client, a)
        else:
            a = np.asarray(a)
        if a.shape[0] != X.shape[0]:
            raise InputError(
                f"X and {name} have different lengths: {X.shape[0]} and {a.shape[0]}"
            )
        if isinstance(a, da.Array):
            arrays[i] = a.rechunk({0: X.chunks[0]})
        else:
            arrays[i] = da.from_array(a, chunks=(X.chunks[0],) + a.shape[1:])
    return X, arrays[0], arrays[1], checked


def _check_dask_fits(client: Client, workers: Sequence[str], X: da.Array, y: Any, sample_weight: Any, *,
                     as_fit: bool, y_numeric: bool) -> bool | None:
    """Refuse dask input whose share per worker, or whose largest block, exceeds the
    workers' memory (see :mod:`.memory`), before anything is computed or persisted.

    The share is the total spread evenly over the workers: what the balanced placement
    (:mod:`.skew`) aims at, and a lower bound of the largest share whatever the
    placement.  Unknown sizes (see :func:`.memory.dask_fit_bytes`) are not checked."""
    sizes = dask_fit_bytes(X, y, sample_weight, as_fit=as_fit, y_numeric=y_numeric)
    if sizes is None:
        return None
    blocks, row = sizes
    limits = worker_memory_limits(client)
    given = ["X"] + [n for n, a in (("y", y), ("sample_weight", sample_weight)) if a is not None]
    held = _held_text(X, given, as_fit)
    total = sum(blocks)
    check_worker_shares(
        client, {w: total / len(workers) for w in workers}, held=held, even=True, limits=limits,
        spread="smaller chunks do not help: a fit keeps all of its data in the workers' memory at once, "
        "so only more workers (or more memory per worker) make each worker's share smaller",
    )
    check_block_bytes(client, blocks, row, X.shape[0], limits=limits)
    return True


def _held_text(X: da.Array, given: Sequence[str], as_fit: bool) -> str:
    names = given[0] if len(given) == 1 else f"{', '.join(given[:-1])} and {given[-1]}"
    if not as_fit:
        return f"{names} as they are, {X.dtype}"
    held = f"{names} as the fit holds them, {'float32' if X.dtype == np.float32 else 'float64'}"
    if X.dtype not in (np.float32, np.float64):
        held += f", next to the {X.dtype} blocks while they are cast"
    return held


def _check_persisted_fits(client: Client, workers: Sequence[str], arrays: Sequence[da.Array], y: Any,
                          sample_weight: Any, *, as_fit: bool) -> None:
    """The memory check of input whose size was unknown before it was computed (a dask
    DataFrame's partitions, sparse blocks): once its blocks are persisted, their sizes
    are known to the scheduler (no task runs, so a paused worker cannot stall it), and
    the shards must fit next to the workers' own memory as in :func:`_check_dask_fits`.
    The blocks are still there: they are released when the refusal propagates.  Blocks
    that failed (their error surfaces in :func:`.blocks.make_shard`) count nothing.
    """
    X = arrays[0]
    if type(X._meta) is not np.ndarray and not is_sparse(X._meta):
        return  # device blocks: not the worker's memory
    sizes = client.nbytes([f.key for a in arrays for f in _futures_in_order(a)], summary=False)
    total = 0.0
    for a in arrays:
        factor = held_factor(a.dtype, as_fit) if a is X else 1.0
        total += factor * sum(int(sizes.get(f.key, 0)) for f in _futures_in_order(a))
    given = ["X"] + [n for n, a in (("y", y), ("sample_weight", sample_weight)) if a is not None]
    check_worker_shares(
        client, {w: total / len(workers) for w in workers}, even=True,
        held=_held_text(X, given, as_fit) + ", measured once computed",
        spread="smaller partitions do not help: a fit keeps all of its data in the workers' memory at once, "
        "so only more workers (or more memory per worker) make each worker's share smaller",
    )


def _block_nnz(x: Any) -> int:
    return int(x.nnz) if is_sparse(x) else int(x.shape[0] * (x.shape[1] if x.ndim > 1 else 1))


def _block_size(x: Any) -> tuple[int, int]:
    return _block_nnz(x), _nbytes(x)


def _known_chunks(arr: da.Array, rows: Sequence[int]) -> da.Array:
    return da.Array(arr.dask, arr.name, chunks=(tuple(rows),) + arr.chunks[1:], meta=arr._meta)


def _measure_blocks(client: Client, arrays: Sequence[da.Array], xf: Sequence[Future], yf: Sequence[Future | None],
                    sf: Sequence[Future | None]) -> tuple[list[int], list[int]]:
    """Non-zeros (dense: rows x columns) and bytes of every block.

    Dense blocks (rows known) are measured from their shapes and dtypes, with no task.
    Sparse blocks are measured where they are: each task reads one block, so Dask runs
    it on a worker holding that block.  (A task reading a block of X and one of y would
    copy one of them when the two lie on different workers; a block of X held twice may
    then fall in another group in the next fit, and the online solver averages one
    model per group.)"""
    X = arrays[0]
    if not is_sparse(X._meta):
        width = [int(np.prod(a.shape[1:])) for a in arrays]
        rows = [int(r) for r in X.chunks[0]]
        return ([r * width[0] for r in rows],
                [r * sum(w * a.dtype.itemsize for w, a in zip(width, arrays)) for r in rows])
    held = [(b, f) for fs in (yf, sf) for b, f in enumerate(fs) if f is not None]
    sizes, others = client.gather([[client.submit(_block_size, f, pure=False) for f in xf],
                                   [client.submit(_nbytes, f, pure=False) for _, f in held]])
    nnz = [z for z, _ in sizes]
    nbytes = [n for _, n in sizes]
    for (b, _), n in zip(held, others):
        nbytes[b] += n
    return nnz, nbytes


def _balanced_blocks(client: Client, X: Any, y: Any, sample_weight: Any, workers: Sequence[str],
                     rebalance: bool | str, passes: int, *, as_fit: bool = False, y_numeric: bool = True,
                     ) -> tuple[list[da.Array], BlockFutures, list[int], list[int], list[str], dict[str, Any]]:
    """Persist the inputs, measure their blocks and rebalance them (see :mod:`.skew`).

    First they are checked to fit in the workers' memory (``as_fit``: as a fit's shards
    will hold them, see :func:`_check_dask_fits`; else as they are).

    Returns the persisted arrays (known chunks), the block futures of X, y and weights,
    rows and costs per block, the chosen placement and the skew report.
    """
    X, y, sample_weight, checked = _to_dask_arrays(
        client, X, y, sample_weight, workers, as_fit=as_fit, y_numeric=y_numeric)
    sparse = is_sparse(X._meta)
    # One persist for all: X and y often share tasks (a DataFrame, a filter mask).
    arrays = client.persist([a for a in (X, y, sample_weight) if a is not None])
    xf = _futures_in_order(arrays[0])
    with current_client(client):  # placement follows where the blocks are; errors
        wait([f for a in arrays for f in _futures_in_order(a)])  # surface in make_shard
    if not checked:
        _check_persisted_fits(client, workers, arrays, y, sample_weight, as_fit=as_fit)
    if any(np.isnan(c) for c in arrays[0].chunks[0]):
        rows = client.gather([client.submit(_nrows, f, pure=False) for f in xf])
    else:
        rows = [int(c) for c in arrays[0].chunks[0]]
    arrays = [_known_chunks(a, rows) for a in arrays]

    def measured(arrays: Sequence[da.Array]) -> tuple[BlockFutures, list[int], list[int], list[tuple[str, ...]]]:
        fs = [_futures_in_order(a) for a in arrays]
        futures: BlockFutures = (fs[0], fs[1] if len(fs) > 1 else [None] * len(fs[0]),
                                 fs[2] if len(fs) > 2 else [None] * len(fs[0]))
        sizes, nbytes = _measure_blocks(client, arrays, *futures)
        # a step's cost: non-zeros (+ one per row) for sparse blocks, rows x columns for dense
        costs = [z + r if sparse else z for z, r in zip(sizes, arrays[0].chunks[0])]
        who = client.who_has(futures[0])
        holders = [tuple(who.get(f.key, ())) for f in futures[0]]
        return futures, costs, nbytes, holders

    futures, costs, nbytes, holders = measured(arrays)
    placement: list[str]  # (None only for "rechunk", whose blocks are placed below)
    action, placement, info = skew.plan(  # type: ignore[assignment]
        rows, costs, nbytes, holders, workers, rebalance=rebalance, passes=passes
    )
    if action == "rechunk":
        chunks = balanced_chunks(rows, costs, skew.n_balanced_blocks(rows, costs, len(workers)))
        arrays = client.persist([a.rechunk({0: chunks}) for a in arrays])
        with current_client(client):
            wait(_futures_in_order(arrays[0]))
        rows = list(chunks)
        futures, costs, nbytes, holders = measured(arrays)
        placement = place_blocks(costs, holders, workers)
    moved = [b for b, w in enumerate(placement) if w not in holders[b]]
    report = skew.report(
        info, costs, placement, workers, "rechunked" if action == "rechunk" else action,
        len(moved), sum(nbytes[b] for b in moved), "non-zeros + rows" if sparse else "rows x columns",
    )
    return arrays, futures, rows, costs, placement, report


def build_shardset(executor: InProcessExecutor | DaskExecutor, X: Any, y: Any, sample_weight: Any, *,
                   y_numeric: bool = True, rebalance: bool | str = "auto", passes: int = 1) -> ShardSet:
    """Turn the input into a :class:`ShardSet` for ``executor``.

    In process: one shard, one block.  On a cluster, once the input is found to fit in
    the workers' memory (see :mod:`.memory`: refused with ``ClusterError`` otherwise,
    before any transfer): an in-memory input is cut into one block per worker and
    scattered; a dask input keeps its chunks as blocks, which are
    persisted, measured and (``rebalance``, see :mod:`.skew`) rechunked and placed,
    each worker's blocks assembled into its shard there.  ``passes`` is the fit's
    ``max_iter``: the horizon over which ``rebalance="auto"`` weighs moving data.
    """
    if isinstance(executor, InProcessExecutor):
        return in_process_shardset(X, y, sample_weight, y_numeric=y_numeric)
    client = executor.client
    workers = executor.workers()
    n_groups = len(workers)  # one group per worker
    if not is_dask_collection(X) and not is_dask_collection(y):
        return _scatter_shardset(executor, X, y, sample_weight, workers, n_groups, y_numeric)
    try:
        return _dask_shardset(executor, client, workers, X, y, sample_weight, y_numeric, rebalance, passes)
    except KilledWorker as err:  # a task of the input, or a shard, on workers that died
        raise ClusterError(killed_while_loading(client, err)) from err


def _dask_shardset(executor: DaskExecutor, client: Client, workers: Sequence[str], X: Any, y: Any,
                   sample_weight: Any, y_numeric: bool, rebalance: bool | str, passes: int) -> ShardSet:
    arrays, (xf, yf, sf), rows, costs, placement, report = _balanced_blocks(
        client, X, y, sample_weight, workers, rebalance, passes, as_fit=True, y_numeric=y_numeric
    )
    X = arrays[0]
    sparse = is_sparse(X._meta)
    groups, owners = groups_by_worker(placement, workers)
    token = uuid.uuid4().hex[:8]
    handles = [
        client.submit(
            make_shard,
            g,
            [xf[b] for b in g],
            [yf[b] for b in g],
            [sf[b] for b in g],
            y_numeric,
            key=f"dgd-shard-{token}-{i}",
            workers=[w],
            allow_other_workers=True,
            pure=False,
        )
        for i, (g, w) in enumerate(zip(groups, owners))
    ]
    for h in handles:  # wait; re-raise the first validation error, its block named
        if h.exception() is not None:
            h.result()
    # Record where each shard really is (its worker may have been busy or gone).
    who = client.who_has(handles)
    owners = [
        w if w in who.get(h.key, ()) else (tuple(who.get(h.key, ())) or (w,))[0]
        for h, w in zip(handles, owners)
    ]
    return ShardSet(executor, handles, groups, owners, rows, X.shape[1], sparse,  # type: ignore[arg-type]  # (rows: a list)
                    block_costs=np.asarray(costs, dtype=np.float64), skew_report=report)


def _memory_kills(client: Client) -> list[dict[str, Any]]:
    """The workers a nanny restarted for exceeding its memory budget: the events
    ``worker-restart-memory`` that nannies send the scheduler (they outlive the workers
    they restart); empty where none was sent or they cannot be read."""
    try:
        events = client.get_events("worker-restart-memory")
    except Exception:  # noqa: BLE001 - any failure means: not known
        return []
    return [e for _, e in events if isinstance(e, dict)]


def killed_while_loading(client: Client, err: KilledWorker) -> str:
    """The message of a :class:`distributed.KilledWorker` raised while the input was
    read or assembled into shards: the workers that ran a task died, and Dask gave up on
    it.  The nannies' events say whether memory killed them; the remedy follows."""
    kills = _memory_kills(client)
    limit = getattr(getattr(err, "last_worker", None), "memory_limit", 0)
    limit = f" (memory limit {format_bytes(limit)} per worker)" if limit else ""
    if kills:
        rss = max(int(e.get("rss", 0)) for e in kills)
        cause = (f"their nannies restarted workers {len(kills)} time(s) for exceeding their memory budget "
                 f"(distributed.worker.memory.terminate; up to {format_bytes(rss)} used){limit}: the input, as "
                 "read, does not fit")
    else:
        cause = f"the workers' logs say why (most often a nanny kills a worker that exceeds its memory limit{limit})"
    return (f"workers died while reading the input or building the fit's shards ({err}); {cause}; give the "
            "workers more memory or use more workers, or read the input in smaller partitions")


def _scatter_shardset(executor: DaskExecutor, X: Any, y: Any, sample_weight: Any, workers: Sequence[str],
                      n_groups: int, y_numeric: bool) -> ShardSet:
    client = executor.client
    bounds = even_blocks(X.shape[0], n_groups)
    shares = in_memory_shares(X, y, sample_weight, bounds, workers, y_numeric=y_numeric)
    if shares is not None:  # before any piece is made or scattered
        check_worker_shares(
            client, {**dict.fromkeys(workers, 0), **shares},
            held=f"its piece of {'X and y' if sample_weight is None else 'X, y and sample_weight'} as the fit "
            f"holds them, {'float32' if X.dtype == np.float32 else 'float64'}",
            spread="in-memory data is cut into one piece per worker, so more workers make every piece smaller",
        )
    handles, groups, placement, rows = [], [], [], []
    for i, (a, b) in enumerate(bounds):
        sw = None if sample_weight is None else sample_weight[a:b]
        shard = make_shard(i, [X[a:b]], [y[a:b]], [sw], y_numeric=y_numeric)
        w = workers[i % len(workers)]
        handles.append(_scatter_piece(client, shard, w, shares))
        groups.append((i,))
        placement.append(w)
        rows.append(b - a)
    shards = ShardSet(executor, handles, groups, placement, rows, X.shape[1],  # type: ignore[arg-type]  # (rows)
                      is_sparse(X))
    shards.collective.unrecoverable = SCATTERED_LOSS
    return shards


#: Why a fit on in-memory input cannot survive a lost worker, and the remedy the user
#: guide promises (the ``unrecoverable`` note of scattered shards: every mode says it).
SCATTERED_LOSS = (
    "its piece of the in-memory (NumPy/SciPy) input was scattered there and cannot be recomputed (in-memory "
    "input exists nowhere else on the cluster); pass a dask array (e.g. da.from_array(X, chunks=...)) to survive "
    "worker loss"
)


def _scatter_piece(client: Client, shard: Shard, worker: str, shares: Mapping[str, int] | None) -> Future:
    """Scatter one piece of in-memory data to ``worker``; a worker that dies meanwhile
    (most often killed at its memory limit while receiving it) is a ClusterError that
    says so, with the piece's size and the remedy, not the connection's raw error."""
    from distributed.comm.core import CommClosedError

    try:
        return client.scatter(shard, workers=[worker], hash=False)
    except (CommClosedError, OSError) as err:
        from ...exceptions import ClusterError
        from .memory import format_bytes

        size = (shares or {}).get(worker)
        what = f"its share of the in-memory data ({format_bytes(size)})" if size else "its share of the in-memory data"
        raise ClusterError(
            f"worker {worker} was lost while receiving {what}: most often its nanny killed it at its memory "
            f"limit ({type(err).__name__}: {err}); give the workers more memory, use more workers, or pass a "
            "dask array (its blocks are loaded where they are computed, and a lost one is recomputed)"
        ) from err


def _identity(x: T) -> T:
    return x


def rebalance(X: da.Array | dd.DataFrame, y: da.Array | dd.Series | None = None,
              sample_weight: da.Array | dd.Series | None = None, *, client: Client | None = None,
              rebalance: bool | str = True, passes: int = 1,
              ) -> tuple[da.Array, da.Array | None, da.Array | None, dict[str, Any]]:
    """Balanced, persisted copies of dask arrays for your own pipelines.

    The arrays are measured, rechunked into blocks of near-equal cost (oversized blocks
    split, tiny and empty ones merged) and placed so that every worker holds an equal
    share, moving blocks worker to worker only where needed: the same machinery as the
    estimators' ``rebalance`` parameter (see the user guide, "Data skew").

    Parameters
    ----------
    X : dask array or dask DataFrame
        Rows in blocks (one chunk along the columns).
    y, sample_weight : dask arrays, dask Series or None
        Rechunked to X's new row blocks.
    client : distributed.Client or None
        None: the default client (an error if there is none).
    rebalance : True or "auto", default=True
        True always rechunks; "auto" only when placement alone cannot balance the
        workers and the move pays off over ``passes`` passes over the data.
    passes : int, default=1
        See ``rebalance="auto"``.

    Returns
    -------
    X, y, sample_weight, report
        Dask arrays whose blocks are in the cluster's memory (y and sample_weight None
        when not given) and the report of what was measured and done (as an
        estimator's ``skew_report_``, plus ``placement``: the worker of each block).
    """
    import dask.dataframe as dd
    from distributed import default_client

    if rebalance not in (True, "auto"):
        raise ParameterError(f"rebalance must be True or 'auto'; got {rebalance!r}")
    if not (is_dask_collection(X) and (isinstance(X, (da.Array, dd.DataFrame)))):
        raise InputError(f"X must be a dask array or dask DataFrame; got {type(X).__name__}")
    if client is None:
        try:
            client = default_client()
        except ValueError as err:
            raise ClusterError(
                "rebalance needs a Dask cluster: pass client=... or create a Client first"
            ) from err
    elif not isinstance(client, Client):
        raise ParameterError(f"client must be a distributed.Client or None; got {type(client).__name__}")
    workers = DaskExecutor(client).workers()
    given_y = y is not None
    if y is None:  # a placeholder with X's rows, dropped at the end
        Xa = X.to_dask_array() if isinstance(X, dd.DataFrame) else X
        y = Xa.map_blocks(_full_rows, 0.0, drop_axis=1, dtype=np.float64)  # type: ignore[arg-type]  # (dask's stubs)
    arrays, futures, rows, costs, placement, report = _balanced_blocks(
        client, X, y, sample_weight, workers, rebalance, passes
    )
    out = []
    for arr, fs in zip(arrays, futures):
        if fs[0] is None:
            continue
        # every block a new key made on its worker, even one already there: a block
        # that had a second copy (fetched by a measurement) could otherwise lose the
        # one on its worker to Dask's replica reduction (the active memory manager)
        placed = [
            client.submit(_identity, f, workers=[w], allow_other_workers=False, pure=False)
            for f, w in zip(fs, placement)
        ]
        # an array whose blocks are the placed futures themselves: no further task, the
        # data stays where it was put
        name = f"dgd-rebalanced-{uuid.uuid4().hex[:12]}"
        index = (0,) * (arr.ndim - 1)
        graph = {(name, i, *index): f for i, f in enumerate(placed)}
        out.append(da.Array(graph, name, chunks=(tuple(rows),) + arr.chunks[1:], meta=arr._meta))
    with current_client(client):
        wait([f for a in out for f in futures_of(a)])
    report["placement"] = list(placement)
    Xo = out[0]
    yo = out[1] if given_y else None
    so = out[2] if sample_weight is not None else None
    return Xo, yo, so, report
