r"""What a block adds to a Newton step in scaled coordinates: the weighted Gram matrix
of its centred and scaled columns, or the R factor of its weighted working design.

Both describe the quadratic model of Newton's method in the coordinates of
:mod:`..scaling`, computed where the block lives from its own columns centred and
scaled (:func:`block_scaled_gram`, :func:`block_r_factor`), so that columns far from
zero beside their spread lose no digits to the centring.  The Gram matrix is the
Hessian, summed like the gradient, and cheap (one BLAS product); the R factors are
for designs too ill-conditioned for it.

A Newton step of a single-output linear model minimises the quadratic model

.. math:: \frac{1}{2W} \sum_i s_i h_i (\tilde x_i^\top d - u_i)^2
          + \frac{1}{2} \lVert \Lambda^{1/2} (x + d) \rVert^2,
          \qquad u_i = -\ell'_i / h_i,

(``s`` the sample weights, ``W`` their sum, ``h`` the curvature of the loss per row,
:math:`\Lambda` the L2 penalty's diagonal, :math:`\tilde x_i` the row's centred and
scaled columns and a one for the intercept).  Forming the Hessian
:math:`\sum s h \tilde x \tilde x^\top` squares the design's condition number: columns
whose standardised condition is 1e8 give a Hessian the float64 rounding cannot
resolve, and the solver stops where the gradient is small but the objective is not
at its optimum.  So, as R's ``glm`` and statsmodels do, the step is solved from a QR
factorisation of the weighted design: each block computes the R factor of
:math:`[\sqrt{s h}\, \tilde X \mid \sqrt{s h}\, u]` (slices of rows at a time), and
the factors are merged up the fixed block tree by stacking two and factorising again
(TSQR, Demmel et al. 2012): :class:`RFactor` adds that way, so it travels in a
partial's ``extras`` like any sum, in a fixed order (the same bits on any placement).
On the driver the small problem :math:`\min \lVert R d - c \rVert^2 / W + \lVert
\Lambda^{1/2}(x + d) \rVert^2` is solved by an SVD-based least-squares solve
(:class:`LeastSquaresModel`), whose error grows with the design's condition, not its
square, and which takes the minimum-norm step for exactly collinear columns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._backend import get_namespace, is_sparse, to_numpy
from ...losses._gram import GRAM_SLICE_BYTES

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from ...losses import LinearObjective
    from ..data.blocks import Block, Shard
    from ..protocols import ColumnScales
    from ..runtime.group_steps import BlockSums

__all__ = ["LeastSquaresModel", "RFactor", "block_r_factor", "block_scaled_gram", "curvature", "pinned_hessian",
           "shift_directions", "softmax_shifts", "with_block_extra"]


def with_block_extra(sums: dict[int, BlockSums], shard: Shard, key: str,
                     compute: Callable[[Block], Any]) -> dict[int, BlockSums]:
    """The blocks' sums (``{block: BlockSums}`` of ``shard``) with ``compute(block)``
    added to each one's ``extras`` under ``key`` (a failure names the block)."""
    from ..data.blocks import _block_error
    from ..runtime.group_steps import BlockSums

    out = {}
    for b in shard.blocks:
        s = sums[b.index]
        try:
            with np.errstate(all="ignore"):
                extra = compute(b)
        except Exception as err:
            raise _block_error(err, b) from err
        out[b.index] = BlockSums(s.loss, s.grad, s.weight, {**s.extras, key: extra})
    return out


def _r_of(A: np.ndarray) -> np.ndarray:
    """The R factor of ``A`` (host float64), square or with fewer rows."""
    return np.linalg.qr(A, mode="r")  # type: ignore[return-value]


