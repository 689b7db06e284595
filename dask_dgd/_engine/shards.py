"""Training data as shards: the row blocks each worker holds, kept where they are.

At setup the input (NumPy, SciPy sparse, dask array, dask DataFrame) is cut into row
*blocks* (the dask chunks, or even slices of an in-memory array).  Each block is given
to a worker (:func:`place_blocks`: where Dask already put it, unless that unbalances the
workers), and the blocks of one worker form its *group*, assembled once into a
:class:`Shard` on that worker; afterwards every step sends one call per shard, and only
the parameters travel.  Sums are reduced over a tree of the block indices
(:class:`~.reduce.BlockTree`), so their order is fixed by block, never by placement or
by the number of workers.
"""

import functools
import itertools
import math
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass

import array_api_compat
import numpy as np
import scipy.sparse as sp

from .._backend import asarray_like, dtype_name, finfo_max, get_namespace, is_sparse, take_rows, to_numpy
from ..exceptions import BlockError, ChunkingError, DGDError, InputError
from .reduce import BlockTree, Partial

__all__ = [
    "Block",
    "Shard",
    "ShardSet",
    "place_blocks",
    "worker_loads",
    "imbalance",
    "balanced_chunks",
    "groups_by_worker",
    "make_shard",
    "released_on_error",
    "releases_shards_on_error",
]


@dataclass(frozen=True)
class Block:
    """One row block: features, targets and optional sample weights."""

    index: int
    X: object
    y: object
    sample_weight: object = None

    @property
    def n_rows(self):
        return self.X.shape[0]


@dataclass(frozen=True)
class Shard:
    """The blocks of one group, in block order; lives in a worker's memory."""

    blocks: tuple

    @property
    def n_rows(self):
        return sum(b.n_rows for b in self.blocks)


# ----------------------------------------------------------------------------------------
# Functions that run on the workers (or in process).  Each takes a Shard first.


def _describe(block):
    return f"block {block.index} (shape {tuple(block.X.shape)})"


def _all_finite(a):
    if a is None:
        return True
    if is_sparse(a):
        a = a.data
    xp = get_namespace(a)
    return bool(xp.all(xp.isfinite(a)))


def _as_float(a, *, sparse_ok):
    """Cast a block to a floating dtype (float32 stays float32), CSR for sparse.

    NumPy blocks are also made C-contiguous and aligned: an array deserialised from the
    network can sit at an odd offset in its buffer, and NumPy then skips BLAS for a
    slower loop that sums in another order, so results would depend on the transfer.
    """
    if is_sparse(a):
        if not sparse_ok:
            raise InputError(f"y must be dense; got a sparse {type(a).__name__}")
        a = a.tocsr()
        if a.dtype.kind != "f":
            a = a.astype(np.float64)
        return a
    xp = get_namespace(a)
    if not xp.isdtype(a.dtype, "real floating"):
        a = xp.astype(a, xp.float64)
    if isinstance(a, np.ndarray):
        a = np.require(a, requirements="CA")
    return a


def _like_X(a, X):
    """A NumPy ``y`` or weight block moved to the namespace and device of a device
    ``X`` block (CuPy, CuPy sparse, ...): users pass host targets and weights freely."""
    if a is None or not isinstance(a, np.ndarray) or isinstance(X, np.ndarray) or sp.issparse(X):
        return a
    return asarray_like(a, X)


def make_shard(indices, xs, ys, sws, y_numeric=True):
    """Validate blocks and wrap them as a :class:`Shard` (runs where the data lives).

    ``indices`` are the blocks' indices (ascending), or the first index of a
    contiguous run.
    """
    if isinstance(indices, int):
        indices = range(indices, indices + len(xs))
    blocks = []
    for index, X, y, sw in zip(indices, xs, ys, sws):
        if X.ndim != 2:
            raise InputError(f"X must be 2-D; block {index} has shape {tuple(X.shape)}")
        X = _as_float(X, sparse_ok=True)
        if y_numeric:
            y = _as_float(_like_X(y, X), sparse_ok=False)
        if y.ndim != 1:
            raise InputError(
                f"y must be 1-D; block {index} of y has shape {tuple(y.shape)}; "
                "use y.ravel() for a column vector"
            )
        if y.shape[0] != X.shape[0]:
            raise InputError(
                f"X and y have different numbers of rows in block {index}: "
                f"X has {X.shape[0]}, y has {y.shape[0]}"
            )
        if sw is not None:
            sw = _as_float(_like_X(sw, X), sparse_ok=False)
        xp = get_namespace(X)
        if not is_sparse(X) and X.dtype != xp.float64:
            # float32 X: targets and weights in the same dtype once, not every step
            y = xp.astype(y, X.dtype) if y_numeric else y
            sw = None if sw is None else xp.astype(sw, X.dtype)
        if sw is not None:
            if sw.shape != y.shape:
                raise InputError(
                    f"sample_weight has shape {tuple(sw.shape)} in block {index}, "
                    f"expected ({X.shape[0]},)"
                )
        block = Block(index, X, y, sw)
        # X's finiteness is not checked here: that would be one more pass over all of
        # X per fit.  A non-finite X makes the first step's sums non-finite, and only
        # then does the engine run shard_check_finite to name the block.
        if getattr(y.dtype, "kind", "f") in "fc" and not _all_finite(y):
            raise InputError(
                f"Input y contains NaN or infinity in {_describe(block)}; drop those rows "
                "before fitting"
            )
        if sw is not None:
            xp = get_namespace(sw)
            if not _all_finite(sw) or bool(xp.any(sw < 0)):
                raise InputError(
                    f"sample_weight contains negative, NaN or infinite values in "
                    f"{_describe(block)}; weights must be finite and non-negative"
                )
        blocks.append(block)
    return Shard(tuple(blocks))


