"""Sharded parameters (param_sharding): the same fit as unsharded, only scalars through the driver."""

import os

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from designs import zipf_log
from interrupts import Interrupted, StopAt

from dask_dgd import train
from dask_dgd._engine.runtime.group_steps import GroupMemory
from dask_dgd._engine.sharded.driver import split
from dask_dgd._engine.sharded.params import Max, ParamLayout, SlicePenalty
from dask_dgd.exceptions import InputError, ParameterError
from dask_dgd.losses import BinaryLogistic, HalfSquaredError, LinearObjective, MultinomialLogistic, Penalty
from dask_dgd.optim import Adam

N, D = 4000, 3000


def _problem(d=D, classes=None, seed=0):
    """Sparse rows whose non-zero columns lie in the first 3000 of ``d`` (the same data
    embedded in a wider space for larger ``d``)."""
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=0.004, format="csr", random_state=seed, data_rvs=rng.standard_normal)
    X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(N, d))
    w = rng.normal(size=D)
    raw = X[:, :D] @ w
    if classes:
        y = np.digitize(raw + rng.logistic(size=N), np.quantile(raw, np.linspace(0, 1, classes + 1)[1:-1]))
    else:
        y = (raw + rng.logistic(size=N) > 0).astype(float)
    return da.from_array(X, chunks=(500, d), asarray=False), da.from_array(y.astype(float), chunks=500)


CASES = {
    "gd": (BinaryLogistic(), dict(solver="gd", max_iter=25), Penalty(alpha=1e-3)),
    "sgd-adam": (BinaryLogistic(), dict(solver="sgd", batch_size=400, max_iter=3, optimizer=Adam(0.05)),
                 Penalty(alpha=1e-4)),
    "elastic-net": (BinaryLogistic(), dict(solver="gd", max_iter=25), Penalty(alpha=2e-3, l1_ratio=0.5)),
    "multinomial": (MultinomialLogistic(3), dict(solver="gd", max_iter=15), Penalty(alpha=1e-3)),
    "squared-no-intercept": (HalfSquaredError(), dict(solver="sgd", batch_size=1000, max_iter=4, optimizer="rmsprop"),
                             Penalty(alpha=1e-2)),
}


def _fit(client, case, sharding, data=None, **extra):
    loss, kw, pen = CASES[case]
    kw = {**kw, **{k: extra.pop(k) for k in list(extra) if k in kw}}
    X, y = data if data is not None else _problem(classes=getattr(loss, "n_classes", None))
    intercept = case != "squared-no-intercept"
    obj = LinearObjective(loss, n_features=X.shape[1], fit_intercept=intercept)
    return train(obj, (X, y), penalty=pen, param_sharding=sharding, random_state=0, client=client, **kw, **extra)


@pytest.mark.parametrize("case", sorted(CASES))
def test_sharded_fit_equals_unsharded(client, case):
    """The coefficients are the same bit for bit (the gradient's sums are the same
    additions in the same order); the loss differs only by the penalty's sum over the
    owners' slices (at most a few roundings)."""
    data = client.persist(_problem(classes=3 if case == "multinomial" else None))
    ref = _fit(client, case, False, data)
    got = _fit(client, case, True, data)
    assert got.param_sharding and not ref.param_sharding
    np.testing.assert_array_equal(got.params, ref.params)
    assert got.n_iter == ref.n_iter and len(got.history) == len(ref.history)
    np.testing.assert_allclose(got.history["loss"], ref.history["loss"], rtol=1e-13, atol=0)
    np.testing.assert_allclose(got.history["grad_norm"], ref.history["grad_norm"], rtol=1e-10)
    assert got.converged == ref.converged
    for field in ref.opt_state._fields:  # the optimizer state, assembled from the owners' slices
        np.testing.assert_array_equal(getattr(got.opt_state, field), getattr(ref.opt_state, field))


