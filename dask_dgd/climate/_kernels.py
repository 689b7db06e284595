"""Per-cell least-squares statistics of a block in one pass (Numba, cached on disk).

For every grid cell of a (time chunk x spatial chunk) block: the weighted centred
cross-products of ``[x, y]``, their weighted means, ``sum w`` and the number of
unmasked time steps.  The loop runs over time outside and cells inside, so it reads the
block in memory order (about 2.4x faster than accumulating cell by cell, measured on a
500 x 2,500 block); a time step where the target, the weight or any feature is not
finite (or the weight is <= 0) adds nothing.

This is the path of NumPy blocks only: Numba compiles for the CPU.  Blocks of any other
array namespace (CuPy on a GPU, ``array_api_strict`` in the tests) get the same
statistics from ``_regressor.cell_stats_xp``, written with Array API functions (masks
and a batched ``matmul``) and run on the block's device.
"""

import numba
import numpy as np

__all__ = ["BINOMIAL", "POISSON", "cell_stats_kernel", "glm_acc_kernel", "glm_eta_kernel", "spd_solve_kernel"]


@numba.njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _time_values(timef, kind, pos, t, tv):  # pragma: no cover - compiled
    """The time-only features' values at step ``t`` into ``tv[1:]``; False when one is
    not finite (the whole step is then masked)."""
    for f in range(kind.shape[0]):
        if kind[f] == 1:
            tv[f + 1] = timef[pos[f], t]
            if not np.isfinite(tv[f + 1]):
                return False
    return True


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _load_step(full, timef, kind, pos, y, w, t, tv, wm, ym, xs):  # pragma: no cover - compiled
    """Time step ``t`` of a block into the buffers: ``wm`` the cells' weights (0 where
    the target, the weight or a grid feature is not finite), ``ym`` the target and
    ``xs`` (p, cells) the design ``[1, x]`` (0 where masked).  False when a time-only
    feature is not finite: the whole step is masked and the buffers are not filled."""
    nc = y.shape[1]
    nf = kind.shape[0]
    if not _time_values(timef, kind, pos, t, tv):
        return False
    for c in range(nc):
        ok = np.isfinite(y[t, c]) and w[c] > 0.0
        for f in range(nf):
            if kind[f] == 0 and not np.isfinite(full[pos[f], t, c]):
                ok = False
        wm[c] = w[c] if ok else 0.0
        ym[c] = y[t, c] if ok else 0.0
    xs[0, :] = 1.0
    for f in range(nf):
        if kind[f] == 0:
            src = full[pos[f], t]
            for c in range(nc):
                xs[f + 1, c] = src[c] if wm[c] != 0.0 else 0.0
        else:
            v = tv[f + 1]
            for c in range(nc):
                xs[f + 1, c] = v
    return True