def shard_check_finite(shard):
    """Raise :class:`InputError` naming the first block of X with NaN or infinity.

    Run only when a step's sums came out non-finite (see :class:`Evaluator`): every
    NaN or infinity in X reaches the loss or the gradient (``0 * inf`` is NaN), so
    finite sums prove finite data without a separate pass over X.
    """
    for block in shard.blocks:
        if not _all_finite(block.X):
            raise InputError(
                f"Input X contains NaN or infinity in {_describe(block)}; drop or impute "
                "those rows before fitting"
            )


def max_abs_value(largest):
    """Largest magnitude accepted in X, y and sample_weight of a float dtype whose
    largest number is ``largest``: the power of ten below its cube root (1e102 for
    float64, 1e12 for float32), so that products of three such numbers (feature x
    coefficient x residual, the squares in the gradient's norm) stay finite."""
    return 10.0 ** math.floor(math.log10(largest) / 3)


def _abs_max(a):
    """Largest |value| of a dense or sparse block (NaN if it holds NaN; 0 if empty)."""
    if is_sparse(a):
        a = a.data
    if a.size == 0:
        return 0.0
    xp = get_namespace(a)
    return max(float(xp.max(a)), -float(xp.min(a)))


def check_block_values(block, labels=False):
    """Raise :class:`InputError` for NaN/inf in X, or for values of X, y (regressors)
    or sample_weight so large that the loss and its gradient overflow (one pass over
    the block, at setup; see :func:`max_abs_value`)."""
    parts = [("X", block.X, "scale the features (e.g. sklearn.preprocessing.StandardScaler, or other units)")]
    if not labels:
        parts.append(("y", block.y, "scale the target (e.g. divide it by its standard deviation, or other units)"))
    if block.sample_weight is not None:
        parts.append(("sample_weight", block.sample_weight, "divide the weights by their maximum (only their ratios matter)"))
    for name, a, fix in parts:
        big = _abs_max(a)
        if name == "X" and not math.isfinite(big):
            raise InputError(
                f"Input X contains NaN or infinity in {_describe(block)}; drop or impute "
                "those rows before fitting"
            )
        limit = max_abs_value(finfo_max(a.dtype, a))
        if big > limit:
            raise InputError(
                f"Input {name} has values up to {big:.3g} in absolute value in {_describe(block)}; "
                f"above {limit:.0e} ({dtype_name(a.dtype)}) the loss and its gradient overflow: {fix}"
            )


def _label_error(block_or_none, y, err):
    import pandas as pd

    where = "" if block_or_none is None else f" in {_describe(block_or_none)}"
    missing = np.flatnonzero(pd.isna(y)) if y.dtype == object else []
    if len(missing):
        rows = ", ".join(str(i) for i in missing[:5]) + (", ..." if len(missing) > 5 else "")
        return InputError(
            f"y has {len(missing)} missing label(s) (None or NaN){where}, at row(s) {rows}"
            f"{' of the block' if where else ''}; drop those rows or give them a class before "
            "fitting"
        )
    return InputError(
        f"y mixes label types that cannot be ordered{where} ({err}); use one type for all "
        "labels, e.g. y.astype(str)"
    )


