"""Ratings as shards: partitioned by user, balanced by number of ratings.

At setup the ratings (a pandas or dask DataFrame, or pairs) are scanned where their
partitions live (ids, counts, rating sums), users and items are mapped to dense
indices, users are assigned to shards so that every shard holds about the same number
of ratings (a few power users hold a large share of them), and each shard's ratings are
assembled on its worker as a :class:`RatingShard`, sorted by (user, item, rating).  The
shards form the engine's :class:`~dask_dgd._engine.data.shards.ShardSet`: one block per
shard, its users' factors kept there as the group's local parameters.

Arrays other than NumPy (CuPy on a GPU): when the ratings come as a dask array of
pairs whose blocks are of another array-API namespace, the ids are still mapped on the
host (through pandas), but a zero-length array cut from a real input block on a worker
(:func:`block_like`; the dask meta may be NumPy) travels to every shard, and the shard
puts its rating arrays (and its users' factors) in that namespace, on that device.
"""

import copy
import math
import uuid

import array_api_compat
import numpy as np
import pandas as pd

from .._backend import asarray_like, get_namespace, to_numpy
from .._engine.data.memory import check_worker_shares, worker_memory_limits
from .._engine.data.shards import ShardSet
from ..exceptions import InputError

__all__ = [
    "RatingShard",
    "ratings_beyond",
    "assign_users",
    "available_memory",
    "block_like",
    "build_rating_shards",
    "check_model_fits",
    "check_rows",
    "check_scale",
    "check_scan",
    "far_ratings",
    "frame_parts",
    "holdout_rows",
    "init_rows",
    "is_device_like",
    "merge_duplicates",
    "merge_parts",
    "residual_sums",
    "row_facts",
    "scan",
    "weighted_quantile",
]

#: Rows per block of the seeded initial factors (a row depends only on its id).
INIT_BLOCK = 4096
#: Bytes of initial factors drawn at once (see :func:`init_rows`).
INIT_PIECE_BYTES = 2**24
#: The hash of the validation split (:func:`holdout_rows`): an "epoch" no mini-batch
#: draw uses, and the resolution of the held-out share.
_HOLDOUT_EPOCH, _HOLDOUT_BUCKETS = 2**40 + 7, 2**20

#: Bytes a :class:`RatingShard` holds per rating (``lu``, ``gi``: int32; ``r``: float64;
#: ``key``: uint64) and per user (``users``, ``uptr``: int64).
RATING_BYTES, USER_BYTES = 24, 16

_SPREAD = ("the ratings are split over the workers by user, so more workers make each worker's share "
           "smaller (smaller partitions do not: every partition stays in memory for the fit)")


