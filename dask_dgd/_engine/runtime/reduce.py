"""Fixed-shape tree reduction of per-block partial sums.

Every block's sums are a :class:`Partial`.  They are combined by a tree of fan-in
``split_every`` over the *block indices* (:class:`BlockTree`): node ``j`` of level
``l + 1`` is the left-to-right sum of nodes ``j * split_every ...`` of level ``l``.
The shape depends only on the number of blocks, never on which worker holds a block
or which task finished first, so the floating-point result of a synchronous step is
the same on every run, on any number of workers.

A group (the blocks one worker holds) sums every subtree whose blocks it holds entirely
and sends up only those subtrees' roots; whoever receives the results of several groups
(the driver, or a reduce task on the cluster) merges them and completes every node
whose children have all arrived.  Contiguous blocks on a worker thus travel as a few
partials; blocks scattered over workers travel as more, and the sums do not change.

A partial's gradient is a dense NumPy vector, or a compact form that knows how to add
itself to one (:class:`RowSparse`: the touched rows of an item table; a compressed
payload, see :class:`Compressed`; :class:`SparseVector`, the exact sum of sparse
payloads at an inner node): a merge keeps row-sparse and sparse sums compact while
they cover at most half the vector, and expands the rest where they are first added.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import TypeAlias

    import numpy.typing as npt

    from ...compression import Compressor

    #: A partial's gradient: dense, or a compact form that adds itself to a dense one.
    GradSum: TypeAlias = "npt.NDArray[np.float64] | RowSparse | SparseVector | Compressed"
    #: A node of the block tree: ``(level, index)``.
    NodeKey: TypeAlias = tuple[int, int]

__all__ = ["Partial", "BlockTree", "Compressed", "RowSparse", "SparseVector", "add_partials", "tree_sum", "grad_nbytes",
           "partial_nbytes", "TIME_BINS", "TIME_RANGE", "time_bin", "median_time", "tag_group"]

#: The groups' compute times travel up the tree as a histogram of ``TIME_BINS``
#: log-spaced bins over ``TIME_RANGE`` seconds (times outside it count in the end
#: bins): each bin spans a factor 10 ** (10 / 512) = 1.046, so its geometric centre, the
#: median :meth:`Partial.time_median` gives, is within a factor 1.023 (2.3%) of every
#: time in it (fine enough that a "2x the median" straggler rule does not fire on a
#: 1.8x one).  A bounded size: the sums a step's driver receives do not grow with the
#: groups (the histogram is sparse: at most one entry per group, at most ``TIME_BINS``).
TIME_BINS = 512
TIME_RANGE = (1e-6, 1e4)
_LOG_LOW = math.log10(TIME_RANGE[0])
_LOG_WIDTH = (math.log10(TIME_RANGE[1]) - _LOG_LOW) / TIME_BINS


def time_bin(seconds: float) -> int | None:
    """The histogram bin of a compute time (None for an unknown one: NaN, or not
    positive, as the timeless partials of some phases carry)."""
    if not (math.isfinite(seconds) and seconds > 0):
        return None
    return min(max(int(math.floor((math.log10(seconds) - _LOG_LOW) / _LOG_WIDTH)), 0), TIME_BINS - 1)


def median_time(hist: Mapping[int, int] | None, low: float = math.nan, high: float = math.nan) -> float | None:
    """The median of the times counted in ``hist`` (``{bin: count}``, see :data:`TIME_BINS`):
    the geometric centre of the bin of the lower median, clipped to ``[low, high]`` (the
    fastest and slowest times, where known); None when it counts nothing."""
    if not hist:
        return None
    bins = np.array(sorted(hist))
    counts = np.cumsum([hist[b] for b in bins])
    if counts[-1] <= 0:
        return None
    b = int(bins[np.searchsorted(counts, (counts[-1] + 1) // 2)])
    centre = 10 ** (_LOG_LOW + (b + 0.5) * _LOG_WIDTH)
    if math.isfinite(low):
        centre = max(centre, low)
    if math.isfinite(high):
        centre = min(centre, high)
    return float(centre)



@dataclass(frozen=True)
class RowSparse:
    """Rows ``idx`` of a ``(n_rows, width)`` table flattened to ``n_rows * width``
    entries; the other rows are zero."""

    idx: npt.NDArray[np.integer]
    rows: npt.NDArray[np.float64]
    n_rows: int

    def add_to(self, acc: npt.NDArray[np.float64]) -> None:
        acc.reshape(self.n_rows, -1)[self.idx] += self.rows

    @property
    def nbytes(self) -> int:
        return int(self.idx.nbytes + self.rows.nbytes)


@dataclass(frozen=True)
class SparseVector:
    """Entries ``idx`` (ascending) of a vector of ``n``; the others are zero.  The sum of
    sparse compressed gradients (top-k) at an inner node of the block tree: exact, and
    as it travels, 4 bytes an index and 8 a value."""

    idx: npt.NDArray[np.integer]
    values: npt.NDArray[np.float64]
    n: int

    def add_to(self, acc: npt.NDArray[np.float64]) -> None:
        acc[self.idx] += self.values

    def entries(self) -> tuple[npt.NDArray[np.integer], npt.NDArray[np.float64]]:
        return self.idx, self.values

    @property
    def nbytes(self) -> int:
        return int(4 * self.idx.size + self.values.nbytes)

    def __reduce__(self) -> tuple[Callable[..., SparseVector], tuple[Any, ...]]:
        # indices travel as int32 where they fit
        idx = self.idx.astype(np.int32) if self.n <= np.iinfo(np.int32).max else self.idx
        return _sparse_vector, (idx, self.values, self.n)


def _sparse_vector(idx: npt.NDArray[np.integer], values: npt.NDArray[np.float64], n: int) -> SparseVector:
    return SparseVector(idx.astype(np.int64), values, n)


@dataclass(frozen=True)
class Compressed:
    """A compressed gradient (``payload`` of ``compressor``), expanded when added."""

    payload: dict[str, Any]
    compressor: Compressor

    def add_to(self, acc: npt.NDArray[np.float64]) -> None:
        acc += self.compressor.decompress(self.payload)

    def entries(self) -> tuple[npt.NDArray[np.integer], npt.NDArray[np.float64]] | None:
        """``(indices, float64 values)`` of a sparse payload (top-k), else None."""
        sparse = getattr(self.compressor, "entries", None)
        return None if sparse is None else sparse(self.payload)

    @property
    def nbytes(self) -> int:
        return int(self.compressor.nbytes(self.payload))


def grad_nbytes(grad: GradSum) -> int:
    """Bytes of a partial's gradient as it travels."""
    return int(grad.nbytes) if isinstance(grad, np.ndarray) else grad.nbytes