def shard_summary(shard, labels=False):
    """Weight sum, and the weighted y sum and minimum of y, or the label counts.

    Also checks every block's values (:func:`check_block_values`): NaN/inf in X, and
    magnitudes that would overflow the loss."""
    out = {"weight_sum": 0.0, "wy_sum": 0.0, "y_min": math.inf}
    for b in shard.blocks:
        if b.n_rows == 0:
            continue
        check_block_values(b, labels)
        y = to_numpy(b.y)
        w = None if b.sample_weight is None else to_numpy(b.sample_weight)
        out["weight_sum"] += float(b.n_rows if w is None else w.sum())
        if not labels:
            out["wy_sum"] += float(y.sum() if w is None else w @ y)
            out["y_min"] = min(out["y_min"], float(y.min()))
    if labels:
        parts = [to_numpy(b.y) for b in shard.blocks if b.n_rows]
        y = np.concatenate(parts) if parts else np.array([])
        try:
            out["labels"], out["label_counts"] = np.unique(y, return_counts=True)
        except TypeError as err:  # None/NaN among object labels, or mixed types
            for b in shard.blocks:  # name the first block that cannot be sorted
                part = to_numpy(b.y)
                try:
                    np.unique(part)
                except TypeError:
                    raise _label_error(b, part, err) from err
            raise _label_error(None, y, err) from err
    return out


def encode_shard(shard, classes, class_weight=None):
    """Replace labels by their index in ``classes``; fold class weights into weights."""
    blocks = []
    for b in shard.blocks:
        y = to_numpy(b.y)
        codes = np.searchsorted(classes, y)
        codes = np.minimum(codes, len(classes) - 1)
        if y.size and not np.all(classes[codes] == y):
            bad = y[classes[codes] != y][:3]
            raise InputError(
                f"labels {bad.tolist()} in block {b.index} are not among classes "
                f"{classes.tolist()}"
            )
        sw = b.sample_weight
        y_new = codes.astype(np.float64)
        if class_weight is not None:
            cw = class_weight[codes]
            sw = cw if sw is None else to_numpy(sw) * cw
        if not sp.issparse(b.X):  # targets and weights in X's namespace, device and dtype
            y_new = asarray_like(y_new, b.X, dtype=b.X.dtype)
            if class_weight is not None:
                sw = asarray_like(sw, b.X, dtype=b.X.dtype)
        blocks.append(Block(b.index, b.X, y_new, sw))
    return Shard(tuple(blocks))


def shard_sample(shard, take):
    """Evenly spaced rows of each block, ``take[b]`` of block ``b``, as host arrays.

    Returns a list of ``(block index, X rows, y rows, sample weights)``; the driver
    puts them in block order, so the sample does not depend on placement.
    """
    out = []
    for b in shard.blocks:
        k = min(b.n_rows, int(take[b.index]))
        if k <= 0:
            continue
        rows = np.unique(np.linspace(0, b.n_rows - 1, k).round().astype(np.int64))
        sw = np.ones(len(rows)) if b.sample_weight is None else to_numpy(take_rows(b.sample_weight, rows))
        out.append((b.index, to_numpy(take_rows(b.X, rows)), to_numpy(take_rows(b.y, rows)), sw))
    return out


def _block_error(err, block):
    if isinstance(err, DGDError):
        return err
    return BlockError(f"{type(err).__name__} in {_describe(block)}: {err}")


#: Injected faults, per worker address (None outside a worker): a slowdown factor
#: and a countdown to a failure.  Set only through :mod:`dask_dgd.testing`.
_SLOWDOWN = {}
_FAILURES = {}


def set_slowdown(factor, dask_worker=None):
    """Make every group computation on this worker (``dask_worker``, which
    ``client.run`` fills in; None: outside any worker) sleep ``factor`` times its
    compute time afterwards (0 turns it off); returns the previous factor.

    A straggler for tests and benchmarks (see :func:`dask_dgd.testing.straggler`); it
    applies to every training mode alike.  Keyed by worker address, so it also works
    for the threads of an in-process LocalCluster.
    """
    key = None if dask_worker is None else dask_worker.address
    previous = _SLOWDOWN.pop(key, 0.0)
    if factor > 0:
        _SLOWDOWN[key] = float(factor)
    return previous


def set_failure(after, message, dask_worker=None):
    """Make the group computation number ``after + 1`` on this worker (and every later
    one) raise ``RuntimeError(message)``; ``after=None`` removes the fault."""
    key = None if dask_worker is None else dask_worker.address
    _FAILURES.pop(key, None)
    if after is not None:
        _FAILURES[key] = [int(after), str(message)]


def _worker_address():
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return None


def inject_faults(t0):
    """Apply this worker's injected faults to a computation that started at ``t0``:
    sleep its slowdown, or raise its failure."""
    if not (_SLOWDOWN or _FAILURES):
        return
    key = _worker_address()
    fault = _FAILURES.get(key)
    if fault is not None:
        if fault[0] <= 0:
            raise RuntimeError(fault[1])
        fault[0] -= 1
    factor = _SLOWDOWN.get(key, 0.0)
    if factor > 0:
        time.sleep(factor * (time.perf_counter() - t0))


