"""Synchronous distributed gradient descent: L-BFGS, full-batch and mini-batch steps.

One *step* = one task per shard computing the sums ``(loss, gradient, weight)`` at the
current parameters, a fixed-shape tree reduction, and an update on the driver.  All
solvers share :class:`Evaluator`, so they report the same records and obey the same
determinism contract.
"""

import math
import time
from dataclasses import dataclass

import dask
import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.sparse as sp

from ..exceptions import DivergenceError, ParameterError
from ..losses import lipschitz_bound, objective_hessian, objective_value_gradient
from ..optim import SGD, Adagrad, RMSprop
from .checkpoint import gather_compression, restore_compression
from .reduce import Partial
from .shards import (
    shard_check_finite,
    shard_loss_grad,
    shard_minibatch,
    shard_sample,
    shard_sums_compressed,
)
from .skew import DynamicBalancer

__all__ = [
    "Evaluator",
    "FitResult",
    "run_lbfgs",
    "run_newton",
    "run_first_order",
    "batch_allocation",
]

#: Rows sampled (in total, over all shards) to estimate the Lipschitz constant.
LIPSCHITZ_SAMPLE_ROWS = 8192
#: Rows of the sample whose Hessian preconditions the Newton solver (dask config
#: ``dgd.newton-sample-rows``).
NEWTON_SAMPLE_ROWS = 32768
#: Halvings of the Newton step before the line search gives up.
NEWTON_MAX_LINESEARCH = 30
#: Consecutive learning-rate halvings after which a fit is declared divergent.
MAX_BACKOFFS = 30
#: An objective above this many times the initial one (or times 1, if that is smaller)
#: has exploded: it is treated like NaN (back off, or raise with ``on_divergence="raise"``).
EXPLOSION_FACTOR = 1e6
#: Epochs without improvement of more than ``tol`` after which mini-batch training stops.
N_ITER_NO_CHANGE = 5


@dataclass
class FitResult:
    """What a solver returns to the estimator."""

    params: np.ndarray
    n_iter: int
    converged: bool
    n_steps: int
    optimizer: object = None
    opt_state: object = None
    message: str = ""


