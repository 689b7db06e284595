"""BinomialRegressor: proportions (successes out of trials) with a logit link."""

import math

from scipy.special import xlogy

from .._backend import get_namespace
from ..exceptions import InputError
from ..losses import BinaryLogistic
from ._families import _FamilyRegressor, _weighted_mean
from ._glm import regressor_docstring

__all__ = ["BinomialRegressor"]


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
