"""What runs on the workers: one group's share of a step, and its memory.

Every function here takes the group's :class:`~..data.blocks.Shard` and its
:class:`GroupMemory` (the memory of the group's runner between calls; a fresh one for
a task) first.  The
driver sends one :class:`StepRequest` per step; :func:`group_step` evaluates the
training objective on the group's blocks (all rows or the step's draw), keeps the
group's own state, and returns the group's complete subtrees of the fixed block tree
(:class:`~.reduce.BlockTree`).

The group's memory is a :class:`GroupMemory` (see there): per-block states, local
parameters, the objective's buffers and the downlink copy, whose meaning the engine
knows, and ``modes``: what a mode or sharded training keeps under names of its own,
which this module never reads; a solver lists those a checkpoint keeps
(``Solver.group_state``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..update import UpdateRule
from .faults import inject_faults
from .reduce import Compressed, Partial, add_partials

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    import numpy.typing as npt

    from ...compression import Compressor
    from ...optim import FirstOrderOptimizer
    from ..data.blocks import Shard
    from ..protocols import LocalParameters, TrainingObjective
    from .reduce import BlockTree, NodeKey

__all__ = [
    "GroupMemory",
    "store_local",
    "sum_blocks",
    "BlockSums",
    "Draw",
    "LocalUpdate",
    "Downlink",
    "SolvedLocal",
    "check_payload_count",
    "compress_into",
    "StaleState",
    "StepRequest",
    "group_block_states",
    "group_memory",
    "group_restore",
    "group_local_export",
    "group_local_init",
    "group_set_block_states",
    "group_step",
    "local_snapshot",
]

#: Stream tag of the compression draws (apart from the mini-batch draws).
COMPRESSION_TAG = 7919


@dataclass
class GroupMemory:
    """A group's memory between calls, where its blocks live (one per group runner).

    ``blocks[b]``: the state of block ``b`` (its compression residual or EF21 estimate,
    with the count of its payloads): it does not depend on which worker holds the block,
    so it moves with the block when blocks are regrouped, and a checkpoint keys it by
    block.  ``local``: snapshots of the group's *local parameters* (a matrix
    factorization's user factors), ``key -> (params, optimizer state, gradient)``: the
    driver names the snapshot a step starts from, so a step that diverged can be undone
    where the parameters live (see :class:`LocalUpdate`); ``local_scaled``: the
    snapshots already scaled by the step that made them.  ``objective``: the training
    objective's own buffers.  ``down``: with downlink compression, ``(version,
    params)``, the group's copy of the parameters that the driver's compressed changes
    update.  ``modes``: a mode's own state under names the mode chooses (local SGD's
    optimizer state between rounds, the asynchronous push's compression memory, the
    sharded owners' slices); checkpoints keep the names the solver lists in
    ``group_state``."""

    blocks: dict = field(default_factory=dict)
    local: dict | None = None
    local_scaled: set = field(default_factory=set)
    objective: dict = field(default_factory=dict)
    down: tuple | None = None
    modes: dict = field(default_factory=dict)


@dataclass(frozen=True)
class BlockSums:
    """One block's sums: loss, gradient (dense or compact), weight, and extras."""

    loss: float
    grad: Any  # dense or compact, in the objective's natural form
    weight: float
    extras: dict


@dataclass(frozen=True)
class Draw:
    """The rows of one mini-batch step: ``take[b]`` rows of block ``b`` (None: all),
    drawn by a generator seeded with ``(seed, step, b)``; or, for models that batch by
    hashing (matrix factorization), the batch ``batch`` of ``n_batches`` in ``epoch``."""

    seed: tuple
    step: int
    take: npt.NDArray[np.int64] | dict[int, int] | None = None
    epoch: int = 0
    batch: int = 0
    n_batches: int = 1


@dataclass(frozen=True)
class LocalUpdate:
    """How a step treats the group's local parameters.

    The group takes the snapshot ``source`` (its parameters, their optimizer state and
    the local gradient computed there), applies that gradient times ``scale`` with
    ``optimizer`` (None: no update, e.g. the very first step), evaluates the step at
    the result and stores it as snapshot ``key``; snapshots other than ``keep`` and
    ``key`` are dropped.  The driver sends, as ``source``, the snapshot of its last
    accepted step, and its own optimizer: after a step that diverged it names the last
    good one and its halved learning rate, so the local parameters back off with the
    shared ones.
    """

    source: int
    key: int
    keep: tuple
    optimizer: FirstOrderOptimizer | None = None
    scale: float = 1.0


