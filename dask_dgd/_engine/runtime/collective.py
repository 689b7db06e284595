"""How a step reaches the groups and their sums come back: the collective operations.

A :class:`Collective` owns the step actors of one :class:`~..data.shards.ShardSet` (one
:class:`~.executor.GroupRunner` per group, on the group's worker, holding the shard and
the group's memory) and offers three operations:

- :meth:`Collective.reduce`: every group evaluates a step function and answers with its
  complete subtrees of the fixed block tree; the subtrees are merged into the root.
- :meth:`Collective.reduce_groups`: every group answers one partial (a local SGD
  round); they are summed in a fixed tree over the groups.
- :meth:`Collective.call`: every group runs a function; the results come back in group
  order (setup of local parameters, exports, checkpoints: once per fit, not per step).

In process, the same functions run on the shards directly.  On a cluster, a reduction
goes down and up the runner tree (:mod:`.topology`): the driver calls at most
``split_every`` root runners, each forwards the step to its children, computes its own
blocks, merges its subtree's answers in the fixed tree and answers its parent.  Where
the merges happen never changes the sums (they follow the block tree), so the tree, the
star (the driver calling every runner) and the in-process fit agree bit for bit
(``dgd.step-transport``; task steps through the scheduler are the third way).  A lost
worker, leaf or interior, is survived here: its shards are recomputed by Dask, the
runners restarted, the tree rebuilt over the workers that hold the shards now and the
call repeated, so a synchronous step gives the same sums as if nothing had happened.
A *frozen* worker (a stopped process, a machine that stopped answering) fails no call:
a call that waits past :meth:`Collective.step_timeout` asks the scheduler which of its
workers have gone silent, drops them from the cluster and recovers as for a lost one.
"""

from __future__ import annotations

import collections
import logging
import statistics
import time
from typing import TYPE_CHECKING, Any, cast

from ..data.blocks import combine_shards, take_blocks
from ..data.skew import groups_by_worker
from .executor import answer_stats, merge_stats, step_transport
from .group_steps import GroupMemory, group_block_states, group_set_block_states
from .reduce import BlockTree, tag_group
from .topology import runner_tree, tree_depth

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import TypeVar

    from distributed import Future

    from ..data.blocks import Shard
    from ..protocols import GroupedShards
    from .executor import DaskExecutor, Runners
    from .reduce import NodeKey, Partial
    from .topology import Node

    T = TypeVar("T")

__all__ = ["ACTOR_TIMEOUT_DEFAULT", "Collective", "MAX_RECOVERIES", "STEP_TIMEOUT_DEFAULT", "STEP_TIMEOUT_MULTIPLE",
           "actor_timeout", "step_timeout_floor"]

logger = logging.getLogger("dask_dgd")

#: Worker losses a call survives (each: shards recomputed, runners restarted, retry).
MAX_RECOVERIES = 3

#: Seconds a step may wait at least before its silent workers are dropped
#: (``dgd.step-timeout``), and the multiple of the median step time it may wait at most.
STEP_TIMEOUT_DEFAULT = 60.0
STEP_TIMEOUT_MULTIPLE = 20
#: Seconds a parameter server's call may take by default (``dgd.actor-timeout``, :func:`actor_timeout`).
ACTOR_TIMEOUT_DEFAULT = 10.0

#: Step times the median is taken over (the latest ones).
_STEP_TIMES_KEPT = 101


def step_timeout_floor() -> float | None:
    """``dgd.step-timeout`` in seconds (None: off, steps wait as long as they take).

    A number of seconds > 0 or a Dask duration string (``"90s"``, ``"2 minutes"``);
    ``None`` or ``False`` turns the limit off."""
    import dask

    value = dask.config.get("dgd.step-timeout", STEP_TIMEOUT_DEFAULT)
    if value is None or value is False:
        return None
    return _config_seconds("dgd.step-timeout", value, ", or None (no limit)")


def actor_timeout() -> float:
    """``dgd.actor-timeout`` in seconds (default :data:`ACTOR_TIMEOUT_DEFAULT`): how long
    a call of an asynchronous fit's parameter server (a poll, its stop, its result) may
    take before the driver asks the scheduler whether the server's worker still answers
    (a poll that brings the server's whole state waits at least 3 times as long as the
    last copy took).  A number of seconds > 0 or a Dask duration string; raise it where
    the server's answers are slow (a large model on a slow network, a loaded machine)."""
    import dask

    return _config_seconds("dgd.actor-timeout", dask.config.get("dgd.actor-timeout", ACTOR_TIMEOUT_DEFAULT))


