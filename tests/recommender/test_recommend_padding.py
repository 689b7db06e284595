"""k larger than a user's unseen items: padding is not a recommendation.  ``recommend``
returns masked arrays (the padding masked), ``recommend_all`` has no rows for it, and
the ranking metrics never count a masked slot (issue 49, item 5)."""

import numpy as np
import pandas as pd
import pytest

from dask_dgd import ImplicitMatrixFactorization, MatrixFactorization
from dask_dgd.recommender import evaluate_ranking, ndcg_at_k, precision_at_k, recall_at_k


@pytest.fixture(scope="module")
def fitted():
    """User "a" has seen 4 of the 6 items, "b" one, "c" all six."""
    ratings = pd.DataFrame({
        "user": ["a"] * 4 + ["b"] + ["c"] * 6,
        "item": ["i0", "i1", "i2", "i3", "i0", "i0", "i1", "i2", "i3", "i4", "i5"],
        "rating": [5.0, 4.0, 3.0, 2.0, 4.0, 1.0, 2.0, 3.0, 4.0, 5.0, 3.0],
    })
    mf = MatrixFactorization(n_components=2, alpha=0.1, max_iter=20, random_state=0).fit(ratings)
    return ratings, mf


def test_recommend_masks_the_padding_and_only_the_padding(fitted):
    ratings, mf = fitted
    ids, scores = mf.recommend(["a", "b", "c"], k=4)
    assert isinstance(ids, np.ma.MaskedArray) and isinstance(scores, np.ma.MaskedArray)
    assert ids.shape == scores.shape == (3, 4)
    np.testing.assert_array_equal(ids.mask, [[False, False, True, True], [False] * 4, [True] * 4])
    np.testing.assert_array_equal(scores.mask, ids.mask)
    # under the mask: items the user has seen, scored -inf (also the scores' fill value)
    for row, user in zip(ids, ["a", "b", "c"]):
        seen = set(ratings.loc[ratings["user"] == user, "item"])
        assert set(row.data[row.mask]) <= seen and not set(row.compressed()) & seen
    assert np.isneginf(scores.data[ids.mask]).all() and np.isfinite(scores.data[~ids.mask]).all()
    assert np.isneginf(scores.filled()[ids.mask]).all()
    assert ids[0].compressed().tolist() == ids.data[0, :2].tolist()


def test_the_type_does_not_depend_on_the_data(fitted):
    _, mf = fitted
    for kw in (dict(k=2), dict(k=6, exclude_seen=False)):  # nothing padded: still masked arrays, mask all False
        ids, scores = mf.recommend(["a", "b"], **kw)
        assert isinstance(ids, np.ma.MaskedArray) and isinstance(scores, np.ma.MaskedArray)
        assert not np.ma.getmaskarray(ids).any() and not np.ma.getmaskarray(scores).any()
    new = pd.DataFrame({"user": ["n"] * 5, "item": ["i0", "i1", "i2", "i3", "i4"], "rating": [4.0] * 5})
    ids, _ = mf.recommend(["n"], k=3, user_items=new)  # fold-in: the same rule
    assert isinstance(ids, np.ma.MaskedArray) and ids.mask[0].tolist() == [False, True, True]


def test_recommend_all_has_exactly_the_unmasked_recommendations(fitted):
    _, mf = fitted
    ids, scores = mf.recommend(mf.user_ids_, k=4)
    rows = mf.recommend_all(k=4).compute()
    for u, row, srow in zip(mf.user_ids_, ids, scores):
        mine = rows[rows["user"] == u]
        assert mine["item"].tolist() == row.compressed().tolist()
        np.testing.assert_array_equal(mine["score"].to_numpy(), srow.compressed())


def test_the_metrics_never_count_a_masked_slot():
    relevant = [{"x"}, {"y"}]
    ids = np.ma.MaskedArray(np.array([["w", "x"], ["y", "z"]], dtype=object), mask=[[False, True], [False, False]])
    assert precision_at_k(relevant, ids, 2) == pytest.approx(0.25)
    assert recall_at_k(relevant, ids, 2) == pytest.approx(0.5)
    assert ndcg_at_k(relevant, ids, 2) == pytest.approx(0.5)
    assert ndcg_at_k(relevant, ids.data, 2) > 0.5  # (unmasked, "x" would count)


def test_evaluate_ranking_on_an_implicit_model_ignores_the_padding():
    data = pd.DataFrame({"user": [0, 0, 0, 1, 1], "item": [0, 1, 2, 0, 3]})
    est = ImplicitMatrixFactorization(n_components=2, loss="bpr", alpha=0.01, max_iter=2, tol=0,
                                      random_state=0).fit(data)
    ids, _ = est.recommend(0, k=4)
    assert ids.mask[0].tolist() == [False, True, True, True]
    got = evaluate_ranking(est, pd.DataFrame({"user": [0, 0], "item": [3, 1]}), k=4)
    assert got["recall"] == pytest.approx(0.5) and got["precision"] == pytest.approx(0.25)
