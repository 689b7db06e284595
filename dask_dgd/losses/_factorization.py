"""Matrix-factorization objectives: loss and gradient *sums* over a shard's ratings.

One kernel per model, each a single pass over the given ratings:

- ``explicit``: squared error of ``mu + b_u + b_i + p_u . q_i`` against the rating;
- ``bpr``: Bayesian personalised ranking, ``softplus(-(x_ui - x_uj))`` with ``x = b_i + p_u . q_i``
  and one negative item ``j`` drawn per observed pair;
- ``wls``: the observed-pair part of confidence-weighted least squares (Hu, Koren and
  Volinsky 2008): ``c_ui (1 - x_ui)^2 - x_ui^2`` with ``c = 1 + confidence_scale * r``; the
  all-pairs part ``sum_{u,i} x_ui^2 = sum_u p_u^T (Q^T Q) p_u`` is added by the caller with
  :func:`wls_all_pairs`.

Every observed pair also adds its L2 terms ``alpha (|p_u|^2 + |q_i|^2)`` (and the bias
terms), so regularisation is weighted by how many ratings a user or item has (the
"weighted-lambda" rule of Spark's ALS).  Parameters are float64 matrices: users
``U`` (local users x width) and items ``V`` (all items x width); with biases, the last
column holds the bias.  Gradients are *added* to ``gU``/``gV`` and the rows of ``gV``
that were touched are flagged in ``touched``; losses are returned as sums (the caller
divides once, at the root of the reduction).

Each public function has two implementations, chosen by the namespace of its arrays:

- NumPy arrays: module-level Numba functions (compiled on first use in a process and
  cached on disk, so a new worker loads them instead of compiling), one loop over the
  ratings with the gradients added in place;
- any other array-API namespace (CuPy on a GPU; ``array_api_strict`` in the tests):
  whole-array code through :func:`~dask_dgd._backend.get_namespace` only.  The rows of
  each rating are gathered with ``take``; the per-rating gradient rows are summed per
  user and per item without a scatter-add: the rows are sorted by their user (already
  so) or item, summed with one ``cumulative_sum``, and each user's or item's sum is the
  difference of that running sum at the ends of its run (found with ``searchsorted``).
  The error of such a difference is about ``eps`` times the running sum there, not
  times the user's or item's own sum: in float64 the gradients agree with the Numba
  kernels to ~1e-15 of their largest entry on a few hundred ratings and ~1e-13 on
  70 000 (an entry that nearly cancels can differ by more, relative to itself).
  Negative items are drawn and redrawn exactly as in the Numba kernel, the "user has
  rated it" test being a ``searchsorted`` in the shard's sorted rating keys.

Randomness (mini-batch membership, negative items) comes from a counter-based hash of
a rating's key (``user * n_items + item`` in global indices), the seed and the step, so
it does not depend on which shard holds the rating, nor on the implementation.
"""

import array_api_compat
import numpy as np

from .._backend import get_namespace
from .._random import keyed, mix64, mix64_jit

__all__ = [
    "batch_buckets",
    "bpr_sums",
    "explicit_sums",
    "wls_all_pairs",
    "wls_sums",
]

#: Redraws of a negative item that the user has already rated before one is accepted.
NEGATIVE_TRIES = 8


import numba  # noqa: E402 - the kernels below are compiled on first use, cached on disk

_jit = numba.njit(cache=True, nogil=True, boundscheck=False)


@_jit
def _buckets(key, seed, epoch, n_buckets):  # pragma: no cover - compiled
    out = np.empty(key.shape[0], dtype=np.int64)
    salt = mix64_jit(np.uint64(seed) ^ mix64_jit(np.uint64(epoch) + np.uint64(0x5851F42D4C957F2D)))
    nb = np.uint64(n_buckets)
    for j in range(key.shape[0]):
        out[j] = np.int64(mix64_jit(key[j] ^ salt) % nb)
    return out


