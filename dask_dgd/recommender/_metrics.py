"""Ranking metrics and a per-user train/test split for recommenders.

The metrics take each user's ``k`` recommended ids and a set of relevant ids, not
scikit-learn's dense ``(n_users, n_items)`` score matrices: ``sklearn.metrics.ndcg_score``
would need a users x items matrix (and counts users with nothing relevant as 0), while
these run in O(users x k) on what ``recommend`` returns; on dense inputs ``ndcg_at_k``
equals ``ndcg_score`` (tested), and scikit-learn has no precision or recall at k of
ranked lists.
"""

import numbers

import numpy as np
import pandas as pd

from .._random import GOLDEN, finalize
from ..exceptions import InputError, ParameterError

__all__ = ["evaluate_ranking", "ndcg_at_k", "precision_at_k", "recall_at_k", "train_test_split"]


def _check(y_true, y_pred, k):
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k <= 0:
        raise ParameterError(f"k must be an int > 0; got {k!r}")
    if np.ma.isMaskedArray(y_pred):  # (recommend's: its masked slots, the padding, are not recommendations)
        mask, y_pred = np.ma.getmaskarray(y_pred), np.ma.getdata(y_pred).astype(object)
        y_pred[mask] = None
    y_pred = np.asarray(y_pred, dtype=object) if not isinstance(y_pred, np.ndarray) else y_pred
    if y_pred.ndim != 2:
        raise InputError(f"y_pred must be 2-D (one ranked row of item ids per user); got shape {y_pred.shape}")
    y_true = list(y_true)
    if len(y_true) != y_pred.shape[0]:
        raise InputError(
            f"y_true has {len(y_true)} users but y_pred has {y_pred.shape[0]} rows; give one of each per user"
        )
    return [set(t) for t in y_true], y_pred[:, :k], int(k)


def _hits(y_true, y_pred):
    return np.array([[item in rel for item in row] for rel, row in zip(y_true, y_pred)], dtype=bool).reshape(
        y_pred.shape
    )


def precision_at_k(y_true, y_pred, k=10):
    """Mean over users of (relevant items among the top ``k``) / ``k``.

    Parameters
    ----------
    y_true : sequence of collections
        The relevant (held-out) item ids of each user.
    y_pred : array-like of shape (n_users, >= k)
        Each user's recommended item ids, best first (None: no recommendation in
        that slot; the masked slots of a masked array, as :meth:`recommend
        <dask_dgd.recommender.FactorizationBase.recommend>` returns, are none
        either).
    k : int, default=10

    Returns
    -------
    float
        Users without relevant items are left out of the mean (NaN if none has any).
    """
    y_true, y_pred, k = _check(y_true, y_pred, k)
    keep = np.array([len(t) > 0 for t in y_true], dtype=bool)
    if not keep.any():
        return float("nan")
    hits = _hits(y_true, y_pred)
    return float(np.mean(hits[keep].sum(axis=1) / k))


def recall_at_k(y_true, y_pred, k=10):
    """Mean over users of (relevant items among the top ``k``) / (relevant items)."""
    y_true, y_pred, k = _check(y_true, y_pred, k)
    n_rel = np.array([len(t) for t in y_true], dtype=np.float64)
    keep = n_rel > 0
    if not keep.any():
        return float("nan")
    hits = _hits(y_true, y_pred)
    return float(np.mean(hits[keep].sum(axis=1) / n_rel[keep]))


def ndcg_at_k(y_true, y_pred, k=10):
    """Mean over users of the normalised discounted cumulative gain at ``k`` (binary
    relevance): ``sum_r hit_r / log2(r + 1)`` divided by its best value,
    ``sum_{r <= min(k, |relevant|)} 1 / log2(r + 1)``."""
    y_true, y_pred, k = _check(y_true, y_pred, k)
    n_rel = np.array([len(t) for t in y_true])
    keep = n_rel > 0
    if not keep.any():
        return float("nan")
    hits = _hits(y_true, y_pred)
    discount = 1.0 / np.log2(np.arange(2, y_pred.shape[1] + 2))
    dcg = (hits * discount).sum(axis=1)
    ideal = np.cumsum(discount)[np.minimum(n_rel, y_pred.shape[1]) - 1]
    return float(np.mean(dcg[keep] / ideal[keep]))


