"""The design matrix's block functions: they run on the workers, one grid block each.

Each works in the array namespace of its block (NumPy, CuPy or any Array API array;
see :mod:`._namespace`): the small NumPy inputs made on the driver (cell weights,
seasonal terms, gap masks) move onto the block's device inside the task.
"""

import math

import array_api_compat

from ._namespace import align

__all__ = ["block_features", "design_block", "mask_block", "proportions", "shift_block", "split_fields"]


def shift_block(n_pad, start, ok, *pieces):
    """One block of :func:`shifted`: ``n_pad`` rows of NaN, then rows ``start, start +
    1, ...`` of the source ``pieces`` (consecutive time blocks), NaN where ``ok`` (one
    bool per row, NumPy) is False."""
    xp, (ok, *pieces) = align(ok, *pieces)
    n = ok.shape[0]
    ref = pieces[0]
    parts = []
    if n_pad:
        parts.append(xp.full((n_pad,) + tuple(ref.shape[1:]), xp.nan, dtype=ref.dtype,
                             device=array_api_compat.device(ref)))
    if n > n_pad:
        rows = pieces[0] if len(pieces) == 1 else xp.concat(pieces, axis=0)
        parts.append(rows[start:start + n - n_pad, ...])
    out = parts[0] if len(parts) == 1 else xp.concat(parts, axis=0)
    return xp.where(xp.reshape(ok, (n,) + (1,) * (out.ndim - 1)), out, xp.nan)


def split_fields(order, blocks):
    n_full = sum(1 for kind, _ in order if kind == 0)
    return blocks[:n_full], blocks[n_full:]


def block_features(order, shape, blocks):
    """The design columns of one grid block, ``(rows, p)`` in C order over the block's
    (time, *space) cells; ``blocks`` are the full-field blocks then the time blocks
    (NumPy time blocks move to the device of the others)."""
    xp, blocks = align(*blocks)
    cells = math.prod(shape[1:])
    full, timef = split_fields(order, blocks)
    cols = [xp.reshape(full[pos], (-1,)) if kind == 0 else xp.repeat(timef[pos], cells) for kind, pos in order]
    return xp.stack(cols, axis=1)


def _keep(xp, order, yb, wb, blocks):
    """The unmasked cells of a block, ``(time, cells)``: finite target, weight > 0,
    every feature finite (arrays already on one device, see :func:`._namespace.align`)."""
    n_t = yb.shape[0]
    wcell = xp.reshape(wb, (1, -1))
    full, timef = split_fields(order, blocks)
    keep = xp.reshape(xp.isfinite(yb), (n_t, -1)) & xp.isfinite(wcell) & (wcell > 0)
    for b in full:
        keep = keep & xp.reshape(xp.isfinite(b), (n_t, -1))
    for b in timef:
        keep = keep & xp.reshape(xp.isfinite(b), (n_t, 1))
    return keep


def proportions(xp, yb, nb):
    """Successes ``yb`` out of ``nb`` binomial trials as ``(y / n, n)``: the proportion
    where ``n > 0``, NaN where ``n`` is 0 or not finite (masked, as a NaN target), and
    the trials with 0 there (a factor of the step's weight)."""
    live = xp.isfinite(nb) & (nb > 0.0)
    return xp.where(live, yb / xp.where(live, nb, 1.0), xp.nan), xp.where(live, nb, 0.0)


def design_block(order, yb, wb, *blocks, trials=False):
    """``[X | y | w]`` of the unmasked cells of a block (C order), gathered column by
    column straight from the fields (boolean masks, no index arithmetic), in the
    block's namespace and on its device.  ``trials=True``: the last of ``blocks`` is
    the block's binomial trials, ``yb`` counts of successes: ``y`` is then the
    proportion and ``w`` the cell weight times the trials (:func:`proportions`)."""
    nb, blocks = (blocks[-1], blocks[:-1]) if trials else (None, blocks)
    xp, (yb, nb, wb, *blocks) = align(yb, nb, wb, *blocks)
    if nb is not None:
        yb, nb = proportions(xp, yb, nb)
    keep = _keep(xp, order, yb, wb, blocks)
    n_t, cells = keep.shape
    keep = xp.reshape(keep, (-1,))
    full, timef = split_fields(order, blocks)
    cols = [xp.reshape(full[pos], (-1,))[keep] if kind == 0 else xp.repeat(timef[pos], cells)[keep]
            for kind, pos in order]
    cols.append(xp.reshape(yb, (-1,))[keep])
    w = xp.broadcast_to(xp.reshape(wb, (1, cells)), (n_t, cells))
    if nb is not None:
        w = w * xp.reshape(nb, (n_t, cells))
    cols.append(xp.reshape(w, (-1,))[keep])
    return xp.stack(cols, axis=1)


def mask_block(order, yb, wb, *blocks, trials=False):
    """The cells of a block kept in the design matrix (bool, the block's shape)."""
    nb, blocks = (blocks[-1], blocks[:-1]) if trials else (None, blocks)
    xp, (yb, nb, wb, *blocks) = align(yb, nb, wb, *blocks)
    if nb is not None:
        yb, _ = proportions(xp, yb, nb)
    return xp.reshape(_keep(xp, order, yb, wb, blocks), yb.shape)
