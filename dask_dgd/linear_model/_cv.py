"""Cross-validated regularization paths: every fold and every penalty in one pass over X.

The machinery every cross-validated estimator shares (:class:`_PathCV`, its signature
and parameters' documentation, the fold helpers) and :class:`ElasticNetCV`; the
logistic regression's is in :mod:`~dask_dgd.linear_model._cv_logistic`, the other
families' in :mod:`~dask_dgd.linear_model._cv_families`.  Each fits
``n_folds x n_alphas`` models as one stacked problem (:mod:`dask_dgd.losses._path`)
through the one engine (:func:`dask_dgd._engine.train.train`): each block of rows
evaluates the coefficient vectors it is asked for with one product ``X @ W``, the folds
are per-row masks computed on the workers, the held-out scores are sums computed where
the rows live, and the best penalty is refitted on all rows by the ordinary estimator.
Single-output families take IRLS coordinate descent along the path by default
(:mod:`dask_dgd._engine.solvers.cd_path`: one penalty at a time, all folds in the same passes);
least squares its exact path from the folds' Gram matrices (:mod:`dask_dgd._engine.solvers.gram_path`).
"""

import numbers
import warnings

import dask
import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from .._backend import asarray_like, get_namespace, is_sparse, to_numpy
from .._engine.capabilities import newton_auto_work
from .._engine.objective import PathTraining
from .._engine.solvers.gram_path import alpha_max_of, fold_paths, fold_sums, solve_path
from .._engine.solvers.newton import cd_max_params
from .._engine.train import train
from .._params import init_from, signature
from .._validation import ClientParamMixin, Interval, Options, one_fit_at_a_time, user_stacklevel, validate_params
from ..exceptions import ConvergenceWarning, InputError, ParameterError
from ..losses import HalfSquaredError
from ..losses._path import PathObjective, PathPenalty, fold_ids
from ._cv_params import _COMMON_CONSTRAINTS, _grid_like, _ratios_like
from ._glm import LinearRegression

__all__ = ["ElasticNetCV", "fold_ids"]

#: Penalties (per fold) trained together, from the largest to the smallest, each group
#: warm-started from the previous group's solutions; None trains the whole path at once.
#: 5 penalties x 5 folds = 25 columns: enough for a matrix-matrix product, few enough
#: that warm starts along the path pay. On 10,000 x 30 synthetic data (5 folds x 20
#: penalties) groups of 5 took 43 iterations in all (11 per group) against 46 for the
#: whole path at once, each pass with a quarter of the columns: 2.0 s against 7.6 s
#: (elastic net) and 1.7 s against 8.4 s (logistic), in process on a loaded machine.
PATH_GROUP = 5

#: The smallest l1_ratio the default alpha grid divides by (glmnet's and glum's choice
#: for ridge paths, where the lasso's alpha_max would be infinite).
MIN_GRID_L1_RATIO = 1e-3


def _block_starts(shards):
    return tuple(int(v) for v in np.concatenate([[0], np.cumsum(shards.block_rows)[:-1]]))


def _block_fold_stats(b, path):
    """One block's folds' weights and weighted target sums, and ``X^T`` times the
    weights and the weighted targets of each fold (``(d, n_folds)`` each), flat."""
    F = path.n_folds
    n = b.X.shape[0]
    folds = path.folds_of(b.index, n)
    y = np.asarray(to_numpy(b.y), dtype=np.float64).reshape(n)
    X, o = path.features_and_offset(b.X)
    if o is not None and isinstance(path.loss, HalfSquaredError):  # least squares regresses y - offset
        y = y - np.asarray(to_numpy(o), dtype=np.float64).reshape(n)
    w = np.ones(n) if b.sample_weight is None else np.asarray(to_numpy(b.sample_weight), np.float64).reshape(n)
    onehot = np.zeros((n, F))
    onehot[np.arange(n), folds] = w
    M = np.concatenate([onehot, onehot * y[:, None]], axis=1)
    if is_sparse(X) or isinstance(X, np.ndarray):
        XtM = X.T @ M
    else:  # another namespace (CuPy): the product where X lives, in its floating dtype
        xp = get_namespace(X)
        dtype = X.dtype if xp.isdtype(X.dtype, "real floating") else xp.float64
        XtM = to_numpy(xp.astype(X, dtype, copy=False).T @ xp.astype(asarray_like(M, X), dtype))
    XtM = np.asarray(XtM, dtype=np.float64).reshape(path.n_features, 2 * F)
    return np.concatenate([onehot.sum(axis=0), (onehot * y[:, None]).sum(axis=0), XtM[:, :F].ravel(),
                           XtM[:, F:].ravel()])


