"""LinearRegression and PoissonRegressor."""

import numpy as np
from sklearn.base import RegressorMixin
from sklearn.metrics import d2_tweedie_score, r2_score

from .._backend import get_namespace
from .._docstrings import other_parameters
from .._params import init_from
from .._validation import one_fit_at_a_time
from ..exceptions import InputError
from ..losses import HalfPoisson, HalfSquaredError, LinearObjective
from ._base import TRAINING_PARAMETERS, DGDLinearModel, linear_docstring, linear_signature


def _exp_block(raw):
    """Poisson's inverse link, in the block's namespace."""
    return get_namespace(raw).exp(raw)

__all__ = ["LinearRegression", "PoissonRegressor"]

#: The training parameters and the attributes of a single-output regressor's docstring.
regressor_docstring = other_parameters(TRAINING_PARAMETERS, attributes="""\
coef_ : ndarray of shape (n_features,)
intercept_ : float
n_features_in_, feature_names_in_, n_iter_, converged_, loss_curve_, history_, solver_
    As in :class:`~dask_dgd.LinearRegression`.""")


@init_from(linear_signature(alpha=0.0))
class _Regressor(RegressorMixin, DGDLinearModel):
    """Common fit/partial_fit/predict of the single-output regressors."""

    _loss = None

    def _objective(self, n_features, offset=False):
        return LinearObjective(self._loss, n_features, fit_intercept=self.fit_intercept, offset=offset)

    def _check_target(self, summaries):
        """Raise for targets the loss cannot take; return the baseline intercept."""
        wsum = sum(s["weight_sum"] for s in summaries)  # > 0, checked in _prepare
        return [sum(s["wy_sum"] for s in summaries) / wsum]

    def _offset_start(self, summaries, baseline):
        """The starting intercept ``baseline`` (of a fit without offset) moved by minus
        the weighted mean offset: the optimum at zero coefficients for the identity
        link, a start of the right scale for the others."""
        wsum = sum(s["weight_sum"] for s in summaries)
        return [baseline[0] - sum(s["wo_sum"] for s in summaries) / wsum]

    def _baseline(self, summaries, offset):
        baseline = self._check_target(summaries)
        return baseline if offset is None else self._offset_start(summaries, baseline)

    @one_fit_at_a_time
    def fit(self, X, y, sample_weight=None, resume=False, offset=None):
        """Fit the model by distributed gradient descent.

        Parameters
        ----------
        X : array-like, sparse matrix, dask array or dask DataFrame of shape (n_samples, n_features)
            Training data; a dask array must have a single chunk along columns.
        y : array-like or dask array of shape (n_samples,)
            Targets.
        sample_weight : array-like or dask array of shape (n_samples,), default=None
            Non-negative weights of the samples.
        resume : bool, default=False
            Continue from the checkpoint in the ``checkpoint`` folder (written by an
            interrupted fit of the same settings on the same data) instead of starting
            afresh; the result is that of the uninterrupted fit.  Without a checkpoint
            there yet, the fit starts afresh.
        offset : array-like, dask array or Series of shape (n_samples,), default=None
            Known terms added to the linear predictor with their coefficient fixed at 1
            (``eta = X @ coef + intercept + offset``), as statsmodels' and glum's
            ``offset``: ``np.log(exposure)`` makes a log-link model one of rates per unit
            of exposure.  Must be finite; a dask offset must be partitioned like ``X``.
            Pass the offset of new rows to :meth:`predict` too.

        Returns
        -------
        self : object
            The fitted estimator.

        Raises
        ------
        InputError
            For an offset of the wrong length or shape, non-numeric, or with NaN/inf.
        """
        self._validate_params()
        shards, summaries, _ = self._prepare(X, y, sample_weight, split=True, offset=offset, n_offsets=1)
        baseline = self._baseline(summaries, offset)
        self._fit(shards, self._objective(self.n_features_in_, offset is not None), baseline, resume=resume)
        return self

    @one_fit_at_a_time
    def partial_fit(self, X, y, sample_weight=None, offset=None):
        """One pass of mini-batch steps over ``X`` (``batch_size`` rows a step, 256 if None).

        Optimizer state and the learning rate carry over between calls, so a stream of
        batches (or dask-ml's ``Incremental``) trains one model.  ``offset`` as in
        :meth:`fit`, for these rows.

        Returns
        -------
        self : object
        """
        first = self._partial_starts()
        shards, summaries, _ = self._prepare(X, y, sample_weight, reset=first, offset=offset, n_offsets=1)
        baseline = self._baseline(summaries, offset) if first else None
        self._partial(shards, self._objective(self.n_features_in_, offset is not None), baseline)
        return self

    def predict(self, X, offset=None):
        """Predicted targets: NumPy for in-memory ``X``, a lazy dask array for dask ``X``
        (blocks of ``X``'s namespace, e.g. CuPy, on its device).  ``offset`` (shape
        (n_samples,), as in :meth:`fit`) is added to the linear predictor before the
        inverse link: ``exp(X @ coef_ + intercept_ + offset)`` for a log link."""
        return self._raw(X, post=self._inverse_link_block, offset=offset)

    def score(self, X, y, sample_weight=None, offset=None):
        """R² of the predictions (lazy inputs are computed together)."""
        y_pred, y, sample_weight = _computed(self.predict(X, offset=offset), y, sample_weight)
        return r2_score(y, y_pred, sample_weight=sample_weight)

    #: Inverse link applied to each block's linear predictor (None: identity).
    _inverse_link_block = None


