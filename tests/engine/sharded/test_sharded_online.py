"""``solver="online"`` over sharded parameters: the unsharded fit, compact copies on the groups."""

import dataclasses
import os
import warnings

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from interrupts import Interrupted, StopAt

from dask_dgd import ConvergenceWarning, DivergenceError, LogisticRegression, train
from dask_dgd._engine import update
from dask_dgd._engine.modes import online
from dask_dgd._engine.sharded import driver
from dask_dgd.losses import BinaryLogistic, HalfSquaredError, LinearObjective, MultinomialLogistic, Penalty

N, D = 3000, 2000


def _data(d=D, seed=0):
    """Sparse rows whose non-zero columns lie in the first ``D`` of ``d``; targets of
    three losses."""
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=0.005, format="csr", random_state=seed, data_rvs=rng.standard_normal)
    X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(N, d))
    raw = X[:, :D] @ rng.normal(size=D)
    binary = (raw + rng.logistic(size=N) > 0).astype(float)
    classes = np.digitize(raw + rng.logistic(size=N), np.quantile(raw, [1 / 3, 2 / 3])).astype(float)
    return X, {"binary": binary, "multinomial": classes, "squared": raw}


LOSSES = {"binary": (BinaryLogistic(), True), "multinomial": (MultinomialLogistic(3), True),
          "squared": (HalfSquaredError(), False)}


def _train(X, y, target, sharding, **kw):
    loss, intercept = LOSSES[target]
    obj = LinearObjective(loss, n_features=X.shape[1], fit_intercept=intercept)
    kw = {**dict(penalty=Penalty(alpha=1e-3), solver="online", max_iter=3, tol=0.0, random_state=1), **kw}
    return train(obj, (X, y), param_sharding=sharding, **kw)


def _same_fit(got, ref, sharded=True):
    """The groups' changes are the unsharded ones bit for bit and two or three groups'
    sums are the same additions: the same coefficients; the loss differs only by the
    penalty summed over the owners' slices."""
    assert got.param_sharding is sharded and not ref.param_sharding
    np.testing.assert_array_equal(got.params, ref.params)
    assert len(got.history) == len(ref.history) and got.n_iter == ref.n_iter
    np.testing.assert_allclose(got.history["loss"], ref.history["loss"], rtol=1e-13, atol=0)
    np.testing.assert_allclose(got.history["grad_norm"].iloc[1:], ref.history["grad_norm"].iloc[1:], rtol=1e-9)
    assert got.history["updates_per_group"].tolist() == ref.history["updates_per_group"].tolist()


@pytest.fixture(scope="module")
def data():
    return _data()


#: The clusters' scheduler never steals work (see ``client``).
NO_STEALING = {"distributed.scheduler.work-stealing": False}


@pytest.fixture(scope="module")
def client(make_module_cluster):
    """Two worker processes whose scheduler never steals work.  These tests compare two
    fits bit for bit, and online training averages one model per group: a block must
    stay in the group Dask first placed it in.  Shard tasks go to the worker holding
    their blocks but allow others (a lost worker is survivable), so on a loaded machine
    work stealing could move one between the two fits and change the groups."""
    return make_module_cluster(2, config=NO_STEALING)


@pytest.mark.parametrize("optimizer, batch_size", [("normalized", None), ("adagrad", 300), ("sgd", None),
                                                   ("sgd", 300)])
@pytest.mark.parametrize("target", sorted(LOSSES))
def test_sharded_online_equals_unsharded(client, data, target, optimizer, batch_size):
    X, ys = data
    Xd = da.from_array(X, chunks=(500, X.shape[1]), asarray=False)
    yd = da.from_array(ys[target], chunks=500)
    Xd, yd = client.persist([Xd, yd])
    kw = dict(optimizer=optimizer, batch_size=batch_size, client=client)
    _same_fit(_train(Xd, yd, target, True, **kw), _train(Xd, yd, target, False, **kw))


