"""Linear models' objective on one block of rows: sums of loss and gradient.

:class:`LinearObjective` is what a worker task runs on the block it holds: it turns
the flat NumPy parameter vector into a coefficient matrix on the block's device,
evaluates a pointwise loss on ``X @ coef + intercept`` and returns *sums* (never
means) to the driver, where the tree reduction adds them.  Dense blocks may come from
any array-API namespace (NumPy, CuPy, ``array_api_strict``); sparse blocks are SciPy
or CuPy CSR matrices and use only ``X @ v`` and ``X.T @ v``.
"""

import numbers
from dataclasses import dataclass

import array_api_compat
import numpy as np

from .._backend import asarray_like, get_namespace, is_sparse, take_rows, to_numpy
from ..exceptions import InputError, ParameterError
from . import _fused
from ._gram import weighted_gram
from ._lipschitz import lipschitz_bound
from ._penalty import Penalty

__all__ = ["LinearObjective", "lipschitz_bound", "objective_value_gradient", "objective_hessian"]


#: Bytes of ``X`` processed per row slice on the host: small enough to stay in the
#: cache between ``X @ coef`` and ``X.T @ grad``, large enough for BLAS to be efficient.
#: Measured on a 125,000 x 100 logistic block (1 BLAS thread, AMD EPYC, 512 KiB L2):
#: 256 KiB 57 ms, 512 KiB 45, 1 MiB 41, 2 MiB 46, 4 MiB 51, whole block 60 ms.
SLICE_BYTES = 2**20

_MIN_SLICE_ROWS = 256


