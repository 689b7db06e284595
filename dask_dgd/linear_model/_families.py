"""GammaRegressor, TweedieRegressor, NegativeBinomialRegressor and BinomialRegressor.

The GLM families beyond Poisson, each a :class:`~dask_dgd.linear_model._glm._Regressor`
with its pointwise loss (:mod:`dask_dgd.losses`), its target checks, its inverse link
and a D² score, as scikit-learn's ``GammaRegressor`` and ``TweedieRegressor``.
"""

import math
import numbers

import numpy as np
from scipy.special import xlogy
from sklearn.metrics import d2_tweedie_score

from .._backend import get_namespace
from .._params import init_from
from .._validation import Interval, Options
from ..exceptions import InputError, ParameterError
from ..losses import BinaryLogistic, HalfGamma, HalfNegativeBinomial, HalfSquaredError, HalfTweedie
from ._base import linear_signature
from ._glm import _computed, _exp_block, _Regressor, regressor_docstring

__all__ = ["BinomialRegressor", "GammaRegressor", "NegativeBinomialRegressor", "TweedieRegressor"]


def _weighted_mean(summaries):
    wsum = sum(s["weight_sum"] for s in summaries)  # > 0, checked in _prepare
    return sum(s["wy_sum"] for s in summaries) / wsum


def _d2(unit_deviance, y, y_pred, sample_weight):
    """1 - deviance(y, y_pred) / deviance(y, weighted mean of y), as scikit-learn's D²."""
    y = np.asarray(y, dtype=np.float64).reshape(-1)
    y_pred = np.asarray(y_pred, dtype=np.float64).reshape(-1)
    w = np.ones_like(y) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64).reshape(-1)
    if y.shape != y_pred.shape or w.shape != y.shape:
        raise InputError(
            f"y, the predictions and sample_weight must have one value per row; got shapes "
            f"{y.shape}, {y_pred.shape} and {w.shape}"
        )
    numerator = float(w @ unit_deviance(y, y_pred))
    null = np.full_like(y, np.average(y, weights=w))
    denominator = float(w @ unit_deviance(y, null))
    return 1.0 - numerator / denominator if denominator > 0 else math.nan


