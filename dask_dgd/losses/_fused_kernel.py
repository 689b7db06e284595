"""The fused block kernel itself (see :mod:`._fused`), compiled by Numba on first use.

A module-level function, not a closure: Numba's disk cache keys a closure on its cell
contents, and a Numba dispatcher in a cell (``row_loss_grad``) pickles differently in
every process, so the cache never hit and every fresh process (each worker, and each
worker a nanny restarts) compiled the kernel again, about 2 s per dtype.  Importing this
module imports Numba; :func:`._fused._compile` imports it on first use.

Numba's cache is keyed on this file only: see :data:`ROWLOSS_SHA256`.
"""

import numba
import numpy as np

from ._rowloss import row_loss_grad

__all__ = ["kernel"]

#: sha256 of ``_rowloss.py``, whose ``row_loss_grad`` Numba inlines into this module's
#: kernels.  Numba's disk cache is keyed on this file alone: an edit of ``_rowloss.py``
#: must change this line too (``tests/losses/test_fused.py`` checks it), which makes
#: Numba compile the kernels again instead of loading the old ones.
ROWLOSS_SHA256 = "2deadb8ced23d3633995b839900385965e28599a7395fda84914eef98cb127a6"

#: Rows per inner partial sum of the kernel.
CHUNK = 256


@numba.njit(cache=True, nogil=True, boundscheck=False)
def kernel(X, rows, use_rows, y, sw, has_weights, WT, b, has_offset, code, gradT, gint, raw, g):  # pragma: no cover
    d = WT.shape[1]  # the features; with has_offset, X's K columns after them are offsets
    n = rows.shape[0] if use_rows else X.shape[0]
    K = WT.shape[0]
    loss = 0.0
    # Two-level sums: rows accumulate into a chunk buffer that is added to the
    # totals every CHUNK rows, so rounding grows with n / CHUNK + CHUNK, not n.
    chunk_loss = 0.0
    chunk_grad = np.zeros((K, d))
    chunk_int = np.zeros(K)
    for ii in range(n):
        i = rows[ii] if use_rows else ii
        for k in range(K):
            r0 = 0.0
            r1 = 0.0
            r2 = 0.0
            r3 = 0.0
            j = 0
            while j + 4 <= d:
                r0 += X[i, j] * WT[k, j]
                r1 += X[i, j + 1] * WT[k, j + 1]
                r2 += X[i, j + 2] * WT[k, j + 2]
                r3 += X[i, j + 3] * WT[k, j + 3]
                j += 4
            while j < d:
                r0 += X[i, j] * WT[k, j]
                j += 1
            raw[k] = b[k] + ((r0 + r1) + (r2 + r3))
            if has_offset:
                raw[k] += X[i, d + k]
        yi = y[i]
        wi = sw[i] if has_weights else 1.0
        li = row_loss_grad(code, raw, yi, g, K)
        chunk_loss += wi * li
        for k in range(K):
            gk = wi * g[k]
            chunk_int[k] += gk
            for j in range(d):
                chunk_grad[k, j] += gk * X[i, j]
        if (ii + 1) % CHUNK == 0 or ii == n - 1:
            loss += chunk_loss
            chunk_loss = 0.0
            for k in range(K):
                gint[k] += chunk_int[k]
                chunk_int[k] = 0.0
                for j in range(d):
                    gradT[k, j] += chunk_grad[k, j]
                    chunk_grad[k, j] = 0.0
    return loss

