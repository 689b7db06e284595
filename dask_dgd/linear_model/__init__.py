"""Generalised linear models trained by distributed gradient descent."""

from ._base import DGDLinearModel
from ._cv import ElasticNetCV, fold_ids
from ._cv_families import (
    BinomialRegressorCV,
    GammaRegressorCV,
    NegativeBinomialRegressorCV,
    PoissonRegressorCV,
    TweedieRegressorCV,
)
from ._cv_logistic import LogisticRegressionCV
from ._families import BinomialRegressor, GammaRegressor, NegativeBinomialRegressor, TweedieRegressor
from ._glm import LinearRegression, PoissonRegressor
from ._logistic import LogisticRegression

__all__ = [
    "BinomialRegressor",
    "BinomialRegressorCV",
    "DGDLinearModel",
    "ElasticNetCV",
    "GammaRegressor",
    "GammaRegressorCV",
    "LinearRegression",
    "LogisticRegression",
    "LogisticRegressionCV",
    "NegativeBinomialRegressor",
    "NegativeBinomialRegressorCV",
    "PoissonRegressor",
    "PoissonRegressorCV",
    "TweedieRegressor",
    "TweedieRegressorCV",
    "fold_ids",
]
