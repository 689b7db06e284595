"""Asynchronous training over sharded parameters, worker side: the owners are the server.

With ``param_sharding`` and ``mode="async"`` no actor holds the parameters.  Each
group's runner owns its slice (as in the synchronous mode, :mod:`.params`) and is
also that slice's parameter server: it keeps every group's latest gradient slice and
the optimizer state of its entries, and applies an update on every push it receives.
A coordinator (:class:`~..modes.server.ShardedCore` on scalars) keeps the clocks, the
staleness bound, the stopping rules, the records and the divergence backoff (the
shared :class:`~..update.Guard`); it never sees a vector.  The owners never halve a
learning rate themselves: they report non-finite entries, and update with the
coordinator's optimizer.

One group's loop (:func:`sharded_async_loop`): ask the coordinator for its go (the
staleness bound, a stop, a backoff), pull from each owner the coefficients its draw's
columns need, evaluate, push each owner its part of the group's gradient sum (the
owner updates at once, along the weighted mean of every group's latest slice: the
incremental aggregated gradient of the unsharded server, summed in group order), and
report the loss and weight sums and the owners' penalty values to the coordinator.

Owners apply pushes as they come, so the slices are at different update counts: each
owner measures a push's ``delay`` as its own updates between that group's pull and
its push (``staleness_scaling`` divides by ``1 + delay``).  A backoff (non-finite sums,
an exploded objective) reaches each owner with the next pull or push carrying the
coordinator's new count of backoffs (``Ticket.rollbacks``): the owner returns to its
*mark*, the copy of its slice it took when it first heard of the coordinator's best
objective so far, and forgets the groups' slices; pushes computed before the backoff
are dropped.  The mark is taken when the owner hears of the best point, not at it, so
a backoff returns near that point, not exactly to it.

Owner calls run on the worker's event loop (``GroupRunner.exchange``), one at a time,
so an owner's memory needs no lock; an update is one pass over the owner's slice.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..runtime.faults import inject_faults
from ..runtime.reduce import Partial, SparseVector, add_partials
from .params import Ticket, group_sums, owned_memory, owner_parts, pull_columns, slice_penalty

if TYPE_CHECKING:
    from ..data.blocks import Shard
    from ..objective import LinearTraining, RowBatches
    from ..protocols import AsyncCoordinator
    from ..runtime.group_steps import GroupMemory
    from .exchange import ActorExchange, LocalExchange

__all__ = ["sharded_async_loop"]


def _server(mem: dict[str, Any], ticket: Ticket) -> dict[str, Any] | None:
    """The owner's server memory, brought up to ``ticket`` (a backoff: back to the
    mark; a new mark: a copy of the slice now).  None when ``ticket`` is older than a
    backoff the owner has made (a push computed before it)."""
    a = mem.get("async")
    if a is None:
        a = mem["async"] = {"latest": [None] * ticket.n_groups, "weights": np.zeros(ticket.n_groups),
                            "rollbacks": ticket.rollbacks, "mark": ticket.mark, "snap": (mem["x"], mem["state"]),
                            "updates": 0, "pulled_at": {}}
    if ticket.rollbacks < a["rollbacks"]:
        return None
    if ticket.rollbacks > a["rollbacks"]:
        mem["x"], mem["state"] = a["snap"]
        a.update(latest=[None] * ticket.n_groups, weights=np.zeros(ticket.n_groups), rollbacks=ticket.rollbacks,
                 mark=ticket.mark, pulled_at={})
    elif ticket.mark != a["mark"]:
        a.update(mark=ticket.mark, snap=(mem["x"], mem["state"]))  # updates replace the arrays: no copy needed
    return a


def _async_pull(shard: Shard | None, scratch: GroupMemory, group: int, ticket: Ticket,
                rows: np.ndarray | None = None) -> np.ndarray:
    """An owner's rows for ``group`` (those it registered, or ``rows``), noting its
    update count for the push's delay."""
    mem = owned_memory(scratch)
    a = _server(mem, ticket)
    if a is not None:
        a["pulled_at"][int(group)] = a["updates"]
    return mem["x"].reshape(-1, mem["layout"].width)[mem["rows"][int(group)] if rows is None else rows]


