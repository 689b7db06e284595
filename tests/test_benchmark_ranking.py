"""The explicit-ranking part of the ``recommender_peers`` suite (issue 49): its adapters on
hand-built frames, against brute-force computations, and its four targets' verdicts."""

import numpy as np
import pandas as pd
import pytest

from benchmarks.suites import _recpeers_data as D
from benchmarks.suites import recommender_peers as R

#: users 1-3 rate items 10-13: item 10 rated by all three, 11 by two, 12 and 13 by one
FRAME = pd.DataFrame({
    "user": [1, 1, 2, 2, 2, 3, 3],
    "item": [10, 11, 10, 11, 12, 10, 13],
    "rating": [5.0, 4.0, 3.0, 4.0, 2.0, 1.0, 5.0],
})


def test_popularity_ranks_unseen_items_by_training_count_and_pads_with_none():
    out = D.rank_popularity(FRAME, np.array([3, 1, 2]), k=3)
    recs = out["recs"]
    assert recs.shape == (3, 3) and out["rmse"] is None
    assert list(recs[0]) == [11, 12, None]  # user 3 saw 10 and 13; 11 (2 ratings) before 12 (1)
    assert list(recs[1]) == [12, 13, None]  # user 1 saw 10 and 11; 12 and 13 tie: by id
    assert list(recs[2]) == [13, None, None]


def test_rec_ids_treats_masked_and_minus_inf_slots_as_padding():
    ids = np.array([[1, 2, 3], [4, 5, 6]])
    scores = np.array([[3.0, 2.0, -np.inf], [3.0, 2.0, 1.0]])
    assert D.rec_ids(ids, scores).tolist() == [[1, 2, None], [4, 5, 6]]
    masked_ids = np.ma.masked_array(ids, mask=[[0, 0, 0], [0, 1, 1]])
    masked_scores = np.ma.masked_array(scores, mask=[[0, 0, 1], [0, 1, 1]])
    assert D.rec_ids(masked_ids, masked_scores).tolist() == [[1, 2, None], [4, None, None]]
    assert D.coverage(D.rec_ids(masked_ids, masked_scores), 8) == 3 / 8  # items 1, 2, 4 of 8


def test_cosine_neighbours_match_a_dense_computation():
    from dask_dgd.datasets import make_ratings

    ratings, _ = make_ratings(40, 30, 400, random_state=0)
    ratings = ratings.groupby(["user", "item"], as_index=False)["rating"].mean()
    dense = ratings.pivot(index="item", columns="user", values="rating").fillna(0.0)
    unit = dense.to_numpy() / np.linalg.norm(dense.to_numpy(), axis=1, keepdims=True)
    cos = unit @ unit.T
    np.fill_diagonal(cos, -np.inf)
    items = dense.index.to_numpy()[[0, 7, 19]]
    expected = dense.index.to_numpy()[np.argsort(-cos[[0, 7, 19]], axis=1, kind="stable")[:, :4]]
    got = D.cosine_neighbours(ratings, items, 4)
    pos = pd.Index(dense.index)
    for g, e, row in zip(got, expected, cos[[0, 7, 19]]):
        # the same neighbours (up to ties in the cosine: compared through the cosines themselves)
        np.testing.assert_allclose(row[pos.get_indexer(g)], row[pos.get_indexer(e)], rtol=1e-12)
    assert all(it not in g for it, g in zip(items, got))  # never the item itself


def test_surprise_ranking_follows_its_own_predictions_over_unseen_items():
    surprise = pytest.importorskip("surprise")
    from dask_dgd.datasets import make_ratings

    ratings, _ = make_ratings(30, 25, 300, random_state=1)
    ratings = ratings.groupby(["user", "item"], as_index=False)["rating"].mean()
    scale = (float(ratings["rating"].min()), float(ratings["rating"].max()))
    users = np.array(sorted(ratings["user"].unique())[:5])
    out = D.rank_surprise(ratings, ratings, users, scale, 0, k=4)
    algo = surprise.SVD(random_state=0)
    algo.fit(surprise.Dataset.load_from_df(ratings, surprise.Reader(rating_scale=scale)).build_full_trainset())
    for u, recs in zip(users, out["recs"]):
        seen = set(ratings.loc[ratings["user"] == u, "item"])
        est = {i: algo.predict(u, i, clip=False).est for i in ratings["item"].unique() if i not in seen}
        best = sorted(est, key=lambda i: (-est[i], i))[:4]
        np.testing.assert_allclose([est[i] for i in recs], [est[i] for i in best], rtol=1e-9)
    assert out["rmse"] == pytest.approx(D.rmse([algo.predict(u, i).est for u, i in zip(ratings["user"],
                                                                                   ratings["item"])],
                                               ratings["rating"]))


