"""Generalised linear models trained by distributed gradient descent."""

from ._glm import LinearRegression, PoissonRegressor
from ._logistic import LogisticRegression

__all__ = ["LinearRegression", "LogisticRegression", "PoissonRegressor"]
