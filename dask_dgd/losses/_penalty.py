"""Elastic-net penalty on the flat parameter vector of a linear objective.

The penalty acts on the driver, on NumPy parameters, once per step: it never touches
the data.  Its smooth (L2) part is added to the gradient; its L1 part is handled by a
proximal step (soft-thresholding), so that exact zeros appear in the coefficients.
"""

import math
import numbers
from dataclasses import dataclass

import numpy as np

from ..exceptions import InputError, ParameterError

__all__ = ["Penalty", "shifted_to_penalty_minimum", "softmax_gauge"]


def _check_real(name, value, low, high):
    """``value`` as a float in ``[low, high]`` (``high`` may be ``inf``, excluded)."""
    interval = f"[{low}, {high}]" if math.isfinite(high) else f"[{low}, inf)"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ParameterError(
            f"{name} must be a real number in {interval}, got {value!r} "
            f"of type {type(value).__name__}"
        )
    value = float(value)
    if not (low <= value <= high and math.isfinite(value)):
        raise ParameterError(f"{name} must be in the range {interval}, got {value!r}")
    return value


@dataclass(frozen=True)
class Penalty:
    r"""Elastic-net penalty on the coefficients, never on the intercept.

    Parameters
    ----------
    alpha : float, default=0.0
        Overall strength, ``alpha >= 0``.  ``0`` means no penalty.
    l1_ratio : float, default=0.0
        Share of the L1 part, ``0 <= l1_ratio <= 1``: ``0`` is ridge (L2),
        ``1`` is lasso (L1).

    Raises
    ------
    ParameterError
        If ``alpha`` is negative or not finite, or ``l1_ratio`` is outside
        ``[0, 1]``.

    Notes
    -----
    For the coefficient matrix :math:`W` (the parameter matrix without its intercept
    row),

    .. math:: P(W) = \alpha \Big( \rho \, \lVert W \rVert_1
              + \frac{1 - \rho}{2} \lVert W \rVert_2^2 \Big),

    with :math:`\rho` = ``l1_ratio``; this is scikit-learn's ``ElasticNet``
    convention.  The smooth part :math:`\frac{\alpha(1-\rho)}{2}\lVert W\rVert_2^2`
    has gradient :math:`\alpha(1-\rho) W`; the L1 part is applied by its proximal
    operator, the soft-threshold

    .. math:: \operatorname{prox}_{t \alpha \rho \lVert\cdot\rVert_1}(w)
              = \operatorname{sign}(w) \max(|w| - t \alpha \rho, 0),

    for a step size :math:`t`.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd.losses import HalfSquaredError, LinearObjective, Penalty
    >>> objective = LinearObjective(HalfSquaredError(), n_features=2)
    >>> penalty = Penalty(alpha=1.0, l1_ratio=0.5)
    >>> params = np.array([1.0, -2.0, 5.0])  # two coefficients, then the intercept
    >>> penalty.value(params, objective)  # 0.5 * 3 + 0.25 * 5
    2.75
    >>> penalty.prox(params, 1.0, objective)
    array([ 0.5, -1.5,  5. ])
    """

    alpha: float = 0.0
    l1_ratio: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "alpha", _check_real("alpha", self.alpha, 0, math.inf))
        object.__setattr__(self, "l1_ratio", _check_real("l1_ratio", self.l1_ratio, 0, 1))

    @property
    def has_l1(self):
        """True when the penalty has a non-zero L1 part (a proximal step is needed)."""
        return self.alpha > 0 and self.l1_ratio > 0

    @property
    def l2_strength(self):
        """Coefficient ``alpha * (1 - l1_ratio)`` of the smooth part's gradient."""
        return self.alpha * (1.0 - self.l1_ratio)

    @property
    def l1_strength(self):
        """Coefficient ``alpha * l1_ratio`` of the L1 norm."""
        return self.alpha * self.l1_ratio

    def mask(self, objective):
        """Boolean vector of the penalised entries of ``params`` (all but the intercept).

        Parameters
        ----------
        objective : LinearObjective
            Gives the parameter layout.

        Returns
        -------
        mask : ndarray of bool, shape (objective.n_params,)
        """
        mask = np.ones(objective.n_params, dtype=bool)
        if objective.fit_intercept:
            mask[objective.n_params - objective.n_outputs :] = False
        return mask

    def _coef(self, params, objective):
        """The penalised entries of ``params``, flat, as float64."""
        params = np.asarray(params, dtype=np.float64)
        if params.shape != (objective.n_params,):
            raise InputError(
                f"params must have shape ({objective.n_params},) for {objective!r}, "
                f"got {params.shape}"
            )
        n_coef = objective.n_features * objective.n_outputs
        return params, params[:n_coef]

    def value(self, params, objective):
        """Full penalty value (L1 and L2 parts), as a Python float."""
        return self.smooth_value_gradient(params, objective)[0] + self.l1_value(
            params, objective
        )

    def l1_value(self, params, objective):
        """L1 part ``alpha * l1_ratio * ||W||_1``, as a Python float."""
        _, coef = self._coef(params, objective)
        if self.l1_strength == 0.0:
            return 0.0
        return self.l1_strength * float(np.sum(np.abs(coef)))

    def smooth_value_gradient(self, params, objective):
        """Smooth (L2) part and its gradient.

        Parameters
        ----------
        params : ndarray of shape (objective.n_params,)
        objective : LinearObjective

        Returns
        -------
        value : float
            ``alpha * (1 - l1_ratio) / 2 * ||W||_2^2``.
        grad : ndarray of shape (objective.n_params,)
            ``alpha * (1 - l1_ratio) * W`` on the coefficients, zero on the intercept.
        """
        params, coef = self._coef(params, objective)
        grad = np.zeros_like(params)
        strength = self.l2_strength
        if strength == 0.0:
            return 0.0, grad
        grad[: coef.size] = strength * coef
        return 0.5 * strength * float(coef @ coef), grad

    def prox(self, params, step, objective):
        """Proximal step of the L1 part: soft-threshold the coefficients.

        Parameters
        ----------
        params : ndarray of shape (objective.n_params,)
        step : float
            Step size ``t >= 0``; the threshold is ``t * alpha * l1_ratio``.
        objective : LinearObjective

        Returns
        -------
        params : ndarray of shape (objective.n_params,)
            A new array; the intercept is copied unchanged.  Without an L1 part this
            is a copy of ``params``.
        """
        params, coef = self._coef(params, objective)
        out = params.copy()
        threshold = float(step) * self.l1_strength
        if threshold < 0:
            raise ParameterError(f"step must be >= 0, got {step!r}")
        if threshold > 0:
            out[: coef.size] = np.sign(coef) * np.maximum(np.abs(coef) - threshold, 0.0)
        return out