def test_sharded_in_process_equals_unsharded():
    X, y = _problem()
    X, y = X.compute(), y.compute()
    obj = LinearObjective(BinaryLogistic(), n_features=D)
    kw = dict(penalty=Penalty(alpha=1e-3), solver="sgd", batch_size=500, max_iter=2, optimizer="adagrad",
              random_state=1)
    ref, got = train(obj, (X, y), **kw), train(obj, (X, y), param_sharding=True, **kw)
    np.testing.assert_array_equal(got.params, ref.params)


def test_three_owners_and_the_backoff_are_the_same_fit(make_cluster):
    """On 3 workers (3 owners), with a learning rate so large the guard backs off:
    the same halvings at the same steps and the same coefficients."""
    c = make_cluster(3, processes=False)
    data = c.persist(_problem())
    obj = LinearObjective(BinaryLogistic(), n_features=D)
    kw = dict(penalty=Penalty(alpha=1e-3), solver="gd", max_iter=12, learning_rate=400.0,
              on_divergence="backoff", client=c, rebalance=False)
    ref = train(obj, data, **kw)
    got = train(obj, data, param_sharding=True, **kw)
    assert got.history["step_size"].tolist() == ref.history["step_size"].tolist()
    assert ref.history["step_size"].iloc[-1] < 400.0  # it did back off
    np.testing.assert_array_equal(got.params, ref.params)
    assert len(got.history) == len(ref.history)


@pytest.mark.slow
def test_driver_and_worker_bytes_follow_the_non_zero_columns_not_d(client):
    """The same data in 3,000, 300,000 and 3,000,000 columns: the driver's bytes per
    step and the groups' pulled and pushed bytes do not grow with d (a pushed entry
    is 12 bytes where few columns of an owner's range are touched, 8 where most are);
    unsharded, the gradients through the tree grow with d."""
    data = {k: client.persist(_problem(k * D)) for k in (1, 100, 1000)}
    fits = {(k, True): _fit(client, "gd", True, data[k], max_iter=5) for k in data}
    fits[100, False] = _fit(client, "gd", False, data[100], max_iter=5)
    h = {k: f.history.iloc[1:].median(numeric_only=True) for k, f in fits.items()}
    for col, ratio in (("driver_bytes", 1.02), ("bytes_down", 1.02), ("bytes_up", 1.5)):
        assert h[100, True][col] <= ratio * h[1, True][col], col
        assert h[1000, True][col] <= 1.02 * h[100, True][col], col
    assert h[100, False]["bytes_up"] > 20 * h[100, True]["bytes_up"]
    assert h[100, False]["driver_bytes"] > 100 * h[100, True]["driver_bytes"]
    # (the automatic learning rate's curvature estimate rounds differently in 3,000,000 columns)
    np.testing.assert_allclose(fits[1000, True].params[:D], fits[1, True].params[:D], rtol=1e-9)
    np.testing.assert_array_equal(fits[1000, True].params[D:-1], 0.0)


@pytest.mark.parametrize("case", ["gd", "sgd-adam"])
def test_interrupted_and_resumed_sharded_fit_equals_uninterrupted(tmp_path, client, case):
    data = client.persist(_problem())
    ref = _fit(client, case, True, data)
    folder = tmp_path / "ckpt"
    with pytest.raises(Interrupted):
        _fit(client, case, True, data, checkpoint=folder, checkpoint_every=3, callbacks=[StopAt(11)])
    assert os.listdir(folder) == ["checkpoint.npz"]
    got = _fit(client, case, True, data, checkpoint=folder, checkpoint_every=3, resume=True)
    np.testing.assert_array_equal(got.params, ref.params)
    assert got.history["step"].tolist() == ref.history["step"].tolist()
    np.testing.assert_allclose(got.history["loss"], ref.history["loss"], rtol=0, atol=1e-15)


