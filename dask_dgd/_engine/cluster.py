"""Attaching to a Dask cluster and placing shards on its workers.

``client=None`` resolves, at fit time, to the default Dask client if one exists;
otherwise small in-memory fits run in process (a cluster would only add latency) and
everything else uses an embedded :class:`~distributed.LocalCluster`, started once on
first need, reused by later fits and closed at interpreter exit.
"""

import atexit
import logging
import os
import threading
import uuid
from contextlib import contextmanager

import dask
import dask.array as da
import numpy as np
import pandas as pd
from distributed import Client, LocalCluster, futures_of, wait
from distributed.protocol import pickle

from .._backend import is_sparse
from ..exceptions import ClusterError, InputError, ParameterError
from .shards import (
    ShardSet,
    check_chunking,
    even_blocks,
    groups_by_worker,
    in_process_shardset,
    make_shard,
    place_blocks,
    InProcessExecutor,
    balanced_chunks,
)
from . import skew

__all__ = [
    "DaskExecutor",
    "embedded_client",
    "get_executor",
    "build_shardset",
    "is_dask_collection",
]

logger = logging.getLogger("dask_dgd")

#: In-memory inputs up to this many bytes are fitted in process when no client exists.
INPROCESS_MAX_BYTES_DEFAULT = 64 * 2**20

#: Seconds between checks that the worker of an actor call still exists.
ACTOR_POLL = 5.0

_embedded = {"client": None, "cluster": None}
_embedded_lock = threading.Lock()


def is_dask_collection(x):
    return dask.is_dask_collection(x)


try:  # the client of this thread/task context (Client.current, get_client, wait)
    from distributed.client import _current_client
except ImportError:  # pragma: no cover - a distributed without it
    _current_client = None


@contextmanager
def current_client(client):
    """``client`` as the current client of this thread, the one that actor proxies
    bind to and ``distributed.wait`` uses: ``Client.as_current`` without its
    ``dask.config.set(scheduler="dask.distributed")``.  That config is process-wide;
    set and restored by fits running at once in several threads, the restores can
    interleave and leave it set for good, and every later ``dask.compute`` of the
    process then asks for a distributed client."""
    if _current_client is None:  # pragma: no cover
        with client.as_current():
            yield
        return
    token = _current_client.set(client)
    try:
        yield
    finally:
        _current_client.reset(token)


def embedded_client():
    """The process-wide embedded LocalCluster client, started on first call."""
    with _embedded_lock:
        client = _embedded["client"]
        if client is not None and client.status == "running":
            return client
        n_workers = int(dask.config.get("dgd.embedded-workers", None) or min(os.cpu_count() or 1, 4))
        cluster = LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",
            # Data errors reach the user as clean exceptions; keep worker tracebacks quiet.
            silence_logs=logging.CRITICAL,
        )
        client = Client(cluster, set_as_default=False)
        _embedded.update(client=client, cluster=cluster)
        logger.info(
            "dask_dgd started an embedded LocalCluster with %d single-threaded workers, "
            "dashboard %s (pass client=... to use your own cluster)",
            n_workers,
            client.dashboard_link,
        )
        return client


@atexit.register
def _close_embedded():
    client, cluster = _embedded["client"], _embedded["cluster"]
    _embedded.update(client=None, cluster=None)
    for obj in (client, cluster):
        if obj is not None:
            try:
                obj.close()
            except Exception:  # pragma: no cover - best effort at exit
                pass


def _nbytes(x):
    if is_sparse(x):
        return x.data.nbytes + x.indices.nbytes + x.indptr.nbytes
    return getattr(x, "nbytes", 0)


def get_executor(client, X, nbytes=None):
    """Resolve the ``client`` parameter into an executor for this fit (``nbytes``: the
    in-memory size of ``X`` when it has no ``nbytes``, e.g. a DataFrame)."""
    if client is not None:
        if not isinstance(client, Client):
            raise ParameterError(
                f"client must be a distributed.Client or None; got {type(client).__name__}"
            )
        return DaskExecutor(client)
    try:
        from distributed import default_client

        return DaskExecutor(default_client())
    except ValueError:
        pass
    limit = dask.config.get("dgd.inprocess-max-bytes", INPROCESS_MAX_BYTES_DEFAULT)
    if not is_dask_collection(X) and (_nbytes(X) if nbytes is None else nbytes) <= limit:
        return InProcessExecutor()
    return DaskExecutor(embedded_client())


