r"""The exact elastic-net path of :class:`~dask_dgd.linear_model.ElasticNetCV`
(``solver="cd"``): the folds' Gram matrices in one pass, every fold and every penalty
solved on the driver.

For least squares the data enter the objective only through weighted sums of
:math:`z = [x, y]`: with fold :math:`k`'s sums
:math:`M_k = \sum_{i \in k} s_i \tilde z_i \tilde z_i^\top` (:math:`\tilde z = [x, y, 1]`,
a ``(d + 2) x (d + 2)`` matrix holding the Gram matrix, ``X^T y``, ``y^T y``, the
column sums and the weight), the training sums of the fold are
:math:`\sum_j M_j - M_k`, and the held-out squared error of any coefficients is a
quadratic form in :math:`M_k`.  One pass over ``X`` computes every :math:`M_k` (each
row enters one fold's sums: the cost of one Gram matrix, ``n d^2`` flops), and
coordinate descent on the ``d x d`` centred Gram matrices then solves every fold and
every penalty exactly, warm-started along the path, on the driver.

The rows are centred on the workers by the weighted means of all rows (the shift
comes from the pass that finds ``alpha_max``), so that the centring of each fold's
training rows on the driver subtracts only a small correction and loses no
precision, as scikit-learn's centring of ``X`` before its Gram matrix.  Sparse
blocks are not centred (that would densify them); their sums are shifted on the
driver, in float64.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.linalg

from ..._backend import asarray_like, get_namespace, is_sparse, take_rows, to_numpy
from ...losses._gram import weighted_gram
from ..data.blocks import _block_error
from ..stopping import gradient_tol
from .newton import cd_solve, kkt_violation

if TYPE_CHECKING:
    import numpy.typing as npt

    from ...losses._path import PathObjective
    from ..data.blocks import Block
    from ..data.shards import ShardSet

__all__ = ["alpha_max_of", "fold_paths", "fold_sums", "held_out_squared_error", "solve_path"]

#: Rounds of coordinate descent (each with a tenth of the previous round's inner
#: tolerance) before a penalty's solution is given up as not converged.
MAX_ROUNDS = 12


def _block_fold_sums(block: Block, path: PathObjective, shift: np.ndarray) -> np.ndarray:
    """``(n_folds, d + 2, d + 2)``: :math:`M_k` of one block's rows (see the module);
    with an offset ``o``, of ``z = [x, y - o]``."""
    n, n_folds = block.X.shape[0], path.n_folds
    folds = path.folds_of(block.index, n)
    xp = get_namespace(block.X)
    X, o = path.features_and_offset(block.X)
    y = xp.reshape(block.y, (n,)) if not is_sparse(X) else np.asarray(to_numpy(block.y), np.float64).reshape(n)
    if o is not None:
        y = xp.astype(y, xp.float64) - (xp.astype(o, xp.float64) if not is_sparse(X) else to_numpy(o))
    if block.sample_weight is None:
        w = np.ones(n)
    else:
        w = np.asarray(to_numpy(block.sample_weight), np.float64).reshape(n)
    d = X.shape[1]
    out = np.zeros((n_folds, d + 2, d + 2))
    for k in range(n_folds):
        rows = np.flatnonzero(folds == k)
        if not len(rows):
            continue
        Xk, yk = take_rows(X, rows), take_rows(y, rows)
        if is_sparse(X):
            Z = _sparse_hstack(Xk, yk)
        else:
            f64 = xp.float64
            Xk = xp.astype(Xk, f64) - asarray_like(shift[:d], Xk, dtype=f64)
            yk = xp.astype(yk, f64) - float(shift[d])
            Z = xp.concat([Xk, yk[:, None]], axis=1)
        out[k] = weighted_gram(Z, w[rows], fit_intercept=True)
    return out


def _sparse_hstack(Xk: Any, yk: Any) -> Any:
    """``[Xk, yk]`` as a float64 CSR matrix of Xk's library (SciPy or CuPy)."""
    import scipy.sparse as sp

    if sp.issparse(Xk):
        return sp.hstack([Xk.astype(np.float64), sp.csr_matrix(np.asarray(yk, np.float64)[:, None])], format="csr")
    import cupyx.scipy.sparse as cusp  # a CuPy sparse block

    column = cusp.csr_matrix(asarray_like(np.asarray(to_numpy(yk), np.float64)[:, None], Xk))
    return cusp.hstack([Xk.astype(np.float64), column], format="csr")