@pytest.mark.slow
def test_auto_shards_wide_models_on_a_cluster_only(client):
    import dask

    data = client.persist(_problem())
    obj = LinearObjective(BinaryLogistic(), n_features=D)
    with dask.config.set({"dgd.shard-params-min": 1000}):
        wide = train(obj, data, solver="gd", max_iter=2, param_sharding="auto", client=client)
        lbfgs = train(obj, data, max_iter=2, param_sharding="auto", client=client)  # solver "auto": L-BFGS
        local_sgd = train(obj, data, solver="gd", mode="local", max_iter=2, param_sharding="auto", client=client)
        in_process = train(obj, tuple(a.compute() for a in _problem()), solver="gd", max_iter=2,
                           param_sharding="auto")
    narrow = train(obj, data, solver="gd", max_iter=2, param_sharding="auto", client=client)
    assert wide.param_sharding and lbfgs.param_sharding and lbfgs.solver == "lbfgs"
    assert not (local_sgd.param_sharding or in_process.param_sharding or narrow.param_sharding)


@pytest.mark.parametrize("kwargs, message", [
    (dict(param_sharding="yes"), "param_sharding must be 'auto', True or False; got 'yes'"),
    (dict(param_sharding=1), "param_sharding must be 'auto', True or False; got 1"),
    (dict(param_sharding=True, solver="newton"), "solver='newton' is not supported (only 'lbfgs', 'gd', 'sgd' and 'online')"),
    (dict(param_sharding=True, solver="gd", mode="local"), "mode='local' is not supported (only 'sync' and 'async')"),
    (dict(param_sharding=True, solver="gd", compression="topk:0.1"), "compression is not supported"),
    (dict(param_sharding=True, dense=True), "it needs sparse (CSR) X"),
    (dict(param_sharding=True, offset=True), "offsets are not supported"),
])
def test_what_sharding_does_not_support_is_refused(kwargs, message):
    kwargs = dict(kwargs)
    X, y = (a.compute() for a in _problem())
    if kwargs.pop("dense", False):
        X = X.toarray()[:, :50]
    offset = kwargs.pop("offset", False)
    if offset:
        X = sp.hstack([X, sp.csr_matrix(np.zeros((N, 1)))], format="csr")
    obj = LinearObjective(BinaryLogistic(), n_features=X.shape[1] - offset, offset=offset)
    with pytest.raises(ParameterError) as err:
        train(obj, (X, y), max_iter=2, **kwargs)
    assert message in str(err.value)


def test_layout_penalty_and_assembly():
    """The owners' ranges cover the parameter matrix's rows once, the intercept with
    the last; a slice's penalty is the full penalty's slice; assembly inverts the split."""
    obj = LinearObjective(MultinomialLogistic(3), n_features=10)
    lay = ParamLayout.split(obj, 3)
    assert lay.bounds == (0, 4, 7, 11) and lay.n_params == 33
    assert [lay.flat_range(o) for o in range(3)] == [(0, 12), (12, 21), (21, 33)]
    x = np.random.default_rng(0).normal(size=33)
    pen = Penalty(alpha=0.3, l1_ratio=0.25)
    value, grad = pen.smooth_value_gradient(x, obj)
    parts = [SlicePenalty.of(pen, lay, o) for o in range(3)]
    assert [p.n_coef for p in parts] == [12, 9, 9]
    np.testing.assert_array_equal(np.concatenate([p.add_gradient(np.zeros_like(s), s)
                                                  for p, s in zip(parts, split(x, lay))]), grad)
    assert sum(p.value(s) for p, s in zip(parts, split(x, lay))) == pytest.approx(value, rel=1e-14)
    np.testing.assert_array_equal(np.concatenate([p.prox(s, 0.5) for p, s in zip(parts, split(x, lay))]),
                                  pen.prox(x, 0.5, obj))
    state = Adam(0.1).init(x + 1.0)
    parts = split(state, lay)
    assert all(p.count == 0 for p in parts)
    for field in ("mu", "nu"):
        np.testing.assert_array_equal(np.concatenate([getattr(p, field) for p in parts]), getattr(state, field))
    np.testing.assert_array_equal(np.concatenate(split(x, lay)), x)
    assert Max(2.0) + 1.0 == 2.0 and 3.0 + Max(2.0) == 3.0 and isinstance(Max(1.0) + Max(4.0), Max)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_estimator_with_sharding_and_early_stopping_equals_unsharded(client):
    """An estimator's param_sharding, with early stopping on the validation loss (the
    validation groups pull the coefficients their rows touch): the same fit."""
    from dask_dgd import LogisticRegression

    X, y = client.persist(_problem())
    kw = dict(solver="sgd", batch_size=500, max_iter=6, alpha=1e-3, early_stopping=True, n_iter_no_change=2,
              tol=1e-9, random_state=0, client=client)
    ref = LogisticRegression(param_sharding=False, **kw).fit(X, y)
    got = LogisticRegression(param_sharding=True, **kw).fit(X, y)
    np.testing.assert_array_equal(got.coef_, ref.coef_)
    np.testing.assert_array_equal(got.intercept_, ref.intercept_)
    scored = ref.history_["val_loss"].notna()
    assert scored.sum() >= 2
    np.testing.assert_allclose(got.history_["val_loss"][scored], ref.history_["val_loss"][scored], rtol=1e-12)
    assert got.n_iter_ == ref.n_iter_