@init_from(linear_signature(alpha=1.0))
class _FamilyRegressor(_Regressor):
    """Shared parts of the log-link and logit-link families: ``alpha=1.0`` by default (as
    scikit-learn's GLMs and :class:`~dask_dgd.PoissonRegressor`), the family's loss
    built (and checked) before any data is read, and D² as the score."""

    def _family_loss(self):
        """The pointwise loss of this estimator's parameters (raises ParameterError)."""
        raise NotImplementedError

    @property
    def _loss(self):
        return self._family_loss()

    def _validate_params(self):
        super()._validate_params()
        self._family_loss()  # bad family parameters fail before the data is read

    def _unit_deviance(self, y, y_pred):
        """Unit deviance per row (NumPy, on the driver), for the D² score."""
        raise NotImplementedError

    def score(self, X, y, sample_weight=None, offset=None):
        """D², the fraction of the family's deviance explained (1 is perfect):
        ``1 - D(y, predict(X, offset)) / D(y, mean)``, with ``D`` the weighted sum of unit
        deviances and ``mean`` the weighted mean of ``y``, as scikit-learn's D² (the null
        model has no offset, unlike statsmodels' ``null_deviance``); the arguments are
        those of :meth:`fit`, lazy inputs computed together."""
        y_pred, y, sample_weight = _computed(self.predict(X, offset=offset), y, sample_weight)
        return self._d2(y, y_pred, sample_weight)

    def _d2(self, y, y_pred, sample_weight):
        return _d2(self._unit_deviance, y, y_pred, sample_weight)

    def _log_baseline(self, summaries):
        mean = _weighted_mean(summaries)
        if not mean > 0:
            raise InputError(
                f"{type(self).__name__} with a log link requires y with a positive (weighted) mean; "
                f"got {mean}"
            )
        return [math.log(mean)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.positive_only = True
        return tags


@regressor_docstring
class GammaRegressor(_FamilyRegressor):
    """Gamma regression with a log link, by distributed DGD.

    Minimises the sample-weighted mean of ``eta + y * exp(-eta)`` (half the Gamma
    deviance up to terms constant in ``eta``), ``eta = X @ coef + intercept``, plus
    ``alpha * (l1_ratio * ||coef||_1 + (1 - l1_ratio) / 2 * ||coef||_2^2)``: the same
    objective as scikit-learn's ``GammaRegressor(alpha=...)`` when ``l1_ratio=0``.

    Parameters
    ----------
    alpha : float, default=1.0
        Penalty strength (scikit-learn's default too).

    Raises
    ------
    InputError
        From ``fit``, if some ``y`` is not positive.

    Notes
    -----
    The variance function is :math:`V(\\mu) = \\mu^2` (constant coefficient of
    variation); see :class:`~dask_dgd.losses.HalfGamma`.  ``solver="newton"`` takes
    Fisher-scoring steps.  ``score`` is D² with the Gamma deviance
    (``d2_tweedie_score(power=2)``, scikit-learn's ``GammaRegressor.score``).

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd import GammaRegressor
    >>> X = np.array([[0.0], [1.0], [2.0], [3.0]]); y = np.array([1.0, 2.0, 4.0, 8.0])
    >>> reg = GammaRegressor(alpha=0.0, tol=1e-10).fit(X, y)
    >>> round(float(reg.coef_[0]), 6), round(float(np.exp(reg.coef_[0])), 6)
    (0.693147, 2.0)
    """

    def _family_loss(self):
        return HalfGamma()

    def _check_target(self, summaries):
        y_min = min(s["y_min"] for s in summaries)
        if not y_min > 0:
            raise InputError(
                f"GammaRegressor requires positive y (the Gamma family has support y > 0); the smallest "
                f"value is {y_min}: drop the rows with y <= 0 or use TweedieRegressor with 1 < power < 2, "
                "which takes zeros"
            )
        return self._log_baseline(summaries)

    _inverse_link_block = staticmethod(_exp_block)

    def _d2(self, y, y_pred, sample_weight):
        return d2_tweedie_score(y, y_pred, sample_weight=sample_weight, power=2)


@regressor_docstring
@init_from(linear_signature(("power", 0.0), ("link", "auto"), alpha=1.0))
class TweedieRegressor(_FamilyRegressor):
    """Tweedie regression (normal, Poisson, compound Poisson-Gamma, Gamma, inverse Gaussian).

    Minimises the sample-weighted mean of half the Tweedie deviance of variance power
    ``power`` (up to terms constant in ``eta``), ``eta = X @ coef + intercept``, plus
    ``alpha * (l1_ratio * ||coef||_1 + (1 - l1_ratio) / 2 * ||coef||_2^2)``: the same
    objective as scikit-learn's ``TweedieRegressor(power=..., link=..., alpha=...)`` when
    ``l1_ratio=0``.

    Parameters
    ----------
    power : float, default=0.0
        Variance power :math:`p` of :math:`V(\\mu) = \\mu^p`: 0 normal (``y`` any real),
        1 Poisson (``y >= 0``), in (1, 2) compound Poisson-Gamma (``y >= 0``, zeros
        allowed), 2 Gamma (``y > 0``), 3 inverse Gaussian (any ``p > 2``: ``y > 0``),
        ``p < 0`` extreme stable (``y`` any real, log link only).  Powers in (0, 1) are
        refused (no such distribution).
    link : {"auto", "log", "identity"}, default="auto"
        "auto" is "identity" for ``power <= 0`` and "log" otherwise, as in
        scikit-learn.  "identity" is supported for ``power=0`` only (least squares,
        :class:`~dask_dgd.losses.HalfSquaredError`): for ``power > 0`` the identity link
        needs positive predictions, which the solvers do not enforce.
    alpha : float, default=1.0
        Penalty strength (scikit-learn's default too).

    Raises
    ------
    ParameterError
        From ``fit``, for a power in (0, 1), a non-finite power, or ``link="identity"``
        with ``power != 0``.
    InputError
        From ``fit``, for targets outside the family's range (see ``power``), or a
        non-positive weighted mean of ``y`` with the log link.

    Notes
    -----
    See :class:`~dask_dgd.losses.HalfTweedie` for the loss and its Fisher weight
    :math:`\\mu^{2-p}` (``solver="newton"`` takes Fisher-scoring steps).  With the log
    link the objective is not convex in the coefficients for ``p > 2`` or ``p < 1``;
    L-BFGS still finds scikit-learn's optimum on ordinary data.  ``score`` is
    ``d2_tweedie_score`` with this ``power``, scikit-learn's ``TweedieRegressor.score``.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd import TweedieRegressor
    >>> X = np.array([[0.0], [1.0], [2.0], [3.0]]); y = np.array([0.0, 1.0, 3.0, 7.0])
    >>> reg = TweedieRegressor(power=1.5, alpha=0.0, tol=1e-10).fit(X, y)
    >>> bool(reg.predict(X[:1])[0] > 0)
    True
    """

    _parameter_constraints = {
        **_FamilyRegressor._parameter_constraints,
        "power": [numbers.Real],
        "link": [Options("auto", "log", "identity")],
    }

    def _link(self):
        if self.link != "auto":
            return self.link
        return "identity" if self.power <= 0 else "log"

    def _family_loss(self):
        loss = HalfTweedie(self.power)  # raises for power in (0, 1) or not finite
        if self._link() == "log":
            return loss
        if loss.power != 0:
            raise ParameterError(
                f"TweedieRegressor supports link='identity' with power=0 only, got power={self.power!r}"
                f"{' (link=auto is identity for power <= 0)' if self.link == 'auto' else ''}: "
                "the identity link needs positive predictions for power > 0, which the solvers do "
                "not enforce; use link='log'"
            )
        return HalfSquaredError()

    def _check_target(self, summaries):
        p = float(self.power)
        y_min = min(s["y_min"] for s in summaries)
        if 1 <= p < 2 and y_min < 0:
            raise InputError(
                f"TweedieRegressor with power={self.power!r} requires non-negative y; the smallest "
                f"value is {y_min}"
            )
        if p >= 2 and not y_min > 0:
            raise InputError(
                f"TweedieRegressor with power={self.power!r} requires positive y; the smallest value is "
                f"{y_min}: use a power in [1, 2) for data with zeros"
            )
        if self._link() == "identity":
            return [_weighted_mean(summaries)]
        return self._log_baseline(summaries)

    @property
    def _inverse_link_block(self):
        return None if self._link() == "identity" else _exp_block

    def _d2(self, y, y_pred, sample_weight):
        return d2_tweedie_score(y, y_pred, sample_weight=sample_weight, power=float(self.power))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.positive_only = self.power > 0
        return tags


@regressor_docstring
@init_from(linear_signature(("theta", 1.0), alpha=1.0))
class NegativeBinomialRegressor(_FamilyRegressor):
    """Negative binomial (NB2) regression with a log link and a fixed ``theta``.

    Minimises the sample-weighted mean of ``(y + theta) * log(theta + exp(eta)) - y * eta``
    (half the negative binomial deviance up to terms constant in ``eta``),
    ``eta = X @ coef + intercept``, plus
    ``alpha * (l1_ratio * ||coef||_1 + (1 - l1_ratio) / 2 * ||coef||_2^2)``.  For counts
    more dispersed than Poisson's: the variance is ``mu + mu**2 / theta``.

    Parameters
    ----------
    theta : float, default=1.0
        The shape ("size") of R's ``MASS::negative.binomial(theta)``; statsmodels'
        ``families.NegativeBinomial(alpha=1 / theta)``.  As ``theta`` grows the model
        approaches Poisson regression.  It is fixed, not estimated.
    alpha : float, default=1.0
        Penalty strength (the default of the other GLMs here and in scikit-learn).

    Raises
    ------
    ParameterError
        From ``fit``, if ``theta`` is not a finite number > 0.
    InputError
        From ``fit``, if some ``y`` is negative or the weighted sum of ``y`` is not positive.

    Notes
    -----
    See :class:`~dask_dgd.losses.HalfNegativeBinomial` (``solver="newton"`` takes
    Fisher-scoring steps, weight :math:`\\mu / (1 + \\mu / \\theta)`).  ``score`` is D²
    with the negative binomial unit deviance
    :math:`2 [y \\log(y / \\mu) - (y + \\theta) \\log((y + \\theta) / (\\mu + \\theta))]`.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd import NegativeBinomialRegressor
    >>> X = np.array([[0.0], [1.0], [2.0], [3.0]]); y = np.array([1.0, 0.0, 4.0, 9.0])
    >>> reg = NegativeBinomialRegressor(theta=2.0, alpha=0.0, tol=1e-10).fit(X, y)
    >>> bool(reg.coef_[0] > 0)
    True
    """

    _parameter_constraints = {
        **_FamilyRegressor._parameter_constraints,
        "theta": [Interval(numbers.Real, 0, None, "neither")],
    }

    def _family_loss(self):
        return HalfNegativeBinomial(self.theta)

    def _check_target(self, summaries):
        y_min = min(s["y_min"] for s in summaries)
        if y_min < 0:
            raise InputError(
                f"NegativeBinomialRegressor requires non-negative y (counts); the smallest value is {y_min}"
            )
        return self._log_baseline(summaries)

    _inverse_link_block = staticmethod(_exp_block)

    def _unit_deviance(self, y, y_pred):
        theta = float(self.theta)
        return 2.0 * (xlogy(y, y / y_pred) - (y + theta) * np.log((y + theta) / (y_pred + theta)))


def _expit_block(raw):
    """The logistic inverse link, in the block's namespace: ``1 / (1 + exp(-raw))``."""
    xp = get_namespace(raw)
    return xp.exp(raw - xp.logaddexp(xp.zeros_like(raw), raw))


@regressor_docstring
class BinomialRegressor(_FamilyRegressor):
    """Binomial regression of proportions with a logit link: successes out of trials.

    ``y`` is the share of successes in ``[0, 1]`` and ``sample_weight`` the number of
    trials of each row (as glum, and statsmodels'
    ``GLM(y, X, family=Binomial(), var_weights=trials)``); ``predict`` returns the
    probability of success.  Minimises the sample-weighted mean of
    ``log(1 + exp(eta)) - y * eta`` (half the binomial deviance up to terms constant in
    ``eta``), ``eta = X @ coef + intercept``, plus
    ``alpha * (l1_ratio * ||coef||_1 + (1 - l1_ratio) / 2 * ||coef||_2^2)``.

    Parameters
    ----------
    alpha : float, default=1.0
        Penalty strength (the default of the other GLMs here and in scikit-learn; 0 for
        the unpenalised fit of statsmodels and R's ``glm``).

    Raises
    ------
    InputError
        From ``fit``, if some ``y`` is outside ``[0, 1]`` (pass counts as
        ``y = successes / trials`` with ``sample_weight=trials``), or the weighted
        mean of ``y`` is 0 or 1 (no successes or no failures: the intercept would
        diverge).

    Notes
    -----
    The loss is :class:`~dask_dgd.losses.BinaryLogistic`, which is also the binomial
    loss for fractional ``y``; its link is canonical, so ``solver="newton"`` takes exact
    Newton steps.  For 0/1 labels and class predictions use
    :class:`~dask_dgd.LogisticRegression`.  ``score`` is D² with the binomial unit
    deviance :math:`2 [y \\log(y / p) + (1 - y) \\log((1 - y) / (1 - p))]`.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd import BinomialRegressor
    >>> X = np.array([[0.0], [1.0], [2.0]]); successes = np.array([2.0, 5.0, 8.0])
    >>> trials = np.array([10.0, 10.0, 10.0])
    >>> reg = BinomialRegressor(alpha=0.0, tol=1e-10).fit(X, successes / trials, sample_weight=trials)
    >>> bool(0 < reg.predict(X[:1])[0] < 0.5)
    True
    """

    def _family_loss(self):
        return BinaryLogistic()

    def _check_target(self, summaries):
        y_min = min(s["y_min"] for s in summaries)
        y_max = max(s["y_max"] for s in summaries)
        if y_min < 0 or y_max > 1:
            raise InputError(
                f"BinomialRegressor requires y in [0, 1] (shares of successes); got values from {y_min} "
                f"to {y_max}: pass y = successes / trials with sample_weight=trials"
            )
        mean = _weighted_mean(summaries)
        if not 0 < mean < 1:
            raise InputError(
                f"BinomialRegressor requires both successes and failures: the weighted mean of y is "
                f"{mean}, so the intercept would diverge"
            )
        return [math.log(mean / (1.0 - mean))]

    _inverse_link_block = staticmethod(_expit_block)

    def _unit_deviance(self, y, y_pred):
        return 2.0 * (xlogy(y, y / y_pred) + xlogy(1.0 - y, (1.0 - y) / (1.0 - y_pred)))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.positive_only = True
        return tags
