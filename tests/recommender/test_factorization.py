"""Matrix factorization: accuracy, sharding invariance, model parallelism, API, errors."""

import pickle
import warnings

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV

from dask_dgd import CheckpointError, ImplicitMatrixFactorization, InputError, MatrixFactorization, ParameterError
from dask_dgd.datasets import make_ratings
from dask_dgd.exceptions import ConvergenceWarning, DivergenceError
from dask_dgd.recommender import evaluate_ranking, train_test_split


@pytest.fixture(scope="module")
def lowrank():
    """Rank-3 ratings with little noise, split 90/10 per user."""
    ratings, truth = make_ratings(300, 150, 12000, rank=3, noise=0.1, random_state=0)
    train, test = train_test_split(ratings, 0.1, random_state=0)
    return train, test


def _quiet_fit(est, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(*args)


def _bias_rmse(train, test):
    """Test RMSE of the user + item bias baseline (n_components=0)."""
    base = MatrixFactorization(n_components=0, alpha=0.01, max_iter=300, learning_rate=0.05, random_state=0)
    _quiet_fit(base, train)
    assert base.user_factors_.shape == (train["user"].nunique(), 0)
    return -base.score(test)


@pytest.mark.parametrize("batch_size", [None, 1000])
def test_recovers_held_out_ratings_far_better_than_biases(lowrank, client, batch_size):
    train, test = lowrank
    mf = MatrixFactorization(n_components=3, alpha=0.002, learning_rate=0.05, max_iter=150 if batch_size is None else 30,
                             batch_size=batch_size, random_state=0, client=client)
    _quiet_fit(mf, dd.from_pandas(train, npartitions=3))
    rmse = -mf.score(test)
    baseline = _bias_rmse(train, test)
    assert rmse < 0.5 * baseline, (rmse, baseline)
    assert rmse < 0.3  # noise is 0.1, the signal has unit variance


@pytest.mark.parametrize("batch_size", [None, pytest.param(2000, marks=pytest.mark.slow)])
def test_results_do_not_depend_on_the_number_of_shards(lowrank, client, batch_size):
    train, _ = lowrank
    ddf = dd.from_pandas(train, npartitions=4)
    fits = []
    for n_shards in (1, 2, 3):
        mf = MatrixFactorization(n_components=3, max_iter=8, batch_size=batch_size, tol=0, random_state=1,
                                 n_shards=n_shards, client=client).fit(ddf)
        assert len(mf.shard_ratings_) == n_shards
        fits.append(mf)
    inproc = MatrixFactorization(n_components=3, max_iter=8, batch_size=batch_size, tol=0, random_state=1).fit(train)
    for other in fits[1:] + [inproc]:
        np.testing.assert_allclose(other.user_factors_, fits[0].user_factors_, rtol=0, atol=1e-10)
        np.testing.assert_allclose(other.item_factors_, fits[0].item_factors_, rtol=0, atol=1e-10)
        np.testing.assert_allclose(other.loss_curve_, fits[0].loss_curve_, rtol=1e-12)


def _bytes_up(ratings, client, n_shards=2):
    mf = MatrixFactorization(n_components=4, alpha=0.1, solver="gd", max_iter=2, tol=0, random_state=0,
                             n_shards=n_shards, client=client)
    mf.fit(ratings)
    return mf.history_["bytes_up"].to_numpy()


def _ratings(n_users, item_pool, n_items_total, per_user=8, seed=0):
    """Each user rates ``per_user`` items drawn from the first ``item_pool`` ids; one
    user rates item ``n_items_total - 1`` so that every fit has the same item table."""
    rng = np.random.default_rng(seed)
    users = np.repeat(np.arange(n_users), per_user)
    items = np.concatenate([rng.choice(item_pool, per_user, replace=False) for _ in range(n_users)])
    items[0] = n_items_total - 1
    return pd.DataFrame({"user": users, "item": items, "rating": rng.normal(3, 1, users.size)})


def test_user_factors_are_not_communicated(client):
    """Bytes reduced per step follow the items the ratings touch, not the users."""
    n_items = 2000
    few_users = _bytes_up(_ratings(200, 60, n_items), client)
    many_users = _bytes_up(_ratings(2000, 60, n_items), client)
    more_items = _bytes_up(_ratings(200, 600, n_items), client)
    # 10x the users, same items touched: the same bytes (up to the few items a shard misses)
    assert many_users.max() <= few_users.max() * 1.05
    # 10x the items touched: several times the bytes
    assert more_items.min() > 4 * few_users.max()
    # and far below a dense item-gradient table from each of the two shards
    assert few_users.max() < 0.1 * 2 * n_items * 5 * 8


def test_shards_are_balanced_by_ratings_not_users(client):
    # three power users with 300 ratings each, 400 users with 5
    rng = np.random.default_rng(0)
    counts = np.r_[[300, 300, 300], np.full(400, 5)]
    users = np.repeat(np.arange(counts.size), counts)
    items = np.concatenate([rng.choice(400, c, replace=False) for c in counts])
    ratings = pd.DataFrame({"user": users, "item": items, "rating": rng.normal(3, 1, users.size)})
    mf = MatrixFactorization(n_components=2, max_iter=1, tol=0, n_shards=4, random_state=0, client=client)
    _quiet_fit(mf, ratings)
    loads = mf.shard_ratings_
    assert loads.sum() == len(ratings)
    assert loads.max() / loads.mean() < 1.01
    # equal numbers of users per shard would put the power users together
    by_users = np.array([c.sum() for c in np.array_split(counts, 4)])
    assert by_users.max() / by_users.mean() > 1.8


@pytest.mark.slow
def test_string_ids_dask_array_input_and_y(lowrank, client):
    train, test = lowrank
    named = train.assign(user="u" + train["user"].astype(str), item="i" + train["item"].astype(str))
    a = MatrixFactorization(n_components=3, max_iter=5, tol=0, random_state=0, client=client).fit(named)
    assert a.user_ids_[0].startswith("u") and len(a.user_ids_) == train["user"].nunique()
    pairs = train[["user", "item"]].to_numpy()
    b = MatrixFactorization(n_components=3, max_iter=5, tol=0, random_state=0, client=client)
    b.fit(da.from_array(pairs, chunks=(3000, 2)), da.from_array(train["rating"].to_numpy(), chunks=3000))
    c = MatrixFactorization(n_components=3, max_iter=5, tol=0, random_state=0).fit(pairs, train["rating"].to_numpy())
    np.testing.assert_allclose(b.item_factors_, c.item_factors_, atol=1e-10)
    # string ids from a dask DataFrame: the same model as from pandas
    d = MatrixFactorization(n_components=3, max_iter=5, tol=0, random_state=0, client=client)
    d.fit(dd.from_pandas(named, npartitions=3))
    np.testing.assert_array_equal(d.user_ids_, a.user_ids_)
    np.testing.assert_allclose(d.user_factors_, a.user_factors_, atol=1e-10)
    lazy = c.predict(dd.from_pandas(test[["user", "item"]], npartitions=2))
    assert isinstance(lazy, da.Array)
    np.testing.assert_allclose(lazy.compute(), c.predict(test), atol=1e-12)


def test_unknown_users_and_items_fall_back_to_biases(lowrank):
    train, _ = lowrank
    mf = MatrixFactorization(n_components=3, max_iter=20, random_state=0)
    _quiet_fit(mf, train)
    u0, i0 = mf.user_ids_[0], mf.item_ids_[0]
    pred = mf.predict(pd.DataFrame({"user": [u0, -1, u0, -1], "item": [i0, i0, -7, -7]}))
    mu = mf.global_mean_
    assert pred[1] == pytest.approx(mu + mf.item_bias_[0])
    assert pred[2] == pytest.approx(mu + mf.user_bias_[0])
    assert pred[3] == pytest.approx(mu)
    full = mu + mf.user_bias_[0] + mf.item_bias_[0] + mf.user_factors_[0] @ mf.item_factors_[0]
    assert pred[0] == pytest.approx(full)


def test_recommend_and_similar_items(lowrank):
    train, _ = lowrank
    mf = MatrixFactorization(n_components=3, max_iter=50, random_state=0)
    _quiet_fit(mf, train)
    users = mf.user_ids_[:5]
    ids, scores = mf.recommend(users, k=7, confidence=0)  # (0: ranked by the predicted ratings)
    assert ids.shape == scores.shape == (5, 7)
    assert np.all(np.diff(scores, axis=1) <= 0)
    for u, row in zip(users, ids):
        rated = set(train.loc[train["user"] == u, "item"])
        assert not rated & set(row)
    # the scores are the predicted ratings, and the best unseen items are found
    pred = mf.predict(pd.DataFrame({"user": np.repeat(users[0], 7), "item": ids[0]}))
    np.testing.assert_allclose(pred, scores[0], atol=1e-10)
    unseen = np.setdiff1d(mf.item_ids_, train.loc[train["user"] == users[0], "item"])
    best = np.sort(mf.predict(pd.DataFrame({"user": users[0], "item": unseen})))[::-1][:7]
    np.testing.assert_allclose(best, scores[0], atol=1e-10)
    with_seen, _ = mf.recommend(users[:1], k=len(mf.item_ids_), exclude_seen=False)
    assert set(with_seen[0]) == set(mf.item_ids_)
    sims, cos = mf.similar_items(mf.item_ids_[:3], k=4)
    assert sims.shape == (3, 4) and np.all(cos <= 1 + 1e-12)
    assert not np.any(sims == mf.item_ids_[:3, None])
    Q = mf.item_factors_ / np.linalg.norm(mf.item_factors_, axis=1, keepdims=True)
    expected = np.argsort(-(Q @ Q[0]))[1:5]
    np.testing.assert_array_equal(sims[0], mf.item_ids_[expected])
    pool = mf.item_ids_[10:40]
    only, _ = mf.similar_items(mf.item_ids_[[0, 12]], k=5, candidates=pool)
    assert set(only.ravel()) <= set(pool) and 12 not in only[1]
    assert only.shape == (2, 5)  # five other candidates for each (item 12 is one of the pool)
    single, _ = mf.similar_items(mf.item_ids_[0], k=9, candidates=mf.item_ids_[[0, 7]])
    assert single.tolist() == [[mf.item_ids_[7]]]
    with pytest.raises(InputError, match=r"1 candidate item\(s\) were not seen in fit"):
        mf.similar_items(mf.item_ids_[:1], candidates=[-5])


def test_partial_fit_grows_the_model(lowrank, client):
    train, _ = lowrank
    mf = MatrixFactorization(n_components=3, alpha=0.1, solver="gd", max_iter=30, random_state=0, client=client)
    _quiet_fit(mf, train)
    n_users, n_items = len(mf.user_ids_), len(mf.item_ids_)
    users_before, bias_before = mf.user_factors_.copy(), mf.user_bias_.copy()
    state_before = mf._user_state_
    new = pd.DataFrame({"user": [90_001, 90_001, 5], "item": [0, 10_000, 1], "rating": [4.0, 2.0, 3.0]})
    mf.partial_fit(new)
    assert len(mf.user_ids_) == n_users + 1 and mf.user_ids_[-1] == 90_001
    assert len(mf.item_ids_) == n_items + 1 and mf.item_ids_[-1] == 10_000
    # one record per evaluation: the fit's 31 (30 epochs), then partial_fit's start and 1 epoch
    assert mf.n_iter_ == 31 and len(mf.history_) == 31 + 2
    # users without new ratings keep their factors, biases and optimizer state exactly
    others = np.flatnonzero(mf.user_ids_[:n_users] != 5)
    np.testing.assert_array_equal(mf.user_factors_[others], users_before[others])
    np.testing.assert_array_equal(mf.user_bias_[others], bias_before[others])
    np.testing.assert_array_equal(mf._user_state_.mu[others], state_before.mu[others])
    five = int(np.flatnonzero(mf.user_ids_ == 5)[0])
    assert not np.array_equal(mf.user_factors_[five], users_before[five])  # user 5 had a new rating
    ids, _ = mf.recommend(90_001, k=3)  # one id, not a list
    assert ids.shape == (1, 3) and 0 not in ids[0] and 10_000 not in ids[0]
    # a model started by partial_fit is fitted
    fresh = MatrixFactorization(n_components=2, random_state=0).partial_fit(train)
    assert fresh.n_iter_ == 1


def test_refit_with_other_settings_starts_clean():
    data, _ = make_ratings(60, 40, 600, implicit=True, random_state=0)
    est = ImplicitMatrixFactorization(loss="bpr", n_components=2, alpha=0.01, max_iter=3, tol=0,
                                      random_state=0).fit(data)
    assert hasattr(est, "item_bias_")
    est.set_params(loss="wls").fit(data.iloc[:300])
    assert not hasattr(est, "item_bias_")  # BPR's biases do not leak into the wls model
    est.recommend(est.user_ids_[:2], k=3)


def test_tol_zero_runs_every_epoch_and_optimizer_objects_keep_their_rate():
    from dask_dgd.optim import SGD

    ratings, _ = make_ratings(50, 30, 600, random_state=0)
    mf = MatrixFactorization(n_components=2, alpha=0.1, optimizer="sgd", learning_rate=1.0, max_iter=25, tol=0,
                             random_state=0).fit(ratings)
    assert mf.n_iter_ == 25 and len(mf.history_) == 25 + 1  # the start and 25 epochs
    own = MatrixFactorization(n_components=2, alpha=0.1, optimizer=SGD(learning_rate=0.7), max_iter=2, tol=0,
                              random_state=0).fit(ratings)
    assert set(own.history_["step_size"]) == {0.7}
    named = MatrixFactorization(n_components=2, alpha=0.1, solver="gd", max_iter=2, tol=0, random_state=0).fit(ratings)
    assert set(named.history_["step_size"]) == {0.05}


def test_ranking_ignores_padding_past_the_unseen_items():
    data = pd.DataFrame({"user": [0, 0, 0, 1, 1], "item": [0, 1, 2, 0, 3]})
    est = ImplicitMatrixFactorization(n_components=2, loss="bpr", alpha=0.01, max_iter=2, tol=0,
                                      random_state=0).fit(data)
    ids, scores = est.recommend(0, k=4)
    assert ids.mask[0].tolist() == [False, True, True, True]  # only item 3 is unseen: the rest is padding
    assert np.isneginf(scores.data[0, 1:]).all()
    # the test repeats an item user 0 already has: excluded, never counted as a hit
    got = evaluate_ranking(est, pd.DataFrame({"user": [0], "item": [1]}), k=4)
    assert got["recall"] == 0.0 and got["precision"] == 0.0


def test_pickle_without_cluster_and_sklearn_tools(lowrank, client):
    train, test = lowrank
    mf = MatrixFactorization(n_components=3, max_iter=20, random_state=0, client=client)
    _quiet_fit(mf, train)
    back = pickle.loads(pickle.dumps(mf))
    assert back.client is None
    np.testing.assert_array_equal(back.predict(test), mf.predict(test))
    copy = clone(mf)  # keeps the live client (deep-copying it would fail)
    assert copy.client is client and copy.get_params()["n_components"] == 3
    assert not hasattr(copy, "item_factors_")
    grid = GridSearchCV(MatrixFactorization(max_iter=40, random_state=0), {"alpha": [0.002, 0.5]}, cv=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grid.fit(train)
    assert grid.best_params_ == {"alpha": 0.002}


@pytest.mark.parametrize("loss", ["bpr", "wls"])
def test_implicit_ranks_held_out_items_better_than_popularity(loss, client):
    data, _ = make_ratings(400, 200, 12000, rank=3, implicit=True, random_state=0)
    train, test = train_test_split(data, 0.2, random_state=0)
    est = ImplicitMatrixFactorization(loss=loss, n_components=3, alpha=0.01, max_iter=60, random_state=0,
                                      rating_col="count", client=client)
    _quiet_fit(est, dd.from_pandas(train, npartitions=2))
    got = evaluate_ranking(est, test, k=10)
    # popularity: the most-rated unseen items for everyone
    pop = train["item"].value_counts().index.to_numpy()
    seen = train.groupby("user")["item"].agg(set)
    rel = test.groupby("user")["item"].agg(set)
    recs = np.array([[i for i in pop if i not in seen.get(u, set())][:10] for u in rel.index])
    from dask_dgd.recommender import ndcg_at_k

    popular = ndcg_at_k(rel.to_list(), recs, 10)
    assert got["ndcg"] > 1.3 * popular, (got, popular)
    assert est.score(test) == pytest.approx(got["ndcg"])


def test_implicit_results_do_not_depend_on_shards(client):
    data, _ = make_ratings(200, 100, 4000, rank=3, implicit=True, random_state=1)
    fits = [
        ImplicitMatrixFactorization(loss=loss, n_components=3, alpha=0.01, max_iter=5, tol=0, batch_size=1000,
                                    random_state=2, n_shards=n, rating_col="count", client=client).fit(data)
        for loss in ("bpr", "wls")
        for n in (1, 3)
    ]
    for a, b in (fits[0:2], fits[2:4]):
        np.testing.assert_allclose(a.user_factors_, b.user_factors_, atol=1e-10)
        np.testing.assert_allclose(a.item_factors_, b.item_factors_, atol=1e-10)


# ------------------------------------------------------------------ bad input
def _small():
    return pd.DataFrame({"user": [1, 1, 2], "item": [1, 2, 1], "rating": [1.0, 2.0, 3.0]})


@pytest.mark.parametrize(
    "frame, kwargs, match",
    [
        (_small().drop(columns="item"), {}, "X has no column 'item'"),
        (_small().rename(columns={"user": "uid"}), {}, "X has no column 'user'"),
        (_small().drop(columns="rating"), {}, "the ratings have no column 'rating'"),
        (_small().assign(rating=[1.0, np.nan, 2.0]), {}, "1 values of the 'rating' column are NaN or infinite"),
        (_small().assign(rating=[1.0, np.inf, 2.0]), {}, "NaN or infinite"),
        (_small().assign(user=[1, None, 2]), {}, "user or item ids are missing"),
        (_small().iloc[:0], {}, r"the ratings are empty \(0 rows\)"),
        (_small().assign(rating=["a", "b", "c"]), {}, "column must be numeric"),
        (_small().assign(user=[1, "x", 2]), {}, "mix types that cannot be ordered"),
    ],
)
def test_bad_ratings_are_clear_errors(frame, kwargs, match):
    with pytest.raises(InputError, match=match):
        MatrixFactorization(max_iter=1, **kwargs).fit(frame)


def test_bad_input_on_a_cluster_is_found_where_the_data_lives(client):
    bad = dd.from_pandas(_small().assign(rating=[1.0, np.nan, 2.0]), npartitions=2)
    with pytest.raises(InputError, match="1 values of the 'rating' column are NaN"):
        MatrixFactorization(max_iter=1, client=client).fit(bad)


def test_a_separate_y_with_a_dask_frame_is_refused_and_dask_pairs_take_numpy_y(lowrank, client):
    train, _ = lowrank
    with pytest.raises(InputError, match="with a dask DataFrame, pass the ratings as one of its columns"):
        MatrixFactorization(client=client).fit(dd.from_pandas(train[["user", "item"]], npartitions=2),
                                               train["rating"].to_numpy())
    pairs = da.from_array(train[["user", "item"]].to_numpy(), chunks=(2500, 2))
    a = MatrixFactorization(n_components=2, max_iter=3, tol=0, random_state=0, client=client)
    a.fit(pairs, train["rating"].to_numpy())
    b = MatrixFactorization(n_components=2, max_iter=3, tol=0, random_state=0).fit(train)
    np.testing.assert_allclose(a.item_factors_, b.item_factors_, atol=1e-10)


def test_bad_shapes_and_parameters():
    with pytest.raises(InputError, match=r"\(n, 2\) array of \(user, item\) pairs; got shape \(3, 3\)"):
        MatrixFactorization().fit(np.zeros((3, 3)), np.zeros(3))
    with pytest.raises(InputError, match="y must be 1-D with one value per row of X"):
        MatrixFactorization().fit(np.zeros((3, 2)), np.zeros(4))
    with pytest.raises(ParameterError, match="'n_components' parameter of MatrixFactorization must be"):
        MatrixFactorization(n_components=-1).fit(_small())
    with pytest.raises(ParameterError, match="'n_components' parameter of ImplicitMatrixFactorization must be"):
        ImplicitMatrixFactorization(n_components=0).fit(_small())
    with pytest.raises(ParameterError, match="'optimizer' parameter"):
        MatrixFactorization(optimizer="lbfgs").fit(_small())
    with pytest.raises(ParameterError, match="'loss' parameter of ImplicitMatrixFactorization"):
        ImplicitMatrixFactorization(loss="hinge").fit(_small())
    with pytest.raises(InputError, match="confidence-weighted least squares needs strengths >= 0"):
        ImplicitMatrixFactorization(loss="wls", rating_col="rating").fit(_small().assign(rating=[1.0, -1.0, 0.0]))


def test_score_refuses_nan_and_empty_ratings():
    mf = MatrixFactorization(n_components=2, max_iter=3, random_state=0)
    _quiet_fit(mf, _small())
    assert mf.score(_small()) <= 0
    with pytest.raises(InputError, match=r"1 values of the 'rating' column are NaN or infinite; drop or fill them before scoring"):
        mf.score(_small().assign(rating=[1.0, np.nan, 2.0]))
    with pytest.raises(InputError, match=r"the ratings to score are empty \(0 rows\)"):
        mf.score(_small().iloc[:0])


def test_recommend_errors():
    mf = MatrixFactorization(n_components=2, max_iter=3, random_state=0)
    _quiet_fit(mf, _small())
    with pytest.raises(ParameterError, match="k must be an int > 0; got 0"):
        mf.recommend([1], k=0)
    with pytest.raises(ParameterError, match="k must be an int > 0; got -2"):
        mf.similar_items([1], k=-2)
    with pytest.raises(InputError, match=r"2 user\(s\) were not seen in fit: 7, 9"):
        mf.recommend([1, 7, 9])
    with pytest.raises(InputError, match=r"1 item\(s\) were not seen in fit: 'zz'"):
        mf.similar_items(["zz"])
    # k larger than the items: every item, unseen first, seen ones last, masked (-inf under the mask)
    ids, scores = mf.recommend([1], k=50)
    assert ids.shape == (1, 2) and ids.mask.all() and np.all(np.isneginf(scores.data))
    ids, scores = mf.recommend([2], k=50)
    assert ids[0, 0] == 2 and np.isfinite(scores[0, 0]) and ids.mask[0].tolist() == [False, True]
    assert np.isneginf(scores.data[0, 1])


def test_a_rising_objective_advises_only_a_lower_learning_rate():
    """Under a large penalty the steps are too long for the penalty's own curvature:
    raising alpha (the old advice beside a lower rate) would make them worse."""
    ratings, _ = make_ratings(50, 30, 600, random_state=0)
    kw = dict(alpha=1e3, solver="gd", max_iter=20, random_state=0)
    with pytest.warns(ConvergenceWarning, match=r"^MatrixFactorization: the objective rose from \S+ at the start to "
                                                r"\S+; the learning rate is too large for these data: lower "
                                                r"learning_rate$"):
        MatrixFactorization(learning_rate=0.5, **kw).fit(ratings)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        MatrixFactorization(learning_rate=0.005, **kw).fit(ratings)
    assert not [w for w in caught if "rose" in str(w.message)]


def test_divergence_names_the_step_and_the_remedy():
    ratings, _ = make_ratings(50, 30, 600, random_state=0)
    # a learning rate you chose raises at the first divergence (Adam: no monotone steps)
    with pytest.raises(DivergenceError, match=r"the objective (is not finite|exploded .*) at step \d+ \(loss=.*\) "
                                              r"with learning rate 10000; pass a smaller learning_rate, raise alpha"):
        MatrixFactorization(alpha=0.1, learning_rate=1e4, max_iter=50, random_state=0).fit(ratings)
    # plain gradient descent halves a step that raises the objective, and recovers
    mf = MatrixFactorization(alpha=0.1, optimizer="sgd", learning_rate=1e4, max_iter=50, random_state=0).fit(ratings)
    assert np.isfinite(mf.history_["loss"]).all() and mf.history_["step_size"].iloc[-1] < 1e4


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.slow
def test_a_checkpoint_of_other_ratings_with_the_same_totals_is_refused(tmp_path, client):
    """The fingerprint covers the ratings themselves (issue 22, item 3), whatever their
    order or partitions: two ratings swapped between rows keep every total."""
    ratings, _ = make_ratings(50, 30, 600, random_state=0)
    kw = dict(n_components=3, max_iter=5, random_state=0, checkpoint=tmp_path, client=client)
    MatrixFactorization(**kw).fit(ratings)
    rows = ratings.index[ratings["rating"] != ratings["rating"].iloc[0]][0], ratings.index[0]
    swapped = ratings.copy()
    swapped.loc[list(rows), "rating"] = ratings.loc[list(rows[::-1]), "rating"].to_numpy()
    with pytest.raises(CheckpointError, match=r"written by another fit \(ratings digest: checkpoint '[0-9a-f]{16}', "
                                              r"now '[0-9a-f]{16}'\)"):
        MatrixFactorization(**kw).fit(swapped, resume=True)
    # the same ratings in another order, as a dask DataFrame of 3 partitions on the cluster
    shuffled = dd.from_pandas(ratings.sample(frac=1.0, random_state=1), npartitions=3)
    MatrixFactorization(**kw).fit(shuffled, resume=True)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_a_gradient_step_checkpoint_without_the_parameters_unit_is_refused(tmp_path, monkeypatch):
    """A gradient-step fit's checkpoint holds its parameters in units of the ratings'
    standard deviation; one written before they had a unit (the factors themselves, as
    this fingerprint without one stands for) is refused, not read in the wrong
    coordinates.  The same fit resumes."""
    ratings, _ = make_ratings(50, 30, 600, random_state=0)
    kw = dict(n_components=3, alpha=0.1, solver="gd", max_iter=5, random_state=0, checkpoint=tmp_path)
    MatrixFactorization(**kw).fit(ratings)
    MatrixFactorization(**kw).fit(ratings, resume=True)
    real = MatrixFactorization._fingerprint
    monkeypatch.setattr(MatrixFactorization, "_fingerprint", lambda self, alpha, unit=1.0: real(self, alpha))
    MatrixFactorization(**kw).fit(ratings)  # (as the code before the unit wrote it)
    monkeypatch.undo()
    with pytest.raises(CheckpointError, match=r"written by another fit \(unit: checkpoint None, now '[0-9.]+'\)"):
        MatrixFactorization(**kw).fit(ratings, resume=True)


def test_checkpoint_needs_an_int_random_state(tmp_path):
    ratings, _ = make_ratings(50, 30, 600, random_state=0)
    with pytest.raises(ParameterError, match="a checkpoint of a matrix factorization needs an int random_state"):
        MatrixFactorization(checkpoint=tmp_path).fit(ratings)


@pytest.mark.slow
def test_default_fits_converge_without_a_warning_and_beat_the_bias_model():
    """With the defaults (max_iter=100, tol=5e-4 relative) fits on ordinary ratings stop
    by the tolerance, as a Surprise, implicit or Spark ALS user expects, not by max_iter
    (BPR, annealed, runs its epochs without a warning)."""
    from dask_dgd import ConvergenceWarning

    ratings, _ = make_ratings(1000, 500, 20000, rank=5, noise=0.5, random_state=1)
    train, test = train_test_split(ratings, 0.2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        mf = MatrixFactorization(random_state=0).fit(train)
        bias = MatrixFactorization(n_components=0, random_state=0).fit(train)
        implicit, _ = make_ratings(1000, 500, 20000, rank=5, implicit=True, random_state=1)
        wls = ImplicitMatrixFactorization(loss="wls", rating_col="count", random_state=0).fit(implicit)
        assert wls.n_iter_ < wls.max_iter
        # BPR's sampled objective: the annealed default runs its max_iter epochs, silently
        # (each fit of alpha="auto"'s path, and the refit unless the model fell back to
        # popularity, which skips it: BPR at 100 epochs does on these interactions)
        bpr = ImplicitMatrixFactorization(loss="bpr", random_state=0).fit(implicit)
        assert (bpr.validation_path_["epochs_run"] == bpr.max_iter).all()
        assert bpr.n_iter_ == (bpr.max_iter if bpr.factors_used_ else 1)
    assert mf.n_iter_ < mf.max_iter and bias.n_iter_ < bias.max_iter
    assert -mf.score(test) < 0.97 * -bias.score(test), (mf.score(test), bias.score(test))


@pytest.mark.parametrize("kind", ["explicit", "bpr", "wls"])
def test_tol_is_relative_to_the_starting_objective(kind):
    """tol is scaled by the objective's value at the start, computed before training
    from the ratings: it must match the first recorded objective."""
    if kind == "explicit":
        ratings, _ = make_ratings(200, 100, 3000, rank=3, random_state=0)
        ratings["rating"] *= 10.0  # other units: the rule must not care
        est = MatrixFactorization(alpha=0.1, solver="gd", max_iter=1, tol=0, random_state=0)
        start = float(np.var(ratings["rating"]))
    else:
        ratings, _ = make_ratings(200, 100, 3000, rank=3, implicit=True, random_state=0)
        # gradient steps: their first record is at the start (alternating least squares
        # records after its first user solve)
        est = ImplicitMatrixFactorization(n_components=10, loss=kind, alpha=0.01, rating_col="count",
                                          confidence_scale=2.0, max_iter=1, tol=0, solver="gd", random_state=0)
        start = np.log(2.0) if kind == "bpr" else 1.0 + 2.0 * float(ratings["count"].mean())
    est.fit(ratings)
    assert est.loss_curve_[0] == pytest.approx(start, rel=0.03)
    facts = {"n": len(ratings), "rating_sum": float(ratings.iloc[:, 2].sum()),
             "rating_sq_sum": float((ratings.iloc[:, 2] ** 2).sum())}
    assert est._objective_scale(facts, ratings.columns[2]) == pytest.approx(start, rel=1e-9)


def test_progress_bar_is_labelled_and_counts_epochs_of_max_iter(bars, capsys):
    ratings, _ = make_ratings(100, 50, 1500, rank=3, random_state=0)
    mf = MatrixFactorization(n_components=2, alpha=0.1, max_iter=6, tol=0, batch_size=500, verbose=1, random_state=0)
    mf.fit(ratings)
    assert "MatrixFactorization:" in capsys.readouterr().err
    shown = [(b.desc, b.total, b.closed_at) for b in bars if b.shown]
    assert shown[-1] == ("MatrixFactorization", 6, 6) and mf.n_iter_ == 6


def test_dask_tokens_leave_the_client_out_even_after_dask_ml_is_imported(client):
    """dask-ml registers a tokenizer for scikit-learn estimators that hashes
    ``get_params()`` (the live client cannot be hashed): predicting on a dask DataFrame
    with a model holding a client failed once dask-ml was imported in the process."""
    pytest.importorskip("dask_ml.model_selection")
    from dask.base import tokenize

    ratings = _small()
    model = MatrixFactorization(n_components=2, max_iter=5, tol=0, client=client).fit(dd.from_pandas(ratings, npartitions=2))
    pred = model.predict(dd.from_pandas(ratings[["user", "item"]], npartitions=2)).compute()
    np.testing.assert_allclose(pred, model.predict(ratings[["user", "item"]]))
    copy = pickle.loads(pickle.dumps(model))  # the same state, no client
    other = clone(model).fit(dd.from_pandas(ratings.assign(rating=[3.0, 2.0, 1.0]), npartitions=2))
    assert tokenize(model) == tokenize(model) == tokenize(copy)  # deterministic: parameters and fitted state
    assert tokenize(model) != tokenize(other)  # other fitted factors, another token


def test_bpr_default_rate_is_annealed_over_its_epochs():
    """BPR's objective is sampled: with the default rate it is annealed (cosine, to 0)
    and the fit runs its max_iter epochs instead of stopping on the noise of tol."""
    from dask_dgd.optim import CosineDecay

    ratings, _ = make_ratings(200, 80, 3000, implicit=True, random_state=0)
    batches = ImplicitMatrixFactorization(n_components=2, loss="bpr", alpha=0.01, max_iter=12, batch_size=1000,
                                          random_state=0).fit(ratings)
    assert batches.n_iter_ == 12
    steps = batches.history_["step_size"].to_numpy()
    rates = CosineDecay(0.05, 12 * 3)  # 3 batches an epoch
    assert len(steps) >= 12 * 3
    np.testing.assert_allclose(steps, [rates(t) for t in range(len(steps))], rtol=1e-12)
    # a rate you give, or another mode, is kept as it is (and tol applies)
    for kw in ({"learning_rate": 0.05}, {"mode": "local", "local_steps": 2}):
        fixed = ImplicitMatrixFactorization(n_components=2, loss="bpr", alpha=0.01, max_iter=12, random_state=0,
                                            **kw).fit(ratings)
        assert (fixed.history_["step_size"].dropna() == 0.05).all()
    # wls by gradient steps: not sampled, not annealed
    wls = ImplicitMatrixFactorization(n_components=2, loss="wls", alpha=0.01, solver="gd", max_iter=5,
                                      random_state=0).fit(ratings)
    assert (wls.history_["step_size"] == 0.05).all()


# ---------------------------------------------------- memory, leftovers (issue 44)
def test_initial_factors_take_the_memory_of_the_rows_asked_for():
    """init_rows drew a whole block of 4096 rows to return a few (30.5 GiB with
    n_components=10**6, a raw MemoryError on a 3-rating fit); it now draws up to the last
    row asked for, in pieces, and gives the same numbers as one block's draw."""
    import tracemalloc

    from dask_dgd.recommender._shards import INIT_BLOCK, init_rows

    width, ids = 20, np.array([3, 0, 4097, 2 * INIT_BLOCK - 1, 3])
    expected = np.empty((len(ids), width))
    for n, i in enumerate(ids):  # row i % INIT_BLOCK of its block's (INIT_BLOCK, width) draw
        block = np.random.default_rng([7, 17, int(i // INIT_BLOCK)]).normal(0.0, 0.1, size=(INIT_BLOCK, width))
        expected[n] = block[i % INIT_BLOCK]
    np.testing.assert_array_equal(init_rows(7, ids, width, 0.1, bias=False), expected)
    got = init_rows(7, ids, width, 0.1, bias=True)
    np.testing.assert_array_equal(got[:, :-1], expected[:, :-1])
    assert not got[:, -1].any()
    width = 50_000  # a whole block would be 1.5 GiB
    tracemalloc.start()
    try:
        rows = init_rows(7, [0, 2], width, 0.1, bias=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rows.shape == (2, width) and peak < 4 * 3 * width * 8, peak


def test_a_model_larger_than_the_memory_is_refused_up_front(monkeypatch, client):
    """MatrixFactorization(10**6) raised a raw MemoryError; a fit whose factor tables (and
    optimizer states, and in process the multiple of them that a fit holds) cannot fit
    in the memory available is refused before any is allocated, naming the bytes and
    the n_components that would fit."""
    from dask_dgd.recommender import _shards

    monkeypatch.setattr(_shards, "available_memory", lambda: 20 * 2**20, raising=False)
    # in process, by ALS: 2 users and 2 items, each a row of 10**6 factors and a bias, 6 times
    with pytest.raises(ParameterError, match=r"^MatrixFactorization\(n_components=1000000\) needs about 183\.1 MiB "
                                             r"\(192000192 bytes\) of memory: its factor tables \(2 users and 2 items, "
                                             r"float64\) take 30\.5 MiB and a fit in this process holds about 6 times "
                                             r"that \(with the shards' copies, the gradients and the solver's vectors\); "
                                             r"this machine has 20\.0 MiB available; use n_components <= 109225, or a "
                                             r"machine with more memory$"):
        MatrixFactorization(10**6).fit(_small())
    # gradient steps with Adam: its two state tables as well, 4 times
    with pytest.raises(ParameterError, match=r"^ImplicitMatrixFactorization\(n_components=1000000\) needs about "
                                             r"366\.2 MiB \(384000192 bytes\) of memory: its factor tables \(2 users "
                                             r"and 2 items, float64, with the optimizer's 2 state table\(s\) of each\) "
                                             r"take 91\.6 MiB and a fit in this process holds about 4 times that .* use "
                                             r"n_components <= 54612, or"):
        ImplicitMatrixFactorization(10**6, loss="bpr").fit(_small())
    # wls: and a Gram matrix of the factors, width x width
    with pytest.raises(ParameterError, match=r"^ImplicitMatrixFactorization\(n_components=1000000\) needs about "
                                             r"7450\.8 GiB \(8000192000000 bytes\) of memory: .* and a Gram matrix of "
                                             r"the factors \(7450\.6 GiB\); this machine has 20\.0 MiB available; use "
                                             r"n_components <= 1607, or a machine with more memory$"):
        ImplicitMatrixFactorization(10**6, loss="wls").fit(_small())
    # on a cluster: the tables the driver gathers
    with pytest.raises(ParameterError, match=r"needs about 91\.6 MiB \(96000048 bytes\) of memory: its factor tables "
                                             r".* take 91\.6 MiB and the driver gathers them; this machine has 20\.0 MiB "
                                             r"available; use n_components <= 218452, or a machine with more memory$"):
        ImplicitMatrixFactorization(10**6, loss="bpr", client=client).fit(_small())
    ImplicitMatrixFactorization(100, loss="bpr", alpha=0.01, max_iter=2).fit(_small())  # a model that fits is fitted


def test_resuming_removes_the_file_a_killed_checkpoint_write_left(tmp_path):
    """A fit killed while writing its checkpoint leaves the temporary file next to
    checkpoint.npz; the resumed fit used to keep it (a .npz.tmp in the folder for good).
    The resumed fit removes it, and ends where the uninterrupted fit ends."""
    import os
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    folder = tmp_path / "ckpt"
    kw = dict(n_components=3, alpha=0.1, max_iter=6, tol=0, random_state=0, checkpoint_every=1)
    script = textwrap.dedent(f"""
        import os
        from dask_dgd import MatrixFactorization
        from dask_dgd.datasets import make_ratings

        replace, writes = os.replace, []

        def killed_at_the_second_write(src, dst):
            writes.append(src)
            if len(writes) == 2:
                os._exit(9)  # as SIGKILL mid-write: the temporary file written, never renamed
            replace(src, dst)

        os.replace = killed_at_the_second_write
        ratings, _ = make_ratings(50, 30, 600, random_state=0)
        MatrixFactorization(**{kw!r}, checkpoint={str(folder)!r}).fit(ratings)
    """)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 9, done.stderr
    assert len(list(folder.glob("*.tmp"))) == 1 and (folder / "checkpoint.npz").exists()
    ratings, _ = make_ratings(50, 30, 600, random_state=0)
    resumed = _quiet_fit(MatrixFactorization(**kw, checkpoint=folder), ratings, None, True)
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoint.npz"]
    whole = _quiet_fit(MatrixFactorization(**kw), ratings)
    np.testing.assert_array_equal(resumed.item_factors_, whole.item_factors_)