def _async_push(shard: Shard | None, scratch: GroupMemory, group: int, ticket: Ticket,
                part: Partial) -> dict[str, Any]:
    """Group ``group``'s part of its gradient sum: kept as the group's latest, then
    one update of the owner's slice along the weighted mean of every group's latest
    (plus the L2 part).  Answers the owner's scalars: its penalty values at the slice
    it updated from, the gradient's squared norm, the push's delay, whether the push was
    dropped (computed before a backoff), and non-finite entries (no update then)."""
    from ..update import UpdateRule

    mem = owned_memory(scratch)
    a = _server(mem, ticket)
    if a is None:
        return {"dropped": 1}
    g = int(group)
    delay = a["updates"] - a["pulled_at"].get(g, a["updates"])
    pen = slice_penalty(mem, ticket.penalty)
    x = mem["x"]
    out = {"pen": pen.value(x), "l1": pen.l1_value(x), "gsq": 0.0, "delay": int(delay), "dropped": 0,
           "nonfinite": 0}
    values = part.grad_sum.values if isinstance(part.grad_sum, SparseVector) else part.grad_sum
    bad = int(np.count_nonzero(~np.isfinite(values)))  # type: ignore[arg-type]  # (a push's sums: a SparseVector or dense)
    if bad:  # not kept: the coordinator backs off
        out["nonfinite"] = bad
        return out
    a["latest"][g], a["weights"][g] = part.grad_sum, float(part.weight_sum)
    weight = float(a["weights"].sum())
    if weight <= 0:
        return out
    total = np.zeros_like(x)
    for latest in a["latest"]:  # in group order: the sum does not depend on the order of arrival
        if isinstance(latest, SparseVector):
            total[latest.idx] += latest.values  # (a sparse vector's indices are distinct)
        elif latest is not None:
            total += latest
    grad = pen.add_gradient(total / weight, x)
    out["gsq"] = float(grad @ grad)
    if mem["state"] is None:
        mem["state"] = ticket.optimizer.init(x)
    scale = 1.0 / (1.0 + delay) if ticket.scaling else 1.0
    new, state, lr = UpdateRule(ticket.optimizer, pen).apply(x, grad, mem["state"], scale)
    if not np.all(np.isfinite(new)):
        out["nonfinite"] = int(np.count_nonzero(~np.isfinite(new)))
        return out
    mem["x"], mem["state"] = new, state
    a["updates"] += 1
    out["lr"] = float(lr)
    return out


def sharded_async_loop(shard: Shard, scratch_ref: GroupMemory | str | None,
                       coordinator: AsyncCoordinator, g: int, objective: LinearTraining,
                       batching: RowBatches | None, ticket0: Ticket, exchange: ActorExchange | LocalExchange) -> int:
    """Group ``g``'s loop (a long-running task; see the module docstring).  Its batches
    are those of the unsharded asynchronous mode (``batching.group_draw``); its
    memory (compacted blocks, registered rows, its own slice) is its runner's."""
    from ..runtime.executor import leave_thread_pool, runner_memory

    leave_thread_pool()
    mem = owned_memory(runner_memory(scratch_ref))
    msg, steps = None, 0
    while True:
        reply = coordinator.exchange(g, msg).result()
        if reply["stop"]:
            return steps
        t0 = time.perf_counter()
        ticket = replace(ticket0, rollbacks=reply["rollbacks"], mark=reply["mark"], optimizer=reply["optimizer"])
        draw = None if batching is None else batching.group_draw(shard, g, reply["clock"])
        leaves, scalars, pulled = group_sums(shard, mem, objective, draw,
                                             lambda used, t=ticket: pull_columns(mem, exchange, _async_pull, t, used))  # type: ignore[misc]
        total = add_partials(*leaves.values())
        parts = owner_parts(mem, total)
        answers, sent, received = exchange.call([(o, _async_push, (mem["group"], ticket, p))
                                                 for o, p in enumerate(parts)])
        inject_faults(t0)
        head = add_partials(*scalars.values())
        bad = int(head.extras.get("nonfinite", 0)) + sum(a.get("nonfinite", 0) for a in answers)
        sums = Partial(head.loss_sum, np.zeros(0), head.weight_sum, 0.0, 0.0, 1, extras={"nonfinite": bad})
        rows = shard.n_rows if batching is None else batching.draw_rows(shard, draw, sums)
        msg = {"version": reply["version"], "partial": sums, "rows": rows, "time": time.perf_counter() - t0,
               "wait": reply["wait"], "owners": answers, "up": sent + received, "down": pulled}
        steps += 1
