"""Pointwise losses of a linear predictor, written once for every array namespace.

A pointwise loss maps the targets ``y`` (shape ``(n,)``) and the linear predictor
``raw`` (shape ``(n, n_outputs)``) to the per-sample loss and its gradient with
respect to ``raw``.  The functions take the array namespace ``xp`` explicitly and use
only array-API calls on it, so the same code runs on NumPy, CuPy and
``array_api_strict`` arrays.  The losses are frozen dataclasses without state: they
pickle to a worker, compare by value and print readably.

Each loss declares what the engine may do with it (traits, asked instead of types):

- ``curvature_bound``: an upper bound of the second derivative with respect to the
  linear predictor (None when unbounded), for the automatic learning rate;
- ``fused_code``: the loss's number in the fused Numba kernel
  (:mod:`dask_dgd.losses._fused`), or None when the kernel does not know it;
- ``hessian_weight(y, raw, xp)``: the second derivative per sample (Fisher's for a
  non-canonical link; ``local_curvature`` gives the observed one, which the Newton
  solver uses where it is not negative); a loss without it (``has_hessian`` False) is
  refused by ``solver="newton"``;
- ``unit_variance(mu, xp)``: the variance function ``V(mu)`` of the family, for
  Pearson residuals and the dispersion estimate of the coefficients' covariance;
- ``fixed_dispersion``: True when the dispersion is known to be 1 (Poisson, binomial),
  False when the covariance must estimate it from the data (Gaussian, Gamma, ...).
"""

import numbers
from dataclasses import dataclass
from typing import ClassVar

import array_api_compat

from ..exceptions import ParameterError

__all__ = ["BinaryLogistic", "HalfPoisson", "HalfSquaredError", "MultinomialLogistic"]

# Up to this many classes, the row maximum is taken by a loop over columns.
_COLUMNWISE_MAX_CLASSES = 16


def _ones_column(raw, xp):
    """A ``(n_outputs, 1)`` column of ones like ``raw``: ``raw @ ones`` sums rows."""
    return xp.ones(
        (raw.shape[1], 1), dtype=raw.dtype, device=array_api_compat.device(raw)
    )


def _column(raw):
    """The single column of a ``(n, 1)`` predictor, as shape ``(n,)``."""
    return raw[:, 0]


class _OneOutput:
    """A loss of a single-column linear predictor: ``loss_gradient`` on the column.

    A subclass writes ``_pointwise(y, r, xp)``, the loss and its derivative with respect
    to ``r``, both of shape ``(n,)``, for ``r`` the column of ``raw``, and
    ``hessian_weight``.
    """

    has_hessian: ClassVar[bool] = True

    @property
    def n_outputs(self):
        """Number of columns of the linear predictor: 1."""
        return 1

    def loss_gradient(self, y, raw, xp):
        """Per-sample loss and its gradient with respect to ``raw``.

        Parameters
        ----------
        y : array of shape (n,)
            Targets, in the range the loss's family takes (see the class).
        raw : array of shape (n, 1)
            Linear predictor (for a log link, the log of the mean; for the logit link,
            the log-odds).
        xp : namespace
            Array namespace of ``raw``.

        Returns
        -------
        loss : array of shape (n,)
        grad_raw : array of shape (n, 1)
        """
        loss, grad = self._pointwise(y, _column(raw), xp)
        return loss, grad[:, None]


class _LogLink(_OneOutput):
    """A loss with the log link and the traits of the log-link families: no bound of the
    curvature (``local_curvature`` gives it per row) and a Hessian weight."""

    curvature_bound: ClassVar[float | None] = None
    curvature_needs_y: ClassVar[bool] = True
    fused_code: ClassVar[int | None] = None

    def inverse_link(self, raw, xp):
        """Predicted mean ``exp(raw)``, as shape ``(n,)``."""
        return xp.exp(_column(raw))


@dataclass(frozen=True)
class HalfSquaredError(_OneOutput):
    r"""Half squared error, the loss of least-squares regression.

    Attributes
    ----------
    curvature_bound : float
        The second derivative with respect to ``raw``, the same for every row: ``1.0``.

    Notes
    -----
    With the identity link, prediction :math:`\mu = r` and

    .. math:: \ell(y, r) = \tfrac12 (y - r)^2, \qquad
              \partial_r \ell = r - y, \qquad \partial_r^2 \ell = 1 .

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd.losses import HalfSquaredError
    >>> loss, grad = HalfSquaredError().loss_gradient(
    ...     np.array([1.0]), np.array([[3.0]]), np)
    >>> float(loss[0]), float(grad[0, 0])
    (2.0, 2.0)
    """

    curvature_bound: ClassVar[float | None] = 1.0
    fused_code: ClassVar[int | None] = 0
    fixed_dispersion: ClassVar[bool] = False

    def _pointwise(self, y, r, xp):
        diff = r - y
        return 0.5 * (diff * diff), diff

    def inverse_link(self, raw, xp):
        """Predicted mean: the identity, as shape ``(n,)``."""
        return _column(raw)

    def hessian_weight(self, y, raw, xp):
        """Second derivative with respect to ``raw`` per sample: ones, shape ``(n,)``."""
        return xp.ones_like(_column(raw))

    def unit_variance(self, mu, xp):
        """Variance function of the Gaussian family: ones like ``mu``."""
        return xp.ones_like(mu)


