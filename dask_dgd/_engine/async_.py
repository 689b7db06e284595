"""Asynchronous DGD: a parameter-server actor and one long-running loop per group.

The server (:class:`ParameterServer`, a Dask actor on the first group's worker) holds
the parameters and the optimizer state.  Each group runs :func:`async_group_loop` as
one long task pinned to the worker holding its blocks: push the last mini-batch sums,
receive the current parameters, compute the next sums, and so on.  The server applies
an update on every arrival, so no group ever waits for another, except under the
staleness bound.

Update rule.  The server keeps the latest sums ``(loss, gradient, weight)`` of every
group and steps along their weighted mean (an *incremental aggregated gradient*):
with data pinned to workers, applying each arrival alone would weight a fast worker's
rows more than a slow one's and converge to the optimum of the wrong objective; the
aggregate keeps every row's weight whatever the speeds.

Two measures of staleness are recorded for every applied gradient:

- ``staleness``: how many steps the pushing group was ahead of the slowest group when
  it received the parameters it computed on (its *clock lead*).  ``max_staleness=s``
  makes a group that is ``s`` steps ahead wait (stale synchronous parallel); ``None``
  never waits.
- ``delay``: server updates applied between that pull and this push.

``staleness_scaling=True`` divides each update by ``1 + delay``.
"""

import asyncio
import math
import time

import numpy as np

from ..exceptions import ClusterError, DivergenceError
from .shards import batch_sums, inject_faults, releases_shards_on_error, sum_in_block_order
from .sync import MAX_BACKOFFS, EpochStopper, FitResult, batch_allocation, divergence_message, first_order_start

__all__ = ["ServerCore", "ParameterServer", "async_group_loop", "run_async"]

#: Seconds between the driver's polls of the server (records, errors, max_time).
POLL_INTERVAL = 0.05


