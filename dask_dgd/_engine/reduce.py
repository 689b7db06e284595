"""Fixed-shape tree reduction of per-group partial sums.

Every group task returns a :class:`Partial`: sums that add associatively plus the
group's compute time.  Partials are combined by a tree of fan-in ``split_every`` whose
shape depends only on the number of groups, never on which task finished first, so the
floating-point result of a synchronous step is the same on every run.  Inner levels of
the tree run as tasks on the cluster when there are more groups than ``split_every``;
the last level (at most ``split_every`` partials) is summed on the client, in the same
order, by the same function.
"""

from dataclasses import dataclass

import numpy as np

__all__ = ["Partial", "add_partials", "tree_sum", "tree_levels"]


@dataclass(frozen=True)
class Partial:
    """Sums from one or more groups of blocks.

    Attributes
    ----------
    loss_sum, weight_sum : float
        Sample-weighted loss and total weight.
    grad_sum : numpy.ndarray
        Sample-weighted gradient sum, shape ``(n_params,)``.
    time_min, time_max : float
        Fastest and slowest compute time (seconds) among the groups summed.
    n_groups : int
        How many group results this partial covers.
    """

    loss_sum: float
    grad_sum: np.ndarray
    weight_sum: float
    time_min: float
    time_max: float
    n_groups: int = 1


def add_partials(*parts):
    """Sum partials left to right (the order fixes the rounding)."""
    first = parts[0]
    loss, weight = first.loss_sum, first.weight_sum
    grad = np.array(first.grad_sum, dtype=np.float64, copy=True)
    tmin, tmax, n = first.time_min, first.time_max, first.n_groups
    for p in parts[1:]:
        loss += p.loss_sum
        weight += p.weight_sum
        grad += p.grad_sum
        tmin = min(tmin, p.time_min)
        tmax = max(tmax, p.time_max)
        n += p.n_groups
    return Partial(loss, grad, weight, tmin, tmax, n)


def tree_levels(n_items, split_every):
    """Sizes of each level of the reduction tree, leaves first (for docs and tests)."""
    sizes = [n_items]
    while sizes[-1] > split_every:
        sizes.append(-(-sizes[-1] // split_every))
    return sizes


def _chunks(items, size):
    return [items[i : i + size] for i in range(0, len(items), size)]


def tree_sum(items, split_every, combine_level=None, fetch=None):
    """Reduce ``items`` with a tree of fan-in ``split_every``.

    ``combine_level(chunks, depth)`` evaluates one inner level (a list of lists of items)
    and returns the list of combined items; by default it sums in this process.
    ``fetch(items)`` turns the last level into values (e.g. gathers futures).  The final
    level is always summed here with :func:`add_partials`.
    """
    if split_every < 2:
        raise ValueError(f"split_every must be at least 2; got {split_every}")
    if not items:
        raise ValueError("nothing to reduce: no groups")
    level = list(items)
    depth = 0
    while len(level) > split_every:
        chunks = _chunks(level, split_every)
        if combine_level is None:
            level = [add_partials(*c) for c in chunks]
        else:
            level = combine_level(chunks, depth)
        depth += 1
    if fetch is not None:
        level = fetch(level)
    return add_partials(*level)
