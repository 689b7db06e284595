"""Asynchronous DGD: a parameter-server actor and one long-running loop per group.

The server (:class:`ParameterServer`, a Dask actor on the first group's worker) holds
the parameters and the optimizer state.  Each group runs :func:`async_group_loop` as
one long task pinned to the worker holding its blocks: push the last sums, receive the
current parameters, compute the next sums, and so on.  The server applies an update on
every arrival, so no group ever waits for another, except under the staleness bound.

Update rule.  The server keeps the latest sums ``(loss, gradient, weight)`` of every
group and steps along their weighted mean (an *incremental aggregated gradient*) with
the shared :class:`~..update.UpdateRule`: with data pinned to workers, applying each
arrival alone would weight a fast worker's rows more than a slow one's and converge to
the optimum of the wrong objective; the aggregate keeps every row's weight whatever the
speeds.  A model's local parameters (matrix factorization's users) are updated by their
group after each of its steps.

Two measures of staleness are recorded for every applied gradient:

- ``staleness``: how many steps the pushing group was ahead of the slowest group when
  it received the parameters it computed on (its *clock lead*).  ``max_staleness=s``
  makes a group that is ``s`` steps ahead wait (stale synchronous parallel); ``None``
  never waits.
- ``delay``: server updates applied between that pull and this push.

``staleness_scaling=True`` divides each update by ``1 + delay``.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import statistics
import time
from typing import TYPE_CHECKING, Any, NoReturn, cast

import numpy as np

from ...exceptions import ClusterError, DivergenceError
from ..runtime.collective import STEP_TIMEOUT_MULTIPLE, actor_timeout, step_timeout_floor
from ..runtime.executor import leave_thread_pool, runner_memory
from ..runtime.faults import inject_faults
from ..runtime.group_steps import COMPRESSION_TAG, compress_into, sum_blocks
from ..solvers.base import Outcome, Solver, start_step
from ..stopping import Stop, StopRules, WallClock
from ..update import Guard, UpdateRule
from .server import ParameterServer, ServerCore, guard_of_state

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import TypeAlias

    from distributed import Future

    from ...compression import Compressor
    from ...optim import FirstOrderOptimizer
    from ..data.blocks import Shard
    from ..protocols import FitContext, TrainingObjective
    from ..runtime.executor import DaskExecutor
    from ..runtime.group_steps import GroupMemory
    from ..runtime.reduce import Partial
    from ..solvers.base import Settings

    #: The pushes' compression: ``(compressor, seed)``.
    PushCompression: TypeAlias = "tuple[Compressor, tuple[int, ...]]"

__all__ = ["AsyncTraining", "ParameterServer", "ServerCore", "async_group_loop"]

#: Seconds between the driver's polls of the server (records, errors, max_time).
POLL_INTERVAL = 0.05
#: A poll brings a copy of the server's whole state (where a new server restarts if this
#: one's worker is lost: parameters, optimizer state, snapshots and every group's latest
#: sums, so it grows with the model and with the number of groups) once this many times
#: the last copy's seconds have passed since it: copying takes at most 1/20 of the time
#: however large the state; a small model's state comes at every poll.
COPY_INTERVAL_RATIO = 20.0
#: Times the parameter server may be restarted after losing its worker, per fit.
MAX_SERVER_RESTARTS = 3


def async_group_loop(shard: Shard, scratch_ref: GroupMemory | str | None, server: ServerLink | _InProcessServer,
                     g: int, objective: TrainingObjective, batching: Any, local_key: int, n_groups: int,
                     compression: PushCompression | None = None) -> int:
    """One group's loop (a long-running task): push sums, pull parameters, compute.

    The group's batches are its share of the synchronous mode's
    (``batching.group_draw``), seeded by the group's step count.  A model's local
    parameters live in the group's memory (snapshot ``local_key``, see
    :mod:`..runtime.group_steps`), where checkpoints and the export at the end find them; they are
    updated after each step with the server's current optimizer, and when the server
    rolls back (a divergence) they return to their state at the group's last good push.

    ``compression=(compressor, seed)``: the pushed gradient travels compressed, with
    the group's memory (residual or EF21 estimate) in its scratch; an EF21 estimate
    whose count of payloads is not the server's starts afresh.
    """
    leave_thread_pool()
    scratch = runner_memory(scratch_ref)
    local = good_local = None
    if objective.has_local:
        snaps = scratch.local or {}
        if local_key not in snaps:  # the group's worker was lost: its users start again
            params, state = objective.local_init(shard, None)  # type: ignore[attr-defined]  # (has_local)
            snaps = scratch.local = {local_key: (params, state, None)}
        local = good_local = snaps[local_key][:2]
    rollbacks = 0
    msg, steps = None, 0
    while True:
        reply = server.exchange(g, msg).result()
        if reply["stop"]:
            return steps
        if local is not None and reply["rollbacks"] != rollbacks:
            rollbacks, local = reply["rollbacks"], good_local
        t0 = time.perf_counter()
        draw = None if batching is None else batching.group_draw(shard, g, reply["clock"])
        params = reply["params"]
        sums, lgrad = objective.group_sums(shard, params, objective.step_aux(params), draw,
                                           None if local is None else local[0], scratch.objective)
        partial = sum_blocks(objective, sums)
        if local is not None and partial.weight_sum > 0 and math.isfinite(partial.loss_sum):
            good_local = local
            opt = reply["optimizer"]
            lstate = opt.init(local[0]) if local[1] is None else local[1]
            # the local parameters' penalty is in their loss: the rule has none
            lparams, lstate, _ = UpdateRule(opt).apply(local[0], lgrad * (1.0 / (partial.weight_sum * n_groups)),
                                                       lstate)
            local = (lparams, lstate)
            scratch.local = {local_key: (local[0], local[1], None)}
        inject_faults(t0)
        rows = shard.n_rows if batching is None else batching.draw_rows(shard, draw, partial)
        count = None
        if compression is not None and np.all(np.isfinite(cast("np.ndarray", partial.grad_sum))):  # (dense)
            partial, count = _compress_push(scratch, compression, objective, partial, reply["ef_count"], g, steps)
        msg = {"version": reply["version"], "partial": partial, "rows": rows,
               "time": time.perf_counter() - t0, "wait": reply["wait"], "ef_count": count}
        steps += 1


def _compress_push(scratch: GroupMemory, compression: PushCompression, objective: TrainingObjective,
                   partial: Partial, server_count: int, g: int, step: int) -> tuple[Partial, int]:
    """A group's push with its gradient compressed (see :func:`async_group_loop`), and
    the count of payloads behind its EF21 estimate before this one."""
    comp, seed = compression
    state = scratch.modes.get("push_compression")
    if state is not None and comp.accumulates and state.get("count", 0) != server_count:
        del scratch.modes["push_compression"]  # the server holds another estimate (it restarted, or dropped a push)
        state = None
    count = 0 if state is None else state.get("count", 0)
    sent = compress_into(scratch.modes, "push_compression", comp, objective.grad_template(),
                         objective.dense_grad(partial.grad_sum), [*seed, COMPRESSION_TAG, g, step])
    return dataclasses.replace(partial, grad_sum=sent), count


class ServerLink:
    """How a group's loop calls the server actor: through its worker's own connection.

    A Dask ``Actor`` proxy inside a task binds a worker *client*, and on a threaded
    ``LocalCluster`` that client becomes the default client of the user's process
    (later ``client=None`` fits and ``dask.compute`` calls would go to that cluster).
    The link sends the same ``actor_execute`` request the proxy would, over the
    worker's RPC pool, and needs no client.
    """

    def __init__(self, address: str, key: str) -> None:
        self.address = address
        self.key = key

    def exchange(self, g: int, msg: dict[str, Any] | None) -> _Immediate:
        from distributed import get_worker
        from distributed.protocol import to_serialize
        from distributed.utils import sync

        worker = get_worker()

        async def call() -> dict[str, Any]:
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
    def __init__(self, value: dict[str, Any]) -> None:
        self._value = value

    def result(self) -> dict[str, Any]:
        return self._value


class _InProcessServer:
    """The server for the in-process executor (one group): direct calls."""

    def __init__(self, core: ServerCore, on_records: Callable[[ServerCore], None]) -> None:
        self.core = core
        self.on_records = on_records

    def exchange(self, g: int, msg: dict[str, Any] | None) -> _Immediate:
        if msg is not None:
            self.core.push(g, msg, msg.pop("wait", 0.0))
        self.on_records(self.core)
        reply = self.core.pull(g)
        reply["wait"] = 0.0
        return _Immediate(reply)


#: Server fields not written to checkpoints: the objective comes from the resumed fit
#: itself, the records from the driver's history.
_NOT_CHECKPOINTED = ("objective", "records", "_round")


def _saveable_core(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if k not in _NOT_CHECKPOINTED}


class AsyncTraining(Solver):
    """Asynchronous training until ``max_iter`` epochs, the ``tol`` criterion,
    ``max_time`` seconds or a callback's stop (see the module docstring).

    Its checkpoints hold the server's state (parameters, optimizer and its state,
    version, clocks, rows seen, stopping rule), written every ``every`` server updates
    from the whole copy that the first poll after them brings, before that poll's
    records reach the callbacks.  A resumed fit starts a new server from it; being asynchronous, it
    continues the same optimisation, not the same sequence of updates.
    """

    core_class: type[ServerCore] = ServerCore  # the server's rules
    iterations = None  # max_iter is the server's to apply (the fit's StopRules, after every push)

    @classmethod
    def build(cls, ctx: FitContext, settings: Settings) -> AsyncTraining:
        return cls(ctx, settings.params0, settings.optimizer, max_staleness=settings.max_staleness,
                   staleness_scaling=settings.staleness_scaling)

    def __init__(self, ctx: FitContext, params0: np.ndarray, optimizer: FirstOrderOptimizer, *,
                 max_staleness: int | None = None, staleness_scaling: bool = False) -> None:
        self.ctx = ctx
        self.params0 = np.array(params0, dtype=np.float64, copy=True)
        self.optimizer = optimizer
        self.max_staleness, self.staleness_scaling = max_staleness, staleness_scaling
        sh = ctx.shards
        # Only groups holding rows take part: an empty group would push nothing, as fast
        # as it can, and every push is an update along the others' stale sums.
        group_rows = [int(sum(sh.block_rows[b] for b in g)) for g in sh.groups]
        self.active = [g for g, r in enumerate(group_rows) if r > 0]
        self.state: dict[str, Any] | None = None  # the driver's last whole copy of the server state
        self.out: dict[str, Any] | None = None
        self.step0 = 0
        self.run: _InProcessRun | _ClusterRun | None = None
        self.save = None  # the loop's checkpoint writer (bound by train)
        self.local_key: int | None = None  # the snapshot of the groups' local parameters
        self._saved_version = -1
        self._stopping = False
        self._first_poll = True

    @property
    def progress(self) -> int:
        return 0 if self.state is None else self.state["version"]

    def _server_stops(self) -> StopRules:
        """The fit's time and iteration limits for the server, on a clock started
        when the fit did (the monitor's elapsed time ago)."""
        ctx = self.ctx
        clock = WallClock(time.time() - ctx.monitor.elapsed())
        return StopRules(clock, ctx.stops.max_iter, ctx.stops.max_time)

    def _core_kwargs(self) -> dict[str, Any]:
        ctx = self.ctx
        return dict(
            n_rows=ctx.shards.n_rows, tol=ctx.tol, stops=self._server_stops(), max_staleness=self.max_staleness,
            staleness_scaling=self.staleness_scaling,
            n_iter_no_change=ctx.n_iter_no_change,
        )

    def _guard(self, value: float) -> Guard:
        """The server's guard, started at the objective ``value`` where training starts:
        the aggregate mixes groups' sums of different ages, so its explosion limit is
        that of parts of the data."""
        guard = Guard(self.ctx.on_divergence, full_batch=False, hint=self.ctx.objective.hint)
        guard.start(value)
        return guard

    @property
    def compression(self) -> PushCompression | None:
        """The pushes' compression, ``(compressor, seed)`` (None: none)."""
        ctx = self.ctx
        return None if ctx.compressor is None else (ctx.compressor, tuple(ctx.seed))

    def start(self) -> Outcome:
        # Every arrival moves the parameters along the whole aggregate, and n_groups
        # arrivals carry one synchronous step's gradients: the automatic step is the
        # synchronous one over n_groups (so the noise of a mini-batch is not amplified).
        self.optimizer, res, record = start_step(self.ctx, self.params0, self.optimizer, divide=len(self.active))
        self.local_key = res.local_key
        self.step0 = self.ctx.source.n_steps
        guard = self._guard(res.value + self.ctx.objective.l1_value(self.params0))
        core = ServerCore(self.params0, self.optimizer, self.optimizer.init(self.params0), self.ctx.objective,
                          len(self.active), guard=guard, **self._core_kwargs())
        self.state = dict(vars(core))
        self._launch(self.state)
        record["lr_halvings"] = guard.halvings
        return Outcome([record])

    def resume(self) -> Outcome:
        state = dict(self.state)  # type: ignore[arg-type]  # (loaded from the checkpoint)
        kw = self._core_kwargs()
        n = len(self.active)
        if "guard" not in state:  # a checkpoint written before the server had a guard
            state["guard"] = guard_of_state(state, self.ctx.objective.hint)
            for k in ("max_backoffs", "backoffs", "explosion_limit"):
                state.pop(k, None)
        state.setdefault("best_value", math.inf)
        state.setdefault("best", state["good"])
        for old in ("max_epochs", "max_time", "time_message"):  # a checkpoint's from before the stop rules
            state.pop(old, None)
        state.update(objective=self.ctx.objective, records=[], _round=[], start_wall=time.time(),
                     stops=kw["stops"], stopped=False, converged=False, message="", error=None)
        # checkpoints written before compressed pushes; resumed groups start their EF21
        # estimates afresh (their counts are 0, which resets the server's)
        state.setdefault("estimates", [None] * state["n_groups"])
        state.setdefault("ef_counts", [0] * state["n_groups"])
        if state["n_groups"] != n:  # the per-group memory starts afresh
            state.update(n_groups=n, clock=[0] * n, lead=[0] * n, latest=[None] * n, estimates=[None] * n,
                         ef_counts=[0] * n)
        state["pulled"] = [state["version"]] * n
        stop = kw["stops"].limit(state["rows_seen"] // state["n_rows"])
        if stop is not None:
            core = self.core_class.__new__(self.core_class)
            core.__dict__.update(state)
            self.out = core.result()
            return Outcome(stop=stop)
        self.state = state
        self._saved_version = state["version"]
        self._launch(state)
        return Outcome(accepted=False)

    def _launch(self, core_state: dict[str, Any]) -> None:
        ctx = self.ctx
        if ctx.shards.executor.kind != "dask":
            core = self.core_class.__new__(self.core_class)
            core.__dict__.update(core_state)
            self.run = _InProcessRun(self, core)
        else:
            self.run = _ClusterRun(self, core_state)

    def loop_call(self, i: int, g: int, scratch_ref: GroupMemory | str | None,
                  server: ServerLink | _InProcessServer) -> tuple[Any, ...]:
        """``(function, *args)`` of the loop of group ``g``, the ``i``-th active one
        (``scratch_ref``: its memory, see :func:`~..runtime.executor.runner_memory`)."""
        ctx = self.ctx
        return (async_group_loop, ctx.shards.handles[g], scratch_ref, server, i, ctx.objective, ctx.batching,
                self.local_key, len(self.active), self.compression)

    def local_keys(self) -> tuple[int, ...]:
        return (self.local_key,)  # type: ignore[return-value]  # (None: no local parameters to keep)

    def close(self) -> None:
        if self.run is not None and self.out is None:
            self.run.close()

    def _shifted(self, records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**rec, "step": rec["step"] + self.step0} for rec in records]

    def on_poll(self, records: Sequence[dict[str, Any]], state: dict[str, Any],
                whole: bool = True) -> list[dict[str, Any]]:
        """After a poll: the driver's copy of the state (``whole``: the server's whole
        state; else only its :meth:`~.server.ServerCore.status`, the copy kept is the
        last whole one); a checkpoint every ``every`` updates (of a whole copy: the
        cluster's server sends one once :meth:`checkpoint_version` is reached), also when
        the server has already stopped (a slow poll can see the whole fit at once, and a
        callback may still interrupt it) unless it failed; records shifted to the fit's
        step numbers."""
        if whole:
            self.state = state
        self.ctx.source.n_steps = self.step0 + state["version"]
        records = self._shifted(records)
        at = self.checkpoint_version()
        if whole and at is not None and state["version"] >= at and state.get("error") is None:
            self.save(pending=records)  # type: ignore[misc]  # (bound: checkpoint_version is not None)
            self._saved_version = state["version"]
        return records

    def checkpoint_version(self) -> int | None:
        """The server's update count at which the next checkpoint is due (None: no checkpoints)."""
        cp = self.ctx.checkpoint
        return None if cp is None or self.save is None else self._saved_version + cp.every

    def step(self) -> Outcome:
        out, records = self.run.poll()  # type: ignore[union-attr]  # (launched by start or resume)
        if out is None:
            return Outcome(records)
        return Outcome(records, stop=self._finished(out))

    def _finished(self, out: dict[str, Any]) -> Stop:
        self.out = out
        self.ctx.source.n_steps = self.step0 + out["updates"]
        if out["error"] is not None:
            raise DivergenceError(out["error"])
        if self.ctx.monitor.stop_requested:
            out["converged"] = True
        return Stop(out["converged"], out["message"])

    def finish(self, stop: Stop, emit: Callable[[list[dict[str, Any]]], None]) -> Stop:
        if self.out is not None or self.run is None:
            return stop
        out, records = self.run.stop(stop.message)
        emit(records)
        final = self._finished(out)
        return Stop(stop.converged or final.converged, stop.message or final.message)

    def result(self) -> tuple[np.ndarray, int, FirstOrderOptimizer, Any]:
        out = self.out
        return np.asarray(out["params"], dtype=np.float64), out["epochs"], out["optimizer"], out["state"]  # type: ignore[index]  # (finished)

    def state_dict(self) -> dict[str, Any]:
        return {"core": _saveable_core(self.state),  # type: ignore[arg-type]  # (started)
                "step0": self.step0, "local_key": self.local_key}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state, self.step0, self.local_key = dict(state["core"]), state["step0"], state["local_key"]


class _InProcessRun:
    """Asynchronous training in this process (one group): the loop runs to its end in
    one poll, the records going to the monitor as the server emits them."""

    def __init__(self, solver: AsyncTraining, core: ServerCore) -> None:
        self.solver, self.core = solver, core

    def poll(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        solver, ctx = self.solver, self.solver.ctx

        def on_records(c: ServerCore) -> None:
            records = solver.on_poll(c.drain()[0], dict(vars(c)))
            for rec in records:
                ctx.monitor.record(rec)
            if ctx.monitor.stop_requested:
                c.stop(converged=True)

        server = _InProcessServer(self.core, on_records)
        collective = ctx.shards.collective
        scratch = collective.scratch()
        for i, g in enumerate(solver.active):
            fn, *args = solver.loop_call(i, g, scratch[g], server)
            fn(*args)
        on_records(self.core)
        return self.core.result(), []

    def stop(self, message: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        self.core.stop(message=message)
        return self.core.result(), []

    def close(self) -> None:
        pass


class _ClusterRun:
    """The server actor and the loops of one asynchronous fit on a cluster; polls; lost
    workers survived.

    A loop whose worker dies is rerun by Dask on another worker (its shard recomputed
    from the input), and continues from the server's current parameters.  If the
    server's own worker dies, a new server starts on a live worker from the last copy of
    its whole state that the driver took, and every loop is restarted against it: the
    updates since that copy are redone.  A copy comes with a poll (every
    ``POLL_INTERVAL`` seconds) once ``COPY_INTERVAL_RATIO`` times the last copy's
    seconds have passed since it: at every poll for a small model, less often for a
    state that takes long to send, so copies never take more than 1/20 of the server's
    time (and of the driver's), whatever the model's size and the number of groups.
    Up to ``MAX_SERVER_RESTARTS`` restarts; a cluster left without workers raises
    ClusterError.

    A *frozen* worker (a stopped process) fails nothing: its loop just stops pushing,
    the groups ahead of it wait at the staleness bound, and the fit never ends.  A group
    that has not pushed for :meth:`step_timeout` (``max(dgd.step-timeout, 20 x the
    median round)``), or a server that has not answered for as long, gets the fit's
    workers asked after: those that sent the scheduler no heartbeat for half that time
    are dropped from the cluster (as in the synchronous modes, see
    :meth:`~..runtime.executor.DaskExecutor.drop_silent_or_warn`) and the fit goes on as after a kill.
    """

    def __init__(self, solver: AsyncTraining, core_state: dict[str, Any]) -> None:
        self.solver = solver
        self.shards = solver.ctx.shards
        self.ex = cast("DaskExecutor", self.shards.executor)  # (a cluster's)
        self.server_future: Future | None = None
        self.server: Any = None  # the server's actor proxy
        self.loops: list[Future] = []
        self.restarts = 0
        self.server_worker: str | None = None
        self.first = True
        #: group -> (its push count, when the driver saw it change); the server: when it last answered
        self._heard: dict[int, tuple[int, float]] = {}
        self._server_heard = time.monotonic()
        self._round_times: collections.deque[float] = collections.deque(maxlen=101)
        self._warned = False
        #: when the driver's copy of the server's whole state came, and how long the poll bringing it took
        self._copied_at, self._copy_seconds = time.monotonic(), 0.0
        #: seconds a server call may take before its worker is asked after (dgd.actor-timeout)
        self.actor_timeout = actor_timeout()
        self._start(core_state)

    def _start(self, core_state: dict[str, Any]) -> None:
        ex, sh, solver = self.ex, self.shards, self.solver
        live = set(ex.workers())
        if not live:
            raise ClusterError("the cluster has no workers left: the asynchronous fit cannot go on")
        worker = sh.workers[solver.active[0]]
        if worker not in live:
            worker = sorted(live)[0]
        tag = "" if self.restarts == 0 else f"-r{self.restarts}"
        state = dict(core_state, objective=solver.ctx.objective, records=[], _round=[])
        self.server_future, self.server = ex.start_actor(
            ParameterServer, (), {"core_state": state, "core_class": solver.core_class}, worker=worker,
            key=f"dgd-server-{sh.token}{tag}",
        )
        self.server_worker = ex.actor_address(self.server_future)
        self._heard, self._server_heard = {}, time.monotonic()  # (re)started: every group's quiet time anew
        link = ServerLink(self.server_worker, self.server_future.key)  # type: ignore[arg-type]  # (our keys: strings)
        runners = sh.collective.runner_keys()
        self.loops = [
            ex.submit_pinned(
                *solver.loop_call(i, g, runners[g], link),
                worker=sh.workers[g] if sh.workers[g] in live else worker,
                key=f"dgd-async-{sh.token}-{i}{tag}",
            )
            for i, g in enumerate(solver.active)
        ]

    def poll(self) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """One poll: ``(None, records)`` while training runs, ``(result, records)`` at the end."""
        ex = self.ex
        if not self.first:
            time.sleep(POLL_INTERVAL)
        self.first = False
        try:
            failed = next((f for f in self.loops if f.status in ("error", "cancelled")), None)
            if failed is not None and not self.server_lost():
                ex.call_actor_within(self.actor_timeout, self.server.stop, "a group failed", worker=self.server_worker)
                cancelled = failed.status == "cancelled"
                # first what a lost worker took with it (a loop whose scattered input
                # was lost is cancelled by Dask, not rerun): the cause and the remedy
                self._unrecoverable(None if cancelled else failed.exception())
                if cancelled:
                    raise ClusterError(
                        f"the asynchronous training loop {failed.key} was cancelled (its "
                        "worker was lost or the cluster is shutting down)"
                    )
                failed.result()  # raises the group's error
            records, state, whole = self._drain(
                time.monotonic() - self._copied_at >= COPY_INTERVAL_RATIO * self._copy_seconds)
        except Exception as err:  # noqa: BLE001 - a lost server is told by the scheduler
            if ex.scheduler_lost():
                self._scheduler_lost(err)
            if isinstance(err, TimeoutError) and self._server_frozen():
                return None, []  # dropped and restarted, or still within its limit
            try:
                server_lost = self.solver.state is not None and self.server_lost(err)
            except ClusterError as lost:  # the scheduler went while we asked it
                if ex.scheduler_lost():
                    self._scheduler_lost(lost)
                raise
            if not server_lost:
                self.close()
                raise
            self.restart()
            return None, []
        self._server_heard = time.monotonic()
        records = self.solver.on_poll(records, state, whole)
        self._watch(records, state)
        if all(f.done() for f in self.loops) and all(f.status == "finished" for f in self.loops):
            # every loop returns only once the server has stopped: its final state, whole
            more, state, whole = self._drain(True)
            records += self.solver.on_poll(more, state, whole)
            out = ex.call_actor_within(self.actor_timeout, self.server.result, worker=self.server_worker)
            self.close()
            return out, records
        return None, records

    def _drain(self, whole: bool) -> tuple[list[dict[str, Any]], dict[str, Any], bool]:
        """The server's records since the last poll, its state (whole if ``whole`` or a
        checkpoint is due, else its status) and whether it is whole.  A call that may
        bring the whole state waits for it at least 3 times as long as the last copy took."""
        t0 = time.monotonic()
        at = self.solver.checkpoint_version()
        records, _, state, whole = self.ex.call_actor_within(
            max(self.actor_timeout, 3 * self._copy_seconds) if whole or at is not None else self.actor_timeout,
            self.server.drain_with_state, whole, at, worker=self.server_worker)
        if whole:
            now = time.monotonic()
            self._copied_at, self._copy_seconds = now, now - t0
        return records, state, whole

    # ------------------------------------------------------------ frozen workers
    def step_timeout(self) -> float | None:
        """Seconds a group may go without a push, or the server without an answer,
        before the fit's silent workers are dropped: ``max(dgd.step-timeout, 20 x the
        median round)`` (a round: one push of every group); None when off."""
        floor = step_timeout_floor()
        if floor is None or not self._round_times:
            return floor
        return max(floor, STEP_TIMEOUT_MULTIPLE * statistics.median(self._round_times))

    def _watch(self, records: Sequence[dict[str, Any]], state: dict[str, Any]) -> None:
        """After a poll: note the groups that pushed; if one has been quiet past
        :meth:`step_timeout` while its loop runs, drop the fit's silent workers."""
        now = time.monotonic()
        self._round_times.extend(r["step_time"] for r in records if r.get("step_time"))
        for i, count in enumerate(state.get("clock") or ()):
            if self._heard.get(i, (None,))[0] != count:
                self._heard[i] = (count, now)
        timeout = self.step_timeout()
        if timeout is None:
            return
        quiet = [i for i, (_, t) in self._heard.items()
                 if now - t > timeout and i < len(self.loops) and not self.loops[i].done()]
        if quiet:
            self._drop_silent(max(now - self._heard[i][1] for i in quiet), timeout)

    def _server_frozen(self) -> bool:
        """After a server call timed out: False if the server's worker still answers
        the scheduler (the caller goes on as before); True once it was found silent,
        either still within :meth:`step_timeout` of its last answer (poll again) or
        past it (dropped, and the server restarted)."""
        timeout = self.step_timeout()
        if timeout is None or not self.ex.silent_workers([self.server_worker], self.actor_timeout / 2):  # type: ignore[list-item]  # (started)
            return False
        waited = time.monotonic() - self._server_heard
        if waited > timeout:
            self._drop_silent(waited, timeout)
        return True

    def _drop_silent(self, waited: float, timeout: float) -> None:
        """Drop the fit's workers (the groups' and the server's) that sent the scheduler
        no heartbeat for half of ``timeout``; then go on as after a kill (a loop is
        rerun elsewhere by Dask, a lost server restarted).  Workers that all still
        answer are waited for, a WARNING saying so once."""
        addresses = set(self.shards.workers) | {self.server_worker}
        silent, self._warned = self.ex.drop_silent_or_warn(addresses, waited, timeout, self._warned,  # type: ignore[arg-type]  # (cluster)
                                                           what="an asynchronous group (no push)")
        if not silent:
            return
        now = time.monotonic()
        self._heard = {i: (count, now) for i, (count, _) in self._heard.items()}
        self._server_heard = now
        if self.server_worker in silent:
            self.restart()  # (raises for state no other worker has: sharded parameters, scattered input)
        else:
            self._unrecoverable(None)

    def stop(self, message: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Stop the server (a stop rule of the driver fired) and wait for the loops."""
        self.ex.call_actor_within(self.actor_timeout, self.server.stop, message, worker=self.server_worker)
        records: list[dict[str, Any]] = []
        while True:
            out, more = self.poll()
            records += more
            if out is not None:
                return out, records

    def _scheduler_lost(self, err: BaseException) -> NoReturn:
        """Raise the ClusterError of a lost scheduler, naming the last step the driver
        saw; the server and the loops went with the cluster (their futures are
        cancelled), only the driver's references are dropped."""
        self.server = self.server_future = None
        self.loops = []
        raise self.ex.scheduler_error(self.solver.ctx.source.n_steps) from err

    def server_lost(self, err: BaseException | None = None) -> bool:
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

    def _unrecoverable(self, err: BaseException | None) -> None:
        """Raise ClusterError when the fit's groups keep state no other worker has
        (``collective.unrecoverable`` says why and what to do: sharded parameters,
        in-memory input scattered to the workers) and a group's worker has left (given
        the scheduler ``dgd.worker-loss-timeout`` seconds to notice, after ``err``)."""
        import dask

        why = self.shards.collective.unrecoverable
        if why is None:
            return
        deadline = time.monotonic() + float(dask.config.get("dgd.worker-loss-timeout", 10))
        while True:
            alive = set(self.ex.workers())
            lost = sorted({w for w in self.shards.workers if w not in alive})
            if lost:
                self.close()
                version = "?" if self.solver.state is None else self.solver.state["version"]
                raise ClusterError(f"lost worker(s) {lost} at update {version}: {why}") from err
            if time.monotonic() >= deadline:
                return
            time.sleep(0.1)

    def restart(self) -> None:
        self._unrecoverable(None)
        if self.restarts >= MAX_SERVER_RESTARTS:
            self.close()
            raise ClusterError(f"the parameter server's worker was lost {self.restarts + 1} times; giving up")
        lost = self.server_worker
        self._stop_loops()
        self.restarts += 1
        state = dict(self.solver.state)  # type: ignore[arg-type]  # (polled)
        # the loops start afresh: nobody holds parameters of an older version
        state["pulled"] = [state["version"]] * state["n_groups"]
        self._start(state)
        logging.getLogger("dask_dgd").warning(
            "lost the parameter server's worker %s: restarted on %s from update %d",
            lost, self.server_worker, state["version"],
        )

    def _stop_loops(self) -> None:
        for f in self.loops:
            if not f.done():
                f.cancel()
        self.ex.release([self.server_future, getattr(self.server, "_future", None), *self.loops])
        self.server = self.server_future = None

    def close(self) -> None:
        if self.server is not None and not all(f.done() for f in self.loops):
            try:  # wake loops waiting at the staleness bound, so they return
                self.ex.call_actor_within(self.actor_timeout, self.server.stop, "interrupted",
                                          worker=self.server_worker)
            except Exception:  # noqa: BLE001 - best effort while unwinding
                pass
        if self.server is not None:
            self._stop_loops()