def _block_held_out(b, path, params):
    """One block's held-out sums of every column (:meth:`PathObjective.held_out_sums`), flat."""
    sums = path.held_out_sums(params, b.X, b.y, b.sample_weight, b.index)
    return np.concatenate([sums[k] for k in path.held_out_keys])



def cv_signature(*family, l1_ratio=0.0, eps=1e-6, scoring=True):
    """The ``__init__`` signature of a cross-validated GLM path: the family's own
    parameters (``(name, default)``), the grid, the folds, the solver, the fit's limits
    and the cluster (``scoring``: whether the estimator takes one)."""
    return signature(
        *family, ("l1_ratio", l1_ratio), ("eps", eps), ("alphas", 100), *(("scoring",) if scoring else ()),
        "fit_intercept", ("cv", 5), "solver", ("max_iter", 1000), "tol", "random_state", "verbose", "client",
    )


#: The numpydoc entries of the parameters every path CV estimator shares (the tail of
#: :func:`cv_signature`), after each estimator's own in its docstring.
_REGRESSOR_DOC_PARAMS = """
    fit_intercept : bool, default=True
        Whether to fit an intercept (never penalised).
    cv : int, default=5
        Number of folds.  Fold membership is computed on the workers from
        ``random_state`` and each row's position in the data
        (:func:`~dask_dgd.linear_model._cv.fold_ids`): folds are balanced within one row,
        as ``KFold(shuffle=True)``, and do not depend on the chunking nor on which worker
        holds a block.  scikit-learn splitters are not accepted: they need the rows'
        positions on the driver.
    solver : {"auto", "cd", "lbfgs", "gd"}, default="auto"
        "cd": for least squares (:class:`ElasticNetCV`), the exact path: one pass
        over ``X`` computing every fold's Gram matrix, then coordinate descent on the
        driver for every fold and penalty (:mod:`~dask_dgd._engine.solvers.gram_path`); for
        the other families (binary and multinomial logistic, Poisson, Gamma, Tweedie,
        negative binomial, binomial), IRLS coordinate descent along the path, one
        penalty at a time with every fold's Hessian from one Gram matrix's work per
        pass (one per pair of classes for the multinomial), each model's steps and
        stop rule on standardised columns (:mod:`~dask_dgd._engine.solvers.cd_path`).
        "lbfgs" (smooth penalties) and "gd" (proximal gradient, for L1) train the
        stacked path in warm-started groups of penalties.  "auto" picks "cd" up to
        ``dgd.cd-max-params`` (1024) parameters per model (the multinomial's
        ``(n_features + 1) * n_classes``, only with ``dgd.scale-features`` on, and for an
        L2 path only while ``n_samples * params**2`` is at most ``dgd.newton-auto-work``,
        one model's rule for Newton steps), else "gd" for a path with an L1 part, else
        "lbfgs".
    max_iter : int, default=1000
        Iterations of the path's solver per group of penalties (and of the refit); with
        "cd", passes per penalty, and ``n_iter_`` counts passes (the exact least-squares
        path: the pass of the Gram matrices as one).  ``LogisticRegressionCV`` too, not
        scikit-learn's 100 (its 100 a fit): the multinomial path's L-BFGS steps all
        folds and penalties of a group at once, and needed 91-338 iterations on ten
        real sets where their weakly penalised columns converge, more where classes
        separate.
    tol : float, default=1e-4
        Stop when the largest entry of every column's (proximal) gradient ("cd": its
        minimum-norm subgradient) is at most ``tol``; the refit uses the same tolerance.
    random_state : int or None, default=None
        Seed of the fold assignment (None: 0; the folds are always reproducible).
    verbose : int, default=0
    client : distributed.Client or None, default=None
        As :class:`~dask_dgd.LinearRegression`'s."""


