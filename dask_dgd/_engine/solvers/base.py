"""What every solver of the one driver loop is: the template, its outcome, its state.

A solver has the same shape in every mode (see :class:`Solver`): ``start`` makes the
first step, ``step`` proposes parameters, has them evaluated by the step source and
decides (accept, back off, shorten a line search), ``stop_rule`` is its own tolerance
rule, ``iterations`` how far it is in ``max_iter``'s unit (the limit itself is the
:class:`~..stopping.StopRules`'), and ``state_dict`` is what a checkpoint keeps.  The loop
(:mod:`..loop`) calls them in the same order for every solver and mode.

The solvers: :mod:`.first_order` (first-order optimizers, L-BFGS), :mod:`.newton`
(Newton/IRLS and coordinate descent), :mod:`.cd_path` (coordinate descent along a path),
:mod:`.als` (alternating least squares); local SGD and asynchronous training are
solvers too (:mod:`..modes`), and so is sharded training (:mod:`..sharded`) and the
pointwise climate GLMs' per-cell Newton passes (``climate/_pointwise_glm.py``, a solver
whose state is the cells' coefficients, persisted on the cluster).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..runtime.records import make_record
from ..stopping import Stop
from ..update import auto_learning_rate, initial_divergence

if TYPE_CHECKING:
    from collections.abc import Callable

    from ...optim import FirstOrderOptimizer
    from ..modes.sync import StepResult
    from ..protocols import FitContext
    from ..runtime.group_steps import LocalUpdate

__all__ = ["AttributeState", "CountsIterations", "Outcome", "Settings", "Solver", "start_step", "step_record"]


@dataclass
class Outcome:
    """What one step of a solver produced.

    ``records``: step records for the monitor; ``accepted``: whether the loop asks its
    stop rules now (False after a step that is undone or a line-search trial);
    ``stop``: the solver ends the fit itself."""

    records: list[dict[str, Any]] = field(default_factory=list)
    accepted: bool = True
    stop: Stop | None = None

    @property
    def record(self) -> dict[str, Any] | None:
        return self.records[-1] if self.records else None


@dataclass(frozen=True)
class Settings:
    """What a fit gives the class that runs it besides the context (:meth:`Solver.build`):
    where it starts, the optimizer and the state it continues, and the settings of the
    modes (local SGD's rounds, the asynchronous staleness) and of sharded L-BFGS
    (preconditioning on the owners)."""

    params0: Any = None
    optimizer: Any = None
    opt_state: Any = None
    local_steps: int = 1
    outer_optimizer: FirstOrderOptimizer | None = None
    max_staleness: int | None = None
    staleness_scaling: bool = False
    precondition: bool = False


class Solver:
    """The template every solver fills (see the module docstring)."""

    @property
    def progress(self) -> int:
        """The counter checkpoints are due on (updates, rounds, server versions)."""
        return 0

    #: the names of the group memory's mode state (:class:`~..runtime.group_steps.GroupMemory`)
    #: that checkpoints keep and a restarted group gets back
    group_state: tuple[str, ...] = ()

    #: the loop's checkpoint writer (:meth:`~..loop.Loop.save`), bound by :func:`~..train.train`
    save: Callable[..., None] | None

    @classmethod
    def build(cls, ctx: FitContext, settings: Settings) -> Solver:
        """The solver of a fit (the capability tables name the class, :mod:`..capabilities`)."""
        return cls(ctx, settings.params0)  # type: ignore[call-arg]  # the subclasses' own __init__

    @property
    def iterations(self) -> int | None:
        """How far the solver is in ``max_iter``'s unit (iterations, or completed epochs),
        which :meth:`~..stopping.StopRules.limit` compares with ``max_iter``; None: the
        solver is not bounded by ``max_iter`` as a whole (it bounds parts of itself)."""
        return None

    def start(self) -> Outcome:
        raise NotImplementedError

    def step(self) -> Outcome:
        raise NotImplementedError

    def stop_rule(self, outcome: Outcome) -> Stop | None:
        """The solver's own rule after an accepted step (its tolerance; limits of its
        own that are not ``max_iter``): a :class:`Stop` or None."""
        return None

    def finish(self, stop: Stop, emit: Callable[[list[dict[str, Any]]], None]) -> Stop:
        """The fit ends (``stop``): e.g. stop the parameter server; records produced
        meanwhile go to ``emit``.  Returns the final stop."""
        return stop

    def close(self) -> None:
        """Let go of what the solver holds on the cluster (also after an error)."""

    def local_keys(self) -> tuple[int, ...]:
        """The snapshots of the groups' local parameters a checkpoint keeps."""
        return ()

    def local_export(self) -> LocalUpdate:
        """Which snapshot of the groups' local parameters is the result (a
        :class:`~..runtime.group_steps.LocalUpdate`): the latest kept one."""
        from ..runtime.group_steps import LocalUpdate

        return LocalUpdate(self.local_keys()[0], -1, ())

    #: the coordinates the records' gradients are in when the solver changes them
    #: itself (sharded L-BFGS scales on the owners); None: those of the objective
    coordinates: str | None = None

    def gap(self) -> float | None:
        """The largest entry of the (sub)gradient at the result, in the coordinates the
        solver ran in (what its ``tol`` is compared with); None where it has none."""
        return None

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise NotImplementedError

    def resume(self) -> Outcome:
        """The first outcome of a resumed fit (after :meth:`load_state_dict`)."""
        raise NotImplementedError

    def result(self) -> tuple[Any, int, Any, Any]:
        """``(params, n_iter, optimizer, optimizer state)``."""
        raise NotImplementedError