def test_estimator_refuses_a_bad_param_sharding_and_a_scorer():
    from dask_dgd import LogisticRegression

    X, y = (a.compute() for a in _problem())
    with pytest.raises(ParameterError, match="param_sharding"):
        LogisticRegression(param_sharding="on").fit(X, y)
    with pytest.raises(ParameterError, match=r"early stopping scores only the validation loss \(scoring=None\)"):
        LogisticRegression(solver="sgd", batch_size=500, param_sharding=True, early_stopping=True, scoring="accuracy",
                           max_iter=2).fit(X, y)


@pytest.mark.parametrize("case", ["logistic", "multinomial"])
@pytest.mark.slow
def test_sharded_lbfgs_reaches_the_unsharded_optimum(client, case):
    """L-BFGS over sharded vectors (the two-loop recursion on the owners' dot products):
    the same iterations as unsharded up to rounding, and the same optimum to 1e-10.
    Both without scaling (``dgd.scale-features`` off: the unsharded fit centres its
    columns, the sharded one scales them diagonally), so the iterations can be compared;
    the default, diagonally scaled sharded fit reaches the same optimum."""
    loss = BinaryLogistic() if case == "logistic" else MultinomialLogistic(3)
    X, y = client.persist(_problem(classes=3 if case == "multinomial" else None))
    obj = LinearObjective(loss, n_features=D)
    kw = dict(penalty=Penalty(alpha=1e-2), solver="lbfgs", max_iter=200, tol=1e-12, client=client)
    with dask.config.set({"dgd.scale-features": False}):
        ref = train(obj, (X, y), **kw)
        got = train(obj, (X, y), param_sharding=True, **kw)
    assert ref.history.attrs["coordinates"] == got.history.attrs["coordinates"] == "original"
    assert got.param_sharding and got.solver == "lbfgs"
    np.testing.assert_allclose(got.params, ref.params, rtol=0, atol=1e-10)
    early = min(8, len(ref.history))  # before rounding differences can add up
    np.testing.assert_allclose(got.history["loss"][:early], ref.history["loss"][:early], rtol=1e-12)
    assert abs(got.n_iter - ref.n_iter) <= 3
    scaled = train(obj, (X, y), param_sharding=True, **kw)
    assert scaled.history.attrs["coordinates"] == "scaled" and scaled.converged
    np.testing.assert_allclose(scaled.params, ref.params, rtol=0, atol=1e-10)


