"""First-order solvers of the one driver loop (the template: :mod:`.base`).

- :class:`FirstOrder`: gradient steps of a first-order optimizer through the
  :class:`~..update.UpdateRule`, full batch or mini-batch, with the divergence guard;
- :class:`LBFGS`: limited-memory BFGS (two-loop recursion from
  :mod:`dask_dgd.optim`) with a backtracking Armijo line search, every trial point one
  distributed step.

Newton/IRLS and coordinate descent are in :mod:`.newton`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ...optim import strong_wolfe
from ...optim._lbfgs import two_loop
from ...optim._linesearch import rounding_level, ties
from ..stopping import EpochStopper, Stop, gradient_tol
from ..update import Guard, UpdateRule, auto_learning_rate, initial_divergence
from .base import CountsIterations, Outcome, Solver, step_record

if TYPE_CHECKING:
    from collections.abc import Generator, Mapping

    from ...optim import LBFGS as LbfgsSettings
    from ...optim import FirstOrderOptimizer
    from ..modes.sync import StepResult
    from ..protocols import FitContext
    from ..runtime.group_steps import Draw, LocalUpdate
    from .base import Settings

__all__ = ["FirstOrder", "LBFGS"]


class FirstOrder(Solver):
    """Gradient descent with a first-order optimizer, full batch or mini-batch.

    Full batch: at most ``max_iter`` updates; stops when the largest entry of the
    (proximal) gradient mapping is at most ``tol`` (models whose tolerance is on the
    objective, ``objective.tol_on_objective``: the epoch rule below).  Mini-batch: at
    most ``max_iter`` epochs of ``steps_per_epoch`` steps; stops when the epoch's mean
    batch objective has not improved by more than ``tol`` for ``n_iter_no_change``
    epochs (unless early stopping decides).

    A step that diverged (:class:`~..update.Guard`) restores the last accepted
    parameters (and, for models with local parameters, names their snapshot to the
    groups) and halves the learning rate.  ``learning_rate="auto"`` replaces the
    optimizer's learning rate by :func:`~..update.auto_learning_rate` (shortened for a
    compressor).

    The decisions (the guard, the backoff, the epochs, the records, the checkpoint's
    counters) are written here once; where the parameters are is the hooks':
    ``_evaluate`` (the next evaluation), ``_update`` (the update after an accepted
    step), ``_back_off`` (to the last accepted step), ``_judge`` and ``_accept`` (an
    evaluation's objective, and what is kept of an accepted one), ``_validate``,
    ``_record``, ``gap``, ``result`` and the checkpoint's own part (``_own_state``,
    ``_load_own``, ``_restore``, ``_resume_updated``).  These are the driver's vectors
    here, the owners' slices in :class:`~..sharded.driver.ShardedFirstOrder`.
    """

    @classmethod
    def build(cls, ctx: FitContext, settings: Settings) -> FirstOrder:
        return cls(ctx, settings.params0, settings.optimizer, settings.opt_state)

    def __init__(self, ctx: FitContext, params0: np.ndarray, optimizer: FirstOrderOptimizer,
                 opt_state: Any = None) -> None:
        self.params = np.array(params0, dtype=np.float64, copy=True)
        self.state = opt_state
        self.grad: np.ndarray | None = None
        self._set_rules(ctx, UpdateRule(optimizer, ctx.objective.penalty))

    def _set_rules(self, ctx: FitContext, rule: UpdateRule) -> None:
        """What every form shares: full batch or ``steps_per_epoch`` mini-batches an
        epoch, the guard, the epoch rule of the objective (``use_stopper``)."""
        self.ctx, self.rule = ctx, rule
        self.full_batch = ctx.batching is None or ctx.batching.full_batch
        self.steps_per_epoch = 1 if self.full_batch else ctx.batching.steps_per_epoch
        self.stopper = EpochStopper(ctx.tol, ctx.n_iter_no_change)
        self.n_values = 0  # values given to the stopper
        monotone = self.full_batch and rule.optimizer.descent_method and ctx.compressor is None
        self.guard = Guard(ctx.on_divergence, full_batch=self.full_batch, monotone=monotone, hint=ctx.objective.hint)
        self.on_objective = on_objective = ctx.objective.tol_on_objective
        # a tolerance on the objective of 0 (models that declare it) runs every epoch
        self.use_stopper = (not self.full_batch or on_objective) and ctx.validator is None \
            and not (on_objective and ctx.tol <= 0)
        self.it = 0  # updates applied
        self.value: float | None = None
        self.good: tuple[Any, ...] | None = None  # the last accepted evaluation (see _accept)
        self.phase = "checked"
        self.pending_backoff = False
        self.resume_phase: str | None = None

    @property
    def n_iter(self) -> int:
        return self.it if self.full_batch else -(-self.it // self.steps_per_epoch)

    @property
    def iterations(self) -> int:
        """Updates (full batch), or completed epochs."""
        return self.it // self.steps_per_epoch

    @property
    def progress(self) -> int:
        return self.it

    @property
    def optimizer(self) -> FirstOrderOptimizer:
        return self.rule.optimizer

    def _draw(self) -> Draw | None:
        """The next step's mini-batch (None: full batch)."""
        batching = self.ctx.batching
        return None if batching is None else batching.draw(self.ctx.source.n_steps + 1)

    # -------------------------------------------------------------- the template
    def start(self) -> Outcome:
        ctx, src = self.ctx, self.ctx.source
        res = src.evaluate(self.params, self._draw(), src.local_update(0))
        if ctx.learning_rate == "auto" and res.finite:
            L = ctx.objective.lipschitz(ctx.shards, self.params)
            lr = auto_learning_rate(self.optimizer, L, res.grad)
            if ctx.compressor is not None:  # compressed gradients need a shorter step
                lr *= ctx.compressor.step_scale(ctx.objective.n_params)
            self.rule = UpdateRule(self.optimizer.with_learning_rate(lr), self.rule.penalty)
        if self.state is None:
            self.state = self.optimizer.init(self.params)
        return self._observe(res)

    def _observe(self, res: StepResult, *extra: Any) -> Outcome:
        """Check an evaluation (``res`` and the hooks' ``extra``); accept it (and record
        it) or mark a backoff."""
        value, grad, lr_good = self._judge(res, *extra)
        good_value = None if self.good is None else self.good_value
        if self.guard.check(value, grad, good_value, step=res.step, learning_rate=lr_good):
            self.pending_backoff = True
            self.value = value
            return Outcome(accepted=False)
        self.guard.accepted()
        self.value = value
        self._accept(res, *extra)
        scores: Mapping[str, float | None] = {}
        if self.ctx.validator is not None:
            scores = {"val_loss": None, "val_score": None, "val_time": None}
            if self.it % self.steps_per_epoch == 0:
                scores = self._validate()
        iteration = self.it if self.full_batch else self.it // self.steps_per_epoch
        return Outcome([self._record(res, iteration, *extra, **scores)])

    def step(self) -> Outcome:
        if self.resume_phase == "evaluate":  # the last update was made but not evaluated
            self.resume_phase = None
            return self._observe(*self._evaluate())
        if self.pending_backoff:
            self.pending_backoff = False
            self.guard.backoff(f"the objective diverged at step {self.ctx.source.n_steps} (loss={self.value})")
            self.rule = self.rule.halved()
            self._back_off()
        self._update()
        self.it += 1
        if not self.full_batch:
            stop = self.ctx.stops.limit(self.iterations)
            if stop is not None:
                self.phase = "updated"  # the last epoch is complete; a further batch would be discarded
                return Outcome(stop=stop)
        return self._observe(*self._evaluate())

    def stop_rule(self, outcome: Outcome) -> Stop | None:
        if self.full_batch and not self.on_objective and self.gap() <= self.ctx.tol:  # type: ignore[operator]
            return Stop(True)
        if self.use_stopper:
            self.n_values += 1
            if self.stopper.add(self.value, self.n_values // self.steps_per_epoch):  # type: ignore[arg-type]  # (set by the first step)
                return Stop(True)
        return None

    # -------------------------------------------------------------- the hooks
    def _judge(self, res: StepResult) -> tuple[float, np.ndarray, float]:
        """``(objective, gradient for the guard, learning rate of the last accepted
        step)`` of an evaluation."""
        lr_good = self.optimizer.current_learning_rate(self.state if self.good is None else self.good[1])
        return res.value + self.ctx.objective.l1_value(res.params), res.grad, lr_good

    @property
    def good_value(self) -> float:
        return self.good[2]  # type: ignore[index]

    def _accept(self, res: StepResult) -> None:
        """Keep an accepted evaluation; the last accepted step is ``(params, state,
        value, grad, it, local key, local scale)``, what a backoff goes back to."""
        self.params, self.grad = res.params, res.grad
        scale = 1.0 / res.partial.weight_sum if res.partial.weight_sum > 0 else 0.0
        self.good = (self.params, self.state, self.value, self.grad, self.it, res.local_key, scale)

    def _validate(self) -> dict[str, float]:
        return self.ctx.validator.evaluate(self.params)

    def _record(self, res: StepResult, iteration: int, **scores: float | None) -> dict[str, Any]:
        lr_next = self.optimizer.current_learning_rate(self.state)
        return step_record(self.ctx, res, iteration, self.value, self.grad, lr_next,  # type: ignore[arg-type]
                           lr_halvings=self.guard.halvings, **scores)

    def _back_off(self) -> None:
        self.params, self.state, self.value, self.grad, self.it = self.good[:5]  # type: ignore[index]

    def _update(self) -> None:
        self.params, self.state, _ = self.rule.apply(self.params, self.grad, self.state)

    def _evaluate(self) -> tuple[Any, ...]:
        """The evaluation of the current parameters (the local parameters updated from
        the last accepted snapshot): the arguments of :meth:`_observe`."""
        src, good = self.ctx.source, self.good
        local = src.local_update(good[5], self.optimizer, good[6], keep=(good[5],))  # type: ignore[index]
        return (src.evaluate(self.params, self._draw(), local),)

    def gap(self) -> float | None:
        """The largest entry of the (proximal) gradient mapping (full batch)."""
        if not self.full_batch or self.grad is None:
            return None
        g_map = self.grad
        pen = self.ctx.objective.penalty
        if pen.has_l1:
            lr = self.optimizer.current_learning_rate(self.state)
            g_map = (self.params - pen.prox(self.params - lr * self.grad, lr)) / lr
        return float(np.max(np.abs(g_map), initial=0.0))

    def result(self) -> tuple[Any, int, FirstOrderOptimizer, Any]:
        return self.params, self.n_iter, self.optimizer, self.state

    def local_keys(self) -> tuple[int, ...]:
        return () if self.good is None or self.good[5] is None else (self.good[5],)

    def local_export(self) -> LocalUpdate:
        """The last accepted snapshot of the local parameters, with the update the
        shared parameters took after it when the fit ended on an update (mini-batch)."""
        from ..runtime.group_steps import LocalUpdate

        good = self.good
        if self.phase == "updated":
            return LocalUpdate(good[5], -1, (), self.optimizer, good[6])  # type: ignore[index]
        return LocalUpdate(good[5], -1, ())  # type: ignore[index]

    # -------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        return {
            **self._own_state(), "optimizer": self.optimizer, "value": self.value, "iteration": self.it,
            "n_values": self.n_values, "good": list(self.good), "guard": self.guard.state_dict(),  # type: ignore[arg-type]
            "stopper": self.stopper.state_dict(), "phase": self.phase,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rule = UpdateRule(state["optimizer"], self.rule.penalty)
        self.value = state["value"]
        self.it, self.n_values = state["iteration"], state["n_values"]
        self.good = tuple(state["good"])
        self.guard.load_state_dict(state["guard"])
        self.stopper.load_state_dict(state["stopper"])
        self.phase = state["phase"]
        self._load_own(state)

    def _own_state(self) -> dict[str, Any]:
        return {"params": self.params, "opt_state": self.state, "grad": self.grad}

    def _load_own(self, state: dict[str, Any]) -> None:
        self.params, self.state, self.grad = state["params"], state["opt_state"], state["grad"]

    def resume(self) -> Outcome:
        """A fit that converged or has done ``max_iter`` already (perhaps a smaller
        ``max_iter`` than before) does nothing; one whose last update was made without
        evaluating it (it ended at ``max_iter`` and is given more) evaluates it first;
        otherwise the saved state passed every check and is updated at once."""
        self._restore()
        stop = self.ctx.stops.limit(self.iterations)
        if stop is not None:
            return Outcome(stop=stop)
        if self.phase == "updated":
            self.phase = "checked"
            self._resume_updated()
        return Outcome(accepted=False)

    def _restore(self) -> None:
        """Where the parameters live, give them the checkpoint's (nothing here)."""

    def _resume_updated(self) -> None:
        self.resume_phase = "evaluate"


def _abs_max(v: np.ndarray) -> float:
    """``max(|v|)`` (0 for an empty vector), in two passes and no temporary vector."""
    return max(float(v.max()), -float(v.min())) if v.size else 0.0


class LBFGS(CountsIterations, Solver):
    """Limited-memory BFGS on the distributed objective (smooth problems, full batch).

    The direction is the two-loop recursion over the last ``memory`` pairs
    (:func:`dask_dgd.optim.lbfgs_direction`, scaled by ``s.y / y.y``); the step length
    comes from a line search for the strong Wolfe conditions
    (:func:`dask_dgd.optim.strong_wolfe`), starting at 1 (``min(1, 1/|g|)`` on the first
    iteration), each trial one distributed step (and one history record).  Converged
    when the largest gradient entry is at most ``tol`` (scikit-learn's ``pgtol=tol``;
    times the start's largest entry when that is below 1 from the model's null start:
    :func:`~..stopping.gradient_tol`, so that the target's units do not end a fit early), whatever ``tol``: near the
    optimum, where the objective's values differ only by rounding, a trial whose
    largest gradient entry is smaller is accepted, and a trial whose value ties with the
    current one is judged by the value its slope implies
    (``f + t (slope_0 + slope_t) / 2``, exact for a quadratic), so a tiny ``tol`` is
    reached when the gradient can get there.  Otherwise it stops, not converged, at
    ``max_iter`` iterations, ``max(4 max_iter, 50)`` evaluations, or a line search of
    ``max_linesearch`` trials with neither a decrease nor a smaller gradient (the
    gradient is at its rounding level above ``tol``).  The evaluations' limit is its
    own rule (:meth:`stop_rule`); ``max_iter`` is the stop rules'.  The line search is replayed
    from its trials when a checkpoint is resumed, so a resumed fit takes the same steps.
    """

    @classmethod
    def build(cls, ctx: FitContext, settings: Settings) -> LBFGS:
        return cls(ctx, settings.params0, settings.optimizer)

    def __init__(self, ctx: FitContext, params0: np.ndarray | None, settings: LbfgsSettings) -> None:
        # (an L1 penalty is refused before, by its row in .capabilities.SOLVERS)
        self.ctx, self.settings = ctx, settings
        self.x = None if params0 is None else np.array(params0, dtype=np.float64, copy=True)
        self.f: float | None = None
        self.g: np.ndarray | None = None
        self.s: list[np.ndarray] = []
        self.y: list[np.ndarray] = []
        # the pairs' s @ y and y @ y (kept with them: the recursion needs them every
        # iteration), the scratch vector of the recursion, the current gradient's
        # largest entry (asked several times a step); none of them in checkpoints
        self._sy: list[float] = []
        self._yy: list[float] = []
        self._work: np.ndarray | None = None
        self._gmax_of: tuple[Any, float] | None = None
        self.it = 0
        self.max_evals = max(4 * ctx.max_iter, 50)
        # of the line search in progress (None: none): a vector here, coefficients by vector id in
        # the sharded solver (.sharded.driver)
        self.direction: Any = None
        self.slope0: float | None = None
        self.t0: float | None = None
        self.t: float | None = None
        self.trials: list[tuple[float, float, float]] = []  # (step, value, slope) of the line search so far
        self.points: list[tuple[Any, ...]] = []  # (step, parameters, value, gradient) of its finite trials
        self._search: Generator[float, tuple[float, float], float] | None = None
        self.gtol = ctx.tol  # the largest gradient entry that ends the fit (set at the start)

    def _evaluate(self, x: np.ndarray) -> tuple[StepResult, dict[str, Any]]:
        res = self.ctx.source.evaluate(x)
        return res, step_record(self.ctx, res, self.it, res.value, res.grad, None)

    def start(self) -> Outcome:
        record = self._start_point()
        self.gtol = gradient_tol(self.ctx.tol, self._gmax()) if self.ctx.tol_from_start else self.ctx.tol
        return Outcome([record])

    # ------------------------------------------------- the vectors (on the driver here)
    def _start_point(self) -> dict[str, Any]:
        """Evaluate the start; set ``f`` (and the gradient); its record."""
        res, record = self._evaluate(self.x)  # type: ignore[arg-type]
        if not res.finite:
            raise initial_divergence(res.value)
        self.f, self.g = res.value, res.grad
        return record

    def _gmax(self) -> float:
        """The largest entry of the gradient at the current point (computed once per point)."""
        if self._gmax_of is None or self._gmax_of[0] is not self.g:
            self._gmax_of = (self.g, _abs_max(self.g))  # type: ignore[arg-type]
        return self._gmax_of[1]

    def gap(self) -> float | None:
        return None if self.g is None else self._gmax()

    def _direction(self) -> tuple[float, float]:
        """Set the search direction (the two-loop recursion; steepest descent, with the
        pairs dropped, when that is not a descent direction); ``(slope, |g|)``."""
        if self._work is None or self._work.shape != self.g.shape:  # type: ignore[union-attr]
            self._work = np.empty_like(self.g)
        d = two_loop(self.g, self.s, self.y, self._sy, self._yy[-1] if self._yy else None, self._work)
        if not float(self.g @ d) < 0:  # not a descent direction (rounding): steepest descent
            self.s, self.y, self._sy, self._yy = [], [], [], []
            d = -self.g  # type: ignore[operator]
        self.direction = d
        return float(self.g @ d), float(np.linalg.norm(self.g))  # type: ignore[arg-type]

    def _try(self, t: float) -> tuple[bool, float, float, float, dict[str, Any]]:
        """Evaluate the trial point at step ``t``: ``(finite, value, slope, largest
        gradient entry, record)``; a finite trial is kept in ``points``."""
        trial = np.multiply(self.direction, t)
        trial += self.x  # x + t d, in one new vector
        res, record = self._evaluate(trial)
        if not res.finite:
            return False, res.value, math.inf, math.inf, record
        self.points.append((t, trial, res.value, res.grad))
        return True, res.value, float(res.grad @ self.direction), _abs_max(res.grad), record

    def _move(self, accepted: float) -> bool:
        """Move to the trial point of step ``accepted`` and keep its pair (when its
        curvature is positive); False when no finite trial has that step."""
        found = [p for p in self.points if p[0] == accepted and accepted > 0]
        if not found:
            return False
        _, x_new, f_new, g_new = found[-1]
        s, y = x_new - self.x, g_new - self.g
        sy, yy = float(s @ y), float(y @ y)
        if sy > 1e-10 * yy:
            self.s.append(s)
            self.y.append(y)
            self._sy.append(sy)
            self._yy.append(yy)
            keep = self.settings.memory
            del self.s[:-keep], self.y[:-keep], self._sy[:-keep], self._yy[:-keep]
        self.x, self.f, self.g = x_new, f_new, g_new
        return True

    def _line_search(self) -> None:
        """The line search along the current direction, replayed over its trials."""
        # values relative to the start's, so that those implied by the slopes (tiny near
        # the optimum) are not lost to the rounding of the objective's size
        search = strong_wolfe(0.0, self.slope0, self.t0, self.settings.max_linesearch)
        t = next(search)
        for _, value, slope in self.trials:
            t = search.send((value, slope))
        self._search, self.t = search, t

    def _new_direction(self) -> None:
        self.slope0, gnorm = self._direction()
        self.t0 = min(1.0, 1.0 / gnorm) if self.it == 0 and gnorm > 0 else 1.0
        self.trials, self.points = [], []
        self._line_search()

    def step(self) -> Outcome:
        if self.direction is None:
            self._new_direction()
        elif self._search is None:  # resumed in the middle of a line search
            self._line_search()
        finite, f_trial, slope, gmax, record = self._try(self.t)  # type: ignore[arg-type]
        value = f_trial - self.f if finite else math.inf  # type: ignore[operator]
        if finite and abs(value) <= rounding_level(self.f):
            # the values tie at rounding level, the slopes do not: the search is given the
            # change the slopes imply (the trapezoid rule, exact for the quadratic the
            # objective is near its optimum), so a tiny tol is still reached
            value = 0.5 * self.t * (self.slope0 + slope)  # type: ignore[operator]
        self.trials.append((self.t, value, slope))  # type: ignore[arg-type]
        if finite and ties(f_trial, self.f) and gmax < self._gmax():
            # at the optimum the values differ only by rounding: a smaller gradient then
            # shows the step is right
            accepted = self.t
        else:
            try:
                self.t = self._search.send((value, slope))  # type: ignore[union-attr]
                return Outcome([record])
            except StopIteration as done:
                accepted = done.value
        self.direction = self._search = None
        if not self._move(accepted):  # type: ignore[arg-type]
            return Outcome([record], stop=Stop(  # flat at rounding level: judged by tol itself (see gradient_tol)
                self._gmax() <= self.ctx.tol,
                f"the line search found no decrease in {len(self.trials)} trials (the objective is flat at "
                "rounding level, or the gradient is inaccurate)"))
        self.it += 1
        return Outcome([record])

    def stop_rule(self, outcome: Outcome) -> Stop | None:
        if self._gmax() <= self.gtol:
            return Stop(True)
        if self.ctx.source.n_steps >= self.max_evals:  # its own limit, besides max_iter's
            return Stop(False, f"reached {self.max_evals} evaluations of the objective")
        return None

    def result(self) -> tuple[Any, int, LbfgsSettings, None]:
        return self.x, self.it, self.settings, None

    _STATE: tuple[str, ...] = ("x", "f", "g", "s", "y", "it", "direction", "slope0", "t0", "t", "trials", "points")

    def state_dict(self) -> dict[str, Any]:
        return {**{k: getattr(self, k) for k in self._STATE}, "gtol": self.gtol}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k in self._STATE:
            v = state[k]
            setattr(self, k, [tuple(p) for p in v] if k in ("trials", "points") else
                    list(v) if k in ("s", "y") else v)
        self.gtol = float(state.get("gtol", self.ctx.tol))  # (a checkpoint from before it)
        self._sy = [float(s @ y) for s, y in zip(self.s, self.y)]
        self._yy = [float(y @ y) for y in self.y]
        self._search = None

    def resume(self) -> Outcome:
        return Outcome(accepted=False)
