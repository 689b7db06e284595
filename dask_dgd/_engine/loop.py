"""The one driver loop of every mode, solver and model family.

::

    outcome = solver.start()  (or solver.resume() from a checkpoint)
    until a stop:
        after an accepted step: ask the stop rules; write a checkpoint when due
        outcome = solver.step()           # one distributed step (or poll)
        its records go to the monitor     # history, bar, log, callbacks
    solver.finish(stop); the final checkpoint

What differs between full-batch and mini-batch gradient descent, L-BFGS, Newton, local
SGD and the asynchronous parameter server is inside the solver (:mod:`.solvers.first_order`,
:mod:`.modes`); the stop rules (:mod:`.stopping`), the records (:mod:`.runtime.records`) and
the checkpoints (:mod:`.runtime.checkpoint`) are the loop's, written once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..exceptions import CheckpointError
from .runtime.group_steps import group_memory, group_restore
from .solvers.base import Outcome
from .stopping import Stop

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from .protocols import FitContext
    from .runtime.checkpoint import Checkpointer
    from .solvers.base import Solver
    from .stopping import StopRules

__all__ = ["Loop"]


class Loop:
    """Runs ``solver`` until a stop rule, the solver or an error ends the fit.

    Parameters
    ----------
    ctx : Context
        The fit's shared parts (shards, objective, step source, monitor, settings).
    solver : Solver
    stops : StopRules
    checkpoint : Checkpointer or None
    """

    def __init__(self, ctx: FitContext, solver: Solver, stops: StopRules,
                 checkpoint: Checkpointer | None = None) -> None:
        self.ctx, self.solver, self.stops, self.checkpoint = ctx, solver, stops, checkpoint
        self.monitor = ctx.monitor
        self._saved_progress: int | None = None

    def emit(self, records: Iterable[dict[str, Any]]) -> None:
        for rec in records:
            self.monitor.record(rec)

    def run(self) -> Stop:
        """Train; returns the :class:`~.stopping.Stop` that ended the fit."""
        outcome = self._begin()
        stop = outcome.stop
        while stop is None:
            if outcome.accepted:
                stop = self.stops.check(self.solver, outcome)
                if stop is not None:
                    break
                self._checkpoint_when_due()
            outcome = self.solver.step()
            self.emit(outcome.records)
            stop = outcome.stop
        stop = self.solver.finish(stop, self.emit) or stop
        if self.checkpoint is not None:
            self.save(stop)
        return stop

    def _begin(self) -> Outcome:
        cp = self.checkpoint
        saved = cp.load() if cp is not None else None
        if cp is None or saved is None:
            outcome = self.solver.start()
            self.emit(outcome.records)
            return outcome
        try:
            self.monitor.records[:0] = saved["records"]  # the history so far, not shown again
            self.ctx.source.n_steps = saved["n_steps"]
            self.ctx.source.load_state_dict(saved.get("source"))
            self.ctx.reseed(saved["seed"])  # random_state=None: the interrupted fit's draws
            self.solver.load_state_dict(saved["solver"])
            self.stops.load_state_dict(saved["stops"])
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:  # a crafted file
            raise CheckpointError(
                f"the checkpoint at {cp.path!r} holds a malformed state ({type(err).__name__}: {err})"
            ) from err
        self._restore_placement(saved.get("placement"))
        self._restore_groups(saved["groups"])
        self._saved_progress = self.solver.progress
        done = saved.get("stop")
        if done is not None and done["converged"]:
            return Outcome([], accepted=False, stop=Stop(True, done["message"]))  # already converged: nothing to do
        outcome = self.solver.resume()
        self.emit(outcome.records)
        return outcome

    # -------------------------------------------------------------- checkpoints
    def _checkpoint_when_due(self) -> None:
        progress = self.solver.progress
        if (self.checkpoint is not None and self.checkpoint.due(progress)
                and progress != self._saved_progress):
            self.save()

    def save(self, stop: Stop | None = None, pending: Sequence[dict[str, Any]] = ()) -> None:
        """Write the loop's state: the solver's, the stop rules', the history (with
        ``pending`` records not shown yet), the step count, the groups' memory."""
        ctx = self.ctx
        records = list(self.monitor.records) + [self.monitor.stamp(rec) for rec in pending]
        state = {
            "solver": self.solver.state_dict(),
            "stops": self.stops.state_dict(),
            "records": records,
            "n_steps": ctx.source.n_steps,
            "source": ctx.source.state_dict(),
            "seed": list(ctx.seed),
            "placement": list(ctx.shards.placement()),
            "groups": self._gather_groups(),
            "stop": None if stop is None else {"converged": stop.converged, "message": stop.message},
        }
        self.checkpoint.save(state)  # type: ignore[union-attr]  # (called only with a checkpoint)
        self._saved_progress = self.solver.progress

    def _gather_groups(self) -> list[tuple[list[int], dict[str, Any]]]:
        """Every group's memory (:func:`~.runtime.group_steps.group_memory`), keyed by its blocks."""
        if not self.ctx.keeps_group_memory:
            return []
        memories = self.ctx.shards.collective.call(group_memory, tuple(self.solver.local_keys()),
                                                   tuple(self.solver.group_state))
        return [(list(g), m) for g, m in zip(self.ctx.shards.groups, memories)]

    def _restore_placement(self, saved: Sequence[str] | None) -> None:
        """Put the blocks where the checkpoint's fit had them, if its workers are all still
        here: a group's own memory (local SGD's optimizer state) belongs to a grouping of
        blocks, and Dask may have placed the input otherwise this time (replicas, work
        stealing).  Only for fits whose groups keep memory; else placement changes no sum."""
        shards = self.ctx.shards
        if not (saved and self.ctx.keeps_group_memory and shards.executor.kind == "dask"):
            return
        if list(saved) == shards.placement() or len(saved) != shards.n_blocks:
            return
        if set(saved) <= set(shards.executor.workers()) and shards.collective.regroup(list(saved)):
            self.ctx.source.regrouped()  # (the runners restarted: sharded parameters are set up again)

    def _restore_groups(self, saved: Sequence[tuple[Sequence[int], dict[str, Any]]]) -> None:
        """Give each group the memory saved for its blocks: per-block states follow
        their blocks wherever they are now; a group's own memory needs a group of the
        same blocks (else it starts afresh, with a warning)."""
        if not saved:
            return
        import logging

        blocks, by_group = {}, {}
        for g, memory in saved:
            blocks.update({int(b): s for b, s in (memory.get("blocks") or {}).items()})
            by_group[tuple(int(b) for b in g)] = memory
        shards = self.ctx.shards
        per_group, missing = [], 0
        for g in shards.groups:
            own = by_group.get(tuple(g), {})
            if not own and any(m.get("local") or m.get("modes") for m in by_group.values()):
                missing += 1
            per_group.append(({"blocks": {b: blocks[b] for b in g if b in blocks},
                               "local": own.get("local"), "local_scaled": own.get("local_scaled"),
                               "modes": own.get("modes")},))
        if missing:
            logging.getLogger("dask_dgd").warning(
                "the data is grouped differently than when the checkpoint was written: %d group(s) "
                "restart their own state from zero", missing,
            )
        shards.collective.call(group_restore, self.ctx.objective, per_group=per_group)

