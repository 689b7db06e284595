"""Pointwise generalised linear models: one Poisson or binomial model per grid cell.

A batched Newton method (IRLS) over all cells at once.  The first pass is the classic
IRLS start from the data (R's ``glm``: the working response at ``mu = y + 0.1``,
binomial ``(y + 1/2) / 2``), solved as one weighted least-squares step per cell; each
later pass over the data maps every (time chunk, spatial chunk) block to the Newton
statistics of its cells still iterating at their current coefficients
(:func:`glm_stats_of_state`, :func:`glm_stats`: Fisher information, score, deviance),
sums them over the time chunks (a tree reduction per spatial chunk, as for the gaussian
models) and updates every cell of a spatial chunk in one NumPy step
(:func:`newton_update`).  The per-cell state (coefficients, last accepted point, step,
objective) lives with its spatial chunk between passes (persisted on the cluster); the
driver sees only a small summary of each chunk (:func:`_summary`: its cells still
iterating, their objective, the largest gradient), and chunks whose cells have all
converged are not read again.  Inputs that fit in a quarter of the memory at hand are
kept in memory between passes (:func:`_cached`).  A grid that is one NumPy block (see
:class:`~._design.Fields`'s ``in_process``) skips the graphs: each pass calls the same
block functions directly on it, with the same values.

The passes are steps of the one driver loop (:class:`~dask_dgd._engine.loop.Loop`):
:class:`CellNewton` is its solver, so a fit has the records (``history_``), callbacks,
``max_time`` and the progress bar of every other estimator.  It keeps no checkpoint (a
fit takes a few passes).

Each cell minimises its weighted deviance plus the ridge term, ``D_w(b)/2 + alpha/2
|slopes|^2`` (for gaussian data that is half of ``sklearn.linear_model.Ridge``'s
objective, so ``alpha`` means the same thing in every family).  Steps are Newton steps
with step halving: a step whose objective is higher than the last accepted one (beyond
the rounding of its sums, :func:`~dask_dgd.optim._linesearch.no_increase`) is halved
and tried again in the next pass, as R's ``glm.fit`` does, up to
:data:`~dask_dgd.optim._linesearch.MAX_HALVINGS` times, as the Newton solvers' line
search; any decrease is accepted (no Armijo condition, as in ``glm.fit``).  A cell has
converged when its Newton step changes no coefficient by more than ``tol x max(1,
|coefficients|)`` or its objective fell by at most ``tol^2 (|objective| + 0.1)`` (R's
criterion with its default 1e-8 at ``tol=1e-4``); the step computed in that last pass
is then taken as well, so the coefficients are a Newton step more accurate than the
criterion (quadratic convergence: about ``tol^2``).

Cells whose target never leaves the edge of the family's range (all zeros; binomial:
all ones too) have no finite maximum-likelihood fit: their intercept is ``-inf``
(``+inf``), their slopes 0, and they predict 0 (1) exactly.
"""

import math
import time
import warnings
from dataclasses import dataclass

import array_api_compat
import dask.array as da
import numpy as np

from .._engine.loop import Loop
from .._engine.runtime.monitor import Monitor
from .._engine.runtime.records import Bytes, Timing, make_record
from .._engine.solvers.base import Outcome, Solver
from .._engine.stopping import Stop, StopRules
from .._validation import user_stacklevel
from ..exceptions import ConvergenceWarning, InputError
from ..linear_model._separation import mle_missing
from ..optim._linesearch import MAX_HALVINGS, no_increase
from ._blocks import proportions, split_fields
from ._kernels import BINOMIAL, POISSON
from ._namespace import align, to_host
from ._pointwise import kernel_inputs, masked_design, solve_spd

__all__ = ["GLM_FAMILIES", "CellNewton", "find_separated", "fit_cells", "glm_stats", "glm_stats_of_state",
           "glm_stats_xp", "newton_update"]

GLM_FAMILIES = {"poisson": POISSON, "binomial": BINOMIAL}

ACTIVE, CONVERGED, NO_DATA, EDGE = 0.0, 1.0, 2.0, 3.0


def n_stats(p):
    """Columns of :func:`glm_stats`: Hessian, score, deviance, sum w, count, sum w y,
    bad values, the deviance's constant."""
    return p * p + p + 6


def glm_stats(order, family, start, coef, yb, wb, *blocks, trials=False):
    """Per-cell Newton statistics of one (time chunk, spatial chunk) block at the
    cells' coefficients ``coef`` (``(*space, p)``, NumPy): a NumPy array ``(1, *space,
    p*p + p + 6)``, see :func:`~._kernels.glm_acc_kernel` for the columns.

    NumPy blocks go through the Numba kernel, others (CuPy, ``array_api_strict``)
    through :func:`glm_stats_xp` on their device.  ``trials=True``: the last of
    ``blocks`` is the block's binomial trials (the grid's shape), and the target ``yb``
    holds counts of successes, fitted as the proportions ``yb / trials`` with the
    weights ``wb * trials`` per step (:func:`~._blocks.proportions`), through
    :func:`glm_stats_xp` in every namespace."""
    nb, blocks = (blocks[-1], blocks[:-1]) if trials else (None, blocks)
    xp, (coef, nb, yb, wb, *blocks) = align(coef, nb, yb, wb, *blocks)
    n_t = yb.shape[0]
    space = tuple(yb.shape[1:])
    p = len(order) + 1
    full, timef = split_fields(order, blocks)
    if nb is not None or not array_api_compat.is_numpy_namespace(xp):
        y, w = xp.reshape(yb, (n_t, -1)), xp.reshape(wb, (-1,))
        steps = None
        if nb is not None:
            y, steps = proportions(xp, y, xp.reshape(nb, (n_t, -1)))
        out = to_host(glm_stats_xp(
            xp, order, family, start, xp.reshape(coef, (-1, p)), y, w,
            [xp.reshape(b, (n_t, -1)) for b in full], list(timef), steps=steps,
        ))
        return out.reshape((1,) + space + (out.shape[1],))
    inputs = kernel_inputs(order, yb, wb, full, timef)
    cells = np.arange(inputs[4].shape[1])
    out = _stats_of_cells(family, start, np.asarray(coef, dtype=np.float64).reshape(-1, p), inputs, cells).T
    return out.reshape((1,) + space + (out.shape[1],))