def _group_nodes(sums, tree, wall0, t0):
    """The group's per-block sums as leaves of ``tree``, its complete subtrees summed.

    Every node carries the group's compute time and wall-clock stamps; one of them
    counts the group (``n_groups=1``), so the root counts the groups that took part.
    """
    inject_faults(t0)
    dt = time.perf_counter() - t0
    leaves = {
        (0, index): Partial(loss, grad, weight, dt, dt, int(i == 0), wall0, wall0 + dt)
        for i, (index, (loss, grad, weight)) in enumerate(sorted(sums.items()))
    }
    return tree.complete(leaves)


class _Placement:
    """The step's parameters moved to each device of a shard's blocks, once per device
    (NumPy and SciPy blocks read the host parameters directly)."""

    def __init__(self, objective, params):
        self.objective, self.params, self.moved = objective, params, {}

    def __call__(self, X):
        if isinstance(X, np.ndarray) or is_sparse(X):
            return None
        key = (type(X), str(array_api_compat.device(X)))
        if key not in self.moved:
            self.moved[key] = self.objective.place(self.params, X)
        return self.moved[key]


def shard_loss_grad(shard, objective, params, tree):
    """Full-batch sums of every block of the shard, reduced over ``tree`` as far as
    this shard's blocks allow (see :class:`~.reduce.BlockTree`)."""
    wall0, t0 = time.time(), time.perf_counter()
    sums = {}
    placed = _Placement(objective, params)
    for b in shard.blocks:
        try:
            with np.errstate(all="ignore"):  # non-finite sums are handled by the engine
                sums[b.index] = objective.block_sums(
                    params, b.X, b.y, b.sample_weight, placed=placed(b.X)
                )
        except Exception as err:
            raise _block_error(err, b) from err
    return _group_nodes(sums, tree, wall0, t0)


def batch_sums(shard, objective, params, seed, step, take):
    """Per-block sums ``{index: (loss, grad, weight)}`` over this step's sampled rows.

    ``take[b]`` rows of block ``b`` are drawn without replacement by a generator seeded
    with ``(seed, step, b)``, so the batch depends on the block, not on the worker;
    ``take=None`` uses every row.
    """
    sums = {}
    placed = _Placement(objective, params)
    for b in shard.blocks:
        rows = None
        if take is not None:
            k = int(take[b.index])
            if k == 0:
                sums[b.index] = (0.0, np.zeros(objective.n_params), 0.0)
                continue
            rng = np.random.default_rng([*seed, step, b.index])
            rows = np.sort(rng.choice(b.n_rows, size=k, replace=False))
        try:
            with np.errstate(all="ignore"):  # non-finite sums are handled by the engine
                sums[b.index] = objective.block_sums(
                    params, b.X, b.y, b.sample_weight, rows=rows, placed=placed(b.X)
                )
        except Exception as err:
            raise _block_error(err, b) from err
    return sums


def sum_in_block_order(sums, n_params):
    """``(loss, grad, weight)`` summed over a group's blocks, left to right."""
    loss, grad, weight = 0.0, np.zeros(n_params), 0.0
    for index in sorted(sums):
        l_, g_, w_ = sums[index]
        loss += float(l_)
        grad += to_numpy(g_)
        weight += float(w_)
    return loss, grad, weight


def shard_sums_compressed(shard, scratch, objective, params, seed, step, take, compressor, group_seed):
    """One step's sums of this group (all rows, or the ``take`` rows of each block), the
    gradient compressed (runs on the group's runner; ``scratch`` keeps the compressor's
    state, e.g. the error-feedback residual, from step to step).

    A non-finite gradient is sent raw and leaves the state alone, so the engine backs
    off and the residual is not poisoned.
    """
    wall0, t0 = time.time(), time.perf_counter()
    sums = batch_sums(shard, objective, params, seed, step, take)
    loss, grad, weight = sum_in_block_order(sums, objective.n_params)
    raw = 8 * grad.size
    if np.all(np.isfinite(grad)) and np.isfinite(loss):
        state = scratch.get("compression")
        if state is None:
            state = compressor.init(grad.size)
        # the group's own draws (its first block names it), different every step
        first = shard.blocks[0].index if shard.blocks else 0
        rng = np.random.default_rng([*group_seed, step, first])
        payload, state = compressor.compress(grad, state, rng)
        scratch["compression"] = state
        sent = compressor.nbytes(payload)
    else:
        payload, sent = {"raw": grad}, raw
    inject_faults(t0)
    dt = time.perf_counter() - t0
    return {
        "loss": loss, "weight": weight, "payload": payload, "raw_bytes": raw + 16,
        "sent_bytes": sent + 16, "time": dt, "start": wall0, "end": wall0 + dt,
    }