@dataclass(frozen=True)
class BinaryLogistic(_OneOutput):
    r"""Binary cross-entropy of a logistic model, targets in ``{0, 1}``.

    Attributes
    ----------
    curvature_bound : float
        Upper bound of the second derivative :math:`p (1 - p)`, reached at
        :math:`p = 1/2`: ``0.25``.

    Notes
    -----
    With :math:`p = \sigma(r) = 1 / (1 + e^{-r})`,

    .. math:: \ell(y, r) = \log(1 + e^{r}) - y r, \qquad
              \partial_r \ell = \sigma(r) - y, \qquad
              \partial_r^2 \ell = \sigma(r)(1 - \sigma(r)) \le \tfrac14 .

    The softplus :math:`\log(1 + e^{r})` is computed as ``logaddexp(0, r)`` and the
    sigmoid as :math:`\exp(r - \log(1 + e^{r}))`, so neither overflows for large
    :math:`|r|`.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd.losses import BinaryLogistic
    >>> loss, grad = BinaryLogistic().loss_gradient(
    ...     np.array([1.0]), np.array([[0.0]]), np)
    >>> round(float(loss[0]), 6), float(grad[0, 0])
    (0.693147, -0.5)
    """

    curvature_bound: ClassVar[float | None] = 0.25
    fused_code: ClassVar[int | None] = 1
    fixed_dispersion: ClassVar[bool] = True

    def _pointwise(self, y, r, xp):
        softplus = xp.logaddexp(xp.zeros_like(r), r)
        prob = xp.exp(r - softplus)
        return softplus - y * r, prob - y

    def inverse_link(self, raw, xp):
        """Probability of class 1, as shape ``(n,)``."""
        r = _column(raw)
        return xp.exp(r - xp.logaddexp(xp.zeros_like(r), r))

    def hessian_weight(self, y, raw, xp):
        """Second derivative with respect to ``raw`` per sample: ``p (1 - p)``."""
        prob = 0.5 * (1.0 + xp.tanh(0.5 * _column(raw)))
        return prob * (1.0 - prob)

    def unit_variance(self, mu, xp):
        """Variance function of the Bernoulli family: ``mu (1 - mu)``."""
        return mu * (1.0 - mu)