def partial_nbytes(partial: Partial) -> int:
    """Bytes of one partial as it travels: its gradient, its extras, 16 for the scalars."""
    extra = sum(int(getattr(v, "nbytes", 8)) for v in partial.extras.values())
    return grad_nbytes(partial.grad_sum) + extra + 16


def _sparse_sum(grads: Sequence[GradSum]) -> RowSparse | SparseVector | None:
    """Row-sparse gradients of one table summed, still row-sparse (or sparse compressed
    gradients summed to a :class:`SparseVector`), or None when their rows cover more
    than half the table (a dense vector is then smaller).

    Every row is ``0.0`` plus the parts that touch it, left to right: the same
    roundings as expanding them into a dense zero vector one after the other (which is
    what the merge did before), so a sum does not depend on where it is taken."""
    first = grads[0]
    if isinstance(first, (Compressed, SparseVector)):
        return _sparse_vector_sum(grads)
    if not isinstance(first, RowSparse) or not all(isinstance(g, RowSparse) and g.n_rows == first.n_rows
                                                   for g in grads):
        return None
    grads = cast("Sequence[RowSparse]", grads)  # all of them, by the check above
    idx, position = _union([g.idx for g in grads], first.n_rows)
    if 2 * idx.size > first.n_rows:
        return None
    rows = np.zeros((idx.size,) + first.rows.shape[1:], dtype=np.float64)
    for g in grads:
        rows[position(g.idx)] += g.rows
    return RowSparse(idx, rows, first.n_rows)


