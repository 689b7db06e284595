"""Sharded parameters, worker side: a wide linear model's coefficients split over the groups.

With ``param_sharding`` the rows of the parameter matrix (one per feature, then the
intercept) are split into equal feature ranges (:class:`ParamLayout`), one per group: the
group *owns* them, with their optimizer state, in its runner's memory
(``scratch.modes["sharded"]``).  A step has two phases, each one call down and up the runner
tree that carries only scalars to the driver:

1. :func:`sharded_eval`: every group *pulls* from each owner the coefficients of the
   columns its blocks touch (registered once, at :func:`sharded_setup`: a pull names only
   the group and the version), evaluates its blocks on compact copies of them (their
   columns renumbered, so the sums are those of the full block, bit for bit), sums its
   complete subtrees of the fixed block tree as sparse vectors, and *pushes* each
   owner the part of every subtree in the owner's range (a reduce-scatter: the bytes
   are those of the non-zero columns, never of ``d``).  The driver gets the loss and
   weight sums.
2. :func:`sharded_update`: every owner merges what it received in the block tree (the
   same additions in the same order as the unsharded sum, so the gradient is the same
   bit for bit), finishes its slice of the gradient (mean plus the L2 part), and applies
   the update rule to its slice; the driver gets the scalars it decides on (largest
   gradient entry, squared norm, penalty values).

Pulls and pushes go worker to worker (:class:`ActorExchange`: an actor call to the
owner's runner, served on its event loop, so an owner busy with its own blocks still
answers) or, in process, straight into the owners' memory (:class:`LocalExchange`).
The update is speculative: an owner computes the next parameters as soon as it has the
gradient and keeps the current ones; the driver's guard decides, and the next pull of
the new version commits them (the last accepted point becomes the one a backoff
returns to), or a backoff replaces them.  This module imports no Dask at import time.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import scipy.sparse as sp

from ...exceptions import ClusterError, InputError
from ..data.blocks import _block_error
from ..runtime.faults import inject_faults
from ..runtime.reduce import BlockTree, Partial, SparseVector
from .exchange import ActorExchange, LocalExchange

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import numpy.typing as npt

    from ...losses import LinearObjective, Penalty
    from ...optim import FirstOrderOptimizer
    from ..data.blocks import Block, Shard
    from ..objective import LinearTraining
    from ..runtime.group_steps import Draw, GroupMemory
    from ..update import UpdateRule

    #: The groups' nodes of the block tree, keyed ``(level, index)``.
    Nodes = dict[tuple[int, int], Partial]

__all__ = [
    "ActorExchange",
    "LbfgsCommand",
    "LocalExchange",
    "Max",
    "ParamLayout",
    "ShardedRequest",
    "SlicePenalty",
    "Ticket",
    "UpdateCommand",
    "ValidationRequest",
    "dense_state",
    "group_sums",
    "merged_gradient",
    "owned_memory",
    "owner_parts",
    "pull_columns",
    "sharded_column_squares",
    "sharded_eval",
    "sharded_memory",
    "sharded_restore",
    "sharded_setup",
    "sharded_slice",
    "sharded_update",
    "sharded_validate",
    "slice_penalty",
    "sparse_state",
]

KEY = "sharded"


class Max(float):
    """A float whose sum with another is their maximum: a largest entry reduced with
    the other scalars of a partial's ``extras``."""

    def __add__(self, other: float) -> Max:
        return Max(max(float(self), float(other)))

    __radd__ = __add__

    def __reduce__(self) -> tuple[type[Max], tuple[float]]:
        return Max, (float(self),)


@dataclass(frozen=True)
class ParamLayout:
    """Which group owns which rows of the ``(n_features + fit_intercept, width)``
    parameter matrix: group ``g`` owns rows ``bounds[g]`` to ``bounds[g + 1]`` (equal
    feature ranges: hashed columns are spread evenly; the intercept goes with the last)."""

    n_features: int
    width: int
    fit_intercept: bool
    bounds: tuple[int, ...]

    @classmethod
    def split(cls, objective: LinearObjective, n_owners: int) -> ParamLayout:
        rows = objective.n_features + int(objective.fit_intercept)
        bounds = np.linspace(0, rows, int(n_owners) + 1).round().astype(np.int64)
        return cls(int(objective.n_features), int(objective.n_outputs), bool(objective.fit_intercept),
                   tuple(int(b) for b in bounds))

    @property
    def n_owners(self) -> int:
        return len(self.bounds) - 1

    @property
    def n_params(self) -> int:
        return (self.n_features + int(self.fit_intercept)) * self.width

    def flat_range(self, owner: int) -> tuple[int, int]:
        """Owner ``owner``'s entries of the flat parameter vector: ``(lo, hi)``."""
        return self.bounds[owner] * self.width, self.bounds[owner + 1] * self.width


