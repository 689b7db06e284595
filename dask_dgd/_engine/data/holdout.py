"""Early stopping on a held-out validation set, split where the data lives.

Every block keeps its own rows: a row is held out when a counter-based uniform draw
(:mod:`dask_dgd._random`) of the seed and the row's position in the whole input falls
below ``validation_fraction``, the rule of the cross-validation folds
(:func:`dask_dgd.losses._path.fold_ids`).  The split is thus a function of the seed and
the rows' order only, not of the chunking, the rebalancing or the workers; nothing moves
between workers, and the training and validation shard sets have the same groups and
workers.

The validation *loss* (the model's mean loss over the validation rows, without the
penalty) is reduced like a gradient step, where the rows live.  A *scoring* other than
the loss (a scikit-learn scorer name or a ``scorer(estimator, X, y)`` callable) needs
the rows themselves: they are gathered to the driver once, and each evaluation scores a
copy of the estimator holding the current parameters.
"""

from __future__ import annotations

import copy
import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from ..._backend import take_rows, to_numpy
from ..._random import keyed, mix64, uniform
from ...exceptions import InputError
from ..objective import LinearTraining
from ..runtime.group_steps import StepRequest, group_step
from .blocks import Block, Shard, shard_sample

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import TypeVar

    import numpy.typing as npt
    from sklearn.base import BaseEstimator

    from ...losses import LinearObjective
    from ..protocols import ShardedSteps
    from .shards import ShardSet

    E = TypeVar("E", bound=BaseEstimator)

__all__ = ["holdout_mask", "shard_holdout", "split_validation", "Validator"]

#: Stream tag of the validation split's draws (apart from the mini-batch draws).
_SPLIT_TAG = 104729


def _split_key(seed: Iterable[int]) -> np.uint64:
    """One uint64 key of the seed tuple (a random state's entropy and a stream)."""
    key = _SPLIT_TAG
    for part in seed:
        key = keyed(key, int(part))
    return np.uint64(key)


def holdout_mask(start: int, n_rows: int, seed: Iterable[int], fraction: float) -> npt.NDArray[np.bool_]:
    """Which of the ``n_rows`` rows from row ``start`` of the input are held out (bool
    array): a row's draw depends on the seed and its position only."""
    rows = np.arange(int(start), int(start) + int(n_rows), dtype=np.uint64)
    with np.errstate(over="ignore"):
        return uniform(mix64(_split_key(seed) ^ mix64(rows))) < fraction


def _take(a: Any, rows: npt.NDArray[np.bool_]) -> Any:
    return None if a is None else take_rows(a, rows)


def shard_holdout(shard: Shard, seed: Iterable[int], fraction: float, validation: bool,
                  starts: Sequence[int]) -> Shard:
    """The shard's held-out rows (``validation=True``) or the others (worker side);
    ``starts[b]``: the first row of block ``b`` in the input."""
    blocks = []
    for b in shard.blocks:
        rows = holdout_mask(starts[b.index], b.n_rows, seed, fraction)
        if not validation:
            rows = ~rows
        blocks.append(Block(b.index, _take(b.X, rows), _take(b.y, rows), _take(b.sample_weight, rows)))
    return Shard(tuple(blocks))


def shard_block_rows(shard: Shard) -> list[tuple[int, int]]:
    return [(b.index, b.n_rows) for b in shard.blocks]


def _with_rows(shards: ShardSet) -> ShardSet:
    rows = np.zeros(len(shards.block_rows), dtype=np.int64)
    for group in shards.map_gather(shard_block_rows, name="dgd-split-rows"):
        for index, n in group:
            rows[index] = n
    scale = np.divide(rows, np.maximum(shards.block_rows, 1))
    shards.block_costs = shards.block_costs * scale
    shards.block_rows = rows
    return shards


def split_validation(shards: ShardSet, seed: Iterable[int], fraction: float) -> tuple[ShardSet, ShardSet]:
    """``(train, validation)`` shard sets: each block's rows split by :func:`holdout_mask`."""
    starts = tuple(int(v) for v in np.concatenate([[0], np.cumsum(shards.block_rows)[:-1]]))
    # each its own token: the runners (actors) of a shard set are keyed by it, and the
    # training and validation sets must not share them
    train = _with_rows(shards.transform(shard_holdout, tuple(seed), fraction, False, starts, name="dgd-split-train",
                                        token_suffix="t"))
    val = _with_rows(shards.transform(shard_holdout, tuple(seed), fraction, True, starts,
                                      name="dgd-split-validation", token_suffix="v"))
    if val.n_rows == 0 or train.n_rows == 0:
        empty = "validation" if val.n_rows == 0 else "training"
        raise InputError(
            f"validation_fraction={fraction} of {shards.n_rows} rows leaves the {empty} set empty; "
            "use more data, a larger or smaller validation_fraction, or early_stopping=False"
        )
    return train, val


