"""Pointwise climate models: one weighted least-squares model per grid cell, all at once.

Each (time chunk, spatial chunk) block gives its cells' sufficient statistics
(:func:`cell_stats`: weighted means and centred cross-products of ``[x, y]``, counts),
which are merged over the time chunks (:func:`merge_cell_stats`, a tree reduction per
spatial chunk, so the parameters are sharded by space) and solved per cell
(:func:`solve_cells`).  Centred, not raw, sums: a feature whose spread is small next to
its mean (a pressure of 101,325 Pa varying by 0.1 Pa, sea ice at 271.35 K) keeps its
precision, as in ``numpy.linalg.lstsq``.  The block
functions work in the array namespace of their block (NumPy, CuPy,
``array_api_strict``) and move the small NumPy inputs onto its device once per task.
"""

import math

import array_api_compat
import numpy as np

from ..exceptions import InputError
from ._blocks import block_features, proportions, split_fields
from ._namespace import align, to_host

__all__ = ["cell_stats", "cell_stats_xp", "merge_cell_stats", "n_cell_stats", "pointwise_block", "pooled_block",
           "score_block", "solve_cells", "stats_as_they_are"]


def n_cell_stats(p):
    """The number of statistics per cell of a design of ``p - 1`` features (see
    :func:`cell_stats`)."""
    return p * p + p + 2


def cell_stats(order, yb, wb, *blocks):
    """Per-cell sufficient statistics of one (time chunk, spatial chunk) block.

    ``blocks`` are the block's full-grid fields then its time-only fields (see
    :class:`~._design.Fields`).  Returns a NumPy array of shape ``(1, *space, p*p + p +
    2)``, ``p - 1`` features: for every cell, of ``z = [x, y]`` over its unmasked time
    steps, the weighted centred cross-products ``sum w (z - m)(z - m)^T`` (p x p), the
    weighted means ``m`` (p), ``sum w`` and the number of unmasked steps (zeros where
    there is none).  Masked time steps (NaN anywhere, weight <= 0) contribute nothing.

    NumPy blocks go through the Numba kernel (:mod:`._kernels`); blocks of any other
    namespace (CuPy, ``array_api_strict``) through :func:`cell_stats_xp` on their
    device, and only the statistics come back to the host.
    """
    xp, (yb, wb, *blocks) = align(yb, wb, *blocks)
    n_t = yb.shape[0]
    space = tuple(yb.shape[1:])
    full, timef = split_fields(order, blocks)
    if not array_api_compat.is_numpy_namespace(xp):
        out = to_host(cell_stats_xp(
            xp, order, xp.reshape(yb, (n_t, -1)), xp.reshape(wb, (-1,)),
            [xp.reshape(b, (n_t, -1)) for b in full], list(timef),
        ))
        return out.reshape((1,) + space + (out.shape[1],))
    from ._kernels import cell_stats_kernel

    inputs = kernel_inputs(order, yb, wb, full, timef)
    p = len(order) + 1
    out = np.empty((math.prod(space), n_cell_stats(p)))
    cell_stats_kernel(*inputs, out)
    return out.reshape((1,) + space + (out.shape[1],))


def kernel_inputs(order, yb, wb, full, timef):
    """The Numba kernels' inputs of a NumPy block: ``(full, timef, kind, pos, y, w)``
    (see :func:`~._kernels.cell_stats_kernel`), float64 and contiguous."""
    n_t = yb.shape[0]
    cells = math.prod(yb.shape[1:])
    kind = np.array([k for k, _ in order], dtype=np.int64)
    pos = np.array([i for _, i in order], dtype=np.int64)
    if len(full) == 1:  # one field: a view when it is float64 in C order (no copy of the block)
        fields = np.ascontiguousarray(full[0], dtype=np.float64).reshape(1, n_t, cells)
    else:
        fields = np.empty((max(len(full), 1), n_t, cells))
        for i, b in enumerate(full):
            fields[i] = np.asarray(b, dtype=np.float64).reshape(n_t, -1)
    time_fields = np.empty((max(len(timef), 1), n_t))
    for i, b in enumerate(timef):
        time_fields[i] = np.asarray(b, dtype=np.float64)
    y = np.ascontiguousarray(yb, dtype=np.float64).reshape(n_t, -1)
    w = np.ascontiguousarray(wb, dtype=np.float64).reshape(-1)
    return fields, time_fields, kind, pos, y, w