def test_sharded_lbfgs_resumes_from_a_checkpoint(tmp_path, client):
    data = client.persist(_problem())
    obj = LinearObjective(BinaryLogistic(), n_features=D)
    kw = dict(penalty=Penalty(alpha=1e-2), solver="lbfgs", max_iter=12, tol=1e-12, client=client,
              param_sharding=True)
    ref = train(obj, data, **kw)
    folder = tmp_path / "ckpt"
    with pytest.raises(Interrupted):
        train(obj, data, checkpoint=folder, checkpoint_every=2, callbacks=[StopAt(9)], **kw)
    got = train(obj, data, checkpoint=folder, checkpoint_every=2, resume=True, **kw)
    np.testing.assert_array_equal(got.params, ref.params)
    np.testing.assert_array_equal(got.history["loss"], ref.history["loss"])


def test_a_sparse_start_is_expanded_where_the_parameters_are_kept(client):
    """``params0`` as a sparse row (the estimators' intercept start): the same fit as the
    dense start, sharded (each owner expands its slice) or not."""
    data = client.persist(_problem())
    obj = LinearObjective(BinaryLogistic(), n_features=D)
    dense = np.zeros(obj.n_params)
    dense[-1], dense[7] = -1.2, 0.3
    start = sp.csr_matrix(dense)
    kw = dict(penalty=Penalty(alpha=1e-3), solver="gd", max_iter=5, client=client)
    ref = train(obj, data, params0=dense, **kw)
    for sharding in (False, True):
        got = train(obj, data, params0=start, param_sharding=sharding, **kw)
        np.testing.assert_array_equal(got.params, ref.params)
        assert got.history["loss"].iloc[0] == pytest.approx(ref.history["loss"].iloc[0], rel=1e-14)


def test_column_scales_are_the_jacobi_diagonal_of_the_data_and_penalty():
    """The owners' diagonal scaling (sharded_lbfgs.column_scales): sqrt(weighted mean of
    each column's squares + l2 / kappa), the intercept's 1, ones for empty columns,
    assembled from every group's sums whatever the split of rows and columns."""
    from types import SimpleNamespace

    from dask_dgd._engine.sharded.exchange import LocalExchange
    from dask_dgd._engine.sharded.lbfgs import column_scales
    from dask_dgd._engine.sharded.params import sharded_column_squares, sharded_setup

    X, _ = zipf_log(n=900, d=50)
    X = sp.hstack([X, sp.csr_matrix((900, 3))], format="csr")  # three empty columns
    rng = np.random.default_rng(0)
    w = rng.uniform(0.5, 2.0, 900)
    obj = LinearObjective(BinaryLogistic(), n_features=X.shape[1])
    layout = ParamLayout.split(obj, 3)
    cuts = [(0, 200), (200, 500), (500, 900)]
    shards = [SimpleNamespace(blocks=tuple(SimpleNamespace(index=i, X=X[a:b], y=np.zeros(b - a),
                                                           sample_weight=w[a:b], n_rows=b - a)
                                           for i, (a, b) in [(g, cuts[g])]))
              for g in range(3)]
    scratches = [GroupMemory() for _ in range(3)]
    exchange = LocalExchange(scratches)
    for g in range(3):
        sharded_setup(shards[g], scratches[g], obj, layout, exchange, g, None, None)
    for g in range(3):
        sharded_column_squares(shards[g], scratches[g], exchange)
    l2, kappa = 0.3, 0.25
    got = np.concatenate([column_scales(scratches[o].modes["sharded"], SlicePenalty.of(Penalty(alpha=l2), layout, o), kappa)
                          for o in range(3)])
    m = np.asarray(X.multiply(X).T @ w).ravel() / w.sum()
    want = np.append(np.sqrt(m + l2 / kappa), 1.0)
    np.testing.assert_allclose(got, want, rtol=1e-13)
    assert got.size == layout.n_params


