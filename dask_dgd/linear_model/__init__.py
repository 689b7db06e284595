"""Generalised linear models trained by distributed gradient descent."""

from ._base import DGDLinearModel
from ._glm import LinearRegression, PoissonRegressor
from ._logistic import LogisticRegression

__all__ = ["DGDLinearModel", "LinearRegression", "LogisticRegression", "PoissonRegressor"]