@dataclass(frozen=True)
class SlicePenalty:
    """The elastic-net penalty of one owner's slice (what :class:`~..update.UpdateRule`
    needs): its first ``n_coef`` entries are coefficients, the rest intercepts."""

    l2: float
    l1: float
    n_coef: int
    size: int

    @classmethod
    def of(cls, penalty_spec: Penalty, layout: ParamLayout, owner: int) -> SlicePenalty:
        lo, hi = layout.flat_range(owner)
        n_coef = min(max(layout.n_features * layout.width - lo, 0), hi - lo)
        return cls(float(penalty_spec.l2_strength), float(penalty_spec.l1_strength), int(n_coef), int(hi - lo))

    @property
    def has_l1(self) -> bool:
        return self.l1 > 0

    @cached_property
    def decay_mask(self) -> np.ndarray | None:
        """The entries AdamW decays (None: all, a slice of coefficients only)."""
        return None if self.n_coef == self.size else np.arange(self.size) < self.n_coef

    def value(self, x: np.ndarray) -> float:
        """The L2 part's value on this slice."""
        coef = x[: self.n_coef]
        return 0.5 * self.l2 * float(coef @ coef) if self.l2 else 0.0

    def add_gradient(self, grad: np.ndarray, x: np.ndarray) -> np.ndarray:
        """``grad`` plus the L2 part's gradient (in place on the coefficients: the
        intercepts' zeros would add nothing), as the unsharded objective adds them."""
        if self.l2:
            grad[: self.n_coef] += self.l2 * x[: self.n_coef]
        return grad

    def l1_value(self, x: np.ndarray) -> float:
        return self.l1 * float(np.sum(np.abs(x[: self.n_coef]))) if self.l1 else 0.0

    def prox(self, x: np.ndarray, step: float) -> np.ndarray:
        out = x.copy()
        threshold = float(step) * self.l1
        if threshold > 0:
            coef = x[: self.n_coef]
            out[: self.n_coef] = np.sign(coef) * np.maximum(np.abs(coef) - threshold, 0.0)
        return out


# --------------------------------------------------------------------- requests
@dataclass(frozen=True)
class ShardedRequest:
    """Phase 1 of a step: evaluate at parameter ``version`` (all rows, or ``draw``'s)."""

    version: int
    exchange: ActorExchange | LocalExchange
    draw: Draw | None = None


@dataclass(frozen=True)
class ValidationRequest:
    """Evaluate held-out blocks at the owners' parameters of ``version``."""

    version: int
    exchange: ActorExchange | LocalExchange
    layout: ParamLayout


@dataclass(frozen=True)
class UpdateCommand:
    """Phase 2 of a step, or a backoff.

    ``kind``: ``"merge"`` (merge the received sums into the gradient at the current
    parameters; then, with ``rule``, update speculatively from them), ``"update"``
    (update from the merged gradient with ``rule``: the first step, after the automatic
    learning rate), ``"backoff"`` (update from the last accepted point with ``rule``,
    the halved one).  The new parameters become version ``version``.  ``init``: an
    optimizer whose state every owner starts (the first step, without a saved state).
    """

    kind: str
    version: int
    split_every: int = 8
    n_blocks: int = 1
    rule: UpdateRule | None = None
    init: FirstOrderOptimizer | None = None


@dataclass(frozen=True)
class Ticket:
    """What every pull and push tells an owner of the coordinator's state: its count
    of backoffs, its mark (the version of its best objective), the optimizer (its
    learning rate halved by the coordinator's backoffs), the number of groups, and whether pushes are
    scaled by ``1 / (1 + delay)``; ``penalty``: the objective's penalty spec."""

    rollbacks: int
    mark: int
    optimizer: FirstOrderOptimizer
    n_groups: int
    scaling: bool
    penalty: Penalty


