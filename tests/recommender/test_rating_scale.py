"""MatrixFactorization(rating_scale=(low, high)): predictions clipped to the scale, as
Surprise's ``Reader(rating_scale=...)`` clips its estimates, and ratings outside it
refused (issue 45, item 4)."""

import numpy as np
import pandas as pd
import pytest

import dask_dgd
from dask_dgd import ImplicitMatrixFactorization, InputError, MatrixFactorization, ParameterError
from dask_dgd.datasets import make_ratings


@pytest.fixture(scope="module")
def stars():
    """Ratings on a 1-5 star scale, and the same model fitted without and with the scale."""
    ratings, _ = make_ratings(200, 80, 6000, random_state=0)
    ratings["rating"] = ratings["rating"].clip(1, 5).round()
    kw = dict(n_components=4, alpha=0.02, max_iter=60, random_state=0)
    return (ratings, MatrixFactorization(rating_scale=None, **kw).fit(ratings),
            MatrixFactorization(rating_scale=(1, 5), **kw).fit(ratings))


def _fan(ratings, n=6, rating=5.0):
    """A new user who gives the top rating to a few items (fold-in: predicted past 5
    without a scale)."""
    return pd.DataFrame({"user": ["new"] * n, "item": ratings["item"].unique()[:n], "rating": [rating] * n})


def test_the_scale_does_not_change_the_fit(stars):
    _, free, scaled = stars
    np.testing.assert_array_equal(free.item_factors_, scaled.item_factors_)
    np.testing.assert_array_equal(free.user_bias_, scaled.user_bias_)


def test_predict_and_score_are_clipped_to_the_scale(stars):
    ratings, free, scaled = stars
    raw = free.predict(ratings)
    assert raw.max() > 5  # without a scale, predictions run past it
    np.testing.assert_array_equal(scaled.predict(ratings), np.clip(raw, 1, 5))
    rmse = np.sqrt(np.mean((np.clip(raw, 1, 5) - ratings["rating"].to_numpy()) ** 2))
    assert scaled.score(ratings) == pytest.approx(-rmse, rel=1e-12)
    assert -scaled.score(ratings) < -free.score(ratings)
    import dask.dataframe as dd

    lazy = scaled.predict(dd.from_pandas(ratings, npartitions=3)).compute()
    np.testing.assert_array_equal(lazy, np.clip(raw, 1, 5))


def test_fold_in_predictions_and_recommendations_are_clipped(stars):
    ratings, free, scaled = stars
    pairs = pd.DataFrame({"user": ["new"] * len(free.item_ids_), "item": free.item_ids_})
    raw = free.predict(pairs, user_items=_fan(ratings))
    assert raw.max() > 5.3  # the 5.37 on 1-5
    np.testing.assert_array_equal(scaled.predict(pairs, user_items=_fan(ratings)), np.clip(raw, 1, 5))
    ids_free, s_free = free.recommend(["new"], k=5, user_items=_fan(ratings))
    ids, s = scaled.recommend(["new"], k=5, user_items=_fan(ratings))
    np.testing.assert_array_equal(ids, ids_free)  # ranked by the unclipped scores: no ties at the top
    np.testing.assert_array_equal(s, np.clip(s_free, 1, 5))
    top_free = free.recommend_all(k=3).compute()
    top = scaled.recommend_all(k=3).compute()
    np.testing.assert_array_equal(top["item"], top_free["item"])
    np.testing.assert_array_equal(top["score"], np.clip(top_free["score"], 1, 5))


def test_the_padding_past_the_unseen_items_stays_minus_infinity(stars):
    ratings, _, scaled = stars
    user = ratings["user"].iloc[0]
    _, s = scaled.recommend([user], k=len(scaled.item_ids_))
    finite = ~s.mask
    s = s.data
    assert (~finite).any() and (s[~finite] == -np.inf).all()
    assert ((s[finite] >= 1) & (s[finite] <= 5)).all()


def test_ratings_outside_the_scale_are_refused(stars):
    ratings, _, scaled = stars
    loud = ratings.copy()
    loud.loc[loud.index[:2], "rating"] = [0.0, 7.0]
    match = (r"the 'rating' column has values from 0 to 7, outside rating_scale=\(1, 5\); fix those ratings before "
             r"{}, or widen rating_scale \(None: no scale, predictions unclipped\)")
    with pytest.raises(InputError, match=match.format("fitting")):
        MatrixFactorization(n_components=2, alpha=0.1, max_iter=2, rating_scale=(1, 5)).fit(loud)
    before = scaled.item_factors_.copy()
    with pytest.raises(InputError, match=match.format("fitting")):
        scaled.partial_fit(loud.iloc[:10])
    np.testing.assert_array_equal(scaled.item_factors_, before)  # refused before any step
    wild = _fan(ratings).assign(rating=[0.0, 7.0, 3.0, 3.0, 3.0, 3.0])
    with pytest.raises(InputError, match=match.format("folding them in")):
        scaled.recommend(["new"], k=3, user_items=wild)
    with pytest.raises(InputError, match=match.format("folding them in")):
        scaled.fold_in_users(wild)
    assert "new" not in scaled.user_ids_


@pytest.mark.parametrize("scale", [(5, 1), (3, 3), (1,), (1, 2, 3), "1-5", (1, np.inf), (np.nan, 5), (True, 5),
                                   5])
def test_a_bad_scale_is_a_parameter_error(stars, scale):
    ratings, _, _ = stars
    with pytest.raises(ParameterError, match=r"The 'rating_scale' parameter of MatrixFactorization must be None or "
                       r"one of 'auto' or a \(low, high\) pair of finite numbers with low < high; got"):
        MatrixFactorization(n_components=2, max_iter=2, rating_scale=scale).fit(ratings)


def test_the_scale_is_saved_and_left_out_of_the_checkpoint_fingerprint(stars, tmp_path):
    ratings, _, scaled = stars
    loaded = dask_dgd.load(scaled.save(tmp_path / "mf.npz"))
    assert loaded.rating_scale == (1, 5)
    np.testing.assert_array_equal(loaded.predict(ratings), scaled.predict(ratings))
    # the scale does not shape the training: a checkpointed fit resumes whatever it is
    assert not any("rating_scale" in key for key in scaled._fingerprint(0.1))
    assert "rating_scale" not in ImplicitMatrixFactorization().get_params()