class _PathCV(ClientParamMixin, BaseEstimator):
    """Shared machinery of the cross-validated paths (not public)."""

    #: scikit-learn scorer names computed from held-out sums, and the default
    _scorers = ()
    _default_scoring = None

    def _validate_params(self):
        validate_params(self)

    def _seed(self):
        return 0 if self.random_state is None else int(self.random_state)

    def _check_scoring(self):
        scoring = getattr(self, "scoring", None)
        if scoring is None:
            return self._default_scoring
        if callable(scoring) or scoring not in self._scorers:
            raise ParameterError(
                f"{type(self).__name__} computes the held-out scores as sums where the rows live; "
                f"scoring must be None or one of {list(self._scorers)}, got {scoring!r} (a callable scorer "
                "would need every fold's rows gathered to the driver)"
            )
        return scoring

    def _fold_stats(self, shards, path):
        flat = shards.tree_sum(_block_fold_stats, path, name="dgd-cv-folds")  # the fixed block tree's sum
        F, d = path.n_folds, path.n_features
        fw, fwy = flat[:F], flat[F:2 * F]
        Xtw, Xtwy = flat[2 * F:2 * F + d * F].reshape(d, F), flat[2 * F + d * F:].reshape(d, F)
        empty = np.flatnonzero(fw <= 0)
        if len(empty):
            raise InputError(
                f"cv={self.cv} folds need rows with positive weight in every fold; fold {int(empty[0])} has "
                f"none (the data have {int(np.sum(shards.block_rows))} rows): use a smaller cv"
            )
        return fw, fwy, Xtw, Xtwy

    @staticmethod
    def _alpha_max(fw, fwy, Xtw, Xtwy, fit_intercept):
        """scikit-learn's ``alpha_max * l1_ratio`` on all rows: ``max |X^T s (y - ybar)| / sum(s)``."""
        W, WY = fw.sum(), fwy.sum()
        Xy = Xtwy.sum(axis=1) - (WY / W if fit_intercept else 0.0) * Xtw.sum(axis=1)
        return float(np.max(np.abs(Xy), initial=0.0)) / W

    def _grid(self, alphas, eps, alpha_max_l1, l1_ratio):
        """Descending alpha grid (scikit-learn's ``_alpha_grid``)."""
        if not isinstance(alphas, numbers.Integral):
            return np.sort(np.asarray(alphas, dtype=np.float64))[::-1]
        top = alpha_max_l1 / max(l1_ratio, MIN_GRID_L1_RATIO)
        if top <= np.finfo(float).resolution:
            return np.full(int(alphas), np.finfo(float).resolution)
        return np.geomspace(top, top * eps, num=int(alphas))

    def _run_path(self, shards, loss, n_features, baseline, strengths, seed, score_shards=None, offset=False):
        """Train the stacked path of ``strengths`` (array ``(P, F, 2)`` of the L1 and L2
        strengths of penalty ``p`` (largest first) in fold ``f``) and score it.

        Returns ``coef (P, F, d)``, ``intercept (P, F)`` (a last axis of ``m`` for a loss
        with ``m > 1`` outputs; ``baseline`` then has ``m`` entries), the held-out sums
        (each ``(P, F)``, over ``score_shards`` if given) and the iterations of each group."""
        P, F, _ = strengths.shape
        starts = _block_starts(shards)
        solver = self._path_solver(loss, n_features, shards.n_rows, bool(np.any(strengths[..., 0] > 0)))
        group = P if PATH_GROUP is None or solver == "cd" else int(PATH_GROUP)  # cd walks the path itself
        tail = (loss.n_outputs,) if loss.n_outputs > 1 else ()
        coef, icpt = np.zeros((P, F, n_features) + tail), np.zeros((P, F) + tail)
        warm_coef, warm_icpt = np.zeros((F, n_features) + tail), np.zeros((F,) + tail) + np.asarray(baseline, float)
        n_iter, converged, unscaled = [], True, not dask.config.get("dgd.scale-features", True)
        for lo in range(0, P, group):
            hi = min(lo + group, P)
            cols = [(p, f) for p in range(lo, hi) for f in range(F)]
            path = PathObjective(loss, n_features, tuple(f for _, f in cols), F, starts, seed, self.fit_intercept,
                                 offset)
            penalty = PathPenalty(n_features, self.fit_intercept, tuple(strengths[p, f, 0] for p, f in cols),
                                  tuple(strengths[p, f, 1] for p, f in cols), loss.n_outputs)
            group_solver = ("gd" if penalty.has_l1 else "lbfgs") if solver == "auto" else solver
            unscaled |= group_solver == "gd" and shards.sparse  # (train: a sparse path's proximal gradient)
            if group_solver == "lbfgs" and penalty.has_l1:
                raise ParameterError(
                    f"solver='lbfgs' cannot handle an L1 penalty (l1_ratio > 0); use solver='cd', 'gd' or 'auto' "
                    f"({type(self).__name__})"
                )
            params0 = path.pack(np.stack([warm_coef[f] for _, f in cols], axis=1),
                                np.array([warm_icpt[f] for _, f in cols]))
            result = train(PathTraining(path, penalty), shards, solver=group_solver, max_iter=self.max_iter,
                           tol=self.tol, tol_from_start=lo == 0,  # the first group starts at the null model
                           rebalance=False, random_state=seed, verbose=self.verbose, params0=params0,
                           progress_desc=type(self).__name__, client=self.client)
            c, b = path.unpack(result.params)
            for k, (p, f) in enumerate(cols):
                coef[p, f], icpt[p, f] = c[:, k], b[k]
            warm_coef, warm_icpt = coef[hi - 1].copy(), icpt[hi - 1].copy()
            n_iter.append(result.n_iter)
            converged &= result.converged
        if not converged:
            warnings.warn(
                f"{type(self).__name__}: the path did not converge in max_iter={self.max_iter} iterations; "
                + ("increase max_iter, loosen tol, or scale the features" if unscaled else
                   "increase max_iter (one solver steps all folds and penalties of a group at once and needs "
                   "more iterations than one model's fit) or loosen tol"), ConvergenceWarning,
                stacklevel=user_stacklevel(),
            )
        cols = [(p, f) for p in range(P) for f in range(F)]
        path = PathObjective(loss, n_features, tuple(f for _, f in cols), F, starts, seed, self.fit_intercept, offset)
        params = path.pack(np.stack([coef[p, f] for p, f in cols], axis=1), np.array([icpt[p, f] for p, f in cols]))
        scored = shards if score_shards is None else score_shards
        flat = scored.tree_sum(_block_held_out, path, params, name="dgd-cv-score")
        sums = dict(zip(path.held_out_keys, flat.reshape(-1, path.n_columns)))
        return coef, icpt, {k: v.reshape(P, F) for k, v in sums.items()}, n_iter

    def _path_solver(self, loss, n_features, n_rows, has_l1):
        """The stacked path's solver: "cd" (IRLS-CD along the path, :mod:`~dask_dgd._engine.solvers.cd_path`)
        when asked, or for "auto" with a loss that has a Hessian and at most
        ``dgd.cd-max-params`` parameters per model: a single-output loss, or the
        multinomial's ``hessian_blocks`` where the features are scaled, with an L1 part
        or a Hessian cheap enough for one model's "auto" to take Newton steps
        (``n_rows * params**2`` at most ``dgd.newton-auto-work``: a pass sums one Gram
        matrix per pair of classes); else the one asked ("auto": each group's "gd" or
        "lbfgs")."""
        if self.solver != "auto":
            return self.solver
        size = (n_features + self.fit_intercept) * loss.n_outputs
        if loss.n_outputs == 1:
            fits = getattr(loss, "has_hessian", False)
        else:
            fits = hasattr(loss, "hessian_blocks") and bool(dask.config.get("dgd.scale-features", True)) and (
                has_l1 or n_rows * size**2 <= newton_auto_work())
        return "cd" if fits and size <= cd_max_params() else "auto"

    @staticmethod
    def _score(sums, scoring):
        """Held-out score (higher is better) of every column from its sums."""
        w = sums["weight"]
        if scoring == "accuracy":
            return sums["correct"] / w
        if scoring == "neg_log_loss":
            return -sums["loss"] / w
        if scoring == "neg_mean_squared_error":
            return -sums["squared_error"] / w
        if scoring == "r2":
            return 1.0 - sums["squared_error"] / (sums["wyy"] - sums["wy"] ** 2 / w)
        if scoring in ("neg_mean_poisson_deviance",):
            return -sums["deviance"] / w
        raise AssertionError(scoring)  # _check_scoring allows only the names above

    def _keep_refit(self, est, path_iters):
        """Take the fitted attributes of ``est``, the refit on all rows; ``n_iter_`` adds
        the path's ``path_iters`` iterations to the refit's."""
        self.estimator_ = est
        self.coef_, self.intercept_ = est.coef_, est.intercept_
        self.n_features_in_ = est.n_features_in_
        if hasattr(est, "feature_names_in_"):
            self.feature_names_in_ = est.feature_names_in_
        self.n_iter_ = path_iters + est.n_iter_

    def _release(self, shards):
        release = getattr(shards, "release", None)
        if release is not None:
            release()


