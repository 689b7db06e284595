import numpy as np
import pytest

from dask_dgd._engine.runtime.reduce import BlockTree, Partial, add_partials, tree_sum


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
