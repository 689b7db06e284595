"""The held-out ranking of an implicit model, computed on a rating shard.

``alpha="auto"`` of :class:`~dask_dgd.ImplicitMatrixFactorization` scores each fit of
its path by how well it ranks each user's held-out pairs (the shard's ``val`` rows, see
:func:`~._shards.holdout_rows`) among the items the user has not trained on, against
the popularity ranking, paired user by user.  :func:`ranking_sums` runs where a shard
lives and sends back five numbers; :func:`summarise` turns the shards' sums into
means and the paired standard error.

A user's ranking: the scores ``U[user] @ V.T (+ bias)`` of every item, the user's
training items left out (scored ``-inf``), best first, ties by item index; its NDCG@k
is that of :func:`~dask_dgd.recommender.ndcg_at_k` (binary relevance: the user's
held-out items; the ideal DCG over ``min(#relevant, k)``).  Popularity ranks by the
items' training pairs, the same way.
"""

import math

import numpy as np

from .._backend import to_numpy
from .._random import keyed, mix64, uniform

__all__ = ["BLOCK_BYTES", "RANKING_K", "VAL_MAX_USERS", "ranking_sums", "summarise", "top_k", "val_rate",
           "val_users"]

#: The cut-off of the held-out ranking (NDCG@k).
RANKING_K = 10
#: About how many users the held-out ranking evaluates (over all shards) when more
#: have a held-out pair: each is then evaluated with probability :func:`val_rate`, so
#: the count evaluated is about this many on average, not a cap (it may be a little
#: more or less).
VAL_MAX_USERS = 5000
#: The size of a block of users' score matrix (float64), at most (one user at least).
BLOCK_BYTES = 32 * 2**20
#: Separates the user sampling's hash from the library's other streams of a seed.
_SAMPLE_STREAM = 0x52414E4B  # "RANK"


def val_users(shard):
    """The number of the shard's users with a held-out pair (the users
    :func:`ranking_sums` evaluates at ``rate=1``)."""
    if shard.val is None:
        return 0
    return int(np.unique(to_numpy(shard.val[0])).size)


def val_rate(n_val_users):
    """The probability of evaluating a user that keeps about :data:`VAL_MAX_USERS` of
    ``n_val_users`` (the sum of :func:`val_users` over the shards) on average (each
    user is kept independently, so the count kept varies about it): 1 when they are
    no more."""
    n = int(n_val_users)
    return 1.0 if n <= VAL_MAX_USERS else VAL_MAX_USERS / n


def _sampled(users, rate, seed):
    """Which of the global user indices ``users`` are evaluated: each with probability
    ``rate``, by a hash of the index and ``seed`` (the same users however the users are
    sharded)."""
    if rate >= 1.0:
        return np.ones(users.size, dtype=bool)
    salt = np.uint64(keyed(seed, 0, _SAMPLE_STREAM))
    return uniform(mix64(users.astype(np.uint64) ^ salt)) < rate


def top_k(s, k):
    """The ``k`` best columns of each row of ``s`` (``k <= s.shape[1]``), best first,
    ties by column index (also among those that tie with the ``k``-th best); and their
    scores (``recommend``'s ranking too).  A NaN score ranks as ``-inf`` (after every
    other score, ties by column index as ``-inf``'s) and is returned as NaN."""
    n = s.shape[1]
    raw = s
    if s.size and np.isnan(s.min()):  # (min propagates NaN: no copy when there is none)
        s = np.where(np.isnan(s), -np.inf, s)
    part = np.argpartition(-s, k - 1, axis=1)[:, :k] if k < n else np.broadcast_to(np.arange(n), s.shape)
    kth = np.take_along_axis(s, part, axis=1).min(axis=1, keepdims=True)  # the k-th best score of each row
    # every column above the k-th best, then the lowest-indexed ones that tie with it
    above = s > kth
    tied = s == kth
    need = k - above.sum(axis=1, keepdims=True)
    chosen = above | (tied & (np.cumsum(tied, axis=1, dtype=np.int32) <= need))
    cols = np.nonzero(chosen)[1].reshape(s.shape[0], k)  # (column order within each row)
    scores = np.take_along_axis(s, cols, axis=1)
    order = np.argsort(-scores, axis=1, kind="stable")  # (stable: ties stay in column order)
    cols = np.take_along_axis(cols, order, axis=1)
    return cols, (np.take_along_axis(scores, order, axis=1) if raw is s else np.take_along_axis(raw, cols, axis=1))


def _ndcg(top, top_s, relevant_keys, rows_key, n_items, n_rel, discount, ideal):
    """Each row's NDCG of its ranking ``top`` (items; ``top_s`` their scores, ``-inf``:
    a training item, no recommendation) against the held-out pairs whose keys
    ``user_row * n_items + item`` are the sorted ``relevant_keys``."""
    keys = rows_key[:, None] * n_items + top
    at = np.searchsorted(relevant_keys, keys).clip(max=max(relevant_keys.size - 1, 0))
    hits = (relevant_keys[at] == keys) & np.isfinite(top_s) if relevant_keys.size else np.zeros(top.shape, bool)
    return (hits * discount[: top.shape[1]]).sum(axis=1) / ideal[np.minimum(n_rel, top.shape[1]) - 1]


