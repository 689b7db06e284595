r"""The cross-validated logistic regression: :class:`LogisticRegressionCV`, its per-class
attributes (binary or multinomial) and the rows its held-out scores weigh.

:class:`LogisticRegressionCV` trains every (fold, ``C``)
model of a problem with ``m`` classes as ``m`` stacked parameter columns (a
:class:`~dask_dgd.losses.MultinomialLogistic` loss with ``n_outputs = m``, see
:mod:`dask_dgd.losses._path`); for two classes, one column of the binary loss.  Here the
path is laid out as scikit-learn's ``LogisticRegressionCV`` (its legacy attributes,
``use_legacy_attributes=True``): dictionaries keyed by class, each holding that class's
own coefficient path for the multinomial model, and the same held-out scores under
every key (the score of a fold is the model's, not a class's).

Class weights weigh the training rows only: as scikit-learn's, a held-out fold is
scored with its rows' sample weights (:func:`scoring_shards`).
"""

import numbers

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.utils.validation import check_is_fitted

from .._engine.data.blocks import encode_shard
from .._params import init_from, signature
from .._validation import Options, one_fit_at_a_time
from ..losses._path import PathObjective
from ._cv import _REGRESSOR_DOC_PARAMS, _block_starts, _PathCV
from ._cv_params import _COMMON_CONSTRAINTS, _grid_like, _ratios_like
from ._logistic import LogisticRegression, _class_weight_like

__all__ = ["LogisticRegressionCV", "path_attributes", "scoring_shards"]


def scoring_shards(shards, classes, class_weight):
    """The blocks the held-out scores are summed over, or None to use the training's.

    The training blocks carry ``sample_weight * class_weight[y]``; with class weights,
    the held-out rows are scored on blocks encoded a second time without them (the same
    ``X`` on the same workers, only ``y`` and the weights are new), so that the scores
    are scikit-learn's, and a class of weight 0 still counts in them.

    Parameters
    ----------
    shards : ShardSet
        The rows, labels not yet encoded.
    classes : ndarray of shape (n_classes,)
    class_weight : dict, "balanced" or None

    Returns
    -------
    ShardSet or None
    """
    if class_weight is None:
        return None
    return shards.transform(encode_shard, classes, None, name="dgd-encode-scoring", token_suffix="-scoring")


def path_attributes(classes, C, l1_ratio, scores, paths, single):
    """``C_``, ``l1_ratio_``, ``scores_`` and ``coefs_paths_`` as scikit-learn's.

    Parameters
    ----------
    classes : ndarray of shape (n_classes,)
    C, l1_ratio : float
        The chosen penalty.
    scores : ndarray of shape (n_folds, n_Cs, n_l1_ratios)
        Held-out score of every fold and penalty.
    paths : ndarray of shape (n_folds, n_Cs, n_l1_ratios, n_dof) or \
(n_folds, n_Cs, n_l1_ratios, n_dof, n_classes)
        The solutions (intercept last along ``n_dof``): one vector per model for two
        classes, one per class (last axis, in ``classes`` order) otherwise.
    single : bool
        Drop the ``n_l1_ratios`` axis (the estimator was given no ``l1_ratios``).

    Returns
    -------
    C_, l1_ratio_ : ndarray of shape (1,) or (n_classes,)
        The chosen penalty, repeated for every class of the multinomial model.
    scores_ : dict
        ``{class: scores}`` for ``classes[1]`` (binary) or every class.
    coefs_paths_ : dict
        ``{class: path}``, ``path`` of shape ``(n_folds, n_Cs, [n_l1_ratios,] n_dof)``:
        the binary model's under ``classes[1]``, or each class's own row of the
        multinomial coefficients under that class.

    Examples
    --------
    >>> import numpy as np
    >>> scores, paths = np.zeros((3, 4, 1)), np.zeros((3, 4, 1, 5, 3))
    >>> C_, _, scores_, paths_ = path_attributes(np.array(["a", "b", "c"]), 1.0, 0.0, scores, paths, True)
    >>> C_.tolist(), [str(c) for c in scores_], paths_["c"].shape
    ([1.0, 1.0, 1.0], ['a', 'b', 'c'], (3, 4, 5))
    """
    if single:
        scores, paths = scores[:, :, 0], paths[:, :, 0]
    if paths.ndim == scores.ndim + 1:  # binary: one model, reported under the positive class
        return np.array([float(C)]), np.array([float(l1_ratio)]), {classes[1]: scores}, {classes[1]: paths}
    n = len(classes)
    return (np.full(n, float(C)), np.full(n, float(l1_ratio)), {c: scores.copy() for c in classes},
            {c: np.ascontiguousarray(paths[..., j]) for j, c in enumerate(classes)})


