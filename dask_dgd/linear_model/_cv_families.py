r"""Cross-validated paths of the Poisson, Gamma, Tweedie, negative binomial and binomial families.

:class:`PoissonRegressorCV` is :class:`~dask_dgd.linear_model.ElasticNetCV` with the
Poisson loss; :class:`GammaRegressorCV`, :class:`TweedieRegressorCV`,
:class:`NegativeBinomialRegressorCV` and :class:`BinomialRegressorCV` are
:class:`PoissonRegressorCV` with the family's loss (built from
the estimator's parameters, so a bad ``power`` or ``theta`` fails before the data is
read), its target checks, its deviance as the default held-out score and its
estimator as the refit.  Every fold and every alpha is trained in one stacked problem
(:mod:`dask_dgd.losses._path`), as the other CV estimators.

The default alpha grid starts where the penalty starts to bind.  For a family with
mean :math:`\mu = g^{-1}(r)` and variance function :math:`V`, the gradient of the mean
loss with respect to the coefficients at the intercept-only model
:math:`\mu_0` (the weighted mean of ``y`` with an intercept, :math:`g^{-1}(0)`
without) is

.. math:: \nabla_w = \frac{1}{\sum_i s_i} \sum_i s_i\, x_i\, (\mu_0 - y_i)\,
          \frac{g^{-1}{}'(r_0)}{V(\mu_0)},

whose last factor is :math:`\mu_0 / V(\mu_0)` for a log link (:math:`\mu_0^{1-p}` for Tweedie,
:math:`1 / \mu_0` for Gamma, :math:`\theta / (\theta + \mu_0)` for the negative
binomial) and :math:`\mu_0 (1 - \mu_0) / V(\mu_0) = 1` for the binomial logit.  The
lasso's ``alpha_max`` is :math:`\lVert \nabla_w \rVert_\infty` (glum's and glmnet's
``alpha_max``, half the derivative of the mean deviance); the grid runs from
``alpha_max / max(l1_ratio, 1e-3)`` down ``eps`` times.  The least-squares
``alpha_max`` that :class:`~dask_dgd.linear_model.ElasticNetCV` uses would be off by
the factor :math:`\mu_0 / V(\mu_0)`: for Gamma targets in the hundreds, a grid a
hundred times too strong.

``eps`` defaults to ``1e-6``, glum's ``min_alpha_ratio`` (with the same ``alpha_max``
the default grid is glum's), not scikit-learn's ``1e-3``: a ridge path
(``l1_ratio=0``) starts at ``1000 alpha_max``, so ``1e-3`` would stop at the lasso's
``alpha_max``, at or next to the best alpha on ordinary data: with the default
100 alphas and 5 folds the best alpha lies 3.9 (Gamma, MASS ``cpus``), 3.3 (Tweedie
power 3, ``cpus``), 3.0 (Tweedie power 1.5, ``quine``) and 2.9 (negative binomial,
theta 1.3, ``quine``) decades below the top of the grid: below, or within 0.15 decade
of, the end of a ``1e-3`` grid.
"""

import numbers
from dataclasses import dataclass

import numpy as np

from .._docstrings import other_parameters
from .._params import init_from
from .._validation import Interval, Options
from ..losses import BinaryLogistic, HalfPoisson, HalfSquaredError
from ._cv import _REGRESSOR_DOC_PARAMS, ElasticNetCV, cv_signature
from ._families import BinomialRegressor, GammaRegressor, NegativeBinomialRegressor, TweedieRegressor
from ._glm import PoissonRegressor

__all__ = ["BinomialRegressorCV", "GammaRegressorCV", "NegativeBinomialRegressorCV", "PoissonRegressorCV",
           "TweedieRegressorCV"]


