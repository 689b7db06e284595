"""Generalised linear models trained by distributed gradient descent."""

from ._base import DGDLinearModel
from ._binomial import BinomialRegressor
from ._cv import ElasticNetCV, LogisticRegressionCV, PoissonRegressorCV, fold_ids
from ._families import GammaRegressor, NegativeBinomialRegressor, TweedieRegressor
from ._glm import LinearRegression, PoissonRegressor
from ._logistic import LogisticRegression

__all__ = [
    "BinomialRegressor",
    "DGDLinearModel",
    "ElasticNetCV",
    "GammaRegressor",
    "LinearRegression",
    "LogisticRegression",
    "LogisticRegressionCV",
    "NegativeBinomialRegressor",
    "PoissonRegressor",
    "PoissonRegressorCV",
    "TweedieRegressor",
    "fold_ids",
]
