"""The parameter server of asynchronous training: its rules and its actor.

:class:`ServerCore` holds the parameters and the optimizer state and applies every
group's push with the shared :class:`~..update.UpdateRule`, along the weighted mean of
every group's latest sums (an incremental aggregated gradient); it enforces the
staleness bound, backs off on divergence, stops by the fit's
:class:`~..stopping.StopRules` (the time limit, ``tol``, ``max_iter`` epochs) after
every push, and makes one history record per round of pushes.  It knows no transport
and is tested directly; :class:`ParameterServer` is the Dask actor around it.  Its
backoffs go through the shared :class:`~..update.Guard` (the count of halvings in a
row, the explosion limit, the messages), kept in its state.

Compressed pushes are decompressed on arrival; with EF21 feedback each push is the
change of the group's estimate, which the server keeps (``estimates``, ``ef_counts``)
and uses as the group's latest gradient.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ...exceptions import DivergenceError
from ..runtime.records import Bytes, Timing, make_record
from ..runtime.reduce import Compressed, add_partials
from ..stopping import EpochStopper, Stop, StopRules, WallClock
from ..update import BATCH_EXPLOSION_FACTOR, Guard, UpdateRule, halved

if TYPE_CHECKING:
    from ...optim import FirstOrderOptimizer
    from ..protocols import TrainingObjective
    from ..runtime.reduce import Partial

__all__ = ["ParameterServer", "ServerCore", "ShardedCore", "guard_of_state"]


def guard_of_state(state: dict[str, Any], hint: str) -> Guard:
    """The :class:`~..update.Guard` of a server state saved before the server had one
    (its fields ``max_backoffs``, 0 with ``on_divergence="raise"``, ``backoffs`` and
    ``explosion_limit``, None before that limit existed); ``hint``: the objective's."""
    guard = Guard("raise" if state.get("max_backoffs") == 0 else "backoff", full_batch=False, hint=hint)
    limit = state.get("explosion_limit")
    if limit is not None:  # the limit of parts of the data is the factor times max(|first|, 1)
        guard.start(limit / BATCH_EXPLOSION_FACTOR)
    guard.backoffs = int(state.get("backoffs", 0))
    return guard