@numba.njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _take(src, cells, out):  # pragma: no cover - compiled
    """``out[:k] = src[cells]``; a plain copy when ``cells`` is every cell (the indices
    are increasing and distinct, so ``k == len(src)`` means ``0, 1, ...``)."""
    nk = cells.shape[0]
    if nk == src.shape[0]:
        for k in range(nk):
            out[k] = src[k]
    else:
        for k in range(nk):
            out[k] = src[cells[k]]


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _load_cells(full, timef, kind, pos, y, w, t, cells, tv, wm, ym, xs):  # pragma: no cover - compiled
    """:func:`_load_step` for the cells ``cells`` (k,) of the block only (increasing,
    distinct indices): the buffers (k,) and (p, k) hold them in that order.  Each
    value is read once (a gather only when some cells are left out); the loops after
    it are contiguous and branch-free, so LLVM vectorises them."""
    nk = cells.shape[0]
    nf = kind.shape[0]
    if not _time_values(timef, kind, pos, t, tv):
        return False
    _take(y[t], cells, ym)
    _take(w, cells, wm)
    for k in range(nk):
        yc, wc = ym[k], wm[k]
        ok = np.isfinite(yc) & (wc > 0.0)
        wm[k] = wc if ok else 0.0
        ym[k] = yc if ok else 0.0
    for f in range(nf):
        if kind[f] == 0:
            xf = xs[f + 1]
            _take(full[pos[f], t], cells, xf)
            for k in range(nk):
                ok = np.isfinite(xf[k])
                wm[k] = wm[k] if ok else 0.0
                ym[k] = ym[k] if ok else 0.0
    xs[0, :nk] = 1.0
    for f in range(nf):
        xf = xs[f + 1]
        if kind[f] == 0:
            for k in range(nk):
                xf[k] = xf[k] if wm[k] != 0.0 else 0.0
        else:
            v = tv[f + 1]
            for k in range(nk):
                xf[k] = v
    return True


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _add_gram(acc, xs, w, p, nc):  # pragma: no cover - compiled
    """Add one time step's ``w x_i x_j`` to row ``i * p + j`` of ``acc`` for ``j >= i``
    (the upper triangle of each cell's weighted Gram matrix), cell by cell."""
    for i in range(p):
        xi = xs[i]
        for j in range(i, p):
            xj = xs[j]
            a = acc[i * p + j]
            for c in range(nc):
                a[c] += w[c] * xi[c] * xj[c]


@numba.njit(cache=True, nogil=True, boundscheck=False)
def cell_stats_kernel(full, timef, kind, pos, y, w, out):  # pragma: no cover - compiled
    """``full``: (n_full, time, cells) fields on the grid; ``timef``: (n_time, time) fields
    that vary only in time; feature ``f`` is ``full[pos[f]]`` if ``kind[f] == 0`` else
    ``timef[pos[f]]``; ``y``: (time, cells); ``w``: (cells,) weights; ``out``: (cells,
    r*r + r + 2), r = features + 1: per cell, of ``z = [x, y]`` over its unmasked steps,
    the weighted centred cross-products ``sum w (z - m)(z - m)^T`` (r x r), the weighted
    means ``m`` (r), ``sum w`` and the number of unmasked steps (zeros for a cell
    without any).

    One pass, shifted: each cell's values are summed as differences from its first
    unmasked step's, and centred at the end (``S - sw d d^T`` with ``d`` the mean
    difference, of the order of the spread).  Sums of the raw values would lose
    ``(mean / spread)^2`` of the precision when centred (a pressure of 101,325 Pa
    varying by 0.1 Pa: all of it).

    Time steps outside, cells inside: each statistic is a contiguous run over the cells
    (SIMD-friendly); a masked (time, cell) gets weight 0.  Each cell's sums still run over
    time in order, so the result does not depend on how the cells are blocked."""
    nt, nc = y.shape
    nf = kind.shape[0]
    p = nf + 1
    r = nf + 1
    S = r * r + r + 2
    acc = np.zeros((S, nc))
    wm = np.empty(nc)
    xs = np.empty((p, nc))
    ym = np.empty(nc)
    tv = np.empty(p)
    ref = np.zeros((r, nc))
    seen = np.zeros(nc, dtype=np.bool_)
    d = np.empty((r, nc))
    for t in range(nt):
        if not _load_step(full, timef, kind, pos, y, w, t, tv, wm, ym, xs):
            continue
        for c in range(nc):
            if wm[c] != 0.0 and not seen[c]:  # the cell's first unmasked step: its reference
                seen[c] = True
                for f in range(nf):
                    ref[f, c] = xs[f + 1, c]
                ref[nf, c] = ym[c]
        for f in range(nf):
            xf, rf, df = xs[f + 1], ref[f], d[f]
            for c in range(nc):
                df[c] = xf[c] - rf[c]
        rf, df = ref[nf], d[nf]
        for c in range(nc):
            df[c] = ym[c] - rf[c]
        _add_gram(acc, d, wm, r, nc)
        for i in range(r):
            di = d[i]
            a = acc[r * r + i]
            for c in range(nc):
                a[c] += wm[c] * di[c]
        b = acc[r * r + r]
        e = acc[r * r + r + 1]
        for c in range(nc):
            b[c] += wm[c]
            e[c] += 1.0 if wm[c] != 0.0 else 0.0
    # Element by element, not ``acc[r, :] = acc[s, :]`` / ``out[:, :] = acc.T``: an
    # array-to-array slice assignment makes Numba compile its shape-mismatch error
    # message (integer and string formatting: about 5 s of the first compile).
    for c in range(nc):
        sw = acc[r * r + r, c]
        for i in range(r):
            di = acc[r * r + i, c] / sw if sw > 0.0 else 0.0
            out[c, r * r + i] = ref[i, c] + di if sw > 0.0 else 0.0
            for j in range(i, r):
                dj = acc[r * r + j, c] / sw if sw > 0.0 else 0.0
                m = acc[i * r + j, c] - sw * di * dj if sw > 0.0 else 0.0
                out[c, i * r + j] = m
                out[c, j * r + i] = m
        out[c, r * r + r] = sw
        out[c, r * r + r + 1] = acc[r * r + r + 1, c]


