import numpy as np
import pytest

from dask_dgd._engine.runtime.reduce import (
    TIME_BINS,
    TIME_RANGE,
    BlockTree,
    Partial,
    add_partials,
    median_time,
    tag_group,
    time_bin,
    tree_sum,
)


def _parts(n, seed=0):
    rng = np.random.default_rng(seed)
    return [
        Partial(float(rng.random()), rng.standard_normal(5) * 10.0 ** rng.integers(-8, 8), 1.0, t, t)
        for t in rng.random(n)
    ]


def test_add_partials_sums_and_tracks_times():
    a = Partial(1.0, np.array([1.0, 2.0]), 3.0, 0.5, 0.5)
    b = Partial(2.0, np.array([10.0, 20.0]), 4.0, 0.2, 0.2)
    s = add_partials(a, b)
    assert s.loss_sum == 3.0 and s.weight_sum == 7.0
    np.testing.assert_array_equal(s.grad_sum, [11.0, 22.0])
    assert (s.time_min, s.time_max, s.n_groups) == (0.2, 0.5, 2)
    np.testing.assert_array_equal(a.grad_sum, [1.0, 2.0])  # inputs untouched


@pytest.mark.parametrize("n, k, expected", [(1, 2, [1]), (8, 8, [8, 1]), (9, 8, [9, 2, 1]), (100, 4, [100, 25, 7, 2, 1])])
def test_block_tree_levels(n, k, expected):
    assert BlockTree(n, k).levels == expected


def test_tree_sum_is_invariant_to_split_every_up_to_rounding():
    parts = _parts(37)
    exact = np.sum([p.grad_sum for p in parts], axis=0)
    results = [tree_sum(parts, k) for k in (2, 3, 8, 64)]
    for r in results:
        np.testing.assert_allclose(r.grad_sum, exact, rtol=1e-12, atol=1e-12 * np.abs(exact).max())
        assert r.n_groups == 37
    # the same split_every always gives bit-identical sums
    np.testing.assert_array_equal(tree_sum(parts, 3).grad_sum, tree_sum(list(parts), 3).grad_sum)


def _reference_tree_sum(parts, k):
    """The tree written out level by level: chunks of k summed left to right."""
    level = list(parts)
    while len(level) > 1:
        level = [add_partials(*level[i : i + k]) for i in range(0, len(level), k)]
    return level[0]


@pytest.mark.parametrize("n, k", [(1, 2), (2, 2), (10, 3), (37, 4), (64, 8)])
def test_tree_sum_matches_the_written_out_tree(n, k):
    parts = _parts(n, seed=n)
    ref = _reference_tree_sum(parts, k)
    got = tree_sum(parts, k)
    np.testing.assert_array_equal(got.grad_sum, ref.grad_sum)
    assert got.loss_sum == ref.loss_sum


@pytest.mark.parametrize("seed", range(5))
def test_groups_holding_any_blocks_give_bit_identical_sums(seed):
    """Each group completes the subtrees it holds; merging in any grouping and any
    order gives the root of the whole tree, bit for bit."""
    rng = np.random.default_rng(seed)
    n, k = 23, 3
    parts = _parts(n, seed=seed)
    tree = BlockTree(n, k)
    ref = _reference_tree_sum(parts, k)
    owner = rng.integers(0, 4, size=n)  # scattered placement over 4 groups
    groups = [tree.complete({(0, b): parts[b] for b in range(n) if owner[b] == g}) for g in range(4)]
    groups = [g for g in groups if g]
    order = rng.permutation(len(groups))
    root = tree.root(tree.merge(*(groups[i] for i in order)))
    np.testing.assert_array_equal(root.grad_sum, ref.grad_sum)
    assert root.loss_sum == ref.loss_sum
    # a group with a contiguous run sends up the run's subtrees, not every block
    first = tree.complete({(0, b): parts[b] for b in range(9)})
    assert sorted(first) == [(2, 0)]


def test_block_tree_reports_missing_blocks():
    tree = BlockTree(5, 2)
    nodes = tree.complete({(0, b): p for b, p in enumerate(_parts(4))})
    with pytest.raises(RuntimeError, match=r"the reduction is incomplete: 1 partial sum\(s\) left, expected the root of 5 blocks"):
        tree.root(nodes)