def evaluate_ranking(model, test, k=10, exclude_seen=True):
    """Precision, recall and NDCG at ``k`` of a fitted model's recommendations against the
    held-out interactions ``test`` (a DataFrame with the model's user and item columns).

    Users of ``test`` unknown to the model cannot be ranked for and are counted in
    ``"unknown_users"``, not in the means.

    Returns
    -------
    dict with ``precision``, ``recall``, ``ndcg``, ``n_users``, ``unknown_users``
    """
    frame, _ = model._as_frame(test, None, need_rating=False)
    if hasattr(frame, "compute"):
        frame = frame.compute()
    if len(frame) == 0:
        raise InputError("the test interactions are empty")
    groups = frame.groupby(model.user_col, sort=True)[model.item_col].agg(list)
    known = model._user_index.get_indexer(groups.index) >= 0
    users = groups.index[known]
    relevant = groups.to_numpy()[known]
    if not len(users):
        raise InputError("none of the test users was seen in fit; nothing to rank for")
    recs, _ = model.recommend(users, k=k, exclude_seen=exclude_seen)  # (masked: the padding, no recommendation)
    return {
        "precision": precision_at_k(relevant, recs, k),
        "recall": recall_at_k(relevant, recs, k),
        "ndcg": ndcg_at_k(relevant, recs, k),
        "n_users": int(len(users)),
        "unknown_users": int((~known).sum()),
    }


def _split_frame(df, user_col, item_col, time_col, test_size, seed):
    if not len(df):
        return df.assign(_test=np.zeros(0, dtype=bool))
    if time_col is not None:
        key = df[time_col].to_numpy()
    else:  # a random key that depends only on the rating, not on the partition
        h = pd.util.hash_pandas_object(df[[user_col, item_col]], index=False).to_numpy()
        salt = np.uint64((seed * GOLDEN) % 2**64)  # Python ints: no overflow
        key = finalize(h ^ salt)
    order = pd.DataFrame({"u": df[user_col].to_numpy(), "k": key, "pos": np.arange(len(df))})
    order = order.sort_values(["u", "k", "pos"], kind="stable")
    rank_from_end = order.groupby("u", sort=False).cumcount(ascending=False).to_numpy()
    n_u = order.groupby("u", sort=False)["u"].transform("size").to_numpy()
    n_test = np.minimum(np.ceil(test_size * n_u), n_u - 1)
    test = np.zeros(len(df), dtype=bool)
    test[order["pos"].to_numpy()] = rank_from_end < n_test
    return df.assign(_test=test)


def train_test_split(ratings, test_size=0.2, *, user_col="user", item_col="item", time_col="auto",
                     random_state=None):
    """Split ratings per user: each user keeps at least one rating for training and
    gives ``ceil(test_size * n_u)`` (at most ``n_u - 1``) to the test set.

    With timestamps (``time_col``; ``"auto"`` uses a ``"timestamp"`` column when there is
    one) a user's **latest** ratings are the test set (ties broken by position);
    otherwise a random subset, drawn from a hash of (user, item) and ``random_state``
    (so the split does not depend on the partitioning).

    Parameters
    ----------
    ratings : pandas.DataFrame or dask.dataframe.DataFrame
    test_size : float in (0, 1), default=0.2
    user_col, item_col : str
    time_col : str, None or "auto"
    random_state : int or None
        Seeds the random split (None: a fresh seed each call).

    Returns
    -------
    train, test : DataFrames of the same kind as ``ratings``
    """
    import dask.dataframe as dd

    if not isinstance(ratings, (pd.DataFrame, dd.DataFrame)):
        raise InputError(f"ratings must be a pandas or dask DataFrame; got {type(ratings).__name__}")
    ok = isinstance(test_size, numbers.Real) and not isinstance(test_size, bool) and 0 < test_size < 1
    if not ok:
        raise ParameterError(f"test_size must be a float in (0, 1); got {test_size!r}")
    if time_col == "auto":
        time_col = "timestamp" if "timestamp" in ratings.columns else None
    for col in (user_col, item_col) + ((time_col,) if time_col is not None else ()):
        if col not in ratings.columns:
            raise InputError(f"ratings has no column {col!r} (columns: {list(ratings.columns)})")
    if random_state is None:
        seed = int(np.random.SeedSequence().entropy % 10**15)
    elif isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool) and random_state >= 0:
        seed = int(random_state) % 10**15
    else:
        raise ParameterError(f"random_state must be an int >= 0 or None; got {random_state!r}")
    if isinstance(ratings, dd.DataFrame):
        # all of a user's ratings in one partition, then the same split per partition
        shuffled = ratings.shuffle(user_col)
        marked = shuffled.map_partitions(
            _split_frame, user_col, item_col, time_col, float(test_size), seed,
            meta=ratings._meta.assign(_test=np.zeros(0, dtype=bool)),
        )
    else:
        marked = _split_frame(ratings, user_col, item_col, time_col, float(test_size), seed)
    train = marked[~marked["_test"]].drop(columns="_test")
    test = marked[marked["_test"]].drop(columns="_test")
    return train, test