@dataclass(frozen=True)
class SolvedLocal:
    """Local parameters that an objective solved for in its step (alternating least
    squares solves a matrix factorization's users exactly): what ``group_sums``
    returns in place of a local gradient; they are stored as the step's snapshot, in
    place of the ones the step started from."""

    params: Any


@dataclass(frozen=True)
class Downlink:
    """The parameters' way down with downlink compression: the group's copy of version
    ``base`` plus ``payload`` (of ``compressor``) becomes version ``version``; with no
    ``payload``, the request's ``params`` replace the copy (a full sync)."""

    version: int
    base: int | None = None
    payload: dict | None = None
    compressor: Compressor | None = None

    @property
    def nbytes(self) -> int:
        return 8 if self.payload is None else 8 + int(self.compressor.nbytes(self.payload))  # type: ignore[union-attr]  # (a payload has its compressor)


class StaleState(RuntimeError):
    """A group's compression memory does not match the driver's: its copy of the
    parameters (``what="params"``) or its blocks' EF21 estimates (``what="estimates"``)
    were lost (a restarted runner, a resumed fit) or are of another step.  The driver
    syncs them and repeats the step."""

    def __init__(self, what: str, detail: str = "") -> None:
        super().__init__(f"stale {what}: {detail}")
        self.what = what

    def __reduce__(self) -> tuple[type[StaleState], tuple[str, str]]:
        return type(self), (self.what, str(self).partition(": ")[2])


@dataclass(frozen=True)
class StepRequest:
    """What the driver sends every group for one step.

    ``params`` is None when ``down`` carries the parameters' change (downlink
    compression); ``ef_count`` is the driver's count of the EF21 payloads folded into its
    sum (None: the compressor keeps no estimate; 0: every block starts afresh)."""

    params: np.ndarray | None
    aux: Any = None
    draw: Draw | None = None
    local: LocalUpdate | None = None
    compressor: Compressor | None = None
    compression_seed: tuple = (0,)
    ef_count: int | None = None
    down: Downlink | None = None


def _blocks_state(scratch: GroupMemory) -> dict:
    return scratch.blocks


def _compress(scratch: GroupMemory, compressor: Compressor, template: Any, index: int, grad: Any,
              seed: Sequence[int], step: int) -> Any:
    """Block ``index``'s gradient compressed with its own error-feedback state.

    A non-finite gradient travels raw and leaves the state alone, so the engine backs
    off and the residual is not poisoned."""
    if not np.all(np.isfinite(grad)):
        return grad
    states = _blocks_state(scratch).setdefault(index, {})
    return compress_into(states, "compression", compressor, template, grad, [*seed, COMPRESSION_TAG, step, index])


def compress_into(memory: dict[str, Any], key: str, compressor: Compressor, template: Any, grad: Any,
                  draw_key: Sequence[int]) -> Compressed:
    """``grad`` compressed with the compressor's memory kept in ``memory[key]`` (made
    for gradients shaped like ``template`` when absent), drawing from a generator seeded
    with ``draw_key``: the :class:`~.reduce.Compressed` payload that travels."""
    state = memory.get(key)
    if state is None:
        state = compressor.init(template)
    payload, memory[key] = compressor.compress(grad, state, np.random.default_rng(draw_key))
    return Compressed(payload, compressor)


def _step_params(scratch: GroupMemory, request: StepRequest) -> tuple[int | None, np.ndarray]:
    """``(version, parameters)`` a step evaluates at: ``(None, the request's)``, or
    (downlink compression) the group's copy with the request's change added.  Raises
    :class:`StaleState` before changing anything when the copy is not the one the change
    was made for."""
    down = request.down
    if down is None:
        return None, request.params  # type: ignore[return-value]  # (sent whenever down is None)
    if down.payload is None:
        copy = np.array(request.params, dtype=np.float64, copy=True)
    else:
        version, copy = scratch.down or (None, None)
        if version != down.base:
            raise StaleState("params", f"the group holds version {version}, the change is from {down.base}")
        copy = copy + down.compressor.decompress(down.payload)  # type: ignore[union-attr]  # (a payload's)
    return down.version, copy