class Evaluator:
    """The distributed objective: mean loss over the shards plus the penalty."""

    def __init__(
        self, shards, objective, penalty, split_every, monitor, max_time=None, dynamic=False,
        compressor=None, seed=(0,),
    ):
        self.shards = shards
        self.compressor = compressor
        self.seed = tuple(seed)
        self.objective = objective
        self.penalty = penalty
        self.split_every = split_every
        self.monitor = monitor
        self.max_time = max_time
        # moves blocks toward faster workers (synchronous steps through actors)
        self.balancer = DynamicBalancer(shards) if dynamic and shards.executor.kind == "dask" else None
        self.n_steps = 0
        self.validator = None  # set by the estimator for early stopping
        self._data_checked = False
        self._last_end = None  # perf_counter when the previous step's result arrived
        self._timing = {}
        if shards.uses_runners(split_every, 8 * objective.n_params):
            shards.start_runners()  # setup, not part of the first step's time

    def _finish(self, partial, params):
        # A mini-batch can draw only zero-weight rows: it then carries no loss (the
        # whole data's total weight is checked to be positive before training).
        pen, pen_grad = self.penalty.smooth_value_gradient(params, self.objective)
        if partial.weight_sum <= 0:
            return pen, pen_grad
        value = partial.loss_sum / partial.weight_sum + pen
        grad = partial.grad_sum / partial.weight_sum + pen_grad
        return value, grad

    def _step(self, fn, params, *args, kind, work=None):
        t0, wall0 = time.perf_counter(), time.time()
        update_time = None if self._last_end is None else t0 - self._last_end
        self.n_steps += 1
        if self.compressor is not None:
            partial, up_raw, up = self._compressed_step(fn, params, *args, kind=kind)
        else:
            partial = self.shards.map_reduce(
                fn,
                self.objective,
                params,
                *args,
                split_every=self.split_every,
                name=f"{kind}-{self.n_steps}",
                result_bytes=8 * self.objective.n_params,
            )
            up_raw = up = (8 * self.objective.n_params + 16) * max(int(partial.n_groups), 1)
        down = 8 * self.objective.n_params * self.shards.n_groups
        self._bytes = {"bytes_up_raw": up_raw, "bytes_up": up, "bytes_down": down}
        wall1 = time.time()
        value, grad = self._finish(partial, params)
        if not self._data_checked:
            if not (math.isfinite(value) and np.all(np.isfinite(grad))):
                # Name the block if X holds NaN/inf; otherwise the parameters are at fault.
                self.shards.map_gather(shard_check_finite, name="dgd-check-finite")
                self._data_checked = True
            elif fn is shard_loss_grad:
                self._data_checked = True  # finite sums over every row: X is finite
        self._last_end = time.perf_counter()
        self._timing = {
            "broadcast_time": _nonneg(partial.start_max - wall0),
            "reduce_time": _nonneg(wall1 - partial.end_max),
            "update_time": update_time,
        }
        step_time = self._last_end - t0
        if self.balancer is not None:
            self.balancer.observe(self.n_steps, self.shards.block_costs if work is None else work)
        return value, grad, partial, step_time

    def _compressed_step(self, fn, params, *args, kind):
        """One step whose group gradients travel compressed: each group sums its
        blocks, compresses (with its own error-feedback state), and the driver
        decompresses and adds the groups in order."""
        if fn is shard_loss_grad:
            seed, step, take = self.seed, self.n_steps, None
        else:  # shard_minibatch(seed, step, take)
            seed, step, take = args
        results = self.shards.call_groups(
            shard_sums_compressed, self.objective, params, seed, step, take, self.compressor,
            (*self.seed, 7919), name=f"{kind}-{self.n_steps}",
        )
        loss, grad, weight = 0.0, np.zeros(self.objective.n_params), 0.0
        for r in results:  # group order
            p = r["payload"]
            loss += r["loss"]
            weight += r["weight"]
            grad += p["raw"] if set(p) == {"raw"} else self.compressor.decompress(p)
        times = [r["time"] for r in results]
        partial = Partial(
            loss, grad, weight, min(times), max(times), len(results),
            max(r["start"] for r in results), max(r["end"] for r in results),
        )
        self.shards.last_group_times = times
        return partial, sum(r["raw_bytes"] for r in results), sum(r["sent_bytes"] for r in results)

    def full(self, params):
        """Smooth objective value and gradient over all data (one distributed step)."""
        return self._step(shard_loss_grad, params, kind="grad")

    def batch(self, params, seed, batch_size):
        """Smooth objective value and gradient on the next step's mini-batch."""
        step = self.n_steps + 1
        take = batch_allocation(self.shards.block_rows, batch_size, (*seed, step))
        rows = np.maximum(self.shards.block_rows, 1)
        work = self.shards.block_costs * (take / rows)
        return self._step(shard_minibatch, params, seed, step, take, kind="batch", work=work)

    def out_of_time(self):
        """Whether the fit has run for ``max_time`` seconds (None: never)."""
        return self.max_time is not None and self.monitor.elapsed() >= self.max_time

    def time_message(self):
        return f"reached max_time={self.max_time} s"

    def record(self, iteration, value, grad, partial, step_time, step_size, **extra):
        """Report a step; ``value`` is the whole objective (with any L1 term); ``extra``
        fields (e.g. validation scores) are added to the record."""
        n_groups = max(int(partial.n_groups), 1)
        return self.monitor.record(
            step=self.n_steps,
            iteration=iteration,
            loss=float(value),
            grad_norm=float(np.linalg.norm(grad)),
            step_size=step_size,
            step_time=step_time,
            compute_time_max=partial.time_max,
            compute_time_min=partial.time_min,
            n_samples=partial.weight_sum,
            staleness_max=0,
            staleness_mean=0.0,
            delay_max=0,
            delay_mean=0.0,
            wait_time=max(0.0, partial.time_max - partial.time_min),
            updates_per_group=(1,) * n_groups,
            comm_bytes=self._bytes["bytes_up"] + self._bytes["bytes_down"],
            **self._bytes,
            **self._timing,
            **extra,
        )