POISSON, BINOMIAL = 1, 2


@numba.njit(cache=True, nogil=True, boundscheck=False)
def glm_eta_kernel(full, timef, kind, pos, cells, coefT, t0, eta):  # pragma: no cover - compiled
    """The linear predictor of rows ``t0, t0 + 1, ...`` of a block, ``eta`` (rows,
    k), for the cells ``cells`` (k,, increasing indices) of the block at their
    coefficients ``coefT`` (p, k); the inputs are those of :func:`cell_stats_kernel`.  Masked values are not
    cleared here (NaN stays NaN): :func:`glm_acc_kernel` gives them no weight."""
    nr, nk = eta.shape
    nf = kind.shape[0]
    for r in range(nr):
        t = t0 + r
        e = eta[r]
        c0 = coefT[0]
        for k in range(nk):
            e[k] = c0[k]
        for f in range(nf):
            cf = coefT[f + 1]
            if kind[f] == 0:
                src = full[pos[f], t]
                if nk == src.shape[0]:  # every cell (increasing indices): no gather
                    for k in range(nk):
                        e[k] += cf[k] * src[k]
                else:
                    for k in range(nk):
                        e[k] += cf[k] * src[cells[k]]
            else:
                v = timef[pos[f], t]
                for k in range(nk):
                    e[k] += cf[k] * v


