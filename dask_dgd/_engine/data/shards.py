"""Training data as shards: the row blocks each worker holds, kept where they are.

At setup (:mod:`.ingest`) the input is cut into row *blocks* (the dask chunks, or even
slices of an in-memory array), each block is given to a worker, and the blocks of one
worker form its *group*, assembled once into a :class:`Shard` on that worker.  A
:class:`ShardSet` is the driver's view of one fit's shards: where each group lives and
what its blocks hold.  Steps reach the groups through the set's
:class:`~..runtime.collective.Collective`; only the parameters travel.
"""

from __future__ import annotations

import itertools
import math
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..runtime.collective import Collective
from ..runtime.reduce import BlockTree, Partial

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    import numpy.typing as npt
    from distributed import Future

    from ..runtime.executor import DaskExecutor, InProcessExecutor
    from ..runtime.reduce import NodeKey
    from .blocks import Shard

__all__ = ["ShardSet", "released_on_error"]


def _tree_nodes(shard: Shard, tree: BlockTree, fn: Callable[..., Any],
                args: Sequence[Any]) -> dict[NodeKey, Partial]:
    """The maximal block-tree nodes of one group's blocks (see :meth:`ShardSet.tree_sum`)."""
    leaves = {(0, b.index): Partial(0.0, np.asarray(fn(b, *args), dtype=np.float64).ravel(), 0.0, 0.0, 0.0)
              for b in shard.blocks}
    return tree.complete(leaves)