def divergence_message(what, max_backoffs):
    """The message of a DivergenceError after ``max_backoffs`` halvings (0: on_divergence="raise")."""
    if max_backoffs == 0:
        return (
            f"{what} (on_divergence='raise'); pass a smaller learning_rate, scale the features "
            "(e.g. StandardScaler), or on_divergence='backoff' to halve the learning rate automatically"
        )
    return (
        f"{what} even after halving the learning rate {max_backoffs} times; scale the features "
        "(e.g. StandardScaler) or pass a smaller learning_rate"
    )


def _nonneg(seconds):
    """A wall-clock difference between processes: NaN if unknown, clipped at 0 (the
    clocks of different machines may disagree by a little)."""
    return None if not math.isfinite(seconds) else max(0.0, float(seconds))


def run_lbfgs(evaluator, params0, settings, *, max_iter, tol):
    """Minimise with SciPy's L-BFGS-B driving the distributed loss and gradient.

    Every function evaluation is one distributed step; SciPy does the two-loop recursion
    and the line search (Moré–Thuente) on the driver, where the parameters live.
    """
    if evaluator.penalty.has_l1:
        raise ParameterError(
            "solver='lbfgs' cannot handle an L1 penalty (l1_ratio > 0); use solver='gd' "
            "(proximal gradient) or solver='auto'"
        )
    state = {"iteration": 0}

    def fun(x):
        value, grad, partial, dt = evaluator.full(x)
        evaluator.record(state["iteration"], value, grad, partial, dt, None)
        if not (math.isfinite(value) and np.all(np.isfinite(grad))):
            if evaluator.n_steps == 1:
                raise DivergenceError(
                    f"the objective is not finite at the initial parameters (loss={value}); "
                    "check the data and weights for extreme values or scale the features"
                )
            # Let the line search back off rather than stop: report a huge value.
            return 1e300, np.zeros_like(grad)
        return value, grad

    def callback(intermediate_result):
        state["iteration"] += 1
        if evaluator.monitor.stop_requested or evaluator.out_of_time():
            raise StopIteration

    res = scipy.optimize.minimize(
        fun,
        params0,
        method="L-BFGS-B",
        jac=True,
        callback=callback,
        options={
            "maxiter": max_iter,
            "maxfun": max(4 * max_iter, 50),
            "maxcor": settings.memory,
            "maxls": settings.max_linesearch,
            "gtol": tol,
            "ftol": 64 * np.finfo(float).eps,
        },
    )
    converged = res.status == 0 or evaluator.monitor.stop_requested
    message = str(res.message)
    if not converged and evaluator.out_of_time():
        message = evaluator.time_message()
    return FitResult(
        params=np.asarray(res.x, dtype=np.float64),
        n_iter=int(res.nit),
        converged=bool(converged),
        n_steps=evaluator.n_steps,
        optimizer=settings,
        message=message,
    )


def gather_sample(shards, n_rows):
    """About ``n_rows`` evenly spaced rows of the data on the driver: ``(X, y, weights)``.

    Each block gives rows in proportion to its size and the pieces are put in block
    order, so the sample depends only on the data and its chunking, never on
    placement.  The weights (sample weights, or ones) are scaled by total rows / sampled
    rows so that weighted means over the sample estimate those over the data.  None if
    the data has no rows.
    """
    rows = shards.block_rows
    total = int(rows.sum())
    if total == 0 or n_rows <= 0:
        return None
    take = np.ceil(np.minimum(n_rows, total) * rows / total).astype(np.int64)
    pieces = sorted(
        (p for group in shards.map_gather(shard_sample, take, name="dgd-sample") for p in group),
        key=lambda p: p[0],
    )
    if not pieces:
        return None
    if sp.issparse(pieces[0][1]):
        X = sp.vstack([p[1] for p in pieces], format="csr")
    else:
        X = np.concatenate([p[1] for p in pieces])
    y = np.concatenate([p[2] for p in pieces])
    w = np.concatenate([p[3] for p in pieces])
    return X, y, w * (total / len(w))


