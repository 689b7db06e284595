"""Fold-in: recommend and predict for users from their interactions, without refitting."""

import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.optimize
from sklearn.base import clone

from dask_dgd import ImplicitMatrixFactorization, MatrixFactorization, ParameterError
from dask_dgd.datasets import make_ratings
from dask_dgd.recommender._foldin import _bpr_value_grad, fold_in


@pytest.fixture(scope="module")
def ratings():
    r, _ = make_ratings(80, 40, 1600, rank=2, noise=0.3, random_state=5)
    return r.assign(rating=r["rating"] - r["rating"].min())  # strengths >= 0 for wls


def _converged_als(kind):
    """An ALS estimator that runs to convergence (explicit ratings or wls)."""
    if kind == "explicit":
        return MatrixFactorization(n_components=3, alpha=0.2, alpha_bias=2.0, solver="als", tol=1e-13,
                                   max_iter=2000, random_state=0)
    return ImplicitMatrixFactorization(n_components=3, loss="wls", rating_col="rating", alpha=0.2,
                                       confidence_scale=2.0, solver="als", tol=1e-13, max_iter=2000, random_state=0)


def _fit(est, data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(data)


@pytest.mark.parametrize("kind", ["explicit", "wls"])
def test_fold_in_solves_the_user_step_of_the_fitted_model(ratings, kind):
    """A converged ALS fit's users satisfy their normal equations at the fitted items:
    folding the known users in from their own training ratings gives them back."""
    est = _converged_als(kind)
    mf = _fit(est, ratings)
    assert mf.n_iter_ < 2000
    rows, seen = fold_in(mf, ratings, list(mf.user_ids_))
    np.testing.assert_allclose(rows, mf._user_table(), rtol=0, atol=1e-6)
    assert all(len(s) == n for s, n in zip(seen, ratings.groupby("user").size().loc[mf.user_ids_]))
    # recommend/predict with user_items equal to the training ratings: the fitted answers
    ids, scores = mf.recommend(mf.user_ids_[:5], k=4)
    ids_f, scores_f = mf.recommend(mf.user_ids_[:5], k=4, user_items=ratings)
    np.testing.assert_array_equal(ids_f, ids)
    np.testing.assert_allclose(scores_f, scores, atol=1e-5)
    np.testing.assert_allclose(mf.predict(ratings, user_items=ratings), mf.predict(ratings), atol=1e-5)


def test_bpr_fold_in_minimises_the_users_objective(ratings):
    mf = _fit(ImplicitMatrixFactorization(n_components=3, loss="bpr", alpha=0.01, max_iter=30, random_state=0), ratings)
    V = mf._item_table()
    Q, b = V[:, :3], V[:, 3]
    pos = np.zeros(len(V), dtype=bool)
    pos[[0, 3, 7]] = True
    args = (Q[pos], Q[~pos], b[pos], b[~pos], mf.alpha_)
    p0 = np.array([0.3, -0.2, 0.5])
    # the objective's gradient is its gradient
    err = scipy.optimize.check_grad(lambda p: _bpr_value_grad(p, *args)[0], lambda p: _bpr_value_grad(p, *args)[1], p0)
    assert err < 1e-6 * max(1.0, np.linalg.norm(_bpr_value_grad(p0, *args)[1]))
    new = pd.DataFrame({"user": ["new"] * 3, "item": mf.item_ids_[[0, 3, 7]]})
    rows, _ = fold_in(mf, new, ["new"])
    assert np.linalg.norm(_bpr_value_grad(rows[0], *args)[1]) < 1e-5
    assert _bpr_value_grad(rows[0], *args)[0] < _bpr_value_grad(np.zeros(3), *args)[0]


@pytest.mark.parametrize("make", [
    lambda: MatrixFactorization(n_components=2, random_state=0),
    lambda: ImplicitMatrixFactorization(n_components=2, loss="wls", alpha=0.01, random_state=0),
    lambda: ImplicitMatrixFactorization(n_components=2, loss="bpr", alpha=0.01, max_iter=20, random_state=0),
], ids=["explicit", "wls", "bpr"])
def test_recommend_for_new_users(ratings, make):
    mf = _fit(make(), ratings)
    items = mf.item_ids_
    new = pd.DataFrame({"user": ["a", "a", "a", "b", "a", "c"], "item": [items[0], items[1], "no such item",
                                                                         items[2], items[0], "no such item"],
                        "rating": [5.0, 4.0, 3.0, 1.0, 4.5, 2.0]})
    ids, scores = mf.recommend(["a", "b", "c"], k=5, user_items=new, confidence=0)  # (the predicted ratings)
    assert ids.shape == (3, 5) and np.isfinite(scores).all()
    assert not set(ids[0]) & {items[0], items[1]} and items[2] not in ids[1]  # their items are left out
    # "c" has no known item: the items' biases alone rank (BPR, explicit), or all tie at 0 (wls)
    bias = getattr(mf, "item_bias_", np.zeros(len(items)))
    np.testing.assert_allclose(np.sort(scores[2])[::-1], np.sort(bias)[::-1][:5] + getattr(mf, "global_mean_", 0.0))
    # with exclude_seen=False the interactions' items may come back
    ids_all, _ = mf.recommend(["a"], k=len(items), exclude_seen=False, user_items=new)
    assert {items[0], items[1]} <= set(ids_all[0])
    # the fitted model is unchanged
    assert "a" not in set(mf.user_ids_) and len(mf.user_factors_) == ratings["user"].nunique()
    pred = mf.predict(pd.DataFrame({"user": ["a", "a"], "item": [items[3], "zz"]}), user_items=new)
    assert pred.shape == (2,) and np.isfinite(pred).all()


def test_recommend_all_is_a_lazy_frame_of_every_users_top_k(ratings, client):
    import dask.dataframe as dd

    mf = _fit(MatrixFactorization(n_components=2, random_state=0), ratings)
    frame = mf.recommend_all(k=3, users_per_partition=25)
    assert isinstance(frame, dd.DataFrame) and frame.npartitions == -(-len(mf.user_ids_) // 25)
    got = client.compute(frame).result()  # computed on the cluster's workers
    assert list(got.columns) == ["user", "item", "score", "rank"]
    ids, scores = mf.recommend(mf.user_ids_, k=3)
    finite = np.isfinite(scores)
    np.testing.assert_array_equal(got["user"], np.repeat(mf.user_ids_, 3).reshape(ids.shape)[finite])
    np.testing.assert_array_equal(got["item"], ids[finite])
    np.testing.assert_allclose(got["score"], scores[finite])
    assert got.groupby("user")["rank"].apply(lambda r: list(r) == list(range(1, len(r) + 1))).all()
    # seen items included on request: every user gets k rows
    assert len(mf.recommend_all(k=3, exclude_seen=False).compute()) == 3 * len(mf.user_ids_)
    with pytest.raises(ParameterError, match=r"k must be an int > 0; got 0"):
        mf.recommend_all(k=0)
    with pytest.raises(ParameterError, match=r"users_per_partition must be an int > 0; got 2.5"):
        mf.recommend_all(users_per_partition=2.5)


def test_fold_in_of_explicit_ratings_needs_the_ratings(ratings):
    from dask_dgd import InputError

    mf = _fit(MatrixFactorization(n_components=2, alpha=0.1, random_state=0), ratings)
    with pytest.raises(InputError, match=r"user_items has no 'rating' column: an explicit-rating model folds users "
                                         r"in from their ratings \(columns: \['user', 'item'\]\)"):
        mf.recommend(["new"], user_items=pd.DataFrame({"user": ["new"], "item": [mf.item_ids_[0]]}))


@pytest.mark.parametrize("kind", ["explicit", "wls"])
def test_item_fold_in_solves_the_item_step_and_adds_cold_items(ratings, kind):
    """Items are folded in as users are, the fitted users fixed: the items of a
    converged ALS fit come back from their own ratings; a held-out item is appended."""
    est = _converged_als(kind)
    mf = _fit(est, ratings)
    rows, users = fold_in(mf, ratings, list(mf.item_ids_), side="items")
    np.testing.assert_allclose(rows, mf._item_table(), rtol=0, atol=1e-6)
    assert all(len(u) == n for u, n in zip(users, ratings.groupby("item").size().loc[mf.item_ids_]))
    cold = mf.item_ids_[0]
    warm = _fit(clone(est), ratings[ratings["item"] != cold])
    assert cold not in set(warm.item_ids_)
    its = ratings[ratings["item"] == cold]
    assert warm.fold_in_items(its) is warm
    assert warm.item_ids_[-1] == cold and warm.item_factors_.shape == (len(mf.item_ids_), 3)
    # its users have now seen it; the others may be recommended it
    raters = warm._user_index.get_indexer(its["user"])
    assert (warm._seen[:, -1].toarray().ravel() == np.isin(np.arange(len(warm.user_ids_)), raters)).all()
    ids, scores = warm.recommend(warm.user_ids_, k=len(warm.item_ids_))
    excluded = ids.mask[ids.data == cold]  # (left out: masked, in a slot past the user's unseen items)
    assert excluded.sum() == len(raters) and not excluded.all()
    # its scores agree with the model fitted with it (the other items moved a little)
    np.testing.assert_allclose(warm.predict(its), mf.predict(its), atol=0.2)
    assert np.corrcoef(warm.predict(its), mf.predict(its))[0, 1] > 0.8


def test_bpr_item_fold_in_minimises_the_items_expected_objective():
    """The folded-in BPR item minimises the expectation, over the fit's negative draws,
    of the BPR terms it enters: computed here term by term, with numerical derivatives."""
    r, _ = make_ratings(30, 15, 200, rank=2, noise=0.3, random_state=5)
    cold = r["item"].value_counts().index[3]
    mf = _fit(ImplicitMatrixFactorization(n_components=2, loss="bpr", alpha=0.01, max_iter=30, random_state=0),
              r[r["item"] != cold])
    mf.fold_in_items(r.loc[r["item"] == cold, ["user", "item"]])
    theta = np.r_[mf.item_factors_[-1], mf.item_bias_[-1]]
    U, Q, b0 = mf.user_factors_, mf.item_factors_[:-1], mf.item_bias_[:-1]
    seen = mf._seen[:, :-1].toarray().astype(bool)
    raters = set(mf._user_index.get_indexer(r.loc[r["item"] == cold, "user"]))
    lam, lam_b, n_items = mf.alpha_, mf.alpha_bias_, len(mf.item_ids_)

    def expected(th):
        q, b = th[:-1], th[-1]
        total, penalty = 0.0, lam * (q @ q) + lam_b * b * b
        for u in range(len(U)):
            s, sx = Q @ U[u] + b0, U[u] @ q + b
            if u in raters:  # the observed item, against a uniform unobserved one
                total += np.mean(np.logaddexp(0.0, -(sx - s[~seen[u]]))) + penalty
            else:  # drawn as the negative of each observed pair with chance 1 / unobserved
                chance = 1.0 / (n_items - seen[u].sum())
                total += chance * sum(np.logaddexp(0.0, -(s[p] - sx)) + penalty for p in np.flatnonzero(seen[u]))
        return total

    grad = [(expected(theta + 1e-6 * e) - expected(theta - 1e-6 * e)) / 2e-6 for e in np.eye(3)]
    assert np.abs(grad).max() < 1e-5 * expected(theta)
    assert expected(theta) < expected(np.zeros(3))


def test_fold_in_users_adds_them_to_the_model(ratings):
    mf = _fit(ImplicitMatrixFactorization(n_components=2, loss="wls", alpha=0.01, random_state=0), ratings)
    items = mf.item_ids_
    new = pd.DataFrame({"user": [1000, 1000, 1001], "item": [items[0], items[1], items[2]], "rating": [2.0, 1.0, 3.0]})
    expected = mf.recommend([1000, 1001], k=5, user_items=new)
    n_users = len(mf.user_ids_)
    mf.fold_in_users(new)
    assert list(mf.user_ids_[-2:]) == [1000, 1001] and mf.user_factors_.shape == (n_users + 2, 2)
    got = mf.recommend([1000, 1001], k=5)  # their items are seen now
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_allclose(got[1], expected[1])
    assert set(mf.recommend_all(k=2).compute()["user"]) >= {1000, 1001}
    # training goes on from the grown model
    mf.partial_fit(pd.concat([ratings, new]))
    assert mf.user_factors_.shape == (n_users + 2, 2) and np.isfinite(mf.user_factors_).all()


def test_item_fold_in_errors(ratings):
    from sklearn.exceptions import NotFittedError

    from dask_dgd import InputError

    with pytest.raises(NotFittedError, match="This MatrixFactorization instance is not fitted yet"):
        MatrixFactorization().fold_in_items(ratings)
    mf = _fit(MatrixFactorization(n_components=2, alpha=0.1, random_state=0), ratings)
    with pytest.raises(InputError, match=r"item_users has no 'rating' column: an explicit-rating model folds items "
                                         r"in from their ratings \(columns: \['user', 'item'\]\)"):
        mf.fold_in_items(pd.DataFrame({"user": [mf.user_ids_[0]], "item": ["new"]}))


@pytest.mark.parametrize("kind", ["explicit", "wls", "bpr"])
def test_partial_fit_starts_new_users_folded_in(ratings, kind, client):
    """partial_fit's new users start at their fold-in rows, computed on the shards that
    hold their ratings (here on a cluster, from a dask frame), not at random rows."""
    import dask.dataframe as dd

    params = {"explicit": (MatrixFactorization, {"alpha": 0.1}),
              "wls": (ImplicitMatrixFactorization, {"loss": "wls", "alpha": 0.01, "rating_col": "rating"}),
              "bpr": (ImplicitMatrixFactorization, {"loss": "bpr", "alpha": 0.01, "max_iter": 20})}
    cls, kw = params[kind]
    newcomers = ratings["user"].isin(ratings["user"].unique()[:10])
    mf = _fit(cls(n_components=2, random_state=0, **kw), ratings[~newcomers])
    new_users = list(pd.unique(ratings.loc[newcomers, "user"]))
    expected, _ = fold_in(mf, ratings[newcomers], new_users)
    mf.set_params(learning_rate=1e-12, client=client)  # an epoch that moves nothing measurable
    mf.partial_fit(dd.from_pandas(ratings[newcomers], npartitions=2))
    got = mf._user_table()[mf._user_index.get_indexer(new_users)]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


# ------------------------------------------------ what fit refuses, fold-in refuses (issue 44)
_REFUSING = {
    "explicit": lambda: MatrixFactorization(n_components=2, alpha=0.1, random_state=0),
    "wls": lambda: ImplicitMatrixFactorization(n_components=2, loss="wls", alpha=0.01, rating_col="rating",
                                               random_state=0),
    "bpr": lambda: ImplicitMatrixFactorization(n_components=2, loss="bpr", alpha=0.01, rating_col="rating",
                                               max_iter=10, random_state=0),
}


@pytest.fixture(scope="module")
def fitted(ratings):
    return {name: _fit(make(), ratings) for name, make in _REFUSING.items()}


def _with_value(mf, value):
    """Interactions of a known user and a new one (10000) with known items, ``value``
    the known user's rating of the second item (which is then also an item whose
    interactions hold it)."""
    u, items = mf.user_ids_[0], mf.item_ids_
    return pd.DataFrame({"user": [u, u, 10_000, 10_000], "item": [items[0], items[1], items[0], items[2]],
                         "rating": [1.0, value, 2.0, 1.0]})


def _refusals(mf, frame):
    """Every way to fold interactions in: into the model, or only to score."""
    return {
        "fold_in_users": lambda: mf.fold_in_users(frame),
        "fold_in_items": lambda: mf.fold_in_items(frame),
        "recommend": lambda: mf.recommend([frame["user"][0], 10_000], k=3, user_items=frame),
        "predict": lambda: mf.predict(frame[["user", "item"]], user_items=frame),
    }


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("model", list(_REFUSING))
def test_fold_in_refuses_nan_and_infinite_ratings_as_fit_does(ratings, fitted, model, bad):
    """A NaN or infinite rating used to give an existing user NaN factors, a new user NaN
    predictions and recommend [-inf, -inf, nan]; it is refused by fit's own check, with
    fit's message, and the model is left as it was."""
    import pickle
    import re

    from dask_dgd import InputError

    mf = fitted[model]
    frame = _with_value(mf, bad)
    message = "1 values of the 'rating' column are NaN or infinite; drop or fill them before "
    with pytest.raises(InputError, match=re.escape(message + "fitting")):
        clone(mf).fit(pd.concat([ratings, frame], ignore_index=True))
    before = pickle.dumps(mf.__dict__)
    for name, call in _refusals(mf, frame).items():
        with pytest.raises(InputError, match=re.escape(message + "folding them in")):
            call()
        assert pickle.dumps(mf.__dict__) == before, f"{name} changed the model"


@pytest.mark.parametrize("value", [1e300, 1e308])
@pytest.mark.parametrize("model", ["explicit", "wls"])
def test_fold_in_refuses_ratings_whose_rows_overflow(fitted, model, value):
    """1e308 gave NaN factors (1e300 a raw LinAlgError for wls): a rating whose row's
    least-squares problem overflows (an explicit squared error; fit stops on those too)
    or is singular in float64 (a wls confidence of 1e300 against 1) is refused, the model
    unchanged."""
    import pickle
    import re

    from dask_dgd import InputError

    mf = fitted[model]
    frame = _with_value(mf, value)
    before = pickle.dumps(mf.__dict__)
    for name, call in _refusals(mf, frame).items():
        side, who = ("items", mf.item_ids_[1].item()) if name == "fold_in_items" else ("users", mf.user_ids_[0].item())
        with pytest.raises(InputError, match=re.escape(
                f"1 {side} ({who!r}) would get factors that are not finite: the {model} model's least-squares problem "
                f"of each overflows or is singular in float64 (the largest magnitude of their 'rating' values: "
                f"{value:g}); rescale the ratings (or use alpha > 0), or drop those rows before folding them in")):
            call()
        assert pickle.dumps(mf.__dict__) == before, f"{name} changed the model"


def test_fold_in_casts_whole_float_ids_and_refuses_others(ratings):
    """Float ids into a model of integer ids: whole ones are cast to the fitted ids'
    dtype (they turned every id into a float), others refused."""
    from dask_dgd import InputError

    mf = _fit(MatrixFactorization(n_components=2, alpha=0.1, max_iter=20, random_state=0), ratings)
    dtype = mf.item_ids_.dtype
    assert dtype.kind == "i"
    mf.fold_in_items(pd.DataFrame({"user": [0.0, 1.0], "item": [1031.0, 1031.0], "rating": [4.0, 5.0]}))
    assert mf.item_ids_.dtype == dtype and mf.user_ids_.dtype.kind == "i" and mf.item_ids_[-1] == 1031
    assert mf.item_counts_[-1] == 2  # users 0.0 and 1.0 are the fitted 0 and 1
    mf.fold_in_users(pd.DataFrame({"user": [2007.0], "item": [0.0], "rating": [4.0]}))
    assert mf.user_ids_.dtype.kind == "i" and mf.user_ids_[-1] == 2007
    n_users, n_items = len(mf.user_ids_), len(mf.item_ids_)
    with pytest.raises(InputError, match=r"fold_in_users\(user_items\): 1 user id\(s\) are not whole numbers "
                       r"\(7\.5\) but the model's user ids are integers \(e\.g\. 0\); they would be added as new "
                       r"float ids: fix those ids and give integer ones \(e\.g\. \.astype\(int\)\)"):
        mf.fold_in_users(pd.DataFrame({"user": [7.5], "item": [0], "rating": [4.0]}))
    with pytest.raises(InputError, match=r"fold_in_items\(item_users\): 2 item id\(s\) are not whole numbers "
                       r"\(31\.5, inf\) but the model's item ids are integers"):
        mf.fold_in_items(pd.DataFrame({"user": [0, 1], "item": [31.5, np.inf], "rating": [4.0, 5.0]}))
    assert (len(mf.user_ids_), len(mf.item_ids_)) == (n_users, n_items)  # unchanged
    assert mf.user_ids_.dtype.kind == "i" and mf.item_ids_.dtype == dtype


def test_users_without_rows_in_user_items_are_refused(ratings):
    """A requested user with no row at all in user_items (a mistyped id, 7 for '7') was
    scored by the biases with nothing left out; a user whose rows name no known item
    still is (documented)."""
    from dask_dgd import InputError

    mf = _fit(MatrixFactorization(n_components=2, alpha=0.1, max_iter=20, random_state=0), ratings)
    ui = pd.DataFrame({"user": ["7"] * 4, "item": mf.item_ids_[:4], "rating": [5.0, 5.0, 1.0, 1.0]})
    message = (r"1 user\(s\) to score have no rows in user_items: 7 \(ids of another type do not match: 7 is not "
               r"'7'\); give each user's interactions in user_items \(fix the ids\), or score users seen in fit "
               r"without user_items")
    with pytest.raises(InputError, match=message):
        mf.recommend([7], k=5, user_items=ui)
    with pytest.raises(InputError, match=message):
        mf.predict(pd.DataFrame({"user": [7], "item": [mf.item_ids_[5]]}), user_items=ui)
    with pytest.raises(InputError, match=r"2 user\(s\) to score have no rows in user_items: 'x', 'y'"):
        mf.recommend(["7", "x", "y"], k=5, user_items=ui)
    ids, _ = mf.recommend(["7"], k=5, user_items=ui)
    assert not set(ids[0]) & set(mf.item_ids_[:4])
    # rows that name no known item: ranked by the biases alone, as documented
    unknown = pd.DataFrame({"user": ["z"], "item": [99_999], "rating": [3.0]})
    ids, scores = mf.recommend(["z"], k=3, user_items=unknown, confidence=0)
    np.testing.assert_allclose(scores[0], np.sort(mf.item_bias_)[::-1][:3] + mf.global_mean_)


def test_a_lazy_recommend_all_is_not_changed_by_a_later_fold_in(ratings):
    """fold_in writes new arrays: a recommend_all() graph made before holds the old ones."""
    mf = _fit(MatrixFactorization(n_components=2, alpha=0.1, max_iter=20, random_state=0), ratings)
    user = mf.user_ids_[0]
    lazy = mf.recommend_all(k=3, confidence=0)
    before, scores = mf.recommend([user], k=3, confidence=0)
    factors, bias = mf.user_factors_, mf.user_bias_
    mf.fold_in_users(pd.DataFrame({"user": [user] * 3, "item": mf.item_ids_[1:4], "rating": [1.0, 1.0, 5.0]}))
    after, _ = mf.recommend([user], k=3, confidence=0)
    assert not np.array_equal(after, before)
    got = lazy.compute().query("user == @user")
    np.testing.assert_array_equal(got["item"], before[0])
    np.testing.assert_allclose(got["score"], scores[0], rtol=1e-12)
    assert mf.user_factors_ is not factors and mf.user_bias_ is not bias
    item_factors = mf.item_factors_
    mf.fold_in_items(pd.DataFrame({"user": [user], "item": [mf.item_ids_[0]], "rating": [5.0]}))
    assert mf.item_factors_ is not item_factors