class _Model:
    """A stand-in for a fitted model's ``similar_items``."""

    def __init__(self, answer):
        self.answer = answer

    def similar_items(self, items, k=10):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer(items, k)


def test_similar_overlap_counts_shared_neighbours_of_the_most_rated_items():
    truth = D.cosine_neighbours(FRAME, [10, 11], 2)
    same = D.similar_overlap(_Model(lambda items, k: (truth, np.ones(truth.shape))), FRAME, 2, 2)
    assert list(same["items"]) == [10, 11]  # the two most-rated items
    assert same["overlap"] == [1.0, 1.0] and same["mean"] == 1.0 and same["error"] is None
    # one of two shared for item 10; the masked slot of item 11 is not a neighbour
    half = np.ma.masked_array([[truth[0, 0], 99], [truth[1, 0], truth[1, 1]]], mask=[[0, 0], [0, 1]])
    got = D.similar_overlap(_Model(lambda items, k: (half, np.ones((2, 2)))), FRAME, 2, 2)
    assert got["overlap"] == [0.5, 0.5] and got["mean"] == 0.5
    refused = D.similar_overlap(_Model(ValueError("no factors")), FRAME, 2, 2)
    assert refused["error"] == "ValueError: no factors" and "overlap" not in refused


def _ranking(default, pop, svd=None, subset=False, similar=None):
    def row(ndcg, coverage=0.05, rmse=None):
        return {"ndcg": ndcg, "recall": ndcg, "coverage": coverage, "rmse": rmse, "wall": 1.0, "warnings": []}

    models = {"dask_dgd default": row(*default), "dask_dgd bias": row(0.01, 0.01, 0.9), "popularity": row(pop)}
    if svd is not None:
        models["Surprise SVD"] = row(*svd)
    return {"n_users": 10, "n_items": 100, "subset": subset, "alpha_": 1.0, "max_abs_item_factor": 0.5,
            "models": models, "similar": similar}


def test_ranking_targets_met_only_when_every_part_is():
    sim = {"k": 5, "items": list(range(20)), "overlap": [0.4] * 20, "mean": 0.4, "warnings": [], "error": None}
    met = R.ranking_targets(_ranking((0.07, 0.12, R.RANKING_RMSE_BEFORE), 0.06, (0.05, 0.04, 0.91),
                                     similar=sim), {})
    assert [t["target"] for t in met] == list(R.TARGETS[5:9])
    assert [t["met"] for t in met] == [True, True, True, True]
    worse = R.ranking_targets(_ranking((0.05, 0.09, R.RANKING_RMSE_BEFORE + 0.001), 0.06, (0.055, 0.04, 0.91),
                                       similar={**sim, "overlap": [0.2] * 20, "mean": 0.2}), {})
    assert [t["met"] for t in worse] == [False, False, False, False]
    assert "Missed: < popularity by 0.0100, < Surprise SVD by 0.0050" in worse[0]["measured"]
    assert "9.0% of 100 items" in worse[1]["measured"]
    assert "bias model 0.0100 (10 users" in worse[0]["measured"]  # no shrunk bias row: none named
    shrunk = _ranking((0.05, 0.09, 0.9), 0.06)
    shrunk["models"][f"dask_dgd bias alpha_bias={R.BIAS_ALPHA:g}"] = {**shrunk["models"]["popularity"], "ndcg": 0.065}
    assert f"bias model 0.0100 (alpha_bias={R.BIAS_ALPHA:g}: 0.0650)" in R.ranking_targets(shrunk, {})[0]["measured"]


def test_ranking_targets_say_why_a_part_is_not_measured_or_refused():
    why = "ModuleNotFoundError: No module named 'surprise'"
    out = R.ranking_targets(_ranking((0.07, 0.12, 0.95), 0.06, subset=True,
                                     similar={"k": 5, "items": [], "error": "ParameterError: no factors"}),
                            {"surprise": why})
    assert out[0]["met"] is None and f"Surprise SVD unavailable: {why}" in out[0]["measured"]
    assert out[2]["met"] is None and "subset of the users" in out[2]["measured"]  # the before-figure is full data's
    assert out[3]["met"] is False and out[3]["measured"] == "similar_items raised ParameterError: no factors"
    assert [t["met"] for t in R.ranking_targets(None, {})] == [None] * 4