def run_newton(evaluator, params0, *, max_iter, tol, sample_rows=None):
    """Newton's method with the Hessian of an even row sample, on the full gradient.

    On the driver, a sample of ``sample_rows`` rows (dask config
    ``dgd.newton-sample-rows``, default :data:`NEWTON_SAMPLE_ROWS`; all rows when the
    data has fewer) is gathered once; the same objective is minimised on it (SciPy
    L-BFGS-B, from ``params0``) and its Hessian ``H`` is formed there
    (:func:`~dask_dgd.losses.objective_hessian`).  Each iteration then takes one
    distributed step for the full gradient ``g`` and moves by ``-H^{-1} g`` with an
    Armijo backtracking line search (every trial point is one distributed step).  The
    sample Hessian is refreshed at the current point whenever the full step was not
    accepted.  Convergence is linear with a rate of about ``sqrt(n_params / sample)``
    (quadratic when the sample is all the data); it stops when the largest gradient
    entry is at most ``tol``, as L-BFGS does.
    """
    obj, pen = evaluator.objective, evaluator.penalty
    if pen.has_l1:
        raise ParameterError(
            "solver='newton' cannot handle an L1 penalty (l1_ratio > 0); use solver='gd' "
            "(proximal gradient) or solver='auto'"
        )
    if sample_rows is None:
        sample_rows = int(dask.config.get("dgd.newton-sample-rows", NEWTON_SAMPLE_ROWS))
    if sample_rows < obj.n_params:
        raise ParameterError(
            f"dgd.newton-sample-rows must be at least the number of parameters "
            f"({obj.n_params}); got {sample_rows}"
        )
    X, y, w = gather_sample(evaluator.shards, sample_rows)
    if not np.all(np.isfinite(X.data if sp.issparse(X) else X)):
        evaluator.shards.map_gather(shard_check_finite, name="dgd-check-finite")  # names the block

    def sample_objective(params):
        with np.errstate(all="ignore"):
            return objective_value_gradient(params, obj, pen, X, y, w)

    def hessian(params):
        H = objective_hessian(params, obj, pen, X, y, w)
        # A tiny ridge keeps the factorisation defined for rank-deficient samples.
        ridge = 1e-10 * max(float(np.max(np.diag(H))), 1e-300)
        try:
            return scipy.linalg.cho_factor(H + ridge * np.eye(len(H)))
        except (np.linalg.LinAlgError, ValueError) as err:
            raise DivergenceError(
                f"the sample Hessian of the objective is not positive definite or not "
                f"finite ({err}); scale the features or use solver='lbfgs'"
            ) from err

    objective_hessian(params0, obj, pen, X[:1], y[:1], w[:1])  # unsupported loss: fail now
    res = scipy.optimize.minimize(
        sample_objective, params0, method="L-BFGS-B", jac=True,
        options={"maxiter": 500, "gtol": tol, "ftol": 64 * np.finfo(float).eps},
    )
    start = sample_objective(params0)[0]
    params = res.x if np.all(np.isfinite(res.x)) and res.fun <= start else params0
    params = np.asarray(params, dtype=np.float64)
    factor = hessian(params)

    value, grad, partial, dt = evaluator.full(params)
    if not (math.isfinite(value) and np.all(np.isfinite(grad))):
        raise DivergenceError(
            f"the objective is not finite at the initial parameters (loss={value}); "
            "check the data and weights for extreme values or scale the features"
        )
    it, converged, message = 0, False, ""
    evaluator.record(it, value, grad, partial, dt, None)
    while True:
        if np.max(np.abs(grad), initial=0.0) <= tol or evaluator.monitor.stop_requested:
            converged = True
            break
        if it >= max_iter:
            message = f"reached max_iter={max_iter}"
            break
        if evaluator.out_of_time():
            message = evaluator.time_message()
            break
        direction = -scipy.linalg.cho_solve(factor, grad)
        slope = float(grad @ direction)
        step, accepted = 1.0, False
        for _ in range(NEWTON_MAX_LINESEARCH):
            trial = params + step * direction
            t_value, t_grad, partial, dt = evaluator.full(trial)
            evaluator.record(it + 1, t_value, t_grad, partial, dt, step)
            if math.isfinite(t_value) and (
                t_value <= value + 1e-4 * step * slope
                # at the optimum the values differ only by rounding: a smaller
                # gradient then shows the step is right
                or (
                    t_value <= value + 64 * np.finfo(float).eps * abs(value)
                    and np.max(np.abs(t_grad)) < np.max(np.abs(grad))
                )
            ):
                accepted = True
                break
            step *= 0.5
        if not accepted:
            message = "the line search found no decrease (the objective is flat at rounding level)"
            converged = np.max(np.abs(grad), initial=0.0) <= max(tol, 1e-8)
            break
        it += 1
        if step < 1.0:
            factor = hessian(trial)  # the sample curvature was off here: refresh it
        params, value, grad = trial, t_value, t_grad
    return FitResult(
        params=params,
        n_iter=it,
        converged=bool(converged),
        n_steps=evaluator.n_steps,
        message=message,
    )