#: LogisticRegressionCV's signature: scikit-learn's grid of ``Cs`` and ``l1_ratios``.
LOGISTIC_CV_SIGNATURE = signature(("Cs", 10), ("l1_ratios", None), "scoring", "class_weight", "fit_intercept",
                                  ("cv", 5), "solver", ("max_iter", 1000), "tol", "random_state", "verbose", "client")


@init_from(LOGISTIC_CV_SIGNATURE)
class LogisticRegressionCV(ClassifierMixin, _PathCV):
    # the docstring shares the parameters of every path CV estimator: an assignment, not a
    # docstring statement (a concatenation would leave __doc__ None)
    __doc__ = r"""Logistic regression (binary or multinomial) with ``C`` (and ``l1_ratio``) chosen by cross-validation.

    Every fold and every ``C`` is one column of a stacked problem (``n_classes``
    columns per model for more than two classes, the softmax loss), trained over the
    same passes over ``X``: by IRLS coordinate descent along the path (``solver="cd"``,
    and ``"auto"`` up to ``dgd.cd-max-params`` parameters per model: the ``C`` in turn,
    all folds together, Newton steps), else by proximal gradient or L-BFGS;
    each model is scored on its held-out fold where the rows live, and the best ``C``
    is refitted on all rows by :class:`~dask_dgd.LogisticRegression` (for two classes,
    starting at the folds' mean solution).  scikit-learn's
    objective for fold :math:`f` with training weight :math:`T_f` (sum of sample and
    class weights),
    :math:`C \sum_i s_i \ell_i + \frac{1-\rho}{2}\lVert w\rVert_2^2 + \rho\lVert w\rVert_1`,
    is ours with ``alpha = 1 / (C T_f)``: the same solutions.

    Parameters
    ----------
    Cs : int or list of float, default=10
        An int: ``np.logspace(-4, 4, Cs)``, as scikit-learn.
    l1_ratios : None or list of float in [0, 1], default=None
        None: the L2 penalty (``l1_ratio = 0``); a list is searched with ``Cs``.
    scoring : {None, "accuracy", "neg_log_loss"}, default=None
        None: "accuracy" (scikit-learn's default).  Sample weights weigh the held-out
        rows.  A callable is refused (it would need the rows on the driver).
    class_weight : dict, "balanced" or None, default=None
        As :class:`~dask_dgd.LogisticRegression`'s (folded into the sample weights).
""" + _REGRESSOR_DOC_PARAMS + r"""

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    Cs_ : ndarray of shape (n_Cs,)
    C_, l1_ratio_ : ndarray of shape (1,) (binary) or (n_classes,) (the same value repeated)
    scores_ : dict
        ``{class: array of shape (n_folds, n_Cs)}`` (``(n_folds, n_Cs, n_l1_ratios)`` with
        ``l1_ratios``), keyed by ``classes_[1]`` (binary) or by every class (the same scores).
    coefs_paths_ : dict
        ``{class: array of shape (n_folds, n_Cs, n_features + fit_intercept)}`` (an
        ``n_l1_ratios`` axis before the last with ``l1_ratios``): the binary model under
        ``classes_[1]``, or each class's own coefficients (scikit-learn's legacy layout).
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray of shape (1,) or (n_classes,)
    estimator_ : LogisticRegression
        The refitted model, ``LogisticRegression(C=C_)`` on all rows (its ``alpha_``
        the mean-loss penalty it trained with); ``predict`` and ``predict_proba`` use it.
    n_iter_ : int
    """

    _parameter_constraints = {
        **_COMMON_CONSTRAINTS,
        "Cs": [_grid_like],
        "l1_ratios": [None, _ratios_like],
        "scoring": [None, str, callable],
        "class_weight": [None, Options("balanced"), _class_weight_like],
    }
    _scorers = ("accuracy", "neg_log_loss")
    _default_scoring = "accuracy"

    @one_fit_at_a_time
    def fit(self, X, y, sample_weight=None):
        """Fit the path on every fold, choose ``C`` (and ``l1_ratio``), refit on all rows.

        Parameters
        ----------
        X, y, sample_weight
            As :meth:`~dask_dgd.LogisticRegression.fit`'s (``y``: labels of two or more classes).

        Returns
        -------
        self : object
        """
        self._validate_params()
        scoring = self._check_scoring()
        est = LogisticRegression(fit_intercept=self.fit_intercept, class_weight=self.class_weight,
                                 max_iter=self.max_iter, tol=self.tol,
                                 client=self.client)
        est._validate_params()
        shards, summaries, _ = est._prepare(X, y, sample_weight)
        scored = None
        try:
            classes, counts, weights = est._labels(summaries)
            scored = scoring_shards(shards, classes, self.class_weight)
            shards, objective, baseline = est._setup(shards, classes, counts, weights)
            est.classes_ = classes
            self._fit_shards(est, shards, objective, np.asarray(baseline, float) * self.fit_intercept, scoring, scored)
        finally:
            self._release(shards)
            self._release(scored)
        self.classes_ = classes
        return self

    def _fit_shards(self, est, shards, objective, baseline, scoring, scored=None):
        d, F, seed, loss = objective.n_features, int(self.cv), self._seed(), objective.loss
        probe = PathObjective(loss, d, (0,), F, _block_starts(shards), seed, self.fit_intercept)
        fw = self._fold_stats(shards, probe)[0]
        T = fw.sum() - fw  # training weight of each fold
        Cs = np.logspace(-4, 4, self.Cs) if isinstance(self.Cs, numbers.Integral) else \
            np.asarray(self.Cs, dtype=np.float64)
        ratios = np.array([0.0]) if self.l1_ratios is None else np.atleast_1d(np.asarray(self.l1_ratios, float))
        order = np.argsort(Cs, kind="stable")  # smallest C (strongest penalty) first
        scores = np.zeros((F, len(Cs), len(ratios)))
        tail = (loss.n_outputs,) if loss.n_outputs > 1 else ()  # multinomial: a column per class
        paths = np.zeros((F, len(Cs), len(ratios), d + self.fit_intercept) + tail)
        iters = 0
        for r, rho in enumerate(ratios):
            alpha = 1.0 / (Cs[order][:, None] * T[None, :])  # (P, F)
            strengths = np.stack([alpha * rho, alpha * (1 - rho)], axis=2)
            coef, icpt, sums, n_iter = self._run_path(shards, loss, d, baseline, strengths, seed, scored)
            scores[:, order, r] = self._score(sums, scoring).T
            both = np.concatenate([coef, icpt[:, :, None]], axis=2) if self.fit_intercept else coef
            paths[:, order, r] = both.swapaxes(0, 1)
            iters += sum(n_iter)
        mean = scores.mean(axis=0)  # (n_Cs, n_l1)
        i, r = np.unravel_index(np.argmax(mean), mean.shape)
        self.Cs_ = Cs
        self.C_, self.l1_ratio_, self.scores_, self.coefs_paths_ = path_attributes(
            est.classes_, Cs[i], ratios[r], scores, paths, single=self.l1_ratios is None)
        # the refit is LogisticRegression(C=C_) on all rows: alpha_ = 1 / (C_ * their weight)
        est.set_params(C=float(Cs[i]), l1_ratio=float(ratios[r]))
        est.alpha_ = 1.0 / (Cs[i] * fw.sum())
        params0 = None
        if not tail:  # the refit starts at the folds' mean solution of the chosen penalty
            mean = paths[:, i, r].mean(axis=0)
            params0 = objective.pack(mean[:d], mean[d:] if self.fit_intercept else None)
        est._fit(shards, objective, baseline, params0=params0, alpha=est.alpha_)
        self._keep_refit(est, iters)

    def decision_function(self, X):
        """Log-odds of the refitted model."""
        check_is_fitted(self, "estimator_")
        return self.estimator_.decision_function(X)

    def predict_proba(self, X):
        """Class probabilities of the refitted model."""
        check_is_fitted(self, "estimator_")
        return self.estimator_.predict_proba(X)

    def predict(self, X):
        """Classes predicted by the refitted model."""
        check_is_fitted(self, "estimator_")
        return self.estimator_.predict(X)
