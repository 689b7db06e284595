"""The popularity model an implicit ``alpha="auto"`` fit falls back to when no factors
beat popularity on the held-out pairs (issue 48): every factor exactly zero,
``item_bias_ = log(1 + n_i)``, for BPR and wls; serving, fold-in and save/load work on
it and say it ranks by popularity; ``partial_fit`` refuses it."""

import copy
import warnings

import numpy as np
import pandas as pd
import pytest

import dask_dgd
from dask_dgd import ImplicitMatrixFactorization
from dask_dgd.datasets import make_ratings
from dask_dgd.exceptions import BiasOnlyWarning, InputError, ParameterError

POPULARITY = r"the model ranks by popularity \(item_bias_ = log\(1 \+ the item's interactions\); every factor is " \
    r"exactly zero\): alpha='auto' found no factors that beat popularity on the held-out pairs by two standard " \
    r"errors: "
FIX = r"; give a numeric alpha to fit factors anyway \(factors_used_ is False\)"
LOSSES = ["bpr", "wls"]


@pytest.fixture(scope="module")
def interactions():
    r, _ = make_ratings(60, 30, 900, implicit=True, random_state=3)
    return r[["user", "item"]]


def _fitted(interactions, loss):
    est = ImplicitMatrixFactorization(loss=loss, n_components=4, alpha=0.01, max_iter=5, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(interactions)


def _popular(est):
    """A copy of ``est`` (fitted) turned into the popularity model of its counts."""
    model = copy.deepcopy(est)
    model._fall_back_to_popularity(model.item_counts_)
    return model


@pytest.fixture(scope="module", params=LOSSES)
def pair(request, interactions):
    """(the fitted model, its popularity fallback)."""
    est = _fitted(interactions, request.param)
    return est, _popular(est)


def _order(counts, seen, k):
    """The items by decreasing count, ties by index, less ``seen``: the first ``k``."""
    order = np.lexsort((np.arange(counts.size), -counts))
    return [j for j in order if j not in seen][:k]


def test_fall_back_zeroes_the_factors_and_sets_the_log_counts(pair):
    est, pop = pair
    assert est.factors_used_ and not pop.factors_used_
    assert pop.user_factors_.shape == est.user_factors_.shape and not pop.user_factors_.any()
    assert pop.item_factors_.shape == est.item_factors_.shape and not pop.item_factors_.any()
    counts = est.item_counts_
    assert np.unique(counts).size < counts.size  # (ties, for the tests of their order)
    np.testing.assert_array_equal(pop.item_bias_, np.log1p(counts.astype(float)))
    np.testing.assert_array_equal(pop.item_counts_, counts)
    assert pop._ranks_by_popularity() and not est._ranks_by_popularity()


def test_only_bpr_had_item_biases_before(pair):
    est, pop = pair
    assert hasattr(est, "item_bias_") == (est.loss == "bpr")
    assert hasattr(pop, "item_bias_")


def test_recommend_ranks_by_popularity_ties_by_item_index_and_warns(pair):
    est, pop = pair
    counts = pop.item_counts_
    users = pop.user_ids_[:8]
    with pytest.warns(BiasOnlyWarning, match=POPULARITY + r"recommend ranks the items by their biases alone "
                      r"\(popularity: the same order for every user\)" + FIX):
        ids, scores = pop.recommend(users, k=10)
    for row, srow, user in zip(ids, scores, users):
        seen = set(pop._seen[pop._user_index.get_loc(user)].indices)
        expected = _order(counts, seen, 10)
        np.testing.assert_array_equal(row.compressed(), pop.item_ids_[expected])
        np.testing.assert_allclose(srow.compressed(), np.log1p(counts[expected]), rtol=1e-15)
    # the fitted model ranks by its factors, without the warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", BiasOnlyWarning)
        fitted_ids, _ = est.recommend(users, k=10)
    assert not np.array_equal(np.asarray(fitted_ids), np.asarray(ids))


def test_recommend_all_and_similar_items_warn(pair):
    _, pop = pair
    with pytest.warns(BiasOnlyWarning, match=POPULARITY + "recommend_all ranks the items by their biases alone"):
        frame = pop.recommend_all(k=5).compute()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BiasOnlyWarning)
        ids, _ = pop.recommend(pop.user_ids_, k=5)
    first = frame[frame["user"] == pop.user_ids_[0]].sort_values("rank")
    np.testing.assert_array_equal(first["item"].to_numpy(), ids[0].compressed())
    item = pop.item_ids_[0]
    with pytest.warns(BiasOnlyWarning, match=POPULARITY + "similar_items ranks the items by the closeness of "
                      r"their biases \(scores: -\|difference of the biases\|\), not by factor cosines" + FIX):
        similar, scores = pop.similar_items([item], k=3)
    np.testing.assert_allclose(scores[0], -np.abs(pop.item_bias_[pop._item_index.get_indexer(similar[0])]
                                                  - pop.item_bias_[0]))


def test_predict_scores_the_log_counts(pair):
    _, pop = pair
    items = pop.item_ids_[:5]
    X = pd.DataFrame({"user": [pop.user_ids_[0]] * 5 + [10**6], "item": list(items) + [items[0]]})
    np.testing.assert_allclose(pop.predict(X), np.r_[pop.item_bias_[:5], pop.item_bias_[0]])
    unknown_item = pd.DataFrame({"user": [pop.user_ids_[0]], "item": [10**6]})
    np.testing.assert_array_equal(pop.predict(unknown_item), [0.0])


