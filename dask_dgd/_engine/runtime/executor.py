"""Where group computations run: in this process, or on a Dask cluster.

``client=None`` resolves, at fit time (:func:`get_executor`):

* inside a Dask task (joblib's dask backend, a dask-ml search, a task the user
  submitted): in-memory input is fitted in process, in the task's own thread, and dask
  input on the task's cluster through the worker's client, the task seceding from its
  worker's thread pool first (as :func:`distributed.worker_client` does) so that a
  cluster of single-threaded workers cannot deadlock;
* otherwise the default Dask client if one exists;
* otherwise small in-memory fits run in process (a cluster would only add latency) and
  everything else uses an embedded :class:`~distributed.LocalCluster` of worker
  *threads* in this process (no ``if __name__ == "__main__":`` guard needed; worker
  processes only when ``dgd.embedded-processes`` is set), started once on first need
  and announced by one WARNING on the ``dask_dgd`` logger, reused by later fits and
  closed at interpreter exit.

An executor runs setup tasks on the shards (pinned to each shard's worker) and starts
the :class:`GroupRunner` actors that steps go through (see :mod:`.collective`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import logging
import os
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

import dask
from distributed import Client
from distributed.protocol import pickle

from ..._backend import is_sparse
from ...exceptions import ClusterError, ParameterError
from .clusters import local_cluster
from .group_steps import GroupMemory
from .reduce import Compressed, SparseVector, partial_nbytes, tag_group
from .topology import tree_depth, tree_groups

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
    from typing import TypeAlias

    from distributed import Future, Scheduler, Worker
    from distributed.actor import Actor, BaseActorFuture

    from ..data.blocks import Shard
    from .reduce import BlockTree, NodeKey, Partial
    from .topology import Node

    #: The step actors of a shard set: their futures and their proxies, in group order.
    Runners: TypeAlias = tuple[list[Future], list[Actor]]
    #: A runner's subtree as it travels: ``(group, worker address, actor key, children)``.
    RunnerSpec: TypeAlias = "tuple[int, str, str, tuple[RunnerSpec, ...]]"
    #: A runner's answer: its merged block-tree nodes and :func:`answer_stats`.
    Answer: TypeAlias = tuple[dict[NodeKey, Partial], dict[str, Any]]
    #: A step through the runner tree: ``(fn, args, tree, leaf)``.
    TreeStep: TypeAlias = tuple[Callable[..., Any], tuple[Any, ...], BlockTree, bool]

__all__ = [
    "DaskExecutor",
    "GroupRunner",
    "InProcessExecutor",
    "auto_split_every",
    "current_client",
    "embedded_client",
    "get_executor",
    "in_dask_task",
    "is_dask_collection",
    "leave_thread_pool",
    "runner_memory",
    "step_transport",
    "task_client",
]

logger = logging.getLogger("dask_dgd")

#: In-memory inputs up to this many bytes are fitted in process when no client exists.
INPROCESS_MAX_BYTES_DEFAULT = 64 * 2**20

#: Seconds between checks that the worker of an actor call still exists (a step's, the
#: parameter server's; also between a gather's checks): scheduler calls made only while
#: a call waits longer.
ACTOR_POLL = 1.0

#: Heartbeat intervals a worker must have missed, at least, to be called silent.
SILENT_BEATS = 4

_embedded: dict[str, Any] = {"client": None, "cluster": None, "announced": False}
_embedded_lock = threading.Lock()


def is_dask_collection(x: Any) -> bool:
    return dask.is_dask_collection(x)


try:  # the client of this thread/task context (Client.current, get_client, wait)
    from distributed.client import _current_client
except ImportError:  # pragma: no cover - a distributed without it
    _current_client = None  # type: ignore[assignment]  # (then as_current is used instead)


@contextmanager
def current_client(client: Client) -> Iterator[None]:
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


def embedded_client() -> Client:
    """The process-wide embedded LocalCluster client, started on first call.

    Worker threads in this process by default (``dgd.embedded-processes``: worker
    processes, which need the ``__main__`` guard of multiprocessing); the first start
    of the process is announced by one WARNING on the ``dask_dgd`` logger."""
    with _embedded_lock:
        client = _embedded["client"]
        if client is not None and client.status == "running":
            return client
        n_workers = int(dask.config.get("dgd.embedded-workers", None) or min(os.cpu_count() or 1, 4))
        processes = bool(dask.config.get("dgd.embedded-processes", False))
        cluster = local_cluster(  # (the workers' profiler off where it can deadlock)
            n_workers=n_workers,
            threads_per_worker=1,
            processes=processes,
            dashboard_address=":0",
            # Data errors reach the user as clean exceptions; keep worker tracebacks quiet.
            silence_logs=logging.CRITICAL,
        )
        client = Client(cluster, set_as_default=False)
        _embedded.update(client=client, cluster=cluster)
        if not _embedded["announced"]:
            _embedded["announced"] = True
            logger.warning(
                "dask_dgd: no Dask client given, so started an embedded LocalCluster of %d "
                "single-threaded worker %s in this process, dashboard %s; reused by later fits. "
                "To use your own cluster, create a distributed.Client first or pass client=...",
                n_workers, "processes" if processes else "threads", client.dashboard_link,
            )
        return client


@atexit.register
def _close_embedded() -> None:
    client, cluster = _embedded["client"], _embedded["cluster"]
    _embedded.update(client=None, cluster=None)
    for obj in (client, cluster):
        if obj is not None:
            try:
                obj.close()
            except Exception:  # pragma: no cover - best effort at exit
                pass


def _nbytes(x: Any) -> int:
    if is_sparse(x):
        return x.data.nbytes + x.indices.nbytes + x.indptr.nbytes
    return getattr(x, "nbytes", 0)


def in_dask_task() -> bool:
    """Whether this code runs inside a Dask task (on a worker)."""
    try:
        from distributed import get_worker

        get_worker()
    except (ImportError, ValueError):
        return False
    return True


def leave_worker_pool() -> None:
    """Secede this task's thread from its worker's thread pool (once), as
    :func:`distributed.worker_client` does: the fit's own tasks then get the slot, and
    a cluster of single-threaded workers cannot deadlock on a fit inside a task."""
    from distributed import secede
    from distributed.threadpoolexecutor import thread_state

    if getattr(thread_state, "proceed", False):  # a pool thread not yet seceded
        secede()


def task_client(client: Client | None = None) -> Client | None:
    """Inside a Dask task: ``client`` (None: the task's own, the worker's client), after
    seceding the task from its worker's thread pool (:func:`leave_worker_pool`).
    Elsewhere ``client`` unchanged."""
    if not in_dask_task():
        return client
    if client is None:
        from distributed import get_client

        client = get_client()
    leave_worker_pool()
    return client


def get_executor(client: Client | None, X: Any, nbytes: int | None = None) -> InProcessExecutor | DaskExecutor:
    """Resolve the ``client`` parameter into an executor for this fit (``nbytes``: the
    in-memory size of ``X`` when it has no ``nbytes``, e.g. a DataFrame).  See the
    module docstring for the order."""
    if client is not None and not isinstance(client, Client):
        raise ParameterError(
            f"client must be a distributed.Client or None; got {type(client).__name__}"
        )
    if in_dask_task():
        if client is None and not is_dask_collection(X):
            return InProcessExecutor()
        return DaskExecutor(task_client(client))  # type: ignore[arg-type]  # (in a task: the worker's client)
    if client is not None:
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

    def __init__(self, shard: Shard) -> None:
        self.shard = shard
        self.scratch = GroupMemory()  # the group's memory between calls (e.g. local optimizer state)

    def run(self, payload: bytes) -> bytes:
        """``fn(shard, scratch, *args)`` for the pickled ``(fn, args)``, with this
        runner's scratch dict; the result pickled.

        The driver pickles a step once for all groups and the message carries one
        bytes frame each way: measured 2-3 ms less per step (2 workers) than letting
        Dask serialise every argument separately.
        """
        fn, args = pickle.loads(payload)
        return pickle.dumps(fn(self.shard, self.scratch, *args))

    async def run_tree(self, payload: bytes, group: int, children: tuple[RunnerSpec, ...]) -> bytes:
        """One reduction step through this runner's subtree (see :mod:`.topology`).

        ``payload`` is the pickled ``(fn, args, tree, leaf)``; ``group`` this runner's
        group; ``children`` its subtrees as nested ``(group, address, key, children)``.
        The step goes on to the children first (the same bytes, one copy each), then
        ``fn(shard, scratch, *args)`` runs on this group's shard, in the worker's actor
        thread (as :meth:`run`); its node dict (``{(0, group): result}`` when ``leaf``)
        is merged with the children's answers in ``tree`` (a
        :class:`~.reduce.BlockTree`: the fixed order, wherever the merge happens) and
        returned pickled, with :func:`_answer_stats`.  A coroutine, so that a runner
        waiting for its children holds no thread: two groups on one worker (after a
        recovery) cannot block each other.
        """
        from distributed import get_worker

        worker = get_worker()
        received = time.time()
        calls = [asyncio.ensure_future(_call_child(worker, payload, child)) for child in children]
        loop, pool = asyncio.get_running_loop(), worker.executors["actor"]
        try:
            own = await loop.run_in_executor(pool, contextvars.copy_context().run, self._own_nodes, payload, group,
                                             received, not children)
        finally:
            answers = await asyncio.gather(*calls, return_exceptions=True)
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
        # (own: pickled for a leaf, a tuple to merge otherwise; answers: all bytes once none raised)
        if not children:
            return own  # type: ignore[return-value]
        return await loop.run_in_executor(pool, _merge_answers, own, answers, received)  # type: ignore[arg-type]

    async def exchange(self, payload: bytes) -> bytes:
        """A parameter shard's pull or push from another group (see :mod:`..sharded.params`):
        ``fn(shard, scratch, *args)`` for the pickled ``(fn, args)``, run on the worker's
        event loop, not in the actor thread: an owner busy with its own blocks (or
        waiting for its own pulls) still answers.  Only quick reads and stores run here."""
        fn, args = pickle.loads(payload)
        return pickle.dumps(fn(self.shard, self.scratch, *args))

    def _own_nodes(self, payload: bytes, group: int, received: float,
                   pickled: bool) -> bytes | tuple[dict[NodeKey, Partial], dict[str, Any], BlockTree]:
        fn, args, tree, leaf = pickle.loads(payload)
        out = fn(self.shard, self.scratch, *args)
        nodes = tag_group({(0, group): out} if leaf else out, group)
        answer = (nodes, answer_stats(nodes, group, tree.size, received), tree)
        return pickle.dumps(answer[:2]) if pickled else answer


def answer_stats(nodes: Mapping[NodeKey, Partial], group: int, size: int | None,
                 received: float | None = None) -> dict[str, Any]:
    """What a runner's answer reports besides its nodes: each group's compute time
    (``times``), the bytes of the groups' own partials as sent and uncompressed
    (``up``, ``up_raw``; ``size``: the gradient's length), how many partials they sent
    (``nodes``), and ``spans``: the seconds from receiving the step to answering, of
    the slowest runner of each level (this runner's level first)."""
    sent = [partial_nbytes(p) for p in nodes.values()]
    # (a tree whose partials are compact knows the gradient's size)
    raw = [8 * size + 16 if isinstance(p.grad_sum, (Compressed, SparseVector)) else b  # type: ignore[operator]
           for p, b in zip(nodes.values(), sent)]
    return {
        "times": {group: max((p.time_max for p in nodes.values()), default=0.0)},
        "up": sum(sent),
        "up_raw": sum(raw),
        "nodes": len(sent),
        "spans": [] if received is None else [time.time() - received],
    }


def _merge_answers(own: tuple[dict[NodeKey, Partial], dict[str, Any], BlockTree], answers: Sequence[bytes],
                   received: float) -> bytes:
    """A runner's answer: its own nodes merged with its children's answers."""
    nodes, stats, tree = own
    children = [pickle.loads(a) for a in answers]
    merged = tree.merge(nodes, *(c[0] for c in children))
    stats = merge_stats(stats, [c[1] for c in children])
    stats["spans"] = [time.time() - received] + stats["spans"][1:]
    return pickle.dumps((merged, stats))


def merge_stats(first: Mapping[str, Any], others: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The :func:`answer_stats` of several answers as one: ``first``'s level on top,
    the others' levels below it (the driver passes an empty ``first``)."""
    out = {"times": dict(first["times"]), "up": first["up"], "up_raw": first["up_raw"], "nodes": first["nodes"]}
    for c in others:
        out["times"].update(c["times"])
        for k in ("up", "up_raw", "nodes"):
            out[k] += c[k]
    depth = max((len(c["spans"]) for c in others), default=0)
    out["spans"] = list(first["spans"][:1]) + [
        max(c["spans"][i] for c in others if i < len(c["spans"])) for i in range(depth)
    ]
    return out


async def _call_child(worker: Worker, payload: bytes, child: RunnerSpec) -> bytes:
    """``run_tree`` on a child runner, worker to worker; its answer's bytes."""
    from distributed.protocol import to_serialize

    group, address, key, children = child
    try:
        response = await worker.rpc(address).actor_execute(
            actor=key, function="run_tree", args=[to_serialize(payload), group, to_serialize(children)], kwargs={},
        )
    except OSError as err:
        raise OSError(f"Actor was lost: the runner of group {group} on {address} did not answer ({err})") from err
    if response["status"] != "OK":
        raise response["exception"]
    return response["result"]


def simulated_network_delay(nbytes: int, depth: int) -> float:
    """Hold the driver for the time ``nbytes`` through its connection would take on a
    slower network: ``nbytes * 8 / dgd.simulated-bandwidth`` (bits per second) plus
    ``2 * depth * dgd.simulated-latency`` (seconds: a message down and one up per level).
    Both unset (the default): no delay.  For benchmarks that check a network model
    against a fit whose transport is slowed by its real bytes (the suite's tiny run in
    the tests sets it too, and asserts bytes, never times)."""
    bandwidth = dask.config.get("dgd.simulated-bandwidth", None)
    latency = dask.config.get("dgd.simulated-latency", None)
    if bandwidth is None and latency is None:
        return 0.0
    delay = (8.0 * nbytes / float(bandwidth) if bandwidth else 0.0) + 2 * depth * float(latency or 0.0)
    time.sleep(delay)
    return delay


#: Values of ``dgd.step-transport`` (``"actor"``: the earlier name of ``"star"``).
TRANSPORTS = ("auto", "tree", "star", "actor", "task")


def step_transport() -> str:
    """How a reduction step reaches the groups: ``"tree"``, ``"star"`` or ``"task"``.

    ``dgd.step-transport`` decides.  ``"auto"`` (the default) and ``"tree"``: actor
    calls down and up the runner tree (:mod:`.topology`), the driver calling at most
    ``split_every`` root runners; with no more groups than that, the tree is the star.
    ``"star"`` (or ``"actor"``): the driver calls every runner and merges every answer
    itself (its cost per step grows with the number of groups; for comparison).
    ``"task"``: stateless steps as one task per group with the inner tree levels as
    tasks (through the scheduler; steps that need group memory still use actors).
    """
    choice = dask.config.get("dgd.step-transport", "auto")
    if choice not in TRANSPORTS:
        raise ParameterError(
            f"dask config dgd.step-transport must be one of {', '.join(map(repr, TRANSPORTS))}; got {choice!r}"
        )
    return {"auto": "tree", "actor": "star"}.get(choice, choice)


def auto_split_every(n_groups: int, result_bytes: int, limit: int | None = None) -> int:
    """``split_every="auto"``: 8, or the largest fan-in (>= 2) whose merges receive at
    most ``dgd.driver-reduce-max-bytes`` (16 MiB) when the groups' results together
    exceed it.  A smaller fan-in means more tree levels (one round trip each on the
    task transport) and fewer bytes per merge."""
    if limit is None:
        limit = dask.config.get("dgd.driver-reduce-max-bytes", DRIVER_REDUCE_MAX_BYTES_DEFAULT)
    if n_groups * result_bytes <= limit or result_bytes <= 0:
        return 8
    return int(max(2, min(8, limit // result_bytes)))


# The functions run on the scheduler take ``dask_scheduler=None``, which Client.run_on_scheduler
# always fills in (by that name): the ignores on its default say so.
def _worker_addresses(dask_scheduler: Scheduler = None) -> list[str]:  # type: ignore[assignment]
    return list(dask_scheduler.workers)


def _worker_states(dask_scheduler: Scheduler = None,  # type: ignore[assignment]  # (run_on_scheduler's)
                   since: float = 0.0) -> tuple[dict[str, tuple[str, int, int]], int]:
    """``({address: (status, memory limit, process memory)}, removals)``: every worker
    the scheduler knows, running or not (paused workers are not counted as present),
    and how many workers it removed since ``since`` (a ``time.time()``)."""
    states = {a: (ws.status.name, ws.memory_limit, ws.memory.process) for a, ws in dask_scheduler.workers.items()}
    removed = sum(1 for t, e in dask_scheduler.get_events("all")
                  if t >= since and isinstance(e, dict) and e.get("action") == "remove-worker")
    return states, removed


def absent_workers_message(address: str, states: Mapping[str, tuple[str, int, int]], removed: int = 0,
                           window: float = 0.0) -> str:
    """Why a cluster has no worker to run on: none at all, workers removed again and
    again (restarting: killed at their memory limit), or workers that are there but not
    running (paused above their memory threshold, closing), each named."""
    if not states and removed:
        return (f"the Dask cluster at {address} has no running worker: workers were removed {removed} time(s) "
                f"in the last {window:.0f} s (restarting, e.g. killed by their nanny for exceeding their memory "
                "limit, distributed.worker.memory.terminate); give them more memory (dask worker --memory-limit, "
                "LocalCluster(memory_limit=...)) and see the workers' logs")
    if not states:
        return (f"the Dask cluster at {address} has no workers; "
                "start some (dask worker ADDRESS) or use client=None for an embedded cluster")
    from ..data.memory import format_bytes

    pause = dask.config.get("distributed.worker.memory.pause", 0.8)
    parts = []
    for addr, (status, limit, used) in sorted(states.items()):
        if status == "paused":
            mem = f"uses {format_bytes(used)}" + (f" of its {format_bytes(limit)} limit" if limit else "")
            parts.append(f"{addr} is paused ({mem}: above distributed.worker.memory.pause={pause:g} of its limit, "
                         "it runs no task until its memory falls)")
        else:
            parts.append(f"{addr} is {status}")
    return (f"the Dask cluster at {address} has {len(states)} worker(s) but none running: " + "; ".join(parts)
            + ". Give the workers more memory (dask worker --memory-limit, LocalCluster(memory_limit=...)) or free "
              "what they hold; a worker that restarts over and over is killed for exceeding its limit at idle")


def _seconds_since_heard(addresses: Iterable[str],
                         dask_scheduler: Scheduler = None,  # type: ignore[assignment]  # (run_on_scheduler's)
                         ) -> tuple[float, dict[str, float]]:
    """The scheduler's heartbeat interval for its workers, and the seconds since it
    last heard from each worker of ``addresses`` still in the cluster."""
    from distributed.metrics import time as now
    from distributed.scheduler import heartbeat_interval

    t = now()
    return heartbeat_interval(len(dask_scheduler.workers)), {
        a: t - ws.last_seen for a in addresses if (ws := dask_scheduler.workers.get(a)) is not None
    }


#: Restarts of silent workers' nannies in flight on the scheduler (kept referenced).
_RESTARTS: set[asyncio.Future[None]] = set()


async def _remove_silent(addresses: Iterable[str],
                         dask_scheduler: Scheduler = None,  # type: ignore[assignment]  # (run_on_scheduler's)
                         ) -> None:
    """On the scheduler: remove the silent workers ``addresses`` (their tasks and
    keys go back to be recomputed) and, without waiting, ask each one's nanny to
    restart it (the nanny kills a process that does not stop within a few seconds;
    a frozen one never does)."""
    for address in addresses:
        ws = dask_scheduler.workers.get(address)
        if ws is None:
            continue
        nanny = ws.nanny
        await dask_scheduler.remove_worker(address, stimulus_id=f"dgd-silent-worker-{time.time()}", close=False)
        if nanny:
            task = asyncio.ensure_future(_restart_by_nanny(dask_scheduler, nanny))
            _RESTARTS.add(task)
            task.add_done_callback(_RESTARTS.discard)


#: Times the scheduler asks a silent worker's nanny to restart it (a loaded machine can
#: time the request out before the nanny has it).
NANNY_RESTART_TRIES = 3


async def _restart_by_nanny(scheduler: Scheduler, nanny: str) -> None:
    for attempt in range(NANNY_RESTART_TRIES):
        try:  # the nanny's restart goes on once it has the request, even past its timeout
            await scheduler.rpc(nanny).restart(timeout=5, reason="dgd-silent-worker")
            return
        except Exception:  # noqa: BLE001 - a nanny frozen too, or gone: the worker is out of the cluster anyway
            logger.debug("could not restart the silent worker through its nanny %s (try %d)", nanny, attempt + 1,
                         exc_info=True)


class DaskExecutor:
    """Runs shard functions on the cluster: setup as tasks pinned to each shard's
    worker, steps as calls to a :class:`GroupRunner` actor per shard (or as tasks)."""

    kind: Literal["dask"] = "dask"

    def __init__(self, client: Client) -> None:
        self.client = client

    def start_runners(self, handles: Sequence[Future], workers: Sequence[str | None], token: str) -> Runners:
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
        return futures, actors  # type: ignore[return-value]  # (actor=True: the results are Actor proxies)

    def release_runners(self, runners: Runners) -> None:
        """Release the actors of :meth:`start_runners` now: their futures and the
        future each actor proxy holds (the proxy itself may live on in a reference
        cycle until the garbage collector runs)."""
        futures, actors = runners
        self.release([*futures, *(getattr(a, "_future", None) for a in actors)])

    @staticmethod
    def release(futures: Iterable[Future | None]) -> None:
        """Release these futures now (each once; ``None`` entries are skipped)."""
        for f in futures:
            if f is not None:
                try:
                    f.release()
                except Exception:  # noqa: BLE001 - a closed client has nothing left to release
                    pass

    def call_runners(self, runners: tuple[Sequence[Future] | None, Sequence[Actor]], fn: Callable[..., Any],
                     args: Sequence[Any], per_group: Sequence[Sequence[Any]] | None = None,
                     timeout: float | None = None) -> list[Any]:
        """``fn(shard, scratch, *args)`` on every runner at once; results in group order.
        ``per_group``: one more tuple of arguments for each runner, appended to ``args``.
        ``timeout``: see :meth:`_actor_result`."""
        _, actors = runners
        if per_group is None:
            payloads = [pickle.dumps((fn, args))] * len(actors)
        else:
            payloads = [pickle.dumps((fn, tuple(args) + tuple(extra))) for extra in per_group]
        started = time.monotonic()
        with current_client(self.client):
            calls = [a.run(payload) for a, payload in zip(actors, payloads)]
            everyone = {a._address for a in actors}
            return [pickle.loads(self._actor_result(c, a, timeout=timeout, started=started, everyone=everyone))
                    for c, a in zip(calls, actors)]

    @staticmethod
    def runner_targets(runners: Runners) -> list[tuple[str, str]]:
        """``(worker address, actor key)`` of every runner, in group order: where one
        runner reaches another (:class:`~..sharded.params.ActorExchange`)."""
        return [(a._address, a.key) for a in runners[1]]  # type: ignore[misc]  # (our keys: strings)

    def call_tree(self, runners: Runners, roots: Sequence[Node], step: TreeStep,
                  timeout: float | None = None) -> tuple[list[Answer], int]:
        """:meth:`GroupRunner.run_tree` on the ``roots`` (a runner tree of
        :func:`~.topology.runner_tree` over the groups) for ``step = (fn, args, tree,
        leaf)``, pickled once and forwarded down each subtree.  Returns the roots'
        answers ``(nodes, stats)`` in root order and the bytes through the driver (the
        step sent to each root, the answers received).  ``timeout``: see
        :meth:`_actor_result`."""
        _, actors = runners

        def spec(node: Node) -> RunnerSpec:  # (the ignore below: our actor keys are strings)
            a = actors[node.group]
            return node.group, a._address, a.key, tuple(spec(c) for c in node.children)  # type: ignore[return-value]

        payload = pickle.dumps(step)
        started = time.monotonic()
        with current_client(self.client):
            calls = [actors[r.group].run_tree(payload, r.group, tuple(spec(c) for c in r.children)) for r in roots]
            everyone = {a._address for a in actors}
            answers = [
                self._actor_result(c, actors[r.group], [actors[g]._address for g in tree_groups([r])],
                                   timeout=timeout, started=started, everyone=everyone)
                for c, r in zip(calls, roots)
            ]
        through = len(payload) * len(roots) + sum(len(a) for a in answers)
        simulated_network_delay(through, tree_depth(roots))
        return [pickle.loads(a) for a in answers], through

    def _actor_result(self, call: BaseActorFuture[bytes], actor: Actor,
                      addresses: Iterable[str | None] | None = None, *, timeout: float | None = None,
                      started: float | None = None, everyone: Collection[str] | None = None) -> bytes:
        """The result of an actor call, checking every :data:`ACTOR_POLL` seconds that
        the actor's worker (and every worker of ``addresses``: a runner tree's) is
        still in the cluster: a call in flight when a worker leaves (e.g. the whole
        cluster is scaled down, or a runner deep in the tree is lost without its
        parent noticing) may otherwise never resolve.  A gone worker raises
        ``OSError("Actor was lost ...")``, which the collective treats as a lost
        worker (recovery, or ClusterError without workers).

        ``timeout``: seconds after ``started`` (``time.monotonic()``; default now) that
        the call may wait before the workers of the step (``everyone``: every worker
        its calls went to, since one runner may wait on another; default
        ``addresses``) are asked after: one that has sent the scheduler no heartbeat
        for half that time (:meth:`silent_workers`) is *silent* (a stopped process, a
        suspended machine) and is dropped from the cluster (:meth:`drop_silent`), then
        treated as gone.  Workers that still answer are waited for, a WARNING saying
        so once."""
        if addresses is None:
            addresses = [getattr(actor, "_address", None)]
        addresses = [a for a in addresses if a is not None]
        deadline = None if timeout is None else (time.monotonic() if started is None else started) + timeout
        warned = False
        while True:
            if deadline is None:
                wait = ACTOR_POLL
            elif time.monotonic() < deadline:  # the first look at the deadline itself
                wait = min(ACTOR_POLL, max(deadline - time.monotonic(), 0.01))
            else:  # then a few looks per limit, and at most one a heartbeat
                wait = min(ACTOR_POLL, max(timeout / 4, 0.5))  # type: ignore[operator]  # (a deadline: a timeout)
            try:
                return call.result(timeout=wait)
            except TimeoutError:
                alive = set(self.workers())
                gone = [a for a in addresses if a not in alive]
                if gone:
                    raise OSError(f"Actor was lost: its worker {gone[0]} left the cluster") from None
                if deadline is None or time.monotonic() < deadline:
                    continue
                # (the ignore: a deadline means a timeout, and None addresses were filtered out above)
                silent, warned = self.drop_silent_or_warn(everyone or addresses,  # type: ignore[arg-type]
                                                          time.monotonic() - deadline + timeout,  # type: ignore[operator]
                                                          timeout, warned)  # type: ignore[arg-type]
                if silent:
                    address, quiet = next(iter(silent.items()))
                    raise OSError(f"Actor was lost: its worker {address} sent no heartbeat for {quiet:.1f} s "
                                  "and was dropped from the cluster") from None

    def silent_workers(self, addresses: Iterable[str], silence: float) -> dict[str, float]:
        """The workers of ``addresses`` that have sent the scheduler no heartbeat for
        more than ``silence`` seconds, and for more than :data:`SILENT_BEATS` of the
        intervals the scheduler asks its workers to keep: ``{address: seconds}`` (a
        frozen process sends none; a busy one still does, from its event loop)."""
        interval, quiet = self.client.run_on_scheduler(_seconds_since_heard, list(addresses))
        return {a: s for a, s in quiet.items() if s > max(silence, SILENT_BEATS * interval)}

    def drop_silent_or_warn(self, addresses: Iterable[str], waited: float, timeout: float, warned: bool,
                            what: str = "a step") -> tuple[dict[str, float], bool]:
        """After ``what`` has waited ``waited`` seconds, past its ``timeout``: drop the
        workers of ``addresses`` that are silent (:meth:`silent_workers` for half the
        timeout, then :meth:`drop_silent`), or, when every one still answers, say once
        (``warned``: said already) that they are waited for.  Returns ``(silent,
        warned)``: the dropped workers ``{address: seconds}`` (empty: none)."""
        silent = self.silent_workers(sorted(addresses), timeout / 2)
        if silent:
            self.drop_silent(silent, waited, timeout)
        elif not warned:
            warned = True
            logger.warning(
                "%s has waited %.3g s, over its limit of %.3g s (dask config dgd.step-timeout), but every worker "
                "it waits for still answers the scheduler: waiting on", what, waited, timeout)
        return silent, warned

    def drop_silent(self, silent: Mapping[str, float], waited: float, timeout: float) -> None:
        """Treat the ``silent`` workers (``{address: seconds since heard}``) as lost:
        the scheduler removes them (their keys are recomputed elsewhere, as for a
        killed worker) and asks each one's nanny, if it has one, to restart it (a
        frozen process is killed and replaced, as after a crash).  Logs a WARNING."""
        for address, quiet in silent.items():
            logger.warning(
                "worker %s sent no heartbeat for %.1f s while a step waited %.1f s (limit %.1f s, dask config "
                "dgd.step-timeout): treated as lost (removed from the cluster, its nanny asked to restart it)",
                address, quiet, waited, timeout)
        self.client.run_on_scheduler(_remove_silent, list(silent))

    def start_actor(self, cls: type, args: Sequence[Any], kwargs: Mapping[str, Any], *, worker: str,
                    key: str) -> tuple[Future, Actor]:
        """An actor ``cls(*args, **kwargs)`` on ``worker``: ``(future, proxy)``; give
        both to :meth:`release_runners` as ``([future], [proxy])`` when done."""
        future = self.client.submit(
            cls, *args, **kwargs, key=key, workers=[worker], allow_other_workers=True, actor=True
        )
        with current_client(self.client):
            return future, future.result()

    def actor_address(self, future: Future) -> str:
        """Address of the worker holding the actor of ``future``."""
        return self.client.who_has([future])[future.key][0]

    def call_actor(self, method: Callable[..., BaseActorFuture[Any]], *args: Any, **kwargs: Any) -> Any:
        """Call an actor's method and wait for its result."""
        with current_client(self.client):
            return method(*args, **kwargs).result()

    def call_actor_within(self, timeout: float, method: Callable[..., BaseActorFuture[Any]], *args: Any,
                          worker: str | None = None) -> Any:
        """:meth:`call_actor` that gives up after ``timeout`` seconds (TimeoutError): a
        call to an actor whose worker has gone may otherwise wait for ever.  With
        ``worker`` (the actor's), it gives up as soon as that worker has left the
        cluster (asked every :data:`ACTOR_POLL` seconds the call waits): nothing will
        answer."""
        with current_client(self.client):
            call = method(*args)
            deadline = time.monotonic() + timeout
            while True:
                left = deadline - time.monotonic()
                try:
                    return call.result(timeout=max(min(left, ACTOR_POLL) if worker else left, 0.01))
                except TimeoutError:
                    if call.done():  # the actor's own TimeoutError, not the wait's
                        raise
                    if time.monotonic() >= deadline:
                        raise TimeoutError(f"the actor call did not answer within {timeout:g} s") from None
                    if worker is not None and self._has_left(worker):
                        raise TimeoutError(f"the actor's worker {worker} left the cluster") from None

    def _has_left(self, worker: str) -> bool:
        """Whether the scheduler no longer lists ``worker`` (False when it cannot be
        asked, e.g. a client that lost its scheduler: :meth:`scheduler_lost` tells that).
        Unlike :meth:`workers`, it does not wait for workers to come."""
        if self.scheduler_lost():
            return False
        try:
            return worker not in self.client.run_on_scheduler(_worker_addresses)
        except Exception:  # noqa: BLE001 - an unreachable scheduler: keep waiting on the call
            return False

    def submit_pinned(self, fn: Callable[..., Any], *args: Any, worker: str, key: str) -> Future:
        """One task ``fn(*args)`` on ``worker`` (e.g. a long-running training loop)."""
        return self.client.submit(
            fn, *args, key=key, workers=[worker], allow_other_workers=True, pure=False
        )

    @property
    def scheduler_address(self) -> str | None:
        """The address of the client's scheduler (None if it cannot be told)."""
        try:
            return self.client.scheduler.address
        except Exception:  # noqa: BLE001 - a closed client may have no scheduler rpc left
            return None

    def scheduler_lost(self) -> bool:
        """Whether the client has lost its scheduler: it is reconnecting (every future
        it held, the shards among them, was cancelled) or has given up and closed."""
        return self.client.status not in ("running", "newly-created")

    def scheduler_error(self, step: int | None = None) -> ClusterError:
        """The :class:`~dask_dgd.exceptions.ClusterError` of a fit whose client lost its
        scheduler (``step``: the step in flight, if known)."""
        where = "" if step is None else f"; the fit stopped at step {step}"
        return ClusterError(
            f"lost the connection to the Dask scheduler at {self.scheduler_address} (the scheduler "
            f"process died or is unreachable; client status {self.client.status!r}){where}: the "
            "cluster's state, the fit's shards among it, is gone with it. Restart the scheduler and "
            "its workers, then fit again; to continue instead of starting over, fit with "
            "checkpoint=<folder> and call fit(..., resume=True) after a failure"
        )

    def workers(self) -> list[str]:
        timeout = dask.config.get("dgd.worker-timeout", 60)
        if self.scheduler_lost():
            raise self.scheduler_error()
        started = time.time()
        cause: BaseException | None
        try:
            self.client.wait_for_workers(1, timeout=timeout)
            # Asked of the scheduler itself: the client's cached scheduler_info() can be
            # replaced by a background refresh that carries no per-worker entries.
            workers = sorted(self.client.run_on_scheduler(_worker_addresses))
        except (TimeoutError, OSError, RuntimeError) as err:
            # RuntimeError: "ConnectionPool is closed", a client that lost its scheduler
            if self.scheduler_lost():
                raise self.scheduler_error() from err
            if not isinstance(err, (TimeoutError, OSError)):
                raise
            workers, cause = [], err
        else:
            cause = None
        if not workers:
            try:  # workers that are there but not running (paused, closing, restarting) are named
                states, removed = self.client.run_on_scheduler(_worker_states, since=started)
            except (OSError, RuntimeError):
                states, removed = {}, 0
            raise ClusterError(absent_workers_message(self.client.scheduler.address, states, removed,
                                                      time.time() - started)) from cause
        return workers

    def map_shards(self, fn: Callable[..., Any], handles: Sequence[Future], workers: Sequence[str | None],
                   args: Sequence[Any], name: str, token: str) -> list[Future]:
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

    def gather(self, handles: Iterable[Future], timeout: float | None = None,
               addresses: Iterable[str] = ()) -> list[Any]:
        """The results of ``handles``.  ``timeout``: seconds the tasks may take before
        the workers of ``addresses`` are asked after, as in :meth:`_actor_result`: the
        silent ones are dropped from the cluster (Dask then reruns their tasks
        elsewhere, as after a kill) and the wait starts again; workers that all still
        answer are waited for, a WARNING saying so once."""
        from distributed import wait

        handles = list(handles)
        if timeout is None:
            return self.client.gather(handles)
        started, warned = time.monotonic(), False
        while True:
            try:
                with current_client(self.client):
                    wait(handles, timeout=min(ACTOR_POLL, max(timeout / 4, 0.5)))
                return self.client.gather(handles)
            except TimeoutError:
                waited = time.monotonic() - started
                if waited < timeout:
                    continue
                silent, warned = self.drop_silent_or_warn(addresses, waited, timeout, warned)
                if silent:  # their tasks are rerun elsewhere: wait afresh
                    started = time.monotonic()

    def where(self, handles: Sequence[Future], fallback: Sequence[str]) -> list[str]:
        """The worker holding each handle now (``fallback`` where none is known)."""
        who = self.client.who_has(list(handles))
        return [
            w if w in who.get(h.key, ()) else (tuple(who.get(h.key, ())) or (w,))[0]
            for h, w in zip(handles, fallback)
        ]

    def wait(self, handles: Iterable[Future]) -> None:
        """Wait for the tasks; re-raise the first error."""
        for h in handles:
            if h.exception() is not None:
                h.result()

    def merge_level(self, tree: BlockTree, items: Sequence[Future], name: str) -> list[Future]:
        """One inner level of the reduction: merge tasks of ``split_every`` inputs."""
        k = tree.split_every
        submit = self.client.submit
        return [
            submit(tree.merge, *items[i : i + k], key=f"{name}-{i // k}", pure=False)
            for i in range(0, len(items), k)
        ]


class InProcessExecutor:
    """Runs shard functions directly in this process (small in-memory fits)."""

    kind: Literal["in-process"] = "in-process"

    def map_shards(self, fn: Callable[..., Any], handles: Sequence[Shard], workers: Sequence[str | None],
                   args: Sequence[Any], name: str, token: str) -> list[Any]:
        return [fn(h, *args) for h in handles]

    def gather(self, handles: Iterable[Any], timeout: float | None = None,
               addresses: Iterable[str | None] = ()) -> list[Any]:
        return list(handles)

    def merge_level(self, tree: BlockTree, items: Sequence[Mapping[NodeKey, Partial]],
                    name: str) -> list[dict[NodeKey, Partial]]:
        k = tree.split_every
        return [tree.merge(*items[i : i + k]) for i in range(0, len(items), k)]

    def workers(self) -> list[None]:
        return [None]


def leave_thread_pool() -> None:
    """On a worker, take this long-running loop out of the worker's task slots
    (``distributed.secede``).  Otherwise the loop holds a slot for the whole fit: on
    single-threaded workers another fit's loop or setup task waits behind it, and two
    asynchronous fits at once each trained some groups alone (objective several times
    the optimum) while their other loops queued behind each other."""
    try:
        from distributed import get_worker, secede

        get_worker()
    except (ImportError, ValueError):
        return  # in process: nothing to leave
    secede()


def runner_memory(ref: GroupMemory | str | None) -> GroupMemory:
    """The group's memory: ``ref`` itself in process; on a worker, the memory of the
    group's runner actor (``ref`` is its key), if it lives on this worker."""
    if ref is None:
        return GroupMemory()
    if isinstance(ref, GroupMemory):
        return ref
    try:
        from distributed import get_worker

        runner = get_worker().state.actors.get(ref)
    except (ImportError, ValueError, AttributeError):
        runner = None
    return GroupMemory() if runner is None else runner.scratch  # type: ignore[attr-defined]  # (a GroupRunner)