class ServerCore:
    """The parameter server's state and rules, free of any transport (tested directly).

    ``stops``: the fit's :class:`~..stopping.StopRules` with a
    :class:`~..stopping.WallClock` (None: no time or iteration limit); it asks them
    after every push, as a solver of theirs: :meth:`stop_rule` (the epoch rule's
    answer) and :attr:`iterations` (completed epochs of rows).

    ``guard``: the :class:`~..update.Guard` of the fit (default: ``on_divergence=
    "backoff"``), for parts of the data (the aggregate mixes groups' sums of different
    ages) and started at the objective where training starts (its explosion limit;
    not started: none).  Every backoff counts as a divergence: with
    ``on_divergence="raise"`` the first one stops the server with the guard's message.
    """

    def __init__(
        self,
        params: np.ndarray,
        optimizer: FirstOrderOptimizer,
        opt_state: Any,
        objective: TrainingObjective,
        n_groups: int,
        *,
        n_rows: int,
        tol: float,
        stops: StopRules | None = None,
        max_staleness: int | None = None,
        staleness_scaling: bool = False,
        start_wall: float | None = None,
        guard: Guard | None = None,
        n_iter_no_change: int | None = None,
    ) -> None:
        self.guard = Guard(full_batch=False, hint=objective.hint) if guard is None else guard
        self.params = np.array(params, dtype=np.float64, copy=True)
        self.optimizer = optimizer
        self.state = opt_state
        self.objective = objective
        self.n_groups = int(n_groups)
        self.n_rows = int(n_rows)
        self.stops = StopRules(WallClock()) if stops is None else stops
        self.max_staleness = max_staleness
        self.staleness_scaling = bool(staleness_scaling)
        self.start_wall = time.time() if start_wall is None else start_wall  # the first record's round start
        self.version = 0  # updates applied
        self.valid_from = 0  # pushes computed from older versions are discarded
        self.rollbacks = 0  # backoffs so far (the groups' local parameters follow them)
        self.clock = [0] * self.n_groups  # pushes received from each group
        self.pulled = [0] * self.n_groups  # version each group last received
        self.lead = [0] * self.n_groups  # its clock lead at that moment
        self.latest: list[Partial | None] = [None] * self.n_groups  # latest partial sums of each group
        self.snapshots = {0: (self.params, self.state, self.optimizer)}
        self.good = 0  # latest version whose parameters gave finite sums
        # the version whose push gave the lowest objective: where an explosion goes back
        # to (the latest good version may be well on its way up)
        self.best_value, self.best = math.inf, 0
        self.rows_seen = 0
        self.stopper = EpochStopper(tol) if n_iter_no_change is None else EpochStopper(tol, n_iter_no_change)
        self.stopped, self.converged, self.message = False, False, ""
        self.error: str | None = None
        self.records: list[dict[str, Any]] = []
        self._round: list[dict[str, Any]] = []
        self._round_start = self.start_wall
        self.n_pushes = 0
        # compressed pushes with EF21 feedback: each group's estimate and its payloads
        self.estimates: list[np.ndarray | None] = [None] * self.n_groups
        self.ef_counts = [0] * self.n_groups

    # ------------------------------------------------------------------ access
    def clock_lead(self, g: int) -> int:
        return self.clock[g] - min(self.clock)

    def may_proceed(self, g: int) -> bool:
        """Whether group ``g`` may compute its next step now (the staleness bound)."""
        s = self.max_staleness
        return self.stopped or s is None or self.clock_lead(g) <= s

    def pull(self, g: int) -> dict[str, Any]:
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
            "optimizer": self.optimizer,
            "rollbacks": self.rollbacks,
            "ef_count": self.ef_counts[g],
        }

    def stop(self, message: str = "", converged: bool = False, error: str | None = None) -> None:
        if not self.stopped:
            self.stopped, self.message, self.converged, self.error = True, message, converged, error
            self._emit(time.time())

    # ------------------------------------------------------------------ update
    def push(self, g: int, msg: dict[str, Any], wait_time: float = 0.0) -> None:
        """Apply group ``g``'s sums (``msg`` from :func:`async_group_loop`)."""
        if self.stopped:
            return
        now = time.time()
        self.clock[g] += 1
        self.n_pushes += 1
        self.rows_seen += int(msg["rows"])
        delay = self.version - msg["version"]
        partial = msg["partial"]
        stat = {"group": g, "lead": self.lead[g], "delay": delay, "wait": float(wait_time),
                "time": float(msg["time"]), "weight": float(partial.weight_sum),
                "up": msg.get("up", 8 * self.params.size), "down": msg.get("down", 8 * self.params.size)}
        if isinstance(partial.grad_sum, Compressed):
            stat["up"] = partial.grad_sum.nbytes
            partial = self._received(g, partial, msg.get("ef_count"))
            if partial is None:  # an EF21 payload for an estimate the server does not hold
                self._round.append(stat)
                return self._after_push(now)
        if msg["version"] < self.valid_from:
            self._round.append(stat)  # computed on parameters rolled back since
            return self._after_push(now)
        if not (math.isfinite(partial.loss_sum) and np.all(np.isfinite(partial.grad_sum))
                and not partial.extras.get("nonfinite", 0)):
            self._round.append(stat)
            self._backoff(f"asynchronous training diverged at update {self.version} (loss={partial.loss_sum})")
            return self._after_push(now)
        if partial.weight_sum <= 0:  # only zero-weight rows drawn: no information, no update
            self.good = max(self.good, msg["version"])
            self._round.append(stat)
            return self._after_push(now)
        latest = list(self.latest)
        latest[g] = partial
        # in group order: the rounding does not depend on the order of arrival
        total = add_partials(*[p for p in latest if p is not None])
        value, agg = self._aggregate(total, msg)
        limit = self.guard.limit()
        if value > limit:
            self._round.append(stat)
            self._backoff(f"asynchronous training diverged at update {self.version}: the objective exploded "
                          f"(loss={value}, above {limit:.3g})", to=self.best)
            return self._after_push(now)
        self.good = max(self.good, msg["version"])
        if value < self.best_value and msg["version"] in self.snapshots:
            self.best_value, self.best = value, msg["version"]
        self.latest = latest
        scale = 1.0 / (1.0 + delay) if self.staleness_scaling else 1.0
        params, state, lr = self._update(agg, scale, msg)
        if not np.all(np.isfinite(params)):
            self._round.append(stat)
            self._backoff(f"asynchronous training diverged at update {self.version} (parameters not finite)")
            return self._after_push(now)
        self.guard.accepted()
        self.params, self.state = params, state
        self.version += 1
        stat.update(value=value, grad_norm=self._grad_norm(agg, msg), lr=scale * lr)
        self._round.append(stat)
        converged = self.stopper.add(value, self.iterations)  # tol: the epoch's mean, as sync SGD
        return self._after_push(now, converged)

    def _aggregate(self, total: Partial, msg: dict[str, Any]) -> tuple[float, np.ndarray | None]:
        """The objective at the current parameters and the aggregate gradient, from
        the sum of every group's latest sums (``msg``: the push, for subclasses)."""
        smooth, agg = self.objective.finish(total, self.params)
        return smooth + self.objective.l1_value(self.params), agg

    def _update(self, agg: np.ndarray | None, scale: float, msg: dict[str, Any]) -> tuple[np.ndarray, Any, float]:
        """The update along ``agg``: ``(parameters, optimizer state, learning rate)``."""
        return UpdateRule(self.optimizer, self.objective.penalty).apply(self.params, agg, self.state, scale)

    def _grad_norm(self, agg: np.ndarray | None, msg: dict[str, Any]) -> float:
        return float(np.linalg.norm(agg))  # type: ignore[arg-type]  # (this server's aggregate: a vector)

    def _received(self, g: int, partial: Partial, count: int | None) -> Partial | None:
        """A compressed push as the gradient sums the aggregate uses: decompressed, or
        (EF21) added to the group's estimate, which the server keeps whether or not the
        push is applied (the group's estimate moved too).  None when the group's count
        of payloads is not the server's (a restarted server or loop): the push is
        dropped, and the group, seeing the server's count at its next pull, starts its
        estimate afresh (count 0, which resets the server's too)."""
        grad = cast("Compressed", partial.grad_sum)  # (a compressed push)
        if not grad.compressor.accumulates:
            return dataclasses.replace(partial, grad_sum=grad.compressor.decompress(grad.payload))
        if count == 0 or self.estimates[g] is None:
            if count != 0:
                return None
            self.estimates[g] = np.zeros(self.params.size)
            self.ef_counts[g] = 0
        elif count != self.ef_counts[g]:
            return None
        self.estimates[g] = self.estimates[g] + grad.compressor.decompress(grad.payload)
        self.ef_counts[g] += 1
        return dataclasses.replace(partial, grad_sum=self.estimates[g].copy())  # type: ignore[union-attr]  # (set)

    def _backoff(self, what: str, to: int | None = None) -> None:
        """Non-finite or exploded sums, or non-finite parameters: back to the last good
        version (or version ``to``), half the step; at the guard's limit, stop with its
        error (``what``: the divergence, for its message)."""
        try:
            self.guard.backoff(what, diverged=True)
        except DivergenceError as err:  # the driver raises it (the server only stops)
            self.stop(error=str(err))
            return
        target = self.good if to is None else to
        params, state, optimizer = self.snapshots.get(target, self.snapshots[min(self.snapshots)])
        self.optimizer = halved(optimizer)
        self.params, self.state = params, state
        self.latest = [None] * self.n_groups
        self.version += 1
        self.valid_from = self.version
        self.rollbacks += 1
        self.snapshots = {self.version: (self.params, self.state, self.optimizer)}
        self.good = self.best = self.version

    def _prune(self) -> None:
        keep = set(self.pulled) | {self.good, self.best, self.version}
        for v in [v for v in self.snapshots if v not in keep]:
            del self.snapshots[v]

    @property
    def iterations(self) -> int:
        """Completed epochs: the rows of every push so far over the data's rows."""
        return self.rows_seen // self.n_rows

    def stop_rule(self, converged: bool) -> Stop | None:
        """The epoch rule's stop (its answer, ``converged``, came with the push)."""
        return Stop(True) if converged else None

    def _after_push(self, now: float, converged: bool = False) -> None:
        if len(self._round) >= self.n_groups:
            self._emit(now)
        if self.stopped:
            return
        stop = self.stops.limits(self, converged)
        if stop is not None:
            self.stop(message=stop.message, converged=stop.converged)

    def _emit(self, now: float) -> None:
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
        n = sum(s["down"] for s in stats)
        up = sum(s["up"] for s in stats)
        self.records.append(make_record(
            step=self.version, iteration=-(-self.rows_seen // self.n_rows), loss=last.get("value", math.nan),
            grad_norm=last.get("grad_norm", math.nan), step_size=last.get("lr"),
            timing=Timing(now - self._round_start, max(times), min(times), wait_time=max(s["wait"] for s in stats),
                          compute_time_median=float(sorted(times)[(len(times) - 1) // 2]),  # (lower median)
                          slowest_group=stats[int(np.argmax(times))]["group"]),
            n_samples=sum(s["weight"] for s in stats), updates_per_group=counts, nbytes=Bytes(n, up, n),
            staleness=(max(leads), float(np.mean(leads))), delay=(max(delays), float(np.mean(delays))), wall=now,
            lr_halvings=self.guard.halvings,
        ))
        self._round_start = now

    def status(self) -> dict[str, Any]:
        """What the driver watches at every poll: the updates made, each group's pushes
        and the error that stopped the server (None: none)."""
        return {"version": self.version, "clock": list(self.clock), "error": self.error}

    def drain(self) -> tuple[list[dict[str, Any]], bool]:
        """Records since the last drain, and whether training has stopped."""
        records, self.records = self.records, []
        return records, self.stopped

    def result(self) -> dict[str, Any]:
        return {
            "params": self.params,
            "optimizer": self.optimizer,
            "state": self.state,
            "epochs": min(self.stops.max_iter or math.inf, -(-self.rows_seen // self.n_rows)),
            "converged": self.converged,
            "message": self.message,
            "error": self.error,
            "updates": self.version,
        }


class ShardedCore(ServerCore):
    """The coordinator of asynchronous training over sharded parameters (see
    :mod:`..sharded.async_`): the clocks, the staleness bound, the stops, the backoffs
    and the records of :class:`ServerCore`, on scalars.  The owners have updated their
    slices by the time a push's scalars arrive; the objective is the latest sums' mean
    plus each owner's latest penalty value.  Its pulls name the mark (the version of
    the best objective), where a backoff sends the owners."""

    def __init__(self, optimizer: FirstOrderOptimizer, objective: TrainingObjective, n_groups: int, n_owners: int,
                 **kwargs: Any) -> None:
        super().__init__(np.zeros(0), optimizer, None, objective, n_groups, **kwargs)
        self.penalties = [0.0] * int(n_owners)

    def pull(self, g: int) -> dict[str, Any]:
        return {**super().pull(g), "mark": self.best}

    def _aggregate(self, total: Partial, msg: dict[str, Any]) -> tuple[float, None]:
        for o, answer in enumerate(msg["owners"]):
            if not answer.get("dropped"):
                self.penalties[o] = answer["pen"] + answer["l1"]
        return total.loss_sum / total.weight_sum + math.fsum(self.penalties), None

    def _update(self, agg: np.ndarray | None, scale: float, msg: dict[str, Any]) -> tuple[np.ndarray, Any, float]:
        lrs = [a["lr"] for a in msg["owners"] if "lr" in a]
        return self.params, self.state, max(lrs, default=0.0)

    def _grad_norm(self, agg: np.ndarray | None, msg: dict[str, Any]) -> float:
        return math.sqrt(math.fsum(a.get("gsq", 0.0) for a in msg["owners"]))


class ParameterServer:
    """Dask actor around a :class:`ServerCore`; its methods run on the worker's event
    loop, so a group waiting at the staleness bound never blocks the others."""

    def __init__(self, *args: Any, core_state: dict[str, Any] | None = None,
                 core_class: type[ServerCore] = ServerCore, **kwargs: Any) -> None:
        if core_state is None:
            self.core = core_class(*args, **kwargs)
        else:  # restarted from the driver's copy (its first worker was lost)
            self.core = core_class.__new__(core_class)
            self.core.__dict__.update(core_state)
        self._cond: asyncio.Condition | None = None

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    async def exchange(self, g: int, msg: dict[str, Any] | None) -> dict[str, Any]:
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

    async def stop(self, message: str = "", error: str | None = None) -> None:
        cond = self._condition()
        async with cond:
            self.core.stop(message=message, error=error)
            cond.notify_all()

    async def drain_with_state(self, whole: bool = True, at_version: int | None = None,
                               ) -> tuple[list[dict[str, Any]], bool, dict[str, Any], bool]:
        """The records since the last drain, whether training stopped, the state and
        whether it is whole: a copy of the server's whole state (what a new server
        restarts from if this worker is lost, what a checkpoint holds) when ``whole`` or
        once the server has made ``at_version`` updates, else its :meth:`ServerCore.status`."""
        records, stopped = self.core.drain()
        whole = whole or (at_version is not None and self.core.version >= at_version)
        return records, stopped, dict(vars(self.core)) if whole else self.core.status(), whole

    async def result(self) -> dict[str, Any]:
        return self.core.result()