def estimate_lipschitz(shards, objective, penalty, params):
    """Lipschitz estimate of the mean-loss gradient from an even sample of rows."""
    sample = gather_sample(shards, LIPSCHITZ_SAMPLE_ROWS)
    if sample is None:
        return 1.0
    X, _, w = sample
    l2 = penalty.alpha * (1.0 - penalty.l1_ratio)
    L = lipschitz_bound(objective, X, w, alpha_l2=l2, params=params)
    return float(L) if L > 0 and math.isfinite(L) else 1.0


def auto_learning_rate(optimizer, lipschitz, grad0):
    """A safe first step: 1/L for (momentum) SGD; for adaptive methods, whose first
    update moves every coordinate by about the learning rate, the largest coordinate
    move of that 1/L gradient step."""
    if isinstance(optimizer, SGD):
        return 1.0 / lipschitz
    gmax = float(np.max(np.abs(grad0))) if grad0.size else 0.0
    return gmax / lipschitz if gmax > 0 else 1.0 / lipschitz


def is_descent_method(optimizer):
    """True when every update is a positive diagonal scaling of minus the gradient.

    For these (plain SGD, RMSprop without momentum, Adagrad) a short enough full-batch
    step always lowers the objective, so an increase means the step is too long for the
    local curvature (or the method oscillates around the optimum) and halving it is the
    cure.  Momentum methods, Adam and AdamW are legitimately non-monotone: their update
    need not point downhill, so only NaN/inf triggers a backoff for them.
    """
    if isinstance(optimizer, (SGD, RMSprop)):
        return optimizer.momentum == 0
    return isinstance(optimizer, Adagrad)


def batch_allocation(block_rows, batch_size, seed):
    """Rows each block contributes to one global batch of ``batch_size`` rows.

    Each block gets the integer part of its proportional share; the remaining rows go
    to blocks drawn without replacement with probability proportional to the fractional
    parts, by a generator seeded with ``seed`` (random state and step).  Every row thus
    has the same chance to be in a batch, whatever the block sizes, and the allocation
    depends only on the block sizes and the seed.
    """
    rows = np.asarray(block_rows, dtype=np.int64)
    total = rows.sum()
    if batch_size >= total:
        return rows.copy()
    exact = rows * (batch_size / total)
    take = np.floor(exact).astype(np.int64)
    short = int(batch_size - take.sum())
    if short:
        frac = exact - take
        rng = np.random.default_rng(list(seed))
        take[rng.choice(len(rows), size=short, replace=False, p=frac / frac.sum())] += 1
    return take


