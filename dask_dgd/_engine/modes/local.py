"""Local SGD: several optimizer steps per group between averagings.

Each *round* broadcasts the parameters; every group takes ``local_steps`` steps of the
:class:`~..update.UpdateRule` (whose optimizer state stays on the group's worker between
rounds) on its own blocks, and the new parameters of the groups are averaged, weighted
by the sample weight each group saw.  An optional *outer* optimizer then moves the
parameters along the averaged delta (server momentum); without one the average is the
new parameters.  A model's local parameters (matrix factorization's users) are updated
by their group at every local step and never averaged.

Mini-batches are the groups' shares of the synchronous mode's global batches (the
same draws), so with ``local_steps=1`` and plain SGD a round is exactly a synchronous
mini-batch step.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..runtime.faults import inject_faults
from ..runtime.group_steps import (
    COMPRESSION_TAG,
    StaleState,
    check_payload_count,
    compress_into,
    local_snapshot,
    store_local,
    sum_blocks,
)
from ..runtime.records import Bytes, Route, Timing, make_record
from ..runtime.reduce import Partial
from ..solvers.base import Outcome, Solver, start_step
from ..stopping import EpochStopper, Stop
from ..update import Guard, UpdateRule, halved

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import TypeAlias

    from ...compression import Compressor
    from ...optim import FirstOrderOptimizer
    from ..data.blocks import Shard
    from ..protocols import FitContext, TrainingObjective
    from ..runtime.group_steps import Draw, GroupMemory, LocalUpdate
    from ..runtime.reduce import Compressed
    from ..solvers.base import Settings

    #: A round's compression: ``(compressor, seed, round, the driver's EF21 payload count)``.
    RoundCompression: TypeAlias = "tuple[Compressor, tuple[int, ...], int, int]"

__all__ = ["LocalSGD", "check_round_estimate", "compress_round", "diverged_loss", "group_round", "round_first",
           "round_partial"]


def round_partial(params_sum: np.ndarray | Compressed, weight: float, first: Partial, dt: float, wall0: float,
                  finite: bool, diverged_loss: float | None = None) -> Partial:
    """What one group returns from a round, as a :class:`~..runtime.reduce.Partial` that the
    groups' tree sums: ``grad_sum`` is the group's final parameters times ``weight``
    (the sample weight of all its local batches), ``loss_sum`` and the ``first_*``
    extras the sums of its first local batch at the broadcast parameters (the round's
    objective), ``nonfinite`` 1 where the group diverged, and then ``diverged_loss`` the
    local objective at which it stopped (summed over the groups that diverged: see
    :func:`diverged_loss`)."""
    extras: dict[str, Any] = {"first_weight": first.weight_sum, "nonfinite": 0.0 if finite else 1.0}
    if not finite:
        extras["diverged_loss"] = float(diverged_loss)  # type: ignore[arg-type]  # (given where not finite)
    if first.grad_sum is not None:  # (a compressed round sends no first-batch gradient)
        extras["first_grad"] = first.grad_sum
    extras.update({f"first.{k}": v for k, v in first.extras.items()})
    return Partial(first.loss_sum, params_sum, weight, dt, dt, 1, wall0, wall0 + dt, extras)


def diverged_loss(total: Partial) -> tuple[float | None, int]:
    """The local objective at which the groups of the summed :func:`round_partial`
    ``total`` diverged (their mean where several did; NaN or inf where one was) and how
    many groups diverged; ``(None, 0)`` when none did."""
    count = int(round(total.extras.get("nonfinite", 0.0)))
    if count == 0:
        return None, 0
    return total.extras["diverged_loss"] / count, count


def round_first(total: Partial, size: int) -> Partial:
    """The round objective's sums (the groups' first local batches) from the summed
    :func:`round_partial` (a zero gradient of ``size`` entries when the groups sent
    none: only the loss is used)."""
    ex = total.extras
    extras = {k[len("first."):]: v for k, v in ex.items() if k.startswith("first.")}
    grad = ex["first_grad"] if "first_grad" in ex else np.zeros(size)
    return Partial(total.loss_sum, grad, ex["first_weight"], total.time_min, total.time_max,
                   total.n_groups, extras=extras)


def group_round(shard: Shard, scratch: GroupMemory, objective: TrainingObjective, rule: UpdateRule,
                params: np.ndarray, reset: bool, draws: Sequence[Draw | None], local: LocalUpdate | None,
                limit: float = math.inf, compression: RoundCompression | None = None) -> Partial:
    """``len(draws)`` update-rule steps on this group's blocks from ``params`` (worker
    side); ``draws[j]`` is local step ``j``'s batch (None: all rows).  The optimizer
    state is kept in ``scratch`` across rounds; ``reset`` starts it afresh.  A local
    objective that is not finite or above ``limit`` (the guard's, for parts of the
    data) stops the round: the group diverged.

    ``compression=(compressor, seed, round, ef_count)``: the group sends its weighted
    *change* ``weight * (p - params)`` compressed, with its memory in ``scratch``
    (``"round_compression"``: a residual, or an EF21 estimate of the change whose sum the
    driver keeps; ``ef_count`` is the driver's count of payloads, checked first as in
    :func:`~..runtime.group_steps.group_step`), and no first-batch gradient (the driver uses only
    the first batch's loss)."""
    wall0, t0 = time.time(), time.perf_counter()
    if compression is not None and compression[0].accumulates:
        check_round_estimate(scratch, compression[3])
    state = None if reset else scratch.modes.get("round")
    if state is None:
        state = rule.optimizer.init(params)
    p = np.array(params, dtype=np.float64, copy=True)
    lp = lstate = None
    if local is not None:
        lp, lstate = local_snapshot(scratch, local)
        local_rule = UpdateRule(rule.optimizer)  # the local parameters' penalty is in their loss
    memory = scratch.objective
    first, total, finite, value = None, 0.0, True, None
    for draw in draws:
        sums, lgrad = objective.group_sums(shard, p, objective.step_aux(p), draw, lp, memory)
        partial = sum_blocks(objective, sums)
        if first is None:
            first = partial
        weight = partial.weight_sum
        if weight <= 0:
            continue  # only zero-weight rows drawn: no information
        total += weight
        value, g = objective.finish(partial, p)
        if not (math.isfinite(value) and value <= limit and np.all(np.isfinite(g))):
            finite = False
            break
        p, state, _ = rule.apply(p, g, state)
        if local is not None:
            if lstate is None:
                lstate = rule.optimizer.init(lp)
            lp, lstate, _ = local_rule.apply(lp, lgrad * (1.0 / weight), lstate)
    scratch.modes["round"] = state
    if local is not None and finite:
        store_local(scratch, local, lp, lstate, None)
    sent: np.ndarray | Compressed = total * p
    # (first: set, a round has at least one draw; a compressed round sends no first-batch gradient)
    if compression is not None and finite:
        sent = compress_round(shard, scratch, compression, objective, total * (p - params))
        first = Partial(first.loss_sum, None, first.weight_sum, 0.0, 0.0, extras=first.extras)  # type: ignore[union-attr, arg-type]
    inject_faults(t0)
    dt = time.perf_counter() - t0
    return round_partial(sent, total, first, dt, wall0, finite, value)  # type: ignore[arg-type]


def check_round_estimate(scratch: GroupMemory, count: int) -> None:
    """Raise StaleState unless the group's EF21 estimate has ``count`` payloads behind it
    (``count=0``: it starts afresh)."""
    if count == 0:
        scratch.modes.pop("round_compression", None)
        return
    check_payload_count(scratch.modes.get("round_compression"), count, "the group's round")


def compress_round(shard: Shard, scratch: GroupMemory, compression: RoundCompression, objective: TrainingObjective,
                    change: np.ndarray) -> Compressed:
    """A group's round change compressed with its memory (see :func:`group_round`)."""
    comp, seed, round_, _ = compression
    blocks = getattr(shard, "blocks", None)
    tag = min((b.index for b in blocks), default=0) if blocks else int(getattr(shard, "index", 0))
    return compress_into(scratch.modes, "round_compression", comp, objective.grad_template(), change,
                         [*seed, COMPRESSION_TAG, round_, tag])


class LocalSGD(Solver):
    """Local SGD rounds until ``max_iter`` epochs, the ``tol`` criterion or a stop.

    An epoch is ``steps_per_epoch`` local steps per group (one step with full
    batches), so ``max_iter`` means the same passes over the data as in the synchronous
    mode.  Stopping on ``tol`` follows synchronous mini-batch training
    (:class:`~..stopping.EpochStopper`), on the round objectives (each round's first
    local batches, at the broadcast parameters).  A round in which a group diverged (a
    local objective NaN/inf, or exploded: :meth:`~..update.Guard.limit` for parts of the
    data) restores the round's starting parameters, halves the learning rate and
    restarts the local optimizer states; a round whose objective at the broadcast
    parameters itself exploded (the previous round diverged after its last local
    objective) restores the previous round's start.  ``on_divergence="raise"`` raises
    at the first of these, as synchronous training does.
    """

    #: the group memory's names (``GroupMemory.modes``) a checkpoint keeps: the optimizer
    #: state between rounds and the round's compression memory
    group_state: tuple[str, ...] = ("round", "round_compression")

    @classmethod
    def build(cls, ctx: FitContext, settings: Settings) -> LocalSGD:
        return cls(ctx, settings.params0, settings.optimizer, local_steps=settings.local_steps,
                   outer_optimizer=settings.outer_optimizer)

    def __init__(self, ctx: FitContext, params0: np.ndarray, optimizer: FirstOrderOptimizer, *, local_steps: int,
                 outer_optimizer: FirstOrderOptimizer | None = None) -> None:
        self.ctx = ctx
        self.params = np.array(params0, dtype=np.float64, copy=True)
        self.optimizer = optimizer
        self.local_steps = int(local_steps)
        self.outer = outer_optimizer
        self.outer_state = None
        full_batch = ctx.batching is None or ctx.batching.full_batch
        self.steps_per_epoch = 1 if full_batch else ctx.batching.steps_per_epoch
        # the local steps of max_iter epochs: the last round is cut there (the limit
        # itself is the stop rules', on iterations)
        self.total_steps = ctx.max_iter * self.steps_per_epoch
        self.guard = Guard(ctx.on_divergence, full_batch=full_batch, hint=ctx.objective.hint)
        self.stopper = EpochStopper(ctx.tol, ctx.n_iter_no_change)
        self.rounds = 0
        self.reset = True
        self.local_count = 0  # local updates since the local states were (re)started
        self.step0 = 0
        self.local_key = 0  # the snapshot of the local parameters the next round starts from
        self.value: float | None = None
        self._last_end: float | None = None
        self.previous: dict[str, Any] | None = None  # the state at the start of the last accepted round
        comp = ctx.compressor
        # EF21: the sum of the groups' estimates of their round changes, and its payloads
        self.estimate = np.zeros(self.params.size) if comp is not None and comp.accumulates else None
        self.ef_count = 0

    @property
    def progress(self) -> int:
        return self.rounds

    def _steps_after(self, n_rounds: int) -> int:
        return min(self.total_steps, n_rounds * self.local_steps)

    def start(self) -> Outcome:
        # one synchronous step for the learning rate and the data checks; the first
        # round reuses its batch (as the synchronous mode's first update does)
        self.optimizer, res, record = start_step(self.ctx, self.params, self.optimizer)
        self.guard.start(res.value + self.ctx.objective.l1_value(self.params))
        record["lr_halvings"] = self.guard.halvings
        if res.local_key is not None:
            self.local_key = res.local_key
        self.outer_state = None if self.outer is None else self.outer.init(self.params)
        self.step0 = self.ctx.source.n_steps
        return Outcome([record])

    def step(self) -> Outcome:
        ctx, src, obj = self.ctx, self.ctx.source, self.ctx.objective
        t0, wall0, cpu0 = time.perf_counter(), time.time(), time.process_time()
        update_time = None if self._last_end is None else t0 - self._last_end
        step = self.step0 + self.rounds * self.local_steps
        n_local = self._steps_after(self.rounds + 1) - self._steps_after(self.rounds)
        draws = [None if ctx.batching is None else ctx.batching.draw(step + j) for j in range(n_local)]
        keep = (self.local_key,) if self.previous is None else (self.local_key, self.previous["local_key"])
        local = src.local_update(self.local_key, keep=keep) if obj.has_local else None
        if local is not None:
            src.n_steps += 1  # the round's key (local_update numbers it n_steps + 1)
        rule = UpdateRule(self.optimizer, obj.penalty)
        coll = ctx.shards.collective
        comp = ctx.compressor
        for attempt in range(2):
            compression = None if comp is None else (comp, tuple(ctx.seed), self.rounds, self.ef_count)
            try:
                total = self._round(rule, draws, local, compression)
                break
            except StaleState:  # a group lost its estimate: all start afresh
                if attempt:
                    raise
                self.estimate[:] = 0.0  # type: ignore[index]  # (stale estimates: EF21)
                self.ef_count = 0
        wall1 = time.time()
        traffic = coll.last_traffic  # (the round's, before any call that averages on the workers)
        weight = total.weight_sum
        value = self._round_value(total)  # the round's objective, at the broadcast parameters
        lr = self._round_rate(total)
        where = f"in round {self.rounds + 1}"
        bad = not math.isfinite(value) or self.guard.exploded(value, where=where, learning_rate=lr)
        start_bad = bad and self.value_at_start  # (else the round's own passes diverged: this round is undone)
        finite = total.extras["nonfinite"] == 0 and not bad
        change = cast("np.ndarray", total.grad_sum)  # (the root's: dense)
        if self.estimate is not None:  # EF21: the groups sent the changes of their estimates
            if finite and np.all(np.isfinite(change)):
                self.estimate += change
                self.ef_count += 1
                change = self.estimate
            else:  # the groups' estimates are out of step with the sum: all start afresh
                self.estimate[:] = 0.0
                self.ef_count = 0
        avg = None  # (the round drew only zero-weight rows: no information, no move)
        if finite and weight > 0:
            avg, finite = self._propose(total, change, weight)
        if not finite:
            self.guard.backoff(self._divergence(total, value, where, start_bad), diverged=True)
            self.optimizer, self.reset, self.local_count = halved(self.optimizer), True, 0
            if start_bad and self.previous is not None:  # the previous round led here: undo it
                prev, self.previous = self.previous, None
                self._go_back(prev)
                self.rounds, self.local_key, self.value = prev["rounds"], prev["local_key"], prev["value"]
                self.stopper.load_state_dict(prev["stopper"])
            return Outcome(accepted=False)
        self.guard.accepted()
        self.previous = {"params": self.params, "outer_state": self.outer_state, "rounds": self.rounds,
                         "local_key": self.local_key, "value": self.value, "stopper": self.stopper.state_dict()}
        self.reset = False
        if local is not None:
            self.local_key = local.key
        self.value = value
        moved = self._adopt(avg)
        self.rounds += 1
        self.local_count += n_local
        self._last_end = time.perf_counter()
        if local is None:
            src.n_steps += 1
        record = make_record(
            step=src.n_steps, iteration=-(-self._steps_after(self.rounds) // self.steps_per_epoch), loss=self.value,
            grad_norm=moved, step_size=lr,
            timing=Timing(self._last_end - t0, total.time_max, total.time_min, total.start_max - wall0,
                          wall1 - total.end_max, update_time, driver_cpu_time=time.process_time() - cpu0,
                          compute_time_median=total.time_median(), slowest_group=total.slowest),
            n_samples=weight, updates_per_group=self._updates_per_group(total, n_local),
            nbytes=self._round_bytes(traffic, total), route=Route.of(traffic), lr_halvings=self.guard.halvings,
        )
        return Outcome([record])

    def _round(self, rule: UpdateRule, draws: list[Draw | None], local: LocalUpdate | None,
               compression: RoundCompression | None) -> Partial:
        """The round on every group, summed in the groups' tree (:func:`group_round`)."""
        src, obj = self.ctx.source, self.ctx.objective
        return self.ctx.shards.collective.reduce_groups(
            group_round, obj, rule, self.params, self.reset, draws, local, self.guard.limit(batch=True), compression,
            split_every=src.split_every, step=src.n_steps + (local is None),  # the round's record number
            size=obj.n_params)

    def _round_value(self, total: Partial) -> float:
        """The round's objective at the broadcast parameters: the groups' first local batches'."""
        obj = self.ctx.objective
        smooth, _ = obj.finish(round_first(total, obj.n_params), self.params)
        return smooth + obj.l1_value(self.params)

    def _propose(self, total: Partial, change: np.ndarray, weight: float) -> tuple[Any, bool]:
        """The round's new point from the summed answers (see :meth:`_average`) and
        whether it is finite."""
        avg = self._average(total, change, weight)
        return avg, bool(np.all(np.isfinite(avg)))

    def _adopt(self, avg: Any) -> float:
        """Move to the round's averaged point ``avg`` (through the outer optimizer, if
        any; None: the round brought no information, no move); returns the norm of the
        averaged change (the record's ``grad_norm``)."""
        avg = self.params if avg is None else avg
        delta = self.params - avg
        if self.outer is None:
            self.params = avg
        else:
            updates, self.outer_state = self.outer.update(delta, self.outer_state, self.params)
            self.params = self.params + updates
        return float(np.linalg.norm(delta))

    def _go_back(self, prev: dict[str, Any]) -> None:
        """Return to the start of the last accepted round (``prev``: its state)."""
        self.params, self.outer_state = prev["params"], prev["outer_state"]

    def _round_bytes(self, traffic: dict[str, Any], total: Partial) -> Bytes:
        """The round's bytes: up the tree (see :meth:`_bytes_up`) and the broadcast down."""
        n_bytes = 8 * self.ctx.objective.n_params * self.ctx.shards.n_groups
        up = self._bytes_up(traffic, n_bytes)
        return Bytes(up[0], up[1], n_bytes)

    def _average(self, total: Partial, change: np.ndarray, weight: float) -> np.ndarray:
        """The new parameters from the summed answers (``change``: the weighted final
        parameters, or with compression the weighted changes; ``weight`` their weight)."""
        avg = change / weight  # summed in the fixed tree over the groups
        if self.ctx.compressor is not None:  # the groups sent their weighted changes
            avg = self.params + avg
        return avg

    def _bytes_up(self, traffic: dict[str, Any], n_bytes: int) -> tuple[int, int]:
        """The round's bytes up the tree, ``(raw, as sent)``."""
        return (n_bytes, n_bytes) if self.ctx.compressor is None else (traffic["bytes_up_raw"], traffic["bytes_up"])

    #: the mode's name in divergence messages
    label = "local SGD"

    def _divergence(self, total: Partial, value: float, where: str, start_bad: bool) -> str:
        """What diverged in the round ``where``, for the guard's messages: the round's
        objective ``value`` at the broadcast parameters when that exploded
        (``start_bad``), else the local objective at which the groups stopped (``value``,
        the starting point, was fine then), else the averaged parameters."""
        if start_bad:
            return f"{self.label} diverged {where} (loss={value} at the round's starting parameters)"
        loss, count = diverged_loss(total)
        if count:
            n = self.ctx.shards.n_groups
            what = (f"the mean of the local objectives at which {count} of {n} groups stopped" if count > 1 else
                    f"the local objective at which {'the group' if n == 1 else f'1 of {n} groups'} stopped")
            return f"{self.label} diverged {where} (loss={loss}: {what}, from {value} at the round's start)"
        return (f"{self.label} diverged {where}: the averaged parameters are not finite (loss={value} at the "
                "round's start)")

    #: whether the round's value is the objective at the round's starting parameters (the
    #: first local batches'): when it exploded, the previous round led there and is undone
    value_at_start = True

    def _updates_per_group(self, total: Partial, n_local: int) -> tuple[int, ...]:
        """The optimizer steps each group took in the round (the record's ``updates_per_group``)."""
        return (n_local,) * self.ctx.shards.n_groups

    def _round_rate(self, total: Partial) -> float:
        """The learning rate the round's record and divergence advice name: the groups' first local step's."""
        return self.optimizer.learning_rate_at(self.local_count)

    @property
    def iterations(self) -> int:
        """Completed epochs (the rounds' local steps per group over ``steps_per_epoch``)."""
        return self._steps_after(self.rounds) // self.steps_per_epoch

    def stop_rule(self, outcome: Outcome) -> Stop | None:
        if self.rounds == 0:  # the synchronous start: no round yet
            return None
        if self.stopper.add(self.value, self.iterations):  # type: ignore[arg-type]  # (set by the first round)
            return Stop(True)
        return None

    def local_keys(self) -> tuple[int, ...]:
        return (self.local_key,)

    def result(self) -> tuple[np.ndarray, int, FirstOrderOptimizer, None]:
        return self.params, -(-self._steps_after(self.rounds) // self.steps_per_epoch), self.optimizer, None

    def state_dict(self) -> dict[str, Any]:
        return {
            "params": self.params, "optimizer": self.optimizer, "outer_state": self.outer_state,
            "rounds": self.rounds, "reset": self.reset, "local_count": self.local_count, "step0": self.step0,
            "local_key": self.local_key, "value": self.value, "guard": self.guard.state_dict(),
            "stopper": self.stopper.state_dict(), "estimate": self.estimate, "ef_count": self.ef_count,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k in ("params", "optimizer", "outer_state", "rounds", "reset", "local_count", "step0", "local_key",
                  "value"):
            setattr(self, k, state[k])
        self.guard.load_state_dict(state["guard"])
        self.stopper.load_state_dict(state["stopper"])
        if self.estimate is not None and state.get("estimate") is not None:
            self.estimate = np.array(state["estimate"], dtype=np.float64)
            self.ef_count = int(state["ef_count"])

    def resume(self) -> Outcome:
        stop = self.ctx.stops.limit(self.iterations)
        return Outcome(accepted=False) if stop is None else Outcome(stop=stop)