@dataclass(frozen=True)
class LbfgsCommand:
    """One step of sharded L-BFGS on every owner (see the module docstring)."""

    kind: str
    version: int = 0
    split_every: int = 8
    n_blocks: int = 1
    id: int | None = None
    t: float | None = None
    coeffs: dict[int, float] | None = None
    live: tuple[int, ...] = ()
    grad_id: int | None = None
    ids: tuple[int, ...] = ()
    g_id: int | None = None
    precondition: float | None = None  # the loss's curvature level kappa (None: no scaling)


def _memory(scratch: GroupMemory) -> dict[str, Any]:
    mem = scratch.modes.get(KEY)
    if mem is None:
        mem = scratch.modes[KEY] = {"rows": {}, "inbox": {}, "lock": threading.Lock()}
    return mem


def owned_memory(scratch: GroupMemory) -> dict[str, Any]:
    mem = scratch.modes.get(KEY)
    if mem is None or "x" not in mem:
        raise ClusterError(
            "a group lost its parameter shard (its worker was lost mid-fit, or its runner restarted): "
            "the shard lives only on that worker; fit again, or resume from a checkpoint"
        )
    return mem


# ------------------------------------------------------------------------ setup
def _compact(X: Any) -> tuple[np.ndarray, sp.csr_matrix]:
    """``(columns, compact CSR)``: the sorted columns block ``X`` touches and ``X`` with
    its columns renumbered to them (the same entries in the same order)."""
    if not sp.issparse(X):
        raise InputError("param_sharding needs sparse (CSR) blocks of X; got dense blocks")
    X = X.tocsr() if X.format != "csr" else X
    cols = np.unique(X.indices).astype(np.int64)
    indices = np.searchsorted(cols, X.indices).astype(X.indices.dtype, copy=False)
    return cols, sp.csr_matrix((X.data, indices, X.indptr), shape=(X.shape[0], cols.size))


def sharded_setup(shard: Shard, scratch: GroupMemory, objective: LinearObjective, layout: ParamLayout,
                  exchange: ActorExchange | LocalExchange, group: int, x0: np.ndarray | sp.csr_matrix | None,
                  state0: Any) -> tuple[int, int]:
    """Set a group up: own its slice (``x0``, or zeros; ``state0``: its optimizer state
    to continue from), compact its blocks, and register with every owner the rows of
    the owner's range its blocks need.  Returns ``(non-zero columns, blocks)``."""
    mem = _memory(scratch)
    lo, hi = layout.flat_range(group)
    if x0 is None:
        x0 = np.zeros(hi - lo)
    x0 = x0.toarray().ravel() if sp.issparse(x0) else x0  # type: ignore[union-attr]  # a sparse start, expanded here
    state0 = dense_state(state0)
    mem.update(group=int(group), layout=layout, version=0, good=None, cand=None, pending=None,
               x=np.array(x0, dtype=np.float64, copy=True), state=state0, grad=None)
    blocks, union = {}, []
    for b in shard.blocks:
        cols, Xc = _compact(b.X)
        if cols.size and cols[-1] >= layout.n_features:
            raise InputError(f"X must have {layout.n_features} columns; block {b.index} has column {cols[-1]}")
        blocks[b.index] = [cols, Xc]
        union.append(cols)
    rows = np.unique(np.concatenate(union)) if union else np.zeros(0, dtype=np.int64)
    if layout.fit_intercept:
        rows = np.append(rows, layout.n_features)
    for entry in blocks.values():
        cols = entry[0]
        if layout.fit_intercept:
            cols = np.append(cols, layout.n_features)
        entry.append(np.searchsorted(rows, cols))
    mem["blocks"], mem["needs"] = blocks, rows
    for stale in ("needs_flat", "lbfgs", "penalty", "async", "squares", "online_blocks", "online_buffers",
                  "online_inbox"):  # of an earlier setup
        mem.pop(stale, None)
    mem["split"] = np.searchsorted(rows, np.asarray(layout.bounds))
    calls = [(o, _owner_register, (int(group), rows[mem["split"][o]:mem["split"][o + 1]] - layout.bounds[o]))
             for o in range(layout.n_owners)]
    exchange.call(calls)
    return int(rows.size), len(blocks)


def _owner_squares(shard: Shard | None, scratch: GroupMemory, group: int, weight: float,
                   values: np.ndarray) -> None:
    _memory(scratch).setdefault("squares", {})[int(group)] = (float(weight), values)


