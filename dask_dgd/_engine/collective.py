"""How a step reaches the groups and their sums come back: the collective operations.

A :class:`Collective` owns the step actors of one :class:`~.shards.ShardSet` (one
:class:`~.executor.GroupRunner` per group, on the group's worker, holding the shard and
the group's memory) and offers two operations:

- :meth:`Collective.reduce`: every group evaluates a step function and answers with its
  complete subtrees of the fixed block tree; the subtrees are merged into the root.
- :meth:`Collective.call`: every group runs a function; the results come back in group
  order (setup of local parameters, exports, checkpoints, local SGD rounds).

In process, the same functions run on the shards directly.  On a cluster, a step is one
actor call per group (merged on the driver), or, for large stateless steps on many
groups, one task per group with the inner tree levels as tasks on the cluster
(``dgd.step-transport``).  A lost worker is survived here: its shards are recomputed by
Dask, the runners restarted and the call repeated, so a synchronous step gives the same
sums as if nothing had happened.
"""

import logging
import time

from .blocks import combine_shards, take_blocks
from .executor import step_transport
from .kernels import group_block_states, group_set_block_states
from .reduce import BlockTree, Compressed, grad_nbytes
from .skew import groups_by_worker

__all__ = ["Collective", "MAX_RECOVERIES"]

logger = logging.getLogger("dask_dgd")

#: Worker losses a call survives (each: shards recomputed, runners restarted, retry).
MAX_RECOVERIES = 3


def _stateless(shard, fn, *args):
    """A step function run as a task: a fresh scratch dict."""
    return fn(shard, {}, *args)


def _node_bytes(partial):
    """Bytes of one partial as it travels: its gradient, its extras, 16 for the scalars."""
    extra = sum(int(getattr(v, "nbytes", 8)) for v in partial.extras.values())
    return grad_nbytes(partial.grad_sum) + extra + 16


