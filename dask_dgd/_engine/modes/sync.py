"""Synchronous steps: every group's sums at the same parameters, reduced in the block tree.

:class:`SyncSource` is the step source of synchronous training (full batch or a
mini-batch draw), of the synchronous start of the local and asynchronous modes, and of
the validation passes of early stopping.  A step is one :func:`~..runtime.group_steps.group_step`
per group through the shard set's collective; the driver finishes the reduced sums
(mean loss, penalty) and measures the step (timings, bytes).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..runtime.group_steps import COMPRESSION_TAG, Downlink, LocalUpdate, StaleState, StepRequest, group_step
from ..runtime.records import Bytes, Route, Timing

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ...compression import Compressor
    from ...optim import FirstOrderOptimizer
    from ..data.shards import ShardSet
    from ..data.skew import DynamicBalancer
    from ..protocols import TrainingObjective
    from ..runtime.group_steps import Draw
    from ..runtime.reduce import Partial

__all__ = ["StepResult", "SyncSource"]

logger = logging.getLogger("dask_dgd")

#: Stream tag of the downlink compression's draws.
DOWNLINK_TAG = 31

#: Downlink compression leaves unsent at most this share of the last step's length.
DOWN_LAG = 0.5


@dataclass
class StepResult:
    """One synchronous step: the smooth objective and its gradient at ``params``."""

    step: int
    params: np.ndarray
    value: float
    grad: np.ndarray
    partial: Partial
    timing: Timing
    nbytes: Bytes
    route: Route | None = None
    local_key: int | None = None

    @property
    def finite(self) -> bool:
        return math.isfinite(self.value) and bool(np.all(np.isfinite(self.grad)))


class SyncSource:
    """Synchronous evaluations of a training objective over a shard set.

    Parameters
    ----------
    shards : ShardSet
    objective : training objective (see :mod:`..objective`)
    split_every : int
        Fan-in of the block tree.
    compressor : Compressor or None
        Gradients travel compressed, block by block, each block with its own
        error-feedback state (see :mod:`..runtime.group_steps`): the result does not depend on
        which worker holds which block.  With EF21 feedback the blocks send the changes
        of their estimates and the source keeps their sum (``estimate``); with
        ``downlink`` it sends the parameters' change against the groups' copy, which it
        keeps too (``down``).  A group whose memory is stale (a restarted runner, a
        resumed fit) makes the source sync it and repeat the step: the copy in full
        (the same values: the fit does not change), the estimates from zero.
    seed : tuple
        Seed of the compression draws.
    balancer : DynamicBalancer or None
        Told every step's compute times (moves blocks toward faster workers).
    """

    def __init__(self, shards: ShardSet, objective: TrainingObjective, *, split_every: int,
                 compressor: Compressor | None = None, seed: tuple[int, ...] = (0,),
                 balancer: DynamicBalancer | None = None) -> None:
        self.shards = shards
        self.objective = objective
        self.split_every = int(split_every)
        self.compressor = compressor
        self.seed = tuple(seed)
        self.balancer = balancer
        self.n_steps = 0
        self._data_checked = False
        self._last_end: float | None = None  # perf_counter when the previous step's result arrived
        ef21 = compressor is not None and compressor.accumulates
        #: EF21: the sum of the blocks' estimates and how many payloads are behind it
        self.estimate = np.zeros(objective.n_params) if ef21 else None
        self.ef_count = 0
        #: downlink: ``(version, params)``, the groups' copy (None: not sent yet)
        self.down: tuple[int, np.ndarray] | None = None
        self.down_state: dict[str, Any] = {}  # the downlink compressor's own state (warm-up count, ...)
        self.resyncs = 0  # steps repeated to sync stale memory
        self._last_params: np.ndarray | None = None  # the parameters of the previous step (downlink)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the source: the EF21 sum, the groups' copy and the
        parameters of the step it was sent for."""
        return {"estimate": self.estimate, "ef_count": int(self.ef_count),
                "down": None if self.down is None else [int(self.down[0]), self.down[1], self._last_params],
                "down_state": self.down_state}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if not state:
            return
        if self.estimate is not None and state.get("estimate") is not None:
            self.estimate = np.asarray(state["estimate"], dtype=np.float64).copy()
            self.ef_count = int(state["ef_count"])
        down = state.get("down")
        if self.compressor is not None and self.compressor.downlink and down is not None:
            self.down = (int(down[0]), np.asarray(down[1], dtype=np.float64).copy())
            self._last_params = np.asarray(down[2], dtype=np.float64).copy()
            self.down_state = dict(state.get("down_state") or {})

    def start(self) -> None:
        """Start the step actors (setup, not part of the first step's time)."""
        self.shards.collective.start()

    def regrouped(self) -> None:
        """The blocks moved to other groups (a resumed fit's placement): nothing of this
        source lives in the groups' runners, which restarted."""

    def local_update(self, source: int, optimizer: FirstOrderOptimizer | None = None, scale: float = 1.0,
                     keep: Iterable[int] = ()) -> LocalUpdate | None:
        """The :class:`~..runtime.group_steps.LocalUpdate` of the next step (models with local
        parameters; None otherwise)."""
        if not self.objective.has_local:
            return None
        return LocalUpdate(source=int(source), key=self.n_steps + 1, keep=tuple(int(k) for k in keep),
                           optimizer=optimizer, scale=float(scale))

    def evaluate(self, params: np.ndarray, draw: Draw | None = None, local: LocalUpdate | None = None,
                 name: str = "grad", aux: Any = None) -> StepResult:
        """One distributed step at ``params`` (all rows, or ``draw``'s); ``aux``: what
        the step sends besides ``params`` (None: the objective's ``step_aux(params)``)."""
        obj, sh = self.objective, self.shards
        t0, wall0, cpu0 = time.perf_counter(), time.time(), time.process_time()
        update_time = None if self._last_end is None else t0 - self._last_end
        self.n_steps += 1
        aux = obj.step_aux(params) if aux is None else aux
        partial, down_bytes = self._reduce(params, aux, draw, local, name)
        wall1 = time.time()
        value, grad = obj.finish(partial, params)
        if not self._data_checked:
            if not (math.isfinite(value) and np.all(np.isfinite(grad))):
                obj.check_data(sh)  # names the block if the data holds NaN/inf
                self._data_checked = True
            elif draw is None:
                self._data_checked = True  # finite sums over every row: the data is finite
        self._last_end = time.perf_counter()
        traffic = sh.collective.last_traffic
        down = (down_bytes + int(getattr(aux, "nbytes", 0))) * sh.n_groups
        timing = Timing(
            step_time=self._last_end - t0,
            compute_time_max=partial.time_max,
            compute_time_min=partial.time_min,
            compute_time_median=partial.time_median(),
            slowest_group=partial.slowest,
            broadcast_time=partial.start_max - wall0,
            reduce_time=wall1 - partial.end_max,
            update_time=update_time,
            driver_cpu_time=time.process_time() - cpu0,
        )
        if self.balancer is not None:
            self.balancer.observe(self.n_steps, sh.block_costs if draw is None or draw.take is None
                                  else sh.block_costs * (draw.take / np.maximum(sh.block_rows, 1)))
        return StepResult(self.n_steps, params, value, grad, partial, timing,
                          Bytes(traffic["bytes_up_raw"], traffic["bytes_up"], down),
                          Route.of(traffic),
                          None if local is None else local.key)

    def _reduce(self, params: np.ndarray, aux: Any, draw: Draw | None, local: LocalUpdate | None,
                name: str) -> tuple[Partial, int]:
        """The step's reduced sums (EF21: with the source's sum of the estimates) and the
        bytes of the parameters each group received.  A group that reports its memory
        stale has it synced, and the step is repeated (at most twice: the copy, then the
        estimates)."""
        obj, sh, comp = self.objective, self.shards, self.compressor
        down, sent = self._downlink(params)
        for attempt in range(3):
            request = StepRequest(sent if down is None or down.payload is None else None, aux, draw, local, comp,
                                  self.seed, ef_count=None if self.estimate is None else self.ef_count, down=down)
            try:
                partial = sh.collective.reduce(
                    group_step, obj, request, split_every=self.split_every, size=obj.n_params,
                    name=f"{name}-{self.n_steps}", stateless=local is None and comp is None, step=self.n_steps,
                )
                break
            except StaleState as err:
                if attempt == 2:
                    raise
                self.resyncs += 1
                logger.info("step %d: a group's compression memory is stale (%s); synced, step repeated",
                            self.n_steps, err)
                if err.what == "params":
                    down = Downlink(down.version)  # type: ignore[union-attr]  # the same values, in full
                else:  # (stale estimates: EF21, which keeps the sum)
                    self.estimate[:] = 0.0  # type: ignore[index]
                    self.ef_count = 0
        if down is not None:
            self.down = (down.version, sent)
            self._last_params = np.array(params, dtype=np.float64, copy=True)
        nbytes = 8 * obj.n_params if down is None or down.payload is None else down.nbytes
        if self.estimate is not None:
            grad_sum = cast("np.ndarray", partial.grad_sum)  # (the root's: dense)
            finite = bool(np.all(np.isfinite(grad_sum)))
            self.estimate += grad_sum
            self.ef_count += 1
            partial = dataclasses.replace(partial, grad_sum=self.estimate.copy())
            if not finite:  # the blocks kept their estimates: all start afresh next step
                self.estimate[:] = 0.0
                self.ef_count = 0
        return partial, nbytes

    def _downlink(self, params: np.ndarray) -> tuple[Downlink | None, np.ndarray]:
        """``(Downlink or None, the parameters the groups will hold)`` for a step at
        ``params``: the compressed change against the groups' copy, or the copy in full
        (the first step, or a sync after a group lost it)."""
        comp = self.compressor
        if comp is None or not comp.downlink:
            return None, params
        if self.down is None:
            self.down_state = {**comp.init(self.objective.grad_template()), "residual": None}
            return Downlink(1), np.array(params, dtype=np.float64, copy=True)
        version, copy = self.down
        params = np.asarray(params, dtype=np.float64)
        rng = np.random.default_rng([*self.seed, COMPRESSION_TAG, DOWNLINK_TAG, self.n_steps])
        # what stays unsent is at most half the last step's length: the gradient is
        # taken within half a step of the driver's parameters (else the lag grows and
        # the fit diverges; measured with top-k 1% of 201 parameters)
        moved = np.inf if self._last_params is None else np.linalg.norm(params - self._last_params)
        payload, state = comp.encode_change(params - copy, self.down_state, rng, bound=DOWN_LAG * moved)
        self.down_state = state
        if payload is None:
            return Downlink(version + 1), params.copy()
        return Downlink(version + 1, version, payload, comp), copy + comp.decompress(payload)
