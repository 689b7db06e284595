"""Sharded parameters, worker side of ``solver="online"``: compiled passes on compact copies.

A round of :class:`~.driver.ShardedOnline` is two calls down and up the runner tree,
each carrying only scalars to the driver:

1. :func:`sharded_pass`: every group *pulls* from each owner the coefficients of the
   columns its blocks touch (the rows it registered at
   :func:`~.params.sharded_setup`), runs the compiled pass of
   :func:`~..modes.online.run_pass` on its blocks renumbered to those columns (a
   compact model of its columns only: its rule state, AdaGrad accumulators and feature
   scales, is kept in that numbering between rounds; with micro-batches it pulls only
   the columns of the round's drawn rows), and *pushes* each owner the part
   of its change in the owner's range: the entries it touched, ``n_g * delta`` (plain
   SGD) or ``cw * delta`` and ``cw`` (the adaptive rules), as
   :func:`~..modes.online.change_vector` sends them unsharded.
2. :func:`online_average`: every owner sums what the groups pushed in the groups' tree
   (the unsharded round's additions, restricted to its range: the same bits), and
   averages its slice as the driver averages the whole vector unsharded
   (:func:`~dask_dgd.losses._online.average_changes`, with the round's weight and
   decay sums, scalars the driver got from phase 1).  The new slice is pending: the
   next round's first pull commits it (the round's start becomes the point a
   divergence goes back to), and a rejected round leaves it uncommitted.

The pulls, the pushes and the commit are :mod:`.params`'s (:func:`~.params.pull_columns`,
:func:`~.params._owner_pull`, :func:`~.params._commit`).  This module imports no Dask
at import time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import scipy.sparse as sp

from ...exceptions import ClusterError
from ...losses._online import average_changes
from ..modes.online import _draw_rows, pass_partial, run_pass
from ..runtime.reduce import BlockTree, Partial, SparseVector
from .params import _flat, _owner_pull, owned_memory, pull_columns, slice_penalty

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ...losses import Penalty
    from ...losses._online import OnlineRule
    from ..data.blocks import Shard
    from ..objective import LinearTraining
    from ..runtime.group_steps import Draw, GroupMemory
    from .exchange import ActorExchange, LocalExchange

__all__ = ["OnlineAverage", "OnlineRound", "online_average", "online_keep", "online_undo", "sharded_pass"]


@dataclass(frozen=True)
class OnlineRound:
    """Phase 1 of a round: pull the owners' parameters of ``version``, push the
    changes tagged ``attempt`` (the driver's count of rounds tried)."""

    version: int
    attempt: int
    exchange: ActorExchange | LocalExchange


@dataclass(frozen=True)
class OnlineAverage:
    """Phase 2 of a round: average the changes pushed in ``attempt`` into the pending
    parameters of ``version`` (``average``, ``weight``, ``scale_sum``: as
    :func:`~dask_dgd.losses._online.average_changes` takes them), the changes summed in
    the groups' tree of fan-in ``split_every`` (the unsharded round's)."""

    version: int
    attempt: int
    average: str
    weight: float
    scale_sum: float
    split_every: int


def _compact_blocks(shard: Shard, mem: dict[str, Any]) -> dict[int, sp.csr_matrix]:
    """The group's blocks with their columns renumbered to the group's compact
    numbering (positions in ``mem["needs"]``; the same entries in the same order),
    made once per setup."""
    blocks = mem.get("online_blocks")
    if blocks is None:
        n_cols = int(mem["needs"].size) - int(mem["layout"].fit_intercept)
        blocks = {}
        for b in shard.blocks:
            _, Xc, pos = mem["blocks"][b.index]
            indices = pos[: Xc.shape[1]][Xc.indices].astype(Xc.indices.dtype, copy=False)
            blocks[b.index] = sp.csr_matrix((Xc.data, indices, Xc.indptr), shape=(Xc.shape[0], n_cols))
        mem["online_blocks"] = blocks
    return blocks


def _owner_changes(shard: Shard | None, scratch: GroupMemory, group: int, attempt: int, idx: np.ndarray,
                   values: tuple[np.ndarray, ...]) -> None:
    """Keep a group's change in this owner's range (``idx`` from the owner's first entry)."""
    owned_memory(scratch).setdefault("online_inbox", {})[int(group)] = (int(attempt), idx, values)


def sharded_pass(shard: Shard, scratch: GroupMemory, objective: LinearTraining, rule: OnlineRule,
                 request: OnlineRound, reset: bool, round_: int, draws: Sequence[Draw] | None,
                 seed: tuple[int, ...], limit: float, weight_scale: float) -> Partial:
    """Phase 1 of a round on one group (see the module docstring): pull, pass, push.
    Answers :func:`~..modes.online.pass_partial`'s scalars (no vector: the owners have
    the changes), with the bytes pulled and pushed; a group whose pass diverged pushes
    nothing (the driver rejects the round)."""
    wall0, t0 = time.time(), time.perf_counter()
    mem = owned_memory(scratch)
    lay = mem["layout"]
    blocks = _compact_blocks(shard, mem)
    used = None  # per-row passes: every column the group's blocks touch
    if draws is not None:  # micro-batches: only their rows' columns (the others are never read)
        used = [np.unique(blocks[b.index][rows].indices) for draw in draws for b, rows in _draw_rows(shard, draw)]
        if lay.fit_intercept:
            used.append(np.array([mem["needs"].size - 1]))
    xg, sent, received = pull_columns(mem, request.exchange, _owner_pull, request.version, used)
    obj = replace(objective.objective, n_features=int(mem["needs"].size) - int(lay.fit_intercept))
    change, status, rate = run_pass(shard, scratch, obj, objective.penalty_spec.l2_strength, rule, xg.ravel(), reset,
                                    round_, draws, seed, limit, weight_scale, mem.setdefault("online_buffers", {}),
                                    lambda b: blocks[b.index])
    pushed = 0
    if status == 0:
        if "needs_flat" not in mem:
            mem["needs_flat"] = _flat(mem["needs"], lay.width)
        at = mem["needs_flat"][change.idx]  # the entries' flat indices (ascending, as change.idx)
        values = ((change.weight_sum * change.delta,) if rule.average == "samples" else
                  (change.cw * change.delta, change.cw))
        starts = [lay.flat_range(o)[0] for o in range(lay.n_owners)]
        cut = np.searchsorted(at, [*starts, lay.n_params])
        calls = [(o, _owner_changes, (mem["group"], request.attempt, at[cut[o]:cut[o + 1]] - starts[o],
                                      tuple(v[cut[o]:cut[o + 1]] for v in values))) for o in range(lay.n_owners)]
        _, up, down = request.exchange.call(calls)
        pushed = up + down
    part = pass_partial(shard, change, status, rate, np.zeros(0), t0, wall0)
    part.extras.update(bytes_pulled=sent + received, bytes_pushed=pushed)
    return part


def online_average(shard: Shard, scratch: GroupMemory, penalty_spec: Penalty, command: OnlineAverage) -> Partial:
    """Phase 2 on one owner: the groups' changes summed in the groups' tree (the
    additions of the unsharded round's sum, restricted to this owner's range), its
    slice averaged into the pending parameters of ``command.version``.  Answers, in
    ``extras``: the new slice's non-finite entries (``nonfinite``), its squared
    distance from the round's start (``move_sq``) and its L2 penalty (``pen``)."""
    wall0, t0 = time.time(), time.perf_counter()
    mem = owned_memory(scratch)
    pen = slice_penalty(mem, penalty_spec)
    x = mem["x"]
    n_groups = mem["layout"].n_owners
    inbox = mem.pop("online_inbox", {})
    fresh = sorted(g for g, (attempt, _, _) in inbox.items() if attempt == command.attempt)
    if fresh != list(range(n_groups)):
        raise ClusterError(f"a parameter shard received the round's changes of {len(fresh)} of {n_groups} groups; "
                           "fit again, or resume from a checkpoint")
    n = x.size
    size = n if command.average == "samples" else 2 * n  # (as change_vector's: [cw * delta, cw] for the adaptive rules)
    leaves = []
    for g in fresh:
        _, idx, values = inbox[g]
        if command.average != "samples":
            idx, values = np.concatenate([idx, idx + n]), np.concatenate(values)
        else:
            values = values[0]
        leaves.append({(0, g): Partial(0.0, SparseVector(idx, values, size), 0.0, 0.0, 0.0, 0)})
    tree = BlockTree(n_groups, command.split_every, size=size)
    total = tree.root(tree.merge(*leaves), dense=False).grad_sum
    if isinstance(total, SparseVector):
        idx, values = total.entries()
    else:  # (the entries covered more than half the range: summed dense)
        dense = cast("np.ndarray", total)
        idx = np.flatnonzero(dense)
        values = dense[idx]
    avg = average_changes(x, pen.n_coef, command.average, idx, values, command.weight, command.scale_sum)
    _propose(mem, command.version, avg)
    d = avg - x
    extras = {"nonfinite": int(np.count_nonzero(~np.isfinite(avg))), "move_sq": float(d @ d), "pen": pen.value(avg)}
    dt = time.perf_counter() - t0
    return Partial(0.0, np.zeros(0), 0.0, dt, dt, 1, wall0, wall0 + dt, extras)


def _propose(mem: dict[str, Any], version: int, new: np.ndarray) -> None:
    """Make ``new`` the owner's pending parameters of ``version``: the next round's
    first pull makes them current (:func:`~.params._commit`), and the round's start the
    point to go back to."""
    with mem["lock"]:
        mem["cand"] = (mem["x"], None, None)
        mem["pending"] = (int(version), new, None, True)


def online_keep(shard: Shard, scratch: GroupMemory, penalty_spec: Penalty, version: int) -> Partial:
    """An accepted round that moved nothing (its rows all weighed zero): the owner's
    parameters again, as the pending ones of ``version`` (its start becomes the point
    to go back to, as after any accepted round)."""
    mem = owned_memory(scratch)
    _propose(mem, version, mem["x"])
    return Partial(0.0, np.zeros(0), 0.0, 0.0, 0.0, 1)


def online_undo(shard: Shard, scratch: GroupMemory, penalty_spec: Penalty, version: int) -> Partial:
    """Go back to the start of the last accepted round (the round after it diverged
    at its own start), as version ``version``; answers its L2 penalty (``pen``)."""
    mem = owned_memory(scratch)
    if mem["good"] is None:
        raise ClusterError("a parameter shard has no accepted round to go back to")
    with mem["lock"]:
        mem.update(version=int(version), x=mem["good"][0], good=None, pending=None, cand=None)
    return Partial(0.0, np.zeros(0), 0.0, 0.0, 0.0, 1, extras={"pen": slice_penalty(mem, penalty_spec).value(mem["x"])})