@init_from(cv_signature())
class PoissonRegressorCV(ElasticNetCV):
    # the docstring shares the parameters of every path CV estimator: an assignment, not a
    # docstring statement (a concatenation would leave __doc__ None)
    __doc__ = r"""Poisson regression (log link) with the penalty chosen by cross-validation.

    As :class:`ElasticNetCV`, with the mean Poisson half-deviance as the loss (the
    objective of :class:`~dask_dgd.PoissonRegressor`, scikit-learn's when
    ``l1_ratio=0``) and the mean held-out Poisson deviance as the default score; the
    best alpha is refitted by :class:`~dask_dgd.PoissonRegressor`.  One class per family,
    named as the family's estimator, rather than one ``GeneralizedLinearRegressorCV``
    with a ``family`` argument: a family's CV estimator then has its estimator's
    defaults and scores, and adding one is a subclass naming its loss and refit class.

    Parameters
    ----------
    l1_ratio : float or list of float in [0, 1], default=0.0
    eps : float, default=1e-6
        ``alpha_min / alpha_max`` of the default grid (glum's default: with 1e-3 the
        chosen alpha of log-link models on real data often sat at the grid's end).
    alphas : int or list of float, default=100
        An int: a log-scale grid from ``max|X^T s (y - ybar)| / (sum(s) max(l1_ratio,
        1e-3))`` (the lasso's alpha_max, with glmnet's floor of l1_ratio for ridge)
        down ``eps`` times.
    scoring : {None, "neg_mean_poisson_deviance", "neg_mean_squared_error", "r2"}, default=None
        None: "neg_mean_poisson_deviance".
""" + _REGRESSOR_DOC_PARAMS + """

    Attributes
    ----------
    alpha_, l1_ratio_, alphas_, coefs_paths_, coef_, intercept_, estimator_, n_iter_
        As :class:`ElasticNetCV`'s.
    scores_ : ndarray of shape (n_alphas, n_folds) or (n_l1_ratio, n_alphas, n_folds)
        The held-out score of each fold (higher is better).
    """

    _parameter_constraints = {**ElasticNetCV._parameter_constraints, "scoring": [None, str, callable]}
    _scorers = ("neg_mean_poisson_deviance", "neg_mean_squared_error", "r2")
    _default_scoring = "neg_mean_poisson_deviance"
    _loss = HalfPoisson()
    _refit_class = PoissonRegressor
    _exact_gram = False

    def _path_score(self, sums):
        return self._score(sums, self._check_scoring())

    def _store_path(self, grids, scores, coefs, single):
        coefs = coefs.transpose(0, 2, 1, 3)
        self.alphas_ = grids[0] if single else grids
        self.scores_ = scores[0] if single else scores
        self.coefs_paths_ = coefs[0] if single else coefs


@dataclass(frozen=True)
class _BinomialShares(BinaryLogistic):
    """The binary logistic loss for shares ``y`` in ``[0, 1]``, with the binomial unit
    deviance (``2 * loss`` is the deviance of 0/1 labels only)."""

    def unit_deviance(self, y, mu, xp):
        r""":math:`2 [y \log(y / \mu) + (1 - y) \log((1 - y) / (1 - \mu))]`, ``0 log 0 = 0``."""
        def xlogy_ratio(a, b):
            positive = a > 0
            return xp.where(positive, a * xp.log(xp.where(positive, a, 1.0) / b), 0.0)

        return 2.0 * (xlogy_ratio(y, mu) + xlogy_ratio(1.0 - y, 1.0 - mu))


#: The grid's ratio and depth and the fit's parameters, documented (with the same defaults) by
#: PoissonRegressorCV, in a family CV estimator's docstring ...
_FIT_PARAMETERS = "As :class:`~dask_dgd.linear_model.PoissonRegressorCV`'s."
_as_elastic_net_cv = other_parameters(_FIT_PARAMETERS)
#: ... and the attributes, documented by GammaRegressorCV, in the other families'.
_as_gamma_cv = other_parameters(_FIT_PARAMETERS, attributes="""\
alpha_, l1_ratio_, alphas_, coefs_paths_, coef_, intercept_, n_iter_, scores_
    As :class:`GammaRegressorCV`'s.
estimator_
    The refitted model: the family's estimator (the class's name without ``CV``).""")


@init_from(cv_signature())
class _FamilyCV(PoissonRegressorCV):
    """Shared parts of the family CV estimators (not public): the loss and the refit
    estimator built from the family's parameters, the family's alpha_max and deviance."""

    #: Constructor parameters of the refit estimator besides the shared ones.
    _family_params = ()
    #: The scorer name of the family's mean held-out deviance.
    _deviance_scorer = None

    def _refit_estimator(self):
        family = {name: getattr(self, name) for name in self._family_params}
        return self._refit_class(**family, fit_intercept=self.fit_intercept, solver="auto", max_iter=self.max_iter,
                                 tol=self.tol, client=self.client)

    @property
    def _loss(self):
        return self._refit_estimator()._family_loss()

    def _validate_params(self):
        super()._validate_params()
        self._refit_estimator()._family_loss()  # bad family parameters fail before the data is read

    def _null_scale(self, fit_intercept, mean):
        """``(mu_0, g^{-1}'(r_0) / V(mu_0))`` of the intercept-only model."""
        loss = self._loss
        if isinstance(loss, HalfSquaredError):  # identity link (Tweedie power 0)
            return (mean if fit_intercept else 0.0), 1.0
        mu0 = mean if fit_intercept else 1.0  # log link: exp(0) without an intercept
        return mu0, mu0 / float(loss.unit_variance(np.float64(mu0), np))

    def _alpha_max(self, fw, fwy, Xtw, Xtwy, fit_intercept):
        """``max |X^T s (y - mu_0)| / sum(s) * g^{-1}'(r_0) / V(mu_0)`` on all rows (see the
        module docstring)."""
        W, WY = fw.sum(), fwy.sum()
        mu0, scale = self._null_scale(fit_intercept, WY / W)
        grad = (Xtwy.sum(axis=1) - mu0 * Xtw.sum(axis=1)) / W * scale
        return float(np.max(np.abs(grad), initial=0.0))

    def _score(self, sums, scoring):
        if scoring == self._deviance_scorer:
            return -sums["deviance"] / sums["weight"]
        return super()._score(sums, scoring)


