"""Alternating least squares kernels of matrix factorization (``solver="als"``).

Both models whose objective is quadratic in each side's factors take them: explicit
ratings (squared error with biases) and confidence-weighted least squares (``wls``,
Hu, Koren and Volinsky 2008).  With one side fixed, every row of the other side is
the minimiser of its own quadratic,

.. math::

    A_u x_u = b_u, \\qquad A_u = G + \\sum_{i \\in I(u)} w_{ui} z_i z_i^\\top + n_u \\Lambda,
    \\qquad b_u = \\sum_{i \\in I(u)} t_{ui} z_i,

where, for explicit ratings, ``z_i = [q_i, 1]`` (the last entry multiplies the user's
bias), ``w = 1``, ``t = r - mu - b_i``, ``G = alpha_bias e_k e_k^T`` (the bias's
penalty, once per user) and ``Lambda = diag(alpha, ..., alpha, 0)``; for wls
``z_i = q_i``, ``w = c - 1 = confidence_scale * r``, ``t = c``, ``G = Q^T Q`` (the
all-pairs term) and ``Lambda = alpha I``.  ``n_u`` is the user's number of ratings (the
weighted-lambda rule of the factors: alternating least squares minimises the
objective of the gradient steps, :mod:`dask_dgd.recommender._objective`).

- :func:`solve_users`: a shard's users, each by a few conjugate-gradient steps on its
  own system from its current row (where the users live), as the ``implicit``
  library's solver does: at 100 components they cost a fraction of exact solves and
  ranked as well in our runs;
- :func:`item_matvec`: the observed part of ``A_i d_i`` for every item of an item table
  ``D`` (a conjugate-gradient direction), summed over a shard's ratings (the item
  biases' penalty, once per item, is added on the driver); the
  item-side systems are sums over users, which live on different shards, so the items
  are solved by conjugate gradients whose products are tree-reduced like gradients
  (the Gram part ``D G`` is added on the driver).

Both are Numba loops over NumPy arrays (the shards of other array namespaces are
refused by the solver before training).
"""

import threading

import numba
import numpy as np

__all__ = ["factor_preconditioner", "item_matvec", "item_order", "kernel_threads", "solve_users", "user_ranges"]

_jit = numba.njit(cache=True, nogil=True, boundscheck=False)


@_jit
def _user_matvec(lo, hi, gi, r, V, gram, lam, lam_b, conf, explicit, x, out):  # pragma: no cover - compiled
    """``out = A_u x`` for the user whose ratings are ``lo:hi``."""
    width = x.shape[0]
    k = width - 1 if explicit else width
    for a in range(width):
        s = 0.0
        if not explicit:
            for c in range(width):
                s += gram[a, c] * x[c]
        out[a] = s + (lam_b if explicit and a == k else float(hi - lo) * lam) * x[a]
    for j in range(lo, hi):
        i = gi[j]
        s = 0.0
        for f in range(k):
            s += V[i, f] * x[f]
        if explicit:
            s += x[k]
        else:
            s *= conf * r[j]
        for f in range(k):
            out[f] += s * V[i, f]
        if explicit:
            out[k] += s