@init_from(cv_signature(l1_ratio=0.5, eps=1e-3, scoring=False))
class ElasticNetCV(RegressorMixin, _PathCV):
    # the docstring shares the parameters of every path CV estimator: an assignment, not a
    # docstring statement (a concatenation would leave __doc__ None)
    __doc__ = r"""Elastic-net least squares with the penalty chosen by cross-validation.

    Every fold and every alpha (and l1_ratio) is fitted in the same passes over ``X``;
    the alpha with the smallest mean held-out squared error is refitted on all rows by
    :class:`~dask_dgd.LinearRegression`.  The objective, as scikit-learn's
    ``ElasticNetCV``, is

    .. math:: \frac{1}{2 \sum_i s_i} \sum_i s_i (y_i - x_i^\top w - b)^2
              + \alpha \Big(\rho \lVert w \rVert_1 + \frac{1 - \rho}{2} \lVert w \rVert_2^2\Big).

    Parameters
    ----------
    l1_ratio : float or list of float in [0, 1], default=0.5
        :math:`\rho`; a list is searched as well (the best pair wins).
    eps : float, default=1e-3
        ``alpha_min / alpha_max`` of the default grid.
    alphas : int or list of float, default=100
        An int: that many alphas on a log scale from ``alpha_max`` (the smallest alpha
        whose solution on all rows is zero) down to ``eps * alpha_max``; a list: those.
""" + _REGRESSOR_DOC_PARAMS + r"""

    Attributes
    ----------
    alpha_, l1_ratio_ : float
        The chosen penalty.
    alphas_ : ndarray of shape (n_alphas,) or (n_l1_ratio, n_alphas)
        The grid, descending.
    mse_path_ : ndarray of shape (n_alphas, n_folds) or (n_l1_ratio, n_alphas, n_folds)
        Weighted mean squared error on each held-out fold.
    coefs_paths_ : ndarray of shape (n_folds, n_alphas, n_features + fit_intercept)
        Each fold's solutions (intercept last); an l1_ratio axis first for a list.
    coef_, intercept_ : the refitted model.
    estimator_ : LinearRegression
        The refitted model (``predict`` uses it).
    n_iter_ : int
        Iterations of the path's solver (summed over its groups) and of the refit.
    n_features_in_, feature_names_in_

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd.linear_model._cv import ElasticNetCV
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((200, 3))
    >>> y = X @ np.array([1.0, 0.0, -2.0]) + 0.1 * rng.standard_normal(200)
    >>> model = ElasticNetCV(alphas=5, cv=3, tol=1e-6).fit(X, y)
    >>> model.mse_path_.shape
    (5, 3)
    """

    _parameter_constraints = {
        **_COMMON_CONSTRAINTS,
        "l1_ratio": [_ratios_like],
        "eps": [Interval(numbers.Real, 0, None, "neither")],
        "alphas": [_grid_like],
        "solver": [Options("auto", "cd", "lbfgs", "gd")],
    }

    _loss = HalfSquaredError()
    _refit_class = LinearRegression
    #: least squares: the path can be solved exactly from the folds' Gram matrices
    _exact_gram = True

    def _refit_estimator(self):
        return self._refit_class(fit_intercept=self.fit_intercept, solver="auto", max_iter=self.max_iter,
                                 tol=self.tol, client=self.client)

    def _path_score(self, sums):
        return -sums["squared_error"] / sums["weight"]

    @one_fit_at_a_time
    def fit(self, X, y, sample_weight=None, offset=None):
        """Fit the path on every fold, choose the penalty, refit on all rows.

        Parameters
        ----------
        X : array-like, sparse matrix, dask array or dask DataFrame of shape (n_samples, n_features)
        y : array-like or dask array of shape (n_samples,)
        sample_weight : array-like or dask array of shape (n_samples,), default=None
        offset : array-like, dask array or Series of shape (n_samples,), default=None
            Known terms added to the linear predictor, coefficient fixed at 1, as the
            family estimator's ``offset`` (``np.log(exposure)`` for rates): every fold,
            the held-out scores and the refit use it.  Pass it to :meth:`predict` too.

        Returns
        -------
        self : object

        Raises
        ------
        ParameterError
            For a bad parameter.
        InputError
            For bad data, or a fold without rows.
        """
        self._validate_params()
        self._check_scoring()
        est = self._refit_estimator()
        est._validate_params()
        shards, summaries, _ = est._prepare(X, y, sample_weight, offset=offset, n_offsets=1)
        try:
            baseline = float(est._baseline(summaries, offset)[0])  # the target checks, with or without intercept
            baseline = baseline if self.fit_intercept else 0.0
            self._fit_shards(est, shards, baseline, offset is not None)
        finally:
            self._release(shards)
        return self

    def _fit_shards(self, est, shards, baseline, offset=False):
        d, F, seed = est.n_features_in_, int(self.cv), self._seed()
        probe = PathObjective(self._loss, d, (0,), F, _block_starts(shards), seed, self.fit_intercept, offset)
        stats = self._fold_stats(shards, probe)
        top = self._alpha_max(*stats, self.fit_intercept)
        ratios = np.atleast_1d(np.asarray(self.l1_ratio, dtype=np.float64))
        exact = self._exact_path(d)
        if exact:
            W = stats[0].sum()
            shift = np.append(stats[2].sum(axis=1) / W, stats[1].sum() / W) if self.fit_intercept else np.zeros(d + 1)
            sums = fold_sums(shards, probe, shift)
            top = alpha_max_of(sums.sum(axis=0), self.fit_intercept)  # from centred sums: no cancellation
        grids, scores, coefs, iters = [], [], [], 0
        for rho in ratios:
            grid = self._grid(self.alphas, self.eps, top, rho)
            if exact:
                coef, icpt, score, converged = fold_paths(sums, grid, rho, self.fit_intercept, self.tol, shift)
                iters += 1  # the pass of the fold sums
                if not converged:
                    warnings.warn(
                        f"{type(self).__name__}: coordinate descent on a fold's Gram matrix did not reach "
                        f"tol={self.tol} (collinear or badly scaled features?)", ConvergenceWarning,
                        stacklevel=user_stacklevel(),
                    )
            else:
                strengths = np.stack([np.stack([grid * rho, grid * (1 - rho)], axis=1)] * F, axis=1)
                coef, icpt, held, n_iter = self._run_path(shards, self._loss, d, baseline, strengths, seed,
                                                          offset=offset)
                score = self._path_score(held)
                iters += sum(n_iter)
            grids.append(grid)
            scores.append(score)
            coefs.append(np.concatenate([coef, icpt[:, :, None]], axis=2) if self.fit_intercept else coef)
        scores = np.stack(scores)  # (n_l1, P, F)
        mean = scores.mean(axis=2)
        i, j = np.unravel_index(np.argmax(mean), mean.shape)  # the first best, as scikit-learn
        self.alpha_, self.l1_ratio_ = float(grids[i][j]), float(ratios[i])
        self._store_path(np.stack(grids), scores, np.stack(coefs), single=np.ndim(self.l1_ratio) == 0)
        est.set_params(alpha=self.alpha_, l1_ratio=self.l1_ratio_)
        objective, params0 = est._objective(d, offset), None
        if exact:  # the refit starts at the exact solution on all rows: its first pass checks it
            c, b, _, _ = solve_path(sums.sum(axis=0), grids[i][: j + 1], self.l1_ratio_, self.fit_intercept,
                                    self.tol, shift)
            params0 = objective.pack(c[-1][:, None], np.array([b[-1]]) if self.fit_intercept else None)
        est._fit(shards, objective, [baseline], params0=params0)
        self._keep_refit(est, iters)

    def _exact_path(self, d):
        """Whether the path is solved exactly from the folds' Gram matrices (``"cd"``)."""
        return self._exact_gram and (self.solver == "cd" or (self.solver == "auto" and d + 2 <= cd_max_params()))

    def _store_path(self, grids, scores, coefs, single):
        coefs = coefs.transpose(0, 2, 1, 3)  # (n_l1, F, P, d + 1)
        self.alphas_ = grids[0] if single else grids
        self.mse_path_ = -scores[0] if single else -scores
        self.coefs_paths_ = coefs[0] if single else coefs

    def predict(self, X, offset=None):
        """Predictions of the refitted model (``offset`` as in :meth:`fit`, for these rows)."""
        check_is_fitted(self, "estimator_")
        return self.estimator_.predict(X, offset=offset)

    def score(self, X, y, sample_weight=None, offset=None):
        """R² of the refitted model's predictions."""
        check_is_fitted(self, "estimator_")
        return self.estimator_.score(X, y, sample_weight=sample_weight, offset=offset)