@numba.njit(cache=True, nogil=True, boundscheck=False)
def glm_acc_kernel(full, timef, kind, pos, y, w, cells, t0, eta, mu, aux, family, start, scratch,  # pragma: no cover
                   acc):
    """Add rows ``t0, t0 + 1, ...`` of a block to the per-cell Newton statistics ``acc``
    (p*p + p + 6, k) of its cells ``cells`` (k,, increasing indices), in that order, of a Poisson
    (``family == 1``, log link) or binomial (``2``, logit) model, given the rows'
    linear predictor ``eta``, ``mu`` and ``aux`` (rows, k), computed by NumPy's
    vectorised ``exp``/``log1p`` (Numba's ``exp`` is a scalar libm call: no SVML
    here): ``mu`` is the mean, except for binomial after the start, where it is
    ``e^-|eta|`` (the mean made of it here); ``aux`` is ``log(1 + e^-|eta|)`` for
    binomial, and on the
    ``start`` pass the deviance's constant part of each value.

    ``acc`` rows: the weighted Hessian ``sum w v(mu) x x^T`` (upper triangle; the
    Fisher information, observed = expected for these canonical links), ``sum w (y -
    mu) x`` (minus half the deviance's gradient), the weighted deviance less its part
    that does not depend on the coefficients, ``sum w``, the number of unmasked steps,
    ``sum w y``, the number of unmasked targets outside the family's range (y < 0;
    binomial: y > 1; left out of the deviance) and that constant part of the deviance
    (``start`` only: ``2 sum w (y log y - y)``; binomial ``2 sum w (y log y + (1 - y)
    log(1 - y))``).  On the ``start`` pass ``eta``/``mu`` are R's start from the data
    (``mu = y + 0.1``; binomial ``(y + 1/2) / 2``) and the score row holds ``sum w v z
    x`` with the working response ``z = eta + (y - mu) / v``: their solve is the first
    IRLS step; no deviance.  ``scratch``: (p + 4, k) buffers, reused from call to
    call (no allocation here).

    Cells that are a run of the block's (every cell, or a range of them) are read in
    place by :func:`_acc_run`, in fewer loops; others are gathered first.  Both add
    the same values in the same order: the statistics do not depend on the path."""
    nr, nc = eta.shape
    if nc and cells[nc - 1] - cells[0] == nc - 1:  # a run of cells (increasing, distinct): read in place
        _acc_run(full, timef, kind, pos, y, w, cells[0], t0, eta, mu, aux, family, start, scratch, acc)
        return
    nf = kind.shape[0]
    p = nf + 1
    xs = scratch[:p]
    wm = scratch[p]
    ym = scratch[p + 1]
    wv = scratch[p + 2]
    wr = scratch[p + 3]
    tv = np.empty(p)
    dev = acc[p * p + p]
    bad = acc[p * p + p + 4]
    ent = acc[p * p + p + 5]
    for r in range(nr):
        if not _load_cells(full, timef, kind, pos, y, w, t0 + r, cells, tv, wm, ym, xs):
            continue
        e = eta[r]
        m = mu[r]
        a = aux[r]
        # one branch-free loop per case (selects, no jumps: LLVM vectorises them); a
        # masked value (weight 0) adds exact zeros, a value out of range counts as bad
        if start:
            for c in range(nc):
                wc, yc, mc = wm[c], ym[c], m[c]
                live = wc != 0.0
                var = mc if family == 1 else mc * (1.0 - mc)
                oor = (yc < 0.0) | ((family != 1) & (yc > 1.0))
                wv[c] = wc * var if live else 0.0
                wr[c] = wc * (var * e[c] + (yc - mc)) if live else 0.0
                bad[c] += 1.0 if live & oor else 0.0
                ent[c] += wc * a[c] if live & ~oor else 0.0
        elif family == 1:  # 2 (y log(y / mu) - (y - mu)) = 2 (y log y - y) + 2 (mu - y eta)
            for c in range(nc):  # few arrays per loop: LLVM's alias checks stay cheap
                wc, mc = wm[c], m[c]
                live = wc != 0.0
                wv[c] = wc * mc if live else 0.0
                wr[c] = wc * (ym[c] - mc) if live else 0.0
            for c in range(nc):
                wc, yc = wm[c], ym[c]
                live = wc != 0.0
                oor = yc < 0.0
                bad[c] += 1.0 if live & oor else 0.0
                dev[c] += wc * 2.0 * (m[c] - yc * e[c]) if live & ~oor else 0.0
        else:  # 2 (y log y + (1 - y) log(1 - y)) + 2 (log(1 + e^eta) - y eta)
            for c in range(nc):  # the mean from m = q = e^-|eta|: 1 / (1 + q), times q where eta < 0
                wc, qc = wm[c], m[c]
                d = 1.0 / (qc + 1.0)
                mc = d * qc if e[c] < 0.0 else d
                live = wc != 0.0
                wv[c] = wc * (mc * (1.0 - mc)) if live else 0.0
                wr[c] = wc * (ym[c] - mc) if live else 0.0
            for c in range(nc):
                wc, yc, ec = wm[c], ym[c], e[c]
                live = wc != 0.0
                oor = (yc < 0.0) | (yc > 1.0)
                bad[c] += 1.0 if live & oor else 0.0
                dev[c] += wc * 2.0 * (max(ec, 0.0) + a[c] - yc * ec) if live & ~oor else 0.0
        _add_gram(acc, xs, wv, p, nc)
        for i in range(p):
            xi = xs[i]
            g = acc[p * p + i]
            for c in range(nc):
                g[c] += wr[c] * xi[c]
        b = acc[p * p + p + 1]
        n = acc[p * p + p + 2]
        s = acc[p * p + p + 3]
        for c in range(nc):
            b[c] += wm[c]
            n[c] += 1.0 if wm[c] != 0.0 else 0.0
            s[c] += wm[c] * ym[c]