def init_rows(seed, ids, width, scale, bias):
    """Initial factor rows of the given global ids: ``N(0, scale^2)``, bias column 0.

    Row ``i`` is row ``i % INIT_BLOCK`` of an ``(INIT_BLOCK, width)`` draw from a
    generator seeded by ``(seed, i // INIT_BLOCK)``, so it is the same on whichever
    shard (or the driver) creates it.  The draw is made in pieces of at most
    :data:`INIT_PIECE_BYTES`, up to the last row asked for (the same numbers: the
    generator fills an array in order), so the memory used is that of the rows asked
    for, not a whole block's (30.5 GiB of a block with ``n_components=10**6``).
    """
    ids = np.asarray(ids, dtype=np.int64)
    out = np.empty((ids.size, width))
    if ids.size == 0:
        return out
    blocks = ids // INIT_BLOCK
    piece = max(1, INIT_PIECE_BYTES // (8 * max(width, 1)))  # rows per draw
    for b in np.unique(blocks):
        sel = np.flatnonzero(blocks == b)
        local = ids[sel] - b * INIT_BLOCK
        order = np.argsort(local, kind="stable")
        ordered = local[order]
        rng = np.random.default_rng([int(seed), 17, int(b)])
        for a in range(0, int(ordered[-1]) + 1, piece):
            rows = rng.normal(0.0, scale, size=(min(piece, int(ordered[-1]) + 1 - a), width))
            lo, hi = np.searchsorted(ordered, [a, a + len(rows)])
            out[sel[order[lo:hi]]] = rows[ordered[lo:hi] - a]
    if bias:
        out[:, -1] = 0.0
    return out


def available_memory():
    """Bytes of memory this machine has available (the driver's: it holds the fitted
    factor tables)."""
    import psutil

    return int(psutil.virtual_memory().available)


#: What a fit in process holds at its peak, in multiples of its factor tables and
#: optimizer states (:func:`check_model_fits`): alternating least squares, gradient
#: steps.  Below the peaks measured with tracemalloc (2,000 users, 1,000 items,
#: n_components 200 and 1,000): 6.7-8.1 and 4.1-4.2.
IN_PROCESS_PEAK = {"als": 6, "gd": 4}


def check_model_fits(name, n_users, n_items, model, optimizer, in_process):
    """Refuse a fit whose factor tables cannot fit in this machine's available memory
    (:func:`available_memory`), before any is allocated.

    The factor tables are the user and item tables (float64, ``model``'s widths) and,
    with gradient steps (``optimizer`` not None), the optimizer's state of each (one
    more table per state array, e.g. 2 for Adam).  On a cluster the driver gathers
    them (the fitted model): the check is that they fit, a lower bound.  A fit in
    process (``in_process``) also holds the shards' copies, the gradients and the
    solver's vectors in this process: :data:`IN_PROCESS_PEAK` times the tables, an
    estimate below the measured peaks.  A wls model also holds a Gram matrix of the
    factors (``width x width``).  Passing the check does not promise success.

    Raises
    ------
    ParameterError
        Naming the bytes needed, the bytes available and the largest ``n_components``
        that would fit.
    """
    from .._engine.data.memory import format_bytes
    from ..exceptions import ParameterError

    state = None if optimizer is None else optimizer.init(np.zeros(2))
    slots = 0 if state is None else sum(
        isinstance(v, np.ndarray) and v.size == 2 for v in state._asdict().values())
    per_value = 8 * (1 + slots)
    times = IN_PROCESS_PEAK["als" if optimizer is None else "gd"] if in_process else 1
    k = model.n_components
    bu, bi = model.user_width - k, model.item_width - k  # bias columns

    def tables(c):
        return per_value * (n_users * (c + bu) + n_items * (c + bi))

    def needed(c):  # wls also holds a Gram matrix of the factors (width x width)
        return times * tables(c) + (8 * (c + bi) ** 2 if model.kind == "wls" else 0)

    need, room = needed(k), available_memory()
    if need <= room:
        return
    lo, hi = 0, k  # the largest n_components that fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if needed(mid) <= room else (lo, mid - 1)
    held = "float64" + (f", with the optimizer's {slots} state table(s) of each" if slots else "")
    where = (f"a fit in this process holds about {times} times that (with the shards' copies, the gradients and "
             "the solver's vectors)" if in_process else "the driver gathers them")
    if model.kind == "wls":
        where += f", and a Gram matrix of the factors ({format_bytes(8 * (k + bi) ** 2)})"
    fix = f"use n_components <= {lo}, or a machine with more memory" if lo >= 1 else "use a machine with more memory"
    raise ParameterError(
        f"{name}(n_components={k}) needs about {format_bytes(need)} ({need} bytes) of memory: its factor tables "
        f"({n_users} users and {n_items} items, {held}) take {format_bytes(tables(k))} and {where}; this machine "
        f"has {format_bytes(room)} available; {fix}"
    )


class RatingShard:
    """The ratings of a set of users, sorted by (user, item, rating).

    ``users`` are the shard's users (global indices, sorted; always NumPy); ``lu`` each
    rating's local user index, ``gi`` its global item index, ``r`` its value, ``key`` its
    hash key ``user * n_items + item`` (sorted) and ``uptr`` the start of each local
    user's ratings.  Built from NumPy arrays; with ``like`` (an array of another
    namespace, see :func:`block_like`) the rating arrays are then moved to its namespace
    and device, where the shard's factors will live too.
    """

    def __init__(self, users, lu, gi, r, n_items, like=None, index=0, val=None):
        self.index = int(index)
        self.users = users
        key = users[lu].astype(np.uint64) * np.uint64(n_items) + gi.astype(np.uint64)
        uptr = np.searchsorted(lu, np.arange(users.size + 1)).astype(np.int64)
        self.like = like
        move = (lambda a: a) if like is None else (lambda a: asarray_like(a, like))
        self.lu, self.gi, self.r, self.key, self.uptr = (move(a) for a in (lu, gi, r, key, uptr))
        #: held-out ratings ``(lu, gi, r)`` (see :func:`holdout_rows`), or None
        self.val = None if val is None else tuple(move(a) for a in val)
        #: the baseline model's prediction of every held-out rating (see
        #: :func:`with_val_base`), or None
        self.val_base = None

    @property
    def n_rows(self):
        return int(self.r.shape[0])

    def to_shard(self, a):
        """A NumPy array (parameters sent by the driver) in the shard's namespace and device."""
        return a if self.like is None or a is None else asarray_like(a, self.like)


def with_val_base(shard, user_bias, item_bias, mu):
    """A copy of ``shard`` (sharing its arrays) that knows a bias model's prediction
    ``mu + user_bias[user] + item_bias[item]`` of each of its held-out ratings
    (``user_bias``, ``item_bias``: NumPy, by global index), so that every step can
    compare its own held-out errors with the bias model's, rating by rating."""
    out = copy.copy(shard)
    if shard.val is not None:
        lu, gi, _ = (to_numpy(a) for a in shard.val)
        out.val_base = shard.to_shard(mu + user_bias[shard.users[lu]] + item_bias[gi])
    return out


def row_facts(df, user_col, item_col, rating_col):
    """What :func:`check_rows` needs of a frame's rows: its missing ids, and its rating
    column's values that are not finite, with the sum, sum of squares, minimum and
    maximum of the others (``rating_col`` None: no ratings)."""
    out = {
        "null_ids": int(df[user_col].isna().sum() + df[item_col].isna().sum()),
        "bad_ratings": 0,
        "negative_ratings": 0,
        "rating_sum": 0.0,
        "rating_sq_sum": 0.0,
        "rating_min": math.inf,
        "rating_max": -math.inf,
    }
    if rating_col is not None:
        r = df[rating_col].to_numpy(dtype=np.float64, na_value=np.nan)
        finite = np.isfinite(r)
        out["bad_ratings"] = int((~finite).sum())
        out["negative_ratings"] = int((r[finite] < 0).sum())
        out["rating_sum"] = float(r[finite].sum())
        with np.errstate(over="ignore"):  # (inf: squares that overflow, see FactorizationBase._solver)
            out["rating_sq_sum"] = float(np.square(r[finite]).sum())
        out["rating_min"] = float(r[finite].min()) if finite.any() else math.inf
        out["rating_max"] = float(r[finite].max()) if finite.any() else -math.inf
    return out


#: The rating profile of a partition (:func:`rating_profile`): its distinct values
#: counted exactly up to this many (star scales), else a seeded sample of
#: :data:`PROFILE_SAMPLE` values and its :data:`PROFILE_TAIL` lowest and highest.
PROFILE_DISTINCT, PROFILE_SAMPLE, PROFILE_TAIL = 64, 10_000, 1_000
#: The bulk of the ratings (:func:`far_ratings`): from this quantile to its complement.
BULK_QUANTILE = 0.01


def rating_profile(r):
    """What :func:`far_ratings` needs of one partition's finite ratings ``r``: the
    counts of its distinct values when there are at most :data:`PROFILE_DISTINCT`
    (exact), else a sample of :data:`PROFILE_SAMPLE` of them (seeded: the same for the
    same partition) with their :data:`PROFILE_TAIL` lowest and highest values (a
    partition of at most :data:`PROFILE_SAMPLE` values: all of them)."""
    counts = pd.Series(r).value_counts(sort=False)
    if len(counts) <= PROFILE_DISTINCT:
        return {"n": r.size, "values": counts.index.to_numpy(np.float64), "counts": counts.to_numpy(np.int64)}
    if r.size <= PROFILE_SAMPLE:
        return {"n": r.size, "sample": r}
    sample = np.random.default_rng(20_491).choice(r, PROFILE_SAMPLE, replace=False)
    m = PROFILE_TAIL
    return {"n": r.size, "sample": sample, "low": np.partition(r, m - 1)[:m],
            "high": np.partition(r, r.size - m)[r.size - m:]}


def weighted_quantile(values, q, weights):
    """The weighted quantiles ``q`` of ``values`` by the inverted CDF: for each ``q``
    the smallest value whose cumulative weight (values sorted) reaches ``q`` times the
    total, as ``np.quantile(values, q, weights=weights, method="inverted_cdf")``
    (NumPy >= 2.0 only) gives them; ``weights`` >= 0, of positive sum."""
    values, weights = np.asarray(values, dtype=np.float64), np.asarray(weights, dtype=np.float64)
    values, weights = values[weights > 0], weights[weights > 0]  # (a value of weight 0 is none)
    order = np.argsort(values, kind="stable")
    values, cdf = values[order], np.cumsum(weights[order])
    cdf /= cdf[-1]  # (normalized, as NumPy's: the same rounding at the steps)
    at = np.searchsorted(cdf, np.asarray(q, dtype=np.float64), side="left")
    return values[np.minimum(at, values.size - 1)]


def far_ratings(profiles):
    """Ratings far outside the bulk of the others, from the partitions' profiles
    (:func:`rating_profile`), or None when there are none.

    The bulk is the ratings from their 1st to their 99th percentile (:data:`BULK_QUANTILE`),
    ``[lo, hi]``; a rating is far outside when it lies more than the bulk's width
    ``hi - lo`` beyond it (below ``lo - w`` or above ``hi + w``; a bulk of one value:
    none is).  Exact when every partition has few distinct values (their counts), else
    the percentiles come from the partitions' seeded samples (weighted by the
    partitions' sizes) and the far ratings are counted among each partition's
    :data:`PROFILE_TAIL` lowest and highest (a lower bound if one of them is all far).

    Returns a dict: ``n`` (far ratings), ``at_least`` (``n`` is a lower bound),
    ``low``/``high`` (their range), ``bulk`` (``(lo, hi)``).
    """
    profiles = [p for p in profiles if p is not None and p["n"]]
    if not profiles:
        return None
    values, weights = [], []
    for p in profiles:
        if "counts" in p:
            values.append(p["values"])
            weights.append(p["counts"].astype(np.float64))
        else:
            values.append(p["sample"])
            weights.append(np.full(p["sample"].size, p["n"] / p["sample"].size))
    values, weights = np.concatenate(values), np.concatenate(weights)
    lo, hi = weighted_quantile(values, [BULK_QUANTILE, 1 - BULK_QUANTILE], weights)
    w = hi - lo
    if not w > 0:
        return None
    far = ratings_beyond(profiles, (lo, hi))
    return None if far is None else {**far, "bulk": (float(lo), float(hi))}


def ratings_beyond(profiles, scale):
    """The ratings of the partitions' profiles (:func:`rating_profile`) that lie more
    than ``scale``'s width beyond it (below ``low - w`` or above ``high + w``), or None
    when there are none (or the scale is a single value): exact from the distinct
    values' counts or a whole-partition sample, else counted among each partition's
    lowest and highest ratings ("at least" when those are all beyond).

    Returns a dict: ``n``, ``at_least``, ``low``/``high`` (their range)."""
    low, high = scale
    w = high - low
    if not w > 0:
        return None
    n, at_least, far_values = 0, False, []
    for p in profiles:
        if p is None or not p["n"]:
            continue
        if "counts" in p:
            far = (p["values"] < low - w) | (p["values"] > high + w)
            n += int(p["counts"][far].sum())
            far_values.append(p["values"][far])
        elif p["n"] == p["sample"].size:  # (the sample is the whole partition)
            far = p["sample"][(p["sample"] < low - w) | (p["sample"] > high + w)]
            n += far.size
            far_values.append(far)
        else:
            lo_tail, hi_tail = p["low"][p["low"] < low - w], p["high"][p["high"] > high + w]
            n += lo_tail.size + hi_tail.size
            at_least |= lo_tail.size == p["low"].size or hi_tail.size == p["high"].size
            far_values.extend([lo_tail, hi_tail])
    if n == 0:
        return None
    far_values = np.concatenate(far_values)
    return {"n": n, "at_least": bool(at_least), "low": float(far_values.min()), "high": float(far_values.max())}


def scan_part(df, user_col, item_col, rating_col, digest=False):
    """Per-partition facts: unique users and items, counts, rating sums and sums of
    squares (:func:`row_facts`), the rating profile (:func:`rating_profile`; None
    without ratings); ``digest``: also the sum (mod 2**64) of the rows'
    hashes, which does not depend on the rows' order or partitions (a matrix
    factorization's batches do not either)."""
    out = {
        "n": len(df),
        "users": pd.unique(df[user_col].to_numpy()),
        "items": pd.unique(df[item_col].to_numpy()),
        **row_facts(df, user_col, item_col, rating_col),
        "profile": None,
    }
    if rating_col is not None:
        r = df[rating_col].to_numpy(dtype=np.float64, na_value=np.nan)
        out["profile"] = rating_profile(r[np.isfinite(r)])
    if digest:
        cols = [c for c in (user_col, item_col, rating_col) if c is not None]
        out["digest"] = int(pd.util.hash_pandas_object(df[cols], index=False).to_numpy().sum(dtype=np.uint64))
    return out


def split_part(df, user_col, item_col, rating_col, users, items, user_shard, n_shards):
    """Codes of one partition, cut into one piece per shard: ``[(u, i, r), ...]``."""
    u = users.get_indexer(df[user_col])
    i = items.get_indexer(df[item_col])
    if rating_col is None:
        r = np.ones(len(df))
    else:
        r = df[rating_col].to_numpy(dtype=np.float64)
    s = user_shard[u]
    order = np.argsort(s, kind="stable")
    bounds = np.searchsorted(s[order], np.arange(n_shards + 1))
    return [
        (u[order[a:b]].astype(np.int64), i[order[a:b]].astype(np.int32), r[order[a:b]])
        for a, b in zip(bounds[:-1], bounds[1:])
    ]


def _piece(pieces, s):
    return pieces[s]


#: How each ``duplicates`` policy merges the values of a (user, item) pair given on
#: several rows (pandas' groupby aggregations; "raise" counts them as "last" would
#: merge them: the caller refuses them).
_MERGE = {"mean": "mean", "last": "last", "sum": "sum", "max": "max", "raise": "last"}


def merge_duplicates(df, user_col, item_col, rating_col, policy):
    """``df`` with the rows of each (user, item) pair given more than once merged into
    one by ``policy`` ("mean"; "last": the value of the pair's last row in ``df``'s
    order; "sum"; "max"; without a rating column, one row of the pair), and how many
    rows were merged away.  The rows of pairs given once are kept, in their order,
    followed by the merged pairs.  A "mean" or "sum" adds a pair's values in
    increasing order, so that it is the same to the last bit in any order of the rows
    (a checkpoint's digest of the merged ratings too)."""
    keys = [user_col, item_col]
    repeated = df.duplicated(keys, keep=False)
    if not repeated.any():
        return df, 0
    rows = df[repeated]
    if rating_col is None:
        merged = rows.drop_duplicates(keys)
    else:
        if policy in ("mean", "sum"):  # (a pair's values in order: a sum's rounding then does not depend on the rows')
            rows = rows.sort_values(rating_col, kind="stable")
        merged = rows.groupby(keys, sort=False, dropna=False, observed=True)[rating_col].agg(_MERGE[policy])
        merged = merged.reset_index()[list(df.columns)]
    out = pd.concat([df[~repeated], merged], ignore_index=True)
    return out, len(df) - len(out)


def _split_shared(df, user_col, item_col, rating_col, policy, shared, n_buckets):
    """One partition's rows of the users it alone holds (not in ``shared``), their
    duplicates merged, with the count merged, and its rows of the ``shared`` users cut
    into ``n_buckets`` pieces by user (in the partition's row order)."""
    code = shared.get_indexer(df[user_col]) if len(shared) else np.full(len(df), -1)
    own, n = merge_duplicates(df[code < 0] if (code >= 0).any() else df, user_col, item_col, rating_col, policy)
    pieces = [df[(code >= 0) & (code % max(n_buckets, 1) == b)] for b in range(n_buckets)]
    return own, n, pieces


def _merge_bucket(user_col, item_col, rating_col, policy, *pieces):
    """The rows of one bucket of users, from every partition in order, merged."""
    return merge_duplicates(pd.concat(pieces, ignore_index=True), user_col, item_col, rating_col, policy)


def _pick(value, *path):
    for j in path:
        value = value[j]
    return value


def _pair_probe(df, user_col, item_col, shared, items):
    """What :func:`merge_parts` needs to know whether one partition holds duplicates:
    how many of its rows repeat a pair of an earlier row of the partition, and the
    distinct keys ``shared code * len(items) + item code`` of its pairs of the users
    other partitions hold too (``shared``: their ids, sorted; exact keys, int64)."""
    n = int(df.duplicated([user_col, item_col]).sum())
    code = shared.get_indexer(df[user_col]) if len(shared) else np.full(len(df), -1)
    mine = code >= 0
    if not mine.any():
        return n, np.zeros(0, np.int64)
    item = items.get_indexer(df[item_col][mine])
    return n, np.unique(code[mine].astype(np.int64) * len(items) + item)


def merge_parts(executor, parts, cols, policy, users, part_users, items):
    """The partitions (:func:`frame_parts`) with each (user, item) pair given on several
    rows merged into one by ``policy`` (:func:`merge_duplicates`), and how many rows
    were merged away (none: ``parts`` itself is returned).

    Whether there are any is found first, with one task per partition
    (:func:`_pair_probe`): each counts the pairs it repeats itself and sends the keys
    of its pairs of the users other partitions hold too (``users``: the sorted ids,
    ``part_users``: each partition's, from :func:`scan`; ``items``: the sorted item
    ids), and a key sent by two partitions is a pair given in both.  Without any
    duplicate ``parts`` is returned as it is.

    Else each partition merges the pairs of the users only it holds, where it lives,
    and sends the rows of the users several hold to one of a few buckets (by user; one
    per worker, so the tasks grow linearly with the partitions), each merged in one
    task from the pieces of every partition in order, so that "last" is the last
    row in the order of the partitions and of their rows.  The merged ratings are
    then the partitions' own rows followed by the buckets.
    """
    run = _Runner(executor)
    seen = np.zeros(len(users), dtype=np.int64)
    for found in part_users:
        seen += np.bincount(users.get_indexer(found), minlength=len(users))
    shared = users[seen > 1]
    shared_f, items_f = run.scatter(shared), run.scatter(items)
    probes = run.gather([run.submit(_pair_probe, p, *cols[:2], shared_f, items_f, name="dgd-mf-dup-probe")
                         for p in parts])
    keys = np.sort(np.concatenate([k for _, k in probes] + [np.zeros(0, np.int64)]))
    if not sum(n for n, _ in probes) and not (keys[1:] == keys[:-1]).any():
        return parts, 0
    n_buckets = min(len(executor.workers()) if run.dask else 1, len(shared))
    split = [run.submit(_split_shared, p, *cols, policy, shared_f, n_buckets, name="dgd-mf-merge") for p in parts]
    buckets = [run.submit(_merge_bucket, *cols, policy, *[run.submit(_pick, t, 2, b, name="dgd-mf-merge-piece")
                                                          for t in split], name="dgd-mf-merge-bucket")
               for b in range(n_buckets)]
    merged = sum(run.gather([run.submit(_pick, t, 1, name="dgd-mf-merge-count") for t in split + buckets]))
    if not merged:  # pragma: no cover - the probe found duplicates
        return parts, 0
    out = _Parts(run.submit(_pick, t, 0, name="dgd-mf-merged") for t in split + buckets)
    out.scattered = getattr(parts, "scattered", False)
    if getattr(parts, "remake", None) is not None:
        def remake():  # (the partitions made again, merged again)
            parts.revive()
            return merge_parts(executor, parts, cols, policy, users, part_users, items)[0]

        out.remake = remake
    return out, int(merged)


def residual_sums(df, user_col, item_col, rating_col, scorer):
    """The sum of squared training residuals of one partition's ratings and their
    number: ``scorer`` is the fitted model (its ``_pair_scores``, unclipped: training
    ignores ``rating_scale``)."""
    e = scorer._pair_scores(df[user_col].to_numpy(), df[item_col].to_numpy(), clip=False) \
        - df[rating_col].to_numpy(dtype=np.float64)
    return float(e @ e), len(e)


def holdout_rows(u, i, n_items, seed, fraction):
    """Which ratings (global user and item indices ``u``, ``i``, sorted by user) are held
    out for validation: each with probability ``fraction``, decided by a hash of the
    rating's key and ``seed`` (the same ratings however they are sharded), except that
    every user keeps the rating whose hash is largest for training."""
    from ..losses._factorization import batch_buckets

    key = u.astype(np.uint64) * np.uint64(n_items) + i.astype(np.uint64)
    b = batch_buckets(key, seed, _HOLDOUT_EPOCH, _HOLDOUT_BUCKETS)
    held = b < fraction * _HOLDOUT_BUCKETS
    if u.size:
        starts = np.flatnonzero(np.r_[True, u[1:] != u[:-1]])
        seg = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, u.size]))
        top = np.flatnonzero(b == np.maximum.reduceat(b, starts)[seg])
        held[top[np.r_[True, seg[top][1:] != seg[top][:-1]]]] = False  # the first top of each user
    return held