@_as_elastic_net_cv
class GammaRegressorCV(_FamilyCV):
    r"""Gamma regression (log link) with the penalty chosen by cross-validation.

    As :class:`~dask_dgd.linear_model.PoissonRegressorCV`, with the objective of
    :class:`~dask_dgd.GammaRegressor` (the mean Gamma half-deviance plus the
    elastic-net penalty: scikit-learn's ``GammaRegressor`` when ``l1_ratio=0``), the
    mean held-out Gamma deviance as the default score, and the best alpha refitted by
    :class:`~dask_dgd.GammaRegressor`.

    Parameters
    ----------
    alphas : int or list of float, default=100
        An int: that many alphas on a log scale from
        ``max|X^T s (y - ybar)| / (ybar sum(s) max(l1_ratio, 1e-3))`` (the Gamma lasso's
        alpha_max, with glmnet's floor of l1_ratio for ridge) down ``eps`` times; a list:
        those.
    scoring : {None, "neg_mean_gamma_deviance", "neg_mean_squared_error", "r2"}, default=None
        None: "neg_mean_gamma_deviance".

    Attributes
    ----------
    alpha_, l1_ratio_, alphas_, coefs_paths_, coef_, intercept_, estimator_, n_iter_
        As :class:`~dask_dgd.linear_model.ElasticNetCV`'s (``estimator_`` a
        :class:`~dask_dgd.GammaRegressor`).
    scores_ : ndarray of shape (n_alphas, n_folds) or (n_l1_ratio, n_alphas, n_folds)
        The held-out score of each fold (higher is better).

    Raises
    ------
    InputError
        From ``fit``, if some ``y`` is not positive.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd.linear_model import GammaRegressorCV
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((300, 3))
    >>> y = rng.gamma(2.0, np.exp(X @ np.array([0.5, 0.0, -0.3])) / 2.0)
    >>> model = GammaRegressorCV(alphas=4, cv=3).fit(X, y)
    >>> model.scores_.shape
    (4, 3)
    """

    _scorers = ("neg_mean_gamma_deviance", "neg_mean_squared_error", "r2")
    _default_scoring = _deviance_scorer = "neg_mean_gamma_deviance"
    _refit_class = GammaRegressor


@_as_gamma_cv
@init_from(cv_signature(("power", 0.0), ("link", "auto")))
class TweedieRegressorCV(_FamilyCV):
    r"""Tweedie regression with the penalty chosen by cross-validation.

    As :class:`~dask_dgd.linear_model.PoissonRegressorCV`, with the objective of
    :class:`~dask_dgd.TweedieRegressor` of the same ``power`` and ``link``
    (scikit-learn's ``TweedieRegressor`` when ``l1_ratio=0``), the mean held-out
    Tweedie deviance of that power as the default score, and the best alpha refitted
    by :class:`~dask_dgd.TweedieRegressor`.

    Parameters
    ----------
    power : float, default=0.0
        Variance power, as :class:`~dask_dgd.TweedieRegressor`'s (<= 0 or >= 1).
    link : {"auto", "log", "identity"}, default="auto"
        As :class:`~dask_dgd.TweedieRegressor`'s ("identity" with ``power=0`` only).
    alphas : int or list of float, default=100
        An int: that many alphas on a log scale from
        ``max|X^T s (y - mu_0)| mu_0^(1 - power) / (sum(s) max(l1_ratio, 1e-3))``
        (log link; ``mu_0`` the weighted mean of ``y``, 1 without an intercept) or
        ``max|X^T s (y - mu_0)| / (sum(s) max(l1_ratio, 1e-3))`` (identity link, ``mu_0``
        0 without an intercept), down ``eps`` times; a list: those.
    scoring : {None, "neg_mean_tweedie_deviance", "neg_mean_squared_error", "r2"}, default=None
        None: "neg_mean_tweedie_deviance", the mean of scikit-learn's
        ``mean_tweedie_deviance(power=power)`` over the held-out rows (scikit-learn has
        no scorer name for it: its power is a parameter).

    Raises
    ------
    ParameterError
        From ``fit``, for a power in (0, 1) or ``link="identity"`` with ``power != 0``.
    InputError
        From ``fit``, for targets outside the range of ``power``.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd.linear_model import TweedieRegressorCV
    >>> rng = np.random.default_rng(0)
    >>> X = rng.standard_normal((300, 3))
    >>> y = rng.poisson(np.exp(X @ np.array([0.5, 0.0, -0.3]))) * rng.gamma(2.0, 1.0, 300)
    >>> model = TweedieRegressorCV(power=1.5, alphas=4, cv=3).fit(X, y)
    >>> model.estimator_.power
    1.5
    """

    _parameter_constraints = {
        **PoissonRegressorCV._parameter_constraints,
        "power": [numbers.Real],
        "link": [Options("auto", "log", "identity")],
    }
    _scorers = ("neg_mean_tweedie_deviance", "neg_mean_squared_error", "r2")
    _default_scoring = _deviance_scorer = "neg_mean_tweedie_deviance"
    _refit_class = TweedieRegressor
    _family_params = ("power", "link")


