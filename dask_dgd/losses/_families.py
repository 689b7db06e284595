r"""Pointwise losses of the log-link GLM families: Gamma, Tweedie, negative binomial.

Each is half the family's unit deviance up to terms constant in the linear predictor
``raw`` (so the fitted coefficients are those of the deviance), written once for every
array namespace with an explicit ``xp``, like the losses of
:mod:`dask_dgd.losses._pointwise`, and with the same traits.  Their links are not
canonical: ``hessian_weight`` is the *expected* (Fisher) information weight

.. math:: h(\mu) = \frac{(\partial \mu / \partial r)^2}{V(\mu)} = \frac{\mu^2}{V(\mu)} \ge 0,

not the observed second derivative (which can be negative for the Tweedie losses with
``power > 2``), so that Newton steps (Fisher scoring, IRLS) always point downhill and
the coefficients' covariance agrees with statsmodels' GLM.  ``unit_variance(mu, xp)``
is :math:`V(\mu)` and ``fixed_dispersion`` says whether the dispersion is known
(negative binomial with a fixed ``theta``: 1) or must be estimated (Gamma, Tweedie).
"""

import math
import numbers
from dataclasses import dataclass
from typing import ClassVar

from ..exceptions import ParameterError
from ._pointwise import _column, _LogLink

__all__ = ["HalfGamma", "HalfNegativeBinomial", "HalfTweedie"]


@dataclass(frozen=True)
class HalfGamma(_LogLink):
    r"""Gamma loss with log link, targets ``y > 0``.

    Attributes
    ----------
    curvature_bound : None
        The second derivative :math:`y e^{-r}` is unbounded; ``local_curvature`` gives
        it per row (it needs ``y``: ``curvature_needs_y`` is True).
    fixed_dispersion : bool
        False: the Gamma dispersion (shape's inverse) is estimated from the data.

    Notes
    -----
    With prediction :math:`\mu = e^{r}` and variance function :math:`V(\mu) = \mu^2`,

    .. math:: \ell(y, r) = r + y e^{-r}, \qquad
              \partial_r \ell = 1 - y e^{-r}, \qquad h = 1 .

    This is scikit-learn's ``HalfGammaLoss`` without its constant term; half the Gamma
    deviance is :math:`\ell(y, r) - \log y - 1`.  ``hessian_weight`` is the Fisher weight
    1, the expectation of the observed second derivative :math:`y e^{-r}`.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd.losses import HalfGamma
    >>> loss, grad = HalfGamma().loss_gradient(np.array([2.0]), np.array([[0.0]]), np)
    >>> float(loss[0]), float(grad[0, 0])
    (2.0, -1.0)
    """

    fixed_dispersion: ClassVar[bool] = False

    def _pointwise(self, y, r, xp):
        ratio = y * xp.exp(-r)
        return r + ratio, 1.0 - ratio

    def hessian_weight(self, y, raw, xp):
        """Fisher information weight per sample: ones, shape ``(n,)``."""
        return xp.ones_like(_column(raw))

    def local_curvature(self, y, raw, xp):
        """Observed second derivative with respect to ``raw`` per sample: ``y * exp(-raw)``."""
        return y * xp.exp(-_column(raw))

    def unit_variance(self, mu, xp):
        """Variance function :math:`V(\\mu) = \\mu^2`."""
        return mu * mu

    def unit_deviance(self, y, mu, xp):
        """Gamma unit deviance :math:`2 (\\log(\\mu / y) + y / \\mu - 1)`, elementwise
        (``y`` and ``mu`` broadcast; scikit-learn's ``mean_gamma_deviance`` per row)."""
        ratio = y / mu
        return 2.0 * (ratio - xp.log(ratio) - 1.0)


