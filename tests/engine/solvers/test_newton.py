"""The exact-Hessian Newton solver: same optimum as L-BFGS, fewer distributed steps."""

import dask
import numpy as np
import pytest
import scipy.sparse as sp

from dask_dgd import LinearRegression, LogisticRegression, PoissonRegressor
from dask_dgd.datasets import make_classification
from dask_dgd.exceptions import InputError, ParameterError
from dask_dgd.losses import (
    BinaryLogistic,
    HalfPoisson,
    HalfSquaredError,
    LinearObjective,
    MultinomialLogistic,
    Penalty,
    objective_hessian,
    objective_value_gradient,
)


@pytest.mark.parametrize("loss", [HalfSquaredError(), BinaryLogistic(), HalfPoisson()])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("sparse", [False, True])
def test_objective_hessian_matches_finite_differences(loss, fit_intercept, sparse):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 4))
    y = {HalfSquaredError: rng.standard_normal(300), BinaryLogistic: (rng.random(300) < 0.4) * 1.0,
         HalfPoisson: rng.poisson(1.5, 300) * 1.0}[type(loss)]
    w = rng.random(300) + 0.5
    obj = LinearObjective(loss, 4, fit_intercept)
    pen = Penalty(alpha=0.3)
    params = rng.standard_normal(obj.n_params) * 0.2
    Xa = sp.csr_matrix(X) if sparse else X
    H = objective_hessian(params, obj, pen, Xa, y, w)
    eps = 1e-6
    fd = np.column_stack([
        (objective_value_gradient(params + eps * e, obj, pen, X, y, w)[1]
         - objective_value_gradient(params - eps * e, obj, pen, X, y, w)[1]) / (2 * eps)
        for e in np.eye(obj.n_params)
    ])
    np.testing.assert_allclose(H, fd, rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(H, H.T)


def test_objective_hessian_refuses_multinomial():
    obj = LinearObjective(MultinomialLogistic(3), 2)
    with pytest.raises(ParameterError, match="supports the single-output losses .* got MultinomialLogistic: use solver='lbfgs'"):
        objective_hessian(np.zeros(obj.n_params), obj, None, np.ones((3, 2)), np.zeros(3))


@pytest.mark.parametrize(
    "make",
    [
        lambda X, rng: (LinearRegression, X @ np.arange(1.0, 7.0) + rng.standard_normal(len(X))),
        lambda X, rng: (LogisticRegression, (X @ np.linspace(-1, 1, 6) + rng.standard_normal(len(X)) > 0).astype(int)),
        lambda X, rng: (PoissonRegressor, rng.poisson(np.exp(0.2 * X @ np.linspace(-1, 1, 6)))),
    ],
    ids=["linear", "logistic", "poisson"],
)
def test_newton_reaches_the_lbfgs_optimum_on_a_cluster(client, make):
    import dask.array as da

    rng = np.random.default_rng(1)
    X = rng.standard_normal((6000, 6))
    Est, y = make(X, rng)
    Xd, yd = da.from_array(X, chunks=(1000, -1)), da.from_array(y, chunks=1000)
    newton = Est(client=client, solver="newton", tol=1e-9, alpha=1e-3).fit(Xd, yd)
    lbfgs = Est(client=client, solver="lbfgs", tol=1e-9, alpha=1e-3).fit(Xd, yd)
    np.testing.assert_allclose(newton.coef_, lbfgs.coef_, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(newton.intercept_, lbfgs.intercept_, rtol=1e-6, atol=1e-8)
    assert newton.solver_ == "newton"
    # to a moderate tolerance the exact Hessian saves distributed steps
    quick = Est(client=client, solver="newton", tol=1e-5, alpha=1e-3).fit(Xd, yd)
    quick_lbfgs = Est(client=client, solver="lbfgs", tol=1e-5, alpha=1e-3).fit(Xd, yd)
    assert len(quick.history_) < len(quick_lbfgs.history_)
    assert quick.loss_curve_[-1] <= quick_lbfgs.loss_curve_[-1] * (1 + 1e-6)
    # deterministic, like every synchronous solver
    again = Est(client=client, solver="newton", tol=1e-9, alpha=1e-3).fit(Xd, yd)
    np.testing.assert_array_equal(again.coef_, newton.coef_)


def test_newton_converges_quadratically():
    X, y = make_classification(n_samples=2000, n_features=5, random_state=0)
    est = LogisticRegression(solver="newton", tol=1e-10).fit(X, y)
    ref = LogisticRegression(solver="lbfgs", tol=1e-10).fit(X, y)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-7, atol=1e-9)
    assert est.n_iter_ <= 8 and len(est.history_) <= est.n_iter_ + 3  # full steps, hardly a halving
    grads = est.history_["grad_norm"].to_numpy()
    # quadratic convergence: once the gradient is small, each step squares it (times a
    # constant of the problem, about 12 here; a linear rate would break this at once)
    small = grads[grads < 1e-2]
    assert len(small) >= 3
    assert all(after <= max(100 * before**2, 1e-13) for before, after in zip(small, small[1:]))


def test_multinomial_newton_reaches_the_lbfgs_optimum():
    """The multinomial's Hessian (one Gram matrix per pair of classes) in scaled
    coordinates: Newton is what "auto" picks, and it reaches L-BFGS's optimum."""
    X, y = make_classification(n_samples=3000, n_features=4, n_classes=3, random_state=1)
    X = X * [1.0, 100.0, 0.01, 1.0] + [0.0, 5e3, 0.0, -20.0]
    est = LogisticRegression(alpha=1e-3, tol=1e-10).fit(X, y)
    ref = LogisticRegression(alpha=1e-3, solver="lbfgs", tol=1e-10, max_iter=1000).fit(X, y)
    assert est.solver_ == "newton" and est.converged_ and est.n_iter_ <= 10
    np.testing.assert_allclose(est.predict_proba(X), ref.predict_proba(X), rtol=0, atol=1e-8)
    np.testing.assert_allclose(est.coef_, ref.coef_, rtol=1e-6, atol=1e-9)


def _binary_four_class_data(n):
    """Binary columns and four classes drawn from a softmax: a design whose exact
    collinear directions are only the softmax's common shifts."""
    rng = np.random.default_rng(31)
    X = rng.integers(0, 2, size=(n, 8)).astype(float)
    P = np.exp(X @ rng.normal(scale=0.3, size=(8, 4)))
    P /= P.sum(1, keepdims=True)
    return X, (P.cumsum(1) > rng.uniform(size=(n, 1))).argmax(1)


def test_unpenalised_multinomial_newton_holds_the_classes_mean_at_zero():
    """The unpenalised softmax's Hessian is singular along the common shift of each
    row of coefficients; rounding once let the least-squares steps run off along it
    (coef_ of 5e11 after 45 iterations at these 20,000 rows, the class differences
    still right).  Newton now holds every row's mean over the classes at zero and
    matches statsmodels' MNLogit (class 0 fixed at zero) in its differences."""
    sm = pytest.importorskip("statsmodels.api")
    X, y = _binary_four_class_data(20_000)
    est = LogisticRegression(alpha=0.0).fit(X, y)
    assert est.solver_ == "newton" and est.converged_ and est.n_iter_ <= 8
    B = np.vstack([est.intercept_, est.coef_.T])  # (1 + features, classes)
    np.testing.assert_allclose(B.sum(axis=1), 0.0, atol=1e-12)
    ref = sm.MNLogit(y, sm.add_constant(X)).fit(disp=0, method="newton", maxiter=100).params
    np.testing.assert_allclose(B[:, 1:] - B[:, :1], ref, rtol=0, atol=1e-8)


def test_separated_multinomial_newton_stops_in_few_steps():
    """Three rows of one class alone have an indicator (quasi-separation): the
    indicator's coefficients grow without bound, the others stay finite.  Newton
    stops in a few steps with the warning, instead of 100 iterations with every
    coefficient at 1e11."""
    X, y = _binary_four_class_data(20_000)
    z = np.zeros(len(y))
    z[np.flatnonzero(y == 1)[:3]] = 1.0
    with pytest.warns(UserWarning, match="separat"):
        est = LogisticRegression(alpha=0.0, solver="newton").fit(np.column_stack([X, z]), y)
    assert est.separated_ is True and est.n_iter_ <= 20
    assert np.abs(est.coef_[:, :-1]).max() < 1.0 and np.abs(est.intercept_).max() < 1.0
    assert est.coef_[1, -1] - est.coef_[[0, 2, 3], -1].max() > 5.0


def test_newton_errors():
    X, y = make_classification(n_samples=200, n_features=3, n_classes=3, random_state=0)
    with dask.config.set({"dgd.scale-features": False}), pytest.raises(
            ParameterError, match=r"solver='newton' cannot train this model: a multi-output model's Hessian is summed "
                                  r"in scaled coordinates, and dgd.scale-features is off; use solver='lbfgs'"):
        LogisticRegression(solver="newton").fit(X, y)
    Xb, yb = make_classification(n_samples=200, n_features=3, random_state=0)
    with pytest.raises(ParameterError, match="solver='newton' cannot handle an L1 penalty"):
        LogisticRegression(solver="newton", alpha=0.1, l1_ratio=0.5).fit(Xb, yb)
    with pytest.raises(ParameterError, match="solver='newton' is full-batch only"):
        LogisticRegression(solver="newton", batch_size=10).fit(Xb, yb)
    with pytest.raises(ParameterError, match="solver='newton' takes no optimizer; got Adam"):
        LogisticRegression(solver="newton", optimizer="adam").fit(Xb, yb)
    Xn = Xb.copy()
    Xn[7, 1] = np.nan
    with pytest.raises(InputError, match=r"Input X contains NaN or infinity in block 0"):
        LogisticRegression(solver="newton").fit(Xn, yb)