def sharded_column_squares(shard: Shard, scratch: GroupMemory, exchange: ActorExchange | LocalExchange) -> None:
    """Push every owner this group's weighted sums of squares of the columns in the
    owner's range that its blocks touch (the rows it registered, in that order; the
    intercept's column is ones), with its weight sum: what an owner's diagonal scaling
    is made of (:func:`~.lbfgs.column_scales`).  One pass over the group's
    blocks, once per fit; the bytes are those of one gradient push."""
    mem = owned_memory(scratch)
    lay = mem["layout"]
    sq, weight = np.zeros(mem["needs"].size), 0.0
    for b in shard.blocks:
        _, Xc, pos = mem["blocks"][b.index]
        n = Xc.shape[0]
        w = np.ones(n) if b.sample_weight is None else np.asarray(b.sample_weight, dtype=np.float64).ravel()
        rows = np.repeat(np.arange(n), np.diff(Xc.indptr))
        data = np.asarray(Xc.data, dtype=np.float64)
        cols = np.bincount(Xc.indices, w[rows] * data * data, minlength=Xc.shape[1])
        sq[pos[: Xc.shape[1]]] += cols  # a block's columns are distinct
        if lay.fit_intercept:
            sq[pos[-1]] += w.sum()
        weight += float(w.sum())
    split = mem["split"]
    exchange.call([(o, _owner_squares, (mem["group"], weight, sq[split[o]:split[o + 1]]))
                   for o in range(lay.n_owners)])


def dense_state(state: Any) -> Any:
    """An optimizer state whose vectors may be SciPy rows (a ``sparse_params`` result,
    continued), with those expanded."""
    if isinstance(state, tuple) and hasattr(state, "_asdict"):
        return state._replace(**{k: v.toarray().ravel() for k, v in state._asdict().items() if sp.issparse(v)})  # type: ignore[attr-defined]
    return state


def sparse_state(state: Any) -> Any:
    """The optimizer state's vectors as SciPy CSR rows (the inverse of :func:`dense_state`)."""
    if isinstance(state, tuple) and hasattr(state, "_asdict"):
        return state._replace(**{k: sp.csr_matrix(v.reshape(1, -1)) for k, v in state._asdict().items()  # type: ignore[attr-defined]
                                 if isinstance(v, np.ndarray) and v.ndim == 1})
    return state


def _owner_register(shard: Shard | None, scratch: GroupMemory, group: int, rows: npt.ArrayLike) -> None:
    _memory(scratch)["rows"][int(group)] = np.asarray(rows, dtype=np.int64)


def _commit(mem: dict[str, Any], version: int) -> None:
    """Make the pending parameters current when ``version`` is theirs (the driver
    evaluates them: it accepted the point they were computed from)."""
    with mem["lock"]:
        pending = mem["pending"]
        if pending is not None and pending[0] == version:
            version, x, state, accepted = pending
            if accepted:
                mem["good"] = mem["cand"]
            mem.update(version=version, x=x, state=state, grad=None, pending=None, cand=None)
            mem["inbox"] = {}


def _owner_pull(shard: Shard | None, scratch: GroupMemory, group: int, version: int,
                rows: np.ndarray | None = None) -> np.ndarray:
    """The owner's rows of the parameter matrix that ``group`` needs: those it
    registered, or ``rows`` (a mini-batch's)."""
    mem = owned_memory(scratch)
    _commit(mem, version)
    if mem["version"] != version:
        raise ClusterError(f"a parameter shard is at version {mem['version']}, the step asks for {version}")
    return mem["x"].reshape(-1, mem["layout"].width)[mem["rows"][int(group)] if rows is None else rows]


def _owner_push(shard: Shard | None, scratch: GroupMemory, group: int, version: int, nodes: Nodes) -> None:
    mem = owned_memory(scratch)
    _commit(mem, version)
    mem["inbox"][int(group)] = nodes


