r"""Elastic-net penalties of a stacked path's columns (see :mod:`dask_dgd.losses._path`),
one strength per column, with the multinomial's re-centring step."""

import numbers
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..exceptions import ParameterError

__all__ = ["PathPenalty"]


@dataclass(frozen=True)
class PathPenalty:
    r"""Elastic-net penalties of the stacked columns, one strength per column.

    Column :math:`k` is penalised by
    :math:`\lambda^{(1)}_k \lVert w_k \rVert_1 + \frac{\lambda^{(2)}_k}{2} \lVert w_k \rVert_2^2`
    (``l1 = alpha * l1_ratio``, ``l2 = alpha * (1 - l1_ratio)``); intercepts are not.
    With ``n_outputs = m``, :math:`w_k` is column :math:`k`'s ``(n_features, m)`` block
    and the norms are entrywise.

    Parameters
    ----------
    n_features : int
    fit_intercept : bool
    l1, l2 : tuple of float
        Per-column strengths (length ``K``), non-negative.
    n_outputs : int, default=1
        Parameter columns per stacked model (the loss's ``n_outputs``).
    recenter : bool, default=False
        The loss does not change when a constant is added to a feature's ``m``
        coefficients (the softmax): after each proximal step, shift them by the constant
        that minimises the penalty (glmnet's step for the multinomial elastic net).

    Notes
    -----
    With ``recenter``, the direction :math:`w_{jk} \to w_{jk} + c\,\mathbf 1` is seen by
    the penalty only; without the shift, proximal gradient moves along it at the rate of
    the L2 strength alone, which is slow for a weak penalty.  The shift minimises
    :math:`\sum_c \frac{\lambda^{(2)}}{2}(w_c - t)^2 + \lambda^{(1)}|w_c - t|` over
    :math:`t` exactly (the minimiser is a stationary point between two sorted
    :math:`w_c` or one of them), so every step lowers the objective at least as much as
    the proximal step alone, and the minimisers are the same.
    """

    n_features: int
    fit_intercept: bool
    l1: tuple
    l2: tuple
    n_outputs: int = 1
    recenter: bool = False

    def __post_init__(self):
        l1 = tuple(float(v) for v in self.l1)
        l2 = tuple(float(v) for v in self.l2)
        if len(l1) != len(l2) or not all(np.isfinite(l1 + l2)) or min(l1 + l2) < 0:
            raise ParameterError(f"l1 and l2 must be finite non-negative strengths of the same length; got {l1}, {l2}")
        m = self.n_outputs
        if isinstance(m, bool) or not isinstance(m, numbers.Integral) or m < 1:
            raise ParameterError(f"n_outputs must be an integer >= 1, got {m!r}")
        object.__setattr__(self, "l1", l1)
        object.__setattr__(self, "l2", l2)
        object.__setattr__(self, "n_outputs", int(m))

    @property
    def has_l1(self):
        return any(v > 0 for v in self.l1)

    def _per_param_column(self, strengths):
        """Strengths ``(K,)`` repeated over each model's outputs: ``(K * m,)``."""
        return np.repeat(np.asarray(strengths, dtype=np.float64), self.n_outputs)

    @cached_property
    def decay_mask(self):
        mask = np.ones((self.n_features + self.fit_intercept, len(self.l1) * self.n_outputs), dtype=bool)
        if self.fit_intercept:
            mask[self.n_features] = False
        return mask.ravel()

    def _coef(self, params):
        width = len(self.l1) * self.n_outputs
        return np.asarray(params, dtype=np.float64).reshape(-1, width)[: self.n_features]

    def smooth_value_gradient(self, params):
        coef = self._coef(params)
        l2 = self._per_param_column(self.l2)
        grad = np.zeros((len(params) // len(l2), len(l2)))
        grad[: self.n_features] = coef * l2
        return 0.5 * float(np.sum(l2 * np.sum(coef * coef, axis=0))), grad.ravel()

    def l1_value(self, params):
        if not self.has_l1:
            return 0.0
        return float(np.sum(self._per_param_column(self.l1) * np.sum(np.abs(self._coef(params)), axis=0)))

    def prox(self, params, step):
        """Soft-threshold column ``k`` (all its outputs) by ``step * l1[k]``."""
        threshold = float(step) * self._per_param_column(self.l1)
        out = np.array(params, dtype=np.float64, copy=True).reshape(-1, len(threshold))
        coef = out[: self.n_features]
        out[: self.n_features] = np.sign(coef) * np.maximum(np.abs(coef) - threshold, 0.0)
        if self.recenter and self.n_outputs > 1:
            out[: self.n_features] = self._recentred(out[: self.n_features])
        return out.ravel()

    def _recentred(self, coef):
        """``coef`` ``(d, K * m)`` with each feature's ``m`` outputs of each column shifted by
        the constant minimising the column's penalty (see the Notes)."""
        K, m = len(self.l1), self.n_outputs
        w = coef.reshape(-1, K, m)
        l1 = np.asarray(self.l1)[None, :, None]
        l2 = np.asarray(self.l2)[None, :, None]
        s = np.sort(w, axis=2)
        below = np.arange(m + 1)  # entries below the shift, in each gap between sorted values
        with np.errstate(divide="ignore", invalid="ignore"):  # no L2: only the sorted values count
            stationary = w.mean(axis=2, keepdims=True) - l1 * (2 * below - m) / (m * l2)
        inf = np.full(s.shape[:2] + (1,), np.inf)
        gap = np.clip(np.where(l2 > 0, stationary, s[:, :, :1]), np.concatenate([-inf, s], axis=2),
                      np.concatenate([s, inf], axis=2))
        t = np.concatenate([gap, s], axis=2)  # (d, K, 2m + 1) candidates
        dev = w[:, :, None, :] - t[:, :, :, None]
        value = np.sum(0.5 * l2[..., None] * dev ** 2 + l1[..., None] * np.abs(dev), axis=3)
        best = np.take_along_axis(t, np.argmin(value, axis=2)[:, :, None], axis=2)
        return (w - np.where(l1 + l2 > 0, best, 0.0)).reshape(coef.shape)  # no penalty: no shift
