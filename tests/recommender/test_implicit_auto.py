"""alpha="auto" of ImplicitMatrixFactorization (its default, with loss="wls" and
n_components=64): the penalty path scored by held-out NDCG, the paired guard against
popularity and its fallback, the refit, and the path in tasks."""

import warnings

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from dask_dgd import ImplicitMatrixFactorization, MatrixFactorization, ParameterError
from dask_dgd.exceptions import BiasOnlyWarning
from dask_dgd.recommender._auto import IMPLICIT_GRID, SE_RULE
from dask_dgd.recommender._base import DEFAULT_ALPHA

PATH_COLUMNS = ["stage", "point", "alpha", "val_ndcg", "val_pop_ndcg", "val_gain", "val_gain_se", "n_users", "n_iter",
                "epochs_run", "passed", "chosen"]


def interactions(groups, n_users=300, n_items=60, per_user=10, seed=0):
    """Every user's ``per_user`` items drawn from a Zipf popularity over its group's
    items (item ``i`` belongs to group ``i % groups``; user ``u`` to ``u % groups``):
    with two groups of disjoint items a user's items tell its group; with one, nothing
    beyond popularity is there to learn."""
    rng = np.random.default_rng(seed)
    w = 1.0 / np.arange(1, n_items // groups + 1)
    rows = [(u, i * groups + u % groups) for u in range(n_users)
            for i in rng.choice(n_items // groups, per_user, replace=False, p=w / w.sum())]
    return pd.DataFrame(rows, columns=["user", "item"])


def _fit(est, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(*args)


def test_the_defaults():
    params = ImplicitMatrixFactorization().get_params()
    assert (params["loss"], params["n_components"], params["alpha"], params["alpha_bias"]) == ("wls", 64, "auto", None)
    assert MatrixFactorization().get_params()["n_components"] == 10


def _check_path(m, loss):
    path = m.validation_path_
    columns = PATH_COLUMNS[:3] + (["alpha_bias"] if loss == "bpr" else []) + PATH_COLUMNS[3:]
    assert list(path.columns) == columns
    n = len(path)
    # the grid from the top, most regularised first, stopping after one penalty worse than the best
    assert path["alpha"].tolist() == list(IMPLICIT_GRID[:n])
    assert (path["stage"] == "factors").all() and (path["point"] == "grid").all()
    best = int(np.argmax(path["val_ndcg"].to_numpy()))
    if n < len(IMPLICIT_GRID):
        assert path["val_ndcg"].iloc[-1] < path["val_ndcg"].iloc[best]
    assert (path["n_users"] > 0).all()
    np.testing.assert_allclose(path["val_gain"], path["val_ndcg"] - path["val_pop_ndcg"], atol=1e-12)
    np.testing.assert_array_equal(path["passed"], path["val_gain"] > SE_RULE * path["val_gain_se"])
    return path, best


@pytest.mark.parametrize("loss", ["wls", "bpr"])
def test_the_path_its_choice_and_the_refit_are_reported(loss):
    data = interactions(2)
    m = _fit(ImplicitMatrixFactorization(loss=loss, n_components=4, max_iter=20, random_state=0), data)
    path, best = _check_path(m, loss)
    # two groups of users liking disjoint items: the factors beat popularity by far
    assert path["chosen"].tolist() == [j == best for j in range(len(path))]
    assert path["passed"].iloc[best] and m.factors_used_
    assert m.alpha_ == path["alpha"].iloc[best]
    if loss == "bpr":  # (alpha_bias=None: the fitted alpha_)
        assert m.alpha_bias_ == m.alpha_ == path["alpha_bias"].iloc[best]
    else:
        assert not hasattr(m, "item_bias_")
    stages = m.history_["stage"].tolist()
    n_val = stages.count("validation")
    assert n_val >= len(path) and stages == ["validation"] * n_val + ["refit"] * (len(stages) - n_val)
    assert m.loss_curve_ == m.history_.query("stage == 'refit'")["loss"].tolist()
    assert np.abs(m.item_factors_).max() > 0
    if loss == "bpr":  # the refit runs its max_iter epochs, as the path's fits
        assert m.n_iter_ == 20 and (path["epochs_run"] == 20).all()
    # the refit's recommendations separate the groups: a user of group 0 gets even items
    items = m.recommend(np.arange(10), k=5)[0].filled(-1)
    assert np.mean(items % 2 == np.arange(10)[:, None] % 2) > 0.9


@pytest.mark.parametrize("loss", ["wls", "bpr"])
def test_factors_that_do_not_beat_popularity_fall_back_to_it(loss):
    data = interactions(1)  # nothing beyond popularity
    m = _fit(ImplicitMatrixFactorization(loss=loss, n_components=4, max_iter=20, random_state=0), data)
    path, _ = _check_path(m, loss)
    assert not path["chosen"].any() and not m.factors_used_
    assert m.alpha_ == IMPLICIT_GRID[0]  # (the top of the path, where the factors vanish)
    assert not m.item_factors_.any() and not m.user_factors_.any()
    counts = data["item"].value_counts().reindex(m.item_ids_).to_numpy()
    np.testing.assert_allclose(m.item_bias_, np.log1p(counts))
    said = r"ImplicitMatrixFactorization: the model ranks by popularity .*alpha='auto' found no factors that beat " \
           r"popularity on the held-out pairs by two standard errors.*give a numeric alpha"
    with pytest.warns(BiasOnlyWarning, match=said):
        items = m.recommend([0], k=5)[0][0].compressed()
    seen = set(data.loc[data["user"] == 0, "item"])
    popular = [i for i in pd.Series(counts, index=m.item_ids_).sort_values(ascending=False, kind="stable").index
               if i not in seen][:5]
    assert list(items) == popular


def test_a_numeric_alpha_is_one_fit():
    m = _fit(ImplicitMatrixFactorization(alpha=0.1, n_components=4, max_iter=20, random_state=0), interactions(2))
    assert m.validation_path_ is None and m.alpha_ == 0.1 and m.factors_used_
    assert "stage" not in m.history_ or set(m.history_["stage"]) == {"refit"}


def test_no_interaction_to_hold_out_falls_back_with_a_warning():
    one_each = pd.DataFrame({"user": np.arange(40), "item": np.arange(40) % 7})
    with pytest.warns(UserWarning, match=r"ImplicitMatrixFactorization: no interaction could be held out to choose "
                                         r"alpha \(every user has a single interaction\); alpha='auto' used "
                                         r"alpha=0.1"):
        m = ImplicitMatrixFactorization(n_components=2, max_iter=5, random_state=0).fit(one_each)
    assert m.alpha_ == DEFAULT_ALPHA and m.validation_path_ is None


@pytest.mark.parametrize("alpha, message", [
    ("fast", r"The 'alpha' parameter of ImplicitMatrixFactorization must be a float in \[0, inf\) or one of 'auto'; "
             r"got 'fast'"),
    (-1.0, r"The 'alpha' parameter of ImplicitMatrixFactorization must be a float in \[0, inf\) or one of 'auto'; "
           r"got -1.0"),
])
def test_bad_alpha(alpha, message):
    with pytest.raises(ParameterError, match=message):
        ImplicitMatrixFactorization(alpha=alpha).fit(interactions(1, n_users=20))


@pytest.fixture(scope="module")
def process_client(make_module_cluster):
    """Two single-threaded worker processes (the path runs in tasks only on workers in
    processes of their own)."""
    return make_module_cluster(n_workers=2)


@pytest.mark.parametrize("loss", ["wls", "bpr"])
def test_the_path_in_tasks_is_the_path_in_rounds_bit_for_bit(process_client, monkeypatch, loss):
    import dask_dgd.recommender._auto as auto

    data = dd.from_pandas(interactions(2), npartitions=4)

    def fit():
        return _fit(ImplicitMatrixFactorization(loss=loss, n_components=4, max_iter=10, random_state=0, n_shards=3,
                                                client=process_client), data)

    made = []

    class Spy(auto._InTasks):
        def __init__(self, *args):
            super().__init__(*args)
            made.append(self)

    monkeypatch.setattr(auto, "_InTasks", Spy)
    in_tasks = fit()
    monkeypatch.setattr(auto, "PATH_IN_TASKS_MAX_RATINGS", 0)
    in_rounds = fit()
    assert len(made) == 1 and made[0].width == 2
    a, b = in_tasks.validation_path_, in_rounds.validation_path_
    assert len(a) >= 2 and a["chosen"].sum() == 1
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    np.testing.assert_array_equal(in_tasks.item_factors_, in_rounds.item_factors_)
    np.testing.assert_array_equal(in_tasks.user_factors_, in_rounds.user_factors_)
    # the same path as in process (the same held-out pairs and popularity; the item
    # sums added in another order: rounding)
    here = _fit(ImplicitMatrixFactorization(loss=loss, n_components=4, max_iter=10, random_state=0), data.compute())
    assert here.alpha_ == in_tasks.alpha_ and here.factors_used_ == in_tasks.factors_used_
    pd.testing.assert_frame_equal(here.validation_path_.drop(columns=["val_ndcg", "val_gain", "val_gain_se"]),
                                  a.drop(columns=["val_ndcg", "val_gain", "val_gain_se"]), check_dtype=False)
    np.testing.assert_allclose(here.validation_path_["val_ndcg"], a["val_ndcg"], atol=0.01)


def test_the_fallback_on_a_cluster(process_client):
    data = dd.from_pandas(interactions(1), npartitions=4)
    m = _fit(ImplicitMatrixFactorization(n_components=4, max_iter=10, random_state=0, client=process_client), data)
    assert not m.factors_used_ and not m.validation_path_["chosen"].any() and not m.item_factors_.any()
    counts = data.compute()["item"].value_counts().reindex(m.item_ids_).to_numpy()
    np.testing.assert_allclose(m.item_bias_, np.log1p(counts))
