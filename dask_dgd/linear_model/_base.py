"""Shared machinery of the linear estimators: validation, shards, solver choice, predict.

Estimators are thin: they check their parameters, hand the data to the engine as shards,
pick the objective, penalty and optimizer, run a solver and store the fitted attributes.
"""

import numbers
import os
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils.validation import (
    check_array,
    check_consistent_length,
    check_is_fitted,
    column_or_1d,
    validate_data,
)

from .._backend import asarray_like, get_namespace, is_sparse
from .._engine.checkpoint import Checkpointer, data_fingerprint, stable_repr
from .._engine.validation import Validator, snapshot, split_validation
from .._engine.cluster import build_shardset, get_executor, is_dask_collection
from .._engine.monitor import Monitor
from .._engine.shards import check_chunking, released_on_error, shard_summary
from .._engine.async_ import run_async
from .._engine.cluster import auto_split_every
from .._engine.monitor import communicated
from ..compression import Compressor, PowerSGD, get_compressor
from .._engine.local import run_local
from .._engine.sync import Evaluator, run_first_order, run_lbfgs, run_newton
from .._validation import ClientParamMixin, Interval, Options, callbacks_like, client_is_a_client, validate_params
from ..exceptions import ConvergenceWarning, InputError, ParameterError
from ..losses import Penalty
from ..optim import LBFGS, SGD, FirstOrderOptimizer, Schedule, get_optimizer

__all__ = ["DGDLinearModel", "SHARED_PARAMS_DOC"]

#: Rows per step of ``partial_fit`` when ``batch_size`` is None.
PARTIAL_FIT_BATCH = 256

SHARED_PARAMS_DOC = """    l1_ratio : float in [0, 1], default=0.0
        Share of the L1 term in the elastic-net penalty (1 is the lasso).  The intercept
        is never penalised.  L1 is handled by a proximal step, so it needs a first-order
        solver ("gd" or "sgd"; "auto" picks "gd").
    fit_intercept : bool, default=True
        Whether to fit an intercept.
    solver : {"auto", "lbfgs", "newton", "gd", "sgd"}, default="auto"
        "lbfgs": quasi-Newton on the full distributed loss and gradient (SciPy's
        L-BFGS-B with a line search), the exact optimum of any smooth convex problem.
        "newton": Newton steps on the full distributed gradient with the Hessian of an
        even row sample (32,768 rows, dask config ``dgd.newton-sample-rows``) gathered
        to the driver, started from the sample's optimum; fewest passes over the data
        for the single-output models with up to a few thousand parameters (not for
        multinomial or L1).  "gd": full-batch steps of a first-order ``optimizer``.  "sgd":
        mini-batch steps of ``batch_size`` rows.  "auto" picks "lbfgs", or "gd" for an L1
        penalty or a first-order ``optimizer``, or "sgd" when ``batch_size`` is set.
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
        Iterations for "lbfgs" and "gd", epochs (passes over the data) for "sgd".
    tol : float, default=1e-4
        "lbfgs"/"gd": stop when the largest entry of the (proximal) gradient is at most
        ``tol``.  "sgd": stop when the epoch's mean objective has not improved by more
        than ``tol`` for 5 epochs.
    mode : {"sync", "local", "async"}, default="sync"
        How the groups (the blocks each worker holds) train together.  "sync": every
        step waits for all groups' gradients (any solver).  "local": local SGD, each
        group takes ``local_steps`` steps of its own optimizer on its own rows, then the
        parameters are averaged (fewer rounds of communication).  "async": a parameter
        server applies each group's gradient as it arrives (no waiting for
        stragglers).  "local" and "async" take first-order steps ("sgd" with
        ``batch_size``, else "gd"); ``max_iter`` counts epochs in every mode.  See the
        user guide's "Training modes" for when each wins.
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
        What a NaN/inf objective, or an exploding one (full batch, synchronous: a
        million times the initial one), does in first-order training: "backoff" restores the last good parameters and
        halves the learning rate (30 halvings in a row raise ``DivergenceError``);
        "raise" raises ``DivergenceError`` at once, naming the step, the loss and the
        remedy.  "auto": "backoff" with ``learning_rate="auto"``, "raise" when you
        chose the learning rate (or the optimizer object's).
    checkpoint : str, path or None, default=None
        A folder where "gd"/"sgd" training writes ``checkpoint.npz`` every
        ``checkpoint_every`` steps and at the end: parameters, optimizer and its state,
        counters, seed, history and compression residuals (mode "async": the parameter
        server's state), in dask_dgd's safe format (NumPy ``.npz`` + JSON, checksummed,
        no pickle, written atomically).  ``fit(X, y, resume=True)`` continues from it:
        exactly in mode "sync", to the same optimum in mode "async".  Not for
        "lbfgs"/"newton" or mode "local".
    checkpoint_every : int, default=10
        Steps (updates) between checkpoints.
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
        ``scorer(estimator, X, y)`` (higher is better; e.g. from
        ``sklearn.metrics.make_scorer`` for a custom metric): the validation rows are
        gathered to the driver once and a copy of the estimator with the current
        coefficients is scored each epoch.
    rebalance : "auto", bool, default="auto"
        Data skew handling for dask input on a cluster (see the user guide's "Data
        skew").  "auto": blocks stay where Dask put them unless a worker would be more
        than 10% over its share; if that cannot bring max/mean worker load to 1.1 (a
        block larger than a share, or half the blocks tiny or empty) and moving the data
        pays off over ``max_iter`` passes, the data is rechunked into equal-cost blocks
        and placed again; during synchronous training, blocks move toward faster
        workers.  True: always rechunk and place.  False: leave every block where it
        is.  What was measured and done is in ``skew_report_``.
    compression : None, str or compressor object, default=None
        Compress what each group sends up the reduction (synchronous "gd"/"sgd" steps):
        "fp16", "bf16", "topk:RATIO", "randomk:RATIO", "qsgd:LEVELS", "sign",
        "powersgd:RANK" (multinomial models), or an object from
        :mod:`dask_dgd.compression`.  The biased ones (topk, sign, powersgd) keep an
        error-feedback residual on each group's worker.  The loss travels exactly; the
        bytes are in ``history_`` and ``bytes_communicated_``.
    split_every : int or "auto", default=8
        Fan-in of the tree that sums the per-block gradients.  Changing it changes the
        result only at floating-point rounding level.  "auto": 8, or fewer when the
        groups' gradients together exceed 16 MiB, so that no merge receives more (see
        the user guide's "Communication").
    random_state : int, RandomState or None, default=None
        Seed of the mini-batch sampling.
    warm_start : bool, default=False
        Start ``fit`` from the previous ``coef_`` and ``intercept_``.
    verbose : int, default=0
        1 shows a progress bar, 2 also logs one line per step (logger ``dask_dgd``).
    callbacks : list of callables or None, default=None
        Each is called with every step record (a dict, the future row of ``history_``);
        one that returns ``True`` stops the fit after that step.  See
        :mod:`dask_dgd.callbacks` (e.g. ``HistoryWriter`` to stream the history to a
        CSV or Parquet file).
    client : distributed.Client or None, default=None
        The cluster to train on.  None: the default client if one exists; otherwise an
        in-memory input under 64 MiB is fitted in process, and anything else on an
        embedded LocalCluster started once (and logged)."""