def _config_seconds(key: str, value: Any, other: str = "") -> float:
    """The Dask config ``key``'s ``value`` as a finite number of seconds > 0
    (``ParameterError`` naming the key otherwise)."""
    from dask.utils import parse_timedelta

    from ...exceptions import ParameterError

    try:
        if isinstance(value, bool):
            raise TypeError
        seconds = float(parse_timedelta(value, default="seconds"))
    except (TypeError, ValueError, KeyError, AttributeError):  # what parse_timedelta raises
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise ParameterError(
            f"dask config {key} must be a number of seconds > 0, a duration such as '90s'{other}; got {value!r}"
        )
    return seconds


def _stateless(shard: Shard, fn: Callable[..., Any], *args: Any) -> Any:
    """A step function run as a task: a fresh group memory."""
    return fn(shard, GroupMemory(), *args)


_NO_STATS: dict[str, Any] = {"times": {}, "up": 0, "up_raw": 0, "nodes": 0, "spans": []}


class Collective:
    """The step transport of one shard set (see the module docstring)."""

    # (Typing: mypy cannot tell that a shard set on a cluster has a DaskExecutor, worker
    # addresses (never None) and, once started, runners; the ignores marked "cluster"
    # and the casts to DaskExecutor say so where only a cluster gets.)

    def __init__(self, shards: GroupedShards) -> None:
        self.shards = shards
        self._runners: Runners | None = None  # step actors, started on the first actor call
        self._scratch: list[GroupMemory] | None = None  # per-group memory in process
        self._layout = 0  # numbers the runner layouts (new actor keys after a move)
        #: the step in flight, as the fit numbers it (named in a lost scheduler's error)
        self.step: int | None = None
        #: why a lost worker ends this fit, when it does (None: its shards are recomputed
        #: by Dask and the call retried); set by the builder of the shards
        self.unrecoverable: str | None = None
        #: compute time of each group in the last step (actor steps; None otherwise)
        self.last_group_times: list[float] | None = None
        #: what the last reduce moved: tree depth, driver messages and bytes, the groups'
        #: partials (count, bytes as sent and uncompressed), seconds through each level
        self.last_traffic: dict[str, Any] = {"depth": 0, "messages": 0, "driver_bytes": 0, "nodes": 0, "bytes_up": 0,
                             "bytes_up_raw": 0, "level_times": []}
        #: wall seconds of the latest steps through the runners (for :meth:`step_timeout`)
        self.step_times: collections.deque[float] = collections.deque(maxlen=_STEP_TIMES_KEPT)

    # ------------------------------------------------------------------ runners
    @property
    def on_cluster(self) -> bool:
        return self.shards.executor.kind == "dask"

    def start(self) -> None:
        """Start the step actors now (setup, not part of the first step's time)."""
        if self.on_cluster and self._runners is None:
            sh = self.shards
            # a new key per layout: the old actors may not be forgotten yet
            self._runners = sh.executor.start_runners(
                sh.handles, sh.workers, f"{sh.token}-{self._layout}")

    def runner_keys(self) -> list[str]:
        """The key of each group's runner actor (started if needed; cluster only)."""
        self.start()
        return [f.key for f in self._runners[0]]  # type: ignore[index, misc]  # (cluster; keys: our strings)

    def runner_targets(self) -> list[tuple[str, str]]:
        """``(worker address, actor key)`` of each group's runner (started if needed;
        cluster only): how runners reach each other."""
        self.start()
        return self.shards.executor.runner_targets(self._runners)

    def step_timeout(self) -> float | None:
        """Seconds a call of the runners may wait before its silent workers are
        dropped as lost: ``max(dgd.step-timeout, 20 x the median step time)`` (the
        floor alone before the first step; None when ``dgd.step-timeout`` is None)."""
        floor = step_timeout_floor()
        if floor is None or not self.step_times:
            return floor
        return max(floor, STEP_TIMEOUT_MULTIPLE * statistics.median(self.step_times))

    def scratch(self) -> list[GroupMemory]:
        """Each group's memory, in process."""
        if self._scratch is None:
            self._scratch = [GroupMemory() for _ in self.shards.handles]
        return self._scratch

    def _release_runners(self) -> None:
        """Let go of the step actors now: the scheduler forgets their keys and the
        workers drop them, with the shard and scratch memory each holds.

        Dropping the proxies is not enough: a Dask actor proxy that has been called sits
        in a reference cycle (the closures of its calls), so only the garbage collector
        would release its key, at some later time.
        """
        runners, self._runners = self._runners, None
        if runners is not None:
            self.shards.executor.release_runners(runners)

    def close(self) -> None:
        self._release_runners()
        self._scratch = None

    def __del__(self) -> None:
        # the end of a fit: its actors go at once (see _release_runners)
        try:
            self._release_runners()
        except Exception:  # noqa: BLE001 - e.g. the client is closed; nothing to release
            pass

    # --------------------------------------------------------------- operations
    def call(self, fn: Callable[..., Any], *args: Any, per_group: Sequence[Sequence[Any]] | None = None,
             group: int | None = None) -> Any:
        """``fn(shard, scratch, *args, *per_group[g])`` on every group at once; the
        results in group order.  ``scratch`` stays with the group for the life of the
        shard set (the runner's memory on a cluster).  ``group``: on that group only
        (its result alone)."""
        if group is not None:
            if not self.on_cluster:
                return fn(self.shards.handles[group], self.scratch()[group], *args)
            ex = cast("DaskExecutor", self.shards.executor)
            return self._with_recovery(lambda: ex.call_runners(
                (None, [self._runners[1][group]]), fn, args, timeout=self.step_timeout()))[0]  # type: ignore[index]
        if not self.on_cluster:
            extras = per_group if per_group is not None else [()] * len(self.shards.handles)
            return [fn(h, s, *args, *e) for h, s, e in zip(self.shards.handles, self.scratch(), extras)]
        ex = cast("DaskExecutor", self.shards.executor)
        return self._with_recovery(lambda: ex.call_runners(
            self._runners, fn, args, per_group=per_group, timeout=self.step_timeout()))  # type: ignore[arg-type]

    def uses_tasks(self, stateless: bool) -> bool:
        """Whether a step goes as tasks (cluster, stateless, ``dgd.step-transport="task"``)."""
        return self.on_cluster and stateless and step_transport() == "task"

    def reduce(self, fn: Callable[..., Any], *args: Any, split_every: int, size: int | None, name: str,
               stateless: bool = False, step: int | None = None) -> Partial:
        """One step: ``fn(shard, scratch, *args, tree)`` on every group, each answering
        with its complete subtrees (or leaves) of the block tree, merged into the root
        :class:`~.reduce.Partial`.  ``size``: the gradient's length.  ``stateless``
        steps may run as tasks (they need no group memory).  ``step``: the fit's number
        of this step, named if it fails (None: not a training step)."""
        if step is not None:
            self.step = step
        tree = BlockTree(self.shards.n_blocks, split_every, size=size)
        if self.uses_tasks(stateless):
            return self._reduce_tasks(fn, args, tree, name)
        return tree.root(self._reduce(fn, (*args, tree), tree, leaf=False))

    def reduce_groups(self, fn: Callable[..., Any], *args: Any, split_every: int, step: int | None = None,
                      size: int | None = None, dense: bool = True) -> Partial:
        """``fn(shard, scratch, *args)`` on every group, each answering one
        :class:`~.reduce.Partial`, summed in the tree of fan-in ``split_every`` over the
        groups in group order (so the sum does not depend on where it is taken).
        ``step``: the fit's number of this round, named if it fails; ``size``: the
        gradient's length (needed when the groups answer compressed); ``dense=False``: a
        sum of sparse answers comes back a :class:`~.reduce.SparseVector` where it still is
        one (see :meth:`~.reduce.BlockTree.root`)."""
        if step is not None:
            self.step = step
        tree = BlockTree(self.shards.n_groups, split_every, size=size)
        return tree.root(self._reduce(fn, args, tree, leaf=True), dense=dense)

    def _reduce(self, fn: Callable[..., Any], args: tuple[Any, ...], tree: BlockTree,
                leaf: bool) -> dict[NodeKey, Partial]:
        """The merged nodes of every group's answer (see :meth:`reduce`), through the
        runner tree on a cluster; records the traffic and the groups' times."""
        sh = self.shards
        if not self.on_cluster:
            nodes = [fn(h, s, *args) for h, s in zip(sh.handles, self.scratch())]
            nodes = [tag_group({(0, g): n} if leaf else n, g) for g, n in enumerate(nodes)]
            stats = merge_stats(_NO_STATS, [answer_stats(n, g, tree.size) for g, n in enumerate(nodes)])
            self._traffic(stats, depth=0, messages=0, driver_bytes=0)
            self.last_group_times = None
            return tree.merge(*nodes)
        fan_in = tree.split_every if step_transport() == "tree" else max(sh.n_groups, 2)
        ex = cast("DaskExecutor", sh.executor)

        def attempt() -> tuple[tuple[Node, ...], tuple[list[Any], int]]:
            roots = runner_tree(range(sh.n_groups), fan_in)
            started = time.perf_counter()
            out = ex.call_tree(self._runners, roots, (fn, args, tree, leaf),  # type: ignore[arg-type]  # (started)
                               timeout=self.step_timeout())
            self.step_times.append(time.perf_counter() - started)  # only steps that went through
            return roots, out

        roots, (answers, driver_bytes) = self._with_recovery(attempt)
        stats = merge_stats(_NO_STATS, [a[1] for a in answers])
        self._traffic(stats, depth=tree_depth(roots), messages=2 * len(roots), driver_bytes=driver_bytes)
        self.last_group_times = [stats["times"].get(g, 0.0) for g in range(sh.n_groups)]
        return tree.merge(*(a[0] for a in answers))

    def _traffic(self, stats: dict[str, Any], *, depth: int, messages: int, driver_bytes: int | None) -> None:
        self.last_traffic = {
            "depth": depth, "messages": messages, "driver_bytes": driver_bytes, "nodes": stats["nodes"],
            "bytes_up": stats["up"], "bytes_up_raw": stats["up_raw"], "level_times": stats["spans"],
        }

    def _reduce_tasks(self, fn: Callable[..., Any], args: tuple[Any, ...], tree: BlockTree, name: str) -> Partial:
        sh, ex = self.shards, cast("DaskExecutor", self.shards.executor)  # (tasks: on a cluster)
        self.last_group_times = None
        call = sh._call_token()
        try:
            level = ex.map_shards(_stateless, sh.handles, sh.workers, (fn, *args, tree), f"dgd-{name}", call)
            depth = 1
            while len(level) > tree.split_every:
                level = ex.merge_level(tree, level, f"dgd-reduce-{name}-{call}-{depth}")
                depth += 1
            results = ex.gather(level, self.step_timeout(), sh.workers)
        except Exception as err:
            self._raise_if_scheduler_lost(err)
            raise
        stats = merge_stats(_NO_STATS, [answer_stats(n, g, tree.size) for g, n in enumerate(results)])
        self._traffic(stats, depth=depth, messages=2 * len(level), driver_bytes=None)
        return tree.root(tree.merge(*results))

    # ----------------------------------------------------------------- recovery
    def _with_recovery(self, attempt: Callable[[], T]) -> T:  # type: ignore[return]  # (the last try raises)
        """``attempt()`` (a call of the runners); if a worker holding one was lost,
        recover and retry.

        A lost worker takes its runner (and the runner's scratch memory) with it; Dask
        recomputes the lost shards from their persisted blocks on the remaining
        workers.  The shards are waited for, their new places recorded, every runner
        restarted (the groups' scratch memory starts afresh) and the call repeated
        with the same arguments.  Errors of the step itself are raised as they are.
        """
        for tries in range(MAX_RECOVERIES + 1):
            try:
                self.start()
                return attempt()
            except Exception as err:
                self._raise_if_scheduler_lost(err)
                try:
                    lost = tries < MAX_RECOVERIES and self._lost_a_worker(err)
                    if lost:
                        self._recover()
                except Exception as inner:
                    self._raise_if_scheduler_lost(inner)
                    raise
                if not lost:
                    raise

    def _raise_if_scheduler_lost(self, err: BaseException) -> None:
        """Raise the executor's ClusterError of a lost scheduler (naming the step in
        flight) if ``err`` came with the loss of the client's scheduler: no worker can
        be waited for then, and no shard recomputed."""
        ex = self.shards.executor
        if getattr(ex, "kind", None) == "dask" and ex.scheduler_lost():
            raise ex.scheduler_error(self.step) from err

    def _lost_a_worker(self, err: BaseException) -> bool:
        """Whether ``err`` came from losing a group's worker.  A connection error may
        arrive before the scheduler has noticed the loss: it is then given up to
        ``dgd.worker-loss-timeout`` seconds (10) to do so."""
        ex = self.shards.executor

        def lost() -> bool:
            alive = set(ex.workers())
            return any(w not in alive for w in self.shards.workers)

        connection = isinstance(err, OSError) or "Actor was lost" in str(err)
        if not connection:
            return lost()
        import dask

        deadline = time.monotonic() + float(dask.config.get("dgd.worker-loss-timeout", 10))
        while True:
            if lost():
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)

    def _recover(self) -> None:
        """Wait for the shards after a worker loss; restart the runners (or raise
        ClusterError, saying why, for shards set :attr:`unrecoverable`)."""
        sh, ex = self.shards, cast("DaskExecutor", self.shards.executor)  # (recovery: on a cluster)
        alive = set(ex.workers())
        lost = sorted({w for w in sh.workers if w not in alive})
        if self.unrecoverable is not None:
            from ...exceptions import ClusterError

            at = "" if self.step is None else f" at step {self.step}"
            raise ClusterError(f"lost worker(s) {lost}{at}: {self.unrecoverable}")
        try:
            ex.wait(sh.handles)  # Dask recomputes the lost ones
            workers = ex.where(sh.handles, sh.workers)
        except Exception as err:
            from ...exceptions import ClusterError

            raise ClusterError(
                f"lost worker(s) {lost} held shards that cannot be recomputed ({type(err).__name__}): "
                "in-memory input is scattered to the workers and exists nowhere else; pass "
                "a dask array (e.g. da.from_array(X, chunks=...)) to survive worker loss"
            ) from err
        sh.workers = workers
        self._layout += 1  # new runner keys
        self._release_runners()
        sh.recoveries.append({"lost": lost, "workers": list(sh.workers)})
        logger.warning("lost worker(s) %s: shards recomputed on %s, step retried", lost, sorted(set(sh.workers)))

    # ------------------------------------------------------------------ regroup
    def regroup(self, placement: Sequence[str]) -> int:
        """Move blocks so that block ``b`` lives on ``placement[b]``; returns the number
        of blocks moved.  Only the moved blocks travel (a piece of each old shard is cut
        where it lives, the pieces are combined on the new worker); the per-block state
        (compression residuals) moves with its block; the runners restart.  Sums do not
        change: they follow the block tree."""

        sh, ex = self.shards, cast("DaskExecutor", self.shards.executor)  # (used on a cluster only)
        if not self.on_cluster:
            return 0
        old = sh.placement()
        moved = sum(1 for b, w in enumerate(placement) if old[b] != w)
        if not moved:
            return 0
        states: dict[int, Any] = {}
        if self._runners is not None:
            for group in self.call(group_block_states):
                states.update(group)
        where = {b: g for g, blocks in enumerate(sh.groups) for b in blocks}
        self._layout += 1
        tag = f"{sh.token}-{self._layout}"
        new_groups, new_workers = groups_by_worker(placement, set(placement))
        handles: list[Future] = []
        for i, (blocks, w) in enumerate(zip(new_groups, new_workers)):
            by_old: dict[int, list[int]] = {}
            for b in blocks:
                by_old.setdefault(where[b], []).append(b)
            if len(by_old) == 1:
                ((g_old, bl),) = by_old.items()
                if tuple(bl) == sh.groups[g_old] and sh.workers[g_old] == w:
                    handles.append(sh.handles[g_old])  # unchanged group
                    continue
            pieces = [
                sh.handles[g_old] if tuple(bl) == sh.groups[g_old] else ex.submit_pinned(
                    take_blocks, sh.handles[g_old], bl, worker=sh.workers[g_old],
                    key=f"dgd-take-{tag}-{i}-{g_old}",
                )
                for g_old, bl in sorted(by_old.items())
            ]
            handles.append(ex.submit_pinned(combine_shards, *pieces, worker=w, key=f"dgd-shard-{tag}-{i}"))
        ex.wait(handles)
        sh.handles, sh.groups, sh.workers = handles, [tuple(g) for g in new_groups], list(new_workers)
        self._release_runners()  # restarted on the next call
        if states:
            self.call(group_set_block_states, per_group=[({b: states[b] for b in g if b in states},)
                                                         for g in sh.groups])
        return moved