@_as_gamma_cv
@init_from(cv_signature(("theta", 1.0)))
class NegativeBinomialRegressorCV(_FamilyCV):
    r"""Negative binomial (NB2, log link, fixed ``theta``) regression with the penalty
    chosen by cross-validation.

    As :class:`~dask_dgd.linear_model.PoissonRegressorCV`, with the objective of
    :class:`~dask_dgd.NegativeBinomialRegressor` of the same ``theta``, the mean
    held-out negative binomial deviance as the default score, and the best alpha
    refitted by :class:`~dask_dgd.NegativeBinomialRegressor`.

    Parameters
    ----------
    theta : float, default=1.0
        The shape ("size"), fixed: the variance is ``mu + mu**2 / theta``
        (statsmodels' ``NegativeBinomial(alpha=1 / theta)``).
    alphas : int or list of float, default=100
        An int: that many alphas on a log scale from
        ``max|X^T s (y - mu_0)| theta / ((theta + mu_0) sum(s) max(l1_ratio, 1e-3))``
        (``mu_0`` the weighted mean of ``y``, 1 without an intercept) down ``eps``
        times; a list: those.
    scoring : {None, "neg_mean_negative_binomial_deviance", "neg_mean_squared_error", "r2"}, default=None
        None: "neg_mean_negative_binomial_deviance", the weighted mean of the unit
        deviance :math:`2 [y \log(y / \mu) - (y + \theta) \log((y + \theta) / (\mu + \theta))]`
        over the held-out rows.

    Raises
    ------
    ParameterError
        From ``fit``, if ``theta`` is not a finite number > 0.
    InputError
        From ``fit``, if some ``y`` is negative.
    """

    _parameter_constraints = {
        **PoissonRegressorCV._parameter_constraints,
        "theta": [Interval(numbers.Real, 0, None, "neither")],
    }
    _scorers = ("neg_mean_negative_binomial_deviance", "neg_mean_squared_error", "r2")
    _default_scoring = _deviance_scorer = "neg_mean_negative_binomial_deviance"
    _refit_class = NegativeBinomialRegressor
    _family_params = ("theta",)


@_as_gamma_cv
class BinomialRegressorCV(_FamilyCV):
    r"""Binomial regression of proportions (logit link) with the penalty chosen by
    cross-validation.

    ``y`` is the share of successes in ``[0, 1]`` and ``sample_weight`` the number of
    trials, as :class:`~dask_dgd.BinomialRegressor`; otherwise as
    :class:`~dask_dgd.linear_model.PoissonRegressorCV`, with the mean held-out binomial
    deviance (weighted by the trials) as the default score and the best alpha refitted
    by :class:`~dask_dgd.BinomialRegressor`.

    Parameters
    ----------
    alphas : int or list of float, default=100
        An int: that many alphas on a log scale from
        ``max|X^T s (y - ybar)| / (sum(s) max(l1_ratio, 1e-3))`` (the logit link is
        canonical: :math:`\mu_0 (1 - \mu_0) / V(\mu_0) = 1`; ``ybar`` is 1/2 without an
        intercept) down ``eps`` times; a list: those.
    scoring : {None, "neg_mean_binomial_deviance", "neg_mean_squared_error", "r2"}, default=None
        None: "neg_mean_binomial_deviance", the trial-weighted mean of
        :math:`2 [y \log(y / p) + (1 - y) \log((1 - y) / (1 - p))]` over the held-out rows.

    Raises
    ------
    InputError
        From ``fit``, for ``y`` outside ``[0, 1]`` or without successes or failures.
    """

    _scorers = ("neg_mean_binomial_deviance", "neg_mean_squared_error", "r2")
    _default_scoring = _deviance_scorer = "neg_mean_binomial_deviance"
    _refit_class = BinomialRegressor

    @property
    def _loss(self):
        return _BinomialShares()

    def _null_scale(self, fit_intercept, mean):
        mu0 = mean if fit_intercept else 0.5  # expit(0)
        return mu0, 1.0
