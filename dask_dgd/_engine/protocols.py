"""The engine's protocols in code: what a training objective, a model with local
parameters, an objective that carries its curvature, and a step source offer the
solvers and the modes.

They are :class:`typing.Protocol` classes (checked at runtime, ``isinstance``, by the
tests over every implementation: :class:`~.objective.LinearTraining`,
:class:`~.objective.PathTraining`,
:class:`~dask_dgd.recommender._objective.FactorizationTraining`, and the wrappers that
add curvature or scaled coordinates, :class:`~.solvers.newton.HessianTraining`,
:class:`~.solvers.cd_path.PathHessianTraining`, :class:`~.scaling.ScaledTraining`).  The module
:mod:`.objective` says what each member means; a new model family implements
:class:`TrainingObjective` (and :class:`LocalParameters` if some of its parameters live
with the groups), nothing else.
"""

from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["CurvatureObjective", "LocalParameters", "StepSource", "TrainingObjective"]


@runtime_checkable
class TrainingObjective(Protocol):
    """What the engine trains.  Worker side (pickled into every step request):
    :meth:`group_sums`, :meth:`grad_template`, :meth:`dense_grad`; the rest is the
    driver's."""

    has_local: bool
    hint: str  # the remedy named in divergence messages
    @property
    def penalty(self) -> Any:
        """decay_mask, has_l1, prox(params, step): see .update.UpdateRule (read-only)."""

    @property
    def n_params(self) -> int: ...

    def group_sums(self, shard: Any, params: np.ndarray, aux: Any, draw: Any, local: Any,
                   memory: dict | None = None) -> tuple[dict, Any]:
        """``({block index: BlockSums}, local gradient or None)`` of a group's blocks."""

    def grad_template(self) -> Any:
        """An array shaped like the gradient in its natural form (for compressors)."""

    def dense_grad(self, grad: Any) -> np.ndarray:
        """A block's gradient as a dense vector."""

    def step_aux(self, params: np.ndarray) -> Any:
        """What a step sends besides the parameters (None for most)."""

    def finish(self, partial: Any, params: np.ndarray) -> tuple[float, np.ndarray]:
        """The smooth objective and its gradient from the reduced sums."""

    def l1_value(self, params: np.ndarray) -> float:
        """The non-smooth part of the objective."""

    def record_extras(self, partial: Any) -> dict:
        """Fields the model adds to each step record."""

    def batching(self, shards: Any, batch_size: int | None, seed: tuple) -> Any:
        """How mini-batches are drawn (None: full batch)."""

    def lipschitz(self, shards: Any, params: np.ndarray) -> float:
        """A curvature estimate for ``learning_rate="auto"``."""

    def check_data(self, shards: Any) -> None:
        """Name the block whose data made the sums non-finite."""


@runtime_checkable
class LocalParameters(Protocol):
    """A model some of whose parameters live with the groups (``has_local``: matrix
    factorization's users)."""

    def local_init(self, shard: Any, init: Any) -> tuple[Any, Any]: ...

    def local_size(self, params: Any) -> int: ...

    def local_export(self, shard: Any, params: Any, state: Any) -> Any: ...


@runtime_checkable
class CurvatureObjective(Protocol):
    """A training objective whose evaluations also reduce the second-order sums the
    exact solvers (Newton, coordinate descent) step with (in the partials' ``extras``):
    ``hessian_size`` floats of them per partial, which the transport budgets for."""

    @property
    def hessian_size(self) -> int: ...


@runtime_checkable
class StepSource(Protocol):
    """Where a synchronous solver's evaluations come from (:class:`.modes.sync.SyncSource`,
    :class:`.sharded.driver.ShardedSource`): one distributed evaluation per call."""

    n_steps: int

    def start(self) -> Any: ...

    def evaluate(self, params: Any = None, draw: Any = None, local: Any = None, name: str = "grad",
                 aux: Any = None) -> Any: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...