def test_in_process_and_three_owners_are_the_unsharded_fit(make_cluster, data):
    X, ys = data
    for kw in (dict(optimizer="normalized"), dict(optimizer="sgd", batch_size=250, local_steps=3)):
        _same_fit(_train(X, ys["binary"], "binary", True, **kw), _train(X, ys["binary"], "binary", False, **kw))
    c = make_cluster(3, processes=False, config=NO_STEALING)
    Xd, yd = c.persist([da.from_array(X, chunks=(400, D), asarray=False), da.from_array(ys["binary"], chunks=400)])
    kw = dict(optimizer="adagrad", client=c, rebalance=False)
    got = _train(Xd, yd, "binary", True, **kw)
    _same_fit(got, _train(Xd, yd, "binary", False, **kw))
    assert len(got.history["updates_per_group"].iloc[-1]) == 3


def test_a_start_is_read_where_it_is_kept(client, data):
    """A warm start, dense or sparse: its columns of the start's sample are read on
    the driver, the owners take their slices; the penalty at it starts the guard."""
    X, ys = data
    Xd, yd = client.persist([da.from_array(X, chunks=(500, D), asarray=False), da.from_array(ys["binary"], chunks=500)])
    start = _train(Xd, yd, "binary", False, max_iter=1, client=client).params
    for params0 in (start, sp.csr_matrix(start.reshape(1, -1))):
        got = _train(Xd, yd, "binary", True, params0=params0, client=client)
        _same_fit(got, _train(Xd, yd, "binary", False, params0=start, client=client))
    assert got.history["loss"].iloc[0] < 0.69  # (the start's, not zeros')


def test_bytes_follow_the_non_zero_columns_not_d(client):
    """The same rows in 2,000 and 2,000,000 columns: the groups' pulled and pushed bytes
    and the driver's are the same; unsharded, the broadcast grows with d."""
    fits = {}
    for d in (D, 1000 * D):
        X, ys = _data(d)
        Xd, yd = client.persist([da.from_array(X, chunks=(500, d), asarray=False),
                                 da.from_array(ys["binary"], chunks=500)])
        fits[d] = _train(Xd, yd, "binary", True, client=client)
    wide = _train(Xd, yd, "binary", False, client=client, max_iter=1)
    h = {d: f.history.iloc[1:].median(numeric_only=True) for d, f in fits.items()}
    for col in ("bytes_up", "bytes_down", "driver_bytes"):
        assert h[1000 * D][col] <= 1.02 * h[D][col], col
    assert h[D]["bytes_down"] > 0 and h[D]["bytes_up"] > 0
    assert wide.history["bytes_down"].iloc[-1] > 100 * h[1000 * D]["bytes_down"]
    np.testing.assert_array_equal(fits[1000 * D].params[D:-1], 0.0)


def test_interrupted_and_resumed_equals_uninterrupted(tmp_path, client, data):
    X, ys = data
    Xd, yd = client.persist([da.from_array(X, chunks=(500, D), asarray=False), da.from_array(ys["binary"], chunks=500)])
    kw = dict(optimizer="normalized", max_iter=6, client=client)
    ref = _train(Xd, yd, "binary", True, **kw)
    folder = tmp_path / "ckpt"
    with pytest.raises(Interrupted):
        _train(Xd, yd, "binary", True, checkpoint=folder, checkpoint_every=2, callbacks=[StopAt(4)], **kw)
    assert os.listdir(folder) == ["checkpoint.npz"]
    got = _train(Xd, yd, "binary", True, checkpoint=folder, checkpoint_every=2, resume=True, **kw)
    np.testing.assert_array_equal(got.params, ref.params)
    assert got.history["step"].tolist() == ref.history["step"].tolist()
    np.testing.assert_array_equal(got.history["loss"], ref.history["loss"])


