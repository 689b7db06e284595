"""Cross-validation of recommenders with scikit-learn: per-user and temporal splitters,
and a scorer that reads the ratings from the frame (issue 49, item 6)."""

import math
import warnings

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score

from dask_dgd import ImplicitMatrixFactorization, InputError, MatrixFactorization, ParameterError
from dask_dgd.datasets import make_ratings
from dask_dgd.recommender import UserKFold, UserTimeSplit, rating_scorer, train_test_split


@pytest.fixture(scope="module")
def ratings():
    r, _ = make_ratings(120, 40, 2400, random_state=0)
    r = r.sort_values("user", kind="stable").reset_index(drop=True)  # as a frame sorted by user
    r["timestamp"] = np.random.default_rng(1).permutation(len(r))
    # a user with one rating, one with two
    extra = pd.DataFrame({"user": [10_001, 10_002, 10_002], "item": [0, 1, 2], "rating": [3.0, 4.0, 2.0],
                          "timestamp": [5, 6, 7]})
    return pd.concat([r, extra], ignore_index=True)


def test_plain_kfold_on_a_sorted_frame_holds_out_unseen_users(ratings):
    # (the problem: every test user of an unshuffled fold is absent from its training set)
    train, test = next(KFold(3).split(ratings))
    assert not set(ratings["user"].iloc[test]) & set(ratings["user"].iloc[train])


def test_user_kfold_holds_out_a_share_of_every_user(ratings):
    cv = UserKFold(3, random_state=0)
    assert cv.get_n_splits() == 3
    folds = list(cv.split(ratings))
    assert len(folds) == 3
    held = np.zeros(len(ratings), dtype=int)
    users = ratings["user"].to_numpy()
    counts = ratings["user"].value_counts()
    for train, test in folds:
        assert np.intersect1d(train, test).size == 0 and train.size + test.size == len(ratings)
        held[test] += 1
        assert set(users) == set(users[train])  # every user keeps at least one rating for training
        per_user = pd.Series(users[test]).value_counts().reindex(counts.index, fill_value=0)
        many = counts >= 6
        ratio = (per_user[many] / counts[many]).to_numpy()
        assert ratio.min() > 0.15 and ratio.max() < 0.5  # about a third of each user's ratings
    single = users == 10_001
    assert (held[single] == 0).all() and (held[~single] == 1).all()  # held out once, but a single rating never
    again = list(UserKFold(3, random_state=0).split(ratings))
    assert all((a[1] == b[1]).all() for a, b in zip(folds, again))  # seeded
    other = list(UserKFold(3, random_state=1).split(ratings))
    assert not (folds[0][1].size == other[0][1].size and (folds[0][1] == other[0][1]).all())


def test_user_time_split_holds_out_windows_of_latest_ratings(ratings):
    cv = UserTimeSplit(3, test_size=0.2)
    splits = list(cv.split(ratings))
    assert len(splits) == cv.get_n_splits() == 3
    users, t = ratings["user"].to_numpy(), ratings["timestamp"].to_numpy()
    for j, (train, test) in enumerate(splits):
        for u in np.unique(users[test]):
            tr, te = t[train][users[train] == u], t[test][users[test] == u]
            assert tr.size and tr.max() < te.min()  # trained on the user's past only
        if j:
            assert set(splits[j - 1][0]) < set(train)  # an expanding window
    # the last split is train_test_split's temporal one
    tr_ref, te_ref = train_test_split(ratings, 0.2, time_col="timestamp")
    np.testing.assert_array_equal(np.sort(splits[-1][1]), np.sort(te_ref.index.to_numpy()))
    np.testing.assert_array_equal(np.sort(splits[-1][0]), np.sort(tr_ref.index.to_numpy()))
    # a user of 20 ratings: windows of 4, ranks 8-11, 4-7, 0-3 from the latest
    u = ratings["user"].value_counts().index[ratings["user"].value_counts() == 20]
    if len(u):
        rows = np.flatnonzero(users == u[0])
        latest_first = rows[np.argsort(-t[rows])]
        for j, (_, test) in enumerate(splits):
            assert set(test) & set(rows) == set(latest_first[(2 - j) * 4:(3 - j) * 4])
    # the user of two ratings: only the last split can hold one out; its oldest always trains
    two = np.flatnonzero(users == 10_002)
    assert [len(set(te) & set(two)) for _, te in splits] == [0, 0, 1]
    assert all(two[0] in set(tr) for tr, _ in splits)


def test_ties_in_time_break_by_position():
    frame = pd.DataFrame({"user": [1] * 5, "item": range(5), "timestamp": [0] * 5})
    (train, test), = UserTimeSplit(1, 0.4).split(frame)
    assert test.tolist() == [3, 4] and train.tolist() == [0, 1, 2]