def make_rating_shard(index, n_items, like, holdout, *pieces):
    """Shard ``index``'s :class:`RatingShard` from the pieces every partition cut for it
    (``like``: see :class:`RatingShard`; ``holdout``: None, or ``(seed, fraction)`` to
    hold ratings out for validation, :func:`holdout_rows`)."""
    u = np.concatenate([p[0] for p in pieces]) if pieces else np.zeros(0, np.int64)
    i = np.concatenate([p[1] for p in pieces]) if pieces else np.zeros(0, np.int32)
    r = np.concatenate([p[2] for p in pieces]) if pieces else np.zeros(0)
    order = np.lexsort((r, i, u))
    u, i, r = u[order], i[order], r[order]
    users, lu = np.unique(u, return_inverse=True)
    lu = lu.astype(np.int32)
    val = None
    if holdout is not None:
        held = holdout_rows(u, i, n_items, *holdout)
        val = (lu[held], i[held], r[held])
        lu, i, r = lu[~held], i[~held], r[~held]
    return RatingShard(users, lu, i, r, n_items, like, index, val)


def _like_of(*blocks):
    """A zero-length array of the namespace and device of the first block that is not
    NumPy (``None`` entries skipped); None when all are NumPy."""
    for b in blocks:
        if b is None:
            continue
        xp = get_namespace(b)
        if not array_api_compat.is_numpy_namespace(xp):
            return xp.reshape(b[:0, ...], (0,))
    return None