@_jit
def _cg_users(uptr, gi, r, V, gram, mu, lam, lam_b, conf, explicit, steps, pre, U):  # pragma: no cover - compiled
    width = U.shape[1]
    k = width - 1 if explicit else width
    res = np.empty(width)
    z = np.empty(width)
    d = np.empty(width)
    Ad = np.empty(width)
    for u in range(uptr.shape[0] - 1):
        lo, hi = uptr[u], uptr[u + 1]
        x = U[u]
        _user_matvec(lo, hi, gi, r, V, gram, lam, lam_b, conf, explicit, x, Ad)
        for a in range(width):
            res[a] = -Ad[a]
        for j in range(lo, hi):  # + b
            i = gi[j]
            t = r[j] - mu - V[i, k] if explicit else 1.0 + conf * r[j]
            for f in range(k):
                res[f] += t * V[i, f]
            if explicit:
                res[k] += t
        # preconditioned by diag(pre, ..., pre, 1) (explicit; pre = 1 for wls): the
        # factors' diagonal per rating against the bias's, see solve_users
        rs = 0.0
        for a in range(width):
            z[a] = res[a] / pre if a < k else res[a]
            d[a] = z[a]
            rs += res[a] * z[a]
        for _ in range(steps):
            if rs <= 0.0:
                break
            _user_matvec(lo, hi, gi, r, V, gram, lam, lam_b, conf, explicit, d, Ad)
            dad = 0.0
            for a in range(width):
                dad += d[a] * Ad[a]
            if dad <= 0.0:
                break
            step = rs / dad
            rs_next = 0.0
            for a in range(width):
                x[a] += step * d[a]
                res[a] -= step * Ad[a]
                z[a] = res[a] / pre if a < k else res[a]
                rs_next += res[a] * z[a]
            beta = rs_next / rs
            for a in range(width):
                d[a] = z[a] + beta * d[a]
            rs = rs_next


@numba.njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _add_rating(j, i, k, lu, r, U, D, lam, conf, explicit, M, touched):  # pragma: no cover - compiled
    """Rating ``j`` (of item ``i``)'s terms in item ``i``'s row of ``M``: the product
    with the item's row of ``D``, weighted, times the user's row, plus the penalty."""
    u = lu[j]
    s = 0.0
    for f in range(k):
        s += U[u, f] * D[i, f]
    if explicit:
        s += D[i, k]
        w = 1.0
    else:
        w = conf * r[j]
    s *= w
    for f in range(k):
        M[i, f] += s * U[u, f] + lam * D[i, f]
    if explicit:
        M[i, k] += s  # (the bias's penalty, once per item, is the driver's)
    touched[i] = True


@_jit
def _item_matvec(lu, gi, r, U, D, lam, lam_b, conf, explicit, M, touched):  # pragma: no cover - compiled
    width = D.shape[1]
    k = width - 1 if explicit else width
    for j in range(gi.shape[0]):
        _add_rating(j, gi[j], k, lu, r, U, D, lam, conf, explicit, M, touched)


@_jit
def _item_matvec_items(order, iptr, lo, hi, lu, gi, r, U, D, lam, lam_b, conf, explicit, M,
                       touched):  # pragma: no cover - compiled
    """:func:`_item_matvec` for the items ``lo:hi``, each over its ratings in their order
    (``order``: the ratings sorted by item, stably; ``iptr``: each item's first): every
    item adds the same terms in the same order as there, so ``M`` is the same bit for bit."""
    width = D.shape[1]
    k = width - 1 if explicit else width
    for i in range(lo, hi):
        for jj in range(iptr[i], iptr[i + 1]):
            _add_rating(order[jj], i, k, lu, r, U, D, lam, conf, explicit, M, touched)


def factor_preconditioner(V, alpha):
    """The conjugate-gradient preconditioner of explicit ratings' systems: a factor
    column's diagonal per rating, ``alpha`` plus the mean square of the other side's
    factors (``V`` without its bias column), against 1 for the bias column.  Both scale
    with the ratings' units, so the steps, and the fit, do not depend on them."""
    k = V.shape[1] - 1
    mean_square = float(np.mean(np.square(V[:, :k]))) if V.shape[0] and k else 0.0
    pre = float(alpha) + mean_square
    return pre if np.isfinite(pre) and pre > 0 else 1.0


