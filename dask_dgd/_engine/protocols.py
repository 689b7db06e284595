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

__all__ = [
    "AsyncCoordinator",
    "ColumnScales",
    "CurvatureObjective",
    "FitContext",
    "GroupedShards",
    "LocalParameters",
    "ShardedSteps",
    "StepOutcome",
    "StepSource",
    "TrainingObjective",
]


@runtime_checkable
class TrainingObjective(Protocol):
    """What the engine trains.  Worker side (pickled into every step request):
    :meth:`group_sums`, :meth:`grad_template`, :meth:`dense_grad`; the rest is the
    driver's."""

    has_local: bool
    hint: str  # the remedy named in divergence messages
    tol_on_objective: bool  # tol bounds the objective's change per epoch (else the gradient mapping)
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


# ------------------------------------------------------------------------------------
# What the parts of the engine know of each other.  A module names the part it uses by
# one of these protocols rather than by the class that implements it, so the types run
# one way, as the imports do (the structure check counts annotation-only imports too).
# Members typed ``Any`` are the engine's concrete classes, described in words.


@runtime_checkable
class FitContext(Protocol):
    """What the solvers, the modes and the loop know of the fit they run
    (:class:`~.train.Context` is the one implementation)."""

    shards: Any  # the ShardSet: blocks, groups, the collective, the executor
    objective: TrainingObjective
    source: Any  # the StepSource: SyncSource, or ShardedSource with sharded parameters
    monitor: Any  # the Monitor: records to the history, the bar, callbacks
    batching: Any  # how mini-batches are drawn (steps_per_epoch, draw(step)); None: full batch
    compressor: Any  # the Compressor, or None
    checkpoint: Any  # the Checkpointer, or None
    max_iter: int
    tol: float
    learning_rate: str
    on_divergence: str
    n_iter_no_change: int
    validator: Any  # early stopping's Validator, or None
    keeps_group_memory: bool
    seed: tuple
    batch_size: int | None
    sparse_params: bool
    stops: Any  # the fit's StopRules (max_iter, max_time)
    tol_from_start: bool  # the gradient bound relative to the start's (see .stopping.gradient_tol)

    def reseed(self, seed: Any) -> None: ...


@runtime_checkable
class StepOutcome(Protocol):
    """What one step of a solver produced, as the stop rules read it
    (:class:`~.solvers.base.Outcome`)."""

    records: list
    accepted: bool
    stop: Any  # a stopping.Stop, or None

    @property
    def record(self) -> Any: ...


@runtime_checkable
class GroupedShards(Protocol):
    """The shard set as the collective and the skew balancer see it
    (:class:`~.data.shards.ShardSet`): blocks in groups on workers."""

    handles: Any  # the groups' shards (futures on a cluster); the collective regroups them
    groups: Any
    workers: Any

    def _call_token(self) -> str: ...  # a fresh token for one call's task keys

    @property
    def executor(self) -> Any: ...
    @property
    def collective(self) -> Any: ...
    @property
    def block_rows(self) -> Any: ...
    @property
    def block_costs(self) -> Any: ...
    @property
    def skew_report(self) -> Any: ...
    @property
    def recoveries(self) -> Any: ...
    @property
    def token(self) -> Any: ...
    @property
    def n_groups(self) -> int: ...
    @property
    def n_blocks(self) -> int: ...

    def placement(self) -> list: ...


@runtime_checkable
class ShardedSteps(Protocol):
    """What a validation pass over sharded parameters needs of the fit's step source
    (:class:`~.sharded.driver.ShardedSource`): the parameters' version, how the groups
    reach the owners, and which owner holds which columns."""

    version: int
    exchange: Any
    layout: Any


@runtime_checkable
class ColumnScales(Protocol):
    """A change of variables by columns (:class:`~.scaling.ColumnScaling`): each
    column's centre and scale."""

    @property
    def mean(self) -> Any: ...
    @property
    def scale(self) -> Any: ...


@runtime_checkable
class AsyncCoordinator(Protocol):
    """How a sharded asynchronous loop reaches its coordinator (the server actor's link,
    or the in-process server): one exchange per pull or push."""

    def exchange(self, g: int, msg: Any) -> Any: ...