@_jit
def _dot_reg(U, V, u, i, k):  # pragma: no cover - compiled
    """``(p_u . q_i, |p_u|^2 + |q_i|^2)`` over the first ``k`` columns of the rows."""
    dot = 0.0
    reg = 0.0
    for f in range(k):
        dot += U[u, f] * V[i, f]
        reg += U[u, f] * U[u, f] + V[i, f] * V[i, f]
    return dot, reg


@_jit
def _add_pair_gradient(U, V, u, i, k, g, lam, gU, gV):  # pragma: no cover - compiled
    """Add ``g * q_i + 2 lam p_u`` to ``gU[u]`` and ``g * p_u + 2 lam q_i`` to ``gV[i]``
    (the first ``k`` columns): a pair's factor gradients, ``g`` the derivative of its
    loss with respect to ``p_u . q_i``."""
    for f in range(k):
        pu = U[u, f]
        qi = V[i, f]
        gU[u, f] += g * qi + 2.0 * lam * pu
        gV[i, f] += g * pu + 2.0 * lam * qi


@_jit
def _explicit(lu, gi, r, rows, U, V, mu, lam, lam_b, gU, gV, touched):  # pragma: no cover - compiled
    k = V.shape[1] - 1
    loss = 0.0
    sq = 0.0
    for j in rows:
        u = lu[j]
        i = gi[j]
        dot, reg = _dot_reg(U, V, u, i, k)
        e = mu + U[u, k] + V[i, k] + dot - r[j]
        sq += e * e
        loss += e * e + lam * reg + lam_b * (U[u, k] * U[u, k] + V[i, k] * V[i, k])
        g = 2.0 * e
        _add_pair_gradient(U, V, u, i, k, g, lam, gU, gV)
        gU[u, k] += g + 2.0 * lam_b * U[u, k]
        gV[i, k] += g + 2.0 * lam_b * V[i, k]
        touched[i] = True
    return loss, sq


@_jit
def _seen(gi, uptr, u, item):  # pragma: no cover - compiled
    lo = uptr[u]
    hi = uptr[u + 1]
    while lo < hi:
        mid = (lo + hi) // 2
        if gi[mid] < item:
            lo = mid + 1
        else:
            hi = mid
    return lo < uptr[u + 1] and gi[lo] == item


@_jit
def _bpr(lu, gi, key, uptr, rows, U, V, lam, lam_b, seed, step, gU, gV, touched):  # pragma: no cover - compiled
    k = U.shape[1]
    n_items = np.uint64(V.shape[0])
    salt = mix64_jit(np.uint64(seed) ^ mix64_jit(np.uint64(step) + np.uint64(0x2545F4914F6CDD1D)))
    loss = 0.0
    for j in rows:
        u = lu[j]
        i = gi[j]
        h = mix64_jit(key[j] ^ salt)
        neg = np.int64(h % n_items)
        for _ in range(NEGATIVE_TRIES):
            if not _seen(gi, uptr, u, neg):
                break
            h = mix64_jit(h)
            neg = np.int64(h % n_items)
        x = V[i, k] - V[neg, k]
        reg = 0.0
        for f in range(k):
            x += U[u, f] * (V[i, f] - V[neg, f])
            reg += U[u, f] * U[u, f] + V[i, f] * V[i, f] + V[neg, f] * V[neg, f]
        # softplus(-x) and its derivative -sigmoid(-x), without overflow
        if x > 0:
            ex = np.exp(-x)
            sp = np.log1p(ex)
            s = ex / (1.0 + ex)
        else:
            ex = np.exp(x)
            sp = -x + np.log1p(ex)
            s = 1.0 / (1.0 + ex)
        loss += sp + lam * reg + lam_b * (V[i, k] * V[i, k] + V[neg, k] * V[neg, k])
        g = -s
        for f in range(k):
            pu = U[u, f]
            qi = V[i, f]
            qn = V[neg, f]
            gU[u, f] += g * (qi - qn) + 2.0 * lam * pu
            gV[i, f] += g * pu + 2.0 * lam * qi
            gV[neg, f] += -g * pu + 2.0 * lam * qn
        gV[i, k] += g + 2.0 * lam_b * V[i, k]
        gV[neg, k] += -g + 2.0 * lam_b * V[neg, k]
        touched[i] = True
        touched[neg] = True
    return loss, 0.0