@dataclass(frozen=True)
class HalfTweedie(_LogLink):
    r"""Tweedie loss with log link and variance power ``power``.

    Parameters
    ----------
    power : float
        Variance power :math:`p`, with :math:`V(\mu) = \mu^p`: ``p <= 0`` (0: normal,
        targets any real), ``p = 1`` (Poisson, ``y >= 0``), ``1 < p < 2`` (compound
        Poisson-Gamma, ``y >= 0``), ``p = 2`` (Gamma, ``y > 0``), ``p > 2`` (e.g. 3:
        inverse Gaussian, ``y > 0``).  Powers in ``(0, 1)`` belong to no distribution
        and are refused, as in scikit-learn.

    Attributes
    ----------
    curvature_bound : None
        The second derivative is unbounded; ``local_curvature`` gives it per row
        (it needs ``y``: ``curvature_needs_y`` is True).
    fixed_dispersion : bool
        False: the dispersion is estimated from the data.

    Raises
    ------
    ParameterError
        If ``power`` is not a finite real number or lies in ``(0, 1)``.

    Notes
    -----
    With prediction :math:`\mu = e^{r}`, for :math:`p \notin \{1, 2\}`

    .. math:: \ell(y, r) = -\frac{y\, e^{(1-p) r}}{1-p} + \frac{e^{(2-p) r}}{2-p},
              \qquad \partial_r \ell = \mu^{2-p} - y \mu^{1-p},

    which is :math:`e^{r} - y r` for :math:`p = 1` and :math:`r + y e^{-r}` for
    :math:`p = 2`: scikit-learn's ``HalfTweedieLoss`` without its constant term.  Half
    the Tweedie deviance is :math:`\ell(y, r) + y^{2-p} / ((1-p)(2-p))` for
    :math:`p \notin \{1, 2\}`.  ``hessian_weight`` is the Fisher weight
    :math:`\mu^{2-p}`; the observed second derivative
    :math:`(2-p)\mu^{2-p} - (1-p) y \mu^{1-p}` can be negative when :math:`p > 2` or
    :math:`p < 1` (the loss is then not convex in ``raw``).

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd.losses import HalfTweedie
    >>> loss, grad = HalfTweedie(1.5).loss_gradient(np.array([4.0]), np.array([[0.0]]), np)
    >>> float(loss[0]), float(grad[0, 0])
    (10.0, -3.0)
    """

    power: float

    fixed_dispersion: ClassVar[bool] = False

    def __post_init__(self):
        p = self.power
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not math.isfinite(p):
            raise ParameterError(f"power must be a finite real number, got {p!r}")
        if 0 < p < 1:
            raise ParameterError(
                f"power must be <= 0 or >= 1, got {p!r}: no Tweedie distribution has a variance "
                "power in (0, 1); use 0 (normal), 1 (Poisson), a power in (1, 2) (compound "
                "Poisson-Gamma), 2 (Gamma) or 3 (inverse Gaussian)"
            )
        object.__setattr__(self, "power", float(p))

    def _pointwise(self, y, r, xp):
        p = self.power
        if p == 1.0:
            mean = xp.exp(r)
            return mean - y * r, mean - y
        if p == 2.0:
            ratio = y * xp.exp(-r)
            return r + ratio, 1.0 - ratio
        a = xp.exp((1.0 - p) * r)  # mu^(1-p)
        b = xp.exp((2.0 - p) * r)  # mu^(2-p)
        loss = -y * a / (1.0 - p) + b / (2.0 - p)
        return loss, b - y * a

    def hessian_weight(self, y, raw, xp):
        """Fisher information weight per sample: ``exp((2 - power) * raw)``, i.e. ``mu^(2-p)``."""
        return xp.exp((2.0 - self.power) * _column(raw))

    def local_curvature(self, y, raw, xp):
        """Observed second derivative with respect to ``raw`` per sample,
        ``(2-p) mu^(2-p) - (1-p) y mu^(1-p)``: ``exp(raw)`` for ``p = 1``, ``y exp(-raw)``
        for ``p = 2``, negative for some rows when ``p > 2`` or ``p < 1``."""
        r, p = _column(raw), self.power
        return (2.0 - p) * xp.exp((2.0 - p) * r) - (1.0 - p) * y * xp.exp((1.0 - p) * r)

    def unit_variance(self, mu, xp):
        """Variance function :math:`V(\\mu) = \\mu^p`."""
        return mu**self.power

    def unit_deviance(self, y, mu, xp):
        r"""Tweedie unit deviance of power :math:`p`, elementwise (``y`` and ``mu`` broadcast),
        as scikit-learn's ``mean_tweedie_deviance`` per row: :math:`(y - \mu)^2` for
        :math:`p = 0`, :math:`2 (y \log(y / \mu) - y + \mu)` for :math:`p = 1`,
        :math:`2 (\log(\mu / y) + y / \mu - 1)` for :math:`p = 2`, and otherwise

        .. math:: 2 \Big(\frac{\max(y, 0)^{2-p}}{(1-p)(2-p)} - \frac{y \mu^{1-p}}{1-p}
                  + \frac{\mu^{2-p}}{2-p}\Big).
        """
        p = self.power
        if p == 0.0:
            return (y - mu) ** 2
        if p == 1.0:
            positive = y > 0
            ylogy = xp.where(positive, y * xp.log(xp.where(positive, y, 1.0) / mu), 0.0)
            return 2.0 * (ylogy - y + mu)
        if p == 2.0:
            ratio = y / mu
            return 2.0 * (ratio - xp.log(ratio) - 1.0)
        y_plus = xp.where(y > 0, y, 0.0)
        return 2.0 * (y_plus ** (2.0 - p) / ((1.0 - p) * (2.0 - p)) - y * mu ** (1.0 - p) / (1.0 - p)
                      + mu ** (2.0 - p) / (2.0 - p))


