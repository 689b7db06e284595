"""Pointwise climate models: one weighted least-squares model per grid cell, all at once.

Each (time chunk, spatial chunk) block gives its cells' sufficient statistics
(:func:`cell_stats`: weighted Gram matrices of ``[1, x]``, ``[1, x]^T y``, counts),
which are summed over the time chunks (a tree reduction per spatial chunk, so the
parameters are sharded by space) and solved per cell (:func:`solve_cells`).  The block
functions work in the array namespace of their block (NumPy, CuPy,
``array_api_strict``) and move the small NumPy inputs onto its device once per task.
"""

import math

import array_api_compat
import numpy as np

from ..exceptions import InputError
from ._blocks import block_features, proportions, split_fields
from ._namespace import align, to_host

__all__ = ["cell_stats", "cell_stats_xp", "pointwise_block", "pooled_block", "score_block", "solve_cells"]


def cell_stats(order, yb, wb, *blocks):
    """Per-cell sufficient statistics of one (time chunk, spatial chunk) block.

    ``blocks`` are the block's full-grid fields then its time-only fields (see
    :class:`~._design.Fields`).  Returns a NumPy array of shape ``(1, *space, p*p + p +
    3)``: the weighted Gram matrix of ``[1, x]``, the weighted ``[1, x]^T y``, ``sum w
    y^2``, ``sum w`` and the number of unmasked time steps of every cell.  Masked time
    steps (NaN anywhere, weight <= 0) contribute nothing.

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
    out = np.empty((math.prod(space), p * p + p + 3))
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
    ``(cells, p*p + p + 3)`` on the device of ``y``.

    ``y``: (time, cells); ``w``: (cells,); ``full``: (time, cells) fields; ``timef``:
    (time,) fields; all of ``xp`` on one device.  The masked design ``A`` (cells, p,
    time), ``[1, x]`` with zeros where a step is masked, gives the Gram matrices as
    one batched ``A diag(w) A^T`` (``matmul``) and ``[1, x]^T y`` as ``A diag(w) y``;
    the same masking as the kernel, summed in another order (equal to it up to
    rounding: within about 1e-15 of the block's largest statistic).
    """
    n_t, n_c = y.shape
    dtype, device = y.dtype, array_api_compat.device(y)
    ok, wm, ym, A = masked_design(xp, order, y, w, full, timef)
    p = A.shape[1]
    Aw = A * xp.reshape(xp.permute_dims(wm, (1, 0)), (n_c, 1, n_t))
    gram = xp.matmul(Aw, xp.matrix_transpose(A))
    i = xp.arange(p, device=device)
    upper = xp.reshape(i, (p, 1)) <= xp.reshape(i, (1, p))
    gram = xp.where(upper, gram, xp.matrix_transpose(gram))  # exactly symmetric, as the kernel's
    xy = xp.matmul(Aw, xp.reshape(xp.permute_dims(ym, (1, 0)), (n_c, n_t, 1)))
    tail = [xp.sum(wm * ym * ym, axis=0), xp.sum(wm, axis=0), xp.sum(xp.astype(ok, dtype), axis=0)]
    return xp.concat([xp.reshape(gram, (n_c, p * p)), xp.reshape(xy, (n_c, p)),
                      xp.stack(tail, axis=1)], axis=1)


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


def solve_cells(stats, p, alpha):
    """Weighted least squares (ridge ``alpha`` on the slopes) of every cell from its
    summed statistics: ``(*space, p)`` coefficients, intercept first; NaN for cells
    without any unmasked step.

    As scikit-learn does, the intercept is taken out by centring: the slopes solve
    ``(Sxx - sw m m^T + alpha I) b = Sxy - sw m my`` (``m``, ``my`` the weighted means),
    and the intercept is ``my - m . b``.  A cell whose centred system is singular or
    ill-conditioned (a feature constant in the cell, fewer steps than features) gets the
    minimum-norm slopes (``lstsq``), like ``LinearRegression`` (see :func:`solve_spd`).
    """
    space = stats.shape[:-1]
    s = stats.reshape(-1, stats.shape[-1])
    gram = s[:, : p * p].reshape(-1, p, p)
    xy = s[:, p * p : p * p + p]
    count = s[:, p * p + p + 2]
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
        G, b = gram[ok], xy[ok]
        sw = G[:, 0, 0]
        m = G[:, 0, 1:] / sw[:, None]
        my = b[:, 0] / sw
        C = G[:, 1:, 1:] - sw[:, None, None] * m[:, :, None] * m[:, None, :] + float(alpha) * np.eye(p - 1)
        c = b[:, 1:] - sw[:, None] * m * my[:, None]
        beta = solve_spd(C, c, 1e-10) if p > 1 else np.empty_like(c)
        out[ok, 0] = my - np.einsum("cp,cp->c", m, beta)
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