@_jit
def _wls(lu, gi, r, rows, U, V, lam, conf, gU, gV, touched):  # pragma: no cover - compiled
    k = U.shape[1]
    loss = 0.0
    sq = 0.0
    for j in rows:
        u = lu[j]
        i = gi[j]
        c = 1.0 + conf * r[j]
        x, reg = _dot_reg(U, V, u, i, k)
        loss += c * (1.0 - x) * (1.0 - x) - x * x + lam * reg
        sq += (1.0 - x) * (1.0 - x)
        g = -2.0 * c * (1.0 - x) - 2.0 * x
        _add_pair_gradient(U, V, u, i, k, g, lam, gU, gV)
        touched[i] = True
    return loss, sq


# ------------------------------------------------------------ array-API versions
# The same arithmetic as the Numba kernels above, on whole arrays of any array-API
# namespace (no NumPy call touches them).  SplitMix64 is dask_dgd._random's; the salts
# are the literals of _buckets and _bpr.
_EPOCH_SALT = 0x5851F42D4C957F2D
_STEP_SALT = 0x2545F4914F6CDD1D


def _is_numpy(xp):
    return array_api_compat.is_numpy_namespace(xp)


def _u64(xp, value, like):
    """A uint64 scalar array on the device of ``like`` (no Python-int promotion rules)."""
    return xp.asarray(value, dtype=xp.uint64, device=array_api_compat.device(like))


def _buckets_xp(xp, key, seed, epoch, n_buckets):
    key = xp.astype(key, xp.uint64)
    h = mix64(key ^ _u64(xp, keyed(seed, epoch, _EPOCH_SALT), key), xp)
    return xp.astype(h % _u64(xp, n_buckets, key), xp.int64)


def _add_rows(xp, G, seg, values, touched=None):
    """``G[seg[t]] += values[t]`` for every row ``t`` (and ``touched[seg] = True``),
    without a scatter: the rows are sorted by ``seg`` (unless they are: the users of
    increasing rows), summed with one cumulative sum, and each segment's sum is the
    difference of the running sum at the ends of its run."""
    if not bool(xp.all(seg[1:] >= seg[:-1])):
        order = xp.argsort(seg, stable=True)
        seg = xp.take(seg, order)
        values = xp.take(values, order, axis=0)
    running = xp.cumulative_sum(values, axis=0, include_initial=True)
    ids = xp.arange(G.shape[0], dtype=seg.dtype, device=array_api_compat.device(seg))
    lo = xp.searchsorted(seg, ids, side="left")
    hi = xp.searchsorted(seg, ids, side="right")
    G += xp.take(running, hi, axis=0) - xp.take(running, lo, axis=0)
    if touched is not None:
        touched |= hi > lo


def _explicit_xp(xp, lu, gi, r, rows, U, V, mu, lam, lam_b, gU, gV, touched):
    k = V.shape[1] - 1
    u = xp.take(lu, rows)
    i = xp.take(gi, rows)
    Ur = xp.take(U, u, axis=0)
    Vr = xp.take(V, i, axis=0)
    p, q, bu, bi = Ur[:, :k], Vr[:, :k], Ur[:, k:], Vr[:, k:]
    e = mu + bu + bi + xp.sum(p * q, axis=1, keepdims=True) - xp.take(r, rows)[:, None]
    reg = xp.sum(p * p + q * q, axis=1, keepdims=True)
    loss = xp.sum(e * e + lam * reg + lam_b * (bu * bu + bi * bi))
    sq = xp.sum(e * e)
    g = 2.0 * e
    _add_rows(xp, gU, u, xp.concat([g * q + 2.0 * lam * p, g + 2.0 * lam_b * bu], axis=1))
    _add_rows(xp, gV, i, xp.concat([g * p + 2.0 * lam * q, g + 2.0 * lam_b * bi], axis=1), touched=touched)
    return float(loss), float(sq)