def test_divergence_backs_off_and_goes_back_as_unsharded(client, monkeypatch):
    """Per-row passes that diverge, and micro-batch rounds whose start exploded (the
    previous round is undone: the owners go back to its start), on 2 workers: the
    same halvings at the same rounds and the same coefficients as unsharded."""
    rng = np.random.default_rng(5)
    X = sp.random(2000, 50, density=0.2, format="csr", random_state=5, data_rvs=rng.standard_normal) * 30.0
    y = X @ rng.normal(size=50)
    Xd, yd = client.persist([da.from_array(X, chunks=(500, 50), asarray=False), da.from_array(y, chunks=500)])
    went_back = []
    original = driver.ShardedOnline._go_back
    monkeypatch.setattr(driver.ShardedOnline, "_go_back", lambda self, prev: (went_back.append(self.rounds),
                                                                              original(self, prev))[1])
    for kw in (dict(learning_rate=10.0), dict(learning_rate=0.01, batch_size=100, local_steps=1)):
        kw = dict(optimizer="sgd", max_iter=4, on_divergence="backoff", penalty=Penalty(alpha=0.0), client=client,
                  **kw)
        ref = _train(Xd, yd, "squared", False, **kw)
        got = _train(Xd, yd, "squared", True, **kw)
        np.testing.assert_array_equal(got.history["step_size"], ref.history["step_size"])
        np.testing.assert_array_equal(got.params, ref.params)
        assert ref.optimizer.learning_rate < kw["learning_rate"]  # (it did back off)
    assert went_back  # (the second fit undid a round)
    with pytest.raises(DivergenceError, match=r"the objective exploded \(initial loss .*\) in round 1 .* with "
                                              "learning rate 10"):
        _train(X, y, "squared", True, optimizer="sgd", learning_rate=10.0, on_divergence="raise",
               penalty=Penalty(alpha=0.0))


def test_going_back_after_a_round_that_moved_nothing(monkeypatch):
    """An accepted round whose rows all weighed zero moves nothing; when the next
    round's start explodes, the fit goes back to that round's start, as unsharded
    (faults by progress: round 2 weighs nothing, the guard's third look explodes)."""
    rng = np.random.default_rng(5)
    X = sp.random(2000, 50, density=0.2, format="csr", random_state=5, data_rvs=rng.standard_normal)
    y = X @ rng.normal(size=50)
    exploded = update.Guard.exploded

    def fit(sharding):
        calls = {"round": 0, "guard": 0}

        def weightless_second(passes):
            def wrapped(self, *args):
                total = passes(self, *args)
                calls["round"] += 1
                return dataclasses.replace(total, weight_sum=0.0) if calls["round"] == 2 else total
            return wrapped

        def third_explodes(self, value, **kw):
            calls["guard"] += 1
            return True if calls["guard"] == 3 else exploded(self, value, **kw)

        with monkeypatch.context() as m:
            for cls in (online.OnlineEpochs, driver.ShardedOnline):
                m.setattr(cls, "_passes", weightless_second(cls.__dict__["_passes"]))
            m.setattr(update.Guard, "exploded", third_explodes)
            return _train(X, y, "squared", sharding, optimizer="sgd", learning_rate=0.01, batch_size=100,
                          local_steps=1, max_iter=1, on_divergence="backoff", penalty=Penalty(alpha=0.0))

    ref, got = fit(False), fit(True)
    assert ref.history["grad_norm"].iloc[2] == 0.0  # (round 2 moved nothing)
    np.testing.assert_array_equal(got.history["step_size"], ref.history["step_size"])
    np.testing.assert_array_equal(got.params, ref.params)


def _placed(client, X, y, workers):
    """``X``, ``y`` in blocks of 500 rows, block ``i`` on ``workers[i]``.  Fresh keys
    (``hash=False``): scattered again with another placement, the same content must not
    find the first placement's keys still held on their workers (released or not, by
    then: that depends on garbage collection and the scheduler's pace)."""
    blocks = []
    for i, w in enumerate(workers):
        rows = slice(500 * i, 500 * (i + 1))
        fx, fy = client.scatter([X[rows], y[rows]], workers=[w], hash=False)
        blocks.append((da.from_delayed(dask.delayed(fx), shape=(500, X.shape[1]), dtype=float,
                                       meta=sp.csr_matrix((0, X.shape[1]))),
                       da.from_delayed(dask.delayed(fy), shape=(500,), dtype=float)))
    return da.concatenate([b[0] for b in blocks]), da.concatenate([b[1] for b in blocks])


