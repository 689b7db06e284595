"""IRLS coordinate descent along a cross-validated path (``solver="cd"`` on a stacked path).

A cross-validated path (:mod:`dask_dgd.losses._path`) stacks ``n_folds x n_penalties``
models as columns of one parameter matrix.  Proximal gradient moves them all at once,
tens of passes per group of penalties.  :class:`PathIRLSCD` walks the path instead, as
glmnet and glum do, one penalty (a *stage*: one column per fold) at a time, and takes
Newton steps: each pass evaluates only the stage's columns and, in the same pass, the
Hessian sums of every fold's rows (:meth:`~dask_dgd.losses._path.PathObjective.block_sums`
with ``grams=True``: one Gram matrix's work for all folds, the curvature of a row averaged
over the stage's models that train on it).  On the driver, each column minimises its
quadratic model plus its elastic-net penalty by coordinate descent
(:func:`~.newton.cd_solve`), and backtracks on its own objective (Tseng and Yun's rule, as
:class:`~.newton.IRLSCD`); columns accept or halve their steps independently, in the same
passes.  When every column of a stage satisfies ``tol`` (the largest entry of its
minimum-norm subgradient), the next stage starts at its solutions (the same fold's
column), with the loss's value, gradient and Hessian of the last pass: a new penalty
costs no pass of its own, only its Newton steps (one or two from a warm start).

Each column's Newton step, its coordinate descent and its stop rule run in the scaled
coordinates of :mod:`..scaling` (the columns centred and standardised, as the single
models' ``"cd"``; the passes evaluate the original parameters): a Newton step does not
depend on the scale, but the stop rule does.  Judged on the data's units, the largest
gradient entry is a column's in the largest units (an income in dollars), and the bound
relative to it left every other coefficient of a fold model short of its optimum,
"converged".  Scaled, ``tol`` means what it means for one model, whatever the units.

:class:`PathHessianTraining` is the stacked objective whose passes return those sums.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.linalg

from ...optim._linesearch import MAX_HALVINGS, accepts, rounding_level
from ..runtime.group_steps import BlockSums
from ..stopping import Stop, gradient_tol
from ..update import initial_divergence
from .base import AttributeState, Outcome, Solver, step_record
from .newton import MAX_POLISH, cd_solve, kkt_violation

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy.typing as npt

    from ..data.blocks import Shard
    from ..modes.sync import StepResult
    from ..objective import PathTraining
    from ..protocols import FitContext
    from ..runtime.group_steps import Draw
    from ..scaling import ColumnScaling

__all__ = ["POLISH_DECREASE", "WINDOW", "PathHessianTraining", "PathIRLSCD", "path_stages"]

#: Stages (penalties) that take their Newton steps in the same passes: stage ``s + 1``
#: starts once every column of stage ``s`` has taken a step.
WINDOW = 2
#: A column that meets its bound polishes while its model predicts a decrease of more
#: than this share of its objective (see :meth:`PathIRLSCD._direction`).
POLISH_DECREASE = 1e-10


def path_stages(column_folds: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """The stages of a path's columns: consecutive runs in which no fold repeats (the
    layout ``(penalty, fold)`` of the cross-validated estimators gives one stage per
    penalty).  Every stage must hold the same folds (each starts at the previous
    stage's solutions of its folds).

    >>> path_stages((0, 1, 2, 0, 1, 2))
    ((0, 1, 2), (3, 4, 5))
    """
    stages: list[tuple[int, ...]] = []
    current: list[int] = []
    for k, f in enumerate(column_folds):
        if any(column_folds[j] == f for j in current):
            stages.append(tuple(current))
            current = []
        current.append(k)
    stages.append(tuple(current))
    folds = [sorted(column_folds[k] for k in s) for s in stages]
    if any(f != folds[0] for f in folds):
        from ...exceptions import ParameterError

        raise ParameterError(
            f"solver='cd' walks a path one penalty at a time, each with the same folds; the columns' folds "
            f"{tuple(column_folds)} do not split into such stages"
        )
    return tuple(stages)


@dataclass(frozen=True)
class PathHessianTraining:
    """A stacked path's training objective (``base``, a
    :class:`~..objective.PathTraining`) whose passes evaluate only the columns
    named by the step's ``aux`` and also reduce the Hessian sums of every fold's rows
    (``extras["fold_grams"]``, shape ``(n_folds, p, p)``).  ``scaling``: one column's
    :class:`~..scaling.ColumnScaling` (every column's the same), the coordinates
    :class:`PathIRLSCD` steps and judges its stop rule in (None: the data's).
    Everything else is the base objective's."""

    base: PathTraining
    scaling: ColumnScaling | None = None

    def __getattr__(self, name: str) -> Any:
        if name in ("base", "scaling") or name.startswith("__"):  # unpickling: no base yet
            raise AttributeError(name)
        return getattr(self.base, name)

    @property
    def hessian_size(self) -> int:
        """Floats of the Hessian sums one partial carries."""
        path = self.base.objective
        return path.n_folds * ((path.n_features + path.fit_intercept) * path.n_outputs) ** 2

    def group_sums(self, shard: Shard, params: np.ndarray, aux: np.ndarray, draw: Draw | None, local: Any,
                   memory: dict | None = None) -> tuple[dict[int, BlockSums], None]:
        from ..data.blocks import _block_error

        path = self.base.objective
        sums = {}
        for b in shard.blocks:
            try:
                with np.errstate(all="ignore"):  # non-finite sums are handled by the solver
                    loss, grad, fold_w, grams = path.block_sums(params, b.X, b.y, b.sample_weight, b.index,
                                                                columns=aux, grams=True)
            except Exception as err:
                raise _block_error(err, b) from err
            sums[b.index] = BlockSums(float(loss.sum()), grad, float(fold_w.sum()),
                                      {"column_loss": loss, "fold_weight": fold_w, "fold_grams": grams})
        return sums, None


class PathIRLSCD(AttributeState, Solver):
    """IRLS-CD along a stacked path, the stages (penalties) in order (module docstring).

    Stages overlap: stage ``s + 1`` starts at stage ``s``'s current solutions as soon
    as every column of stage ``s`` has taken a step (or is done), and up to
    :data:`WINDOW` stages take their steps in the same passes.  ``max_iter`` bounds
    each stage's passes (a limit of its own, not the stop rules' on the whole fit,
    whose passes overlapping stages share: ``iterations`` is None); a stage that
    reaches it leaves its unconverged columns where they are (the fit then reports
    not converged).  ``n_iter`` is the number of passes over the data.
    """

    def __init__(self, ctx: FitContext, params0: np.ndarray) -> None:
        self.ctx = ctx
        training = ctx.objective
        path, pen = training.objective, training.penalty  # type: ignore[attr-defined]
        self.scaling: ColumnScaling | None = getattr(training, "scaling", None)
        self.stages = path_stages(path.column_folds)
        self.folds = np.asarray(path.column_folds)
        self.d, self.fit_intercept = path.n_features, path.fit_intercept
        self.m = path.n_outputs  # a softmax's classes (1: a single-output loss)
        self.p = (self.d + self.fit_intercept) * self.m  # one model's parameters (LinearObjective's layout)
        self.n_coef = self.d * self.m
        self.softmax = self.m > 1
        K = path.n_columns
        self.l1, self.l2 = np.asarray(pen.l1, dtype=np.float64), np.asarray(pen.l2, dtype=np.float64)
        self.x = self._columns(params0)  # (p, K): column k is model k's parameters
        self.loss = np.zeros(K)  # mean training loss of each column at x
        self.grad = np.zeros((self.p, K))  # its gradient
        self.grams: np.ndarray | None = None  # (n_folds, p, p), the last pass's
        self.T = np.ones(K)
        self.kkt = np.full(K, np.inf)
        self.gtol = np.full(K, float(ctx.tol))  # each column's bound (relative to its fold's start: see start)
        self.done = np.zeros(K, dtype=bool)
        self.steps = np.zeros(K, dtype=np.int64)  # accepted steps
        self.polished = np.zeros(K, dtype=np.int64)  # steps asked for after the column met its bound
        self.direction = np.zeros((self.p, K))
        self.pending = np.zeros(K, dtype=bool)
        self.t = np.ones(K)
        self.delta = np.zeros(K)
        self.trials = np.zeros(K, dtype=np.int64)
        self.started = 0  # stages started (in order)
        self.stage_passes = np.zeros(len(self.stages), dtype=np.int64)
        self.passes = 0
        self.failures: list[str] = []

    # -------------------------------------------------------------- layout
    def _columns(self, flat: npt.ArrayLike) -> np.ndarray:
        """``(p, K)``: the path's flat parameters (or gradient) as one column per model
        (the path's matrix holds a model's ``m`` outputs side by side)."""
        K, m = len(self.folds), self.m
        M = np.array(flat, dtype=np.float64, copy=True).reshape(-1, K, m)
        return M.transpose(1, 0, 2).reshape(K, self.p).T.copy()

    def _flat(self, cols: np.ndarray) -> np.ndarray:
        """The inverse of :meth:`_columns`."""
        K, m = len(self.folds), self.m
        return cols.T.reshape(K, -1, m).transpose(1, 0, 2).ravel()

    # -------------------------------------------------------------- per column
    def _l1_vec(self, k: int) -> np.ndarray:
        v = np.full(self.p, self.l1[k])
        v[self.n_coef:] = 0.0  # the intercepts
        return v

    def _smooth(self, k: int, loss: float, grad: np.ndarray, x: np.ndarray) -> tuple[float, np.ndarray]:
        """Value and gradient of column ``k``'s smooth objective (mean loss + L2)."""
        coef = x[: self.n_coef]
        g = grad.copy()
        g[: self.n_coef] += self.l2[k] * coef
        return loss + 0.5 * self.l2[k] * float(coef @ coef), g

    def _full(self, k: int, loss: float, x: np.ndarray) -> float:
        coef = x[: self.n_coef]
        return loss + 0.5 * self.l2[k] * float(coef @ coef) + self.l1[k] * float(np.abs(coef).sum())

    def _hessian(self, k: int, total: np.ndarray) -> np.ndarray:
        """Column ``k``'s Hessian from ``total``, the sum of every fold's Gram matrix."""
        f = self.folds[k]
        H = (total - self.grams[f]) / self.T[k]  # type: ignore[index]
        idx = np.arange(self.n_coef)
        H[idx, idx] += self.l2[k]
        return H

    # -------------------------------------------------------------- coordinates
    def _scaled(self, x: np.ndarray, g: np.ndarray, l1: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A column's parameters, smooth gradient and L1 weights in the solver's
        coordinates (the scaled ones, see the module docstring)."""
        sc = self.scaling
        if sc is None:
            return x, g, l1
        return sc.to_scaled(x), sc.grad_to_scaled(g), l1 * sc.l1_factor

    def _scaled_hessian(self, H: np.ndarray) -> np.ndarray:
        r""":math:`T^\top H T`: a column's Hessian in the solver's coordinates."""
        sc = self.scaling
        return H if sc is None else sc.grad_to_scaled(sc.grad_to_scaled(H).T).T

    def _kkt(self, k: int, loss: float, grad: np.ndarray, x: np.ndarray) -> float:
        """Column ``k``'s KKT violation at ``x`` (mean loss ``loss``, its gradient
        ``grad``), in the solver's coordinates."""
        _, g = self._smooth(k, loss, grad, x)
        xs, gs, l1s = self._scaled(x, g, self._l1_vec(k))
        return kkt_violation(gs, xs, l1s)

    def _refresh_kkt(self, k: int) -> None:
        self.kkt[k] = self._kkt(k, self.loss[k], self.grad[:, k], self.x[:, k])

    def _ridge(self, k: int) -> np.ndarray:
        """Column ``k``'s L2 strengths in the solver's coordinates (zero on the intercepts)."""
        v = np.zeros(self.p)
        v[: self.n_coef] = self.l2[k]
        return v if self.scaling is None else v * self.scaling.l1_factor**2

    def _pinned(self, k: int, H: np.ndarray, l1s: np.ndarray) -> np.ndarray:
        """A softmax's Hessian (solver's coordinates) made definite along common shifts
        of its class rows (:func:`~.curvature.pinned_hessian`), which the loss does not
        see: the rows no penalty sees, and under a pure L2 penalty every row (the
        penalty along a row's shift is then separate from the loss, and :meth:`_gauge`
        sets it to its minimum, the classes' mean zero; its own curvature there, an L2
        strength over the column's variance, is 1e-17 of the loss's for an income in
        dollars at a weak penalty, a singular solve).  With an L1 part, coordinate
        descent moves along the penalised rows' shifts itself, as one model's."""
        if not self.softmax:
            return H
        from .curvature import pinned_hessian, softmax_shifts

        penalised = np.zeros(self.p, dtype=bool) if self.l1[k] == 0 else (l1s > 0) | (self._ridge(k) > 0)
        return pinned_hessian(H, softmax_shifts(self.m, penalised))

    def _gauge(self, k: int, xs: np.ndarray, l1s: np.ndarray) -> np.ndarray:
        """A softmax's parameters (solver's coordinates) moved along its common shifts,
        which the loss does not see (:meth:`~..scaling.ScaledTraining.gauge`)."""
        if not self.softmax:
            return xs
        from ...losses._penalty import softmax_gauge

        return softmax_gauge(xs, l1s, self._ridge(k), self.m)

    def _direction(self, k: int, total: np.ndarray, polish: bool = False) -> None:
        """Start column ``k``'s line search, or mark it done (``total``: see :meth:`_hessian`).
        ``polish``: the column meets its bound; it steps on only while its quadratic model
        predicts a decrease above :data:`POLISH_DECREASE` of its objective and above the
        objective's rounding level (one model's fit, :meth:`~.newton.IRLSCD.stop_rule`,
        steps down to rounding: Newton's steps converge quadratically, and one more step
        leaves a weakly penalised fold model far closer to its optimum than the
        gradient's bound alone; on a path, steps that change no score's digits cost
        passes that every penalty pays)."""
        x, l1 = self.x[:, k], self._l1_vec(k)
        _, g = self._smooth(k, self.loss[k], self.grad[:, k], x)
        xs, gs, l1s = self._scaled(x, g, l1)
        H = self._pinned(k, self._scaled_hessian(self._hessian(k, total)), l1s)
        xs_new = None
        if self.l1[k] == 0:  # a smooth model: its Newton step directly
            try:
                xs_new = xs - scipy.linalg.solve(H, gs, assume_a="pos")
            except (np.linalg.LinAlgError, ValueError):
                xs_new = None
        if xs_new is None or not np.all(np.isfinite(xs_new)):
            tol = max(0.25 * self.gtol[k], min(0.1 * self.kkt[k], 1e-2))
            xs_new, _ = cd_solve(H, gs, xs, l1s, tol, free=self.p - 1 if self.fit_intercept else None)
        xs_new = self._gauge(k, xs_new, l1s)
        x_new = xs_new if self.scaling is None else self.scaling.to_original(xs_new)
        step = x_new - x
        delta = float(g @ step) + float(l1 @ (np.abs(x_new) - np.abs(x)))  # the same in either coordinates
        f = self._full(k, self.loss[k], x)
        if polish and not -delta > max(rounding_level(f), POLISH_DECREASE * abs(f)):
            self.done[k] = True
            return
        if not np.any(step) or not delta < 0:
            self.done[k] = True
            if self.kkt[k] > self.ctx.tol:  # flat at rounding level: judged by tol itself (see gradient_tol)
                self.failures.append("the quadratic model gives no descent direction (flat at rounding level)")
            return
        self.direction[:, k], self.delta[k], self.t[k], self.trials[k], self.pending[k] = step, delta, 1.0, 0, True

    # -------------------------------------------------------------- stages
    def _stage_done(self, s: int) -> bool:
        return bool(self.done[list(self.stages[s])].all())

    def _start_stages(self) -> None:
        """Start the next stages the window allows, each at the previous stage's
        current solutions (same folds) with the loss's value and gradient there."""
        while self.started < len(self.stages):
            s = self.started
            # a stage whose columns all meet their bounds only polishes (see _direction):
            # the next stages need not wait for it, its steps share their passes
            active = sum(not self._stage_done(j) and bool(np.any(self.kkt[list(self.stages[j])] > self.gtol[list(
                self.stages[j])])) for j in range(s))
            if s > 0:
                prev = self.stages[s - 1]
                if active >= WINDOW or not all(self.done[k] or self.steps[k] > 0 for k in prev):
                    return
                by_fold = {self.folds[k]: k for k in prev}
                for k in self.stages[s]:
                    j = by_fold[self.folds[k]]
                    self.x[:, k], self.loss[k], self.grad[:, k] = self.x[:, j], self.loss[j], self.grad[:, j]
                    self._refresh_kkt(k)
            self.started += 1

    def _plan(self) -> list[int]:
        """Directions for the started stages' columns; the columns that move."""
        moving, total = [], self.grams.sum(axis=0)  # type: ignore[union-attr]  # once per pass, not once per column
        for s in range(self.started):
            cols = self.stages[s]
            if self.stage_passes[s] >= self.ctx.max_iter:  # this stage's limit (see the class docstring)
                for k in cols:
                    if not self.done[k] and self.kkt[k] > self.gtol[k]:
                        self.failures.append(f"a penalty reached max_iter={self.ctx.max_iter} passes")
                    self.done[k], self.pending[k] = True, False
            for k in cols:
                if not (self.done[k] or self.pending[k]):
                    if self.kkt[k] > self.gtol[k]:
                        self._direction(k, total)
                    elif self.polished[k] >= MAX_POLISH:
                        self.done[k] = True
                    else:
                        self.polished[k] += 1
                        self._direction(k, total, polish=True)
            moving += [k for k in cols if self.pending[k]]
        return moving

    # -------------------------------------------------------------- passes
    def _evaluate(self, x: np.ndarray, cols: Sequence[int]) -> StepResult:
        return self.ctx.source.evaluate(self._flat(x), aux=np.asarray(cols, dtype=np.int64))

    def _parts(self, res: StepResult) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per-column mean losses and gradients of a pass, and its fold Gram matrices."""
        extras = res.partial.extras
        fw = np.asarray(extras["fold_weight"], dtype=np.float64)
        T = fw.sum() - fw[self.folds]
        T = np.where(T > 0, T, np.inf)
        loss = np.asarray(extras["column_loss"], dtype=np.float64) / T
        grad = self._columns(np.asarray(res.partial.grad_sum, dtype=np.float64)) / T
        return T, loss, grad, np.asarray(extras["fold_grams"], dtype=np.float64)

    def _record(self, res: StepResult, cols: Sequence[int], step_size: float | None) -> dict[str, Any]:
        value = sum(self._full(k, self.loss[k], self.x[:, k]) for k in cols)
        grad = np.concatenate([self._smooth(k, self.loss[k], self.grad[:, k], self.x[:, k])[1] for k in cols])
        return step_record(self.ctx, res, self.passes, value, grad, step_size)

    @property
    def progress(self) -> int:
        return self.passes

    def start(self) -> Outcome:
        cols = list(self.stages[0])
        res = self._evaluate(self.x, cols)
        T, loss, grad, grams = self._parts(res)
        if not (np.all(np.isfinite(loss[cols])) and np.all(np.isfinite(grad[:, cols]))):
            raise initial_divergence(float(np.sum(loss[cols])))
        self.T, self.grams = T, grams.copy()
        self.loss[cols], self.grad[:, cols] = loss[cols], grad[:, cols]
        for k in cols:
            self._refresh_kkt(k)
        if self.ctx.tol_from_start:  # every fold's bound from its null start, as one model's (gradient_tol)
            bound = {self.folds[k]: gradient_tol(self.ctx.tol, float(np.max(np.abs(
                self._scaled(self.x[:, k], grad[:, k], self._l1_vec(k))[1])))) for k in cols}
            self.gtol = np.array([bound.get(f, self.ctx.tol) for f in self.folds])
        self.started = 1
        return Outcome([self._record(res, cols, None)])

    def step(self) -> Outcome:
        while True:
            self._start_stages()
            moving = self._plan()
            if moving:
                break
            if self.started == len(self.stages) and self.done.all():
                return Outcome(stop=Stop(not self.failures, "; ".join(dict.fromkeys(self.failures))))
        trial = self.x.copy()
        for k in moving:
            trial[:, k] = self.x[:, k] + self.t[k] * self.direction[:, k]
        res = self._evaluate(trial, moving)
        self.passes += 1
        for s in range(self.started):
            self.stage_passes[s] += bool(self.pending[list(self.stages[s])].any())
        T, loss, grad, grams = self._parts(res)
        # a fold's rows are weighed only by the evaluated columns that train on them: keep
        # the last Gram matrix of a fold that no moving column of another fold covered
        covered = [g for g in range(len(grams)) if np.any(self.folds[moving] != g)]
        if np.all(np.isfinite(grams[covered])):
            self.grams[covered] = grams[covered]  # type: ignore[index]
        accepted = []
        for k in moving:
            ok = np.isfinite(loss[k]) and np.all(np.isfinite(grad[:, k]))
            f_old = self._full(k, self.loss[k], self.x[:, k])
            f_new = self._full(k, loss[k], trial[:, k]) if ok else np.inf
            if ok and accepts(f_new, f_old, self.t[k], self.delta[k], self._kkt(k, loss[k], grad[:, k], trial[:, k]),
                              self.kkt[k]):
                self.x[:, k], self.loss[k], self.grad[:, k] = trial[:, k], loss[k], grad[:, k]
                self._refresh_kkt(k)
                self.pending[k] = False
                self.steps[k] += 1
                accepted.append(self.t[k])
            else:
                self.trials[k] += 1
                self.t[k] *= 0.5
                if self.trials[k] >= MAX_HALVINGS:
                    self.pending[k] = False
                    self.done[k] = True
                    if self.kkt[k] > self.ctx.tol:
                        self.failures.append("the line search found no decrease (flat at rounding level)")
        return Outcome([self._record(res, moving, min(accepted) if accepted else None)])

    def result(self) -> tuple[np.ndarray, int, None, None]:
        return self._flat(self.x), self.passes, None, None

    _STATE = ("x", "loss", "grad", "grams", "T", "kkt", "done", "steps", "direction", "pending", "t", "delta",
              "trials", "started", "stage_passes", "passes", "failures")
    _LATER_STATE = ("gtol", "polished")

    def resume(self) -> Outcome:
        return Outcome(accepted=False)