def block_like(executor, *arrays):
    """Where the arrays of a fit on dask arrays should live: a zero-length array cut,
    on a worker, from the first block of the first dask array in ``arrays`` whose
    blocks are not NumPy (the blocks are looked at: the dask meta may be NumPy when they
    are not), or None when they are all NumPy (or no argument is a dask array).

    Returns a future on a cluster (it is passed to the shards' setup tasks and resolved
    there), else the array.
    """
    import dask
    import dask.array as da

    firsts = [a.to_delayed().ravel()[0] for a in arrays if isinstance(a, da.Array)]
    if not firsts:
        return None
    probe = dask.delayed(_like_of)(*firsts, dask_key_name=f"dgd-mf-like-{uuid.uuid4().hex[:8]}")
    if executor.kind == "dask":
        return executor.client.compute(probe)
    return probe.compute()  # pragma: no cover - dask input always gets a cluster


def is_device_like(like):
    """Whether :func:`block_like`'s answer (an array, a future of one, or None) names
    an array namespace other than NumPy."""
    if like is not None and hasattr(like, "result"):
        like = like.result()
    return like is not None


def assign_users(counts, n_shards):
    """Users to shards, balancing the number of ratings (longest-processing-time rule).

    Users are taken by decreasing count (ties by index) and each goes to the shard with
    the fewest ratings so far (ties to the lowest shard).  Returns the shard of every
    user and the ratings of every shard.
    """
    import heapq

    counts = np.asarray(counts, dtype=np.int64)
    shard_of = np.zeros(counts.size, dtype=np.int64)
    loads = np.zeros(n_shards, dtype=np.int64)
    heap = [(0, s) for s in range(n_shards)]
    for u in np.argsort(-counts, kind="stable"):
        load, s = heapq.heappop(heap)
        shard_of[u] = s
        load += int(counts[u])
        loads[s] = load
        heapq.heappush(heap, (load, s))
    return shard_of, loads