def _stats_of_cells(family, start, coef, inputs, cells):
    """The Numba path of :func:`glm_stats`: the statistics ``(p*p + p + 6, k)`` of the
    cells ``cells`` (k,) of a block's :func:`~._pointwise.kernel_inputs` at their
    coefficients ``coef`` (k, p), read in place (no copy of the block's columns).
    Each cell's sums run over its own values in time order, so they do not depend on
    which other cells are computed with it."""
    from ._kernels import glm_acc_kernel, glm_eta_kernel

    n_t = inputs[4].shape[0]
    p = coef.shape[1]
    k = cells.size
    coefT = np.ascontiguousarray(coef.T)
    acc = np.zeros((n_stats(p), k))
    rows = min(n_t, max(1, ROWS_ELEMENTS // max(k, 1)))  # a few MiB of rows at a time
    # buffers reused for every piece: a worker's nanny sets MALLOC_TRIM_THRESHOLD_, so
    # each fresh MiB-sized temporary would be a new mmap and its page faults (2.8x slower)
    buf = np.empty((3, rows, k))
    scratch = np.empty((p + 4, k))
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for t0 in range(0, n_t, rows):
            n = min(rows, n_t - t0)
            eta, mu, aux = buf[0, :n], buf[1, :n], buf[2, :n]
            if start:
                ys = inputs[4][t0:t0 + n]
                _start_means(family, ys if k == ys.shape[1] else ys[:, cells], eta, mu, aux)
            else:
                glm_eta_kernel(*inputs[:4], cells, coefT, t0, eta)
                _means(family, eta, mu, aux)
            glm_acc_kernel(*inputs, cells, t0, eta, mu, aux, GLM_FAMILIES[family], bool(start), scratch, acc)
    for i in range(p):  # the Hessian's lower triangle from its upper one
        for j in range(i):
            acc[i * p + j] = acc[j * p + i]
    return acc


ROWS_ELEMENTS = 2**18  # the NumPy stage of :func:`glm_stats` works on this many values at a time
DENSE_SHARE = 0.5  # :func:`glm_stats_of_state` computes every cell of a chunk where this share of them iterates


def glm_stats_of_state(order, family, start, state, yb, wb, *blocks, trials=False):
    """:func:`glm_stats` at the points of a spatial chunk's ``state`` (``(*space,
    3p+5)``, see :func:`state_width`), computed for its cells still iterating only
    (NumPy blocks after the start): those cells read in place by their indices (no
    copy of their columns, which cost as much as the statistics), the others'
    statistics left at zero, as no pass reads them (:func:`newton_update` and
    :func:`_summary` use the statistics of the cells that were iterating).  Each
    cell's statistics are those :func:`glm_stats` gives it among all the cells, as
    every cell's sums run on its own values only; a pass late in the fit, when most
    cells have converged, costs what its cells still iterating cost.  While at least
    :data:`DENSE_SHARE` of the chunk's cells iterate, every cell is computed instead
    (the others' statistics then set to zero): a run of every cell is read in place
    in the kernel's fused loop, about twice as fast per cell as the gathered cells (a
    grid with land or converged cells scattered over it has no long runs)."""
    p = len(order) + 1
    coef = state[..., :p]
    active = state[..., 3 * p + 2] == ACTIVE
    numpy_blocks = all(type(b) is np.ndarray for b in (yb, wb, *blocks))
    if start or not numpy_blocks or active.all():
        return glm_stats(order, family, start, coef, yb, wb, *blocks, trials=trials)
    idx = np.flatnonzero(active.reshape(-1))
    if trials or idx.size >= DENSE_SHARE * active.size:  # all cells, the others' then cleared
        out = glm_stats(order, family, start, coef, yb, wb, *blocks, trials=trials)
        out.reshape(-1, n_stats(p))[~active.reshape(-1)] = 0.0
        return out
    out = np.zeros((1,) + tuple(yb.shape[1:]) + (n_stats(p),))
    if idx.size:
        full, timef = split_fields(order, blocks)
        inputs = kernel_inputs(order, yb, wb, full, timef)
        stats = _stats_of_cells(family, False, coef.reshape(-1, p)[idx], inputs, idx)
        out.reshape(-1, n_stats(p))[idx] = stats.T
    return out


def _means(family, eta, mu, aux):
    """What :func:`~._kernels.glm_acc_kernel` needs of a linear predictor, in place
    (NumPy's vectorised ``exp``/``log1p``): Poisson's mean ``mu``; binomial's ``mu =
    e^-|eta|`` (the kernel makes the mean of it) and ``aux = log(1 + e^-|eta|)`` for
    the deviance."""
    if family == "poisson":
        np.clip(eta, -700.0, 700.0, out=mu)
        np.exp(mu, out=mu)
        return
    np.abs(eta, out=mu)
    np.negative(mu, out=mu)
    np.exp(mu, out=mu)  # e^-|eta| in (0, 1]
    np.log1p(mu, out=aux)


def _start_means(family, y, eta, mu, aux):
    """R's IRLS start from the data, in place: ``mu = y + 0.1`` (binomial ``(y + 1/2)
    / 2``; values out of range clipped, they are refused anyway), ``eta`` its link and
    ``aux`` the deviance's constant part of each value.  NumPy's vectorised ``log``
    throughout (scipy's ``xlogy`` took as long as a whole Newton pass here); binomial
    0/1 outcomes, whose constant is 0, skip it (its two ``log`` passes took a sixth of
    a whole binomial fit on 34,560 cells).  Values where the target is NaN are left as
    they come out (NaN, or 0 on that shortcut): masked, the kernel does not read them."""
    if family == "poisson":
        yc = np.maximum(y, 0.0)
        np.add(yc, 0.1, out=mu)
        np.log(mu, out=eta)
        _xlogx_into(yc, aux)  # 2 (y log y - y)
        aux -= yc
        aux *= 2.0
        return
    yc = np.clip(y, 0.0, 1.0)
    np.add(yc, 0.5, out=mu)
    np.divide(mu, 2.0, out=mu)
    np.subtract(1.0, mu, out=eta)
    np.divide(mu, eta, out=eta)
    np.log(eta, out=eta)
    if not np.any((yc > 0.0) & (yc < 1.0)):  # 0/1 outcomes (or NaN, masked): the constant is 0 (+0.0, as below)
        aux[...] = 0.0
        return
    _xlogx_into(yc, aux)  # 2 (y log y + (1 - y) log(1 - y))
    np.subtract(1.0, yc, out=yc)
    aux += _xlogx_into(yc, yc)
    aux *= 2.0


def _xlogx_into(v, out):
    """``v log v`` (0 at ``v = 0``; ``v >= 0``) into ``out`` (may be ``v``), NaN where
    ``v`` is NaN (a ufunc's ``where=`` is not vectorised: ``np.where`` is)."""
    logs = np.where(v > 0.0, v, 1.0)
    np.log(logs, out=logs)  # in place: one temporary, not two
    np.multiply(v, logs, out=out)
    return out


def _xlogx(xp, v):
    """``v log v`` with 0 at ``v = 0`` (``v >= 0``)."""
    pos = v > 0.0
    return xp.where(pos, v * xp.log(xp.where(pos, v, 1.0)), 0.0)


def glm_stats_xp(xp, order, family, start, coef, y, w, full, timef, steps=None):
    """The statistics of :func:`glm_stats` with the Array API functions of ``xp``:
    ``(cells, p*p + p + 6)`` on the device of ``y``; the inputs as in
    :func:`~._pointwise.cell_stats_xp`, ``coef`` (cells, p); ``steps`` (time, cells) or
    None: a factor of each step's weight (the binomial trials).  Equal to the kernel's
    up to rounding (the sums run in another order)."""
    n_t, n_c = y.shape
    dtype, device = y.dtype, array_api_compat.device(y)
    ok, wm, ym, A = masked_design(xp, order, y, w, full, timef)  # A: (cells, p, time)
    if steps is not None:
        wm = wm * steps
    p = A.shape[1]
    if start:  # IRLS from the data (see the kernel)
        if family == "poisson":
            bad = ok & (ym < 0.0)
            mu = xp.where(ym > 0.0, ym, 0.0) + 0.1
            eta = xp.log(mu)
            var = mu
        else:
            bad = ok & ((ym < 0.0) | (ym > 1.0))
            mu = (xp.where(ym < 0.0, 0.0, xp.where(ym > 1.0, 1.0, ym)) + 0.5) / 2.0
            eta = xp.log(mu / (1.0 - mu))
            var = mu * (1.0 - mu)
        yc = xp.where(bad, 0.0, ym)
        ent = 2.0 * (_xlogx(xp, yc) - yc) if family == "poisson" else 2.0 * (_xlogx(xp, yc) + _xlogx(xp, 1.0 - yc))
        wr = wm * (var * eta + (ym - mu))
        d = xp.zeros_like(ym)
    else:
        eta = xp.permute_dims(xp.matmul(xp.reshape(coef, (n_c, 1, p)), A)[:, 0, :], (1, 0))  # (time, cells)
        eta = xp.where(ok, eta, 0.0)
        if family == "poisson":
            mu = xp.exp(xp.where(eta > 700.0, 700.0, xp.where(eta < -700.0, -700.0, eta)))
            var = mu
            bad = ok & (ym < 0.0)
            d = 2.0 * (xp.where(eta > 700.0, xp.inf, mu) - ym * eta)
        else:
            q = xp.exp(-xp.abs(eta))
            mu = xp.where(eta >= 0.0, 1.0 / (1.0 + q), q / (1.0 + q))
            var = mu * (1.0 - mu)
            bad = ok & ((ym < 0.0) | (ym > 1.0))
            d = 2.0 * (xp.where(eta > 0.0, eta, 0.0) + xp.log1p(q) - ym * eta)
        wr = wm * (ym - mu)
    wv = wm * var
    Aw = A * xp.reshape(xp.permute_dims(wv, (1, 0)), (n_c, 1, n_t))
    hess = xp.matmul(Aw, xp.matrix_transpose(A))
    i = xp.arange(p, device=device)
    upper = xp.reshape(i, (p, 1)) <= xp.reshape(i, (1, p))
    hess = xp.where(upper, hess, xp.matrix_transpose(hess))
    score = xp.matmul(A, xp.reshape(xp.permute_dims(wr, (1, 0)), (n_c, n_t, 1)))
    tail = [xp.sum(xp.where(ok & ~bad, wm * d, 0.0), axis=0), xp.sum(wm, axis=0), xp.sum(xp.astype(ok, dtype), axis=0),
            xp.sum(wm * ym, axis=0), xp.sum(xp.astype(bad, dtype), axis=0)]
    tail.append(xp.sum(xp.where(ok & ~bad, wm * ent, 0.0), axis=0) if start else xp.zeros_like(tail[0]))
    tail[0] = tail[0] if not start else xp.zeros_like(tail[0])
    return xp.concat([xp.reshape(hess, (n_c, p * p)), xp.reshape(score, (n_c, p)), xp.stack(tail, axis=1)], axis=1)


# ------------------------------------------------------------------ the state
def state_width(p):
    """Columns of a cell's state: the point to evaluate (p), the last accepted point
    (p), the Newton step from it (p), its objective, the step length, the status, the
    number of unmasked steps and the deviance's constant."""
    return 3 * p + 5


def initial_state(wb, p):
    """The state of a spatial chunk before the first pass (``wb``: its cell weights,
    for the shape): zero coefficients, nothing accepted, active."""
    out = np.zeros(tuple(wb.shape) + (state_width(p),))
    out[..., 3 * p] = np.inf
    out[..., 3 * p + 1] = 1.0
    out[..., 3 * p + 2] = ACTIVE
    return out


def _newton_steps(H, g, beta, alpha):
    """The Newton steps ``(H + alpha P)^-1 (g - alpha P beta)`` of a batch of cells
    (``P`` the identity without the intercept); minimum-norm steps (``lstsq``) for
    cells whose system is singular or ill-conditioned."""
    p = H.shape[-1]
    pen = np.eye(p)
    pen[0, 0] = 0.0
    M = H + alpha * pen
    rhs = g - alpha * beta * np.diag(pen)
    return solve_spd(M, rhs, 1e-12)


def newton_update(state, stats, p, family, alpha, tol, first):
    """One pass's update of a spatial chunk's cells (NumPy, on the chunk's worker):
    ``state`` (*space, 3p+5) and the summed ``stats`` (*space, p*p+p+6) at the state's
    points; returns the new state.

    ``first``: the statistics are those of the start (see
    :func:`~._kernels.glm_acc_kernel`): the first IRLS step is solved from them,
    cells without data are set to NaN and cells whose target stays at an edge of the
    range to their infinite intercept."""
    shape = state.shape
    s = stats.reshape(-1, stats.shape[-1])
    out = state.reshape(-1, shape[-1]).copy()
    beta, acc, step = out[:, :p], out[:, p:2 * p], out[:, 2 * p:3 * p]
    f_acc, length, status = out[:, 3 * p], out[:, 3 * p + 1], out[:, 3 * p + 2]
    H = s[:, : p * p].reshape(-1, p, p)
    g = s[:, p * p : p * p + p]
    dev, sw, count, swy = s[:, p * p + p], s[:, p * p + p + 1], s[:, p * p + p + 2], s[:, p * p + p + 3]
    if first:
        out[:, 3 * p + 3] = count
        out[:, 3 * p + 4] = s[:, -1]
        nodata = count == 0
        status[nodata] = NO_DATA
        beta[nodata] = np.nan
        low = ~nodata & (swy == 0.0)
        high = ~nodata & (swy == sw) if family == "binomial" else np.zeros_like(low)
        for cells, sign in ((low, -1.0), (high, 1.0)):
            beta[cells] = 0.0
            beta[cells, 0] = sign * np.inf
            status[cells] = EDGE
        start = np.flatnonzero(status == ACTIVE)
        if start.size:
            beta[start] = _newton_steps(H[start], g[start], np.zeros((start.size, p)), alpha)
            acc[start] = beta[start]
        return out.reshape(shape)
    act = status == ACTIVE
    if not act.any():
        return out.reshape(shape)
    b = beta[act]
    f = 0.5 * (dev[act] + out[act, 3 * p + 4]) + 0.5 * alpha * np.sum(b[:, 1:] ** 2, axis=1)
    fa = f_acc[act]
    with np.errstate(invalid="ignore"):
        accept = np.isfinite(f) & no_increase(f, fa)
    idx = np.flatnonzero(act)
    # rejected: halve the step from the last accepted point; after MAX_HALVINGS, stay there
    rej = idx[~accept]
    if rej.size:
        length[rej] *= 0.5
        stuck = rej[length[rej] < 0.5**MAX_HALVINGS]
        beta[rej] = acc[rej] + length[rej, None] * step[rej]
        beta[stuck] = acc[stuck]
        status[stuck] = CONVERGED
    ok = idx[accept]
    if ok.size:
        d = _newton_steps(H[ok], g[ok], beta[ok], alpha)
        fo, fn = f_acc[ok], f[accept]
        with np.errstate(invalid="ignore"):
            small = _max_abs(d) <= tol * np.maximum(1.0, _max_abs(beta[ok]))
            flat = np.isfinite(fo) & (fo - fn <= tol * tol * (np.abs(fn) + 0.1))
        acc[ok] = beta[ok]
        f_acc[ok] = fn
        step[ok] = d
        length[ok] = 1.0
        beta[ok] = beta[ok] + d
        status[ok[small | flat]] = CONVERGED
    return out.reshape(shape)


def _max_abs(a):
    """``np.max(np.abs(a), axis=1)`` column by column (NaN propagates as there): a
    reduction over a short last axis runs element by element, 10x slower here."""
    out = np.abs(a[:, 0])
    for j in range(1, a.shape[1]):
        np.maximum(out, np.abs(a[:, j]), out=out)
    return out


def final_coef(state, p):
    """``(*space, p)`` coefficients of a state: the converged point, or the last
    accepted one of a cell still iterating."""
    beta, acc, status = state[..., :p], state[..., p:2 * p], state[..., 3 * p + 2]
    return np.where((status == ACTIVE)[..., None], acc, beta)


#: Columns of a spatial chunk's pass summary (:func:`_summary`), the driver's only view of its cells.
SUMMARY = ("active", "bad", "data", "objective", "grad_norm", "rows")


def _summary(old, state, stats, p, alpha, first):
    """``(1,)*k + (6,)``: the chunk's cells still iterating, its unmasked targets
    outside the family's range (first pass), its cells with data, the objective summed
    over its cells at their last accepted points (those with one), the largest
    Euclidean norm of a cell's gradient at the point this pass evaluated (cells that
    were iterating; 0 on the first pass, which evaluates no coefficients) and the
    unmasked rows of the cells it evaluated.  ``old``: the state before the pass, ``state`` after it."""
    active = np.sum(state[..., 3 * p + 2] == ACTIVE)
    bad = np.sum(stats[..., -2]) if first else 0.0
    data = np.sum(state[..., 3 * p + 3] > 0)
    f_acc = state[..., 3 * p]
    objective = np.sum(f_acc[np.isfinite(f_acc)])
    grad, rows = 0.0, 0.0
    if first:  # the start reads every cell's rows
        rows = np.sum(state[..., 3 * p + 3])
    else:
        evaluated = old[..., 3 * p + 2] == ACTIVE
        if evaluated.any():
            beta = old[..., :p][evaluated]  # the columns first: the rows copied are p wide
            score = stats[..., p * p : p * p + p][evaluated]
            # the gradient of D/2 + alpha/2 |slopes|^2 is -(score - alpha * slopes)
            gradient = score.copy()
            gradient[:, 1:] -= alpha * beta[:, 1:]
            with np.errstate(invalid="ignore", over="ignore"):
                grad = float(np.fmax.reduce(np.linalg.norm(gradient, axis=1)))  # NaN only if every one is
            rows = np.sum(old[..., 3 * p + 3][evaluated])
    out = np.array([active, bad, data, objective, grad, rows], dtype=np.float64)
    return out.reshape((1,) * (state.ndim - 1) + (len(SUMMARY),))


# ------------------------------------------------------------------ the solver
@dataclass
class _Context:
    """What the one driver loop asks of a per-cell fit's context: its monitor.  The
    passes are dask graphs, not steps of a shard set's step source, and they keep no
    checkpoint, so the loop needs nothing else here."""

    monitor: Monitor


class CellNewton(Solver):
    """The per-cell Newton passes as a solver of the one driver loop
    (:class:`~dask_dgd._engine.loop.Loop`).

    Its state is every cell's (coefficients, last accepted point, step, objective,
    status), one array per spatial chunk, persisted on the cluster between passes
    (:func:`state_width`); a step is one pass over the data for the spatial chunks
    with a cell still iterating (:func:`glm_stats`, the time-axis tree sum,
    :func:`newton_update`), the start the IRLS step from the data.  Each pass gives one
    record: ``loss`` the objective summed over the cells at their last accepted points
    (NaN after the start, which evaluates no coefficients), ``grad_norm`` the largest
    Euclidean norm of a cell's gradient at the point the pass evaluated,
    ``step_size`` None (Newton steps, halved per cell), ``cells_iterating`` the cells
    not converged yet.  Its own stop rule: every cell converged; ``max_iter`` (passes,
    the start included), ``max_time`` and the callbacks are the loop's
    :class:`~dask_dgd._engine.stopping.StopRules`.

    Parameters
    ----------
    fields : Fields
    family : {"poisson", "binomial"}
    alpha, tol : float
    split_every : int
        Fan-in of the time-axis reduction.
    client : distributed.Client or None
        The cluster whose memory holds the state (None: dask's default scheduler).
    target : str
        The target's name, for the messages.
    """

    def __init__(self, fields, family, alpha, tol, split_every, client, target):
        self.p = fields.p + 1
        self.family, self.alpha, self.tol = family, float(alpha), float(tol)
        self.split_every, self.client, self.target = split_every, client, target
        self.index = "t" + "abcdefgh"[: fields.weight.ndim]
        if fields.in_process:  # one NumPy block: the passes call the block functions directly
            space_nb = (1,) * fields.weight.ndim
            self.fields = fields
            self.state = initial_state(fields.weight, self.p)
        else:
            space_nb = fields.weight.numblocks
            self.fields = _cached(fields, client)
            self.state = fields.weight.map_blocks(initial_state, self.p, new_axis=fields.weight.ndim,
                                                  chunks=fields.weight.chunks + ((state_width(self.p),),),
                                                  dtype=np.float64)
        self.active = dict.fromkeys(np.ndindex(*space_nb), True)
        self.objective = np.zeros(space_nb)  # each chunk's objective sum, kept when its cells stop
        self.passes = 0
        self.count = self.left = None  # (*space,) rows per cell, cells still iterating: set by result()

    @property
    def iterations(self):
        return self.passes

    @property
    def progress(self):
        return self.passes

    def start(self):
        return self._pass(first=True)

    def step(self):
        return self._pass(first=False)

    def stop_rule(self, outcome):
        return None if any(self.active.values()) else Stop(True, "every cell converged")

    def _pass(self, first):
        """One pass: the statistics at the cells' points, their Newton update, the record."""
        t0 = time.perf_counter()
        if self.fields.in_process:
            counts = self._pass_in_process(first)
        else:
            counts = self._pass_lazily(first)
        self.passes += 1
        if first:
            self._check_start(counts)
        evaluated = sum(self.active.values())
        for idx in list(self.active):
            if self.active[idx]:
                self.objective[idx] = counts[idx][3]
                self.active[idx] = counts[idx][0] > 0
        record = make_record(
            step=self.passes, iteration=self.passes, loss=math.nan if first else float(np.sum(self.objective)),
            grad_norm=math.nan if first else float(np.fmax.reduce(counts[..., 4], axis=None)), step_size=None,
            timing=Timing(time.perf_counter() - t0, None, None), n_samples=float(np.sum(counts[..., 5])),
            updates_per_group=(1,) * evaluated, nbytes=Bytes(counts.nbytes, counts.nbytes, 0),
            cells_iterating=int(np.sum(counts[..., 0])),
        )
        return Outcome([record])

    def _pass_in_process(self, first):
        """One pass over a grid that is one NumPy block: the statistics, update and
        summary of :meth:`_pass_lazily`'s graph, called directly (its time-axis sum
        over one block is that block: the same values)."""
        p, fields = self.p, self.fields
        extra = () if fields.trials is None else (fields.trials,)
        stats = glm_stats_of_state(fields.order, self.family, first, self.state, fields.y, fields.weight,
                                   *fields.full, *fields.time, *extra, trials=bool(extra))[0]
        new = newton_update(self.state, stats, p, self.family, self.alpha, self.tol, first)
        counts = _summary(self.state, new, stats, p, self.alpha, first)
        self.state = new
        return counts

    def _pass_lazily(self, first):
        """One pass as a dask graph: the new state persisted, the chunks' summaries
        computed (:func:`_summary`)."""
        p, index, fields = self.p, self.index, self.fields
        space_nb = fields.weight.numblocks
        stats = da.blockwise(
            glm_stats_of_state, index + "s", fields.order, None, self.family, None, first, None, self.state,
            index[1:] + "p", *fields.blockwise_args(index),
            *(() if fields.trials is None else (fields.trials, index)), trials=fields.trials is not None,
            new_axes={"s": n_stats(p)},
            adjust_chunks={"t": lambda n: 1}, concatenate=True, dtype=np.float64,
            meta=np.empty((0,) * (len(index) + 1)),
        )
        total = stats.sum(axis=0, split_every=self.split_every)
        new = da.map_blocks(newton_update, self.state, total, p, self.family, self.alpha, self.tol, first,
                            dtype=np.float64, chunks=self.state.chunks)
        summary = da.map_blocks(_summary, self.state, new, total, p, self.alpha, first, dtype=np.float64,
                                chunks=tuple((1,) * n for n in space_nb) + ((len(SUMMARY),),))
        state = _select(new, self.state, self.active)
        summary = _select(summary, None, self.active)
        self.state, counts = _persist_and_count(state, summary, self.client)
        return counts

    def _check_start(self, counts):
        """The start pass's input checks: targets in the family's range, some data."""
        if counts[..., 1].sum() > 0:
            n_bad = int(counts[..., 1].sum())
            need = "counts >= 0" if self.family == "poisson" else "values in [0, 1] (0/1 outcomes or proportions)"
            raise InputError(
                f"family={self.family!r} needs {need} as the target: {n_bad} unmasked value(s) of {self.target!r} "
                "are outside that range"
            )
        if counts[..., 2].sum() == 0:
            raise InputError(
                f"every cell of {self.target!r} or its features is masked (NaN) or has zero weight: nothing to fit"
            )

    def result(self):
        """``(coef (*space, p), passes, None, None)`` (no optimizer); the cells' rows and
        which cells are still iterating are kept as ``count`` and ``left``."""
        p, state = self.p, self.state
        if self.fields.in_process:
            self.count, self.left = state[..., 3 * p + 3], state[..., 3 * p + 2] == ACTIVE
            self.step = state[..., 2 * p:3 * p]
            return final_coef(state, p), self.passes, None, None
        final = state.map_blocks(final_coef, p, chunks=state.chunks[:-1] + ((p,),), dtype=np.float64)
        coef, self.count, self.left, self.step = _gather(self.client, final, state[..., 3 * p + 3],
                                                         state[..., 3 * p + 2] == ACTIVE, state[..., 2 * p:3 * p])
        return coef, self.passes, None, None


# ------------------------------------------------------------------- the fit
def fit_cells(fields, family, alpha, tol, max_iter, split_every, client, target, *, max_time=None, callbacks=(),
              verbose=0, desc="pointwise GLM", separation=False):
    """Fit the per-cell models of ``fields`` (a :class:`~._design.Fields`) with
    :class:`CellNewton` in the one driver loop: returns ``(coef (*space, p), count
    (*space,), passes, records, separated)``, the arrays NumPy; ``passes`` counts the passes over
    the data, the start's IRLS step included (at most ``max_iter``); ``records`` is a
    list of one record (dict) per pass (see :class:`CellNewton`), the rows of the
    estimator's ``history_`` (a DataFrame made when first asked for: on a small grid
    it took a tenth of the fit).

    ``client``: a distributed Client or None (then dask's default scheduler);
    ``max_time``: seconds after which the fit stops (the cells still iterating keep
    their last accepted coefficients, with a warning); ``callbacks``: called with every
    record, one returning True stops the fit; ``verbose``, ``desc``: the progress bar
    (:class:`~dask_dgd._engine.runtime.monitor.Monitor`); ``separation``: find the
    separated cells (:func:`find_separated`, on the inputs the passes kept in memory)
    as ``separated`` (*space,) bool, else None."""
    monitor = Monitor(verbose=verbose, callbacks=callbacks, total=int(max_iter), desc=desc,
                      capped=tol > 0 or max_time is not None)
    status, message = "error", ""
    try:
        # the live page, on a distributed client (dask config dgd.dashboard); its passes
        # are tasks on every worker: the page samples them all
        workers = list(client.scheduler_info()["workers"]) if hasattr(client, "scheduler_info") else []
        monitor.publish(client, estimator=desc, mode="sync", max_iter=int(max_iter), workers=workers)
        fields, refs = _centred(fields, client)
        solver = CellNewton(fields, family, alpha, tol, split_every, client, target)
        stop = Loop(_Context(monitor), solver, StopRules(monitor, int(max_iter), max_time)).run()
        status, message = ("stopped" if monitor.stop_requested else "done"), stop.message
        coef, passes, _, _ = solver.result()
        monitor.finish(passes)
    except BaseException as err:
        status, message = ("stopped" if isinstance(err, KeyboardInterrupt) else "error"), f"{type(err).__name__}: {err}"
        raise
    finally:
        monitor.close(status, message)
    count, left = solver.count, solver.left
    n_left = int(left.sum())
    if n_left and not stop.converged:
        why = (f"in max_iter={max_iter} Newton passes" if stop.message.startswith("reached max_iter")
               else f"({stop.message})")
        warnings.warn(
            f"{n_left} of {int((count > 0).sum())} grid cells did not converge {why} (their coefficients are the "
            "last accepted ones); cells whose target is separated by the features have no finite fit: pass "
            "alpha > 0, or raise max_iter",
            ConvergenceWarning, stacklevel=user_stacklevel(),
        )
    separated = None
    if separation:
        separated = find_separated(solver.fields, family, coef, client, split_every, solver.step, solver.left)
    coef = coef.copy()
    coef[..., 0] -= np.einsum("...f,...f->...", np.nan_to_num(coef[..., 1:]), refs)  # the features' own origin
    return coef, count, passes, list(monitor.records), separated


def _centred(fields, client):
    """``fields`` with every feature less a reference of its own (in each cell for a
    grid field, one for a field of time only: the mean of its finite values over the
    grid's first time chunk, over all of it for a field of time only; 0 where there is
    none), and the references ``(*space, p - 1)``.

    The cells' Newton systems are then those of features near 0, as for the least
    squares of :func:`~._pointwise.cell_stats`: a feature whose spread is small next
    to its mean (a pressure of 101,325 Pa varying by 0.1 Pa) keeps its slope, where
    the raw design's Gram matrix (condition number about ``(mean / spread)^2``) lost
    it.  Only the intercept changes: ``b0 - b . reference`` in the features' own
    origin (:func:`fit_cells` converts it back).  One read of the first time chunk."""
    import copy

    n0 = fields.grid_chunks[0][0]
    space = tuple(fields.weight.shape)
    sums = [f[:n0] for f in fields.full] + list(fields.time)
    lazy = [a.map_blocks(_finite_sums, dtype=np.float64, chunks=((2,) * a.numblocks[0],) + a.chunks[1:],
                         meta=np.empty((0,) * a.ndim)) for a in sums if isinstance(a, da.Array)]
    done = iter(_gather(client, *lazy) if lazy else ())
    refs = []
    for a in sums:
        s = np.asarray(next(done)) if isinstance(a, da.Array) else _finite_sums(a)
        total, n = s.reshape((-1, 2) + s.shape[1:]).sum(axis=0)
        refs.append(total / np.maximum(n, 1))
    out = copy.copy(fields)
    n_full = len(fields.full)
    out.full = [_minus(f, r) for f, r in zip(fields.full, refs[:n_full])]
    out.time = [_minus(t, r) for t, r in zip(fields.time, refs[n_full:])]
    by_column = [refs[i] if kind == 0 else refs[n_full + i] for kind, i in fields.order]
    return out, np.stack([np.broadcast_to(np.asarray(r, dtype=np.float64), space) for r in by_column], axis=-1) \
        if by_column else np.zeros(space + (0,))


def _finite_sums(block):
    """The sum of the finite values of ``block`` along its first axis and their number:
    ``(2, *rest)``, NumPy."""
    xp, (block,) = align(block)
    ok = xp.isfinite(block)
    return np.stack([np.asarray(to_host(xp.sum(xp.where(ok, block, 0.0), axis=0))),
                     np.asarray(to_host(xp.sum(xp.astype(ok, block.dtype), axis=0)))])


def _minus(a, ref):
    """``a - ref`` (``ref`` NumPy, moved to the device of ``a``'s blocks), lazily for a
    dask array."""
    if isinstance(a, da.Array):
        if a.ndim == 1:  # a field of time only: one number
            return a.map_blocks(_block_minus, float(ref), dtype=a.dtype)
        ref = da.from_array(np.asarray(ref, dtype=np.float64)[None], chunks=((1,),) + a.chunks[1:])
        return da.map_blocks(_block_minus, a, ref, dtype=a.dtype)
    return _block_minus(a, ref)


def _block_minus(block, ref):
    xp, (block, ref) = align(block, np.asarray(ref, dtype=np.float64))
    return block - ref


CACHE_SHARE = 0.25  # the inputs are kept in memory between passes when they fill at most this share of it


def _cached(fields, client):
    """``fields`` with its arrays (target, features, lags) persisted when they fit in a
    quarter of the memory at hand, so that the Newton passes after the first do not
    read the store again (each pass reads every block; reading and decompressing a
    Zarr store took about as long as the pass's computation in the benchmark).  At
    hand: the workers' memory limits summed (a distributed cluster; workers without a
    limit: no cache), or this process's available memory (dask's local scheduler).
    Otherwise, and for blocks on a device (CuPy: GPU memory is not measured),
    ``fields`` as it is, read again each pass (then the memory a fit holds stays a few
    blocks per worker)."""
    import copy

    import dask

    arrays = [a for a in [fields.y, fields.trials, *fields.full] if a is not None]
    nbytes = sum(a.nbytes for a in arrays)
    if not all(array_api_compat.is_numpy_array(a._meta) for a in arrays):
        return fields  # blocks on a device (CuPy): its memory is not the workers' limit; read each pass
    if client is not None:
        from .._engine.data.memory import worker_memory_limits

        limits = list(worker_memory_limits(client).values())
        room = sum(limits) if limits and all(limits) else 0
    else:
        import psutil

        room = psutil.virtual_memory().available
    if not nbytes or nbytes > CACHE_SHARE * room:
        return fields
    kept = client.persist(arrays) if client is not None else list(dask.persist(*arrays))
    out = copy.copy(fields)
    for name in ("y", "trials"):
        if getattr(fields, name) is not None:
            setattr(out, name, kept.pop(0))
    out.full = kept
    return out


def _select(new, old, active):
    """The blocks of ``new`` for the active spatial chunks and of ``old`` for the others
    (``old=None``: only the active ones are needed, the others' summary is zeros)."""
    def block(idx):
        if active[idx]:
            return new.blocks[idx]
        if old is not None:
            return old.blocks[idx]
        shape = tuple(c[i] for c, i in zip(new.chunks, idx + (0,)))
        return da.zeros(shape, chunks=shape, dtype=new.dtype)

    def nest(prefix):
        if len(prefix) == len(new.numblocks) - 1:
            return [block(tuple(prefix))]
        return [nest(prefix + [i]) for i in range(new.numblocks[len(prefix)])]

    return da.block(nest([]))


def _persist_and_count(state, summary, client):
    """The new state persisted (on the cluster: it stays with the workers) and the
    small per-chunk summary computed from the same pass."""
    if client is not None:
        state, summary = client.persist([state, summary])
        return state, client.compute(summary).result()
    import dask

    state, summary = dask.persist(state, summary)
    return state, summary.compute()


def _gather(client, *arrays):
    if client is not None:
        return tuple(client.gather(client.compute(list(arrays))))
    import dask

    return dask.compute(*arrays)


# ------------------------------------------------------------ separated cells
#: The screen of :func:`find_separated`: a cell whose fitted linear predictor reaches this
#: far out on an observed step (binomial ``|eta|``, fitted probability within 3.4e-4 of 0
#: or 1; poisson ``-eta``, fitted mean below 3.4e-4) is tested for separation.
SCREEN_ETA = 8.0


def edge_block(order, family, coef, yb, wb, *blocks, trials=False):
    """``(1, *space)``: per cell of a block, the largest ``|eta|`` (binomial) or
    ``-eta`` (poisson) over its observed steps (target, weight and features finite,
    weight > 0) at the cells' coefficients ``coef`` (``(*space, p)``, NumPy); ``-inf``
    for a cell without one (or with an infinite intercept).  NumPy blocks: the Newton
    passes' Numba kernel for ``eta``, a few MiB of rows at a time; others in their
    namespace, one feature at a time; the result on the host.  ``trials=True``: the
    last of ``blocks`` is the trials."""
    nb, blocks = (blocks[-1], blocks[:-1]) if trials else (None, blocks)
    xp, (coef, nb, yb, wb, *blocks) = align(coef, nb, yb, wb, *blocks)
    if nb is not None:
        yb, _ = proportions(xp, yb, nb)
    shape = tuple(yb.shape)
    n_t = shape[0]
    full, timef = split_fields(order, blocks)
    p = len(order) + 1
    if array_api_compat.is_numpy_namespace(xp):
        from ._kernels import glm_eta_kernel

        inputs = kernel_inputs(order, yb, wb, full, timef)
        k = inputs[4].shape[1]
        cells = np.arange(k)
        coefT = np.ascontiguousarray(np.asarray(coef, dtype=np.float64).reshape(-1, p).T)
        out = np.full(k, -np.inf)
        rows = min(n_t, max(1, ROWS_ELEMENTS // max(k, 1)))
        eta = np.empty((rows, k))
        live = inputs[5] > 0.0
        with np.errstate(invalid="ignore"):
            for t0 in range(0, n_t, rows):
                n = min(rows, n_t - t0)
                e = eta[:n]
                glm_eta_kernel(*inputs[:4], cells, coefT, t0, e)
                far = np.abs(e) if family == "binomial" else np.negative(e)
                ok = np.isfinite(inputs[4][t0:t0 + n]) & live & np.isfinite(e)
                np.fmax(out, np.max(np.where(ok, far, -np.inf), axis=0), out=out)
        return out.reshape((1,) + shape[1:])
    c = xp.reshape(coef, (-1, p))
    eta = xp.broadcast_to(xp.reshape(c[:, 0], (1, -1)), (n_t, c.shape[0]))
    for f, (kind, pos) in enumerate(order):
        x = xp.reshape(full[pos], (n_t, -1)) if kind == 0 else xp.reshape(timef[pos], (n_t, 1))
        eta = eta + x * xp.reshape(c[:, f + 1], (1, -1))
    ok = xp.isfinite(xp.reshape(yb, (n_t, -1))) & xp.reshape(wb > 0.0, (1, -1)) & xp.isfinite(eta)
    far = xp.abs(eta) if family == "binomial" else -eta
    return to_host(xp.max(xp.where(ok, far, -xp.inf), axis=0)).reshape((1,) + shape[1:])


#: A cell whose last Newton step moved its linear predictor by more than this on an observed
#: step is "still moving" (a separated cell's moves it by about 1 per pass, whatever the
#: features' units; a converged finite fit's by far less).
STEP_ETA = 0.1


def find_separated(fields, family, coef, client, split_every, step=None, active=None):
    """The cells of a fit (``coef`` ``(*space, p)``, finite for the cells fitted) whose
    maximum-likelihood estimate does not exist, as a boolean array ``(*space,)``.

    Two stages.  A screen, in one pass over the data (:func:`edge_block`): the cells
    whose last Newton step ``step`` (``(*space, p)``) moved the linear predictor of an
    observed step by more than :data:`STEP_ETA` (a separated cell's step moves it by
    about 1 per pass whatever the features' units, while a converged finite fit's
    last step is quadratically small; a step criterion in coefficient units would
    miss separated cells whose features are large, or at a loose ``tol``), or still
    iterating (``active``), with an observed step
    whose fitted linear predictor is beyond :data:`SCREEN_ETA` (where a separated
    cell's fit goes; a rare-event cell with a finite estimate can go there too, but
    its last step is small).  Then the exact test of those cells alone on their own
    series (:func:`mle_missing`, a linear programme), so no cell with a finite
    estimate is reported however far out its fit is.  ``step=None``: the first
    screen is skipped."""
    p = coef.shape[-1]
    extra = () if fields.trials is None else (fields.trials,)
    tables = [coef] + ([] if step is None else [np.nan_to_num(step, nan=0.0)])
    kinds = [family, "binomial"]  # the step's move of the linear predictor: max |x . step| ("binomial": |eta|)
    if fields.in_process:
        screens = [edge_block(fields.order, kind, t, fields.y, fields.weight, *fields.full, *fields.time, *extra,
                              trials=bool(extra))[0] for kind, t in zip(kinds, tables)]
    else:
        index = "t" + "abcdefgh"[: fields.weight.ndim]
        lazy = []
        for kind, t in zip(kinds, tables):
            t_da = da.from_array(t, chunks=fields.grid_chunks[1:] + ((p,),))
            lazy.append(da.blockwise(
                edge_block, index, fields.order, None, kind, None, t_da, index[1:] + "p",
                *fields.blockwise_args(index), *(() if fields.trials is None else (fields.trials, index)),
                trials=fields.trials is not None, adjust_chunks={"t": lambda n: 1}, concatenate=True,
                dtype=np.float64, meta=np.empty((0,) * len(index)),
            ).max(axis=0, split_every=split_every))
        screens = list(_gather(client, *lazy))
    screen = screens[0]
    moving = True if step is None else (screens[1] > STEP_ETA) | (False if active is None else active)
    if step is not None:  # a fit stopped early (loose tol) leaves a separated cell short of SCREEN_ETA, moving by ~1
        screen = np.where(screens[1] > 1.0, np.inf, screen)
    fitted = np.all(np.isfinite(coef), axis=-1)
    out = np.zeros(coef.shape[:-1], dtype=bool)
    candidates = fitted & (screen > SCREEN_ETA) & moving
    cells = [tuple(int(i) for i in c) for c in np.argwhere(candidates)]
    for cell, (X, y) in zip(cells, _cell_series(fields, cells, client)):
        out[cell] = mle_missing(X, y, family)
    return out


def _cell_series(fields, cells, client):
    """``(X, y)`` of each cell of ``cells`` (index tuples on the spatial grid): its
    observed steps' design ``[1, x]`` (n, p) and target (proportions with trials),
    NumPy."""
    if not cells:
        return []
    arrays = [fields.y] + list(fields.full) + ([] if fields.trials is None else [fields.trials])
    picked = [[a[(slice(None),) + c] for a in arrays] for c in cells]
    timef = list(fields.time)
    if not fields.in_process:  # one computation for every cell's series, its blocks brought to the host first
        host = [a.map_blocks(to_host, dtype=np.float64, meta=np.empty((0,) * a.ndim))
                for a in [a for series in picked for a in series] + timef]
        flat = _gather(client, *host)
        k = len(arrays)
        picked = [flat[i * k:(i + 1) * k] for i in range(len(cells))]
        timef = list(flat[len(cells) * k:])
    out = []
    for series in picked:
        y = np.asarray(series[0], dtype=np.float64)
        if fields.trials is not None:
            y, _ = proportions(np, y, np.asarray(series[-1], dtype=np.float64))
        cols = [np.ones_like(y)] + [np.asarray(series[1 + pos] if kind == 0 else timef[pos], dtype=np.float64)
                                     for kind, pos in fields.order]
        X = np.stack(cols, axis=1)
        ok = np.isfinite(y) & np.all(np.isfinite(X), axis=1)  # the screen passed only cells of weight > 0
        out.append((X[ok], y[ok]))
    return out