def _sparse_vector_sum(grads: Sequence[GradSum]) -> SparseVector | None:
    parts = []
    for g in grads:
        entries = g.entries() if isinstance(g, (Compressed, SparseVector)) else None
        if entries is None:
            return None
        parts.append(entries)
    # (every one gave entries: a SparseVector, or a Compressed one whose payload has n)
    n = grads[0].n if isinstance(grads[0], SparseVector) else grads[0].payload["n"]  # type: ignore[union-attr]
    if 2 * max(i.size for i, _ in parts) > n:  # the union covers more than half: dense, without sorting it
        return None
    idx, position = _union([i for i, _ in parts], int(n))
    if 2 * idx.size > n:
        return None
    values = np.zeros(idx.size)
    for i, v in parts:
        values[position(i)] += v
    return SparseVector(idx, values, int(n))


#: :func:`_union` marks the entries in a table of ``n`` flags when the indices number
#: at least ``n`` over this (else it sorts them)
_MARK_DENSITY = 32


def _union(arrays: Sequence[npt.NDArray[np.integer]],
           n: int) -> tuple[npt.NDArray[np.integer], Callable[[npt.NDArray[np.integer]], npt.NDArray[np.intp]]]:
    """``(idx, position)``: the distinct entries of index arrays within ``[0, n)``,
    ascending (``np.unique`` of their concatenation, of its dtype), and the function
    that gives the positions in ``idx`` of indices among them.

    ``np.unique`` of NumPy >= 2.3 hashes integers, then sorts the distinct ones: 75 ms
    for the 110,000 indices of a sharded click log's gradient slice (2**19 entries),
    where marking them in a table of ``n`` flags takes 0.5 ms; that is done whenever
    the indices are not much sparser than the table, a sort otherwise."""
    dtype = np.result_type(*arrays)
    total = sum(int(a.size) for a in arrays)
    if total * _MARK_DENSITY >= n:
        mark = np.zeros(n, dtype=bool)
        for a in arrays:
            mark[a] = True
        where = np.cumsum(mark, dtype=np.intp)
        where -= 1
        return np.flatnonzero(mark).astype(dtype, copy=False), lambda i: where[i]
    idx = np.sort(np.concatenate(arrays))
    if idx.size:
        keep = np.empty(idx.size, dtype=bool)
        keep[0] = True
        np.not_equal(idx[1:], idx[:-1], out=keep[1:])
        idx = idx[keep]
    return idx, lambda i: np.searchsorted(idx, i)


