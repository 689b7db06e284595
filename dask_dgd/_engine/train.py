"""``dask_dgd.train``: the functional layer every estimator is a thin shell over.

``train(objective, data, ...)`` shards the data (or takes shards prepared by an
estimator), resolves the solver, the optimizer and the mode, assembles the step source,
the solver, the stop rules, the monitor and the checkpoints, runs the one driver loop
(:mod:`.loop`) and returns a :class:`FitResult`.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import scipy.sparse as sp

from ..compression import get_compressor
from ..exceptions import InputError, ParameterError
from ..losses import LinearObjective, Penalty
from ..optim import FirstOrderOptimizer
from .capabilities import (
    MODES,
    SOLVERS,
    learning_rate_mode,
    resolve_feedback,
    resolve_solver,
    scaled_solve,
    sharding_refusals,
    solver_class,
)
from .data.shards import ShardSet, released_on_error
from .data.skew import DynamicBalancer
from .loop import Loop
from .modes.sync import SyncSource
from .objective import LinearTraining, PathTraining
from .runtime.checkpoint import Checkpointer, data_fingerprint, digests_of, stable_repr
from .runtime.executor import auto_split_every, get_executor
from .runtime.group_steps import group_local_export, group_local_init
from .runtime.monitor import Monitor, communicated
from .runtime.threads import driver_blas
from .scaling import ColumnScaling, ScaledTraining, column_scaling, ridge_level
from .sharded.driver import ShardedSource
from .sharded.params import ParamLayout, dense_state, sparse_state
from .solvers.base import Settings
from .solvers.cd_path import PathHessianTraining
from .solvers.newton import HessianTraining
from .stopping import EarlyStopping, StopRules

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Mapping, Sequence

    import pandas as pd
    from distributed import Client

    from ..compression import Compressor
    from ..optim import LBFGS
    from .data.holdout import Validator
    from .protocols import TrainingObjective
    from .runtime.checkpoint import Checkpointer
    from .stopping import StopRules

__all__ = ["FitResult", "resolve_solver", "train"]

SOLVER_CHOICES = ("auto", *SOLVERS)


@dataclass
class FitResult:
    """What :func:`train` returns.

    Attributes
    ----------
    params : numpy.ndarray or scipy.sparse.csr_matrix
        The trained parameters (flat; a linear objective's ``unpack`` splits them),
        or one CSR row of their non-zero entries (``sparse_params``).
    n_iter : int
        Iterations (full batch) or epochs (mini-batch, local, async).
    converged : bool
    message : str
        Why training stopped when it did not converge (or how it converged).
    n_steps : int
        Distributed steps taken.
    history : pandas.DataFrame
        One row per step (see the user guide's Monitoring section), built from
        ``records`` (with ``history_attrs``) when first asked for: a small fit spends
        about a millisecond building it, a tenth of its time.
    records : list of dict
        The steps' records, one dict each.
    history_attrs : dict
        The history's ``attrs`` (``"coordinates"``: those of the records' gradients).
    solver, mode : str
    optimizer : optimizer object
        With the learning rate training ended with (after automatic choice and halvings).
    opt_state : NamedTuple or None
        The optimizer's state (first-order solvers), to continue training.
    split_every : int
        Fan-in of the reduction tree.
    bytes_communicated : dict
        Totals of the bytes moved (see :func:`dask_dgd.communication_report`).
    local : list or None
        Models with local parameters: what each group exported (its users' factors).
    param_sharding : bool
        Whether the parameters were sharded over the workers during the fit.
    gap : float or None
        The largest entry of the (sub)gradient at the result, in the coordinates the
        solver ran in (``history.attrs["coordinates"]``): what ``tol`` is compared
        with; None for solvers that stop on another rule (mini-batch, local, async).
    gap_bound : float or None
        The bound ``gap`` had to reach: ``tol``, or ``tol`` relative to the start's
        gradient (see ``tol_from_start``); None with ``gap``.
    """

    params: np.ndarray
    n_iter: int
    converged: bool
    message: str
    n_steps: int
    records: list[dict[str, Any]]
    solver: str
    mode: str
    optimizer: object = None
    opt_state: object = None
    split_every: int = 8
    bytes_communicated: dict = field(default_factory=dict)
    local: list | None = None
    param_sharding: bool = False
    gap: float | None = None
    gap_bound: float | None = None
    history_attrs: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def history(self) -> pd.DataFrame:
        import pandas as pd

        history = pd.DataFrame.from_records(self.records)
        history.attrs.update(self.history_attrs)
        return history

    def objective_rise(self, factor: float = 2.0) -> tuple[float, float] | None:
        """``(start, end)`` when the objective ended above ``factor`` times its value at
        the initial parameters, else None: a learning rate too large for the problem
        that kept the fit below the divergence guard's limit (see
        :meth:`~.update.Guard.limit`), e.g. Adam oscillating far above the start.
        ``end`` is the mean of the records of the last iteration (one record for full
        batch; an epoch of mini-batches, which are noisy one by one)."""
        h = self.history
        if h is None or len(h) < 2 or "loss" not in h:
            return None
        start = float(h["loss"].iloc[0])
        last = h.iloc[-1:] if "iteration" not in h else h[h["iteration"] == h["iteration"].iloc[-1]]
        end = float(last["loss"].mean())
        if not (math.isfinite(start) and math.isfinite(end)):
            return None
        if end > factor * start and end - start > 1e-8 * max(1.0, abs(start)):
            return start, end
        return None


@dataclass
class Context:
    """The parts of one fit the solvers share."""

    shards: ShardSet
    objective: TrainingObjective
    source: SyncSource
    monitor: Monitor
    batching: Any  # how mini-batches are drawn (steps_per_epoch, draw(step)); None: full batch
    compressor: Compressor | None
    checkpoint: Checkpointer | None
    max_iter: int  # for the solvers' own limits (a CV path stage's passes...); the fit's limit is stops'
    tol: float
    learning_rate: str
    on_divergence: str
    n_iter_no_change: int
    validator: Validator | None  # early stopping's scorer (evaluate(params)); None: none
    keeps_group_memory: bool
    seed: tuple = (0,)
    batch_size: int | None = None
    sparse_params: bool = False  # the result's vectors as SciPy rows of their non-zeros
    stops: StopRules | None = None  # the fit's: max_iter and max_time, asked by the loop and the solvers
    #: Newton's and L-BFGS's gradient bound is ``tol`` relative to the start's gradient
    #: (:func:`~.stopping.gradient_tol`): a fit from the model's null start, not a warm one
    tol_from_start: bool = False

    def reseed(self, seed: Sequence[int]) -> None:
        """Draw with ``seed`` from now on (a resumed fit takes its checkpoint's)."""
        self.seed = tuple(int(v) for v in seed)
        self.source.seed = self.seed
        self.batching = self.objective.batching(self.shards, self.batch_size, self.seed)


def seed_of(random_state: int | tuple[int, ...] | np.random.RandomState | None) -> tuple[int, ...]:
    """The seed tuple of ``random_state`` (an int, a RandomState or None)."""
    from sklearn.utils import check_random_state

    if isinstance(random_state, numbers.Integral):
        return (int(random_state),)
    if isinstance(random_state, tuple):
        return tuple(int(v) for v in random_state)
    return (int(check_random_state(random_state).randint(np.iinfo(np.int32).max)),)


def _shards_of(data: ShardSet | Sequence[Any], client: Client | None, rebalance: bool | str, max_iter: int,
               digest: bool = False) -> ShardSet:
    """``data`` as a ShardSet: as given, or ``(X, y[, sample_weight])`` sharded."""
    if isinstance(data, ShardSet):
        return data
    if not isinstance(data, (tuple, list)) or len(data) not in (2, 3):
        raise InputError(
            f"data must be a ShardSet or a tuple (X, y) or (X, y, sample_weight); got {type(data).__name__}"
        )
    from .data.blocks import shard_summary
    from .data.ingest import build_shardset

    X, y, *rest = data
    shards = build_shardset(get_executor(client, X), X, y, rest[0] if rest else None,
                            rebalance=rebalance, passes=max_iter)
    summaries = shards.map_gather(shard_summary, False, digest, name="dgd-summary")
    shards.totals = {"weight_sum": float(sum(s["weight_sum"] for s in summaries))}
    if digest:
        shards.totals["data"] = digests_of(summaries)
    if shards.totals["weight_sum"] <= 0:
        raise InputError("the total sample weight is zero: nothing to train on")
    return shards


def _held_out(data: Sequence[Any], objective: TrainingObjective, shards: ShardSet, validator: Validator | None,
              split_every: int | str) -> Validator:
    """The :class:`~.data.holdout.Validator` of ``validation_data``: its rows sharded on
    the training data's executor, scored with the objective's loss."""
    from .data.holdout import Validator
    from .data.ingest import build_shardset

    if validator is not None:
        raise ParameterError("give validation_data or validator, not both")
    if not isinstance(objective, LinearTraining):
        raise ParameterError(
            f"validation_data scores linear models; {type(objective).__name__} has its own held-out rule "
            "(validation_patience)")
    if not isinstance(data, (tuple, list)) or len(data) not in (2, 3):
        raise InputError(f"validation_data must be a tuple (X, y) or (X, y, sample_weight); got {type(data).__name__}")
    X, y, *rest = data
    width = getattr(X, "shape", (0, None))[1] if getattr(X, "ndim", 2) == 2 else None
    n_features = objective.objective.n_features
    if width is not None and width != n_features:
        raise InputError(f"validation_data has {width} columns; the model has {n_features} features")
    held = build_shardset(shards.executor, X, y, rest[0] if rest else None, rebalance=False)
    return Validator(held, objective.objective, split_every if isinstance(split_every, int) else 8)


#: ``param_sharding="auto"`` shards models of at least this many parameters (dask config
#: ``dgd.shard-params-min``).
SHARD_PARAMS_MIN = 2**20

#: Values of ``param_sharding``.
SHARDING_CHOICES = ("auto", True, False)


def resolve_sharding(param_sharding: bool | str, *, objective: TrainingObjective, shards: ShardSet, solver: str,
                     mode: str, compression: str | Compressor | None, validator: Validator | None) -> bool:
    """Whether the parameters are sharded over the groups (see :mod:`.sharded.params`).

    ``True`` requires what sharding supports and says what is not: a linear model
    without offsets on sparse (CSR) input, trained synchronously by "gd", "sgd",
    "lbfgs" or "online" (:mod:`.sharded.online`) or asynchronously
    (:mod:`.sharded.async_`), without compression, and early
    stopping (synchronous only) on the validation loss.  ``"auto"`` shards
    such a fit on a cluster with two or more groups when it has at least
    ``dgd.shard-params-min`` (2**20) parameters; ``False`` never."""
    import dask

    if not any(param_sharding is c or (isinstance(c, str) and param_sharding == c) for c in SHARDING_CHOICES):
        raise ParameterError(f"param_sharding must be 'auto', True or False; got {param_sharding!r}")
    if param_sharding is False:
        return False
    reasons = []
    if not isinstance(objective, LinearTraining):
        reasons.append("it applies to linear models")
    elif objective.objective.offset:
        reasons.append("offsets are not supported")
    if not shards.sparse:
        reasons.append("it needs sparse (CSR) X")
    reasons += sharding_refusals(solver, mode)
    if compression is not None:
        reasons.append("compression is not supported")
    if validator is not None and (getattr(validator, "scorer", None) is not None
                                  or not hasattr(validator, "evaluate_sharded")):
        reasons.append("early stopping scores only the validation loss (scoring=None)")
    if param_sharding is True:
        if reasons:
            raise ParameterError("param_sharding=True cannot be used here: " + "; ".join(reasons))
        return True
    return (not reasons and shards.executor.kind == "dask" and shards.n_groups >= 2
            and objective.n_params >= int(dask.config.get("dgd.shard-params-min", SHARD_PARAMS_MIN)))



def _page_notes(shards: Any) -> dict[str, list[Any]]:
    """What the live page shows of a fit besides its records (see
    :class:`~.runtime.publish.Publisher`): the data-skew placement at the start when it
    moved blocks, the dynamic moves of blocks, the steps retried after a worker loss."""
    report = getattr(shards, "skew_report", None) or {}
    return {"skew": [report] if report.get("moved_blocks") else [], "rebalance": report.get("dynamic", []),
            "retry": getattr(shards, "recoveries", [])}

def train(
    objective: LinearObjective | TrainingObjective,
    data: ShardSet | Sequence[Any],
    *,
    penalty: Penalty | None = None,
    solver: str = "auto",
    optimizer: str | FirstOrderOptimizer | LBFGS | None = None,
    learning_rate: float | str = "auto",
    batch_size: int | None = None,
    max_iter: int = 100,
    tol: float = 1e-4,
    mode: str = "sync",
    local_steps: int = 8,
    outer_optimizer: FirstOrderOptimizer | None = None,
    max_staleness: int | None = None,
    staleness_scaling: bool = False,
    max_time: float | None = None,
    on_divergence: str = "auto",
    checkpoint: str | os.PathLike[str] | None = None,
    checkpoint_every: int = 10,
    resume: bool = False,
    fingerprint: Mapping[str, Any] | None = None,
    validator: Validator | None = None,
    validation_data: Sequence[Any] | None = None,
    validation_patience: int | None = None,
    validation_tol: float = 0.0,
    n_iter_no_change: int = 5,
    compression: str | Compressor | None = None,
    split_every: int | str = 8,
    rebalance: bool | str = "auto",
    param_sharding: bool | str = False,
    sparse_params: bool = False,
    random_state: int | tuple[int, ...] | np.random.RandomState | None = None,
    params0: Any = None,
    tol_from_start: bool = False,
    opt_state: Any = None,
    local_init: Sequence[Any] | None = None,
    verbose: int = 0,
    callbacks: Sequence[Callable[[dict[str, Any]], Any]] | None = None,
    progress_total: int | None = None,
    progress_desc: str | None = None,
    client: Client | None = None,
) -> FitResult:
    """Train a model by distributed gradient descent.

    Parameters
    ----------
    objective : LinearObjective or training objective
        What to minimise: a :class:`dask_dgd.losses.LinearObjective` (with ``penalty``),
        or a training objective of another model family (see
        :mod:`dask_dgd._engine.objective` for the protocol).
    data : ShardSet or tuple
        ``(X, y)`` or ``(X, y, sample_weight)`` (NumPy, SciPy sparse, dask arrays or
        DataFrames; sharded here), or shards prepared by an estimator.
    penalty : Penalty or None
        The elastic-net penalty of a ``LinearObjective`` (None: none).
    solver, optimizer, learning_rate, batch_size, max_iter, tol, mode, local_steps,
    outer_optimizer, max_staleness, staleness_scaling, max_time, on_divergence,
    checkpoint, checkpoint_every, compression, split_every, rebalance, random_state,
    n_iter_no_change, verbose, callbacks, client
        As the estimators' parameters of the same names (see
        :class:`dask_dgd.LinearRegression` and the user guide).
    param_sharding : {"auto", True, False}, default=False
        Keep the parameters and the optimizer state split over the workers by feature
        range, each step moving only the coefficients of the columns each group's
        blocks touch (see :func:`resolve_sharding` for what it supports).  The
        estimators default to ``"auto"``.
    sparse_params : bool, default=False
        Return the parameters (and the optimizer state's vectors) as SciPy CSR rows
        of their non-zero entries; with ``param_sharding`` the owners send only
        those, so the driver never holds a dense vector of the model.  An
        ``opt_state`` with such rows may be continued.
    resume : bool
        Continue from ``checkpoint``.
    fingerprint : dict or None
        More that a resumed fit must match (e.g. the estimator's parameters).
    validator : object or None
        Early stopping: scores parameters on held-out data (``evaluate(params)`` ->
        ``{"val_loss", "val_score"}``).
    validation_data : tuple or None
        Held-out rows ``(X, y)`` or ``(X, y, sample_weight)`` of a linear objective, placed
        where the training data is (its cluster, or this process): their mean loss after
        every epoch (every iteration, full batch) goes to the history as ``val_loss``
        (``val_score`` its negative, ``val_time`` the evaluation's seconds), and training
        stops early when it has not improved by ``tol`` for ``n_iter_no_change`` of them
        (a large ``n_iter_no_change`` only watches it).  With sharded parameters each
        held-out group pulls the coefficients its rows touch, as a training step does.
        Exclusive with ``validator``.
    validation_patience : int or None
        Early stopping on the ``val_score`` that the objective's own step records carry
        (held-out data that every step evaluates in its pass, e.g. a matrix
        factorization's held-out ratings): stop when it has not improved by more than
        ``validation_tol`` for this many records that carry one.  None: no such rule.
    tol_from_start : bool, default=False
        ``params0`` is the model's null start (the intercepts alone, not a warm
        start): Newton's and L-BFGS's bound on the gradient is then ``tol`` times the
        start's largest gradient entry when that is below 1
        (:func:`~.stopping.gradient_tol`), so that the target's units do not end the
        fit early; from any other start (a warm one is already near the optimum) ``tol``.
    params0, opt_state : arrays or None
        Where to start (default: zeros; a SciPy sparse row is expanded where the
        parameters are kept: by each owner with ``param_sharding``) and an optimizer
        state to continue.
    local_init : list or None
        Models with local parameters: what each group starts from (None: the model's
        own start).
    progress_total, progress_desc
        The progress bar's total (None: ``max_iter``; the bar counts iterations, or
        epochs) and label (None: the ``"estimator"`` of ``fingerprint``, else
        ``"dask_dgd.train"``), shown with ``verbose >= 1``.  With ``tol > 0``, early
        stopping or ``max_time`` the total is only a limit: the bar shows the count
        "(at most total)" without a percentage or time left.

    Returns
    -------
    FitResult
    """
    if isinstance(objective, LinearObjective):
        objective = LinearTraining(objective, penalty if penalty is not None else Penalty())
    if solver not in SOLVER_CHOICES:
        raise ParameterError(f"solver must be one of {SOLVER_CHOICES}; got {solver!r}")
    if mode not in MODES:
        raise ParameterError(f"mode must be one of {tuple(MODES)}; got {mode!r}")
    if outer_optimizer is not None and not isinstance(outer_optimizer, FirstOrderOptimizer):
        raise ParameterError(f"outer_optimizer must be a first-order optimizer; got {type(outer_optimizer).__name__}")
    shards = _shards_of(data, client, rebalance, max_iter, digest=checkpoint is not None)
    held = None
    if validation_data is not None:
        validator = held = _held_out(validation_data, objective, shards, validator, split_every)
    has_l1 = objective.penalty is not None and objective.penalty.has_l1
    lr_mode = learning_rate_mode(optimizer, learning_rate)
    solver, opt = resolve_solver(solver, optimizer, batch_size=batch_size, mode=mode, compression=compression,
                                 has_l1=has_l1, learning_rate=learning_rate, objective=objective,
                                 early_stopping=validator is not None, n_rows=shards.n_rows,
                                 sparse=shards.sparse and param_sharding is not True)
    traits = SOLVERS[solver]
    path = traits.hessian and hasattr(objective.objective, "column_folds")  # type: ignore[union-attr]  # (linear)
    if traits.hessian and validator is not None:
        raise ParameterError(
            f"early stopping needs solver='gd', 'sgd' or 'lbfgs'; solver={solver!r} stops on its tolerance")
    sharded = resolve_sharding(param_sharding, objective=objective, shards=shards, solver=solver, mode=mode,
                               compression=compression, validator=validator)
    scaling = None
    # proximal gradient on a dense stacked path too: its step in scaled coordinates
    # (ScaledTraining.lipschitz), each column's thresholds in them (ScaledPathPenalty)
    first_order_path = solver == "gd" and isinstance(objective, PathTraining) and not shards.sparse
    if (traits.scaled or first_order_path) and not (sharded or path) and scaled_solve(objective):
        # Newton steps start from the Hessian's sums and move to R factors (curvature.py)
        # when the Hessian is too ill-conditioned (cd.IRLSCD)
        linear = cast("LinearTraining", objective)  # (scaled_solve: a linear model's, or a path's for L-BFGS)
        base = getattr(linear, "base", linear)
        if isinstance(base, LinearTraining):
            ridge = ridge_level(base.objective, base.penalty_spec)
        else:  # a path: L-BFGS adapts to the L2 curvature, proximal gradient's one step must bound it
            ridge = ridge_level(base.objective, Penalty(alpha=max(base.penalty.l2))) if first_order_path else 0.0
        scaling = column_scaling(shards, base.objective, ridge)
        objective = ScaledTraining(linear, scaling, "gram" if traits.hessian else None)
    elif traits.hessian and path:  # each column's steps and stop rule in scaled coordinates (cd_path)
        path_scaling = None
        if scaled_solve(objective):
            full = column_scaling(shards, objective.objective)  # type: ignore[union-attr]  # (a path's)
            path_scaling = ColumnScaling(full.mean, full.scale, objective.objective.n_outputs,  # type: ignore[union-attr]
                                         full.fit_intercept)
        objective = PathHessianTraining(objective, path_scaling)  # type: ignore[arg-type]
    elif traits.hessian:  # (the support rules admit linear models only)
        objective = HessianTraining(objective)  # type: ignore[arg-type]
    if on_divergence == "auto":
        on_divergence = "backoff" if lr_mode == "auto" else "raise"
    if split_every == "auto":
        per_partial = objective.n_params + (objective.hessian_size if traits.hessian else 0)  # type: ignore[union-attr]
        split_every = auto_split_every(shards.n_groups, 8 * per_partial)
    seed = seed_of(random_state)
    compressor = get_compressor(compression)
    if progress_total is None:
        progress_total = int(max_iter)
    if progress_desc is None:
        progress_desc = (fingerprint or {}).get("estimator") or "dask_dgd.train"
    # max_iter is a forecast only when nothing else can end the fit sooner
    capped = tol > 0 or validator is not None or validation_patience is not None or max_time is not None
    monitor = Monitor(verbose=verbose, callbacks=callbacks, total=progress_total, desc=progress_desc, capped=capped)
    balancer = None
    if (rebalance is not False and MODES[mode].rebalances and not traits.own_rounds and not sharded
            and shards.executor.kind == "dask" and not objective.has_local):
        balancer = DynamicBalancer(shards)
    batch_size = batch_size if traits.mini_batch or traits.batch_optional else None
    batching = objective.batching(shards, batch_size, seed)
    compressor = resolve_feedback(compressor, full_batch=batching is None or batching.full_batch,
                                  has_local=objective.has_local, optimizer=opt, own_rounds=traits.own_rounds)
    source: SyncSource
    if sharded:  # (resolve_sharding: a linear model's; split_every: an int by now)
        source = ShardedSource(shards, objective, ParamLayout.split(objective.objective, shards.n_groups),  # type: ignore[arg-type, union-attr]
                               split_every=split_every, seed=seed)  # type: ignore[arg-type]
        shards.collective.unrecoverable = (
            "its parameter shard lived only there (param_sharding); fit again, or resume from a checkpoint")
    else:
        source = SyncSource(shards, objective, split_every=split_every, compressor=compressor,  # type: ignore[arg-type]
                            seed=seed, balancer=balancer)
    cp = None
    if checkpoint is not None:
        # the caller's description of the fit (an estimator's parameters), or the settings
        fp: dict[str, Any] = dict(fingerprint) if fingerprint is not None else {
            "objective": stable_repr(objective), "solver": solver, "mode": mode, "optimizer": stable_repr(opt),
            "compression": stable_repr(compressor)}
        fp["param_sharding"] = bool(sharded)
        fp.update(data_fingerprint(shards))
        fp["blocks"] = [int(r) for r in shards.block_rows] if traits.mini_batch or traits.own_rounds \
            else len(shards.block_rows)
        cp = Checkpointer(checkpoint, checkpoint_every, fp, resume)
    elif resume:
        raise ParameterError("resume=True needs checkpoint=<folder> (where the checkpoint is)")
    early = None if validator is None else EarlyStopping(tol, n_iter_no_change)
    if validation_patience is not None:
        early = EarlyStopping(float(validation_tol), validation_patience)
    stops = StopRules(monitor, int(max_iter), max_time, early)
    ctx = Context(
        shards=shards, objective=objective, source=source, monitor=monitor, batching=batching, compressor=compressor,
        checkpoint=cp, max_iter=int(max_iter), tol=float(tol), learning_rate=lr_mode, on_divergence=on_divergence,
        n_iter_no_change=int(n_iter_no_change), validator=validator,
        keeps_group_memory=compressor is not None or objective.has_local or MODES[mode].keeps_group_memory
        or traits.own_rounds,
        seed=seed, batch_size=batch_size, sparse_params=bool(sparse_params), stops=stops,
        tol_from_start=bool(tol_from_start),
    )
    if params0 is not None and sp.issparse(params0):  # a sparse start: dense only where it is kept
        params0 = sp.csr_matrix(params0, dtype=np.float64).reshape(1, -1)
        if not sharded:
            params0 = params0.toarray().ravel()
    elif params0 is not None:
        params0 = np.asarray(params0, dtype=np.float64)
    elif not sharded:
        params0 = np.zeros(objective.n_params)
    if scaling is not None:
        params0 = scaling.to_scaled(params0)
    if not sharded:  # a state continued from a sparse_params result: dense here
        opt_state = dense_state(opt_state)
    solver_obj = None
    status, message = "error", ""
    try:
        with released_on_error(shards):
            if shards.executor.kind == "dask":  # the live page (dask config dgd.dashboard)
                monitor.publish(getattr(shards.executor, "client", None), estimator=progress_desc, mode=mode,
                                max_iter=int(max_iter), max_staleness=max_staleness, n_groups=shards.n_groups,
                                workers=list(shards.workers), notes=functools.partial(_page_notes, shards))
            source.start()
            if objective.has_local:
                inits = [(None if local_init is None else local_init[g],) for g in range(shards.n_groups)]
                shards.collective.call(group_local_init, objective, per_group=inits)
            if sharded:
                source.setup(params0, opt_state)  # type: ignore[attr-defined]  # (a ShardedSource)
            settings = Settings(
                params0=params0, optimizer=opt, opt_state=opt_state, local_steps=local_steps,
                outer_optimizer=outer_optimizer, max_staleness=max_staleness, staleness_scaling=staleness_scaling,
                precondition=scaled_solve(objective))
            solver_obj = solver_class(solver, mode, sharded, path).build(ctx, settings)
            loop = Loop(ctx, solver_obj, stops, cp)
            solver_obj.save = loop.save
            with driver_blas(shards.executor.kind, shards.workers):  # no BLAS threads spinning beside the workers
                stop = loop.run()
                status, message = ("stopped" if monitor.stop_requested else "done"), stop.message
                params, n_iter, opt_out, state_out = solver_obj.result()
                gap = solver_obj.gap()
                if scaling is not None:
                    params = scaling.to_original(params)
            monitor.finish(n_iter)
            local = None
            if objective.has_local:
                local = shards.collective.call(group_local_export, objective, solver_obj.local_export())
    except BaseException as err:
        status, message = ("stopped" if isinstance(err, KeyboardInterrupt) else "error"), f"{type(err).__name__}: {err}"
        raise
    finally:
        if solver_obj is not None:
            solver_obj.close()
        if held is not None:
            held.shards.release()
        monitor.close(status, message)
    if shards.skew_report is not None:  # where the blocks ended up (they may have moved)
        shards.skew_report["placement"] = list(shards.placement())
    # the records' gradients are those of the coordinates the solver ran in
    coordinates = "original" if scaling is None else ("centred and scaled" if scaling.centred else "scaled")
    if solver_obj.coordinates is not None:
        coordinates = solver_obj.coordinates
    if sparse_params and not sp.issparse(params):
        params = sp.csr_matrix(np.asarray(params, dtype=np.float64).reshape(1, -1))
        state_out = sparse_state(state_out)
    return FitResult(
        params=params if sp.issparse(params) else np.asarray(params, dtype=np.float64), n_iter=int(n_iter),
        converged=stop.converged,
        message=stop.message, n_steps=source.n_steps, records=list(monitor.records), solver=solver, mode=mode,
        optimizer=opt_out, opt_state=state_out, split_every=int(split_every),
        bytes_communicated=communicated(list(monitor.records)), local=local, param_sharding=bool(sharded),
        gap=None if gap is None else float(gap), history_attrs={"coordinates": coordinates},
        gap_bound=None if gap is None else float(getattr(solver_obj, "gtol", tol)),
    )
