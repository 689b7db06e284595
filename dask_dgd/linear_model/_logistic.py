"""LogisticRegression: binary and multinomial, by distributed gradient descent."""

import math
import numbers

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.metrics import accuracy_score
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from .._backend import asarray_like, get_namespace, to_numpy
from .._engine.data.blocks import _label_error, encode_shard
from .._engine.runtime.executor import is_dask_collection
from .._params import init_from
from .._validation import Interval, Options, one_fit_at_a_time
from ..exceptions import InputError, ParameterError
from ..losses import BinaryLogistic, LinearObjective, MultinomialLogistic
from ._base import DGDLinearModel, linear_docstring, linear_signature
from ._glm import _computed
from ._input import _width_message

__all__ = ["LogisticRegression"]


def _proba_block(raw, loss):
    xp = get_namespace(raw)
    p = loss.inverse_link(raw, xp)
    if p.ndim == 1:
        return xp.stack([1 - p, p], axis=1)
    return p


def _log_proba_block(raw, loss):
    xp = get_namespace(raw)
    return xp.log(_proba_block(raw, loss))


def _class_block(raw, classes):
    """Most probable class of each row: in the block's namespace for numeric classes,
    a host array (the labels' own dtype, e.g. strings) otherwise."""
    xp = get_namespace(raw)
    if raw.shape[1] > 1:
        idx = xp.argmax(raw, axis=1)
    else:
        idx = xp.astype(raw[:, 0] > 0, xp.int64)
    if classes.dtype.kind in "biuf" and not isinstance(raw, np.ndarray):
        return xp.take(asarray_like(classes, raw), idx)
    return classes[to_numpy(idx)]


#: ``alpha``'s default: ``C`` may be given only while ``alpha`` is left at it.
ALPHA_DEFAULT = 1e-4


def effective_alpha(C, alpha, total_weight):
    """The mean-loss penalty a fit trains with: ``alpha``, or for scikit-learn's ``C``
    (which multiplies the *sum* of the weighted losses) ``1 / (C * total_weight)``,
    where ``total_weight`` is the sum of the training rows' sample weights times their
    class weights (their number without weights); ``C = inf`` is no penalty.

    >>> effective_alpha(None, 1e-4, 500.0), effective_alpha(2.0, 1e-4, 500.0), effective_alpha(np.inf, 1e-4, 5.0)
    (0.0001, 0.001, 0.0)
    """
    if C is None:
        return float(alpha)
    if np.isinf(C):
        return 0.0
    if not total_weight > 0:
        raise InputError(f"C={C!r} penalises the sum of the weighted losses, and the training rows' total weight "
                         f"(sample times class weights) is {float(total_weight):g}: give some rows a positive weight, "
                         "or pass alpha instead of C")
    return 1.0 / (float(C) * float(total_weight))


def _class_weight_like(value):
    """a dict mapping class labels to weights"""
    return isinstance(value, dict)