class _Runner:
    """Setup tasks on the cluster (pinned where asked) or directly in process."""

    def __init__(self, executor):
        self.executor = executor
        self.dask = executor.kind == "dask"
        self.token = uuid.uuid4().hex[:8]
        self._n = 0

    def submit(self, fn, *args, worker=None, name="dgd-mf-setup"):
        if not self.dask:
            return fn(*args)
        self._n += 1
        client = self.executor.client
        pin = {} if worker is None else {"workers": [worker], "allow_other_workers": True}
        return client.submit(fn, *args, key=f"{name}-{self.token}-{self._n}", pure=False, **pin)

    def gather(self, items):
        return self.executor.client.gather(list(items)) if self.dask else list(items)

    def scatter(self, value):
        if not self.dask:
            return value
        return self.executor.client.scatter(value, broadcast=True, hash=False)


class _Parts(list):
    """The partitions of :func:`frame_parts`; ``scattered``: sent from this process's
    memory (a pandas DataFrame on a cluster), so nothing can recompute them;
    ``remake``: makes them anew (:meth:`revive`)."""

    scattered = False
    remake = None

    def revive(self):
        """Replace the partitions, in place, by new ones made as the first were: after
        a worker loss took the only copy of one (a scattered piece of a pandas frame,
        which Dask cannot recompute), from the frame this process still holds; every
        holder of this list sees the new ones."""
        if self.remake is None:  # pragma: no cover - every _Parts on a cluster has one
            raise RuntimeError("these partitions cannot be made again")
        self[:] = self.remake()