#: Steps whose partials together exceed this many bytes reduce on the cluster (tasks).
DRIVER_REDUCE_MAX_BYTES_DEFAULT = 16 * 2**20


class GroupRunner:
    """Dask actor holding one group's shard on its worker; runs step functions on it.

    A call goes from the client straight to the worker and back (one round trip,
    no scheduler), which is what makes a synchronous step cheap: about a third of the
    latency of submitting a task and gathering its result.
    """

    def __init__(self, shard):
        self.shard = shard
        self.scratch = {}  # the group's memory between calls (e.g. local optimizer state)

    def run(self, payload, stateful=False):
        """``fn(shard, *args)`` for the pickled ``(fn, args)``; the result pickled.
        ``stateful``: ``fn(shard, scratch, *args)``, with this runner's scratch dict.

        The driver pickles a step once for all groups and the message carries one
        bytes frame each way: measured 2-3 ms less per step (2 workers) than letting
        Dask serialise every argument separately.
        """
        fn, args = pickle.loads(payload)
        if stateful:
            return pickle.dumps(fn(self.shard, self.scratch, *args))
        return pickle.dumps(fn(self.shard, *args))


def step_transport(n_groups, result_bytes, split_every):
    """How a step reaches the groups: ``"actor"`` or ``"task"``.

    ``dgd.step-transport`` (``"auto"``, ``"actor"``, ``"task"``) decides; ``auto``
    uses actor calls, whose partials all come back to the driver and are summed there
    in the fixed tree, unless there are more groups than ``split_every`` and their
    partials together exceed ``dgd.driver-reduce-max-bytes`` (16 MiB): then each step
    is one task per group and the inner levels of the tree run as tasks on the
    cluster, so the driver receives at most ``split_every`` partials.
    """
    choice = dask.config.get("dgd.step-transport", "auto")
    if choice not in ("auto", "actor", "task"):
        raise ParameterError(
            f"dask config dgd.step-transport must be 'auto', 'actor' or 'task'; got {choice!r}"
        )
    if choice != "auto":
        return choice
    limit = dask.config.get("dgd.driver-reduce-max-bytes", DRIVER_REDUCE_MAX_BYTES_DEFAULT)
    if n_groups > split_every and n_groups * result_bytes > limit:
        return "task"
    return "actor"