# ------------------------------------------------------------------------ phase 1
def pull_columns(mem: dict[str, Any], exchange: ActorExchange | LocalExchange, fn: Callable[..., np.ndarray],
          head: int | Ticket, used: Sequence[np.ndarray] | None) -> tuple[np.ndarray, int, int]:
    """The coefficients the group's blocks need, as rows of the group's compact matrix
    (ordered as ``mem["needs"]``): all of them (``used`` None), or those at the
    positions in ``used`` (a mini-batch's); the others stay 0 and are never read.
    Each owner answers ``fn(shard, scratch, group, head, rows)``.
    Returns ``(matrix, bytes sent, bytes received)``."""
    lay, split, group = mem["layout"], mem["split"], mem["group"]
    xg = np.zeros((mem["needs"].size, lay.width))
    if used is None:
        wanted = [(split[o], split[o + 1], None) for o in range(lay.n_owners)]
    else:
        need = np.unique(np.concatenate(used)) if used else np.zeros(0, dtype=np.int64)
        cut = np.searchsorted(need, split)
        wanted = [(need[cut[o]:cut[o + 1]], None, (mem["needs"][need[cut[o]:cut[o + 1]]] - lay.bounds[o])
                   .astype(np.int32)) for o in range(lay.n_owners)]
    pulled, sent, received = exchange.call([(o, fn, (group, head, rows)) for o, (_, _, rows) in enumerate(wanted)])
    for (at, end, _), values in zip(wanted, pulled):
        xg[at if end is None else slice(at, end)] = values
    return xg, sent, received


def _batch_view(b: Block, Xc: sp.csr_matrix, pos: np.ndarray, rows: np.ndarray,
                fit_intercept: bool) -> tuple[sp.csr_matrix, Any, Any, np.ndarray]:
    """Block ``b``'s rows ``rows`` as they are evaluated: the compact block's rows with
    their columns renumbered to those they touch (the same entries in the same order),
    their targets and weights, and the positions in the group's ``needs`` of the
    parameter rows they use (with the intercept's)."""
    from ..._backend import take_rows

    Xr = Xc[rows]
    sub = np.unique(Xr.indices)
    X = sp.csr_matrix((Xr.data, np.searchsorted(sub, Xr.indices).astype(Xr.indices.dtype, copy=False), Xr.indptr),
                      shape=(rows.size, sub.size))
    cols = pos[:-1] if fit_intercept else pos
    at = np.append(cols[sub], pos[-1]) if fit_intercept else cols[sub]
    w = None if b.sample_weight is None else take_rows(b.sample_weight, rows)
    return X, take_rows(b.y, rows), w, at


def _flat(rows: npt.ArrayLike, width: int) -> np.ndarray:
    """The flat parameter indices of rows of a ``width``-wide parameter matrix."""
    return (np.asarray(rows, dtype=np.int64)[:, None] * width + np.arange(width)).ravel()


def _restrict(node: Partial, a: int, b: int, needs_flat: np.ndarray, lo: int, hi: int) -> Partial:
    """What an owner gets of a group's node: its weight and the entries ``a`` to ``b``
    of its gradient in the group's compact numbering (``needs_flat``: their flat
    parameter indices), renumbered from the owner's first entry ``lo``; zeros left out
    (they add nothing), dense when that is smaller (12 bytes an entry against 8)."""
    g = node.grad_sum
    if isinstance(g, SparseVector):
        i, j = np.searchsorted(g.idx, (a, b))
        idx, values = needs_flat[g.idx[i:j]] - lo, g.values[i:j]
    else:
        values = g[a:b]  # type: ignore[index]
        keep = values != 0
        idx, values = needs_flat[a:b][keep] - lo, values[keep]
    if 3 * idx.size > 2 * (hi - lo):
        dense = np.zeros(hi - lo)
        dense[idx] = values
        return Partial(0.0, dense, node.weight_sum, 0.0, 0.0, 0)
    return Partial(0.0, SparseVector(idx, values, hi - lo), node.weight_sum, 0.0, 0.0, 0)


def _block_rows(b: Block, draw: Draw | None) -> np.ndarray | None:
    """The rows of block ``b`` a step sums over: None (all), or sorted indices (as
    :meth:`~..objective.LinearTraining.group_sums` draws them)."""
    if draw is None or draw.take is None:
        return None
    k = int(draw.take[b.index])
    rng = np.random.default_rng([*draw.seed, draw.step, b.index])
    return np.sort(rng.choice(b.n_rows, size=k, replace=False)) if k else np.zeros(0, dtype=np.int64)