class Validator:
    """Scores parameters on the validation shards.

    ``scorer`` None: the mean validation loss (lower is better; the score is minus it).
    Otherwise ``scorer(estimator, X, y)`` (higher is better) on the gathered rows, with
    ``make_estimator(params)`` giving an estimator that holds ``params``.
    """

    def __init__(self, shards: ShardSet, objective: LinearObjective, split_every: int,
                 scorer: Callable[..., float] | None = None,
                 make_estimator: Callable[[npt.NDArray[np.float64]], Any] | None = None,
                 decode_y: Callable[[npt.NDArray[Any]], npt.NDArray[Any]] | None = None,
                 columns: npt.ArrayLike | None = None) -> None:
        self.shards = shards
        self.objective = objective
        self.training = LinearTraining(objective)
        self.split_every = split_every
        self.scorer = scorer
        self.make_estimator = make_estimator
        self.n_evaluations = 0
        self.data: tuple[Any, npt.NDArray[Any], npt.NDArray[np.float64] | None] | None = None
        if scorer is not None:
            X, y, w = _gather_rows(shards)
            if columns is not None:  # fitted on a DataFrame: score one, with its column names
                import pandas as pd

                X = (pd.DataFrame.sparse.from_spmatrix(X, columns=columns) if sp.issparse(X)
                     else pd.DataFrame(X, columns=columns))
            self.data = (X, y if decode_y is None else decode_y(y), w)

    def evaluate(self, params: npt.NDArray[np.float64]) -> dict[str, float]:
        """``{"val_loss", "val_score", "val_time"}`` at ``params`` (``val_time``: the
        evaluation's wall seconds, so that a fit's time can be read without it)."""
        t0 = time.perf_counter()
        return {**self._evaluate(params), "val_time": time.perf_counter() - t0}

    def _evaluate(self, params: npt.NDArray[np.float64]) -> dict[str, float]:
        self.n_evaluations += 1
        partial = self.shards.collective.reduce(
            group_step, self.training, StepRequest(np.asarray(params, dtype=np.float64)),
            split_every=self.split_every, size=self.objective.n_params, name=f"validation-{self.n_evaluations}",
            stateless=True,
        )
        loss = partial.loss_sum / partial.weight_sum if partial.weight_sum > 0 else math.nan
        if self.scorer is None:
            return {"val_loss": float(loss), "val_score": -float(loss)}
        # (a scorer comes with the gathered rows and make_estimator: see __init__)
        X, y, w = self.data  # type: ignore[misc]
        est = self.make_estimator(params)  # type: ignore[misc]
        score = self.scorer(est, X, y) if w is None else self.scorer(est, X, y, sample_weight=w)
        return {"val_loss": float(loss), "val_score": float(score)}

    def evaluate_sharded(self, source: ShardedSteps) -> dict[str, float]:
        """``{"val_loss", "val_score", "val_time"}`` at the parameters a
        :class:`~..sharded.driver.ShardedSource` evaluated last: each validation group
        pulls the coefficients its rows touch from their owners (the validation loss
        only: a scorer needs the coefficients on the driver)."""
        from ..sharded.params import ValidationRequest, sharded_validate

        t0 = time.perf_counter()
        self.n_evaluations += 1
        partial = self.shards.collective.reduce(
            sharded_validate, self.training, ValidationRequest(source.version, source.exchange, source.layout),
            split_every=self.split_every, size=0, name=f"validation-{self.n_evaluations}")
        loss = partial.loss_sum / partial.weight_sum if partial.weight_sum > 0 else math.nan
        return {"val_loss": float(loss), "val_score": -float(loss), "val_time": time.perf_counter() - t0}


def _gather_rows(shards: ShardSet) -> tuple[Any, npt.NDArray[Any], npt.NDArray[np.float64] | None]:
    """Every validation row on the driver, in block order: ``(X, y, weights or None)``."""
    pieces = sorted(
        (p for group in shards.map_gather(shard_sample, shards.block_rows, name="dgd-validation-gather")
         for p in group),
        key=lambda p: p[0],
    )
    Xs = [p[1] for p in pieces]
    X = sp.vstack(Xs, format="csr") if Xs and sp.issparse(Xs[0]) else np.concatenate([to_numpy(x) for x in Xs])
    y = np.concatenate([to_numpy(p[2]) for p in pieces])
    w = np.concatenate([to_numpy(p[3]) for p in pieces])
    return X, y, (None if np.all(w == 1.0) else w)


def snapshot(estimator: E, objective: LinearObjective, params: npt.ArrayLike) -> E:
    """A shallow copy of ``estimator`` whose coefficients are ``params``."""
    est = copy.copy(estimator)
    est.client = None
    coef, intercept = objective.unpack(np.asarray(params, dtype=np.float64))
    est._set_coef(coef, intercept)
    return est
