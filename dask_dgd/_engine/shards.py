"""Training data as shards: groups of row blocks that stay on the workers.

At setup the input (NumPy, SciPy sparse, dask array, dask DataFrame) is cut into row
*blocks* (the dask chunks, or even slices of an in-memory array) and the blocks are split
into a fixed number of *groups*: contiguous runs of blocks with about the same number of
rows.  Each group is assembled once into a :class:`Shard` on the worker that already
holds most of its rows; afterwards every step sends one task per shard, and only the
parameters travel.  Because groups are contiguous block ranges chosen from the block
sizes alone, the order of every sum is fixed by block index, never by placement.
"""

import math
import time
import uuid
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .._backend import get_namespace, is_sparse, to_numpy
from ..exceptions import BlockError, ChunkingError, DGDError, InputError
from .reduce import Partial, tree_sum

__all__ = [
    "Block",
    "Shard",
    "ShardSet",
    "contiguous_groups",
    "assign_workers",
    "make_shard",
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


def make_shard(first_index, xs, ys, sws, y_numeric=True):
    """Validate blocks and wrap them as a :class:`Shard` (runs where the data lives)."""
    blocks = []
    for offset, (X, y, sw) in enumerate(zip(xs, ys, sws)):
        index = first_index + offset
        if X.ndim != 2:
            raise InputError(f"X must be 2-D; block {index} has shape {tuple(X.shape)}")
        X = _as_float(X, sparse_ok=True)
        if y_numeric:
            y = _as_float(y, sparse_ok=False)
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
            sw = _as_float(sw, sparse_ok=False)
        if not is_sparse(X) and X.dtype != np.float64:
            # float32 X: targets and weights in the same dtype once, not every step
            xp = get_namespace(X)
            y = xp.astype(y, X.dtype) if y_numeric else y
            sw = None if sw is None else xp.astype(sw, X.dtype)
        if sw is not None:
            if sw.shape != y.shape:
                raise InputError(
                    f"sample_weight has shape {tuple(sw.shape)} in block {index}, "
                    f"expected ({X.shape[0]},)"
                )
        block = Block(index, X, y, sw)
        if not _all_finite(X):
            raise InputError(
                f"Input X contains NaN or infinity in {_describe(block)}; drop or impute "
                "those rows before fitting"
            )
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


def shard_summary(shard, labels=False):
    """Weight sum, and the weighted y sum and minimum of y, or the label counts."""
    out = {"weight_sum": 0.0, "wy_sum": 0.0, "y_min": math.inf}
    for b in shard.blocks:
        if b.n_rows == 0:
            continue
        y = to_numpy(b.y)
        w = None if b.sample_weight is None else to_numpy(b.sample_weight)
        out["weight_sum"] += float(b.n_rows if w is None else w.sum())
        if not labels:
            out["wy_sum"] += float(y.sum() if w is None else w @ y)
            out["y_min"] = min(out["y_min"], float(y.min()))
    if labels:
        parts = [to_numpy(b.y) for b in shard.blocks if b.n_rows]
        y = np.concatenate(parts) if parts else np.array([])
        out["labels"], out["label_counts"] = np.unique(y, return_counts=True)
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
        if class_weight is not None:
            cw = class_weight[codes]
            sw = cw if sw is None else to_numpy(sw) * cw
        y_new = codes.astype(np.float64)
        if not is_sparse(b.X):  # targets and weights in X's namespace, device and dtype
            xp = get_namespace(b.X)
            y_new = xp.asarray(y_new, dtype=b.X.dtype)
            sw = None if sw is None else xp.asarray(sw, dtype=b.X.dtype)
        blocks.append(Block(b.index, b.X, y_new, sw))
    return Shard(tuple(blocks))


def shard_sample(shard, n_take):
    """About ``n_take`` evenly spaced rows of the shard, as host arrays (X, weights).

    The weights are the rows' sample weights scaled by (shard rows / sampled rows), so
    samples of shards of different sizes combine into one unbiased weighted sample.
    """
    total = shard.n_rows
    if total == 0 or n_take <= 0:
        return None
    xs, ws = [], []
    for b in shard.blocks:
        k = min(b.n_rows, math.ceil(n_take * b.n_rows / total))
        if k == 0:
            continue
        rows = np.unique(np.linspace(0, b.n_rows - 1, k).round().astype(np.int64))
        X = b.X[rows]
        xs.append(to_numpy(X))
        sw = np.ones(len(rows)) if b.sample_weight is None else to_numpy(b.sample_weight)[rows]
        ws.append(sw)
    X = sp.vstack(xs, format="csr") if sp.issparse(xs[0]) else np.concatenate(xs)
    w = np.concatenate(ws)
    return X, w * (total / len(w))


def _block_error(err, block):
    if isinstance(err, DGDError):
        return err
    return BlockError(f"{type(err).__name__} in {_describe(block)}: {err}")


def shard_loss_grad(shard, objective, params):
    """Full-batch sums over every block of the shard, in block order."""
    t0 = time.perf_counter()
    loss, grad, weight = 0.0, np.zeros(objective.n_params), 0.0
    for b in shard.blocks:
        try:
            l_b, g_b, w_b = objective.block_sums(params, b.X, b.y, b.sample_weight)
        except Exception as err:
            raise _block_error(err, b) from err
        loss += l_b
        grad += g_b
        weight += w_b
    dt = time.perf_counter() - t0
    return Partial(loss, grad, weight, dt, dt)


def shard_minibatch(shard, objective, params, seed, step, take):
    """Sums over this step's sampled rows of each block.

    ``take[b]`` rows of block ``b`` are drawn without replacement by a generator seeded
    with ``(seed, step, b)``, so the batch depends on the block, not on the worker.
    """
    t0 = time.perf_counter()
    loss, grad, weight = 0.0, np.zeros(objective.n_params), 0.0
    for b in shard.blocks:
        k = int(take[b.index])
        if k == 0:
            continue
        rng = np.random.default_rng([seed, step, b.index])
        rows = np.sort(rng.choice(b.n_rows, size=k, replace=False))
        sw = None if b.sample_weight is None else b.sample_weight[rows]
        try:
            l_b, g_b, w_b = objective.block_sums(params, b.X[rows], b.y[rows], sw)
        except Exception as err:
            raise _block_error(err, b) from err
        loss += l_b
        grad += g_b
        weight += w_b
    dt = time.perf_counter() - t0
    return Partial(loss, grad, weight, dt, dt)


# ----------------------------------------------------------------------------------------
# Driver side.


def contiguous_groups(costs, n_groups):
    """Split blocks ``0..len(costs)-1`` into ``n_groups`` contiguous runs of similar cost.

    Each cut is placed where the running cost is closest to an equal share; every group
    gets at least one block.  Depends only on ``costs``, so it is the same on every run.
    """
    n = len(costs)
    n_groups = max(1, min(n_groups, n))
    cum = np.cumsum(np.asarray(costs, dtype=float))
    total = cum[-1] if n else 0.0
    cuts, prev = [], 0
    for k in range(1, n_groups):
        target = total * k / n_groups
        candidates = range(prev + 1, n - (n_groups - k) + 1)
        cut = min(candidates, key=lambda c: (abs(cum[c - 1] - target), c))
        cuts.append(cut)
        prev = cut
    bounds = [0, *cuts, n]
    return [tuple(range(a, b)) for a, b in zip(bounds[:-1], bounds[1:])]


def assign_workers(groups, block_workers, costs, workers):
    """Choose a worker for each group: where most of its rows are, a fair share each.

    ``block_workers[b]`` lists the workers holding block ``b``.  Greedy on the local
    cost of each (group, worker) pair, capacity ``ceil(n_groups / n_workers)`` groups per
    worker; ties go to the lower group and worker index.
    """
    workers = sorted(workers)
    capacity = -(-len(groups) // len(workers))
    local = {}
    for g, blocks in enumerate(groups):
        for b in blocks:
            for w in block_workers[b]:
                if w in workers:
                    local[g, w] = local.get((g, w), 0) + costs[b] + 1
    order = sorted(local, key=lambda gw: (-local[gw], gw[0], workers.index(gw[1])))
    chosen, load = {}, dict.fromkeys(workers, 0)
    for g, w in order:
        if g not in chosen and load[w] < capacity:
            chosen[g] = w
            load[w] += 1
    for g in range(len(groups)):
        if g not in chosen:
            w = min(workers, key=lambda w: (load[w], workers.index(w)))
            chosen[g] = w
            load[w] += 1
    return [chosen[g] for g in range(len(groups))]


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

    @property
    def n_rows(self):
        return int(self.block_rows.sum())

    @property
    def n_groups(self):
        return len(self.handles)

    def map(self, fn, *args, name):
        """Run ``fn(shard, *args)`` on every shard; returns handles in group order."""
        return self.executor.map_shards(fn, self.handles, self.workers, args, name, self.token)

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
        return new

    def reduce(self, handles, split_every, name):
        """Tree-sum per-group :class:`Partial` handles into one Partial."""
        ex = self.executor
        return tree_sum(
            handles,
            split_every,
            combine_level=ex.reduce_level_fn(f"{name}-{self.token}"),
            fetch=ex.gather,
        )


class InProcessExecutor:
    """Runs shard functions directly in this process (small in-memory fits)."""

    kind = "in-process"

    def map_shards(self, fn, handles, workers, args, name, token):
        return [fn(h, *args) for h in handles]

    def gather(self, handles):
        return list(handles)

    def reduce_level_fn(self, name):
        return None

    def workers(self):
        return [None]


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


def check_chunking(X):
    """X must have a single chunk along columns (dask array)."""
    if X.ndim != 2:
        raise InputError(f"X must be 2-D; got an array of shape {X.shape}")
    if X.numblocks[1] != 1:
        raise ChunkingError(
            f"X is chunked along columns ({X.numblocks[1]} column chunks: {X.chunks[1]}); "
            "training needs whole rows in each block; use X.rechunk({1: -1})"
        )