@dataclass(frozen=True)
class MultinomialLogistic:
    r"""Cross-entropy of a multinomial (softmax) model with ``n_classes`` outputs.

    Parameters
    ----------
    n_classes : int
        Number of classes ``K >= 2``; the targets are class indices ``0 .. K-1``,
        stored as integers or floats.

    Attributes
    ----------
    curvature_bound : float
        Upper bound of the largest eigenvalue of the Hessian with respect to one
        row of ``raw``: ``0.5``.

    Raises
    ------
    ParameterError
        If ``n_classes`` is not an integer of at least 2.

    Notes
    -----
    With :math:`p_k = e^{r_k} / \sum_j e^{r_j}` (the softmax),

    .. math:: \ell(y, r) = \log \sum_k e^{r_k} - r_y, \qquad
              \partial_{r_k} \ell = p_k - [y = k], \qquad
              \nabla_r^2 \ell = \operatorname{diag}(p) - p p^\top
              \preceq \tfrac12 I .

    The log-sum-exp subtracts the row maximum first, so it never overflows.  Targets
    outside ``0 .. K-1`` are not checked here (the estimators validate labels):
    such a row contributes :math:`\log \sum_k e^{r_k}` as if no class were right.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd.losses import MultinomialLogistic
    >>> loss, grad = MultinomialLogistic(3).loss_gradient(
    ...     np.array([2]), np.zeros((1, 3)), np)
    >>> round(float(loss[0]), 6)
    1.098612
    """

    n_classes: int

    curvature_bound: ClassVar[float | None] = 0.5
    fused_code: ClassVar[int | None] = 3
    has_hessian: ClassVar[bool] = False

    def __post_init__(self):
        k = self.n_classes
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 2:
            raise ParameterError(
                f"n_classes must be an integer >= 2, got {k!r}; a problem with one "
                "class has nothing to learn"
            )
        object.__setattr__(self, "n_classes", int(k))

    @property
    def n_outputs(self):
        """Number of columns of the linear predictor: ``n_classes``."""
        return self.n_classes

    def _log_softmax_parts(self, raw, xp):
        """Row-wise ``(log-sum-exp, softmax)`` of ``raw``, both stable.

        Row reductions over a handful of columns are slow in NumPy (a reduction
        per row), so the maximum is taken column by column for few classes and the
        row sums are a matrix product with a vector of ones.
        """
        k = self.n_classes
        if k <= _COLUMNWISE_MAX_CLASSES:
            shift = raw[:, 0]
            for j in range(1, k):
                shift = xp.maximum(shift, raw[:, j])
            shift = shift[:, None]
        else:
            shift = xp.max(raw, axis=1, keepdims=True)
        expd = xp.exp(raw - shift)
        total = expd @ _ones_column(raw, xp)
        return shift + xp.log(total), expd / total

    def loss_gradient(self, y, raw, xp):
        """Per-sample loss and its gradient with respect to ``raw``.

        Parameters
        ----------
        y : array of shape (n,)
            Class indices ``0 .. n_classes - 1`` (integer or float).
        raw : array of shape (n, n_classes)
            Linear predictor (unnormalised log-probabilities).
        xp : namespace
            Array namespace of ``raw``.

        Returns
        -------
        loss : array of shape (n,)
        grad_raw : array of shape (n, n_classes)
        """
        lse, prob = self._log_softmax_parts(raw, xp)
        device = array_api_compat.device(raw)
        classes = xp.arange(self.n_classes, dtype=raw.dtype, device=device)
        onehot = xp.astype(xp.astype(y, raw.dtype)[:, None] == classes, raw.dtype)
        raw_true = (raw * onehot) @ _ones_column(raw, xp)
        return (lse - raw_true)[:, 0], prob - onehot

    def inverse_link(self, raw, xp):
        """Class probabilities (softmax), as shape ``(n, n_classes)``."""
        return self._log_softmax_parts(raw, xp)[1]

    def hessian_blocks(self, y, raw, xp):
        """The Hessian of each row's loss with respect to its ``raw`` row,
        ``diag(p) - p p^T``, as shape ``(n, n_classes, n_classes)`` (``y`` is not used)."""
        prob = self._log_softmax_parts(raw, xp)[1]
        eye = xp.eye(self.n_classes, dtype=prob.dtype, device=array_api_compat.device(raw))
        return prob[:, :, None] * eye[None, :, :] - prob[:, :, None] * prob[:, None, :]


@dataclass(frozen=True)
class HalfPoisson(_LogLink):
    r"""Poisson loss with log link, targets ``y >= 0``.

    Attributes
    ----------
    curvature_bound : None
        The second derivative :math:`e^{r}` is unbounded; ``local_curvature`` gives it
        at given ``raw``, for the local estimate of
        :func:`~dask_dgd.losses.lipschitz_bound`.
    curvature_needs_y : bool
        False: the second derivative does not depend on the targets.

    Notes
    -----
    With prediction :math:`\mu = e^{r}`,

    .. math:: \ell(y, r) = e^{r} - y r, \qquad
              \partial_r \ell = e^{r} - y, \qquad \partial_r^2 \ell = e^{r} .

    This is scikit-learn's ``HalfPoissonLoss`` without its constant term; half the
    Poisson deviance is :math:`\ell(y, r) + y \log y - y` (with :math:`0 \log 0 = 0`).

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd.losses import HalfPoisson
    >>> loss, grad = HalfPoisson().loss_gradient(
    ...     np.array([2.0]), np.array([[0.0]]), np)
    >>> float(loss[0]), float(grad[0, 0])
    (1.0, -1.0)
    """

    curvature_needs_y: ClassVar[bool] = False
    fused_code: ClassVar[int | None] = 2
    fixed_dispersion: ClassVar[bool] = True

    def _pointwise(self, y, r, xp):
        mean = xp.exp(r)
        return mean - y * r, mean - y

    def hessian_weight(self, y, raw, xp):
        """Second derivative with respect to ``raw`` per sample: ``exp(raw)``."""
        return xp.exp(_column(raw))

    def local_curvature(self, y, raw, xp):
        """Second derivative with respect to ``raw`` per sample, ``exp(raw)``; ``y`` is
        not used (it may be None)."""
        return xp.exp(_column(raw))

    def unit_variance(self, mu, xp):
        """Variance function of the Poisson family: ``mu``."""
        return mu