def shard_minibatch(shard, objective, params, seed, step, take, tree):
    """Sums over this step's sampled rows of each block (see :func:`batch_sums`)."""
    wall0, t0 = time.time(), time.perf_counter()
    sums = batch_sums(shard, objective, params, seed, step, take)
    return _group_nodes(sums, tree, wall0, t0)


def shard_block_nnz(shard):
    """Non-zeros of every block of the shard: ``{index: (rows, nnz)}`` (dense: rows x columns)."""
    out = {}
    for b in shard.blocks:
        nnz = b.X.nnz if is_sparse(b.X) else b.X.shape[0] * b.X.shape[1]
        out[b.index] = (b.n_rows, int(nnz))
    return out


def take_blocks(shard, indices):
    """The shard of only these blocks (runs where ``shard`` lives; shares the arrays)."""
    keep = set(indices)
    return Shard(tuple(b for b in shard.blocks if b.index in keep))


def _aligned(a):
    return np.require(a, requirements="CA") if isinstance(a, np.ndarray) else a


def combine_shards(*shards):
    """One shard of all these shards' blocks, in block order (runs on the new worker).

    Arrays that arrived over the network are made C-contiguous and aligned again, as at
    assembly, so that moved blocks sum exactly as they did before the move.
    """
    blocks = sorted((b for s in shards for b in s.blocks), key=lambda b: b.index)
    return Shard(tuple(
        Block(b.index, _aligned(b.X), _aligned(b.y), None if b.sample_weight is None else _aligned(b.sample_weight))
        for b in blocks
    ))


# ----------------------------------------------------------------------------------------
# Driver side.


#: Worker losses a step survives (each: shards recomputed, runners restarted, retry).
MAX_RECOVERIES = 3

#: A worker keeps the blocks it holds unless that puts it this far above an equal share.
PLACEMENT_SLACK = 0.1


def place_blocks(costs, block_workers, workers, slack=PLACEMENT_SLACK, speeds=None):
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
    speed = {w: 1.0 for w in workers}
    if speeds is not None:
        speed.update({w: float(v) for w, v in speeds.items() if w in speed and v > 0})
    costs = [float(c) for c in costs]
    total_speed = sum(speed.values())
    # the time the work takes when spread in proportion to the speeds
    ideal = sum(costs) / total_speed
    load = dict.fromkeys(workers, 0.0)  # cost held, divided by speed: time
    chosen = [None] * len(costs)
    for b in sorted(range(len(costs)), key=lambda b: (-costs[b], b)):

        def finish(w):
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


def worker_loads(costs, placement, workers, speeds=None):
    """Time-like load of every worker: the cost of its blocks over its speed."""
    load = dict.fromkeys(sorted(workers), 0.0)
    for c, w in zip(costs, placement):
        if w in load:
            load[w] += float(c) / (1.0 if speeds is None else float(speeds.get(w, 1.0)))
    return load


def imbalance(loads):
    """max / mean of the loads (1 is perfect balance; 1 when there is no work)."""
    values = list(loads.values()) if isinstance(loads, dict) else list(loads)
    mean = sum(values) / len(values) if values else 0.0
    return max(values) / mean if mean > 0 else 1.0


def balanced_chunks(rows, costs, n_blocks):
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


def groups_by_worker(placement, workers):
    """Block indices of each worker that got blocks (ascending), and those workers."""
    groups, owners = [], []
    for w in sorted(workers):
        blocks = tuple(b for b, p in enumerate(placement) if p == w)
        if blocks:
            groups.append(blocks)
            owners.append(w)
    return groups, owners


