"""dask_dgd: scikit-learn estimators trained by distributed gradient descent on Dask."""

from . import exceptions, losses, optim
from .exceptions import ConvergenceWarning, DivergenceError, InputError, NotFittedError, ParameterError
from .linear_model import LinearRegression, LogisticRegression, PoissonRegressor

__version__ = "0.1.0"

__all__ = [
    "ConvergenceWarning",
    "DivergenceError",
    "InputError",
    "LinearRegression",
    "LogisticRegression",
    "NotFittedError",
    "ParameterError",
    "PoissonRegressor",
    "__version__",
    "exceptions",
    "losses",
    "optim",
]