def _check_estimates(scratch: GroupMemory, blocks: Iterable[int], count: int) -> None:
    """Raise :class:`StaleState` unless the EF21 estimate of each of ``blocks`` has
    ``count`` payloads behind it (``count=0``: their states are dropped, a fresh start)."""
    states = _blocks_state(scratch)
    if count == 0:
        for b in blocks:
            states.get(b, {}).pop("compression", None)
        return
    for b in blocks:
        check_payload_count(states.get(b, {}).get("compression"), count, f"block {b}")


def check_payload_count(state: Mapping[str, Any] | None, count: int, name: str) -> None:
    """Raise :class:`StaleState` unless the EF21 memory ``state`` (of ``name``) has
    ``count`` payloads behind it."""
    have = 0 if state is None else state.get("count", 0)
    if have != count:
        raise StaleState("estimates", f"{name} has {have} payloads behind its estimate, the driver {count}")


def local_snapshot(scratch: GroupMemory, local: LocalUpdate) -> tuple[Any, Any]:
    """The local parameters and optimizer state a step evaluates at (see
    :class:`LocalUpdate`); raises ClusterError when the snapshot is gone (its worker
    was lost)."""
    snaps = scratch.local
    if snaps is None or local.source not in snaps:
        from ...exceptions import ClusterError

        raise ClusterError(
            "a group lost its local parameters (its worker was lost mid-fit): they live "
            "only on that worker; fit again, or resume from a checkpoint"
        )
    params, state, grad = snaps[local.source]
    if local.optimizer is not None and grad is not None:
        if state is None:
            state = local.optimizer.init(params)
        scaled = scratch.local_scaled
        if local.scale != 1.0 and local.source not in scaled:
            # the gradient is this group's own array and its scale that of its step, the
            # same for every use (a step that backs off applies it again, with the halved
            # learning rate): scaled in place, once
            grad *= local.scale
            scaled.add(local.source)
        # the local parameters' penalty is in their loss: the rule has none
        params, state, _ = UpdateRule(local.optimizer).apply(params, grad, state)
    return params, state


def store_local(scratch: GroupMemory, local: LocalUpdate, params: Any, state: Any, grad: Any) -> None:
    snaps = cast("dict", scratch.local)  # (local_snapshot found it)
    snaps[local.key] = (params, state, grad)
    scaled = scratch.local_scaled
    scaled.discard(local.key)
    for k in [k for k in snaps if k != local.key and k not in local.keep]:
        del snaps[k]
        scaled.discard(k)


def group_step(shard: Shard, scratch: GroupMemory, objective: TrainingObjective, request: StepRequest,
               tree: BlockTree) -> dict[NodeKey, Partial]:
    """One group's share of a step: the training objective's sums over the group's
    blocks at ``request.params``, as the group's complete subtrees of ``tree`` (or, with
    compression, as compressed leaves: they are merged where they are received).

    Every node carries the group's compute time and wall-clock stamps; one of them
    counts the group (``n_groups=1``), so the root counts the groups that took part.
    """
    wall0, t0 = time.time(), time.perf_counter()
    version, params = _step_params(scratch, request)
    local = request.local
    local_params = local_state = None
    if local is not None:
        local_params, local_state = local_snapshot(scratch, local)
    sums, local_grad = objective.group_sums(shard, params, request.aux, request.draw, local_params,
                                            scratch.objective)
    if request.ef_count is not None:  # checked before any memory changes
        _check_estimates(scratch, sorted(sums), request.ef_count)
    if version is not None:
        scratch.down = (version, params)
    if local is not None:
        if isinstance(local_grad, SolvedLocal):
            local_params, local_grad = local_grad.params, None
        store_local(scratch, local, local_params, local_state, local_grad)
    comp = request.compressor
    step = 0 if request.draw is None else request.draw.step
    template = objective.grad_template() if comp is not None else None
    leaves = {}
    for i, index in enumerate(sorted(sums)):
        s = sums[index]
        grad = s.grad
        if comp is not None:
            grad = _compress(scratch, comp, template, index, objective.dense_grad(grad),
                             request.compression_seed, step)
        leaves[index] = (s, grad, int(i == 0))
    inject_faults(t0)
    dt = time.perf_counter() - t0
    nodes = {
        (0, index): Partial(s.loss, grad, s.weight, dt, dt, first, wall0, wall0 + dt, s.extras)
        for index, (s, grad, first) in leaves.items()
    }
    if not nodes:  # a group without blocks still reports its time
        return {}
    return nodes if comp is not None else tree.complete(nodes)