def cell_stats_xp(xp, order, y, w, full, timef):
    """The statistics of :func:`cell_stats` with the Array API functions of ``xp``:
    ``(cells, p*p + p + 2)`` on the device of ``y``.

    ``y``: (time, cells); ``w``: (cells,); ``full``: (time, cells) fields; ``timef``:
    (time,) fields; all of ``xp`` on one device.  Two passes over the block (on the
    device): the weighted means of ``z = [x, y]``, then the centred cross-products as
    one batched ``D diag(w) D^T`` (``matmul``), ``D`` the centred ``z`` (cells, p, time)
    with zeros where a step is masked; the same masking as the kernel, its one shifted
    pass in another order (equal to it up to rounding: within about 1e-15 of the
    block's largest statistic).
    """
    n_t, n_c = y.shape
    dtype, device = y.dtype, array_api_compat.device(y)
    ok, wm, ym, A = masked_design(xp, order, y, w, full, timef)
    p = A.shape[1]
    Z = xp.concat([A[:, 1:, :], xp.reshape(xp.permute_dims(ym, (1, 0)), (n_c, 1, n_t))], axis=1)
    wt = xp.reshape(xp.permute_dims(wm, (1, 0)), (n_c, 1, n_t))
    sw = xp.sum(wm, axis=0)
    has = sw > 0.0
    mean = xp.where(xp.reshape(has, (n_c, 1)),
                    xp.sum(Z * wt, axis=2) / xp.reshape(xp.where(has, sw, 1.0), (n_c, 1)), 0.0)
    D = xp.where(xp.reshape(xp.permute_dims(ok, (1, 0)), (n_c, 1, n_t)), Z - xp.reshape(mean, (n_c, p, 1)), 0.0)
    M = xp.matmul(D * wt, xp.matrix_transpose(D))
    i = xp.arange(p, device=device)
    upper = xp.reshape(i, (p, 1)) <= xp.reshape(i, (1, p))
    M = xp.where(upper, M, xp.matrix_transpose(M))  # exactly symmetric, as the kernel's
    tail = [sw, xp.sum(xp.astype(ok, dtype), axis=0)]
    return xp.concat([xp.reshape(M, (n_c, p * p)), mean, xp.stack(tail, axis=1)], axis=1)


def masked_design(xp, order, y, w, full, timef):
    """``(ok, wm, ym, A)`` of a block for the Array API paths: the unmasked (time,
    cells), the weights and the target with zeros where masked, and the design ``[1,
    x]`` as (cells, p, time) with zeros where masked (the inputs of
    :func:`cell_stats_xp`)."""
    n_t, n_c = y.shape
    ok = xp.isfinite(y) & xp.reshape(w > 0.0, (1, n_c))
    for f in full:
        ok = ok & xp.isfinite(f)
    for g in timef:
        ok = ok & xp.reshape(xp.isfinite(g), (n_t, 1))
    wm = xp.where(ok, xp.reshape(w, (1, n_c)), 0.0)
    ym = xp.where(ok, y, 0.0)
    cols = [xp.ones((n_t, n_c), dtype=y.dtype, device=array_api_compat.device(y))]
    for kind, pos in order:
        cols.append(full[pos] if kind == 0 else xp.broadcast_to(xp.reshape(timef[pos], (n_t, 1)), (n_t, n_c)))
    A = xp.permute_dims(xp.where(ok, xp.stack(cols, axis=0), 0.0), (2, 0, 1))
    return ok, wm, ym, A