def test_tree_sum_errors():
    with pytest.raises(ValueError, match="split_every must be at least 2; got 1"):
        tree_sum(_parts(3), 1)
    with pytest.raises(ValueError, match="nothing to reduce"):
        tree_sum([], 2)
    with pytest.raises(ValueError, match="nothing to reduce: no blocks"):
        BlockTree(0, 2)


# ------------------------------------------------- the groups' compute times up the tree
#: A bin's geometric centre is within this factor of every time in it.
_HALF_BIN = 10 ** ((np.log10(TIME_RANGE[1]) - np.log10(TIME_RANGE[0])) / TIME_BINS / 2)


def _timed_leaves(times):
    """One leaf per group, as a runner tags its group's answer."""
    return [tag_group({(0, g): Partial(0.0, np.zeros(2), 1.0, t, t, 1)}, g)[0, g] for g, t in enumerate(times)]


@pytest.mark.parametrize("split_every", [2, 3, 9])
def test_the_tree_carries_the_median_and_the_slowest_group(split_every):
    times = [0.01, 0.02, 0.5, 0.03, 0.04, 3.0, 0.05, 0.06, 0.07]
    root = tree_sum(_timed_leaves(times), split_every)
    assert sum(root.time_counts().values()) == len(times)
    assert len(root.time_hist) <= TIME_BINS
    assert root.slowest == 5 and root.time_max == 3.0
    assert 0.05 / _HALF_BIN <= root.time_median() <= 0.05 * _HALF_BIN


def test_the_median_of_an_even_count_is_the_lower_one():
    root = tree_sum(_timed_leaves([0.001, 0.002, 1.0, 2.0]), 2)
    assert 0.002 / _HALF_BIN <= root.time_median() <= 0.002 * _HALF_BIN


def test_a_groups_other_nodes_and_unknown_times_are_not_counted():
    # a group's first node counts it (n_groups=1), its other nodes do not; a time of 0 is unknown
    parts = [Partial(0.0, np.zeros(2), 1.0, 0.3, 0.3, 1), Partial(0.0, np.zeros(2), 1.0, 0.3, 0.3, 0),
             Partial(0.0, np.zeros(2), 1.0, 0.0, 0.0, 1)]
    assert add_partials(*parts).time_counts() == {time_bin(0.3): 1}
    assert add_partials(parts[2]).time_median() is None
    assert median_time({}) is None


def test_the_median_stays_between_the_fastest_and_the_slowest():
    # times beyond the histogram's range count in its end bins; the median is clipped to the times
    assert time_bin(1e-9) == 0 and time_bin(1e6) == TIME_BINS - 1
    assert tree_sum(_timed_leaves([1e-8, 2e-8, 3e-8]), 2).time_median() == 3e-8
    assert tree_sum(_timed_leaves([2e5, 3e5]), 2).time_median() == 2e5


@pytest.mark.parametrize("mode", ["sync", "local", "async"])
def test_a_fit_records_the_median_compute_time_and_the_slowest_group(client, logistic_data, mode):
    import dask.array as da

    from dask_dgd.linear_model import LogisticRegression

    X, y = logistic_data
    est = LogisticRegression(mode=mode, max_iter=3, tol=0, client=client).fit(da.from_array(X, chunks=(500, -1)), y)
    h = est.history_.dropna(subset=["compute_time_median"])
    assert len(h) >= 1
    assert (h["compute_time_min"] <= h["compute_time_median"]).all()
    assert (h["compute_time_median"] <= h["compute_time_max"]).all()
    n_groups = len(est.history_["updates_per_group"].iloc[-1])
    assert h["slowest_group"].between(0, n_groups - 1).all()


def test_an_in_process_fit_records_them_too(logistic_data):
    from dask_dgd.linear_model import LogisticRegression

    X, y = logistic_data
    h = LogisticRegression(max_iter=3, tol=0).fit(X, y).history_
    assert h["compute_time_median"].notna().all() and (h["slowest_group"] >= 0).all()


def test_the_tree_median_is_fine_enough_for_a_2x_straggler_rule():
    # a slowest group 1.8x the median must not pass for 2x: the median within 2.3%
    times = [0.005, 0.02369, 0.04264]
    parts = [Partial(0.0, np.zeros(2), 1.0, t, t, 1, slowest=g) for g, t in enumerate(times)]
    root = add_partials(*parts)
    assert abs(root.time_median() / 0.02369 - 1) < 0.023
    assert root.time_max < 2 * root.time_median() and root.slowest == 2
