"""The compiled online pass of :mod:`._online` (imports Numba: imported on first use).

``pass_rows`` runs per-row (``micro == 1``) or micro-batch SGD over the rows ``rows``
of one block, CSR (``is_csr``) or dense, touching only each row's non-zero entries: the
L2 decay is, for "sgd", a running scale ``s`` of the penalised entries (``w = s * v``),
for the adaptive rules a lazy per-entry decay (below); the per-feature accumulators and
the round's bookkeeping are updated where a row has entries, so a row costs
O(nnz x K), never O(n_params).  No ``fastmath`` and no
``parallel``: the order of the operations is fixed, so a pass is deterministic.
The state lives in local variables during the pass (not in arrays that could alias
the parameters), and goes back to ``st`` at its end.

Arrays of the parameter layout (``LinearObjective._matrix`` flattened: entry
``e = r * K + k``, row ``r`` a feature, the intercept row ``d`` last): ``E``, one row
per entry, side by side so that an entry's update reads one cache line: ``v`` (the
scaled parameter), ``acc`` (its adaptive accumulator), ``cw`` (the round's summed
squared gradients, the coordinate average's weight) and ``xmax`` (on a feature's first
entry: the largest ``|x|`` seen, the normalized rule's scale), as many of these columns
as the rule uses (``COLUMNS``); ``gbuf`` and ``mark`` (the open micro-batch's gradient
and touched flags, zero outside it), ``touched`` (the open micro-batch's entries),
``rmark``/``rtouched`` (the round's touched entries).

``st`` (float64 state, see ``S_*``), ``hp`` (float64 hyper-parameters, ``H_*``) and
``ip`` (int64 settings, ``I_*``) carry everything else between calls, so a micro-batch
may span blocks (``apply_last=False`` leaves it open).  Returns 0, or 1 when a row's
loss is not finite, or 2 when the progressive mean loss went above ``hp[H_LIMIT]``.

The update of entry ``e`` (feature ``r``, gradient ``gb``: the row's ``w_i g_k x_j``
with ``micro == 1``, else the micro-batch's mean), learning rate
``eta = eta0 / (1 + t / t0)**power_t``, scale ``s`` after the decay ``s *= 1 - eta * lam``:

- sgd: ``v[e] -= (eta * gb) / s``, per row as ``v[e] -= c_k * x`` with
  ``c_k = eta * (w_i g_k) / s``;
- adagrad: ``acc[e] += gb**2``; ``v[e] -= (eta * gb / (sqrt(acc[e]) + eps)) / s``;
- normalized: ``acc[e] += gb**2``;
  ``v[e] -= (nag * gb / (xmax[r] * sqrt(acc[e]))) / s``, ``nag = eta * sqrt(W / N)``;

intercepts the same without ``/ s``.  With the adaptive rules ``s`` stays 1 and the
decay is at each entry's own rate, lazily (:func:`_catch_up`): ``C_LAST`` holds the
step up to which entry ``e`` decayed; before a row reads it at step ``t`` (``t``
updates done), it decays by ``(1 - eta_e * lam)**(t - last)`` with its rate now
(``eta_e = eta / (sqrt(acc[e]) + eps)``; normalized ``nag / (xmax[r] * sqrt(acc[e]))``,
its current ``sqrt(W / N)`` and ``xmax`` factors: an approximation of the rates the
skipped steps had), and at a round's end the touched entries catch up to its last step
(:func:`catch_up_touched`).  The fixed point of per-row passes then has
``E[g_e] + lam * w_e = 0``: the penalised optimum (a decay at the base rate, as the
running scale would be, stops short of it wherever ``eta_e`` differs from ``eta``);
see :mod:`._online` for the cases that still stop short.
"""

import math

import numba
import numpy as np

from ._rowloss import row_loss_grad

#: sha256 of ``_rowloss.py``, whose ``row_loss_grad`` Numba inlines into this module's
#: kernels.  Numba's disk cache is keyed on this file alone: an edit of ``_rowloss.py``
#: must change this line too (``tests/losses/test_fused.py`` checks it), which makes
#: Numba compile the kernels again instead of loading the old ones.
ROWLOSS_SHA256 = "2deadb8ced23d3633995b839900385965e28599a7395fda84914eef98cb127a6"