def frame_parts(executor, frame):
    """The partitions of a pandas or dask DataFrame, as futures on a cluster (a
    :class:`_Parts` that can :meth:`~_Parts.revive`)."""
    import dask

    if dask.is_dask_collection(frame):
        if executor.kind != "dask":  # pragma: no cover - dask input always gets a cluster
            return [frame.compute()]
        parts = _Parts(executor.client.compute(frame.to_delayed()))
        parts.remake = lambda: executor.client.compute(frame.to_delayed())
        return parts
    if executor.kind != "dask":
        return [frame]
    workers = executor.workers()
    _check_frame_fits(executor.client, workers, frame)
    n = max(1, min(len(workers), len(frame)))
    edges = np.linspace(0, len(frame), n + 1).round().astype(int)

    def scatter():
        return executor.client.scatter([frame.iloc[a:b] for a, b in zip(edges[:-1], edges[1:])], hash=False)

    parts = _Parts(scatter())
    parts.scattered, parts.remake = True, scatter
    return parts


def _check_frame_fits(client, workers, frame):
    """Refuse a pandas frame whose share per worker exceeds the workers' memory (see
    :mod:`dask_dgd._engine.data.memory`), before any of it is scattered.

    Each worker will hold its piece of the frame (kept for the fit) and its rating
    shards, :data:`RATING_BYTES` per rating; spread evenly, that is a lower bound of the
    largest share (users per shard are not known yet; :func:`build_rating_shards`
    checks again with them).  The frame's bytes are pandas' shallow count, a lower
    bound for object (string) columns.
    """
    total = int(frame.memory_usage(index=True, deep=False).sum()) + RATING_BYTES * len(frame)
    check_worker_shares(
        client, {w: total / len(workers) for w in workers}, even=True, spread=_SPREAD,
        held=f"its piece of the ratings frame and its rating shards, {RATING_BYTES} bytes per rating",
    )


