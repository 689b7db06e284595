"""Pure optimizers: ``init``/``update`` on parameter arrays, and learning-rate schedules.

Optimizers are optax-style frozen dataclasses: ``state = opt.init(params)``, then
``updates, state = opt.update(grads, state, params)`` and ``params = params + updates``.
Nothing here imports dask; every array operation uses the namespace of ``params``, so
NumPy and CuPy parameters work alike.
"""

from ._base import FirstOrderOptimizer
from ._first_order import (
    SGD,
    Adagrad,
    AdagradState,
    Adam,
    AdamState,
    AdamW,
    NormalizedAdagrad,
    RMSprop,
    RMSpropState,
    SGDState,
    adagrad,
    adam,
    adamw,
    rmsprop,
    sgd,
)
from ._lbfgs import LBFGS, lbfgs, lbfgs_direction
from ._linesearch import strong_wolfe
from ._registry import OPTIMIZERS, get_optimizer
from ._schedules import Constant, CosineDecay, InverseScaling, InverseTime, Schedule, StepDecay, as_schedule

__all__ = [
    "LBFGS",
    "OPTIMIZERS",
    "SGD",
    "Adagrad",
    "AdagradState",
    "Adam",
    "AdamState",
    "AdamW",
    "Constant",
    "CosineDecay",
    "FirstOrderOptimizer",
    "InverseScaling",
    "InverseTime",
    "NormalizedAdagrad",
    "RMSprop",
    "RMSpropState",
    "SGDState",
    "Schedule",
    "StepDecay",
    "adagrad",
    "adam",
    "adamw",
    "as_schedule",
    "get_optimizer",
    "lbfgs",
    "lbfgs_direction",
    "rmsprop",
    "sgd",
    "strong_wolfe",
]