class ServerCore:
    """The parameter server's state and rules, free of any transport (tested directly)."""

    def __init__(
        self,
        params,
        optimizer,
        opt_state,
        objective,
        penalty,
        n_groups,
        *,
        n_rows,
        max_epochs,
        tol,
        max_staleness=None,
        staleness_scaling=False,
        max_time=None,
        time_message=None,
        start_wall=None,
        max_backoffs=MAX_BACKOFFS,
    ):
        self.max_backoffs = int(max_backoffs)
        self.params = np.array(params, dtype=np.float64, copy=True)
        self.optimizer = optimizer
        self.state = opt_state
        self.objective = objective
        self.penalty = penalty
        self.decay_mask = penalty.mask(objective)
        self.n_groups = int(n_groups)
        self.n_rows = int(n_rows)
        self.max_epochs = int(max_epochs)
        self.max_staleness = max_staleness
        self.staleness_scaling = bool(staleness_scaling)
        self.max_time = max_time
        self.time_message = time_message or f"reached max_time={max_time} s"
        self.start_wall = time.time() if start_wall is None else start_wall
        self.version = 0  # updates applied
        self.valid_from = 0  # pushes computed from older versions are discarded
        self.clock = [0] * self.n_groups  # pushes received from each group
        self.pulled = [0] * self.n_groups  # version each group last received
        self.lead = [0] * self.n_groups  # its clock lead at that moment
        self.latest = [None] * self.n_groups  # latest (loss, grad, weight) of each group
        self.snapshots = {0: (self.params, self.state, self.optimizer)}
        self.good = 0  # latest version whose parameters gave finite sums
        self.backoffs = 0
        self.rows_seen = 0
        self.stopper = EpochStopper(tol)
        self.stopped, self.converged, self.message, self.error = False, False, "", None
        self.records = []
        self._round = []
        self._round_start = self.start_wall
        self.n_pushes = 0

    # ------------------------------------------------------------------ access
    def clock_lead(self, g):
        return self.clock[g] - min(self.clock)

    def may_proceed(self, g):
        """Whether group ``g`` may compute its next step now (the staleness bound)."""
        s = self.max_staleness
        return self.stopped or s is None or self.clock_lead(g) <= s

    def pull(self, g):
        """The current parameters for group ``g``, which computes on them next."""
        self.pulled[g] = self.version
        self.lead[g] = self.clock_lead(g)
        self.snapshots.setdefault(self.version, (self.params, self.state, self.optimizer))
        self._prune()
        return {
            "params": self.params,
            "version": self.version,
            "clock": self.clock[g],
            "stop": self.stopped,
        }

    def stop(self, message="", converged=False, error=None):
        if not self.stopped:
            self.stopped, self.message, self.converged, self.error = True, message, converged, error
            self._emit(time.time())

    # ------------------------------------------------------------------ update
    def push(self, g, msg, wait_time=0.0):
        """Apply group ``g``'s sums (``msg`` from :func:`async_group_loop`)."""
        if self.stopped:
            return
        now = time.time()
        self.clock[g] += 1
        self.n_pushes += 1
        self.rows_seen += int(msg["rows"])
        delay = self.version - msg["version"]
        stat = {
            "group": g,
            "lead": self.lead[g],
            "delay": delay,
            "wait": float(wait_time),
            "time": float(msg["time"]),
            "weight": float(msg["weight"]),
        }
        if msg["version"] < self.valid_from:
            self._round.append(stat)  # computed on parameters rolled back since
            return self._after_push(now)
        loss, grad, weight = float(msg["loss"]), np.asarray(msg["grad"]), float(msg["weight"])
        if not (math.isfinite(loss) and np.all(np.isfinite(grad))):
            self._round.append(stat)
            self._backoff(g)
            return self._after_push(now)
        self.good = max(self.good, msg["version"])
        if weight <= 0:  # only zero-weight rows drawn: no information, no update
            self._round.append(stat)
            return self._after_push(now)
        self.latest[g] = (loss, grad, weight)
        parts = [p for p in self.latest if p is not None]
        if not parts:
            self._round.append(stat)
            return self._after_push(now)
        total_loss, total_grad, total_weight = 0.0, np.zeros_like(self.params), 0.0
        for l_, g_, w_ in parts:  # group order: the rounding does not depend on arrival
            total_loss += l_
            total_grad += g_
            total_weight += w_
        pen_value, pen_grad = self.penalty.smooth_value_gradient(self.params, self.objective)
        value = total_loss / total_weight + pen_value + self.penalty.l1_value(self.params, self.objective)
        agg = total_grad / total_weight + pen_grad
        lr = self.optimizer.current_learning_rate(self.state)
        updates, state = self.optimizer.update(agg, self.state, self.params, decay_mask=self.decay_mask)
        scale = 1.0 / (1.0 + delay) if self.staleness_scaling else 1.0
        params = self.params + scale * updates
        if self.penalty.has_l1:
            params = self.penalty.prox(params, scale * lr, self.objective)
        if not np.all(np.isfinite(params)):
            self._round.append(stat)
            self._backoff(g)
            return self._after_push(now)
        self.backoffs = 0
        self.params, self.state = params, state
        self.version += 1
        stat.update(value=value, grad_norm=float(np.linalg.norm(agg)), lr=scale * lr)
        self._round.append(stat)
        self._epoch_progress(value)
        return self._after_push(now)

    def _backoff(self, g):
        """Non-finite sums or parameters: back to the last good version, half the step."""
        self.backoffs += 1
        if self.backoffs > self.max_backoffs:
            self.stop(error=divergence_message(
                f"asynchronous training diverged at update {self.version}", self.max_backoffs
            ))
            return
        params, state, optimizer = self.snapshots.get(self.good, self.snapshots[min(self.snapshots)])
        self.optimizer = optimizer.scale_learning_rate(0.5)
        self.params, self.state = params, state
        self.latest = [None] * self.n_groups
        self.version += 1
        self.valid_from = self.version
        self.snapshots = {self.version: (self.params, self.state, self.optimizer)}
        self.good = self.version

    def _prune(self):
        keep = set(self.pulled) | {self.good, self.version}
        for v in [v for v in self.snapshots if v not in keep]:
            del self.snapshots[v]

    def _epoch_progress(self, value):
        """Stopping on ``tol``: the epoch's mean update objective, as in sync SGD."""
        if self.stopper.add(value, self.rows_seen // self.n_rows):
            self.stop(converged=True)

    def _after_push(self, now):
        if len(self._round) >= self.n_groups:
            self._emit(now)
        if self.stopped:
            return
        if self.rows_seen >= self.max_epochs * self.n_rows:
            self.stop(message=f"reached max_iter={self.max_epochs}")
        elif self.max_time is not None and now - self.start_wall >= self.max_time:
            self.stop(message=self.time_message)

    def _emit(self, now):
        """One history record for the pushes since the last one (a round of
        ``n_groups`` pushes, or what is left at the stop)."""
        stats, self._round = self._round, []
        if not stats:
            return
        applied = [s for s in stats if "value" in s]
        last = applied[-1] if applied else {}
        counts = [0] * self.n_groups
        for s in stats:
            counts[s["group"]] += 1
        leads = [s["lead"] for s in stats]
        delays = [s["delay"] for s in stats]
        times = [s["time"] for s in stats]
        self.records.append(
            {
                "step": self.version,
                "iteration": -(-self.rows_seen // self.n_rows),
                "loss": last.get("value", math.nan),
                "grad_norm": last.get("grad_norm", math.nan),
                "step_size": last.get("lr"),
                "wall": now,
                "step_time": now - self._round_start,
                "compute_time_max": max(times),
                "compute_time_min": min(times),
                "n_samples": sum(s["weight"] for s in stats),
                "staleness_max": max(leads),
                "staleness_mean": float(np.mean(leads)),
                "delay_max": max(delays),
                "delay_mean": float(np.mean(delays)),
                "wait_time": max(s["wait"] for s in stats),
                "updates_per_group": tuple(counts),
                "comm_bytes": 2 * 8 * self.params.size * len(stats),
                "bytes_up_raw": 8 * self.params.size * len(stats),
                "bytes_up": 8 * self.params.size * len(stats),
                "bytes_down": 8 * self.params.size * len(stats),
            }
        )
        self._round_start = now

    def drain(self):
        """Records since the last drain, and whether training has stopped."""
        records, self.records = self.records, []
        return records, self.stopped

    def result(self):
        return {
            "params": self.params,
            "optimizer": self.optimizer,
            "state": self.state,
            "epochs": min(self.max_epochs, -(-self.rows_seen // self.n_rows)),
            "converged": self.converged,
            "message": self.message,
            "error": self.error,
            "updates": self.version,
        }


class ParameterServer:
    """Dask actor around a :class:`ServerCore`; its methods run on the worker's event
    loop, so a group waiting at the staleness bound never blocks the others."""

    def __init__(self, *args, core_state=None, **kwargs):
        if core_state is None:
            self.core = ServerCore(*args, **kwargs)
        else:  # restarted from the driver's copy (its first worker was lost)
            self.core = ServerCore.__new__(ServerCore)
            self.core.__dict__.update(core_state)
        self._cond = None

    def _condition(self):
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    async def exchange(self, g, msg):
        """Apply ``msg`` (None on the first call), wait for the bound, return the
        parameters to compute on next."""
        core, cond = self.core, self._condition()
        async with cond:
            if msg is not None:
                core.push(g, msg, msg.pop("wait", 0.0))
            cond.notify_all()
            t0 = time.perf_counter()
            await cond.wait_for(lambda: core.may_proceed(g))
            reply = core.pull(g)
        reply["wait"] = time.perf_counter() - t0
        return reply

    async def stop(self, message="", error=None):
        cond = self._condition()
        async with cond:
            self.core.stop(message=message, error=error)
            cond.notify_all()

    async def drain(self):
        return self.core.drain()

    async def drain_with_state(self):
        """The records since the last drain, whether training stopped, and a copy of the
        server's whole state (what a new server restarts from if this worker is lost)."""
        records, stopped = self.core.drain()
        return records, stopped, dict(vars(self.core))

    async def result(self):
        return self.core.result()


def _leave_thread_pool():
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


def async_group_loop(shard, server, g, objective, seed, group_batch):
    """One group's loop (a long-running task): push sums, pull parameters, compute.

    ``group_batch`` rows per step (None: all rows) are allocated over the group's
    blocks in proportion to their rows; the draw is seeded by the random state, the
    group's step count and the block.
    """
    _leave_thread_pool()
    rows = [b.n_rows for b in shard.blocks]
    msg, steps = None, 0
    while True:
        reply = server.exchange(g, msg).result()
        if reply["stop"]:
            return steps
        t0 = time.perf_counter()
        take = None
        if group_batch is not None and group_batch < sum(rows):
            alloc = batch_allocation(rows, group_batch, (*seed, g, reply["clock"]))
            take = {b.index: int(k) for b, k in zip(shard.blocks, alloc)}
        sums = batch_sums(shard, objective, reply["params"], seed, reply["clock"], take)
        loss, grad, weight = sum_in_block_order(sums, objective.n_params)
        inject_faults(t0)
        msg = {
            "version": reply["version"],
            "loss": loss,
            "grad": grad,
            "weight": weight,
            "rows": sum(rows) if take is None else sum(take.values()),
            "time": time.perf_counter() - t0,
            "wait": reply["wait"],
        }
        steps += 1


class ServerLink:
    """How a group's loop calls the server actor: through its worker's own connection.

    A Dask ``Actor`` proxy inside a task binds a worker *client*, and on a threaded
    ``LocalCluster`` that client becomes the default client of the user's process
    (later ``client=None`` fits and ``dask.compute`` calls would go to that cluster).
    The link sends the same ``actor_execute`` request the proxy would, over the
    worker's RPC pool, and needs no client.
    """

    def __init__(self, address, key):
        self.address = address
        self.key = key

    def exchange(self, g, msg):
        from distributed import get_worker
        from distributed.protocol import to_serialize
        from distributed.utils import sync

        worker = get_worker()

        async def call():
            return await worker.rpc(self.address).actor_execute(
                actor=self.key,
                function="exchange",
                args=[to_serialize(g), to_serialize(msg)],
                kwargs={},
            )

        out = sync(worker.loop, call)
        if out["status"] != "OK":
            raise out["exception"]
        return _Immediate(out["result"])


class _Immediate:
    def __init__(self, value):
        self._value = value

    def result(self):
        return self._value


class _InProcessServer:
    """The server for the in-process executor (one group): direct calls."""

    def __init__(self, core, on_records):
        self.core = core
        self.on_records = on_records

    def exchange(self, g, msg):
        if msg is not None:
            self.core.push(g, msg, msg.pop("wait", 0.0))
        self.on_records(self.core)
        reply = self.core.pull(g)
        reply["wait"] = 0.0
        return _Immediate(reply)


@releases_shards_on_error
def run_async(
    evaluator,
    params0,
    optimizer,
    *,
    max_iter,
    tol,
    batch_size=None,
    seed=(0,),
    learning_rate="auto",
    max_staleness=None,
    staleness_scaling=False,
    on_divergence="backoff",
    checkpoint=None,
):
    """Asynchronous training until ``max_iter`` epochs, the ``tol`` criterion,
    ``max_time`` seconds or a callback's stop (see the module docstring).

    ``checkpoint``: a :class:`~.checkpoint.Checkpointer`; the server's state (parameters,
    optimizer and its state, version, clocks, rows seen, stopping rule) is written every
    ``checkpoint.every`` server updates and at the end, from the copy the driver takes
    at each poll.  A resumed fit starts a new server from it; being asynchronous, it
    continues the same optimisation, not the same sequence of updates."""
    obj, pen, shards, monitor = evaluator.objective, evaluator.penalty, evaluator.shards, evaluator.monitor
    max_time = evaluator.max_time
    seed = tuple(seed)
    full_batch = batch_size is None or batch_size >= shards.n_rows
    params = np.array(params0, dtype=np.float64, copy=True)
    # Every arrival moves the parameters along the whole aggregate, and n_groups
    # arrivals carry one synchronous step's gradients: the automatic step is the
    # synchronous one over n_groups (so the noise of a mini-batch is not amplified).
    # Only groups holding rows take part: an empty group would push nothing, as fast as
    # it can, and every push is an update along the others' stale sums.
    group_rows = [int(sum(shards.block_rows[b] for b in g)) for g in shards.groups]
    active = [g for g, r in enumerate(group_rows) if r > 0]
    saved = checkpoint.load() if checkpoint is not None else None
    if saved is None:
        optimizer = first_order_start(
            evaluator, params, optimizer, batch_size=batch_size, seed=seed,
            learning_rate=learning_rate, divide=len(active),
        )
    else:
        seed = tuple(saved["seed"])
        monitor.records[:0] = saved["records"]
        evaluator.n_steps = saved["step0"]
        if saved["done"]:
            out = saved["result"]
            evaluator.n_steps = saved["step0"] + out["updates"]
            return FitResult(
                params=np.asarray(out["params"], dtype=np.float64), n_iter=out["epochs"],
                converged=out["converged"], n_steps=evaluator.n_steps, optimizer=out["optimizer"],
                opt_state=out["state"], message=out["message"],
            )
    group_batch = [
        None if full_batch else max(1, round(batch_size * group_rows[g] / shards.n_rows))
        for g in active
    ]
    core_args = (params, optimizer, optimizer.init(params), obj, pen, len(active))
    core_kwargs = dict(
        n_rows=shards.n_rows,
        max_epochs=max_iter,
        tol=tol,
        max_staleness=max_staleness,
        staleness_scaling=staleness_scaling,
        max_time=None if max_time is None else max(0.0, max_time - monitor.elapsed()),
        time_message=evaluator.time_message(),
        max_backoffs=0 if on_divergence == "raise" else MAX_BACKOFFS,
    )
    step0 = evaluator.n_steps
    core_state = None if saved is None else _resumed_core(saved["core"], obj, pen, len(active), core_kwargs)
    progress = {"saved": -1 if saved is None else saved["core"]["version"]}

    def shifted(records):
        return [{**rec, "step": rec["step"] + step0} for rec in records]

    def feed(records):
        for rec in shifted(records):
            monitor.record(**rec)

    def write(state, done=False, result=None, pending=()):
        """The server ``state`` and the history up to it: the records fed so far and
        ``pending``, those drained with the state and not fed yet."""
        records = list(monitor.records) + [monitor.make_record(**rec) for rec in shifted(pending)]
        checkpoint.save({
            "mode": "async", "core": _saveable_core(state), "records": records, "step0": step0,
            "seed": seed, "done": done, "result": result, "n_steps": step0 + state["version"],
        })
        progress["saved"] = state["version"]

    def on_state(state, pending):
        """After every poll, before its records reach the callbacks (one may stop or
        interrupt the fit): a checkpoint every ``checkpoint.every`` updates, also when the
        server has already stopped (a slow poll can see the whole fit at once, and a
        callback may still interrupt it before the final write) unless it failed."""
        if (checkpoint is not None and state["version"] - progress["saved"] >= checkpoint.every
                and state.get("error") is None):
            write(state, pending=pending)

    if shards.executor.kind != "dask":
        if core_state is None:
            core = ServerCore(*core_args, **core_kwargs)
        else:
            core = ServerCore.__new__(ServerCore)
            core.__dict__.update(core_state)

        def on_records(c):
            records = c.drain()[0]
            on_state(vars(c), records)
            feed(records)
            if monitor.stop_requested:
                c.stop(converged=True)

        server = _InProcessServer(core, on_records)
        for i, (g, b) in enumerate(zip(active, group_batch)):
            async_group_loop(shards.handles[g], server, i, obj, seed, b)
        on_records(core)
        out = core.result()
        final_state = dict(vars(core))
    else:
        out, final_state = _run_on_cluster(
            shards, active, core_args, core_kwargs, seed, obj, group_batch, feed, monitor, max_time,
            core_state=core_state, on_state=on_state,
        )
    if checkpoint is not None and out["error"] is None:
        write(final_state, done=True, result=out)
    evaluator.n_steps = step0 + out["updates"]
    if out["error"] is not None:
        raise DivergenceError(out["error"])
    return FitResult(
        params=np.asarray(out["params"], dtype=np.float64),
        n_iter=out["epochs"],
        converged=out["converged"],
        n_steps=evaluator.n_steps,
        optimizer=out["optimizer"],
        opt_state=out["state"],
        message=out["message"],
    )


#: Server fields not written to checkpoints: the objective and penalty come from the
#: resumed fit itself, the records from the driver's history.
_NOT_CHECKPOINTED = ("objective", "penalty", "decay_mask", "records", "_round")


def _saveable_core(state):
    return {k: v for k, v in state.items() if k not in _NOT_CHECKPOINTED}


def _resumed_core(saved, objective, penalty, n_groups, core_kwargs):
    """A server state to restart from: the saved one, with this fit's objective, time
    limit and group count (the per-group memory starts afresh if the count changed)."""
    state = dict(saved)
    state.update(
        objective=objective, penalty=penalty, decay_mask=penalty.mask(objective), records=[], _round=[],
        start_wall=time.time(), max_time=core_kwargs["max_time"], max_epochs=core_kwargs["max_epochs"],
        stopped=False, converged=False, message="", error=None,
    )
    if state["n_groups"] != n_groups:
        state.update(n_groups=n_groups, clock=[0] * n_groups, lead=[0] * n_groups,
                     latest=[None] * n_groups)
    state["pulled"] = [state["version"]] * n_groups
    return state


def _run_on_cluster(shards, active, core_args, core_kwargs, seed, obj, group_batch, feed, monitor, max_time,
                    core_state=None, on_state=None):
    """Start the server and the loops; poll; survive lost workers.

    A loop whose worker dies is rerun by Dask on another worker (its shard recomputed
    from the input), and continues from the server's current parameters.  If the
    server's own worker dies, a new server starts on a live worker from the copy of its
    state that the driver takes at every poll (``drain_with_state``), and every loop is
    restarted against it: the updates since that poll (at most ``POLL_INTERVAL``
    seconds of them) are redone.  Up to ``MAX_SERVER_RESTARTS`` restarts; a cluster left
    without workers raises ClusterError.
    """
    ex = shards.executor
    run = _AsyncRun(shards, active, core_args, core_kwargs, seed, obj, group_batch)
    stopping = False
    try:
        run.start(core_state)
        while True:
            try:
                failed = next((f for f in run.loops if f.status in ("error", "cancelled")), None)
                if failed is not None and not run.server_lost():
                    ex.call_actor_within(ACTOR_TIMEOUT, run.server.stop, "a group failed")
                    if failed.status == "cancelled":
                        raise ClusterError(
                            f"the asynchronous training loop {failed.key} was cancelled (its "
                            "worker was lost or the cluster is shutting down)"
                        )
                    failed.result()  # raises the group's error
                records, _, run.state = ex.call_actor_within(ACTOR_TIMEOUT, run.server.drain_with_state)
            except Exception as err:  # noqa: BLE001 - a lost server is told by the scheduler
                if run.state is None or not run.server_lost(err):
                    raise
                run.restart()
                continue
            if on_state is not None:
                on_state(run.state, records)
            feed(records)
            if not stopping and (monitor.stop_requested or (max_time is not None and monitor.elapsed() >= max_time)):
                reason = "" if monitor.stop_requested else f"reached max_time={max_time} s"
                ex.call_actor_within(ACTOR_TIMEOUT, run.server.stop, reason)
                stopping = True
            if all(f.done() for f in run.loops):
                if any(f.status != "finished" for f in run.loops):
                    continue  # reported at the top of the loop
                # every loop returns only once the server has stopped
                records, _, final_state = ex.call_actor_within(ACTOR_TIMEOUT, run.server.drain_with_state)
                feed(records)
                out = ex.call_actor_within(ACTOR_TIMEOUT, run.server.result)
                if monitor.stop_requested and not out["error"]:
                    out["converged"] = True
                return out, final_state
            time.sleep(POLL_INTERVAL)
    finally:
        run.close()


#: Seconds a poll of the server may take before its worker is suspected lost.
ACTOR_TIMEOUT = 10.0
#: Times the parameter server may be restarted after losing its worker, per fit.
MAX_SERVER_RESTARTS = 3


class _AsyncRun:
    """The server actor and the loops of one asynchronous fit on a cluster."""

    def __init__(self, shards, active, core_args, core_kwargs, seed, obj, group_batch):
        self.shards, self.active, self.seed, self.obj, self.group_batch = shards, active, seed, obj, group_batch
        self.core_args, self.core_kwargs = core_args, core_kwargs
        self.ex = shards.executor
        self.server_future = self.server = None
        self.loops = []
        self.state = None  # the driver's copy of the server state, from the last poll
        self.restarts = 0
        self.server_worker = None

    def start(self, core_state):
        ex, shards = self.ex, self.shards
        live = set(ex.workers())
        if not live:
            raise ClusterError("the cluster has no workers left: the asynchronous fit cannot go on")
        worker = shards.workers[self.active[0]]
        if worker not in live:
            worker = sorted(live)[0]
        tag = "" if self.restarts == 0 else f"-r{self.restarts}"
        kwargs = self.core_kwargs if core_state is None else {"core_state": core_state}
        args = self.core_args if core_state is None else ()
        self.server_future, self.server = ex.start_actor(
            ParameterServer, args, kwargs, worker=worker, key=f"dgd-server-{shards.token}{tag}",
        )
        self.server_worker = ex.actor_address(self.server_future)
        link = ServerLink(self.server_worker, self.server_future.key)
        self.loops = [
            ex.submit_pinned(
                async_group_loop, shards.handles[g], link, i, self.obj, self.seed, b,
                worker=shards.workers[g] if shards.workers[g] in live else worker,
                key=f"dgd-async-{shards.token}-{i}{tag}",
            )
            for i, (g, b) in enumerate(zip(self.active, self.group_batch))
        ]

    def server_lost(self, err=None):
        """Whether the server's worker has left the cluster (given the scheduler up to
        ``dgd.worker-loss-timeout`` seconds to notice, after a connection error)."""
        import dask

        deadline = time.monotonic() + (float(dask.config.get("dgd.worker-loss-timeout", 10)) if err else 0)
        while True:
            if self.server_worker not in set(self.ex.workers()):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def restart(self):
        import logging

        if self.restarts >= MAX_SERVER_RESTARTS:
            raise ClusterError(
                f"the parameter server's worker was lost {self.restarts + 1} times; giving up"
            )
        lost = self.server_worker
        self._stop_loops()
        self.restarts += 1
        state = dict(self.state)
        state["records"] = []
        # the loops start afresh: nobody holds parameters of an older version
        state["pulled"] = [state["version"]] * state["n_groups"]
        self.start(state)
        logging.getLogger("dask_dgd").warning(
            "lost the parameter server's worker %s: restarted on %s from update %d",
            lost, self.server_worker, state["version"],
        )

    def _stop_loops(self):
        for f in self.loops:
            if not f.done():
                f.cancel()
        self.ex.release([self.server_future, getattr(self.server, "_future", None), *self.loops])
        self.server = self.server_future = None

    def close(self):
        if self.server is not None and not all(f.done() for f in self.loops):
            try:  # wake loops waiting at the staleness bound, so they return
                self.ex.call_actor_within(ACTOR_TIMEOUT, self.server.stop, "interrupted")
            except Exception:  # noqa: BLE001 - best effort while unwinding
                pass
        self._stop_loops()