def shifted_to_penalty_minimum(w, l1, l2):
    r"""``w`` of shape ``(..., m)`` with each row of ``m`` entries shifted by the constant
    :math:`t` minimising :math:`\sum_c \frac{l_2}{2}(w_c - t)^2 + l_1 |w_c - t|` (``l1``,
    ``l2`` broadcast to ``(..., 1)``; a row neither penalises is left as it is).

    A softmax's loss does not change when one constant is added to a feature's
    coefficients of every class; only the penalty sees that shift, and this is its
    exact minimiser (glmnet's recentring for the multinomial elastic net): the
    minimiser is a stationary point between two sorted :math:`w_c`, or one of them.

    >>> import numpy as np
    >>> shifted_to_penalty_minimum(np.array([[1.0, 2.0, 6.0]]), 0.0, 1.0)
    array([[-2., -1.,  3.]])
    """
    w = np.asarray(w, dtype=np.float64)
    m = w.shape[-1]
    l1 = np.broadcast_to(np.asarray(l1, dtype=np.float64), w.shape[:-1] + (1,))
    l2 = np.broadcast_to(np.asarray(l2, dtype=np.float64), w.shape[:-1] + (1,))
    s = np.sort(w, axis=-1)
    below = np.arange(m + 1)  # entries below the shift, in each gap between sorted values
    with np.errstate(divide="ignore", invalid="ignore"):  # no L2: only the sorted values count
        stationary = w.mean(axis=-1, keepdims=True) - l1 * (2 * below - m) / (m * l2)
    inf = np.full(s.shape[:-1] + (1,), np.inf)
    gap = np.clip(np.where(l2 > 0, stationary, s[..., :1]), np.concatenate([-inf, s], axis=-1),
                  np.concatenate([s, inf], axis=-1))
    t = np.concatenate([gap, s], axis=-1)  # (..., 2m + 1) candidates
    dev = w[..., None, :] - t[..., :, None]
    value = np.sum(0.5 * l2[..., None] * dev ** 2 + l1[..., None] * np.abs(dev), axis=-1)
    best = np.take_along_axis(t, np.argmin(value, axis=-1)[..., None], axis=-1)
    return w - np.where(l1 + l2 > 0, best, 0.0)


def softmax_gauge(params, l1, l2, n_outputs):
    """One softmax model's parameters (:class:`~dask_dgd.losses.LinearObjective`'s
    layout, ``n_outputs`` classes) moved along each row's common shift, which the loss
    does not see: a row its penalty sees (``l1``, ``l2``: each parameter's strengths,
    equal along a row) to the penalty's minimum (:func:`shifted_to_penalty_minimum`), a
    row no penalty sees to its classes' mean zero (scikit-learn's convention)."""
    m = int(n_outputs)
    W = np.asarray(params, dtype=np.float64).reshape(-1, m)
    l1 = np.asarray(l1, dtype=np.float64).reshape(-1, m)[:, :1]
    l2 = np.asarray(l2, dtype=np.float64).reshape(-1, m)[:, :1]
    return np.where(l1 + l2 == 0, W - W.mean(axis=1, keepdims=True), shifted_to_penalty_minimum(W, l1, l2)).ravel()