def group_sums(shard: Shard, mem: dict[str, Any], objective: LinearTraining, draw: Draw | None,
               pull: Callable[[list[np.ndarray] | None], tuple[np.ndarray, int, int]]) -> tuple[Nodes, Nodes, int]:
    """Evaluate a group's blocks (all rows, or ``draw``'s) at the coefficients
    ``pull(used)`` brings (see :func:`pull_columns`): ``(leaves, scalars, bytes pulled)``,
    the leaves' gradients as sparse vectors in the group's compact numbering."""
    lay, obj = mem["layout"], objective.objective
    width = lay.width
    views = {}
    for b in shard.blocks:  # what each block evaluates: all of it, or its batch's rows and columns
        _, Xc, pos = mem["blocks"][b.index]
        rows = _block_rows(b, draw)
        views[b.index] = ((Xc, b.y, b.sample_weight, pos) if rows is None else
                          None if rows.size == 0 else _batch_view(b, Xc, pos, rows, lay.fit_intercept))
    batch = draw is not None and draw.take is not None
    xg, sent, received = pull([v[3] for v in views.values() if v is not None] if batch else None)
    leaves, scalars = {}, {}
    if "needs_flat" not in mem:
        mem["needs_flat"] = _flat(mem["needs"], width)
    n_compact = mem["needs_flat"].size
    for i, b in enumerate(shard.blocks):
        view = views[b.index]
        if view is None:  # no row of this block in the batch
            loss, grad, weight, pos = 0.0, np.zeros(0), 0.0, np.zeros(0, dtype=np.int64)
        else:
            X, y, w, pos = view
            try:
                with np.errstate(all="ignore"):  # (a mini-batch's columns differ every step: not kept)
                    loss, grad, weight = replace(obj, n_features=int(X.shape[1])).block_sums(xg[pos].ravel(), X, y, w)
            except Exception as err:
                raise _block_error(err, b) from err
        # the block's entries in the group's compact numbering (positions in ``needs``)
        idx = _flat(pos, width)
        bad = int(np.count_nonzero(~np.isfinite(grad)))
        leaves[0, b.index] = Partial(loss, SparseVector(idx, grad, n_compact), weight, 0.0, 0.0, 0)
        scalars[0, b.index] = Partial(loss, np.zeros(0), weight, 0.0, 0.0, int(i == 0), extras={"nonfinite": bad})
    return leaves, scalars, sent + received


def owner_parts(mem: dict[str, Any], node: Partial) -> list[Partial]:
    """A group's sum ``node`` (its compact numbering) cut into the owners' ranges
    (see :func:`_restrict`), one part per owner."""
    lay, width = mem["layout"], mem["layout"].width
    cut = mem["split"] * width
    return [_restrict(node, cut[o], cut[o + 1], mem["needs_flat"], *lay.flat_range(o)) for o in range(lay.n_owners)]


def sharded_eval(shard: Shard, scratch: GroupMemory, objective: LinearTraining, request: ShardedRequest,
                 tree: BlockTree) -> Nodes:
    """Phase 1 of a step on one group (see the module docstring): pull, evaluate, push.
    Returns the group's complete subtrees of ``tree`` carrying the loss and weight sums
    (and, in ``extras``: entries that are not finite, bytes pulled and pushed)."""
    wall0, t0 = time.time(), time.perf_counter()
    mem = owned_memory(scratch)
    leaves, scalars, pulled = group_sums(shard, mem, objective, request.draw, lambda used: pull_columns(
        mem, request.exchange, _owner_pull, request.version, used))
    # the group's subtrees summed in its compact numbering: dense arrays of its columns
    # where most are touched (no sorting of indices), sparse vectors where few are
    nodes = BlockTree(tree.n_blocks, tree.split_every, size=mem["needs_flat"].size).complete(leaves)
    parts = {key: owner_parts(mem, p) for key, p in nodes.items()}
    pushes = [(o, _owner_push, (mem["group"], request.version, {key: ps[o] for key, ps in parts.items()}))
              for o in range(mem["layout"].n_owners)]
    _, sent2, received2 = request.exchange.call(pushes)
    inject_faults(t0)
    dt = time.perf_counter() - t0
    moved = {"bytes_pulled": pulled, "bytes_pushed": sent2 + received2}
    out = {}
    for key, p in tree.complete(scalars).items():
        extras = dict(p.extras)
        if p.n_groups:
            extras.update(moved)
        out[key] = Partial(p.loss_sum, p.grad_sum, p.weight_sum, dt, dt, p.n_groups, wall0, wall0 + dt, extras)
    return out


