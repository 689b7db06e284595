"""A recommender whose factors are all zero (alpha="auto" chose the bias model) says so:
``factors_used_`` is False, ``recommend`` ranks by the item biases and ``similar_items``
by the biases' closeness, each with a BiasOnlyWarning (issue 45, item 3)."""

import warnings

import numpy as np
import pandas as pd
import pytest

from dask_dgd import ImplicitMatrixFactorization, MatrixFactorization, ParameterError
from dask_dgd.datasets import make_ratings
from dask_dgd.exceptions import BiasOnlyWarning, DGDWarning


def _quiet(est, frame):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(frame)


@pytest.fixture(scope="module")
def biases_and_noise():
    """Ratings of user and item biases plus noise: no factors beat the bias model on the
    held-out ratings (as in test_auto_alpha's test of that choice)."""
    rng = np.random.default_rng(5)
    u, i = rng.integers(0, 300, 6000), rng.integers(0, 150, 6000)
    y = 3.5 + rng.normal(0, 0.4, 300)[u] + rng.normal(0, 0.4, 150)[i] + rng.normal(0, 0.8, 6000)
    ratings = pd.DataFrame({"user": u, "item": i, "rating": y}).drop_duplicates(["user", "item"])
    return ratings, _quiet(MatrixFactorization(n_components=5, random_state=0), ratings)


def test_the_bias_model_chosen_by_auto_is_flagged_and_recommend_warns_and_ranks_by_popularity(biases_and_noise):
    _, mf = biases_and_noise
    assert mf.item_factors_.shape[1] == 5 and not mf.item_factors_.any()
    assert mf.factors_used_ is False
    users = mf.user_ids_[:4]
    with pytest.warns(BiasOnlyWarning, match=r"every factor is exactly zero \(alpha='auto' chose the bias model, "
                      r"alpha_=[0-9.]+, as no factors beat its held-out mean squared error by more than 0\.1% of "
                      r"it and two standard errors\): recommend ranks the items by their biases alone less the "
                      r"confidence discount, a lower bound returned as the score \(popularity: the same order for "
                      r"every user; confidence=0: by the biases\); give a numeric alpha to fit factors, or "
                      r"n_components=0"):
        ids, scores = mf.recommend(users, k=5)
    # every user's list is the order of the item biases' lower bounds (recommend's default
    # confidence), less the items the user has seen
    from dask_dgd.recommender._serving import DEFAULT_CONFIDENCE

    bound = mf.item_bias_ - DEFAULT_CONFIDENCE * mf.residual_std_ / np.sqrt(mf.item_counts_ + mf.alpha_bias_)
    order = mf.item_ids_[np.argsort(-bound, kind="stable")]
    for row, user in zip(ids, users):
        seen = set(mf.item_ids_[mf._seen[mf._user_index.get_loc(user)].indices])
        np.testing.assert_array_equal(row, [i for i in order if i not in seen][:5])
    code = mf._user_index.get_loc(users[0])
    np.testing.assert_allclose(scores[0], mf.global_mean_ + mf.user_bias_[code]
                               + bound[mf._item_index.get_indexer(ids[0])], rtol=1e-12)
    with pytest.warns(BiasOnlyWarning, match="recommend_all ranks the items by their biases alone less the "
                      "confidence discount, a lower bound returned as the score"):
        mf.recommend_all(k=2)
    # confidence=0: by the biases themselves, and said so
    with pytest.warns(BiasOnlyWarning, match=r"recommend ranks the items by their biases alone \(popularity: the "
                      r"same order for every user\)"):
        ids0, _ = mf.recommend(users, k=5, confidence=0)
    order0 = mf.item_ids_[np.argsort(-mf.item_bias_, kind="stable")]
    seen = set(mf.item_ids_[mf._seen[mf._user_index.get_loc(users[0])].indices])
    np.testing.assert_array_equal(ids0[0], [i for i in order0 if i not in seen][:5])


def test_similar_items_ranks_by_the_closeness_of_the_biases_and_warns(biases_and_noise):
    _, mf = biases_and_noise
    with pytest.warns(BiasOnlyWarning, match=r"similar_items ranks the items by the closeness of their biases"):
        ids, scores = mf.similar_items(mf.item_ids_[:2], k=4)
    b = pd.Series(mf.item_bias_, index=mf.item_ids_)
    for item, row, s in zip(mf.item_ids_[:2], ids, scores):
        distance = (b.drop(item) - b[item]).abs().sort_values(kind="stable")
        np.testing.assert_array_equal(row, distance.index[:4])
        np.testing.assert_allclose(s, -distance.to_numpy()[:4], rtol=1e-12)
        assert item not in row
    assert issubclass(BiasOnlyWarning, DGDWarning) and issubclass(BiasOnlyWarning, UserWarning)


def test_a_model_with_factors_or_one_asked_without_them_does_not_warn(biases_and_noise):
    ratings, _ = biases_and_noise
    fixed = _quiet(MatrixFactorization(n_components=3, alpha=0.05, max_iter=20, random_state=0), ratings)
    bias = _quiet(MatrixFactorization(n_components=0, random_state=0), ratings)
    assert fixed.factors_used_ is True and bias.factors_used_ is False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, cos = fixed.similar_items(fixed.item_ids_[:1], k=3)
        assert np.all(np.abs(cos) <= 1.0 + 1e-12) and cos[0, 0] > 0  # factor cosines, as before
        fixed.recommend(fixed.user_ids_[:2], k=3)
        # n_components=0 asked for the bias model: ranked by the biases without a warning
        ids, scores = bias.similar_items(bias.item_ids_[:1], k=3)
        assert np.all(scores <= 0)
        bias.recommend(bias.user_ids_[:2], k=3)


def test_factors_used_is_a_fitted_attribute_only():
    assert not hasattr(MatrixFactorization(), "factors_used_")


def test_a_model_with_neither_factors_nor_item_biases_refuses_similar_items():
    frame, _ = make_ratings(n_users=30, n_items=12, n_ratings=200, random_state=0)
    wls = _quiet(ImplicitMatrixFactorization(n_components=2, loss="wls", alpha=0.01, max_iter=3, random_state=0), frame)
    wls.item_factors_[:] = 0.0  # (wls has no biases; its factors made zero by hand)
    assert wls.factors_used_ is False
    with pytest.raises(ParameterError, match="has neither factors .* nor item biases: similar_items has nothing "
                       "to rank by; refit with n_components > 0 and a smaller alpha"):
        wls.similar_items(wls.item_ids_[:1], k=2)
    with pytest.warns(BiasOnlyWarning, match=r"recommend scores every item 0 \(the model has no item biases\)"):
        wls.recommend(wls.user_ids_[:1], k=2)


def test_a_saved_bias_model_loads_with_factors_used_false(biases_and_noise, tmp_path):
    import dask_dgd

    _, mf = biases_and_noise
    loaded = dask_dgd.load(mf.save(tmp_path / "mf.npz"))
    assert loaded.factors_used_ is False
    with pytest.warns(BiasOnlyWarning, match="similar_items ranks the items by the closeness"):
        loaded.similar_items(loaded.item_ids_[:1], k=2)
