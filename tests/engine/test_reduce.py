import numpy as np
import pytest

from dask_dgd._engine.reduce import Partial, add_partials, tree_levels, tree_sum


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


@pytest.mark.parametrize("n, k, expected", [(1, 2, [1]), (8, 8, [8]), (9, 8, [9, 2]), (100, 4, [100, 25, 7, 2])])
def test_tree_levels(n, k, expected):
    assert tree_levels(n, k) == expected


def test_tree_sum_is_invariant_to_split_every_up_to_rounding():
    parts = _parts(37)
    exact = np.sum([p.grad_sum for p in parts], axis=0)
    results = [tree_sum(parts, k) for k in (2, 3, 8, 64)]
    for r in results:
        np.testing.assert_allclose(r.grad_sum, exact, rtol=1e-12, atol=1e-12 * np.abs(exact).max())
        assert r.n_groups == 37
    # the same split_every always gives bit-identical sums
    np.testing.assert_array_equal(tree_sum(parts, 3).grad_sum, tree_sum(list(parts), 3).grad_sum)


def test_tree_sum_uses_given_level_combiner_and_fetch():
    parts = _parts(10)
    levels = []

    def combine(chunks, depth):
        levels.append([len(c) for c in chunks])
        return [add_partials(*c) for c in chunks]

    r = tree_sum(parts, 3, combine_level=combine, fetch=list)
    assert levels == [[3, 3, 3, 1], [3, 1]]
    np.testing.assert_array_equal(r.grad_sum, tree_sum(parts, 3).grad_sum)


def test_tree_sum_errors():
    with pytest.raises(ValueError, match="split_every must be at least 2; got 1"):
        tree_sum(_parts(3), 1)
    with pytest.raises(ValueError, match="nothing to reduce"):
        tree_sum([], 2)
