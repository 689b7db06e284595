"""Pure objectives: pointwise losses, linear block objective, elastic-net penalty.

Nothing here imports dask: every function works on one in-memory block (NumPy, CuPy,
any array-API namespace, or a SciPy/CuPy sparse matrix) and returns sums that the
engine adds across blocks.
"""

from ._families import HalfGamma, HalfNegativeBinomial, HalfTweedie
from ._linear import (
    SLICE_BYTES,
    LinearObjective,
    lipschitz_bound,
    objective_hessian,
    objective_value_gradient,
)
from ._penalty import Penalty
from ._pointwise import BinaryLogistic, HalfPoisson, HalfSquaredError, MultinomialLogistic

__all__ = [
    "SLICE_BYTES",
    "BinaryLogistic",
    "HalfGamma",
    "HalfNegativeBinomial",
    "HalfPoisson",
    "HalfSquaredError",
    "HalfTweedie",
    "LinearObjective",
    "MultinomialLogistic",
    "Penalty",
    "lipschitz_bound",
    "objective_hessian",
    "objective_value_gradient",
]