def _named_block_fold_sums(block: Block, path: PathObjective, shift: np.ndarray) -> np.ndarray:
    try:
        return _block_fold_sums(block, path, shift)
    except Exception as err:  # name the block
        raise _block_error(err, block) from err


def fold_sums(shards: ShardSet, path: PathObjective, shift: npt.ArrayLike) -> np.ndarray:
    r"""The folds' sums :math:`M_k` over all rows, centred on ``shift``.

    Parameters
    ----------
    shards : ShardSet
    path : PathObjective
        Gives the rows' folds and the blocks' layout (features, then any offset column).
    shift : ndarray of shape (d + 1,)
        The point ``[x, y]`` the rows are centred on (zeros: no centring).

    Returns
    -------
    ndarray of shape (n_folds, d + 2, d + 2)
        Summed over the fixed block tree (:meth:`~dask_dgd._engine.data.shards.ShardSet.tree_sum`):
        the same bit for bit wherever the blocks live; a few partial sums per worker
        group travel, not one per block.
    """
    shift = np.asarray(shift, dtype=np.float64)
    d = path.n_features
    total = shards.tree_sum(_named_block_fold_sums, path, shift, name="dgd-cv-gram")
    total = total.reshape(path.n_folds, d + 2, d + 2)
    if shards.sparse and np.any(shift != 0):  # centre on the driver: sum s (z - c)(z - c)^T
        c = np.append(shift, 0.0)
        S, W = total[:, :, -1], total[:, -1, -1]
        total = (total - S[:, :, None] * c[None, None, :] - c[None, :, None] * S[:, None, :]
                 + W[:, None, None] * np.outer(c, c)[None])
    return total


def _parts(M: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, np.ndarray, float, float]:
    d = M.shape[0] - 2
    return M[:d, :d], M[:d, d], M[d, d], M[:d, d + 1], M[d, d + 1], M[d + 1, d + 1]


def alpha_max_of(M: np.ndarray, fit_intercept: bool) -> float:
    """The lasso's ``alpha_max`` on the rows of the sums ``M``:
    ``max |X_c^T s (y - ybar)| / sum(s)`` (``X_c``: ``X`` centred when ``fit_intercept``)."""
    G, Sxy, _, Sx, Sy, W = _parts(M)
    Xy = Sxy - Sx * (Sy / W) if fit_intercept else Sxy
    return float(np.max(np.abs(Xy), initial=0.0)) / W


def _cd_exact(H: np.ndarray, c: np.ndarray, beta: np.ndarray, l1: np.ndarray,
              tol: float) -> tuple[np.ndarray, int, bool]:
    """Solve ``min 1/2 b^T H b - c^T b + l1 |b|_1`` to a KKT violation <= ``tol``;
    returns the solution, the coordinate-descent sweeps and whether it converged."""
    inner, sweeps = tol / 10.0, 0
    if not np.any(l1):  # ridge: the normal equations, directly (coordinate descent crawls on collinear columns)
        try:
            beta = scipy.linalg.solve(H, c, assume_a="pos")
        except (np.linalg.LinAlgError, ValueError):  # singular (no L2 part, collinear columns)
            beta = np.linalg.lstsq(H, c, rcond=None)[0]
    for _ in range(MAX_ROUNDS):
        grad = H @ beta - c
        if kkt_violation(grad, beta, l1) <= tol:
            return beta, sweeps, True
        beta, n = cd_solve(H, grad, beta, l1, inner)
        sweeps += n
        inner /= 10.0
    return beta, sweeps, kkt_violation(H @ beta - c, beta, l1) <= tol


