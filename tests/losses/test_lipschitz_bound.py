"""lipschitz_bound against dense eigenvalues."""

import numpy as np
import pytest
import scipy.sparse as sp

from dask_dgd.exceptions import InputError
from dask_dgd.losses import (
    BinaryLogistic,
    HalfPoisson,
    HalfSquaredError,
    LinearObjective,
    MultinomialLogistic,
    lipschitz_bound,
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