class EpochStopper:
    """The mini-batch stopping rule of every mode: the mean of the objective values
    recorded during an epoch has not improved on the best epoch's by more than ``tol``
    for ``N_ITER_NO_CHANGE`` epochs in a row."""

    def __init__(self, tol, patience=N_ITER_NO_CHANGE):
        self.tol = tol
        self.patience = int(patience)
        self.values = []
        self.best = math.inf
        self.no_change = 0
        self.epochs = 0

    def add(self, value, epochs_done):
        """Record ``value``; ``epochs_done`` (epochs completed so far) closes the epoch
        when it grows.  Returns True when training should stop."""
        self.values.append(value)
        if epochs_done <= self.epochs:
            return False
        self.epochs = epochs_done
        mean = float(np.mean(self.values))
        self.values = []
        self.no_change = self.no_change + 1 if mean > self.best - self.tol else 0
        self.best = min(self.best, mean)
        return self.no_change >= self.patience


def first_order_start(evaluator, params, optimizer, *, batch_size, seed, learning_rate, divide=1):
    """The synchronous start of the local and asynchronous modes.

    One step at ``params`` (full batch, or the first mini-batch): it checks the data,
    gives the first history record, and the gradient for ``learning_rate="auto"``, whose
    step is divided by ``divide``.  Returns the optimizer with its learning rate.
    """
    obj, pen, shards = evaluator.objective, evaluator.penalty, evaluator.shards
    if batch_size is None or batch_size >= shards.n_rows:
        value, grad, partial, dt = evaluator.full(params)
    else:
        value, grad, partial, dt = evaluator.batch(params, tuple(seed), batch_size)
    if not (math.isfinite(value) and np.all(np.isfinite(grad))):
        raise DivergenceError(
            f"the objective is not finite at the initial parameters (loss={value}); "
            "check the data for extreme values or scale the features"
        )
    if learning_rate == "auto":
        L = estimate_lipschitz(shards, obj, pen, params)
        optimizer = optimizer.with_learning_rate(auto_learning_rate(optimizer, L, grad) / divide)
    evaluator.record(0, value + pen.l1_value(params, obj), grad, partial, dt, None)
    return optimizer