@numba.njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def _acc_run(full, timef, kind, pos, y, w, c0, t0, eta, mu, aux, family, start, scratch, acc):  # pragma: no cover
    """:func:`glm_acc_kernel` for the cells ``c0, c0 + 1, ...`` of the block, read in
    place.  With a grid feature, :func:`_acc_run_fused`.  Otherwise (time-only
    features) per row: one loop for the mask (the target, the weight, the first grid feature),
    one per further grid feature, one for the family's weights and the deviance, one
    for every statistic without a feature (the intercept's), then one per feature for
    its Hessian row and score, reading the feature in place (a masked value adds 0,
    selected, as the gathered path's zeroed copy adds it).  Each sum is the one the
    gathered path makes, term for term and in time order, so the values are the same
    (the gathered path copies every input into buffers first, then makes about twice
    the passes over them).  Cutting a wide block into tiles of a few hundred cells,
    so that a row's buffers stay in the core's cache, was slower here (measured on
    34,560 cells)."""
    nr, nk = eta.shape
    nf = kind.shape[0]
    p = nf + 1
    tv = np.empty(p)
    tv[0] = 1.0
    first = -1  # the first grid feature, folded into the mask loop
    for f in range(nf):
        if kind[f] == 0:
            first = f
            break
    if first >= 0:
        _acc_run_fused(full, timef, kind, pos, y, w, c0, t0, eta, mu, aux, family, start, first, scratch, acc)
        return
    wm = scratch[p]
    wv = scratch[p + 2]
    wr = scratch[p + 3]
    h00 = acc[0]
    g0 = acc[p * p]
    dev = acc[p * p + p]
    sw = acc[p * p + p + 1]
    cnt = acc[p * p + p + 2]
    swy = acc[p * p + p + 3]
    bad = acc[p * p + p + 4]
    ent = acc[p * p + p + 5]
    for r in range(nr):
        t = t0 + r
        if not _time_values(timef, kind, pos, t, tv):
            continue
        yt = y[t, c0:c0 + nk]
        wt = w[c0:c0 + nk]
        x0 = full[pos[first], t, c0:c0 + nk] if first >= 0 else yt
        for k in range(nk):
            wc = wt[k]
            ok = np.isfinite(yt[k]) & (wc > 0.0) & np.isfinite(x0[k])
            wm[k] = wc if ok else 0.0
        for f in range(first + 1, nf):
            if kind[f] == 0:
                xf = full[pos[f], t, c0:c0 + nk]
                for k in range(nk):
                    wm[k] = wm[k] if np.isfinite(xf[k]) else 0.0
        e = eta[r]
        m = mu[r]
        a = aux[r]
        if start:
            for k in range(nk):
                wc, mc = wm[k], m[k]
                live = wc != 0.0
                yc = yt[k] if live else 0.0
                var = mc if family == 1 else mc * (1.0 - mc)
                oor = (yc < 0.0) | ((family != 1) & (yc > 1.0))
                wv[k] = wc * var if live else 0.0
                wr[k] = wc * (var * e[k] + (yc - mc)) if live else 0.0
                bad[k] += 1.0 if live & oor else 0.0
                ent[k] += wc * a[k] if live & ~oor else 0.0
        elif family == 1:
            for k in range(nk):
                wc, mc = wm[k], m[k]
                live = wc != 0.0
                yc = yt[k] if live else 0.0
                oor = yc < 0.0
                wv[k] = wc * mc if live else 0.0
                wr[k] = wc * (yc - mc) if live else 0.0
                bad[k] += 1.0 if live & oor else 0.0
                dev[k] += wc * 2.0 * (mc - yc * e[k]) if live & ~oor else 0.0
        else:
            for k in range(nk):
                wc, qc, ec = wm[k], m[k], e[k]
                live = wc != 0.0
                yc = yt[k] if live else 0.0
                d = 1.0 / (qc + 1.0)
                mc = d * qc if ec < 0.0 else d
                oor = (yc < 0.0) | (yc > 1.0)
                wv[k] = wc * (mc * (1.0 - mc)) if live else 0.0
                wr[k] = wc * (yc - mc) if live else 0.0
                bad[k] += 1.0 if live & oor else 0.0
                dev[k] += wc * 2.0 * (max(ec, 0.0) + a[k] - yc * ec) if live & ~oor else 0.0
        for k in range(nk):
            wc = wm[k]
            live = wc != 0.0
            h00[k] += wv[k]
            g0[k] += wr[k]
            sw[k] += wc
            cnt[k] += 1.0 if live else 0.0
            swy[k] += wc * yt[k] if live else 0.0
        for i in range(p):
            _feature_row(acc, full, kind, pos, tv, t, c0, wv, wr, i, p, nk, -1)


