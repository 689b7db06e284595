"""alpha="auto" of ImplicitMatrixFactorization (its default, with loss="wls" and
n_components="auto"): the rank ladder and the penalty paths scored by held-out NDCG, the paired guard against
popularity and its fallback, the refit, and the path in tasks."""

import warnings

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from dask_dgd import ImplicitMatrixFactorization, MatrixFactorization, ParameterError
from dask_dgd.exceptions import BiasOnlyWarning
from dask_dgd.recommender._auto import IMPLICIT_GRID, RANK_LADDER, SE_RULE
from dask_dgd.recommender._base import DEFAULT_ALPHA

PATH_COLUMNS = ["stage", "point", "n_components", "alpha", "val_ndcg", "val_pop_ndcg", "val_gain", "val_gain_se", "n_users", "n_iter",
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
    assert (params["loss"], params["n_components"], params["alpha"], params["alpha_bias"]) == ("wls", "auto", "auto", None)
    assert MatrixFactorization().get_params()["n_components"] == 10


def _check_path(m, loss):
    path = m.validation_path_
    columns = PATH_COLUMNS[:4] + (["alpha_bias"] if loss == "bpr" else []) + PATH_COLUMNS[4:]
    assert list(path.columns) == columns
    n = len(path)
    # the grid from the top, most regularised first, stopping after one penalty worse than the best
    assert path["alpha"].tolist() == list(IMPLICIT_GRID[:n])
    assert (path["stage"] == "factors").all() and (path["point"] == "grid").all()
    best = int(np.argmax(path["val_ndcg"].to_numpy()))
    if n < len(IMPLICIT_GRID):  # (a worse penalty stops the path only once its best beats popularity)
        assert path["val_ndcg"].iloc[-1] < path["val_ndcg"].iloc[best] and path["passed"].iloc[best]
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
    assert len(path) == len(IMPLICIT_GRID)  # (no penalty beat popularity: none stopped the path)
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


def test_the_chosen_row_is_the_best_of_those_that_pass():
    from dask_dgd.recommender._auto import _significant_ranking

    def row(ndcg, gain, se):
        return {"val_ndcg": ndcg, "val_gain": gain, "val_gain_se": se}

    # the highest NDCG fails the paired test (a noisy gain); the next passes: it is chosen
    rows = [row(0.50, 0.01, 0.02), row(0.62, 0.12, 0.08), row(0.58, 0.08, 0.01), row(0.55, 0.05, 0.01)]
    assert _significant_ranking(rows) is rows[2]
    assert [r["passed"] for r in rows] == [False, False, True, True]
    # none passes: no row (popularity)
    rows = [row(0.50, 0.01, 0.02), row(0.62, 0.12, 0.08)]
    assert _significant_ranking(rows) is None and not any(r["passed"] for r in rows)


def test_the_choice_on_data_is_the_best_passing_row(monkeypatch):
    from dask_dgd.recommender import _auto

    real = _auto._significant_ranking

    def best_fails(rows):  # the path's best row made to fail the paired test
        top = max(rows, key=lambda r: r["val_ndcg"])
        top["val_gain_se"] = abs(top["val_gain"]) + 1.0
        return real(rows)

    monkeypatch.setattr(_auto, "_significant_ranking", best_fails)
    m = _fit(ImplicitMatrixFactorization(n_components=4, max_iter=20, random_state=0), interactions(2))
    path = m.validation_path_
    best = int(np.argmax(path["val_ndcg"].to_numpy()))
    assert not path["passed"].iloc[best] and path["passed"].sum() >= 1 and m.factors_used_
    chosen = int(path["val_ndcg"].where(path["passed"]).idxmax())
    assert path["chosen"].tolist() == [j == chosen for j in range(len(path))] and chosen != best
    assert m.alpha_ == path["alpha"].iloc[chosen]


@pytest.mark.parametrize("solver, mode", [("gd", "sync"), ("als", "sync"), ("gd", "local")])
def test_a_path_that_is_not_annealed_stops_by_tol_and_so_does_its_refit(solver, mode):
    data = interactions(2)
    kw = dict(loss="wls", solver=solver, mode=mode, n_components=4, max_iter=300, random_state=0)
    m = _fit(ImplicitMatrixFactorization(**kw), data)
    path = m.validation_path_
    assert (path["epochs_run"] < 300).all() and (path["n_iter"] < 300).all()
    assert m.n_iter_ < 300  # (the refit keeps max_iter and tol, as a numeric-alpha fit)
    fixed = _fit(ImplicitMatrixFactorization(**kw, alpha=float(m.alpha_)), data)
    assert m.n_iter_ == fixed.n_iter_


def test_annealed_bpr_runs_its_max_iter_epochs_in_the_path_and_the_refit():
    m = _fit(ImplicitMatrixFactorization(loss="bpr", n_components=4, max_iter=15, random_state=0), interactions(2))
    assert (m.validation_path_["epochs_run"] == 15).all() and m.n_iter_ == 15


def test_the_path_in_tasks_uses_as_many_workers_as_the_grid_walked_has_penalties():
    from dask_dgd.recommender._auto import FACTOR_GRID, _path_workers

    workers = [f"tcp://w{j}" for j in range(12)]
    assert _path_workers(ImplicitMatrixFactorization(), workers) == workers[: len(IMPLICIT_GRID)] == workers[:7]
    assert _path_workers(ImplicitMatrixFactorization(loss="bpr"), workers) == workers[:7]
    assert _path_workers(MatrixFactorization(), workers) == workers[: len(FACTOR_GRID)] == workers[:9]
    assert _path_workers(ImplicitMatrixFactorization(), workers[:2]) == workers[:2]


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


@pytest.mark.parametrize("cls, what, loss, alpha", [
    (ImplicitMatrixFactorization, "interaction", "wls", 0.1), (ImplicitMatrixFactorization, "interaction", "bpr", 0.01),
    (MatrixFactorization, "rating", None, 0.1)])
def test_two_pairs_a_user_may_hold_none_out_and_the_warning_says_so(cls, what, loss, alpha):
    d = pd.DataFrame({"user": np.repeat(np.arange(15), 2), "item": np.r_[np.arange(15) % 5, (np.arange(15) + 1) % 5 + 5],
                      "rating": np.arange(30) % 5 + 1.0})
    kw = dict(n_components=2, max_iter=5, random_state=0)
    est = cls(**kw) if loss is None else cls(loss=loss, **kw)
    said = (rf"{cls.__name__}: no {what} could be held out to choose alpha \(10% of each user's {what}s beyond one "
            rf"are held out, chosen by a seeded hash of each pair, and none of these 30 {what}s of 15 users was\); "
            rf"alpha='auto' used alpha={alpha}; give a numeric alpha, or fit on more {what}s per user")
    with pytest.warns(UserWarning, match=said):
        m = est.fit(d if loss is None else d.drop(columns="rating"))
    assert m.alpha_ == alpha and m.validation_path_ is None


def test_bprs_fallback_penalty_is_its_own():
    from dask_dgd.recommender._base import DEFAULT_ALPHA_BPR

    one_each = pd.DataFrame({"user": np.arange(40), "item": np.arange(40) % 7})
    with pytest.warns(UserWarning, match=r"\(every user has a single interaction\); alpha='auto' used alpha=0.01; "
                                         r"give a numeric alpha"):
        m = ImplicitMatrixFactorization(loss="bpr", n_components=2, max_iter=5, random_state=0).fit(one_each)
    assert m.alpha_ == DEFAULT_ALPHA_BPR == 0.01
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fresh = ImplicitMatrixFactorization(loss="bpr", n_components=2, random_state=0).partial_fit(one_each)
    assert fresh.alpha_ == 0.01 and fresh.alpha == "auto"


@pytest.mark.parametrize("alpha, message", [
    ("fast", r"The 'alpha' parameter of ImplicitMatrixFactorization must be a float in \[0, inf\) or one of 'auto'; "
             r"got 'fast'"),
    (-1.0, r"The 'alpha' parameter of ImplicitMatrixFactorization must be a float in \[0, inf\) or one of 'auto'; "
           r"got -1.0"),
])
def test_bad_alpha(alpha, message):
    with pytest.raises(ParameterError, match=message):
        ImplicitMatrixFactorization(alpha=alpha).fit(interactions(1, n_users=20))


@pytest.mark.parametrize("loss", ["wls", "bpr"])
@pytest.mark.slow
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


# ------------------------------------------------- n_components="auto": the rank ladder
def _check_ladder(m, ladder):
    """The rows of an ``n_components="auto"`` path: each rank of ``ladder`` in turn
    (smallest first), each its own penalty path from the top of the grid (stopping after
    one penalty worse than its best); the ladder stops after a rank whose best held-out
    NDCG is not above the previous rank's; the chosen row is the best of all."""
    path = m.validation_path_
    ranks = list(dict.fromkeys(path["n_components"]))
    assert ranks == list(ladder[:len(ranks)])
    bests = []
    for rank in ranks:
        one = path[path["n_components"] == rank]
        n = len(one)
        assert one["alpha"].tolist() == list(IMPLICIT_GRID[:n])
        if n < len(IMPLICIT_GRID):
            top = one["val_ndcg"].to_numpy().argmax()
            assert one["val_ndcg"].iloc[-1] < one["val_ndcg"].iloc[top] and one["passed"].iloc[top]
        bests.append(one["val_ndcg"].max())
    assert all(b > a for a, b in zip(bests[:-2], bests[1:-1]))  # (every rank but the last improved)
    if len(ranks) < len(ladder):  # (stopped early: by a rank no better than the one before)
        assert bests[-1] <= bests[-2]
    best = int(np.argmax(path["val_ndcg"].to_numpy()))
    assert path["chosen"].tolist() == [j == best and bool(path["passed"].iloc[best]) for j in range(len(path))]
    return path, best


def test_the_rank_ladder_its_rows_its_stop_rule_and_the_fitted_rank(monkeypatch):
    import dask_dgd.recommender._auto as auto

    ladder = (2, 4, 8, 16)
    monkeypatch.setattr(auto, "RANK_LADDER", ladder)  # (small ranks: a fast test)
    data = interactions(2)
    m = _fit(ImplicitMatrixFactorization(max_iter=10, random_state=0), data)
    path, best = _check_ladder(m, ladder)
    assert 1 < path["n_components"].nunique() < len(ladder)  # (a rank improved, then the ladder stopped)
    assert m.factors_used_ and path["chosen"].iloc[best]
    assert m.n_components_ == path["n_components"].iloc[best] and m.alpha_ == path["alpha"].iloc[best]
    assert m.user_factors_.shape == (data["user"].nunique(), m.n_components_)
    assert m.item_factors_.shape == (data["item"].nunique(), m.n_components_)


def test_the_default_ladder():
    assert RANK_LADDER == (8, 24, 64)
    assert IMPLICIT_GRID == (1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001)
    m = _fit(ImplicitMatrixFactorization(max_iter=10, random_state=0), interactions(2))
    path, best = _check_ladder(m, RANK_LADDER)
    assert m.n_components_ == path["n_components"].iloc[best] and m.item_factors_.shape[1] == m.n_components_


@pytest.mark.parametrize("loss", ["wls", "bpr"])
def test_an_int_n_components_is_one_ranks_path(loss):
    m = _fit(ImplicitMatrixFactorization(loss=loss, n_components=3, max_iter=10, random_state=0), interactions(2))
    assert set(m.validation_path_["n_components"]) == {3}
    assert m.n_components_ == 3 and m.user_factors_.shape[1] == m.item_factors_.shape[1] == 3


def test_a_popularity_fallback_of_the_ladder_has_the_first_rows_rank(monkeypatch):
    import dask_dgd.recommender._auto as auto

    monkeypatch.setattr(auto, "RANK_LADDER", (3, 5))
    m = _fit(ImplicitMatrixFactorization(max_iter=10, random_state=0), interactions(1))
    assert not m.factors_used_ and not m.validation_path_["chosen"].any()
    assert m.n_components_ == 3 and m.item_factors_.shape == (60, 3) and not m.item_factors_.any()


def test_an_auto_rank_model_partial_fits_folds_in_and_round_trips(tmp_path, monkeypatch):
    import dask_dgd
    import dask_dgd.recommender._auto as auto

    monkeypatch.setattr(auto, "RANK_LADDER", (4, 32))  # (the chosen rank is below the ladder's largest)
    data = interactions(2)
    m = _fit(ImplicitMatrixFactorization(max_iter=10, random_state=0), data)
    assert m.factors_used_ and m.n_components_ == 4, m.validation_path_
    # fold-in of a new user: its factors have the fitted rank
    new = pd.DataFrame({"user": [1000] * 4, "item": [0, 2, 4, 6]})
    items = m.recommend([1000], k=5, user_items=new)[0].filled(-1)
    assert (items[items >= 0] % 2 == 0).all()
    # save and load
    back = dask_dgd.load(m.save(tmp_path / "auto.npz"))
    assert back.n_components_ == 4 and back.get_params()["n_components"] == "auto"
    np.testing.assert_array_equal(back.recommend(np.arange(5), k=4)[0], m.recommend(np.arange(5), k=4)[0])
    m.fold_in_users(new)
    assert m.user_factors_.shape == (301, 4) and m.n_components_ == 4
    # partial_fit with new users and items: the fitted rank carries on
    more = pd.DataFrame({"user": [1000, 1000, 1001, 1001], "item": [0, 2, 1, 999]})
    _fit_more = back.partial_fit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _fit_more(more)
    assert back.n_components_ == 4 and back.user_factors_.shape == (302, 4) and back.item_factors_.shape == (61, 4)
    # a new fit (of an int rank) forgets the fitted rank
    back.set_params(n_components=3, alpha=0.1)
    _fit(back, data)
    assert back.n_components_ == 3 and back.item_factors_.shape == (60, 3)


def test_matrix_factorization_reports_its_rank():
    frame = pd.DataFrame({"user": np.repeat(np.arange(20), 5), "item": np.tile(np.arange(5), 20),
                          "rating": np.arange(100) % 5 + 1.0})
    m = _fit(MatrixFactorization(n_components=3, alpha=0.1, max_iter=5, random_state=0), frame)
    assert m.n_components_ == 3


def _popularity_ndcg(train, test, k=10):
    """NDCG@k of the popularity ranking (training pairs per item, ties by item id, the
    user's training items excluded) against each test user's items."""
    from dask_dgd.recommender import ndcg_at_k

    order = train["item"].value_counts().sort_index().sort_values(ascending=False, kind="stable").index.to_numpy()
    seen = train.groupby("user")["item"].agg(set)
    users = test.groupby("user")["item"].agg(list)
    ranked = [[i for i in order if i not in seen.get(u, set())][:k] for u in users.index]
    return ndcg_at_k(users.to_list(), ranked, k)


@pytest.mark.parametrize("loss", ["wls", "bpr"])
@pytest.mark.slow
def test_generated_low_rank_interactions_get_factors_not_popularity(loss):
    """Interactions of rank 5: a fixed rank 64 lost to popularity on them (falling back
    to it); the ladder finds a small rank that beats it on held-out pairs, and on the
    test pairs too."""
    from dask_dgd.datasets import make_ratings
    from dask_dgd.recommender import evaluate_ranking, train_test_split

    inter, _ = make_ratings(1000, 500, 20000, rank=5, implicit=True, random_state=1)
    train, test = train_test_split(inter[["user", "item"]], 0.1, random_state=0)
    m = _fit(ImplicitMatrixFactorization(loss=loss, random_state=0), train)
    assert m.factors_used_ and m.n_components_ < max(RANK_LADDER)
    assert evaluate_ranking(m, test)["ndcg"] > _popularity_ndcg(train, test)


def test_the_ladder_in_tasks_is_the_ladder_in_rounds_bit_for_bit(process_client, monkeypatch):
    import dask_dgd.recommender._auto as auto

    monkeypatch.setattr(auto, "RANK_LADDER", (4, 32))  # (the ladder runs on the driver; each fit in a task)
    data = dd.from_pandas(interactions(2), npartitions=4)

    def fit():
        return _fit(ImplicitMatrixFactorization(max_iter=10, random_state=0, n_shards=3, client=process_client), data)

    in_tasks = fit()
    monkeypatch.setattr(auto, "PATH_IN_TASKS_MAX_RATINGS", 0)
    in_rounds = fit()
    _check_ladder(in_tasks, (4, 32))
    assert set(in_tasks.validation_path_["n_components"]) == {4, 32}
    pd.testing.assert_frame_equal(in_tasks.validation_path_, in_rounds.validation_path_, check_exact=True)
    assert in_tasks.n_components_ == in_rounds.n_components_ == in_tasks.item_factors_.shape[1]
    np.testing.assert_array_equal(in_tasks.item_factors_, in_rounds.item_factors_)


def test_the_docs_say_what_partial_fit_raises_and_that_the_evaluated_users_are_a_sample():
    from numpydoc.docscrape import FunctionDoc

    raises = FunctionDoc(ImplicitMatrixFactorization.partial_fit)["Raises"]
    assert [r.type for r in raises] == ["ParameterError"] and "popularity" in " ".join(raises[0].desc)
    doc = " ".join(ImplicitMatrixFactorization.__doc__.split())
    assert "at most 5,000" not in doc and "each is evaluated with probability 5,000 / n: about 5,000" in doc