class CountsIterations:
    """A solver whose progress (checkpoints) and ``max_iter`` unit are both its count of
    iterations, ``it`` (L-BFGS, Newton/IRLS)."""

    it: int = 0

    @property
    def progress(self) -> int:
        return self.it

    @property
    def iterations(self) -> int:
        return self.it


class AttributeState:
    """``state_dict``/``load_state_dict`` of a solver whose checkpointed state is the
    attributes named in ``_STATE``."""

    _STATE: tuple[str, ...] = ()
    #: attributes checkpointed too, absent from older checkpoints: ``getattr`` of the
    #: solver as loaded (its value from ``__init__``) when missing
    _LATER_STATE: tuple[str, ...] = ()

    def state_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self._STATE + self._LATER_STATE}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k in self._STATE:
            setattr(self, k, state[k])
        for k in self._LATER_STATE:
            setattr(self, k, state.get(k, getattr(self, k)))


def step_record(ctx: FitContext, res: StepResult, iteration: int, value: float, grad: np.ndarray,
                step_size: float | None, **extra: Any) -> dict[str, Any]:
    """The record of one synchronous step (``res``: a :class:`~..modes.sync.StepResult`)."""
    obj = ctx.objective
    n_groups = max(int(res.partial.n_groups), 1)
    return make_record(
        step=res.step, iteration=iteration, loss=value, grad_norm=obj.grad_norm(res.partial, grad)
        if hasattr(obj, "grad_norm") else float(np.linalg.norm(grad)),
        step_size=step_size, timing=res.timing, n_samples=res.partial.weight_sum,
        updates_per_group=(1,) * n_groups, nbytes=res.nbytes, route=res.route, **obj.record_extras(res.partial),
        **extra,
    )


def start_step(ctx: FitContext, params: np.ndarray, optimizer: FirstOrderOptimizer, *,
               divide: int = 1) -> tuple[FirstOrderOptimizer, StepResult, dict[str, Any]]:
    """The synchronous start of the local and asynchronous modes.

    One step at ``params`` (full batch, or the first mini-batch): it checks the data,
    gives the first history record, and the gradient for ``learning_rate="auto"``, whose
    step is divided by ``divide``.  Returns ``(optimizer with its learning rate, the
    step result, its record)``."""
    src, obj = ctx.source, ctx.objective
    draw = None if ctx.batching is None else ctx.batching.draw(src.n_steps + 1)
    res = src.evaluate(params, draw, src.local_update(0))
    if not res.finite:
        raise initial_divergence(res.value)
    if ctx.learning_rate == "auto":
        L = obj.lipschitz(ctx.shards, params)
        optimizer = optimizer.with_learning_rate(auto_learning_rate(optimizer, L, res.grad) / divide)
    record = step_record(ctx, res, 0, res.value + obj.l1_value(params), res.grad, None)
    return optimizer, res, record