@linear_docstring
@init_from(linear_signature(("C", None), alpha=ALPHA_DEFAULT, after_intercept=("class_weight",)))
class LogisticRegression(ClassifierMixin, DGDLinearModel):
    """Logistic regression (binary or multinomial) by distributed DGD.

    Two classes give the binary model (``coef_`` of shape (1, n_features)), more give the
    multinomial (softmax) model with one row of ``coef_`` per class.  The objective is
    the sample-weighted mean cross-entropy plus
    ``alpha * (l1_ratio * ||coef||_1 + (1 - l1_ratio) / 2 * ||coef||_2^2)``.

    Parameters
    ----------
    C : float in (0, inf] or None, default=None
        scikit-learn's inverse penalty strength, which multiplies the *sum* of the
        weighted losses: the fit trains with ``alpha = 1 / (C * W)``, ``W`` the sum
        of the training rows' sample weights times their class weights (their number
        without weights), recorded in ``alpha_``; ``C=inf`` is no penalty.  The same
        ``C`` is then the same scikit-learn model on any number of rows, so a ``C``
        chosen on folds (``GridSearchCV``) keeps its meaning on the refit, where a
        fixed ``alpha`` would not.  None: ``alpha`` is used.  Give ``C`` or a
        non-default ``alpha``, not both.  ``partial_fit`` never sees all the rows
        and refuses a finite ``C``: pass ``alpha = 1 / (C W)`` for the stream.
    alpha : float, default=1e-4
        Penalty strength on the *mean* loss, whatever the number of rows.
        scikit-learn's ``LogisticRegression(C=c)`` fitted on ``n`` samples (total
        weight ``n``) is ``alpha = 1 / (c * n)`` with ``l1_ratio=0`` (or pass ``C=c``);
        ``SGDClassifier(loss="log_loss", alpha=a)`` is ``alpha = a``.
    class_weight : dict, "balanced" or None, default=None
        Weights multiplying the sample weights of each class; "balanced" uses
        ``total_weight / (n_classes * weight(class))``, where ``weight(class)`` is the
        sum of the sample weights of the class's rows (its count without sample
        weights), as scikit-learn's ``compute_class_weight(..., sample_weight=...)``.
        The totals are summed where the rows live.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray of shape (1,) or (n_classes,)
        A multinomial model's probabilities do not change when one constant is
        added to every class's coefficient of a feature (or intercept); where no
        penalty fixes that constant (``alpha=0``, the intercept), the fit takes
        the classes' mean at zero, as scikit-learn does (statsmodels'
        ``MNLogit`` fixes the first class at zero instead: compare differences).
    alpha_ : float
        The penalty strength the fit trained with: ``alpha``, or ``1 / (C * W)``
        for ``C`` (see ``C``).
    n_features_in_, n_iter_, loss_curve_, history_, solver_
        As in :class:`LinearRegression`.

    Raises
    ------
    ParameterError
        For ``C`` given with a non-default ``alpha``.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd import LogisticRegression
    >>> X = np.array([[0.0], [1.0], [2.0], [3.0]]); y = np.array([0, 0, 1, 1])
    >>> LogisticRegression().fit(X, y).predict([[0.2], [2.8]])
    array([0, 1])
    >>> LogisticRegression(C=10.0).fit(X, y).alpha_  # 1 / (10 * 4 rows)
    0.025
    """

    _parameter_constraints = {
        **DGDLinearModel._parameter_constraints,
        "C": [None, Interval(numbers.Real, 0, math.inf, "right")],
        "class_weight": [None, Options("balanced"), _class_weight_like],
    }

    def _validate_params(self):
        super()._validate_params()
        if self.C is not None and self.alpha != ALPHA_DEFAULT:
            raise ParameterError(
                f"C and alpha are two spellings of the penalty; got C={self.C!r} and alpha={self.alpha!r}: "
                f"pass C (scikit-learn's, on the summed loss) or alpha (on the mean loss), and leave "
                f"the other at its default (C=None, alpha={ALPHA_DEFAULT})"
            )

    def _fingerprint(self):
        fingerprint = super()._fingerprint()
        if self.C is None:  # checkpoints written before C existed still resume
            fingerprint.pop("parameter C", None)
        return fingerprint

    def _is_classifier(self):
        return True

    def _set_coef(self, coef, intercept):
        # scikit-learn's shapes: one row per class, or a single row for two classes
        self.coef_ = coef.T.copy()
        self.intercept_ = intercept.copy()

    def _validate_fit_input(self, X, y, sample_weight, reset=True):
        X, y, sample_weight = super()._validate_fit_input(X, y, sample_weight, reset)
        if not is_dask_collection(y):
            if y.dtype == object:  # None/NaN labels or mixed types: np.unique would fail
                try:
                    np.unique(y)
                except TypeError as err:
                    raise _label_error(None, y, err) from err
            check_classification_targets(y)
        return X, y, sample_weight

    def _labels(self, summaries):
        """The classes, their row counts and their sample-weight totals over ``summaries``."""
        parts = [s["labels"] for s in summaries if len(s["labels"])]
        try:
            labels, inverse = np.unique(np.concatenate(parts), return_inverse=True)
        except TypeError as err:  # the workers' labels are of types that cannot be ordered
            raise _label_error(None, np.concatenate(parts), err) from err
        total = np.zeros(len(labels))
        np.add.at(total, inverse, np.concatenate([s["label_counts"] for s in summaries if len(s["labels"])]))
        weights = np.zeros(len(labels))
        np.add.at(weights, inverse, np.concatenate([s["label_weights"] for s in summaries if len(s["labels"])]))
        if labels.dtype.kind == "f" and not np.all(labels == np.round(labels)):
            raise InputError(
                f"Unknown label type: continuous; {type(self).__name__} needs class labels "
                f"(got values like {labels[:3].tolist()})"
            )
        return labels, total, weights

    def _class_weights(self, classes, weights):
        cw = self.class_weight
        if cw is None:
            return None
        if isinstance(cw, str):  # "balanced", from the classes' sample-weight totals
            empty = classes[weights <= 0]
            if len(empty):
                raise InputError(
                    f"class_weight='balanced' needs a positive total sample weight in every class; "
                    f"classes {empty.tolist()} have total weight 0: give their rows positive weights, "
                    "drop those classes, or pass a dict of class weights"
                )
            return weights.sum() / (len(classes) * weights)
        unknown = [k for k in cw if k not in set(classes.tolist())]
        if unknown:
            raise InputError(
                f"class_weight has keys {unknown} that are not among the classes "
                f"{classes.tolist()}"
            )
        try:
            weights = np.array([cw.get(c, 1.0) for c in classes.tolist()], dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise InputError(f"class_weight values must be numbers; got {cw!r}") from err
        if not np.all(np.isfinite(weights) & (weights >= 0)):
            raise InputError(
                f"class_weight values must be finite and non-negative; got {cw!r}"
            )
        return weights

    def _setup(self, shards, classes, counts, weights, offset=False):
        """Encoded shards (class weights folded into the sample weights), the objective
        and the starting intercept; ``offset``: X's blocks end with offset columns,
        one for two classes, one per class otherwise."""
        if len(classes) < 2:
            raise InputError(
                f"{type(self).__name__} needs samples of at least 2 classes in the data, "
                f"but the data contains only one class: {classes.tolist()[0]!r}"
            )
        validation = shards.validation
        missing = classes[counts == 0]
        if validation is not None and len(missing):
            raise InputError(
                f"classes {missing.tolist()} have no rows left for training after holding out "
                f"validation_fraction={self.validation_fraction}; use a smaller "
                "validation_fraction or early_stopping=False"
            )
        K = len(classes)
        n_outputs = 1 if K == 2 else K
        if offset and shards.n_features - self.n_features_in_ != n_outputs:
            raise InputError(_width_message(shards.n_features - self.n_features_in_, n_outputs))
        cw = self._class_weights(classes, weights)
        shards = shards.transform(encode_shard, classes, cw, name="dgd-encode")
        if validation is not None:
            shards.validation = validation.transform(encode_shard, classes, cw, name="dgd-encode")
        loss = BinaryLogistic() if K == 2 else MultinomialLogistic(K)
        weighted = weights * (1.0 if cw is None else cw)
        p = np.clip(weighted / weighted.sum(), 1e-12, 1.0)
        if K == 2:
            baseline = [np.log(p[1] / p[0])]
        else:
            baseline = np.log(p) - np.log(p).mean()
        objective = LinearObjective(loss, self.n_features_in_, fit_intercept=self.fit_intercept, offset=offset)
        return shards, objective, baseline

    @one_fit_at_a_time
    def fit(self, X, y, sample_weight=None, resume=False, offset=None):
        """Fit the classifier by distributed gradient descent.

        Parameters
        ----------
        X : array-like, sparse matrix, dask array or dask DataFrame of shape (n_samples, n_features)
        y : array-like or dask array of shape (n_samples,)
            Class labels (numbers or strings).
        sample_weight : array-like or dask array of shape (n_samples,), default=None
        resume : bool, default=False
            Continue from the checkpoint in the ``checkpoint`` folder (see
            :meth:`LinearRegression.fit`).
        offset : array-like, dask array or Series, default=None
            Known terms added to the linear predictor with coefficients fixed at 1:
            shape (n_samples,) for two classes (added to the log-odds), (n_samples,
            n_classes) for the multinomial model (one column per class, in
            ``classes_`` order).  Pass the offset of new rows to :meth:`predict` and
            the other prediction methods too.

        Returns
        -------
        self : object

        Raises
        ------
        InputError
            For an offset of the wrong length or shape, non-numeric, or with NaN/inf.
        """
        self._validate_params()
        shards, summaries, val_summaries = self._prepare(X, y, sample_weight, split=True, offset=offset)
        # the classes of all rows; the counts (start, "balanced" weights) of the training rows
        held_out = [{**s, "label_counts": np.zeros_like(s["label_counts"]),
                     "label_weights": np.zeros_like(s["label_weights"])} for s in val_summaries]
        classes, counts, weights = self._labels(summaries + held_out)
        shards, objective, baseline = self._setup(shards, classes, counts, weights, offset is not None)
        # the training rows' total of sample weights times class weights: C's sum
        total = weights * (1.0 if self.class_weight is None else self._class_weights(classes, weights))
        self.classes_ = classes
        self.alpha_ = effective_alpha(self.C, self.alpha, total.sum())
        self._fit(shards, objective, baseline, resume=resume, alpha=self.alpha_)
        return self

    @one_fit_at_a_time
    def partial_fit(self, X, y, classes=None, sample_weight=None, offset=None):
        """One pass of mini-batch steps over ``X``; ``classes`` is required on the first call.
        ``offset`` as in :meth:`fit`, for these rows.

        Returns
        -------
        self : object
        """
        if self.C is not None and not np.isinf(self.C):
            raise ParameterError(
                f"partial_fit cannot train with C={self.C!r}: C penalises the sum of the losses over all the rows, "
                "and partial_fit never sees them all (each call's share would make the model depend on the "
                "chunking); pass alpha=1 / (C * total sample weight of the stream) instead of C"
            )
        first = self._partial_starts()
        if first:
            if classes is None:
                raise InputError(
                    "classes must be passed on the first call to partial_fit (all labels "
                    "the stream can contain)"
                )
            if isinstance(self.class_weight, str):
                raise ParameterError(
                    "class_weight='balanced' needs the class counts of all the data, "
                    "which partial_fit never sees; pass a dict of weights instead"
                )
        elif classes is not None and not np.array_equal(np.unique(np.asarray(classes)), self.classes_):
            raise InputError(
                f"classes={list(classes)} differs from the classes of the first call, "
                f"{self.classes_.tolist()}"
            )
        shards, summaries, _ = self._prepare(X, y, sample_weight, reset=first, offset=offset)
        seen, counts, weights = self._labels(summaries)
        all_classes = np.unique(np.asarray(classes)) if first else self.classes_
        missing = np.setdiff1d(seen, all_classes)
        if missing.size:
            raise InputError(
                f"labels {missing.tolist()} are not in classes {all_classes.tolist()}"
            )
        full_counts = np.ones(len(all_classes))
        full_counts[np.searchsorted(all_classes, seen)] += counts
        full_weights = np.ones(len(all_classes))
        full_weights[np.searchsorted(all_classes, seen)] += weights
        shards, objective, baseline = self._setup(shards, all_classes, full_counts, full_weights, offset is not None)
        self.classes_ = all_classes
        self.alpha_ = effective_alpha(self.C, self.alpha, 1.0)  # (C refused above: partial_fit never sees the total)
        self._partial(shards, objective, baseline, alpha=self.alpha_)
        return self

    def decision_function(self, X, offset=None):
        """Linear predictor (plus ``offset``, shaped as in :meth:`fit`): shape (n,) for
        two classes, (n, n_classes) otherwise."""
        return self._raw(X, offset=offset)

    def predict_proba(self, X, offset=None):
        """Class probabilities, shape (n_samples, n_classes), columns in ``classes_`` order
        (``offset`` as in :meth:`fit`)."""
        check_is_fitted(self, "coef_")
        return self._raw(X, squeeze=False, post=_proba_block, post_args=(self._link_loss(),),
                         out=(2, len(self.classes_), None), offset=offset)

    def predict_log_proba(self, X, offset=None):
        """Logarithm of :meth:`predict_proba`."""
        check_is_fitted(self, "coef_")
        with np.errstate(divide="ignore"):
            return self._raw(X, squeeze=False, post=_log_proba_block, post_args=(self._link_loss(),),
                             out=(2, len(self.classes_), None), offset=offset)

    def predict(self, X, offset=None):
        """Most probable class of each sample (lazy for dask ``X``; numeric classes stay
        in ``X``'s namespace, e.g. CuPy, other labels come back as host arrays);
        ``offset`` as in :meth:`fit`."""
        check_is_fitted(self, "coef_")
        return self._raw(X, squeeze=False, post=_class_block, post_args=(self.classes_,),
                         out=(1, None, self.classes_.dtype), offset=offset)

    def _link_loss(self):
        return BinaryLogistic() if len(self.classes_) == 2 else MultinomialLogistic(len(self.classes_))


    def score(self, X, y, sample_weight=None, offset=None):
        """Mean accuracy (computes lazy inputs)."""
        y_pred, y, sample_weight = _computed(self.predict(X, offset=offset), y, sample_weight)
        return accuracy_score(y, y_pred, sample_weight=sample_weight)
