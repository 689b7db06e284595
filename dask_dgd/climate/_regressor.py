"""ClimateRegressor: pooled and pointwise regression on xarray gridded datasets.

The pooled model is a linear estimator (the engine) over the design matrix; the
pointwise models' math is in :mod:`._pointwise`.  The fitted attributes are NumPy, so a
model fitted on GPU blocks predicts on NumPy blocks and the other way round.
"""

import functools
import inspect
import numbers
import warnings

import dask
import dask.array as da
import numpy as np
import xarray as xr
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from .._engine.runtime.executor import task_client
from .._history import LazyHistory
from .._params import MODES, RUNTIME, TRAINING_CONSTRAINTS, init_from, signature
from .._validation import ClientParamMixin, Interval, Options, one_fit_at_a_time, user_stacklevel, validate_params
from ..exceptions import ConvergenceWarning, InputError, ParameterError
from ._axes import AUTO, resolve_dims
from ._chunks import warn_tiny_chunks
from ._design import DesignMatrix, FeatureSpec, Fields
from ._grid import grid_table
from ._pointwise import (
    cell_stats,
    merge_cell_stats,
    n_cell_stats,
    pointwise_block,
    pooled_block,
    score_block,
    solve_cells,
    stats_as_they_are,
)
from ._time import TIME_UNITS

__all__ = ["ClimateRegressor"]

_FAMILIES = ("gaussian", "poisson", "binomial")



#: ClimateRegressor's signature: the data (``features`` and ``target`` also by
#: position), the model on the grid, the penalty, the solver and the training
#: parameters (:mod:`dask_dgd._params`).
CLIMATE_SIGNATURE = signature(
    ("features", None), ("target", None), ("model", "pointwise"), ("sample_dims", AUTO), ("time_dim", AUTO),
    ("lags", None), ("lead", 0), ("seasonal", None), ("time_unit", "years"),
    ("area_weights", True), ("lat", "auto"), ("family", "gaussian"), ("trials", None),
    "alpha", "solver", "optimizer", "learning_rate", "batch_size", "max_iter", "tol", *MODES, *RUNTIME,
)

