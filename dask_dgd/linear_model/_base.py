"""The linear estimators' shell over :func:`dask_dgd.train`: constraints, input shaping,
training, the fitted attributes, predict."""

import math
import numbers
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from .._docstrings import other_parameters
from .._engine.capabilities import resolve_solver
from .._engine.data.blocks import shard_summary
from .._engine.data.holdout import Validator, snapshot, split_validation
from .._engine.data.ingest import build_shardset
from .._engine.runtime.checkpoint import digests_of, stable_repr
from .._engine.runtime.executor import get_executor
from .._engine.train import seed_of, train
from .._history import LazyHistory
from .._params import MODES, TRAINING_CONSTRAINTS, fingerprint_params, signature
from .._validation import ClientParamMixin, Interval, Options, user_stacklevel, validate_params
from ..exceptions import ConvergenceWarning, InputError, ParameterError
from ..losses import Penalty
from ..optim import LBFGS, FirstOrderOptimizer, Schedule, get_optimizer
from ._inference import InferenceMixin
from ._input import check_offset, validate_fit_input, with_offset
from ._predict import coef_matrix, raw_prediction
from ._separation import applies, warn_if_separated

__all__ = ["DGDLinearModel"]

#: Rows per step of ``partial_fit`` when ``batch_size`` is None.
PARTIAL_FIT_BATCH = 256


def _optimizer_like(value):
    """an optimizer name or an optimizer object from dask_dgd.optim"""
    return isinstance(value, (str, FirstOrderOptimizer, LBFGS))


#: Solvers whose every step is a line search on the full objective.
LINE_SEARCH_SOLVERS = ("newton", "cd", "lbfgs")


def non_convergence_message(name, result, mode, max_iter, tol, separated=None):
    """The warning of a fit that stopped short: why, the measured gap against ``tol``,
    and advice true for the solver that ran (``separated``: the exact test's verdict on
    an unpenalised logistic fit, see ``_separation.warn_if_separated``; None where it
    did not decide or does not apply)."""
    detail = f" ({result.message})" if result.message else ""
    unit = "epochs" if result.solver in ("sgd", "online") or mode != "sync" else "iterations"
    gap = ""
    if result.gap is not None:
        where = result.history_attrs.get("coordinates", "original")
        cols = "standardised columns" if where != "original" else "the features' units"
        bound = tol if result.gap_bound is None else result.gap_bound
        against = f"tol={tol:g}" if bound == tol else \
            f"{bound:.3g} (tol={tol:g} times the start's largest entry, {bound / tol:.3g})"
        gap = f"; the largest gradient entry is {result.gap:.3g} ({cols}) against {against}"
    if result.solver in ("newton", "cd") and separated:
        advice = ("the features separate the classes (see the warning above): the estimate does not exist, and "
                  "more iterations only grow the coefficients; pass alpha > 0")
    elif result.solver in ("newton", "cd") and separated is False:
        advice = ("increase max_iter; the classes are not separated (tested exactly), so Newton steps that stall "
                  "point to a singular problem (collinear columns): a small penalty (alpha > 0) fixes it")
    elif result.solver in ("newton", "cd"):
        advice = ("increase max_iter; Newton steps that stall point to a singular or separable problem "
                  "(collinear columns, classes a hyperplane separates): a small penalty (alpha > 0) fixes it")
    elif result.solver == "lbfgs":
        advice = ("increase max_iter, or use solver='newton' (models of up to dgd.cd-max-params parameters, "
                  "multinomial ones too)")
    else:
        advice = "increase max_iter, loosen tol, or scale the features"
    return (f"{name} did not converge in max_iter={max_iter} {unit} (solver={result.solver!r}, mode={mode!r})"
            f"{detail}{gap}; {advice}")



def linear_signature(*family, alpha, after_intercept=()):
    """The ``__init__`` signature of a gradient-trained linear model: the family's own
    parameters (``(name, default)``), the penalty (``alpha``'s default is the
    family's), the solver and the training parameters (:mod:`dask_dgd._params`)."""
    return signature(
        *family, ("alpha", alpha), "l1_ratio", "fit_intercept", *after_intercept, "solver", "optimizer",
        "learning_rate", "batch_size", "max_iter", "tol", *MODES, "early_stopping", "validation_fraction",
        "n_iter_no_change", "scoring", "rebalance", "param_sharding", "sparse_coef", "compression", "split_every",
        "random_state", "warm_start", "verbose", "callbacks", "client",
    )