def _check_shards_fit(client, workers, parts, placed, loads, n_users):
    """Refuse rating shards that would not fit in their workers' memory (see
    :mod:`dask_dgd._engine.data.memory`), before any is built: each worker's share is the
    input partitions it holds (kept for the fit; their sizes and places are known to
    the scheduler) plus its shards (:data:`RATING_BYTES` per rating,
    :data:`USER_BYTES` per user)."""
    limits = worker_memory_limits(client)
    if not any(limits.get(w) for w in workers):
        return
    shares = dict.fromkeys(workers, 0)
    keys = [p.key for p in parts]
    sizes, holders = client.nbytes(keys, summary=False), client.who_has(list(parts))
    for p in parts:
        for w in holders.get(p.key, ()):
            shares[w] = shares.get(w, 0) + int(sizes.get(p.key, 0))
    for w, load, users in zip(placed, loads, n_users):
        shares[w] += RATING_BYTES * int(load) + USER_BYTES * int(users)
    check_worker_shares(
        client, shares, limits=limits, spread=_SPREAD,
        held=f"its partitions of the ratings and its rating shards, {RATING_BYTES} bytes per rating "
        f"and {USER_BYTES} per user",
    )


def scan(executor, parts, cols, digest=False):
    """Facts of the whole frame (combined on the driver from one task per partition);
    ``digest`` (fits that write checkpoints): also the ratings' digest, a hex string
    (see :func:`scan_part`)."""
    run = _Runner(executor)
    facts = run.gather([run.submit(scan_part, p, *cols, digest, name="dgd-mf-scan") for p in parts])
    out = {
        "n": sum(f["n"] for f in facts),
        "users": [f["users"] for f in facts],
        "items": [f["items"] for f in facts],
        "null_ids": sum(f["null_ids"] for f in facts),
        "bad_ratings": sum(f["bad_ratings"] for f in facts),
        "negative_ratings": sum(f["negative_ratings"] for f in facts),
        "rating_sum": sum(f["rating_sum"] for f in facts),
        "rating_sq_sum": sum(f["rating_sq_sum"] for f in facts),
        "rating_min": min([f["rating_min"] for f in facts] + [math.inf]),
        "rating_max": max([f["rating_max"] for f in facts] + [-math.inf]),
        "profiles": [f["profile"] for f in facts],
    }
    if digest:
        out["digest"] = f"{sum(f['digest'] for f in facts) % 2**64:016x}"
    return out


