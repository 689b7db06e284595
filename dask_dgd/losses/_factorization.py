"""Matrix-factorization objectives: loss and gradient *sums* over a shard's ratings.

One kernel per model, each a single pass over the given ratings (module-level Numba
functions, compiled on first use in a process and cached on disk, so a new worker
loads them instead of compiling):

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

Randomness (mini-batch membership, negative items) comes from a counter-based hash of
a rating's key (``user * n_items + item`` in global indices), the seed and the step, so
it does not depend on which shard holds the rating.
"""

import numpy as np

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
def _mix64(z):  # pragma: no cover - compiled
    """SplitMix64 finaliser: a uint64 -> uint64 bijection with good avalanche."""
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@_jit
def _buckets(key, seed, epoch, n_buckets):  # pragma: no cover - compiled
    out = np.empty(key.shape[0], dtype=np.int64)
    salt = _mix64(np.uint64(seed) ^ _mix64(np.uint64(epoch) + np.uint64(0x5851F42D4C957F2D)))
    nb = np.uint64(n_buckets)
    for j in range(key.shape[0]):
        out[j] = np.int64(_mix64(key[j] ^ salt) % nb)
    return out


@_jit
def _explicit(lu, gi, r, rows, U, V, mu, lam, lam_b, gU, gV, touched):  # pragma: no cover - compiled
    k = V.shape[1] - 1
    loss = 0.0
    sq = 0.0
    for t in range(rows.shape[0]):
        j = rows[t]
        u = lu[j]
        i = gi[j]
        dot = 0.0
        reg = 0.0
        for f in range(k):
            dot += U[u, f] * V[i, f]
            reg += U[u, f] * U[u, f] + V[i, f] * V[i, f]
        e = mu + U[u, k] + V[i, k] + dot - r[j]
        sq += e * e
        loss += e * e + lam * reg + lam_b * (U[u, k] * U[u, k] + V[i, k] * V[i, k])
        g = 2.0 * e
        for f in range(k):
            pu = U[u, f]
            qi = V[i, f]
            gU[u, f] += g * qi + 2.0 * lam * pu
            gV[i, f] += g * pu + 2.0 * lam * qi
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
    salt = _mix64(np.uint64(seed) ^ _mix64(np.uint64(step) + np.uint64(0x2545F4914F6CDD1D)))
    loss = 0.0
    for t in range(rows.shape[0]):
        j = rows[t]
        u = lu[j]
        i = gi[j]
        h = _mix64(key[j] ^ salt)
        neg = np.int64(h % n_items)
        for _ in range(NEGATIVE_TRIES):
            if not _seen(gi, uptr, u, neg):
                break
            h = _mix64(h)
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
    for t in range(rows.shape[0]):
        j = rows[t]
        u = lu[j]
        i = gi[j]
        c = 1.0 + conf * r[j]
        x = 0.0
        reg = 0.0
        for f in range(k):
            x += U[u, f] * V[i, f]
            reg += U[u, f] * U[u, f] + V[i, f] * V[i, f]
        loss += c * (1.0 - x) * (1.0 - x) - x * x + lam * reg
        sq += (1.0 - x) * (1.0 - x)
        g = -2.0 * c * (1.0 - x) - 2.0 * x
        for f in range(k):
            pu = U[u, f]
            qi = V[i, f]
            gU[u, f] += g * qi + 2.0 * lam * pu
            gV[i, f] += g * pu + 2.0 * lam * qi
        touched[i] = True
    return loss, sq


def batch_buckets(key, seed, epoch, n_buckets):
    """The mini-batch (``0 .. n_buckets - 1``) of every rating in ``epoch``.

    A rating's batch depends only on its key, the seed and the epoch, so the batches of
    an epoch are the same sets of ratings however the ratings are sharded.
    """
    return _buckets(np.ascontiguousarray(key, dtype=np.uint64), int(seed), int(epoch), int(n_buckets))


def explicit_sums(lu, gi, r, rows, U, V, mu, alpha, alpha_bias, gU, gV, touched):
    """Explicit-rating sums over ``rows``: returns ``(loss_sum, squared_error_sum)``.

    ``U`` is (local users, k + 1) and ``V`` (items, k + 1); the last column is the bias.
    The loss of a rating is ``e^2 + alpha (|p_u|^2 + |q_i|^2) + alpha_bias (b_u^2 + b_i^2)``
    with ``e = mu + b_u + b_i + p_u . q_i - r``.
    """
    return _explicit(lu, gi, r, rows, U, V, float(mu), float(alpha), float(alpha_bias), gU, gV, touched)


def bpr_sums(lu, gi, key, uptr, rows, U, V, alpha, alpha_bias, seed, step, gU, gV, touched):
    """BPR sums over ``rows``: returns ``(loss_sum, 0.0)``.

    ``U`` is (local users, k), ``V`` (items, k + 1) with the item bias last.  For each
    observed pair one negative item is drawn uniformly from all items by hashing the
    rating's key with ``seed`` and ``step``; an item the user has rated is redrawn (up to
    ``NEGATIVE_TRIES`` times), which needs ``gi`` sorted within each user's range
    ``uptr[u]:uptr[u + 1]``.
    """
    return _bpr(
        lu, gi, key, uptr, rows, U, V, float(alpha), float(alpha_bias), int(seed), int(step), gU, gV, touched
    )


def wls_sums(lu, gi, r, rows, U, V, alpha, confidence_scale, gU, gV, touched):
    """Observed-pair sums of confidence-weighted least squares: ``(loss_sum, sum (1 - x)^2)``."""
    return _wls(lu, gi, r, rows, U, V, float(alpha), float(confidence_scale), gU, gV, touched)


def wls_all_pairs(P, gram_other, scale):
    """The all-pairs term for one side: ``scale * sum_u p_u^T G p_u`` and its gradient
    ``2 scale P G`` (``G`` is the Gram matrix of the other side's factors)."""
    PG = P @ gram_other
    return scale * float(np.sum(PG * P)), 2.0 * scale * PG