@init_from(CLIMATE_SIGNATURE, positional=2)
class ClimateRegressor(LazyHistory, ClientParamMixin, BaseEstimator):
    """Regression on an xarray Dataset's grid cells: one pooled model or one per cell.

    Parameters
    ----------
    features : str, list of str or None, default=None
        Predictor variables (any subset of ``sample_dims``; e.g. a ``(time,)`` index is
        broadcast to every cell).  None: every data variable of the Dataset but the
        target whose dimensions are among ``sample_dims``, in the Dataset's order.  The
        time coordinate (e.g. ``"time"``, dates of any calendar) is a trend on time:
        the time elapsed since ``time_origin_`` in ``time_unit``; ``coef_`` keeps its
        name and ``intercept_`` is the value at the origin.
    target : str or None, default=None
        The variable to predict; required at ``fit`` (None raises ``ParameterError``
        naming the Dataset's variables).
    model : {"pointwise", "pooled"}, default="pointwise"
        ``"pointwise"`` (the default): one model per grid cell, the field's baseline
        (per-cell least squares), which a model shared by every cell loses to as soon
        as the cells differ in their climatology or their response (pattern scaling of
        iris-sample-data's A1B temperatures on their regional mean, 150 years fitted,
        90 held out: area-weighted R² 0.986 per cell, 0.862 for each cell's mean of
        the fitted years, 0.015 pooled).  ``"pooled"``: one model for all cells,
        trained by distributed gradient descent (the linear-model engine) over the
        time-and-space blocks of the design matrix: for features that carry the cells'
        differences themselves (local fields, coordinates), a model that predicts on
        grids other than its fit's, or too few time steps per cell for a model each.
        Pointwise gaussian cells are weighted least-squares models, all fitted at once:
        each (time chunk, spatial chunk) block gives its cells' centred statistics
        (means and cross-products of ``[x, y]``), which are merged over the time chunks
        only (a tree reduction per spatial chunk, so the parameters are sharded by
        spatial chunk) and solved per cell — for this
        quadratic objective the Newton step from zero is exact.  Poisson and binomial
        cells are fitted by Newton's method (IRLS) for all cells at once: each pass
        over the data sums the cells' Hessians and scores over the time chunks, with
        step halving, until every cell has converged (see ``tol``); a spatial chunk
        whose cells have all converged is not read again.  A Dataset in memory
        (NumPy-backed) whose grid is one dask chunk (dask's ``"auto"`` chunks) is
        fitted in this process, without Dask, with the same results.
    sample_dims : "auto" or tuple of str, default="auto"
        Dimensions whose cells are the samples.  ``"auto"``: the target's dimensions,
        each recognised as time, latitude-like (Y: ``lat``, ``latitude``, ``y``,
        ``rlat``, ...) or longitude-like (X) by its coordinate's CF attributes, date
        values or name, ordered (time, Y, X); another dimension of the target (e.g.
        ``level``) is an ``InputError``.  The choice is logged at INFO on the
        ``dask_dgd.climate`` logger and kept as ``sample_dims_``.
    time_dim : str, default="auto"
        The time dimension; ``"auto"``: the one of ``sample_dims`` recognised as time.
    lags, lead, seasonal, time_unit, area_weights, lat
        How the design matrix is built; see :func:`dask_dgd.climate.to_design_matrix`
        (also for the rules of ``"auto"``, the seasonal terms' year fraction and the
        length of each ``time_unit`` by calendar).  ``time_unit`` (default
        ``"years"``): the unit of a trend on time, one of ``"seconds"``,
        ``"minutes"``, ``"hours"``, ``"days"``, ``"months"``, ``"years"``,
        ``"decades"``, ``"centuries"``; ``predict`` applies the fit's origin, unit and
        calendar to its own dates (a later scenario on the same calendar extends the
        trend; another calendar is an ``InputError``).  ``area_weights`` (default True)
        weights each cell by its relative area (fit, ``score`` and ``evaluate``): the
        file's cell areas named by the target's CF ``cell_measures``, divided by their
        largest; else ``cos(latitude)`` on a 1-D latitude (its mean over the cell with
        CF bounds); on a curvilinear grid (2-D latitude) each cell's area on the sphere
        from the CF vertex bounds or, without them, estimated from the cell centres,
        never ``cos`` of the 2-D latitude.  A pointwise ``alpha`` applies to the
        weighted sum.
    family : {"gaussian", "poisson", "binomial"}, default="gaussian"
        The link (identity, log, logit), pooled and pointwise alike; the target must
        be counts >= 0 for poisson and 0/1 for binomial (pointwise: values in [0, 1],
        i.e. proportions too; with ``trials``: counts of successes).  A pointwise cell
        whose target never leaves 0 (or, for binomial, 1) has no finite
        maximum-likelihood fit: its intercept is ``-inf`` (``+inf``), its slopes 0, and
        it predicts 0 (1) exactly.  A pointwise poisson or binomial cell whose target
        does vary but is *separated* by the features (binomial: 0 on one side of a
        hyperplane of the features and 1 on the other, completely or with ties on it;
        poisson: counts 0 on one side) has no finite fit either: with ``alpha=0`` such
        cells are found after the fit, listed in ``separated_`` and reported by a
        ``ConvergenceWarning``; their coefficients are the last accepted ones (large)
        and their predictions 0 or 1 (poisson: 0) on the separated side.
    trials : str or None, default=None
        ``family="binomial"`` only (a ``ParameterError`` otherwise): the variable of the
        Dataset holding the number of trials of each value of the target, which is
        then the count of successes out of them (e.g. hot days out of
        ``days_in_month``).  On the sample dimensions or a subset of them, broadcast
        like a feature (``days_in_month`` on ``(time,)``).  The fit maximises the
        binomial likelihood of the counts: the proportion ``successes / trials`` with
        weight ``trials`` times the area weight, pooled
        (:class:`dask_dgd.BinomialRegressor` with ``sample_weight``) and pointwise
        (per-cell IRLS).  Values with 0 or NaN trials are masked like a NaN target;
        negative trials, negative successes or successes above the trials are an
        ``InputError`` naming the first such cell.  ``predict`` returns the
        probability; ``evaluate`` and ``score`` compare the observed proportion with
        it, weighted by the trials times the area weight.
    alpha : float, default=0.0
        L2 penalty.  Pooled: on the weighted *mean* loss, as in
        :class:`dask_dgd.LinearRegression`; pointwise: per cell, the weighted deviance
        plus ``alpha * |slopes|^2`` (intercept unpenalised): for gaussian cells the
        weighted sum of squared errors, as ``sklearn.linear_model.Ridge(alpha)``; for
        poisson cells ``alpha = n * alpha_sk`` of ``sklearn.linear_model.PoissonRegressor``
        (n the cell's weighted steps), for binomial ``alpha = 1 / C`` of
        ``LogisticRegression`` (with unit area weights).  Any ``alpha > 0`` gives
        separated pointwise cells (see ``family``) a finite penalised fit.
    max_iter : int, default=100
        Pooled: the training's limit, as in :class:`~dask_dgd.linear_model.DGDLinearModel`.
        Pointwise poisson and binomial: the most Newton passes over the data (cells not
        converged by then keep their last accepted coefficients, with a
        ``ConvergenceWarning`` giving their number).
    tol : float, default=1e-4
        Pooled: the training's tolerance, as in the linear estimators.  Pointwise
        poisson and binomial: a cell has converged when its Newton step changes no
        coefficient by more than ``tol * max(1, |coefficients|)`` or its objective fell
        by at most ``tol**2 * (|objective| + 0.1)`` (R's ``glm`` criterion); that last
        step is then taken too, so the coefficients are about ``tol**2`` from the
        optimum (Newton's quadratic convergence).
    split_every : int, default=8
        Fan-in of the reduction trees.
    client : distributed.Client or None, default=None

    Other Parameters
    ----------------
    solver, optimizer, learning_rate, batch_size, mode, local_steps, outer_optimizer, max_staleness, \
staleness_scaling, max_time, on_divergence, checkpoint, checkpoint_every, compression, random_state, \
verbose, callbacks
        Pooled model: the training parameters of the linear estimator it fits (see
        :class:`~dask_dgd.linear_model.DGDLinearModel`): every training mode,
        compression, checkpoints with ``fit(ds, resume=True)``, the divergence guard and
        the time limit.  Pointwise models use ``max_iter``, ``tol`` (above) and
        ``verbose``, poisson and binomial ones also ``max_time`` (the cells still
        iterating keep their last accepted coefficients, with a ``ConvergenceWarning``)
        and ``callbacks`` (called with every Newton pass's record; one returning True
        stops the fit after that pass); any other of these set to a value other than
        its default is a ``ParameterError`` with ``model="pointwise"``, not silently
        ignored.

    Attributes
    ----------
    family_ : str
        The family of the fit: the link ``predict`` uses (a ``family`` set since takes
        effect at the next fit).
    sample_dims_ : tuple of str
        The sample dimensions of the fit, time first (``"auto"`` resolved).
    time_dim_ : str
        The time dimension of the fit.
    feature_names_ : list of str
        Columns of the design matrix (``var``, ``var_lagK``, ``sinK``, ``cosK``).
    time_origin_ : numpy.datetime64, cftime date or None
        With the time coordinate among the features: the origin of the trend on time
        (the first time of the fit's data, of its type and calendar), where that
        feature is 0; None otherwise.
    coef_ : xarray.DataArray
        Pooled: over ``feature``; pointwise: over the spatial dimensions and ``feature``.
    intercept_ : float or xarray.DataArray
        Pooled: a float; pointwise: on the spatial grid.
    estimator_ : the fitted linear estimator (pooled)
    n_samples_ : xarray.DataArray (pointwise)
        Unmasked time steps of each cell.
    separated_ : xarray.DataArray of bool (pointwise)
        On the spatial grid: the poisson or binomial cells fitted with ``alpha=0``
        whose maximum-likelihood estimate does not exist (separated, see ``family``).
        Found in two stages after the fit: a pass over the data keeps the cells with
        an observed step whose fitted linear predictor is beyond 8 in absolute value
        (binomial; poisson: below -8), then each of those is tested exactly on its own
        series by a linear programme (Konis 2007, as R's ``detectseparation``), so a
        cell with a finite estimate is never listed.  All False for gaussian cells,
        with ``alpha > 0`` and for the constant-target cells above.
    n_iter_ : int
        Pooled: the linear estimator's; pointwise poisson and binomial: the passes over
        the data (the start's IRLS step included); pointwise gaussian: 1.
    history_ : pandas.DataFrame
        One record per step, as every estimator's (pooled: the linear estimator's);
        pointwise poisson and binomial: one per pass, ``loss`` the objective summed
        over the cells at their last accepted coefficients (NaN for the start's pass,
        which evaluates none), ``grad_norm`` the largest norm of a cell's gradient,
        ``cells_iterating`` the cells not converged yet.  Pointwise gaussian fits
        (one solve) have none.

    Examples
    --------
    >>> import numpy as np, xarray as xr
    >>> from dask_dgd.climate import ClimateRegressor
    >>> t = xr.date_range("2000-01-01", periods=24, freq="MS", calendar="noleap", use_cftime=True)
    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(24, 3, 4))
    >>> ds = xr.Dataset({"x": (("time", "lat", "lon"), x), "y": (("time", "lat", "lon"), 2 * x + 1)},
    ...                 coords={"time": t, "lat": [-10.0, 0.0, 10.0], "lon": [0.0, 1.0, 2.0, 3.0]})
    >>> model = ClimateRegressor("x", "y", model="pointwise").fit(ds)
    >>> round(float(model.coef_.sel(feature="x").mean()), 10), model.predict(ds).dims
    (2.0, ('time', 'lat', 'lon'))
    """

    _parameter_constraints = {
        "features": [None, str, list, tuple],
        "target": [None, str],
        "model": [Options("pooled", "pointwise")],
        "sample_dims": [Options(AUTO), tuple, list],
        "time_dim": [str],
        "lead": [Interval(numbers.Integral, 0, None, "left")],
        "seasonal": [None, Interval(numbers.Integral, 1, None, "left")],
        "time_unit": [Options(*TIME_UNITS)],
        "area_weights": [bool],
        "lat": [str],
        "family": [Options(*_FAMILIES)],
        "trials": [None, str],
        "alpha": [Interval(numbers.Real, 0, None, "left")],
        **{name: TRAINING_CONSTRAINTS[name] for name in (
            "max_iter", "tol", "mode", "local_steps", "outer_optimizer", "max_staleness", "staleness_scaling",
            "max_time", "on_divergence", "checkpoint", "checkpoint_every", "compression", "verbose", "callbacks",
            "client")},
        "split_every": [Interval(numbers.Integral, 2, None, "left")],
    }

    def __sklearn_tags__(self):
        """scikit-learn's tags: the input is an xarray Dataset, not a table.

        ``two_d_array=False`` tells ``check_estimator`` and ``parametrize_with_checks``
        not to feed random 2-D arrays (they skip their data checks for such estimators,
        as for text vectorizers); the target is a variable of the Dataset, so ``y`` is
        not required; asynchronous training is not deterministic.
        """
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.allow_nan = True  # masked cells (NaN) are dropped, by design
        tags.target_tags.required = False
        tags.non_deterministic = self.mode == "async" and self.model == "pooled"
        return tags

    # ----------------------------------------------------------------- helpers
    def _spec(self, ds=None):
        """The fit's :class:`FeatureSpec` on ``ds``: ``"auto"`` dimensions and
        ``features=None`` resolved against it; the dimensions chosen are kept as
        ``sample_dims_`` and ``time_dim_`` (time first)."""
        validate_params(self)
        target, features = self.target, self.features
        if target is None:
            names = "" if ds is None else f" (the Dataset's variables: {sorted(map(str, ds.data_vars))})"
            raise ParameterError(
                f"ClimateRegressor needs the variable to predict: pass target=<name>{names}, "
                "e.g. ClimateRegressor(target='tas')"
            )
        sample_dims, time_dim = resolve_dims(ds, target, self.sample_dims, self.time_dim, features)
        if features is None:
            if ds is None:
                raise ParameterError("features=None is resolved against a Dataset at fit; the model is not fitted")
            features = [str(v) for v in ds.data_vars
                        if v != target and v != self.trials and ds[v].dims and set(ds[v].dims) <= set(sample_dims)]
            if not features and not self.seasonal:
                raise ParameterError(
                    f"features=None found no variable but {target!r} on dimensions among sample_dims "
                    f"{tuple(sample_dims)} (the Dataset's variables: {sorted(map(str, ds.data_vars))}); "
                    "pass features=[...]"
                )
        if self.trials is not None and self.family != "binomial":
            raise ParameterError(
                f"trials={self.trials!r} counts the trials of a binomial target; family={self.family!r} has none: "
                "use family='binomial' (the target then the count of successes) or trials=None"
            )
        if self.trials is not None and self.trials in (target, *([features] if isinstance(features, str)
                                                                 else (features or ()))):
            raise ParameterError(
                f"trials={self.trials!r} is also the target or a feature; name the variable of the number of trials"
            )
        spec = FeatureSpec(features, target, sample_dims, time_dim, self.lags, self.lead,
                           self.seasonal, self.area_weights, self.lat, self.time_unit, trials=self.trials)
        self.sample_dims_, self.time_dim_ = spec.sample_dims, spec.time_dim
        return spec

    def _compute(self, *arrays):
        client = task_client(self.client)  # inside a Dask task: its cluster, seceded
        if client is not None:
            return tuple(client.gather(client.compute(list(arrays))))
        return dask.compute(*arrays)

    def _compute_with_progress(self, coef, count):
        """``coef`` and ``count`` computed, with a progress bar over the spatial chunks
        solved (``verbose >= 1``): futures as they complete on a cluster, the local
        scheduler's task callbacks otherwise."""
        from .._engine.runtime.monitor import progress_bar

        n_chunks = int(np.prod(coef.numblocks))
        bar = progress_bar(self.verbose, n_chunks, f"{type(self).__name__} (pointwise)", "chunk")
        if bar is None:
            return self._compute(coef, count)
        coef_blocks, count_blocks = coef.to_delayed(), count.to_delayed()
        blocks = list(coef_blocks.ravel()) + list(count_blocks.ravel())
        try:
            client = task_client(self.client) or _default_client()
            if client is not None:
                from distributed import as_completed

                futures = client.compute(blocks)
                watched = set(futures[:n_chunks])
                for future in as_completed(futures, loop=client.loop):
                    if future in watched:
                        bar.update(1)
                values = client.gather(futures)
            else:
                from dask.callbacks import Callback

                keys = {b.key for b in blocks[:n_chunks]}
                with Callback(posttask=lambda key, *_: bar.update(1) if key in keys else None):
                    values = dask.compute(*blocks)
        finally:
            bar.close()
        return (_assemble(values[:n_chunks], coef_blocks.shape),
                _assemble(values[n_chunks:], count_blocks.shape))

    def _linear_estimator(self):
        from ..linear_model import LinearRegression, LogisticRegression, PoissonRegressor

        common = {name: getattr(self, name) for name in (
            "alpha", "solver", "optimizer", "learning_rate", "batch_size", "max_iter", "tol", "mode", "local_steps",
            "outer_optimizer", "max_staleness", "staleness_scaling", "max_time", "on_divergence", "checkpoint",
            "checkpoint_every", "compression", "split_every", "random_state", "verbose", "callbacks", "client")}
        if self.family == "poisson":
            return PoissonRegressor(**common)
        if self.family == "binomial" and self.trials is not None:  # proportions with the trials as weights
            from ..linear_model import BinomialRegressor

            return BinomialRegressor(**common)
        if self.family == "binomial":
            return LogisticRegression(**common)
        return LinearRegression(**common)

    _POOLED_ONLY = ("solver", "optimizer", "learning_rate", "batch_size", "mode", "local_steps", "outer_optimizer",
                    "max_staleness", "staleness_scaling", "max_time", "on_divergence", "checkpoint",
                    "checkpoint_every", "compression", "random_state", "callbacks")
    #: those the pointwise poisson and binomial fits use: their Newton passes are steps of the one loop
    _PASSES = ("max_time", "callbacks")

    def _check_pointwise_params(self):
        """The pooled model's training parameters are refused with ``model="pointwise"``
        unless left at their defaults (poisson and binomial cells use ``max_time`` and
        ``callbacks``): a parameter is used or refused, never ignored."""
        defaults = inspect.signature(type(self).__init__).parameters
        used = self._PASSES if self.family != "gaussian" else ()
        changed = [name for name in self._POOLED_ONLY
                   if name not in used and not _is_default(getattr(self, name), defaults[name].default)]
        if changed:
            shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in changed)
            raise ParameterError(
                f"{shown}: pointwise models do not use {'these' if len(changed) > 1 else 'this'} (they train no "
                "pooled model by gradient descent: least squares is solved per cell in one pass, poisson and "
                "binomial cells by Newton passes, with max_iter, tol, max_time and callbacks); leave it at its "
                "default or use model='pooled'"
            )

    # --------------------------------------------------------------------- fit
    _FITTED = ("spec_", "family_", "sample_dims_", "time_dim_", "feature_names_", "target_attrs_", "grid_", "coef_",
               "intercept_", "n_samples_", "separated_", "n_iter_", "estimator_", "history_", "_coef_table")

    @one_fit_at_a_time
    def fit(self, ds, y=None, resume=False):
        """Fit on a Dataset holding the features and the target.

        A grid in more than 16 dask blocks averaging under 1 MiB (as float64) warns
        :class:`~dask_dgd.exceptions.ChunkSizeWarning`, naming the chunks to use: each
        block's task overhead then outweighs its arithmetic (e.g. a file opened with
        ``chunks={}``, one time step per block).  A grid fitted in process never warns.

        Parameters
        ----------
        ds : xarray.Dataset
        y : None
            Ignored; the target is the ``target`` variable of ``ds``.
        resume : bool, default=False
            Pooled model: continue from the checkpoint in the ``checkpoint`` folder.

        Returns
        -------
        self
        """
        for name in (*self._FITTED, "_history_records"):  # a refit starts clean (also if it fails)
            self.__dict__.pop(name, None)
        if not isinstance(ds, xr.Dataset):
            raise InputError(
                f"expected an xarray Dataset; got {type(ds).__name__}: ClimateRegressor fits a Dataset holding "
                "the features and the target variables"
            )
        spec = self._spec(ds)
        if resume and self.model == "pointwise":
            raise ParameterError(
                "resume=True continues a pooled model's training from its checkpoint; pointwise models are "
                "solved in one pass and have none"
            )
        if self.model == "pointwise":
            self._check_pointwise_params()
        spec.check(ds, need_target=True)
        spec.set_time_origin(ds)
        _check_trials(spec, ds)
        # pointwise fits of a small in-memory grid run their block functions in process
        fields = Fields(spec, ds, in_process=self.model == "pointwise")
        warn_tiny_chunks(spec, fields)
        grid = {d: (ds.sizes[d], np.asarray(ds[d].values) if d in ds.coords else None) for d in spec.space_dims()}
        if self.model == "pointwise":
            self._fit_pointwise(spec, fields)
        else:
            self._fit_pooled(spec, fields, resume)
        self.spec_ = spec
        self.family_ = self.family
        self.feature_names_ = spec.names
        self.target_attrs_ = dict(ds[self.target].attrs)
        self.grid_ = grid
        return self

    def _fit_pooled(self, spec, fields, resume=False):
        from .._engine.runtime.monitor import progress_label

        dm = DesignMatrix(spec, fields)
        est = self._linear_estimator()
        try:
            with progress_label(f"{type(self).__name__} (pooled)"):
                est.fit(dm.X, dm.y, sample_weight=dm.sample_weight, resume=resume)
        except InputError as err:
            if any(word in str(err) for word in ("empty", "0 rows", "no rows", "0 sample")):
                raise InputError(
                    f"every cell of {self.target!r} or its features is masked (NaN) or has zero weight: nothing to fit"
                ) from err
            raise
        self.estimator_ = est
        coef = np.ravel(est.coef_)
        self.coef_ = xr.DataArray(coef, dims="feature", coords={"feature": spec.names})
        self.intercept_ = float(np.ravel(est.intercept_)[0])
        self.n_iter_ = est.n_iter_
        self.history_ = est.history_

    def _fit_pointwise(self, spec, fields):
        if self.family != "gaussian":
            return self._fit_pointwise_glm(spec, fields)
        p = fields.p + 1
        if fields.in_process:
            coef, count = self._solve_in_process(fields, p)
        else:
            coef, count = self._solve_lazily(spec, fields, p)
        if not np.any(count > 0):
            raise InputError(
                f"every cell of {self.target!r} or its features is masked (NaN) or has zero weight: nothing to fit"
            )
        self.n_iter_ = 1
        self._set_pointwise(spec, fields, coef, count, np.zeros(count.shape, dtype=bool))

    def _solve_in_process(self, fields, p):
        """The least-squares cells of a grid that is one NumPy block (see
        :class:`~._design.Fields`): the dask path's block functions called directly,
        the same values (its time-axis sum over one block is that block)."""
        from .._engine.runtime.monitor import progress_bar

        bar = progress_bar(self.verbose, 1, f"{type(self).__name__} (pointwise)", "chunk")
        try:
            total = cell_stats(fields.order, fields.y, fields.weight, *fields.full, *fields.time)[0]
            coef = solve_cells(total, p, float(self.alpha))
            if bar is not None:
                bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        return coef, total[..., -1]

    def _solve_lazily(self, spec, fields, p):
        """The least-squares cells of a lazy grid: the statistics per block, merged
        over the time chunks, solved per spatial chunk (see ``model``)."""
        index = "t" + "abcdefgh"[: len(spec.sample_dims) - 1]
        stats = da.blockwise(
            cell_stats, index + "s", fields.order, None, *fields.blockwise_args(index),
            new_axes={"s": n_cell_stats(p)}, adjust_chunks={"t": lambda n: 1}, dtype=np.float64,
            meta=np.empty((0,) * (len(index) + 1)),  # the statistics come back to the host
        )
        merge = functools.partial(merge_cell_stats, p=p)
        total = da.reduction(  # over the time chunks only
            stats, chunk=stats_as_they_are, combine=merge, aggregate=merge, axis=0, dtype=np.float64,
            split_every=self.split_every, concatenate=True, meta=np.empty((0,) * len(index)),
        )
        coef = total.map_blocks(solve_cells, p, float(self.alpha), chunks=total.chunks[:-1] + ((p,),),
                                dtype=np.float64)
        return self._compute_with_progress(coef, total[..., -1])

    def _fit_pointwise_glm(self, spec, fields):
        from ._pointwise_glm import fit_cells

        client = task_client(self.client) or _default_client()  # the cluster whose memory holds the state
        coef, count, passes, records, separated = fit_cells(
            fields, self.family, self.alpha, self.tol, self.max_iter, self.split_every, client, self.target,
            max_time=self.max_time, callbacks=self.callbacks, verbose=self.verbose,
            desc=f"{type(self).__name__} (pointwise {self.family})", separation=self.alpha == 0,
        )  # a penalty (alpha > 0) gives every cell a finite fit: no separation to find
        self.n_iter_ = passes
        self._history_records = (records, {})  # history_ is made from them when first read (LazyHistory)
        if separated is None:
            separated = np.zeros(coef.shape[:-1], dtype=bool)
        self._set_pointwise(spec, fields, coef, count, separated)
        if separated.any():
            self._warn_separated()

    def _warn_separated(self):
        """The ``ConvergenceWarning`` naming the separated cells (see ``separated_``)."""
        sep = self.separated_
        cells = np.argwhere(sep.values)
        shown = []
        for idx in cells[:3]:
            parts = []
            for d, i in zip(sep.dims, idx):
                value = sep[d].values[i] if d in sep.coords else i
                parts.append(f"{d}={value.item() if hasattr(value, 'item') else value}")
            shown.append("(" + ", ".join(parts) + ")")
        more = f" and {len(cells) - 3} more" if len(cells) > 3 else ""
        what = ("0 on one side of the features and 1 on the other" if self.family == "binomial"
                else "counts 0 on one side of the features")
        warnings.warn(
            f"{len(cells)} grid cell(s) of {self.target!r} are separated ({what}): their maximum-likelihood "
            f"estimate does not exist: their coefficients grew until the fit stopped, and they predict 0 or 1 "
            f"(poisson: 0) on the separated side: {', '.join(shown)}{more}; they are listed in separated_; pass "
            "alpha > 0 for a finite penalised fit",
            ConvergenceWarning, stacklevel=user_stacklevel(),
        )

    def _set_pointwise(self, spec, fields, coef, count, separated):
        space = spec.space_dims()
        coords = {name: c for name, c in fields.coords.items() if c.dims and set(c.dims) <= set(space)}
        names = {"feature": spec.names}
        self.intercept_ = xr.DataArray(coef[..., 0], dims=space, coords=coords, name="intercept")
        self.coef_ = xr.DataArray(coef[..., 1:], dims=space + ("feature",), coords={**coords, **names}, name="coef")
        self.n_samples_ = xr.DataArray(count.astype(np.int64), dims=space, coords=coords, name="n_samples")
        self.separated_ = xr.DataArray(separated, dims=space, coords=coords, name="separated")
        self._coef_table = coef

    @property
    def time_origin_(self):
        rule = getattr(self.spec_, "time_rule", None)  # no spec_ before a fit: no attribute
        return None if rule is None else rule.origin_date

    # ----------------------------------------------------------------- predict
    def predict(self, ds):
        """The target predicted on every cell of ``ds``, lazily.

        A pooled model predicts on any grid.  A pointwise model predicts on the cells of
        ``ds`` that are cells of its fitted grid: each spatial dimension with 1-D
        coordinate values is matched by value to the fitted grid's (within ``1e-6`` of
        their magnitude and 1% of the grid's spacing, so float32 and float64 values of
        one grid match), in any order and any subset; a longitude in degrees (classified
        X, with units ``degrees_east``, standard_name ``longitude`` or the name
        ``lon``/``longitude``) modulo 360, so a model fitted on 0..360 predicts on
        -180..180 and the other way round.  Each cell's coefficients are those fitted
        for it; the output has the coordinates of ``ds``.  A spatial dimension without
        coordinate values (in ``ds`` or at fit), e.g. a curvilinear grid's ``(y, x)``,
        is matched by position: it must have the fitted size.

        Parameters
        ----------
        ds : xarray.Dataset
            The features (the target is not needed).

        Returns
        -------
        xarray.DataArray
            The ``sample_dims`` of ``ds`` with their coordinates, the target's name and
            attributes; NaN where a feature is NaN (or, pointwise, where the cell had no
            training data).  Poisson: the expected count; binomial: the probability.
            Its dask blocks are of the array type of the Dataset's blocks, on their
            device (CuPy-backed data gives CuPy predictions), whatever the model was
            fitted on.

        Raises
        ------
        InputError
            ``ds`` lacks a feature or sample dimension; pointwise: a cell of ``ds`` is
            not on the fitted grid (the message names the dimension, how many values
            and the first ones, and how to take the fitted cells:
            ``ds.reindex(lon=model.coef_.lon, method="nearest", tolerance=...)`` or
            ``ds.interp(...)``, in the fitted longitude convention first),
            or a dimension matched by position has another size.
        """
        check_is_fitted(self, "coef_")
        spec = self.spec_  # the settings of the fit, not parameters changed since
        family = getattr(self, "family_", self.family)  # a model saved before family_ existed
        spec.check(ds, need_target=False)
        fields = Fields(spec, ds, need_target=False)
        index = "t" + "abcdefgh"[: len(spec.sample_dims) - 1]
        args = fields.blockwise_args(index, with_target=False)  # the weights (for the shape), the fields
        if self.model == "pointwise":
            table = grid_table(self.grid_, self._coef_table, spec.space_dims(), ds)
            coef = da.from_array(table, chunks=fields.grid_chunks[1:] + ((table.shape[-1],),))
            out = da.blockwise(pointwise_block, index, fields.order, None, family, None, coef, index[1:] + "p",
                               *args,
                               concatenate=True, dtype=np.float64, meta=fields.meta(len(index)))
        else:
            coef = np.asarray(self.coef_.values, dtype=np.float64)
            out = da.blockwise(pooled_block, index, fields.order, None, coef, None, self.intercept_, None,
                               family, None, *args, dtype=np.float64, meta=fields.meta(len(index)))
        pred = xr.DataArray(out, dims=spec.sample_dims, coords=fields.coords, name=spec.target,
                            attrs=dict(self.target_attrs_))
        return pred.transpose(*fields.out_dims)

    def evaluate(self, ds):
        """Area-weighted skill on ``ds``: ``{"r2": ..., "rmse": ..., "n": cells scored}``.

        Cells where the target or the prediction is NaN are left out; weights are the
        cells' area weights, by the fit's rule on ``ds`` (see ``area_weights``; ones
        with ``area_weights=False``).  A binomial model fitted
        with ``trials`` compares the observed proportion ``successes / trials`` with the
        predicted probability, weighted by the trials times the area weight (values
        with 0 or NaN trials left out).
        """
        check_is_fitted(self, "coef_")
        spec = self.spec_
        spec.check(ds, need_target=True)
        _check_trials(spec, ds)
        fields = Fields(spec, ds, need_target=True)
        pred = self.predict(ds).transpose(*spec.sample_dims).data
        index = "t" + "abcdefgh"[: len(spec.sample_dims) - 1]
        extra = () if fields.trials is None else (fields.trials, index)
        sums = da.blockwise(score_block, index + "s", fields.y, index, pred, index, fields.weight, index[1:], *extra,
                            new_axes={"s": 5}, adjust_chunks={i: (lambda n: 1) for i in index}, dtype=np.float64,
                            meta=np.empty((0,) * (len(index) + 1)))
        (sums,) = self._compute(sums.sum(axis=tuple(range(len(index))), split_every=self.split_every))
        sw, swy, swy2, swe2, n = (float(v) for v in sums)
        if sw <= 0:
            raise InputError("no cell has both a target and a prediction to score")
        mean = swy / sw
        ss_tot = swy2 - sw * mean * mean
        ss_res = swe2
        return {"r2": float(1.0 - ss_res / ss_tot) if ss_tot > 0 else float("nan"),
                "rmse": float(np.sqrt(ss_res / sw)), "n": int(n)}

    def score(self, ds, y=None):
        """Area-weighted coefficient of determination R^2 on ``ds``."""
        return self.evaluate(ds)["r2"]