@dataclass(frozen=True)
class Partial:
    """Sums from one or more blocks.

    Attributes
    ----------
    loss_sum, weight_sum : float
        Sample-weighted loss and total weight.
    grad_sum : numpy.ndarray, RowSparse or Compressed
        Sample-weighted gradient sum, ``n_params`` entries.
    time_min, time_max : float
        Fastest and slowest compute time (seconds) among the groups summed.
    n_groups : int
        How many group results this partial covers.
    start_max, end_max : float
        Latest wall-clock time (``time.time()`` on the workers) at which a group started
        and finished computing; the driver turns them into broadcast and reduce times.
        NaN when unknown.
    extras : dict
        Further sums the objective reduces with the gradient (floats or arrays, added
        entry by entry), e.g. a matrix factorization's Gram matrix of the users.
    time_hist : dict or None
        ``{bin: groups}``: the histogram of the compute times of the groups summed (see
        :data:`TIME_BINS`).  None in a partial a group makes: it counts its
        ``n_groups`` at ``time_max``.
    slowest : int or None
        The group whose compute time is ``time_max`` (None: unknown; see :func:`tag_group`).
    """

    loss_sum: float
    grad_sum: GradSum
    weight_sum: float
    time_min: float
    time_max: float
    n_groups: int = 1
    start_max: float = float("nan")
    end_max: float = float("nan")
    extras: dict[str, Any] = field(default_factory=dict)
    time_hist: dict[int, int] | None = None
    slowest: int | None = None

    def time_counts(self) -> dict[int, int]:
        """The histogram of the groups' compute times this partial covers."""
        if self.time_hist is not None:
            return self.time_hist
        b = time_bin(self.time_max) if self.n_groups else None
        return {} if b is None else {b: int(self.n_groups)}

    def time_median(self) -> float | None:
        """The groups' median compute time, to the histogram's resolution (None: unknown)."""
        return median_time(self.time_counts(), self.time_min, self.time_max)


def tag_group(nodes: Mapping[NodeKey, Partial], group: int) -> dict[NodeKey, Partial]:
    """A group's answer with its index as each node's ``slowest`` (where it computed)."""
    return {k: replace(p, slowest=int(group)) for k, p in nodes.items()}


def _dense(grad: GradSum) -> npt.NDArray[np.float64]:
    if isinstance(grad, np.ndarray):
        return np.array(grad, dtype=np.float64, copy=True)
    raise TypeError("the first partial of a sum needs its size: use _accumulate")


def _accumulate(acc: npt.NDArray[np.float64], grad: GradSum) -> None:
    if isinstance(grad, np.ndarray):
        acc += grad
    else:
        grad.add_to(acc)


def add_partials(*parts: Partial, size: int | None = None, keep_sparse: bool = False) -> Partial:
    """Sum partials left to right (the order fixes the rounding).  ``size``: the
    gradient's length, needed when the first gradient is not a dense vector.
    ``keep_sparse``: row-sparse gradients of few rows sum to a row-sparse one (the
    inner nodes of the block tree; the same values as the dense sum)."""
    first = parts[0]
    loss, weight = first.loss_sum, first.weight_sum
    sparse: GradSum | None
    if keep_sparse and len(parts) == 1 and not isinstance(first.grad_sum, np.ndarray):
        # a node of one child (the last of a level) keeps its child's compact sum as it
        # is: expanding it would send a dense vector up (a sharded fit's push of d
        # entries for one block's few)
        sparse = first.grad_sum
    else:
        sparse = _sparse_sum([p.grad_sum for p in parts]) if keep_sparse and len(parts) > 1 else None
    grad: GradSum
    if sparse is not None:
        grad = sparse
    elif isinstance(first.grad_sum, np.ndarray):
        grad = _dense(first.grad_sum)
    else:
        grad = acc = np.zeros(size if size is not None else _size_of(parts))
        first.grad_sum.add_to(acc)
    extras = {k: (np.array(v, dtype=np.float64, copy=True) if isinstance(v, np.ndarray) else v)
              for k, v in first.extras.items()}
    tmin, tmax, n = first.time_min, first.time_max, first.n_groups
    start, end = first.start_max, first.end_max
    hist, slowest = Counter(first.time_counts()), first.slowest
    for p in parts[1:]:
        loss += p.loss_sum
        weight += p.weight_sum
        if sparse is None:  # (grad is then a dense vector)
            _accumulate(grad, p.grad_sum)  # type: ignore[arg-type]
        for k, v in p.extras.items():
            extras[k] = extras[k] + v if k in extras else v
        tmin = min(tmin, p.time_min)
        if p.time_max > tmax:
            slowest = p.slowest
        tmax = max(tmax, p.time_max)
        n += p.n_groups
        hist.update(p.time_counts())
        start = np.fmax(start, p.start_max)
        end = np.fmax(end, p.end_max)
    return Partial(loss, grad, weight, tmin, tmax, n, float(start), float(end), extras, dict(hist), slowest)