def build_rating_shards(executor, parts, cols, users, items, n_shards, like=None, holdout=None, own_inputs=True):
    """Shards of ratings partitioned by user and balanced by ratings, placed one per
    worker in turn; returns the :class:`~.._engine.data.shards.ShardSet` and the ratings per shard.

    Once the ratings per user are counted and before any shard is built, the shards
    are checked to fit in their workers' memory (:func:`_check_shards_fit`: refused
    with ``ClusterError`` otherwise).

    ``like``: None (NumPy shards) or what :func:`block_like` returned; ``holdout``:
    see :func:`make_rating_shard`; ``own_inputs``: the shards release the partitions
    (and ``like``) with themselves (False: a shard set built for a part of the fit,
    released before the partitions are done with).  On a cluster a
    lost worker ends the fit (its shard and its users' factors are gone): the shards'
    collective is told why, for the kind of ``parts`` (:func:`frame_parts`)."""
    run = _Runner(executor)
    users_f, items_f = run.scatter(users), run.scatter(items)
    # ratings per user, counted where the partitions live
    counts = np.zeros(len(users), dtype=np.int64)
    for c in run.gather([run.submit(_user_counts, p, cols[0], users_f, name="dgd-mf-count") for p in parts]):
        counts += c
    n_shards = max(1, min(int(n_shards), len(users)))
    shard_of, loads = assign_users(counts, n_shards)
    workers = executor.workers() if run.dask else [None]
    if run.dask and like is None:  # (shards on a device: not the workers' memory)
        placed = [workers[s % len(workers)] for s in range(n_shards)]
        n_users = np.bincount(shard_of[counts > 0], minlength=n_shards)
        _check_shards_fit(executor.client, workers, parts, placed, loads, n_users)
    shard_of_f = run.scatter(shard_of)
    pieces = [
        run.submit(split_part, p, *cols, users_f, items_f, shard_of_f, n_shards, name="dgd-mf-split")
        for p in parts
    ]
    handles, placed = [], []
    for s in range(n_shards):
        w = workers[s % len(workers)]
        mine = [run.submit(_piece, p, s, name="dgd-mf-piece") for p in pieces]
        handles.append(run.submit(make_rating_shard, s, len(items), like, holdout, *mine, worker=w,
                                  name="dgd-mf-shard"))
        placed.append(w)
    if run.dask:
        executor.wait(handles)
    inputs = (list(parts) + ([] if like is None else [like])) if run.dask and own_inputs else []
    # each shard's users (global indices, sorted), as the shard itself holds them
    users_of = [np.flatnonzero((shard_of == s) & (counts > 0)) for s in range(n_shards)]
    # the partitions (frame_parts) are this fit's: released with its shards
    shards = ShardSet(executor, handles, [(s,) for s in range(n_shards)], placed, loads, 0, False,
                      block_costs=np.asarray(loads, dtype=np.float64), group_meta=users_of, inputs=inputs)
    if run.dask:
        shards.collective.unrecoverable = _lost_worker_note(getattr(parts, "scattered", False))
    return shards, loads


def _lost_worker_note(scattered):
    """What a lost worker costs a matrix factorization, and what to do (the
    :attr:`~dask_dgd._engine.runtime.collective.Collective.unrecoverable` of its shards);
    ``scattered``: the partitions were sent from memory (a pandas DataFrame)."""
    if not scattered:
        built = ("its rating shard was assembled there from pieces of the dask DataFrame's partitions, cut with "
                 "lookup tables of the ids that the fit does not keep, so Dask cannot recompute it")
    else:
        built = ("its rating shard was assembled there from the pieces of the pandas DataFrame sent to the "
                 "workers, which Dask cannot recompute")
    return (
        f"{built}, and the user factors of its shard's users live only on their worker (in the memory of "
        "its step runner): a matrix factorization cannot be recovered from a lost worker and the fit "
        "stopped. Fit again, or fit with checkpoint=<folder> (and an int random_state) to save the "
        "factors every checkpoint_every steps and, once the cluster has its workers back, call "
        "fit(X, resume=True) to continue from the last checkpoint"
    )


def _user_counts(df, user_col, users):
    """Ratings of every user in one partition."""
    return np.bincount(users.get_indexer(df[user_col]), minlength=len(users))


def check_scan(facts, rating_col, implicit_kind):
    """Clear errors for empty data, missing ids and bad ratings."""
    if facts["n"] == 0:
        raise InputError("the ratings are empty (0 rows); fit needs at least one rating")
    check_rows(facts, rating_col, implicit_kind, "fitting")


def check_rows(facts, rating_col, implicit_kind, doing):
    """Missing ids and bad ratings (:func:`row_facts`), refused alike by ``fit`` and by
    what else reads interactions (``doing``: "fitting", "folding them in"...)."""
    if facts["null_ids"]:
        raise InputError(
            f"{facts['null_ids']} user or item ids are missing (NaN/None); drop those rows before {doing}"
        )
    if facts["bad_ratings"]:
        raise InputError(
            f"{facts['bad_ratings']} values of the {rating_col!r} column are NaN or infinite; "
            f"drop or fill them before {doing}"
        )
    if implicit_kind in ("wls", "bpr") and facts.get("negative_ratings"):
        why = ("confidence-weighted least squares needs strengths >= 0 (confidence = 1 + confidence_scale * "
               "strength)" if implicit_kind == "wls" else
               "implicit strengths must be >= 0: BPR takes every pair as a positive, so a negative one (a "
               "dislike) would count as a like")
        raise InputError(
            f"{facts['negative_ratings']} values of the {rating_col!r} column are negative (the smallest: "
            f"{facts['rating_min']:g}); {why}; drop those rows (e.g. keep the strengths > 0, or ratings >= 4 "
            f"as the positives) before {doing}"
        )


def check_scale(facts, rating_col, scale, doing):
    """Ratings outside an explicit model's ``rating_scale`` (``(low, high)``, or None:
    any), refused alike by ``fit``, ``partial_fit`` and fold-in (``doing``)."""
    if scale is None or facts["rating_max"] < facts["rating_min"]:  # (no scale, or no ratings)
        return
    low, high = scale
    if facts["rating_min"] < low or facts["rating_max"] > high:
        raise InputError(
            f"the {rating_col!r} column has values from {facts['rating_min']:g} to {facts['rating_max']:g}, outside "
            f"rating_scale=({low:g}, {high:g}); fix those ratings before {doing}, or widen rating_scale "
            "(None: no scale, predictions unclipped)"
        )