class ShardSet:
    """The shards of one fit, the executor that runs tasks on them, and their layout.

    Attributes
    ----------
    handles : list
        One handle per group (a ``Future`` on a cluster, the Shard itself in process).
    groups : list of tuple of int
        Block indices of each group.
    workers : list of str or None
        Worker address of each group (``None`` in process).
    block_rows : numpy.ndarray
        Rows of each block, in block order.
    """

    def __init__(self, executor, handles, groups, workers, block_rows, n_features, sparse):
        self.executor = executor
        self.handles = list(handles)
        self.groups = [tuple(g) for g in groups]
        self.workers = list(workers)
        self.block_rows = np.asarray(block_rows, dtype=np.int64)
        self.n_features = int(n_features)
        self.sparse = bool(sparse)
        self.token = uuid.uuid4().hex[:8]
        # numbers the map calls (shared with the ShardSets made by transform, which keep
        # the token): every call's task keys are new, see _call_token
        self._calls = itertools.count(1)
        #: cost of each block (rows x columns for dense blocks, non-zeros for sparse)
        self.block_costs = self.block_rows.astype(np.float64) * max(self.n_features, 1)
        self.skew_report = None  # set by build_shardset on a cluster
        self.last_group_times = None  # compute time of each group in the last actor step
        self._regroups = 0
        self.recoveries = []  # lost workers survived (see _call_runners)
        self._runners = None  # step actors, started on the first actor step
        self._scratch = None  # per-group memory in process (call_groups)
        #: futures of the fit's own copies of its input (e.g. computed partitions), let
        #: go of by :meth:`release` with the shards
        self.inputs = []

    @property
    def n_rows(self):
        return int(self.block_rows.sum())

    @property
    def n_groups(self):
        return len(self.handles)

    def _call_token(self):
        """The token of one call's task keys: this fit's token and the call's number.

        A key submitted again while the client still holds a future of it is not run
        again: ``Client.submit`` hands back the old task's result.  Fits differ by token;
        the number keeps two calls of one fit under one name (e.g. two row samples)
        apart, even before the client has processed the release of the first.
        """
        return f"{self.token}-{next(self._calls)}"

    def map(self, fn, *args, name):
        """Run ``fn(shard, *args)`` on every shard; returns handles in group order."""
        return self.executor.map_shards(fn, self.handles, self.workers, args, name, self._call_token())

    def gather(self, handles):
        return self.executor.gather(handles)

    def map_gather(self, fn, *args, name):
        return self.gather(self.map(fn, *args, name=name))

    def transform(self, fn, *args, name):
        """A new ShardSet whose shards are ``fn(shard, *args)``."""
        new = ShardSet(
            self.executor,
            self.map(fn, *args, name=name),
            self.groups,
            self.workers,
            self.block_rows,
            self.n_features,
            self.sparse,
        )
        new.token = self.token
        new._calls = self._calls  # same token: one numbering, no key of one in the other
        new.block_costs = self.block_costs
        new.skew_report = self.skew_report
        return new

    def placement(self):
        """The worker of every block, in block order."""
        out = [None] * len(self.block_rows)
        for blocks, w in zip(self.groups, self.workers):
            for b in blocks:
                out[b] = w
        return out

    def regroup(self, placement):
        """Move blocks so that block ``b`` lives on ``placement[b]``; returns the number
        of blocks moved.  Only the moved blocks travel (a piece of each old shard is cut
        where it lives, the pieces are combined on the new worker); the step actors are
        restarted on the next step.  Sums do not change: they follow the block tree."""
        if self.executor.kind != "dask":
            return 0
        old = self.placement()
        moved = sum(1 for b, w in enumerate(placement) if old[b] != w)
        if not moved:
            return 0
        where = {b: g for g, blocks in enumerate(self.groups) for b in blocks}
        ex = self.executor
        self._regroups += 1
        tag = f"{self.token}-{self._regroups}"
        new_groups, new_workers = groups_by_worker(placement, set(placement))
        handles = []
        for i, (blocks, w) in enumerate(zip(new_groups, new_workers)):
            by_old = {}
            for b in blocks:
                by_old.setdefault(where[b], []).append(b)
            if len(by_old) == 1:
                (g_old, bl), = by_old.items()
                if tuple(bl) == self.groups[g_old] and self.workers[g_old] == w:
                    handles.append(self.handles[g_old])  # unchanged group
                    continue
            pieces = [
                self.handles[g_old] if tuple(bl) == self.groups[g_old] else ex.submit_pinned(
                    take_blocks, self.handles[g_old], bl, worker=self.workers[g_old],
                    key=f"dgd-take-{tag}-{i}-{g_old}",
                )
                for g_old, bl in sorted(by_old.items())
            ]
            handles.append(ex.submit_pinned(combine_shards, *pieces, worker=w, key=f"dgd-shard-{tag}-{i}"))
        ex.wait(handles)
        self.handles, self.groups, self.workers = handles, [tuple(g) for g in new_groups], list(new_workers)
        self._release_runners()  # restarted on the next step
        self._scratch = None
        return moved

    def _release_runners(self):
        """Let go of the step actors now: the scheduler forgets their keys and the
        workers drop them, with the shard and scratch memory each holds.

        Dropping the proxies is not enough: a Dask actor proxy that has been called sits
        in a reference cycle (the closures of its calls), so only the garbage collector
        would release its key, at some later time.
        """
        runners, self._runners = self._runners, None
        if runners is not None:
            self.executor.release_runners(runners)

    def release(self):
        """Let go now of everything this ShardSet holds on the cluster: its step actors
        and its shards (idempotent; the ShardSet is unusable afterwards).

        For a fit that ends by an exception, KeyboardInterrupt included (see
        :func:`released_on_error`): its traceback keeps the fit's frames, and with
        them this ShardSet, alive, e.g. in ``sys.last_traceback`` of an interactive
        session.
        """
        self._release_runners()
        self._scratch = None
        handles, self.handles = self.handles, []
        inputs, self.inputs = self.inputs, []
        if self.executor.kind == "dask":
            self.executor.release([*handles, *inputs])

    def __del__(self):
        # the end of a fit: its actors go at once (see _release_runners)
        try:
            self._release_runners()
        except Exception:  # noqa: BLE001 - e.g. the client is closed; nothing to release
            pass

    def uses_runners(self, split_every, result_bytes):
        """Whether steps with these settings go through actors (cluster, actor transport)."""
        if self.executor.kind != "dask":
            return False
        from .cluster import step_transport

        return step_transport(self.n_groups, result_bytes, split_every) == "actor"

    def start_runners(self):
        """Start the step actors now (setup), if not started yet."""
        if self._runners is None:
            # a new key per layout: the old actors may not be forgotten yet
            token = f"{self.token}-{self._regroups}"
            self._runners = self.executor.start_runners(self.handles, self.workers, token)

    def _call_runners(self, fn, args, stateful=False, per_group=None):
        """Call every runner; if a worker holding one was lost, recover and retry.

        A lost worker takes its runner (and the runner's scratch memory) with it; Dask
        recomputes the lost shards from their persisted blocks on the remaining
        workers.  The shards are waited for, their new places recorded, every runner
        restarted (the groups' scratch memory starts afresh) and the call repeated
        with the same arguments, so a synchronous step gives the same sums as if
        nothing had happened.  Errors of the step itself are raised as they are.
        """
        for attempt in range(MAX_RECOVERIES + 1):
            try:
                self.start_runners()
                return self.executor.call_runners(self._runners, fn, args, stateful=stateful, per_group=per_group)
            except Exception as err:
                if attempt == MAX_RECOVERIES or not self._lost_a_worker(err):
                    raise
                self._recover()

    def _lost_a_worker(self, err):
        """Whether ``err`` came from losing a group's worker.  A connection error may
        arrive before the scheduler has noticed the loss: it is then given up to
        ``dgd.worker-loss-timeout`` seconds (10) to do so."""
        def lost():
            alive = set(self.executor.workers())
            return any(w not in alive for w in self.workers)

        connection = isinstance(err, OSError) or "Actor was lost" in str(err)
        if not connection:
            return lost()
        import dask

        deadline = time.monotonic() + float(dask.config.get("dgd.worker-loss-timeout", 10))
        while True:
            if lost():
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)

    def _recover(self):
        """Wait for the shards after a worker loss; restart the runners."""
        import logging

        lost = sorted({w for w in self.workers if w not in set(self.executor.workers())})
        try:
            self.executor.wait(self.handles)  # Dask recomputes the lost ones
            workers = self.executor.where(self.handles, self.workers)
        except Exception as err:
            from ..exceptions import ClusterError

            raise ClusterError(
                f"lost worker(s) {lost} held shards that cannot be recomputed ({type(err).__name__}): "
                "in-memory input is scattered to the workers and exists nowhere else; pass "
                "a dask array (e.g. da.from_array(X, chunks=...)) to survive worker loss"
            ) from err
        self.workers = workers
        self._regroups += 1  # new runner keys
        self._release_runners()
        self._scratch = None
        self.recoveries.append({"lost": lost, "workers": list(self.workers)})
        logging.getLogger("dask_dgd").warning(
            "lost worker(s) %s: shards recomputed on %s, step retried", lost, sorted(set(self.workers))
        )

    def call_groups(self, fn, *args, name, per_group=None):
        """``fn(shard, scratch, *args)`` on every group at once; results in group order.

        ``scratch`` is a dict that stays with the group for the life of this ShardSet
        (the :class:`~.cluster.GroupRunner` actor's memory on a cluster), e.g. an
        optimizer state that never travels.  Always goes through the group runners.
        ``per_group``: a tuple of extra arguments for each group (each group is sent
        only its own), appended after ``args``.
        """
        if self.executor.kind == "dask":
            return self._call_runners(fn, args, stateful=True, per_group=per_group)
        if self._scratch is None:
            self._scratch = [{} for _ in self.handles]
        extras = per_group if per_group is not None else [()] * len(self.handles)
        return [fn(h, scratch, *args, *extra) for h, scratch, extra in zip(self.handles, self._scratch, extras)]

    def map_reduce(self, fn, *args, split_every, name, result_bytes=0):
        """One step: ``fn(shard, *args, tree)`` on every shard, reduced to the root.

        ``fn`` returns the complete subtrees of the :class:`~.reduce.BlockTree` its
        shard holds.  On a cluster the transport is chosen by
        :func:`~.cluster.step_transport`: calls to one actor per shard, merged on the
        driver, or tasks merged by a tree of ``dgd-reduce`` tasks on the cluster.  The
        tree over blocks is the same either way, so is the result, bit for bit.
        """
        tree = BlockTree(len(self.block_rows), split_every)
        ex = self.executor
        if self.uses_runners(split_every, result_bytes):
            results = self._call_runners(fn, (*args, tree))
            self.last_group_times = [max(p.time_max for p in nodes.values()) for nodes in results]
            return tree.root(tree.merge(*results))
        self.last_group_times = None
        call = self._call_token()
        level = ex.map_shards(fn, self.handles, self.workers, (*args, tree), f"dgd-{name}", call)
        depth = 0
        while len(level) > split_every:
            level = ex.merge_level(tree, level, f"dgd-reduce-{name}-{call}-{depth}")
            depth += 1
        return tree.root(tree.merge(*self.gather(level)))