def solve_users(uptr, gi, r, V, gram, mu, alpha, alpha_bias, confidence_scale, explicit, U, cg_steps):
    """Every user's row after ``cg_steps`` conjugate-gradient steps on its system, from
    its current row in ``U`` (users ordered as ``uptr``), given the item table ``V``;
    ``gram``: ``V^T V`` for wls (ignored for explicit ratings).  A step costs
    ``n_u width + width^2`` flops per user (an exact factorisation ``width^3 / 3``).
    Returns a new user table (users x width, the bias last for explicit ratings)."""
    width = V.shape[1]  # explicit: [p, b_u] is as wide as [q, b_i]
    if gram is None:  # (read only for wls: no width x width zeros for explicit ratings)
        g = np.zeros((0, 0) if explicit else (width, width))
    else:
        g = np.ascontiguousarray(gram, dtype=np.float64)
    out = np.array(U, dtype=np.float64, order="C", copy=True)
    V = np.ascontiguousarray(V)
    pre = factor_preconditioner(V, alpha) if explicit else 1.0
    args = (g, float(mu), float(alpha), float(alpha_bias), float(confidence_scale), bool(explicit), int(cg_steps),
            pre)
    cuts = user_ranges(uptr, kernel_threads())
    if len(cuts) == 2:
        _cg_users(uptr, gi, r, V, *args, out)
        return out
    # each range of users on a thread (the kernel releases the GIL); every user's
    # solve is its own, so the rows are the same, bit for bit, for any number of threads
    list(_pool().map(lambda ab: _cg_users(uptr[ab[0] : ab[1] + 1], gi, r, V, *args, out[ab[0] : ab[1]]),
                     zip(cuts[:-1], cuts[1:])))
    return out


#: Ratings per thread below which a shard's users are solved on one thread (a thread's
#: start and join cost about what a few thousand ratings' solves do).
MIN_RATINGS_PER_THREAD = 20_000
_POOL = None
_POOL_LOCK = threading.Lock()


def kernel_threads():
    """The threads the kernels may use: on a Dask worker, the worker's threads; in
    process, this machine's cores (``os.sched_getaffinity``)."""
    import os

    try:
        from distributed import get_worker

        return max(1, int(get_worker().state.nthreads))
    except (ImportError, ValueError, AttributeError):
        return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def user_ranges(uptr, threads):
    """Cuts ``[0, a, b, ..., n_users]`` of the users (or items) into at most ``threads``
    contiguous ranges of about equal ratings (``uptr``: each one's first rating), at
    least :data:`MIN_RATINGS_PER_THREAD` ratings each."""
    n_users, n = uptr.shape[0] - 1, int(uptr[-1])
    parts = max(1, min(int(threads), n // MIN_RATINGS_PER_THREAD, n_users))
    if parts == 1:
        return [0, n_users]
    inner = np.searchsorted(uptr, np.arange(1, parts) * (n / parts)).tolist()
    return sorted({0, n_users, *(min(max(c, 0), n_users) for c in inner)})


def _pool():
    global _POOL
    if _POOL is None:
        with _POOL_LOCK:  # (two worker threads at once would each make one)
            if _POOL is None:
                from concurrent.futures import ThreadPoolExecutor

                _POOL = ThreadPoolExecutor(thread_name_prefix="dgd-als")
    return _POOL


def item_matvec(lu, gi, r, U, D, alpha, alpha_bias, confidence_scale, explicit, M, touched, by_item=None):
    """Add the observed part of ``A_i d_i`` over these ratings to ``M`` (items x width)
    and flag the items touched.

    ``by_item`` (:func:`item_order`, or None): with it and several threads
    (:func:`kernel_threads`), ranges of items of about equal ratings, each on a thread;
    every item adds the same terms in the same order, so ``M`` is the same bit for bit."""
    U, D = np.ascontiguousarray(U), np.ascontiguousarray(D)
    args = (float(alpha), float(alpha_bias), float(confidence_scale), bool(explicit), M, touched)
    cuts = [0, 0] if by_item is None else user_ranges(by_item[1], kernel_threads())
    if len(cuts) == 2:
        _item_matvec(lu, gi, r, U, D, *args)
        return
    order, iptr = by_item
    list(_pool().map(lambda ab: _item_matvec_items(order, iptr, ab[0], ab[1], lu, gi, r, U, D, *args),
                     zip(cuts[:-1], cuts[1:])))


def item_order(gi, n_items):
    """The ratings sorted by item, stably (in their own order within an item), and each
    item's first in that order: what :func:`item_matvec` needs to split the items over
    threads."""
    order = np.argsort(gi, kind="stable")
    return order, np.searchsorted(gi[order], np.arange(n_items + 1)).astype(np.int64)