def sharded_validate(shard: Shard, scratch: GroupMemory, objective: LinearTraining, request: ValidationRequest,
                     tree: BlockTree) -> Nodes:
    """The loss and weight sums of held-out blocks at the owners' parameters of
    ``request.version`` (a validation shard set's group: it pulls the rows its blocks
    touch, named each time, and sends nothing back)."""
    wall0, t0 = time.time(), time.perf_counter()
    mem = scratch.modes.get("validation")
    width = objective.objective.n_outputs
    if mem is None:
        lay = request.layout
        blocks = {b.index: _compact(b.X) for b in shard.blocks}
        needs = np.unique(np.concatenate([c for c, _ in blocks.values()] + [np.zeros(0, dtype=np.int64)]))
        if lay.fit_intercept:
            needs = np.append(needs, lay.n_features)
        cut = np.searchsorted(needs, np.asarray(lay.bounds))
        rows = [(needs[cut[o]:cut[o + 1]] - lay.bounds[o]).astype(np.int32) for o in range(lay.n_owners)]
        mem = scratch.modes["validation"] = {"blocks": blocks, "needs": needs, "rows": rows, "cut": cut}
    pulled, _, _ = request.exchange.call([(o, _owner_pull, (-1, request.version, r)) for o, r in
                                          enumerate(mem["rows"])])
    xg = np.concatenate(pulled) if pulled else np.zeros((0, width))
    scalars = {}
    for i, b in enumerate(shard.blocks):
        cols, Xc = mem["blocks"][b.index]
        full = np.append(cols, request.layout.n_features) if request.layout.fit_intercept else cols
        obj = replace(objective.objective, n_features=int(cols.size))
        with np.errstate(all="ignore"):
            loss, _, weight = obj.block_sums(xg[np.searchsorted(mem["needs"], full)].ravel(), Xc, b.y,
                                             b.sample_weight)
        scalars[0, b.index] = Partial(loss, np.zeros(0), weight, 0.0, 0.0, int(i == 0))
    dt = time.perf_counter() - t0
    return {k: Partial(p.loss_sum, p.grad_sum, p.weight_sum, dt, dt, p.n_groups, wall0, wall0 + dt)
            for k, p in tree.complete(scalars).items()}


# ------------------------------------------------------------------------ phase 2
def _stats(mem: dict[str, Any], pen: SlicePenalty, rule: UpdateRule | None = None) -> dict[str, Any]:
    """The scalars an owner reports of its gradient (when merged): largest entry (of
    the proximal gradient mapping with an L1 part), squared norm, non-finite entries."""
    g = mem["grad"]
    if g is None:
        return {}
    gsq = float(g @ g)
    out = {"gmax": Max(max(g.max(initial=0.0), -g.min(initial=0.0))), "gsq": gsq,
           "nonfinite": 0 if np.isfinite(gsq) else int(np.count_nonzero(~np.isfinite(g)))}
    if pen.has_l1 and rule is not None:
        lr = rule.optimizer.current_learning_rate(mem["state"])
        x = mem["x"]
        out["gmap"] = Max(np.max(np.abs((x - pen.prox(x - lr * g, lr)) / lr), initial=0.0))
    return out


def slice_penalty(mem: dict[str, Any], penalty_spec: Penalty) -> SlicePenalty:
    """The owner's :class:`SlicePenalty` (made once per penalty)."""
    if mem.get("penalty", (None,))[0] != penalty_spec:
        mem["penalty"] = (penalty_spec, SlicePenalty.of(penalty_spec, mem["layout"], mem["group"]))
    return mem["penalty"][1]


def merged_gradient(mem: dict[str, Any], pen: SlicePenalty, command: UpdateCommand | LbfgsCommand) -> np.ndarray:
    """The owner's slice of the gradient at its current parameters: what the groups
    pushed, merged in the block tree (``command.n_blocks``, ``split_every``), divided
    by the total weight, plus the L2 part (as ``LinearTraining.finish``)."""
    lo, hi = mem["layout"].flat_range(mem["group"])
    tree = BlockTree(command.n_blocks, command.split_every, size=hi - lo)
    root = tree.root(tree.merge(*mem["inbox"].values()))
    mem["inbox"] = {}
    root_grad = cast("np.ndarray", root.grad_sum)  # (the root's sums: dense)
    grad = np.zeros_like(mem["x"]) if root.weight_sum <= 0 else root_grad / root.weight_sum
    return pen.add_gradient(grad, mem["x"])