class InProcessExecutor:
    """Runs shard functions directly in this process (small in-memory fits)."""

    kind = "in-process"

    def map_shards(self, fn, handles, workers, args, name, token):
        return [fn(h, *args) for h in handles]

    def gather(self, handles):
        return list(handles)

    def merge_level(self, tree, items, name):
        k = tree.split_every
        return [tree.merge(*items[i : i + k]) for i in range(0, len(items), k)]

    def workers(self):
        return [None]


@contextmanager
def released_on_error(shards):
    """Release ``shards`` (:meth:`ShardSet.release`) when the block raises anything,
    KeyboardInterrupt included, and re-raise: an interrupted or failed fit leaves no
    shards, actors or tasks on the cluster, even while its traceback is kept."""
    try:
        yield shards
    except BaseException:
        shards.release()
        raise


def releases_shards_on_error(run):
    """Decorate a training loop whose first argument is the fit's :class:`ShardSet`, or
    an evaluator holding it as ``.shards``: when the loop raises anything,
    KeyboardInterrupt included, the shards are released (:func:`released_on_error`)."""

    @functools.wraps(run)
    def wrapper(first, *args, **kwargs):
        with released_on_error(getattr(first, "shards", first)):
            return run(first, *args, **kwargs)

    return wrapper


def in_process_shardset(X, y, sample_weight, y_numeric=True):
    """One shard holding the whole in-memory input as a single block."""
    shard = make_shard(0, [X], [y], [sample_weight], y_numeric=y_numeric)
    return ShardSet(
        InProcessExecutor(), [shard], [(0,)], [None], [X.shape[0]], X.shape[1], is_sparse(X)
    )