# st: state
S_SCALE, S_FOLD, S_T, S_N, S_LOSS, S_WEIGHT, S_FIRST_LOSS, S_FIRST_WEIGHT = 0, 1, 2, 3, 4, 5, 6, 7
S_NT, S_NRT, S_OPEN_W, S_WSUM, S_OPEN_ROWS, S_OPEN_LOSS, S_HAVE_FIRST = 8, 9, 10, 11, 12, 13, 14
N_STATE = 15
# hp: hyper-parameters
H_ETA0, H_POWER_T, H_LAM, H_LIMIT, H_EPS, H_T0, H_WSCALE = 0, 1, 2, 3, 4, 5, 6
N_HYPER = 7
# ip: settings
I_CODE, I_K, I_RULE, I_INTERCEPT, I_MICRO, I_OFFSET = 0, 1, 2, 3, 4, 5
N_INTS = 6
RULE_SGD, RULE_ADAGRAD, RULE_NORMALIZED = 0, 1, 2
# E's columns: an entry's parameter, accumulator, coordinate weight and (on the first
# entry of a feature's row) the feature's largest |x|; a rule's E has the columns it uses
C_V, C_ACC, C_CW, C_XMAX, C_LAST = 0, 1, 2, 3, 4
#: E's columns by rule (adagrad leaves ``C_XMAX`` unused: ``C_LAST`` has one place)
COLUMNS = (1, 5, 5)
#: The running scale is folded into ``v`` when it falls below this (as scikit-learn's ``wscale``).
FOLD_BELOW = 1e-9

_opts = {"cache": True, "nogil": True, "boundscheck": False}
_inline = {"inline": "always", **_opts}


@numba.njit(**_inline)
def _adaptive_step(e, gb, xm, E, eta, nag, eps, rule):  # pragma: no cover - compiled
    """An adaptive rule's step of entry ``e`` (before the division by the scale)."""
    a = E[e, C_ACC] + gb * gb
    E[e, C_ACC] = a
    E[e, C_CW] += gb * gb
    if rule == RULE_ADAGRAD:
        return eta * gb / (math.sqrt(a) + eps)
    return nag * gb / (xm * math.sqrt(a)) if a > 0 else 0.0


@numba.njit(**_inline)
def _ipow(f, n):  # pragma: no cover - compiled
    """``f**n`` for an integer ``n >= 0`` by repeated squaring (the reference rounds the same)."""
    r = 1.0
    while n > 0:
        if n & 1:
            r *= f
        f *= f
        n >>= 1
    return r


@numba.njit(**_inline)
def _catch_up(e, upto, xm, E, eta, nag, lam, eps, rule):  # pragma: no cover - compiled
    """An adaptive rule's lazy L2 decay of entry ``e``: the steps since ``E[e, C_LAST]``
    up to ``upto``, each ``w *= 1 - eta_e * lam`` at the entry's own rate now
    (``eta_e = eta / (sqrt(acc) + eps)``, normalized ``nag / (xm * sqrt(acc))``), at
    least 0; no decay while the rate is undefined (no gradient seen yet)."""
    pending = upto - E[e, C_LAST]
    if pending > 0:
        a = E[e, C_ACC]
        if rule == RULE_ADAGRAD:
            den = math.sqrt(a) + eps
            r = eta
        else:
            den = xm * math.sqrt(a)
            r = nag
        if den > 0:
            f = 1.0 - (r / den) * lam
            if f < 0.0:
                f = 0.0
            E[e, C_V] *= _ipow(f, int(pending))
        E[e, C_LAST] = upto


@numba.njit(**_inline)
def _touch(e, rmark, rtouched, nrt):  # pragma: no cover - compiled
    if rmark[e] == 0:
        rmark[e] = 1
        rtouched[nrt] = e
        return nrt + 1
    return nrt


@numba.njit(**_inline)
def _rate(t, hp):  # pragma: no cover - compiled
    p = hp[H_POWER_T]
    return hp[H_ETA0] if p == 0.0 else hp[H_ETA0] / (1.0 + t / hp[H_T0]) ** p


@numba.njit(**_inline)
def _update_rates(t, hp, lam, rule, s, W, N):  # pragma: no cover - compiled
    """Update ``t``'s base rate, the normalized rule's global rate, and the running
    scale after plain SGD's L2 decay."""
    eta = _rate(t, hp)
    if lam > 0 and rule == RULE_SGD:
        s *= 1.0 - eta * lam
    nag = eta * math.sqrt(W / N) if rule == RULE_NORMALIZED and N > 0 else eta
    return eta, nag, s


@numba.njit(**_opts)
def _fold(E, s, n_pen):  # pragma: no cover - compiled
    for e in range(n_pen):
        E[e, C_V] *= s