def solve_spd(M, b, rcond):
    """``x`` with ``M[i] x[i] = b[i]`` for a batch of symmetric positive semi-definite
    systems: Cholesky of the Jacobi-scaled matrix (Numba, one pass, no SVD), and the
    minimum-norm solution (``lstsq`` with ``rcond``) for the cells whose scaled
    pivots fall below ``rcond`` (a feature constant in the cell, fewer steps than
    features, collinear features): about those with a condition number above
    ``1 / rcond`` once the features' scales are taken out."""
    from ._kernels import spd_solve_kernel

    M = np.ascontiguousarray(M, dtype=np.float64)
    b = np.ascontiguousarray(b, dtype=np.float64)
    x = np.empty_like(b)
    ok = np.empty(len(M), dtype=np.bool_)
    spd_solve_kernel(M, b, float(rcond), x, ok)
    for i in np.flatnonzero(~ok):
        x[i] = np.linalg.lstsq(M[i], b[i], rcond=rcond)[0]
    return x


def stats_as_they_are(stats, axis=0, keepdims=True):
    """A block's :func:`cell_stats`, as they are (the ``chunk`` of the reduction that
    :func:`merge_cell_stats` combines: each block's are already one time step thick)."""
    return stats


def merge_cell_stats(stats, p, axis=0, keepdims=False):
    """The statistics of :func:`cell_stats` of several blocks of the same cells (along
    ``axis``, the time chunks) merged into those of their union: weights and counts
    added, means weighted, and the centred cross-products added with each block's
    ``sw_k (m_k - m)(m_k - m)^T`` (the pairwise update of Chan, Golub and LeVeque,
    for k blocks at once); no raw sums of squares, so no cancellation.  The
    ``(stats, axis, keepdims)`` of a ``dask.array.reduction`` combine."""
    stats = np.moveaxis(np.asarray(stats, dtype=np.float64), axis, 0)
    if stats.shape[0] == 1:  # one block: its own statistics, bit for bit (as a fit in process)
        return np.moveaxis(stats, 0, axis) if keepdims else stats[0]
    M, mean = stats[..., : p * p], stats[..., p * p : p * p + p]
    sw, count = stats[..., p * p + p], stats[..., p * p + p + 1]
    total = sw.sum(axis=0)
    has = total > 0
    m = np.where(has[..., None], (sw[..., None] * mean).sum(axis=0) / np.where(has, total, 1.0)[..., None], 0.0)
    dev = np.where(sw[..., None] > 0, mean - m, 0.0)
    spread = np.einsum("k...i,k...j->...ij", sw[..., None] * dev, dev)
    out = np.concatenate([M.sum(axis=0) + spread.reshape(spread.shape[:-2] + (p * p,)), m,
                          total[..., None], count.sum(axis=0)[..., None]], axis=-1)
    return np.expand_dims(out, axis) if keepdims else out


def solve_cells(stats, p, alpha):
    """Weighted least squares (ridge ``alpha`` on the slopes) of every cell from its
    merged statistics: ``(*space, p)`` coefficients, intercept first; NaN for cells
    without any unmasked step.

    As scikit-learn does, the intercept is taken out by centring: the slopes solve
    ``(Cxx + alpha I) b = Cxy`` (the centred cross-products of the features and of the
    features with the target), and the intercept is ``my - m . b`` (``m``, ``my`` the
    weighted means).  A cell whose centred system is singular or ill-conditioned (a
    feature constant in the cell, fewer steps than features) gets the minimum-norm
    slopes (``lstsq``), like ``LinearRegression`` (see :func:`solve_spd`).
    """
    space = stats.shape[:-1]
    s = stats.reshape(-1, stats.shape[-1])
    cross = s[:, : p * p].reshape(-1, p, p)
    mean = s[:, p * p : p * p + p]
    count = s[:, p * p + p + 1]
    out = np.full((s.shape[0], p), np.nan)
    ok = count > 0
    overflow = ok & ~np.all(np.isfinite(s[:, : p * p + p + 1]), axis=1)
    if overflow.any():  # the sums of squares of a cell overflowed: no system to solve
        raise InputError(
            f"the least-squares sums of {int(overflow.sum())} grid cell(s) overflow float64: a feature or the "
            "target has values too large for sums of squares (|x| above about 1e150); scale the variables "
            "(e.g. other units) before fitting"
        )
    if ok.any():
        q = p - 1  # features; the target last
        X, mz = cross[ok], mean[ok]
        C = X[:, :q, :q] + float(alpha) * np.eye(q)
        c = X[:, :q, q]
        beta = solve_spd(C, c, 1e-10) if q > 0 else np.empty_like(c)
        out[ok, 0] = mz[:, q] - np.einsum("cp,cp->c", mz[:, :q], beta)
        out[ok, 1:] = beta
    return out.reshape(space + (p,))