def _check_trials(spec, ds):
    """With binomial ``trials``: refuse negative trials, negative successes and
    successes above the trials (values where either is NaN are masked, not checked),
    naming the first such cell.  One reduction over the target and the trials."""
    name = getattr(spec, "trials", None)
    if name is None:
        return
    k, n = ds[spec.target], ds[name]
    bad = xr.apply_ufunc(_bad_counts, k, n, dask="parallelized", output_dtypes=[bool])  # in the blocks' namespace
    if not bool(bad.any()):
        return
    bad = bad.transpose(*[d for d in spec.sample_dims if d in bad.dims])
    first = tuple(int(i) for i in np.argwhere(np.asarray(bad.values))[0])
    at = dict(zip(bad.dims, first))
    kv, nv = (float(np.asarray(_host(v.isel(at, missing_dims="ignore").data))) for v in (k, n))
    where = ", ".join(f"{d}={_coord_value(ds, d, i)}" for d, i in at.items())
    n_bad = int(bad.sum())
    raise InputError(
        f"{spec.target!r} counts successes out of trials={name!r}: they need 0 <= successes <= trials; "
        f"{n_bad} value(s) do not, the first at {where} (successes={kv:g}, trials={nv:g}); fix the data "
        "or mask those values with NaN"
    )


def _host(a):
    from ._namespace import to_host

    return to_host(a.compute() if hasattr(a, "compute") else a)


def _bad_counts(kb, nb):
    """Where both are finite and not 0 <= successes <= trials, as NumPy (any namespace)."""
    from ._namespace import align, to_host

    xp, (kb, nb) = align(kb, nb)
    both = xp.isfinite(kb) & xp.isfinite(nb)
    return np.asarray(to_host(both & ((nb < 0) | (kb < 0) | (kb > nb))))


def _coord_value(ds, dim, i):
    if dim not in ds.coords:
        return i
    value = ds[dim].values[i]
    return value.item() if hasattr(value, "item") and not isinstance(value, np.datetime64) else value


def _is_default(value, default):
    return value is default or (type(value) is type(default) and value == default)


def _default_client():
    """The default distributed client, or None (then dask computes locally)."""
    try:
        from distributed import default_client

        return default_client()
    except (ImportError, ValueError):
        return None


def _assemble(values, shape):
    """Computed blocks (in C order of the block grid ``shape``) as one array."""
    grid = np.empty(shape, dtype=object)
    for index, value in zip(np.ndindex(*shape), values):
        grid[index] = value
    return np.block(grid.tolist()) if grid.ndim else values[0]