def sharded_update(shard: Shard, scratch: GroupMemory, penalty_spec: Penalty, command: UpdateCommand) -> Partial:
    """Phase 2 (or a backoff) on one owner; answers one :class:`~..runtime.reduce.Partial`
    whose ``extras`` hold its scalars (see :func:`_stats`; ``pen_x``, ``l1_x``: the
    penalty's values at the parameters evaluated)."""
    wall0, t0 = time.time(), time.perf_counter()
    from ..update import UpdateRule

    mem = owned_memory(scratch)
    pen = slice_penalty(mem, penalty_spec)
    extras: dict[str, Any] = {}
    if command.init is not None and mem["state"] is None:
        mem["state"] = command.init.init(mem["x"])
    if command.kind == "merge":
        mem["grad"] = grad = merged_gradient(mem, pen, command)
        mem["cand"] = (mem["x"], mem["state"], grad)
        extras.update(_stats(mem, pen, command.rule), pen_x=pen.value(mem["x"]), l1_x=pen.l1_value(mem["x"]),
                      count=Max(getattr(mem["state"], "count", 0)))
    if command.rule is not None:
        if command.kind == "backoff":
            if mem["good"] is None:
                raise ClusterError("a parameter shard has no accepted point to back off to")
            x, state, grad = mem["good"]
            accepted = False
        else:
            x, state, grad = mem["cand"]
            accepted = True
        new, new_state, _ = UpdateRule(command.rule.optimizer, pen).apply(x, grad, state)
        mem["pending"] = (int(command.version), new, new_state, accepted)
    dt = time.perf_counter() - t0
    return Partial(0.0, np.zeros(0), 0.0, dt, dt, 1, wall0, wall0 + dt, extras)


# ----------------------------------------------------------------- the slices
#: Entries of a slice sent to the driver at a time when a fit's result is assembled.
GATHER_CHUNK = 2**20


def sharded_slice(shard: Shard, scratch: GroupMemory, which: str, field: str | None = None, start: int | None = 0,
                  nonzero: bool = False) -> tuple[Any, int] | tuple[np.ndarray, np.ndarray] | np.ndarray:
    """Part of this owner's parameters: ``"current"`` (last evaluated), ``"pending"``
    (the update after it, if any), ``"good"`` (last accepted) or ``"base"`` (L-BFGS's
    last accepted point); their optimizer
    state's ``field`` (None: the parameters), :data:`GATHER_CHUNK` entries from
    ``start``.  With ``start=None``: the state with its arrays left out (None), and
    the slice's length.  ``nonzero``: ``(indices, values)`` of the chunk's non-zero
    entries (indices from ``start``)."""
    mem = owned_memory(scratch)
    x, state = mem["x"], mem["state"]
    if which == "pending" and mem["pending"] is not None:
        x, state = mem["pending"][1], mem["pending"][2]
    elif which == "good" and mem["good"] is not None:
        x, state = mem["good"][0], mem["good"][1]
    elif which == "base":  # L-BFGS: the last accepted point
        x, state = mem["lbfgs"]["base"], None
    if start is None:
        if isinstance(state, tuple) and hasattr(state, "_asdict"):
            state = type(state)(**{k: None if isinstance(v, np.ndarray) else v for k, v in state._asdict().items()})
        return state, x.size
    chunk = (x if field is None else getattr(state, field))[start:start + GATHER_CHUNK]
    if nonzero:
        at = np.flatnonzero(chunk)
        return at, chunk[at]
    return np.array(chunk, copy=True)


def sharded_memory(shard: Shard, scratch: GroupMemory) -> dict[str, Any]:
    """What a checkpoint keeps of this owner: its version, slices and states."""
    from ..runtime.group_steps import _host

    mem = owned_memory(scratch)
    return _host({k: mem.get(k) for k in ("version", "x", "state", "good", "cand", "pending", "grad", "lbfgs")})


def sharded_restore(shard: Shard, scratch: GroupMemory, memory: dict[str, Any]) -> None:
    """Give this owner what :func:`sharded_memory` kept (after :func:`sharded_setup`)."""
    mem = owned_memory(scratch)
    mem.update({k: memory.get(k) for k in ("version", "x", "state", "good", "cand", "pending", "grad", "lbfgs")})
    if mem["lbfgs"] is None:
        del mem["lbfgs"]
    mem["inbox"] = {}
