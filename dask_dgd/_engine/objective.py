"""Training objectives: what the engine trains, family by family.

A training objective tells the engine everything model-specific; the loop, the modes,
the reduction and the update rule know nothing else about the model.  The protocol
(in code: :class:`.protocols.TrainingObjective`, :class:`.protocols.LocalParameters`,
checked over every implementation by the tests):

Worker side (pickled into every step request; keep it small):

- ``group_sums(shard, params, aux, draw, local, memory) -> ({block: BlockSums}, local_grad)``:
  the sums of each of the group's blocks at ``params`` (all rows, or the rows of
  ``draw``, a :class:`~.runtime.group_steps.Draw`), and the gradient of the group's local
  parameters ``local`` (None when the model has none); ``memory`` is a dict the
  objective may keep buffers in between steps;
- ``grad_template()``: an array shaped like the gradient in its natural form (the
  parameter matrix), for compressors; ``dense_grad(grad)``: a block gradient as a
  dense vector;
- ``local_init(shard, init)``, ``local_size(params)``, ``local_export(params, state)``:
  models with local parameters (``has_local``) only.

Driver side:

- ``n_params``, ``has_local``, ``hint`` (the remedy named in divergence messages),
  ``penalty`` (``decay_mask``, ``has_l1``, ``prox(params, step)``; see
  :class:`~.update.UpdateRule`);
- ``step_aux(params)``: what a step sends besides the parameters (None);
- ``finish(partial, params) -> (value, grad)``: the smooth objective and its gradient
  from the reduced sums; ``l1_value(params)``: the non-smooth part;
- ``record_extras(partial)``: fields the model adds to each step record;
- ``batching(shards, batch_size, seed)``: how mini-batches are drawn (``steps_per_epoch``,
  ``draw(step)``, ``work(step)``);
- ``lipschitz(shards, params)``: a curvature estimate for ``learning_rate="auto"``;
- ``check_data(shards)``: name the block whose data made the sums non-finite.

:class:`LinearTraining` is the linear models' objective, :class:`PathTraining` a stacked
cross-validated path's (every fold and penalty at once, :mod:`dask_dgd.losses._path`);
matrix factorization's is :class:`dask_dgd.recommender._objective.FactorizationTraining`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, cast

import array_api_compat
import numpy as np
import scipy.sparse as sp

from .._backend import is_sparse, to_numpy
from ..exceptions import ParameterError
from ..losses import LinearObjective, MultinomialLogistic, Penalty, lipschitz_bound
from ..losses._path import PathObjective, PathPenalty
from .data.blocks import _block_error, shard_check_finite, shard_sample
from .runtime.group_steps import BlockSums, Draw

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy.typing as npt

    from .data.blocks import Shard
    from .data.shards import ShardSet
    from .runtime.reduce import Partial

__all__ = ["BoundPenalty", "LinearTraining", "RowBatches", "batch_allocation", "gather_sample"]

#: Rows sampled (in total, over all shards) to estimate the Lipschitz constant.
LIPSCHITZ_SAMPLE_ROWS = 8192


@dataclass(frozen=True)
class BoundPenalty:
    """An elastic-net :class:`~dask_dgd.losses.Penalty` bound to a linear objective's
    parameter layout (what :class:`~.update.UpdateRule` needs)."""

    penalty: Penalty
    objective: LinearObjective

    @property
    def has_l1(self) -> bool:
        return self.penalty.has_l1

    @cached_property
    def decay_mask(self) -> Any:
        return self.penalty.mask(self.objective)

    def prox(self, params: np.ndarray, step: float) -> np.ndarray:
        return self.penalty.prox(params, step, self.objective)


def batch_allocation(block_rows: Sequence[int] | npt.NDArray[np.integer], batch_size: int,
                     seed: Sequence[int]) -> npt.NDArray[np.int64]:
    """Rows each block contributes to one global batch of ``batch_size`` rows.

    Each block gets the integer part of its proportional share; the remaining rows go
    to blocks drawn without replacement with probability proportional to the fractional
    parts, by a generator seeded with ``seed`` (random state and step).  Every row thus
    has the same chance to be in a batch, whatever the block sizes, and the allocation
    depends only on the block sizes and the seed.
    """
    rows = np.asarray(block_rows, dtype=np.int64)
    total = rows.sum()
    if batch_size >= total:
        return rows.copy()
    exact = rows * (batch_size / total)
    take = np.floor(exact).astype(np.int64)
    short = int(batch_size - take.sum())
    if short:
        frac = exact - take
        rng = np.random.default_rng(list(seed))
        take[rng.choice(len(rows), size=short, replace=False, p=frac / frac.sum())] += 1
    return take


@dataclass(frozen=True)
class RowBatches:
    """Mini-batches of ``batch_size`` rows: each block gives its share
    (:func:`batch_allocation`), drawn by a generator seeded with (seed, step, block)."""

    block_rows: np.ndarray
    block_costs: np.ndarray
    batch_size: int
    seed: tuple
    full_batch: ClassVar[bool] = False  # every step draws a share of the rows

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(int(np.sum(self.block_rows)) / self.batch_size)

    def draw(self, step: int) -> Draw:
        take = batch_allocation(self.block_rows, self.batch_size, (*self.seed, step))
        return Draw(tuple(self.seed), int(step), take)

    def group_draw(self, shard: Shard, g: int, clock: int) -> Draw:
        """Asynchronous training: group ``g``'s batch at its ``clock``-th step, its
        share of a global batch allocated over its blocks (None: all its rows)."""
        rows = [b.n_rows for b in shard.blocks]
        group_batch = max(1, round(self.batch_size * sum(rows) / int(np.sum(self.block_rows))))
        if group_batch >= sum(rows):
            return Draw(tuple(self.seed), int(clock), None)
        alloc = batch_allocation(rows, group_batch, (*self.seed, g, clock))
        return Draw(tuple(self.seed), int(clock), {b.index: int(k) for b, k in zip(shard.blocks, alloc)})

    @staticmethod
    def draw_rows(shard: Shard, draw: Draw | None, partial: Partial) -> int:
        """Rows a group's step used (the server counts epochs with them)."""
        if draw is None or draw.take is None:
            return shard.n_rows
        take = draw.take
        return int(sum(take.values()) if isinstance(take, dict) else sum(take[b.index] for b in shard.blocks))