@dataclass(eq=False)
class ShardSet:
    """The shards of one fit, the executor that runs tasks on them, and their layout.

    Attributes
    ----------
    executor : InProcessExecutor or DaskExecutor
    handles : list
        One handle per group (a ``Future`` on a cluster, the Shard itself in process).
    groups : list of tuple of int
        Block indices of each group.
    workers : list of str or None
        Worker address of each group (``None`` in process).
    block_rows : numpy.ndarray
        Rows of each block, in block order.
    n_features : int
    sparse : bool
    block_costs : numpy.ndarray
        What a step spends on each block (rows x columns dense, non-zeros sparse).
    skew_report : dict or None
        What was measured and done about data skew at setup (cluster input).
    totals : dict
        Totals of the setup's summaries (total weight, weighted target sum or label
        counts): what a resumed fit's data must match.
    x_abs_max : float
        The largest |value| of X's blocks (offset columns included) where the setup's
        summaries took it, else inf: a bound of the linear predictor.
    validation : ShardSet or None
        The held-out rows of early stopping (same groups and workers).
    group_meta : list or None
        What the model knows about each group (a matrix factorization: its users).
    inputs : list
        Futures of the fit's own copies of its input, released with the shards.
    recoveries : list of dict
        Lost workers survived (see :class:`~..runtime.collective.Collective`).
    """

    # (The annotations are the attributes' types: __post_init__ makes the handles and workers
    # lists, each group a tuple and block_rows and block_costs arrays, from any sequences.)
    executor: InProcessExecutor | DaskExecutor
    handles: list[Any]  # a Future or a Shard
    groups: Sequence[tuple[int, ...]]
    workers: Sequence[str | None]
    block_rows: npt.NDArray[np.int64]
    n_features: int
    sparse: bool
    block_costs: npt.NDArray[np.float64] = None  # type: ignore[assignment]  # (None: rows x columns)
    skew_report: dict[str, Any] | None = None
    totals: dict[str, Any] = field(default_factory=dict)
    x_abs_max: float = math.inf
    validation: ShardSet | None = None
    group_meta: list[Any] | None = None
    inputs: list[Future] = field(default_factory=list)
    recoveries: list[dict[str, Any]] = field(default_factory=list)
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    def __post_init__(self) -> None:
        self.handles = list(self.handles)
        self.groups = [tuple(int(b) for b in g) for g in self.groups]
        self.workers = list(self.workers)
        self.block_rows = np.asarray(self.block_rows, dtype=np.int64)
        self.n_features = int(self.n_features)
        self.sparse = bool(self.sparse)
        if self.block_costs is None:
            self.block_costs = self.block_rows.astype(np.float64) * max(self.n_features, 1)
        # numbers the task calls (shared with the sets made by transform, which keep the
        # token): every call's task keys are new, see _call_token
        self._calls = itertools.count(1)
        self._collective: Collective | None = None

    @property
    def n_rows(self) -> int:
        return int(self.block_rows.sum())

    @property
    def n_groups(self) -> int:
        return len(self.handles)

    @property
    def n_blocks(self) -> int:
        return len(self.block_rows)

    @property
    def collective(self) -> Collective:
        """How steps reach the groups (one per set, created on first use)."""
        if self._collective is None:
            self._collective = Collective(self)
        return self._collective

    def _call_token(self) -> str:
        """The token of one call's task keys: this fit's token and the call's number.

        A key submitted again while the client still holds a future of it is not run
        again: ``Client.submit`` hands back the old task's result.  Fits differ by token;
        the number keeps two calls of one fit under one name (e.g. two row samples)
        apart, even before the client has processed the release of the first.
        """
        return f"{self.token}-{next(self._calls)}"

    def map(self, fn: Callable[..., Any], *args: Any, name: str) -> list[Any]:
        """Run ``fn(shard, *args)`` on every shard as a task; handles in group order."""
        return self.executor.map_shards(fn, self.handles, self.workers, args, name, self._call_token())

    def gather(self, handles: Sequence[Any]) -> list[Any]:
        return self.executor.gather(handles)

    def map_gather(self, fn: Callable[..., Any], *args: Any, name: str) -> list[Any]:
        return self.gather(self.map(fn, *args, name=name))

    def tree_sum(self, fn: Callable[..., Any], *args: Any, name: str,
                 split_every: int = 8) -> npt.NDArray[np.float64]:
        """The float64 arrays ``fn(block, *args)`` of every block (all of one shape),
        summed over the fixed block tree (:class:`~..runtime.reduce.BlockTree`): each group
        combines the subtrees it holds where its blocks live, the driver the rest, so
        the sum is the same bit for bit for any placement and only a few partial sums
        per group travel.  Returns the flat sum."""
        tree = BlockTree(self.n_blocks, split_every)
        nodes = self.map_gather(_tree_nodes, tree, fn, args, name=name)
        return tree.root(tree.merge(*nodes)).grad_sum  # type: ignore[return-value]  # (the root's is dense)

    def transform(self, fn: Callable[..., Any], *args: Any, name: str, token_suffix: str = "") -> ShardSet:
        """A new ShardSet whose shards are ``fn(shard, *args)`` (same groups, workers)."""
        new = ShardSet(
            self.executor, self.map(fn, *args, name=name), self.groups, self.workers, self.block_rows,
            self.n_features, self.sparse, block_costs=self.block_costs, skew_report=self.skew_report,
            totals=dict(self.totals), x_abs_max=self.x_abs_max, token=f"{self.token}{token_suffix}",
        )
        new._calls = self._calls  # one numbering, no task key of one in the other
        if self._collective is not None and self._collective.unrecoverable is not None:
            new.collective.unrecoverable = self._collective.unrecoverable  # made from them: lost with them
        return new

    def placement(self) -> list[str | None]:
        """The worker of every block, in block order."""
        out: list[str | None] = [None] * len(self.block_rows)
        for blocks, w in zip(self.groups, self.workers):
            for b in blocks:
                out[b] = w
        return out

    def release(self) -> None:
        """Let go now of everything this ShardSet holds on the cluster: its step actors
        and its shards (idempotent; the ShardSet is unusable afterwards).

        For a fit that ends by an exception, KeyboardInterrupt included (see
        :func:`released_on_error`): its traceback keeps the fit's frames, and with
        them this ShardSet, alive, e.g. in ``sys.last_traceback`` of an interactive
        session.
        """
        if self._collective is not None:
            self._collective.close()
        if self.validation is not None:
            self.validation.release()
        handles, self.handles = self.handles, []
        inputs, self.inputs = self.inputs, []
        if self.executor.kind == "dask":
            self.executor.release([*handles, *inputs])


@contextmanager
def released_on_error(shards: ShardSet) -> Iterator[ShardSet]:
    """Release ``shards`` (:meth:`ShardSet.release`) when the block raises anything,
    KeyboardInterrupt included, and re-raise: an interrupted or failed fit leaves no
    shards, actors or tasks on the cluster, even while its traceback is kept."""
    try:
        yield shards
    except BaseException:
        shards.release()
        raise