@numba.njit(cache=True, nogil=True, boundscheck=False, error_model="numpy")
def _acc_run_fused(full, timef, kind, pos, y, w, c0, t0, eta, mu, aux, family, start, first,  # pragma: no cover
                   scratch, acc):
    """:func:`_acc_run` where a grid feature ``first`` (column ``q = first + 1``)
    exists: one loop per row makes the mask (the target, the weight, that
    feature; the other grid features' part, if any, in a loop before), the family's
    weights, the deviance and every statistic of the intercept and of column ``q``;
    the other columns' entries follow in :func:`_feature_row`.  The same terms in the
    same order as the gathered path: the same values, in about half the time of
    :func:`_acc_run`'s separate loops (a model with one grid feature is then one loop
    per row)."""
    nr, nk = eta.shape
    nf = kind.shape[0]
    p = nf + 1
    q = first + 1
    more = p > 2  # entries left for _feature_row, which reads wv and wr
    tv = np.empty(p)
    tv[0] = 1.0
    wm = scratch[p]
    wv = scratch[p + 2]
    wr = scratch[p + 3]
    h00 = acc[0]
    h0q = acc[q]
    hqq = acc[q * p + q]
    g0 = acc[p * p]
    gq = acc[p * p + q]
    dev = acc[p * p + p]
    sw = acc[p * p + p + 1]
    cnt = acc[p * p + p + 2]
    swy = acc[p * p + p + 3]
    bad = acc[p * p + p + 4]
    if start:  # no deviance: the constant part of it instead
        dev = acc[p * p + p + 5]
    for r in range(nr):
        t = t0 + r
        if not _time_values(timef, kind, pos, t, tv):
            continue
        yt = y[t, c0:c0 + nk]
        xq = full[pos[first], t, c0:c0 + nk]
        ws = w[c0:c0 + nk]
        for f in range(first + 1, nf):  # the other grid features' mask
            if kind[f] == 0:
                xf = full[pos[f], t, c0:c0 + nk]
                for k in range(nk):
                    wm[k] = ws[k] if np.isfinite(xf[k]) else 0.0
                ws = wm
        e = eta[r]
        m = mu[r]
        a = aux[r]
        # one loop per case, the case a constant in each (a branch inside stops LLVM vectorising it)
        if start and family == 1:
            _fused_loop(3, more, nk, ws, yt, xq, e, m, a, h00, g0, h0q, hqq, gq, dev, sw, cnt, swy, bad, wv, wr)
        elif start:
            _fused_loop(4, more, nk, ws, yt, xq, e, m, a, h00, g0, h0q, hqq, gq, dev, sw, cnt, swy, bad, wv, wr)
        elif family == 1:
            _fused_loop(1, more, nk, ws, yt, xq, e, m, a, h00, g0, h0q, hqq, gq, dev, sw, cnt, swy, bad, wv, wr)
        else:
            _fused_loop(2, more, nk, ws, yt, xq, e, m, a, h00, g0, h0q, hqq, gq, dev, sw, cnt, swy, bad, wv, wr)
        if more:
            for i in range(p):
                _feature_row(acc, full, kind, pos, tv, t, c0, wv, wr, i, p, nk, q)