def test_scaled_sharded_lbfgs_needs_fewer_iterations_on_unscaled_zipf_columns(client):
    """The wide model's default (param_sharding, L-BFGS) runs in diagonally scaled
    coordinates: on Zipf-frequent columns with scales 1e-2..1e2 it reaches the
    optimum (the in-process Newton fit's objective, to 1e-6 relative) in at most half
    the iterations the same solver needs in the data's units (which does not get there
    in 60)."""
    X, y = zipf_log(n=3000, d=500)
    Xd, yd = client.persist([da.from_array(X, chunks=(750, X.shape[1]), asarray=False), da.from_array(y, chunks=750)])
    obj = LinearObjective(BinaryLogistic(), n_features=X.shape[1])
    pen = Penalty(alpha=1e-3)
    ref = train(obj, (X, y), penalty=pen, solver="newton", tol=1e-10, client=None)
    best = ref.history["loss"].min()

    def iterations_to_optimum(result):
        per = result.history.groupby("iteration")["loss"].min()
        hit = per[per <= best + 1e-6 * abs(best)]
        return int(hit.index[0]) if len(hit) else None

    kw = dict(penalty=pen, solver="lbfgs", max_iter=60, tol=1e-8, client=client, param_sharding=True)
    scaled = train(obj, (Xd, yd), **kw)
    with dask.config.set({"dgd.scale-features": False}):
        plain = train(obj, (Xd, yd), **kw)
    assert scaled.history.attrs["coordinates"] == "scaled" and plain.history.attrs["coordinates"] == "original"
    fast, slow = iterations_to_optimum(scaled), iterations_to_optimum(plain)
    assert fast is not None and (slow is None or fast <= slow / 2), (fast, slow)


def _held_out_logloss(params, X, y):
    raw = X @ params[:-1] + params[-1]
    return float(np.mean(np.logaddexp(0.0, raw) - y * raw))


@pytest.mark.parametrize("sharding", [False, True])
def test_validation_data_is_scored_after_every_iteration(client, sharding):
    """``train(validation_data=...)``: the held-out rows' mean loss after every
    iteration, as computed on the driver from the parameters of that iteration, with
    the parameters sharded or not; the fit's coefficients do not change."""
    X, y = client.persist(_problem(seed=0))
    Xv, yv = _problem(seed=1)
    Xv, yv = Xv.compute(), yv.compute()
    obj = LinearObjective(BinaryLogistic(), n_features=D)
    kw = dict(penalty=Penalty(alpha=1e-3), solver="gd", max_iter=6, tol=0.0, client=client, random_state=0,
              param_sharding=sharding)
    plain = train(obj, (X, y), **kw)
    steps = []
    got = train(obj, (X, y), validation_data=(Xv, yv), n_iter_no_change=100, callbacks=[steps.append], **kw)
    np.testing.assert_array_equal(got.params, plain.params)
    assert got.param_sharding == sharding
    h = got.history
    assert h["val_loss"].notna().all() and (h["val_time"] > 0).all()
    np.testing.assert_allclose(h["val_score"], -h["val_loss"], rtol=0, atol=0)
    # the last one is the held-out loss of the final coefficients
    np.testing.assert_allclose(h["val_loss"].iloc[-1], _held_out_logloss(got.params, Xv, yv), rtol=1e-12)
    assert [s["val_loss"] for s in steps] == h["val_loss"].tolist()


def test_validation_data_errors(client):
    X, y = _problem()
    obj = LinearObjective(BinaryLogistic(), n_features=D)
    with pytest.raises(ParameterError, match="give validation_data or validator, not both"):
        train(obj, (X, y), validation_data=(X, y), validator=object(), client=client)
    with pytest.raises(InputError, match=r"validation_data must be a tuple \(X, y\) or \(X, y, sample_weight\); "
                                         "got ndarray"):
        train(obj, (X, y), validation_data=np.zeros(3), client=client)
    with pytest.raises(InputError, match="validation_data has 7 columns; the model has 3000 features"):
        train(obj, (X, y), validation_data=(np.zeros((5, 7)), np.zeros(5)), client=client)