def test_grid_search_with_the_per_user_splitter_and_rmse(ratings):
    grid = {"alpha": [0.02, 0.2], "n_components": [2]}
    mf = MatrixFactorization(max_iter=15, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        with pytest.raises(TypeError, match="missing 1 required positional argument: 'y_true'"):  # (the failure without rating_scorer)
            GridSearchCV(mf, grid, cv=UserKFold(2, random_state=0), scoring="neg_root_mean_squared_error",
                         error_score="raise").fit(ratings)
        gs = GridSearchCV(mf, grid, cv=UserKFold(2, random_state=0),
                          scoring=rating_scorer("neg_root_mean_squared_error")).fit(ratings)
        own = GridSearchCV(mf, grid, cv=UserKFold(2, random_state=0)).fit(ratings)  # score: -RMSE
    np.testing.assert_allclose(gs.cv_results_["mean_test_score"], own.cv_results_["mean_test_score"], rtol=1e-12)
    assert np.isfinite(gs.cv_results_["mean_test_score"]).all()
    # the scorer is the metric on the rating column
    train, test = next(UserKFold(2, random_state=0).split(ratings))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fitted = MatrixFactorization(n_components=2, alpha=0.2, max_iter=15, random_state=0).fit(ratings.iloc[train])
    held = ratings.iloc[test]
    mae = np.mean(np.abs(fitted.predict(held) - held["rating"].to_numpy()))
    assert rating_scorer("neg_mean_absolute_error")(fitted, held) == pytest.approx(-mae, rel=1e-12)
    assert rating_scorer("neg_mean_absolute_error")(fitted, held[["user", "item"]],
                                                    held["rating"]) == pytest.approx(-mae, rel=1e-12)


def test_cross_val_score_ranks_implicit_models_with_their_ndcg(ratings):
    liked = ratings[ratings["rating"] >= 3.5]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        scores = cross_val_score(ImplicitMatrixFactorization(n_components=10, loss="wls", alpha=0.01, max_iter=5,
                                                             random_state=0), liked, cv=UserTimeSplit(2, 0.2))
    assert scores.shape == (2,) and ((scores >= 0) & (scores <= 1)).all()


@pytest.mark.parametrize("cv", [UserKFold(2), UserTimeSplit(2)])
def test_the_splitters_refuse_what_they_cannot_split(ratings, cv):
    name = type(cv).__name__
    with pytest.raises(InputError, match=rf"{name} splits an in-memory pandas DataFrame \(scikit-learn's "
                       r"cross-validation indexes its rows\); got a dask DataFrame: use X.compute\(\) if it fits "
                       r"in memory, or dask_dgd.recommender.train_test_split\(X, ...\) for one split"):
        next(cv.split(dd.from_pandas(ratings, npartitions=2)))
    with pytest.raises(InputError, match=rf"{name} splits a pandas DataFrame of ratings \(with a 'user' column\); "
                       r"got ndarray"):
        next(cv.split(ratings[["user", "item"]].to_numpy()))
    with pytest.raises(InputError, match=rf"{name}: X has no column 'user' \(columns: \['u', 'item', 'rating', "
                       rf"'timestamp'\]\); set {name}'s user_col to the column's name"):
        next(cv.split(ratings.rename(columns={"user": "u"})))
    gap = ratings.astype({"user": float})
    gap.loc[0, "user"] = np.nan
    with pytest.raises(InputError, match=rf"{name}: 1 values of the 'user' column are missing; drop those rows"):
        next(cv.split(gap))


def test_bad_splitter_parameters(ratings):
    for bad in (1, 2.0, True):
        with pytest.raises(ParameterError, match=rf"n_splits must be an int >= 2; got {bad!r}"):
            next(UserKFold(bad).split(ratings))
    with pytest.raises(ParameterError, match=r"random_state must be an int >= 0 or None; got -1"):
        next(UserKFold(2, random_state=-1).split(ratings))
    with pytest.raises(ParameterError, match=r"n_splits must be an int >= 1; got 0"):
        next(UserTimeSplit(0).split(ratings))
    for bad in (0, 1.0, "0.2"):
        with pytest.raises(ParameterError, match=rf"test_size must be a float in \(0, 1\); got {bad!r}"):
            next(UserTimeSplit(2, bad).split(ratings))
    with pytest.raises(ParameterError, match=r"n_splits \* test_size must be below 1 .*; got n_splits=5, "
                       r"test_size=0.2: lower either"):
        next(UserTimeSplit(5, 0.2).split(ratings))
    with pytest.raises(InputError, match=r"UserTimeSplit: X has no column 'timestamp' .*; set UserTimeSplit's "
                       r"time_col to the column's name"):
        next(UserTimeSplit(2).split(ratings.drop(columns="timestamp")))
    assert math.isclose(UserTimeSplit(2, 0.3).test_size, 0.3)


def test_rating_scorer_errors(ratings):
    with pytest.raises(ParameterError, match=r"metric must be the name of a scikit-learn scorer "
                       r"\(sklearn.metrics.get_scorer_names\(\), e.g. 'neg_root_mean_squared_error', "
                       r"'neg_mean_absolute_error', 'r2'\); got 'rmse'"):
        rating_scorer("rmse")
    for bad in ("roc_auc", "accuracy", "f1", "adjusted_rand_score", "neg_brier_score"):
        with pytest.raises(ParameterError, match=rf"metric '{bad}' is not a regression metric \(it scores classes, "
                           r"class probabilities, decision values or clusters\); a recommender predicts ratings: use "
                           r"a regression metric \(e.g. 'neg_root_mean_squared_error', 'neg_mean_absolute_error', "
                           r"'r2'; all: d2_absolute_error_score, .*neg_root_mean_squared_error.*, r2\)"):
            rating_scorer(bad)
    for good in ("r2", "explained_variance", "neg_max_error", "neg_median_absolute_error"):
        assert repr(rating_scorer(good)) == f"rating_scorer({good!r})"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mf = MatrixFactorization(n_components=2, alpha=0.1, max_iter=3, random_state=0).fit(ratings)
    with pytest.raises(InputError, match=r"rating_scorer\('neg_root_mean_squared_error'\) reads the true ratings "
                       r"from the estimator's rating column \('rating'\) when y is None; X has columns \['user', "
                       r"'item'\]: pass a DataFrame with that column, or the ratings as y"):
        rating_scorer()(mf, ratings[["user", "item"]])


@pytest.fixture(scope="module")
def plays():
    # an event log: (user, item) pairs repeat as a rule
    rng = np.random.default_rng(0)
    return pd.DataFrame({"user": rng.integers(0, 50, 3000), "item": rng.integers(0, 40, 3000),
                         "timestamp": np.arange(3000)})


def _pair_keys(frame, idx):
    return set(map(tuple, frame.iloc[idx][["user", "item"]].to_numpy().tolist()))


@pytest.mark.parametrize("cv", [UserKFold(3, random_state=0), UserTimeSplit(2, 0.2)], ids=["kfold", "time"])
def test_a_repeated_pair_is_held_out_whole(plays, cv):
    assert plays.duplicated(["user", "item"]).sum() > 1000
    splits = list(cv.split(plays))
    for train, test in splits:
        assert test.size and not _pair_keys(plays, train) & _pair_keys(plays, test)
    if isinstance(cv, UserKFold):
        # a partition of the pairs of users with two or more: each held out once
        held = np.concatenate([test for _, test in splits])
        assert np.unique(held).size == held.size == len(plays)  # (no user of a single pair here)


def test_user_time_split_dates_a_pair_by_its_latest_row():
    # user 1: item 0 at times 0 and 9 (latest: 9), items 1..4 at times 1..4
    frame = pd.DataFrame({"user": [1] * 6, "item": [0, 1, 2, 3, 4, 0], "timestamp": [0, 1, 2, 3, 4, 9]})
    (train, test), = UserTimeSplit(1, 0.2).split(frame)  # ceil(0.2 * 5 pairs) = 1 pair held out
    assert test.tolist() == [0, 5] and train.tolist() == [1, 2, 3, 4]
    # per user: each user's training pairs are older than its test pairs; other users' later ratings train
    frame = pd.DataFrame({"user": [1, 1, 2, 2], "item": [0, 1, 0, 1], "timestamp": [10, 11, 20, 21]})
    (train, test), = UserTimeSplit(1, 0.5).split(frame)
    assert test.tolist() == [1, 3] and train.tolist() == [0, 2]  # row 2 (time 20) trains; row 1 (time 11) tests


def test_user_time_split_refuses_a_window_that_holds_out_nothing():
    # every user has two pairs: with windows of one pair, only the latest window holds out (the oldest trains)
    frame = pd.DataFrame({"user": [1, 1, 2, 2, 2], "item": [0, 1, 0, 1, 1], "timestamp": range(5)})
    with pytest.raises(InputError, match=r"UserTimeSplit: split 0 of 2 \(window 2 back from each user's latest\) "
                       r"would hold out no ratings: every user has too few distinct \(user, item\) pairs for 2 "
                       r"windows of test_size=0.3 \(each user's oldest pair always trains\); lower n_splits, or "
                       r"give users more ratings"):
        next(UserTimeSplit(2, 0.3).split(frame))
    (train, test), = UserTimeSplit(1, 0.3).split(frame)
    assert test.tolist() == [1, 3, 4]


def test_user_kfold_refuses_a_fold_that_holds_out_nothing_and_is_not_a_partition(ratings):
    frame = pd.DataFrame({"user": [1, 1, 2, 3], "item": [0, 1, 0, 0]})  # two pairs at most: a fold is empty
    with pytest.raises(InputError, match=r"UserKFold: fold \d of 3 would hold out no ratings: every user has fewer "
                       r"distinct \(user, item\) pairs than n_splits=3 \(a user's single pair is never held out\); "
                       r"lower n_splits, or give users more ratings"):
        list(UserKFold(3, random_state=0).split(frame))
    with pytest.raises(InputError, match=r"UserKFold: X has no column 'item' .*; set UserKFold's item_col"):
        next(UserKFold(2).split(ratings.drop(columns="item")))
    # the single-rating user is in no test fold: cross_val_predict refuses the splitter, as documented
    from sklearn.model_selection import cross_val_predict

    with pytest.raises(ValueError, match="cross_val_predict only works for partitions"):
        cross_val_predict(MatrixFactorization(n_components=0, alpha=0.1, max_iter=1), ratings,
                          cv=UserKFold(2, random_state=0))