class _Placement:
    """The step's parameters moved to each device of a shard's blocks, once per device
    (NumPy and SciPy blocks read the host parameters directly)."""

    def __init__(self, objective: LinearObjective, params: np.ndarray) -> None:
        self.objective, self.params = objective, params
        self.moved: dict[tuple[type, str], Any] = {}

    def __call__(self, X: Any) -> Any:
        if isinstance(X, np.ndarray) or is_sparse(X):
            return None
        key = (type(X), str(array_api_compat.device(X)))
        if key not in self.moved:
            self.moved[key] = self.objective.place(self.params, X)
        return self.moved[key]


def gather_sample(shards: ShardSet, n_rows: int) -> tuple[Any, np.ndarray, np.ndarray] | None:
    """About ``n_rows`` evenly spaced rows of the data on the driver: ``(X, y, weights)``.

    Each block gives rows in proportion to its size and the pieces are put in block
    order, so the sample depends only on the data and its chunking, never on
    placement.  The weights (sample weights, or ones) are scaled by total rows / sampled
    rows so that weighted means over the sample estimate those over the data.  None if
    the data has no rows.  ``X`` is read only: a sample that is one dense block taken
    whole is that block's array, not a copy of it.
    """
    rows = shards.block_rows
    total = int(rows.sum())
    if total == 0 or n_rows <= 0:
        return None
    take = np.ceil(np.minimum(n_rows, total) * rows / total).astype(np.int64)
    pieces = sorted(
        (p for group in shards.map_gather(shard_sample, take, name="dgd-sample") for p in group),
        key=lambda p: p[0],
    )
    if not pieces:
        return None
    if sp.issparse(pieces[0][1]):
        X = sp.vstack([p[1] for p in pieces], format="csr")
    elif len(pieces) == 1:  # one dense block: its rows as they are (the callers only read them)
        X = pieces[0][1]
    else:
        X = np.concatenate([p[1] for p in pieces])
    y = np.concatenate([p[2] for p in pieces])
    w = np.concatenate([p[3] for p in pieces])
    return X, y, w * (total / len(w))


class _Linear:
    """What the linear training objectives share: no local parameters, the remedy a
    divergence message names, a tolerance on the gradient mapping, and as many
    parameters as their linear objective."""

    objective: LinearObjective | PathObjective

    has_local = False
    hint = "scale the features (e.g. StandardScaler)"
    tol_on_objective = False  # tol bounds the proximal gradient, not the objective's change

    @property
    def n_params(self) -> int:
        return self.objective.n_params