#: The "Other Parameters" of a linear estimator's docstring: those of :func:`linear_signature`
#: that its Parameters section does not document, all described by :class:`DGDLinearModel`.
TRAINING_PARAMETERS = ("The training parameters every linear estimator shares: see\n"
                       ":class:`~dask_dgd.linear_model.DGDLinearModel`.")
linear_docstring = other_parameters(TRAINING_PARAMETERS)


class DGDLinearModel(LazyHistory, InferenceMixin, ClientParamMixin, BaseEstimator):
    """Base class of the generalised linear models trained by distributed gradient descent.

    Its subclasses (:class:`~dask_dgd.LinearRegression`, :class:`~dask_dgd.LogisticRegression`,
    :class:`~dask_dgd.PoissonRegressor`) share these training parameters.

    Parameters
    ----------
    l1_ratio : float in [0, 1], default=0.0
        Share of the L1 term in the elastic-net penalty (1 is the lasso).  The intercept
        is never penalised.  L1 needs "cd" (coordinate descent on the distributed
        Hessian, what "auto" picks for single-output models up to 1,024 parameters) or a
        first-order solver with a proximal step ("gd" or "sgd").
    fit_intercept : bool, default=True
        Whether to fit an intercept.
    solver : {"auto", "lbfgs", "newton", "cd", "gd", "sgd", "online"}, default="auto"
        "newton": Newton's method (IRLS) with the exact Hessian, tree-reduced in the
        gradient's pass (the observed curvature where it is not negative, Fisher's
        elsewhere), a stable solve on the driver and a backtracking line search;
        regression, binary and multinomial models, not L1.  When the Hessian's
        condition number passes 1e8 (near-collinear columns), the steps are solved from
        R factors of the weighted design merged up the block tree instead (TSQR: the
        design's condition, not its square).  Once the largest gradient entry is at most
        ``tol`` it takes up to 5 more steps while they still lower the objective above
        its rounding level.  "cd": the same passes, with coordinate descent on the
        penalised quadratic model on the driver, for L1 and elastic-net penalties (glum's
        "irls-cd"; a multinomial's rows of class coefficients shifted to their penalty's
        minimum after each, glmnet's step); it stops when the largest entry of the
        minimum-norm subgradient is at most ``tol``.  "lbfgs": limited-memory BFGS on the full distributed loss and
        gradient (a line search, every trial one distributed step): the cheapest pass,
        for wide models and multinomial; on ill-conditioned data a gradient within
        ``tol`` can leave the coefficients far from the optimum.  All three solve in
        scaled coordinates (columns centred and scaled, a change of variables that keeps
        the optimum and the penalty's meaning; ``coef_`` in the data's units), so
        ``tol`` is judged on the gradient of standardised columns.  "gd": full-batch
        steps of a first-order ``optimizer`` (proximal gradient for L1).  "sgd":
        mini-batch steps of ``batch_size`` rows.  "online": each worker's group runs
        compiled per-row SGD over its rows (one pass a round; with ``batch_size``,
        ``local_steps`` micro-batch updates on its shares of the mini-batches), each row
        O(its non-zeros), and the groups' models are averaged every round (Vowpal
        Wabbit's recipe); ``optimizer`` "normalized" (the default, Vowpal Wabbit's
        normalized adaptive rule, invariant to the columns' units), "adagrad" or "sgd"
        (with ``learning_rate="auto"`` and an L2 penalty: the safe step, then Bottou's
        ``1 / (alpha t)`` decay, :class:`~dask_dgd.optim.InverseTime`); no L1, synchronous mode only,
        losses squared error, logistic, multinomial and Poisson.  "auto" picks "newton" for
        models of up to 1,024 parameters (dask config
        ``dgd.cd-max-params``) whose Hessian costs at most 1e9 rows x parameters^2 a pass
        (``dgd.newton-auto-work``), else "lbfgs"; for an L1 penalty "cd" up to 1,024
        parameters, else "gd"; no early stopping with "newton" or "cd"; "gd" also for a
        first-order ``optimizer``, compression or the local/async modes, and "sgd" when
        ``batch_size`` is set.
    optimizer : str or optimizer object, default=None
        For "gd"/"sgd": "sgd" (plain gradient descent, the default), "adam", "adamw",
        "rmsprop", "adagrad", or an object from :mod:`dask_dgd.optim` (e.g.
        ``optim.sgd(momentum=0.9, nesterov=True)``), whose own learning rate is used unless
        ``learning_rate`` is a number or schedule.  An :class:`~dask_dgd.optim.LBFGS` object
        sets L-BFGS's memory and line-search length.
    learning_rate : "auto", float or Schedule, default="auto"
        "auto" derives the step from a Lipschitz estimate L of the gradient, taken from
        an even sample of rows: 1/L for SGD, and for adaptive optimizers the largest
        coordinate move of that first 1/L step.  A NaN/inf objective restores the last
        good parameters and halves it; so does any increase of the full-batch objective
        for optimizers whose step always points downhill (SGD and RMSprop without
        momentum, Adagrad).
    batch_size : int, default=None
        Rows per mini-batch step (solver "sgd"); each block contributes its share, drawn
        from a generator seeded by ``random_state``, the step and the block index.
    max_iter : int, default=100
        Iterations for "lbfgs", "newton" and "gd", epochs (passes over the data) for
        "sgd", "online" and the local/async modes.
    tol : float, default=1e-4
        "lbfgs"/"newton"/"gd": stop when the largest entry of the (proximal) gradient is
        at most ``tol`` (for "lbfgs"/"newton"/"cd" the gradient of standardised columns,
        the coordinates they solve in).  "sgd" and the local/async modes: stop when the epoch's mean
        objective has not improved by more than ``tol`` for ``n_iter_no_change`` epochs.
    mode : {"sync", "local", "async"}, default="sync"
        How the groups (the blocks each worker holds) train together.  "sync": every
        step waits for all groups' gradients (any solver).  "local": local SGD, each
        group takes ``local_steps`` steps of its own optimizer on its own rows, then the
        parameters are averaged (fewer rounds of communication).  "async": a parameter
        server applies each group's gradient as it arrives (no waiting for
        stragglers).  "local" and "async" take first-order steps ("sgd" with
        ``batch_size``, else "gd").  See the user guide's "Training modes".
    local_steps : int, default=8
        mode="local": steps each group takes between averagings.
    outer_optimizer : optimizer object, default=None
        mode="local": applied to the averaged delta (parameters before the round minus
        their average after it) instead of taking the average, e.g.
        ``optim.sgd(learning_rate=1.0, momentum=0.9)`` for server momentum.
    max_staleness : int or None, default=None
        mode="async": how many steps a group may run ahead of the slowest one (stale
        synchronous parallel; 0 is lock-step).  None: fully asynchronous.
    staleness_scaling : bool, default=False
        mode="async": divide each update by 1 + its delay (server updates applied
        since the gradient's parameters were sent).
    max_time : float or None, default=None
        Stop after this many seconds of training (any mode and solver); the model is
        then the last parameters reached, with a ConvergenceWarning.
    on_divergence : {"auto", "backoff", "raise"}, default="auto"
        What a NaN/inf objective, or an exploding one (full batch: a million times the
        initial one), does in first-order training: "backoff" restores the last good
        parameters and halves the learning rate (30 halvings in a row raise
        ``DivergenceError``); "raise" raises ``DivergenceError`` at once, naming the
        step, the loss and the remedy.  "auto": "backoff" with ``learning_rate="auto"``,
        "raise" when you chose the learning rate (or the optimizer object's).
    checkpoint : str, path or None, default=None
        A folder where training writes ``checkpoint.npz`` every ``checkpoint_every``
        steps and at the end, in dask_dgd's safe format (NumPy ``.npz`` + JSON,
        checksummed, no pickle, written atomically): the solver's state (parameters,
        optimizer and its state or L-BFGS's pairs, counters), the seed, the history and
        the groups' memory (compression residuals, local SGD states).
        ``fit(X, y, resume=True)`` continues from it: exactly in the "sync" and "local"
        modes, to the same optimum in mode "async".
    checkpoint_every : int, default=10
        Steps (updates, rounds, server updates) between checkpoints.
    early_stopping : bool, default=False
        Hold out ``validation_fraction`` of the rows (drawn in each block where it
        lives, seeded by ``random_state``) and stop synchronous "gd"/"sgd" training when
        the validation score has not improved by more than ``tol`` for
        ``n_iter_no_change`` epochs (every iteration is an epoch for "gd").  The score
        is in ``history_`` (``val_loss``, ``val_score``) and ``validation_score_``; the
        model is the last parameters, as in scikit-learn's ``SGDClassifier``.
    validation_fraction : float in (0, 1), default=0.1
        Share of the rows held out for early stopping.
    n_iter_no_change : int, default=5
        Epochs without improvement before stopping: of the validation score with
        ``early_stopping``, else of the epoch's mean objective ("sgd").
    scoring : None, str or callable, default=None
        The validation score of early stopping.  None: minus the mean validation loss
        (computed where the rows live).  A scikit-learn scorer name (e.g.
        ``"accuracy"``, ``"r2"``, ``"neg_log_loss"``) or a callable
        ``scorer(estimator, X, y)`` (higher is better): the validation rows are
        gathered to the driver once and a copy of the estimator with the current
        coefficients is scored each epoch.
    rebalance : "auto", bool, default="auto"
        Data skew handling for dask input on a cluster (see the user guide's "Data
        skew").  "auto": blocks stay where Dask put them unless a worker would be more
        than 10% over its share; if that cannot bring max/mean worker load to 1.1 and
        moving the data pays off over ``max_iter`` passes, the data is rechunked into
        equal-cost blocks and placed again; during synchronous training, blocks move
        toward faster workers.  True: always rechunk and place.  False: leave every
        block where it is.  What was measured and done is in ``skew_report_``.
    param_sharding : "auto", bool, default="auto"
        Keep the coefficients and the optimizer state split over the workers by
        feature range (wide sparse models, e.g. hashed features): each step a worker
        pulls only the coefficients of the columns its blocks touch and sends each
        owner its part of the gradient; the driver handles only scalars.  The same
        coefficients as without (bit for bit; "lbfgs": to rounding).  "auto": on a
        cluster, for CSR input with at least 2**20 parameters (dask config
        ``dgd.shard-params-min``) trained by "gd", "sgd", "lbfgs" or "online"
        (each group's passes on a compact copy of its columns) synchronously, or
        by "gd" or "sgd" with ``mode="async"`` (the owners are then the parameter
        server), without compression (early stopping: on the validation loss only).  True:
        always (an error names what is not supported); False: never.  See the user
        guide's "Wide models".
    sparse_coef : bool, default=False
        Store ``coef_`` as a SciPy CSR matrix of shape ``(n_outputs, n_features)``, as
        scikit-learn's ``sparsify()`` does: the storage of a wide hashed or L1 model's
        non-zero coefficients only.  With sharded parameters the owners send the
        driver only their non-zero coefficients (and optimizer state), so the
        driver never holds a dense vector of the model.  ``predict`` works on it
        as is; :meth:`densify` and :meth:`sparsify` convert a fitted model.
    compression : None, str or compressor object, default=None
        Compress what each block sends up the reduction ("gd"/"sgd" steps; local SGD's
        round changes and the asynchronous pushes too): "fp16", "bf16", "topk:RATIO",
        "randomk:RATIO", "qsgd:LEVELS", "sign", "powersgd:RANK" (multinomial models),
        with options such as "+down" (the parameters sent down as compressed changes,
        synchronous steps), or an object from :mod:`dask_dgd.compression`.  Top-k keeps
        an EF21 estimate per block (full batch; the step is not shortened), sign and
        PowerSGD an error-feedback residual, on the block's worker: the result does not
        depend on which worker holds which block.  The loss travels exactly; the bytes
        are in ``history_`` and ``bytes_communicated_``.
    split_every : int or "auto", default=8
        Fan-in of the tree that sums the per-block gradients.  Changing it changes the
        result only at floating-point rounding level.  "auto": 8, or fewer when the
        groups' gradients together exceed 16 MiB (see the user guide's "Communication").
    random_state : int, RandomState or None, default=None
        Seed of the mini-batch sampling (and of the compression draws).
    warm_start : bool, default=False
        Start ``fit`` from the previous ``coef_`` and ``intercept_``.
    verbose : int, default=0
        1 shows a progress bar, 2 also logs one line per step (logger ``dask_dgd``).
    callbacks : list of callables or None, default=None
        Each is called with every step record (a dict, the future row of ``history_``);
        one that returns ``True`` stops the fit after that step.  See
        :mod:`dask_dgd.callbacks`.
    client : distributed.Client or None, default=None
        The cluster to train on.  None: the default client if one exists; otherwise an
        in-memory input under 64 MiB is fitted in process, and anything else on an
        embedded LocalCluster started once (and logged).
    """

    _parameter_constraints = {
        **TRAINING_CONSTRAINTS,
        "alpha": [Interval(numbers.Real, 0, None, "left")],
        "l1_ratio": [Interval(numbers.Real, 0, 1, "both")],
        "fit_intercept": [bool],
        "solver": [Options("auto", "lbfgs", "newton", "cd", "gd", "sgd", "online")],
        "optimizer": [None, _optimizer_like],
        "learning_rate": [Options("auto"), Interval(numbers.Real, 0, None, "neither"), Schedule],
        "batch_size": [None, Interval(numbers.Integral, 1, None, "left")],
        "early_stopping": [bool],
        "validation_fraction": [Interval(numbers.Real, 0, 1, "neither")],
        "n_iter_no_change": [Interval(numbers.Integral, 1, None, "left")],
        "scoring": [None, str, callable],
        "rebalance": [Options("auto"), bool],
        "param_sharding": [Options("auto"), bool],
        "sparse_coef": [bool],
        "random_state": [None, Interval(numbers.Integral, 0, None, "left"), np.random.RandomState],
        "warm_start": [bool],
    }

    def _is_classifier(self):
        return False

    def _validate_params(self):
        validate_params(self)

    def _validate_fit_input(self, X, y, sample_weight, reset=True):
        return validate_fit_input(self, X, y, sample_weight, reset)

    # --------------------------------------------------------------------- fit
    def _solver(self):
        return resolve_solver(self.solver, self.optimizer, batch_size=self.batch_size, mode=self.mode,
                              compression=self.compression, has_l1=self.alpha > 0 and self.l1_ratio > 0,
                              learning_rate=self.learning_rate)[0]

    def _prepare(self, X, y, sample_weight, reset=True, split=False, offset=None, n_offsets=None):
        """Validated shards, the summaries of their data, and those of the held-out rows.

        ``split`` (``fit`` with ``early_stopping``): the validation rows are held out
        first (``shards.validation``), so the summaries, and all that is derived from
        them (the starting intercept, class weights), are of the training rows only.

        ``offset`` travels as the last columns of X's blocks (``n_offsets`` of them
        when the model's outputs are known, see :func:`~._input.check_offset`); the
        objective is then built with ``offset=True``.
        """
        X, y, sample_weight = self._validate_fit_input(X, y, sample_weight, reset=reset)
        X = with_offset(X, check_offset(offset, X, n_offsets))
        classifier = self._is_classifier()
        shards = build_shardset(get_executor(self.client, X), X, y, sample_weight, y_numeric=not classifier,
                                rebalance=self.rebalance, passes=self.max_iter)
        self.skew_report_ = shards.skew_report
        if shards.n_rows == 0:
            shards.map_gather(shard_summary, classifier, name="dgd-summary")  # bad blocks first
            raise InputError(
                f"Found array with 0 sample(s) (shape=(0, {self.n_features_in_})) while a "
                f"minimum of 1 is required by {type(self).__name__}"
            )
        val_summaries = []
        if split and self.early_stopping:
            solver = self._solver()
            if solver not in ("gd", "sgd") or self.mode != "sync":
                raise ParameterError(
                    f"early_stopping needs synchronous first-order training (solver='gd' or 'sgd', "
                    f"mode='sync'); got solver={solver!r}, mode={self.mode!r}"
                )
            shards, val = split_validation(shards, (*seed_of(self.random_state), 1), float(self.validation_fraction))
            shards.validation = val
            val_summaries = val.map_gather(shard_summary, classifier, False, offset is not None, name="dgd-summary")
        # a checkpointed fit's data are fingerprinted block by block in the same pass
        summaries = shards.map_gather(shard_summary, classifier, self.checkpoint is not None, offset is not None,
                                      name="dgd-summary")
        totals = {"weight_sum": float(sum(s["weight_sum"] for s in summaries))}
        if self.checkpoint is not None:
            totals["data"] = digests_of(summaries)
        if classifier:
            counts = {}
            for s in summaries:
                for label, n in zip(s.get("labels", ()), s.get("label_counts", ())):
                    counts[label] = counts.get(label, 0) + int(n)
            totals["label_counts"] = repr(sorted(counts.items(), key=repr))
        else:
            totals["weighted_target_sum"] = float(sum(s["wy_sum"] for s in summaries))
        shards.totals = totals
        shards.x_abs_max = max((float(s["x_abs_max"]) for s in summaries), default=0.0)
        if totals["weight_sum"] <= 0:
            raise InputError(
                "Sample weights must contain at least one non-zero number: the total "
                "sample weight is zero"
            )
        return shards, summaries, val_summaries

    def _initial_params(self, objective, baseline):
        if self.warm_start and hasattr(self, "coef_"):
            coef, intercept = coef_matrix(self, sparse=True)
            if coef.shape == (objective.n_features, objective.n_outputs):
                return self._packed(objective, coef, intercept)
        if not (self.fit_intercept and baseline is not None):
            return None  # zeros
        # the intercepts alone, as a sparse row: a wide model's start is not d floats on
        # the driver (train expands it where the parameters are kept)
        k = objective.n_outputs
        values = np.broadcast_to(np.asarray(baseline, dtype=np.float64), (k,))
        return sp.csr_matrix((values, (np.zeros(k, dtype=np.int64), np.arange(objective.n_params - k,
                                                                               objective.n_params))),
                             shape=(1, objective.n_params))

    def _fingerprint(self):
        """What a resumed fit must share with the checkpoint's: the estimator, the
        parameters that shape the trajectory, the classes."""
        params = {
            k: ("RandomState" if isinstance(v, np.random.RandomState) else stable_repr(v))
            for k, v in sorted(fingerprint_params(self.get_params(deep=False)).items())
        }
        return {"estimator": type(self).__name__, **{f"parameter {k}": v for k, v in params.items()},
                "classes": repr(getattr(self, "classes_", None))}

    def _validator(self, val_shards, objective, split_every):
        scorer, decode = self.scoring, None
        if scorer is not None and objective.offset:
            raise ParameterError(
                f"scoring={self.scoring!r} scores the estimator on the validation rows through its "
                "predict(X), which cannot take their offset; use scoring=None (the validation loss, "
                "computed with the offset) for early stopping with an offset"
            )
        if isinstance(scorer, str):
            from sklearn.metrics import get_scorer

            try:
                scorer = get_scorer(scorer)
            except ValueError as err:
                raise ParameterError(f"scoring={self.scoring!r} is not a scikit-learn scorer name: {err}") from err
        if scorer is not None and hasattr(self, "classes_"):
            classes = self.classes_

            def decode(codes):
                return classes[codes.astype(np.int64)]

        return Validator(
            val_shards, objective, split_every, scorer=scorer,
            make_estimator=lambda params: snapshot(self, objective, params), decode_y=decode,
            columns=getattr(self, "feature_names_in_", None),
        )

    def _training_kwargs(self):
        return dict(
            solver=self.solver, optimizer=self.optimizer, learning_rate=self.learning_rate,
            batch_size=self.batch_size, max_iter=self.max_iter, tol=self.tol, mode=self.mode,
            local_steps=self.local_steps, outer_optimizer=self.outer_optimizer, max_staleness=self.max_staleness,
            staleness_scaling=self.staleness_scaling, max_time=self.max_time, on_divergence=self.on_divergence,
            checkpoint=self.checkpoint, checkpoint_every=self.checkpoint_every, n_iter_no_change=self.n_iter_no_change,
            compression=self.compression, split_every=self.split_every, rebalance=self.rebalance,
            param_sharding=self.param_sharding, sparse_params=self.sparse_coef, random_state=self.random_state,
            verbose=self.verbose,
            callbacks=self.callbacks,
        )

    def _fit(self, shards, objective, baseline, resume=False, params0=None, alpha=None):
        """Train on prepared shards and store the result (from ``params0`` if given,
        else from the warm start or the baseline), with the penalty ``alpha`` (None:
        the ``alpha`` parameter)."""
        if not isinstance(resume, bool):
            raise ParameterError(f"resume must be True or False; got {resume!r}")
        if self.checkpoint is not None and self.early_stopping and not isinstance(self.random_state, numbers.Integral):
            raise ParameterError(
                "early_stopping with a checkpoint needs an int random_state: the validation "
                "split must be the same when the fit resumes"
            )
        val = shards.validation
        try:
            validator = None
            if val is not None:
                split_every = 8 if self.split_every == "auto" else self.split_every
                validator = self._validator(val, objective, split_every)
            result = train(
                objective, shards,
                penalty=Penalty(alpha=float(self.alpha if alpha is None else alpha), l1_ratio=float(self.l1_ratio)),
                **self._training_kwargs(), resume=resume, validator=validator,
                # the full fingerprint (every parameter's repr) only matters to a checkpoint
                fingerprint=self._fingerprint() if self.checkpoint is not None else {"estimator": type(self).__name__},
                params0=self._initial_params(objective, baseline) if params0 is None else params0,
                tol_from_start=params0 is None and not (self.warm_start and hasattr(self, "coef_")),
                client=self.client,
            )
        finally:
            if val is not None:
                val.release()
        self._store(result, objective)
        if val is not None:
            scores = self.history_["val_score"].dropna()
            self.validation_score_ = float(scores.iloc[-1]) if len(scores) else None
            self.best_validation_score_ = float(scores.max()) if len(scores) else None
        # the line-search solvers record their trial points: only a first-order fit's
        # objective can end above its start
        rise = None if result.solver in LINE_SEARCH_SOLVERS else result.objective_rise()
        # an unpenalised logistic fit of separated classes has no estimate: say so, as R's
        # glm (first: the advice of a fit that stopped short depends on it)
        alpha = float(self.alpha if alpha is None else alpha)
        self.separated_ = warn_if_separated(self, shards, objective, result.params, alpha)
        if rise is not None:
            warnings.warn(
                f"{type(self).__name__}: the objective rose from {rise[0]:.6g} at the start to {rise[1]:.6g} "
                f"(solver={result.solver!r}, mode={self.mode!r}); the learning rate is too large for these data: "
                "lower learning_rate or scale the features", ConvergenceWarning, stacklevel=user_stacklevel(),
            )
        elif not result.converged:
            warnings.warn(non_convergence_message(type(self).__name__, result, self.mode, self.max_iter, self.tol,
                                                  self.separated_ if applies(objective, alpha) else None),
                          ConvergenceWarning, stacklevel=user_stacklevel())
        return result

    def _partial_starts(self):
        """Whether this ``partial_fit`` call is the first on an unfitted estimator; the
        first one validates the parameters (later calls keep the first one's)."""
        first = not hasattr(self, "coef_")
        if first:
            self._validate_params()
        return first

    def _partial(self, shards, objective, baseline, alpha=None):
        """One epoch of mini-batch steps, continuing the optimizer of earlier calls.

        ``alpha``: the penalty (None: the ``alpha`` parameter).  The first call on an
        unfitted estimator starts from the baseline intercept with a fresh optimizer
        (``learning_rate="auto"`` derived from this data); after ``fit`` with a
        full-batch solver it starts from the fitted coefficients.
        """
        if self.solver == "lbfgs" or (self.optimizer is not None and get_optimizer(self.optimizer).full_batch_only):
            raise ParameterError(
                "partial_fit takes mini-batch steps and needs a first-order optimizer; "
                "L-BFGS (solver='lbfgs') is full-batch only"
            )
        fitted = hasattr(self, "coef_")
        state = getattr(self, "_opt_state_", None) if fitted else None
        if fitted:
            coef, intercept = coef_matrix(self, sparse=True)
            params0 = self._packed(objective, coef, intercept)
        else:
            params0 = self._initial_params(objective, baseline)
        self._partial_calls = getattr(self, "_partial_calls", 0) + 1
        seed = (*seed_of(self.random_state), self._partial_calls)
        kw = self._training_kwargs()
        kw.update(solver="sgd", mode="sync", max_iter=1, batch_size=self.batch_size or PARTIAL_FIT_BATCH,
                  random_state=seed, checkpoint=None, compression=None)
        if state is not None:  # the optimizer goes on with its rate and state
            kw.update(optimizer=self._optimizer_, learning_rate="auto")
        alpha = float(self.alpha if alpha is None else alpha)
        result = train(objective, shards, penalty=Penalty(alpha=alpha, l1_ratio=float(self.l1_ratio)),
                       **kw, params0=params0, opt_state=state, client=self.client)
        self._store(result, objective)

    def _packed(self, objective, coef, intercept):
        """The parameter vector of ``coef`` (n_features x n_outputs) and ``intercept``;
        a sparse ``coef`` gives a sparse row (dense only where the parameters are kept)."""
        intercept = intercept if self.fit_intercept else np.zeros_like(intercept)
        if not sp.issparse(coef):
            return objective.pack(coef, intercept if self.fit_intercept else None)
        rows = sp.vstack([sp.csr_matrix(coef), sp.csr_matrix(intercept.reshape(1, -1))] if self.fit_intercept
                         else [sp.csr_matrix(coef)], format="csr")
        return sp.csr_matrix(rows.reshape(1, -1))

    def _store(self, result, objective):
        params = result.params
        if sp.issparse(params):  # sparse_coef: the non-zero entries only
            k = objective.n_outputs
            rows = sp.csr_matrix(params).reshape(objective.n_params // k, k).tocsr()
            coef = rows[:objective.n_features]
            intercept = (rows[objective.n_features:].toarray().ravel() if objective.fit_intercept
                         else np.zeros(k))
            self.coef_ = sp.csr_matrix(coef.T)
            self.intercept_ = float(intercept[0]) if k == 1 else intercept
        else:
            coef, intercept = objective.unpack(params)
            self._set_coef(coef, intercept)
        self.n_iter_ = result.n_iter
        self.converged_ = bool(result.converged)
        self.separated_ = False  # (fit tests it after storing)
        # history_ is built when first asked for (__getattr__), unless it already is
        self.__dict__.pop("history_", None)
        self._history_records = (result.records, result.history_attrs)
        if "history" in vars(result):  # (a cached_property)
            del self._history_records
            self.history_ = result.history
        self.loss_curve_ = [math.nan if r.get("loss") is None else float(r["loss"]) for r in result.records]
        self._optimizer_ = result.optimizer
        self._opt_state_ = result.opt_state
        self.solver_ = result.solver
        self.split_every_ = result.split_every
        self.bytes_communicated_ = result.bytes_communicated

    def sparsify(self):
        """Store ``coef_`` as a SciPy CSR matrix of shape ``(n_outputs, n_features)``
        (scikit-learn's ``sparsify``); returns the estimator."""
        check_is_fitted(self, "coef_")
        coef, _ = coef_matrix(self, sparse=True)
        self.coef_ = sp.csr_matrix(coef.T)
        return self

    def densify(self):
        """Store ``coef_`` as a dense array again (scikit-learn's ``densify``); returns
        the estimator."""
        check_is_fitted(self, "coef_")
        coef, _ = coef_matrix(self)
        self.coef_ = coef[:, 0].copy() if coef.shape[1] == 1 else coef.T.copy()
        return self

    def _set_coef(self, coef, intercept):
        self.coef_ = coef[:, 0].copy() if coef.shape[1] == 1 else coef.T.copy()
        self.intercept_ = float(intercept[0]) if intercept.shape[0] == 1 else intercept.copy()

    def _raw(self, X, squeeze=True, post=None, post_args=(), out=None, offset=None):
        """Linear predictor (plus ``offset``), then ``post(raw, *post_args)``, block by
        block (see :func:`~._predict.raw_prediction`)."""
        return raw_prediction(self, X, squeeze, post, post_args, out, offset=offset)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags
