"""The path's tasks after a worker loss took a partition Dask cannot recompute
(``_auto._revivals``): the partitions are made again and the tasks run again, a bounded
number of times.  The loss itself, on worker processes, is in
tests/engine/runtime/test_cluster_loss.py."""

from concurrent.futures import CancelledError

import pytest

from dask_dgd.exceptions import ClusterError
from dask_dgd.recommender._auto import MAX_REVIVALS, _revivals


class _Parts(list):
    revived = 0

    def revive(self):
        self.revived += 1


def _run(parts, failures):
    """Tries of a body that is cancelled the first ``failures`` times."""
    tries = []
    for lost in _revivals(parts, "the test's tasks"):
        with lost:
            tries.append(lost.revived)
            if len(tries) <= failures:
                raise CancelledError("dgd-test-1 cancelled for reason: already forgotten.")
    return tries


def test_a_cancelled_try_runs_again_on_partitions_made_again():
    parts = _Parts()
    assert _run(parts, 0) == [False] and parts.revived == 0
    assert _run(parts, 2) == [False, True, True] and parts.revived == 2


def test_cancelled_beyond_the_bound_says_what_was_lost_and_what_to_do():
    parts = _Parts()
    with pytest.raises(ClusterError, match=rf"worker losses took the test's tasks .* {MAX_REVIVALS + 1} times .*"
                                           r"already forgotten.*see the workers' logs"):
        _run(parts, MAX_REVIVALS + 1)
    assert parts.revived == MAX_REVIVALS


def test_other_errors_are_not_retried():
    parts = _Parts()
    with pytest.raises(ValueError, match="not a loss"):
        for lost in _revivals(parts, "the test's tasks"):
            with lost:
                raise ValueError("not a loss")
    assert parts.revived == 0