def shift_directions(objective: LinearObjective, penalised: np.ndarray) -> np.ndarray:
    r"""Orthonormal columns spanning the directions along which the objective does not
    change: for a softmax model, adding one constant to the ``n_outputs`` parameters of
    a row (a feature's, or the intercept's) that no penalty sees (``penalised``: a mask
    of the parameters); none for other losses.

    The softmax's Hessian is singular along them.  A Newton step must not move there:
    the rounding errors of the least-squares solve (of order ``eps`` times the largest
    singular value, above the cut of a rank-revealing solve) would otherwise give steps
    of any size along them, and an unpenalised multinomial fit drifts to coefficients
    of 1e11 whose differences between classes are right and whose values are not.
    Any row-wise map applied alike to every output (the scaling's centring and scales)
    keeps them of this form, so they are the same in scaled coordinates.

    Returns
    -------
    ndarray of shape (objective.n_params, r)
    """
    from ...losses import MultinomialLogistic

    if not isinstance(objective.loss, MultinomialLogistic):
        return np.zeros((objective.n_params, 0))
    return softmax_shifts(objective.n_outputs, penalised)


def softmax_shifts(n_outputs: int, penalised: np.ndarray) -> np.ndarray:
    """:func:`shift_directions` of a softmax model with ``n_outputs`` classes whose
    parameters (``penalised``: their mask, in the layout of
    :class:`~dask_dgd.losses.LinearObjective`) are those of one model."""
    k, p = n_outputs, np.asarray(penalised).size
    free = np.flatnonzero(~np.asarray(penalised, dtype=bool).reshape(-1, k).any(axis=1))
    N = np.zeros((p, free.size))
    for col, row in enumerate(free):
        N[row * k:(row + 1) * k, col] = 1.0 / np.sqrt(k)
    return N


