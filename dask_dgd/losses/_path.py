r"""Regularization paths with cross-validation: every fold and every penalty in one pass.

A cross-validated path fits ``n_folds * n_alphas`` linear models on the same rows.  Here
they are *stacked*: the parameters are one matrix :math:`\Theta` of shape
``(n_features + fit_intercept, K)``, one column per (fold, alpha) pair, and each block of
rows evaluates all of them with one matrix-matrix product :math:`X \Theta`.  Which rows
a column trains on is a per-row mask computed where the block lives, from a seed and the
row's global position (:func:`fold_ids`): no copy of ``X`` and no fold array on the
driver.  Column :math:`k` (fold :math:`f_k`) trains on the rows *not* in fold
:math:`f_k`, with its own penalty; its held-out score is summed over the rows *in* fold
:math:`f_k` (:meth:`PathObjective.held_out_sums`).  A loss with ``m > 1`` outputs (the
multinomial) gives each column ``m`` parameter columns, side by side: :math:`\Theta`
is ``(n_features + fit_intercept, K * m)`` and the product is still one per block.

:class:`dask_dgd._engine.objective.PathTraining` is the engine's training objective of
the stacked problem: the sum over columns of each column's mean training loss
(:class:`PathObjective`) plus its elastic-net penalty (:class:`PathPenalty`, with the
multinomial's re-centring step).  The problems are separable, so the gradient of the
sum with respect to a column is that column's own gradient, and any solver of the
engine minimises every column at once.
"""

import numbers
from dataclasses import dataclass
from functools import cached_property

import array_api_compat
import numpy as np

from .._backend import asarray_like, get_namespace, is_sparse, to_numpy
from .._random import mix64
from ..exceptions import InputError, ParameterError
from ._gram import weighted_gram
from ._linear import SLICE_BYTES
from ._penalty import shifted_to_penalty_minimum

__all__ = ["PathObjective", "PathPenalty", "fold_ids"]