@numba.njit(cache=True, nogil=True, boundscheck=False, inline="always", error_model="numpy")
def _fused_loop(case, more, nk, ws, yt, xq, e, m, a, h00, g0, h0q, hqq, gq, dev, sw, cnt, swy, bad,  # pragma: no cover
                wv, wr):
    """A row's loop of :func:`_acc_run_fused` (``case`` a constant, see
    :func:`_fused_cell`); ``more``: keep every cell's ``(w v(mu), w (y - mu))`` in
    ``wv``, ``wr`` for the other features' entries."""
    if more:
        for k in range(nk):
            v, u = _fused_cell(case, k, ws, yt, xq, e, m, a, h00, g0, h0q, hqq, gq, dev, sw, cnt, swy, bad)
            wv[k] = v
            wr[k] = u
    else:
        for k in range(nk):
            _fused_cell(case, k, ws, yt, xq, e, m, a, h00, g0, h0q, hqq, gq, dev, sw, cnt, swy, bad)


@numba.njit(cache=True, nogil=True, boundscheck=False, inline="always", error_model="numpy")
def _fused_cell(family, k, ws, yt, xq, e, m, a, h00, g0, h0q, hqq, gq, dev, sw, cnt, swy, bad):  # pragma: no cover
    """Cell ``k``'s terms in :func:`_acc_run_fused` (``family`` a constant: 1 Poisson,
    2 binomial, 3 and 4 their starts), added to its statistics; returns its ``(w
    v(mu), w (y - mu))`` (the start: ``w v(mu)`` and ``w v(mu) z``, ``z`` the working
    response, as the gathered path).  On the start ``dev`` is the row of the
    deviance's constant part, and ``m``, ``a`` the start's mean and that part."""
    wc0, y0, x0 = ws[k], yt[k], xq[k]
    live = np.isfinite(y0) & (wc0 > 0.0) & np.isfinite(x0)
    wc = wc0 if live else 0.0
    yc = y0 if live else 0.0
    xc = x0 if live else 0.0
    ec = e[k]
    if family >= 3:  # the start, as the gathered path's loop
        mc = m[k]
        var = mc if family == 3 else mc * (1.0 - mc)
        oor = (yc < 0.0) | ((family != 3) & (yc > 1.0))
        v = wc * var if live else 0.0
        dev[k] += wc * a[k] if live & ~oor else 0.0
        u = wc * (var * ec + (yc - mc)) if live else 0.0
    elif family == 1:
        mc = m[k]
        oor = yc < 0.0
        v = wc * mc if live else 0.0
        d = wc * 2.0 * (mc - yc * ec) if live & ~oor else 0.0
    else:
        qc = m[k]
        s = 1.0 / (qc + 1.0)
        mc = s * qc if ec < 0.0 else s
        oor = (yc < 0.0) | (yc > 1.0)
        v = wc * (mc * (1.0 - mc)) if live else 0.0
        d = wc * 2.0 * ((ec if ec > 0.0 else 0.0) + a[k] - yc * ec) if live & ~oor else 0.0
    if family <= 2:
        u = wc * (yc - mc) if live else 0.0
        dev[k] += d
    bad[k] += 1.0 if live & oor else 0.0
    h00[k] += v
    g0[k] += u
    h0q[k] += v * xc
    hqq[k] += v * xc * xc
    gq[k] += u * xc
    sw[k] += wc
    cnt[k] += 1.0 if live else 0.0
    swy[k] += wc * yc
    return v, u


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _feature_row(acc, full, kind, pos, tv, t, c0, wv, wr, i, p, nk, q):  # pragma: no cover - compiled
    """Row ``i`` of the Hessian's upper triangle (``j >= i``, the intercept's ``(0,
    0)`` left out) and, for ``i >= 1``, the score's entry ``i``, of one time step:
    ``(wv x_i) x_j`` and ``wr x_i`` as the gathered path computes them (a column is
    the intercept's 1, a time-only feature's value or a grid feature read in place,
    where a masked value, NaN or not, adds 0), for the block's cells ``c0, ...``
    (``nk`` of them).  Column ``q`` (or -1):
    its entries ``(0, q)``, ``(q, q)`` and its score are left out (made by
    :func:`_acc_run_fused`)."""
    grid_i = i > 0 and kind[i - 1] == 0
    xi = full[pos[i - 1], t, c0:c0 + nk] if grid_i else wv  # wv: a placeholder, not read
    si = tv[i]
    if i > 0 and i != q:
        g = acc[p * p + i]
        if grid_i:
            for k in range(nk):
                x = xi[k]
                g[k] += wr[k] * x if np.isfinite(x) else 0.0
        else:
            for k in range(nk):
                g[k] += wr[k] * si
    for j in range(max(i, 1), p):
        if j == q and (i == 0 or i == q):
            continue
        h = acc[i * p + j]
        grid_j = kind[j - 1] == 0
        xj = full[pos[j - 1], t, c0:c0 + nk] if grid_j else wv
        sj = tv[j]
        if grid_i and grid_j:
            for k in range(nk):
                a, b = xi[k], xj[k]
                h[k] += wv[k] * a * b if np.isfinite(a) & np.isfinite(b) else 0.0
        elif grid_i:
            for k in range(nk):
                a = xi[k]
                h[k] += wv[k] * a * sj if np.isfinite(a) else 0.0
        elif grid_j:
            for k in range(nk):
                b = xj[k]
                h[k] += wv[k] * si * b if np.isfinite(b) else 0.0
        else:
            for k in range(nk):
                h[k] += wv[k] * si * sj