def even_blocks(n_rows, n_blocks):
    """Row boundaries of ``n_blocks`` near-equal contiguous blocks."""
    n_blocks = max(1, min(n_blocks, n_rows)) if n_rows else 1
    edges = np.linspace(0, n_rows, n_blocks + 1).round().astype(np.int64)
    return list(zip(edges[:-1], edges[1:]))


def check_finite_block(X, block_info=None):
    """``X`` unchanged, or :class:`InputError` naming the row block if it holds NaN or
    infinity (dask ``map_blocks`` at predict time, where the rows are not checked
    otherwise: a NaN row would silently become class 0 or a NaN prediction)."""
    if not _all_finite(X):
        where = ""
        if block_info and 0 in block_info:
            start, stop = block_info[0]["array-location"][0]
            where = f" in row block {block_info[0]['chunk-location'][0]}"
            if not (math.isnan(start) or math.isnan(stop)):  # unknown chunk sizes: no rows
                where += f" (rows {int(start)} to {int(stop) - 1})"
        raise InputError(
            f"Input X contains NaN or infinity{where}; predictions need finite features: "
            "drop or impute those rows"
        )
    return X


def check_chunking(X):
    """X must have a single chunk along columns (dask array)."""
    if X.ndim != 2:
        fix = "X.reshape(-1, 1) for a single feature" if X.ndim == 1 else "X.reshape(X.shape[0], -1) to flatten"
        raise InputError(
            f"X must be 2-D; got an array of shape {X.shape}: (n_samples, n_features) is "
            f"needed, use {fix}"
        )
    if X.numblocks[1] != 1:
        raise ChunkingError(
            f"X is chunked along columns ({X.numblocks[1]} column chunks: {X.chunks[1]}); "
            "training needs whole rows in each block; use X.rechunk({1: -1})"
        )