def group_block_states(shard: Shard, scratch: GroupMemory) -> dict[int, Any]:
    """This group's per-block states (``{block: state}``), e.g. to move or checkpoint."""
    return dict(_blocks_state(scratch))


def group_set_block_states(shard: Shard, scratch: GroupMemory, states: Mapping[int, Any] | None) -> None:
    """Replace this group's per-block states."""
    scratch.blocks = {int(b): s for b, s in (states or {}).items()}


def group_local_init(shard: Shard, scratch: GroupMemory, objective: LocalParameters, init: Any) -> int:
    """Create the group's local parameters (snapshot 0): ``objective.local_init(shard,
    init)`` gives them and their optimizer state (``init``: what the driver sent this
    group, e.g. its users' rows when training continues; None: the model's own start)."""
    params, state = objective.local_init(shard, init)
    scratch.local = {0: (params, state, None)}
    return objective.local_size(params)


def group_local_export(shard: Shard, scratch: GroupMemory, objective: LocalParameters, local: LocalUpdate) -> Any:
    """What the group exports of its local parameters at the end of a fit
    (``objective.local_export``): their snapshot after ``local`` (the last step's
    pending update applied when its optimizer is given) and their optimizer state."""
    return objective.local_export(shard, *local_snapshot(scratch, local))


def _host(value: Any) -> Any:
    """``value`` with every array (also inside tuples, dicts and optimizer states)
    copied to the host as NumPy."""
    from ..._backend import is_device_array, to_numpy

    if isinstance(value, tuple) and hasattr(value, "_asdict"):  # an optimizer state
        return type(value)(**{k: _host(v) for k, v in value._asdict().items()})
    if isinstance(value, (tuple, list)):
        return type(value)(_host(v) for v in value)
    if isinstance(value, dict):
        return {k: _host(v) for k, v in value.items()}
    if isinstance(value, np.ndarray) or is_device_array(value):
        return np.array(to_numpy(value), copy=True)
    return value


def group_memory(shard: Shard, scratch: GroupMemory, local_keys: Iterable[int],
                 group_state: Iterable[str] = ()) -> dict[str, Any]:
    """What a checkpoint keeps of this group's memory, on the host: its per-block
    states, the snapshots ``local_keys`` of its local parameters, and the mode's state
    named in ``group_state`` (local SGD's optimizer state and compression residual)."""
    local = scratch.local or {}
    return {
        "blocks": _host(dict(_blocks_state(scratch))),
        "local": {int(k): _host(local[k]) for k in local_keys if k in local},
        "local_scaled": [int(k) for k in local_keys if k in scratch.local_scaled],
        "modes": {name: _host(scratch.modes[name]) for name in group_state if scratch.modes.get(name) is not None},
    }


def group_restore(shard: Shard, scratch: GroupMemory, objective: TrainingObjective, memory: Mapping[str, Any]) -> None:
    """Give this group the memory a checkpoint kept (see :func:`group_memory`), its
    arrays moved to where the group's data lives (``objective.local_place``)."""
    scratch.blocks = {int(b): st for b, st in (memory.get("blocks") or {}).items()}
    place = getattr(objective, "local_place", None)
    if memory.get("local"):
        scratch.local = {int(k): (v if place is None else place(shard, v)) for k, v in memory["local"].items()}
        scratch.local_scaled = {int(k) for k in memory.get("local_scaled") or ()}
    scratch.modes.update(memory.get("modes") or {})


def sum_blocks(objective: TrainingObjective, sums: Mapping[int, BlockSums], t: float = 0.0) -> Partial:
    """A group's per-block sums added in block order, as one :class:`~.reduce.Partial`."""
    parts = [Partial(s.loss, s.grad, s.weight, t, t, 0, extras=s.extras) for _, s in sorted(sums.items())]
    if not parts:
        return Partial(0.0, np.zeros(objective.n_params), 0.0, t, t, 1)
    total = add_partials(*parts, size=objective.n_params)
    return Partial(total.loss_sum, total.grad_sum, total.weight_sum, t, t, 1, extras=total.extras)


def finite(value: float, grad: Any) -> bool:
    """Whether an objective value and its gradient are finite."""
    return math.isfinite(value) and bool(np.all(np.isfinite(grad)))