def pointwise_block(order, family, coef, wb, *blocks):
    """Predictions of one grid block from its cells' coefficients (``coef``: (*space,
    p), NumPy), in the namespace of the block and on its device: the mean of the
    ``family`` (identity, log or logit link).  A cell with an infinite intercept and
    zero slopes (a target that never left 0, or 1) predicts that edge exactly."""
    xp, (coef, wb, *blocks) = align(coef, wb, *blocks)
    shape = (blocks[0].shape[0],) + tuple(wb.shape)  # every field block spans the time chunk
    c = xp.reshape(coef, (1, -1, coef.shape[-1]))
    X = xp.reshape(block_features(order, shape, blocks), (shape[0], c.shape[1], len(order)))
    eta = c[..., 0] + xp.sum(X * c[..., 1:], axis=-1)
    return xp.reshape(_inverse_link(xp, family, eta), shape)


#: Largest linear predictor a Poisson prediction exponentiates: ``log`` of float64's largest
#: value, so ``exp`` never overflows (a larger ``eta`` predicts about 1.8e308).
MAX_LOG = 709.78


def _inverse_link(xp, family, eta):
    """The family's mean of the linear predictor ``eta``, in its namespace, without
    overflow: Poisson ``exp(min(eta, MAX_LOG))``; binomial the logistic function as
    ``1 / (1 + q)`` or ``q / (1 + q)`` with ``q = exp(-|eta|)`` in (0, 1] (``-inf``
    gives 0, ``+inf`` 1); NaN stays NaN."""
    if family == "poisson":
        return xp.exp(xp.where(eta > MAX_LOG, MAX_LOG, eta))
    if family == "binomial":
        q = xp.exp(-xp.abs(eta))
        return xp.where(eta >= 0.0, 1.0 / (1.0 + q), q / (1.0 + q))
    return eta


def pooled_block(order, coef, intercept, family, wb, *blocks):
    """Predictions of one grid block of a pooled model (identity, log or logit link)."""
    xp, (coef, wb, *blocks) = align(np.asarray(coef, dtype=np.float64), wb, *blocks)
    shape = (blocks[0].shape[0],) + tuple(wb.shape)
    eta = xp.matmul(block_features(order, shape, blocks), coef) + float(intercept)
    return xp.reshape(_inverse_link(xp, family, eta), shape)


def score_block(yb, pb, wb, nb=None):
    """``(1, ..., 1, 5)`` NumPy sums of a grid block for :meth:`ClimateRegressor.evaluate`:
    ``sum w``, ``sum w y``, ``sum w y^2``, ``sum w e^2``, cells scored.  ``nb``: the
    binomial trials of the block or None; with them ``y`` is the proportion ``yb /
    nb`` and ``w`` the cell weight times the trials (see :func:`~._blocks.proportions`)."""
    xp, (yb, pb, wb, nb) = align(yb, pb, wb, nb)
    n_t = yb.shape[0]
    y = xp.reshape(yb, (n_t, -1))
    pred = xp.reshape(pb, (n_t, -1))
    w = xp.broadcast_to(xp.reshape(wb, (1, -1)), y.shape)
    if nb is not None:
        y, n = proportions(xp, y, xp.reshape(nb, (n_t, -1)))
        w = w * n
    ok = xp.isfinite(y) & xp.isfinite(pred) & (w > 0)
    w = xp.where(ok, w, 0.0)
    y0 = xp.where(ok, y, 0.0)
    e = xp.where(ok, pred - y, 0.0)
    sums = xp.stack([xp.sum(w), xp.sum(w * y0), xp.sum(w * y0 * y0), xp.sum(w * e * e),
                     xp.sum(xp.astype(ok, y.dtype))])
    return to_host(sums).reshape((1,) * len(yb.shape) + (5,))
