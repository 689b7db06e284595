"""``dask_dgd.train``: the functional layer under every estimator."""

import dask.array as da
import numpy as np
import pytest

import dask_dgd
from dask_dgd import InputError, LinearRegression, LogisticRegression, ParameterError, optim
from dask_dgd.losses import BinaryLogistic, HalfSquaredError, LinearObjective, Penalty

rng = np.random.default_rng(0)
X = rng.standard_normal((3000, 4))
Y = (X @ [1.0, -1.0, 0.5, 2.0] + rng.standard_normal(3000) > 0).astype(float)


def test_train_equals_the_estimator_in_process():
    objective = LinearObjective(BinaryLogistic(), 4)
    exact = dask_dgd.train(objective, (X, Y), penalty=Penalty(alpha=1e-3), tol=1e-10)
    est = LogisticRegression(alpha=1e-3, tol=1e-10).fit(X, Y)
    coef, intercept = objective.unpack(exact.params)
    # the estimator starts from the log-odds of the classes, train() from zeros: same optimum
    np.testing.assert_allclose(coef[:, 0], est.coef_[0], atol=1e-8)
    np.testing.assert_allclose(intercept, est.intercept_, atol=1e-8)
    assert exact.solver == "newton" and exact.converged  # "auto": 5 parameters, a Hessian
    result = dask_dgd.train(objective, (X, Y), penalty=Penalty(alpha=1e-3), solver="gd", optimizer="adam",
                            max_iter=50, tol=0.0)
    assert isinstance(result, dask_dgd.FitResult)
    assert result.solver == "gd" and result.mode == "sync" and result.n_iter == 50 and not result.converged
    assert len(result.history) == 51 and list(result.history.columns[:3]) == ["step", "iteration", "loss"]
    assert result.bytes_communicated["total"] > 0 and result.local is None
    assert isinstance(result.optimizer, optim.Adam) and result.opt_state.count == 50
    # the totals summed from the records are the history's
    from dask_dgd._engine.runtime.monitor import communicated

    assert result.bytes_communicated == communicated(result.history) == communicated(result.records)
    assert result.history is result.history and len(result.records) == 51  # built once, when asked for


def test_train_on_a_cluster_in_every_mode(client):
    Xd, yd = client.persist([da.from_array(X, chunks=(500, -1)), da.from_array(Y, chunks=500)])
    objective = LinearObjective(HalfSquaredError(), 4)
    exact = np.linalg.lstsq(np.c_[X, np.ones(3000)], Y, rcond=None)[0]
    newton = dask_dgd.train(objective, (Xd, yd), tol=1e-10, client=client)
    assert newton.solver == "newton" and newton.converged
    np.testing.assert_allclose(newton.params, exact, atol=1e-12)
    lbfgs = dask_dgd.train(objective, (Xd, yd), solver="lbfgs", tol=1e-10, client=client)
    assert lbfgs.solver == "lbfgs" and lbfgs.converged
    np.testing.assert_allclose(lbfgs.params, exact, atol=1e-8)
    for mode in ("local", "async"):
        result = dask_dgd.train(objective, (Xd, yd), mode=mode, optimizer="sgd", max_iter=300, tol=0.0,
                                max_staleness=1, client=client)
        assert result.mode == mode and result.solver == "gd"
        np.testing.assert_allclose(result.params, exact, atol=2e-2)
    # the same result as the estimator over the same shards' engine
    est = LinearRegression(tol=1e-10, client=client).fit(Xd, yd)
    np.testing.assert_allclose(np.append(est.coef_, est.intercept_), lbfgs.params, atol=1e-8)


def test_train_errors():
    objective = LinearObjective(BinaryLogistic(), 4)
    with pytest.raises(InputError, match="data must be a ShardSet or a tuple .* got ndarray"):
        dask_dgd.train(objective, X)
    with pytest.raises(ParameterError, match="solver must be one of"):
        dask_dgd.train(objective, (X, Y), solver="bfgs")
    with pytest.raises(ParameterError, match="mode must be one of"):
        dask_dgd.train(objective, (X, Y), mode="ring")
    with pytest.raises(ParameterError, match="resume=True needs checkpoint=<folder>"):
        dask_dgd.train(objective, (X, Y), resume=True)
    with pytest.raises(ParameterError, match="solver='sgd' needs a batch_size"):
        dask_dgd.train(objective, (X, Y), solver="sgd")
    with pytest.raises(ParameterError, match="outer_optimizer must be a first-order optimizer; got str"):
        dask_dgd.train(objective, (X, Y), mode="local", outer_optimizer="adam")
