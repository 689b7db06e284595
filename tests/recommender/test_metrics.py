"""Ranking metrics against hand-computed values, and the per-user split."""

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from dask_dgd import InputError, ParameterError
from dask_dgd.datasets import make_ratings
from dask_dgd.recommender import ndcg_at_k, precision_at_k, recall_at_k, train_test_split


def test_metrics_by_hand():
    y_true = [{1, 2, 3}, {9}, set()]
    y_pred = [[1, 5, 2, 7], [4, 9, 8, 6], [1, 2, 3, 4]]
    # user 1: hits at ranks 1 and 3; user 2: hit at rank 2; user 3 has nothing relevant
    assert precision_at_k(y_true, y_pred, k=4) == pytest.approx((2 / 4 + 1 / 4) / 2)
    assert recall_at_k(y_true, y_pred, k=4) == pytest.approx((2 / 3 + 1 / 1) / 2)
    assert precision_at_k(y_true, y_pred, k=1) == pytest.approx((1 + 0) / 2)
    dcg1 = 1 + 1 / np.log2(4)
    idcg1 = 1 + 1 / np.log2(3) + 1 / np.log2(4)
    dcg2, idcg2 = 1 / np.log2(3), 1.0
    assert ndcg_at_k(y_true, y_pred, k=4) == pytest.approx((dcg1 / idcg1 + dcg2 / idcg2) / 2)
    # a perfect ranking scores 1
    assert ndcg_at_k([{1, 2}], [[2, 1, 3]], k=3) == pytest.approx(1.0)
    assert np.isnan(precision_at_k([set()], [[1]], k=1))


def test_metric_errors():
    with pytest.raises(ParameterError, match="k must be an int > 0; got 0"):
        ndcg_at_k([{1}], [[1]], k=0)
    with pytest.raises(InputError, match="y_true has 2 users but y_pred has 1 rows"):
        recall_at_k([{1}, {2}], [[1]], k=1)
    with pytest.raises(InputError, match="y_pred must be 2-D"):
        precision_at_k([{1}], [1, 2], k=1)


def test_split_per_user_random_and_by_time():
    ratings, _ = make_ratings(200, 100, 3000, random_state=0)
    train, test = train_test_split(ratings, 0.25, random_state=0)
    assert len(train) + len(test) == len(ratings)
    n_u = ratings.groupby("user").size()
    n_test = test.groupby("user").size().reindex(n_u.index, fill_value=0)
    expected = np.minimum(np.ceil(0.25 * n_u), n_u - 1)
    np.testing.assert_array_equal(n_test.to_numpy(), expected.to_numpy())
    assert set(train["user"]) == set(ratings["user"])  # every user keeps training data
    # the same seed gives the same split; another seed another
    again, _ = train_test_split(ratings, 0.25, random_state=0)
    pd.testing.assert_frame_equal(again, train)
    other, _ = train_test_split(ratings, 0.25, random_state=1)
    assert not other.index.equals(train.index)
    # by time: each user's test ratings are its latest
    timed = ratings.assign(timestamp=np.random.default_rng(0).permutation(len(ratings)))
    tr, te = train_test_split(timed, 0.25)
    last_train = tr.groupby("user")["timestamp"].max()
    first_test = te.groupby("user")["timestamp"].min()
    assert (first_test > last_train.reindex(first_test.index)).all()


def test_split_of_a_dask_frame_equals_pandas():
    ratings, _ = make_ratings(100, 50, 1500, random_state=2)
    train, test = train_test_split(ratings, 0.2, random_state=3)
    dtrain, dtest = train_test_split(dd.from_pandas(ratings, npartitions=4), 0.2, random_state=3)
    assert isinstance(dtrain, dd.DataFrame)
    pd.testing.assert_frame_equal(dtest.compute().sort_index(), test.sort_index())
    assert len(dtrain.compute()) == len(train)


def test_split_errors():
    ratings, _ = make_ratings(20, 10, 100, random_state=0)
    with pytest.raises(ParameterError, match=r"test_size must be a float in \(0, 1\); got 1.5"):
        train_test_split(ratings, 1.5)
    with pytest.raises(InputError, match="ratings has no column 'uid'"):
        train_test_split(ratings, 0.2, user_col="uid")
    with pytest.raises(InputError, match="ratings must be a pandas or dask DataFrame; got ndarray"):
        train_test_split(ratings.to_numpy(), 0.2)


def test_make_ratings():
    ratings, truth = make_ratings(300, 80, 5000, rank=4, noise=0.0, random_state=0)
    assert len(ratings) == 5000 and not ratings.duplicated(["user", "item"]).any()
    P, Q = truth["user_factors"], truth["item_factors"]
    u, i = ratings["user"].to_numpy(), ratings["item"].to_numpy()
    expected = 3.5 + truth["user_bias"][u] + truth["item_bias"][i] + np.einsum("ij,ij->i", P[u], Q[i])
    np.testing.assert_allclose(ratings["rating"], expected)
    counts = ratings["user"].value_counts()
    assert counts.max() > 5 * counts.median()  # power-law activity
    implicit, _ = make_ratings(50, 40, 600, implicit=True, npartitions=3, random_state=0)
    assert list(implicit.columns) == ["user", "item", "count"] and implicit.npartitions == 3
    from dask_dgd.exceptions import ParameterError as PE

    with pytest.raises(PE, match="n_ratings=101 exceeds n_users \\* n_items = 100"):
        make_ratings(10, 10, 101)


@pytest.mark.parametrize("k", [1, 3, 10])
def test_ndcg_at_k_equals_scikit_learns_ndcg_score(k):
    """On the dense problems scikit-learn's ``ndcg_score`` takes (every user scored on
    every item), the sparse top-k version gives its values; ours never builds the
    users x items matrix (recommend returns k ids per user)."""
    from sklearn.metrics import ndcg_score

    rng = np.random.default_rng(k)
    n_users, n_items = 40, 25
    relevance = rng.random((n_users, n_items)) < 0.15
    relevance[relevance.sum(axis=1) == 0, 0] = True  # scikit-learn counts users with none as 0
    scores = rng.random((n_users, n_items))
    ranked = np.argsort(-scores, axis=1)[:, :k]
    relevant = [set(np.flatnonzero(row)) for row in relevance]
    assert ndcg_at_k(relevant, ranked, k) == pytest.approx(ndcg_score(relevance, scores, k=k), rel=1e-12)