def test_fold_in_users_gets_zero_factors_and_the_popularity_order(pair):
    _, pop = pair
    new_user = int(pop.user_ids_.max()) + 1
    liked = pop.item_ids_[np.argsort(-pop.item_counts_, kind="stable")[:3]]  # the three most popular
    user_items = pd.DataFrame({"user": new_user, "item": liked, "rating": 1.0})
    with pytest.warns(BiasOnlyWarning, match=POPULARITY):
        ids, _ = pop.recommend([new_user], k=6, user_items=user_items)
    seen = set(pop._item_index.get_indexer(liked))
    np.testing.assert_array_equal(ids[0].compressed(), pop.item_ids_[_order(pop.item_counts_, seen, 6)])
    folded = _popular(pop).fold_in_users(user_items)
    assert folded.user_ids_[-1] == new_user and not folded.user_factors_.any()
    assert not folded.factors_used_ and folded._ranks_by_popularity()
    np.testing.assert_array_equal(folded.item_counts_, pop.item_counts_)  # (fold_in_users refits no item)


def test_fold_in_items_gets_the_log_of_its_known_users(pair):
    _, pop = pair
    new_item = int(pop.item_ids_.max()) + 1
    users = pop.user_ids_[:7]
    item_users = pd.DataFrame({"user": list(users) + [10**6], "item": new_item, "rating": 1.0})
    folded = _popular(pop).fold_in_items(item_users)
    assert folded.item_ids_[-1] == new_item
    assert not folded.item_factors_.any() and folded.item_factors_.shape[0] == len(pop.item_ids_) + 1
    assert folded.item_bias_[-1] == pytest.approx(np.log1p(7))  # (the unknown user is ignored)
    assert folded.item_counts_[-1] == 7
    np.testing.assert_array_equal(folded.item_bias_[:-1], pop.item_bias_)
    # a known item re-folded from its users here: its bias follows their count
    known = pd.DataFrame({"user": users[:2], "item": pop.item_ids_[0], "rating": 1.0})
    again = _popular(pop).fold_in_items(known)
    assert again.item_bias_[0] == pytest.approx(np.log1p(2)) and again.item_counts_[0] == 2


def test_save_and_load_keep_the_popularity_model(pair, tmp_path):
    _, pop = pair
    loaded = dask_dgd.load(pop.save(tmp_path / "pop.npz"))
    assert type(loaded) is type(pop) and loaded.loss == pop.loss
    for name in ("user_factors_", "item_factors_", "item_bias_", "item_counts_"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(pop, name))
    assert not loaded.factors_used_ and loaded._ranks_by_popularity()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BiasOnlyWarning)
        a, _ = pop.recommend(pop.user_ids_[:5], k=8)
    with pytest.warns(BiasOnlyWarning, match=POPULARITY):
        b, _ = loaded.recommend(pop.user_ids_[:5], k=8)
    np.testing.assert_array_equal(a.filled(-1), b.filled(-1))


def test_partial_fit_refuses_the_popularity_model(pair, interactions):
    _, pop = pair
    model = _popular(pop)
    with pytest.raises(ParameterError, match=r"this model ranks by popularity \(alpha='auto' found no factors that "
                       r"beat popularity on the held-out pairs by two standard errors; every factor is exactly "
                       r"zero\), so partial_fit has no factors to train on; fit again on all the interactions "
                       r"\(more data may support factors\), or with a numeric alpha to fit factors"):
        model.partial_fit(interactions.iloc[:50])
    assert not model.item_factors_.any()  # (unchanged)


@pytest.mark.parametrize("bad", [np.ones(3, dtype=np.int64), "floats", "negative"])
def test_bad_counts_are_refused(pair, bad):
    est, _ = pair
    n = len(est.item_ids_)
    counts = {"floats": np.ones(n), "negative": -np.ones(n, dtype=np.int64)}.get(bad, bad) \
        if isinstance(bad, str) else bad
    with pytest.raises(InputError, match=rf"the popularity counts must be {n} integers >= 0, one per item \(in the "
                       r"order of item_ids_\); got an array of dtype"):
        copy.deepcopy(est)._fall_back_to_popularity(counts)


@pytest.mark.parametrize("loss", LOSSES)
def test_the_warning_of_a_wls_fit_on_strengths_names_their_units(interactions, loss):
    """Strengths in large units (seconds of play) drown the unobserved pairs whatever
    alpha: the popularity warning of a wls fit on a ``rating_col`` says to scale them;
    without strengths (or with bpr, which ignores them) it does not."""
    data = interactions.assign(seconds=240.0 * (1 + np.arange(len(interactions)) % 3))
    for rating_col in (None, "seconds"):
        est = ImplicitMatrixFactorization(loss=loss, n_components=4, alpha=0.01, max_iter=5, random_state=0,
                                          rating_col=rating_col)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pop = _popular(est.fit(data))
        users = pop.user_ids_[:3]
        with pytest.warns(BiasOnlyWarning, match=POPULARITY) as seen:
            pop.recommend(users, k=2)
        told = "confidence_scale of about 1 / a typical 'seconds', or on log1p of them" in str(seen[0].message)
        assert told == (loss == "wls" and rating_col == "seconds")