@dataclass(frozen=True)
class HalfNegativeBinomial(_LogLink):
    r"""Negative binomial (NB2) loss with log link and a fixed ``theta``, targets ``y >= 0``.

    Parameters
    ----------
    theta : float
        Shape (R's MASS ``theta``, the "size"): the variance is
        :math:`V(\mu) = \mu + \mu^2 / \theta`; statsmodels'
        ``families.NegativeBinomial(alpha=1/theta)``.  Large ``theta`` approaches the
        Poisson model.

    Attributes
    ----------
    curvature_bound : None
        The second derivative is unbounded in ``y``; ``local_curvature`` gives it per
        row (it needs ``y``: ``curvature_needs_y`` is True).
    fixed_dispersion : bool
        True: with ``theta`` fixed the dispersion is 1.

    Raises
    ------
    ParameterError
        If ``theta`` is not a finite positive real number.

    Notes
    -----
    With prediction :math:`\mu = e^{r}`,

    .. math:: \ell(y, r) = (y + \theta) \log(\theta + e^{r}) - y r, \qquad
              \partial_r \ell = \frac{\theta (\mu - y)}{\theta + \mu}, \qquad
              h = \frac{\mu}{1 + \mu / \theta} .

    Half the unit deviance is :math:`\ell(y, r) + y \log y - (y + \theta) \log(y + \theta)`
    (with :math:`0 \log 0 = 0`).  :math:`\log(\theta + e^r)` is computed as
    ``logaddexp(log(theta), r)``, which does not overflow.  ``hessian_weight`` is the
    Fisher weight :math:`\mu^2 / V(\mu)`; the observed second derivative
    :math:`(y + \theta)\, \theta \mu / (\theta + \mu)^2` is also non-negative.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd.losses import HalfNegativeBinomial
    >>> loss, grad = HalfNegativeBinomial(1.0).loss_gradient(
    ...     np.array([3.0]), np.array([[0.0]]), np)
    >>> round(float(loss[0]), 6), float(grad[0, 0])
    (2.772589, -1.0)
    """

    theta: float

    fixed_dispersion: ClassVar[bool] = True

    def __post_init__(self):
        t = self.theta
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or not (math.isfinite(t) and t > 0):
            raise ParameterError(
                f"theta must be a finite real number > 0, got {t!r}: the variance is "
                "mu + mu**2 / theta (theta -> inf is the Poisson model, PoissonRegressor)"
            )
        object.__setattr__(self, "theta", float(t))

    def _pointwise(self, y, r, xp):
        theta = self.theta
        log_sum = xp.logaddexp(xp.full_like(r, math.log(theta)), r)  # log(theta + mu)
        share = xp.exp(r - log_sum)  # mu / (theta + mu), without overflow
        loss = (y + theta) * log_sum - y * r
        return loss, theta * share - y * (1.0 - share)

    def hessian_weight(self, y, raw, xp):
        """Fisher information weight per sample: ``mu / (1 + mu / theta)``."""
        r = _column(raw)
        log_sum = xp.logaddexp(xp.full_like(r, math.log(self.theta)), r)
        return self.theta * xp.exp(r - log_sum)

    def local_curvature(self, y, raw, xp):
        """Observed second derivative with respect to ``raw`` per sample,
        ``(y + theta) theta mu / (theta + mu)^2``, without overflow."""
        r = _column(raw)
        log_theta = xp.full_like(r, math.log(self.theta))
        log_sum = xp.logaddexp(log_theta, r)  # log(theta + mu)
        return (y + self.theta) * xp.exp(r - log_sum) * xp.exp(log_theta - log_sum)

    def unit_variance(self, mu, xp):
        """Variance function :math:`V(\\mu) = \\mu + \\mu^2 / \\theta`."""
        return mu + mu * mu / self.theta

    def unit_deviance(self, y, mu, xp):
        r"""Negative binomial unit deviance, elementwise (``y`` and ``mu`` broadcast):
        :math:`2 [y \log(y / \mu) - (y + \theta) \log((y + \theta) / (\mu + \theta))]`
        with :math:`0 \log 0 = 0` (statsmodels' ``NegativeBinomial(alpha=1/theta)``)."""
        theta = self.theta
        positive = y > 0
        ylogy = xp.where(positive, y * xp.log(xp.where(positive, y, 1.0) / mu), 0.0)
        return 2.0 * (ylogy - (y + theta) * xp.log((y + theta) / (mu + theta)))
