"""Synchronous steps: every group's sums at the same parameters, reduced in the block tree.

:class:`SyncSource` is the step source of synchronous training (full batch or a
mini-batch draw), of the synchronous start of the local and asynchronous modes, and of
the validation passes of early stopping.  A step is one :func:`~..kernels.group_step`
per group through the shard set's collective; the driver finishes the reduced sums
(mean loss, penalty) and measures the step (timings, bytes).
"""

import math
import time
from dataclasses import dataclass

import numpy as np

from ..kernels import LocalUpdate, StepRequest, group_step
from ..records import Bytes, Route, Timing

__all__ = ["StepResult", "SyncSource"]


@dataclass
class StepResult:
    """One synchronous step: the smooth objective and its gradient at ``params``."""

    step: int
    params: np.ndarray
    value: float
    grad: np.ndarray
    partial: object
    timing: Timing
    nbytes: Bytes
    route: Route = None
    local_key: int = None

    @property
    def finite(self):
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
        error-feedback state (see :mod:`..kernels`): the result does not depend on
        which worker holds which block.
    seed : tuple
        Seed of the compression draws.
    balancer : DynamicBalancer or None
        Told every step's compute times (moves blocks toward faster workers).
    """

    def __init__(self, shards, objective, *, split_every, compressor=None, seed=(0,), balancer=None):
        self.shards = shards
        self.objective = objective
        self.split_every = int(split_every)
        self.compressor = compressor
        self.seed = tuple(seed)
        self.balancer = balancer
        self.n_steps = 0
        self._data_checked = False
        self._last_end = None  # perf_counter when the previous step's result arrived

    def start(self):
        """Start the step actors (setup, not part of the first step's time)."""
        self.shards.collective.start()

    def local_update(self, source, optimizer=None, scale=1.0, keep=()):
        """The :class:`~..kernels.LocalUpdate` of the next step (models with local
        parameters; None otherwise)."""
        if not self.objective.has_local:
            return None
        return LocalUpdate(source=int(source), key=self.n_steps + 1, keep=tuple(int(k) for k in keep),
                           optimizer=optimizer, scale=float(scale))

    def evaluate(self, params, draw=None, local=None, name="grad", aux=None):
        """One distributed step at ``params`` (all rows, or ``draw``'s); ``aux``: what
        the step sends besides ``params`` (None: the objective's ``step_aux(params)``)."""
        obj, sh = self.objective, self.shards
        t0, wall0, cpu0 = time.perf_counter(), time.time(), time.process_time()
        update_time = None if self._last_end is None else t0 - self._last_end
        self.n_steps += 1
        aux = obj.step_aux(params) if aux is None else aux
        request = StepRequest(params, aux, draw, local, self.compressor, self.seed)
        partial = sh.collective.reduce(
            group_step, obj, request, split_every=self.split_every, size=obj.n_params,
            name=f"{name}-{self.n_steps}", stateless=local is None and self.compressor is None, step=self.n_steps,
        )
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
        down = (8 * obj.n_params + int(getattr(aux, "nbytes", 0))) * sh.n_groups
        timing = Timing(
            step_time=self._last_end - t0,
            compute_time_max=partial.time_max,
            compute_time_min=partial.time_min,
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
