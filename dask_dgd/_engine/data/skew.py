"""Data skew: measure the load of every worker, repartition and place blocks for it,
and follow uneven workers during training.

Synchronous steps wait for the most loaded worker, so skew is paid on every step.  The
cost of a block is what a step spends on it: rows x columns for dense blocks, non-zeros
(+ rows) for sparse ones.  A worker's load is the cost of its blocks divided by its
speed; skew is max / mean load.

At setup (:func:`plan`), with ``rebalance="auto"``:

1. blocks stay where Dask put them unless a worker would be more than 10% over its
   share (:func:`place_blocks`, largest blocks first);
2. if that cannot bring max/mean to :data:`SKEW_THRESHOLD` or below because a block
   is larger than a share, or at least half the blocks are tiny or empty, the data is
   rechunked into near-equal-cost blocks (``dask.array.rechunk``: oversized blocks are
   split, tiny and empty ones merged) and placed again, provided moving the data costs
   less than the time the better balance saves over the fit's ``max_iter`` passes
   (dask config ``dgd.move-bytes-per-second`` and ``dgd.read-bytes-per-second``).

``rebalance=True`` always rechunks and places; ``False`` leaves every block where it is.

During synchronous training (:class:`DynamicBalancer`) the measured compute time of
each group gives each worker's speed; when placing the blocks by speed would shorten
the step by more than 10%, blocks move toward the faster workers.  Sums follow the
block tree, so moving blocks never changes a result.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

import dask
import numpy as np

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    import numpy.typing as npt

    from ..protocols import GroupedShards

__all__ = [
    "SKEW_THRESHOLD",
    "DynamicBalancer",
    "balanced_chunks",
    "even_blocks",
    "groups_by_worker",
    "imbalance",
    "measure",
    "place_blocks",
    "plan",
    "worker_loads",
]

logger = logging.getLogger("dask_dgd")

#: ``rebalance="auto"`` acts when max/mean worker load exceeds this.
SKEW_THRESHOLD = 1.1
#: A block is tiny below this fraction of the mean block cost.
TINY_BLOCK = 0.1
#: Bytes per second a block moves between workers (measured: 0.8 GB in 4.7 s on a
#: 2-worker LocalCluster); dask config ``dgd.move-bytes-per-second``.
MOVE_BYTES_PER_SECOND = 170e6
#: Bytes per second a step reads on one worker (measured: 0.8 GB per 121 ms full-batch
#: step, and 51 ms per 0.4 GB of excess load, in the skew benchmark); dask config
#: ``dgd.read-bytes-per-second``.
READ_BYTES_PER_SECOND = 6.6e9
#: Seconds a step spends per block beyond its rows (the t_block of
#: docs/performance.md): what merging a tiny or empty block saves.
BLOCK_SECONDS = 3e-5
#: Dynamic balancing moves blocks when the predicted step is this much shorter.
DYNAMIC_GAIN = 0.1
#: ... and only when the slowest worker computes at least this long per step (dask
#: config ``dgd.dynamic-min-step-seconds``): shorter times are mostly noise, and a
#: move costs a restart of the step actors.
DYNAMIC_MIN_STEP_SECONDS = 0.02


# ------------------------------------------------------------------ placement arithmetic
PLACEMENT_SLACK = 0.1


def place_blocks(costs: Iterable[float], block_workers: Sequence[Iterable[str | None]], workers: Iterable[str],
                 slack: float = PLACEMENT_SLACK, speeds: Mapping[str, float] | None = None) -> list[str]:
    """Choose the worker of each block: where it already is, unless that unbalances.

    Blocks are taken largest first (ties by index); each goes to the least loaded of the
    workers holding it if that keeps the worker within ``(1 + slack)`` of its fair share
    of the total cost, and otherwise to the worker that would finish it first (the block
    then moves): longest-processing-time-first scheduling, with a preference for the
    data's current place.  Data Dask spread evenly never moves; data that sits on one
    worker is spread.  ``speeds`` (relative, per worker; default all 1) make a worker's
    load its cost divided by its speed and its fair share proportional to its speed.
    Depends only on the costs, the current holders and the speeds.

    Returns
    -------
    list of str
        The worker of each block, in block order.
    """
    workers = sorted(workers)
    rank = {w: i for i, w in enumerate(workers)}
    speed = dict.fromkeys(workers, 1.0)
    if speeds is not None:
        speed.update({w: float(v) for w, v in speeds.items() if w in speed and v > 0})
    costs = [float(c) for c in costs]
    total_speed = sum(speed.values())
    # the time the work takes when spread in proportion to the speeds
    ideal = sum(costs) / total_speed
    load = dict.fromkeys(workers, 0.0)  # cost held, divided by speed: time
    chosen: list[str] = [None] * len(costs)  # type: ignore[list-item]  # (every block's is set below)
    for b in sorted(range(len(costs)), key=lambda b: (-costs[b], b)):

        def finish(w: str, b: int = b) -> tuple[float, int]:
            return (load[w] + costs[b] / speed[w], rank[w])

        best = min(workers, key=finish)
        local = sorted((w for w in block_workers[b] if w in rank), key=finish)
        if local and finish(local[0])[0] <= max(ideal * (1 + slack), finish(best)[0]):
            w = local[0]
        else:
            w = best
        chosen[b] = w
        load[w] += costs[b] / speed[w]
    return chosen


def worker_loads(costs: Iterable[float], placement: Iterable[str | None], workers: Iterable[str],
                 speeds: Mapping[str, float] | None = None) -> dict[str, float]:
    """Time-like load of every worker: the cost of its blocks over its speed."""
    load = dict.fromkeys(sorted(workers), 0.0)
    for c, w in zip(costs, placement):
        if w in load:
            load[w] += float(c) / (1.0 if speeds is None else float(speeds.get(w, 1.0)))
    return load


def imbalance(loads: dict[str, float] | Iterable[float]) -> float:
    """max / mean of the loads (1 is perfect balance; 1 when there is no work)."""
    values = list(loads.values()) if isinstance(loads, dict) else list(loads)
    mean = sum(values) / len(values) if values else 0.0
    return max(values) / mean if mean > 0 else 1.0


def balanced_chunks(rows: npt.ArrayLike, costs: npt.ArrayLike, n_blocks: int) -> tuple[int, ...]:
    """Row chunks of ``n_blocks`` contiguous blocks of near-equal cost.

    The cost of a block is taken as spread evenly over its rows (rows for dense data,
    non-zeros for sparse); cuts fall at the rows where the cumulative cost crosses
    ``k / n_blocks`` of the total.  Empty input rows give empty blocks only if there
    are fewer rows than blocks.
    """
    rows = np.asarray(rows, dtype=np.int64)
    costs = np.asarray(costs, dtype=np.float64)
    total_rows = int(rows.sum())
    n_blocks = max(1, min(int(n_blocks), total_rows)) if total_rows else 1
    # cumulative cost at the block boundaries (rows), interpolated linearly inside blocks
    edges_rows = np.concatenate([[0], np.cumsum(rows)])
    edges_cost = np.concatenate([[0.0], np.cumsum(np.where(rows > 0, costs, 0.0))])
    if edges_cost[-1] <= 0:
        edges_cost = edges_rows.astype(np.float64)
    targets = edges_cost[-1] * np.arange(1, n_blocks) / n_blocks
    cuts = np.interp(targets, edges_cost, edges_rows).round().astype(np.int64)
    bounds = np.concatenate([[0], np.clip(cuts, 0, total_rows), [total_rows]])
    # no empty block (there are at least as many rows as blocks): every cut at least one
    # row after the previous and one before the next (happens when a few rows hold
    # most of the cost)
    for i in range(1, n_blocks):
        bounds[i] = max(bounds[i], bounds[i - 1] + 1)
    for i in range(n_blocks - 1, 0, -1):
        bounds[i] = min(bounds[i], bounds[i + 1] - 1)
    return tuple(int(c) for c in np.diff(bounds))


def groups_by_worker(placement: Sequence[str | None],
                     workers: Iterable[str]) -> tuple[list[tuple[int, ...]], list[str]]:
    """Block indices of each worker that got blocks (ascending), and those workers."""
    groups, owners = [], []
    for w in sorted(workers):
        blocks = tuple(b for b, p in enumerate(placement) if p == w)
        if blocks:
            groups.append(blocks)
            owners.append(w)
    return groups, owners


def even_blocks(n_rows: int, n_blocks: int) -> list[tuple[np.int64, np.int64]]:
    """Row boundaries of ``n_blocks`` near-equal contiguous blocks."""
    n_blocks = max(1, min(n_blocks, n_rows)) if n_rows else 1
    edges = np.linspace(0, n_rows, n_blocks + 1).round().astype(np.int64)
    return list(zip(edges[:-1], edges[1:]))


# ------------------------------------------------------------------ setup

def measure(costs: Iterable[float], placement: Iterable[str | None],
            workers: Iterable[str]) -> tuple[dict[str, float], float]:
    """Loads of the workers for a placement, and their max/mean."""
    loads = worker_loads(costs, placement, workers)
    return loads, imbalance(loads)


def plan(rows: Sequence[int], costs: Sequence[float], nbytes: Sequence[int], holders: Sequence[Sequence[str]],
         workers: Sequence[str], *, rebalance: bool | str, passes: int) -> tuple[str, list[str] | None, dict[str, Any]]:
    """Decide what to do with the blocks at setup.

    Parameters
    ----------
    rows, costs, nbytes : sequences
        Per block: rows, cost and bytes (X, y and weights).
    holders : list of tuple of str
        Workers holding each block.
    workers : list of str
    rebalance : "auto", True or False
    passes : int
        Passes over the data the fit may make (its ``max_iter``): the horizon over which
        moving data must pay off.

    Returns
    -------
    action : {"none", "placed", "rechunk"}
    placement : list of str or None
        The worker of each block (None when the data must be rechunked first).
    report : dict
        Measurements (see :func:`report`).
    """
    known = set(workers)
    current = [next((w for w in h if w in known), None) for h in holders]
    if any(w is None for w in current):  # held by no current worker: place those
        placed0 = place_blocks(costs, [h if w is None else (w,) for h, w in zip(holders, current)], workers)
        current = [w if w is not None else p for w, p in zip(current, placed0)]
    loads0, skew0 = measure(costs, current, workers)
    info: dict[str, Any] = {
        "n_blocks_in": len(rows),
        "empty_blocks_in": int(sum(1 for r in rows if r == 0)),
        "worker_load_before": loads0,
        "imbalance_before": skew0,
    }
    if rebalance is False:
        return "none", current, info  # type: ignore[return-value]  # (every block has its worker now)
    placed = place_blocks(costs, holders, workers)
    loads1, skew1 = measure(costs, placed, workers)
    total = float(sum(costs))
    mean_cost = total / len(costs) if len(costs) else 0.0
    tiny = sum(1 for c in costs if c < TINY_BLOCK * mean_cost)
    share = total / len(workers) if workers else 0.0
    oversized = any(c > (1 + PLACEMENT_SLACK) * share for c in costs)
    # Blocks no larger than a share can be placed within one block of balance; only
    # oversized blocks or a majority of tiny ones are worth new chunks (which depend on
    # the number of workers, see the user guide's determinism note).
    need = rebalance is True or (skew1 > SKEW_THRESHOLD and oversized) or tiny >= len(costs) / 2
    if not need or len(workers) == 0:
        return "placed", placed, info
    if rebalance == "auto":
        # A pass saves the excess load of the most loaded worker (read at the read
        # speed) and the overhead of the merged blocks.  The rechunk rewrites every
        # block whose boundaries change (a local copy, at the read speed) and moves the
        # excess of every worker over its share between workers (at the move speed).
        per_cost = float(sum(nbytes)) / total if total > 0 else 0.0
        new = balanced_chunks(rows, costs, n_balanced_blocks(rows, costs, len(workers)))
        kept = set(zip(np.cumsum((0,) + tuple(new))[:-1].tolist(), new))
        starts = np.cumsum([0] + list(rows))[:-1].tolist()
        rewritten = sum(b for b, s0, r in zip(nbytes, starts, rows) if r and (s0, r) not in kept)
        transfer = sum(max(0.0, load - share) for load in loads1.values()) * per_cost
        read_bw = float(dask.config.get("dgd.read-bytes-per-second", READ_BYTES_PER_SECOND))
        move_bw = float(dask.config.get("dgd.move-bytes-per-second", MOVE_BYTES_PER_SECOND))
        per_pass = (max(loads1.values()) - share) * per_cost / read_bw
        per_pass += tiny / len(workers) * BLOCK_SECONDS  # merged blocks' overhead
        info["rechunk_saves_seconds"] = passes * per_pass
        info["rechunk_costs_seconds"] = rewritten / read_bw + transfer / move_bw
        if info["rechunk_saves_seconds"] <= info["rechunk_costs_seconds"]:
            return "placed", placed, info
    return "rechunk", None, info


def n_balanced_blocks(rows: Sequence[int], costs: Sequence[float], n_workers: int) -> int:
    """How many blocks a rechunk makes: as many as the non-tiny blocks of the input,
    at least one per worker, rounded up to a multiple of the number of workers."""
    mean_cost = float(np.mean(costs)) if len(costs) else 0.0
    keep = sum(1 for r, c in zip(rows, costs) if r > 0 and c >= TINY_BLOCK * mean_cost)
    n = max(keep, n_workers, 1)
    return int(math.ceil(n / n_workers) * n_workers) if n_workers else n


def report(info: Mapping[str, Any], costs: Sequence[float] | npt.NDArray[np.float64], placement: Sequence[str | None],
           workers: Iterable[str], action: str, moved_blocks: int, moved_bytes: int, cost_kind: str) -> dict[str, Any]:
    """The ``skew_report_`` dict: what was measured and done at setup."""
    loads, skew = measure(costs, placement, workers)
    costs = np.asarray(costs, dtype=np.float64)
    mean = float(costs.mean()) if costs.size else 0.0
    out = {
        "cost": cost_kind,
        **info,
        "n_blocks": int(costs.size),
        "block_cost_max_mean": float(costs.max() / mean) if mean > 0 else 1.0,
        "worker_load_after": loads,
        "imbalance_after": skew,
        "action": action,
        "moved_blocks": int(moved_blocks),
        "moved_bytes": int(moved_bytes),
        "dynamic": [],
    }
    logger.info(
        "data skew: max/mean worker load %.2f before, %.2f after (%s; %d of %d blocks moved, "
        "%d blocks now)", out["imbalance_before"], skew, action, moved_blocks,
        out["n_blocks_in"], out["n_blocks"],
    )
    return out


class DynamicBalancer:
    """Moves blocks toward faster workers during synchronous training.

    Each step's per-group compute times (actor steps only) and the work each group did
    are accumulated; at step ``first`` and then every ``every`` steps, each worker's
    speed is its work per second; the blocks are placed by speed
    (:func:`place_blocks`) and moved if that shortens the predicted step by
    more than :data:`DYNAMIC_GAIN`.  The first step is left out (it loads the block
    kernel in every worker process).
    """

    def __init__(self, shards: GroupedShards, first: int = 4, every: int = 20) -> None:
        self.shards = shards
        self.first = first
        self.every = every
        self._reset()

    def _reset(self) -> None:
        self.work: dict[str, float] = {}
        self.seconds: dict[str, float] = {}
        self.steps = 0

    def observe(self, step: int, block_work: npt.NDArray[np.float64]) -> dict[str, Any] | None:
        """Account one step; ``block_work`` is the work of each block in it."""
        times = self.shards.collective.last_group_times
        if times is None or step < 2:
            return None
        for blocks, w, t in zip(self.shards.groups, self.shards.workers, times):  # (on a cluster: addresses)
            self.work[w] = self.work.get(w, 0.0) + float(sum(block_work[b] for b in blocks))
            self.seconds[w] = self.seconds.get(w, 0.0) + float(t)
        self.steps += 1
        if step == self.first or (step > self.first and (step - self.first) % self.every == 0):
            return self._check(step)
        return None

    def _check(self, step: int) -> dict[str, Any] | None:
        shards = self.shards
        speeds = {w: self.work[w] / self.seconds[w] for w in self.work if self.seconds[w] > 0 and self.work[w] > 0}
        slowest = max(self.seconds.values(), default=0.0) / max(self.steps, 1)
        self._reset()
        floor = float(dask.config.get("dgd.dynamic-min-step-seconds", DYNAMIC_MIN_STEP_SECONDS))
        if slowest < floor:
            return None
        workers: list[str] = shards.executor.workers()
        if len(speeds) < 1 or len(workers) < 2:
            return None
        typical = float(np.median(list(speeds.values())))
        speeds = {w: speeds.get(w, typical) for w in workers}  # idle workers: typical speed
        costs = shards.block_costs
        now = shards.placement()
        holders = [(w,) for w in now]
        new = place_blocks(costs, holders, workers, speeds=speeds)
        before = max(worker_loads(costs, now, workers, speeds).values())
        after = max(worker_loads(costs, new, workers, speeds).values())
        if not (after < (1 - DYNAMIC_GAIN) * before):
            return None
        moved = shards.collective.regroup(new)
        entry: dict[str, Any] = {
            "step": int(step),
            "speeds": {w: float(v / typical) for w, v in speeds.items()},
            "predicted_step_ratio": float(after / before),
            "moved_blocks": int(moved),
            "rows_per_worker": {
                w: int(sum(shards.block_rows[b] for b, x in enumerate(new) if x == w)) for w in workers
            },
        }
        if shards.skew_report is not None:
            shards.skew_report["dynamic"].append(entry)
        logger.info(
            "dynamic balancing at step %d: relative worker speeds %s; %d blocks moved, "
            "predicted step %.2fx", step,
            {w: round(v, 2) for w, v in entry["speeds"].items()}, moved, entry["predicted_step_ratio"],
        )
        return entry
