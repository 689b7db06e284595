"""A plain-Python reference of the online passes (module level: importable from any test folder).

Scalar loops over a dense matrix with the formulas of ``dask_dgd/losses/_online_kernels.py``
written out again in the same order (each entry updated with the same operations), so
the compiled kernel can be checked against it: bit for bit where no transcendental
function is involved (squared error), to 1e-13 otherwise (libm against LLVM's ``exp``).
"""

import math

import numpy as np


def row_loss(code, raw, yi):
    """One row's loss and gradient in the linear predictor (the kernels' formulas)."""
    K = len(raw)
    if code == 0:
        diff = raw[0] - yi
        return 0.5 * diff * diff, [diff]
    if code == 1:
        r = raw[0]
        if r > 0:
            e = math.exp(-r)
            return r + math.log1p(e) - yi * r, [1.0 / (1.0 + e) - yi]
        e = math.exp(r)
        return math.log1p(e) - yi * r, [e / (1.0 + e) - yi]
    if code == 2:
        m = math.exp(raw[0])
        return m - yi * raw[0], [m - yi]
    top = max(raw)
    s = 0.0
    for k in range(K):
        s += math.exp(raw[k] - top)
    lse = top + math.log(s)
    c = int(yi)
    return lse - raw[c], [math.exp(raw[k] - lse) - (1.0 if k == c else 0.0) for k in range(K)]