def ranking_sums(shard, U, V, bias, popularity, k=RANKING_K, rate=1.0, seed=0):
    """The held-out ranking of a model on one rating shard, as sums over its users.

    Parameters
    ----------
    shard : RatingShard
        With held-out rows (``shard.val``; None: nothing to evaluate).
    U : ndarray of shape (n_users, n_components)
        The factors of every user, by global index.
    V : ndarray of shape (n_items, n_components)
        The item factors.
    bias : ndarray of shape (n_items,) or None
        The item biases (BPR), added to the scores.
    popularity : ndarray of shape (n_items,)
        The items' training pairs (over all shards): the popularity ranking's scores.
    k : int, default=RANKING_K
    rate : float, default=1.0
        The probability of evaluating a user with a held-out pair (:func:`val_rate`),
        decided by a hash of the user's global index and ``seed``.
    seed : int, default=0

    Returns
    -------
    dict
        ``n``: the users evaluated (those with a held-out pair, sampled by ``rate``);
        ``ndcg``, ``pop``: the sums over them of the model's and popularity's NDCG@k;
        ``d``, ``d2``: of ``d = ndcg - pop`` and ``d**2``.
    """
    out = {"n": 0, "ndcg": 0.0, "pop": 0.0, "d": 0.0, "d2": 0.0}
    if shard.val is None:
        return out
    n_items = int(V.shape[0])
    vlu, vgi = (np.asarray(to_numpy(a), dtype=np.int64) for a in shard.val[:2])
    relevant = np.unique(vlu * n_items + vgi)  # sorted by local user, then item (a pair once)
    rel_users, n_rel = np.unique(relevant // n_items, return_counts=True)
    users = np.asarray(to_numpy(shard.users))
    keep = _sampled(users[rel_users], float(rate), seed)
    rel_users, n_rel = rel_users[keep], n_rel[keep]
    if not rel_users.size:
        return out
    uptr, gi = (np.asarray(to_numpy(a), dtype=np.int64) for a in (shard.uptr, shard.gi))
    V = np.asarray(V, dtype=np.float64)
    U = np.asarray(U, dtype=np.float64)
    pop = np.asarray(popularity, dtype=np.float64)
    add = None if bias is None else np.asarray(bias, dtype=np.float64)
    kk = min(int(k), n_items)
    discount = 1.0 / np.log2(np.arange(2, kk + 2))
    ideal = np.cumsum(discount)
    block = max(1, int(BLOCK_BYTES // (8 * max(n_items, 1))))
    by_pop = np.lexsort((np.arange(n_items), -pop))  # (ties by item index)
    rank_of = np.empty(n_items, dtype=np.int64)
    rank_of[by_pop] = np.arange(n_items)
    for a in range(0, rel_users.size, block):
        lus = rel_users[a:a + block]
        # the block's training pairs: rows uptr[u]:uptr[u + 1] of each of its users
        lengths = uptr[lus + 1] - uptr[lus]
        row = np.repeat(np.arange(lus.size), lengths)
        at = np.arange(row.size) - np.repeat(np.cumsum(lengths) - lengths, lengths) + np.repeat(uptr[lus], lengths)
        s = U[users[lus]] @ V.T
        if add is not None:
            s += add
        s[row, gi[at]] = -np.inf
        top, top_s = top_k(s, kk)
        del s
        model = _ndcg(top, top_s, relevant, lus, n_items, n_rel[a:a + block], discount, ideal)
        # popularity: the same order for every user, so only its first k + (the most
        # training items of a user in the block) items can make a user's top k
        cand = by_pop[:min(n_items, kk + int(lengths.max(initial=0)))]
        s = np.repeat(pop[cand][None, :], lus.size, axis=0)
        pos = rank_of[gi[at]]
        inside = pos < cand.size
        s[row[inside], pos[inside]] = -np.inf
        top, top_s = top_k(s, kk)
        base = _ndcg(cand[top], top_s, relevant, lus, n_items, n_rel[a:a + block], discount, ideal)
        d = model - base
        out["n"] += int(lus.size)
        out["ndcg"] += float(model.sum())
        out["pop"] += float(base.sum())
        out["d"] += float(d.sum())
        out["d2"] += float(d @ d)
    return out


def summarise(sums):
    """The means of the shards' :func:`ranking_sums` (a list of their dicts).

    Returns
    -------
    dict
        ``n_users``; ``val_ndcg`` and ``val_pop_ndcg``, the mean NDCG@k of the model
        and of popularity; ``val_gain``, the mean paired difference, and
        ``val_gain_se``, its standard error ``sqrt(var / (n - 1))`` (``var``: the
        differences' mean square less their squared mean); ``inf`` when fewer than two
        users were evaluated (one user has no spread to estimate, so no gain passes the
        guard ``val_gain > 2 * val_gain_se`` on one user).  NaN when no user was
        evaluated.
    """
    n = sum(int(s["n"]) for s in sums)
    if n == 0:
        nan = float("nan")
        return {"n_users": 0, "val_ndcg": nan, "val_pop_ndcg": nan, "val_gain": nan, "val_gain_se": nan}
    total = {key: math.fsum(float(s[key]) for s in sums) for key in ("ndcg", "pop", "d", "d2")}
    mean = total["d"] / n
    return {
        "n_users": n,
        "val_ndcg": total["ndcg"] / n,
        "val_pop_ndcg": total["pop"] / n,
        "val_gain": mean,
        "val_gain_se": (math.sqrt(max(total["d2"] / n - mean * mean, 0.0) / (n - 1)) if n >= 2
                        else math.inf),
    }