def _size_of(parts: Sequence[Partial]) -> int:
    for p in parts:
        if isinstance(p.grad_sum, np.ndarray):
            return p.grad_sum.size
        if isinstance(p.grad_sum, RowSparse):
            return p.grad_sum.n_rows * (p.grad_sum.rows.shape[1] if p.grad_sum.rows.ndim == 2 else 1)
        if isinstance(p.grad_sum, SparseVector):
            return p.grad_sum.n
    raise TypeError("cannot tell the gradient's size from these partials")


def tree_sum(items: Sequence[Partial], split_every: int) -> Partial:
    """Reduce ``items`` (leaves in block order) with the tree of fan-in ``split_every``."""
    if not items:
        raise ValueError("nothing to reduce: no groups")
    tree = BlockTree(len(items), split_every)
    return tree.root(tree.complete({(0, i): p for i, p in enumerate(items)}))


class BlockTree:
    """The reduction tree over ``n_blocks`` leaves with fan-in ``split_every``.

    Nodes are keyed ``(level, index)``; leaves are ``(0, block_index)`` and the root is
    the single node of the last level (``levels`` gives the sizes, leaves first).
    ``size`` is the length of the gradients (needed to expand compact leaves).
    """

    def __init__(self, n_blocks: int, split_every: int, size: int | None = None) -> None:
        if split_every < 2:
            raise ValueError(f"split_every must be at least 2; got {split_every}")
        if n_blocks < 1:
            raise ValueError("nothing to reduce: no blocks")
        self.n_blocks = int(n_blocks)
        self.split_every = int(split_every)
        self.size = size
        sizes = [self.n_blocks]
        while sizes[-1] > 1:
            sizes.append(-(-sizes[-1] // self.split_every))
        self.levels = sizes

    @property
    def depth(self) -> int:
        """Levels above the leaves."""
        return len(self.levels) - 1

    def _children(self, level: int, j: int) -> range:
        s = self.split_every
        return range(j * s, min((j + 1) * s, self.levels[level - 1]))

    def complete(self, nodes: Mapping[NodeKey, Partial]) -> dict[NodeKey, Partial]:
        """Combine every node whose children are all in ``nodes``; keep only the
        maximal ones (a node whose parent is present is dropped).  Returns a new dict."""
        nodes = dict(nodes)
        for level in range(1, len(self.levels)):
            parents = sorted({j // self.split_every for (lev, j) in nodes if lev == level - 1})
            for p in parents:
                kids = self._children(level, p)
                if all((level - 1, k) in nodes for k in kids):
                    nodes[level, p] = add_partials(*(nodes[level - 1, k] for k in kids), size=self.size,
                                                   keep_sparse=True)
                    for k in kids:
                        del nodes[level - 1, k]
        return nodes

    def merge(self, *node_dicts: Mapping[NodeKey, Partial]) -> dict[NodeKey, Partial]:
        """Union of disjoint node sets, completed."""
        merged: dict[NodeKey, Partial] = {}
        for d in node_dicts:
            merged.update(d)
        return self.complete(merged)

    def root(self, nodes: Mapping[NodeKey, Partial], dense: bool = True) -> Partial:
        """The root's Partial (a dense gradient, unless ``dense`` is False: then a sparse
        sum stays a :class:`SparseVector` where it is one); raises if some block's sums are
        missing."""
        top = (len(self.levels) - 1, 0)
        if top not in nodes:
            raise RuntimeError(
                f"the reduction is incomplete: {len(nodes)} partial sum(s) left, expected the "
                f"root of {self.n_blocks} blocks"
            )
        node = nodes[top]
        if not dense and isinstance(node.grad_sum, SparseVector):
            return node
        if not isinstance(node.grad_sum, np.ndarray):  # a single leaf, still compact
            node = add_partials(node, size=self.size)
        return node