def test_a_resumed_fit_whose_blocks_moved_is_set_up_again(tmp_path, client, data, monkeypatch):
    """A checkpoint taken with the blocks on workers [A, A, B, B] resumed with them on
    [A, B, A, B]: the blocks go back, the owners are set up again and get their slices."""
    X, ys = data
    X, y = X[:2000], ys["binary"][:2000]
    a, b = sorted(client.scheduler_info()["workers"])
    kw = dict(optimizer="sgd", max_iter=6, client=client, rebalance=False)
    Xd, yd = _placed(client, X, y, [a, a, b, b])
    ref = _train(Xd, yd, "binary", True, **kw)
    folder = tmp_path / "ckpt"
    with pytest.raises(Interrupted):
        _train(Xd, yd, "binary", True, checkpoint=folder, checkpoint_every=2, callbacks=[StopAt(5)], **kw)
    Xd, yd = _placed(client, X, y, [a, b, a, b])
    regrouped = []
    original = driver.ShardedSource.regrouped
    monkeypatch.setattr(driver.ShardedSource, "regrouped", lambda self: (regrouped.append(1), original(self))[1])
    got = _train(Xd, yd, "binary", True, checkpoint=folder, checkpoint_every=2, resume=True, **kw)
    assert regrouped == [1]
    np.testing.assert_array_equal(got.params, ref.params)


@pytest.mark.parametrize("solver", ["online", "gd"])
def test_a_resumed_fit_that_had_converged_returns_its_result(tmp_path, client, data, solver):
    X, ys = data
    Xd, yd = client.persist([da.from_array(X, chunks=(500, D), asarray=False), da.from_array(ys["binary"], chunks=500)])
    kw = dict(solver=solver, max_iter=50, tol=1e-2, client=client, checkpoint=tmp_path / solver)
    done = _train(Xd, yd, "binary", True, **kw)
    assert done.converged and np.any(done.params != 0)
    again = _train(Xd, yd, "binary", True, resume=True, **kw)
    assert again.converged
    np.testing.assert_array_equal(again.params, done.params)


def test_four_groups_sum_in_the_unsharded_tree(make_cluster, data):
    X, ys = data
    c = make_cluster(4, processes=False, config=NO_STEALING)
    Xd, yd = c.persist([da.from_array(X, chunks=(375, D), asarray=False), da.from_array(ys["binary"], chunks=375)])
    for kw in (dict(optimizer="normalized"), dict(optimizer="sgd", batch_size=400, local_steps=2)):
        kw = dict(client=c, rebalance=False, split_every=2, **kw)
        _same_fit(_train(Xd, yd, "binary", True, **kw), _train(Xd, yd, "binary", False, **kw))


def test_micro_batches_pull_only_their_rows_columns(client):
    X, ys = _data(100 * D)
    Xd, yd = client.persist([da.from_array(X, chunks=(500, X.shape[1]), asarray=False),
                             da.from_array(ys["binary"], chunks=500)])
    passes = _train(Xd, yd, "binary", True, client=client, max_iter=1)
    micro = _train(Xd, yd, "binary", True, client=client, max_iter=1, batch_size=60, local_steps=1)
    assert micro.history["bytes_down"].iloc[1:].median() < 0.3 * passes.history["bytes_down"].iloc[1:].median()


def test_estimator_and_auto_sharding(client, data, monkeypatch):
    X, ys = data
    Xd, yd = client.persist([da.from_array(X, chunks=(500, D), asarray=False), da.from_array(ys["binary"], chunks=500)])
    built = []
    build = driver.ShardedOnline.build.__func__
    monkeypatch.setattr(driver.ShardedOnline, "build", classmethod(lambda cls, *a: (built.append(1), build(cls, *a))[1]))
    kw = dict(solver="online", alpha=1e-3, max_iter=3, tol=0.0, random_state=0, client=client)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = LogisticRegression(param_sharding=False, **kw).fit(Xd, yd)
        assert not built
        got = LogisticRegression(param_sharding=True, sparse_coef=True, **kw).fit(Xd, yd)
        assert len(built) == 1
        with dask.config.set({"dgd.shard-params-min": 1000}):
            auto = LogisticRegression(**kw).fit(Xd, yd)
        assert len(built) == 2
    assert sp.issparse(got.coef_)
    np.testing.assert_array_equal(got.coef_.toarray(), ref.coef_)
    np.testing.assert_array_equal(auto.coef_, ref.coef_)
    np.testing.assert_array_equal(got.predict_proba(X), ref.predict_proba(X))
