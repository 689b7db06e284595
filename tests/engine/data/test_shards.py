import numpy as np
import pytest
import scipy.sparse as sp

from dask_dgd._engine.data.blocks import (
    Shard,
    encode_shard,
    make_shard,
    shard_check_finite,
    shard_sample,
    shard_summary,
)
from dask_dgd._engine.data.skew import groups_by_worker, place_blocks
from dask_dgd._engine.objective import LinearTraining, batch_allocation
from dask_dgd._engine.runtime.group_steps import Draw, GroupMemory, StepRequest, group_step
from dask_dgd._engine.runtime.reduce import BlockTree
from dask_dgd.exceptions import BlockError, InputError
from dask_dgd.losses import BinaryLogistic, HalfSquaredError, LinearObjective


def test_place_blocks_keeps_balanced_data_where_it_is():
    # Dask spread 8 equal blocks 4/4 in no particular order: nothing moves
    holders = [("b",), ("a",), ("a",), ("b",), ("b",), ("a",), ("b",), ("a",)]
    placement = place_blocks([10] * 8, holders, ["a", "b"])
    assert placement == [h[0] for h in holders]
    groups, owners = groups_by_worker(placement, ["b", "a"])
    assert owners == ["a", "b"] and groups == [(1, 2, 5, 7), (0, 3, 4, 6)]


def test_place_blocks_spreads_data_held_by_one_worker():
    holders = [("a",)] * 8
    placement = place_blocks([10] * 8, holders, ["a", "b", "c", "d"])
    loads = {w: placement.count(w) for w in "abcd"}
    assert loads == {"a": 2, "b": 2, "c": 2, "d": 2}
    # a big block stays; smaller ones fill the other worker (largest first)
    assert place_blocks([100, 10, 10, 10], [("a",)] * 4, ["a", "b"]) == ["a", "b", "b", "b"]
    # replicated blocks go to the less loaded holder; unknown holders are ignored
    assert place_blocks([5, 5], [("a", "b"), ("a", "zz")], ["a", "b"]) == ["a", "b"]


def test_place_blocks_tolerates_empty_blocks_and_workers_without_data():
    placement = place_blocks([0, 0, 6], [("a",), ("b",), ("a",)], ["a", "b", "c"])
    assert placement[2] == "a"
    groups, owners = groups_by_worker(placement, ["a", "b", "c"])
    assert sum(len(g) for g in groups) == 3 and all(groups)


def test_make_shard_names_the_block_with_nan():
    X = np.ones((4, 2))
    X_bad = X.copy()
    X_bad[1, 0] = np.nan
    # X is checked only on demand (after a non-finite step), y and weights at once.
    shard = make_shard(7, [X, X_bad], [np.ones(4), np.ones(4)], [None, None])
    with pytest.raises(InputError, match=r"Input X contains NaN or infinity in block 8 \(shape \(4, 2\)\)"):
        shard_check_finite(shard)
    shard_check_finite(make_shard(7, [X, X], [np.ones(4), np.ones(4)], [None, None]))
    with pytest.raises(InputError, match=r"Input y contains NaN or infinity in block 3"):
        make_shard(3, [X], [np.array([0.0, np.inf, 1.0, 1.0])], [None])
    with pytest.raises(InputError, match=r"Input X contains NaN or infinity in block 0"):
        shard_check_finite(make_shard(0, [sp.csr_matrix(X_bad)], [np.ones(4)], [None]))


def test_make_shard_other_errors():
    X = np.ones((4, 2))
    with pytest.raises(InputError, match="X and y have different numbers of rows in block 2: X has 4, y has 3"):
        make_shard(2, [X], [np.ones(3)], [None])
    with pytest.raises(InputError, match="sample_weight contains negative"):
        make_shard(0, [X], [np.ones(4)], [np.array([1.0, -1.0, 1.0, 1.0])])
    with pytest.raises(InputError, match=r"y must be 1-D; block 0 of y has shape \(4, 1\)"):
        make_shard(0, [X], [np.ones((4, 1))], [None])