@dataclass(frozen=True)
class LinearTraining(_Linear):
    """The training objective of a linear model: a
    :class:`~dask_dgd.losses.LinearObjective` and its elastic-net
    :class:`~dask_dgd.losses.Penalty` (see the module docstring for the protocol)."""

    objective: LinearObjective
    penalty_spec: Penalty = Penalty()


    @cached_property
    def penalty(self) -> BoundPenalty:
        return BoundPenalty(self.penalty_spec, self.objective)

    # ------------------------------------------------------------- worker side
    def group_sums(self, shard: Shard, params: np.ndarray, aux: None, draw: Draw | None, local: None,
                   memory: dict | None = None) -> tuple[dict[int, BlockSums], None]:
        obj = self.objective
        placed = _Placement(obj, params)
        sums: dict[int, BlockSums] = {}
        for b in shard.blocks:
            rows = None
            if draw is not None and draw.take is not None:
                k = int(draw.take[b.index])
                if k == 0:
                    sums[b.index] = BlockSums(0.0, np.zeros(obj.n_params), 0.0, {})
                    continue
                rng = np.random.default_rng([*draw.seed, draw.step, b.index])
                rows = np.sort(rng.choice(b.n_rows, size=k, replace=False))
            try:
                with np.errstate(all="ignore"):  # non-finite sums are handled by the engine
                    loss, grad, weight = obj.block_sums(params, b.X, b.y, b.sample_weight, rows=rows,
                                                        placed=placed(b.X))
            except Exception as err:
                raise _block_error(err, b) from err
            sums[b.index] = BlockSums(loss, grad, weight, {})
        return sums, None

    def grad_template(self) -> np.ndarray:
        return np.zeros((self.objective.n_features + self.objective.fit_intercept, self.objective.n_outputs))

    @staticmethod
    def dense_grad(grad: Any) -> np.ndarray:
        return to_numpy(grad)

    # ------------------------------------------------------------- driver side
    def step_aux(self, params: np.ndarray) -> None:
        return None

    def finish(self, partial: Partial, params: np.ndarray) -> tuple[float, np.ndarray]:
        """Mean loss plus the smooth penalty, and its gradient.  A mini-batch can draw
        only zero-weight rows: it then carries no loss (the whole data's total weight is
        checked to be positive before training)."""
        pen, pen_grad = self.penalty_spec.smooth_value_gradient(params, self.objective)
        if partial.weight_sum <= 0:
            return pen, pen_grad
        grad_sum = cast("np.ndarray", partial.grad_sum)  # (the reduced sums: dense)
        return partial.loss_sum / partial.weight_sum + pen, grad_sum / partial.weight_sum + pen_grad

    def l1_value(self, params: np.ndarray) -> float:
        return self.penalty_spec.l1_value(params, self.objective)

    def record_extras(self, partial: Partial) -> dict[str, Any]:
        return {}

    def batching(self, shards: ShardSet, batch_size: int | None, seed: tuple[int, ...]) -> RowBatches | None:
        if batch_size is None or batch_size >= shards.n_rows:
            return None
        return RowBatches(shards.block_rows, shards.block_costs, int(batch_size), tuple(seed))

    def lipschitz(self, shards: ShardSet, params: np.ndarray, scaling: Any = None) -> float:
        """Lipschitz estimate of the mean-loss gradient from an even sample of rows (with
        ``scaling``, a :class:`~.scaling.ColumnScaling`: in its coordinates, ``params``
        scaled)."""
        sample = gather_sample(shards, LIPSCHITZ_SAMPLE_ROWS)
        if sample is None:
            return 1.0
        X, y, w = sample
        l2 = self.penalty_spec.l2_strength
        if scaling is not None:
            X, l2 = scaling.columns(X), scaling.largest_ridge(l2)
        L = lipschitz_bound(self.objective, X, w, alpha_l2=l2, params=params, y=y)
        return float(L) if L > 0 and math.isfinite(L) else 1.0

    def check_data(self, shards: ShardSet) -> None:
        """Raise InputError naming the first block of X with NaN or infinity (if any)."""
        shards.map_gather(shard_check_finite, name="dgd-check-finite")