def online_reference(X, y, sw, order, *, code, K, rule, eta0, power_t=0.0, lam=0.0, a0=0.0, eps=0.0, t0=1.0,
                     fit_intercept=True, micro=1, has_offset=False, w0=None, state=None):
    """The parameters after a pass over the rows ``order`` of the dense ``X`` (the
    features, then ``K`` offset columns with ``has_offset``), with one update per row
    (``micro=1``), per ``micro`` rows (the last micro-batch at the end), or one at the
    end (``micro=0``).  The adaptive rules' L2 decay is lazy, per entry, at the entry's
own rate (as the kernel's ``_catch_up``).  Returns ``(w, loss_sum, weight_sum, sigma, state)``."""
    n_cols = X.shape[1]
    d = n_cols - (K if has_offset else 0)
    P = d + fit_intercept
    n = P * K
    n_pen = d * K
    v = [0.0] * n if w0 is None else [float(a) for a in w0]
    w0 = list(v)
    state = state or {}
    acc = list(state.get("acc", [a0] * n))
    xmax = list(state.get("xmax", [0.0] * d))
    t, N, W = state.get("t", 0.0), state.get("N", 0.0), state.get("W", 0.0)
    s, fold = 1.0, 1.0
    loss = weight = 0.0
    gbuf = {}
    open_w = 0.0
    open_rows = 0
    lazy = lam > 0 and rule != "sgd"
    last = [t] * n  # the step up to which each entry decayed (adaptive rules)
    touched = set()

    def ipow(f, m):
        r = 1.0
        while m > 0:
            if m & 1:
                r *= f
            f *= f
            m >>= 1
        return r

    def catch_up(e, upto, xm, eta, nag):
        pending = upto - last[e]
        if pending > 0:
            a = acc[e]
            if rule == "adagrad":
                den, r = math.sqrt(a) + eps, eta
            else:
                den, r = xm * math.sqrt(a), nag
            if den > 0:
                f = max(1.0 - (r / den) * lam, 0.0)
                v[e] *= ipow(f, int(pending))
            last[e] = upto

    def rate():
        return eta0 if power_t == 0.0 else eta0 / (1.0 + t / t0) ** power_t

    def adaptive(e, gb, xm, eta, nag):
        acc[e] = acc[e] + gb * gb
        a = acc[e]
        if rule == "adagrad":
            return eta * gb / (math.sqrt(a) + eps)
        return nag * gb / (xm * math.sqrt(a)) if a > 0 else 0.0

    def decay():
        nonlocal t, s
        eta = rate()
        t += 1.0
        if lam > 0 and rule == "sgd":
            s *= 1.0 - eta * lam
        nag = eta * math.sqrt(W / N) if rule == "normalized" and N > 0 else eta
        return eta, nag

    def end_update():
        nonlocal s, fold
        if s < 1e-9:
            for e in range(n_pen):
                v[e] *= s
            fold *= s
            s = 1.0

    def apply_open():
        nonlocal gbuf, open_w, open_rows
        if open_w > 0:
            eta, nag = decay()
            for e in gbuf:  # (insertion order: the order entries were first touched)
                gb = gbuf[e] / open_w
                r = e // K
                if rule == "sgd":
                    step = eta * gb
                else:
                    step = adaptive(e, gb, xmax[r] if rule == "normalized" and r < d else 1.0, eta, nag)
                v[e] = v[e] - step / s if r < d else v[e] - step
                touched.add(e)
        gbuf, open_w, open_rows = {}, 0.0, 0
        end_update()

    for i in order:
        row = [(j, float(X[i, j])) for j in range(n_cols) if X[i, j] != 0]
        wi = 1.0 if sw is None else float(sw[i])
        if rule == "normalized":
            nsum = 1.0 if fit_intercept else 0.0
            for j, x in row:
                if j >= d:
                    continue
                if abs(x) > xmax[j]:
                    if xmax[j] > 0:
                        f = (xmax[j] / abs(x)) * (xmax[j] / abs(x))
                        for k in range(K):
                            v[j * K + k] *= f
                            touched.add(j * K + k)
                    xmax[j] = abs(x)
                sx = x / xmax[j]
                nsum += sx * sx
            N += wi * nsum
            W += wi
        if lazy:
            eta_now = rate()
            nag_now = eta_now * math.sqrt(W / N) if rule == "normalized" and N > 0 else eta_now
            for k in range(K):
                for j, _x in row:
                    if j < d:
                        catch_up(j * K + k, t, xmax[j] if rule == "normalized" else 1.0, eta_now, nag_now)
        raw = []
        for k in range(K):
            dot = off = 0.0
            for j, x in row:
                if j < d:
                    dot += v[j * K + k] * x
                elif has_offset and j - d == k:
                    off += x
            raw.append(s * dot + (v[n_pen + k] if fit_intercept else 0.0) + off)
        li, g = row_loss(code, raw, float(y[i]))
        loss += wi * li
        weight += wi
        open_w += wi
        open_rows += 1
        if micro == 1:
            eta, nag = decay()
            for k in range(K):
                gk = wi * g[k]
                if gk == 0.0:
                    continue
                ck = eta * gk / s
                for j, x in row:
                    if j >= d:
                        continue
                    e = j * K + k
                    if rule == "sgd":
                        v[e] -= ck * x
                    else:
                        v[e] -= adaptive(e, gk * x, xmax[j] if rule == "normalized" else 1.0, eta, nag) / s
                    touched.add(e)
                if fit_intercept:
                    e = n_pen + k
                    v[e] -= eta * gk if rule == "sgd" else adaptive(e, gk, 1.0, eta, nag)
            open_w, open_rows = 0.0, 0
            end_update()
            continue
        for k in range(K):
            gk = wi * g[k]
            for j, x in row:
                if j < d:
                    gbuf[j * K + k] = gbuf.get(j * K + k, 0.0) + gk * x
            if fit_intercept:
                gbuf[n_pen + k] = gbuf.get(n_pen + k, 0.0) + gk
        if micro > 1 and open_rows >= micro:
            apply_open()
    if micro != 1 and open_rows:
        apply_open()
    if lazy:  # the touched entries catch up to the last step
        eta = rate()
        nag = eta * math.sqrt(W / N) if rule == "normalized" and N > 0 else eta
        for e in touched:
            if e < n_pen:
                catch_up(e, t, xmax[e // K] if rule == "normalized" else 1.0, eta, nag)
    w = np.array(v)
    w[:n_pen] *= s
    return w, loss, weight, s * fold, {"acc": np.array(acc), "xmax": np.array(xmax), "t": t, "N": N, "W": W}