@dataclass(frozen=True)
class LinearObjective:
    r"""Loss of a linear model on blocks of rows, in the flat parameter layout.

    Parameters
    ----------
    loss : pointwise loss
        One of :class:`HalfSquaredError`, :class:`BinaryLogistic`,
        :class:`MultinomialLogistic`, :class:`HalfPoisson` (or any object with
        ``n_outputs``, ``loss_gradient(y, raw, xp)`` and ``curvature_bound``).
    n_features : int
        Number of columns of ``X``.
    fit_intercept : bool, default=True
        Whether the parameters end with one intercept per output.
    slice_bytes : int or None, default=None
        Bytes of ``X`` processed at a time by :meth:`block_sums`.  ``None`` chooses:
        :data:`SLICE_BYTES` (1 MiB) for dense host arrays; the whole block for CuPy
        (a GPU gains little from slicing and pays kernel launches per slice) and for
        sparse blocks (slicing CSR copies it, which costs more than it saves; the
        temporaries are of size ``n_samples * n_outputs`` anyway).
    kernel : {"auto", "array-api"}, default="auto"
        ``"auto"`` evaluates dense C-contiguous float32/float64 NumPy blocks of the
        built-in losses with a fused Numba kernel that reads each row of ``X`` once
        (see ``dask_dgd.losses._fused``), when Numba is installed; every other block,
        and every block with ``"array-api"``, takes the array-API path.
    offset : bool, default=False
        Whether every block of ``X`` ends with ``n_outputs`` offset columns: known
        terms added to the linear predictor with their coefficients fixed at 1 (as
        statsmodels' and glum's ``offset``; ``log(exposure)`` for a rate model).  They
        are data, not parameters: ``n_params`` is unchanged, and the gradient, Hessian
        and Lipschitz estimate are those of the ``n_features`` columns before them.

    Attributes
    ----------
    n_outputs : int
        Columns of the linear predictor (1, or the number of classes).
    n_params : int
        Length of the flat parameter vector,
        ``(n_features + fit_intercept) * n_outputs``.
    n_columns : int
        Columns of the blocks of ``X``: ``n_features``, plus ``n_outputs`` with ``offset``.

    Raises
    ------
    ParameterError
        If ``n_features`` is not a non-negative integer or ``slice_bytes`` is not a
        positive integer.

    Notes
    -----
    The parameters are one flat float64 vector :math:`\theta`; reshaped to
    ``(n_features + fit_intercept, n_outputs)`` its rows are the coefficients
    :math:`W` followed, when ``fit_intercept``, by the intercept row :math:`b`.  For a
    block :math:`(X, y, s)` with sample weights :math:`s` (ones when omitted) the
    linear predictor is :math:`R = X W + \mathbf 1 b^\top` (plus the offset columns
    :math:`O` with ``offset``: :math:`R = X W + \mathbf 1 b^\top + O`) and :meth:`block_sums`
    returns

    .. math:: L = \sum_i s_i \ell(y_i, R_i), \qquad
              \nabla_W L = X^\top G, \qquad \nabla_b L = G^\top \mathbf 1,
              \qquad S = \sum_i s_i,

    with :math:`G_i = s_i \, \partial_R \ell(y_i, R_i)`.  Sums over disjoint blocks
    add up to the sums over their union; the mean loss is :math:`L / S` and is formed
    once, on the driver.

    A dense host block is processed in slices of about ``slice_bytes`` of ``X``: each
    slice is read from memory once, for :math:`X_s W` and, still in cache, for
    :math:`X_s^\top G_s`.  Temporaries are of size ``rows * n_outputs``, never
    ``rows * n_features``.  Float32 blocks are computed in float32 and accumulated
    in float64.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd.losses import HalfSquaredError, LinearObjective
    >>> objective = LinearObjective(HalfSquaredError(), n_features=2)
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> y = np.array([1.0, 2.0])
    >>> loss_sum, grad_sum, weight_sum = objective.block_sums(np.zeros(3), X, y)
    >>> loss_sum, grad_sum, weight_sum
    (2.5, array([-1., -2., -3.]), 2.0)
    """

    loss: object
    n_features: int
    fit_intercept: bool = True
    slice_bytes: int | None = None
    kernel: str = "auto"
    offset: bool = False

    def __post_init__(self):
        n = self.n_features
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
            raise ParameterError(f"n_features must be an integer >= 0, got {n!r}")
        object.__setattr__(self, "n_features", int(n))
        object.__setattr__(self, "fit_intercept", bool(self.fit_intercept))
        object.__setattr__(self, "offset", bool(self.offset))
        size = self.slice_bytes
        if size is not None and (
            isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1
        ):
            raise ParameterError(
                f"slice_bytes must be a positive integer or None, got {size!r}"
            )
        if self.kernel not in ("auto", "array-api"):
            raise ParameterError(
                f"kernel must be 'auto' or 'array-api', got {self.kernel!r}"
            )
        if not callable(getattr(self.loss, "loss_gradient", None)):
            raise ParameterError(
                f"loss must be a pointwise loss with a loss_gradient method, "
                f"got {self.loss!r}"
            )

    @property
    def n_outputs(self):
        """Columns of the linear predictor."""
        return self.loss.n_outputs

    @property
    def n_params(self):
        """Length of the flat parameter vector."""
        return (self.n_features + self.fit_intercept) * self.n_outputs

    @property
    def n_columns(self):
        """Columns of the blocks of ``X`` (the features, then any offset columns)."""
        return self.n_features + (self.n_outputs if self.offset else 0)

    # -- layout -------------------------------------------------------------------

    def _matrix(self, params):
        """``params`` as the host float64 matrix ``(n_features + fit_intercept, k)``."""
        params = np.asarray(params, dtype=np.float64)
        if params.shape != (self.n_params,):
            raise InputError(
                f"params must have shape ({self.n_params},) for {self!r}, "
                f"got {params.shape}"
            )
        return params.reshape(self.n_features + self.fit_intercept, self.n_outputs)

    def unpack(self, params):
        """Split ``params`` into coefficients and intercept.

        Parameters
        ----------
        params : ndarray of shape (n_params,)

        Returns
        -------
        coef : ndarray of shape (n_features, n_outputs)
            A view of ``params``.
        intercept : ndarray of shape (n_outputs,)
            A view of ``params``, or zeros when ``fit_intercept`` is False.
        """
        matrix = self._matrix(params)
        coef = matrix[: self.n_features]
        if self.fit_intercept:
            return coef, matrix[self.n_features]
        return coef, np.zeros(self.n_outputs)

    def pack(self, coef, intercept=None):
        """Flat parameter vector from coefficients and intercept (inverse of unpack).

        Parameters
        ----------
        coef : array-like of shape (n_features, n_outputs) or (n_features,)
            The 1-D form is accepted when ``n_outputs == 1``.
        intercept : array-like of shape (n_outputs,), scalar or None
            Ignored when it is None; must be None or zeros when ``fit_intercept`` is
            False.

        Returns
        -------
        params : ndarray of shape (n_params,), float64
        """
        k = self.n_outputs
        coef = np.asarray(to_numpy(coef), dtype=np.float64)
        if coef.ndim == 1 and k == 1:
            coef = coef[:, None]
        if coef.shape != (self.n_features, k):
            raise InputError(
                f"coef must have shape ({self.n_features}, {k}), got {coef.shape}"
            )
        if intercept is None:
            intercept = np.zeros(k)
        intercept = np.broadcast_to(
            np.asarray(to_numpy(intercept), dtype=np.float64), (k,)
        )
        if not self.fit_intercept:
            if np.any(intercept != 0):
                raise InputError(
                    "intercept must be None or zero when fit_intercept=False, "
                    f"got {intercept}"
                )
            return coef.ravel().copy()
        return np.concatenate([coef.ravel(), intercept])

    # -- evaluation on a block ----------------------------------------------------

    def _check_block(self, X):
        if len(X.shape) != 2 or X.shape[1] != self.n_columns:
            what = f" ({self.n_features} features and {self.n_outputs} offset column(s))" if self.offset else ""
            raise InputError(
                f"X must have shape (n_samples, {self.n_columns}){what}, got {tuple(X.shape)}"
            )

    def features_of(self, X):
        """The feature columns of a host block (without the offset columns)."""
        return X[:, : self.n_features] if self.offset else X

    def place(self, params, X):
        """``params`` as the float64 parameter matrix on ``X``'s device (one transfer),
        to pass as ``placed=`` to every block of that device in one step."""
        return asarray_like(self._matrix(params), X)

    def _on_block(self, params, X, xp, placed=None):
        """Coefficients and intercept on ``X``'s device, in the compute dtype."""
        dtype = X.dtype if xp.isdtype(X.dtype, "real floating") else xp.float64
        if placed is None:
            placed = self.place(params, X)
        matrix = xp.astype(placed, dtype, copy=False)
        coef = matrix[: self.n_features, :]
        intercept = matrix[self.n_features, :] if self.fit_intercept else None
        if self.offset:  # the offset columns' coefficients: the identity, fixed
            k = self.n_outputs
            eye = xp.eye(k, dtype=dtype, device=array_api_compat.device(matrix))
            coef = xp.concat([coef, eye], axis=0)
        return coef, intercept, dtype

    @staticmethod
    def _as_dtype(X, dtype, xp):
        if X.dtype == dtype:
            return X
        return X.astype(dtype) if is_sparse(X) else xp.astype(X, dtype)

    def raw_prediction(self, params, X):
        """Linear predictor ``X @ coef + intercept`` (plus the offset columns).

        Parameters
        ----------
        params : ndarray of shape (n_params,)
            Host (NumPy) parameters.
        X : array of shape (n_samples, n_columns)
            Dense (any array-API namespace) or sparse CSR block.

        Returns
        -------
        raw : array of shape (n_samples, n_outputs)
            In ``X``'s namespace and on its device, in ``X``'s floating dtype.
        """
        self._check_block(X)
        xp = get_namespace(X)
        coef, intercept, dtype = self._on_block(params, X, xp)
        raw = self._as_dtype(X, dtype, xp) @ coef
        if intercept is not None:
            raw = raw + intercept
        return raw

    def _slice_rows(self, X, xp):
        """Rows per slice for ``X``."""
        n = X.shape[0]
        size = self.slice_bytes
        if size is None:
            if is_sparse(X) or array_api_compat.is_cupy_namespace(xp):
                return max(n, 1)
            size = SLICE_BYTES
        floating = xp.isdtype(X.dtype, "real floating")
        itemsize = xp.finfo(X.dtype).bits // 8 if floating else 8
        if is_sparse(X):
            # Bytes per row of CSR: a value and a column index per stored entry.
            nnz_per_row = max(X.nnz / max(n, 1), 1.0)
            row_bytes = nnz_per_row * (itemsize + X.indices.dtype.itemsize)
        else:
            row_bytes = max(self.n_columns, 1) * itemsize
        return max(_MIN_SLICE_ROWS, int(size // row_bytes))

    def block_sums(self, params, X, y, sample_weight=None, rows=None, placed=None):
        """Sums of the weighted loss, its gradient and the weights over one block.

        Parameters
        ----------
        params : ndarray of shape (n_params,)
            Host (NumPy) float64 parameters.
        X : array of shape (n_samples, n_columns)
            Dense block in any array-API namespace, or a SciPy / CuPy sparse matrix
            (CSR is fastest; other formats are converted).
        y : array of shape (n_samples,)
            Targets, in ``X``'s namespace (NumPy for a SciPy sparse ``X``).
        sample_weight : array of shape (n_samples,) or None, default=None
            Non-negative weights; None weighs every row 1.
        rows : ndarray of int or None, default=None
            Host indices of the rows to sum over (a mini-batch); None means all rows.
            The fused kernel reads them in place; other paths take ``X[rows]``.
        placed : array or None, default=None
            ``self.place(params, X)`` computed once for all the blocks of a device in
            this step (the engine does this per shard); None moves ``params`` here.

        Returns
        -------
        loss_sum : float
            :math:`\\sum_i s_i \\ell(y_i, R_i)`.
        grad_sum : ndarray of shape (n_params,), float64
            Gradient of ``loss_sum`` with respect to ``params``, on the host.
        weight_sum : float
            :math:`\\sum_i s_i` (the number of rows without weights).

        Raises
        ------
        InputError
            If the shapes of ``params``, ``X``, ``y`` or ``sample_weight`` disagree.
        """
        self._check_block(X)
        n = X.shape[0]
        y = self._check_vector("y", y, n)
        if sample_weight is not None:
            sample_weight = self._check_vector("sample_weight", sample_weight, n)
        if self.kernel == "auto" and _fused.supports(self.loss, X, y, sample_weight):
            sums = _fused.dense_block_sums(self, self._matrix(params), X, y, sample_weight, rows)
            if sums is not None:
                return sums
        if rows is not None:
            X, y = take_rows(X, rows), take_rows(y, rows)
            sample_weight = None if sample_weight is None else take_rows(sample_weight, rows)
            n = X.shape[0]
        if is_sparse(X) and X.format != "csr":
            X = X.tocsr()
        xp = get_namespace(X, y, sample_weight)
        coef, intercept, dtype = self._on_block(params, X, xp, placed)
        y = xp.astype(y, dtype, copy=False)
        if sample_weight is None:
            weight_sum = float(n)
        else:
            weight_sum = float(to_numpy(xp.sum(sample_weight, dtype=xp.float64)))
            sample_weight = xp.astype(sample_weight, dtype, copy=False)

        k = self.n_outputs
        device = array_api_compat.device(coef)
        grad_coef = xp.zeros((self.n_columns, k), dtype=xp.float64, device=device)
        grad_intercept = xp.zeros((k,), dtype=xp.float64, device=device)
        loss_sum = xp.zeros((), dtype=xp.float64, device=device)

        step = self._slice_rows(X, xp)
        for start in range(0, n, step):
            stop = min(start + step, n)
            X_s = self._as_dtype(X[start:stop, :], dtype, xp)
            raw = X_s @ coef
            if intercept is not None:
                raw = raw + intercept
            loss_i, grad_raw = self.loss.loss_gradient(y[start:stop], raw, xp)
            if sample_weight is not None:
                w = sample_weight[start:stop]
                loss_i = loss_i * w
                grad_raw = grad_raw * w[:, None]
            loss_sum += xp.sum(loss_i, dtype=xp.float64)
            grad_coef += xp.astype(X_s.T @ grad_raw, xp.float64, copy=False)
            if intercept is not None:
                grad_intercept += xp.sum(grad_raw, axis=0, dtype=xp.float64)

        grad = to_numpy(grad_coef)[: self.n_features]  # not the fixed offset coefficients
        if self.fit_intercept:
            grad = np.concatenate([grad, to_numpy(grad_intercept)[None, :]])
        return float(to_numpy(loss_sum)), grad.ravel(), weight_sum

    @staticmethod
    def _check_vector(name, v, n):
        shape = tuple(v.shape)
        if shape == (n, 1):
            v = v[:, 0]
        elif shape != (n,):
            raise InputError(f"{name} must have shape ({n},) to match X, got {shape}")
        return v


def objective_value_gradient(params, objective, penalty, X, y, sample_weight=None):
    r"""Smooth objective (mean loss plus L2 penalty) and its gradient on one array.

    For tests and small in-memory problems; the distributed engine adds
    :meth:`LinearObjective.block_sums` over blocks instead.

    Parameters
    ----------
    params : ndarray of shape (objective.n_params,)
    objective : LinearObjective
    penalty : Penalty or None
        None means no penalty.
    X : array of shape (n_samples, objective.n_features)
    y : array of shape (n_samples,)
    sample_weight : array of shape (n_samples,) or None, default=None

    Returns
    -------
    value : float
    grad : ndarray of shape (objective.n_params,)

    Raises
    ------
    InputError
        If the total sample weight is zero (no rows): the mean loss is undefined.

    Notes
    -----
    .. math:: f(\theta) = \frac{\sum_i s_i \ell(y_i, R_i)}{\sum_i s_i}
              + \frac{\alpha (1 - \rho)}{2} \lVert W \rVert_2^2 .

    The L1 part of the penalty is not included (it is not smooth); add
    ``penalty.l1_value(params, objective)`` for the full objective.
    """
    loss_sum, grad_sum, weight_sum = objective.block_sums(params, X, y, sample_weight)
    if not weight_sum > 0:
        raise InputError(
            f"the total sample weight is {weight_sum!r}: the mean loss needs at least "
            "one row with positive weight"
        )
    penalty = Penalty() if penalty is None else penalty
    pen_value, pen_grad = penalty.smooth_value_gradient(params, objective)
    return loss_sum / weight_sum + pen_value, grad_sum / weight_sum + pen_grad


def objective_hessian(params, objective, penalty, X, y, sample_weight=None):
    r"""Hessian of the smooth objective (mean loss plus L2 penalty) on one host array.

    For the single-output built-in losses with their canonical links (half squared
    error, binary logistic, half Poisson), where the loss's second derivative with
    respect to the linear predictor is :math:`h_i = 1`, :math:`p_i (1 - p_i)` or
    :math:`e^{r_i}`:

    .. math:: H = \frac{\tilde X^\top \operatorname{diag}(s_i h_i) \tilde X}{\sum_i s_i}
              + \alpha (1 - \rho) \operatorname{diag}(1, \dots, 1, 0),

    with :math:`\tilde X = [X, \mathbf 1]` when ``fit_intercept`` (the intercept is not
    penalised).  Used by the Newton solver on a row sample gathered to the driver.

    Parameters
    ----------
    params : ndarray of shape (objective.n_params,)
    objective : LinearObjective
    penalty : Penalty or None
    X : ndarray or SciPy sparse matrix of shape (n_samples, objective.n_features)
    y : ndarray of shape (n_samples,)
    sample_weight : ndarray of shape (n_samples,) or None

    Returns
    -------
    hessian : ndarray of shape (objective.n_params, objective.n_params)

    Raises
    ------
    ParameterError
        For a loss with more than one output (multinomial) or an unknown loss.
    """
    loss = objective.loss
    if not getattr(loss, "has_hessian", False) or loss.n_outputs != 1:
        raise ParameterError(
            f"the Newton solver supports the single-output losses (linear, binary "
            f"logistic, Poisson regression); got {type(loss).__name__}: use solver='lbfgs'"
        )
    y = np.asarray(y, dtype=np.float64)
    w = np.ones(X.shape[0]) if sample_weight is None else np.asarray(sample_weight, np.float64)
    raw = np.asarray(objective.raw_prediction(params, X), dtype=np.float64)
    h = np.asarray(loss.hessian_weight(y, raw, np), dtype=np.float64)
    H = weighted_gram(objective.features_of(X), w * h / w.sum(), objective.fit_intercept)
    n = objective.n_features
    penalty = Penalty() if penalty is None else penalty
    H[np.arange(n), np.arange(n)] += penalty.alpha * (1.0 - penalty.l1_ratio)
    return H