@dataclass(frozen=True)
class PathTraining(_Linear):
    """The engine's training objective of a stacked path (see the module docstring).

    The objective is :math:`\\sum_k \\big(L_k / T_k + P_k(w_k)\\big)`, :math:`T_k` the
    training weight of column :math:`k`; full batch only.  With the multinomial loss and
    an L1 penalty, the penalty re-centres each feature's class coefficients after every
    proximal step (:class:`PathPenalty`'s ``recenter``).
    """

    objective: PathObjective
    penalty: PathPenalty

    def __post_init__(self) -> None:
        obj, pen = self.objective, self.penalty
        if isinstance(obj.loss, MultinomialLogistic) and pen.has_l1 and not pen.recenter:
            pen = replace(pen, recenter=True)  # see PathPenalty
            object.__setattr__(self, "penalty", pen)
        if (len(pen.l1), pen.n_outputs, pen.n_features, pen.fit_intercept) != \
                (obj.n_columns, obj.n_outputs, obj.n_features, obj.fit_intercept):
            raise ParameterError(
                f"the penalty ({len(pen.l1)} columns of {pen.n_outputs} outputs, {pen.n_features} features) "
                f"does not fit the path ({obj.n_columns} columns of {obj.n_outputs}, {obj.n_features} features)"
            )


    # ------------------------------------------------------------- worker side
    def group_sums(self, shard: Shard, params: np.ndarray, aux: None, draw: Draw | None, local: None,
                   memory: dict | None = None) -> tuple[dict[int, BlockSums], None]:
        sums: dict[int, BlockSums] = {}
        for b in shard.blocks:
            try:
                with np.errstate(all="ignore"):  # non-finite sums are handled by the engine
                    loss, grad, fold_w = self.objective.block_sums(params, b.X, b.y, b.sample_weight, b.index)
            except Exception as err:
                raise _block_error(err, b) from err
            sums[b.index] = BlockSums(float(loss.sum()), grad, float(fold_w.sum()),
                                      {"column_loss": loss, "fold_weight": fold_w})
        return sums, None

    def grad_template(self) -> np.ndarray:
        obj = self.objective
        return np.zeros((obj.n_features + obj.fit_intercept, obj.n_columns * obj.n_outputs))

    @staticmethod
    def dense_grad(grad: Any) -> np.ndarray:
        return to_numpy(grad)

    # ------------------------------------------------------------- driver side
    def step_aux(self, params: np.ndarray) -> None:
        return None

    def train_weights(self, fold_weight: npt.ArrayLike) -> np.ndarray:
        """Training weight of each column from the folds' weights."""
        return float(np.sum(fold_weight)) - np.asarray(fold_weight)[list(self.objective.column_folds)]

    def finish(self, partial: Partial, params: np.ndarray) -> tuple[float, np.ndarray]:
        T = self.train_weights(partial.extras["fold_weight"])
        T = np.where(T > 0, T, np.inf)
        pen, pen_grad = self.penalty.smooth_value_gradient(params)
        value = float(np.sum(partial.extras["column_loss"] / T)) + pen
        grad = (np.asarray(partial.grad_sum).reshape(-1, len(T), self.objective.n_outputs) / T[:, None]).ravel()
        grad = grad + pen_grad
        return value, grad

    def l1_value(self, params: np.ndarray) -> float:
        return self.penalty.l1_value(params)

    def record_extras(self, partial: Partial) -> dict[str, Any]:
        return {}

    def batching(self, shards: ShardSet, batch_size: int | None, seed: tuple[int, ...]) -> None:
        if batch_size is not None:
            raise ParameterError("a cross-validated path is trained full batch; batch_size must be None")
        return None

    def lipschitz(self, shards: ShardSet, params: np.ndarray, scaling: Any = None) -> float:
        """Lipschitz estimate of one column's mean-loss gradient (all columns share the
        rows' curvature; each trains on most of them) plus the largest L2 strength (with
        ``scaling``, a :class:`~.scaling.ColumnScaling`: in its coordinates, ``params``
        scaled)."""
        sample = gather_sample(shards, LIPSCHITZ_SAMPLE_ROWS)
        if sample is None:
            return 1.0
        X, _, w = sample
        l2 = max(self.penalty.l2)
        if scaling is not None:
            X, l2 = scaling.columns(X), scaling.largest_ridge(l2)
        obj = self.objective
        single = LinearObjective(obj.loss, obj.n_features, fit_intercept=obj.fit_intercept, offset=obj.offset)
        start = None
        if obj.loss.curvature_bound is None:  # type: ignore[attr-defined]  # Poisson: the curvature at the largest column
            coef, icpt = obj.unpack(params)
            size = np.abs(coef).reshape(obj.n_features, obj.n_columns, -1).sum(axis=(0, 2))
            k = int(np.argmax(size + np.abs(icpt).reshape(obj.n_columns, -1).sum(axis=1)))
            start = single.pack(coef[:, k], icpt[k] if obj.fit_intercept else None)
        L = lipschitz_bound(single, X, w, alpha_l2=l2, params=start, y=sample[1])
        return float(L) if L > 0 and np.isfinite(L) else 1.0

    def check_data(self, shards: ShardSet) -> None:
        shards.map_gather(shard_check_finite, name="dgd-check-finite")