@linear_docstring
class LinearRegression(_Regressor):
    """Least squares (optionally ridge, lasso or elastic-net) by distributed DGD.

    Minimises the sample-weighted mean of ``0.5 * (y - X @ coef - intercept) ** 2`` plus
    ``alpha * (l1_ratio * ||coef||_1 + (1 - l1_ratio) / 2 * ||coef||_2^2)``.

    Parameters
    ----------
    alpha : float, default=0.0
        Penalty strength; 0 is ordinary least squares.  scikit-learn's ``Ridge(alpha=a)``
        on ``n`` samples is ``alpha = a / n`` here (its loss is a sum, ours a mean);
        ``ElasticNet``/``Lasso`` use the same ``alpha`` and ``l1_ratio`` as we do.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
    intercept_ : float
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when X had string column names.
    n_iter_ : int
        Solver iterations (SGD: epochs).
    converged_ : bool
        Whether the fit met its tolerance (False after a ``ConvergenceWarning``).
    loss_curve_ : list of float
        Objective value at each step.
    history_ : pandas.DataFrame
        One record per distributed step (see the user guide's Monitoring section);
        ``history_.attrs["coordinates"]`` says whether its gradients are of the data's
        columns or of the centred and scaled ones the solver ran in.
    solver_ : str
        The solver actually used (``"auto"`` resolved).

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd import LinearRegression
    >>> X = np.arange(20.0).reshape(10, 2); y = X @ [1.0, -2.0] + 3.0
    >>> LinearRegression(tol=1e-10).fit(X, y).predict(X[:2]).round(6)
    array([ 1., -1.])
    """

    _loss = HalfSquaredError()


@regressor_docstring
@init_from(linear_signature(alpha=1.0))
class PoissonRegressor(_Regressor):
    """Poisson regression with a log link, by distributed DGD.

    Minimises the sample-weighted mean of ``exp(eta) - y * eta`` (half the Poisson
    deviance up to a constant), ``eta = X @ coef + intercept``, plus
    ``alpha * (l1_ratio * ||coef||_1 + (1 - l1_ratio) / 2 * ||coef||_2^2)``: the same
    objective as scikit-learn's ``PoissonRegressor(alpha=...)`` when ``l1_ratio=0``.

    Parameters
    ----------
    alpha : float, default=1.0
        Penalty strength (scikit-learn's default too).

    Notes
    -----
    ``score`` is D², the fraction of Poisson deviance explained (scikit-learn's
    ``PoissonRegressor.score``).  Targets must be non-negative with a positive sum.
    """

    _loss = HalfPoisson()

    def _check_target(self, summaries):
        y_min = min(s["y_min"] for s in summaries)
        wy = sum(s["wy_sum"] for s in summaries)
        if y_min < 0:
            raise InputError(
                f"PoissonRegressor requires non-negative y (counts or rates); the smallest "
                f"value is {y_min}"
            )
        if wy <= 0:
            raise InputError("PoissonRegressor requires y with a positive (weighted) sum")
        mean = super()._check_target(summaries)[0]
        return [np.log(mean)]

    def _offset_start(self, summaries, baseline):
        """``log(sum(w * y) / sum(w * exp(offset)))``: the optimum intercept at zero
        coefficients (``baseline`` is ``log(mean(y))``)."""
        top = max(s["o_max"] for s in summaries)
        log_w_exp_o = top + np.log(sum(s["w_exp_o"] * np.exp(s["o_max"] - top) for s in summaries if s["w_exp_o"]))
        wsum = sum(s["weight_sum"] for s in summaries)
        return [baseline[0] + (np.log(wsum) - log_w_exp_o)]  # exactly baseline for zero offsets

    _inverse_link_block = staticmethod(_exp_block)

    def score(self, X, y, sample_weight=None, offset=None):
        """D², the fraction of Poisson deviance explained (1 is perfect)."""
        y_pred = self.predict(X, offset=offset)
        y_pred, y, sample_weight = _computed(y_pred, y, sample_weight)
        return d2_tweedie_score(y, y_pred, sample_weight=sample_weight, power=1)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.positive_only = True
        return tags


def _computed(*arrays):
    """Host NumPy versions of possibly lazy arrays (of any namespace, e.g. CuPy blocks),
    computed together; scikit-learn's metrics then score them."""
    import dask
    import dask.array as da

    from .._backend import is_device_array, to_numpy

    lazy = [a.to_delayed().ravel().tolist() if isinstance(a, da.Array) else a for a in arrays]
    done = dask.compute(*lazy)  # blocks, not concatenated: dask joins only NumPy-like ones
    out = []
    for a, value in zip(arrays, done):
        if isinstance(a, da.Array):
            parts = [to_numpy(b) for b in value]
            value = np.concatenate(parts) if parts else np.empty((0,) + a.shape[1:], dtype=a.dtype)
        elif value is not None and is_device_array(value):
            value = to_numpy(value)
        out.append(value)
    return tuple(out)