def pinned_hessian(H: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """The Hessian matrix ``H`` made definite along ``directions`` (orthonormal columns
    of :func:`shift_directions`) with the curvature of its largest diagonal entry: a
    Newton step then keeps the parameters' part along them where it is."""
    if not directions.size:
        return H
    top = float(np.max(np.diag(H), initial=0.0))
    return H + (top if top > 0 else 1.0) * (directions @ directions.T)


@dataclass(frozen=True, eq=False)
class RFactor:
    """An upper-triangular factor ``R`` with ``R^T R = A^T A`` of the rows behind it;
    two add by factorising their stacked factors."""

    R: np.ndarray

    def __add__(self, other: RFactor) -> RFactor:
        return RFactor(_r_of(np.vstack([self.R, other.R])))

    @property
    def nbytes(self) -> int:
        return int(self.R.nbytes)


def curvature(loss: Any, y: Any, raw: Any, xp: Any) -> Any:
    """Per-row curvature ``h`` of a single-output loss: the observed second derivative
    (``local_curvature``) where it is not negative, the Fisher weight
    (``hessian_weight``) where it is: Newton's steps (quadratic convergence) wherever
    they are defined, Fisher scoring on the other rows."""
    h = xp.reshape(loss.hessian_weight(y, raw, xp), (-1,))
    observed = getattr(loss, "local_curvature", None)
    if observed is not None:
        h_obs = xp.reshape(observed(y, raw, xp), (-1,))
        h = xp.where(h_obs >= 0, h_obs, h)
    return h


def _curvature_weights(objective: LinearObjective, params: np.ndarray, X: Any, y: Any,
                       sample_weight: Any) -> np.ndarray:
    """The weighted curvature ``s h`` of each row of a block on the host (zero where it
    is not positive): :func:`_working`'s ``a`` without the loss's gradient and the
    working response, which the Hessian's sums do not use."""
    xp = get_namespace(X, y, sample_weight)
    raw = objective.raw_prediction(params, X)
    h = curvature(objective.loss, xp.astype(y, raw.dtype, copy=False), raw, xp)
    a = h if sample_weight is None else h * xp.reshape(xp.astype(sample_weight, h.dtype, copy=False), (-1,))
    a = xp.where(a > 0, a, xp.zeros_like(a))
    return np.asarray(to_numpy(a), dtype=np.float64)


def _working(objective: LinearObjective, params: np.ndarray, X: Any, y: Any,
             sample_weight: Any) -> Iterator[np.ndarray]:
    """``(a, u)`` of a block on the host: the weighted curvature ``s h`` of each row
    (zero where it is not positive) and the working response ``-l' / h``."""
    xp = get_namespace(X, y, sample_weight)
    raw = objective.raw_prediction(params, X)
    loss = objective.loss
    y = xp.astype(y, raw.dtype, copy=False)
    _, d_raw = loss.loss_gradient(y, raw, xp)  # type: ignore[attr-defined]
    h = curvature(loss, y, raw, xp)
    d_raw = xp.reshape(d_raw, (-1,))
    a = h if sample_weight is None else h * xp.reshape(xp.astype(sample_weight, h.dtype, copy=False), (-1,))
    positive = a > 0
    a = xp.where(positive, a, xp.zeros_like(a))
    u = xp.where(positive, -d_raw / xp.where(positive, h, xp.ones_like(h)), xp.zeros_like(h))
    return (np.asarray(to_numpy(v), dtype=np.float64) for v in (a, u))


def _scaled_slices(objective: LinearObjective, X: Any, scaling: ColumnScales, extra: int, scale: bool = True,
                   rows_factor: int = 1) -> Iterator[tuple[int, int, np.ndarray]]:
    """The block's feature columns centred and scaled, ``[(X_s - mean) / scale, 1]``
    (the ones when the model has an intercept; only centred unless ``scale``), slice by
    slice of rows, each with ``extra`` columns left for the caller: ``(start, stop, A)``;
    ``rows_factor``: fewer rows a slice, for a caller that expands each row."""
    F = objective.features_of(X) if hasattr(objective, "features_of") else X
    n, d = F.shape
    q = d + objective.fit_intercept
    rows = max(256, GRAM_SLICE_BYTES // (8 * (q + extra) * rows_factor))
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        Fs = F[start:stop, :]  # the array API wants every axis indexed
        Fs = Fs.toarray() if is_sparse(Fs) else Fs
        Fs = np.asarray(Fs if isinstance(Fs, np.ndarray) else to_numpy(Fs), dtype=np.float64)
        A = np.empty((stop - start, q + extra))
        np.subtract(Fs, scaling.mean, out=A[:, :d])
        if scale:
            A[:, :d] /= scaling.scale
        if objective.fit_intercept:
            A[:, d] = 1.0
        yield start, stop, A


#: Most bytes of centred columns :func:`block_scaled_gram` keeps in a group's memory
#: between passes, all its blocks together (twice a block of 50,000 x 20 float64):
#: blocks past it are centred slice by slice on every pass, as memory is worth more
#: there than the copy.
CENTRED_CACHE_BYTES = 16 * 2**20


def _centred_slices(objective: LinearObjective, X: Any, scaling: ColumnScales, memory: dict | None,
                    key: Any) -> Iterator[tuple[int, int, np.ndarray]]:
    """:func:`_scaled_slices` of ``X`` with ``scale=False`` (the columns centred, a one
    for the intercept), as views of the block's centred columns kept in ``memory``
    under ``key`` with the centre they were made with: a Newton fit's passes centre a
    block once, not once per pass.  The same numbers either way (``x - mean``);
    without ``memory``, for a block not a NumPy array, or once the group's kept blocks
    would pass :data:`CENTRED_CACHE_BYTES`, the slices are made afresh."""
    if memory is None or not isinstance(X, np.ndarray):
        yield from _scaled_slices(objective, X, scaling, 0, scale=False)
        return
    q = objective.n_features + objective.fit_intercept
    kept = memory.get(key)
    # the block itself is held, so its identity cannot pass to another array
    if kept is None or kept[0] is not X or not np.array_equal(kept[1], scaling.mean) or kept[3] != q:
        size = X.shape[0] * q * 8
        held = memory.get(_CENTRED_HELD, 0) - (kept[4] if kept is not None else 0)
        if held + size > CENTRED_CACHE_BYTES:
            if kept is not None:  # (stale: dropped)
                del memory[key]
                memory[_CENTRED_HELD] = held
            yield from _scaled_slices(objective, X, scaling, 0, scale=False)
            return
        parts = list(_scaled_slices(objective, X, scaling, 0, scale=False))
        kept = memory[key] = (X, np.array(scaling.mean, copy=True), parts, q, size)
        memory[_CENTRED_HELD] = held + size
    yield from kept[2]


#: The key under which a group's memory counts the bytes of centred columns it keeps.
_CENTRED_HELD = "centred bytes held"


def block_scaled_gram(objective: LinearObjective, params: np.ndarray, X: Any, y: Any, sample_weight: Any,
                      scaling: ColumnScales, memory: dict | None = None, key: Any = None) -> np.ndarray:
    r"""The Hessian sums of one block in scaled coordinates:
    :math:`\tilde Z^\top \operatorname{diag}(s_i h_i) \tilde Z` with :math:`\tilde Z`
    the centred, scaled columns and a one for the intercept (module docstring), ``h``
    from :func:`curvature`; float64 on the host, not divided by the total weight.  A
    multi-output loss (``hessian_blocks``: the multinomial's ``diag(p) - p p^T`` per
    row) gives the ``(q K) x (q K)`` matrix in the parameters' layout (column ``j``'s
    coefficient of output ``k`` at ``j K + k``): one weighted Gram matrix per pair of
    outputs.

    ``memory`` (a group's dict kept between passes) and ``key`` (the block's name in
    it): a single-output model's block is centred once and kept there
    (:func:`_centred_slices`); each pass then weights a slice into one buffer and
    takes one BLAS product of it.  The same matrix, bit for bit, with or without."""
    q = objective.n_features + objective.fit_intercept
    k = objective.n_outputs
    inv = np.ones(q)
    inv[:scaling.scale.size] = 1.0 / scaling.scale  # scaling the small matrix is exact to rounding
    if k == 1:  # the common case without the bookkeeping of output pairs
        root = np.sqrt(_curvature_weights(objective, params, X, y, sample_weight))
        H1: np.ndarray | None = None
        buffer: np.ndarray | None = None
        for start, stop, Z in _centred_slices(objective, X, scaling, memory, key):
            if buffer is None or buffer.shape[0] < stop - start:
                buffer = np.empty_like(Z)
            A = buffer[:stop - start]
            np.multiply(Z, root[start:stop, None], out=A)
            G = A.T @ A  # NumPy's symmetric rank-k product (BLAS syrk)
            H1 = G if H1 is None else H1 + G
        if H1 is None:
            H1 = np.zeros((q, q))
        # the upper triangle mirrored (adding zeros turns a -0.0 into 0.0, as before)
        H1 = np.triu(H1) + np.triu(H1, 1).T
        return H1 * inv[:, None] * inv[None, :]
    W = _output_blocks(objective, params, X, y, sample_weight)
    weights = {(r, c): W[:, r, c] for r in range(k) for c in range(r, k)}
    H = np.zeros((q, k, q, k))
    for start, stop, A in _scaled_slices(objective, X, scaling, 0, scale=False):
        for (r, c), w in weights.items():
            G = A.T @ (A * w[start:stop, None])
            H[:, r, :, c] += G
            if r != c:
                H[:, c, :, r] += G.T
    H = H.reshape(q * k, q * k)
    H = np.triu(H) + np.triu(H, 1).T
    inv = np.repeat(inv, k)
    return H * inv[:, None] * inv[None, :]


def _output_blocks(objective: LinearObjective, params: np.ndarray, X: Any, y: Any, sample_weight: Any) -> np.ndarray:
    """The per-row ``(K, K)`` Hessians of a multi-output loss times the sample weights,
    on the host."""
    xp = get_namespace(X, y, sample_weight)
    raw = objective.raw_prediction(params, X)
    W = objective.loss.hessian_blocks(xp.astype(y, raw.dtype, copy=False), raw, xp)  # type: ignore[attr-defined]
    if sample_weight is not None:
        W = W * xp.reshape(xp.astype(sample_weight, W.dtype, copy=False), (-1, 1, 1))
    return np.asarray(to_numpy(W), dtype=np.float64)


def block_r_factor(objective: LinearObjective, params: np.ndarray, X: Any, y: Any, sample_weight: Any,
                   scaling: ColumnScales) -> RFactor:
    r"""The :class:`RFactor` of one block's weighted working design (module docstring).

    A multinomial (``n_outputs`` K > 1) gives each row K pseudo-rows: pseudo-row ``k``
    is :math:`\sqrt{s p_k}\,(e_k - p) \otimes \tilde z` with working response
    :math:`\sqrt{s}\,([y = k] - p_k) / \sqrt{p_k}`; their sums of squares are the
    row's Hessian :math:`(\operatorname{diag}(p) - p p^\top) \otimes \tilde z \tilde z^\top`
    and their products with the response its negative gradient, so the same
    least-squares step is Newton's, at the design's condition.

    Parameters
    ----------
    objective : LinearObjective
        A loss with ``loss_gradient`` and ``hessian_weight`` (single output), or the
        multinomial's ``inverse_link``.
    params : ndarray of shape (objective.n_params,)
        Original (unscaled) parameters.
    X, y, sample_weight : the block
    scaling : ColumnScaling
        The columns' centres and scales (:mod:`..scaling`).
    """
    k = objective.n_outputs
    p = objective.n_params
    R = np.zeros((0, p + 1))
    if k == 1:
        a, u = _working(objective, params, X, y, sample_weight)
        root = np.sqrt(a)
        for start, stop, A in _scaled_slices(objective, X, scaling, 1):
            A[:, :p] *= root[start:stop, None]
            A[:, p] = root[start:stop] * u[start:stop]
            R = _r_of(np.vstack([R, A]))
        return RFactor(R)
    xp = get_namespace(X, y, sample_weight)
    raw = objective.raw_prediction(params, X)
    P = np.asarray(to_numpy(objective.loss.inverse_link(raw, xp)), dtype=np.float64)  # type: ignore[attr-defined]
    labels = np.asarray(to_numpy(y), dtype=np.float64).astype(np.int64)
    Y = (labels[:, None] == np.arange(k)[None, :]).astype(np.float64)
    s = np.ones(len(P)) if sample_weight is None else np.asarray(to_numpy(sample_weight), dtype=np.float64)
    live = P > np.finfo(float).tiny
    root = np.sqrt(s[:, None] * P)  # sqrt(s p_k)
    response = np.where(live, np.sqrt(s)[:, None] * (Y - P) / np.sqrt(np.where(live, P, 1.0)), 0.0)
    eye = np.eye(k)
    for start, stop, Z in _scaled_slices(objective, X, scaling, 0, rows_factor=k * k):
        m, q = Z.shape
        coef = root[start:stop, :, None] * (eye[None] - P[start:stop, None, :])  # (m, k, k')
        A = np.empty((m * k, p + 1))
        A[:, :p] = (coef[:, :, None, :] * Z[:, None, :, None]).reshape(m * k, q * k)
        A[:, p] = response[start:stop].reshape(-1)
        R = _r_of(np.vstack([R, A]))
    return RFactor(R)


@dataclass(frozen=True)
class LeastSquaresModel:
    r"""The quadratic model of a Newton step from the reduced R factor (module docstring).

    ``R`` of shape ``(q + 1, q + 1)`` or fewer rows (its last column the weighted
    working response; more rows after :meth:`pinned`), ``weight_sum`` :math:`W`,
    ``ridge`` the diagonal of :math:`\Lambda` in the solver's coordinates."""

    R: np.ndarray
    weight_sum: float
    ridge: np.ndarray

    def pinned(self, directions: np.ndarray) -> LeastSquaresModel:
        """The model with rows that hold the step at zero along ``directions``
        (orthonormal columns of :func:`shift_directions`), weighted like the
        largest column of the model: the least-squares problem has full rank there."""
        if not directions.size:
            return self
        q = self.ridge.size
        top = float(np.max(np.sum(self.R[:, :q] ** 2, axis=0) / self.weight_sum + self.ridge, initial=0.0))
        rows = np.zeros((directions.shape[1], q + 1))
        rows[:, :q] = np.sqrt(self.weight_sum * (top if top > 0 else 1.0)) * directions.T
        return LeastSquaresModel(np.vstack([self.R, rows]), self.weight_sum, self.ridge)

    def step(self, x: np.ndarray) -> np.ndarray:
        """The step ``d`` minimising the model at ``x``."""
        q = self.ridge.size
        R = self.R[:, :q] / np.sqrt(self.weight_sum)
        c = self.R[:, q] / np.sqrt(self.weight_sum)
        root = np.sqrt(self.ridge)
        A = np.vstack([R, np.diag(root)])
        rhs = np.concatenate([c, -root * x])
        return np.linalg.lstsq(A, rhs, rcond=None)[0]
