"""The shape of the worker-side tree that carries a step: who forwards to whom.

The groups (one runner actor per group, on its worker) form a tree of fan-in ``k``: the
driver calls at most ``k`` root runners; every runner forwards the step to at most ``k``
children, computes its own blocks, merges its children's answers with its own in the
fixed block tree (:class:`~.reduce.BlockTree`) and answers its parent.  The tree over
*runners* only decides who merges what where; the sums follow the tree over *blocks*,
so every shape gives the same result, bit for bit, as the driver merging everything
itself (the star).

:func:`runner_tree` cuts the groups, in group order, into ``k`` contiguous runs at every
level (the first group of a run is its root, the rest its subtree), so a subtree holds
neighbouring groups, and the depth is about ``log_k(groups)``.  This module imports no
Dask.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = ["Node", "runner_tree", "tree_depth", "tree_groups"]


@dataclass(frozen=True)
class Node:
    """A runner in the tree: its group and the subtrees it forwards the step to."""

    group: int
    children: tuple[Node, ...] = field(default=())


def _split(ids: Sequence[int], k: int) -> list[Sequence[int]]:
    """``ids`` in ``k`` contiguous runs of near-equal length (fewer when shorter)."""
    n = len(ids)
    k = min(k, n)
    bounds = [round(i * n / k) for i in range(k + 1)]
    return [ids[a:b] for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def runner_tree(groups: Iterable[int], fan_in: int) -> tuple[Node, ...]:
    """The roots of the tree over ``groups`` (a sequence of group indices, in order)
    with at most ``fan_in`` children per node, and at most ``fan_in`` roots.

    Examples
    --------
    >>> [r.group for r in runner_tree(range(5), 8)]  # few groups: a star
    [0, 1, 2, 3, 4]
    >>> roots = runner_tree(range(10), 2)
    >>> [r.group for r in roots], [c.group for c in roots[0].children]
    ([0, 5], [1, 3])
    """
    if fan_in < 2:
        raise ValueError(f"the fan-in must be at least 2; got {fan_in}")

    def build(ids: Sequence[int]) -> list[Node]:
        return [Node(run[0], tuple(build(run[1:]))) for run in _split(list(ids), fan_in)] if ids else []

    return tuple(build(list(groups)))


def tree_depth(roots: Sequence[Node]) -> int:
    """Levels of runners below the driver (1: a star)."""
    return 1 + max((tree_depth(r.children) for r in roots), default=0) if roots else 0


def tree_groups(roots: Iterable[Node]) -> list[int]:
    """Every group of the tree, depth first (parents before their children)."""
    out = []
    for r in roots:
        out.append(r.group)
        out.extend(tree_groups(r.children))
    return out
