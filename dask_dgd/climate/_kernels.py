"""Per-cell least-squares statistics of a block in one pass (Numba, cached on disk).

For every grid cell of a (time chunk x spatial chunk) block: the weighted Gram matrix of
``[1, x]``, the weighted ``[1, x]^T y``, ``sum w y^2``, ``sum w`` and the number of
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

__all__ = ["cell_stats_kernel"]


@numba.njit(cache=True, nogil=True, boundscheck=False)
def cell_stats_kernel(full, timef, kind, pos, y, w, out):  # pragma: no cover - compiled
    """``full``: (n_full, time, cells) fields on the grid; ``timef``: (n_time, time) fields
    that vary only in time; column ``f`` of the design is ``full[pos[f]]`` if
    ``kind[f] == 0`` else ``timef[pos[f]]``; ``y``: (time, cells); ``w``: (cells,) weights;
    ``out``: (cells, p*p + p + 3), p = columns + 1 (the intercept first).

    Time steps outside, cells inside: each statistic is a contiguous run over the cells
    (SIMD-friendly); a masked (time, cell) gets weight 0.  Each cell's sums still run over
    time in order, so the result does not depend on how the cells are blocked."""
    nt, nc = y.shape
    nf = kind.shape[0]
    p = nf + 1
    S = p * p + p + 3
    acc = np.zeros((S, nc))
    wm = np.empty(nc)
    xs = np.empty((p, nc))
    ym = np.empty(nc)
    tv = np.empty(p)
    for t in range(nt):
        t_ok = True
        for f in range(nf):
            if kind[f] == 1:
                tv[f + 1] = timef[pos[f], t]
                if not np.isfinite(tv[f + 1]):
                    t_ok = False
        if not t_ok:
            continue
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
        for i in range(p):
            xi = xs[i]
            for j in range(i, p):
                xj = xs[j]
                a = acc[i * p + j]
                for c in range(nc):
                    a[c] += wm[c] * xi[c] * xj[c]
            a = acc[p * p + i]
            for c in range(nc):
                a[c] += wm[c] * xi[c] * ym[c]
        a = acc[p * p + p]
        b = acc[p * p + p + 1]
        d = acc[p * p + p + 2]
        for c in range(nc):
            a[c] += wm[c] * ym[c] * ym[c]
            b[c] += wm[c]
            d[c] += 1.0 if wm[c] != 0.0 else 0.0
    for i in range(p):
        for j in range(i):
            acc[i * p + j, :] = acc[j * p + i, :]
    out[:, :] = acc.T