def test_make_shard_casts_integer_blocks_and_keeps_float32():
    s = make_shard(0, [np.ones((2, 2), dtype=np.int32)], [np.array([1, 2])], [None])
    assert s.blocks[0].X.dtype == np.float64 and s.blocks[0].y.dtype == np.float64
    s = make_shard(0, [np.ones((2, 2), dtype=np.float32)], [np.ones(2)], [None])
    assert s.blocks[0].X.dtype == np.float32


def _shard(seed=0, sizes=(30, 0, 45)):
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal((n, 3)) for n in sizes]
    ys = [rng.standard_normal(n) for n in sizes]
    return make_shard(0, xs, ys, [None] * len(sizes)), xs, ys


def shard_loss_grad(shard, objective, params, tree):
    """A full-batch step of one group (the engine's worker-side function)."""
    return group_step(shard, GroupMemory(), LinearTraining(objective), StepRequest(params), tree)


def shard_minibatch(shard, objective, params, seed, step, take, tree):
    """A mini-batch step of one group."""
    return group_step(shard, GroupMemory(), LinearTraining(objective), StepRequest(params, draw=Draw(seed, step, take)), tree)


def _root(nodes_list, n_blocks=3, k=2):
    tree = BlockTree(n_blocks, k)
    return tree.root(tree.merge(*nodes_list))


def test_shard_loss_grad_equals_block_sums_and_handles_empty_blocks():
    shard, xs, ys = _shard()
    obj = LinearObjective(HalfSquaredError(), 3)
    params = np.array([0.1, -0.2, 0.3, 0.5])
    part = _root([shard_loss_grad(shard, obj, params, BlockTree(3, 2))])
    loss, grad, weight = obj.block_sums(params, np.concatenate(xs), np.concatenate(ys))
    assert part.weight_sum == weight == 75
    assert part.n_groups == 1 and part.time_max >= part.time_min > 0
    assert part.end_max >= part.start_max > 0
    np.testing.assert_allclose(part.loss_sum, loss, rtol=1e-12)
    np.testing.assert_allclose(part.grad_sum, grad, rtol=1e-12)


def test_shards_send_only_their_complete_subtrees():
    shard, _, _ = _shard()
    obj = LinearObjective(HalfSquaredError(), 3)
    tree = BlockTree(3, 2)  # levels [3, 2, 1]: blocks (0, 1) | (2)
    nodes = shard_loss_grad(Shard(shard.blocks[:2]), obj, np.zeros(4), tree)
    assert sorted(nodes) == [(1, 0)]
    nodes = shard_loss_grad(Shard(shard.blocks[1:]), obj, np.zeros(4), tree)
    assert sorted(nodes) == [(0, 1), (1, 1)]


def test_shard_minibatch_depends_on_block_not_shard_layout():
    shard, xs, ys = _shard()
    obj = LinearObjective(HalfSquaredError(), 3)
    params = np.zeros(4)
    take = {0: 5, 1: 0, 2: 7}
    tree = BlockTree(3, 2)
    whole = _root([shard_minibatch(shard, obj, params, (1,), 4, take, tree)])
    # the same blocks split over two shards give the same total, bit for bit
    s1 = Shard(shard.blocks[:1])
    s2 = Shard(shard.blocks[1:])
    split = _root([shard_minibatch(s, obj, params, (1,), 4, take, tree) for s in (s2, s1)])
    np.testing.assert_array_equal(whole.grad_sum, split.grad_sum)
    assert whole.weight_sum == 12 and split.n_groups == 2
    other = _root([shard_minibatch(shard, obj, params, (1,), 5, take, tree)])
    assert not np.allclose(other.grad_sum, whole.grad_sum)  # a new step draws a new batch