def run_first_order(
    evaluator,
    params0,
    optimizer,
    *,
    max_iter,
    tol,
    batch_size=None,
    seed=(0,),
    learning_rate="auto",
    opt_state=None,
    on_divergence="backoff",
    checkpoint=None,
    validator=None,
    n_iter_no_change=N_ITER_NO_CHANGE,
):
    """Gradient descent with a first-order optimizer, full batch or mini-batch.

    Full batch (``batch_size=None``): at most ``max_iter`` updates; stops when the largest
    entry of the (proximal) gradient mapping is at most ``tol``.  Mini-batch: at most
    ``max_iter`` epochs of ``ceil(n_rows / batch_size)`` steps; stops when the epoch's mean
    batch objective has not improved by more than ``tol`` for ``N_ITER_NO_CHANGE`` epochs.

    A NaN/inf objective (or, full batch, any increase for a :func:`is_descent_method`)
    restores the last accepted parameters and halves the learning rate; ``MAX_BACKOFFS`` halvings
    in a row raise :class:`DivergenceError`.  An *exploding* full-batch objective (above
    ``EXPLOSION_FACTOR`` times the initial one, or that many times 1 when the initial one
    is smaller) counts as NaN.  ``on_divergence="raise"`` raises at the first NaN/inf or
    exploding objective instead of backing off.  ``learning_rate="auto"`` replaces the
    optimizer's learning rate by :func:`auto_learning_rate`; anything else keeps it.

    ``checkpoint``: a :class:`~.checkpoint.Checkpointer`; the loop state is written every
    ``checkpoint.every`` accepted steps and at the end, and a resumed fit continues from
    the saved state exactly (the same steps, draws and updates as without the
    interruption).

    ``validator``: a :class:`~.validation.Validator`; at the end of every epoch (every
    iteration, full batch) the parameters are scored on the validation set (fields
    ``val_loss`` and ``val_score`` of the record), and training stops when the score has
    not improved on the best one by more than ``tol`` for ``n_iter_no_change`` epochs
    in a row (early stopping; the model is the last parameters, as scikit-learn's).
    """
    obj, pen, shards = evaluator.objective, evaluator.penalty, evaluator.shards
    decay_mask = pen.mask(obj)
    full_batch = batch_size is None or batch_size >= shards.n_rows
    # a compressed gradient need not point downhill: only NaN/inf backs off then
    monotone = full_batch and is_descent_method(optimizer) and evaluator.compressor is None
    if full_batch:
        steps_per_epoch = 1
        evaluate = evaluator.full
    else:
        steps_per_epoch = math.ceil(shards.n_rows / batch_size)

        def evaluate(params):
            return evaluator.batch(params, tuple(seed), batch_size)

    total_steps = max_iter * steps_per_epoch
    saved = checkpoint.load() if checkpoint is not None else None
    converged, message = False, ""
    if saved is None:
        params = np.array(params0, dtype=np.float64, copy=True)
        value, grad, partial, dt = evaluate(params)
        if learning_rate == "auto":
            L = estimate_lipschitz(shards, obj, pen, params)
            lr = auto_learning_rate(optimizer, L, grad)
            if evaluator.compressor is not None:  # compressed gradients need a shorter step
                lr *= evaluator.compressor.step_scale(obj.n_params)
            optimizer = optimizer.with_learning_rate(lr)
        state = optimizer.init(params) if opt_state is None else opt_state
        it, good, backoffs, first_value = 0, None, 0, None
        stopper, n_values = EpochStopper(tol, n_iter_no_change), 0
        early = {"best": -math.inf, "no_change": 0}
    else:
        params, state, optimizer, value, grad = (
            saved["params"], saved["opt_state"], saved["optimizer"], saved["value"], saved["grad"],
        )
        it, n_values, first_value = saved["iteration"], saved["n_values"], saved["first_value"]
        early = saved["early"]
        evaluator.n_steps = saved["n_steps"]
        stopper = EpochStopper(tol, n_iter_no_change)
        stopper.__dict__.update(saved["stopper"])
        evaluator.monitor.records[:0] = saved["records"]
        if evaluator.compressor is not None:
            restore_compression(shards, saved["compression"])
        good, backoffs = saved["good"], 0
        seed, evaluator.seed = saved["seed"], saved["evaluator_seed"]  # random_state=None draws anew
    # What a resumed fit does first.  "finished": nothing (it converged, or has done
    # max_iter already, perhaps a smaller max_iter than before); "update": the saved
    # state passed every check before it was written, so it is updated at once;
    # "evaluate": the last epoch's update was made without evaluating it (a fit that
    # ended at max_iter and is now given more), so it is evaluated and checked first.
    resume = None
    if saved is not None:
        if saved["converged"] or it >= total_steps:
            resume = "finished"
            converged, message = saved["converged"], saved["message"]
        else:
            resume = "evaluate" if saved.get("phase") == "updated" else "update"
    phase = "checked"

    def loop_state(done):
        return {
            "params": params, "opt_state": state, "optimizer": optimizer, "value": value, "grad": grad,
            "iteration": it, "n_values": n_values, "first_value": first_value, "n_steps": evaluator.n_steps,
            "stopper": dict(vars(stopper)), "records": list(evaluator.monitor.records),
            "compression": gather_compression(shards) if evaluator.compressor is not None else None,
            "done": done, "converged": converged, "message": message,
            "seed": tuple(seed), "evaluator_seed": tuple(evaluator.seed), "early": dict(early),
            "phase": phase, "good": good,
        }

    while True:
        if resume == "finished":
            break
        if resume == "evaluate":
            value, grad, partial, dt = evaluate(params)
        if resume == "update":
            bad = False
        else:
            # The whole objective (smooth part + L1): a proximal step may raise the smooth
            # part alone while lowering the sum.
            value = value + pen.l1_value(params, obj)
            if first_value is None:
                first_value = value
            bad = not (math.isfinite(value) and np.all(np.isfinite(grad)))
            # (full batch only: one mini-batch may legitimately be far above the first one)
            exploded = full_batch and not bad and value > EXPLOSION_FACTOR * max(abs(first_value), 1.0)
            if bad and good is None:
                raise DivergenceError(
                    f"the objective is not finite at the initial parameters (loss={value}); "
                    "check the data for extreme values or scale the features"
                )
            if (bad or exploded) and on_divergence == "raise":
                what = "is not finite" if bad else f"exploded (initial loss {first_value:.6g})"
                raise DivergenceError(
                    f"the objective {what} at step {evaluator.n_steps} (loss={value}) with learning "
                    f"rate {optimizer.current_learning_rate(good[1]):.6g}; pass a smaller learning_rate, "
                    "scale the features (e.g. StandardScaler), or on_divergence='backoff' to halve "
                    "the learning rate automatically"
                )
            bad = bad or exploded
            if not bad and monotone and good is not None:
                bad = value > good[2] + 1e-12 * abs(good[2])
            if not bad:
                backoffs = 0
                good = (params, state, value, grad, it)
                lr = optimizer.current_learning_rate(state)
                epoch = it // steps_per_epoch
                scores = {}
                if validator is not None:
                    scores = {"val_loss": None, "val_score": None}
                    if it % steps_per_epoch == 0:
                        scores = validator.evaluate(params)
                evaluator.record(it if full_batch else epoch, value, grad, partial, dt, lr, **scores)
                if evaluator.monitor.stop_requested:
                    converged = True
                    break
                if scores.get("val_score") is not None:
                    score = scores["val_score"]
                    early["no_change"] = 0 if score > early["best"] + tol else early["no_change"] + 1
                    early["best"] = max(early["best"], score)
                    if early["no_change"] >= n_iter_no_change:
                        converged = True
                        message = (
                            f"early stopping: the validation score did not improve by more than "
                            f"tol={tol} for n_iter_no_change={n_iter_no_change} epochs"
                        )
                        break
                if evaluator.out_of_time():
                    message = evaluator.time_message()
                    break
                if full_batch:
                    g_map = grad
                    if pen.has_l1:
                        g_map = (params - pen.prox(params - lr * grad, lr, obj)) / lr
                    if np.max(np.abs(g_map), initial=0.0) <= tol:
                        converged = True
                        break
                elif validator is None:  # with early stopping, the validation score decides
                    n_values += 1
                    if stopper.add(value, n_values // steps_per_epoch):
                        converged = True
                        break
                if it >= total_steps:
                    break
                if checkpoint is not None and checkpoint.due(it):
                    checkpoint.save(loop_state(done=False))
        resume = None
        if bad:
            backoffs += 1
            if backoffs > MAX_BACKOFFS:
                raise DivergenceError(
                    f"the objective diverged at step {evaluator.n_steps} (loss={value}) "
                    f"even after halving the learning rate {MAX_BACKOFFS} times; scale the "
                    "features (e.g. StandardScaler) or pass a smaller learning_rate"
                )
            optimizer = optimizer.scale_learning_rate(0.5)
            params, state, value, grad, it = good
            bad = False
        lr = optimizer.current_learning_rate(state)
        updates, state = optimizer.update(grad, state, params, decay_mask=decay_mask)
        params = params + updates
        if pen.has_l1:
            params = pen.prox(params, lr, obj)
        it += 1
        if not full_batch and it >= total_steps:
            phase = "updated"
            break  # the last epoch is complete; a further batch would only be discarded
        value, grad, partial, dt = evaluate(params)
    if checkpoint is not None:
        checkpoint.save(loop_state(done=True))
    return FitResult(
        params=params,
        n_iter=it if full_batch else -(-it // steps_per_epoch),
        converged=converged,
        n_steps=evaluator.n_steps,
        optimizer=optimizer,
        opt_state=state,
        message=message,
    )
