"""Default fits on unscaled real data reach the certified or R-verified optimum.

References, by source:

- NIST StRD linear regression (certified values, computed by NIST in 500-digit
  arithmetic): Longley (its data as statsmodels ships it), Wampler1 and Wampler2 (their
  data is defined by a polynomial: y = sum_k c_k x^k on x = 0..20, residual SD 0).
  The accuracy is the log relative error (LRE), the number of correct significant
  digits, as McCullough (1998) scores solvers; the target is at least 8 for every
  coefficient.
- GLMs: the results hard-coded from R's ``glm`` (and Stata) in statsmodels' own test
  package (``statsmodels.genmod.tests.results.results_glm``), on the data sets
  statsmodels ships; compared to 1e-6 relative (the references are printed to 7-10
  significant digits).  The Gamma log-link reference there (``CancerLog``, from Stata)
  is itself 1.5e-5 from the optimum, so that case compares with statsmodels' IRLS run
  to a deviance change of 1e-14 instead.

Every fit here uses the estimator's defaults apart from ``alpha=0`` (the references
are unpenalised) and must not warn.
"""

import warnings

import numpy as np
import pytest
import statsmodels.api as sm
from statsmodels.genmod.tests.results import results_glm as R

from dask_dgd import BinomialRegressor, GammaRegressor, LinearRegression, LogisticRegression, PoissonRegressor

#: NIST StRD's certified coefficients of Longley (intercept first).
LONGLEY_CERTIFIED = np.array([-3482258.63459582, 15.0618722713733, -0.358191792925910e-01, -2.02022980381683,
                              -1.03322686717359, -0.511041056535807e-01, 1829.15146461355])


def lre(estimate, certified):
    """McCullough's log relative error of each entry (the correct significant digits),
    capped at 15."""
    err = np.abs(np.asarray(estimate) - certified) / np.abs(certified)
    with np.errstate(divide="ignore"):
        return np.minimum(-np.log10(err), 15.0)


def fit_quietly(est, *args, **kw):
    """``est.fit`` that fails on any warning (a default fit that converges says nothing)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return est.fit(*args, **kw)


def params_of(est):
    return np.r_[np.ravel(est.coef_), est.intercept_]


def test_longley_by_default_to_eight_digits():
    data = sm.datasets.longley.load_pandas()
    est = fit_quietly(LinearRegression(), data.exog.to_numpy(dtype=np.float64), data.endog.to_numpy())
    digits = lre(np.r_[est.intercept_, est.coef_], LONGLEY_CERTIFIED)
    assert digits.min() >= 8, digits
    assert est.solver_ == "newton" and est.history_.attrs["coordinates"] == "centred and scaled"


@pytest.mark.parametrize("name, certified", [
    ("Wampler1", np.ones(6)),
    ("Wampler2", np.array([1.0, 0.1, 0.01, 0.001, 1e-4, 1e-5])),
])
def test_wampler_polynomials_by_default(name, certified):
    x = np.arange(21.0)
    X = np.column_stack([x**k for k in range(1, 6)])  # columns from 20 to 3.2e6: condition ~1e14 unscaled
    y = X @ certified[1:] + certified[0]
    est = fit_quietly(LinearRegression(), X, y)
    digits = lre(np.r_[est.intercept_, est.coef_], certified)
    # an exact fit (residual SD 0): NIST's "average" difficulty; 8 digits or better
    assert digits.min() >= 8, digits


def _star98():
    data = sm.datasets.star98.load_pandas()
    successes = data.endog["NABOVE"].to_numpy(dtype=np.float64)
    trials = successes + data.endog["NBELOW"].to_numpy(dtype=np.float64)
    return data.exog.to_numpy(dtype=np.float64), successes / trials, trials


def _cpunish():
    data = sm.datasets.cpunish.load_pandas()
    X = data.exog.to_numpy(dtype=np.float64).copy()
    X[:, 3] = np.log(X[:, 3])  # as in R's script that made the reference
    return X, data.endog.to_numpy(dtype=np.float64)


def _lbw():
    ref = R.Lbw()
    return ref.exog.drop(columns="const").to_numpy(dtype=np.float64), ref.endog.to_numpy()


def _cancer():
    ref = R.CancerLog()
    return ref.exog[:, :-1], ref.endog.to_numpy(dtype=np.float64)


@pytest.mark.parametrize("case", ["star98-binomial", "lbw-logistic", "cpunish-poisson", "cancer-gamma-log"])
def test_glms_by_default_reach_the_r_verified_optimum(case):
    if case == "star98-binomial":  # 20 unscaled columns (percentages, dollars, interactions), weights = trials
        X, p, trials = _star98()
        est, ref = fit_quietly(BinomialRegressor(alpha=0), X, p, sample_weight=trials), R.Star98()
    elif case == "lbw-logistic":
        est, ref = fit_quietly(LogisticRegression(alpha=0), *_lbw()), R.Lbw()
    elif case == "cpunish-poisson":  # income in the tens of thousands beside shares
        est, ref = fit_quietly(PoissonRegressor(alpha=0), *_cpunish()), R.Cpunish()
    else:
        X, y = _cancer()
        est = fit_quietly(GammaRegressor(alpha=0), X, y)
        ref = sm.GLM(y, sm.add_constant(X, prepend=False), family=sm.families.Gamma(sm.families.links.Log())).fit(
            tol=1e-14, maxiter=500)
    want = np.asarray(ref.params, dtype=np.float64)  # statsmodels' order: the constant last
    np.testing.assert_allclose(params_of(est), want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
    assert est.converged_ and est.solver_ == "newton"


def test_on_a_cluster_the_same_optimum(client):
    """The defaults on a LocalCluster: blocks summed in the tree, the same answer."""
    import dask.array as da

    X, p, trials = _star98()
    Xd, pd_, wd = (da.from_array(a, chunks=(80,) + a.shape[1:]) for a in (X, p, trials))
    est = fit_quietly(BinomialRegressor(alpha=0, client=client), Xd, pd_, sample_weight=wd)
    np.testing.assert_allclose(params_of(est), R.Star98().params, rtol=1e-6, atol=1e-9)
    data = sm.datasets.longley.load_pandas()
    Xl = da.from_array(data.exog.to_numpy(dtype=np.float64), chunks=(5, -1))
    yl = da.from_array(data.endog.to_numpy(), chunks=5)
    lin = fit_quietly(LinearRegression(client=client), Xl, yl)
    assert lre(np.r_[lin.intercept_, lin.coef_], LONGLEY_CERTIFIED).min() >= 8