@numba.njit(cache=True, nogil=True, boundscheck=False)
def spd_solve_kernel(M, b, pivot_min, x, ok):  # pragma: no cover - compiled
    """Solve the symmetric positive (semi-)definite systems ``M[i] x[i] = b[i]`` of a
    batch of cells by Cholesky on the Jacobi-scaled matrix (unit diagonal, so the test
    does not depend on the features' units): ``ok[i]`` is False, and ``x[i]`` not set,
    where a diagonal entry is not positive or a scaled pivot falls below ``pivot_min``
    (about ``1 / cond``: singular or ill-conditioned, left to a minimum-norm solve)."""
    n, p, _ = M.shape
    L = np.empty((p, p))
    s = np.empty(p)
    z = np.empty(p)
    for i in range(n):
        good = True
        for j in range(p):
            d = M[i, j, j]
            if not (d > 0.0) or not np.isfinite(d):
                good = False
                break
            s[j] = 1.0 / np.sqrt(d)
        if good:
            for j in range(p):
                for k in range(j + 1):
                    v = M[i, j, k] * s[j] * s[k]
                    for m in range(k):
                        v -= L[j, m] * L[k, m]
                    if k == j:
                        if not (v > pivot_min):
                            good = False
                            break
                        L[j, j] = np.sqrt(v)
                    else:
                        L[j, k] = v / L[k, k]
                if not good:
                    break
        ok[i] = good
        if not good:
            continue
        for j in range(p):  # L z = s b, L^T u = z, x = s u
            v = b[i, j] * s[j]
            for m in range(j):
                v -= L[j, m] * z[m]
            z[j] = v / L[j, j]
        for j in range(p - 1, -1, -1):
            v = z[j]
            for m in range(j + 1, p):
                v -= L[m, j] * z[m]
            z[j] = v / L[j, j]
        for j in range(p):
            x[i, j] = z[j] * s[j]