def solve_path(M: np.ndarray, alphas: np.ndarray, l1_ratio: float, fit_intercept: bool, tol: float,
               shift: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, bool]:
    r"""Every penalty of the path on the training sums ``M`` (one fold's, or all rows').

    Minimises :math:`\frac{1}{2W} \sum s_i (y_i - x_i^\top \beta - b)^2
    + \alpha (\rho \lVert\beta\rVert_1 + \frac{1-\rho}{2} \lVert\beta\rVert_2^2)` for
    each ``alpha`` (descending), each solution the next one's start.

    Returns
    -------
    coef : ndarray of shape (n_alphas, d)
    intercept : ndarray of shape (n_alphas,)
        In the data's coordinates (``shift`` undone).
    sweeps : int
    converged : bool
    """
    G, Sxy, _, Sx, Sy, W = _parts(M)
    d = G.shape[0]
    if fit_intercept:
        m, ybar = Sx / W, Sy / W
        C, c = G / W - np.outer(m, m), Sxy / W - m * ybar
    else:
        m, ybar = np.zeros(d), 0.0
        C, c = G / W, Sxy / W
    tol = gradient_tol(tol, float(np.max(np.abs(c), initial=0.0)))  # relative to the null start's, as one model's
    beta = np.zeros(d)
    coef, icpt = np.zeros((len(alphas), d)), np.zeros(len(alphas))
    sweeps, converged = 0, True
    eye = np.arange(d)
    for j, alpha in enumerate(alphas):
        H = C.copy()
        H[eye, eye] += alpha * (1.0 - l1_ratio)
        beta, n, ok = _cd_exact(H, c, beta, np.full(d, alpha * l1_ratio), tol)
        sweeps, converged = sweeps + n, converged and ok
        coef[j] = beta
        if fit_intercept:  # b' = ybar - m^T beta in shifted coordinates
            icpt[j] = ybar - m @ beta + shift[d] - shift[:d] @ beta
    return coef, icpt, sweeps, converged


def held_out_squared_error(M: np.ndarray, coef: np.ndarray, intercept: np.ndarray, shift: np.ndarray) -> np.ndarray:
    r"""``sum_i s_i (y_i - x_i^T beta - b)^2`` over the rows of the sums ``M`` for each
    row of ``coef`` ``(n, d)`` / ``intercept`` ``(n,)``, as a quadratic form in ``M``."""
    G, Sxy, Syy, Sx, Sy, W = _parts(M)
    d = G.shape[0]
    b = intercept - shift[d] + coef @ shift[:d]  # the intercept in shifted coordinates
    sse = (Syy - 2.0 * coef @ Sxy - 2.0 * b * Sy + np.einsum("ij,jk,ik->i", coef, G, coef)
           + 2.0 * b * (coef @ Sx) + b * b * W)
    return np.maximum(sse, 0.0)


def fold_paths(sums: np.ndarray, grid: np.ndarray, l1_ratio: float, fit_intercept: bool, tol: float,
               shift: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """Every fold's path (:func:`solve_path` on its training sums) and its held-out
    scores (minus the weighted mean squared error).

    Returns
    -------
    coef : ndarray of shape (n_alphas, n_folds, d)
    intercept, score : ndarray of shape (n_alphas, n_folds)
    converged : bool
    """
    total, F = sums.sum(axis=0), sums.shape[0]
    coef = np.zeros((len(grid), F, sums.shape[1] - 2))
    icpt = np.zeros((len(grid), F))
    score = np.zeros((len(grid), F))
    converged = True
    for k in range(F):
        c, b, _, ok = solve_path(total - sums[k], grid, l1_ratio, fit_intercept, tol, shift)
        coef[:, k], icpt[:, k], converged = c, b, converged and ok
        score[:, k] = -held_out_squared_error(sums[k], c, b, shift) / sums[k][-1, -1]
    return coef, icpt, score, converged
