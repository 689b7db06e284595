"""The engine's protocols (``dask_dgd._engine.protocols``) hold for every training
objective and step source the estimators hand the one loop."""

import warnings

import dask
import numpy as np
import pytest

from dask_dgd import LinearRegression, LogisticRegression, LogisticRegressionCV, MatrixFactorization
from dask_dgd._engine import loop as loop_module
from dask_dgd._engine.protocols import CurvatureObjective, LocalParameters, StepSource, TrainingObjective
from dask_dgd.datasets import make_ratings

rng = np.random.default_rng(0)
X = rng.standard_normal((300, 4))
Y = (X @ [1.0, -1.0, 0.5, 0.0] + rng.logistic(size=300) > 0).astype(int)


@pytest.fixture
def seen(monkeypatch):
    """The objectives and step sources the loop was given, by type name."""
    found = {}
    init = loop_module.Loop.__init__

    def recording(self, ctx, solver, stops, checkpoint=None):
        found[type(ctx.objective).__name__] = (ctx.objective, ctx.source)
        init(self, ctx, solver, stops, checkpoint)

    monkeypatch.setattr(loop_module.Loop, "__init__", recording)
    return found


def _fits():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        LinearRegression(solver="newton").fit(X, X[:, 0])
        LogisticRegression(solver="lbfgs").fit(X, Y)
        LogisticRegression(solver="cd", alpha=0.01, l1_ratio=1.0).fit(X, Y)
        with dask.config.set({"dgd.scale-features": False}):
            LogisticRegression(solver="gd", max_iter=3).fit(X, Y)
            LogisticRegression(solver="newton", max_iter=3).fit(X, Y)
            LogisticRegressionCV(Cs=2, cv=2, solver="gd", max_iter=5).fit(X, Y)  # the path as it is
        LogisticRegressionCV(Cs=2, cv=2, max_iter=5).fit(X, Y)
        LogisticRegressionCV(Cs=2, cv=2, solver="lbfgs", max_iter=5).fit(X, Y)  # the path in scaled coordinates
        MatrixFactorization(n_components=2, alpha=0.1, solver="gd", max_iter=2, random_state=0).fit(
            make_ratings(30, 20, 300, random_state=0)[0])


def test_every_objective_and_source_the_loop_gets_keeps_the_protocols(seen):
    _fits()
    assert {"LinearTraining", "ScaledTraining", "HessianTraining", "PathTraining", "PathHessianTraining",
            "FactorizationTraining"} <= set(seen), sorted(seen)
    for name, (objective, source) in seen.items():
        assert isinstance(objective, TrainingObjective), name
        assert isinstance(source, StepSource), name
        assert isinstance(objective, LocalParameters) == bool(objective.has_local), name
    assert isinstance(seen["HessianTraining"][0], CurvatureObjective)
    assert isinstance(seen["PathHessianTraining"][0], CurvatureObjective)
    assert not isinstance(seen["LinearTraining"][0], CurvatureObjective)


def test_something_else_is_not_a_training_objective():
    assert not isinstance(object(), TrainingObjective)
    assert not isinstance(LinearRegression(), TrainingObjective)
