"""The worker-side tree: steps go down and up a tree of runners, the driver talks to at
most ``split_every`` of them, and the sums are the star's, bit for bit."""

import warnings

import dask
import dask.array as da
import numpy as np
import pytest

from dask_dgd import LogisticRegression, MatrixFactorization
from dask_dgd._engine.data.ingest import build_shardset
from dask_dgd._engine.runtime.executor import DaskExecutor
from dask_dgd._engine.runtime.reduce import BlockTree, Partial, RowSparse, add_partials, tree_sum
from dask_dgd._engine.runtime.topology import runner_tree, tree_depth, tree_groups
from dask_dgd.compression import TopK
from dask_dgd.datasets import make_ratings

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


# ----------------------------------------------------------------------------- shape
@pytest.mark.parametrize("k", [2, 3, 8])
@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 33, 100])
def test_runner_tree_covers_every_group_once_with_bounded_fan_in(n, k):
    roots = runner_tree(range(n), k)
    assert sorted(tree_groups(roots)) == list(range(n))
    assert len(roots) <= k

    def check(node):
        assert len(node.children) <= k
        below = tree_groups(node.children)
        # a subtree is a contiguous run of groups that starts with its root
        assert below == list(range(node.group + 1, node.group + 1 + len(below)))
        for c in node.children:
            check(c)

    for r in roots:
        check(r)
    if n <= k:
        assert tree_depth(roots) == 1  # a star
    # depth grows with log_k(n): every level multiplies the reach by about k
    assert tree_depth(roots) <= 1 + int(np.ceil(np.log(max(n, 2)) / np.log(k)))


def test_runner_tree_rejects_a_fan_in_below_two():
    with pytest.raises(ValueError, match="the fan-in must be at least 2; got 1"):
        runner_tree(range(4), 1)


# ----------------------------------------------------------------------------- row-sparse sums
def _sparse_parts(n, n_rows, width, touched, seed=0):
    rng = np.random.default_rng(seed)
    parts = []
    for _ in range(n):
        idx = np.sort(rng.choice(n_rows, touched, replace=False))
        rows = rng.standard_normal((touched, width)) * 10.0 ** rng.integers(-6, 6, (touched, 1))
        parts.append(Partial(float(rng.random()), RowSparse(idx, rows, n_rows), 1.0, 0.0, 0.0))
    return parts