@numba.njit(**_opts)
def pass_rows(is_csr, indptr, indices, data, X, colidx, rows, y, sw, has_weights, d, E, gbuf,
              mark, touched, rmark, rtouched, raw, g, st, hp, ip, apply_last):  # pragma: no cover - compiled
    K = ip[I_K]
    fi = ip[I_INTERCEPT] != 0
    micro = ip[I_MICRO]
    rule = ip[I_RULE]
    code = ip[I_CODE]
    has_offset = ip[I_OFFSET] != 0
    lam, limit, eps = hp[H_LAM], hp[H_LIMIT], hp[H_EPS]
    lazy = lam > 0 and rule != RULE_SGD
    eta_now = nag_now = 0.0
    n_pen = d * K
    s, fold, t, N, W = st[S_SCALE], st[S_FOLD], st[S_T], st[S_N], st[S_WSUM]
    loss, weight = st[S_LOSS], st[S_WEIGHT]
    first_loss, first_weight, have_first = st[S_FIRST_LOSS], st[S_FIRST_WEIGHT], st[S_HAVE_FIRST] != 0.0
    open_w, open_rows, open_loss = st[S_OPEN_W], st[S_OPEN_ROWS], st[S_OPEN_LOSS]
    nt, nrt = int(st[S_NT]), int(st[S_NRT])
    status = 0
    n_rows = rows.shape[0]
    ii = 0
    while ii <= n_rows:
        apply = False
        if ii < n_rows:
            i = rows[ii]
            if is_csr:
                a, b = indptr[i], indptr[i + 1]
                ridx = indices[a:b]
                rval = data[a:b]
            else:
                ridx = colidx
                rval = X[i]
            m = ridx.shape[0]
            wi = sw[i] * hp[H_WSCALE] if has_weights else 1.0
            if rule == RULE_NORMALIZED:
                nsum = 1.0 if fi else 0.0
                for q in range(m):
                    j = ridx[q]
                    x = float(rval[q])
                    if j >= d or x == 0.0:
                        continue
                    ax = abs(x)
                    old = E[j * K, C_XMAX]
                    if ax > old:
                        if old > 0:
                            f = (old / ax) * (old / ax)
                            for k in range(K):
                                e = j * K + k
                                E[e, C_V] *= f
                                nrt = _touch(e, rmark, rtouched, nrt)
                        E[j * K, C_XMAX] = ax
                    sx = x / E[j * K, C_XMAX]
                    nsum += sx * sx
                N += wi * nsum
                W += wi
            if lazy:  # the rate the row's entries catch up their decay at
                eta_now = _rate(t, hp)
                nag_now = eta_now * math.sqrt(W / N) if rule == RULE_NORMALIZED and N > 0 else eta_now
            for k in range(K):
                dot = 0.0
                off = 0.0
                for q in range(m):
                    j = ridx[q]
                    x = float(rval[q])
                    if x == 0.0:
                        continue
                    if j < d:
                        if lazy:
                            xm = E[j * K, C_XMAX] if rule == RULE_NORMALIZED else 1.0
                            _catch_up(j * K + k, t, xm, E, eta_now, nag_now, lam, eps, rule)
                        dot += E[j * K + k, C_V] * x
                    elif has_offset and j - d == k:
                        off += x
                raw[k] = s * dot + (E[n_pen + k, C_V] if fi else 0.0) + off
            li = row_loss_grad(code, raw, float(y[i]), g, K)
            if not math.isfinite(li):
                status = 1
                break
            loss += wi * li
            weight += wi
            open_loss += wi * li
            open_w += wi
            open_rows += 1.0
            if micro == 1:  # per row: an importance-weighted step on this row's entries
                eta, nag, s = _update_rates(t, hp, lam, rule, s, W, N)
                t += 1.0
                for k in range(K):
                    gk = wi * g[k]
                    if gk == 0.0:
                        continue
                    if rule == RULE_SGD:
                        ck = eta * gk / s
                        for q in range(m):
                            j = ridx[q]
                            x = float(rval[q])
                            if j >= d or x == 0.0:
                                continue
                            e = j * K + k
                            E[e, C_V] -= ck * x
                            nrt = _touch(e, rmark, rtouched, nrt)
                        if fi:
                            e = n_pen + k
                            E[e, C_V] -= eta * gk
                            nrt = _touch(e, rmark, rtouched, nrt)
                    else:
                        for q in range(m):
                            j = ridx[q]
                            x = float(rval[q])
                            if j >= d or x == 0.0:
                                continue
                            e = j * K + k
                            xm = E[j * K, C_XMAX] if rule == RULE_NORMALIZED else 1.0
                            E[e, C_V] -= _adaptive_step(e, gk * x, xm, E, eta, nag, eps, rule) / s
                            nrt = _touch(e, rmark, rtouched, nrt)
                        if fi:
                            e = n_pen + k
                            E[e, C_V] -= _adaptive_step(e, gk, 1.0, E, eta, nag, eps, rule)
                            nrt = _touch(e, rmark, rtouched, nrt)
            else:
                for k in range(K):
                    gk = wi * g[k]
                    for q in range(m):
                        j = ridx[q]
                        x = float(rval[q])
                        if j >= d or x == 0.0:
                            continue
                        e = j * K + k
                        gbuf[e] += gk * x
                        if mark[e] == 0:
                            mark[e] = 1
                            touched[nt] = e
                            nt += 1
                    if fi:
                        e = n_pen + k
                        gbuf[e] += gk
                        if mark[e] == 0:
                            mark[e] = 1
                            touched[nt] = e
                            nt += 1
                apply = micro > 1 and open_rows >= micro
            ii += 1
        else:  # after the last row: the open micro-batch ends here, or stays open
            apply = apply_last and micro != 1 and open_rows > 0
            ii += 1
        if apply:  # the open micro-batch's update: its mean gradient, O(touched)
            if open_w > 0:
                eta, nag, s = _update_rates(t, hp, lam, rule, s, W, N)
                t += 1.0
                for q in range(nt):
                    e = touched[q]
                    gb = gbuf[e] / open_w
                    r = e // K
                    if rule == RULE_SGD:
                        step = eta * gb
                    else:
                        xm = E[r * K, C_XMAX] if rule == RULE_NORMALIZED and r < d else 1.0
                        step = _adaptive_step(e, gb, xm, E, eta, nag, eps, rule)
                    if r < d:
                        E[e, C_V] -= step / s
                    else:
                        E[e, C_V] -= step
                    nrt = _touch(e, rmark, rtouched, nrt)
            for q in range(nt):
                e = touched[q]
                gbuf[e] = 0.0
                mark[e] = 0
            nt = 0
        if apply or micro == 1 and ii <= n_rows:
            if s < FOLD_BELOW:
                _fold(E, s, n_pen)
                fold *= s
                s = 1.0
            if not have_first:
                first_loss, first_weight, have_first = open_loss, open_w, True
            open_loss, open_w, open_rows = 0.0, 0.0, 0.0
            if weight > 0 and loss > limit * weight:
                status = 2
                break
    st[S_SCALE], st[S_FOLD], st[S_T], st[S_N], st[S_WSUM] = s, fold, t, N, W
    st[S_LOSS], st[S_WEIGHT] = loss, weight
    st[S_FIRST_LOSS], st[S_FIRST_WEIGHT], st[S_HAVE_FIRST] = first_loss, first_weight, 1.0 if have_first else 0.0
    st[S_OPEN_W], st[S_OPEN_ROWS], st[S_OPEN_LOSS] = open_w, open_rows, open_loss
    st[S_NT], st[S_NRT] = nt, nrt
    return status


