"""Cold and rare items and users (issue 49, item 8): explicit models rank by a lower
confidence bound of the predicted rating, keep the residual spread and the item counts
that bound needs, and fold-in refuses ids of another type than the fitted ones'."""

import copy
import warnings

import numpy as np
import pandas as pd
import pytest

from dask_dgd import ImplicitMatrixFactorization, InputError, MatrixFactorization, ParameterError
from dask_dgd.datasets import make_ratings
from dask_dgd.recommender._serving import DEFAULT_CONFIDENCE


def _fit(est, data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(data)


@pytest.fixture(scope="module")
def ratings():
    """Skewed item popularity, plus one obscure item (id 10_000) rated 5 by a single user."""
    r, _ = make_ratings(300, 120, 6000, rank=2, noise=0.5, power=1.0, random_state=3)
    r = r.assign(rating=r["rating"].clip(1, 5))
    return pd.concat([r, pd.DataFrame({"user": [r["user"].iloc[0]], "item": [10_000], "rating": [5.0]})],
                     ignore_index=True)


@pytest.fixture(scope="module")
def fitted(ratings):
    # (no rating scale: the bound and the predictions compared unclipped)
    return _fit(MatrixFactorization(n_components=2, alpha=0.1, rating_scale=None, random_state=0), ratings)


def _choosy(mf, n_unseen=40):
    """The users with at least ``n_unseen`` unseen items (the lists are chosen, not the
    last items left)."""
    return mf.user_ids_[np.diff(mf._seen.indptr) <= len(mf.item_ids_) - n_unseen]


def _bound(mf, confidence=DEFAULT_CONFIDENCE):
    return confidence * mf.residual_std_ / np.sqrt(mf.item_counts_ + mf.alpha_bias_)


def test_residual_std_is_the_training_rms_or_the_held_out_rmse(ratings, fitted):
    resid = ratings["rating"].to_numpy() - fitted.predict(ratings)
    assert fitted.residual_std_ == pytest.approx(np.sqrt(np.mean(resid ** 2)), rel=1e-10)
    auto = _fit(MatrixFactorization(n_components=2, rating_scale=None, random_state=0), ratings)
    path = auto.validation_path_
    assert auto.residual_std_ == path.loc[path["chosen"], "val_rmse"].iloc[0]
    # not for implicit models: their scores are not ratings
    assert not hasattr(_fit(ImplicitMatrixFactorization(n_components=2, loss="wls", alpha=0.01, random_state=0), ratings),
                       "residual_std_")


def test_item_counts_follow_fit_partial_fit_and_fold_in(ratings):
    mf = _fit(MatrixFactorization(n_components=2, alpha=0.1, random_state=0), ratings)
    expected = ratings.groupby("item").size().reindex(mf.item_ids_).to_numpy()
    np.testing.assert_array_equal(mf.item_counts_, expected)
    users = mf.user_ids_[:3]
    mf.fold_in_items(pd.DataFrame({"user": users, "item": 20_000, "rating": 5.0}))
    assert mf.item_ids_[-1] == 20_000 and mf.item_counts_[-1] == 3
    more = pd.DataFrame({"user": mf.user_ids_[5:9], "item": 20_000, "rating": 4.0})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mf.partial_fit(more)
    assert mf.item_counts_[mf._item_index.get_loc(20_000)] == 7
    np.testing.assert_array_equal(mf.item_counts_[:-1], expected)


def test_recommend_ranks_by_the_lower_bound_by_default(ratings, fitted):
    users = _choosy(fitted)[:40]
    ids, scores = fitted.recommend(users, k=5)
    # the scores are the predicted ratings less DEFAULT_CONFIDENCE standard errors of the bias
    pred = fitted.predict(pd.DataFrame({"user": np.repeat(users, 5), "item": ids.ravel()})).reshape(ids.shape)
    lower = _bound(fitted)[fitted._item_index.get_indexer(ids.ravel())].reshape(ids.shape)
    np.testing.assert_allclose(scores, pred - lower, rtol=1e-12)
    assert np.all(np.diff(scores, axis=1) <= 0)
    # and they are the best bounds among each user's unseen items
    for user, s in zip(users, scores):
        unseen = np.setdiff1d(fitted.item_ids_, ratings.loc[ratings["user"] == user, "item"])
        p = fitted.predict(pd.DataFrame({"user": user, "item": unseen})) - _bound(fitted)[
            fitted._item_index.get_indexer(unseen)]
        np.testing.assert_allclose(np.sort(p)[::-1][:5], s, rtol=1e-12)
    # recommend_all agrees
    frame = fitted.recommend_all(k=5).compute().set_index(["user", "rank"])
    for row, user, s in zip(ids, users, scores):
        np.testing.assert_array_equal(frame.loc[user]["item"].to_numpy(), row)
        np.testing.assert_allclose(frame.loc[user]["score"].to_numpy(), s, rtol=1e-12)
    # confidence=0: the predicted ratings, as before
    ids0, scores0 = fitted.recommend(users, k=5, confidence=0)
    pred0 = fitted.predict(pd.DataFrame({"user": np.repeat(users, 5), "item": ids0.ravel()}))
    np.testing.assert_allclose(scores0.ravel(), pred0, rtol=1e-12)
    # a larger confidence subtracts more
    _, scores9 = fitted.recommend(users, k=5, confidence=9.0)
    assert np.all(scores9[:, 0] < scores[:, 0])


def test_an_item_rated_5_by_one_person_does_not_top_the_lists(fitted):
    users = _choosy(fitted)
    plain, _ = fitted.recommend(users, k=10, confidence=0)
    assert (plain == 10_000).any(axis=1).mean() > 0.5  # predicted near 5: on most lists
    ids, _ = fitted.recommend(users, k=10)
    assert not (ids == 10_000).any()
    # the lists drawn from items with more ratings
    counts = dict(zip(fitted.item_ids_, fitted.item_counts_))
    assert np.median([counts[i] for i in ids.ravel()]) > np.median([counts[i] for i in plain.ravel()])


def test_a_new_user_who_loves_a_few_items_gets_well_rated_items(ratings, fitted):
    popular = ratings.groupby("item")["rating"].agg(["size", "mean"])
    fan = pd.DataFrame({"user": "new", "item": popular.nlargest(4, "size").index, "rating": 5.0})
    plain, _ = fitted.recommend(["new"], k=5, user_items=fan, confidence=0)
    ids, scores = fitted.recommend(["new"], k=5, user_items=fan)
    assert 10_000 in plain[0] and 10_000 not in ids[0]
    assert popular.loc[ids[0], "size"].min() > 1
    pred = fitted.predict(pd.DataFrame({"user": "new", "item": ids[0]}), user_items=fan)
    np.testing.assert_allclose(scores[0], pred - _bound(fitted)[fitted._item_index.get_indexer(ids[0])], rtol=1e-12)


def test_a_folded_in_item_with_few_ratings_enters_fewer_lists(ratings):
    def share(confidence):
        mf = _fit(MatrixFactorization(n_components=2, alpha=0.1, random_state=0), ratings)
        raters = mf.user_ids_[10:13]
        mf.fold_in_items(pd.DataFrame({"user": raters, "item": 30_000, "rating": 5.0}))
        ids, _ = mf.recommend(mf.user_ids_[~np.isin(mf.user_ids_, raters)], k=10, confidence=confidence)
        return (ids == 30_000).any(axis=1).mean()

    assert share(0) > 0.5
    assert share(None) < share(0) / 2


@pytest.mark.parametrize("confidence", [-1.0, np.nan, np.inf, "high", True])
def test_a_bad_confidence_is_refused(fitted, confidence):
    with pytest.raises(ParameterError, match=r"confidence must be a finite number >= 0 \(standard errors; 0: rank "
                       r"by the predicted ratings\) or None \(the default\); got"):
        fitted.recommend(fitted.user_ids_[:1], confidence=confidence)
    with pytest.raises(ParameterError, match="confidence must be a finite number >= 0"):
        fitted.recommend_all(confidence=confidence)


def test_implicit_models_have_no_bound(ratings):
    wls = _fit(ImplicitMatrixFactorization(n_components=2, loss="wls", alpha=0.01, random_state=0), ratings)
    ids, scores = wls.recommend(wls.user_ids_[:2], k=3)
    np.testing.assert_array_equal(wls.recommend(wls.user_ids_[:2], k=3, confidence=0)[1], scores)
    with pytest.raises(ParameterError, match=r"confidence=2.0 applies to explicit ratings \(MatrixFactorization\): "
                       r"the scores of an implicit model \(wls\) are not ratings .*; leave confidence=None"):
        wls.recommend(wls.user_ids_[:2], k=3, confidence=2.0)


def test_fold_in_refuses_ids_of_another_type(ratings):
    mf = _fit(MatrixFactorization(n_components=2, alpha=0.1, random_state=0), ratings)
    n_items, n_users, factors = len(mf.item_ids_), len(mf.user_ids_), mf.item_factors_.copy()
    users = mf.user_ids_[:3]
    with pytest.raises(InputError, match=r"fold_in_items\(item_users\): the item ids are strings \('new film'\) but "
                       r"the model's item ids are numbers \(e.g. \d+\); they would never match a fitted item: "
                       r"convert them to the fitted ids' type first \(e.g. .astype\(int\)\)"):
        mf.fold_in_items(pd.DataFrame({"user": users, "item": "new film", "rating": 5.0}))
    with pytest.raises(InputError, match=r"fold_in_items\(item_users\): the user ids are strings \('1', '2'\) but "
                       r"the model's user ids are numbers"):
        mf.fold_in_items(pd.DataFrame({"user": ["1", "2"], "item": 40_000, "rating": 5.0}))
    with pytest.raises(InputError, match=r"fold_in_users\(user_items\): the user ids are strings \('x'\) but the "
                       r"model's user ids are numbers"):
        mf.fold_in_users(pd.DataFrame({"user": "x", "item": mf.item_ids_[:2], "rating": 4.0}))
    with pytest.raises(InputError, match=r"user_items: the item ids are strings \('7', '8'\) but the model's item "
                       r"ids are numbers .*convert them to the fitted ids' type first"):
        mf.recommend(["x"], user_items=pd.DataFrame({"user": "x", "item": ["7", "8"], "rating": 4.0}))
    with pytest.raises(InputError, match=r"user_items: the item ids are strings"):
        mf.predict(pd.DataFrame({"user": ["x"], "item": [mf.item_ids_[0]]}),
                   user_items=pd.DataFrame({"user": "x", "item": ["7"], "rating": 4.0}))
    # the model is unchanged
    assert len(mf.item_ids_) == n_items and len(mf.user_ids_) == n_users
    np.testing.assert_array_equal(mf.item_factors_, factors)
    # new users of any id type can be scored (they are not written to the model)
    ids, _ = mf.recommend(["x"], k=3, user_items=pd.DataFrame({"user": "x", "item": mf.item_ids_[:2],
                                                                "rating": 4.0}))
    assert ids.shape == (1, 3)


def test_string_id_models_refuse_integer_ids():
    r, _ = make_ratings(60, 30, 900, random_state=1)
    r = r.assign(user="u" + r["user"].astype(str), item="i" + r["item"].astype(str))
    mf = _fit(MatrixFactorization(n_components=2, alpha=0.1, random_state=0), r)
    with pytest.raises(InputError, match=r"fold_in_items\(item_users\): the item ids are numbers \(7\) but the "
                       r"model's item ids are strings \(e.g. 'i\d+'\).*\(e.g. .astype\(str\)\)"):
        mf.fold_in_items(pd.DataFrame({"user": mf.user_ids_[:2], "item": 7, "rating": 3.0}))


def test_residual_std_of_a_dask_frame_is_that_of_the_same_ratings_in_pandas(ratings, fitted):
    import dask.dataframe as dd

    lazy = _fit(MatrixFactorization(n_components=2, alpha=0.1, rating_scale=None, random_state=0),
                dd.from_pandas(ratings, npartitions=3))
    resid = ratings["rating"].to_numpy() - lazy.predict(ratings)
    assert lazy.residual_std_ == pytest.approx(np.sqrt(np.mean(resid ** 2)), rel=1e-10)
    assert lazy.residual_std_ == pytest.approx(fitted.residual_std_, rel=1e-6)


@pytest.fixture(scope="module")
def rare_item():
    """The reviewer's data: 200 users, 40 items, plus item 999 rated 5 by user 0 alone."""
    r, _ = make_ratings(200, 40, 4000, random_state=0)
    r = r.groupby(["user", "item"], as_index=False)["rating"].mean()
    r = pd.concat([r, pd.DataFrame({"user": [0], "item": [999], "rating": [5.0]})], ignore_index=True)
    return r, _fit(MatrixFactorization(n_components=3, alpha=0.1, max_iter=30, random_state=0), r)


def test_item_counts_are_the_ratings_behind_each_bias_not_the_seen_pairs(rare_item):
    r, mf = rare_item
    np.testing.assert_array_equal(mf.item_counts_, r.groupby("item").size().reindex(mf.item_ids_).to_numpy())
    assert mf.item_counts_ is not mf._item_counts and "_item_counts" in mf._FITTED


def test_folding_in_users_does_not_make_a_rare_item_look_certain(rare_item):
    """60 new users rate item 999 with 1 star: fold_in_users does not refit its bias, so
    its count (and discount) stays that of the one fitted rating (it was first for
    everyone, its discount shrunk by 61 pairs)."""
    r, fitted = rare_item
    mf = copy.deepcopy(fitted)
    users = mf.user_ids_[1:50]
    j = mf._item_index.get_loc(999)
    before, scores_before = mf.recommend(users, k=len(mf.item_ids_))
    counts = mf.item_counts_.copy()
    new = pd.DataFrame({"user": np.repeat(np.arange(10_000, 10_060), 3), "item": np.tile([999, 0, 1], 60),
                        "rating": np.tile([1.0, 3.0, 3.0], 60)})
    mf.fold_in_users(new)
    assert mf.item_counts_[j] == 1
    np.testing.assert_array_equal(mf.item_counts_, counts)
    after, scores_after = mf.recommend(users, k=len(mf.item_ids_))
    np.testing.assert_array_equal(after, before)
    np.testing.assert_allclose(scores_after, scores_before, rtol=1e-12)
    rank = np.mean([list(row.compressed()).index(999) for row in after])
    assert rank > 10  # not first for everyone
    # the new users' pairs are seen all the same
    assert mf._seen[mf._user_index.get_loc(10_000)].indices.tolist() == sorted(mf._item_index.get_indexer([999, 0, 1]))


def test_folding_in_a_known_item_counts_the_ratings_its_bias_now_rests_on(rare_item):
    """The lowest-bias item (110 fitted ratings) folded in again from one 5-star rating:
    its bias rests on that rating, and so does its count (it was 111: first for everyone)."""
    r, fitted = rare_item
    mf = copy.deepcopy(fitted)
    j = int(np.argmin(mf.item_bias_))
    item = mf.item_ids_[j]
    assert mf.item_counts_[j] > 100
    others = [u for u in mf.user_ids_ if item not in set(r.loc[r["user"] == u, "item"])][:40]
    mf.fold_in_items(pd.DataFrame({"user": [others[0]], "item": [item], "rating": [5.0]}))
    assert mf.item_counts_[j] == 1
    ids, _ = mf.recommend(others[1:], k=len(mf.item_ids_))
    assert np.mean([list(row.compressed()).index(item) for row in ids]) > 5  # not first for everyone
    # users unknown to the model do not count: an item folded in from them alone has count 0
    mf.fold_in_items(pd.DataFrame({"user": [50_000, 50_001], "item": [item, 31_000],
                                   "rating": [5.0, 4.0]}))
    assert mf.item_counts_[j] == 0 and mf.item_counts_[-1] == 0 and mf.item_ids_[-1] == 31_000


def test_an_item_without_ratings_and_no_bias_penalty_is_ranked_not_dropped():
    """alpha_bias_ 0 and count 0: the discount is residual_std_ / sqrt(max(0 + 0, 1)),
    finite (it was infinite: the item was masked as padding, with a RuntimeWarning)."""
    r, _ = make_ratings(30, 5, 120, random_state=0)
    r = r.groupby(["user", "item"], as_index=False)["rating"].mean()
    mf = _fit(MatrixFactorization(n_components=2, alpha=0.1, alpha_bias=0.0, max_iter=20, rating_scale=None,
                                  random_state=0), r)  # (unclipped: the bound compared with predict)
    mf.fold_in_items(pd.DataFrame({"user": [999], "item": [77], "rating": [4.0]}))  # no known user
    assert mf.alpha_bias_ == 0 and mf.item_counts_[-1] == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ids, scores = mf.recommend([0], k=6, exclude_seen=False)
        frame = mf.recommend_all(k=6, exclude_seen=False).compute()
    assert not ids.mask.any() and 77 in ids[0] and np.isfinite(scores).all()
    expected = mf.predict(pd.DataFrame({"user": [0], "item": [77]}))[0] - DEFAULT_CONFIDENCE * mf.residual_std_
    assert scores[0][list(ids[0]).index(77)] == pytest.approx(expected, rel=1e-12)
    assert sorted(frame.loc[frame["user"] == 0, "item"]) == sorted(mf.item_ids_)
    # the padding is the seen items, not the scores: a user who has seen all but one
    seen_all = pd.DataFrame({"user": "fan", "item": mf.item_ids_[:-1], "rating": 4.0})
    ids, scores = mf.recommend(["fan"], k=3, user_items=seen_all)
    assert ids[0].compressed().tolist() == [77] and ids.mask[0].tolist() == [False, True, True]


def test_a_model_saved_without_the_counts_loads_and_serves(rare_item, tmp_path):
    import dask_dgd

    _, fitted = rare_item
    loaded = dask_dgd.load(fitted.save(tmp_path / "with.npz"))
    np.testing.assert_array_equal(loaded.item_counts_, fitted.item_counts_)
    old = copy.deepcopy(fitted)
    del old._item_counts  # as saved before item_counts_ was stored
    loaded = dask_dgd.load(old.save(tmp_path / "without.npz"))
    assert not hasattr(loaded, "_item_counts")
    # falls back to counting the seen pairs (the same here: no fold-in yet)
    np.testing.assert_array_equal(loaded.item_counts_, fitted.item_counts_)
    users = fitted.user_ids_[:5]
    a, sa = fitted.recommend(users, k=5)
    b, sb = loaded.recommend(users, k=5)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(sa, sb, rtol=1e-12)
    # the first fold-in stores the counts it had, before its pairs are marked seen
    loaded.fold_in_users(pd.DataFrame({"user": [10_000, 10_001], "item": [999, 999], "rating": [1.0, 1.0]}))
    np.testing.assert_array_equal(loaded._item_counts, fitted.item_counts_)
