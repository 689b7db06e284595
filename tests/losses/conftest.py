"""Problem generators shared by the tests of ``dask_dgd.losses``."""

import numpy as np
import pytest
import scipy.sparse as sp

from dask_dgd.losses import (
    BinaryLogistic,
    HalfPoisson,
    HalfSquaredError,
    LinearObjective,
    MultinomialLogistic,
)


def make_loss(name, n_classes=3):
    """A pointwise loss from its short name."""
    return {
        "squared": HalfSquaredError,
        "binary": BinaryLogistic,
        "multinomial": lambda: MultinomialLogistic(n_classes),
        "poisson": HalfPoisson,
    }[name]()


def make_targets(name, raw, rng):
    """Targets drawn from the model of ``name`` given the linear predictor ``raw``."""
    n = raw.shape[0]
    if name == "squared":
        return raw[:, 0] + rng.standard_normal(n)
    if name == "binary":
        return (rng.random(n) < 1 / (1 + np.exp(-raw[:, 0]))).astype(np.float64)
    if name == "multinomial":
        return rng.integers(0, raw.shape[1], size=n).astype(np.float64)
    return rng.poisson(np.exp(raw[:, 0])).astype(np.float64)


def build_problem(
    name,
    n_samples,
    n_features,
    *,
    n_classes=3,
    fit_intercept=True,
    weighted=False,
    sparse=False,
    seed=0,
    slice_bytes=None,
):
    """``(objective, params, X, y, sample_weight)`` for one random problem."""
    rng = np.random.default_rng(seed)
    objective = LinearObjective(
        make_loss(name, n_classes), n_features, fit_intercept, slice_bytes=slice_bytes
    )
    X = rng.standard_normal((n_samples, n_features))
    if sparse:
        X[rng.random(X.shape) < 0.5] = 0.0
    params = 0.3 * rng.standard_normal(objective.n_params)
    coef, intercept = objective.unpack(params)
    y = make_targets(name, X @ coef + intercept, rng)
    sample_weight = rng.uniform(0.1, 2.0, n_samples) if weighted else None
    if sparse:
        X = sp.csr_matrix(X)
    return objective, params, X, y, sample_weight


@pytest.fixture(scope="session")
def make_problem():
    """The :func:`build_problem` generator, as a fixture."""
    return build_problem