def _negatives_xp(xp, kj, i, key, n_items, seed, step):
    """The negative item of every rating (keys ``kj``, items ``i``): the Numba draw and
    redraws, with "the user has rated it" looked up in the sorted shard keys ``key``."""
    n = _u64(xp, n_items, kj)
    h = mix64(kj ^ _u64(xp, keyed(seed, step, _STEP_SALT), kj), xp)
    neg = h % n
    user_base = kj - xp.astype(i, xp.uint64)  # user * n_items
    last = max(key.shape[0] - 1, 0)
    redraw = xp.ones(kj.shape, dtype=xp.bool, device=array_api_compat.device(kj))
    for _ in range(NEGATIVE_TRIES):
        cand = user_base + neg
        pos = xp.searchsorted(key, cand)
        seen = xp.take(key, xp.clip(pos, 0, last)) == cand  # past the last key: not equal to it
        redraw = redraw & seen
        h = xp.where(redraw, mix64(h, xp), h)
        neg = h % n
    return xp.astype(neg, xp.int64)


def _bpr_xp(xp, lu, gi, key, rows, U, V, lam, lam_b, seed, step, gU, gV, touched):
    k = U.shape[1]
    u = xp.take(lu, rows)
    i = xp.astype(xp.take(gi, rows), xp.int64)
    neg = _negatives_xp(xp, xp.take(key, rows), i, key, V.shape[0], seed, step)
    p = xp.take(U, u, axis=0)
    Vi = xp.take(V, i, axis=0)
    Vn = xp.take(V, neg, axis=0)
    qi, qn, bi, bn = Vi[:, :k], Vn[:, :k], Vi[:, k:], Vn[:, k:]
    x = bi - bn + xp.sum(p * (qi - qn), axis=1, keepdims=True)
    reg = xp.sum(p * p + qi * qi + qn * qn, axis=1, keepdims=True)
    # softplus(-x) and its derivative -sigmoid(-x), without overflow (as in _bpr)
    ex = xp.exp(-xp.abs(x))
    sp = xp.log1p(ex) + (xp.abs(x) - x) / 2.0  # + max(-x, 0)
    g = -xp.where(x > 0, ex, xp.ones_like(ex)) / (1.0 + ex)
    loss = xp.sum(sp + lam * reg + lam_b * (bi * bi + bn * bn))
    _add_rows(xp, gU, u, g * (qi - qn) + 2.0 * lam * p)
    pos_rows = xp.concat([g * p + 2.0 * lam * qi, g + 2.0 * lam_b * bi], axis=1)
    neg_rows = xp.concat([-g * p + 2.0 * lam * qn, -g + 2.0 * lam_b * bn], axis=1)
    _add_rows(xp, gV, xp.concat([i, neg]), xp.concat([pos_rows, neg_rows], axis=0), touched=touched)
    return float(loss), 0.0


def _wls_xp(xp, lu, gi, r, rows, U, V, lam, conf, gU, gV, touched):
    u = xp.take(lu, rows)
    i = xp.take(gi, rows)
    p = xp.take(U, u, axis=0)
    q = xp.take(V, i, axis=0)
    c = 1.0 + conf * xp.take(r, rows)[:, None]
    x = xp.sum(p * q, axis=1, keepdims=True)
    reg = xp.sum(p * p + q * q, axis=1, keepdims=True)
    loss = xp.sum(c * (1.0 - x) * (1.0 - x) - x * x + lam * reg)
    sq = xp.sum((1.0 - x) * (1.0 - x))
    g = -2.0 * c * (1.0 - x) - 2.0 * x
    _add_rows(xp, gU, u, g * q + 2.0 * lam * p)
    _add_rows(xp, gV, i, g * p + 2.0 * lam * q, touched=touched)
    return float(loss), float(sq)


