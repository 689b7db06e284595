"""The exact-Hessian solver (``solver="newton"`` and ``"cd"``) and its parts.

:class:`IRLSCD` is a solver of the one loop (the template of :class:`~.base.Solver`):
Newton/IRLS steps with the Hessian reduced in the gradient's pass, the quadratic model
minimised on the driver by a direct solve (:func:`newton_step`) or, with an L1 part, by
coordinate descent.  This module also holds what it needs besides:

- :class:`HessianTraining`: a linear model's training objective whose every
  evaluation also sums, per block, the Hessian of the loss
  ``X~^T diag(s_i h_i) X~`` (``X~``: ``X`` with a column of ones when there is an
  intercept; ``h_i`` the loss's curvature, :func:`~.curvature.curvature`) in the data's
  units, for fits that are not scaled (scaled fits sum it from centred, scaled columns:
  :class:`~..scaling.ScaledTraining`); the sums travel in the partials' ``extras`` and
  are tree-reduced with the gradient, in the same pass;
- :func:`cd_solve`: coordinate descent with soft-thresholding on the quadratic model
  plus the elastic-net penalty, on the driver (a Numba loop over a ``p x p`` matrix);
- :func:`newton_step`: the minimiser of the quadratic model without an L1 part, by
  Cholesky, or an eigendecomposition that leaves out the near-null directions of a
  singular or indefinite Hessian;
- :func:`kkt_violation`: the largest entry of the minimum-norm subgradient, the
  solver's stop rule;
- :func:`cd_support`: whether a training objective can take the solver (and
  ``solver="auto"``'s size limit, :data:`CD_MAX_PARAMS`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dask
import numpy as np
import scipy.linalg

from ..._backend import get_namespace
from ...losses._gram import weighted_gram
from ...optim._linesearch import MAX_HALVINGS, accepts, rounding_level
from ..stopping import Stop, gradient_tol
from ..update import initial_divergence
from .base import AttributeState, CountsIterations, Outcome, Solver, step_record
from .curvature import LeastSquaresModel, curvature, with_block_extra

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy.typing as npt

    from ...losses import LinearObjective
    from ..data.blocks import Shard
    from ..modes.sync import StepResult
    from ..objective import LinearTraining, PathTraining
    from ..protocols import FitContext, TrainingObjective
    from ..runtime.group_steps import BlockSums, Draw
    from ..runtime.reduce import Partial
    from ..scaling import ScaledTraining

__all__ = ["CD_MAX_PARAMS", "IRLSCD", "HessianTraining", "block_hessian_sum", "cd_max_params", "cd_model_params",
           "cd_solve", "cd_support", "kkt_violation", "newton_step", "newton_support"]

#: ``solver="auto"`` picks ``"cd"`` for L1 penalties up to this many parameters (dask
#: config ``dgd.cd-max-params``): every pass sends one ``p x p`` matrix per group
#: (8 MB at 1,000 parameters) and costs ``n p^2`` flops besides the gradient's ``n p``.
CD_MAX_PARAMS = 1024
#: Newton steps switch from the Hessian's sums to R factors (``curvature.py``) when the
#: Hessian's condition number is above this: the design's is then above 1e4, and each
#: Newton step from the formed Hessian refines the parameters by less than 1e-8 of
#: their error.
QR_CONDITION = 1e8
#: Most steps taken after the tolerance is met, while the model predicts a decrease.
MAX_POLISH = 5
#: Most sweeps over the coordinates per quadratic model.
MAX_SWEEPS = 10000


def cd_support(objective: TrainingObjective) -> str | None:
    """None when ``objective`` (a training objective) can be trained with
    ``solver="cd"`` or ``"newton"``, else the reason it cannot (for error messages):
    single-output losses with a Hessian, and multi-output losses with
    ``hessian_blocks`` (the multinomial: their Hessian is used in scaled coordinates
    only, :func:`~..capabilities.scaled_solve`), one model or a cross-validated path."""
    linear = getattr(objective, "objective", None)
    loss = getattr(linear, "loss", None)
    if loss is None or getattr(objective, "has_local", False):
        return f"it trains linear models only, not {type(objective).__name__}"
    path = hasattr(linear, "column_folds")  # a stacked path: PathIRLSCD (cd_path.py)
    if loss.n_outputs > 1 and hasattr(loss, "hessian_blocks"):
        return None
    if not getattr(loss, "has_hessian", False) or loss.n_outputs != 1:
        return (f"it needs a single-output loss with a Hessian (linear, binary logistic, Poisson and the other "
                f"GLM families) or the multinomial; got {type(loss).__name__}")
    if path:
        return None
    if getattr(linear, "n_params", None) != linear.n_features + linear.fit_intercept:  # type: ignore[union-attr]
        return f"it needs one coefficient per feature (and an intercept); {type(linear).__name__} has another layout"
    return None


def newton_support(objective: TrainingObjective) -> str | None:
    """None when ``objective`` can be trained with ``solver="newton"``: what
    :func:`cd_support` allows (one solver, :class:`IRLSCD`), else why not."""
    return cd_support(objective)


def cd_model_params(objective: LinearTraining | PathTraining) -> int:
    """Parameters of one model of a training objective that ``solver="cd"`` takes: the
    size its Hessian is ``p x p`` in (a stacked path's column, else all of them)."""
    linear = objective.objective
    if hasattr(linear, "column_folds"):
        return (linear.n_features + linear.fit_intercept) * linear.n_outputs
    return objective.n_params


def cd_max_params() -> int:
    """The size limit of ``solver="auto"``'s choice of ``"cd"`` (dask config
    ``dgd.cd-max-params``, default :data:`CD_MAX_PARAMS`)."""
    return int(dask.config.get("dgd.cd-max-params", CD_MAX_PARAMS))


def block_hessian_sum(objective: LinearObjective, params: np.ndarray, X: Any, y: Any,
                      sample_weight: Any = None) -> np.ndarray:
    r"""The Hessian sums of one block: :math:`\tilde X^\top \operatorname{diag}(s_i h_i) \tilde X`,
    with :math:`h_i` the loss's curvature (:func:`~.curvature.curvature`: observed where
    it is not negative, else Fisher's).

    Parameters
    ----------
    objective : LinearObjective
        A single-output objective whose loss has ``hessian_weight`` (and, optionally,
        ``local_curvature``).
    params : ndarray of shape (objective.n_params,)
    X : array of shape (n_samples, objective.n_columns)
        Dense (any array-API namespace) or sparse; the features, then any offset
        columns (which have no coefficients).
    y : array of shape (n_samples,)
    sample_weight : array of shape (n_samples,) or None

    Returns
    -------
    ndarray of shape (objective.n_params, objective.n_params)
        On the host, float64, not divided by the total weight (blocks add up).
    """
    xp = get_namespace(X, y, sample_weight)
    raw = objective.raw_prediction(params, X)
    h = curvature(objective.loss, xp.astype(y, raw.dtype, copy=False), raw, xp)
    if sample_weight is not None:
        h = h * xp.reshape(xp.astype(sample_weight, h.dtype, copy=False), (-1,))
    X = objective.features_of(X) if hasattr(objective, "features_of") else X  # not the offset columns
    return weighted_gram(X, h, objective.fit_intercept)


@dataclass(frozen=True)
class HessianTraining:
    """A linear model's training objective (``base``, a
    :class:`~..objective.LinearTraining`) whose evaluations also reduce the loss's
    Hessian sums (``extras["hessian"]`` of the partials, see :func:`block_hessian_sum`).
    Everything else is the base objective's."""

    base: LinearTraining

    def __getattr__(self, name: str) -> Any:
        if name == "base" or name.startswith("__"):  # unpickling: no base yet
            raise AttributeError(name)
        return getattr(self.base, name)

    def group_sums(self, shard: Shard, params: np.ndarray, aux: Any, draw: Draw | None, local: Any,
                   memory: dict | None = None) -> tuple[dict[int, BlockSums], None]:
        sums, local_grad = self.base.group_sums(shard, params, aux, draw, local, memory)
        obj = self.base.objective
        return with_block_extra(sums, shard, "hessian",
                                lambda b: block_hessian_sum(obj, params, b.X, b.y, b.sample_weight)), local_grad

    @property
    def hessian_size(self) -> int:
        """Floats of the Hessian sums one partial carries."""
        return self.base.n_params ** 2

    def hessian(self, partial: Partial) -> np.ndarray:
        """The Hessian of the smooth objective (mean loss plus the L2 part of the
        penalty) from a reduced partial."""
        H = partial.extras["hessian"] / partial.weight_sum
        diag = np.flatnonzero(self.base.penalty.decay_mask)
        H[diag, diag] += self.base.penalty_spec.l2_strength
        return 0.5 * (H + H.T)

    def l1_weights(self) -> np.ndarray:
        """The L1 strength of every parameter (zero for the intercept)."""
        return self.base.penalty_spec.l1_strength * self.base.penalty.decay_mask.astype(np.float64)

    def gauge(self, params: np.ndarray) -> np.ndarray:
        """``params`` (its losses have one output: nothing the loss does not see, see
        :meth:`~..scaling.ScaledTraining.gauge`)."""
        return params


def newton_step(H: np.ndarray | LeastSquaresModel, g: np.ndarray, x: np.ndarray | None = None) -> np.ndarray:
    r"""The step ``d`` minimising ``g.d + d^T H d / 2``: ``-H^{-1} g``.

    ``H`` may be a :class:`~.curvature.LeastSquaresModel` (the model as R factors, at the
    parameters ``x``): its own least-squares solve.  For a matrix: Cholesky when ``H``
    is positive definite and not near singular (its condition estimated from the
    factor's diagonal below ``eps ** -0.5``); otherwise an
    eigendecomposition, with the directions of eigenvalues at most
    ``p * eps * max eigenvalue`` (near-null, or negative) left out: the
    minimum-norm step in the rest, as a least-squares solver's for collinear columns.
    Repeated Newton steps then refine the solution from exact gradients (the
    Hessian need only be close).
    """
    if isinstance(H, LeastSquaresModel):
        return H.step(x)  # type: ignore[arg-type]
    H = np.asarray(H, dtype=np.float64)
    g = np.asarray(g, dtype=np.float64)
    try:
        c, low = scipy.linalg.cho_factor(H)
        diag = np.abs(np.diag(c))
        if np.all(np.isfinite(c)) and diag.min() > diag.max() * np.finfo(float).eps ** 0.25:
            return -scipy.linalg.cho_solve((c, low), g)
    except (np.linalg.LinAlgError, ValueError):
        pass
    vals, vecs = scipy.linalg.eigh(H)
    top = float(np.max(np.abs(vals), initial=0.0))
    keep = vals > len(g) * np.finfo(float).eps * top
    if not np.any(keep):
        return np.zeros_like(g)
    V = vecs[:, keep]
    return -(V @ ((V.T @ g) / vals[keep]))


def _ill_conditioned(H: np.ndarray | LeastSquaresModel) -> bool:
    """Whether the Hessian matrix ``H`` has a condition number above
    :data:`QR_CONDITION` (estimated from its Cholesky factor's diagonal, whose ratio
    squared bounds it from below), or is not positive definite: Newton steps from it
    lose too many digits.  One Cholesky (``p^3 / 3``), not an eigendecomposition, on
    every pass's Hessian."""
    if not isinstance(H, np.ndarray):
        return False
    try:
        c, _ = scipy.linalg.cho_factor(H)
    except (np.linalg.LinAlgError, ValueError):
        return True
    diag = np.abs(np.diag(c))
    return not (np.all(np.isfinite(c)) and diag.min() * np.sqrt(QR_CONDITION) >= diag.max())


def kkt_violation(grad: npt.ArrayLike, params: npt.ArrayLike, l1: npt.ArrayLike) -> float:
    """The largest entry of the minimum-norm subgradient of ``f + sum_j l1_j |x_j|``
    at ``params`` (``grad``: the gradient of the smooth part ``f``): zero exactly at
    the optimum."""
    grad, params, l1 = (np.asarray(v, dtype=np.float64) for v in (grad, params, l1))
    sub = grad + l1 * np.sign(params)
    at_zero = (params == 0) & (l1 > 0)
    sub[at_zero] = np.sign(grad[at_zero]) * np.maximum(np.abs(grad[at_zero]) - l1[at_zero], 0.0)
    return float(np.max(np.abs(sub), initial=0.0))


_compiled: dict[str, Callable[..., tuple[np.ndarray, int]]] = {}


def _kernel() -> Callable[..., tuple[np.ndarray, int]]:
    """The Numba coordinate-descent loop (compiled on first use, cached on disk)."""
    if "fn" not in _compiled:
        import numba

        @numba.njit(cache=True, nogil=True)
        def sweeps(H, g, x0, l1, tol, max_sweeps):  # pragma: no cover - compiled
            p = x0.shape[0]
            x = x0.copy()
            r = g.copy()  # the model's gradient at x: g + H (x - x0)
            active = np.ones(p, dtype=np.bool_)
            full = True
            n = 0
            while n < max_sweeps:
                n += 1
                change = 0.0
                for j in range(p):
                    if not (full or active[j]):
                        continue
                    hjj = H[j, j]
                    if hjj <= 0.0:
                        continue
                    z = x[j] - r[j] / hjj
                    t = l1[j] / hjj
                    new = z - t if z > t else (z + t if z < -t else 0.0)
                    delta = new - x[j]
                    if delta != 0.0:
                        x[j] = new
                        for i in range(p):
                            r[i] += H[i, j] * delta
                        c = abs(delta) * hjj
                        if c > change:
                            change = c
                    active[j] = new != 0.0 or l1[j] == 0.0
                if change <= tol:
                    if full:
                        break
                    full = True  # the active set settled: check every coordinate
                else:
                    full = False
            return x, n

        _compiled["fn"] = sweeps
    return _compiled["fn"]


def cd_solve(H: npt.ArrayLike, g: npt.ArrayLike, x0: npt.ArrayLike, l1: npt.ArrayLike, tol: float,
             max_sweeps: int = MAX_SWEEPS, free: int | None = None) -> tuple[np.ndarray, int]:
    r"""Minimise the quadratic model plus the L1 term by coordinate descent.

    .. math:: \min_x \; g^\top (x - x_0) + \tfrac12 (x - x_0)^\top H (x - x_0)
              + \sum_j \lambda_j |x_j|

    Cyclic sweeps with soft-thresholding, ``H`` kept whole; after a full sweep only the
    non-zero (and unpenalised) coordinates are swept until no coordinate moves the
    model's gradient by more than ``tol``, then a full sweep checks the rest.

    Parameters
    ----------
    H : ndarray of shape (p, p)
        Symmetric positive semi-definite.
    g : ndarray of shape (p,)
        Gradient of the smooth part at ``x0``.
    x0 : ndarray of shape (p,)
        The start (the current parameters).
    l1 : ndarray of shape (p,)
        L1 strengths ``lambda_j >= 0``.
    tol : float
        Stop when no coordinate's update changes the model's gradient by more than
        ``tol`` in a full sweep.
    max_sweeps : int
    free : int or None, default=None
        An unpenalised coordinate (the intercept) minimised out in closed form: the
        sweeps run on the Schur complement of ``H[free, free]``, as on centred
        features, so that features far from zero do not slow them down.

    Returns
    -------
    x : ndarray of shape (p,)
    n_sweeps : int
    """
    f64 = np.float64
    H, g, x0, l1 = np.asarray(H, f64), np.asarray(g, f64), np.asarray(x0, f64), np.asarray(l1, f64)
    if free is not None and H[free, free] > 0 and l1[free] == 0:
        keep = np.arange(len(x0)) != free
        col = H[keep, free] / H[free, free]
        Hs = H[np.ix_(keep, keep)] - np.outer(col, H[free, keep])
        xk, n = _kernel()(np.ascontiguousarray(0.5 * (Hs + Hs.T)), g[keep] - col * g[free], x0[keep], l1[keep],
                          float(tol), int(max_sweeps))
        x = x0.copy()
        x[keep] = xk
        x[free] -= (g[free] + H[free, keep] @ (xk - x0[keep])) / H[free, free]
        return x, int(n)
    x, n = _kernel()(np.ascontiguousarray(H), g, x0, l1, float(tol), int(max_sweeps))
    return x, int(n)


class IRLSCD(CountsIterations, AttributeState, Solver):
    """Newton's method (IRLS) with the exact Hessian, and with coordinate descent for L1
    and elastic-net penalties (glum's "irls-cd"), on single-output models.

    Every evaluation is one distributed pass giving the smooth objective ``f`` (mean
    loss plus the L2 part), its gradient ``g`` and its Hessian ``H`` (the block sums
    ``X~^T diag(s h) X~`` of :class:`~.newton.HessianTraining`, tree-reduced with the
    gradient), in the scaled coordinates of :mod:`..scaling` when the fit is scaled.
    An iteration minimises the quadratic model
    ``g.d + d^T H d / 2 + lambda ||x + d||_1`` on the driver: without an L1 part by a
    direct solve (:func:`newton_step`: a Newton step), else by coordinate descent with
    soft-thresholding (:func:`~.newton.cd_solve`, warm-started at the current parameters,
    active set); then it backtracks along ``d`` from step 1, halving, until the full
    objective ``F = f + lambda ||x||_1`` decreases by at least ``1e-4 t Delta``
    (``Delta = g.d + lambda (||x + d||_1 - ||x||_1)``, Tseng and Yun's rule); each trial
    is one pass, and the accepted trial's pass already holds the next iteration's
    gradient and Hessian.  Near the optimum, where values differ only by rounding, a
    trial whose subgradient is smaller is accepted too.  Converged when the largest
    entry of the minimum-norm subgradient (the KKT violation) is at most ``tol`` (times
    the start's when that is below 1 and the fit starts from the model's null start:
    :func:`~..stopping.gradient_tol`, so that the target's units do not end a fit early).
    """

    def __init__(self, ctx: FitContext, params0: np.ndarray) -> None:
        self.ctx = ctx
        self.obj: HessianTraining | ScaledTraining = ctx.objective  # type: ignore[assignment]
        self.l1 = self.obj.l1_weights()
        linear = self.obj.objective
        self.free = linear.n_params - 1 if linear.fit_intercept else None  # the intercept is last
        self.x = np.array(params0, dtype=np.float64, copy=True)
        self.f: float | None = None
        self.g: np.ndarray | None = None
        self.H: np.ndarray | LeastSquaresModel | None = None
        self.kkt = math.inf
        self.polished = 0  # steps asked for after the tolerance was met
        self.it = 0
        self.direction: np.ndarray | None = None
        self.delta = 0.0
        self.t = 1.0
        self.trials = 0
        self.gtol = ctx.tol  # the KKT violation that ends the fit (set at the start)

    def _evaluate(self, x: np.ndarray) -> tuple[StepResult, float]:
        res = self.ctx.source.evaluate(x)
        value = res.value + self.obj.l1_value(x)
        return res, value

    def _take(self, res: StepResult, value: float) -> list[dict[str, Any]]:
        """Move to the evaluated point; the records of any further pass it took (the
        switch to R factors)."""
        self.x, self.f, self.g = res.params, value, res.grad
        self.H = self.obj.hessian(res.partial)
        self.kkt = kkt_violation(self.g, self.x, self.l1)
        least_squares = getattr(self.obj, "least_squares", None)
        if least_squares is None or np.any(self.l1) or not _ill_conditioned(self.H):
            return []
        switched = least_squares()
        if switched is None:
            return []
        # the Hessian's condition is the square of the design's: solve the Newton steps
        # from R factors from now on (curvature.py), starting with one pass here
        self.obj = self.ctx.objective = self.ctx.source.objective = switched
        res, value = self._evaluate(self.x)
        self.H = self.obj.hessian(res.partial)
        return [step_record(self.ctx, res, self.it, value, res.grad, None)]

    def start(self) -> Outcome:
        res, value = self._evaluate(self.x)
        if not res.finite:
            raise initial_divergence(res.value)
        extra = self._take(res, value)
        self.gtol = gradient_tol(self.ctx.tol, self.kkt) if self.ctx.tol_from_start else self.ctx.tol
        return Outcome([step_record(self.ctx, res, 0, value, res.grad, None), *extra])

    def _plan(self) -> bool:
        """Set the direction of the next step (the quadratic model's minimiser) and its
        model decrease ``delta``; False when the model gives no descent direction."""
        if np.any(self.l1):
            inner_tol = max(0.25 * self.gtol, min(0.1 * self.kkt, 1e-2))
            x_new, _ = cd_solve(self.H, self.g, self.x, self.l1, inner_tol, free=self.free)  # type: ignore[arg-type]
        else:
            x_new = self.x + newton_step(self.H, self.g, self.x)  # type: ignore[arg-type]
        x_new = self.obj.gauge(x_new)  # a softmax's common shifts, which the loss does not see
        d = x_new - self.x
        self.delta = float(self.g @ d) + float(self.l1 @ (np.abs(x_new) - np.abs(self.x)))  # type: ignore[operator]
        self.direction, self.t, self.trials = d, 1.0, 0
        return bool(np.any(d)) and self.delta < 0

    def step(self) -> Outcome:
        if self.direction is None and not self._plan():
            self.direction = None
            return Outcome(stop=Stop(  # flat at rounding level: judged by tol itself (see gradient_tol)
                self.kkt <= self.ctx.tol,
                "the quadratic model gives no descent direction (the objective is flat at rounding level)"))
        trial = self.x + self.t * self.direction  # type: ignore[operator]
        res, value = self._evaluate(trial)
        record = step_record(self.ctx, res, self.it + 1, value, res.grad, self.t)
        self.trials += 1
        kkt = kkt_violation(res.grad, trial, self.l1) if res.finite else math.inf
        if res.finite and -self.delta <= rounding_level(self.f) and not kkt < self.kkt:
            # a model decrease below the objective's rounding level, and no smaller
            # subgradient either: nothing can tell this step from the point (a start
            # that is already the optimum: an L1 fit whose penalty keeps every feature
            # out, whose relative bound, gradient_tol, sits below rounding): flat
            self.direction = None
            return Outcome([record], stop=Stop(
                self.kkt <= self.ctx.tol,
                "the step's model decrease is below the objective's rounding level and it does not shrink the "
                "gradient (the objective is flat at rounding level)"))
        # at the optimum the values differ only by rounding: a smaller subgradient then
        # shows the step is right
        if res.finite and accepts(value, self.f, self.t, self.delta, kkt, self.kkt):
            self.it += 1
            extra = self._take(res, value)
            self.direction = None
            return Outcome([record, *extra])
        if self.trials >= MAX_HALVINGS:
            return Outcome([record], stop=Stop(  # flat at rounding level: judged by tol itself
                self.kkt <= self.ctx.tol,
                "the line search found no decrease (the objective is flat at rounding level)"))
        self.t *= 0.5
        return Outcome([record])

    def stop_rule(self, outcome: Outcome) -> Stop | None:
        if self.kkt <= self.gtol and self.direction is not None and self.polished:
            return None  # a line search after the tolerance was met goes on
        if self.kkt <= self.gtol:
            # more steps once the tolerance is met, while the quadratic model predicts a
            # decrease above the objective's rounding level (at most MAX_POLISH):
            # Newton's steps converge quadratically, so one step usually ends it, and
            # leaves the parameters far closer to the optimum than the gradient's
            # tolerance alone (measured: 3e-4 to 2e-7 relative on unscaled GLMs); on a
            # design of standardised condition 1e10 rounding slows the last digits and
            # a few more steps reach them
            # (polishing never takes the fit past max_iter: it ends converged there)
            if self.polished >= MAX_POLISH or self.it >= self.ctx.max_iter or not (
                    self._plan() and -self.delta > rounding_level(self.f)):
                self.direction = None
                return Stop(True)
            self.polished += 1
        return None  # max_iter: the stop rules' (on iterations)

    def result(self) -> tuple[np.ndarray, int, None, None]:
        return self.x, self.it, None, None

    def gap(self) -> float:
        return self.kkt

    _STATE = ("x", "f", "g", "H", "kkt", "it", "direction", "delta", "t", "trials", "polished")
    _LATER_STATE = ("gtol",)

    def resume(self) -> Outcome:
        return Outcome(accepted=False)