def empty_state():
    """A fresh ``st`` (scale and fold 1, everything else 0)."""
    st = np.zeros(N_STATE)
    st[S_SCALE] = st[S_FOLD] = 1.0
    return st


@numba.njit(**_opts)
def load_entries(E, w0, acc, xmax, K, n_pen, rule, t0):  # pragma: no cover - compiled
    """``E`` at a round's start, in one pass: the parameters ``w0``, the accumulators
    ``acc``, zero coordinate weights and the decay's step ``t0`` (adaptive rules), the
    feature scales ``xmax`` on each feature's first entry (the normalized rule)."""
    for e in range(E.shape[0]):
        E[e, C_V] = w0[e]
        if rule != RULE_SGD:
            E[e, C_ACC] = acc[e]
            E[e, C_CW] = 0.0
            E[e, C_LAST] = t0
            if rule == RULE_NORMALIZED and e < n_pen and e % K == 0:
                E[e, C_XMAX] = xmax[e // K]


@numba.njit(**_opts)
def catch_up_touched(E, rtouched, nrt, n_pen, K, st, hp, rule):  # pragma: no cover - compiled
    """An adaptive rule's lazy decay of the round's touched penalised entries, brought
    up to the last step (O(touched)); the untouched entries have a zero coordinate
    weight, so the average does not take them from this group."""
    lam, eps, t = hp[H_LAM], hp[H_EPS], st[S_T]
    if not (lam > 0 and rule != RULE_SGD):
        return
    eta = _rate(t, hp)
    N = st[S_N]
    nag = eta * math.sqrt(st[S_WSUM] / N) if rule == RULE_NORMALIZED and N > 0 else eta
    for q in range(nrt):
        e = rtouched[q]
        if e < n_pen:
            xm = E[(e // K) * K, C_XMAX] if rule == RULE_NORMALIZED else 1.0
            _catch_up(e, t, xm, E, eta, nag, lam, eps, rule)