# -------------------------------------------------------------------- public API
def batch_buckets(key, seed, epoch, n_buckets):
    """The mini-batch (``0 .. n_buckets - 1``) of every rating in ``epoch``.

    A rating's batch depends only on its key, the seed and the epoch, so the batches of
    an epoch are the same sets of ratings however the ratings are sharded.  Returns an
    int64 array of the namespace (and device) of ``key``.
    """
    xp = get_namespace(key)
    if _is_numpy(xp):
        return _buckets(np.ascontiguousarray(key, dtype=np.uint64), int(seed), int(epoch), int(n_buckets))
    return _buckets_xp(xp, key, int(seed), int(epoch), int(n_buckets))


def explicit_sums(lu, gi, r, rows, U, V, mu, alpha, alpha_bias, gU, gV, touched):
    """Explicit-rating sums over ``rows``: returns ``(loss_sum, squared_error_sum)``.

    ``U`` is (local users, k + 1) and ``V`` (items, k + 1); the last column is the bias.
    The loss of a rating is ``e^2 + alpha (|p_u|^2 + |q_i|^2) + alpha_bias (b_u^2 + b_i^2)``
    with ``e = mu + b_u + b_i + p_u . q_i - r``.
    """
    xp = get_namespace(lu, gi, r, rows, U, V, gU, gV, touched)
    if _is_numpy(xp):
        return _explicit(lu, gi, r, rows, U, V, float(mu), float(alpha), float(alpha_bias), gU, gV, touched)
    if rows.shape[0] == 0:
        return 0.0, 0.0
    return _explicit_xp(xp, lu, gi, r, rows, U, V, float(mu), float(alpha), float(alpha_bias), gU, gV, touched)


def bpr_sums(lu, gi, key, uptr, rows, U, V, alpha, alpha_bias, seed, step, gU, gV, touched):
    """BPR sums over ``rows``: returns ``(loss_sum, 0.0)``.

    ``U`` is (local users, k), ``V`` (items, k + 1) with the item bias last.  For each
    observed pair one negative item is drawn uniformly from all items by hashing the
    rating's key with ``seed`` and ``step``; an item the user has rated is redrawn (up to
    ``NEGATIVE_TRIES`` times).  The Numba version looks the item up in ``gi`` sorted
    within each user's range ``uptr[u]:uptr[u + 1]``, the array-API version in ``key``
    sorted (``user * n_items + item``); the shard's ratings, sorted by (user, item),
    are both.
    """
    xp = get_namespace(lu, gi, key, uptr, rows, U, V, gU, gV, touched)
    if _is_numpy(xp):
        return _bpr(
            lu, gi, key, uptr, rows, U, V, float(alpha), float(alpha_bias), int(seed), int(step), gU, gV, touched
        )
    if rows.shape[0] == 0:
        return 0.0, 0.0
    return _bpr_xp(xp, lu, gi, key, rows, U, V, float(alpha), float(alpha_bias), int(seed), int(step), gU, gV,
                   touched)


def wls_sums(lu, gi, r, rows, U, V, alpha, confidence_scale, gU, gV, touched):
    """Observed-pair sums of confidence-weighted least squares: ``(loss_sum, sum (1 - x)^2)``."""
    xp = get_namespace(lu, gi, r, rows, U, V, gU, gV, touched)
    if _is_numpy(xp):
        return _wls(lu, gi, r, rows, U, V, float(alpha), float(confidence_scale), gU, gV, touched)
    if rows.shape[0] == 0:
        return 0.0, 0.0
    return _wls_xp(xp, lu, gi, r, rows, U, V, float(alpha), float(confidence_scale), gU, gV, touched)


def wls_all_pairs(P, gram_other, scale):
    """The all-pairs term for one side: ``scale * sum_u p_u^T G p_u`` and its gradient
    ``2 scale P G`` (``G`` is the Gram matrix of the other side's factors), in the
    namespace of ``P``."""
    xp = get_namespace(P, gram_other)
    PG = P @ gram_other
    return scale * float(xp.sum(PG * P)), 2.0 * scale * PG