@pytest.mark.parametrize("touched", [3, 40])
def test_row_sparse_inner_nodes_give_the_dense_sums_bit_for_bit(touched):
    """Inner nodes of few touched rows stay row-sparse (they travel small up the tree);
    the root equals summing every part into a dense vector in block order."""
    n_rows, width = 50, 4
    parts = _sparse_parts(9, n_rows, width, touched)
    tree = BlockTree(9, 3, size=n_rows * width)
    nodes = tree.complete({(0, i): p for i, p in enumerate(parts)})
    dense_tree = BlockTree(9, 3, size=n_rows * width)
    expected = [np.zeros(n_rows * width) for _ in range(3)]
    for i, p in enumerate(parts):
        p.grad_sum.add_to(expected[i // 3])
    level1 = [add_partials(parts[3 * j], *parts[3 * j + 1:3 * j + 3], size=n_rows * width) for j in range(3)]
    for j in range(3):
        np.testing.assert_array_equal(level1[j].grad_sum, expected[j])  # the dense left-to-right sum
    root = dense_tree.root(nodes)
    np.testing.assert_array_equal(root.grad_sum, add_partials(*level1).grad_sum)
    inner = BlockTree(9, 3, size=n_rows * width).complete({(0, i): p for i, p in enumerate(parts[:3])})
    assert isinstance(inner[1, 0].grad_sum, RowSparse) == (3 * touched * 2 <= n_rows)


def test_merging_subtrees_anywhere_gives_the_same_root():
    """Runners merge parts of the tree wherever they sit: any split of the leaves into
    merged subsets gives the root of merging all leaves at once, bit for bit."""
    rng = np.random.default_rng(1)
    parts = [Partial(float(rng.random()), rng.standard_normal(6) * 10.0 ** rng.integers(-8, 8), 1.0, 0.0, 0.0)
             for _ in range(23)]
    tree = BlockTree(23, 3, size=6)
    leaves = {(0, i): p for i, p in enumerate(parts)}
    whole = tree.root(tree.merge(leaves))
    np.testing.assert_array_equal(whole.grad_sum, tree_sum(parts, 3).grad_sum)
    for seed in range(5):
        cuts = np.sort(np.random.default_rng(seed).choice(np.arange(1, 23), 5, replace=False))
        pieces = [dict(list(leaves.items())[a:b]) for a, b in zip([0, *cuts], [*cuts, 23])]
        merged = [tree.merge(p) for p in pieces]  # each runner's own subtree
        half = tree.merge(*merged[:3])  # an inner runner merges three answers
        root = tree.root(tree.merge(half, *merged[3:]))
        np.testing.assert_array_equal(root.grad_sum, whole.grad_sum)
        assert root.loss_sum == whole.loss_sum


# ----------------------------------------------------------------------------- on a cluster
@pytest.fixture(scope="module")
def client5(make_module_cluster):
    return make_module_cluster(5, processes=False)


@pytest.fixture(scope="module")
def blocks5(client5):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((6000, 8))
    y = np.digitize(X @ rng.standard_normal(8) + rng.standard_normal(6000), [-1.0, 1.0])  # 3 classes
    client5.wait_for_workers(5)
    # each block pinned to a worker (block i on worker i % 5): the fits below compare
    # per-step bytes, which follow the groups' subtrees, so every fit must see the same
    # placement, whatever the scheduler would have chosen (the fits pass rebalance=False)
    workers = sorted(client5.scheduler_info()["workers"])
    xs = [client5.scatter(X[i:i + 300], workers=[workers[(i // 300) % 5]]) for i in range(0, 6000, 300)]
    ys = [client5.scatter(y[i:i + 300], workers=[workers[(i // 300) % 5]]) for i in range(0, 6000, 300)]
    Xd = da.concatenate([da.from_delayed(f, shape=(300, 8), dtype=X.dtype) for f in xs])
    yd = da.concatenate([da.from_delayed(f, shape=(300,), dtype=y.dtype) for f in ys])
    return Xd, yd


def _fit_each(fit, transports=("tree", "star", "task")):
    """``fit()`` once per transport, with no dynamic balancing: on a busy machine it
    could move every block off a worker mid-fit, changing the tree these tests read."""
    out = {}
    for t in transports:
        with dask.config.set({"dgd.step-transport": t, "dgd.dynamic-min-step-seconds": 1e9}), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out[t] = fit()
    return out


CASES = {
    "binary-gd": dict(solver="gd", max_iter=15, tol=0.0, binary=True),
    "multinomial-lbfgs": dict(solver="lbfgs", max_iter=15, tol=0.0),
    "minibatch-adam": dict(solver="sgd", optimizer="adam", batch_size=700, max_iter=2, tol=0.0, random_state=0,
                           binary=True),
    "topk-compressed": dict(solver="gd", max_iter=15, tol=0.0, compression="topk:0.3", binary=True),
    # EF21 payloads summed sparse at the inner runners, parameters' changes sent down
    "topk-ef21-downlink": dict(solver="gd", max_iter=15, tol=0.0, compression=TopK(0.05, downlink=True),
                               binary=True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_tree_star_and_tasks_fit_bit_identically(client5, blocks5, case):
    Xd, yd = blocks5
    kw = dict(CASES[case])
    y = (yd > 0).astype(int) if kw.pop("binary", False) else yd
    transports = ("tree", "star") if kw.get("compression") else ("tree", "star", "task")
    fits = _fit_each(lambda: LogisticRegression(split_every=2, rebalance=False, client=client5, **kw).fit(Xd, y),
                     transports)
    for t in transports[1:]:
        np.testing.assert_array_equal(fits[t].coef_, fits["tree"].coef_)
        np.testing.assert_array_equal(fits[t].intercept_, fits["tree"].intercept_)
    tree, star = fits["tree"].history_, fits["star"].history_
    groups = len(set(fits["tree"].skew_report_["placement"]))
    assert groups == 5
    # 5 groups, fan-in 2: roots 0 (over 1) and 2 (over 3 and 4); the star talks to all five
    assert (tree["tree_depth"] == 2).all() and (tree["driver_messages"] == 4).all()
    assert (star["tree_depth"] == 1).all() and (star["driver_messages"] == 10).all()
    assert (tree["driver_bytes"] < star["driver_bytes"]).all()
    # the groups' partials weigh the same whichever way they travel
    np.testing.assert_array_equal(tree["bytes_up"], star["bytes_up"])


def test_default_fan_in_on_few_groups_is_the_star(client5, blocks5):
    Xd, yd = blocks5
    with dask.config.set({"dgd.dynamic-min-step-seconds": 1e9}):  # (no blocks moved mid-fit: see _fit_each)
        est = LogisticRegression(solver="gd", max_iter=3, tol=0.0, client=client5).fit(Xd, yd)
    assert (est.history_["tree_depth"] == 1).all() and (est.history_["driver_messages"] == 10).all()


@pytest.mark.slow
def test_matrix_factorization_item_sums_through_the_tree(client5):
    ratings, _ = make_ratings(300, 80, 6000, random_state=0)
    fits = _fit_each(lambda: MatrixFactorization(n_components=4, max_iter=8, tol=0.0, random_state=0, split_every=2,
                                                 n_shards=10, client=client5).fit(ratings), ("tree", "star"))
    np.testing.assert_array_equal(fits["tree"].item_factors_, fits["star"].item_factors_)
    np.testing.assert_array_equal(fits["tree"].user_factors_, fits["star"].user_factors_)
    assert fits["tree"].history_["tree_depth"].max() > 1


def _group_partial(shard, scratch, scale):
    """A partial that depends on the group's rows (a stand-in for a local SGD round)."""
    s = float(np.sum([float(np.asarray(b.X).sum()) for b in shard.blocks])) * scale
    return Partial(s, np.array([s, 1.0 / (1.0 + abs(s))]), float(shard.n_rows), 0.0, 0.0)


def test_group_reductions_follow_the_tree_over_groups(client5, blocks5):
    """Local SGD rounds reduce one partial per group in a fixed tree over the groups:
    tree and star give the same sums as summing the groups' answers in that tree."""
    Xd, yd = blocks5
    shards = build_shardset(DaskExecutor(client5), Xd, yd, None)
    try:
        each = shards.collective.call(_group_partial, 1e-3)
        expected = tree_sum(each, 2)
        for t in ("tree", "star"):
            with dask.config.set({"dgd.step-transport": t}):
                got = shards.collective.reduce_groups(_group_partial, 1e-3, split_every=2)
            np.testing.assert_array_equal(got.grad_sum, expected.grad_sum)
            assert got.loss_sum == expected.loss_sum and got.weight_sum == 6000
            assert shards.collective.last_traffic["depth"] == (2 if t == "tree" else 1)
    finally:
        shards.collective.close()


def test_local_sgd_rounds_go_through_the_tree(client5, blocks5):
    Xd, yd = blocks5
    est = LogisticRegression(solver="sgd", mode="local", local_steps=2, batch_size=700, max_iter=2, split_every=2, random_state=0,
                             client=client5).fit(Xd, (yd > 0).astype(int))
    h = est.history_
    assert (h["tree_depth"] == 2).all() and (h["driver_messages"] == 4).all()
    assert np.all(np.isfinite(est.coef_))


def test_a_step_error_deep_in_the_tree_reaches_the_driver_as_is(client5, blocks5):
    from dask_dgd.testing import failing_worker

    Xd, yd = blocks5
    workers = sorted(client5.scheduler_info()["workers"])
    # group 4 (the last worker) is a leaf two levels below the driver
    with failing_worker(client5, workers[-1], after=2, message="disk on fire"), pytest.raises(
            RuntimeError, match="disk on fire"):
        LogisticRegression(solver="gd", max_iter=10, tol=0.0, split_every=2, client=client5).fit(Xd, (yd > 0) * 1)


@pytest.mark.parametrize("n, sizes", [(10, (0, 0)), (10, (3, 9, 1)), (2**16, (40_000, 30_000)), (2**20, (7, 3, 0))])
def test_union_of_indices_is_numpys_unique_and_its_positions(n, sizes):
    """Both ways of ``_union`` (a table of flags for dense indices, a sort for sparse
    ones) give ``np.unique`` of the concatenation, its dtype, and ``searchsorted``'s
    positions, duplicates within an array included."""
    from dask_dgd._engine.runtime.reduce import _union

    rng = np.random.default_rng(n)
    arrays = [rng.integers(0, n, size=k).astype(np.int32 if j else np.int64) for j, k in enumerate(sizes)]
    idx, position = _union(arrays, n)
    expected = np.unique(np.concatenate(arrays))
    np.testing.assert_array_equal(idx, expected)
    assert idx.dtype == expected.dtype
    for a in arrays:
        np.testing.assert_array_equal(position(a), np.searchsorted(expected, a))


def test_row_sparse_sum_of_many_rows_matches_the_dense_sum():
    """A merge of row-sparse partials whose rows are dense in the table (the flags'
    way) gives the same floats as adding them into a dense vector one after the other."""
    rng = np.random.default_rng(3)
    n = 4_000
    parts = []
    for _ in range(3):
        rows = np.unique(rng.integers(0, n, size=400))
        parts.append(Partial(1.0, RowSparse(rows, rng.standard_normal((rows.size, 2)), n), 1.0, 0.0, 0.0))
    merged = add_partials(*parts, size=2 * n, keep_sparse=True)
    assert isinstance(merged.grad_sum, RowSparse)
    dense = np.zeros(2 * n)
    for p in parts:
        p.grad_sum.add_to(dense)
    expanded = np.zeros(2 * n)
    merged.grad_sum.add_to(expanded)
    np.testing.assert_array_equal(expanded, dense)