def fold_ids(start, n_rows, n_folds, seed=0):
    """Cross-validation fold of the rows ``start .. start + n_rows - 1`` of the data.

    The rows are cut into windows of ``n_folds`` consecutive rows; within each window the
    folds ``0 .. n_folds - 1`` are dealt in an order drawn from a hash of the seed and the
    row number.  A fold's size is thus within one row of ``n_rows / n_folds`` (exactly
    balanced, as scikit-learn's ``KFold``), and a row's fold depends only on its global
    position and the seed: not on the chunking, nor on which worker holds it.

    Parameters
    ----------
    start : int
        Global index of the first row (the block's offset in the data).
    n_rows : int
        Rows of the block.
    n_folds : int
        Number of folds, at least 2.
    seed : int, default=0
        Non-negative seed.

    Returns
    -------
    folds : ndarray of shape (n_rows,), int64
        Values in ``0 .. n_folds - 1``.

    Examples
    --------
    >>> import numpy as np
    >>> from dask_dgd.losses._path import fold_ids
    >>> whole = fold_ids(0, 10, 3, seed=1)
    >>> np.array_equal(whole, np.concatenate([fold_ids(0, 4, 3, 1), fold_ids(4, 6, 3, 1)]))
    True
    >>> np.bincount(whole).tolist()
    [4, 3, 3]
    """
    start, n_rows, k = int(start), int(n_rows), int(n_folds)
    if n_rows == 0:
        return np.zeros(0, dtype=np.int64)
    first = start - start % k
    stop = -(-(start + n_rows) // k) * k
    rows = np.arange(first, stop, dtype=np.uint64)
    h = mix64(rows ^ mix64(np.array([int(seed)], dtype=np.uint64)))
    order = np.argsort(h.reshape(-1, k), axis=1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(k)[None, :], axis=1)
    return ranks.ravel()[start - first: start - first + n_rows].astype(np.int64)


def _take_rows(X, rows, like, xp):
    """``(rows as an index array where ``like`` lives, those rows of X)`` (CSR or dense)."""
    take = asarray_like(rows, like)
    return take, (X[rows] if is_sparse(X) else xp.take(X, take, axis=0))


@dataclass(frozen=True)
class PathObjective:
    r"""Stacked losses of ``K`` linear models, one per (fold, penalty) column.

    Parameters
    ----------
    loss : pointwise loss
        A loss of :mod:`dask_dgd.losses` with ``n_outputs = m``: its ``loss_gradient``
        is evaluated on all columns at once, each column's ``m`` outputs as one row.
    n_features : int
    column_folds : tuple of int
        The fold of each column (length ``K``); column ``k`` trains on the rows whose
        fold is not ``column_folds[k]``.
    n_folds : int
    block_starts : tuple of int
        Global index of the first row of each block, by block index.
    seed : int, default=0
        Seed of :func:`fold_ids`.
    fit_intercept : bool, default=True
    offset : bool, default=False
        The blocks carry one more, last column: a known term added to every column's
        raw prediction (``R = X W + 1 b^T + o 1^T``), as the estimators' ``offset``
        (single-output losses only).

    Notes
    -----
    With :math:`\Theta = [W; b^\top]`, per-row folds :math:`\phi_i` and masks
    :math:`m_{ik} = [\phi_i \ne f_k]`, a block returns

    .. math:: L_k = \sum_i m_{ik} s_i \ell(y_i, R_{ik}), \qquad
              \nabla_{\Theta} = [X, \mathbf 1]^\top G, \qquad
              S_f = \sum_{i: \phi_i = f} s_i,

    with :math:`R = X W + \mathbf 1 b^\top` and
    :math:`G_{ik} = m_{ik} s_i \partial_r \ell(y_i, R_{ik})`.  Column :math:`k`'s mean
    training loss is :math:`L_k / (\sum_f S_f - S_{f_k})`.  With ``m`` outputs,
    :math:`R_{ik}` and :math:`G_{ik}` are the ``m`` entries ``k m .. k m + m - 1`` of
    row :math:`i`.
    """

    loss: object
    n_features: int
    column_folds: tuple
    n_folds: int
    block_starts: tuple
    seed: int = 0
    fit_intercept: bool = True
    offset: bool = False

    def __post_init__(self):
        m = getattr(self.loss, "n_outputs", None)
        if isinstance(m, bool) or not isinstance(m, numbers.Integral) or m < 1 \
                or not callable(getattr(self.loss, "loss_gradient", None)):
            raise ParameterError(
                f"a cross-validated path needs a loss of dask_dgd.losses (loss_gradient and n_outputs >= 1); "
                f"got {self.loss!r}"
            )
        k = self.n_folds
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 2:
            raise ParameterError(f"n_folds must be an integer >= 2, got {k!r}")
        folds = tuple(int(f) for f in self.column_folds)
        if not folds or min(folds) < 0 or max(folds) >= k:
            raise ParameterError(f"column_folds must be folds in 0 .. {k - 1}, got {self.column_folds!r}")
        object.__setattr__(self, "column_folds", folds)
        object.__setattr__(self, "block_starts", tuple(int(s) for s in self.block_starts))
        if self.offset and m != 1:
            raise ParameterError(f"an offset needs a single-output loss; {type(self.loss).__name__} has {m} outputs")

    @property
    def n_columns(self):
        """Number of stacked models ``K``."""
        return len(self.column_folds)

    @property
    def n_outputs(self):
        """Outputs ``m`` of the loss: parameter columns per stacked model."""
        return int(self.loss.n_outputs)

    @property
    def n_params(self):
        """Length of the flat parameter vector, ``(n_features + fit_intercept) * K * m``."""
        return (self.n_features + self.fit_intercept) * self.n_columns * self.n_outputs

    @property
    def _column_shape(self):
        """Shape of one parameter row per model: ``(K,)``, or ``(K, m)`` with outputs."""
        return (self.n_columns,) if self.n_outputs == 1 else (self.n_columns, self.n_outputs)

    def matrix(self, params):
        """``params`` as the float64 matrix ``(n_features + fit_intercept, K * m)``."""
        params = np.asarray(params, dtype=np.float64)
        if params.shape != (self.n_params,):
            raise InputError(f"params must have shape ({self.n_params},), got {params.shape}")
        return params.reshape(self.n_features + self.fit_intercept, self.n_columns * self.n_outputs)

    def unpack(self, params):
        """``(coef, intercept)`` of shapes ``(n_features, K)`` and ``(K,)`` (zeros without
        an intercept); ``(n_features, K, m)`` and ``(K, m)`` for a loss with ``m > 1``
        outputs."""
        matrix = self.matrix(params)
        icpt = matrix[self.n_features] if self.fit_intercept else np.zeros(matrix.shape[1])
        return matrix[: self.n_features].reshape((self.n_features,) + self._column_shape), \
            icpt.reshape(self._column_shape)

    def pack(self, coef, intercept=None):
        """Flat parameters from ``coef`` and ``intercept`` shaped as :meth:`unpack`'s
        (the intercept broadcasts: a scalar, or one row of ``m`` for every model)."""
        width = self.n_columns * self.n_outputs
        coef = np.asarray(coef, dtype=np.float64).reshape(self.n_features, width)
        if not self.fit_intercept:
            return coef.ravel().copy()
        icpt = np.zeros(width) if intercept is None else intercept
        icpt = np.broadcast_to(np.asarray(icpt, np.float64), self._column_shape).reshape(1, width)
        return np.concatenate([coef, icpt]).ravel()

    @property
    def held_out_keys(self):
        """The names of :meth:`held_out_sums`' sums, in a fixed order."""
        if self.n_outputs > 1:
            return ("weight", "loss", "correct", "deviance")
        return ("weight", "loss", "squared_error", "correct", "wy", "wyy", "deviance")

    def folds_of(self, index, n_rows):
        """Folds of the rows of block ``index``."""
        return fold_ids(self.block_starts[index], n_rows, self.n_folds, self.seed)

    # -- evaluation on a block ----------------------------------------------------

    def features_and_offset(self, X):
        """A block's feature columns and its offset column (None without offset)."""
        d = self.n_features
        if not self.offset:
            return X, None
        if is_sparse(X):
            X = X.tocsr()
            o = X[:, d].toarray().reshape(-1)
            return X[:, :d].tocsr(), o
        return X[:, :d], X[:, d]

    def _prepare(self, params, X, y, sample_weight, index):
        width = self.n_features + self.offset
        if len(X.shape) != 2 or X.shape[1] != width:
            raise InputError(f"X must have shape (n_samples, {width}), got {tuple(X.shape)}")
        n = X.shape[0]
        if is_sparse(X) and X.format != "csr":
            X = X.tocsr()
        xp = get_namespace(X, y, sample_weight)
        dtype = X.dtype if xp.isdtype(X.dtype, "real floating") else xp.float64
        if X.dtype != dtype:
            X = X.astype(dtype) if is_sparse(X) else xp.astype(X, dtype)
        X, o = self.features_and_offset(X)
        o = None if o is None else xp.astype(o, dtype)
        matrix = xp.astype(asarray_like(self.matrix(params), X), dtype, copy=False)
        y = xp.reshape(xp.astype(y, dtype, copy=False), (n,))
        if sample_weight is None:
            w = xp.ones((n,), dtype=dtype, device=array_api_compat.device(matrix))
        else:
            w = xp.reshape(xp.astype(sample_weight, dtype, copy=False), (n,))
        folds = self.folds_of(index, n)
        return X, y, w, folds, matrix, xp, dtype, o

    def _slices(self, X):
        n = X.shape[0]
        if is_sparse(X):
            return max(n, 1)
        return max(256, SLICE_BYTES // (8 * max(self.n_features, self.n_columns * self.n_outputs, 1)))

    def _raw(self, X_s, matrix, o_s=None):
        raw = X_s @ matrix[: self.n_features, :]
        if self.fit_intercept:
            raw = raw + matrix[self.n_features, :]
        if o_s is not None:  # the offset of these rows, added to every column
            raw = raw + o_s[:, None]
        return raw

    def _pointwise(self, y_s, raw, xp, K=None):
        """The loss ``(n, K)`` and its gradient ``(n, K * m)`` on every column (or on the
        ``K`` evaluated ones)."""
        n, K, m = raw.shape[0], self.n_columns if K is None else K, self.n_outputs
        y_flat = xp.reshape(xp.broadcast_to(y_s[:, None], (n, K)), (n * K,))
        loss, grad = self.loss.loss_gradient(y_flat, xp.reshape(raw, (n * K, m)), xp)
        return xp.reshape(loss, (n, K)), xp.reshape(grad, (n, K * m))

    def _per_output(self, mask, xp):
        """A ``(n, K)`` array repeated over each column's ``m`` outputs: ``(n, K * m)``."""
        n, K, m = mask.shape[0], mask.shape[1], self.n_outputs
        return mask if m == 1 else xp.reshape(xp.broadcast_to(mask[:, :, None], (n, K, m)), (n, K * m))

    def block_sums(self, params, X, y, sample_weight=None, index=0, columns=None, grams=False):
        """Training sums of every column over one block.

        Parameters
        ----------
        params : ndarray of shape (n_params,)
        X : array of shape (n_samples, n_features)
            Dense (any array-API namespace) or sparse.
        y : array of shape (n_samples,)
        sample_weight : array of shape (n_samples,) or None
        index : int
            The block's index (its rows' folds follow from ``block_starts[index]``).
        columns : sequence of int or None, default=None
            Evaluate only these columns (the others' loss and gradient are zero): the
            columns of the penalties a path solver is working on.  None: all.
        grams : bool, default=False
            Also return the Hessian sums of each fold's rows (single-output losses with
            a ``hessian_weight``, or the multinomial's ``hessian_blocks``; see Returns).

        Returns
        -------
        column_loss : ndarray of shape (K,)
            :math:`L_k`.
        grad : ndarray of shape (n_params,)
            Gradient of :math:`\\sum_k L_k`.
        fold_weight : ndarray of shape (n_folds,)
            :math:`S_f`.
        fold_grams : ndarray of shape (n_folds, p, p), only with ``grams``
            :math:`G_g = \\tilde X_g^\\top \\operatorname{diag}(s_i \\bar h_i) \\tilde X_g`
            over the rows of fold :math:`g` (``p = n_features + fit_intercept``), where
            :math:`\\bar h_i` is the mean of the loss's second derivative
            :math:`h(y_i, R_{ik})` over the evaluated columns that train on row
            :math:`i`.  Column :math:`k`'s loss Hessian is approximately
            :math:`\\sum_{g \\ne f_k} G_g`: exact where those columns agree on the row's
            curvature (the models of one penalty on different folds, fitted on mostly
            the same rows, nearly do), and one Gram matrix's work for all folds.
            A loss with ``m > 1`` outputs (``hessian_blocks``, the softmax's
            :math:`\\operatorname{diag}(p) - p p^\top`) gives shape
            ``(n_folds, p m, p m)`` in one model's parameter layout (feature ``j``'s
            output ``a`` at ``j m + a``), the row's ``(m, m)`` curvature averaged as
            :math:`\bar h_i`: one weighted Gram matrix per pair of outputs.
        """
        X, y, w, folds, matrix, xp, dtype, o = self._prepare(params, X, y, sample_weight, index)
        n, K, d, m = X.shape[0], self.n_columns, self.n_features, self.n_outputs
        cols = np.arange(K) if columns is None else np.asarray(columns, dtype=np.int64).reshape(-1)
        if grams and m != 1 and not hasattr(self.loss, "hessian_blocks"):
            raise ParameterError(f"the Hessian sums of a path need a single-output loss or a multinomial; "
                                 f"{type(self.loss).__name__} has {m} outputs")
        width = self._param_columns(cols)  # the evaluated parameter columns
        sub = matrix if columns is None else xp.take(matrix, asarray_like(width, matrix), axis=1)
        ka = len(cols)
        # train[i, k] = s_i [fold_i != f_k]: one gather from a (n_folds, K) table per slice
        col_folds = np.asarray(self.column_folds)[cols]
        table = asarray_like(np.arange(self.n_folds)[:, None] != col_folds[None, :], matrix)
        table = xp.astype(table, dtype)
        folds_dev = asarray_like(folds, matrix)
        device = array_api_compat.device(matrix)
        loss_cols = xp.zeros((ka,), dtype=xp.float64, device=device)
        grad_coef = xp.zeros((d, ka * m), dtype=xp.float64, device=device)
        grad_icpt = xp.zeros((ka * m,), dtype=xp.float64, device=device)
        curvature = [] if grams else None
        step = self._slices(X)
        for start in range(0, n, step):
            stop = min(start + step, n)
            X_s = X[start:stop, :]
            raw = self._raw(X_s, sub, None if o is None else o[start:stop])
            loss, grad = self._pointwise(y[start:stop], raw, xp, ka)
            mask = xp.take(table, folds_dev[start:stop], axis=0)
            train = mask * w[start:stop, None]
            loss_cols += xp.sum(loss * train, axis=0, dtype=xp.float64)
            grad = grad * self._per_output(train, xp)
            grad_coef += xp.astype(X_s.T @ grad, xp.float64, copy=False)
            grad_icpt += xp.sum(grad, axis=0, dtype=xp.float64)
            if grams:
                weight = w[start:stop] if m == 1 else w[start:stop, None, None]
                curvature.append(self._mean_curvature(y[start:stop], raw, mask, xp) * weight)
        out_loss = np.zeros(K)
        out_loss[cols] = np.asarray(to_numpy(loss_cols), dtype=np.float64)
        out_grad = np.zeros((d + self.fit_intercept, K * m))
        out_grad[:d, width] = to_numpy(grad_coef)
        if self.fit_intercept:
            out_grad[d, width] = to_numpy(grad_icpt)
        w_host = np.asarray(to_numpy(w), dtype=np.float64)
        fold_weight = np.bincount(folds, weights=w_host, minlength=self.n_folds)
        if not grams:
            return out_loss, out_grad.ravel(), fold_weight
        a = xp.concat(curvature) if curvature else xp.zeros((0,) + (m, m) * (m > 1), dtype=dtype, device=device)
        p = d + self.fit_intercept
        fold_grams = np.zeros((self.n_folds, p, m, p, m))
        for g in range(self.n_folds):
            rows = np.flatnonzero(folds == g)
            if len(rows):
                take, X_g = _take_rows(X, rows, matrix, xp)
                a_g = xp.take(a, take, axis=0)
                if m == 1:
                    fold_grams[g, :, 0, :, 0] = weighted_gram(X_g, a_g, self.fit_intercept)
                    continue
                for r in range(m):  # one Gram matrix per pair of outputs (the blocks are symmetric)
                    for c in range(r, m):
                        G = weighted_gram(X_g, a_g[:, r, c], self.fit_intercept)
                        fold_grams[g, :, r, :, c] = G
                        fold_grams[g, :, c, :, r] = G.T
        return out_loss, out_grad.ravel(), fold_weight, fold_grams.reshape(self.n_folds, p * m, p * m)

    def _param_columns(self, cols):
        """The parameter columns of models ``cols`` (each model's ``m`` outputs in turn)."""
        m = self.n_outputs
        return (np.asarray(cols)[:, None] * m + np.arange(m)[None, :]).ravel()

    def _mean_curvature(self, y_s, raw, mask, xp):
        """:math:`\\bar h_i`: the loss's second derivative of each row, averaged over the
        evaluated columns that train on it (``mask``); 0 for a row none trains on.  With
        ``m > 1`` outputs, the ``(m, m)`` Hessian blocks of each row, averaged alike."""
        m = self.n_outputs
        if m > 1:
            n, ka = raw.shape[0], raw.shape[1] // m
            y_flat = xp.reshape(xp.broadcast_to(y_s[:, None], (n, ka)), (n * ka,))
            blocks = xp.reshape(self.loss.hessian_blocks(y_flat, xp.reshape(raw, (n * ka, m)), xp), (n, ka, m, m))
            count = xp.sum(mask, axis=1)
            return xp.sum(blocks * mask[:, :, None, None], axis=1) / xp.where(count > 0, count, 1.0)[:, None, None]
        n, ka = raw.shape[0], raw.shape[1]
        y_flat = xp.reshape(xp.broadcast_to(y_s[:, None], (n, ka)), (n * ka,))
        h = xp.reshape(self.loss.hessian_weight(y_flat, xp.reshape(raw, (n * ka, 1)), xp), (n, ka))
        count = xp.sum(mask, axis=1)
        return xp.sum(h * mask, axis=1) / xp.where(count > 0, count, 1.0)

    def held_out_sums(self, params, X, y, sample_weight=None, index=0):
        """Sums over the held-out rows of each column (the rows of its fold).

        Returns
        -------
        sums : dict of ndarray of shape (K,)
            ``"weight"`` :math:`\\sum s_i`, ``"loss"`` :math:`\\sum s_i \\ell`,
            ``"squared_error"`` :math:`\\sum s_i (y_i - \\mu_i)^2`, ``"correct"``
            (binary labels 0/1: rows whose sign of the raw prediction is right),
            ``"wy"`` and ``"wyy"`` (:math:`\\sum s_i y_i`, :math:`\\sum s_i y_i^2`),
            and ``"deviance"`` (:math:`\\sum s_i d(y_i, \\mu_i)`, the unit deviance of
            the squared error, Poisson or binomial loss), where :math:`\\mu` is the
            loss's ``inverse_link`` of the raw prediction.  A loss with ``m > 1``
            outputs (class indices as targets) gives ``"weight"``, ``"loss"``,
            ``"correct"`` (rows whose largest output is their class) and
            ``"deviance"``.
        """
        X, y, w, folds, matrix, xp, dtype, o = self._prepare(params, X, y, sample_weight, index)
        K = self.n_columns
        keys = self.held_out_keys
        out = {key: np.zeros(K) for key in keys}
        col_folds = np.asarray(self.column_folds)
        for g in range(self.n_folds):  # a row is held out by its fold's columns only
            rows, cols = np.flatnonzero(folds == g), np.flatnonzero(col_folds == g)
            if not len(rows) or not len(cols):
                continue
            take, X_g = _take_rows(X, rows, matrix, xp)
            width = asarray_like(self._param_columns(cols), matrix)
            sums = self._held_out_columns(X_g, xp.take(y, take, axis=0), xp.take(w, take, axis=0),
                                          xp.take(matrix, width, axis=1),
                                          None if o is None else xp.take(o, take, axis=0), xp)
            for key in keys:
                out[key][cols] += sums[key]
        return out

    def _held_out_columns(self, X, y, w, matrix, o, xp):
        """:meth:`held_out_sums` of rows that every column of ``matrix`` holds out."""
        n, K, m = X.shape[0], matrix.shape[1] // self.n_outputs, self.n_outputs
        keys = self.held_out_keys
        out = {key: np.zeros(K) for key in keys}
        step = self._slices(X)
        for start in range(0, n, step):
            stop = min(start + step, n)
            raw = self._raw(X[start:stop, :], matrix, None if o is None else o[start:stop])
            y_s = y[start:stop]
            loss, _ = self._pointwise(y_s, raw, xp, K)
            held = xp.broadcast_to(w[start:stop, None], loss.shape)
            if m > 1:
                best = xp.argmax(xp.reshape(raw, (stop - start, K, m)), axis=2)
                parts = {
                    "weight": held, "loss": loss * held,
                    "correct": xp.astype(xp.astype(best, loss.dtype) == y_s[:, None], loss.dtype) * held,
                    "deviance": self._deviance(y_s[:, None], None, loss, xp) * held,
                }
            else:
                mu = xp.reshape(self.loss.inverse_link(xp.reshape(raw, (raw.shape[0] * K, 1)), xp), raw.shape)
                yy = y_s[:, None]
                parts = {
                    "weight": held, "loss": loss * held, "squared_error": (yy - mu) ** 2 * held,
                    "correct": xp.astype((raw > 0) == (yy > 0.5), loss.dtype) * held,
                    "wy": yy * held, "wyy": yy * yy * held, "deviance": self._deviance(yy, mu, loss, xp) * held,
                }
            for key in keys:
                out[key] += np.asarray(to_numpy(xp.sum(parts[key], axis=0, dtype=xp.float64)))
        return out

    def _deviance(self, y, mu, loss, xp):
        """Unit deviance per row and column (twice the loss minus its value at ``mu = y``)."""
        unit_deviance = getattr(self.loss, "unit_deviance", None)
        if callable(unit_deviance):  # a loss that knows its deviance says so
            return unit_deviance(y, mu, xp)
        name = type(self.loss).__name__
        if name == "HalfSquaredError":
            return 2.0 * loss
        if name == "HalfPoisson":  # 2 (y log(y / mu) - y + mu), with 0 log 0 = 0
            ylogy = xp.where(y > 0, y * xp.log(xp.where(y > 0, y, 1.0)), 0.0)
            return 2.0 * (loss + ylogy - y)
        if name in ("BinaryLogistic", "MultinomialLogistic"):  # one-hot y: the saturated loss is 0
            return 2.0 * loss
        return xp.full(loss.shape, xp.nan, dtype=loss.dtype)


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
        l1 = np.asarray(self.l1)[None, :, None]
        l2 = np.asarray(self.l2)[None, :, None]
        return shifted_to_penalty_minimum(coef.reshape(-1, K, m), l1, l2).reshape(coef.shape)