def test_shard_errors_name_the_block():
    shard, _, _ = _shard()
    obj = LinearObjective(HalfSquaredError(), 5)  # wrong width
    with pytest.raises(InputError, match="shape"):
        shard_loss_grad(shard, obj, np.zeros(6), BlockTree(3, 2))


def test_batch_allocation_is_proportional_and_exact():
    take = batch_allocation([100, 0, 50, 50], 21, (0, 1))
    assert take.sum() == 21 and take[1] == 0 and take[0] >= 10
    assert list(batch_allocation([3, 4], 100, (0, 1))) == [3, 4]
    np.testing.assert_array_equal(batch_allocation([7, 9, 4], 5, (3, 2)), batch_allocation([7, 9, 4], 5, (3, 2)))


def test_batch_allocation_gives_every_row_the_same_chance():
    # 10 equal blocks, batches of 5 rows: the remainder rows must not always go to the
    # same blocks, or half the data would never be sampled
    takes = np.array([batch_allocation([100] * 10, 5, (0, step)) for step in range(2000)])
    assert (takes.sum(axis=1) == 5).all()
    np.testing.assert_allclose(takes.mean(axis=0), 0.5, atol=0.05)
    takes = np.array([batch_allocation([300, 100], 3, (1, step)) for step in range(2000)])
    np.testing.assert_allclose(takes.mean(axis=0), [2.25, 0.75], atol=0.05)


def test_summary_encode_and_sample():
    X = np.arange(12.0).reshape(6, 2)
    y = np.array(["b", "a", "b", "c", "a", "b"], dtype=object)
    shard = make_shard(0, [X[:3], X[3:]], [y[:3], y[3:]], [None, None], y_numeric=False)
    summ = shard_summary(shard, labels=True)
    assert summ["labels"].tolist() == ["a", "b", "c"] and summ["label_counts"].tolist() == [2, 3, 1]
    enc = encode_shard(shard, np.array(["a", "b", "c"], dtype=object), np.array([1.0, 2.0, 3.0]))
    assert enc.blocks[0].y.tolist() == [1.0, 0.0, 1.0]
    assert enc.blocks[1].sample_weight.tolist() == [3.0, 1.0, 2.0]
    with pytest.raises(InputError, match=r"labels \['c'\] in block 1 are not among classes"):
        encode_shard(shard, np.array(["a", "b"], dtype=object))
    pieces = shard_sample(enc, {0: 2, 1: 3})
    assert [p[0] for p in pieces] == [0, 1] and [len(p[2]) for p in pieces] == [2, 3]
    for index, Xs, ys, ws in pieces:  # rows, labels and weights stay together
        block = enc.blocks[index]
        for row, label, weight in zip(Xs, ys, ws):
            i = [tuple(r) for r in block.X].index(tuple(row))
            assert label == block.y[i] and weight == block.sample_weight[i]
    assert shard_sample(enc, {0: 0, 1: 0}) == []
    # a block taken whole (block 1) gives all its rows in order, as the evenly spaced rows
    # of that many would; a larger take is capped at the block
    whole = shard_sample(enc, {0: 1, 1: 10})
    assert [len(p[2]) for p in whole] == [1, 3]
    _, Xs, ys, ws = whole[1]
    block = enc.blocks[1]
    assert np.array_equal(Xs, block.X) and np.array_equal(ys, block.y) and np.array_equal(ws, block.sample_weight)
    unweighted = make_shard(0, [X], [np.arange(6.0)], [None])
    ((_, Xu, yu, wu),) = shard_sample(unweighted, {0: 6})
    assert np.array_equal(Xu, X) and yu.tolist() == list(range(6)) and wu.tolist() == [1.0] * 6
    obj = LinearObjective(BinaryLogistic(), 2)
    with pytest.raises(BlockError, match="block 0"):
        shard_loss_grad(make_shard(0, [X], [np.array(["x"] * 6, dtype=object)], [None], y_numeric=False), obj, np.zeros(3), BlockTree(1, 2))
