"""dask_dgd: scikit-learn estimators trained by distributed gradient descent on Dask.

The pure layers (:mod:`dask_dgd.optim`, :mod:`dask_dgd.losses`) import no Dask; the
estimators, which need the engine, and the errors (:mod:`dask_dgd.exceptions`, which
re-exports scikit-learn's ``NotFittedError`` and ``ConvergenceWarning``) are imported on
first use, so ``import dask_dgd`` (and the ``dask-dgd`` command's parser) stays cheap.
"""

import importlib

__version__ = "0.1.0"

_LAZY = {
    "exceptions": "dask_dgd.exceptions",
    "CheckpointError": "dask_dgd.exceptions",
    "ConvergenceWarning": "dask_dgd.exceptions",
    "DivergenceError": "dask_dgd.exceptions",
    "InputError": "dask_dgd.exceptions",
    "NotFittedError": "dask_dgd.exceptions",
    "ParameterError": "dask_dgd.exceptions",
    "LinearRegression": "dask_dgd.linear_model",
    "LogisticRegression": "dask_dgd.linear_model",
    "PoissonRegressor": "dask_dgd.linear_model",
    "GammaRegressor": "dask_dgd.linear_model",
    "TweedieRegressor": "dask_dgd.linear_model",
    "NegativeBinomialRegressor": "dask_dgd.linear_model",
    "BinomialRegressor": "dask_dgd.linear_model",
    "ElasticNetCV": "dask_dgd.linear_model",
    "FeatureHasher": "dask_dgd.hashing",
    "hashing": "dask_dgd.hashing",
    "LogisticRegressionCV": "dask_dgd.linear_model",
    "PoissonRegressorCV": "dask_dgd.linear_model",
    "GammaRegressorCV": "dask_dgd.linear_model",
    "TweedieRegressorCV": "dask_dgd.linear_model",
    "NegativeBinomialRegressorCV": "dask_dgd.linear_model",
    "BinomialRegressorCV": "dask_dgd.linear_model",
    "MatrixFactorization": "dask_dgd.recommender",
    "ImplicitMatrixFactorization": "dask_dgd.recommender",
    "recommender": "dask_dgd.recommender",
    "climate": "dask_dgd.climate",
    "callbacks": "dask_dgd.callbacks",
    "ClimateRegressor": "dask_dgd.climate",
    "datasets": "dask_dgd.datasets",
    "linear_model": "dask_dgd.linear_model",
    "losses": "dask_dgd.losses",
    "optim": "dask_dgd.optim",
    "testing": "dask_dgd.testing",
    "rebalance": "dask_dgd._engine.data.ingest",
    "train": "dask_dgd._engine.train",
    "FitResult": "dask_dgd._engine.train",
    "compression": "dask_dgd.compression",
    "communication_report": "dask_dgd.diagnostics",
    "performance_report": "dask_dgd.diagnostics",
    "plot_history": "dask_dgd.diagnostics",
    "load": "dask_dgd.persistence",
    "save": "dask_dgd.persistence",
    "persistence": "dask_dgd.persistence",
}

__all__ = [
    "BinomialRegressor",
    "BinomialRegressorCV",
    "CheckpointError",
    "ClimateRegressor",
    "ConvergenceWarning",
    "DivergenceError",
    "ElasticNetCV",
    "FeatureHasher",
    "FitResult",
    "GammaRegressor",
    "GammaRegressorCV",
    "ImplicitMatrixFactorization",
    "InputError",
    "LinearRegression",
    "LogisticRegression",
    "LogisticRegressionCV",
    "MatrixFactorization",
    "NegativeBinomialRegressor",
    "NegativeBinomialRegressorCV",
    "NotFittedError",
    "ParameterError",
    "PoissonRegressor",
    "PoissonRegressorCV",
    "TweedieRegressor",
    "TweedieRegressorCV",
    "__version__",
    "callbacks",
    "climate",
    "communication_report",
    "compression",
    "datasets",
    "exceptions",
    "hashing",
    "linear_model",
    "load",
    "losses",
    "optim",
    "performance_report",
    "persistence",
    "plot_history",
    "rebalance",
    "recommender",
    "save",
    "testing",
    "train",
]


def __getattr__(name):
    if name in _LAZY:
        module = importlib.import_module(_LAZY[name])
        # a name the module defines (train in dask_dgd._engine.train), else the module
        value = getattr(module, name) if hasattr(module, name) else module
        globals()[name] = value
        return value
    raise AttributeError(f"module 'dask_dgd' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