class Collective:
    """The step transport of one shard set (see the module docstring)."""

    def __init__(self, shards):
        self.shards = shards
        self._runners = None  # step actors, started on the first actor call
        self._scratch = None  # per-group memory in process
        self._layout = 0  # numbers the runner layouts (new actor keys after a move)
        #: compute time of each group in the last step (actor steps; None otherwise)
        self.last_group_times = None
        #: what the last reduce moved through the driver: messages and bytes
        self.last_traffic = {"messages": 0, "nodes": 0, "bytes_up": 0, "bytes_up_raw": 0}

    # ------------------------------------------------------------------ runners
    @property
    def on_cluster(self):
        return self.shards.executor.kind == "dask"

    def start(self):
        """Start the step actors now (setup, not part of the first step's time)."""
        if self.on_cluster and self._runners is None:
            sh = self.shards
            # a new key per layout: the old actors may not be forgotten yet
            self._runners = sh.executor.start_runners(sh.handles, sh.workers, f"{sh.token}-{self._layout}")

    def runner_keys(self):
        """The key of each group's runner actor (started if needed; cluster only)."""
        self.start()
        return [f.key for f in self._runners[0]]

    def scratch(self):
        """Each group's memory, in process."""
        if self._scratch is None:
            self._scratch = [{} for _ in self.shards.handles]
        return self._scratch

    def _release_runners(self):
        """Let go of the step actors now: the scheduler forgets their keys and the
        workers drop them, with the shard and scratch memory each holds.

        Dropping the proxies is not enough: a Dask actor proxy that has been called sits
        in a reference cycle (the closures of its calls), so only the garbage collector
        would release its key, at some later time.
        """
        runners, self._runners = self._runners, None
        if runners is not None:
            self.shards.executor.release_runners(runners)

    def close(self):
        self._release_runners()
        self._scratch = None

    def __del__(self):
        # the end of a fit: its actors go at once (see _release_runners)
        try:
            self._release_runners()
        except Exception:  # noqa: BLE001 - e.g. the client is closed; nothing to release
            pass

    # --------------------------------------------------------------- operations
    def call(self, fn, *args, per_group=None):
        """``fn(shard, scratch, *args, *per_group[g])`` on every group at once; the
        results in group order.  ``scratch`` stays with the group for the life of the
        shard set (the runner's memory on a cluster)."""
        if not self.on_cluster:
            extras = per_group if per_group is not None else [()] * len(self.shards.handles)
            return [fn(h, s, *args, *e) for h, s, e in zip(self.shards.handles, self.scratch(), extras)]
        return self._with_recovery(fn, args, per_group)

    def uses_tasks(self, result_bytes, split_every, stateless):
        """Whether a step goes as tasks (cluster, stateless, ``dgd.step-transport``)."""
        if not (self.on_cluster and stateless):
            return False
        return step_transport(self.shards.n_groups, result_bytes, split_every) == "task"

    def reduce(self, fn, *args, split_every, size, name, stateless=False):
        """One step: ``fn(shard, scratch, *args, tree)`` on every group, each answering
        with its complete subtrees (or leaves) of the block tree, merged into the root
        :class:`~.reduce.Partial`.  ``size``: the gradient's length.  ``stateless``
        steps may run as tasks (they need no group memory)."""
        sh = self.shards
        tree = BlockTree(sh.n_blocks, split_every, size=size)
        if self.uses_tasks(8 * size, split_every, stateless):
            return self._reduce_tasks(fn, args, tree, name)
        results = self.call(fn, *args, tree)
        self.last_group_times = (
            [max((p.time_max for p in nodes.values()), default=0.0) for nodes in results] if self.on_cluster else None
        )
        self._count(results, size)
        return tree.root(tree.merge(*results))

    def _count(self, results, size):
        """What the groups' answers weigh: nodes, bytes as sent and uncompressed."""
        nodes = [p for r in results for p in r.values()]
        sent = [_node_bytes(p) for p in nodes]
        raw = [8 * size + 16 if isinstance(p.grad_sum, Compressed) else b for p, b in zip(nodes, sent)]
        self.last_traffic = {"messages": 2 * len(results), "nodes": len(nodes), "bytes_up": sum(sent),
                             "bytes_up_raw": sum(raw)}

    def _reduce_tasks(self, fn, args, tree, name):
        sh, ex = self.shards, self.shards.executor
        self.last_group_times = None
        call = sh._call_token()
        level = ex.map_shards(_stateless, sh.handles, sh.workers, (fn, *args, tree), f"dgd-{name}", call)
        depth = 0
        while len(level) > tree.split_every:
            level = ex.merge_level(tree, level, f"dgd-reduce-{name}-{call}-{depth}")
            depth += 1
        results = ex.gather(level)
        self._count(results, tree.size)
        self.last_traffic["messages"] = 2 * len(level)
        return tree.root(tree.merge(*results))

    # ----------------------------------------------------------------- recovery
    def _with_recovery(self, fn, args, per_group):
        """Call every runner; if a worker holding one was lost, recover and retry.

        A lost worker takes its runner (and the runner's scratch memory) with it; Dask
        recomputes the lost shards from their persisted blocks on the remaining
        workers.  The shards are waited for, their new places recorded, every runner
        restarted (the groups' scratch memory starts afresh) and the call repeated
        with the same arguments.  Errors of the step itself are raised as they are.
        """
        ex = self.shards.executor
        for attempt in range(MAX_RECOVERIES + 1):
            try:
                self.start()
                return ex.call_runners(self._runners, fn, args, per_group=per_group)
            except Exception as err:
                if attempt == MAX_RECOVERIES or not self._lost_a_worker(err):
                    raise
                self._recover()

    def _lost_a_worker(self, err):
        """Whether ``err`` came from losing a group's worker.  A connection error may
        arrive before the scheduler has noticed the loss: it is then given up to
        ``dgd.worker-loss-timeout`` seconds (10) to do so."""
        ex = self.shards.executor

        def lost():
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

    def _recover(self):
        """Wait for the shards after a worker loss; restart the runners."""
        sh, ex = self.shards, self.shards.executor
        alive = set(ex.workers())
        lost = sorted({w for w in sh.workers if w not in alive})
        try:
            ex.wait(sh.handles)  # Dask recomputes the lost ones
            workers = ex.where(sh.handles, sh.workers)
        except Exception as err:
            from ..exceptions import ClusterError

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
    def regroup(self, placement):
        """Move blocks so that block ``b`` lives on ``placement[b]``; returns the number
        of blocks moved.  Only the moved blocks travel (a piece of each old shard is cut
        where it lives, the pieces are combined on the new worker); the per-block state
        (compression residuals) moves with its block; the runners restart.  Sums do not
        change: they follow the block tree."""

        sh, ex = self.shards, self.shards.executor
        if not self.on_cluster:
            return 0
        old = sh.placement()
        moved = sum(1 for b, w in enumerate(placement) if old[b] != w)
        if not moved:
            return 0
        states = {}
        if self._runners is not None:
            for group in self.call(group_block_states):
                states.update(group)
        where = {b: g for g, blocks in enumerate(sh.groups) for b in blocks}
        self._layout += 1
        tag = f"{sh.token}-{self._layout}"
        new_groups, new_workers = groups_by_worker(placement, set(placement))
        handles = []
        for i, (blocks, w) in enumerate(zip(new_groups, new_workers)):
            by_old = {}
            for b in blocks:
                by_old.setdefault(where[b], []).append(b)
            if len(by_old) == 1:
                ((g_old, bl),) = by_old.items()
                if tuple(bl) == sh.groups[g_old] and sh.workers[g_old] == w:
                    handles.append(sh.handles[g_old])  # unchanged group
                    continue
            pieces = [
                sh.handles[g_old] if tuple(bl) == sh.groups[g_old] else ex.submit_pinned(
                    take_blocks, sh.handles[g_old], bl, worker=sh.workers[g_old], key=f"dgd-take-{tag}-{i}-{g_old}",
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