_SOLVERS = ("auto", "lbfgs", "newton", "gd", "sgd")
_MODES = ("sync", "local", "async")


def _first_order_like(value):
    """a first-order optimizer object from dask_dgd.optim"""
    return isinstance(value, FirstOrderOptimizer)


def _optimizer_like(value):
    """an optimizer name or an optimizer object from dask_dgd.optim"""
    return isinstance(value, (str, FirstOrderOptimizer, LBFGS))



def _is_device_array(X):
    """An array of another array-API namespace than NumPy (CuPy, array_api_strict...)."""
    return not isinstance(X, np.ndarray) and not is_sparse(X) and hasattr(X, "__array_namespace__")


def _predict_block(X, coef, intercept, squeeze, post, *post_args):
    """Linear predictor of one block, then ``post(raw, *post_args)`` (an inverse link,
    probabilities, classes) in the same task and the block's namespace and device.

    ``X`` comes as a list of its column chunks (``blockwise`` without concatenation,
    which dask could only do for NumPy-like blocks); training needs one column chunk,
    and so does predict."""
    if isinstance(X, list):
        (X,) = X
    raw = _raw_block(X, coef, intercept, squeeze)
    return raw if post is None else post(raw, *post_args)


def _raw_block(X, coef, intercept, squeeze):
    """Linear predictor of one block (runs on the workers for dask input)."""
    if sp.issparse(X) or isinstance(X, np.ndarray):
        if X.dtype.kind != "f":  # integer blocks of a dask X: float64, like fit
            X = X.astype(np.float64)
        coef = coef.astype(X.dtype, copy=False)  # float32 X: float32 out
        intercept = intercept.astype(X.dtype, copy=False)
    else:  # on X's device (CuPy, CuPy sparse, ...), once per block, in X's floating dtype
        if is_sparse(X):
            if X.dtype.kind != "f":
                X = X.astype(np.float64)
        else:
            xp = get_namespace(X)
            if not xp.isdtype(X.dtype, "real floating"):
                X = xp.astype(X, xp.float64)
        coef = asarray_like(coef, X, dtype=X.dtype)
        intercept = asarray_like(intercept, X, dtype=X.dtype)
    raw = X @ coef
    if is_sparse(raw):  # pragma: no cover - scipy returns dense for sparse @ dense
        raw = raw.toarray()
    raw = raw + intercept
    return raw[:, 0] if squeeze else raw


