"""One row's loss and its gradient in the linear predictor, for the compiled kernels.

Written once for the fused block kernel (:mod:`._fused`) and the online passes
(:mod:`._online`), so both read the same formulas in the same order.  The function is
inlined into its callers by Numba (``inline="always"``); importing this module imports
Numba, so the kernels' modules import it only when they compile.  Numba's disk cache of
a kernel is keyed on the kernel's own file: an edit here must update ``ROWLOSS_SHA256``
in ``_fused_kernel.py`` and ``_online_kernels.py`` (a test says so, with the new value).
"""

import math

import numba

__all__ = ["row_loss_grad"]


@numba.njit(inline="always", cache=True, nogil=True, boundscheck=False)
def row_loss_grad(code, raw, yi, g, K):  # pragma: no cover - compiled
    """Loss of one row at the linear predictor ``raw`` (``K`` entries) and target ``yi``;
    writes its gradient in ``raw`` into ``g``.  ``code`` is the loss's ``fused_code``:
    0 half squared error, 1 binary logistic, 2 half Poisson (log link), 3 multinomial."""
    if code == 0:  # half squared error
        diff = raw[0] - yi
        li = 0.5 * diff * diff
        g[0] = diff
    elif code == 1:  # binary logistic: softplus(r) - y r, sigmoid(r) - y
        r = raw[0]
        if r > 0:
            e = math.exp(-r)
            li = r + math.log1p(e) - yi * r
            g[0] = 1.0 / (1.0 + e) - yi
        else:
            e = math.exp(r)
            li = math.log1p(e) - yi * r
            g[0] = e / (1.0 + e) - yi
    elif code == 2:  # half Poisson, log link
        m = math.exp(raw[0])
        li = m - yi * raw[0]
        g[0] = m - yi
    else:  # multinomial: logsumexp(r) - r_y, softmax(r) - onehot(y)
        top = raw[0]
        for k in range(1, K):
            if raw[k] > top:
                top = raw[k]
        s = 0.0
        for k in range(K):
            s += math.exp(raw[k] - top)
        lse = top + math.log(s)
        c = int(yi)
        li = lse - raw[c]
        for k in range(K):
            g[k] = math.exp(raw[k] - lse) - (1.0 if k == c else 0.0)
    return li