def auto_split_every(n_groups, result_bytes, limit=None):
    """``split_every="auto"``: 8, or the largest fan-in (>= 2) whose merges receive at
    most ``dgd.driver-reduce-max-bytes`` (16 MiB) when the groups' results together
    exceed it.  A smaller fan-in means more tree levels (one round trip each on the
    task transport) and fewer bytes per merge."""
    if limit is None:
        limit = dask.config.get("dgd.driver-reduce-max-bytes", DRIVER_REDUCE_MAX_BYTES_DEFAULT)
    if n_groups * result_bytes <= limit or result_bytes <= 0:
        return 8
    return int(max(2, min(8, limit // result_bytes)))


def _worker_addresses(dask_scheduler=None):
    return list(dask_scheduler.workers)


class DaskExecutor:
    """Runs shard functions on the cluster: setup as tasks pinned to each shard's
    worker, steps as calls to a :class:`GroupRunner` actor per shard (or as tasks)."""

    kind = "dask"

    def __init__(self, client):
        self.client = client

    def start_runners(self, handles, workers, token):
        """One :class:`GroupRunner` actor per shard, on the shard's worker."""
        futures = [
            self.client.submit(
                GroupRunner,
                h,
                key=f"dgd-runner-{token}-{g}",
                workers=None if w is None else [w],
                allow_other_workers=True,
                actor=True,
            )
            for g, (h, w) in enumerate(zip(handles, workers))
        ]
        # Actor proxies bind to the current client: ours, even if it is not the default.
        with current_client(self.client):
            actors = [f.result() for f in futures]
            for a in actors:
                a.run  # noqa: B018 - binds the proxy to this client now
        return futures, actors

    def release_runners(self, runners):
        """Release the actors of :meth:`start_runners` now: their futures and the
        future each actor proxy holds (the proxy itself may live on in a reference
        cycle until the garbage collector runs)."""
        futures, actors = runners
        self.release([*futures, *(getattr(a, "_future", None) for a in actors)])

    @staticmethod
    def release(futures):
        """Release these futures now (each once; ``None`` entries are skipped)."""
        for f in futures:
            if f is not None:
                try:
                    f.release()
                except Exception:  # noqa: BLE001 - a closed client has nothing left to release
                    pass

    def call_runners(self, runners, fn, args, stateful=False, per_group=None):
        """``fn(shard, *args)`` on every runner at once; results in group order.
        ``per_group``: one more tuple of arguments for each runner, appended to ``args``."""
        _, actors = runners
        if per_group is None:
            payloads = [pickle.dumps((fn, args))] * len(actors)
        else:
            payloads = [pickle.dumps((fn, tuple(args) + tuple(extra))) for extra in per_group]
        with current_client(self.client):
            calls = [a.run(payload, stateful) for a, payload in zip(actors, payloads)]
            return [pickle.loads(self._actor_result(c, a)) for c, a in zip(calls, actors)]

    def _actor_result(self, call, actor):
        """The result of an actor call, checking every :data:`ACTOR_POLL` seconds that
        the actor's worker is still in the cluster: a call in flight when its worker
        leaves (e.g. the whole cluster is scaled down) may otherwise never resolve.
        A gone worker raises ``OSError("Actor was lost ...")``, which the shard set
        treats as a lost worker (recovery, or ClusterError without workers)."""
        address = getattr(actor, "_address", None)
        while True:
            try:
                return call.result(timeout=ACTOR_POLL)
            except TimeoutError:
                if address is not None and address not in set(self.workers()):
                    raise OSError(f"Actor was lost: its worker {address} left the cluster") from None

    def start_actor(self, cls, args, kwargs, *, worker, key):
        """An actor ``cls(*args, **kwargs)`` on ``worker``: ``(future, proxy)``; give
        both to :meth:`release_runners` as ``([future], [proxy])`` when done."""
        future = self.client.submit(
            cls, *args, **kwargs, key=key, workers=[worker], allow_other_workers=True, actor=True
        )
        with current_client(self.client):
            return future, future.result()

    def actor_address(self, future):
        """Address of the worker holding the actor of ``future``."""
        return self.client.who_has([future])[future.key][0]

    def call_actor(self, method, *args, **kwargs):
        """Call an actor's method and wait for its result."""
        with current_client(self.client):
            return method(*args, **kwargs).result()

    def call_actor_within(self, timeout, method, *args):
        """:meth:`call_actor` that gives up after ``timeout`` seconds (TimeoutError): a
        call to an actor whose worker has gone may otherwise wait for ever."""
        with current_client(self.client):
            return method(*args).result(timeout=timeout)

    def submit_pinned(self, fn, *args, worker, key):
        """One task ``fn(*args)`` on ``worker`` (e.g. a long-running training loop)."""
        return self.client.submit(
            fn, *args, key=key, workers=[worker], allow_other_workers=True, pure=False
        )

    def workers(self):
        timeout = dask.config.get("dgd.worker-timeout", 60)
        try:
            self.client.wait_for_workers(1, timeout=timeout)
            # Asked of the scheduler itself: the client's cached scheduler_info() can be
            # replaced by a background refresh that carries no per-worker entries.
            workers = sorted(self.client.run_on_scheduler(_worker_addresses))
        except (TimeoutError, OSError) as err:
            workers, cause = [], err
        else:
            cause = None
        if not workers:
            raise ClusterError(
                f"the Dask cluster at {self.client.scheduler.address} has no workers; "
                "start some (dask worker ADDRESS) or use client=None for an embedded cluster"
            ) from cause
        return workers

    def map_shards(self, fn, handles, workers, args, name, token):
        submit = self.client.submit
        return [
            submit(
                fn,
                h,
                *args,
                key=f"{name}-{token}-{g}",
                workers=None if w is None else [w],
                allow_other_workers=True,
                pure=False,
            )
            for g, (h, w) in enumerate(zip(handles, workers))
        ]

    def gather(self, handles):
        return self.client.gather(list(handles))

    def where(self, handles, fallback):
        """The worker holding each handle now (``fallback`` where none is known)."""
        who = self.client.who_has(list(handles))
        return [
            w if w in who.get(h.key, ()) else (tuple(who.get(h.key, ())) or (w,))[0]
            for h, w in zip(handles, fallback)
        ]

    def wait(self, handles):
        """Wait for the tasks; re-raise the first error."""
        for h in handles:
            if h.exception() is not None:
                h.result()

    def merge_level(self, tree, items, name):
        """One inner level of the reduction: merge tasks of ``split_every`` inputs."""
        k = tree.split_every
        submit = self.client.submit
        return [
            submit(tree.merge, *items[i : i + k], key=f"{name}-{i // k}", pure=False)
            for i in range(0, len(items), k)
        ]


def _check_frame_dtypes(df):
    for name, dtype in df.dtypes.items():
        if isinstance(dtype, pd.api.extensions.ExtensionDtype) or not (
            pd.api.types.is_numeric_dtype(dtype)
        ):
            raise InputError(
                f"X column {name!r} has dtype {dtype}; training needs plain numeric "
                f"columns: encode text/categories as numbers and convert nullable or "
                f"boolean columns, e.g. X.astype({{{name!r}: 'float64'}})"
            )


def _futures_in_order(arr):
    """The futures of a persisted array, in row-block order."""
    by_key = {f.key: f for f in futures_of(arr)}
    keys = [k[0] if arr.ndim == 2 else k for k in arr.__dask_keys__()]
    return [by_key[k] for k in keys]


def _nrows(x):
    return x.shape[0]


def _with_known_rows(client, arr):
    """``arr`` persisted on the cluster, its row-chunk sizes computed there if unknown."""
    arr = client.persist(arr)
    if not any(np.isnan(c) for c in arr.chunks[0]):
        return arr
    futures = _futures_in_order(arr)
    rows = client.gather([client.submit(_nrows, f, pure=False) for f in futures])
    return da.Array(arr.dask, arr.name, chunks=(tuple(rows),) + arr.chunks[1:], meta=arr._meta)


def _full_rows(block, value):
    """A constant weight per row of ``block`` (given as the list of its single column
    chunk), on the host: ``make_shard`` moves it next to a device ``X``."""
    if isinstance(block, list):
        (block,) = block
    return np.full(block.shape[0], value, dtype=np.float64)


def _known(chunks):
    return not any(np.isnan(c) for c in chunks)


def _to_dask_arrays(client, X, y, sample_weight):
    """Dask arrays for X, y, weights with matching row blocks (computed on ``client``)."""
    import dask.dataframe as dd

    if isinstance(X, dd.DataFrame):
        _check_frame_dtypes(X)
        X = X.to_dask_array()
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
    return X, arrays[0], arrays[1]




def _block_nnz(x):
    return int(x.nnz) if is_sparse(x) else int(x.shape[0] * (x.shape[1] if x.ndim > 1 else 1))


def _block_nbytes(*xs):
    return int(sum(_nbytes(x) for x in xs if x is not None))


def _known_chunks(arr, rows):
    return da.Array(arr.dask, arr.name, chunks=(tuple(rows),) + arr.chunks[1:], meta=arr._meta)


def _measure_blocks(client, xf, yf, sf):
    """Non-zeros (dense: rows x columns) and bytes of every block, computed where the
    blocks are."""
    sizes = client.gather([client.submit(_block_nnz, f, pure=False) for f in xf])
    nbytes = client.gather([
        client.submit(_block_nbytes, x, y, s, pure=False) for x, y, s in zip(xf, yf, sf)
    ])
    return sizes, nbytes


def _balanced_blocks(client, X, y, sample_weight, workers, rebalance, passes):
    """Persist the inputs, measure their blocks and rebalance them (see :mod:`.skew`).

    Returns the persisted arrays (known chunks), the block futures of X, y and weights,
    rows and costs per block, the chosen placement and the skew report.
    """
    X, y, sample_weight = _to_dask_arrays(client, X, y, sample_weight)
    sparse = is_sparse(X._meta)
    # One persist for all: X and y often share tasks (a DataFrame, a filter mask).
    arrays = client.persist([a for a in (X, y, sample_weight) if a is not None])
    xf = _futures_in_order(arrays[0])
    with current_client(client):  # placement follows where the blocks are; errors
        wait(xf)  # surface in make_shard
    if any(np.isnan(c) for c in arrays[0].chunks[0]):
        rows = client.gather([client.submit(_nrows, f, pure=False) for f in xf])
    else:
        rows = [int(c) for c in arrays[0].chunks[0]]
    arrays = [_known_chunks(a, rows) for a in arrays]

    def measured(arrays):
        fs = [_futures_in_order(a) for a in arrays]
        futures = (fs[0], fs[1] if len(fs) > 1 else [None] * len(fs[0]), fs[2] if len(fs) > 2 else [None] * len(fs[0]))
        sizes, nbytes = _measure_blocks(client, *futures)
        # a step's cost: non-zeros (+ one per row) for sparse blocks, rows x columns for dense
        costs = [z + r if sparse else z for z, r in zip(sizes, arrays[0].chunks[0])]
        who = client.who_has(futures[0])
        holders = [tuple(who.get(f.key, ())) for f in futures[0]]
        return futures, costs, nbytes, holders

    futures, costs, nbytes, holders = measured(arrays)
    action, placement, info = skew.plan(
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


def build_shardset(executor, X, y, sample_weight, *, y_numeric=True, rebalance="auto", passes=1):
    """Turn the input into a :class:`ShardSet` for ``executor``.

    In process: one shard, one block.  On a cluster: an in-memory input is cut into one
    block per worker and scattered; a dask input keeps its chunks as blocks, which are
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
    arrays, (xf, yf, sf), rows, costs, placement, report = _balanced_blocks(
        client, X, y, sample_weight, workers, rebalance, passes
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
    shards = ShardSet(executor, handles, groups, owners, rows, X.shape[1], sparse)
    shards.block_costs = np.asarray(costs, dtype=np.float64)
    shards.skew_report = report
    return shards


def _scatter_shardset(executor, X, y, sample_weight, workers, n_groups, y_numeric):
    client = executor.client
    bounds = even_blocks(X.shape[0], n_groups)
    handles, groups, placement, rows = [], [], [], []
    for i, (a, b) in enumerate(bounds):
        sw = None if sample_weight is None else sample_weight[a:b]
        shard = make_shard(i, [X[a:b]], [y[a:b]], [sw], y_numeric=y_numeric)
        w = workers[i % len(workers)]
        handles.append(client.scatter(shard, workers=[w], hash=False))
        groups.append((i,))
        placement.append(w)
        rows.append(b - a)
    return ShardSet(executor, handles, groups, placement, rows, X.shape[1], is_sparse(X))


def _identity(x):
    return x


def rebalance(X, y=None, sample_weight=None, *, client=None, rebalance=True, passes=1):
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
        y = Xa.map_blocks(_full_rows, 0.0, drop_axis=1, dtype=np.float64)
    arrays, futures, rows, costs, placement, report = _balanced_blocks(
        client, X, y, sample_weight, workers, rebalance, passes
    )
    out = []
    for arr, fs in zip(arrays, futures):
        if fs[0] is None:
            continue
        who = client.who_has(list(fs))  # one request for all blocks
        placed = [
            f if w in who.get(f.key, ()) else client.submit(
                _identity, f, workers=[w], allow_other_workers=False, pure=False
            )
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