class DGDLinearModel(ClientParamMixin, BaseEstimator):
    """Base class: a generalised linear model fitted by distributed gradient descent."""

    _parameter_constraints = {
        "alpha": [Interval(numbers.Real, 0, None, "left")],
        "l1_ratio": [Interval(numbers.Real, 0, 1, "both")],
        "fit_intercept": [bool],
        "solver": [Options(*_SOLVERS)],
        "optimizer": [None, _optimizer_like],
        "learning_rate": [Options("auto"), Interval(numbers.Real, 0, None, "neither"), Schedule],
        "batch_size": [None, Interval(numbers.Integral, 1, None, "left")],
        "max_iter": [Interval(numbers.Integral, 1, None, "left")],
        "tol": [Interval(numbers.Real, 0, None, "left")],
        "mode": [Options(*_MODES)],
        "local_steps": [Interval(numbers.Integral, 1, None, "left")],
        "outer_optimizer": [None, _first_order_like],
        "max_staleness": [None, Interval(numbers.Integral, 0, None, "left")],
        "staleness_scaling": [bool],
        "max_time": [None, Interval(numbers.Real, 0, None, "neither")],
        "on_divergence": [Options("auto", "backoff", "raise")],
        "checkpoint": [None, str, os.PathLike],
        "checkpoint_every": [Interval(numbers.Integral, 1, None, "left")],
        "early_stopping": [bool],
        "validation_fraction": [Interval(numbers.Real, 0, 1, "neither")],
        "n_iter_no_change": [Interval(numbers.Integral, 1, None, "left")],
        "scoring": [None, str, callable],
        "rebalance": [Options("auto"), bool],
        "split_every": [Interval(numbers.Integral, 2, None, "left"), Options("auto")],
        "compression": [None, str, Compressor],
        "random_state": [None, Interval(numbers.Integral, 0, None, "left"), np.random.RandomState],
        "warm_start": [bool],
        "verbose": [Interval(numbers.Integral, 0, None, "left"), bool],
        "callbacks": [None, callbacks_like],
        "client": [None, client_is_a_client],
    }

    def _is_classifier(self):
        return False

    # ------------------------------------------------------------------ params
    def _validate_params(self):
        validate_params(self)

    def _resolve_solver(self):
        """(solver, optimizer) from the solver/optimizer/batch_size/l1 settings."""
        opt = self.optimizer
        if opt is not None:
            opt = get_optimizer(opt)
        solver = self.solver
        has_l1 = self.alpha > 0 and self.l1_ratio > 0
        if self.compression is not None:
            get_compressor(self.compression)  # a bad name fails here, clearly
            if self.mode != "sync":
                raise ParameterError(
                    f"compression applies to synchronous gradient steps; mode={self.mode!r} "
                    "sends parameters, not gradients (use mode='sync')"
                )
            if solver in ("lbfgs", "newton") or isinstance(opt, LBFGS):
                raise ParameterError(
                    f"compression needs a first-order solver ('gd' or 'sgd'): "
                    f"solver={solver!r} relies on exact gradients"
                )
            if solver == "auto":
                solver = "sgd" if self.batch_size is not None else "gd"
        if self.mode != "sync":
            if solver in ("lbfgs", "newton"):
                raise ParameterError(
                    f"mode={self.mode!r} takes first-order steps; solver={solver!r} is "
                    "synchronous only. Use solver='sgd' (with batch_size) or 'gd', or "
                    "mode='sync'"
                )
            if isinstance(opt, LBFGS):
                raise ParameterError(
                    f"mode={self.mode!r} needs a first-order optimizer; L-BFGS is "
                    "synchronous full-batch only"
                )
            if solver == "auto":
                solver = "sgd" if self.batch_size is not None else "gd"
        if solver == "auto":
            if isinstance(opt, LBFGS):
                solver = "lbfgs"
            elif self.batch_size is not None:
                solver = "sgd"
            elif opt is not None or has_l1:
                solver = "gd"
            else:
                solver = "lbfgs"
        if solver == "newton":
            if opt is not None:
                raise ParameterError(
                    f"solver='newton' takes no optimizer; got {type(opt).__name__}"
                )
            if self.batch_size is not None:
                raise ParameterError(
                    "solver='newton' is full-batch only; drop batch_size or use solver='sgd'"
                )
            if has_l1:
                raise ParameterError(
                    "solver='newton' cannot handle an L1 penalty (l1_ratio > 0); use "
                    "solver='gd' (proximal gradient) or solver='auto'"
                )
            return solver, None
        if solver == "lbfgs":
            if opt is not None and not isinstance(opt, LBFGS):
                raise ParameterError(
                    f"optimizer {type(opt).__name__} is a first-order optimizer; it needs "
                    "solver='gd' (full batch) or solver='sgd' (mini-batch), not 'lbfgs'"
                )
            if self.batch_size is not None:
                raise ParameterError(
                    "solver='lbfgs' is full-batch only; drop batch_size or use solver='sgd'"
                )
            return solver, opt or LBFGS()
        if isinstance(opt, LBFGS):
            raise ParameterError(
                f"the L-BFGS optimizer needs solver='lbfgs' (or 'auto'); got solver={solver!r}"
            )
        if solver == "sgd" and self.batch_size is None:
            raise ParameterError("solver='sgd' needs a batch_size (rows per step), e.g. 256")
        if solver == "gd" and self.batch_size is not None:
            raise ParameterError(
                f"solver='gd' takes full-batch steps but batch_size={self.batch_size} was "
                "given; use solver='sgd' (or 'auto') for mini-batches"
            )
        return solver, self._first_order_optimizer(opt)

    def _first_order_optimizer(self, opt):
        """``opt`` (default: plain SGD) with the learning rate applied and L1 checked."""
        if opt is None:
            opt = get_optimizer("sgd")
        has_l1 = self.alpha > 0 and self.l1_ratio > 0
        if has_l1 and not (isinstance(opt, SGD) and opt.momentum == 0):
            raise ParameterError(
                f"an L1 penalty (l1_ratio={self.l1_ratio}) is applied by a proximal step, "
                f"which is exact only for plain gradient steps; optimizer "
                f"{type(opt).__name__} would converge to another solution. Use "
                "optimizer='sgd' (no momentum), or l1_ratio=0"
            )
        if self.learning_rate != "auto":
            opt = opt.with_learning_rate(self.learning_rate)
        return opt

    # ------------------------------------------------------------------- input
    def _validate_fit_input(self, X, y, sample_weight, reset=True):
        """In-memory input through scikit-learn's validation; dask input checked lazily."""
        if y is None:
            raise InputError(
                f"{type(self).__name__} requires y to be passed, but the target y is None"
            )
        if is_dask_collection(X) or is_dask_collection(y):
            self._check_dask_input(X, reset)
            y, sample_weight = self._check_dask_targets(y, sample_weight)
            return X, y, sample_weight
        # X and y separately: non-finite values are left for the block checks, which
        # name the block (the same code path as for dask input).
        X = validate_data(
            self,
            X,
            reset=reset,
            accept_sparse="csr",
            dtype=[np.float64, np.float32],
            ensure_all_finite=False,
        )
        y = check_array(
            y,
            ensure_2d=False,
            dtype=None if self._is_classifier() else "numeric",
            ensure_all_finite=False,
            input_name="y",
        )
        y = column_or_1d(y, warn=True)
        if not self._is_classifier() and y.dtype.kind not in "fc":
            y = y.astype(np.float64)
        check_consistent_length(X, y)
        if sample_weight is not None:
            raw = np.asarray(sample_weight)
            problem = ""  # strings and complex numbers: no silent conversion
            if raw.dtype.kind not in "USc":
                try:
                    sample_weight, problem = np.asarray(raw, dtype=np.float64), None
                except (TypeError, ValueError) as err:
                    problem = f" ({err})"
            if problem is not None:
                raise InputError(
                    f"sample_weight must be numeric; got dtype {raw.dtype}{problem}; "
                    "convert it, e.g. np.asarray(sample_weight, dtype=float)"
                )
            if sample_weight.ndim == 0:
                sample_weight = np.full(X.shape[0], float(sample_weight))
            if sample_weight.shape != (X.shape[0],):
                raise InputError(
                    f"sample_weight must have shape ({X.shape[0]},) like y; got "
                    f"{sample_weight.shape}"
                )
        return X, y, sample_weight

    def _check_dask_input(self, X, reset):
        """Feature count (and names) of a dask X; its data is checked in the blocks."""
        import dask.dataframe as dd

        if not is_dask_collection(X):
            raise InputError(
                "y is a dask collection but X is not; pass both as dask collections "
                "(or both in memory)"
            )
        names = None
        if isinstance(X, dd.DataFrame):
            names = np.asarray(X.columns, dtype=object)
            n_features = len(names)
            if not all(isinstance(n, str) for n in names):
                names = None
        else:
            check_chunking(X)
            n_features = X.shape[1]
        if reset:
            if n_features == 0:  # as scikit-learn's check for in-memory X
                shape = (X.shape[0] if hasattr(X, "shape") and not isinstance(X, dd.DataFrame) else "?", 0)
                raise InputError(
                    f"Found array with 0 feature(s) (shape={shape}) while a minimum of 1 is "
                    f"required by {type(self).__name__}"
                )
            self.n_features_in_ = n_features
            if names is not None:
                self.feature_names_in_ = names
            elif hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
        else:
            self._check_n_features(n_features)
            self._check_feature_names(names)

    def _check_dask_targets(self, y, sample_weight):
        """Shape and dtype of dask y and sample_weight, checked before any computation:
        a column vector y is raveled (with scikit-learn's DataConversionWarning, as for
        in-memory y); other 2-D targets, non-numeric regression targets and weights
        are errors."""
        import dask.array as da
        from sklearn.exceptions import DataConversionWarning

        name = type(self).__name__
        if isinstance(y, da.Array):
            if y.ndim == 2 and y.shape[1] == 1:
                warnings.warn(
                    "A column-vector y was passed when a 1d array was expected. Please change "
                    "the shape of y to (n_samples, ), for example using ravel().",
                    DataConversionWarning,
                    stacklevel=4,
                )
                y = y[:, 0]
            elif y.ndim != 1:
                raise InputError(
                    f"y must be 1-D (n_samples,); got a dask array of shape {y.shape}: {name} "
                    "fits one target, fit one model per column"
                )
        kind = getattr(getattr(y, "dtype", None), "kind", None)
        if not self._is_classifier() and kind is not None and kind not in "biuf":
            raise InputError(
                f"y must be numeric for {name}; got dtype {y.dtype}: convert it, e.g. "
                "y.astype(float)"
            )
        if is_dask_collection(sample_weight):
            kind = getattr(getattr(sample_weight, "dtype", None), "kind", None)
            if kind is not None and kind not in "biuf":
                raise InputError(
                    f"sample_weight must be numeric; got dtype {sample_weight.dtype}: convert "
                    "it, e.g. sample_weight.astype(float)"
                )
            if getattr(sample_weight, "ndim", 1) != 1:
                raise InputError(
                    f"sample_weight must be 1-D (n_samples,); got a dask array of shape "
                    f"{sample_weight.shape}"
                )
        return y, sample_weight

    def _check_feature_names(self, names):
        """A dask DataFrame at predict time must have the columns seen in fit, in order."""
        fitted = getattr(self, "feature_names_in_", None)
        if names is None or fitted is None:
            return
        if len(names) != len(fitted) or not np.all(names == fitted):
            raise InputError(
                f"The feature names should match those that were passed during fit: "
                f"got {list(names)}, expected {list(fitted)}"
            )

    def _check_n_features(self, n_features):
        if n_features != self.n_features_in_:
            raise InputError(
                f"X has {n_features} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input"
            )

    # --------------------------------------------------------------------- fit
    def _prepare(self, X, y, sample_weight, reset=True, split=False):
        """Validated shards and the summary of their data.

        ``split`` (``fit`` with ``early_stopping``): the validation rows are held out
        first (``shards.validation`` is ``(validation shards, their summaries)``, else
        None), so the summaries, and all that is derived from them (the starting
        intercept, class weights), are of the training rows only.
        """
        X, y, sample_weight = self._validate_fit_input(X, y, sample_weight, reset=reset)
        executor = get_executor(self.client, X)
        shards = build_shardset(
            executor, X, y, sample_weight, y_numeric=not self._is_classifier(),
            rebalance=self.rebalance, passes=self.max_iter,
        )
        self.skew_report_ = shards.skew_report
        if shards.n_rows == 0:
            shards.map_gather(shard_summary, self._is_classifier(), name="dgd-summary")  # bad blocks first
            raise InputError(
                f"Found array with 0 sample(s) (shape=(0, {shards.n_features})) while a "
                f"minimum of 1 is required by {type(self).__name__}"
            )
        validation = None
        if split and self.early_stopping:
            shards, val_shards = self._validation(self._resolve_solver()[0], shards)
            validation = (val_shards, val_shards.map_gather(shard_summary, self._is_classifier(), name="dgd-summary"))
        summaries = shards.map_gather(shard_summary, self._is_classifier(), name="dgd-summary")
        shards.validation = validation
        shards.totals = {"weight_sum": float(sum(s["weight_sum"] for s in summaries))}
        if self._is_classifier():
            counts = {}
            for s in summaries:
                for label, n in zip(s.get("labels", ()), s.get("label_counts", ())):
                    counts[label] = counts.get(label, 0) + int(n)
            shards.totals["label_counts"] = repr(sorted(counts.items(), key=repr))
        else:
            shards.totals["weighted_target_sum"] = float(sum(s["wy_sum"] for s in summaries))
        if sum(s["weight_sum"] for s in summaries) <= 0:
            raise InputError(
                "Sample weights must contain at least one non-zero number: the total "
                "sample weight is zero"
            )
        return shards, summaries

    def _initial_params(self, objective, baseline):
        if self.warm_start and hasattr(self, "coef_"):
            coef = np.asarray(self.coef_, dtype=np.float64).T.reshape(objective.n_features, -1)
            intercept = np.atleast_1d(np.asarray(self.intercept_, dtype=np.float64))
            if coef.shape == (objective.n_features, objective.n_outputs):
                return objective.pack(coef, intercept if self.fit_intercept else np.zeros_like(intercept))
        params = np.zeros(objective.n_params)
        if self.fit_intercept and baseline is not None:
            coef, _ = objective.unpack(params)
            params = objective.pack(coef, np.asarray(baseline, dtype=np.float64))
        return params

    def _solve(self, shards, objective, solver, run, total=None, validation=None):
        """Run ``run(evaluator)`` on the shards and store what it returns."""
        penalty = Penalty(alpha=float(self.alpha), l1_ratio=float(self.l1_ratio))
        monitor = Monitor(verbose=self.verbose, callbacks=self.callbacks, total=total)
        compressor = get_compressor(self.compression)
        if isinstance(compressor, PowerSGD):
            compressor = compressor.with_shape((objective.n_features, objective.n_outputs))
        split_every = self.split_every
        if split_every == "auto":
            split_every = auto_split_every(shards.n_groups, 8 * objective.n_params)
        evaluator = Evaluator(
            shards, objective, penalty, split_every, monitor, max_time=self.max_time,
            dynamic=self.rebalance is not False and self.mode == "sync",
            compressor=compressor, seed=self._seed(),
        )
        if validation is not None:
            evaluator.validator = self._validator(validation, objective, split_every)
        try:
            with released_on_error(shards):  # an interrupted fit leaves nothing on the cluster
                result = run(evaluator)
        finally:
            monitor.close()
        self.solver_ = solver
        self._store(result, objective, monitor.records)
        self.split_every_ = split_every
        self.bytes_communicated_ = communicated(self.history_)
        return result

    def _on_divergence(self):
        if self.on_divergence != "auto":
            return self.on_divergence
        return "backoff" if self._learning_rate_mode() == "auto" else "raise"

    def _checkpointer(self, solver, shards, resume):
        """The fit's :class:`~.._engine.checkpoint.Checkpointer`, or None."""
        if not isinstance(resume, bool):
            raise ParameterError(f"resume must be True or False; got {resume!r}")
        if self.checkpoint is None:
            if resume:
                raise ParameterError("resume=True needs checkpoint=<folder> (where the checkpoint is)")
            return None
        if self.early_stopping and not isinstance(self.random_state, numbers.Integral):
            raise ParameterError(
                "early_stopping with a checkpoint needs an int random_state: the validation "
                "split must be the same when the fit resumes"
            )
        if solver not in ("gd", "sgd") or self.mode == "local":
            raise ParameterError(
                f"checkpoints are written by first-order training in the sync or async mode "
                f"(solver='gd' or 'sgd'); got solver={solver!r}, mode={self.mode!r}.  L-BFGS and "
                "Newton keep their curvature memory inside SciPy, where it cannot be saved, and "
                "local SGD keeps its optimizer states on the workers: use solver='gd' (e.g. "
                "optimizer='adam') in mode 'sync' or 'async' to checkpoint"
            )
        skip = {"max_iter", "tol", "max_time", "verbose", "callbacks", "client", "checkpoint",
                "checkpoint_every", "warm_start", "rebalance", "split_every"}
        params = {
            k: ("RandomState" if isinstance(v, np.random.RandomState) else stable_repr(v))
            for k, v in sorted(self.get_params(deep=False).items()) if k not in skip
        }
        fingerprint = {
            "estimator": type(self).__name__,
            **{f"parameter {k}": v for k, v in params.items()},
            **data_fingerprint(shards),
            "blocks": [int(r) for r in shards.block_rows] if solver == "sgd" else len(shards.block_rows),
            "classes": repr(getattr(self, "classes_", None)),
        }
        return Checkpointer(self.checkpoint, self.checkpoint_every, fingerprint, resume)

    def _validation(self, solver, shards):
        """``(training shards, validation shards)``: the split of early stopping."""
        if solver not in ("gd", "sgd") or self.mode != "sync":
            raise ParameterError(
                f"early_stopping needs synchronous first-order training (solver='gd' or 'sgd', "
                f"mode='sync'); got solver={solver!r}, mode={self.mode!r}"
            )
        return split_validation(shards, (*self._seed(), 1), float(self.validation_fraction))

    def _validator(self, val_shards, objective, split_every):
        scorer, decode = self.scoring, None
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

    def _run(self, shards, objective, baseline, resume=False):
        solver, optimizer = self._resolve_solver()
        val_shards = shards.validation[0] if getattr(shards, "validation", None) else None
        checkpoint = self._checkpointer(solver, shards, resume)
        params0 = self._initial_params(objective, baseline)
        if solver == "lbfgs":

            def run(evaluator):
                return run_lbfgs(evaluator, params0, optimizer, max_iter=self.max_iter, tol=self.tol)

        elif solver == "newton":

            def run(evaluator):
                return run_newton(evaluator, params0, max_iter=self.max_iter, tol=self.tol)

        else:
            common = dict(
                max_iter=self.max_iter,
                tol=self.tol,
                batch_size=self.batch_size if solver == "sgd" else None,
                seed=self._seed(),
                learning_rate=self._learning_rate_mode(),
                on_divergence=self._on_divergence(),
            )
            if self.mode == "local":

                def run(evaluator):
                    return run_local(
                        evaluator,
                        params0,
                        optimizer,
                        local_steps=self.local_steps,
                        outer_optimizer=self.outer_optimizer,
                        **common,
                    )

            elif self.mode == "async":

                def run(evaluator):
                    return run_async(
                        evaluator,
                        params0,
                        optimizer,
                        max_staleness=self.max_staleness,
                        staleness_scaling=self.staleness_scaling,
                        checkpoint=checkpoint,
                        **common,
                    )

            else:

                def run(evaluator):
                    return run_first_order(
                        evaluator, params0, optimizer, checkpoint=checkpoint, validator=evaluator.validator,
                        n_iter_no_change=self.n_iter_no_change, **common,
                    )

        total = self.max_iter + 1 if solver == "gd" and self.mode == "sync" else None
        try:
            result = self._solve(shards, objective, solver, run, total=total, validation=val_shards)
        finally:
            if val_shards is not None:
                val_shards.release()
        if val_shards is not None:
            scores = self.history_["val_score"].dropna()
            self.validation_score_ = float(scores.iloc[-1]) if len(scores) else None
            self.best_validation_score_ = float(scores.max()) if len(scores) else None
        if not result.converged:
            detail = f" ({result.message})" if result.message else ""
            warnings.warn(
                f"{type(self).__name__} did not converge in max_iter={self.max_iter} "
                f"{'epochs' if solver == 'sgd' or self.mode != 'sync' else 'iterations'} "
                f"(solver={solver!r}, mode={self.mode!r})"
                f"{detail}; increase max_iter, loosen tol, or scale the features",
                ConvergenceWarning,
                stacklevel=3,
            )
        return result

    def _learning_rate_mode(self):
        """ "auto" when the engine should derive the step; otherwise the optimizer's own."""
        by_name = self.optimizer is None or isinstance(self.optimizer, str)
        return "auto" if by_name and self.learning_rate == "auto" else "fixed"

    def _run_partial(self, shards, objective, baseline):
        """One epoch of mini-batch steps, continuing the optimizer of earlier calls.

        The first call on an unfitted estimator starts from the baseline intercept with a
        fresh optimizer (``learning_rate="auto"`` derived from this data); after ``fit``
        with a full-batch solver it starts from the fitted coefficients.
        """
        if self.solver == "lbfgs" or isinstance(self.optimizer, LBFGS):
            raise ParameterError(
                "partial_fit takes mini-batch steps and needs a first-order optimizer; "
                "L-BFGS (solver='lbfgs') is full-batch only"
            )
        fitted = hasattr(self, "coef_")
        state = getattr(self, "_opt_state_", None) if fitted else None
        if state is not None:
            optimizer, mode = self._optimizer_, "fixed"
        else:
            optimizer = self._first_order_optimizer(
                None if self.optimizer is None else get_optimizer(self.optimizer)
            )
            mode = self._learning_rate_mode()
        if fitted:
            coef, intercept = self._coef_matrix()
            params0 = objective.pack(coef, intercept if self.fit_intercept else None)
        else:
            params0 = self._initial_params(objective, baseline)
        self._partial_calls = getattr(self, "_partial_calls", 0) + 1

        def run(evaluator):
            return run_first_order(
                evaluator,
                params0,
                optimizer,
                max_iter=1,
                tol=self.tol,
                batch_size=self.batch_size or PARTIAL_FIT_BATCH,
                seed=(*self._seed(), self._partial_calls),
                learning_rate=mode,
                opt_state=state,
                on_divergence=self._on_divergence(),
            )

        self._solve(shards, objective, "sgd", run)

    def _seed(self):
        rs = self.random_state
        if isinstance(rs, numbers.Integral):
            return (int(rs),)
        return (int(check_random_state(rs).randint(np.iinfo(np.int32).max)),)

    def _store(self, result, objective, records):
        import pandas as pd

        coef, intercept = objective.unpack(result.params)
        self._set_coef(coef, intercept)
        self.n_iter_ = result.n_iter
        self.history_ = pd.DataFrame.from_records(records)
        self.loss_curve_ = self.history_["loss"].tolist() if len(records) else []
        self._optimizer_ = result.optimizer
        self._opt_state_ = result.opt_state

    def _set_coef(self, coef, intercept):
        self.coef_ = coef[:, 0].copy() if coef.shape[1] == 1 else coef.T.copy()
        self.intercept_ = float(intercept[0]) if intercept.shape[0] == 1 else intercept.copy()

    # ----------------------------------------------------------------- predict
    def _coef_matrix(self):
        coef = np.asarray(self.coef_, dtype=np.float64)
        coef = coef[:, None] if coef.ndim == 1 else coef.T
        intercept = np.atleast_1d(np.asarray(self.intercept_, dtype=np.float64))
        return coef, intercept

    def _raw(self, X, squeeze=True, post=None, post_args=(), out=None):
        """Linear predictor, then ``post(raw, *post_args)`` if given, block by block:
        NumPy for in-memory NumPy/SciPy X, an array of X's namespace on X's device for
        an in-memory array of another namespace (CuPy...), a lazy dask array for dask X
        (blocks of X's namespace).  ``out = (ndim, n_columns, dtype)`` describes
        ``post``'s result (default: the raw predictor's)."""
        check_is_fitted(self, "coef_")
        coef, intercept = self._coef_matrix()
        squeeze = squeeze and coef.shape[1] == 1
        if is_dask_collection(X):
            import dask.dataframe as dd

            if isinstance(X, dd.DataFrame):
                self._check_n_features(len(X.columns))
                self._check_feature_names(np.asarray(X.columns, dtype=object))
                X = X.to_dask_array()
            else:
                check_chunking(X)
                self._check_n_features(X.shape[1])
            if X.dtype.kind not in "biuf":
                raise InputError(f"X must be numeric; got dtype {X.dtype}")
            from .._engine.shards import check_finite_block

            # NaN/inf rows raise when computed (as scikit-learn does for in-memory X),
            # instead of becoming NaN predictions or, for a classifier, classes_[0]
            X = X.map_blocks(check_finite_block, dtype=X.dtype, meta=X._meta)
            dtype = np.float32 if X.dtype == np.float32 else np.float64
            ndim, n_cols = (1, None) if squeeze else (2, coef.shape[1])
            if out is not None:  # (ndim, n_cols, dtype), dtype None: the predictor's
                ndim, n_cols, dtype = out[0], out[1], out[2] or dtype
            import dask.array as da
            from dask.array.utils import meta_from_array

            if np.dtype(dtype).kind not in "biuf":  # e.g. string class labels: host blocks
                meta = np.empty((0,) * ndim, dtype=dtype)
            elif sp.issparse(X._meta) or X._meta is None:  # dense results of sparse blocks
                meta = np.empty((0,) * ndim, dtype=dtype)
            elif is_sparse(X._meta):  # CuPy sparse blocks: dense CuPy results
                meta = asarray_like(np.empty((0,) * ndim, dtype=dtype), X._meta)
            else:
                meta = meta_from_array(X._meta, ndim=ndim, dtype=dtype)
            args = (coef, None, intercept, None, squeeze, None, post, None)
            args += tuple(a for value in post_args for a in (value, None))
            # align_arrays=False: dask would otherwise merge zero-row chunks away
            kw = dict(concatenate=False, align_arrays=False, meta=meta)
            if ndim == 1:
                return da.blockwise(_predict_block, "i", X, "ij", *args, **kw)
            return da.blockwise(_predict_block, "ik", X, "ij", *args, new_axes={"k": n_cols}, **kw)
        if _is_device_array(X):  # an in-memory CuPy (or other array-API) array
            self._check_device_array(X)
            return _predict_block(X, coef, intercept, squeeze, post, *post_args)
        X = validate_data(self, X, reset=False, accept_sparse="csr", dtype=[np.float64, np.float32])
        return _predict_block(X, coef, intercept, squeeze, post, *post_args)

    def _check_device_array(self, X):
        """scikit-learn's checks of an in-memory X, for arrays it cannot convert."""
        from .._engine.shards import check_finite_block

        if X.ndim != 2:
            raise InputError(f"X must be 2-D; got an array of shape {tuple(X.shape)}")
        self._check_n_features(X.shape[1])
        check_finite_block(X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags
